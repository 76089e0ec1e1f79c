"""Bad input fails when the query starts, on the driver, with an error that names the option
and the problem: missing or malformed options, an unknown topic, an unreachable name server,
offsets deleted by retention (with and without ``failOnDataLoss``), and sink misuse."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException

from aiorocketmq.pipeline.options import RocketMQOptionError
from aiorocketmq.protocol.message import Message
from tests.pipeline.conftest import TestCluster, unique, wait_until


def reader(spark: Any, **options: str) -> Any:
    r = spark.read.format("rocketmq")
    for key, value in options.items():
        r = r.option(key, value)
    return r


def failure(action: Any) -> str:
    """The message of the error ``action()`` raises, checked to be no worker stack trace."""
    with pytest.raises(Exception) as info:
        action()
    text = str(info.value)
    assert "at org.apache.spark" not in text, text  # no Java stack trace
    assert "Executor" not in text and "Lost task" not in text, text
    assert "Traceback" not in text, text  # nor a Python one: the cause is on the first line
    return text


def first_line(text: str) -> str:
    return text.splitlines()[0]


def test_missing_and_malformed_options_fail_at_load(spark: Any, cluster: TestCluster) -> None:
    topic = unique("ErrTopic")
    cluster.create_topic(topic, 1)
    ns = cluster.namesrv
    cases = [
        ({"topic": topic}, "rocketmq option 'namesrv': is required"),
        ({"namesrv": ns}, "rocketmq option 'topic': is required"),
        (
            {"namesrv": ns, "topic": topic, "startingOffsets": '{"broker-a": {"0": 1}'},
            "rocketmq option 'startingOffsets': is neither 'earliest', 'latest' nor valid JSON",
        ),
        (
            {"namesrv": ns, "topic": topic, "endingOffsets": '{"broker-a": [1]}'},
            "rocketmq option 'endingOffsets': broker 'broker-a' must map to a non-empty object",
        ),
        ({"namesrv": ns, "topic": topic, "failOnDataLoss": "maybe"}, "rocketmq option 'failOnDataLoss'"),
    ]
    for options, message in cases:
        text = failure(lambda options=options: reader(spark, **options).load())
        assert first_line(text).startswith(
            "[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: "
            "aiorocketmq.pipeline.options.RocketMQOptionError: "
        )
        assert message in first_line(text)
    # Same for streams.
    text = failure(lambda: spark.readStream.format("rocketmq").option("namesrv", ns).load())
    assert "rocketmq option 'topic': is required" in text


def test_options_of_the_other_query_kind_fail_the_stream_as_it_starts(
    spark: Any, cluster: TestCluster
) -> None:
    topic = unique("ErrKind")
    cluster.create_topic(topic, 1)
    df = (
        spark.readStream.format("rocketmq")
        .option("namesrv", cluster.namesrv)
        .option("topic", topic)
        .option("endingOffsets", "latest")
        .load()
    )
    query = df.writeStream.format("noop").start()
    with pytest.raises(StreamingQueryException) as info:
        query.awaitTermination(60)
    assert "rocketmq option 'endingOffsets': is for batch reads only; a stream has no end" in first_line(
        str(info.value)
    )
    assert "Traceback" not in str(info.value)
    text = failure(
        lambda: reader(spark, namesrv=cluster.namesrv, topic=topic, consumerGroup="g").load().count()
    )
    assert "rocketmq option 'consumerGroup': is for streaming reads only" in text


def test_unknown_topic_and_unknown_queues_fail_at_load(spark: Any, cluster: TestCluster) -> None:
    missing = unique("NoSuchTopic")
    text = failure(lambda: reader(spark, namesrv=cluster.namesrv, topic=missing).load())
    assert f"rocketmq option 'topic': topic '{missing}' does not exist" in text
    text = failure(
        lambda: (
            spark.readStream.format("rocketmq")
            .option("namesrv", cluster.namesrv)
            .option("topic", missing)
            .load()
        )
    )
    assert f"topic '{missing}' does not exist" in text

    topic = unique("ErrQueues")
    cluster.create_topic(topic, 1, broker="broker-a")
    df = reader(spark, namesrv=cluster.namesrv, topic=topic, startingOffsets='{"broker-z": {"0": 0}}').load()
    text = failure(df.count)
    assert (
        f"rocketmq option 'startingOffsets': names queue broker-z:0 of topic '{topic}', which the read"
        in (first_line(text))
    )


def test_unreachable_name_server_fails_at_load(spark: Any, dead_address: str) -> None:
    addr = dead_address
    text = failure(lambda: reader(spark, namesrv=addr, topic="Anything").load())
    assert f"rocketmq option 'namesrv': cannot reach the name server at '{addr}'" in text


def test_sink_misuse_fails_when_the_write_starts(spark: Any, cluster: TestCluster) -> None:
    ns = cluster.namesrv
    topic = unique("ErrSink")
    cluster.create_topic(topic, 1)
    no_body = spark.createDataFrame([("x",)], "payload string")
    text = failure(
        lambda: (
            no_body.write.format("rocketmq")
            .option("namesrv", ns)
            .option("topic", topic)
            .mode("append")
            .save()
        )
    )
    assert "rocketmq option 'schema': column 'payload' is not a sink column" in text
    bad_type = spark.createDataFrame([(1,)], "body int")
    text = failure(
        lambda: (
            bad_type.write.format("rocketmq")
            .option("namesrv", ns)
            .option("topic", topic)
            .mode("append")
            .save()
        )
    )
    assert "column 'body' must be binary or string, not int" in text
    no_topic = spark.createDataFrame([(b"x",)], "body binary")
    text = failure(lambda: no_topic.write.format("rocketmq").option("namesrv", ns).mode("append").save())
    assert "rocketmq option 'topic': set the topic option or give the rows a 'topic' column" in text
    text = failure(
        lambda: (
            no_topic.write.format("rocketmq")
            .option("namesrv", ns)
            .option("topic", topic)
            .mode("overwrite")
            .save()
        )
    )
    assert "rocketmq option 'mode': the rocketmq sink only appends" in text
    text = failure(lambda: no_topic.write.format("rocketmq").option("topic", topic).mode("append").save())
    assert "rocketmq option 'namesrv': is required" in text


@pytest.fixture(scope="module")
def small_files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestCluster]:
    """A cluster of its own whose broker rolls its commit log every 64 KiB, so that retention
    can delete old messages."""
    started = TestCluster(
        tmp_path_factory.mktemp("retention"), ("broker-a",), mappedFileSizeCommitLog=64 * 1024
    )
    try:
        yield started
    finally:
        started.stop()


def test_offsets_deleted_by_retention(spark: Any, small_files: TestCluster, tmp_path: Path) -> None:
    cluster = small_files
    topic = unique("Retention")
    cluster.create_topic(topic, 1)
    queue = cluster.admin.queues(topic)[0]
    body = b"r" * 1000

    def send(first: int, count: int) -> None:
        cluster.producer.send_batch(
            [Message(topic, body, properties={"n": str(i)}) for i in range(first, first + count)], queue=queue
        )

    # A stream reads the first 50 messages and commits its checkpoint.
    checkpoint = tmp_path / "checkpoint"
    out = tmp_path / "out"
    send(0, 50)

    def run_stream(**options: str) -> Any:
        stream = (
            spark.readStream.format("rocketmq")
            .option("namesrv", cluster.namesrv)
            .option("topic", topic)
            .option("startingOffsets", "earliest")
        )
        for key, value in options.items():
            stream = stream.option(key, value)
        query = (
            stream.load()
            .selectExpr("properties['n'] as n")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination(120)
        except StreamingQueryException:
            pass  # the test reads query.exception()
        return query

    assert run_stream().exception() is None
    # Then 300 more (about 5 commit-log files) arrive, and retention deletes all files but
    # the last: the stream's next offsets are gone.
    for first in range(50, 350, 50):
        send(first, 50)
    cluster.delete_files("broker-a")
    wait_until(lambda: cluster.admin.min_offset(queue) > 50, timeout=30)
    lost_up_to = cluster.admin.min_offset(queue)

    # Batch read of explicit offsets: an error naming the option, before any task runs.
    df = reader(spark, namesrv=cluster.namesrv, topic=topic, startingOffsets='{"broker-a": {"0": 0}}').load()
    text = failure(df.count)
    assert "DataLossError" in text
    assert f"rocketmq option 'startingOffsets': offsets 0..{lost_up_to - 1} of queue broker-a:0" in text
    assert "deleted by retention" in text and "failOnDataLoss=false" in text
    # Without failOnDataLoss the read starts at the first offset still stored.
    kept = reader(
        spark,
        namesrv=cluster.namesrv,
        topic=topic,
        startingOffsets='{"broker-a": {"0": 0}}',
        failOnDataLoss="false",
    ).load()
    assert sorted(r.queue_offset for r in kept.select("queue_offset").collect()) == list(
        range(lost_up_to, 350)
    )

    # The stream, restarted from its checkpoint, fails the same way ...
    query = run_stream()
    error = query.exception()
    assert error is not None
    assert "DataLossError: rocketmq stream (offsets of its last micro-batch): " in first_line(str(error))
    assert f"offsets 50..{lost_up_to - 1} of queue broker-a:0" in first_line(str(error))
    # ... or, without failOnDataLoss, skips to what is still stored.
    assert run_stream(failOnDataLoss="false").exception() is None
    seen = sorted(int(r.n) for r in spark.read.parquet(str(out)).collect())
    assert seen == list(range(50)) + list(range(lost_up_to, 350))


def test_option_errors_are_value_errors_with_the_option_name() -> None:
    error = RocketMQOptionError("topic", "is required")
    assert isinstance(error, ValueError)
    assert (error.option, error.problem, str(error)) == (
        "topic",
        "is required",
        "rocketmq option 'topic': is required",
    )
