"""A received message as the 5.x client gets it, field by field where ``to_message`` fills
the message in place: timestamps present even at zero, hosts as text (v4 and v6, the same
on every message from a host), the invisible time as the handle's."""

from __future__ import annotations

from aiorocketmq.broker.grpc import messaging_pb2 as pb
from aiorocketmq.broker.grpc.convert import to_message
from aiorocketmq.protocol.message import MessageExt, pack_host


def stored(born_host: bytes, store_host: bytes, born: int, store: int) -> MessageExt:
    return MessageExt(
        "T",
        b"body",
        properties={"UNIQ_KEY": "ID1", "color": "red"},
        queue_id=1,
        queue_offset=7,
        born_timestamp=born,
        born_host=born_host,
        store_host=store_host,
        store_timestamp=store,
    )


def test_timestamps_hosts_and_invisible_time() -> None:
    v4, v6 = pack_host("10.0.0.9", 5555), pack_host("::1", 10911)
    for _ in range(2):  # the second time from the host cache
        out = to_message(stored(v4, v6, 0, 1_765_000_000_123), invisible_ms=30_000, receipt_handle="h")
        sp = out.system_properties
        assert sp.HasField("born_timestamp") and sp.born_timestamp.ToMilliseconds() == 0
        assert sp.store_timestamp.ToMilliseconds() == 1_765_000_000_123
        assert (sp.born_host, sp.store_host) == ("10.0.0.9", "[::1]:10911")
        assert sp.invisible_duration.ToMilliseconds() == 30_000
        assert not sp.HasField("delivery_timestamp")
        assert (out.topic.name, dict(out.user_properties), out.body) == ("T", {"color": "red"}, b"body")
        assert (sp.message_id, sp.receipt_handle, sp.queue_offset) == ("ID1", "h", 7)
        assert sp.message_type == pb.NORMAL
    out = to_message(stored(v6, v4, 5, 6))
    assert not out.system_properties.HasField("invisible_duration")
    assert (out.system_properties.born_host, out.system_properties.store_host) == ("[::1]", "10.0.0.9:5555")
