"""``mqbench`` against a real cluster: the producers and the consumer run as subprocesses and
print RocketMQ's report lines; the numbers must be plausible and agree with what the brokers
stored. Speed itself is never asserted."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pty
import re
import signal
import subprocess
import sys

import pytest

from aiorocketmq.client import Admin, PullClient
from tests.cluster import Cluster
from tests.support import ROOT

from .conftest import RunningTool, mqbench, tool_env, unique

pytestmark = pytest.mark.asyncio(loop_scope="module")

NUMBER = r"(\d+)"
DECIMAL = r"\s*(\d+\.\d{3})"
SEND_LINE = re.compile(
    rf"Send TPS: {NUMBER} \| Max RT\(ms\): {NUMBER} \| Average RT\(ms\): {DECIMAL} \| "
    rf"Send Failed: {NUMBER} \| Response Failed: {NUMBER}$"
)
COMPLETE = re.compile(r"^\[Complete\] Send Total: (\d+) \| ")
CURRENT = re.compile(r"^Current Time: \d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} \| ")
CONSUME_LINE = re.compile(
    rf"Consume TPS: {NUMBER} \| AVG\(B2C\) RT\(ms\): {DECIMAL} \| AVG\(S2C\) RT\(ms\): {DECIMAL} \| "
    rf"MAX\(B2C\) RT\(ms\): {NUMBER} \| MAX\(S2C\) RT\(ms\): {NUMBER} \| Consume Fail: {NUMBER}$"
)


def send_numbers(line: str) -> tuple[int, int, float, int, int]:
    match = SEND_LINE.search(line)
    assert match, line
    tps, max_rt, avg_rt, failed, response_failed = match.groups()
    return int(tps), int(max_rt), float(avg_rt), int(failed), int(response_failed)


def consume_numbers(line: str) -> tuple[int, float, float, int, int, int]:
    match = CONSUME_LINE.search(line)
    assert match, line
    tps, b2c, s2c, b2c_max, s2c_max, failed = match.groups()
    return int(tps), float(b2c), float(s2c), int(b2c_max), int(s2c_max), int(failed)


async def stored(admin: Admin, topic: str) -> int:
    return sum(offsets.max_offset for offsets in (await admin.topic_stats(topic)).values())


async def test_producer_sends_the_quantity_and_reports(cluster: Cluster, admin: Admin) -> None:
    topic = unique("BenchProducer")
    await admin.create_topic(topic, 4)
    result = await mqbench(
        "producer", "-n", cluster.namesrv_addr, "-t", topic, "-q", "600", "-w", "4", "-s", "64",
        "-k", "true", "-l", "3", "-p", "40", "-ri", "1000",
    )  # fmt: skip
    assert result.code == 0, result.err
    assert result.lines[0].startswith(
        f"topic: {topic}, threadCount: 4, messageSize: 64, keyEnable: true, propertySize: 40, tagCount: 3, "
    )
    complete = result.lines[-1]
    match = COMPLETE.match(complete)
    assert match and int(match.group(1)) == 600, complete
    tps, max_rt, avg_rt, failed, response_failed = send_numbers(complete)
    assert (failed, response_failed) == (0, 0)
    assert tps > 0 and avg_rt > 0 and max_rt >= int(avg_rt)
    for line in result.lines[1:-1]:  # reports while it ran, if it ran that long
        assert CURRENT.match(line) and send_numbers(line)[0] > 0, line
    assert await stored(admin, topic) == 600

    # The messages are what RocketMQ's benchmark builds: a 64-byte alphanumeric body, a key,
    # one of three tags, user properties of more than 40 characters.
    async with PullClient(unique("bench_check"), cluster.namesrv_addr) as puller:
        queue = (await puller.queues(topic))[0]
        messages = [m async for m in puller.read(queue, 0, 20)]
    assert messages
    for msg in messages:
        assert len(msg.body) == 64 and msg.body.isalnum()
        assert msg.tags in {"tag0", "tag1", "tag2"}
        assert len(msg.keys) == 1 and msg.keys[0].isdigit()
        user = {k: v for k, v in msg.properties.items() if k.startswith("prop")}
        assert sum(len(k) + len(v) for k, v in user.items()) > 40


async def test_producer_reports_live_and_stops_on_sigint(cluster: Cluster, admin: Admin) -> None:
    topic = unique("BenchLive")
    await admin.create_topic(topic, 2)
    tool = await RunningTool.start(
        "mqbench", "producer", "-n", cluster.namesrv_addr, "-t", topic, "-w", "2", "-ri", "1000"
    )
    try:
        line = await tool.wait_for_line(r"^Current Time: ")
        assert send_numbers(line)[0] > 0
        progress = await tool.wait_for_line(r"sent \d+ messages \(\d+/s\), 0 failed", stream="err")
        assert int(re.search(r"sent (\d+)", progress).group(1)) > 0  # type: ignore[union-attr]
        tool.proc.send_signal(signal.SIGINT)
        assert await tool.wait() == 0
    finally:
        await tool.stop()
    complete = tool.out[-1]
    match = COMPLETE.match(complete)
    assert match, tool.out
    _, _, _, failed, response_failed = send_numbers(complete)
    assert (failed, response_failed) == (0, 0)
    assert int(match.group(1)) == await stored(admin, topic) > 0


async def test_batch_producer(cluster: Cluster, admin: Admin) -> None:
    topic = unique("BenchBatch")
    await admin.create_topic(topic, 2)
    result = await mqbench(
        "batchproducer",
        "-n",
        cluster.namesrv_addr,
        "-t",
        topic,
        "-q",
        "330",
        "-b",
        "16",
        "-w",
        "2",
        "-ri",
        "1000",
    )
    assert result.code == 0, result.err
    assert "batchSize: 16" in result.lines[0]
    match = re.match(
        rf"^\[Complete\] Send Total: 330 \| Send TPS: {NUMBER} \| Send MPS: {NUMBER} \| Max RT\(ms\): {NUMBER} \| "
        rf"Average RT\(ms\): {DECIMAL} \| Average Message RT\(ms\): {DECIMAL} \| Send Failed: 0 \| "
        r"Send Message Failed: 0$",
        result.lines[-1],
    )
    assert match, result.lines[-1]
    tps, mps, _, avg_rt, avg_msg_rt = (float(x) for x in match.groups())
    assert 0 < tps < mps and avg_msg_rt < avg_rt
    assert await stored(admin, topic) == 330


async def test_consumer_reports_what_it_consumed(cluster: Cluster, admin: Admin) -> None:
    topic, group, failing = unique("BenchConsume"), unique("bench_cg"), unique("bench_fail")
    await admin.create_topic(topic, 4)
    consumer = await RunningTool.start(
        "mqbench",
        "consumer",
        "-n",
        cluster.namesrv_addr,
        "-t",
        topic,
        "-g",
        group,
        "-w",
        "8",
        "-ri",
        "1000",
        "--count",
        "400",
    )
    try:
        await consumer.wait_for_line(r"^Consumer Started\.$")
        idle = await consumer.wait_for_line(r"^Current Time: ")
        assert consume_numbers(idle)[0] == 0  # nothing sent yet
        produced = await mqbench("producer", "-n", cluster.namesrv_addr, "-t", topic, "-q", "400", "-w", "4")
        assert produced.code == 0, produced.err
        assert await consumer.wait() == 0
    finally:
        await consumer.stop()
    assert consumer.out[0].startswith(f"topic: {topic}, threadCount 8, group: {group}, ")
    complete = consumer.out[-1]
    assert complete.startswith("[Complete] Consume Total: 400 | "), consumer.out
    tps, b2c, s2c, b2c_max, s2c_max, failed = consume_numbers(complete)
    assert tps > 0 and failed == 0
    # Born on the producer before stored on the broker, both before consumed (one host, one clock).
    assert b2c >= s2c >= 0 and b2c_max >= int(b2c) and s2c_max >= int(s2c)
    assert await admin.consumer_lag(group, topic) == 0  # shutdown committed every offset

    # A failing share is counted and sent back for a retry.
    result = await mqbench(
        "consumer",
        "-n",
        cluster.namesrv_addr,
        "-t",
        topic,
        "-g",
        failing,
        "-r",
        "0.5",
        "-ri",
        "1000",
        "--count",
        "400",
    )
    assert result.code == 0, result.err
    _, _, _, _, _, failed = consume_numbers(result.lines[-1])
    assert result.lines[-1].startswith("[Complete] Consume Total: 4")
    assert 0 < failed < 400


async def test_failures_and_bad_arguments(dead_address: str) -> None:
    dead = dead_address
    unreachable, unreachable_consumer = await asyncio.gather(
        mqbench("producer", "-n", dead, "-q", "10"),
        mqbench("consumer", "-n", dead),
    )
    for outcome, tool in ((unreachable, "producer"), (unreachable_consumer, "consumer")):
        assert outcome.code == 1, outcome
        [reason] = outcome.err.strip().splitlines()
        assert reason.startswith(f"mqbench {tool}: cannot connect to {dead}")
    bad = await asyncio.gather(
        mqbench(),
        mqbench("producer", "-w", "0"),
        mqbench("producer", "-s", "big"),
        mqbench("producer", "-y", "perhaps"),
        mqbench("producer", "-m", "true"),
        mqbench("producer", "-ct", "LZ4", "-c"),
        mqbench("consumer", "-r", "2"),
        mqbench("consumer", "-f", "SQL92"),
    )
    for outcome in bad:
        assert outcome.code == 2, outcome
        assert "usage: mqbench" in outcome.err
        assert outcome.out == ""


def run_on_terminal(args: list[str]) -> tuple[int, list[str], bytes]:
    """Run mqbench with stderr on a pseudo-terminal until its first report, then SIGINT it;
    its exit code, stdout lines and everything written to the terminal."""
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "aiorocketmq.tools.mqbench", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=terminal,
        cwd=ROOT,
        env=tool_env(),
        text=True,
    )
    os.close(terminal)
    assert proc.stdout is not None
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("Current Time: "):
                proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    written = bytearray()
    with contextlib.suppress(OSError):  # EIO once the terminal's other end is closed
        while chunk := os.read(controller, 65536):
            written += chunk
    os.close(controller)
    return code, lines, bytes(written)


async def test_progress_line_is_redrawn_in_place_on_a_terminal(cluster: Cluster, admin: Admin) -> None:
    topic = unique("BenchTty")
    await admin.create_topic(topic, 2)
    args = ["producer", "-n", cluster.namesrv_addr, "-t", topic, "-w", "2", "-ri", "1500"]
    code, lines, written = await asyncio.to_thread(run_on_terminal, args)
    assert code == 0
    assert COMPLETE.match(lines[-1]), lines
    updates = re.findall(rb"\r\[ *\d+\.\ds\] sent (\d+) messages \(\d+/s\), 0 failed\x1b\[K", written)
    assert updates and int(updates[-1]) > 0, written
    assert b"\n" not in written  # redrawn in place, never scrolled
    assert written.endswith(b"\r\x1b[K")  # and cleared before the final report
