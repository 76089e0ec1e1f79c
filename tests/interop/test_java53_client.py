"""Apache RocketMQ's remoting client 5.3.2 against Apache's 5.3.3 name server and broker (the
reference) and against ours.

Scenarios53.java (tests/interop/java53) runs one scenario per JVM and prints each sent, received
and trace record as a JSON line; the tests here check those records:

- ``litepull-subscribe``: a lite pull consumer subscribes (LITE_PULL_MESSAGE), commits, and its
  committed offsets are each queue's max offset, on the broker too; a second consumer of the
  group gets nothing;
- ``litepull-assign-seek``: assigned queues read whole, again after seekToBegin, and from the
  middle of one queue after a seek;
- ``pop-server-rebalance``: the group switched to POP (SET_MESSAGE_REQUEST_MODE), two push
  consumers with client rebalance off each told by the broker (QUERY_ASSIGNMENT) to pop every
  queue: every message once, none redelivered after the invisible time (the acks held);
- ``pull-server-rebalance``: the same in the default PULL mode: the broker splits the queues;
- ``trace``: a traced producer and consumer; the trace topic holds a Pub, a SubBefore and a
  SubAfter record for each message, and the stored messages carry the broker's MSG_REGION and
  TRACE_ON;
- ``autobatch``: ``setAutoBatch(true)`` and five threads sending at once (SEND_BATCH_MESSAGE):
  distinct send results, every message read back;
- ``recall``: a timer message recalled with its send result's handle (RECALL_MESSAGE) is never
  delivered, the next one is; a recall after delivery is refused;
- ``compression``: ZLIB, LZ4 and ZSTD bodies of about 8 KiB read back intact;
- ``request-reply``: requests answered with ``MessageUtil.createReplyMessage`` (SEND_REPLY_MESSAGE,
  PUSH_REPLY_MESSAGE_TO_CLIENT);
- ``acl`` (ours only, see its test): ACL 1.0 signatures with ``AclClientRPCHook``.

Each test runs twice: ``[apache53]`` on the session's Apache 5.3.3 cluster, ``[ours]`` on our
name server and broker; both brokers allow RECALL_MESSAGE (``recallMessageEnable``, off by
default in both).
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
import yaml

from tests.client.conftest import start_cluster
from tests.cluster import Cluster
from tests.interop.conftest import OUR_BROKER
from tests.interop.harness import ProgramRun, Toolchain, body, run_program, sha256

#: Each scenario and how many messages it sends.
SCENARIOS = {
    "litepull-subscribe": 40,
    "litepull-assign-seek": 40,
    "pop-server-rebalance": 40,
    "pull-server-rebalance": 40,
    "trace": 10,
    "autobatch": 40,
    "recall": 2,
    "compression": 12,
    "request-reply": 10,
    "static-topic": 24,
}
TARGETS = ["apache53", "ours"]
#: Our broker as for the other interop modules, with the trace topic created at start and
#: RECALL_MESSAGE allowed, as on Apache's (conftest.APACHE53_BROKER).
OUR_BROKER53 = {**OUR_BROKER, "traceTopicEnable": True, "recallMessageEnable": True}
#: The region a broker stamps on what it stores and returns in send results (Apache's default regionId).
REGION = "DefaultRegion"


def names(prefix: str, scenario: str) -> tuple[str, str]:
    """The topic and consumer group of a scenario's run."""
    name = f"{prefix}_{scenario.replace('-', '_')}"
    return name, f"{name}_cg"


async def run_scenario(
    toolchain: Toolchain,
    namesrv: str,
    root: Path,
    prefix: str,
    scenario: str,
    count: int | None = None,
    props: dict[str, str] | None = None,
) -> ProgramRun:
    home = root / scenario
    topic, group = names(prefix, scenario)
    command = toolchain.java_command(
        "interop53.Scenarios53",
        [namesrv, scenario, topic, group, str(SCENARIOS[scenario] if count is None else count)],
        {
            "user.home": str(home),
            "rocketmq.client.logRoot": str(home / "logs"),
            "rocketmq.client.localOffsetStoreDir": str(home / "offsets"),
            "interop.timeout": "60",
            **(props or {}),
        },
    )
    run = await asyncio.to_thread(run_program, command, cwd=home, timeout=300, mkdir=True)
    (root / f"{scenario}.out").write_text(run.stdout + run.stderr)
    return run


async def run_all(toolchain: Toolchain, namesrv: str, root: Path, prefix: str) -> dict[str, ProgramRun]:
    """Every scenario, two JVMs at a time (the machine has two cores and the servers run too)."""
    slots = asyncio.Semaphore(2)

    async def one(scenario: str) -> ProgramRun:
        async with slots:
            return await run_scenario(toolchain, namesrv, root, prefix, scenario)

    runs = await asyncio.gather(*(one(scenario) for scenario in SCENARIOS))
    return dict(zip(SCENARIOS, runs))


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=TARGETS)
async def runs(
    request: pytest.FixtureRequest, java53_toolchain: Toolchain, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[dict[str, ProgramRun]]:
    target = request.param
    root = tmp_path_factory.mktemp(f"java53-{target}")
    prefix = f"J53{os.getpid()}{target[0]}"
    if target == "apache53":
        apache = request.getfixturevalue("apache53")
        yield await run_all(java53_toolchain, apache.namesrv_addr, root, prefix)
        return
    cluster = await start_cluster(root / "ours", **OUR_BROKER53)
    try:
        yield await run_all(java53_toolchain, cluster.namesrv_addr, root, prefix)
    finally:
        await cluster.stop()


def scenario(runs: dict[str, ProgramRun], name: str) -> tuple[ProgramRun, dict[str, Any]]:
    """The run of scenario ``name``, which ended without an unexpected exception, and its end record."""
    run = runs[name]
    errors = run.of(name, "error")
    assert not errors, f"{name} failed:\n{errors[0]['error']}\n{run.describe()}"
    assert run.returncode == 0, run.describe()
    return run, run.ended(name)


def assert_content(run: ProgramRun, name: str, *, own_keys: bool = True) -> list[dict[str, Any]]:
    """Every message was sent; each received body is the one sent, with its tag and (``own_keys``)
    its keys. Returns the received records."""
    sent = run.of(name, "sent")
    assert sorted(s["i"] for s in sent) == list(range(SCENARIOS[name])), run.describe()
    assert {s["status"] for s in sent} == {"SEND_OK"}
    received = run.of(name, "received")
    for record in received:
        idx, size = int(record["idx"]), int(record["size"])
        assert record["body_len"] == size, record
        assert record["body_sha256"] == sha256(body(name, idx, size)), record
        assert record["tags"] == "TagA", record
        if own_keys:
            assert record["keys"] == f"key-{idx}", record
    return received


def where_sent(run: ProgramRun, name: str) -> dict[int, tuple[int, int]]:
    return {s["i"]: (s["queue"], s["offset"]) for s in run.of(name, "sent")}


def test_litepull_subscribe_commits(runs: dict[str, ProgramRun]) -> None:
    name = "litepull-subscribe"
    run, end = scenario(runs, name)
    received = assert_content(run, name)
    first = [r for r in received if r["consumer"] == "c1"]
    assert sorted(int(r["idx"]) for r in first) == list(range(SCENARIOS[name])), run.describe()
    assert end["duplicates"] == 0
    sent = where_sent(run, name)
    assert all((r["queue"], r["offset"]) == sent[int(r["idx"])] for r in first)
    # commitSync then committed(mq): each queue's max offset, the four adding up to every message.
    committed = {r["queue"]: r for r in run.of(name, "committed") if r["consumer"] == "c1"}
    assert sorted(committed) == [0, 1, 2, 3]
    assert all(r["committed"] == r["max"] for r in committed.values()), committed
    assert sum(r["max"] for r in committed.values()) == SCENARIOS[name]
    # Stored on the broker (committed until stored): it answers QUERY_CONSUMER_OFFSET with them.
    on_broker = {r["queue"]: (r["offset"], r["max"]) for r in run.of(name, "broker_offset")}
    assert on_broker == {q: (r["max"], r["max"]) for q, r in committed.items()}
    # A second consumer of the group took every queue, read the committed offsets, got nothing.
    assert (end["second_assigned"], end["second_received"]) == (4, 0), run.describe()
    second = {r["queue"]: r["committed"] for r in run.of(name, "committed") if r["consumer"] == "c2"}
    assert second == {q: r["max"] for q, r in committed.items()}


def test_litepull_assign_seek(runs: dict[str, ProgramRun]) -> None:
    name = "litepull-assign-seek"
    run, end = scenario(runs, name)
    received = assert_content(run, name)
    sent = where_sent(run, name)
    per_queue: dict[int, list[int]] = defaultdict(list)
    for queue, offset in sent.values():
        per_queue[queue].append(offset)
    everything = {q: sorted(offsets) for q, offsets in per_queue.items()}
    assert sorted(everything) == [0, 1, 2, 3]
    assert all(offsets == list(range(len(offsets))) for offsets in everything.values())

    def read(label: str) -> dict[int, list[int]]:
        got: dict[int, list[int]] = defaultdict(list)
        for r in received:
            if r["consumer"] == label:
                assert (r["queue"], r["offset"]) == sent[int(r["idx"])], r
                got[r["queue"]].append(r["offset"])
        return dict(got)

    # Each queue in order from offset 0, after assign() and again after seekToBegin().
    assert read("assign") == everything, run.describe()
    assert read("begin") == everything, run.describe()
    (seek,) = run.of(name, "seek")
    queue, middle = seek["queue"], seek["offset"]
    assert seek["max"] == len(everything[queue]) and 0 < middle < seek["max"]
    # From the middle of one queue to its end, nothing else.
    assert read("middle") == {queue: list(range(middle, seek["max"]))}, run.describe()
    assert (end["middle_received"], end["middle_expected"]) == (seek["max"] - middle,) * 2


def test_pop_server_rebalance(runs: dict[str, ProgramRun]) -> None:
    name = "pop-server-rebalance"
    run, end = scenario(runs, name)
    received = assert_content(run, name)
    (mode,) = run.of(name, "mode")
    assert mode["mode"] == "POP"
    # popShareQueueNum 0: the broker has each consumer pop every queue (queue id -1).
    (assignment,) = run.of(name, "assignment")
    assert assignment["queues"] == {"c1": [-1], "c2": [-1]}, run.describe()
    # Each message once, popped (it carries its POP checkpoint), none back after the invisible time.
    assert sorted(int(r["idx"]) for r in received) == list(range(SCENARIOS[name])), run.describe()
    assert (end["received"], end["unique"], end["duplicates"]) == (SCENARIOS[name], SCENARIOS[name], 0)
    assert all(r["pop_ck"] for r in received)
    assert all(r["reconsume_times"] == 0 for r in received)
    sent = where_sent(run, name)
    assert all((r["queue"], r["offset"]) == sent[int(r["idx"])] for r in received)


def test_pull_server_rebalance(runs: dict[str, ProgramRun]) -> None:
    name = "pull-server-rebalance"
    run, end = scenario(runs, name)
    received = assert_content(run, name)
    # The default mode is PULL: the broker split the four queues between the two consumers.
    (assignment,) = run.of(name, "assignment")
    owned = assignment["queues"]
    assert sorted(owned["c1"] + owned["c2"]) == [0, 1, 2, 3], run.describe()
    assert len(owned["c1"]) == len(owned["c2"]) == 2
    assert sorted(int(r["idx"]) for r in received) == list(range(SCENARIOS[name])), run.describe()
    assert (end["received"], end["unique"], end["duplicates"]) == (SCENARIOS[name], SCENARIOS[name], 0)
    assert not any(r["pop_ck"] for r in received)
    for r in received:
        assert r["queue"] in owned[r["consumer"]], r


def test_trace_records(runs: dict[str, ProgramRun]) -> None:
    name = "trace"
    run, end = scenario(runs, name)
    received = assert_content(run, name)
    assert end["received"] == SCENARIOS[name], run.describe()
    sent = {s["msg_id"]: s for s in run.of(name, "sent")}
    # Send results and stored messages carry the broker's region and trace switch.
    assert {(s["region_id"], s["trace_on"]) for s in sent.values()} == {(REGION, True)}
    assert {(r["region"], r["trace_on"]) for r in received} == {(REGION, "true")}
    # A Pub, a SubBefore and a SubAfter trace for each message (not counted: a trace send the
    # client's dispatcher retried on a busy machine is stored twice).
    kinds = {msg_id: sorted(seen) for msg_id, seen in end["traces"].items()}
    assert kinds == {msg_id: ["Pub", "SubAfter", "SubBefore"] for msg_id in sent}, run.describe()
    traces = run.of(name, "trace")
    (begin,) = run.of(name, "begin")
    group = begin["group"]
    by_kind: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for trace in traces:
        by_kind[trace["type"]][trace["msg_id"]] = trace
        # Stored under the traced message's id: how a trace is found by id.
        assert trace["keyed"], trace
    for msg_id, s in sent.items():
        pub, before, after = (by_kind[kind][msg_id] for kind in ("Pub", "SubBefore", "SubAfter"))
        assert (pub["group"], pub["success"], pub["region_id"]) == (f"{group}_pg", True, REGION)
        assert pub["offset_msg_id"] == s["offset_msg_id"]
        assert (pub["topic"], pub["keys"], pub["tags"]) == (begin["topic"], f"key-{s['i']}", "TagA")
        assert (before["group"], before["region_id"]) == (group, REGION)
        assert (after["group"], after["success"]) == (group, True)
        assert after["request_id"] == before["request_id"]


def target_of(request: pytest.FixtureRequest) -> str:
    """The broker a test of ``runs`` runs against: apache53 or ours."""
    return str(request.node.callspec.params["runs"])


#: What a consumer reads as the msgId (UNIQ_KEY) and the keys of a message the producer sent in an
#: autoBatch batch. Apache 5.3.3 stores each message of a SEND_BATCH_MESSAGE with the request
#: header's properties appended to its own (MessageExtEncoder.encode(MessageExtBatch)): the batch's
#: UNIQ_KEY, the keys of all its messages and its tag; the later value wins when they are read, so
#: every message of a batch reads back with the batch's id and keys, not the ones its send result
#: gave. Ours stores batches the same way. "own" would be each message's own id and key.
AUTOBATCH_IDS_SEEN = {"apache53": "batch", "ours": "batch"}


def test_autobatch(runs: dict[str, ProgramRun], request: pytest.FixtureRequest) -> None:
    name = "autobatch"
    target = target_of(request)
    run, end = scenario(runs, name)
    count = SCENARIOS[name]
    received = assert_content(run, name, own_keys=False)
    sent = {s["i"]: s for s in run.of(name, "sent")}
    assert len({s["msg_id"] for s in sent.values()}) == count, run.describe()
    assert len({s["offset_msg_id"] for s in sent.values()}) == count
    # The send hook's batches (a send retried reports its batch again): each message in exactly
    # one, several messages in some: the client did batch the threads' sends.
    batches = {b["batch_id"]: b for b in run.of(name, "batch")}
    assert not run.of(name, "direct"), run.describe()
    batch_of = {i: b for b in batches.values() for i in b["idx"]}
    assert sorted(i for b in batches.values() for i in b["idx"]) == list(range(count)), batches
    assert max(len(b["idx"]) for b in batches.values()) > 1, batches
    for b in batches.values():
        # The send result of each message is its own UNIQ_KEY; a batch goes to one queue, its
        # messages at consecutive offsets in batch order.
        assert [sent[i]["msg_id"] for i in b["idx"]] == b["ids"], b
        assert b["batch_id"] not in b["ids"]
        assert len({sent[i]["queue"] for i in b["idx"]}) == 1, b
        first = sent[b["idx"][0]]["offset"]
        assert [sent[i]["offset"] for i in b["idx"]] == list(range(first, first + len(b["idx"]))), b
    # Every message read back once, where its send result said it was stored.
    assert sorted(int(r["idx"]) for r in received) == list(range(count)), run.describe()
    assert end["received"] == count
    for r in received:
        s = sent[int(r["idx"])]
        assert (r["queue"], r["offset"], r["offset_msg_id"]) == (
            s["queue"],
            s["offset"],
            s["offset_msg_id"],
        ), r
    # The ids and keys a consumer sees.
    seen = {}
    for r in received:
        idx = int(r["idx"])
        b = batch_of[idx]
        batch_keys = {f"key-{i}" for i in b["idx"]}
        if (r["msg_id"], r["keys"]) == (sent[idx]["msg_id"], f"key-{idx}"):
            seen[idx] = "own"
        elif r["msg_id"] == b["batch_id"] and set(r["keys"].split(" ")) == batch_keys:
            seen[idx] = "batch"
        else:
            seen[idx] = f"other: {r['msg_id']} {r['keys']!r}"
    kinds = sorted(set(seen.values()))
    sizes = sorted(len(b["idx"]) for b in batches.values())
    print(f"[{target}] autobatch: {len(batches)} batches of {sizes}; consumers see the {kinds} id and keys")
    assert kinds == [AUTOBATCH_IDS_SEEN[target]], seen


#: ILLEGAL_OPERATION: the answer to a recall whose message is no longer waiting for its time.
ILLEGAL_OPERATION = 604


def test_recall(runs: dict[str, ProgramRun]) -> None:
    name = "recall"
    run, end = scenario(runs, name)
    received = assert_content(run, name)
    first, second = sorted(run.of(name, "sent"), key=lambda s: s["i"])
    # Both timer messages got a recall handle in their send results.
    assert first["recall_handle"] and second["recall_handle"], run.describe()
    # RECALL_MESSAGE answered with the recalled message's id, before it was due.
    (recalled,) = run.of(name, "recalled")
    assert recalled["msg_id"] == first["msg_id"], recalled
    assert recalled["before_due_ms"] > 0
    # Only the second was delivered, not before its time (the timer wheel's slots are a second
    # wide), though the reading went on 3 s past it: the first was due 3 s before it.
    assert end["received"] == 1, run.describe()
    (got,) = received
    assert (int(got["idx"]), got["msg_id"]) == (1, second["msg_id"]), got
    assert got["at"] >= second["due"] - 1000, (got["at"], second["due"])
    # Recalling the delivered one is refused.
    (late,) = run.of(name, "late_recall")
    assert (late["code"], late["remark"]) == (ILLEGAL_OPERATION, "recall failed, timestamp invalid"), late


def test_compression(runs: dict[str, ProgramRun]) -> None:
    name = "compression"
    run, end = scenario(runs, name)
    received = assert_content(run, name)
    sent = {s["i"]: s for s in run.of(name, "sent")}
    assert [sent[i]["codec"] for i in range(3)] == ["ZLIB", "LZ4", "ZSTD"]
    assert sorted(int(r["idx"]) for r in received) == list(range(SCENARIOS[name])), run.describe()
    assert end["received"] == SCENARIOS[name]
    for r in received:
        idx = int(r["idx"])
        assert r["codec"] == sent[idx]["codec"] and r["body_len"] == sent[idx]["size"] >= 8192, r
        # Stored as the producer compressed it (the repetitive bodies shrink twentyfold), with the
        # compression type in the sysFlag the consumer inflated it by.
        assert r["compression"] == r["codec"], r
        assert r["store_size"] < r["body_len"] // 4, r


def test_static_topic(runs: dict[str, ProgramRun]) -> None:
    """Four global queues: sends land on them (named by global id, the real broker in the
    result); everything is read back once under the logical broker name, each at the offset its
    send was answered with; the group's commits stand at each global queue's end."""
    name = "static-topic"
    run, end = scenario(runs, name)
    received = assert_content(run, name)
    sent = {s["i"]: s for s in run.of(name, "sent")}
    assert {s["queue"] for s in sent.values()} == {0, 1, 2, 3}, run.describe()
    assert (end["received"], end["duplicates"]) == (SCENARIOS[name], 0), end
    assert {r["broker"] for r in received} == {"__syslo__global__"}
    assert {(r["queue"], r["offset"]) for r in received} == {(s["queue"], s["offset"]) for s in sent.values()}
    per_queue = {q: sum(1 for s in sent.values() if s["queue"] == q) for q in range(4)}
    offsets = run.of(name, "broker_offset")
    assert {(o["queue"], o["offset"]) for o in offsets} == set(per_queue.items()), offsets
    assert all(o["offset"] == o["max"] for o in offsets), offsets


def test_request_reply(runs: dict[str, ProgramRun]) -> None:
    name = "request-reply"
    count = SCENARIOS[name]
    run, end = scenario(runs, name)
    assert (end["replies"], end["replied"]) == (count, count + 1), run.describe()
    # The replier got each request (and the sync one after them) with what a reply needs.
    requests = run.of(name, "received")
    assert sorted(int(r["idx"]) for r in requests) == list(range(count + 1)), run.describe()
    for r in requests:
        idx, size = int(r["idx"]), int(r["size"])
        assert r["body_sha256"] == sha256(body(name, idx, size)), r
    replied = run.of(name, "replied")
    assert {r["status"] for r in replied} == {"SEND_OK"}, replied
    assert {(r["reply_topic"], r["reply_to"], r["ttl"]) for r in replied} == {
        ("DefaultCluster_REPLY_TOPIC", end["client_id"], "10000")
    }
    # Each request's reply: its correlation id, the replier's body and properties.
    replies = run.of(name, "reply")
    assert [r["i"] for r in replies] == list(range(count)), run.describe()
    for r in replies:
        i, size = r["i"], int(r["size"])
        assert r["correlation_id"] and r["reply_correlation_id"] == r["correlation_id"], r
        assert (r["msg_type"], r["topic"], r["reply_to"]) == (
            "reply",
            "DefaultCluster_REPLY_TOPIC",
            end["client_id"],
        )
        assert (int(r["idx"]), r["body_len"]) == (i, size), r
        assert r["body_sha256"] == sha256(body(f"{name}-reply", i, size)), r
        # Client 5.3.2 calls the request callback once with null when the request is stored.
        assert r["null_callbacks"] == 1, r
    # The sync request(msg, timeout) of client 5.3.2 gives up once its request is stored
    # (RequestTimeoutException long before the timeout), whichever the broker.
    (sync,) = run.of(name, "sync_request")
    assert sync["outcome"] == "RequestTimeoutException" and sync["millis"] < 5000, sync


# ---- ACL 1.0 (ours only) ------------------------------------------------------------------

ACL_ADMIN = ("j53_admin", "j53_admin_secret")
ACL_USER = ("j53_user", "j53_user_secret")
ACL_COUNT = 12


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def acl_run(
    java53_toolchain: Toolchain, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[ProgramRun]:
    """The ``acl`` scenario on our broker with ``aclEnable`` and a plain_acl.yml (as
    test_java_secure.py, without TLS): an admin account, and a user allowed to publish to and
    subscribe to the scenario's topic with its group, nothing else."""
    root = tmp_path_factory.mktemp("java53-acl")
    topic, group = names(f"J53{os.getpid()}acl", "acl")
    acl_file = root / "plain_acl.yml"
    acl_file.write_text(
        yaml.safe_dump(
            {
                "globalWhiteRemoteAddresses": [],
                "accounts": [
                    {"accessKey": ACL_ADMIN[0], "secretKey": ACL_ADMIN[1], "admin": True},
                    {
                        "accessKey": ACL_USER[0],
                        "secretKey": ACL_USER[1],
                        "admin": False,
                        "defaultTopicPerm": "DENY",
                        "defaultGroupPerm": "DENY",
                        "topicPerms": [f"{topic}=PUB|SUB"],
                        "groupPerms": [f"{group}=SUB"],
                    },
                ],
            }
        )
    )
    cluster = Cluster(root / "ours")
    await cluster.start_namesrv()
    try:
        await cluster.start_broker(
            "broker-a", **OUR_BROKER53, aclEnable="true", **{"rocketmq.acl.plain.file": str(acl_file)}
        )
        yield await run_scenario(
            java53_toolchain,
            cluster.namesrv_addr,
            root,
            f"J53{os.getpid()}acl",
            "acl",
            count=ACL_COUNT,
            props={"interop.acl.admin": ":".join(ACL_ADMIN), "interop.acl.user": ":".join(ACL_USER)},
        )
    finally:
        await cluster.stop()


def test_acl_signed_requests(acl_run: ProgramRun) -> None:
    """The 5.3.2 client signing with ``AclClientRPCHook`` (ACL 1.0) sends and consumes on a broker
    with ``aclEnable=true`` and a plain_acl.yml; a wrong secret and an unsigned send are refused
    and nothing of theirs is stored.

    Against ours only: Apache 5.3.3 cannot run this configuration. Its broker no longer has ACL
    1.0 (the rocketmq-acl module and its PlainAccessValidator are gone from 5.3.3; ``aclEnable``
    is read but nothing uses it, so the same broker.conf runs with no access control at all). Its
    access control is ACL 2.0 (``authenticationEnabled``/``authorizationEnabled``, users and ACLs
    in its own metadata store, a plain_acl.yml only imported once by ``migrateAuthFromV1Enabled``),
    a different server configuration with different refusals."""
    run = acl_run
    name = "acl"
    errors = run.of(name, "error")
    assert not errors, f"{name} failed:\n{errors[0]['error']}\n{run.describe()}"
    assert run.returncode == 0, run.describe()
    end = run.ended(name)
    sent = run.of(name, "sent")
    assert sorted(s["i"] for s in sent) == list(range(ACL_COUNT)), run.describe()
    assert {s["status"] for s in sent} == {"SEND_OK"}
    received = run.of(name, "received")
    assert sorted(int(r["idx"]) for r in received) == list(range(ACL_COUNT)), run.describe()
    for r in received:
        idx, size = int(r["idx"]), int(r["size"])
        assert r["body_sha256"] == sha256(body(name, idx, size)), r
        assert (r["keys"], r["tags"]) == (f"key-{idx}", "TagA"), r
    # Refused as Apache's ACL 1.0 refuses (test_java_secure.py): SYSTEM_ERROR, the reason in the remark.
    refused = {r["who"]: r for r in run.of(name, "refused")}
    assert sorted(refused) == ["unsigned", "wrong_secret"], run.describe()
    wrong, unsigned = refused["wrong_secret"], refused["unsigned"]
    assert (wrong["sent"], wrong["code"]) == (False, 1), wrong
    assert "signature" in wrong["remark"].lower(), wrong
    assert (unsigned["sent"], unsigned["code"]) == (False, 1), unsigned
    assert "accesskey" in unsigned["remark"].lower(), unsigned
    # The broker holds the signed messages only.
    assert (end["received"], end["stored"]) == (ACL_COUNT, ACL_COUNT), end
