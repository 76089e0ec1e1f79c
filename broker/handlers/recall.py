"""RECALL_MESSAGE (370, RocketMQ 5): a producer cancels a timer message before its delivery
time with the recall handle its send returned (the checks: :mod:`..recall`)."""

from __future__ import annotations

from aiorocketmq.protocol.codes import RequestCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.transport import Connection, Handler

from ..config import BrokerConfig
from ..recall import IllegalOperationError, Recaller
from ..writer import born_host

__all__ = ["IllegalOperationError", "RecallHandlers"]


class RecallHandlers:
    def __init__(self, config: BrokerConfig, *, recaller: Recaller) -> None:
        self.config = config
        self.recaller = recaller

    def handlers(self) -> dict[int, Handler]:
        return {RequestCode.RECALL_MESSAGE: self.recall}

    def recall(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        fields = cmd.ext_fields or {}
        message_id = self.recaller.recall(
            str(fields.get("topic") or ""),
            str(fields.get("recallHandle") or ""),
            producer_group=str(fields.get("producerGroup") or ""),
            born_host=born_host(conn),
        )
        return cmd.response(ext_fields={"msgId": message_id, "MSG_REGION": self.config.region_id})
