"""SQL92 against Apache RocketMQ: Apache's 4.9 Java push consumer subscribes by SQL92 to our
broker (and its start-up check refuses a malformed expression with our reason); and our
filter agrees with Apache's own on every case of the table in
``tests/protocol/test_sql92.py`` (matches, and expressions refused at compile time) is also
run through the broker's filter classes (``FilterFactory`` compile, ``MessageEvaluationContext``
evaluation) in one JVM, and the two must agree. The 5.x string tests (CONTAINS, STARTSWITH,
ENDSWITH) are left out: the 4.9 reference does not have them."""

from __future__ import annotations

import asyncio
import base64
import subprocess
from pathlib import Path

import pytest

from aiorocketmq.client import Admin, Message, Producer
from aiorocketmq.protocol.message import encode_properties
from aiorocketmq.protocol.sql92 import Sql92Error, compile_sql92
from tests.client.conftest import start_cluster
from tests.interop.harness import SERVER_HEAP, Toolchain
from tests.protocol.test_mutants_sql92 import CASES as MUTANT_CASES
from tests.protocol.test_mutants_sql92 import REASONS
from tests.protocol.test_sql92 import CASES, MALFORMED

ORACLE = Path(__file__).resolve().parent / "sql92" / "Sql92Oracle.java"
_FIVE_X = ("CONTAINS", "STARTSWITH", "ENDSWITH")


def ours(expression: str, properties: dict[str, str]) -> str:
    try:
        compiled = compile_sql92(expression)
    except Sql92Error:
        return "REFUSED"
    return "MATCH" if compiled(properties) else "NOMATCH"


def test_our_filter_agrees_with_apaches(java_toolchain: Toolchain) -> None:
    cases = [(e, p) for e, p, _ in CASES + MUTANT_CASES] + [(m, {}) for m in MALFORMED if m.strip()]
    cases += [(e, {}) for e, _ in REASONS if e.strip()]
    cases = [(e, p) for e, p in cases if not any(word in e.upper() for word in _FIVE_X)]
    lines = "".join(
        base64.b64encode(e.encode()).decode()
        + "\t"
        + base64.b64encode(encode_properties(p).encode()).decode()
        + "\n"
        for e, p in cases
    )
    done = subprocess.run(
        [java_toolchain.java, *SERVER_HEAP, "-cp", java_toolchain.server_classpath, str(ORACLE)],
        input=lines,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answers = done.stdout.splitlines()
    assert len(answers) == len(cases), done.stdout + done.stderr
    disagreements = [
        (expression, properties, answer, ours(expression, properties))
        for (expression, properties), answer in zip(cases, answers, strict=True)
        if answer.split(" ", 1)[0] != ours(expression, properties)
    ]
    assert not disagreements, "\n".join(map(repr, disagreements))
    assert len(cases) >= 100


CONSUMER = Path(__file__).resolve().parent / "sql92" / "SqlConsumer.java"


def java_consumer(toolchain: Toolchain, namesrv: str, topic: str, expression: str, count: int) -> list[str]:
    done = subprocess.run(
        [
            *toolchain.java_command(str(CONSUMER), []),
            namesrv,
            topic,
            f"java-sql-{topic}",
            expression,
            str(count),
            "60000",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()


@pytest.mark.asyncio
async def test_the_java_client_subscribes_by_sql92_to_our_broker(
    java_toolchain: Toolchain, tmp_path: Path
) -> None:
    cluster = await start_cluster(tmp_path, enablePropertyFilter="true")
    try:
        topic = "JavaSql92"
        async with Admin(cluster.namesrv_addr) as admin:
            await admin.create_topic(topic, 2)
        async with Producer("java-sql-producer", cluster.namesrv_addr) as producer:
            for i in range(30):
                msg = Message(topic, f"m{i}".encode(), tags="a" if i % 3 == 0 else "b")
                msg.properties["n"] = str(i)
                await producer.send(msg)
        expression = "TAGS = 'a' AND n BETWEEN 5 AND 20"
        expected = {f"m{i}" for i in range(30) if i % 3 == 0 and 5 <= i <= 20}
        lines = await asyncio.to_thread(
            java_consumer, java_toolchain, cluster.namesrv_addr, topic, expression, len(expected)
        )
        assert "STARTED" in lines, lines
        got = {line.removeprefix("RECV ") for line in lines if line.startswith("RECV ")}
        assert got == expected
        # A malformed expression: the client's start-up check (CHECK_CLIENT_CONFIG) fails with our reason.
        lines = await asyncio.to_thread(
            java_consumer, java_toolchain, cluster.namesrv_addr, topic, "n > 'x'", 1
        )
        failed = [line for line in lines if line.startswith("START_FAILED")]
        assert failed and "cannot be compared" in failed[0], lines
    finally:
        await cluster.stop()
