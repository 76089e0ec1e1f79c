"""The master's side of replication: the HA port (``listenPort + 1``), one connection per
slave, and SYNC_MASTER's wait for a slave's ack.

Per slave, a reader takes its offset reports (each one acknowledges everything before it) and a
writer streams the commit log to it from where it asked, in frames of at most
``haTransferBatchSize`` bytes that never cross a file's end; idle, it sends a heartbeat frame
every ``haSendHeartbeatInterval``. A send waiting for replication awaits a future keyed by its
end offset; acks resolve the futures they pass, so nothing polls and no connection waits on
another.

Before any of that, :mod:`.security` has its say: past ``haMaxConnections`` a connection is
refused; with the replication account configured a peer must pass the signed handshake before
it is a slave (gets a byte of the log, or its acks count); and a slave that leaves more than
``haWriteBufferLimit`` bytes unread for ``haWriteTimeout`` is disconnected, so what the master
holds for its slaves stays bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import socket
import time
from dataclasses import dataclass, field

from aiorocketmq.broker.store import MessageStore, PutStatus, StoreConfig
from aiorocketmq.protocol.loop import cancel_and_wait

from .security import HandshakeError, HaSecurity, RefusalLog
from .wire import OffsetReader, encode_header

log = logging.getLogger(__name__)

#: The writer looks for new commit-log bytes at least this often without a wake-up (RocketMQ's
#: 100 ms), so replication never depends on a notification alone.
IDLE_CHECK = 0.1


@dataclass(eq=False)
class SlaveLink:
    """One connected slave, as the master sees it."""

    address: str
    connected_at: float = field(default_factory=time.time)
    #: The first offset the slave reported: where transfer started (-1: none yet).
    request_offset: int = -1
    #: The last offset the slave reported: everything before it is in its commit log.
    ack_offset: int = -1
    #: Where the next frame to this slave starts.
    next_offset: int = -1
    bytes_sent: int = 0
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    requested: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class ReplicationMaster:
    """The HA port of an ASYNC_MASTER or SYNC_MASTER."""

    def __init__(
        self, store: MessageStore, config: StoreConfig, *, sync: bool, security: HaSecurity | None = None
    ) -> None:
        self.store = store
        self.config = config
        self.sync = sync
        self.security = security or HaSecurity()
        #: The slaves: connections past the cap and (when configured) the handshake.
        self.links: set[SlaveLink] = set()
        #: Every open connection, slave or not yet (what the cap counts).
        self.connections = 0
        #: Connections turned away at the cap or the handshake (and the log of them).
        self.refusals = RefusalLog()
        #: Slaves dropped for leaving what they were sent unread.
        self.stalled = 0
        #: The highest offset any slave has acknowledged (RocketMQ's ``push2SlaveMaxOffset``).
        self.acked_offset = 0
        #: Slaves turned away because they reported more log than the master has.
        self.refused = 0
        self.last_refusal = ""
        self._waiters: list[tuple[int, int, asyncio.Future[PutStatus]]] = []
        self._seq = itertools.count()
        self._server: asyncio.Server | None = None
        self.port = 0

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self, host: str, port: int) -> int:
        tls = self.security.server_ssl
        self._server = await asyncio.start_server(
            self._accept,
            host,
            port,
            reuse_address=True,
            ssl=tls,
            ssl_handshake_timeout=self.security.handshake_timeout if tls is not None else None,
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        log.info("HA port open on %s:%d (%s)", host, self.port, "SYNC_MASTER" if self.sync else "ASYNC")
        log.info(
            "HA port guards: %s; at most %d connections; a slave leaving %d bytes unread for %.0fs is dropped",
            self.security.describe(),
            self.security.max_connections,
            self.security.write_buffer_limit,
            self.security.write_timeout,
        )
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        links = list(self.links)
        for link in links:
            self._drop(link, "master shutting down")
        await cancel_and_wait(*(task for link in links for task in link.tasks))
        for _, _, future in self._waiters:
            if not future.done():
                future.set_result(PutStatus.FLUSH_SLAVE_TIMEOUT)
        self._waiters.clear()

    # -- the store's side ---------------------------------------------------------------------

    def wake(self, *_: object) -> None:
        """New commit-log bytes: every writer looks now (an arrival listener of the store)."""
        for link in self.links:
            link.wake.set()

    def slave_ok(self, end_offset: int) -> bool:
        """RocketMQ's rule: a slave is connected and lags less than ``haSlaveFallbehindMax``."""
        return bool(self.links) and end_offset - self.acked_offset < self.config.ha_slave_fallbehind_max

    async def wait(self, end_offset: int) -> PutStatus:
        """SYNC_MASTER: PUT_OK once a slave acknowledged ``end_offset``; SLAVE_NOT_AVAILABLE at
        once when none is fit to wait for; FLUSH_SLAVE_TIMEOUT after ``slaveTimeout``."""
        if not self.sync:
            return PutStatus.PUT_OK
        if not self.slave_ok(end_offset):
            return PutStatus.SLAVE_NOT_AVAILABLE
        if self.acked_offset >= end_offset:
            return PutStatus.PUT_OK
        loop = asyncio.get_running_loop()
        future: asyncio.Future[PutStatus] = loop.create_future()
        heapq.heappush(self._waiters, (end_offset, next(self._seq), future))
        timer = loop.call_later(self.config.slave_timeout / 1000, _expire, future)
        self.wake()
        try:
            return await future
        finally:
            timer.cancel()

    def _acked(self, link: SlaveLink, offset: int) -> None:
        link.ack_offset = offset
        if link.request_offset < 0:
            link.request_offset = offset
            link.requested.set()
        if offset > self.acked_offset:
            self.acked_offset = offset
            waiters = self._waiters
            while waiters and waiters[0][0] <= offset:
                future = heapq.heappop(waiters)[2]
                if not future.done():
                    future.set_result(PutStatus.PUT_OK)

    # -- connections --------------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        address = f"{peer[0]}:{peer[1]}" if peer else "?"
        security = self.security
        if self.connections >= security.max_connections:
            writer.transport.abort()
            self.refusals.refused(
                "HA port: refused %s: already %d connections (haMaxConnections)", address, self.connections
            )
            return
        self.connections += 1
        try:
            await self._serve(address, reader, writer)
        finally:
            self.connections -= 1

    async def _serve(self, address: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        security = self.security
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
        link = SlaveLink(address, reader=reader, writer=writer)
        self.links.add(link)
        log.info("slave %s connected to the HA port (%d connected)", address, len(self.links))
        link.tasks = [
            asyncio.ensure_future(self._read(link)),
            asyncio.ensure_future(self._transfer(link)),
        ]
        done, _ = await asyncio.wait(link.tasks, return_when=asyncio.FIRST_COMPLETED)
        reason = "closed"
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                reason = str(task.exception())
        self._drop(link, reason)
        await cancel_and_wait(*link.tasks)

    def _drop(self, link: SlaveLink, reason: str) -> None:
        if link not in self.links:
            return
        self.links.discard(link)
        if link.writer is not None:
            link.writer.transport.abort()
        log.info("slave %s disconnected from the HA port: %s", link.address, reason)
        for task in link.tasks:
            task.cancel()

    async def _read(self, link: SlaveLink) -> None:
        assert link.reader is not None
        offsets = OffsetReader()
        idle = self.config.ha_housekeeping_interval / 1000
        while True:
            try:
                async with asyncio.timeout(idle):
                    data = await link.reader.read(65536)
            except TimeoutError:
                raise ConnectionError(f"nothing from the slave for {idle:.0f}s") from None
            if not data:
                return
            offset = offsets.feed(data)
            if offset is None:
                continue
            master_end = self.store.commit_log_max_offset
            if offset > master_end:
                self.refused += 1
                self.last_refusal = (
                    f"slave {link.address} reports commit-log offset {offset}, beyond this master's "
                    f"end {master_end}: its log has diverged from the master's; refusing it"
                )
                log.error("%s", self.last_refusal)
                raise ConnectionError("slave ahead of master")
            self._acked(link, offset)

    async def _transfer(self, link: SlaveLink) -> None:
        assert link.writer is not None
        writer = link.writer
        await link.requested.wait()
        commit_log = self.store.commit_log
        if link.request_offset == 0:
            # An empty slave starts at the master's last commit-log file, as RocketMQ's does.
            end = commit_log.max_offset
            link.next_offset = end - end % commit_log.file_size
        else:
            link.next_offset = link.request_offset
        log.info("slave %s: transfer starts at commit-log offset %d", link.address, link.next_offset)
        batch = self.config.ha_transfer_batch_size
        heartbeat = self.config.ha_send_heartbeat_interval / 1000
        transport = writer.transport
        last_write = time.monotonic()
        gone_logged = False
        while True:
            link.wake.clear()
            data = commit_log.data_at(link.next_offset, batch)
            if data is not None:
                offset = link.next_offset
                writer.write(encode_header(offset, len(data)) + data)
                link.next_offset = offset + len(data)
                link.bytes_sent += len(data)
                last_write = time.monotonic()
                if transport.get_write_buffer_size() > self.security.write_buffer_limit:
                    await self._drain(link)
                continue
            if link.next_offset < commit_log.min_offset and not gone_logged:
                gone_logged = True
                log.error(
                    "slave %s needs commit-log offset %d, which this master no longer has (from %d)",
                    link.address,
                    link.next_offset,
                    commit_log.min_offset,
                )
            await self._drain(link)
            now = time.monotonic()
            if now - last_write >= heartbeat:
                writer.write(encode_header(link.next_offset, 0))
                last_write = now
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(IDLE_CHECK, heartbeat)):
                    await link.wake.wait()

    async def _drain(self, link: SlaveLink) -> None:
        """Wait until the slave has read what is queued for it, but not for ever: a peer that
        stops reading would otherwise pin a full buffer each."""
        assert link.writer is not None
        timeout = self.security.write_timeout
        try:
            async with asyncio.timeout(timeout):
                await link.writer.drain()
        except TimeoutError:
            self.stalled += 1
            waiting = link.writer.transport.get_write_buffer_size()
            self.refusals.note(
                "HA port: dropping %s: it read nothing of %d bytes for %.0fs (haWriteTimeout)",
                link.address,
                waiting,
                timeout,
            )
            raise ConnectionError(f"not reading: {waiting} bytes unread for {timeout:.0f}s") from None

    # -- state --------------------------------------------------------------------------------

    def slaves(self) -> list[dict[str, str]]:
        """Each connected slave: address, acked offset and lag in bytes."""
        end = self.store.commit_log_max_offset
        return [
            {
                "address": link.address,
                "ackOffset": str(link.ack_offset),
                "lagBytes": str(max(0, end - link.ack_offset) if link.ack_offset >= 0 else end),
                "bytesSent": str(link.bytes_sent),
            }
            for link in sorted(self.links, key=lambda link: link.connected_at)
        ]

    def runtime_info(self) -> dict[str, str]:
        end = self.store.commit_log_max_offset
        acks = [link.ack_offset for link in self.links if link.ack_offset >= 0]
        info = {
            "haConnectionCount": str(len(self.links)),
            # How far the best slave is behind, in bytes (0 without slaves: nothing to lag).
            "commitLogDiff": str(end - max(acks) if acks else 0),
            "haPush2SlaveMaxOffset": str(self.acked_offset),
            "haSlavesRefused": str(self.refused),
            "haConnectionsRefused": str(self.refusals.count),
            "haUnreadDropped": str(self.stalled),
        }
        for i, slave in enumerate(self.slaves()):
            info[f"haSlave{i}"] = (
                f"{slave['address']} ackOffset={slave['ackOffset']} lagBytes={slave['lagBytes']}"
            )
        return info


def _expire(future: asyncio.Future[PutStatus]) -> None:
    if not future.done():
        future.set_result(PutStatus.FLUSH_SLAVE_TIMEOUT)
