"""Server-side rebalance over remoting (RocketMQ 5): QUERY_ASSIGNMENT (400),
SET_MESSAGE_REQUEST_MODE (401) and GET_ALL_MESSAGE_REQUEST_MODE (402); the allocation itself
is :mod:`aiorocketmq.broker.assignment`'s."""

from __future__ import annotations

import json

from aiorocketmq.protocol import fastjson
from aiorocketmq.protocol.codes import RequestCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import (
    MessageIllegalError,
    NoPermissionError,
    ProtocolError,
    SubscriptionGroupNotExistError,
    TopicNotExistError,
)
from aiorocketmq.protocol.names import is_retry_topic
from aiorocketmq.protocol.transport import Connection, Handler

from ..assignment import Assigner, RequestModeSetting, RequestModeTable
from ..groups import GroupTable
from ..topics import TopicTable


def _json_body(cmd: RemotingCommand, what: str) -> dict[str, object]:
    try:
        data = fastjson.loads(cmd.body or b"")
    except (ProtocolError, ValueError) as exc:
        raise MessageIllegalError(f"the {what} body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise MessageIllegalError(f"the {what} body must be a JSON object")
    return data


def _text(data: dict[str, object], key: str, what: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise MessageIllegalError(f"the {what} body has no {key}")
    return value


class AssignmentHandlers:
    def __init__(
        self, assigner: Assigner, modes: RequestModeTable, *, topics: TopicTable, groups: GroupTable
    ) -> None:
        self.assigner = assigner
        self.modes = modes
        self.topics = topics
        self.groups = groups

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.QUERY_ASSIGNMENT: self.query_assignment,
            RequestCode.SET_MESSAGE_REQUEST_MODE: self.set_mode,
            RequestCode.GET_ALL_MESSAGE_REQUEST_MODE: self.get_all_modes,
        }

    async def query_assignment(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        what = "query assignment"
        data = _json_body(cmd, what)
        found = await self.assigner.assign(
            _text(data, "topic", what),
            _text(data, "consumerGroup", what),
            _text(data, "clientId", what),
            str(data.get("strategyName") or ""),
            str(data.get("messageModel") or ""),
        )
        # Always SUCCESS, as Apache answers: an empty body tells the client to keep its queues.
        body: dict[str, object] = {}
        if found is not None:
            queues, mode = found
            body["messageQueueAssignments"] = [
                {"messageQueue": q.to_wire(), "mode": mode.value} for q in queues
            ]
        return cmd.response(body=json.dumps(body).encode())

    async def set_mode(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            setting = RequestModeSetting.from_wire(_json_body(cmd, "message request mode"))
        except ValueError as exc:
            raise MessageIllegalError(str(exc)) from None
        if is_retry_topic(setting.topic):
            raise NoPermissionError("retry topic is not allowed to set mode")
        if self.topics.get(setting.topic) is None:
            raise TopicNotExistError(f"topic[{setting.topic}] not exist")
        if self.groups.find(setting.consumer_group) is None:  # created on first sight, as Apache
            raise SubscriptionGroupNotExistError("subscription group does not exist")
        await self.modes.put(setting)
        return cmd.response()

    def get_all_modes(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=self.modes.encode())
