"""Client and consumer management: HEART_BEAT (34), UNREGISTER_CLIENT (35),
GET_CONSUMER_LIST_BY_GROUP (38), CHECK_CLIENT_CONFIG (46), the offset requests
(14, 15, 29, 30, 31, 32) and the orderly-consumption queue locks (41, 42).
"""

from __future__ import annotations

from aiorocketmq.broker.store import MessageStore
from aiorocketmq.protocol.body import (
    CheckClientRequestBody,
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    UnlockBatchRequestBody,
)
from aiorocketmq.protocol.codes import PERM_READ_WRITE, RequestCode, TopicSysFlag
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import QueryNotFoundError, ServerSystemError, SubscriptionParseFailedError
from aiorocketmq.protocol.headers import (
    GetConsumerListByGroupRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueueRequestHeader,
    SearchOffsetRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from aiorocketmq.protocol.names import retry_topic
from aiorocketmq.protocol.sql92 import Sql92Error
from aiorocketmq.protocol.transport import Connection, Handler

from ..clients import ClientChannel, ClientRegistry
from ..filters import ConsumerFilters, compile_expression, is_tag_type
from ..groups import GroupTable
from ..locks import QueueLocks
from ..offsets import OffsetTable
from ..topics import TopicTable


class ConsumerHandlers:
    def __init__(
        self,
        *,
        store: MessageStore,
        topics: TopicTable,
        groups: GroupTable,
        offsets: OffsetTable,
        clients: ClientRegistry,
        locks: QueueLocks,
        filters: ConsumerFilters | None = None,
    ) -> None:
        self.store = store
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.clients = clients
        self.locks = locks
        self.filters = filters if filters is not None else ConsumerFilters(False)

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.HEART_BEAT: self.heartbeat,
            RequestCode.UNREGISTER_CLIENT: self.unregister_client,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list,
            RequestCode.CHECK_CLIENT_CONFIG: self.check_client_config,
            RequestCode.QUERY_CONSUMER_OFFSET: self.query_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self.update_offset,
            RequestCode.GET_MAX_OFFSET: self.max_offset,
            RequestCode.GET_MIN_OFFSET: self.min_offset,
            RequestCode.GET_EARLIEST_MSG_STORETIME: self.earliest_store_time,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset,
            RequestCode.LOCK_BATCH_MQ: self.lock,
            RequestCode.UNLOCK_BATCH_MQ: self.unlock,
        }

    # -- clients --------------------------------------------------------------------------

    def heartbeat(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        data = HeartbeatData.decode(cmd.body)
        conn.attrs["client_id"] = data.client_id
        conn.attrs["language"] = cmd.language
        conn.attrs["version"] = cmd.version
        for consumer in data.consumer_data_set:
            group = self.groups.find(consumer.group_name)
            if group is not None:
                sys_flag = TopicSysFlag.UNIT if consumer.unit_mode else 0
                self.topics.ensure(
                    retry_topic(consumer.group_name),
                    max(1, group.retry_queue_nums),
                    PERM_READ_WRITE,
                    sys_flag,
                )
            channel = ClientChannel(conn, data.client_id, cmd.language, cmd.version)
            self.clients.register_consumer(channel, consumer)
            self.filters.register(consumer.group_name, consumer.subscription_data_set)
        for producer in data.producer_data_set:
            self.clients.register_producer(
                ClientChannel(conn, data.client_id, cmd.language, cmd.version), producer.group_name
            )
        return cmd.response()

    def unregister_client(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = UnregisterClientRequestHeader.from_fields(cmd.ext_fields)
        if h.producer_group:
            self.clients.unregister_producer(h.producer_group, conn)
        if h.consumer_group:
            self.clients.unregister_consumer(h.consumer_group, conn)
        return cmd.response()

    def consumer_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetConsumerListByGroupRequestHeader.from_fields(cmd.ext_fields)
        group = self.clients.consumer_group(h.consumer_group)
        ids = group.client_ids() if group is not None else []
        if not ids:
            raise ServerSystemError(f"no consumer for this group, {h.consumer_group}")
        return cmd.response(body=GetConsumerListByGroupResponseBody(consumer_id_list=ids).encode())

    def check_client_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        body = CheckClientRequestBody.decode(cmd.body)
        sub = body.subscription_data
        if sub is None or is_tag_type(sub.expression_type):
            return cmd.response()
        if not self.filters.enabled:
            raise ServerSystemError(
                f"The broker does not support consumer to filter message by {sub.expression_type}"
            )
        try:
            compile_expression(sub.sub_string, sub.expression_type)
        except Sql92Error as exc:
            raise SubscriptionParseFailedError(str(exc)) from None
        return cmd.response()

    # -- offsets --------------------------------------------------------------------------

    def query_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = QueryConsumerOffsetRequestHeader.from_fields(cmd.ext_fields)
        offset = self.offsets.query(h.consumer_group, h.topic, h.queue_id)
        if offset >= 0:
            return cmd.response(ext_fields={"offset": offset})
        if h.set_zero_if_not_found is False:
            raise QueryNotFoundError("Not found, do not set to zero, maybe this group boot first")
        # A group seen for the first time starts at 0 while the queue still holds its first
        # message, as RocketMQ brokers do for "young" queues.
        if self.store.get_min_offset(h.topic, h.queue_id) <= 0:
            return cmd.response(ext_fields={"offset": 0})
        raise QueryNotFoundError("Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")

    def update_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = UpdateConsumerOffsetRequestHeader.from_fields(cmd.ext_fields)
        self.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        return cmd.response()

    def max_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = QueueRequestHeader.from_fields(cmd.ext_fields)
        return cmd.response(ext_fields={"offset": self.store.get_max_offset(h.topic, h.queue_id)})

    def min_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = QueueRequestHeader.from_fields(cmd.ext_fields)
        return cmd.response(ext_fields={"offset": self.store.get_min_offset(h.topic, h.queue_id)})

    def earliest_store_time(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = QueueRequestHeader.from_fields(cmd.ext_fields)
        return cmd.response(ext_fields={"timestamp": self.store.get_earliest_store_time(h.topic, h.queue_id)})

    def search_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = SearchOffsetRequestHeader.from_fields(cmd.ext_fields)
        offset = self.store.get_offset_by_time(h.topic, h.queue_id, h.timestamp)
        return cmd.response(ext_fields={"offset": offset})

    # -- orderly locks --------------------------------------------------------------------

    def lock(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        body = LockBatchRequestBody.decode(cmd.body)
        locked = self.locks.try_lock(body.consumer_group, body.mq_set, body.client_id)
        return cmd.response(body=LockBatchResponseBody(lock_ok_mq_set=locked).encode())

    def unlock(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        body = UnlockBatchRequestBody.decode(cmd.body)
        self.locks.unlock(body.consumer_group, body.mq_set, body.client_id)
        return cmd.response()
