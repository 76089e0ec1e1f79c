"""Apache RocketMQ's Java remoting client, 4.9.8 and 5.3.2, against our name server and broker.

The same scenario program runs on both clients (the harness builds it on 5.3.2 as well:
LEGACY_SOURCES). One JVM per client and wire setting runs every scenario of tests/interop/java (Scenarios.java) and prints each
sent and received message as a JSON line; the tests here check those records: bodies (including
ones above the client's 4 KiB compression threshold), tags, keys and user properties intact, queue
offsets as the send results said, per-key order, transaction outcomes, retry and dead-letter
routing, delay, clustering and broadcasting, lite-pull seeks and pull statuses. The settings are the
default JSON headers without the VIP channel, and ROCKETMQ binary headers over the VIP channel.
"""

from __future__ import annotations

import asyncio
import os
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.cluster import Cluster
from tests.interop.conftest import OUR_BROKER
from tests.interop.harness import ProgramRun, Toolchain, body, run_program, sha256

SCENARIOS = [
    "send",
    "orderly",
    "transaction",
    "retry",
    "delay",
    "clustering",
    "broadcasting",
    "litepull",
    "pull",
]
MODES = {
    "json": {"rocketmq.serialize.type": "JSON", "com.rocketmq.sendMessageWithVIPChannel": "false"},
    "rocketmq-vip": {"rocketmq.serialize.type": "ROCKETMQ", "com.rocketmq.sendMessageWithVIPChannel": "true"},
}


def java_props(home: Path, mode: str) -> dict[str, str]:
    return {
        **MODES[mode],
        "user.home": str(home),
        "rocketmq.client.logRoot": str(home / "logs"),
        "rocketmq.client.localOffsetStoreDir": str(home / "offsets"),
    }


async def run_scenarios(
    toolchain: Toolchain, namesrv: str, home: Path, mode: str, prefix: str, scenarios: list[str]
) -> ProgramRun:
    command = toolchain.java_command(
        "interop.Scenarios",
        [f"namesrv={namesrv}", f"prefix={prefix}", f"scenarios={','.join(scenarios)}", "timeout=60"],
        java_props(home, mode),
    )
    return await asyncio.to_thread(run_program, command, cwd=home, timeout=600, mkdir=True)


#: The clients, by the toolchain fixture that builds the scenario program on each.
CLIENTS = {"4.9.8": "java_toolchain", "5.3.2": "java53_toolchain"}


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=list(CLIENTS))
async def runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[dict[str, ProgramRun]]:
    java_toolchain: Toolchain = request.getfixturevalue(CLIENTS[request.param])
    root = tmp_path_factory.mktemp(f"java-client-{request.param}")
    cluster = Cluster(root)
    await cluster.start_namesrv()
    try:
        await cluster.start_broker("broker-a", **OUR_BROKER)
        results = await asyncio.gather(
            *(
                run_scenarios(
                    java_toolchain, cluster.namesrv_addr, root / mode, mode, f"J{os.getpid()}_{n}", SCENARIOS
                )
                for n, mode in enumerate(MODES)
            )
        )
        for mode, run in zip(MODES, results):
            (root / f"{mode}.out").write_text(run.stdout + run.stderr)
        yield dict(zip(MODES, results))
    finally:
        await cluster.stop()


def scenario(runs: dict[str, ProgramRun], mode: str, name: str) -> ProgramRun:
    run = runs[mode]
    end = run.ended(name)
    assert end["ok"], f"{mode}/{name} failed:\n{end.get('error')}\n{run.describe()}"
    return run


def assert_content(record: dict[str, Any], scenario_name: str) -> None:
    """Body, tags, keys and user properties of a received message are what the program sent."""
    props = record["props"]
    kind, idx, size = props["kind"], int(props["idx"]), int(props["size"])
    expected = body(scenario_name, idx, size)
    assert record["bodyLen"] == size, record
    assert record["bodySha"] == sha256(expected), record
    assert record["tags"] == kind
    assert record["keys"] == f"key-{kind}-{idx}"


pytestmark = pytest.mark.parametrize("mode", list(MODES))


def test_send_sync_async_oneway_batch(
    runs: dict[str, ProgramRun], mode: str, request: pytest.FixtureRequest
) -> None:
    run = scenario(runs, mode, "send")
    client = request.node.callspec.params["runs"]
    sent = run.of("send", "sent")
    received = run.of("send", "recv")
    assert [s["kind"] for s in sent].count("oneway") == 2
    assert all(s["status"] == "SEND_OK" for s in sent if s["kind"] != "oneway")
    expected = {(s["kind"], s["i"]) for s in sent}
    assert len(expected) == 14
    assert sorted((r["props"]["kind"], int(r["props"]["idx"])) for r in received) == sorted(expected)
    for record in received:
        assert_content(record, "send")
    # The send results named the queue and offset each message was stored at, and its id.
    by_key = {(r["props"]["kind"], int(r["props"]["idx"])): r for r in received}
    for s in sent:
        if s["kind"] == "oneway":
            continue
        got = by_key[(s["kind"], s["i"])]
        assert (got["queueId"], got["queueOffset"]) == (s["queueId"], s["queueOffset"])
        if s["kind"] != "batch" or client == "4.9.8":
            assert got["msgId"] == s["msgId"]
    if client == "5.3.2":
        # Client 5.x gives the batch an id of its own in the request's properties, which the
        # broker appends to each message's: consumers see that one id on every message of the
        # batch. Apache 5.3.3 stores them the same (checked side by side: each message's own id
        # in the send result, the batch's on all four consumed).
        batch_ids = {by_key[("batch", i)]["msgId"] for i in range(4)}
        sent_ids = {s["msgId"] for s in sent if s["kind"] == "batch"}
        assert len(batch_ids) == 1 and not batch_ids & sent_ids, (batch_ids, sent_ids)
    # Bodies above 4 KiB were sent compressed and arrive whole.
    assert {r["bodyLen"] for r in received} >= {6000, 5000, 4500}


def test_orderly_per_key(runs: dict[str, ProgramRun], mode: str) -> None:
    run = scenario(runs, mode, "orderly")
    sent_queue = {(s["kind"], s["i"]): s["queueId"] for s in run.of("orderly", "sent")}
    seqs: dict[str, list[int]] = defaultdict(list)
    for record in run.of("orderly", "recv"):
        assert_content(record, "orderly")
        key = record["props"]["kind"]
        seqs[key].append(int(record["props"]["seq"]))
        assert record["queueId"] == sent_queue[(key, int(record["props"]["seq"]))]
    assert seqs == {key: list(range(8)) for key in ("alpha", "beta", "gamma")}
    assert len({sent_queue[(key, 0)] for key in seqs}) == 3


def test_transaction_commit_rollback_checkback(runs: dict[str, ProgramRun], mode: str) -> None:
    run = scenario(runs, mode, "transaction")
    sent = {s["kind"]: s for s in run.of("transaction", "sent")}
    assert {k: s["localState"] for k, s in sent.items()} == {
        "commit": "COMMIT_MESSAGE",
        "rollback": "ROLLBACK_MESSAGE",
        "unknown": "UNKNOW",
    }
    checks = run.of("transaction", "check")
    assert checks and {c["decision"] for c in checks} == {"unknown"}
    received = run.of("transaction", "recv")
    # One queue: the commit is offset 0, the checked-back commit offset 1; a rolled-back
    # message that leaked would have taken a place in between. (Consumed concurrently, the
    # two may be recorded in either order.)
    assert sorted((r["queueOffset"], r["props"]["decision"]) for r in received) == [
        (0, "commit"),
        (1, "unknown"),
    ]
    for record in received:
        assert_content(record, "transaction")


def test_retry_then_dead_letter(runs: dict[str, ProgramRun], mode: str) -> None:
    run = scenario(runs, mode, "retry")
    (sent,) = run.of("retry", "sent")
    deliveries = run.of("retry", "recv")
    assert [d["reconsumeTimes"] for d in deliveries] == [0, 1, 2]
    for delivery in deliveries:
        assert_content(delivery, "retry")
        assert delivery["msgId"] == sent["msgId"]
    retried = [d for d in deliveries if d["reconsumeTimes"] > 0]
    for delivery in retried:
        # Redelivered from %RETRY%group, handed to the listener under the original topic.
        assert delivery["topic"] == deliveries[0]["topic"] == delivery["props"]["RETRY_TOPIC"]
        assert delivery["props"]["REAL_TOPIC"] == f"%RETRY%{delivery['topic']}_cg"
    dlq = run.of("retry", "dlq")
    assert dlq, run.describe()
    assert dlq[0]["topic"] == f"%DLQ%{deliveries[0]['topic']}_cg"
    assert_content(dlq[0], "retry")
    assert dlq[0]["props"]["ORIGIN_MESSAGE_ID"]


def test_delay_level(runs: dict[str, ProgramRun], mode: str) -> None:
    run = scenario(runs, mode, "delay")
    (sending,) = run.of("delay", "sending")
    received = {r["props"]["kind"]: r for r in run.of("delay", "recv")}
    assert sorted(received) == ["delayed", "plain"]
    # The delayed message, sent first, reaches its topic after the plain one; the order the
    # listener sees them in is not asserted: when the consumer starts after the delay has run
    # out, both arrive in one pull and the client's consume threads take them concurrently.
    assert received["delayed"]["queueOffset"] > received["plain"]["queueOffset"]
    delayed = received["delayed"]
    assert_content(delayed, "delay")
    assert delayed["props"]["REAL_TOPIC"] == delayed["topic"]
    # Level 3 is one second on our test broker's delay table.
    assert delayed["receivedAt"] - sending["at"] >= 1000
    assert delayed["storeTimestamp"] - delayed["bornTimestamp"] >= 900


def test_push_clustering(runs: dict[str, ProgramRun], mode: str) -> None:
    run = scenario(runs, mode, "clustering")
    events = run.of("clustering")
    stopping = next((n for n, r in enumerate(events) if r["event"] == "stopping"), None)
    assert stopping is not None, f"no 'stopping' record:\n{run.describe()}"
    received = [r for r in events[:stopping] if r["event"] == "recv"]
    for record in received:
        assert_content(record, "clustering")
    # While the pair stops, queues move to the survivor, which may repeat what it reads from
    # an offset persisted late (at least once; Scenarios.clustering says why); nothing new
    # may appear then.
    redelivered = [r for r in events[stopping:] if r["event"] == "recv"]
    assert {r["msgId"] for r in redelivered} <= {r["msgId"] for r in received}
    ids = [int(r["props"]["idx"]) for r in received]
    assert sorted(ids) == list(range(16))
    by_consumer: dict[str, set[int]] = defaultdict(set)
    for r in received:
        by_consumer[r["consumer"]].add(r["queueId"])
    # Each consumer owned two queues and got the messages of its own queues only.
    assert set(by_consumer) == {"c1", "c2"}
    assert not by_consumer["c1"] & by_consumer["c2"]


def test_push_broadcasting(runs: dict[str, ProgramRun], mode: str) -> None:
    run = scenario(runs, mode, "broadcasting")
    received = run.of("broadcasting", "recv")
    for record in received:
        assert_content(record, "broadcasting")
    for consumer in ("c1", "c2"):
        got = sorted(int(r["props"]["idx"]) for r in received if r["consumer"] == consumer)
        assert got == list(range(6)), consumer


def test_lite_pull_subscribe_assign_seek(runs: dict[str, ProgramRun], mode: str) -> None:
    run = scenario(runs, mode, "litepull")
    sent = {s["i"]: s for s in run.of("litepull", "sent")}
    records = run.of("litepull", "recv")
    for record in records:
        assert_content(record, "litepull")
    subscribed = sorted(int(r["props"]["idx"]) for r in records if r["consumer"] == "subscribe")
    assert subscribed == list(range(10))
    queue0 = sorted(s["queueOffset"] for s in sent.values() if s["queueId"] == 0)
    # A new group with nothing committed starts at offset 0 while the queue's first message is still
    # in memory (Apache's QUERY_CONSUMER_OFFSET answer), even though lite pull defaults to LAST_OFFSET.
    assigned = [r["queueOffset"] for r in records if r["consumer"] == "assign"]
    assert assigned == queue0
    after_seek = [r["queueOffset"] for r in records if r["consumer"] == "seek2"]
    assert after_seek == queue0[2:]
    from_begin = [r["queueOffset"] for r in records if r["consumer"] == "seekBegin"]
    assert from_begin == queue0
    assert all(r["queueId"] == 0 for r in records if r["consumer"] != "subscribe")


def test_pull_consumer(runs: dict[str, ProgramRun], mode: str) -> None:
    run = scenario(runs, mode, "pull")
    (offsets,) = run.of("pull", "offsets")
    assert (offsets["min"], offsets["max"]) == (0, 5)
    pulls = {p["label"]: p for p in run.of("pull", "pull")}
    assert (pulls["all"]["status"], pulls["all"]["nextBeginOffset"]) == ("FOUND", 5)
    assert pulls["end"]["status"] == "NO_NEW_MSG" and pulls["end"]["nextBeginOffset"] == 5
    # Far past the end: corrected to the queue's end (as Apache's 4.9.7 broker does; compared in
    # tests/interop/test_differential.py).
    assert pulls["beyond"]["status"] == "OFFSET_ILLEGAL" and pulls["beyond"]["nextBeginOffset"] == 5
    pulled = run.of("pull", "pulled")
    assert [int(p["props"]["idx"]) for p in pulled if p["consumer"] == "all"] == [0, 1, 2, 3, 4]
    assert [int(p["props"]["idx"]) for p in pulled if p["consumer"] == "even"] == [0, 2, 4]
    for record in pulled:
        assert_content(record, "pull")
    (committed,) = run.of("pull", "committed")
    assert committed["offset"] == 3
