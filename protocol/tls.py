"""TLS for the remoting ports, with RocketMQ's settings and modes.

A server's ``tls.server.mode`` is ``disabled`` (plain text only), ``enforcing`` (TLS only) or
``permissive`` (both on one port: each accepted connection's first byte tells a TLS
ClientHello, 0x16, from a remoting frame, whose first byte is the high byte of a length and
so never 0x16 for frames under 352 MiB). Certificates and keys are PEM files
(``tls.server.certPath``, ``tls.server.keyPath``, ``tls.server.keyPassword``); a client
certificate is asked for with ``tls.server.need.client.auth`` = ``optional`` or ``require``,
checked against ``tls.server.trustCertPath``.

Clients (``tls.client.*``) verify the server against a CA file or the system store when
``verify`` is on; RocketMQ's own clients default to not verifying (their "test mode"), which
``verify=False`` reproduces for self-signed test clusters.

The broker's 5.x gRPC port defaults as Apache's proxy does (:func:`default_permissive`): with
``tls.server.mode`` unset it takes both kinds, with the configured certificate or, without
one, a self-signed certificate made at start (:func:`self_signed_certificate`, Apache's
``tlsTestModeEnable``). The remoting ports keep ``disabled`` as their default, as 4.x clients
and Apache's broker do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

log = logging.getLogger(__name__)

#: The first byte of a TLS handshake record.
TLS_HANDSHAKE = 0x16
#: How long an accepted connection may stay silent before its first byte tells its kind.
FIRST_BYTE_TIMEOUT = 60.0


class TlsMode(StrEnum):
    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"


class ClientAuth(StrEnum):
    NONE = "none"
    OPTIONAL = "optional"
    REQUIRE = "require"


@dataclass(frozen=True)
class ServerTls:
    """A server's TLS settings (RocketMQ's ``tls.server.*`` keys)."""

    mode: TlsMode = TlsMode.DISABLED
    cert_path: str | None = None
    key_path: str | None = None
    key_password: str | None = None
    trust_cert_path: str | None = None
    need_client_auth: ClientAuth = ClientAuth.NONE
    #: No certificate files: the server makes a self-signed certificate and key at start
    #: (Apache's test mode), which clients that verify the server refuse.
    self_signed: bool = False
    #: Why a port that defaults to ``permissive`` serves plain text only (empty otherwise).
    fallback: str = ""

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> ServerTls:
        """Read RocketMQ's keys (``tls.server.mode``, ``tls.server.certPath``, ...); raises
        ``ValueError`` naming the key for a value that cannot be used."""
        try:
            mode = TlsMode(str(props.get("tls.server.mode", "disabled")).strip().lower())
        except ValueError:
            raise ValueError(
                f"tls.server.mode: {props.get('tls.server.mode')!r} is not disabled, permissive or enforcing"
            ) from None
        try:
            auth = ClientAuth(str(props.get("tls.server.need.client.auth", "none")).strip().lower())
        except ValueError:
            raise ValueError(
                f"tls.server.need.client.auth: {props.get('tls.server.need.client.auth')!r} is not none, optional or require"
            ) from None

        def path(key: str) -> str | None:
            value = props.get(key)
            return str(value).strip() or None if value is not None else None

        tls = cls(
            mode=mode,
            cert_path=path("tls.server.certPath"),
            key_path=path("tls.server.keyPath"),
            key_password=path("tls.server.keyPassword"),
            trust_cert_path=path("tls.server.trustCertPath"),
            need_client_auth=auth,
        )
        if mode != TlsMode.DISABLED and not (tls.cert_path and tls.key_path):
            raise ValueError(
                f"tls.server.mode={mode}: tls.server.certPath and tls.server.keyPath are required"
            )
        return tls

    @property
    def enabled(self) -> bool:
        return self.mode != TlsMode.DISABLED

    def context(self) -> ssl.SSLContext:
        """The server-side SSL context (certificate, key and, if asked, client checks)."""
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        assert self.cert_path and self.key_path
        ctx.load_cert_chain(self.cert_path, self.key_path, password=self.key_password)
        if self.need_client_auth != ClientAuth.NONE:
            ctx.verify_mode = (
                ssl.CERT_REQUIRED if self.need_client_auth == ClientAuth.REQUIRE else ssl.CERT_OPTIONAL
            )
            if self.trust_cert_path:
                ctx.load_verify_locations(self.trust_cert_path)
            else:
                ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        return ctx


def default_permissive(props: Mapping[str, Any], test_mode: bool) -> ServerTls:
    """The TLS of a port whose default is Apache's proxy's (the broker's gRPC port):
    ``tls.server.mode`` as set, or, when it is not, ``permissive`` with the configured
    certificate, else (``test_mode``) a self-signed one made at start, else plain text only
    with :attr:`ServerTls.fallback` saying why. Raises ``ValueError`` as
    :meth:`ServerTls.from_properties` does."""
    if str(props.get("tls.server.mode") or "").strip():
        return ServerTls.from_properties(props)
    configured = ServerTls.from_properties(
        {**props, "tls.server.mode": "permissive"} if _has_cert(props) else props
    )
    if configured.enabled and not configured.key_password:
        return configured
    # grpcio reads only unencrypted keys (endpoint.server_credentials): an encrypted one is
    # left to the remoting ports that can use it.
    why = (
        "tls.server.keyPassword is set (the gRPC port cannot use an encrypted key)"
        if configured.enabled
        else ""
    )
    if test_mode:
        return replace(
            configured,
            mode=TlsMode.PERMISSIVE,
            cert_path=None,
            key_path=None,
            key_password=None,
            self_signed=True,
            fallback=why,
        )
    why = why or "no tls.server.certPath/keyPath"
    return replace(
        configured,
        mode=TlsMode.DISABLED,
        fallback=f"tls.server.mode unset, {why} and tlsTestModeEnable=false",
    )


def _has_cert(props: Mapping[str, Any]) -> bool:
    return all(str(props.get(key) or "").strip() for key in ("tls.server.certPath", "tls.server.keyPath"))


def self_signed_certificate(hostname: str = "localhost") -> tuple[bytes, bytes]:
    """A throwaway certificate and its unencrypted key (PEM), made in memory: RSA 2048 as
    Netty's ``SelfSignedCertificate`` that Apache's test mode serves, for ``hostname``,
    ``localhost`` and 127.0.0.1, valid from a day ago for ten years. Needs ``cryptography``
    (the ``server`` extra)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname)])
    now = datetime.datetime.now(datetime.UTC)
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in dict.fromkeys((hostname, "localhost"))]
    names.append(x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")))
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def client_context(
    *,
    verify: bool = True,
    ca_file: str | None = None,
    cert_file: str | None = None,
    key_file: str | None = None,
    key_password: str | None = None,
) -> ssl.SSLContext:
    """A client-side SSL context: the server checked against ``ca_file`` (or the system
    store) unless ``verify`` is off; a client certificate when the server asks for one."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cert_file:
        ctx.load_cert_chain(cert_file, key_file, password=key_password)
    return ctx


class Listener:
    """One listening socket whose accepted connections go plain or TLS by their first byte
    (permissive mode). Looks like the part of ``asyncio.Server`` the transport uses."""

    def __init__(
        self,
        protocol_factory: Callable[[], asyncio.Protocol],
        sock: socket.socket,
        context: ssl.SSLContext,
    ) -> None:
        self._factory = protocol_factory
        self._sock = sock
        self._context = context
        self._accepting: asyncio.Task[None] | None = None
        self._sorting: set[asyncio.Task[None]] = set()
        self.sockets = [sock]

    def start(self) -> None:
        self._accepting = asyncio.ensure_future(self._accept_loop())

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(self._sock)
            except OSError as exc:  # EMFILE and friends: log and keep accepting
                log.warning("accept failed on %s: %s", self._sock.getsockname(), exc)
                await asyncio.sleep(0.1)
                continue
            task = asyncio.ensure_future(self._sort(conn))
            self._sorting.add(task)
            task.add_done_callback(self._sorting.discard)

    async def _sort(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        conn.setblocking(False)
        try:
            first = await asyncio.wait_for(_peek(loop, conn), FIRST_BYTE_TIMEOUT)
        except (TimeoutError, OSError):
            conn.close()
            return
        if not first:
            conn.close()
            return
        tls = first[0] == TLS_HANDSHAKE
        try:
            await loop.connect_accepted_socket(
                self._factory,
                conn,
                ssl=self._context if tls else None,
                ssl_handshake_timeout=30.0 if tls else None,
            )
        except (OSError, ssl.SSLError) as exc:
            log.info("closing a %s connection that failed to start: %s", "TLS" if tls else "plain", exc)
            conn.close()

    def close(self) -> None:
        if self._accepting is not None:
            self._accepting.cancel()
        for task in list(self._sorting):
            task.cancel()
        self._sock.close()

    async def wait_closed(self) -> None:
        tasks = [t for t in (self._accepting, *self._sorting) if t is not None]
        await asyncio.gather(*tasks, return_exceptions=True)


async def _peek(loop: asyncio.AbstractEventLoop, conn: socket.socket) -> bytes:
    """The first byte the peer sent, left in the socket for whoever reads next."""
    while True:
        try:
            return conn.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            pass
        readable = loop.create_future()
        loop.add_reader(conn.fileno(), readable.set_result, None)
        try:
            await readable
        finally:
            loop.remove_reader(conn.fileno())


async def serve(
    protocol_factory: Callable[[], asyncio.Protocol],
    host: str | None,
    port: int,
    tls: ServerTls | None,
    *,
    backlog: int = 1024,
) -> asyncio.Server | Listener:
    """Listen on ``host:port`` as ``tls`` says: plain text, TLS only, or both."""
    loop = asyncio.get_running_loop()
    mode = tls.mode if tls is not None else TlsMode.DISABLED
    if mode == TlsMode.DISABLED:
        return await loop.create_server(protocol_factory, host, port, reuse_address=True, backlog=backlog)
    assert tls is not None
    context = tls.context()
    if mode == TlsMode.ENFORCING:
        return await loop.create_server(
            protocol_factory,
            host,
            port,
            reuse_address=True,
            backlog=backlog,
            ssl=context,
            ssl_handshake_timeout=30.0,
        )
    family = socket.AF_INET6 if host and ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host or ("::" if family == socket.AF_INET6 else "0.0.0.0"), port))
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        with contextlib.suppress(OSError):
            sock.close()
        raise
    listener = Listener(protocol_factory, sock, context)
    listener.start()
    return listener


# -- settings in a process's properties file --------------------------------------------------

#: RocketMQ's keys; a ``tls.config.file`` (a properties file) may hold them instead.
SERVER_KEYS = (
    "tls.server.mode",
    "tls.server.certPath",
    "tls.server.keyPath",
    "tls.server.keyPassword",
    "tls.server.trustCertPath",
    "tls.server.need.client.auth",
)
CLIENT_KEYS = (
    "tls.enable",
    "tls.client.authServer",
    "tls.client.trustCertPath",
    "tls.client.certPath",
    "tls.client.keyPath",
    "tls.client.keyPassword",
)
CONFIG_FILE_KEY = "tls.config.file"


def tls_properties(values: Mapping[str, Any]) -> dict[str, str]:
    """The ``tls.*`` settings of a process: those of the file ``tls.config.file`` names,
    overridden by any given directly in ``values`` (None values are unset)."""
    from .settings import read_properties_file  # settings imports nothing of ours but errors

    merged: dict[str, str] = {}
    file = values.get(CONFIG_FILE_KEY)
    if file:
        merged.update({k: v for k, v in read_properties_file(str(file)).items() if k.startswith("tls.")})
    merged.update({k: str(v) for k, v in values.items() if k.startswith("tls.") and v is not None})
    merged.pop(CONFIG_FILE_KEY, None)
    return merged


def _true(value: Any) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes")


def client_context_from_properties(props: Mapping[str, Any]) -> ssl.SSLContext | None:
    """The context a process uses to reach TLS servers (``tls.enable=true``): the server
    checked against ``tls.client.trustCertPath`` when ``tls.client.authServer`` is true (as
    RocketMQ: not checked by default), a client certificate when one is configured."""
    if not _true(props.get("tls.enable", "false")):
        return None

    def path(key: str) -> str | None:
        value = props.get(key)
        return str(value).strip() or None if value is not None else None

    return client_context(
        verify=_true(props.get("tls.client.authServer", "false")),
        ca_file=path("tls.client.trustCertPath"),
        cert_file=path("tls.client.certPath"),
        key_file=path("tls.client.keyPath"),
        key_password=path("tls.client.keyPassword"),
    )
