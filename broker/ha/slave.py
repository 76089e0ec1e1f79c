"""The slave's side of replication: connect to the master's HA port, report the local commit
log's end, append what the master streams at exactly that offset, and let the store build the
consume queues and index from the appended records.

The master's HA address is ``haMasterAddress`` when set, else what the name server answers to
this broker's registration. A failed connect is retried every second (RocketMQ waits 5 s); a broken
connection is replaced at once. A frame that does not start where the local log ends, or bytes
that are not records where records must start, mean the two logs have diverged: the slave
refuses them, says so, and reconnects (the master then resends from the slave's true end).
With ``haTlsEnable`` the link is TLS, and with the replication account configured the slave
passes the signed handshake (and checks the master's answer) before it reports an offset
(:mod:`.security`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time

from aiorocketmq.broker.store import MessageStore, StoreConfig
from aiorocketmq.broker.store.mapped_file import StoreError
from aiorocketmq.protocol.loop import cancel_and_wait
from aiorocketmq.protocol.message import split_address

from .security import HaSecurity
from .wire import FrameReader, encode_offset

log = logging.getLogger(__name__)

#: Wait between failed connection attempts (RocketMQ's HAClient waits 5 s; a slave back
#: within a second of its master matters more than a connect attempt a second).
RETRY_SECONDS = 1.0
CONNECT_TIMEOUT = 3.0


def _epoch_ms(monotonic: float) -> int:
    if not monotonic:
        return 0
    return int((time.time() - (time.monotonic() - monotonic)) * 1000)


class ReplicationSlave:
    """A SLAVE's link to its master's HA port."""

    def __init__(self, store: MessageStore, config: StoreConfig, security: HaSecurity | None = None) -> None:
        self.store = store
        self.config = config
        self.security = security or HaSecurity()
        self.static_master = config.ha_master_address
        #: The master's HA address in use (``haMasterAddress`` or the name server's answer).
        self.master_address: str | None = self.static_master
        self.connected = False
        #: The last offset reported to the master.
        self.reported_offset = -1
        self.bytes_received = 0
        self.connects = 0
        #: Why the last connection ended badly ("" if none did).
        self.last_error = ""
        self.diverged = 0
        self._address_known = asyncio.Event()
        if self.master_address:
            self._address_known.set()
        self._task: asyncio.Task[None] | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._last_write = 0.0
        self._last_read = 0.0
        #: The current link appended something (a link that did not is retried slowly).
        self._made_progress = False

    @property
    def last_read_ms(self) -> int:
        """When the master last sent something, in ms since the epoch (0: never)."""
        return _epoch_ms(self._last_read)

    @property
    def last_write_ms(self) -> int:
        """When this slave last reported its offset, in ms since the epoch (0: never)."""
        return _epoch_ms(self._last_write)

    def update_master_address(self, address: str | None) -> None:
        """The name server's ``haServerAddr`` of the master (ignored with ``haMasterAddress``).
        As in RocketMQ, a change only swaps the address: the current link lives on until it
        fails."""
        if self.static_master or not address or address == self.master_address:
            return
        log.info("replication master is now %s (was %s)", address, self.master_address)
        self.master_address = address
        self._address_known.set()

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        if self._writer is not None:
            self._writer.transport.abort()

    async def _run(self) -> None:
        while True:
            await self._address_known.wait()
            address = self.master_address
            assert address is not None
            try:
                await self._replicate(address)
                self.last_error = f"master {address} closed the connection"
            except (OSError, TimeoutError, ValueError, StoreError) as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
            self.connected = False
            log.warning("replication from %s stopped: %s", address, self.last_error)
            if not self._made_progress:
                await asyncio.sleep(RETRY_SECONDS)

    async def _replicate(self, address: str) -> None:
        self._made_progress = False
        host, port = split_address(address)
        security = self.security
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
        if security.auth:
            try:
                await security.prove_slave(reader, writer)
            except BaseException:
                writer.transport.abort()
                raise
        self._writer = writer
        self.connected = True
        self.connects += 1
        store = self.store
        log.info(
            "connected to master HA port %s; local commit log ends at %d",
            address,
            store.commit_log_max_offset,
        )
        self._last_read = time.monotonic()
        self._report(store.commit_log_max_offset)
        heartbeat = asyncio.ensure_future(self._heartbeat())
        junction_checked = False
        frames = FrameReader(max_body=max(self.config.ha_transfer_batch_size, 1 << 20) * 64)
        try:
            while True:
                data = await reader.read(1 << 20)
                if not data:
                    return
                self._last_read = time.monotonic()
                before = store.commit_log_max_offset
                # Where this link joins the local log is checked record by record before
                # anything is acknowledged; after that the master's stream continues itself,
                # so the ack goes first and the consume queues are built after it, as
                # RocketMQ's slave acks what is in its commit log (page cache).
                checked = junction_checked
                for offset, body in frames.feed(data):
                    local = store.commit_log_max_offset
                    if local != 0 and local != offset:
                        self.diverged += 1
                        raise ValueError(
                            f"master pushed offset {offset}, not this slave's max offset {local}; "
                            "the logs have diverged, refusing"
                        )
                    if body:
                        try:
                            store.append_replicated(offset, body, dispatch=not checked)
                            if store.reput_offset > offset:
                                junction_checked = True
                        except ValueError as exc:
                            self.diverged += 1
                            raise ValueError(f"refusing the master's log: {exc}") from None
                        self.bytes_received += len(body)
                        self._made_progress = True
                after = store.commit_log_max_offset
                if after > before:
                    self._report(after)
                    if checked:
                        try:
                            store.dispatch_replicated()
                        except ValueError as exc:
                            self.diverged += 1
                            raise ValueError(f"refusing the master's log: {exc}") from None
        finally:
            await cancel_and_wait(heartbeat)
            writer.transport.abort()
            self._writer = None

    def _report(self, offset: int) -> None:
        writer = self._writer
        if writer is None:
            return
        writer.write(encode_offset(offset))
        self.reported_offset = offset
        self._last_write = time.monotonic()

    async def _heartbeat(self) -> None:
        """Re-report the offset when idle; close a link the master has gone silent on."""
        interval = self.config.ha_send_heartbeat_interval / 1000
        housekeeping = self.config.ha_housekeeping_interval / 1000
        while True:
            await asyncio.sleep(min(interval, 1.0))
            now = time.monotonic()
            if now - self._last_read > housekeeping:
                log.warning("nothing from the master for %.0fs; reconnecting", housekeeping)
                if self._writer is not None:
                    self._writer.transport.abort()
                return
            if now - self._last_write >= interval:
                self._report(self.store.commit_log_max_offset)

    def runtime_info(self) -> dict[str, str]:
        return {
            "haMasterAddress": self.master_address or "",
            "haConnected": "true" if self.connected else "false",
            "haReportedOffset": str(self.reported_offset),
            "haBytesReceived": str(self.bytes_received),
            "haLastError": self.last_error,
            "haDivergedRefusals": str(self.diverged),
            "haConnects": str(self.connects),
        }
