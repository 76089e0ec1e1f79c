"""Bodies of the operator requests: what the Java client and broker write decodes, and what
ours writes reads back the same (queue-keyed maps with object keys, fastjson style)."""

from __future__ import annotations

from aiorocketmq.protocol import fastjson
from aiorocketmq.protocol.admin_requests import (
    ConsumeQueueData,
    ConsumerRunningInfo,
    ConsumeStatsList,
    ProcessQueueInfo,
    QueryConsumeQueueResponseBody,
)
from aiorocketmq.protocol.body import ConsumeStats, MessageQueue, OffsetWrapper

#: A Java 4.9 client's GET_CONSUMER_RUNNING_INFO answer (fastjson: object keys, enum and long
#: property values).
JAVA_RUNNING_INFO = (
    b'{"jstack":null,"mqTable":{{"brokerName":"broker-a","queueId":1,"topic":"T"}:'
    b'{"cachedMsgCount":2,"commitOffset":7,"droped":false,"locked":false,"lastPullTimestamp":1700000000000}},'
    b'"properties":{"PROP_CONSUME_TYPE":"CONSUME_PASSIVELY","PROP_CONSUMER_START_TIMESTAMP":1700000000000,'
    b'"PROP_CONSUMEORDERLY":false},"statusTable":{"T":{"pullRT":1.5,"pullTPS":2.0,"consumeRT":0.5,'
    b'"consumeOKTPS":3.0,"consumeFailedTPS":0.0,"consumeFailedMsgs":0}},'
    b'"subscriptionSet":[{"classFilterMode":false,"codeSet":[],"expressionType":"TAG","subString":"*",'
    b'"subVersion":1,"tagsSet":[],"topic":"T"}]}'
)


def test_java_running_info_decodes() -> None:
    info = ConsumerRunningInfo.decode(JAVA_RUNNING_INFO)
    queue = MessageQueue(topic="T", broker_name="broker-a", queue_id=1)
    assert info.mq_table[queue].commit_offset == 7 and info.mq_table[queue].cached_msg_count == 2
    assert info.properties == {
        "PROP_CONSUME_TYPE": "CONSUME_PASSIVELY",
        "PROP_CONSUMER_START_TIMESTAMP": "1700000000000",
        "PROP_CONSUMEORDERLY": "false",
    }
    assert info.status_table["T"].consume_ok_tps == 3.0
    assert [s.topic for s in info.subscription_set] == ["T"]


def test_running_info_round_trip_keeps_object_keys() -> None:
    queue = MessageQueue(topic="T", broker_name="b", queue_id=3)
    info = ConsumerRunningInfo(properties={"a": "1"}, mq_table={queue: ProcessQueueInfo(commit_offset=9)})
    wire = info.encode()
    assert b'{{"brokerName":"b","queueId":3,"topic":"T"}:{' in wire
    back = ConsumerRunningInfo.decode(wire)
    assert back.mq_table[queue].commit_offset == 9 and back.properties == {"a": "1"}


def test_consume_stats_list_round_trip() -> None:
    queue = MessageQueue(topic="T", broker_name="b", queue_id=0)
    stats = ConsumeStats(
        offset_table={queue: OffsetWrapper(broker_offset=5, consumer_offset=2)}, consume_tps=1.5
    )
    body = ConsumeStatsList(consume_stats_list=[{"g": [stats]}], broker_addr="10.0.0.1:10911", total_diff=3)
    raw = body.encode()
    fastjson.loads(raw)  # valid (fastjson-dialect) JSON
    back = ConsumeStatsList.decode(raw)
    assert back.broker_addr == "10.0.0.1:10911" and back.total_diff == 3
    [[got]] = [entry["g"] for entry in back.consume_stats_list]
    assert got.offset_table[queue].consumer_offset == 2 and got.consume_tps == 1.5


def test_consume_queue_body_reads_javas_field_names() -> None:
    body = QueryConsumeQueueResponseBody.decode(
        b'{"maxQueueIndex":2,"minQueueIndex":0,"queueData":[{"bitMap":null,"eval":false,'
        b'"extendDataJson":null,"msg":null,"physicOffset":189,"physicSize":190,"tagsCode":42}]}'
    )
    assert body.queue_data == [ConsumeQueueData(physic_offset=189, physic_size=190, tags_code=42)]
    assert (body.min_queue_index, body.max_queue_index) == (0, 2)
