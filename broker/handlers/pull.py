"""Compiled with mypyc (aiorocketmq/compiled.py, which lists the rules): declared, typed
attributes only; no monkeypatching, setattr or frame tricks; no await in except/finally.

PULL_MESSAGE (11): validations in RocketMQ's order, the subscription from the request or
from heartbeats, the tag-hash filter, the store read, and long polling when nothing is there.

The response body is the stored records themselves, concatenated.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from aiorocketmq.broker.store import GetResult, GetStatus, MessageStore
from aiorocketmq.protocol import fastjson
from aiorocketmq.protocol.body import ConsumeType, MessageModel
from aiorocketmq.protocol.codes import Perm, PullSysFlag, RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import (
    FilterDataNotExistError,
    FilterDataNotLatestError,
    InvalidParameterError,
    NoPermissionError,
    ServerSystemError,
    SubscriptionGroupNotExistError,
    SubscriptionNotExistError,
    SubscriptionNotLatestError,
    SubscriptionParseFailedError,
    SystemBusyError,
    TopicNotExistError,
)
from aiorocketmq.protocol.headers import PullMessageRequestHeader
from aiorocketmq.protocol.message import PropertyKey
from aiorocketmq.protocol.names import OFFSET_MOVED_EVENT, tag_codes
from aiorocketmq.protocol.sql92 import Sql92Error
from aiorocketmq.protocol.transport import Connection, Handler, HandlerResult

from ..clients import ClientRegistry
from ..cold_data import HOLD_SECONDS, ColdDataFlowControl
from ..config import BrokerConfig
from ..filters import ConsumerFilters, RecordFilter, compile_expression, is_tag_type, record_filter
from ..groups import GroupTable
from ..long_polling import LongPolling
from ..offsets import OffsetTable
from ..stats import BrokerStats
from ..topics import TopicTable
from ..writer import MessageWriter

#: Apache's mark on a pull it held for reading cold data (it is not held again).
_NO_SUSPEND = "_noSuspend_"

_COMMIT = PullSysFlag.COMMIT_OFFSET.value
_SUSPEND = PullSysFlag.SUSPEND.value
_SUBSCRIPTION = PullSysFlag.SUBSCRIPTION.value
#: The read bit of RocketMQ 5's group forbidden table.
_READ_BIT = 2
_PERM_READ = int(Perm.READ)

_STATUS_CODES = {
    GetStatus.FOUND: ResponseCode.SUCCESS,
    GetStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}


class Puller:
    """Serves pulls, and runs them again when long polling wakes them."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        store: MessageStore,
        topics: TopicTable,
        groups: GroupTable,
        clients: ClientRegistry,
        offsets: OffsetTable,
        long_polling: LongPolling,
        writer: MessageWriter,
        stats: BrokerStats,
        filters: ConsumerFilters | None = None,
        cold: ColdDataFlowControl | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.topics = topics
        self.groups = groups
        self.clients = clients
        self.offsets = offsets
        self.long_polling = long_polling
        self.writer = writer
        self.stats = stats
        self.filters = filters if filters is not None else ConsumerFilters(config.enable_property_filter)
        self.cold = cold

    def handlers(self) -> dict[int, Handler]:
        # A 5.x lite-pull consumer pulls with its own code; the broker answers it as a pull
        # (what differs is in the request's flags), unless lite pulls are switched off.
        return {RequestCode.PULL_MESSAGE: self.pull, RequestCode.LITE_PULL_MESSAGE: self.lite_pull}

    def lite_pull(self, conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        if not self.config.lite_pull_message_enable:
            raise NoPermissionError(
                f"the broker[{self.config.broker_ip1}] for lite pull consumer is forbidden"
            )
        return self.pull(conn, cmd)

    def pull(self, conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        """A pull as it arrives: it may be held (``None``) when it finds nothing, or (a group
        reading cold data too fast) answered later."""
        h = PullMessageRequestHeader.from_fields(cmd.ext_fields)
        cold = self.cold
        if cold is not None and cold.enabled and cold.controlled(h.consumer_group):
            held = self._cold_gate(conn, cmd, h, cold)
            if held is not None:
                return held
        return self._pull(conn, cmd, h, True)

    def _cold_gate(
        self, conn: Connection, cmd: RemotingCommand, h: PullMessageRequestHeader, cold: ColdDataFlowControl
    ) -> Awaitable[RemotingCommand | None] | None:
        """A controlled group's pull of cold data: refused for a push consumer, held and then
        answered with one message for one that pulls actively (broker/cold_data.py)."""
        cq = self.store.consume_queue(h.topic, h.queue_id)
        entry = cq.entry(h.queue_offset) if cq is not None else None
        if entry is None or not cold.is_cold(entry[0]):
            return None
        info = self.clients.consumer_group(h.consumer_group)
        if info is None or info.consume_type != ConsumeType.CONSUME_ACTIVELY:
            raise SystemBusyError("This consumer group is reading cold data. It has been flow control")
        fields = cmd.ext_fields
        if fields is not None and _NO_SUSPEND in fields:  # held once already: one message now
            h.max_msg_nums = 1
            return None

        async def later() -> RemotingCommand | None:
            await asyncio.sleep(HOLD_SECONDS)
            if cmd.ext_fields is not None:
                cmd.ext_fields[_NO_SUSPEND] = "1"
            result = self.pull(conn, cmd)
            if result is None or isinstance(result, RemotingCommand):
                return result
            return await result

        return later()

    def repull(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        """A held pull woken up: answered whatever it finds, and commits no offset again."""
        return self._pull(conn, cmd, PullMessageRequestHeader.from_fields(cmd.ext_fields), False)

    def _pull(
        self, conn: Connection, cmd: RemotingCommand, h: PullMessageRequestHeader, first_run: bool
    ) -> RemotingCommand | None:
        config = self.config
        if not config.readable:
            raise NoPermissionError(f"the broker[{config.broker_ip1}] pulling message is forbidden")
        group = self.groups.find(h.consumer_group)
        if group is None:
            raise SubscriptionGroupNotExistError(f"subscription group [{h.consumer_group}] does not exist")
        if not group.consume_enable:
            raise NoPermissionError(f"subscription group no permission, {h.consumer_group}")
        topic_config = self.topics.get(h.topic)
        if topic_config is None:
            raise TopicNotExistError(f"topic[{h.topic}] not exist, apply first please!")
        if not topic_config.perm & _PERM_READ:
            raise NoPermissionError(f"the topic[{h.topic}] pulling message is forbidden")
        if h.queue_id < 0 or h.queue_id >= topic_config.read_queue_nums:
            raise InvalidParameterError(
                f"queueId[{h.queue_id}] is illegal, topic:[{h.topic}] "
                f"topicConfig.readQueueNums:[{topic_config.read_queue_nums}] consumer:[{conn.address}]"
            )
        codes: frozenset[int] | None = None
        matches: RecordFilter | None = None
        if h.sys_flag & _SUBSCRIPTION:
            expression_type = h.expression_type
            if is_tag_type(expression_type):
                codes = tag_codes(h.subscription)
            elif not self.filters.enabled:
                raise ServerSystemError(
                    f"The broker does not support consumer to filter message by {expression_type}"
                )
            else:
                try:
                    matches = record_filter(compile_expression(h.subscription or "", expression_type or ""))
                except Sql92Error as exc:
                    raise SubscriptionParseFailedError(
                        f"parse the consumer's subscription failed: {exc}"
                    ) from None
        else:
            info = self.clients.consumer_group(h.consumer_group)
            if info is None:
                raise SubscriptionNotExistError("the consumer's group info not exist")
            if info.message_model == MessageModel.BROADCASTING and not group.consume_broadcast_enable:
                raise NoPermissionError(
                    f"the consumer group[{h.consumer_group}] can not consume by broadcast way"
                )
            if self.groups.is_forbidden(h.consumer_group, h.topic, _READ_BIT):
                raise NoPermissionError(
                    f"the consumer group[{h.consumer_group}] is forbidden for topic[{h.topic}]"
                )
            sub = info.subscriptions.get(h.topic)
            if sub is None:
                raise SubscriptionNotExistError("the consumer's subscription not exist")
            if sub.sub_version < h.sub_version:
                raise SubscriptionNotLatestError("the consumer's subscription not latest")
            expression_type = sub.expression_type
            if is_tag_type(expression_type):
                codes = tag_codes(sub.sub_string)
            else:
                data = self.filters.get(h.consumer_group, h.topic)
                if data is None:
                    raise FilterDataNotExistError(
                        "The broker's consumer filter data is not exist!Your expression may be wrong!"
                    )
                if data.version < h.sub_version:
                    raise FilterDataNotLatestError("the consumer's consumer filter data not latest")
                matches = record_filter(data.compiled)
        if matches is not None and not self.filters.enabled:
            raise ServerSystemError(
                f"The broker does not support consumer to filter message by {expression_type}"
            )
        slave = self.store.is_slave
        if first_run and h.sys_flag & _COMMIT and not slave:
            # The piggy-backed progress is stored once the pull passed its checks, and only on
            # its first run (a woken long poll does not commit again); never on a slave, whose
            # offsets come from its master (and from explicit commits while the master is away).
            self.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        result = self.store.get_messages(
            h.consumer_group, h.topic, h.queue_id, h.queue_offset, h.max_msg_nums, codes, matches
        )
        status = result.status
        if status in (GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.NO_MATCHED_LOGIC_QUEUE):
            code = ResponseCode.PULL_OFFSET_MOVED if h.queue_offset != 0 else ResponseCode.PULL_NOT_FOUND
        else:
            code = _STATUS_CODES.get(status, ResponseCode.SYSTEM_ERROR)
        if code == ResponseCode.PULL_NOT_FOUND and first_run and h.sys_flag & _SUSPEND:
            hold_ms = (
                h.suspend_timeout_millis if config.long_polling_enable else config.short_polling_time_mills
            )
            self.long_polling.hold(
                conn, cmd, h.topic, h.queue_id, h.queue_offset, codes, hold_ms, self.repull
            )
            return None
        # RocketMQ's rule: with slaveReadEnable, a consumer reading cold data is sent to the
        # group's whichBrokerWhenConsumeSlowly, any other to the group's brokerId; else master.
        suggest = 0
        if config.slave_read_enable:
            suggest = (
                group.which_broker_when_consume_slowly
                if result.suggest_pulling_from_slave
                else group.broker_id
            )
        if code == ResponseCode.PULL_OFFSET_MOVED and slave and not self.store.config.offset_check_in_slave:
            # A slave does not correct offsets: try again, from the broker the group reads.
            return cmd.response(
                ResponseCode.PULL_RETRY_IMMEDIATELY,
                status.name,
                {
                    "suggestWhichBrokerId": group.broker_id,
                    "nextBeginOffset": result.next_begin_offset,
                    "minOffset": result.min_offset,
                    "maxOffset": result.max_offset,
                },
            )
        fields = {
            "suggestWhichBrokerId": suggest,
            "nextBeginOffset": result.next_begin_offset,
            "minOffset": result.min_offset,
            "maxOffset": result.max_offset,
        }
        if code == ResponseCode.SUCCESS:
            self.stats.on_get(h.consumer_group, h.topic, result.message_count, result.buffer_total_size)
            cold = self.cold
            if cold is not None and cold.enabled:
                cold.account(h.consumer_group, result.buffers)
            return cmd.response(code, status.name, fields, b"".join(result.buffers))
        if code == ResponseCode.PULL_OFFSET_MOVED:
            self._offset_moved_event(h, result)
        return cmd.response(code, status.name, fields)

    def _offset_moved_event(self, h: PullMessageRequestHeader, result: GetResult) -> None:
        """Record the correction as a message on OFFSET_MOVED_EVENT, as RocketMQ masters do."""
        body = fastjson.dumps(
            {
                "consumerGroup": h.consumer_group,
                "messageQueue": {
                    "brokerName": self.config.broker_name,
                    "queueId": h.queue_id,
                    "topic": h.topic,
                },
                "offsetNew": result.next_begin_offset,
                "offsetRequest": h.queue_offset,
            }
        )
        props = {PropertyKey.TAGS: h.consumer_group, PropertyKey.KEYS: h.consumer_group}
        writer = self.writer
        writer.put(writer.build(OFFSET_MOVED_EVENT, 0, body, props, born_host=writer.store_host))
