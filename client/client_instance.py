"""The client instance: everything producers and consumers with one client id share.

One instance per client id (``ip@instance``) and event loop owns the connections to name
servers and brokers, the topic-route cache and the broker address table, and the periodic
work: route refresh (30 s), heartbeats to every broker (30 s, and at once on every new broker
connection), consumer-offset persistence (5 s) and rebalance (20 s, and at once when a broker
sends NOTIFY_CONSUMER_IDS_CHANGED). It also answers the requests brokers send to clients:
transaction check-backs and consumer offset resets.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import random
import ssl
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from aiorocketmq.protocol.acl import Credentials, sign
from aiorocketmq.protocol.admin_requests import (
    ConsumeMessageDirectlyResultRequestHeader,
    GetConsumerRunningInfoRequestHeader,
)
from aiorocketmq.protocol.body import (
    ConsumerData,
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    MessageQueue,
    ProducerData,
    ResetOffsetBody,
    TopicRouteData,
    queue_map_json,
)
from aiorocketmq.protocol.codes import MASTER_ID, RequestCode, ResponseCode, SerializeType
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import (
    ConnectionClosedError,
    MQError,
    NoRouteError,
    ProtocolError,
    RemotingError,
    error_for_code,
)
from aiorocketmq.protocol.headers import (
    CheckTransactionStateRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetRouteInfoRequestHeader,
    Header,
    NotifyConsumerIdsChangedRequestHeader,
    ResetOffsetRequestHeader,
    UnregisterClientRequestHeader,
)
from aiorocketmq.protocol.loop import cancel_and_wait, wait_event
from aiorocketmq.protocol.message import (
    MessageExt,
    UniqueIdGenerator,
    decode_record,
    local_ipv4,
    split_address,
)
from aiorocketmq.protocol.tls import client_context
from aiorocketmq.protocol.transport import Connection, Handler, Signer, connect_with

from .errors import ClientError
from .request_reply import ReplyWaiters
from .routing import broker_addresses
from .running_info import consume_directly, running_info

if TYPE_CHECKING:
    from .offset_store import OffsetStore

log = logging.getLogger(__name__)

_JSON = int(SerializeType.JSON)
_MSGPACK = int(SerializeType.MSGPACK)
_SUCCESS = int(ResponseCode.SUCCESS)
#: Servers that answer with this language are ours and read msgpack headers (cheaper).
_OWN_SERVER_LANGUAGE = "PYTHON"

Serialization = Literal["auto", "json", "msgpack"]

#: What a request carries as its custom header: a typed header model, or (on hot paths that
#: prepared it once from a model's wire names) the wire map itself; None for no fields.
RequestHeader = Header | Mapping[str, Any] | None


def wire_fields(header: RequestHeader) -> dict[str, Any]:
    """The extFields map of a request header."""
    if type(header) is dict:
        return header
    if header is None:
        return {}
    if isinstance(header, Header):
        return header.to_fields()
    return dict(header)


#: A longer poll would not be busy polling but a spinning wait for a slow peer.
MAX_BUSY_POLL = 0.01


@dataclass(frozen=True)
class ClientOptions:
    """Settings of a client instance; the defaults are RocketMQ's."""

    #: Timeout of administrative requests (routes, heartbeats, consumer lists, locks...).
    request_timeout: float = 3.0
    route_refresh_interval: float = 30.0
    heartbeat_interval: float = 30.0
    persist_offset_interval: float = 5.0
    rebalance_interval: float = 20.0
    #: Header serialization: ``auto`` speaks JSON until a server shows it is one of ours,
    #: then msgpack; ``json`` always (any RocketMQ server); ``msgpack`` always (ours only).
    #: The environment variable ``AIOROCKETMQ_SERIALIZATION`` sets the default.
    serialization: Serialization = field(default_factory=lambda: _default_serialization())
    #: The address put in the client id; the address that routes outward when None.
    client_ip: str | None = None
    #: ACL credentials: with both set, every request (name servers included) is signed.
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    security_token: str | None = field(default=None, repr=False)
    #: TLS to every server; the server is checked against ``tls_ca_file`` (or the system
    #: store) unless ``tls_verify`` is off (RocketMQ's own clients do not check by default).
    tls: bool = False
    tls_ca_file: str | None = None
    tls_verify: bool = True
    #: Seconds to keep polling the connection, burning CPU instead of sleeping, while a
    #: broker's or name server's response is awaited (Linux's ``busy_poll``, per request).
    #: One-at-a-time senders on a host whose idle CPUs are slow to wake (virtual machines) get
    #: their round trips sooner, at up to that much CPU per request; off (0) by default.
    busy_poll: float = 0.0

    def __post_init__(self) -> None:
        if bool(self.access_key) != bool(self.secret_key):
            raise ClientError("ACL credentials need both access_key and secret_key")
        if not 0 <= self.busy_poll <= MAX_BUSY_POLL:
            raise ClientError(f"busy_poll must be within [0, {MAX_BUSY_POLL:g}] s, not {self.busy_poll!r}")

    @property
    def credentials(self) -> Credentials | None:
        if not self.access_key or not self.secret_key:
            return None
        return Credentials(self.access_key, self.secret_key, self.security_token)

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        return client_context(verify=self.tls_verify, ca_file=self.tls_ca_file)


def _default_serialization() -> Serialization:
    value = os.environ.get("AIOROCKETMQ_SERIALIZATION", "auto")
    if value not in ("auto", "json", "msgpack"):
        raise ClientError(f"AIOROCKETMQ_SERIALIZATION must be auto, json or msgpack, not {value!r}")
    return value  # type: ignore[return-value]


class ProducerMember(Protocol):
    """What the instance needs from a producer registered with it."""

    group: str

    def _published_topics(self) -> Iterable[str]: ...

    def _route_changed(self, topic: str, route: TopicRouteData) -> None: ...

    def _check_transaction(
        self, broker_addr: str, header: CheckTransactionStateRequestHeader, message: MessageExt
    ) -> None: ...


class ConsumerMember(Protocol):
    """What the instance needs from a consumer registered with it."""

    group: str

    def _consumer_data(self) -> ConsumerData: ...

    def _subscribed_topics(self) -> Iterable[str]: ...

    def _route_changed(self, topic: str, route: TopicRouteData) -> None: ...

    async def _do_rebalance(self) -> bool:
        """Rebalance every subscribed topic; True asks for another round soon."""
        ...

    async def _persist_offsets(self) -> None: ...

    def _reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None: ...

    @property
    def _offset_store(self) -> OffsetStore: ...


async def open_connection(
    host: str,
    port: int,
    handlers: dict[int, Handler],
    name: str,
    timeout: float,
    *,
    ssl_context: ssl.SSLContext | None = None,
    signer: Signer | None = None,
    busy_poll: float = 0.0,
) -> Connection:
    return await connect_with(
        lambda: Connection(handlers, name=name),
        host,
        port,
        timeout=timeout,
        ssl_context=ssl_context,
        signer=signer,
        busy_poll=busy_poll,
    )


def parse_namesrv(namesrv: str | Iterable[str] | None) -> list[str]:
    """``"a:9876;b:9876"`` (or a list) into addresses; ``NAMESRV_ADDR`` when None."""
    if namesrv is None:
        namesrv = os.environ.get("NAMESRV_ADDR", "")
    items = namesrv.split(";") if isinstance(namesrv, str) else list(namesrv)
    addrs = [item.strip() for item in items if item and item.strip()]
    if not addrs:
        raise ClientError("no name server address: pass namesrv='host:9876' or set NAMESRV_ADDR")
    for addr in addrs:
        try:
            split_address(addr)
        except ValueError:
            raise ClientError(f"name server address {addr!r} is not host:port") from None
    return addrs


def default_instance_name() -> str:
    """``pid#nanotime``, as Java names clustering consumers and producers: unique per object."""
    return f"{os.getpid()}#{time.monotonic_ns()}"


class ClientInstance:
    def __init__(self, client_id: str, namesrv_addrs: list[str], options: ClientOptions) -> None:
        self.client_id = client_id
        self.namesrv_addrs = namesrv_addrs
        self.options = options
        self.unique_ids = UniqueIdGenerator()
        self.routes: dict[str, TopicRouteData] = {}
        #: broker name -> {broker id -> address}
        self.brokers: dict[str, dict[int, str]] = {}
        #: The broker id each queue's last pull response suggested (``suggestWhichBrokerId``):
        #: where the next pull of that queue goes, as the Java client's PullAPIWrapper keeps it.
        self.pull_from_broker: dict[MessageQueue, int] = {}
        self.producers: dict[str, ProducerMember] = {}
        self.consumers: dict[str, ConsumerMember] = {}
        self._namesrv_index = random.randrange(len(namesrv_addrs))
        self._conns: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Future[Connection]] = {}
        self._serialize: dict[str, int] = {}
        self._route_locks: dict[str, asyncio.Lock] = {}
        self._heartbeat_lock = asyncio.Lock()
        self._rebalance_wakeup = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[Any]] = set()
        #: Topics whose route refresh_route_soon is fetching.
        self._refreshing_routes: set[str] = set()
        self._users = 0
        self.running = False
        self._ssl = options.ssl_context()
        credentials = options.credentials
        #: Requests of this client's producers waiting for their replies.
        self.replies = ReplyWaiters()
        self._signer: Signer | None = (
            functools.partial(sign, credentials=credentials) if credentials is not None else None
        )
        self._handlers: dict[int, Handler] = {
            RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: self._on_consumer_ids_changed,
            RequestCode.CHECK_TRANSACTION_STATE: self._on_check_transaction_state,
            RequestCode.RESET_CONSUMER_CLIENT_OFFSET: self._on_reset_offset,
            RequestCode.GET_CONSUMER_RUNNING_INFO: self._on_running_info,
            RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT: self._on_consumer_status,
            RequestCode.CONSUME_MESSAGE_DIRECTLY: self._on_consume_directly,
            RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT: self.replies.on_push_reply,
        }
        self.started_at = time.time()

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        if self.running:
            return
        self.running = True
        opts = self.options
        self._tasks = [
            asyncio.ensure_future(self._every(opts.route_refresh_interval, self.refresh_routes)),
            asyncio.ensure_future(self._every(opts.heartbeat_interval, self.send_heartbeat)),
            asyncio.ensure_future(self._every(opts.persist_offset_interval, self._persist_offsets)),
            asyncio.ensure_future(self._rebalance_loop()),
        ]

    async def shutdown(self) -> None:
        if not self.running:
            return
        self.running = False
        await cancel_and_wait(*self._tasks, *self._background)
        self._tasks.clear()
        self._background.clear()
        conns = list(self._conns.values())
        self._conns.clear()
        for conn in conns:
            conn.close("client shutting down")
        for conn in conns:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.wait_closed(), 2)

    def spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        """Run ``coro`` in the background, cancelled at shutdown; failures are logged."""
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background_done)
        return task

    def _background_done(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("background task of %s failed", self.client_id, exc_info=exc)

    async def _every(self, interval: float, job: Callable[[], Awaitable[Any]]) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await job()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("periodic job %s of %s failed", getattr(job, "__name__", job), self.client_id)

    # -- members --------------------------------------------------------------------------

    def register_producer(self, member: ProducerMember) -> None:
        if member.group in self.producers:
            raise ClientError(
                f"producer group {member.group!r} is already registered in client {self.client_id}; "
                "give each producer of a group its own instance_name"
            )
        self.producers[member.group] = member

    def register_consumer(self, member: ConsumerMember) -> None:
        if member.group in self.consumers:
            raise ClientError(
                f"consumer group {member.group!r} is already registered in client {self.client_id}; "
                "give each consumer of a group its own instance_name"
            )
        self.consumers[member.group] = member

    async def unregister_producer(self, group: str) -> None:
        if self.producers.pop(group, None) is not None:
            await self._unregister(
                UnregisterClientRequestHeader(client_id=self.client_id, producer_group=group)
            )

    async def unregister_consumer(self, group: str) -> None:
        if self.consumers.pop(group, None) is not None:
            await self._unregister(
                UnregisterClientRequestHeader(client_id=self.client_id, consumer_group=group)
            )

    async def unregister_remotely(
        self, *, producer_group: str | None = None, consumer_group: str | None = None
    ) -> None:
        """Tell the brokers a group of this client is gone (a member already removed here)."""
        await self._unregister(
            UnregisterClientRequestHeader(
                client_id=self.client_id, producer_group=producer_group, consumer_group=consumer_group
            )
        )

    async def _unregister(self, header: UnregisterClientRequestHeader) -> None:
        addrs = {addr for ids in self.brokers.values() for addr in ids.values()}
        results = await asyncio.gather(
            *(
                self.call(addr, RequestCode.UNREGISTER_CLIENT, header)
                for addr in addrs
                if addr in self._conns
            ),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException):
                log.warning("unregistering %s: %s", header, result)

    # -- connections ----------------------------------------------------------------------

    async def connection(self, addr: str) -> Connection:
        """The open connection to ``addr``, connecting (and, for a broker, announcing this
        client with a heartbeat) when there is none."""
        conn = self._conns.get(addr)
        if conn is not None and not conn.closed:
            return conn
        pending = self._connecting.get(addr)
        if pending is not None:
            return await asyncio.shield(pending)
        if not self.running:
            raise ConnectionClosedError(f"client {self.client_id} is shut down")
        future: asyncio.Future[Connection] = asyncio.get_running_loop().create_future()
        self._connecting[addr] = future
        try:
            host, port = split_address(addr)
            conn = await open_connection(
                host,
                port,
                self._handlers,
                f"client {self.client_id}",
                self.options.request_timeout,
                ssl_context=self._ssl,
                signer=self._signer,
                busy_poll=self.options.busy_poll,
            )
            self._conns[addr] = conn
            conn.add_close_callback(functools.partial(self._connection_closed, addr))
            if addr not in self.namesrv_addrs and (self.producers or self.consumers):
                # A (re)started broker knows nothing of this client: tell it at once, before
                # any pull that relies on the registered subscription.
                with contextlib.suppress(MQError):
                    await self._heartbeat_to(addr, conn, self._heartbeat_body())
            future.set_result(conn)
            return conn
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved here; concurrent waiters get it too
            raise
        finally:
            self._connecting.pop(addr, None)

    def _connection_closed(self, addr: str, conn: Connection) -> None:
        if self._conns.get(addr) is conn:
            del self._conns[addr]

    def _request_command(self, addr: str, code: int, header: RequestHeader, body: bytes) -> RemotingCommand:
        return RemotingCommand.request(
            code, wire_fields(header), body, serialize_type=self._serialize.get(addr, _JSON)
        )

    def _learn_server(self, addr: str, response: RemotingCommand) -> None:
        mode = self.options.serialization
        if mode == "json":
            self._serialize[addr] = _JSON
        elif mode == "msgpack" or response.language == _OWN_SERVER_LANGUAGE:
            self._serialize[addr] = _MSGPACK
        else:
            self._serialize[addr] = _JSON

    async def invoke(
        self,
        addr: str,
        code: int,
        header: RequestHeader = None,
        body: bytes = b"",
        *,
        timeout: float | None = None,
    ) -> RemotingCommand:
        """Send a request to ``addr``; its response, whatever the code."""
        conn = self._conns.get(addr)
        if conn is None or conn.closed:
            conn = await self.connection(addr)
        cmd = self._request_command(addr, code, header, body)
        response = await conn.request(cmd, self.options.request_timeout if timeout is None else timeout)
        if addr not in self._serialize:
            self._learn_server(addr, response)
        return response

    async def call(
        self,
        addr: str,
        code: int,
        header: RequestHeader = None,
        body: bytes = b"",
        *,
        timeout: float | None = None,
    ) -> RemotingCommand:
        """Like :meth:`invoke`, raising the response code's :class:`BrokerError` unless it is SUCCESS."""
        response = await self.invoke(addr, code, header, body, timeout=timeout)
        if response.code != _SUCCESS:
            raise error_for_code(response.code, response.remark)
        return response

    async def oneway(self, addr: str, code: int, header: RequestHeader = None, body: bytes = b"") -> None:
        conn = self._conns.get(addr)
        if conn is None or conn.closed:
            conn = await self.connection(addr)
        conn.send_oneway(self._request_command(addr, code, header, body))

    # -- name servers and routes ----------------------------------------------------------

    async def call_namesrv(
        self, code: int, header: RequestHeader = None, body: bytes = b"", *, timeout: float | None = None
    ) -> RemotingCommand:
        """Ask the current name server, moving to the next one when it cannot be reached."""
        addrs = self.namesrv_addrs
        last: Exception | None = None
        for attempt in range(len(addrs)):
            addr = addrs[(self._namesrv_index + attempt) % len(addrs)]
            try:
                response = await self.call(addr, code, header, body, timeout=timeout)
            except RemotingError as exc:
                last = exc
                continue
            self._namesrv_index = (self._namesrv_index + attempt) % len(addrs)
            return response
        assert last is not None
        raise last

    async def fetch_route(self, topic: str) -> TopicRouteData:
        """The route of ``topic`` from a name server (not cached); TopicNotExistError when none."""
        response = await self.call_namesrv(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic=topic)
        )
        return TopicRouteData.decode(response.body)

    async def update_route(self, topic: str) -> TopicRouteData:
        """Fetch and adopt the route of ``topic``; members hear about a changed route."""
        lock = self._route_locks.setdefault(topic, asyncio.Lock())
        async with lock:
            route = await self.fetch_route(topic)
            self.adopt_route(topic, route)
            return route

    def refresh_route_soon(self, topic: str) -> None:
        """Fetch ``topic``'s route in the background, once at a time: a broker of it stopped
        answering, and its master may have moved (a controller-mode failover) before the
        periodic refresh would notice."""
        if topic in self._refreshing_routes:
            return
        self._refreshing_routes.add(topic)
        self.spawn(self._refresh_route(topic))

    async def _refresh_route(self, topic: str) -> None:
        try:
            await self.update_route(topic)
        except MQError as exc:
            log.debug("route refresh of %s after a failed request: %s", topic, exc)
        finally:
            self._refreshing_routes.discard(topic)

    def adopt_route(self, topic: str, route: TopicRouteData) -> None:
        old = self.routes.get(topic)
        self.routes[topic] = route
        for name, addrs in broker_addresses(route).items():
            self.brokers[name] = addrs
        if old != route:
            for producer in list(self.producers.values()):
                producer._route_changed(topic, route)
            for consumer in list(self.consumers.values()):
                consumer._route_changed(topic, route)

    def topics_in_use(self) -> set[str]:
        topics: set[str] = set()
        for producer in self.producers.values():
            topics.update(producer._published_topics())
        for consumer in self.consumers.values():
            topics.update(consumer._subscribed_topics())
        return topics

    async def refresh_routes(self) -> None:
        """Refresh every route in use; forget brokers no route mentions any more."""
        for topic in sorted(self.topics_in_use()):
            try:
                await self.update_route(topic)
            except MQError as exc:
                log.debug("route refresh of %s: %s", topic, exc)
        known = {name for route in self.routes.values() for name in broker_addresses(route)}
        for name in list(self.brokers):
            if name not in known:
                del self.brokers[name]

    async def find_broker_addr(
        self,
        broker_name: str,
        *,
        topic: str | None = None,
        broker_id: int = MASTER_ID,
        only_this: bool = True,
    ) -> str:
        """A broker's address (the master by default), refreshing ``topic``'s route once when
        the broker is unknown."""
        for attempt in range(2):
            addrs = self.brokers.get(broker_name)
            if addrs:
                addr = addrs.get(broker_id)
                if addr is None and not only_this:
                    addr = next(iter(addrs.values()))
                if addr is not None:
                    return addr
            if attempt == 0 and topic is not None:
                with contextlib.suppress(MQError):
                    await self.update_route(topic)
        raise NoRouteError(f"the broker {broker_name!r} is not known (no master address in any route)")

    async def find_any_broker_addr(self, topic: str) -> str:
        """A broker hosting ``topic`` (its master when it has one), picked at random."""
        route = self.routes.get(topic)
        if route is None:
            route = await self.update_route(topic)
        datas = route.broker_datas
        if not datas:
            raise NoRouteError(f"the route of {topic!r} lists no broker")
        data = random.choice(datas)
        addr = data.broker_addrs.get(MASTER_ID) or next(iter(data.broker_addrs.values()), None)
        if addr is None:
            raise NoRouteError(f"the broker {data.broker_name!r} of {topic!r} has no address")
        return addr

    async def find_consumer_ids(self, topic: str, group: str) -> list[str]:
        """The client ids of ``group``'s members, as a broker of ``topic`` knows them."""
        addr = await self.find_any_broker_addr(topic)
        response = await self.call(
            addr,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP,
            GetConsumerListByGroupRequestHeader(consumer_group=group),
        )
        return GetConsumerListByGroupResponseBody.decode(response.body).consumer_id_list

    # -- heartbeats -----------------------------------------------------------------------

    def _heartbeat_body(self) -> bytes:
        data = HeartbeatData(
            client_id=self.client_id,
            producer_data_set=[ProducerData(group_name=group) for group in self.producers],
            consumer_data_set=[consumer._consumer_data() for consumer in self.consumers.values()],
        )
        return data.encode()

    async def _heartbeat_to(self, addr: str, conn: Connection, body: bytes) -> None:
        cmd = self._request_command(addr, RequestCode.HEART_BEAT, None, body)
        response = await conn.request(cmd, self.options.request_timeout)
        if addr not in self._serialize:
            self._learn_server(addr, response)
        if response.code != _SUCCESS:
            raise error_for_code(response.code, response.remark)

    async def send_heartbeat(self, *, wait: bool = False) -> None:
        """Announce every producer and consumer group of this client to every broker (only
        masters when there is no consumer). Skipped while another heartbeat is running,
        unless ``wait``: then sent after it (with what is registered by then)."""
        if not (self.producers or self.consumers):
            return
        if self._heartbeat_lock.locked() and not wait:
            return
        async with self._heartbeat_lock:
            body = self._heartbeat_body()
            with_slaves = bool(self.consumers)
            addrs = [
                addr
                for ids in list(self.brokers.values())
                for broker_id, addr in ids.items()
                if with_slaves or broker_id == MASTER_ID
            ]
            results = await asyncio.gather(
                *(self._heartbeat(addr, body) for addr in addrs), return_exceptions=True
            )
            for addr, result in zip(addrs, results):
                if isinstance(result, BaseException):
                    log.warning("heartbeat to %s failed: %s", addr, result)

    async def _heartbeat(self, addr: str, body: bytes) -> None:
        conn = self._conns.get(addr)
        if conn is None or conn.closed:
            # connection() sends the heartbeat itself on a new connection
            await self.connection(addr)
            return
        await self._heartbeat_to(addr, conn, body)

    # -- consumers ------------------------------------------------------------------------

    def rebalance_soon(self) -> None:
        self._rebalance_wakeup.set()

    async def _rebalance_loop(self) -> None:
        delay = self.options.rebalance_interval
        while True:
            await wait_event(self._rebalance_wakeup, delay)
            self._rebalance_wakeup.clear()
            again = False
            for consumer in list(self.consumers.values()):
                try:
                    again |= await consumer._do_rebalance()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("rebalance of %s failed", consumer.group)
            # A queue whose orderly lock another member still held is retried soon, not in 20 s.
            delay = 1.0 if again else self.options.rebalance_interval

    async def _persist_offsets(self) -> None:
        for consumer in list(self.consumers.values()):
            await consumer._persist_offsets()

    # -- requests from brokers ------------------------------------------------------------

    def _on_consumer_ids_changed(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        # Rebalance whatever the header says: a malformed notice still means "look again".
        self.rebalance_soon()
        try:
            group = NotifyConsumerIdsChangedRequestHeader.from_fields(cmd.ext_fields).consumer_group
        except ProtocolError as exc:
            group = f"? ({exc})"
        log.debug("%s: consumer ids of %s changed", self.client_id, group)
        return None

    def _on_check_transaction_state(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        header = CheckTransactionStateRequestHeader.from_fields(cmd.ext_fields)
        message, _ = decode_record(cmd.body, decompress=True)
        group = message.properties.get("PGROUP")
        producer = self.producers.get(group) if group else None
        if producer is None:
            log.warning("transaction check for unknown producer group %r", group)
            return None
        producer._check_transaction(conn.address, header, message)
        return None

    def _on_reset_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        header = ResetOffsetRequestHeader.from_fields(cmd.ext_fields)
        consumer = self.consumers.get(header.group)
        if consumer is not None and cmd.body:
            consumer._reset_offsets(header.topic, ResetOffsetBody.decode(cmd.body).offset_table)
        return None

    def _on_running_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_CONSUMER_RUNNING_INFO relayed by a broker (``mqadmin consumerStatus``)."""
        header = GetConsumerRunningInfoRequestHeader.from_fields(cmd.ext_fields)
        consumer = self.consumers.get(header.consumer_group)
        if consumer is None:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR,
                f"The Consumer Group <{header.consumer_group}> not exist in this consumer",
            )
        info = running_info(consumer, ";".join(self.namesrv_addrs), self.started_at)
        return cmd.response(body=info.encode())

    def _on_consumer_status(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_CONSUMER_STATUS_FROM_CLIENT relayed by a broker (``mqadmin getConsumerStatus``):
        the offsets this client holds for one topic."""
        fields = cmd.ext_fields or {}
        consumer = self.consumers.get(str(fields.get("group", "")))
        if consumer is None:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR,
                f"The Consumer Group <{fields.get('group')}> not exist in this consumer",
            )
        topic = str(fields.get("topic", ""))
        table = {mq: offset for mq, offset in consumer._offset_store.snapshot().items() if mq.topic == topic}
        return cmd.response(body=b'{"messageQueueTable":' + queue_map_json(table) + b"}")

    async def _on_consume_directly(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """CONSUME_MESSAGE_DIRECTLY relayed by a broker: the listener consumes the message now."""
        header = ConsumeMessageDirectlyResultRequestHeader.from_fields(cmd.ext_fields)
        consumer = self.consumers.get(header.consumer_group)
        if consumer is None:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR,
                f"The Consumer Group <{header.consumer_group}> not exist in this consumer",
            )
        message, _ = decode_record(cmd.body, decompress=True)
        result = await consume_directly(consumer, message)
        return cmd.response(body=result.encode())


# -- registry ---------------------------------------------------------------------------------

_instances: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, ClientInstance]] = (
    weakref.WeakKeyDictionary()
)


def client_id_for(instance_name: str, options: ClientOptions) -> str:
    return f"{options.client_ip or local_ipv4()}@{instance_name}"


def acquire_instance(
    namesrv: str | Iterable[str] | None, instance_name: str, options: ClientOptions | None = None
) -> ClientInstance:
    """The running instance for this client id on this loop, created on first use."""
    options = options or ClientOptions()
    addrs = parse_namesrv(namesrv)
    client_id = client_id_for(instance_name, options)
    on_loop = _instances.setdefault(asyncio.get_running_loop(), {})
    instance = on_loop.get(client_id)
    if instance is None or not instance.running:
        instance = ClientInstance(client_id, addrs, options)
        on_loop[client_id] = instance
        instance.start()
    elif instance.namesrv_addrs != addrs:
        raise ClientError(
            f"client {client_id} already runs against name servers {instance.namesrv_addrs}, not {addrs}"
        )
    elif _security(instance.options) != _security(options):
        raise ClientError(
            f"client {client_id} already runs with other credentials or TLS settings: "
            "give this client its own instance_name"
        )
    instance._users += 1
    return instance


def _security(options: ClientOptions) -> tuple[Any, ...]:
    return (
        options.access_key,
        options.secret_key,
        options.security_token,
        options.tls,
        options.tls_ca_file,
        options.tls_verify,
    )


async def release_instance(instance: ClientInstance) -> None:
    """Drop one user; the last one shuts the instance down."""
    instance._users -= 1
    if instance._users <= 0:
        on_loop = _instances.get(asyncio.get_running_loop(), {})
        if on_loop.get(instance.client_id) is instance:
            del on_loop[instance.client_id]
        await instance.shutdown()
