"""What a pop may read, and reading it: the checks a POP request passes (permissions, limits,
its filter), where a group reads each queue from, the messages found there, and looking at
them without popping (PEEK_MESSAGE).

A group pops a queue from its own offset in the consumer-offset table (the same table pull
consumers commit to, so pull and POP groups share a topic and each has its own progress);
:meth:`QueueReader.advance` moves it past what a pop hands out. An orderly queue with a batch
out is read from that batch instead: nothing newer until it is settled, and an expired batch
is read again (attempt + 1). Nothing here writes to the revive log: :mod:`.receive` turns what
was read into check points.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from aiorocketmq.broker.store import GetStatus
from aiorocketmq.protocol.codes import Perm
from aiorocketmq.protocol.errors import (
    MessageIllegalError,
    NoPermissionError,
    SubscriptionGroupNotExistError,
    SubscriptionParseFailedError,
    TopicNotExistError,
)
from aiorocketmq.protocol.message import MessageExt, decode_record
from aiorocketmq.protocol.names import RETRY_PREFIX, parse_tag_expression, tag_codes
from aiorocketmq.protocol.pop import INIT_MODE_MAX, pop_retry_topic
from aiorocketmq.protocol.sql92 import Sql92Error

from ..config import BrokerConfig
from ..filters import RecordFilter, compile_expression, is_tag_type, record_filter
from ..groups import GroupTable
from ..offsets import OffsetTable
from ..topics import TopicTable
from .checkpoint import CheckPoint, CheckPointKey
from .errors import MAX_INVISIBLE_MS, MAX_POP_MESSAGES
from .inflight import InFlight

_PERM_READ = int(Perm.READ)


class Filter(NamedTuple):
    """What a pop keeps: tag hash codes and exact tags, or an SQL92 record filter."""

    codes: frozenset[int] | None
    tags: frozenset[str] | None
    matches: RecordFilter | None


@dataclass(slots=True)
class Read:
    """Messages read from one queue for a pop, before its check point is written."""

    topic: str
    queue_id: int
    messages: list[tuple[MessageExt, bytes, int]]  # message, record, delivery attempt
    next_offset: int
    #: Pending (check point, index) pairs an orderly re-pop supersedes.
    superseded: list[tuple[CheckPoint, int]] = field(default_factory=list)


class QueueReader:
    """Checks POP requests and reads the queues they name, from each group's offsets."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        state: InFlight,
        topics: TopicTable,
        groups: GroupTable,
        offsets: OffsetTable,
    ) -> None:
        self.config = config
        self.state = state
        self.store = state.store
        self.topics = topics
        self.groups = groups
        self.offsets = offsets

    def check(
        self,
        group: str,
        topic: str,
        queue_id: int | None,
        max_messages: int,
        invisible_ms: int,
        expression_type: str,
        expression: str,
    ) -> Filter:
        config = self.config
        if not config.readable:
            raise NoPermissionError(f"the broker[{config.broker_ip1}] pop message is forbidden")
        group_config = self.groups.find(group)
        if group_config is None:
            raise SubscriptionGroupNotExistError(f"subscription group [{group}] does not exist")
        if not group_config.consume_enable:
            raise NoPermissionError(f"subscription group no permission, {group}")
        topic_config = self.topics.get(topic)
        if topic_config is None:
            raise TopicNotExistError(f"topic[{topic}] not exist, apply first please!")
        if not topic_config.perm & _PERM_READ:
            raise NoPermissionError(f"the topic[{topic}] peeking message is forbidden")
        if queue_id is not None and queue_id >= 0 and queue_id >= topic_config.read_queue_nums:
            raise MessageIllegalError(
                f"queueId[{queue_id}] is illegal, topic:[{topic}] readQueueNums:[{topic_config.read_queue_nums}]"
            )
        if not 0 < max_messages <= MAX_POP_MESSAGES:
            raise MessageIllegalError(f"max messages {max_messages} is outside [1, {MAX_POP_MESSAGES}]")
        if not 0 <= invisible_ms <= MAX_INVISIBLE_MS:
            raise MessageIllegalError(f"invisible time {invisible_ms} ms is outside [0, {MAX_INVISIBLE_MS}]")
        if not is_tag_type(expression_type):
            # SQL92 (enablePropertyFilter): the store evaluates it on each record's properties.
            if not config.enable_property_filter:
                raise MessageIllegalError(
                    f"The broker does not support consumer to filter message by {expression_type}"
                )
            try:
                return Filter(None, None, record_filter(compile_expression(expression, expression_type)))
            except Sql92Error as exc:
                raise SubscriptionParseFailedError(
                    f"parse the consumer's subscription failed: {exc}"
                ) from None
        tags = parse_tag_expression(expression)
        return Filter(tag_codes(expression), frozenset(tags) if tags else None, None)

    # -- a group's offsets --------------------------------------------------------------------

    def start_offset(self, group: str, topic: str, queue_id: int, init_mode: int) -> int:
        # The consumer-offset table is where a POP group's progress lives (what mqadmin shows
        # and resets), shared with pull groups, each group under its own key.
        offset = self.offsets.query(group, topic, queue_id)
        if offset >= 0:
            return offset
        store = self.store
        low = store.get_min_offset(topic, queue_id)
        if topic.startswith(RETRY_PREFIX) or init_mode != INIT_MODE_MAX or low <= 0:
            # A queue still holding its first message is read from there (a group that
            # pops right after the first sends gets them), as 4.x brokers do for young queues.
            offset = low
        else:
            offset = store.get_max_offset(topic, queue_id)
        self.offsets.commit(group, topic, queue_id, offset)
        return offset

    def advance(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        if self.offsets.query(group, topic, queue_id) != offset:
            self.offsets.commit(group, topic, queue_id, offset)

    # -- reading ------------------------------------------------------------------------------

    def read_queue(
        self,
        group: str,
        topic: str,
        queue_id: int,
        wanted: int,
        flt: Filter,
        init_mode: int,
    ) -> Read | None:
        offset = self.start_offset(group, topic, queue_id, init_mode)
        messages: list[tuple[MessageExt, bytes, int]] = []
        store = self.store
        for _ in range(8):
            result = store.get_messages(
                group, topic, queue_id, offset, wanted - len(messages), flt.codes, flt.matches
            )
            if result.status is GetStatus.FOUND:
                for buf in result.buffers:
                    record = bytes(buf)
                    msg = decode_record(record)[0]
                    if flt.tags is not None and msg.tags not in flt.tags:
                        continue  # a tag-hash collision: not for this group
                    messages.append((msg, record, msg.reconsume_times + 1))
            moved = result.next_begin_offset != offset
            offset = result.next_begin_offset
            # Scan on only past entries that did not match (or an offset corrected forward).
            if messages or not moved:
                break
        return Read(topic, queue_id, messages, offset)

    def read_orderly(
        self,
        group: str,
        topic: str,
        queue_id: int,
        wanted: int,
        flt: Filter,
        init_mode: int,
        now: int,
    ) -> Read | None:
        state = self.state
        held = state.orderly.get((group, topic, queue_id))
        if held:
            if any(ck.deadline > now for ck in held):
                return None  # a batch of this queue is out: the queue waits for it
            pending = sorted(
                ((ck.offsets[i], ck, i) for ck in held for i in ck.pending()), key=lambda entry: entry[0]
            )
            messages: list[tuple[MessageExt, bytes, int]] = []
            superseded: list[tuple[CheckPoint, int]] = []
            for offset, ck, i in pending[:wanted]:
                loaded = state.load_record(topic, queue_id, offset)
                superseded.append((ck, i))
                if loaded is not None:
                    messages.append((loaded[0], loaded[1], ck.attempts[i] + 1))
            if superseded and not messages:
                # Every message of the batch is gone from the store: nothing to hand out.
                by_ck: dict[CheckPointKey, tuple[CheckPoint, list[int]]] = {}
                for ck, i in superseded:
                    by_ck.setdefault(ck.key, (ck, []))[1].append(i)
                for ck, indices in by_ck.values():
                    state.resolve(ck, indices, wake=False)
                return None
            offset = self.offsets.query(group, topic, queue_id)
            return Read(topic, queue_id, messages, offset, superseded)
        return self.read_queue(group, topic, queue_id, wanted, flt, init_mode)

    def orderly_opens(self, group: str, topic: str, queue_id: int | None) -> int | None:
        """The earliest time a blocked orderly queue of ``topic`` opens again."""
        soonest: int | None = None
        for (g, t, q), held in self.state.orderly.items():
            if g != group or t != topic or (queue_id is not None and queue_id >= 0 and q != queue_id):
                continue
            if held:
                opens = max(ck.deadline for ck in held)
                soonest = opens if soonest is None else min(soonest, opens)
        return soonest

    # -- looking without popping (RocketMQ 5's PEEK_MESSAGE, NOTIFICATION) -------------------

    def pop_offset(self, group: str, topic: str, queue_id: int) -> int:
        offset = self.offsets.query(group, topic, queue_id)
        return offset if offset >= 0 else self.store.get_min_offset(topic, queue_id)

    def looked_at(self, group: str, topic: str, queue_id: int) -> list[tuple[str, int]]:
        """The queues a peek or notification looks at: the topic's (one, or all for a
        negative id), then the group's POP retry topic's."""
        config = self.topics.get(topic)
        queue_nums = config.read_queue_nums if config is not None else 0
        queues = [queue_id] if queue_id >= 0 else list(range(queue_nums))
        retry = pop_retry_topic(group, topic)
        return [(topic, q) for q in queues] + [(retry, q) for q in self.store.queue_ids(retry)]

    def peek(self, *, group: str, topic: str, queue_id: int, max_messages: int) -> tuple[int, list[bytes]]:
        """Up to ``max_messages`` stored records a pop would look at next, and how many wait in
        all: nothing is popped, no offset moves, nothing becomes invisible."""
        self.check(group, topic, queue_id, max_messages, 0, "TAG", "*")
        store = self.store
        rest = 0
        records: list[bytes] = []
        for stored_topic, q in self.looked_at(group, topic, queue_id):
            offset = self.pop_offset(group, stored_topic, q)
            rest += max(0, store.get_max_offset(stored_topic, q) - offset)
            if len(records) >= max_messages:
                continue
            result = store.get_messages(
                group, stored_topic, q, offset, max_messages - len(records), None, None
            )
            if result.status is GetStatus.FOUND:
                records.extend(bytes(buf) for buf in result.buffers)
        return rest, records

    def has_messages(self, group: str, topic: str, queue_id: int) -> bool:
        store = self.store
        return any(
            store.get_max_offset(t, q) > self.pop_offset(group, t, q)
            for t, q in self.looked_at(group, topic, queue_id)
        )
