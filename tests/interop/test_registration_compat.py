"""Broker registration across implementations, and the benchmark's Java load program.

* Our broker's compressed registration (a large topic table, ``compressed=true``) is read by
  Apache's name server: it lists every topic.
* Apache's broker with ``compressedRegister=true`` is read by our name server.
* ``benchload.Load`` (bench/side_by_side.py's Java load on the official client) builds and runs
  a few hundred messages against our broker: topic creation, sync sends, batches, a push consumer.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from aiorocketmq.protocol.body import TopicConfig, TopicConfigSerializeWrapper, TopicList, TopicRouteData
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.headers import GetRouteInfoRequestHeader
from aiorocketmq.protocol.transport import Connection, connect
from tests.cluster import Cluster
from tests.interop.harness import ApacheBroker, ApacheNamesrv, Toolchain, run_program
from tests.support import wait_until


async def topic_list(conn: Connection) -> set[str]:
    response = await conn.request(RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER), 10)
    assert response.code == ResponseCode.SUCCESS, response.remark
    return set(TopicList.decode(response.body).topic_list)


async def route(conn: Connection, topic: str) -> TopicRouteData:
    response = await conn.request(
        RemotingCommand.request(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic=topic).to_fields()
        ),
        10,
    )
    assert response.code == ResponseCode.SUCCESS, response.remark
    return TopicRouteData.decode(response.body)


async def test_apache_name_server_reads_our_compressed_registration(
    java_toolchain: Toolchain, tmp_path: Path
) -> None:
    namesrv = ApacheNamesrv(java_toolchain, tmp_path / "apache-namesrv")
    await asyncio.to_thread(namesrv.start)
    cluster = Cluster(tmp_path / "ours")
    cluster.namesrv_ports.append(namesrv.port)
    names = [f"Compressed_{i}" for i in range(2000)]
    config_dir = tmp_path / "ours" / "broker-z" / "config"
    config_dir.mkdir(parents=True)
    table = {n: TopicConfig(topic_name=n, read_queue_nums=8, write_queue_nums=4) for n in names}
    (config_dir / "topics.json").write_bytes(TopicConfigSerializeWrapper(topic_config_table=table).encode())
    conn: Connection | None = None
    try:
        await cluster.start_broker("broker-z")
        conn = await connect("127.0.0.1", namesrv.port)
        listed: set[str] = set()

        async def all_listed() -> bool:
            assert conn is not None
            listed.clear()
            listed.update(await topic_list(conn))
            return listed.issuperset(names)

        await wait_until(all_listed, timeout=60)
        queues = (await route(conn, "Compressed_1999")).queue_datas
        assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums) for q in queues] == [
            ("broker-z", 8, 4)
        ]
    finally:
        if conn is not None:
            conn.close()
        await cluster.stop()
        await asyncio.to_thread(namesrv.stop)


async def test_our_name_server_reads_apaches_compressed_registration(
    java_toolchain: Toolchain, tmp_path: Path
) -> None:
    cluster = Cluster(tmp_path / "ours")
    await cluster.start_namesrv()
    broker = ApacheBroker(
        java_toolchain,
        tmp_path / "apache-broker",
        cluster.namesrv_addr,
        name="apache-compressed",
        overrides={"compressedRegister": True},
    )
    conn: Connection | None = None
    try:
        await asyncio.to_thread(broker.start)
        conn = await connect("127.0.0.1", cluster.namesrv_ports[0])

        async def listed() -> bool:
            assert conn is not None
            return {"TBW102", "apache-compressed", "DefaultCluster"} <= await topic_list(conn)

        await wait_until(listed, timeout=60)
        data = await route(conn, "TBW102")
        assert [b.broker_addrs for b in data.broker_datas] == [{0: broker.addr}]
        assert data.queue_datas[0].broker_name == "apache-compressed"
        assert data.queue_datas[0].write_queue_nums == 8
    finally:
        if conn is not None:
            conn.close()
        await asyncio.to_thread(broker.stop)
        await cluster.stop()


def load(toolchain: Toolchain, cwd: Path, mode: str, namesrv: str, **opts: Any) -> dict[str, Any]:
    command = toolchain.java_command(
        "benchload.Load",
        [mode, f"namesrv={namesrv}", *(f"{k}={v}" for k, v in opts.items())],
        {"rocketmq.client.logRoot": str(cwd / "logs"), "user.home": str(cwd)},
    )
    run = run_program(command, cwd=cwd, timeout=120, mkdir=True)
    results = [r for r in run.records if "mode" in r]
    assert run.returncode == 0 and results, run.describe()
    return results[-1]


async def test_the_benchmark_load_program_runs_against_our_broker(
    java_toolchain: Toolchain, tmp_path: Path
) -> None:
    cluster = Cluster(tmp_path / "ours")
    await cluster.start_namesrv()
    try:
        await cluster.start_broker("broker-a")
        ns = cluster.namesrv_addr

        def run_all() -> list[dict[str, Any]]:
            made = load(java_toolchain, tmp_path / "java", "topic", ns, topic="LoadSmoke", queues=8)
            sent = load(
                java_toolchain,
                tmp_path / "java",
                "producer",
                ns,
                topic="LoadSmoke",
                threads=4,
                seconds=1,
                warmup=0,
            )
            batched = load(
                java_toolchain,
                tmp_path / "java",
                "batch",
                ns,
                topic="LoadSmoke",
                threads=2,
                batch=8,
                seconds=2,
                warmup=2,
            )
            total = sent["count"] + batched["count"]
            consumed = load(
                java_toolchain, tmp_path / "java", "consumer", ns, topic="LoadSmoke", count=total, timeout=60
            )
            return [made, sent, batched, consumed, {"total": total}]

        made, sent, batched, consumed, total = await asyncio.to_thread(run_all)
        assert made["topics"] == 1 and made["brokers"] == 1
        assert sent["failed"] == 0 and sent["count"] > 0, json.dumps(sent)
        assert 0 < sent["p99_ms"] <= sent["max_rt_ms"]
        assert batched["failed"] == 0 and batched["count"] == 8 * batched["requests"] > 0
        # The window drops the sends that straddle its ends, so the topic holds at least this many.
        assert consumed["count"] >= total["total"], json.dumps(consumed)
    finally:
        await cluster.stop()
