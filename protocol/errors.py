"""The exception tree shared by every process and the SDK.

One root, :class:`MQError`. Under it:

* :class:`ProtocolError`: bytes or fields that do not follow the wire contract;
* :class:`RemotingError`: the transport failed (connection closed, request timed out);
* :class:`BrokerError`: a peer answered with a non-success response code. Each response code a
  caller can see maps to exactly one subclass through :func:`error_for_code`, so callers catch
  ``TopicNotExistError`` instead of comparing numbers;
* :class:`ClientError`: failures the SDK detects on its own side (no route, bad arguments).

Each class says whether trying again may succeed (``retriable``): a producer retries a failed
send only for errors whose class says so.
"""

from __future__ import annotations

from typing import ClassVar, TypeVar

from .codes import ResponseCode


class MQError(Exception):
    """Root of every error raised by this project."""

    #: Whether the same request may succeed if tried again (on another broker, or later).
    retriable: ClassVar[bool] = False


class ProtocolError(MQError):
    """A frame, header or body that violates the remoting protocol."""


class RemotingError(MQError):
    """The transport could not complete a request."""

    retriable = True


class ConnectionClosedError(RemotingError):
    """The connection closed (or could not be opened) before the response arrived."""


class RequestTimeoutError(RemotingError, TimeoutError):
    """No response arrived within the request's timeout."""


class ClientError(MQError):
    """An error detected by the SDK itself, before or without asking a server."""


class NoRouteError(ClientError):
    """No name server knows a route for the topic, or the route has no usable queue."""

    retriable = True


class BrokerError(MQError):
    """A peer answered with a non-success response code; ``remark`` holds its reason."""

    code: int = -1

    def __init__(self, remark: str | None = None, *, code: int | None = None) -> None:
        if code is not None:
            self.code = code
        self.remark = remark or ""
        super().__init__(self.remark)

    def __str__(self) -> str:
        try:
            name = ResponseCode(self.code).name
        except ValueError:
            name = f"CODE_{self.code}"
        return f"{name}({self.code}): {self.remark}" if self.remark else f"{name}({self.code})"


_REGISTRY: dict[int, type[BrokerError]] = {}


_E = TypeVar("_E", bound=type[BrokerError])


def _register(cls: _E) -> _E:
    _REGISTRY[cls.code] = cls
    return cls


@_register
class ServerSystemError(BrokerError):
    code = ResponseCode.SYSTEM_ERROR
    retriable = True


@_register
class SystemBusyError(BrokerError):
    code = ResponseCode.SYSTEM_BUSY
    retriable = True


@_register
class RequestCodeNotSupportedError(BrokerError):
    code = ResponseCode.REQUEST_CODE_NOT_SUPPORTED


@_register
class TransactionFailedError(BrokerError):
    code = ResponseCode.TRANSACTION_FAILED


@_register
class FlushDiskTimeoutError(BrokerError):
    code = ResponseCode.FLUSH_DISK_TIMEOUT


@_register
class SlaveNotAvailableError(BrokerError):
    code = ResponseCode.SLAVE_NOT_AVAILABLE


@_register
class FlushSlaveTimeoutError(BrokerError):
    code = ResponseCode.FLUSH_SLAVE_TIMEOUT


@_register
class MessageIllegalError(BrokerError):
    code = ResponseCode.MESSAGE_ILLEGAL


@_register
class ServiceNotAvailableError(BrokerError):
    code = ResponseCode.SERVICE_NOT_AVAILABLE
    retriable = True


@_register
class VersionNotSupportedError(BrokerError):
    code = ResponseCode.VERSION_NOT_SUPPORTED


@_register
class NoPermissionError(BrokerError):
    code = ResponseCode.NO_PERMISSION
    retriable = True


@_register
class TopicNotExistError(BrokerError):
    code = ResponseCode.TOPIC_NOT_EXIST
    retriable = True


@_register
class TopicExistAlreadyError(BrokerError):
    code = ResponseCode.TOPIC_EXIST_ALREADY


@_register
class PullNotFoundError(BrokerError):
    code = ResponseCode.PULL_NOT_FOUND


@_register
class PullRetryImmediatelyError(BrokerError):
    code = ResponseCode.PULL_RETRY_IMMEDIATELY


@_register
class PullOffsetMovedError(BrokerError):
    code = ResponseCode.PULL_OFFSET_MOVED


@_register
class QueryNotFoundError(BrokerError):
    code = ResponseCode.QUERY_NOT_FOUND


@_register
class SubscriptionParseFailedError(BrokerError):
    code = ResponseCode.SUBSCRIPTION_PARSE_FAILED


@_register
class SubscriptionNotExistError(BrokerError):
    code = ResponseCode.SUBSCRIPTION_NOT_EXIST


@_register
class SubscriptionNotLatestError(BrokerError):
    code = ResponseCode.SUBSCRIPTION_NOT_LATEST


@_register
class SubscriptionGroupNotExistError(BrokerError):
    code = ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST


@_register
class FilterDataNotExistError(BrokerError):
    code = ResponseCode.FILTER_DATA_NOT_EXIST


@_register
class FilterDataNotLatestError(BrokerError):
    code = ResponseCode.FILTER_DATA_NOT_LATEST


@_register
class InvalidParameterError(BrokerError):
    code = ResponseCode.INVALID_PARAMETER


@_register
class NotLeaderForQueueError(BrokerError):
    """RocketMQ 5 static topics: the broker does not lead that global queue (it was remapped
    since the route was read); another queue serves, and a fresh route names the new leader."""

    code = ResponseCode.NOT_LEADER_FOR_QUEUE
    retriable = True


@_register
class TransactionStateGroupWrongError(BrokerError):
    code = ResponseCode.TRANSACTION_STATE_GROUP_WRONG


@_register
class NoBuyerIdError(BrokerError):
    code = ResponseCode.NO_BUYER_ID
    retriable = True


@_register
class NotInCurrentUnitError(BrokerError):
    code = ResponseCode.NOT_IN_CURRENT_UNIT
    retriable = True


@_register
class ConsumerNotOnlineError(BrokerError):
    code = ResponseCode.CONSUMER_NOT_ONLINE


@_register
class ConsumeMessageTimeoutError(BrokerError):
    code = ResponseCode.CONSUME_MSG_TIMEOUT


@_register
class NoMessageError(BrokerError):
    code = ResponseCode.NO_MESSAGE


@_register
class FlowControlError(BrokerError):
    code = ResponseCode.FLOW_CONTROL


def error_for_code(code: int, remark: str | None = None) -> BrokerError:
    """The exception instance for a response ``code``; unknown codes get a plain BrokerError."""
    cls = _REGISTRY.get(code)
    if cls is None:
        return BrokerError(remark, code=code)
    return cls(remark)


def error_class(code: int) -> type[BrokerError]:
    """The exception class registered for ``code`` (``BrokerError`` when none is)."""
    return _REGISTRY.get(code, BrokerError)
