"""The dashboard's Controller page against three real ``mqcontroller`` processes: the
controllers and their leader, a broker group's master, epochs and SyncStateSet, each broker's
epoch list (a broker that cannot answer shows its error), and the "elect master" action, first
over plain HTTP, then clicked in a real Chromium."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from playwright.async_api import APIRequestContext, Page, async_playwright, expect

from aiorocketmq.dashboard.cli import parse_args
from aiorocketmq.dashboard.controllers import parse_peers, split_addresses
from aiorocketmq.protocol.codes import ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.controller import ControllerRequestCode as Req
from aiorocketmq.protocol.controller import EpochEntry, EpochEntryCache, SyncStateSet
from aiorocketmq.protocol.transport import Connection, Server
from tests.cluster import Cluster
from tests.controller.test_controller_cluster import (
    CLUSTER,
    GROUP,
    Controllers,
    FakeBroker,
    Replica,
    _group_with_master,
    _ports,
    _replica_info,
)
from tests.support import held_port, wait_until

from .conftest import DashboardProcess, start_dashboard

pytestmark = pytest.mark.asyncio(loop_scope="module")


class SteadyBroker(FakeBroker):
    """A FakeBroker with a long heartbeat timeout: a loaded machine does not make it look dead
    (nothing here waits for a master to be replaced)."""

    def heartbeat_fields(self) -> dict[str, Any]:
        return {**super().heartbeat_fields(), "heartbeatTimeoutMills": 30_000}


class EpochBroker(SteadyBroker):
    """A FakeBroker that also answers GET_BROKER_EPOCH_CACHE, as a controller-mode broker."""

    def __init__(self, broker_id: int) -> None:
        super().__init__(broker_id)
        self.server = Server(
            {Req.NOTIFY_BROKER_ROLE_CHANGED: self._notified, Req.GET_BROKER_EPOCH_CACHE: self._epochs},
            name=f"broker{broker_id}",
        )

    def _epochs(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        cache = EpochEntryCache(
            cluster_name=CLUSTER,
            broker_name=GROUP,
            broker_id=self.broker_id,
            epoch_list=[
                EpochEntry(epoch=1, start_offset=0, end_offset=4096),
                EpochEntry(epoch=2, start_offset=4096),
            ],
            max_offset=5000,
        )
        return cmd.response(body=cache.encode())


@dataclass
class Setup:
    controllers: Controllers
    brokers: list[FakeBroker]
    leader: str
    dashboard: DashboardProcess
    base: str
    namesrv: str
    dead: str


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def setup(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Setup]:
    tmp = tmp_path_factory.mktemp("controller-page")
    cluster = Cluster(tmp / "cluster")
    await cluster.start_namesrv()
    with _ports(6) as ports:
        served, raft = ports[:3], ports[3:]
        peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(served))
        raft_peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(raft))
        replicas = []
        for i, port in enumerate(served):
            conf = tmp / f"controller-n{i}.conf"
            conf.write_text(
                f"controllerDLegerGroup=group1\ncontrollerDLegerPeers={peers}\n"
                f"controllerRaftPeers={raft_peers}\ncontrollerDLegerSelfId=n{i}\n"
                f"controllerStorePath={tmp / f'store-n{i}'}\nbindAddress=127.0.0.1\n"
                "scanNotActiveBrokerInterval=300\nscanInactiveMasterInterval=500\n"
            )
            replicas.append(Replica(f"n{i}", port, conf))
        controllers = Controllers(replicas)
        try:
            await asyncio.gather(*(controllers.start(r) for r in replicas))
        except BaseException:
            await controllers.close()
            await cluster.stop()
            raise
    # Broker 1 answers its epochs, broker 2 cannot (an old broker): its error is shown.
    brokers: list[FakeBroker] = [await EpochBroker(1).start(), await SteadyBroker(2).start()]
    dashboard: DashboardProcess | None = None
    try:
        leader = await _group_with_master(controllers, brokers)
        # Two of the three controllers given, the third learnt from their peers; and first an
        # address where nothing answers (shown as down, passed over by the elect action).
        with held_port() as dead:
            given = ";".join([f"127.0.0.1:{dead}", *(r.address for r in replicas[:2])])
            dashboard = await start_dashboard(cluster.namesrv_addr, "--controller", given)
            base = f"http://127.0.0.1:{dashboard.port}"
            yield Setup(
                controllers, brokers, leader, dashboard, base, cluster.namesrv_addr, f"127.0.0.1:{dead}"
            )
    finally:
        if dashboard is not None:
            code = await dashboard.stop()
            assert code == 0, dashboard.output
        for broker in brokers:
            await broker.close()
        await controllers.close()
        await cluster.stop()


@pytest_asyncio.fixture(loop_scope="module")
async def http(setup: Setup) -> AsyncIterator[APIRequestContext]:
    async with async_playwright() as playwright:
        context = await playwright.request.new_context(base_url=setup.base)
        try:
            yield context
        finally:
            await context.dispose()


def section(html: str, group: str) -> str:
    start = html.index(f'data-group="{group}"')
    return html[start : html.index("</section>", start)]


def cell(html: str, css: str) -> list[str]:
    match = re.search(rf'class="{css}">(.*?)</td>', html, re.S)
    assert match, css
    return re.sub(r"<[^>]+>", "", match[1]).split()


async def test_page_shows_controllers_master_and_sync_state_set(
    setup: Setup, http: APIRequestContext
) -> None:
    response = await http.get("/controller?broker=" + GROUP + "+nosuch")
    assert response.status == 200
    html = await response.text()
    assert 'href="/controller" class="on">Controller</a>' in html
    # Every controller, the third one as a peer; the leader named.
    leader_id = next(r.id for r in setup.controllers.replicas if r.address == setup.leader)
    assert f"<strong>{leader_id}</strong>" in html and f"<code>{setup.leader}</code>" in html
    for replica in setup.controllers.replicas:
        assert f'data-controller="{replica.address}" class="up"' in html
    assert html.count("<small>(a peer)</small>") == 1
    down = html[html.index(f'data-controller="{setup.dead}" class="down"') :]
    assert re.match(r'(?s).*?<span class="badge bad">down</span>\s*<small>\w+Error: [^<]+</small>', down), (
        down[:600]
    )
    assert html.count('<td class="role">leader</td>') == 1
    assert html.count('<td class="role">follower</td>') == 2
    group = section(html, GROUP)
    assert cell(group, "master") == ["broker", "1", setup.brokers[0].address]
    assert cell(group, "master-epoch") == ["1"]
    assert cell(group, "sync-state-set-epoch") == ["2"]
    assert cell(group, "in-sync") == ["1,", "2"]
    assert cell(group, "not-in-sync") == ["none"]
    # Broker 1's epochs; broker 2 does not serve them: its error, not a broken page.
    assert '<span class="epoch">1: 0..4096</span>; <span class="epoch">2: 4096..</span>' in group
    assert "5000" in group
    assert re.search(r'class="bad epoch-error">[^<]*not supported', group, re.I), group
    assert group.count('<span class="badge ok">alive</span>') == 2
    # The elect action is offered for the slave only.
    assert group.count('action="/controller/elect"') == 1
    assert "Not known to the controllers: nosuch." in html


async def test_elect_master_over_http(setup: Setup, http: APIRequestContext) -> None:
    fields: dict[str, str | float | bool] = {"cluster": CLUSTER, "broker_name": GROUP, "broker_id": "2"}
    answer = await http.post("/controller/elect", form=fields, max_redirects=0)
    assert answer.status == 303 and answer.headers["location"] == f"/controller?broker={GROUP}"
    info = await _replica_info(setup.controllers, setup.leader)
    assert (info.ext_fields["masterBrokerId"], info.ext_fields["masterEpoch"]) == ("2", "2")
    html = await (await http.get(answer.headers["location"])).text()
    assert f"broker 2 at {setup.brokers[1].address} is master, master epoch 2" in html
    group = section(html, GROUP)
    assert cell(group, "master") == ["broker", "2", setup.brokers[1].address]
    assert cell(group, "master-epoch") == ["2"]
    # A cross-site post is refused before it reaches the controllers.
    forged = await http.post(
        "/controller/elect", form=fields, headers={"Origin": "http://evil.example"}, max_redirects=0
    )
    assert forged.status == 403


async def test_elect_master_in_the_browser(setup: Setup, page: Page, screenshots: Path) -> None:
    # Broker 2 is master (as the previous test left it, when it ran).
    await setup.controllers.request(
        setup.leader,
        Req.CONTROLLER_ELECT_MASTER,
        {"clusterName": CLUSTER, "brokerName": GROUP, "brokerId": 2, "designateElect": "true"},
    )
    await page.goto(setup.base + f"/controller?broker={GROUP}")
    group = page.locator(f'section[data-group="{GROUP}"]')
    await expect(group.locator("td.master")).to_contain_text("broker 2")
    # Broker 1 left the SyncStateSet when 2 was elected: the controllers refuse it, the page says why.
    await group.locator('tr[data-broker-id="1"] form.elect button').click()
    await expect(page.locator(".flash.error")).to_contain_text(f"{GROUP}: no master elected")
    await expect(group.locator("td.master")).to_contain_text("broker 2")
    # Broker 1 catches up (the master puts it back in sync): now it can be elected.
    altered = await setup.controllers.request(
        setup.leader,
        Req.CONTROLLER_ALTER_SYNC_STATE_SET,
        {"brokerName": GROUP, "masterBrokerId": 2, "masterEpoch": 2},
        SyncStateSet(sync_state_set={1, 2}, sync_state_set_epoch=3).encode(),
    )
    assert altered.code == ResponseCode.SUCCESS, altered
    await page.reload()
    await expect(group.locator("td.in-sync")).to_have_text("1, 2")
    await group.locator('tr[data-broker-id="1"] form.elect button').click()
    await expect(page.locator(".flash.ok")).to_contain_text("broker 1 at")
    await expect(group.locator("td.master")).to_contain_text("broker 1")
    await expect(group.locator("td.master-epoch")).to_have_text("3")
    await page.screenshot(path=screenshots / "controller.png", full_page=True)

    async def master_is_1() -> bool:
        return (await _replica_info(setup.controllers, setup.leader)).ext_fields.get("masterBrokerId") == "1"

    await wait_until(master_is_1, timeout=5)


async def test_without_controllers_the_page_says_how(setup: Setup, page: Page) -> None:
    proc = await start_dashboard(setup.namesrv)
    try:
        base = f"http://127.0.0.1:{proc.port}"
        await page.goto(base + "/")
        assert await page.locator('nav a[href="/controller"]').count() == 0
        await page.goto(base + "/controller")
        await expect(page.locator("#no-controller")).to_contain_text("--controller")
    finally:
        assert await proc.stop() == 0, proc.output


async def test_only_admins_elect(setup: Setup, tmp_path: Path) -> None:
    users = tmp_path / "users.properties"
    users.write_text("admin=s3cret,1\nviewer=look\n")
    given = ";".join(r.address for r in setup.controllers.replicas)
    proc = await start_dashboard(setup.namesrv, "--users", str(users), "--controller", given)
    before = (await _replica_info(setup.controllers, setup.leader)).ext_fields["masterEpoch"]
    try:
        async with async_playwright() as playwright:
            http = await playwright.request.new_context(base_url=f"http://127.0.0.1:{proc.port}")
            try:
                assert (await http.post("/login", form={"username": "viewer", "password": "look"})).ok
                shown = await http.get(f"/controller?broker={GROUP}")
                assert shown.ok and 'data-group="broker-a"' in await shown.text()
                refused = await http.post(
                    "/controller/elect", form={"cluster": CLUSTER, "broker_name": GROUP, "broker_id": "2"}
                )
                assert refused.status == 403
                assert "viewer may look but not change: admins only" in await refused.text()
            finally:
                await http.dispose()
    finally:
        assert await proc.stop() == 0, proc.output
    assert (await _replica_info(setup.controllers, setup.leader)).ext_fields["masterEpoch"] == before


async def test_controller_option_and_addresses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONTROLLER_ADDR", raising=False)
    assert parse_args(["--namesrv", "n:9876"]).controller is None
    assert parse_args(["--namesrv", "n:9876", "--controller", "a:1;b:2"]).controller == "a:1;b:2"
    monkeypatch.setenv("CONTROLLER_ADDR", "c:3")
    assert parse_args(["--namesrv", "n:9876"]).controller == "c:3"
    assert split_addresses(" a:1; b:2,a:1 ;") == ["a:1", "b:2"]
    assert parse_peers("n0:127.0.0.1:1;n1:127.0.0.1:2;") == [("n0", "127.0.0.1:1"), ("n1", "127.0.0.1:2")]
