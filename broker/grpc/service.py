"""``apache.rocketmq.v2.MessagingService``: the RPCs of the 5.x clients, answered from the
broker's own parts, the way Apache's proxy does in its "local" mode.

Sends go through the broker's SEND_MESSAGE_V2 handler (so validation, auto-created topics,
transaction half messages and stats are the remoting path's); transaction decisions through
the transaction service; pulls and offsets through the store and the offset table; POP
consumption (receive, ack, invisible time, dead-lettering) through the POP service. Every
RPC completes with gRPC OK and carries its result in its ``status`` (the 5.x convention);
only a broken telemetry stream fails the call itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import logging
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from aiorocketmq.broker.acl import AccessValidator
from aiorocketmq.broker.acl import Perm as AclPerm
from aiorocketmq.broker.auth import AuthEngine
from aiorocketmq.broker.clients import ClientChannel, ClientRegistry
from aiorocketmq.broker.config import BrokerConfig
from aiorocketmq.broker.groups import GroupTable
from aiorocketmq.broker.offsets import OffsetTable
from aiorocketmq.broker.pop import InvalidReceiptHandleError, PopService, ReceiptHandleExpiredError
from aiorocketmq.broker.store import MessageStore
from aiorocketmq.broker.topics import TopicTable
from aiorocketmq.broker.transactions import TransactionService
from aiorocketmq.protocol.body import ConsumerData, ConsumeType, QueueData, SubscriptionData, TopicConfig
from aiorocketmq.protocol.codes import (
    CURRENT_VERSION,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    MessageSysFlag,
    Perm,
    RequestCode,
)
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import BrokerError, MQError
from aiorocketmq.protocol.headers import SendMessageRequestHeaderV2
from aiorocketmq.protocol.message import (
    PropertyKey,
    decode_records,
    encode_properties,
    java_hash,
    new_unique_id,
    tags_code,
)
from aiorocketmq.protocol.names import AUTO_CREATE_TOPIC, retry_topic, topic_name_problem
from aiorocketmq.protocol.topic_attributes import MESSAGE_TYPE
from aiorocketmq.protocol.transport import Handler, Signer

from . import messaging_pb2 as pb
from . import messaging_pb2_grpc as pb_grpc
from .auth import Forbidden, Unauthorized, authorize, authorize_v2
from .convert import (
    BORN_HOST,
    BORN_TIMESTAMP,
    OK,
    SHARDING_KEY,
    SYSTEM_PROPERTIES,
    TIMER_DELIVER_MS,
    TRACE_CONTEXT,
    Code,
    consistent_hash,
    delivery_time_ms,
    duration,
    message_type,
    now_ms,
    status,
    status_of_response_code,
    timestamp_ms,
    to_message,
)
from .routes import ClusterRoutes, RoutedBroker, RouteSource, assignments, message_queues
from .sessions import GrpcChannel, Session, TelemetryStream

log = logging.getLogger(__name__)

CLIENT_ID = "x-mq-client-id"
LANGUAGE = "x-mq-language"
CLIENT_VERSION = "x-mq-client-version"

#: The proxy's limits on a sent message (ProxyConfig defaults; the body's is the broker's
#: maxMessageSize).
MAX_USER_PROPERTIES = 128
MAX_USER_PROPERTIES_SIZE = 16 * 1024
MAX_MESSAGE_GROUP_SIZE = 64
MAX_DELAY_MS = 24 * 3600 * 1000
#: What consumers are told (the proxy's defaults).
RECEIVE_BATCH_SIZE = 32
LONG_POLLING_TIMEOUT = 20.0
#: Send retries a producer is told to make: 3 attempts, backing off 10 ms .. 1 s.
PRODUCER_BACKOFF = pb.RetryPolicy(
    max_attempts=3,
    exponential_backoff=pb.ExponentialBackoff(initial=duration(0.01), max=duration(1.0), multiplier=2.0),
)
#: Redelivery delays of a consumer group (4.x's delay levels from 1 s on).
CONSUMER_BACKOFF_SECONDS = (
    1,
    5,
    10,
    30,
    60,
    120,
    180,
    240,
    300,
    360,
    420,
    480,
    540,
    600,
    1200,
    1800,
    3600,
    7200,
)
#: Invisible time of a message received with ``auto_renew`` (PushConsumer): the proxy's
#: ``defaultInvisibleTimeMills``. While the client lives, the broker extends it (the proxy's
#: renewal policy): RENEW_AHEAD_MS before it ends, by the next of RENEW_STEPS_MS, for at
#: most RENEW_MAX_MS after the receive.
AUTO_RENEW_INVISIBLE_MS = 60_000
RENEW_AHEAD_MS = 10_000
RENEW_STEPS_MS = (60_000, 180_000, 300_000, 600_000, 1_800_000, 3_600_000)
RENEW_MAX_MS = 3 * 3600 * 1000
#: Invisible time left to the messages of a client that went away (they come back soon).
ABANDONED_INVISIBLE_MS = 1000
MIN_INVISIBLE_MS = 10_000
MAX_INVISIBLE_MS = 12 * 3600 * 1000
MIN_LONG_POLL = 5.0

_PERM_READ = int(Perm.READ)
_PERM_WRITE = int(Perm.WRITE)
_TRAN_MSG = PropertyKey.TRANSACTION_PREPARED
_UNIQ_KEY = PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
_EVERY_TYPE = [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION]
#: The message types a route's queues accept, by the topic's ``message.type`` attribute.
_ACCEPTED_TYPES = {
    "NORMAL": [pb.NORMAL],
    "FIFO": [pb.FIFO],
    "DELAY": [pb.DELAY],
    "TRANSACTION": [pb.TRANSACTION],
    "MIXED": _EVERY_TYPE,
    "UNSPECIFIED": [pb.MESSAGE_TYPE_UNSPECIFIED],
}


def _accepted_types(topic: TopicConfig) -> list[pb.MessageType]:
    """The message types a route's queues of ``topic`` accept, by its ``message.type``."""
    return _ACCEPTED_TYPES.get(topic.attributes.get(MESSAGE_TYPE, ""), _EVERY_TYPE)


@dataclass(slots=True)
class Renewal:
    """A message received with ``auto_renew``: the client holds the first receipt handle; the
    broker renews under ``handle``, the latest."""

    client_id: str
    group: str
    topic: str
    handle: str
    received_ms: int
    deadline_ms: int
    renewed: int = 0


class RpcError(Exception):
    """A request answered with a 5.x status other than OK."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def status(self) -> pb.Status:
        return status(self.code, self.message)


def _peer(context: grpc.aio.ServicerContext) -> tuple[str, int]:
    """``ipv4:1.2.3.4:5`` / ``ipv6:[::1]:5`` as (host, port)."""
    peer = context.peer() or ""
    _, _, rest = peer.partition(":")
    host, _, port = rest.rpartition(":")
    host = host.strip("[]")
    try:
        return host or "127.0.0.1", int(port)
    except ValueError:
        return host or "127.0.0.1", 0


def _metadata(context: grpc.aio.ServicerContext) -> dict[str, str]:
    return {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}


class MessagingService(pb_grpc.MessagingServiceServicer):
    """The servicer: one per broker."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        store: MessageStore,
        topics: TopicTable,
        groups: GroupTable,
        offsets: OffsetTable,
        clients: ClientRegistry,
        transactions: TransactionService,
        pop: PopService,
        handlers: Mapping[int, Handler],
        access: AccessValidator | None,
        auth: AuthEngine | None = None,
        route: RouteSource | None = None,
        signer: Signer | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.clients = clients
        self.transactions = transactions
        self.pop = pop
        self.handlers = handlers
        self.access = access
        #: ACL 2.0 (replaces ``access`` when set).
        self.auth = auth
        #: Where route answers send clients: the broker's address and the gRPC port.
        self.endpoints = pb.Endpoints()
        #: The cluster's brokers of a topic, from the name servers (``route``: none in tests
        #: of one broker without a name server).
        self.routes = ClusterRoutes(config.broker_name, config.broker_id, route=route, signer=signer)
        self.sessions: dict[str, Session] = {}
        self._round_robin = itertools.count()
        self._arrivals: dict[tuple[str, int], list[asyncio.Future[None]]] = {}
        self._next_acl_look = 0.0
        #: First receipt handle -> its renewal, for messages received with ``auto_renew``.
        self.renewals: dict[str, Renewal] = {}
        self.auto_renew_invisible_ms = AUTO_RENEW_INVISIBLE_MS
        self.renew_ahead_ms = RENEW_AHEAD_MS
        self.renew_steps_ms = RENEW_STEPS_MS
        self._renewing: asyncio.Task[None] | None = None
        self._abandoning: set[asyncio.Task[None]] = set()
        self._anonymous: dict[tuple[str, int], GrpcChannel] = {}

    def start(self) -> None:
        """Begin renewing ``auto_renew`` receipts (once a second)."""
        self._renewing = asyncio.ensure_future(self._renew_periodically())

    async def stop(self) -> None:
        await self.routes.close()
        task, self._renewing = self._renewing, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _renew_periodically(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            try:
                await self.renew_due()
            except Exception:
                log.exception("renewing receipt handles failed")

    async def renew_due(self) -> None:
        """Extend every auto-renewed message whose invisible time ends within the renew-ahead
        time; give up on those received more than RENEW_MAX_MS ago (they come back)."""
        now = now_ms()
        for first, renewal in list(self.renewals.items()):
            if renewal.deadline_ms - now > self.renew_ahead_ms:
                continue
            if now - renewal.received_ms >= RENEW_MAX_MS or renewal.client_id not in self.sessions:
                self.renewals.pop(first, None)
                continue
            steps = self.renew_steps_ms
            invisible = steps[min(renewal.renewed, len(steps) - 1)]
            try:
                renewal.handle = await self.pop.change_invisible(
                    group=renewal.group,
                    topic=renewal.topic,
                    receipt_handle=renewal.handle,
                    invisible_ms=invisible,
                )
            except BrokerError as exc:
                log.debug("cannot renew %s: %s", first, exc)
                self.renewals.pop(first, None)
                continue
            renewal.deadline_ms = now + invisible
            renewal.renewed += 1

    def _current_handle(self, handle: str) -> str:
        """The latest receipt handle of a message the client knows by ``handle`` (renewals
        end when the client acts on it)."""
        renewal = self.renewals.pop(handle, None)
        return renewal.handle if renewal is not None else handle

    def bind(self, host: str, port: int) -> None:
        """Advertise ``host:port`` (the gRPC listener) in routes and assignments."""
        self.routes.bind(host, port)
        self.endpoints = self.routes.endpoints

    # -- arrivals (PullMessage's long polling) -------------------------------------------

    def on_arrival(self, topic: str, queue_id: int, _next_offset: int, _tags_code: int) -> None:
        waiters = self._arrivals.pop((topic, queue_id), None)
        if waiters:
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    async def _wait_arrival(self, topic: str, queue_id: int, timeout: float) -> None:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._arrivals.setdefault((topic, queue_id), []).append(waiter)
        try:
            await asyncio.wait_for(waiter, timeout)
        except TimeoutError:
            waiters = self._arrivals.get((topic, queue_id))
            if waiters is not None and waiter in waiters:
                waiters.remove(waiter)
                if not waiters:
                    del self._arrivals[(topic, queue_id)]

    # -- per request ----------------------------------------------------------------------

    def _session(self, context: grpc.aio.ServicerContext, *, create: bool = True) -> Session | None:
        metadata = _metadata(context)
        client_id = metadata.get(CLIENT_ID)
        if not client_id:
            return None
        session = self.sessions.get(client_id)
        if session is None and create:
            session = self.sessions[client_id] = Session(
                client_id,
                _peer(context),
                language=metadata.get(LANGUAGE, ""),
                version=metadata.get(CLIENT_VERSION, ""),
            )
        if session is not None:
            session.last_seen = time.monotonic()
        return session

    def _authorize(
        self, context: grpc.aio.ServicerContext, needed: Mapping[str, AclPerm], request: Any = None
    ) -> None:
        """Raise :class:`RpcError` unless ACL is off or the signed request may do this
        (``needed`` for ACL 1.0; ACL 2.0 reads what it needs from the ``request`` message)."""
        if self.auth is not None:
            try:
                authorize_v2(self.auth, _metadata(context), _peer(context)[0], request)
            except Unauthorized as exc:
                raise RpcError(Code.UNAUTHORIZED, str(exc)) from None
            return
        access = self.access
        if access is None:
            return
        now = time.monotonic()
        if now >= self._next_acl_look:
            self._next_acl_look = now + 1.0
            access.reload_if_changed()
        try:
            authorize(access, _metadata(context), _peer(context)[0], needed)
        except Unauthorized as exc:
            raise RpcError(Code.UNAUTHORIZED, str(exc)) from None
        except Forbidden as exc:
            raise RpcError(Code.FORBIDDEN, str(exc)) from None

    @staticmethod
    def _group_perms(topic: str, group: str) -> dict[str, AclPerm]:
        needed = {retry_topic(group): AclPerm.SUB} if group else {}
        if topic:
            needed[topic] = AclPerm.SUB
        return needed

    def _client_id_required(self, context: grpc.aio.ServicerContext) -> Session:
        session = self._session(context)
        if session is None:
            raise RpcError(Code.CLIENT_ID_REQUIRED, f"the {CLIENT_ID} header is required")
        return session

    # -- QueryRoute -----------------------------------------------------------------------

    async def QueryRoute(self, request: pb.QueryRouteRequest, context: Any) -> pb.QueryRouteResponse:
        try:
            self._authorize(context, {}, request)
            brokers, accepted = await self._cluster(request.topic.name, create=True)
            queues = message_queues(request.topic.name, brokers, accepted)
            return pb.QueryRouteResponse(status=OK, message_queues=queues)
        except RpcError as exc:
            return pb.QueryRouteResponse(status=exc.status)

    def _topic(self, name: str, *, create: bool) -> Any:
        problem = topic_name_problem(name) if name else "the topic name is empty"
        topic = self.topics.get(name) if name else None
        if topic is not None:
            return topic
        if problem is not None:
            raise RpcError(Code.ILLEGAL_TOPIC, problem)
        if create:
            # A 4.x producer's first send creates its topic when autoCreateTopicEnable is on;
            # a 5.x client asks for the route first, so the route creates it.
            topic = self.topics.create_on_send(name, AUTO_CREATE_TOPIC, self.config.default_topic_queue_nums)
        if topic is None:
            raise RpcError(Code.TOPIC_NOT_FOUND, f"topic {name} does not exist")
        return topic

    async def _cluster(self, name: str, *, create: bool) -> tuple[list[RoutedBroker], list[pb.MessageType]]:
        """The brokers of topic ``name`` across the cluster and the message types its queues
        accept. A topic this broker lacks is looked up in the name servers before it is
        created here (``create``: autoCreateTopicEnable permitting), so a client asking this
        broker for a topic that lives elsewhere is sent there instead."""
        topic = self.topics.get(name) if name else None
        if topic is None:
            problem = topic_name_problem(name) if name else "the topic name is empty"
            if problem is not None:
                raise RpcError(Code.ILLEGAL_TOPIC, problem)
            elsewhere = await self.routes.brokers(name, None)
            if elsewhere:
                return elsewhere, _EVERY_TYPE
            topic = self._topic(name, create=create)
        return await self.routes.brokers(name, self._own_queues(topic)), _accepted_types(topic)

    def _own_queues(self, topic: TopicConfig) -> QueueData:
        """This broker's queues of ``topic`` as a route shows them (its permission applied)."""
        return QueueData(
            broker_name=self.config.broker_name,
            read_queue_nums=topic.read_queue_nums,
            write_queue_nums=topic.write_queue_nums,
            perm=topic.perm & self.config.broker_permission,
            topic_sys_flag=topic.topic_sys_flag,
        )

    # -- Telemetry ------------------------------------------------------------------------

    async def Telemetry(
        self, request_iterator: AsyncIterator[pb.TelemetryCommand], context: Any
    ) -> AsyncIterator[pb.TelemetryCommand]:
        try:
            self._authorize(context, {}, pb.TelemetryCommand())
            session = self._client_id_required(context)
        except RpcError as exc:
            yield pb.TelemetryCommand(status=exc.status)
            return
        stream = TelemetryStream()
        if session.stream is not None:
            session.stream.close()
        session.stream = stream
        reader = asyncio.ensure_future(self._read_telemetry(session, stream, request_iterator, context))
        try:
            while True:
                command = await stream.out.get()
                if command is None:
                    break
                if isinstance(command, BaseException):
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(command))
                    break
                yield command
        finally:
            reader.cancel()
            stream.close()
            if session.stream is stream:
                session.stream = None

    async def _read_telemetry(
        self,
        session: Session,
        stream: TelemetryStream,
        requests: AsyncIterator[pb.TelemetryCommand],
        context: Any = None,
    ) -> None:
        error: BaseException | None = None
        try:
            async for command in requests:
                session.last_seen = time.monotonic()
                kind = command.WhichOneof("command")
                if kind == "settings":
                    if self.auth is not None and context is not None:
                        try:  # ACL 2.0 checks the topics and group a client declares
                            self._authorize(context, {}, command)
                        except RpcError as exc:
                            stream.send(pb.TelemetryCommand(status=exc.status))
                            continue
                    stream.send(
                        pb.TelemetryCommand(
                            status=OK, settings=self._adopt_settings(session, command.settings)
                        )
                    )
                elif not session.answered(command):
                    raise ValueError(f"unexpected telemetry command {kind!r} from {session.client_id}")
        except asyncio.CancelledError:
            raise
        except (grpc.aio.AioRpcError, grpc.aio.UsageError):
            pass  # the client went away
        except Exception as exc:
            log.info("telemetry stream of %s failed: %s", session.client_id, exc)
            error = exc
        stream.close(error)

    def _adopt_settings(self, session: Session, settings: pb.Settings) -> pb.Settings:
        """Keep a client's settings and register it; the settings it should use back."""
        session.settings = settings
        merged = pb.Settings()
        merged.CopyFrom(settings)
        if settings.HasField("subscription"):
            group = settings.subscription.group.name
            config = self.groups.find(group) if group else None
            retry_max = config.retry_max_times if config is not None else 16
            merged.subscription.fifo = config is not None and config.consume_message_orderly
            merged.subscription.receive_batch_size = RECEIVE_BATCH_SIZE
            if not settings.subscription.HasField("long_polling_timeout"):
                merged.subscription.long_polling_timeout.CopyFrom(duration(LONG_POLLING_TIMEOUT))
            merged.backoff_policy.CopyFrom(
                pb.RetryPolicy(
                    max_attempts=retry_max + 1,
                    customized_backoff=pb.CustomizedBackoff(
                        next=[duration(s) for s in CONSUMER_BACKOFF_SECONDS]
                    ),
                )
            )
        else:
            merged.publishing.max_body_size = self.store.config.max_message_size
            merged.publishing.validate_message_type = settings.publishing.validate_message_type
            merged.backoff_policy.CopyFrom(PRODUCER_BACKOFF)
        self._register(session)
        return merged

    def _register(self, session: Session) -> None:
        """Make the client a member of its groups (producer group = each topic it publishes
        to, as the proxy names them; transaction checks find producers there)."""
        settings = session.settings
        if settings is None:
            return
        channel = ClientChannel(
            # A current version: the broker's forwarded requests refuse clients older than 3.1.8.
            session.channel,
            session.client_id,
            session.language or "OTHER",
            CURRENT_VERSION,
            last_update=time.monotonic(),
        )
        if settings.HasField("subscription"):
            sub = settings.subscription
            data = ConsumerData(
                group_name=sub.group.name,
                consume_type=(
                    ConsumeType.CONSUME_PASSIVELY
                    if settings.client_type == pb.PUSH_CONSUMER
                    else ConsumeType.CONSUME_ACTIVELY
                ),
                subscription_data_set=[self._subscription(entry) for entry in sub.subscriptions],
            )
            if data.group_name:
                self.clients.register_consumer(channel, data)
        else:
            for topic in session.publishing_topics:
                self.clients.register_producer(channel, topic)

    @staticmethod
    def _subscription(entry: pb.SubscriptionEntry) -> SubscriptionData:
        expression = entry.expression.expression or "*"
        if entry.expression.type == pb.SQL:
            return SubscriptionData(topic=entry.topic.name, sub_string=expression, expression_type="SQL92")
        tags = [t.strip() for t in expression.split("||") if t.strip()] if expression != "*" else []
        return SubscriptionData(
            topic=entry.topic.name,
            sub_string=expression,
            tags_set=tags,
            code_set=[tags_code(t) for t in tags],
            sub_version=now_ms(),
        )

    # -- Heartbeat / NotifyClientTermination ----------------------------------------------

    async def Heartbeat(self, request: pb.HeartbeatRequest, context: Any) -> pb.HeartbeatResponse:
        try:
            self._authorize(context, {}, request)
            session = self._client_id_required(context)
            if session.settings is None:
                raise RpcError(
                    Code.UNRECOGNIZED_CLIENT_TYPE,
                    f"client {session.client_id} has sent no settings on a telemetry stream yet",
                )
            self._register(session)
            return pb.HeartbeatResponse(status=OK)
        except RpcError as exc:
            return pb.HeartbeatResponse(status=exc.status)

    async def NotifyClientTermination(
        self, request: pb.NotifyClientTerminationRequest, context: Any
    ) -> pb.NotifyClientTerminationResponse:
        try:
            self._authorize(context, {}, request)
            session = self._session(context, create=False)
            if session is None or session.settings is None:
                raise RpcError(Code.UNRECOGNIZED_CLIENT_TYPE, "unknown client")
            self.forget(session)
            return pb.NotifyClientTerminationResponse(status=OK)
        except RpcError as exc:
            return pb.NotifyClientTerminationResponse(status=exc.status)

    def forget(self, session: Session) -> None:
        """Drop a client: its registrations, its stream, its settings; what it was still
        processing under auto-renewal becomes visible again in a second."""
        self.sessions.pop(session.client_id, None)
        for first, renewal in list(self.renewals.items()):
            if renewal.client_id == session.client_id:
                del self.renewals[first]
                task = asyncio.ensure_future(self._abandon(renewal))
                self._abandoning.add(task)
                task.add_done_callback(self._abandoning.discard)
        self.clients.connection_closed(session.channel)
        session.channel.close("client terminated")
        if session.stream is not None:
            session.stream.close()

    async def _abandon(self, renewal: Renewal) -> None:
        with contextlib.suppress(BrokerError):
            await self.pop.change_invisible(
                group=renewal.group,
                topic=renewal.topic,
                receipt_handle=renewal.handle,
                invisible_ms=ABANDONED_INVISIBLE_MS,
            )

    def expire(self, max_idle_seconds: float) -> None:
        """Forget clients silent for ``max_idle_seconds`` (no heartbeat, no stream traffic)."""
        deadline = time.monotonic() - max_idle_seconds
        for session in [s for s in self.sessions.values() if s.last_seen < deadline]:
            log.info("5.x client %s expired", session.client_id)
            self.forget(session)

    # -- SendMessage ----------------------------------------------------------------------

    async def SendMessage(self, request: pb.SendMessageRequest, context: Any) -> pb.SendMessageResponse:
        if not request.messages:
            return pb.SendMessageResponse(status=status(Code.BAD_REQUEST, "no message to send"))
        try:
            self._authorize(context, {m.topic.name: AclPerm.PUB for m in request.messages}, request)
        except RpcError as exc:
            return pb.SendMessageResponse(status=exc.status)
        session = self._session(context)
        peer = session.channel if session is not None else None
        entries = []
        for message in request.messages:
            try:
                entries.append(await self._send_one(message, peer, _peer(context)))
            except RpcError as exc:
                entries.append(pb.SendResultEntry(status=exc.status))
        if len(entries) == 1:
            top = entries[0].status
        elif all(e.status.code == Code.OK for e in entries):
            top = OK
        else:
            top = status(Code.MULTIPLE_RESULTS, "some messages were not sent")
        return pb.SendMessageResponse(status=top, entries=entries)

    def _properties(self, message: pb.Message, peer_host: str) -> dict[str, str]:
        """The 4.x properties of a 5.x message; raises :class:`RpcError` for one the proxy
        refuses."""
        sp = message.system_properties
        user = message.user_properties
        if len(user) > MAX_USER_PROPERTIES:
            raise RpcError(Code.MESSAGE_PROPERTIES_TOO_LARGE, f"more than {MAX_USER_PROPERTIES} properties")
        size = 0
        for key, value in user.items():
            if not key or key in SYSTEM_PROPERTIES:
                raise RpcError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property key {key!r} is reserved")
            if any(c in key or c in value for c in "\x01\x02"):
                raise RpcError(
                    Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property {key!r} holds a separator character"
                )
            size += len(key) + len(value)
        if size > MAX_USER_PROPERTIES_SIZE:
            raise RpcError(
                Code.MESSAGE_PROPERTIES_TOO_LARGE, f"the properties are over {MAX_USER_PROPERTIES_SIZE} bytes"
            )
        props = dict(user)
        if sp.HasField("tag"):
            tag = sp.tag
            if not tag.strip() or "|" in tag or any(ord(c) < 32 or ord(c) == 127 for c in tag):
                raise RpcError(Code.ILLEGAL_MESSAGE_TAG, f"tag {tag!r} is not allowed")
            props[PropertyKey.TAGS] = tag
        if sp.keys:
            for key in sp.keys:
                if not key.strip() or " " in key or any(ord(c) < 32 for c in key):
                    raise RpcError(Code.ILLEGAL_MESSAGE_KEY, f"key {key!r} is not allowed")
            props[PropertyKey.KEYS] = " ".join(sp.keys)
        props[_UNIQ_KEY] = sp.message_id or new_unique_id()
        if sp.HasField("message_group"):
            group = sp.message_group
            if not group or len(group.encode()) >= MAX_MESSAGE_GROUP_SIZE or any(ord(c) < 32 for c in group):
                raise RpcError(Code.ILLEGAL_MESSAGE_GROUP, f"message group {group!r} is not allowed")
            props[SHARDING_KEY] = group
        if sp.HasField("delivery_timestamp"):
            deliver = delivery_time_ms(sp.delivery_timestamp)
            if deliver - now_ms() > MAX_DELAY_MS:
                raise RpcError(Code.ILLEGAL_DELIVERY_TIME, "the delivery time is more than a day ahead")
            props[TIMER_DELIVER_MS] = str(deliver)
        if sp.message_type == pb.TRANSACTION:
            props[_TRAN_MSG] = "true"
            props[PropertyKey.PRODUCER_GROUP] = message.topic.name
            if sp.HasField("orphaned_transaction_recovery_duration"):
                seconds = sp.orphaned_transaction_recovery_duration.seconds
                if seconds > 0:
                    props[PropertyKey.CHECK_IMMUNITY_TIME_IN_SECONDS] = str(seconds)
        if sp.HasField("delivery_attempt"):
            props[PropertyKey.RECONSUME_TIME] = str(sp.delivery_attempt)
        if sp.HasField("trace_context") and sp.trace_context:
            props[TRACE_CONTEXT] = sp.trace_context
        props[BORN_HOST] = sp.born_host or peer_host
        born = sp.born_timestamp.ToMilliseconds() if sp.HasField("born_timestamp") else now_ms()
        props[BORN_TIMESTAMP] = str(born)
        return props

    async def _send_one(
        self, message: pb.Message, channel: GrpcChannel | None, peer: tuple[str, int]
    ) -> pb.SendResultEntry:
        name = message.topic.name
        sp = message.system_properties
        if not message.body:
            raise RpcError(Code.MESSAGE_BODY_EMPTY, "the message body is empty")
        limit = self.store.config.max_message_size  # the broker's maxMessageSize, as for remoting
        if len(message.body) > limit:
            raise RpcError(Code.MESSAGE_BODY_TOO_LARGE, f"the body is over {limit} bytes")
        topic = self._topic(name, create=True)
        props = self._properties(message, peer[0])
        expected = topic.attributes.get(MESSAGE_TYPE)
        if expected is not None and expected != "MIXED":
            actual = pb.MessageType.Name(message_type(props))
            if actual != expected:
                raise RpcError(
                    Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                    f"TopicMessageType validate failed, the expected type is {expected}, "
                    f"but actual type is {actual}",
                )
        writable = topic.write_queue_nums
        if writable <= 0:
            raise RpcError(Code.FORBIDDEN, f"topic {name} has no writable queue")
        group = props.get(SHARDING_KEY)
        if group is not None:
            queue_id = consistent_queue(group, writable)
        else:
            queue_id = next(self._round_robin) % writable
        transactional = props.get(_TRAN_MSG) == "true"
        sys_flag = TRANSACTION_PREPARED_TYPE if transactional else 0
        if sp.body_encoding == pb.GZIP:
            sys_flag |= MessageSysFlag.COMPRESSED
        born = int(props[BORN_TIMESTAMP])
        header = SendMessageRequestHeaderV2(
            producer_group=name,
            topic=name,
            default_topic=AUTO_CREATE_TOPIC,
            default_topic_queue_nums=self.config.default_topic_queue_nums,
            queue_id=queue_id,
            sys_flag=sys_flag,
            born_timestamp=born,
            flag=0,
            properties=encode_properties(props),
            reconsume_times=max(0, sp.delivery_attempt - 1) if sp.HasField("delivery_attempt") else 0,
        )
        cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header.to_fields(), bytes(message.body))
        response = await self._call(RequestCode.SEND_MESSAGE_V2, channel, cmd, peer)
        code = status_of_response_code(response.code)
        fields = response.ext_fields or {}
        uniq = props[_UNIQ_KEY]
        queue_offset = int(fields.get("queueOffset", 0))
        return pb.SendResultEntry(
            status=status(code, response.remark or ("OK" if code == Code.OK else "")),
            message_id=uniq,
            transaction_id=uniq if transactional else "",
            offset=queue_offset,
        )

    async def _call(
        self, code: int, channel: GrpcChannel | None, cmd: RemotingCommand, peer: tuple[str, int]
    ) -> RemotingCommand:
        """Run a remoting handler of this broker; its errors as :class:`RpcError`."""
        if channel is None:
            # A request without a client id: records still name the peer as born host.
            channel = self._anonymous.get(peer)
            if channel is None:
                if len(self._anonymous) >= 1024:
                    self._anonymous.clear()
                channel = self._anonymous[peer] = Session("", peer).channel
        # A handler may answer later instead of returning the answer (a send under
        # SYNC_FLUSH: the flush covering it answers on the connection).
        answer = channel.expect_answer(cmd)
        try:
            result = self.handlers[code](channel, cmd)
            if inspect.isawaitable(result):
                result = await result
            if result is None:
                result = await answer
        except BrokerError as exc:
            raise RpcError(status_of_response_code(exc.code), exc.remark or str(exc)) from None
        except MQError as exc:
            raise RpcError(Code.INTERNAL_SERVER_ERROR, str(exc)) from None
        finally:
            channel.forget_answer(cmd)
        if not isinstance(result, RemotingCommand):
            raise RpcError(Code.INTERNAL_SERVER_ERROR, "the broker gave no answer")
        return result

    # -- EndTransaction -------------------------------------------------------------------

    async def EndTransaction(
        self, request: pb.EndTransactionRequest, context: Any
    ) -> pb.EndTransactionResponse:
        try:
            self._authorize(context, {request.topic.name: AclPerm.PUB}, request)
            self._end_transaction(request)
            return pb.EndTransactionResponse(status=OK)
        except RpcError as exc:
            return pb.EndTransactionResponse(status=exc.status)

    def _end_transaction(self, request: pb.EndTransactionRequest) -> None:
        topic, transaction_id = request.topic.name, request.transaction_id
        if not transaction_id.strip():
            raise RpcError(Code.INVALID_TRANSACTION_ID, "the transaction id is empty")
        if request.resolution == pb.COMMIT:
            kind = TRANSACTION_COMMIT_TYPE
        elif request.resolution == pb.ROLLBACK:
            kind = TRANSACTION_ROLLBACK_TYPE
        else:
            raise RpcError(Code.BAD_REQUEST, "the resolution is neither COMMIT nor ROLLBACK")
        # A 5.x producer's group is its topic (the proxy names it so).
        half = self.transactions.find(topic, transaction_id)
        if half is None:
            raise RpcError(
                Code.INVALID_TRANSACTION_ID, f"no open transaction {transaction_id} on topic {topic}"
            )
        try:
            self.transactions.decide(
                commit_log_offset=half.commit_log_offset,
                queue_offset=half.queue_offset,
                producer_group=topic,
                kind=kind,
                transaction_id=transaction_id,
            )
        except BrokerError as exc:
            raise RpcError(Code.INVALID_TRANSACTION_ID, exc.remark or str(exc)) from None

    # -- POP consumption (SimpleConsumer, PushConsumer) -----------------------------------

    def _fifo(self, group: str) -> bool:
        config = self.groups.get(group)
        return config is not None and config.consume_message_orderly

    async def QueryAssignment(
        self, request: pb.QueryAssignmentRequest, context: Any
    ) -> pb.QueryAssignmentResponse:
        try:
            self._authorize(context, self._group_perms(request.topic.name, request.group.name), request)
            self._client_id_required(context)
            brokers, accepted = await self._cluster(request.topic.name, create=False)
            fifo = self._fifo(request.group.name)
            given = assignments(request.topic.name, brokers, fifo=fifo, accepted=accepted)
            if not given:
                raise RpcError(Code.FORBIDDEN, f"topic {request.topic.name} has no readable queue")
            return pb.QueryAssignmentResponse(status=OK, assignments=given)
        except RpcError as exc:
            return pb.QueryAssignmentResponse(status=exc.status)

    def _receive_params(self, request: pb.ReceiveMessageRequest, context: Any) -> tuple[int, float]:
        """(invisible ms, long-poll seconds) of a receive, as the proxy settles them."""
        if request.auto_renew:
            invisible = self.auto_renew_invisible_ms
        else:
            if not request.HasField("invisible_duration"):
                raise RpcError(
                    Code.ILLEGAL_INVISIBLE_TIME, "invisible_duration is required without auto_renew"
                )
            invisible = request.invisible_duration.ToMilliseconds()
            if not MIN_INVISIBLE_MS <= invisible <= MAX_INVISIBLE_MS:
                raise RpcError(
                    Code.ILLEGAL_INVISIBLE_TIME, f"invisible duration {invisible} ms is outside [10 s, 12 h]"
                )
        poll = (
            request.long_polling_timeout.ToNanoseconds() / 1e9
            if request.HasField("long_polling_timeout")
            else LONG_POLLING_TIMEOUT
        )
        poll = max(MIN_LONG_POLL, min(LONG_POLLING_TIMEOUT, poll))
        remaining = context.time_remaining()
        if remaining is not None:
            # Leave the answer time to travel before the client's deadline.
            if remaining < 1.0:
                raise RpcError(Code.ILLEGAL_POLLING_TIME, f"only {remaining:.1f}s of the deadline is left")
            poll = min(poll, remaining - 0.5 - min(remaining / 10, 2.0))
        return invisible, max(0.0, poll)

    async def ReceiveMessage(
        self, request: pb.ReceiveMessageRequest, context: Any
    ) -> AsyncIterator[pb.ReceiveMessageResponse]:
        group, mq = request.group.name, request.message_queue
        topic = mq.topic.name
        try:
            self._authorize(context, self._group_perms(topic, group), request)
            session = self._client_id_required(context)
            if request.filter_expression.type == pb.SQL:
                raise RpcError(Code.ILLEGAL_FILTER_EXPRESSION, "POP receives filter by TAG only")
            invisible, poll = self._receive_params(request, context)
            fifo = self._fifo(group)
            outcome = await self.pop.pop(
                group=group,
                topic=topic,
                queue_id=mq.id if fifo and mq.id >= 0 else None,
                max_messages=max(1, min(request.batch_size or RECEIVE_BATCH_SIZE, RECEIVE_BATCH_SIZE)),
                invisible_ms=invisible,
                expression_type="TAG",
                expression=request.filter_expression.expression or "*",
                poll_ms=int(poll * 1000),
                fifo=fifo,
            )
        except RpcError as exc:
            yield pb.ReceiveMessageResponse(status=exc.status)
            return
        except BrokerError as exc:
            yield pb.ReceiveMessageResponse(status=_pop_status(exc))
            return
        popped = outcome.messages
        if not popped:
            yield pb.ReceiveMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
            return
        yield pb.ReceiveMessageResponse(status=OK)
        sent = 0
        try:
            for item in popped:
                yield pb.ReceiveMessageResponse(
                    message=to_message(
                        item.message,
                        topic=item.topic,
                        receipt_handle=item.receipt_handle,
                        invisible_ms=item.invisible_time,
                        delivery_attempt=item.delivery_attempt,
                    )
                )
                sent += 1
                if request.auto_renew:
                    self.renewals[item.receipt_handle] = Renewal(
                        session.client_id,
                        group,
                        item.topic,
                        item.receipt_handle,
                        item.pop_time,
                        item.pop_time + item.invisible_time,
                    )
            yield pb.ReceiveMessageResponse(delivery_timestamp=timestamp_ms(now_ms()))
        finally:
            # Whatever did not reach the client comes back soon rather than after the
            # invisible time (the proxy's 1 s).
            for item in popped[sent:]:
                with contextlib.suppress(BrokerError):
                    await self.pop.change_invisible(
                        group=group, topic=item.topic, receipt_handle=item.receipt_handle, invisible_ms=1000
                    )

    async def AckMessage(self, request: pb.AckMessageRequest, context: Any) -> pb.AckMessageResponse:
        group, topic = request.group.name, request.topic.name
        try:
            self._authorize(context, self._group_perms(topic, group), request)
        except RpcError as exc:
            return pb.AckMessageResponse(status=exc.status)
        if not request.entries:
            return pb.AckMessageResponse(status=status(Code.BAD_REQUEST, "no entry to acknowledge"))
        entries = []
        for entry in request.entries:
            try:
                await self.pop.ack(
                    group=group, topic=topic, receipt_handle=self._current_handle(entry.receipt_handle)
                )
                result = OK
            except BrokerError as exc:
                result = _pop_status(exc)
            entries.append(
                pb.AckMessageResultEntry(
                    message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=result
                )
            )
        if len(entries) == 1:
            top = entries[0].status
        elif all(e.status.code == Code.OK for e in entries):
            top = OK
        else:
            top = status(Code.MULTIPLE_RESULTS, "some entries were not acknowledged")
        return pb.AckMessageResponse(status=top, entries=entries)

    async def ChangeInvisibleDuration(
        self, request: pb.ChangeInvisibleDurationRequest, context: Any
    ) -> pb.ChangeInvisibleDurationResponse:
        group, topic = request.group.name, request.topic.name
        try:
            self._authorize(context, self._group_perms(topic, group), request)
            invisible = request.invisible_duration.ToMilliseconds()
            if not 0 <= invisible <= MAX_INVISIBLE_MS:
                raise RpcError(
                    Code.ILLEGAL_INVISIBLE_TIME, f"invisible duration {invisible} ms is outside [0, 12 h]"
                )
            handle = await self.pop.change_invisible(
                group=group,
                topic=topic,
                receipt_handle=self._current_handle(request.receipt_handle),
                invisible_ms=invisible,
            )
            return pb.ChangeInvisibleDurationResponse(status=OK, receipt_handle=handle)
        except RpcError as exc:
            # The client replaces its handle with the answer's before it looks at the
            # status: a refusal hands back the one it had.
            return pb.ChangeInvisibleDurationResponse(
                status=exc.status, receipt_handle=request.receipt_handle
            )
        except BrokerError as exc:
            return pb.ChangeInvisibleDurationResponse(
                status=_pop_status(exc), receipt_handle=request.receipt_handle
            )

    async def ForwardMessageToDeadLetterQueue(
        self, request: pb.ForwardMessageToDeadLetterQueueRequest, context: Any
    ) -> pb.ForwardMessageToDeadLetterQueueResponse:
        group, topic = request.group.name, request.topic.name
        try:
            self._authorize(context, self._group_perms(topic, group), request)
            await self.pop.forward_to_dlq(
                group=group, topic=topic, receipt_handle=self._current_handle(request.receipt_handle)
            )
            return pb.ForwardMessageToDeadLetterQueueResponse(status=OK)
        except RpcError as exc:
            return pb.ForwardMessageToDeadLetterQueueResponse(status=exc.status)
        except BrokerError as exc:
            return pb.ForwardMessageToDeadLetterQueueResponse(status=_pop_status(exc))

    # -- PullMessage and offsets (pull-style clients) -------------------------------------

    async def PullMessage(
        self, request: pb.PullMessageRequest, context: Any
    ) -> AsyncIterator[pb.PullMessageResponse]:
        mq = request.message_queue
        try:
            self._authorize(context, self._group_perms(mq.topic.name, request.group.name), request)
            self._topic(mq.topic.name, create=False)
            codes = _tag_codes(request.filter_expression)
            batch = max(1, min(request.batch_size or RECEIVE_BATCH_SIZE, RECEIVE_BATCH_SIZE))
            poll = (
                request.long_polling_timeout.ToNanoseconds() / 1e9
                if request.HasField("long_polling_timeout")
                else 0.0
            )
            deadline = time.monotonic() + max(0.0, min(poll, LONG_POLLING_TIMEOUT))
            while True:
                result = self.store.get_messages(
                    request.group.name, mq.topic.name, mq.id, request.offset, batch, codes
                )
                messages = (
                    decode_records(b"".join(result.buffers), decompress=False) if result.buffers else []
                )
                remaining = deadline - time.monotonic()
                if messages or remaining <= 0 or result.next_begin_offset != request.offset:
                    break
                await self._wait_arrival(mq.topic.name, mq.id, remaining)
        except RpcError as exc:
            yield pb.PullMessageResponse(status=exc.status)
            return
        except MQError as exc:
            yield pb.PullMessageResponse(status=status(Code.INTERNAL_SERVER_ERROR, str(exc)))
            return
        yield pb.PullMessageResponse(
            status=OK if messages else status(Code.MESSAGE_NOT_FOUND, "no new message")
        )
        for msg in messages:
            yield pb.PullMessageResponse(message=to_message(msg))
        yield pb.PullMessageResponse(next_offset=result.next_begin_offset)

    async def UpdateOffset(self, request: pb.UpdateOffsetRequest, context: Any) -> pb.UpdateOffsetResponse:
        mq = request.message_queue
        try:
            self._authorize(context, self._group_perms(mq.topic.name, request.group.name), request)
            self._topic(mq.topic.name, create=False)
            if request.offset < 0:
                raise RpcError(Code.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
            self.offsets.commit(request.group.name, mq.topic.name, mq.id, request.offset)
            return pb.UpdateOffsetResponse(status=OK)
        except RpcError as exc:
            return pb.UpdateOffsetResponse(status=exc.status)

    async def GetOffset(self, request: pb.GetOffsetRequest, context: Any) -> pb.GetOffsetResponse:
        mq = request.message_queue
        try:
            self._authorize(context, self._group_perms(mq.topic.name, request.group.name), request)
            self._topic(mq.topic.name, create=False)
            offset = self.offsets.query(request.group.name, mq.topic.name, mq.id)
            if offset < 0:
                raise RpcError(
                    Code.OFFSET_NOT_FOUND, f"group {request.group.name} has no offset on this queue"
                )
            return pb.GetOffsetResponse(status=OK, offset=offset)
        except RpcError as exc:
            return pb.GetOffsetResponse(status=exc.status)

    async def QueryOffset(self, request: pb.QueryOffsetRequest, context: Any) -> pb.QueryOffsetResponse:
        mq = request.message_queue
        try:
            self._authorize(context, {mq.topic.name: AclPerm.SUB}, request)
            self._topic(mq.topic.name, create=False)
            policy = request.query_offset_policy
            if policy == pb.BEGINNING:
                offset = self.store.get_min_offset(mq.topic.name, mq.id)
            elif policy == pb.END:
                offset = self.store.get_max_offset(mq.topic.name, mq.id)
            else:
                offset = self.store.get_offset_by_time(
                    mq.topic.name, mq.id, request.timestamp.ToMilliseconds()
                )
            return pb.QueryOffsetResponse(status=OK, offset=offset)
        except RpcError as exc:
            return pb.QueryOffsetResponse(status=exc.status)


def _pop_status(exc: BrokerError) -> pb.Status:
    """A POP refusal as a 5.x status: any receipt-handle problem is INVALID_RECEIPT_HANDLE."""
    if isinstance(exc, InvalidReceiptHandleError | ReceiptHandleExpiredError):
        return status(Code.INVALID_RECEIPT_HANDLE, exc.remark or str(exc))
    return status(status_of_response_code(exc.code), exc.remark or str(exc))


def consistent_queue(group: str, queues: int) -> int:
    """The queue a message group's messages go to (the proxy's choice, so both agree)."""
    return consistent_hash(java_hash(group), queues)


def _tag_codes(expression: pb.FilterExpression) -> frozenset[int] | None:
    """The tags codes a TAG filter keeps (None: all); SQL92 is not served on pulls."""
    if expression.type == pb.SQL:
        raise RpcError(Code.ILLEGAL_FILTER_EXPRESSION, "SQL92 filters are not served on PullMessage")
    text = expression.expression.strip()
    if not text or text == "*":
        return None
    return frozenset(tags_code(t.strip()) for t in text.split("||") if t.strip())
