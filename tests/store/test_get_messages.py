"""get_messages: every status, the next-offset rules, batch caps (count, bytes, hot/cold),
tag filtering, zero-copy slices; and the time lookups."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiorocketmq.broker.store import BrokerRole, GetStatus, MessageStore
from aiorocketmq.protocol.message import tags_code

from .support import decode, make_message, running, small_config

TAG_A = tags_code("TagA")
TAG_B = tags_code("TagB")


def fill(
    store: MessageStore, count: int, *, topic: str = "TopicA", queue_id: int = 0, size: int = 100
) -> None:
    for n in range(count):
        tags = "TagA" if n % 3 else "TagB"
        assert store.put_message(make_message(topic, queue_id, n, size=size, tags=tags)).ok


async def test_found_and_offsets(tmp_path: Path) -> None:
    async with running(small_config(tmp_path)) as store:
        fill(store, 20)
        got = store.get_messages("g", "TopicA", 0, 3, 5)
        assert got.status is GetStatus.FOUND
        assert (got.next_begin_offset, got.min_offset, got.max_offset) == (8, 0, 20)
        assert got.message_count == 5 and got.buffer_total_size == sum(len(b) for b in got.buffers)
        msgs = decode(got.buffers)
        assert [m.queue_offset for m in msgs] == [3, 4, 5, 6, 7]
        assert [m.body for m in msgs] == [make_message(n=n).body for n in range(3, 8)]
        assert all(isinstance(b, memoryview) for b in got.buffers)
        assert not got.suggest_pulling_from_slave


async def test_statuses_at_the_edges(tmp_path: Path) -> None:
    async with running(small_config(tmp_path)) as store:
        empty = store.get_messages("g", "TopicA", 0, 5, 32)
        assert (empty.status, empty.next_begin_offset, empty.max_offset) == (
            GetStatus.NO_MESSAGE_IN_QUEUE,
            0,
            0,
        )
        fill(store, 10)
        one = store.get_messages("g", "TopicA", 0, 10, 32)
        assert (one.status, one.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_ONE, 10)
        badly = store.get_messages("g", "TopicA", 0, 11, 32)
        assert (badly.status, badly.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 10)
        assert one.buffers == [] and badly.message_count == 0


async def test_too_small_and_overflow_after_retention(tmp_path: Path) -> None:
    async with running(small_config(tmp_path)) as store:
        fill(store, 300, size=1000)
        assert store.delete_expired_files(force=True) >= 3
        low = store.get_min_offset("TopicA", 0)
        assert low > 0
        small = store.get_messages("g", "TopicA", 0, 0, 32)
        assert (small.status, small.next_begin_offset, small.min_offset) == (
            GetStatus.OFFSET_TOO_SMALL,
            low,
            low,
        )
        badly = store.get_messages("g", "TopicA", 0, 400, 32)
        assert (badly.status, badly.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 300)
        found = store.get_messages("g", "TopicA", 0, low, 32)
        assert found.status is GetStatus.FOUND and decode(found.buffers)[0].queue_offset == low


async def test_no_matched_message_counts_scanned_entries(tmp_path: Path) -> None:
    async with running(small_config(tmp_path)) as store:
        fill(store, 12)
        none = store.get_messages("g", "TopicA", 0, 0, 32, frozenset({tags_code("Nope")}))
        assert (none.status, none.next_begin_offset, none.message_count) == (
            GetStatus.NO_MATCHED_MESSAGE,
            12,
            0,
        )
        only_b = store.get_messages("g", "TopicA", 0, 0, 32, frozenset({TAG_B}))
        assert [m.queue_offset for m in decode(only_b.buffers)] == [0, 3, 6, 9]
        assert only_b.next_begin_offset == 12
        two_a = store.get_messages("g", "TopicA", 0, 0, 2, frozenset({TAG_A}))
        # Entries 0 (B), 1 (A), 2 (A) scanned; entry 3 made the batch full, so it is next.
        assert [m.queue_offset for m in decode(two_a.buffers)] == [1, 2]
        assert two_a.next_begin_offset == 3


async def test_scan_stops_at_consume_queue_file_and_scan_limit(tmp_path: Path) -> None:
    async with running(small_config(tmp_path)) as store:
        fill(store, 60)
        tail = store.get_messages("g", "TopicA", 0, 40, 32)
        assert tail.message_count == 10 and tail.next_begin_offset == 50  # 50 entries per file
    async with running(
        small_config(tmp_path / "big", mappedFileSizeConsumeQueue=20 * 3000, mappedFileSizeCommitLog=1 << 20)
    ) as store:
        fill(store, 2000, size=10)
        none = store.get_messages("g", "TopicA", 0, 0, 32, frozenset({tags_code("Nope")}))
        assert none.next_begin_offset == 800  # 16000 bytes of entries per call
        wide = store.get_messages("g", "TopicA", 0, 0, 1000, frozenset({tags_code("Nope")}))
        assert wide.next_begin_offset == 1000


async def test_memory_caps(tmp_path: Path) -> None:
    config = small_config(tmp_path, mappedFileSizeCommitLog=4 << 20, mappedFileSizeConsumeQueue=20 * 1000)
    async with running(config) as store:
        fill(store, 100, size=100)
        capped = store.get_messages("g", "TopicA", 0, 0, 100)
        assert capped.message_count == 32 and capped.next_begin_offset == 32
        assert store.get_messages("g", "TopicA", 0, 0, 7).message_count == 7
        fill(store, 20, queue_id=1, size=30_000)
        by_bytes = store.get_messages("g", "TopicA", 1, 0, 32)
        record = len(by_bytes.buffers[0])
        assert by_bytes.message_count == 256 * 1024 // record
        assert by_bytes.buffer_total_size <= 256 * 1024


async def test_disk_caps_and_slave_suggestion(tmp_path: Path) -> None:
    config = small_config(
        tmp_path,
        mappedFileSizeCommitLog=4 << 20,
        mappedFileSizeConsumeQueue=20 * 1000,
        totalPhysicalMemory=100_000,  # 40 % of it: messages 40 KB behind the end are "in disk"
    )
    async with running(config) as store:
        fill(store, 600, size=100)
        cold = store.get_messages("g", "TopicA", 0, 0, 32)
        assert cold.message_count == 8 and cold.suggest_pulling_from_slave
        hot = store.get_messages("g", "TopicA", 0, 580, 32)
        assert hot.message_count == 20 and not hot.suggest_pulling_from_slave
        fill(store, 4, queue_id=1, size=40_000)
        big = store.get_messages("g", "TopicA", 1, 0, 32)
        # 64 KiB per call in disk, but the first message is always taken.
        assert big.message_count == 1 and big.buffer_total_size > 40_000
        fill(store, 2, queue_id=2, size=70_000)
        huge = store.get_messages("g", "TopicA", 2, 0, 32)
        assert huge.message_count == 1 and huge.buffer_total_size > 64 * 1024


async def test_message_was_removing_and_skipping_deleted_files(tmp_path: Path) -> None:
    async with running(small_config(tmp_path)) as store:
        fill(store, 200, size=1000)
        # The state retention passes through: commit-log files gone, consume queues not yet
        # cleaned up after them.
        queue = store.commit_log.queue
        gone = queue.files[:2]
        del queue.files[:2]
        for mapped in gone:
            mapped.destroy()
        first_live = store.commit_log_min_offset
        entries = store.read_consume_queue("TopicA", 0, 0, 200)
        live = next(i for i, e in enumerate(entries) if e[0] >= first_live)
        assert 100 < live < 150
        # Entries 0..49 (one consume-queue file) all point into deleted files.
        removing = store.get_messages("g", "TopicA", 0, 0, 32)
        assert (removing.status, removing.next_begin_offset) == (GetStatus.MESSAGE_WAS_REMOVING, 50)
        assert removing.message_count == 0 and removing.min_offset == 0
        # From 100: entries into the deleted files are skipped, the first live one is found.
        mixed = store.get_messages("g", "TopicA", 0, 100, 32)
        assert mixed.status is GetStatus.FOUND
        end = min(150, live + 32)
        assert [m.queue_offset for m in decode(mixed.buffers)] == list(range(live, end))
        assert mixed.next_begin_offset == end
        store.delete_expired_files()  # nothing expired: deletes no commit-log file
        assert store.get_min_offset("TopicA", 0) == 0
        from aiorocketmq.broker.store.retention import Retention

        Retention(store).clean_derived()
        assert store.get_min_offset("TopicA", 0) == live
        small = store.get_messages("g", "TopicA", 0, 0, 32)
        assert small.status is GetStatus.OFFSET_TOO_SMALL and small.next_begin_offset == live
        await store.drain_io()
        assert not any(
            p.name.startswith("0000000000000000000") for p in (tmp_path / "consumequeue/TopicA/0").iterdir()
        )


async def test_offset_found_null(tmp_path: Path) -> None:
    async with running(small_config(tmp_path)) as store:
        fill(store, 120)
        cq = store.consume_queue("TopicA", 0)
        assert cq is not None
        # A consume-queue file dropped before the queue minimum was corrected.
        store.discard(cq.queue.files.pop(0))
        null = store.get_messages("g", "TopicA", 0, 10, 32)
        assert (null.status, null.next_begin_offset) == (GetStatus.OFFSET_FOUND_NULL, 50)
        assert store.get_messages("g", "TopicA", 0, 50, 32).status is GetStatus.FOUND


async def test_slave_does_not_correct_offsets(tmp_path: Path) -> None:
    async with running(small_config(tmp_path / "m")) as master:
        fill(master, 5)
        assert master.get_messages("g", "TopicA", 0, 9, 32).next_begin_offset == 5
    async with running(small_config(tmp_path / "m", brokerRole=BrokerRole.SLAVE)) as slave:
        badly = slave.get_messages("g", "TopicA", 0, 9, 32)
        assert (badly.status, badly.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 9)
        assert slave.get_messages("g", "Nope", 0, 3, 32).next_begin_offset == 3
        assert slave.get_messages("g", "TopicA", 0, 1, 32).message_count == 4
    config = small_config(tmp_path / "m", brokerRole=BrokerRole.SLAVE, offsetCheckInSlave=True)
    async with running(config) as checked:
        assert checked.get_messages("g", "TopicA", 0, 9, 32).next_begin_offset == 5


async def test_slices_survive_file_deletion_and_shutdown(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path), store_host=b"\x7f\0\0\1\0\0\x2a\x9f")
    await store.start()
    fill(store, 300, size=1000)
    got = store.get_messages("g", "TopicA", 0, 0, 4)
    expected = [bytes(b) for b in got.buffers]
    assert store.delete_expired_files(force=True) >= 1
    await store.drain_io()
    assert not (tmp_path / "commitlog" / "00000000000000000000").exists()
    assert [bytes(b) for b in got.buffers] == expected
    later = store.get_messages("g", "TopicA", 0, 299, 1)
    await store.shutdown()
    assert decode(later.buffers)[0].queue_offset == 299
    with pytest.raises(Exception, match="not running"):
        store.get_messages("g", "TopicA", 0, 0, 1)
    del got, later


async def test_time_lookups(tmp_path: Path) -> None:
    async with running(small_config(tmp_path)) as store:
        assert store.get_offset_by_time("TopicA", 0, 5) == 0
        assert store.get_earliest_store_time("TopicA", 0) == -1
        for n in range(100):
            msg = make_message(n=n, store_timestamp=1_000_000 + 1000 * n)
            assert store.put_message(msg).ok
        assert store.get_earliest_store_time("TopicA", 0) == 1_000_000
        assert store.get_store_time("TopicA", 0, 42) == 1_042_000
        assert store.get_store_time("TopicA", 0, 100) == -1
        assert store.get_store_time("TopicA", 0, -1) == -1
        assert store.get_offset_by_time("TopicA", 0, 0) == 0
        assert store.get_offset_by_time("TopicA", 0, 1_042_000) == 42
        assert store.get_offset_by_time("TopicA", 0, 1_042_001) == 43
        assert store.get_offset_by_time("TopicA", 0, 1_099_000) == 99
        assert store.get_offset_by_time("TopicA", 0, 2_000_000) == 100
        for offset in range(100):
            stamp = store.get_store_time("TopicA", 0, offset)
            assert store.get_offset_by_time("TopicA", 0, stamp) == offset
