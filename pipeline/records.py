"""Pull-response bodies to Arrow record batches, column by column.

A pull body is a run of stored records (docs/protocol.md §4.3). Decoding them one
:class:`~protocol.message.MessageExt` at a time costs several microseconds a message, more
than the whole read budget, so this module decodes a whole chunk of bodies at once: one short
Python loop finds where each record starts, numpy gathers the fixed-width fields of every
record in one step each, and pyarrow's compute kernels split the properties strings into the
``properties`` map and pick ``TAGS``, ``KEYS`` and ``UNIQ_KEY`` out of it.

Chunks that hold a record the fast path does not cover (IPv6 hosts, compressed bodies) are
decoded by :func:`aiorocketmq.protocol.message.decode_records` instead, so both paths give the same rows.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aiorocketmq.protocol.codes import MessageSysFlag
from aiorocketmq.protocol.errors import ProtocolError
from aiorocketmq.protocol.message import (
    MESSAGE_MAGIC_CODE,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    PropertyKey,
    decode_records,
    encode_offset_msg_id,
    unpack_host,
)

from .schema import arrow_read_schema

_SIZE = struct.Struct(">i")
_SLOW_FLAGS = (
    MessageSysFlag.BORNHOST_V6.value | MessageSysFlag.STOREHOST_V6.value | MessageSysFlag.COMPRESSED.value
)

# Byte positions inside a record whose hosts are both IPv4 (the fast path's only layout).
_MAGIC = 4
_QUEUE_ID = 12
_QUEUE_OFFSET = 20
_COMMIT_LOG_OFFSET = 28
_SYS_FLAG = 36
_BORN_TIMESTAMP = 40
_BORN_HOST = 48
_STORE_TIMESTAMP = 56
_STORE_HOST = 64
_RECONSUME_TIMES = 72
_BODY_LENGTH = 84
_BODY = 88

_TAGS = PropertyKey.TAGS
_KEYS = PropertyKey.KEYS
_UNIQ_KEY = PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
#: Properties shown as columns of their own (tags, keys, msg_id), left out of ``properties``.
PROMOTED = frozenset({_TAGS, _KEYS, _UNIQ_KEY})
_PROMOTED_SET = pa.array(sorted(PROMOTED), pa.string())


def record_starts(buf: bytes) -> list[int]:
    """Where each record of ``buf`` starts, checking that the sizes tile it exactly."""
    starts: list[int] = []
    append = starts.append
    unpack = _SIZE.unpack_from
    size = len(buf)
    pos = 0
    try:
        while pos < size:
            append(pos)
            total = unpack(buf, pos)[0]
            if total <= 0:
                raise ProtocolError(f"record at {pos} has size {total}")
            pos += total
    except struct.error:
        raise ProtocolError(f"record at {pos} truncated in its size field") from None
    if pos != size:
        raise ProtocolError(f"last record at {starts[-1]} runs past the end of the body ({pos} > {size})")
    return starts


def _gather(u8: np.ndarray, starts: np.ndarray, offset: int, dtype: str) -> np.ndarray:
    """One fixed-width big-endian field of every record, as a native-order array."""
    width = np.dtype(dtype).itemsize
    idx = starts[:, None] + (offset + np.arange(width, dtype=np.int64))
    return u8[idx].view(dtype).ravel().astype(dtype.replace(">", "="))


def _hosts(raw: np.ndarray) -> pa.Array:
    """``ip:port`` strings from packed IPv4 hosts (one uint64 per record): each distinct
    host is formatted once."""
    unique, inverse = np.unique(raw, return_inverse=True)
    names = [unpack_host(int(v).to_bytes(8, "big")) for v in unique.tolist()]
    return pa.array(names, pa.string()).take(pa.array(inverse.astype(np.int32)))


def _property(keys: pa.Array, values: pa.Array, parents: np.ndarray, rows: int, name: str) -> pa.Array:
    """The value of property ``name`` per row (null where absent; the last one wins)."""
    hits = np.flatnonzero(pc.equal(keys, name).to_numpy(zero_copy_only=False))
    index = np.full(rows, -1, dtype=np.int64)
    index[parents[hits]] = hits
    return values.take(pa.array(index, mask=index < 0))


def _split_properties(text: pa.Array) -> tuple[pa.Array, pa.Array, np.ndarray]:
    """Names, values and row numbers of the properties in the properties strings, with
    Java's rules: segments split at their first ``\\x01``; segments with an empty name or
    value are dropped."""
    segments = pc.split_pattern(text, PROPERTY_SEPARATOR)
    flat = pc.list_flatten(segments)
    parents = pc.list_parent_indices(segments).to_numpy()
    pairs = pc.split_pattern(flat, NAME_VALUE_SEPARATOR, max_splits=1)
    complete = pc.equal(pc.list_value_length(pairs), 2)
    keep = complete.to_numpy(zero_copy_only=False)
    if not keep.all():
        pairs = pairs.filter(complete)
        parents = parents[keep]
    names = pc.list_element(pairs, 0)
    values = pc.list_element(pairs, 1)
    nonempty = pc.and_(pc.greater(pc.utf8_length(names), 0), pc.greater(pc.utf8_length(values), 0))
    keep = nonempty.to_numpy(zero_copy_only=False)
    if not keep.all():
        names = names.filter(nonempty)
        values = values.filter(nonempty)
        parents = parents[keep]
    return names, values, parents


def _utf8(values: list[bytes], what: str) -> pa.Array:
    array = pa.array(values, pa.binary())
    try:
        return array.cast(pa.string())
    except pa.ArrowInvalid:
        raise ProtocolError(f"a record has {what} that are not UTF-8") from None


def decode_chunk(
    bodies: Sequence[bytes],
    topic: str,
    broker: str,
    limits: Sequence[int] | None = None,
    *,
    include_headers: bool = False,
) -> pa.RecordBatch:
    """Every record of ``bodies`` (pull-response bodies of one queue of ``topic`` on
    ``broker``) as one record batch of the read schema (with the ``headers`` column when
    ``include_headers``). With ``limits`` (one per body), a body's records at or past its
    limit are dropped: a pull with a tag filter may scan past the window it was asked for,
    into the next window's offsets."""
    batch = _decode(bodies, topic, broker, include_headers)
    if limits is None or not batch.num_rows:
        return batch
    if len(bodies) == 1:
        row_limits: pa.Array | int = limits[0]
    else:
        sizes = [record_count(body) for body in bodies]
        row_limits = pa.array(np.repeat(np.asarray(limits, dtype=np.int64), sizes))
    mask = pc.less(batch.column("queue_offset"), row_limits)
    return batch if pc.all(mask).as_py() else batch.filter(mask)


def record_count(body: bytes) -> int:
    """How many records a pull body holds."""
    return len(record_starts(body))


def _decode(bodies: Sequence[bytes], topic: str, broker: str, include_headers: bool) -> pa.RecordBatch:
    buf = bodies[0] if len(bodies) == 1 else b"".join(bodies)
    if not buf:
        return _empty(include_headers)
    starts_list = record_starts(buf)
    rows = len(starts_list)
    u8 = np.frombuffer(buf, dtype=np.uint8)
    starts = np.array(starts_list, dtype=np.int64)
    if (_gather(u8, starts, _MAGIC, ">i4") != MESSAGE_MAGIC_CODE).any():
        raise ProtocolError("a record of the pull body has a bad magic code")
    sys_flag = _gather(u8, starts, _SYS_FLAG, ">i4")
    if (sys_flag & _SLOW_FLAGS).any():
        return messages_to_batch(
            decode_records(buf, decompress=True), topic, broker, include_headers=include_headers
        )
    totals = _gather(u8, starts, 0, ">i4").astype(np.int64)
    body_len = _gather(u8, starts, _BODY_LENGTH, ">i4").astype(np.int64)
    ends = starts + totals
    body_start = starts + _BODY
    topic_pos = body_start + body_len
    if (body_len < 0).any() or (topic_pos + 3 > ends).any():
        raise ProtocolError("a record of the pull body has a body length beyond its size")
    props_len_pos = topic_pos + 1 + u8[topic_pos].astype(np.int64)
    if (props_len_pos + 2 > ends).any():
        raise ProtocolError("a record of the pull body has a topic length beyond its size")
    props_len = (u8[props_len_pos].astype(np.int64) << 8) | u8[props_len_pos + 1]
    props_start = props_len_pos + 2
    if (props_start + props_len != ends).any():
        raise ProtocolError("a record of the pull body has field lengths that disagree with its size")

    bs = body_start.tolist()
    be = topic_pos.tolist()
    body = pa.array([buf[a:b] for a, b in zip(bs, be)], pa.binary())
    ps = props_start.tolist()
    pe = ends.tolist()
    text = _utf8([buf[a:b] for a, b in zip(ps, pe)], "properties")
    names, values, parents = _split_properties(text)

    uniq = _property(names, values, parents, rows, _UNIQ_KEY)
    commit_log_offset = _gather(u8, starts, _COMMIT_LOG_OFFSET, ">i8")
    store_host_raw = _gather(u8, starts, _STORE_HOST, ">u8")
    if uniq.null_count:
        missing = np.flatnonzero(uniq.is_null().to_numpy(zero_copy_only=False))
        fallback = np.empty(rows, dtype=object)
        for i in missing.tolist():
            fallback[i] = encode_offset_msg_id(
                int(store_host_raw[i]).to_bytes(8, "big"), int(commit_log_offset[i])
            )
        uniq = pc.coalesce(uniq, pa.array(fallback, pa.string()))
    columns = {
        "topic": _constant(topic, rows),
        "broker": _constant(broker, rows),
        "queue_id": pa.array(_gather(u8, starts, _QUEUE_ID, ">i4"), pa.int32()),
        "queue_offset": pa.array(_gather(u8, starts, _QUEUE_OFFSET, ">i8"), pa.int64()),
        "msg_id": uniq,
        "tags": _property(names, values, parents, rows, _TAGS),
        "keys": _property(names, values, parents, rows, _KEYS),
        "body": body,
        "properties": _other_properties(names, values, parents, rows),
        "born_timestamp": _timestamps(_gather(u8, starts, _BORN_TIMESTAMP, ">i8")),
        "store_timestamp": _timestamps(_gather(u8, starts, _STORE_TIMESTAMP, ">i8")),
        "born_host": _hosts(_gather(u8, starts, _BORN_HOST, ">u8")),
        "store_host": _hosts(store_host_raw),
        "reconsume_times": pa.array(_gather(u8, starts, _RECONSUME_TIMES, ">i4"), pa.int32()),
    }
    if include_headers:
        columns["headers"] = _headers(names, values, parents, rows)
    return _batch(columns, include_headers)


def _row_offsets(parents: np.ndarray, rows: int) -> pa.Array:
    """List offsets for ``rows`` rows from each item's row number (ascending)."""
    offsets = np.zeros(rows + 1, dtype=np.int32)
    if len(parents):
        np.cumsum(np.bincount(parents, minlength=rows), out=offsets[1:])
    return pa.array(offsets)


def _headers(names: pa.Array, values: pa.Array, parents: np.ndarray, rows: int) -> pa.Array:
    """Every property as a ``(key, value)`` struct, in stored order: Kafka's ``headers``."""
    pairs = pa.StructArray.from_arrays([names, values.cast(pa.binary())], names=["key", "value"])
    return pa.ListArray.from_arrays(_row_offsets(parents, rows), pairs)


def _other_properties(names: pa.Array, values: pa.Array, parents: np.ndarray, rows: int) -> pa.Array:
    """The properties map without the ones that have their own columns."""
    keep = pc.invert(pc.is_in(names, value_set=_PROMOTED_SET))
    mask = keep.to_numpy(zero_copy_only=False)
    if not mask.all():
        names = names.filter(keep)
        values = values.filter(keep)
        parents = parents[mask]
    return pa.MapArray.from_arrays(_row_offsets(parents, rows), names, values)


def _constant(value: str, rows: int) -> pa.Array:
    return pa.array([value], pa.string()).take(pa.array(np.zeros(rows, dtype=np.int32)))


def _timestamps(millis: np.ndarray) -> pa.Array:
    return pa.array(millis * 1000, pa.timestamp("us", tz="UTC"))


def _empty(include_headers: bool = False) -> pa.RecordBatch:
    schema = arrow_read_schema(include_headers)
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)


def _batch(columns: dict[str, pa.Array], include_headers: bool = False) -> pa.RecordBatch:
    schema = arrow_read_schema(include_headers)
    arrays = []
    for field in schema:
        array = columns[field.name]
        if array.type != field.type:
            array = array.cast(field.type)
        arrays.append(array)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def messages_to_batch(
    messages: Sequence[object], topic: str, broker: str, *, include_headers: bool = False
) -> pa.RecordBatch:
    """The read schema's rows for decoded messages (the careful path, one message at a time)."""
    from aiorocketmq.protocol.message import MessageExt

    msgs = [m for m in messages if isinstance(m, MessageExt)]
    rows = len(msgs)
    if not rows:
        return _empty(include_headers)
    columns = {
        "topic": _constant(topic, rows),
        "broker": _constant(broker, rows),
        "queue_id": pa.array([m.queue_id for m in msgs], pa.int32()),
        "queue_offset": pa.array([m.queue_offset for m in msgs], pa.int64()),
        "msg_id": pa.array([m.msg_id for m in msgs], pa.string()),
        "tags": pa.array([m.properties.get(_TAGS) for m in msgs], pa.string()),
        "keys": pa.array([m.properties.get(_KEYS) for m in msgs], pa.string()),
        "body": pa.array([m.body for m in msgs], pa.binary()),
        "properties": pa.array(
            [[(k, v) for k, v in m.properties.items() if k not in PROMOTED] for m in msgs],
            pa.map_(pa.string(), pa.string()),
        ),
        "born_timestamp": _timestamps(np.array([m.born_timestamp for m in msgs], dtype=np.int64)),
        "store_timestamp": _timestamps(np.array([m.store_timestamp for m in msgs], dtype=np.int64)),
        "born_host": pa.array([m.born_host for m in msgs], pa.string()),
        "store_host": pa.array([m.store_host for m in msgs], pa.string()),
        "reconsume_times": pa.array([m.reconsume_times for m in msgs], pa.int32()),
    }
    if include_headers:
        columns["headers"] = pa.array(
            [[{"key": k, "value": v.encode()} for k, v in m.properties.items()] for m in msgs],
            arrow_read_schema(True).field("headers").type,
        )
    return _batch(columns, include_headers)


@lru_cache(maxsize=256)
def _tag_set(tags: frozenset[str]) -> pa.Array:
    return pa.array(sorted(tags), pa.string())


def keep_rows(batch: pa.RecordBatch, end: int, tags: frozenset[str] | None) -> pa.RecordBatch:
    """The rows below queue offset ``end`` whose tag is one of ``tags`` (None: any): the
    broker filters by tag hash only, which can collide."""
    mask = pc.less(batch.column("queue_offset"), end)
    if tags is not None:
        mask = pc.and_(mask, pc.fill_null(pc.is_in(batch.column("tags"), value_set=_tag_set(tags)), False))
    if pc.all(mask).as_py():
        return batch
    return batch.filter(mask)
