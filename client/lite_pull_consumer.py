"""The lite pull consumer: the application polls for messages when it wants them.

Queues come either from ``subscribe`` (rebalanced within the group, like a push consumer) or
from ``assign`` (exactly the queues given, no group coordination). Each owned queue has a
background pull task (the loop of :mod:`.pull_loop`, shared with the push consumer) filling a
shared buffer; :meth:`LitePullConsumer.poll` takes one pulled batch from it. Consumed offsets are committed automatically every 5 s (``auto_commit``) or by
:meth:`LitePullConsumer.commit`; ``seek`` moves a queue's position, ``pause``/``resume`` stop
and restart pulling it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Generic, Self, TypeVar, overload

from aiorocketmq.protocol.body import (
    ConsumerData,
    ConsumeType,
    MessageModel,
    MessageQueue,
    TopicRouteData,
)
from aiorocketmq.protocol.codes import RequestCode
from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.message import MessageExt
from aiorocketmq.protocol.names import SUBSCRIBE_ALL

from . import telemetry
from .allocation import AllocateStrategy, resolve_strategy
from .client_instance import (
    ClientInstance,
    ClientOptions,
    acquire_instance,
    default_instance_name,
    release_instance,
)
from .errors import ClientError, ClientStateError
from .lifecycle import ClientLifecycle
from .offset_store import LocalFileOffsetStore, OffsetStore, RemoteOffsetStore, default_offset_dir
from .process_queue import ProcessQueue
from .pull import LITE_PULL, SUSPEND
from .pull_loop import YIELD_AFTER, YIELD_BACKLOG, PulledQueue, PullRequest, pull_queue
from .push_consumer import MiB, to_millis
from .rebalance import Rebalance, queue_offset
from .routing import subscribe_queues
from .subscription import (
    build_sql_subscription,
    build_subscription,
    check_group,
    check_in_brokers,
    check_topic,
    is_tag_subscription,
    parse_tags,
    tag_filter,
)
from .trace import TraceDispatcher
from .types import ConsumeFrom, ConsumeResult, ServiceState

log = logging.getLogger(__name__)

BROKER_SUSPEND_MAX = 20.0
PULL_TIMEOUT = 30.0
MIN_AUTO_COMMIT_INTERVAL = 1.0

_RUNNING = ServiceState.RUNNING


@dataclass(slots=True)
class _Batch:
    queue: MessageQueue
    pq: ProcessQueue
    messages: list[MessageExt]


@dataclass(eq=False, slots=True)
class _QueueState(PulledQueue):
    """One owned queue: where to pull next (``next_offset``) and how far the application has
    consumed."""

    consume_offset: int = -1


class LitePullConsumer(ClientLifecycle):
    """Poll-driven consumption.

    ::

        async with LitePullConsumer("etl", namesrv="127.0.0.1:9876") as lite:
            lite.subscribe("Orders")            # or: lite.assign(await lite.queues("Orders"))
            while True:
                for msg in await lite.poll(timeout=1.0):
                    ...
    """

    def __init__(
        self,
        group: str,
        namesrv: str | Iterable[str] | None = None,
        *,
        model: MessageModel = MessageModel.CLUSTERING,
        consume_from: ConsumeFrom = ConsumeFrom.LAST_OFFSET,
        consume_timestamp: float | datetime | None = None,
        allocation: str | AllocateStrategy = "averagely",
        auto_commit: bool = True,
        auto_commit_interval: float = 5.0,
        pull_batch_size: int = 10,
        poll_timeout: float = 5.0,
        queue_threshold: int = 1000,
        queue_size_threshold: int = 100 * MiB,
        max_span: int = 2000,
        threshold_for_all: int = 10000,
        instance_name: str | None = None,
        offset_dir: str | Path | None = None,
        options: ClientOptions | None = None,
        enable_trace: bool = False,
        trace_topic: str | None = None,
    ) -> None:
        check_group(group)
        if not 1 <= pull_batch_size <= 1024:
            raise ValueError(f"pull_batch_size must be within [1, 1024], got {pull_batch_size}")
        self.group = group
        self.namesrv = namesrv
        self.model = MessageModel(model)
        self.consume_from = ConsumeFrom(consume_from)
        self.auto_commit = auto_commit
        self.auto_commit_interval = max(MIN_AUTO_COMMIT_INTERVAL, auto_commit_interval)
        self.pull_batch_size = pull_batch_size
        self.poll_timeout = poll_timeout
        self.queue_threshold = queue_threshold
        self.queue_size_threshold = queue_size_threshold
        self.max_span = max_span
        self.threshold_for_all = threshold_for_all
        self.options = options or ClientOptions()
        default_name = "DEFAULT" if self.model == MessageModel.BROADCASTING else default_instance_name()
        self.instance_name = instance_name or default_name
        self.offset_dir = Path(offset_dir) if offset_dir is not None else default_offset_dir()
        stamp = to_millis(consume_timestamp) if consume_timestamp is not None else None
        self._rebalance = Rebalance(
            self,
            resolve_strategy(allocation),
            self.consume_from,
            stamp,
            orderly=False,
            drops_idle_queues=False,
        )
        self._mode: str | None = None  # "subscribe" or "assign"
        self._assign_expressions: dict[str, str] = {}
        self._assigned: list[MessageQueue] = []
        self._tags: dict[str, frozenset[str] | None] = {}
        self._states: dict[MessageQueue, _QueueState] = {}
        self._paused: set[MessageQueue] = set()
        # None marks shutdown, so that waiting polls and iterators return at once.
        self._buffer: asyncio.Queue[_Batch | None] = asyncio.Queue()
        # A batch handed out in part, and where the next hand-out starts in it.
        self._carry: _Batch | None = None
        self._carry_at = 0
        # Messages handed out since the event loop last had a turn (see YIELD_AFTER).
        self._handed = 0
        # Streams whose loop may have been left with a span open (held until shutdown ends it).
        self._streams: set[MessageStream[Any]] = set()
        self._acquired: ClientInstance | None = None
        self._offsets: OffsetStore | None = None
        self._state = ServiceState.CREATED
        # Handing out messages and pulling: from start() until a stop (stop_on_signals) or
        # shutdown, whichever comes first.
        self._open = False
        self._next_auto_commit = 0.0
        #: ``enable_trace``: each hand-out is traced as a consumption (``SubBefore`` and a
        #: successful ``SubAfter``, as RocketMQ's lite pull consumer records its polls).
        self.enable_trace = enable_trace
        self.trace_topic = trace_topic
        self._trace: TraceDispatcher | None = None

    # -- configuration --------------------------------------------------------------------

    def _set_mode(self, mode: str) -> None:
        if self._mode is not None and self._mode != mode:
            raise ClientStateError("subscribe() and assign() are mutually exclusive on one consumer")
        if self._state in (ServiceState.SHUTTING_DOWN, ServiceState.SHUT_DOWN):
            raise ClientStateError(f"consumer {self.group!r} has been shut down")
        self._mode = mode

    def subscribe(self, topic: str, expression: str = SUBSCRIBE_ALL, *, sql: str | None = None) -> None:
        """Consume ``topic`` (messages whose tag matches ``expression``, or whose properties
        satisfy the SQL92 expression ``sql``), sharing its queues with the rest of the group."""
        check_topic(topic)
        sub = build_sql_subscription(topic, sql) if sql is not None else build_subscription(topic, expression)
        self._set_mode("subscribe")
        self._rebalance.subscriptions[topic] = sub
        self._tags[topic] = None if sql is not None else tag_filter(parse_tags(expression))
        if self._state is _RUNNING:
            self._instance.spawn(self._subscription_changed(topic))

    def unsubscribe(self, topic: str) -> None:
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

    def assign(self, queues: Iterable[MessageQueue], expression: str = SUBSCRIBE_ALL) -> None:
        """Consume exactly ``queues`` (no rebalance), keeping messages whose tag matches
        ``expression``. Replaces an earlier assignment."""
        queues = sorted(set(queues))
        if not queues:
            raise ClientError("assign() needs at least one queue")
        self._set_mode("assign")
        for queue in queues:
            check_topic(queue.topic)
            self._assign_expressions[queue.topic] = expression
            self._tags[queue.topic] = tag_filter(parse_tags(expression))
        self._assigned = queues
        if self._state is _RUNNING:
            self._instance.spawn(self._apply_assignment())

    async def _apply_assignment(self) -> None:
        wanted = set(self._assigned)
        for queue in [q for q in self._states if q not in wanted]:
            await self._drop_queue(queue, persist=True)
        for queue in self._assigned:
            if queue not in self._states:
                await self._instance.find_broker_addr(queue.broker_name, topic=queue.topic)
                offset = await self._rebalance.start_offset(queue)
                self._rebalance.process_queues[queue] = pq = ProcessQueue()
                self._queue_added(queue, pq, offset)

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def state(self) -> ServiceState:
        return self._state

    @property
    def _instance(self) -> ClientInstance:
        if self._acquired is None or self._state not in (_RUNNING, ServiceState.SHUTTING_DOWN):
            raise ClientStateError(
                f"consumer {self.group!r} is not running; use 'async with LitePullConsumer(...)' or 'await start()'"
            )
        return self._acquired

    @property
    def _offset_store(self) -> OffsetStore:
        assert self._offsets is not None
        return self._offsets

    async def start(self) -> None:
        if self._state is not ServiceState.CREATED:
            raise ClientStateError(f"consumer {self.group!r} was already started")
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
        self._open = True
        self._next_auto_commit = time.monotonic() + self.auto_commit_interval
        for topic in list(self._rebalance.subscriptions):
            try:
                await instance.update_route(topic)
            except MQError as exc:
                log.warning("consumer %s: no route for %s yet: %s", self.group, topic, exc)
        try:
            await check_in_brokers(instance, self.group, list(self._rebalance.subscriptions.values()))
        except BaseException:
            await self.shutdown()
            raise
        await instance.send_heartbeat()
        if self._mode == "subscribe":
            if await self._rebalance.run():
                instance.rebalance_soon()
        elif self._mode == "assign":
            await self._apply_assignment()

    async def shutdown(self) -> None:
        """Stop pulling, commit (with auto-commit) and persist progress, leave the group."""
        if self._state is not _RUNNING:
            return
        if self.auto_commit:
            self._commit_memory()
        self._state = ServiceState.SHUTTING_DOWN
        self._open = False
        self._buffer.put_nowait(None)
        for stream in list(self._streams):
            await stream.aclose()
        instance = self._instance
        tasks = [state.task for state in self._states.values() if state.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        queues = list(self._states)
        for state in self._states.values():
            state.pq.dropped = True
        await self._offset_store.persist_all(queues, wait=True)
        await instance.unregister_consumer(self.group)
        self._state = ServiceState.SHUT_DOWN
        if self._trace is not None:
            await self._trace.shutdown()
        await release_instance(instance)

    def _stop_fetching(self) -> None:
        """Hand nothing out any more (iterations end at their next step, polls return ``[]``)
        and stop pulling; what was handed out stays consumed, what was pulled but not handed
        out is not, and comes again to whoever owns the queue next. ``shutdown`` follows."""
        if not self._open:
            return
        self._open = False
        self._buffer.put_nowait(None)  # wake the waiting polls and iterations
        for state in self._states.values():
            if state.task is not None:
                state.task.cancel()

    # -- polling --------------------------------------------------------------------------

    async def poll(self, timeout: float | None = None) -> list[MessageExt]:
        """The next pulled batch (up to ``pull_batch_size`` messages), or ``[]`` when none
        arrives within ``timeout`` seconds (default ``poll_timeout``) or the consumer shuts
        down meanwhile."""
        if self._state is not _RUNNING:
            raise ClientStateError(f"consumer {self.group!r} is not running")
        timeout = self.poll_timeout if timeout is None else timeout
        if timeout < 0:
            raise ValueError("timeout must not be negative")
        if not self._open:
            return []  # stopped: shutdown comes next
        return await self._take(None, timeout)

    def __aiter__(self) -> MessageStream[MessageExt]:
        """``async for msg in consumer``: every message, one at a time, until shutdown (or a
        stop by :func:`~aiorocketmq.client.stop_on_signals`)."""
        return MessageStream(self, None)

    @overload
    def messages(self) -> MessageStream[MessageExt]: ...
    @overload
    def messages(self, batch_size: int) -> MessageStream[list[MessageExt]]: ...
    def messages(self, batch_size: int | None = None) -> MessageStream[Any]:
        """An async iterator over the consumed messages that ends when the consumer shuts
        down: single messages, or lists of at most ``batch_size`` (never empty) when a size
        is given. Hand-out and commits work as with :meth:`poll` (see :class:`MessageStream`)."""
        if batch_size is not None and batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        return MessageStream(self, batch_size)

    async def _take(self, limit: int | None, timeout: float) -> list[MessageExt]:
        """Hand out up to ``limit`` messages (a whole pulled batch when ``None``): what is
        left of a batch handed out in part comes first, then the buffer. Handed-out messages
        count as consumed; the auto-commit runs here, so it only covers messages handed out
        by earlier calls, which the application has come back from."""
        if self._handed >= YIELD_AFTER:
            await self._give_loop_a_turn()
            if not self._open:
                return []  # stopped or shut down meanwhile: what is left is handed out after a restart
        if self.auto_commit and time.monotonic() >= self._next_auto_commit:
            self._commit_memory()
            self._next_auto_commit = time.monotonic() + self.auto_commit_interval
        batch = self._carry
        if batch is None or batch.pq.dropped:
            batch = await self._next_batch(timeout)
            if batch is None:
                self._carry = None
                return []
            self._carry = batch
            self._carry_at = 0
        messages = batch.messages
        start = self._carry_at
        end = len(messages) if limit is None else min(len(messages), start + limit)
        taken = messages[start:end] if start or end < len(messages) else messages
        state = self._states.get(batch.queue)
        if state is not None and state.pq is not batch.pq:
            state = None  # the queue was re-assigned or seeked since this batch was pulled
        if end < len(messages):
            # Part of the batch handed out: the rest is what the queue still waits for, so the
            # consumed offset is the next message's; the process queue is settled once, when
            # the batch is through (one removal per batch, not per message).
            self._carry_at = end
            if state is not None:
                state.consume_offset = messages[end].queue_offset
        else:
            self._carry = None
            offset = batch.pq.remove(messages)
            if state is not None and offset >= 0:
                state.consume_offset = offset
        self._handed += len(taken)
        trace = self._trace
        if trace is not None:
            trace.consume_after(trace.consume_before(self.group, taken), ConsumeResult.SUCCESS, None)
        return taken

    async def _give_loop_a_turn(self) -> None:
        """Buffered batches are handed out without waiting: every ``YIELD_AFTER`` messages,
        while few are buffered (``YIELD_BACKLOG``), the loop gets a turn to read the answers to
        the queues' next pulls meanwhile."""
        self._handed = 0
        # Counts buffered batches as full ones: a trickle of small batches may skip a turn,
        # but then the buffer soon runs empty and the wait for it is a turn.
        if self._buffer.qsize() * self.pull_batch_size < YIELD_BACKLOG:
            await asyncio.sleep(0)

    async def _next_batch(self, timeout: float) -> _Batch | None:
        """The next live batch from the buffer; ``None`` on timeout or at shutdown."""
        buffer = self._buffer
        try:
            async with asyncio.timeout(timeout):
                while True:
                    if buffer.empty():
                        self._handed = 0  # waiting gives the loop its turn
                        batch = await buffer.get()
                    else:
                        batch = buffer.get_nowait()
                    if batch is None:
                        buffer.put_nowait(None)  # shutting down: wake every other waiter too
                        return None
                    if not batch.pq.dropped:
                        return batch
        except TimeoutError:
            return None

    # -- offsets --------------------------------------------------------------------------

    def _commit_memory(self) -> None:
        store = self._offset_store
        for queue, state in self._states.items():
            if state.consume_offset >= 0 and not state.pq.dropped:
                store.update(queue, state.consume_offset, increase_only=False)

    async def commit(self, offsets: dict[MessageQueue, int] | None = None) -> None:
        """Commit what :meth:`poll` has returned so far (or exactly ``offsets``: queue -> next
        offset to consume) and write it to the brokers (the local file when broadcasting)."""
        store = self._offset_store if self._state is _RUNNING else None
        if store is None:
            raise ClientStateError(f"consumer {self.group!r} is not running")
        if offsets is None:
            self._commit_memory()
            queues = list(self._states)
        else:
            for queue, offset in offsets.items():
                store.update(queue, offset, increase_only=False)
            queues = list(offsets)
        await store.persist_all(set(queues) | set(self._states), wait=True)

    async def committed(self, queue: MessageQueue) -> int:
        """The offset stored for ``queue`` (on its broker, or in the local file); -1 if none."""
        if self._state is not _RUNNING:
            raise ClientStateError(f"consumer {self.group!r} is not running")
        return await self._offset_store.read_store(queue)

    def _require_assigned(self, queue: MessageQueue) -> _QueueState:
        state = self._states.get(queue)
        if state is None:
            raise ClientError(f"{queue} is not assigned to this consumer (assigned: {self.assignment})")
        return state

    def seek(self, queue: MessageQueue, offset: int) -> None:
        """Consume ``queue`` from ``offset`` next: messages pulled but not yet polled are
        discarded. An offset outside the queue is corrected by the broker to the nearest end."""
        if offset < 0:
            raise ValueError("offset must not be negative")
        state = self._require_assigned(queue)
        if state.task is not None:
            state.task.cancel()
        state.pq.dropped = True
        pq = ProcessQueue()
        if self._rebalance.process_queues.get(queue) is not None:
            self._rebalance.process_queues[queue] = pq
        new = _QueueState(queue, pq, next_offset=offset, consume_offset=offset)
        self._states[queue] = new
        new.task = self._spawn_pull(queue, new)

    async def seek_to_begin(self, queue: MessageQueue) -> None:
        self.seek(queue, await queue_offset(self._instance, queue, RequestCode.GET_MIN_OFFSET))

    async def seek_to_end(self, queue: MessageQueue) -> None:
        self.seek(queue, await queue_offset(self._instance, queue, RequestCode.GET_MAX_OFFSET))

    def pause(self, queues: Iterable[MessageQueue]) -> None:
        """Stop pulling these queues until :meth:`resume` (already pulled messages still poll)."""
        for queue in queues:
            self._paused.add(queue)
            state = self._states.get(queue)
            if state is not None and state.task is not None and self._state is _RUNNING:
                # A pull held by the broker would still deliver: restart the task idle.
                state.task.cancel()
                state.task = self._spawn_pull(queue, state)

    def resume(self, queues: Iterable[MessageQueue]) -> None:
        for queue in queues:
            if queue not in self._paused:
                continue
            self._paused.discard(queue)
            state = self._states.get(queue)
            if state is not None and state.task is not None and self._state is _RUNNING:
                state.task.cancel()  # wake it now rather than at its next idle check
                state.task = self._spawn_pull(queue, state)

    @property
    def assignment(self) -> list[MessageQueue]:
        """The queues this consumer currently pulls, sorted."""
        return sorted(self._states)

    async def queues(self, topic: str) -> list[MessageQueue]:
        """The readable queues of ``topic`` (to pass to :meth:`assign`)."""
        route = await self._instance.update_route(topic)
        return sorted(subscribe_queues(topic, route))

    # -- client instance and rebalance callbacks ------------------------------------------

    def _consumer_data(self) -> ConsumerData:
        return ConsumerData(
            group_name=self.group,
            consume_type=ConsumeType.CONSUME_ACTIVELY,
            message_model=self.model,
            consume_from_where=self.consume_from.wire,
            subscription_data_set=list(self._rebalance.subscriptions.values()),
        )

    def _subscribed_topics(self) -> Iterable[str]:
        return list(self._rebalance.subscriptions) + [q.topic for q in self._assigned]

    def _route_changed(self, topic: str, route: TopicRouteData) -> None:
        if topic in self._rebalance.subscriptions:
            self._rebalance.topic_queues[topic] = subscribe_queues(topic, route)

    async def _do_rebalance(self) -> bool:
        if not self._open or self._mode != "subscribe":
            return False
        return await self._rebalance.run()

    async def _persist_offsets(self) -> None:
        if self._state is _RUNNING:
            await self._offset_store.persist_all(list(self._states))

    def _reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        for queue, offset in offsets.items():
            if queue in self._states:
                self.seek(queue, offset)

    def _queue_added(self, queue: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        if not self._open:
            # A rebalance that began before a stop may finish after it: no new pulls then.
            pq.dropped = True
            return
        old = self._states.get(queue)
        if old is not None and old.task is not None:
            old.task.cancel()
        state = _QueueState(queue, pq, next_offset=offset, consume_offset=offset)
        self._states[queue] = state
        state.task = self._spawn_pull(queue, state)

    async def _queue_removed(self, queue: MessageQueue, pq: ProcessQueue) -> bool:
        await self._drop_queue(queue, persist=True)
        return True

    async def _drop_queue(self, queue: MessageQueue, *, persist: bool) -> None:
        state = self._states.pop(queue, None)
        self._rebalance.process_queues.pop(queue, None)
        if state is None:
            return
        state.pq.dropped = True
        if state.task is not None:
            state.task.cancel()
        store = self._offset_store
        if self.auto_commit and state.consume_offset >= 0:
            store.update(queue, state.consume_offset, increase_only=False)
        if persist:
            await store.persist(queue)
        store.remove(queue)

    async def _assignment_changed(self, topic: str, mine: set[MessageQueue]) -> None:
        await self._instance.send_heartbeat()

    # -- pulling --------------------------------------------------------------------------

    def _spawn_pull(self, queue: MessageQueue, state: _QueueState) -> asyncio.Task[None]:
        task = asyncio.ensure_future(pull_queue(self, state))
        task.add_done_callback(self._pull_done)
        return task

    def _pull_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("lite pull task of %s failed", self.group, exc_info=exc)

    # -- the pull loop's questions (see pull_loop.PullingConsumer) --------------------------

    def _pulling(self) -> bool:
        return self._open

    def _is_paused(self, queue: MessageQueue) -> bool:
        return queue in self._paused

    def _over_limits(self, pulled: PulledQueue) -> bool:
        return (
            self._buffer.qsize() * self.pull_batch_size > self.threshold_for_all
            or pulled.pq.max_span > self.max_span
        )

    def _next_pull(self, pulled: PulledQueue) -> PullRequest | None:
        topic = pulled.queue.topic
        if self._mode == "subscribe":
            sub = self._rebalance.subscriptions.get(topic)
            if sub is None:
                return None
            expression = sub.sub_string
            expression_type = sub.expression_type if not is_tag_subscription(sub) else None
        else:
            expression = self._assign_expressions.get(topic, SUBSCRIBE_ALL)
            expression_type = None
        return PullRequest(
            max_nums=self.pull_batch_size,
            sys_flag=SUSPEND | LITE_PULL,
            suspend=BROKER_SUSPEND_MAX,
            timeout=PULL_TIMEOUT,
            expression=expression,
            expression_type=expression_type,
            tags=self._tags.get(topic),
        )

    def _started(self, pulled: PulledQueue) -> None:
        assert isinstance(pulled, _QueueState)
        if pulled.consume_offset < 0:
            pulled.consume_offset = pulled.next_offset

    def _deliver(self, pulled: PulledQueue, messages: list[MessageExt], dispatch: bool) -> None:
        self._buffer.put_nowait(_Batch(pulled.queue, pulled.pq, messages))

    def _caught_up(self, pulled: PulledQueue, offset: int) -> None:
        # Nothing waiting and nothing (matching) up to here: consumption reached it.
        assert isinstance(pulled, _QueueState)
        pulled.consume_offset = max(pulled.consume_offset, offset)

    def _offset_moved(self, pulled: PulledQueue, offset: int) -> bool:
        # Unlike the push consumer, go on at once from where the broker says.
        assert isinstance(pulled, _QueueState)
        if pulled.pq.count == 0:
            pulled.consume_offset = offset
        return True


_T = TypeVar("_T", MessageExt, list[MessageExt])


class MessageStream(Generic[_T]):
    """What ``async for`` iterates over on a :class:`LitePullConsumer`: messages (or lists
    of at most ``batch_size``) as they arrive, ending when the consumer shuts down.

    Commits stay explicit: a message counts as consumed once it is handed out, exactly as
    with :meth:`LitePullConsumer.poll`; with ``auto_commit`` the consumed offsets are
    committed from inside a later step of the iteration (so only messages whose loop body
    has finished are ever committed), otherwise by :meth:`LitePullConsumer.commit`. A loop
    left with ``break`` keeps the rest of the current batch for the next poll or loop.

    With OpenTelemetry configured, each step's messages are handled inside a process span
    linked to their producers' spans; the span is current in the loop body and ends when
    the loop asks for the next step.
    """

    def __init__(self, consumer: LitePullConsumer, batch_size: int | None) -> None:
        self._consumer = consumer
        self._batch_size = batch_size
        self._span: telemetry.ProcessSpan | None = None

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> _T:
        consumer = self._consumer
        if self._span is not None:
            self.end_span()
        if consumer._handed >= YIELD_AFTER:
            await consumer._give_loop_a_turn()
        if self._batch_size is None:
            # The common step, kept lean: the next message of a batch handed out in part.
            batch = consumer._carry
            if batch is not None and consumer._open and not batch.pq.dropped:
                messages = batch.messages
                at = consumer._carry_at
                if at + 1 < len(messages):
                    consumer._carry_at = at + 1
                    consumer._handed += 1
                    state = consumer._states.get(batch.queue)
                    if state is not None and state.pq is batch.pq:
                        state.consume_offset = messages[at + 1].queue_offset
                    msg = messages[at]
                    span = self._span = telemetry.consumer_span((msg,), consumer.group)
                    if span is not None:
                        consumer._streams.add(self)
                    return msg  # type: ignore[return-value]
        limit = 1 if self._batch_size is None else self._batch_size
        while True:
            if not consumer._open:
                consumer._streams.discard(self)
                raise StopAsyncIteration
            messages = await consumer._take(limit, consumer.poll_timeout)
            if messages:
                break
        self._span = telemetry.consumer_span(messages, consumer.group)
        if self._span is not None:
            consumer._streams.add(self)
        if self._batch_size is None:
            return messages[0]  # type: ignore[return-value]
        return messages  # type: ignore[return-value]

    def end_span(self) -> None:
        """End the span of the step in progress, if any (the next step, shutdown and
        :meth:`aclose` call this)."""
        span = self._span
        if span is not None:
            self._span = None
            span.end()

    async def aclose(self) -> None:
        """End the step in progress; the stream stays usable (a later step starts anew)."""
        self.end_span()
        self._consumer._streams.discard(self)
