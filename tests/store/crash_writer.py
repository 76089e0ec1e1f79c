"""Child process of the crash tests: appends under SYNC_FLUSH from several writers and sends
``ACK queue_id queue_offset n size`` lines for every message once the store acknowledges it.

:func:`child_main` runs in a process forked from a multiprocessing fork server (which has
imported this module already, so a child starts in milliseconds); the parent kills it with
SIGKILL.
"""

from __future__ import annotations

import asyncio
import random
from multiprocessing.connection import Connection
from pathlib import Path

from aiorocketmq.broker.store import FlushDiskType, MessageStore, PutStatus, StoreConfig
from aiorocketmq.protocol.loop import run

from .support import STORE_HOST, make_message, small_config

QUEUES = 3


def crash_config(root: Path, **overrides: object) -> StoreConfig:
    return small_config(
        root,
        flushDiskType=FlushDiskType.SYNC_FLUSH,
        mappedFileSizeCommitLog=512 * 1024,
        mappedFileSizeConsumeQueue=2000 * 20,
        maxIndexNum=2000,
        maxHashSlotNum=500,
        flushIntervalConsumeQueue=50,
        **overrides,
    )


async def main(root: Path, seed: int, out: Connection) -> None:
    store = MessageStore(crash_config(root), store_host=STORE_HOST)
    # Blocks reserved a short stretch ahead, so every kill leaves files whose tails are holes
    # (and consume-queue files that are mostly holes): recovery must find the true end of each.
    store.commit_log.ahead = 16 * 1024
    await store.start()
    counters = [store.get_max_offset("Crash", q) for q in range(QUEUES)]
    base = sum(counters) * 1000 + seed * 1_000_000_000
    out.send_bytes(b"READY\n")

    async def writer(w: int) -> None:
        rng = random.Random(seed * 100 + w)
        n = base + w * 10_000_000
        while True:
            queue_id = rng.randrange(QUEUES)
            batch = [
                make_message("Crash", queue_id, n + i, size=rng.randint(1, 1500), keys=f"n{n + i}")
                for i in range(rng.choice((1, 1, 1, 4, 16)))
            ]
            n += len(batch)
            result = store.put_messages(batch) if len(batch) > 1 else store.put_message(batch[0])
            if not result.ok:
                raise SystemExit(f"put failed: {result.status}")
            if await store.wait_flushed(result) is PutStatus.PUT_OK:
                lines = [
                    f"ACK {queue_id} {result.queue_offset + i} {msg.body.split(b'|')[0].decode()} {len(msg.body)}\n"
                    for i, msg in enumerate(batch)
                ]
                out.send_bytes("".join(lines).encode())

    await asyncio.gather(*(writer(w) for w in range(8)))


def child_main(root: str, seed: int, out: Connection) -> None:
    run(main(Path(root), seed, out))
