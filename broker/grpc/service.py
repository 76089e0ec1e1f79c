"""``apache.rocketmq.v2.MessagingService``: the RPCs of the 5.x clients, answered from the
broker's own parts, the way Apache's proxy does in its "local" mode.

The servicer is one class per family of RPCs (:mod:`.front` says what they share): sends and
transaction decisions in :mod:`.publish`, POP consumption in :mod:`.consume`, a client's
sessions in :mod:`.lifecycle` (QueryRoute, Telemetry, Heartbeat), pulls and offsets in
:mod:`.pull`; :mod:`.local` answers what they ask of the broker (the Acceptor, the transaction
service, the POP service, the store, the offset table, the broker's one registry of waiting
consumers, routes over the cluster). Every RPC completes with gRPC OK and carries its result
in its ``status`` (the 5.x convention); only a broken telemetry stream fails the call itself.
"""

from __future__ import annotations

from .consume import ConsumptionRpcs
from .lifecycle import SessionRpcs
from .local import LocalFront
from .publish import PublishingRpcs, consistent_queue
from .pull import PullRpcs

__all__ = ["MessagingService", "consistent_queue"]


class MessagingService(PublishingRpcs, ConsumptionRpcs, PullRpcs, SessionRpcs, LocalFront):
    """The servicer: one per broker (the RPC families' classes, module doc)."""

    async def stop(self) -> None:
        await self.routes.close()
        await super().stop()
