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

``--shape cpp`` / ``--shape java`` send single messages framed as the official C++ client
(SEND_MESSAGE, full-name JSON header) or the Java client (SEND_MESSAGE_V2) write them, to see
what a client's shape costs the broker. ``--reads-per-turn 1`` gives the event loop a turn
after every read, as a socket does (the default, 20, keeps the loop's own cost out).

Run: ``.venv/bin/python -m bench.request_path [--batch 32] [--requests 30000] [--runs 5]``.
Not part of the test suite (tests/broker/test_request_path.py runs a short window of it).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import cProfile
import gc
import json
import os
import pstats
import statistics
import struct
import sys
import tempfile
import time
from typing import Any

from aiorocketmq.broker.config import BrokerConfig
from aiorocketmq.broker.server import Broker
from aiorocketmq.broker.store import StoreConfig
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.command import FrameDecoder
from aiorocketmq.protocol.loop import run
from bench.machine import summary as machine_summary

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


def client_send_frames(client: str, topic: str, queues: int, size: int, per_queue: int = 8) -> list[bytes]:
    """Single-message sends shaped as a real client writes them, byte for byte but for the
    values, each message with its own unique key in the header's properties (with WAIT):

    - ``cpp``: the official C++ client (librocketmq 1.2.x, what bench/cpp_load.c drives):
      SEND_MESSAGE (10), a JSON header with the full field names, some numbers raw and some
      quoted, the signing fields it adds even with no credentials, and a trailing newline;
    - ``java``: the Java client 4.9.x with sendSmartMsg: SEND_MESSAGE_V2 (310), one-letter
      names, every value a string."""
    body = os.urandom(size // 2).hex().encode()[:size]
    frames = []
    count = 0
    for queue_id in range(queues):
        for _ in range(per_queue):
            count += 1
            uniq = f"0100007F0000{os.getpid() & 0xFFFF:04X}{count:016X}"
            properties = f"UNIQ_KEY\x01{uniq}\x02WAIT\x01true\x02"
            born = str(int(time.time() * 1000))
            if client == "java":
                fields: dict[str, Any] = {
                    "a": "java-load-producer",
                    "b": topic,
                    "c": "TBW102",
                    "d": "4",
                    "e": str(queue_id),
                    "f": "0",
                    "g": born,
                    "h": "0",
                    "i": properties,
                    "j": "0",
                    "k": "false",
                    "m": "false",
                }
                header = {
                    "code": int(RequestCode.SEND_MESSAGE_V2),
                    "extFields": fields,
                    "flag": 0,
                    "language": "JAVA",
                    "opaque": 1_000_000_000,
                    "serializeTypeCurrentRPC": "JSON",
                    "version": 395,
                }
                data = json.dumps(header, separators=(",", ":")).encode()
                frames.append(struct.pack(">iI", 4 + len(data) + len(body), len(data)) + data + body)
                continue
            fields = {
                "AccessKey": "",
                "OnsChannel": "ALIYUN",
                "Signature": base64.b64encode(os.urandom(20)).decode(),
                "batch": "0",
                "bornTimestamp": born,
                "defaultTopic": "TBW102",
                "defaultTopicQueueNums": 4,
                "flag": 0,
                "producerGroup": "cpp-load-producer",
                "properties": properties,
                "queueId": queue_id,
                "reconsumeTimes": "0",
                "sysFlag": 0,
                "topic": topic,
                "unitMode": "0",
            }
            header = {
                "code": int(RequestCode.SEND_MESSAGE),
                "extFields": fields,
                "flag": 0,
                "language": "CPP",
                "opaque": 1_000_000_000,
                "remark": "",
                "version": 63,
            }
            data = json.dumps(header, separators=(",", ":")).encode() + b"\n"
            frames.append(struct.pack(">iI", 4 + len(data) + len(body), len(data)) + data + body)
    return frames


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
    if args.shape != "sdk":
        frames = client_send_frames(args.shape, TOPIC, QUEUES, args.size)
    else:
        # Imported here: side_by_side pulls in the whole benchmark harness.
        from bench.side_by_side import send_frames

        frames = send_frames(TOPIC, QUEUES, args.batch, args.size)
    per_read = args.per_read
    reads_per_turn = args.reads_per_turn
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
            if k % reads_per_turn == 0:
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
    parser.add_argument(
        "--batch",
        type=int,
        default=None,
        help="messages per request (1: SEND_MESSAGE_V2); 32 by default, 1 with a client --shape",
    )
    parser.add_argument("--size", type=int, default=128, help="message body size")
    parser.add_argument("--requests", type=int, default=30_000, help="requests per window")
    parser.add_argument("--runs", type=int, default=5, help="windows; the median is printed")
    parser.add_argument("--per-read", type=int, default=15, help="requests delivered per read")
    parser.add_argument(
        "--reads-per-turn",
        type=int,
        default=20,
        help="reads fed between turns of the event loop (1: as a socket delivers them, a turn each)",
    )
    parser.add_argument(
        "--shape",
        choices=("sdk", "cpp", "java"),
        default="sdk",
        help="frames as the SDK sends them (--batch), or single sends as the C++ or Java client's",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile one more window (to stderr)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.batch is None:
        args.batch = 32 if args.shape == "sdk" else 1
    elif args.shape != "sdk" and args.batch != 1:
        parser.error(f"--shape {args.shape} sends one message per request (--batch 1)")
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
