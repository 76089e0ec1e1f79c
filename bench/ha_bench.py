"""Master/slave replication (issue 17): what SYNC_MASTER costs, and how fast a slave catches up.

Starts real processes (a name server, a master and its slave), then:

* **send**: W writers (16 and 64), each sending 1 KiB messages one after another over raw
  SEND_MESSAGE_V2 requests (8 connections shared among them) for D seconds, against an
  ASYNC_MASTER pair and then a SYNC_MASTER pair; reports TPS, p50 and p99 latency, and the
  SYNC/ASYNC TPS ratio (target: >= 60 % with 64 writers). Only sends answered SUCCESS count.
* **catch-up**: a master preloaded with N MiB (one commit-log file, so an empty slave is sent
  all of it), then an empty slave started against it; reports the time until the slave's
  commit log ends where the master's does, as MB/s.

* **apache** (``--apache``): the same send load against Apache RocketMQ 4.9.7's own
  SYNC_MASTER pair, started by the interop harness (needs Java and Maven).

* **guards** (``--ha-auth``, ``--ha-tls``): send and catch-up with the HA port's signed
  handshake and/or mutual TLS on master and slave (broker/ha/security.py), to compare.

Run: ``.venv/bin/python -m bench.ha_bench [--seconds 8] [--catch-up-mib 256] [--apache]
[--ha-auth] [--ha-tls]``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from aiorocketmq.protocol.codes import ResponseCode
from aiorocketmq.protocol.transport import Connection, connect
from bench.machine import summary as machine_summary
from tests.broker.ha.support import held_port_pair, runtime_info, slaves_connected, start_pair, start_slave
from tests.broker.requests import send
from tests.cluster import Cluster

TOPIC = "BenchmarkHa"
CONNECTIONS = 8


async def wait_for(predicate, timeout: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.05)


async def send_load(port: int, writers: int, seconds: float, body: bytes) -> dict[str, float]:
    conns: list[Connection] = [await connect("127.0.0.1", port) for _ in range(CONNECTIONS)]
    latencies: list[float] = []
    failures = 0
    stop = time.monotonic() + seconds

    async def writer(conn: Connection, queue_ids: itertools.cycle[int]) -> None:
        nonlocal failures
        while time.monotonic() < stop:
            started = time.perf_counter()
            response = await send(conn, TOPIC, body, queue_id=next(queue_ids))
            if response.code == ResponseCode.SUCCESS:
                latencies.append(time.perf_counter() - started)
            else:
                failures += 1

    began = time.monotonic()
    await asyncio.gather(
        *(
            writer(conns[w % CONNECTIONS], itertools.cycle([(w + i) % 4 for i in range(4)]))
            for w in range(writers)
        )
    )
    elapsed = time.monotonic() - began
    for conn in conns:
        conn.close()
    latencies.sort()
    return {
        "tps": len(latencies) / elapsed,
        "p50_ms": statistics.median(latencies) * 1000 if latencies else 0.0,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000 if latencies else 0.0,
        "failures": failures,
    }


def guards(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """The HA port's guards asked for on the command line, for master and slave alike."""
    settings: dict[str, Any] = {}
    if args.ha_auth:
        settings.update(haAuthAccessKey="bench-replicator", haAuthSecretKey=os.urandom(16).hex())
    if args.ha_tls:
        from tests.security.pki import make_pki

        pki = make_pki(root)
        settings.update(
            haTlsEnable="true",
            haTlsCertPath=pki["cert"],
            haTlsKeyPath=pki["key"],
            haTlsTrustCertPath=pki["ca"],
            haTlsNeedClientAuth="true",
        )
    return settings


async def send_bench(args: argparse.Namespace, body: bytes) -> None:
    results: dict[tuple[str, int], dict[str, float]] = {}
    for role in ("ASYNC_MASTER", "SYNC_MASTER"):
        root = Path(tempfile.mkdtemp(prefix=f"ha-bench-{role}-"))
        cluster = Cluster(root)
        try:
            await cluster.start_namesrv()
            extra = guards(args, root)
            master, _ = await start_pair(cluster, master={"brokerRole": role, **extra}, slave=extra)
            await wait_for(lambda m=master: _one_slave(m.port), 30)
            await send_load(master.port, 8, 1.0, body)  # warm up: topic, queues, files
            for writers in (16, 64):
                figures = await send_load(master.port, writers, args.seconds, body)
                results[(role, writers)] = figures
                print(
                    f"{role:<12} {writers:>2} writers: {figures['tps']:8.0f} msg/s  "
                    f"p50 {figures['p50_ms']:6.2f} ms  p99 {figures['p99_ms']:6.2f} ms  "
                    f"not acked {figures['failures']:.0f}",
                    flush=True,
                )
        finally:
            await cluster.stop()
    for writers in (16, 64):
        ratio = results[("SYNC_MASTER", writers)]["tps"] / max(
            1e-9, results[("ASYNC_MASTER", writers)]["tps"]
        )
        print(f"SYNC/ASYNC TPS with {writers} writers: {ratio:.0%}")


async def apache_bench(args: argparse.Namespace, body: bytes) -> None:
    """The same load against Apache RocketMQ 4.9.7's own SYNC_MASTER pair (the interop harness
    starts it), for a side-by-side figure."""
    from tests.interop.harness import ApacheBroker, ApacheNamesrv, build_java_only

    toolchain = await asyncio.to_thread(build_java_only)
    root = Path(tempfile.mkdtemp(prefix="ha-bench-apache-"))
    namesrv = ApacheNamesrv(toolchain, root / "namesrv")
    brokers: list[ApacheBroker] = []
    try:
        await asyncio.to_thread(namesrv.start)
        for broker_id, role in ((0, "SYNC_MASTER"), (1, "SLAVE")):
            broker = ApacheBroker(
                toolchain,
                root / f"broker-{broker_id}",
                namesrv.addr,
                name="apache-a",
                overrides={"brokerId": broker_id, "brokerRole": role},
            )
            await asyncio.to_thread(broker.start)
            brokers.append(broker)
        await asyncio.sleep(6)  # Apache's slave reports its offset after haSendHeartbeatInterval
        await send_load(brokers[0].port, 8, 2.0, body)
        for writers in (16, 64):
            figures = await send_load(brokers[0].port, writers, args.seconds, body)
            print(
                f"Apache SYNC_MASTER {writers:>2} writers: {figures['tps']:8.0f} msg/s  "
                f"p50 {figures['p50_ms']:6.2f} ms  p99 {figures['p99_ms']:6.2f} ms  "
                f"not acked {figures['failures']:.0f}",
                flush=True,
            )
    finally:
        for broker in reversed(brokers):
            await asyncio.to_thread(broker.stop)
        await asyncio.to_thread(namesrv.stop)


async def catch_up_bench(args: argparse.Namespace, body: bytes) -> None:
    root = Path(tempfile.mkdtemp(prefix="ha-bench-catchup-"))
    cluster = Cluster(root)
    size = args.catch_up_mib << 20
    try:
        await cluster.start_namesrv()
        file_size = max(1 << 30, size + (64 << 20))
        extra = guards(args, root)
        with held_port_pair() as port:
            master = await cluster.start_broker(
                "broker-a",
                listenPort=port,
                brokerRole="ASYNC_MASTER",
                mappedFileSizeCommitLog=file_size,
                **extra,
            )
        big = body * 16  # 16 KiB messages: preloading is not what is measured
        conns = [await connect("127.0.0.1", master.port) for _ in range(CONNECTIONS)]
        written = 0

        async def preload(conn: Connection) -> None:
            nonlocal written
            while written < size:
                response = await send(conn, TOPIC, big, queue_id=written // len(big) % 4)
                assert response.code == ResponseCode.SUCCESS, response
                written += len(big)

        began = time.monotonic()
        await asyncio.gather(*(preload(c) for c in conns))
        for conn in conns:
            conn.close()
        end = int((await runtime_info(master.port))["commitLogMaxOffset"])
        print(f"preloaded {end / 2**20:.0f} MiB in {time.monotonic() - began:.1f}s", flush=True)
        began = time.monotonic()
        slave = await start_slave(cluster, mappedFileSizeCommitLog=file_size, **extra)

        started = time.monotonic()
        first = -1

        async def caught_up() -> bool:
            nonlocal first, began
            copied = int((await runtime_info(slave.port))["commitLogMaxOffset"])
            if first < 0 and copied > 0:
                first, began = copied, time.monotonic()  # the transfer has begun
            return copied >= end

        await wait_for(caught_up, 600)
        done = time.monotonic()
        print(
            f"empty slave caught up {end / 2**20:.0f} MiB: {end / 1e6 / (done - began):.1f} MB/s while "
            f"copying ({done - began:.1f}s); {done - started:.1f}s from the slave process being ready",
            flush=True,
        )
    finally:
        await cluster.stop()


async def _one_slave(port: int) -> bool:
    return await slaves_connected(port) == 1


async def main(args: argparse.Namespace) -> None:
    body = os.urandom(512).hex().encode()
    print(machine_summary(), flush=True)
    print(f"cores: {os.cpu_count()}, load average {os.getloadavg()[0]:.1f}", flush=True)
    if not args.skip_send:
        await send_bench(args, body)
    if args.apache:
        await apache_bench(args, body)
    if args.catch_up_mib:
        await catch_up_bench(args, body)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--catch-up-mib", type=int, default=256)
    parser.add_argument("--skip-send", action="store_true")
    parser.add_argument("--apache", action="store_true", help="also an Apache 4.9.7 SYNC_MASTER pair (Java)")
    parser.add_argument("--ha-auth", action="store_true", help="the HA port's signed handshake on")
    parser.add_argument("--ha-tls", action="store_true", help="mutual TLS on the HA port")
    asyncio.run(main(parser.parse_args()))
