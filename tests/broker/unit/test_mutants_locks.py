"""Queue locks on a held clock: the exact expiry of ``rebalanceLockMaxLiveTime`` and the
queries of groups that hold nothing (tests written for surviving mutants of broker/locks.py)."""

from __future__ import annotations

import pytest

from aiorocketmq.broker import locks as locks_module
from aiorocketmq.broker.locks import QueueLocks
from aiorocketmq.protocol.body import MessageQueue

MQ = MessageQueue(topic="T", broker_name="b", queue_id=0)


class HeldClock:
    """Stands in for the ``time`` module of broker/locks.py: ``monotonic`` is what the test sets."""

    def __init__(self, now: float) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> HeldClock:
    held = HeldClock(1000.0)
    monkeypatch.setattr(locks_module, "time", held)
    return held


def test_a_lock_lives_exactly_sixty_seconds_by_default(clock: HeldClock) -> None:
    """Apache's RebalanceLockManager: a lock is expired only once more than 60,000 ms have passed
    since it was taken or renewed; at exactly 60 s it still belongs to its holder, just after it
    goes to whoever asks."""
    locks = QueueLocks()
    assert locks.try_lock("g", [MQ], "c1") == [MQ]
    clock.now = 1060.0  # exactly max_live
    assert locks.holder("g", MQ) == "c1"
    assert locks.try_lock("g", [MQ], "c2") == []
    clock.now = 1060.0005  # half a millisecond more
    assert locks.holder("g", MQ) is None
    assert locks.try_lock("g", [MQ], "c2") == [MQ]
    assert locks.holder("g", MQ) == "c2"


def test_a_configured_max_live_is_in_milliseconds(clock: HeldClock) -> None:
    """``rebalanceLockMaxLiveTime`` is given in milliseconds: 1,500 ms hold a lock for 1.5 s."""
    locks = QueueLocks(max_live_ms=1500)
    assert locks.try_lock("g", [MQ], "c1") == [MQ]
    clock.now = 1001.5
    assert locks.try_lock("g", [MQ], "c2") == []
    clock.now = 1001.501
    assert locks.try_lock("g", [MQ], "c2") == [MQ]


def test_a_renewal_restarts_the_lock_s_life(clock: HeldClock) -> None:
    """A holder renewing its lock at 50 s keeps it until 60 s after the renewal."""
    locks = QueueLocks()
    assert locks.try_lock("g", [MQ], "c1") == [MQ]
    clock.now = 1050.0
    assert locks.try_lock("g", [MQ], "c1") == [MQ]
    clock.now = 1110.0
    assert locks.try_lock("g", [MQ], "c2") == []
    clock.now = 1110.001
    assert locks.try_lock("g", [MQ], "c2") == [MQ]


def test_no_holder_in_a_group_that_never_locked_or_released_everything(clock: HeldClock) -> None:
    """Asking who holds a queue of a group with no locks (never taken, or all released) says nobody."""
    locks = QueueLocks()
    assert locks.holder("never", MQ) is None
    assert locks.try_lock("g", [MQ], "c1") == [MQ]
    locks.unlock("g", [MQ], "c1")
    assert locks.holder("g", MQ) is None
    assert locks.try_lock("g", [MQ], "c2") == [MQ]
