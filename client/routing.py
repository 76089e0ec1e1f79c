"""Topic routes as the SDK uses them: which queues a producer may write (publish info), which
a consumer may read (subscribe queues), and how a producer picks the next queue — round robin,
avoiding the broker that just failed, optionally steering around slow or failing brokers
(latency fault tolerance)."""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from aiorocketmq.protocol.body import MessageQueue, TopicRouteData, parse_order_topic_conf
from aiorocketmq.protocol.codes import MASTER_ID, Perm

_WRITE = int(Perm.WRITE)
_READ = int(Perm.READ)


def broker_addresses(route: TopicRouteData) -> dict[str, dict[int, str]]:
    """Broker name -> {broker id -> address} for the brokers of a route."""
    return {data.broker_name: dict(data.broker_addrs) for data in route.broker_datas}


def publish_queues(topic: str, route: TopicRouteData) -> tuple[list[MessageQueue], bool]:
    """The writable queues of a route, and whether the topic is ordered (``orderTopicConf``).

    Ordered topics list ``brokerName:queueCount`` pairs; otherwise every writable queue of a
    broker that has a master counts, brokers sorted by name.
    """
    if route.order_topic_conf:
        queues = [
            MessageQueue(topic=topic, broker_name=name, queue_id=i)
            for name, count in parse_order_topic_conf(route.order_topic_conf).items()
            for i in range(count)
        ]
        return queues, True
    static = static_queues(topic, route)
    if static:
        return sorted(static, key=lambda q: q.queue_id), False
    masters = {data.broker_name for data in route.broker_datas if MASTER_ID in data.broker_addrs}
    queues = []
    for data in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if data.perm & _WRITE and data.broker_name in masters:
            queues.extend(
                MessageQueue(topic=topic, broker_name=data.broker_name, queue_id=i)
                for i in range(data.write_queue_nums)
            )
    return queues, False


def static_queues(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """A static topic's global queues (RocketMQ 5), each on the broker that leads it now (the
    newest mapping claiming it); empty for an ordinary topic. The brokers take the global queue
    ids and logical offsets and serve them on their physical queues."""
    leaders: dict[int, tuple[int, str]] = {}
    for name, info in (route.topic_queue_mapping_by_broker or {}).items():
        for gid in info.curr_id_map:
            if gid not in leaders or info.epoch >= leaders[gid][0]:
                leaders[gid] = (info.epoch, info.bname or name)
    return [MessageQueue(topic=topic, broker_name=bname, queue_id=gid) for gid, (_, bname) in leaders.items()]


def subscribe_queues(topic: str, route: TopicRouteData) -> set[MessageQueue]:
    """The readable queues of a route."""
    static = static_queues(topic, route)
    if static:
        return set(static)
    return {
        MessageQueue(topic=topic, broker_name=data.broker_name, queue_id=i)
        for data in route.queue_datas
        if data.perm & _READ
        for i in range(data.read_queue_nums)
    }


def clamp_default_route(route: TopicRouteData, queue_nums: int) -> TopicRouteData:
    """The ``TBW102`` route with each broker's queue counts capped at ``queue_nums``: what a
    producer uses for a topic the brokers will auto-create."""
    clamped = route.model_copy(deep=True)
    for data in clamped.queue_datas:
        nums = min(queue_nums, data.read_queue_nums)
        data.read_queue_nums = nums
        data.write_queue_nums = nums
    return clamped


@dataclass
class PublishInfo:
    """A topic's writable queues and the producer's round-robin position."""

    topic: str
    queues: list[MessageQueue]
    ordered: bool = False
    #: True when the route is the topic's own, False for the TBW102 fallback.
    own_route: bool = True
    _counter: itertools.count[int] = field(default_factory=lambda: itertools.count(random.randrange(1 << 16)))

    @classmethod
    def from_route(cls, topic: str, route: TopicRouteData, *, own_route: bool = True) -> PublishInfo:
        queues, ordered = publish_queues(topic, route)
        return cls(topic, queues, ordered, own_route)

    @property
    def ok(self) -> bool:
        return bool(self.queues)

    def next_index(self) -> int:
        return next(self._counter)

    def select(self, last_broker: str | None = None, faults: LatencyFaults | None = None) -> MessageQueue:
        """The next queue round robin; avoids ``last_broker`` (the broker of a failed attempt)
        and, with ``faults``, brokers currently isolated for latency or errors."""
        queues = self.queues
        size = len(queues)
        if faults is not None:
            for _ in range(size):
                queue = queues[self.next_index() % size]
                if faults.available(queue.broker_name) and queue.broker_name != last_broker:
                    return queue
            for _ in range(size):
                queue = queues[self.next_index() % size]
                if faults.available(queue.broker_name):
                    return queue
            best = faults.least_bad([q.broker_name for q in queues])
            if best is not None:
                of_best = [q for q in queues if q.broker_name == best]
                return of_best[self.next_index() % len(of_best)]
            return queues[self.next_index() % size]
        if last_broker is not None:
            for _ in range(size):
                queue = queues[self.next_index() % size]
                if queue.broker_name != last_broker:
                    return queue
        return queues[self.next_index() % size]


#: Latency thresholds (seconds) and how long a broker at or above each is avoided.
LATENCY_STEPS = (0.05, 0.1, 0.55, 1.0, 2.0, 3.0, 15.0)
ISOLATION = (0.0, 0.0, 30.0, 60.0, 120.0, 180.0, 600.0)


@dataclass(slots=True)
class _Fault:
    latency: float
    available_at: float


class LatencyFaults:
    """Per-broker send latency memory: a broker whose last send was slow, or failed, is not
    chosen until its isolation ends (Java's ``MQFaultStrategy``)."""

    def __init__(self) -> None:
        self._faults: dict[str, _Fault] = {}

    def update(self, broker_name: str, latency: float, *, isolate: bool = False) -> None:
        duration = self.isolation_for(30.0 if isolate else latency)
        self._faults[broker_name] = _Fault(latency, time.monotonic() + duration)

    @staticmethod
    def isolation_for(latency: float) -> float:
        for step, isolation in zip(reversed(LATENCY_STEPS), reversed(ISOLATION)):
            if latency >= step:
                return isolation
        return 0.0

    def available(self, broker_name: str) -> bool:
        fault = self._faults.get(broker_name)
        return fault is None or time.monotonic() >= fault.available_at

    def least_bad(self, broker_names: Sequence[str]) -> str | None:
        """Among isolated brokers, the one that recovers first (lowest latency on a tie)."""
        known = [
            (f.available_at, f.latency, name) for name in set(broker_names) if (f := self._faults.get(name))
        ]
        if not known:
            return None
        return min(known)[2]
