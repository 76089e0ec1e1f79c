"""RocketMQ's reserved names and naming rules (protocol/names.py): pure functions."""

from __future__ import annotations

import pytest

from aiorocketmq.protocol.message import java_hash
from aiorocketmq.protocol.names import (
    NOT_ALLOWED_SEND_TOPICS,
    SCHEDULE_TOPIC,
    TRANS_HALF_TOPIC,
    dlq_topic,
    group_name_problem,
    group_of_retry_topic,
    is_dlq_topic,
    is_retry_topic,
    is_subscribe_all,
    parse_tag_expression,
    retry_topic,
    tag_codes,
    topic_name_problem,
)


def test_retry_and_dead_letter_topics_of_a_group() -> None:
    assert retry_topic("G") == "%RETRY%G" and dlq_topic("G") == "%DLQ%G"
    assert is_retry_topic("%RETRY%G") and not is_retry_topic("%DLQ%G")
    assert is_dlq_topic("%DLQ%G") and not is_dlq_topic("G")
    assert group_of_retry_topic(retry_topic("orders_cg")) == "orders_cg"
    assert {SCHEDULE_TOPIC, TRANS_HALF_TOPIC} <= NOT_ALLOWED_SEND_TOPICS


@pytest.mark.parametrize("name", ["Orders_1-x", "%RETRY%g", "a|b", "x" * 127])
def test_valid_topic_names(name: str) -> None:
    assert topic_name_problem(name) is None


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("", "the topic name is empty"),
        ("   ", "the topic name is empty"),
        (None, "the topic name is empty"),
        ("x" * 128, "is longer than 127 characters"),
        ("bad topic", "contains characters other than"),
        ("dot.ted", "contains characters other than"),
    ],
)
def test_invalid_topic_names(name: object, problem: str) -> None:
    assert problem in (topic_name_problem(name) or "")


def test_group_names_may_be_longer_than_topics() -> None:
    assert group_name_problem("g" * 255) is None
    assert "longer than 255" in (group_name_problem("g" * 256) or "")
    assert "contains characters other than" in (group_name_problem("my group") or "")


def test_tag_expressions() -> None:
    for every in (None, "", "  ", "*", " * "):
        assert parse_tag_expression(every) == [] and is_subscribe_all(every) and tag_codes(every) is None
    assert parse_tag_expression(" b || a ||b|| ") == ["b", "a"]
    assert not is_subscribe_all("|| ||") and parse_tag_expression("|| ||") == []
    assert tag_codes("a || b") == frozenset({java_hash("a"), java_hash("b")})
