"""A blocking facade over the SDK, for scripts and for Spark executors.

The asyncio clients run on one private event loop in a daemon thread (one per process, made
again after a fork); each blocking call submits a coroutine there and waits for its result.
Blocking objects may be used from any thread; they must not be used from inside a running
event loop (use the async API there).

::

    with BlockingProducer("etl-producer", namesrv="127.0.0.1:9876") as producer:
        results = producer.send_all(messages)
"""

from __future__ import annotations

import asyncio
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from concurrent.futures import Future
from types import TracebackType
from typing import Any, Self, TypeVar

from aiorocketmq.protocol.body import (
    ClusterInfo,
    ConsumerConnection,
    ConsumeStats,
    MessageQueue,
    SubscriptionGroupConfig,
    TopicConfig,
    TopicOffset,
    TopicRouteData,
)
from aiorocketmq.protocol.loop import new_event_loop
from aiorocketmq.protocol.message import Message, MessageExt

from .admin import Admin
from .errors import ClientStateError
from .producer import Producer
from .pull import PullClient
from .types import BrokerIdentity, PullResult, SendResult

T = TypeVar("T")

#: ``send_all`` cuts batches at this many messages or bytes of bodies.
BATCH_MESSAGES = 256
BATCH_BYTES = 1024 * 1024
#: ``send_all`` keeps this many batch requests in flight.
PIPELINE_DEPTH = 8


class _LoopThread:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="rocketmq-client-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            coro.close()
            raise ClientStateError("blocking client called from its own event loop thread")
        if running is not None:
            coro.close()
            raise ClientStateError("blocking client called inside a running event loop; use the async API")
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)


_loop_thread: _LoopThread | None = None
_loop_lock = threading.Lock()


def _runner() -> _LoopThread:
    global _loop_thread
    with _loop_lock:
        if _loop_thread is None or _loop_thread.pid != os.getpid() or not _loop_thread.thread.is_alive():
            _loop_thread = _LoopThread()
        return _loop_thread


class _Blocking(ABC):
    def __init__(self) -> None:
        self._runner = _runner()
        self._closed = False

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if self._closed:
            coro.close()
            raise ClientStateError(f"{type(self).__name__} is closed")
        return self._runner.run(coro, timeout)

    @abstractmethod
    def close(self) -> None:
        """Shut the client down; further calls raise :class:`ClientStateError`."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class BlockingProducer(_Blocking):
    """A started :class:`~client.producer.Producer` behind blocking calls; same arguments."""

    def __init__(self, group: str, namesrv: str | Iterable[str] | None = None, **kwargs: Any) -> None:
        super().__init__()
        self.producer = self._run(self._start(group, namesrv, kwargs))

    @staticmethod
    async def _start(group: str, namesrv: str | Iterable[str] | None, kwargs: dict[str, Any]) -> Producer:
        producer = Producer(group, namesrv, **kwargs)
        await producer.start()
        return producer

    def send(
        self, msg: Message, *, shard_key: str | None = None, queue: MessageQueue | None = None
    ) -> SendResult:
        return self._run(self.producer.send(msg, shard_key=shard_key, queue=queue))

    def send_oneway(self, msg: Message) -> None:
        self._run(self.producer.send_oneway(msg))

    def send_batch(self, messages: Sequence[Message], *, queue: MessageQueue | None = None) -> SendResult:
        """One batch request (all messages one topic, at most 4 MiB together)."""
        return self._run(self.producer.send_batch(messages, queue=queue))

    def send_all(self, messages: Iterable[Message]) -> list[SendResult]:
        """Send any number of messages (any topics) as pipelined batch requests; returns one
        result per batch, in order. Raises the first failure after the others finished."""
        return self._run(self._send_all(list(messages)))

    async def _send_all(self, messages: list[Message]) -> list[SendResult]:
        batches: list[list[Message]] = []
        by_topic: dict[str, list[Message]] = {}
        sizes: dict[str, int] = {}
        for msg in messages:
            current = by_topic.setdefault(msg.topic, [])
            if current and (len(current) >= BATCH_MESSAGES or sizes[msg.topic] + len(msg.body) > BATCH_BYTES):
                batches.append(current)
                current = by_topic[msg.topic] = []
                sizes[msg.topic] = 0
            current.append(msg)
            sizes[msg.topic] = sizes.get(msg.topic, 0) + len(msg.body)
        batches.extend(batch for batch in by_topic.values() if batch)
        slots = asyncio.Semaphore(PIPELINE_DEPTH)

        async def send(batch: list[Message]) -> SendResult:
            async with slots:
                return await self.producer.send_batch(batch)

        results = await asyncio.gather(*(send(batch) for batch in batches), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return [r for r in results if isinstance(r, SendResult)]

    def queues(self, topic: str) -> list[MessageQueue]:
        return self._run(self.producer.queues(topic))

    def close(self) -> None:
        if not self._closed:
            self._run(self.producer.shutdown())
            self._closed = True


class BlockingPullClient(_Blocking):
    """A started :class:`~client.pull.PullClient` behind blocking calls: queue discovery,
    offset queries, offset-range reads with a tag filter, and committed offsets."""

    def __init__(self, group: str, namesrv: str | Iterable[str] | None = None, **kwargs: Any) -> None:
        super().__init__()
        self.client = PullClient(group, namesrv, **kwargs)
        self._run(self.client.start())

    def queues(self, topic: str) -> list[MessageQueue]:
        return self._run(self.client.queues(topic))

    def min_offset(self, queue: MessageQueue) -> int:
        return self._run(self.client.min_offset(queue))

    def max_offset(self, queue: MessageQueue) -> int:
        return self._run(self.client.max_offset(queue))

    def search_offset(self, queue: MessageQueue, timestamp: float) -> int:
        return self._run(self.client.search_offset(queue, timestamp))

    def pull(
        self, queue: MessageQueue, offset: int, max_nums: int = 32, *, expression: str = "*"
    ) -> PullResult:
        return self._run(self.client.pull(queue, offset, max_nums, expression=expression))

    def read(self, queue: MessageQueue, start: int, end: int, *, expression: str = "*") -> list[MessageExt]:
        """Every matching message with ``start <= queue_offset < end``."""
        return self._run(self._read(queue, start, end, expression))

    async def _read(self, queue: MessageQueue, start: int, end: int, expression: str) -> list[MessageExt]:
        return [msg async for msg in self.client.read(queue, start, end, expression=expression)]

    def committed(self, queue: MessageQueue) -> int:
        return self._run(self.client.committed(queue))

    def commit(self, queue: MessageQueue, offset: int) -> None:
        self._run(self.client.commit(queue, offset))

    def close(self) -> None:
        if not self._closed:
            self._run(self.client.shutdown())
            self._closed = True


class BlockingAdmin(_Blocking):
    """A started :class:`~client.admin.Admin` behind blocking calls."""

    def __init__(self, namesrv: str | Iterable[str] | None = None, **kwargs: Any) -> None:
        super().__init__()
        self.admin = Admin(namesrv, **kwargs)
        self._run(self.admin.start())

    def create_topic(self, topic: str, queue_nums: int = 8, **kwargs: Any) -> TopicConfig:
        """:meth:`Admin.create_topic <client.admin.Admin.create_topic>`; same keywords."""
        return self._run(self.admin.create_topic(topic, queue_nums, **kwargs))

    def delete_topic(self, topic: str, *, cluster: str | None = None) -> None:
        self._run(self.admin.delete_topic(topic, cluster=cluster))

    def topic_route(self, topic: str) -> TopicRouteData:
        return self._run(self.admin.topic_route(topic))

    def wait_for_route(
        self,
        topic: str,
        *,
        brokers: Iterable[str] | None = None,
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        perm: int | None = None,
        timeout: float = 10.0,
    ) -> TopicRouteData:
        return self._run(
            self.admin.wait_for_route(
                topic,
                brokers=brokers,
                read_queue_nums=read_queue_nums,
                write_queue_nums=write_queue_nums,
                perm=perm,
                timeout=timeout,
            )
        )

    def order_topic_conf(self, topic: str) -> dict[str, int]:
        return self._run(self.admin.order_topic_conf(topic))

    def update_order_topic_conf(
        self, topic: str, queue_nums: Mapping[str, int], *, merge: bool = False
    ) -> str:
        return self._run(self.admin.update_order_topic_conf(topic, queue_nums, merge=merge))

    def consumer_groups_of(self, topic: str) -> list[str]:
        return self._run(self.admin.consumer_groups_of(topic))

    def topic_list(self) -> list[str]:
        return self._run(self.admin.topic_list())

    def queues(self, topic: str) -> list[MessageQueue]:
        return self._run(self.admin.queues(topic))

    def cluster_info(self) -> ClusterInfo:
        return self._run(self.admin.cluster_info())

    def master_addrs(self, cluster: str | None = None) -> list[str]:
        return self._run(self.admin.master_addrs(cluster))

    def brokers_by_addr(self) -> dict[str, BrokerIdentity]:
        return self._run(self.admin.brokers_by_addr())

    def topic_stats(self, topic: str) -> dict[MessageQueue, TopicOffset]:
        return self._run(self.admin.topic_stats(topic))

    def consume_stats(self, group: str, topic: str | None = None) -> ConsumeStats:
        return self._run(self.admin.consume_stats(group, topic))

    def consumer_lag(self, group: str, topic: str | None = None) -> int:
        return self._run(self.admin.consumer_lag(group, topic))

    def update_subscription_group(
        self, config: SubscriptionGroupConfig, *, cluster: str | None = None, broker_addr: str | None = None
    ) -> None:
        self._run(self.admin.update_subscription_group(config, cluster=cluster, broker_addr=broker_addr))

    def delete_subscription_group(
        self,
        group: str,
        *,
        cluster: str | None = None,
        broker_addr: str | None = None,
        remove_offsets: bool = False,
    ) -> None:
        self._run(
            self.admin.delete_subscription_group(
                group, cluster=cluster, broker_addr=broker_addr, remove_offsets=remove_offsets
            )
        )

    def consumer_connections(self, group: str, *, broker_addr: str | None = None) -> ConsumerConnection:
        return self._run(self.admin.consumer_connections(group, broker_addr=broker_addr))

    def reset_offset_by_time(self, group: str, topic: str, timestamp: float) -> dict[MessageQueue, int]:
        return self._run(self.admin.reset_offset_by_time(group, topic, timestamp))

    def max_offset(self, queue: MessageQueue) -> int:
        return self._run(self.admin.max_offset(queue))

    def min_offset(self, queue: MessageQueue) -> int:
        return self._run(self.admin.min_offset(queue))

    def search_offset(self, queue: MessageQueue, timestamp: float) -> int:
        return self._run(self.admin.search_offset(queue, timestamp))

    def committed_offset(self, group: str, queue: MessageQueue) -> int:
        return self._run(self.admin.committed_offset(group, queue))

    def update_consumer_offset(self, group: str, queue: MessageQueue, offset: int) -> None:
        self._run(self.admin.update_consumer_offset(group, queue, offset))

    def query_message_by_id(self, topic: str, msg_id: str) -> MessageExt:
        return self._run(self.admin.query_message_by_id(topic, msg_id))

    def query_messages_by_key(self, topic: str, key: str, *, max_num: int = 32) -> list[MessageExt]:
        return self._run(self.admin.query_messages_by_key(topic, key, max_num=max_num))

    def broker_runtime_info(self, broker_addr: str) -> dict[str, str]:
        return self._run(self.admin.broker_runtime_info(broker_addr))

    def broker_config(self, broker_addr: str) -> dict[str, str]:
        return self._run(self.admin.broker_config(broker_addr))

    def trigger_delete_files(self, broker_addr: str) -> str:
        return self._run(self.admin.trigger_delete_files(broker_addr))

    def update_kv_config(self, namespace: str, key: str, value: str) -> None:
        self._run(self.admin.update_kv_config(namespace, key, value))

    def kv_config(self, namespace: str, key: str) -> str | None:
        return self._run(self.admin.kv_config(namespace, key))

    def delete_kv_config(self, namespace: str, key: str) -> None:
        self._run(self.admin.delete_kv_config(namespace, key))

    def close(self) -> None:
        if not self._closed:
            self._run(self.admin.shutdown())
            self._closed = True
