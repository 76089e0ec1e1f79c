"""What every part of the 5.x front shares: the per-request checks (the client's session, ACL
1.0 or 2.0), the 5.x settings announced to clients, and the calls the RPCs make on whatever
holds the messages, with plain values (:class:`Front`'s ``_``-prefixed hooks).

Two servicers are put together from the same RPC families, each in its module:
:mod:`.publish` (SendMessage, EndTransaction), :mod:`.consume` (POP consumption:
QueryAssignment, ReceiveMessage, AckMessage, ChangeInvisibleDuration,
ForwardMessageToDeadLetterQueue, and renewing auto-renewed receipts) and :mod:`.lifecycle`
(QueryRoute, Telemetry, Heartbeat, client sessions). The broker's own endpoint
(:class:`~.service.MessagingService`, Apache's "local" mode) answers the hooks from the broker's
parts (:mod:`.local`, which adds :mod:`.pull`'s PullMessage and offsets); the proxy
(``aiorocketmq.proxy``, the "cluster" mode) answers them over remoting from the brokers the
name servers know. Neither RPC family knows which it runs on.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from abc import ABCMeta, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import grpc

from aiorocketmq.broker.acl import AccessValidator
from aiorocketmq.broker.acl import Perm as AclPerm
from aiorocketmq.broker.auth import AuthEngine
from aiorocketmq.protocol.body import TopicConfig
from aiorocketmq.protocol.message import MessageExt
from aiorocketmq.protocol.names import retry_topic
from aiorocketmq.protocol.topic_attributes import MESSAGE_TYPE

from . import messaging_pb2 as pb
from . import messaging_pb2_grpc as pb_grpc
from .auth import Forbidden, Unauthorized, authorize, authorize_v2
from .convert import Code, duration, status
from .routes import RoutedBroker
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

EVERY_TYPE = [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION]
#: The message types a route's queues accept, by the topic's ``message.type`` attribute.
_ACCEPTED_TYPES = {
    "NORMAL": [pb.NORMAL],
    "FIFO": [pb.FIFO],
    "DELAY": [pb.DELAY],
    "TRANSACTION": [pb.TRANSACTION],
    "MIXED": EVERY_TYPE,
    "UNSPECIFIED": [pb.MESSAGE_TYPE_UNSPECIFIED],
}


def accepted_types(topic: TopicConfig) -> list[pb.MessageType]:
    """The message types a route's queues of ``topic`` accept, by its ``message.type``."""
    return _ACCEPTED_TYPES.get(topic.attributes.get(MESSAGE_TYPE, ""), EVERY_TYPE)


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


class Received(Protocol):
    """One message a receive hands out (the POP service's ``PoppedMessage`` has this shape)."""

    #: The message as stored (for a redelivery, the copy in a retry topic).
    message: MessageExt
    #: The topic the consumer asked for.
    topic: str
    receipt_handle: str
    delivery_attempt: int
    pop_time: int
    invisible_time: int


@dataclass(frozen=True, slots=True)
class GroupPolicy:
    """What a consumer group's config tells the front: orderly (FIFO) delivery and the
    retries before its dead-letter queue."""

    fifo: bool = False
    retry_max_times: int = 16


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A checked 5.x message as the store takes it: 4.x properties and flags (publish.py)."""

    topic: str
    body: bytes
    properties: dict[str, str]
    #: Its MessageSysFlag bits so far (compressed, prepared); the store adds the topic's.
    sys_flag: int
    born_timestamp: int
    born_host: tuple[str, int]
    reconsume_times: int
    transactional: bool


class Front(pb_grpc.MessagingServiceServicer, metaclass=ABCMeta):
    """Sessions and per-request checks, and the hooks through which the RPC families reach
    the messages (module doc). A hook refuses with :class:`RpcError`."""

    @property
    def max_message_size(self) -> int:
        """The largest body a client may send (the broker's ``maxMessageSize``)."""
        return 4 * 1024 * 1024

    def __init__(self, *, access: AccessValidator | None, auth: AuthEngine | None = None) -> None:
        self.access = access
        #: ACL 2.0 (replaces ``access`` when set).
        self.auth = auth
        self.sessions: dict[str, Session] = {}
        self._round_robin = itertools.count()
        self._next_acl_look = 0.0
        #: First receipt handle -> its renewal, for messages received with ``auto_renew``.
        self.renewals: dict[str, Renewal] = {}
        self.auto_renew_invisible_ms = AUTO_RENEW_INVISIBLE_MS
        self.renew_ahead_ms = RENEW_AHEAD_MS
        self.renew_steps_ms = RENEW_STEPS_MS
        self._renewing: asyncio.Task[None] | None = None
        self._abandoning: set[asyncio.Task[None]] = set()
        self._anonymous: dict[tuple[str, int], GrpcChannel] = {}

    # -- hooks: where the messages are ----------------------------------------------------

    @abstractmethod
    async def _cluster(self, name: str, *, create: bool) -> tuple[list[RoutedBroker], list[pb.MessageType]]:
        """The brokers of topic ``name`` as clients are told to reach them, and the message
        types its queues accept (``create``: a topic that does not exist may be created)."""

    @abstractmethod
    async def _store(self, message: Outgoing) -> pb.SendResultEntry:
        """Store one checked message (topic checks, queue choice); its result entry."""

    @abstractmethod
    async def _end(self, topic: str, transaction_id: str, *, commit: bool) -> None:
        """Commit or roll back the open transaction ``transaction_id`` of ``topic``."""

    @abstractmethod
    async def _recall(self, topic: str, recall_handle: str, peer: tuple[str, int]) -> str:
        """Recall the timer message ``recall_handle`` names; its message id."""

    @abstractmethod
    async def _group(self, name: str) -> GroupPolicy:
        """The consumer group's policy (created with defaults when the broker allows it)."""

    @abstractmethod
    async def _receive(
        self,
        broker: str,
        *,
        group: str,
        topic: str,
        queue_id: int | None,
        max_messages: int,
        invisible_ms: int,
        expression: str,
        poll_ms: int,
        fifo: bool,
        expression_type: str = "TAG",
        attempt_id: str = "",
    ) -> Sequence[Received]:
        """POP up to ``max_messages`` of ``topic`` on broker ``broker`` matching a TAG or
        SQL92 ``expression``, waiting up to ``poll_ms`` for some (``attempt_id``: a FIFO
        client's retry of a receive names the attempt it repeats)."""

    @abstractmethod
    async def _ack(self, *, group: str, topic: str, receipt_handle: str) -> None:
        """The message ``receipt_handle`` names is consumed: never delivered again."""

    @abstractmethod
    async def _change_invisible(
        self, *, group: str, topic: str, receipt_handle: str, invisible_ms: int
    ) -> str:
        """The message stays invisible ``invisible_ms`` from now; its new receipt handle."""

    @abstractmethod
    async def _forward_to_dlq(
        self, *, group: str, topic: str, receipt_handle: str, message_id: str = ""
    ) -> None:
        """The message goes to its group's dead-letter queue (``message_id``: its id)."""

    @abstractmethod
    def _register(self, session: Session) -> None:
        """Make the client a member of the groups its settings name (transaction checks and
        consumer listings find it there)."""

    @abstractmethod
    def _unregister(self, session: Session) -> None:
        """The client is gone: drop its memberships."""

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
