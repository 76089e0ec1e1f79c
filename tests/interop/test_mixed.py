"""Mixed clusters: our broker registered with Apache's name server, Apache's broker with ours.

Two name servers (Apache's and ours) and two brokers (Apache's ``j-broker`` and our
``py-broker``), each broker registered with both name servers. Every topic spans both brokers,
so a client that finds its routes through Apache's name server sends to and consumes from our
broker, and one that uses our name server sends to and consumes from Apache's broker. The Java
client, the Go client and our SDK each run through both name servers.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from aiorocketmq import Admin, ConsumeFrom, ConsumeResult, Message, MessageExt, Producer, PushConsumer
from tests.client.conftest import wait_until
from tests.cluster import Cluster
from tests.interop.conftest import OUR_BROKER
from tests.interop.harness import ApacheBroker, ApacheNamesrv, ProgramRun, Toolchain, body, sha256
from tests.interop.test_go_client import run_go
from tests.interop.test_java_client import run_scenarios

BROKERS = {"j-broker", "py-broker"}


@dataclass
class Mixed:
    apache_namesrv: str
    our_namesrv: str
    broker_addrs: dict[str, str]

    @property
    def namesrvs(self) -> dict[str, str]:
        return {"apache-namesrv": self.apache_namesrv, "our-namesrv": self.our_namesrv}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def mixed(toolchain: Toolchain, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Mixed]:
    root = tmp_path_factory.mktemp("mixed")
    apache_ns = ApacheNamesrv(toolchain, root / "apache-namesrv")
    ours = Cluster(root / "ours")
    apache_broker: ApacheBroker | None = None
    try:
        await asyncio.to_thread(apache_ns.start)
        await ours.start_namesrv()
        both = f"{apache_ns.addr};{ours.namesrv_addr}"
        py_broker = await ours.start_broker("py-broker", namesrvAddr=both, **OUR_BROKER)
        apache_broker = ApacheBroker(toolchain, root / "j-broker", both, name="j-broker")
        await asyncio.to_thread(apache_broker.start)
        mixed = Mixed(
            apache_ns.addr, ours.namesrv_addr, {"py-broker": py_broker.addr, "j-broker": apache_broker.addr}
        )
        # Both brokers in both name servers' cluster tables before any client starts.
        for namesrv in mixed.namesrvs.values():
            async with Admin(namesrv) as admin:

                async def both_registered(admin: Admin = admin) -> bool:
                    return set((await admin.cluster_info()).broker_addr_table) == BROKERS

                await wait_until(both_registered, timeout=60)
        yield mixed
    finally:
        if apache_broker is not None:
            await asyncio.to_thread(apache_broker.stop)
        await ours.stop()
        await asyncio.to_thread(apache_ns.stop)


def check_content(run: ProgramRun, scenario: str, expected_count: int) -> list[dict[str, object]]:
    end = run.ended(scenario)
    assert end["ok"], f"{scenario}: {end.get('error')}\n{run.describe()}"
    received = run.of(scenario, "recv")
    assert len(received) == expected_count
    for record in received:
        props = record["props"]
        assert isinstance(props, dict)
        idx, size = int(props["idx"]), int(props["size"])
        assert record["bodySha"] == sha256(body(scenario, idx, size))
        assert record["keys"] == f"key-{props['kind']}-{idx}"
    return received


@pytest.mark.parametrize("via", ["apache-namesrv", "our-namesrv"])
async def test_java_client(mixed: Mixed, java_toolchain: Toolchain, tmp_path: Path, via: str) -> None:
    home = tmp_path
    run = await run_scenarios(
        java_toolchain,
        mixed.namesrvs[via],
        home,
        "json",
        f"MJ{os.getpid()}_{via[:2]}",
        ["send", "broadcasting"],
    )
    sent = run.of("send", "sent")
    assert {s["broker"] for s in sent if "broker" in s} == BROKERS, run.describe()
    received = check_content(run, "send", 14)
    assert {(r["props"]["kind"], r["props"]["idx"]) for r in received} == {  # type: ignore[index]
        (s["kind"], str(s["i"])) for s in sent
    }
    broadcast = check_content(run, "broadcasting", 12)
    assert sorted(r["consumer"] for r in broadcast) == ["c1"] * 6 + ["c2"] * 6


@pytest.mark.parametrize("via", ["apache-namesrv", "our-namesrv"])
async def test_go_client(mixed: Mixed, toolchain: Toolchain, via: str) -> None:
    brokers = ";".join(mixed.broker_addrs.values())
    run = await run_go(
        toolchain, mixed.namesrvs[via], brokers, f"MG{os.getpid()}_{via[:2]}", ["send", "broadcasting"]
    )
    assert {s["broker"] for s in run.of("send", "sent") if "broker" in s} == BROKERS, run.describe()
    received = check_content(run, "send", 10)
    assert {r["broker"] for r in received} == BROKERS
    check_content(run, "broadcasting", 12)


@pytest.mark.parametrize("via", ["apache-namesrv", "our-namesrv"])
async def test_our_sdk(mixed: Mixed, via: str) -> None:
    namesrv = mixed.namesrvs[via]
    topic = f"MixedSdk{os.getpid()}_{via[:2]}"
    async with Admin(namesrv) as admin:
        await admin.create_topic(topic, 2)
    async with Producer(f"MixedSdkP_{via[:2]}", namesrv=namesrv) as producer:
        results = [
            await producer.send(Message(topic, f"mixed {i}".encode() * 50, tags="mixed", keys=[f"k{i}"]))
            for i in range(8)
        ]
    assert {r.queue.broker_name for r in results} == BROKERS
    got: dict[str, MessageExt] = {}
    done = asyncio.Event()
    consumer = PushConsumer(f"MixedSdkC_{via[:2]}", namesrv=namesrv, consume_from=ConsumeFrom.FIRST_OFFSET)
    consumer.subscribe(topic, "*")

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        for msg in messages:
            got[msg.msg_id] = msg
        if len(got) >= len(results):
            done.set()
        return ConsumeResult.SUCCESS

    async with consumer:
        await asyncio.wait_for(done.wait(), 60)
    for i, result in enumerate(results):
        msg = got[result.msg_id]
        assert (msg.body, msg.tags, msg.keys) == (f"mixed {i}".encode() * 50, "mixed", [f"k{i}"])
        assert (msg.queue_id, msg.queue_offset) == (result.queue.queue_id, result.queue_offset)
