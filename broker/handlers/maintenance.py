"""Operator maintenance and diagnosis requests: cloning a group's offsets (CLONE_GROUP_OFFSET),
counters over time (VIEW_BROKER_STATS_DATA), every group's progress at once
(GET_BROKER_CONSUME_STATS), the producer table (GET_ALL_PRODUCER_INFO), consume-queue entries
(QUERY_CONSUME_QUEUE), store clean-ups on demand (CLEAN_EXPIRED_CONSUMEQUEUE,
DELETE_EXPIRED_COMMITLOG, CLEAN_UNUSED_TOPIC), the offset a topic's groups agree on
(QUERY_CORRECTION_OFFSET), and a consumer's running info relayed to the
client that holds it (GET_CONSUMER_RUNNING_INFO), as is a stored message to be consumed again
at once by one client (CONSUME_MESSAGE_DIRECTLY).
"""

from __future__ import annotations

import json
import logging
import time

from aiorocketmq.broker.store import MessageStore
from aiorocketmq.protocol import fastjson
from aiorocketmq.protocol.admin_requests import (
    BrokerStatsData,
    BrokerStatsItem,
    CloneGroupOffsetRequestHeader,
    ConsumeMessageDirectlyResultRequestHeader,
    ConsumeQueueData,
    ConsumeStatsList,
    GetConsumerRunningInfoRequestHeader,
    GetConsumeStatsInBrokerHeader,
    ProducerInfo,
    ProducerTableInfo,
    QueryConsumeQueueRequestHeader,
    QueryConsumeQueueResponseBody,
    QueryCorrectionOffsetBody,
    QueryCorrectionOffsetHeader,
    ViewBrokerStatsDataRequestHeader,
)
from aiorocketmq.protocol.body import ConsumeStats, MessageQueue, OffsetWrapper, TopicList
from aiorocketmq.protocol.codes import MQVersion, RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.message import decode_offset_msg_id
from aiorocketmq.protocol.names import (
    AUTO_CREATE_TOPIC,
    BENCHMARK_TOPIC,
    NOT_ALLOWED_SEND_TOPICS,
    OFFSET_MOVED_EVENT,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    is_retry_topic,
)
from aiorocketmq.protocol.transport import Connection, Handler

from ..clients import ClientRegistry
from ..config import BrokerConfig
from ..groups import GroupTable
from ..offsets import OffsetTable
from ..stats_history import GROUP_GET_NUMS, StatsHistory
from ..topics import TopicTable

log = logging.getLogger(__name__)

#: RocketMQ's system topics (TopicValidator's set), besides the broker's and cluster's own.
SYSTEM_TOPICS = frozenset(
    NOT_ALLOWED_SEND_TOPICS | {AUTO_CREATE_TOPIC, BENCHMARK_TOPIC, OFFSET_MOVED_EVENT, SELF_TEST_TOPIC}
)

LONG_MAX = (1 << 63) - 1

#: How long the broker waits for a client to describe itself (Apache's tools wait 5 s too).
RUNNING_INFO_TIMEOUT = 5.0


class MaintenanceHandlers:
    def __init__(
        self,
        config: BrokerConfig,
        *,
        store: MessageStore,
        topics: TopicTable,
        groups: GroupTable,
        offsets: OffsetTable,
        clients: ClientRegistry,
        history: StatsHistory,
    ) -> None:
        self.config = config
        self.store = store
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.clients = clients
        self.history = history

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.CLONE_GROUP_OFFSET: self.clone_group_offset,
            RequestCode.VIEW_BROKER_STATS_DATA: self.view_stats,
            RequestCode.GET_BROKER_CONSUME_STATS: self.broker_consume_stats,
            RequestCode.GET_ALL_PRODUCER_INFO: self.producer_table,
            RequestCode.QUERY_CONSUME_QUEUE: self.query_consume_queue,
            RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE: self.clean_expired_consume_queues,
            RequestCode.DELETE_EXPIRED_COMMITLOG: self.delete_expired_commit_log,
            RequestCode.CLEAN_UNUSED_TOPIC: self.clean_unused_topics,
            RequestCode.GET_CONSUMER_RUNNING_INFO: self.consumer_running_info,
            RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS: self.consumer_status,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER: self.system_topics,
            RequestCode.CONSUME_MESSAGE_DIRECTLY: self.consume_message_directly,
            RequestCode.QUERY_CORRECTION_OFFSET: self.correction_offset,
        }

    # -- offsets and statistics -----------------------------------------------------------

    def clone_group_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Copy the source group's committed offsets to the destination group, on ``topic`` or
        (without one) on every topic the source group has offsets on."""
        h = CloneGroupOffsetRequestHeader.from_fields(cmd.ext_fields)
        topics = [h.topic] if h.topic else self.offsets.topics_of_group(h.src_group)
        for topic in topics:
            if self.topics.get(topic) is None:
                log.warning("clone group offset: topic %s does not exist", topic)
                continue
            for queue_id, offset in self.offsets.queues_of(h.src_group, topic).items():
                self.offsets.commit(h.dest_group, topic, queue_id, offset)
        log.info("offsets of %s cloned to %s on %s by %s", h.src_group, h.dest_group, topics, conn.address)
        return cmd.response()

    def correction_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Per queue of ``topic``, the smallest committed offset among its groups but the
        filtered ones; a queue where ``compareGroup`` is further behind gets Long.MAX_VALUE
        (nothing to correct there), as Apache's broker answers."""
        h = QueryCorrectionOffsetHeader.from_fields(cmd.ext_fields)
        skipped = {g.strip() for g in (h.filter_groups or "").split(",") if g.strip()}
        minimum: dict[int, int] = {}
        for group in self.offsets.groups_of_topic(h.topic):
            if group in skipped:
                continue
            for queue_id, offset in self.offsets.queues_of(group, h.topic).items():
                minimum[queue_id] = min(offset, minimum.get(queue_id, offset))
        for queue_id, offset in self.offsets.queues_of(h.compare_group, h.topic).items():
            if queue_id in minimum and minimum[queue_id] > offset:
                minimum[queue_id] = LONG_MAX
        return cmd.response(body=QueryCorrectionOffsetBody(correction_offsets=minimum).encode())

    def view_stats(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = ViewBrokerStatsDataRequestHeader.from_fields(cmd.ext_fields)
        if not self.history.known(h.stats_name, h.stats_key):
            return cmd.response(
                ResponseCode.SYSTEM_ERROR, f"The stats <{h.stats_name}> <{h.stats_key}> not exist"
            )

        def item(tier: int) -> BrokerStatsItem:
            w = self.history.window(h.stats_name, h.stats_key, tier)
            return BrokerStatsItem(sum=w.sum, tps=w.tps, avgpt=w.avgpt)

        body = BrokerStatsData(stats_minute=item(0), stats_hour=item(1), stats_day=item(2))
        return cmd.response(body=body.encode())

    def broker_consume_stats(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Every configured group's progress on each topic it has offsets on (ordered topics
        only, with ``isOrder``), skipping topics an online group no longer subscribes to."""
        h = GetConsumeStatsInBrokerHeader.from_fields(cmd.ext_fields)
        store = self.store
        entries: list[dict[str, list[ConsumeStats]]] = []
        total_diff = 0
        for group in sorted(self.groups.groups):
            online = self.clients.consumer_group(group)
            per_topic = []
            for topic in sorted(self.offsets.topics_of_group(group)):
                config = self.topics.get(topic)
                if config is None or (h.is_order and not config.order):
                    continue
                if online is not None and online.subscriptions and topic not in online.subscriptions:
                    continue
                stats = ConsumeStats()
                for queue_id in range(config.write_queue_nums):
                    broker_offset = max(0, store.get_max_offset(topic, queue_id))
                    consumer_offset = max(0, self.offsets.query(group, topic, queue_id))
                    last = (
                        store.get_store_time(topic, queue_id, consumer_offset - 1)
                        if consumer_offset > 0
                        else 0
                    )
                    queue = MessageQueue(topic=topic, broker_name=self.config.broker_name, queue_id=queue_id)
                    stats.offset_table[queue] = OffsetWrapper(
                        broker_offset=broker_offset,
                        consumer_offset=consumer_offset,
                        # Pulls are not tracked apart from commits here: nothing counts as in flight.
                        pull_offset=consumer_offset,
                        last_timestamp=max(0, last),
                    )
                stats.consume_tps = self.history.window(GROUP_GET_NUMS, f"{topic}@{group}", 0).tps
                total_diff += stats.diff_total()
                per_topic.append(stats)
            if per_topic:
                entries.append({group: per_topic})
        body = ConsumeStatsList(
            consume_stats_list=entries, broker_addr=self.config.broker_addr, total_diff=total_diff
        )
        return cmd.response(body=body.encode())

    def producer_table(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        now_ms, now = time.time() * 1000, time.monotonic()
        data = {
            group: [
                ProducerInfo(
                    client_id=ch.client_id,
                    # Java writes the channel's address as SocketAddress.toString(): "/ip:port".
                    remote_ip=f"/{ch.conn.address}",
                    language=ch.language,
                    version=ch.version,
                    last_update_timestamp=int(now_ms - (now - ch.last_update) * 1000),
                )
                for ch in members.values()
                if not ch.conn.closed
            ]
            for group, members in sorted(self.clients.producers.items())
        }
        return cmd.response(body=ProducerTableInfo(data={g: p for g, p in data.items() if p}).encode())

    def system_topics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """The topics this broker keeps for itself (what tools leave out of user metadata)."""
        config = self.config
        own = {config.broker_name, config.broker_cluster_name, f"{config.broker_cluster_name}_REPLY_TOPIC"}
        topics = sorted(t for t in self.topics.topics if t in SYSTEM_TOPICS or t in own)
        return cmd.response(body=TopicList(topic_list=topics, broker_addr=config.broker_addr).encode())

    # -- the store ------------------------------------------------------------------------

    def query_consume_queue(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = QueryConsumeQueueRequestHeader.from_fields(cmd.ext_fields)
        if h.index < 0 or h.count <= 0:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad index {h.index} or count {h.count}")
        body = QueryConsumeQueueResponseBody()
        if h.consumer_group:
            group = self.clients.consumer_group(h.consumer_group)
            body.subscription_data = group.subscriptions.get(h.topic) if group is not None else None
            # RocketMQ's answer: the group's filter data as JSON (none for tag filters), or why not.
            body.filter_data = (
                "null"
                if body.subscription_data is not None
                else f"{h.consumer_group}@{h.topic} is not online!"
            )
        cq = self.store.consume_queue(h.topic, h.queue_id)
        if cq is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"{h.queue_id}@{h.topic} is not exist!")
        body.min_queue_index = self.store.get_min_offset(h.topic, h.queue_id)
        body.max_queue_index = self.store.get_max_offset(h.topic, h.queue_id)
        # ``eval`` stays false: RocketMQ evaluates a filter here only against the consume-queue
        # extension (enableConsumeQueueExt, off by default), which this store does not keep.
        for offset_py, size, tags_code in self.store.read_consume_queue(
            h.topic, h.queue_id, h.index, h.count
        ):
            body.queue_data.append(
                ConsumeQueueData(physic_offset=offset_py, physic_size=size, tags_code=tags_code)
            )
        return cmd.response(body=body.encode())

    def clean_expired_consume_queues(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Drop consume queues whose every entry points below the commit log's minimum."""
        minimum = self.store.commit_log_min_offset
        removed = []
        for cq in list(self.store.consume_queues()):
            if cq.topic == SCHEDULE_TOPIC:
                continue
            last = cq.entry(self.store.get_max_offset(cq.topic, cq.queue_id) - 1)
            if last is not None and last[0] + last[1] <= minimum:
                removed.append(f"{cq.topic}-{cq.queue_id}")
                self.store.drop_consume_queue(cq.topic, cq.queue_id)
        log.info("expired consume queues cleaned by %s: %s", conn.address, removed or "none")
        return cmd.response()

    def delete_expired_commit_log(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Delete the commit-log files past ``fileReservedTime`` now, whatever ``deleteWhen``."""
        deleted = self.store.delete_expired_files()
        return cmd.response(remark=f"{deleted} expired commit log files deleted")

    def clean_unused_topics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Drop the consume queues of topics this broker no longer has a config for."""
        unused = [
            t
            for t in self.store.topics()
            if self.topics.get(t) is None and t != SCHEDULE_TOPIC and not is_retry_topic(t)
        ]
        for topic in unused:
            self.store.delete_topic(topic)
        log.info("unused topics cleaned by %s: %s", conn.address, unused or "none")
        return cmd.response()

    # -- clients --------------------------------------------------------------------------

    async def consumer_running_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Ask the named client of the group for its running info and pass its answer on."""
        h = GetConsumerRunningInfoRequestHeader.from_fields(cmd.ext_fields)
        ask = RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, h.to_fields())
        return await self._relay(cmd, ask, h.consumer_group, h.client_id)

    async def consumer_status(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """INVOKE_BROKER_TO_GET_CONSUMER_STATUS (``mqadmin getConsumerStatus``): every online
        client of the group (or the one ``clientAddr`` names) is asked for the offsets it holds
        on the topic; the answers are passed on per client id, a client that fails to answer
        left out, as Apache's broker does."""
        fields = cmd.ext_fields or {}
        group_name, only = str(fields.get("group") or ""), str(fields.get("clientAddr") or "")
        group = self.clients.consumer_group(group_name)
        if group is None or not group.channels:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR, f"No Any Consumer online in the consumer group: [{group_name}]"
            )
        ask_fields = {k: v for k, v in fields.items() if k in ("topic", "group", "clientAddr")}
        tables: list[bytes] = []
        for channel in list(group.channels.values()):
            if only and channel.client_id != only:
                continue
            ask = RemotingCommand.request(RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT, ask_fields)
            try:
                answer = await channel.conn.request(ask, RUNNING_INFO_TIMEOUT)
            except MQError as exc:
                log.warning("consumer status of %s in %s: %s", channel.client_id, group_name, exc)
                continue
            if answer.code != ResponseCode.SUCCESS or not answer.body:
                continue
            table = fastjson.loads(answer.body).get("messageQueueTable") or {}
            # Keys are queues written as JSON objects (fastjson); passed on as they came.
            pairs = b",".join(k.encode() + b":" + str(int(v)).encode() for k, v in table.items())
            tables.append(json.dumps(channel.client_id).encode() + b":{" + pairs + b"}")
        return cmd.response(body=b'{"consumerTable":{' + b",".join(tables) + b"}}")

    async def consume_message_directly(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Hand the message an offset msgId names to one client of the group, which consumes
        it now (``mqadmin queryMsgByUniqueKey -g -d``), and pass its result on."""
        h = ConsumeMessageDirectlyResultRequestHeader.from_fields(cmd.ext_fields)
        try:
            _, offset = decode_offset_msg_id(h.msg_id or "")
        except MQError:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad offset msgId {h.msg_id!r}")
        record = self.store.read_record(offset)
        if record is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"no message {h.msg_id} on this broker")
        ask = RemotingCommand.request(RequestCode.CONSUME_MESSAGE_DIRECTLY, h.to_fields(), record)
        return await self._relay(cmd, ask, h.consumer_group, h.client_id or "")

    async def _relay(
        self, cmd: RemotingCommand, ask: RemotingCommand, group_name: str, client_id: str
    ) -> RemotingCommand:
        """Send ``ask`` to ``client_id`` of the group and answer ``cmd`` with its response."""
        group = self.clients.consumer_group(group_name)
        member = None
        if group is not None:
            member = next((ch for ch in group.channels.values() if ch.client_id == client_id), None)
        if member is None or member.conn.closed:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR, f"The Consumer <{group_name}> <{client_id}> not online"
            )
        if member.version < MQVersion.V3_1_8:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR,
                f"The Consumer <{group_name}> Version <{member.version}> too low to finish, "
                "please upgrade it to V3_1_8_SNAPSHOT",
            )
        try:
            answer = await member.conn.request(ask, RUNNING_INFO_TIMEOUT)
        except MQError as exc:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR, f"invoke consumer <{group_name}> <{client_id}> failed: {exc}"
            )
        return cmd.response(answer.code, answer.remark, body=answer.body or b"")
