"""Codec throughput of the ``protocol`` package on one core: the send path's frame work and the
stored record's encode/decode.

Run ``python -m bench.codec_bench``; it prints one line per figure with the median of several
runs. Not part of the test suite: tests assert behaviour, this measures speed.

* send round trip: ``FrameDecoder.feed`` of a SEND_MESSAGE_V2 request (128-byte body) +
  ``SendMessageRequestHeaderV2.from_fields`` + a ``SendMessageResponseHeader`` →
  ``request.response(...)`` → ``encode()``, with JSON headers and with msgpack headers;
* record encode: ``encode_record`` of a 128-byte body with typical properties
  (UNIQ_KEY, WAIT, TAGS, KEYS);
* record decode: ``decode_record`` of one such record, and ``decode_records`` of a pull body
  of 32 of them (per record).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from aiorocketmq.protocol.codes import RequestCode, SerializeType
from aiorocketmq.protocol.command import FrameDecoder, RemotingCommand
from aiorocketmq.protocol.headers import SendMessageRequestHeaderV2, SendMessageResponseHeader
from aiorocketmq.protocol.message import (
    decode_record,
    decode_records,
    encode_properties,
    encode_record,
    pack_host,
)
from bench.machine import summary as machine_summary

BODY = bytes(range(128))
PROPERTIES = {
    "UNIQ_KEY": "7F0000010F8718B4AAC2573A5A4F0000",
    "WAIT": "true",
    "TAGS": "TagA",
    "KEYS": "order-20240101-0001",
}
PULL_BATCH = 32


def _send_request(serialize_type: int) -> bytes:
    header = SendMessageRequestHeaderV2(
        producer_group="benchmark_producer",
        topic="BenchmarkTest",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=3,
        sys_flag=0,
        born_timestamp=1_700_000_000_000,
        flag=0,
        properties=encode_properties(PROPERTIES),
        reconsume_times=0,
        unit_mode=False,
        batch=False,
    )
    request = RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2, header.to_fields(), BODY, serialize_type=serialize_type
    )
    request.opaque = 42
    request.language = "JAVA"
    request.version = 407
    return request.encode()


def send_round_trips(serialize_type: int) -> Callable[[int], int]:
    return frame_round_trips(_send_request(serialize_type))


def frame_round_trips(frame: bytes) -> Callable[[int], int]:
    """The broker's side of a send, ``frame`` (a SEND_MESSAGE_V2 request) to response bytes."""
    decoder = FrameDecoder()
    from_fields = SendMessageRequestHeaderV2.from_fields

    def run(n: int) -> int:
        for i in range(n):
            (request,) = decoder.feed(frame)
            header = from_fields(request.ext_fields)
            response_header = SendMessageResponseHeader(
                msg_id="7F00000100002A9F0000000000001A2B",
                queue_id=header.queue_id,
                queue_offset=i,
                msg_region="DefaultRegion",
                trace_on="true",
            )
            request.response(ext_fields=response_header.to_fields()).encode()
        return n

    return run


def _record() -> bytes:
    return encode_record(
        topic=b"BenchmarkTest",
        body=BODY,
        properties=encode_properties(PROPERTIES).encode(),
        queue_id=3,
        queue_offset=1000,
        commit_log_offset=123_456_789,
        born_timestamp=1_700_000_000_000,
        born_host=pack_host("10.0.0.5", 52_000),
        store_timestamp=1_700_000_000_001,
        store_host=pack_host("10.0.0.1", 10911),
    )


def record_encodes() -> Callable[[int], int]:
    topic = b"BenchmarkTest"
    props = encode_properties(PROPERTIES).encode()
    born = pack_host("10.0.0.5", 52_000)
    store = pack_host("10.0.0.1", 10911)

    def run(n: int) -> int:
        for i in range(n):
            encode_record(
                topic=topic,
                body=BODY,
                properties=props,
                queue_id=3,
                queue_offset=i,
                commit_log_offset=i * 300,
                born_timestamp=1_700_000_000_000,
                born_host=born,
                store_timestamp=1_700_000_000_001,
                store_host=store,
            )
        return n

    return run


def record_decodes() -> Callable[[int], int]:
    record = _record()

    def run(n: int) -> int:
        for _ in range(n):
            decode_record(record)
        return n

    return run


def pull_body_decodes() -> Callable[[int], int]:
    body = _record() * PULL_BATCH

    def run(n: int) -> int:
        batches = max(1, n // PULL_BATCH)
        for _ in range(batches):
            decode_records(body)
        return batches * PULL_BATCH

    return run


def measure(run: Callable[[int], int], runs: int, seconds: float) -> float:
    """Median operations per second over ``runs`` runs of about ``seconds`` each."""
    n = 1000
    while True:  # calibrate a count that takes about a tenth of a run
        start = time.perf_counter()
        run(n)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds / 10:
            break
        n *= 2
    per_run = max(n, int(n * seconds / 10 / elapsed) * 10)
    rates = []
    for _ in range(runs):
        start = time.perf_counter()
        done = run(per_run)
        rates.append(done / (time.perf_counter() - start))
    return statistics.median(rates)


FIGURES: list[tuple[str, Callable[[], Callable[[int], int]], float, str]] = [
    ("send round trips (JSON)", lambda: send_round_trips(SerializeType.JSON), 60_000, "round trips/s"),
    ("send round trips (msgpack)", lambda: send_round_trips(SerializeType.MSGPACK), 120_000, "round trips/s"),
    ("record encodes", record_encodes, 500_000, "records/s"),
    ("record decodes (decode_record)", record_decodes, 300_000, "records/s"),
    ("record decodes (decode_records x32)", pull_body_decodes, 300_000, "records/s"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=7, help="runs per figure (median reported)")
    parser.add_argument("--seconds", type=float, default=1.0, help="approximate length of one run")
    args = parser.parse_args()
    print(machine_summary(), flush=True)
    runs = max(5, args.runs)
    for label, make, target, unit in FIGURES:
        rate = measure(make(), runs, args.seconds)
        verdict = "ok" if rate >= target else "BELOW TARGET"
        print(
            f"{label:<38} median {rate:>12,.0f} {unit:<14} (target {target:,.0f}, {runs} runs) {verdict}",
            flush=True,
        )


if __name__ == "__main__":
    main()
