"""Recovery: normal and abnormal restarts, torn commit-log tails cut at random bytes, rebuilding
consume queues and index, the checkpoint's starting point.

A copy of a running store's directory is what a kill -9 leaves behind (the page cache holds
everything written through the mappings), abort file included; tests crash stores that way.
"""

from __future__ import annotations

import os
import random
import shutil
import struct
from pathlib import Path

import pytest

from aiorocketmq.broker.store import GetStatus, MessageStore, StoreConfig, StoreError
from aiorocketmq.protocol.message import decode_records, encode_properties
from aiorocketmq.protocol.names import SCHEDULE_TOPIC

from .support import (
    STORE_HOST,
    consume_queue_matches_log,
    decode,
    make_message,
    running,
    small_config,
)

FAR = 2**62


def _copy_if_present(src: str, dst: str) -> str:
    try:
        return shutil.copy2(src, dst)
    except FileNotFoundError:
        # Listed, then gone: the store's allocator renamed its ``.alloc`` file while the copy
        # ran. Left out, as a kill -9 before the allocation finished would leave it.
        return dst


def crash_copy(root: Path, target: Path) -> Path:
    """The directory as a kill -9 of the running store would leave it."""
    shutil.copytree(root, target, copy_function=_copy_if_present)
    assert (target / "abort").exists()
    return target


def all_records(store: MessageStore, topic: str, queue_id: int) -> list[bytes]:
    out: list[bytes] = []
    offset = store.get_min_offset(topic, queue_id)
    while True:
        got = store.get_messages("g", topic, queue_id, offset, 32)
        if got.status is not GetStatus.FOUND:
            return out
        out.extend(bytes(b) for b in got.buffers)
        offset = got.next_begin_offset


async def test_normal_restart_keeps_everything(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    async with running(config) as store:
        for n in range(150):
            assert store.put_message(make_message("TopicA", n % 3, n, size=900, keys=f"k{n}")).ok
        before = {q: all_records(store, "TopicA", q) for q in range(3)}
    async with running(config) as store:
        assert store.recovery is not None and not store.recovery.abnormal
        assert {q: all_records(store, "TopicA", q) for q in range(3)} == before
        assert consume_queue_matches_log(store) == 150
        (hit,) = decode(store.query_by_key("TopicA", "k77", 5, 0, FAR).records)
        assert hit.queue_offset == 25 and hit.queue_id == 2
        result = store.put_message(make_message("TopicA", 1, 999))
        assert result.queue_offset == 50


async def test_abnormal_restart_from_a_crash_copy(tmp_path: Path) -> None:
    config = small_config(tmp_path / "live")
    async with running(config) as store:
        for n in range(200):
            store.put_message(make_message("TopicA", n % 4, n, size=800, keys="same"))
        crash_copy(tmp_path / "live", tmp_path / "crashed")
        expected = {q: all_records(store, "TopicA", q) for q in range(4)}
    async with running(small_config(tmp_path / "crashed")) as store:
        assert store.recovery is not None and store.recovery.abnormal
        assert {q: all_records(store, "TopicA", q) for q in range(4)} == expected
        assert consume_queue_matches_log(store) == 200
        assert len(store.query_by_key("TopicA", "same", 500, 0, FAR).records) == 200
        assert store.put_message(make_message("TopicA", 0, 1000)).queue_offset == 50
    # The crash recovery left a clean store behind.
    async with running(small_config(tmp_path / "crashed")) as store:
        assert store.recovery is not None and not store.recovery.abnormal
        assert consume_queue_matches_log(store) == 201


def log_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / "commitlog").iterdir() if p.name.isdigit())


def record_bounds(root: Path, file_size: int) -> list[tuple[int, int]]:
    """(start, end) of every record in the commit log, by walking it."""
    bounds = []
    for path in log_files(root):
        data = path.read_bytes()
        start = int(path.name)
        pos = 0
        while pos + 8 <= len(data):
            size, magic = struct.unpack_from(">ii", data, pos)
            if size <= 0 or magic != -626843481:
                break
            bounds.append((start + pos, start + pos + size))
            pos += size
    return bounds


def cut(root: Path, offset: int, file_size: int, *, how: str) -> None:
    """Lose every commit-log byte from ``offset`` on: shorten the file or zero its tail."""
    for path in log_files(root):
        start = int(path.name)
        if start > offset:
            path.unlink()
        elif start <= offset < start + file_size:
            if how == "truncate":
                os.truncate(path, offset - start)
            else:
                with path.open("r+b") as f:
                    f.seek(offset - start)
                    f.write(bytes(file_size - (offset - start)))


@pytest.mark.parametrize("abort", [True, False], ids=["abnormal", "normal"])
async def test_torn_tail_cut_at_random_bytes(tmp_path: Path, abort: bool) -> None:
    rng = random.Random(20240604 + abort)
    pristine = tmp_path / "pristine"
    config = small_config(pristine)
    base = 1_700_000_000_000
    async with running(config) as store:
        for n in range(160):
            queue_id = n % 2
            size = rng.randint(10, 3000)
            # One message every 100 ms of store time.
            msg = make_message(
                "TopicA", queue_id, n, size=size, keys=f"key{n}", store_timestamp=base + n * 100
            )
            assert store.put_message(msg).ok
        crash_copy(pristine, tmp_path / "crashed")
    if abort:
        # The last checkpoint saw message 100 durable: recovery verifies from the file holding
        # message ~70 and rebuilds entries from there; the cuts land after it, in what was
        # never flushed.
        with (tmp_path / "crashed" / "checkpoint").open("r+b") as f:
            f.write(struct.pack(">qqq", *[base + 100 * 100] * 3))
    else:
        (tmp_path / "crashed" / "abort").unlink()
    file_size = config.mapped_file_size_commit_log
    bounds = record_bounds(tmp_path / "crashed", file_size)
    assert len(bounds) == 160
    trials = 0
    for record in [*rng.sample(range(130, 160), 12), 159]:
        start, end = bounds[record]
        for point in {start, start + 1, start + 7, start + 8, rng.randint(start, end - 1), end - 1}:
            trials += 1
            root = tmp_path / f"cut-{trials}"
            shutil.copytree(tmp_path / "crashed", root)
            cut(root, point, file_size, how=rng.choice(["truncate", "zero"]))
            survivors = record if point < end else record + 1
            await check_recovered(small_config(root), survivors, bounds, abort)
            shutil.rmtree(root)
    assert trials >= 60


async def check_recovered(
    config: StoreConfig, survivors: int, bounds: list[tuple[int, int]], abnormal: bool
) -> None:
    expected_end = bounds[survivors - 1][1]
    async with running(config) as store:
        report = store.recovery
        assert report is not None and report.abnormal == abnormal
        if abnormal:
            assert 0 < report.verified_from <= bounds[70][0] and report.dispatched_from == bounds[70][0]
        assert store.commit_log_max_offset in (expected_end, store.commit_log.roll_next(expected_end))
        counts = [len(range(q, survivors, 2)) for q in (0, 1)]
        for queue_id in (0, 1):
            assert store.get_max_offset("TopicA", queue_id) == counts[queue_id]
            records = all_records(store, "TopicA", queue_id)
            msgs = decode_records(b"".join(records), check_crc=True)
            assert [m.queue_offset for m in msgs] == list(range(counts[queue_id]))
            assert [m.body for m in msgs] == [
                make_message("TopicA", queue_id, n, size=len(m.body)).body
                for n, m in zip(range(queue_id, survivors, 2), msgs)
            ]
        assert consume_queue_matches_log(store) == survivors
        assert decode(store.query_by_key("TopicA", f"key{survivors - 1}", 5, 0, FAR).records)
        assert store.query_by_key("TopicA", f"key{survivors}", 5, 0, FAR).records == []
        # The log takes new messages where it ended, with the next queue offsets.
        result = store.put_message(make_message("TopicA", survivors % 2, 5000, keys=f"key{survivors}"))
        assert result.ok and result.queue_offset == counts[survivors % 2]
        assert result.wrote_offset in (expected_end, store.commit_log.roll_next(expected_end))
        (found,) = decode(store.query_by_key("TopicA", f"key{survivors}", 5, 0, FAR).records)
        assert found.queue_offset == result.queue_offset


async def test_crc_check_on_recover(tmp_path: Path) -> None:
    async with running(small_config(tmp_path / "live")) as store:
        results = [store.put_message(make_message(n=n, size=500)) for n in range(30)]
        crash_copy(tmp_path / "live", tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    victim = results[20]
    for root in (tmp_path / "a", tmp_path / "b"):
        with (root / "commitlog" / "00000000000000000000").open("r+b") as f:
            f.seek(victim.wrote_offset + 200)  # inside the body: only the CRC notices
            byte = f.read(1)
            f.seek(victim.wrote_offset + 200)
            f.write(bytes([byte[0] ^ 0x55]))
    async with running(small_config(tmp_path / "a")) as store:
        assert store.get_max_offset("TopicA", 0) == 20
        assert store.commit_log_max_offset == victim.wrote_offset
    async with running(small_config(tmp_path / "b", checkCRCOnRecover=False)) as store:
        assert store.get_max_offset("TopicA", 0) == 30


@pytest.mark.parametrize("abort", [True, False], ids=["abnormal", "normal"])
async def test_lost_consume_queues_and_index_are_rebuilt(tmp_path: Path, abort: bool) -> None:
    config = small_config(tmp_path / "live")
    delay_props = encode_properties({"DELAY": "3", "REAL_TOPIC": "TopicA", "REAL_QID": "1"})
    async with running(config) as store:
        for n in range(120):
            store.put_message(make_message("TopicA", n % 3, n, size=700, keys=f"k{n % 10}"))
        delayed = make_message(SCHEDULE_TOPIC, 2, 0, tags=None, store_timestamp=1_700_000_000_000)
        delayed.properties = delay_props
        delayed.tags_code = 1_700_000_000_000 + 10_000
        store.put_message(delayed)
        queues = {
            (t, q): store.read_consume_queue(t, q, 0, 1000)
            for t in store.topics()
            for q in store.queue_ids(t)
        }
        by_key = [store.query_by_key("TopicA", f"k{i}", 100, 0, FAR).records for i in range(10)]
        root = crash_copy(tmp_path / "live", tmp_path / "crashed")
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    (root / "checkpoint").unlink()
    if not abort:
        (root / "abort").unlink()
    async with running(small_config(root)) as store:
        rebuilt = {
            (t, q): store.read_consume_queue(t, q, 0, 1000)
            for t in store.topics()
            for q in store.queue_ids(t)
        }
        assert rebuilt == queues
        assert rebuilt[(SCHEDULE_TOPIC, 2)][0][2] == 1_700_000_000_000 + 10_000
        assert [store.query_by_key("TopicA", f"k{i}", 100, 0, FAR).records for i in range(10)] == by_key
        assert store.recovery is not None and store.recovery.dispatched == 121


async def test_checkpoint_chooses_where_verification_starts(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    async with running(config) as store:
        for n in range(300):
            # One message a second of store time.
            store.put_message(make_message(n=n, size=1000, store_timestamp=1_000_000_000 + n * 1000))
        files = list(store.commit_log.queue.files)
        assert len(files) >= 5
        starts = [(f.start, store.commit_log.first_store_timestamp(f)) for f in files]
    # Crash with a checkpoint saying everything up to the fourth file's middle was durable.
    (tmp_path / "abort").touch()
    stamp = starts[3][1] + 20_000
    with (tmp_path / "checkpoint").open("r+b") as f:
        f.write(struct.pack(">qqq", stamp, stamp, stamp))
    async with running(config) as store:
        assert store.recovery is not None and store.recovery.abnormal
        assert store.recovery.verified_from == starts[3][0]
        # Entries of records stored up to 3 s before the checkpoint were durable: kept.
        first_redone = (stamp - 3000 - 1_000_000_000) // 1000
        assert store.recovery.dispatched_from == store.read_consume_queue("TopicA", 0, first_redone, 1)[0][0]
        assert store.recovery.dispatched == 300 - first_redone
        assert consume_queue_matches_log(store) == 300


async def test_one_process_per_directory(tmp_path: Path) -> None:
    async with running(small_config(tmp_path)):
        second = MessageStore(small_config(tmp_path), store_host=STORE_HOST)
        with pytest.raises(StoreError, match="in use"):
            await second.start()


async def test_the_same_store_object_restarts(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path), store_host=STORE_HOST)
    await store.start()
    for n in range(100):
        store.put_message(make_message(n=n, size=1000))
    await store.shutdown()
    await store.start()
    try:
        assert store.recovery is not None and not store.recovery.abnormal
        assert store.get_max_offset("TopicA", 0) == 100
        assert len(store.commit_log.queue.files) == len(log_files(tmp_path)) >= 2
        assert store.put_message(make_message(n=100)).queue_offset == 100
        assert consume_queue_matches_log(store) == 101
    finally:
        await store.shutdown()


async def test_normal_restart_dispatches_what_the_consume_queues_lack(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    async with running(config) as store:
        for n in range(120):
            store.put_message(make_message("TopicA", n % 2, n, size=800))
        entries = {q: store.read_consume_queue("TopicA", q, 0, 100) for q in (0, 1)}
    # Both queues lost their last 7 entries (files zeroed from there). A normal restart
    # dispatches again from the furthest record any consume queue still has.
    for queue_id in (0, 1):
        last = sorted((tmp_path / "consumequeue" / "TopicA" / str(queue_id)).iterdir())[-1]
        data = bytearray(last.read_bytes())
        used = (60 % 50) * 20
        data[used - 7 * 20 :] = bytes(len(data) - used + 7 * 20)
        last.write_bytes(bytes(data))
    async with running(config) as store:
        assert store.recovery is not None and store.recovery.dispatched == 14
        assert 0 < store.recovery.dispatched_from < store.commit_log_max_offset
        assert {q: store.read_consume_queue("TopicA", q, 0, 100) for q in (0, 1)} == entries
        assert consume_queue_matches_log(store) == 120
