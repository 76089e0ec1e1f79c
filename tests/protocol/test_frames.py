"""The remoting frame (docs/protocol.md §1.2-1.4): golden bytes assembled by hand from the
layouts, the incremental decoder, and the errors bad input must produce."""

from __future__ import annotations

import json
import struct

import msgpack
import pytest

from aiorocketmq.protocol.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from aiorocketmq.protocol.command import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, RemotingCommand, decode_frame
from aiorocketmq.protocol.errors import ProtocolError
from aiorocketmq.protocol.headers import SendMessageRequestHeader, SendMessageRequestHeaderV2


def frame(header: bytes, body: bytes = b"", serialize_type: int = 0) -> bytes:
    """A complete frame per §1.2: totalLen counts the header-length word, header and body."""
    return (
        struct.pack(">i", 4 + len(header) + len(body))
        + struct.pack(">I", (serialize_type << 24) | len(header))
        + header
        + body
    )


def decode_one(data: bytes, **kwargs: int) -> RemotingCommand:
    commands = FrameDecoder(**kwargs).feed(data)
    assert len(commands) == 1
    return commands[0]


def rocketmq_header(
    code: int,
    language: int,
    version: int,
    opaque: int,
    flag: int,
    remark: bytes | None,
    entries: list[tuple[bytes, bytes]],
) -> bytes:
    """§1.4: 21-byte fixed part (with the remark length), remark, i32 ext length, entries."""
    ext = b"".join(struct.pack(">h", len(k)) + k + struct.pack(">i", len(v)) + v for k, v in entries)
    remark = remark or b""
    return (
        struct.pack(">h", code)
        + struct.pack(">B", language)
        + struct.pack(">h", version)
        + struct.pack(">i", opaque)
        + struct.pack(">i", flag)
        + struct.pack(">i", len(remark))
        + remark
        + struct.pack(">i", len(ext))
        + ext
    )


# -- JSON header (§1.3) -----------------------------------------------------------------------

JAVA_ROUTE_REQUEST = (
    b'{"code":105,"extFields":{"topic":"TopicTest"},"flag":0,"language":"JAVA","opaque":7,'
    b'"serializeTypeCurrentRPC":"JSON","version":407}'
)


def test_json_request_as_java_writes_it_decodes() -> None:
    cmd = decode_one(frame(JAVA_ROUTE_REQUEST))
    assert cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC
    assert cmd.language == "JAVA"
    assert cmd.version == 407
    assert cmd.opaque == 7
    assert cmd.flag == 0
    assert not cmd.is_response and not cmd.is_oneway
    assert cmd.remark is None
    assert cmd.ext_fields == {"topic": "TopicTest"}
    assert cmd.body == b""
    assert cmd.serialize_type == SerializeType.JSON


def test_json_request_encodes_to_the_java_bytes() -> None:
    cmd = RemotingCommand(105, opaque=7, ext_fields={"topic": "TopicTest"}, language="JAVA", version=407)
    assert cmd.encode() == frame(JAVA_ROUTE_REQUEST)


def test_json_response_bytes_with_and_without_remark() -> None:
    request = decode_one(frame(JAVA_ROUTE_REQUEST))
    ok = request.response(body=b"xyz")
    assert ok.encode() == frame(
        b'{"code":0,"extFields":{},"flag":1,"language":"PYTHON","opaque":7,'
        b'"serializeTypeCurrentRPC":"JSON","version":401}',
        b"xyz",
    )
    failed = request.response(ResponseCode.TOPIC_NOT_EXIST, "No topic route info")
    assert failed.encode() == frame(
        b'{"code":17,"extFields":{},"flag":1,"language":"PYTHON","opaque":7,'
        b'"remark":"No topic route info","serializeTypeCurrentRPC":"JSON","version":401}'
    )


def test_json_encoder_writes_every_ext_value_as_a_string() -> None:
    # §1.3 output rule: C++ and Go cannot read numbers or booleans in extFields.
    cmd = RemotingCommand(
        0,
        flag=1,
        ext_fields={"queueId": 3, "queueOffset": 2**40, "unitMode": False, "TRACE_ON": True, "gone": None},
        language="JAVA",
        version=401,
    )
    assert cmd.encode() == frame(
        b'{"code":0,"extFields":{"queueId":"3","queueOffset":"1099511627776","unitMode":"false",'
        b'"TRACE_ON":"true"},"flag":1,"language":"JAVA","opaque":0,'
        b'"serializeTypeCurrentRPC":"JSON","version":401}'
    )


def test_json_header_without_ext_fields_as_java_heartbeat() -> None:
    header = (
        b'{"code":34,"flag":0,"language":"JAVA","opaque":0,"serializeTypeCurrentRPC":"JSON","version":407}'
    )
    body = b'{"clientID":"10.0.0.5@4242"}'
    cmd = decode_one(frame(header, body))
    assert cmd.code == RequestCode.HEART_BEAT
    assert cmd.ext_fields == {}
    assert cmd.body == body


CPP_SEND_V1 = (
    b'{"code":10,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"",'
    b'"batch":"1","bornTimestamp":"1700000000000","defaultTopic":"TBW102","defaultTopicQueueNums":4,'
    b'"flag":0,"producerGroup":"PG","properties":"UNIQ_KEY\\u0001ABC\\u0002WAIT\\u0001true\\u0002",'
    b'"queueId":2,"reconsumeTimes":"0","sysFlag":0,"topic":"T","unitMode":"0"},'
    b'"flag":0,"language":"CPP","opaque":3,"remark":"","version":63}\n'
)


def test_cpp_json_header_with_trailing_newline_numbers_and_0_1_booleans() -> None:
    # jsoncpp's FastWriter appends "\n", counted in the header length.
    assert CPP_SEND_V1.endswith(b"}\n")
    cmd = decode_one(frame(CPP_SEND_V1, b"batch-blob"))
    assert cmd.language == "CPP"
    assert cmd.version == 63
    assert cmd.remark == ""
    assert cmd.ext_fields["queueId"] == "2"
    assert cmd.ext_fields["defaultTopicQueueNums"] == "4"
    assert cmd.ext_fields["batch"] == "1"
    assert all(type(v) is str for v in cmd.ext_fields.values())
    header = SendMessageRequestHeader.from_fields(cmd.ext_fields)
    assert header.queue_id == 2
    assert header.default_topic_queue_nums == 4
    assert header.born_timestamp == 1_700_000_000_000
    assert header.reconsume_times == 0
    assert header.batch is True  # "1" is true here, unlike Java's Boolean.parseBoolean
    assert header.unit_mode is False
    assert header.properties == "UNIQ_KEY\x01ABC\x02WAIT\x01true\x02"
    assert cmd.body == b"batch-blob"


ALI_ONS_SEND_V2 = (
    b'{"code":310,"language":"JAVA","opaque":1,"flag":0,"version":121,'
    b'"extFields":{"a":"P","b":"T","c":"TBW102","d":4,"e":0,"f":0,"g":1700000000000,"h":0,'
    b'"i":"TAGS\\u0001null\\u0002","j":0,"k":false}}'
)


def test_ali_ons_json_header_with_raw_numbers_and_booleans() -> None:
    cmd = decode_one(frame(ALI_ONS_SEND_V2, b"hello"))
    assert cmd.opaque == 1
    assert cmd.ext_fields == {
        "a": "P",
        "b": "T",
        "c": "TBW102",
        "d": "4",
        "e": "0",
        "f": "0",
        "g": "1700000000000",
        "h": "0",
        "i": "TAGS\x01null\x02",
        "j": "0",
        "k": "false",
    }
    header = SendMessageRequestHeaderV2.from_fields(cmd.ext_fields)
    assert (header.producer_group, header.topic, header.queue_id) == ("P", "T", 0)
    assert header.born_timestamp == 1_700_000_000_000
    assert header.unit_mode is False
    assert header.batch is False
    assert header.max_reconsume_times is None


def test_json_ext_fields_true_raw_boolean_and_null_dropped() -> None:
    header = b'{"code":310,"opaque":2,"flag":0,"extFields":{"k":true,"m":true,"l":null,"x":1.5}}'
    cmd = decode_one(frame(header))
    assert cmd.ext_fields == {"k": "true", "m": "true", "x": "1.5"}
    assert cmd.language == "OTHER"  # absent language
    assert cmd.version == 0


def test_response_flag_and_oneway_flag_bits() -> None:
    response = decode_one(frame(b'{"code":0,"flag":1,"opaque":5}'))
    assert response.is_response and not response.is_oneway
    oneway = decode_one(frame(b'{"code":40,"flag":2,"opaque":6}'))
    assert oneway.is_oneway and not oneway.is_response
    request = RemotingCommand.request(
        RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "G"}, oneway=True
    )
    assert request.flag == 2
    assert json.loads(request.encode()[8:])["flag"] == 2


# -- ROCKETMQ binary header (§1.4) ------------------------------------------------------------


def test_rocketmq_header_decodes_from_hand_assembled_bytes() -> None:
    header = rocketmq_header(
        310, 0, 407, 9, 0, None, [(b"a", b"PG"), (b"b", b"TopicTest"), (b"e", b"3"), (b"k", b"false")]
    )
    assert len(header) == 21 + 0 + (2 + 1 + 4 + 2) + (2 + 1 + 4 + 9) + (2 + 1 + 4 + 1) + (2 + 1 + 4 + 5)
    cmd = decode_one(frame(header, b"payload", SerializeType.ROCKETMQ))
    assert cmd.serialize_type == SerializeType.ROCKETMQ
    assert cmd.code == 310
    assert cmd.language == "JAVA"
    assert cmd.version == 407
    assert cmd.opaque == 9
    assert cmd.flag == 0
    assert cmd.remark is None  # R = 0 means no remark
    assert cmd.ext_fields == {"a": "PG", "b": "TopicTest", "e": "3", "k": "false"}
    assert cmd.body == b"payload"


def test_rocketmq_header_with_utf8_remark_and_no_ext_map() -> None:
    remark = "crc32 not match — überprüfen".encode()
    header = rocketmq_header(1, 9, 401, 77, 1, remark, [])
    assert len(header) == 21 + len(remark)
    cmd = decode_one(frame(header, b"", SerializeType.ROCKETMQ))
    assert cmd.code == 1
    assert cmd.language == "GO"
    assert cmd.is_response
    assert cmd.remark == "crc32 not match — überprüfen"
    assert cmd.ext_fields == {}


def test_rocketmq_header_encodes_to_hand_assembled_bytes() -> None:
    cmd = RemotingCommand(
        310,
        opaque=9,
        ext_fields={"a": "PG", "b": "TopicTest", "e": 3, "k": False},
        language="JAVA",
        version=407,
        serialize_type=SerializeType.ROCKETMQ,
        body=b"payload",
    )
    expected = rocketmq_header(
        310, 0, 407, 9, 0, None, [(b"a", b"PG"), (b"b", b"TopicTest"), (b"e", b"3"), (b"k", b"false")]
    )
    assert cmd.encode() == frame(expected, b"payload", SerializeType.ROCKETMQ)


def test_rocketmq_response_encodes_remark_bytes_and_language_codes() -> None:
    response = RemotingCommand(
        16,
        opaque=-5,
        flag=1,
        remark="no permission: é",
        ext_fields={},
        serialize_type=SerializeType.ROCKETMQ,
    )
    expected = rocketmq_header(16, LanguageCode.PYTHON, 401, -5, 1, "no permission: é".encode(), [])
    assert response.encode() == frame(expected, b"", SerializeType.ROCKETMQ)
    unknown = RemotingCommand(0, language="KOTLIN", serialize_type=SerializeType.ROCKETMQ)
    assert unknown.encode()[8 + 2] == LanguageCode.OTHER


def test_rocketmq_unknown_language_byte_reads_as_other() -> None:
    cmd = decode_one(frame(rocketmq_header(11, 200, 1, 1, 0, None, []), b"", 1))
    assert cmd.language == "OTHER"


# -- msgpack header (our own, type 2) ----------------------------------------------------------


def test_msgpack_header_keeps_native_values() -> None:
    header = msgpack.packb(
        {
            "code": 310,
            "opaque": 4,
            "flag": 0,
            "language": "PYTHON",
            "version": 401,
            "extFields": {"e": 3, "k": True},
        }
    )
    cmd = decode_one(frame(header, b"x", SerializeType.MSGPACK))
    assert cmd.serialize_type == SerializeType.MSGPACK
    assert cmd.ext_fields == {"e": 3, "k": True}
    assert cmd.body == b"x"
    again = decode_one(cmd.encode())
    assert (again.code, again.opaque, again.ext_fields, again.body) == (310, 4, {"e": 3, "k": True}, b"x")


# -- the incremental decoder --------------------------------------------------------------------


def test_frames_split_at_every_byte_and_glued_together() -> None:
    first = frame(JAVA_ROUTE_REQUEST)
    second = frame(rocketmq_header(0, 0, 401, 7, 1, None, [(b"k", b"v")]), b"body", 1)
    stream = first + second + first
    decoder = FrameDecoder()
    out = []
    for i in range(len(stream)):
        out.extend(decoder.feed(stream[i : i + 1]))
        if i < len(first) - 1:
            assert not out
            assert decoder.buffered == i + 1
    assert [c.serialize_type for c in out] == [0, 1, 0]
    assert out[1].body == b"body"
    assert decoder.buffered == 0
    assert [c.opaque for c in FrameDecoder().feed(stream)] == [7, 7, 7]


def test_decode_frame_takes_a_frame_without_its_length_prefix() -> None:
    cmd = decode_frame(frame(JAVA_ROUTE_REQUEST, b"b")[4:])
    assert cmd.code == 105 and cmd.body == b"b"


def test_empty_header_and_body_lengths_are_measured_exactly() -> None:
    data = RemotingCommand(34, body=b"").encode()
    (total, word) = struct.unpack_from(">iI", data)
    assert total == len(data) - 4
    assert word & 0xFFFFFF == len(data) - 8
    assert word >> 24 == 0


# -- bad input ----------------------------------------------------------------------------------


def test_frame_over_the_default_maximum_is_refused_from_its_length_alone() -> None:
    decoder = FrameDecoder()
    assert decoder.max_frame_size == DEFAULT_MAX_FRAME_SIZE == 16 * 1024 * 1024
    with pytest.raises(
        ProtocolError, match=r"frame length 16777217 is outside the allowed range 4\.\.16777216"
    ):
        decoder.feed(struct.pack(">i", DEFAULT_MAX_FRAME_SIZE + 1))
    # At the limit the decoder waits for the rest instead.
    at_limit = FrameDecoder()
    assert at_limit.feed(struct.pack(">iI", DEFAULT_MAX_FRAME_SIZE, 10)) == []
    assert at_limit.buffered == 8


def test_frame_maximum_is_configurable() -> None:
    small = frame(b'{"code":1}', b"x" * 100)
    total = len(small) - 4
    assert decode_one(small, max_frame_size=total).body == b"x" * 100
    with pytest.raises(
        ProtocolError, match=f"frame length {total} is outside the allowed range 4..{total - 1}"
    ):
        FrameDecoder(max_frame_size=total - 1).feed(small)


@pytest.mark.parametrize("total", [-1, 0, 3, -(2**31)])
def test_frame_length_too_small_is_refused(total: int) -> None:
    with pytest.raises(ProtocolError, match=f"frame length {total} is outside"):
        FrameDecoder().feed(struct.pack(">iI", total, 0))


def test_header_length_larger_than_the_frame() -> None:
    data = struct.pack(">iI", 4 + 10, 11) + b"0123456789"
    with pytest.raises(ProtocolError, match="header length 11 exceeds the frame's 10 remaining bytes"):
        FrameDecoder().feed(data)
    with pytest.raises(ProtocolError, match="header length 11 exceeds"):
        decode_frame(data[4:])


@pytest.mark.parametrize("serialize_type", [3, 7, 255])
def test_unknown_serialize_type(serialize_type: int) -> None:
    with pytest.raises(ProtocolError, match=f"unknown serialize type {serialize_type}"):
        FrameDecoder().feed(frame(b'{"code":1}', b"", serialize_type))


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (b'{"code":105,', "invalid JSON header"),
        (b"\xff\xfe{}", "invalid JSON header"),
        (b"", "invalid JSON header"),
        (b"[1,2]", "JSON header must be an object, got list"),
        (b'{"opaque":1}', "header has no 'code'"),
        (b'{"code":"abc"}', "header field 'code' must be an integer, got 'abc'"),
        (b'{"code":[1]}', "header field 'code' must be an integer"),
        (b'{"code":Infinity}', "header field 'code' must be an integer, got inf"),
        (b'{"code":1,"opaque":1099511627776}', "header field 'opaque' = 1099511627776 does not fit a 32-bit"),
        (b'{"code":1,"flag":"x"}', "header field 'flag' must be an integer"),
        (b'{"code":1,"version":{}}', "header field 'version' must be an integer"),
        (b'{"code":1,"extFields":[1]}', "extFields must be a JSON object, got list"),
        (b'{"code":1,"extFields":{"a":{"b":1}}}', "extFields\\['a'\\] must be a scalar, got dict"),
    ],
)
def test_bad_json_headers(header: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        FrameDecoder().feed(frame(header))


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (b"\xc1", "invalid msgpack header"),
        (b"\x92\x01\x02", "msgpack header must be an object, got list"),
        (msgpack.packb({"code": 1}) + b"\x00", "invalid msgpack header"),
        (msgpack.packb({"code": 1, "extFields": [1]}), "extFields must be a map, got list"),
        (msgpack.packb({"opaque": 1}), "header has no 'code'"),
        (msgpack.packb({"code": 2**40}), "does not fit a 32-bit integer"),
    ],
)
def test_bad_msgpack_headers(header: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        FrameDecoder().feed(frame(header, b"", SerializeType.MSGPACK))


def _bin(remark_len: int, rest: bytes) -> bytes:
    return struct.pack(">hBhiii", 10, 0, 1, 1, 0, remark_len) + rest


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (b"\x00" * 20, "ROCKETMQ header of 20 bytes is shorter than its 21-byte fixed part"),
        (_bin(100, b"abc" + struct.pack(">i", 0)), "remark length 100 overruns the header"),
        (_bin(-1, struct.pack(">i", 0)), "remark length -1 overruns the header"),
        (_bin(0, struct.pack(">i", 5)), "extFields length 5 does not match the header size 21"),
        (_bin(0, struct.pack(">i", 1) + b"k"), "entry truncated in its key length"),
        (_bin(0, struct.pack(">i", 7) + struct.pack(">h", 9) + b"k" + b"\0\0\0\0"), "key length 9 overruns"),
        (
            _bin(0, struct.pack(">i", 8) + struct.pack(">h", 1) + b"k" + struct.pack(">i", 3) + b"v"),
            "value length 3 overruns",
        ),
        (
            _bin(0, struct.pack(">i", 8) + struct.pack(">h", 1) + b"\xff" + struct.pack(">i", 1) + b"v"),
            "invalid UTF-8",
        ),
        (_bin(2, b"\xc3\x28" + struct.pack(">i", 0)), "invalid UTF-8"),
    ],
)
def test_bad_rocketmq_headers(header: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        FrameDecoder().feed(frame(header, b"", SerializeType.ROCKETMQ))


def test_encoding_what_a_serialization_cannot_carry_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="unknown serialize type 9"):
        RemotingCommand(1, serialize_type=9).encode()
    with pytest.raises(ProtocolError, match="as ROCKETMQ"):
        RemotingCommand(40000, serialize_type=SerializeType.ROCKETMQ).encode()  # code is an i16 there
    with pytest.raises(ProtocolError, match="as MSGPACK"):
        RemotingCommand(1, ext_fields={"big": 2**70}, serialize_type=SerializeType.MSGPACK).encode()
    with pytest.raises(ProtocolError, match="does not fit the 24-bit length field"):
        RemotingCommand(1, remark="r" * (1 << 24)).encode()


def test_decoded_commands_and_responses_have_every_attribute_set() -> None:
    # Decoders and response() fill RemotingCommand's slots directly; none may be forgotten.
    frames = [
        frame(JAVA_ROUTE_REQUEST),
        frame(rocketmq_header(310, 0, 407, 9, 0, b"r", [(b"a", b"PG")]), b"b", SerializeType.ROCKETMQ),
        frame(msgpack.packb({"code": 11, "opaque": 3}), b"", SerializeType.MSGPACK),
    ]
    for data in frames:
        for cmd in (decode_one(data), decode_one(data).response()):
            for name in RemotingCommand.__slots__:
                getattr(cmd, name)
            assert repr(cmd).startswith("<RemotingCommand")


def test_decoder_accepts_bytearray_and_memoryview_chunks() -> None:
    data = frame(JAVA_ROUTE_REQUEST, b"body") * 2
    for chunk in (bytearray(data), memoryview(data)):
        assert [c.body for c in FrameDecoder().feed(chunk)] == [b"body", b"body"]
    decoder = FrameDecoder()
    assert decoder.feed(memoryview(data)[:10]) == []
    assert [c.opaque for c in decoder.feed(bytearray(data[10:]))] == [7, 7]


def test_json_header_odd_but_readable_values() -> None:
    cmd = decode_one(frame(b'{"code":"310","opaque":"8","language":1,"remark":42,"version":true}'))
    assert (cmd.code, cmd.opaque, cmd.language, cmd.remark, cmd.version) == (310, 8, "CPP", "42", 1)
    assert decode_one(frame(b'{"code":1,"language":[1]}')).language == "OTHER"


def test_decode_frame_errors() -> None:
    with pytest.raises(ProtocolError, match="frame of 3 bytes has no header-length word"):
        decode_frame(b"\0\0\0")
    with pytest.raises(ProtocolError, match="unknown serialize type 5"):
        decode_frame(struct.pack(">I", 5 << 24))


def test_bad_header_length_is_refused_before_the_frame_is_complete() -> None:
    # Only the first 8 bytes of a 100-byte frame have arrived: that is enough to judge it.
    with pytest.raises(ProtocolError, match="header length 200 exceeds the frame's 96 remaining bytes"):
        FrameDecoder().feed(struct.pack(">iI", 100, 200))
    with pytest.raises(ProtocolError, match="unknown serialize type 9"):
        FrameDecoder().feed(struct.pack(">iI", 100, (9 << 24) | 10))


def test_good_frames_before_a_bad_one_are_delivered_then_the_error_sticks() -> None:
    good = RemotingCommand.request(105, {"topic": "T"}).encode()
    decoder = FrameDecoder()
    commands = decoder.feed(good + good + struct.pack(">iI", 8, (7 << 24) | 4) + b"xxxx")
    assert [c.ext_fields["topic"] for c in commands] == ["T", "T"]
    assert decoder.error is not None and "unknown serialize type 7" in str(decoder.error)
    with pytest.raises(ProtocolError, match="unknown serialize type 7"):
        decoder.feed(good)
