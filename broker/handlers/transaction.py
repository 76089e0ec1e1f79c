"""END_TRANSACTION (37): a producer commits or rolls back a half message (also in answer to
the broker's CHECK_TRANSACTION_STATE)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.headers import EndTransactionRequestHeader
from aiorocketmq.protocol.transport import Connection, Handler

if TYPE_CHECKING:
    from ..server import Broker


def handlers(broker: Broker) -> dict[int, Handler]:
    def end_transaction(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        h = EndTransactionRequestHeader.from_fields(cmd.ext_fields)
        if broker.config.broker_id != 0:
            return cmd.response(
                ResponseCode.SLAVE_NOT_AVAILABLE, "a slave does not accept transaction decisions"
            )
        code, remark = broker.transactions.end(h, cmd.remark)
        return cmd.response(code, remark)

    return {RequestCode.END_TRANSACTION: end_transaction}
