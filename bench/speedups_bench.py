"""Compiled vs pure-Python codecs (protocol/_speedups.c vs the Python beside it), A/B.

Run ``python -m bench.speedups_bench [--rounds 5]``. Each round runs one child process with
``AIOROCKETMQ_PURE=1`` and one without, in alternating order, and each child measures every
figure below in CPU time of its own thread (the machine is shared: wall-clock rates swing with
the neighbours' load, CPU time much less). Printed: the median rate of each figure per
implementation, and their ratio. Not part of the test suite.

* send round trips: ``FrameDecoder.feed`` of a SEND_MESSAGE_V2 request + header model +
  response ``encode()`` (bench/codec_bench.py's figure), with JSON headers as our SDK writes
  them, with JSON headers whose numbers are raw JSON numbers (as the C++ client writes some),
  and with ROCKETMQ binary headers;
* commit-log encode: ``CommitLog._encode`` of a batch of 32 messages (128-byte bodies, the
  properties a Java producer sends), per record;
* record decodes: ``decode_record`` and ``decode_records`` of a 32-record pull body;
* properties: ``decode_properties`` of that message's properties; tag hash: ``java_hash`` of
  distinct keys (as the index hashes them).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.machine import summary as machine_summary

ROOT = Path(__file__).resolve().parent.parent


def _figures() -> dict[str, Callable[[int], int]]:
    from pydantic_core import from_json, to_json

    from aiorocketmq.broker.store.commit_log import CommitLog
    from aiorocketmq.broker.store.messages import StoreMessage
    from aiorocketmq.protocol.codes import SerializeType
    from aiorocketmq.protocol.message import decode_properties, encode_properties, java_hash_fast, pack_host

    from .codec_bench import (
        BODY,
        PROPERTIES,
        _send_request,
        frame_round_trips,
        pull_body_decodes,
        record_decodes,
    )

    def raw_numbers_frame() -> bytes:
        frame = _send_request(SerializeType.JSON)
        header_len = int.from_bytes(frame[4:8], "big") & 0xFFFFFF
        header = from_json(frame[8 : 8 + header_len])
        header["extFields"] = {
            k: int(v) if v.lstrip("-").isdigit() else v for k, v in header["extFields"].items()
        }
        new_header = to_json(header)
        body = frame[8 + header_len :]
        return b"".join(
            (
                (4 + len(new_header) + len(body)).to_bytes(4, "big"),
                len(new_header).to_bytes(4, "big"),
                new_header,
                body,
            )
        )

    def commit_log_encode() -> Callable[[int], int]:
        log = CommitLog(
            Path(tempfile.mkdtemp(prefix="speedups-bench-")), 1 << 30, pack_host("10.0.0.1", 10911), 4 << 20
        )
        props = encode_properties(PROPERTIES)
        born = pack_host("10.0.0.5", 52_000)
        msgs = [
            StoreMessage("BenchmarkTest", 3, BODY, props, born_timestamp=1_700_000_000_000, born_host=born)
            for _ in range(32)
        ]
        prefix = log.topic_prefix("BenchmarkTest")
        assert prefix is not None

        def run(n: int) -> int:
            batches = max(1, n // 32)
            for i in range(batches):
                log._encode(msgs, prefix, i * 32, 1_700_000_000_001, i * 10_000)
            return batches * 32

        return run

    def properties() -> Callable[[int], int]:
        text = encode_properties(PROPERTIES)

        def run(n: int) -> int:
            for _ in range(n):
                decode_properties(text)
            return n

        return run

    def hashes() -> Callable[[int], int]:
        # distinct keys, as the index sees them (UNIQ_KEYs): more than java_hash's cache holds
        keys = [f"BenchmarkTest#7F0000010F8718B4AAC2573A{i:012X}" for i in range(65536)]

        def run(n: int) -> int:
            done = 0
            while done < n:
                for key in keys:
                    java_hash_fast(key)
                done += len(keys)
            return done

        return run

    return {
        "send round trip (JSON, SDK)": frame_round_trips(_send_request(SerializeType.JSON)),
        "send round trip (JSON, raw numbers)": frame_round_trips(raw_numbers_frame()),
        "send round trip (ROCKETMQ)": frame_round_trips(_send_request(SerializeType.ROCKETMQ)),
        "commit-log encode (batch of 32)": commit_log_encode(),
        "record decode (decode_record)": record_decodes(),
        "record decode (decode_records x32)": pull_body_decodes(),
        "decode_properties": properties(),
        "java_hash_fast (index keys)": hashes(),
    }


def _cpu_rate(run: Callable[[int], int], seconds: float) -> float:
    clock = time.thread_time
    n = 256
    while True:
        start = clock()
        run(n)
        elapsed = clock() - start
        if elapsed >= seconds / 5:
            break
        n *= 2
    rates = []
    for _ in range(3):
        start = clock()
        done = run(n)
        rates.append(done / max(1e-9, clock() - start))
    return statistics.median(rates)


def child(seconds: float) -> None:
    from aiorocketmq.protocol import speedups

    rates = {name: _cpu_rate(run, seconds) for name, run in _figures().items()}
    print(json.dumps({"active": speedups.ACTIVE, "rates": rates}))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.5, help="CPU seconds per figure per run")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.seconds)
        return
    print(machine_summary(), flush=True)
    results: dict[str, list[dict[str, float]]] = {"pure": [], "C": []}
    for r in range(args.rounds):
        order = ("pure", "C") if r % 2 == 0 else ("C", "pure")
        for mode in order:
            env = {k: v for k, v in os.environ.items() if k != "AIOROCKETMQ_PURE"}
            if mode == "pure":
                env["AIOROCKETMQ_PURE"] = "1"
            out = subprocess.run(
                [sys.executable, "-m", "bench.speedups_bench", "--child", "--seconds", str(args.seconds)],
                cwd=ROOT,
                env=env,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            got = json.loads(out.strip().splitlines()[-1])
            if got["active"] != mode:
                raise SystemExit(f"asked for {mode} codecs, the child ran {got['active']}")
            results[mode].append(got["rates"])
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    print(
        f"{'figure':38} {'pure /CPU-s':>14} {'C /CPU-s':>14} {'C/pure':>7}   (medians of {args.rounds} rounds)"
    )
    for name in results["C"][0]:
        pure = statistics.median(r[name] for r in results["pure"])
        compiled = statistics.median(r[name] for r in results["C"])
        print(f"{name:38} {pure:14,.0f} {compiled:14,.0f} {compiled / pure:6.2f}x")


if __name__ == "__main__":
    main()
