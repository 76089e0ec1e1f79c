"""Transactional messages in process: END_TRANSACTION commits and rollbacks, and the
check-back of half messages left undecided, sent on a recorded producer connection."""

from __future__ import annotations

from pathlib import Path

from aiorocketmq.protocol.codes import (
    PERM_READ_WRITE,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    RequestCode,
    ResponseCode,
    transaction_type,
)
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from aiorocketmq.protocol.message import MessageExt, PropertyKey, decode_records
from aiorocketmq.protocol.names import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANSACTION_GROUP

from .support import Parts, RecordedConnection, answer, broker_parts, producer_channel, send_ok

TOPIC = "TxTopic"
GROUP = "TxProducers"


async def send_half(parts: Parts, conn: RecordedConnection, body: bytes, **properties: str) -> MessageExt:
    parts.topics.ensure(TOPIC, 2, PERM_READ_WRITE)
    before = len(parts.messages(TRANS_HALF_TOPIC, 0))
    await send_ok(
        parts,
        conn,
        TOPIC,
        body,
        queue_id=1,
        properties={
            PropertyKey.TRANSACTION_PREPARED: "true",
            PropertyKey.PRODUCER_GROUP: GROUP,
            **properties,
        },
    )
    return parts.messages(TRANS_HALF_TOPIC, 0)[before]


def end_request(half: MessageExt, kind: int, **header: object) -> RemotingCommand:
    fields: dict[str, object] = {
        "producer_group": GROUP,
        "tran_state_table_offset": half.queue_offset,
        "commit_log_offset": half.commit_log_offset,
        "commit_or_rollback": kind,
        "msg_id": half.msg_id,
        **header,
    }
    h = EndTransactionRequestHeader(**fields)  # type: ignore[arg-type]
    return RemotingCommand.request(RequestCode.END_TRANSACTION, h.to_fields())


def op_bodies(parts: Parts) -> list[bytes]:
    return [m.body for m in parts.messages(TRANS_OP_HALF_TOPIC, 0)]


async def test_commit_stores_the_message_in_its_real_queue(parts: Parts, conn: RecordedConnection) -> None:
    half = await send_half(parts, conn, b"commit me")
    response = await answer(
        parts.transaction_handlers.end_transaction, conn, end_request(half, TRANSACTION_COMMIT_TYPE)
    )
    assert response.code == ResponseCode.SUCCESS
    (committed,) = parts.messages(TOPIC, 1)
    assert committed.body == b"commit me"
    assert transaction_type(committed.sys_flag) == TRANSACTION_COMMIT_TYPE
    assert committed.prepared_transaction_offset == half.commit_log_offset
    assert PropertyKey.TRANSACTION_PREPARED not in committed.properties
    assert op_bodies(parts) == [str(half.queue_offset).encode()]
    assert not parts.transactions.pending
    # Everything is settled: the half topic's progress moves to its end.
    assert parts.offsets.query(TRANSACTION_GROUP, TRANS_HALF_TOPIC, 0) == 1
    # A repeated decision is a no-op.
    response = await answer(
        parts.transaction_handlers.end_transaction, conn, end_request(half, TRANSACTION_COMMIT_TYPE)
    )
    assert response.code == ResponseCode.SUCCESS
    assert len(parts.messages(TOPIC, 1)) == 1 and len(op_bodies(parts)) == 1


async def test_rollback_stores_nothing_but_the_op_record(parts: Parts, conn: RecordedConnection) -> None:
    half = await send_half(parts, conn, b"roll me back")
    response = await answer(
        parts.transaction_handlers.end_transaction, conn, end_request(half, TRANSACTION_ROLLBACK_TYPE)
    )
    assert response.code == ResponseCode.SUCCESS
    assert parts.messages(TOPIC, 1) == []
    assert op_bodies(parts) == [str(half.queue_offset).encode()]
    assert not parts.transactions.pending


async def test_end_transaction_checks_the_half_message(parts: Parts, conn: RecordedConnection) -> None:
    half = await send_half(parts, conn, b"h")
    cases = [
        (end_request(half, TRANSACTION_COMMIT_TYPE, producer_group="Other"), "The producer group wrong"),
        (
            end_request(half, TRANSACTION_COMMIT_TYPE, tran_state_table_offset=9),
            "The transaction state table offset wrong",
        ),
        (
            end_request(half, TRANSACTION_COMMIT_TYPE, commit_log_offset=123_456_789),
            "Find prepared transaction message failed",
        ),
    ]
    for cmd, remark in cases:
        response = await answer(parts.transaction_handlers.end_transaction, conn, cmd)
        assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR, remark)
    assert len(parts.transactions.pending) == 1 and parts.messages(TOPIC, 1) == []


async def test_a_slave_refuses_decisions(tmp_path: Path, conn: RecordedConnection) -> None:
    async with broker_parts(tmp_path, brokerId="1") as parts:
        half = await send_half(parts, conn, b"h")
        response = await answer(
            parts.transaction_handlers.end_transaction, conn, end_request(half, TRANSACTION_COMMIT_TYPE)
        )
        assert (response.code, response.remark) == (
            ResponseCode.SLAVE_NOT_AVAILABLE,
            "a slave does not accept transaction decisions",
        )


async def test_an_old_undecided_half_message_is_checked_back(parts: Parts, conn: RecordedConnection) -> None:
    producer = RecordedConnection("10.0.0.5:50000")
    parts.clients.register_producer(producer_channel(producer), GROUP)
    old = await send_half(parts, conn, b"old", **{PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: "UNIQ-OLD"})
    decided = await send_half(parts, conn, b"decided")
    await answer(
        parts.transaction_handlers.end_transaction, conn, end_request(decided, TRANSACTION_COMMIT_TYPE)
    )
    timeout = parts.config.transaction_time_out
    parts.transactions.check(now_ms=old.store_timestamp + timeout - 1)
    assert producer.oneways == []  # not old enough yet
    parts.transactions.check(now_ms=old.store_timestamp + timeout)
    (check,) = producer.oneways  # the decided one is not asked about
    assert check.code == RequestCode.CHECK_TRANSACTION_STATE
    h = CheckTransactionStateRequestHeader.from_fields(check.ext_fields)
    assert (h.commit_log_offset, h.tran_state_table_offset) == (old.commit_log_offset, old.queue_offset)
    assert h.msg_id == h.transaction_id == "UNIQ-OLD"
    assert h.offset_msg_id == old.offset_msg_id
    (asked,) = decode_records(check.body)
    assert (asked.topic, asked.queue_id, asked.body) == (TOPIC, 1, b"old")
    assert asked.properties[PropertyKey.TRANSACTION_CHECK_TIMES] == "1"


async def test_check_back_answers_are_applied_as_given(parts: Parts, conn: RecordedConnection) -> None:
    """Here for the bug of a ROLLBACK answered as COMMIT on check-back: the producer answers
    CHECK_TRANSACTION_STATE with END_TRANSACTION marked ``fromTransactionCheck``, and that
    answer decides exactly as a first-hand one does: a rollback stores nothing, a commit the
    message, an UNKNOWN leaves it to be asked again."""
    producer = RecordedConnection("10.0.0.5:50000")
    parts.clients.register_producer(producer_channel(producer), GROUP)
    halves = {body: await send_half(parts, conn, body) for body in (b"keep", b"drop", b"wait")}
    oldest = max(h.store_timestamp for h in halves.values())
    parts.transactions.check(now_ms=oldest + parts.config.transaction_time_out)
    asked = {
        CheckTransactionStateRequestHeader.from_fields(c.ext_fields).commit_log_offset
        for c in producer.oneways
    }
    assert asked == {h.commit_log_offset for h in halves.values()}
    decisions = {b"keep": TRANSACTION_COMMIT_TYPE, b"drop": TRANSACTION_ROLLBACK_TYPE, b"wait": 0}
    for body, kind in decisions.items():
        cmd = end_request(halves[body], kind, from_transaction_check=True)
        response = await answer(parts.transaction_handlers.end_transaction, conn, cmd)
        assert response.code == ResponseCode.SUCCESS
    assert [m.body for m in parts.messages(TOPIC, 1)] == [b"keep"]
    assert sorted(op_bodies(parts)) == sorted(
        str(halves[b].queue_offset).encode() for b in (b"keep", b"drop")
    )
    assert list(parts.transactions.pending) == [halves[b"wait"].commit_log_offset]


async def test_a_half_message_is_given_up_after_check_max_rounds(
    tmp_path: Path, conn: RecordedConnection
) -> None:
    async with broker_parts(tmp_path, transactionCheckMax="2") as parts:
        half = await send_half(parts, conn, b"abandoned")  # its producer is gone: nobody to ask
        later = half.store_timestamp + parts.config.transaction_time_out
        parts.transactions.check(now_ms=later)
        parts.transactions.check(now_ms=later)
        assert len(parts.transactions.pending) == 1 and op_bodies(parts) == []
        parts.transactions.check(now_ms=later)
        assert not parts.transactions.pending
        assert op_bodies(parts) == [str(half.queue_offset).encode()]
        # A decision that arrives after all is still applied.
        response = await answer(
            parts.transaction_handlers.end_transaction, conn, end_request(half, TRANSACTION_COMMIT_TYPE)
        )
        assert response.code == ResponseCode.SUCCESS
        assert [m.body for m in parts.messages(TOPIC, 1)] == [b"abandoned"]
        assert not parts.transactions.discarded


async def test_open_half_messages_are_rebuilt_from_the_store(
    tmp_path: Path, conn: RecordedConnection
) -> None:
    async with broker_parts(tmp_path) as parts:
        open_half = await send_half(parts, conn, b"open")
        done = await send_half(parts, conn, b"done")
        await answer(
            parts.transaction_handlers.end_transaction, conn, end_request(done, TRANSACTION_ROLLBACK_TYPE)
        )
        parts.offsets.file.save_now(parts.offsets.encode())
    async with broker_parts(tmp_path) as restarted:
        assert list(restarted.transactions.pending) == [open_half.commit_log_offset]


def decide_by_id(parts: Parts, transaction_id: str, kind: int) -> bool:
    """What the 5.x EndTransaction does: find the half message by id, decide it; whether found."""
    half = parts.transactions.find(GROUP, transaction_id)
    if half is None:
        return False
    parts.transactions.decide(
        commit_log_offset=half.commit_log_offset,
        queue_offset=half.queue_offset,
        producer_group=GROUP,
        kind=kind,
        transaction_id=transaction_id,
    )
    return True


async def test_a_transaction_is_found_by_its_id_until_it_is_decided(
    tmp_path: Path, conn: RecordedConnection
) -> None:
    """The transaction id (the half message's unique key) names it within its producer group,
    across a restart, after it was given up on, and after an operator resumed it as a copy."""
    async with broker_parts(tmp_path, transactionCheckMax="1") as parts:
        first = await send_half(parts, conn, b"one", **{PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: "TX1"})
        await send_half(parts, conn, b"two", **{PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: "TX2"})
        await send_half(parts, conn, b"three", **{PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: "TX3"})
        assert parts.transactions.find("another-group", "TX1") is None
        found = parts.transactions.find(GROUP, "TX1")
        assert found is not None and found.commit_log_offset == first.commit_log_offset
        assert decide_by_id(parts, "TX1", TRANSACTION_COMMIT_TYPE)
        assert [m.body for m in parts.messages(TOPIC, 1)] == [b"one"]
        assert not decide_by_id(parts, "TX1", TRANSACTION_COMMIT_TYPE), "decided twice"
        parts.offsets.file.save_now(parts.offsets.encode())
    async with broker_parts(tmp_path, transactionCheckMax="1") as parts:
        # Rebuilt from the store: TX2 and TX3 are still open, by id.
        assert parts.transactions.find(GROUP, "TX1") is None
        two = parts.transactions.find(GROUP, "TX2")
        open_three = parts.transactions.find(GROUP, "TX3")
        assert two is not None and open_three is not None
        # Given up on after its checks: still found, still decidable. (Both are due at once
        # whether or not they were stored in the same millisecond.)
        later = max(two.store_timestamp, open_three.store_timestamp) + parts.config.transaction_time_out
        parts.transactions.check(now_ms=later)
        parts.transactions.check(now_ms=later)
        assert not parts.transactions.pending
        assert decide_by_id(parts, "TX2", TRANSACTION_ROLLBACK_TYPE)
        assert parts.transactions.find(GROUP, "TX2") is None
        # Resumed by an operator: the id now names the copy, which a decision commits once.
        three = parts.transactions.find(GROUP, "TX3")
        assert three is not None
        parts.transactions.resume(three.commit_log_offset)
        copy = parts.transactions.find(GROUP, "TX3")
        assert copy is not None and copy.commit_log_offset != three.commit_log_offset
        assert decide_by_id(parts, "TX3", TRANSACTION_COMMIT_TYPE)
        assert [m.body for m in parts.messages(TOPIC, 1)] == [b"one", b"three"]
        assert parts.transactions.find(GROUP, "TX3") is None
