"""The gRPC endpoint driven with our own generated stub: what the official clients never send
(refused messages, requests before settings, the pull-style RPCs) and the commands the
broker starts on a telemetry stream."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
from google.protobuf.duration_pb2 import Duration

from aiorocketmq.broker.config import BrokerConfig
from aiorocketmq.broker.grpc import messaging_pb2 as pb
from aiorocketmq.broker.grpc import messaging_pb2_grpc as pb_grpc
from aiorocketmq.broker.server import Broker
from aiorocketmq.broker.store import StoreConfig
from aiorocketmq.client.admin import Admin
from aiorocketmq.protocol.codes import RequestCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.message import MessageExt, encode_message_ext

from .conftest import Grpc5

pytestmark = pytest.mark.asyncio(loop_scope="package")

_names = itertools.count(1)


def unique(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{next(_names)}"


def client(client_id: str) -> list[tuple[str, str]]:
    return [("x-mq-client-id", client_id), ("x-mq-language", "PYTHON"), ("x-mq-client-version", "test")]


def message(topic: str, body: bytes = b"x", **system: object) -> pb.Message:
    return pb.Message(
        topic=pb.Resource(name=topic),
        body=body,
        system_properties=pb.SystemProperties(message_id=unique("ID"), message_type=pb.NORMAL, **system),  # type: ignore[arg-type]
    )


async def test_route_points_at_the_grpc_port_with_queues_of_every_permission(
    grpc5: Grpc5, stub: pb_grpc.MessagingServiceStub
) -> None:
    topic = unique("Route")
    async with Admin(grpc5.cluster.namesrv_addr) as admin:
        await admin.create_topic(topic, 2, read_queue_nums=3, write_queue_nums=2)
    reply = await stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name=topic)))
    assert reply.status.code == pb.OK
    perms = [q.permission for q in reply.message_queues]
    assert perms == [pb.READ, pb.READ_WRITE, pb.READ_WRITE]
    for queue in reply.message_queues:
        assert queue.broker.id == 0
        assert [(a.host, a.port) for a in queue.broker.endpoints.addresses] == [("127.0.0.1", grpc5.port)]
        assert set(queue.accept_message_types) == {pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION}
    bad = await stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name="no such topic!")))
    assert bad.status.code == pb.ILLEGAL_TOPIC


async def test_a_typed_topic_routes_and_accepts_its_message_type_only(
    grpc5: Grpc5, stub: pb_grpc.MessagingServiceStub
) -> None:
    """A topic made ``message.type=FIFO`` (RocketMQ 5's attribute) is routed with FIFO as its
    only accepted type, and a message of another type is refused in band as Apache's proxy
    refuses it; an untyped topic keeps accepting every type."""
    typed, plain = unique("Typed"), unique("Untyped")
    async with Admin(grpc5.cluster.namesrv_addr) as admin:
        await admin.create_topic(typed, 2, attributes={"+message.type": "FIFO"})
        await admin.create_topic(plain, 2)
    route = await stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name=typed)))
    assert {tuple(q.accept_message_types) for q in route.message_queues} == {(pb.FIFO,)}
    route = await stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name=plain)))
    assert {frozenset(q.accept_message_types) for q in route.message_queues} == {
        frozenset({pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION})
    }

    async def send(msg: pb.Message) -> pb.SendMessageResponse:
        reply: pb.SendMessageResponse = await stub.SendMessage(pb.SendMessageRequest(messages=[msg]))
        return reply

    refused = await send(message(typed, b"normal"))
    assert refused.status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert "the expected type is FIFO, but actual type is NORMAL" in refused.status.message
    assert (await send(message(typed, b"fifo", message_group="g1"))).status.code == pb.OK
    assert (await send(message(plain, b"fifo", message_group="g1"))).status.code == pb.OK
    assert (await send(message(plain, b"normal"))).status.code == pb.OK


async def test_refused_sends_answer_in_band_and_the_server_keeps_serving(
    stub: pb_grpc.MessagingServiceStub,
) -> None:
    topic = unique("Refused")

    async def send(msg: pb.Message) -> pb.SendMessageResponse:
        reply: pb.SendMessageResponse = await stub.SendMessage(pb.SendMessageRequest(messages=[msg]))
        return reply

    assert (await send(message(topic, b""))).status.code == pb.MESSAGE_BODY_EMPTY
    assert (await send(message(topic, b"x" * (4 * 1024 * 1024 + 1)))).status.code == pb.MESSAGE_BODY_TOO_LARGE
    assert (await send(message(topic, tag="a|b"))).status.code == pb.ILLEGAL_MESSAGE_TAG
    assert (await send(message(topic, message_group="g" * 64))).status.code == pb.ILLEGAL_MESSAGE_GROUP
    far = pb.Message()
    far.CopyFrom(message(topic))
    far.system_properties.delivery_timestamp.FromMilliseconds(int(time.time() * 1000) + 2 * 86_400_000)
    assert (await send(far)).status.code == pb.ILLEGAL_DELIVERY_TIME
    reserved = message(topic)
    reserved.user_properties["UNIQ_KEY"] = "mine"
    assert (await send(reserved)).status.code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY
    assert (await stub.SendMessage(pb.SendMessageRequest())).status.code == pb.BAD_REQUEST
    ok = await send(message(topic, b"fine"))
    assert ok.status.code == pb.OK
    assert len(ok.entries) == 1 and ok.entries[0].message_id


async def test_end_transaction_finds_the_transaction_by_id_within_its_topic(
    stub: pb_grpc.MessagingServiceStub,
) -> None:
    """EndTransaction names a transaction by topic and id alone: the transaction service finds
    it by id (broker/transactions.py ``find``), once; another topic's or an unknown id is
    INVALID_TRANSACTION_ID, and the server keeps serving."""
    topic, other = unique("TxById"), unique("TxOther")
    half = message(topic, b"half")
    half.system_properties.message_type = pb.TRANSACTION
    sent = await stub.SendMessage(pb.SendMessageRequest(messages=[half]))
    assert sent.status.code == pb.OK, sent.status
    tid = sent.entries[0].transaction_id
    assert tid

    async def end(topic: str, transaction_id: str) -> int:
        reply = await stub.EndTransaction(
            pb.EndTransactionRequest(
                topic=pb.Resource(name=topic), transaction_id=transaction_id, resolution=pb.COMMIT
            )
        )
        return int(reply.status.code)

    assert await end(other, tid) == pb.INVALID_TRANSACTION_ID
    assert await end(topic, "no-such-id") == pb.INVALID_TRANSACTION_ID
    assert await end(topic, tid) == pb.OK
    assert await end(topic, tid) == pb.INVALID_TRANSACTION_ID, "a transaction decided twice"


async def test_heartbeat_needs_settings_first_and_telemetry_echoes_merged_settings(
    grpc5: Grpc5, stub: pb_grpc.MessagingServiceStub
) -> None:
    client_id = unique("cid")
    me = client(client_id)
    early = await stub.Heartbeat(pb.HeartbeatRequest(client_type=pb.PRODUCER), metadata=me)
    assert early.status.code == pb.UNRECOGNIZED_CLIENT_TYPE
    no_id = await stub.Heartbeat(pb.HeartbeatRequest(client_type=pb.PRODUCER))
    assert no_id.status.code == pb.CLIENT_ID_REQUIRED

    stream = stub.Telemetry(metadata=me)
    group = unique("cg")
    settings = pb.Settings(
        client_type=pb.SIMPLE_CONSUMER,
        subscription=pb.Subscription(
            group=pb.Resource(name=group),
            subscriptions=[
                pb.SubscriptionEntry(
                    topic=pb.Resource(name="SubTopic"),
                    expression=pb.FilterExpression(type=pb.TAG, expression="a||b"),
                )
            ],
        ),
    )
    await stream.write(pb.TelemetryCommand(settings=settings))
    reply = await stream.read()
    assert reply.status.code == pb.OK
    sub = reply.settings.subscription
    assert sub.receive_batch_size == 32
    assert sub.long_polling_timeout.seconds == 20
    assert reply.settings.backoff_policy.max_attempts == 17
    assert len(reply.settings.backoff_policy.customized_backoff.next) == 18

    beat = await stub.Heartbeat(pb.HeartbeatRequest(client_type=pb.SIMPLE_CONSUMER), metadata=me)
    assert beat.status.code == pb.OK
    # A member of its group as 4.x tools see it (mqadmin consumerConnection).
    async with Admin(grpc5.cluster.namesrv_addr) as admin:
        connections = await admin.consumer_connections(group)
    assert [c.client_id for c in connections.connection_set] == [client_id]
    assert connections.subscription_table["SubTopic"].tags_set == ["a", "b"]
    bye = await stub.NotifyClientTermination(pb.NotifyClientTerminationRequest(), metadata=me)
    assert bye.status.code == pb.OK
    # Forgotten: the next heartbeat is from a client without settings again.
    again = await stub.Heartbeat(pb.HeartbeatRequest(client_type=pb.SIMPLE_CONSUMER), metadata=me)
    assert again.status.code == pb.UNRECOGNIZED_CLIENT_TYPE
    stream.cancel()


async def test_producer_settings_reply_and_a_bad_stream_fails(stub: pb_grpc.MessagingServiceStub) -> None:
    client_id = unique("cid")
    stream = stub.Telemetry(metadata=client(client_id))
    await stream.write(
        pb.TelemetryCommand(
            settings=pb.Settings(
                client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="T")])
            )
        )
    )
    reply = await stream.read()
    assert reply.status.code == pb.OK
    assert reply.settings.publishing.max_body_size == 4 * 1024 * 1024
    assert reply.settings.backoff_policy.max_attempts == 3
    assert reply.settings.backoff_policy.HasField("exponential_backoff")
    # An unexpected command from the client fails the stream with INVALID_ARGUMENT.
    bad = stub.Telemetry(metadata=client(unique("cid")))
    await bad.write(pb.TelemetryCommand(reconnect_endpoints_command=pb.ReconnectEndpointsCommand(nonce="n")))
    with pytest.raises(Exception) as failed:
        await bad.read()
    assert "INVALID_ARGUMENT" in str(failed.value)
    stream.cancel()


async def test_pull_rpcs_read_queues_and_keep_offsets(stub: pb_grpc.MessagingServiceStub) -> None:
    topic = unique("Pull")
    group = unique("pg")
    route = await stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name=topic)))
    assert route.status.code == pb.OK
    bodies = [f"m{i}".encode() for i in range(5)]
    for body in bodies:
        msg = message(topic, body, tag="A" if body != b"m2" else "B")
        reply = await stub.SendMessage(pb.SendMessageRequest(messages=[msg]))
        assert reply.status.code == pb.OK
    got: list[bytes] = []
    for queue in route.message_queues:
        mq = pb.MessageQueue(topic=pb.Resource(name=topic), id=queue.id)
        end = await stub.QueryOffset(pb.QueryOffsetRequest(message_queue=mq, query_offset_policy=pb.END))
        assert end.status.code == pb.OK
        request = pb.PullMessageRequest(
            group=pb.Resource(name=group),
            message_queue=mq,
            offset=0,
            batch_size=32,
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="A"),
        )
        next_offset = None
        async for part in stub.PullMessage(request):
            kind = part.WhichOneof("content")
            if kind == "message":
                got.append(part.message.body)
                assert part.message.system_properties.tag == "A"
            elif kind == "next_offset":
                next_offset = part.next_offset
        assert next_offset == end.offset
        updated = await stub.UpdateOffset(
            pb.UpdateOffsetRequest(group=pb.Resource(name=group), message_queue=mq, offset=end.offset)
        )
        assert updated.status.code == pb.OK
        offset = await stub.GetOffset(pb.GetOffsetRequest(group=pb.Resource(name=group), message_queue=mq))
        assert (offset.status.code, offset.offset) == (pb.OK, end.offset)
    assert sorted(got) == [b"m0", b"m1", b"m3", b"m4"]


async def test_a_pull_at_the_end_waits_for_the_next_message(stub: pb_grpc.MessagingServiceStub) -> None:
    topic = unique("LongPull")
    route = await stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name=topic)))
    mq = pb.MessageQueue(topic=pb.Resource(name=topic), id=route.message_queues[0].id)
    request = pb.PullMessageRequest(
        group=pb.Resource(name=unique("pg")),
        message_queue=mq,
        offset=0,
        batch_size=1,
        long_polling_timeout=Duration(seconds=15),
    )

    async def pull() -> list[bytes]:
        return [
            p.message.body async for p in stub.PullMessage(request) if p.WhichOneof("content") == "message"
        ]

    waiting = asyncio.ensure_future(pull())
    await asyncio.sleep(0.3)
    assert not waiting.done()
    # Send until one lands on the queue being pulled (the broker spreads sends over queues).
    for i in range(16):
        await stub.SendMessage(pb.SendMessageRequest(messages=[message(topic, f"w{i}".encode())]))
        await asyncio.sleep(0)
        if waiting.done():
            break
    got = await asyncio.wait_for(waiting, 10)
    assert len(got) == 1 and got[0].startswith(b"w")


@pytest_asyncio.fixture(loop_scope="package")
async def inproc(tmp_path: Path) -> AsyncIterator[Broker]:
    """A broker in this process, to reach its gRPC service's tables."""
    config = BrokerConfig.load(
        None,
        {
            "brokerName": "inproc",
            "listenPort": 0,
            "grpcServerPort": 0,
            "brokerIP1": "127.0.0.1",
            "storePathRootDir": str(tmp_path),
            "metricsPromExporterEnable": "false",
        },
    )
    broker = Broker(config, StoreConfig.load(None, {"storePathRootDir": str(tmp_path)}))
    await broker.start("127.0.0.1")
    try:
        yield broker
    finally:
        await broker.shutdown()


async def test_sends_under_sync_flush_are_answered_once_flushed(tmp_path: Path) -> None:
    """Under SYNC_FLUSH the remoting send handler leaves the answer to the flush that covers
    the message; a 5.x send waits for that answer (each its own, with many in flight on one
    client) instead of failing after its message was stored."""
    config = BrokerConfig.load(
        None,
        {
            "brokerName": "syncflush",
            "listenPort": 0,
            "grpcServerPort": 0,
            "brokerIP1": "127.0.0.1",
            "storePathRootDir": str(tmp_path),
            "metricsPromExporterEnable": "false",
            "autoCreateTopicEnable": "true",
        },
    )
    store_config = StoreConfig.load(None, {"storePathRootDir": str(tmp_path), "flushDiskType": "SYNC_FLUSH"})
    broker = Broker(config, store_config)
    await broker.start("127.0.0.1")
    topic = "SyncFlushGrpc"
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{broker.grpc.port}") as channel:
            stub = pb_grpc.MessagingServiceStub(channel)
            me = client("sync-flush-client")
            await stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=me)
            replies = await asyncio.gather(
                *(
                    stub.SendMessage(
                        pb.SendMessageRequest(messages=[message(topic, f"m{i}".encode())]), metadata=me
                    )
                    for i in range(40)
                )
            )
        assert [reply.status.code for reply in replies] == [pb.OK] * 40
        entries = [entry for reply in replies for entry in reply.entries]
        # Each send got its own answer, for its own message.
        assert [entry.status.code for entry in entries] == [pb.OK] * 40
        stored = 0
        for queue_id in range(broker.topics.get(topic).write_queue_nums):  # type: ignore[union-attr]
            stored += broker.store.get_max_offset(topic, queue_id)
        assert stored == 40
        assert len({entry.message_id for entry in entries}) == 40
        assert broker.store.commit_log.queue.flushed_where >= broker.store.commit_log_max_offset
    finally:
        await broker.shutdown()


async def test_server_commands_on_the_telemetry_stream(inproc: Broker) -> None:
    """The broker asks a client for its stack trace and to verify a message, by nonce, on the
    client's telemetry stream (the 5.x forms of GET_CONSUMER_RUNNING_INFO and
    CONSUME_MESSAGE_DIRECTLY); the client's answers come back to the caller."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{inproc.grpc.port}") as channel:
        stub = pb_grpc.MessagingServiceStub(channel)
        stream = stub.Telemetry(metadata=client("cmd-client"))
        await stream.write(
            pb.TelemetryCommand(
                settings=pb.Settings(client_type=pb.PUSH_CONSUMER, subscription=pb.Subscription())
            )
        )
        assert (await stream.read()).status.code == pb.OK
        session = inproc.grpc.service.sessions["cmd-client"]

        async def answer() -> None:
            for _ in range(4):
                command = await stream.read()
                kind = command.WhichOneof("command")
                if kind == "print_thread_stack_trace_command":
                    nonce = command.print_thread_stack_trace_command.nonce
                    await stream.write(
                        pb.TelemetryCommand(
                            thread_stack_trace=pb.ThreadStackTrace(
                                nonce=nonce, thread_stack_trace="main: idle"
                            )
                        )
                    )
                else:
                    assert kind == "verify_message_command"
                    verify = command.verify_message_command
                    assert verify.message.body == b"check me"
                    await stream.write(
                        pb.TelemetryCommand(
                            status=pb.Status(code=pb.FAILED_TO_CONSUME_MESSAGE, message="listener threw"),
                            verify_message_result=pb.VerifyMessageResult(nonce=verify.nonce),
                        )
                    )

        answering = asyncio.ensure_future(answer())
        assert await session.print_thread_stack_trace() == "main: idle"
        verdict = await session.verify_message(message("T", b"check me"))
        assert (verdict.code, verdict.message) == (pb.FAILED_TO_CONSUME_MESSAGE, "listener threw")
        # The same through the remoting requests the broker forwards to a client (mqadmin's
        # consumerStatus and consumeMessage), which reach a 5.x client as these commands.
        info = await session.channel.request(
            RemotingCommand.request(
                RequestCode.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "g", "clientId": "c"}
            )
        )
        assert json.loads(info.body)["jstack"] == "main: idle"
        record = encode_message_ext(MessageExt("T", b"check me", properties={"UNIQ_KEY": "U1"}))
        direct = await session.channel.request(
            RemotingCommand.request(RequestCode.CONSUME_MESSAGE_DIRECTLY, {}, record)
        )
        assert json.loads(direct.body)["consumeResult"] == "CR_THROW_EXCEPTION"
        await answering
        stream.cancel()


async def test_auto_renewed_receipts_outlive_their_invisible_time(inproc: Broker) -> None:
    """A PushConsumer receives with ``auto_renew``: while the client lives the broker extends
    the message's invisible time itself, and the client's first receipt handle still acks it.
    (Short times here; 60 s, renewed 10 s ahead, in production.)"""
    service = inproc.grpc.service
    service.auto_renew_invisible_ms = 1500
    service.renew_ahead_ms = 1000
    service.renew_steps_ms = (1500,)
    topic, group = "RenewTopic", "renew-group"
    async with grpc.aio.insecure_channel(f"127.0.0.1:{inproc.grpc.port}") as channel:
        stub = pb_grpc.MessagingServiceStub(channel)
        me = client("renew-client")
        stream = stub.Telemetry(metadata=me)
        await stream.write(
            pb.TelemetryCommand(
                settings=pb.Settings(
                    client_type=pb.PUSH_CONSUMER, subscription=pb.Subscription(group=pb.Resource(name=group))
                )
            )
        )
        assert (await stream.read()).status.code == pb.OK
        await stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name=topic)))
        sent = await stub.SendMessage(pb.SendMessageRequest(messages=[message(topic, b"long job")]))
        assert sent.status.code == pb.OK

        def receive(poll: float) -> pb.ReceiveMessageRequest:
            return pb.ReceiveMessageRequest(
                group=pb.Resource(name=group),
                message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
                filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
                batch_size=32,
                auto_renew=True,
                long_polling_timeout=Duration(seconds=int(poll)),
            )

        got = [
            p.message
            async for p in stub.ReceiveMessage(receive(5), metadata=me)
            if p.WhichOneof("content") == "message"
        ]
        assert [m.body for m in got] == [b"long job"]
        first_handle = got[0].system_properties.receipt_handle
        # Several invisible times pass while another member of the group polls: nothing
        # comes back to it, because the broker keeps renewing.
        other = client("renew-other")
        again = [
            p.message
            async for p in stub.ReceiveMessage(receive(5), metadata=other, timeout=15)
            if p.WhichOneof("content") == "message"
        ]
        assert again == []
        assert service.renewals[first_handle].renewed >= 2
        ack = await stub.AckMessage(
            pb.AckMessageRequest(
                group=pb.Resource(name=group),
                topic=pb.Resource(name=topic),
                entries=[
                    pb.AckMessageEntry(
                        message_id=got[0].system_properties.message_id, receipt_handle=first_handle
                    )
                ],
            ),
            metadata=me,
        )
        assert ack.status.code == pb.OK
        assert first_handle not in service.renewals
        stream.cancel()


async def test_refused_consumption_requests_answer_in_band(stub: pb_grpc.MessagingServiceStub) -> None:
    topic, group = unique("BadPop"), unique("cg")
    route = await stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name=topic)))
    assert route.status.code == pb.OK
    me = client(unique("cid"))

    async def receive(request: pb.ReceiveMessageRequest, metadata: list[tuple[str, str]] = me) -> list[int]:
        return [
            p.status.code
            async for p in stub.ReceiveMessage(request, metadata=metadata)
            if p.HasField("status")
        ]

    def request(topic: str = topic, **fields: Any) -> pb.ReceiveMessageRequest:
        return pb.ReceiveMessageRequest(
            group=pb.Resource(name=group),
            message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
            batch_size=4,
            long_polling_timeout=Duration(seconds=5),
            **fields,
        )

    assert await receive(request(invisible_duration=Duration(seconds=1))) == [pb.ILLEGAL_INVISIBLE_TIME]
    assert await receive(request(auto_renew=True), metadata=[]) == [pb.CLIENT_ID_REQUIRED]
    assert await receive(request(topic="NoSuchTopic", auto_renew=True)) == [pb.TOPIC_NOT_FOUND]
    # An SQL92 receive is the broker's to refuse: this one has no enablePropertyFilter.
    sql = request(auto_renew=True)
    sql.filter_expression.type = pb.SQL
    assert await receive(sql) == [pb.BAD_REQUEST]
    names = {"group": pb.Resource(name=group), "topic": pb.Resource(name=topic)}
    ack = await stub.AckMessage(
        pb.AckMessageRequest(
            entries=[pb.AckMessageEntry(message_id="X", receipt_handle="not a handle")], **names
        )
    )
    assert ack.status.code == pb.INVALID_RECEIPT_HANDLE
    assert ack.entries[0].status.code == pb.INVALID_RECEIPT_HANDLE
    change = await stub.ChangeInvisibleDuration(
        pb.ChangeInvisibleDurationRequest(
            receipt_handle="garbage", invisible_duration=Duration(seconds=10), **names
        )
    )
    # Refused, and the client keeps the handle it had.
    assert (change.status.code, change.receipt_handle) == (pb.INVALID_RECEIPT_HANDLE, "garbage")
    forward = await stub.ForwardMessageToDeadLetterQueue(
        pb.ForwardMessageToDeadLetterQueueRequest(receipt_handle="garbage", **names)
    )
    assert forward.status.code == pb.INVALID_RECEIPT_HANDLE
    assignment = await stub.QueryAssignment(
        pb.QueryAssignmentRequest(topic=pb.Resource(name="NoSuchTopic"), group=pb.Resource(name=group)),
        metadata=me,
    )
    assert assignment.status.code == pb.TOPIC_NOT_FOUND
    # Still serving: a good receive of an empty topic says so.
    assert await receive(request(auto_renew=True)) == [pb.MESSAGE_NOT_FOUND]
