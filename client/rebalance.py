"""Rebalance: deciding which queues of each subscribed topic this consumer owns, and the broker
locks orderly consumption needs.

Clustering: every member fetches the group's client ids from a broker, sorts them and the
topic's queues, and runs the allocation strategy; broadcasting: every member takes every
queue. Queues that leave are dropped (their progress persisted first, their orderly lock
released); queues that arrive get a process queue and a start offset (committed offset, or
where ``consume_from`` says for a group that has none) and start pulling.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from aiorocketmq.protocol.body import (
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageModel,
    MessageQueue,
    SubscriptionData,
    UnlockBatchRequestBody,
)
from aiorocketmq.protocol.codes import RequestCode
from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.headers import (
    OffsetResponseHeader,
    QueueRequestHeader,
    SearchOffsetRequestHeader,
    SearchOffsetResponseHeader,
)
from aiorocketmq.protocol.names import RETRY_PREFIX

from .allocation import AllocateStrategy
from .offset_store import NOT_FOUND, OffsetStore
from .process_queue import ProcessQueue
from .types import ConsumeFrom

if TYPE_CHECKING:
    from .client_instance import ClientInstance

log = logging.getLogger(__name__)

LOCK_TIMEOUT = 1.0
#: Rounds (about a second apart) that a subscribed topic without a route is looked up again
#: before rebalancing falls back to its normal interval for it.
ROUTE_RETRY_ROUNDS = 15


class RebalanceOwner(Protocol):
    """The consumer a :class:`Rebalance` works for."""

    group: str
    model: MessageModel

    @property
    def _instance(self) -> ClientInstance: ...

    @property
    def _offset_store(self) -> OffsetStore: ...

    def _queue_added(self, queue: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        """Start pulling a newly owned queue from ``offset``."""
        ...

    async def _queue_removed(self, queue: MessageQueue, pq: ProcessQueue) -> bool:
        """Release a queue this member no longer owns; False keeps it for a later round."""
        ...

    async def _assignment_changed(self, topic: str, mine: set[MessageQueue]) -> None: ...


class Rebalance:
    def __init__(
        self,
        owner: RebalanceOwner,
        strategy: AllocateStrategy,
        consume_from: ConsumeFrom = ConsumeFrom.LAST_OFFSET,
        consume_timestamp_ms: int | None = None,
        *,
        orderly: bool = False,
        drops_idle_queues: bool = True,
    ) -> None:
        self.owner = owner
        #: Orderly clustering consumers lock a queue on its broker before they take it.
        self.orderly = orderly
        #: Push consumers drop queues that stopped pulling; lite-pull consumers never do.
        self.drops_idle_queues = drops_idle_queues
        self.strategy = strategy
        self.consume_from = consume_from
        self.consume_timestamp_ms = consume_timestamp_ms
        self.subscriptions: dict[str, SubscriptionData] = {}
        #: topic -> its readable queues, from the route
        self.topic_queues: dict[str, set[MessageQueue]] = {}
        self.process_queues: dict[MessageQueue, ProcessQueue] = {}
        self._route_misses: dict[str, int] = {}
        self._lock = asyncio.Lock()

    # -- rebalance ------------------------------------------------------------------------

    async def run(self) -> bool:
        """One rebalance of every subscribed topic; True when some queue could not be taken
        yet (its orderly lock is still held elsewhere) and another round should come soon."""
        async with self._lock:
            retry = False
            for topic in list(self.subscriptions):
                try:
                    retry |= await self._rebalance_topic(topic)
                except MQError as exc:
                    if not topic.startswith(RETRY_PREFIX):
                        log.warning("rebalance of %s for %s failed: %s", topic, self.owner.group, exc)
            await self._truncate_unsubscribed()
            return retry

    async def _queues_of(self, topic: str) -> set[MessageQueue] | None:
        queues = self.topic_queues.get(topic)
        if queues is None:
            try:
                await self.owner._instance.update_route(topic)
            except MQError:
                return None
            queues = self.topic_queues.get(topic)
        return queues

    async def _rebalance_topic(self, topic: str) -> bool:
        owner = self.owner
        queues = await self._queues_of(topic)
        if queues is None:
            # No route yet, typically a topic the broker has just auto-created and not yet
            # registered: look again within a second for a while instead of waiting a whole
            # rebalance interval (20 s); a topic that stays unknown drops back to that pace.
            misses = self._route_misses.get(topic, 0) + 1
            self._route_misses[topic] = misses
            return misses <= ROUTE_RETRY_ROUNDS
        self._route_misses.pop(topic, None)
        if owner.model == MessageModel.BROADCASTING:
            mine = set(queues)
        else:
            client_ids = await owner._instance.find_consumer_ids(topic, owner.group)
            if not client_ids or not queues:
                mine = set()
            else:
                mine = set(
                    self.strategy(owner.group, owner._instance.client_id, sorted(queues), sorted(client_ids))
                )
        return await self._update(topic, mine)

    async def _update(self, topic: str, mine: set[MessageQueue]) -> bool:
        owner = self.owner
        changed = False
        retry = False
        for queue, pq in list(self.process_queues.items()):
            if queue.topic != topic:
                continue
            if queue in mine and not (self.drops_idle_queues and pq.pull_expired):
                continue
            if queue in mine:
                log.warning("%s: queue %s has not pulled for long; re-creating it", owner.group, queue)
            pq.dropped = True
            if await owner._queue_removed(queue, pq):
                self.process_queues.pop(queue, None)
                changed = True
            else:
                retry = True  # its orderly batch is still running: release it next round
        added: list[tuple[MessageQueue, ProcessQueue, int]] = []
        for queue in sorted(mine):
            if queue in self.process_queues:
                continue
            pq = ProcessQueue()
            if self.orderly and owner.model == MessageModel.CLUSTERING and not await self.lock(queue, pq):
                retry = True
                continue
            owner._offset_store.remove(queue)
            offset = await self.start_offset(queue)
            if offset < 0:
                log.warning("%s: no start offset for %s yet; retrying later", owner.group, queue)
                retry = True
                continue
            self.process_queues[queue] = pq
            added.append((queue, pq, offset))
            changed = True
        if changed:
            await owner._assignment_changed(topic, mine)
        for queue, pq, offset in added:
            owner._queue_added(queue, pq, offset)
        return retry

    async def _truncate_unsubscribed(self) -> None:
        for queue, pq in list(self.process_queues.items()):
            if queue.topic not in self.subscriptions:
                pq.dropped = True
                if await self.owner._queue_removed(queue, pq):
                    self.process_queues.pop(queue, None)

    async def remove_queue(self, queue: MessageQueue) -> None:
        pq = self.process_queues.pop(queue, None)
        if pq is not None:
            pq.dropped = True
            await self.owner._queue_removed(queue, pq)

    # -- start offsets --------------------------------------------------------------------

    async def start_offset(self, queue: MessageQueue) -> int:
        """Where a newly owned queue starts: its committed offset, else by ``consume_from``;
        -1 when that cannot be told now (a broker error)."""
        last = await self.owner._offset_store.read_store(queue)
        if last >= 0:
            return last
        if last != NOT_FOUND:
            return -1
        instance = self.owner._instance
        retry = queue.topic.startswith(RETRY_PREFIX)
        try:
            if self.consume_from == ConsumeFrom.FIRST_OFFSET:
                return 0
            if self.consume_from == ConsumeFrom.TIMESTAMP:
                if retry:
                    return await queue_offset(instance, queue, RequestCode.GET_MAX_OFFSET)
                stamp = self.consume_timestamp_ms
                if stamp is None:
                    stamp = int(time.time() * 1000) - 30 * 60 * 1000
                return await search_offset(instance, queue, stamp)
            if retry:
                return 0
            return await queue_offset(instance, queue, RequestCode.GET_MAX_OFFSET)
        except MQError as exc:
            log.warning("cannot compute the start offset of %s: %s", queue, exc)
            return -1

    # -- orderly locks --------------------------------------------------------------------

    async def _lock_batch(self, broker_name: str, queues: list[MessageQueue]) -> set[MessageQueue]:
        instance = self.owner._instance
        addr = await instance.find_broker_addr(broker_name, topic=queues[0].topic)
        body = LockBatchRequestBody(
            consumer_group=self.owner.group, client_id=instance.client_id, mq_set=queues
        )
        response = await instance.call(
            addr, RequestCode.LOCK_BATCH_MQ, None, body.encode(), timeout=LOCK_TIMEOUT
        )
        return set(LockBatchResponseBody.decode(response.body).lock_ok_mq_set)

    async def lock(self, queue: MessageQueue, pq: ProcessQueue | None = None) -> bool:
        """Take (or renew) the broker lock of one queue."""
        try:
            locked = await self._lock_batch(queue.broker_name, [queue])
        except MQError as exc:
            log.warning("%s: locking %s failed: %s", self.owner.group, queue, exc)
            return False
        for mq in locked:
            owned = self.process_queues.get(mq)
            if owned is not None:
                owned.mark_locked()
        if queue in locked:
            if pq is not None:
                pq.mark_locked()
            return True
        return False

    async def lock_all(self) -> None:
        """Renew the locks of every owned queue, one request per broker."""
        by_broker: dict[str, list[MessageQueue]] = defaultdict(list)
        for queue in self.process_queues:
            by_broker[queue.broker_name].append(queue)
        for broker_name, queues in by_broker.items():
            try:
                locked = await self._lock_batch(broker_name, queues)
            except MQError as exc:
                log.warning("%s: renewing locks on %s failed: %s", self.owner.group, broker_name, exc)
                continue
            for queue in queues:
                pq = self.process_queues.get(queue)
                if pq is None:
                    continue
                if queue in locked:
                    pq.mark_locked()
                else:
                    pq.locked = False

    async def unlock(self, queues: Iterable[MessageQueue]) -> None:
        queues = list(queues)
        by_broker: dict[str, list[MessageQueue]] = defaultdict(list)
        for queue in queues:
            by_broker[queue.broker_name].append(queue)
        instance = self.owner._instance
        for broker_name, batch in by_broker.items():
            try:
                addr = await instance.find_broker_addr(broker_name, topic=batch[0].topic)
                body = UnlockBatchRequestBody(
                    consumer_group=self.owner.group, client_id=instance.client_id, mq_set=batch
                )
                await instance.call(
                    addr, RequestCode.UNLOCK_BATCH_MQ, None, body.encode(), timeout=LOCK_TIMEOUT
                )
            except MQError as exc:
                log.warning("%s: unlocking %s failed: %s", self.owner.group, batch, exc)
        for queue in queues:
            pq = self.process_queues.get(queue)
            if pq is not None:
                pq.locked = False


async def queue_offset(instance: ClientInstance, queue: MessageQueue, code: int) -> int:
    """GET_MAX_OFFSET / GET_MIN_OFFSET of a queue."""
    addr = await instance.find_broker_addr(queue.broker_name, topic=queue.topic)
    response = await instance.call(addr, code, QueueRequestHeader(topic=queue.topic, queue_id=queue.queue_id))
    return OffsetResponseHeader.from_fields(response.ext_fields).offset


async def search_offset(instance: ClientInstance, queue: MessageQueue, timestamp_ms: int) -> int:
    """SEARCH_OFFSET_BY_TIMESTAMP: the offset of the message stored closest to a time."""
    addr = await instance.find_broker_addr(queue.broker_name, topic=queue.topic)
    response = await instance.call(
        addr,
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
        SearchOffsetRequestHeader(topic=queue.topic, queue_id=queue.queue_id, timestamp=timestamp_ms),
    )
    return SearchOffsetResponseHeader.from_fields(response.ext_fields).offset
