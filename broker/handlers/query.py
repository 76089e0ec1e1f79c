"""Message lookups: QUERY_MESSAGE (12) by key or unique key through the index, and
VIEW_MESSAGE_BY_ID (33) by commit-log offset."""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import QueryMessageRequestHeader, ViewMessageRequestHeader
from protocol.transport import Connection, Handler

if TYPE_CHECKING:
    from ..server import Broker


def handlers(broker: Broker) -> dict[int, Handler]:
    def query_message(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = QueryMessageRequestHeader.from_fields(cmd.ext_fields)
        max_num = broker.config.default_query_max_num if h.unique_key_query else h.max_num
        result = broker.store.query_by_key(h.topic, h.key, max_num, h.begin_timestamp, h.end_timestamp)
        fields = {
            "indexLastUpdateTimestamp": result.index_last_update_timestamp,
            "indexLastUpdatePhyoffset": result.index_last_update_phyoffset,
        }
        if not result.records:
            return cmd.response(
                ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct", fields
            )
        return cmd.response(ext_fields=fields, body=b"".join(result.records))

    def view_message(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = ViewMessageRequestHeader.from_fields(cmd.ext_fields)
        record = broker.store.read_record(h.offset)
        if record is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {h.offset}")
        return cmd.response(body=record)

    return {RequestCode.QUERY_MESSAGE: query_message, RequestCode.VIEW_MESSAGE_BY_ID: view_message}
