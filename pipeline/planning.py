"""Driver-side planning: which offsets of which queues a batch or a micro-batch reads.

Everything here runs on the driver, before any task starts, so that a bad option, an
unknown topic, an unreachable name server or offsets deleted by retention fail the query at
once with a message naming the option. It asks the cluster through
:class:`aiorocketmq.client.blocking.BlockingAdmin`.

Offsets travel as ``{topic: {broker name: {queue id: offset}}}`` (queue ids as strings in
JSON and in Spark's checkpoints), each offset the next one to read (an exclusive end).
Which queues a read covers comes from its subscription: fixed topics, the topics a pattern
matches at each micro-batch, or assigned queues.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiorocketmq.client.blocking import BlockingAdmin
from aiorocketmq.client.errors import MQError, TopicNotExistError
from aiorocketmq.protocol.body import ClusterInfo, MessageQueue
from aiorocketmq.protocol.names import (
    AUTO_CREATE_TOPIC,
    BENCHMARK_TOPIC,
    NOT_ALLOWED_SEND_TOPICS,
    OFFSET_MOVED_EVENT,
    is_dlq_topic,
    is_retry_topic,
    reply_topic,
)

from .options import (
    EARLIEST,
    LATEST,
    DataLossError,
    ReadOptions,
    RocketMQOptionError,
    Security,
    Subscription,
    TopicOffsets,
)

#: Spark's JSON form of a source offset: topic -> broker name -> queue id -> next offset.
JsonOffsets = dict[str, dict[str, dict[str, int]]]

log = logging.getLogger(__name__)


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


def queue_bounds(
    admin: BlockingAdmin, namesrv: str, topic: str, option: str = "topic"
) -> dict[MessageQueue, Bounds]:
    """Min and max offsets of every readable queue of ``topic`` (errors naming ``option``
    for a topic the name server does not route)."""
    try:
        queues = admin.queues(topic)
        stats = admin.topic_stats(topic)
    except TopicNotExistError:
        raise RocketMQOptionError(
            option, f"topic {topic!r} does not exist (the name server at {namesrv} has no route for it)"
        ) from None
    except MQError as exc:
        raise RocketMQOptionError(option, f"cannot read the queues of topic {topic!r}: {exc}") from None
    if not queues:
        raise RocketMQOptionError(option, f"topic {topic!r} has no readable queues")
    bounds = {}
    for queue in queues:
        offset = stats.get(queue)
        bounds[queue] = Bounds(offset.min_offset, offset.max_offset) if offset else Bounds(0, 0)
    return bounds


#: RocketMQ's fixed system topics (besides the retry, DLQ and ``RMQ_SYS_`` ones).
_INTERNAL_TOPICS = NOT_ALLOWED_SEND_TOPICS | {AUTO_CREATE_TOPIC, BENCHMARK_TOPIC, OFFSET_MOVED_EVENT}


def is_internal_topic(topic: str, cluster: ClusterInfo) -> bool:
    """RocketMQ's own topics, which a pattern never matches (as Kafka's consumers leave out
    ``__consumer_offsets``): retry and dead-letter topics, the ``RMQ_SYS_`` ones, the
    template, schedule, transaction and benchmark topics, and the topics named after each
    cluster and broker."""
    return (
        is_retry_topic(topic)
        or is_dlq_topic(topic)
        or topic.upper().startswith("RMQ_SYS_")
        or topic in _INTERNAL_TOPICS
        or topic in cluster.cluster_addr_table
        or topic in cluster.broker_addr_table
        or any(topic == reply_topic(name) for name in cluster.cluster_addr_table)
    )


def matching_topics(admin: BlockingAdmin, pattern: re.Pattern[str]) -> list[str]:
    """The cluster's topics whose whole name ``pattern`` matches, now (Kafka's
    ``subscribePattern`` matches whole names too)."""
    try:
        cluster = admin.cluster_info()
        topics = admin.topic_list()
    except MQError as exc:
        raise RocketMQOptionError("subscribePattern", f"cannot list the cluster's topics: {exc}") from None
    return [t for t in topics if pattern.fullmatch(t) and not is_internal_topic(t, cluster)]


def subscribed_bounds(
    admin: BlockingAdmin, options: ReadOptions, *, strict: bool = True
) -> dict[MessageQueue, Bounds]:
    """Bounds of every queue the read covers now. A pattern's topics are looked up afresh
    (one deleted meanwhile is left out); ``assign``'s queues must all exist when ``strict``
    (when a query is defined or a batch planned), and a stream reads those that answer."""
    sub = options.subscription
    bounds: dict[MessageQueue, Bounds] = {}
    if sub.pattern is not None:
        for topic in matching_topics(admin, sub.pattern):
            try:
                bounds.update(queue_bounds(admin, options.namesrv, topic, sub.option))
            except RocketMQOptionError:
                continue
        return bounds
    for topic in sub.topics:
        found = queue_bounds(admin, options.namesrv, topic, sub.option)
        if sub.queues is None:
            bounds.update(found)
            continue
        for broker, ids in sub.queues[topic].items():
            for queue_id in ids:
                queue = MessageQueue(topic=topic, broker_name=broker, queue_id=queue_id)
                if queue in found:
                    bounds[queue] = found[queue]
                elif strict:
                    have = ", ".join(f"{q.broker_name}:{q.queue_id}" for q in sorted(found))
                    raise RocketMQOptionError(
                        "assign", f"topic {topic!r} has no queue {broker}:{queue_id} (it has {have})"
                    )
    return bounds


def check_cluster(options: ReadOptions) -> None:
    """Name server reachable, topics routed, assigned queues present: the checks a query
    makes when it is defined. A pattern may match nothing yet (a stream waits for topics)."""
    admin = open_admin(options.namesrv, options.security)
    try:
        subscribed_bounds(admin, options, strict=True)
    finally:
        admin.close()


def _named(offsets: TopicOffsets, bounds: Mapping[MessageQueue, Bounds], option: str) -> None:
    known = {(q.topic, q.broker_name, q.queue_id) for q in bounds}
    for topic, brokers in offsets.items():
        for broker, queues in brokers.items():
            for queue_id in queues:
                if (topic, broker, queue_id) not in known:
                    have = ", ".join(f"{b}:{q}" for t, b, q in sorted(known) if t == topic) or "none"
                    raise RocketMQOptionError(
                        option,
                        f"names queue {broker}:{queue_id} of topic {topic!r}, which the read does not "
                        f"cover (its queues of that topic: {have})",
                    )


def _given(offsets: TopicOffsets, queue: MessageQueue, default: int) -> int:
    return offsets.get(queue.topic, {}).get(queue.broker_name, {}).get(queue.queue_id, default)


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
            offset = _given(starting, queue, EARLIEST)
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
        offset = LATEST if ending == "latest" else _given(ending, queue, LATEST)
        result[queue] = bound.max_offset if offset == LATEST else min(offset, bound.max_offset)
    return result


def check_data_loss(
    options: ReadOptions,
    start: Mapping[MessageQueue, int],
    bounds: Mapping[MessageQueue, Bounds],
    origin: str,
) -> dict[MessageQueue, int]:
    """``start`` with offsets below a queue's first stored offset moved up to it, with a
    warning, or (with ``failOnDataLoss``) an error saying which offsets retention deleted;
    ``origin`` says where the offsets came from (the option, or the stream's checkpoint)."""
    moved = dict(start)
    for queue, offset in start.items():
        bound = bounds.get(queue)
        if bound is None or offset >= bound.min_offset:
            continue
        lost = (
            f"offsets {offset}..{bound.min_offset - 1} of queue {queue.broker_name}:{queue.queue_id} "
            f"(topic {queue.topic!r}) were deleted by retention; the earliest offset still stored is "
            f"{bound.min_offset}"
        )
        if options.fail_on_data_loss:
            raise DataLossError(
                f"rocketmq {origin}: {lost}. Set failOnDataLoss=false to skip the lost messages."
            )
        log.warning("rocketmq %s: %s; reading from there (failOnDataLoss=false)", origin, lost)
        moved[queue] = bound.min_offset
    return moved


def partition_ranges(
    ranges: Mapping[MessageQueue, tuple[int, int]],
    *,
    max_size: int | None = None,
    min_count: int | None = None,
) -> list[tuple[MessageQueue, int, int]]:
    """The non-empty ``[start, end)`` queue ranges cut into Spark partitions: one per queue,
    pieces of at most ``max_size`` offsets, and, when there are fewer ranges than
    ``min_count``, each range cut into a share of ``min_count`` proportional to its size
    (Kafka's ``minPartitions``: about that many partitions, more or fewer by rounding)."""
    sizes = {q: end - start for q, (start, end) in sorted(ranges.items()) if end > start}
    ideal = None
    if min_count is not None and len(sizes) < min_count:
        ideal = sum(sizes.values()) / min_count
    result = []
    for queue, size in sizes.items():
        parts = 1
        if max_size is not None:
            parts = max(parts, math.ceil(size / max_size))
        if ideal:
            parts = max(parts, math.floor(size / ideal + 0.5))
        start = ranges[queue][0]
        for i in range(parts):
            result.append((queue, start + size * i // parts, start + size * (i + 1) // parts))
    return result


def to_json(offsets: Mapping[MessageQueue, int]) -> JsonOffsets:
    """Spark's form: topics, brokers and queue ids sorted, so equal offsets serialize equally."""
    result: JsonOffsets = {}
    for queue in sorted(offsets):
        brokers = result.setdefault(queue.topic, {})
        brokers.setdefault(queue.broker_name, {})[str(queue.queue_id)] = int(offsets[queue])
    return result


def from_json(
    offsets: Mapping[str, Mapping[str, Any]], subscription: Subscription
) -> dict[MessageQueue, int]:
    """Queues and offsets from Spark's form. Checkpoints of single-topic streams written before
    streams covered several topics have no topic level (``{"broker": {"queueId": offset}}``);
    they belong to the read's one fixed topic."""
    legacy = any(isinstance(v, int) for queues in offsets.values() for v in queues.values())
    if legacy:
        if len(subscription.topics) != 1 or subscription.pattern is not None:
            raise RocketMQOptionError(
                subscription.option,
                "the stream's checkpoint holds offsets of one topic without its name (written by an "
                "earlier version for a 'topic' read); resume it with that topic option",
            )
        offsets = {subscription.topics[0]: offsets}
    return {
        MessageQueue(topic=topic, broker_name=broker, queue_id=int(queue_id)): int(offset)
        for topic, brokers in offsets.items()
        for broker, queues in brokers.items()
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
