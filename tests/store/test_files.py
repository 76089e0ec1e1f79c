"""Mapped files and consume queues, below the store: naming, loading, views, entries."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from aiorocketmq.broker.store import StoreConfig
from aiorocketmq.broker.store.consume_queue import BLANK_SIZE, ConsumeQueue
from aiorocketmq.broker.store.mapped_file import MappedFile, MappedFileQueue, StoreError, allocate, file_name

from .support import make_message, running, small_config


def test_file_names_are_20_digit_offsets() -> None:
    assert file_name(0) == "00000000000000000000"
    assert file_name(1 << 30) == "00000000001073741824"


def test_views_outlive_close_and_destroy(tmp_path: Path) -> None:
    mapped = MappedFile.open(tmp_path / file_name(0), 0, 4096, create=True)
    mapped.view[0:5] = b"hello"
    piece = mapped.view[0:5]
    mapped.destroy()  # the mmap cannot close while a slice exists: no error, unmapped later
    assert not (tmp_path / file_name(0)).exists()
    assert bytes(piece) == b"hello"
    again = MappedFile.open(tmp_path / file_name(4096), 4096, 4096, create=True)
    again.close()
    again.close()
    assert again.mm.closed


def test_queue_load_checks_continuity(tmp_path: Path) -> None:
    queue = MappedFileQueue(tmp_path / "q", 4096)
    queue.create(0)
    queue.create(4096)
    queue.create(8192)
    queue.close()
    (tmp_path / "q" / file_name(4096)).unlink()
    with pytest.raises(StoreError, match="does not follow"):
        MappedFileQueue(tmp_path / "q", 4096).load()
    with pytest.raises(StoreError, match="configured file size"):
        MappedFileQueue(tmp_path / "q", 8192).load()


def test_short_files_grow_and_leftovers_go(tmp_path: Path) -> None:
    directory = tmp_path / "q"
    directory.mkdir()
    (directory / file_name(0)).write_bytes(b"abc")
    (directory / (file_name(4096) + ".alloc")).write_bytes(b"")
    queue = MappedFileQueue(directory, 4096)
    queue.load()
    assert [f.path.name for f in queue.files] == [file_name(0)]
    assert (directory / file_name(0)).stat().st_size == 4096
    assert bytes(queue.files[0].view[:4]) == b"abc\0"
    assert not (directory / (file_name(4096) + ".alloc")).exists()
    queue.close()


def test_truncate_zeroes_the_tail(tmp_path: Path) -> None:
    queue = MappedFileQueue(tmp_path / "q", 4096)
    for start in (0, 4096):
        mapped = queue.create(start)
        mapped.view[:] = b"\xff" * 4096
        mapped.wrote = 4096
    removed = queue.truncate(1000)
    assert [f.start for f in removed] == [4096]
    assert queue.max_offset == 1000
    assert bytes(queue.files[0].view[1000:]) == bytes(3096)
    assert bytes(queue.files[0].view[:1000]) == b"\xff" * 1000
    for mapped in removed:
        mapped.destroy()
    queue.close()


def test_allocate_then_adopt(tmp_path: Path) -> None:
    queue = MappedFileQueue(tmp_path, 64 * 1024)
    mapped = allocate(tmp_path, 64 * 1024, 64 * 1024, reserve_first=100)
    assert mapped.path.name.endswith(".alloc")
    queue.adopt(mapped)
    assert mapped.path.name == file_name(64 * 1024) and mapped.path.stat().st_size == 64 * 1024
    # Sparse: the first page has its blocks, the rest of the file none yet.
    assert mapped.reserved == 4096
    assert mapped.path.stat().st_blocks * 512 <= 8192
    queue.close()


def test_flush_plan_thresholds(tmp_path: Path) -> None:
    queue = MappedFileQueue(tmp_path, 64 * 1024)
    mapped = queue.create(0)
    mapped.wrote = 3 * 4096 + 100
    assert queue.flush_plan(4) is None
    assert queue.flush_plan(3) is not None
    plan = queue.flush_plan(0)
    assert plan is not None and plan[0] == mapped.wrote and plan[1] == [mapped]
    queue.flushed_where = mapped.wrote
    assert queue.flush_plan(0) is None
    mapped.wrote = 64 * 1024  # a full file is always worth a flush
    queue.create(64 * 1024).wrote = 10
    plan = queue.flush_plan(4)
    assert plan is not None and [f.start for f in plan[1]] == [0, 64 * 1024]
    queue.close()


def test_consume_queue_file_size_is_rounded_to_entries(tmp_path: Path) -> None:
    assert (
        StoreConfig(storePathRootDir=str(tmp_path), mappedFileSizeConsumeQueue=1001).consume_queue_file_size
        == 1020
    )
    assert StoreConfig().consume_queue_file_size == 6_000_000


async def test_consume_queue_entries_on_disk(tmp_path: Path) -> None:
    async with running(small_config(tmp_path)) as store:
        results = [store.put_message(make_message("TopicA", 3, n, tags=f"t{n % 2}")) for n in range(120)]
        entries = store.read_consume_queue("TopicA", 3, 0, 500)
        assert len(entries) == 120
    directory = tmp_path / "consumequeue" / "TopicA" / "3"
    assert sorted(p.name for p in directory.iterdir()) == [file_name(0), file_name(1000), file_name(2000)]
    raw = b"".join((directory / name).read_bytes() for name in (file_name(0), file_name(1000)))
    raw += (directory / file_name(2000)).read_bytes()[: 20 * 20]
    for n, result in enumerate(results):
        offset, size, code = struct.unpack_from(">qiq", raw, n * 20)
        assert (offset, size, code) == (
            result.wrote_offset,
            result.wrote_bytes,
            make_message(n=n, tags=f"t{n % 2}").tags_code,
        )
        assert entries[n] == (offset, size, code)


def test_consume_queue_blank_head_duplicates_and_gaps(tmp_path: Path) -> None:
    cq = ConsumeQueue(tmp_path, "T", 0, 50 * 20)
    cq.put(10_000, 100, 7, 73)
    assert (cq.min_offset, cq.max_offset) == (73, 74)
    assert cq.queue.files[0].start == 50 * 20
    assert cq.entry(50) == (0, BLANK_SIZE, 0) and cq.entry(72) == (0, BLANK_SIZE, 0)
    assert cq.entry(73) == (10_000, 100, 7)
    cq.put(10_000, 100, 7, 73)  # dispatched again: ignored
    cq.put(9_000, 100, 7, 72)
    assert cq.max_offset == 74
    cq.put(10_100, 100, 8, 74)
    cq.put(10_300, 100, 9, 76)  # a gap in queue offsets: blanked, the entry lands at 76
    assert cq.max_offset == 77 and cq.entry(75) == (0, BLANK_SIZE, 0) and cq.entry(76) == (10_300, 100, 9)
    assert cq.entries(73, 10) == [(10_000, 100, 7), (10_100, 100, 8), (0, BLANK_SIZE, 0), (10_300, 100, 9)]
    assert cq.entries(72, 10) == []
    cq.close()


def test_consume_queue_load_drops_torn_tail(tmp_path: Path) -> None:
    cq = ConsumeQueue(tmp_path, "T", 0, 50 * 20)
    for n in range(60):
        cq.put(1000 + n * 100, 100, n, n)
    last = cq.queue.files[-1]
    # A torn last entry: its offset never made it (reads as 0, behind its predecessor).
    struct.pack_into(">qiq", last.view, 9 * 20, 0, 100, 59)
    cq.close()
    again = ConsumeQueue(tmp_path, "T", 0, 50 * 20)
    again.load()
    assert (again.min_offset, again.max_offset, again.max_physic_end) == (0, 59, 1000 + 58 * 100 + 100)
    removed = again.truncate_from_physical(1000 + 30 * 100)
    assert [f.start for f in removed] == [1000]
    for mapped in removed:
        mapped.destroy()
    assert again.max_offset == 30 and again.max_physic_end == 1000 + 30 * 100
    again.put(1000 + 30 * 100, 100, 30, 30)
    assert again.max_offset == 31
    again.close()
