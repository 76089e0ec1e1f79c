"""Delay levels delivered on a held clock (tests written for surviving mutants of
broker/delay.py): a message comes out at its delivery time exactly, a clock step backwards does
not hold it for longer than its level, a backlog longer than a batch goes out whole and in order,
a refused delivery is retried ten seconds later, a message gone or without a real topic is
skipped, an arrival wakes its own level, and the progress file is loaded clamped and written
every ``flushDelayOffsetInterval``.

The wall clock and the sleeps of broker/delay.py and broker/parked.py are held (:mod:`.held_clock`); the store, the
writer and the files are real."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from aiorocketmq.broker import delay as delay_module
from aiorocketmq.broker import parked as parked_module
from aiorocketmq.broker.store import StoreMessage
from aiorocketmq.protocol import fastjson
from aiorocketmq.protocol.body import DelayOffsetTable
from aiorocketmq.protocol.codes import PERM_READ_WRITE
from aiorocketmq.protocol.message import PropertyKey, encode_properties, pack_host
from aiorocketmq.protocol.names import SCHEDULE_TOPIC, TRANS_HALF_TOPIC

from .held_clock import EPOCH_MS, HeldClock
from .support import Parts, broker_parts

TOPIC = "HeldDelayTopic"
E = EPOCH_MS
BORN = pack_host("10.0.0.8", 4200)


def logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Each log line as an operator reads it."""
    return [record.getMessage() for record in caplog.records]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> HeldClock:
    held = HeldClock()
    monkeypatch.setattr(delay_module, "asyncio", held.asyncio)
    # The wall clock and the background tasks (delayOffset.json's) live in broker/parked.py.
    monkeypatch.setattr(parked_module, "time", held)
    monkeypatch.setattr(parked_module, "asyncio", held.asyncio)
    return held


@pytest.fixture
async def parts(tmp_path: Path, clock: HeldClock) -> AsyncIterator[Parts]:
    async with broker_parts(tmp_path) as built:
        built.topics.ensure(TOPIC, 4, PERM_READ_WRITE)
        yield built


def park(
    parts: Parts, body: bytes, deliver_at: int, level: int = 1, overrides: dict[str, str | None] | None = None
) -> int:
    """A message parked at ``level`` as the writer parks it (real topic and queue in its
    properties, its delivery time in the tags slot). Returns its commit-log offset."""
    props: dict[str, str | None] = {
        PropertyKey.DELAY_TIME_LEVEL: str(level),
        PropertyKey.REAL_TOPIC: TOPIC,
        PropertyKey.REAL_QUEUE_ID: "2",
        "custom": body.decode(),
    }
    props.update(overrides or {})
    kept = {k: v for k, v in props.items() if v is not None}
    msg = StoreMessage(
        topic=SCHEDULE_TOPIC,
        queue_id=level - 1,
        body=body,
        properties=encode_properties(kept),
        born_host=BORN,
        tags_code=deliver_at,
        store_timestamp=deliver_at - parts.delay.delays[level - 1],
    )
    result = parts.writer.put(msg)
    assert result.ok
    return result.wrote_offset


def delivered(parts: Parts, queue_id: int = 2) -> list[bytes]:
    return [m.body for m in parts.messages(TOPIC, queue_id)]


async def test_a_message_is_delivered_at_its_time_and_not_before(parts: Parts, clock: HeldClock) -> None:
    """At its delivery time exactly, under its real topic and queue, counted; not a
    millisecond earlier."""
    park(parts, b"m", E + 1_000)
    parts.delay.start()
    await clock.advance_to(E + 999)
    assert delivered(parts) == [] and parts.delay.offsets[1] == 0
    await clock.advance_to(E + 1_000)
    assert delivered(parts) == [b"m"]
    assert parts.delay.offsets[1] == 1 and parts.delay.delivered == 1
    (m,) = parts.messages(TOPIC, 2)
    assert m.properties["custom"] == "m" and PropertyKey.DELAY_TIME_LEVEL not in m.properties


async def test_a_delivery_time_further_than_its_level_is_a_clock_step_back(
    parts: Parts, clock: HeldClock
) -> None:
    """A level-2 (5 s) message due more than 5 s from now was parked before the wall clock
    stepped back: it goes now, not after the step. One due exactly 5 s ahead waits its 5 s."""
    park(parts, b"stepped", E + 5_001, level=2)
    park(parts, b"in-five", E + 5_000 + 1, level=3)  # level 3 is 10 s: not a step back
    park(parts, b"exact", E + 5_000, level=2)
    parts.delay.start()
    await clock.advance(0)
    assert delivered(parts) == [b"stepped"]
    await clock.advance_to(E + 4_999)
    assert delivered(parts) == [b"stepped"]
    await clock.advance_to(E + 5_001)
    assert sorted(delivered(parts)) == [b"exact", b"in-five", b"stepped"]


async def test_a_backlog_longer_than_a_batch_goes_out_whole_and_in_order(
    parts: Parts, clock: HeldClock
) -> None:
    """Seventy due messages of one level (more than two batches of 32): all delivered, in
    their order, the progress at the end of the queue."""
    bodies = [f"b{i:02}".encode() for i in range(70)]
    for body in bodies:
        park(parts, body, E - 1)
    parts.delay.start()
    await clock.advance(0)
    assert delivered(parts) == bodies
    assert parts.delay.offsets[1] == 70 and parts.delay.delivered == 70


async def test_an_arrival_wakes_its_own_level(parts: Parts, clock: HeldClock) -> None:
    """A level waiting on an empty queue delivers a due arrival at once, for the first level
    and the last; an arrival in another topic or a queue beyond the levels wakes nothing (and
    breaks nothing)."""
    parts.delay.start()
    await clock.advance(100)
    last = len(parts.delay.delays)
    park(parts, b"first", E + 100, level=1)
    park(parts, b"last", E + 100, level=last)
    await clock.settle()
    assert delivered(parts) == [b"first", b"last"]
    parts.delay.on_arrival(SCHEDULE_TOPIC, last, 1, 0)  # no such level: ignored
    parts.delay.on_arrival(SCHEDULE_TOPIC, -1, 1, 0)
    parts.delay.on_arrival(TOPIC, 0, 1, 0)
    await clock.settle()
    assert parts.delay.offsets[1] == 1 and parts.delay.offsets[last] == 1


async def test_a_refused_delivery_is_retried_ten_seconds_later(
    parts: Parts, clock: HeldClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A full disk refuses it: logged, the progress kept, tried again after 10 s (not before),
    then delivered once with the one behind it."""
    caplog.set_level(logging.WARNING, logger=delay_module.__name__)
    park(parts, b"a", E + 1_000)
    park(parts, b"b", E + 1_000)
    parts.delay.start()
    await clock.advance(500)
    parts.store.disk_full = True
    await clock.advance_to(E + 1_000)
    assert delivered(parts) == [] and parts.delay.offsets[1] == 0
    assert f"delivering delayed message to {TOPIC} failed: SERVICE_NOT_AVAILABLE" in logged(caplog)
    parts.store.disk_full = False
    await clock.advance_to(E + 10_999)
    assert delivered(parts) == []
    await clock.advance_to(E + 11_000)
    assert delivered(parts) == [b"a", b"b"]
    assert parts.delay.offsets[1] == 2 and parts.delay.delivered == 2


class ForgetfulStore:
    """The real store, except that the messages at ``lost`` commit-log offsets are gone."""

    def __init__(self, store: Any, lost: set[int]) -> None:
        self._store = store
        self.lost = lost

    def look_message(self, phy: int) -> Any:
        return None if phy in self.lost else self._store.look_message(phy)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


async def test_a_message_gone_from_the_commit_log_is_skipped_and_logged(
    parts: Parts, clock: HeldClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=delay_module.__name__)
    park(parts, b"before", E)
    gone = park(parts, b"gone", E)
    park(parts, b"after", E)
    parts.delay.store = ForgetfulStore(parts.store, {gone})  # type: ignore[assignment]
    parts.delay.start()
    await clock.advance(0)
    assert delivered(parts) == [b"before", b"after"]
    assert parts.delay.offsets[1] == 3 and parts.delay.delivered == 2
    assert f"delayed message at {gone} is gone; skipping it" in logged(caplog)


@pytest.mark.parametrize(
    "overrides",
    [
        {PropertyKey.REAL_TOPIC: None},
        {PropertyKey.REAL_QUEUE_ID: None},
        {PropertyKey.REAL_QUEUE_ID: "two"},
        {PropertyKey.REAL_TOPIC: TRANS_HALF_TOPIC},
    ],
    ids=["no-topic", "no-queue", "queue-not-a-number", "half-topic"],
)
async def test_a_message_without_a_usable_real_topic_and_queue_is_dropped_and_logged(
    parts: Parts, clock: HeldClock, caplog: pytest.LogCaptureFixture, overrides: dict[str, str | None]
) -> None:
    """Never retried, never stored as a half message; the next one goes out."""
    caplog.set_level(logging.WARNING, logger=delay_module.__name__)
    bad = park(parts, b"bad", E, overrides=overrides)
    park(parts, b"good", E)
    parts.delay.start()
    await clock.advance(0)
    assert delivered(parts) == [b"good"]
    assert parts.store.get_max_offset(TRANS_HALF_TOPIC, 0) == 0
    assert parts.delay.offsets[1] == 2 and parts.delay.delivered == 1
    assert f"delayed message at {bad} has no usable real topic/queue; dropped" in logged(caplog)


async def test_progress_is_written_every_flush_interval(
    parts: Parts, clock: HeldClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``flushDelayOffsetInterval`` (10 s by default): delayOffset.json gets every level's
    progress at each interval, not before."""
    file = parts.delay.file
    saves: list[tuple[int, dict[int, int]]] = []

    async def save(data: bytes) -> None:  # at once, on the loop: the held clock says when
        saves.append((clock.now_ms, DelayOffsetTable.model_validate(fastjson.loads(data)).offset_table))
        file.save_now(data)

    monkeypatch.setattr(file, "save", save)
    interval = parts.config.flush_delay_offset_interval
    park(parts, b"m", E + 1_000)
    parts.delay.start()
    await clock.advance_to(E + interval - 1)
    assert delivered(parts) == [b"m"] and saves == []
    await clock.advance_to(E + interval)
    levels = len(parts.delay.delays)
    assert saves == [(E + interval, {level: int(level == 1) for level in range(1, levels + 1)})]
    on_disk = (parts.config.config_dir / "delayOffset.json").read_bytes()  # Apache's file name
    assert DelayOffsetTable.model_validate(fastjson.loads(on_disk)).offset_table == saves[0][1]
    await clock.advance_to(E + 2 * interval)
    assert [when for when, _table in saves] == [E + interval, E + 2 * interval]


async def test_loaded_progress_is_kept_within_each_queue(parts: Parts, clock: HeldClock) -> None:
    """delayOffset.json's offsets are kept within [min, max] of each level's queue: one past
    the end comes back to the end; a level it does not name starts at the queue's start; every
    level has a progress; a delivered message is not delivered again."""
    park(parts, b"one", E, level=1)
    park(parts, b"two", E, level=1)
    park(parts, b"other", E, level=3)
    delay = parts.delay
    path = parts.config.config_dir / "delayOffset.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"offsetTable":{1:1,2:99}}')  # as Apache's fastjson writes it
    delay.offsets.clear()
    delay.load()
    assert delay.offsets == {level: 0 for level in range(1, len(delay.delays) + 1)} | {1: 1, 3: 0}
    delay.start()
    await clock.advance(0)
    assert delivered(parts) == [b"two", b"other"]


async def test_a_level_missing_from_the_progress_starts_at_its_queue_start(
    parts: Parts, clock: HeldClock
) -> None:
    """A slave adopting its master's table takes it whole, and the table may not name every
    level: such a level is delivered from the start of its queue, nothing skipped."""
    park(parts, b"one", E, level=1)
    park(parts, b"two", E, level=1)
    parts.delay.offsets = {2: 0}  # what the slave sync assigns
    parts.delay.start()
    await clock.advance(0)
    assert delivered(parts) == [b"one", b"two"]
    assert parts.delay.offsets[1] == 2


async def test_progress_behind_a_deleted_queue_head_moves_to_the_first_entry_left(
    parts: Parts, clock: HeldClock
) -> None:
    """Retention deleted the commit-log files under the head of a level's queue: loading and
    delivering both start at the first entry still there (not at an entry gone, not at 0)."""
    big = {"filler": "x" * 20_000}  # three to a 64 KB commit-log file
    for i in range(7):
        park(parts, f"m{i}".encode(), E + 60_000, level=1, overrides=dict(big))
    assert parts.store.delete_expired_files(force=True) > 0
    low = parts.store.get_min_offset(SCHEDULE_TOPIC, 0)
    assert 0 < low < 7
    parts.delay.offsets = {1: 0}
    parts.delay.load()  # as at start-up, from a table saying 0
    assert parts.delay.offsets[1] == low
    parts.delay.offsets = {1: 0}  # a master's table adopted after the deletion
    parts.delay.start()
    await clock.advance_to(E + 60_000)
    assert delivered(parts) == [f"m{i}".encode() for i in range(low, 7)]
    assert parts.delay.offsets[1] == 7
