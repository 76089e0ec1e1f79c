"""The broker's own 5.x endpoint ("local" mode, as Apache's proxy embedded in a broker): the
front's hooks answered from this broker's parts with plain values: sends through the
:class:`~aiorocketmq.broker.accept.Acceptor`, transactions by id in the transaction service,
POP through the POP service, groups and topics from their tables, clients in the broker's
client registry (so transaction checks and consumer listings reach 5.x clients too), and
routes that cover the cluster (:mod:`.routes`)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from aiorocketmq.broker.accept import STATUS_CODES, Accepted, Acceptor
from aiorocketmq.broker.acl import AccessValidator
from aiorocketmq.broker.auth import AuthEngine
from aiorocketmq.broker.clients import ClientChannel, ClientRegistry
from aiorocketmq.broker.config import BrokerConfig
from aiorocketmq.broker.groups import GroupTable
from aiorocketmq.broker.offsets import OffsetTable
from aiorocketmq.broker.pop import InvalidReceiptHandleError, PopService, ReceiptHandleExpiredError
from aiorocketmq.broker.recall import Recaller
from aiorocketmq.broker.store import FlushDiskType, MessageStore
from aiorocketmq.broker.topics import TopicTable
from aiorocketmq.broker.transactions import TransactionService
from aiorocketmq.protocol.body import QueueData, TopicConfig
from aiorocketmq.protocol.codes import (
    CURRENT_VERSION,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    MessageSysFlag,
    ResponseCode,
)
from aiorocketmq.protocol.errors import BrokerError
from aiorocketmq.protocol.message import PropertyKey
from aiorocketmq.protocol.names import AUTO_CREATE_TOPIC, topic_name_problem
from aiorocketmq.protocol.topic_attributes import MESSAGE_TYPE
from aiorocketmq.protocol.transport import Signer

from . import messaging_pb2 as pb
from .convert import SHARDING_KEY, Code, status, status_of_response_code
from .front import EVERY_TYPE, Front, GroupPolicy, Outgoing, Received, RpcError, accepted_types
from .lifecycle import consumer_data
from .publish import born_host, check_message_type, consistent_queue, recall_refusal
from .routes import ClusterRoutes, RoutedBroker, RouteSource
from .sessions import Session


def pop_refusal(exc: BrokerError) -> RpcError:
    """A POP refusal as a 5.x one: any receipt-handle problem is INVALID_RECEIPT_HANDLE."""
    if isinstance(exc, InvalidReceiptHandleError | ReceiptHandleExpiredError):
        return RpcError(Code.INVALID_RECEIPT_HANDLE, exc.remark or str(exc))
    return RpcError(status_of_response_code(exc.code), exc.remark or str(exc))


class LocalFront(Front):
    """The front's hooks on this broker's parts (module doc)."""

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
        recaller: Recaller | None = None,
        auth: AuthEngine | None = None,
        route: RouteSource | None = None,
        signer: Signer | None = None,
    ) -> None:
        super().__init__(access=access, auth=auth)
        self.config = config
        self.store = store
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.clients = clients
        self.transactions = transactions
        self.pop = pop
        self.acceptor = acceptor
        self.recaller = recaller
        self._sync_flush = store.config.flush_disk_type == FlushDiskType.SYNC_FLUSH
        #: Where route answers send clients: the broker's address and the gRPC port.
        self.endpoints = pb.Endpoints()
        #: The cluster's brokers of a topic, from the name servers (``route``: none in tests
        #: of one broker without a name server).
        self.routes = ClusterRoutes(config.broker_name, config.broker_id, route=route, signer=signer)
        #: The broker's one registry of waiting consumers (PullMessage's long polling here).
        self.arrivals = pop.arrivals

    @property
    def max_message_size(self) -> int:
        return self.store.config.max_message_size

    def bind(self, host: str, port: int) -> None:
        """Advertise ``host:port`` (the gRPC listener) in routes and assignments."""
        self.routes.bind(host, port)
        self.endpoints = self.routes.endpoints

    # -- topics and routes ----------------------------------------------------------------

    def _topic(self, name: str, *, create: bool) -> TopicConfig:
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
        """A topic this broker lacks is looked up in the name servers before it is created
        here (``create``: autoCreateTopicEnable permitting), so a client asking this broker
        for a topic that lives elsewhere is sent there instead."""
        topic = self.topics.get(name) if name else None
        if topic is None:
            problem = topic_name_problem(name) if name else "the topic name is empty"
            if problem is not None:
                raise RpcError(Code.ILLEGAL_TOPIC, problem)
            elsewhere = await self.routes.brokers(name, None)
            if elsewhere:
                return elsewhere, EVERY_TYPE
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

    # -- publishing -----------------------------------------------------------------------

    async def _store(self, message: Outgoing) -> pb.SendResultEntry:
        name = message.topic
        topic = self._topic(name, create=True)
        try:
            self.acceptor.topic_for_send(name, AUTO_CREATE_TOPIC, self.config.default_topic_queue_nums)
        except BrokerError as exc:
            raise RpcError(status_of_response_code(exc.code), exc.remark or str(exc)) from None
        props = message.properties
        check_message_type(topic.attributes.get(MESSAGE_TYPE), props)
        writable = topic.write_queue_nums
        if writable <= 0:
            raise RpcError(Code.FORBIDDEN, f"topic {name} has no writable queue")
        group = props.get(SHARDING_KEY)
        queue_id = (
            consistent_queue(group, writable) if group is not None else next(self._round_robin) % writable
        )
        sys_flag = message.sys_flag
        if topic.topic_filter_type == "MULTI_TAG":
            sys_flag |= MessageSysFlag.MULTI_TAGS
        try:
            accepted = self.acceptor.accept(
                name,
                queue_id,
                message.body,
                props,
                None,
                flag=0,
                sys_flag=sys_flag,
                born_timestamp=message.born_timestamp,
                born_host=born_host(message.born_host),
                reconsume_times=message.reconsume_times,
                max_reconsume_times=None,
            )
            if not isinstance(accepted, Accepted):
                accepted = await accepted
            stored = accepted.result.status
            if accepted.wait and (self.store.replica is not None or self._sync_flush):
                stored = await self.store.wait_stored(accepted.result)
        except BrokerError as exc:
            raise RpcError(status_of_response_code(exc.code), exc.remark or str(exc)) from None
        code = status_of_response_code(STATUS_CODES.get(stored, ResponseCode.SYSTEM_ERROR))
        uniq = props[PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX]
        return pb.SendResultEntry(
            status=status(code, "OK" if code == Code.OK else f"stored, but {stored.name}"),
            message_id=uniq,
            transaction_id=uniq if message.transactional else "",
            offset=accepted.result.queue_offset,
            recall_handle=accepted.recall or "",
        )

    async def _recall(self, topic: str, recall_handle: str, peer: tuple[str, int]) -> str:
        if self.recaller is None:
            raise RpcError(Code.NOT_IMPLEMENTED, "this endpoint recalls no message")
        try:
            return self.recaller.recall(topic, recall_handle, producer_group=topic, born_host=born_host(peer))
        except BrokerError as exc:
            raise recall_refusal(exc) from None

    async def _end(self, topic: str, transaction_id: str, *, commit: bool) -> None:
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
                kind=TRANSACTION_COMMIT_TYPE if commit else TRANSACTION_ROLLBACK_TYPE,
                transaction_id=transaction_id,
            )
        except BrokerError as exc:
            raise RpcError(Code.INVALID_TRANSACTION_ID, exc.remark or str(exc)) from None

    # -- consumption ----------------------------------------------------------------------

    async def _group(self, name: str) -> GroupPolicy:
        config = self.groups.find(name)
        if config is None:
            return GroupPolicy()
        return GroupPolicy(fifo=config.consume_message_orderly, retry_max_times=config.retry_max_times)

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
        # attempt_id: a FIFO retry's attempt; the POP service answers a repeated receive from
        # the queue's state, whichever attempt it names.
        try:
            outcome = await self.pop.pop(
                group=group,
                topic=topic,
                queue_id=queue_id,
                max_messages=max_messages,
                invisible_ms=invisible_ms,
                expression_type=expression_type,
                expression=expression,
                poll_ms=poll_ms,
                fifo=fifo,
            )
        except BrokerError as exc:
            raise pop_refusal(exc) from None
        return outcome.messages

    async def _ack(self, *, group: str, topic: str, receipt_handle: str) -> None:
        try:
            await self.pop.ack(group=group, topic=topic, receipt_handle=receipt_handle)
        except BrokerError as exc:
            raise pop_refusal(exc) from None

    async def _change_invisible(
        self, *, group: str, topic: str, receipt_handle: str, invisible_ms: int
    ) -> str:
        try:
            return await self.pop.change_invisible(
                group=group, topic=topic, receipt_handle=receipt_handle, invisible_ms=invisible_ms
            )
        except BrokerError as exc:
            raise pop_refusal(exc) from None

    async def _forward_to_dlq(
        self, *, group: str, topic: str, receipt_handle: str, message_id: str = ""
    ) -> None:
        try:
            await self.pop.forward_to_dlq(group=group, topic=topic, receipt_handle=receipt_handle)
        except BrokerError as exc:
            raise pop_refusal(exc) from None

    # -- clients --------------------------------------------------------------------------

    def _register(self, session: Session) -> None:
        """Producer group = each topic the client publishes to, as the proxy names them
        (transaction checks find producers there)."""
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
            data = consumer_data(session)
            if data is not None:
                self.clients.register_consumer(channel, data)
        else:
            for topic in session.publishing_topics:
                self.clients.register_producer(channel, topic)

    def _unregister(self, session: Session) -> None:
        self.clients.connection_closed(session.channel)
