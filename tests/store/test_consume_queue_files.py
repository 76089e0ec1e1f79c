"""Consume-queue files made off the event loop: a send to a queue without a file (or near the
end of its last one) has a worker make it, and the put that follows allocates nothing on the
loop; a worker that fails leaves the put to allocate (or refuse) as before."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from aiorocketmq.broker.store import consume_queue
from aiorocketmq.broker.store.mapped_file import MappedFile
from aiorocketmq.protocol.message import decode_records

from .support import consume_queue_matches_log, make_message, running, small_config

PER_FILE = 50


def record_allocations(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, threading.Thread]]:
    """(consume-queue file path, thread) of every consume-queue file created from now on."""
    calls: list[tuple[str, threading.Thread]] = []
    real = os.open

    def open_(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_CREAT and "consumequeue" in str(path):
            calls.append((str(path), threading.current_thread()))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    return calls


async def test_queue_files_are_made_by_a_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loop_thread = threading.current_thread()
    calls = record_allocations(monkeypatch)
    config = small_config(tmp_path, mappedFileSizeConsumeQueue=PER_FILE * 20)
    async with running(config) as store:
        # A queue's first file: the send waits for the worker, then puts.
        room = store.room_pending("TopicA", 0, 1)
        assert room is not None
        assert (await room.defer(lambda: store.put_message(make_message(n=0)))).ok
        assert len(calls) == 1 and calls[0][1] is not loop_thread
        assert store.room_pending("TopicA", 0, 1) is None

        # Near the end of the file the next one is started ahead, and the roll waits for nothing.
        cq = store.consume_queue("TopicA", 0)
        assert cq is not None
        for n in range(1, 3 * PER_FILE):
            assert store.room_pending("TopicA", 0, 1) is None
            if cq.preparing is not None:
                cq.preparing.result(timeout=10)  # (a broker serves other sends meanwhile)
            assert store.put_message(make_message(n=n)).ok
        assert [f.start for f in cq.queue.files] == [0, PER_FILE * 20, 2 * PER_FILE * 20]
        # The first file, the two it rolled into, and the one after them, started ahead.
        assert [Path(path).name[:20] for path, _thread in calls] == [
            f"{start:020d}" for start in range(0, 4 * PER_FILE * 20, PER_FILE * 20)
        ]
        assert all(thread is not loop_thread for _path, thread in calls)
        assert consume_queue_matches_log(store) == 3 * PER_FILE
    # Restarted, the queue reads the same (no leftover temporary files broke it).
    async with running(config) as store:
        assert consume_queue_matches_log(store) == 3 * PER_FILE
        assert not [p for p in (tmp_path / "consumequeue").rglob("*") if p.name.endswith(".alloc")]


async def test_a_failed_worker_leaves_the_put_to_allocate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop_thread = threading.current_thread()
    real = consume_queue.allocate

    def allocate(*args: Any, **kwargs: Any) -> MappedFile:
        if threading.current_thread() is not loop_thread:
            raise OSError(errno.EIO, "the worker's disk says no")
        return real(*args, **kwargs)

    monkeypatch.setattr(consume_queue, "allocate", allocate)
    async with running(small_config(tmp_path)) as store:
        room = store.room_pending("TopicB", 3, 1)
        assert room is not None
        result = await room.defer(lambda: store.put_message(make_message("TopicB", 3, n=0)))
        assert result.ok
        assert store.read_consume_queue("TopicB", 3, 0, 1)[0][0] == result.wrote_offset


async def test_dropped_queue_discards_the_file_being_made(tmp_path: Path) -> None:
    async with running(small_config(tmp_path)) as store:
        assert store.put_message(make_message("TopicC", 0, n=0)).ok
        # Hold the (one) io worker so the file is made only after the topic is gone.
        gate = threading.Event()
        assert store._io_executor is not None
        store._io_executor.submit(gate.wait, 10)
        room = store.room_pending("TopicC", 1, 1)
        assert room is not None
        store.delete_topic("TopicC")
        gate.set()
        await room.defer(lambda: None)
        await store.drain_io()
        assert store.consume_queue("TopicC", 1) is None
    leftovers = [p for p in (tmp_path / "consumequeue").rglob("*") if p.is_file()]
    assert leftovers == []


async def test_sends_waiting_for_a_new_file_keep_their_order(tmp_path: Path) -> None:
    """Puts deferred while a queue's file is made run in the order they arrived, before any
    put that arrives after the file is made; one that fails does not stop the others."""
    async with running(small_config(tmp_path)) as store:
        gate = threading.Event()
        assert store._io_executor is not None
        store._io_executor.submit(gate.wait, 10)
        stored: list[int] = []

        def put(n: int) -> int:
            if n == 1:
                raise RuntimeError("this put fails")
            assert store.put_message(make_message("TopicD", 0, n=n)).ok
            stored.append(n)
            return n

        def send(n: int) -> asyncio.Future[int] | None:
            """As the send handler does: defer the put if the queue waits for its file."""
            room = store.room_pending("TopicD", 0, 1)
            if room is None:
                put(n)
                return None
            return room.defer(lambda: put(n))

        waiting = [send(n) for n in range(3)]
        cq = store.consume_queue("TopicD", 0)
        assert cq is not None and cq.preparing is not None
        gate.set()
        cq.preparing.result(timeout=10)  # made; the loop has not run the deferred puts yet
        waiting.append(send(3))  # so this one goes behind them
        results = await asyncio.gather(*[w for w in waiting if w is not None], return_exceptions=True)
        assert results[0] == 0 and isinstance(results[1], RuntimeError) and results[2:] == [2, 3]
        assert send(4) is None  # the file is there: puts go straight in
        assert stored == [0, 2, 3, 4]
        got = store.get_messages("g", "TopicD", 0, 0, 10)
        bodies = [m.body for buf in got.buffers for m in decode_records(buf)]
        assert bodies == [make_message("TopicD", 0, n=n).body for n in (0, 2, 3, 4)]
