"""The asyncio client SDK: producers, push and lite-pull consumers, transactions, admin.

::

    from aiorocketmq.client import Producer, PushConsumer, Message, ConsumeResult

    async with Producer("orders-producer", namesrv="127.0.0.1:9876") as producer:
        result = await producer.send(Message("Orders", b"...", tags="paid", keys=["order-42"]))

A small blocking facade for scripts and Spark executors lives in :mod:`aiorocketmq.client.blocking`.
"""

from aiorocketmq.protocol.body import MessageModel, MessageQueue
from aiorocketmq.protocol.message import Message, MessageExt

from .admin import Admin
from .allocation import (
    AllocateStrategy,
    allocate_averagely,
    allocate_averagely_by_circle,
    consistent_hash,
)
from .client_instance import ClientOptions
from .errors import (
    BrokerError,
    ClientError,
    ClientStateError,
    ConnectionClosedError,
    MQError,
    NoRouteError,
    RemotingError,
    RequestTimeoutError,
    SendFailedError,
)
from .lite_pull_consumer import LitePullConsumer
from .producer import Producer, TransactionProducer
from .pull import PullClient
from .push_consumer import PushConsumer
from .request_reply import ReplyTimeoutError, RequestFailedError, create_reply_message
from .signals import SignalStop, stop_on_signals
from .simple_consumer import ReceivedMessage, SimpleConsumer
from .types import (
    BrokerIdentity,
    ConsumeFrom,
    ConsumeResult,
    PullResult,
    PullStatus,
    SendResult,
    SendStatus,
    TransactionSendResult,
    TransactionState,
)

__all__ = [
    "Admin",
    "AllocateStrategy",
    "BrokerError",
    "BrokerIdentity",
    "ClientError",
    "ClientOptions",
    "ClientStateError",
    "ConnectionClosedError",
    "ConsumeFrom",
    "ConsumeResult",
    "LitePullConsumer",
    "MQError",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "NoRouteError",
    "Producer",
    "PullClient",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "ReceivedMessage",
    "RemotingError",
    "ReplyTimeoutError",
    "RequestFailedError",
    "RequestTimeoutError",
    "SendFailedError",
    "SendResult",
    "SendStatus",
    "SignalStop",
    "SimpleConsumer",
    "TransactionProducer",
    "TransactionSendResult",
    "TransactionState",
    "allocate_averagely",
    "allocate_averagely_by_circle",
    "consistent_hash",
    "create_reply_message",
    "stop_on_signals",
]
