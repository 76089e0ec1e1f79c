"""Driver-side planning: which offsets of which queues a batch or a micro-batch reads.

Everything here runs on the driver, before any task starts, so that a bad option, an
unknown topic, an unreachable name server or offsets deleted by retention fail the query at
once with a message naming the option. It asks the cluster through
:class:`aiorocketmq.client.blocking.BlockingAdmin`.

Offsets travel as ``{broker name: {queue id: offset}}`` (queue ids as strings in JSON and in
Spark's checkpoints), each offset the next one to read (an exclusive end).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from aiorocketmq.client.blocking import BlockingAdmin
from aiorocketmq.client.errors import MQError, TopicNotExistError
from aiorocketmq.protocol.body import MessageQueue

from .options import (
    EARLIEST,
    LATEST,
    BrokerOffsets,
    DataLossError,
    ReadOptions,
    RocketMQOptionError,
    Security,
)

#: Spark's JSON form of a source offset.
JsonOffsets = dict[str, dict[str, int]]


@dataclass(frozen=True)
class Bounds:
    """A queue's first and next offsets, as the broker reports them."""

    min_offset: int
    max_offset: int


def open_admin(namesrv: str, security: Security) -> BlockingAdmin:
    """A started admin client that has reached a name server (``namesrv`` option errors
    otherwise), signing and speaking TLS as ``security`` says."""
    try:
        admin = BlockingAdmin(namesrv, options=security.client_options())
    except MQError as exc:
        raise RocketMQOptionError("namesrv", f"cannot start a client for {namesrv!r}: {exc}") from None
    try:
        admin.cluster_info()
    except (MQError, OSError, TimeoutError) as exc:
        admin.close()
        raise RocketMQOptionError(
            "namesrv", f"cannot reach the name server at {namesrv!r}: {type(exc).__name__}: {exc}"
        ) from None
    return admin


def queue_bounds(admin: BlockingAdmin, namesrv: str, topic: str) -> dict[MessageQueue, Bounds]:
    """Min and max offsets of every readable queue of ``topic`` (``topic`` option errors for
    a topic the name server does not route)."""
    try:
        queues = admin.queues(topic)
        stats = admin.topic_stats(topic)
    except TopicNotExistError:
        raise RocketMQOptionError(
            "topic", f"topic {topic!r} does not exist (the name server at {namesrv} has no route for it)"
        ) from None
    except MQError as exc:
        raise RocketMQOptionError("topic", f"cannot read the queues of topic {topic!r}: {exc}") from None
    if not queues:
        raise RocketMQOptionError("topic", f"topic {topic!r} has no readable queues")
    bounds = {}
    for queue in queues:
        offset = stats.get(queue)
        bounds[queue] = Bounds(offset.min_offset, offset.max_offset) if offset else Bounds(0, 0)
    return bounds


def check_cluster(options: ReadOptions) -> None:
    """Name server reachable and topic routed: the checks a query makes when it is defined."""
    admin = open_admin(options.namesrv, options.security)
    try:
        queue_bounds(admin, options.namesrv, options.topic)
    finally:
        admin.close()


def _named(offsets: BrokerOffsets, bounds: Mapping[MessageQueue, Bounds], option: str) -> None:
    known = {(q.broker_name, q.queue_id) for q in bounds}
    for broker, queues in offsets.items():
        for queue_id in queues:
            if (broker, queue_id) not in known:
                have = ", ".join(f"{b}:{q}" for b, q in sorted(known))
                raise RocketMQOptionError(
                    option, f"names queue {broker}:{queue_id}, which the topic does not have ({have})"
                )


def resolve_start(
    options: ReadOptions, admin: BlockingAdmin, bounds: Mapping[MessageQueue, Bounds]
) -> dict[MessageQueue, int]:
    """The first offset to read of every queue, from ``startingOffsets`` / ``startingTimestamp``
    (queues the JSON does not name start at their earliest offset)."""
    starting = options.starting
    result: dict[MessageQueue, int] = {}
    if isinstance(starting, int):
        for queue in bounds:
            try:
                result[queue] = admin.search_offset(queue, starting / 1000)
            except MQError as exc:
                raise RocketMQOptionError(
                    "startingTimestamp", f"offset search on {queue} failed: {exc}"
                ) from None
        return result
    if isinstance(starting, dict):
        _named(starting, bounds, "startingOffsets")
    for queue, bound in bounds.items():
        if starting == "earliest":
            offset = bound.min_offset
        elif starting == "latest":
            offset = bound.max_offset
        else:
            assert isinstance(starting, dict)
            offset = starting.get(queue.broker_name, {}).get(queue.queue_id, EARLIEST)
            offset = (
                bound.min_offset if offset == EARLIEST else bound.max_offset if offset == LATEST else offset
            )
        result[queue] = offset
    return result


def resolve_end(options: ReadOptions, bounds: Mapping[MessageQueue, Bounds]) -> dict[MessageQueue, int]:
    """The end (exclusive) of every queue for a batch read; never past what is stored."""
    ending = options.ending
    if isinstance(ending, dict):
        _named(ending, bounds, "endingOffsets")
    result = {}
    for queue, bound in bounds.items():
        offset = (
            LATEST if ending == "latest" else ending.get(queue.broker_name, {}).get(queue.queue_id, LATEST)
        )
        result[queue] = bound.max_offset if offset == LATEST else min(offset, bound.max_offset)
    return result


def check_data_loss(
    options: ReadOptions,
    start: Mapping[MessageQueue, int],
    bounds: Mapping[MessageQueue, Bounds],
    origin: str,
) -> dict[MessageQueue, int]:
    """``start`` with offsets below a queue's first stored offset moved up to it, or (with
    ``failOnDataLoss``) an error saying which offsets retention deleted; ``origin`` says
    where the offsets came from (the option, or the stream's checkpoint)."""
    moved = dict(start)
    for queue, offset in start.items():
        bound = bounds.get(queue)
        if bound is None or offset >= bound.min_offset:
            continue
        if options.fail_on_data_loss:
            raise DataLossError(
                f"rocketmq {origin}: offsets {offset}..{bound.min_offset - 1} of queue "
                f"{queue.broker_name}:{queue.queue_id} (topic {queue.topic!r}) were deleted by retention; "
                f"the earliest offset still stored is {bound.min_offset}. Set failOnDataLoss=false to "
                "skip the lost messages."
            )
        moved[queue] = bound.min_offset
    return moved


def split_ranges(start: int, end: int, limit: int | None) -> list[tuple[int, int]]:
    """``[start, end)`` cut into pieces of at most ``limit`` offsets (one piece without it)."""
    if end <= start:
        return []
    if limit is None:
        return [(start, end)]
    count = math.ceil((end - start) / limit)
    size = math.ceil((end - start) / count)
    return [(s, min(s + size, end)) for s in range(start, end, size)]


def to_json(offsets: Mapping[MessageQueue, int]) -> JsonOffsets:
    """Spark's form: brokers and queue ids sorted, so equal offsets serialize equally."""
    result: JsonOffsets = {}
    for queue in sorted(offsets):
        result.setdefault(queue.broker_name, {})[str(queue.queue_id)] = int(offsets[queue])
    return result


def from_json(topic: str, offsets: Mapping[str, Mapping[str, int]]) -> dict[MessageQueue, int]:
    return {
        MessageQueue(topic=topic, broker_name=broker, queue_id=int(queue_id)): int(offset)
        for broker, queues in offsets.items()
        for queue_id, offset in queues.items()
    }


def rate_limit(
    start: Mapping[MessageQueue, int], latest: Mapping[MessageQueue, int], limit: int
) -> dict[MessageQueue, int]:
    """Ends that read at most ``limit`` messages past ``start``, shared among the queues in
    proportion to their backlog (largest remainders first, so the whole limit is used)."""
    backlog = {q: max(0, end - start.get(q, 0)) for q, end in latest.items()}
    total = sum(backlog.values())
    if total <= limit:
        return dict(latest)
    shares = {q: limit * n / total for q, n in backlog.items()}
    taken = {q: math.floor(s) for q, s in shares.items()}
    left = limit - sum(taken.values())
    for queue in sorted(shares, key=lambda q: (taken[q] - shares[q], q)):
        if left <= 0:
            break
        if taken[queue] < backlog[queue]:
            taken[queue] += 1
            left -= 1
    return {q: start.get(q, 0) + taken[q] for q in latest}


def commit_group_offsets(admin: BlockingAdmin, group: str, offsets: Mapping[MessageQueue, int]) -> None:
    """Report a stream's progress as ``group``'s committed offsets (UPDATE_CONSUMER_OFFSET),
    so ``mqadmin consumerProgress`` shows the stream's lag."""
    for queue, offset in offsets.items():
        admin.update_consumer_offset(group, queue, offset)


def close_quietly(admins: Iterable[BlockingAdmin | None]) -> None:
    for admin in admins:
        if admin is not None:
            with contextlib.suppress(Exception):
                admin.close()
