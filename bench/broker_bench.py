"""Broker throughput with the official C++ client as load (issue 5).

Starts a real name server and broker, then:

* **send**: P producer processes x T threads, each sending 128-byte messages synchronously
  (``send_sync``) for D seconds; reports send TPS, average and max RT, and the broker's CPU;
* **consume**: one C++ push consumer process draining what was sent; reports consume TPS.

Run: ``.venv/bin/python -m bench.broker_bench [--producers 3 --threads 6 --seconds 10]``.
The C++ client serializes its sends per connection, so load comes from several processes.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "BenchmarkBroker"

PRODUCER = r"""
import json, sys, threading, time
from rocketmq.client import Producer, Message
namesrv, threads, seconds, size, name = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
producer = Producer("bench-producer-" + name)
producer.set_namesrv_addr(namesrv)
producer.start()
warm = Message(TOPIC); warm.set_body("w"); producer.send_sync(warm)
counts = [0] * threads; rt_sums = [0.0] * threads; rt_max = [0.0] * threads; failures = [0] * threads
start_at = float(sys.stdin.readline())
while time.time() < start_at:
    time.sleep(0.001)
stop = start_at + seconds
def run(i):
    msg = Message(TOPIC); msg.set_body("x" * size)
    while time.time() < stop:
        t = time.perf_counter()
        try:
            producer.send_sync(msg)
        except Exception:
            failures[i] += 1
            continue
        d = time.perf_counter() - t
        counts[i] += 1; rt_sums[i] += d; rt_max[i] = max(rt_max[i], d)
workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
for w in workers: w.start()
for w in workers: w.join()
print(json.dumps({"sent": sum(counts), "rt_sum": sum(rt_sums), "rt_max": max(rt_max), "failures": sum(failures)}))
producer.shutdown()
""".replace("TOPIC", repr(TOPIC))

CONSUMER = r"""
import json, sys, threading, time
from rocketmq.client import PushConsumer
namesrv, expected, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
lock = threading.Lock(); state = {"n": 0, "first": None, "last": None}
done = threading.Event()
def on_message(msg):
    now = time.time()
    with lock:
        state["n"] += 1
        if state["first"] is None: state["first"] = now
        state["last"] = now
        if state["n"] >= expected: done.set()
consumer = PushConsumer("bench-consumer")
consumer.set_namesrv_addr(namesrv)
consumer.set_thread_count(4)
consumer.set_message_batch_max_size(32)
consumer.subscribe(TOPIC, on_message)
consumer.start()
done.wait(timeout)
with lock:
    n, first, last = state["n"], state["first"], state["last"]
print(json.dumps({"consumed": n, "seconds": (last - first) if first and last else 0.0}))
consumer.shutdown()
""".replace("TOPIC", repr(TOPIC))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} never opened")


def run_once(args: argparse.Namespace, work: Path) -> dict[str, float]:
    ns_port, broker_port = free_port(), free_port()
    namesrv = subprocess.Popen(
        [sys.executable, "-m", "namesrv", "--listen-port", str(ns_port), "--store-dir", str(work / "ns")],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_port(ns_port)
    conf = work / "broker.conf"
    conf.write_text(f"flushDiskType={args.flush}\n")
    broker = subprocess.Popen(
        [sys.executable, "-m", "broker", "-c", str(conf), "-n", f"127.0.0.1:{ns_port}",
         "--listen-port", str(broker_port), "--store-dir", str(work / "broker"), "--broker-ip", "127.0.0.1",
         "--broker-name", "bench", "--log-level", "WARNING"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_port(broker_port)
        namesrv_addr = f"127.0.0.1:{ns_port}"
        producers = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    PRODUCER,
                    namesrv_addr,
                    str(args.threads),
                    str(args.seconds),
                    str(args.size),
                    str(i),
                ],
                cwd=work,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for i in range(args.producers)
        ]
        time.sleep(2.0)  # producers connected and warmed up
        start_at = time.time() + 0.5
        for proc in producers:
            assert proc.stdin is not None
            proc.stdin.write(f"{start_at}\n")
            proc.stdin.flush()
        time.sleep(max(0.0, start_at - time.time()))
        cpu_before = cpu_seconds(broker.pid)
        results = [json.loads(proc.communicate()[0].strip().splitlines()[-1]) for proc in producers]
        broker_cpu = (cpu_seconds(broker.pid) - cpu_before) / args.seconds
        sent = sum(r["sent"] for r in results)
        send = {
            "send_tps": sent / args.seconds,
            "avg_rt_ms": 1000 * sum(r["rt_sum"] for r in results) / max(1, sent),
            "max_rt_ms": 1000 * max(r["rt_max"] for r in results),
            "send_failed": sum(r["failures"] for r in results),
            "broker_cpu_pct": 100 * broker_cpu,
        }
        consumer = subprocess.run(
            [sys.executable, "-c", CONSUMER, namesrv_addr, str(sent), "120"],
            cwd=work,
            capture_output=True,
            text=True,
            check=True,
        )
        consumed = json.loads(consumer.stdout.strip().splitlines()[-1])
        send["consumed"] = consumed["consumed"]
        send["consume_tps"] = consumed["consumed"] / max(1e-9, consumed["seconds"])
        return send
    finally:
        for proc in (broker, namesrv):
            proc.terminate()
            proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--producers", type=int, default=3, help="producer processes")
    parser.add_argument("--threads", type=int, default=6, help="threads per producer process")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--size", type=int, default=128, help="message body bytes")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--flush", default="ASYNC_FLUSH", choices=["ASYNC_FLUSH", "SYNC_FLUSH"])
    args = parser.parse_args()
    runs = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            result = run_once(args, Path(tmp))
        runs.append(result)
        print(
            f"run {i + 1}: Send TPS: {result['send_tps']:.0f} | Max RT(ms): {result['max_rt_ms']:.1f} | "
            f"Average RT(ms): {result['avg_rt_ms']:7.3f} | Send Failed: {result['send_failed']:.0f} | "
            f"broker CPU: {result['broker_cpu_pct']:.0f}% | Consume TPS: {result['consume_tps']:.0f}",
            flush=True,
        )
    median = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    print(
        f"median of {len(runs)}: Send TPS: {median['send_tps']:.0f} | Max RT(ms): {median['max_rt_ms']:.1f} | "
        f"Average RT(ms): {median['avg_rt_ms']:7.3f} | broker CPU: {median['broker_cpu_pct']:.0f}% | "
        f"Consume TPS: {median['consume_tps']:.0f}"
    )


if __name__ == "__main__":
    main()
