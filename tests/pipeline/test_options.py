"""Option parsing, the planner's pure helpers and the error plumbing (no cluster, no Spark)."""

from __future__ import annotations

import importlib.machinery
import itertools
import logging
import os
import sys
import types
from collections.abc import Iterator
from dataclasses import replace

import pytest

from aiorocketmq.pipeline.options import (
    DataLossError,
    ReadOptions,
    RocketMQOptionError,
    Subscription,
    WriteOptions,
    one_line_errors,
    parse_expression,
)
from aiorocketmq.pipeline.planning import (
    Bounds,
    check_data_loss,
    from_json,
    is_internal_topic,
    partition_ranges,
    rate_limit,
    to_json,
)
from aiorocketmq.pipeline.reading import RangeSpec, _report_loss
from aiorocketmq.protocol.body import BrokerData, ClusterInfo, MessageQueue

BASE = {"namesrv": "127.0.0.1:9876", "topic": "Orders"}


def parse(streaming: bool | None = False, **extra: str) -> ReadOptions:
    return ReadOptions.parse({**BASE, **extra}, streaming=streaming)


def test_defaults_follow_kafka_earliest_for_batch_latest_for_streams() -> None:
    assert parse().starting == "earliest"
    assert parse(streaming=True).starting == "latest"
    options = parse(startingOffsets='{"broker-a": {"0": 5, "1": -2}}', endingOffsets='{"broker-a": {"0": 9}}')
    # One topic: the topic level of the JSON may be left out.
    assert options.starting == {"Orders": {"broker-a": {0: 5, 1: -2}}}
    assert options.ending == {"Orders": {"broker-a": {0: 9}}}
    assert parse(startingTimestamp="1700000000000").starting == 1_700_000_000_000
    assert parse(STARTINGOFFSETS="earliest").starting == "earliest"  # keys are case-insensitive


@pytest.mark.parametrize(
    ("extra", "option", "problem"),
    [
        ({"namesrv": ""}, "namesrv", "is required"),
        ({"topic": " "}, "topic", "is required (or one of subscribe, subscribePattern, assign)"),
        (
            {"subscribe": "A,B"},
            "subscribe",
            "give one of topic, subscribe, subscribePattern, assign, not topic and subscribe",
        ),
        ({"topic": "", "subscribe": " , "}, "subscribe", "names no topic"),
        ({"topic": "", "subscribe": "A,bad topic"}, "subscribe", "'bad topic' is not a valid topic name"),
        ({"topic": "", "subscribePattern": "Orders("}, "subscribePattern", "is not a regular expression"),
        ({"topic": "", "assign": '{"Orders": [0, 1]}'}, "assign", "a RocketMQ queue is a broker's queue"),
        ({"topic": "", "assign": '{"Orders": {"broker-a": []}}'}, "assign", "non-empty list of queue ids"),
        ({"topic": "", "assign": '{"Orders": {"broker-a": [-1]}}'}, "assign", "integers >= 0"),
        ({"topic": "", "assign": "Orders:0"}, "assign", "is not valid JSON"),
        (
            {"topic": "", "subscribe": "A,B", "startingOffsets": '{"broker-a": {"0": 1}}'},
            "startingOffsets",
            "name the topic of each queue",
        ),
        (
            {"topic": "", "subscribe": "A,B", "startingOffsets": '{"C": {"broker-a": {"0": 1}}}'},
            "startingOffsets",
            "names topic 'C', which the read does not cover ('A', 'B')",
        ),
        ({"maxOffsetsPerTrigger": "10"}, "maxOffsetsPerTrigger", "streaming reads only"),
        ({"maxRecordsPerPartition": "0"}, "maxRecordsPerPartition", "must be positive"),
        (
            {"maxRecordsPerPartition": "5", "maxMessagesPerPartition": "6"},
            "maxRecordsPerPartition",
            "Kafka's name for maxMessagesPerPartition, and the two disagree ('5' vs '6')",
        ),
        ({"minPartitions": "-3"}, "minPartitions", "must be positive"),
        ({"includeHeaders": "yes"}, "includeHeaders", "not 'true' or 'false'"),
        ({"namesrv": "localhost"}, "namesrv", "not a host:port"),
        ({"topic": "bad topic"}, "topic", "not a valid topic name"),
        ({"startingOffsets": "{broker"}, "startingOffsets", "valid JSON"),
        ({"startingOffsets": "[1, 2]"}, "startingOffsets", "non-empty object"),
        ({"startingOffsets": '{"b": {"x": 1}}'}, "startingOffsets", "queue id 'x'"),
        ({"startingOffsets": '{"b": {"0": "7"}}'}, "startingOffsets", "must be an integer"),
        ({"startingOffsets": '{"b": {"0": -5}}'}, "startingOffsets", "must be -2 (earliest)"),
        ({"endingOffsets": '{"b": {"0": -2}}'}, "endingOffsets", "must be -1 (latest) or >= 0"),
        ({"endingOffsets": "earliest"}, "endingOffsets", "not allowed"),
        ({"startingOffsets": "latest"}, "startingOffsets", "empty batch read"),
        ({"startingTimestamp": "yesterday"}, "startingTimestamp", "not milliseconds"),
        ({"startingTimestamp": "1", "startingOffsets": "earliest"}, "startingTimestamp", "not both"),
        ({"maxMessagesPerPartition": "0"}, "maxMessagesPerPartition", "must be positive"),
        ({"maxMessagesPerPartition": "many"}, "maxMessagesPerPartition", "not an integer"),
        ({"failOnDataLoss": "yes"}, "failOnDataLoss", "not 'true' or 'false'"),
        ({"maxMessagesPerTrigger": "10"}, "maxMessagesPerTrigger", "streaming reads only"),
        ({"consumerGroup": "g"}, "consumerGroup", "streaming reads only"),
        ({"tags": "a || "}, "tags", "not '*' or tags"),
        ({"sql": "seq > 'x'"}, "sql", "not a valid SQL92 filter"),
        ({"sql": "seq > 1", "tags": "a"}, "sql", "not both"),
        ({"startingOffset": "earliest"}, "startingoffset", "unknown source option"),
    ],
)
def test_bad_read_options_name_the_option_and_the_problem(
    extra: dict[str, str], option: str, problem: str
) -> None:
    with pytest.raises(RocketMQOptionError) as info:
        parse(**extra)
    assert info.value.option == option
    assert problem in str(info.value)
    assert str(info.value).startswith(f"rocketmq option '{option}'")


def test_stream_only_and_batch_only_options() -> None:
    with pytest.raises(RocketMQOptionError, match="endingOffsets"):
        parse(streaming=True, endingOffsets="latest")
    stream = parse(streaming=True, maxMessagesPerTrigger="100", consumerGroup="spark-orders")
    assert stream.max_per_trigger == 100 and stream.consumer_group == "spark-orders"
    # When Spark asks for the schema the kind of query is unknown: both kinds' options pass.
    either = parse(streaming=None, maxMessagesPerTrigger="100", endingOffsets="latest")
    assert either.max_per_trigger == 100


def test_subscriptions_and_kafka_option_names() -> None:
    assert parse().subscription == Subscription("topic", topics=("Orders",))
    subscribed = parse(topic="", subscribe=" A, B ,A,")
    assert subscribed.subscription.topics == ("A", "B")
    starting = '{"A": {"broker-a": {"0": 5}}, "B": {"broker-b": {"3": -1}}}'
    assert parse(topic="", subscribe="A,B", startingOffsets=starting).starting == {
        "A": {"broker-a": {0: 5}},
        "B": {"broker-b": {3: -1}},
    }
    pattern = parse(topic="", subscribePattern="Orders-.*").subscription.pattern
    assert pattern is not None and pattern.fullmatch("Orders-eu") and not pattern.fullmatch("OldOrders-eu")
    assigned = parse(topic="", assign='{"A": {"broker-a": [1, 0, 1], "broker-b": [2]}}').subscription
    assert assigned.queues == {"A": {"broker-a": (0, 1), "broker-b": (2,)}} and assigned.topics == ("A",)
    # Kafka's names, alone or agreeing with ours.
    stream = parse(streaming=True, maxOffsetsPerTrigger="100", maxMessagesPerTrigger=" 100")
    assert stream.max_per_trigger == 100
    batch = parse(
        maxRecordsPerPartition="50", minPartitions="8", includeHeaders="true", failOnDataLoss="false"
    )
    assert (batch.max_per_partition, batch.min_partitions, batch.include_headers) == (50, 8, True)
    assert not batch.fail_on_data_loss and not parse().include_headers


def test_tag_expressions() -> None:
    assert parse_expression("*") == ("*", None)
    assert parse_expression(" paid ||refunded ") == ("paid || refunded", frozenset({"paid", "refunded"}))


def test_sql_option_selects_an_sql92_subscription() -> None:
    options = parse(sql="region = 'r1'")
    assert (options.expression, options.expression_type, options.tags) == ("region = 'r1'", "SQL92", None)
    assert parse().expression_type == "TAG"


def test_write_options() -> None:
    assert WriteOptions.parse({"namesrv": "h:1"}).topic is None
    assert WriteOptions.parse({"namesrv": "h:1", "topic": "T", "producerGroup": "g"}).producer_group == "g"
    with pytest.raises(RocketMQOptionError, match="'namesrv': is required"):
        WriteOptions.parse({"topic": "T"})
    with pytest.raises(RocketMQOptionError, match="unknown sink option"):
        WriteOptions.parse({"namesrv": "h:1", "tags": "x"})


def q(broker: str, queue_id: int) -> MessageQueue:
    return MessageQueue(topic="T", broker_name=broker, queue_id=queue_id)


def test_offsets_json_round_trip_is_sorted_and_stable() -> None:
    other = MessageQueue(topic="S", broker_name="a", queue_id=0)
    offsets = {q("b", 1): 5, q("a", 10): 7, q("a", 2): 3, other: 1}
    as_json = to_json(offsets)
    assert list(as_json) == ["S", "T"] and list(as_json["T"]) == ["a", "b"]
    assert list(as_json["T"]["a"]) == ["2", "10"]
    assert from_json(as_json, Subscription("subscribe", topics=("S", "T"))) == offsets
    # A checkpoint written before offsets had a topic level resumes a one-topic read ...
    legacy = {"a": {"2": 3}, "b": {"1": 5}}
    assert from_json(legacy, Subscription("topic", topics=("T",))) == {q("a", 2): 3, q("b", 1): 5}
    # ... and no other.
    with pytest.raises(RocketMQOptionError, match="without its name"):
        from_json(legacy, Subscription("subscribe", topics=("S", "T")))


def test_partition_ranges() -> None:
    a, b, c = q("a", 0), q("a", 1), q("b", 0)

    def sizes(parts: list[tuple[MessageQueue, int, int]]) -> list[tuple[MessageQueue, int]]:
        return [(queue, hi - lo) for queue, lo, hi in parts]

    ranges = {a: (100, 1100), b: (0, 0), c: (5, 255)}
    # One partition per non-empty queue range by default.
    assert partition_ranges(ranges) == [(a, 100, 1100), (c, 5, 255)]
    # maxMessagesPerPartition: pieces of at most that many offsets, as even as can be.
    pieces = partition_ranges(ranges, max_size=300)
    assert sizes(pieces) == [(a, 250)] * 4 + [(c, 250)]
    # minPartitions: shares proportional to the ranges' sizes, tiling each range exactly.
    pieces = partition_ranges(ranges, min_count=10)
    assert sizes(pieces) == [(a, 125)] * 8 + [(c, 125)] * 2
    for queue in (a, c):
        mine = [(lo, hi) for qq, lo, hi in pieces if qq == queue]
        assert mine[0][0] == ranges[queue][0] and mine[-1][1] == ranges[queue][1]
        assert all(x[1] == y[0] for x, y in itertools.pairwise(mine))
    # Enough ranges already: minPartitions changes nothing; both options: the finer wins.
    assert partition_ranges(ranges, min_count=2) == partition_ranges(ranges)
    assert len(partition_ranges(ranges, max_size=100, min_count=3)) == 10 + 3


def test_rate_limit_shares_the_limit_by_backlog() -> None:
    start = {q("a", 0): 0, q("a", 1): 100}
    latest = {q("a", 0): 300, q("a", 1): 200, q("b", 0): 100}  # b:0 is new, starts at 0
    ends = rate_limit(start, latest, 100)
    taken = {k: ends[k] - start.get(k, 0) for k in ends}
    assert sum(taken.values()) == 100
    assert taken[q("a", 0)] == 60 and taken[q("a", 1)] == 20 and taken[q("b", 0)] == 20
    assert rate_limit(start, latest, 10_000) == latest


def test_skipped_data_loss_is_a_warning_and_otherwise_an_error(caplog: pytest.LogCaptureFixture) -> None:
    bounds = {q("a", 0): Bounds(100, 200), q("a", 1): Bounds(0, 50)}
    start = {q("a", 0): 40, q("a", 1): 0}
    with pytest.raises(DataLossError, match=r"offsets 40\.\.99 of queue a:0 \(topic 'T'\) were deleted"):
        check_data_loss(parse(), start, bounds, "option 'startingOffsets'")
    with caplog.at_level(logging.WARNING, logger="aiorocketmq.pipeline"):
        moved = check_data_loss(parse(failOnDataLoss="false"), start, bounds, "option 'startingOffsets'")
    assert moved == {q("a", 0): 100, q("a", 1): 0}
    assert [r.getMessage() for r in caplog.records] == [
        "rocketmq option 'startingOffsets': offsets 40..99 of queue a:0 (topic 'T') were deleted by retention; "
        "the earliest offset still stored is 100; reading from there (failOnDataLoss=false)"
    ]
    caplog.clear()
    spec = RangeSpec("h:1", "T", "a", 0, 40, 200, "*", None, fail_on_data_loss=False, pull_batch_size=32)
    with caplog.at_level(logging.WARNING, logger="aiorocketmq.pipeline"):
        _report_loss(spec, [(40, 100)])
    assert "offsets 40..99 of queue a:0 (topic 'T') were deleted by retention" in caplog.text
    with pytest.raises(DataLossError, match="failOnDataLoss=false"):
        _report_loss(replace(spec, fail_on_data_loss=True), [(40, 100)])


def test_internal_topics_never_match_a_pattern() -> None:
    cluster = ClusterInfo(brokerAddrTable={}, clusterAddrTable={"DefaultCluster": ["broker-a"]})
    cluster.broker_addr_table["broker-a"] = BrokerData(cluster="DefaultCluster", brokerName="broker-a")
    internal = [
        "%RETRY%g", "%DLQ%g", "RMQ_SYS_TRACE_TOPIC", "rmq_sys_wheel_timer", "TBW102", "SCHEDULE_TOPIC_XXXX",
        "BenchmarkTest", "OFFSET_MOVED_EVENT", "DefaultCluster", "DefaultCluster_REPLY_TOPIC", "broker-a",
    ]  # fmt: skip
    assert [t for t in internal if not is_internal_topic(t, cluster)] == []
    assert not is_internal_topic("Orders", cluster) and not is_internal_topic("broker-b-orders", cluster)


def test_our_errors_leave_a_pyspark_worker_without_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    """PySpark's worker prints only ``Class: message`` when SPARK_HIDE_TRACEBACK is set; the
    Spark tests check what users then see, this one which errors set it, and where."""

    @one_line_errors
    def fails(error: Exception) -> None:
        raise error

    @one_line_errors
    def rows(error: Exception) -> Iterator[int]:
        yield 1
        raise error

    monkeypatch.delenv("SPARK_HIDE_TRACEBACK", raising=False)
    # Outside a PySpark worker (here, pytest) nothing changes.
    with pytest.raises(RocketMQOptionError):
        fails(RocketMQOptionError("topic", "is required"))
    assert "SPARK_HIDE_TRACEBACK" not in os.environ
    # In a worker: a bug keeps its traceback; our errors, raised or met while iterating, do not.
    worker = types.ModuleType("__main__")
    worker.__spec__ = importlib.machinery.ModuleSpec("pyspark.daemon", None)
    monkeypatch.setitem(sys.modules, "__main__", worker)
    with pytest.raises(KeyError):
        fails(KeyError("bug"))
    assert "SPARK_HIDE_TRACEBACK" not in os.environ
    iterator = rows(DataLossError("gone"))
    assert next(iterator) == 1 and "SPARK_HIDE_TRACEBACK" not in os.environ
    with pytest.raises(DataLossError):
        next(iterator)
    assert os.environ["SPARK_HIDE_TRACEBACK"] == "1"
