"""POP's wire pieces without sockets: receipt handles in Apache's ExtraInfo layout, the
offset-info strings of a pop response, and the handles a client builds from them."""

from __future__ import annotations

import json

import pytest

from aiorocketmq.protocol.headers import Header
from aiorocketmq.protocol.pop import (
    AckMessageRequestHeader,
    BatchAck,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
    PopRequestCode,
    ReceiptHandle,
    ReceiptHandleError,
    decode_batch_ack_body,
    encode_batch_ack_body,
    handles_for,
    msg_offset_info,
    order_count_info,
    pop_retry_topic,
    start_offset_info,
)


def test_request_codes_are_apache_5x_numbers() -> None:
    assert PopRequestCode.POP_MESSAGE == 200050
    assert PopRequestCode.ACK_MESSAGE == 200051
    assert PopRequestCode.CHANGE_MESSAGE_INVISIBLETIME == 200053
    assert PopRequestCode.BATCH_ACK_MESSAGE == 200151


def test_headers_use_apache_field_names() -> None:
    pop = PopMessageRequestHeader(
        consumer_group="g", topic="T", max_msg_nums=8, invisible_time=30000, poll_time=1000, order=True
    )
    assert set(pop.to_fields()) >= {
        "consumerGroup", "topic", "queueId", "maxMsgNums", "invisibleTime", "pollTime", "bornTime", "initMode", "order"
    }  # fmt: skip
    ack = AckMessageRequestHeader.from_fields(
        {"consumerGroup": "g", "topic": "T", "queueId": "1", "extraInfo": "x", "offset": "5"}
    )
    assert (ack.queue_id, ack.offset) == (1, 5)
    assert isinstance(ack, Header)


def test_a_handle_round_trips_and_reads_like_apache_extra_info() -> None:
    text = "12 1700000000000 30000 3 0 broker-a 2 14"
    handle = ReceiptHandle.decode(text)
    assert (handle.ck_queue_offset, handle.queue_id, handle.queue_offset, handle.revive_qid) == (12, 2, 14, 3)
    assert handle.encode() == text
    assert handle.visible_at == 1700000030000
    assert not handle.retry and not handle.orderly
    assert handle.real_topic("T", "g") == "T"
    with_offset = ReceiptHandle.decode(
        text.replace(" 0 broker", " 1 broker").replace(" 3 ", " 999 ") + " 4096"
    )
    assert with_offset.commit_log_offset == 4096 and with_offset.orderly
    assert with_offset.real_topic("T", "g") == pop_retry_topic("g", "T") == "%RETRY%g_T"


@pytest.mark.parametrize(
    "bad", ["", "1 2 3", "a 1 2 3 0 b 1 2", "1 2 3 4 7 b 1 2", "1 2 3 4 0 b 1 2 3 4", "-1 2 3 4 0 b 1 2"]
)
def test_malformed_handles_are_refused(bad: str) -> None:
    with pytest.raises(ReceiptHandleError):
        ReceiptHandle.decode(bad)


def test_offset_info_strings_and_the_handles_built_from_them() -> None:
    starts = start_offset_info([(False, 1, 10), (True, 0, 3)])
    assert starts == "0 1 10;1 0 3"
    assert msg_offset_info([(False, 1, [10, 12]), (True, 0, [3])]) == "0 1 10,12;1 0 3"
    counts = order_count_info([(False, 1, 10, 2)])
    assert counts == "0 qo1%10 2"
    header = PopMessageResponseHeader(
        pop_time=1000, invisible_time=500, revive_qid=999, start_offset_info=starts, order_count_info=counts
    )
    built = handles_for(header, "b", [("T", 1, 10), ("T", 1, 12), ("%RETRY%g_T", 0, 3)])
    assert built == [
        ("10 1000 500 999 0 b 1 10", 2),
        ("10 1000 500 999 0 b 1 12", 0),
        ("3 1000 500 999 1 b 0 3", 0),
    ]
    with pytest.raises(ReceiptHandleError):
        handles_for(header, "b", [("T", 5, 1)])


def test_a_handle_the_broker_gave_in_pop_ck_is_taken_as_is() -> None:
    """Apache 5.x's broker rewrites a redelivery's record to the original topic and hands its
    handle in POP_CK: the retry queue's start offset cannot be found by the record's topic."""
    starts = start_offset_info([(False, 1, 10), (True, 0, 3)])
    header = PopMessageResponseHeader(
        pop_time=1000, invisible_time=500, revive_qid=999, start_offset_info=starts
    )
    given = "3 1000 500 999 1 b 0 3"
    built = handles_for(header, "b", [("T", 1, 10), ("T", 0, 3)], [None, given])
    assert built == [("10 1000 500 999 0 b 1 10", 0), (given, 0)]
    with pytest.raises(ReceiptHandleError):  # without it, that record names no start offset
        handles_for(header, "b", [("T", 1, 10), ("T", 0, 3)])


def test_batch_ack_bodies_carry_java_bit_sets() -> None:
    acks = [
        BatchAck("g", "T", False, 10, 1, 3, 1000, 500, (10, 12, 17)),
        BatchAck("g", "T", True, 4, 0, 3, 1000, 500, (4, 12)),
    ]
    body = encode_batch_ack_body("b", acks)
    raw = json.loads(body)
    # BitSet.toByteArray(): little-endian bytes, base64 as fastjson writes byte arrays
    assert [a["b"] for a in raw["acks"]] == ["hQ==", "AQE="]
    assert raw["acks"][1]["r"] == "1" and raw["brokerName"] == "b"
    assert decode_batch_ack_body(body) == ("b", acks)
    assert acks[0].handles("b") == [
        "10 1000 500 3 0 b 1 10",
        "10 1000 500 3 0 b 1 12",
        "10 1000 500 3 0 b 1 17",
    ]
    long_names = json.dumps(
        {"brokerName": "b", "acks": [{"consumerGroup": "g", "topic": "T", "retry": "0", "startOffset": 1,
          "queueId": 0, "reviveQueueId": 0, "popTime": 1, "invisibleTime": 1, "bitSet": "Aw=="}]}
    ).encode()  # fmt: skip
    assert decode_batch_ack_body(long_names)[1][0].offsets == (1, 2)
    for bad in (
        b"{",
        b'{"acks":[{"c":"g"}]}',
        b'{"acks":[{"c":"g","t":"T","r":"0","so":1,"q":0,"rq":0,"pt":1,"it":1,"b":"!"}]}',
    ):
        with pytest.raises(ReceiptHandleError):
            decode_batch_ack_body(bad)
