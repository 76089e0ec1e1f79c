"""The transport over real loopback sockets: many requests in flight matched by opaque,
timeouts, oneway requests, requests from the server to the client, peers that vanish, and
the error responses a server owes a bad request (docs/protocol.md §1.1, §1.5)."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

import pytest

from aiorocketmq.protocol.codes import RequestCode, ResponseCode, SerializeType
from aiorocketmq.protocol.command import FrameDecoder, RemotingCommand, decode_frame
from aiorocketmq.protocol.errors import (
    ConnectionClosedError,
    ProtocolError,
    RequestTimeoutError,
    TopicNotExistError,
)
from aiorocketmq.protocol.headers import GetRouteInfoRequestHeader
from aiorocketmq.protocol.transport import Connection, Handler, Server, connect

from .test_frames import frame

ECHO = 1000
STALL = 1001
BOOM = 1002
ASYNC_BOOM = 1003
NOT_FOUND = 1004
BAD_HEADER = 1005
SLOW_ECHO = 1006
FUTURE_ECHO = 1007
FUTURE_BOOM = 1008
FUTURE_CANCELLED = 1009

ServerFactory = Callable[..., Awaitable[tuple[Server, int]]]


def echo(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.response(ext_fields={**cmd.ext_fields, "echo": "yes"}, body=cmd.body)


async def slow_echo(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    await asyncio.sleep(0)
    return echo(conn, cmd)


def stall(conn: Connection, cmd: RemotingCommand) -> None:
    conn.attrs.setdefault("stalled", []).append(cmd)


def boom(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    raise ValueError("disk on fire")


async def async_boom(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    await asyncio.sleep(0)
    raise RuntimeError("late failure")


def later(settle: Callable[[asyncio.Future[RemotingCommand]], object]) -> asyncio.Future[RemotingCommand]:
    """A future (not a coroutine) that ``settle`` completes on the loop's next turn."""
    future: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(settle, future)
    return future


def future_echo(conn: Connection, cmd: RemotingCommand) -> asyncio.Future[RemotingCommand]:
    return later(lambda future: future.set_result(echo(conn, cmd)))


def future_boom(conn: Connection, cmd: RemotingCommand) -> asyncio.Future[RemotingCommand]:
    return later(lambda future: future.set_exception(RuntimeError("failed later")))


def future_cancelled(conn: Connection, cmd: RemotingCommand) -> asyncio.Future[RemotingCommand]:
    return later(lambda future: future.cancel())


def not_found(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    raise TopicNotExistError("No topic route info in name server for the topic: T")


def bad_header(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    GetRouteInfoRequestHeader.from_fields(cmd.ext_fields)
    return cmd.response()


HANDLERS: dict[int, Handler] = {
    ECHO: echo,
    STALL: stall,
    BOOM: boom,
    ASYNC_BOOM: async_boom,
    NOT_FOUND: not_found,
    BAD_HEADER: bad_header,
    SLOW_ECHO: slow_echo,
    FUTURE_ECHO: future_echo,
    FUTURE_BOOM: future_boom,
    FUTURE_CANCELLED: future_cancelled,
}


@pytest.fixture
async def make_server() -> AsyncIterator[ServerFactory]:
    servers: list[Server] = []

    async def make(handlers: Mapping[int, Handler] = HANDLERS, **kwargs: object) -> tuple[Server, int]:
        server = Server(handlers, **kwargs)  # type: ignore[arg-type]
        port = await server.listen("127.0.0.1", 0)
        servers.append(server)
        return server, port

    yield make
    for server in servers:
        await server.close()


@pytest.fixture
async def clients() -> AsyncIterator[list[Connection]]:
    opened: list[Connection] = []
    yield opened
    for conn in opened:
        conn.close()
        await conn.wait_closed()


async def open_client(port: int, clients: list[Connection], **kwargs: object) -> Connection:
    conn = await connect("127.0.0.1", port, **kwargs)  # type: ignore[arg-type]
    clients.append(conn)
    return conn


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, RemotingCommand]:
    """One frame off a raw socket: (serialize type byte from the wire, command)."""
    (total,) = struct.unpack(">i", await reader.readexactly(4))
    rest = await reader.readexactly(total)
    return rest[0], decode_frame(rest)


def raw_request(code: int, opaque: int, flag: int = 0, serialize_type: int = 0) -> bytes:
    cmd = RemotingCommand(
        code, opaque=opaque, flag=flag, ext_fields={"n": str(opaque)}, serialize_type=serialize_type
    )
    return cmd.encode()


# -- many requests in flight --------------------------------------------------------------------


async def test_thousand_concurrent_requests_matched_by_opaque_answered_in_reverse(
    make_server: ServerFactory, clients: list[Connection]
) -> None:
    count = 1000
    held: list[tuple[Connection, RemotingCommand]] = []

    def hold_then_answer_backwards(conn: Connection, cmd: RemotingCommand) -> None:
        held.append((conn, cmd))
        if len(held) == count:
            for c, request in reversed(held):
                c.send_response(
                    request.response(ext_fields={"n": request.ext_fields["n"]}, body=request.body)
                )

    _, port = await make_server({ECHO: hold_then_answer_backwards})
    conn = await open_client(port, clients)
    completed: list[int] = []
    futures = []
    for i in range(count):
        future = conn.request(RemotingCommand.request(ECHO, {"n": str(i)}, f"body-{i}".encode()), timeout=30)
        future.add_done_callback(lambda _, i=i: completed.append(i))
        futures.append(future)
    assert conn.pending_requests == count
    responses = await asyncio.gather(*futures)
    for i, response in enumerate(responses):
        assert response.ext_fields == {"n": str(i)}
        assert response.body == f"body-{i}".encode()
    assert completed == list(reversed(range(count)))
    assert len({f.result().opaque for f in futures}) == count
    assert conn.pending_requests == 0


# -- timeouts -------------------------------------------------------------------------------------


async def test_request_timeout_is_per_request_and_late_answers_are_dropped(
    make_server: ServerFactory, clients: list[Connection]
) -> None:
    server, port = await make_server()
    conn = await open_client(port, clients)
    stalled = conn.request(RemotingCommand.request(STALL), timeout=0.2)
    answered = conn.request(RemotingCommand.request(ECHO, {"x": "1"}), timeout=10)
    assert (await answered).ext_fields["x"] == "1"
    with pytest.raises(RequestTimeoutError, match=r"no response to 1001 within 0\.2s") as info:
        await stalled
    assert isinstance(info.value, TimeoutError)
    assert conn.pending_requests == 0
    # The server answers after all: the client drops it and keeps matching the rest.
    (server_conn,) = server.connections
    (late,) = server_conn.attrs["stalled"]
    server_conn.send_response(late.response(ext_fields={"late": "1"}))
    after = await conn.request(RemotingCommand.request(ECHO, {"x": "2"}), timeout=10)
    assert after.ext_fields["x"] == "2" and "late" not in after.ext_fields
    assert not conn.closed


# -- busy polling -----------------------------------------------------------------------------------


def count_polls(conn: Connection) -> list[int]:
    """Counts the busy-poll callbacks of ``conn`` (one per turn of the loop while it polls)."""
    calls = [0]
    poll = conn._poll

    def counted() -> None:
        calls[0] += 1
        poll()

    conn._poll = counted  # type: ignore[method-assign]
    return calls


async def polls_over(calls: list[int], seconds: float) -> int:
    before = calls[0]
    await asyncio.sleep(seconds)
    return calls[0] - before


async def test_busy_polling_polls_until_the_latest_response_or_its_limit(
    make_server: ServerFactory, clients: list[Connection]
) -> None:
    server, port = await make_server()
    sleeping = await open_client(port, clients)
    polling = await open_client(port, clients, busy_poll=0.2)
    not_polled, polled = count_polls(sleeping), count_polls(polling)
    # Without busy polling the loop sleeps while a response is awaited: CPU stays near zero.
    stalled = sleeping.request(RemotingCommand.request(STALL), timeout=10)
    began = time.thread_time()
    assert await polls_over(not_polled, 0.3) == 0
    assert time.thread_time() - began < 0.1
    # With it, every turn of the loop polls until the limit, then the loop sleeps again.
    held = polling.request(RemotingCommand.request(STALL), timeout=10)
    assert await polls_over(polled, 0.1) > 50
    await asyncio.sleep(0.3)  # past the limit
    assert await polls_over(polled, 0.2) == 0
    # A new request polls again, and its answer ends the polling although an older request
    # (a long poll, say) is still pending.
    answered = await polling.request(RemotingCommand.request(ECHO, {"x": "1"}), timeout=10)
    assert answered.ext_fields["x"] == "1"
    assert await polls_over(polled, 0.2) <= 1
    # Responses arrive as ever.
    for server_conn, request in [(c, r) for c in server.connections for r in c.attrs.get("stalled", [])]:
        server_conn.send_response(request.response(ext_fields={"late": "no"}))
    assert (await held).ext_fields == {"late": "no"}
    assert (await stalled).ext_fields == {"late": "no"}
    # Closing the connection ends it too.
    again = polling.request(RemotingCommand.request(STALL), timeout=10)
    assert await polls_over(polled, 0.05) > 0
    polling.close()
    with pytest.raises(ConnectionClosedError):
        await again
    assert await polls_over(polled, 0.2) <= 1


# -- oneway -----------------------------------------------------------------------------------------


async def test_oneway_request_reaches_the_handler_with_flag_bit_1(
    make_server: ServerFactory, clients: list[Connection]
) -> None:
    seen: asyncio.Queue[RemotingCommand] = asyncio.Queue()

    def record(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        seen.put_nowait(cmd)
        return cmd.response()  # must not be sent for a oneway request

    _, port = await make_server({RequestCode.UPDATE_CONSUMER_OFFSET: record, ECHO: echo})
    conn = await open_client(port, clients)
    conn.send_oneway(RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {"commitOffset": "5"}))
    cmd = await asyncio.wait_for(seen.get(), 10)
    assert cmd.flag == 2 and cmd.is_oneway
    assert cmd.ext_fields == {"commitOffset": "5"}
    assert conn.pending_requests == 0
    # ali-ons's "oneway" without the bit is answered (§1.5 rule 4: decide by the flag).
    response = await conn.request(RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET), timeout=10)
    assert response.code == ResponseCode.SUCCESS
    assert (await seen.get()).flag == 0


async def test_oneway_requests_and_cancelled_answers_get_no_response(make_server: ServerFactory) -> None:
    """No response of any kind to a oneway request, nor to one whose handler's future (a
    handler may return one: no task is made for it) is cancelled."""
    _, port = await make_server()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            raw_request(ECHO, 11, flag=2)  # handled
            + raw_request(9999, 12, flag=2)  # unknown code
            + raw_request(BOOM, 13, flag=2)  # handler raises
            + raw_request(ASYNC_BOOM, 14, flag=2)  # awaitable raises
            + raw_request(SLOW_ECHO, 15, flag=2)  # awaitable answers
            + raw_request(FUTURE_ECHO, 18, flag=2)  # future answers
            + raw_request(FUTURE_BOOM, 19, flag=2)  # future fails
            + raw_request(FUTURE_CANCELLED, 20)  # not oneway, but its answer is cancelled
            + raw_request(ECHO, 16)
        )
        await writer.drain()
        _, first = await asyncio.wait_for(read_frame(reader), 10)
        assert first.opaque == 16 and first.is_response
        # Anything owed to the requests before would have been written before this one.
        writer.write(raw_request(SLOW_ECHO, 17))
        _, second = await asyncio.wait_for(read_frame(reader), 10)
        assert second.opaque == 17
    finally:
        writer.close()
        await writer.wait_closed()


# -- requests from the server --------------------------------------------------------------------


async def test_server_request_is_answered_by_the_clients_handler_on_its_connection(
    make_server: ServerFactory, clients: list[Connection]
) -> None:
    loop = asyncio.get_running_loop()
    connected: asyncio.Future[Connection] = loop.create_future()
    server, port = await make_server(on_connect=lambda c: connected.set_result(c))
    seen: list[tuple[Connection, RemotingCommand]] = []
    notified = asyncio.Event()

    async def check_transaction(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        seen.append((conn, cmd))
        await asyncio.sleep(0)
        return cmd.response(ext_fields={"state": "COMMIT", "msgId": cmd.ext_fields["msgId"]})

    def notify(conn: Connection, cmd: RemotingCommand) -> None:
        seen.append((conn, cmd))
        notified.set()

    client = await open_client(
        port,
        clients,
        handlers={
            RequestCode.CHECK_TRANSACTION_STATE: check_transaction,
            RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: notify,
        },
    )
    server_side = await asyncio.wait_for(connected, 10)
    assert server_side.peer == client.local
    response = await server_side.request(
        RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, {"msgId": "U1"}), timeout=10
    )
    assert response.is_response
    assert response.ext_fields == {"state": "COMMIT", "msgId": "U1"}
    server.broadcast_oneway(
        server.connections,
        RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "G"}),
    )
    await asyncio.wait_for(notified.wait(), 10)
    assert [c for c, _ in seen] == [client, client]
    assert seen[1][1].is_oneway and seen[1][1].ext_fields == {"consumerGroup": "G"}
    # The client's own requests still work on the same connection.
    assert (await client.request(RemotingCommand.request(ECHO), timeout=10)).ext_fields["echo"] == "yes"


# -- peers that vanish -----------------------------------------------------------------------------


async def test_pending_requests_fail_when_the_server_vanishes(
    make_server: ServerFactory, clients: list[Connection]
) -> None:
    held: list[RemotingCommand] = []

    def vanish_on_third(conn: Connection, cmd: RemotingCommand) -> None:
        held.append(cmd)
        if len(held) == 3:
            conn.abort()

    _, port = await make_server({STALL: vanish_on_third})
    conn = await open_client(port, clients)
    closed: list[Connection] = []
    conn.add_close_callback(closed.append)
    futures = [conn.request(RemotingCommand.request(STALL), timeout=30) for _ in range(3)]
    for future in futures:
        with pytest.raises(ConnectionClosedError):
            await future
    assert conn.closed and closed == [conn]
    assert conn.pending_requests == 0
    with pytest.raises(ConnectionClosedError):
        conn.request(RemotingCommand.request(ECHO))
    with pytest.raises(ConnectionClosedError):
        conn.send_oneway(RemotingCommand.request(ECHO))


async def test_pending_server_request_fails_when_the_client_vanishes(
    make_server: ServerFactory, clients: list[Connection]
) -> None:
    loop = asyncio.get_running_loop()
    connected: asyncio.Future[Connection] = loop.create_future()
    gone: asyncio.Future[Connection] = loop.create_future()
    server, port = await make_server(on_connect=connected.set_result, on_disconnect=gone.set_result)

    def crash(conn: Connection, cmd: RemotingCommand) -> None:
        conn.abort()

    await open_client(port, clients, handlers={RequestCode.CHECK_TRANSACTION_STATE: crash})
    server_side = await asyncio.wait_for(connected, 10)
    with pytest.raises(ConnectionClosedError):
        await server_side.request(RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE), timeout=30)
    assert await asyncio.wait_for(gone, 10) is server_side
    assert server.connections == set()


async def test_server_close_fails_pending_client_requests(
    make_server: ServerFactory, clients: list[Connection]
) -> None:
    server, port = await make_server()
    conn = await open_client(port, clients)
    pending = conn.request(RemotingCommand.request(STALL), timeout=30)
    await conn.request(RemotingCommand.request(ECHO), timeout=10)  # the stalled one has arrived
    await server.close()
    with pytest.raises(ConnectionClosedError):
        await pending


async def test_connect_to_a_closed_port_is_a_connection_error(make_server: ServerFactory) -> None:
    server, port = await make_server()
    await server.close()
    with pytest.raises(ConnectionClosedError, match=f"cannot connect to 127.0.0.1:{port}"):
        await connect("127.0.0.1", port)


# -- error responses ---------------------------------------------------------------------------------


async def test_unknown_code_is_answered_with_request_code_not_supported(
    make_server: ServerFactory, clients: list[Connection]
) -> None:
    _, port = await make_server()
    conn = await open_client(port, clients)
    response = await conn.request(RemotingCommand.request(9999), timeout=10)
    assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED == 3
    assert response.remark == " request type 9999 not supported"
    assert (await conn.request(RemotingCommand.request(ECHO), timeout=10)).code == ResponseCode.SUCCESS


@pytest.mark.parametrize(
    ("code", "expected_code", "remark"),
    [
        (BOOM, ResponseCode.SYSTEM_ERROR, "ValueError: disk on fire"),
        (ASYNC_BOOM, ResponseCode.SYSTEM_ERROR, "RuntimeError: late failure"),
        (FUTURE_BOOM, ResponseCode.SYSTEM_ERROR, "RuntimeError: failed later"),
        (NOT_FOUND, ResponseCode.TOPIC_NOT_EXIST, "No topic route info in name server for the topic: T"),
        (BAD_HEADER, ResponseCode.SYSTEM_ERROR, "bad GetRouteInfoRequestHeader: missing field 'topic'"),
    ],
)
async def test_handler_failures_become_error_responses_and_keep_the_connection(
    make_server: ServerFactory, clients: list[Connection], code: int, expected_code: int, remark: str
) -> None:
    server, port = await make_server()
    conn = await open_client(port, clients)
    response = await conn.request(RemotingCommand.request(code), timeout=10)
    assert response.code == expected_code
    assert response.remark == remark
    assert not conn.closed
    assert len(server.connections) == 1
    again = await conn.request(RemotingCommand.request(ECHO, {"still": "here"}), timeout=10)
    assert again.ext_fields["still"] == "here"


async def test_unencodable_handler_response_becomes_an_error_response(
    make_server: ServerFactory, clients: list[Connection]
) -> None:
    def too_big(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ext_fields={"big": 2**70})  # msgpack cannot carry it

    _, port = await make_server({ECHO: too_big})
    conn = await open_client(port, clients)
    response = await conn.request(
        RemotingCommand.request(ECHO, serialize_type=SerializeType.MSGPACK), timeout=10
    )
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert response.remark is not None and "cannot encode" in response.remark


BAD_STREAMS = {
    "oversized": struct.pack(">i", 16 * 1024 * 1024 + 1),
    "negative length": struct.pack(">iI", -5, 0),
    "header longer than frame": struct.pack(">iI", 8, 100) + b"{}{}",
    "unknown serialize type": frame(b'{"code":1000,"opaque":1}', b"", 9),
    "invalid json": frame(b'{"code":1000,"opaque":'),
    "invalid msgpack": frame(b"\xc1", b"", 2),
    "opaque beyond int32": frame(b'{"code":1000,"opaque":4294967296}'),
}


@pytest.mark.parametrize("bad", list(BAD_STREAMS), ids=list(BAD_STREAMS))
async def test_bad_frame_closes_only_that_connection(
    make_server: ServerFactory, clients: list[Connection], bad: str
) -> None:
    server, port = await make_server()
    good = await open_client(port, clients)
    assert (await good.request(RemotingCommand.request(ECHO), timeout=10)).code == 0
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(BAD_STREAMS[bad])
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 10) == b""  # closed by the server, nothing sent
    finally:
        writer.close()
        await writer.wait_closed()
    after = await good.request(RemotingCommand.request(ECHO, {"after": bad}), timeout=10)
    assert after.ext_fields["after"] == bad
    assert len(server.connections) == 1  # the bad one is gone, the good one stays


async def test_configured_frame_limit_closes_the_connection(
    make_server: ServerFactory, clients: list[Connection]
) -> None:
    _, port = await make_server(max_frame_size=1024)
    conn = await open_client(port, clients)
    small = await conn.request(RemotingCommand.request(ECHO, body=b"x" * 900), timeout=10)
    assert small.body == b"x" * 900
    with pytest.raises(ConnectionClosedError):
        await conn.request(RemotingCommand.request(ECHO, body=b"x" * 1100), timeout=10)
    await conn.wait_closed()
    assert conn.closed


async def test_client_closes_on_a_malformed_server_frame(
    make_server: ServerFactory, clients: list[Connection]
) -> None:
    def garbage(conn: Connection, cmd: RemotingCommand) -> None:
        conn.write(frame(b"not json"))

    _, port = await make_server({ECHO: garbage})
    conn = await open_client(port, clients)
    with pytest.raises(ConnectionClosedError, match="protocol error: invalid JSON header"):
        await conn.request(RemotingCommand.request(ECHO), timeout=10)


# -- serialization mirroring ------------------------------------------------------------------------


@pytest.mark.parametrize("serialize_type", list(SerializeType), ids=[t.name for t in SerializeType])
async def test_every_response_in_the_requests_serialization(
    make_server: ServerFactory, serialize_type: SerializeType
) -> None:
    _, port = await make_server()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    codes = [ECHO, SLOW_ECHO, 9999, BOOM, ASYNC_BOOM, NOT_FOUND, FUTURE_ECHO, FUTURE_BOOM]
    try:
        writer.write(
            b"".join(raw_request(code, i, serialize_type=serialize_type) for i, code in enumerate(codes))
        )
        await writer.drain()
        answers = {}
        for _ in codes:
            type_byte, response = await asyncio.wait_for(read_frame(reader), 10)
            answers[response.opaque] = (type_byte, response)
    finally:
        writer.close()
        await writer.wait_closed()
    assert sorted(answers) == list(range(len(codes)))
    for opaque, (type_byte, response) in answers.items():
        assert type_byte == serialize_type, codes[opaque]
        assert response.serialize_type == serialize_type
        assert response.is_response
    assert [answers[i][1].code for i in range(len(codes))] == [0, 0, 3, 1, 1, 17, 0, 1]
    if serialize_type != SerializeType.MSGPACK:
        assert answers[0][1].ext_fields == {"n": "0", "echo": "yes"}
        assert answers[6][1].ext_fields == {"n": "6", "echo": "yes"}


async def test_pipelined_requests_are_answered_in_order(make_server: ServerFactory) -> None:
    _, port = await make_server()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"".join(raw_request(ECHO, i) for i in range(50)))
        await writer.drain()
        decoder = FrameDecoder()
        got: list[RemotingCommand] = []
        while len(got) < 50:
            chunk = await asyncio.wait_for(reader.read(65536), 10)
            assert chunk, "server closed early"
            got.extend(decoder.feed(chunk))
        assert [c.opaque for c in got] == list(range(50))
    finally:
        writer.close()
        await writer.wait_closed()


def test_protocol_error_is_not_a_transport_error() -> None:
    # A bad frame is the peer's fault; callers catch the two separately.
    assert not issubclass(ProtocolError, ConnectionClosedError)


async def test_drain_waits_while_paused_and_fails_when_closed(
    make_server: ServerFactory, clients: list[Connection]
) -> None:
    server, port = await make_server()
    assert server.ports == [port]
    conn = await open_client(port, clients)
    await asyncio.wait_for(conn.drain(), 10)  # not paused: returns at once
    conn.pause_writing()  # what the transport calls above its high-water mark
    waiter = asyncio.ensure_future(conn.drain())
    await asyncio.sleep(0)
    assert not waiter.done()
    conn.resume_writing()
    await asyncio.wait_for(waiter, 10)
    conn.pause_writing()
    waiter = asyncio.ensure_future(conn.drain())
    await asyncio.sleep(0)
    conn.abort()
    with pytest.raises(ConnectionClosedError):
        await asyncio.wait_for(waiter, 10)
    late: list[Connection] = []
    conn.add_close_callback(late.append)  # already closed: called at once
    assert late == [conn]


async def test_frame_split_across_writes(make_server: ServerFactory) -> None:
    _, port = await make_server()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        data = RemotingCommand(ECHO, opaque=5, body=b"z" * 100_000).encode()
        writer.write(data[:6])
        await writer.drain()
        writer.write(data[6:50_000])
        await writer.drain()
        writer.write(data[50_000:])
        _, response = await asyncio.wait_for(read_frame(reader), 10)
        assert response.opaque == 5 and response.body == b"z" * 100_000
    finally:
        writer.close()
        await writer.wait_closed()


async def test_graceful_close_by_a_handler_delivers_answers_owed_before_it(
    make_server: ServerFactory,
) -> None:
    def close(conn: Connection, cmd: RemotingCommand) -> None:
        conn.close("handler asked")

    _, port = await make_server({**HANDLERS, STALL: close})
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        # One write, so the server reads all three together and batches its answers.
        writer.write(raw_request(ECHO, 1) + raw_request(STALL, 2) + raw_request(ECHO, 3))
        await writer.drain()
        _, first = await asyncio.wait_for(read_frame(reader), 10)
        assert first.opaque == 1
        assert await asyncio.wait_for(reader.read(), 10) == b""  # nothing for 3: the connection closed
    finally:
        writer.close()
        await writer.wait_closed()


async def test_requests_before_a_bad_frame_in_the_same_read_are_answered(
    make_server: ServerFactory, clients: list[Connection]
) -> None:
    server, port = await make_server()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    request = RemotingCommand.request(ECHO, {"n": "1"})
    request.opaque = 77
    try:
        writer.write(request.encode() + struct.pack(">iI", 8, (7 << 24) | 4) + b"xxxx")
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 10)  # read to EOF: the server closes after answering
    finally:
        writer.close()
        await writer.wait_closed()
    (answer,) = FrameDecoder().feed(data)
    assert answer.is_response and answer.opaque == 77 and answer.ext_fields["n"] == "1"
    assert not server.connections


class CountingTransport:
    """The server connection's real transport, with its writes recorded."""

    def __init__(self, inner: asyncio.Transport) -> None:
        self.inner = inner
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self.inner.write(data)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


async def test_answers_given_in_one_later_turn_go_out_in_one_write_and_before_a_close(
    make_server: ServerFactory,
) -> None:
    def answer_later_then_close(conn: Connection, cmd: RemotingCommand) -> None:
        def settle() -> None:
            conn._reply(cmd, echo(conn, cmd))
            conn.close("handler asked")

        asyncio.get_running_loop().call_soon(settle)

    server, port = await make_server({**HANDLERS, STALL: answer_later_then_close})
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw_request(ECHO, 1))
        assert (await asyncio.wait_for(read_frame(reader), 10))[1].opaque == 1
        (conn,) = server.connections
        spy = CountingTransport(conn._transport)  # type: ignore[arg-type]
        conn._transport = spy  # type: ignore[assignment]
        # One read of 20 requests whose answers all come on the loop's next turn (a group
        # commit releasing its writers): one write carries them, in order.
        writer.write(b"".join(raw_request(FUTURE_ECHO, i) for i in range(2, 22)))
        answers = [(await asyncio.wait_for(read_frame(reader), 10))[1].opaque for _ in range(20)]
        assert answers == list(range(2, 22))
        assert len(spy.writes) == 1
        # An answer written just before a close in the same turn still goes out first.
        writer.write(raw_request(STALL, 30))
        assert (await asyncio.wait_for(read_frame(reader), 10))[1].opaque == 30
        assert await asyncio.wait_for(reader.read(), 10) == b""
    finally:
        writer.close()
        await writer.wait_closed()


async def test_answers_released_between_requests_go_out_before_the_rest_of_the_read(
    make_server: ServerFactory,
) -> None:
    # A SYNC_FLUSH broker's hook: after each request of a read, the server asks whether
    # answers were released meanwhile (a group-commit round that ended); those go out at once.
    events: list[str] = []
    held: list[tuple[Connection, RemotingCommand]] = []

    def hold(conn: Connection, cmd: RemotingCommand) -> None:
        events.append(f"h{cmd.opaque}")
        held.append((conn, cmd))

    def release() -> bool:
        if len(held) < 5:
            return False
        for conn, cmd in held:
            conn._reply(cmd, echo(conn, cmd))
        held.clear()
        events.append("released")
        return True

    server, port = await make_server({**HANDLERS, STALL: hold})
    server.between_requests = release
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw_request(ECHO, 1))
        assert (await asyncio.wait_for(read_frame(reader), 10))[1].opaque == 1
        (conn,) = server.connections
        assert conn.between_requests is release
        spy = CountingTransport(conn._transport)  # type: ignore[arg-type]
        conn._transport = spy  # type: ignore[assignment]
        original = spy.write

        def write(data: bytes) -> None:
            events.append("write")
            original(data)

        spy.write = write  # type: ignore[method-assign]
        writer.write(b"".join(raw_request(STALL, i) for i in range(2, 22)))
        answers = [(await asyncio.wait_for(read_frame(reader), 10))[1].opaque for _ in range(20)]
        assert answers == list(range(2, 22))
        # Each release is written before the next request of the read is handled.
        releases = [i for i, event in enumerate(events) if event == "released"]
        assert len(releases) == 4
        assert all(events[i + 1] == "write" for i in releases), events
        assert len(spy.writes) == 4
    finally:
        writer.close()
        await writer.wait_closed()
