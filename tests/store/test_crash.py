"""Durability under kill -9: a child process appends with SYNC_FLUSH and reports each message
the store acknowledged; the parent kills it at a random moment, then reopens the store and
checks that every acknowledged message is there, intact, at its queue offset, that consume
queues agree with the commit log, and that the index finds them. The files are sparse, their
blocks reserved a short stretch ahead of the writes, so the tails recovery reads are holes.
Each store directory lives through several kills, so later children recover what earlier
kills left (every other round the parent verifies a copy, leaving the abnormal recovery to the
next child)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import random
import shutil
import signal
from pathlib import Path

from aiorocketmq.broker.store import GetStatus, MessageStore

from .crash_writer import child_main, crash_config
from .support import STORE_HOST, body_for, consume_queue_matches_log, decode

TRIALS = 24
LANES = 4


# Children fork from a server that has imported the writer already: milliseconds, not an
# interpreter start, per trial.
_PROCESSES = multiprocessing.get_context("forkserver")
_PROCESSES.set_forkserver_preload(["tests.store.crash_writer"])


async def run_child(root: Path, seed: int, rng: random.Random) -> list[tuple[int, int, int, int]]:
    """Start a writer, kill -9 it at a random moment; returns the acknowledged messages."""
    reader, writer = _PROCESSES.Pipe(duplex=False)
    proc = _PROCESSES.Process(target=child_main, args=(str(root), seed, writer), daemon=True)
    proc.start()
    writer.close()
    loop = asyncio.get_running_loop()
    ready = asyncio.Event()
    chunks: list[bytes] = []

    def collect() -> None:
        try:
            while True:
                data = reader.recv_bytes()
                if data == b"READY\n":
                    loop.call_soon_threadsafe(ready.set)
                else:
                    chunks.append(data)
        except (EOFError, OSError):
            pass  # the child is gone; a message it was writing when killed never counts
        finally:
            loop.call_soon_threadsafe(ready.set)

    reading = asyncio.ensure_future(asyncio.to_thread(collect))
    await asyncio.wait_for(ready.wait(), 60)
    assert proc.is_alive(), f"writer exited with {proc.exitcode}"
    await asyncio.sleep(rng.uniform(0.05, 0.4))
    assert proc.is_alive(), f"writer exited with {proc.exitcode}"
    os.kill(proc.pid or 0, signal.SIGKILL)
    await asyncio.to_thread(proc.join)
    assert proc.exitcode == -signal.SIGKILL
    await reading
    reader.close()
    acked: list[tuple[int, int, int, int]] = []
    for line in b"".join(chunks).splitlines():
        _, queue_id, offset, ident, size = line.split()
        acked.append((int(queue_id), int(offset), int(ident.rsplit(b"/", 1)[1]), int(size)))
    return acked


async def verify(root: Path, acked: list[tuple[int, int, int, int]]) -> int:
    store = MessageStore(crash_config(root), store_host=STORE_HOST)
    await store.start()
    try:
        assert store.recovery is not None and store.recovery.abnormal
        for queue_id, offset, n, size in acked:
            got = store.get_messages("g", "Crash", queue_id, offset, 1)
            assert got.status is GetStatus.FOUND, (
                queue_id,
                offset,
                got.status,
                store.get_max_offset("Crash", queue_id),
            )
            (msg,) = decode(got.buffers)
            assert msg.queue_offset == offset and msg.queue_id == queue_id
            assert msg.body == body_for("Crash", queue_id, n, size)
        for queue_id, _offset, n, _size in acked[-5:]:
            found = decode(store.query_by_key("Crash", f"n{n}", 5, 0, 2**62).records)
            assert [m.queue_id for m in found] == [queue_id]
        return consume_queue_matches_log(store)
    finally:
        await store.shutdown()


async def test_acknowledged_messages_survive_kill_9(tmp_path: Path) -> None:
    rng = random.Random(4242)
    total_acked = 0
    # Four directories, each living through TRIALS / 4 kills.
    histories: list[dict[tuple[int, int], tuple[int, int]]] = [{} for _ in range(LANES)]
    for trial in range(TRIALS):
        lane = trial % LANES
        root = tmp_path / f"store-{lane}"
        history = histories[lane]
        acked = await run_child(root, trial, rng)
        total_acked += len(acked)
        for queue_id, offset, n, size in acked:
            history[(queue_id, offset)] = (n, size)
        everything = [(q, o, n, s) for (q, o), (n, s) in history.items()]
        if trial // LANES % 2:
            # Verify a copy; the next child recovers the crashed directory itself.
            copy = tmp_path / f"copy-{trial}"
            shutil.copytree(root, copy)
            entries = await verify(copy, everything)
            shutil.rmtree(copy)
        else:
            entries = await verify(root, everything)
        assert entries >= len(history)
    assert total_acked > TRIALS * 20, f"children acknowledged only {total_acked} messages"
