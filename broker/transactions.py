"""Transactional messages on the broker: half messages wait in ``RMQ_SYS_TRANS_HALF_TOPIC``
until their producer commits or rolls back (END_TRANSACTION); a decision writes an op record
to ``RMQ_SYS_TRANS_OP_HALF_TOPIC``. Half messages left undecided past ``transactionTimeOut``
are checked back with CHECK_TRANSACTION_STATE on a live connection of their producer group,
every ``transactionCheckInterval``, at most ``transactionCheckMax`` times.

Open half messages are rebuilt from the two topics at start-up, so a restart loses none.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiorocketmq.protocol.codes import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    RequestCode,
    ResponseCode,
    reset_transaction_type,
)
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from aiorocketmq.protocol.loop import cancel_and_wait
from aiorocketmq.protocol.message import MessageExt, PropertyKey, encode_message_ext

from .topics import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC

if TYPE_CHECKING:
    from aiorocketmq.broker.store import PutResult

    from .server import Broker

log = logging.getLogger(__name__)

#: Internal group under which the broker records how far the half topic is settled.
TRANSACTION_GROUP = "CID_RMQ_SYS_TRANS"
OP_REMOVE_TAG = "d"


@dataclass(slots=True)
class HalfMessage:
    queue_offset: int
    commit_log_offset: int
    store_timestamp: int
    producer_group: str
    immunity_ms: int = 0
    check_times: int = 0


class TransactionService:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.pending: dict[int, HalfMessage] = {}
        #: Half messages given up on after ``transactionCheckMax`` checks, by commit-log
        #: offset: their producer may still decide (kept until a restart).
        self.discarded: dict[int, HalfMessage] = {}
        self._task: asyncio.Task[None] | None = None

    # -- state ----------------------------------------------------------------------------

    async def load(self) -> None:
        """Rebuild the open half messages from the half and op topics."""
        store = self.broker.store
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
            self.broker.offsets.query(TRANSACTION_GROUP, TRANS_HALF_TOPIC, 0),
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
        props = msg.properties
        immunity = props.get(PropertyKey.CHECK_IMMUNITY_TIME_IN_SECONDS, "")
        self.pending[msg.commit_log_offset] = HalfMessage(
            queue_offset=msg.queue_offset,
            commit_log_offset=msg.commit_log_offset,
            store_timestamp=msg.store_timestamp,
            producer_group=props.get(PropertyKey.PRODUCER_GROUP, ""),
            immunity_ms=int(immunity) * 1000 if immunity.isdigit() else 0,
        )

    def on_half_stored(self, properties: dict[str, str], result: PutResult) -> None:
        immunity = properties.get(PropertyKey.CHECK_IMMUNITY_TIME_IN_SECONDS, "")
        self.pending[result.wrote_offset] = HalfMessage(
            queue_offset=result.queue_offset,
            commit_log_offset=result.wrote_offset,
            store_timestamp=result.store_timestamp or time.time_ns() // 1_000_000,
            producer_group=properties.get(PropertyKey.PRODUCER_GROUP, ""),
            immunity_ms=int(immunity) * 1000 if immunity.isdigit() else 0,
        )

    # -- decisions ------------------------------------------------------------------------

    def end(self, h: EndTransactionRequestHeader, remark: str | None) -> tuple[int, str | None]:
        """Apply a producer's decision; returns the response code and remark."""
        kind = h.commit_or_rollback
        if kind not in (TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE):
            return ResponseCode.SUCCESS, None
        broker = self.broker
        half = broker.store.look_message(h.commit_log_offset)
        if half is None or half.topic != TRANS_HALF_TOPIC:
            return ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed"
        if half.properties.get(PropertyKey.PRODUCER_GROUP) != h.producer_group:
            return ResponseCode.SYSTEM_ERROR, "The producer group wrong"
        if half.queue_offset != h.tran_state_table_offset:
            return ResponseCode.SYSTEM_ERROR, "The transaction state table offset wrong"
        if half.commit_log_offset != h.commit_log_offset:
            return ResponseCode.SYSTEM_ERROR, "The commit log offset wrong"
        half_state = self.pending.get(h.commit_log_offset) or self.discarded.get(h.commit_log_offset)
        if half_state is None:
            log.debug("transaction %s already decided", h.transaction_id or h.msg_id)
            return ResponseCode.SUCCESS, None
        if kind == TRANSACTION_COMMIT_TYPE:
            props = dict(half.properties)
            topic = props.pop(PropertyKey.REAL_TOPIC, "")
            queue_id = int(props.pop(PropertyKey.REAL_QUEUE_ID, "0") or 0)
            props.pop(PropertyKey.TRANSACTION_PREPARED, None)
            props.pop(PropertyKey.TRANSACTION_CHECK_TIMES, None)
            msg = broker.build_message(
                topic,
                queue_id,
                half.body,
                props,
                flag=half.flag,
                sys_flag=reset_transaction_type(half.sys_flag, TRANSACTION_COMMIT_TYPE),
                born_timestamp=half.born_timestamp,
                born_host=half.born_host_bytes,
                reconsume_times=half.reconsume_times,
                prepared_transaction_offset=h.commit_log_offset,
            )
            result = broker.put(msg)
            if not result.ok:
                return ResponseCode.SYSTEM_ERROR, f"commit failed: {result.status.name}"
            log.debug("transaction %s committed to %s", h.transaction_id or h.msg_id, topic)
        else:
            log.debug(
                "transaction %s rolled back%s", h.transaction_id or h.msg_id, f": {remark}" if remark else ""
            )
        if h.commit_log_offset in self.pending:
            self._settle(half_state)
        else:
            del self.discarded[h.commit_log_offset]
        return ResponseCode.SUCCESS, None

    def _settle(self, half: HalfMessage) -> None:
        broker = self.broker
        body = str(half.queue_offset).encode()
        op = broker.build_message(
            TRANS_OP_HALF_TOPIC, 0, body, {PropertyKey.TAGS: OP_REMOVE_TAG}, born_host=broker.store_host
        )
        broker.put(op)
        del self.pending[half.commit_log_offset]
        settled = min((p.queue_offset for p in self.pending.values()), default=None)
        if settled is None:
            settled = broker.store.get_max_offset(TRANS_HALF_TOPIC, 0)
        broker.offsets.commit(TRANSACTION_GROUP, TRANS_HALF_TOPIC, 0, settled)

    # -- check-back -----------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._check_periodically())

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _check_periodically(self) -> None:
        interval = self.broker.config.transaction_check_interval / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                self.check()
            except Exception:
                log.exception("transaction check failed")

    def check(self) -> None:
        """One round: ask producers about every half message older than its timeout."""
        broker = self.broker
        config = broker.config
        now = time.time_ns() // 1_000_000
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
            msg = broker.store.look_message(half.commit_log_offset)
            if msg is None:
                self._settle(half)
                continue
            # A round counts whether or not a producer of the group is online to ask, so the
            # half messages of a group that is gone are discarded in the end.
            half.check_times += 1
            channels = broker.clients.producer_channels(half.producer_group)
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
