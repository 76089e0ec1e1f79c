"""The Node.js 5.x client (``rocketmq-client-nodejs`` from npm, installed on first use)
against our broker's gRPC endpoint: its Producer's messages received by its SimpleConsumer,
bodies, tags, keys and properties intact."""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
from typing import Any

import pytest

from .conftest import HERE, Grpc5, install_node5_client, result_of, run_child
from .test_py5_producer import create_topic

pytestmark = pytest.mark.asyncio(loop_scope="package")

_names = itertools.count(1)


def unique(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{next(_names)}"


async def run_node(*args: str, timeout: float = 90.0) -> dict[str, Any]:
    modules = await asyncio.to_thread(install_node5_client)
    node = shutil.which("node")
    assert node is not None, "the Node.js client tests need `node`"
    argv = [node, str(HERE / "node5_client.js"), *args]
    code, text = await run_child(argv, timeout, env={"NODE_PATH": str(modules)}, what=args[0])
    return result_of(text, code, f"node {args[0]}")


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
