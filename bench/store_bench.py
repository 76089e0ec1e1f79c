"""Throughput of the message store (``broker.store``) on one event-loop thread.

Run ``python -m bench.store_bench`` (``--runs N``, ``--quick``); every figure is the median of
N runs (default 5), each on a fresh store directory. Not part of the test suite.

* append: ``put_message`` / ``put_messages`` (batches of 32) of 128-byte and 1 KiB bodies with
  the properties a Java producer sends (UNIQ_KEY, TAGS, WAIT), ASYNC_FLUSH, index on (every
  message is indexed by UNIQ_KEY); the loop yields every 64 calls so the flusher runs; the
  first quarter of the messages is a warm-up, not timed (first touches of the index's 20 MB
  slot table and of fresh consume-queue pages are page faults a running broker has behind it);
* get_messages: 32 records a call over what the 128-byte run wrote, without and with a tag
  filter;
* SYNC_FLUSH: 64 concurrent writers, each ``put_message`` then ``await wait_flushed``, against
  the same under ASYNC_FLUSH;
* recovery, in MB of commit log verified per second, from files in the page cache (64 MiB
  files, one batch stored every 10 ms): after a crash with a current checkpoint (the files
  from the checkpoint's on verified with body CRCs, entries of the last seconds rebuilt),
  after a crash that lost the checkpoint (every record verified and dispatched again), and
  after a clean shutdown (the last three files checked).

Rates are given by the wall clock and per CPU-second of the thread doing the work: on a
shared machine the second is the steadier one-core figure.

Targets (issue 4): >= 300k appends/s for 128 B batches, >= 1M messages/s through
get_messages, SYNC_FLUSH with 64 writers >= 50 % of ASYNC_FLUSH, recovery >= 200 MB/s.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import struct
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiorocketmq.broker.store import FlushDiskType, GetStatus, MessageStore, StoreConfig, StoreMessage
from aiorocketmq.protocol.loop import run
from aiorocketmq.protocol.message import UniqueIdGenerator, encode_properties, pack_host, tags_code
from bench.machine import summary as machine_summary

STORE_HOST = pack_host("127.0.0.1", 10911)
BORN_HOST = pack_host("10.0.0.7", 52001)
TOPIC = "BenchmarkTest"
QUEUES = 8
BATCH = 32


def messages(count: int, body_size: int) -> list[StoreMessage]:
    ids = UniqueIdGenerator(b"\x0a\x00\x00\x07")
    body = bytes(range(256)) * (body_size // 256) + bytes(body_size % 256)
    out = []
    for n in range(count):
        uniq = ids.next_id()
        tag = "TagA" if n % 4 else "TagB"
        out.append(
            StoreMessage(
                topic=TOPIC,
                queue_id=n // BATCH % QUEUES,
                body=body,
                properties=encode_properties({"UNIQ_KEY": uniq, "TAGS": tag, "WAIT": "true"}),
                born_timestamp=1_700_000_000_000 + n,
                born_host=BORN_HOST,
                tags_code=tags_code(tag),
                uniq_key=uniq,
            )
        )
    return out


def config_for(root: Path, **overrides: Any) -> StoreConfig:
    values: dict[str, Any] = {"storePathRootDir": str(root)}
    values.update(overrides)
    return StoreConfig.model_validate(values)


class Workdir:
    def __init__(self) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="store-bench-"))
        self.count = 0

    def fresh(self) -> Path:
        self.count += 1
        return self.base / f"run-{self.count}"

    def drop(self, path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def close(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)


async def append(
    work: Workdir, msgs: list[StoreMessage], batch: int, **overrides: Any
) -> tuple[Rate, MessageStore, Path]:
    """Messages/s of putting ``msgs`` (in batches of ``batch`` when > 1); the first quarter
    warms the store up and is not timed."""
    root = work.fresh()
    store = MessageStore(config_for(root, **overrides), store_host=STORE_HOST)
    await store.start()
    warm = len(msgs) // 4 // BATCH * BATCH
    calls: list[list[StoreMessage]] = [msgs[i : i + batch] for i in range(0, len(msgs), batch)]
    warm_calls = warm // batch

    async def put(batches: list[list[StoreMessage]]) -> None:
        for i, group in enumerate(batches):
            result = store.put_messages(group) if batch > 1 else store.put_message(group[0])
            if not result.ok:
                raise RuntimeError(result.status)
            if i % 64 == 63:
                await asyncio.sleep(0)

    await put(calls[:warm_calls])
    started = time.perf_counter()
    cpu_started = time.thread_time()
    await put(calls[warm_calls:])
    elapsed = time.perf_counter() - started
    cpu = time.thread_time() - cpu_started
    timed = len(msgs) - warm
    return Rate(timed / elapsed, timed / cpu), store, root


def read_all(store: MessageStore, tag_codes: frozenset[int] | None) -> Rate:
    count = 0
    started = time.perf_counter()
    cpu_started = time.thread_time()
    for queue_id in range(QUEUES):
        offset = 0
        while True:
            got = store.get_messages("bench", TOPIC, queue_id, offset, 32, tag_codes)
            if got.status is not GetStatus.FOUND and got.status is not GetStatus.NO_MATCHED_MESSAGE:
                break
            count += got.message_count
            offset = got.next_begin_offset
    return Rate(count / (time.perf_counter() - started), count / (time.thread_time() - cpu_started))


async def writers(
    work: Workdir, msgs: list[StoreMessage], mode: FlushDiskType, concurrency: int = 64
) -> Rate:
    root = work.fresh()
    store = MessageStore(config_for(root, flushDiskType=mode), store_host=STORE_HOST)
    await store.start()
    per_writer = len(msgs) // concurrency

    async def writer(w: int) -> None:
        for msg in msgs[w * per_writer : (w + 1) * per_writer]:
            result = store.put_message(msg)
            status = await store.wait_flushed(result)
            if status.value != "PUT_OK":
                raise RuntimeError(status)

    started = time.perf_counter()
    cpu_started = time.thread_time()
    await asyncio.gather(*(writer(w) for w in range(concurrency)))
    elapsed = time.perf_counter() - started
    cpu = time.thread_time() - cpu_started
    await store.shutdown()
    work.drop(root)
    return Rate(per_writer * concurrency / elapsed, per_writer * concurrency / cpu)


async def prepare_log(work: Workdir, total_bytes: int, body_size: int, spacing_ms: int) -> Path:
    """A store holding about ``total_bytes`` of commit log in 64 MiB files, shut down cleanly;
    each batch of 32 is stored ``spacing_ms`` after the one before."""
    root = work.fresh()
    store = MessageStore(config_for(root, mappedFileSizeCommitLog=64 << 20), store_host=STORE_HOST)
    await store.start()
    pool = messages(20_000, body_size)
    stamp = time.time_ns() // 1_000_000 - spacing_ms * (total_bytes // (BATCH * (body_size + 150)) + 10)
    written = 0
    i = 0
    while written < total_bytes:
        group = pool[i : i + BATCH]
        for msg in group:
            msg.store_timestamp = stamp
        stamp += spacing_ms
        result = store.put_messages(group)
        written += result.wrote_bytes
        i = (i + BATCH) % len(pool)
        if i % 2048 == 0:
            await asyncio.sleep(0)
    await store.shutdown()
    return root


async def recover(root: Path, *, abnormal: bool, lose_checkpoint: bool = False) -> Rate:
    """MB/s of commit log verified (and dispatched again, as recovery decides)."""
    if abnormal:
        (root / "abort").touch()
    if lose_checkpoint:
        with (root / "checkpoint").open("r+b") as f:
            f.write(struct.pack(">qqq", 0, 0, 0))
    store = MessageStore(config_for(root, mappedFileSizeCommitLog=64 << 20), store_host=STORE_HOST)
    await store.start()
    report = store.recovery
    await store.shutdown()
    assert report is not None and report.abnormal == abnormal
    megabytes = (report.log_end - report.verified_from) / 1e6
    return Rate(megabytes / report.seconds, megabytes / report.cpu_seconds)


@dataclass(frozen=True, slots=True)
class Rate:
    """A throughput by the wall clock, and per CPU-second of the thread doing the work (the
    one-core figure, less sensitive to other processes on a shared machine)."""

    wall: float
    cpu: float


async def median(
    label: str, runs: int, fn: Callable[[], Awaitable[Rate]], unit: str, target: str = ""
) -> Rate:
    values = [await fn() for _ in range(runs)]
    wall = statistics.median(v.wall for v in values)
    cpu = statistics.median(v.cpu for v in values)
    low = min(v.wall for v in values)
    high = max(v.wall for v in values)
    print(
        f"{label:<58} {wall:>11,.0f} {cpu:>11,.0f}  {unit:<6} {f'{low:,.0f}..{high:,.0f}':<22} {target}",
        flush=True,
    )
    return Rate(wall, cpu)


async def main(runs: int, quick: bool) -> None:
    print(machine_summary(), flush=True)
    work = Workdir()
    scale = 0.2 if quick else 1.0
    small = messages(int(200_000 * scale), 128)
    large = messages(int(100_000 * scale), 1024)
    print(f"store benchmark: median of {runs} runs; messages carry UNIQ_KEY, TAGS, WAIT; index on")
    print(f"{'':<58} {'wall':>11} {'per CPU-s':>11}  {'unit':<6} {'wall min..max':<22} target")
    try:

        async def appended(msgs: list[StoreMessage], batch: int, **overrides: Any) -> Rate:
            rate, store, root = await append(work, msgs, batch, **overrides)
            await store.shutdown()
            work.drop(root)
            return rate

        await median("append 128 B, single", runs, lambda: appended(small, 1), "msg/s")
        await median(
            "append 128 B, batches of 32", runs, lambda: appended(small, BATCH), "msg/s", ">= 300,000"
        )
        await median(
            "append 128 B, batches of 32, index off",
            runs,
            lambda: appended(small, BATCH, messageIndexEnable=False),
            "msg/s",
        )
        await median("append 1 KiB, single", runs, lambda: appended(large, 1), "msg/s")
        await median("append 1 KiB, batches of 32", runs, lambda: appended(large, BATCH), "msg/s")

        _, store, root = await append(work, small, BATCH)
        try:
            await median(
                "get_messages 32/call", runs, lambda: _const(read_all(store, None)), "msg/s", ">= 1,000,000"
            )
            only_a = frozenset({tags_code("TagA")})
            await median(
                "get_messages 32/call, tag filter (3 of 4 match)",
                runs,
                lambda: _const(read_all(store, only_a)),
                "msg/s",
            )
        finally:
            await store.shutdown()
            work.drop(root)

        flood = messages(int(64 * 1000 * scale), 128)
        async_rate = await median(
            "64 writers put + wait_flushed, ASYNC_FLUSH",
            runs,
            lambda: writers(work, flood, FlushDiskType.ASYNC_FLUSH),
            "msg/s",
        )
        sync_rate = await median(
            "64 writers put + wait_flushed, SYNC_FLUSH",
            runs,
            lambda: writers(work, flood, FlushDiskType.SYNC_FLUSH),
            "msg/s",
        )
        ratio = f"{sync_rate.wall / async_rate.wall:.0%}"
        print(f"{'SYNC_FLUSH / ASYNC_FLUSH (wall)':<58} {ratio:>11} {'':>11}  {'':<6} {'':<22} >= 50 %")

        for body_size, megabytes in ((1024, 256), (128, 128)):
            size = int(megabytes * scale) << 20
            root = await prepare_log(work, size, body_size, spacing_ms=10)
            label = f"{body_size} B records"

            async def crashed(root: Path = root) -> Rate:
                return await recover(root, abnormal=True)

            async def lost(root: Path = root) -> Rate:
                return await recover(root, abnormal=True, lose_checkpoint=True)

            async def clean(root: Path = root) -> Rate:
                return await recover(root, abnormal=False)

            await median(f"recovery, crash, checkpoint current, {label}", runs, crashed, "MB/s", ">= 200")
            await median(f"recovery, crash, checkpoint lost (rebuild all), {label}", runs, lost, "MB/s")
            await median(f"recovery, clean shutdown (last 3 files), {label}", runs, clean, "MB/s")
            work.drop(root)
    finally:
        work.close()


async def _const(value: Rate) -> Rate:
    return value


def cli() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="a fifth of the data, for a smoke run")
    args = parser.parse_args()
    run(main(args.runs, args.quick))


if __name__ == "__main__":
    cli()
