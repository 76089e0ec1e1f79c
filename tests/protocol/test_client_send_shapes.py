"""Single sends as the official clients frame them take the broker's fast path.

The headers below are what the C++ client (librocketmq 1.2.x, the rocketmq==0.4.4 wheel that
bench/cpp_load.c drives) and the Java client 4.9.x (sendSmartMsg) put on the wire for a sync
send, captured from a broker's socket reads; only the values are ours. The C++ client sends
SEND_MESSAGE (10) with full field names, some numbers unquoted, empty ACL signing fields and a
trailing newline; Java sends SEND_MESSAGE_V2 (310) with one-letter names, every value quoted.
Both must be read by the compiled send-header reader (a fallback to the pydantic model costs
several microseconds a send) and read exactly as the model reads them.
"""

from __future__ import annotations

import importlib
import struct
from typing import Any

import pytest

from aiorocketmq.protocol import headers
from aiorocketmq.protocol.codes import RequestCode
from aiorocketmq.protocol.command import FrameDecoder
from aiorocketmq.protocol.message import decode_properties

try:
    C: Any = importlib.import_module("aiorocketmq.protocol._speedups")
except ImportError as exc:  # pragma: no cover - the build (setup.py) warned about it
    pytest.fail(f"the compiled codecs were not built: {exc}", pytrace=False)

headers.setup_compiled(C)

UNIQ = "0100007F0000BAFB000079EAD9250100"

CPP_HEADER = (
    b'{"code":10,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN",'
    b'"Signature":"NyN+tU0MmK2ufell4QpNULWiDTA=","batch":"0","bornTimestamp":"1796628238329",'
    b'"defaultTopic":"TBW102","defaultTopicQueueNums":4,"flag":0,"producerGroup":"cpp-load-producer",'
    b'"properties":"UNIQ_KEY\\u0001' + UNIQ.encode() + b'\\u0002WAIT\\u0001true\\u0002",'
    b'"queueId":3,"reconsumeTimes":"0","sysFlag":0,"topic":"BenchmarkBroker","unitMode":"0"},'
    b'"flag":0,"language":"CPP","opaque":2,"remark":"","version":63}\n'
)

JAVA_HEADER = (
    b'{"code":310,"extFields":{"a":"benchmark_producer","b":"BenchmarkBroker","c":"TBW102",'
    b'"d":"4","e":"3","f":"0","g":"1796628238329","h":"0",'
    b'"i":"UNIQ_KEY\\u0001' + UNIQ.encode() + b'\\u0002WAIT\\u0001true\\u0002",'
    b'"j":"0","k":"false","m":"false"},"flag":0,"language":"JAVA","opaque":2,'
    b'"serializeTypeCurrentRPC":"JSON","version":395}'
)

BODY = b"x" * 128


def frame(header: bytes, body: bytes = BODY) -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), len(header)) + header + body


@pytest.mark.parametrize(
    ("header", "code", "language", "group"),
    [
        (CPP_HEADER, RequestCode.SEND_MESSAGE, "CPP", "cpp-load-producer"),
        (JAVA_HEADER, RequestCode.SEND_MESSAGE_V2, "JAVA", "benchmark_producer"),
    ],
    ids=["cpp", "java"],
)
def test_client_send_is_read_by_the_compiled_reader(
    header: bytes, code: int, language: str, group: str
) -> None:
    # Several frames in one read, as a busy connection delivers them.
    [cmd, *rest] = FrameDecoder().feed(frame(header) * 3)
    assert len(rest) == 2
    assert (cmd.code, cmd.language, cmd.opaque, cmd.body) == (code, language, 2, BODY)
    # Unquoted numbers arrive as the strings the quoted ones are.
    assert all(type(value) is str for value in cmd.ext_fields.values())
    v2 = cmd.code != RequestCode.SEND_MESSAGE
    compiled = C.send_header(cmd.ext_fields, v2)
    assert compiled is not None, "the compiled reader refused a header every such client sends"
    assert compiled == headers.pure_send_header(cmd.ext_fields, v2)
    assert [type(value) for value in compiled] == [
        type(value) for value in headers.pure_send_header(cmd.ext_fields, v2)
    ]
    assert compiled == headers.SendHeader(
        producer_group=group,
        topic="BenchmarkBroker",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=3,
        sys_flag=0,
        born_timestamp=1796628238329,
        flag=0,
        properties=f"UNIQ_KEY\x01{UNIQ}\x02WAIT\x01true\x02",
        reconsume_times=0,
        unit_mode=False,
        max_reconsume_times=None,
        batch=False,
    )
    assert compiled.properties is not None
    assert decode_properties(compiled.properties) == {"UNIQ_KEY": UNIQ, "WAIT": "true"}
