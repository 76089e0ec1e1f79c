"""PULL_MESSAGE (11): validations in RocketMQ's order, the subscription from the request or
from heartbeats, the tag-hash filter, the store read, and long polling when nothing is there.

The response body is the stored records themselves, concatenated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiorocketmq.broker.store import GetResult, GetStatus
from aiorocketmq.protocol import fastjson
from aiorocketmq.protocol.body import MessageModel
from aiorocketmq.protocol.codes import Perm, PullSysFlag, RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.headers import PullMessageRequestHeader
from aiorocketmq.protocol.message import PropertyKey, java_hash
from aiorocketmq.protocol.transport import Connection, Handler

from ..topics import OFFSET_MOVED_EVENT

if TYPE_CHECKING:
    from ..server import Broker

_COMMIT = PullSysFlag.COMMIT_OFFSET.value
_SUSPEND = PullSysFlag.SUSPEND.value
_SUBSCRIPTION = PullSysFlag.SUBSCRIPTION.value
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


def handlers(broker: Broker) -> dict[int, Handler]:
    return {RequestCode.PULL_MESSAGE: broker.long_polling.puller.pull}


def parse_tag_codes(expression: str | None) -> frozenset[int] | None:
    """The tag-hash set of a ``tagA || tagB`` expression; ``None`` means "all" (``*`` or empty)."""
    if expression is None:
        return None
    expression = expression.strip()
    if not expression or expression == "*":
        return None
    tags = [tag.strip() for tag in expression.split("||")]
    codes = frozenset(java_hash(tag) for tag in tags if tag)
    return codes or None


class Puller:
    """Serves pulls; also re-runs held pulls when the long-polling service wakes them."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def pull(
        self, conn: Connection, cmd: RemotingCommand, allow_suspend: bool = True
    ) -> RemotingCommand | None:
        h = PullMessageRequestHeader.from_fields(cmd.ext_fields)
        return self._pull(conn, cmd, h, allow_suspend)

    def _pull(
        self, conn: Connection, cmd: RemotingCommand, h: PullMessageRequestHeader, allow_suspend: bool
    ) -> RemotingCommand | None:
        broker = self.broker
        if not broker.readable:
            return cmd.response(
                ResponseCode.NO_PERMISSION,
                f"the broker[{broker.config.broker_ip1}] pulling message is forbidden",
            )
        group = broker.groups.find(h.consumer_group)
        if group is None:
            return cmd.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group [{h.consumer_group}] does not exist",
            )
        if not group.consume_enable:
            return cmd.response(
                ResponseCode.NO_PERMISSION, f"subscription group no permission, {h.consumer_group}"
            )
        topic_config = broker.topics.get(h.topic)
        if topic_config is None:
            return cmd.response(
                ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist, apply first please!"
            )
        if not topic_config.perm & _PERM_READ:
            return cmd.response(
                ResponseCode.NO_PERMISSION, f"the topic[{h.topic}] pulling message is forbidden"
            )
        if h.queue_id < 0 or h.queue_id >= topic_config.read_queue_nums:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{h.queue_id}] is illegal, topic:[{h.topic}] "
                f"topicConfig.readQueueNums:[{topic_config.read_queue_nums}] consumer:[{conn.address}]",
            )
        if h.expression_type not in (None, "", "TAG"):
            return cmd.response(
                ResponseCode.SYSTEM_ERROR, "The broker does not support consumer to filter message by SQL92"
            )
        if h.sys_flag & _SUBSCRIPTION:
            tag_codes = parse_tag_codes(h.subscription)
        else:
            info = broker.clients.consumer_group(h.consumer_group)
            if info is None:
                return cmd.response(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST, "the consumer's group info not exist"
                )
            if info.message_model == MessageModel.BROADCASTING and not group.consume_broadcast_enable:
                return cmd.response(
                    ResponseCode.NO_PERMISSION,
                    f"the consumer group[{h.consumer_group}] can not consume by broadcast way",
                )
            sub = info.subscriptions.get(h.topic)
            if sub is None:
                return cmd.response(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST, "the consumer's subscription not exist"
                )
            if sub.sub_version < h.sub_version:
                return cmd.response(
                    ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest"
                )
            tag_codes = parse_tag_codes(sub.sub_string)
        if allow_suspend and h.sys_flag & _COMMIT:
            # The piggy-backed progress is stored once the pull passed its checks, and only on
            # its first run (a woken long poll does not commit again).
            broker.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        result = broker.store.get_messages(
            h.consumer_group, h.topic, h.queue_id, h.queue_offset, h.max_msg_nums, tag_codes
        )
        status = result.status
        if status in (GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.NO_MATCHED_LOGIC_QUEUE):
            code = ResponseCode.PULL_OFFSET_MOVED if h.queue_offset != 0 else ResponseCode.PULL_NOT_FOUND
        else:
            code = _STATUS_CODES.get(status, ResponseCode.SYSTEM_ERROR)
        if code == ResponseCode.PULL_NOT_FOUND and allow_suspend and h.sys_flag & _SUSPEND:
            config = broker.config
            hold_ms = (
                h.suspend_timeout_millis if config.long_polling_enable else config.short_polling_time_mills
            )
            broker.long_polling.hold(conn, cmd, h.topic, h.queue_id, h.queue_offset, tag_codes, hold_ms)
            return None
        fields = {
            "suggestWhichBrokerId": 0,
            "nextBeginOffset": result.next_begin_offset,
            "minOffset": result.min_offset,
            "maxOffset": result.max_offset,
        }
        if code == ResponseCode.SUCCESS:
            broker.stats.on_get(h.consumer_group, h.topic, result.message_count, result.buffer_total_size)
            return cmd.response(code, status.name, fields, b"".join(result.buffers))
        if code == ResponseCode.PULL_OFFSET_MOVED:
            self._offset_moved_event(h, result)
        return cmd.response(code, status.name, fields)

    def _offset_moved_event(self, h: PullMessageRequestHeader, result: GetResult) -> None:
        """Record the correction as a message on OFFSET_MOVED_EVENT, as RocketMQ masters do."""
        broker = self.broker
        body = fastjson.dumps(
            {
                "consumerGroup": h.consumer_group,
                "messageQueue": {
                    "brokerName": broker.config.broker_name,
                    "queueId": h.queue_id,
                    "topic": h.topic,
                },
                "offsetNew": result.next_begin_offset,
                "offsetRequest": h.queue_offset,
            }
        )
        props = {PropertyKey.TAGS: h.consumer_group, PropertyKey.KEYS: h.consumer_group}
        broker.put(broker.build_message(OFFSET_MOVED_EVENT, 0, body, props, born_host=broker.store_host))
