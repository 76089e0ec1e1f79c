"""A slave's store: the master's commit-log bytes appended at the slave's end, in chunks that
split records anywhere, give the same records, consume queues and index as the master's; bytes
that do not continue the slave's log are refused and leave it as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiorocketmq.broker.store import GetStatus, MessageStore, PutStatus

from .support import STORE_HOST, make_message, small_config


async def started(root: Path, **overrides: object) -> MessageStore:
    store = MessageStore(small_config(root, **overrides), store_host=STORE_HOST)
    await store.start()
    return store


def fill(master: MessageStore, count: int, *, size: int = 300) -> None:
    for n in range(count):
        result = master.put_message(make_message("TopicA", n % 3, n, size=size, keys=f"K{n}"))
        assert result.status is PutStatus.PUT_OK


def master_bytes(master: MessageStore, start: int) -> bytes:
    chunks = []
    offset = start
    while (view := master.commit_log.data_at(offset, 1 << 20)) is not None:
        chunks.append(bytes(view))
        offset += len(view)
    return b"".join(chunks)


def replicate(slave: MessageStore, start: int, data: bytes, chunk: int) -> None:
    for pos in range(0, len(data), chunk):
        slave.append_replicated(start + pos, data[pos : pos + chunk])


def same_queues(master: MessageStore, slave: MessageStore) -> None:
    for queue_id in range(3):
        assert slave.get_max_offset("TopicA", queue_id) == master.get_max_offset("TopicA", queue_id)
        low = slave.get_min_offset("TopicA", queue_id)
        mine = slave.get_messages("g", "TopicA", queue_id, low, 1000)
        theirs = master.get_messages("g", "TopicA", queue_id, low, 1000)
        assert mine.status is GetStatus.FOUND
        assert [bytes(b) for b in mine.buffers] == [bytes(b) for b in theirs.buffers]


async def test_a_slave_rebuilds_queues_and_index_from_split_frames(tmp_path: Path) -> None:
    master = await started(tmp_path / "m")
    slave = await started(tmp_path / "s", brokerRole="SLAVE")
    try:
        fill(master, 400)  # about two 64 KiB commit-log files: a file end is crossed
        assert len(master.commit_log.queue.files) >= 2
        replicate(slave, 0, master_bytes(master, 0), 997)
        assert slave.commit_log_max_offset == master.commit_log_max_offset
        assert slave.reput_offset == master.commit_log_max_offset
        same_queues(master, slave)
        found = slave.query_by_key("TopicA", "K123", 5, 0, 1 << 62)
        assert len(found.records) == 1
        # A slave's store takes replicated bytes only.
        refused = slave.put_message(make_message("TopicA", 0, 999))
        assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE and "slave" in refused.remark
    finally:
        await master.shutdown()
        await slave.shutdown()


async def test_an_empty_slave_starts_at_a_file_start_and_survives_a_restart(tmp_path: Path) -> None:
    master = await started(tmp_path / "m")
    slave = await started(tmp_path / "s", brokerRole="SLAVE")
    try:
        fill(master, 400)
        end = master.commit_log_max_offset
        start = end - end % master.commit_log.file_size
        data = master_bytes(master, start)
        with pytest.raises(ValueError, match="not the start"):
            slave.append_replicated(start + 10, data[10:])
        # Everything but the last 50 bytes: the last record arrives torn.
        replicate(slave, start, data[:-50], 4096)
        assert slave.commit_log.min_offset == start
        assert slave.reput_offset < slave.commit_log_max_offset == end - 50
        await slave.shutdown()
        slave = await started(tmp_path / "s", brokerRole="SLAVE")
        # Recovery drops the torn record: the slave reports (and gets again) from its start.
        resume = slave.commit_log_max_offset
        assert start < resume < end - 50
        replicate(slave, resume, master_bytes(master, resume), 512)
        assert slave.commit_log_max_offset == end
        for queue_id in range(3):
            high = master.get_max_offset("TopicA", queue_id)
            assert slave.get_max_offset("TopicA", queue_id) == high
            assert slave.get_min_offset("TopicA", queue_id) > 0  # only the last file's messages
            last = slave.get_messages("g", "TopicA", queue_id, high - 1, 1)
            assert [bytes(b) for b in last.buffers] == [
                bytes(b) for b in master.get_messages("g", "TopicA", queue_id, high - 1, 1).buffers
            ]
    finally:
        await master.shutdown()
        await slave.shutdown()


async def test_a_diverged_log_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    master = await started(tmp_path / "m")
    other = await started(tmp_path / "o")
    try:
        fill(master, 20, size=500)
        fill(other, 3, size=100)  # a log of its own, shorter than the master's
    finally:
        await other.shutdown()
    slave = await started(tmp_path / "o", brokerRole="SLAVE")
    try:
        end = slave.commit_log_max_offset
        with pytest.raises(ValueError, match="ends at"):
            slave.append_replicated(end + 1, b"x")
        with pytest.raises(ValueError, match="no record"):
            slave.append_replicated(end, master_bytes(master, end))
        assert slave.commit_log_max_offset == end and slave.reput_offset == end
        assert slave.get_max_offset("TopicA", 0) == 1
    finally:
        await master.shutdown()
        await slave.shutdown()
