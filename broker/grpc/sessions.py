"""The 5.x clients the gRPC endpoint knows, by client id: the settings each announced on its
telemetry stream, that stream (the only way the broker can reach a 5.x client), and the
remoting-shaped channel that makes the client a member of its producer or consumer group in
the broker's client registry.

That channel is how the rest of the broker talks to a 5.x client without knowing about gRPC:
a transaction check the broker sends a producer group (CHECK_TRANSACTION_STATE) goes out on
the client's telemetry stream as a RecoverOrphanedTransactionCommand.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from dataclasses import dataclass, field

from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import ConnectionClosedError, ProtocolError
from aiorocketmq.protocol.headers import CheckTransactionStateRequestHeader
from aiorocketmq.protocol.message import MessageExt, decode_record
from aiorocketmq.protocol.transport import Connection

from . import messaging_pb2 as pb
from .convert import to_message

log = logging.getLogger(__name__)


class TelemetryStream:
    """The server → client half of one telemetry stream: commands queued for the writer, and
    the replies the broker awaits (a stack trace, a verification) by nonce."""

    def __init__(self) -> None:
        self.out: asyncio.Queue[pb.TelemetryCommand | BaseException | None] = asyncio.Queue()
        self.waiting: dict[str, asyncio.Future[pb.TelemetryCommand]] = {}
        self.closed = False

    def send(self, command: pb.TelemetryCommand) -> None:
        if not self.closed:
            self.out.put_nowait(command)

    def close(self, error: BaseException | None = None) -> None:
        if not self.closed:
            self.closed = True
            self.out.put_nowait(error)
        for waiter in self.waiting.values():
            if not waiter.done():
                waiter.cancel()
        self.waiting.clear()


class GrpcChannel(Connection):
    """A 5.x client as the client registry sees it: a connection with the client's address
    that never carries remoting frames. Requests the broker sends it are translated onto the
    client's telemetry stream: a transaction check, a running-info query (answered with the
    client's thread dump) and a direct consumption (a message verification); the rest
    (rebalance notices: 5.x clients do not rebalance) are dropped."""

    def __init__(self, session: Session) -> None:
        super().__init__(name=f"grpc {session.client_id}")
        self.session = session
        self.peer = session.peer
        #: Answers awaited from handlers that answer later (:meth:`send_response`), by opaque.
        self._answers: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._answer_ids = itertools.count(1)

    def expect_answer(self, cmd: RemotingCommand) -> asyncio.Future[RemotingCommand]:
        """Before a remoting handler runs ``cmd`` for this client: the future of the answer it
        may give later with :meth:`send_response` instead of returning it (a send under
        SYNC_FLUSH is answered by the flush that covers it). Numbers ``cmd`` to match the
        answer; :meth:`forget_answer` once the call is over."""
        cmd.opaque = next(self._answer_ids) & 0x7FFFFFFF
        answer: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._answers[cmd.opaque] = answer
        return answer

    def forget_answer(self, cmd: RemotingCommand) -> None:
        self._answers.pop(cmd.opaque, None)

    def send_response(self, response: RemotingCommand) -> None:
        # No frames ever go to a 5.x client: an answer is handed to the call awaiting it.
        answer = self._answers.pop(response.opaque, None)
        if answer is not None and not answer.done():
            answer.set_result(response)

    def send_oneway(self, cmd: RemotingCommand) -> None:
        if cmd.code == RequestCode.CHECK_TRANSACTION_STATE:
            self.session.recover_transaction(cmd)

    def request(self, cmd: RemotingCommand, timeout: float = 3.0) -> asyncio.Future[RemotingCommand]:
        return asyncio.ensure_future(self._answer(cmd, timeout))

    async def _answer(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        session = self.session
        try:
            if cmd.code == RequestCode.GET_CONSUMER_RUNNING_INFO:
                stack = await session.print_thread_stack_trace(timeout)
                info = {
                    "properties": {"PROP_CLIENT_VERSION": session.version, "PROP_LANGUAGE": session.language},
                    "subscriptionSet": [],
                    "mqTable": {},
                    "statusTable": {},
                    "jstack": stack,
                }
                return cmd.response(body=json.dumps(info).encode())
            if cmd.code == RequestCode.CONSUME_MESSAGE_DIRECTLY:
                msg, _ = decode_record(cmd.body, decompress=False)
                started = time.monotonic()
                verdict = await session.verify_message(to_message(msg), timeout)
                result = {
                    "order": False,
                    "autoCommit": True,
                    "consumeResult": "CR_SUCCESS" if verdict.code == pb.OK else "CR_THROW_EXCEPTION",
                    "remark": verdict.message,
                    "spentTimeMills": int((time.monotonic() - started) * 1000),
                }
                return cmd.response(body=json.dumps(result).encode())
        except (ConnectionError, TimeoutError, ProtocolError, ValueError) as exc:
            raise ConnectionClosedError(f"5.x client {session.client_id}: {exc}") from None
        return cmd.response(
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"a 5.x client does not answer {cmd.code}"
        )

    def close(self, reason: str | None = None) -> None:
        if self.close_reason is None:
            self.close_reason = reason or "closed locally"
        self.closed = True
        answers, self._answers = self._answers, {}
        for answer in answers.values():
            if not answer.done():
                answer.set_exception(ConnectionClosedError(f"5.x client session closed: {self.close_reason}"))

    def abort(self) -> None:
        self.close("aborted")


@dataclass(eq=False)
class Session:
    """One 5.x client, by its ``x-mq-client-id``."""

    client_id: str
    peer: tuple[str, int]
    language: str = ""
    version: str = ""
    #: What the client announced (client type, publishing topics or subscription).
    settings: pb.Settings | None = None
    stream: TelemetryStream | None = None
    last_seen: float = field(default_factory=time.monotonic)
    #: Called with each transaction check forwarded to this client (the service remembers
    #: the half message so the EndTransaction that answers it can be applied).
    channel: GrpcChannel = field(init=False)
    _nonces: itertools.count[int] = field(default_factory=itertools.count, init=False)

    def __post_init__(self) -> None:
        self.channel = GrpcChannel(self)

    @property
    def client_type(self) -> int:
        return self.settings.client_type if self.settings is not None else pb.CLIENT_TYPE_UNSPECIFIED

    @property
    def publishing_topics(self) -> list[str]:
        if self.settings is None or not self.settings.HasField("publishing"):
            return []
        return [t.name for t in self.settings.publishing.topics]

    def recover_transaction(self, cmd: RemotingCommand) -> None:
        """A CHECK_TRANSACTION_STATE for this producer: ask it on its telemetry stream."""
        try:
            header = CheckTransactionStateRequestHeader.from_fields(cmd.ext_fields)
            msg, _ = decode_record(cmd.body, decompress=False)
        except (ProtocolError, ValueError) as exc:
            log.warning("cannot forward a transaction check to %s: %s", self.client_id, exc)
            return
        self.recover(header, msg)

    def recover(self, header: CheckTransactionStateRequestHeader, msg: MessageExt) -> None:
        """Ask the producer about the half message ``msg`` (a RecoverOrphanedTransactionCommand)."""
        stream = self.stream
        if stream is None or stream.closed:
            return
        transaction_id = header.transaction_id or header.msg_id or ""
        message = to_message(msg, topic=msg.topic)
        stream.send(
            pb.TelemetryCommand(
                recover_orphaned_transaction_command=pb.RecoverOrphanedTransactionCommand(
                    message=message, transaction_id=transaction_id
                )
            )
        )

    async def ask(self, command: pb.TelemetryCommand, nonce: str, timeout: float) -> pb.TelemetryCommand:
        """Send a command that the client answers with the same nonce; its answer."""
        stream = self.stream
        if stream is None or stream.closed:
            raise ConnectionError(f"client {self.client_id} has no telemetry stream")
        waiter: asyncio.Future[pb.TelemetryCommand] = asyncio.get_running_loop().create_future()
        stream.waiting[nonce] = waiter
        stream.send(command)
        try:
            return await asyncio.wait_for(waiter, timeout)
        finally:
            stream.waiting.pop(nonce, None)

    async def print_thread_stack_trace(self, timeout: float = 3.0) -> str:
        """The client's thread dump (the 5.x form of GET_CONSUMER_RUNNING_INFO's jstack)."""
        nonce = f"{self.client_id}-{next(self._nonces)}"
        reply = await self.ask(
            pb.TelemetryCommand(
                print_thread_stack_trace_command=pb.PrintThreadStackTraceCommand(nonce=nonce)
            ),
            nonce,
            timeout,
        )
        return reply.thread_stack_trace.thread_stack_trace

    async def verify_message(self, message: pb.Message, timeout: float = 3.0) -> pb.Status:
        """Have the client consume ``message`` directly (CONSUME_MESSAGE_DIRECTLY); its verdict."""
        nonce = f"{self.client_id}-{next(self._nonces)}"
        reply = await self.ask(
            pb.TelemetryCommand(verify_message_command=pb.VerifyMessageCommand(nonce=nonce, message=message)),
            nonce,
            timeout,
        )
        return reply.status

    def answered(self, command: pb.TelemetryCommand) -> bool:
        """Resolve the waiter a client's answer (a stack trace, a verification) belongs to."""
        kind = command.WhichOneof("command")
        if kind == "thread_stack_trace":
            nonce = command.thread_stack_trace.nonce
        elif kind == "verify_message_result":
            nonce = command.verify_message_result.nonce
        else:
            return False
        stream = self.stream
        waiter = stream.waiting.get(nonce) if stream is not None else None
        if waiter is not None and not waiter.done():
            waiter.set_result(command)
        return True
