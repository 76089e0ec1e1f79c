"""The gRPC port's TLS default, Apache 5.3.3's proxy's: with ``tls.server.mode`` unset the port
takes TLS and plain text (``permissive``), with a self-signed certificate made at start when
none is configured (``tlsTestModeEnable``, on by default), so that the official Java and Go
5.x clients, which dial TLS unless told otherwise, work out of the box beside the Python one
in plain text. ``tls.server.mode=disabled`` keeps the port plain text only, served by grpcio
directly; ``tlsTestModeEnable=false`` without a certificate falls back to plain text, and the
start line says why.

One name server and three brokers for the module (started together): the default, the
explicitly ``disabled`` one and the one without test mode. Topics are created on the default
broker only, so that the 5.x clients are routed to it alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import socket
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
from cryptography import x509

from aiorocketmq.broker.config import BrokerConfig
from aiorocketmq.broker.grpc import messaging_pb2 as pb
from aiorocketmq.broker.grpc import messaging_pb2_grpc as pb_grpc
from aiorocketmq.client.admin import Admin
from aiorocketmq.protocol.settings import ConfigError
from aiorocketmq.protocol.tls import TlsMode, default_permissive
from tests.cluster import Cluster
from tests.security.pki import make_pki

from .conftest import GRPC_PORT, Grpc5, install_py5_client, start_grpc_broker
from .test_go5_client import Go5, build_go5
from .test_java5_client import run_java

#: The fixtures' loop (the package's, as conftest.py's); the settings test needs none.
in_package_loop = pytest.mark.asyncio(loop_scope="package")

_names = itertools.count(1)


def unique(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{next(_names)}"


#: 127.0.0.1 as /proc/net/tcp and tcp6 print it (IPv4, IPv4-mapped IPv6).
LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F"}


@dataclass
class Started:
    port: int
    pid: int
    #: The broker's start line for the gRPC port.
    line: str


@dataclass
class Brokers:
    cluster: Cluster
    py5: Path
    default: Started
    disabled: Started
    no_test_mode: Started

    def grpc5(self) -> Grpc5:
        return Grpc5(self.cluster, self.default.port, self.py5)


async def _start(cluster: Cluster, name: str, **overrides: Any) -> Started:
    port = await start_grpc_broker(cluster, name, autoCreateTopicEnable="true", **overrides)
    process = cluster.brokers[name].process
    assert process is not None and process.proc is not None
    return Started(port, process.proc.pid, await process.wait_for_line(GRPC_PORT))


@pytest_asyncio.fixture(scope="module", loop_scope="package")
async def brokers(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Brokers]:
    py5 = await asyncio.to_thread(install_py5_client)
    cluster = Cluster(tmp_path_factory.mktemp("grpc-tls-default"))
    await cluster.start_namesrv()
    try:
        default, disabled, no_test_mode = await asyncio.gather(
            _start(cluster, "tls-default"),
            _start(cluster, "tls-disabled", **{"tls.server.mode": "disabled"}),
            _start(cluster, "tls-no-test-mode", tlsTestModeEnable="false"),
        )
        yield Brokers(cluster, py5, default, disabled, no_test_mode)
    finally:
        await cluster.stop()


async def create_topic(brokers: Brokers, topic: str) -> None:
    async with Admin(brokers.cluster.namesrv_addr) as admin:
        await admin.create_topic(topic, 4, broker_addr=brokers.cluster.brokers["tls-default"].addr)


def tls_handshake(port: int) -> tuple[bytes, str | None]:
    """A TLS handshake to ``port`` as the 5.x clients make it (any certificate, ALPN h2): the
    server's certificate (DER) and the protocol chosen. Raises what the handshake raised."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as sock,
        context.wrap_socket(sock, server_hostname="localhost") as tls,
    ):
        cert = tls.getpeercert(binary_form=True)
        assert cert is not None
        return cert, tls.selected_alpn_protocol()


async def plain_text_call(port: int) -> int:
    """One plain-text gRPC call (QueryRoute of an illegal name, answered in band): its code."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.MessagingServiceStub(channel)
        reply = await stub.QueryRoute(
            pb.QueryRouteRequest(topic=pb.Resource(name="no such topic!")), timeout=10
        )
        return int(reply.status.code)


def loopback_listeners(pid: int) -> list[int]:
    """The ports process ``pid`` listens on at 127.0.0.1 alone (the relay's grpcio ports, which
    grpcio binds as IPv4-mapped IPv6 sockets; the brokers' own ports take every interface)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    ports = []
    for table in ("tcp", "tcp6"):
        for row in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = row.split()
            (address, port), state, inode = fields[1].split(":"), fields[3], fields[9]
            if state == "0A" and inode in inodes and address in LOOPBACK:
                ports.append(int(port, 16))
    return sorted(ports)


# -- a broker with default settings ---------------------------------------------------------


@in_package_loop
async def test_the_default_port_serves_tls_with_a_self_signed_certificate_and_plain_text(
    brokers: Brokers,
) -> None:
    assert brokers.default.line.endswith(
        f"port {brokers.default.port} accepts TLS (self-signed test certificate) and plain text"
    ), brokers.default.line
    der, alpn = await asyncio.to_thread(tls_handshake, brokers.default.port)
    cert = x509.load_der_x509_certificate(der)
    assert cert.issuer == cert.subject  # self-signed
    assert alpn == "h2"
    assert await plain_text_call(brokers.default.port) == pb.ILLEGAL_TOPIC
    # Both through the relay: grpcio's two loopback ports behind the public one.
    assert len(loopback_listeners(brokers.default.pid)) == 2


@in_package_loop
async def test_the_java_client_with_ssl_on_and_the_python_client_in_plain_text(brokers: Brokers) -> None:
    topic = unique("TlsJava")
    await create_topic(brokers, topic)
    endpoint = f"127.0.0.1:{brokers.default.port}"
    code, lines = await run_java("produce", endpoint, topic, "4", ssl_on=True)
    assert code == 0 and "DONE" in lines, "\n".join(lines)
    assert len([line for line in lines if line.startswith("SENT ")]) == 4
    py5 = await brokers.grpc5().run(
        "produce", messages=[{"topic": topic, "body": f"py-{i}", "tag": "JavaTag"} for i in range(3)]
    )
    assert py5["errors"] == [] and len(py5["receipts"]) == 3
    code, lines = await run_java("consume", endpoint, topic, unique("cg"), "7", ssl_on=True)
    assert code == 0 and "DONE" in lines, "\n".join(lines)
    bodies = sorted(json.loads(line[4:])["body"] for line in lines if line.startswith("MSG "))
    assert bodies == sorted([f"java-{i}" for i in range(4)] + [f"py-{i}" for i in range(3)])


@in_package_loop
async def test_the_go_client_with_tls_on(brokers: Brokers, tmp_path: Path) -> None:
    go5 = Go5(await asyncio.to_thread(build_go5), tmp_path)
    topic, group = unique("TlsGo"), unique("cg")
    await create_topic(brokers, topic)
    endpoint = f"127.0.0.1:{brokers.default.port}"
    sent = await go5.run("produce", endpoint, topic=topic, count=5, prefix="go", tls=True)
    assert sent["errors"] == []
    assert sorted(r["i"] for r in sent["receipts"]) == list(range(5))
    got = await go5.run("simple_consume", endpoint, topic=topic, group=group, count=5, wait=30, tls=True)
    assert got["errors"] == []
    assert {m["body"] for m in got["messages"]} == {f"go-{i}" for i in range(5)}


# -- plain text only ------------------------------------------------------------------------


@in_package_loop
async def test_explicitly_disabled_is_plain_text_only_without_the_relay(brokers: Brokers) -> None:
    assert brokers.disabled.line.endswith("accepts plain text only (tls.server.mode=disabled)")
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await asyncio.to_thread(tls_handshake, brokers.disabled.port)
    assert await plain_text_call(brokers.disabled.port) == pb.ILLEGAL_TOPIC
    assert loopback_listeners(brokers.disabled.pid) == []


@in_package_loop
async def test_without_test_mode_or_a_certificate_the_port_is_plain_text_and_says_why(
    brokers: Brokers,
) -> None:
    assert brokers.no_test_mode.line.endswith(
        "accepts plain text only (tls.server.mode unset, no tls.server.certPath/keyPath"
        " and tlsTestModeEnable=false)"
    ), brokers.no_test_mode.line
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await asyncio.to_thread(tls_handshake, brokers.no_test_mode.port)
    assert await plain_text_call(brokers.no_test_mode.port) == pb.ILLEGAL_TOPIC
    assert loopback_listeners(brokers.no_test_mode.pid) == []


@in_package_loop
async def test_the_java_client_with_ssl_on_fails_against_a_plain_text_port(brokers: Brokers) -> None:
    """The trip the default removes, seen on the broker without test mode."""
    code, lines = await run_java(
        "produce", f"127.0.0.1:{brokers.no_test_mode.port}", unique("TlsNone"), "1", ssl_on=True, timeout=60
    )
    assert code != 0 and "DONE" not in lines and not any(line.startswith("SENT ") for line in lines), (
        "\n".join(lines)
    )


# -- the settings, without processes ---------------------------------------------------------


def test_the_gRPC_default_follows_the_settings(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    cert, key = str(pki["cert"]), str(pki["key"])
    default = BrokerConfig()
    assert (default.grpc_server_tls().mode, default.grpc_server_tls().self_signed) == (
        TlsMode.PERMISSIVE,
        True,
    )
    # The remoting ports keep theirs.
    assert default.server_tls().mode == TlsMode.DISABLED
    # The system property's spelling, in broker.conf or in tls.config.file.
    assert (
        BrokerConfig.load(None, {"tls.test.mode.enable": "false"}).grpc_server_tls().mode == TlsMode.DISABLED
    )
    assert BrokerConfig.load(None, {"tls.test.mode.enable": "false"}).unknown_keys == []
    tls_file = tmp_path / "tls.properties"
    tls_file.write_text("tls.test.mode.enable=false\n")
    assert (
        BrokerConfig.load(None, {"tls.config.file": str(tls_file)}).grpc_server_tls().mode == TlsMode.DISABLED
    )
    # A configured certificate is served rather than a made one.
    given = default_permissive({"tls.server.certPath": cert, "tls.server.keyPath": key}, True)
    assert (given.mode, given.self_signed, given.cert_path) == (TlsMode.PERMISSIVE, False, cert)
    # grpcio cannot read an encrypted key: the made certificate, saying why.
    encrypted = default_permissive(
        {"tls.server.certPath": cert, "tls.server.keyPath": key, "tls.server.keyPassword": "x"}, True
    )
    assert (encrypted.mode, encrypted.self_signed) == (TlsMode.PERMISSIVE, True)
    assert "keyPassword" in encrypted.fallback
    # An explicit mode is as before: enforcing without a certificate is refused.
    assert (
        default_permissive(
            {"tls.server.mode": "enforcing", "tls.server.certPath": cert, "tls.server.keyPath": key}, True
        ).mode
        == TlsMode.ENFORCING
    )
    with pytest.raises(ConfigError, match=r"tls.server.mode=enforcing: tls.server.certPath"):
        BrokerConfig.load(None, {"tls.server.mode": "enforcing"}).grpc_server_tls()
