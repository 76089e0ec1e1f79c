"""The timer store on the broker's parts: how a send with a delivery time is parked (and when
it is not), the timer log's entries, release to the real topic at the time, and the wheel
rebuilt from the log and the checkpoint by a new timer store over the same store."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from aiorocketmq.broker.timers import TimerStore
from aiorocketmq.protocol.codes import PERM_READ_WRITE, ResponseCode
from aiorocketmq.protocol.names import SCHEDULE_TOPIC, TIMER_TOPIC
from tests.support import wait_until

from .support import Parts, RecordedConnection, answer, broker_parts, send_ok, send_request

TOPIC = "TimerTopic"


def timers_for(parts: Parts, root: Path, **settings: Any) -> TimerStore:
    timers = TimerStore(parts.store, parts.writer, root / "config" / "timercheck", **settings)
    parts.writer.timers = timers
    parts.store.add_arrival_listener(timers.on_arrival)
    timers.load()
    return timers


async def test_parking_and_release(tmp_path: Path, conn: RecordedConnection) -> None:
    async with broker_parts(tmp_path) as parts:
        parts.topics.ensure(TOPIC, 2, PERM_READ_WRITE)
        timers = timers_for(parts, tmp_path)
        timers.start()
        try:
            await send_ok(parts, conn, TOPIC, b"later", queue_id=1, properties={"TIMER_DELAY_MS": "60000"})
            await send_ok(parts, conn, TOPIC, b"level", properties={"DELAY": "1", "TIMER_DELAY_MS": "60000"})
            due = time.time_ns() // 1_000_000 + 300
            await send_ok(parts, conn, TOPIC, b"soon", properties={"TIMER_DELIVER_MS": str(due)})
            parked = parts.messages(TIMER_TOPIC, 0)
            assert [m.body for m in parked] == [b"later", b"soon"]
            assert parked[0].properties["REAL_TOPIC"] == TOPIC and parked[0].properties["REAL_QID"] == "1"
            codes = [code for _, _, code in parts.store.read_consume_queue(TIMER_TOPIC, 0, 0, 2)]
            assert codes == [int(m.properties["TIMER_OUT_MS"]) for m in parked]
            # A delay level wins: the message waits for its level, its timer asks dropped.
            (level,) = parts.messages(SCHEDULE_TOPIC, 0)
            assert level.body == b"level" and "TIMER_DELAY_MS" not in level.properties
            assert parts.messages(TOPIC, 0) == []

            await wait_until(lambda: len(parts.messages(TOPIC, 0)) == 1, timeout=10, interval=0.01)
            (released,) = parts.messages(TOPIC, 0)
            assert released.body == b"soon" and released.store_timestamp >= due
            assert "REAL_TOPIC" not in released.properties and "TIMER_DEQUEUE_MS" in released.properties
            assert timers.pending == 1 and timers.released == 1
        finally:
            await timers.stop()

        # A new timer store over the same store finds the one still pending, not the released one.
        again = timers_for(parts, tmp_path)
        assert again.pending == 1


async def test_refusals(tmp_path: Path, conn: RecordedConnection) -> None:
    async with broker_parts(tmp_path) as parts:
        parts.topics.ensure(TOPIC, 1, PERM_READ_WRITE)
        timers_for(parts, tmp_path, max_delay_sec=10)
        for props, remark in (
            ({"TIMER_DELAY_SEC": "11"}, "timerMaxDelaySec"),
            ({"TIMER_DELAY_MS": "1.5"}, "not a number"),
            ({"TIMER_DELIVER_MS": "1", "TIMER_DEL_UNIQKEY": "x"}, "bigger than the current time"),
        ):
            response = await answer(parts.sender.send, conn, send_request(TOPIC, properties=props))
            assert response.code == ResponseCode.MESSAGE_ILLEGAL, response.remark
            assert remark in (response.remark or "")
        timers_for(parts, tmp_path, enabled=False)
        response = await answer(
            parts.sender.send, conn, send_request(TOPIC, properties={"TIMER_DELAY_SEC": "1"})
        )
        assert response.code == ResponseCode.SYSTEM_ERROR
        assert "timerWheelEnable" in (response.remark or "")
