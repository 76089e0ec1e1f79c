"""The HA master's bookkeeping without sockets: what ``brokerStatus`` reports about its slaves,
what stopping does to connected slaves and waiting sends, and how long a SYNC_MASTER send waits
for an ack (tests written for surviving mutants of broker/ha/master.py)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from aiorocketmq.broker.ha import master as master_module
from aiorocketmq.broker.ha.master import ReplicationMaster, SlaveLink
from aiorocketmq.broker.store import PutStatus
from tests.store.support import small_config


class EndOnlyStore:
    """The store as the master's reports read it: only the commit log's end."""

    def __init__(self, end: int) -> None:
        self.commit_log_max_offset = end


def master(tmp_path: Path, end: int = 10_000, **config: object) -> ReplicationMaster:
    return ReplicationMaster(EndOnlyStore(end), small_config(tmp_path, **config), sync=True)  # type: ignore[arg-type]


def link(ha: ReplicationMaster, address: str, connected_at: float, ack: int, sent: int = 0) -> SlaveLink:
    slave = SlaveLink(address, connected_at=connected_at, ack_offset=ack, bytes_sent=sent)
    ha.links.add(slave)
    return slave


def test_a_master_without_slaves_reports_nothing_replicated(tmp_path: Path) -> None:
    """``brokerStatus`` on a fresh master: no connection, no lag, nothing pushed, nobody refused."""
    ha = master(tmp_path)
    assert ha.runtime_info() == {
        "haConnectionCount": "0",
        "commitLogDiff": "0",
        "haPush2SlaveMaxOffset": "0",
        "haSlavesRefused": "0",
        "haConnectionsRefused": "0",
        "haUnreadDropped": "0",
    }
    assert ha.slaves() == []


def test_each_slave_is_reported_oldest_connection_first_with_its_lag(tmp_path: Path) -> None:
    """Per slave: address, acked offset and lag behind the commit log's end (the whole log for
    one that has not reported yet, never negative); ``commitLogDiff`` is the best slave's lag."""
    ha = master(tmp_path, end=10_000)
    link(ha, "10.0.0.9:40002", connected_at=2.0, ack=-1)
    link(ha, "10.0.0.8:40001", connected_at=1.0, ack=4_000, sent=6_000)
    link(ha, "10.0.0.10:40003", connected_at=3.0, ack=10_000, sent=10_000)
    ha._acked(next(s for s in ha.links if s.ack_offset == 10_000), 10_000)
    assert ha.slaves() == [
        {"address": "10.0.0.8:40001", "ackOffset": "4000", "lagBytes": "6000", "bytesSent": "6000"},
        {"address": "10.0.0.9:40002", "ackOffset": "-1", "lagBytes": "10000", "bytesSent": "0"},
        {"address": "10.0.0.10:40003", "ackOffset": "10000", "lagBytes": "0", "bytesSent": "10000"},
    ]
    assert ha.runtime_info() == {
        "haConnectionCount": "3",
        "commitLogDiff": "0",
        "haPush2SlaveMaxOffset": "10000",
        "haSlavesRefused": "0",
        "haConnectionsRefused": "0",
        "haUnreadDropped": "0",
        "haSlave0": "10.0.0.8:40001 ackOffset=4000 lagBytes=6000",
        "haSlave1": "10.0.0.9:40002 ackOffset=-1 lagBytes=10000",
        "haSlave2": "10.0.0.10:40003 ackOffset=10000 lagBytes=0",
    }


def test_a_slave_that_reported_offset_0_lags_the_whole_log(tmp_path: Path) -> None:
    """An empty slave's report of 0 counts: it is behind by the whole commit log."""
    ha = master(tmp_path, end=7_000)
    link(ha, "10.0.0.8:40001", connected_at=1.0, ack=0)
    info = ha.runtime_info()
    assert info["commitLogDiff"] == "7000"
    assert info["haSlave0"] == "10.0.0.8:40001 ackOffset=0 lagBytes=7000"


class _Transport:
    def __init__(self) -> None:
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True


class _Writer:
    def __init__(self) -> None:
        self.transport = _Transport()


async def test_stopping_disconnects_every_slave_and_answers_waiting_sends_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Shutting the master down closes each slave's connection, ends its reader and writer,
    logs why, and answers every send still waiting for an ack FLUSH_SLAVE_TIMEOUT right away,
    not when its slaveTimeout runs out."""
    ha = master(tmp_path, slaveTimeout=60_000)
    slaves = [link(ha, f"10.0.0.{i}:4000{i}", connected_at=float(i), ack=0) for i in (8, 9)]
    never = asyncio.Event()
    for slave in slaves:
        slave.writer = _Writer()  # type: ignore[assignment]
        slave.tasks = [asyncio.ensure_future(never.wait()), asyncio.ensure_future(never.wait())]
    waiting = asyncio.ensure_future(ha.wait(100))
    await asyncio.sleep(0)
    assert not waiting.done()
    with caplog.at_level(logging.INFO, logger=master_module.__name__):
        await ha.stop()
    assert ha.links == set() and not ha.slave_ok(100)
    for slave in slaves:
        assert slave.writer is not None and slave.writer.transport.aborted  # type: ignore[attr-defined]
        assert all(task.cancelled() for task in slave.tasks)
    await asyncio.sleep(0)
    assert waiting.done() and waiting.result() is PutStatus.FLUSH_SLAVE_TIMEOUT
    messages = [r.getMessage() for r in caplog.records if r.name == master_module.__name__]
    assert "slave 10.0.0.8:40008 disconnected from the HA port: master shutting down" in messages
    assert "slave 10.0.0.9:40009 disconnected from the HA port: master shutting down" in messages


async def test_stopping_twice_is_harmless(tmp_path: Path) -> None:
    """A broker shut down twice (or after its HA port was open) stops its master twice."""
    ha = master(tmp_path)
    await ha.start("127.0.0.1", 0)
    await ha.stop()
    await ha.stop()


class _RecordingLoop:
    """The running loop, recording the timers ``wait`` sets."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.timers: list[tuple[float, Any, tuple[Any, ...]]] = []

    def create_future(self) -> asyncio.Future[Any]:
        return self.loop.create_future()

    def call_later(self, delay: float, callback: Any, *args: Any) -> asyncio.TimerHandle:
        self.timers.append((delay, callback, args))
        return self.loop.call_later(3600, lambda: None)


class _AsyncioWithRecordingLoop:
    def __init__(self, loop: _RecordingLoop) -> None:
        self._loop = loop

    def get_running_loop(self) -> _RecordingLoop:
        return self._loop

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)


@pytest.mark.parametrize("slave_timeout_ms", [3_000, 1_500])
async def test_a_sync_send_waits_exactly_slave_timeout_then_answers_flush_slave_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slave_timeout_ms: int
) -> None:
    """A SYNC_MASTER send no ack reaches is answered FLUSH_SLAVE_TIMEOUT when ``slaveTimeout``
    (milliseconds; 3,000 by default) has passed: the one timer it sets is of exactly that
    length, and when it fires the send gets that answer."""
    recording = _RecordingLoop(asyncio.get_running_loop())
    monkeypatch.setattr(master_module, "asyncio", _AsyncioWithRecordingLoop(recording))
    ha = master(tmp_path, slaveTimeout=slave_timeout_ms)
    link(ha, "10.0.0.8:40001", connected_at=1.0, ack=0)
    waiting = asyncio.ensure_future(ha.wait(100))
    await asyncio.sleep(0)
    assert not waiting.done()
    [(delay, callback, args)] = recording.timers
    assert delay == slave_timeout_ms / 1000
    callback(*args)  # the timer fires
    await asyncio.sleep(0)
    assert waiting.done() and waiting.result() is PutStatus.FLUSH_SLAVE_TIMEOUT
