"""Between the 5.x messages and the broker's own: stored records as 5.x ``Message``s, 5.x
``Message``s as properties a 4.x store keeps, remoting response codes as 5.x status codes, and
the queue a message group hashes to.

Pure functions: no broker state, no I/O.
"""

from __future__ import annotations

import hashlib
import time
import zlib

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from aiorocketmq.protocol.codes import MessageSysFlag, ResponseCode
from aiorocketmq.protocol.message import MessageExt, PropertyKey, unpack_host

from . import messaging_pb2 as pb

Code = pb.Code

#: The 5.x message group, stored under 4.x's sharding-key property (as the proxy does).
SHARDING_KEY = "__SHARDINGKEY"
#: Delivery time of a 5.x timer message, in epoch milliseconds (the timer store honours it).
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TRACE_CONTEXT = "TRACE_CONTEXT"
BORN_TIMESTAMP = "BORN_TIMESTAMP"
BORN_HOST = "__BORNHOST"
DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"

#: Property names the broker and the clients reserve: never a 5.x user property, in either
#: direction (a send naming one is refused; a receive does not show them as user properties).
SYSTEM_PROPERTIES = frozenset(
    {
        value
        for name, value in vars(PropertyKey).items()
        if not name.startswith("_") and isinstance(value, str) and name.isupper()
    }
    | {
        SHARDING_KEY,
        TIMER_DELIVER_MS,
        TRACE_CONTEXT,
        BORN_TIMESTAMP,
        BORN_HOST,
        DLQ_ORIGIN_TOPIC,
        DLQ_ORIGIN_MESSAGE_ID,
        "TIMER_DELAY_SEC",
        "TIMER_DELAY_MS",
        "TIMER_OUT_MS",
        "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES",
        "TIMER_DEL_UNIQKEY",
        "1ST_POP_TIME",
        "POP_CK",
        "POP_CK_OFFSET",
        "INNER_MULTI_DISPATCH",
        "INNER_MULTI_QUEUE_OFFSET",
        "__transactionId__",
    }
)

# What a remoting response code means to a 5.x client.
_CODES = {
    ResponseCode.SUCCESS: Code.OK,
    ResponseCode.SYSTEM_BUSY: Code.TOO_MANY_REQUESTS,
    ResponseCode.FLOW_CONTROL: Code.TOO_MANY_REQUESTS,
    ResponseCode.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
    ResponseCode.MESSAGE_ILLEGAL: Code.BAD_REQUEST,
    ResponseCode.NO_PERMISSION: Code.FORBIDDEN,
    ResponseCode.TOPIC_NOT_EXIST: Code.TOPIC_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: Code.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_PARSE_FAILED: Code.ILLEGAL_FILTER_EXPRESSION,
    ResponseCode.NO_MESSAGE: Code.MESSAGE_NOT_FOUND,
    ResponseCode.PULL_NOT_FOUND: Code.MESSAGE_NOT_FOUND,
    ResponseCode.VERSION_NOT_SUPPORTED: Code.VERSION_UNSUPPORTED,
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: Code.NOT_IMPLEMENTED,
}


def status_of_response_code(code: int) -> int:
    """The 5.x status code for a remoting response code (unknown ones: an internal error)."""
    return _CODES.get(code, Code.INTERNAL_SERVER_ERROR)  # type: ignore[call-overload]


def status(code: int, message: str = "") -> pb.Status:
    return pb.Status(code=code, message=message or pb.Code.Name(code))  # type: ignore[arg-type]


OK = status(Code.OK, "OK")


def duration(seconds: float) -> Duration:
    d = Duration()
    d.FromNanoseconds(int(seconds * 1_000_000_000))
    return d


def timestamp_ms(ms: int) -> Timestamp:
    t = Timestamp()
    t.FromMilliseconds(ms)
    return t


def delivery_time_ms(ts: Timestamp) -> int:
    """A 5.x delivery timestamp in epoch ms. Some clients (the Python SDK's own tests) write a
    millisecond value into ``seconds``; no real date in seconds is above 10^11, so such a
    value is read as milliseconds."""
    if ts.seconds > 100_000_000_000:
        return int(ts.seconds)
    return int(ts.seconds) * 1000 + ts.nanos // 1_000_000


def consistent_hash(key: int, buckets: int) -> int:
    """Guava's ``Hashing.consistentHash``: the proxy picks a message group's queue with it,
    over the Java ``String.hashCode`` of the group, so both place a group on the same queue."""
    state = key & 0xFFFFFFFFFFFFFFFF
    candidate = 0
    while True:
        state = (2862933555777941757 * state + 1) & 0xFFFFFFFFFFFFFFFF
        shifted = state >> 33
        if shifted >= 1 << 31:
            shifted -= 1 << 32  # Java's (int) cast of the high bits
        gap = (shifted + 1) / float(1 << 31)
        nxt = int((candidate + 1) / gap) if gap != 0 else -1
        if 0 <= nxt < buckets:
            candidate = nxt
        else:
            return candidate


def message_type(properties: dict[str, str]) -> int:
    """How a 5.x client sees a stored message (the proxy's rules)."""
    if properties.get(PropertyKey.TRANSACTION_PREPARED) == "true":
        return pb.TRANSACTION
    if (
        properties.get(PropertyKey.DELAY_TIME_LEVEL)
        or TIMER_DELIVER_MS in properties
        or "TIMER_DELAY_SEC" in properties
        or "TIMER_DELAY_MS" in properties
        or properties.get(PropertyKey.START_DELIVER_TIME)
    ):
        return pb.DELAY
    if properties.get(SHARDING_KEY):
        return pb.FIFO
    return pb.NORMAL


def to_message(
    msg: MessageExt,
    *,
    topic: str | None = None,
    receipt_handle: str | None = None,
    invisible_ms: int | None = None,
    delivery_attempt: int | None = None,
) -> pb.Message:
    """A stored record as a 5.x message. ``topic`` overrides the record's (a retry topic's
    copy is shown under its original topic); the body goes out as stored, marked GZIP when
    the producer compressed it, with the MD5 digest the client checks."""
    props = msg.properties
    body = bytes(msg.body)
    real_topic = topic or props.get(PropertyKey.REAL_TOPIC) or msg.topic
    # Filled in place (one message per received message: no copies of sub-messages).
    out = pb.Message(
        topic=pb.Resource(name=real_topic),
        user_properties={k: v for k, v in props.items() if k not in SYSTEM_PROPERTIES},
        body=body,
    )
    sp = out.system_properties
    tags = props.get(PropertyKey.TAGS)
    if tags:
        sp.tag = tags
    keys = props.get(PropertyKey.KEYS)
    if keys:
        sp.keys.extend(k for k in keys.split(" ") if k)
    sp.message_id = props.get(PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or msg.msg_id
    sp.body_digest.type = pb.MD5
    sp.body_digest.checksum = hashlib.md5(body, usedforsecurity=False).hexdigest().upper()
    sp.body_encoding = pb.GZIP if msg.sys_flag & MessageSysFlag.COMPRESSED else pb.IDENTITY
    sp.message_type = message_type(props)  # type: ignore[assignment]
    sp.born_timestamp.FromMilliseconds(msg.born_timestamp)
    sp.born_host = props.get(BORN_HOST) or _host(msg.born_host_bytes).rsplit(":", 1)[0]
    sp.store_timestamp.FromMilliseconds(msg.store_timestamp)
    sp.store_host = _host(msg.store_host_bytes)
    deliver = props.get(TIMER_DELIVER_MS)
    if deliver and deliver.isdigit():
        sp.delivery_timestamp.FromMilliseconds(int(deliver))
    if receipt_handle is not None:
        sp.receipt_handle = receipt_handle
    sp.queue_id = msg.queue_id
    sp.queue_offset = msg.queue_offset
    if invisible_ms is not None:
        # As duration(invisible_ms / 1000) gives it.
        sp.invisible_duration.FromNanoseconds(int(invisible_ms / 1000 * 1_000_000_000))
    sp.delivery_attempt = delivery_attempt if delivery_attempt is not None else msg.reconsume_times + 1
    group = props.get(SHARDING_KEY)
    if group:
        sp.message_group = group
    trace = props.get(TRACE_CONTEXT)
    if trace:
        sp.trace_context = trace
    origin = props.get(DLQ_ORIGIN_TOPIC)
    if origin:
        sp.dead_letter_queue.topic = origin
        sp.dead_letter_queue.message_id = props.get(DLQ_ORIGIN_MESSAGE_ID, "")
    return out


#: Packed hosts as text: a broker's messages come from few hosts, and this is asked twice
#: per message received.
_HOSTS: dict[bytes, str] = {}


def _host(packed: bytes) -> str:
    text = _HOSTS.get(packed)
    if text is None:
        text = unpack_host(packed)
        if len(_HOSTS) >= 4096:
            _HOSTS.clear()
        _HOSTS[bytes(packed)] = text
    return text


def body_matches(message: pb.Message) -> bool:
    """Whether a 5.x message's body has the digest it claims (a client verifying a message
    asks this of the server; no digest counts as a match)."""
    digest = message.system_properties.body_digest
    body = message.body
    if message.system_properties.body_encoding == pb.GZIP:
        try:
            body = zlib.decompress(body, 47)
        except zlib.error:
            return False
    if digest.type == pb.CRC32:
        return format(zlib.crc32(body), "08X") == digest.checksum.upper()
    if digest.type == pb.MD5:
        return hashlib.md5(body, usedforsecurity=False).hexdigest().upper() == digest.checksum.upper()
    if digest.type == pb.SHA1:
        return hashlib.sha1(body, usedforsecurity=False).hexdigest().upper() == digest.checksum.upper()
    return True


def now_ms() -> int:
    return time.time_ns() // 1_000_000
