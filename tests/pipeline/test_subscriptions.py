"""Reads of several topics and of chosen queues, and Kafka's option names, through a real
local SparkSession against real name server and broker processes: ``subscribe``,
``subscribePattern`` (in a batch, and in a stream that picks up a topic created after it
started), ``assign``, per-topic offsets JSON, ``includeHeaders``, ``minPartitions``,
``maxOffsetsPerTrigger``, and the errors of each, whose cause is their first line."""

from __future__ import annotations

import collections
import json
import re
from typing import Any

import pytest

from aiorocketmq.pipeline.planning import matching_topics
from aiorocketmq.protocol.body import MessageQueue
from aiorocketmq.protocol.message import Message
from aiorocketmq.protocol.names import TRACE_TOPIC
from tests.pipeline.conftest import TestCluster, unique, wait_until


def read(spark: Any, cluster: TestCluster, **options: str) -> Any:
    reader = spark.read.format("rocketmq").option("namesrv", cluster.namesrv)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def send(cluster: TestCluster, queue: MessageQueue, first: int, count: int) -> None:
    cluster.producer.send_batch(
        [
            Message(queue.topic, f"{queue.topic}/{i}".encode(), tags=f"t{i % 2}", properties={"n": str(i)})
            for i in range(first, first + count)
        ],
        queue=queue,
    )


def q(topic: str, broker: str, queue_id: int) -> MessageQueue:
    return MessageQueue(topic=topic, broker_name=broker, queue_id=queue_id)


def first_line(error: BaseException) -> str:
    return str(error).splitlines()[0]


@pytest.fixture(scope="module")
def topics(cluster: TestCluster) -> tuple[str, str, str]:
    """``<prefix>-a`` (2 queues on broker-a, 30 messages each), ``<prefix>-b`` (1 queue on
    each broker, 20 each) and ``<other>-a``, which a ``<prefix>-.*`` pattern does not match."""
    prefix = unique("Sub")
    a, b, other = f"{prefix}-a", f"{prefix}-b", f"{unique('Sub')}-a"
    cluster.create_topic(a, 2, broker="broker-a")
    cluster.create_topic(b, 1, broker="broker-a")
    cluster.create_topic(b, 1, broker="broker-b")
    cluster.create_topic(other, 1, broker="broker-a")
    for queue in (q(a, "broker-a", 0), q(a, "broker-a", 1), q(b, "broker-a", 0), q(b, "broker-b", 0)):
        send(cluster, queue, 0, 30 if queue.topic == a else 20)
    send(cluster, q(other, "broker-a", 0), 0, 5)
    return prefix, a, b


def test_subscribe_several_topics_with_per_topic_offsets_headers_and_min_partitions(
    spark: Any, cluster: TestCluster, topics: tuple[str, str, str]
) -> None:
    _, a, b = topics
    starting = json.dumps({a: {"broker-a": {"0": 10}}, b: {"broker-b": {"0": 5}}})
    ending = json.dumps({a: {"broker-a": {"1": 25}}})
    df = read(
        spark,
        cluster,
        subscribe=f"{a}, {b}",
        startingOffsets=starting,
        endingOffsets=ending,
        includeHeaders="true",
        minPartitions="8",
    )
    assert df.schema.fieldNames()[-1] == "headers"
    assert df.schema["headers"].dataType.simpleString() == "array<struct<key:string,value:binary>>"
    rows = df.collect()
    # Every row carries its topic; queues the JSON does not name read from earliest / to latest.
    ranges = collections.defaultdict(list)
    for row in rows:
        ranges[(row.topic, row.broker, row.queue_id)].append(row.queue_offset)
    assert {k: (min(v), max(v) + 1, len(v)) for k, v in ranges.items()} == {
        (a, "broker-a", 0): (10, 30, 20),
        (a, "broker-a", 1): (0, 25, 25),
        (b, "broker-a", 0): (0, 20, 20),
        (b, "broker-b", 0): (5, 20, 15),
    }
    # headers: every property of the message as a key/value pair, values as bytes.
    for row in rows[:50]:
        headers = {h.key: h.value for h in row.headers}
        assert headers["n"] == row.properties["n"].encode()
        assert headers["TAGS"] == row.tags.encode() and headers["UNIQ_KEY"] == row.msg_id.encode()
        assert set(headers) == {*row.properties, "TAGS", "UNIQ_KEY"}
    # minPartitions=8 over 4 queue ranges of 20, 25, 20 and 15 offsets: shares by size,
    # rounded (2 + 3 + 2 + 2), "about 8" as Kafka's option says.
    assert df.rdd.getNumPartitions() == 9
    # Kafka's per-partition shape without a broker is refused with what to write instead.
    with pytest.raises(Exception) as info:
        read(spark, cluster, assign=json.dumps({a: [0, 1]}))
    assert "rocketmq option 'assign': topic" in first_line(info.value)
    assert "must map to an object of broker name -> queue ids" in first_line(info.value)


def test_subscribe_pattern_and_assign_in_a_batch(
    spark: Any, cluster: TestCluster, topics: tuple[str, str, str]
) -> None:
    prefix, a, b = topics
    by_topic = collections.Counter(
        r.topic for r in read(spark, cluster, subscribePattern=re.escape(prefix) + "-.*").collect()
    )
    assert by_topic == {a: 60, b: 40}
    # The pattern matches whole names, as Kafka's does: a prefix alone matches nothing.
    assert read(spark, cluster, subscribePattern=re.escape(prefix)).count() == 0
    # RocketMQ's own topics never match, even ".*".
    everything = matching_topics(cluster.admin, re.compile(".*"))
    assert a in everything and b in everything
    internal = {"TBW102", "SCHEDULE_TOPIC_XXXX", "broker-a", "broker-b", "DefaultCluster", TRACE_TOPIC}
    assert not internal & set(everything)
    assert not [t for t in everything if t.startswith(("%RETRY%", "%DLQ%", "RMQ_SYS_"))]

    assigned = read(spark, cluster, assign=json.dumps({a: {"broker-a": [1]}, b: {"broker-b": [0]}}))
    counts = collections.Counter((r.topic, r.broker, r.queue_id) for r in assigned.collect())
    assert counts == {(a, "broker-a", 1): 30, (b, "broker-b", 0): 20}


def test_subscription_errors_name_the_option_on_their_first_line(
    spark: Any, cluster: TestCluster, topics: tuple[str, str, str]
) -> None:
    _, a, _ = topics
    missing = unique("NoSuchTopic")
    cases = [
        ({"subscribe": f"{a},{missing}"}, f"rocketmq option 'subscribe': topic '{missing}' does not exist"),
        ({"assign": json.dumps({a: {"broker-a": [7]}})}, f"rocketmq option 'assign': topic '{a}' has no queue broker-a:7"),
        ({"topic": a, "subscribe": a}, "rocketmq option 'subscribe': give one of topic, subscribe"),
        ({}, "rocketmq option 'topic': is required"),
        ({"topic": a, "maxRecordsPerPartition": "5", "maxMessagesPerPartition": "6"}, "the two disagree"),
    ]  # fmt: skip
    for options, message in cases:
        with pytest.raises(Exception) as info:
            read(spark, cluster, **options)
        line = first_line(info.value)
        assert line.startswith("[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: ")
        assert message in line, str(info.value)
        assert "Traceback" not in str(info.value)
    # An error found while planning the read (after load()) is as short.
    df = read(spark, cluster, subscribe=a, startingOffsets=json.dumps({a: {"broker-b": {"0": 0}}}))
    with pytest.raises(Exception) as info:
        df.count()
    assert "rocketmq option 'startingOffsets': names queue broker-b:0 of topic" in first_line(info.value)


def test_stream_with_a_pattern_picks_up_new_topics_with_kafka_option_names(
    spark: Any, cluster: TestCluster
) -> None:
    prefix = unique("Pat")
    first, second = f"{prefix}-1", f"{prefix}-2"
    cluster.create_topic(first, 2)
    queues = cluster.admin.queues(first)
    for queue in queues:
        send(cluster, queue, 0, 40)
    before = 40 * len(queues)
    name = unique("pattern")
    query = (
        spark.readStream.format("rocketmq")
        .option("namesrv", cluster.namesrv)
        .option("subscribePattern", re.escape(prefix) + r"-\d+")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "50")
        .option("includeHeaders", "true")
        .load()
        .selectExpr("topic", "broker", "queue_id", "queue_offset", "headers")
        .writeStream.format("memory")
        .queryName(name)
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    try:
        wait_until(lambda: spark.table(name).count() >= before, timeout=90)
        # A topic created after the query started: matched at a later micro-batch, read from 0.
        cluster.create_topic(second, 1, broker="broker-b")
        send(cluster, q(second, "broker-b", 0), 0, 30)
        wait_until(lambda: spark.table(name).count() >= before + 30, timeout=90)
        rows = spark.table(name).collect()
        counts = collections.Counter(r.topic for r in rows)
        assert counts == {first: before, second: 30}
        assert len({(r.topic, r.broker, r.queue_id, r.queue_offset) for r in rows}) == before + 30
        assert sorted(r.queue_offset for r in rows if r.topic == second) == list(range(30))
        assert all(any(h.key == "n" for h in r.headers) for r in rows)
        sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        assert max(sizes) <= 50 and sum(sizes) == before + 30
    finally:
        query.stop()
