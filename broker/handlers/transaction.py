"""END_TRANSACTION (37): a producer commits or rolls back a half message (also in answer to
the broker's CHECK_TRANSACTION_STATE)."""

from __future__ import annotations

from aiorocketmq.protocol.codes import MASTER_ID, RequestCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import SlaveNotAvailableError
from aiorocketmq.protocol.headers import EndTransactionRequestHeader
from aiorocketmq.protocol.transport import Connection, Handler

from ..config import BrokerConfig
from ..transactions import TransactionService


class TransactionHandlers:
    def __init__(self, config: BrokerConfig, transactions: TransactionService) -> None:
        self.config = config
        self.transactions = transactions

    def handlers(self) -> dict[int, Handler]:
        return {RequestCode.END_TRANSACTION: self.end_transaction}

    def end_transaction(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = EndTransactionRequestHeader.from_fields(cmd.ext_fields)
        if self.config.broker_id != MASTER_ID:
            raise SlaveNotAvailableError("a slave does not accept transaction decisions")
        self.transactions.end(h, cmd.remark)
        return cmd.response()
