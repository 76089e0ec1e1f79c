"""Batch reads and writes through a real local SparkSession against real name server and
broker processes: exact rows and columns, offset ranges, timestamps, tag filters, partition
splitting, and write-then-read-back."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from aiorocketmq.protocol.message import Message
from tests.pipeline.conftest import TestCluster, unique


def read(spark: Any, cluster: TestCluster, topic: str, **options: str) -> Any:
    reader = spark.read.format("rocketmq").option("namesrv", cluster.namesrv).option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def orders(topic: str, count: int, start: int = 0) -> list[Message]:
    return [
        Message(
            topic,
            json.dumps({"order": i, "amount": i * 1.5}).encode(),
            tags="paid" if i % 3 else "refunded",
            keys=[f"order-{i}", f"user-{i % 5}"],
            properties={"region": f"r{i % 2}", "seq": str(i)},
        )
        for i in range(start, start + count)
    ]


def test_batch_read_returns_exactly_the_produced_messages_with_every_column(
    spark: Any, cluster: TestCluster
) -> None:
    topic = unique("SparkRead")
    cluster.create_topic(topic, 4)
    before = time.time()
    sent = orders(topic, 600)
    cluster.produce(sent)
    after = time.time()

    rows = read(spark, cluster, topic).collect()

    assert len(rows) == 600
    by_seq = {int(r.properties["seq"]): r for r in rows}
    assert sorted(by_seq) == list(range(600))
    positions = set()
    for i, msg in enumerate(sent):
        row = by_seq[i]
        assert row.topic == topic
        assert row.body == msg.body
        assert row.tags == msg.tags
        assert row.keys == f"order-{i} user-{i % 5}"
        assert row.properties["region"] == f"r{i % 2}" and row.properties["seq"] == str(i)
        # TAGS, KEYS and UNIQ_KEY are columns of their own, not repeated in the map.
        assert not {"TAGS", "KEYS", "UNIQ_KEY"} & set(row.properties)
        assert row.msg_id == msg.unique_id
        assert before - 1 <= row.born_timestamp.timestamp() <= row.store_timestamp.timestamp() <= after + 1
        assert row.born_host.rsplit(":", 1)[1].isdigit()
        assert row.store_host == cluster.broker_addr(row.broker)
        assert row.reconsume_times == 0
        positions.add((row.broker, row.queue_id, row.queue_offset))
    assert len(positions) == 600
    assert {r.broker for r in rows} == {"broker-a", "broker-b"}
    # Every queue's offsets are dense from 0: nothing skipped, nothing twice.
    per_queue: dict[tuple[str, int], list[int]] = {}
    for broker, queue_id, offset in positions:
        per_queue.setdefault((broker, queue_id), []).append(offset)
    for offsets in per_queue.values():
        assert sorted(offsets) == list(range(len(offsets)))
    schema = read(spark, cluster, topic).schema
    assert [f.name for f in schema.fields] == [
        "topic", "broker", "queue_id", "queue_offset", "msg_id", "tags", "keys", "body", "properties",
        "born_timestamp", "store_timestamp", "born_host", "store_host", "reconsume_times",
    ]  # fmt: skip


def test_offset_ranges_timestamps_tags_and_partition_splits(spark: Any, cluster: TestCluster) -> None:
    topic = unique("SparkRanges")
    cluster.create_topic(topic, 2, broker="broker-a")
    queue0 = [m for m in orders(topic, 300)]
    queue = cluster.admin.queues(topic)[0]
    cluster.producer.send_batch(queue0[:150], queue=queue)
    time.sleep(0.05)  # store timestamps are milliseconds: keep the halves apart
    middle = time.time()
    time.sleep(0.05)
    cluster.producer.send_batch(queue0[150:], queue=queue)

    # startingOffsets / endingOffsets JSON: queue 0 of broker-a from 100 to 250 (exclusive).
    df = read(
        spark,
        cluster,
        topic,
        startingOffsets='{"broker-a": {"0": 100}}',
        endingOffsets='{"broker-a": {"0": 250, "1": -1}}',
    )
    offsets = sorted(r.queue_offset for r in df.select("queue_offset").collect())
    assert offsets == list(range(100, 250))

    # startingTimestamp: the first message stored at or after the time.
    late = read(spark, cluster, topic, startingTimestamp=str(int(middle * 1000))).collect()
    assert sorted(r.queue_offset for r in late) == list(range(150, 300))

    # Tags are filtered at the broker (and exactly on the client); offsets of skipped
    # messages are simply passed over.
    paid = read(spark, cluster, topic, tags="paid").collect()
    assert sorted(int(r.properties["seq"]) for r in paid) == [i for i in range(300) if i % 3]
    both = read(spark, cluster, topic, tags="paid || refunded").count()
    assert both == 300
    assert read(spark, cluster, topic, tags="nothing-has-this").count() == 0

    # The sql option: an SQL92 filter on properties, evaluated by the broker.
    filtered = read(spark, cluster, topic, sql="region = 'r1' AND seq BETWEEN 10 AND 20").collect()
    assert sorted(int(r.properties["seq"]) for r in filtered) == [11, 13, 15, 17, 19]

    # maxMessagesPerPartition splits the queue range into several Spark partitions.
    split = read(spark, cluster, topic, maxMessagesPerPartition="64")
    assert split.rdd.getNumPartitions() == 5
    assert sorted(r.queue_offset for r in split.select("queue_offset").collect()) == list(range(300))
    split_tags = read(spark, cluster, topic, maxMessagesPerPartition="50", tags="refunded")
    assert sorted(int(r.properties["seq"]) for r in split_tags.collect()) == list(range(0, 300, 3))


def test_an_empty_topic_or_range_reads_no_rows(spark: Any, cluster: TestCluster) -> None:
    topic = unique("SparkEmpty")
    cluster.create_topic(topic, 2)
    empty = read(spark, cluster, topic)
    assert empty.count() == 0
    assert empty.collect() == []
    cluster.produce(orders(topic, 10))
    assert read(spark, cluster, topic).count() == 10
    nothing = '{"broker-a": {"0": -1, "1": -1}, "broker-b": {"0": -1, "1": -1}}'
    assert read(spark, cluster, topic, startingOffsets=nothing).count() == 0


def test_write_then_read_back_every_column(spark: Any, cluster: TestCluster) -> None:
    topic = unique("SparkWrite")
    other = unique("SparkWriteOther")
    cluster.create_topic(topic, 4)
    cluster.create_topic(other, 2)
    rows = [
        (
            f"payload-{i}".encode(),
            topic if i % 4 else other,
            "t1" if i % 2 else None,
            f"k{i} shared",
            {"n": str(i), "dropped": None},
        )
        for i in range(400)
    ]
    df = spark.createDataFrame(
        rows, "body binary, topic string, tags string, keys string, properties map<string,string>"
    ).repartition(3)
    df.write.format("rocketmq").option("namesrv", cluster.namesrv).mode("append").save()

    back = read(spark, cluster, topic).collect() + read(spark, cluster, other).collect()
    assert len(back) == 400
    for row in back:
        i = int(row.properties["n"])
        assert row.body == f"payload-{i}".encode()
        assert row.topic == (topic if i % 4 else other)
        assert row.tags == ("t1" if i % 2 else None)
        assert row.keys == f"k{i} shared"
        assert "dropped" not in row.properties  # null property values are not sent

    # String bodies, array keys, and the topic option instead of a column.
    strings = spark.createDataFrame(
        [(f"text-{i}", [f"a{i}", "b"]) for i in range(50)], "body string, keys array<string>"
    )
    target = unique("SparkWriteStrings")
    cluster.create_topic(target, 2)
    strings.write.format("rocketmq").option("namesrv", cluster.namesrv).option("topic", target).mode(
        "append"
    ).save()
    got = read(spark, cluster, target).collect()
    assert sorted(r.body.decode() for r in got) == sorted(f"text-{i}" for i in range(50))
    assert all(r.keys == f"a{r.body.decode()[5:]} b" for r in got)


def test_a_failed_send_fails_the_write_with_a_clear_error(spark: Any, cluster: TestCluster) -> None:
    # A read-only topic: the broker refuses every send to it.
    readonly = unique("SparkReadOnly")
    cluster.admin.create_topic(readonly, 2, perm=4)
    cluster.wait_for_route(readonly, None)
    df = spark.createDataFrame([(b"x",), (b"y",)], "body binary").coalesce(1)
    with pytest.raises(Exception) as info:
        df.write.format("rocketmq").option("namesrv", cluster.namesrv).option("topic", readonly).mode(
            "append"
        ).save()
    text = str(info.value)
    assert "RocketMQWriteError" in text
    assert f"sending 2 messages to topic(s) {readonly} failed after 0 were sent" in text

    # A row's topic that is not a valid name fails before anything is sent for it.
    bad = spark.createDataFrame([(b"x", "bad topic!")], "body binary, topic string")
    with pytest.raises(Exception) as info:
        bad.write.format("rocketmq").option("namesrv", cluster.namesrv).mode("append").save()
    assert "'bad topic!' is not a valid topic name" in str(info.value)
