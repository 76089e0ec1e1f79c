"""The Java 5.x client (``rocketmq-client-java`` from Maven Central, built by the interop
harness) against our broker's gRPC endpoint: its Producer's messages read back by its
SimpleConsumer, its PushConsumer and our 4.x SDK, bodies, tags, keys and properties intact."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from typing import Any

import pytest

from tests.interop.harness import CLIENT_HEAP, build_java5

from .conftest import Grpc5, run_child
from .test_py5_producer import create_topic, read_all

pytestmark = pytest.mark.asyncio(loop_scope="package")

_names = itertools.count(1)


def unique(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{next(_names)}"


async def run_java(*args: str, timeout: float = 120.0, ssl_on: bool = False) -> tuple[int, list[str]]:
    """``interop5.Grpc5`` to its end: exit code and output lines; TLS as the client's default
    (``GRPC5_SSL=true``) or off."""
    java, classpath = await asyncio.to_thread(build_java5)
    argv = [java, *CLIENT_HEAP, "-cp", classpath, "interop5.Grpc5", *args]
    code, text = await run_child(
        argv, timeout, env={"GRPC5_SSL": "true" if ssl_on else "false"}, what=args[0]
    )
    return code, text.splitlines()


async def run_java_done(*args: str, timeout: float = 120.0, ssl_on: bool = False) -> list[str]:
    """:func:`run_java` that must get to its ``DONE`` line; the output lines."""
    _, lines = await run_java(*args, timeout=timeout, ssl_on=ssl_on)
    assert "DONE" in lines, "\n".join(lines)
    return lines


async def test_java_producer_simple_and_push_consumers(grpc5: Grpc5) -> None:
    topic, group = unique("Java5"), unique("cg")
    await create_topic(grpc5, topic)
    sent = [
        line.split(" ", 1)[1]
        for line in await run_java_done("produce", grpc5.endpoint, topic, "5")
        if line.startswith("SENT ")
    ]
    assert len(sent) == 5
    lines = await run_java_done("consume", grpc5.endpoint, topic, group, "5")
    got: list[dict[str, Any]] = [json.loads(line[4:]) for line in lines if line.startswith("MSG ")]
    assert sorted(m["body"] for m in got) == [f"java-{i}" for i in range(5)]
    for msg in got:
        i = msg["body"].split("-")[1]
        assert msg["tag"] == "JavaTag"
        assert msg["keys"] == sorted([f"jk{i}", "shared"])
        assert msg["properties"] == {"i": i}
        assert msg["attempt"] == 1
    assert sorted(m["id"] for m in got) == sorted(sent)
    # The same messages as a 4.x consumer sees them.
    stored = {m.body.decode(): m for m in await read_all(grpc5, topic)}
    assert set(stored) == {f"java-{i}" for i in range(5)}
    assert {m.tags for m in stored.values()} == {"JavaTag"}
    assert sorted(stored["java-3"].keys) == ["jk3", "shared"]
    # A PushConsumer of another group gets them all too (assignments, auto-renewed receives).
    lines = await run_java_done("push", grpc5.endpoint, topic, unique("push"), "5")
    pushed = [json.loads(line[4:]) for line in lines if line.startswith("MSG ")]
    assert sorted(m["body"] for m in pushed) == [f"java-{i}" for i in range(5)]
    assert {m["tag"] for m in pushed} == {"JavaTag"}
