"""Property tests: any command survives encode → FrameDecoder under any chunking of the byte
stream, in each serialization; any message survives the stored-record and batch encodings."""

from __future__ import annotations

import ipaddress
import itertools
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from aiorocketmq.protocol.codes import LanguageCode, MessageSysFlag, SerializeType
from aiorocketmq.protocol.command import FrameDecoder, RemotingCommand
from aiorocketmq.protocol.headers import SendMessageRequestHeader, SendMessageRequestHeaderV2
from aiorocketmq.protocol.message import (
    Message,
    decode_batch,
    decode_properties,
    decode_record,
    decode_records,
    encode_batch,
    encode_properties,
    encode_record,
)

I16 = st.integers(-(2**15), 2**15 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
LANGUAGES = st.sampled_from([code.name for code in LanguageCode])


@st.composite
def commands(draw: st.DrawFn, serialize_type: int) -> RemotingCommand:
    if serialize_type == SerializeType.ROCKETMQ:
        # i16 code and version, a byte language code, and "" means "no remark / no entry".
        code, version, language = draw(I16), draw(I16), draw(LANGUAGES)
        remark = draw(st.none() | st.text(min_size=1))
        ext = draw(st.dictionaries(st.text(min_size=1, max_size=10), st.text(max_size=20), max_size=8))
    elif serialize_type == SerializeType.JSON:
        code, version, language = draw(I32), draw(I32), draw(LANGUAGES | st.text(max_size=8))
        remark = draw(st.none() | st.text())
        ext = draw(st.dictionaries(st.text(max_size=10), st.text(max_size=20), max_size=8))
    else:
        code, version, language = draw(I32), draw(I32), draw(LANGUAGES | st.text(max_size=8))
        remark = draw(st.none() | st.text())
        scalars = st.text(max_size=20) | st.integers(-(2**63), 2**64 - 1) | st.booleans() | st.none()
        ext = draw(st.dictionaries(st.text(max_size=10), scalars, max_size=8))
    return RemotingCommand(
        code,
        opaque=draw(I32),
        flag=draw(I32),
        remark=remark,
        ext_fields=ext,
        body=draw(st.binary(max_size=300)),
        language=language,
        version=version,
        serialize_type=serialize_type,
    )


def same(a: RemotingCommand, b: RemotingCommand) -> bool:
    return all(
        getattr(a, name) == getattr(b, name)
        for name in (
            "code",
            "language",
            "version",
            "opaque",
            "flag",
            "remark",
            "ext_fields",
            "body",
            "serialize_type",
        )
    )


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[start:end] for start, end in itertools.pairwise(bounds)]


@st.composite
def command_streams(draw: st.DrawFn) -> tuple[list[RemotingCommand], list[int]]:
    serialize_type = draw(st.sampled_from(list(SerializeType)))
    cmds = draw(st.lists(commands(serialize_type), min_size=1, max_size=4))
    cuts = draw(st.lists(st.integers(0, 10_000), max_size=12))
    return cmds, cuts


@settings(max_examples=300, deadline=None)
@given(command_streams())
def test_any_command_survives_any_chunking(stream: tuple[list[RemotingCommand], list[int]]) -> None:
    cmds, cuts = stream
    data = b"".join(cmd.encode() for cmd in cmds)
    decoder = FrameDecoder()
    out: list[RemotingCommand] = []
    for piece in chunked(data, cuts):
        out.extend(decoder.feed(piece))
    assert decoder.buffered == 0
    assert len(out) == len(cmds)
    for sent, received in zip(cmds, out):
        assert same(sent, received), (sent, received)


@settings(deadline=None)
@given(commands(SerializeType.ROCKETMQ) | commands(SerializeType.JSON) | commands(SerializeType.MSGPACK))
def test_responses_mirror_the_request_serialization(cmd: RemotingCommand) -> None:
    (request,) = FrameDecoder().feed(cmd.encode())
    (response,) = FrameDecoder().feed(request.response(3, "remark", {"k": "v"}, b"body").encode())
    assert response.serialize_type == cmd.serialize_type
    assert response.opaque == cmd.opaque
    assert response.is_response
    assert (response.code, response.remark, response.ext_fields, response.body) == (
        3,
        "remark",
        {"k": "v"},
        b"body",
    )


# -- messages -----------------------------------------------------------------------------------

NAMES = st.text(
    st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), min_size=1, max_size=12
)
VALUES = st.text(
    st.characters(blacklist_characters="\x02", blacklist_categories=("Cs",)), min_size=1, max_size=24
)
PROPERTIES = st.dictionaries(NAMES, VALUES, max_size=6)
PORTS = st.integers(0, 65535)
BORN_V6 = int(MessageSysFlag.BORNHOST_V6)
STORE_V6 = int(MessageSysFlag.STOREHOST_V6)


@st.composite
def hosts(draw: st.DrawFn) -> bytes:
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address = draw(st.ip_addresses())
    return ip.packed + struct.pack(">i", draw(PORTS))


@st.composite
def records(draw: st.DrawFn) -> dict[str, object]:
    return {
        "topic": draw(st.text(max_size=30)).encode(),  # at most 120 bytes
        "body": draw(st.binary(max_size=1000)),
        "properties": draw(PROPERTIES),
        "queue_id": draw(I32),
        "flag": draw(I32),
        "queue_offset": draw(I64),
        "commit_log_offset": draw(I64),
        "sys_flag": draw(I32),
        "born_timestamp": draw(I64),
        "born_host": draw(hosts()),
        "store_timestamp": draw(I64),
        "store_host": draw(hosts()),
        "reconsume_times": draw(I32),
        "prepared_transaction_offset": draw(I64),
    }


def encode(fields: dict[str, object]) -> bytes:
    props = encode_properties(fields["properties"]).encode()  # type: ignore[arg-type]
    return encode_record(**{**fields, "properties": props})  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(st.lists(records(), min_size=1, max_size=4))
def test_any_message_survives_the_record_encoding(fields_list: list[dict[str, object]]) -> None:
    data = [encode(fields) for fields in fields_list]
    pos = 0
    blob = b"".join(data)
    for fields, record in zip(fields_list, data):
        msg, end = decode_record(blob, pos, check_crc=True)
        assert end - pos == len(record) == msg.store_size
        pos = end
        v6_bits = (BORN_V6 if len(msg.born_host_bytes) == 20 else 0) | (
            STORE_V6 if len(msg.store_host_bytes) == 20 else 0
        )
        assert msg.sys_flag == (fields["sys_flag"] & ~(BORN_V6 | STORE_V6)) | v6_bits  # type: ignore[operator]
        assert msg.topic.encode() == fields["topic"]
        assert msg.body == fields["body"]
        assert msg.properties == fields["properties"]
        assert msg.born_host_bytes == fields["born_host"]
        assert msg.store_host_bytes == fields["store_host"]
        for name in (
            "queue_id",
            "flag",
            "queue_offset",
            "commit_log_offset",
            "born_timestamp",
            "store_timestamp",
            "reconsume_times",
            "prepared_transaction_offset",
        ):
            assert getattr(msg, name) == fields[name], name
    assert [m.store_size for m in decode_records(blob, decompress=False)] == [len(r) for r in data]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(I32, st.binary(max_size=500), PROPERTIES), max_size=8))
def test_any_batch_survives_the_batch_encoding(entries: list[tuple[int, bytes, dict[str, str]]]) -> None:
    messages = [Message("T", body, properties=props, flag=flag) for flag, body, props in entries]
    decoded = decode_batch(encode_batch(messages))
    assert [(e.flag, e.body, decode_properties(e.properties)) for e in decoded] == entries


# -- headers --------------------------------------------------------------------------------------

TEXT = st.text(max_size=30)


@st.composite
def send_headers(draw: st.DrawFn) -> SendMessageRequestHeaderV2:
    return SendMessageRequestHeaderV2(
        producer_group=draw(TEXT),
        topic=draw(TEXT),
        default_topic=draw(TEXT),
        default_topic_queue_nums=draw(I32),
        queue_id=draw(I32),
        sys_flag=draw(I32),
        born_timestamp=draw(I64),
        flag=draw(I32),
        properties=draw(st.none() | TEXT),
        reconsume_times=draw(st.none() | I32),
        unit_mode=draw(st.booleans()),
        max_reconsume_times=draw(st.none() | I32),
        batch=draw(st.booleans()),
    )


@settings(deadline=None)
@given(send_headers(), st.sampled_from(list(SerializeType)))
def test_any_send_header_survives_every_serialization(
    header: SendMessageRequestHeaderV2, serialize_type: int
) -> None:
    request = RemotingCommand.request(310, header.to_fields(), serialize_type=serialize_type)
    (decoded,) = FrameDecoder().feed(request.encode())
    assert SendMessageRequestHeaderV2.from_fields(decoded.ext_fields) == header
    assert SendMessageRequestHeader.from_fields(header.to_v1().to_fields()).to_v2() == header
