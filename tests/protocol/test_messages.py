"""Message encodings (docs/protocol.md §4): the stored record with IPv4 and IPv6 hosts, the batch
body, the properties string, offset msgIds, compression and Java's String.hashCode. Expected
bytes are assembled field by field from the layouts there; hash and CRC values were computed
with Java 17 (``String.hashCode``, ``java.util.zip.CRC32``)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import struct
import uuid
import zlib
from datetime import datetime

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiorocketmq.protocol.codes import MessageSysFlag
from aiorocketmq.protocol.errors import ProtocolError
from aiorocketmq.protocol.message import (
    MESSAGE_MAGIC_CODE,
    RECORD_FIXED_SIZE,
    Message,
    MessageExt,
    UniqueIdGenerator,
    compress_body,
    decode_batch,
    decode_offset_msg_id,
    decode_properties,
    decode_record,
    decode_records,
    decompress_body,
    encode_batch,
    encode_message_ext,
    encode_offset_msg_id,
    encode_properties,
    encode_record,
    java_hash,
    java_hash_fast,
    new_unique_id,
    pack_host,
    peek_record_size,
    read_record_header,
    record_head_struct,
    record_store_timestamp_pos,
    split_address,
    tags_code,
    unpack_host,
)

# java.util.zip.CRC32 of b"body-2" is 3892696970 (top bit set); the record keeps the low 31 bits.
BODY = b"body-2"
BODY_CRC32_JAVA = 3892696970
BODY_CRC_STORED = 1745213322
TOPIC = b"TopicTest"
PROPS = "UNIQ_KEY\x017F0000010F8718B4AAC2573A5A4F0000\x02TAGS\x01TagA\x02KEYS\x01k1 k2"


def assemble_record(
    *,
    born: bytes,
    store: bytes,
    sys_flag: int,
    body: bytes = BODY,
    topic: bytes = TOPIC,
    props: bytes = PROPS.encode(),
    crc: int = BODY_CRC_STORED,
) -> bytes:
    """§4.3, field by field."""
    rest = (
        struct.pack(">i", MESSAGE_MAGIC_CODE)  # 2 MAGICCODE
        + struct.pack(">i", crc)  # 3 BODYCRC
        + struct.pack(">i", 3)  # 4 QUEUEID
        + struct.pack(">i", 7)  # 5 FLAG
        + struct.pack(">q", 1000)  # 6 QUEUEOFFSET
        + struct.pack(">q", 0x1A2B)  # 7 PHYSICALOFFSET
        + struct.pack(">i", sys_flag)  # 8 SYSFLAG
        + struct.pack(">q", 1_700_000_000_000)  # 9 BORNTIMESTAMP
        + born  # 10 BORNHOST (address + i32 port)
        + struct.pack(">q", 1_700_000_000_123)  # 11 STORETIMESTAMP
        + store  # 12 STOREHOST
        + struct.pack(">i", 2)  # 13 RECONSUMETIMES
        + struct.pack(">q", 0)  # 14 PREPARED TRANSACTION OFFSET
        + struct.pack(">i", len(body))  # 15 BODY
        + body
        + struct.pack(">b", len(topic))  # 16 TOPIC
        + topic
        + struct.pack(">h", len(props))  # 17 PROPERTIES
        + props
    )
    return struct.pack(">i", 4 + len(rest)) + rest  # 1 TOTALSIZE counts itself


V4_BORN = bytes([10, 0, 0, 5]) + struct.pack(">i", 52000)
V4_STORE = bytes([127, 0, 0, 1]) + struct.pack(">i", 10911)
V6_BORN = bytes(15) + b"\x01" + struct.pack(">i", 1234)  # ::1
V6_STORE = bytes.fromhex("20010db8000000000000000000000001") + struct.pack(">i", 10911)  # 2001:db8::1


def our_record(born: str, born_port: int, store: str, store_port: int, sys_flag: int = 0) -> bytes:
    return encode_record(
        topic=TOPIC,
        body=BODY,
        properties=PROPS.encode(),
        queue_id=3,
        flag=7,
        queue_offset=1000,
        commit_log_offset=0x1A2B,
        sys_flag=sys_flag,
        born_timestamp=1_700_000_000_000,
        born_host=pack_host(born, born_port),
        store_timestamp=1_700_000_000_123,
        store_host=pack_host(store, store_port),
        reconsume_times=2,
    )


def test_crc_constant_is_masked_java_crc32() -> None:
    assert zlib.crc32(BODY) == BODY_CRC32_JAVA
    assert BODY_CRC32_JAVA & 0x7FFFFFFF == BODY_CRC_STORED != BODY_CRC32_JAVA


def test_ipv4_record_golden_bytes() -> None:
    expected = assemble_record(born=V4_BORN, store=V4_STORE, sys_flag=0)
    b, t, p = len(BODY), len(TOPIC), len(PROPS.encode())
    assert RECORD_FIXED_SIZE == 91
    assert len(expected) == 91 + b + t + p
    assert struct.unpack_from(">i", expected)[0] == 91 + b + t + p
    assert our_record("10.0.0.5", 52000, "127.0.0.1", 10911) == expected


def test_ipv6_record_golden_bytes_and_sys_flag_bits() -> None:
    both = assemble_record(born=V6_BORN, store=V6_STORE, sys_flag=0x30)
    b, t, p = len(BODY), len(TOPIC), len(PROPS.encode())
    assert struct.unpack_from(">i", both)[0] == len(both) == 91 + 24 + b + t + p
    assert our_record("::1", 1234, "2001:db8::1", 10911) == both
    born_only = assemble_record(born=V6_BORN, store=V4_STORE, sys_flag=0x10)
    assert len(born_only) == 91 + 12 + b + t + p
    assert our_record("::1", 1234, "127.0.0.1", 10911) == born_only
    store_only = assemble_record(born=V4_BORN, store=V6_STORE, sys_flag=0x20 | 0x1)
    assert our_record("10.0.0.5", 52000, "[2001:db8::1]", 10911, sys_flag=0x1) == store_only


def test_ipv6_bits_follow_the_hosts_not_the_caller() -> None:
    # Claiming IPv6 with 4-byte hosts would make every reader misparse the record.
    assert our_record("10.0.0.5", 52000, "127.0.0.1", 10911, sys_flag=0x30 | 0x8) == assemble_record(
        born=V4_BORN, store=V4_STORE, sys_flag=0x8
    )


def test_ipv4_mapped_ipv6_hosts_are_stored_as_ipv4() -> None:
    assert pack_host("::ffff:10.0.0.5", 52000) == V4_BORN
    assert pack_host("[::ffff:127.0.0.1]", 10911) == V4_STORE
    assert pack_host("::1", 1234) == V6_BORN
    assert unpack_host(V6_STORE) == "[2001:db8::1]:10911"
    assert unpack_host(V4_BORN) == "10.0.0.5:52000"
    assert split_address("[2001:db8::1]:10911") == ("2001:db8::1", 10911)
    assert split_address("10.0.0.1:10911") == ("10.0.0.1", 10911)
    with pytest.raises(ValueError, match="not host:port"):
        split_address("10.0.0.1")


def test_ipv4_record_decodes_every_field() -> None:
    data = assemble_record(born=V4_BORN, store=V4_STORE, sys_flag=0x2)
    msg, end = decode_record(data, check_crc=True)
    assert end == len(data)
    assert msg.topic == "TopicTest"
    assert msg.body == BODY
    assert msg.flag == 7
    assert msg.queue_id == 3
    assert msg.queue_offset == 1000
    assert msg.commit_log_offset == 0x1A2B
    assert msg.sys_flag == 0x2
    assert msg.born_timestamp == 1_700_000_000_000
    assert msg.store_timestamp == 1_700_000_000_123
    assert msg.born_host == "10.0.0.5:52000"
    assert msg.store_host == "127.0.0.1:10911"
    assert msg.reconsume_times == 2
    assert msg.prepared_transaction_offset == 0
    assert msg.body_crc == BODY_CRC_STORED
    assert msg.store_size == len(data)
    assert msg.properties == {"UNIQ_KEY": "7F0000010F8718B4AAC2573A5A4F0000", "TAGS": "TagA", "KEYS": "k1 k2"}
    assert msg.tags == "TagA"
    assert msg.keys == ["k1", "k2"]
    assert msg.offset_msg_id == "7F00000100002A9F0000000000001A2B"
    assert msg.msg_id == "7F0000010F8718B4AAC2573A5A4F0000"  # UNIQ_KEY wins, as Java shows it
    assert msg.transaction_id == "7F0000010F8718B4AAC2573A5A4F0000"


def test_ipv6_record_decodes_hosts_and_store_timestamp_position() -> None:
    data = assemble_record(born=V6_BORN, store=V6_STORE, sys_flag=0x30)
    msg, _ = decode_record(data)
    assert msg.born_host == "[::1]:1234"
    assert msg.store_host == "[2001:db8::1]:10911"
    assert msg.store_timestamp == 1_700_000_000_123
    assert record_store_timestamp_pos(0x30) == 68
    assert struct.unpack_from(">q", data, 68)[0] == 1_700_000_000_123
    assert record_store_timestamp_pos(0) == 56
    assert len(msg.offset_msg_id) == 56
    assert decode_offset_msg_id(msg.offset_msg_id) == ("[2001:db8::1]:10911", 0x1A2B)
    header = read_record_header(data)
    assert (header.total_size, header.sys_flag, header.topic) == (len(data), 0x30, "TopicTest")
    assert data[header.body_offset : header.body_offset + header.body_length] == BODY


def test_read_record_header_on_ipv4() -> None:
    data = b"junk" + assemble_record(born=V4_BORN, store=V4_STORE, sys_flag=0)
    header = read_record_header(data, 4)
    assert header.total_size == len(data) - 4
    assert header.queue_id == 3
    assert header.queue_offset == 1000
    assert header.commit_log_offset == 0x1A2B
    assert header.born_timestamp == 1_700_000_000_000
    assert header.store_timestamp == 1_700_000_000_123
    assert header.properties == PROPS
    assert header.body_crc == BODY_CRC_STORED
    assert header.body_offset == 4 + 88
    assert header.body_length == len(BODY)


def test_pull_body_of_several_records_and_crc_check() -> None:
    one = assemble_record(born=V4_BORN, store=V4_STORE, sys_flag=0)
    two = assemble_record(born=V6_BORN, store=V4_STORE, sys_flag=0x10, body=b"", crc=0, props=b"")
    messages = decode_records(one + two + one)
    assert [m.store_size for m in messages] == [len(one), len(two), len(one)]
    assert messages[1].body == b"" and messages[1].properties == {}
    corrupted = bytearray(one)
    corrupted[88] ^= 0xFF  # first body byte
    assert decode_record(bytes(corrupted))[0].body != BODY  # not checked by default
    with pytest.raises(ProtocolError, match="fails its body CRC check"):
        decode_record(bytes(corrupted), check_crc=True)


def test_encode_message_ext_round_trip() -> None:
    data = assemble_record(born=V4_BORN, store=V6_STORE, sys_flag=0x20)
    msg, _ = decode_record(data)
    again = encode_message_ext(msg)
    # Properties are re-encoded without a trailing separator; everything else is identical.
    assert again == data


def test_compressed_body_is_inflated_on_request() -> None:
    raw = b"x" * 5000
    for sys_flag in (0x1, 0x1 | 0x300):
        packed = zlib.compress(raw, 5)
        data = encode_record(topic=b"T", body=packed, properties=b"", sys_flag=sys_flag)
        assert decode_record(data)[0].body == packed
        assert decode_record(data, decompress=True)[0].body == raw
        assert decode_records(data)[0].body == raw
    with pytest.raises(ProtocolError, match="LZ4-compressed"):
        decompress_body(b"xx", 0x1 | 0x100)
    with pytest.raises(ProtocolError, match="ZSTD-compressed"):
        decompress_body(b"xx", 0x1 | 0x200)
    with pytest.raises(ProtocolError, match="does not inflate"):
        decompress_body(b"not zlib", 0x1)
    assert decompress_body(b"plain", 0x300) == b"plain"  # no COMPRESSED bit


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d[:90], "truncated"),
        (lambda d: d[:-1], "truncated or has inconsistent lengths"),
        (lambda d: d[:4] + struct.pack(">i", -875286124) + d[8:], "not a message"),
        (lambda d: struct.pack(">i", 1 << 20) + d[4:], "truncated or has inconsistent lengths"),
        (lambda d: d[:84] + struct.pack(">i", -1) + d[88:], "inconsistent lengths"),
        (lambda d: d[:84] + struct.pack(">i", 1 << 20) + d[88:], "inconsistent lengths"),
    ],
)
def test_bad_records(mutate: object, message: str) -> None:
    data = assemble_record(born=V4_BORN, store=V4_STORE, sys_flag=0)
    with pytest.raises(ProtocolError, match=message):
        decode_record(mutate(data))  # type: ignore[operator]
    with pytest.raises(ProtocolError):
        read_record_header(mutate(data))  # type: ignore[operator]


def test_record_whose_size_ends_inside_the_properties_length_is_refused() -> None:
    # TOTALSIZE ends one byte after the topic: the 2-byte properties length is cut in half.
    body, topic = b"", b"T"
    rest = assemble_record(born=V4_BORN, store=V4_STORE, sys_flag=0, body=body, topic=topic, props=b"", crc=0)
    cut = rest[:-1]
    cut = struct.pack(">i", len(cut)) + cut[4:]
    with pytest.raises(ProtocolError, match="disagree with its size"):
        decode_record(cut)
    with pytest.raises(ProtocolError):
        read_record_header(cut)


def test_encode_record_refuses_what_the_layout_cannot_hold() -> None:
    with pytest.raises(ProtocolError, match="topic of 128 bytes exceeds 127"):
        encode_record(topic=b"t" * 128, body=b"", properties=b"")
    with pytest.raises(ProtocolError, match="properties of 32768 bytes exceed 32767"):
        encode_record(topic=b"t", body=b"", properties=b"p" * 32768)
    with pytest.raises(ProtocolError, match="8 \\(IPv4\\) or 20 \\(IPv6\\)"):
        encode_record(topic=b"t", body=b"", properties=b"", born_host=b"\0" * 6)
    with pytest.raises(ProtocolError, match="out of range"):
        encode_record(topic=b"t", body=b"", properties=b"", queue_id=2**31)
    assert len(encode_record(topic=b"t" * 127, body=b"", properties=b"p" * 32767)) == 91 + 127 + 32767


# -- batch body (§4.7) --------------------------------------------------------------------------


def test_batch_body_golden_bytes() -> None:
    props1 = b"UNIQ_KEY\x01A1\x02WAIT\x01true"
    props2 = "TAGS\x01标签".encode()
    expected = (
        struct.pack(">iiiii", 22 + 5 + len(props1), 0, 0, 0, 5)
        + b"hello"
        + struct.pack(">h", len(props1))
        + props1
        + struct.pack(">iiiii", 22 + 0 + len(props2), 0, 0, 9, 0)
        + struct.pack(">h", len(props2))
        + props2
    )
    messages = [
        Message("T", b"hello", properties={"UNIQ_KEY": "A1", "WAIT": "true"}),
        Message("T", b"", tags="标签", flag=9),
    ]
    assert encode_batch(messages) == expected
    entries = decode_batch(expected)
    assert [(e.flag, e.body, e.properties) for e in entries] == [
        (0, b"hello", "UNIQ_KEY\x01A1\x02WAIT\x01true"),
        (9, b"", "TAGS\x01标签"),
    ]


def test_batch_parse_ignores_totalsize_and_accepts_trailing_separator() -> None:
    props = b"KEYS\x01k\x02"  # C++ keeps the trailing U+0002
    entry = struct.pack(">iiiii", 999, 0, 0, 1, 3) + b"abc" + struct.pack(">h", len(props)) + props
    entries = decode_batch(entry + entry)
    assert len(entries) == 2
    assert decode_properties(entries[0].properties) == {"KEYS": "k"}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\0" * 19, "truncated in its header"),
        (struct.pack(">iiiii", 0, 0, 0, 0, 10) + b"abc", "body length 10 beyond the batch"),
        (struct.pack(">iiiii", 0, 0, 0, 0, -1) + b"abc", "body length -1 beyond the batch"),
        (struct.pack(">iiiii", 0, 0, 0, 0, 0) + struct.pack(">h", 5) + b"ab", "properties length 5"),
        (struct.pack(">iiiii", 0, 0, 0, 0, 0) + struct.pack(">h", 1) + b"\xff", "not UTF-8"),
    ],
)
def test_bad_batches(data: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        decode_batch(data)


# -- properties (§4.1) --------------------------------------------------------------------------


def test_properties_encode_without_trailing_separator() -> None:
    assert encode_properties({"TAGS": "TagA", "KEYS": "k1 k2"}) == "TAGS\x01TagA\x02KEYS\x01k1 k2"
    assert encode_properties({}) == ""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("TAGS\x01TagA\x02KEYS\x01k1", {"TAGS": "TagA", "KEYS": "k1"}),  # Java >= 4.9.4
        ("TAGS\x01TagA\x02KEYS\x01k1\x02", {"TAGS": "TagA", "KEYS": "k1"}),  # older Java, C++, ali-ons
        ("\x02\x02TAGS\x01TagA\x02\x02\x02KEYS\x01k1\x02\x02", {"TAGS": "TagA", "KEYS": "k1"}),
        ("K\x01a\x01b\x02L\x01c", {"K": "a\x01b", "L": "c"}),  # split at the first U+0001
        ("TAGS\x01null\x02", {"TAGS": "null"}),  # ali-ons without tags
        ("\x01v\x02A\x011", {"A": "1"}),  # empty name dropped
        ("A\x011\x02\x01v", {"A": "1"}),
        ("E\x01\x02A\x011", {"A": "1"}),  # empty value dropped, as Java does
        ("A\x011\x02E\x01", {"A": "1"}),
        ("A\x011\x02E\x01\x02", {"A": "1"}),
        ("junk\x02A\x011", {"A": "1"}),  # no separator: dropped
        ("A\x011\x02A\x012", {"A": "2"}),  # last one wins
        ("", {}),
        ("\x02", {}),
    ],
)
def test_properties_decode(text: str, expected: dict[str, str]) -> None:
    assert decode_properties(text) == expected


def java_string2message_properties(properties: str) -> dict[str, str]:
    """A line-by-line port of Java 4.9.7 ``MessageDecoder.string2messageProperties``."""
    result: dict[str, str] = {}
    length = len(properties)
    index = 0
    while index < length:
        new_index = properties.find("\x02", index)
        if new_index < 0:
            new_index = length
        if new_index - index >= 3:
            kv = properties.find("\x01", index)
            if index < kv < new_index - 1:
                result[properties[index:kv]] = properties[kv + 1 : new_index]
        index = new_index + 1
    return result


@given(st.text(alphabet="ab\x01\x02é", max_size=30))
def test_properties_decode_agrees_with_java(text: str) -> None:
    assert decode_properties(text) == java_string2message_properties(text)


@given(
    st.dictionaries(
        st.text(st.characters(blacklist_characters="\x01\x02"), min_size=1, max_size=8),
        st.text(st.characters(blacklist_characters="\x02"), min_size=1, max_size=8),
        max_size=6,
    ),
    st.booleans(),
)
def test_properties_round_trip(props: dict[str, str], trailing: bool) -> None:
    text = encode_properties(props)
    if trailing and text:
        text += "\x02"
    assert decode_properties(text) == props


# -- msgIds (§4.5, §4.6) ------------------------------------------------------------------------


def test_offset_msg_id_example_from_the_spec() -> None:
    store = pack_host("127.0.0.1", 10911)
    assert store == bytes.fromhex("7F000001") + struct.pack(">i", 10911)
    assert encode_offset_msg_id(store, 0x1A2B) == "7F00000100002A9F0000000000001A2B"
    assert decode_offset_msg_id("7F00000100002A9F0000000000001A2B") == ("127.0.0.1:10911", 0x1A2B)
    assert decode_offset_msg_id("7f00000100002a9f0000000000001a2b") == ("127.0.0.1:10911", 0x1A2B)


@pytest.mark.parametrize(
    ("msg_id", "message"),
    [
        ("XYZ00000100002A9F0000000000001A2B", "not hexadecimal"),
        ("7F00000100002A9F0000000000001A", "has 30 hex digits, expected 32 or 56"),
    ],
)
def test_bad_offset_msg_ids(msg_id: str, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        decode_offset_msg_id(msg_id)


def test_unique_ids_have_javas_layout() -> None:
    ids = UniqueIdGenerator(ip=bytes([10, 0, 0, 5]))
    first, second = ids.next_id(), ids.next_id()
    assert len(first) == len(second) == 32
    assert first.startswith("0A000005") and first == first.upper()
    assert first[:20] == second[:20]  # IP + pid + instance hash
    assert first != second
    assert (int(second[-4:], 16) - int(first[-4:], 16)) % 0x10000 == 1


# -- Java String.hashCode (tag codes) -------------------------------------------------------------

# (UTF-8 hex of the string, String.hashCode() printed by Java 17)
JAVA_HASHES = [
    ("", 0),
    ("61", 97),
    ("54616741", 2598919),
    ("54616742", 2598920),
    ("2a", 42),
    ("68656c6c6f20776f726c64", 1794106052),
    ("54686520717569636b2062726f776e20666f78206a756d7073206f76657220746865206c617a7920646f67", -609428141),
    ("e4b8ade69687e6a087e7adbe", 622041809),  # 中文标签
    ("c39c6ec3af63c3b864c3a9", 1055433303),  # Ünïcødé
    ("f09f9880", 1772899),  # U+1F600, a surrogate pair in UTF-16
    ("f09d849e6d75736963", 1496085755),  # U+1D11E + "music"
    ("7461672df09f9a802dc3a9", 890321362),  # "tag-🚀-é"
]


@pytest.mark.parametrize(("utf8_hex", "expected"), JAVA_HASHES)
def test_java_hash_matches_java(utf8_hex: str, expected: int) -> None:
    text = bytes.fromhex(utf8_hex).decode()
    assert java_hash(text) == expected


# Longer than int()'s 4300-digit limit, and all of ASCII (Java 17 again).
JAVA_LONG_HASHES = [
    ("k" * 5000, 1792839040),
    ("".join(chr(32 + (i * 7) % 95) for i in range(10007)), 1592933821),
    ("".join(chr(i) for i in range(128)), -2057338816),
]


@pytest.mark.parametrize(("utf8_hex", "expected"), JAVA_HASHES)
def test_java_hash_fast_matches_java(utf8_hex: str, expected: int) -> None:
    assert java_hash_fast(bytes.fromhex(utf8_hex).decode()) == expected


@pytest.mark.parametrize(("text", "expected"), JAVA_LONG_HASHES, ids=["k*5000", "pattern*10007", "ascii"])
def test_java_hashes_of_long_strings(text: str, expected: int) -> None:
    assert java_hash_fast(text) == expected
    assert java_hash(text) == expected


@given(st.text(max_size=60) | st.text(st.characters(max_codepoint=127), min_size=4000, max_size=9000))
def test_java_hash_fast_agrees_with_java_hash(text: str) -> None:
    assert java_hash_fast(text) == java_hash(text)


def test_record_head_struct_sizes() -> None:
    assert record_head_struct(8, 8).size == 88
    assert record_head_struct(20, 8).size == record_head_struct(8, 20).size == 100
    assert record_head_struct(20, 20).size == 112
    with pytest.raises(ProtocolError, match="8 \\(IPv4\\) or 20 \\(IPv6\\)"):
        record_head_struct(16, 8)


def test_tags_code() -> None:
    assert tags_code(None) == 0
    assert tags_code("") == 0
    assert tags_code("TagA") == 2598919
    assert java_hash("\ud800") == 0xD800  # a lone surrogate still hashes as one UTF-16 unit


# -- value types --------------------------------------------------------------------------------


def test_message_tags_keys_and_delay_live_in_properties() -> None:
    msg = Message("T", "hello", tags="TagA", keys=["k1", "k2"], delay_level=3)
    assert msg.body == b"hello"
    assert msg.properties == {"TAGS": "TagA", "KEYS": "k1 k2", "DELAY": "3"}
    msg.tags = None
    msg.keys = []
    msg.delay_level = 0
    assert msg.properties == {}
    with pytest.raises(ValueError, match="contains a space"):
        msg.keys = ["a b"]
    assert Message("T", b"x") == Message("T", b"x")
    assert Message("T", b"x") != Message("T", b"y")
    ext = MessageExt("T", b"x", sys_flag=int(MessageSysFlag.COMPRESSED))
    assert ext.offset_msg_id == "0" * 32
    assert ext.msg_id == ext.offset_msg_id  # no UNIQ_KEY: the offset msgId


def _all_slots(cls: type) -> list[str]:
    return [name for klass in cls.__mro__ for name in getattr(klass, "__slots__", ())]


def test_decoded_message_has_every_attribute_set() -> None:
    # decode_record fills MessageExt's slots directly; a slot it forgot would raise on access.
    for data in (
        assemble_record(born=V4_BORN, store=V4_STORE, sys_flag=0),
        assemble_record(born=V6_BORN, store=V6_STORE, sys_flag=0x30),
    ):
        msg, _ = decode_record(data)
        for name in _all_slots(MessageExt):
            getattr(msg, name)
        assert msg.broker_name is None
        rebuilt = MessageExt(
            msg.topic,
            msg.body,
            flag=msg.flag,
            properties=msg.properties,
            queue_id=msg.queue_id,
            queue_offset=msg.queue_offset,
            commit_log_offset=msg.commit_log_offset,
            sys_flag=msg.sys_flag,
            born_timestamp=msg.born_timestamp,
            born_host=msg.born_host_bytes,
            store_timestamp=msg.store_timestamp,
            store_host=msg.store_host_bytes,
            reconsume_times=msg.reconsume_times,
            prepared_transaction_offset=msg.prepared_transaction_offset,
            body_crc=msg.body_crc,
            store_size=msg.store_size,
        )
        assert rebuilt == msg


def test_records_decode_from_memoryview_and_bytearray() -> None:
    one = assemble_record(born=V4_BORN, store=V4_STORE, sys_flag=0)
    two = assemble_record(born=V6_BORN, store=V6_STORE, sys_flag=0x30)
    expected = decode_records(one + two)
    for buf in (memoryview(one + two), bytearray(one + two), memoryview(b"pad" + one + two)[3:]):
        messages = decode_records(buf)
        assert messages == expected
        assert all(type(m.body) is bytes for m in messages)
        assert read_record_header(buf, len(one)).topic == "TopicTest"


def test_small_helpers() -> None:
    data = assemble_record(born=V4_BORN, store=V4_STORE, sys_flag=0)
    assert peek_record_size(data) == (len(data), MESSAGE_MAGIC_CODE)
    assert zlib.decompress(compress_body(b"abc" * 100)) == b"abc" * 100
    msg, _ = decode_record(data)
    assert repr(msg) == "<MessageExt topic='TopicTest' queue_id=3 queue_offset=1000 tags='TagA' body=6B>"
    assert repr(Message("T", b"xy", tags="a")) == "<Message topic='T' tags='a' body=2B>"
    assert Message("T") != msg  # different types never compare equal
    assert Message("T", properties={"DELAY": "x"}).delay_level == 0
    assert Message("T", properties={"UNIQ_KEY": "U"}).unique_id == "U"
    with pytest.raises(ProtocolError, match="properties of 32768 bytes exceed 32767"):
        encode_batch([Message("T", properties={"K": "v" * 32766})])
    assert len(new_unique_id()) == 32


def test_unique_ids_roll_over_at_the_month() -> None:
    ids = UniqueIdGenerator()
    ids._roll_month(int(datetime(2023, 12, 31, 23, 0).timestamp() * 1000))
    assert ids._next_month_ms == int(datetime(2024, 1, 1).timestamp() * 1000)
    ids._roll_month(int(datetime(2024, 2, 10).timestamp() * 1000))
    assert ids._month_start_ms == int(datetime(2024, 2, 1).timestamp() * 1000)
    assert ids._next_month_ms == int(datetime(2024, 3, 1).timestamp() * 1000)


# -- typed payloads --------------------------------------------------------------------------


@dataclasses.dataclass
class Row:
    id: uuid.UUID
    at: dt.date


class Order(pydantic.BaseModel):
    id: int


def test_json_message_records_its_content_type_and_keeps_other_settings() -> None:
    row = Row(uuid.UUID(int=1), dt.date(2026, 1, 2))
    msg = Message.json("T", row, tags="t", keys=["a", "b"], properties={"p": "v"}, delay_level=3)
    assert msg.body == b'{"id":"00000000-0000-0000-0000-000000000001","at":"2026-01-02"}'
    assert (msg.tags, msg.keys, msg.delay_level, msg.properties["p"]) == ("t", ["a", "b"], 3, "v")
    assert msg.content_type == "application/json"
    assert msg.model(Row) == row
    assert Message.json("T", "ünï").body == '"ünï"'.encode()


def test_json_decoding_errors_are_value_errors() -> None:
    assert Message("T", b"plain").content_type is None
    with pytest.raises(ValueError):
        Message("T", b"not json").json()
    with pytest.raises(ValueError):
        Message("T", b'{"id": "x"}').model(Order)
    assert Message("T", b'{"id": "7"}').model(Order) == Order(id=7)
