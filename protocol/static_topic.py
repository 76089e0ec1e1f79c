"""Static topics (RocketMQ 5): logic queues mapped onto brokers' physical queues.

A static topic has a fixed number of *global* queue ids, each hosted by one broker's physical
queue at a time. ``mqadmin updateStaticTopic`` decides the mapping and sends each broker its
share (UPDATE_AND_CREATE_STATIC_TOPIC, 513, with a :class:`TopicQueueMappingDetail` body); the
brokers register a summary (:class:`TopicQueueMappingInfo`, global id -> local queue id of the
queues each leads) and the name server hands those summaries to 5.x clients in the route's
``topicQueueMappingByBroker``. Clients then address queues by global id on the broker that
leads them; the broker turns the global id and logical offsets into its physical queue and
offsets (:mod:`aiorocketmq.broker.static_topics`).

A global queue moved to another broker (``remappingStaticTopic``) keeps its history: its list of
:class:`LogicQueueMappingItem` grows by one item per move, the last being the leader, each item
saying where on which broker a range of logical offsets lives.
"""

from __future__ import annotations

from pydantic import Field

from .body import (
    GLOBAL_SCOPE,
    LogicQueueMappingItem,
    TopicConfig,
    TopicQueueMappingDetail,
    TopicQueueMappingInfo,
)

__all__ = [
    "GLOBAL_SCOPE",
    "LogicQueueMappingItem",
    "TopicConfigAndQueueMapping",
    "TopicQueueMappingDetail",
    "TopicQueueMappingInfo",
    "allocate",
    "block_round_up",
    "check_items",
    "find_item",
    "remap",
]


class TopicConfigAndQueueMapping(TopicConfig):
    """GET_TOPIC_CONFIG's answer: the topic's config, with its mapping when asked (``lo``)."""

    mapping_detail: TopicQueueMappingDetail | None = Field(None, alias="mappingDetail")


def find_item(items: list[LogicQueueMappingItem], logical: int) -> LogicQueueMappingItem | None:
    """The item holding logical offset ``logical``: the newest one starting at or before it
    (items whose start is undecided are skipped), else the oldest."""
    if not items:
        return None
    for item in reversed(items):
        if 0 <= item.logic_offset <= logical:
            return item
    return items[0]


def check_items(items: list[LogicQueueMappingItem]) -> str | None:
    """Why a global queue's item list cannot be accepted, or None."""
    previous: LogicQueueMappingItem | None = None
    for index, item in enumerate(items):
        if item.start_offset < 0 or item.gen < 0 or item.queue_id < 0:
            return f"the mapping item {item.to_wire()} has a negative start offset, gen or queue id"
        if previous is not None and item.gen <= previous.gen:
            return f"the mapping items' generations do not increase: {previous.gen} then {item.gen}"
        if index < len(items) - 1 and item.logic_offset < 0:
            return f"only the newest mapping item may leave its logic offset undecided: {item.to_wire()}"
        if previous is not None and 0 <= item.logic_offset < previous.logic_offset:
            return f"the mapping items' logic offsets do not increase: {previous.logic_offset} then {item.logic_offset}"
        previous = item
    return None


def allocate(
    topic: str,
    total_queues: int,
    targets: list[str],
    existing: dict[str, TopicConfigAndQueueMapping],
    now_ms: int,
) -> dict[str, TopicConfigAndQueueMapping]:
    """What ``updateStaticTopic`` sends each broker: the global queues ``existing`` mappings
    already deal out stay where they are; the new ones go one at a time to the least-loaded
    target broker (ties in name order; Apache's tool breaks them at random), each on a new
    physical queue of that broker. Every
    mapping gets the new epoch and total. Raises ValueError for what Apache's tool refuses."""
    led: dict[int, str] = {}
    epochs = [0]
    for bname, config in existing.items():
        detail = config.mapping_detail
        if detail is None:
            raise ValueError(f"Mapping info should not be null in broker {bname}")
        epochs.append(detail.epoch)
        for gid, items in detail.hosted_queues.items():
            if items and items[-1].bname == bname:
                led[gid] = bname
    if led and sorted(led) != list(range(len(led))):
        raise ValueError(f"the existing mapping does not lead global queues 0..{len(led) - 1}: {sorted(led)}")
    if total_queues < len(led):
        raise ValueError(f"Cannot decrease the queue num for static topic {total_queues} < {len(led)}")
    if total_queues == len(led):
        raise ValueError("The topic queue num is equal the existed queue num, do nothing")
    result = {name: config.model_copy(deep=True) for name, config in existing.items()}
    load = {name: 0 for name in targets}
    for bname in led.values():
        load[bname] = load.get(bname, 0) + 1
    for gid in range(len(led), total_queues):
        bname = min(sorted(n for n in targets), key=lambda n: load[n])
        load[bname] += 1
        if bname not in result:
            result[bname] = TopicConfigAndQueueMapping(
                topic_name=topic,
                read_queue_nums=0,
                write_queue_nums=0,
                mapping_detail=TopicQueueMappingDetail(topic=topic, bname=bname),
            )
        config = result[bname]
        config.read_queue_nums += 1
        config.write_queue_nums += 1
        assert config.mapping_detail is not None
        config.mapping_detail.hosted_queues[gid] = [
            LogicQueueMappingItem(gen=0, queue_id=config.write_queue_nums - 1, bname=bname)
        ]
    epoch = max(max(epochs) + 1000, now_ms)
    for config in result.values():
        assert config.mapping_detail is not None
        config.mapping_detail.epoch = epoch
        config.mapping_detail.total_queues = total_queues
    return result


#: Where a moved queue's new item starts: past the old one's end, rounded to this block.
BLOCK_SEQ_SIZE = 10_000


def block_round_up(offset: int, block: int = BLOCK_SEQ_SIZE) -> int:
    """Apache's ``blockSeqRoundUp``: the next block start, one further when less than half a
    block is left."""
    return (offset // block + (1 if offset % block < block // 2 else 2)) * block


def remap(
    topic: str,
    targets: list[str],
    existing: dict[str, TopicConfigAndQueueMapping],
    now_ms: int,
) -> tuple[dict[str, TopicConfigAndQueueMapping], dict[int, tuple[str, str]]]:
    """What ``remappingStaticTopic`` sends each broker to spread the topic's global queues
    evenly over ``targets`` (name order takes the remainder): a queue kept where its quota
    allows, else moved, its list growing by an item on a new physical queue of the new broker
    whose logic offset is undecided (-1) until the old broker's end is known. Returns the
    mappings and the moves (global id -> old broker, new broker). Raises ValueError for what
    Apache's tool refuses."""
    if not existing:
        raise ValueError("No topic route to do the remapping")
    led: dict[int, str] = {}
    epochs = []
    total = 0
    for bname, config in existing.items():
        detail = config.mapping_detail
        if detail is None:
            raise ValueError(f"Mapping info should not be null in broker {bname}")
        epochs.append(detail.epoch)
        total = max(total, detail.total_queues)
        for gid, items in detail.hosted_queues.items():
            if items and items[-1].bname == bname:
                led[gid] = bname
    if not targets:
        raise ValueError("Find none brokers, do nothing")
    names = sorted(targets)
    quota = {name: total // len(names) + (1 if i < total % len(names) else 0) for i, name in enumerate(names)}
    result = {name: config.model_copy(deep=True) for name, config in existing.items()}
    moves: dict[int, tuple[str, str]] = {}
    displaced = []
    for gid in sorted(led):
        bname = led[gid]
        if quota.get(bname, 0) > 0:
            quota[bname] -= 1
        else:
            displaced.append(gid)
    for gid in displaced:
        new = next(name for name in names if quota[name] > 0)
        quota[new] -= 1
        old = led[gid]
        if new not in result:
            result[new] = TopicConfigAndQueueMapping(
                topic_name=topic,
                read_queue_nums=0,
                write_queue_nums=0,
                mapping_detail=TopicQueueMappingDetail(topic=topic, bname=new),
            )
        mapped_in = result[new]
        mapped_in.read_queue_nums += 1
        mapped_in.write_queue_nums += 1
        old_detail = result[old].mapping_detail
        assert old_detail is not None and mapped_in.mapping_detail is not None
        history = old_detail.hosted_queues[gid]
        items = [*history, LogicQueueMappingItem(
            gen=history[-1].gen + 1, queue_id=mapped_in.write_queue_nums - 1, bname=new, logic_offset=-1
        )]  # fmt: skip
        old_detail.hosted_queues[gid] = items
        mapped_in.mapping_detail.hosted_queues[gid] = [item.model_copy() for item in items]
        moves[gid] = (old, new)
    epoch = max(max(epochs) + 1000, now_ms)
    for config in result.values():
        assert config.mapping_detail is not None
        config.mapping_detail.epoch = epoch
        config.mapping_detail.total_queues = total
    return result, moves
