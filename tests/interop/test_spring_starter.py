"""Apache's rocketmq-spring-boot-starter (2.3.5, on the remoting client 5.3.2) in a Spring Boot 3.5
application against Apache's 5.3.3 name server and broker (the reference) and against ours.

SpringInterop (tests/interop/spring) is a non-web Spring Boot application whose RocketMQ beans all
come from the starter's auto-configuration. One JVM run a target: it creates a 4-queue topic,
starts the context, sends with ``RocketMQTemplate.syncSend`` and ``asyncSend`` (tags TagA and
TagB in turn, keys ``key-i``), then reads every message back twice, in two consumer groups:

- ``litepull``: ``RocketMQTemplate.receive(MessageExt.class)``, the starter's
  DefaultLitePullConsumer (``rocketmq.pull-consumer.group``/``topic``, LITE_PULL_MESSAGE);
- ``push``: a ``@RocketMQMessageListener`` (the starter's DefaultRocketMQListenerContainer, a push
  consumer subscribed with ``TagA || TagB``).

Each event is a JSON line; the tests check that every message sent arrives once by each style,
with the body, keys, tags, message id, queue and offset it was sent with. Each test runs twice:
``[apache53]`` on the session's Apache 5.3.3 cluster, ``[ours]`` on our name server and broker.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.client.conftest import start_cluster
from tests.interop.conftest import OUR_BROKER
from tests.interop.harness import CLIENT_HEAP, ProgramRun, body, build_spring, run_program, sha256

TARGETS = ["apache53", "ours"]
SCENARIO = "spring"
#: How many messages syncSend and asyncSend send (indexes 0..SYNC-1, then SYNC..SYNC+ASYNC-1).
SYNC, ASYNC = 6, 4
TOTAL = SYNC + ASYNC
STYLES = ("litepull", "push")


def size(i: int) -> int:
    """The body size of message ``i`` (SpringInterop.size)."""
    return 60 + (i * 37) % 300


def tag(i: int) -> str:
    return "TagA" if i % 2 == 0 else "TagB"


@pytest.fixture(scope="session")
def spring_app() -> tuple[str, str]:
    """``(java, classpath)`` of the Spring application (built once, cached)."""
    return build_spring()


async def run_app(spring_app: tuple[str, str], namesrv: str, root: Path, prefix: str) -> ProgramRun:
    java, classpath = spring_app
    home = root / "home"
    command = [
        java,
        *CLIENT_HEAP,
        f"-Duser.home={home}",
        f"-Drocketmq.client.logRoot={home / 'logs'}",
        "-Dinterop.timeout=60",
        "-cp",
        classpath,
        "interopspring.SpringInterop",
        f"--rocketmq.name-server={namesrv}",
        f"--interop.topic={prefix}_topic",
        f"--interop.group={prefix}",
        f"--interop.sync={SYNC}",
        f"--interop.async={ASYNC}",
    ]
    run = await asyncio.to_thread(run_program, command, cwd=home, timeout=300, mkdir=True)
    (root / "spring.out").write_text(run.stdout + run.stderr)
    return run


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=TARGETS)
async def run(
    request: pytest.FixtureRequest, spring_app: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[ProgramRun]:
    target = request.param
    root = tmp_path_factory.mktemp(f"spring-{target}")
    prefix = f"SPR{os.getpid()}{target[0]}"
    if target == "apache53":
        apache = request.getfixturevalue("apache53")
        yield await run_app(spring_app, apache.namesrv_addr, root, prefix)
        return
    cluster = await start_cluster(root / "ours", **OUR_BROKER)
    try:
        yield await run_app(spring_app, cluster.namesrv_addr, root, prefix)
    finally:
        await cluster.stop()


def finished(run: ProgramRun) -> dict[str, Any]:
    """The end record of a run that ended without an unexpected exception."""
    errors = run.of(SCENARIO, "error")
    assert not errors, f"the application failed:\n{errors[0]['error']}\n{run.describe()}"
    assert run.returncode == 0, run.describe()
    return run.ended(SCENARIO)


def sent(run: ProgramRun) -> dict[int, dict[str, Any]]:
    return {int(s["i"]): s for s in run.of(SCENARIO, "sent")}


def assert_received(run: ProgramRun, style: str) -> None:
    """Every message sent arrived once by ``style``, as it was sent and stored."""
    by_index = sent(run)
    received = [r for r in run.of(SCENARIO, "received") if r["style"] == style]
    counts = Counter(int(r["idx"]) for r in received)
    assert sorted(counts) == list(range(TOTAL)), f"{style} got {sorted(counts)}\n{run.describe()}"
    assert set(counts.values()) == {1}, f"{style} duplicates: {counts}\n{run.describe()}"
    topic = run.of(SCENARIO, "begin")[0]["topic"]
    for r in received:
        i = int(r["idx"])
        s = by_index[i]
        assert (r["topic"], r["keys"], r["tags"]) == (topic, f"key-{i}", tag(i)), r
        assert r["body_len"] == size(i), r
        assert r["body_sha256"] == sha256(body(SCENARIO, i, size(i))), r
        assert r["msg_id"] == s["msg_id"], (r, s)
        assert (r["queue"], r["offset"]) == (s["queue"], s["offset"]), (r, s)
        assert r["reconsume_times"] == 0, r


def test_starter_beans(run: ProgramRun) -> None:
    """The starter built its beans from the properties: versions, groups, models."""
    finished(run)
    (begin,) = run.of(SCENARIO, "begin")
    assert (begin["spring_boot"], begin["starter"], begin["client"]) == ("3.5.7", "2.3.5", "V5_3_2")
    group = begin["group"]
    (template,) = run.of(SCENARIO, "template")
    assert (template["producer_group"], template["pull_group"]) == (f"{group}_pg", f"{group}_pull")
    assert (template["pull_model"], template["pull_auto_commit"]) == ("CLUSTERING", True)
    (push,) = run.of(SCENARIO, "push_consumer")
    assert (push["group"], push["message_model"]) == (f"{group}_push", "CLUSTERING")
    (topic,) = run.of(SCENARIO, "topic")
    assert topic["queues"] == 4 and len(topic["masters"]) == 1, topic


def test_sync_and_async_send(run: ProgramRun) -> None:
    end = finished(run)
    assert end["async_acked"] is True, run.describe()
    assert not run.of(SCENARIO, "send_failed"), run.describe()
    by_index = sent(run)
    assert sorted(by_index) == list(range(TOTAL)), run.describe()
    assert {by_index[i]["style"] for i in range(SYNC)} == {"sync"}
    assert {by_index[i]["style"] for i in range(SYNC, TOTAL)} == {"async"}
    assert {s["status"] for s in by_index.values()} == {"SEND_OK"}
    # Every message has its own id and place; the four queues' offsets run from 0 without a gap.
    assert len({s["msg_id"] for s in by_index.values()}) == TOTAL
    per_queue: dict[int, list[int]] = {}
    for s in by_index.values():
        per_queue.setdefault(s["queue"], []).append(s["offset"])
    assert set(per_queue) <= {0, 1, 2, 3}
    assert all(sorted(offsets) == list(range(len(offsets))) for offsets in per_queue.values()), per_queue


def test_template_receive(run: ProgramRun) -> None:
    """RocketMQTemplate.receive(MessageExt.class): the lite pull consumer got every message once,
    and a last poll nothing more."""
    end = finished(run)
    assert_received(run, "litepull")
    assert (end["litepull_unique"], end["litepull_deliveries"]) == (TOTAL, TOTAL), run.describe()


def test_push_listener(run: ProgramRun) -> None:
    """The @RocketMQMessageListener (tag expression ``TagA || TagB``) got every message once."""
    end = finished(run)
    assert_received(run, "push")
    assert (end["push_unique"], end["push_deliveries"]) == (TOTAL, TOTAL), run.describe()
    assert all(
        r["thread"].startswith("ConsumeMessageThread_")
        for r in run.of(SCENARIO, "received")
        if r["style"] == "push"
    )
