"""Administration requests an operator tool needs: topics, subscription groups, runtime
info, topic and consume statistics, offsets, connections, offset resets, broker config."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from aiorocketmq.protocol.body import (
    ConnectionInfo,
    ConsumerConnection,
    ConsumeStats,
    GroupList,
    KVTable,
    MessageQueue,
    OffsetWrapper,
    ProducerConnection,
    ResetOffsetBody,
    SubscriptionGroupConfig,
    TopicConfig,
    TopicOffset,
    TopicStatsTable,
)
from aiorocketmq.protocol.codes import CURRENT_VERSION, RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
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
from aiorocketmq.protocol.transport import Connection, Handler

from ..topics import (
    AUTO_CREATE_TOPIC,
    BENCHMARK_TOPIC,
    NOT_ALLOWED_SEND_TOPICS,
    validate_topic_name,
)

if TYPE_CHECKING:
    from ..server import Broker

BROKER_VERSION_DESC = "V4_9_4"
RESERVED_TOPICS = NOT_ALLOWED_SEND_TOPICS | {AUTO_CREATE_TOPIC, BENCHMARK_TOPIC}


def handlers(broker: Broker) -> dict[int, Handler]:
    a = AdminHandlers(broker)
    return {
        RequestCode.UPDATE_AND_CREATE_TOPIC: a.create_topic,
        RequestCode.DELETE_TOPIC_IN_BROKER: a.delete_topic,
        RequestCode.GET_ALL_TOPIC_CONFIG: a.all_topic_config,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: a.update_group,
        RequestCode.DELETE_SUBSCRIPTIONGROUP: a.delete_group,
        RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: a.all_groups,
        RequestCode.GET_BROKER_RUNTIME_INFO: a.runtime_info,
        RequestCode.GET_TOPIC_STATS_INFO: a.topic_stats,
        RequestCode.GET_CONSUME_STATS: a.consume_stats,
        RequestCode.GET_ALL_CONSUMER_OFFSET: a.all_consumer_offsets,
        RequestCode.GET_ALL_DELAY_OFFSET: a.all_delay_offsets,
        RequestCode.GET_BROKER_CONFIG: a.broker_config,
        RequestCode.GET_CONSUMER_CONNECTION_LIST: a.consumer_connections,
        RequestCode.GET_PRODUCER_CONNECTION_LIST: a.producer_connections,
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: a.reset_offset,
        RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: a.consumed_by,
        RequestCode.TRIGGER_DELETE_FILES: a.delete_files,
    }


def _uptime(seconds: float) -> str:
    """RocketMQ's ``runtime`` format: ``[ 0 days, 1 hours, 2 minutes, 3 seconds ]``."""
    total = int(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"[ {days} days, {hours} hours, {minutes} minutes, {secs} seconds ]"


class AdminHandlers:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    # -- topics ---------------------------------------------------------------------------

    def create_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = CreateTopicRequestHeader.from_fields(cmd.ext_fields)
        problem = validate_topic_name(h.topic)
        if problem is not None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, problem)
        if h.topic in RESERVED_TOPICS or h.topic == self.broker.config.broker_cluster_name:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR, f"The topic[{h.topic}] is conflict with system reserved words."
            )
        if h.read_queue_nums <= 0 or h.write_queue_nums <= 0:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "queue numbers must be positive")
        self.broker.topics.put(
            TopicConfig(
                topic_name=h.topic,
                read_queue_nums=h.read_queue_nums,
                write_queue_nums=h.write_queue_nums,
                perm=h.perm,
                topic_filter_type=h.topic_filter_type,
                topic_sys_flag=h.topic_sys_flag or 0,
                order=h.order,
            )
        )
        return cmd.response()

    def delete_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = DeleteTopicRequestHeader.from_fields(cmd.ext_fields)
        if h.topic in RESERVED_TOPICS:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"The topic[{h.topic}] is a system topic")
        broker = self.broker
        broker.topics.delete(h.topic)
        broker.store.delete_topic(h.topic)
        broker.offsets.delete_topic(h.topic)
        return cmd.response()

    def all_topic_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=self.broker.topics.encode())

    def topic_stats(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetTopicStatsInfoRequestHeader.from_fields(cmd.ext_fields)
        broker = self.broker
        config = broker.topics.get(h.topic)
        if config is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        store = broker.store
        table = {}
        for queue_id in range(config.write_queue_nums):
            max_offset = store.get_max_offset(h.topic, queue_id)
            last = store.get_store_time(h.topic, queue_id, max_offset - 1) if max_offset > 0 else 0
            table[MessageQueue(topic=h.topic, broker_name=broker.config.broker_name, queue_id=queue_id)] = (
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
        self.broker.groups.put(group)
        return cmd.response()

    def delete_group(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = DeleteSubscriptionGroupRequestHeader.from_fields(cmd.ext_fields)
        broker = self.broker
        broker.groups.delete(h.group_name)
        if h.remove_offset:
            broker.offsets.delete_group(h.group_name)
        return cmd.response()

    def all_groups(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=self.broker.groups.encode())

    # -- statistics -----------------------------------------------------------------------

    def runtime_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_RUNTIME_INFO under RocketMQ's key names (what ``mqadmin clusterList`` and
        ``brokerStatus`` show), plus a few of our own."""
        broker = self.broker
        store = broker.store
        stats = broker.stats
        earliest = store.look_message(store.commit_log_min_offset) if store.commit_log_max_offset else None
        table = {
            **store.runtime_info(),
            "brokerVersionDesc": BROKER_VERSION_DESC,
            "brokerVersion": str(CURRENT_VERSION),
            "brokerName": broker.config.broker_name,
            "brokerAddr": broker.config.broker_addr,
            "bootTimestamp": str(int(broker.started_at * 1000)),
            "runtime": _uptime(time.time() - broker.started_at),
            "putTps": broker.tps.put_tps(),
            "getTransferedTps": broker.tps.get_tps(),
            "msgPutTotalTodayNow": str(stats.total_put),
            "msgGetTotalTodayNow": str(stats.total_got),
            "msgPutTotal": str(stats.total_put),
            "msgGetTotal": str(stats.total_got),
            "earliestMessageTimeStamp": str(earliest.store_timestamp if earliest is not None else -1),
            "putFailures": str(stats.put_failures),
            "topicCount": str(len(broker.topics.topics)),
            "consumerGroupCount": str(len(broker.clients.consumers)),
            "producerGroupCount": str(len(broker.clients.producers)),
            "heldPullRequests": str(broker.long_polling.held_count),
            "openTransactions": str(len(broker.transactions.pending)),
            "delayedDelivered": str(broker.delay.delivered),
        }
        return cmd.response(body=KVTable(table=table).encode())

    def consume_stats(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetConsumeStatsRequestHeader.from_fields(cmd.ext_fields)
        broker = self.broker
        group = h.consumer_group
        topics = set(broker.offsets.topics_of_group(group))
        info = broker.clients.consumer_group(group)
        if info is not None:
            topics.update(info.subscriptions)
        if h.topic:
            topics &= {h.topic}
        table = {}
        store = broker.store
        for topic in sorted(topics):
            config = broker.topics.get(topic)
            if config is None:
                continue
            for queue_id in range(config.read_queue_nums):
                consumer_offset = max(0, broker.offsets.query(group, topic, queue_id))
                last = (
                    store.get_store_time(topic, queue_id, consumer_offset - 1) if consumer_offset > 0 else 0
                )
                table[MessageQueue(topic=topic, broker_name=broker.config.broker_name, queue_id=queue_id)] = (
                    OffsetWrapper(
                        broker_offset=store.get_max_offset(topic, queue_id),
                        consumer_offset=consumer_offset,
                        last_timestamp=max(0, last),
                    )
                )
        if not table and info is None:
            return cmd.response(
                ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] has no offsets on this broker"
            )
        return cmd.response(body=ConsumeStats(offset_table=table).encode())

    def all_consumer_offsets(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=self.broker.offsets.encode_snapshot())

    def all_delay_offsets(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=self.broker.delay.encode())

    def broker_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        text = self.broker.config.to_properties() + self.broker.store_config.to_properties()
        version = self.broker.topics.data_version.encode().decode()
        return cmd.response(ext_fields={"version": version}, body=text.encode())

    # -- connections ----------------------------------------------------------------------

    def consumer_connections(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetConsumerConnectionListRequestHeader.from_fields(cmd.ext_fields)
        group = self.broker.clients.consumer_group(h.consumer_group)
        if group is None:
            return cmd.response(
                ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{h.consumer_group}] not online"
            )
        body = ConsumerConnection(
            connection_set=[
                ConnectionInfo(
                    client_id=ch.client_id,
                    client_addr=ch.conn.address,
                    language=ch.language,
                    version=ch.version,
                )
                for ch in group.channels.values()
            ],
            subscription_table=dict(group.subscriptions),
            consume_type=group.consume_type,
            message_model=group.message_model,
            consume_from_where=group.consume_from_where,
        )
        return cmd.response(body=body.encode())

    def producer_connections(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetProducerConnectionListRequestHeader.from_fields(cmd.ext_fields)
        channels = self.broker.clients.producer_channels(h.producer_group)
        body = ProducerConnection(
            connection_set=[
                ConnectionInfo(
                    client_id=ch.client_id,
                    client_addr=ch.conn.address,
                    language=ch.language,
                    version=ch.version,
                )
                for ch in channels
            ]
        )
        return cmd.response(body=body.encode())

    def consumed_by(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = QueryTopicConsumeByWhoRequestHeader.from_fields(cmd.ext_fields)
        broker = self.broker
        groups = set(broker.offsets.groups_of_topic(h.topic))
        groups.update(g.name for g in broker.clients.groups_subscribing(h.topic))
        return cmd.response(body=GroupList(group_list=sorted(groups)).encode())

    # -- offsets --------------------------------------------------------------------------

    def reset_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Move a group's offsets on a topic to the first message stored at or after a time
        (``timestamp`` -1: the end), and tell its online members to adopt them."""
        h = ResetOffsetRequestHeader.from_fields(cmd.ext_fields)
        broker = self.broker
        config = broker.topics.get(h.topic)
        if config is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        table = {}
        store = broker.store
        for queue_id in range(config.read_queue_nums):
            if h.timestamp < 0:
                target = store.get_max_offset(h.topic, queue_id)
            else:
                target = store.get_offset_by_time(h.topic, queue_id, h.timestamp)
            current = broker.offsets.query(h.group, h.topic, queue_id)
            if h.is_force or current < 0 or target < current:
                broker.offsets.commit(h.group, h.topic, queue_id, target)
            else:
                target = current
            table[MessageQueue(topic=h.topic, broker_name=broker.config.broker_name, queue_id=queue_id)] = (
                target
            )
        body = ResetOffsetBody(offset_table=table).encode()
        group = broker.clients.consumer_group(h.group)
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
        deleted = self.broker.store.delete_expired_files(force=True)
        return cmd.response(remark=f"{deleted} commit log files deleted")
