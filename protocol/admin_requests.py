"""Headers and bodies of the operator requests behind ``mqadmin``'s maintenance, statistics and
diagnosis commands: group-offset cloning, broker statistics, consume-queue inspection, the
consumers' running info relayed by a broker, producer tables and broker write permission on the
name servers. Wire names are RocketMQ 4.9's (docs/protocol.md §3 and §5 conventions).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from . import fastjson
from .body import Body, ConsumeStats, MessageQueue, SubscriptionData, _queue_keyed
from .headers import Header, Int32, Int64, WireBool

# -- headers --------------------------------------------------------------------------------


class CloneGroupOffsetRequestHeader(Header):
    """CLONE_GROUP_OFFSET (314): copy ``srcGroup``'s offsets on ``topic`` to ``destGroup``."""

    src_group: str = Field(alias="srcGroup")
    dest_group: str = Field(alias="destGroup")
    topic: str | None = None
    offline: WireBool = False


class ViewBrokerStatsDataRequestHeader(Header):
    """VIEW_BROKER_STATS_DATA (315): ``statsName`` such as ``TOPIC_PUT_NUMS`` and its key."""

    stats_name: str = Field(alias="statsName")
    stats_key: str = Field(alias="statsKey")


class GetConsumeStatsInBrokerHeader(Header):
    """GET_BROKER_CONSUME_STATS (317)."""

    is_order: WireBool = Field(False, alias="isOrder")


class GetConsumerRunningInfoRequestHeader(Header):
    """GET_CONSUMER_RUNNING_INFO (307): asked of a broker, which relays it to the client."""

    consumer_group: str = Field(alias="consumerGroup")
    client_id: str = Field(alias="clientId")
    jstack_enable: WireBool = Field(False, alias="jstackEnable")


class QueryConsumeQueueRequestHeader(Header):
    """QUERY_CONSUME_QUEUE (321): ``count`` entries of a queue from ``index``."""

    topic: str
    queue_id: Int32 = Field(alias="queueId")
    index: Int64
    count: Int32
    consumer_group: str | None = Field(None, alias="consumerGroup")


class AddWritePermOfBrokerRequestHeader(Header):
    """ADD_WRITE_PERM_OF_BROKER (327), to a name server."""

    broker_name: str = Field(alias="brokerName")


class AddWritePermOfBrokerResponseHeader(Header):
    add_topic_count: Int32 = Field(alias="addTopicCount")


# -- bodies ---------------------------------------------------------------------------------


class BrokerStatsItem(Body):
    sum: int = 0
    tps: float = 0.0
    avgpt: float = 0.0


class BrokerStatsData(Body):
    """VIEW_BROKER_STATS_DATA's answer: one counter over the last minute, hour and day."""

    stats_minute: BrokerStatsItem = Field(default_factory=BrokerStatsItem, alias="statsMinute")
    stats_hour: BrokerStatsItem = Field(default_factory=BrokerStatsItem, alias="statsHour")
    stats_day: BrokerStatsItem = Field(default_factory=BrokerStatsItem, alias="statsDay")


class ConsumeStatsList(Body):
    """GET_BROKER_CONSUME_STATS's answer: per group, the ConsumeStats of each of its topics."""

    consume_stats_list: list[dict[str, list[ConsumeStats]]] = Field(
        default_factory=list, alias="consumeStatsList"
    )
    broker_addr: str | None = Field(None, alias="brokerAddr")
    total_diff: int = Field(0, alias="totalDiff")

    def encode(self) -> bytes:
        # ConsumeStats carries a queue-keyed map, which only its own encoder writes right.
        groups = b",".join(
            b"{"
            + b",".join(
                fastjson.dumps(group) + b":[" + b",".join(s.encode() for s in stats) + b"]"
                for group, stats in entry.items()
            )
            + b"}"
            for entry in self.consume_stats_list
        )
        addr = b'"brokerAddr":' + fastjson.dumps(self.broker_addr) + b"," if self.broker_addr else b""
        return (
            b"{"
            + addr
            + b'"consumeStatsList":['
            + groups
            + b'],"totalDiff":'
            + str(self.total_diff).encode()
            + b"}"
        )


class ConsumeQueueData(Body):
    physic_offset: int = Field(0, alias="physicOffset")
    physic_size: int = Field(0, alias="physicSize")
    tags_code: int = Field(0, alias="tagsCode")
    extend_data_json: str | None = Field(None, alias="extendDataJson")
    bit_map: str | None = Field(None, alias="bitMap")
    eval: bool = False
    msg: str | None = None


class QueryConsumeQueueResponseBody(Body):
    subscription_data: SubscriptionData | None = Field(None, alias="subscriptionData")
    filter_data: str | None = Field(None, alias="filterData")
    queue_data: list[ConsumeQueueData] = Field(default_factory=list, alias="queueData")
    max_queue_index: int = Field(0, alias="maxQueueIndex")
    min_queue_index: int = Field(0, alias="minQueueIndex")


class ProducerInfo(Body):
    client_id: str = Field(alias="clientId")
    remote_ip: str = Field("", alias="remoteIP")
    language: str = "OTHER"
    version: int = 0
    last_update_timestamp: int = Field(0, alias="lastUpdateTimestamp")


class ProducerTableInfo(Body):
    """GET_ALL_PRODUCER_INFO (328)'s answer: producer group -> its connected producers."""

    data: dict[str, list[ProducerInfo]] = Field(default_factory=dict)


class ProcessQueueInfo(Body):
    """One queue a consumer holds, as GET_CONSUMER_RUNNING_INFO reports it."""

    commit_offset: int = Field(0, alias="commitOffset")
    cached_msg_min_offset: int = Field(0, alias="cachedMsgMinOffset")
    cached_msg_max_offset: int = Field(0, alias="cachedMsgMaxOffset")
    cached_msg_count: int = Field(0, alias="cachedMsgCount")
    cached_msg_size_in_mib: int = Field(0, alias="cachedMsgSizeInMiB")
    transaction_msg_min_offset: int = Field(0, alias="transactionMsgMinOffset")
    transaction_msg_max_offset: int = Field(0, alias="transactionMsgMaxOffset")
    transaction_msg_count: int = Field(0, alias="transactionMsgCount")
    locked: bool = False
    try_unlock_times: int = Field(0, alias="tryUnlockTimes")
    last_lock_timestamp: int = Field(0, alias="lastLockTimestamp")
    droped: bool = False
    last_pull_timestamp: int = Field(0, alias="lastPullTimestamp")
    last_consume_timestamp: int = Field(0, alias="lastConsumeTimestamp")


class ConsumeStatus(Body):
    pull_rt: float = Field(0.0, alias="pullRT")
    pull_tps: float = Field(0.0, alias="pullTPS")
    consume_rt: float = Field(0.0, alias="consumeRT")
    consume_ok_tps: float = Field(0.0, alias="consumeOKTPS")
    consume_failed_tps: float = Field(0.0, alias="consumeFailedTPS")
    consume_failed_msgs: int = Field(0, alias="consumeFailedMsgs")


def _text_values(value: Any) -> Any:
    # Java's Properties hold strings, but fastjson writes the enum and long values it was given.
    if isinstance(value, dict):
        return {str(k): v if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else str(v)
                for k, v in value.items()}  # fmt: skip
    return value


#: ``ConsumerRunningInfo.properties`` keys the tools read.
PROP_NAMESERVER_ADDR = "PROP_NAMESERVER_ADDR"
PROP_THREADPOOL_CORE_SIZE = "PROP_THREADPOOL_CORE_SIZE"
PROP_CONSUME_ORDERLY = "PROP_CONSUMEORDERLY"
PROP_CONSUME_TYPE = "PROP_CONSUME_TYPE"
PROP_CLIENT_VERSION = "PROP_CLIENT_VERSION"
PROP_CONSUMER_START_TIMESTAMP = "PROP_CONSUMER_START_TIMESTAMP"


class ConsumerRunningInfo(Body):
    """What a consumer says about itself (GET_CONSUMER_RUNNING_INFO): its settings, its
    subscriptions, the queues it holds and its consume rates per topic."""

    properties: Annotated[dict[str, str], BeforeValidator(_text_values)] = Field(default_factory=dict)
    subscription_set: list[SubscriptionData] = Field(default_factory=list, alias="subscriptionSet")
    mq_table: Annotated[dict[MessageQueue, ProcessQueueInfo], BeforeValidator(_queue_keyed)] = Field(
        default_factory=dict, alias="mqTable"
    )
    status_table: dict[str, ConsumeStatus] = Field(default_factory=dict, alias="statusTable")
    jstack: str | None = None

    def encode(self) -> bytes:
        # fastjson writes the queue-keyed table with object keys, as the Java client does.
        queues = b",".join(
            fastjson.dumps(mq.to_wire()) + b":" + fastjson.dumps(info.to_wire())
            for mq, info in sorted(self.mq_table.items())
        )
        rest = {
            "properties": self.properties,
            "statusTable": {k: v.to_wire() for k, v in sorted(self.status_table.items())},
            "subscriptionSet": [s.to_wire() for s in self.subscription_set],
        }
        if self.jstack is not None:
            rest["jstack"] = self.jstack
        text = fastjson.dumps(rest)
        return b'{"mqTable":{' + queues + b"}," + text[1:]


class ConsumeMessageDirectlyResultRequestHeader(Header):
    """CONSUME_MESSAGE_DIRECTLY (309): a broker hands the stored message (body) to one client
    of the group, which consumes it at once and says how it went."""

    consumer_group: str = Field(alias="consumerGroup")
    client_id: str | None = Field(None, alias="clientId")
    msg_id: str | None = Field(None, alias="msgId")
    broker_name: str | None = Field(None, alias="brokerName")


#: Java's ``CMResult`` names.
CR_SUCCESS = "CR_SUCCESS"
CR_LATER = "CR_LATER"
CR_THROW_EXCEPTION = "CR_THROW_EXCEPTION"
CR_RETURN_NULL = "CR_RETURN_NULL"


class ConsumeMessageDirectlyResult(Body):
    order: bool = False
    auto_commit: bool = Field(True, alias="autoCommit")
    consume_result: str | None = Field(None, alias="consumeResult")
    remark: str | None = None
    spent_time_mills: int = Field(0, alias="spentTimeMills")


class QueryCorrectionOffsetHeader(Header):
    """QUERY_CORRECTION_OFFSET (308): per queue, the smallest offset of the topic's groups
    but ``filterGroups`` (comma-separated), unless ``compareGroup`` is already behind it."""

    filter_groups: str | None = Field(None, alias="filterGroups")
    compare_group: str = Field(alias="compareGroup")
    topic: str


def _int_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {int(k): v for k, v in value.items()}
    return value


class QueryCorrectionOffsetBody(Body):
    correction_offsets: Annotated[dict[int, int], BeforeValidator(_int_keys)] = Field(
        default_factory=dict, alias="correctionOffsets"
    )

    def encode(self) -> bytes:
        # fastjson writes Integer map keys bare.
        return fastjson.dumps(
            {"correctionOffsets": dict(sorted(self.correction_offsets.items()))}, legacy_int_keys=True
        )
