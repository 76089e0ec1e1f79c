"""The gRPC endpoint under the broker's ACL and TLS settings: TLS and plain text on one port
(``tls.server.mode=permissive``), TLS only (``enforcing``), requests signed by the official 5.x client verified
against ``plain_acl.yml``, refusals answered in band."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
import yaml

from aiorocketmq.broker.config import BrokerConfig
from aiorocketmq.broker.grpc import messaging_pb2 as pb
from aiorocketmq.broker.grpc import messaging_pb2_grpc as pb_grpc
from aiorocketmq.broker.grpc.auth import sign
from aiorocketmq.broker.server import Broker
from aiorocketmq.broker.store import StoreConfig
from tests.cluster import Cluster
from tests.security.pki import make_pki

from .conftest import Grpc5, install_py5_client, start_grpc_broker

pytestmark = pytest.mark.asyncio(loop_scope="package")

TOPIC = "GrpcAclTopic"
ALICE = ("grpc_alice", "alice_secret_1")
BOB = ("grpc_bob", "bob_secret_1")
ACL_YML: dict[str, Any] = {
    "globalWhiteRemoteAddresses": [],
    "accounts": [
        {
            "accessKey": ALICE[0],
            "secretKey": ALICE[1],
            "defaultTopicPerm": "DENY",
            "defaultGroupPerm": "DENY",
            "topicPerms": [f"{TOPIC}=PUB|SUB"],
        },
        {"accessKey": BOB[0], "secretKey": BOB[1], "defaultTopicPerm": "DENY", "defaultGroupPerm": "DENY"},
    ],
}


@pytest_asyncio.fixture(scope="module", loop_scope="package")
async def secured(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Grpc5, dict[str, Path]]]:
    path = install_py5_client()
    root = tmp_path_factory.mktemp("grpc-secured")
    pki = make_pki(root)
    acl = root / "plain_acl.yml"
    acl.write_text(yaml.safe_dump(ACL_YML))
    cluster = Cluster(root)
    await cluster.start_namesrv()
    try:
        port = await start_grpc_broker(
            cluster,
            aclEnable="true",
            **{
                "rocketmq.acl.plain.file": str(acl),
                "tls.server.mode": "permissive",
                "tls.server.certPath": str(pki["cert"]),
                "tls.server.keyPath": str(pki["key"]),
            },
        )
        yield Grpc5(cluster, port, path), pki
    finally:
        await cluster.stop()


def signed(access_key: str, secret_key: str) -> list[tuple[str, str]]:
    date_time = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    signature = sign(secret_key, date_time)
    return [
        ("x-mq-client-id", f"stub@{os.getpid()}"),
        ("x-mq-date-time", date_time),
        (
            "authorization",
            f"MQv2-HMAC-SHA1 Credential={access_key}, SignedHeaders=x-mq-date-time, Signature={signature.upper()}",
        ),
    ]


def send_request(body: bytes) -> pb.SendMessageRequest:
    return pb.SendMessageRequest(
        messages=[
            pb.Message(
                topic=pb.Resource(name=TOPIC),
                body=body,
                system_properties=pb.SystemProperties(
                    message_id=f"ID{time.time_ns()}", message_type=pb.NORMAL
                ),
            )
        ]
    )


async def test_the_official_client_signs_and_sends_over_tls(
    secured: tuple[Grpc5, dict[str, Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    grpc5, pki = secured
    # grpcio's default trust store, pointed at the test CA for the client process.
    monkeypatch.setenv("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", str(pki["ca"]))
    messages = [{"topic": TOPIC, "body": f"tls-{i}", "tag": "T"} for i in range(3)]
    ok = await grpc5.run("produce", messages=messages, tls=True, ak=ALICE[0], sk=ALICE[1])
    assert ok["errors"] == [] and len(ok["receipts"]) == 3
    wrong = await grpc5.run("produce", messages=messages[:1], tls=True, ak=ALICE[0], sk="not-the-secret")
    # Refused from the first request on (its route query gets UNAUTHORIZED), so nothing is sent.
    assert wrong["receipts"] == []
    assert len(wrong["errors"]) == 1 and "route" in wrong["errors"][0]


async def test_plain_text_on_the_same_port_and_permissions(secured: tuple[Grpc5, dict[str, Path]]) -> None:
    grpc5, pki = secured
    async with grpc.aio.insecure_channel(grpc5.endpoint) as channel:
        stub = pb_grpc.MessagingServiceStub(channel)
        unsigned = await stub.SendMessage(send_request(b"x"))
        assert unsigned.status.code == pb.UNAUTHORIZED
        forged = await stub.SendMessage(send_request(b"x"), metadata=signed(ALICE[0], "guess"))
        assert forged.status.code == pb.UNAUTHORIZED
        bob = await stub.SendMessage(send_request(b"x"), metadata=signed(*BOB))
        assert bob.status.code == pb.FORBIDDEN
        alice = await stub.SendMessage(send_request(b"plain"), metadata=signed(*ALICE))
        assert alice.status.code == pb.OK
    # And TLS with our own stub, verifying the server's certificate.
    credentials = grpc.ssl_channel_credentials(root_certificates=pki["ca"].read_bytes())
    async with grpc.aio.secure_channel(grpc5.endpoint, credentials) as channel:
        stub = pb_grpc.MessagingServiceStub(channel)
        route = await stub.QueryRoute(
            pb.QueryRouteRequest(topic=pb.Resource(name=TOPIC)), metadata=signed(*ALICE)
        )
        assert route.status.code == pb.OK
        assert route.message_queues[0].broker.endpoints.addresses[0].port == grpc5.port


async def test_enforcing_mode_serves_tls_only(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    settings = {
        "brokerName": "tls-only",
        "listenPort": 0,
        "grpcServerPort": 0,
        "brokerIP1": "127.0.0.1",
        "storePathRootDir": str(tmp_path / "store"),
        "metricsPromExporterEnable": "false",
        "tls.server.mode": "enforcing",
        "tls.server.certPath": str(pki["cert"]),
        "tls.server.keyPath": str(pki["key"]),
    }
    broker = Broker(
        BrokerConfig.load(None, settings),
        StoreConfig.load(None, {"storePathRootDir": str(tmp_path / "store")}),
    )
    await broker.start("127.0.0.1")
    try:
        address = f"127.0.0.1:{broker.grpc.port}"
        request = pb.QueryRouteRequest(topic=pb.Resource(name="TlsOnly"))
        credentials = grpc.ssl_channel_credentials(root_certificates=pki["ca"].read_bytes())
        async with grpc.aio.secure_channel(address, credentials) as channel:
            reply = await pb_grpc.MessagingServiceStub(channel).QueryRoute(request, timeout=10)
            assert reply.status.code == pb.OK
        async with grpc.aio.insecure_channel(address) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await pb_grpc.MessagingServiceStub(channel).QueryRoute(request, timeout=5)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await broker.shutdown()
