"""Queue allocation strategies for clustering rebalance.

Every member of a consumer group sorts the same queue list and the same client-id list and
runs the same strategy, so each computes its own share without talking to the others. A
strategy is any callable ``(group, client_id, queues, client_ids) -> queues``.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Sequence

from aiorocketmq.protocol.body import MessageQueue

AllocateStrategy = Callable[[str, str, Sequence[MessageQueue], Sequence[str]], list[MessageQueue]]


def _check(client_id: str, queues: Sequence[MessageQueue], client_ids: Sequence[str]) -> int:
    """The caller's index among ``client_ids``, or -1 when it is not a member (yet)."""
    if not client_id:
        raise ValueError("client_id is empty")
    if not client_ids:
        raise ValueError("client_ids is empty")
    try:
        return list(client_ids).index(client_id)
    except ValueError:
        return -1


def allocate_averagely(
    group: str, client_id: str, queues: Sequence[MessageQueue], client_ids: Sequence[str]
) -> list[MessageQueue]:
    """Contiguous blocks: 8 queues over 3 clients give 3, 3, 2 (Java ``AVG``)."""
    index = _check(client_id, queues, client_ids)
    if index < 0 or not queues:
        return []
    n, c = len(queues), len(client_ids)
    mod = n % c
    if n <= c:
        size = 1
    elif mod > 0 and index < mod:
        size = n // c + 1
    else:
        size = n // c
    start = index * size if (mod > 0 and index < mod) else index * size + mod
    count = min(size, n - start)
    return [queues[(start + i) % n] for i in range(max(0, count))]


def allocate_averagely_by_circle(
    group: str, client_id: str, queues: Sequence[MessageQueue], client_ids: Sequence[str]
) -> list[MessageQueue]:
    """Round robin: client ``i`` takes queues ``i, i + c, i + 2c, ...`` (Java ``AVG_BY_CIRCLE``)."""
    index = _check(client_id, queues, client_ids)
    if index < 0:
        return []
    return list(queues[index :: len(client_ids)])


def _md5_hash(key: str) -> int:
    digest = hashlib.md5(key.encode()).digest()
    return int.from_bytes(digest[:4], "big")


def _queue_key(queue: MessageQueue) -> str:
    # The text Java's MessageQueue.toString() gives, so mixed Java/Python groups agree.
    return f"MessageQueue [topic={queue.topic}, brokerName={queue.broker_name}, queueId={queue.queue_id}]"


def consistent_hash(virtual_nodes: int = 10) -> AllocateStrategy:
    """A consistent-hash ring with ``virtual_nodes`` points per client: when a client joins or
    leaves, only the queues next to its points move."""
    if virtual_nodes < 1:
        raise ValueError("virtual_nodes must be at least 1")

    def allocate(
        group: str, client_id: str, queues: Sequence[MessageQueue], client_ids: Sequence[str]
    ) -> list[MessageQueue]:
        if _check(client_id, queues, client_ids) < 0:
            return []
        ring = sorted((_md5_hash(f"{cid}-{i}"), cid) for cid in client_ids for i in range(virtual_nodes))
        points = [point for point, _ in ring]
        mine = []
        for queue in queues:
            at = bisect.bisect_left(points, _md5_hash(_queue_key(queue)))
            if ring[at % len(ring)][1] == client_id:
                mine.append(queue)
        return mine

    return allocate


STRATEGIES: dict[str, AllocateStrategy] = {
    "averagely": allocate_averagely,
    "averagely_by_circle": allocate_averagely_by_circle,
    "consistent_hash": consistent_hash(),
}


def resolve_strategy(strategy: str | AllocateStrategy) -> AllocateStrategy:
    """A strategy by name (``averagely``, ``averagely_by_circle``, ``consistent_hash``) or
    the callable itself."""
    if callable(strategy):
        return strategy
    try:
        return STRATEGIES[strategy]
    except KeyError:
        raise ValueError(f"unknown allocation strategy {strategy!r}; known: {sorted(STRATEGIES)}") from None
