"""Topic attribute modifications (``+key=value,-key``): parsing as Apache's tools do, and the
rules a topic's attributes change by (create adds only, unchangeable keys stay, known values)."""

from __future__ import annotations

import re

import pytest

from aiorocketmq.protocol.topic_attributes import (
    AttributeRefused,
    apply,
    format_modification,
    parse_modification,
    sets_mixed,
)


def test_a_modification_string_parses_to_signed_keys_and_back() -> None:
    text = "+message.type=FIFO,-queue.type"
    parsed = parse_modification(text)
    assert parsed == {"+message.type": "FIFO", "-queue.type": ""}
    assert format_modification(parsed) == text
    assert parse_modification("") == parse_modification(None) == {}
    assert parse_modification("+message.type=FIFO=x") == {"+message.type": "FIFO"}, "Apache drops the rest"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("message.type=FIFO", "add/alter attribute format is wrong: message.type"),
        ("queue.type", "delete attribute format is wrong: queue.type"),
        ("+a=1,+a=2", "key duplication: +a"),
    ],
)
def test_malformed_modifications_are_refused_with_the_reason(text: str, problem: str) -> None:
    with pytest.raises(AttributeRefused, match=re.escape(problem)):
        parse_modification(text)


def test_a_new_topic_takes_added_attributes_only() -> None:
    assert apply(None, {"+message.type": "FIFO", "+queue.type": "SimpleCQ"}) == {
        "message.type": "FIFO",
        "queue.type": "SimpleCQ",
    }
    with pytest.raises(AttributeRefused, match="only add attribute is supported while creating topic"):
        apply(None, {"-message.type": ""})


def test_an_existing_topic_adds_updates_and_deletes_changeable_keys() -> None:
    current = {"message.type": "FIFO", "queue.type": "SimpleCQ"}
    assert apply(current, {"+message.type": "DELAY"}) == {"message.type": "DELAY", "queue.type": "SimpleCQ"}
    assert apply(current, {"-message.type": ""}) == {"queue.type": "SimpleCQ"}
    assert apply(current, {}) == current
    assert current == {"message.type": "FIFO", "queue.type": "SimpleCQ"}, "the current map was changed"


@pytest.mark.parametrize(
    ("current", "modification", "problem"),
    [
        ({"queue.type": "SimpleCQ"}, {"+queue.type": "SimpleCQ"}, "unchangeable attribute. key: queue.type"),
        ({"queue.type": "SimpleCQ"}, {"-queue.type": ""}, "unchangeable attribute. key: queue.type"),
        ({}, {"+cleanup.policy": "DELETE"}, "unchangeable attribute. key: cleanup.policy"),
        ({}, {"-message.type": ""}, "attempt to delete a nonexistent key: message.type"),
        ({}, {"+colour": "red"}, "unsupported key: colour"),
        ({}, {"+message.type": "URGENT"}, "value is not in set"),
        ({}, {"+message.type": "FIFO", "-message.type": ""}, "alter duplication key. key: message.type"),
        ({}, {"*message.type": "FIFO"}, "wrong format key: message.type"),
        ({}, {"+a-b": "1"}, "kv string format wrong."),
        ({}, {"++a": "1"}, "kv string format wrong."),
        ({}, {"+": "1"}, "kv string format wrong."),
        (
            {},
            {"+message.type": "URGENT"},
            "value is not in set: [DELAY, FIFO, MIXED, NORMAL, TRANSACTION, UNSPECIFIED]",
        ),
    ],
)
def test_changes_apache_refuses_are_refused_with_its_words(
    current: dict[str, str], modification: dict[str, str], problem: str
) -> None:
    with pytest.raises(AttributeRefused) as refused:
        apply(current, modification)
    assert problem in str(refused.value)
    if problem.endswith((".", "]")):  # the whole message
        assert str(refused.value) == problem


@pytest.mark.parametrize(
    ("modification", "problem"),
    [
        ({"+queue.type": "BatchCQ"}, "no batch consume queue"),
        ({"+cleanup.policy": "COMPACTION"}, "no compaction store"),
        ({"+reserve.time": "3600"}, "^Update topic reserveTime not supported$"),
    ],
)
def test_values_this_broker_cannot_honour_are_refused_not_ignored(
    modification: dict[str, str], problem: str
) -> None:
    with pytest.raises(AttributeRefused, match=problem):
        apply(None, modification)


def test_mixed_is_told_apart() -> None:
    assert sets_mixed({"+message.type": "MIXED"})
    assert not sets_mixed({"+message.type": "FIFO"}) and not sets_mixed({})
    assert apply(None, {"+message.type": "MIXED"}) == {"message.type": "MIXED"}
