"""What the dashboard's pages read from the cluster and do to it, each through the asyncio
admin client (:class:`~aiorocketmq.client.Admin`), a producer for test messages and resends,
and offset pulls for browsing: one object per dashboard process, shared by every request.

Nothing here renders HTML: every method returns plain data (dataclasses, SDK types) or raises
an :class:`~aiorocketmq.protocol.errors.MQError` that the web layer turns into a message on the
page. The one piece of state kept between requests is which brokers were seen, so a broker
that died and dropped out of the name server's table is still listed, as down.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace

from aiorocketmq.client import (
    Admin,
    ClientError,
    ClientOptions,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PullStatus,
    SendResult,
)
from aiorocketmq.client.pull import pull
from aiorocketmq.protocol.body import (
    ConsumerConnection,
    ConsumeStats,
    ProducerConnection,
    SubscriptionGroupWrapper,
    TopicOffset,
    TopicRouteData,
)
from aiorocketmq.protocol.codes import MASTER_ID, RequestCode
from aiorocketmq.protocol.errors import MQError, QueryNotFoundError
from aiorocketmq.protocol.message import PropertyKey, decode_offset_msg_id
from aiorocketmq.protocol.names import (
    AUTO_CREATE_TOPIC,
    BENCHMARK_TOPIC,
    DLQ_PREFIX,
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_PREFIX,
    TOOLS_CONSUMER_GROUP,
    dlq_topic,
    retry_topic,
)
from aiorocketmq.protocol.names import SYSTEM_GROUPS as _SYSTEM_GROUPS

from .trace import TRACE_TOPIC, TraceRecord, decode_trace

#: Groups brokers keep for themselves (and the one this dashboard pulls as): not listed.
SYSTEM_GROUPS = frozenset(_SYSTEM_GROUPS)
#: Topics the brokers keep for themselves.
SYSTEM_TOPICS = NOT_ALLOWED_SEND_TOPICS | {AUTO_CREATE_TOPIC, BENCHMARK_TOPIC, TRACE_TOPIC}
#: The group offset pulls are made as: brokers know it and it never commits.
TOOLS_GROUP = TOOLS_CONSUMER_GROUP
#: The producer group of test messages and resends.
PRODUCER_GROUP = "MQDASHBOARD_PRODUCER"
#: How many messages one browse or export returns at most.
MAX_MESSAGES = 256


def topic_kind(topic: str, system_names: frozenset[str] = frozenset()) -> str:
    """``normal``, ``retry``, ``dlq`` or ``system``; ``system_names`` are the cluster and
    broker names, which brokers also register as topics."""
    if topic.startswith(RETRY_PREFIX):
        return "retry"
    if topic.startswith(DLQ_PREFIX):
        return "dlq"
    if (
        topic in SYSTEM_TOPICS
        or topic in system_names
        or topic.startswith(("rmq_sys_", "RMQ_SYS_"))
        or topic.endswith("_REPLY_TOPIC")
    ):
        return "system"
    return "normal"


def first_number(value: str | None) -> float | None:
    """RocketMQ reports TPS as "<last 10 s> <last 1 min> <last 10 min>": the first."""
    if not value:
        return None
    try:
        return float(value.split()[0])
    except ValueError:
        return None


@dataclass
class BrokerRow:
    """One broker address as the cluster page shows it."""

    cluster: str
    name: str
    broker_id: int
    addr: str
    registered: bool = True
    up: bool = False
    error: str | None = None
    version: str = ""
    put_tps: float | None = None
    get_tps: float | None = None
    disk_ratio: float | None = None
    commit_log_max: int | None = None
    #: Bytes of commit log a slave is behind its master (None for a master).
    slave_lag: int | None = None
    runtime: str = ""
    stats: dict[str, str] = field(default_factory=dict)

    @property
    def role(self) -> str:
        return "MASTER" if self.broker_id == MASTER_ID else f"SLAVE {self.broker_id}"


@dataclass
class TopicRow:
    topic: str
    kind: str
    read_queues: int = 0
    write_queues: int = 0
    perm: int = 0
    brokers: list[str] = field(default_factory=list)
    error: str | None = None


@dataclass
class GroupRow:
    group: str
    lag: int | None = None
    consume_tps: float = 0.0
    members: int = 0
    consume_type: str = ""
    message_model: str = ""
    error: str | None = None


@dataclass
class GroupDetail:
    group: str
    stats: ConsumeStats | None
    connection: ConsumerConnection | None
    stats_error: str | None = None
    connection_error: str | None = None

    @property
    def topics(self) -> list[str]:
        topics = {q.topic for q in self.stats.offset_table} if self.stats else set()
        if self.connection:
            topics.update(self.connection.subscription_table)
        return sorted(topics)


@dataclass
class TopicDetail:
    topic: str
    route: TopicRouteData
    offsets: dict[MessageQueue, TopicOffset]
    groups: list[str]


def describe(exc: BaseException) -> str:
    """An error as one line for the page."""
    text = " ".join(str(exc).split())
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


class Operations:
    """The cluster as the dashboard sees it. Start it once; every method may be called
    concurrently from request handlers and the chart sampler."""

    def __init__(
        self,
        namesrv: str,
        *,
        options: ClientOptions | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
    ) -> None:
        self.namesrv = namesrv
        options = options or ClientOptions()
        if access_key or secret_key:
            # Every request of the admin client and the producer is signed with them.
            options = replace(options, access_key=access_key, secret_key=secret_key)
        self.options = options
        #: ACL credentials for the cluster (the access key is shown on the cluster page).
        self.access_key = access_key
        self.secret_key = secret_key
        self.admin = Admin(namesrv, instance_name="mqdashboard", options=self.options)
        self._producer: Producer | None = None
        self._producer_lock = asyncio.Lock()
        #: Every broker address ever seen: (cluster, name, id), so a vanished one shows as down.
        self.seen_brokers: dict[str, tuple[str, str, int]] = {}

    async def start(self) -> None:
        await self.admin.start()

    async def shutdown(self) -> None:
        if self._producer is not None:
            await self._producer.shutdown()
        await self.admin.shutdown()

    async def producer(self) -> Producer:
        async with self._producer_lock:
            if self._producer is None:
                producer = Producer(
                    PRODUCER_GROUP, self.namesrv, instance_name="mqdashboard", options=self.options
                )
                await producer.start()
                self._producer = producer
            return self._producer

    # -- cluster ----------------------------------------------------------------------------

    async def brokers(self) -> list[BrokerRow]:
        """Every broker the name servers know, plus those seen before and gone since, with
        their runtime figures (a broker that does not answer is listed as down)."""
        info = await self.admin.cluster_info()
        cluster_of = {name: c for c, names in info.cluster_addr_table.items() for name in names}
        rows: dict[str, BrokerRow] = {}
        for name, data in info.broker_addr_table.items():
            for broker_id, addr in data.broker_addrs.items():
                cluster = cluster_of.get(name, data.cluster)
                rows[addr] = BrokerRow(cluster, name, broker_id, addr)
                self.seen_brokers[addr] = (cluster, name, broker_id)
        for addr, (cluster, name, broker_id) in self.seen_brokers.items():
            if addr not in rows:
                rows[addr] = BrokerRow(cluster, name, broker_id, addr, registered=False)

        async def fill(row: BrokerRow) -> None:
            try:
                stats = await self.admin.broker_runtime_info(row.addr)
            except (MQError, OSError) as exc:
                row.error = describe(exc)
                return
            row.up = True
            row.stats = stats
            row.version = stats.get("brokerVersionDesc", "")
            row.put_tps = first_number(stats.get("putTps"))
            row.get_tps = first_number(stats.get("getTransferedTps"))
            row.runtime = stats.get("runtime", "")
            ratio = stats.get("commitLogDiskRatio")
            row.disk_ratio = float(ratio) if ratio else None
            max_offset = stats.get("commitLogMaxOffset")
            row.commit_log_max = int(max_offset) if max_offset and max_offset.isdigit() else None

        ordered = sorted(rows.values(), key=lambda r: (r.cluster, r.name, r.broker_id))
        await asyncio.gather(*(fill(row) for row in ordered))
        masters = {r.name: r for r in ordered if r.broker_id == MASTER_ID}
        for row in ordered:
            master = masters.get(row.name)
            if (
                row.broker_id != MASTER_ID
                and master is not None
                and master.commit_log_max is not None
                and row.commit_log_max is not None
            ):
                row.slave_lag = max(0, master.commit_log_max - row.commit_log_max)
        return ordered

    # -- topics -----------------------------------------------------------------------------

    async def topics(self, text: str = "", *, with_routes: bool = True) -> list[TopicRow]:
        names = [t for t in await self.admin.topic_list() if text.lower() in t.lower()]
        try:
            info = await self.admin.cluster_info()
            system = frozenset(info.cluster_addr_table) | frozenset(info.broker_addr_table)
        except MQError:
            system = frozenset()
        rows = [TopicRow(t, topic_kind(t, system)) for t in names]
        if not with_routes:
            return rows
        limit = asyncio.Semaphore(8)

        async def fill(row: TopicRow) -> None:
            async with limit:
                try:
                    route = await self.admin.topic_route(row.topic)
                except (MQError, OSError) as exc:
                    row.error = describe(exc)
                    return
            for queue in route.queue_datas:
                row.read_queues += queue.read_queue_nums
                row.write_queues += queue.write_queue_nums
                row.perm |= queue.perm
                row.brokers.append(queue.broker_name)
            row.brokers.sort()

        await asyncio.gather(*(fill(row) for row in rows))
        return rows

    async def topic_detail(self, topic: str) -> TopicDetail:
        route = await self.admin.topic_route(topic)
        offsets = await self.admin.topic_stats(topic)
        try:
            groups = await self.admin.consumer_groups_of(topic)
        except MQError:
            groups = []
        return TopicDetail(topic, route, offsets, groups)

    async def create_topic(self, topic: str, read_queues: int, write_queues: int, perm: int) -> None:
        await self.admin.create_topic(
            topic, read_queue_nums=read_queues, write_queue_nums=write_queues, perm=perm, wait=10.0
        )

    async def delete_topic(self, topic: str) -> None:
        await self.admin.delete_topic(topic)

    async def send(self, topic: str, body: bytes, tags: str | None, keys: list[str]) -> SendResult:
        producer = await self.producer()
        return await producer.send(Message(topic, body, tags=tags or None, keys=keys or None))

    # -- consumer groups --------------------------------------------------------------------

    async def group_names(self) -> list[str]:
        """Consumer groups: those with a retry topic (they have been online) and those the
        masters hold settings for, less the brokers' own."""
        names = {t[len(RETRY_PREFIX) :] for t in await self.admin.topic_list() if t.startswith(RETRY_PREFIX)}

        async def configured(addr: str) -> set[str]:
            try:
                response = await self.admin.instance.call(
                    addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {}
                )
            except (MQError, OSError):
                return set()
            return set(SubscriptionGroupWrapper.decode(response.body).subscription_group_table)

        try:
            masters = await self.admin.master_addrs()
        except MQError:
            masters = []
        for found in await asyncio.gather(*(configured(a) for a in masters)):
            names |= found
        return sorted(names - SYSTEM_GROUPS)

    async def group_lag(self, group: str) -> int | None:
        """The group's lag, or None when no broker has offsets or members of it."""
        try:
            return (await self.admin.consume_stats(group)).diff_total()
        except ClientError:
            return None

    async def groups(self, text: str = "") -> list[GroupRow]:
        rows = [GroupRow(g) for g in await self.group_names() if text.lower() in g.lower()]
        limit = asyncio.Semaphore(8)

        async def fill(row: GroupRow) -> None:
            async with limit:
                try:
                    stats = await self.admin.consume_stats(row.group)
                    row.lag = stats.diff_total()
                    row.consume_tps = stats.consume_tps
                except ClientError:
                    pass  # no offsets and no members anywhere yet
                except (MQError, OSError) as exc:
                    row.error = describe(exc)
                try:
                    conn = await self.admin.consumer_connections(row.group)
                except (MQError, OSError):
                    return
                row.members = len(conn.connection_set)
                row.consume_type = "PULL" if conn.consume_type == "CONSUME_ACTIVELY" else "PUSH"
                row.message_model = str(conn.message_model or "")

        await asyncio.gather(*(fill(row) for row in rows))
        return rows

    async def group_detail(self, group: str) -> GroupDetail:
        detail = GroupDetail(group, None, None)
        try:
            detail.stats = await self.admin.consume_stats(group)
        except (MQError, OSError) as exc:
            detail.stats_error = describe(exc)
        try:
            detail.connection = await self.admin.consumer_connections(group)
        except (MQError, OSError) as exc:
            detail.connection_error = describe(exc)
        return detail

    async def reset_offset(self, group: str, topic: str, timestamp: float) -> dict[MessageQueue, int]:
        """Move ``group``'s offsets on ``topic`` to ``timestamp`` (seconds; -1: the end)."""
        return await self.admin.reset_offset_by_time(group, topic, timestamp, force=True)

    async def skip_accumulated(self, group: str) -> dict[MessageQueue, int]:
        """Move ``group``'s offsets to the end of every topic it consumes."""
        stats = await self.admin.consume_stats(group)
        moved: dict[MessageQueue, int] = {}
        for topic in sorted({q.topic for q in stats.offset_table}):
            moved.update(await self.reset_offset(group, topic, -1))
        return moved

    async def delete_group(self, group: str, *, remove_offsets: bool) -> None:
        await self.admin.delete_subscription_group(group, remove_offsets=remove_offsets)
        for topic in (retry_topic(group), dlq_topic(group)):
            try:
                await self.admin.delete_topic(topic)
            except MQError:
                continue  # it may never have existed

    # -- producers --------------------------------------------------------------------------

    async def producer_connections(self, group: str, topic: str | None = None) -> ProducerConnection:
        """The group's connected producers, each once (a producer talks to every broker it
        sends to, and each of them lists it); with ``topic``, as the brokers of its route
        know them (as RocketMQ's tools ask)."""
        if not topic:
            merged = await self.admin.producer_connections(group)
        else:
            route = await self.admin.topic_route(topic)
            merged = ProducerConnection()
            for data in route.broker_datas:
                addr = data.broker_addrs.get(MASTER_ID)
                if addr is None:
                    continue
                response = await self.admin.instance.call(
                    addr, RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": group}
                )
                merged.connection_set.extend(ProducerConnection.decode(response.body).connection_set)
        unique = {c.client_id: c for c in merged.connection_set}
        return ProducerConnection(connection_set=sorted(unique.values(), key=lambda c: c.client_id))

    # -- messages ---------------------------------------------------------------------------

    async def messages_by_time(
        self, topic: str, begin: float, end: float, limit: int = MAX_MESSAGES
    ) -> list[MessageExt]:
        """Messages of ``topic`` stored between ``begin`` and ``end`` (seconds since the
        epoch), newest first, at most ``limit``."""
        found: list[MessageExt] = []
        for queue in await self.admin.queues(topic):
            low = await self.admin.search_offset(queue, begin)
            high = await self.admin.search_offset(queue, end)
            high = max(high, low)
            # search_offset answers the offset *at or after* a time: include the last one.
            high = min(high + 1, await self.admin.max_offset(queue))
            found.extend(
                m
                for m in await self.read_queue(queue, low, high, limit)
                if begin * 1000 <= m.store_timestamp <= end * 1000
            )
        found.sort(key=lambda m: m.store_timestamp, reverse=True)
        return found[:limit]

    async def read_queue(self, queue: MessageQueue, start: int, end: int, limit: int) -> list[MessageExt]:
        """Messages ``start <= offset < end`` of ``queue`` (at most ``limit``), read without
        committing anything."""
        found: list[MessageExt] = []
        offset = start
        while offset < end and len(found) < limit:
            result = await pull(
                self.admin.instance,
                TOOLS_GROUP,
                queue,
                offset,
                max_nums=min(32, end - offset),
                expression="*",
                suspend=0,
                timeout=10.0,
            )
            if result.status is PullStatus.FOUND:
                for msg in result.messages:
                    if msg.queue_offset < end:
                        msg.broker_name = queue.broker_name
                        found.append(msg)
            if result.next_begin_offset <= offset:
                break
            offset = result.next_begin_offset
        return found[:limit]

    async def messages_by_key(self, topic: str, key: str) -> list[MessageExt]:
        return await self.admin.query_messages_by_key(topic, key, max_num=64)

    async def message(self, topic: str | None, msg_id: str) -> MessageExt:
        """A message by its client id (needs the topic) or by the broker's offset id."""
        if topic:
            return await self.admin.query_message_by_id(topic, msg_id)
        try:
            addr, _ = decode_offset_msg_id(msg_id)
        except (MQError, ValueError):
            addr = ""
        if addr not in await self.admin.brokers_by_addr():
            raise ClientError(f"{msg_id} is no offset message id of a known broker; give its topic too")
        return await self.admin.view_message(msg_id)

    async def trace(self, msg: MessageExt) -> list[TraceRecord]:
        """The trace records clients wrote for ``msg`` to the trace topic (empty when they
        wrote none, or the topic does not exist)."""
        ids = {msg.msg_id, msg.offset_msg_id}
        try:
            found = await self.admin.query_messages_by_key(TRACE_TOPIC, msg.msg_id, max_num=64)
        except (MQError, OSError):
            return []
        records = [r for m in found for r in decode_trace(m.body.decode(errors="replace")) if r.msg_id in ids]
        records.sort(key=lambda r: r.timestamp)
        return records

    async def resend(self, msg: MessageExt, group: str) -> SendResult:
        """Deliver ``msg`` again to ``group`` only: a copy goes to the group's retry topic,
        which every member consumes, under its original topic (as a consumer's retry)."""
        original = msg.properties.get(PropertyKey.RETRY_TOPIC) or msg.topic
        if original.startswith((RETRY_PREFIX, DLQ_PREFIX)):
            original = msg.properties.get(PropertyKey.REAL_TOPIC) or original
        props = {
            k: v
            for k, v in msg.properties.items()
            if k
            not in (
                PropertyKey.DELAY_TIME_LEVEL,
                PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
                PropertyKey.TRANSACTION_PREPARED,
                PropertyKey.RECONSUME_TIME,
                PropertyKey.MAX_RECONSUME_TIMES,
            )
        }
        props.setdefault(PropertyKey.ORIGIN_MESSAGE_ID, msg.msg_id)
        props[PropertyKey.RETRY_TOPIC] = original
        producer = await self.producer()
        return await producer.send(Message(retry_topic(group), msg.body, properties=props, flag=msg.flag))

    async def dlq_messages(self, group: str, limit: int = MAX_MESSAGES) -> list[MessageExt]:
        """The dead letters of ``group``, oldest first (at most ``limit``)."""
        topic = dlq_topic(group)
        found: list[MessageExt] = []
        for queue in await self.admin.queues(topic):
            low = await self.admin.min_offset(queue)
            high = await self.admin.max_offset(queue)
            found.extend(await self.read_queue(queue, low, high, limit - len(found)))
        return found[:limit]

    async def dlq_message(self, group: str, msg_id: str) -> MessageExt:
        for msg in await self.dlq_messages(group):
            if msg_id in (msg.msg_id, msg.offset_msg_id):
                return msg
        raise QueryNotFoundError(f"no dead letter {msg_id} of group {group!r}")
