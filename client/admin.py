"""The administration API (what ``mqadmin`` is built on): topics (queue counts, permission,
flags, ordered-topic configs) and waiting for their routes, cluster info, subscription groups,
consume progress and lag, which groups consume a topic, topic statistics, message queries by
id and by key, offset resets by time, client connections, the name servers' KV config, broker
runtime info, configuration and on-demand retention."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from aiorocketmq.protocol import fastjson
from aiorocketmq.protocol.body import (
    ORDER_TOPIC_CONFIG,
    ClusterInfo,
    ConsumerConnection,
    ConsumeStats,
    CreateTopicListBody,
    GroupList,
    KVTable,
    MessageQueue,
    ProducerConnection,
    QueueData,
    ResetOffsetBody,
    SubscriptionGroupConfig,
    SubscriptionGroupList,
    TopicConfig,
    TopicList,
    TopicOffset,
    TopicRouteData,
    TopicStatsTable,
    format_order_topic_conf,
    parse_order_topic_conf,
)
from aiorocketmq.protocol.codes import MASTER_ID, PERM_READ_WRITE, RequestCode, ResponseCode
from aiorocketmq.protocol.errors import (
    BrokerError,
    MQError,
    QueryNotFoundError,
    RemotingError,
    TopicNotExistError,
)
from aiorocketmq.protocol.headers import (
    CreateAccessConfigRequestHeader,
    CreateTopicRequestHeader,
    DeleteAccessConfigRequestHeader,
    DeleteKVConfigRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    DeleteTopicRequestHeader,
    GetBrokerAclConfigResponseHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumeStatsRequestHeader,
    GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader,
    GetKVConfigRequestHeader,
    GetKVConfigResponseHeader,
    GetProducerConnectionListRequestHeader,
    GetTopicStatsInfoRequestHeader,
    PutKVConfigRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    QueryMessageRequestHeader,
    QueryTopicConsumeByWhoRequestHeader,
    ResetOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    UpdateGlobalWhiteAddrsConfigRequestHeader,
    ViewMessageRequestHeader,
)
from aiorocketmq.protocol.message import MessageExt, decode_offset_msg_id, decode_records
from aiorocketmq.protocol.settings import read_properties
from aiorocketmq.protocol.topic_attributes import format_modification

from .client_instance import (
    ClientInstance,
    ClientOptions,
    default_instance_name,
)
from .errors import ClientError, NoRouteError
from .lifecycle import InstanceClient
from .rebalance import queue_offset, search_offset
from .routing import subscribe_queues
from .subscription import check_topic
from .types import BrokerIdentity

QUERY_TIMEOUT = 10.0


class Admin(InstanceClient):
    """Cluster administration over the name servers and brokers.

    ::

        async with Admin(namesrv="127.0.0.1:9876") as admin:
            await admin.create_topic("Orders", queue_nums=8)
            lag = await admin.consumer_lag("billing", "Orders")
    """

    _describes = "the admin client"
    _started_by = "async with Admin(...)"

    def __init__(
        self,
        namesrv: str | Iterable[str] | None = None,
        *,
        instance_name: str | None = None,
        options: ClientOptions | None = None,
    ) -> None:
        self.namesrv = namesrv
        self.instance_name = instance_name or f"admin-{default_instance_name()}"
        self.options = options or ClientOptions()
        self._acquired: ClientInstance | None = None

    @property
    def instance(self) -> ClientInstance:
        """The started client's connections (:class:`ClientInstance`), for the raw requests no
        method here covers: ``await admin.instance.call(broker_addr, RequestCode..., header)``,
        ``call_namesrv``, ``fetch_route``. Raises :class:`ClientStateError` before ``start()``."""
        return self._instance

    # -- cluster and routes ---------------------------------------------------------------

    async def cluster_info(self) -> ClusterInfo:
        response = await self.instance.call_namesrv(RequestCode.GET_BROKER_CLUSTER_INFO)
        return ClusterInfo.decode(response.body)

    async def master_addrs(self, cluster: str | None = None) -> list[str]:
        """Master addresses of every broker (of ``cluster`` only, when given)."""
        info = await self.cluster_info()
        names: Iterable[str]
        if cluster is not None:
            if cluster not in info.cluster_addr_table:
                raise ClientError(f"cluster {cluster!r} is unknown; known: {sorted(info.cluster_addr_table)}")
            names = info.cluster_addr_table[cluster]
        else:
            names = info.broker_addr_table
        addrs = []
        for name in sorted(names):
            data = info.broker_addr_table.get(name)
            if data is not None and MASTER_ID in data.broker_addrs:
                addrs.append(data.broker_addrs[MASTER_ID])
        if not addrs:
            raise NoRouteError("no master broker is registered with the name servers")
        return addrs

    async def brokers_by_addr(self) -> dict[str, BrokerIdentity]:
        """Every address the name servers know a broker at (masters and slaves) -> who it is."""
        info = await self.cluster_info()
        cluster_of = {name: cluster for cluster, names in info.cluster_addr_table.items() for name in names}
        return {
            addr: BrokerIdentity(cluster_of.get(name, data.cluster), name, broker_id)
            for name, data in info.broker_addr_table.items()
            for broker_id, addr in data.broker_addrs.items()
        }

    async def topic_route(self, topic: str) -> TopicRouteData:
        return await self.instance.update_route(topic)

    async def wait_for_route(
        self,
        topic: str,
        *,
        brokers: Iterable[str] | None = None,
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        perm: int | None = None,
        timeout: float = 10.0,
    ) -> TopicRouteData:
        """Wait until the name servers route ``topic`` on every broker named in ``brokers``
        (on at least one broker when None) with these queue counts and permission (any,
        where None); adopt that route and return it. Raises :class:`ClientError` when they
        do not within ``timeout`` seconds."""
        names = set(brokers) if brokers is not None else None

        def routed(route: TopicRouteData) -> bool:
            matching = {
                q.broker_name
                for q in route.queue_datas
                if _is_set(q, read_queue_nums, write_queue_nums, perm)
            }
            return names <= matching if names is not None else bool(matching)

        wanted = f" on {sorted(names)}" if names else ""
        return await self._await_route(
            topic,
            routed,
            timeout,
            f"no name server routes topic {topic!r} as wanted{wanted} after {timeout:g}s",
        )

    async def _await_route(
        self, topic: str, routed: Callable[[TopicRouteData], bool], timeout: float, failure: str
    ) -> TopicRouteData:
        # Brokers re-register right after a topic change; the name servers then route it.
        deadline = time.monotonic() + timeout
        while True:
            last: MQError | None = None
            try:
                route = await self.instance.fetch_route(topic)
            except (TopicNotExistError, RemotingError) as exc:  # not yet, or a name server away
                last = exc
            else:
                if routed(route):
                    self.instance.adopt_route(topic, route)
                    return route
            if time.monotonic() >= deadline:
                raise ClientError(failure) from last
            await asyncio.sleep(0.05)

    async def topic_list(self) -> list[str]:
        response = await self.instance.call_namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        return sorted(TopicList.decode(response.body).topic_list)

    async def queues(self, topic: str) -> list[MessageQueue]:
        """The readable queues of ``topic``, sorted."""
        return sorted(subscribe_queues(topic, await self.topic_route(topic)))

    async def _route_masters(self, topic: str) -> dict[str, str]:
        route = await self.topic_route(topic)
        return {
            data.broker_name: data.broker_addrs[MASTER_ID]
            for data in route.broker_datas
            if MASTER_ID in data.broker_addrs
        }

    # -- topics ---------------------------------------------------------------------------

    async def create_topic(
        self,
        topic: str,
        queue_nums: int = 8,
        *,
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        cluster: str | None = None,
        broker_addr: str | None = None,
        perm: int = PERM_READ_WRITE,
        order: bool = False,
        topic_sys_flag: int = 0,
        attributes: Mapping[str, str] | None = None,
        wait: float = 10.0,
    ) -> TopicConfig:
        """Create (or update) ``topic`` on every master (of ``cluster``, or only
        ``broker_addr``) with ``queue_nums`` read and write queues (``read_queue_nums`` and
        ``write_queue_nums`` set either count alone), permission ``perm`` (:class:`Perm`
        bits), the broker-side ``order`` flag and ``topic_sys_flag`` (:class:`TopicSysFlag`
        bits) and RocketMQ 5's ``attributes`` changes (signed keys, as ``mqadmin updateTopic
        -a`` takes them: ``{"+message.type": "FIFO"}`` adds or updates, ``{"-key": ""}``
        deletes); then wait up to ``wait`` seconds until the name servers route these settings
        on every broker written to. Returns the configuration sent.

        ``order`` only marks the topic on the brokers; producers keep a topic's messages in
        order across brokers through :meth:`update_order_topic_conf`."""
        check_topic(topic)
        config = TopicConfig(
            topic_name=topic,
            read_queue_nums=queue_nums if read_queue_nums is None else read_queue_nums,
            write_queue_nums=queue_nums if write_queue_nums is None else write_queue_nums,
            perm=perm,
            topic_sys_flag=topic_sys_flag,
            order=order,
        )
        if config.read_queue_nums < 1 or config.write_queue_nums < 1:
            raise ValueError("a topic needs at least 1 read queue and 1 write queue")
        addrs = [broker_addr] if broker_addr else await self.master_addrs(cluster)
        header = CreateTopicRequestHeader(
            topic=topic,
            read_queue_nums=config.read_queue_nums,
            write_queue_nums=config.write_queue_nums,
            perm=config.perm,
            topic_filter_type=config.topic_filter_type,
            topic_sys_flag=config.topic_sys_flag,
            order=config.order,
            attributes=format_modification(attributes) if attributes else None,
        )
        for addr in addrs:
            await self.instance.call(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, header)
        if wait > 0:

            def routed(route: TopicRouteData) -> bool:
                # Brokers are known here by address: the route says which name each one has.
                name_of = {a: d.broker_name for d in route.broker_datas for a in d.broker_addrs.values()}
                matching = {
                    q.broker_name
                    for q in route.queue_datas
                    if _is_set(q, config.read_queue_nums, config.write_queue_nums, config.perm)
                }
                return all(name_of.get(addr) in matching for addr in addrs)

            await self._await_route(
                topic,
                routed,
                wait,
                f"topic {topic!r} was created but no name server routes it after {wait:g}s",
            )
        return config

    async def create_topics(
        self, configs: Sequence[TopicConfig], *, cluster: str | None = None, broker_addr: str | None = None
    ) -> list[str]:
        """Create or update many topics in one request per master (RocketMQ 5's
        UPDATE_AND_CREATE_TOPIC_LIST); the masters' addresses. The broker checks every topic
        before it creates any."""
        for config in configs:
            check_topic(config.topic_name)
        addrs = [broker_addr] if broker_addr else await self.master_addrs(cluster)
        body = CreateTopicListBody(topic_config_list=list(configs)).encode()
        for addr in addrs:
            await self.instance.call(addr, RequestCode.UPDATE_AND_CREATE_TOPIC_LIST, None, body)
        return addrs

    async def delete_topic(self, topic: str, *, cluster: str | None = None) -> None:
        """Delete ``topic`` from the brokers (of ``cluster``) and from every name server."""
        for addr in await self.master_addrs(cluster):
            await self.instance.call(
                addr, RequestCode.DELETE_TOPIC_IN_BROKER, DeleteTopicRequestHeader(topic=topic)
            )
        header = DeleteTopicFromNamesrvRequestHeader(topic=topic, cluster_name=cluster)
        for addr in self.instance.namesrv_addrs:
            await self.instance.call(addr, RequestCode.DELETE_TOPIC_IN_NAMESRV, header)
        self.instance.routes.pop(topic, None)

    async def order_topic_conf(self, topic: str) -> dict[str, int]:
        """Broker name -> queue count of an ordered topic, as the name servers route it
        (``orderTopicConf``); empty when the topic is not ordered."""
        return parse_order_topic_conf(await self.kv_config(ORDER_TOPIC_CONFIG, topic) or "")

    async def update_order_topic_conf(
        self, topic: str, queue_nums: Mapping[str, int], *, merge: bool = False
    ) -> str:
        """Make ``topic`` ordered: producers then choose among exactly the first
        ``queue_nums[name]`` queues of each broker, brokers in this order (the route's
        ``orderTopicConf``), whatever the routed queue counts say. With ``merge`` the entries
        of brokers not in ``queue_nums`` are kept. Written on every name server; returns the
        stored ``brokerName:queues;...``."""
        if any(count < 1 for count in queue_nums.values()):
            raise ValueError("every broker of an ordered topic needs at least 1 queue")
        if merge:
            queue_nums = {**await self.order_topic_conf(topic), **queue_nums}
        text = format_order_topic_conf(queue_nums)
        await self.update_kv_config(ORDER_TOPIC_CONFIG, topic, text)
        return text

    async def consumer_groups_of(self, topic: str) -> list[str]:
        """The consumer groups of ``topic`` (QUERY_TOPIC_CONSUME_BY_WHO on each master of its
        route): those with online members subscribed to it and those with committed offsets
        on it."""
        header = QueryTopicConsumeByWhoRequestHeader(topic=topic)
        groups: set[str] = set()
        for addr in (await self._route_masters(topic)).values():
            response = await self.instance.call(addr, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, header)
            groups.update(GroupList.decode(response.body).group_list)
        return sorted(groups)

    async def topic_stats(self, topic: str) -> dict[MessageQueue, TopicOffset]:
        """Min/max offset and last update time of every queue of ``topic``."""
        table: dict[MessageQueue, TopicOffset] = {}
        for addr in (await self._route_masters(topic)).values():
            response = await self.instance.call(
                addr, RequestCode.GET_TOPIC_STATS_INFO, GetTopicStatsInfoRequestHeader(topic=topic)
            )
            table.update(TopicStatsTable.decode(response.body).offset_table)
        return dict(sorted(table.items()))

    # -- subscription groups --------------------------------------------------------------

    async def update_subscription_group(
        self, config: SubscriptionGroupConfig, *, cluster: str | None = None, broker_addr: str | None = None
    ) -> None:
        """Create or update a consumer group's settings (``retry_max_times``, ...) on every
        master (of ``cluster``, or only ``broker_addr``)."""
        addrs = [broker_addr] if broker_addr else await self.master_addrs(cluster)
        for addr in addrs:
            await self.instance.call(
                addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, config.encode()
            )

    async def update_subscription_groups(
        self,
        configs: Sequence[SubscriptionGroupConfig],
        *,
        cluster: str | None = None,
        broker_addr: str | None = None,
    ) -> list[str]:
        """Create or update many consumer groups in one request per master (RocketMQ 5's
        UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST); the masters' addresses."""
        addrs = [broker_addr] if broker_addr else await self.master_addrs(cluster)
        body = SubscriptionGroupList(group_config_list=list(configs)).encode()
        for addr in addrs:
            await self.instance.call(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST, None, body)
        return addrs

    async def set_message_request_mode(
        self,
        topic: str,
        group: str,
        mode: str,
        *,
        pop_share_queue_num: int = 0,
        cluster: str | None = None,
        broker_addr: str | None = None,
    ) -> list[str]:
        """How ``group`` reads ``topic`` when its consumers let the broker assign queues
        (RocketMQ 5's ``setConsumeMode``): ``"PULL"`` or ``"POP"``, POP sharing
        ``pop_share_queue_num`` other clients' queues (0: every queue). The masters' addresses."""
        if mode not in ("PULL", "POP"):
            raise ValueError(f"mode must be PULL or POP, not {mode!r}")
        addrs = [broker_addr] if broker_addr else await self.master_addrs(cluster)
        body = json.dumps(
            {"consumerGroup": group, "mode": mode, "popShareQueueNum": pop_share_queue_num, "topic": topic}
        ).encode()
        for addr in addrs:
            await self.instance.call(addr, RequestCode.SET_MESSAGE_REQUEST_MODE, None, body)
        return addrs

    async def message_request_modes(self, broker_addr: str) -> dict[str, dict[str, dict[str, Any]]]:
        """Every mode a broker keeps: topic -> group -> setting (GET_ALL_MESSAGE_REQUEST_MODE)."""
        response = await self.instance.call(broker_addr, RequestCode.GET_ALL_MESSAGE_REQUEST_MODE)
        table = fastjson.loads(response.body or b"{}").get("messageRequestModeMap") or {}
        return {str(t): dict(groups) for t, groups in table.items()}

    async def delete_subscription_group(
        self,
        group: str,
        *,
        cluster: str | None = None,
        broker_addr: str | None = None,
        remove_offsets: bool = False,
    ) -> None:
        """Delete a consumer group's settings from every master (of ``cluster``, or only
        ``broker_addr``); with ``remove_offsets`` its committed offsets there go too."""
        header = DeleteSubscriptionGroupRequestHeader(group_name=group, remove_offset=remove_offsets)
        addrs = [broker_addr] if broker_addr else await self.master_addrs(cluster)
        for addr in addrs:
            await self.instance.call(addr, RequestCode.DELETE_SUBSCRIPTIONGROUP, header)

    # -- consumption ----------------------------------------------------------------------

    async def consume_stats(self, group: str, topic: str | None = None) -> ConsumeStats:
        """Broker offset, consumer offset and last consumed time per queue, all brokers merged."""
        addrs = await self._group_brokers(group, topic)
        merged = ConsumeStats()
        found = False
        header = GetConsumeStatsRequestHeader(consumer_group=group, topic=topic)
        for addr in addrs:
            try:
                response = await self.instance.call(addr, RequestCode.GET_CONSUME_STATS, header)
            except BrokerError as exc:
                if exc.code == ResponseCode.CONSUMER_NOT_ONLINE:
                    continue
                raise
            stats = ConsumeStats.decode(response.body)
            merged.offset_table.update(stats.offset_table)
            merged.consume_tps += stats.consume_tps
            found = True
        if not found:
            raise ClientError(f"no broker knows consumer group {group!r}")
        merged.offset_table = dict(sorted(merged.offset_table.items()))
        return merged

    async def consumer_lag(self, group: str, topic: str | None = None) -> int:
        """Messages stored but not yet consumed by ``group`` (on ``topic``, or all its topics)."""
        return (await self.consume_stats(group, topic)).diff_total()

    async def _group_brokers(self, group: str, topic: str | None) -> list[str]:
        if topic is not None:
            return sorted((await self._route_masters(topic)).values())
        return await self.master_addrs()

    async def consumer_connections(self, group: str, *, broker_addr: str | None = None) -> ConsumerConnection:
        """The connected members of ``group``, their subscriptions and consume settings, as
        the first master that has the group online knows them (or as ``broker_addr`` does:
        then a broker's refusal, such as the group not being online there, is raised as is)."""
        header = GetConsumerConnectionListRequestHeader(consumer_group=group)
        if broker_addr:
            response = await self.instance.call(broker_addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, header)
            return ConsumerConnection.decode(response.body)
        last: MQError | None = None
        for addr in await self.master_addrs():
            try:
                response = await self.instance.call(addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, header)
            except BrokerError as exc:
                last = exc
                continue
            return ConsumerConnection.decode(response.body)
        raise ClientError(f"consumer group {group!r} is not online") from last

    async def producer_connections(self, group: str) -> ProducerConnection:
        """The connected producers of ``group``, over every master."""
        merged = ProducerConnection()
        header = GetProducerConnectionListRequestHeader(producer_group=group)
        for addr in await self.master_addrs():
            response = await self.instance.call(addr, RequestCode.GET_PRODUCER_CONNECTION_LIST, header)
            merged.connection_set.extend(ProducerConnection.decode(response.body).connection_set)
        return merged

    async def reset_offset_by_time(
        self, group: str, topic: str, timestamp: float, *, force: bool = True
    ) -> dict[MessageQueue, int]:
        """Move ``group``'s offsets on ``topic`` to the first message stored at or after
        ``timestamp`` (seconds since the epoch; -1 for the end); online members adopt them.
        Without ``force`` an offset only moves backwards."""
        millis = -1 if timestamp < 0 else int(timestamp * 1000)
        header = ResetOffsetRequestHeader(topic=topic, group=group, timestamp=millis, is_force=force)
        offsets: dict[MessageQueue, int] = {}
        for addr in (await self._route_masters(topic)).values():
            response = await self.instance.call(addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, header)
            if response.body:
                offsets.update(ResetOffsetBody.decode(response.body).offset_table)
        return dict(sorted(offsets.items()))

    async def committed_offset(self, group: str, queue: MessageQueue) -> int:
        """``group``'s committed offset of ``queue``; -1 when it has none."""
        addr = await self.instance.find_broker_addr(queue.broker_name, topic=queue.topic)
        try:
            response = await self.instance.call(
                addr,
                RequestCode.QUERY_CONSUMER_OFFSET,
                QueryConsumerOffsetRequestHeader(
                    consumer_group=group, topic=queue.topic, queue_id=queue.queue_id
                ),
            )
        except QueryNotFoundError:
            return -1
        return QueryConsumerOffsetResponseHeader.from_fields(response.ext_fields).offset

    async def update_consumer_offset(self, group: str, queue: MessageQueue, offset: int) -> None:
        """Set ``group``'s committed offset of ``queue``."""
        addr = await self.instance.find_broker_addr(queue.broker_name, topic=queue.topic)
        await self.instance.call(
            addr,
            RequestCode.UPDATE_CONSUMER_OFFSET,
            UpdateConsumerOffsetRequestHeader(
                consumer_group=group, topic=queue.topic, queue_id=queue.queue_id, commit_offset=offset
            ),
        )

    # -- queue offsets --------------------------------------------------------------------

    async def max_offset(self, queue: MessageQueue) -> int:
        """The offset the next message of ``queue`` will get."""
        return await queue_offset(self.instance, queue, RequestCode.GET_MAX_OFFSET)

    async def min_offset(self, queue: MessageQueue) -> int:
        return await queue_offset(self.instance, queue, RequestCode.GET_MIN_OFFSET)

    async def search_offset(self, queue: MessageQueue, timestamp: float) -> int:
        """The offset of the message stored closest to ``timestamp`` (seconds since the epoch)."""
        return await search_offset(self.instance, queue, int(timestamp * 1000))

    async def earliest_store_time(self, queue: MessageQueue) -> float:
        """Store time (seconds since the epoch) of the oldest message of ``queue``; -1 if empty."""
        addr = await self.instance.find_broker_addr(queue.broker_name, topic=queue.topic)
        response = await self.instance.call(
            addr,
            RequestCode.GET_EARLIEST_MSG_STORETIME,
            GetEarliestMsgStoretimeRequestHeader(topic=queue.topic, queue_id=queue.queue_id),
        )
        millis = GetEarliestMsgStoretimeResponseHeader.from_fields(response.ext_fields).timestamp
        return millis / 1000 if millis >= 0 else -1.0

    # -- messages -------------------------------------------------------------------------

    async def view_message(self, offset_msg_id: str) -> MessageExt:
        """The message an offset msgId (the broker's id, ``SendResult.offset_msg_id``) names."""
        addr, offset = decode_offset_msg_id(offset_msg_id)
        response = await self.instance.call(
            addr,
            RequestCode.VIEW_MESSAGE_BY_ID,
            ViewMessageRequestHeader(offset=offset),
            timeout=QUERY_TIMEOUT,
        )
        messages = decode_records(response.body)
        if not messages:
            raise QueryNotFoundError(f"no message at {offset_msg_id}")
        return messages[0]

    async def _query(
        self, topic: str, key: str, *, unique: bool, max_num: int, begin: float, end: float | None
    ) -> list[MessageExt]:
        header = QueryMessageRequestHeader(
            topic=topic,
            key=key,
            max_num=max_num,
            begin_timestamp=int(begin * 1000),
            end_timestamp=int((time.time() + 1 if end is None else end) * 1000),
            unique_key_query=unique,
        )
        masters = await self._route_masters(topic)

        async def ask(addr: str) -> list[MessageExt]:
            try:
                response = await self.instance.call(
                    addr, RequestCode.QUERY_MESSAGE, header, timeout=QUERY_TIMEOUT
                )
            except QueryNotFoundError:
                return []
            return decode_records(response.body)

        found: list[MessageExt] = []
        for name, messages in zip(masters, await asyncio.gather(*(ask(a) for a in masters.values()))):
            for msg in messages:
                msg.broker_name = name
            found.extend(messages)
        if unique:
            found = [m for m in found if m.properties.get("UNIQ_KEY") == key]
        else:
            found = [m for m in found if key in m.keys]
        found.sort(key=lambda m: (m.store_timestamp, m.queue_id, m.queue_offset))
        return found[:max_num] if not unique else found

    async def query_messages_by_key(
        self, topic: str, key: str, *, max_num: int = 32, begin: float = 0, end: float | None = None
    ) -> list[MessageExt]:
        """Messages of ``topic`` with ``key`` among their keys, stored between ``begin`` and
        ``end`` (seconds since the epoch; default: all)."""
        return await self._query(topic, key, unique=False, max_num=max_num, begin=begin, end=end)

    async def query_message_by_id(self, topic: str, msg_id: str) -> MessageExt:
        """A message of ``topic`` by its client unique id (``SendResult.msg_id``) or by the
        broker's offset msgId (``SendResult.offset_msg_id``)."""
        found = await self._query(topic, msg_id, unique=True, max_num=32, begin=0, end=None)
        if found:
            return found[-1]
        with contextlib.suppress(MQError, ValueError):
            msg = await self.view_message(msg_id)
            if msg.topic == topic or msg.properties.get("REAL_TOPIC") == topic:
                return msg
        raise QueryNotFoundError(f"no message {msg_id} in topic {topic!r}")

    # -- name-server KV config ------------------------------------------------------------

    async def update_kv_config(self, namespace: str, key: str, value: str) -> None:
        """Create or update a KV config entry on every name server (they share nothing)."""
        header = PutKVConfigRequestHeader(namespace=namespace, key=key, value=value)
        for addr in self.instance.namesrv_addrs:
            await self.instance.call(addr, RequestCode.PUT_KV_CONFIG, header)

    async def kv_config(self, namespace: str, key: str) -> str | None:
        """A KV config value, as the first name server that answers has it; None if it has none."""
        header = GetKVConfigRequestHeader(namespace=namespace, key=key)
        try:
            response = await self.instance.call_namesrv(RequestCode.GET_KV_CONFIG, header)
        except QueryNotFoundError:
            return None
        return GetKVConfigResponseHeader.from_fields(response.ext_fields).value

    async def delete_kv_config(self, namespace: str, key: str) -> None:
        """Delete a KV config entry from every name server (deleting a missing one succeeds)."""
        header = DeleteKVConfigRequestHeader(namespace=namespace, key=key)
        for addr in self.instance.namesrv_addrs:
            await self.instance.call(addr, RequestCode.DELETE_KV_CONFIG, header)

    # -- brokers --------------------------------------------------------------------------

    async def broker_runtime_info(self, broker_addr: str) -> dict[str, str]:
        response = await self.instance.call(broker_addr, RequestCode.GET_BROKER_RUNTIME_INFO)
        return dict(KVTable.decode(response.body).table)

    async def broker_config(self, broker_addr: str) -> dict[str, str]:
        response = await self.instance.call(broker_addr, RequestCode.GET_BROKER_CONFIG)
        return read_properties(response.body.decode())

    async def trigger_delete_files(self, broker_addr: str) -> str:
        """Make the broker at ``broker_addr`` run its commit-log retention now rather than at
        its ``deleteWhen`` hour (TRIGGER_DELETE_FILES); returns the broker's remark. Ours
        deletes at once every commit-log file but the one being written, expired or not, with
        the consume-queue and index files that pointed into them, and says how many; a Java
        broker deletes only expired files, in the background, and says nothing."""
        response = await self.instance.call(broker_addr, RequestCode.TRIGGER_DELETE_FILES)
        return response.remark or ""

    # -- ACL (RocketMQ 4.9's plain ACL requests; admin accounts only on our brokers) ---------

    async def update_acl_config(
        self,
        broker_addr: str,
        access_key: str,
        *,
        secret_key: str | None = None,
        white_remote_address: str | None = None,
        admin: bool = False,
        default_topic_perm: str | None = None,
        default_group_perm: str | None = None,
        topic_perms: Iterable[str] | None = None,
        group_perms: Iterable[str] | None = None,
    ) -> None:
        """Create or update an ACL account on one broker (UPDATE_AND_CREATE_ACL_CONFIG);
        perms are ``name=PERM`` (PERM: DENY, PUB, SUB, PUB|SUB)."""
        header = CreateAccessConfigRequestHeader(
            access_key=access_key,
            secret_key=secret_key,
            white_remote_address=white_remote_address,
            admin=admin,
            default_topic_perm=default_topic_perm,
            default_group_perm=default_group_perm,
            topic_perms=",".join(topic_perms) if topic_perms is not None else None,
            group_perms=",".join(group_perms) if group_perms is not None else None,
        )
        await self.instance.call(broker_addr, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, header.to_fields())

    async def delete_acl_config(self, broker_addr: str, access_key: str) -> None:
        """Delete an ACL account on one broker (DELETE_ACL_CONFIG)."""
        header = DeleteAccessConfigRequestHeader(access_key=access_key)
        await self.instance.call(broker_addr, RequestCode.DELETE_ACL_CONFIG, header.to_fields())

    async def update_global_white_addrs(
        self, broker_addr: str, patterns: Iterable[str], *, acl_file: str | None = None
    ) -> None:
        """Replace a broker's global white list (UPDATE_GLOBAL_WHITE_ADDRS_CONFIG)."""
        header = UpdateGlobalWhiteAddrsConfigRequestHeader(
            global_white_addrs=",".join(patterns), acl_file_full_path=acl_file
        )
        await self.instance.call(
            broker_addr, RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, header.to_fields()
        )

    async def acl_config_version(self, broker_addr: str) -> GetBrokerAclConfigResponseHeader:
        """A broker's ACL data versions (GET_BROKER_CLUSTER_ACL_INFO)."""
        response = await self.instance.call(broker_addr, RequestCode.GET_BROKER_CLUSTER_ACL_INFO, {})
        return GetBrokerAclConfigResponseHeader.from_fields(response.ext_fields)

    async def acl_config(self, broker_addr: str) -> dict[str, Any]:
        """A broker's ACL rules, secrets included (GET_BROKER_CLUSTER_ACL_CONFIG)."""
        response = await self.instance.call(broker_addr, RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG, {})
        data = fastjson.loads(response.body)
        if not isinstance(data, dict):
            raise ClientError("GET_BROKER_CLUSTER_ACL_CONFIG answered something other than an object")
        return data


def _is_set(
    queue: QueueData, read_queue_nums: int | None, write_queue_nums: int | None, perm: int | None
) -> bool:
    """Whether a route's queue data has these settings (None: any)."""
    return (
        (read_queue_nums is None or queue.read_queue_nums == read_queue_nums)
        and (write_queue_nums is None or queue.write_queue_nums == write_queue_nums)
        and (perm is None or queue.perm == perm)
    )
