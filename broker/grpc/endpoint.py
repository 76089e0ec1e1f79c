"""The gRPC listener of the broker: grpcio's asyncio server on the broker's event loop, on
``grpcServerPort``, with the broker's TLS settings (``tls.server.*``).

``tls.server.mode``: ``disabled`` serves plain text and ``enforcing`` TLS only, both by grpcio
itself on the port. ``permissive`` (TLS and plain text on one port, as Apache's proxy does)
is beyond grpcio, which takes one kind per port: grpcio then listens on two loopback ports,
one of each kind, and the public port hands each accepted connection, by its first byte (0x16
opens a TLS handshake; an HTTP/2 preface never starts with it), to the matching one and
copies bytes both ways. TLS, ALPN and HTTP/2 stay grpcio's; the copy costs one hop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

import grpc

from aiorocketmq.protocol.tls import TLS_HANDSHAKE, ClientAuth, ServerTls, TlsMode

from . import messaging_pb2_grpc as pb_grpc
from .service import MessagingService

log = logging.getLogger(__name__)

#: The proxy takes messages up to 130 MiB; clients send no larger.
MAX_MESSAGE_SIZE = 130 * 1024 * 1024
OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_SIZE),
    ("grpc.max_send_message_length", -1),
    # The Java client pings every 300 s, calls or not.
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.so_reuseport", 0),
]


def server_credentials(tls: ServerTls) -> grpc.ServerCredentials:
    """grpcio's form of the broker's certificate, key and (for client auth) trust."""
    if tls.cert_path is None or tls.key_path is None:
        raise ValueError("tls.server.certPath and tls.server.keyPath are required for TLS")
    if tls.key_password:
        raise ValueError("the gRPC port cannot use an encrypted key (tls.server.keyPassword)")
    cert = Path(tls.cert_path).read_bytes()
    key = Path(tls.key_path).read_bytes()
    trust = Path(tls.trust_cert_path).read_bytes() if tls.trust_cert_path else None
    ask_client = tls.need_client_auth != ClientAuth.NONE and trust is not None
    return grpc.ssl_server_credentials(
        [(key, cert)],
        root_certificates=trust if ask_client else None,
        require_client_auth=tls.need_client_auth == ClientAuth.REQUIRE and trust is not None,
    )


class GrpcEndpoint:
    """Serves a :class:`MessagingService`: ``await start(host, port)``, ``await stop()``."""

    def __init__(self, service: MessagingService, tls: ServerTls | None) -> None:
        self.service = service
        self.tls = tls
        self.port = 0
        self._server: grpc.aio.Server | None = None
        self._sorter: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> int:
        """Listen; returns the port (``port`` 0 picks a free one)."""
        server = grpc.aio.server(options=OPTIONS)
        pb_grpc.add_MessagingServiceServicer_to_server(self.service, server)
        mode = self.tls.mode if self.tls is not None else TlsMode.DISABLED
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if mode == TlsMode.DISABLED:
            bound = server.add_insecure_port(address)
        elif mode == TlsMode.ENFORCING:
            assert self.tls is not None
            bound = server.add_secure_port(address, server_credentials(self.tls))
        else:
            assert self.tls is not None
            plain = server.add_insecure_port("127.0.0.1:0")
            secure = server.add_secure_port("127.0.0.1:0", server_credentials(self.tls))
            self._sorter = await asyncio.start_server(
                lambda r, w: self._sort(r, w, plain, secure), host, port, reuse_address=True
            )
            bound = self._sorter.sockets[0].getsockname()[1]
        if bound == 0:
            raise OSError(f"cannot listen for gRPC on {address}")
        await server.start()
        self.service.start()
        self._server = server
        self.port = bound
        return bound

    async def _sort(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, plain: int, secure: int
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._pipes.add(task)
        try:
            first = await asyncio.wait_for(reader.read(65536), 60.0)
            if not first:
                return
            target = secure if first[0] == TLS_HANDSHAKE else plain
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target)
            up_writer.write(first)
            try:
                await asyncio.gather(_copy(reader, up_writer), _copy(up_reader, writer))
            finally:
                up_writer.close()
        except (OSError, TimeoutError):
            pass
        finally:
            writer.close()
            self._pipes.discard(task)

    async def stop(self, grace: float = 1.0) -> None:
        await self.service.stop()
        if self._sorter is not None:
            self._sorter.close()
            for task in list(self._pipes):
                task.cancel()
            with contextlib.suppress(Exception):
                await self._sorter.wait_closed()
            self._sorter = None
        if self._server is not None:
            for session in list(self.service.sessions.values()):
                if session.stream is not None:
                    session.stream.close()
            await self._server.stop(grace)
            self._server = None


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(262144):
            writer.write(data)
            await writer.drain()
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            writer.write_eof()
