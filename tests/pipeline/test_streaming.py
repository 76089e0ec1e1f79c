"""Streaming reads and writes through a real local SparkSession against real name server and
broker processes: availableNow, micro-batches while messages keep arriving, admission
control, new queues and brokers, restart from a checkpoint (exactly once into a file sink),
consumer-group progress, and the streaming sink."""

from __future__ import annotations

import collections
import threading
import time
from pathlib import Path
from typing import Any

from aiorocketmq import pipeline
from aiorocketmq.protocol.message import Message
from tests.pipeline.conftest import TestCluster, unique, wait_until


def stream(spark: Any, cluster: TestCluster, topic: str, **options: str) -> Any:
    reader = spark.readStream.format("rocketmq").option("namesrv", cluster.namesrv).option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def messages(topic: str, first: int, count: int, tags: str = "t") -> list[Message]:
    return [
        Message(topic, f"m-{i}".encode(), tags=tags, properties={"n": str(i)})
        for i in range(first, first + count)
    ]


def numbers(rows: list[Any]) -> list[int]:
    return sorted(int(r.body.decode()[2:]) for r in rows)


def test_available_now_reads_everything_once_in_rate_limited_batches(
    spark: Any, cluster: TestCluster
) -> None:
    topic = unique("StreamNow")
    cluster.create_topic(topic, 4)
    cluster.produce(messages(topic, 0, 500))
    name = unique("now")
    query = (
        stream(spark, cluster, topic, startingOffsets="earliest", maxMessagesPerTrigger="150")
        .writeStream.format("memory")
        .queryName(name)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    assert numbers(spark.table(name).collect()) == list(range(500))
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 500
    assert len(sizes) >= 4 and max(sizes) <= 150


def test_micro_batches_while_messages_keep_arriving(spark: Any, cluster: TestCluster) -> None:
    topic = unique("StreamLive")
    cluster.create_topic(topic, 2)
    name = unique("live")
    query = (
        stream(spark, cluster, topic, startingOffsets="earliest")
        .writeStream.format("memory")
        .queryName(name)
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    try:
        for round_ in range(5):
            cluster.produce(messages(topic, round_ * 40, 40))
            wait_until(lambda n=(round_ + 1) * 40: spark.table(name).count() >= n, timeout=90)
        assert numbers(spark.table(name).collect()) == list(range(200))
        batches = [p for p in query.recentProgress if p["numInputRows"]]
        assert len(batches) >= 5
    finally:
        query.stop()


def test_new_queues_and_brokers_are_picked_up(spark: Any, cluster: TestCluster) -> None:
    topic = unique("StreamGrow")
    cluster.create_topic(topic, 1, broker="broker-a")
    name = unique("grow")
    query = (
        stream(spark, cluster, topic, startingOffsets="latest")
        .writeStream.format("memory")
        .queryName(name)
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    try:
        wait_until(lambda: bool(query.recentProgress), timeout=60)  # the start offsets are fixed
        cluster.produce(messages(topic, 0, 30))
        wait_until(lambda: spark.table(name).count() >= 30, timeout=90)
        # More queues on broker-a, and the topic on broker-b: both start at offset 0.
        cluster.create_topic(topic, 3, broker="broker-a")
        cluster.create_topic(topic, 2, broker="broker-b")
        wait_until(lambda: len(cluster.admin.queues(topic)) == 5, timeout=30)
        cluster.produce(messages(topic, 30, 100))
        wait_until(lambda: spark.table(name).count() >= 130, timeout=90)
        rows = spark.table(name).collect()
        assert numbers(rows) == list(range(130))
        per_queue = collections.Counter((r.broker, r.queue_id) for r in rows)
        assert set(per_queue) == {
            ("broker-a", 0),
            ("broker-a", 1),
            ("broker-a", 2),
            ("broker-b", 0),
            ("broker-b", 1),
        }
        assert min(r.queue_offset for r in rows if r.broker == "broker-b") == 0
    finally:
        query.stop()


def test_restart_from_checkpoint_writes_each_message_once_to_a_file_sink(
    spark: Any, cluster: TestCluster, tmp_path: Path
) -> None:
    topic = unique("StreamRestart")
    cluster.create_topic(topic, 1)  # one queue on each broker
    out = tmp_path / "out"
    checkpoint = tmp_path / "checkpoint"

    def start() -> Any:
        return (
            stream(spark, cluster, topic, startingOffsets="earliest", maxMessagesPerTrigger="40")
            .selectExpr("cast(body as string) as body", "broker", "queue_id", "queue_offset")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="100 milliseconds")
            .start()
        )

    produced = 0
    stop_producing = threading.Event()

    def produce() -> None:
        nonlocal produced
        while not stop_producing.is_set() and produced < 400:
            cluster.produce(messages(topic, produced, 20))
            produced += 20
            time.sleep(0.1)

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        # Stop the query twice while input keeps arriving (possibly in the middle of a
        # micro-batch), each time after a different number of micro-batches.
        for batches in (2, 4):
            query = start()
            wait_until(
                lambda q=query, n=batches: len([p for p in q.recentProgress if p["numInputRows"]]) >= n
            )
            query.stop()
    finally:
        stop_producing.set()
        producer.join()
    final = start()
    try:
        final.processAllAvailable()
    finally:
        final.stop()
    rows = spark.read.parquet(str(out)).collect()
    assert sorted(int(r.body[2:]) for r in rows) == list(range(produced))
    assert len({(r.broker, r.queue_id, r.queue_offset) for r in rows}) == produced == len(rows)


def test_consumer_group_progress_shows_the_streams_lag(
    spark: Any, cluster: TestCluster, tmp_path: Path
) -> None:
    topic = unique("StreamGroup")
    group = unique("spark-progress")
    cluster.create_topic(topic, 2)
    cluster.produce(messages(topic, 0, 120))

    def run() -> None:
        query = (
            stream(spark, cluster, topic, startingOffsets="earliest", consumerGroup=group)
            .select("body")
            .writeStream.format("parquet")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    run()
    stats = cluster.admin.consume_stats(group, topic)
    assert sum(w.consumer_offset for w in stats.offset_table.values()) == 120
    assert stats.diff_total() == 0
    cluster.produce(messages(topic, 120, 45))
    assert cluster.admin.consumer_lag(group, topic) == 45
    run()
    assert cluster.admin.consumer_lag(group, topic) == 0
    for queue, wrapper in cluster.admin.consume_stats(group, topic).offset_table.items():
        assert wrapper.consumer_offset == wrapper.broker_offset == cluster.admin.max_offset(queue)
    assert spark.read.parquet(str(tmp_path / "out")).count() == 165


def test_streaming_sink_copies_a_topic(spark: Any, cluster: TestCluster, tmp_path: Path) -> None:
    source = unique("StreamCopyFrom")
    target = unique("StreamCopyTo")
    cluster.create_topic(source, 2)
    cluster.create_topic(target, 2)
    cluster.produce(messages(source, 0, 250, tags="copy"))
    # Spark looks a Python streaming sink up through the calling JVM thread's active session,
    # which py4j does not keep across a test run's calls.
    pipeline.activate(spark)
    query = (
        stream(spark, cluster, source, startingOffsets="earliest")
        .selectExpr(
            "body", "tags", "map('origin', concat(broker, ':', queue_id, ':', queue_offset)) as properties"
        )
        .writeStream.format("rocketmq")
        .option("namesrv", cluster.namesrv)
        .option("topic", target)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    copied = (
        spark.read.format("rocketmq")
        .option("namesrv", cluster.namesrv)
        .option("topic", target)
        .load()
        .collect()
    )
    assert numbers(copied) == list(range(250))
    assert {r.tags for r in copied} == {"copy"}
    assert len({r.properties["origin"] for r in copied}) == 250
