"""POP consumption (RocketMQ 5.x) on the broker's 4.x-style store: :class:`PopService`
(receive / ack / change invisible time / dead-letter, redelivery, orderly pops, recovery) and
its remoting handlers. The gRPC front calls the same service. :mod:`.service` lists the
modules the service is made of."""

from .errors import InvalidReceiptHandleError, PollingFullError, PopError, ReceiptHandleExpiredError
from .receive import PoppedMessage, PopResult
from .service import PopService

__all__ = [
    "InvalidReceiptHandleError",
    "PollingFullError",
    "PopError",
    "PopResult",
    "PopService",
    "PoppedMessage",
    "ReceiptHandleExpiredError",
]
