"""Registration with every name server: at start-up, every ``registerNameServerPeriod``
(30 s, clamped to 10-60 s), promptly after any topic change, and an unregister at shutdown.

A topic change registers only the topics created or updated since the last registration, with
the new data version, as Apache 4.9's broker does (``registerIncrementBrokerData``): name servers
add the topics a registration lists and never drop those it leaves out, so a broker with 10,000
topics does not resend its whole table for each new one. That partial registration goes only
over a connection that already carried a full one (a name server forgets a broker whose
connection closes, so a new connection starts with the full table). The full table of a large
broker goes in RocketMQ's compressed form (``compressed=true``: a zlib stream with one line per
topic), which Apache's name server reads too.

Each name server gets one long-lived connection: name servers drop a broker whose
connection closes, so it stays open between registrations. When that connection closes (the
name server restarted, or the network cut it), the broker reconnects at once and then every
``RECONNECT_MAX`` seconds at most, and registers as soon as a connection is back: a restarted
name server knows the broker again within about a second of listening, not 30 s later.

Every request to the name servers is signed, as Apache 5.3.3's broker signs them, when the
broker has an account for it: ``innerClientAuthenticationCredentials`` (Apache's key, JSON
``{"accessKey": ..., "secretKey": ...}``), else, with ACL 1.0 on (``aclEnable=true``), the first
``admin: true`` account of its own ACL files (re-read when they change). A name server with
``authenticationEnabled=true`` refuses unsigned registrations; others ignore the signature.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import zlib
from collections.abc import Callable

from aiorocketmq.protocol.acl import Credentials, sign
from aiorocketmq.protocol.body import RegisterBrokerBody, TopicConfigSerializeWrapper, TopicRouteData
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.headers import (
    GetRouteInfoRequestHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnregisterBrokerRequestHeader,
)
from aiorocketmq.protocol.loop import cancel_and_wait, wait_event
from aiorocketmq.protocol.message import split_address
from aiorocketmq.protocol.settings import ConfigError
from aiorocketmq.protocol.transport import Connection, connect

from .acl import AclConfig, AclConfigError, acl_files
from .config import BrokerConfig

log = logging.getLogger(__name__)

REGISTER_TIMEOUT = 6.0
#: First retry after a failed registration; retries double up to the period, except that an
#: unreachable name server is tried again at least every ``RECONNECT_MAX`` seconds.
RETRY_FIRST = 0.25
RECONNECT_MAX = 0.5
#: A registration listing this many topics goes compressed: 10,000 topics are about 1.4 MB of
#: JSON and 26 KB compressed. The compressed form has no topicSysFlag, so a table using one
#: goes as JSON unless ``compressedRegister`` asks for compression anyway (as Apache does).
COMPRESS_OVER_TOPICS = 1000


def inner_client_credentials(text: str | None) -> Credentials | None:
    """``innerClientAuthenticationCredentials`` as Apache 5.3.3 reads it: JSON with
    ``accessKey`` and ``secretKey`` (and ``securityToken``); None when blank or when either key
    is blank (Apache then signs nothing). Raises :class:`ConfigError` for text that is not such
    JSON."""
    if text is None or not text.strip():
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"innerClientAuthenticationCredentials is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError('innerClientAuthenticationCredentials must be {"accessKey": ..., "secretKey": ...}')
    access, secret = str(data.get("accessKey") or "").strip(), str(data.get("secretKey") or "").strip()
    if not access or not secret:
        return None
    return Credentials(access, secret, str(data.get("securityToken") or "") or None)


class NameServerCredentials:
    """The account a broker signs its name-server requests with (see the module docstring)."""

    def __init__(self, config: BrokerConfig) -> None:
        self.inner = inner_client_credentials(config.inner_client_authentication_credentials)
        self._acl: AclConfig | None = None
        self._files = (
            acl_files(config.rocketmq_home, config.acl_plain_file)
            if self.inner is None and config.acl_enable
            else []
        )
        self._current: Credentials | None = self.inner
        if self._files:
            self._reload()

    def _reload(self) -> None:
        try:
            self._acl = AclConfig.load(self._files)
        except AclConfigError as exc:
            # The broker's ACL check reports the file (and refuses to start on it); until the
            # edit is fixed, keep signing as before and try again at the next request.
            log.debug("name-server signing keeps its account: %s", exc)
            return
        admin = next((a for a in self._acl.accounts.values() if a.admin), None)
        previous = self._current
        self._current = Credentials(admin.access_key, admin.secret_key) if admin is not None else None
        if previous != self._current:
            if self._current is None:
                log.warning(
                    "aclEnable=true but no admin account in %s: name-server requests go unsigned "
                    "(set innerClientAuthenticationCredentials)",
                    ", ".join(map(str, self._files)),
                )
            else:
                log.info(
                    "name-server requests signed as AccessKey=%s (first admin account of the ACL files)",
                    self._current.access_key,
                )

    def current(self) -> Credentials | None:
        if self._acl is not None and self._acl.changed():
            self._reload()
        return self._current

    def sign(self, cmd: RemotingCommand) -> None:
        credentials = self.current()
        if credentials is not None:
            sign(cmd, credentials)


class NameServerRegistration:
    def __init__(
        self,
        config: BrokerConfig,
        topics: Callable[[], TopicConfigSerializeWrapper],
        on_registered: Callable[[RegisterBrokerResponseHeader], None] | None = None,
        changed_topics: Callable[[], set[str]] | None = None,
    ) -> None:
        """``topics()`` is the topic table as each registration carries it; ``on_registered``
        gets each name server's answer (a slave learns its master's addresses from it);
        ``changed_topics()`` takes the names created or updated since it was last called
        (without it, every change registers the whole table)."""
        self.config = config
        self.topics = topics
        self.on_registered = on_registered
        self.changed_topics = changed_topics
        #: Per name server, the connection that carried the last full registration.
        self._full_over: dict[str, Connection] = {}
        #: One registration of changes at a time, so a caller waiting for its change to be
        #: registered also waits for a round that took it already.
        self._changes_lock = asyncio.Lock()
        #: TLS towards the name servers when ``tls.enable=true`` (RocketMQ's client-side key).
        self._ssl = config.client_ssl_context()
        self.credentials = NameServerCredentials(config)
        if self.credentials.inner is not None:
            log.info(
                "name-server requests signed as AccessKey=%s (innerClientAuthenticationCredentials)",
                self.credentials.inner.access_key,
            )
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
        #: Controller mode: no registration until the broker knows its role (Apache's
        #: ``isIsolated``); :meth:`unisolate` registers everywhere.
        self.isolated = False

    @property
    def addresses(self) -> list[str]:
        return self.config.namesrv_addrs

    async def start(self) -> None:
        self._soon = asyncio.Event()
        if not self.addresses:
            log.warning("no name server configured (namesrvAddr); clients will not find this broker")
            return
        if not self.isolated:
            await self.register_all()
        self._task = asyncio.ensure_future(self._loop())

    async def unisolate(self) -> None:
        """Controller mode: the role is known (or changed, with ``brokerId``): register the
        whole table with every name server now, and on schedule from then on."""
        self.isolated = False
        if self.addresses and not self._stopping:
            await self.register_all()

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
                if self._everywhere:
                    self._everywhere = False
                    await self._register_changes()
                elif self._all_registered:
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
            conn = await connect(
                host, port, name="broker->namesrv", ssl_context=self._ssl, signer=self.credentials.sign
            )
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

    def _encode(self, wrapper: TopicConfigSerializeWrapper) -> tuple[bytes, bool]:
        """The registration body and whether it is compressed."""
        table = wrapper.topic_config_table
        body = RegisterBrokerBody(topic_config_serialize_wrapper=wrapper)
        # The compressed form carries static-topic mappings only from RocketMQ 5 brokers (by
        # version); this broker registers as 4.9.4, so a table with mappings goes as JSON.
        compress = not wrapper.topic_queue_mapping_info_map and (
            self.config.compressed_register
            or (len(table) >= COMPRESS_OVER_TOPICS and not any(t.topic_sys_flag for t in table.values()))
        )
        return (body.encode_compressed(), True) if compress else (body.encode(), False)

    def _registration(self, body: bytes, compressed: bool) -> RemotingCommand:
        cfg = self.config
        header = RegisterBrokerRequestHeader(
            broker_name=cfg.broker_name,
            broker_addr=cfg.broker_addr,
            cluster_name=cfg.broker_cluster_name,
            ha_server_addr=cfg.ha_server_addr,
            broker_id=cfg.broker_id,
            compressed=compressed,
            body_crc32=zlib.crc32(body) & 0x7FFFFFFF,
        )
        return RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_fields(), body)

    async def register_all(self) -> None:
        await self._register_with(self.addresses)

    async def register_changes(self) -> None:
        """Register the topic changes made so far; returns once every name server answered
        (a topic created through the admin API is routable when its creation returns)."""
        await self._register_changes()

    async def _register_changes(self) -> None:
        """After a topic change: the changed topics alone to every name server that holds the
        full table over its current connection, the full table to the others."""
        if self.changed_topics is None:
            await self.register_all()
            return
        async with self._changes_lock:
            # A change that names no topic (a slave taking its master's whole table, a delete)
            # registers the whole table.
            changed = self.changed_topics()
            await self._register_with(self.addresses, changed or None)

    async def _register_missing(self) -> None:
        """Register with the name servers the last round missed (all, if none is known)."""
        missing = [a for a in self.addresses if a not in self._registered]
        await self._register_with(missing or self.addresses)

    async def _register_with(self, addresses: list[str], changed: set[str] | None = None) -> None:
        if self.isolated:
            log.debug("not registering with the name servers: the broker's role is not known yet")
            return
        self._unreachable = False
        full = self.topics()
        bodies: dict[bool, tuple[bytes, bool]] = {}

        def body(partial: bool) -> tuple[bytes, bool]:
            # Encoded once per round, whichever name servers need it.
            if partial not in bodies:
                wrapper = full
                if partial:
                    table = full.topic_config_table
                    wrapper = TopicConfigSerializeWrapper(
                        topic_config_table={
                            name: table[name] for name in sorted(changed or ()) if name in table
                        },
                        data_version=full.data_version,
                        topic_queue_mapping_info_map=full.topic_queue_mapping_info_map,
                    )
                bodies[partial] = self._encode(wrapper)
            return bodies[partial]

        results = await asyncio.gather(
            *(self._register(address, body, partial_ok=changed is not None) for address in addresses)
        )
        for address, ok in zip(addresses, results, strict=True):
            if ok:
                self._registered.add(address)
            else:
                self._registered.discard(address)
        self._all_registered = all(a in self._registered for a in self.addresses)

    async def _register(
        self, address: str, body: Callable[[bool], tuple[bytes, bool]], *, partial_ok: bool = False
    ) -> bool:
        try:
            conn = await self._connection(address)
        except (MQError, ValueError) as exc:
            if not self._unreachable_logged.get(address):
                log.warning("cannot reach name server %s: %s (retrying)", address, exc)
                self._unreachable_logged[address] = True
            self._unreachable = True
            return False
        self._unreachable_logged.pop(address, None)
        partial = partial_ok and self._full_over.get(address) is conn
        try:
            response = await conn.request(self._registration(*body(partial)), REGISTER_TIMEOUT)
        except MQError as exc:
            # A connection that times out may be half-open: start over with a new one.
            conn.abort()
            log.warning("registering with name server %s failed: %s", address, exc)
            return False
        if response.code != ResponseCode.SUCCESS:
            log.warning("name server %s refused the registration: %s", address, response.remark)
            return False
        if not partial:
            self._full_over[address] = conn
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

    async def route(self, topic: str) -> TopicRouteData | None:
        """The topic's route as the name servers know it (every broker's queues, as clients
        see them), from the first that answers; None when none knows the topic or none
        answers (each failure logged)."""
        for address in self.addresses:
            try:
                conn = await self._connection(address)
                response = await conn.request(
                    RemotingCommand.request(
                        RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic=topic).to_fields()
                    ),
                    REGISTER_TIMEOUT,
                )
            except (MQError, ValueError) as exc:
                log.warning("cannot ask name server %s for the route of %s: %s", address, topic, exc)
                continue
            if response.code == ResponseCode.SUCCESS and response.body:
                return TopicRouteData.decode(response.body)
            if response.code == ResponseCode.TOPIC_NOT_EXIST:
                return None
            log.warning("name server %s answered %s for the route of %s", address, response.code, topic)
        return None

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
