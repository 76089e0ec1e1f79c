"""The slave's side in controller mode (Apache's ``AutoSwitchHAClient``): connect to the
master's HA port, say who this broker is, compare epoch lists, cut the local log back to where
they agree, then append what the master streams and report the new end after each frame.

Before each connection the torn tail of the replicated log (a record only partly received) is
cut off. The master's epochs are recorded as the frames announce them; its confirm offset
(bounded by the local end) is kept for :meth:`AutoSwitchReplication.confirm_offset`. A failed
connection is retried every second; a master silent for ``haHousekeepingInterval`` is left; an
idle link re-reports its offset every ``haSendHeartbeatInterval``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from typing import TYPE_CHECKING

from aiorocketmq.broker.store.mapped_file import StoreError
from aiorocketmq.protocol.loop import cancel_and_wait
from aiorocketmq.protocol.message import split_address

from . import store_ops, wire
from .epoch import Epoch, EpochFileCache

if TYPE_CHECKING:
    from .owner import SlaveOwner

log = logging.getLogger(__name__)

RETRY_SECONDS = 1.0
#: After a failed epoch comparison (Apache waits 2 s before the next attempt).
DIVERGED_RETRY_SECONDS = 2.0
CONNECT_TIMEOUT = 3.0


class SlaveClient:
    """A slave's link to its master's HA port (one per master address and broker id)."""

    def __init__(self, owner: SlaveOwner, master_address: str, broker_id: int) -> None:
        self.owner = owner
        self.store = owner.store
        self.master_address = master_address
        self.broker_id = broker_id
        self.state = wire.State.READY
        self.connected = False
        self.connects = 0
        self.reported_offset = -1
        self.bytes_received = 0
        self.last_error = ""
        self.last_read_ms = 0
        self.last_write_ms = 0
        #: Where the last epoch comparison cut the log (-1: not yet).
        self.truncated_to = -1
        #: Set after each completed handshake (tests and role changes wait on it).
        self.handshaken = asyncio.Event()
        self._received_epoch = -1
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        if self._writer is not None:
            self._writer.transport.abort()
            self._writer = None
        self.state = wire.State.SHUTDOWN
        self.connected = False

    async def _run(self) -> None:
        while True:
            self.state = wire.State.READY
            cut = store_ops.truncate_invalid(self.store)
            if cut >= 0:
                self.owner.epochs.truncate_suffix_by_offset(cut)
                self.owner.master_side.lower_confirm(cut)
            wait = RETRY_SECONDS
            try:
                await self._session()
                self.last_error = f"master {self.master_address} closed the connection"
            except _Diverged as exc:
                self.last_error = str(exc)
                wait = DIVERGED_RETRY_SECONDS
            except (OSError, TimeoutError, ValueError, StoreError) as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
            except Exception as exc:  # a bug: logged in full, and the link is tried again
                log.exception("replication from %s failed", self.master_address)
                self.last_error = f"{type(exc).__name__}: {exc}"
            self.connected = False
            log.warning("replication from %s stopped: %s", self.master_address, self.last_error)
            await asyncio.sleep(wait)

    async def _session(self) -> None:
        host, port = split_address(self.master_address)
        security = self.owner.security
        tls = security.client_ssl
        async with asyncio.timeout(CONNECT_TIMEOUT + (security.handshake_timeout if tls else 0)):
            reader, writer = await asyncio.open_connection(
                host,
                port,
                ssl=tls,
                server_hostname=host if tls is not None else None,
                ssl_handshake_timeout=security.handshake_timeout if tls is not None else None,
            )
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            if security.auth:
                await security.prove_slave(reader, writer)
            self._writer = writer
            self.connected = True
            self.connects += 1
            self._received_epoch = -1
            self.state = wire.State.HANDSHAKE
            settings = self.owner.settings
            writer.write(
                wire.encode_slave_handshake(
                    self.broker_id,
                    sync_from_last_file=settings.sync_from_last_file,
                    async_learner=settings.async_learner,
                )
            )
            self.last_write_ms = _now_ms()
            self.last_read_ms = _now_ms()
            log.info("connected to master HA port %s as broker %d", self.master_address, self.broker_id)
            heartbeat = asyncio.ensure_future(self._heartbeat())
            try:
                await self._receive(reader)
            finally:
                await cancel_and_wait(heartbeat)
        finally:
            writer.transport.abort()
            self._writer = None

    async def _receive(self, reader: asyncio.StreamReader) -> None:
        batch = self.store.config.ha_transfer_batch_size
        messages = wire.MasterMessageReader(max_body=max(batch, 1 << 20) * 64)
        while True:
            data = await reader.read(1 << 20)
            if not data:
                return
            self.last_read_ms = _now_ms()
            for message in messages.feed(data):
                if isinstance(message[0], wire.TransferHeader):
                    header, body = message
                    assert isinstance(header, wire.TransferHeader) and isinstance(body, bytes)
                    self._transfer(header, body)
                else:
                    master_max, _last_epoch, entries = message
                    assert isinstance(master_max, int) and isinstance(entries, list)
                    self._handshake(master_max, entries)

    def _handshake(self, master_max: int, entries: list[tuple[int, int]]) -> None:
        if self.state is not wire.State.HANDSHAKE:
            raise ValueError(f"the master sent a handshake in state {self.state.name}")
        epochs = self.owner.epochs
        store = self.store
        local_max = store.commit_log_max_offset
        log.info(
            "master %s: end %d, epochs %s; local end %d, epochs %s",
            self.master_address,
            master_max,
            entries,
            local_max,
            epochs.describe(),
        )
        if len(epochs):
            theirs = EpochFileCache()
            theirs.init_from(Epoch(epoch, start) for epoch, start in entries)
            theirs.set_last_end(master_max)
            mine = EpochFileCache()
            mine.init_from(epochs.entries())
            mine.set_last_end(local_max)
            point = mine.find_consistent_point(theirs)
            if point < 0:
                raise _Diverged(
                    f"no epoch in common with the master: master {theirs.describe()}, local {mine.describe()}"
                )
            if not store_ops.truncate(store, point):
                raise _Diverged(f"cannot cut the commit log back to {point}")
            epochs.truncate_suffix_by_offset(point)
            self.owner.master_side.lower_confirm(point)
            self.truncated_to = point
            log.info("consistent with the master up to %d; local epochs now %s", point, epochs.describe())
        else:
            self.truncated_to = local_max
        self.state = wire.State.TRANSFER
        # Apache's slave reports only once its log grows (or at the heartbeat); reporting now
        # starts the transfer at once.
        self._report(store.commit_log_max_offset)
        self.handshaken.set()

    def _transfer(self, header: wire.TransferHeader, body: bytes) -> None:
        if self.state is not wire.State.TRANSFER:
            raise ValueError(f"the master sent a transfer frame in state {self.state.name}")
        store = self.store
        local = store.commit_log_max_offset
        if local != 0 and local != header.offset:
            raise ValueError(f"master pushed offset {header.offset}, not this slave's end {local}")
        if header.epoch != self._received_epoch:
            self._received_epoch = header.epoch
            self.owner.epochs.append(header.epoch, header.epoch_start)
        if body:
            store.append_replicated(header.offset, body, dispatch=False)
            self.bytes_received += len(body)
        end = store.commit_log_max_offset
        self.owner.master_side.stored_confirm = min(header.confirm_offset, end)
        # Consumers of this slave see up to the master's confirm offset (under the store's
        # dispatch limit; everything without it).
        store.dispatch_replicated()
        if end > self.reported_offset:
            self._report(end)

    def _report(self, offset: int) -> None:
        writer = self._writer
        if writer is None:
            return
        writer.write(wire.encode_report(offset))
        self.reported_offset = offset
        self.last_write_ms = _now_ms()

    async def _heartbeat(self) -> None:
        config = self.store.config
        interval = config.ha_send_heartbeat_interval
        housekeeping = config.ha_housekeeping_interval
        while True:
            await asyncio.sleep(min(interval / 1000, 1.0))
            now = _now_ms()
            if now - self.last_read_ms > housekeeping:
                log.warning("nothing from the master for %d ms; reconnecting", housekeeping)
                if self._writer is not None:
                    self._writer.transport.abort()
                return
            if self.state is wire.State.TRANSFER and now - self.last_write_ms >= interval:
                self._report(max(self.reported_offset, 0))

    def runtime_info(self) -> dict[str, str]:
        return {
            "haMasterAddress": self.master_address,
            "haConnected": "true" if self.connected else "false",
            "haState": self.state.name,
            "haReportedOffset": str(self.reported_offset),
            "haBytesReceived": str(self.bytes_received),
            "haLastError": self.last_error,
            "haConnects": str(self.connects),
        }


class _Diverged(Exception):
    """The local log cannot be made a prefix of the master's."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
