"""Request-reply through a real name server and broker: our requester, our replier.

The requester's ``request()`` returns the reply the consumer built with
``create_reply_message`` (pushed to the requester's connection by the broker); the callback
form gets it too; the reply is also stored in ``<cluster>_REPLY_TOPIC``; a request nobody
answers ends with a clear timeout; a reply whose requester is gone is refused by the broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from aiorocketmq.client import Admin, ConsumeResult, Message, MessageExt, Producer, PushConsumer
from aiorocketmq.client.request_reply import (
    ReplyTimeoutError,
    RequestFailedError,
    create_reply_message,
)
from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.message import PropertyKey
from aiorocketmq.protocol.names import reply_topic
from tests.client.conftest import unique
from tests.cluster import Cluster

pytestmark = pytest.mark.asyncio(loop_scope="module")


class Replier:
    """A push consumer answering each request with ``b"re:" + body``."""

    def __init__(self, namesrv: str, topic: str) -> None:
        self.producer = Producer(unique("reply_pg"), namesrv)
        self.consumer = PushConsumer(unique("reply_cg"), namesrv)
        self.consumer.subscribe(topic)
        self.requests: list[MessageExt] = []
        self.consumer.listener(self.handle)

    async def handle(self, messages: list[MessageExt]) -> ConsumeResult:
        for msg in messages:
            self.requests.append(msg)
            if msg.body == b"ignore me":
                continue
            await self.producer.reply(msg, b"re:" + msg.body)
        return ConsumeResult.SUCCESS

    async def start(self) -> None:
        await self.producer.start()
        await self.consumer.start()

    async def stop(self) -> None:
        await self.consumer.shutdown()
        await self.producer.shutdown()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def setup(cluster: Cluster) -> AsyncIterator[tuple[str, Replier, Producer]]:
    topic = unique("request")
    async with Admin(cluster.namesrv_addr) as admin:
        await admin.create_topic(topic, queue_nums=2)
    replier = Replier(cluster.namesrv_addr, topic)
    await replier.start()
    requester = Producer(unique("request_pg"), cluster.namesrv_addr)
    await requester.start()
    try:
        yield topic, replier, requester
    finally:
        await requester.shutdown()
        await replier.stop()


async def test_request_returns_the_reply(setup: tuple[str, Replier, Producer], cluster: Cluster) -> None:
    topic, replier, requester = setup
    reply = await requester.request(Message(topic, b"ping", keys=["k1"]), timeout=15)
    assert reply.body == b"re:ping"
    assert reply.topic == reply_topic("DefaultCluster")
    request = next(m for m in replier.requests if m.body == b"ping")
    # The request carried who waits and for how long; the reply echoes the correlation.
    assert request.properties[PropertyKey.REPLY_TO_CLIENT] == requester.client_id
    assert request.properties[PropertyKey.TTL] == "15000"
    assert reply.properties[PropertyKey.CORRELATION_ID] == request.properties[PropertyKey.CORRELATION_ID]
    assert reply.properties[PropertyKey.MESSAGE_TYPE] == "reply"
    assert int(reply.properties[PropertyKey.ARRIVE_TIME]) >= int(
        reply.properties[PropertyKey.PUSH_REPLY_TIME]
    )
    assert reply.store_host.endswith(f":{cluster.brokers['broker-a'].port}")


async def test_concurrent_requests_get_their_own_replies(setup: tuple[str, Replier, Producer]) -> None:
    topic, _, requester = setup
    bodies = [f"req-{i}".encode() for i in range(20)]
    replies = await asyncio.gather(*(requester.request(Message(topic, b), timeout=15) for b in bodies))
    assert [r.body for r in replies] == [b"re:" + b for b in bodies]


async def test_callback_form(setup: tuple[str, Replier, Producer]) -> None:
    topic, _, requester = setup
    got: asyncio.Future[tuple[MessageExt | None, BaseException | None]] = (
        asyncio.get_running_loop().create_future()
    )

    async def on_reply(reply: MessageExt | None, error: BaseException | None) -> None:
        got.set_result((reply, error))

    task = requester.request_with_callback(Message(topic, b"cb"), on_reply, timeout=15)
    reply, error = await asyncio.wait_for(got, 20)
    await task
    assert error is None and reply is not None and reply.body == b"re:cb"


async def test_reply_is_stored_in_the_reply_topic(
    setup: tuple[str, Replier, Producer], cluster: Cluster
) -> None:
    topic, _, requester = setup
    reply = await requester.request(Message(topic, b"stored?"), timeout=15)
    async with Admin(cluster.namesrv_addr) as admin:
        stored = await admin.query_message_by_id(reply.topic, reply.properties["UNIQ_KEY"])
    assert stored.body == b"re:stored?"
    assert stored.properties[PropertyKey.CORRELATION_ID] == reply.properties[PropertyKey.CORRELATION_ID]


async def test_unanswered_request_times_out_clearly(setup: tuple[str, Replier, Producer]) -> None:
    topic, replier, requester = setup
    with pytest.raises(
        ReplyTimeoutError, match=r"send request message to <.*> OK, but wait reply message timeout, 1500 ms"
    ):
        await requester.request(Message(topic, b"ignore me"), timeout=1.5)
    assert any(m.body == b"ignore me" for m in replier.requests)
    assert len(requester._instance.replies) == 0  # nothing left waiting

    errors: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
    requester.request_with_callback(
        Message(topic, b"ignore me"), lambda reply, error: errors.set_result(error), timeout=1.0
    )
    assert isinstance(await asyncio.wait_for(errors, 10), ReplyTimeoutError)


async def test_request_that_cannot_be_sent(cluster: Cluster) -> None:
    async with Producer(unique("request_pg"), cluster.namesrv_addr) as requester:
        with pytest.raises(RequestFailedError, match="send request message to <no such topic> fail"):
            await requester.request(Message("no such topic", b"x"), timeout=2)


async def test_reply_to_a_gone_requester_is_refused(setup: tuple[str, Replier, Producer]) -> None:
    _, replier, _ = setup
    request = replier.requests[0]
    orphan = Message(request.topic, b"x", properties=dict(request.properties))
    orphan.properties[PropertyKey.REPLY_TO_CLIENT] = "127.0.0.1@nobody"
    with pytest.raises(MQError, match=r"channel of <127.0.0.1@nobody> not found"):
        await replier.producer.send(create_reply_message(orphan, b"late"))
    with pytest.raises(MQError, match="CLUSTER"):
        create_reply_message(Message("t", b"not consumed"), b"x")
