"""POP's revive-log records, bytes in and out: what a check point and an ack record say, and
what a broker rebuilds from them after a crash (tests written for surviving mutants of
broker/pop/checkpoint.py).

The records are Apache's ``PopCheckPoint``, ``AckMsg`` and ``BatchAckMsg`` JSON (docs/broker.md:
"Apache's JSON fields"), plus our ``ac`` (delivery attempts) and ``rq`` (the handles' reviveQid).
"""

from __future__ import annotations

import json

import pytest

from aiorocketmq.broker.pop.checkpoint import (
    ACK_TAG,
    BATCH_ACK_TAG,
    CheckPoint,
    decode_ack,
    encode_ack,
)
from aiorocketmq.protocol.pop import ORDER_REVIVE_QID


def popped(**changes: object) -> CheckPoint:
    """A batch of three messages popped from queue 5 at offsets 1000, 1002 and 1005 (1001,
    1003 and 1004 filtered out), the second already delivered twice before."""
    fields: dict[str, object] = {
        "topic": "Orders",
        "group": "billing",
        "queue_id": 5,
        "start_offset": 1000,
        "pop_time": 1_700_000_000_000,
        "invisible_time": 30_000,
        "offsets": [1000, 1002, 1005],
        "attempts": [1, 3, 2],
        "revive_qid": 3,
        "revive_queue": 3,
        "broker_name": "broker-a",
    }
    fields.update(changes)
    return CheckPoint(**fields)  # type: ignore[arg-type]


def same_check_point(got: CheckPoint, want: CheckPoint) -> None:
    assert (got.topic, got.group, got.queue_id, got.start_offset, got.pop_time) == (
        want.topic,
        want.group,
        want.queue_id,
        want.start_offset,
        want.pop_time,
    )
    assert got.invisible_time == want.invisible_time
    assert got.offsets == want.offsets
    assert got.attempts == want.attempts
    assert got.revive_qid == want.revive_qid
    assert got.revive_queue == want.revive_queue
    assert got.broker_name == want.broker_name
    assert got.orderly is want.orderly


def test_a_check_point_read_back_after_a_crash_is_the_batch_that_was_popped() -> None:
    """Recovery (kill -9) rebuilds the in-flight table from the check point records: a record
    read back must give the same queue offsets (a start offset other than 0, offsets with gaps),
    each message's delivery attempt, the reviveQid the handles carry, the revive queue and the
    record's own revive offset (which holds the committed revive progress back), and the broker
    name the acks repeat. Mutants: offsets encoded as ``offset + start``, attempts or reviveQid
    or the broker name dropped or defaulted, revive queue / offset lost."""
    ck = popped()
    back = CheckPoint.decode(ck.encode(), revive_queue=3, revive_offset=77)
    same_check_point(back, ck)
    assert back.revive_offset == 77
    assert back.done == 0
    assert back.pending() == [0, 1, 2]
    assert back.index == {1000: 0, 1002: 1, 1005: 2}


def test_an_orderly_check_point_read_back_is_still_orderly() -> None:
    """An orderly pop's check point (reviveQid 999) must come back orderly: its queue stays
    blocked for the batch and an expired batch is handed out again, attempt + 1. Mutants:
    ``orderly`` dropped, None or inverted on decode."""
    ck = popped(revive_qid=ORDER_REVIVE_QID, revive_queue=5 % 8, orderly=True)
    back = CheckPoint.decode(ck.encode(), revive_queue=5, revive_offset=0)
    same_check_point(back, ck)
    plain = CheckPoint.decode(popped().encode(), revive_queue=3, revive_offset=0)
    assert plain.orderly is False


def test_a_check_point_record_reads_as_apaches_pop_check_point() -> None:
    """The record is Apache's PopCheckPoint JSON (so pt it bm n q t c d bn rp): ``n`` the
    number of messages, ``bm`` 0 (no message acked yet: Apache's revive skips the messages
    whose bit is set), offsets as ``so + d[i]``, ``bn`` the broker, ``rp`` 0 re-puts (Apache's
    parseRePutTimes). Mutants: ``n`` renamed, ``bm`` 1, ``rp`` 1."""
    ck = popped()
    raw = json.loads(ck.encode())
    assert raw["so"] == 1000
    assert raw["pt"] == 1_700_000_000_000
    assert raw["it"] == 30_000
    assert raw["q"] == 5
    assert raw["t"] == "Orders"
    assert raw["c"] == "billing"
    assert raw["n"] == 3
    assert raw.get("bm", 0) == 0
    assert [raw["so"] + d for d in raw["d"]] == [1000, 1002, 1005]
    assert raw["bn"] == "broker-a"
    assert int(raw.get("rp") or 0) == 0


def test_a_check_point_without_our_two_fields_is_first_deliveries_on_its_revive_queue() -> None:
    """A check point as Apache's broker writes it has no ``ac`` and no ``rq``: its messages are
    first deliveries and its handles carry the revive queue it was read from (Apache's
    reviveQid). Mutants: the default attempt 2, ``[1] / n``, the reviveQid defaulting to
    None."""
    body = json.dumps(
        {
            "so": 40,
            "pt": 1_700_000_000_000,
            "it": 60_000,
            "bm": 0,
            "n": 2,
            "q": 1,
            "t": "Orders",
            "c": "billing",
            "ro": 0,
            "d": [0, 3],
            "bn": "broker-a",
        }
    ).encode()
    ck = CheckPoint.decode(body, revive_queue=6, revive_offset=12)
    assert ck.offsets == [40, 43]
    assert ck.attempts == [1, 1]
    assert ck.revive_qid == 6
    assert ck.revive_queue == 6
    assert ck.orderly is False


def test_one_acked_offset_is_an_ack_record() -> None:
    """One offset: Apache's AckMsg, tag ``ack``, ``ao`` the offset. Mutants: the ``== 1`` test
    changed (``!= 1``, ``== 2``), ``offsets[1]``."""
    ck = popped()
    tag, body = encode_ack(ck, [1002])
    assert tag == ACK_TAG
    raw = json.loads(body)
    assert raw["ao"] == 1002
    assert "aol" not in raw
    assert decode_ack(body) == (ck.key, [1002])


@pytest.mark.parametrize("offsets", [[1000, 1005], [1000, 1002, 1005]])
def test_several_acked_offsets_are_one_batch_ack_record_and_all_read_back(offsets: list[int]) -> None:
    """Several offsets: Apache's BatchAckMsg, tag ``bAck``, ``aol`` the offsets; recovery must
    mark every one of them (a batch ack read back as its first offset only would redeliver
    acknowledged messages after a crash). Mutants: ``aol`` None or renamed, the tag None,
    ``== 2``, decode_ack reading ``ao`` or a renamed ``aol``."""
    ck = popped()
    tag, body = encode_ack(ck, offsets)
    assert tag == BATCH_ACK_TAG
    raw = json.loads(body)
    assert raw["aol"] == offsets
    assert "ao" not in raw
    assert decode_ack(body) == (ck.key, offsets)
