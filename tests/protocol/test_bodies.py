"""JSON bodies (docs/protocol.md §5) in every dialect real peers write: fastjson's unquoted and
object map keys, C++ ordinals and string numbers, ali-ons' insertion order; and the two
REGISTER_BROKER body forms."""

from __future__ import annotations

import struct
import zlib

import pytest

from aiorocketmq.protocol import fastjson
from aiorocketmq.protocol.body import (
    BrokerData,
    ClusterInfo,
    ConsumeFromWhere,
    ConsumerOffsetTable,
    ConsumeStats,
    ConsumeType,
    DataVersion,
    DelayOffsetTable,
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    KVTable,
    LockBatchRequestBody,
    MessageModel,
    MessageQueue,
    OffsetWrapper,
    QueueData,
    RegisterBrokerBody,
    ResetOffsetBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
    TopicStatsTable,
)
from aiorocketmq.protocol.errors import ProtocolError

# §5.2: a route as Java 4.9 writes it for a client older than V4_9_4.
ROUTE_LEGACY = (
    b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911"},"brokerName":"broker-a","cluster":"DefaultCluster"}],'
    b'"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,'
    b'"topicSysFlag":0,"writeQueueNums":4}]}'
)
ROUTE_STANDARD = ROUTE_LEGACY.replace(b'{0:"10.0.0.1:10911"}', b'{"0":"10.0.0.1:10911"}')


def route() -> TopicRouteData:
    return TopicRouteData(
        queue_datas=[QueueData(broker_name="broker-a", perm=6, read_queue_nums=4, write_queue_nums=4)],
        broker_datas=[
            BrokerData(cluster="DefaultCluster", broker_name="broker-a", broker_addrs={0: "10.0.0.1:10911"})
        ],
    )


def test_route_legacy_and_standard_bytes_match_the_spec() -> None:
    assert route().encode(standard_json=False) == ROUTE_LEGACY
    assert route().encode() == ROUTE_STANDARD
    assert route().encode(standard_json=True) == ROUTE_STANDARD


@pytest.mark.parametrize("data", [ROUTE_LEGACY, ROUTE_STANDARD, ROUTE_LEGACY + b"\n"])
def test_route_decodes_from_both_forms(data: bytes) -> None:
    decoded = TopicRouteData.decode(data)
    assert decoded == route()
    assert decoded.broker_datas[0].master_addr() == "10.0.0.1:10911"
    assert decoded.broker_datas[0].broker_addrs == {0: "10.0.0.1:10911"}


def test_route_with_order_conf_slaves_and_old_topic_syn_flag() -> None:
    data = (
        b'{"brokerDatas":[{"brokerAddrs":{1:"10.0.0.2:10911",0:"10.0.0.1:10911"},"brokerName":"b","cluster":"C"}],'
        b'"filterServerTable":{"10.0.0.1:10911":["10.0.0.9:1"]},"orderTopicConf":"b:4",'
        b'"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":8,"topicSynFlag":2,"writeQueueNums":8}]}'
    )
    decoded = TopicRouteData.decode(data)
    assert decoded.order_topic_conf == "b:4"
    assert decoded.queue_datas[0].topic_sys_flag == 2
    assert decoded.filter_server_table == {"10.0.0.1:10911": ["10.0.0.9:1"]}
    # Output sorts broker ids and spells the flag the 4.9 way.
    assert decoded.encode(standard_json=False) == (
        b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"b","cluster":"C"}],'
        b'"filterServerTable":{"10.0.0.1:10911":["10.0.0.9:1"]},"orderTopicConf":"b:4",'
        b'"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":8,"topicSysFlag":2,"writeQueueNums":8}]}'
    )


CLUSTER_LEGACY = (
    b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},'
    b'"brokerName":"broker-a","cluster":"DefaultCluster"}},"clusterAddrTable":{"DefaultCluster":["broker-a"]}}'
)


def test_cluster_info_is_legacy_by_default() -> None:
    info = ClusterInfo.decode(CLUSTER_LEGACY)
    assert info.broker_addr_table["broker-a"].broker_addrs == {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}
    assert info.cluster_addr_table == {"DefaultCluster": ["broker-a"]}
    assert info.encode() == CLUSTER_LEGACY
    standard = info.encode(standard_json=True)
    assert standard == CLUSTER_LEGACY.replace(b"{0:", b'{"0":').replace(b",1:", b',"1":')
    assert ClusterInfo.decode(standard) == info


# -- heartbeats (§5.6) --------------------------------------------------------------------------

JAVA_HEARTBEAT = (
    b'{"clientID":"10.0.0.5@4242#8123","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET",'
    b'"consumeType":"CONSUME_PASSIVELY","groupName":"G","messageModel":"CLUSTERING","subscriptionDataSet":'
    b'[{"classFilterMode":false,"codeSet":[],"expressionType":"TAG","subString":"*","subVersion":1700000000000,'
    b'"tagsSet":[],"topic":"T"}],"unitMode":false}],"producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"}]}'
)

CPP_HEARTBEAT = (
    b'{"clientID":"4242-10.0.0.5@DEFAULT","consumerDataSet":[{"consumeFromWhere":5,"consumeType":1,'
    b'"groupName":"G","messageModel":0,"subscriptionDataSet":[{"codeSet":[2598919,2598920],'
    b'"subString":"TagA || TagB","subVersion":"1700000000000","tagsSet":["TagA","TagB"],"topic":"T"},'
    b'{"subString":"*","subVersion":"1700000000001","topic":"%RETRY%G"}]}]}\n'
)

ALI_ONS_HEARTBEAT = (
    b'{"clientID":"10.0.0.5@4242","producerDataSet":[],"consumerDataSet":[{"groupName":"G",'
    b'"consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET",'
    b'"unitMode":false,"subscriptionDataSet":[{"topic":"T","subString":"*","classFilterMode":false,'
    b'"tagsSet":[],"codeSet":[],"subVersion":1700000000000}]}]}'
)


def test_java_heartbeat() -> None:
    data = HeartbeatData.decode(JAVA_HEARTBEAT)
    assert data.client_id == "10.0.0.5@4242#8123"
    assert [p.group_name for p in data.producer_data_set] == ["CLIENT_INNER_PRODUCER"]
    (consumer,) = data.consumer_data_set
    assert consumer.consume_type is ConsumeType.CONSUME_PASSIVELY
    assert consumer.message_model is MessageModel.CLUSTERING
    assert consumer.consume_from_where is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    (sub,) = consumer.subscription_data_set
    assert (sub.topic, sub.sub_string, sub.sub_version, sub.expression_type) == (
        "T",
        "*",
        1_700_000_000_000,
        "TAG",
    )
    # Written back exactly as fastjson writes it: alphabetical at every level.
    assert data.encode() == JAVA_HEARTBEAT


def test_cpp_heartbeat_ordinals_string_sub_version_and_absent_sets() -> None:
    data = HeartbeatData.decode(CPP_HEARTBEAT)
    assert data.client_id == "4242-10.0.0.5@DEFAULT"
    assert data.producer_data_set == []
    (consumer,) = data.consumer_data_set
    assert consumer.consume_type is ConsumeType.CONSUME_PASSIVELY  # ordinal 1
    assert consumer.message_model is MessageModel.BROADCASTING  # ordinal 0
    assert consumer.consume_from_where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP  # ordinal 5
    assert consumer.unit_mode is False
    tags, retry = consumer.subscription_data_set
    assert tags.sub_version == 1_700_000_000_000
    assert tags.tags_set == ["TagA", "TagB"]
    assert tags.code_set == [2598919, 2598920]
    assert tags.expression_type == "TAG"
    assert tags.class_filter_mode is False
    assert retry.topic == "%RETRY%G"
    assert retry.tags_set == [] and retry.code_set == []
    assert retry.sub_version == 1_700_000_000_001


def test_cpp_producer_only_heartbeat() -> None:
    data = HeartbeatData.decode(b'{"clientID":"1-10.0.0.5@DEFAULT","producerDataSet":[{"groupName":"PG"}]}\n')
    assert [p.group_name for p in data.producer_data_set] == ["PG"]
    assert data.consumer_data_set == []


def test_ali_ons_heartbeat() -> None:
    data = HeartbeatData.decode(ALI_ONS_HEARTBEAT)
    (consumer,) = data.consumer_data_set
    assert consumer.consume_type is ConsumeType.CONSUME_PASSIVELY
    assert consumer.subscription_data_set[0].sub_version == 1_700_000_000_000
    assert consumer.subscription_data_set[0].expression_type == "TAG"
    # The three dialects of the same subscription agree once read.
    java = HeartbeatData.decode(JAVA_HEARTBEAT).consumer_data_set[0]
    assert consumer.subscription_data_set == java.subscription_data_set
    assert consumer.consume_from_where == java.consume_from_where


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ((b'"consumeType":1', b'"consumeType":7'), "ConsumeType ordinal 7 out of range"),
        ((b'"consumeType":1', b'"consumeType":"SOMETIMES"'), "consumeType"),
        ((b'"subVersion":"1700000000000"', b'"subVersion":"soon"'), "subVersion"),
        ((b'"clientID":"4242-10.0.0.5@DEFAULT",', b""), "clientID"),
    ],
)
def test_bad_heartbeats(patch: tuple[bytes, bytes], message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        HeartbeatData.decode(CPP_HEARTBEAT.replace(*patch))


# -- registration (§3.1, §5.4) ------------------------------------------------------------------


def registration() -> RegisterBrokerBody:
    return RegisterBrokerBody(
        topic_config_serialize_wrapper=TopicConfigSerializeWrapper(
            topic_config_table={
                "TBW102": TopicConfig(topic_name="TBW102", read_queue_nums=8, write_queue_nums=8, perm=7),
                "TopicTest": TopicConfig(
                    topic_name="TopicTest", read_queue_nums=4, write_queue_nums=4, perm=6
                ),
            },
            data_version=DataVersion(timestamp=1_700_000_000_000, counter=3),
        ),
        filter_server_list=[],
    )


def test_register_broker_body_plain_round_trip() -> None:
    body = registration()
    data = body.encode()
    assert data.startswith(
        b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":3,'
    )
    assert (
        b'"TopicTest":{"attributes":{},"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG",'
        in data
    )
    assert RegisterBrokerBody.decode_registration(data, compressed=False) == body
    assert RegisterBrokerBody.decode_registration(b"", compressed=False) == RegisterBrokerBody()


def test_register_broker_body_compressed_round_trip() -> None:
    body = registration()
    data = body.encode_compressed()
    assert RegisterBrokerBody.decode_registration(data, compressed=True) == body
    # A 4.9 name server takes only five-field lines: attributes stay out of this form.
    body.topic_config_serialize_wrapper.topic_config_table["TopicTest"].attributes = {"message.type": "FIFO"}
    raw = zlib.decompress(body.encode_compressed())
    assert b"TopicTest 4 4 6 SINGLE_TAG" in raw and b"message.type" not in raw


def test_a_5x_compressed_line_carries_attributes_and_bad_ones_are_dropped() -> None:
    """RocketMQ 5 brokers append the attributes as JSON; like Apache's name server, attributes
    that do not parse are dropped and the topic kept."""

    def chunk(b: bytes) -> bytes:
        return struct.pack(">i", len(b)) + b

    lines = (
        b'Typed 2 2 6 SINGLE_TAG {"message.type":"FIFO"}',
        b"Plain 1 1 6 SINGLE_TAG {}",
        b"Odd 1 1 6 SINGLE_TAG {x",
    )
    raw = chunk(b"{}") + struct.pack(">i", len(lines)) + b"".join(chunk(line) for line in lines)
    table = RegisterBrokerBody.decode_registration(
        zlib.compress(raw), compressed=True
    ).topic_config_serialize_wrapper.topic_config_table
    assert table["Typed"].attributes == {"message.type": "FIFO"}
    assert table["Typed"].read_queue_nums == 2
    assert table["Plain"].attributes == table["Odd"].attributes == {}


def test_register_broker_body_compressed_from_the_spec_layout() -> None:
    def chunk(b: bytes) -> bytes:
        return struct.pack(">i", len(b)) + b

    raw = (
        chunk(b'{"counter":3,"timestamp":1700000000000}')
        + struct.pack(">i", 2)
        + chunk(b"TBW102 8 8 7 SINGLE_TAG")
        + chunk(b"TopicTest 4 4 6 SINGLE_TAG")
        + chunk(b'["10.0.0.9:1"]')
    )
    decoded = RegisterBrokerBody.decode_registration(zlib.compress(raw, 9), compressed=True)
    wrapper = decoded.topic_config_serialize_wrapper
    assert wrapper.data_version == DataVersion(timestamp=1_700_000_000_000, counter=3)
    assert wrapper.topic_config_table["TBW102"].perm == 7
    assert wrapper.topic_config_table["TopicTest"].read_queue_nums == 4
    assert decoded.filter_server_list == ["10.0.0.9:1"]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (None, "does not inflate"),
        (struct.pack(">i", 50) + b"{}", "truncated"),
        (
            struct.pack(">i", 2) + b"{}" + struct.pack(">i", 1) + struct.pack(">i", 3) + b"a b",
            "bad compressed topic",
        ),
        (
            struct.pack(">i", 2) + b"{}" + struct.pack(">i", 1) + struct.pack(">i", 9) + b"T x 4 6 S",
            "bad compressed topic",
        ),
        (
            struct.pack(">i", 2) + b"{}" + struct.pack(">i", 1) + struct.pack(">i", 9) + b"\xff 4 4 6 S",
            "bad compressed topic",
        ),
        (
            struct.pack(">i", 2) + b"{}" + struct.pack(">i", 0) + struct.pack(">i", 4) + b'"ab"',
            "filter_server_list",
        ),
        (struct.pack(">i", 2) + b"{}" + struct.pack(">i", 5), "truncated"),
    ],
)
def test_bad_compressed_registrations(raw: bytes | None, message: str) -> None:
    data = b"not zlib" if raw is None else zlib.compress(raw)
    with pytest.raises(ProtocolError, match=message):
        RegisterBrokerBody.decode_registration(data, compressed=True)


# -- fastjson's dialect (§5.1) ------------------------------------------------------------------


def test_fastjson_loads_unquoted_and_object_keys() -> None:
    assert fastjson.loads(b'{0:"a",1:"b",-1:"c"}') == {"0": "a", "1": "b", "-1": "c"}
    assert fastjson.loads("{ 7 : [1, {2:3}] }\n") == {"7": [1, {"2": 3}]}
    assert fastjson.loads(b'{{"brokerName":"b","queueId":0,"topic":"T"}:5}') == {
        '{"brokerName":"b","queueId":0,"topic":"T"}': 5
    }
    assert fastjson.loads(b'{"s":"a\\"}","t":true,"f":false,"n":null}') == {
        "s": 'a"}',
        "t": True,
        "f": False,
        "n": None,
    }
    assert fastjson.loads(b'{"a":1}\n') == {"a": 1}


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"{",
        b'{0:"a"',
        b"{0 0}",
        b'{"a":1,}x',
        b"{0:tru}",
        b'{0:"a\\',
        b"\xff{0:1}",
        b"[" * 300 + b"]" * 300,
    ],
)
def test_fastjson_loads_refuses_broken_text(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        fastjson.loads(data)


def test_fastjson_dumps() -> None:
    assert fastjson.dumps({"a": [1, "x"], "b": {0: "y"}}) == b'{"a":[1,"x"],"b":{"0":"y"}}'
    assert fastjson.dumps({"a": [1, "x"], "b": {0: "y", "k": True}}, legacy_int_keys=True) == (
        b'{"a":[1,"x"],"b":{0:"y","k":true}}'
    )


CONSUMER_OFFSETS = b'{"offsetTable":{"%RETRY%G@G":{0:0},"TopicTest@G":{0:12,1:34,3:56}}}'


def test_consumer_offset_json_style() -> None:
    table = ConsumerOffsetTable.decode(CONSUMER_OFFSETS)
    assert table.offset_table == {"%RETRY%G@G": {0: 0}, "TopicTest@G": {0: 12, 1: 34, 3: 56}}
    assert table.encode() == CONSUMER_OFFSETS
    pretty = (
        b'{\n\t"offsetTable":{\n\t\t"TopicTest@G":{0:12,1:34,3:56\n\t\t}\n\t}\n}'  # fastjson pretty format
    )
    assert ConsumerOffsetTable.decode(pretty).offset_table == {"TopicTest@G": {0: 12, 1: 34, 3: 56}}
    assert ConsumerOffsetTable.decode(b'{"offsetTable":{"T@G":{"2":7}}}').offset_table == {"T@G": {2: 7}}
    delays = DelayOffsetTable.decode(b'{"offsetTable":{1:10,3:30}}')
    assert delays.offset_table == {1: 10, 3: 30}
    assert delays.encode() == b'{"offsetTable":{1:10,3:30}}'


def test_queue_keyed_tables_in_fastjson_object_key_form() -> None:
    data = (
        b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:'
        b'{"lastUpdateTimestamp":5,"maxOffset":10,"minOffset":1}}}'
    )
    stats = TopicStatsTable.decode(data)
    mq = MessageQueue(topic="T", broker_name="b", queue_id=0)
    assert stats.offset_table[mq].max_offset == 10
    assert stats.encode() == data
    consume = ConsumeStats(
        offset_table={mq: OffsetWrapper(broker_offset=10, consumer_offset=4, last_timestamp=1)},
        consume_tps=1.5,
    )
    encoded = consume.encode()
    assert encoded == (
        b'{"consumeTps":1.5,"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:'
        b'{"brokerOffset":10,"consumerOffset":4,"lastTimestamp":1}}}'
    )
    assert ConsumeStats.decode(encoded) == consume
    assert consume.diff_total() == 6
    pairs = ResetOffsetBody.decode(b'{"offsetTable":[[{"brokerName":"b","queueId":0,"topic":"T"},42]]}')
    assert pairs.offset_table == {mq: 42}
    with pytest.raises(ProtocolError, match="offsetTable"):
        ResetOffsetBody.decode(b'{"offsetTable":[1,2]}')


def test_small_bodies() -> None:
    assert KVTable(table={"T": "b:4"}).encode() == b'{"table":{"T":"b:4"}}'
    assert TopicList(topic_list=["a", "b"]).encode() == b'{"topicList":["a","b"]}'
    assert (
        GetConsumerListByGroupResponseBody(consumer_id_list=["id1"]).encode() == b'{"consumerIdList":["id1"]}'
    )
    lock = LockBatchRequestBody.decode(
        b'{"clientId":"c","consumerGroup":"G","mqSet":[{"brokerName":"b","queueId":0,"topic":"T"},'
        b'{"brokerName":"b","queueId":1,"topic":"T"}]}'
    )
    assert lock.client_id == "c"
    assert sorted(lock.mq_set)[1].queue_id == 1


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"{not json", "invalid JSON body"),
        (b"[1]", "bad TopicRouteData body"),
        (b'{"queueDatas":[{"brokerName":"b"}]}', "queueDatas.0.readQueueNums"),
        (
            b'{"brokerDatas":[{"brokerName":"b","cluster":"C","brokerAddrs":{"x":"a"}}]}',
            "brokerDatas.0.brokerAddrs",
        ),
        (b'{"queueDatas":7}', "queueDatas"),
    ],
)
def test_bad_bodies(data: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        TopicRouteData.decode(data)
