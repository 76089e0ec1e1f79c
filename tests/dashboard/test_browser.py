"""The dashboard end to end: a real headless Chromium against a real ``mqdashboard`` process
and a real cluster (name server + two brokers). Each test does what an operator does on a
page and checks what the page shows, and where it matters what the cluster then holds.
Screenshots of every page go to a temporary folder, or to ``$DASHBOARD_SCREENSHOTS``."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
import pytest_asyncio
from playwright.async_api import APIResponse, Browser, Page, expect

from aiorocketmq.client import (
    Admin,
    ClientError,
    ClientOptions,
    ConsumeFrom,
    ConsumeResult,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
    SendResult,
)
from aiorocketmq.dashboard.trace import TRACE_TOPIC, TraceRecord, encode_record
from aiorocketmq.protocol.codes import Perm
from aiorocketmq.protocol.names import dlq_topic, retry_topic
from tests.cluster import Cluster
from tests.support import ROOT

from .conftest import start_dashboard

pytestmark = pytest.mark.asyncio(loop_scope="module")

_names = itertools.count(1)
TIMEOUT = 30_000  # ms, for what the page shows after the cluster changed
FAST = ClientOptions(
    persist_offset_interval=0.3, heartbeat_interval=1.0, rebalance_interval=1.0, route_refresh_interval=1.0
)


def unique(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{next(_names)}"


def local_input(seconds: float) -> str:
    """A ``datetime-local`` field's value."""
    return datetime.fromtimestamp(seconds).strftime("%Y-%m-%dT%H:%M:%S")


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 30.0) -> None:
    """Poll a condition of the cluster (it has no event to await) until it holds."""
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, f"condition not met within {timeout}s"
        await asyncio.sleep(0.1)


@dataclass
class Orders:
    topic: str
    sent: list[SendResult]
    before: float


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def admin(cluster: Cluster) -> AsyncIterator[Admin]:
    async with Admin(cluster.namesrv_addr) as admin:
        yield admin


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def orders(cluster: Cluster, admin: Admin) -> Orders:
    """A topic on both brokers holding 20 JSON orders keyed ``order-<i>``."""
    topic = unique("Orders")
    await admin.create_topic(topic, 2)
    before = time.time() - 1
    async with Producer(unique("shop"), cluster.namesrv_addr) as producer:
        sent = [
            await producer.send(
                Message(topic, json.dumps({"order": i, "amount": i * 10}), tags="paid", keys=[f"order-{i}"])
            )
            for i in range(20)
        ]
    return Orders(topic, sent, before)


async def test_cluster_page_shows_the_brokers(
    page: Page, dashboard: str, cluster: Cluster, screenshots: Path
) -> None:
    response = await page.goto(dashboard + "/")
    assert response is not None and response.status == 200
    for name in ("broker-a", "broker-b"):
        row = page.locator(f'#brokers tr[data-broker="{name}"]')
        await expect(row).to_have_class("up")
        await expect(row).to_contain_text("MASTER")
        await expect(row).to_contain_text(cluster.brokers[name].addr)
        await expect(row).to_contain_text("V4_9_")
    # The live chart drew a line per broker from /api/live.
    await expect(page.locator('[data-chart="brokerPutTps"] svg polyline')).to_have_count(2, timeout=TIMEOUT)
    await expect(page.locator('[data-chart="brokerPutTps"] .legend')).to_contain_text("broker-a@")
    await page.screenshot(path=screenshots / "cluster.png")


async def test_create_topic_through_the_form(
    page: Page, dashboard: str, cluster: Cluster, admin: Admin, screenshots: Path
) -> None:
    topic = unique("Invoices")
    await page.goto(dashboard + "/topics")
    form = page.locator("#create-topic")
    await form.locator('input[name="topic"]').fill(topic)
    await form.locator('input[name="read_queues"]').fill("3")
    await form.locator('input[name="write_queues"]').fill("3")
    await form.locator('select[name="perm"]').select_option("6")
    await form.locator("button").click()
    # Redirected to the topic's page: saved, routed on both brokers, 3 queues each.
    await expect(page.locator(".flash.ok")).to_contain_text(f"topic {topic} saved")
    await expect(page.locator("#route tbody tr")).to_have_count(2)
    await expect(page.locator("#offsets tbody tr")).to_have_count(6)

    send = page.locator("#send")
    await send.locator('input[name="keys"]').fill("invoice-1")
    await send.locator('textarea[name="body"]').fill('{"invoice": 1}')
    await send.locator("button").click()
    await expect(page.locator(".flash.ok")).to_contain_text("sent SEND_OK")
    (found,) = await admin.query_messages_by_key(topic, "invoice-1")
    assert found.body == b'{"invoice": 1}'
    await expect(page.locator("#offsets td.num", has_text="1")).not_to_have_count(0)
    await page.screenshot(path=screenshots / "topic.png")

    await page.goto(f"{dashboard}/topics?q={topic}")
    row = page.locator(f'#topics tr[data-topic="{topic}"]')
    await expect(row).to_contain_text("RW")
    await expect(row.locator("td.num").first).to_have_text("6")
    await expect(page.locator("#topics tbody tr")).to_have_count(1)

    listed = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "aiorocketmq.tools.mqadmin", "topicList", "-n", cluster.namesrv_addr],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    assert topic in listed.stdout.split()

    # Refusals come back as messages on the page: a name the SDK rejects, a topic brokers
    # refuse writes to.
    refused = await page.request.post(dashboard + "/topics/create", form={"topic": "bad name!"})
    assert refused.ok and "was not saved" in await refused.text()
    read_only = unique("ReadOnly")
    await admin.create_topic(read_only, 1, perm=Perm.READ)
    refused = await page.request.post(dashboard + "/topic/send", form={"topic": read_only, "body": "x"})
    assert refused.ok and "message not sent" in await refused.text()

    # Deleted through its page: gone from the list and from the name server.
    doomed = unique("Doomed")
    await admin.create_topic(doomed, 1)
    await page.goto(f"{dashboard}/topic?name={doomed}")
    await page.locator('#delete-topic input[type="checkbox"]').check()
    await page.locator("#delete-topic button").click()
    await expect(page.locator(".flash.ok")).to_contain_text(f"topic {doomed} deleted")
    await expect(page.locator(f'#topics tr[data-topic="{doomed}"]')).to_have_count(0)
    assert doomed not in await admin.topic_list()

    await page.goto(dashboard + "/topics")
    # Only the operator's topics by default: not the ones brokers register for themselves.
    await expect(page.locator('#topics tr[data-topic="broker-a"]')).to_have_count(0)
    await expect(page.locator('[data-chart="topicTps"] svg')).to_be_visible(timeout=TIMEOUT)
    await page.screenshot(path=screenshots / "topics.png")


async def test_lag_falls_as_a_consumer_consumes(
    page: Page, dashboard: str, cluster: Cluster, admin: Admin, orders: Orders, screenshots: Path
) -> None:
    group = unique("billing")
    gate = asyncio.Event()
    consumer = PushConsumer(group, cluster.namesrv_addr, consume_from=ConsumeFrom.FIRST_OFFSET, options=FAST)
    consumer.subscribe(orders.topic, "*")

    @consumer.listener
    async def hold(messages: list[MessageExt]) -> ConsumeResult:
        await gate.wait()  # nothing is consumed until the page has shown the backlog
        return ConsumeResult.SUCCESS

    async with consumer:

        async def backlog_visible() -> bool:
            try:
                return await admin.consumer_lag(group) == len(orders.sent)
            except Exception:
                return False

        await eventually(backlog_visible)
        await page.goto(dashboard + "/groups")
        lag = page.locator(f'#groups tr[data-group="{group}"] [data-live-lag]')
        await expect(lag).to_have_text(str(len(orders.sent)))
        await expect(page.locator(f'#groups tr[data-group="{group}"]')).to_contain_text("CLUSTERING")
        gate.set()
        # No reload: the page's script follows /api/live until the lag is gone.
        await expect(lag).to_have_text("0", timeout=TIMEOUT)
        await expect(page.locator('[data-chart="groupLag"] .legend')).to_contain_text(group, timeout=TIMEOUT)
        await page.screenshot(path=screenshots / "groups.png")

        await page.goto(f"{dashboard}/group?name={group}")
        await expect(page.locator("#clients tbody tr")).to_have_count(1)
        await expect(page.locator("#clients tbody tr")).to_contain_text("PYTHON")
        await expect(page.locator("#clients tbody tr")).to_contain_text("V4_")
        await expect(page.locator("#subscriptions")).to_contain_text(orders.topic)
        await expect(page.locator("#queues tbody tr").first).to_be_visible()
        await page.screenshot(path=screenshots / "group.png")


async def test_reset_offset_raises_the_lag(page: Page, dashboard: str, admin: Admin, orders: Orders) -> None:
    group = unique("audit")
    for queue in await admin.queues(orders.topic):
        await admin.update_consumer_offset(group, queue, await admin.max_offset(queue))
    await page.goto(f"{dashboard}/group?name={group}")
    total = page.locator(".lag-total")
    await expect(total).to_have_text("0")

    reset = page.locator("#reset")
    await reset.locator('select[name="topic"]').select_option(orders.topic)
    await reset.locator('input[name="time"]').fill(local_input(orders.before))
    await reset.locator("button").click()
    await expect(page.locator(".flash.ok")).to_contain_text(f"offsets of {group} on {orders.topic} reset")
    await expect(total).to_have_text(str(len(orders.sent)))
    assert await admin.consumer_lag(group, orders.topic) == len(orders.sent)

    await page.locator("#skip button").click()
    await expect(page.locator(".flash.ok")).to_contain_text("skipped its backlog")
    await expect(total).to_have_text("0")
    assert await admin.consumer_lag(group, orders.topic) == 0

    await page.locator('#delete-group input[name="offsets"]').check()
    await page.locator("#delete-group input[required]").check()
    await page.locator("#delete-group button").click()
    await expect(page.locator(".flash.ok")).to_contain_text(f"group {group} deleted")
    with pytest.raises(ClientError, match="no broker knows consumer group"):
        await admin.consume_stats(group)  # its offsets went with it


async def test_find_a_message_by_key_and_open_it(
    page: Page, dashboard: str, cluster: Cluster, admin: Admin, orders: Orders, screenshots: Path
) -> None:
    wanted = orders.sent[7]
    # A client that traces wrote its records for the message to the trace topic.
    await admin.create_topic(TRACE_TOPIC, 1)
    published = TraceRecord("Pub", wanted.msg_id, int(time.time() * 1000), "shop", orders.topic,
                            "paid", "order-7", wanted.queue.broker_name, cost_ms=3, success=True)  # fmt: skip
    consumed = TraceRecord("SubAfter", wanted.msg_id, int(time.time() * 1000), "billing", keys="order-7",
                           cost_ms=5, success=True, request_id="r1")  # fmt: skip
    async with Producer(unique("tracer"), cluster.namesrv_addr) as producer:
        await producer.send(
            Message(
                TRACE_TOPIC,
                encode_record(published) + encode_record(consumed),
                keys=[wanted.msg_id, "order-7"],
            )
        )

    await page.goto(dashboard + "/messages")
    by_key = page.locator("#by-key")
    await by_key.locator('input[name="topic"]').fill(orders.topic)
    await by_key.locator('input[name="key"]').fill("order-7")
    await by_key.locator("button").click()
    results = page.locator("#results tbody tr")
    await expect(results).to_have_count(1)
    await expect(results).to_contain_text(wanted.msg_id)
    await page.screenshot(path=screenshots / "messages.png")

    await results.locator("a").click()
    await expect(page.locator("#headers")).to_contain_text("order-7")
    await expect(page.locator("#headers")).to_contain_text(wanted.offset_msg_id)
    await expect(page.locator("#properties")).to_contain_text("UNIQ_KEY")
    await expect(page.locator("#body")).to_have_text('{"order": 7, "amount": 70}')
    trace = page.locator("#trace tbody tr")
    await expect(trace).to_have_count(2)
    await expect(trace.first).to_contain_text("Pub")
    await expect(trace.nth(1)).to_contain_text("billing")
    await page.screenshot(path=screenshots / "message.png", full_page=True)
    await page.get_by_role("link", name="json", exact=True).click()
    await expect(page.locator("#body")).to_have_text('{\n  "order": 7,\n  "amount": 70\n}')
    await page.get_by_role("link", name="hex", exact=True).click()
    await expect(page.locator("#body")).to_contain_text("7b 22 6f 72 64 65 72 22")

    # Resent to one group: a copy lands in the group's retry topic, naming its topic.
    group = unique("refunds")
    await admin.create_topic(retry_topic(group), 1)
    await page.reload()
    await page.locator('#resend select[name="group"]').select_option(group)
    await page.locator("#resend button").click()
    await expect(page.locator(".flash.ok")).to_contain_text(f"resent to {group}")
    (copy,) = await admin.query_messages_by_key(retry_topic(group), "order-7")
    assert copy.body == b'{"order": 7, "amount": 70}'
    assert copy.properties["RETRY_TOPIC"] == orders.topic

    # By its broker (offset) id, without the topic; and by time, all twenty.
    await page.goto(dashboard + "/messages")
    await page.locator('#by-id input[name="id"]').fill(wanted.offset_msg_id)
    await page.locator("#by-id button").click()
    await expect(page.locator("#headers")).to_contain_text(wanted.msg_id)
    await page.goto(f"{dashboard}/messages?by=time&topic={orders.topic}")
    await expect(page.locator("#results tbody tr")).to_have_count(len(orders.sent))


async def test_dead_letters_browse_export_and_resend(
    page: Page, dashboard: str, cluster: Cluster, admin: Admin, screenshots: Path
) -> None:
    topic, group = unique("Payments"), unique("payer")
    await admin.create_topic(topic, 1)
    async with Producer(unique("pay"), cluster.namesrv_addr) as producer:
        for i in range(2):
            await producer.send(Message(topic, f"payment-{i}", keys=[f"pay-{i}"]))
    failing = PushConsumer(group, cluster.namesrv_addr, consume_from=ConsumeFrom.FIRST_OFFSET,
                           max_reconsume_times=1, options=FAST)  # fmt: skip
    failing.subscribe(topic, "*")
    failing.listener(lambda messages: ConsumeResult.RECONSUME_LATER)
    async with failing:

        async def dead() -> bool:
            try:
                return sum([await admin.max_offset(q) for q in await admin.queues(dlq_topic(group))]) == 2
            except Exception:
                return False

        await eventually(dead, timeout=60)

    await page.goto(f"{dashboard}/dlq?group={group}")
    rows = page.locator("#dead-letters tbody tr")
    await expect(rows).to_have_count(2)
    await expect(rows.first).to_contain_text(topic)
    await page.screenshot(path=screenshots / "dlq.png")

    exported = await page.request.get(f"{dashboard}/dlq/export?group={group}&format=json")
    assert exported.ok
    letters = await exported.json()
    assert sorted(m["body"] for m in letters) == ["payment-0", "payment-1"]
    assert all(m["properties"]["RETRY_TOPIC"] == topic for m in letters)
    as_csv = await (await page.request.get(f"{dashboard}/dlq/export?group={group}&format=csv")).text()
    assert as_csv.splitlines()[0].startswith("msgId,offsetMsgId,topic") and len(as_csv.splitlines()) == 3

    # Resent to the group: a healthy member gets it again, under its original topic.
    received: asyncio.Queue[MessageExt] = asyncio.Queue()
    healthy = PushConsumer(group, cluster.namesrv_addr, options=FAST)
    healthy.subscribe(topic, "*")

    @healthy.listener
    async def take(messages: list[MessageExt]) -> ConsumeResult:
        for msg in messages:
            received.put_nowait(msg)
        return ConsumeResult.SUCCESS

    async with healthy:
        first = rows.first
        body = "payment-0" if "pay-0" in await first.inner_text() else "payment-1"
        await first.locator("button").click()
        await expect(page.locator(".flash.ok")).to_contain_text(f"resent to {group}")
        msg = await asyncio.wait_for(received.get(), 30)
        assert msg.body.decode() == body
        assert msg.topic == topic


async def test_producers_page_lists_connections(
    page: Page, dashboard: str, cluster: Cluster, orders: Orders, screenshots: Path
) -> None:
    group = unique("checkout")
    async with Producer(group, cluster.namesrv_addr) as producer:
        await producer.send(Message(orders.topic, "hello"))
        await page.goto(f"{dashboard}/producers?topic={orders.topic}&group={group}")
        rows = page.locator("#producers tbody tr")
        await expect(rows).to_have_count(1)
        await expect(rows.first).to_contain_text(producer.client_id)
        await expect(rows.first).to_contain_text("PYTHON")
        await page.screenshot(path=screenshots / "producers.png")


async def test_bad_input_is_explained_on_the_page(page: Page, dashboard: str, orders: Orders) -> None:
    async def text_of(response: APIResponse) -> str:
        assert response.ok, response.status
        return await response.text()

    shown = await text_of(await page.request.get(dashboard + "/message?id=not-an-id"))
    assert "no offset message id of a known broker" in shown
    posted = await page.request.post(
        dashboard + "/topics/create", form={"topic": unique("Odd"), "read_queues": "many"}
    )
    assert "read_queues must be a whole number" in await text_of(posted)
    posted = await page.request.post(
        dashboard + "/group/reset", form={"group": "g", "topic": orders.topic, "time": "yesterday"}
    )
    assert "not a date and time" in await text_of(posted)
    shown = await text_of(
        await page.request.get(f"{dashboard}/messages?by=time&topic={orders.topic}&begin=soon")
    )
    assert "not a date and time" in shown
    # A form posted from another site is refused outright.
    forged = await page.request.post(
        dashboard + "/topic/delete", form={"topic": orders.topic}, headers={"Origin": "http://evil.example"}
    )
    assert forged.status == 403


async def test_a_silent_name_server_is_a_message_not_a_crash(page: Page, dead_address: str) -> None:
    proc = await start_dashboard(dead_address, "--access-key", "ops-ak", "--secret-key", "ops-sk")
    base = f"http://127.0.0.1:{proc.port}"
    try:
        await page.goto(base + "/")
        await expect(page.locator(".note")).to_contain_text("ACL access key ops-ak is configured")
        for path in ("/", "/topics", "/groups", "/messages?by=time&topic=Orders", "/dlq?group=g"):
            response = await page.goto(base + path)
            assert response is not None and response.status == 200, path
            await expect(page.locator("#error")).to_be_visible()
        live = await page.request.get(base + "/api/live")
        assert live.ok and "name server" in (await live.json())["error"]
    finally:
        assert await proc.stop() == 0, proc.output


async def test_login_and_admin_only_changes(
    browser: Browser, page: Page, cluster: Cluster, tmp_path: Path
) -> None:
    users = tmp_path / "users.properties"
    users.write_text("# who may use the dashboard\nadmin=s3cret,1\nviewer=look\n")
    proc = await start_dashboard(cluster.namesrv_addr, "--users", str(users))
    base = f"http://127.0.0.1:{proc.port}"
    try:
        await page.goto(base + "/topics")
        assert page.url.startswith(base + "/login")
        await page.fill('input[name="username"]', "viewer")
        await page.fill('input[name="password"]', "wrong")
        await page.click("#login button")
        await expect(page.locator(".flash.error")).to_contain_text("wrong user name or password")
        await page.fill('input[name="username"]', "viewer")
        await page.fill('input[name="password"]', "look")
        await page.click("#login button")
        await expect(page).to_have_url(base + "/topics")
        await page.locator('#create-topic input[name="topic"]').fill(unique("Forbidden"))
        await page.locator("#create-topic button").click()
        await expect(page.locator("#error")).to_contain_text("admins only")
        assert (await page.request.get(base + "/api/live")).ok

        admin_context = await browser.new_context()
        try:
            admin_page = await admin_context.new_page()
            await admin_page.goto(base + "/login")
            await admin_page.fill('input[name="username"]', "admin")
            await admin_page.fill('input[name="password"]', "s3cret")
            await admin_page.click("#login button")
            topic = unique("Allowed")
            await admin_page.goto(base + "/topics")
            await admin_page.locator('#create-topic input[name="topic"]').fill(topic)
            await admin_page.locator("#create-topic button").click()
            await expect(admin_page.locator(".flash.ok")).to_contain_text(f"topic {topic} saved")
        finally:
            await admin_context.close()
        anonymous = await browser.new_context()
        try:
            response = await anonymous.request.get(base + "/api/live")
            assert response.status == 401
        finally:
            await anonymous.close()
    finally:
        assert await proc.stop() == 0, proc.output


async def test_a_killed_broker_shows_as_down(
    page: Page, dashboard: str, cluster: Cluster, orders: Orders, screenshots: Path
) -> None:
    await page.goto(dashboard + "/")
    await expect(page.locator('#brokers tr[data-broker="broker-b"]')).to_have_class("up")
    await cluster.kill_broker("broker-b")
    response = await page.goto(dashboard + "/")
    assert response is not None and response.status == 200
    down = page.locator('#brokers tr[data-broker="broker-b"]')
    await expect(down).to_have_class("down")
    await expect(down.locator(".status")).to_contain_text("down")
    await expect(page.locator('#brokers tr[data-broker="broker-a"]')).to_have_class("up")
    await page.screenshot(path=screenshots / "cluster-broker-down.png")
    # The other pages still render, with what the surviving broker knows.
    for path in (
        "/topics",
        f"/topic?name={orders.topic}",
        "/groups",
        f"/messages?by=time&topic={orders.topic}",
    ):
        response = await page.goto(dashboard + path)
        assert response is not None and response.status == 200, path
        await expect(page.locator("main h1")).to_be_visible()


async def test_a_slave_shows_its_commit_log_lag(
    page: Page, dashboard: str, cluster: Cluster, admin: Admin, orders: Orders
) -> None:
    # A broker registered as broker-a's slave (id 1) with an empty store of its own: it is as
    # far behind as broker-a's commit log is long.
    await cluster.start_broker("broker-a-slave", brokerName="broker-a", brokerId=1)

    async def registered() -> bool:
        info = await admin.cluster_info()
        return 1 in info.broker_addr_table["broker-a"].broker_addrs

    await eventually(registered)
    master_end = int(
        (await admin.broker_runtime_info(cluster.brokers["broker-a"].addr))["commitLogMaxOffset"]
    )
    assert master_end > 0
    await page.goto(dashboard + "/")
    await expect(page.locator("#brokers thead")).to_contain_text("Commit-log lag")
    slave = page.locator(f'#brokers tr[data-addr="{cluster.brokers["broker-a-slave"].addr}"]')
    await expect(slave).to_contain_text("SLAVE 1")
    await expect(slave).to_contain_text(f"{master_end} bytes")
