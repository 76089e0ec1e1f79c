"""Brokers on small volumes with every store setting at its default (1 GiB commit-log files,
6,000,000-byte consume-queue files, 420 MB index files): the store takes disk space as it writes,
so it stores messages until the volume is nearly full (``diskSpaceWarningLevelRatio``, 90 %),
then refuses with the disk-full error, keeps serving reads, survives kill -9 on a disk full to the
last byte, and takes messages again once space returns, with every acknowledged message intact.

Each test makes its own loop-mounted filesystem (ext4 and xfs, as root) and drives the broker
with the official C++ client and our SDK. An index that cannot grow never refuses a message the
commit log can take: the key is counted as missed and the message stored.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import string
import time
from pathlib import Path
from typing import Any

import pytest
from rocketmq.client import Message as CppMessage
from rocketmq.exceptions import RocketMQException

from aiorocketmq import ConsumeFrom, LitePullConsumer, Message, Producer
from aiorocketmq.broker.store import StoreConfig
from aiorocketmq.protocol.errors import ServiceNotAvailableError
from aiorocketmq.protocol.message import MessageExt
from tests.cluster import Cluster
from tests.cpp_client import TolerantProducer as CppProducer
from tests.cpp_client import shutdown_safely
from tests.store.support import make_message, running

from .faults import fill_disk, loop_filesystem, loop_mount_missing, poll_until

TOPIC = "SmallVolume"
BODY = 1024
BATCH = 16
#: The store's own defaults, where the test cluster otherwise shrinks them.
DEFAULTS: dict[str, Any] = {
    "mappedFileSizeCommitLog": 1 << 30,
    "mappedFileSizeConsumeQueue": 300_000 * 20,
    "maxHashSlotNum": 5_000_000,
    "maxIndexNum": 20_000_000,
}


def volume(fs: str) -> None:
    missing = loop_mount_missing(fs)
    if missing:
        pytest.fail(f"the small-volume tests need a loop-mounted {fs}: {missing}")


_LETTERS = (string.ascii_letters * (BODY // 26)).encode()


def body(tag: str, n: int) -> bytes:
    """Printable (the C++ client takes a C string), and different per message."""
    head = f"{tag}-{n}|".encode()
    start = n % 52
    return head + _LETTERS[start : start + BODY - len(head)]


def used(path: Path) -> float:
    st = os.statvfs(path)
    return 1 - st.f_bfree / st.f_blocks


def write_file(path: Path, size: int) -> None:
    with open(path, "wb") as f:
        for _ in range(size >> 20):
            f.write(b"\x5a" * (1 << 20))
        f.flush()
        os.fsync(f.fileno())


async def sdk_fill(producer: Producer, start: int) -> tuple[list[int], BaseException]:
    """Batches of our SDK until the broker refuses one; the acknowledged numbers and the error."""
    acked: list[int] = []
    n = start
    while True:
        batch = [Message(TOPIC, body("sdk", n + i), keys=[f"sdk-{n + i}"]) for i in range(BATCH)]
        try:
            await producer.send_batch(batch)
        except Exception as exc:  # the refusal, checked by the caller
            return acked, exc
        acked.extend(range(n, n + BATCH))
        n += BATCH
        assert len(acked) < 1_000_000, "the broker never refused"


def cpp_send(producer: CppProducer, tag: str, numbers: range) -> list[int]:
    """Blocking: sync sends of the C++ client; the numbers acknowledged until the first failure."""
    acked = []
    for n in numbers:
        msg = CppMessage(TOPIC)
        msg.set_keys(f"{tag}-{n}")
        msg.set_body(body(tag, n))
        try:
            producer.send_sync(msg)
        except RocketMQException:
            break
        acked.append(n)
    return acked


async def read_all(namesrv: str, expected: int) -> list[MessageExt]:
    """Every message of the topic, read from the start with our SDK's lite-pull consumer."""
    consumer = LitePullConsumer(
        f"reader-{time.monotonic_ns()}", namesrv=namesrv, consume_from=ConsumeFrom.FIRST_OFFSET
    )
    consumer.subscribe(TOPIC)
    got: list[MessageExt] = []
    async with consumer:
        deadline = time.monotonic() + 60
        while len(got) < expected and time.monotonic() < deadline:
            got.extend(await consumer.poll(timeout=2))
        got.extend(await consumer.poll(timeout=0.5))  # nothing more than expected
    return got


def account(acked: dict[str, list[int]], messages: list[MessageExt]) -> tuple[int, int]:
    """(lost, duplicated): acknowledged messages not read back intact, and extra copies."""
    seen: dict[str, int] = {}
    for msg in messages:
        key = msg.keys[0] if msg.keys else ""
        tag, _, n = key.rpartition("-")
        assert msg.body == body(tag, int(n)), key
        seen[key] = seen.get(key, 0) + 1
    lost = sum(1 for tag, numbers in acked.items() for n in numbers if f"{tag}-{n}" not in seen)
    return lost, sum(count - 1 for count in seen.values())


@pytest.mark.parametrize(("fs", "size_mb"), [("ext4", 128), ("xfs", 160)])
async def test_a_broker_on_defaults_fills_a_small_volume_and_comes_back(
    tmp_path: Path, fs: str, size_mb: int
) -> None:
    volume(fs)
    with loop_filesystem(tmp_path, size_mb, fs) as disk:
        # Ballast: freeing it later brings the volume back under the refusal level.
        write_file(disk / "ballast", (size_mb << 20) // 4)
        store = disk / "store"
        cluster = Cluster(tmp_path / "cluster")
        try:
            await cluster.start_namesrv()
            broker = await cluster.start_broker("broker-a", storePathRootDir=str(store), **DEFAULTS)
            idle = sum(p.stat().st_blocks * 512 for p in store.rglob("*") if p.is_file())
            print(f"{fs} {size_mb} MB: idle store {idle / 1e6:.1f} MB on disk")
            assert idle < 1 << 20
            acked: dict[str, list[int]] = {}
            cpp = CppProducer("small-volume-cpp")
            cpp.set_namesrv_addr(cluster.namesrv_addr)
            cpp.start()
            cpp_started = time.monotonic()
            try:
                acked["cpp"] = await asyncio.to_thread(cpp_send, cpp, "cpp", range(2000))
                assert len(acked["cpp"]) == 2000
                async with Producer("small-volume-sdk", namesrv=cluster.namesrv_addr) as producer:
                    # Fill: the store takes messages until the volume is nearly full, then says why not.
                    acked["sdk"], refusal = await sdk_fill(producer, 0)
                    filled = used(disk)
                    print(
                        f"{fs}: {len(acked['cpp']) + len(acked['sdk'])} acknowledged, then refused at "
                        f"{filled:.1%} used: {refusal}"
                    )
                    assert isinstance(refusal.__cause__, ServiceNotAvailableError), repr(refusal)
                    assert "disk is full" in str(refusal.__cause__) and str(store) in str(refusal.__cause__)
                    assert filled > 0.85
                    assert not await asyncio.to_thread(cpp_send, cpp, "cpp", range(2000, 2001))

                    # Reads go on: everything acknowledged, once, intact; and found by key.
                    total = sum(map(len, acked.values()))
                    lost, duplicated = account(acked, await read_all(cluster.namesrv_addr, total))
                    assert (lost, duplicated) == (0, 0)

                    # Full to the last byte, then kill -9: it restarts, serves reads, refuses sends.
                    await asyncio.to_thread(fill_disk, disk)
                    await cluster.kill_broker("broker-a")
                    broker = await cluster.start_broker("broker-a", storePathRootDir=str(store), **DEFAULTS)
                    acked["late"] = []
                    with pytest.raises(Exception) as still:
                        for n in range(10_000):  # what recovery gave back of its reservations
                            await producer.send(Message(TOPIC, body("late", n), keys=[f"late-{n}"]))
                            acked["late"].append(n)
                    assert isinstance(still.value.__cause__, ServiceNotAvailableError), repr(still.value)
                    total = sum(map(len, acked.values()))
                    lost, duplicated = account(acked, await read_all(cluster.namesrv_addr, total))
                    assert (lost, duplicated) == (0, 0)

                    # Space returns: both clients send again, and nothing was lost on the way.
                    os.unlink(disk / "filler")
                    os.unlink(disk / "ballast")
                    freed = time.monotonic()

                    async def sends() -> bool:
                        try:
                            await producer.send(Message(TOPIC, body("sdk", 10**6), keys=["sdk-1000000"]))
                        except Exception:
                            return False
                        return True

                    await poll_until(sends, timeout=10, interval=0.1)
                    print(f"{fs}: sends resumed {time.monotonic() - freed:.2f}s after space returned")
                    acked["sdk"].append(10**6)
                    more = await asyncio.to_thread(cpp_send, cpp, "cpp", range(5000, 5100))
                    assert len(more) == 100
                    acked["cpp"].extend(more)
                    lost, duplicated = account(
                        acked, await read_all(cluster.namesrv_addr, sum(map(len, acked.values())))
                    )
                    assert (lost, duplicated) == (0, 0)
                    assert broker.process is not None and broker.process.proc is not None
                    assert broker.process.proc.returncode is None
            finally:
                await asyncio.to_thread(shutdown_safely, cpp, cpp_started)
        finally:
            await cluster.stop()
            shutil.rmtree(store, ignore_errors=True)


async def test_an_index_without_room_never_refuses_a_message(tmp_path: Path) -> None:
    volume("ext4")
    with loop_filesystem(tmp_path, 64) as disk:
        config = StoreConfig(storePathRootDir=str(disk / "store"))  # a 20 MB slot table per index file
        # Room for the commit log and consume queues, none for an index file, under 90 % used.
        st = os.statvfs(disk)
        write_file(disk / "filler", st.f_bavail * st.f_frsize - (12 << 20))
        assert used(disk) < 0.85
        async with running(config) as store:
            assert store.index is not None
            first = store.put_message(make_message("Keyed", 0, 0, keys="first"))
            assert first.ok, first
            assert store.index.missed_keys == 2  # its UNIQ_KEY and its key
            assert store.runtime_info()["indexKeysMissed"] == "2"
            assert store.query_by_key("Keyed", "first", 4, 0, 2**62).records == []
            assert store.read_record(first.wrote_offset) is not None
            os.unlink(disk / "filler")
            n = 0

            def indexed() -> bool:
                nonlocal n
                n += 1
                assert store.put_message(make_message("Keyed", 0, n, keys=f"key{n}")).ok
                return len(store.query_by_key("Keyed", f"key{n}", 4, 0, 2**62).records) == 1

            # The index asks the disk again (at most a second after the last refusal).
            await poll_until(indexed, timeout=5, interval=0.05)
            assert store.index.missed_keys == 2 * n
