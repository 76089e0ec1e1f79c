"""Compiled with mypyc (aiorocketmq/compiled.py, which lists the rules): declared, typed
attributes only; no monkeypatching, setattr or frame tricks; no await in except/finally.

Accepting a message a producer sends, for every front: the remoting handlers
(broker/handlers/send.py) and the gRPC front (broker/grpc/) unpack their requests into plain
values and call :class:`Acceptor`:

- :meth:`Acceptor.topic_for_send`: the broker and the topic take sends now (writable, not a
  system topic closed to producers), and the topic exists or is created (``autoCreateTopicEnable``;
  a retry topic always);
- :meth:`Acceptor.accept`: one message checked (body and properties sizes), routed (a send to
  a retry topic past its group's retries goes to the dead-letter topic; a delay level or
  delivery time parks it; a transactional one waits as a half message) and stored, with the
  broker's own properties (region, trace switch, cluster) added as RocketMQ 5 stores them.

What was stored comes back as :class:`Accepted`; a refusal raises the :class:`BrokerError` of
its response code, which each front turns into its own answer. How long a producer waits for
its message to be flushed or replicated (``WAIT``) is the front's: the remoting handler answers
from the flush's callback, the gRPC front awaits ``MessageStore.wait_stored``.
"""

from __future__ import annotations

from collections.abc import Awaitable

from aiorocketmq.broker.store import MessageStore, PutResult, PutStatus, StoreMessage
from aiorocketmq.protocol.body import TopicConfig
from aiorocketmq.protocol.codes import PERM_READ_WRITE, Perm, ResponseCode, reset_transaction_type
from aiorocketmq.protocol.errors import (
    BrokerError,
    InvalidParameterError,
    MessageIllegalError,
    NoPermissionError,
    SubscriptionGroupNotExistError,
    TopicNotExistError,
    error_for_code,
)
from aiorocketmq.protocol.message import (
    MAX_PROPERTIES_LENGTH,
    PROPERTY_SEPARATOR,
    PropertyKey,
    stored_properties,
)
from aiorocketmq.protocol.names import (
    NOT_ALLOWED_SEND_TOPICS,
    TIMER_OUT_MS,
    TIMER_TOPIC,
    TRANS_HALF_TOPIC,
    dlq_topic,
    group_of_retry_topic,
    is_retry_topic,
    topic_name_problem,
)
from aiorocketmq.protocol.recall import RecallHandle

from .config import BrokerConfig
from .groups import GroupTable
from .topics import TopicTable
from .transactions import TransactionService
from .writer import MessageWriter

#: The response code of each way a put ends.
STATUS_CODES = {
    PutStatus.PUT_OK: ResponseCode.SUCCESS,
    PutStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    PutStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
}
_CLUSTER = PropertyKey.CLUSTER
_REGION = PropertyKey.MSG_REGION
_TRACE_SWITCH = PropertyKey.TRACE_SWITCH
_WAIT = PropertyKey.WAIT_STORE_MSG_OK
_DELAY = PropertyKey.DELAY_TIME_LEVEL
_TRAN_MSG = PropertyKey.TRANSACTION_PREPARED
_RECONSUME_TIME = PropertyKey.RECONSUME_TIME
#: Dead-letter topics are readable, so operators can consume and replay them (Java 4.9).
DLQ_PERM = PERM_READ_WRITE
_PERM_WRITE = int(Perm.WRITE)


def put_failed(result: PutResult) -> BrokerError:
    """The error a send answers when the store did not take its message."""
    code = STATUS_CODES.get(result.status, ResponseCode.SYSTEM_ERROR)
    if result.remark:  # the store's own words (a full disk: where, and how full)
        return error_for_code(code, result.remark)
    if result.status == PutStatus.OS_PAGECACHE_BUSY:
        return error_for_code(code, "[PC_SYNCHRONIZED]broker busy")
    return error_for_code(code, f"put message failed: {result.status.name}")


class Accepted:
    """A message the broker stored: the put's result, the queue the producer's message went to
    (a half message's real queue), whether its producer waits for it to be flushed or
    replicated (``WAIT``), a timer message's recall handle, and a half message's transaction id
    (its unique id, as Apache 5.3.3's SendMessageProcessor answers ``transactionId``)."""

    def __init__(
        self,
        result: PutResult,
        queue_id: int,
        wait: bool,
        recall: str | None,
        transaction_id: str | None = None,
    ) -> None:
        self.result = result
        self.queue_id = queue_id
        self.wait = wait
        self.recall = recall
        self.transaction_id = transaction_id


class Acceptor:
    """Accepts producers' messages into the store (module doc)."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        store: MessageStore,
        topics: TopicTable,
        groups: GroupTable,
        writer: MessageWriter,
        transactions: TransactionService,
        max_message_size: int,
    ) -> None:
        self.config = config
        self.store = store
        self.topics = topics
        self.groups = groups
        self.writer = writer
        self.transactions = transactions
        self.max_body = max_message_size
        self.region = config.region_id
        self.trace_on = "true" if config.trace_on else "false"
        self.cluster = config.broker_cluster_name
        # What RocketMQ 5 stores in every sent message besides the producer's properties: the
        # broker's region and trace switch (a 5.x client's consumer trace needs the region) and
        # the cluster. Java puts the first two into the request's properties before storing,
        # so a producer's own values are replaced.
        self.broker_properties = {_REGION: self.region, _TRACE_SWITCH: self.trace_on, _CLUSTER: self.cluster}
        # Ending with the separator, as a RocketMQ 5 broker stores every properties string.
        self.broker_suffix = stored_properties(self.broker_properties)

    def topic_for_send(
        self, topic: str, default_topic: str, default_queue_nums: int, unit_mode: bool = False
    ) -> TopicConfig:
        """The config of ``topic`` if this broker takes sends to it now: the broker and the
        topic are writable, the topic is not a system topic closed to producers, and it exists
        or is created (``autoCreateTopicEnable`` and ``default_topic``; a retry topic always)."""
        config = self.config
        if not config.writable:
            raise NoPermissionError(f"the broker[{config.broker_ip1}] sending message is forbidden")
        if topic in NOT_ALLOWED_SEND_TOPICS:
            raise NoPermissionError(f"Sending message to topic[{topic}] is forbidden.")
        topic_config = self.topics.get(topic)
        if topic_config is None:
            # Names in the topic table were validated when they were created.
            problem = topic_name_problem(topic)
            if problem is not None:
                raise InvalidParameterError(problem)
            if is_retry_topic(topic):
                topic_config = self.topics.ensure(topic, 1, PERM_READ_WRITE)
            else:
                topic_config = self.topics.create_on_send(topic, default_topic, default_queue_nums, unit_mode)
            if topic_config is None:
                raise TopicNotExistError(
                    f"topic[{topic}] not exist, apply first please! "
                    "See https://rocketmq.apache.org/docs/bestPractice/06FAQ"
                )
        if not topic_config.perm & _PERM_WRITE:
            raise NoPermissionError(f"the topic[{topic}] sending message is forbidden")
        return topic_config

    def accept(
        self,
        topic: str,
        queue_id: int,
        body: bytes,
        props: dict[str, str],
        raw: str | None,
        *,
        flag: int,
        sys_flag: int,
        born_timestamp: int,
        born_host: bytes,
        reconsume_times: int | None,
        max_reconsume_times: int | None,
    ) -> Accepted | Awaitable[Accepted]:
        """Store one message a producer sent to ``topic``/``queue_id`` (checked by
        :meth:`topic_for_send`): ``props`` are its properties (changed here), ``raw`` the same
        in wire form when the producer sent them so (None otherwise). A send to a retry topic
        that was retried its group's times goes to the dead-letter topic; a delay level or
        delivery time parks it; a transactional one waits as a half message. Raises the
        refusal's :class:`BrokerError`; what was stored, or that once the queue's next file
        is made (``MessageStore.room_pending``)."""
        if len(body) > self.max_body:
            raise MessageIllegalError(
                f"the message body size {len(body)} bytes is over the maximum {self.max_body}"
            )
        retry = is_retry_topic(topic)
        if retry:
            topic, queue_id = self._retry_or_dlq(topic, queue_id, props, reconsume_times, max_reconsume_times)
        wait = props.get(_WAIT) != "false"
        # The producer set none of the broker's properties (the usual case): they can be
        # appended to its string as they are.
        appendable = _REGION not in props and _TRACE_SWITCH not in props and _CLUSTER not in props
        props.update(self.broker_properties)
        transactional = props.get(_TRAN_MSG) == "true"
        encoded: str | None = None
        if transactional:
            if self.config.reject_transaction_message:
                raise NoPermissionError(
                    f"the broker[{self.config.broker_ip1}] sending transaction message is forbidden"
                )
            props[PropertyKey.REAL_TOPIC] = topic
            props[PropertyKey.REAL_QUEUE_ID] = str(queue_id)
            sys_flag = reset_transaction_type(sys_flag, 0)
        elif not retry and appendable and raw is not None:
            # Append the broker's properties to the string the producer sent instead of
            # encoding them all again.
            encoded = (
                f"{raw}{self.broker_suffix}"
                if raw.endswith(PROPERTY_SEPARATOR) or not raw
                else (f"{raw}{PROPERTY_SEPARATOR}{self.broker_suffix}")
            )
        msg = self.writer.build(
            # A half message waits in the half topic; the queue the producer chose is in
            # REAL_QID and in the answer (its delay, if any, applies once it is committed).
            TRANS_HALF_TOPIC if transactional else topic,
            0 if transactional else queue_id,
            body,
            props,
            flag=flag,
            sys_flag=sys_flag,
            born_timestamp=born_timestamp,
            born_host=born_host,
            reconsume_times=reconsume_times or 0,
            encoded=encoded,
        )
        if len(msg.properties) > MAX_PROPERTIES_LENGTH:
            raise MessageIllegalError(
                f"the message properties size {len(msg.properties)} is over the maximum {MAX_PROPERTIES_LENGTH}"
            )
        room = self.store.room_pending(msg.topic, msg.queue_id, 1)
        if room is not None:
            return room.defer(lambda: self._put_one(msg, props, transactional, queue_id, wait))
        return self._put_one(msg, props, transactional, queue_id, wait)

    def _put_one(
        self, msg: StoreMessage, props: dict[str, str], transactional: bool, queue_id: int, wait: bool
    ) -> Accepted:
        result = self.writer.put(msg)
        if not result.ok:
            raise put_failed(result)
        transaction_id = None
        if transactional:
            self.transactions.on_half_stored(props, result)
            transaction_id = props.get(PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        recall = None
        if msg.topic == TIMER_TOPIC:
            recall = self._recall_handle(props)
        return Accepted(result, queue_id, wait, recall, transaction_id)

    def _recall_handle(self, props: dict[str, str]) -> str | None:
        """RocketMQ 5: a timer message's handle for RECALL_MESSAGE (not for a retry topic's)."""
        topic, due = props.get(PropertyKey.REAL_TOPIC), props.get(TIMER_OUT_MS)
        if not topic or not due or is_retry_topic(topic):
            return None
        unique = props.get(PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, "")
        return RecallHandle(topic, self.config.broker_name, str(int(due) + 1), unique).encode()

    def _retry_or_dlq(
        self,
        topic: str,
        queue_id: int,
        props: dict[str, str],
        reconsume_times: int | None,
        max_reconsume_times: int | None,
    ) -> tuple[str, int]:
        """A producer's own re-send to ``%RETRY%group``: off to the DLQ once it has been
        retried ``maxReconsumeTimes`` times (the producer's own limit where it sent one)."""
        group_name = group_of_retry_topic(topic)
        group = self.groups.find(group_name)
        if group is None:
            raise SubscriptionGroupNotExistError(f"the retry group {group_name!r} does not exist")
        max_times = group.retry_max_times if max_reconsume_times is None else max_reconsume_times
        reconsume = reconsume_times
        if reconsume is None:
            raw = props.get(_RECONSUME_TIME)
            reconsume = int(raw) if raw and raw.isdigit() else 0
        if reconsume < max_times:
            return topic, queue_id
        props.pop(_DELAY, None)
        dlq = dlq_topic(group_name)
        self.topics.ensure(dlq, 1, DLQ_PERM)
        return dlq, 0
