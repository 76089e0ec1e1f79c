"""The controller's Prometheus endpoint (``metricsExporterType=PROM``): three real
``mqcontroller`` processes scraped over HTTP while brokers join, a master is elected, an
election is refused and a master that stops heartbeating is replaced."""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from aiorocketmq.controller.config import ControllerSettings
from aiorocketmq.controller.manager import ControllerManager
from aiorocketmq.controller.metrics import LATENCY_BUCKETS_US, ControllerMetrics, election_result
from aiorocketmq.controller.raft import RaftError
from aiorocketmq.protocol.codes import ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.controller import ControllerRequestCode as Req
from aiorocketmq.protocol.controller import ControllerResponseCode as Code
from aiorocketmq.protocol.transport import connect
from tests.broker.test_metrics import parse, scrape
from tests.controller.test_controller_cluster import (
    CLUSTER,
    GROUP,
    Controllers,
    FakeBroker,
    Replica,
    _group,
    _group_with_master,
    _ports,
    _replica_info,
)
from tests.support import held_port, wait_until

Samples = list[tuple[str, dict[str, str], float]]


def value(samples: Samples, name: str, **labels: str) -> float:
    found = [v for n, lab, v in samples if n == name and all(lab.get(k) == w for k, w in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def total(samples: Samples, name: str, **labels: str) -> float:
    return sum(v for n, lab, v in samples if n == name and all(lab.get(k) == w for k, w in labels.items()))


class Metered(Controllers):
    """Controllers whose metrics ports were read from their logs, by serving address."""

    metrics_ports: dict[str, int]

    async def scrape(self, address: str) -> Samples:
        status, body = await scrape(self.metrics_ports[address])
        assert status == "HTTP/1.1 200 OK", status
        return parse(body)


@pytest.fixture
async def metered(tmp_path: Path) -> AsyncIterator[Metered]:
    with _ports(6) as ports:
        served, raft = ports[:3], ports[3:]
        peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(served))
        raft_peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(raft))
        replicas = []
        for i, port in enumerate(served):
            conf = tmp_path / f"controller-n{i}.conf"
            conf.write_text(
                "\n".join(
                    [
                        "controllerDLegerGroup=group1",
                        f"controllerDLegerPeers={peers}",
                        f"controllerRaftPeers={raft_peers}",
                        f"controllerDLegerSelfId=n{i}",
                        f"controllerStorePath={tmp_path / f'store-n{i}'}",
                        "bindAddress=127.0.0.1",
                        "scanNotActiveBrokerInterval=300",
                        "scanInactiveMasterInterval=500",
                        "metricsExporterType=PROM",
                        "metricsPromExporterHost=127.0.0.1",
                        "metricsPromExporterPort=0",
                        "metricsLabel=dc:east,bad",
                        "",
                    ]
                )
            )
            replicas.append(Replica(f"n{i}", port, conf))
        cluster = Metered(replicas)
        cluster.metrics_ports = {}
        try:
            await asyncio.gather(*(cluster.start(r) for r in replicas))
            for replica in replicas:
                assert replica.process is not None
                line = await replica.process.wait_for_line(r"controller metrics on http://\S+:\d+/metrics")
                match = re.search(r":(\d+)/metrics", line)
                assert match is not None
                cluster.metrics_ports[replica.address] = int(match[1])
        except BaseException:
            await cluster.close()
            raise
    try:
        yield cluster
    finally:
        await cluster.close()


class SteadyBroker(FakeBroker):
    """A FakeBroker whose heartbeats may pause 4 s (a loaded machine) before it counts as dead."""

    def heartbeat_fields(self) -> dict[str, Any]:
        return {**super().heartbeat_fields(), "heartbeatTimeoutMills": 4000}


@pytest.fixture
async def brokers() -> AsyncIterator[list[FakeBroker]]:
    made: list[FakeBroker] = [await SteadyBroker(i).start() for i in (1, 2, 3)]
    yield made
    for broker in made:
        await broker.close()


async def test_roles_requests_elections_and_groups(metered: Metered, brokers: list[FakeBroker]) -> None:
    leader = await _group_with_master(metered, brokers)
    # A designated election of the master there is keeps it.
    again = await metered.request(leader, Req.CONTROLLER_ELECT_MASTER, {**_group(), "brokerId": 1})
    assert again.code in (Code.CONTROLLER_MASTER_STILL_EXIST, Code.CONTROLLER_ELECT_MASTER_FAILED), again
    kept = election_result(again.code)
    # The master stops heartbeating: the leader elects broker 2 by itself.
    brokers[0].stop_heartbeats()

    async def master_is_2() -> bool:
        return (await _replica_info(metered, leader)).ext_fields.get("masterBrokerId") == "2"

    await wait_until(master_is_2, timeout=30)

    samples = await metered.scrape(leader)
    leader_replica = next(r for r in metered.replicas if r.address == leader)
    common = {"address": leader, "group": "group1", "peer_id": leader_replica.id, "dc": "east"}
    assert value(samples, "role", **common) == 3
    assert value(samples, "rocketmq_controller_leader") == 1
    assert value(samples, "rocketmq_controller_raft_term") >= 1
    assert value(samples, "dledger_disk_usage_bytes") > 0
    # Every sample carries the replica's labels ("bad" is no k:v pair, so no label).
    assert all(labels.items() >= common.items() for _, labels, _ in samples)
    assert not any("bad" in labels for _, labels, _ in samples)
    group = {"cluster": CLUSTER, "broker_set": GROUP}
    # Elections: broker 1 (operator's request), the refused one, broker 2 (the leader's own).
    assert value(samples, "election_total", **group, election_result="new_master_elected") == 2
    # At least the refused one: when the master's heartbeats stop, both the liveness scan and
    # the inactive-master scan may trigger an election; the later one finds broker 2 master
    # and (as Apache's triggerElectMaster) retries electMasterMaxRetryCount times.
    assert value(samples, "election_total", **group, election_result=str(kept)) in (1, 4)
    # Requests by type; the designated elections answered, latency timed in microseconds.
    elect = {"request_type": "CONTROLLER_ELECT_MASTER"}
    assert value(samples, "request_total", **elect, request_handle_status="success") == 2
    assert value(samples, "request_total", request_type="CONTROLLER_REGISTER_BROKER") == 2
    assert total(samples, "request_total", request_type="CONTROLLER_BROKER_HEARTBEAT") >= 2
    assert value(samples, "request_latency_microseconds_count", **elect) == 2
    assert value(samples, "request_latency_microseconds_bucket", **elect, le="+Inf") == 2
    assert value(samples, "request_latency_microseconds_sum", **elect) > 0
    assert value(samples, "request_latency_microseconds_bucket", **elect, le="1e+07") == 2
    buckets = [
        s for s in samples if s[0] == "request_latency_microseconds_bucket" and s[1].items() >= elect.items()
    ]
    assert len(buckets) == len(LATENCY_BUCKETS_US) + 1
    # Appends to the replicated log: two ids applied, two elections, one SyncStateSet.
    appends = value(
        samples, "dledger_op_total", dledger_operation="append", dLedger_operation_status="success"
    )
    assert appends >= 5
    assert value(samples, "dledger_op_latency_microseconds_count", dledger_operation="append") == appends
    # The group as the controllers hold it: broker 2 is master, alone in sync, and alive.
    assert value(samples, "active_broker_num", **group) == 1
    assert value(samples, "rocketmq_controller_broker_sets") == 1
    assert value(samples, "rocketmq_controller_brokers", **group) == 2
    assert value(samples, "rocketmq_controller_master_broker_id", **group) == 2
    assert value(samples, "rocketmq_controller_master_alive", **group) == 1
    assert value(samples, "rocketmq_controller_master_epoch", **group) == 2
    assert value(samples, "rocketmq_controller_sync_state_set_epoch", **group) == 3
    assert value(samples, "rocketmq_controller_sync_state_set_size", **group) == 1

    # A follower: its role, no leadership, no requests scheduled, the same replicated state
    # (its master is not alive there: brokers heartbeat to the leader only).
    follower = next(r for r in metered.replicas if r.address != leader)

    async def follower_caught_up() -> bool:
        seen = await metered.scrape(follower.address)
        return value(seen, "rocketmq_controller_master_epoch", **group) == 2

    await wait_until(follower_caught_up, timeout=10)
    seen = await metered.scrape(follower.address)
    assert value(seen, "role", address=follower.address, peer_id=follower.id) == 2
    assert value(seen, "rocketmq_controller_leader") == 0
    assert value(seen, "rocketmq_controller_master_broker_id", **group) == 2
    assert value(seen, "rocketmq_controller_master_alive", **group) == 0
    assert total(seen, "election_total") == 0
    assert total(seen, "dledger_op_total") == 0

    # Only /metrics, only GET.
    status, _ = await scrape(metered.metrics_ports[leader], "/other")
    assert status.startswith("HTTP/1.1 404")


async def test_metrics_are_off_unless_asked(tmp_path: Path) -> None:
    settings = ControllerSettings()
    assert settings.metrics_exporter_type == "DISABLE"
    assert settings.metrics_prom_exporter_port == 5557
    assert await ControllerMetrics(settings, {}).start() is None
    # OTLP and LOG exporters are not ours: a warning, nothing served.
    other = ControllerSettings.model_validate({"metricsExporterType": "LOG"})
    assert await ControllerMetrics(other, {}).start() is None
    # A port already taken is logged; the controller runs on without metrics.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = ControllerSettings.model_validate(
            {
                "metricsExporterType": "PROM",
                "metricsPromExporterHost": "127.0.0.1",
                "metricsPromExporterPort": taken.getsockname()[1],
            }
        )
        assert await ControllerMetrics(busy, {}).start() is None


async def test_uncommitted_and_failing_requests(tmp_path: Path) -> None:
    """A Raft commit that times out or fails is answered SYSTEM_ERROR and counted as such, in
    both the request and the append; a handler that raises counts as failed."""
    with held_port() as port, held_port() as raft:
        settings = ControllerSettings.load(
            None,
            {
                "controllerDLegerGroup": "g",
                "controllerDLegerPeers": f"n0-127.0.0.1:{port}",
                "controllerRaftPeers": f"n0-127.0.0.1:{raft}",
                "controllerDLegerSelfId": "n0",
                "controllerStorePath": str(tmp_path / "store"),
                "bindAddress": "127.0.0.1",
            },
        )
        controller = ControllerManager(settings)
        await controller.start()
    conn = await connect("127.0.0.1", port)
    try:
        await wait_until(lambda: controller.is_leader, timeout=20)
        assert controller.raft is not None
        assert controller.metrics.endpoint is None  # DISABLE: counted, not served

        async def ask(code: int, fields: dict[str, object]) -> RemotingCommand:
            return await conn.request(RemotingCommand.request(code, fields))

        apply = {"clusterName": "c", "brokerName": "b", "appliedBrokerId": 1, "registerCheckCode": "x;1"}
        failures = iter([RaftError("not committed within 5s"), RaftError("Raft append failed: QUEUE_FULL")])

        async def refuse(events: object, timeout: float = 5.0) -> None:
            raise next(failures)

        real_append = controller.raft.append
        controller.raft.append = refuse  # type: ignore[method-assign]
        for _ in range(2):
            answer = await ask(Req.CONTROLLER_APPLY_BROKER_ID, apply)
            assert answer.code == ResponseCode.SYSTEM_ERROR, answer
        controller.raft.append = real_append  # type: ignore[method-assign]
        assert (await ask(Req.CONTROLLER_APPLY_BROKER_ID, apply)).code == ResponseCode.SUCCESS
        # No SyncStateSet body: the handler raises.
        broken = await ask(
            Req.CONTROLLER_ALTER_SYNC_STATE_SET, {"brokerName": "b", "masterBrokerId": 1, "masterEpoch": 1}
        )
        assert broken.code == ResponseCode.SYSTEM_ERROR

        samples = parse(controller.metrics.render())
        applied = {"request_type": "CONTROLLER_APPLY_BROKER_ID"}
        for status in ("success", "timeout", "failed"):
            assert value(samples, "request_total", **applied, request_handle_status=status) == 1
            assert value(samples, "dledger_op_total", dLedger_operation_status=status) == 1
        assert value(samples, "request_latency_microseconds_count", **applied) == 1
        assert value(samples, "dledger_op_latency_microseconds_count") == 1
        alter = {"request_type": "CONTROLLER_ALTER_SYNC_STATE_SET"}
        assert value(samples, "request_total", **alter, request_handle_status="failed") == 1
        assert total(samples, "election_total") == 0
        assert value(samples, "role", address=f"127.0.0.1:{port}", group="g", peer_id="n0") == 3
        assert value(samples, "rocketmq_controller_brokers", cluster="c", broker_set="b") == 1
        assert value(samples, "rocketmq_controller_master_broker_id", broker_set="b") == -1
    finally:
        conn.close()
        await controller.close()
