"""The gRPC endpoint's pure parts: the message-group queue choice (Guava's consistent hash,
as the proxy), delivery times, the 5.x view of stored messages, signatures."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

import pytest
import yaml
from google.protobuf.timestamp_pb2 import Timestamp

from aiorocketmq.broker.acl import AccessValidator
from aiorocketmq.broker.acl import Perm as AclPerm
from aiorocketmq.broker.grpc import messaging_pb2 as pb
from aiorocketmq.broker.grpc.auth import Forbidden, Unauthorized, authorize, parse_authorization, sign
from aiorocketmq.broker.grpc.convert import (
    body_matches,
    consistent_hash,
    delivery_time_ms,
    status_of_response_code,
    to_message,
)
from aiorocketmq.broker.grpc.service import consistent_queue
from aiorocketmq.protocol.codes import MessageSysFlag, ResponseCode
from aiorocketmq.protocol.message import MessageExt, java_hash, pack_host

#: Guava 31's Hashing.consistentHash(group.hashCode(), buckets), as Java printed them.
GUAVA = [
    ("order-7", 2, 0), ("order-7", 8, 4), ("order-7", 1000, 711),
    ("g", 2, 1), ("g", 8, 1), ("g", 1000, 223),
    ("ga", 2, 1), ("ga", 8, 2), ("ga", 1000, 721),
    ("gb", 2, 1), ("gb", 8, 1), ("gb", 1000, 118),
    ("", 2, 0), ("", 8, 0), ("", 1000, 0),
    ("测试", 2, 0), ("测试", 8, 5), ("测试", 1000, 265),
    ("a-very-long-message-group-name-0123456789", 2, 1),
    ("a-very-long-message-group-name-0123456789", 8, 1),
    ("a-very-long-message-group-name-0123456789", 1000, 717),
]  # fmt: skip


@pytest.mark.parametrize(("group", "buckets", "expected"), GUAVA)
def test_message_groups_land_on_the_queue_the_proxy_picks(group: str, buckets: int, expected: int) -> None:
    assert consistent_queue(group, buckets) == expected
    assert consistent_hash(java_hash(group), buckets) == expected


def test_delivery_times_in_seconds_or_misplaced_milliseconds() -> None:
    ts = Timestamp(seconds=1_700_000_000, nanos=250_000_000)
    assert delivery_time_ms(ts) == 1_700_000_000_250
    # The Python client's own tests put milliseconds into `seconds`.
    assert delivery_time_ms(Timestamp(seconds=1_700_000_000_250)) == 1_700_000_000_250


def test_a_stored_record_as_a_5x_message() -> None:
    msg = MessageExt(
        "%RETRY%cg_T",
        b"payload",
        properties={
            "TAGS": "TagA",
            "KEYS": "k1 k2",
            "UNIQ_KEY": "ABC",
            "__SHARDINGKEY": "order-1",
            "TIMER_DELIVER_MS": "1700000000000",
            "color": "red",
            "CLUSTER": "DefaultCluster",
        },
        queue_id=3,
        queue_offset=42,
        born_timestamp=1_600_000_000_000,
        born_host=pack_host("10.0.0.1", 5555),
        store_host=pack_host("10.0.0.2", 10911),
        reconsume_times=2,
        sys_flag=int(MessageSysFlag.COMPRESSED),
    )
    out = to_message(msg, topic="T", receipt_handle="h1", invisible_ms=30_000)
    sp = out.system_properties
    assert out.topic.name == "T"
    assert dict(out.user_properties) == {"color": "red"}
    assert (sp.tag, list(sp.keys), sp.message_id) == ("TagA", ["k1", "k2"], "ABC")
    assert sp.message_group == "order-1"
    assert sp.message_type == pb.DELAY  # a delivery time wins over the group
    assert sp.delivery_timestamp.ToMilliseconds() == 1_700_000_000_000
    assert sp.body_encoding == pb.GZIP
    assert sp.body_digest.checksum == hashlib.md5(b"payload").hexdigest().upper()
    assert (sp.receipt_handle, sp.queue_id, sp.queue_offset, sp.delivery_attempt) == ("h1", 3, 42, 3)
    assert sp.invisible_duration.seconds == 30
    assert sp.born_host == "10.0.0.1"
    assert sp.store_host == "10.0.0.2:10911"


def test_body_digests() -> None:
    msg = pb.Message(body=b"abc")
    msg.system_properties.body_digest.type = pb.MD5
    msg.system_properties.body_digest.checksum = hashlib.md5(b"abc").hexdigest()
    assert body_matches(msg)
    msg.system_properties.body_digest.checksum = hashlib.md5(b"abd").hexdigest()
    assert not body_matches(msg)


def test_remoting_codes_as_5x_status_codes() -> None:
    assert status_of_response_code(ResponseCode.SUCCESS) == pb.OK
    assert status_of_response_code(ResponseCode.TOPIC_NOT_EXIST) == pb.TOPIC_NOT_FOUND
    assert status_of_response_code(ResponseCode.NO_PERMISSION) == pb.FORBIDDEN
    assert status_of_response_code(ResponseCode.FLUSH_DISK_TIMEOUT) == pb.MASTER_PERSISTENCE_TIMEOUT
    assert status_of_response_code(12345) == pb.INTERNAL_SERVER_ERROR


def test_signatures(tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(
        yaml.safe_dump(
            {
                "accounts": [
                    {
                        "accessKey": "ak",
                        "secretKey": "sk",
                        "topicPerms": ["T=PUB"],
                        "defaultTopicPerm": "DENY",
                    }
                ]
            }
        )
    )
    access = AccessValidator([acl])
    when = "20261124T072700Z"
    digest = hmac.new(b"sk", when.encode(), hashlib.sha1).hexdigest()
    assert sign("sk", when) == digest

    def header(signature: str, key: str = "ak") -> dict[str, str]:
        return {
            "x-mq-date-time": when,
            "authorization": f"MQv2-HMAC-SHA1 Credential={key}, SignedHeaders=x-mq-date-time, Signature={signature}",
        }

    assert parse_authorization(header(digest)["authorization"])["Credential"] == "ak"
    # Lower- and upper-case hex (Python / Java and Node.js clients) both verify.
    authorize(access, header(digest), "127.0.0.1", {"T": AclPerm.PUB})
    authorize(access, header(digest.upper()), "127.0.0.1", {"T": AclPerm.PUB})
    with pytest.raises(Unauthorized):
        authorize(access, header(sign("wrong", when)), "127.0.0.1", {})
    with pytest.raises(Unauthorized):
        authorize(access, header(digest, key="nobody"), "127.0.0.1", {})
    with pytest.raises(Unauthorized):
        authorize(access, {}, "127.0.0.1", {})
    with pytest.raises(Forbidden):
        authorize(access, header(digest), "127.0.0.1", {"T": AclPerm.SUB})
    with pytest.raises(Forbidden):
        authorize(access, header(digest), "127.0.0.1", {"Other": AclPerm.PUB})
