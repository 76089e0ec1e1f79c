"""The proxy's 5.x servicer: the same RPC families as the broker's own endpoint
(:mod:`aiorocketmq.broker.grpc`), answered over remoting by :class:`~.cluster.ClusterFront`.

Routes and assignments name the proxy itself for every broker (the endpoints the client
reached it by, as Apache's proxy answers in cluster mode), so a client behind a load balancer
keeps going through it; the queues keep their brokers' names, which the proxy reads back from
a receive's queue and from receipt handles."""

from __future__ import annotations

from typing import Any

from aiorocketmq.broker.grpc import messaging_pb2 as pb
from aiorocketmq.broker.grpc.consume import ConsumptionRpcs
from aiorocketmq.broker.grpc.lifecycle import SessionRpcs
from aiorocketmq.broker.grpc.publish import PublishingRpcs

from .cluster import ClusterFront


class ProxyService(PublishingRpcs, ConsumptionRpcs, SessionRpcs, ClusterFront):
    """``apache.rocketmq.v2.MessagingService`` in cluster mode (module doc)."""

    async def QueryRoute(self, request: pb.QueryRouteRequest, context: Any) -> pb.QueryRouteResponse:
        with self._reached_by(request.endpoints):
            return await super().QueryRoute(request, context)

    async def QueryAssignment(
        self, request: pb.QueryAssignmentRequest, context: Any
    ) -> pb.QueryAssignmentResponse:
        with self._reached_by(request.endpoints):
            return await super().QueryAssignment(request, context)
