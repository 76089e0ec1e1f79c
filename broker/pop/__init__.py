"""POP consumption (RocketMQ 5.x) on the broker's 4.x-style store: :class:`PopService`
(receive / ack / change invisible time / dead-letter, redelivery, orderly pops, recovery) and
its remoting handlers. The gRPC front calls the same service."""

from .service import (
    InvalidReceiptHandleError,
    PollingFullError,
    PopError,
    PoppedMessage,
    PopResult,
    PopService,
    ReceiptHandleExpiredError,
)

__all__ = [
    "InvalidReceiptHandleError",
    "PollingFullError",
    "PopError",
    "PopResult",
    "PopService",
    "PoppedMessage",
    "ReceiptHandleExpiredError",
]
