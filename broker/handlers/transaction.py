"""END_TRANSACTION (37): a producer commits or rolls back a half message (also in answer to
the broker's CHECK_TRANSACTION_STATE); RESUME_CHECK_HALF_MESSAGE (323): an operator has one
checked again from the start (``mqadmin resumeCheckHalfMessage``)."""

from __future__ import annotations

from aiorocketmq.protocol.codes import MASTER_ID, RequestCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import ProtocolError, ServerSystemError, SlaveNotAvailableError
from aiorocketmq.protocol.headers import EndTransactionRequestHeader
from aiorocketmq.protocol.message import decode_offset_msg_id
from aiorocketmq.protocol.transport import Connection, Handler

from ..config import BrokerConfig
from ..transactions import TransactionService


class TransactionHandlers:
    def __init__(self, config: BrokerConfig, transactions: TransactionService) -> None:
        self.config = config
        self.transactions = transactions

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.END_TRANSACTION: self.end_transaction,
            RequestCode.RESUME_CHECK_HALF_MESSAGE: self.resume_check,
        }

    def end_transaction(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = EndTransactionRequestHeader.from_fields(cmd.ext_fields)
        if self.config.broker_id != MASTER_ID:
            raise SlaveNotAvailableError("a slave does not accept transaction decisions")
        self.transactions.decide(
            commit_log_offset=h.commit_log_offset,
            queue_offset=h.tran_state_table_offset,
            producer_group=h.producer_group,
            kind=h.commit_or_rollback,
            transaction_id=h.transaction_id or h.msg_id or "",
            remark=cmd.remark,
        )
        return cmd.response()

    def resume_check(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        msg_id = (cmd.ext_fields or {}).get("msgId")
        try:
            _host, offset = decode_offset_msg_id(str(msg_id or ""))
        except ProtocolError:
            raise ServerSystemError(f"{msg_id!r} is not an offset message id") from None
        self.transactions.resume(offset)
        return cmd.response()
