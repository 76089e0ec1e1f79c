"""Our SQL92 filter against Apache RocketMQ's own: every case of the table in
``tests/protocol/test_sql92.py`` (matches, and expressions refused at compile time) is also
run through the broker's filter classes (``FilterFactory`` compile, ``MessageEvaluationContext``
evaluation) in one JVM, and the two must agree. The 5.x string tests (CONTAINS, STARTSWITH,
ENDSWITH) are left out: the 4.9 reference does not have them."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

from aiorocketmq.protocol.message import encode_properties
from aiorocketmq.protocol.sql92 import Sql92Error, compile_sql92
from tests.interop.harness import SERVER_HEAP, Toolchain
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
    cases = [(e, p) for e, p, _ in CASES] + [(m, {}) for m in MALFORMED if m.strip()]
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
