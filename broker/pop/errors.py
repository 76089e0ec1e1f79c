"""The limits a POP request is checked against and the errors it can get back, with the
remoting code each answers with. Their own module because every part of the service raises
them and both fronts (the remoting handlers and the gRPC front) catch them."""

from __future__ import annotations

from aiorocketmq.protocol.errors import BrokerError
from aiorocketmq.protocol.pop import POLLING_FULL

#: Most messages one pop hands out (Apache's limit).
MAX_POP_MESSAGES = 32
#: The longest invisible time a pop or change may ask for (the 5.x proxy's limit).
MAX_INVISIBLE_MS = 12 * 3600 * 1000


class PopError(BrokerError):
    """Base of the errors a POP request can get back."""


class InvalidReceiptHandleError(PopError):
    """The receipt handle does not parse, or names no message this broker handed out."""

    code = 13  # MESSAGE_ILLEGAL on the remoting wire


class ReceiptHandleExpiredError(PopError):
    """The message is no longer in flight under this handle: acked already, or its invisible
    time passed (it is, or soon will be, delivered again)."""

    code = 208  # NO_MESSAGE on the remoting wire, as Apache's broker answers a stale ack


class PollingFullError(PopError):
    """Too many receives are waiting for messages on this broker already."""

    code = POLLING_FULL
