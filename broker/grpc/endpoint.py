"""The gRPC listener of the broker: grpcio's asyncio server on the broker's event loop, on
``grpcServerPort``, with the broker's TLS settings (``tls.server.*``).

``tls.server.mode``: ``disabled`` serves plain text and ``enforcing`` TLS only, both by grpcio
itself on the port. ``permissive`` (TLS and plain text on one port, as Apache's proxy does)
is beyond grpcio, which takes one kind per port: grpcio then listens on two loopback ports,
one of each kind, and the public port hands each accepted connection, by its first byte (0x16
opens a TLS handshake; an HTTP/2 preface never starts with it), to the matching one and
copies bytes both ways. TLS, ALPN and HTTP/2 stay grpcio's; the copy costs one hop.

With ``tls.server.mode`` unset the port is ``permissive``, as the proxy's: the official Java
and Go 5.x clients dial TLS unless told not to, the Python and Node.js ones plain text. Without
a configured certificate one is made at start, self-signed, in memory (``tlsTestModeEnable``,
the proxy's test mode; :meth:`BrokerConfig.grpc_server_tls
<aiorocketmq.broker.config.BrokerConfig.grpc_server_tls>`); the start line says what the port
accepts (:attr:`GrpcEndpoint.accepts`).

grpcio refuses a request message over ``grpc.max_receive_message_length`` before it is
buffered whole; that limit follows the broker's ``maxMessageSize`` plus headroom for the
message's other fields (Apache's proxy takes 130 MiB, which lets a few unauthenticated
clients grow the broker by hundreds of MiB). Every refusal, by grpcio (the size limit) or by
the service (the in-band 4xx statuses: credentials, permissions, bad requests), is logged as
remoting refusals are: at most once a minute per method and kind, with the count of repeats.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import grpc

from aiorocketmq.protocol.tls import TLS_HANDSHAKE, ClientAuth, ServerTls, TlsMode, self_signed_certificate

from . import messaging_pb2 as pb
from . import messaging_pb2_grpc as pb_grpc
from .sessions import Session

log = logging.getLogger(__name__)

#: What a request may hold beyond its message bodies: topic, system and user properties
#: (at most 16 KiB of user properties a message), the protobuf framing.
HEADROOM = 1024 * 1024
OPTIONS = [
    ("grpc.max_send_message_length", -1),
    # The Java client pings every 300 s, calls or not.
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.so_reuseport", 0),
]


def receive_limit(max_message_size: int) -> int:
    """The largest request message grpcio reads: the broker's body limit plus headroom."""
    return max_message_size + HEADROOM


def server_options(max_message_size: int) -> list[tuple[str, Any]]:
    return [("grpc.max_receive_message_length", receive_limit(max_message_size)), *OPTIONS]


class GrpcRefusalLog:
    """Logs refused gRPC requests, at most once a minute per method and kind of refusal;
    repeats within the interval are counted and reported with the next line (as
    :class:`~aiorocketmq.protocol.transport.RefusalLog` does for remoting requests)."""

    def __init__(self, interval: float = 60.0) -> None:
        self.interval = interval
        self._seen: dict[tuple[str, str], list[float]] = {}

    def refused(self, peer: str, method: str, kind: str, reason: str, level: int = logging.INFO) -> None:
        now = time.monotonic()
        entry = self._seen.get((method, kind))
        if entry is not None and now - entry[0] < self.interval:
            entry[1] += 1
            return
        since = f" ({int(entry[1])} more since the last line)" if entry is not None and entry[1] else ""
        self._seen[(method, kind)] = [now, 0.0]
        log.log(level, "refused gRPC %s from %s: %s: %s%s", method, peer, kind, reason, since)


#: One for the process, as remoting's.
GRPC_REFUSALS = GrpcRefusalLog()
#: In-band codes that answer a request rather than refuse it (nothing new to receive, no
#: offset committed yet) or that are the broker's own trouble.
_NOT_REFUSALS = frozenset({pb.Code.MESSAGE_NOT_FOUND, pb.Code.OFFSET_NOT_FOUND, pb.Code.REQUEST_TIMEOUT})
#: Looked up once: an enum value read through ``pb.Code`` is a Python-level lookup.
_MULTIPLE_RESULTS = pb.Code.MULTIPLE_RESULTS


def _refusal(response: Any) -> pb.Status | None:
    """The status of a response that refuses its request (a 4xx in-band code), if it does;
    for MULTIPLE_RESULTS, the first refused entry's."""
    try:
        if not response.HasField("status"):
            # Unset, or another member of its oneof (a received message): nothing refused.
            return None
    except (ValueError, AttributeError):  # a response with no status field (or none)
        return None
    status = response.status
    code = status.code
    if code == _MULTIPLE_RESULTS:
        for entry in getattr(response, "entries", ()):
            found = _refusal(entry)
            if found is not None:
                return found
        return None
    if 40000 <= code < 50000 and code not in _NOT_REFUSALS:
        return status
    return None


class _Registrar:
    """Stands for the server while a generated ``add_*Servicer_to_server`` registers its
    method handlers, so that they can be wrapped before the real server gets them."""

    def __init__(self) -> None:
        self.services: list[tuple[str, dict[str, grpc.RpcMethodHandler]]] = []

    def add_generic_rpc_handlers(self, _handlers: Any) -> None:
        pass  # the same handlers come again, by name, to add_registered_method_handlers

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        self.services.append((service, dict(handlers)))


class RefusalLogger:
    """Wraps each method handler of the service (once, at start) to see every call: those
    grpcio refuses before the service (a request over the receive limit: no request message
    ever reaches the handler) and the service's in-band refusals.

    Unary-request handlers are served as stream-request ones so that a request grpcio threw
    away is noticed (``read()`` answers EOF) instead of the call ending unseen."""

    def __init__(self, limit: int, refusals: GrpcRefusalLog = GRPC_REFUSALS) -> None:
        self.limit = limit
        self.refusals = refusals

    def add_service(
        self, add_to_server: Callable[[Any, Any], None], servicer: Any, server: grpc.aio.Server
    ) -> None:
        """``add_to_server(servicer, server)`` (the generated ``add_*Servicer_to_server``), with
        every method handler wrapped."""
        registrar = _Registrar()
        add_to_server(servicer, registrar)
        for service, handlers in registrar.services:
            wrapped = {name: self.wrap(name, handler) for name, handler in handlers.items()}
            server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, wrapped),))
            server.add_registered_method_handlers(service, wrapped)

    def wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        if handler.unary_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                self._unary(method, handler.unary_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._server_streaming(method, handler.unary_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._bidi(method, handler.stream_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler

    async def _request(self, method: str, context: grpc.aio.ServicerContext) -> Any:
        peer = context.peer()  # (empty once grpcio has ended the call)
        request = await context.read()
        if request is grpc.aio.EOF:
            self.refusals.refused(
                peer,
                method,
                "RESOURCE_EXHAUSTED",
                f"no request message arrived (over the {self.limit}-byte receive limit, or the client gave up)",
                logging.WARNING,
            )
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "no request message")
        return request

    def _check(self, method: str, context: grpc.aio.ServicerContext, response: Any) -> None:
        status = _refusal(response)
        if status is not None:
            self.refusals.refused(context.peer(), method, pb.Code.Name(status.code), status.message)

    def _unary(self, method: str, behavior: Callable[..., Any]) -> Callable[..., Any]:
        async def serve(_requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
            response = await behavior(await self._request(method, context), context)
            self._check(method, context, response)
            return response

        return serve

    def _server_streaming(self, method: str, behavior: Callable[..., Any]) -> Callable[..., Any]:
        async def serve(
            _requests: AsyncIterator[Any], context: grpc.aio.ServicerContext
        ) -> AsyncIterator[Any]:
            async for response in behavior(await self._request(method, context), context):
                self._check(method, context, response)
                yield response

        return serve

    def _bidi(self, method: str, behavior: Callable[..., Any]) -> Callable[..., Any]:
        async def serve(
            requests: AsyncIterator[Any], context: grpc.aio.ServicerContext
        ) -> AsyncIterator[Any]:
            async for response in behavior(requests, context):
                self._check(method, context, response)
                yield response

        return serve


def server_credentials(tls: ServerTls, made: tuple[bytes, bytes] | None = None) -> grpc.ServerCredentials:
    """grpcio's form of the broker's certificate, key and (for client auth) trust; ``made``
    is the certificate and key of a ``self_signed`` ``tls``."""
    if made is not None:
        cert, key = made
    else:
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


class ServedFront(Protocol):
    """What the endpoint needs of the servicer it serves."""

    @property
    def max_message_size(self) -> int: ...

    sessions: dict[str, Session]

    def start(self) -> None: ...

    async def stop(self) -> None: ...


ServiceT = TypeVar("ServiceT", bound=ServedFront)


class GrpcEndpoint(Generic[ServiceT]):
    """Serves a 5.x servicer (the broker's :class:`~.service.MessagingService`, or the proxy's):
    ``await start(host, port)``, ``await stop()``."""

    def __init__(self, service: ServiceT, tls: ServerTls | None) -> None:
        self.service = service
        self.tls = tls
        self.port = 0
        self.receive_limit = 0
        #: What the port takes, for the start line: "TLS (...) and plain text", ...
        self.accepts = ""
        self._server: grpc.aio.Server | None = None
        self._sorter: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> int:
        """Listen; returns the port (``port`` 0 picks a free one)."""
        max_message_size = self.service.max_message_size
        self.receive_limit = receive_limit(max_message_size)
        server = grpc.aio.server(options=server_options(max_message_size))
        RefusalLogger(self.receive_limit).add_service(
            pb_grpc.add_MessagingServiceServicer_to_server, self.service, server
        )
        tls = self.tls or ServerTls()
        made = None
        if tls.self_signed and tls.enabled:
            try:
                made = await asyncio.to_thread(self_signed_certificate)
            except ImportError:  # `cryptography` comes with the server extra
                tls = replace(
                    tls,
                    mode=TlsMode.DISABLED,
                    self_signed=False,
                    fallback="no certificate configured and `cryptography` (for a self-signed one) is not installed",
                )
        self.accepts = describe(tls)
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if tls.mode == TlsMode.DISABLED:
            bound = server.add_insecure_port(address)
        elif tls.mode == TlsMode.ENFORCING:
            bound = server.add_secure_port(address, server_credentials(tls, made))
        else:
            plain = server.add_insecure_port("127.0.0.1:0")
            secure = server.add_secure_port("127.0.0.1:0", server_credentials(tls, made))
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


def describe(tls: ServerTls) -> str:
    """What a port with ``tls`` accepts, in words, with why when it is not the default."""
    if tls.mode == TlsMode.DISABLED:
        return (
            f"plain text only ({tls.fallback})"
            if tls.fallback
            else "plain text only (tls.server.mode=disabled)"
        )
    certificate = "self-signed test certificate" if tls.self_signed else f"certificate {tls.cert_path}"
    if tls.self_signed and tls.fallback:
        certificate += f"; {tls.fallback}"
    if tls.mode == TlsMode.ENFORCING:
        return f"TLS only ({certificate})"
    return f"TLS ({certificate}) and plain text"


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(262144):
            writer.write(data)
            await writer.drain()
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            writer.write_eof()
