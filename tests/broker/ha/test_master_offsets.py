"""A SYNC_MASTER's offset bookkeeping in process, without sockets: which send a slave's
acknowledgement answers, when the master has no slave fit to wait for, and when it stops
waiting. The slave links are stand-ins; their acknowledgements are what the HA port's reader
hands to ``_acked``. (test_replication.py drives the same rules through real processes.)"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from aiorocketmq.broker.ha.master import ReplicationMaster, SlaveLink
from aiorocketmq.broker.store import PutStatus
from tests.store.support import small_config


class NoStore:
    """The master's store is not read by the offset rules."""


def master(tmp_path: Path, *, sync: bool = True, **config: object) -> ReplicationMaster:
    return ReplicationMaster(NoStore(), small_config(tmp_path, **config), sync=sync)  # type: ignore[arg-type]


def link(ha: ReplicationMaster, name: str = "slave") -> SlaveLink:
    slave = SlaveLink(name)
    ha.links.add(slave)
    return slave


async def test_a_send_is_answered_once_a_slave_acknowledges_its_end_not_its_start(tmp_path: Path) -> None:
    """Here for the bug of acknowledging a send once the slave holds the message's start."""
    ha = master(tmp_path)
    slave = link(ha)
    ha._acked(slave, 1000)  # everything before this message
    waiting = asyncio.ensure_future(ha.wait(1300))  # a message stored at [1000, 1300)
    await asyncio.sleep(0)
    assert not waiting.done()
    ha._acked(slave, 1000)  # the start again: still not the end
    ha._acked(slave, 1299)
    await asyncio.sleep(0)
    assert not waiting.done()
    # A send asking now, with the slave one byte short, waits too.
    late = asyncio.ensure_future(ha.wait(1300))
    await asyncio.sleep(0)
    assert not late.done()
    ha._acked(slave, 1300)
    assert await waiting is PutStatus.PUT_OK
    assert await late is PutStatus.PUT_OK
    # What a slave already holds is answered at once.
    assert await ha.wait(1200) is PutStatus.PUT_OK


async def test_acks_answer_the_sends_they_pass_in_offset_order(tmp_path: Path) -> None:
    ha = master(tmp_path)
    slave = link(ha)
    ha._acked(slave, 0)
    ends = [400, 100, 300, 200]
    waits = [asyncio.ensure_future(ha.wait(end)) for end in ends]
    await asyncio.sleep(0)
    ha._acked(slave, 250)
    await asyncio.sleep(0)
    assert [w.done() for w in waits] == [False, True, False, True]
    ha._acked(slave, 400)
    assert await asyncio.gather(*waits) == [PutStatus.PUT_OK] * 4


async def test_the_most_advanced_slave_decides_and_never_goes_back(tmp_path: Path) -> None:
    ha = master(tmp_path)
    ahead, behind = link(ha, "ahead"), link(ha, "behind")
    ha._acked(ahead, 900)
    ha._acked(behind, 100)
    assert (ha.acked_offset, ahead.ack_offset, behind.ack_offset) == (900, 900, 100)
    assert await ha.wait(900) is PutStatus.PUT_OK


async def test_no_slave_fit_to_wait_for_answers_slave_not_available_at_once(tmp_path: Path) -> None:
    ha = master(tmp_path, haSlaveFallbehindMax=1000)
    assert await ha.wait(10) is PutStatus.SLAVE_NOT_AVAILABLE  # no slave at all
    slave = link(ha)
    ha._acked(slave, 500)
    assert ha.slave_ok(1499) and not ha.slave_ok(1500)
    assert await ha.wait(1500) is PutStatus.SLAVE_NOT_AVAILABLE  # too far behind
    ha.links.clear()
    assert not ha.slave_ok(500)


async def test_a_send_no_ack_reaches_times_out_as_flush_slave_timeout(tmp_path: Path) -> None:
    ha = master(tmp_path, slaveTimeout=50)
    slave = link(ha)
    ha._acked(slave, 0)
    started = time.monotonic()
    assert await ha.wait(10) is PutStatus.FLUSH_SLAVE_TIMEOUT
    assert time.monotonic() - started >= 0.045  # (the loop's millisecond timers may fire a little early)
    # A later ack finds no waiter left to answer twice.
    ha._acked(slave, 10)
    assert ha._waiters == []


async def test_an_async_master_never_waits(tmp_path: Path) -> None:
    ha = master(tmp_path, sync=False)
    assert await ha.wait(10**9) is PutStatus.PUT_OK


async def test_stopping_answers_every_waiting_send(tmp_path: Path) -> None:
    ha = master(tmp_path)
    slave = link(ha)
    ha._acked(slave, 0)
    waiting = asyncio.ensure_future(ha.wait(100))
    await asyncio.sleep(0)
    ha.links.clear()  # (no socket to close)
    await ha.stop()
    assert await waiting is PutStatus.FLUSH_SLAVE_TIMEOUT


@pytest.mark.parametrize("first", [0, 4096])
async def test_the_first_report_is_where_transfer_starts(tmp_path: Path, first: int) -> None:
    ha = master(tmp_path)
    slave = link(ha)
    ha._acked(slave, first)
    ha._acked(slave, first + 10)
    assert slave.requested.is_set() and slave.request_offset == first and slave.ack_offset == first + 10
