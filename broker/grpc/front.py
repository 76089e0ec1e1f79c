"""What every part of the 5.x front shares: the parts of the broker it serves from, the
per-request checks (the client's session, ACL 1.0 or 2.0), the topics a request names and their
brokers across the cluster (:mod:`.routes`), and the 5.x settings the proxy announces.

The servicer (:class:`~.service.MessagingService`) is put together from one class per family
of RPCs, each in its module: :mod:`.publish` (SendMessage, EndTransaction), :mod:`.consume` (POP
consumption: QueryAssignment, ReceiveMessage, AckMessage, ChangeInvisibleDuration,
ForwardMessageToDeadLetterQueue, and renewing auto-renewed receipts), :mod:`.pull` (PullMessage
and offsets) and :mod:`.service` itself (QueryRoute, Telemetry, Heartbeat, client sessions).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from aiorocketmq.broker.accept import Acceptor
from aiorocketmq.broker.acl import AccessValidator
from aiorocketmq.broker.acl import Perm as AclPerm
from aiorocketmq.broker.auth import AuthEngine
from aiorocketmq.broker.clients import ClientRegistry
from aiorocketmq.broker.config import BrokerConfig
from aiorocketmq.broker.groups import GroupTable
from aiorocketmq.broker.offsets import OffsetTable
from aiorocketmq.broker.pop import PopService
from aiorocketmq.broker.store import FlushDiskType, MessageStore
from aiorocketmq.broker.topics import TopicTable
from aiorocketmq.broker.transactions import TransactionService
from aiorocketmq.protocol.body import QueueData, TopicConfig
from aiorocketmq.protocol.names import AUTO_CREATE_TOPIC, retry_topic, topic_name_problem
from aiorocketmq.protocol.topic_attributes import MESSAGE_TYPE
from aiorocketmq.protocol.transport import Signer

from . import messaging_pb2 as pb
from . import messaging_pb2_grpc as pb_grpc
from .auth import Forbidden, Unauthorized, authorize, authorize_v2
from .convert import Code, duration, status
from .routes import ClusterRoutes, RoutedBroker, RouteSource
from .sessions import GrpcChannel, Session

log = logging.getLogger(__name__)

CLIENT_ID = "x-mq-client-id"
LANGUAGE = "x-mq-language"
CLIENT_VERSION = "x-mq-client-version"

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


def accepted_types(topic: TopicConfig) -> list[pb.MessageType]:
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


def peer_of(context: grpc.aio.ServicerContext) -> tuple[str, int]:
    """``ipv4:1.2.3.4:5`` / ``ipv6:[::1]:5`` as (host, port)."""
    peer = context.peer() or ""
    _, _, rest = peer.partition(":")
    host, _, port = rest.rpartition(":")
    host = host.strip("[]")
    try:
        return host or "127.0.0.1", int(port)
    except ValueError:
        return host or "127.0.0.1", 0


def metadata_of(context: grpc.aio.ServicerContext) -> dict[str, str]:
    return {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}


class Front(pb_grpc.MessagingServiceServicer):
    """The broker's parts and the per-request checks every RPC family uses (module doc)."""

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
        acceptor: Acceptor,
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
        self.acceptor = acceptor
        self._sync_flush = store.config.flush_disk_type == FlushDiskType.SYNC_FLUSH
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
        #: The broker's one registry of waiting consumers (PullMessage's long polling here).
        self.arrivals = pop.arrivals
        self._next_acl_look = 0.0
        #: First receipt handle -> its renewal, for messages received with ``auto_renew``.
        self.renewals: dict[str, Renewal] = {}
        self.auto_renew_invisible_ms = AUTO_RENEW_INVISIBLE_MS
        self.renew_ahead_ms = RENEW_AHEAD_MS
        self.renew_steps_ms = RENEW_STEPS_MS
        self._renewing: asyncio.Task[None] | None = None
        self._abandoning: set[asyncio.Task[None]] = set()
        self._anonymous: dict[tuple[str, int], GrpcChannel] = {}

    def bind(self, host: str, port: int) -> None:
        """Advertise ``host:port`` (the gRPC listener) in routes and assignments."""
        self.routes.bind(host, port)
        self.endpoints = self.routes.endpoints

    # -- per request ----------------------------------------------------------------------

    def _session(self, context: grpc.aio.ServicerContext, *, create: bool = True) -> Session | None:
        metadata = metadata_of(context)
        client_id = metadata.get(CLIENT_ID)
        if not client_id:
            return None
        session = self.sessions.get(client_id)
        if session is None and create:
            session = self.sessions[client_id] = Session(
                client_id,
                peer_of(context),
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
                authorize_v2(self.auth, metadata_of(context), peer_of(context)[0], request)
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
            authorize(access, metadata_of(context), peer_of(context)[0], needed)
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
        return await self.routes.brokers(name, self._own_queues(topic)), accepted_types(topic)

    def _own_queues(self, topic: TopicConfig) -> QueueData:
        """This broker's queues of ``topic`` as a route shows them (its permission applied)."""
        return QueueData(
            broker_name=self.config.broker_name,
            read_queue_nums=topic.read_queue_nums,
            write_queue_nums=topic.write_queue_nums,
            perm=topic.perm & self.config.broker_permission,
            topic_sys_flag=topic.topic_sys_flag,
        )
