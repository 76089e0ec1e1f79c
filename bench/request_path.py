"""The broker's request path in one process: what a send costs its event-loop thread.

Starts a real broker in this process (its own store in a temporary directory, no name server)
and opens a server-side connection on a transport that keeps what it is given instead of
sending it. Pre-encoded SEND_MESSAGE_V2 frames (``--batch 1``) or SEND_BATCH_MESSAGE frames
(``--batch N``: N 128-byte messages, each with its own unique key, as the SDK sends them) go
in ``--per-read`` requests at a time, as a busy connection delivers them. With no sockets and
no client left, the figure is the broker's own work per request: frame decoding, header
validation, the store's append and dispatch, the response. The side-by-side benchmark sees
that work only mixed with the clients' and the kernel's on the same two cores.

Every response is decoded and must be SUCCESS; every message must be in the store afterwards
(the consume queues' offsets). Prints the median of ``--runs`` windows: µs of wall time and of
process CPU per request and per message. ``--profile`` adds a cProfile listing of one more
window. To compare commits, run it from a checkout of each.

Run: ``.venv/bin/python -m bench.request_path [--batch 32] [--requests 30000] [--runs 5]``.
Not part of the test suite (tests/broker/test_request_path.py runs a short window of it).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import pstats
import statistics
import sys
import tempfile
import time
from typing import Any

from aiorocketmq.broker.config import BrokerConfig
from aiorocketmq.broker.server import Broker
from aiorocketmq.broker.store import StoreConfig
from aiorocketmq.protocol.codes import ResponseCode
from aiorocketmq.protocol.command import FrameDecoder
from aiorocketmq.protocol.loop import run
from bench.machine import summary as machine_summary
from bench.side_by_side import send_frames

TOPIC = "RequestPathBench"
#: Queues of the auto-created topic (the default topic's count).
QUEUES = 4


class KeptTransport:
    """A transport that keeps what the connection writes (the responses) and sends nothing."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name in ("peername", "sockname"):
            return ("127.0.0.1", 40000)
        return default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


def check_responses(decoder: FrameDecoder, written: list[bytes]) -> int:
    """How many whole responses ``written`` completes; raises if one is not SUCCESS."""
    count = 0
    for data in written:
        for response in decoder.feed(data):
            if response.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"a send failed: code {response.code}, {response.remark}")
            count += 1
    return count


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="request-path-") as root:
        overrides = {"storePathRootDir": root}
        config = BrokerConfig.load(
            None,
            {
                "brokerName": "request-path",
                "listenPort": "0",
                "brokerIP1": "127.0.0.1",
                "metricsPromExporterEnable": "false",
                **overrides,
            },
        )
        broker = Broker(config, StoreConfig.load(None, overrides))
        await broker.start("127.0.0.1")
        try:
            return await _windows(broker, args)
        finally:
            await broker.shutdown()


async def _windows(broker: Broker, args: argparse.Namespace) -> dict[str, Any]:
    frames = send_frames(TOPIC, QUEUES, args.batch, args.size)
    per_read = args.per_read
    reads = [
        b"".join(frames[(start + i) % len(frames)] for i in range(per_read))
        for start in range(0, len(frames), per_read)
    ]
    conn = broker.server._make_connection()
    transport = KeptTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    sent = 0
    decoder = FrameDecoder(1 << 26)
    answered = 0

    def take_responses() -> None:
        nonlocal answered
        answered += check_responses(decoder, transport.written)
        transport.written.clear()

    async def window(requests: int) -> tuple[float, float]:
        """Feed ``requests`` requests; returns wall and CPU seconds per request, counted until
        the last response is written (a send to a queue whose next file is still being made
        answers later, from the event loop, which therefore gets a turn every few reads)."""
        nonlocal sent, answered
        gc.collect()
        done = k = answered = 0
        wall, cpu = time.perf_counter(), time.process_time()
        while done < requests:
            conn.data_received(reads[k % len(reads)])
            done += per_read
            k += 1
            if k % 20 == 0:
                await asyncio.sleep(0)
        if conn._tasks:  # deferred answers still to come
            await asyncio.wait(set(conn._tasks), timeout=30)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        take_responses()  # checked outside the clock
        if answered != done:
            raise RuntimeError(f"{done} requests, {answered} responses")
        sent += done
        return wall / done, cpu / done

    await window(max(per_read, args.requests // 10))  # warm-up: files made, caches filled
    figures = [await window(args.requests) for _ in range(args.runs)]
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        await window(args.requests)
        profile.disable()
        pstats.Stats(profile, stream=sys.stderr).sort_stats("tottime").print_stats(30)
    stored = sum(broker.store.get_max_offset(TOPIC, q) for q in range(QUEUES))
    if stored != sent * args.batch:
        raise RuntimeError(f"{sent * args.batch} messages sent, {stored} in the consume queues")
    wall_us = statistics.median(1e6 * w for w, _ in figures)
    cpu_us = statistics.median(1e6 * c for _, c in figures)
    return {
        "batch": args.batch,
        "requests_per_window": args.requests,
        "runs": args.runs,
        "wall_us_per_request": round(wall_us, 2),
        "cpu_us_per_request": round(cpu_us, 2),
        "wall_us_per_message": round(wall_us / args.batch, 3),
        "cpu_us_per_message": round(cpu_us / args.batch, 3),
        "messages_stored": stored,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=32, help="messages per request (1: SEND_MESSAGE_V2)")
    parser.add_argument("--size", type=int, default=128, help="message body size")
    parser.add_argument("--requests", type=int, default=30_000, help="requests per window")
    parser.add_argument("--runs", type=int, default=5, help="windows; the median is printed")
    parser.add_argument("--per-read", type=int, default=15, help="requests delivered per read")
    parser.add_argument("--profile", action="store_true", help="cProfile one more window (to stderr)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    figures = run(measure(args))
    if args.json:
        print(json.dumps({**figures, "machine": machine_summary()}))
        return
    print(machine_summary())
    print(
        f"batch {figures['batch']}: {figures['wall_us_per_request']} µs wall, "
        f"{figures['cpu_us_per_request']} µs CPU per request "
        f"({figures['wall_us_per_message']} / {figures['cpu_us_per_message']} µs per message; "
        f"median of {figures['runs']} windows of {figures['requests_per_window']} requests, "
        f"{figures['messages_stored']} messages stored)"
    )


if __name__ == "__main__":
    main()
