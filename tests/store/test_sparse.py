"""Disk use that follows the data: store files are sparse, and blocks are reserved a bounded
stretch ahead of the writes (commit log: ``CommitLog.ahead``; consume queue: half as much again
as a file holds; index: header and slots, then entries the same way), so that every byte
written through a mapping has blocks behind it and the slack stays small. On the store's
default file sizes (1 GiB commit-log files, 6,000,000-byte consume-queue files, 420 MB index
files), which is where preallocating whole files cost gigabytes.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import pytest

from aiorocketmq.broker.store import MessageStore, StoreConfig, mapped_file
from aiorocketmq.broker.store.commit_log import AHEAD
from aiorocketmq.broker.store.index import ENTRY_SIZE, HEADER_SIZE, RESERVE_LEAST, key_hash
from aiorocketmq.broker.store.mapped_file import OS_PAGE_SIZE, MappedFile, page_ceil

from .support import consume_queue_matches_log, make_message, running, small_config

PAGE = OS_PAGE_SIZE
#: What a filesystem may count in a file's blocks beyond its data (extent-tree blocks).
META = 64 * 1024


def blocks(path: Path) -> int:
    """Bytes the filesystem allocated to ``path``."""
    return os.stat(path).st_blocks * 512


def du(root: Path) -> int:
    return sum(blocks(p) for p in root.rglob("*") if p.is_file())


def defaults(root: Path) -> StoreConfig:
    config = StoreConfig(storePathRootDir=str(root))
    assert config.mapped_file_size_commit_log == 1 << 30
    assert config.consume_queue_file_size == 6_000_000
    assert (config.max_hash_slot_num, config.max_index_num) == (5_000_000, 20_000_000)
    return config


def mapped_files(store: MessageStore) -> list[MappedFile]:
    files = list(store.commit_log.queue.files)
    for cq in store.consume_queues():
        files.extend(cq.queue.files)
    return files


async def test_an_idle_store_and_a_thousand_queues_take_little(tmp_path: Path) -> None:
    async with running(defaults(tmp_path)) as store:
        idle = du(tmp_path)
        # The checkpoint; the first commit-log file is made ahead, but takes no blocks yet.
        print(f"idle store: {idle} bytes")
        assert idle <= 4 * PAGE
        for queue_id in range(1000):
            assert store.put_message(
                make_message("Wide", queue_id, queue_id, size=128, keys=f"k{queue_id}")
            ).ok
        await store.drain_io()
        for cq in store.consume_queues():
            (only,) = cq.queue.files
            assert blocks(only.path) <= PAGE, (cq.queue_id, blocks(only.path))
        (log_file,) = store.commit_log.queue.files
        assert log_file.wrote <= blocks(log_file.path) <= page_ceil(log_file.wrote) + AHEAD + PAGE + META
        assert store.index is not None
        (index,) = store.index.files
        slots_end = HEADER_SIZE + index.slot_num * 4
        assert (
            slots_end <= blocks(index.path) <= page_ceil(slots_end + 2000 * ENTRY_SIZE + RESERVE_LEAST) + META
        )
        wide = du(tmp_path)
        print(f"1,000 queues with a message each: {wide} bytes")
        assert wide < 34 << 20  # a 20 MB slot table, 8 MB ahead in the log, a page per queue
        # Their messages are all there, and found by key.
        assert consume_queue_matches_log(store) == 1000
        assert len(store.query_by_key("Wide", "k999", 4, 0, 2**62).records) == 1


async def test_every_written_byte_has_blocks_and_the_slack_is_bounded(tmp_path: Path) -> None:
    async with running(defaults(tmp_path)) as store:
        store.commit_log.ahead = 256 * 1024  # several stretches in a test-sized run
        for n in range(12_000):
            queue_id = 0 if n % 4 else 1 + n % 7
            batch = [make_message("Deep", queue_id, n * 10 + i, size=300) for i in range(1 + n % 3)]
            assert store.put_messages(batch).ok
            if n % 1000 == 0:
                for mapped in mapped_files(store):
                    assert mapped.reserved >= mapped.wrote, mapped
        await store.drain_io()
        for mapped in mapped_files(store):
            assert mapped.reserved >= mapped.wrote, mapped
            assert blocks(mapped.path) >= mapped.wrote - mapped.wrote % PAGE, mapped
        for cq in store.consume_queues():
            (only,) = cq.queue.files
            # Half as much again as it holds, and the page the end is in.
            assert blocks(only.path) <= page_ceil(only.wrote * 3 // 2) + PAGE + META, (cq.queue_id, only)
        (log_file,) = store.commit_log.queue.files
        assert blocks(log_file.path) <= page_ceil(log_file.wrote) + store.commit_log.ahead + PAGE + META
        assert consume_queue_matches_log(store) == sum(1 + n % 3 for n in range(12_000))


async def test_restart_and_cut_tails_give_their_slack_back(tmp_path: Path) -> None:
    config = defaults(tmp_path)
    async with running(config) as store:
        for n in range(500):
            assert store.put_message(make_message("Cut", n % 3, n, size=500)).ok
        offsets = {q: store.get_max_offset("Cut", q) for q in range(3)}
    async with running(config) as store:
        assert {q: store.get_max_offset("Cut", q) for q in range(3)} == offsets
        (log_file,) = store.commit_log.queue.files
        # Recovery cut the reserved tail back to the data; the next write reserves again.
        assert blocks(log_file.path) <= page_ceil(log_file.wrote) + PAGE + META
        assert store.put_message(make_message("Cut", 0, 500, size=500)).ok
        assert log_file.reserved >= log_file.wrote
        assert consume_queue_matches_log(store) == 501


def punch(path: Path, offset: int, length: int) -> None:
    """Make a stretch of ``path`` a hole (as a file made by an older version might have)."""
    fd = os.open(path, os.O_RDWR)
    try:
        assert _fallocate(fd, 0x03, offset, length) == 0  # PUNCH_HOLE | KEEP_SIZE
    finally:
        os.close(fd)


_fallocate = ctypes.CDLL(None, use_errno=True).fallocate
_fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)


async def test_a_reopened_index_fills_its_holes_and_keeps_its_entries(tmp_path: Path) -> None:
    # 64 pages of slots, a handful of keys: most slot pages hold nothing but zeros.
    config = small_config(tmp_path, maxHashSlotNum=65_536, maxIndexNum=100_000)
    async with running(config) as store:
        for n in range(20):
            assert store.put_message(make_message(n=n, keys=f"old{n}")).ok
        assert store.index is not None
        (index,) = store.index.files
        path = index.path
        touched = {(HEADER_SIZE + key_hash(f"TopicA#{key}") % 65_536 * 4) // PAGE for key in ("old0", "old1")}
    quiet = next(page for page in range(1, 64) if page not in touched)
    punch(path, quiet * PAGE, PAGE)
    before = blocks(path)
    async with running(config) as store:
        assert store.index is not None
        (index,) = store.index.files
        assert index.reserved == 0 and index.capacity == 0  # nothing written before recovery is done
        for n in range(20, 40):
            assert store.put_message(make_message(n=n, keys=f"new{n}")).ok
        # The hole got its blocks back; no old entry was overwritten.
        assert blocks(path) >= before + PAGE
        assert index.reserved >= HEADER_SIZE + 65_536 * 4 + index.index_count * ENTRY_SIZE
        for n in range(40):
            key = f"old{n}" if n < 20 else f"new{n}"
            assert len(store.query_by_key("TopicA", key, 4, 0, 2**62).records) == 1, key


def mappings_of(path: Path) -> list[tuple[int, int, set[str]]]:
    """The process's mappings of ``path``: (start, end, VmFlags) from /proc/self/smaps."""
    found: list[tuple[int, int, set[str]]] = []
    current: list[int] | None = None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
            start, end = (int(x, 16) for x in head[0].split("-"))
            current = [start, end] if line.endswith(str(path)) else None
        elif current is not None and line.startswith("VmFlags:"):
            found.append((current[0], current[1], set(line.split()[1:])))
    return found


def test_reserving_ahead_faults_in_without_readahead_and_restores_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fault into a hole reads ahead and zero-fills a whole window at once (40-97 ms of a
    core for a 2 MB stretch, docs/performance.md): the prepare thread's range is marked random
    access while it is faulted in, and only that range, and only meanwhile."""
    import mmap

    path = tmp_path / "commit"
    size = 256 * PAGE
    with path.open("w+b") as f:
        f.truncate(size)
        with mmap.mmap(f.fileno(), size) as mm:
            base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
            seen: list[list[tuple[int, int, set[str]]]] = []

            def populate(target: mmap.mmap, start: int, length: int) -> bool:
                seen.append(mappings_of(path))
                return True

            monkeypatch.setattr(mapped_file, "_populate_write", populate)
            mapped_file.reserve_mapped(mm, f.fileno(), 10 * PAGE + 100, 74 * PAGE, path)
            (during,) = seen
            random = [(s - base, e - base) for s, e, flags in during if "rr" in flags]
            assert random == [(10 * PAGE, 74 * PAGE)]
            # Afterwards one mapping again, reading ahead as before.
            assert [(s - base, e - base, "rr" in flags) for s, e, flags in mappings_of(path)] == [
                (0, size, False)
            ]
