"""Apache RocketMQ's Go client (v2) against our name server and broker.

One run of tests/interop/go (main.go) goes through every scenario and prints each sent and
received message as a JSON line; the tests check content: bodies (one above the compression
threshold), tags, keys, user properties, the offsets the send results named, per-key order,
broadcasting to every consumer, delay, and transactions with check-back.
"""

from __future__ import annotations

import asyncio
import os
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from tests.cluster import Cluster
from tests.interop.conftest import OUR_BROKER
from tests.interop.harness import ProgramRun, Toolchain, body, run_program, sha256

SCENARIOS = ["send", "orderly", "broadcasting", "delay", "transaction"]
SEND_OK = 0  # primitive.SendOK
COMMIT, ROLLBACK, UNKNOWN = 1, 2, 3  # primitive.LocalTransactionState


async def run_go(
    toolchain: Toolchain, namesrv: str, broker: str, prefix: str, scenarios: list[str]
) -> ProgramRun:
    command = [
        str(toolchain.go_binary),
        f"namesrv={namesrv}",
        f"broker={broker}",
        f"prefix={prefix}",
        f"scenarios={','.join(scenarios)}",
        "timeout=60",
    ]
    home = toolchain.go_binary.parent
    env = {"ROCKETMQ_GO_LOG_LEVEL": "error", "HOME": str(home)}
    return await asyncio.to_thread(run_program, command, cwd=home, timeout=600, env=env)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def run(toolchain: Toolchain, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ProgramRun]:
    cluster = Cluster(tmp_path_factory.mktemp("go-client"))
    await cluster.start_namesrv()
    try:
        broker = await cluster.start_broker("broker-a", **OUR_BROKER)
        yield await run_go(toolchain, cluster.namesrv_addr, broker.addr, f"G{os.getpid()}", SCENARIOS)
    finally:
        await cluster.stop()


def passed(run: ProgramRun, name: str) -> ProgramRun:
    end = run.ended(name)
    assert end["ok"], f"{name} failed: {end.get('error')}\n{run.describe()}"
    return run


def assert_content(record: dict[str, Any], scenario: str) -> None:
    props = record["props"]
    kind, idx, size = props["kind"], int(props["idx"]), int(props["size"])
    assert (record["bodyLen"], record["bodySha"]) == (size, sha256(body(scenario, idx, size))), record
    assert record["tags"] == kind
    assert record["keys"] == f"key-{kind}-{idx}"


def test_producer_sync_async_batch(run: ProgramRun) -> None:
    passed(run, "send")
    sent = run.of("send", "sent")
    assert sorted((s["kind"], s["i"]) for s in sent) == sorted(
        [("sync", i) for i in range(3)] + [("async", i) for i in range(3)] + [("batch", i) for i in range(4)]
    )
    assert {s["status"] for s in sent} == {SEND_OK}
    received = run.of("send", "recv")
    by_key = {(r["props"]["kind"], int(r["props"]["idx"])): r for r in received}
    assert len(received) == len(by_key) == 10
    for s in sent:
        got = by_key[(s["kind"], s["i"])]
        assert_content(got, "send")
        assert (got["queueId"], got["queueOffset"]) == (s["queueId"], s["queueOffset"])
        if s["kind"] != "batch":  # v2.1.2 gives batched messages no client-side id
            assert got["msgId"] == s["msgId"]
    assert max(r["bodyLen"] for r in received) == 6000


def test_push_broadcasting(run: ProgramRun) -> None:
    passed(run, "broadcasting")
    received = run.of("broadcasting", "recv")
    for record in received:
        assert_content(record, "broadcasting")
    for consumer in ("c1", "c2"):
        assert sorted(int(r["props"]["idx"]) for r in received if r["consumer"] == consumer) == list(range(6))


def test_orderly_sharding_key(run: ProgramRun) -> None:
    passed(run, "orderly")
    queue_of = {(s["kind"], s["i"]): s["queueId"] for s in run.of("orderly", "sent")}
    seqs: dict[str, list[int]] = defaultdict(list)
    for record in run.of("orderly", "recv"):
        assert_content(record, "orderly")
        key, seq = record["props"]["kind"], int(record["props"]["seq"])
        seqs[key].append(seq)
        assert record["queueId"] == queue_of[(key, seq)]
    assert seqs == {key: list(range(8)) for key in ("alpha", "beta", "gamma")}
    for key in seqs:
        assert len({queue_of[(key, seq)] for seq in range(8)}) == 1


def test_delay_level(run: ProgramRun) -> None:
    passed(run, "delay")
    (sending,) = run.of("delay", "sending")
    received = run.of("delay", "recv")
    assert [r["props"]["kind"] for r in received] == ["plain", "delayed"]
    assert_content(received[1], "delay")
    assert received[1]["receivedAt"] - sending["at"] >= 1000
    assert received[1]["props"]["REAL_TOPIC"] == received[1]["topic"]


def test_transaction_check_back(run: ProgramRun) -> None:
    passed(run, "transaction")
    states = {s["kind"]: s["localState"] for s in run.of("transaction", "sent")}
    assert states == {"commit": COMMIT, "rollback": ROLLBACK, "unknown": UNKNOWN}
    assert {c["decision"] for c in run.of("transaction", "check")} == {"unknown"}
    received = run.of("transaction", "recv")
    assert [(r["props"]["decision"], r["queueOffset"]) for r in received] == [("commit", 0), ("unknown", 1)]
    for record in received:
        assert_content(record, "transaction")
