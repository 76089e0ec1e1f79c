"""``bindAddress`` puts every port of a broker process (remoting, VIP, metrics) on one address:
bound to 127.0.0.2, each answers there and refuses connections on 127.0.0.1."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.cluster import Cluster
from tests.support import held_port

pytestmark = pytest.mark.asyncio


async def _reachable(host: str, port: int) -> bool:
    try:
        _reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
    except OSError:
        return False
    writer.close()
    await writer.wait_closed()
    return True


async def test_every_broker_port_listens_on_bind_address(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    await cluster.start_namesrv()
    with held_port() as metrics_port:
        await _check_ports(cluster, metrics_port)


async def _check_ports(cluster: Cluster, metrics_port: int) -> None:
    try:
        broker = await cluster.start_broker(
            "broker-a",
            bindAddress="127.0.0.2",
            brokerIP1="127.0.0.2",
            metricsPromExporterEnable="true",
            metricsPromExporterPort=metrics_port,
        )
        assert broker.process is not None
        await broker.process.wait_for_line(r"metrics on http://127\.0\.0\.2:")
        for port in (broker.port, broker.port - 2, metrics_port):
            assert await _reachable("127.0.0.2", port), port
            assert not await _reachable("127.0.0.1", port), port
    finally:
        await cluster.stop()
