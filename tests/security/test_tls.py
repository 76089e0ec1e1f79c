"""TLS on real name server and broker processes: with ``tls.server.mode=enforcing`` (set in a
``tls.config.file``, as RocketMQ reads it) our SDK round-trips a message over TLS with the
server checked against the test CA, the broker registers with the name server over TLS
(``tls.enable``), and a plain-text client is refused; in permissive mode plain text and TLS
are both served on the same port."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from aiorocketmq.client import (
    Admin,
    ClientOptions,
    ConsumeFrom,
    ConsumeResult,
    MessageExt,
    Producer,
    PushConsumer,
)
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import ConnectionClosedError, RequestTimeoutError
from aiorocketmq.protocol.message import Message
from aiorocketmq.protocol.tls import client_context
from aiorocketmq.protocol.transport import connect
from tests.cluster import Cluster

from .pki import make_pki

pytestmark = pytest.mark.asyncio(loop_scope="module")


def _write(path: Path, text: str) -> None:
    path.write_text(text)


async def _tls_cluster(root: Path, mode: str) -> Cluster:
    pki = make_pki(root)
    tls_file = root / "tls.properties"
    _write(
        tls_file,
        f"tls.server.mode={mode}\ntls.server.certPath={pki['cert']}\ntls.server.keyPath={pki['key']}\n"
        f"tls.enable=true\ntls.client.authServer=true\ntls.client.trustCertPath={pki['ca']}\n",
    )
    cluster = Cluster(root)
    await cluster.start_namesrv(**{"tls.config.file": str(tls_file)})
    try:
        await cluster.start_broker("broker-a", **{"tls.config.file": str(tls_file)})
    except BaseException:
        await cluster.stop()
        raise
    return cluster


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def enforcing(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    cluster = await _tls_cluster(tmp_path_factory.mktemp("tls-enforcing"), "enforcing")
    try:
        yield cluster
    finally:
        await cluster.stop()


def _tls_options(cluster: Cluster) -> ClientOptions:
    return ClientOptions(tls=True, tls_ca_file=str(cluster.root / "ca.pem"))


async def _ping(port: int, *, tls: bool, ca: Path | None = None) -> RemotingCommand:
    context = client_context(ca_file=str(ca)) if tls else None
    conn = await connect("127.0.0.1", port, ssl_context=context)
    try:
        return await conn.request(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, {}), 5.0)
    finally:
        conn.close()


async def test_sdk_round_trips_over_tls(enforcing: Cluster) -> None:
    options = _tls_options(enforcing)
    async with Admin(enforcing.namesrv_addr, options=options) as admin:
        # The broker's registration reached the TLS name server (tls.enable on the broker).
        info = await admin.cluster_info()
        assert "broker-a" in info.broker_addr_table
        await admin.create_topic("TlsTopic", queue_nums=1)
    async with Producer("TlsProducer", enforcing.namesrv_addr, options=options) as producer:
        sent = await producer.send(Message("TlsTopic", b"over TLS"))
    got = asyncio.Event()
    consumer = PushConsumer(
        "TlsConsumer", enforcing.namesrv_addr, consume_from=ConsumeFrom.FIRST_OFFSET, options=options
    )
    consumer.subscribe("TlsTopic", "*")

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        if any(m.msg_id == sent.msg_id and m.body == b"over TLS" for m in messages):
            got.set()
        return ConsumeResult.SUCCESS

    async with consumer:
        await asyncio.wait_for(got.wait(), timeout=30)


async def test_enforcing_refuses_plain_text(enforcing: Cluster) -> None:
    for port in (enforcing.namesrv_ports[0], enforcing.brokers["broker-a"].port):
        with pytest.raises((ConnectionClosedError, RequestTimeoutError)):
            await _ping(port, tls=False)
        # The same port answers a TLS client whose CA knows the server's certificate.
        response = await _ping(port, tls=True, ca=enforcing.root / "ca.pem")
        assert response.code in (ResponseCode.SUCCESS, ResponseCode.REQUEST_CODE_NOT_SUPPORTED)


async def test_sdk_refuses_a_server_its_ca_does_not_know(enforcing: Cluster, tmp_path: Path) -> None:
    other = make_pki(tmp_path)
    options = ClientOptions(tls=True, tls_ca_file=str(other["ca"]), request_timeout=2.0)
    async with Admin(enforcing.namesrv_addr, options=options) as admin:
        with pytest.raises(ConnectionClosedError, match="CERTIFICATE_VERIFY_FAILED"):
            await admin.cluster_info()


async def test_permissive_serves_plain_text_and_tls(tmp_path_factory: pytest.TempPathFactory) -> None:
    cluster = await _tls_cluster(tmp_path_factory.mktemp("tls-permissive"), "permissive")
    try:
        for port in (cluster.namesrv_ports[0], cluster.brokers["broker-a"].port):
            plain = await _ping(port, tls=False)
            secure = await _ping(port, tls=True, ca=cluster.root / "ca.pem")
            assert plain.code == secure.code
        async with Producer("PlainProducer", cluster.namesrv_addr) as producer:
            plain_sent = await producer.send(Message("PermissiveTopic", b"plain"))
        async with Producer("TlsProducer", cluster.namesrv_addr, options=_tls_options(cluster)) as producer:
            tls_sent = await producer.send(Message("PermissiveTopic", b"tls"))
        assert plain_sent.queue_offset != tls_sent.queue_offset or plain_sent.queue != tls_sent.queue
    finally:
        await cluster.stop()
