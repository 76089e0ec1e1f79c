"""The SDK's failure paths, one unit at a time against stand-ins for the broker: where a send
retries after a broker failed it, what a refused lock renewal does to orderly consumption, how a
broker's transaction check-back is answered, and which route changes a client's members hear.
Each test names the bug it is there for; the bugs passed every test before these.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiorocketmq.client import Message, allocate_averagely
from aiorocketmq.client.client_instance import ClientInstance, ClientOptions, UniqueIdGenerator
from aiorocketmq.client.orderly_dispatch import OrderlyDispatch
from aiorocketmq.client.process_queue import ProcessQueue
from aiorocketmq.client.producer import Producer, TransactionProducer
from aiorocketmq.client.rebalance import Rebalance
from aiorocketmq.client.routing import PublishInfo
from aiorocketmq.client.types import ConsumeResult, ServiceState, TransactionState
from aiorocketmq.protocol.body import (
    BrokerData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageModel,
    MessageQueue,
    QueueData,
    TopicRouteData,
)
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import ConnectionClosedError
from aiorocketmq.protocol.headers import (
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
    SendMessageRequestHeaderV2,
)
from aiorocketmq.protocol.message import MessageExt

BROKERS = {"broker-a": "10.0.0.1:10911", "broker-b": "10.0.0.2:10911"}


def route(*queues: tuple[str, int]) -> TopicRouteData:
    return TopicRouteData(
        queue_datas=[
            QueueData(broker_name=name, read_queue_nums=n, write_queue_nums=n, perm=6) for name, n in queues
        ],
        broker_datas=[
            BrokerData(cluster="c", broker_name=name, broker_addrs={0: BROKERS[name]}) for name, _ in queues
        ],
    )


# -- a send's retries ---------------------------------------------------------------------------


class SendingInstance:
    """A client instance whose brokers answer sends as ``answer(addr)`` says (None: stored)."""

    def __init__(self, fail_first: int) -> None:
        self.brokers = {name: {0: addr} for name, addr in BROKERS.items()}
        self.unique_ids = UniqueIdGenerator()
        self.calls: list[str] = []
        self.fail_first = fail_first

    async def invoke(self, addr: str, code: int, fields: dict[str, Any], body: bytes, timeout: float) -> Any:
        self.calls.append(addr)
        if len(self.calls) <= self.fail_first:
            raise ConnectionClosedError(f"{addr}: connection closed by peer")
        response = RemotingCommand.request(code, {})
        response.code = ResponseCode.SUCCESS
        queue_id = fields[SendMessageRequestHeaderV2.wire("queue_id")]
        response.ext_fields = {"msgId": "00", "queueId": str(queue_id), "queueOffset": "0"}
        return response

    def refresh_route_soon(self, topic: str) -> None:
        pass  # the background route refresh after a failure: not part of this test


async def test_a_retry_goes_to_another_broker_than_the_one_that_just_failed() -> None:
    """Here for the bug of a retry that goes back to the broker that just failed: broker-a
    holds four of the topic's five queues, so round robin alone would mostly pick it again."""
    for first_pick in range(5):  # whichever queue round robin starts from
        instance = SendingInstance(fail_first=1)
        producer = Producer("retrying", "127.0.0.1:9", retries=2)
        producer._acquired = instance  # type: ignore[assignment]
        producer._state = ServiceState.RUNNING
        info = PublishInfo.from_route("T", route(("broker-a", 4), ("broker-b", 1)))
        for _ in range(first_pick):
            info.select()
        producer._publish["T"] = info
        result = await producer.send(Message("T", b"x"))
        failed, retried = instance.calls
        assert failed != retried, (first_pick, instance.calls)
        assert BROKERS[result.queue.broker_name] == retried


async def test_a_retry_comes_back_to_a_failed_broker_only_when_no_other_is_left() -> None:
    instance = SendingInstance(fail_first=2)
    producer = Producer("retrying", "127.0.0.1:9", retries=2)
    producer._acquired = instance  # type: ignore[assignment]
    producer._state = ServiceState.RUNNING
    producer._publish["T"] = PublishInfo.from_route("T", route(("broker-a", 4), ("broker-b", 1)))
    await producer.send(Message("T", b"x"))
    assert len(set(instance.calls[:2])) == 2  # both brokers tried before either again
    assert len(instance.calls) == 3


# -- orderly consumption and its locks ----------------------------------------------------------


class LockingInstance:
    """A client instance whose broker grants LOCK_BATCH_MQ for the queues in ``granted``."""

    client_id = "10.0.0.7@1"

    def __init__(self) -> None:
        self.granted: set[MessageQueue] = set()

    async def find_broker_addr(self, broker_name: str, **_: Any) -> str:
        return BROKERS[broker_name]

    async def call(self, addr: str, code: int, header: Any, body: bytes, timeout: float) -> RemotingCommand:
        assert code == RequestCode.LOCK_BATCH_MQ
        asked = LockBatchRequestBody.decode(body).mq_set
        response = RemotingCommand.request(code, {})
        response.code = ResponseCode.SUCCESS
        response.body = LockBatchResponseBody(lock_ok_mq_set=[q for q in asked if q in self.granted]).encode()
        return response


class OrderlyOwner:
    """The push consumer an orderly Rebalance and OrderlyDispatch work for."""

    group = "orderly"
    model = MessageModel.CLUSTERING
    batch_size = 1
    suspend_time = 0.01
    _max_reconsume = 16
    state = ServiceState.RUNNING

    def __init__(self) -> None:
        self._instance = LockingInstance()
        self._offset_store = None
        self._rebalance = Rebalance(self, allocate_averagely, orderly=True)  # type: ignore[arg-type]
        self.consumed: list[int] = []
        self.lock_asked = asyncio.Event()
        real_lock = self._rebalance.lock

        async def lock(queue: MessageQueue, pq: ProcessQueue | None = None) -> bool:
            self.lock_asked.set()
            return await real_lock(queue, pq)

        self._rebalance.lock = lock  # type: ignore[method-assign]

    def _restore_topics(self, messages: list[MessageExt]) -> None:
        pass

    async def _call_listener(self, messages: list[MessageExt]) -> ConsumeResult:
        self.consumed.extend(m.queue_offset for m in messages)
        return ConsumeResult.SUCCESS


async def test_a_refused_lock_renewal_stops_orderly_consumption_of_that_queue() -> None:
    """Here for the bug of an orderly consumer that keeps consuming after losing its queue lock:
    a renewal the broker answers without a queue (its lock expired and another client took it)
    leaves that queue unlocked, and the consume task hands none of its messages to the
    listener while it cannot lock it again."""
    owner = OrderlyOwner()
    rebalance = owner._rebalance
    kept, lost = (MessageQueue(topic="T", broker_name="broker-a", queue_id=i) for i in range(2))
    pqs = {kept: ProcessQueue(), lost: ProcessQueue()}
    rebalance.process_queues.update(pqs)
    owner._instance.granted = {kept, lost}
    await rebalance.lock_all()
    assert pqs[kept].locked and pqs[lost].locked
    owner._instance.granted = {kept}  # another client holds `lost` now
    await rebalance.lock_all()
    assert pqs[kept].locked and not pqs[lost].locked

    pqs[lost].put([MessageExt("T", b"m", queue_id=1, queue_offset=i) for i in range(3)])
    dispatch = OrderlyDispatch(owner)  # type: ignore[arg-type]
    task = asyncio.ensure_future(dispatch._consume(lost, pqs[lost]))
    await asyncio.wait_for(owner.lock_asked.wait(), 5)
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert owner.consumed == []
    # Locked again, it consumes in order.
    owner._instance.granted.add(lost)
    await asyncio.wait_for(dispatch._consume(lost, pqs[lost]), 5)
    assert owner.consumed == [0, 1, 2]


# -- transaction check-backs --------------------------------------------------------------------


async def test_a_check_back_is_answered_with_the_checkers_own_decision() -> None:
    """Here for the bug of a ROLLBACK answered as COMMIT on check-back: the END_TRANSACTION a
    producer sends back carries exactly what its checker decided, marked as a check's answer,
    for the half message the broker asked about."""
    answers: list[tuple[str, int, EndTransactionRequestHeader]] = []

    class Instance:
        async def oneway(self, addr: str, code: int, header: EndTransactionRequestHeader) -> None:
            answers.append((addr, code, header))

    decisions = {
        b"keep": TransactionState.COMMIT,
        b"drop": TransactionState.ROLLBACK,
        b"wait": TransactionState.UNKNOWN,
    }

    async def checker(msg: MessageExt) -> TransactionState:
        return decisions[msg.body]

    producer = TransactionProducer("tx", "127.0.0.1:9", checker=checker)
    producer._acquired = Instance()  # type: ignore[assignment]
    producer._state = ServiceState.RUNNING
    for n, body in enumerate(decisions):
        header = CheckTransactionStateRequestHeader(
            tran_state_table_offset=n, commit_log_offset=1000 + n, transaction_id=f"tx-{n}"
        )
        message = MessageExt("T", body, properties={"UNIQ_KEY": f"U{n}"})
        await producer._answer_check("10.0.0.1:10911", header, message)
    assert [(a, code) for a, code, _ in answers] == [("10.0.0.1:10911", RequestCode.END_TRANSACTION)] * 3
    got = [(h.commit_or_rollback, h.commit_log_offset, h.tran_state_table_offset) for _, _, h in answers]
    assert got == [(8, 1000, 0), (12, 1001, 1), (0, 1002, 2)]
    assert all(h.from_transaction_check and h.producer_group == "tx" for _, _, h in answers)
    assert [h.transaction_id for _, _, h in answers] == ["tx-0", "tx-1", "tx-2"]


# -- route changes ------------------------------------------------------------------------------


class Member:
    def __init__(self) -> None:
        self.heard: list[tuple[str, TopicRouteData]] = []

    def _route_changed(self, topic: str, route: TopicRouteData) -> None:
        self.heard.append((topic, route))


def test_every_route_change_reaches_the_members_not_only_the_first() -> None:
    """Here for the bug of route changes not passed on after the first: each new route of a
    topic reaches every producer and consumer of the instance; the same route again does not."""
    instance = ClientInstance("10.0.0.7@1", ["127.0.0.1:9"], ClientOptions())
    producer, consumer = Member(), Member()
    instance.producers["p"] = producer  # type: ignore[assignment]
    instance.consumers["c"] = consumer  # type: ignore[assignment]
    routes = [route(("broker-a", 4)), route(("broker-a", 4), ("broker-b", 1)), route(("broker-b", 2))]
    instance.adopt_route("T", routes[0])
    instance.adopt_route("T", routes[0])
    instance.adopt_route("T", routes[1])
    instance.adopt_route("T", routes[2])
    for member in (producer, consumer):
        assert member.heard == [("T", r) for r in routes]
    assert instance.brokers["broker-b"] == {0: BROKERS["broker-b"]}
