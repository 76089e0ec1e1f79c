"""Which messages a delay level parks (tests written for surviving mutants of
broker/delay_levels.py): level 0 means no delay, a message without a level is left alone, and
neither a half message nor the half topic is ever delayed."""

from __future__ import annotations

from aiorocketmq.broker.delay_levels import DelayLevels
from aiorocketmq.protocol.codes import MessageSysFlag
from aiorocketmq.protocol.names import SCHEDULE_TOPIC, TRANS_HALF_TOPIC

LEVELS = DelayLevels([1000, 5000, 10_000])


def test_level_zero_is_no_delay_not_the_longest_one() -> None:
    """``DELAY=0`` sends the message as it is (a mutant parked it for the last level's delay)."""
    props = {"DELAY": "0"}
    assert LEVELS.park("T", 0, props, 0) is None
    assert "REAL_TOPIC" not in props


def test_a_message_without_a_level_is_not_parked() -> None:
    assert LEVELS.park("T", 3, {}, 0) is None
    assert LEVELS.park("T", 3, {"DELAY": ""}, 0) is None


def test_neither_a_half_message_nor_the_half_topic_is_delayed() -> None:
    """A prepared (half) message's delay applies once it is committed; the half topic itself
    never waits, whatever flag the message carries."""
    assert LEVELS.park("T", 0, {"DELAY": "2"}, int(MessageSysFlag.TRANSACTION_PREPARED)) is None
    assert LEVELS.park(TRANS_HALF_TOPIC, 0, {"DELAY": "2"}, 0) is None
    parked = LEVELS.park("T", 1, {"DELAY": "2"}, int(MessageSysFlag.TRANSACTION_COMMIT))
    assert parked is not None and (parked.topic, parked.queue_id) == (SCHEDULE_TOPIC, 1)
    assert parked.deliver_at - parked.store_timestamp == 5000
