"""Request-reply and message traces between Apache RocketMQ's Java client (4.9.8) and ours, on
our name server and broker (``traceTopicEnable=true``).

One JVM (ReqReplyTrace.java) runs a Java replier, Java ``request()`` calls answered by our
replier, and a Java producer and consumer with ``enableMsgTrace``; meanwhile our requester asks
the Java replier. Then Apache's own ``mqadmin queryMsgTraceById`` (AdminBatch.java) prints the
traces our SDK wrote, and our decoder reads the ones the Java client wrote.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from aiorocketmq.client import Admin, ConsumeResult, Message, MessageExt, Producer, PushConsumer
from aiorocketmq.protocol.names import TRACE_TOPIC
from aiorocketmq.protocol.trace import TraceContext, TraceType, decode_trace_data
from tests.client.conftest import wait_until
from tests.cluster import Cluster
from tests.interop.harness import (
    JavaProcess,
    ProgramRun,
    Toolchain,
    parse_records,
    rocketmq_home,
    run_program,
)
from tests.tools.conftest import mqadmin

PREFIX = f"RR{os.getpid()}"
pytestmark = pytest.mark.asyncio(loop_scope="module")


@dataclass
class Outcome:
    records: list[dict[str, Any]]
    output: str
    our_replies: list[MessageExt]
    callback_reply: MessageExt | None
    our_traced_id: str
    our_groups: tuple[str, str]
    admin: ProgramRun
    namesrv: str

    def of(self, event: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["event"] == event]


async def our_replier(namesrv: str, topic: str) -> tuple[Producer, PushConsumer]:
    producer = Producer(f"{PREFIX}_py_reply_pg", namesrv)
    consumer = PushConsumer(f"{PREFIX}_py_reply_cg", namesrv)
    consumer.subscribe(topic)

    @consumer.listener
    async def answer(messages: list[MessageExt]) -> ConsumeResult:
        for msg in messages:
            if msg.body != b"ignore me":
                await producer.reply(msg, b"pyre:" + msg.body)
        return ConsumeResult.SUCCESS

    await producer.start()
    await consumer.start()
    return producer, consumer


async def traced_by_us(namesrv: str, topic: str) -> tuple[str, tuple[str, str]]:
    """A message our SDK sends and consumes with traces on: its id and the two groups."""
    groups = (f"{PREFIX}_py_trace_pg", f"{PREFIX}_py_trace_cg")
    got: asyncio.Queue[str] = asyncio.Queue()
    consumer = PushConsumer(groups[1], namesrv, enable_trace=True)
    consumer.subscribe(topic)

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        for msg in messages:
            got.put_nowait(msg.msg_id)
        return ConsumeResult.SUCCESS

    async with Producer(groups[0], namesrv, enable_trace=True) as producer, consumer:
        result = await producer.send(Message(topic, b"ours, traced", tags="TagP", keys=["pykey"]))
        assert await asyncio.wait_for(got.get(), 30) == result.msg_id
    return result.msg_id, groups


async def traces_of(admin: Admin, msg_id: str) -> list[TraceContext]:
    found = await admin.query_messages_by_key(TRACE_TOPIC, msg_id, max_num=64)
    return [c for m in found for c in decode_trace_data(m.body.decode()) if c.beans[0].msg_id == msg_id]


async def wait_trace_kinds(admin: Admin, msg_id: str, kinds: set[TraceType]) -> list[TraceContext]:
    seen: list[TraceContext] = []

    async def complete() -> bool:
        seen[:] = await traces_of(admin, msg_id)
        return kinds <= {c.trace_type for c in seen}

    try:
        await wait_until(complete, timeout=60)
    except AssertionError:
        raise AssertionError(f"traces of {msg_id}: only {[c.trace_type.value for c in seen]}") from None
    return seen


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def outcome(
    java_toolchain: Toolchain, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Outcome]:
    root = Path(tmp_path_factory.mktemp("reqreply"))
    cluster = Cluster(root)
    await cluster.start_namesrv()
    java: JavaProcess | None = None
    try:
        await cluster.start_broker("broker-a", traceTopicEnable="true")
        ns = cluster.namesrv_addr
        async with Admin(ns) as admin:
            for suffix in ("java_replies", "py_replies", "traced", "py_traced"):
                await admin.create_topic(f"{PREFIX}_{suffix}", queue_nums=2)
        reply_producer, reply_consumer = await our_replier(ns, f"{PREFIX}_py_replies")
        home = rocketmq_home(root / "java")
        command = java_toolchain.java_command(
            "interop.ReqReplyTrace",
            [f"namesrv={ns}", f"prefix={PREFIX}", "expect=3"],
            {"user.home": str(home), "rocketmq.client.logRoot": str(home / "logs")},
        )
        java = JavaProcess(command, home, "java request-reply")
        await asyncio.to_thread(java.wait_for, r'"event": ?"ready"', 120)
        async with Producer(f"{PREFIX}_py_request_pg", ns) as requester:
            topic = f"{PREFIX}_java_replies"
            replies = [
                await requester.request(Message(topic, f"pyreq-{i}".encode()), timeout=30) for i in range(2)
            ]
            called: asyncio.Future[MessageExt | None] = asyncio.get_running_loop().create_future()
            requester.request_with_callback(
                Message(topic, b"pyreq-cb"), lambda reply, error: called.set_result(reply), timeout=30
            )
            callback_reply = await asyncio.wait_for(called, 40)
        our_id, groups = await traced_by_us(ns, f"{PREFIX}_py_traced")
        await asyncio.to_thread(java.proc.wait, 300)
        await reply_consumer.shutdown()
        await reply_producer.shutdown()
        async with Admin(ns) as admin:
            await wait_trace_kinds(admin, our_id, {TraceType.PUB, TraceType.SUB_AFTER})
        admin_home = root / "admin"
        rocketmq_home(admin_home)
        batch = f"queryMsgTraceById\t-n\t{ns}\t-i\t{our_id}\n"
        admin_run = await asyncio.to_thread(
            run_program,
            java_toolchain.java_command(
                "interop.AdminBatch",
                [],
                {"user.home": str(admin_home), "rocketmq.client.logRoot": str(admin_home)},
            ),
            cwd=admin_home,
            timeout=300,
            stdin=batch,
            env={"ROCKETMQ_HOME": str(admin_home)},
        )
        yield Outcome(
            parse_records(java.output), java.output, replies, callback_reply, our_id, groups, admin_run, ns
        )
    finally:
        if java is not None:
            java.stop()
        await cluster.stop()


async def test_java_requests_answered_by_our_replier(outcome: Outcome) -> None:
    replies = outcome.of("reply")
    assert [r["body"] for r in replies] == [f"pyre:jreq-{i}" for i in range(3)], outcome.output[-4000:]
    assert all(r["topic"] == "DefaultCluster_REPLY_TOPIC" and r["msgType"] == "reply" for r in replies)
    assert len({r["correlationId"] for r in replies}) == 3
    assert [r["body"] for r in outcome.of("callbackReply")] == ["pyre:jreq-cb"]
    (timed_out,) = outcome.of("timedOut")
    assert timed_out["error"] == "RequestTimeoutException"
    assert "OK, but wait reply message timeout" in timed_out["message"]


async def test_our_requests_answered_by_the_java_replier(outcome: Outcome) -> None:
    assert [r.body for r in outcome.our_replies] == [b"jre:pyreq-0", b"jre:pyreq-1"]
    assert outcome.callback_reply is not None and outcome.callback_reply.body == b"jre:pyreq-cb"
    replied = {r["body"]: r for r in outcome.of("replied")}
    assert set(replied) == {"pyreq-0", "pyreq-1", "pyreq-cb"}
    assert all(r["status"] == "SEND_OK" for r in replied.values())
    assert replied["pyreq-0"]["ttl"] == "30000"
    assert outcome.our_replies[0].properties["CORRELATION_ID"] == replied["pyreq-0"]["correlationId"]


async def test_our_decoder_reads_java_traces(outcome: Outcome) -> None:
    sent = outcome.of("tracedSent")
    assert len(sent) == 2, outcome.output[-4000:]
    # Apache's own decoder (TraceView) read them from our broker too.
    seen = {r["msgId"]: r["kinds"] for r in outcome.of("traceSeenByJava")}
    assert seen == {r["msgId"]: "Pub,SubAfter,SubBefore" for r in sent}
    async with Admin(outcome.namesrv) as admin:
        for record in sent:
            traces = await wait_trace_kinds(
                admin, record["msgId"], {TraceType.PUB, TraceType.SUB_BEFORE, TraceType.SUB_AFTER}
            )
            by_kind = {c.trace_type: c for c in traces}
            pub = by_kind[TraceType.PUB]
            assert (pub.group, pub.success, pub.beans[0].tags, pub.beans[0].offset_msg_id) == (
                f"{PREFIX}_trace_pg",
                True,
                "TagT",
                record["offsetMsgId"],
            )
            assert pub.beans[0].keys == f"jkey-{record['i']}"
            after = by_kind[TraceType.SUB_AFTER]
            assert (after.group, after.success) == (f"{PREFIX}_trace_cg", True)
            assert after.request_id == by_kind[TraceType.SUB_BEFORE].request_id


async def test_apache_mqadmin_reads_our_traces(outcome: Outcome) -> None:
    (shown,) = [r for r in outcome.admin.records if r["event"] == "admin"]
    lines = [line for line in shown["output"].splitlines() if line.strip()]
    producer_group, consumer_group = outcome.our_groups
    pub = next(line.split() for line in lines if line.startswith("Pub "))
    sub = next(line.split() for line in lines if line.startswith("Sub "))
    assert pub[1] == producer_group and pub[-1] == "success", shown["output"]
    assert sub[1] == consumer_group and sub[-1] == "success", shown["output"]
    assert re.fullmatch(r"\d+ms", pub[-2]) and re.fullmatch(r"\d+ms", sub[-2])
    # Our mqadmin prints the same table, to the character.
    ours = await mqadmin("queryMsgTraceById", "-n", outcome.namesrv, "-i", outcome.our_traced_id)
    assert ours.code == 0, ours.err
    table = [line for line in lines if line.startswith(("#Type", "Pub ", "Sub "))]
    assert [line for line in ours.lines if line.strip()] == table
