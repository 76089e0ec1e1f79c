"""Registration with every name server: at start-up, every ``registerNameServerPeriod``
(30 s, clamped to 10-60 s), promptly after any topic change, and an unregister at shutdown.

Each name server gets one long-lived connection: name servers drop a broker whose
connection closes, so it stays open between registrations. When that connection closes (the
name server restarted, or the network cut it), the broker reconnects at once and then every
``RECONNECT_MAX`` seconds at most, and registers as soon as a connection is back: a restarted
name server knows the broker again within about a second of listening, not 30 s later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import zlib
from collections.abc import Callable

from aiorocketmq.protocol.body import RegisterBrokerBody, TopicConfigSerializeWrapper
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.headers import (
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnregisterBrokerRequestHeader,
)
from aiorocketmq.protocol.loop import cancel_and_wait, wait_event
from aiorocketmq.protocol.message import split_address
from aiorocketmq.protocol.transport import Connection, connect

from .config import BrokerConfig

log = logging.getLogger(__name__)

REGISTER_TIMEOUT = 6.0
#: First retry after a failed registration; retries double up to the period, except that an
#: unreachable name server is tried again at least every ``RECONNECT_MAX`` seconds.
RETRY_FIRST = 0.25
RECONNECT_MAX = 0.5


class NameServerRegistration:
    def __init__(
        self,
        config: BrokerConfig,
        topics: Callable[[], TopicConfigSerializeWrapper],
        on_registered: Callable[[RegisterBrokerResponseHeader], None] | None = None,
    ) -> None:
        """``topics()`` is the topic table as each registration carries it; ``on_registered``
        gets each name server's answer (a slave learns its master's addresses from it)."""
        self.config = config
        self.topics = topics
        self.on_registered = on_registered
        #: TLS towards the name servers when ``tls.enable=true`` (RocketMQ's client-side key).
        self._ssl = config.client_ssl_context()
        self._conns: dict[str, Connection] = {}
        self._task: asyncio.Task[None] | None = None
        self._soon: asyncio.Event | None = None
        self._all_registered = False
        #: A round failed because a name server could not be reached (retried quickly).
        self._unreachable = False
        self._unreachable_logged: dict[str, bool] = {}
        self._registered: set[str] = set()
        #: The next round registers with every name server, not only those missing.
        self._everywhere = False
        self._stopping = False

    @property
    def addresses(self) -> list[str]:
        return self.config.namesrv_addrs

    async def start(self) -> None:
        self._soon = asyncio.Event()
        if not self.addresses:
            log.warning("no name server configured (namesrvAddr); clients will not find this broker")
            return
        await self.register_all()
        self._task = asyncio.ensure_future(self._loop())

    async def stop(self) -> None:
        self._stopping = True
        await cancel_and_wait(self._task)
        self._task = None
        await self.unregister_all()
        for conn in self._conns.values():
            conn.close("broker shutting down")
        self._conns.clear()

    def register_soon(self) -> None:
        """Re-register with every name server as soon as possible (topic config changed)."""
        self._everywhere = True
        if self._soon is not None:
            self._soon.set()

    async def _loop(self) -> None:
        period = min(60.0, max(10.0, self.config.register_name_server_period / 1000))
        assert self._soon is not None
        retry = RETRY_FIRST
        while True:
            # A failed registration is retried soon (doubling up to the period): a broker
            # that started before its name server should not stay unknown for 30 s.
            wait = period if self._all_registered else retry
            retry = RETRY_FIRST if self._all_registered else min(period, retry * 2)
            if self._unreachable:
                retry = min(retry, RECONNECT_MAX)
            await wait_event(self._soon, wait)
            self._soon.clear()
            try:
                if self._all_registered or self._everywhere:
                    self._everywhere = False
                    await self.register_all()
                else:
                    await self._register_missing()
            except Exception:
                # Whatever went wrong this round, the broker must keep re-registering.
                log.exception("registering with the name servers failed")
                self._all_registered = False

    async def _connection(self, address: str) -> Connection:
        conn = self._conns.get(address)
        if conn is None or conn.closed:
            host, port = split_address(address)
            conn = await connect(host, port, name="broker->namesrv", ssl_context=self._ssl)
            self._conns[address] = conn
            conn.add_close_callback(lambda closed: self._lost(address, closed))
        return conn

    def _lost(self, address: str, conn: Connection) -> None:
        """The connection to a name server closed: it forgot us (or will), so register again
        as soon as it can be reached."""
        if self._stopping or self._conns.get(address) is not conn:
            return
        log.warning("connection to name server %s lost (%s); re-registering", address, conn.close_reason)
        self._registered.discard(address)
        self._all_registered = False
        if self._soon is not None:
            self._soon.set()

    def _registration(self) -> RemotingCommand:
        cfg = self.config
        body = RegisterBrokerBody(topic_config_serialize_wrapper=self.topics()).encode()
        header = RegisterBrokerRequestHeader(
            broker_name=cfg.broker_name,
            broker_addr=cfg.broker_addr,
            cluster_name=cfg.broker_cluster_name,
            ha_server_addr=cfg.ha_server_addr,
            broker_id=cfg.broker_id,
            compressed=False,
            body_crc32=zlib.crc32(body) & 0x7FFFFFFF,
        )
        return RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_fields(), body)

    async def register_all(self) -> None:
        await self._register_with(self.addresses)

    async def _register_missing(self) -> None:
        """Register with the name servers the last round missed (all, if none is known)."""
        missing = [a for a in self.addresses if a not in self._registered]
        await self._register_with(missing or self.addresses)

    async def _register_with(self, addresses: list[str]) -> None:
        self._unreachable = False
        results = await asyncio.gather(*(self._register(address) for address in addresses))
        for address, ok in zip(addresses, results, strict=True):
            if ok:
                self._registered.add(address)
            else:
                self._registered.discard(address)
        self._all_registered = all(a in self._registered for a in self.addresses)

    async def _register(self, address: str) -> bool:
        try:
            conn = await self._connection(address)
        except (MQError, ValueError) as exc:
            if not self._unreachable_logged.get(address):
                log.warning("cannot reach name server %s: %s (retrying)", address, exc)
                self._unreachable_logged[address] = True
            self._unreachable = True
            return False
        self._unreachable_logged.pop(address, None)
        try:
            response = await conn.request(self._registration(), REGISTER_TIMEOUT)
        except MQError as exc:
            # A connection that times out may be half-open: start over with a new one.
            conn.abort()
            log.warning("registering with name server %s failed: %s", address, exc)
            return False
        if response.code != ResponseCode.SUCCESS:
            log.warning("name server %s refused the registration: %s", address, response.remark)
            return False
        if self.on_registered is not None:
            try:
                self.on_registered(RegisterBrokerResponseHeader.from_fields(response.ext_fields or {}))
            except Exception:
                log.exception("cannot use name server %s's answer to the registration", address)
        if address in self._registered:
            log.debug("registered with name server %s", address)
        else:
            log.info("registered with name server %s", address)
        return True

    async def unregister_all(self) -> None:
        cfg = self.config
        header = UnregisterBrokerRequestHeader(
            broker_name=cfg.broker_name,
            broker_addr=cfg.broker_addr,
            cluster_name=cfg.broker_cluster_name,
            broker_id=cfg.broker_id,
        )

        async def unregister(address: str) -> None:
            conn = self._conns.get(address)
            if conn is None or conn.closed:
                return
            with contextlib.suppress(MQError):
                await conn.request(
                    RemotingCommand.request(RequestCode.UNREGISTER_BROKER, header.to_fields()), 3.0
                )

        await asyncio.gather(*(unregister(address) for address in self.addresses))
