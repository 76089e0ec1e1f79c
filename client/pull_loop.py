"""The pull loop of one owned message queue, shared by the push and the lite-pull consumer.

Each queue a consumer owns gets one task running :func:`pull_queue`: it waits while the
consumer is paused for the queue (suspend/resume), while the queue's process queue is over its
flow-control limits, or while the consumer is not ready to pull it (an orderly queue without
its broker lock, a topic no longer subscribed); it finds the start offset when none is known
yet; it sends PULL_MESSAGE with long polling, backs off after errors (briefly after a broker's
flow control, a second after anything else, re-announcing the client when the broker lost its
subscription), and hands what comes back to the consumer: found messages, progress through
offsets with nothing (matching) to consume, and an offset the broker says is outside the queue.
What the consumer does with each of those is the consumer's (:class:`PullingConsumer`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from aiorocketmq.protocol.body import MessageQueue
from aiorocketmq.protocol.codes import ResponseCode
from aiorocketmq.protocol.errors import BrokerError, MQError
from aiorocketmq.protocol.message import MessageExt

from .process_queue import ProcessQueue
from .pull import BROKER_SUSPEND_MAX, PULL_TIMEOUT_WHEN_SUSPEND, pull
from .types import PullStatus

if TYPE_CHECKING:
    from .client_instance import ClientInstance
    from .rebalance import Rebalance

log = logging.getLogger(__name__)

#: Messages a consumer hands to the application before it gives the event loop a turn, while
#: fewer than :data:`YIELD_BACKLOG` wait to be handed over. The pull loops share the loop with
#: consumption (Java runs listeners on a thread pool beside its network threads): a short
#: backlog handed over in one turn would run out before the answers to the queues' next pulls
#: were read, and the consumer would stall until they were. Draining 200k preloaded messages
#: with the defaults (medians of alternated pairs): a push consumer 1.12x as fast as with no
#: turns (8 pairs; a turn after every message was slower than none, as a turn costs more than
#: a listener call), a lite-pull consumer's ``async for`` 1.27x (5 pairs).
YIELD_AFTER = 8
#: A backlog this long (in messages) is handed over without turns: it lasts until the next
#: answers are read anyway, and turns would only fill the process queues sooner, which made
#: each message dearer (under cProfile, decoding pulled records took twice as long; with the
#: garbage collector off, half of the loss was gone). With pulls of 256, a turn every 8 messages
#: whatever the backlog drained at 0.62x the rate of no turns (push, 8 pairs) and 0.90x (lite
#: pull, 5 pairs); with this bound, at 1.09x (15 pairs) and 1.09x (5 pairs).
YIELD_BACKLOG = 256

#: Delay before pulling again after an error (Java ``pullTimeDelayMillsWhenException``).
PULL_DELAY_ON_ERROR = 1.0
#: Longest wait before looking again at a queue over its flow-control limits (a count limit
#: wakes earlier, as soon as consumption drains the queue to half of it).
PULL_DELAY_ON_FLOW_CONTROL = 0.05
PULL_DELAY_ON_BROKER_FLOW_CONTROL = 0.02
PULL_DELAY_WHEN_PAUSED = 1.0
#: Delay before looking again at a queue the consumer is not ready to pull.
PULL_DELAY_WHEN_NOT_READY = 1.0

_FOUND = PullStatus.FOUND
_OFFSET_ILLEGAL = PullStatus.OFFSET_ILLEGAL
_FLOW_CONTROL = int(ResponseCode.FLOW_CONTROL)
#: The broker lost or lags this client's registration (restarted?): re-announce it.
_SUBSCRIPTION_ERRORS = frozenset(
    {
        ResponseCode.SUBSCRIPTION_NOT_EXIST,
        ResponseCode.SUBSCRIPTION_NOT_LATEST,
        ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
    }
)


@dataclass(slots=True)
class PullRequest:
    """The parameters of one pull, chosen by the consumer for each pull."""

    max_nums: int
    sys_flag: int
    suspend: float = BROKER_SUSPEND_MAX
    timeout: float = PULL_TIMEOUT_WHEN_SUSPEND
    commit_offset: int = 0
    sub_version: int = 0
    expression: str | None = None
    #: The expression's type when it is not a tag expression (``"SQL92"``).
    expression_type: str | None = None
    tags: frozenset[str] | None = None
    #: Pause between this pull's answer and the next pull (0: none).
    interval: float = 0.0


@dataclass(eq=False, slots=True)
class PulledQueue:
    """One owned queue being pulled: its process queue and the offset the next pull starts
    from (-1 until a start offset is known)."""

    queue: MessageQueue
    pq: ProcessQueue
    next_offset: int = -1
    task: asyncio.Task[None] | None = field(default=None, repr=False)


class PullingConsumer(Protocol):
    """What the pull loop asks of the consumer that owns the queue."""

    group: str
    _rebalance: Rebalance
    #: Flow control: a queue holding more messages, or more body bytes, waits.
    queue_threshold: int
    queue_size_threshold: int

    @property
    def _instance(self) -> ClientInstance: ...

    def _pulling(self) -> bool:
        """Whether the consumer is still running its pulls."""
        ...

    def _is_paused(self, queue: MessageQueue) -> bool:
        """Suspended by the application (``pause``), until ``resume``."""
        ...

    def _over_limits(self, pulled: PulledQueue) -> bool:
        """Flow control beyond the count and size limits (offset span, a shared buffer)."""
        ...

    def _next_pull(self, pulled: PulledQueue) -> PullRequest | None:
        """The next pull's parameters; None when the queue cannot be pulled now (no lock,
        no subscription): the loop looks again a little later."""
        ...

    def _started(self, pulled: PulledQueue) -> None:
        """The start offset was found (``pulled.next_offset``)."""
        ...

    def _deliver(self, pulled: PulledQueue, messages: list[MessageExt], dispatch: bool) -> None:
        """Pulled messages, already in the process queue (``dispatch``: what
        :meth:`ProcessQueue.put` answered)."""
        ...

    def _caught_up(self, pulled: PulledQueue, offset: int) -> None:
        """Nothing waits in the process queue and nothing (matching) is stored below
        ``offset``: consumption has reached it."""
        ...

    def _offset_moved(self, pulled: PulledQueue, offset: int) -> bool:
        """The pulled offset is outside the queue; the broker says ``offset``. True to go on
        pulling from there, False to end this loop (the consumer takes it from here)."""
        ...


def over_flow_limits(owner: PullingConsumer, pulled: PulledQueue) -> bool:
    pq = pulled.pq
    return (
        pq.count > owner.queue_threshold or pq.size > owner.queue_size_threshold or owner._over_limits(pulled)
    )


async def pull_queue(owner: PullingConsumer, pulled: PulledQueue) -> None:
    """Pull ``pulled.queue`` until its process queue is dropped or the consumer stops."""
    instance = owner._instance
    group = owner.group
    queue = pulled.queue
    pq = pulled.pq
    while not pq.dropped and owner._pulling():
        pq.last_pull_time = time.monotonic()
        if owner._is_paused(queue):
            await asyncio.sleep(PULL_DELAY_WHEN_PAUSED)
            continue
        if over_flow_limits(owner, pulled):
            if pq.count > owner.queue_threshold:
                await pq.wait_for_space(owner.queue_threshold // 2, PULL_DELAY_ON_FLOW_CONTROL)
            else:
                await asyncio.sleep(PULL_DELAY_ON_FLOW_CONTROL)
            continue
        if pulled.next_offset < 0:
            offset = await owner._rebalance.start_offset(queue)
            if offset < 0:
                await asyncio.sleep(PULL_DELAY_ON_ERROR)
                continue
            pulled.next_offset = offset
            owner._started(pulled)
        request = owner._next_pull(pulled)
        if request is None:
            await asyncio.sleep(PULL_DELAY_WHEN_NOT_READY)
            continue
        try:
            result = await pull(
                instance,
                group,
                queue,
                pulled.next_offset,
                max_nums=request.max_nums,
                sys_flag=request.sys_flag,
                commit_offset=request.commit_offset,
                suspend=request.suspend,
                timeout=request.timeout,
                sub_version=request.sub_version,
                expression=request.expression,
                expression_type=request.expression_type,
                tags=request.tags,
            )
        except BrokerError as exc:
            if pq.dropped:
                return
            if exc.code == _FLOW_CONTROL:
                await asyncio.sleep(PULL_DELAY_ON_BROKER_FLOW_CONTROL)
                continue
            if exc.code in _SUBSCRIPTION_ERRORS:
                await instance.send_heartbeat()
            log.debug("pull of %s failed: %s", queue, exc)
            await asyncio.sleep(PULL_DELAY_ON_ERROR)
            continue
        except MQError as exc:
            if pq.dropped:
                return
            log.debug("pull of %s failed: %s", queue, exc)
            # The broker did not answer: its master may have moved (a controller-mode
            # failover); the route tells where, without waiting for the periodic refresh.
            instance.refresh_route_soon(queue.topic)
            await asyncio.sleep(PULL_DELAY_ON_ERROR)
            continue
        if pq.dropped:
            return
        status = result.status
        next_offset = result.next_begin_offset
        if status is _FOUND:
            messages = result.messages
            # Offsets below next_offset are now pulled or filtered out: once what was pulled
            # is consumed, progress may reach next_offset.
            pq.pulled_up_to(next_offset)
            if messages:
                owner._deliver(pulled, messages, pq.put(messages))
            elif pq.count == 0:
                owner._caught_up(pulled, next_offset)
        elif status is _OFFSET_ILLEGAL:
            log.warning(
                "%s: offset %d of %s is outside the queue; continuing from %d",
                group,
                pulled.next_offset,
                queue,
                next_offset,
            )
            if not owner._offset_moved(pulled, next_offset):
                return
        elif pq.count == 0:
            # Nothing (or nothing matching) up to next_offset: progress may skip ahead.
            owner._caught_up(pulled, next_offset)
        pulled.next_offset = next_offset
        if request.interval:
            await asyncio.sleep(request.interval)
