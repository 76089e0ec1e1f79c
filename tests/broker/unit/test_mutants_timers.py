"""Timer messages on a held clock (tests written for surviving mutants of broker/timers.py):
when a parked message is released (at its millisecond: never before, and not later than the
wheel's one-millisecond margin), the wheel's slots further than a second away, a release the
store refuses (retried), a message gone or without a real topic, recalls, what a restart over
the checkpoint finds again, the checkpoint file itself, and what a producer is told when its
delivery time is refused.

The wall clock and the loop's timers of broker/timers.py and broker/parked.py are held (:mod:`.held_clock`): time
moves only by what a test says. The store, writer and files are real."""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from aiorocketmq.broker import parked as parked_module
from aiorocketmq.broker import timers as timers_module
from aiorocketmq.broker.store import StoreMessage
from aiorocketmq.broker.timers import TimerStore
from aiorocketmq.protocol.codes import (
    PERM_READ_WRITE,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
)
from aiorocketmq.protocol.errors import MessageIllegalError, ServerSystemError
from aiorocketmq.protocol.message import PropertyKey, encode_properties, pack_host
from aiorocketmq.protocol.names import TIMER_TOPIC

from .held_clock import EPOCH_MS, HeldClock
from .support import Parts, broker_parts

TOPIC = "HeldTimerTopic"
E = EPOCH_MS  # the held clock starts here, on a second boundary
BORN = pack_host("10.0.0.9", 4100)
#: A wheel that never finishes loading or advancing hangs the broker's event loop: such a test
#: fails here rather than waiting for the suite's timeout.
pytestmark = pytest.mark.timeout(20, method="signal")


def logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Each log line as an operator reads it."""
    return [record.getMessage() for record in caplog.records]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> HeldClock:
    held = HeldClock()
    monkeypatch.setattr(timers_module, "time", held)
    monkeypatch.setattr(timers_module, "asyncio", held.asyncio)
    # The wall clock and the background tasks they share live in broker/parked.py.
    monkeypatch.setattr(parked_module, "time", held)
    monkeypatch.setattr(parked_module, "asyncio", held.asyncio)
    return held


class Wheel:
    """The broker's timer store over real parts; :meth:`restart` builds a new one over the same
    store and files (what a broker restart finds), the old one left as a kill -9 leaves it."""

    def __init__(self, parts: Parts, root: Path, **settings: Any) -> None:
        self.parts = parts
        self.root = root
        self.settings = settings
        self.timers = self._new()
        parts.store.add_arrival_listener(lambda *arrival: self.timers.on_arrival(*arrival))

    def _new(self) -> TimerStore:
        timers = TimerStore(
            self.parts.store, self.parts.writer, self.root / "config" / "timercheck", **self.settings
        )
        self.parts.writer.timers = timers
        timers.load()
        return timers

    def restart(self) -> TimerStore:
        self.timers = self._new()
        return self.timers

    def park(self, body: bytes, props: dict[str, str]) -> StoreMessage:
        """What a send does: build (the timer store parks it) and put."""
        props = {PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: body.decode(), **props}
        msg = self.parts.writer.build(TOPIC, 0, body, props, born_host=BORN)
        assert self.parts.writer.put(msg).ok
        return msg

    def released(self, queue_id: int = 0) -> list[bytes]:
        return [m.body for m in self.parts.messages(TOPIC, queue_id)]


@pytest.fixture
async def wheel(tmp_path: Path, clock: HeldClock) -> AsyncIterator[Wheel]:
    async with broker_parts(tmp_path) as parts:
        parts.topics.ensure(TOPIC, 4, PERM_READ_WRITE)
        built = Wheel(parts, tmp_path)
        try:
            yield built
        finally:
            await built.timers.stop()


def at(ms: int) -> dict[str, str]:
    return {"TIMER_DELIVER_MS": str(ms)}


# -- release time ----------------------------------------------------------------------------


async def test_messages_due_within_a_second_are_released_at_their_millisecond(
    wheel: Wheel, clock: HeldClock
) -> None:
    """A release is never early and at most the wheel's 1 ms margin late; two messages due in
    the same millisecond go together; one due later waits for its own time (mutants moving
    the armed time, spinning on a timer armed too early, or releasing what is not due)."""
    wheel.timers.start()
    wheel.park(b"a", at(E + 300))
    wheel.park(b"b", at(E + 300))
    wheel.park(b"c", {"TIMER_DELAY_MS": "600"})  # relative to now (E): due at E + 600
    await clock.advance_to(E + 299)
    assert wheel.released() == []
    await clock.advance_to(E + 301)
    assert wheel.released() == [b"a", b"b"]
    await clock.advance_to(E + 599)
    assert wheel.released() == [b"a", b"b"]
    await clock.advance_to(E + 601)
    assert wheel.released() == [b"a", b"b", b"c"]
    (c,) = [m for m in wheel.parts.messages(TOPIC, 0) if m.body == b"c"]
    (parked_c,) = [m for m in wheel.parts.messages(TIMER_TOPIC, 0) if m.body == b"c"]
    assert int(c.properties["TIMER_DEQUEUE_MS"]) >= E + 600
    assert c.properties["TIMER_ENQUEUE_MS"] == str(parked_c.store_timestamp)
    # Released under its real topic once: a relative delay is not parked a second time.
    await clock.advance(5_000)
    assert wheel.released() == [b"a", b"b", b"c"]
    assert wheel.timers.pending == 0 and wheel.timers.released == 3


async def test_messages_further_than_a_second_wait_in_the_wheel_and_come_out_on_time(
    wheel: Wheel, clock: HeldClock
) -> None:
    """Slots of the wheel: two messages in one second (the later-parked one due first) and one
    in a later second are each released at their own millisecond, by the periodic advance
    (mutants losing a slot, keying it wrongly, not moving it into the due heap in time, or not
    arming the timer for it); ``pending`` counts down one by one."""
    wheel.timers.start()
    wheel.park(b"x", at(E + 5_500))
    wheel.park(b"y", at(E + 5_200))
    wheel.park(b"z", at(E + 7_100))
    assert wheel.timers.pending == 3
    await clock.advance_to(E + 5_199)
    assert wheel.released() == []
    await clock.advance_to(E + 5_201)
    assert wheel.released() == [b"y"] and wheel.timers.pending == 2
    assert wheel.timers.timing == {TOPIC: [2, E + 5_201]}  # GET_TIMER_METRICS: waiting per topic
    await clock.advance_to(E + 5_499)
    assert wheel.released() == [b"y"]
    await clock.advance_to(E + 5_501)
    assert wheel.released() == [b"y", b"x"] and wheel.timers.pending == 1
    assert wheel.timers.timing == {TOPIC: [1, E + 5_501]}
    await clock.advance_to(E + 7_099)
    assert wheel.released() == [b"y", b"x"]
    await clock.advance_to(E + 7_101)
    assert wheel.released() == [b"y", b"x", b"z"] and wheel.timers.pending == 0


async def test_a_message_due_before_the_armed_one_is_released_at_its_own_time(
    wheel: Wheel, clock: HeldClock
) -> None:
    """The timer armed for a later message is brought forward by an earlier one (mutants that
    keep the first timer, or lose the time it was armed for)."""
    wheel.timers.start()
    wheel.park(b"later", at(E + 800))
    await clock.advance_to(E + 100)
    wheel.park(b"sooner", at(E + 400))
    await clock.advance_to(E + 401)
    assert wheel.released() == [b"sooner"]
    await clock.advance_to(E + 801)
    assert wheel.released() == [b"sooner", b"later"]


# -- releases that cannot happen now --------------------------------------------------------


async def test_a_release_the_store_refuses_is_retried_on_its_own_until_stored(
    wheel: Wheel, clock: HeldClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A full disk refuses the release: it is logged, kept (the wheel reports how far behind it
    is), and retried 100 ms later on its own, going out once; a message parked while a retry
    is armed goes out with it, and nothing fails on the way (mutants dropping the failed one,
    not re-arming, or losing the time the retry is armed for)."""
    caplog.set_level(logging.WARNING)
    store = wheel.parts.store
    wheel.timers.start()
    wheel.park(b"a", at(E + 300))
    await clock.advance_to(E + 250)
    store.disk_full = True
    await clock.advance_to(E + 301)
    assert wheel.released() == [] and wheel.timers.pending == 1
    assert f"releasing timer message to {TOPIC} failed: SERVICE_NOT_AVAILABLE" in logged(caplog)
    await clock.advance_to(E + 350)
    assert wheel.timers.runtime_info()["timerReadBehind"] == "50"
    store.disk_full = False
    await clock.advance_to(E + 400)
    assert wheel.released() == []
    await clock.advance_to(E + 401)  # the retry, 100 ms after the failure
    assert wheel.released() == [b"a"] and wheel.timers.pending == 0

    wheel.park(b"c", at(E + 1_300))
    await clock.advance_to(E + 1_250)
    store.disk_full = True
    await clock.advance_to(E + 1_301)
    store.disk_full = False
    wheel.park(b"d", at(E + 1_380))  # parked while the retry is armed
    await clock.advance_to(E + 1_401)
    assert wheel.released() == [b"a", b"c", b"d"]
    assert wheel.timers.pending == 0 and wheel.timers.released == 3
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    await clock.advance(1_000)
    assert wheel.released() == [b"a", b"c", b"d"]


class ForgetfulStore:
    """The real store, except that the messages at ``lost`` commit-log offsets are gone (as
    after the commit log's files holding them were deleted)."""

    def __init__(self, store: Any, lost: set[int]) -> None:
        self._store = store
        self.lost = lost

    def look_message(self, phy: int) -> Any:
        return None if phy in self.lost else self._store.look_message(phy)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


async def test_a_message_gone_from_the_commit_log_is_skipped_and_logged(
    wheel: Wheel, clock: HeldClock, caplog: pytest.LogCaptureFixture
) -> None:
    """It counts as handled (not retried for ever) and is logged with where it was and when it
    was due; the next one goes out on time."""
    caplog.set_level(logging.WARNING, logger=timers_module.__name__)
    wheel.park(b"ahead", at(E + 9_000))  # so the gone one is not at commit-log offset 0
    wheel.park(b"gone", at(E + 300))
    wheel.park(b"kept", at(E + 500))
    (_, (gone_phy, _, _), _) = wheel.parts.store.read_consume_queue(TIMER_TOPIC, 0, 0, 3)
    wheel.timers.store = ForgetfulStore(wheel.parts.store, {gone_phy})  # type: ignore[assignment]
    wheel.timers.start()
    await clock.advance_to(E + 501)
    assert wheel.released() == [b"kept"]
    assert wheel.timers.pending == 1
    assert f"timer message at {gone_phy} (due {E + 300}) is gone; skipping it" in logged(caplog)


def put_raw_timer_entry(parts: Parts, deliver: int, **props: str) -> int:
    """A message straight into the timer log, as nothing of ours writes it (a producer sending
    to the system topic itself): its tags slot is the delivery time. Returns its commit-log offset."""
    props.setdefault("TIMER_OUT_MS", str(deliver))
    msg = StoreMessage(
        topic=TIMER_TOPIC,
        queue_id=0,
        body=b"raw",
        properties=encode_properties(props),
        tags_code=deliver,
        born_host=BORN,
    )
    result = parts.writer.put(msg)
    assert result.ok
    return result.wrote_offset


@pytest.mark.parametrize(
    "props",
    [
        {},
        {"REAL_TOPIC": TOPIC},
        {"REAL_QID": "1"},
        {"REAL_TOPIC": TOPIC, "REAL_QID": "one"},
    ],
    ids=["neither", "no-queue", "no-topic", "queue-not-a-number"],
)
async def test_an_entry_without_a_usable_real_topic_and_queue_is_dropped_and_logged(
    wheel: Wheel, clock: HeldClock, caplog: pytest.LogCaptureFixture, props: dict[str, str]
) -> None:
    """Nothing to store it under: dropped with an error naming where it was, never retried;
    the messages around it go out."""
    caplog.set_level(logging.WARNING, logger=timers_module.__name__)
    wheel.park(b"first", at(E + 200))
    phy = put_raw_timer_entry(wheel.parts, E + 300, **props)
    wheel.park(b"after", at(E + 400))
    wheel.timers.start()
    await clock.advance_to(E + 401)
    assert wheel.released() == [b"first", b"after"]
    assert wheel.timers.pending == 0
    assert f"timer message at {phy} has no usable real topic/queue; dropped" in logged(caplog)


# -- recalls ---------------------------------------------------------------------------------


async def test_a_recalled_message_and_its_marker_are_never_delivered(
    wheel: Wheel, clock: HeldClock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """RECALL_MESSAGE: the recalled message is dropped when it comes due (logged), its marker
    too, and the recall is forgotten (on disk as well) once the marker came due; another message
    of the same topic due at the same time still goes out, and a restart in between keeps the
    recall. GET_TIMER_METRICS' count per topic: a marker is one message less waiting."""
    caplog.set_level(logging.INFO, logger=timers_module.__name__)
    wheel.timers.start()
    wheel.park(b"recalled", at(E + 3_000))
    wheel.park(b"kept", at(E + 3_000))
    wheel.timers.recall(TOPIC, "recalled", E + 3_001, "pg", BORN)
    recalls = tmp_path / "config" / "timerRecalls.json"
    assert json.loads(recalls.read_text()) == {f"{TOPIC}+recalled": E + 3_001}
    (marker,) = [m for m in wheel.parts.messages(TIMER_TOPIC, 0) if "TIMER_DEL_UNIQKEY" in m.properties]
    assert marker.properties["TIMER_DEL_UNIQKEY"] == f"{TOPIC}+recalled"
    assert marker.properties[PropertyKey.PRODUCER_GROUP] == "pg"
    assert (marker.body, marker.properties["REAL_QID"], marker.born_host) == (b"0", "0", "10.0.0.9:4100")
    assert wheel.timers.timing[TOPIC] == [1, E]  # two parked, one recalled
    await wheel.timers.stop()
    timers = wheel.restart()
    assert timers.recalled == {f"{TOPIC}+recalled": E + 3_001}
    timers.start()
    await clock.advance_to(E + 3_002)
    assert wheel.released() == [b"kept"]
    assert timers.recalled == {} and json.loads(recalls.read_text()) == {}
    assert f"timer message {TOPIC}+recalled recalled: not delivered" in logged(caplog)
    assert timers.timing[TOPIC] == [0, E + 3_001]  # since the restart: "kept" released
    await clock.advance(5_000)
    assert wheel.released() == [b"kept"]


async def test_a_message_recalled_twice_is_dropped_and_neither_marker_delivered(
    wheel: Wheel, clock: HeldClock
) -> None:
    """A producer retrying its recall writes a second marker; the first one forgets the recall,
    the second finds nothing recalled and is still never delivered."""
    wheel.timers.start()
    wheel.park(b"m", at(E + 2_000))
    wheel.timers.recall(TOPIC, "m", E + 2_001, "pg", BORN)
    await clock.advance(10)
    wheel.timers.recall(TOPIC, "m", E + 2_001, "pg", BORN)
    await clock.advance_to(E + 4_000)
    assert wheel.released() == []
    assert wheel.timers.recalled == {} and wheel.timers.pending == 0


async def test_a_recall_drops_only_the_message_it_names(wheel: Wheel, clock: HeldClock) -> None:
    """Timer messages without a client id (UNIQ_KEY) are delivered while recalls of other
    messages wait, whatever those ids are."""
    wheel.timers.start()
    for unique_id in ("None", "XXXX", "other"):
        wheel.timers.recall(TOPIC, unique_id, E + 5_000, "pg", BORN)
    msg = wheel.parts.writer.build(TOPIC, 0, b"no-id", at(E + 1_000), born_host=BORN)
    assert wheel.parts.writer.put(msg).ok
    await clock.advance_to(E + 1_001)
    assert wheel.released() == [b"no-id"]


async def test_an_unreadable_recalls_file_is_logged(
    wheel: Wheel, clock: HeldClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A torn timerRecalls.json: the operator is told which file and why, and that recalled
    messages may be delivered; the wheel starts with nothing recalled."""
    caplog.set_level(logging.WARNING, logger=timers_module.__name__)
    path = wheel.root / "config" / "timerRecalls.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"T+u": 17')
    timers = wheel.restart()
    assert timers.recalled == {}
    (line,) = [m for m in logged(caplog) if m.startswith("timer recalls")]
    assert line.startswith(f"timer recalls {path} unreadable (Expecting")
    assert line.endswith("): recalled messages may be delivered")


async def test_a_recall_marker_that_cannot_be_stored_is_refused(wheel: Wheel, clock: HeldClock) -> None:
    """The recall fails (SYSTEM_ERROR) and nothing is remembered as recalled."""
    wheel.park(b"m", at(E + 3_000))
    wheel.parts.store.disk_full = True
    with pytest.raises(ServerSystemError) as refused:
        wheel.timers.recall(TOPIC, "m", E + 3_001, "", BORN)
    assert refused.value.remark == "recall failed, execute error"
    assert wheel.timers.recalled == {}


# -- restart over the checkpoint --------------------------------------------------------------


async def test_a_restart_finds_what_was_pending_and_not_what_was_released(
    wheel: Wheel, clock: HeldClock
) -> None:
    """After the checkpoint: the one released before it is not released again; the one waiting
    in the due heap (at the wheel's cursor exactly) and the one in a slot are released on time."""
    wheel.timers.start()
    wheel.park(b"far", at(E + 6_000))  # offset 0, a slot
    wheel.park(b"early", at(E + 300))  # offset 1, released before the checkpoint
    await clock.advance_to(E + 400)
    wheel.park(b"due", at(E + 900))  # offset 2, in the due heap at the checkpoint
    assert wheel.released() == [b"early"]
    await wheel.timers.stop()  # writes the checkpoint
    saved = json.loads((wheel.root / "config" / "timercheck").read_text())
    assert saved == {"cursorMs": E + 900, "scanFrom": 0, "enqueuedUpTo": 3}
    timers = wheel.restart()
    assert timers.pending == 2
    timers.start()
    await clock.advance_to(E + 899)
    assert wheel.released() == [b"early"]
    await clock.advance_to(E + 901)
    assert wheel.released() == [b"early", b"due"]
    await clock.advance_to(E + 6_001)
    assert wheel.released() == [b"early", b"due", b"far"]


async def test_a_restart_scans_from_the_first_entry_still_waiting(wheel: Wheel, clock: HeldClock) -> None:
    """The only one waiting is in the due heap: the checkpoint's scanFrom is its timer-log
    offset, and a restart finds it there."""
    wheel.timers.start()
    wheel.park(b"early", at(E + 300))
    wheel.park(b"due", at(E + 900))
    await clock.advance_to(E + 400)
    await wheel.timers.stop()
    saved = json.loads((wheel.root / "config" / "timercheck").read_text())
    assert saved == {"cursorMs": E + 900, "scanFrom": 1, "enqueuedUpTo": 2}
    timers = wheel.restart()
    assert timers.pending == 1
    timers.start()
    await clock.advance_to(E + 901)
    assert wheel.released() == [b"early", b"due"]


async def test_a_message_parked_after_the_last_checkpoint_survives_a_crash(
    wheel: Wheel, clock: HeldClock
) -> None:
    """The checkpoint's ``enqueuedUpTo`` entry itself was never seen by the wheel: after a
    kill -9 it is read and released although it is due before the saved cursor."""
    wheel.timers.start()
    wheel.park(b"far", at(E + 9_000))
    wheel.timers.checkpoint()  # nothing due soon: the cursor is the wheel's loaded-until time
    cursor = json.loads((wheel.root / "config" / "timercheck").read_text())["cursorMs"]
    wheel.park(b"new", at(E + 1_500))
    assert cursor > E + 1_500
    clock.kill()  # no stop, no checkpoint: the old wheel's timers never run again
    timers = wheel.restart()
    assert timers.pending == 2
    timers.start()
    await clock.advance_to(E + 1_501)
    assert wheel.released() == [b"new"]


async def test_a_restart_with_nothing_pending_finds_nothing(wheel: Wheel, clock: HeldClock) -> None:
    """Everything released, the checkpoint says so (scan from the end of the log) and a restart
    releases nothing again."""
    wheel.timers.start()
    wheel.park(b"one", at(E + 200))
    wheel.park(b"two", at(E + 300))
    await clock.advance_to(E + 301)
    await wheel.timers.stop()
    saved = json.loads((wheel.root / "config" / "timercheck").read_text())
    assert saved["scanFrom"] == saved["enqueuedUpTo"] == 2
    timers = wheel.restart()
    assert timers.pending == 0
    timers.start()
    await clock.advance(3_000)
    assert wheel.released() == [b"one", b"two"]


async def test_an_unreadable_checkpoint_means_reading_the_whole_timer_log(
    wheel: Wheel, clock: HeldClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Logged with the file and the reason; every entry of the log is pending again (at least
    once), and the count is logged."""
    caplog.set_level(logging.INFO, logger=timers_module.__name__)
    wheel.park(b"a", at(E + 5_000))
    wheel.park(b"b", at(E + 6_000))
    path = wheel.root / "config" / "timercheck"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"cursorMs": 1}')
    timers = wheel.restart()
    assert timers.pending == 2
    assert f"timer checkpoint {path} unreadable ('scanFrom'): reading the whole timer log" in logged(caplog)
    assert "timer store: 2 timer messages pending" in logged(caplog)


async def test_the_checkpoint_record_is_whole_numbers_on_any_clock(tmp_path: Path, clock: HeldClock) -> None:
    """GET_TIMER_CHECK_POINT's 56 bytes: the cursor (loaded at a time that is not a whole
    second, the wheel still starts on a second boundary), the timer log's flush position in
    20-byte entries, its offset (ours and the master's), the state version 0, the time and the
    released count, each a Java long."""
    clock.ns += 250_000_000  # E + 250 ms
    async with broker_parts(tmp_path) as parts:
        parts.topics.ensure(TOPIC, 1, PERM_READ_WRITE)
        wheel = Wheel(parts, tmp_path)
        wheel.park(b"a", at(E + 5_000))
        wheel.park(b"b", at(E + 6_000))
        record = wheel.timers.checkpoint_record()
        assert len(record) == 56
        assert struct.unpack(">7q", record) == (E, 40, 2, 2, 0, E + 250, 0)


# -- the checkpoint file -------------------------------------------------------------------


async def test_the_checkpoint_is_written_every_second_while_something_changes_and_not_when_idle(
    wheel: Wheel, clock: HeldClock
) -> None:
    """The periodic checkpoint writes what changed within a second, and an idle wheel does not
    rewrite the file every second (a write and a rename each time, only for the cursor of an
    empty range to move)."""
    path = wheel.root / "config" / "timercheck"
    wheel.timers.start()
    wheel.park(b"a", at(E + 5_000))
    await clock.advance(1_000)
    assert json.loads(path.read_text())["enqueuedUpTo"] == 1
    await clock.advance(1_000)
    wheel.park(b"b", at(E + 8_000))
    await clock.advance(1_000)
    assert json.loads(path.read_text())["enqueuedUpTo"] == 2
    await clock.advance_to(E + 8_001)  # both released: the checkpoint says so once
    assert wheel.released() == [b"a", b"b"]
    await clock.advance(1_000)
    idle = json.loads(path.read_text())
    assert idle["scanFrom"] == idle["enqueuedUpTo"] == 2
    await clock.advance(3_000)  # only the clock moves: the file stays as it is
    assert json.loads(path.read_text()) == idle


async def test_the_recalls_and_checkpoint_files_are_created_with_their_directory(
    tmp_path: Path, clock: HeldClock
) -> None:
    """Its files in a directory that does not exist yet (parents too): a recall, a checkpoint,
    then again into it."""
    async with broker_parts(tmp_path) as parts:
        parts.topics.ensure(TOPIC, 1, PERM_READ_WRITE)
        path = tmp_path / "fresh" / "config" / "timercheck"
        timers = TimerStore(parts.store, parts.writer, path)
        parts.writer.timers = timers
        parts.store.add_arrival_listener(timers.on_arrival)
        timers.load()
        timers.recall(TOPIC, "u", E + 5_000, "pg", BORN)  # its file is the first one there
        assert json.loads((path.parent / "timerRecalls.json").read_text()) == {f"{TOPIC}+u": E + 5_000}
        timers.checkpoint()
        assert json.loads(path.read_text())["enqueuedUpTo"] == 1
        assert parts.writer.put(parts.writer.build(TOPIC, 0, b"m", at(E + 5_000))).ok
        timers.checkpoint()
        assert json.loads(path.read_text())["enqueuedUpTo"] == 2


async def test_a_checkpoint_that_cannot_be_written_is_logged_and_tried_again(
    wheel: Wheel, clock: HeldClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The periodic checkpoint survives an OSError (logged with the reason) and keeps going."""
    caplog.set_level(logging.WARNING, logger=timers_module.__name__)
    blocker = (wheel.root / "config" / "timercheck").with_suffix(".tmp")
    blocker.mkdir(parents=True)  # where the new checkpoint is written first
    wheel.timers.start()
    wheel.park(b"m", at(E + 9_000))
    await clock.advance(1_000)
    assert f"cannot write the timer checkpoint: [Errno 21] Is a directory: '{blocker}'" in logged(caplog)
    caplog.clear()
    await clock.advance(1_000)
    assert f"cannot write the timer checkpoint: [Errno 21] Is a directory: '{blocker}'" in logged(caplog)
    blocker.rmdir()
    await clock.advance(1_000)
    assert json.loads((wheel.root / "config" / "timercheck").read_text())["enqueuedUpTo"] == 1


# -- what a producer is told --------------------------------------------------------------------


def parked_time(wheel: Wheel, **props: str) -> int | None:
    """The delivery time the timer store gives a message with these properties (None: not parked)."""
    msg = wheel.parts.writer.build(TOPIC, 0, b"m", dict(props))
    return msg.tags_code if msg.topic == TIMER_TOPIC else None


async def test_which_delivery_time_wins_when_a_message_names_several(wheel: Wheel, clock: HeldClock) -> None:
    """As Apache's HookUtils: TIMER_DELAY_SEC, then TIMER_DELAY_MS, then TIMER_DELIVER_MS; the
    4.x ``__STARTDELIVERTIME`` only when none of those is there."""
    every = {
        "TIMER_DELAY_SEC": "3",
        "TIMER_DELAY_MS": "5000",
        "TIMER_DELIVER_MS": str(E + 7_000),
        "__STARTDELIVERTIME": str(E + 9_000),
    }
    assert parked_time(wheel, **every) == E + 3_000
    del every["TIMER_DELAY_SEC"]
    assert parked_time(wheel, **every) == E + 5_000
    del every["TIMER_DELAY_MS"]
    assert parked_time(wheel, **every) == E + 7_000
    del every["TIMER_DELIVER_MS"]
    assert parked_time(wheel, **every) == E + 9_000


async def test_delivery_times_are_java_longs(wheel: Wheel, clock: HeldClock) -> None:
    """``Long.parseLong``: a leading ``+`` is accepted; what Python's int() also takes but
    Java does not (spaces, underscores) is refused, the remark naming the value."""
    assert parked_time(wheel, TIMER_DELAY_MS="+60000") == E + 60_000
    assert parked_time(wheel, TIMER_DELAY_MS="-60000") is None  # in the past: an ordinary message
    for text in (" 5000", "5_000", "+", "", "5000 "):
        with pytest.raises(MessageIllegalError) as refused:
            parked_time(wheel, TIMER_DELAY_MS=text)
        assert refused.value.remark.startswith("timer message illegal")
        assert f"the delivery time {text} is not a number" in refused.value.remark


async def test_a_delivery_time_of_now_is_an_ordinary_message(wheel: Wheel, clock: HeldClock) -> None:
    """Apache parks only what is due after now."""
    assert parked_time(wheel, TIMER_DELIVER_MS=str(E)) is None
    assert parked_time(wheel, TIMER_DELIVER_MS=str(E + 1)) == E + 1
    with pytest.raises(MessageIllegalError) as refused:
        parked_time(wheel, TIMER_DELIVER_MS=str(E), TIMER_DEL_UNIQKEY="T+u")
    assert refused.value.remark == (
        "timer message illegal, if set del msg, the delay time should be bigger than the current time"
    )


async def test_the_max_delay_is_exactly_timer_max_delay_sec(tmp_path: Path, clock: HeldClock) -> None:
    """``timerMaxDelaySec`` seconds ahead is accepted, one millisecond more refused, the remark
    saying by how much."""
    async with broker_parts(tmp_path) as parts:
        wheel = Wheel(parts, tmp_path, max_delay_sec=10)
        assert parked_time(wheel, TIMER_DELAY_MS="10000") == E + 10_000
        with pytest.raises(MessageIllegalError) as refused:
            parked_time(wheel, TIMER_DELAY_MS="10001")
        assert refused.value.remark == (
            "timer message illegal, the delay time should not be bigger than the max delay "
            "10000ms (timerMaxDelaySec); it is 10001ms"
        )


async def test_only_plain_and_committed_messages_are_timed(wheel: Wheel, clock: HeldClock) -> None:
    """Apache's handleScheduleMessage: a prepared (half) transactional message keeps its topic
    until its commit; the commit is parked. A message already carrying TIMER_OUT_MS (one being
    released) is never parked again."""
    half = wheel.parts.writer.build(
        TOPIC, 0, b"h", {"TIMER_DELAY_MS": "5000"}, sys_flag=TRANSACTION_PREPARED_TYPE
    )
    assert half.topic == TOPIC
    commit = wheel.parts.writer.build(
        TOPIC, 0, b"c", {"TIMER_DELAY_MS": "5000"}, sys_flag=TRANSACTION_COMMIT_TYPE
    )
    assert (commit.topic, commit.tags_code) == (TIMER_TOPIC, E + 5_000)
    releasing = wheel.parts.writer.build(TOPIC, 0, b"r", {"TIMER_DELAY_MS": "5000", "TIMER_OUT_MS": str(E)})
    assert releasing.topic == TOPIC


async def test_timer_messages_refused_when_the_wheel_is_disabled(tmp_path: Path, clock: HeldClock) -> None:
    """Apache's WHEEL_TIMER_NOT_ENABLE remark, word for word."""
    async with broker_parts(tmp_path) as parts:
        wheel = Wheel(parts, tmp_path, enabled=False)
        with pytest.raises(ServerSystemError) as refused:
            parked_time(wheel, TIMER_DELAY_SEC="1")
        assert refused.value.remark == "accurate timer message is not enabled, timerWheelEnable is false"


async def test_a_restart_after_the_timer_logs_head_was_deleted_reads_what_is_left(
    wheel: Wheel, clock: HeldClock
) -> None:
    """Retention deleted the commit-log files under the head of the timer log: a restart
    (with a checkpoint from before, saying to scan from 0) reads from the first entry left,
    and releases each of those once, on time."""
    filler = "x" * 20_000  # three to a 64 KB commit-log file
    for i in range(7):
        wheel.park(f"m{i}".encode(), {**at(E + 60_000), "filler": filler})
    wheel.timers.checkpoint()
    assert wheel.parts.store.delete_expired_files(force=True) > 0
    low = wheel.parts.store.get_min_offset(TIMER_TOPIC, 0)
    assert 0 < low < 7
    clock.kill()
    timers = wheel.restart()
    assert timers.pending == 7 - low
    timers.start()
    await clock.advance_to(E + 60_001)
    assert wheel.released() == [f"m{i}".encode() for i in range(low, 7)]


async def test_runtime_info_rates_are_over_the_last_ten_seconds(wheel: Wheel, clock: HeldClock) -> None:
    """GET_BROKER_RUNTIME_INFO's timer figures: messages waiting, none read behind, no timer-log
    entry unread, and the enqueue and dequeue rates (per second) over the samples of the last
    ten seconds, one a second (from the second sample on): a burst falls out of the window ten
    seconds later."""
    info = wheel.timers.runtime_info()
    assert info == {
        "timerReadBehind": "0",
        "timerOffsetBehind": "0",
        "timerCongestNum": "0",
        "timerEnqueueTps": "0.00",
        "timerDequeueTps": "0.00",
    }
    wheel.timers.start()
    await clock.advance(1_000)  # the first sample, at 1 s
    for i in range(5):
        wheel.park(f"m{i}".encode(), at(E + 1_500 + 60_000 * (i % 2)))
    await clock.advance(1_000)  # 2 s: five parked, three released at 1.5 s
    assert wheel.timers.runtime_info() == {
        "timerReadBehind": "0",
        "timerOffsetBehind": "0",
        "timerCongestNum": "2",
        "timerEnqueueTps": "5.00",
        "timerDequeueTps": "3.00",
    }
    await clock.advance(9_000)  # 11 s: the window (11 samples, 1 s to 11 s) still holds the first
    info = wheel.timers.runtime_info()
    assert (info["timerEnqueueTps"], info["timerDequeueTps"]) == ("0.50", "0.30")
    await clock.advance(1_000)  # 12 s: the burst is out of the window
    info = wheel.timers.runtime_info()
    assert (info["timerEnqueueTps"], info["timerDequeueTps"]) == ("0.00", "0.00")
