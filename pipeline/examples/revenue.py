"""Example pipeline: order events on a topic -> parse JSON -> windowed revenue per category ->
results to a topic and to Parquet.

Against ``make run``'s cluster (name server 127.0.0.1:9876), one command creates the topics,
produces sample orders and runs the job until it has caught up::

    python -m aiorocketmq.pipeline.examples.revenue --namesrv 127.0.0.1:9876 --generate 5000 --once

Without ``--once`` the job keeps running (Ctrl-C stops it); ``--generate-rate N`` keeps
producing N sample orders a second meanwhile, which is what the docker-compose service does.

An order event is a JSON body ``{"order_id": "o-17", "category": "books", "amount": 12.5,
"ts": "2026-01-01T12:00:00.000Z"}``. Revenue is summed per category over tumbling event-time
windows (``--window``, default 1 minute) and emitted once the watermark (``--watermark``
behind the newest event) closes a window: one JSON message per window and category on the
output topic (tag = category, key = ``category@window_start`` for de-duplication downstream)
and one row in the Parquet directory. Each sink has its own checkpoint under
``--checkpoint``, so a restart resumes where the job stopped: Parquet rows are written
exactly once, topic messages at least once.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from aiorocketmq.client.blocking import BlockingAdmin, BlockingProducer
from aiorocketmq.client.errors import MQError
from aiorocketmq.protocol.message import Message

CATEGORIES = ("books", "games", "garden", "music", "toys")


@dataclass(frozen=True)
class Order:
    order_id: str
    category: str
    amount: float
    ts_ms: int

    def to_json(self) -> bytes:
        stamp = datetime.fromtimestamp(self.ts_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        return json.dumps(
            {"order_id": self.order_id, "category": self.category, "amount": self.amount, "ts": stamp}
        ).encode()


def sample_orders(
    count: int, *, span_seconds: float, seed: int | None = None, now_ms: int | None = None
) -> list[Order]:
    """``count`` orders with event times spread evenly over the last ``span_seconds``."""
    rng = random.Random(seed)
    end = now_ms if now_ms is not None else time.time_ns() // 1_000_000
    start = end - int(span_seconds * 1000)
    step = (end - start) / max(count, 1)
    return [
        Order(
            order_id=f"o-{start + i}-{rng.randrange(1 << 30)}",
            category=rng.choice(CATEGORIES),
            amount=round(rng.uniform(1, 200), 2),
            ts_ms=int(start + i * step),
        )
        for i in range(count)
    ]


def ensure_topics(namesrv: str, topics: Sequence[str], queues: int) -> None:
    """Create the topics the job uses when the cluster does not have them yet."""
    with BlockingAdmin(namesrv) as admin:
        existing = set(admin.topic_list())
        for topic in topics:
            if topic not in existing:
                admin.create_topic(topic, queues)


def produce(namesrv: str, topic: str, orders: Sequence[Order]) -> None:
    with BlockingProducer("revenue-example-generator", namesrv) as producer:
        producer.send_all([Message(topic, o.to_json(), tags=o.category, keys=[o.order_id]) for o in orders])


def generate_forever(namesrv: str, topic: str, rate: float, stop: threading.Event) -> None:
    """About ``rate`` orders a second, stamped now, until ``stop`` is set."""
    with BlockingProducer("revenue-example-generator", namesrv) as producer:
        while not stop.is_set():
            began = time.monotonic()
            orders = sample_orders(max(1, int(rate)), span_seconds=1)
            producer.send_all(
                [Message(topic, o.to_json(), tags=o.category, keys=[o.order_id]) for o in orders]
            )
            stop.wait(max(0.0, 1 - (time.monotonic() - began)))


def session(app: str = "rocketmq-revenue-example") -> Any:
    """A local SparkSession whose Python workers run this interpreter, with the ``rocketmq``
    format registered."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from aiorocketmq import pipeline

    spark = (
        SparkSession.builder.master(os.environ.get("SPARK_MASTER", "local[2]"))
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    pipeline.register(spark)
    return spark


def revenue(spark: Any, namesrv: str, topic: str, *, window: str, watermark: str, starting: str) -> Any:
    """The streaming DataFrame of closed windows: window_start, window_end, category,
    revenue, orders."""
    from pyspark.sql import functions as F

    order_schema = "order_id string, category string, amount double, ts timestamp"
    events = (
        spark.readStream.format("rocketmq")
        .option("namesrv", namesrv)
        .option("topic", topic)
        .option("startingOffsets", starting)
        .load()
        .select(F.from_json(F.col("body").cast("string"), order_schema).alias("order"))
        .select("order.*")
        .where("category IS NOT NULL AND amount IS NOT NULL AND ts IS NOT NULL")
    )
    return (
        events.withWatermark("ts", watermark)
        .groupBy(F.window("ts", window).alias("w"), "category")
        .agg(F.round(F.sum("amount"), 2).alias("revenue"), F.count("*").alias("orders"))
        .select(
            F.col("w.start").alias("window_start"),
            F.col("w.end").alias("window_end"),
            "category",
            "revenue",
            "orders",
        )
    )


def start_sinks(
    results: Any, namesrv: str, output_topic: str, parquet: Path, checkpoint: Path, once: bool
) -> list[Any]:
    """Two queries over the same results: the output topic and the Parquet directory."""
    from pyspark.sql import functions as F

    as_messages = results.select(
        F.to_json(F.struct("window_start", "window_end", "category", "revenue", "orders")).alias("body"),
        F.col("category").alias("tags"),
        F.concat_ws("@", "category", F.date_format("window_start", "yyyy-MM-dd'T'HH:mm:ss'Z'")).alias("keys"),
    )

    from aiorocketmq import pipeline

    pipeline.activate(results.sparkSession)

    def trigger(writer: Any) -> Any:
        return writer.trigger(availableNow=True) if once else writer.trigger(processingTime="5 seconds")

    to_topic = trigger(
        as_messages.writeStream.format("rocketmq")
        .option("namesrv", namesrv)
        .option("topic", output_topic)
        .option("checkpointLocation", str(checkpoint / "topic"))
        .outputMode("append")
        .queryName("revenue_to_topic")
    ).start()
    to_parquet = trigger(
        results.writeStream.format("parquet")
        .option("path", str(parquet))
        .option("checkpointLocation", str(checkpoint / "parquet"))
        .outputMode("append")
        .queryName("revenue_to_parquet")
    ).start()
    return [to_topic, to_parquet]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m aiorocketmq.pipeline.examples.revenue",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--namesrv", default=os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876"))
    parser.add_argument("--topic", default="Orders", help="input topic (default Orders)")
    parser.add_argument(
        "--output-topic", default="CategoryRevenue", help="result topic (default CategoryRevenue)"
    )
    parser.add_argument("--parquet", type=Path, default=Path("./revenue-parquet"), help="result directory")
    parser.add_argument(
        "--checkpoint", type=Path, default=Path("./revenue-checkpoint"), help="checkpoint directory"
    )
    parser.add_argument("--window", default="1 minute", help="tumbling window length (default 1 minute)")
    parser.add_argument("--watermark", default="1 minute", help="allowed lateness (default 1 minute)")
    parser.add_argument(
        "--starting-offsets", default="earliest", help="for a new checkpoint (default earliest)"
    )
    parser.add_argument("--queues", type=int, default=4, help="queues per broker for topics the job creates")
    parser.add_argument("--generate", type=int, default=0, help="produce this many sample orders first")
    parser.add_argument(
        "--generate-span", type=float, default=600, help="their event times span these seconds"
    )
    parser.add_argument(
        "--generate-rate", type=float, default=0, help="keep producing this many orders a second"
    )
    parser.add_argument("--once", action="store_true", help="process what is there, then exit (availableNow)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None, spark: Any = None) -> int:
    args = parse_args(argv)
    try:
        ensure_topics(args.namesrv, [args.topic, args.output_topic], args.queues)
        if args.generate:
            produce(args.namesrv, args.topic, sample_orders(args.generate, span_seconds=args.generate_span))
            print(f"produced {args.generate} sample orders to {args.topic}", flush=True)
    except MQError as exc:
        print(f"cannot use the cluster at {args.namesrv}: {exc}", file=sys.stderr)
        return 2
    spark = spark or session()
    stop = threading.Event()
    generator = None
    if args.generate_rate > 0 and not args.once:
        generator = threading.Thread(
            target=generate_forever, args=(args.namesrv, args.topic, args.generate_rate, stop), daemon=True
        )
        generator.start()
    results = revenue(
        spark,
        args.namesrv,
        args.topic,
        window=args.window,
        watermark=args.watermark,
        starting=args.starting_offsets,
    )
    queries = start_sinks(results, args.namesrv, args.output_topic, args.parquet, args.checkpoint, args.once)

    def request_stop(signum: int, frame: FrameType | None) -> None:
        # Only flag it: the main thread is inside a Py4J call, and a Py4J call made from a
        # signal handler on that same thread would interleave with it on one connection.
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, request_stop)
    try:
        while not stop.is_set() and any(q.isActive for q in queries):
            for query in queries:
                query.awaitTermination(1)
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        for query in queries:
            if query.isActive:
                query.stop()
    failed = [q for q in queries if q.exception() is not None]
    for query in failed:
        print(f"query {query.name} failed: {query.exception()}", file=sys.stderr)
    if args.once and args.parquet.exists():
        rows = spark.read.parquet(str(args.parquet)).orderBy("window_start", "category").collect()
        print(f"{len(rows)} closed windows in {args.parquet}:")
        for row in rows[-10:]:
            print(
                f"  {row.window_start:%H:%M:%S}-{row.window_end:%H:%M:%S} {row.category:<8} "
                f"revenue {row.revenue:>10.2f} from {row.orders} orders"
            )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
