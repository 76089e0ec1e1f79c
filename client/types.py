"""The SDK's small value types: send and pull results, consume results, where a new consumer
group starts, transaction states, who a broker address is, and where a producer or consumer is
in its life."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, IntEnum, StrEnum

from aiorocketmq.protocol.body import ConsumeFromWhere, MessageModel, MessageQueue
from aiorocketmq.protocol.codes import ResponseCode
from aiorocketmq.protocol.message import MessageExt

__all__ = [
    "BrokerIdentity",
    "ConsumeFrom",
    "ConsumeResult",
    "MessageModel",
    "MessageQueue",
    "PullResult",
    "PullStatus",
    "SendResult",
    "SendStatus",
    "ServiceState",
    "TransactionSendResult",
    "TransactionState",
]


class ServiceState(Enum):
    """The life of a producer or consumer: created, then started once, then shut down once."""

    CREATED = "created"
    STARTING = "starting"
    RUNNING = "running"
    SHUTTING_DOWN = "shutting down"
    SHUT_DOWN = "shut down"


class SendStatus(StrEnum):
    """How a broker stored a message (the response codes a send still counts as stored)."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


#: Response code -> status, for the codes that mean "stored" (anything else is an error).
SEND_STATUS_BY_CODE: dict[int, SendStatus] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


@dataclass(frozen=True, slots=True)
class SendResult:
    """What a synchronous send returns.

    ``msg_id`` is the client-generated unique id (``UNIQ_KEY``; for a batch, the ids joined
    by commas, as Java shows them); ``offset_msg_id`` is the broker's id, which encodes where
    the record is stored. A timer message (one with a delivery time) also has a
    ``recall_handle`` that cancels it until then.
    """

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    transaction_id: str | None = None
    #: A timer message's handle for :meth:`Producer.recall` (RocketMQ 5 brokers; None otherwise).
    recall_handle: str | None = None


class TransactionState(Enum):
    """The outcome of a local transaction (Java ``LocalTransactionState``)."""

    COMMIT = 8
    ROLLBACK = 12
    UNKNOWN = 0


@dataclass(frozen=True, slots=True)
class TransactionSendResult:
    """A half message's send result plus what the local transaction decided."""

    send_result: SendResult
    state: TransactionState


class ConsumeResult(Enum):
    """What a listener returns for a batch of messages.

    ``SUCCESS`` acknowledges the batch; ``RECONSUME_LATER`` sends it back for a later retry
    (concurrent mode); ``SUSPEND`` (orderly mode only) pauses the queue for a moment and
    consumes the same batch again, keeping the order.
    """

    SUCCESS = "SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"
    SUSPEND = "SUSPEND"


class ConsumeFrom(StrEnum):
    """Where a consumer group with no committed offset starts reading a queue."""

    LAST_OFFSET = "LAST_OFFSET"
    FIRST_OFFSET = "FIRST_OFFSET"
    TIMESTAMP = "TIMESTAMP"

    @property
    def wire(self) -> ConsumeFromWhere:
        return _CONSUME_FROM_WIRE[self]


_CONSUME_FROM_WIRE = {
    ConsumeFrom.LAST_OFFSET: ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
    ConsumeFrom.FIRST_OFFSET: ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    ConsumeFrom.TIMESTAMP: ConsumeFromWhere.CONSUME_FROM_TIMESTAMP,
}


class PullStatus(IntEnum):
    """The outcome of one pull (Java ``PullStatus``), keyed by the broker's response code."""

    FOUND = ResponseCode.SUCCESS
    NO_NEW_MSG = ResponseCode.PULL_NOT_FOUND
    NO_MATCHED_MSG = ResponseCode.PULL_RETRY_IMMEDIATELY
    OFFSET_ILLEGAL = ResponseCode.PULL_OFFSET_MOVED


@dataclass(slots=True)
class PullResult:
    """One pull's answer: the messages found (tag-filtered) and where to pull next."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt] = field(default_factory=list)
    suggest_which_broker_id: int = 0


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    """Who a registered broker address is: its cluster, its broker name (shared by a master
    and its slaves) and its broker id (0 for the master)."""

    cluster: str
    broker_name: str
    broker_id: int
