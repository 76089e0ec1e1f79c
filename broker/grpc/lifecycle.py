"""The 5.x RPCs of a client's life: QueryRoute, the Telemetry stream (its settings, and the
commands the server sends it), Heartbeat and NotifyClientTermination; the sessions the front
keeps by client id, and what a client leaving hands back (its auto-renewed messages)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from aiorocketmq.protocol.body import ConsumerData, ConsumeType, SubscriptionData
from aiorocketmq.protocol.message import tags_code

from . import messaging_pb2 as pb
from .convert import OK, Code, duration, now_ms
from .front import (
    ABANDONED_INVISIBLE_MS,
    CONSUMER_BACKOFF_SECONDS,
    LONG_POLLING_TIMEOUT,
    PRODUCER_BACKOFF,
    RECEIVE_BATCH_SIZE,
    Front,
    GroupPolicy,
    Renewal,
    RpcError,
)
from .routes import message_queues
from .sessions import Session, TelemetryStream

log = logging.getLogger(__name__)


class SessionRpcs(Front):
    """QueryRoute, Telemetry, Heartbeat and NotifyClientTermination."""

    # -- QueryRoute -----------------------------------------------------------------------

    async def QueryRoute(self, request: pb.QueryRouteRequest, context: Any) -> pb.QueryRouteResponse:
        try:
            self._authorize(context, {}, request)
            brokers, accepted = await self._cluster(request.topic.name, create=True)
            queues = message_queues(request.topic.name, brokers, accepted)
            return pb.QueryRouteResponse(status=OK, message_queues=queues)
        except RpcError as exc:
            return pb.QueryRouteResponse(status=exc.status)

    # -- Telemetry ------------------------------------------------------------------------

    async def Telemetry(
        self, request_iterator: AsyncIterator[pb.TelemetryCommand], context: Any
    ) -> AsyncIterator[pb.TelemetryCommand]:
        try:
            self._authorize(context, {}, pb.TelemetryCommand())
            session = self._client_id_required(context)
        except RpcError as exc:
            yield pb.TelemetryCommand(status=exc.status)
            return
        stream = TelemetryStream()
        if session.stream is not None:
            session.stream.close()
        session.stream = stream
        reader = asyncio.ensure_future(self._read_telemetry(session, stream, request_iterator, context))
        try:
            while True:
                command = await stream.out.get()
                if command is None:
                    break
                if isinstance(command, BaseException):
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(command))
                    break
                yield command
        finally:
            reader.cancel()
            stream.close()
            if session.stream is stream:
                session.stream = None

    async def _read_telemetry(
        self,
        session: Session,
        stream: TelemetryStream,
        requests: AsyncIterator[pb.TelemetryCommand],
        context: Any = None,
    ) -> None:
        error: BaseException | None = None
        try:
            async for command in requests:
                session.last_seen = time.monotonic()
                kind = command.WhichOneof("command")
                if kind == "settings":
                    if self.auth is not None and context is not None:
                        try:  # ACL 2.0 checks the topics and group a client declares
                            self._authorize(context, {}, command)
                        except RpcError as exc:
                            stream.send(pb.TelemetryCommand(status=exc.status))
                            continue
                    stream.send(
                        pb.TelemetryCommand(
                            status=OK, settings=await self._adopt_settings(session, command.settings)
                        )
                    )
                elif not session.answered(command):
                    raise ValueError(f"unexpected telemetry command {kind!r} from {session.client_id}")
        except asyncio.CancelledError:
            raise
        except (grpc.aio.AioRpcError, grpc.aio.UsageError):
            pass  # the client went away
        except Exception as exc:
            log.info("telemetry stream of %s failed: %s", session.client_id, exc)
            error = exc
        stream.close(error)

    async def _adopt_settings(self, session: Session, settings: pb.Settings) -> pb.Settings:
        """Keep a client's settings and register it; the settings it should use back."""
        session.settings = settings
        merged = pb.Settings()
        merged.CopyFrom(settings)
        if settings.HasField("subscription"):
            group = settings.subscription.group.name
            policy = await self._group(group) if group else GroupPolicy()
            retry_max = policy.retry_max_times
            merged.subscription.fifo = policy.fifo
            merged.subscription.receive_batch_size = RECEIVE_BATCH_SIZE
            if not settings.subscription.HasField("long_polling_timeout"):
                merged.subscription.long_polling_timeout.CopyFrom(duration(LONG_POLLING_TIMEOUT))
            merged.backoff_policy.CopyFrom(
                pb.RetryPolicy(
                    max_attempts=retry_max + 1,
                    customized_backoff=pb.CustomizedBackoff(
                        next=[duration(s) for s in CONSUMER_BACKOFF_SECONDS]
                    ),
                )
            )
        else:
            merged.publishing.max_body_size = self.max_message_size
            merged.publishing.validate_message_type = settings.publishing.validate_message_type
            merged.backoff_policy.CopyFrom(PRODUCER_BACKOFF)
        self._register(session)
        return merged

    # -- Heartbeat / NotifyClientTermination ----------------------------------------------

    async def Heartbeat(self, request: pb.HeartbeatRequest, context: Any) -> pb.HeartbeatResponse:
        try:
            self._authorize(context, {}, request)
            session = self._client_id_required(context)
            if session.settings is None:
                raise RpcError(
                    Code.UNRECOGNIZED_CLIENT_TYPE,
                    f"client {session.client_id} has sent no settings on a telemetry stream yet",
                )
            self._register(session)
            return pb.HeartbeatResponse(status=OK)
        except RpcError as exc:
            return pb.HeartbeatResponse(status=exc.status)

    async def NotifyClientTermination(
        self, request: pb.NotifyClientTerminationRequest, context: Any
    ) -> pb.NotifyClientTerminationResponse:
        try:
            self._authorize(context, {}, request)
            session = self._session(context, create=False)
            if session is None or session.settings is None:
                raise RpcError(Code.UNRECOGNIZED_CLIENT_TYPE, "unknown client")
            self.forget(session)
            return pb.NotifyClientTerminationResponse(status=OK)
        except RpcError as exc:
            return pb.NotifyClientTerminationResponse(status=exc.status)

    def forget(self, session: Session) -> None:
        """Drop a client: its registrations, its stream, its settings; what it was still
        processing under auto-renewal becomes visible again in a second."""
        self.sessions.pop(session.client_id, None)
        for first, renewal in list(self.renewals.items()):
            if renewal.client_id == session.client_id:
                del self.renewals[first]
                task = asyncio.ensure_future(self._abandon(renewal))
                self._abandoning.add(task)
                task.add_done_callback(self._abandoning.discard)
        self._unregister(session)
        session.channel.close("client terminated")
        if session.stream is not None:
            session.stream.close()

    async def _abandon(self, renewal: Renewal) -> None:
        with contextlib.suppress(RpcError):
            await self._change_invisible(
                group=renewal.group,
                topic=renewal.topic,
                receipt_handle=renewal.handle,
                invisible_ms=ABANDONED_INVISIBLE_MS,
            )

    def expire(self, max_idle_seconds: float) -> None:
        """Forget clients silent for ``max_idle_seconds`` (no heartbeat, no stream traffic)."""
        deadline = time.monotonic() - max_idle_seconds
        for session in [s for s in self.sessions.values() if s.last_seen < deadline]:
            log.info("5.x client %s expired", session.client_id)
            self.forget(session)


def consumer_data(session: Session) -> ConsumerData | None:
    """A consumer's settings as the 4.x consumer data brokers keep for its group (None for a
    producer, or a consumer without a group)."""
    settings = session.settings
    if settings is None or not settings.HasField("subscription"):
        return None
    sub = settings.subscription
    if not sub.group.name:
        return None
    return ConsumerData(
        group_name=sub.group.name,
        consume_type=(
            ConsumeType.CONSUME_PASSIVELY
            if settings.client_type == pb.PUSH_CONSUMER
            else ConsumeType.CONSUME_ACTIVELY
        ),
        subscription_data_set=[_subscription(entry) for entry in sub.subscriptions],
    )


def _subscription(entry: pb.SubscriptionEntry) -> SubscriptionData:
    expression = entry.expression.expression or "*"
    if entry.expression.type == pb.SQL:
        return SubscriptionData(topic=entry.topic.name, sub_string=expression, expression_type="SQL92")
    tags = [t.strip() for t in expression.split("||") if t.strip()] if expression != "*" else []
    return SubscriptionData(
        topic=entry.topic.name,
        sub_string=expression,
        tags_set=tags,
        code_set=[tags_code(t) for t in tags],
        sub_version=now_ms(),
    )
