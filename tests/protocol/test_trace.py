"""The trace text codec against RocketMQ 4.x's layout, bytes in and bytes out.

The expected strings are what Apache RocketMQ 4.9.8's ``TraceDataEncoder`` writes for the same
events (``|`` stands for ``\\x01``, ``#`` for ``\\x02``); the decoder reads them, and the older
layouts (a ``Pub`` without offset msgId, a ``SubAfter`` without timestamp and group) too.
"""

from __future__ import annotations

import pytest

from aiorocketmq.protocol.trace import (
    CONTENT_SEPARATOR,
    FIELD_SEPARATOR,
    TraceBean,
    TraceContext,
    TraceMessageType,
    TraceType,
    batch_contexts,
    decode_trace_data,
    encode_context,
    trace_keys,
)


def wire(text: str) -> str:
    return text.replace("|", CONTENT_SEPARATOR).replace("#", FIELD_SEPARATOR)


def bean() -> TraceBean:
    return TraceBean(
        "MID",
        "TOP",
        None,
        "K1 K2",
        "SH",
        9,
        TraceMessageType.NORMAL,
        "OFF",
        retry_times=2,
        transaction_id="TX",
        transaction_state="COMMIT_MESSAGE",
    )


def context(kind: TraceType) -> TraceContext:
    return TraceContext(kind, 1000, "R", "G", 5, True, "REQ", 0, [bean()])


JAVA_4_9_8 = {
    TraceType.PUB: "Pub|1000|R|G|TOP|MID|null|K1 K2|SH|9|5|0|OFF|true#",
    TraceType.SUB_BEFORE: "SubBefore|1000|R|G|REQ|MID|2|K1 K2#",
    TraceType.SUB_AFTER: "SubAfter|REQ|MID|5|true|K1 K2|0|1000|G#",
    TraceType.END_TRANSACTION: "EndTransaction|1000|R|G|TOP|MID|null|K1 K2|SH|0|TX|COMMIT_MESSAGE|false#",
}


@pytest.mark.parametrize("kind", list(TraceType))
def test_encoding_matches_rocketmq(kind: TraceType) -> None:
    assert encode_context(context(kind)) == wire(JAVA_4_9_8[kind])


@pytest.mark.parametrize("kind", list(TraceType))
def test_decoding_rocketmq_records(kind: TraceType) -> None:
    (ctx,) = decode_trace_data(wire(JAVA_4_9_8[kind]))
    assert ctx.trace_type is kind
    b = ctx.beans[0]
    assert (b.msg_id, b.keys) == ("MID", "K1 K2")
    if kind is TraceType.PUB:
        assert (ctx.timestamp, ctx.region_id, ctx.group, ctx.cost_time, ctx.success) == (
            1000,
            "R",
            "G",
            5,
            True,
        )
        assert (b.topic, b.tags, b.store_host, b.body_length, b.offset_msg_id) == (
            "TOP",
            None,
            "SH",
            9,
            "OFF",
        )
    elif kind is TraceType.SUB_BEFORE:
        assert (ctx.group, ctx.request_id, b.retry_times) == ("G", "REQ", 2)
    elif kind is TraceType.SUB_AFTER:
        assert (ctx.request_id, ctx.cost_time, ctx.success, ctx.context_code, ctx.timestamp, ctx.group) == (
            "REQ",
            5,
            True,
            0,
            1000,
            "G",
        )
    else:
        assert (b.transaction_id, b.transaction_state, b.from_transaction_check) == (
            "TX",
            "COMMIT_MESSAGE",
            False,
        )


def test_round_trip_of_a_batch_and_consumer_records_per_message() -> None:
    after = context(TraceType.SUB_AFTER)
    after.beans.append(TraceBean("MID2", keys=None))
    after.success = False
    after.context_code = 2
    text = encode_context(context(TraceType.PUB)) + encode_context(after)
    decoded = decode_trace_data(text)
    assert [(c.trace_type, c.beans[0].msg_id) for c in decoded] == [
        (TraceType.PUB, "MID"),
        (TraceType.SUB_AFTER, "MID"),
        (TraceType.SUB_AFTER, "MID2"),
    ]
    assert decoded[2].beans[0].keys is None and decoded[2].success is False and decoded[2].context_code == 2


def test_older_layouts_and_bad_records() -> None:
    old = wire(
        "Pub|7|R|G|TOP|MID|t|k|SH|3|1|3|false#SubAfter|REQ|MID|4|true|k#Junk|1#Pub|x#SubBefore|1|R|G|REQ|MID#"
    )
    pub, sub_after = decode_trace_data(old)
    assert (pub.success, pub.beans[0].offset_msg_id, pub.beans[0].msg_type) == (
        False,
        None,
        TraceMessageType.DELAY,
    )
    assert (sub_after.success, sub_after.timestamp, sub_after.group) == (True, 0, None)
    assert decode_trace_data("") == []


def test_keys_and_batches() -> None:
    assert trace_keys(context(TraceType.PUB)) == ["MID", "K1", "K2"]
    contexts = [context(TraceType.PUB) for _ in range(10)]
    one = encode_context(contexts[0])
    batches = list(batch_contexts(contexts, max_size=len(one) * 4))
    # A body is cut once it has reached the limit: 4 + 4 + 2 records.
    assert [b.data.count(FIELD_SEPARATOR) for b in batches] == [4, 4, 2]
    assert all(b.keys == ["MID", "K1", "K2"] for b in batches)
    assert "".join(b.data for b in batches) == one * 10
