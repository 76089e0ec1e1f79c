"""The Node.js 5.x client (``rocketmq-client-nodejs`` from npm, installed on first use)
against our broker's gRPC endpoint: its Producer's messages received by its SimpleConsumer,
bodies, tags, keys and properties intact."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
from typing import Any

import pytest

from .conftest import HERE, Grpc5, install_node5_client
from .test_py5_producer import create_topic

pytestmark = pytest.mark.asyncio(loop_scope="package")

_names = itertools.count(1)


def unique(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{next(_names)}"


async def run_node(*args: str, timeout: float = 90.0) -> dict[str, Any]:
    modules = await asyncio.to_thread(install_node5_client)
    node = shutil.which("node")
    assert node is not None, "the Node.js client tests need `node`"
    proc = await asyncio.create_subprocess_exec(
        node,
        str(HERE / "node5_client.js"),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "NODE_PATH": str(modules)},
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        out, _ = await proc.communicate()
    text = out.decode(errors="replace")
    for line in text.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return result
    raise AssertionError(f"node exited with {proc.returncode} and no result:\n{text}")


async def test_node_producer_and_simple_consumer(grpc5: Grpc5) -> None:
    topic, group = unique("Node5"), unique("cg")
    await create_topic(grpc5, topic)
    sent = (await run_node("produce", grpc5.endpoint, topic, "4"))["sent"]
    assert len(sent) == 4 and all(sent)
    got = (await run_node("consume", grpc5.endpoint, topic, group, "4"))["messages"]
    assert sorted(m["body"] for m in got) == [f"node-{i}" for i in range(4)]
    for msg in got:
        i = msg["body"].split("-")[1]
        assert msg["tag"] == "NodeTag"
        assert msg["keys"] == sorted([f"nk{i}", "shared"])
        assert msg["properties"] == {"i": i}
        assert msg["attempt"] == 1
    assert sorted(m["id"] for m in got) == sorted(sent)
