"""Routes and assignments for 5.x clients that cover the whole cluster, as Apache's proxy
answers them in its local mode (the proxy embedded in each broker).

A 5.x client learns a topic's queues from one endpoint and then talks to each queue's broker
at the endpoint the route names. So a broker's route answer lists every broker of the topic
that the name servers know, each at its own gRPC endpoint: a client connected to broker-a
spreads its sends over broker-a and broker-b and receives what both hold, and when one dies
it carries on with the other.

Apache's local-mode proxy takes each broker's remoting host and puts its own
``grpcServerPort`` beside it, assuming every broker listens for gRPC on the same port (true for
one broker per host). We ask each peer instead (``GET_BROKER_CONFIG``, the key
``grpcServerPort``; the listing reports the port actually bound), so that two brokers on one
host work too; a peer that does not list the key (Apache's brokers, whose proxy keeps the port
in ``rmq-proxy.json``) is given our port, Apache's assumption, and a peer that says
``enableGrpcServer=false`` is left out (its queues are unreachable for 5.x clients).

Name-server routes are kept for :data:`ROUTE_TTL` seconds and peers' ports for
:data:`PORT_TTL` (refreshed in the background after that); when no name server answers,
the broker's own queues are the route, as before the cluster was known.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from aiorocketmq.protocol.body import QueueData, TopicRouteData
from aiorocketmq.protocol.codes import Perm, RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.settings import read_properties
from aiorocketmq.protocol.transport import Connection, Signer, connect

from . import messaging_pb2 as pb

log = logging.getLogger(__name__)

ROUTE_TTL = 3.0
PORT_TTL = 30.0
PEER_TIMEOUT = 3.0
MASTER_ID = 0
_READ = int(Perm.READ)
_WRITE = int(Perm.WRITE)

RouteSource = Callable[[str], Awaitable[TopicRouteData | None]]


@dataclass(frozen=True)
class RoutedBroker:
    """One broker of a topic's route, as a 5.x client is told to reach it."""

    name: str
    id: int
    endpoints: pb.Endpoints
    queues: QueueData


def endpoints_of(host: str, port: int) -> pb.Endpoints:
    """``host:port`` as a 5.x ``Endpoints`` (IPv4, IPv6 or a domain name)."""
    scheme = pb.IPv4
    if ":" in host:
        scheme = pb.IPv6
    elif not host.replace(".", "").isdigit():
        scheme = pb.DOMAIN_NAME
    return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=port)])


def permission(perm: int) -> pb.Permission:
    readable, writable = bool(perm & _READ), bool(perm & _WRITE)
    if readable and writable:
        return pb.READ_WRITE
    if readable:
        return pb.READ
    return pb.WRITE if writable else pb.NONE


def queue_permissions(perm: int, reads: int, writes: int) -> list[pb.Permission]:
    """Each queue id's permission in a route, in Apache's order: the read-only queues first,
    then the write-only ones, then those both readable and writable; a broker whose topic is
    neither readable nor writable still shows its queues, as NONE."""
    readable, writable = bool(perm & _READ), bool(perm & _WRITE)
    if readable and writable:
        both = min(reads, writes)
        return [pb.READ] * (reads - both) + [pb.WRITE] * (writes - both) + [pb.READ_WRITE] * both
    if writable:
        return [pb.WRITE] * writes
    if readable:
        return [pb.READ] * reads
    return [pb.NONE] * max(1, reads, writes)


def message_queues(
    topic: str, brokers: Iterable[RoutedBroker], accepted: Sequence[pb.MessageType]
) -> list[pb.MessageQueue]:
    """A QueryRoute answer's queues: every queue of every broker (slaves included, as Apache
    lists them; clients send to masters only).

    The brokers' queues are interleaved (a0, b0, a1, b1, ...) where Apache lists one broker's
    after the other's. Clients that retry a failed send on the next queue of the list (the
    Python 5.x client does, without setting the failed endpoint aside) then retry on another
    broker: with a dead broker's queues in a row, three attempts could all hit it.
    """
    resource = pb.Resource(name=topic)
    per_broker: list[list[pb.MessageQueue]] = []
    for broker in brokers:
        target = pb.Broker(name=broker.name, id=broker.id, endpoints=broker.endpoints)
        data = broker.queues
        kinds = queue_permissions(data.perm, data.read_queue_nums, data.write_queue_nums)
        per_broker.append(
            [
                pb.MessageQueue(
                    topic=resource, id=i, permission=kind, broker=target, accept_message_types=accepted
                )
                for i, kind in enumerate(kinds)
            ]
        )
    return [queue for row in itertools.zip_longest(*per_broker) for queue in row if queue is not None]


def assignments(
    topic: str, brokers: Iterable[RoutedBroker], *, fifo: bool, accepted: Sequence[pb.MessageType]
) -> list[pb.Assignment]:
    """A QueryAssignment answer: each master with readable queues is one assignment (queue
    -1: a receive pops from any of its queues), or, for a FIFO group, one per queue so each is
    received in order."""
    resource = pb.Resource(name=topic)
    result: list[pb.Assignment] = []
    for broker in brokers:
        data = broker.queues
        if broker.id != MASTER_ID or not data.perm & _READ or data.read_queue_nums <= 0:
            continue
        target = pb.Broker(name=broker.name, id=broker.id, endpoints=broker.endpoints)
        ids = range(data.read_queue_nums) if fifo else [-1]
        result.extend(
            pb.Assignment(
                message_queue=pb.MessageQueue(
                    topic=resource,
                    id=i,
                    permission=permission(data.perm),
                    broker=target,
                    accept_message_types=accepted,
                )
            )
            for i in ids
        )
    return result


class ClusterRoutes:
    """The brokers of a topic's route, each at its gRPC endpoint (module doc)."""

    def __init__(
        self,
        broker_name: str,
        broker_id: int,
        *,
        route: RouteSource | None,
        signer: Signer | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.broker_name = broker_name
        self.broker_id = broker_id
        self._route = route
        self._signer = signer
        self._clock = clock
        #: This broker's own endpoint and gRPC port (set when the listener is bound).
        self.endpoints = pb.Endpoints()
        self.port = 0
        self._routes: dict[str, tuple[float, TopicRouteData | None]] = {}
        #: Remoting address -> (when learnt, gRPC port or None for "no gRPC there").
        self._ports: dict[str, tuple[float, int | None]] = {}
        self._refreshing: dict[str, asyncio.Task[int | None]] = {}
        self._peers: dict[str, Connection] = {}

    def bind(self, host: str, port: int) -> None:
        self.endpoints = endpoints_of(host, port)
        self.port = port

    async def close(self) -> None:
        for task in self._refreshing.values():
            task.cancel()
        for conn in self._peers.values():
            conn.close("broker stopping")
        self._peers.clear()

    async def brokers(self, topic: str, local: QueueData | None) -> list[RoutedBroker]:
        """The topic's brokers: the name servers' route with this broker's own queues as it
        knows them now (``local``; None: it has no such topic); only ``local`` when no name
        server knows the topic or none answers."""
        route = await self._cluster_route(topic)
        own = (self.broker_name, self.broker_id)
        result: list[RoutedBroker] = []
        if route is not None:
            by_name = {data.broker_name: data for data in route.broker_datas}
            lookups: list[tuple[str, int, QueueData, Awaitable[int | None]]] = []
            for queues in route.queue_datas:
                data = by_name.get(queues.broker_name)
                if data is None or queues.broker_name == self.broker_name:
                    continue
                for broker_id, address in sorted(data.broker_addrs.items()):
                    lookups.append((queues.broker_name, broker_id, queues, self._grpc_port(address)))
            ports = await asyncio.gather(*(lookup[3] for lookup in lookups))
            for (name, broker_id, queues, _), port in zip(lookups, ports, strict=True):
                address = by_name[name].broker_addrs[broker_id]
                if port is not None:
                    result.append(RoutedBroker(name, broker_id, endpoints_of(_host(address), port), queues))
            # This broker's peers in its own group (its master or slaves) as the route names them.
            mine = by_name.get(self.broker_name)
            if mine is not None and local is not None:
                for broker_id, address in sorted(mine.broker_addrs.items()):
                    if (self.broker_name, broker_id) == own:
                        continue
                    port = await self._grpc_port(address)
                    if port is not None:
                        result.append(
                            RoutedBroker(
                                self.broker_name, broker_id, endpoints_of(_host(address), port), local
                            )
                        )
        if local is not None:
            result.append(RoutedBroker(self.broker_name, self.broker_id, self.endpoints, local))
        result.sort(key=lambda broker: (broker.name, broker.id))
        return result

    async def _cluster_route(self, topic: str) -> TopicRouteData | None:
        if self._route is None:
            return None
        now = self._clock()
        cached = self._routes.get(topic)
        if cached is not None and now - cached[0] < ROUTE_TTL:
            return cached[1]
        try:
            route = await self._route(topic)
        except (MQError, OSError, ValueError) as exc:
            log.warning("cannot learn the route of %s from the name servers: %s", topic, exc)
            route = None
        if len(self._routes) > 10_000:
            self._routes.clear()
        self._routes[topic] = (now, route)
        return route

    async def _grpc_port(self, address: str) -> int | None:
        """The gRPC port of the broker at remoting ``address``; None when it serves none."""
        known = self._ports.get(address)
        if known is None:
            return await self._learn_port(address)
        if self._clock() - known[0] >= PORT_TTL and address not in self._refreshing:
            task = asyncio.ensure_future(self._learn_port(address))
            self._refreshing[address] = task
            task.add_done_callback(lambda _: self._refreshing.pop(address, None))
        return known[1]

    async def _learn_port(self, address: str) -> int | None:
        try:
            listing = await self._broker_config(address)
        except (MQError, OSError, ValueError) as exc:
            known = self._ports.get(address)
            log.debug("cannot ask broker %s for its gRPC port: %s", address, exc)
            # A peer that cannot be asked keeps what it said last, or is taken to listen where
            # this broker does (Apache's local-mode assumption).
            return known[1] if known is not None else self.port
        port: int | None = self.port
        if listing.get("enableGrpcServer", "true").strip().lower() == "false":
            port = None
        else:
            with contextlib.suppress(ValueError):
                listed = int(listing.get("grpcServerPort", ""))
                if listed > 0:
                    port = listed
        self._ports[address] = (self._clock(), port)
        return port

    async def _broker_config(self, address: str) -> dict[str, str]:
        conn = self._peers.get(address)
        if conn is None or conn.closed:
            host, _, port = address.rpartition(":")
            conn = await connect(
                host, int(port), name=f"gRPC route peer {address}", timeout=PEER_TIMEOUT, signer=self._signer
            )
            self._peers[address] = conn
        response = await conn.request(RemotingCommand.request(RequestCode.GET_BROKER_CONFIG), PEER_TIMEOUT)
        if response.code != ResponseCode.SUCCESS:
            raise ValueError(f"GET_BROKER_CONFIG answered {response.code}: {response.remark}")
        return read_properties((response.body or b"").decode(errors="replace"))


def _host(address: str) -> str:
    return address.rpartition(":")[0]
