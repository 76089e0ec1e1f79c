"""Header models (docs/protocol.md §3): lenient reading of every client's extFields, errors that
name the field, and the SEND_MESSAGE V1/V2 pair."""

from __future__ import annotations

import pytest

from aiorocketmq.protocol.codes import RequestCode, SerializeType
from aiorocketmq.protocol.command import FrameDecoder, RemotingCommand
from aiorocketmq.protocol.errors import ProtocolError
from aiorocketmq.protocol.headers import (
    ConsumerSendMsgBackRequestHeader,
    EndTransactionRequestHeader,
    GetRouteInfoRequestHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryMessageRequestHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    SendMessageRequestHeader,
    SendMessageRequestHeaderV2,
    SendMessageResponseHeader,
    UnregisterClientRequestHeader,
)

JAVA_V2 = {
    "a": "PG",
    "b": "TopicTest",
    "c": "TBW102",
    "d": "4",
    "e": "3",
    "f": "0",
    "g": "1700000000000",
    "h": "0",
    "i": "UNIQ_KEY\x01ABC\x02WAIT\x01true",
    "j": "0",
    "k": "false",
    "m": "false",
    "n": "broker-a",  # 4.9.6+ brokerName: ignored
    "bname": "broker-a",
}


def test_v2_letters_as_java_writes_them() -> None:
    header = SendMessageRequestHeaderV2.from_fields(JAVA_V2)
    assert header.producer_group == "PG"
    assert header.topic == "TopicTest"
    assert header.default_topic == "TBW102"
    assert header.default_topic_queue_nums == 4
    assert header.queue_id == 3
    assert header.sys_flag == 0
    assert header.born_timestamp == 1_700_000_000_000
    assert header.flag == 0
    assert header.properties == "UNIQ_KEY\x01ABC\x02WAIT\x01true"
    assert header.reconsume_times == 0
    assert header.unit_mode is False
    assert header.max_reconsume_times is None
    assert header.batch is False


def test_v2_from_cpp_numbers_and_0_1_strings() -> None:
    fields = {"a": "PG", "b": "T", "c": "TBW102", "d": 4, "e": 1, "f": 0, "g": "1700000000000", "h": 0}
    header = SendMessageRequestHeaderV2.from_fields({**fields, "j": "0", "k": "1", "l": 16, "m": "1"})
    assert header.unit_mode is True
    assert header.batch is True
    assert header.max_reconsume_times == 16
    assert header.queue_id == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        *[("true", True), ("TRUE", True), (" True ", True), ("1", True), (True, True), (1, True)],
        *[("false", False), ("0", False), ("yes", False), ("", False), (False, False), (0, False)],
    ],
)
def test_wire_booleans(text: object, expected: bool) -> None:
    header = SendMessageRequestHeaderV2.from_fields({"a": "G", "b": "T", "e": "0", "g": "0", "m": text})
    assert header.batch is expected


def test_missing_fields_are_named_with_wire_and_field_names() -> None:
    with pytest.raises(ProtocolError) as info:
        SendMessageRequestHeaderV2.from_fields({"a": "PG", "e": "1", "g": "1"})
    assert str(info.value) == "bad SendMessageRequestHeaderV2: missing field 'b' (topic)"
    with pytest.raises(ProtocolError, match=r"missing field 'consumerGroup' \(consumer_group\)"):
        PullMessageRequestHeader.from_fields(
            {"topic": "T", "queueId": "0", "queueOffset": "0", "maxMsgNums": "32", "sysFlag": "2"}
        )
    with pytest.raises(ProtocolError, match="missing field 'topic'"):
        GetRouteInfoRequestHeader.from_fields(None)
    with pytest.raises(ProtocolError, match=r"missing field 'clientID' \(client_id\)"):
        UnregisterClientRequestHeader.from_fields({"producerGroup": "PG"})


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"queueId": "abc"}, r"field 'queueId' \(queue_id\): Input should be a valid integer.*\(got 'abc'\)"),
        (
            {"queueId": "2147483648"},
            r"field 'queueId' \(queue_id\): Input should be less than or equal to 2147483647",
        ),
        (
            {"queueOffset": "9223372036854775808"},
            r"field 'queueOffset' \(queue_offset\): Input should be less than",
        ),
        (
            {"queueOffset": "-9223372036854775809"},
            r"field 'queueOffset' \(queue_offset\): Input should be greater",
        ),
        ({"sysFlag": "1.5"}, r"field 'sysFlag' \(sys_flag\)"),
        ({"topic": ["T"]}, r"field 'topic': Input should be a valid string"),
    ],
)
def test_wrong_field_types_are_named(fields: dict[str, object], message: str) -> None:
    good = {
        "consumerGroup": "G",
        "topic": "T",
        "queueId": "0",
        "queueOffset": "0",
        "maxMsgNums": "32",
        "sysFlag": "2",
    }
    with pytest.raises(ProtocolError, match=message):
        PullMessageRequestHeader.from_fields({**good, **fields})


def test_int64_bounds_are_accepted() -> None:
    good = {"consumerGroup": "G", "topic": "T", "queueId": "-2147483648", "maxMsgNums": "32", "sysFlag": "2"}
    header = PullMessageRequestHeader.from_fields({**good, "queueOffset": "9223372036854775807"})
    assert header.queue_offset == 2**63 - 1
    assert header.queue_id == -(2**31)


def test_v2_to_v1_and_back() -> None:
    v2 = SendMessageRequestHeaderV2.from_fields({**JAVA_V2, "l": "16", "m": "true"})
    v1 = v2.to_v1()
    assert isinstance(v1, SendMessageRequestHeader)
    assert v1.to_fields() == {
        "producerGroup": "PG",
        "topic": "TopicTest",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4,
        "queueId": 3,
        "sysFlag": 0,
        "bornTimestamp": 1_700_000_000_000,
        "flag": 0,
        "properties": "UNIQ_KEY\x01ABC\x02WAIT\x01true",
        "reconsumeTimes": 0,
        "unitMode": False,
        "batch": True,
        "maxReconsumeTimes": 16,
    }
    back = v1.to_v2()
    assert isinstance(back, SendMessageRequestHeaderV2)
    assert back == v2
    assert back.to_fields() == {
        "a": "PG",
        "b": "TopicTest",
        "c": "TBW102",
        "d": 4,
        "e": 3,
        "f": 0,
        "g": 1_700_000_000_000,
        "h": 0,
        "i": "UNIQ_KEY\x01ABC\x02WAIT\x01true",
        "j": 0,
        "k": False,
        "l": 16,
        "m": True,
    }


def test_v1_from_full_names_equals_v2_from_letters() -> None:
    v1 = SendMessageRequestHeader.from_fields(
        {"producerGroup": "PG", "topic": "T", "queueId": "2", "bornTimestamp": "5", "batch": "1"}
    )
    v2 = SendMessageRequestHeaderV2.from_fields({"a": "PG", "b": "T", "e": 2, "g": 5, "m": "true"})
    assert v1.to_v2() == v2
    assert v2.to_v1() == v1


def test_header_to_a_json_frame_and_back() -> None:
    # Output rule (§1.3): every value a string on the wire; the model reads them back.
    v2 = SendMessageRequestHeaderV2.from_fields(JAVA_V2)
    cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, v2.to_fields(), b"body")
    (decoded,) = FrameDecoder().feed(cmd.encode())
    assert decoded.ext_fields["d"] == "4"
    assert decoded.ext_fields["k"] == "false"
    assert "l" not in decoded.ext_fields  # None fields are left out
    assert SendMessageRequestHeaderV2.from_fields(decoded.ext_fields) == v2


def test_send_response_header_on_every_serialization() -> None:
    header = SendMessageResponseHeader(
        msg_id="7F00000100002A9F0000000000001A2B",
        queue_id=3,
        queue_offset=42,
        msg_region="DefaultRegion",
        trace_on="true",
    )
    fields = header.to_fields()
    assert fields == {
        "msgId": "7F00000100002A9F0000000000001A2B",
        "queueId": 3,
        "queueOffset": 42,
        "MSG_REGION": "DefaultRegion",
        "TRACE_ON": "true",
    }
    for st in SerializeType:
        request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, serialize_type=st)
        (response,) = FrameDecoder().feed(request.response(ext_fields=fields).encode())
        assert response.serialize_type == st
        if st != SerializeType.MSGPACK:
            assert response.ext_fields["queueId"] == "3"
            assert response.ext_fields["queueOffset"] == "42"
        assert SendMessageResponseHeader.from_fields(response.ext_fields) == header


def test_pull_response_header_always_carries_its_four_offsets() -> None:
    header = PullMessageResponseHeader(next_begin_offset=10, min_offset=0, max_offset=10)
    assert header.to_fields() == {
        "suggestWhichBrokerId": 0,
        "nextBeginOffset": 10,
        "minOffset": 0,
        "maxOffset": 10,
    }


def test_defaults_and_optional_fields() -> None:
    assert RegisterBrokerResponseHeader.from_fields(None).to_fields() == {}
    header = RegisterBrokerRequestHeader.from_fields(
        {
            "brokerName": "b",
            "brokerAddr": "10.0.0.1:10911",
            "clusterName": "C",
            "brokerId": "0",
            "compressed": "true",
            "bodyCrc32": 12,
        }
    )
    assert header.compressed is True
    assert header.body_crc32 == 12
    assert header.ha_server_addr == ""
    back = ConsumerSendMsgBackRequestHeader.from_fields(
        {
            "offset": 100,
            "group": "G",
            "delayLevel": 0,
            "originMsgId": "X",
            "unitMode": False,
            "maxReconsumeTimes": 16,
        }
    )
    assert (back.offset, back.delay_level, back.unit_mode, back.max_reconsume_times) == (100, 0, False, 16)
    end = EndTransactionRequestHeader.from_fields(
        {
            "producerGroup": "PG",
            "tranStateTableOffset": "1",
            "commitLogOffset": "2",
            "commitOrRollback": "8",
            "msgId": "U",
        }
    )
    assert end.from_transaction_check is False
    query = QueryMessageRequestHeader.from_fields(
        {
            "topic": "T",
            "key": "k",
            "maxNum": "32",
            "beginTimestamp": "0",
            "endTimestamp": "9",
            "_UNIQUE_KEY_QUERY": "true",
        }
    )
    assert query.unique_key_query is True
    route = GetRouteInfoRequestHeader.from_fields({"topic": "T", "acceptStandardJsonOnly": "true"})
    assert route.accept_standard_json_only is True
    assert GetRouteInfoRequestHeader.from_fields({"topic": "T"}).accept_standard_json_only is None
