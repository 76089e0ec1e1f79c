"""A batch's header properties are appended to every entry's own (with the broker's region,
trace switch and cluster; WAIT is not stored), each request's as sent: also when a producer
sends the same header properties again and again (the sender remembers what a header's
properties make) and then others."""

from __future__ import annotations

from aiorocketmq.protocol.codes import PERM_READ_WRITE, RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.message import Message, PropertyKey, encode_batch

from .support import Parts, RecordedConnection, answer, send_request

TOPIC = "BatchHeaderTopic"


def batch_request(body: bytes, header_props: dict[str, str], uniq: str) -> RemotingCommand:
    """The header's properties as given, with the UNIQ_KEY ``uniq`` and WAIT=true unless
    given."""
    props = {PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: uniq, **header_props}
    return send_request(
        TOPIC, body, code=RequestCode.SEND_BATCH_MESSAGE, batch=True, queue_id=0, properties=props
    )


async def test_each_batch_gets_its_own_header_properties(parts: Parts, conn: RecordedConnection) -> None:
    parts.topics.ensure(TOPIC, 1, PERM_READ_WRITE)
    headers = [
        {"A": "1"},
        {"A": "1"},
        {"A": "2", PropertyKey.WAIT_STORE_MSG_OK: "false"},
        {},
        {"A": "1"},
    ]
    for n, header in enumerate(headers):
        body = encode_batch([Message(TOPIC, f"m{n}-{i}".encode()) for i in range(2)])
        response = await answer(
            parts.sender.send, conn, batch_request(body, header, "U-same" if n < 2 else f"U-{n}")
        )
        assert response.code == ResponseCode.SUCCESS, response.remark
    stored = parts.messages(TOPIC, 0)
    assert len(stored) == 2 * len(headers)
    for n, header in enumerate(headers):
        for msg in stored[2 * n : 2 * n + 2]:
            assert msg.properties.get("A") == header.get("A"), (n, msg.properties)
            assert msg.properties[PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] == (
                "U-same" if n < 2 else f"U-{n}"
            )
            # The header's WAIT decides the answer; it is not stored with the entries.
            assert PropertyKey.WAIT_STORE_MSG_OK not in msg.properties
            assert msg.properties[PropertyKey.CLUSTER] == parts.config.broker_cluster_name
