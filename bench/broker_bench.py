"""Broker throughput with the official C++ client as load (issue 5).

Starts a real name server and broker, then:

* **send**: P producer processes x T threads of the official C++ client, each sending 128-byte
  messages synchronously
  (``send_sync``) for D seconds; reports send TPS, average and max RT, and the CPU the broker
  and the client each spend per send;
* **consume**: one C++ push consumer process draining what was sent; reports consume TPS.

Run: ``.venv/bin/python -m bench.broker_bench [--producers 1 --threads 16 --seconds 10]``.
The load is ``bench/cpp_load.c``, built here with gcc against the wheel's librocketmq.so, so
no Python runs on the client side; each producer process shares one connection per broker
among its threads, as the C++ client does.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.machine import summary as machine_summary
from bench.procs import cpu_seconds, free_port, wait_port

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "BenchmarkBroker"

CPP_LOAD = Path(__file__).with_name("cpp_load.c")


def build_cpp_load(work: Path) -> Path:
    """Compile bench/cpp_load.c against the official client's librocketmq.so (from the
    rocketmq==0.4.4 wheel) so the load has no Python in its path."""
    import rocketmq

    lib = Path(rocketmq.__file__).parent
    binary = work / "cpp_load"
    subprocess.run(
        [
            "gcc",
            "-O2",
            "-o",
            str(binary),
            str(CPP_LOAD),
            f"-L{lib}",
            "-lrocketmq",
            f"-Wl,-rpath,{lib}",
            "-lpthread",
        ],
        check=True,
    )
    return binary


def run_once(args: argparse.Namespace, work: Path) -> dict[str, float]:
    ns_port, broker_port = free_port(), free_port()
    namesrv = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aiorocketmq.namesrv",
            "--listen-port",
            str(ns_port),
            "--store-dir",
            str(work / "ns"),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_port(ns_port)
    conf = work / "broker.conf"
    conf.write_text(f"flushDiskType={args.flush}\n")
    broker = subprocess.Popen(
        [sys.executable, "-m", "aiorocketmq.broker", "-c", str(conf), "-n", f"127.0.0.1:{ns_port}",
         "--listen-port", str(broker_port), "--store-dir", str(work / "broker"), "--broker-ip", "127.0.0.1",
         "--broker-name", "bench", "--log-level", "WARNING"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_port(broker_port)
        namesrv_addr = f"127.0.0.1:{ns_port}"
        start_at = time.time() + 3.0  # every producer connected and warmed up by then
        producers = [
            subprocess.Popen(
                [
                    str(args.load),
                    "produce",
                    namesrv_addr,
                    TOPIC,
                    str(args.threads),
                    str(args.seconds),
                    str(args.size),
                    f"{start_at:.3f}",
                ],
                cwd=work,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            for _ in range(args.producers)
        ]
        time.sleep(max(0.0, start_at - time.time()))
        cpu_before = cpu_seconds(broker.pid)
        outputs = []
        for proc in producers:
            outputs.append(proc.communicate()[0])
        broker_cpu = (cpu_seconds(broker.pid) - cpu_before) / args.seconds
        results = [json.loads(out.strip().splitlines()[-1]) for out in outputs]
        sent = sum(r["sent"] for r in results)
        send = {
            "send_tps": sent / args.seconds,
            "avg_rt_ms": sum(r["rt_sum_us"] for r in results) / 1000 / max(1, sent),
            "max_rt_ms": max(r["rt_max_us"] for r in results) / 1000,
            "send_failed": sum(r["failed"] for r in results),
            "broker_cpu_pct": 100 * broker_cpu,
            "broker_us_per_send": 1e6 * broker_cpu * args.seconds / max(1, sent),
            # the C++ client's own CPU: on two cores, client + broker per send bound the rate
            "client_us_per_send": 1e6 * sum(r["cpu_s"] for r in results) / max(1, sent),
        }
        cpu_before = cpu_seconds(broker.pid)
        consumer = subprocess.run(
            [str(args.load), "consume", namesrv_addr, TOPIC, "bench-consumer", str(sent), "120", "4"],
            cwd=work,
            capture_output=True,
            text=True,
            check=True,
        )
        consumed = json.loads(consumer.stdout.strip().splitlines()[-1])
        send["consumed"] = consumed["consumed"]
        send["consume_tps"] = consumed["consumed"] / max(1e-9, consumed["seconds"])
        send["broker_us_per_consumed"] = (
            1e6 * (cpu_seconds(broker.pid) - cpu_before) / max(1, consumed["consumed"])
        )
        return send
    finally:
        for proc in (broker, namesrv):
            proc.terminate()
            proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--producers", type=int, default=1, help="producer processes")
    parser.add_argument("--threads", type=int, default=16, help="sending threads per producer process")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--size", type=int, default=128, help="message body bytes")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--flush", default="ASYNC_FLUSH", choices=["ASYNC_FLUSH", "SYNC_FLUSH"])
    args = parser.parse_args()
    print(machine_summary(), flush=True)
    build_dir = Path(tempfile.mkdtemp(prefix="cpp-load-"))
    args.load = build_cpp_load(build_dir)
    runs = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            result = run_once(args, Path(tmp))
        runs.append(result)
        print(
            f"run {i + 1}: Send TPS: {result['send_tps']:.0f} | Max RT(ms): {result['max_rt_ms']:.1f} | "
            f"Average RT(ms): {result['avg_rt_ms']:7.3f} | Send Failed: {result['send_failed']:.0f} | "
            f"broker CPU: {result['broker_cpu_pct']:.0f}% ({result['broker_us_per_send']:.0f} us/send) | "
            f"client CPU: {result['client_us_per_send']:.0f} us/send | "
            f"Consume TPS: {result['consume_tps']:.0f} ({result['broker_us_per_consumed']:.1f} us/msg)",
            flush=True,
        )
    median = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    print(
        f"median of {len(runs)}: Send TPS: {median['send_tps']:.0f} | Max RT(ms): {median['max_rt_ms']:.1f} | "
        f"Average RT(ms): {median['avg_rt_ms']:7.3f} | broker CPU: {median['broker_cpu_pct']:.0f}% "
        f"({median['broker_us_per_send']:.0f} us/send) | client CPU: {median['client_us_per_send']:.0f} us/send | "
        f"Consume TPS: {median['consume_tps']:.0f}"
    )


if __name__ == "__main__":
    main()
