"""The load of ``bench/grpc_bench.py``: the official RocketMQ 5.x Python client
(``rocketmq-python-client``), run in its own process with that package on PYTHONPATH (it and
the 4.x ``rocketmq`` package of the dev dependencies share an import name).

``python bench/grpc_load.py send ENDPOINT TOPIC SECONDS THREADS SIZE`` sends from THREADS
threads of one Producer for SECONDS; ``... receive ENDPOINT TOPIC GROUP COUNT BATCH`` receives
and acks COUNT messages with one SimpleConsumer
(acks on 8 threads). Each prints one ``RESULT {json}`` line.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer


def send(endpoint: str, topic: str, seconds: float, threads: int, size: int) -> dict[str, float]:
    producer = Producer(ClientConfiguration(endpoint, Credentials()), (topic,))
    producer.startup()
    body = b"x" * size
    counts = [0] * threads
    latencies: list[list[float]] = [[] for _ in range(threads)]
    stop = time.monotonic() + seconds

    def loop(i: int) -> None:
        while time.monotonic() < stop:
            msg = Message()
            msg.topic = topic
            msg.body = body
            msg.tag = "bench"
            started = time.perf_counter()
            producer.send(msg)
            latencies[i].append(time.perf_counter() - started)
            counts[i] += 1

    started = time.monotonic()
    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.monotonic() - started
    producer.shutdown()
    all_lat = sorted(x for part in latencies for x in part)
    total = sum(counts)
    return {
        "sent": total,
        "seconds": elapsed,
        "tps": total / elapsed,
        "p50_ms": all_lat[len(all_lat) // 2] * 1000 if all_lat else 0.0,
        "p99_ms": all_lat[int(len(all_lat) * 0.99)] * 1000 if all_lat else 0.0,
    }


def receive(endpoint: str, topic: str, group: str, count: int, batch: int) -> dict[str, float]:
    consumer = SimpleConsumer(
        ClientConfiguration(endpoint, Credentials()), group, {topic: FilterExpression("*")}, await_duration=5
    )
    consumer.startup()
    got = 0
    acks: list[Future[None]] = []
    # The client's ack_async returns no future (5.1.2): sync acks on a few threads instead.
    pool = ThreadPoolExecutor(8)
    started = time.monotonic()
    idle = 0
    while got < count and idle < 3:
        messages = consumer.receive(batch, 30) or []
        idle = 0 if messages else idle + 1
        for msg in messages:
            acks.append(pool.submit(consumer.ack, msg))
        got += len(messages)
    for ack in acks:
        ack.result()
    elapsed = time.monotonic() - started
    pool.shutdown()
    consumer.shutdown()
    return {"received": got, "seconds": elapsed, "tps": got / elapsed if elapsed else 0.0}


if __name__ == "__main__":
    kind, rest = sys.argv[1], sys.argv[2:]
    if kind == "send":
        result = send(rest[0], rest[1], float(rest[2]), int(rest[3]), int(rest[4]))
    else:
        result = receive(rest[0], rest[1], rest[2], int(rest[3]), int(rest[4]))
    print("RESULT " + json.dumps(result), flush=True)
