"""Flushing: SYNC_FLUSH group commit and its timeout, ASYNC_FLUSH thresholds, consume-queue and
checkpoint flushes (rounds with a threshold look only at the queues a write made due; each queue
is flushed in full once per sweep, a slice a round), and that no fsync or preallocation ever
runs on the event loop."""

from __future__ import annotations

import asyncio
import errno
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from aiorocketmq.broker.store import FlushDiskType, PutStatus, StoreConfig, flush
from aiorocketmq.broker.store.checkpoint import Checkpoint
from aiorocketmq.broker.store.mapped_file import MappedFile

from .support import make_message, running, small_config


@dataclass
class DiskCall:
    name: str
    path: str
    thread: threading.Thread
    at: float


@dataclass
class Disk:
    """Records fsync-like calls and reservations (pwrite) with the file they hit, and can make
    the commit log's syncs slow or stall."""

    calls: list[DiskCall] = field(default_factory=list)
    delay: float = 0.0
    stall: threading.Event | None = None

    def wrap(self, name: str, real: Callable[..., object]) -> Callable[..., object]:
        def call(fd: int, *args: object) -> object:
            try:
                path = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                path = "?"
            self.calls.append(DiskCall(name, path, threading.current_thread(), time.monotonic()))
            if "commitlog" in path and name != "pwrite":
                if self.stall is not None:
                    self.stall.wait(10)
                if self.delay:
                    time.sleep(self.delay)
            return real(fd, *args)

        return call

    def on(self, part: str) -> list[DiskCall]:
        return [c for c in self.calls if part in c.path]


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[Disk]:
    recorder = Disk()
    for name in ("fdatasync", "fsync", "pwrite"):
        monkeypatch.setattr(os, name, recorder.wrap(name, getattr(os, name)))
    # The group commit's syncs must go through ``os`` to be seen (and stalled): its Python
    # thread does; the compiled one calls fdatasync(2) itself. So the flusher's tests here run
    # on the Python twin; tests/store/test_group_sync.py holds both twins to one contract, and
    # tests/broker/test_broker.py watches the compiled one in a real broker with strace.
    monkeypatch.setattr(flush, "GroupSync", flush.PureGroupSync)
    yield recorder
    if recorder.stall is not None:
        recorder.stall.set()


async def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.005)


async def test_sync_flush_acknowledges_after_fsync(tmp_path: Path, disk: Disk) -> None:
    async with running(small_config(tmp_path, flushDiskType="SYNC_FLUSH")) as store:
        for n in range(20):
            result = store.put_message(make_message(n=n))
            before = time.monotonic()
            assert await store.wait_flushed(result) is PutStatus.PUT_OK
            end = result.wrote_offset + result.wrote_bytes
            assert store.commit_log.queue.flushed_where >= end
            synced = [c for c in disk.on("commitlog/0000") if c.name == "fdatasync" and c.at >= before]
            assert synced, "acknowledged without an fdatasync of the commit log after the put"


async def test_group_commit_shares_fsyncs(tmp_path: Path, disk: Disk) -> None:
    disk.delay = 0.003  # a disk that takes 3 ms per fsync
    config = small_config(tmp_path, flushDiskType=FlushDiskType.SYNC_FLUSH, mappedFileSizeCommitLog=1 << 20)
    async with running(config) as store:
        statuses: list[PutStatus] = []

        async def writer(w: int) -> None:
            for n in range(10):
                result = store.put_message(make_message("TopicA", w % 4, w * 100 + n))
                statuses.append(await store.wait_flushed(result))

        await asyncio.gather(*(writer(w) for w in range(64)))
        assert statuses == [PutStatus.PUT_OK] * 640
        rounds = [c for c in disk.on("commitlog/0000") if c.name == "fdatasync"]
        assert 0 < len(rounds) <= 640 // 8, len(rounds)


async def test_sync_flush_timeout(tmp_path: Path, disk: Disk) -> None:
    disk.stall = threading.Event()
    config = small_config(tmp_path, flushDiskType="SYNC_FLUSH", syncFlushTimeout=200)
    async with running(config) as store:
        result = store.put_message(make_message(n=1))
        started = time.monotonic()
        assert await store.wait_flushed(result) is PutStatus.FLUSH_DISK_TIMEOUT
        assert time.monotonic() - started >= 0.19
        assert store.read_record(result.wrote_offset) is not None  # stored, just not durable yet
        disk.stall.set()
        later = store.put_message(make_message(n=2))
        assert await store.wait_flushed(later) is PutStatus.PUT_OK


async def test_a_round_that_ended_is_answered_between_requests_without_a_turn_of_the_loop(
    tmp_path: Path, disk: Disk
) -> None:
    # The broker's connections call the store's settler between the requests of one read: a
    # put a finished round covered is answered there and then, not once the loop reads the
    # group's pipe after the rest of the read.
    async with running(small_config(tmp_path, flushDiskType="SYNC_FLUSH")) as store:
        settle = store.flush_settler()
        assert settle is not None
        assert settle() is False  # no round has ended
        result = store.put_message(make_message(n=1))
        calls: list[PutStatus] = []
        store.when_flushed(result, calls.append)
        await asyncio.sleep(0)  # the hand-over to the disk thread runs at the end of this turn
        deadline = time.monotonic() + 5
        # Never yielding, as a long read does: the pipe's reader cannot run meanwhile.
        while not settle():
            assert time.monotonic() < deadline, "the round did not end"
            time.sleep(0.001)  # noqa: ASYNC251 (blocking on purpose: the loop must not turn)
        assert calls == [PutStatus.PUT_OK]
        assert store.commit_log.queue.flushed_where >= result.wrote_offset + result.wrote_bytes
        assert settle() is False  # that round is settled
        await asyncio.sleep(0.05)  # the pipe's wake-up, read later, answers nobody twice
        assert calls == [PutStatus.PUT_OK]
    async with running(small_config(tmp_path / "async")) as store:
        assert store.flush_settler() is None  # ASYNC_FLUSH: nobody waits for a round


async def test_flush_callbacks_are_called_once_by_the_flush_covering_them_or_their_timeout(
    tmp_path: Path, disk: Disk, caplog: pytest.LogCaptureFixture
) -> None:
    # The send path's way to wait: a callback from the flush's own settling, no future.
    disk.stall = threading.Event()
    config = small_config(tmp_path, flushDiskType="SYNC_FLUSH", syncFlushTimeout=300)
    async with running(config) as store:
        first = store.put_message(make_message(n=1))
        end = first.wrote_offset + first.wrote_bytes
        calls: list[tuple[str, PutStatus, bool]] = []

        def record(name: str) -> Callable[[PutStatus], None]:
            def callback(status: PutStatus) -> None:
                calls.append((name, status, store.commit_log.queue.flushed_where >= end))

            return callback

        def broken(status: PutStatus) -> None:
            raise RuntimeError("a waiter's own bug")

        store.when_flushed(first, broken)
        store.when_flushed(first, record("a"))
        await asyncio.sleep(0.05)
        assert calls == []  # the disk is stalled: nothing is on it yet
        disk.stall.set()
        await wait_until(lambda: bool(calls))
        assert calls == [("a", PutStatus.PUT_OK, True)]  # the broken one kept nobody waiting
        assert "a flush waiter's callback failed" in caplog.text
        store.when_flushed(first, record("b"))  # already on disk: called at once
        assert calls[-1] == ("b", PutStatus.PUT_OK, True)

        disk.stall = threading.Event()
        late = store.put_message(make_message(n=2))
        store.when_flushed(late, record("c"))
        await wait_until(lambda: len(calls) == 3)
        assert calls[2][:2] == ("c", PutStatus.FLUSH_DISK_TIMEOUT)
        disk.stall.set()
        assert await store.wait_flushed(store.put_message(make_message(n=3))) is PutStatus.PUT_OK
        assert len(calls) == 3  # a waiter that timed out is not called again when the flush lands


async def test_after_a_failed_fdatasync_no_put_is_told_it_is_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Linux marks pages whose write-back failed clean and reports the error once: a later
    # fdatasync that succeeds says nothing about them, nor about pages shared with later puts.
    monkeypatch.setattr(flush, "GroupSync", flush.PureGroupSync)
    real = os.fdatasync
    failing = [1]

    def fdatasync(fd: int) -> None:
        if "commitlog" in os.readlink(f"/proc/self/fd/{fd}") and failing[0] > 0:
            failing[0] -= 1
            raise OSError(errno.EIO, "the disk says no")
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    config = small_config(tmp_path, flushDiskType="SYNC_FLUSH", syncFlushTimeout=5000)
    async with running(config) as store:
        first = store.put_message(make_message(n=1))
        started = time.monotonic()
        assert await store.wait_flushed(first) is PutStatus.FLUSH_DISK_TIMEOUT
        assert time.monotonic() - started < 2  # answered at the failure, not at the timeout
        assert store.read_record(first.wrote_offset) is not None  # stored all the same
        assert "commit-log flush failed" in caplog.text
        flusher = store._commit_log_flusher
        assert flusher is not None and flusher.disk_error == errno.EIO
        assert await asyncio.wait_for(flusher.flush(0), 5) is False
        later = store.put_message(make_message(n=2))
        assert await asyncio.wait_for(store.wait_flushed(later), 1) is PutStatus.FLUSH_DISK_TIMEOUT
        assert store.read_record(later.wrote_offset) is not None
        assert store.commit_log.queue.flushed_where < first.wrote_offset + first.wrote_bytes
        assert (flusher.failures, failing) == (1, [0])
    # The abort file stays: the next start recovers as after a crash.
    assert (tmp_path / "abort").exists()


async def test_a_round_in_flight_when_the_log_is_cut_back_covers_nothing(tmp_path: Path, disk: Disk) -> None:
    # A slave cuts its log back when the master's bytes do not fit: the round that was
    # syncing the old bytes must not count the new ones written at the same offsets.
    # The files cut away are deleted while the thread still has them to sync: it syncs its
    # own descriptors, so that is no failure.
    disk.stall = threading.Event()
    config = small_config(tmp_path, flushDiskType="SYNC_FLUSH", syncFlushTimeout=300)
    async with running(config) as store:
        queue = store.commit_log.queue
        first = store.put_message(make_message(n=1))
        last = first
        while len(queue.files) < 2:
            last = store.put_message(make_message(n=2, size=2000))
        statuses: list[PutStatus] = []
        store.when_flushed(last, statuses.append)
        # The round is syncing (stalled in its fdatasync).
        await wait_until(lambda: any(c.name == "fdatasync" for c in disk.on("commitlog/0000")))
        for mapped in queue.truncate(first.wrote_offset):
            mapped.destroy()
        disk.stall.set()
        await wait_until(lambda: bool(statuses))
        assert statuses == [PutStatus.FLUSH_DISK_TIMEOUT]
        assert queue.flushed_where <= first.wrote_offset
        again = store.put_message(make_message(n=3))
        assert again.wrote_offset == first.wrote_offset
        assert await store.wait_flushed(again) is PutStatus.PUT_OK
        flusher = store._commit_log_flusher
        assert flusher is not None and flusher.failures == 0


async def test_a_new_commit_log_file_is_named_on_disk_before_a_put_in_it_is_answered(
    tmp_path: Path, disk: Disk
) -> None:
    config = small_config(tmp_path, flushDiskType="SYNC_FLUSH")
    async with running(config) as store:
        queue = store.commit_log.queue
        result = store.put_message(make_message(n=1))
        while len(queue.files) < 2:
            result = store.put_message(make_message(n=2, size=2000))
        assert result.wrote_offset >= queue.files[1].start  # in the new file
        calls = len(disk.calls)
        assert await store.wait_flushed(result) is PutStatus.PUT_OK
        directory = str(queue.directory.resolve())
        assert any(c.name == "fsync" and c.path == directory for c in disk.calls[calls:])


async def test_async_flush_thresholds(tmp_path: Path, disk: Disk) -> None:
    def config(root: Path, thorough_ms: int) -> StoreConfig:
        return small_config(
            root,
            mappedFileSizeCommitLog=1 << 20,
            flushIntervalCommitLog=20,
            flushCommitLogThoroughInterval=thorough_ms,
        )

    async with running(config(tmp_path / "a", 400)) as store:
        started = time.monotonic()
        small = store.put_message(make_message(n=0, size=100))
        assert await store.wait_flushed(small) is PutStatus.PUT_OK  # ASYNC: nothing to wait for
        queue = store.commit_log.queue
        # Under 4 dirty pages: only the thorough flush (every 400 ms) takes it.
        await wait_until(lambda: queue.flushed_where >= small.wrote_offset + small.wrote_bytes)
        assert time.monotonic() - started >= 0.35
    async with running(config(tmp_path / "b", 3_600_000)) as store:
        # 4 pages dirty: a 20 ms round flushes them, with no thorough flush due for an hour.
        for n in range(40):
            store.put_message(make_message(n=n, size=500))
        queue = store.commit_log.queue
        await wait_until(lambda: queue.flushed_where == store.commit_log_max_offset)


async def test_consume_queues_index_and_checkpoint_are_flushed(tmp_path: Path, disk: Disk) -> None:
    config = small_config(tmp_path, flushIntervalConsumeQueue=20, flushConsumeQueueThoroughInterval=0)
    async with running(config) as store:
        results = [store.put_message(make_message(n=n, keys="k")) for n in range(5)]
        stamp = results[-1].store_timestamp
        await wait_until(lambda: store.checkpoint.logics_timestamp >= stamp)
        await wait_until(lambda: store.checkpoint.index_timestamp >= stamp)
        assert disk.on("consumequeue/TopicA/0/0000")
        assert disk.on("/index/")
        assert disk.on("/checkpoint")
    physic, logics, index = struct.unpack(">qqq", (tmp_path / "checkpoint").read_bytes()[:24])
    assert physic >= stamp and logics >= stamp and index >= stamp
    assert (tmp_path / "checkpoint").stat().st_size == 4096
    assert not (tmp_path / "abort").exists()


async def test_index_files_are_synced_when_one_fills_or_in_a_full_round_not_every_round(
    tmp_path: Path, disk: Disk
) -> None:
    # A sync makes the index's pages read-only again and keys land on random slots, so a
    # round that synced the index made nearly every later key's write fault: only a file that
    # filled, a sweep's first round and a full round (shutdown) sync it. The timed loop is kept
    # out of the way (an hour between rounds); the rounds here are run by hand.
    config = small_config(tmp_path, flushIntervalConsumeQueue=3_600_000, maxIndexNum=30)

    def index_syncs() -> list[str]:
        return [call.path for call in disk.on("/index/") if call.name != "pwrite"]

    async with running(config) as store:
        flusher = store.workers.logics_flusher
        assert flusher is not None
        first = [store.put_message(make_message(n=n, keys=f"k{n}")) for n in range(5)]
        await flusher.flush(1)  # a round with a threshold: the consume queues only
        assert not index_syncs()
        assert store.checkpoint.index_timestamp < first[-1].store_timestamp
        # 30 entries a file (a message's key and its unique key): these fill the first one,
        # which is synced by the next round, with the checkpoint's index stamp moved on.
        filled = [store.put_message(make_message(n=n, keys=f"k{n}")) for n in range(5, 20)]
        await flusher.flush(1)
        files = sorted(str(path) for path in (tmp_path / "index").iterdir())
        assert len(files) == 2
        assert files[0] in index_syncs()
        assert store.checkpoint.index_timestamp >= filled[-1].store_timestamp
        # More keys, none filling a file: not synced until a full round.
        synced = len(index_syncs())
        last = store.put_message(make_message(n=20, keys="k20"))
        await flusher.flush(1)
        assert len(index_syncs()) == synced
        await flusher.flush(0)
        assert index_syncs()[synced:] == [files[1]]
        assert store.checkpoint.index_timestamp >= last.store_timestamp


@pytest.mark.parametrize("mode", ["SYNC_FLUSH", "ASYNC_FLUSH"])
async def test_no_disk_sync_on_the_event_loop(tmp_path: Path, disk: Disk, mode: str) -> None:
    loop_thread = threading.current_thread()
    config = small_config(
        tmp_path, flushDiskType=mode, flushIntervalCommitLog=10, flushIntervalConsumeQueue=10, maxIndexNum=30
    )
    async with running(config) as store:
        waits = []
        for n in range(300):
            result = store.put_message(make_message(n=n, size=700, keys="k"))
            waits.append(store.wait_flushed(result))
        assert set(await asyncio.gather(*waits)) == {PutStatus.PUT_OK}
        await asyncio.sleep(0.1)
        store.delete_expired_files(force=True)
        store.delete_topic("TopicA")
    async with running(config) as store:
        assert store.put_message(make_message(n=1)).ok
    names = {c.name for c in disk.calls}
    assert {"fdatasync", "fsync", "pwrite"} <= names
    # Reserving blocks is not a sync: zeros written into the page cache where a put is about
    # to write (consume-queue and index entries, and the commit log when the stretch reserved
    # ahead is not there yet). No fsync or fdatasync ever runs on the loop.
    on_loop = [c for c in disk.calls if c.thread is loop_thread and c.name != "pwrite"]
    assert on_loop == []


async def test_threshold_rounds_look_only_at_queues_a_write_made_due(tmp_path: Path) -> None:
    config = small_config(
        tmp_path,
        mappedFileSizeConsumeQueue=1000 * 20,
        flushIntervalConsumeQueue=10,
        flushConsumeQueueThoroughInterval=3_600_000,
    )
    async with running(config) as store:
        # Puts are synchronous: no round runs between them and the checks of the due set.
        for queue_id in range(200):
            assert store.put_message(make_message("Quiet", queue_id, n=queue_id)).ok
        quiet = [store.consume_queue("Quiet", queue_id) for queue_id in range(200)]
        assert all(q is not None for q in quiet)
        # One entry each, under a page: no write made them due, so no threshold round looks.
        assert not [q for q in quiet if q is not None and q.queue in store._flush_due]
        # 500 entries are 10,000 bytes: past the threshold, flushed by a threshold round.
        for n in range(500):
            assert store.put_message(make_message("Busy", 0, n=n)).ok
        busy = store.consume_queue("Busy", 0)
        assert busy is not None and busy.queue in store._flush_due
        await wait_until(lambda: busy.queue.flushed_where == busy.max_offset * 20)
        # Only the sweep flushes a quiet queue, one slice of 201 queues per round of the
        # 360 in its hour: a handful at most by now, not the 200.
        flushed = [q for q in quiet if q is not None and q.queue.flushed_where >= q.max_offset * 20]
        assert len(flushed) < 10, len(flushed)


async def test_every_queue_is_flushed_in_full_once_per_sweep_a_slice_per_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []  # consume-queue files per round's sync
    real = flush.sync_all

    def sync_all(files: list[MappedFile]) -> None:
        synced.append(sum(1 for f in files if "consumequeue" in str(getattr(f, "path", ""))))
        real(files)

    monkeypatch.setattr(flush, "sync_all", sync_all)
    # 40 rounds of 10 ms per sweep.
    config = small_config(tmp_path, flushIntervalConsumeQueue=10, flushConsumeQueueThoroughInterval=400)
    async with running(config) as store:
        for queue_id in range(80):
            assert store.put_message(make_message("Quiet", queue_id, n=queue_id)).ok
        queues = [store.consume_queue("Quiet", q) for q in range(80)]
        # One entry each: under the page threshold, only the sweep flushes them.
        await wait_until(lambda: all(q is not None and q.queue.flushed_where == 20 for q in queues))
        assert sum(synced) >= 80
        assert max(synced) <= 8, synced  # about 2 a round, never all 80 at once


async def test_the_checkpoint_covers_consume_queue_entries_only_once_their_sweep_flushed_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recovery after a crash re-dispatches from the checkpoint's logics timestamp: a round
    that left a queue unflushed must not move it past that queue's entries."""
    written: list[tuple[int, bool]] = []  # (logics timestamp written, every quiet queue flushed)
    queues: list[Any] = []
    real = Checkpoint.flush

    def record(self: Checkpoint, stamps: tuple[int, int, int] | None = None) -> None:
        logics = stamps[1] if stamps is not None else self.logics_timestamp
        written.append((logics, bool(queues) and all(q.queue.flushed_where == 20 for q in queues)))
        real(self, stamps)

    monkeypatch.setattr(Checkpoint, "flush", record)
    # 40 rounds of 10 ms per sweep; one entry per queue stays under the page threshold.
    config = small_config(tmp_path, flushIntervalConsumeQueue=10, flushConsumeQueueThoroughInterval=400)
    async with running(config) as store:
        stamps = []
        for queue_id in range(80):
            result = store.put_message(make_message("Quiet", queue_id, n=queue_id))
            assert result.ok
            stamps.append(result.store_timestamp)
        queues.extend(store.consume_queue("Quiet", q) for q in range(80))
        await wait_until(lambda: any(logics >= max(stamps) for logics, _ in written))
        covering = [all_flushed for logics, all_flushed in written if logics >= min(stamps)]
        assert covering and all(covering), written
