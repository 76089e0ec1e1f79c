"""One PULL_MESSAGE round trip, shared by the push consumer, the lite-pull consumer and the
offset-range pull client: build the header, send it to the queue's broker, map the response
code to a :class:`PullStatus`, decode the records and keep only messages whose tag the
subscription names (the broker filters by tag hash, which can collide)."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING, Any

from aiorocketmq.protocol.body import MessageQueue
from aiorocketmq.protocol.codes import PullSysFlag, RequestCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import error_for_code
from aiorocketmq.protocol.headers import PullMessageRequestHeader, PullMessageResponseHeader
from aiorocketmq.protocol.message import MessageExt, decode_records

from .admin import Admin
from .client_instance import ClientOptions, default_instance_name
from .lifecycle import ClientLifecycle
from .subscription import check_group, filter_by_tags, parse_tags, tag_filter
from .types import PullResult, PullStatus

if TYPE_CHECKING:
    from .client_instance import ClientInstance

COMMIT_OFFSET = int(PullSysFlag.COMMIT_OFFSET)
SUSPEND = int(PullSysFlag.SUSPEND)
SUBSCRIPTION = int(PullSysFlag.SUBSCRIPTION)
LITE_PULL = int(PullSysFlag.LITE_PULL)

#: How long a broker holds a pull that found nothing, and how long the client waits for it.
BROKER_SUSPEND_MAX = 15.0
PULL_TIMEOUT_WHEN_SUSPEND = 30.0

#: The only filter type this SDK subscribes with (SQL92 filtering is not supported).
EXPRESSION_TYPE_TAG = "TAG"

_PULL = int(RequestCode.PULL_MESSAGE)
# The wire names of the pull fields that change from one pull to the next, and of the
# response's, taken from the declared models.
_Q = PullMessageRequestHeader
_QUEUE_OFFSET = _Q.wire("queue_offset")
_SYS_FLAG = _Q.wire("sys_flag")
_COMMIT_OFFSET = _Q.wire("commit_offset")
_SUSPEND_MILLIS = _Q.wire("suspend_timeout_millis")
_SUB_VERSION = _Q.wire("sub_version")
_R = PullMessageResponseHeader
_NEXT_BEGIN_OFFSET = _R.wire("next_begin_offset")
_MIN_OFFSET = _R.wire("min_offset")
_MAX_OFFSET = _R.wire("max_offset")
_SUGGEST_BROKER_ID = _R.wire("suggest_which_broker_id")
_STATUS: dict[int, PullStatus] = {int(status.value): status for status in PullStatus}
_FOUND = PullStatus.FOUND
_COMMIT_FLAG = int(PullSysFlag.COMMIT_OFFSET)


async def pull_raw(
    instance: ClientInstance,
    group: str,
    queue: MessageQueue,
    offset: int,
    *,
    max_nums: int = 32,
    sys_flag: int = 0,
    commit_offset: int = 0,
    suspend: float = BROKER_SUSPEND_MAX,
    timeout: float = PULL_TIMEOUT_WHEN_SUSPEND,
    sub_version: int = 0,
    expression: str | None = None,
    addr: str | None = None,
    expression_type: str | None = None,
) -> RemotingCommand:
    """One PULL_MESSAGE round trip to the queue's master (or ``addr``); the response as it
    came, its body the stored records (for readers that decode them their own way)."""
    if addr is None:
        addr, from_slave = subscribe_address(instance, queue)
        if addr is None:
            await instance.find_broker_addr(queue.broker_name, topic=queue.topic, only_this=False)
            addr, from_slave = subscribe_address(instance, queue)
        if addr is None:
            addr = await instance.find_broker_addr(queue.broker_name, topic=queue.topic, only_this=False)
        if from_slave:
            # A slave keeps no progress from pulls: commit it to the master later instead.
            sys_flag &= ~_COMMIT_FLAG
    fields = _pull_template(
        group, queue.topic, queue.queue_id, max_nums, expression, expression_type or EXPRESSION_TYPE_TAG
    ).copy()
    fields[_QUEUE_OFFSET] = offset
    fields[_SYS_FLAG] = sys_flag | (SUBSCRIPTION if expression is not None else 0)
    fields[_COMMIT_OFFSET] = commit_offset
    fields[_SUSPEND_MILLIS] = int(suspend * 1000)
    fields[_SUB_VERSION] = sub_version
    return await instance.invoke(addr, _PULL, fields, timeout=timeout)


def subscribe_address(instance: ClientInstance, queue: MessageQueue) -> tuple[str | None, bool]:
    """Where a pull of ``queue`` goes, and whether that is a slave: the broker id its last
    response suggested, else the next id, else any address of the broker (the Java client's
    ``findBrokerAddressInSubscribe``). So consumers read from a slave while the master is gone
    from the route, and go back to the master (id 0, which slaves suggest) once it is back."""
    brokers = instance.brokers.get(queue.broker_name)
    if not brokers:
        return None, False
    broker_id = instance.pull_from_broker.get(queue, 0)
    addr = brokers.get(broker_id)
    if addr is None and broker_id != 0:
        broker_id += 1
        addr = brokers.get(broker_id)
    if addr is None:
        broker_id, addr = next(iter(sorted(brokers.items())))
    return addr, broker_id != 0


@functools.lru_cache(maxsize=4096)
def _pull_template(
    group: str, topic: str, queue_id: int, max_nums: int, expression: str | None, expression_type: str
) -> dict[str, Any]:
    """The PULL_MESSAGE header map of one queue, built once through the declared model (a
    validation per pull would cost more than the rest of the request); each pull copies it
    and fills in the fields that change, by the model's wire names."""
    return PullMessageRequestHeader(
        consumer_group=group,
        topic=topic,
        queue_id=queue_id,
        queue_offset=0,
        max_msg_nums=max_nums,
        sys_flag=0,
        subscription=expression,
        expression_type=expression_type,
    ).to_fields()


def _read_pull_response(ext: dict[str, Any]) -> tuple[int, int, int, int]:
    """nextBeginOffset, minOffset, maxOffset and suggestWhichBrokerId of a pull response."""
    try:
        return (
            int(ext[_NEXT_BEGIN_OFFSET]),
            int(ext[_MIN_OFFSET]),
            int(ext[_MAX_OFFSET]),
            int(ext.get(_SUGGEST_BROKER_ID, 0)),
        )
    except (KeyError, TypeError, ValueError):
        header = PullMessageResponseHeader.from_fields(ext)  # raises a ProtocolError naming the field
        return header.next_begin_offset, header.min_offset, header.max_offset, header.suggest_which_broker_id


async def pull(
    instance: ClientInstance,
    group: str,
    queue: MessageQueue,
    offset: int,
    *,
    max_nums: int = 32,
    sys_flag: int = 0,
    commit_offset: int = 0,
    suspend: float = BROKER_SUSPEND_MAX,
    timeout: float = PULL_TIMEOUT_WHEN_SUSPEND,
    sub_version: int = 0,
    expression: str | None = None,
    tags: frozenset[str] | None = None,
    expression_type: str | None = None,
) -> PullResult:
    """Pull up to ``max_nums`` messages of ``queue`` from ``offset``.

    ``expression`` (sent with the SUBSCRIPTION flag) overrides the subscription the group
    registered by heartbeat; ``tags`` is the exact-tag filter applied to what comes back.
    Raises the broker's error for any response other than found / not found / no match /
    offset moved.
    """
    response = await pull_raw(
        instance,
        group,
        queue,
        offset,
        max_nums=max_nums,
        sys_flag=sys_flag,
        commit_offset=commit_offset,
        suspend=suspend,
        timeout=timeout,
        sub_version=sub_version,
        expression=expression,
        expression_type=expression_type,
    )
    status = _STATUS.get(response.code)
    if status is None:
        raise error_for_code(response.code, response.remark)
    next_begin, min_offset, max_offset, suggested = _read_pull_response(response.ext_fields)
    instance.pull_from_broker[queue] = suggested
    result = PullResult(status, next_begin, min_offset, max_offset, suggest_which_broker_id=suggested)
    if status is _FOUND and response.body:
        messages = filter_by_tags(decode_records(response.body), tags)
        broker_name = queue.broker_name
        for msg in messages:
            msg.broker_name = broker_name
        delta = response.ext_fields.get("offsetDelta")
        if delta is not None:
            # A static topic (RocketMQ 5): the records carry the physical queue and offset;
            # the queue is the global one and the offset logical, ``offsetDelta`` further.
            shift, queue_id = int(delta), queue.queue_id
            for msg in messages:
                msg.queue_offset += shift
                msg.queue_id = queue_id
        result.messages = messages
    return result


class PullClient(ClientLifecycle):
    """Pull by offset, for tools and connectors that track positions themselves (the Spark
    connector reads offset ranges with it): queue discovery, offset queries, pulls with a
    tag filter, and a group's committed offsets.

    ::

        async with PullClient("etl", namesrv="127.0.0.1:9876") as client:
            for queue in await client.queues("Orders"):
                async for msg in client.read(queue, 0, await client.max_offset(queue)):
                    ...
    """

    def __init__(
        self,
        group: str,
        namesrv: str | Iterable[str] | None = None,
        *,
        instance_name: str | None = None,
        options: ClientOptions | None = None,
    ) -> None:
        check_group(group)
        self.group = group
        self.admin = Admin(
            namesrv, instance_name=instance_name or f"pull-{default_instance_name()}", options=options
        )

    async def start(self) -> None:
        await self.admin.start()

    async def shutdown(self) -> None:
        await self.admin.shutdown()

    async def queues(self, topic: str) -> list[MessageQueue]:
        """The readable queues of ``topic``, sorted."""
        return await self.admin.queues(topic)

    async def min_offset(self, queue: MessageQueue) -> int:
        return await self.admin.min_offset(queue)

    async def max_offset(self, queue: MessageQueue) -> int:
        return await self.admin.max_offset(queue)

    async def search_offset(self, queue: MessageQueue, timestamp: float) -> int:
        return await self.admin.search_offset(queue, timestamp)

    async def pull(
        self,
        queue: MessageQueue,
        offset: int,
        max_nums: int = 32,
        *,
        expression: str = "*",
        timeout: float = 10.0,
    ) -> PullResult:
        """One pull of up to ``max_nums`` messages from ``offset``, without waiting for new
        ones; only messages whose tag matches ``expression`` come back, but
        ``next_begin_offset`` moves past the skipped ones too."""
        return await pull(
            self.admin.instance,
            self.group,
            queue,
            offset,
            max_nums=max_nums,
            expression=expression,
            tags=tag_filter(parse_tags(expression)),
            suspend=0,
            timeout=timeout,
        )

    async def read(
        self, queue: MessageQueue, start: int, end: int, *, expression: str = "*", batch: int = 32
    ) -> AsyncIterator[MessageExt]:
        """Every matching message of ``queue`` with ``start <= queue_offset < end``."""
        offset = start
        while offset < end:
            result = await self.pull(queue, offset, min(batch, end - offset), expression=expression)
            if result.status is PullStatus.OFFSET_ILLEGAL:
                if result.next_begin_offset <= offset:
                    return
                offset = result.next_begin_offset
                continue
            for msg in result.messages:
                if msg.queue_offset >= end:
                    return
                yield msg
            if result.next_begin_offset <= offset:
                return  # nothing more stored yet
            offset = result.next_begin_offset

    async def committed(self, queue: MessageQueue) -> int:
        """The group's committed offset of ``queue``; -1 when it has none."""
        return await self.admin.committed_offset(self.group, queue)

    async def commit(self, queue: MessageQueue, offset: int) -> None:
        """Store ``offset`` (the next one to read) as the group's progress on ``queue``."""
        await self.admin.update_consumer_offset(self.group, queue, offset)
