"""Transactional messages on the broker: half messages wait in ``RMQ_SYS_TRANS_HALF_TOPIC``
until their producer commits or rolls back (END_TRANSACTION); a decision writes an op record
to ``RMQ_SYS_TRANS_OP_HALF_TOPIC``. Half messages left undecided past ``transactionTimeOut``
are checked back with CHECK_TRANSACTION_STATE on a live connection of their producer group,
every ``transactionCheckInterval``, at most ``transactionCheckMax`` times.

Open half messages are rebuilt from the two topics at start-up, so a restart loses none.
Each is also known by its transaction id (the message's unique key) within its producer
group, so a front whose clients name a transaction by id alone (the 5.x EndTransaction) finds it
here (:meth:`TransactionService.find`) and decides it with plain values
(:meth:`TransactionService.decide`), as END_TRANSACTION's header does with offsets.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from aiorocketmq.broker.store import MessageStore, PutResult
from aiorocketmq.protocol.codes import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    RequestCode,
    reset_transaction_type,
)
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import ServerSystemError
from aiorocketmq.protocol.headers import CheckTransactionStateRequestHeader
from aiorocketmq.protocol.loop import cancel_and_wait
from aiorocketmq.protocol.message import MessageExt, PropertyKey, encode_message_ext
from aiorocketmq.protocol.names import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANSACTION_GROUP

from .clients import ClientChannel
from .config import BrokerConfig
from .offsets import OffsetTable
from .writer import MessageWriter

log = logging.getLogger(__name__)

OP_REMOVE_TAG = "d"


class Producers(Protocol):
    """Who can be asked about a half message: the live connections of a producer group."""

    def producer_channels(self, group_name: str) -> Sequence[ClientChannel]: ...


@dataclass(slots=True)
class HalfMessage:
    queue_offset: int
    commit_log_offset: int
    store_timestamp: int
    producer_group: str
    immunity_ms: int = 0
    check_times: int = 0
    #: The half message's unique key, which producers name the transaction by.
    transaction_id: str = ""


class TransactionService:
    def __init__(
        self,
        config: BrokerConfig,
        *,
        store: MessageStore,
        writer: MessageWriter,
        offsets: OffsetTable,
        producers: Producers,
    ) -> None:
        self.config = config
        self.store = store
        self.writer = writer
        self.offsets = offsets
        self.producers = producers
        self.pending: dict[int, HalfMessage] = {}
        #: Half messages given up on after ``transactionCheckMax`` checks, by commit-log
        #: offset: their producer may still decide (kept until a restart).
        self.discarded: dict[int, HalfMessage] = {}
        #: (producer group, transaction id) -> commit-log offset of an undecided half message
        #: (pending or discarded).
        self._by_id: dict[tuple[str, str], int] = {}
        self._task: asyncio.Task[None] | None = None

    # -- state ----------------------------------------------------------------------------

    async def load(self) -> None:
        """Rebuild the open half messages from the half and op topics."""
        store = self.store
        done: set[int] = set()
        offset = store.get_min_offset(TRANS_OP_HALF_TOPIC, 0)
        end = store.get_max_offset(TRANS_OP_HALF_TOPIC, 0)
        while offset < end:
            entries = store.read_consume_queue(TRANS_OP_HALF_TOPIC, 0, offset, 256)
            if not entries:
                break
            for phys, _size, _tags in entries:
                record = store.look_message(phys)
                if record is not None and record.body.isdigit():
                    done.add(int(record.body))
            offset += len(entries)
            await asyncio.sleep(0)
        start = max(
            store.get_min_offset(TRANS_HALF_TOPIC, 0),
            self.offsets.query(TRANSACTION_GROUP, TRANS_HALF_TOPIC, 0),
        )
        end = store.get_max_offset(TRANS_HALF_TOPIC, 0)
        offset = start
        while offset < end:
            entries = store.read_consume_queue(TRANS_HALF_TOPIC, 0, offset, 256)
            if not entries:
                break
            for i, (phys, _size, _tags) in enumerate(entries):
                if offset + i in done:
                    continue
                msg = store.look_message(phys)
                if msg is not None:
                    self._track(msg)
            offset += len(entries)
            await asyncio.sleep(0)
        if self.pending:
            log.info("%d transactions still open", len(self.pending))

    def _track(self, msg: MessageExt) -> None:
        self._open(msg.properties, msg.queue_offset, msg.commit_log_offset, msg.store_timestamp)

    def on_half_stored(self, properties: dict[str, str], result: PutResult) -> None:
        stored = result.store_timestamp or time.time_ns() // 1_000_000
        self._open(properties, result.queue_offset, result.wrote_offset, stored)

    def _open(
        self, properties: dict[str, str], queue_offset: int, commit_log_offset: int, stored: int
    ) -> None:
        immunity = properties.get(PropertyKey.CHECK_IMMUNITY_TIME_IN_SECONDS, "")
        half = HalfMessage(
            queue_offset=queue_offset,
            commit_log_offset=commit_log_offset,
            store_timestamp=stored,
            producer_group=properties.get(PropertyKey.PRODUCER_GROUP, ""),
            immunity_ms=int(immunity) * 1000 if immunity.isdigit() else 0,
            transaction_id=properties.get(PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, ""),
        )
        self.pending[commit_log_offset] = half
        if half.transaction_id:
            self._by_id[(half.producer_group, half.transaction_id)] = commit_log_offset

    def _forget(self, half: HalfMessage) -> None:
        key = (half.producer_group, half.transaction_id)
        if self._by_id.get(key) == half.commit_log_offset:
            del self._by_id[key]

    def find(self, producer_group: str, transaction_id: str) -> HalfMessage | None:
        """The undecided half message of ``producer_group`` whose transaction id is
        ``transaction_id`` (one given up on after ``transactionCheckMax`` checks included)."""
        offset = self._by_id.get((producer_group, transaction_id))
        if offset is None:
            return None
        return self.pending.get(offset) or self.discarded.get(offset)

    # -- decisions ------------------------------------------------------------------------

    def decide(
        self,
        *,
        commit_log_offset: int,
        queue_offset: int,
        producer_group: str,
        kind: int,
        transaction_id: str = "",
        remark: str | None = None,
    ) -> None:
        """Apply a producer's decision (``kind``: commit or rollback; anything else, and a
        decision on a decided half message, is a no-op); raises :class:`ServerSystemError`
        when the offsets and group do not name a half message."""
        if kind not in (TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE):
            return
        half = self.store.look_message(commit_log_offset)
        if half is None or half.topic != TRANS_HALF_TOPIC:
            raise ServerSystemError("Find prepared transaction message failed")
        if half.properties.get(PropertyKey.PRODUCER_GROUP) != producer_group:
            raise ServerSystemError("The producer group wrong")
        if half.queue_offset != queue_offset:
            raise ServerSystemError("The transaction state table offset wrong")
        if half.commit_log_offset != commit_log_offset:
            raise ServerSystemError("The commit log offset wrong")
        half_state = self.pending.get(commit_log_offset) or self.discarded.get(commit_log_offset)
        if half_state is None:
            log.debug("transaction %s already decided", transaction_id)
            return
        if kind == TRANSACTION_COMMIT_TYPE:
            props = dict(half.properties)
            topic = props.pop(PropertyKey.REAL_TOPIC, "")
            queue_id = int(props.pop(PropertyKey.REAL_QUEUE_ID, "0") or 0)
            props.pop(PropertyKey.TRANSACTION_PREPARED, None)
            msg = self.writer.build(
                topic,
                queue_id,
                half.body,
                props,
                flag=half.flag,
                sys_flag=reset_transaction_type(half.sys_flag, TRANSACTION_COMMIT_TYPE),
                born_timestamp=half.born_timestamp,
                born_host=half.born_host_bytes,
                reconsume_times=half.reconsume_times,
                prepared_transaction_offset=commit_log_offset,
            )
            result = self.writer.put(msg)
            if not result.ok:
                raise ServerSystemError(f"commit failed: {result.status.name}")
            log.debug("transaction %s committed to %s", transaction_id, topic)
        else:
            log.debug("transaction %s rolled back%s", transaction_id, f": {remark}" if remark else "")
        self._forget(half_state)
        if commit_log_offset in self.pending:
            self._settle(half_state)
        else:
            del self.discarded[commit_log_offset]

    def resume(self, commit_log_offset: int) -> None:
        """RESUME_CHECK_HALF_MESSAGE: check a half message again from its first check, as if
        just sent (an operator's second chance for one given up on after
        ``transactionCheckMax`` checks). A copy goes back into the half topic, as Apache
        does, so the resumed half survives a restart like any other."""
        half = self.store.look_message(commit_log_offset)
        if half is None or half.topic != TRANS_HALF_TOPIC:
            raise ServerSystemError("Put message back to RMQ_SYS_TRANS_HALF_TOPIC failed.")
        props = dict(half.properties)
        props[PropertyKey.TRANSACTION_CHECK_TIMES] = "0"
        copy = self.writer.build_copy(half, TRANS_HALF_TOPIC, 0, props)
        result = self.writer.put(copy)
        if not result.ok:
            raise ServerSystemError("Put message back to RMQ_SYS_TRANS_HALF_TOPIC failed.")
        self.on_half_stored(props, result)
        # The copy stands for the original from now on: a decision on either is applied once.
        self.discarded.pop(commit_log_offset, None)
        old = self.pending.get(commit_log_offset)
        if old is not None:
            self._settle(old)
        log.info("half message at %d resumed as %d", commit_log_offset, result.wrote_offset)

    def _settle(self, half: HalfMessage) -> None:
        writer = self.writer
        body = str(half.queue_offset).encode()
        op = writer.build(
            TRANS_OP_HALF_TOPIC, 0, body, {PropertyKey.TAGS: OP_REMOVE_TAG}, born_host=writer.store_host
        )
        writer.put(op)
        del self.pending[half.commit_log_offset]
        settled = min((p.queue_offset for p in self.pending.values()), default=None)
        if settled is None:
            settled = self.store.get_max_offset(TRANS_HALF_TOPIC, 0)
        self.offsets.commit(TRANSACTION_GROUP, TRANS_HALF_TOPIC, 0, settled)

    # -- check-back -----------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._check_periodically())

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _check_periodically(self) -> None:
        interval = self.config.transaction_check_interval / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                self.check()
            except Exception:
                log.exception("transaction check failed")

    def check(self, now_ms: int | None = None) -> None:
        """One round: ask producers about every half message older than its timeout."""
        config = self.config
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        for half in sorted(self.pending.values(), key=lambda p: p.queue_offset):
            timeout = half.immunity_ms or config.transaction_time_out
            if now - half.store_timestamp < timeout:
                continue
            if half.check_times >= config.transaction_check_max:
                log.warning(
                    "transaction at offset %d discarded after %d checks",
                    half.commit_log_offset,
                    half.check_times,
                )
                # A decision that arrives later is still applied (as RocketMQ does).
                self.discarded[half.commit_log_offset] = half
                self._settle(half)
                continue
            msg = self.store.look_message(half.commit_log_offset)
            if msg is None:
                self._forget(half)
                self._settle(half)
                continue
            # A round counts whether or not a producer of the group is online to ask, so the
            # half messages of a group that is gone are discarded in the end.
            half.check_times += 1
            channels = self.producers.producer_channels(half.producer_group)
            if not channels:
                continue
            uniq = msg.properties.get(PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
            offset_msg_id = msg.offset_msg_id
            msg.topic = msg.properties.get(PropertyKey.REAL_TOPIC, msg.topic)
            real_qid = msg.properties.get(PropertyKey.REAL_QUEUE_ID, "0")
            msg.queue_id = int(real_qid) if real_qid.isdigit() else 0
            msg.properties[PropertyKey.TRANSACTION_CHECK_TIMES] = str(half.check_times)
            header = CheckTransactionStateRequestHeader(
                tran_state_table_offset=half.queue_offset,
                commit_log_offset=half.commit_log_offset,
                msg_id=uniq,
                transaction_id=uniq,
                offset_msg_id=offset_msg_id,
            )
            channel = random.choice(channels)
            channel.conn.send_oneway(
                RemotingCommand.request(
                    RequestCode.CHECK_TRANSACTION_STATE, header.to_fields(), encode_message_ext(msg)
                )
            )
