"""Pure parts of the SDK, without servers: allocation strategies, process queues, tag
expressions, publish routes and queue selection, latency fault tolerance, offset stores,
start-offset rules, header field names."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from aiorocketmq.client import allocate_averagely, allocate_averagely_by_circle, consistent_hash
from aiorocketmq.client.allocation import resolve_strategy
from aiorocketmq.client.client_instance import (
    ClientInstance,
    ClientOptions,
    RequestHeader,
    parse_namesrv,
    wire_fields,
)
from aiorocketmq.client.errors import ClientError, summarize_causes
from aiorocketmq.client.offset_store import NOT_FOUND, LocalFileOffsetStore, _MemoryTable
from aiorocketmq.client.process_queue import ProcessQueue
from aiorocketmq.client.producer import Producer
from aiorocketmq.client.pull import pull, pull_raw
from aiorocketmq.client.pull_loop import PULL_DELAY_ON_FLOW_CONTROL, PulledQueue, pull_queue
from aiorocketmq.client.rebalance import Rebalance
from aiorocketmq.client.routing import (
    LatencyFaults,
    PublishInfo,
    clamp_default_route,
    publish_queues,
    subscribe_queues,
)
from aiorocketmq.client.subscription import (
    build_subscription,
    check_topic,
    filter_by_tags,
    parse_tags,
    tag_filter,
)
from aiorocketmq.client.types import ConsumeFrom
from aiorocketmq.protocol.body import (
    BrokerData,
    ConsumeFromWhere,
    MessageModel,
    MessageQueue,
    QueueData,
    TopicRouteData,
)
from aiorocketmq.protocol.codes import PullSysFlag, RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import (
    BrokerError,
    ConnectionClosedError,
    MessageIllegalError,
    MQError,
    NoBuyerIdError,
    NoPermissionError,
    NoRouteError,
    NotInCurrentUnitError,
    ProtocolError,
    RequestTimeoutError,
    ServerSystemError,
    ServiceNotAvailableError,
    SystemBusyError,
    TopicNotExistError,
    error_for_code,
)
from aiorocketmq.protocol.headers import PullMessageRequestHeader, SendMessageRequestHeaderV2
from aiorocketmq.protocol.message import Message, MessageExt, java_hash


def queues(n: int, topic: str = "T", broker: str = "b") -> list[MessageQueue]:
    return [MessageQueue(topic=topic, broker_name=broker, queue_id=i) for i in range(n)]


def ext(offset: int, body: bytes = b"x", tags: str | None = None) -> MessageExt:
    msg = MessageExt("T", body, queue_offset=offset)
    if tags:
        msg.tags = tags
    return msg


# -- allocation -------------------------------------------------------------------------------


def test_averagely_splits_eight_queues_three_three_two() -> None:
    mqs = queues(8)
    cids = ["c0", "c1", "c2"]
    shares = [allocate_averagely("g", c, mqs, cids) for c in cids]
    assert [[q.queue_id for q in s] for s in shares] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert [len(allocate_averagely("g", c, queues(2), cids)) for c in cids] == [1, 1, 0]
    assert allocate_averagely("g", "stranger", mqs, cids) == []
    with pytest.raises(ValueError):
        allocate_averagely("g", "c0", mqs, [])


def test_averagely_by_circle_deals_round_robin() -> None:
    mqs = queues(8)
    cids = ["a", "b", "c"]
    assert [[q.queue_id for q in allocate_averagely_by_circle("g", c, mqs, cids)] for c in cids] == [
        [0, 3, 6],
        [1, 4, 7],
        [2, 5],
    ]


@pytest.mark.parametrize("strategy", ["averagely", "averagely_by_circle", "consistent_hash"])
def test_every_strategy_covers_all_queues_exactly_once(strategy: str) -> None:
    allocate = resolve_strategy(strategy)
    mqs = queues(16, broker="b1") + queues(8, broker="b2")
    cids = [f"10.0.0.{i}@pid#{i}" for i in range(5)]
    shares = [allocate("g", c, sorted(mqs), sorted(cids)) for c in cids]
    assert sorted(q for share in shares for q in share) == sorted(mqs)


def test_consistent_hash_moves_only_the_leavers_queues() -> None:
    allocate = consistent_hash(virtual_nodes=10)
    mqs = queues(32)
    before = {c: set(allocate("g", c, mqs, ["a", "b", "c"])) for c in "abc"}
    after = {c: set(allocate("g", c, mqs, ["a", "c"])) for c in "ac"}
    assert before["a"] <= after["a"] and before["c"] <= after["c"]
    assert after["a"] | after["c"] == set(mqs)


def test_unknown_strategy_name_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown allocation strategy"):
        resolve_strategy("fastest")


# -- process queue ----------------------------------------------------------------------------


def test_process_queue_commits_the_smallest_offset_in_flight() -> None:
    pq = ProcessQueue()
    msgs = [ext(i, b"abc") for i in range(10, 15)]
    assert pq.put(msgs) is True
    assert (pq.count, pq.size, pq.max_span) == (5, 15, 4)
    assert pq.put([ext(12)]) is False  # duplicate ignored, already "consuming"
    assert pq.count == 5
    assert pq.remove([msgs[1], msgs[3]]) == 10  # 10 still in flight
    assert pq.remove([msgs[0]]) == 12
    assert pq.remove([msgs[2], msgs[4]]) == 15  # empty: one past the newest
    assert (pq.count, pq.size) == (0, 0)
    assert ProcessQueue().remove([msgs[0]]) == -1


def test_process_queue_progress_covers_filtered_tail() -> None:
    pq = ProcessQueue()
    msgs = [ext(0), ext(1)]
    pq.put(msgs)
    pq.pulled_up_to(5)  # offsets 2..4 were filtered out by tag
    assert pq.remove(msgs[:1]) == 1
    assert pq.remove(msgs[1:]) == 5


def test_process_queue_orderly_take_commit_and_reconsume() -> None:
    pq = ProcessQueue()
    pq.put([ext(i) for i in range(5)])
    first = pq.take(2)
    assert [m.queue_offset for m in first] == [0, 1]
    assert pq.commit() == 2
    second = pq.take(2)
    pq.reconsume(second)  # failed: back at the head, in order
    assert [m.queue_offset for m in pq.take(3)] == [2, 3, 4]
    pq.rollback()
    assert [m.queue_offset for m in pq.snapshot()] == [2, 3, 4]
    assert pq.commit() == -1
    assert pq.count == 3
    pq.take(3)
    assert pq.commit() == 5 and pq.count == 0
    assert pq.take(1) == [] and pq.consuming is False


# -- subscriptions ----------------------------------------------------------------------------


def test_tag_expressions_parse_like_java() -> None:
    assert parse_tags("*") == [] and parse_tags("") == [] and parse_tags(None) == []
    assert parse_tags(" TagA || TagC ||TagD|| TagA ") == ["TagA", "TagC", "TagD"]
    with pytest.raises(ClientError):
        parse_tags("|| ||")
    sub = build_subscription("T", "TagA || 标签")
    assert sub.tags_set == ["TagA", "标签"]
    assert sub.code_set == [java_hash("TagA"), java_hash("标签")]
    assert sub.sub_string == "TagA || 标签" and sub.expression_type == "TAG" and sub.sub_version > 0
    assert build_subscription("T").sub_string == "*"


def test_exact_tag_filter_drops_hash_collisions_and_untagged() -> None:
    # "Aa" and "BB" share a Java hash: the broker lets both through, the client must not.
    assert java_hash("Aa") == java_hash("BB")
    msgs = [ext(0, tags="Aa"), ext(1, tags="BB"), ext(2)]
    assert [m.queue_offset for m in filter_by_tags(msgs, tag_filter(["Aa"]))] == [0]
    assert filter_by_tags(msgs, tag_filter([])) is msgs


def test_topic_names_are_checked() -> None:
    check_topic("Orders_2024-x")
    for bad in ("", "a b", "x" * 128, "tópico"):
        with pytest.raises(ClientError):
            check_topic(bad)


# -- routes -----------------------------------------------------------------------------------


def route(*datas: tuple[str, int, int, int], masters: tuple[str, ...] | None = None) -> TopicRouteData:
    names = [d[0] for d in datas]
    masters = tuple(names) if masters is None else masters
    return TopicRouteData(
        queue_datas=[
            QueueData(broker_name=n, read_queue_nums=r, write_queue_nums=w, perm=p) for n, r, w, p in datas
        ],
        broker_datas=[
            BrokerData(cluster="c", broker_name=n, broker_addrs={0 if n in masters else 1: f"10.0.0.1:{i}"})
            for i, n in enumerate(names)
        ],
    )


def test_publish_and_subscribe_queues_follow_permissions_and_masters() -> None:
    r = route(
        ("b2", 2, 2, 6),
        ("b1", 4, 3, 6),
        ("ro", 2, 2, 4),
        ("wo", 2, 2, 2),
        ("slave", 2, 2, 6),
        masters=("b1", "b2", "ro", "wo"),
    )
    pubs, ordered = publish_queues("T", r)
    assert not ordered
    assert [(q.broker_name, q.queue_id) for q in pubs] == [
        ("b1", 0),
        ("b1", 1),
        ("b1", 2),
        ("b2", 0),
        ("b2", 1),
        ("wo", 0),
        ("wo", 1),
    ]
    subs = subscribe_queues("T", r)
    assert {q.broker_name for q in subs} == {"b1", "b2", "ro", "slave"}
    assert len([q for q in subs if q.broker_name == "b1"]) == 4
    r.order_topic_conf = "b2:2;b1:1"
    pubs, ordered = publish_queues("T", r)
    assert ordered and [(q.broker_name, q.queue_id) for q in pubs] == [("b2", 0), ("b2", 1), ("b1", 0)]


def test_default_route_is_clamped_to_four_queues() -> None:
    clamped = clamp_default_route(route(("b1", 8, 8, 7)), 4)
    assert (clamped.queue_datas[0].read_queue_nums, clamped.queue_datas[0].write_queue_nums) == (4, 4)


def test_queue_selection_round_robins_and_avoids_the_failed_broker() -> None:
    info = PublishInfo.from_route("T", route(("b1", 2, 2, 6), ("b2", 2, 2, 6)))
    picks = [info.select() for _ in range(8)]
    assert {(q.broker_name, q.queue_id) for q in picks} == {(b, i) for b in ("b1", "b2") for i in (0, 1)}
    assert all(picks[i] != picks[i + 1] for i in range(7))
    assert all(info.select(last_broker="b1").broker_name == "b2" for _ in range(10))
    only_b1 = PublishInfo.from_route("T", route(("b1", 2, 2, 6)))
    assert only_b1.select(last_broker="b1").broker_name == "b1"  # no other broker: same one


def test_latency_faults_isolate_slow_and_failing_brokers() -> None:
    assert LatencyFaults.isolation_for(0.01) == 0
    assert LatencyFaults.isolation_for(0.6) == 30
    assert LatencyFaults.isolation_for(30) == 600
    faults = LatencyFaults()
    faults.update("b1", 0.001, isolate=True)
    faults.update("b2", 0.001)
    assert not faults.available("b1") and faults.available("b2")
    info = PublishInfo.from_route("T", route(("b1", 2, 2, 6), ("b2", 2, 2, 6)))
    assert {info.select(faults=faults).broker_name for _ in range(10)} == {"b2"}
    faults.update("b2", 20.0)
    assert faults.least_bad(["b1", "b2"]) == "b1"  # both isolated: b1 recovers first
    assert info.select(faults=faults).broker_name == "b1"


# -- offset stores ----------------------------------------------------------------------------


def test_memory_offsets_only_move_forward_when_asked() -> None:
    table = _MemoryTable()
    q = queues(1)[0]
    table.update(q, 10, increase_only=True)
    table.update(q, 7, increase_only=True)
    assert table.read_memory(q) == 10
    table.update(q, 7, increase_only=False)
    assert table.read_memory(q) == 7
    table.update(q, -1, increase_only=False)
    assert table.read_memory(q) == 7
    table.remove(q)
    assert table.read_memory(q) == NOT_FOUND


async def test_local_file_offsets_survive_restarts_and_a_corrupt_file(tmp_path: Path) -> None:
    q0, q1, q2 = queues(3, topic="Topic%1")
    store = LocalFileOffsetStore(tmp_path, "10.0.0.1@DEFAULT", "group")
    store.update(q0, 5, increase_only=True)
    store.update(q1, 9, increase_only=True)
    store.update(q2, 1, increase_only=True)
    await store.persist_all([q0, q1])
    data = json.loads(store.path.read_text())
    assert data == {"offsetTable": {"Topic%1@b@0": 5, "Topic%1@b@1": 9}}
    store.update(q0, 6, increase_only=True)
    await store.persist_all([q0, q1])
    assert json.loads(store.backup_path.read_text())["offsetTable"]["Topic%1@b@0"] == 5
    reloaded = LocalFileOffsetStore(tmp_path, "10.0.0.1@DEFAULT", "group")
    await reloaded.load()
    assert (reloaded.read_memory(q0), reloaded.read_memory(q1), reloaded.read_memory(q2)) == (6, 9, NOT_FOUND)
    store.path.write_text("{not json")
    fallback = LocalFileOffsetStore(tmp_path, "10.0.0.1@DEFAULT", "group")
    assert await fallback.read_store(q0) == 5  # from the backup
    assert await fallback.read_store(q2) == NOT_FOUND


# -- start offsets ----------------------------------------------------------------------------


class _FakeStore(_MemoryTable):
    def __init__(self, stored: int) -> None:
        super().__init__()
        self.stored = stored

    async def read_store(self, queue: MessageQueue) -> int:
        return self.stored


class _FakeInstance:
    def __init__(self) -> None:
        self.asked: list[tuple[int, dict[str, Any]]] = []

    async def find_broker_addr(self, broker_name: str, **kwargs: Any) -> str:
        return "10.0.0.1:10911"

    async def call(self, addr: str, code: int, header: RequestHeader, **kwargs: Any) -> RemotingCommand:
        self.asked.append((code, wire_fields(header)))
        offset = {RequestCode.GET_MAX_OFFSET: 500, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: 123}[
            RequestCode(code)
        ]
        return RemotingCommand(0, ext_fields={"offset": str(offset)})


class _FakeOwner:
    group = "g"
    model = MessageModel.CLUSTERING

    def __init__(self, stored: int) -> None:
        self._instance = _FakeInstance()
        self._offset_store = _FakeStore(stored)


@pytest.mark.parametrize(
    ("consume_from", "stored", "topic", "expected", "code"),
    [
        (ConsumeFrom.LAST_OFFSET, 42, "T", 42, None),
        (ConsumeFrom.LAST_OFFSET, -1, "T", 500, RequestCode.GET_MAX_OFFSET),
        (ConsumeFrom.LAST_OFFSET, -1, "%RETRY%g", 0, None),
        (ConsumeFrom.FIRST_OFFSET, -1, "T", 0, None),
        (ConsumeFrom.TIMESTAMP, -1, "T", 123, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP),
        (ConsumeFrom.TIMESTAMP, -1, "%RETRY%g", 500, RequestCode.GET_MAX_OFFSET),
        (ConsumeFrom.LAST_OFFSET, -2, "T", -1, None),
    ],
)
async def test_start_offset_rules(
    consume_from: ConsumeFrom, stored: int, topic: str, expected: int, code: int | None
) -> None:
    owner = _FakeOwner(stored)
    rebalance = Rebalance(owner, allocate_averagely, consume_from, consume_timestamp_ms=1_700_000_000_000)  # type: ignore[arg-type]
    assert await rebalance.start_offset(MessageQueue(topic=topic, broker_name="b", queue_id=3)) == expected
    assert [c for c, _ in owner._instance.asked] == ([code] if code else [])
    if code == RequestCode.SEARCH_OFFSET_BY_TIMESTAMP:
        assert owner._instance.asked[0][1]["timestamp"] == 1_700_000_000_000


def test_consume_from_maps_to_the_wire_names() -> None:
    assert ConsumeFrom.LAST_OFFSET.wire is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    assert ConsumeFrom.TIMESTAMP.wire is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP


# -- wire fields ------------------------------------------------------------------------------


async def test_send_header_fields_match_the_declared_v2_header() -> None:
    """The producer writes the V2 header as a plain dict for speed: it must say exactly what
    the declared model says."""
    instance = ClientInstance("10.0.0.1@x", ["127.0.0.1:9876"], ClientOptions())
    producer = Producer._internal(instance, "pg")
    msg = Message(
        "%RETRY%cg", b"body", tags="t", properties={"RECONSUME_TIME": "3", "MAX_RECONSUME_TIMES": "5"}
    )
    fields, _body, uniq = producer._prepare(msg)
    header = SendMessageRequestHeaderV2.from_fields(fields)
    wire = header.to_fields()
    assert {k: wire[k] for k in fields} == fields  # same names, same values
    assert set(wire) - set(fields) == {"m"}  # only left-out defaults (batch = false)
    assert (header.producer_group, header.topic, header.reconsume_times, header.max_reconsume_times) == (
        "pg",
        "%RETRY%cg",
        3,
        5,
    )
    assert "RECONSUME_TIME" not in header.properties and uniq in header.properties
    big, _, _ = producer._prepare(Message("T", b"z" * 5000))
    assert big["f"] & 0x1
    batch_fields, _, ids = producer._prepare_batch([Message("T", b"1"), Message("T", b"2")])
    assert SendMessageRequestHeaderV2.from_fields(batch_fields).batch is True
    assert len(ids.split(",")) == 2


class _CapturingInstance:
    def __init__(self) -> None:
        self.brokers = {"b": {0: "10.0.0.1:10911"}}
        self.pull_from_broker: dict[MessageQueue, int] = {}
        self.sent: list[dict[str, Any]] = []

    async def invoke(self, addr: str, code: int, header: RequestHeader, **kwargs: Any) -> RemotingCommand:
        self.sent.append(wire_fields(header))
        return RemotingCommand(19, ext_fields={"nextBeginOffset": "7", "minOffset": "0", "maxOffset": "7"})


async def test_pull_header_fields_match_the_declared_pull_header() -> None:
    """Pulls fill a cached wire map for speed: it must say exactly what the model says."""
    instance = _CapturingInstance()
    queue = MessageQueue(topic="T", broker_name="b", queue_id=2)
    for offset, expression in ((5, None), (6, "a || b")):
        await pull_raw(
            instance,  # type: ignore[arg-type]
            "cg",
            queue,
            offset,
            max_nums=16,
            sys_flag=1,
            commit_offset=4,
            suspend=15.0,
            sub_version=9,
            expression=expression,
        )
    for fields, (offset, expression) in zip(instance.sent, ((5, None), (6, "a || b"))):
        header = PullMessageRequestHeader.from_fields(fields)
        assert header.to_fields() == fields  # same names, same values, nothing left out
        assert (header.consumer_group, header.topic, header.queue_id, header.queue_offset) == (
            "cg",
            "T",
            2,
            offset,
        )
        assert (header.max_msg_nums, header.commit_offset, header.suspend_timeout_millis) == (16, 4, 15000)
        assert (header.sub_version, header.subscription, header.expression_type) == (9, expression, "TAG")
        assert header.sys_flag == (1 | PullSysFlag.SUBSCRIPTION if expression else 1)
    result = await pull(instance, "cg", queue, 7)  # type: ignore[arg-type]
    assert (result.next_begin_offset, result.min_offset, result.max_offset) == (7, 0, 7)
    assert PullMessageRequestHeader.wire("queue_offset") == "queueOffset"
    with pytest.raises(KeyError):
        PullMessageRequestHeader.wire("queueOffset")  # field names, not wire names


def test_name_server_addresses_are_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_namesrv("a:1; b:2;") == ["a:1", "b:2"]
    assert parse_namesrv(["a:1"]) == ["a:1"]
    monkeypatch.setenv("NAMESRV_ADDR", "c:3")
    assert parse_namesrv(None) == ["c:3"]
    monkeypatch.delenv("NAMESRV_ADDR")
    with pytest.raises(ClientError, match="no name server"):
        parse_namesrv(None)
    with pytest.raises(ClientError, match="host:port"):
        parse_namesrv("nohost")


async def test_work_queue_hands_items_to_waiting_workers_in_order() -> None:
    from aiorocketmq.client.concurrent_dispatch import WorkQueue

    work = WorkQueue()
    got: list[Any] = []

    async def worker() -> None:
        while (item := await work.get()) is not None:
            got.append(item)

    task = asyncio.ensure_future(worker())
    await asyncio.sleep(0)
    for i in range(5):
        work.put(i)  # type: ignore[arg-type]
    work.put(None)
    await task
    assert got == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("backlog_size", [200, 1000])
async def test_a_worker_with_a_short_backlog_lets_the_loop_run_every_few_messages(backlog_size: int) -> None:
    """A short backlog must not hold the loop for the whole of it: the answers to the next
    pulls, heartbeats and timers would wait for the worker's turn to end. A long one is worked
    down to YIELD_BACKLOG first (turns would only fill the process queues sooner)."""
    from aiorocketmq.client import PushConsumer
    from aiorocketmq.client.concurrent_dispatch import ConcurrentDispatch
    from aiorocketmq.client.pull_loop import YIELD_AFTER, YIELD_BACKLOG
    from aiorocketmq.client.types import ConsumeResult

    consumer = PushConsumer("yielding", "127.0.0.1:1", concurrency=1)
    loop = asyncio.get_running_loop()
    consumed = 0
    seen_by_loop: list[int] = []
    backlog = [ext(i) for i in range(backlog_size)]
    all_consumed = asyncio.Event()

    @consumer.listener
    def handle(messages: list[MessageExt]) -> ConsumeResult:
        nonlocal consumed
        if consumed == 0:
            loop.call_soon(lambda: seen_by_loop.append(consumed))
        consumed += len(messages)
        if consumed == len(backlog):
            all_consumed.set()
        return ConsumeResult.SUCCESS

    dispatch = ConcurrentDispatch(consumer)
    pq = ProcessQueue()
    pq.put(backlog)
    dispatch.submit(backlog, pq, MessageQueue(topic="T", broker_name="b", queue_id=0))
    dispatch.start()
    try:
        await asyncio.wait_for(all_consumed.wait(), 5)
    finally:
        await dispatch.stop(1.0)
    assert seen_by_loop, "the loop never ran the callback"
    # The callback queued during the first call ran at the first turn: once the backlog was
    # under YIELD_BACKLOG and the worker had handed over YIELD_AFTER more.
    first_turn = max(YIELD_AFTER, backlog_size - YIELD_BACKLOG)
    assert first_turn <= seen_by_loop[0] <= first_turn + YIELD_AFTER
    assert seen_by_loop[0] < backlog_size
    assert pq.count == 0


async def test_flow_control_wakes_when_the_queue_drains_to_its_low_water_mark() -> None:
    pq = ProcessQueue()
    msgs = [ext(i) for i in range(10)]
    pq.put(msgs)
    await pq.wait_for_space(low_water=20, timeout=5)  # already below: returns at once
    waiter = asyncio.ensure_future(pq.wait_for_space(low_water=4, timeout=5))
    await asyncio.sleep(0)
    pq.remove(msgs[:3])
    await asyncio.sleep(0)
    assert not waiter.done()  # 7 still waiting
    pq.remove(msgs[3:6])
    await asyncio.wait_for(waiter, 1)  # 4 left: woken long before the timeout
    began = asyncio.get_running_loop().time()
    await pq.wait_for_space(low_water=0, timeout=0.05)  # limits other than the count: timeout
    assert asyncio.get_running_loop().time() - began >= 0.04


class _SpanLimitedConsumer:
    """A pulling consumer whose queue is over its span limit with few messages waiting: the
    shared pull loop must wait between looks, not spin (which would freeze the event loop)."""

    group = "g"
    queue_threshold = 1000
    queue_size_threshold = 1 << 30
    _rebalance: Any = None
    _instance: Any = None

    def __init__(self, looks: int) -> None:
        self.looks = looks
        self.seen = 0

    def _pulling(self) -> bool:
        return True

    def _is_paused(self, queue: MessageQueue) -> bool:
        return False

    def _over_limits(self, pulled: PulledQueue) -> bool:
        self.seen += 1
        if self.seen >= self.looks:
            pulled.pq.dropped = True  # ends the loop
        return True

    def _next_pull(self, pulled: PulledQueue) -> None:
        raise AssertionError("a queue over its limits must not be pulled")


async def test_the_pull_loop_waits_while_a_queue_is_over_a_limit_other_than_the_count() -> None:
    pq = ProcessQueue()
    pq.put([ext(0), ext(5000)])  # 2 messages, span 5000
    owner = _SpanLimitedConsumer(looks=5)
    began = asyncio.get_running_loop().time()
    await asyncio.wait_for(pull_queue(owner, PulledQueue(queues(1)[0], pq, 0)), 5)  # type: ignore[arg-type]
    assert owner.seen == 5
    # four waits of PULL_DELAY_ON_FLOW_CONTROL between the five looks
    assert asyncio.get_running_loop().time() - began >= 4 * PULL_DELAY_ON_FLOW_CONTROL * 0.9


def test_retriable_is_a_property_of_the_error_class() -> None:
    retriable: set[type[MQError]] = {
        ConnectionClosedError,
        RequestTimeoutError,
        NoRouteError,
        TopicNotExistError,
        ServiceNotAvailableError,
        ServerSystemError,
        SystemBusyError,
        NoPermissionError,
        NoBuyerIdError,
        NotInCurrentUnitError,
    }
    for cls in retriable:
        assert cls.retriable, cls
    for cls in (MQError, ClientError, ProtocolError, MessageIllegalError, BrokerError):
        assert not cls.retriable, cls
    assert error_for_code(ResponseCode.SYSTEM_BUSY, "busy").retriable
    assert not error_for_code(ResponseCode.MESSAGE_ILLEGAL).retriable
    assert not error_for_code(9999).retriable  # an unknown code is not retried


# -- shutdown ---------------------------------------------------------------------------------


@pytest.mark.parametrize("turns", range(4))
async def test_a_cancel_landing_as_the_rebalance_loop_wakes_still_stops_it(turns: int) -> None:
    """The instance's shutdown cancels its rebalance loop; a cancel that lands as a wake-up
    fires must not be lost (Python 3.11's ``wait_for`` lost it, and shutdown hung)."""
    instance = ClientInstance("10.0.0.1@x", ["127.0.0.1:9876"], ClientOptions())
    instance.start()
    await asyncio.sleep(0)  # the loop is parked on its wake-up event
    instance.rebalance_soon()
    for _ in range(turns):  # the cancel lands 0..3 loop turns after the wake-up
        await asyncio.sleep(0)
    stopping = asyncio.ensure_future(instance.shutdown())
    done, _ = await asyncio.wait({stopping}, timeout=5)
    assert stopping in done, "shutdown hung on a rebalance loop that ignored its cancel"


def test_summarized_causes_name_each_cause_once_with_its_count() -> None:
    refused = ConnectionClosedError("cannot connect to 10.0.0.1:10911: [Errno 111] Connect call failed")
    causes: list[tuple[str | None, BaseException]] = [("broker-a", refused)] * 5
    causes += [
        ("broker-b", RequestTimeoutError("10.0.0.2:10911: no response to SEND_MESSAGE_V2 within 1.5s")),
        ("broker-b", RequestTimeoutError("10.0.0.2:10911: no response to SEND_MESSAGE_V2 within 0.25s")),
        ("broker-b", BrokerError("[TIMEOUT_CLEAN_QUEUE]broker busy", code=2)),
        ("broker-a", BrokerError("[TIMEOUT_CLEAN_QUEUE]broker busy", code=2)),
        (None, TimeoutError("send to 'T' ran out of its 3s budget")),
    ]
    assert summarize_causes(causes) == (
        "broker-a: cannot connect to 10.0.0.1:10911: [Errno 111] Connect call failed (x5); "
        "broker-b: 10.0.0.2:10911: no response to SEND_MESSAGE_V2 within 0.25-1.5s (x2); "
        "broker-b: SYSTEM_BUSY(2): [TIMEOUT_CLEAN_QUEUE]broker busy; "
        "broker-a: SYSTEM_BUSY(2): [TIMEOUT_CLEAN_QUEUE]broker busy; "
        "send to 'T' ran out of its 3s budget"
    )
    assert summarize_causes([]) == ""
