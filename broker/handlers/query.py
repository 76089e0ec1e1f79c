"""Message lookups: QUERY_MESSAGE (12) by key or unique key through the index, and
VIEW_MESSAGE_BY_ID (33) by commit-log offset."""

from __future__ import annotations

from aiorocketmq.broker.store import MessageStore
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import ServerSystemError
from aiorocketmq.protocol.headers import QueryMessageRequestHeader, ViewMessageRequestHeader
from aiorocketmq.protocol.transport import Connection, Handler

from ..config import BrokerConfig

#: At most this many messages per QUERY_MESSAGE (RocketMQ's ``maxMsgsNumBatch``) ...
MAX_QUERY_NUM = 64
#: ... and about this many bytes of them.
MAX_QUERY_BYTES = 8 * 1024 * 1024


class QueryHandlers:
    def __init__(self, config: BrokerConfig, store: MessageStore) -> None:
        self.config = config
        self.store = store

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.QUERY_MESSAGE: self.query_message,
            RequestCode.VIEW_MESSAGE_BY_ID: self.view_message,
        }

    def query_message(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = QueryMessageRequestHeader.from_fields(cmd.ext_fields)
        max_num = self.config.default_query_max_num if h.unique_key_query else min(h.max_num, MAX_QUERY_NUM)
        result = self.store.query_by_key(h.topic, h.key, max_num, h.begin_timestamp, h.end_timestamp)
        records: list[bytes] = []
        size = 0
        for record in result.records:
            # Stay well inside a client's frame limit (16 MiB): a bigger answer would cost it
            # the connection and every request in flight on it.
            size += len(record)
            if records and size > MAX_QUERY_BYTES:
                break
            records.append(record)
        fields = {
            "indexLastUpdateTimestamp": result.index_last_update_timestamp,
            "indexLastUpdatePhyoffset": result.index_last_update_phyoffset,
        }
        if records:
            return cmd.response(ext_fields=fields, body=b"".join(records))
        # Not a refusal: the answer still carries how far the index goes.
        return cmd.response(
            ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct", fields
        )

    def view_message(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = ViewMessageRequestHeader.from_fields(cmd.ext_fields)
        record = self.store.read_record(h.offset)
        if record is None:
            raise ServerSystemError(f"can not find message by the offset, {h.offset}")
        return cmd.response(body=record)
