"""Client and consumer management: HEART_BEAT (34), UNREGISTER_CLIENT (35),
GET_CONSUMER_LIST_BY_GROUP (38), CHECK_CLIENT_CONFIG (46), the offset requests
(14, 15, 29, 30, 31, 32) and the orderly-consumption queue locks (41, 42).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiorocketmq.protocol.body import (
    CheckClientRequestBody,
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    UnlockBatchRequestBody,
)
from aiorocketmq.protocol.codes import PERM_READ_WRITE, RequestCode, ResponseCode, TopicSysFlag
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.headers import (
    GetConsumerListByGroupRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueueRequestHeader,
    SearchOffsetRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from aiorocketmq.protocol.transport import Connection, Handler

from ..clients import ClientChannel
from ..topics import retry_topic

if TYPE_CHECKING:
    from ..server import Broker


def handlers(broker: Broker) -> dict[int, Handler]:
    h = ConsumerHandlers(broker)
    return {
        RequestCode.HEART_BEAT: h.heartbeat,
        RequestCode.UNREGISTER_CLIENT: h.unregister_client,
        RequestCode.GET_CONSUMER_LIST_BY_GROUP: h.consumer_list,
        RequestCode.CHECK_CLIENT_CONFIG: h.check_client_config,
        RequestCode.QUERY_CONSUMER_OFFSET: h.query_offset,
        RequestCode.UPDATE_CONSUMER_OFFSET: h.update_offset,
        RequestCode.GET_MAX_OFFSET: h.max_offset,
        RequestCode.GET_MIN_OFFSET: h.min_offset,
        RequestCode.GET_EARLIEST_MSG_STORETIME: h.earliest_store_time,
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: h.search_offset,
        RequestCode.LOCK_BATCH_MQ: h.lock,
        RequestCode.UNLOCK_BATCH_MQ: h.unlock,
    }


class ConsumerHandlers:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    # -- clients --------------------------------------------------------------------------

    def heartbeat(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        data = HeartbeatData.decode(cmd.body)
        broker = self.broker
        conn.attrs["client_id"] = data.client_id
        conn.attrs["language"] = cmd.language
        conn.attrs["version"] = cmd.version
        for consumer in data.consumer_data_set:
            group = broker.groups.find(consumer.group_name)
            if group is not None:
                sys_flag = TopicSysFlag.UNIT if consumer.unit_mode else 0
                broker.topics.ensure(
                    retry_topic(consumer.group_name),
                    max(1, group.retry_queue_nums),
                    PERM_READ_WRITE,
                    sys_flag,
                )
            channel = ClientChannel(conn, data.client_id, cmd.language, cmd.version)
            broker.clients.register_consumer(channel, consumer)
        for producer in data.producer_data_set:
            broker.clients.register_producer(
                ClientChannel(conn, data.client_id, cmd.language, cmd.version), producer.group_name
            )
        return cmd.response()

    def unregister_client(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = UnregisterClientRequestHeader.from_fields(cmd.ext_fields)
        if h.producer_group:
            self.broker.clients.unregister_producer(h.producer_group, conn)
        if h.consumer_group:
            self.broker.clients.unregister_consumer(h.consumer_group, conn)
        return cmd.response()

    def consumer_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetConsumerListByGroupRequestHeader.from_fields(cmd.ext_fields)
        group = self.broker.clients.consumer_group(h.consumer_group)
        ids = group.client_ids() if group is not None else []
        if not ids:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {h.consumer_group}")
        return cmd.response(body=GetConsumerListByGroupResponseBody(consumer_id_list=ids).encode())

    def check_client_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        body = CheckClientRequestBody.decode(cmd.body)
        sub = body.subscription_data
        if sub is None or sub.expression_type in ("", "TAG"):
            return cmd.response()
        return cmd.response(
            ResponseCode.SYSTEM_ERROR, "The broker does not support consumer to filter message by SQL92"
        )

    # -- offsets --------------------------------------------------------------------------

    def query_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = QueryConsumerOffsetRequestHeader.from_fields(cmd.ext_fields)
        offset = self.broker.offsets.query(h.consumer_group, h.topic, h.queue_id)
        if offset >= 0:
            return cmd.response(ext_fields={"offset": offset})
        # A group seen for the first time starts at 0 while the queue still holds its first
        # message, as RocketMQ brokers do for "young" queues.
        if self.broker.store.get_min_offset(h.topic, h.queue_id) <= 0:
            return cmd.response(ext_fields={"offset": 0})
        return cmd.response(
            ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"
        )

    def update_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = UpdateConsumerOffsetRequestHeader.from_fields(cmd.ext_fields)
        self.broker.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        return cmd.response()

    def max_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = QueueRequestHeader.from_fields(cmd.ext_fields)
        return cmd.response(ext_fields={"offset": self.broker.store.get_max_offset(h.topic, h.queue_id)})

    def min_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = QueueRequestHeader.from_fields(cmd.ext_fields)
        return cmd.response(ext_fields={"offset": self.broker.store.get_min_offset(h.topic, h.queue_id)})

    def earliest_store_time(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = QueueRequestHeader.from_fields(cmd.ext_fields)
        return cmd.response(
            ext_fields={"timestamp": self.broker.store.get_earliest_store_time(h.topic, h.queue_id)}
        )

    def search_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = SearchOffsetRequestHeader.from_fields(cmd.ext_fields)
        offset = self.broker.store.get_offset_by_time(h.topic, h.queue_id, h.timestamp)
        return cmd.response(ext_fields={"offset": offset})

    # -- orderly locks --------------------------------------------------------------------

    def lock(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        body = LockBatchRequestBody.decode(cmd.body)
        locked = self.broker.locks.try_lock(body.consumer_group, body.mq_set, body.client_id)
        return cmd.response(body=LockBatchResponseBody(lock_ok_mq_set=locked).encode())

    def unlock(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        body = UnlockBatchRequestBody.decode(cmd.body)
        self.broker.locks.unlock(body.consumer_group, body.mq_set, body.client_id)
        return cmd.response()
