"""``apache.rocketmq.v2.MessagingService``: the RPCs of the 5.x clients, answered from the
broker's own parts, the way Apache's proxy does in its "local" mode.

The servicer is one class per family of RPCs (:mod:`.front` says what they share): sends and
transaction decisions in :mod:`.publish` (through the broker's
:class:`~aiorocketmq.broker.accept.Acceptor` and transaction service, with plain values), POP
consumption in :mod:`.consume` (the POP service), pulls and offsets in :mod:`.pull` (the store,
the offset table and the broker's one registry of waiting consumers), and here QueryRoute
(every broker of the topic, :mod:`.routes`), Telemetry, Heartbeat and the clients' sessions.
Every RPC completes with gRPC OK and carries its result in its ``status`` (the 5.x
convention); only a broken telemetry stream fails the call itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from aiorocketmq.broker.clients import ClientChannel
from aiorocketmq.protocol.body import ConsumerData, ConsumeType, SubscriptionData
from aiorocketmq.protocol.codes import CURRENT_VERSION
from aiorocketmq.protocol.errors import BrokerError
from aiorocketmq.protocol.message import tags_code

from . import messaging_pb2 as pb
from .consume import ConsumptionRpcs
from .convert import OK, Code, duration, now_ms
from .front import (
    ABANDONED_INVISIBLE_MS,
    CONSUMER_BACKOFF_SECONDS,
    LONG_POLLING_TIMEOUT,
    PRODUCER_BACKOFF,
    RECEIVE_BATCH_SIZE,
    Front,
    Renewal,
    RpcError,
)
from .publish import PublishingRpcs, consistent_queue
from .pull import PullRpcs
from .routes import message_queues
from .sessions import Session, TelemetryStream

__all__ = ["MessagingService", "consistent_queue"]

log = logging.getLogger(__name__)


class MessagingService(PublishingRpcs, ConsumptionRpcs, PullRpcs, Front):
    """The servicer: one per broker (the RPC families' classes, module doc)."""

    def start(self) -> None:
        """Begin renewing ``auto_renew`` receipts (once a second)."""
        self._renewing = asyncio.ensure_future(self._renew_periodically())

    async def stop(self) -> None:
        await self.routes.close()
        task, self._renewing = self._renewing, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

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
                            status=OK, settings=self._adopt_settings(session, command.settings)
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

    def _adopt_settings(self, session: Session, settings: pb.Settings) -> pb.Settings:
        """Keep a client's settings and register it; the settings it should use back."""
        session.settings = settings
        merged = pb.Settings()
        merged.CopyFrom(settings)
        if settings.HasField("subscription"):
            group = settings.subscription.group.name
            config = self.groups.find(group) if group else None
            retry_max = config.retry_max_times if config is not None else 16
            merged.subscription.fifo = config is not None and config.consume_message_orderly
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
            merged.publishing.max_body_size = self.store.config.max_message_size
            merged.publishing.validate_message_type = settings.publishing.validate_message_type
            merged.backoff_policy.CopyFrom(PRODUCER_BACKOFF)
        self._register(session)
        return merged

    def _register(self, session: Session) -> None:
        """Make the client a member of its groups (producer group = each topic it publishes
        to, as the proxy names them; transaction checks find producers there)."""
        settings = session.settings
        if settings is None:
            return
        channel = ClientChannel(
            # A current version: the broker's forwarded requests refuse clients older than 3.1.8.
            session.channel,
            session.client_id,
            session.language or "OTHER",
            CURRENT_VERSION,
            last_update=time.monotonic(),
        )
        if settings.HasField("subscription"):
            sub = settings.subscription
            data = ConsumerData(
                group_name=sub.group.name,
                consume_type=(
                    ConsumeType.CONSUME_PASSIVELY
                    if settings.client_type == pb.PUSH_CONSUMER
                    else ConsumeType.CONSUME_ACTIVELY
                ),
                subscription_data_set=[self._subscription(entry) for entry in sub.subscriptions],
            )
            if data.group_name:
                self.clients.register_consumer(channel, data)
        else:
            for topic in session.publishing_topics:
                self.clients.register_producer(channel, topic)

    @staticmethod
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
        self.clients.connection_closed(session.channel)
        session.channel.close("client terminated")
        if session.stream is not None:
            session.stream.close()

    async def _abandon(self, renewal: Renewal) -> None:
        with contextlib.suppress(BrokerError):
            await self.pop.change_invisible(
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
