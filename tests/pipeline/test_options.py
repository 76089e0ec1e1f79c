"""Option parsing and the planner's pure helpers (no cluster, no Spark)."""

from __future__ import annotations

import itertools

import pytest

from aiorocketmq.pipeline.options import ReadOptions, RocketMQOptionError, WriteOptions, parse_expression
from aiorocketmq.pipeline.planning import from_json, rate_limit, split_ranges, to_json
from aiorocketmq.protocol.body import MessageQueue

BASE = {"namesrv": "127.0.0.1:9876", "topic": "Orders"}


def parse(streaming: bool | None = False, **extra: str) -> ReadOptions:
    return ReadOptions.parse({**BASE, **extra}, streaming=streaming)


def test_defaults_follow_kafka_earliest_for_batch_latest_for_streams() -> None:
    assert parse().starting == "earliest"
    assert parse(streaming=True).starting == "latest"
    options = parse(startingOffsets='{"broker-a": {"0": 5, "1": -2}}', endingOffsets='{"broker-a": {"0": 9}}')
    assert options.starting == {"broker-a": {0: 5, 1: -2}}
    assert options.ending == {"broker-a": {0: 9}}
    assert parse(startingTimestamp="1700000000000").starting == 1_700_000_000_000
    assert parse(STARTINGOFFSETS="earliest").starting == "earliest"  # keys are case-insensitive


@pytest.mark.parametrize(
    ("extra", "option", "problem"),
    [
        ({"namesrv": ""}, "namesrv", "is required"),
        ({"topic": " "}, "topic", "is required"),
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
    offsets = {q("b", 1): 5, q("a", 10): 7, q("a", 2): 3}
    as_json = to_json(offsets)
    assert list(as_json) == ["a", "b"] and list(as_json["a"]) == ["2", "10"]
    assert from_json("T", as_json) == offsets


def test_split_ranges() -> None:
    assert split_ranges(0, 10, None) == [(0, 10)]
    assert split_ranges(5, 5, 3) == []
    assert split_ranges(0, 10, 3) == [(0, 3), (3, 6), (6, 9), (9, 10)]
    pieces = split_ranges(100, 1100, 300)
    assert pieces[0][0] == 100 and pieces[-1][1] == 1100 and all(hi - lo <= 300 for lo, hi in pieces)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(pieces))


def test_rate_limit_shares_the_limit_by_backlog() -> None:
    start = {q("a", 0): 0, q("a", 1): 100}
    latest = {q("a", 0): 300, q("a", 1): 200, q("b", 0): 100}  # b:0 is new, starts at 0
    ends = rate_limit(start, latest, 100)
    taken = {k: ends[k] - start.get(k, 0) for k in ends}
    assert sum(taken.values()) == 100
    assert taken[q("a", 0)] == 60 and taken[q("a", 1)] == 20 and taken[q("b", 0)] == 20
    assert rate_limit(start, latest, 10_000) == latest
