"""The master's side in controller mode: the HA port's connections (Apache's
``AutoSwitchHAConnection``), the SyncStateSet as this master sees it, the confirm offset, and
what a send waits for.

Per connection a reader takes the slave's messages and a writer answers them. The slave's
handshake (its broker id and flags) is answered with this master's epoch list and end; the
slave cuts its log back to where the lists agree and reports its end, which starts the
transfer from there (from the first commit-log file for an empty slave, or its last one with
``syncFromLastFile``). Frames never cross a file's end nor an epoch's, and each is labelled
with its epoch and the confirm offset. Every report acknowledges what precedes it: the slave's
ack offset and when it last caught up are kept by broker id, a slave that reaches this master's
end (and the confirm offset) within the current epoch is proposed for the SyncStateSet, and
one silent for ``haMaxTimeSlaveNotCatchup`` is dropped from it by the periodic shrink.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiorocketmq.broker.store import PutStatus
from aiorocketmq.protocol.loop import cancel_and_wait

from ..security import HandshakeError, RefusalLog
from . import wire

if TYPE_CHECKING:
    from .owner import Owner

log = logging.getLogger(__name__)

#: The writer looks for new commit-log bytes at least this often without a wake-up.
IDLE_CHECK = 0.1


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(eq=False)
class SlaveLink:
    """One slave connection, as the master sees it."""

    address: str
    connected_at: float = field(default_factory=time.time)
    state: wire.State = wire.State.HANDSHAKE
    slave_id: int = -1
    sync_from_last_file: bool = False
    async_learner: bool = False
    #: The slave sent a handshake the writer has not answered yet.
    handshake_pending: bool = False
    #: The first offset the slave reported: where transfer started (-1: none yet).
    request_offset: int = -1
    #: The last offset the slave reported: everything before it is in its commit log.
    ack_offset: int = -1
    #: Where the next frame to this slave starts (-1: not yet known).
    next_offset: int = -1
    #: The master's end when the last frame was sent, and when (ms).
    last_master_max: int = -1
    last_transfer_ms: int = 0
    bytes_sent: int = 0
    last_read_ms: int = 0
    writer: asyncio.StreamWriter | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class MasterSide:
    """The HA port and the master's replication state; serving only while :attr:`active`."""

    def __init__(self, owner: Owner) -> None:
        self.owner = owner
        self.store = owner.store
        self.links: set[SlaveLink] = set()
        self.connections = 0
        self.refusals = RefusalLog()
        self.active = False
        #: The SyncStateSet the controller last confirmed.
        self.local_sync_state_set: set[int] = set()
        #: A change proposed to the controller and not answered yet (Apache's "remote" set).
        self.remote_sync_state_set: set[int] = set()
        self.synchronizing = False
        #: Broker id -> when (ms) that slave last caught up with this master.
        self.caught_up: dict[int, int] = {}
        #: The confirm offset as last computed (or, on a slave, as the master sent it).
        self.stored_confirm = -1
        self._proposed_at: dict[frozenset[int], float] = {}
        self._waiters: list[tuple[int, int, asyncio.Future[PutStatus]]] = []
        self._seq = itertools.count()
        self._server: asyncio.Server | None = None
        self.port = 0

    # -- lifecycle ------------------------------------------------------------------------------

    async def open(self, host: str, port: int) -> int:
        security = self.owner.security
        tls = security.server_ssl
        self._server = await asyncio.start_server(
            self._accept,
            host,
            port,
            reuse_address=True,
            ssl=tls,
            ssl_handshake_timeout=security.handshake_timeout if tls is not None else None,
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        log.info("HA port (controller mode) open on %s:%d", host, self.port)
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        await self.deactivate()

    def activate(self) -> None:
        self.active = True

    async def deactivate(self) -> None:
        """Stop serving: every connection closed (without touching the SyncStateSet) and every
        waiting send answered FLUSH_SLAVE_TIMEOUT."""
        self.active = False
        links = list(self.links)
        for link in links:
            self._drop(link, "no longer master", notify=False)
        await cancel_and_wait(*(task for link in links for task in link.tasks))
        self.caught_up.clear()
        for _, _, future in self._waiters:
            if not future.done():
                future.set_result(PutStatus.FLUSH_SLAVE_TIMEOUT)
        self._waiters.clear()

    def wake(self, *_: object) -> None:
        """New commit-log bytes: every writer looks now (a store arrival listener)."""
        for link in self.links:
            link.wake.set()

    # -- the SyncStateSet -------------------------------------------------------------------------

    @property
    def sync_state_set(self) -> set[int]:
        """The confirmed set, with a proposed change still unanswered (Apache's union)."""
        if self.synchronizing:
            return self.local_sync_state_set | self.remote_sync_state_set
        return set(self.local_sync_state_set)

    def set_sync_state_set(self, ids: set[int]) -> None:
        self.synchronizing = False
        self.local_sync_state_set = set(ids)
        self._proposed_at.clear()
        self.stored_confirm = self.compute_confirm_offset()
        self._settle_waiters()
        if self.active:
            self.store.dispatch_confirmed()

    def _mark_synchronizing(self, proposed: set[int]) -> None:
        self.synchronizing = True
        self.remote_sync_state_set = set(proposed)

    def _propose(self, proposed: set[int], callback: Callable[[set[int]], None] | None) -> None:
        key = frozenset(proposed)
        now = time.monotonic()
        # Apache proposes again on every report until the controller answers; once a second
        # is enough to survive a lost request.
        if now - self._proposed_at.get(key, -10.0) < 1.0:
            return
        self._proposed_at[key] = now
        self._mark_synchronizing(proposed)
        log.info("SyncStateSet: proposing %s", sorted(proposed))
        if callback is not None:
            asyncio.get_running_loop().call_soon(_call, callback, set(proposed))

    def in_sync_replicas(self) -> int:
        """How many replicas count as in sync (Apache's ``inSyncReplicasNums``); the master
        alone before any SyncStateSet is known."""
        local = len(self.local_sync_state_set) or 1
        if self.synchronizing:
            return max(local, len(self.remote_sync_state_set))
        return local

    def update_caught_up(self, slave_id: int, when_ms: int) -> None:
        self.caught_up[slave_id] = max(self.caught_up.get(slave_id, 0), when_ms)

    def maybe_expand(self, slave_id: int, slave_max: int) -> None:
        local = self.local_sync_state_set
        if slave_id in local:
            return
        confirm = self.confirm_offset()
        if slave_max < confirm:
            return
        last = self.owner.epochs.last()
        if last is None or slave_max < last.start:
            return
        log.info(
            "slave %d caught up: offset %d, confirm offset %d, epoch %d from %d",
            slave_id,
            slave_max,
            confirm,
            last.epoch,
            last.start,
        )
        self._propose(local | {slave_id}, self.owner.on_sync_state_set_expand)

    def maybe_shrink(self) -> set[int]:
        """The SyncStateSet without the slaves that have not caught up within
        ``haMaxTimeSlaveNotCatchup`` or are not connected (Apache's ``maybeShrinkSyncStateSet``)."""
        proposed = set(self.local_sync_state_set)
        limit = self.owner.settings.ha_max_time_slave_not_catchup
        now = now_ms()
        changed = False
        for slave_id, when in self.caught_up.items():
            if slave_id in proposed and now - when > limit:
                proposed.discard(slave_id)
                changed = True
        local_id = self.owner.local_broker_id
        for slave_id in list(proposed):
            if slave_id != local_id and slave_id not in self.caught_up:
                proposed.discard(slave_id)
                changed = True
        if changed:
            self._mark_synchronizing(proposed)
        return proposed

    # -- the confirm offset -----------------------------------------------------------------------

    def confirm_offset(self) -> int:
        """Apache's ``getConfirmOffset``: on a master, its end when it alone is in sync or
        sends need not wait for the whole SyncStateSet, else the offset every in-sync slave
        has acknowledged; on a slave, what its master last said (within its own log)."""
        if self.active:
            if len(self.local_sync_state_set) <= 1 or not self.owner.settings.all_ack_in_sync_state_set:
                return self.store.commit_log_max_offset
            if self.stored_confirm < 0:
                self.stored_confirm = self.compute_confirm_offset()
        return self.stored_confirm

    def _confirm_directly(self) -> int:
        if self.active and len(self.local_sync_state_set) <= 1:
            return self.store.commit_log_max_offset
        return self.stored_confirm

    def compute_confirm_offset(self) -> int:
        """The smallest ack of the connected in-sync slaves (the master's end without any);
        the last value while an in-sync slave is not connected."""
        members = self.sync_state_set
        confirm = self.store.commit_log_max_offset
        connected = {link.slave_id for link in self.links}
        local_id = self.owner.local_broker_id
        for member in members:
            if member not in connected and member != local_id:
                return self._confirm_directly()
        for link in self.links:
            if link.slave_id in members and link.ack_offset > 0:
                confirm = min(confirm, link.ack_offset)
        return confirm

    def lower_confirm(self, offset: int) -> None:
        """The log was cut back to ``offset``."""
        if self.stored_confirm > offset:
            self.stored_confirm = offset

    # -- sends ------------------------------------------------------------------------------------

    def _acked(self, end_offset: int) -> bool:
        settings = self.owner.settings
        if settings.all_ack_in_sync_state_set:
            members = self.sync_state_set
            if len(members) <= 1:
                return True
            acks = 1 + sum(
                1 for link in self.links if link.slave_id in members and link.ack_offset >= end_offset
            )
            return acks >= len(members)
        need = settings.in_sync_replicas
        if need <= 1:
            return True
        acks = 1 + sum(1 for link in self.links if link.ack_offset >= end_offset)
        return acks >= need

    def in_sync_replicas_enough(self) -> bool:
        """Apache refuses a send before storing it (IN_SYNC_REPLICAS_NOT_ENOUGH) when fewer
        replicas than ``minInSyncReplicas`` are in sync."""
        return self.in_sync_replicas() >= self.owner.settings.min_in_sync_replicas

    def slave_ok(self, end_offset: int) -> bool:
        """Whether a send ending at ``end_offset`` can be acknowledged by enough replicas now
        or once they catch up: enough in sync, and the replicas it waits for connected."""
        if not self.active or not self.in_sync_replicas_enough():
            return False
        settings = self.owner.settings
        if settings.all_ack_in_sync_state_set:
            connected = {link.slave_id for link in self.links}
            local_id = self.owner.local_broker_id
            return all(member == local_id or member in connected for member in self.sync_state_set)
        return settings.in_sync_replicas <= 1 or len(self.links) + 1 >= settings.in_sync_replicas

    async def wait(self, end_offset: int) -> PutStatus:
        """A send that waits for its message: PUT_OK once the replicas Apache's
        ``GroupTransferService`` waits for have it (every SyncStateSet member with
        ``allAckInSyncStateSet``, else ``inSyncReplicas`` replicas counting this one),
        FLUSH_SLAVE_TIMEOUT after ``slaveTimeout``. With fewer than ``minInSyncReplicas`` in
        sync it answers SLAVE_NOT_AVAILABLE at once (the message is stored; Apache refuses it
        before storing, see :meth:`in_sync_replicas_enough`)."""
        if not self.active:
            return PutStatus.PUT_OK
        if not self.in_sync_replicas_enough():
            return PutStatus.SLAVE_NOT_AVAILABLE
        if self._acked(end_offset):
            return PutStatus.PUT_OK
        loop = asyncio.get_running_loop()
        future: asyncio.Future[PutStatus] = loop.create_future()
        heapq.heappush(self._waiters, (end_offset, next(self._seq), future))
        timer = loop.call_later(self.store.config.slave_timeout / 1000, _expire, future)
        self.wake()
        try:
            return await future
        finally:
            timer.cancel()

    def _settle_waiters(self) -> None:
        waiters = self._waiters
        while waiters:
            end, _, future = waiters[0]
            if future.done():
                heapq.heappop(waiters)
                continue
            if not self._acked(end):
                break
            heapq.heappop(waiters)
            future.set_result(PutStatus.PUT_OK)

    # -- connections ------------------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        address = f"{peer[0]}:{peer[1]}" if peer else "?"
        security = self.owner.security
        if not self.active:
            writer.transport.abort()
            log.info("HA port: %s refused: this broker is not a master", address)
            return
        if self.connections >= security.max_connections:
            writer.transport.abort()
            self.refusals.refused("HA port: refused %s: already %d connections", address, self.connections)
            return
        self.connections += 1
        try:
            await self._serve(address, reader, writer)
        finally:
            self.connections -= 1

    async def _serve(self, address: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        security = self.owner.security
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        writer.transport.set_write_buffer_limits(high=security.write_buffer_limit)
        if security.auth:
            try:
                await security.admit_slave(reader, writer)
            except (HandshakeError, OSError) as exc:
                writer.transport.abort()
                self.refusals.refused("HA port: refused %s: %s", address, exc)
                return
        if not self.active:
            writer.transport.abort()
            return
        link = SlaveLink(address, writer=writer, last_read_ms=now_ms())
        self.links.add(link)
        log.info("slave %s connected to the HA port (%d connected)", address, len(self.links))
        link.tasks = [
            asyncio.ensure_future(self._read(link, reader)),
            asyncio.ensure_future(self._write(link)),
        ]
        done, _ = await asyncio.wait(link.tasks, return_when=asyncio.FIRST_COMPLETED)
        reason = "closed"
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                reason = str(task.exception())
        self._drop(link, reason, notify=True)
        await cancel_and_wait(*link.tasks)

    def _drop(self, link: SlaveLink, reason: str, *, notify: bool) -> None:
        if link not in self.links:
            return
        self.links.discard(link)
        if link.writer is not None:
            link.writer.transport.abort()
        log.info(
            "slave %s (broker id %d) disconnected from the HA port: %s", link.address, link.slave_id, reason
        )
        for task in link.tasks:
            task.cancel()
        if notify and self.active and link.slave_id in self.local_sync_state_set:
            # Apache's removeConnection: the slave leaves the SyncStateSet at once.
            proposed = self.local_sync_state_set - {link.slave_id}
            self._mark_synchronizing(proposed)
            log.info("SyncStateSet: slave %d disconnected, proposing %s", link.slave_id, sorted(proposed))
            callback = self.owner.on_sync_state_set_shrink or self.owner.on_sync_state_set_expand
            if callback is not None:
                asyncio.get_running_loop().call_soon(_call, callback, proposed)

    async def _read(self, link: SlaveLink, reader: asyncio.StreamReader) -> None:
        messages = wire.SlaveMessageReader()
        idle = self.owner.store.config.ha_housekeeping_interval / 1000
        while True:
            try:
                async with asyncio.timeout(idle):
                    data = await reader.read(65536)
            except TimeoutError:
                raise ConnectionError(f"nothing from the slave for {idle:.0f}s") from None
            if not data:
                return
            link.last_read_ms = now_ms()
            for message in messages.feed(data):
                if isinstance(message, wire.SlaveHandshake):
                    link.slave_id = message.broker_id
                    link.sync_from_last_file = message.sync_from_last_file
                    link.async_learner = message.async_learner
                    link.state = wire.State.HANDSHAKE
                    link.handshake_pending = True
                    log.info(
                        "slave %s handshake: broker id %d, syncFromLastFile %s, asyncLearner %s",
                        link.address,
                        message.broker_id,
                        message.sync_from_last_file,
                        message.async_learner,
                    )
                else:
                    self._reported(link, message)
                link.wake.set()

    def _reported(self, link: SlaveLink, offset: int) -> None:
        link.ack_offset = offset
        if link.request_offset < 0:
            link.request_offset = offset
        link.state = wire.State.TRANSFER
        if not link.async_learner and offset >= link.last_master_max:
            end = self.store.commit_log_max_offset
            self.update_caught_up(link.slave_id, now_ms() if end == offset else link.last_transfer_ms)
            self.maybe_expand(link.slave_id, offset)
        if link.slave_id in self.local_sync_state_set:
            self.stored_confirm = self.compute_confirm_offset()
        self._settle_waiters()
        # The records every in-sync slave now holds become visible.
        self.store.dispatch_confirmed()

    async def _write(self, link: SlaveLink) -> None:
        writer = link.writer
        assert writer is not None
        store = self.store
        config = store.config
        heartbeat = config.ha_send_heartbeat_interval / 1000
        last_write = time.monotonic()
        complained = False
        while True:
            link.wake.clear()
            if link.handshake_pending:
                link.handshake_pending = False
                epochs = self.owner.epochs
                entries = [(e.epoch, e.start) for e in epochs.entries()]
                writer.write(
                    wire.encode_master_handshake(store.commit_log_max_offset, epochs.last_epoch, entries)
                )
                last_write = time.monotonic()
                await self._drain(link)
                continue
            if link.state is wire.State.TRANSFER and link.request_offset >= 0:
                if link.next_offset < 0:
                    link.next_offset = self._start_offset(link)
                    log.info(
                        "slave %s: transfer starts at commit-log offset %d", link.address, link.next_offset
                    )
                if self._send_frame(link):
                    last_write = time.monotonic()
                    if writer.transport.get_write_buffer_size() > self.owner.security.write_buffer_limit:
                        await self._drain(link)
                    continue
                self.update_caught_up(link.slave_id, now_ms())
                if not complained and (
                    link.next_offset < store.commit_log_min_offset
                    or link.next_offset > store.commit_log_max_offset
                ):
                    complained = True
                    log.error(
                        "slave %s needs commit-log offset %d; this master holds [%d, %d)",
                        link.address,
                        link.next_offset,
                        store.commit_log_min_offset,
                        store.commit_log_max_offset,
                    )
                await self._drain(link)
                now = time.monotonic()
                if now - last_write >= heartbeat:
                    writer.write(self._header(link.next_offset, 0))
                    last_write = now
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(IDLE_CHECK, heartbeat)):
                    await link.wake.wait()

    def _start_offset(self, link: SlaveLink) -> int:
        commit_log = self.store.commit_log
        if link.request_offset != 0:
            return link.request_offset
        if link.sync_from_last_file:
            end = commit_log.max_offset
            return max(0, end - end % commit_log.file_size)
        return commit_log.min_offset

    def _header(self, offset: int, size: int) -> bytes:
        epochs = self.owner.epochs
        entry = epochs.find_by_offset(offset) or epochs.last() or epochs.first()
        epoch, start = (entry.epoch, entry.start) if entry is not None else (-1, 0)
        return wire.encode_transfer_header(offset, size, epoch, start, self.confirm_offset())

    def _send_frame(self, link: SlaveLink) -> bool:
        """Send the commit-log bytes at ``link.next_offset`` (one frame, within one file and
        one epoch); False when there are none."""
        store = self.store
        offset = link.next_offset
        data = store.commit_log.data_at(offset, store.config.ha_transfer_batch_size)
        if data is None or not len(data):
            return False
        entry = self.owner.epochs.find_by_offset(offset)
        if entry is None:
            return False
        size = min(len(data), entry.end - offset)
        assert link.writer is not None
        link.writer.write(
            wire.encode_transfer_header(offset, size, entry.epoch, entry.start, self.confirm_offset())
        )
        link.writer.write(bytes(data[:size]))
        link.next_offset = offset + size
        link.bytes_sent += size
        link.last_master_max = store.commit_log_max_offset
        link.last_transfer_ms = now_ms()
        return True

    async def _drain(self, link: SlaveLink) -> None:
        assert link.writer is not None
        timeout = self.owner.security.write_timeout
        try:
            async with asyncio.timeout(timeout):
                await link.writer.drain()
        except TimeoutError:
            waiting = link.writer.transport.get_write_buffer_size()
            raise ConnectionError(f"not reading: {waiting} bytes unread for {timeout:.0f}s") from None

    # -- state ------------------------------------------------------------------------------------

    def ack_offsets(self) -> dict[int, int]:
        """Each connected slave's broker id and acknowledged offset."""
        return {link.slave_id: link.ack_offset for link in self.links}


def _expire(future: asyncio.Future[PutStatus]) -> None:
    if not future.done():
        future.set_result(PutStatus.FLUSH_SLAVE_TIMEOUT)


def _call(callback: Callable[[set[int]], None], proposed: set[int]) -> None:
    try:
        callback(proposed)
    except Exception:
        log.exception("SyncStateSet callback %r failed", callback)
