"""Timer messages (RocketMQ 5.x "arbitrary delivery time"): a message that names the moment it
may be consumed is parked until then and released to its real topic at that moment.

A producer asks with one of the properties ``TIMER_DELIVER_MS`` (an absolute time, ms since
the epoch), ``TIMER_DELAY_SEC`` or ``TIMER_DELAY_MS`` (relative to its arrival), or the 4.x
``__STARTDELIVERTIME`` (absolute, as Aliyun's 4.x clients send it). As Apache 5.x does, the
broker stores such a message under the system topic ``rmq_sys_wheel_timer`` (queue 0) with
``REAL_TOPIC`` / ``REAL_QID`` and the delivery time in ``TIMER_OUT_MS``; a delivery time not
in the future means an ordinary message; one further away than ``timerMaxDelaySec`` is
refused. At its time the message is stored again under its real topic and queue with
``TIMER_ENQUEUE_MS`` and ``TIMER_DEQUEUE_MS`` added, and consumers see it from then on.

Persistence, and what survives kill -9:

* the **timer log** is the system topic's consume queue: one 20-byte entry per parked
  message whose tags slot holds the delivery time (the store rebuilds the same slot when it
  recovers the queue from the commit log, from ``TIMER_OUT_MS``);
* the **timing wheel** is an index over that log: one-second slots of compact arrays for
  what is further than a second away, and a heap of the entries due within the next second,
  each released by an event-loop timer at its millisecond (never before it);
* the **checkpoint** (``config/timercheck``) says where the wheel stands: every entry due
  before ``cursorMs`` was released, every entry below ``scanFrom`` was released, and entries
  from ``enqueuedUpTo`` on were never seen. At start the wheel is rebuilt by reading the log
  from ``scanFrom`` and keeping what the checkpoint does not account for; an entry released
  after the last checkpoint is released again (at least once, as Apache's timer store).

This module owns the timer properties, recalls, the wheel and its checkpoint; storing a due
message again under its real topic (without ``REAL_TOPIC``/``REAL_QID``) is :mod:`.parked`'s,
shared with delay levels.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import logging
import os
import struct
import time
from array import array
from collections import deque
from pathlib import Path

from aiorocketmq.broker.store import MessageStore
from aiorocketmq.protocol.errors import MessageIllegalError, ServerSystemError
from aiorocketmq.protocol.message import MessageExt, PropertyKey
from aiorocketmq.protocol.names import (
    START_DELIVER_TIME,
    TIMER_DELAY_MS,
    TIMER_DELAY_SEC,
    TIMER_DELIVER_MS,
    TIMER_OUT_MS,
    TIMER_TOPIC,
)
from aiorocketmq.protocol.recall import delete_key

from .parked import ParkedKind, ParkedMessages, now_ms, parkable, remember_real_queue
from .writer import MessageWriter

log = logging.getLogger(__name__)

TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
#: The tag of a recall marker (Apache's ``_RECALL_TAG_``).
RECALL_TAG = "_RECALL_TAG_"

_SLOT_MS = 1000
#: Slots are moved into the due heap this long before they start.
_LOOKAHEAD_MS = 1000
_ADVANCE_INTERVAL = 0.1
_CHECKPOINT_INTERVAL = 1.0
_RETRY_DELAY = 0.1
_SCAN_CHUNK = 4096
#: A released message loses ``REAL_TOPIC``/``REAL_QID``, as Apache's timer store clears them.
_KIND = ParkedKind(
    noun="timer message",
    verb="releasing",
    log=log,
    removed=(PropertyKey.REAL_TOPIC, PropertyKey.REAL_QUEUE_ID),
    refuse_half_topic=False,
)


def _java_long(text: str) -> int:
    """``Long.parseLong``: an optional sign and ASCII digits, nothing else."""
    body = text[1:] if text[:1] in "+-" else text
    if not body or not body.isascii() or not body.isdigit():
        raise ValueError(text)
    return int(text)


class _Slot:
    """The entries of one second of the wheel, as parallel arrays (about 28 bytes each)."""

    __slots__ = ("deliver", "queue_offset", "phy", "size")

    def __init__(self) -> None:
        self.deliver = array("q")
        self.queue_offset = array("q")
        self.phy = array("q")
        self.size = array("i")

    def add(self, deliver_ms: int, queue_offset: int, phy: int, size: int) -> None:
        self.deliver.append(deliver_ms)
        self.queue_offset.append(queue_offset)
        self.phy.append(phy)
        self.size.append(size)


class TimerStore(ParkedMessages):
    """Parks timer messages (through :class:`MessageWriter`) and releases them on time."""

    writer: MessageWriter  # it also builds recall markers

    def __init__(
        self,
        store: MessageStore,
        writer: MessageWriter,
        checkpoint_path: Path,
        *,
        enabled: bool = True,
        max_delay_sec: int = 3 * 24 * 3600,
    ) -> None:
        super().__init__(store, writer, _KIND)
        self.checkpoint_path = checkpoint_path
        self.enabled = enabled
        self.max_delay_ms = max_delay_sec * 1000
        self._slots: dict[int, _Slot] = {}
        self._due: list[tuple[int, int, int, int]] = []  # (deliver ms, queue offset, phy, size)
        self._loaded_until = 0  # entries due before this are in _due, the rest in _slots
        self._enqueued_up_to = 0  # the next timer-log offset to read
        self._handle: asyncio.TimerHandle | None = None
        self._armed_for = 0
        self._saved: tuple[int, int, int] | None = None
        self.pending = 0
        self.released = 0
        #: Per real topic, timer messages parked and not yet released since start-up, and
        #: when that count last changed (ms): RocketMQ 5's timer metrics.
        self.timing: dict[str, list[int]] = {}
        #: Recalled timer messages (``topic+uniqueId``) not yet come due, with the time their
        #: marker is due: such a message is dropped when it comes due instead of delivered.
        self.recalled: dict[str, int] = {}
        #: Timer messages parked since start-up, and (time, parked, released) samples taken by
        #: the checkpoint loop: the enqueue and dequeue rates runtime info reports.
        self.parked = 0
        self._rates: deque[tuple[float, int, int]] = deque(maxlen=11)
        self.recalls_path = checkpoint_path.with_name("timerRecalls.json")

    # -- parking (called for every message the broker builds) ----------------------------

    def park(self, topic: str, queue_id: int, properties: dict[str, str], sys_flag: int) -> int | None:
        """Divert a timer message: records its real topic and queue and its delivery time in
        ``properties`` and returns the delivery time; ``None`` when it is not one."""
        if topic == TIMER_TOPIC or TIMER_OUT_MS in properties or not parkable(topic, sys_flag):
            return None
        if not self.enabled:
            raise ServerSystemError("accurate timer message is not enabled, timerWheelEnable is false")
        now = now_ms()
        try:
            if TIMER_DELAY_SEC in properties:
                deliver = now + _java_long(properties[TIMER_DELAY_SEC]) * 1000
            elif TIMER_DELAY_MS in properties:
                deliver = now + _java_long(properties[TIMER_DELAY_MS])
            elif TIMER_DELIVER_MS in properties:
                deliver = _java_long(properties[TIMER_DELIVER_MS])
            else:
                deliver = _java_long(properties[START_DELIVER_TIME])
        except ValueError as exc:
            raise MessageIllegalError(
                f"timer message illegal, the delivery time {exc} is not a number"
            ) from None
        if deliver <= now:
            if TIMER_DEL_UNIQKEY in properties:
                raise MessageIllegalError(
                    "timer message illegal, if set del msg, the delay time should be bigger than the current time"
                )
            return None  # due already: an ordinary message
        if deliver - now > self.max_delay_ms:
            raise MessageIllegalError(
                f"timer message illegal, the delay time should not be bigger than the max delay "
                f"{self.max_delay_ms}ms (timerMaxDelaySec); it is {deliver - now}ms"
            )
        properties[TIMER_OUT_MS] = str(deliver)
        remember_real_queue(properties, topic, queue_id)
        # A recall marker stands for one message less waiting, as in Apache's timer metrics.
        self._count(topic, -1 if TIMER_DEL_UNIQKEY in properties else 1, now)
        self.parked += 1
        return deliver

    def recall(self, topic: str, unique_id: str, due_ms: int, producer_group: str, born_host: bytes) -> None:
        """Cancel the timer message ``unique_id`` of ``topic`` due just before ``due_ms`` (its
        recall handle's time): a marker goes into the timer log, as Apache writes it, and the
        message is dropped instead of delivered when it comes due. Raises when the marker
        cannot be stored."""
        key = delete_key(topic, unique_id)
        props = {
            TIMER_DEL_UNIQKEY: key,
            PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: unique_id,
            TIMER_DELIVER_MS: str(due_ms),
            PropertyKey.TAGS: RECALL_TAG,
        }
        if producer_group:
            props[PropertyKey.PRODUCER_GROUP] = producer_group
        result = self.writer.put(self.writer.build(topic, 0, b"0", props, born_host=born_host))
        if not result.ok:
            raise ServerSystemError("recall failed, execute error")
        self.recalled[key] = due_ms
        self._save_recalls()

    def _save_recalls(self) -> None:
        tmp = self.recalls_path.with_suffix(".tmp")
        self.recalls_path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(self.recalled))
        os.replace(tmp, self.recalls_path)

    def _load_recalls(self) -> None:
        try:
            data = json.loads(self.recalls_path.read_text())
        except FileNotFoundError:
            return
        except ValueError as exc:
            log.warning(
                "timer recalls %s unreadable (%s): recalled messages may be delivered", self.recalls_path, exc
            )
            return
        if isinstance(data, dict):
            self.recalled = {str(k): int(v) for k, v in data.items() if isinstance(v, int)}

    def _dropped_as_recalled(self, props: dict[str, str], topic: str) -> bool:
        """A marker is never delivered; a recalled message is dropped when it comes due."""
        marker = props.get(TIMER_DEL_UNIQKEY)
        if marker is None and not self.recalled:
            return False  # nothing recalled: every due message goes out
        if marker is not None:
            if self.recalled.pop(marker, None) is not None:
                self._save_recalls()
            return True
        key = delete_key(topic, props.get(PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, ""))
        if key in self.recalled:
            log.info("timer message %s recalled: not delivered", key)
            return True
        return False

    def _count(self, topic: str, change: int, now: int) -> None:
        entry = self.timing.setdefault(topic, [0, now])
        entry[0] = max(0, entry[0] + change)
        entry[1] = now

    def runtime_info(self) -> dict[str, str]:
        """RocketMQ 5's timer keys of GET_BROKER_RUNTIME_INFO: how far the wheel's cursor is
        behind the clock (ms), timer-log entries not read yet, messages waiting, and the
        enqueue and dequeue rates over the last samples (per second)."""
        cursor, _scan_from, enqueued = self._position()
        behind = max(0, now_ms() - cursor) if self.pending else 0
        enqueue = dequeue = 0.0
        if len(self._rates) >= 2:
            (t0, p0, r0), (t1, p1, r1) = self._rates[0], self._rates[-1]
            if t1 > t0:
                enqueue, dequeue = (p1 - p0) / (t1 - t0), (r1 - r0) / (t1 - t0)
        return {
            "timerReadBehind": str(behind),
            "timerOffsetBehind": str(max(0, self.store.get_max_offset(TIMER_TOPIC, 0) - enqueued)),
            "timerCongestNum": str(self.pending),
            "timerEnqueueTps": f"{enqueue:.2f}",
            "timerDequeueTps": f"{dequeue:.2f}",
        }

    def metrics(self) -> bytes:
        """GET_TIMER_METRICS's body (Apache's ``TimerMetricsSerializeWrapper``)."""
        counts = {t: {"count": c, "timeStamp": ts} for t, (c, ts) in sorted(self.timing.items())}
        version = {"counter": self.released, "stateVersion": 0, "timestamp": now_ms()}
        return json.dumps({"dataVersion": version, "timingCount": counts}).encode()

    def checkpoint_record(self) -> bytes:
        """GET_TIMER_CHECK_POINT's body: Apache's 56-byte timer checkpoint (last read time,
        timer-log flush position, last timer-queue offset, the master's, data version). Our
        timer log is the timer topic's consume queue, so positions are its 20-byte entries."""
        cursor, _scan_from, enqueued = self._position()
        return struct.pack(">7q", cursor, enqueued * 20, enqueued, enqueued, 0, now_ms(), self.released)

    # -- the wheel --------------------------------------------------------------------------

    def _enqueue(self, deliver_ms: int, queue_offset: int, phy: int, size: int) -> None:
        self.pending += 1
        if deliver_ms < self._loaded_until:
            heapq.heappush(self._due, (deliver_ms, queue_offset, phy, size))
            if self._handle is None or deliver_ms < self._armed_for:
                self._arm()
            return
        slot = self._slots.get(deliver_ms // _SLOT_MS)
        if slot is None:
            slot = self._slots[deliver_ms // _SLOT_MS] = _Slot()
        slot.add(deliver_ms, queue_offset, phy, size)

    def on_arrival(self, topic: str, queue_id: int, max_offset: int, tags_code: int) -> None:
        """Store listener: timer-log entries were dispatched; read every new one."""
        if topic != TIMER_TOPIC or max_offset <= self._enqueued_up_to:
            return
        self._read_log(self._enqueued_up_to, max_offset, None)

    def _read_log(self, start: int, end: int, released_before: tuple[int, int] | None) -> None:
        """Enqueue timer-log entries ``start..end``; ``released_before`` = (cursor ms, seen
        offset) skips what the checkpoint says was released."""
        offset = start
        while offset < end:
            count = min(_SCAN_CHUNK, end - offset)
            entries = list(self.store.read_consume_queue(TIMER_TOPIC, 0, offset, count))
            if not entries:
                break
            for phy, size, deliver in entries:
                if released_before is None or offset >= released_before[1] or deliver >= released_before[0]:
                    self._enqueue(deliver, offset, phy, size)
                offset += 1
        self._enqueued_up_to = max(self._enqueued_up_to, offset)

    def _advance(self) -> None:
        """Move the slots starting within the lookahead into the due heap."""
        horizon = now_ms() + _LOOKAHEAD_MS
        moved = False
        while self._loaded_until <= horizon:
            slot = self._slots.pop(self._loaded_until // _SLOT_MS, None)
            if slot is not None:
                due = self._due
                for item in zip(slot.deliver, slot.queue_offset, slot.phy, slot.size, strict=True):
                    heapq.heappush(due, item)
                moved = True
            self._loaded_until += _SLOT_MS
        if moved:
            self._arm()

    def _arm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if not self._due:
            return
        deliver = self._due[0][0]
        loop = asyncio.get_running_loop()
        # One millisecond of margin: the loop may run a timer up to its clock resolution early.
        delay = max(0.0, (deliver + 1 - time.time() * 1000) / 1000)
        self._armed_for = deliver
        self._handle = loop.call_later(delay, self._fire)

    def _fire(self) -> None:
        self._handle = None
        due = self._due
        now = now_ms()
        failed: list[tuple[int, int, int, int]] = []
        while due and due[0][0] <= now:
            item = heapq.heappop(due)
            deliver, _queue_offset, phy, _size = item
            if self.release(phy, deliver):
                self.pending -= 1
            else:
                failed.append(item)
        for item in failed:
            heapq.heappush(due, item)
        if failed:
            self._armed_for = failed[0][0]
            self._handle = asyncio.get_running_loop().call_later(_RETRY_DELAY, self._fire)
        else:
            self._arm()

    def _admit(self, msg: MessageExt, topic: str, properties: dict[str, str]) -> bool:
        """A recalled message or a recall marker is dropped; the rest say when they were parked
        and released."""
        if self._dropped_as_recalled(properties, topic):
            return False
        properties[TIMER_ENQUEUE_MS] = str(msg.store_timestamp)
        properties[TIMER_DEQUEUE_MS] = str(now_ms())
        return True

    def _released(self, topic: str) -> None:
        self.released += 1
        self._count(topic, -1, now_ms())

    # -- checkpoint and recovery ------------------------------------------------------------

    def _position(self) -> tuple[int, int, int]:
        """(cursor ms, scan-from offset, enqueued-up-to offset), as the checkpoint keeps them."""
        cursor = self._due[0][0] if self._due else self._loaded_until
        # Each slot is filled in log order, so its first entry is its lowest.
        lowest = [slot.queue_offset[0] for slot in self._slots.values() if slot.queue_offset]
        if self._due:
            lowest.append(min(item[1] for item in self._due))
        scan_from = min(lowest) if lowest else self._enqueued_up_to
        return cursor, scan_from, self._enqueued_up_to

    def checkpoint(self) -> None:
        position = self._position()
        saved = self._saved
        if position == saved:
            return
        cursor, scan_from, enqueued = position
        if saved is not None and scan_from == enqueued and saved[1:] == position[1:]:
            # Nothing parked and nothing new, only the clock moved: the cursor speaks of entries
            # in [scanFrom, enqueuedUpTo), an empty range, so the file on disk says the same.
            # (Rewriting it is a write and a rename on the event loop, every second.)
            return
        self.checkpoint_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.checkpoint_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"cursorMs": cursor, "scanFrom": scan_from, "enqueuedUpTo": enqueued}))
        os.replace(tmp, self.checkpoint_path)
        self._saved = position

    def load(self) -> None:
        """Rebuild the wheel from the timer log and the checkpoint (the store is started)."""
        self._load_recalls()
        now = now_ms()
        self._loaded_until = now - now % _SLOT_MS
        saved = None
        try:
            data = json.loads(self.checkpoint_path.read_text())
            saved = (int(data["cursorMs"]), int(data["scanFrom"]), int(data["enqueuedUpTo"]))
        except FileNotFoundError:
            pass
        except (ValueError, KeyError, TypeError) as exc:
            log.warning(
                "timer checkpoint %s unreadable (%s): reading the whole timer log", self.checkpoint_path, exc
            )
        low = self.store.get_min_offset(TIMER_TOPIC, 0)
        high = self.store.get_max_offset(TIMER_TOPIC, 0)
        start = max(low, saved[1]) if saved else low
        self._enqueued_up_to = start
        self._read_log(start, high, (saved[0], saved[2]) if saved else None)
        if self.pending:
            log.info("timer store: %d timer messages pending", self.pending)

    def start(self) -> None:
        self._advance()
        self._every(_ADVANCE_INTERVAL, self._advance)
        self._every(_CHECKPOINT_INTERVAL, self._sample_and_checkpoint)

    def _sample_and_checkpoint(self) -> None:
        self._rates.append((time.monotonic(), self.parked, self.released))
        try:
            self.checkpoint()
        except OSError as exc:
            log.warning("cannot write the timer checkpoint: %s", exc)

    async def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        await super().stop()
        self.checkpoint()
