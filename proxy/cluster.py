"""The proxy's answers to the 5.x front's hooks ("cluster" mode): every one is a remoting
request to the broker that holds the messages, found through the name servers. The proxy
keeps no messages and no offsets; what it remembers is soft and rebuilt from the brokers:
routes, topic and group configs for a few seconds, the transactions its clients opened (by
id, as Apache's proxy keeps them in memory), and which gRPC clients belong to which group
(announced to the brokers in the proxy's own heartbeats, so that a broker's transaction
check reaches a producer through the proxy).

Receipt handles are the brokers' own, which name their broker, so an acknowledgement works
on any proxy, whichever one handed the message out.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from aiorocketmq.broker.auth import AuthEngine
from aiorocketmq.broker.grpc import messaging_pb2 as pb
from aiorocketmq.broker.grpc.convert import SHARDING_KEY, Code, status, status_of_response_code
from aiorocketmq.broker.grpc.front import (
    EVERY_TYPE,
    Front,
    GroupPolicy,
    Outgoing,
    Received,
    RpcError,
    accepted_types,
)
from aiorocketmq.broker.grpc.lifecycle import consumer_data
from aiorocketmq.broker.grpc.publish import check_message_type, consistent_queue, recall_refusal
from aiorocketmq.broker.grpc.routes import RoutedBroker
from aiorocketmq.broker.grpc.sessions import Session
from aiorocketmq.client.client_instance import ClientInstance
from aiorocketmq.client.errors import MQError, RemotingError, RequestTimeoutError
from aiorocketmq.client.offset_store import OffsetStore, RemoteOffsetStore
from aiorocketmq.protocol.body import (
    ClusterInfo,
    ConsumerData,
    MessageQueue,
    SubscriptionGroupConfig,
    TopicConfig,
    TopicRouteData,
)
from aiorocketmq.protocol.codes import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    MessageSysFlag,
    Perm,
    RequestCode,
    ResponseCode,
)
from aiorocketmq.protocol.errors import BrokerError, ProtocolError
from aiorocketmq.protocol.headers import (
    CheckTransactionStateRequestHeader,
    ConsumerSendMsgBackRequestHeader,
    EndTransactionRequestHeader,
    SendMessageRequestHeaderV2,
    SendMessageResponseHeader,
)
from aiorocketmq.protocol.message import (
    MessageExt,
    PropertyKey,
    decode_offset_msg_id,
    decode_records,
    encode_properties,
)
from aiorocketmq.protocol.names import AUTO_CREATE_TOPIC
from aiorocketmq.protocol.pop import (
    INIT_MODE_MAX,
    POLLING_FULL,
    POLLING_TIMEOUT,
    POP_CK,
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
    PopRequestCode,
    ReceiptHandle,
    handles_for,
)
from aiorocketmq.protocol.recall import RecallHandle
from aiorocketmq.protocol.topic_attributes import MESSAGE_TYPE

from .config import ProxyConfig

log = logging.getLogger(__name__)

MASTER_ID = 0
#: How long routes, topic configs and group configs are kept (Apache's proxy refreshes its
#: caches every 20 s; a route is kept shorter so that a master's loss is seen quickly).
ROUTE_TTL = 3.0
CONFIG_TTL = 20.0
#: A broker that failed a send is passed over by the next sends for this long.
FAULT_SECONDS = 10.0
#: Transactions remembered for EndTransaction (Apache's proxy: a transaction's check time).
TRANSACTION_TTL = 3600.0
#: At most this many transactions remembered (the oldest forgotten first).
MAX_TRANSACTIONS = 100_000
_EMPTY = frozenset({POLLING_TIMEOUT, POLLING_FULL, int(ResponseCode.PULL_NOT_FOUND)})
_WRITE = int(Perm.WRITE)
_READ = int(Perm.READ)
#: What a stale or foreign receipt handle gets back from a broker (ours and Apache's).
_HANDLE_REFUSALS = frozenset({int(ResponseCode.MESSAGE_ILLEGAL), int(ResponseCode.NO_MESSAGE)})


@dataclass(slots=True)
class PoppedRemote:
    """One message a broker handed out to a pop through the proxy (:class:`Received`)."""

    message: MessageExt
    topic: str
    receipt_handle: str
    delivery_attempt: int
    pop_time: int
    invisible_time: int


@dataclass(slots=True)
class OpenTransaction:
    """What END_TRANSACTION needs of a half message, by (topic, transaction id)."""

    broker_addr: str
    commit_log_offset: int
    queue_offset: int
    msg_id: str
    from_check: bool
    expires: float


def refusal(exc: MQError, *, handle: bool = False) -> RpcError:
    """A broker's refusal as a 5.x one (``handle``: a request naming a receipt handle, whose
    refusal means the handle is stale)."""
    code = getattr(exc, "code", None)
    remark = getattr(exc, "remark", None) or str(exc)
    if code is None:
        return RpcError(
            Code.PROXY_TIMEOUT if isinstance(exc, TimeoutError) else Code.INTERNAL_SERVER_ERROR, remark
        )
    if handle and code in _HANDLE_REFUSALS:
        return RpcError(Code.INVALID_RECEIPT_HANDLE, remark)
    return RpcError(status_of_response_code(code), remark)


class ClusterFront(Front):
    """The hooks over remoting (module doc). ``instance`` is a started client instance on the
    cluster's name servers; the proxy's groups ride on its heartbeats. ``auth``: ACL 2.0's
    checks of client requests (:mod:`.auth`)."""

    def __init__(self, config: ProxyConfig, instance: ClientInstance, auth: AuthEngine | None = None) -> None:
        super().__init__(access=None, auth=auth)
        self.config = config
        self.instance = instance
        self.auto_renew_invisible_ms = config.default_invisible_time_mills
        #: The proxy's own address, for clients that name none in their requests.
        self.endpoints = pb.Endpoints()
        self._request_endpoints: contextvars.ContextVar[pb.Endpoints | None] = contextvars.ContextVar(
            "endpoints", default=None
        )
        self._routes: dict[str, tuple[float, TopicRouteData]] = {}
        self._route_refreshes: dict[str, asyncio.Future[TopicRouteData]] = {}
        self._heartbeat_due = False
        self._topic_configs: dict[str, tuple[float, TopicConfig | None]] = {}
        self._groups: dict[str, tuple[float, GroupPolicy]] = {}
        self._faulty: dict[str, float] = {}
        self._next_queue = itertools.count()
        self.transactions: dict[tuple[str, str], OpenTransaction] = {}
        self.producers: dict[str, ProducerGroup] = {}
        self.consumers: dict[str, ConsumerGroup] = {}

    @property
    def max_message_size(self) -> int:
        return self.config.max_message_size

    def bind(self, endpoints: pb.Endpoints) -> None:
        """The proxy's own address, for requests that do not say how they reached it."""
        self.endpoints = endpoints

    @contextlib.contextmanager
    def _reached_by(self, endpoints: pb.Endpoints) -> Iterator[None]:
        """Answer the request in hand with the endpoints it names (how the client reached the
        proxy: its address, or a load balancer's) rather than the proxy's own."""
        self._request_endpoints.set(endpoints if endpoints.addresses else None)
        try:
            yield
        finally:
            self._request_endpoints.set(None)

    # -- routes ---------------------------------------------------------------------------

    async def route(self, topic: str) -> TopicRouteData:
        """``topic``'s route from the name servers, kept :data:`ROUTE_TTL` seconds. One
        refresh at a time per topic; while it runs (and when no name server answers), the
        route known so far serves."""
        now = time.monotonic()
        cached = self._routes.get(topic)
        if cached is not None and cached[0] > now:
            return cached[1]
        refreshing = self._route_refreshes.get(topic)
        if refreshing is None:
            refreshing = self._route_refreshes[topic] = asyncio.ensure_future(self._fetch_route(topic))
            refreshing.add_done_callback(lambda _: self._route_refreshes.pop(topic, None))
        if cached is not None:
            return cached[1]
        try:
            return await asyncio.shield(refreshing)
        except MQError as exc:
            if getattr(exc, "code", None) == ResponseCode.TOPIC_NOT_EXIST:
                raise RpcError(Code.TOPIC_NOT_FOUND, f"topic {topic} does not exist") from None
            raise refusal(exc) from None

    async def _fetch_route(self, topic: str) -> TopicRouteData:
        route = await self.instance.update_route(topic)
        self._routes[topic] = (time.monotonic() + ROUTE_TTL, route)
        return route

    def _master(self, route: TopicRouteData, broker_name: str) -> str:
        for broker in route.broker_datas:
            if broker.broker_name == broker_name:
                addr = broker.broker_addrs.get(MASTER_ID)
                if addr:
                    return addr
        raise RpcError(Code.MASTER_PERSISTENCE_TIMEOUT, f"broker {broker_name} has no master now")

    async def _broker_addr(self, topic: str, broker_name: str) -> str:
        return self._master(await self.route(topic), broker_name)

    async def _cluster(self, name: str, *, create: bool) -> tuple[list[RoutedBroker], list[pb.MessageType]]:
        route = await self.route(name)
        reached = self._request_endpoints.get() or self.endpoints
        masters = {b.broker_name for b in route.broker_datas if b.broker_addrs.get(MASTER_ID)}
        brokers = [
            RoutedBroker(name=q.broker_name, id=MASTER_ID, endpoints=reached, queues=q)
            for q in sorted(route.queue_datas, key=lambda q: q.broker_name)
            if q.broker_name in masters
        ]
        config = await self._topic_config(name, route)
        return brokers, (accepted_types(config) if config is not None else EVERY_TYPE)

    async def _topic_config(self, topic: str, route: TopicRouteData) -> TopicConfig | None:
        """The topic's config from one of its masters (its ``message.type``), or None when no
        broker tells (Apache 4.x brokers do not know GET_TOPIC_CONFIG)."""
        now = time.monotonic()
        cached = self._topic_configs.get(topic)
        if cached is not None and cached[0] > now:
            return cached[1]
        config: TopicConfig | None = None
        for broker in route.broker_datas:
            addr = broker.broker_addrs.get(MASTER_ID)
            if not addr:
                continue
            try:
                response = await self.instance.invoke(addr, RequestCode.GET_TOPIC_CONFIG, {"topic": topic})
            except MQError:
                continue
            if response.code == ResponseCode.SUCCESS and response.body:
                config = TopicConfig.decode(response.body)
            break
        self._topic_configs[topic] = (now + CONFIG_TTL, config)
        return config

    # -- publishing -----------------------------------------------------------------------

    def _write_queues(self, route: TopicRouteData) -> list[MessageQueue]:
        """The masters' writable queues, interleaved across brokers (a0, b0, a1, b1, ...), so
        that consecutive sends, and a retry after a failure, go to different brokers."""
        masters = {b.broker_name for b in route.broker_datas if b.broker_addrs.get(MASTER_ID)}
        per_broker = [
            [MessageQueue(topic="", broker_name=q.broker_name, queue_id=i) for i in range(q.write_queue_nums)]
            for q in sorted(route.queue_datas, key=lambda q: q.broker_name)
            if q.perm & _WRITE and q.broker_name in masters
        ]
        return [q for row in itertools.zip_longest(*per_broker) for q in row if q is not None]

    def _pick(self, queues: list[MessageQueue], group: str | None, avoid: set[str]) -> MessageQueue:
        if group is not None:
            # A message group stays on one queue while the route does not change.
            return queues[consistent_queue(group, len(queues))]
        now = time.monotonic()
        healthy = [
            q for q in queues if q.broker_name not in avoid and self._faulty.get(q.broker_name, 0) <= now
        ]
        pool = healthy or [q for q in queues if q.broker_name not in avoid] or queues
        return pool[next(self._next_queue) % len(pool)]

    async def _store(self, message: Outgoing) -> pb.SendResultEntry:
        topic = message.topic
        route = await self.route(topic)
        config = await self._topic_config(topic, route)
        if config is not None:
            check_message_type(config.attributes.get(MESSAGE_TYPE), message.properties)
        queues = self._write_queues(route)
        if not queues:
            raise RpcError(Code.FORBIDDEN, f"topic {topic} has no writable queue")
        group = message.properties.get(SHARDING_KEY)
        tried: set[str] = set()
        while True:
            queue = self._pick(queues, group, tried)
            addr = self._master(route, queue.broker_name)
            try:
                return await self._send_to(addr, queue, message)
            except RequestTimeoutError as exc:
                raise refusal(exc) from None  # it may be stored: the client decides
            except RemotingError as exc:
                # Unreachable or gone: pass it over for a while and try the next broker (a
                # message group stays where it is; its client retries).
                self._faulty[queue.broker_name] = time.monotonic() + FAULT_SECONDS
                tried.add(queue.broker_name)
                if group is not None or len(tried) >= len({q.broker_name for q in queues}):
                    raise refusal(exc) from None
            except MQError as exc:
                raise refusal(exc) from None

    async def _send_to(self, addr: str, queue: MessageQueue, message: Outgoing) -> pb.SendResultEntry:
        props = message.properties
        header = SendMessageRequestHeaderV2(
            producer_group=message.topic,  # a 5.x producer's group is its topic, as Apache's proxy names it
            topic=message.topic,
            default_topic=AUTO_CREATE_TOPIC,
            default_topic_queue_nums=4,
            queue_id=queue.queue_id,
            sys_flag=message.sys_flag,
            born_timestamp=message.born_timestamp,
            flag=0,
            properties=encode_properties(props),
            reconsume_times=message.reconsume_times,
        )
        response = await self.instance.call(addr, RequestCode.SEND_MESSAGE_V2, header, message.body)
        answer = SendMessageResponseHeader.from_fields(response.ext_fields)
        uniq = props[PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX]
        if message.transactional:
            _, commit_log_offset = decode_offset_msg_id(answer.msg_id)
            self._remember(
                message.topic,
                answer.transaction_id or uniq,
                OpenTransaction(addr, commit_log_offset, answer.queue_offset, uniq, False, 0.0),
            )
        return pb.SendResultEntry(
            status=status(Code.OK, "OK"),
            message_id=uniq,
            transaction_id=(answer.transaction_id or uniq) if message.transactional else "",
            offset=answer.queue_offset,
            recall_handle=str(response.ext_fields.get("recallHandle") or ""),
        )

    def _remember(self, topic: str, transaction_id: str, open_: OpenTransaction) -> None:
        open_.expires = time.monotonic() + TRANSACTION_TTL
        key = (topic, transaction_id)
        self.transactions.pop(key, None)  # re-inserted last: the dict stays in expiry order
        self.transactions[key] = open_
        while len(self.transactions) > MAX_TRANSACTIONS:
            del self.transactions[next(iter(self.transactions))]

    def sweep(self) -> None:
        """Forget transactions past :data:`TRANSACTION_TTL` (their broker gives up on them
        long before; a check that comes later is remembered anew)."""
        now = time.monotonic()
        while self.transactions:
            key = next(iter(self.transactions))
            if self.transactions[key].expires > now:
                break
            del self.transactions[key]

    async def _end(self, topic: str, transaction_id: str, *, commit: bool) -> None:
        open_ = self.transactions.get((topic, transaction_id))
        if open_ is None:
            raise RpcError(
                Code.INVALID_TRANSACTION_ID,
                f"no open transaction {transaction_id} on topic {topic} went through this proxy",
            )
        header = EndTransactionRequestHeader(
            producer_group=topic,
            tran_state_table_offset=open_.queue_offset,
            commit_log_offset=open_.commit_log_offset,
            commit_or_rollback=TRANSACTION_COMMIT_TYPE if commit else TRANSACTION_ROLLBACK_TYPE,
            from_transaction_check=open_.from_check,
            msg_id=open_.msg_id,
            transaction_id=transaction_id,
        )
        try:
            # Apache's brokers answer END_TRANSACTION only as a one-way request.
            await self.instance.oneway(open_.broker_addr, RequestCode.END_TRANSACTION, header)
        except MQError as exc:
            raise refusal(exc) from None  # remembered still: the client may try again
        self.transactions.pop((topic, transaction_id), None)

    async def _recall(self, topic: str, recall_handle: str, peer: tuple[str, int]) -> str:
        """RECALL_MESSAGE to the master of the broker the handle names."""
        try:
            broker_name = RecallHandle.decode(recall_handle).broker_name
        except ProtocolError as exc:
            raise RpcError(Code.BAD_REQUEST, f"recall failed, {exc}") from None
        addr = await self._broker_addr(topic, broker_name)
        fields = {"topic": topic, "recallHandle": recall_handle, "producerGroup": topic}
        try:
            response = await self.instance.call(addr, RequestCode.RECALL_MESSAGE, fields)
        except BrokerError as exc:
            raise recall_refusal(exc) from None
        except MQError as exc:
            raise refusal(exc) from None
        return str(response.ext_fields.get("msgId") or "")

    def transaction_checked(
        self, broker_addr: str, topic: str, header: CheckTransactionStateRequestHeader, message: MessageExt
    ) -> None:
        """A broker asks about a half message: remember it for the answer's EndTransaction."""
        uniq = message.properties.get(PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or header.msg_id or ""
        transaction_id = header.transaction_id or uniq
        self._remember(
            topic,
            transaction_id,
            OpenTransaction(
                broker_addr, header.commit_log_offset, header.tran_state_table_offset, uniq, True, 0.0
            ),
        )

    # -- consumption ----------------------------------------------------------------------

    async def _group(self, name: str) -> GroupPolicy:
        now = time.monotonic()
        cached = self._groups.get(name)
        if cached is not None and cached[0] > now:
            return cached[1]
        for addr in await self._any_masters():
            try:
                response = await self.instance.invoke(
                    addr, RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": name}
                )
            except MQError:
                continue
            policy = GroupPolicy()
            if response.code == ResponseCode.SUCCESS and response.body:
                config = SubscriptionGroupConfig.decode(response.body)
                policy = GroupPolicy(
                    fifo=config.consume_message_orderly, retry_max_times=config.retry_max_times
                )
            self._groups[name] = (now + CONFIG_TTL, policy)
            return policy
        # No broker answered: the defaults for this request, asked again on the next.
        return cached[1] if cached is not None else GroupPolicy()

    async def _any_masters(self) -> list[str]:
        """The masters the proxy knows from the routes it fetched, else the name servers'."""
        known = {addr for ids in self.instance.brokers.values() for i, addr in ids.items() if i == MASTER_ID}
        if not known:
            try:
                response = await self.instance.call_namesrv(RequestCode.GET_BROKER_CLUSTER_INFO)
            except MQError:
                return []
            info = ClusterInfo.decode(response.body)
            known = {
                addr
                for broker in info.broker_addr_table.values()
                for broker_id, addr in broker.broker_addrs.items()
                if int(broker_id) == MASTER_ID
            }
        return sorted(known)

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
        route = await self.route(topic)
        if not broker:
            readable = [q.broker_name for q in route.queue_datas if q.perm & _READ]
            if not readable:
                raise RpcError(Code.FORBIDDEN, f"topic {topic} has no readable queue")
            broker = readable[next(self._next_queue) % len(readable)]
        addr = self._master(route, broker)
        header = PopMessageRequestHeader(
            consumer_group=group,
            topic=topic,
            queue_id=-1 if queue_id is None else queue_id,
            max_msg_nums=max_messages,
            invisible_time=invisible_ms,
            poll_time=poll_ms,
            born_time=time.time_ns() // 1_000_000,
            init_mode=INIT_MODE_MAX,
            exp_type=expression_type,
            exp=expression,
            order=fifo,
            attempt_id=attempt_id or None,
        )
        timeout = poll_ms / 1000 + self.instance.options.request_timeout
        try:
            response = await self.instance.invoke(addr, PopRequestCode.POP_MESSAGE, header, timeout=timeout)
        except MQError as exc:
            raise refusal(exc) from None
        if response.code in _EMPTY:
            return []
        if response.code != ResponseCode.SUCCESS:
            raise RpcError(status_of_response_code(response.code), response.remark or "pop refused")
        try:
            answer = PopMessageResponseHeader.from_fields(response.ext_fields)
            messages = decode_records(response.body, decompress=False)
            handles = handles_for(
                answer,
                broker,
                [(m.topic, m.queue_id, m.queue_offset) for m in messages],
                [m.properties.get(POP_CK) for m in messages],
            )
        except (ProtocolError, ValueError) as exc:
            # The messages stay invisible for the invisible time, then come back.
            raise RpcError(
                Code.INTERNAL_SERVER_ERROR, f"broker {broker} answered a pop unreadably: {exc}"
            ) from None
        popped = []
        for msg, (handle, consumed_before) in zip(messages, handles, strict=True):
            attempt = (consumed_before if fifo and consumed_before > 0 else msg.reconsume_times) + 1
            popped.append(PoppedRemote(msg, topic, handle, attempt, answer.pop_time, answer.invisible_time))
        return popped

    async def _handle_target(self, topic: str, receipt_handle: str) -> tuple[ReceiptHandle, str]:
        """The handle, parsed, and its broker's master. Requests on a handle name the topic the
        message is stored in (a redelivery's retry topic, from the handle), as Apache's brokers
        look the message up there."""
        try:
            handle = ReceiptHandle.decode(receipt_handle)
        except ValueError as exc:
            raise RpcError(Code.INVALID_RECEIPT_HANDLE, f"receipt handle does not parse: {exc}") from None
        return handle, await self._broker_addr(topic, handle.broker_name)

    async def _ack(self, *, group: str, topic: str, receipt_handle: str) -> None:
        handle, addr = await self._handle_target(topic, receipt_handle)
        header = AckMessageRequestHeader(
            consumer_group=group,
            topic=handle.real_topic(topic, group),
            queue_id=handle.queue_id,
            extra_info=receipt_handle,
            offset=handle.queue_offset,
        )
        try:
            await self.instance.call(addr, PopRequestCode.ACK_MESSAGE, header)
        except MQError as exc:
            raise refusal(exc, handle=True) from None

    async def _change_invisible(
        self, *, group: str, topic: str, receipt_handle: str, invisible_ms: int
    ) -> str:
        handle, addr = await self._handle_target(topic, receipt_handle)
        header = ChangeInvisibleTimeRequestHeader(
            consumer_group=group,
            topic=handle.real_topic(topic, group),
            queue_id=handle.queue_id,
            extra_info=receipt_handle,
            offset=handle.queue_offset,
            invisible_time=invisible_ms,
        )
        try:
            response = await self.instance.call(addr, PopRequestCode.CHANGE_MESSAGE_INVISIBLETIME, header)
        except MQError as exc:
            raise refusal(exc, handle=True) from None
        try:
            answer = ChangeInvisibleTimeResponseHeader.from_fields(response.ext_fields)
        except ProtocolError as exc:
            raise RpcError(
                Code.INTERNAL_SERVER_ERROR, f"broker {handle.broker_name} answered unreadably: {exc}"
            ) from None
        return handle.changed(answer).encode()

    async def _forward_to_dlq(
        self, *, group: str, topic: str, receipt_handle: str, message_id: str = ""
    ) -> None:
        """As Apache's proxy: send the message back with delay level -1 (its dead-letter
        queue), then acknowledge the delivery."""
        handle, addr = await self._handle_target(topic, receipt_handle)
        if handle.commit_log_offset < 0:
            raise RpcError(Code.INVALID_RECEIPT_HANDLE, "the receipt handle names no commit-log offset")
        header = ConsumerSendMsgBackRequestHeader(
            offset=handle.commit_log_offset,
            group=group,
            delay_level=-1,
            origin_msg_id=message_id or None,
            origin_topic=handle.real_topic(topic, group),
            max_reconsume_times=(await self._group(group)).retry_max_times,
        )
        try:
            await self.instance.call(addr, RequestCode.CONSUMER_SEND_MSG_BACK, header)
        except MQError as exc:
            raise refusal(exc) from None
        # In the dead-letter queue now: a failed ack only lets it come back once more, which
        # the client's retry of the whole call would turn into a second dead letter.
        with contextlib.suppress(RpcError):
            await self._ack(group=group, topic=topic, receipt_handle=receipt_handle)

    # -- clients --------------------------------------------------------------------------

    def _register(self, session: Session) -> None:
        settings = session.settings
        if settings is None:
            return
        if settings.HasField("subscription"):
            data = consumer_data(session)
            if data is None:
                return
            member = self.consumers.get(data.group_name)
            if member is None:
                member = self.consumers[data.group_name] = ConsumerGroup(data.group_name, self.instance)
                self.instance.register_consumer(member)
            known = member.sessions.get(session.client_id)
            # A heartbeat repeats the settings: the subscription kept (and its version) unless
            # it changed, so that brokers see no change on every heartbeat.
            if known is None or _subscriptions_of(known) != _subscriptions_of(data):
                member.sessions[session.client_id] = data
                self._heartbeat_soon()
            return
        for topic in session.publishing_topics:
            producer = self.producers.get(topic)
            if producer is None:
                producer = self.producers[topic] = ProducerGroup(topic, self)
                self.instance.register_producer(producer)
                self.instance.spawn(self._announce(topic))
            producer.sessions[session.client_id] = session

    def _heartbeat_soon(self) -> None:
        """One heartbeat to the brokers for every change made in this turn of the loop."""
        if not self._heartbeat_due:
            self._heartbeat_due = True
            asyncio.get_running_loop().call_soon(self._send_heartbeat)

    def _send_heartbeat(self) -> None:
        self._heartbeat_due = False
        self.instance.spawn(self.instance.send_heartbeat(wait=True))

    async def _announce(self, topic: str) -> None:
        """Learn the topic's brokers, then tell them about the new producer group."""
        try:
            await self.route(topic)
        except RpcError:
            return
        self._heartbeat_soon()

    def _unregister(self, session: Session) -> None:
        # Out of the client instance at once (so a client arriving next registers anew);
        # only telling the brokers waits.
        for group, consumer in list(self.consumers.items()):
            if consumer.sessions.pop(session.client_id, None) is not None and not consumer.sessions:
                del self.consumers[group]
                self.instance.consumers.pop(group, None)
                self.instance.spawn(self.instance.unregister_remotely(consumer_group=group))
        for topic, producer in list(self.producers.items()):
            if producer.sessions.pop(session.client_id, None) is not None and not producer.sessions:
                del self.producers[topic]
                self.instance.producers.pop(topic, None)
                self.instance.spawn(self.instance.unregister_remotely(producer_group=topic))


def _subscriptions_of(data: ConsumerData) -> list[tuple[str, str, str]]:
    return sorted((s.topic, s.sub_string, s.expression_type) for s in data.subscription_data_set)


class ProducerGroup:
    """The proxy's member for the 5.x producers of one topic (their producer group): a
    broker's transaction check goes to one of them with a live telemetry stream."""

    def __init__(self, topic: str, front: ClusterFront) -> None:
        self.group = topic
        self.front = front
        self.sessions: dict[str, Session] = {}
        self._turn = itertools.count()

    def _published_topics(self) -> Iterable[str]:
        return (self.group,)

    def _route_changed(self, topic: str, route: TopicRouteData) -> None:
        pass

    def _check_transaction(
        self, broker_addr: str, header: CheckTransactionStateRequestHeader, message: MessageExt
    ) -> None:
        live = [s for s in self.sessions.values() if s.stream is not None and not s.stream.closed]
        if not live:
            log.info(
                "transaction check for %s: no producer of %s is connected", header.transaction_id, self.group
            )
            return
        self.front.transaction_checked(broker_addr, self.group, header, message)
        # The client instance hands the body decompressed: say so to the 5.x client.
        message.sys_flag &= ~MessageSysFlag.COMPRESSED
        live[next(self._turn) % len(live)].recover(header, message)


class ConsumerGroup:
    """The proxy's member for the 5.x consumers of one group: their subscriptions, announced
    to the brokers. POP consumers neither rebalance nor keep offsets."""

    def __init__(self, group: str, instance: ClientInstance) -> None:
        self.group = group
        self.sessions: dict[str, ConsumerData] = {}
        self._offsets = RemoteOffsetStore(instance, group)

    def _consumer_data(self) -> ConsumerData:
        merged: dict[str, object] = {}
        first: ConsumerData | None = None
        for data in self.sessions.values():
            first = first or data
            for sub in data.subscription_data_set:
                merged.setdefault(sub.topic, sub)
        if first is None:
            return ConsumerData(group_name=self.group)
        return first.model_copy(update={"subscription_data_set": list(merged.values())})

    def _subscribed_topics(self) -> Iterable[str]:
        return {sub.topic for data in self.sessions.values() for sub in data.subscription_data_set}

    def _route_changed(self, topic: str, route: TopicRouteData) -> None:
        pass

    async def _do_rebalance(self) -> bool:
        return False

    async def _persist_offsets(self) -> None:
        pass

    def _reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        pass

    @property
    def _offset_store(self) -> OffsetStore:
        # Always empty: POP consumers keep no offsets (a running-info query lists none).
        return self._offsets
