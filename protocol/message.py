"""Messages on the wire and on disk.

* :class:`Message` (what a producer sends) and :class:`MessageExt` (what a consumer receives,
  with the broker's bookkeeping);
* the properties string (``name\\x01value\\x02``..., docs/protocol.md §4.1);
* the stored record (§4.3), which is at once the commit-log record and the pull-response
  body, with IPv4 and IPv6 hosts;
* the batch body (§4.7), offset msgIds (§4.5), client unique ids (§4.6), body compression
  (§4.8) and Java's ``String.hashCode`` used for tag codes and index keys.
"""

from __future__ import annotations

import functools
import ipaddress
import itertools
import json
import os
import socket
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any, Protocol, TypeVar, overload

import pydantic
import pydantic_core

from .codes import COMPRESSION_TYPE_MASK, MessageSysFlag
from .errors import ProtocolError
from .speedups import compiled as _compiled

MESSAGE_MAGIC_CODE = -626843481  # 0xDAA320A7
BLANK_MAGIC_CODE = -875286124  # 0xCBD43194
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
KEY_SEPARATOR = " "
MAX_TOPIC_LENGTH = 127
MAX_PROPERTIES_LENGTH = 32767

_M = TypeVar("_M")

_BORN_V6 = MessageSysFlag.BORNHOST_V6.value
_STORE_V6 = MessageSysFlag.STOREHOST_V6.value
_COMPRESSED = MessageSysFlag.COMPRESSED.value


class PropertyKey:
    """Well-known property names (Java ``MessageConst``)."""

    KEYS = "KEYS"
    TAGS = "TAGS"
    WAIT_STORE_MSG_OK = "WAIT"
    DELAY_TIME_LEVEL = "DELAY"
    RETRY_TOPIC = "RETRY_TOPIC"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QUEUE_ID = "REAL_QID"
    TRANSACTION_PREPARED = "TRAN_MSG"
    PRODUCER_GROUP = "PGROUP"
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    BUYER_ID = "BUYER_ID"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    TRANSFER_FLAG = "TRANSFER_FLAG"
    CORRECTION_FLAG = "CORRECTION_FLAG"
    MQ2_FLAG = "MQ2_FLAG"
    RECONSUME_TIME = "RECONSUME_TIME"
    MSG_REGION = "MSG_REGION"
    TRACE_SWITCH = "TRACE_ON"
    UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    CONSUME_START_TIMESTAMP = "CONSUME_START_TIME"
    TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
    TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
    CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    INSTANCE_ID = "INSTANCE_ID"
    CORRELATION_ID = "CORRELATION_ID"
    REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
    TTL = "TTL"
    ARRIVE_TIME = "ARRIVE_TIME"
    PUSH_REPLY_TIME = "PUSH_REPLY_TIME"
    CLUSTER = "CLUSTER"
    MESSAGE_TYPE = "MSG_TYPE"
    SHARDING_KEY = "__SHARDING_KEY"
    START_DELIVER_TIME = "__STARTDELIVERTIME"
    #: The body's media type (``application/json`` from :meth:`Message.json`); the name
    #: Spring's RocketMQ binding writes, so its consumers read ours and ours read theirs.
    CONTENT_TYPE = "contentType"


JSON_CONTENT_TYPE = "application/json"


# -- properties -----------------------------------------------------------------------------


def encode_properties(properties: Mapping[str, str]) -> str:
    """``name\\x01value\\x02`` for each property, without the trailing separator (Java >= 4.9.4)."""
    if not properties:
        return ""
    return PROPERTY_SEPARATOR.join(
        [f"{name}{NAME_VALUE_SEPARATOR}{value}" for name, value in properties.items()]
    )


def stored_properties(properties: Mapping[str, str]) -> str:
    """The properties as a RocketMQ 5 broker stores them: every pair followed by the separator
    (4.x brokers drop the last one; every client reads both)."""
    if not properties:
        return ""
    return "".join(
        [f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}" for name, value in properties.items()]
    )


def decode_properties(text: str) -> dict[str, str]:
    """Parse a properties string: trailing separator optional, empty segments ignored, each
    segment split at its first ``\\x01``; segments without a name or value are dropped."""
    if not text:
        return {}
    # The fast path is only sound when no segment can have an empty name or value; an empty
    # name starts with \x01, an empty value has its first \x01 last in the segment.
    if not (
        text[0] == NAME_VALUE_SEPARATOR
        or text[-1] == NAME_VALUE_SEPARATOR
        or _EMPTY_VALUE in text
        or _EMPTY_NAME in text
    ):
        try:
            return dict(
                [segment.split(NAME_VALUE_SEPARATOR, 1) for segment in text.split(PROPERTY_SEPARATOR)]
            )
        except ValueError:
            pass  # an empty or separator-less segment: take the careful path
    result: dict[str, str] = {}
    for segment in text.split(PROPERTY_SEPARATOR):
        name, _, value = segment.partition(NAME_VALUE_SEPARATOR)
        if name and value:  # Java's string2messageProperties drops either one empty
            result[name] = value
    return result


_EMPTY_VALUE = NAME_VALUE_SEPARATOR + PROPERTY_SEPARATOR
_EMPTY_NAME = PROPERTY_SEPARATOR + NAME_VALUE_SEPARATOR


# -- hashing --------------------------------------------------------------------------------


@lru_cache(maxsize=16384)
def java_hash(text: str) -> int:
    """Java ``String.hashCode()``: ``h = 31*h + unit`` over UTF-16 code units, signed 32-bit."""
    h = 0
    if text.isascii():
        for unit in text.encode("ascii"):
            h = (31 * h + unit) & 0xFFFFFFFF
    else:
        # surrogatepass: a lone surrogate is a valid Java string, so it must hash, not raise
        data = text.encode("utf-16-be", "surrogatepass")
        for i in range(0, len(data), 2):
            h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def tags_code(tags: str | None) -> int:
    """The consume-queue tags code of a message: the tag's hash, 0 without a tag."""
    return java_hash(tags) if tags else 0


# -- hosts ------------------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def pack_host(host: str, port: int) -> bytes:
    """Address bytes + i32 port: 8 bytes for IPv4, 20 for IPv6 (an IPv4-mapped IPv6 address
    is unwrapped to IPv4, since the C++ and JS clients read 4-byte hosts only)."""
    ip = ipaddress.ip_address(host.strip("[]"))
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.packed + struct.pack(">i", port)


def unpack_host(data: bytes) -> str:
    """``ip:port`` from 8 (IPv4) or 20 (IPv6) packed bytes; ProtocolError for other lengths."""
    port = int.from_bytes(data[-4:], "big", signed=True)
    if len(data) == 8:
        return f"{socket.inet_ntoa(data[:4])}:{port}"
    if len(data) != 20:
        raise ProtocolError(f"a packed host has 8 or 20 bytes, not {len(data)}")
    return f"[{socket.inet_ntop(socket.AF_INET6, data[:16])}]:{port}"


def split_address(address: str) -> tuple[str, int]:
    """``"host:port"`` (``"[v6]:port"`` too) into its parts."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address {address!r} is not host:port")
    return host.strip("[]"), int(port)


# -- msgId ------------------------------------------------------------------------------------


def encode_offset_msg_id(store_host: bytes, commit_log_offset: int) -> str:
    """Offset msgId: hex of store address, port and commit-log offset (docs/protocol.md §4.5)."""
    return (store_host + commit_log_offset.to_bytes(8, "big", signed=True)).hex().upper()


def offset_msg_ids(host_hex: str, offsets: list[int]) -> list[str]:
    """:func:`encode_offset_msg_id` for records at ``offsets`` of one store, whose address and
    port are ``host_hex`` (the upper-case hex of the packed host)."""
    form = host_hex.replace("%", "%%") + "%016X"
    return [form % offset for offset in offsets]


def decode_offset_msg_id(msg_id: str) -> tuple[str, int]:
    """``(store address "ip:port", commit-log offset)`` from an offset msgId."""
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise ProtocolError(f"msgId {msg_id!r} is not hexadecimal") from None
    if len(raw) == 16:
        host = raw[:8]
    elif len(raw) == 28:
        host = raw[:20]
    else:
        raise ProtocolError(f"msgId {msg_id!r} has {len(msg_id)} hex digits, expected 32 or 56")
    return unpack_host(host), int.from_bytes(raw[len(host) :], "big", signed=True)


class UniqueIdGenerator:
    """Client-side unique message ids (UNIQ_KEY) in Java's layout: IP(4) + pid(2) +
    instance hash(4) + milliseconds since the start of the month(4) + counter(2)."""

    def __init__(self, ip: bytes | None = None) -> None:
        if ip is None:
            ip = socket.inet_aton(local_ipv4())
        pid = os.getpid() & 0xFFFF
        instance = (id(self) ^ int(time.time_ns())) & 0x7FFFFFFF
        self._prefix = (ip[-4:] + pid.to_bytes(2, "big") + instance.to_bytes(4, "big")).hex().upper()
        self._counter = itertools.count(int.from_bytes(os.urandom(2), "big"))
        self._lock = threading.Lock()
        self._month_start_ms = 0
        self._next_month_ms = 0

    def _roll_month(self, now_ms: int) -> None:
        now = datetime.fromtimestamp(now_ms / 1000)
        start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        nxt = (
            start.replace(year=start.year + 1, month=1)
            if start.month == 12
            else start.replace(month=start.month + 1)
        )
        self._month_start_ms = int(start.timestamp() * 1000)
        self._next_month_ms = int(nxt.timestamp() * 1000)

    def next_id(self) -> str:
        now_ms = time.time_ns() // 1_000_000
        if now_ms >= self._next_month_ms:
            with self._lock:
                if now_ms >= self._next_month_ms:
                    self._roll_month(now_ms)
        delta = (now_ms - self._month_start_ms) & 0xFFFFFFFF
        return f"{self._prefix}{delta:08X}{next(self._counter) & 0xFFFF:04X}"

    def next_ids(self, count: int) -> list[str]:
        """``count`` ids at once (a batch): one clock reading, consecutive counters."""
        first = self.next_id()
        head = first[:-4]
        counter = self._counter
        return [first, *[f"{head}{next(counter) & 0xFFFF:04X}" for _ in range(count - 1)]]


def local_ipv4() -> str:
    """The IPv4 address other hosts would see this one by (loopback when offline): the
    source address of a route to a non-local network; nothing is sent."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            return str(s.getsockname()[0])
    except OSError:
        return "127.0.0.1"


_default_ids: UniqueIdGenerator | None = None


def new_unique_id() -> str:
    global _default_ids
    if _default_ids is None:
        _default_ids = UniqueIdGenerator()
    return _default_ids.next_id()


# -- compression ------------------------------------------------------------------------------

COMPRESS_THRESHOLD = 4096


def compress_body(body: bytes, level: int = 5) -> bytes:
    return zlib.compress(body, level)


def decompress_body(body: bytes, sys_flag: int) -> bytes:
    """The body as the producer wrote it; zlib for compression type 0 (old) and 0x300."""
    if not sys_flag & _COMPRESSED:
        return body
    kind = sys_flag & COMPRESSION_TYPE_MASK
    if kind not in (0, MessageSysFlag.COMPRESSION_ZLIB.value):
        name = "LZ4" if kind == MessageSysFlag.COMPRESSION_LZ4.value else "ZSTD"
        raise ProtocolError(f"message body is {name}-compressed; only zlib is supported")
    try:
        return zlib.decompress(body)
    except zlib.error as exc:
        raise ProtocolError(f"compressed message body does not inflate: {exc}") from None


# -- value types ------------------------------------------------------------------------------


class _JsonBuilder(Protocol):
    def __call__(
        self,
        topic: str,
        obj: Any,
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        properties: Mapping[str, str] | None = None,
        *,
        delay_level: int = 0,
    ) -> Message: ...


class _Json:
    """``Message.json(topic, obj, ...)`` builds a message whose body is ``obj`` as JSON;
    ``msg.json()`` decodes a message's body as JSON. One name for both, as the two read
    naturally at their call sites."""

    @overload
    def __get__(self, instance: None, owner: type[Message]) -> _JsonBuilder: ...
    @overload
    def __get__(self, instance: Message, owner: type[Message]) -> Callable[[], Any]: ...
    def __get__(self, instance: Message | None, owner: type[Message]) -> _JsonBuilder | Callable[[], Any]:
        if instance is None:
            return _json_message
        return functools.partial(_decode_json, instance)


def _json_message(
    topic: str,
    obj: Any,
    tags: str | None = None,
    keys: str | Iterable[str] | None = None,
    properties: Mapping[str, str] | None = None,
    *,
    delay_level: int = 0,
) -> Message:
    # pydantic_core serializes models, dataclasses, datetimes, UUIDs, enums... as well as
    # plain JSON values, in one pass of compiled code.
    body = pydantic_core.to_json(obj)
    msg = Message(topic, body, tags, keys, properties, delay_level=delay_level)
    msg.properties[PropertyKey.CONTENT_TYPE] = JSON_CONTENT_TYPE
    return msg


def _decode_json(msg: Message) -> Any:
    return json.loads(msg.body)


@lru_cache(maxsize=256)
def _adapter(tp: Any) -> pydantic.TypeAdapter[Any]:
    return pydantic.TypeAdapter(tp)


class Message:
    """A message to send: topic, body, and properties (tags and keys are properties too).

    Bodies are bytes. For JSON payloads, ``Message.json(topic, obj)`` builds a message from
    any JSON-able value or pydantic model (recording ``contentType: application/json``),
    and a received message decodes with ``msg.json()`` or, validated, ``msg.model(Order)``.
    """

    __slots__ = ("topic", "body", "flag", "properties")

    json = _Json()

    def __init__(
        self,
        topic: str,
        body: bytes | bytearray | str = b"",
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        properties: Mapping[str, str] | None = None,
        *,
        flag: int = 0,
        delay_level: int = 0,
    ) -> None:
        self.topic = topic
        self.body = body.encode() if isinstance(body, str) else bytes(body)
        self.flag = flag
        self.properties: dict[str, str] = dict(properties) if properties else {}
        if tags:
            self.properties[PropertyKey.TAGS] = tags
        if keys:
            self.keys = [keys] if isinstance(keys, str) else list(keys)
        if delay_level:
            self.delay_level = delay_level

    @property
    def tags(self) -> str | None:
        return self.properties.get(PropertyKey.TAGS)

    @tags.setter
    def tags(self, value: str | None) -> None:
        if value:
            self.properties[PropertyKey.TAGS] = value
        else:
            self.properties.pop(PropertyKey.TAGS, None)

    @property
    def keys(self) -> list[str]:
        raw = self.properties.get(PropertyKey.KEYS)
        return [k for k in raw.split(KEY_SEPARATOR) if k] if raw else []

    @keys.setter
    def keys(self, value: Iterable[str]) -> None:
        keys = [k for k in value if k]
        for key in keys:
            if KEY_SEPARATOR in key:
                raise ValueError(f"message key {key!r} contains a space, the key separator")
        if keys:
            self.properties[PropertyKey.KEYS] = KEY_SEPARATOR.join(keys)
        else:
            self.properties.pop(PropertyKey.KEYS, None)

    @property
    def delay_level(self) -> int:
        value = self.properties.get(PropertyKey.DELAY_TIME_LEVEL)
        return int(value) if value and value.lstrip("-").isdigit() else 0

    @delay_level.setter
    def delay_level(self, level: int) -> None:
        if level:
            self.properties[PropertyKey.DELAY_TIME_LEVEL] = str(level)
        else:
            self.properties.pop(PropertyKey.DELAY_TIME_LEVEL, None)

    @property
    def unique_id(self) -> str | None:
        return self.properties.get(PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    @property
    def content_type(self) -> str | None:
        """The body's media type, when the sender recorded one."""
        return self.properties.get(PropertyKey.CONTENT_TYPE)

    def model(self, tp: type[_M]) -> _M:
        """The body as JSON validated into ``tp``: a pydantic model, a dataclass, or any type
        pydantic can validate (``list[Order]``...). Raises pydantic's ``ValidationError`` (a
        ``ValueError``) when the body does not fit."""
        if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
            return tp.model_validate_json(self.body)
        try:
            adapter: pydantic.TypeAdapter[_M] = _adapter(tp)  # type: ignore[arg-type]
        except TypeError:  # an unhashable type expression: validate without the cache
            adapter = pydantic.TypeAdapter(tp)
        return adapter.validate_json(self.body)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} topic={self.topic!r} tags={self.tags!r} body={len(self.body)}B>"

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in _all_slots(type(self)))

    __hash__ = None  # type: ignore[assignment]


def _all_slots(cls: type) -> tuple[str, ...]:
    names: list[str] = []
    for klass in reversed(cls.__mro__):
        names.extend(getattr(klass, "__slots__", ()))
    return tuple(names)


class MessageExt(Message):
    """A stored message as read back from a broker."""

    __slots__ = (
        "queue_id",
        "queue_offset",
        "commit_log_offset",
        "sys_flag",
        "born_timestamp",
        "store_timestamp",
        "reconsume_times",
        "prepared_transaction_offset",
        "body_crc",
        "store_size",
        "broker_name",
        "_born_host",
        "_store_host",
    )

    def __init__(
        self,
        topic: str,
        body: bytes = b"",
        *,
        flag: int = 0,
        properties: dict[str, str] | None = None,
        queue_id: int = 0,
        queue_offset: int = 0,
        commit_log_offset: int = 0,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: bytes = b"\0" * 8,
        store_timestamp: int = 0,
        store_host: bytes = b"\0" * 8,
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
        body_crc: int = 0,
        store_size: int = 0,
        broker_name: str | None = None,
    ) -> None:
        self.topic = topic
        self.body = body
        self.flag = flag
        self.properties = properties if properties is not None else {}
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.commit_log_offset = commit_log_offset
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self._born_host = born_host
        self.store_timestamp = store_timestamp
        self._store_host = store_host
        self.reconsume_times = reconsume_times
        self.prepared_transaction_offset = prepared_transaction_offset
        self.body_crc = body_crc
        self.store_size = store_size
        self.broker_name = broker_name

    @property
    def born_host(self) -> str:
        return unpack_host(self._born_host)

    @property
    def store_host(self) -> str:
        return unpack_host(self._store_host)

    @property
    def born_host_bytes(self) -> bytes:
        return self._born_host

    @property
    def store_host_bytes(self) -> bytes:
        return self._store_host

    @property
    def offset_msg_id(self) -> str:
        return encode_offset_msg_id(self._store_host, self.commit_log_offset)

    @property
    def msg_id(self) -> str:
        """The client-generated unique id when present (as Java and C++ show it), else the
        broker's offset msgId."""
        return self.properties.get(PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or self.offset_msg_id

    @property
    def transaction_id(self) -> str | None:
        return self.properties.get(PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    def __repr__(self) -> str:
        return (
            f"<MessageExt topic={self.topic!r} queue_id={self.queue_id} "
            f"queue_offset={self.queue_offset} tags={self.tags!r} body={len(self.body)}B>"
        )


# -- stored record ----------------------------------------------------------------------------

# TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG BORNTIMESTAMP BORNHOST
# STORETIMESTAMP STOREHOST RECONSUMETIMES PREPAREDTRANSACTIONOFFSET BODYLENGTH
_RECORD_HEADS = {
    (born_len, store_len): struct.Struct(f">iiiiiqqiq{born_len}sq{store_len}siqi")
    for born_len in (8, 20)
    for store_len in (8, 20)
}
_RECORD_V4 = _RECORD_HEADS[(8, 8)]
RECORD_FIXED_SIZE = _RECORD_V4.size + 3  # + topic length byte + properties length short = 91
_TOTAL_MAGIC = struct.Struct(">ii")
_SYS_FLAG = struct.Struct(">i")
_QUEUE_AND_PHYSICAL_OFFSET = struct.Struct(">qq")

#: Byte positions inside a record that a store patches at append time.
RECORD_QUEUE_OFFSET_POS = 20
RECORD_PHYSICAL_OFFSET_POS = 28
RECORD_SYS_FLAG_POS = 36
RECORD_BORN_HOST_POS = 48


def record_store_timestamp_pos(sys_flag: int) -> int:
    return 56 if not sys_flag & _BORN_V6 else 68


def encode_record(
    *,
    topic: bytes,
    body: bytes,
    properties: bytes,
    queue_id: int = 0,
    flag: int = 0,
    queue_offset: int = 0,
    commit_log_offset: int = 0,
    sys_flag: int = 0,
    born_timestamp: int = 0,
    born_host: bytes = b"\0" * 8,
    store_timestamp: int = 0,
    store_host: bytes = b"\0" * 8,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    body_crc: int | None = None,
) -> bytes:
    """One stored record. ``topic`` and ``properties`` are UTF-8 bytes; hosts are packed by
    :func:`pack_host` and their length decides the IPv6 bits of ``sys_flag``."""
    topic_len = len(topic)
    props_len = len(properties)
    if topic_len > MAX_TOPIC_LENGTH:
        raise ProtocolError(f"topic of {topic_len} bytes exceeds {MAX_TOPIC_LENGTH}")
    if props_len > MAX_PROPERTIES_LENGTH:
        raise ProtocolError(f"properties of {props_len} bytes exceed {MAX_PROPERTIES_LENGTH}")
    born_len = len(born_host)
    store_len = len(store_host)
    if born_len == 8 and store_len == 8:
        head = _RECORD_V4
        sys_flag &= ~(_BORN_V6 | _STORE_V6)
    else:
        found = _RECORD_HEADS.get((born_len, store_len))
        if found is None:
            raise ProtocolError("hosts must be packed as 8 (IPv4) or 20 (IPv6) bytes")
        head = found
        sys_flag = (
            (sys_flag & ~(_BORN_V6 | _STORE_V6))
            | (_BORN_V6 if born_len == 20 else 0)
            | (_STORE_V6 if store_len == 20 else 0)
        )
    body_len = len(body)
    try:
        fixed = head.pack(
            head.size + 3 + body_len + topic_len + props_len,
            MESSAGE_MAGIC_CODE,
            (zlib.crc32(body) & 0x7FFFFFFF) if body_crc is None else body_crc,
            queue_id,
            flag,
            queue_offset,
            commit_log_offset,
            sys_flag,
            born_timestamp,
            born_host,
            store_timestamp,
            store_host,
            reconsume_times,
            prepared_transaction_offset,
            body_len,
        )
    except struct.error as exc:
        raise ProtocolError(f"record field out of range for its i32/i64 slot: {exc}") from None
    return b"".join((fixed, body, _TOPIC_LENGTHS[topic_len], topic, props_len.to_bytes(2, "big"), properties))


_TOPIC_LENGTHS = [n.to_bytes(1, "big") for n in range(MAX_TOPIC_LENGTH + 1)]


def encode_message_ext(msg: MessageExt) -> bytes:
    """Re-encode a decoded message (used for check-back bodies)."""
    return encode_record(
        topic=msg.topic.encode(),
        body=msg.body,
        properties=encode_properties(msg.properties).encode(),
        queue_id=msg.queue_id,
        flag=msg.flag,
        queue_offset=msg.queue_offset,
        commit_log_offset=msg.commit_log_offset,
        sys_flag=msg.sys_flag,
        born_timestamp=msg.born_timestamp,
        born_host=msg.born_host_bytes,
        store_timestamp=msg.store_timestamp,
        store_host=msg.store_host_bytes,
        reconsume_times=msg.reconsume_times,
        prepared_transaction_offset=msg.prepared_transaction_offset,
    )


@dataclass(frozen=True, slots=True)
class RecordHeader:
    """The fields of a stored record that routing and indexing need, without decoding the body."""

    total_size: int
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    sys_flag: int
    born_timestamp: int
    store_timestamp: int
    topic: str
    properties: str
    body_crc: int
    body_offset: int
    body_length: int


def peek_record_size(buf: Any, pos: int = 0) -> tuple[int, int]:
    """``(total size, magic code)`` of the record starting at ``pos``."""
    return _TOTAL_MAGIC.unpack_from(buf, pos)


def _record_head(buf: Any, pos: int, available: int) -> tuple[struct.Struct, tuple[Any, ...]]:
    if available < RECORD_FIXED_SIZE:
        raise ProtocolError(f"record at {pos} truncated: {available} bytes left")
    (sys_flag,) = _SYS_FLAG.unpack_from(buf, pos + RECORD_SYS_FLAG_POS)
    head = _RECORD_HEADS[(20 if sys_flag & _BORN_V6 else 8, 20 if sys_flag & _STORE_V6 else 8)]
    if available < head.size + 3:
        raise ProtocolError(f"record at {pos} truncated: {available} bytes left")
    return head, head.unpack_from(buf, pos)


def read_record_header(buf: Any, pos: int = 0, end: int | None = None) -> RecordHeader:
    """Parse the routing fields of one record, checking its lengths (not its CRC)."""
    if end is None:
        end = len(buf)
    head, f = _record_head(buf, pos, end - pos)
    total = f[0]
    if f[1] != MESSAGE_MAGIC_CODE:
        raise ProtocolError(f"record at {pos} has magic code {f[1]:#x}, not a message")
    if total > end - pos or total < head.size + 3:
        raise ProtocolError(f"record at {pos} claims {total} bytes, {end - pos} available")
    body_len = f[14]
    body_pos = pos + head.size
    topic_pos = body_pos + body_len
    if body_len < 0 or topic_pos + 3 > pos + total:
        raise ProtocolError(f"record at {pos} has a body length {body_len} beyond its size")
    topic_len = buf[topic_pos]
    props_pos = topic_pos + 1 + topic_len
    if props_pos + 2 > pos + total:
        raise ProtocolError(f"record at {pos} has a topic length {topic_len} beyond its size")
    props_len = int.from_bytes(buf[props_pos : props_pos + 2], "big", signed=True)
    if props_len < 0 or props_pos + 2 + props_len != pos + total:
        raise ProtocolError(f"record at {pos} has field lengths that disagree with its size {total}")
    try:
        topic = bytes(buf[topic_pos + 1 : props_pos]).decode()
        properties = bytes(buf[props_pos + 2 : props_pos + 2 + props_len]).decode()
    except UnicodeDecodeError:
        raise ProtocolError(f"record at {pos} has a topic or properties that is not UTF-8") from None
    return RecordHeader(
        total_size=total,
        queue_id=f[3],
        queue_offset=f[5],
        commit_log_offset=f[6],
        sys_flag=f[7],
        born_timestamp=f[8],
        store_timestamp=f[10],
        topic=topic,
        properties=properties,
        body_crc=f[2],
        body_offset=body_pos,
        body_length=body_len,
    )


def decode_record(
    buf: Any, pos: int = 0, *, check_crc: bool = False, decompress: bool = False
) -> tuple[MessageExt, int]:
    """Decode the record at ``pos``; returns the message and the position after it."""
    size = len(buf)
    if (
        size - pos >= RECORD_FIXED_SIZE
        and not _SYS_FLAG.unpack_from(buf, pos + RECORD_SYS_FLAG_POS)[0] & _V6_BITS
    ):
        head = _RECORD_V4  # the usual case, without _record_head's call
        f = head.unpack_from(buf, pos)
    else:
        head, f = _record_head(buf, pos, size - pos)
    total = f[0]
    if f[1] != MESSAGE_MAGIC_CODE:
        raise ProtocolError(f"record at {pos} has magic code {f[1] & 0xFFFFFFFF:#x}, not a message")
    end = pos + total
    body_len = f[14]
    body_pos = pos + head.size
    topic_pos = body_pos + body_len
    if end > size or body_len < 0 or topic_pos + 3 > end:
        raise ProtocolError(f"record at {pos} is truncated or has inconsistent lengths")
    topic_len = buf[topic_pos]
    props_pos = topic_pos + 1 + topic_len
    if props_pos + 2 > end or props_pos + 2 + (buf[props_pos] << 8 | buf[props_pos + 1]) != end:
        raise ProtocolError(f"record at {pos} has field lengths that disagree with its size {total}")
    body = buf[body_pos:topic_pos]
    if type(body) is not bytes:
        body = bytes(body)
    if check_crc and (zlib.crc32(body) & 0x7FFFFFFF) != f[2]:
        raise ProtocolError(f"record at {pos} fails its body CRC check")
    try:
        # str(..., "utf-8") reads bytes and memoryviews alike, without an intermediate copy.
        topic = str(buf[topic_pos + 1 : props_pos], "utf-8")
        properties = decode_properties(str(buf[props_pos + 2 : end], "utf-8"))
    except UnicodeDecodeError:
        raise ProtocolError(f"record at {pos} has a topic or properties that is not UTF-8") from None
    sys_flag = f[7]
    if decompress and sys_flag & _COMPRESSED:
        body = decompress_body(body, sys_flag)
    # Slots filled directly: a 17-keyword __init__ call is a third of decoding a record.
    msg: MessageExt = _new(MessageExt)
    msg.topic = topic
    msg.body = body
    msg.flag = f[4]
    msg.properties = properties
    msg.queue_id = f[3]
    msg.queue_offset = f[5]
    msg.commit_log_offset = f[6]
    msg.sys_flag = sys_flag
    msg.born_timestamp = f[8]
    msg._born_host = f[9]
    msg.store_timestamp = f[10]
    msg._store_host = f[11]
    msg.reconsume_times = f[12]
    msg.prepared_transaction_offset = f[13]
    msg.body_crc = f[2]
    msg.store_size = total
    msg.broker_name = None
    return msg, end


_new = object.__new__
_V6_BITS = _BORN_V6 | _STORE_V6


def decode_records(buf: Any, *, check_crc: bool = False, decompress: bool = True) -> list[MessageExt]:
    """Every record of a pull/query body, in order."""
    messages = []
    pos = 0
    size = len(buf)
    while pos < size:
        msg, pos = decode_record(buf, pos, check_crc=check_crc, decompress=decompress)
        messages.append(msg)
    return messages


# -- batch body -------------------------------------------------------------------------------

_BATCH_HEAD = struct.Struct(">iiiii")  # TOTALSIZE MAGIC BODYCRC FLAG BODYLEN


@dataclass(slots=True)
class BatchEntry:
    flag: int
    body: bytes
    properties: str


def encode_batch(messages: Iterable[Message]) -> bytes:
    """A batch body (§4.7): each message's flag, body and properties."""
    parts = []
    for msg in messages:
        props = encode_properties(msg.properties).encode()
        if len(props) > MAX_PROPERTIES_LENGTH:
            raise ProtocolError(f"properties of {len(props)} bytes exceed {MAX_PROPERTIES_LENGTH}")
        body = msg.body
        parts.append(_BATCH_HEAD.pack(22 + len(body) + len(props), 0, 0, msg.flag, len(body)))
        parts.append(body)
        parts.append(len(props).to_bytes(2, "big"))
        parts.append(props)
    return b"".join(parts)


_UNIQ_KEY = PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
_DELAY_KEY = PropertyKey.DELAY_TIME_LEVEL


def body_fault(body: bytes, max_body: int) -> str | None:
    """Why a producer may not send a message with ``body``, or None."""
    if not body:
        return "the message body is empty"
    if len(body) > max_body:
        return f"the message body is {len(body)} bytes, more than the {max_body} allowed"
    return None


def batch_fault(messages: Sequence[Message], topic: str, max_body: int) -> str | None:
    """Why a producer may not send ``messages`` as one batch of ``topic`` (the first message
    at fault: another topic, a delay level, or its body), or None. The whole batch's size is
    judged after encoding."""
    for msg in messages:
        if msg.topic != topic:
            return f"a batch must have one topic; got {topic!r} and {msg.topic!r}"
        if _DELAY_KEY in msg.properties and msg.delay_level:
            return "delayed messages cannot be sent in a batch"
        fault = body_fault(msg.body, max_body)
        if fault is not None:
            return fault
    return None


def prepare_batch(
    messages: Sequence[Message], topic: str, max_body: int, ids: UniqueIdGenerator
) -> tuple[bytes, str] | None:
    """A producer's batch: its body (:func:`encode_batch`) and its messages' unique ids joined
    with commas, after giving each message without one an id from ``ids`` (as
    :meth:`UniqueIdGenerator.next_ids` does). None, with no id given, when :func:`batch_fault`
    finds a fault; None, the ids given, when the whole body is over ``max_body``. The producer
    words the error."""
    if batch_fault(messages, topic, max_body) is not None:
        return None
    missing = sum(_UNIQ_KEY not in msg.properties for msg in messages)
    if missing:
        fresh = iter(ids.next_ids(missing))
        for msg in messages:
            if _UNIQ_KEY not in msg.properties:
                msg.properties[_UNIQ_KEY] = next(fresh)
    body = encode_batch(messages)
    if len(body) > max_body:
        return None
    return body, ",".join([msg.properties[_UNIQ_KEY] for msg in messages])


def decode_batch(data: bytes) -> list[BatchEntry]:
    """Split a batch body, trusting only the body and properties lengths."""
    entries = []
    pos = 0
    size = len(data)
    while pos < size:
        if size - pos < 20:
            raise ProtocolError(f"batch entry at {pos} truncated in its header")
        _total, _magic, _crc, flag, body_len = _BATCH_HEAD.unpack_from(data, pos)
        body_pos = pos + 20
        if body_len < 0 or body_pos + body_len + 2 > size:
            raise ProtocolError(f"batch entry at {pos} has body length {body_len} beyond the batch")
        props_pos = body_pos + body_len + 2
        props_len = int.from_bytes(data[props_pos - 2 : props_pos], "big", signed=True)
        if props_len < 0 or props_pos + props_len > size:
            raise ProtocolError(f"batch entry at {pos} has properties length {props_len} beyond the batch")
        try:
            props = data[props_pos : props_pos + props_len].decode()
        except UnicodeDecodeError:
            raise ProtocolError(f"batch entry at {pos} has properties that are not UTF-8") from None
        entries.append(BatchEntry(flag, data[body_pos : body_pos + body_len], props))
        pos = props_pos + props_len
    return entries


# -- store support ----------------------------------------------------------------------------


def record_head_struct(born_host_len: int, store_host_len: int) -> struct.Struct:
    """The precompiled struct of a stored record's fixed head (TOTALSIZE through BODYLENGTH)
    for hosts packed as 8 (IPv4) or 20 (IPv6) bytes, for stores that pack records straight
    into a mapping with ``pack_into``."""
    head = _RECORD_HEADS.get((born_host_len, store_host_len))
    if head is None:
        raise ProtocolError("hosts must be packed as 8 (IPv4) or 20 (IPv6) bytes")
    return head


_HASH_DIGITS = b"0123456789abcdefghijklmnopqrstu"
_HASH_LOW = bytes(_HASH_DIGITS[b % 31] for b in range(128)) + b"0" * 128
_HASH_HIGH = bytes(_HASH_DIGITS[b // 31] for b in range(128)) + b"0" * 128


def java_hash_fast(text: str) -> int:
    """:func:`java_hash` without a per-character Python loop, for many distinct strings (index
    keys, whose uniqueness defeats ``java_hash``'s cache). For ASCII, ``sum(c * 31**k)`` is
    the base-31 number whose digits are the characters; writing each ``c`` as ``31*q + r``
    splits it into two digit strings (``r`` digits, ``q`` digits shifted one place) that
    ``int(..., 31)`` evaluates in C."""
    if not text.isascii():  # (lone surrogates included, which a UTF-8 encode would refuse)
        return java_hash(text)
    data = text.encode("ascii")
    if 0 < len(data) <= _HASH_CHUNK:  # the usual case, one step
        h = (int(data.translate(_HASH_LOW), 31) + int(data.translate(_HASH_HIGH) + b"0", 31)) & 0xFFFFFFFF
        return h - 0x100000000 if h & 0x80000000 else h
    h = 0
    # int() refuses strings of more than 4300 digits in bases that are not powers of two,
    # so long keys go in chunks, chained as h * 31**len(chunk) + chunk value (mod 2**32).
    for start in range(0, len(data), _HASH_CHUNK):
        part = data[start : start + _HASH_CHUNK]
        value = int(part.translate(_HASH_LOW), 31) + int(part.translate(_HASH_HIGH) + b"0", 31)
        h = (h * pow(31, len(part), 1 << 32) + value) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


_HASH_CHUNK = 4096


# -- the compiled codecs, when active (see .speedups) -------------------------------------------

#: The pure-Python codecs, whichever implementation is active (tests compare the two).
pure_java_hash = java_hash
pure_java_hash_fast = java_hash_fast
pure_decode_properties = decode_properties
pure_decode_record = decode_record
pure_encode_batch = encode_batch
pure_prepare_batch = prepare_batch
pure_offset_msg_ids = offset_msg_ids

if _compiled is not None:
    _compiled.setup_records(ProtocolError, MessageExt, zlib.crc32, decompress_body)
    java_hash = _compiled.java_hash
    java_hash_fast = _compiled.java_hash
    decode_properties = _compiled.decode_properties
    _c_decode_record = _compiled.decode_record
    _c_encode_batch = _compiled.encode_batch
    _c_prepare_batch = _compiled.prepare_batch
    _c_offset_msg_ids = _compiled.offset_msg_ids

    def offset_msg_ids(host_hex: str, offsets: list[int]) -> list[str]:
        """:func:`encode_offset_msg_id` for records at ``offsets`` of one store, whose address
        and port are ``host_hex`` (the upper-case hex of the packed host)."""
        # None: an offset outside 0..2**63-1 or a host that is not ASCII, for the pure code.
        ids: list[str] | None = _c_offset_msg_ids(host_hex, offsets)
        return ids if ids is not None else pure_offset_msg_ids(host_hex, offsets)

    def encode_batch(messages: Iterable[Message]) -> bytes:
        """A batch body (§4.7): each message's flag, body and properties."""
        # None: a field of a type (or a size) the pure encoder judges and words the error for.
        if type(messages) is not list:
            messages = list(messages)
        encoded: bytes | None = _c_encode_batch(messages, MAX_PROPERTIES_LENGTH)
        return encoded if encoded is not None else pure_encode_batch(messages)

    def prepare_batch(
        messages: Sequence[Message], topic: str, max_body: int, ids: UniqueIdGenerator
    ) -> tuple[bytes, str] | None:
        """A producer's batch body and comma-joined unique ids; see the pure version."""
        # None from the compiled code: a check failed or a field is of another type; the pure
        # code decides (and gives no second id to a message the compiled code gave one).
        if type(messages) is not list:
            messages = list(messages)
        prepared: tuple[bytes, str] | None = _c_prepare_batch(
            messages, topic, max_body, MAX_PROPERTIES_LENGTH, _UNIQ_KEY, _DELAY_KEY, ids.next_id, ids._counter
        )
        return prepared if prepared is not None else pure_prepare_batch(messages, topic, max_body, ids)

    def decode_record(
        buf: Any, pos: int = 0, *, check_crc: bool = False, decompress: bool = False
    ) -> tuple[MessageExt, int]:
        """Decode the record at ``pos``; returns the message and the position after it."""
        # None: a negative position, whose slicing semantics the pure code keeps.
        return _c_decode_record(buf, pos, check_crc, decompress) or pure_decode_record(
            buf, pos, check_crc=check_crc, decompress=decompress
        )

    def decode_records(buf: Any, *, check_crc: bool = False, decompress: bool = True) -> list[MessageExt]:
        """Every record of a pull/query body, in order."""
        messages = []
        pos = 0
        size = len(buf)
        decode = _c_decode_record
        while pos < size:
            msg, pos = decode(buf, pos, check_crc, decompress)
            messages.append(msg)
        return messages
