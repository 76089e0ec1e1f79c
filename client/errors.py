"""The exceptions an SDK user can catch.

Everything derives from :class:`aiorocketmq.protocol.errors.MQError`: broker answers map to
:class:`BrokerError` subclasses by response code, transport failures are
:class:`RemotingError` (timeouts, closed connections), and problems the SDK detects itself
are :class:`ClientError` — among them :class:`NoRouteError` and :class:`ClientStateError`
(a call the object's state does not allow, such as sending before ``start()``).
"""

from __future__ import annotations

from aiorocketmq.protocol.errors import (
    BrokerError,
    ClientError,
    ConnectionClosedError,
    MQError,
    NoRouteError,
    RemotingError,
    RequestTimeoutError,
    TopicNotExistError,
)

__all__ = [
    "BrokerError",
    "ClientError",
    "ClientStateError",
    "ConnectionClosedError",
    "MQError",
    "NoRouteError",
    "RemotingError",
    "RequestTimeoutError",
    "SendFailedError",
    "TopicNotExistError",
]


class ClientStateError(ClientError):
    """The call is not allowed in the object's current state (not started, shut down, ...)."""


class SendFailedError(ClientError):
    """Every attempt of a send failed; ``__cause__`` is the last attempt's error and
    ``errors`` holds one error per attempt."""

    def __init__(self, message: str, errors: list[BaseException]) -> None:
        super().__init__(message)
        self.errors = errors
