"""The cluster as the dashboard's pages read and change it: brokers and their settings, topics,
consumer groups, producers, messages, traces, dead letters and ACL accounts, each through the
asyncio admin client (:class:`~aiorocketmq.client.Admin`), a producer for test messages and
resends, and offset pulls for browsing: one :class:`ClusterAccess` per dashboard process, shared
by every request.

Nothing here renders HTML: every method returns plain data (dataclasses, SDK types) or raises
an :class:`~aiorocketmq.protocol.errors.MQError` that the web layer turns into a message on the
page. State kept between requests: which brokers were seen, so a broker that died and dropped
out of the name server's table is still listed, as down; and the last few time-range message
searches, so paging through one reads the cluster once.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

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
    auth_admin,
)
from aiorocketmq.client.cluster_admin import consumer_running_info, producer_table
from aiorocketmq.client.cluster_admin import update_broker_config as _update_broker_config
from aiorocketmq.client.pull import pull
from aiorocketmq.protocol.admin_requests import ConsumerRunningInfo
from aiorocketmq.protocol.auth import AclInfo, PolicyEntryInfo, PolicyInfo, UserInfo
from aiorocketmq.protocol.body import (
    ConsumerConnection,
    ConsumeStats,
    ProducerConnection,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicConfig,
    TopicConfigSerializeWrapper,
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
from aiorocketmq.protocol.topic_attributes import MESSAGE_TYPE

from .trace import TRACE_TOPIC, TraceRecord, decode_trace

#: Groups brokers keep for themselves (and the one this dashboard pulls as): not listed.
SYSTEM_GROUPS = frozenset(_SYSTEM_GROUPS)
#: Topics the brokers keep for themselves.
SYSTEM_TOPICS = NOT_ALLOWED_SEND_TOPICS | {AUTO_CREATE_TOPIC, BENCHMARK_TOPIC, TRACE_TOPIC}
#: The group offset pulls are made as: brokers know it and it never commits.
TOOLS_GROUP = TOOLS_CONSUMER_GROUP
#: The producer group of test messages and resends.
PRODUCER_GROUP = "MQDASHBOARD_PRODUCER"
#: How many dead letters one browse or export returns at most.
MAX_MESSAGES = 256
#: How many messages one time-range search reads at most (the newest ones of the range).
MAX_SCAN = 5000
#: How long a time-range search's result serves its pages (seconds), and how many are kept.
QUERY_TTL = 300.0
QUERY_CACHE = 8
#: The settings of a consumer group the group page shows and edits (RocketMQ's names).
GROUP_SETTINGS = (
    "consumeEnable",
    "consumeBroadcastEnable",
    "consumeFromMinEnable",
    "retryQueueNums",
    "retryMaxTimes",
    "brokerId",
    "whichBrokerWhenConsumeSlowly",
)


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
    #: RocketMQ 5's ``message.type`` attribute (UNSPECIFIED when the topic has none).
    message_type: str = "UNSPECIFIED"

    @property
    def type(self) -> str:
        """What Apache's dashboard filters topics by: RETRY, DLQ, SYSTEM or the message type."""
        return {"retry": "RETRY", "dlq": "DLQ", "system": "SYSTEM"}.get(self.kind, self.message_type)


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
class TopicGroup:
    """A consumer group of a topic and how far behind it is on that topic."""

    group: str
    lag: int | None = None
    consume_tps: float | None = None
    error: str | None = None


@dataclass
class TopicDetail:
    topic: str
    route: TopicRouteData
    offsets: dict[MessageQueue, TopicOffset]
    groups: list[TopicGroup]


@dataclass(frozen=True)
class MessageRow:
    """What a list of messages shows of one (no body: a search keeps thousands)."""

    msg_id: str
    topic: str
    tags: str
    keys: list[str]
    broker_name: str
    queue_id: int
    queue_offset: int
    store_timestamp: int
    body_size: int

    @classmethod
    def of(cls, msg: MessageExt) -> MessageRow:
        return cls(
            msg.msg_id,
            msg.topic,
            msg.tags or "",
            list(msg.keys),
            msg.broker_name or "",
            msg.queue_id,
            msg.queue_offset,
            msg.store_timestamp,
            len(msg.body),
        )


@dataclass
class TimeSearch:
    """The messages of a topic stored in a time range, newest first."""

    rows: list[MessageRow]
    #: How many messages the queues' offsets put in the range (more than ``rows`` when the
    #: range held more than :data:`MAX_SCAN`).
    in_range: int
    made_at: float = field(default_factory=time.monotonic)


@dataclass
class TracedMessage:
    """A trace record with the host of the client that wrote it."""

    record: TraceRecord
    client_host: str


@dataclass
class AclAccount:
    """A plain-ACL account (RocketMQ 4.x ``PlainAccessConfig``) as one or more brokers hold it."""

    access_key: str
    secret_key: str = ""
    white_remote_address: str = ""
    admin: bool = False
    default_topic_perm: str = ""
    default_group_perm: str = ""
    topic_perms: list[str] = field(default_factory=list)
    group_perms: list[str] = field(default_factory=list)
    brokers: list[str] = field(default_factory=list)

    def same_as(self, other: AclAccount) -> bool:
        return replace(self, brokers=[]) == replace(other, brokers=[])


@dataclass
class BrokerAcl:
    broker: str
    addr: str
    global_white: list[str] = field(default_factory=list)
    error: str | None = None


@dataclass
class AclView:
    brokers: list[BrokerAcl]
    #: One row per distinct account definition (an account the masters hold alike is one row).
    accounts: list[AclAccount]


@dataclass
class AuthUser:
    """An ACL 2.0 user as one or more masters hold it (the password is never shown)."""

    username: str
    user_type: str = ""
    user_status: str = ""
    brokers: list[str] = field(default_factory=list)


@dataclass
class AuthEntry:
    """One entry of an ACL 2.0 policy: a subject's rule on one resource, on some masters."""

    subject: str
    policy_type: str
    resource: str
    actions: list[str] = field(default_factory=list)
    source_ips: list[str] = field(default_factory=list)
    decision: str = ""
    brokers: list[str] = field(default_factory=list)


@dataclass
class AuthView:
    """Every master's ACL 2.0 users and policies; a master that refuses says why in
    ``brokers`` (an :class:`BrokerAcl` whose global white list stays empty)."""

    brokers: list[BrokerAcl]
    users: list[AuthUser]
    entries: list[AuthEntry]


def _merge(rows: list[Any]) -> list[Any]:
    """Rows the masters hold alike become one row naming all of them."""
    merged: list[Any] = []
    for row in rows:
        same = next((m for m in merged if replace(m, brokers=[]) == replace(row, brokers=[])), None)
        if same is None:
            merged.append(row)
        else:
            same.brokers.extend(row.brokers)
    return merged


def describe(exc: BaseException) -> str:
    """An error as one line for the page."""
    text = " ".join(str(exc).split())
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


class ClusterAccess:
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
        #: Recent time-range searches by (topic, begin, end), oldest first.
        self._searches: OrderedDict[tuple[str, float, float], TimeSearch] = OrderedDict()

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
        registered = await self._registered_brokers()
        rows = {
            addr: BrokerRow(cluster, name, broker_id, addr, registered=addr in registered)
            for addr, (cluster, name, broker_id) in self.seen_brokers.items()
        }

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

    async def _registered_brokers(self) -> set[str]:
        """The addresses the name servers list now, each recorded in :attr:`seen_brokers`."""
        info = await self.admin.cluster_info()
        cluster_of = {name: c for c, names in info.cluster_addr_table.items() for name in names}
        registered = set()
        for name, data in info.broker_addr_table.items():
            for broker_id, addr in data.broker_addrs.items():
                self.seen_brokers[addr] = (cluster_of.get(name, data.cluster), name, broker_id)
                registered.add(addr)
        return registered

    async def known_broker(self, addr: str) -> str:
        """``addr`` when it is a broker of this cluster (one the name servers list, or listed
        before); ValueError otherwise. Addresses come from the browser, and the dashboard's
        requests carry its ACL signature: it must not be made to send them anywhere else."""
        if addr not in self.seen_brokers:
            await self._registered_brokers()
        if addr not in self.seen_brokers:
            raise ValueError(f"{addr!r} is not a broker of this cluster")
        return addr

    async def broker_config(self, addr: str) -> dict[str, str]:
        """A broker's settings (GET_BROKER_CONFIG), sorted by key."""
        return dict(sorted((await self.admin.broker_config(await self.known_broker(addr))).items()))

    async def update_broker_config(self, addr: str, key: str, value: str) -> str | None:
        """Set one of a broker's settings in memory (UPDATE_BROKER_CONFIG, as ``mqadmin
        updateBrokerConfig`` does); the value the broker then reports. A broker ignores keys
        it does not know or will not change while running, so the caller compares."""
        await _update_broker_config(self.admin, await self.known_broker(addr), {key: value})
        return (await self.admin.broker_config(addr)).get(key)

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
        types = await self.message_types()
        for row in rows:
            row.message_type = types.get(row.topic, row.message_type)
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

    async def message_types(self) -> dict[str, str]:
        """Each topic's ``message.type`` attribute, as the masters' topic configurations hold
        it (one GET_ALL_TOPIC_CONFIG per master; a 4.x broker keeps no attributes)."""
        types: dict[str, str] = {}

        async def ask(addr: str) -> None:
            try:
                response = await self.admin.instance.call(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
                table = TopicConfigSerializeWrapper.decode(response.body).topic_config_table
            except (MQError, OSError):
                return
            for name, config in table.items():
                if config.attributes.get(MESSAGE_TYPE):
                    types[name] = config.attributes[MESSAGE_TYPE]

        try:
            masters = await self.masters()
        except MQError:
            return types
        await asyncio.gather(*(ask(a) for a in masters.values()))
        return types

    async def topic_config(self, topic: str, broker_addr: str) -> TopicConfig | None:
        """One broker's configuration of ``topic`` (RocketMQ 5's GET_TOPIC_CONFIG; None from a
        broker that does not answer it)."""
        try:
            response = await self.admin.instance.call(
                broker_addr, RequestCode.GET_TOPIC_CONFIG, {"topic": topic}
            )
        except (MQError, OSError):
            return None
        return TopicConfig.decode(response.body)

    async def topic_detail(self, topic: str) -> TopicDetail:
        route = await self.admin.topic_route(topic)
        offsets = await self.admin.topic_stats(topic)
        try:
            names = await self.admin.consumer_groups_of(topic)
        except MQError:
            names = []
        groups = [TopicGroup(g) for g in names if g not in SYSTEM_GROUPS]

        async def fill(row: TopicGroup) -> None:
            try:
                stats = await self.admin.consume_stats(row.group, topic)
            except ClientError:
                return  # no offsets on this topic yet
            except (MQError, OSError) as exc:
                row.error = describe(exc)
                return
            row.lag, row.consume_tps = stats.diff_total(), stats.consume_tps

        await asyncio.gather(*(fill(g) for g in groups))
        return TopicDetail(topic, route, offsets, groups)

    async def create_topic(
        self,
        topic: str,
        read_queues: int,
        write_queues: int,
        perm: int,
        broker_addr: str | None = None,
        message_type: str | None = None,
    ) -> None:
        """Create or update ``topic`` on every master, or on the one at ``broker_addr``; with
        ``message_type``, set RocketMQ 5's ``message.type`` attribute too."""
        await self.admin.create_topic(
            topic,
            read_queue_nums=read_queues,
            write_queue_nums=write_queues,
            perm=perm,
            broker_addr=await self.known_broker(broker_addr) if broker_addr else None,
            attributes={"+" + MESSAGE_TYPE: message_type} if message_type else None,
            wait=10.0,
        )

    async def update_topic(
        self,
        topic: str,
        read_queues: int,
        write_queues: int,
        perm: int,
        broker_addr: str | None = None,
        message_type: str | None = None,
    ) -> list[str]:
        """Change ``topic`` where it is: on the master at ``broker_addr``, or on every master
        its route lists (never on a broker that does not hold it); the order flag and system
        flags each broker holds are kept. The masters written to."""
        if broker_addr:
            targets = [await self.known_broker(broker_addr)]
        else:
            route = await self.admin.topic_route(topic)
            targets = sorted(
                d.broker_addrs[MASTER_ID] for d in route.broker_datas if MASTER_ID in d.broker_addrs
            )
            if not targets:
                raise ValueError(f"no master holds topic {topic!r}")
        for addr in targets:
            held = await self.held_topic_config(topic, addr)
            await self.admin.create_topic(
                topic,
                read_queue_nums=read_queues,
                write_queue_nums=write_queues,
                perm=perm,
                broker_addr=addr,
                order=held.order if held else False,
                topic_sys_flag=held.topic_sys_flag if held else 0,
                attributes={"+" + MESSAGE_TYPE: message_type} if message_type else None,
                wait=10.0,
            )
        return targets

    async def held_topic_config(self, topic: str, broker_addr: str) -> TopicConfig | None:
        """The broker's configuration of ``topic``: RocketMQ 5's GET_TOPIC_CONFIG, or from the
        whole table where a 4.x broker does not answer that; None where it does not hold it."""
        config = await self.topic_config(topic, broker_addr)
        if config is not None:
            return config
        try:
            response = await self.admin.instance.call(broker_addr, RequestCode.GET_ALL_TOPIC_CONFIG)
        except (MQError, OSError):
            return None
        return TopicConfigSerializeWrapper.decode(response.body).topic_config_table.get(topic)

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

    async def running_info(self, group: str, client_id: str) -> ConsumerRunningInfo:
        """What one consumer of ``group`` says about itself: its settings, subscriptions, the
        queues it holds and its rates (GET_CONSUMER_RUNNING_INFO, relayed by a broker)."""
        return await consumer_running_info(self.admin, group, client_id)

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

    async def delete_group(self, group: str, *, remove_offsets: bool, broker_addr: str | None = None) -> None:
        """Delete the group's settings (and offsets) on every master, with its retry and DLQ
        topics; or on the master at ``broker_addr`` only, where the topics stay."""
        if broker_addr:
            await self.admin.delete_subscription_group(
                group, broker_addr=await self.known_broker(broker_addr), remove_offsets=remove_offsets
            )
            return
        await self.admin.delete_subscription_group(group, remove_offsets=remove_offsets)
        for topic in (retry_topic(group), dlq_topic(group)):
            try:
                await self.admin.delete_topic(topic)
            except MQError:
                continue  # it may never have existed

    async def _group_configs(self) -> dict[str, SubscriptionGroupWrapper]:
        """Every master's consumer-group settings, by broker name (a master that does not
        answer is left out)."""

        async def ask(addr: str) -> SubscriptionGroupWrapper | None:
            try:
                response = await self.admin.instance.call(
                    addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {}
                )
            except (MQError, OSError):
                return None
            return SubscriptionGroupWrapper.decode(response.body)

        masters = await self.masters()
        answers = await asyncio.gather(*(ask(a) for a in masters.values()))
        return {name: w for name, w in zip(masters, answers) if w is not None}

    async def group_settings(self, group: str) -> dict[str, SubscriptionGroupConfig]:
        """The group's settings on each master that holds them, by broker name."""
        return {
            name: wrapper.subscription_group_table[group]
            for name, wrapper in (await self._group_configs()).items()
            if group in wrapper.subscription_group_table
        }

    async def update_group_settings(self, group: str, settings: dict[str, Any]) -> None:
        """Create or update a consumer group's settings on every master (RocketMQ's field
        names, :data:`GROUP_SETTINGS`); what is not given keeps the value that master holds
        (or the default, on a master without the group): masters may differ in the rest."""
        current = await self.group_settings(group)
        for name, addr in (await self.masters()).items():
            base = current.get(name) or SubscriptionGroupConfig(group_name=group)
            values = {**base.model_dump(by_alias=True), **settings, "groupName": group}
            await self.admin.update_subscription_group(
                SubscriptionGroupConfig.model_validate(values), broker_addr=addr
            )

    # -- producers --------------------------------------------------------------------------

    async def producer_groups(self) -> dict[str, int]:
        """Producer groups connected to any master, with how many producers each (RocketMQ
        5's GET_ALL_PRODUCER_INFO; a 4.x broker does not answer it and adds nothing)."""
        clients: dict[str, set[str]] = {}

        async def ask(addr: str) -> None:
            try:
                table = await producer_table(self.admin, addr)
            except (MQError, OSError):
                return
            for group, producers in table.data.items():
                clients.setdefault(group, set()).update(p.client_id for p in producers)

        await asyncio.gather(*(ask(a) for a in (await self.masters()).values()))
        hidden = SYSTEM_GROUPS | {PRODUCER_GROUP}
        return {g: len(ids) for g, ids in sorted(clients.items()) if g not in hidden}

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
        self, topic: str, begin: float, end: float, *, fresh: bool = True
    ) -> TimeSearch:
        """The messages of ``topic`` stored between ``begin`` and ``end`` (seconds since the
        epoch), newest first: at most :data:`MAX_SCAN`, the newest of each queue's share when
        the range holds more. With ``fresh`` false, a search made in the last
        :data:`QUERY_TTL` seconds answers again (paging through one reads the cluster once)."""
        key = (topic, begin, end)
        cached = self._searches.get(key)
        if not fresh and cached is not None and time.monotonic() - cached.made_at < QUERY_TTL:
            return cached
        ranges = []
        for queue in await self.admin.queues(topic):
            low = await self.admin.search_offset(queue, begin)
            high = max(await self.admin.search_offset(queue, end), low)
            # search_offset answers the offset *at or after* a time: include the last one.
            high = min(high + 1, await self.admin.max_offset(queue))
            ranges.append((queue, low, max(high, low)))
        in_range = sum(high - low for _, low, high in ranges)
        rows: list[MessageRow] = []
        for queue, low, high in ranges:
            if in_range > MAX_SCAN:
                low = max(low, high - math.ceil(MAX_SCAN * (high - low) / in_range))
            # Bodies are dropped a pull at a time: only the rows of a search are held.
            async for batch in self._pulled(queue, low, high, high - low):
                rows.extend(
                    MessageRow.of(m) for m in batch if begin * 1000 <= m.store_timestamp <= end * 1000
                )
        rows.sort(key=lambda r: (r.store_timestamp, r.queue_offset), reverse=True)
        search = TimeSearch(rows[:MAX_SCAN], in_range)
        self._searches[key] = search
        self._searches.move_to_end(key)
        while len(self._searches) > QUERY_CACHE:
            self._searches.popitem(last=False)
        return search

    async def read_queue(self, queue: MessageQueue, start: int, end: int, limit: int) -> list[MessageExt]:
        """Messages ``start <= offset < end`` of ``queue`` (at most ``limit``), read without
        committing anything."""
        found: list[MessageExt] = []
        async for batch in self._pulled(queue, start, end, limit):
            found.extend(batch)
        return found

    async def _pulled(
        self, queue: MessageQueue, start: int, end: int, limit: int
    ) -> AsyncIterator[list[MessageExt]]:
        """The messages of :meth:`read_queue`, one pull's worth at a time."""
        given = 0
        offset = start
        while offset < end and given < limit:
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
                batch = [m for m in result.messages if m.queue_offset < end][: limit - given]
                for msg in batch:
                    msg.broker_name = queue.broker_name
                given += len(batch)
                yield batch
            if result.next_begin_offset <= offset:
                break
            offset = result.next_begin_offset

    async def messages_by_key(self, topic: str, key: str) -> list[MessageRow]:
        """The messages of ``topic`` the brokers' index holds under ``key``, newest first."""
        found = await self.admin.query_messages_by_key(topic, key, max_num=64)
        return sorted((MessageRow.of(m) for m in found), key=lambda r: r.store_timestamp, reverse=True)

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

    async def trace(self, msg: MessageExt, trace_topic: str = TRACE_TOPIC) -> list[TraceRecord]:
        """The trace records clients wrote for ``msg`` (empty when they wrote none, or the
        trace topic does not exist)."""
        found = await self.trace_of(msg.msg_id, trace_topic, also=(msg.offset_msg_id,))
        return [t.record for t in found]

    async def trace_of(
        self, msg_id: str, trace_topic: str = TRACE_TOPIC, *, also: tuple[str, ...] = ()
    ) -> list[TracedMessage]:
        """The trace records about message ``msg_id`` in ``trace_topic``, oldest first: the
        clients index each trace message under the traced message's id."""
        ids = {msg_id, *also}
        try:
            found = await self.admin.query_messages_by_key(trace_topic, msg_id, max_num=64)
        except (MQError, OSError):
            return []
        traced = [
            TracedMessage(r, m.born_host.rsplit(":", 1)[0])
            for m in found
            for r in decode_trace(m.body.decode(errors="replace"))
            if r.msg_id in ids
        ]
        traced.sort(key=lambda t: t.record.timestamp)
        return traced

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

    # -- ACL (plain_acl accounts, RocketMQ 4.x's ACL 1.0) -------------------------------------

    async def masters(self) -> dict[str, str]:
        """Master address by broker name."""
        info = await self.admin.cluster_info()
        return {
            name: data.broker_addrs[MASTER_ID]
            for name, data in sorted(info.broker_addr_table.items())
            if MASTER_ID in data.broker_addrs
        }

    async def acl(self) -> AclView:
        """Every master's ACL accounts and global white list (GET_BROKER_CLUSTER_ACL_CONFIG);
        a broker with ACL off, or that refuses, says why."""
        masters = await self.masters()

        async def ask(name: str, addr: str) -> tuple[BrokerAcl, list[AclAccount]]:
            broker = BrokerAcl(name, addr)
            try:
                data = await self.admin.acl_config(addr)
            except (MQError, OSError) as exc:
                broker.error = describe(exc)
                return broker, []
            broker.global_white = [str(a) for a in data.get("globalWhiteAddrs") or []]
            return broker, [_account(c, name) for c in data.get("plainAccessConfigs") or []]

        answers = await asyncio.gather(*(ask(n, a) for n, a in masters.items()))
        accounts: list[AclAccount] = []
        for _, held in answers:
            for account in held:
                same = next((a for a in accounts if a.same_as(account)), None)
                if same is None:
                    accounts.append(account)
                else:
                    same.brokers.extend(account.brokers)
        accounts.sort(key=lambda a: (a.access_key, a.brokers))
        return AclView([b for b, _ in answers], accounts)

    async def _each_acl_master(self, call: Callable[[str], Awaitable[None]]) -> dict[str, str | None]:
        """Run ``call(addr)`` on every master; the error of each (None: done). Raises when
        none succeeded, with the first broker's reason."""
        masters = await self.masters()
        if not masters:
            raise ClientError("no master broker is registered")

        async def one(addr: str) -> str | None:
            try:
                await call(addr)
            except (MQError, OSError) as exc:
                return describe(exc)
            return None

        errors = dict(zip(masters, await asyncio.gather(*(one(a) for a in masters.values()))))
        if all(errors.values()):
            raise ClientError("; ".join(f"{name}: {error}" for name, error in errors.items()))
        return errors

    async def update_acl_account(self, account: AclAccount) -> dict[str, str | None]:
        """Create or update an account on every master (UPDATE_AND_CREATE_ACL_CONFIG); an
        existing account given no secret keeps the one the masters hold (brokers require one)."""
        if not account.secret_key:
            held = next((a for a in (await self.acl()).accounts if a.access_key == account.access_key), None)
            if held is None or not held.secret_key:
                raise ValueError(f"give account {account.access_key!r} a secret key")
            account = replace(account, secret_key=held.secret_key)
        return await self._each_acl_master(
            lambda addr: self.admin.update_acl_config(
                addr,
                account.access_key,
                secret_key=account.secret_key or None,
                white_remote_address=account.white_remote_address,
                admin=account.admin,
                default_topic_perm=account.default_topic_perm or None,
                default_group_perm=account.default_group_perm or None,
                topic_perms=account.topic_perms,
                group_perms=account.group_perms,
            )
        )

    async def delete_acl_account(self, access_key: str) -> dict[str, str | None]:
        """Delete an account on every master (DELETE_ACL_CONFIG)."""
        return await self._each_acl_master(lambda addr: self.admin.delete_acl_config(addr, access_key))

    async def update_global_white(self, patterns: list[str]) -> dict[str, str | None]:
        """Replace every master's global white list (UPDATE_GLOBAL_WHITE_ADDRS_CONFIG)."""
        return await self._each_acl_master(lambda addr: self.admin.update_global_white_addrs(addr, patterns))

    # -- ACL 2.0 (RocketMQ 5.3's users and policies, client/auth_admin.py) ----------------------

    async def auth(self) -> AuthView:
        """Every master's users and ACL policies (AUTH_LIST_USER, AUTH_LIST_ACL)."""
        masters = await self.masters()

        async def ask(name: str, addr: str) -> tuple[BrokerAcl, list[AuthUser], list[AuthEntry]]:
            broker = BrokerAcl(name, addr)
            try:
                users, acls = await asyncio.gather(
                    auth_admin.list_users(self.admin, addr), auth_admin.list_acls(self.admin, addr)
                )
            except (MQError, OSError) as exc:
                broker.error = describe(exc)
                return broker, [], []
            held_users = [
                AuthUser(u.username or "", u.user_type or "", u.user_status or "", [name]) for u in users
            ]
            entries = [
                AuthEntry(
                    acl.subject or "",
                    policy.policy_type or "",
                    entry.resource or "",
                    list(entry.actions or []),
                    list(entry.source_ips or []),
                    entry.decision or "",
                    [name],
                )
                for acl in acls
                for policy in acl.policies or []
                for entry in policy.entries or []
            ]
            return broker, held_users, entries

        answers = await asyncio.gather(*(ask(n, a) for n, a in masters.items()))
        users = _merge([u for _, held, _ in answers for u in held])
        entries = _merge([e for _, _, held in answers for e in held])
        users.sort(key=lambda u: (u.username, u.brokers))
        entries.sort(key=lambda e: (e.subject, e.policy_type, e.resource, e.brokers))
        return AuthView([b for b, _, _ in answers], users, entries)

    async def save_user(self, user: UserInfo) -> dict[str, str | None]:
        """Create the user on every master that lacks it, update it where it exists (a password
        left out stays as held)."""
        username = user.username or ""

        async def save(addr: str) -> None:
            if await auth_admin.get_user(self.admin, addr, username) is None:
                await auth_admin.create_user(self.admin, addr, user)
            else:
                await auth_admin.update_user(self.admin, addr, user)

        return await self._each_acl_master(save)

    async def delete_user(self, username: str) -> dict[str, str | None]:
        return await self._each_acl_master(lambda addr: auth_admin.delete_user(self.admin, addr, username))

    async def save_policy(
        self,
        subject: str,
        resources: list[str],
        actions: list[str],
        decision: str,
        source_ips: list[str],
    ) -> dict[str, str | None]:
        """Give ``subject`` an entry per resource (in its custom policy) on every master: a
        new ACL where it has none, else its entries for these resources replaced."""
        entries = [
            PolicyEntryInfo(resource=r, actions=actions, source_ips=source_ips or None, decision=decision)
            for r in resources
        ]
        acl = AclInfo(subject=subject, policies=[PolicyInfo(policy_type="Custom", entries=entries)])

        async def save(addr: str) -> None:
            if await auth_admin.get_acl(self.admin, addr, subject) is None:
                await auth_admin.create_acl(self.admin, addr, acl)
            else:
                await auth_admin.update_acl(self.admin, addr, acl)

        return await self._each_acl_master(save)

    async def delete_policy(
        self, subject: str, resource: str | None = None, policy_type: str | None = None
    ) -> dict[str, str | None]:
        """Delete a subject's entry for ``resource``, or its whole ACL, on every master."""
        return await self._each_acl_master(
            lambda addr: auth_admin.delete_acl(
                self.admin, addr, subject, policy_type=policy_type, resource=resource
            )
        )


def _account(config: dict[str, Any], broker: str) -> AclAccount:
    def text(key: str) -> str:
        value = config.get(key)
        return "" if value is None else str(value)

    def perms(key: str) -> list[str]:
        value = config.get(key) or []
        return [str(p) for p in value] if isinstance(value, list) else [str(value)]

    return AclAccount(
        access_key=text("accessKey"),
        secret_key=text("secretKey"),
        white_remote_address=text("whiteRemoteAddress"),
        admin=str(config.get("admin")).lower() == "true",
        default_topic_perm=text("defaultTopicPerm"),
        default_group_perm=text("defaultGroupPerm"),
        topic_perms=sorted(perms("topicPerms")),
        group_perms=sorted(perms("groupPerms")),
        brokers=[broker],
    )
