"""Transaction decisions, check-back and resume, for the mutants of ``broker/transactions.py``
that the tests in ``test_transactions.py`` let through (issue 38): what a commit carries over
from the half message, the check immunity a producer asks for, one half message not holding
up the others in a check round, the periodic check, RESUME_CHECK_HALF_MESSAGE, and what a
restart rebuilds. A plain message is sent first in each test, so that no half message sits
at commit-log offset 0 (where an offset left at its default would look right)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from aiorocketmq.broker.clients import ClientChannel
from aiorocketmq.broker.store import PutResult, PutStatus, StoreMessage
from aiorocketmq.broker.transactions import TransactionService
from aiorocketmq.broker.writer import MessageWriter
from aiorocketmq.protocol.codes import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    RequestCode,
    ResponseCode,
)
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.headers import CheckTransactionStateRequestHeader
from aiorocketmq.protocol.message import MessageExt, PropertyKey, decode_records
from aiorocketmq.protocol.names import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANSACTION_GROUP

from .support import STORE_HOST, Parts, RecordedConnection, answer, broker_parts, producer_channel, send_ok
from .test_transactions import GROUP, TOPIC, end_request, op_bodies, send_half


def asked(producer: RecordedConnection) -> list[CheckTransactionStateRequestHeader]:
    return [CheckTransactionStateRequestHeader.from_fields(c.ext_fields) for c in producer.oneways]


def online_producer(parts: Parts, group: str = GROUP, address: str = "10.0.0.5:50000") -> RecordedConnection:
    producer = RecordedConnection(address)
    parts.clients.register_producer(producer_channel(producer, f"{group}-client"), group)
    return producer


async def some_plain_message(parts: Parts, conn: RecordedConnection) -> None:
    parts.topics.ensure("Plain", 1, 6)
    await send_ok(parts, conn, "Plain", b"not a transaction")


def resume_request(half: MessageExt) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.RESUME_CHECK_HALF_MESSAGE, {"msgId": half.offset_msg_id})


# -- decisions ---------------------------------------------------------------------------------


async def test_a_commit_carries_the_half_messages_flag_birth_and_reconsume_times(
    parts: Parts, conn: RecordedConnection
) -> None:
    """Mutants ``end_79..84``: the committed message is built without the half's flag, born
    timestamp, born host, reconsume times or prepared-transaction offset (Apache's
    ``EndTransactionProcessor.endMessageTransaction`` copies each one)."""
    await some_plain_message(parts, conn)
    half = await send_half(parts, conn, b"carried")
    parts.topics.ensure(TOPIC, 2, 6)
    # send_half's helper does not set these; send one more half that does.
    await send_ok(
        parts,
        conn,
        TOPIC,
        b"flagged",
        queue_id=1,
        properties={PropertyKey.TRANSACTION_PREPARED: "true", PropertyKey.PRODUCER_GROUP: GROUP},
        flag=7,
        reconsume_times=2,
    )
    flagged = parts.messages(TRANS_HALF_TOPIC, 0)[-1]
    assert half.commit_log_offset > 0 and (flagged.flag, flagged.reconsume_times) == (7, 2)
    response = await answer(
        parts.transaction_handlers.end_transaction, conn, end_request(flagged, TRANSACTION_COMMIT_TYPE)
    )
    assert response.code == ResponseCode.SUCCESS
    (committed,) = parts.messages(TOPIC, 1)
    assert committed.body == b"flagged"
    assert (committed.flag, committed.reconsume_times) == (7, 2)
    assert committed.born_timestamp == flagged.born_timestamp != 0
    assert committed.born_host == flagged.born_host == "10.0.0.7:52001"
    assert committed.prepared_transaction_offset == flagged.commit_log_offset


async def test_an_op_record_is_born_on_this_broker(parts: Parts, conn: RecordedConnection) -> None:
    """Mutant ``_settle_14``: the op record written for a decision is built without a born
    host (Apache's ``makeOpMessageInner`` gives it the broker's store host)."""
    half = await send_half(parts, conn, b"h")
    await answer(
        parts.transaction_handlers.end_transaction, conn, end_request(half, TRANSACTION_ROLLBACK_TYPE)
    )
    (op,) = parts.messages(TRANS_OP_HALF_TOPIC, 0)
    assert op.born_host_bytes == STORE_HOST
    assert op.properties[PropertyKey.TAGS] == "d"


class FailingWriter:
    """A real writer whose puts to one topic are refused by the store (as a full disk does).
    It wraps the writer rather than subclassing it: the compiled build's MessageWriter is a
    native class, which Python classes cannot inherit from."""

    def __init__(self, writer: MessageWriter, refused_topic: str) -> None:
        self.writer = writer
        self.refused_topic = refused_topic

    def __getattr__(self, name: str) -> Any:
        return getattr(self.writer, name)

    def put(self, msg: StoreMessage) -> PutResult:
        if msg.topic == self.refused_topic:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE)
        return self.writer.put(msg)


async def test_a_commit_the_store_refuses_is_an_error_and_leaves_the_half_open(
    parts: Parts, conn: RecordedConnection
) -> None:
    """Mutant ``end_92``: the refusal's remark loses the store's reason."""
    half = await send_half(parts, conn, b"h")
    parts.transactions.writer = FailingWriter(parts.writer, TOPIC)
    response = await answer(
        parts.transaction_handlers.end_transaction, conn, end_request(half, TRANSACTION_COMMIT_TYPE)
    )
    assert (response.code, response.remark) == (
        ResponseCode.SYSTEM_ERROR,
        "commit failed: SERVICE_NOT_AVAILABLE",
    )
    assert list(parts.transactions.pending) == [half.commit_log_offset] and op_bodies(parts) == []


async def test_decisions_are_logged_with_the_transaction_id_topic_and_rollback_reason(
    parts: Parts, conn: RecordedConnection, caplog: pytest.LogCaptureFixture
) -> None:
    """Mutants ``end_33..39``, ``end_93..113``: the debug lines an operator reads to follow a
    transaction (which one, committed where, rolled back why, decided twice)."""
    keep = await send_half(parts, conn, b"keep")
    drop = await send_half(parts, conn, b"drop")
    quiet = await send_half(parts, conn, b"quiet")
    caplog.set_level(logging.DEBUG, logger="aiorocketmq.broker.transactions")
    handler = parts.transaction_handlers.end_transaction
    await answer(handler, conn, end_request(keep, TRANSACTION_COMMIT_TYPE, transaction_id="TX-KEEP"))
    await answer(handler, conn, end_request(keep, TRANSACTION_COMMIT_TYPE, transaction_id="TX-KEEP"))
    rollback = end_request(drop, TRANSACTION_ROLLBACK_TYPE, transaction_id=None, msg_id="MSG-DROP")
    rollback.remark = "stock exhausted"
    await answer(handler, conn, rollback)
    await answer(handler, conn, end_request(quiet, TRANSACTION_ROLLBACK_TYPE, transaction_id="TX-QUIET"))
    lines = [r.getMessage() for r in caplog.records if r.name == "aiorocketmq.broker.transactions"]
    assert lines == [
        f"transaction TX-KEEP committed to {TOPIC}",
        "transaction TX-KEEP already decided",
        "transaction MSG-DROP rolled back: stock exhausted",
        "transaction TX-QUIET rolled back",
    ]


# -- check-back --------------------------------------------------------------------------------


async def test_a_check_immunity_time_is_in_seconds_and_replaces_the_timeout(
    parts: Parts, conn: RecordedConnection
) -> None:
    """Mutants ``on_half_stored_2/6/12/17/26..30``: CHECK_IMMUNITY_TIME_IN_SECONDS ignored,
    read as milliseconds or off by one, or a half message without it checked at once
    (Apache's ``getImmunityTime``: the property in seconds, else ``transactionTimeOut``)."""
    await some_plain_message(parts, conn)
    producer = online_producer(parts)
    immune = await send_half(parts, conn, b"immune", **{PropertyKey.CHECK_IMMUNITY_TIME_IN_SECONDS: "9"})
    plain = await send_half(parts, conn, b"plain")
    timeout = parts.config.transaction_time_out
    assert timeout < 9000
    parts.transactions.check(now_ms=plain.store_timestamp + timeout - 1)
    assert asked(producer) == []
    parts.transactions.check(now_ms=immune.store_timestamp + 8999)
    assert [h.commit_log_offset for h in asked(producer)] == [plain.commit_log_offset]
    parts.transactions.check(now_ms=immune.store_timestamp + 9000)
    assert [h.commit_log_offset for h in asked(producer)][1:] == [
        immune.commit_log_offset,
        plain.commit_log_offset,
    ]


async def test_one_half_message_does_not_hold_up_the_rest_of_a_round(
    tmp_path: Path, conn: RecordedConnection
) -> None:
    """Mutants ``check_17/29/41`` (``continue`` -> ``break``): a half message still immune, one
    given up on, or one whose producer group is offline stops the round for those after it."""
    async with broker_parts(tmp_path, transactionCheckMax="1") as parts:
        await some_plain_message(parts, conn)
        producer = online_producer(parts)
        immune = await send_half(parts, conn, b"immune", **{PropertyKey.CHECK_IMMUNITY_TIME_IN_SECONDS: "60"})
        parts.topics.ensure(TOPIC, 2, 6)
        await send_ok(
            parts,
            conn,
            TOPIC,
            b"orphan",
            queue_id=1,
            properties={
                PropertyKey.TRANSACTION_PREPARED: "true",
                PropertyKey.PRODUCER_GROUP: "GoneProducers",
            },
        )
        orphan = parts.messages(TRANS_HALF_TOPIC, 0)[-1]
        asked_once = await send_half(parts, conn, b"asked")
        later = asked_once.store_timestamp + parts.config.transaction_time_out
        parts.transactions.check(now_ms=later)
        # The immune one waits, the orphan's group is offline, the last one is asked.
        assert [h.commit_log_offset for h in asked(producer)] == [asked_once.commit_log_offset]
        # Next round: the orphan and the asked one have had their one check and are given
        # up on; the round still goes on to both.
        parts.transactions.check(now_ms=later)
        assert set(parts.transactions.discarded) == {orphan.commit_log_offset, asked_once.commit_log_offset}
        assert list(parts.transactions.pending) == [immune.commit_log_offset]


async def test_a_round_without_a_given_time_uses_the_clock(tmp_path: Path, conn: RecordedConnection) -> None:
    """Mutants ``check_3/6``: the round's own clock (milliseconds since the epoch) ignored or
    scaled wrong, so that a half message past its timeout is not asked about."""
    async with broker_parts(tmp_path, transactionTimeOut="0") as parts:
        producer = online_producer(parts)
        half = await send_half(parts, conn, b"h")
        parts.transactions.check()
        assert [h.commit_log_offset for h in asked(producer)] == [half.commit_log_offset]


async def test_giving_up_on_a_half_message_is_logged(
    tmp_path: Path, conn: RecordedConnection, caplog: pytest.LogCaptureFixture
) -> None:
    """Mutant ``check_25``: the warning that a transaction was discarded (an operator's cue to
    resume it with ``mqadmin resumeCheckHalfMessage``)."""
    async with broker_parts(tmp_path, transactionCheckMax="0") as parts:
        await some_plain_message(parts, conn)
        half = await send_half(parts, conn, b"h")
        caplog.set_level(logging.WARNING, logger="aiorocketmq.broker.transactions")
        parts.transactions.check(now_ms=half.store_timestamp + parts.config.transaction_time_out)
        assert [r.getMessage() for r in caplog.records if r.name == "aiorocketmq.broker.transactions"] == [
            f"transaction at offset {half.commit_log_offset} discarded after 0 checks"
        ]


class CountingConnection(RecordedConnection):
    """A producer connection that says when it has been asked twice."""

    def __init__(self, address: str) -> None:
        super().__init__(address)
        self.asked_twice = asyncio.Event()

    def send_oneway(self, cmd: RemotingCommand) -> None:
        super().send_oneway(cmd)
        if len(self.oneways) >= 2:
            self.asked_twice.set()


class FlakyProducers:
    """Producers whose lookup fails once (the registry raising mid-round)."""

    def __init__(self, channels: Sequence[ClientChannel]) -> None:
        self.channels = channels
        self.calls = 0

    def producer_channels(self, group_name: str) -> Sequence[ClientChannel]:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("registry unavailable")
        return self.channels


async def test_the_periodic_check_asks_every_interval_and_survives_a_failed_round(
    tmp_path: Path, conn: RecordedConnection, caplog: pytest.LogCaptureFixture
) -> None:
    """Mutants of ``start``, ``stop`` and ``_check_periodically``: the check never started,
    run once, waiting the interval in seconds instead of milliseconds, or stopped by one
    failed round; and ``stop`` of a service that never started."""
    async with broker_parts(tmp_path, transactionCheckInterval="20", transactionTimeOut="0") as parts:
        await parts.transactions.stop()  # never started: nothing to stop
        producer = CountingConnection("10.0.0.5:50000")
        service = TransactionService(
            parts.config,
            store=parts.store,
            writer=parts.writer,
            offsets=parts.offsets,
            producers=FlakyProducers([producer_channel(producer)]),
        )
        half = await send_half(parts, conn, b"h")
        service.on_half_stored(
            {PropertyKey.PRODUCER_GROUP: GROUP},
            PutResult(
                PutStatus.PUT_OK,
                wrote_offset=half.commit_log_offset,
                queue_offset=half.queue_offset,
                store_timestamp=half.store_timestamp,
            ),
        )
        caplog.set_level(logging.ERROR, logger="aiorocketmq.broker.transactions")
        service.start()
        try:
            async with asyncio.timeout(5):
                await producer.asked_twice.wait()
        finally:
            await service.stop()
        await service.stop()  # stopping twice is harmless
        assert [h.commit_log_offset for h in asked(producer)][:2] == [half.commit_log_offset] * 2
        # Stopped means stopped: no round after it (five intervals later).
        seen = len(producer.oneways)
        await asyncio.sleep(0.1)
        assert len(producer.oneways) == seen
        failed = [r for r in caplog.records if r.name == "aiorocketmq.broker.transactions"]
        assert [r.getMessage() for r in failed] == ["transaction check failed"]
        assert failed[0].exc_info is not None


# -- resume ------------------------------------------------------------------------------------


async def test_resuming_a_discarded_half_message_checks_it_again_from_the_start(
    tmp_path: Path, conn: RecordedConnection
) -> None:
    """RESUME_CHECK_HALF_MESSAGE (mutants of ``resume``): a copy goes back into the half topic's
    queue 0 with TRANSACTION_CHECK_TIMES 0 (Apache's ``resumeCheckHalfMessage``), is asked
    about again, is decided once (on the copy or the original, not both), and survives a
    restart."""
    async with broker_parts(tmp_path, transactionCheckMax="1") as parts:
        await some_plain_message(parts, conn)
        producer = online_producer(parts)
        half = await send_half(parts, conn, b"again", **{PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: "UNIQ-R"})
        later = half.store_timestamp + parts.config.transaction_time_out
        parts.transactions.check(now_ms=later)
        parts.transactions.check(now_ms=later)
        assert list(parts.transactions.discarded) == [half.commit_log_offset]
        response = await answer(parts.transaction_handlers.resume_check, conn, resume_request(half))
        assert response.code == ResponseCode.SUCCESS
        halves = parts.messages(TRANS_HALF_TOPIC, 0)
        assert len(halves) == 2
        copy = halves[1]
        assert (copy.body, copy.queue_id, copy.properties[PropertyKey.TRANSACTION_CHECK_TIMES]) == (
            b"again",
            0,
            "0",
        )
        assert copy.properties[PropertyKey.REAL_TOPIC] == TOPIC
        assert not parts.transactions.discarded
        assert list(parts.transactions.pending) == [copy.commit_log_offset]
        # Asked about again, as a new half message, from its first check.
        producer.oneways.clear()
        parts.transactions.check(now_ms=copy.store_timestamp + parts.config.transaction_time_out)
        (again,) = asked(producer)
        assert (again.commit_log_offset, again.tran_state_table_offset) == (copy.commit_log_offset, 1)
        (checked,) = decode_records(producer.oneways[0].body)
        assert checked.properties[PropertyKey.TRANSACTION_CHECK_TIMES] == "1"
        # The original is decided already (its copy stands for it): a late decision on it
        # changes nothing.
        late = await answer(
            parts.transaction_handlers.end_transaction, conn, end_request(half, TRANSACTION_COMMIT_TYPE)
        )
        assert late.code == ResponseCode.SUCCESS and parts.messages(TOPIC, 1) == []
        parts.offsets.file.save_now(parts.offsets.encode())
    async with broker_parts(tmp_path, transactionCheckMax="1") as restarted:
        assert list(restarted.transactions.pending) == [copy.commit_log_offset]
        (pending,) = restarted.transactions.pending.values()
        assert (pending.queue_offset, pending.producer_group) == (1, GROUP)
        assert pending.store_timestamp == copy.store_timestamp
        # The copy's decision commits, once.
        handler = restarted.transaction_handlers.end_transaction
        await answer(handler, conn, end_request(copy, TRANSACTION_COMMIT_TYPE))
        await answer(handler, conn, end_request(copy, TRANSACTION_COMMIT_TYPE))
        assert [m.body for m in restarted.messages(TOPIC, 1)] == [b"again"]
        assert not restarted.transactions.pending


async def test_resuming_a_pending_half_message_settles_the_original(
    parts: Parts, conn: RecordedConnection
) -> None:
    """Mutants ``resume_36..41``: the original of a resumed half message stays open beside its
    copy (both asked about, both committed)."""
    await some_plain_message(parts, conn)
    half = await send_half(parts, conn, b"once")
    response = await answer(parts.transaction_handlers.resume_check, conn, resume_request(half))
    assert response.code == ResponseCode.SUCCESS
    copy = parts.messages(TRANS_HALF_TOPIC, 0)[1]
    assert list(parts.transactions.pending) == [copy.commit_log_offset]
    assert op_bodies(parts) == [str(half.queue_offset).encode()]
    # Everything before the copy is settled.
    assert parts.offsets.query(TRANSACTION_GROUP, TRANS_HALF_TOPIC, 0) == copy.queue_offset


async def test_a_committed_resumed_half_keeps_its_check_times_as_apache_does(
    parts: Parts, conn: RecordedConnection
) -> None:
    """Mutant ``end_61`` (dropping TRANSACTION_CHECK_TIMES from a committed message): Apache's
    EndTransactionProcessor clears only the real topic, queue and prepared flag, so a message
    committed after checks carries their count to its consumers. Ours did drop it; now it is
    kept as Apache keeps it."""
    half = await send_half(parts, conn, b"resumed")
    assert (await answer(parts.transaction_handlers.resume_check, conn, resume_request(half))).code == 0
    copy = parts.messages(TRANS_HALF_TOPIC, 0)[1]
    response = await answer(
        parts.transaction_handlers.end_transaction, conn, end_request(copy, TRANSACTION_COMMIT_TYPE)
    )
    assert response.code == ResponseCode.SUCCESS, response
    (committed,) = [m for m in parts.messages(TOPIC, 1) if m.body == b"resumed"]
    assert committed.properties.get(PropertyKey.TRANSACTION_CHECK_TIMES) == "0"
    assert PropertyKey.TRANSACTION_PREPARED not in committed.properties
    assert PropertyKey.REAL_TOPIC not in committed.properties


async def test_resuming_what_is_not_a_half_message_is_refused(parts: Parts, conn: RecordedConnection) -> None:
    """Mutants ``resume_1..9``: a message id that names no half message, or a copy the store
    refuses, answers Apache's SYSTEM_ERROR remark and leaves nothing behind."""
    await some_plain_message(parts, conn)
    (plain,) = parts.messages("Plain", 0)
    response = await answer(parts.transaction_handlers.resume_check, conn, resume_request(plain))
    assert (response.code, response.remark) == (
        ResponseCode.SYSTEM_ERROR,
        "Put message back to RMQ_SYS_TRANS_HALF_TOPIC failed.",
    )
    half = await send_half(parts, conn, b"h")
    parts.transactions.writer = FailingWriter(parts.writer, TRANS_HALF_TOPIC)
    response = await answer(parts.transaction_handlers.resume_check, conn, resume_request(half))
    assert (response.code, response.remark) == (
        ResponseCode.SYSTEM_ERROR,
        "Put message back to RMQ_SYS_TRANS_HALF_TOPIC failed.",
    )
    assert len(parts.messages(TRANS_HALF_TOPIC, 0)) == 1
    assert list(parts.transactions.pending) == [half.commit_log_offset] and op_bodies(parts) == []


async def test_a_resume_is_logged_with_both_offsets(
    parts: Parts, conn: RecordedConnection, caplog: pytest.LogCaptureFixture
) -> None:
    """Mutants ``resume_42..49``: the line saying which half message now stands for which."""
    await some_plain_message(parts, conn)
    half = await send_half(parts, conn, b"h")
    caplog.set_level(logging.INFO, logger="aiorocketmq.broker.transactions")
    await answer(parts.transaction_handlers.resume_check, conn, resume_request(half))
    copy = parts.messages(TRANS_HALF_TOPIC, 0)[1]
    assert [r.getMessage() for r in caplog.records if r.name == "aiorocketmq.broker.transactions"] == [
        f"half message at {half.commit_log_offset} resumed as {copy.commit_log_offset}"
    ]


# -- restart -----------------------------------------------------------------------------------


async def test_a_restart_rebuilds_each_open_half_message_whole(
    tmp_path: Path, conn: RecordedConnection
) -> None:
    """Mutants ``_track_*``: a half message rebuilt at start-up with its queue offset, commit-log
    offset, store time, producer group or check immunity lost, so that it is asked about too
    early, of the wrong group or with the wrong offsets, or cannot be decided."""
    async with broker_parts(tmp_path) as parts:
        await some_plain_message(parts, conn)
        await send_half(parts, conn, b"decided-before")
        immune = await send_half(parts, conn, b"immune", **{PropertyKey.CHECK_IMMUNITY_TIME_IN_SECONDS: "9"})
        plain = await send_half(parts, conn, b"plain")
        first = parts.messages(TRANS_HALF_TOPIC, 0)[0]
        await answer(
            parts.transaction_handlers.end_transaction, conn, end_request(first, TRANSACTION_ROLLBACK_TYPE)
        )
        parts.offsets.file.save_now(parts.offsets.encode())
    async with broker_parts(tmp_path) as restarted:
        assert list(restarted.transactions.pending) == [immune.commit_log_offset, plain.commit_log_offset]
        producer = online_producer(restarted)
        other = online_producer(restarted, "OtherProducers", "10.0.0.6:50000")
        timeout = restarted.config.transaction_time_out
        restarted.transactions.check(now_ms=plain.store_timestamp + timeout - 1)
        assert asked(producer) == []
        restarted.transactions.check(now_ms=immune.store_timestamp + 8999)
        (h,) = asked(producer)
        assert (h.commit_log_offset, h.tran_state_table_offset) == (
            plain.commit_log_offset,
            plain.queue_offset,
        )
        restarted.transactions.check(now_ms=immune.store_timestamp + 9000)
        assert [(h.commit_log_offset, h.tran_state_table_offset) for h in asked(producer)][1:] == [
            (immune.commit_log_offset, immune.queue_offset),
            (plain.commit_log_offset, plain.queue_offset),
        ]
        assert other.oneways == []
        response = await answer(
            restarted.transaction_handlers.end_transaction, conn, end_request(plain, TRANSACTION_COMMIT_TYPE)
        )
        assert response.code == ResponseCode.SUCCESS
        assert [m.body for m in restarted.messages(TOPIC, 1)] == [b"plain"]
        assert list(restarted.transactions.pending) == [immune.commit_log_offset]
        assert op_bodies(restarted)[-1] == str(plain.queue_offset).encode()


# -- expired commit-log files ------------------------------------------------------------------


#: Small files: 16 KiB of commit log, five entries a consume-queue file.
SMALL_FILES = {"mappedFileSizeCommitLog": 16 * 1024, "mappedFileSizeConsumeQueue": 5 * 20}


async def fill_the_first_commit_log_file(parts: Parts, conn: RecordedConnection) -> None:
    """Plain messages past the end of the first commit-log file."""
    parts.topics.ensure("Filler", 1, 6)
    while parts.store.commit_log_max_offset < 16 * 1024 + 1024:
        await send_ok(parts, conn, "Filler", b"f" * 4000)


async def test_half_messages_whose_records_expired_and_op_records_past_an_expired_head(
    tmp_path: Path, conn: RecordedConnection
) -> None:
    """Mutants ``load_4`` and ``check_33/34``: once the oldest commit-log file is deleted, the
    op topic's queue no longer starts at 0, and a restart that reads it from 0 finds nothing
    and reopens half messages decided long ago (asked about again, committed twice); and a
    half message whose record is gone is dropped from the round, without stopping it."""
    async with broker_parts(tmp_path, SMALL_FILES) as parts:
        expired = await send_half(parts, conn, b"expired")
        for n in range(7):
            decided = await send_half(parts, conn, f"old-{n}".encode())
            await answer(
                parts.transaction_handlers.end_transaction,
                conn,
                end_request(decided, TRANSACTION_ROLLBACK_TYPE),
            )
        await fill_the_first_commit_log_file(parts, conn)
        still_open = await send_half(parts, conn, b"open")
        decided_late = await send_half(parts, conn, b"decided-late")
        await answer(
            parts.transaction_handlers.end_transaction,
            conn,
            end_request(decided_late, TRANSACTION_ROLLBACK_TYPE),
        )
        assert parts.store.delete_expired_files(force=True) >= 1
        assert parts.store.get_min_offset(TRANS_OP_HALF_TOPIC, 0) > 0
        assert parts.store.look_message(expired.commit_log_offset) is None
        # Saved while the expired one still holds the half topic's progress at its start.
        parts.offsets.file.save_now(parts.offsets.encode())
        producer = online_producer(parts)
        parts.transactions.check(now_ms=decided_late.store_timestamp + parts.config.transaction_time_out)
        # The expired one is settled without asking; the round goes on to the open one.
        assert [h.commit_log_offset for h in asked(producer)] == [still_open.commit_log_offset]
        assert list(parts.transactions.pending) == [still_open.commit_log_offset]
    async with broker_parts(tmp_path, SMALL_FILES) as restarted:
        # Read from where the queues now start: the decided one stays decided, the open one open.
        assert list(restarted.transactions.pending) == [still_open.commit_log_offset]


async def test_a_restart_reads_past_many_decided_half_messages(
    tmp_path: Path, conn: RecordedConnection, caplog: pytest.LogCaptureFixture
) -> None:
    """Mutants ``load_35/36/80/85/86/89..94``: more half and op records than one read of 256
    (the offset not advanced, or moved back), an open half message after a decided one lost,
    and the start-up line counting the open ones."""
    async with broker_parts(tmp_path) as parts:
        first = await send_half(parts, conn, b"first-open")
        for n in range(258):
            decided = await send_half(parts, conn, f"decided-{n}".encode())
            await answer(
                parts.transaction_handlers.end_transaction,
                conn,
                end_request(decided, TRANSACTION_ROLLBACK_TYPE),
            )
        last = await send_half(parts, conn, b"last-open")
        parts.offsets.file.save_now(parts.offsets.encode())
    caplog.set_level(logging.INFO, logger="aiorocketmq.broker.transactions")
    async with asyncio.timeout(30), broker_parts(tmp_path) as restarted:
        assert list(restarted.transactions.pending) == [first.commit_log_offset, last.commit_log_offset]
    assert "2 transactions still open" in [
        r.getMessage() for r in caplog.records if r.name == "aiorocketmq.broker.transactions"
    ]
