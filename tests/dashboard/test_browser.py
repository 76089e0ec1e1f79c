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
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

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
    auth_admin,
)
from aiorocketmq.dashboard.history import Sample, day_file
from aiorocketmq.dashboard.trace import TRACE_TOPIC, TraceRecord, encode_record
from aiorocketmq.protocol.body import SubscriptionGroupConfig, SubscriptionGroupWrapper, TopicConfig
from aiorocketmq.protocol.codes import Perm, RequestCode
from aiorocketmq.protocol.names import dlq_topic, retry_topic
from tests.cluster import Cluster
from tests.security.pki import make_pki
from tests.support import ROOT

from .conftest import DashboardProcess, start_dashboard

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


async def reload_until(page: Page, url: str, selector: str, timeout: float = 30.0) -> None:
    """Load ``url`` until ``selector`` matches: pages rendered from the collector's files have
    no script following them, and the collector gives no signal outside its process."""

    async def present() -> bool:
        await page.goto(url)
        return await page.locator(selector).count() > 0

    await eventually(present, timeout)


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

        # The member's own account of itself, relayed by a broker.
        await page.locator("#clients tbody tr").get_by_role("link", name="running info").click()
        await expect(page.locator("#client-subscriptions")).to_contain_text(orders.topic)
        # 2 queues of the topic on each broker (and the group's retry queues).
        await expect(page.locator("#client-queues tbody tr", has_text=orders.topic)).to_have_count(4)


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


async def test_topic_page_resets_its_groups(page: Page, dashboard: str, admin: Admin, orders: Orders) -> None:
    group = unique("ledger")
    for queue in await admin.queues(orders.topic):
        await admin.update_consumer_offset(group, queue, await admin.max_offset(queue))
    await page.goto(f"{dashboard}/topic?name={orders.topic}")
    row = page.locator(f'#topic-groups tr[data-group="{group}"]')
    await expect(row.locator("td.num").first).to_have_text("0")
    await row.locator('input[name="groups"]').check()
    await page.locator('#topic-reset input[name="time"]').fill(local_input(orders.before))
    await page.get_by_role("button", name="Reset offsets").click()
    await expect(page.locator(".flash.ok")).to_contain_text(f"offsets of {group} on {orders.topic} moved")
    await expect(row.locator("td.num").first).to_have_text(str(len(orders.sent)))
    assert await admin.consumer_lag(group, orders.topic) == len(orders.sent)
    await row.locator('input[name="groups"]').check()
    await page.get_by_role("button", name="Skip accumulated").click()
    await expect(page.locator(".flash.ok")).to_contain_text("moved to its end")
    await expect(row.locator("td.num").first).to_have_text("0")
    assert await admin.consumer_lag(group, orders.topic) == 0


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

    await results.locator("td:first-child a").click()
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
        await first.get_by_role("button", name="Resend").click()
        await expect(page.locator(".flash.ok")).to_contain_text(f"resent to {group}")
        msg = await asyncio.wait_for(received.get(), 30)
        assert msg.body.decode() == body
        assert msg.topic == topic

    # Both chosen: exported alone, then resent together to the group's retry topic.
    await page.goto(f"{dashboard}/dlq?group={group}")
    boxes = rows.locator('input[type="checkbox"][name="id"]')
    ids = [await box.get_attribute("value") for box in await boxes.all()]
    await boxes.first.check()
    async with page.expect_download() as download_info:
        await page.get_by_role("button", name="Export chosen (JSON)").click()
    saved = await (await download_info.value).path()
    chosen = json.loads(await asyncio.to_thread(Path(saved).read_text))
    assert [m["msgId"] for m in chosen] == ids[:1]
    retried = sum([await admin.max_offset(q) for q in await admin.queues(retry_topic(group))])
    await page.get_by_label("choose all").check()  # live.js: no inline handler under the policy
    await expect(boxes.nth(1)).to_be_checked()
    await page.get_by_role("button", name="Resend chosen").click()
    await expect(page.locator(".flash.ok")).to_contain_text(f"2 dead letters resent to {group}")
    assert sum([await admin.max_offset(q) for q in await admin.queues(retry_topic(group))]) == retried + 2


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
        await expect(rows.first).to_contain_text("V4_")
        await page.screenshot(path=screenshots / "producers.png")
        # Without a group: every connected producer group (RocketMQ 5's producer table).
        await page.goto(dashboard + "/producers")
        listed = page.locator(f'#producer-groups tr[data-group="{group}"]')
        await expect(listed.locator("td.num")).to_have_text("1")
        await listed.get_by_role("link").click()
        await expect(rows.first).to_contain_text(producer.client_id)


async def test_topic_update_form_starts_from_the_topic_as_it_is(
    page: Page, dashboard: str, cluster: Cluster, admin: Admin
) -> None:
    topic = unique("ReadOnly4")
    await admin.create_topic(topic, 4, perm=Perm.READ)
    await page.goto(f"{dashboard}/topic?name={topic}")
    form = page.locator("#update-topic")
    await expect(form.locator('input[name="read_queues"]')).to_have_value("4")
    await expect(form.locator('input[name="write_queues"]')).to_have_value("4")
    await expect(form.locator('select[name="perm"]')).to_have_value("4")
    # Saved unchanged, the topic stays as it was: 4 queues, read-only, on both brokers.
    await form.locator("button").click()
    await expect(page.locator(".flash.ok")).to_contain_text("4 read / 4 write queues, perm R-")
    route = await admin.topic_route(topic)
    assert sorted((q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas) == [
        (4, 4, Perm.READ),
        (4, 4, Perm.READ),
    ]
    # One broker only: broker-a becomes writable with 2 write queues, broker-b stays as it was.
    await form.locator('select[name="broker_addr"]').select_option(cluster.brokers["broker-a"].addr)
    await form.locator('input[name="write_queues"]').fill("2")
    await form.locator('select[name="perm"]').select_option("6")
    await form.locator("button").click()
    await expect(page.locator(".flash.ok")).to_contain_text("4 read / 2 write queues, perm RW")
    route = await admin.topic_route(topic)
    assert {q.broker_name: (q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas} == {
        "broker-a": (4, 2, Perm.READ | Perm.WRITE),
        "broker-b": (4, 4, Perm.READ),
    }
    await expect(page.locator("#not-uniform")).to_be_visible()
    # The brokers now differ: the form starts from broker-a and would change broker-a only.
    await expect(form.locator('select[name="broker_addr"]')).to_have_value(cluster.brokers["broker-a"].addr)


async def test_topic_update_stays_on_the_brokers_holding_it_and_keeps_their_flags(
    page: Page, dashboard: str, cluster: Cluster, admin: Admin
) -> None:
    topic = unique("OnA")
    broker_a = cluster.brokers["broker-a"].addr
    await admin.create_topic(topic, 3, broker_addr=broker_a, order=True)
    await page.goto(f"{dashboard}/topic?name={topic}")
    form = page.locator("#update-topic")
    await expect(form.locator('select[name="broker_addr"]')).to_have_value("")
    await form.locator('input[name="write_queues"]').fill("2")
    await form.locator("button").click()
    await expect(page.locator(".flash.ok")).to_contain_text(f"3 read / 2 write queues, perm RW on {broker_a}")
    route = await admin.topic_route(topic)
    assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums) for q in route.queue_datas] == [
        ("broker-a", 3, 2)
    ]
    response = await admin.instance.call(broker_a, RequestCode.GET_TOPIC_CONFIG, {"topic": topic})
    assert TopicConfig.decode(response.body).order
    # An address that is not one of the cluster's brokers is refused before anything is sent.
    await page.goto(f"{dashboard}/broker?addr=127.0.0.1:1")
    await expect(page.locator("#error")).to_contain_text("is not a broker of this cluster")


async def test_topic_message_types(page: Page, dashboard: str, admin: Admin, orders: Orders) -> None:
    topic = unique("Fifo")
    await page.goto(dashboard + "/topics")
    form = page.locator("#create-topic")
    await form.locator('input[name="topic"]').fill(topic)
    await form.locator('select[name="message_type"]').select_option("FIFO")
    await form.locator("button").click()
    await expect(page.locator(".flash.ok")).to_contain_text(f"topic {topic} saved")
    await expect(page.locator('#update-topic select[name="message_type"]')).to_have_value("FIFO")
    # The list filters by type as Apache's does: FIFO shows it and not the untyped orders.
    await page.goto(f"{dashboard}/topics?type=FIFO")
    await expect(page.locator(f'#topics tr[data-topic="{topic}"] td').nth(1)).to_have_text("FIFO")
    await expect(page.locator(f'#topics tr[data-topic="{orders.topic}"]')).to_have_count(0)
    await page.goto(f"{dashboard}/topics?type=UNSPECIFIED")
    await expect(page.locator(f'#topics tr[data-topic="{orders.topic}"]')).to_have_count(1)
    await expect(page.locator(f'#topics tr[data-topic="{topic}"]')).to_have_count(0)
    retry = retry_topic(unique("typed"))
    await admin.create_topic(retry, 1)
    await page.goto(f"{dashboard}/topics?type=RETRY")
    await expect(page.locator(f'#topics tr[data-topic="{retry}"] td').nth(1)).to_have_text("RETRY")
    await expect(page.locator(f'#topics tr[data-topic="{topic}"]')).to_have_count(0)


async def test_messages_page_pages_through_a_time_range(
    page: Page, dashboard: str, cluster: Cluster, admin: Admin, screenshots: Path
) -> None:
    topic = unique("Clicks")
    await admin.create_topic(topic, 2)
    before = time.time() - 1
    async with Producer(unique("clicker"), cluster.namesrv_addr) as producer:
        sent = [
            (await producer.send(Message(topic, f"click-{i}", keys=[f"click-{i}"]))).msg_id for i in range(45)
        ]
    await page.goto(dashboard + "/messages")
    by_time = page.locator("#by-time")
    await by_time.locator('input[name="topic"]').fill(topic)
    await by_time.locator('input[name="begin"]').fill(local_input(before))
    await by_time.locator('input[name="end"]').fill(local_input(time.time() + 60))
    await by_time.locator("button").click()
    await expect(page.locator("#found")).to_contain_text("45 messages")
    rows = page.locator("#results tbody tr")
    await expect(rows).to_have_count(20)
    await expect(page.locator("nav.pager").first).to_contain_text("page 1 of 3")
    await page.screenshot(path=screenshots / "messages-paged.png")
    # The page stays short: 20 rows, not the whole range.
    assert await page.evaluate("document.documentElement.scrollHeight") < 2000
    seen = await rows.locator("td:first-child a").all_inner_texts()
    stored = await rows.locator("td:nth-child(8)").all_inner_texts()
    for expected in (20, 5):
        await page.locator('nav.pager a[rel="next"]').first.click()
        await expect(rows).to_have_count(expected)
        seen += await rows.locator("td:first-child a").all_inner_texts()
        stored += await rows.locator("td:nth-child(8)").all_inner_texts()
    # Every message once, newest first across the pages.
    assert sorted(seen) == sorted(sent)
    assert stored == sorted(stored, reverse=True)
    await expect(page.locator('nav.pager a[rel="next"]')).to_have_count(0)
    # A bigger page size shows them all on one page.
    await page.get_by_role("link", name="50", exact=True).first.click()
    await expect(rows).to_have_count(45)


async def test_message_trace_search(
    page: Page, dashboard: str, cluster: Cluster, admin: Admin, screenshots: Path
) -> None:
    topic, producer_group, group = unique("Traced"), unique("tracing_producer"), unique("tracing_consumer")
    await admin.create_topic(topic, 1)
    await admin.create_topic(TRACE_TOPIC, 1)
    consumed = asyncio.Event()
    consumer = PushConsumer(
        group, cluster.namesrv_addr, consume_from=ConsumeFrom.FIRST_OFFSET, enable_trace=True, options=FAST
    )
    consumer.subscribe(topic, "*")

    @consumer.listener
    async def take(messages: list[MessageExt]) -> ConsumeResult:
        consumed.set()
        return ConsumeResult.SUCCESS

    async with consumer, Producer(producer_group, cluster.namesrv_addr, enable_trace=True) as producer:
        result = await producer.send(Message(topic, "traced", tags="t1", keys=["parcel-1"]))
        await asyncio.wait_for(consumed.wait(), 30)

        async def recorded() -> bool:
            found = await admin.query_messages_by_key(TRACE_TOPIC, result.msg_id)
            bodies = "".join(m.body.decode(errors="replace") for m in found)
            return "Pub" in bodies and "SubAfter" in bodies

        await eventually(recorded)

    await page.goto(dashboard + "/trace")
    by_key = page.locator("#trace-by-key")
    await by_key.locator('input[name="topic"]').fill(topic)
    await by_key.locator('input[name="key"]').fill("parcel-1")
    await by_key.locator("button").click()
    found = page.locator("#trace-found tbody tr")
    await expect(found).to_have_count(1)
    await expect(found).to_contain_text(result.msg_id)
    await found.get_by_role("link", name="trace").click()
    sent = page.locator("#trace-sent tbody tr")
    await expect(sent).to_have_count(1)
    await expect(sent).to_contain_text(producer_group)
    await expect(sent).to_contain_text("success")
    await expect(sent).to_contain_text(topic)
    done = page.locator(f'#trace-consumed tr[data-group="{group}"]')
    await expect(done).to_have_count(1)
    await expect(done).to_contain_text("success")
    await page.screenshot(path=screenshots / "trace.png")
    # An id nobody traced says so.
    await page.locator('#trace-by-id input[name="id"]').fill("0A0000000000000000000000DEADBEEF")
    await page.locator("#trace-by-id button").click()
    await expect(page.locator("#no-trace")).to_be_visible()


async def test_broker_configuration_view_and_change(
    page: Page, dashboard: str, cluster: Cluster, admin: Admin, screenshots: Path
) -> None:
    addr = cluster.brokers["broker-a"].addr
    await page.goto(dashboard + "/")
    await page.locator('#brokers tr[data-broker="broker-a"] a.config').click()
    await expect(page.locator('#config tr[data-key="brokerName"]')).to_contain_text("broker-a")
    await expect(page).to_have_title("Broker broker-a · mqdashboard")
    await expect(page.locator("#runtime")).to_have_count(1)
    await expect(page.locator('#config tr[data-key="listenPort"]')).to_contain_text(
        str(cluster.brokers["broker-a"].port)
    )
    await page.locator('form.bar input[name="q"]').fill("reserved")
    await page.locator("form.bar button").click()
    row = page.locator('#config tr[data-key="fileReservedTime"]')
    await expect(row).to_contain_text("72")
    await row.get_by_role("link", name="change").click()
    form = page.locator("#update-config")
    await expect(form.locator('input[name="key"]')).to_have_value("fileReservedTime")
    await expect(form.locator('input[name="value"]')).to_have_value("72")
    await form.locator('input[name="value"]').fill("48")
    await form.locator("button").click()
    await expect(page.locator(".flash.ok")).to_contain_text("fileReservedTime set to 48")
    await expect(row).to_contain_text("48")
    assert (await admin.broker_config(addr))["fileReservedTime"] == "48"
    await expect(page.locator("#runtime")).to_contain_text("brokerVersionDesc")
    await page.screenshot(path=screenshots / "broker.png")
    await form.locator('input[name="key"]').fill("noSuchSetting")
    await form.locator('input[name="value"]').fill("1")
    await form.locator("button").click()
    await expect(page.locator(".flash.error")).to_contain_text("has no such setting")


async def test_consumer_group_settings(page: Page, dashboard: str, cluster: Cluster, admin: Admin) -> None:
    group = unique("settled")
    await page.goto(dashboard + "/groups")
    create = page.locator("#create-group")
    await create.locator('input[name="group"]').fill(group)
    await create.locator('input[name="retryMaxTimes"]').fill("5")
    await create.locator("button").click()
    await expect(page.locator(".flash.ok")).to_contain_text(f"settings of {group} saved")
    settings = page.locator("#group-settings")
    await expect(settings.locator('input[name="retryMaxTimes"]')).to_have_value("5")
    await expect(page.locator("main")).to_contain_text("Held by broker-a, broker-b")
    # broker-b's copy differs in a setting the form does not show: an edit must not copy
    # broker-a's over it.
    broker_b = cluster.brokers["broker-b"].addr
    await admin.update_subscription_group(
        SubscriptionGroupConfig(group_name=group, retry_max_times=5, consume_message_orderly=True),
        broker_addr=broker_b,
    )
    await settings.locator('input[name="consumeEnable"]').uncheck()
    await settings.locator('input[name="retryMaxTimes"]').fill("3")
    await settings.locator("button").click()
    await expect(page.locator(".flash.ok")).to_contain_text(f"settings of {group} saved")
    await expect(settings.locator('input[name="retryMaxTimes"]')).to_have_value("3")
    await expect(settings.locator('input[name="consumeEnable"]')).not_to_be_checked()
    for addr in await admin.master_addrs():
        response = await admin.instance.call(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {})
        config = SubscriptionGroupWrapper.decode(response.body).subscription_group_table[group]
        assert (config.retry_max_times, config.consume_enable) == (3, False)
        assert config.consume_message_orderly == (addr == broker_b)

    # Deleted on one broker only: the other keeps the group.
    await page.locator('#delete-group select[name="broker_addr"]').select_option(
        cluster.brokers["broker-a"].addr
    )
    await page.locator("#delete-group input[required]").check()
    await page.locator("#delete-group button").click()
    await expect(page.locator(".flash.ok")).to_contain_text(f"group {group} deleted on")
    await expect(page.locator("main")).to_contain_text("Held by broker-b.")
    held = {}
    for name in ("broker-a", "broker-b"):
        response = await admin.instance.call(
            cluster.brokers[name].addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {}
        )
        held[name] = group in SubscriptionGroupWrapper.decode(response.body).subscription_group_table
    assert held == {"broker-a": False, "broker-b": True}


async def test_acl_accounts_view_and_edit_over_tls(
    browser: Browser, page: Page, dashboard: str, tmp_path: Path, screenshots: Path
) -> None:
    # The shared cluster runs without ACL: the page says so per broker.
    await page.goto(dashboard + "/acl")
    await expect(page.locator('#acl-brokers tr[data-broker="broker-a"]')).to_contain_text(
        "ACL is not enabled"
    )

    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(
        "globalWhiteRemoteAddresses: []\n"
        "accounts:\n"
        "  - {accessKey: dash_admin, secretKey: dash_admin_secret, admin: true}\n"
        "  - {accessKey: dash_alice, secretKey: alice_secret_1, admin: false, defaultTopicPerm: DENY,"
        " topicPerms: [Orders=PUB]}\n"
    )
    users = tmp_path / "users.properties"
    users.write_text("boss=b0ss,1\nviewer=look\n")
    # Secured as a production cluster is: ACL, and TLS only (plain text refused).
    root = tmp_path / "secured"
    root.mkdir()
    pki = make_pki(root)
    tls_file = root / "tls.properties"
    tls_file.write_text(
        f"tls.server.mode=enforcing\ntls.server.certPath={pki['cert']}\ntls.server.keyPath={pki['key']}\n"
        f"tls.enable=true\ntls.client.authServer=true\ntls.client.trustCertPath={pki['ca']}\n"
    )
    tls: dict[str, Any] = {"tls.config.file": str(tls_file)}
    secured = Cluster(root)
    await secured.start_namesrv(**tls)
    proc = None
    try:
        await secured.start_broker(
            "broker-s", aclEnable="true", **{"rocketmq.acl.plain.file": str(acl_file)}, **tls
        )
        proc = await start_dashboard(
            secured.namesrv_addr,
            "--users", str(users), "--access-key", "dash_admin", "--secret-key", "dash_admin_secret",
            "--tls", "--tls-ca-file", str(pki["ca"]),
        )  # fmt: skip
        base = f"http://127.0.0.1:{proc.port}"

        async def log_in(context_page: Page, user: str, password: str) -> None:
            await context_page.goto(base + "/login?next=/acl")
            await context_page.fill('input[name="username"]', user)
            await context_page.fill('input[name="password"]', password)
            await context_page.click("#login button")
            await expect(context_page).to_have_url(base + "/acl")

        await log_in(page, "boss", "b0ss")
        alice = page.locator('#accounts tr[data-account="dash_alice"]')
        await expect(alice).to_contain_text("alice_secret_1")
        await expect(alice).to_contain_text("Orders=PUB")
        await expect(alice).to_contain_text("broker-s")

        form = page.locator("#acl-account")
        await form.locator('input[name="access_key"]').fill("dash_carol")
        await form.locator('input[name="secret_key"]').fill("carol_secret_1")
        await form.locator('select[name="default_topic_perm"]').select_option("DENY")
        await form.locator('textarea[name="topic_perms"]').fill("Orders=PUB|SUB\nRefunds=SUB")
        await form.locator('textarea[name="group_perms"]').fill("billing=SUB")
        await form.locator("button").click()
        await expect(page.locator(".flash.ok")).to_contain_text("account dash_carol saved on broker-s")
        carol = page.locator('#accounts tr[data-account="dash_carol"]')
        await expect(carol).to_contain_text("Refunds=SUB")
        await expect(carol).to_contain_text("billing=SUB")
        await page.screenshot(path=screenshots / "acl.png")

        # Edited: the form starts from the account; the secret stays when left as shown.
        await carol.get_by_role("link", name="edit").click()
        await expect(form.locator('input[name="access_key"]')).to_have_value("dash_carol")
        await expect(form.locator('textarea[name="topic_perms"]')).to_have_value(
            "Orders=PUB|SUB\nRefunds=SUB"
        )
        await form.locator('textarea[name="topic_perms"]').fill("Orders=SUB")
        await form.locator("button").click()
        await expect(page.locator(".flash.ok")).to_contain_text("account dash_carol saved")
        await expect(carol).not_to_contain_text("Refunds")
        signed = ClientOptions(
            access_key="dash_admin", secret_key="dash_admin_secret", tls=True, tls_ca_file=str(pki["ca"])
        )
        async with Admin(secured.namesrv_addr, options=signed) as secured_admin:
            config = await secured_admin.acl_config(secured.brokers["broker-s"].addr)
            (held,) = [a for a in config["plainAccessConfigs"] if a["accessKey"] == "dash_carol"]
            assert held["secretKey"] == "carol_secret_1" and held["topicPerms"] == ["Orders=SUB"]
            # The secret cleared: "unchanged when empty", the masters keep the one they hold.
            await carol.get_by_role("link", name="edit").click()
            await form.locator('input[name="secret_key"]').fill("")
            await form.locator('textarea[name="topic_perms"]').fill("Orders=PUB")
            await form.locator("button").click()
            await expect(page.locator(".flash.ok")).to_contain_text("account dash_carol saved")
            config = await secured_admin.acl_config(secured.brokers["broker-s"].addr)
            (held,) = [a for a in config["plainAccessConfigs"] if a["accessKey"] == "dash_carol"]
            assert held["secretKey"] == "carol_secret_1" and held["topicPerms"] == ["Orders=PUB"]

            # A bad permission is explained, not sent.
            await form.locator('input[name="access_key"]').fill("dash_carol")
            await form.locator('textarea[name="topic_perms"]').fill("Orders=WRITE")
            await form.locator("button").click()
            await expect(page.locator(".flash.error")).to_contain_text("not Name=PERM")

            await carol.locator('input[type="checkbox"]').check()
            await carol.get_by_role("button", name="Delete").click()
            await expect(page.locator(".flash.ok")).to_contain_text("account dash_carol deleted")
            await expect(carol).to_have_count(0)
            config = await secured_admin.acl_config(secured.brokers["broker-s"].addr)
            assert "dash_carol" not in [a["accessKey"] for a in config["plainAccessConfigs"]]

            await page.locator('#acl-white textarea[name="addresses"]').fill("10.10.103.*\n192.168.1.*")
            await page.locator("#acl-white button").click()
            await expect(page.locator(".flash.ok")).to_contain_text("global white list saved on broker-s")
            await expect(page.locator('#acl-brokers tr[data-broker="broker-s"]')).to_contain_text(
                "10.10.103.*, 192.168.1.*"
            )
            config = await secured_admin.acl_config(secured.brokers["broker-s"].addr)
            assert config["globalWhiteAddrs"] == ["10.10.103.*", "192.168.1.*"]

        # A user who is not an admin sees no secret and may not change anything.
        viewer_context = await browser.new_context()
        try:
            viewer = await viewer_context.new_page()
            await log_in(viewer, "viewer", "look")
            await expect(viewer.locator('#accounts tr[data-account="dash_alice"]')).not_to_contain_text(
                "alice_secret_1"
            )
            refused = await viewer.request.post(base + "/acl/delete", form={"access_key": "dash_alice"})
            assert refused.status == 403
        finally:
            await viewer_context.close()
    finally:
        if proc is not None:
            assert await proc.stop() == 0, proc.output
        await secured.stop()


async def test_acl2_users_and_policies_view_and_edit(
    browser: Browser, page: Page, tmp_path: Path, screenshots: Path
) -> None:
    """A broker with ACL 2.0 on (authentication and authorization), the dashboard signing as the
    super user the broker was started with: an admin creates, edits and deletes a user and a
    policy through /acl2, and the broker holds what the page shows."""
    users = tmp_path / "users.properties"
    users.write_text("boss=b0ss,1\nviewer=look\n")
    secured = Cluster(tmp_path / "acl2")
    await secured.start_namesrv()
    proc = None
    try:
        broker = await secured.start_broker(
            "broker-v2",
            authenticationEnabled="true",
            authorizationEnabled="true",
            initAuthenticationUser='{"username":"dash_super","password":"dash_super_secret"}',
        )
        proc = await start_dashboard(
            secured.namesrv_addr,
            "--users", str(users), "--access-key", "dash_super", "--secret-key", "dash_super_secret",
        )  # fmt: skip
        base = f"http://127.0.0.1:{proc.port}"

        async def log_in(context_page: Page, user: str, password: str) -> None:
            await context_page.goto(base + "/login?next=/acl2")
            await context_page.fill('input[name="username"]', user)
            await context_page.fill('input[name="password"]', password)
            await context_page.click("#login button")
            await expect(context_page).to_have_url(base + "/acl2")

        await log_in(page, "boss", "b0ss")
        await expect(page.locator('#auth-brokers tr[data-broker="broker-v2"]')).to_contain_text("answers")
        await expect(page.locator('#auth-users tr[data-user="dash_super"]')).to_contain_text("Super")
        await expect(page.locator("#auth-users")).not_to_contain_text("dash_super_secret")

        user_form = page.locator("#auth-user")
        await user_form.locator('input[name="username"]').fill("app_carol")
        await user_form.locator('input[name="password"]').fill("carol_secret_1")
        await user_form.locator('select[name="user_type"]').select_option("Normal")
        await user_form.locator("button").click()
        await expect(page.locator(".flash.ok")).to_contain_text("user app_carol saved on broker-v2")
        carol = page.locator('#auth-users tr[data-user="app_carol"]')
        await expect(carol).to_contain_text("Normal")
        await expect(carol).to_contain_text("enable")

        policy_form = page.locator("#auth-policy")
        await policy_form.locator('input[name="subject"]').fill("app_carol")
        await policy_form.locator('textarea[name="resources"]').fill("Topic:Orders\nGroup:billing")
        for action in ("Pub", "Sub"):
            await policy_form.locator(f'input[name="actions"][value="{action}"]').check()
        await policy_form.locator('textarea[name="source_ips"]').fill("10.0.0.0/8")
        await policy_form.locator('select[name="decision"]').select_option("Allow")
        await policy_form.locator("button").click()
        await expect(page.locator(".flash.ok")).to_contain_text("policy of User:app_carol saved on broker-v2")
        orders = page.locator(
            '#auth-policies tr[data-subject="User:app_carol"][data-resource="Topic:Orders"]'
        )
        billing = page.locator(
            '#auth-policies tr[data-subject="User:app_carol"][data-resource="Group:billing"]'
        )
        for row in (orders, billing):
            await expect(row).to_contain_text("Pub, Sub")
            await expect(row).to_contain_text("10.0.0.0/8")
            await expect(row).to_contain_text("Allow")
        await page.screenshot(path=screenshots / "acl2.png")

        signed = ClientOptions(access_key="dash_super", secret_key="dash_super_secret")
        async with Admin(secured.namesrv_addr, options=signed) as admin:
            held_user = await auth_admin.get_user(admin, broker.addr, "app_carol")
            assert held_user is not None and held_user.user_type == "Normal"
            held_acl = await auth_admin.get_acl(admin, broker.addr, "User:app_carol")
            assert held_acl is not None and held_acl.policies
            entries = {e.resource: e for policy in held_acl.policies for e in policy.entries or []}
            assert set(entries) == {"Topic:Orders", "Group:billing"}
            assert entries["Topic:Orders"].actions == ["Pub", "Sub"]
            assert entries["Topic:Orders"].source_ips == ["10.0.0.0/8"]
            assert entries["Topic:Orders"].decision == "Allow"

            # Edited: the forms start from what the masters hold.
            await carol.get_by_role("link", name="edit").click()
            await expect(user_form.locator('input[name="username"]')).to_have_value("app_carol")
            await user_form.locator('select[name="user_status"]').select_option("disable")
            await user_form.locator("button").click()
            await expect(page.locator(".flash.ok")).to_contain_text("user app_carol saved")
            await expect(carol).to_contain_text("disable")
            held_user = await auth_admin.get_user(admin, broker.addr, "app_carol")
            assert held_user is not None and held_user.user_status == "disable"

            await orders.get_by_role("link", name="edit").click()
            await expect(policy_form.locator('textarea[name="resources"]')).to_have_value("Topic:Orders")
            await expect(policy_form.locator('input[name="actions"][value="Pub"]')).to_be_checked()
            await policy_form.locator('input[name="actions"][value="Sub"]').uncheck()
            await policy_form.locator('select[name="decision"]').select_option("Deny")
            await policy_form.locator("button").click()
            await expect(page.locator(".flash.ok")).to_contain_text("policy of User:app_carol saved")
            await expect(orders).to_contain_text("Deny")
            held_acl = await auth_admin.get_acl(admin, broker.addr, "User:app_carol")
            assert held_acl is not None and held_acl.policies
            entries = {e.resource: e for policy in held_acl.policies for e in policy.entries or []}
            assert (entries["Topic:Orders"].actions, entries["Topic:Orders"].decision) == (["Pub"], "Deny")
            assert entries["Group:billing"].decision == "Allow"

            # A resource of no known type is explained, not sent.
            await policy_form.locator('input[name="subject"]').fill("app_carol")
            await policy_form.locator('textarea[name="resources"]').fill("Queue:Orders")
            await policy_form.locator('input[name="actions"][value="Sub"]').check()
            await policy_form.locator("button").click()
            await expect(page.locator(".flash.error")).to_contain_text("is not Type:name")

            await orders.locator('input[type="checkbox"]').check()
            await orders.get_by_role("button", name="Delete").click()
            await expect(page.locator(".flash.ok")).to_contain_text(
                "policy of User:app_carol on Topic:Orders deleted"
            )
            await expect(orders).to_have_count(0)
            await expect(billing).to_have_count(1)
            held_acl = await auth_admin.get_acl(admin, broker.addr, "User:app_carol")
            assert held_acl is not None and held_acl.policies
            assert [e.resource for policy in held_acl.policies for e in policy.entries or []] == [
                "Group:billing"
            ]

            await billing.locator('input[type="checkbox"]').check()
            await billing.get_by_role("button", name="Delete").click()
            await expect(billing).to_have_count(0)
            await carol.locator('input[type="checkbox"]').check()
            await carol.get_by_role("button", name="Delete").click()
            await expect(page.locator(".flash.ok")).to_contain_text("user app_carol deleted on broker-v2")
            await expect(carol).to_have_count(0)
            assert await auth_admin.get_user(admin, broker.addr, "app_carol") is None

        # A user who is not an admin may look but not change anything.
        viewer_context = await browser.new_context()
        try:
            viewer = await viewer_context.new_page()
            await log_in(viewer, "viewer", "look")
            await expect(viewer.locator('#auth-users tr[data-user="dash_super"]')).to_be_visible()
            refused = await viewer.request.post(base + "/acl2/user/delete", form={"username": "dash_super"})
            assert refused.status == 403
        finally:
            await viewer_context.close()
    finally:
        if proc is not None:
            assert await proc.stop() == 0, proc.output
        await secured.stop()


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
    proc = await start_dashboard(
        dead_address, "--access-key", "ops-ak", "--secret-key", "ops-sk", "--collect-interval", "0.2"
    )
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
        # The collector goes on sampling, recording why it has no figures.
        await reload_until(page, base + "/history", '#error:has-text("name server")')
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
            # Every answer carries the policy: own script and stylesheet only, never framed.
            for path in ("/login", "/static/live.js"):
                headers = (await anonymous.request.get(base + path)).headers
                assert "frame-ancestors 'none'" in headers["content-security-policy"]
                assert "script-src 'self'" in headers["content-security-policy"]
                assert headers["x-frame-options"] == "DENY"
                assert headers["x-content-type-options"] == "nosniff"
                assert "strict-transport-security" not in headers  # plain HTTP here
        finally:
            await anonymous.close()

        # Guessing: five wrong passwords for admin, then even the right one is refused for a while.
        guesser = await browser.new_context()
        try:
            guess = await guesser.new_page()
            await guess.goto(base + "/login")
            for attempt in range(5):
                await guess.fill('input[name="username"]', "admin")
                await guess.fill('input[name="password"]', f"guess{attempt}")
                await guess.click("#login button")
                await expect(guess.locator(".flash.error")).to_contain_text("wrong user name or password")
            await guess.fill('input[name="username"]', "admin")
            await guess.fill('input[name="password"]', "s3cret")
            async with guess.expect_response(lambda r: r.url == base + "/login") as answered:
                await guess.click("#login button")
            assert (await answered.value).status == 429
            await expect(guess.locator("#error")).to_contain_text("too many failed logins: try again in")
            assert "/login" in guess.url
        finally:
            await guesser.close()
    finally:
        assert await proc.stop() == 0, proc.output
    assert "failed login for 'admin' from 127.0.0.1" in proc.output
    assert "login for 'admin' from 127.0.0.1 refused: locked for" in proc.output


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def collecting(cluster: Cluster) -> AsyncIterator[DashboardProcess]:
    """A dashboard whose collector samples every half second (the shared one: every minute)."""
    proc = await start_dashboard(cluster.namesrv_addr, "--collect-interval", "0.5", "--history-days", "2")
    try:
        yield proc
    finally:
        assert await proc.stop() == 0, proc.output


def history_of(proc: DashboardProcess, day: date) -> list[Sample]:
    assert proc.data_dir is not None
    path = day_file(proc.data_dir, day)
    return [Sample.from_line(line) for line in path.read_text().splitlines()] if path.exists() else []


async def test_history_page_shows_the_days_tps_and_top_topics(
    page: Page, collecting: DashboardProcess, cluster: Cluster, admin: Admin, screenshots: Path
) -> None:
    base = f"http://127.0.0.1:{collecting.port}"
    today = date.today()
    topic = unique("Ledger")
    await admin.create_topic(topic, 2)
    # A topic has figures from its second sample on: once the page offers it, every message
    # sent from now is counted.
    await reload_until(page, f"{base}/history", f'#history-form option[value="{topic}"]')
    async with Producer(unique("ledger"), cluster.namesrv_addr) as producer:
        for i in range(30):
            await producer.send(Message(topic, f"entry {i}"))
    await reload_until(page, f"{base}/history", f'#top-topics tr[data-topic="{topic}"][data-messages="30"]')
    # The day's busiest topic is this one (the other tests' topics stored their messages
    # before this dashboard started), and its chart is the one shown.
    await expect(page.locator("#top-topics tbody tr").first).to_have_attribute("data-topic", topic)
    await expect(page.locator('[data-chart="topicTps"] .legend')).to_contain_text(topic)
    for name in ("broker-a", "broker-b"):
        label = f"{name}@{cluster.brokers[name].addr}"
        for chart in ("brokerPutTps", "brokerGetTps"):
            legend = page.locator(f'[data-chart="{chart}"] .legend span[data-series="{label}"]')
            await expect(legend).not_to_have_class("down")
    await expect(page.locator('[data-chart="brokerPutTps"] svg polyline')).not_to_have_count(0)
    await expect(page.locator("#history-status")).to_contain_text(f"samples on {today.isoformat()}")
    await page.screenshot(path=screenshots / "history.png")

    # The file holds the same: both brokers up in every sample, the 30 messages, and the put
    # TPS the brokers reported while they were sent.
    samples = history_of(collecting, today)
    assert sum(figure[1] for s in samples if (figure := s.topics.get(topic)) is not None) == 30
    labels = {f"{n}@{cluster.brokers[n].addr}" for n in ("broker-a", "broker-b")}
    assert all(labels <= set(s.brokers) for s in samples)
    assert all(s.brokers[label] is not None for s in samples for label in labels)

    async def put_tps_recorded() -> bool:
        return any(
            (s.brokers[label] or (0.0, 0.0))[0] > 0 for s in history_of(collecting, today) for label in labels
        )

    await eventually(put_tps_recorded)

    # The date picker: another day, here one without samples.
    yesterday = (today - timedelta(days=1)).isoformat()
    await page.locator('#history-form input[name="date"]').fill(yesterday)
    await page.locator("#history-form button").click()
    await expect(page.locator("#history-status")).to_contain_text(f"No samples on {yesterday}")
    await expect(page.locator("#top-topics td.empty")).to_be_visible()
    await expect(page.locator('[data-chart="brokerPutTps"]')).to_contain_text("no data yet")
    # Another topic of the day, chosen from the list.
    await page.goto(f"{base}/history?date={today.isoformat()}&topic={topic}")
    await expect(page.locator("#history-form select")).to_have_value(topic)
    response = await page.goto(f"{base}/history?date=soon")
    assert response is not None and response.status == 200
    await expect(page.locator("#error")).to_contain_text("not a date")


async def test_group_monitor_alarm_starts_and_clears(
    page: Page, collecting: DashboardProcess, cluster: Cluster, orders: Orders, screenshots: Path
) -> None:
    base = f"http://127.0.0.1:{collecting.port}"
    group = unique("watched")
    await page.goto(base + "/groups")
    await page.locator('#create-group input[name="group"]').fill(group)
    await page.locator("#create-group button").click()
    await expect(page.locator(".flash.ok")).to_contain_text(f"settings of {group} saved")
    await expect(page.locator("#monitor-state")).to_contain_text("Not monitored")
    monitor = page.locator("#monitor")
    await monitor.locator('input[name="min_consumers"]').fill("1")
    await monitor.locator("button").click()
    await expect(page.locator(".flash.ok")).to_contain_text(f"monitor of {group} saved")
    await expect(page.locator("#alarm")).to_contain_text("0 consumers online, fewer than the minimum 1")
    await expect(monitor.locator('input[name="min_consumers"]')).to_have_value("1")
    await expect(monitor.locator('input[name="max_lag"]')).to_have_value("")
    await collecting.wait_for_line(rf"WARNING .*consumer group {group} in alarm: 0 consumers online")
    await page.screenshot(path=screenshots / "group-monitor.png")
    await page.goto(base + "/groups")
    row = page.locator(f'#groups tr[data-group="{group}"]')
    await expect(row).to_have_class("alarm")
    await expect(row.locator(".monitor")).to_contain_text("alarm")
    assert proc_data(collecting)["monitors.json"][group] == {"min_consumers": 1, "max_lag": None}

    consumer = PushConsumer(group, cluster.namesrv_addr, options=FAST)
    consumer.subscribe(orders.topic, "*")

    @consumer.listener
    async def take(messages: list[MessageExt]) -> ConsumeResult:
        return ConsumeResult.SUCCESS

    async with consumer:
        # The collector's next check sees the member: the alarm clears, logged once.
        await collecting.wait_for_line(rf"WARNING .*consumer group {group}: alarm cleared, min_consumers")
        await page.goto(f"{base}/group?name={group}")
        await expect(page.locator("#monitor-state")).to_contain_text("Within its thresholds")
        await expect(page.locator("#alarm")).to_have_count(0)
        await page.goto(base + "/groups")
        await expect(row).not_to_have_class("alarm")
        await expect(row.locator(".monitor")).to_have_text("ok")
        said = [line for line in collecting.lines if f"consumer group {group}" in line]
        assert len(said) == 2, said


def proc_data(proc: DashboardProcess) -> dict[str, Any]:
    """The JSON files in a dashboard's data folder, by name."""
    assert proc.data_dir is not None
    return {p.name: json.loads(p.read_text()) for p in proc.data_dir.glob("*.json")}


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
    # The charts say it is down, rather than going on with the last rate it reported.
    b_label = f"broker-b@{cluster.brokers['broker-b'].addr}"
    for chart in ("brokerPutTps", "brokerGetTps"):
        legend = page.locator(f'[data-chart="{chart}"] .legend span[data-series="{b_label}"]')
        await expect(legend).to_have_text(f"{b_label}: down", timeout=TIMEOUT)
        await expect(legend).to_have_class("down")
    a_label = f"broker-a@{cluster.brokers['broker-a'].addr}"
    await expect(
        page.locator(f'[data-chart="brokerPutTps"] .legend span[data-series="{a_label}"]')
    ).not_to_have_class("down")
    live = await (await page.request.get(dashboard + "/api/live")).json()
    assert live["brokersUp"][b_label] is False and live["brokerPutTps"][b_label][-1][1] is None
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


async def test_history_records_a_killed_broker_as_down(
    page: Page, collecting: DashboardProcess, cluster: Cluster
) -> None:
    # broker-b was killed by the test before: the collector records it as down, not at its last rate.
    label = f"broker-b@{cluster.brokers['broker-b'].addr}"
    await reload_until(
        page,
        f"http://127.0.0.1:{collecting.port}/history",
        f'[data-chart="brokerPutTps"] .legend span.down[data-series="{label}"]',
    )
    await expect(
        page.locator(f'[data-chart="brokerGetTps"] .legend span[data-series="{label}"]')
    ).to_have_text(f"{label}: down")
    last = history_of(collecting, date.today())[-1]
    assert last.brokers[label] is None
    assert last.brokers[f"broker-a@{cluster.brokers['broker-a'].addr}"] is not None


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
