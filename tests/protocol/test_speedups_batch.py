"""The compiled helpers of a batched send (protocol/_speedups.c) against what they replace:
the body checksum against ``zlib.crc32`` (the carry-less-multiply path for 64 bytes and more,
the table path for the rest), the batch readers ``same_queue`` and ``tags_codes`` against the
attribute reads of the pure code, the record encoder on large bodies against the pure encoder,
and the messages of ``store_batch`` (left to no collector) against the pure twin's."""

from __future__ import annotations

import gc
import importlib
import os
import tempfile
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiorocketmq.broker import batch
from aiorocketmq.broker.store.commit_log import CommitLog
from aiorocketmq.broker.store.messages import PutStatus, StoreMessage
from aiorocketmq.protocol import message
from aiorocketmq.protocol.errors import ProtocolError
from aiorocketmq.protocol.message import Message, MessageExt, PropertyKey, encode_batch, pack_host

try:
    C: Any = importlib.import_module("aiorocketmq.protocol._speedups")
except ImportError as exc:  # pragma: no cover - the build (setup.py) warned about it
    pytest.fail(f"the compiled codecs were not built: {exc}", pytrace=False)

# Registered even when this process runs the pure codecs (again is harmless: the same objects).
C.setup_records(ProtocolError, MessageExt, zlib.crc32, message.decompress_body)
batch.setup_compiled(C)

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_STORE_DIR = Path(tempfile.gettempdir()) / "aiorocketmq-speedups-batch"


def test_crc32_of_every_length_up_to_a_few_blocks() -> None:
    for n in range(0, 400):
        data = os.urandom(n)
        assert C.crc32(data) == zlib.crc32(data), n
    for data in (bytes(4096), b"\xff" * 4096, os.urandom(65536 + 13), os.urandom(1 << 20)):
        assert C.crc32(data) == zlib.crc32(data)


@SETTINGS
@given(st.binary(max_size=3000), st.integers(0, 15))
def test_crc32_of_any_bytes_at_any_alignment(data: bytes, skip: int) -> None:
    view = memoryview(data)[min(skip, len(data)) :]
    assert C.crc32(view) == zlib.crc32(view)
    assert C.crc32(bytearray(data)) == zlib.crc32(data)


class _Sub(StoreMessage):
    __slots__ = ()


_messages = st.lists(
    st.builds(
        StoreMessage,
        topic=st.sampled_from(["T", "U", "T" * 3]),
        queue_id=st.sampled_from([0, 1, 2**40]),
        body=st.just(b"b"),
        properties=st.just(""),
        tags_code=st.integers(-(2**31), 2**31 - 1),
    ),
    min_size=1,
    max_size=8,
)


@SETTINGS
@given(_messages, st.sampled_from(["T", "U", "V"]), st.sampled_from([0, 1, 2**40]))
def test_batch_readers_agree_with_attribute_reads(
    msgs: list[StoreMessage], topic: str, queue_id: int
) -> None:
    want = all(m.topic == topic and m.queue_id == queue_id for m in msgs)
    assert C.same_queue(msgs, topic, queue_id) is want
    # A topic equal but not the same object is the same topic.
    assert C.same_queue(msgs, "".join(list(topic)), queue_id) is want
    assert C.tags_codes(msgs) == [m.tags_code for m in msgs]


def test_batch_readers_leave_what_they_cannot_read_to_the_pure_code() -> None:
    plain = [StoreMessage("T", 1, b"x", "", tags_code=3)]
    assert C.same_queue(plain, "T", 1) is True
    assert C.tags_codes(plain) == [3]
    sub = [*plain, _Sub("T", 1, b"y", "")]
    assert C.same_queue(sub, "T", 1) is None
    assert C.tags_codes(sub) is None
    assert C.same_queue(tuple(plain), "T", 1) is None  # a list only
    assert C.tags_codes(tuple(plain)) is None
    assert C.same_queue(plain, "T", True) is None  # an int exactly
    odd = [StoreMessage("T", True, b"x", "", tags_code=3)]  # type: ignore[arg-type]
    assert C.same_queue(odd, "T", 1) is None
    not_an_int = [StoreMessage("T", 1, b"x", "", tags_code="3")]  # type: ignore[arg-type]
    assert C.tags_codes(not_an_int) is None
    unset = StoreMessage.__new__(StoreMessage)
    assert C.same_queue([unset], "T", 1) is None
    assert C.tags_codes([unset]) is None


@SETTINGS
@given(
    st.lists(st.integers(0, 5000), min_size=1, max_size=6),
    st.sampled_from([0, 1_700_000_000_123]),
    st.integers(0, 2**40),
)
def test_large_bodies_encode_as_the_pure_encoder_does(sizes: list[int], stamp: int, phys: int) -> None:
    host = pack_host("127.0.0.1", 10911)
    msgs = [
        StoreMessage("T", 2, os.urandom(n), f"UNIQ_KEY\x01U{i}\x02", store_timestamp=stamp)
        for i, n in enumerate(sizes)
    ]
    log = CommitLog(_STORE_DIR, 1 << 20, host, 1 << 16)
    prefix = log.topic_prefix("T")
    assert prefix is not None
    fast = C.encode_records(msgs, prefix, 7, 1_700_000_000_000, phys, host, 1 << 16)
    want = log.encode_pure(msgs, prefix, 7, 1_700_000_000_000, phys)
    assert isinstance(fast, tuple) and not isinstance(want, PutStatus)
    data, offsets, sizes_out, stamps, next_qoff = fast
    parts, w_offsets, w_sizes, w_stamps, w_next = want
    assert data == b"".join(parts)
    assert (offsets, sizes_out, stamps, next_qoff) == (w_offsets, w_sizes, w_stamps, w_next)


def test_store_batch_messages_are_left_to_no_collector_and_survive_one() -> None:
    entries = [Message("T", os.urandom(1024), tags="a", keys=["k1", "k2"]) for _ in range(4)]
    for i, entry in enumerate(entries):
        entry.properties[PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = f"U{i}"
    body = encode_batch(entries)
    args = (body, "T", 1, "CLUSTER\x01c", 0, 1_700_000_000_000, pack_host("10.0.0.1", 5))
    fast = C.store_batch(*args)
    pure = batch.store_batch_pure(*args)
    assert isinstance(fast, tuple) and isinstance(pure, tuple)
    assert not any(gc.is_tracked(m) for m in fast[0])
    gc.collect()
    assert fast == pure
