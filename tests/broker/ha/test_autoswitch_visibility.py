"""Controller mode shows consumers only what every SyncStateSet member holds: the store
dispatches (consume queues, index, arrival listeners) up to the confirm offset, as Apache's
reput service stops at ``getConfirmOffset``; the rest is stored and waits. A slave stops at its
master's confirm offset; the confirm offset survives a restart in the checkpoint; with
``readUnCommitted=true`` nothing waits."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import pytest

from aiorocketmq.broker.config import BrokerConfig
from aiorocketmq.broker.ha.autoswitch import AutoSwitchReplication
from aiorocketmq.broker.store import MessageStore, PutStatus
from tests.broker.ha.support import held_port_pair
from tests.broker.ha.test_autoswitch import TOPIC, Node, _fake_slave, nodes, until
from tests.store.support import STORE_HOST, make_message, small_config


def visible(store: MessageStore, queue_id: int = 0) -> list[int]:
    """The queue offsets a consumer of ``queue_id`` can read."""
    got = store.get_messages("g", TOPIC, queue_id, 0, 1000)
    return [
        queue_offset
        for queue_offset in range(got.next_begin_offset - len(got.buffers), got.next_begin_offset)
    ]


async def ack(writer: asyncio.StreamWriter, offset: int) -> None:
    writer.write(struct.pack(">iq", 2, offset))  # a slave's report, in Apache's layout
    await writer.drain()


async def _master_with_stalled_slave(a: Node) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, int]:
    """A is master (epoch 1) with ``allAckInSyncStateSet``; broker 3, a slave that acks only when
    told, is in its SyncStateSet and has everything A holds now."""
    a.repl.settings.all_ack_in_sync_state_set = True
    await a.repl.change_to_master(1)
    a.repl.set_sync_state_set({1})
    a.put(5)  # alone in the set: visible at once
    assert a.store.get_max_offset(TOPIC, 0) == 2 and len(visible(a.store)) == 2
    end = a.store.commit_log_max_offset
    reader, writer, _body = await _fake_slave(a.ha_address, 3, end)
    await until(lambda: 3 in a.repl.master_side.ack_offsets(), what="the slave's report")
    a.repl.set_sync_state_set({1, 3})
    assert a.repl.confirm_offset() == end
    return reader, writer, end


async def test_a_message_is_visible_once_every_sync_state_set_member_has_it(tmp_path: Path) -> None:
    async with nodes(tmp_path, 1) as (a,):
        store = a.store
        arrivals: list[tuple[str, int, int, int]] = []
        store.add_arrival_listener(lambda *arrival: arrivals.append(arrival), TOPIC)
        reader, writer, _end = await _master_with_stalled_slave(a)
        arrivals.clear()
        try:
            # Queue 0 holds offsets 0 and 1; three more are stored but the slave has none.
            results = [store.put_message(make_message(TOPIC, 0, n, keys=f"held{n}")) for n in range(3)]
            assert [r.status for r in results] == [PutStatus.PUT_OK] * 3
            assert [r.queue_offset for r in results] == [2, 3, 4]  # after each other, not all 2
            new_end = results[-1].wrote_offset + results[-1].wrote_bytes
            assert store.commit_log_max_offset == new_end
            assert store.get_max_offset(TOPIC, 0) == 2 and visible(store) == [0, 1]
            assert not store.query_by_key(TOPIC, "held1", 5, 0, 1 << 62).records
            assert not arrivals
            # A SYNC send still waits for the slave, as without the limit.
            waiting = asyncio.ensure_future(store.wait_stored(results[-1]))
            await asyncio.sleep(0.05)
            assert not waiting.done()
            # The slave has the first of them: that one shows, the others wait.
            await ack(writer, results[0].wrote_offset + results[0].wrote_bytes)
            await until(lambda: store.get_max_offset(TOPIC, 0) == 3, what="the first message")
            assert visible(store) == [0, 1, 2] and arrivals == [(TOPIC, 0, 3, arrivals[0][3])]
            assert not waiting.done()
            # Then all: visible, consumers woken, the send answered.
            await ack(writer, new_end)
            assert await waiting is PutStatus.PUT_OK
            await until(lambda: store.get_max_offset(TOPIC, 0) == 5, what="every message")
            assert visible(store) == [0, 1, 2, 3, 4]
            assert [arrival[2] for arrival in arrivals] == [3, 5]
            assert len(store.query_by_key(TOPIC, "held1", 5, 0, 1 << 62).records) == 1
            assert store.confirm_offset == new_end
            # A batch behind nothing held, and the slave gone from the set: no wait at all.
            a.repl.set_sync_state_set({1})
            batch = store.put_messages([make_message(TOPIC, 0, n) for n in range(3)])
            assert batch.queue_offset == 5 and store.get_max_offset(TOPIC, 0) == 8
        finally:
            writer.transport.abort()
            assert reader is not None


async def test_a_slave_shows_only_what_its_master_confirmed(tmp_path: Path) -> None:
    async with nodes(tmp_path, 2, haSendHeartbeatInterval=100) as (a, b):
        reader, writer, end = await _master_with_stalled_slave(a)
        try:
            await b.repl.change_to_slave(a.ha_address, 1, 1)
            await until(lambda: b.store.commit_log_max_offset == end, what="catch-up")
            await until(lambda: b.store.get_max_offset(TOPIC, 0) == 2, what="the slave's dispatch")
            a.repl.set_sync_state_set({1, 2, 3})
            a.put(6, first=5)  # queue 0 gets 6 and 9 (offsets 2 and 3)
            new_end = a.store.commit_log_max_offset
            # B copies every byte but shows nothing past the confirm offset (broker 3's ack).
            await until(lambda: b.store.commit_log_max_offset == new_end, what="the copy")
            await asyncio.sleep(0.3)  # a few frames and heartbeats with the old confirm offset
            assert b.repl.confirm_offset() == end
            assert b.store.get_max_offset(TOPIC, 0) == 2 and a.store.get_max_offset(TOPIC, 0) == 2
            await ack(writer, new_end)
            await until(lambda: a.store.get_max_offset(TOPIC, 0) == 4, what="the master's dispatch")
            await until(lambda: b.store.get_max_offset(TOPIC, 0) == 4, what="the slave's dispatch")
            assert visible(b.store) == visible(a.store) == [0, 1, 2, 3]
            assert b.repl.confirm_offset() == new_end
        finally:
            writer.transport.abort()
            assert reader is not None


@pytest.mark.parametrize("crashed", [False, True], ids=["clean", "abort-file"])
async def test_a_restarted_store_keeps_the_confirm_offset(tmp_path: Path, crashed: bool) -> None:
    async with nodes(tmp_path, 1) as (a,):
        reader, writer, end = await _master_with_stalled_slave(a)
        try:
            a.put(6, first=5)  # held: queue 0 gets offsets 2 and 3
            held_end = a.store.commit_log_max_offset
            assert a.store.get_max_offset(TOPIC, 0) == 2
        finally:
            writer.transport.abort()
            assert reader is not None
        await a.repl.stop()
        await a.store.shutdown()
        assert a.store.checkpoint.confirm_offset == end
    if crashed:
        # Recovered as after a crash: the records of the last seconds are checked and
        # dispatched again, up to the confirm offset only.
        (tmp_path / "b1" / "abort").touch()

    # The broker restarts: its replication is set up before the store starts (as the broker does).
    store = MessageStore(small_config(tmp_path / "b1"), store_host=STORE_HOST)
    with held_port_pair() as port:
        config = BrokerConfig.model_validate({"listenPort": port, "brokerName": "broker-a", "brokerId": 1})
        repl = AutoSwitchReplication(config, store.config, store)
    repl.local_broker_id = 1
    repl.settings.all_ack_in_sync_state_set = True
    await store.start()
    try:
        assert store.recovery is not None and store.recovery.abnormal is crashed
        if crashed:
            assert store.recovery.dispatched > 0
        assert store.commit_log_max_offset == held_end
        assert store.confirm_offset == end and store.reput_offset == end
        assert store.get_max_offset(TOPIC, 0) == 2  # not dispatched past the confirm offset
        await repl.start("127.0.0.1")
        assert repl.confirm_offset() == end
        # Master again, alone in the set: the confirm offset is the log's end, all shows.
        await repl.change_to_master(2)
        repl.set_sync_state_set({1})
        assert store.get_max_offset(TOPIC, 0) == 4 and store.reput_offset == held_end
        result = store.put_message(make_message(TOPIC, 0, 99))
        assert result.queue_offset == 4 and store.get_max_offset(TOPIC, 0) == 5
    finally:
        await repl.stop()
        await store.shutdown()


async def test_held_records_keep_their_queue_offsets_across_a_restart(tmp_path: Path) -> None:
    async with nodes(tmp_path, 1) as (a,):
        reader, writer, _end = await _master_with_stalled_slave(a)
        try:
            a.put(6, first=5)
        finally:
            writer.transport.abort()
            assert reader is not None
        await a.repl.stop()
        await a.store.shutdown()

    store = MessageStore(small_config(tmp_path / "b1"), store_host=STORE_HOST)
    with held_port_pair() as port:
        config = BrokerConfig.model_validate({"listenPort": port, "brokerName": "broker-a", "brokerId": 1})
        repl = AutoSwitchReplication(config, store.config, store)
    repl.local_broker_id = 1
    repl.settings.all_ack_in_sync_state_set = True
    await store.start()
    try:
        await repl.start("127.0.0.1")
        repl.set_sync_state_set({1, 3})  # broker 3 is not connected: the confirm offset stays
        await repl.change_to_master(2)
        assert store.get_max_offset(TOPIC, 0) == 2
        # A put behind the held records takes the queue offset after theirs.
        result = store.put_message(make_message(TOPIC, 0, 99))
        assert result.status is PutStatus.PUT_OK and result.queue_offset == 4
        repl.set_sync_state_set({1})
        assert store.get_max_offset(TOPIC, 0) == 5 and visible(store) == [0, 1, 2, 3, 4]
    finally:
        await repl.stop()
        await store.shutdown()


async def test_read_uncommitted_shows_everything_at_once(tmp_path: Path) -> None:
    async with nodes(tmp_path, 1, readUnCommitted=True) as (a,):
        assert not a.store.dispatch_limited
        reader, writer, _end = await _master_with_stalled_slave(a)
        try:
            a.put(6, first=5)
            assert a.store.get_max_offset(TOPIC, 0) == 4
        finally:
            writer.transport.abort()
            assert reader is not None
