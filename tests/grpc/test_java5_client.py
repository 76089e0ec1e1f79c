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

from .conftest import Grpc5
from .test_py5_producer import create_topic, read_all

pytestmark = pytest.mark.asyncio(loop_scope="package")

_names = itertools.count(1)


def unique(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{next(_names)}"


async def run_java(*args: str, timeout: float = 120.0) -> list[str]:
    java, classpath = await asyncio.to_thread(build_java5)
    proc = await asyncio.create_subprocess_exec(
        java,
        *CLIENT_HEAP,
        "-cp",
        classpath,
        "interop5.Grpc5",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        out, _ = await proc.communicate()
    lines = out.decode(errors="replace").splitlines()
    assert "DONE" in lines, "\n".join(lines)
    return lines


async def test_java_producer_simple_and_push_consumers(grpc5: Grpc5) -> None:
    topic, group = unique("Java5"), unique("cg")
    await create_topic(grpc5, topic)
    sent = [
        line.split(" ", 1)[1]
        for line in await run_java("produce", grpc5.endpoint, topic, "5")
        if line.startswith("SENT ")
    ]
    assert len(sent) == 5
    lines = await run_java("consume", grpc5.endpoint, topic, group, "5")
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
    lines = await run_java("push", grpc5.endpoint, topic, unique("push"), "5")
    pushed = [json.loads(line[4:]) for line in lines if line.startswith("MSG ")]
    assert sorted(m["body"] for m in pushed) == [f"java-{i}" for i in range(5)]
    assert {m["tag"] for m in pushed} == {"JavaTag"}
