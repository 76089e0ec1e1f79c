"""TLS listeners in each of RocketMQ's modes, with certificates the test makes itself: a
permissive port serves TLS and plain text side by side, an enforcing port refuses plain text,
client certificates are checked when required, and bad settings are refused by name."""

from __future__ import annotations

import asyncio
import datetime as dt
import ssl
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from aiorocketmq.protocol.tls import ClientAuth, ServerTls, TlsMode, client_context, serve


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def make_ca(directory: Path) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("test CA"))
        .issuer_name(_name("test CA"))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    path = directory / "ca.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key, cert, path


def issue(
    directory: Path, name: str, ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate
) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("pki")
    ca_key, ca_cert, ca_path = make_ca(directory)
    server_cert, server_key = issue(directory, "server", ca_key, ca_cert)
    client_cert, client_key = issue(directory, "client", ca_key, ca_cert)
    return {
        "ca": ca_path,
        "cert": server_cert,
        "key": server_key,
        "client_cert": client_cert,
        "client_key": client_key,
    }


class Echo(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: Any = transport  # uvloop's TLS transport is not an asyncio.Transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


async def round_trip(
    port: int, context: ssl.SSLContext | None, payload: bytes = b"\x00\x00\x00\x10ping"
) -> bytes:
    reader, writer = await asyncio.open_connection("localhost", port, ssl=context)
    try:
        writer.write(payload)
        await writer.drain()
        return await asyncio.wait_for(reader.readexactly(len(payload)), 10)
    finally:
        writer.close()


def settings(pki: dict[str, Path], mode: str, **extra: str) -> ServerTls:
    props = {
        "tls.server.mode": mode,
        "tls.server.certPath": str(pki["cert"]),
        "tls.server.keyPath": str(pki["key"]),
    }
    return ServerTls.from_properties(props | extra)


async def test_permissive_port_serves_tls_and_plain_text(pki: dict[str, Path]) -> None:
    server = await serve(Echo, "127.0.0.1", 0, settings(pki, "permissive"))
    port = server.sockets[0].getsockname()[1]
    try:
        assert await round_trip(port, None) == b"\x00\x00\x00\x10ping"
        assert await round_trip(port, client_context(ca_file=str(pki["ca"]))) == b"\x00\x00\x00\x10ping"
        # an unverified client (RocketMQ clients' default test mode) also connects
        assert await round_trip(port, client_context(verify=False), b"x" * 70000) == b"x" * 70000
        # a client verifying against another CA refuses the server
        with pytest.raises(ssl.SSLCertVerificationError):
            await round_trip(port, client_context())
        # a plain client that stays silent holds nothing up for the others
        _, idle_writer = await asyncio.open_connection("127.0.0.1", port)
        assert await round_trip(port, None) == b"\x00\x00\x00\x10ping"
        idle_writer.close()
    finally:
        server.close()
        await server.wait_closed()


async def test_enforcing_port_refuses_plain_text(pki: dict[str, Path]) -> None:
    server = await serve(Echo, "127.0.0.1", 0, settings(pki, "enforcing"))
    port = server.sockets[0].getsockname()[1]
    try:
        assert await round_trip(port, client_context(ca_file=str(pki["ca"]))) == b"\x00\x00\x00\x10ping"
        with pytest.raises((asyncio.IncompleteReadError, ConnectionResetError)):
            await round_trip(port, None)
    finally:
        server.close()
        await server.wait_closed()


async def test_required_client_certificate(pki: dict[str, Path]) -> None:
    tls = settings(
        pki,
        "enforcing",
        **{"tls.server.need.client.auth": "require", "tls.server.trustCertPath": str(pki["ca"])},
    )
    assert tls.need_client_auth == ClientAuth.REQUIRE
    server = await serve(Echo, "127.0.0.1", 0, tls)
    port = server.sockets[0].getsockname()[1]
    try:
        with_cert = client_context(
            ca_file=str(pki["ca"]), cert_file=str(pki["client_cert"]), key_file=str(pki["client_key"])
        )
        assert await round_trip(port, with_cert) == b"\x00\x00\x00\x10ping"
        with pytest.raises((ssl.SSLError, asyncio.IncompleteReadError, ConnectionResetError)):
            await round_trip(port, client_context(ca_file=str(pki["ca"])))
    finally:
        server.close()
        await server.wait_closed()


def test_settings_are_checked_by_name(pki: dict[str, Path]) -> None:
    assert ServerTls.from_properties({}).mode == TlsMode.DISABLED
    with pytest.raises(ValueError, match=r"tls\.server\.mode: 'sometimes'"):
        ServerTls.from_properties({"tls.server.mode": "sometimes"})
    with pytest.raises(ValueError, match=r"tls\.server\.certPath and tls\.server\.keyPath are required"):
        ServerTls.from_properties({"tls.server.mode": "enforcing"})
    with pytest.raises(ValueError, match=r"tls\.server\.need\.client\.auth"):
        settings(pki, "enforcing", **{"tls.server.need.client.auth": "maybe"})
