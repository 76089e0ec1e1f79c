"""Controller mode's replication between real message stores in one process, over real HA
ports: a slave copies its master and joins the SyncStateSet, a send waits for the set, an old
master's messages the new one never had are cut when it comes back as a slave, a stalled slave
leaves the set, and the master's side speaks Apache's bytes to a hand-written slave."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from aiorocketmq.broker.config import BrokerConfig
from aiorocketmq.broker.ha.autoswitch import AutoSwitchReplication, wire
from aiorocketmq.broker.store import MessageStore, PutStatus
from tests.broker.ha.support import held_port_pair
from tests.store.support import STORE_HOST, make_message, small_config

TOPIC = "TopicA"


class Node:
    def __init__(self, store: MessageStore, repl: AutoSwitchReplication, broker_id: int) -> None:
        self.store = store
        self.repl = repl
        self.broker_id = broker_id
        self.proposals: list[set[int]] = []
        self.shrinks: list[set[int]] = []
        repl.on_sync_state_set_expand = self.proposals.append
        repl.on_sync_state_set_shrink = self.shrinks.append

    @property
    def ha_address(self) -> str:
        return f"127.0.0.1:{self.repl.port}"

    def put(self, count: int, *, first: int = 0, size: int = 300, prefix: str = "K") -> list[int]:
        ends = []
        for n in range(first, first + count):
            result = self.store.put_message(make_message(TOPIC, n % 3, n, size=size, keys=f"{prefix}{n}"))
            assert result.status is PutStatus.PUT_OK
            ends.append(result.wrote_offset + result.wrote_bytes)
        return ends

    def epochs(self) -> list[tuple[int, int]]:
        return [(e.epoch, e.start_offset) for e in self.repl.epoch_entries()]


@asynccontextmanager
async def nodes(tmp_path: Path, count: int, **store_settings: Any) -> AsyncIterator[list[Node]]:
    started: list[Node] = []
    try:
        for broker_id in range(1, count + 1):
            store = MessageStore(
                small_config(tmp_path / f"b{broker_id}", **store_settings), store_host=STORE_HOST
            )
            await store.start()
            with held_port_pair() as port:
                config = BrokerConfig.model_validate(
                    {"listenPort": port, "brokerName": "broker-a", "brokerId": broker_id}
                )
                repl = AutoSwitchReplication(config, store.config, store)
                repl.local_broker_id = broker_id
                started.append(Node(store, repl, broker_id))
                await repl.start("127.0.0.1")
        yield started
    finally:
        for node in started:
            await node.repl.stop()
            await node.store.shutdown()


async def until(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def queue_contents(store: MessageStore) -> dict[int, list[bytes]]:
    contents = {}
    for queue_id in range(3):
        low = store.get_min_offset(TOPIC, queue_id)
        got = store.get_messages("g", TOPIC, queue_id, low, 10_000)
        contents[queue_id] = [bytes(b) for b in got.buffers]
    return contents


def log_bytes(store: MessageStore) -> bytes:
    chunks = []
    offset = store.commit_log_min_offset
    while (view := store.commit_log.data_at(offset, 1 << 20)) is not None and len(view):
        chunks.append(bytes(view))
        offset += len(view)
    return b"".join(chunks)


async def test_a_slave_copies_its_master_and_is_proposed_for_the_sync_state_set(tmp_path: Path) -> None:
    async with nodes(tmp_path, 2) as (a, b):
        await a.repl.change_to_master(1)
        a.repl.set_sync_state_set({1})
        assert a.repl.is_master and a.store.replica is a.repl.master_side
        a.put(400)  # crosses 64 KiB commit-log files
        await b.repl.change_to_slave(a.ha_address, 1, 1)
        await until(lambda: b.store.commit_log_max_offset == a.store.commit_log_max_offset, what="catch-up")
        assert log_bytes(b.store) == log_bytes(a.store)
        await until(lambda: queue_contents(b.store) == queue_contents(a.store), what="dispatch")
        assert len(b.store.query_by_key(TOPIC, "K123", 5, 0, 1 << 62).records) == 1
        assert b.epochs() == a.epochs() == [(1, 0)]
        # Caught up within the master's epoch: proposed for the SyncStateSet.
        await until(lambda: bool(a.proposals), what="the expansion callback")
        assert a.proposals[0] == {1, 2}
        assert a.repl.master_side.synchronizing and a.repl.master_side.sync_state_set == {1, 2}
        a.repl.set_sync_state_set({1, 2})
        status = a.repl.ha_status()
        assert status["master"] is True and status["inSyncSlaveNums"] == 1
        connections = status["haConnectionInfo"]
        assert isinstance(connections, list) and connections[0]["inSync"] is True
        # The slave's confirm offset follows the master's.
        a.put(20, first=400)
        await until(lambda: b.store.commit_log_max_offset == a.store.commit_log_max_offset)
        await until(lambda: b.repl.confirm_offset() == a.store.commit_log_max_offset, what="confirm offset")
        assert b.repl.ha_status()["haClientRuntimeInfo"]["isActivated"] is True  # type: ignore[index]
        info = a.repl.runtime_info()
        assert info["haConnectionCount"] == "1" and info["syncStateSet"] == "1,2"


async def test_a_send_waits_for_every_member_of_the_sync_state_set(tmp_path: Path) -> None:
    async with nodes(tmp_path, 2, slaveTimeout=800) as (a, b):
        a.repl.settings.all_ack_in_sync_state_set = True
        await a.repl.change_to_master(1)
        a.repl.set_sync_state_set({1, 2})
        # Member 2 is not connected: the confirm offset stays where it was.
        assert a.repl.confirm_offset() == 0
        await b.repl.change_to_slave(a.ha_address, 1, 1)
        await until(lambda: len(a.repl.master_side.links) == 1 and b.repl.slave is not None)
        for n in range(5):
            result = a.store.put_message(make_message(TOPIC, 0, n))
            end = result.wrote_offset + result.wrote_bytes
            assert await a.store.wait_stored(result) is PutStatus.PUT_OK
            # Answered only once the slave acknowledged it.
            assert a.repl.master_side.ack_offsets()[2] >= end
            assert b.store.commit_log_max_offset >= end
        await until(lambda: a.repl.confirm_offset() == a.store.commit_log_max_offset, what="confirm offset")
        # The slave goes: the set is proposed without it, and until the controller agrees a
        # send waits for it in vain.
        await b.repl.stop()
        await until(lambda: a.shrinks == [{1}], what="the shrink callback")
        result = a.store.put_message(make_message(TOPIC, 0, 99))
        started = time.monotonic()
        assert await a.store.wait_stored(result) is PutStatus.FLUSH_SLAVE_TIMEOUT
        assert time.monotonic() - started >= 0.7
        assert a.repl.confirm_offset() < a.store.commit_log_max_offset
        a.repl.set_sync_state_set({1})
        result = a.store.put_message(make_message(TOPIC, 0, 100))
        assert await a.store.wait_stored(result) is PutStatus.PUT_OK
        assert a.repl.confirm_offset() == a.store.commit_log_max_offset


async def test_in_sync_replicas_counts_acks_without_all_ack(tmp_path: Path) -> None:
    async with nodes(tmp_path, 2, slaveTimeout=800) as (a, b):
        a.repl.settings.in_sync_replicas = 2
        a.repl.settings.min_in_sync_replicas = 2
        await a.repl.change_to_master(1)
        a.repl.set_sync_state_set({1})
        assert not a.repl.in_sync_replicas_enough()
        result = a.store.put_message(make_message(TOPIC, 0, 0))
        assert await a.store.wait_stored(result) is PutStatus.SLAVE_NOT_AVAILABLE
        await b.repl.change_to_slave(a.ha_address, 1, 1)
        await until(lambda: bool(a.proposals), what="the expansion callback")
        a.repl.set_sync_state_set(a.proposals[-1])
        assert a.repl.in_sync_replicas_enough() and a.repl.master_side.slave_ok(0)
        waiting = [a.store.put_message(make_message(TOPIC, 1, n)) for n in range(10)]
        statuses = await asyncio.gather(*(a.store.wait_stored(r) for r in waiting))
        assert set(statuses) == {PutStatus.PUT_OK}


async def test_an_old_master_cuts_what_the_new_master_never_had(tmp_path: Path) -> None:
    async with nodes(tmp_path, 3) as (a, b, c):
        await a.repl.change_to_master(1)
        a.repl.set_sync_state_set({1})
        a.put(120)
        await b.repl.change_to_slave(a.ha_address, 1, 1)
        await until(lambda: b.store.commit_log_max_offset == a.store.commit_log_max_offset, what="catch-up")
        shared = a.store.commit_log_max_offset
        # B is elected (epoch 2) while A, cut off, still takes messages under epoch 1.
        await b.repl.change_to_master(2)
        b.repl.set_sync_state_set({2})
        a.put(80, first=1000, prefix="lost")
        assert a.store.commit_log_max_offset > shared
        assert len(a.store.query_by_key(TOPIC, "lost1010", 5, 0, 1 << 62).records) == 1
        b.put(60, first=2000, prefix="new")
        assert b.epochs() == [(1, 0), (2, shared)]
        assert a.epochs() == [(1, 0)]
        # A comes back as B's slave: its epoch-1 tail past the shared point goes.
        await a.repl.change_to_slave(b.ha_address, 2, 2)
        await until(lambda: a.store.commit_log_max_offset == b.store.commit_log_max_offset, what="catch-up")
        assert a.repl.slave is not None and a.repl.slave.truncated_to == shared
        assert a.epochs() == b.epochs() == [(1, 0), (2, shared)]
        assert log_bytes(a.store) == log_bytes(b.store)
        await until(lambda: queue_contents(a.store) == queue_contents(b.store), what="dispatch")
        for queue_id in range(3):
            assert a.store.get_max_offset(TOPIC, queue_id) == b.store.get_max_offset(TOPIC, queue_id)
        assert not a.store.query_by_key(TOPIC, "lost1010", 5, 0, 1 << 62).records
        assert len(a.store.query_by_key(TOPIC, "new2010", 5, 0, 1 << 62).records) == 1
        # A third broker, empty, joins and gets everything with the same epochs.
        await c.repl.change_to_slave(b.ha_address, 2, 2)
        await until(lambda: c.store.commit_log_max_offset == b.store.commit_log_max_offset, what="catch-up")
        assert c.epochs() == b.epochs()
        # The epoch file on disk says the same after a reload.
        reloaded = type(a.repl.epochs)(a.repl.epochs.path)
        reloaded.load()
        assert [(e.epoch, e.start) for e in reloaded.entries()] == a.epochs()
        # A becomes master again (epoch 3) and B follows: nothing to cut, the logs agree.
        await a.repl.change_to_master(3)
        a.repl.set_sync_state_set({1})
        await b.repl.change_to_slave(a.ha_address, 3, 1)
        a.put(10, first=3000)
        await until(lambda: b.store.commit_log_max_offset == a.store.commit_log_max_offset, what="catch-up")
        assert b.epochs() == a.epochs() == [(1, 0), (2, shared), (3, c.store.commit_log_max_offset)]


async def _fake_slave(
    address: str, broker_id: int, report: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    """A slave written from Apache's layout: a tiny receive buffer, a handshake, one report."""
    host, port = address.split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(struct.pack(">ihhq", 1, 0, 0, broker_id))
    head = await reader.readexactly(20)
    state, size, _max_offset, _epoch = struct.unpack(">iiqi", head)
    assert state == wire.State.HANDSHAKE
    body = await reader.readexactly(size)
    writer.write(struct.pack(">iq", 2, report))
    return reader, writer, body


async def test_a_stalled_slave_leaves_the_sync_state_set(tmp_path: Path) -> None:
    async with nodes(tmp_path, 2, mappedFileSizeCommitLog=1 << 20) as (a, b):
        a.repl.settings.ha_max_time_slave_not_catchup = 500
        await a.repl.change_to_master(4)
        a.put(50)
        await b.repl.change_to_slave(a.ha_address, 4, 1)
        end = a.store.commit_log_max_offset
        reader, writer, body = await _fake_slave(a.ha_address, 3, end)
        try:
            assert struct.unpack(">iq", body) == (4, 0)  # the master's one epoch entry
            await until(lambda: {2, 3} <= set(a.repl.master_side.caught_up), what="both caught up")
            a.repl.set_sync_state_set({1, 2, 3})
            assert a.repl.maybe_shrink_sync_state_set() == {1, 2, 3}
            # Far more than the fake slave (which reads nothing) can take, beyond what the
            # kernel's socket buffers (up to 4 MiB) and the connection's own hold: the master's
            # writer for it stalls, so it no longer catches up; the real slave keeps up.
            for n in range(40):
                a.put(50, first=1000 + n * 50, size=4000)
                await asyncio.sleep(0)
            # The first frame, as Apache's slave reads it: state, body size, offset, epoch, the
            # epoch's start, the confirm offset; then the bytes as they are in the log.
            state, size, offset, epoch, epoch_start, confirm = struct.unpack(
                ">iiqiqq", await reader.readexactly(36)
            )
            assert (state, offset, epoch, epoch_start) == (wire.State.TRANSFER, end, 4, 0)
            assert 0 < size <= a.store.config.ha_transfer_batch_size and confirm >= end
            assert await reader.readexactly(size) == bytes(a.store.commit_log.data_at(end, size) or b"")
            await until(lambda: 3 not in a.repl.maybe_shrink_sync_state_set(), what="the shrink")
            assert a.repl.maybe_shrink_sync_state_set() == {1, 2}
            assert a.repl.master_side.synchronizing
        finally:
            writer.transport.abort()


async def test_epochs_on_becoming_master_again(tmp_path: Path) -> None:
    async with nodes(tmp_path, 1) as (a,):
        await a.repl.change_to_master(2)
        a.put(10)
        end = a.store.commit_log_max_offset
        await a.repl.change_to_master(2)  # the same epoch again (say, after a restart): kept
        assert a.epochs() == [(2, 0)]
        await a.repl.change_to_master(1)  # older than the last one recorded: refused
        assert a.epochs() == [(2, 0)] and a.repl.master_epoch == 2
        await a.repl.change_to_master(4)
        assert a.epochs() == [(2, 0), (4, end)] and a.repl.last_epoch == 4
        await a.repl.change_to_master(5)  # nothing written under 4: no entry (as Apache's)
        assert a.epochs() == [(2, 0), (4, end)] and a.repl.master_epoch == 5
        await a.repl.change_to_slave("127.0.0.1:1", 3, 9)  # older: refused
        assert a.repl.is_master and a.store.replica is a.repl.master_side
