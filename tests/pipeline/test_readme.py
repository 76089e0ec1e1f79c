"""The README's Spark snippet, run as written on the session's real SparkSession: it copies a
topic's bodies to another topic, and the copy is read back."""

from __future__ import annotations

import re
from typing import Any

from aiorocketmq import pipeline
from aiorocketmq.protocol.message import Message
from tests.pipeline.conftest import TestCluster, unique
from tests.support import ROOT


def spark_snippet() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    snippets = [code for code in re.findall(r"```python\n(.*?)```", readme, re.S) if "spark." in code]
    assert len(snippets) == 1, "the README has one Spark snippet"
    return snippets[0]


def test_the_readme_spark_snippet_copies_a_topic(spark: Any, cluster: TestCluster) -> None:
    orders, results = unique("ReadmeOrders"), unique("ReadmeResults")
    cluster.create_topic(orders)
    cluster.create_topic(results)
    sent = {f'{{"id": {i}}}' for i in range(20)}
    cluster.produce([Message(orders, body.encode()) for body in sent])

    code = spark_snippet()
    # The snippet's names, swapped for this run's: a shared cluster, and the address it got.
    for old, new in (('"Orders"', f'"{orders}"'), ("'Results'", f"'{results}'")):
        assert old in code
        code = code.replace(old, new)
    code = code.replace("127.0.0.1:9876", cluster.namesrv)
    # The session was built before the test cluster's threads, which leave this JVM thread
    # without an active session (docs/spark.md, Troubleshooting); a script that builds its
    # session and then runs the snippet, as a user's does, has one.
    pipeline.activate(spark)
    exec(compile(code, "README.md", "exec"), {"spark": spark})

    copied = spark.read.format("rocketmq").option("namesrv", cluster.namesrv).option("topic", results).load()
    assert {row.body.decode() for row in copied.select("body").collect()} == sent
