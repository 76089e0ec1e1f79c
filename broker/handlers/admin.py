"""Administration requests an operator tool needs: topics, subscription groups, runtime
info, topic and consume statistics, offsets, connections, offset resets, broker config."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from aiorocketmq.broker.store import MessageStore, StoreConfig
from aiorocketmq.protocol import topic_attributes
from aiorocketmq.protocol.body import (
    ConnectionInfo,
    ConsumerConnection,
    ConsumeStats,
    CreateTopicListBody,
    GroupList,
    KVTable,
    MessageQueue,
    OffsetWrapper,
    ProducerConnection,
    ResetOffsetBody,
    SubscriptionGroupConfig,
    SubscriptionGroupList,
    TopicConfig,
    TopicList,
    TopicOffset,
    TopicStatsTable,
)
from aiorocketmq.protocol.codes import RequestCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.controller import (
    ControllerRequestCode,
    EpochEntryCache,
    NotifyBrokerRoleChangedRequestHeader,
    SyncStateSet,
)
from aiorocketmq.protocol.errors import (
    ConsumerNotOnlineError,
    InvalidParameterError,
    ServerSystemError,
    SubscriptionGroupNotExistError,
    TopicNotExistError,
)
from aiorocketmq.protocol.headers import (
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumeStatsRequestHeader,
    GetProducerConnectionListRequestHeader,
    GetTopicStatsInfoRequestHeader,
    QueryTopicConsumeByWhoRequestHeader,
    ResetOffsetRequestHeader,
)
from aiorocketmq.protocol.names import (
    AUTO_CREATE_TOPIC,
    BENCHMARK_TOPIC,
    NOT_ALLOWED_SEND_TOPICS,
    topic_name_problem,
)
from aiorocketmq.protocol.settings import read_properties
from aiorocketmq.protocol.static_topic import TopicConfigAndQueueMapping
from aiorocketmq.protocol.transport import Connection, Handler

from ..clients import ClientChannel, ClientRegistry
from ..config import BrokerConfig
from ..groups import GroupTable
from ..offsets import OffsetTable
from ..static_topics import StaticTopicTable
from ..timers import TimerStore
from ..topics import TopicTable
from . import text_field, topic_config_of

if TYPE_CHECKING:
    from ..replicas import ReplicasManager

RESERVED_TOPICS = NOT_ALLOWED_SEND_TOPICS | {AUTO_CREATE_TOPIC, BENCHMARK_TOPIC}


#: The read bit of RocketMQ 5's group forbidden table (``PermName.INDEX_PERM_READ``).
_READ_BIT = 2


class AdminHandlers:
    def __init__(
        self,
        config: BrokerConfig,
        *,
        store_config: StoreConfig,
        store: MessageStore,
        topics: TopicTable,
        groups: GroupTable,
        offsets: OffsetTable,
        clients: ClientRegistry,
        runtime_info: Callable[[], dict[str, str]],
        delay_offsets: Callable[[], bytes],
        register: Callable[[], Awaitable[None]],
        timers: TimerStore,
        ha_status: Callable[[], dict[str, object]] | None = None,
        static_topics: StaticTopicTable | None = None,
        static_changed: Callable[[], None] | None = None,
        consumer_tps: Callable[[str, str], float] | None = None,
    ) -> None:
        """``runtime_info()`` is the broker's GET_BROKER_RUNTIME_INFO table,
        ``delay_offsets()`` its ``delayOffset.json`` and ``register()`` registers the broker
        with every name server now; ``consumer_tps(group, topic)`` is the rate the metrics
        endpoint reports as ``rocketmq_consumer_tps``."""
        self.config = config
        self.store_config = store_config
        self.store = store
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.clients = clients
        self._runtime_info = runtime_info
        self._delay_offsets = delay_offsets
        self._register = register
        self.timers = timers
        self._ha_status = ha_status
        self.static_topics = static_topics
        self._static_changed = static_changed
        self._consumer_tps = consumer_tps or (lambda group, topic: 0.0)

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.create_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: self.all_topic_config,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_group,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: self.delete_group,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.all_groups,
            RequestCode.GET_BROKER_RUNTIME_INFO: self.runtime_info,
            RequestCode.GET_TOPIC_STATS_INFO: self.topic_stats,
            RequestCode.GET_CONSUME_STATS: self.consume_stats,
            RequestCode.GET_ALL_CONSUMER_OFFSET: self.all_consumer_offsets,
            RequestCode.GET_ALL_DELAY_OFFSET: self.all_delay_offsets,
            RequestCode.GET_BROKER_CONFIG: self.broker_config,
            RequestCode.UPDATE_BROKER_CONFIG: self.update_broker_config,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.consumer_connections,
            RequestCode.GET_PRODUCER_CONNECTION_LIST: self.producer_connections,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset,
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: self.consumed_by,
            RequestCode.TRIGGER_DELETE_FILES: self.delete_files,
            RequestCode.UPDATE_AND_CREATE_TOPIC_LIST: self.create_topics,
            RequestCode.CHECK_ROCKSDB_CQ_WRITE_PROGRESS: self.check_rocksdb,
            RequestCode.EXPORT_ROCKSDB_CONFIG_TO_JSON: self.export_rocksdb,
            RequestCode.QUERY_CONSUME_TIME_SPAN: self.consume_time_span,
            RequestCode.UPDATE_AND_GET_GROUP_FORBIDDEN: self.group_forbidden,
            RequestCode.GET_TOPIC_CONFIG: self.topic_config,
            RequestCode.GET_TIMER_CHECK_POINT: self.timer_checkpoint,
            RequestCode.GET_BROKER_HA_STATUS: self.broker_ha_status,
            RequestCode.RESET_MASTER_FLUSH_OFFSET: self.reset_master_flush_offset,
            RequestCode.GET_TIMER_METRICS: self.timer_metrics,
            RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG: self.group_config,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST: self.update_groups,
            RequestCode.QUERY_TOPICS_BY_CONSUMER: self.topics_by_consumer,
            RequestCode.QUERY_SUBSCRIPTION_BY_CONSUMER: self.subscription_by_consumer,
        }

    # -- topics ---------------------------------------------------------------------------

    async def create_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = CreateTopicRequestHeader.from_fields(cmd.ext_fields)
        config = topic_config_of(h)
        try:
            modification = topic_attributes.parse_modification(h.attributes)
        except topic_attributes.AttributeRefused as exc:
            raise ServerSystemError(str(exc)) from None
        self._check_topic(config, modification)
        self.topics.put(config)
        # Like Apache's broker, answer once the name servers have the new route: a client that
        # looks the topic up right after creating it must find it.
        await self._register()
        return cmd.response()

    async def create_topics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """UPDATE_AND_CREATE_TOPIC_LIST (RocketMQ 5): every topic checked before any is created."""
        configs = CreateTopicListBody.decode(cmd.body).topic_config_list
        for config in configs:  # each carries its attribute modification, keys signed
            self._check_topic(config, config.attributes)
        for config in configs:
            self.topics.put(config)
        await self._register()
        return cmd.response()

    def _check_topic(self, config: TopicConfig, modification: dict[str, str]) -> None:
        """Refuse what cannot be created; set ``config.attributes`` to what the topic's
        attributes become with ``modification`` applied to the current ones."""
        # RocketMQ 5 answers these INVALID_PARAMETER (4.9 answered SYSTEM_ERROR)
        problem = topic_name_problem(config.topic_name)
        if problem is not None:
            raise InvalidParameterError(problem)
        if config.topic_name in RESERVED_TOPICS or config.topic_name == self.config.broker_cluster_name:
            raise InvalidParameterError(
                f"The topic[{config.topic_name}] is conflict with system reserved words."
            )
        if config.read_queue_nums <= 0 or config.write_queue_nums <= 0:
            raise ServerSystemError("queue numbers must be positive")
        if topic_attributes.sets_mixed(modification) and not self.config.enable_mixed_message_type:
            raise InvalidParameterError("MIXED message type is not supported.")
        current = self.topics.get(config.topic_name)
        try:
            config.attributes = topic_attributes.apply(
                None if current is None else current.attributes, modification
            )
        except topic_attributes.AttributeRefused as exc:
            raise ServerSystemError(str(exc)) from None

    def delete_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = DeleteTopicRequestHeader.from_fields(cmd.ext_fields)
        if h.topic in RESERVED_TOPICS:
            raise ServerSystemError(f"The topic[{h.topic}] is a system topic")
        self.topics.delete(h.topic)
        if self.static_topics is not None and self.static_topics.delete(h.topic) and self._static_changed:
            self._static_changed()
        self.store.delete_topic(h.topic)
        self.offsets.delete_topic(h.topic)
        return cmd.response()

    def all_topic_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=self.topics.encode())

    def topic_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_TOPIC_CONFIG (RocketMQ 5): one topic's config, as ``mqadmin`` 5 reads it."""
        topic = text_field(cmd.ext_fields, "topic")
        config = self.topics.get(topic)
        if config is None:
            raise TopicNotExistError(f"No topic in this broker. topic: {topic}")
        # A static topic's mapping comes with it when asked for (``lo``), as mqadmin 5 asks.
        detail = self.static_topics.details.get(topic) if self.static_topics is not None else None
        if detail is not None and str((cmd.ext_fields or {}).get("lo", "")).lower() == "true":
            with_mapping = TopicConfigAndQueueMapping(**config.model_dump(), mapping_detail=detail)
            return cmd.response(body=with_mapping.encode())
        return cmd.response(body=config.encode())

    def check_rocksdb(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """CHECK_ROCKSDB_CQ_WRITE_PROGRESS compares a RocksDB consume queue with the file one;
        this broker keeps only the file one, so there is nothing to compare."""
        raise ServerSystemError("this broker keeps no RocksDB consume queue (storeType is file only)")

    def export_rocksdb(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """EXPORT_ROCKSDB_CONFIG_TO_JSON: Apache exports only tables kept in RocksDB and answers
        "export done." with none; ours are all JSON files already."""
        return cmd.response(remark="export done.")

    def broker_ha_status(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_HA_STATUS (RocketMQ 5, ``mqadmin haStatus``): this broker's replication."""
        if self._ha_status is None:
            raise ServerSystemError("no replication status on this broker")
        return cmd.response(body=json.dumps(self._ha_status()).encode())

    def reset_master_flush_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """RESET_MASTER_FLUSH_OFFSET (RocketMQ 5, ``mqadmin resetMasterFlushOffset``): Apache's
        slaves keep the master's flushed offset for controller-mode recovery; ours recover from
        their own commit log, so there is nothing to reset (Apache answers SUCCESS on a master
        alike)."""
        return cmd.response()

    def timer_checkpoint(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=self.timers.checkpoint_record())

    def timer_metrics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=self.timers.metrics())

    def consume_time_span(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """QUERY_CONSUME_TIME_SPAN (``mqadmin queryConsumeTimeSpan``): per queue, when its
        oldest and newest messages were stored, when the group's last consumed one was, and
        how long the next one has waited."""
        topic, group = text_field(cmd.ext_fields, "topic"), text_field(cmd.ext_fields, "group")
        config = self.topics.get(topic)
        if config is None:
            raise TopicNotExistError(f"topic[{topic}] not exist")
        store = self.store
        now = int(time.time() * 1000)
        spans = []
        for queue_id in range(config.write_queue_nums):
            oldest = store.get_earliest_store_time(topic, queue_id)
            end = store.get_max_offset(topic, queue_id)
            consumed = self.offsets.query(group, topic, queue_id)
            span: dict[str, object] = {
                "messageQueue": MessageQueue(
                    topic=topic, broker_name=self.config.broker_name, queue_id=queue_id
                ).to_wire(),
                "minTimeStamp": oldest,
                "maxTimeStamp": store.get_store_time(topic, queue_id, end - 1),
                "consumeTimeStamp": store.get_store_time(topic, queue_id, consumed - 1)
                if consumed > 0
                else oldest,
                "delayTime": 0,
            }
            if consumed < end:
                span["delayTime"] = now - store.get_store_time(topic, queue_id, max(consumed, 0))
            spans.append(span)
        return cmd.response(body=json.dumps({"consumeTimeSpanSet": spans}).encode())

    def topic_stats(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetTopicStatsInfoRequestHeader.from_fields(cmd.ext_fields)
        config = self.topics.get(h.topic)
        if config is None:
            raise TopicNotExistError(f"topic[{h.topic}] not exist")
        store = self.store
        table = {}
        for queue_id in range(config.write_queue_nums):
            max_offset = store.get_max_offset(h.topic, queue_id)
            last = store.get_store_time(h.topic, queue_id, max_offset - 1) if max_offset > 0 else 0
            table[MessageQueue(topic=h.topic, broker_name=self.config.broker_name, queue_id=queue_id)] = (
                TopicOffset(
                    min_offset=store.get_min_offset(h.topic, queue_id),
                    max_offset=max_offset,
                    last_update_timestamp=max(0, last),
                )
            )
        return cmd.response(body=TopicStatsTable(offset_table=table).encode())

    # -- groups ---------------------------------------------------------------------------

    def update_group(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = SubscriptionGroupConfig.decode(cmd.body)
        _check_group_attributes(group)
        self.groups.put(group)
        return cmd.response()

    def delete_group(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = DeleteSubscriptionGroupRequestHeader.from_fields(cmd.ext_fields)
        self.groups.delete(h.group_name)
        if h.remove_offset:
            self.offsets.delete_group(h.group_name)
        return cmd.response()

    def all_groups(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=self.groups.encode())

    def group_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_SUBSCRIPTIONGROUP_CONFIG (RocketMQ 5); found as a pull finds it, so created on
        first sight when ``autoCreateSubscriptionGroup`` is on, as Apache does."""
        group = self.groups.find(text_field(cmd.ext_fields, "group"))
        if group is None:
            raise SubscriptionGroupNotExistError("No group in this broker")
        return cmd.response(body=group.encode())

    def update_groups(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST (RocketMQ 5): many groups in one request."""
        groups = SubscriptionGroupList.decode(cmd.body).group_config_list
        for group in groups:
            _check_group_attributes(group)
        for group in groups:
            self.groups.put(group)
        return cmd.response()

    def group_forbidden(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """UPDATE_AND_GET_GROUP_FORBIDDEN (RocketMQ 5): forbid or allow a group to read a
        topic (``readable`` given), and say whether it may."""
        group, topic = text_field(cmd.ext_fields, "group"), text_field(cmd.ext_fields, "topic")
        readable = (cmd.ext_fields or {}).get("readable")
        if readable is not None:
            self.groups.set_forbidden(group, topic, _READ_BIT, str(readable).lower() != "true")
        allowed = not self.groups.is_forbidden(group, topic, _READ_BIT)
        body = json.dumps({"group": group, "readable": allowed, "topic": topic}).encode()
        return cmd.response(remark="", body=body)

    def topics_by_consumer(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """QUERY_TOPICS_BY_CONSUMER (RocketMQ 5): the topics a group has offsets for here."""
        topics = self.offsets.topics_of_group(text_field(cmd.ext_fields, "group"))
        return cmd.response(
            body=TopicList(topic_list=sorted(topics), broker_addr=self.config.broker_addr).encode()
        )

    def subscription_by_consumer(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """QUERY_SUBSCRIPTION_BY_CONSUMER (RocketMQ 5): a live group's subscription to a topic
        (none when no client of the group subscribes to it now)."""
        group, topic = text_field(cmd.ext_fields, "group"), text_field(cmd.ext_fields, "topic")
        info = self.clients.consumer_group(group)
        found = info.subscriptions.get(topic) if info is not None else None
        body: dict[str, object] = {"group": group, "topic": topic}
        if found is not None:
            body["subscriptionData"] = found.to_wire()
        return cmd.response(body=json.dumps(body).encode())

    # -- statistics -----------------------------------------------------------------------

    def runtime_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_RUNTIME_INFO under RocketMQ's key names (what ``mqadmin clusterList`` and
        ``brokerStatus`` show), plus a few of our own."""
        return cmd.response(body=KVTable(table=self._runtime_info()).encode())

    def consume_stats(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetConsumeStatsRequestHeader.from_fields(cmd.ext_fields)
        group = h.consumer_group
        topics = set(self.offsets.topics_of_group(group))
        info = self.clients.consumer_group(group)
        if info is not None:
            topics.update(info.subscriptions)
        if h.topic:
            topics &= {h.topic}
        table = {}
        store = self.store
        consume_tps = 0.0
        for topic in sorted(topics):
            config = self.topics.get(topic)
            if config is None:
                continue
            # As RocketMQ's broker: the group's pull rate summed over the topics reported.
            consume_tps += self._consumer_tps(group, topic)
            for queue_id in range(config.read_queue_nums):
                consumer_offset = max(0, self.offsets.query(group, topic, queue_id))
                last = (
                    store.get_store_time(topic, queue_id, consumer_offset - 1) if consumer_offset > 0 else 0
                )
                table[MessageQueue(topic=topic, broker_name=self.config.broker_name, queue_id=queue_id)] = (
                    OffsetWrapper(
                        broker_offset=store.get_max_offset(topic, queue_id),
                        consumer_offset=consumer_offset,
                        # Pulls are not tracked apart from commits here: nothing counts as in flight.
                        pull_offset=consumer_offset,
                        last_timestamp=max(0, last),
                    )
                )
        if not table and info is None:
            raise ConsumerNotOnlineError(f"the consumer group[{group}] has no offsets on this broker")
        return cmd.response(body=ConsumeStats(offset_table=table, consume_tps=consume_tps).encode())

    def all_consumer_offsets(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=self.offsets.encode_snapshot())

    def all_delay_offsets(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=self._delay_offsets())

    def broker_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        text = self.config.to_properties() + self.store_config.to_properties()
        # Secrets (fields declared repr=False: key passwords, haAuthSecretKey) are listed but
        # not served: without ACL anyone who reaches this port may ask for the listing.
        fields = type(self.config).model_fields.items()
        hidden = tuple(f"{info.alias or name}=" for name, info in fields if not info.repr)
        text = "".join(
            f"{line.partition('=')[0]}=******\n"
            if line.startswith(hidden) and line.partition("=")[2].strip()
            else line
            for line in text.splitlines(keepends=True)
        )
        # Apache's listing includes its remoting client's switch (``tls.enable``) as useTLS,
        # which tools such as ``mqadmin exportConfigs`` read.
        text += f"useTLS={'true' if self.config.tls_enable else 'false'}\n"
        version = self.topics.data_version.encode().decode()
        return cmd.response(ext_fields={"version": version}, body=text.encode())

    def update_broker_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """UPDATE_BROKER_CONFIG (``mqadmin updateBrokerConfig``): the body's ``key=value`` lines
        are applied in memory to the keys this broker knows; others are ignored, as Apache does."""
        updates = read_properties((cmd.body or b"").decode())
        for settings in (self.config, self.store_config):
            fields = {info.alias or name: name for name, info in type(settings).model_fields.items()}
            for key, value in updates.items():
                if key in fields:
                    try:
                        setattr(settings, fields[key], value)
                    except ValueError as exc:
                        raise ServerSystemError(f"{key}={value}: {exc}") from None
        return cmd.response()

    # -- connections ----------------------------------------------------------------------

    def consumer_connections(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetConsumerConnectionListRequestHeader.from_fields(cmd.ext_fields)
        group = self.clients.consumer_group(h.consumer_group)
        if group is None:
            raise ConsumerNotOnlineError(f"the consumer group[{h.consumer_group}] not online")
        body = ConsumerConnection(
            connection_set=_connections(group.channels.values()),
            subscription_table=dict(group.subscriptions),
            consume_type=group.consume_type,
            message_model=group.message_model,
            consume_from_where=group.consume_from_where,
        )
        return cmd.response(body=body.encode())

    def producer_connections(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetProducerConnectionListRequestHeader.from_fields(cmd.ext_fields)
        channels = self.clients.producer_channels(h.producer_group)
        body = ProducerConnection(connection_set=_connections(channels))
        return cmd.response(body=body.encode())

    def consumed_by(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = QueryTopicConsumeByWhoRequestHeader.from_fields(cmd.ext_fields)
        groups = set(self.offsets.groups_of_topic(h.topic))
        groups.update(g.name for g in self.clients.groups_subscribing(h.topic))
        return cmd.response(body=GroupList(group_list=sorted(groups)).encode())

    # -- offsets --------------------------------------------------------------------------

    def reset_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Move a group's offsets on a topic to the first message stored at or after a time
        (``timestamp`` -1: the end), and tell its online members to adopt them."""
        h = ResetOffsetRequestHeader.from_fields(cmd.ext_fields)
        config = self.topics.get(h.topic)
        if config is None:
            raise TopicNotExistError(f"topic[{h.topic}] not exist")
        table = {}
        store = self.store
        for queue_id in range(config.read_queue_nums):
            if h.timestamp < 0:
                target = store.get_max_offset(h.topic, queue_id)
            else:
                target = store.get_offset_by_time(h.topic, queue_id, h.timestamp)
            current = self.offsets.query(h.group, h.topic, queue_id)
            if h.is_force or current < 0 or target < current:
                self.offsets.commit(h.group, h.topic, queue_id, target)
            else:
                target = current
            table[MessageQueue(topic=h.topic, broker_name=self.config.broker_name, queue_id=queue_id)] = (
                target
            )
        body = ResetOffsetBody(offset_table=table).encode()
        group = self.clients.consumer_group(h.group)
        if group is not None:
            notify = ResetOffsetRequestHeader(
                topic=h.topic, group=h.group, timestamp=h.timestamp, is_force=h.is_force
            )
            for member in list(group.channels):
                if not member.closed:
                    member.send_oneway(
                        RemotingCommand.request(
                            RequestCode.RESET_CONSUMER_CLIENT_OFFSET, notify.to_fields(), body
                        )
                    )
        return cmd.response(body=body)

    def delete_files(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        deleted = self.store.delete_expired_files(force=True)
        return cmd.response(remark=f"{deleted} commit log files deleted")


def _connections(channels: Iterable[ClientChannel]) -> list[ConnectionInfo]:
    """The clients' connections as the connection-list bodies describe them."""
    return [
        ConnectionInfo(
            client_id=ch.client_id, client_addr=ch.conn.address, language=ch.language, version=ch.version
        )
        for ch in channels
    ]


def _check_group_attributes(group: SubscriptionGroupConfig) -> None:
    """RocketMQ 5 defines no subscription-group attribute: any change names an unknown key."""
    for signed in group.attributes:
        raise ServerSystemError(f"unsupported key: {signed.lstrip('+-')}")


class ControllerModeHandlers:
    """RocketMQ 5's controller-mode requests to a broker: NOTIFY_BROKER_ROLE_CHANGED (from the
    controllers) and GET_BROKER_EPOCH_CACHE (``mqadmin getBrokerEpoch``). Outside controller
    mode Apache's broker answers a notification with SUCCESS and the epoch cache with
    SYSTEM_ERROR; so does this one."""

    def __init__(
        self, config: BrokerConfig, *, store: MessageStore, replicas: ReplicasManager | None
    ) -> None:
        self.config = config
        self.store = store
        self.replicas = replicas

    def handlers(self) -> dict[int, Handler]:
        return {
            ControllerRequestCode.NOTIFY_BROKER_ROLE_CHANGED: self.role_changed,
            ControllerRequestCode.GET_BROKER_EPOCH_CACHE: self.epoch_cache,
        }

    async def role_changed(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header = NotifyBrokerRoleChangedRequestHeader.from_fields(cmd.ext_fields)
        members = SyncStateSet.decode(cmd.body) if cmd.body else SyncStateSet()
        if self.replicas is not None:
            await self.replicas.change_broker_role(
                header.master_broker_id,
                header.master_address,
                header.master_epoch,
                header.sync_state_set_epoch,
                members.sync_state_set,
            )
        return cmd.response()

    def epoch_cache(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        if self.replicas is None:
            raise ServerSystemError("this request only for controllerMode ")
        cache = EpochEntryCache(
            cluster_name=self.config.broker_cluster_name,
            broker_name=self.config.broker_name,
            broker_id=self.config.broker_id,
            epoch_list=self.replicas.epoch_entries(),
            max_offset=self.store.commit_log_max_offset,
        )
        return cmd.response(body=cache.encode())
