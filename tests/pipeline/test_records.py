"""The columnar pull-body decoder against the SDK's message decoder: same rows, every column
(and the ``headers`` one), for IPv4 and IPv6 hosts, compressed bodies, odd properties strings
and bad input."""

from __future__ import annotations

import random
import zlib

import pyarrow as pa
import pytest

from aiorocketmq.pipeline.records import decode_chunk, keep_rows, messages_to_batch, record_starts
from aiorocketmq.pipeline.schema import arrow_read_schema
from aiorocketmq.protocol.codes import MessageSysFlag
from aiorocketmq.protocol.errors import ProtocolError
from aiorocketmq.protocol.message import decode_records, encode_offset_msg_id, encode_record, pack_host

V4_BORN = pack_host("10.1.2.3", 51000)
V4_STORE = pack_host("127.0.0.1", 10911)
V6_STORE = pack_host("::1", 10911)


def record(offset: int, props: str, body: bytes = b"", **fields: object) -> bytes:
    values: dict[str, object] = {
        "topic": b"Orders",
        "body": body or f"body-{offset}".encode(),
        "properties": props.encode(),
        "queue_id": 3,
        "queue_offset": offset,
        "commit_log_offset": 1000 + offset * 200,
        "born_timestamp": 1_700_000_000_000 + offset,
        "store_timestamp": 1_700_000_000_500 + offset,
        "born_host": V4_BORN,
        "store_host": V4_STORE,
        "reconsume_times": offset % 3,
    }
    values.update(fields)
    return encode_record(**values)  # type: ignore[arg-type]


def expected(bodies: list[bytes]) -> pa.RecordBatch:
    messages = [m for body in bodies for m in decode_records(body)]
    return messages_to_batch(messages, "Orders", "broker-a")


def test_fast_path_matches_message_decoder_on_every_column() -> None:
    rng = random.Random(7)
    bodies = []
    offset = 0
    for _ in range(5):
        parts = []
        for _ in range(rng.randrange(1, 40)):
            props = {
                "TAGS": rng.choice(["paid", "refunded", "é-ünï"]),
                "UNIQ_KEY": f"ID{offset:06d}",
                "WAIT": "true",
            }
            if rng.random() < 0.5:
                props["KEYS"] = f"order-{offset} user-{offset % 7}"
            if rng.random() < 0.3:
                del props["TAGS"]
            text = "\x02".join(f"{k}\x01{v}" for k, v in props.items())
            parts.append(record(offset, text, rng.randbytes(rng.randrange(0, 300)) or b"x"))
            offset += 1
        bodies.append(b"".join(parts))
    got = decode_chunk(bodies, "Orders", "broker-a")
    want = expected(bodies)
    assert got.schema.equals(arrow_read_schema())
    assert got.num_rows == offset
    assert got.to_pylist() == want.to_pylist()
    first = got.slice(0, 1).to_pylist()[0]
    assert first["born_host"] == "10.1.2.3:51000"
    assert first["store_host"] == "127.0.0.1:10911"
    assert first["queue_id"] == 3 and first["queue_offset"] == 0
    assert first["store_timestamp"].timestamp() == pytest.approx(1_700_000_000.5)

    # includeHeaders: every property as a (key, bytes) pair, in stored order, on both paths.
    with_headers = decode_chunk(bodies, "Orders", "broker-a", include_headers=True)
    messages = [m for body in bodies for m in decode_records(body)]
    assert with_headers.schema.equals(arrow_read_schema(True))
    assert (
        with_headers.to_pylist()
        == messages_to_batch(messages, "Orders", "broker-a", include_headers=True).to_pylist()
    )
    assert with_headers.drop_columns(["headers"]).to_pylist() == got.to_pylist()
    for row, message in zip(with_headers.to_pylist(), messages, strict=True):
        assert row["headers"] == [{"key": k, "value": v.encode()} for k, v in message.properties.items()]


def test_properties_follow_javas_rules_and_msg_id_falls_back_to_the_offset_id() -> None:
    odd = [
        "",  # no properties at all: msg_id is the broker's offset id
        "TAGS\x01a\x02",  # trailing separator
        "\x01nameless\x02TAGS\x01b",  # empty name dropped
        "KEYS\x01\x02TAGS\x01c",  # empty value dropped
        "lonely\x02TAGS\x01d\x02x\x01y\x01z",  # a segment without \x01; value keeps later \x01
    ]
    body = b"".join(record(i, text) for i, text in enumerate(odd))
    got = decode_chunk([body], "Orders", "broker-a").to_pylist()
    want = expected([body]).to_pylist()
    assert got == want
    assert got[0]["msg_id"] == encode_offset_msg_id(V4_STORE, 1000)
    assert got[0]["properties"] == [] and got[0]["tags"] is None
    assert [r["tags"] for r in got[1:]] == ["a", "b", "c", "d"]
    assert dict(got[4]["properties"])["x"] == "y\x01z"


def test_ipv6_hosts_and_compressed_bodies_take_the_careful_path() -> None:
    plain = record(0, "TAGS\x01a\x02UNIQ_KEY\x01A")
    v6 = record(1, "TAGS\x01b\x02UNIQ_KEY\x01B", store_host=V6_STORE)
    compressed = record(
        2,
        "TAGS\x01c\x02UNIQ_KEY\x01C",
        body=zlib.compress(b"z" * 5000),
        sys_flag=MessageSysFlag.COMPRESSED.value,
    )
    body = plain + v6 + compressed
    rows = decode_chunk([body], "Orders", "broker-a").to_pylist()
    assert [r["store_host"] for r in rows] == ["127.0.0.1:10911", "[::1]:10911", "127.0.0.1:10911"]
    assert rows[2]["body"] == b"z" * 5000
    assert rows == expected([body]).to_pylist()


def test_limits_drop_rows_a_pull_returned_past_its_window_and_tags_filter_exactly() -> None:
    first = b"".join(record(i, f"TAGS\x01{'a' if i % 2 else 'b'}") for i in range(0, 6))
    second = b"".join(record(i, f"TAGS\x01{'a' if i % 2 else 'b'}") for i in range(4, 10))
    batch = decode_chunk([first, second], "Orders", "broker-a", limits=[4, 10])
    assert batch.column("queue_offset").to_pylist() == list(range(10))
    kept = keep_rows(batch, 9, frozenset({"a"}))
    assert kept.column("queue_offset").to_pylist() == [1, 3, 5, 7]


def test_record_starts_rejects_bodies_whose_sizes_do_not_tile() -> None:
    good = record(0, "TAGS\x01a")
    assert record_starts(good + good) == [0, len(good)]
    with pytest.raises(ProtocolError):
        record_starts(good + good[:10])
    with pytest.raises(ProtocolError):
        record_starts(b"\x00\x00\x00\x00" + good)
    corrupt = bytearray(good)
    corrupt[4] ^= 0xFF  # magic code
    with pytest.raises(ProtocolError):
        decode_chunk([bytes(corrupt)], "Orders", "broker-a")
