"""RocketMQ 5's cold-data flow control requests (2001-2003, ``mqadmin
getColdDataFlowCtrInfo`` / ``updateColdDataFlowCtrGroupConfig`` /
``removeColdDataFlowCtrGroupConfig``) and the commit log's read-ahead mode (2004,
``setCommitLogReadAheadMode``); bodies and answers as Apache 5.3.3's broker has them."""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiorocketmq.protocol.codes import RequestCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import InvalidParameterError, ServerSystemError
from aiorocketmq.protocol.settings import read_properties
from aiorocketmq.protocol.transport import Connection, Handler

from ..cold_data import ColdDataFlowControl

log = logging.getLogger(__name__)

#: The two read-ahead modes (madvise's MADV_NORMAL and MADV_RANDOM).
READ_AHEAD_NORMAL, READ_AHEAD_RANDOM = 0, 1


class ColdDataHandlers:
    def __init__(self, control: ColdDataFlowControl, set_read_ahead: Callable[[bool], None]) -> None:
        """``set_read_ahead(on)`` advises the kernel on every commit-log file."""
        self.control = control
        self._set_read_ahead = set_read_ahead

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.GET_COLD_DATA_FLOW_CTR_INFO: self.info,
            RequestCode.UPDATE_COLD_DATA_FLOW_CTR_CONFIG: self.configure,
            RequestCode.REMOVE_COLD_DATA_FLOW_CTR_CONFIG: self.remove,
            RequestCode.SET_COMMITLOG_READ_MODE: self.read_mode,
        }

    def info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=self.control.info())

    def configure(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """A properties body, ``group=threshold`` per line; a line whose threshold is not a
        number is skipped (and logged), as Apache skips it."""
        try:
            text = cmd.body.decode()
        except UnicodeDecodeError:
            raise ServerSystemError("string2Properties error") from None
        thresholds: dict[str, int] = {}
        for group, value in read_properties(text).items():
            try:
                thresholds[group] = int(value)
            except ValueError:
                log.warning("cold-data threshold of group %s is not a number: %r; skipped", group, value)
        self.control.configure(thresholds)
        log.info("cold-data thresholds set by %s: %s", conn.address, thresholds)
        return cmd.response()

    def remove(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        if cmd.body:
            self.control.remove(cmd.body.decode(errors="replace"))
        return cmd.response()

    def read_mode(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        value = (cmd.ext_fields or {}).get("READ_AHEAD_MODE")
        try:
            mode = int(str(value))
        except ValueError:
            raise ServerSystemError("set commitlog readahead mode param error") from None
        if mode not in (READ_AHEAD_NORMAL, READ_AHEAD_RANDOM):
            raise InvalidParameterError("set commitlog readahead mode param value error")
        self._set_read_ahead(mode == READ_AHEAD_NORMAL)
        return cmd.response()
