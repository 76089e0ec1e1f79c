"""Compiled with mypyc (aiorocketmq/compiled.py, which lists the rules): declared, typed
attributes only; no monkeypatching, setattr or frame tricks; no await in except/finally.

One asyncio transport for every process: a bidirectional :class:`Connection` and a
:class:`Server` that dispatches requests to a handler per request code.

Either side of a connection may send requests; responses are matched to their requests by
``opaque`` alone (docs/protocol.md §1.1). Handlers may answer synchronously (returning the
response, fastest), return a future (answered from its callback), return another awaitable
(run as a task), or return None and answer later with :meth:`Connection.send_response` (a
held long poll, a send under SYNC_FLUSH, a POP ack). Requests that arrive in one read are answered with one
write; frames written at any other time (later answers, requests) are gathered over one turn
of the event loop and sent with one write, so the answers one group commit releases, or a
client's pipelined requests, cost one system call rather than one each.

A server protects its memory from broken and hostile peers (:class:`ConnectionLimits`): one
incomplete frame holds at most the frame size limit; all connections' incomplete frames
together at most ``max_buffered`` bytes (past it, the peer holding the largest one is
disconnected); a started frame must finish arriving within ``frame_timeout``; one remote
address may hold at most ``max_per_address`` connections. Each disconnection is logged;
everyone else keeps being served.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import itertools
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

from mypy_extensions import mypyc_attr

from .codes import RequestCode, ResponseCode, RpcFlag
from .command import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, RemotingCommand
from .errors import BrokerError, ConnectionClosedError, MQError, ProtocolError, RequestTimeoutError
from .loop import cancel_and_wait
from .tls import Listener, ServerTls, serve

log = logging.getLogger(__name__)

HandlerResult: TypeAlias = "RemotingCommand | Awaitable[RemotingCommand | None] | None"
Handler: TypeAlias = "Callable[[Connection, RemotingCommand], HandlerResult]"
#: Called on every request a connection sends, just before it is encoded (ACL signing).
Signer: TypeAlias = "Callable[[RemotingCommand], None]"

_RESPONSE = RpcFlag.RESPONSE.value
_ONEWAY = RpcFlag.ONEWAY.value
DEFAULT_TIMEOUT = 3.0
#: Bytes a connection may have waiting to be sent before its peer is judged gone.
DEFAULT_MAX_WRITE_BACKLOG = 64 * 1024 * 1024
#: How long a closing server waits for its connections to flush before aborting them.
CLOSE_GRACE = 3.0


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """What one server accepts from its peers (generous defaults; see docs/operations.md)."""

    #: Pending connections the kernel queues (RocketMQ's ``serverSocketBacklog``).
    backlog: int = 1024
    #: Largest frame, and so the most one incomplete frame can hold.
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    #: Bytes of incomplete frames all connections together may hold.
    max_buffered: int = 256 * 1024 * 1024
    #: Seconds a frame may take from its first byte to its last.
    frame_timeout: float = 60.0
    #: Connections one remote address may hold at once.
    max_per_address: int = 1000


_M_MMAP_THRESHOLD = -3
_heap_tuned = False


def _tune_heap() -> None:
    """Have glibc serve allocations of 1 MiB and more (incomplete frames) from their own
    mappings, returned to the system when freed. By default the threshold rises to the size
    of the largest block freed (up to 32 MiB), after which dropped peers' frames stay in the
    heap as fragmented, unreturned memory and the process's RSS drifts far above what the
    buffer limit allows."""
    global _heap_tuned
    if _heap_tuned:
        return
    _heap_tuned = True
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return  # not glibc
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt(_M_MMAP_THRESHOLD, 1 << 20)


class _Budget:
    """The incomplete-frame bytes of one server's connections, and who holds them."""

    __slots__ = ("limit", "total", "partial", "name", "dropped")

    def __init__(self, limit: int, name: str) -> None:
        self.limit = limit
        self.total = 0
        self.dropped = 0
        #: Connections holding part of a frame.
        self.partial: set[Connection] = set()
        self.name = name

    def enforce(self) -> None:
        """Past the limit: disconnect the peers holding the largest incomplete frames."""
        while self.total > self.limit and self.partial:
            biggest = max(self.partial, key=lambda c: c._buffered)
            log.warning(
                "%s: disconnecting %s: %d bytes of incomplete frames are buffered for all peers "
                "(limit %d) and it holds the largest (%d bytes)",
                self.name,
                biggest.address,
                self.total,
                self.limit,
                biggest._buffered,
            )
            self.dropped += 1
            biggest.drop("incomplete frames over the server's buffer limit")


def error_response(request: RemotingCommand, exc: BaseException) -> RemotingCommand:
    """The response a handler's exception turns into: its own code for broker errors,
    SYSTEM_ERROR with the reason otherwise."""
    if isinstance(exc, BrokerError):
        return request.response(exc.code, exc.remark)
    reason = str(exc) or type(exc).__name__
    if not isinstance(exc, MQError):
        reason = f"{type(exc).__name__}: {reason}"
    return request.response(ResponseCode.SYSTEM_ERROR, reason)


def _describe_code(code: int) -> str:
    try:
        return RequestCode(code).name
    except ValueError:
        return str(code)


class RefusalLog:
    """Logs refused requests, at most once a minute per request code and kind of refusal.

    A peer that sends what we do not serve (a newer client's request code) or what we refuse
    (no permission, a missing group) would otherwise be seen only by that peer; a client
    retrying in a loop must not flood the log either, so repeats within the interval are
    counted and the count is reported with the next line."""

    def __init__(self, interval: float = 60.0) -> None:
        self.interval = interval
        self._seen: dict[tuple[int, int], list[float]] = {}

    def refused(self, peer: str, code: int, kind: int, reason: str, level: int = logging.INFO) -> None:
        now = time.monotonic()
        entry = self._seen.get((code, kind))
        if entry is not None and now - entry[0] < self.interval:
            entry[1] += 1
            return
        since = f" ({int(entry[1])} more since the last line)" if entry is not None and entry[1] else ""
        self._seen[(code, kind)] = [now, 0.0]
        log.log(level, "refused %s (code %d) from %s: %s%s", _describe_code(code), code, peer, reason, since)


#: One for the process: the interval is per request code, whichever connection sent it.
REFUSALS = RefusalLog()


# Open to subclasses in plain Python (the gRPC sessions' channel, test doubles) when compiled.
@mypyc_attr(allow_interpreted_subclasses=True)
class Connection(asyncio.Protocol):
    """A remoting connection, client- or server-side."""

    def __init__(
        self,
        handlers: Mapping[int, Handler] | None = None,
        *,
        default_handler: Handler | None = None,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        name: str = "",
    ) -> None:
        self._handlers: Mapping[int, Handler] = handlers or {}
        self._default_handler = default_handler
        self._decoder = FrameDecoder(max_frame_size)
        self._pending: dict[int, tuple[asyncio.Future[RemotingCommand], asyncio.TimerHandle]] = {}
        self._opaques = itertools.count(1)
        self._transport: asyncio.Transport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._out: list[bytes] | None = None
        #: Frames written outside a read, sent together by :meth:`_flush` once the callbacks
        #: ready in this turn of the loop have run.
        self._corked: list[bytes] = []
        self._close_callbacks: list[Callable[[Connection], None]] = []
        self._closed_waiter: asyncio.Future[None] | None = None
        self._drain_waiter: asyncio.Future[None] | None = None
        self._paused = False
        self._tasks: set[asyncio.Task[None]] = set()
        self.closed = False
        self.close_reason: str | None = None
        self.name = name
        #: ``time.monotonic()`` of the last bytes received (idle detection).
        self.last_activity = time.monotonic()
        self.max_write_backlog = DEFAULT_MAX_WRITE_BACKLOG
        self.peer: tuple[str, int] = ("", 0)
        self.local: tuple[str, int] = ("", 0)
        #: Free-form state owned by the application (client id, registered groups, ...).
        self.attrs: dict[str, Any] = {}
        #: Signs each outgoing request (ACL credentials); None sends them as they are.
        self.signer: Signer | None = None
        #: Server side: the budget incomplete frames count against, bytes held, and when the
        #: frame now arriving started (``time.monotonic()``; None: no frame under way).
        self._budget: _Budget | None = None
        self._buffered = 0
        self.frame_started: float | None = None
        #: Seconds the loop keeps polling, instead of sleeping, after a request is sent while
        #: its response is awaited; 0 (the default) never polls (see :meth:`_poll`).
        self.busy_poll = 0.0
        #: Server side: called after each request of a read; True when it released answers
        #: (a SYNC_FLUSH round that ended meanwhile), which then go out at once instead of
        #: after the rest of the read. A read under load holds dozens of requests.
        self.between_requests: Callable[[], bool] | None = None
        self._polling_until = 0.0
        self._polling = False
        self._polled = 0  # the opaque of the latest request sent while busy polling

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        self._loop = asyncio.get_running_loop()
        self._closed_waiter = self._loop.create_future()
        peer = transport.get_extra_info("peername")
        local = transport.get_extra_info("sockname")
        if isinstance(peer, tuple):
            self.peer = (peer[0], peer[1])
        if isinstance(local, tuple):
            self.local = (local[0], local[1])

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return  # dropped (refused or over a limit): read nothing more
        now = self.last_activity = time.monotonic()
        try:
            commands = self._decoder.feed(data)
        except ProtocolError as exc:
            log.warning("%s: closing connection from %s: %s", self.name or "connection", self.address, exc)
            self.close(f"protocol error: {exc}")
            return
        budget = self._budget
        if budget is not None:
            buffered = self._decoder.buffered
            if buffered or self._buffered:
                self._account(budget, buffered, now, bool(commands))
        if not commands:
            return
        out: list[bytes] = []
        self._out = out
        between = self.between_requests
        try:
            for cmd in commands:
                if cmd.flag & _RESPONSE:
                    self._on_response(cmd)
                else:
                    self._on_request(cmd)
                    if between is not None and between() and out:
                        self._write_out(out)
                        out.clear()
        finally:
            self._out = None
        if out:
            self._write_out(out)
        error = self._decoder.error
        if error is not None:
            log.warning("%s: closing connection from %s: %s", self.name or "connection", self.address, error)
            self.close(f"protocol error: {error}")

    def _write_out(self, frames: list[bytes]) -> None:
        """Write what a read produced, after anything corked before it."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if self._corked:  # written before this read: they go first
            frames = self._corked + frames
            self._corked = []
        transport.write(frames[0] if len(frames) == 1 else b"".join(frames))
        if self._paused:
            self._check_backlog()

    def _account(self, budget: _Budget, buffered: int, now: float, completed: bool) -> None:
        """Track this connection's incomplete frame in the server's budget."""
        budget.total += buffered - self._buffered
        if buffered:
            if completed or not self._buffered:
                self.frame_started = now  # a new frame began in this read
            budget.partial.add(self)
        else:
            self.frame_started = None
            budget.partial.discard(self)
        self._buffered = buffered
        if budget.total > budget.limit:
            budget.enforce()

    def _release_buffer(self) -> None:
        budget = self._budget
        if budget is not None:
            budget.total -= self._buffered
            budget.partial.discard(self)
        self._buffered = 0
        self.frame_started = None

    def drop(self, reason: str) -> None:
        """Disconnect at once (a peer over a limit): nothing more is read, what it had sent
        of an incomplete frame is freed now, and nothing queued for it is flushed."""
        self.close_reason = self.close_reason or reason
        self._release_buffer()
        self._decoder = FrameDecoder(self._decoder.max_frame_size)
        self._corked = []
        self.closed = True
        if self._transport is not None:
            self._transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._release_buffer()
        self._corked = []
        self.closed = True
        reason = self.close_reason or (f"connection lost: {exc}" if exc else "connection closed by peer")
        self.close_reason = reason
        pending, self._pending = self._pending, {}
        for future, timer in pending.values():
            timer.cancel()
            if not future.done():
                future.set_exception(ConnectionClosedError(f"{self.address}: {reason}"))
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_exception(ConnectionClosedError(f"{self.address}: {reason}"))
        for callback in self._close_callbacks:
            try:
                callback(self)
            except Exception:
                log.exception("close callback failed")
        self._close_callbacks.clear()
        if self._closed_waiter is not None and not self._closed_waiter.done():
            self._closed_waiter.set_result(None)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_result(None)
        self._drain_waiter = None

    # -- sending ------------------------------------------------------------------------

    @property
    def address(self) -> str:
        return f"{self.peer[0]}:{self.peer[1]}"

    def request(
        self, cmd: RemotingCommand, timeout: float = DEFAULT_TIMEOUT
    ) -> asyncio.Future[RemotingCommand]:
        """Send a request; the returned future resolves to its response.

        Fails with :class:`RequestTimeoutError` after ``timeout`` seconds and with
        :class:`ConnectionClosedError` if the connection goes away first.
        """
        loop = self._loop
        if self.closed or loop is None:
            raise ConnectionClosedError(f"{self.address}: {self.close_reason or 'not connected'}")
        opaque = next(self._opaques) & 0x7FFFFFFF
        cmd.opaque = opaque
        cmd.flag &= ~_ONEWAY
        if self.signer is not None:
            self.signer(cmd)
        future: asyncio.Future[RemotingCommand] = loop.create_future()
        timer = loop.call_later(timeout, self._expire, opaque, cmd.code, timeout)
        self._pending[opaque] = (future, timer)
        try:
            self.write(cmd.encode())
        except BaseException:
            self._pending.pop(opaque, None)
            timer.cancel()
            raise
        if self.busy_poll:
            self._polling_until = loop.time() + self.busy_poll
            self._polled = opaque
            if not self._polling:
                self._polling = True
                loop.call_soon(self._poll)
        return future

    def _poll(self) -> None:
        """Busy polling: until the latest request is answered, and for at most ``busy_poll``
        seconds after it was sent, a callback is always ready, so each turn of the loop polls
        its sockets without sleeping. A thread that sleeps between a request and its response
        pays for the wake-up on both sides (in a VM, an interrupt to an idle virtual CPU is an
        exit to the hypervisor), which dominates one-request-at-a-time round trips on one host;
        a polling one spends that time on its own CPU instead, as Linux's ``busy_poll`` does.
        Older requests still pending (a long poll) do not keep it going."""
        loop = self._loop
        if (
            self._polled in self._pending
            and not self.closed
            and loop is not None
            and loop.time() < self._polling_until
        ):
            loop.call_soon(self._poll)
        else:
            self._polling = False

    def send_oneway(self, cmd: RemotingCommand) -> None:
        """Send a request that expects no response."""
        if self.closed or self._loop is None:
            raise ConnectionClosedError(f"{self.address}: {self.close_reason or 'not connected'}")
        cmd.opaque = next(self._opaques) & 0x7FFFFFFF
        cmd.flag |= _ONEWAY
        if self.signer is not None:
            self.signer(cmd)
        self.write(cmd.encode())

    def send_response(self, response: RemotingCommand) -> None:
        """Write a response produced outside the request's handler (e.g. a woken long poll)."""
        if not self.closed:
            response.flag |= _RESPONSE
            self.write(response.encode())

    def write(self, frame: bytes) -> None:
        out = self._out
        if out is not None:
            out.append(frame)
        elif self._transport is not None and not self.closed:
            corked = self._corked
            corked.append(frame)
            if len(corked) == 1:
                self._loop.call_soon(self._flush)  # type: ignore[union-attr]  # set with the transport

    def _flush(self) -> None:
        corked = self._corked
        if not corked:
            return
        self._corked = []
        transport = self._transport
        if transport is not None and not self.closed and not transport.is_closing():
            transport.write(corked[0] if len(corked) == 1 else b"".join(corked))
            if self._paused:
                self._check_backlog()

    def _check_backlog(self) -> None:
        """A peer that stops reading must not make us buffer without bound: past
        ``max_write_backlog`` bytes waiting to be sent, the connection is dropped."""
        transport = self._transport
        if transport is not None and transport.get_write_buffer_size() > self.max_write_backlog:
            log.warning(
                "%s: dropping %s, which stopped reading (%d bytes unsent)",
                self.name or "connection",
                self.address,
                transport.get_write_buffer_size(),
            )
            self.close_reason = self.close_reason or "peer stopped reading"
            transport.abort()

    async def drain(self) -> None:
        """Wait while the transport's write buffer is over its high-water mark."""
        if not self._paused or self.closed:
            return
        if self._drain_waiter is None:
            assert self._loop is not None
            self._drain_waiter = self._loop.create_future()
        await asyncio.shield(self._drain_waiter)

    @property
    def pending_requests(self) -> int:
        return len(self._pending)

    def add_close_callback(self, callback: Callable[[Connection], None]) -> None:
        if self.closed:
            callback(self)
        else:
            self._close_callbacks.append(callback)

    def close(self, reason: str | None = None) -> None:
        if self.close_reason is None:
            self.close_reason = reason or "closed locally"
        transport = self._transport
        if transport is not None and not transport.is_closing():
            # Frames written before the close, gathered for later or batched in this read,
            # were owed first (the transport flushes its buffer before closing).
            owed = self._corked + (self._out or [])
            self._corked = []
            if self._out:
                self._out.clear()
            if owed:
                transport.write(b"".join(owed))
            transport.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    async def wait_closed(self) -> None:
        if self._closed_waiter is not None:
            await asyncio.shield(self._closed_waiter)

    # -- dispatch -----------------------------------------------------------------------

    def _expire(self, opaque: int, code: int, timeout: float) -> None:
        entry = self._pending.pop(opaque, None)
        if entry is not None and not entry[0].done():
            entry[0].set_exception(
                RequestTimeoutError(
                    f"{self.address}: no response to {_describe_code(code)} within {timeout:g}s"
                )
            )

    def _on_response(self, response: RemotingCommand) -> None:
        entry = self._pending.pop(response.opaque, None)
        if entry is None:
            log.debug(
                "%s: response with unknown opaque %d (late or unsolicited)", self.address, response.opaque
            )
            return
        future, timer = entry
        timer.cancel()
        if not future.done():
            future.set_result(response)

    def _on_request(self, cmd: RemotingCommand) -> None:
        handler = self._handlers.get(cmd.code, self._default_handler)
        if handler is None:
            if self._budget is not None:  # a server: its operator should see what peers miss
                REFUSALS.refused(
                    self.address,
                    cmd.code,
                    ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                    "request code not supported",
                    logging.WARNING,
                )
            if not cmd.flag & _ONEWAY:
                self.write(
                    cmd.response(
                        ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                        f" request type {cmd.code} not supported",
                    ).encode()
                )
            return
        try:
            result = handler(self, cmd)
        except Exception as exc:
            self._handler_failed(cmd, exc)
            return
        if result is None:
            return
        if isinstance(result, RemotingCommand):
            self._reply(cmd, result)
            return
        if isinstance(result, asyncio.Future):
            # Answered from the future's callback: no coroutine and task per request.
            result.add_done_callback(functools.partial(self._reply_when_done, cmd))
            return
        task = asyncio.ensure_future(self._await_handler(cmd, result))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _await_handler(self, cmd: RemotingCommand, pending: Awaitable[RemotingCommand | None]) -> None:
        try:
            response = await pending
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._handler_failed(cmd, exc)
            return
        if response is not None:
            self._reply(cmd, response)

    def _reply_when_done(self, cmd: RemotingCommand, done: asyncio.Future[RemotingCommand | None]) -> None:
        if done.cancelled():
            return
        error = done.exception()
        if error is not None:
            if isinstance(error, Exception):
                self._handler_failed(cmd, error)
            return
        response = done.result()
        if response is not None:
            self._reply(cmd, response)

    def _reply(self, cmd: RemotingCommand, response: RemotingCommand) -> None:
        if cmd.flag & _ONEWAY:
            return
        response.opaque = cmd.opaque
        response.flag |= _RESPONSE
        try:
            frame = response.encode()
        except MQError as exc:
            frame = error_response(cmd, exc).encode()
        self.write(frame)

    def _handler_failed(self, cmd: RemotingCommand, exc: Exception) -> None:
        if isinstance(exc, MQError):
            if self._budget is not None:
                code = exc.code if isinstance(exc, BrokerError) else ResponseCode.SYSTEM_ERROR
                REFUSALS.refused(self.address, cmd.code, int(code), str(exc))
            else:
                log.debug("%s: %s failed: %s", self.address, _describe_code(cmd.code), exc)
        else:
            log.exception("%s: handler for %s raised", self.address, _describe_code(cmd.code))
        if not cmd.flag & _ONEWAY:
            self.write(error_response(cmd, exc).encode())


async def connect(
    host: str,
    port: int,
    *,
    handlers: Mapping[int, Handler] | None = None,
    default_handler: Handler | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    name: str = "",
    ssl_context: ssl.SSLContext | None = None,
    signer: Signer | None = None,
    busy_poll: float = 0.0,
) -> Connection:
    """Open a client connection (over TLS with ``ssl_context``; each request signed by
    ``signer``; polling ``busy_poll`` seconds for each response); handlers answer requests
    the server sends on it."""
    return await connect_with(
        lambda: Connection(
            handlers, default_handler=default_handler, max_frame_size=max_frame_size, name=name
        ),
        host,
        port,
        timeout=timeout,
        ssl_context=ssl_context,
        signer=signer,
        busy_poll=busy_poll,
    )


_Conn = TypeVar("_Conn", bound=Connection)


async def connect_with(
    make: Callable[[], _Conn],
    host: str,
    port: int,
    *,
    timeout: float,
    ssl_context: ssl.SSLContext | None = None,
    signer: Signer | None = None,
    busy_poll: float = 0.0,
) -> _Conn:
    """:func:`connect` for a connection that ``make`` builds (a :class:`Connection` subclass):
    an unreachable or silent peer raises :class:`ConnectionClosedError` naming it."""
    loop = asyncio.get_running_loop()
    try:
        _, conn = await asyncio.wait_for(
            loop.create_connection(
                make, host, port, ssl=ssl_context, server_hostname=host if ssl_context is not None else None
            ),
            timeout,
        )
    except (TimeoutError, OSError) as exc:
        raise ConnectionClosedError(f"cannot connect to {host}:{port}: {exc or 'timed out'}") from None
    conn.signer = signer
    conn.busy_poll = busy_poll
    return conn


class Server:
    """A remoting server: one handler per request code, any number of listening sockets."""

    def __init__(
        self,
        handlers: Mapping[int, Handler],
        *,
        name: str = "server",
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        default_handler: Handler | None = None,
        on_connect: Callable[[Connection], None] | None = None,
        on_disconnect: Callable[[Connection], None] | None = None,
        idle_timeout: float | None = None,
        tls: ServerTls | None = None,
        limits: ConnectionLimits | None = None,
    ) -> None:
        self.handlers: dict[int, Handler] = dict(handlers)
        #: TLS on every listening socket (RocketMQ's disabled / permissive / enforcing).
        self.tls = tls
        self.name = name
        if limits is None:
            limits = ConnectionLimits(max_frame_size=max_frame_size)
        self.limits = limits
        self.max_frame_size = limits.max_frame_size
        self._budget = _Budget(limits.max_buffered, name)
        _tune_heap()
        self._per_address: dict[str, int] = {}
        #: Connections refused or dropped for going over a limit.
        self.refused = 0
        self._default_handler = default_handler
        self._on_connect = on_connect
        self._on_disconnect = on_disconnect
        #: Close connections that sent nothing for this long (RocketMQ: 120 s); None: never.
        self.idle_timeout = idle_timeout
        self._servers: list[asyncio.Server | Listener] = []
        self._sweeper: asyncio.Task[None] | None = None
        self.connections: set[Connection] = set()
        #: Given to each connection accepted from now on (:attr:`Connection.between_requests`).
        self.between_requests: Callable[[], bool] | None = None

    def _make_connection(self) -> Connection:
        conn = _ServerConnection(
            self,
            self.handlers,
            default_handler=self._default_handler,
            max_frame_size=self.max_frame_size,
            name=self.name,
        )
        conn._budget = self._budget
        conn.between_requests = self.between_requests
        return conn

    def _connected(self, conn: Connection) -> None:
        host = conn.peer[0]
        count = self._per_address.get(host, 0)
        if count >= self.limits.max_per_address:
            self.refused += 1
            log.warning(
                "%s: refusing a connection from %s: it already holds %d (limit %d per address)",
                self.name,
                conn.address,
                count,
                self.limits.max_per_address,
            )
            conn.drop("too many connections from this address")
            return
        self._per_address[host] = count + 1
        self.connections.add(conn)
        conn.add_close_callback(self._disconnected)
        if self._on_connect is not None:
            self._on_connect(conn)

    def _disconnected(self, conn: Connection) -> None:
        self.connections.discard(conn)
        host = conn.peer[0]
        left = self._per_address.get(host, 1) - 1
        if left > 0:
            self._per_address[host] = left
        else:
            self._per_address.pop(host, None)
        if self._on_disconnect is not None:
            self._on_disconnect(conn)

    @property
    def buffered(self) -> int:
        """Bytes of incomplete frames held for all connections."""
        return self._budget.total

    @property
    def dropped(self) -> int:
        """Connections refused or dropped for going over a limit."""
        return self.refused + self._budget.dropped

    async def listen(self, host: str | None, port: int) -> int:
        """Start listening; returns the bound port (useful with ``port=0``)."""
        server = await serve(self._make_connection, host, port, self.tls, backlog=self.limits.backlog)
        self._servers.append(server)
        if self._sweeper is None:
            self._sweeper = asyncio.ensure_future(self._sweep())
        return int(server.sockets[0].getsockname()[1])

    async def _sweep(self) -> None:
        """Close connections idle for ``idle_timeout`` and those whose frame is overdue."""
        idle_timeout = self.idle_timeout
        frame_timeout = self.limits.frame_timeout
        period = frame_timeout / 4
        if idle_timeout is not None:
            period = min(period, idle_timeout / 4)
        period = min(30.0, max(0.05, period))
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            overdue = now - frame_timeout
            for conn in [c for c in self._budget.partial if (c.frame_started or now) < overdue]:
                self.refused += 1
                log.warning(
                    "%s: disconnecting %s: a frame started %.1fs ago is still incomplete "
                    "(%d bytes so far; limit %gs)",
                    self.name,
                    conn.address,
                    now - (conn.frame_started or now),
                    conn._buffered,
                    frame_timeout,
                )
                conn.drop("frame not completed in time")
            if idle_timeout is not None:
                deadline = now - idle_timeout
                for conn in [c for c in self.connections if c.last_activity < deadline]:
                    log.info("%s: closing %s, idle for %.0fs", self.name, conn.address, idle_timeout)
                    conn.close("idle")

    @property
    def ports(self) -> list[int]:
        return [int(s.sockets[0].getsockname()[1]) for s in self._servers if s.sockets]

    async def close(self, grace: float = CLOSE_GRACE) -> None:
        """Stop listening and close every connection; those that cannot flush within
        ``grace`` seconds (a peer that stopped reading) are aborted."""
        await cancel_and_wait(self._sweeper)
        self._sweeper = None
        for server in self._servers:
            server.close()
        conns = list(self.connections)
        for conn in conns:
            conn.close("server shutting down")
        if conns:
            _done, stuck = await asyncio.wait(
                [asyncio.ensure_future(c.wait_closed()) for c in conns], timeout=grace
            )
            if stuck:
                for conn in conns:
                    if not conn.closed:
                        conn.abort()
                await asyncio.wait(stuck, timeout=grace)
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()

    def broadcast_oneway(self, conns: Iterable[Connection], cmd: RemotingCommand) -> None:
        for conn in conns:
            if not conn.closed:
                conn.send_oneway(cmd)


class _ServerConnection(Connection):
    def __init__(
        self,
        server: Server,
        handlers: Mapping[int, Handler] | None,
        *,
        default_handler: Handler | None,
        max_frame_size: int,
        name: str,
    ) -> None:
        super().__init__(handlers, default_handler=default_handler, max_frame_size=max_frame_size, name=name)
        self._server = server

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # Half-open connections (a peer host that vanished) are found by the kernel.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        self._server._connected(self)
