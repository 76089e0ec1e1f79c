"""A full disk never kills the broker and never loses an acknowledged message.

Each test makes its own small ext4 filesystem (a loop-mounted image), puts the store on it
and fills it to the brim with a filler file: puts are refused with SERVICE_NOT_AVAILABLE and
a remark naming the store path and its usage; reads, pulls and offset commits go on; puts
resume once the filler is deleted; a broker killed with -9 on the full disk restarts
(read-only for producers) and serves every acknowledged message.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from aiorocketmq.broker.store import PutStatus
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.headers import QueryConsumerOffsetRequestHeader, UpdateConsumerOffsetRequestHeader
from aiorocketmq.protocol.message import MessageExt, decode_records
from aiorocketmq.protocol.transport import connect
from tests.broker.requests import call, pull_queues, send
from tests.cluster import Cluster
from tests.store.support import decode, make_message, running, small_config

from .faults import fill_disk, loop_filesystem, loop_mount_available, poll_until


@pytest.fixture(autouse=True, scope="module")
def _loop_mounts() -> None:
    """The full-disk tests need a filesystem they can fill: fail, never skip, without one."""
    if not loop_mount_available():
        pytest.fail("the full-disk tests need root, mkfs.ext4 and mount with loop devices")


TOPIC = "DiskFullTopic"
QUEUES = 2


async def test_store_reserves_blocks_before_writing_and_refuses_puts_when_it_cannot(tmp_path: Path) -> None:
    with loop_filesystem(tmp_path, 64) as disk:
        root = disk / "store"
        # Only a failed reservation can refuse here (the usage ratio never does).
        config = small_config(root, mappedFileSizeCommitLog=1 << 20, diskSpaceWarningLevelRatio=1.0)
        async with running(config) as store:
            stored = [store.put_message(make_message(queue_id=n % 2, n=n, keys=f"k{n}")) for n in range(50)]
            assert all(r.ok for r in stored)
            # Every byte written through a mapping has its blocks (a write into a hole on a
            # full disk would be SIGBUS).
            files = [*store.commit_log.queue.files]
            for cq in store.consume_queues():
                files.extend(cq.queue.files)
            for mapped in files:
                assert mapped.reserved >= mapped.wrote, mapped
                assert mapped.path.stat().st_blocks * 512 >= mapped.wrote - mapped.wrote % 4096, mapped

            await asyncio.to_thread(fill_disk, disk)
            refused = None
            for n in range(50, 5000):
                result = store.put_message(make_message(queue_id=n % 2, n=n, size=1000))
                if not result.ok:
                    refused = result
                    break
                stored.append(result)
            assert refused is not None and refused.status is PutStatus.SERVICE_NOT_AVAILABLE
            assert "disk is full" in refused.remark and str(root / "commitlog") in refused.remark
            assert store.disk_full
            # Reads are served, and still refused puts write nothing.
            end = store.commit_log_max_offset
            assert not store.put_message(make_message(n=9999)).ok
            assert store.commit_log_max_offset == end
            got = decode(store.get_messages("g", "TopicA", 0, 0, 32).buffers)
            assert got and got[0].body == make_message(queue_id=0, n=0).body

            freed = time.monotonic()
            os.unlink(disk / "filler")
            await poll_until(lambda: store.put_message(make_message(n=10_000)).ok, timeout=5)
            print(f"puts resumed {time.monotonic() - freed:.2f}s after the space came back")
            assert time.monotonic() - freed < 2.0
            for result in stored:
                assert store.read_record(result.wrote_offset, check_crc=True) is not None


def account(acked: dict[int, int], messages: list[MessageExt]) -> tuple[int, int]:
    """(lost, duplicates): acknowledged sequence numbers not stored, and extra copies."""
    seen: dict[int, int] = {}
    for msg in messages:
        seq = int(msg.body.split(b"|", 1)[0])
        seen[seq] = seen.get(seq, 0) + 1
    lost = sum(1 for seq in acked if seq not in seen)
    duplicates = sum(n - 1 for n in seen.values())
    return lost, duplicates


def body(seq: int) -> bytes:
    return f"{seq}|".encode() + bytes(1000)


async def test_broker_on_a_full_disk(tmp_path: Path) -> None:
    with loop_filesystem(tmp_path, 96) as disk:
        cluster = Cluster(tmp_path / "cluster")
        overrides = {
            "storePathRootDir": str(disk / "store"),
            "mappedFileSizeCommitLog": 4 << 20,
            "mappedFileSizeConsumeQueue": 2000 * 20,
            "maxHashSlotNum": 1000,
            "maxIndexNum": 4000,
            "defaultTopicQueueNums": QUEUES,
        }
        try:
            broker = await cluster.start_broker("broker-a", **overrides)
            assert broker.process is not None and broker.process.proc is not None
            conn = await connect("127.0.0.1", broker.port)
            acked: dict[int, int] = {}
            seq = 0

            async def send_one() -> int:
                nonlocal seq
                response = await send(conn, TOPIC, body(seq), queue_id=seq % QUEUES, keys=f"key{seq}")
                if response.code == ResponseCode.SUCCESS:
                    acked[seq] = seq % QUEUES
                seq += 1
                return response.code

            async def sent_ok() -> bool:
                return await send_one() == ResponseCode.SUCCESS

            for _ in range(300):
                assert await send_one() == ResponseCode.SUCCESS

            # Fill the disk to the brim: sends go on into the space the store already holds,
            # then are refused with RocketMQ's code for it, and the remark says where and why.
            await asyncio.to_thread(fill_disk, disk)
            refusal = None
            for _ in range(20_000):
                response = await send(conn, TOPIC, body(seq), queue_id=seq % QUEUES)
                if response.code != ResponseCode.SUCCESS:
                    refusal = response
                    break
                acked[seq] = seq % QUEUES
                seq += 1
            assert refusal is not None
            assert refusal.code == ResponseCode.SERVICE_NOT_AVAILABLE, refusal
            assert refusal.remark is not None and "disk is full" in refusal.remark
            assert str(disk / "store") in refusal.remark and "% used" in refusal.remark
            assert broker.process.proc.returncode is None

            # Reads, pulls, queries and offset commits keep working.
            lost, duplicates = account(acked, await pull_queues(conn, TOPIC, QUEUES, max_nums=32))
            assert (lost, duplicates) == (0, 0)
            update = UpdateConsumerOffsetRequestHeader(
                consumer_group="g", topic=TOPIC, queue_id=0, commit_offset=7
            )
            assert (await call(conn, RequestCode.UPDATE_CONSUMER_OFFSET, update.to_fields())).code == 0
            query = QueryConsumerOffsetRequestHeader(consumer_group="g", topic=TOPIC, queue_id=0)
            answer = await call(conn, RequestCode.QUERY_CONSUMER_OFFSET, query.to_fields())
            assert answer.code == ResponseCode.SUCCESS and answer.ext_fields["offset"] == "7"

            found = await call(
                conn,
                RequestCode.QUERY_MESSAGE,
                {"topic": TOPIC, "key": "key5", "maxNum": 4, "beginTimestamp": 0, "endTimestamp": 2**62},
            )
            assert found.code == ResponseCode.SUCCESS
            assert [m.body for m in decode_records(found.body)] == [body(5)]

            # Space comes back: sends resume within a second or so.
            freed = time.monotonic()
            os.unlink(disk / "filler")
            await poll_until(sent_ok, timeout=5)
            resumed = time.monotonic() - freed
            print(f"sends resumed {resumed:.2f}s after the space came back")
            assert resumed < 2.0

            # Full again, then kill -9: the broker restarts on the full disk (recovery gives
            # back the blocks reserved ahead of the log's end, which sends may take again until
            # refused) and every acknowledged message is there.
            await asyncio.to_thread(fill_disk, disk)
            await poll_until(lambda: not_sent(sent_ok), timeout=30, interval=0)
            conn.close()
            await cluster.kill_broker("broker-a")
            broker = await cluster.start_broker("broker-a", **overrides)
            conn = await connect("127.0.0.1", broker.port)
            for _ in range(20_000):
                response = await send(conn, TOPIC, body(seq), queue_id=seq % QUEUES)
                if response.code != ResponseCode.SUCCESS:
                    break
                acked[seq] = seq % QUEUES
                seq += 1
            assert response.code == ResponseCode.SERVICE_NOT_AVAILABLE, response
            lost, duplicates = account(acked, await pull_queues(conn, TOPIC, QUEUES, max_nums=32))
            print(f"{len(acked)} acknowledged, {lost} lost, {duplicates} duplicated")
            assert (lost, duplicates) == (0, 0)
            os.unlink(disk / "filler")
            await poll_until(sent_ok, timeout=10)
            conn.close()
        finally:
            await cluster.stop()


async def not_sent(sent_ok: Callable[[], Awaitable[bool]]) -> bool:
    return not await sent_ok()
