"""The push consumer: messages delivered to a listener as they arrive.

"Push" is long polling underneath: each owned queue has a pull loop that asks its broker for
up to 32 messages from the next offset (the broker holds the request up to 15 s when there is
nothing), puts what comes back into the queue's process queue and hands it to consumption.

* Concurrent mode: batches of ``batch_size`` messages go to a pool of ``concurrency``
  workers. A batch the listener fails (``RECONSUME_LATER`` or an exception) is sent back to
  the broker (CONSUMER_SEND_MSG_BACK) to come again through ``%RETRY%<group>`` after a delay,
  and to ``%DLQ%<group>`` after ``max_reconsume_times``; if even that fails, it is consumed
  again locally 5 s later. The committed offset is the smallest offset still in flight.
* Orderly mode: one batch at a time per queue, under a broker lock renewed every 20 s; a
  failed batch (``SUSPEND``) is retried in place after ``suspend_time``, keeping the order.

Flow control pauses a queue's pulls while it holds 1,000 messages, 100 MiB, or (concurrent
mode) an offset span of 2,000.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeAlias

from aiorocketmq.protocol.body import (
    ConsumerData,
    ConsumeType,
    MessageModel,
    MessageQueue,
    TopicRouteData,
)
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.errors import BrokerError, MQError
from aiorocketmq.protocol.headers import ConsumerSendMsgBackRequestHeader
from aiorocketmq.protocol.message import Message, MessageExt, PropertyKey
from aiorocketmq.protocol.names import retry_topic

from .allocation import AllocateStrategy, resolve_strategy
from .client_instance import (
    ClientInstance,
    ClientOptions,
    acquire_instance,
    default_instance_name,
    release_instance,
)
from .errors import ClientError, ClientStateError
from .offset_store import LocalFileOffsetStore, OffsetStore, RemoteOffsetStore, default_offset_dir
from .process_queue import ProcessQueue
from .producer import Producer
from .pull import COMMIT_OFFSET, SUSPEND, pull
from .rebalance import Rebalance
from .routing import subscribe_queues
from .subscription import build_subscription, check_group, check_topic, parse_tags, tag_filter
from .types import ConsumeFrom, ConsumeResult, PullStatus

log = logging.getLogger(__name__)

Listener: TypeAlias = Callable[[list[MessageExt]], "Awaitable[ConsumeResult] | ConsumeResult"]

MiB = 1024 * 1024
#: Delay before pulling again after an error (Java ``pullTimeDelayMillsWhenException``).
PULL_DELAY_ON_ERROR = 1.0
PULL_DELAY_ON_FLOW_CONTROL = 0.05
PULL_DELAY_ON_BROKER_FLOW_CONTROL = 0.02
PULL_DELAY_WHEN_PAUSED = 1.0
#: A batch whose send-back failed is consumed again locally after this long.
LOCAL_RETRY_DELAY = 5.0
SEND_BACK_TIMEOUT = 5.0
OFFSET_FIX_DELAY = 10.0
LOCK_RENEW_INTERVAL = 20.0
#: Orderly consumption yields the queue after this long of continuous consuming.
MAX_TIME_CONSUME_CONTINUOUSLY = 60.0
INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"

_SUCCESS = ConsumeResult.SUCCESS
_RECONSUME_LATER = ConsumeResult.RECONSUME_LATER
_SUSPEND = ConsumeResult.SUSPEND
_FOUND = PullStatus.FOUND
_OFFSET_ILLEGAL = PullStatus.OFFSET_ILLEGAL
_SUBSCRIPTION_ERRORS = frozenset(
    {
        ResponseCode.SUBSCRIPTION_NOT_EXIST,
        ResponseCode.SUBSCRIPTION_NOT_LATEST,
        ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
    }
)


def to_millis(moment: float | datetime) -> int:
    """A time as epoch milliseconds (a float is seconds since the epoch)."""
    if isinstance(moment, datetime):
        return int(moment.timestamp() * 1000)
    return int(moment * 1000)


#: One listener call's worth: its messages, their process queue and message queue (a plain
#: tuple: one is made per message with the default batch size).
_ConsumeRequest: TypeAlias = tuple[list[MessageExt], ProcessQueue, MessageQueue]


_EMPTY: Any = object()


class _WorkQueue:
    """A FIFO handing consume requests to idle workers (lighter than asyncio.Queue).
    ``None`` tells a worker to stop."""

    def __init__(self) -> None:
        self._items: deque[_ConsumeRequest | None] = deque()
        self._waiters: deque[asyncio.Future[_ConsumeRequest | None]] = deque()

    def put(self, item: _ConsumeRequest | None) -> None:
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(item)
                return
        self._items.append(item)

    def take(self) -> _ConsumeRequest | None:
        """The next item without waiting, or ``_EMPTY``."""
        return self._items.popleft() if self._items else _EMPTY

    async def get(self) -> _ConsumeRequest | None:
        if self._items:
            return self._items.popleft()
        waiter: asyncio.Future[_ConsumeRequest | None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        return await waiter

    def clear(self) -> None:
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


class PushConsumer:
    """Consumes subscribed topics through a listener.

    ::

        consumer = PushConsumer("billing", namesrv="127.0.0.1:9876")
        consumer.subscribe("Orders", "paid || refunded")

        @consumer.listener
        async def handle(messages: list[MessageExt]) -> ConsumeResult:
            ...
            return ConsumeResult.SUCCESS

        await consumer.start()   # or: async with consumer: ...
        ...
        await consumer.shutdown()

    Parameters follow RocketMQ's push consumer: ``model`` (clustering shares the queues
    among the group, broadcasting gives every member every message), ``consume_from`` (where
    a group without committed offsets starts; ``consume_timestamp`` for ``TIMESTAMP``,
    default 30 minutes ago), ``orderly``, ``allocation`` (``"averagely"``,
    ``"averagely_by_circle"``, ``"consistent_hash"`` or a callable), ``concurrency`` (listener
    calls in flight, concurrent mode), ``batch_size`` (messages per listener call),
    ``pull_batch_size``, ``max_reconsume_times`` (16 concurrent, unbounded orderly),
    ``suspend_time`` (orderly pause after SUSPEND).
    """

    def __init__(
        self,
        group: str,
        namesrv: str | Iterable[str] | None = None,
        *,
        model: MessageModel = MessageModel.CLUSTERING,
        consume_from: ConsumeFrom = ConsumeFrom.LAST_OFFSET,
        consume_timestamp: float | datetime | None = None,
        orderly: bool = False,
        allocation: str | AllocateStrategy = "averagely",
        concurrency: int = 20,
        batch_size: int = 1,
        pull_batch_size: int = 32,
        max_reconsume_times: int | None = None,
        queue_threshold: int = 1000,
        queue_size_threshold: int = 100 * MiB,
        max_span: int = 2000,
        suspend_time: float = 1.0,
        pull_interval: float = 0.0,
        instance_name: str | None = None,
        offset_dir: str | Path | None = None,
        shutdown_timeout: float = 10.0,
        options: ClientOptions | None = None,
    ) -> None:
        check_group(group)
        if group == "DEFAULT_CONSUMER":
            raise ClientError("'DEFAULT_CONSUMER' is reserved; name the consumer group")
        for name, value, low, high in (
            ("concurrency", concurrency, 1, 1000),
            ("batch_size", batch_size, 1, 1024),
            ("pull_batch_size", pull_batch_size, 1, 1024),
            ("queue_threshold", queue_threshold, 1, 65535),
            ("max_span", max_span, 1, 65535),
        ):
            if not low <= value <= high:
                raise ValueError(f"{name} must be within [{low}, {high}], got {value}")
        self.group = group
        self.namesrv = namesrv
        self.model = MessageModel(model)
        self.consume_from = ConsumeFrom(consume_from)
        self.orderly = orderly
        self.concurrency = concurrency
        self.batch_size = batch_size
        self.pull_batch_size = pull_batch_size
        self.max_reconsume_times = max_reconsume_times
        self.queue_threshold = queue_threshold
        self.queue_size_threshold = queue_size_threshold
        self.max_span = max_span
        self.suspend_time = min(30.0, max(0.01, suspend_time))
        self.pull_interval = pull_interval
        self.shutdown_timeout = shutdown_timeout
        self.options = options or ClientOptions()
        # Java keeps broadcasting consumers on "DEFAULT" so their local offset files
        # (named after the client id) survive restarts.
        default_name = "DEFAULT" if self.model == MessageModel.BROADCASTING else default_instance_name()
        self.instance_name = instance_name or default_name
        self.offset_dir = Path(offset_dir) if offset_dir is not None else default_offset_dir()
        self.drops_idle_queues = True
        stamp = to_millis(consume_timestamp) if consume_timestamp is not None else None
        self.rebalance = Rebalance(self, resolve_strategy(allocation), self.consume_from, stamp)
        self._tags: dict[str, frozenset[str] | None] = {}
        self._listener: Listener | None = None
        self._listener_is_async = False
        self._instance: ClientInstance | None = None
        self._offset_store: OffsetStore | None = None
        self._state = "created"
        self._paused = False
        self._retry_topic = retry_topic(group)
        self._pull_tasks: dict[MessageQueue, asyncio.Task[None]] = {}
        self._orderly_tasks: set[asyncio.Task[None]] = set()
        self._work = _WorkQueue()
        self._workers: list[asyncio.Task[None]] = []
        self._lock_task: asyncio.Task[None] | None = None
        self._inner_producer: Producer | None = None

    # -- configuration --------------------------------------------------------------------

    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Consume ``topic`` messages whose tag matches ``expression`` (``"*"`` for all, or
        ``"tagA || tagB"``). Subscribing again replaces the expression. Allowed while running."""
        check_topic(topic)
        if self._state in ("stopping", "stopped"):
            raise ClientStateError(f"consumer {self.group!r} has been shut down")
        sub = build_subscription(topic, expression)
        self.rebalance.subscriptions[topic] = sub
        self._tags[topic] = tag_filter(parse_tags(expression))
        if self._state == "running":
            self.instance.spawn(self._subscription_changed(topic))

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming ``topic``; its queues are released at the next rebalance."""
        self.rebalance.subscriptions.pop(topic, None)
        self._tags.pop(topic, None)
        if self._state == "running":
            self.instance.spawn(self._subscription_changed(topic))

    async def _subscription_changed(self, topic: str) -> None:
        if topic in self.rebalance.subscriptions:
            with contextlib.suppress(MQError):
                await self.instance.update_route(topic)
        await self.instance.send_heartbeat()
        self.instance.rebalance_soon()

    def listener(self, fn: Listener) -> Listener:
        """Register the listener (usable as a decorator): ``async def f(messages) -> ConsumeResult``.
        A plain function works too; it runs on the event loop, so it must not block."""
        if not callable(fn):
            raise ClientError("the listener must be callable")
        if self._state != "created":
            raise ClientStateError("set the listener before start()")
        self._listener = fn
        self._listener_is_async = inspect.iscoroutinefunction(fn)
        return fn

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def instance(self) -> ClientInstance:
        if self._instance is None or self._state not in ("running", "stopping"):
            raise ClientStateError(f"consumer {self.group!r} is not running")
        return self._instance

    @property
    def offset_store(self) -> OffsetStore:
        assert self._offset_store is not None
        return self._offset_store

    @property
    def client_id(self) -> str:
        return self.instance.client_id

    async def start(self) -> None:
        if self._state != "created":
            raise ClientStateError(f"consumer {self.group!r} was already started")
        if self._listener is None:
            raise ClientStateError(
                f"consumer {self.group!r} has no listener; register one with @consumer.listener"
            )
        if not self.rebalance.subscriptions:
            raise ClientStateError(f"consumer {self.group!r} subscribes to nothing; call subscribe() first")
        if self.model == MessageModel.CLUSTERING:
            self.rebalance.subscriptions[self._retry_topic] = build_subscription(self._retry_topic)
            self._tags[self._retry_topic] = None
        self._state = "starting"
        instance = acquire_instance(self.namesrv, self.instance_name, self.options)
        try:
            if self.model == MessageModel.BROADCASTING:
                self._offset_store = LocalFileOffsetStore(self.offset_dir, instance.client_id, self.group)
            else:
                self._offset_store = RemoteOffsetStore(instance, self.group)
            await self._offset_store.load()
            instance.register_consumer(self)
        except BaseException:
            self._state = "created"
            await release_instance(instance)
            raise
        self._instance = instance
        self._state = "running"
        if not self.orderly:
            self._workers = [asyncio.ensure_future(self._worker()) for _ in range(self.concurrency)]
        for topic in list(self.rebalance.subscriptions):
            try:
                await instance.update_route(topic)
            except MQError as exc:
                if topic != self._retry_topic:
                    log.warning("consumer %s: no route for %s yet: %s", self.group, topic, exc)
        await instance.send_heartbeat()
        if self.model == MessageModel.CLUSTERING:
            # The heartbeat made the broker create the retry topic; learn its route now.
            with contextlib.suppress(MQError):
                await instance.update_route(self._retry_topic)
        if self.orderly and self.model == MessageModel.CLUSTERING:
            self._lock_task = asyncio.ensure_future(self._renew_locks())
        await self.rebalance_now()

    async def rebalance_now(self) -> None:
        """Rebalance at once (start does; the client instance repeats it every 20 s and when
        the group changes)."""
        if await self.rebalance.run():
            self.instance.rebalance_soon()

    async def shutdown(self) -> None:
        """Stop pulling, let the listener calls in progress finish, persist the progress,
        release orderly locks and leave the group (the others take the queues over)."""
        if self._state != "running":
            return
        self._state = "stopping"
        instance = self.instance
        if self._lock_task is not None:
            self._lock_task.cancel()
        tasks = list(self._pull_tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._work.clear()
        for _ in self._workers:
            self._work.put(None)
        pending = [*self._workers, *self._orderly_tasks]
        if pending:
            _, late = await asyncio.wait(pending, timeout=self.shutdown_timeout)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        queues = list(self.rebalance.process_queues)
        for pq in self.rebalance.process_queues.values():
            pq.dropped = True
        await self.offset_store.persist_all(queues, wait=True)
        if self.orderly and self.model == MessageModel.CLUSTERING:
            await self.rebalance.unlock(queues)
        await instance.unregister_consumer(self.group)
        self._state = "stopped"
        await release_instance(instance)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.shutdown()

    def pause(self) -> None:
        """Stop pulling (messages already pulled are still consumed) until :meth:`resume`."""
        self._paused = True

    def resume(self) -> None:
        self._paused = False
        if self._state == "running":
            self.instance.rebalance_soon()

    @property
    def assigned_queues(self) -> list[MessageQueue]:
        """The queues this member currently consumes, sorted."""
        return sorted(self.rebalance.process_queues)

    # -- client instance callbacks --------------------------------------------------------

    def consumer_data(self) -> ConsumerData:
        return ConsumerData(
            group_name=self.group,
            consume_type=ConsumeType.CONSUME_PASSIVELY,
            message_model=self.model,
            consume_from_where=self.consume_from.wire,
            subscription_data_set=list(self.rebalance.subscriptions.values()),
        )

    def subscribed_topics(self) -> Iterable[str]:
        return list(self.rebalance.subscriptions)

    def route_changed(self, topic: str, route: TopicRouteData) -> None:
        if topic in self.rebalance.subscriptions:
            self.rebalance.topic_queues[topic] = subscribe_queues(topic, route)

    async def do_rebalance(self) -> bool:
        if self._state != "running" or self._paused:
            return False
        return await self.rebalance.run()

    async def persist_offsets(self) -> None:
        if self._state == "running":
            await self.offset_store.persist_all(list(self.rebalance.process_queues))

    def reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        if self._state == "running":
            self.instance.spawn(self._reset_offsets(topic, offsets))

    async def _reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """Adopt offsets an administrator reset: drop the topic's queues, set their offsets,
        and let rebalance re-create them from there."""
        for queue in [q for q in self.rebalance.process_queues if q.topic == topic]:
            pq = self.rebalance.process_queues.pop(queue)
            pq.dropped = True
            pq.clear()
            task = self._pull_tasks.pop(queue, None)
            if task is not None:
                task.cancel()
        for queue, offset in offsets.items():
            self.offset_store.update(queue, offset, increase_only=False)
            await self.offset_store.persist(queue)
        self.instance.rebalance_soon()

    # -- rebalance owner ------------------------------------------------------------------

    def queue_added(self, queue: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        if self._state != "running":
            # A rebalance that began before shutdown may finish after it: no new pulls then.
            pq.dropped = True
            return
        pq.offset_slot = self.offset_store.slot(queue)
        old = self._pull_tasks.pop(queue, None)
        if old is not None:
            old.cancel()
        task = asyncio.ensure_future(self._pull_loop(queue, pq, offset))
        self._pull_tasks[queue] = task
        task.add_done_callback(functools.partial(self._pull_task_done, queue))

    def _pull_task_done(self, queue: MessageQueue, task: asyncio.Task[None]) -> None:
        if self._pull_tasks.get(queue) is task:
            del self._pull_tasks[queue]
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("pull loop of %s failed", queue, exc_info=exc)

    async def queue_removed(self, queue: MessageQueue, pq: ProcessQueue) -> bool:
        task = self._pull_tasks.pop(queue, None)
        if task is not None:
            task.cancel()  # it may be parked in a long poll for up to 15 s
        store = self.offset_store
        if self.orderly and self.model == MessageModel.CLUSTERING:
            # Wait for the batch in progress so its commit is part of what gets persisted
            # before the lock is released to the next owner.
            try:
                async with asyncio.timeout(1.0):  # unlike 3.11's wait_for, never eats a cancel
                    await pq.consume_lock.acquire()
            except TimeoutError:
                return False
            try:
                await store.persist(queue)
                store.remove(queue)
                await self.rebalance.unlock([queue])
            finally:
                pq.consume_lock.release()
            return True
        await store.persist(queue)
        store.remove(queue)
        return True

    async def assignment_changed(self, topic: str, mine: set[MessageQueue]) -> None:
        sub = self.rebalance.subscriptions.get(topic)
        if sub is not None:
            self.rebalance.subscriptions[topic] = sub.model_copy(
                update={"sub_version": time.time_ns() // 1_000_000}
            )
        # Pulls carry the new version: the brokers must have it before they start.
        await self.instance.send_heartbeat(wait=True)

    async def _renew_locks(self) -> None:
        await asyncio.sleep(1.0)
        while True:
            await self.rebalance.lock_all()
            await asyncio.sleep(LOCK_RENEW_INTERVAL)

    # -- pulling --------------------------------------------------------------------------

    async def _pull_loop(self, queue: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        instance = self.instance
        slot = pq.offset_slot
        clustering = self.model == MessageModel.CLUSTERING
        orderly = self.orderly
        subscriptions = self.rebalance.subscriptions
        tags = self._tags
        group = self.group
        topic = queue.topic
        next_offset = offset
        while not pq.dropped:
            pq.last_pull_time = time.monotonic()
            if self._paused:
                await asyncio.sleep(PULL_DELAY_WHEN_PAUSED)
                continue
            if (
                pq.count > self.queue_threshold
                or pq.size > self.queue_size_threshold
                or (not orderly and pq.max_span > self.max_span)
            ):
                await pq.wait_for_space(self.queue_threshold // 2, PULL_DELAY_ON_FLOW_CONTROL)
                continue
            if orderly and clustering and not pq.locked:
                await asyncio.sleep(PULL_DELAY_ON_ERROR)
                continue
            sub = subscriptions.get(topic)
            if sub is None:
                await asyncio.sleep(PULL_DELAY_ON_ERROR)
                continue
            commit = slot.value if clustering else 0
            try:
                result = await pull(
                    instance,
                    group,
                    queue,
                    next_offset,
                    max_nums=self.pull_batch_size,
                    sys_flag=SUSPEND | COMMIT_OFFSET if commit > 0 else SUSPEND,
                    commit_offset=max(commit, 0),
                    sub_version=sub.sub_version,
                    tags=tags.get(topic),
                )
            except BrokerError as exc:
                if pq.dropped:
                    return
                if exc.code == ResponseCode.FLOW_CONTROL:
                    await asyncio.sleep(PULL_DELAY_ON_BROKER_FLOW_CONTROL)
                    continue
                if exc.code in _SUBSCRIPTION_ERRORS:
                    # The broker lost or lags our registration (restarted?): re-announce.
                    await instance.send_heartbeat()
                log.debug("pull of %s failed: %s", queue, exc)
                await asyncio.sleep(PULL_DELAY_ON_ERROR)
                continue
            except MQError as exc:
                if pq.dropped:
                    return
                log.debug("pull of %s failed: %s", queue, exc)
                await asyncio.sleep(PULL_DELAY_ON_ERROR)
                continue
            if pq.dropped:
                return
            status = result.status
            next_offset = result.next_begin_offset
            if status is _FOUND:
                messages = result.messages
                # Offsets below next_offset are now pulled or filtered out: once what was
                # pulled is consumed, progress may reach next_offset.
                pq.pulled_up_to(next_offset)
                if messages:
                    dispatch = pq.put(messages)
                    self._submit(messages, pq, queue, dispatch)
                elif pq.count == 0:
                    slot.advance(next_offset)
            elif status is _OFFSET_ILLEGAL:
                log.warning("%s: offset of %s moved; continuing from %d", group, queue, next_offset)
                pq.dropped = True
                instance.spawn(self._fix_offset(queue, pq, next_offset))
                return
            elif pq.count == 0:
                # Nothing (or nothing matching) up to next_offset: progress may skip ahead.
                slot.advance(next_offset)
            if self.pull_interval:
                await asyncio.sleep(self.pull_interval)

    async def _fix_offset(self, queue: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        await asyncio.sleep(OFFSET_FIX_DELAY)
        if self._state != "running":
            return
        self.offset_store.update(queue, offset, increase_only=False)
        await self.offset_store.persist(queue)
        if self.rebalance.process_queues.get(queue) is pq:
            await self.rebalance.remove_queue(queue)
        self.instance.rebalance_soon()

    # -- consuming ------------------------------------------------------------------------

    def _submit(
        self, messages: list[MessageExt], pq: ProcessQueue, queue: MessageQueue, dispatch: bool
    ) -> None:
        if self.orderly:
            if dispatch:
                task = asyncio.ensure_future(self._consume_orderly(queue, pq))
                self._orderly_tasks.add(task)
                task.add_done_callback(self._orderly_tasks.discard)
            return
        size = self.batch_size
        put = self._work.put
        if len(messages) <= size:
            put((messages, pq, queue))
        elif size == 1:
            for msg in messages:
                put(([msg], pq, queue))
        else:
            for i in range(0, len(messages), size):
                put((messages[i : i + size], pq, queue))

    async def _call_listener(self, messages: list[MessageExt]) -> Any:
        listener = self._listener
        assert listener is not None
        outcome: Any = listener(messages)
        if self._listener_is_async or inspect.isawaitable(outcome):
            outcome = await outcome
        return outcome

    def _restore_topics(self, messages: list[MessageExt]) -> None:
        retry = self._retry_topic
        for msg in messages:
            if msg.topic == retry:
                original = msg.properties.get(PropertyKey.RETRY_TOPIC)
                if original:
                    msg.topic = original

    async def _worker(self) -> None:
        # The hot loop of concurrent consumption, one listener call per turn: locals and an
        # inlined request path keep the per-message cost down.
        work = self._work
        take = work.take
        listener = self._listener
        assert listener is not None
        is_async = self._listener_is_async
        retry_topic = self._retry_topic
        while True:
            request = take()
            if request is _EMPTY:
                request = await work.get()
            if request is None:
                return
            messages, pq, queue = request
            if pq.dropped:
                continue
            try:
                if queue.topic == retry_topic:
                    self._restore_topics(messages)
                try:
                    outcome: Any = listener(messages)
                    if is_async or inspect.isawaitable(outcome):
                        outcome = await outcome
                except Exception:
                    log.exception("listener of %s raised; the batch will be consumed again later", self.group)
                    outcome = _RECONSUME_LATER
                if outcome is _SUCCESS:
                    acked = messages
                else:
                    if outcome is not _RECONSUME_LATER:
                        log.error(
                            "listener of %s returned %r; concurrent listeners return SUCCESS or RECONSUME_LATER",
                            self.group,
                            outcome,
                        )
                    acked = await self._handle_failure(messages, pq, queue)
                if pq.dropped:
                    continue
                offset = pq.remove(acked)
                if offset >= 0:
                    pq.offset_slot.advance(offset)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("consuming a batch of %s failed", queue)

    async def _handle_failure(
        self, messages: list[MessageExt], pq: ProcessQueue, queue: MessageQueue
    ) -> list[MessageExt]:
        """Send failed messages back for a later retry; the ones that could not be sent back
        stay in the process queue and are consumed again here after a while."""
        if self.model == MessageModel.BROADCASTING:
            log.warning(
                "%s: broadcasting consumption of %d message(s) failed; dropped", self.group, len(messages)
            )
            return messages
        acked = []
        failed = []
        for msg in messages:
            if await self.send_back(msg):
                acked.append(msg)
            else:
                msg.reconsume_times += 1
                failed.append(msg)
        if failed:
            self.instance.spawn(self._consume_later(failed, pq, queue))
        return acked

    async def _consume_later(self, messages: list[MessageExt], pq: ProcessQueue, queue: MessageQueue) -> None:
        await asyncio.sleep(LOCAL_RETRY_DELAY)
        if not pq.dropped and self._state == "running":
            self._work.put((messages, pq, queue))

    @property
    def _max_reconsume(self) -> int:
        if self.max_reconsume_times is not None:
            return self.max_reconsume_times
        return 2**31 - 1 if self.orderly else 16

    async def send_back(self, msg: MessageExt, delay_level: int = 0) -> bool:
        """Return a consumed message to the broker for a retry (``delay_level`` 0: the broker
        picks ``3 + reconsume_times``; < 0: straight to the dead-letter queue). Falls back to
        re-sending a copy to ``%RETRY%<group>``. False when both fail."""
        instance = self.instance
        try:
            addr = await instance.find_broker_addr(msg.broker_name or "", topic=msg.topic)
            header = ConsumerSendMsgBackRequestHeader(
                offset=msg.commit_log_offset,
                group=self.group,
                delay_level=delay_level,
                origin_msg_id=msg.msg_id,
                origin_topic=msg.topic,
                unit_mode=False,
                # Unset, the group's retryMaxTimes (broker side) decides.
                max_reconsume_times=self.max_reconsume_times,
            )
            await instance.call(addr, RequestCode.CONSUMER_SEND_MSG_BACK, header, timeout=SEND_BACK_TIMEOUT)
            return True
        except MQError as exc:
            log.warning(
                "send-back of %s failed (%s); re-sending it to %s", msg.msg_id, exc, self._retry_topic
            )
        try:
            await self._resend_to_retry_topic(msg, 3 + msg.reconsume_times)
            return True
        except MQError as exc:
            log.warning("re-sending %s to %s failed: %s", msg.msg_id, self._retry_topic, exc)
            return False

    async def _resend_to_retry_topic(self, msg: MessageExt, delay_level: int) -> None:
        props = dict(msg.properties)
        props.setdefault(PropertyKey.ORIGIN_MESSAGE_ID, msg.msg_id)
        props[PropertyKey.RETRY_TOPIC] = msg.topic
        props[PropertyKey.RECONSUME_TIME] = str(msg.reconsume_times + 1)
        props[PropertyKey.MAX_RECONSUME_TIMES] = str(self._max_reconsume)
        props.pop(PropertyKey.TRANSACTION_PREPARED, None)
        props[PropertyKey.DELAY_TIME_LEVEL] = str(delay_level)
        retry_msg = Message(self._retry_topic, msg.body, properties=props, flag=msg.flag)
        if self._inner_producer is None:
            self._inner_producer = Producer._internal(self.instance, INNER_PRODUCER_GROUP)
        await self._inner_producer.send(retry_msg)

    async def _consume_orderly(self, queue: MessageQueue, pq: ProcessQueue) -> None:
        clustering = self.model == MessageModel.CLUSTERING
        began = time.monotonic()
        while not pq.dropped and self._state == "running":
            if clustering and (not pq.locked or pq.lock_expired):
                await asyncio.sleep(0.01)
                if not await self.rebalance.lock(queue, pq):
                    await asyncio.sleep(3.0)
                continue
            if time.monotonic() - began > MAX_TIME_CONSUME_CONTINUOUSLY:
                await asyncio.sleep(0.01)  # let other queues' tasks run
                began = time.monotonic()
            messages = pq.take(self.batch_size)
            if not messages:
                return
            self._restore_topics(messages)
            suspend = False
            async with pq.consume_lock:
                try:
                    outcome = await self._call_listener(messages)
                except Exception:
                    log.exception("orderly listener of %s raised; retrying the batch", self.group)
                    outcome = _SUSPEND
                if outcome is not _SUCCESS:
                    if outcome is not _SUSPEND and outcome is not _RECONSUME_LATER:
                        log.error(
                            "orderly listener of %s returned %r; treated as SUSPEND", self.group, outcome
                        )
                    suspend = await self._retry_locally(messages)
                if suspend:
                    pq.reconsume(messages)
                else:
                    commit = pq.commit()
                    # Committed under the consume lock: queue removal waits for this lock
                    # and persists afterwards, so the update counts even if pq was dropped.
                    if commit >= 0:
                        pq.offset_slot.value = commit
            if suspend:
                await asyncio.sleep(self.suspend_time)

    async def _retry_locally(self, messages: list[MessageExt]) -> bool:
        """Orderly failure: True when the batch is to be consumed again here; messages past
        ``max_reconsume_times`` go to the dead-letter queue instead."""
        limit = self._max_reconsume
        suspend = False
        for msg in messages:
            if msg.reconsume_times >= limit:
                msg.properties[PropertyKey.RECONSUME_TIME] = str(msg.reconsume_times)
                try:
                    await self._resend_to_retry_topic(msg, 3 + msg.reconsume_times)
                    continue
                except MQError as exc:
                    log.warning("moving %s to the dead-letter queue failed: %s", msg.msg_id, exc)
            suspend = True
            msg.reconsume_times += 1
        return suspend
