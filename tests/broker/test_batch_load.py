"""The side-by-side benchmark's lean batched-send load (``bench/batch_load.c``) against a real
broker: its pre-encoded frames must be sends the broker stores, and its count must not claim
more than the broker holds."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from aiorocketmq.client import Admin, ConsumeFrom, ConsumeResult, MessageExt, PushConsumer
from bench.side_by_side import batch_frames, build_batch_load
from tests.cluster import Cluster

TOPIC = "LeanLoad"
QUEUES = 4
BATCH = 8


async def test_lean_load_batches_are_stored(cluster: Cluster, tmp_path: Path) -> None:
    async with Admin(cluster.namesrv_addr) as admin:
        await admin.create_topic(TOPIC, QUEUES)
        binary = await asyncio.to_thread(build_batch_load, tmp_path)
        frames = tmp_path / "frames.bin"
        frames.write_bytes(batch_frames(TOPIC, QUEUES, BATCH, 64, per_queue=2))
        load = await asyncio.create_subprocess_exec(
            str(binary),
            "1",
            "0.2",
            "4",
            str(BATCH),
            cluster.brokers["broker-a"].addr,
            str(frames),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(load.communicate(), 60)
        assert load.returncode == 0, err.decode()
        result = json.loads(out)
        assert result["failed"] == 0
        assert result["count"] > 0 and result["count"] % BATCH == 0
        stats = await admin.topic_stats(TOPIC)
        stored = sum(offset.max_offset for offset in stats.values())
        # Every queue took batches (the frames rotate over them), and the window's count is
        # part of what was stored (the warm-up's and the last in-flight batches are not counted).
        assert all(offset.max_offset > 0 for offset in stats.values())
        assert stored >= result["count"] and stored % BATCH == 0

    seen: set[str] = set()
    done = asyncio.Event()

    async def listener(messages: list[MessageExt]) -> ConsumeResult:
        for msg in messages:
            assert len(msg.body) == 64
            seen.add(msg.offset_msg_id)
        if len(seen) >= stored:
            done.set()
        return ConsumeResult.SUCCESS

    consumer = PushConsumer("lean_load_check", cluster.namesrv_addr, consume_from=ConsumeFrom.FIRST_OFFSET)
    consumer.subscribe(TOPIC)
    consumer.listener(listener)
    async with consumer:
        await asyncio.wait_for(done.wait(), 60)
    # Every stored message reads back whole (a distinct record each, though frames repeat).
    assert len(seen) == stored
