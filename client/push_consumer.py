"""The push consumer: messages delivered to a listener as they arrive.

"Push" is long polling underneath: each owned queue has a pull loop (:mod:`.pull_loop`) that
asks its broker for up to 32 messages from the next offset (the broker holds the request up to
15 s when there is nothing), puts what comes back into the queue's process queue and hands it
to consumption: :mod:`.concurrent_dispatch` (a worker pool; failed batches are sent back to
come again through ``%RETRY%<group>``, and to ``%DLQ%<group>`` after ``max_reconsume_times``)
or :mod:`.orderly_dispatch` (one batch at a time per queue under a broker lock; a failed batch
is retried in place after ``suspend_time``). This module owns the consumer itself: its
settings, subscriptions, lifecycle, its part in rebalance, and sending messages back.

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
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeAlias

from aiorocketmq.protocol.body import (
    ConsumerData,
    ConsumeType,
    MessageModel,
    MessageQueue,
    TopicRouteData,
)
from aiorocketmq.protocol.codes import RequestCode
from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.headers import ConsumerSendMsgBackRequestHeader
from aiorocketmq.protocol.message import Message, MessageExt, PropertyKey
from aiorocketmq.protocol.names import retry_topic

from . import telemetry
from .allocation import AllocateStrategy, resolve_strategy
from .client_instance import (
    ClientInstance,
    ClientOptions,
    acquire_instance,
    default_instance_name,
    release_instance,
)
from .concurrent_dispatch import ConcurrentDispatch
from .errors import ClientError, ClientStateError
from .lifecycle import ClientLifecycle
from .offset_store import LocalFileOffsetStore, OffsetStore, RemoteOffsetStore, default_offset_dir
from .orderly_dispatch import OrderlyDispatch
from .process_queue import ProcessQueue
from .producer import Producer
from .pull import COMMIT_OFFSET, SUSPEND
from .pull_loop import PulledQueue, PullRequest, pull_queue
from .rebalance import Rebalance
from .routing import subscribe_queues
from .subscription import (
    build_sql_subscription,
    build_subscription,
    check_group,
    check_in_brokers,
    check_topic,
    parse_tags,
    tag_filter,
)
from .trace import TraceDispatcher
from .types import ConsumeFrom, ConsumeResult, ServiceState

log = logging.getLogger(__name__)

Listener: TypeAlias = Callable[[list[MessageExt]], "Awaitable[ConsumeResult] | ConsumeResult"]

MiB = 1024 * 1024
SEND_BACK_TIMEOUT = 5.0
OFFSET_FIX_DELAY = 10.0
INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"

_RUNNING = ServiceState.RUNNING


def to_millis(moment: float | datetime) -> int:
    """A time as epoch milliseconds (a float is seconds since the epoch)."""
    if isinstance(moment, datetime):
        return int(moment.timestamp() * 1000)
    return int(moment * 1000)


class PushConsumer(ClientLifecycle):
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
        enable_trace: bool = False,
        trace_topic: str | None = None,
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
        stamp = to_millis(consume_timestamp) if consume_timestamp is not None else None
        self._rebalance = Rebalance(
            self,
            resolve_strategy(allocation),
            self.consume_from,
            stamp,
            orderly=orderly,
            drops_idle_queues=True,
        )
        self._tags: dict[str, frozenset[str] | None] = {}
        self._listener: Listener | None = None
        self._listener_is_async = False
        self._acquired: ClientInstance | None = None
        self._offsets: OffsetStore | None = None
        self._state = ServiceState.CREATED
        self._paused = False
        # Set by a stop (stop_on_signals): pull no more, only finish what was pulled.
        self._stopping = False
        self._retry_topic = retry_topic(group)
        self._pull_tasks: dict[MessageQueue, asyncio.Task[None]] = {}
        self._dispatch: ConcurrentDispatch | OrderlyDispatch = (
            OrderlyDispatch(self) if orderly else ConcurrentDispatch(self)
        )
        self._inner_producer: Producer | None = None
        #: ``enable_trace``: each listener call is traced (``SubBefore`` / ``SubAfter``).
        self.enable_trace = enable_trace
        self.trace_topic = trace_topic
        self._trace: TraceDispatcher | None = None

    # -- configuration --------------------------------------------------------------------

    def subscribe(self, topic: str, expression: str = "*", *, sql: str | None = None) -> None:
        """Consume ``topic`` messages whose tag matches ``expression`` (``"*"`` for all, or
        ``"tagA || tagB"``), or, with ``sql``, those whose properties satisfy an SQL92
        expression (``"TAGS = 'paid' AND amount > 100"``; the broker needs
        ``enablePropertyFilter=true``). Subscribing again replaces the expression. Allowed
        while running."""
        check_topic(topic)
        if self._state in (ServiceState.SHUTTING_DOWN, ServiceState.SHUT_DOWN):
            raise ClientStateError(f"consumer {self.group!r} has been shut down")
        if sql is not None:
            sub = build_sql_subscription(topic, sql)
            self._tags[topic] = None
        else:
            sub = build_subscription(topic, expression)
            self._tags[topic] = tag_filter(parse_tags(expression))
        self._rebalance.subscriptions[topic] = sub
        if self._state is _RUNNING:
            self._instance.spawn(self._subscription_changed(topic))

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming ``topic``; its queues are released at the next rebalance."""
        self._rebalance.subscriptions.pop(topic, None)
        self._tags.pop(topic, None)
        if self._state is _RUNNING:
            self._instance.spawn(self._subscription_changed(topic))

    async def _subscription_changed(self, topic: str) -> None:
        if topic in self._rebalance.subscriptions:
            with contextlib.suppress(MQError):
                await self._instance.update_route(topic)
        await self._instance.send_heartbeat()
        self._instance.rebalance_soon()

    def listener(self, fn: Listener) -> Listener:
        """Register the listener (usable as a decorator): ``async def f(messages) -> ConsumeResult``.
        A plain function works too; it runs on the event loop, so it must not block."""
        if not callable(fn):
            raise ClientError("the listener must be callable")
        if self._state is not ServiceState.CREATED:
            raise ClientStateError("set the listener before start()")
        self._listener = fn
        self._listener_is_async = inspect.iscoroutinefunction(fn)
        return fn

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def state(self) -> ServiceState:
        return self._state

    @property
    def _instance(self) -> ClientInstance:
        if self._acquired is None or self._state not in (_RUNNING, ServiceState.SHUTTING_DOWN):
            raise ClientStateError(f"consumer {self.group!r} is not running")
        return self._acquired

    @property
    def _offset_store(self) -> OffsetStore:
        assert self._offsets is not None
        return self._offsets

    @property
    def client_id(self) -> str:
        return self._instance.client_id

    async def start(self) -> None:
        if self._state is not ServiceState.CREATED:
            raise ClientStateError(f"consumer {self.group!r} was already started")
        if self._listener is None:
            raise ClientStateError(
                f"consumer {self.group!r} has no listener; register one with @consumer.listener"
            )
        if not self._rebalance.subscriptions:
            raise ClientStateError(f"consumer {self.group!r} subscribes to nothing; call subscribe() first")
        if self.model == MessageModel.CLUSTERING:
            self._rebalance.subscriptions[self._retry_topic] = build_subscription(self._retry_topic)
            self._tags[self._retry_topic] = None
        self._state = ServiceState.STARTING
        instance = acquire_instance(self.namesrv, self.instance_name, self.options)
        try:
            if self.model == MessageModel.BROADCASTING:
                self._offsets = LocalFileOffsetStore(self.offset_dir, instance.client_id, self.group)
            else:
                self._offsets = RemoteOffsetStore(instance, self.group)
            await self._offsets.load()
            instance.register_consumer(self)
        except BaseException:
            self._state = ServiceState.CREATED
            await release_instance(instance)
            raise
        self._acquired = instance
        if self.enable_trace:
            trace = TraceDispatcher(self.namesrv, self.options, self.trace_topic)
            await trace.start()
            self._trace = trace
        self._state = _RUNNING
        if not self.orderly:
            self._dispatch.start()
        for topic in list(self._rebalance.subscriptions):
            try:
                await instance.update_route(topic)
            except MQError as exc:
                if topic != self._retry_topic:
                    log.warning("consumer %s: no route for %s yet: %s", self.group, topic, exc)
        try:
            await check_in_brokers(instance, self.group, list(self._rebalance.subscriptions.values()))
        except BaseException:
            await self.shutdown()
            raise
        await instance.send_heartbeat()
        if self.model == MessageModel.CLUSTERING:
            # The heartbeat made the broker create the retry topic; learn its route now.
            with contextlib.suppress(MQError):
                await instance.update_route(self._retry_topic)
        if self.orderly:
            self._dispatch.start()  # lock renewal
        await self._rebalance_now()

    async def _rebalance_now(self) -> None:
        """Rebalance at once (start does; the client instance repeats it every 20 s and when
        the group changes)."""
        if await self._rebalance.run():
            self._instance.rebalance_soon()

    async def shutdown(self) -> None:
        """Stop pulling, let the listener calls in progress finish, persist the progress,
        release orderly locks and leave the group (the others take the queues over)."""
        if self._state is not _RUNNING:
            return
        self._state = ServiceState.SHUTTING_DOWN
        instance = self._instance
        tasks = list(self._pull_tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._dispatch.stop(self.shutdown_timeout)
        queues = list(self._rebalance.process_queues)
        for pq in self._rebalance.process_queues.values():
            pq.dropped = True
        await self._offset_store.persist_all(queues, wait=True)
        if self.orderly and self.model == MessageModel.CLUSTERING:
            await self._rebalance.unlock(queues)
        await instance.unregister_consumer(self.group)
        self._state = ServiceState.SHUT_DOWN
        if self._trace is not None:
            await self._trace.shutdown()
        await release_instance(instance)

    def _stop_fetching(self) -> None:
        """Pull no more, ahead of a shutdown: the listener still consumes what was pulled
        until then; ``shutdown`` drops the batches not started by then (uncommitted, they come
        again to the queue's next owner) and lets the calls in progress finish."""
        if self._state is not _RUNNING or self._stopping:
            return
        self._stopping = True
        for task in list(self._pull_tasks.values()):
            task.cancel()  # it may be parked in a long poll for up to 15 s

    def pause(self) -> None:
        """Stop pulling (messages already pulled are still consumed) until :meth:`resume`."""
        self._paused = True

    def resume(self) -> None:
        self._paused = False
        if self._state is _RUNNING:
            self._instance.rebalance_soon()

    @property
    def assigned_queues(self) -> list[MessageQueue]:
        """The queues this member currently consumes, sorted."""
        return sorted(self._rebalance.process_queues)

    # -- client instance callbacks --------------------------------------------------------

    def _consumer_data(self) -> ConsumerData:
        return ConsumerData(
            group_name=self.group,
            consume_type=ConsumeType.CONSUME_PASSIVELY,
            message_model=self.model,
            consume_from_where=self.consume_from.wire,
            subscription_data_set=list(self._rebalance.subscriptions.values()),
        )

    def _subscribed_topics(self) -> Iterable[str]:
        return list(self._rebalance.subscriptions)

    def _route_changed(self, topic: str, route: TopicRouteData) -> None:
        if topic in self._rebalance.subscriptions:
            self._rebalance.topic_queues[topic] = subscribe_queues(topic, route)

    async def _do_rebalance(self) -> bool:
        if self._state is not _RUNNING or self._paused or self._stopping:
            return False
        return await self._rebalance.run()

    async def _persist_offsets(self) -> None:
        if self._state is _RUNNING:
            await self._offset_store.persist_all(list(self._rebalance.process_queues))

    async def persist_offsets(self) -> None:
        """Write the consumed offsets to the brokers now (the local file when broadcasting) and
        wait for the answers; the client does it every 5 s, on rebalance and at shutdown anyway."""
        if self._state is not _RUNNING:
            raise ClientStateError(f"consumer {self.group!r} is not running")
        await self._offset_store.persist_all(list(self._rebalance.process_queues), wait=True)

    def _reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        if self._state is _RUNNING:
            self._instance.spawn(self._adopt_reset_offsets(topic, offsets))

    async def _adopt_reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """Adopt offsets an administrator reset: drop the topic's queues, set their offsets,
        and let rebalance re-create them from there."""
        for queue in [q for q in self._rebalance.process_queues if q.topic == topic]:
            pq = self._rebalance.process_queues.pop(queue)
            pq.dropped = True
            pq.clear()
            task = self._pull_tasks.pop(queue, None)
            if task is not None:
                task.cancel()
        for queue, offset in offsets.items():
            self._offset_store.update(queue, offset, increase_only=False)
            await self._offset_store.persist(queue)
        self._instance.rebalance_soon()

    # -- rebalance owner ------------------------------------------------------------------

    def _queue_added(self, queue: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        if self._state is not _RUNNING or self._stopping:
            # A rebalance that began before shutdown may finish after it: no new pulls then.
            pq.dropped = True
            return
        pq.offset_slot = self._offset_store.slot(queue)
        old = self._pull_tasks.pop(queue, None)
        if old is not None:
            old.cancel()
        task = asyncio.ensure_future(pull_queue(self, PulledQueue(queue, pq, offset)))
        self._pull_tasks[queue] = task
        task.add_done_callback(functools.partial(self._pull_task_done, queue))

    def _pull_task_done(self, queue: MessageQueue, task: asyncio.Task[None]) -> None:
        if self._pull_tasks.get(queue) is task:
            del self._pull_tasks[queue]
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("pull loop of %s failed", queue, exc_info=exc)

    async def _queue_removed(self, queue: MessageQueue, pq: ProcessQueue) -> bool:
        task = self._pull_tasks.pop(queue, None)
        if task is not None:
            task.cancel()  # it may be parked in a long poll for up to 15 s
        store = self._offset_store
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
                await self._rebalance.unlock([queue])
            finally:
                pq.consume_lock.release()
            return True
        await store.persist(queue)
        store.remove(queue)
        return True

    async def _assignment_changed(self, topic: str, mine: set[MessageQueue]) -> None:
        sub = self._rebalance.subscriptions.get(topic)
        if sub is not None:
            self._rebalance.subscriptions[topic] = sub.model_copy(
                update={"sub_version": time.time_ns() // 1_000_000}
            )
        # Pulls carry the new version: the brokers must have it before they start.
        await self._instance.send_heartbeat(wait=True)

    # -- the pull loop's questions (see pull_loop.PullingConsumer) --------------------------

    def _pulling(self) -> bool:
        return self._state is _RUNNING and not self._stopping

    def _is_paused(self, queue: MessageQueue) -> bool:
        return self._paused

    def _over_limits(self, pulled: PulledQueue) -> bool:
        # An orderly queue is consumed from its head only: its span says nothing.
        return not self.orderly and pulled.pq.max_span > self.max_span

    def _next_pull(self, pulled: PulledQueue) -> PullRequest | None:
        pq = pulled.pq
        clustering = self.model == MessageModel.CLUSTERING
        if self.orderly and clustering and not pq.locked:
            return None
        topic = pulled.queue.topic
        sub = self._rebalance.subscriptions.get(topic)
        if sub is None:
            return None
        commit = pq.offset_slot.value if clustering else 0
        return PullRequest(
            max_nums=self.pull_batch_size,
            sys_flag=SUSPEND | COMMIT_OFFSET if commit > 0 else SUSPEND,
            commit_offset=max(commit, 0),
            sub_version=sub.sub_version,
            tags=self._tags.get(topic),
            interval=self.pull_interval,
        )

    def _started(self, pulled: PulledQueue) -> None:
        return None  # rebalance hands push queues over with their start offset

    def _deliver(self, pulled: PulledQueue, messages: list[MessageExt], dispatch: bool) -> None:
        consumption = self._dispatch
        if isinstance(consumption, OrderlyDispatch):
            consumption.submit(pulled.queue, pulled.pq, dispatch)
        else:
            consumption.submit(messages, pulled.pq, pulled.queue)

    def _caught_up(self, pulled: PulledQueue, offset: int) -> None:
        pulled.pq.offset_slot.advance(offset)

    def _offset_moved(self, pulled: PulledQueue, offset: int) -> bool:
        # As Java does: drop the queue, and after a while store the broker's offset and let
        # rebalance take the queue again from there.
        pulled.pq.dropped = True
        self._instance.spawn(self._fix_offset(pulled.queue, pulled.pq, offset))
        return False

    async def _fix_offset(self, queue: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        await asyncio.sleep(OFFSET_FIX_DELAY)
        if self._state is not _RUNNING:
            return
        self._offset_store.update(queue, offset, increase_only=False)
        await self._offset_store.persist(queue)
        if self._rebalance.process_queues.get(queue) is pq:
            await self._rebalance.remove_queue(queue)
        self._instance.rebalance_soon()

    # -- consuming ------------------------------------------------------------------------

    async def _call_listener(self, messages: list[MessageExt]) -> Any:
        listener = self._listener
        assert listener is not None
        span = telemetry.consumer_span(messages, self.group)
        trace = self._trace
        traced = trace.consume_before(self.group, messages) if trace is not None else None
        try:
            outcome: Any = listener(messages)
            if self._listener_is_async or inspect.isawaitable(outcome):
                outcome = await outcome
        except BaseException as exc:
            if span is not None:
                span.end(exc)
            if trace is not None:
                trace.consume_after(traced, None, exc)
            raise
        if trace is not None:
            trace.consume_after(traced, outcome, None)
        if span is not None:
            span.failed = outcome is not ConsumeResult.SUCCESS
            span.end()
        return outcome

    def _restore_topics(self, messages: list[MessageExt]) -> None:
        retry = self._retry_topic
        for msg in messages:
            if msg.topic == retry:
                original = msg.properties.get(PropertyKey.RETRY_TOPIC)
                if original:
                    msg.topic = original

    @property
    def _max_reconsume(self) -> int:
        """How often a message is consumed again before it goes to the dead-letter queue."""
        if self.max_reconsume_times is not None:
            return self.max_reconsume_times
        return 2**31 - 1 if self.orderly else 16

    async def send_back(self, msg: MessageExt, delay_level: int = 0) -> bool:
        """Return a consumed message to the broker for a retry (``delay_level`` 0: the broker
        picks ``3 + reconsume_times``; < 0: straight to the dead-letter queue). Falls back to
        re-sending a copy to ``%RETRY%<group>``. False when both fail."""
        instance = self._instance
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
            self._inner_producer = Producer._internal(self._instance, INNER_PRODUCER_GROUP)
        await self._inner_producer.send(retry_msg)

    async def _consume_directly(self, msg: MessageExt) -> Any:
        """Run the listener on one message now, outside the queues (a broker relays
        CONSUME_MESSAGE_DIRECTLY for ``mqadmin queryMsgByUniqueKey -g -d``): nothing is
        committed or sent back, whatever the listener answers."""
        if self._listener is None:
            raise ClientStateError("the consumer has no listener")
        return await self._call_listener([msg])
