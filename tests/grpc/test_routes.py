"""Unit tests of broker/grpc/routes.py: how a topic's route and assignments for 5.x clients are
built from the name servers' route and each broker's gRPC port (no processes)."""

from __future__ import annotations

import asyncio

import pytest

from aiorocketmq.broker.grpc import messaging_pb2 as pb
from aiorocketmq.broker.grpc.routes import (
    ROUTE_TTL,
    ClusterRoutes,
    RoutedBroker,
    assignments,
    endpoints_of,
    message_queues,
    queue_permissions,
)
from aiorocketmq.protocol.body import BrokerData, QueueData, TopicRouteData
from aiorocketmq.protocol.errors import ConnectionClosedError

RW, R, W = 6, 4, 2


def queues(name: str, reads: int = 4, writes: int = 4, perm: int = RW) -> QueueData:
    return QueueData(broker_name=name, read_queue_nums=reads, write_queue_nums=writes, perm=perm)


def routed(name: str, port: int, data: QueueData, broker_id: int = 0) -> RoutedBroker:
    return RoutedBroker(name, broker_id, endpoints_of("127.0.0.1", port), data)


@pytest.mark.parametrize(
    ("perm", "reads", "writes", "expected"),
    [
        (RW, 4, 4, [pb.READ_WRITE] * 4),
        # Apache's order: read-only, then write-only, then both.
        (RW, 6, 4, [pb.READ] * 2 + [pb.READ_WRITE] * 4),
        (RW, 2, 5, [pb.WRITE] * 3 + [pb.READ_WRITE] * 2),
        (W, 4, 3, [pb.WRITE] * 3),
        (R, 4, 3, [pb.READ] * 4),
        # Neither: the queues are still listed, as NONE (at least one).
        (0, 4, 3, [pb.NONE] * 4),
        (0, 0, 0, [pb.NONE]),
    ],
)
def test_queue_permissions_follow_apaches_route(
    perm: int, reads: int, writes: int, expected: list[int]
) -> None:
    assert queue_permissions(perm, reads, writes) == expected


def test_a_route_interleaves_the_brokers_and_keeps_each_ones_queue_ids() -> None:
    brokers = [routed("a", 1, queues("a", 3, 3)), routed("b", 2, queues("b", 2, 2))]
    got = [
        (q.broker.name, q.id, q.broker.endpoints.addresses[0].port) for q in message_queues("T", brokers, [])
    ]
    assert got == [("a", 0, 1), ("b", 0, 2), ("a", 1, 1), ("b", 1, 2), ("a", 2, 1)]


def test_a_route_lists_slaves_with_their_id_and_the_accepted_types() -> None:
    brokers = [routed("a", 1, queues("a", 1, 1)), routed("a", 3, queues("a", 1, 1), broker_id=1)]
    got = message_queues("T", brokers, [pb.FIFO])
    assert [(q.broker.id, list(q.accept_message_types), q.topic.name) for q in got] == [
        (0, [pb.FIFO], "T"),
        (1, [pb.FIFO], "T"),
    ]


def test_assignments_take_readable_masters_whole_or_per_queue_for_fifo() -> None:
    brokers = [
        routed("a", 1, queues("a", 2, 2)),
        routed("a", 3, queues("a", 2, 2), broker_id=1),
        routed("b", 2, queues("b", 3, 3, perm=W)),
        routed("c", 4, queues("c", 0, 2)),
        routed("d", 5, queues("d", 2, 0, perm=R)),
    ]
    plain = assignments("T", brokers, fifo=False, accepted=[])
    assert [(a.message_queue.broker.name, a.message_queue.id, a.message_queue.permission) for a in plain] == [
        ("a", -1, pb.READ_WRITE),
        ("d", -1, pb.READ),
    ]
    fifo = assignments("T", brokers, fifo=True, accepted=[])
    assert [(a.message_queue.broker.name, a.message_queue.id) for a in fifo] == [
        ("a", 0),
        ("a", 1),
        ("d", 0),
        ("d", 1),
    ]


class Peers(ClusterRoutes):
    """ClusterRoutes whose peers answer GET_BROKER_CONFIG from a table instead of the network
    (address -> listing, or an exception)."""

    def __init__(self, listings: dict[str, dict[str, str] | Exception], route: TopicRouteData | None) -> None:
        self.now = 1000.0
        self.asked: list[str] = []
        self.routes_asked = 0

        async def source(topic: str) -> TopicRouteData | None:
            self.routes_asked += 1
            return route

        super().__init__("a", 0, route=source, clock=lambda: self.now)
        self.listings = listings
        self.bind("10.0.0.1", 8081)

    async def _broker_config(self, address: str) -> dict[str, str]:
        self.asked.append(address)
        listing = self.listings[address]
        if isinstance(listing, Exception):
            raise listing
        return listing


def cluster_route(*groups: tuple[str, dict[int, str]]) -> TopicRouteData:
    return TopicRouteData(
        queue_datas=[queues(name) for name, _ in groups],
        broker_datas=[
            BrokerData(cluster="c", broker_name=name, broker_addrs=addrs) for name, addrs in groups
        ],
    )


def summary(brokers: list[RoutedBroker]) -> list[tuple[str, int, str, int]]:
    return [(b.name, b.id, b.endpoints.addresses[0].host, b.endpoints.addresses[0].port) for b in brokers]


async def test_peers_are_routed_at_the_grpc_port_they_list() -> None:
    route = cluster_route(
        ("a", {0: "10.0.0.1:10911"}),
        ("b", {0: "10.0.0.2:10911", 1: "10.0.0.3:10911"}),
        ("c", {0: "10.0.0.4:10911"}),
        ("d", {0: "10.0.0.5:10911"}),
        ("e", {0: "10.0.0.6:10911"}),
    )
    peers = Peers(
        {
            "10.0.0.2:10911": {"grpcServerPort": "9001", "enableGrpcServer": "true"},
            "10.0.0.3:10911": {"grpcServerPort": "9002"},
            # Apache's broker lists no gRPC port: ours is assumed, as Apache's proxy does.
            "10.0.0.4:10911": {"brokerName": "c"},
            # A broker without gRPC is left out: its queues are unreachable for 5.x clients.
            "10.0.0.5:10911": {"grpcServerPort": "9005", "enableGrpcServer": "false"},
            # One that cannot be asked is taken to listen where we do.
            "10.0.0.6:10911": ConnectionClosedError("refused"),
        },
        route,
    )
    got = await peers.brokers("T", queues("a", 2, 2))
    assert summary(got) == [
        ("a", 0, "10.0.0.1", 8081),
        ("b", 0, "10.0.0.2", 9001),
        ("b", 1, "10.0.0.3", 9002),
        ("c", 0, "10.0.0.4", 8081),
        ("e", 0, "10.0.0.6", 8081),
    ]
    # This broker's own queues are what it knows now, not the name server's.
    assert got[0].queues.read_queue_nums == 2
    assert got[1].queues.read_queue_nums == 4


async def test_the_own_group_lists_its_other_members_with_the_local_queues() -> None:
    peers = Peers(
        {"10.0.0.9:10911": {"grpcServerPort": "9009"}}, cluster_route(("a", {0: "x:1", 1: "10.0.0.9:10911"}))
    )
    got = await peers.brokers("T", queues("a", 2, 2))
    assert summary(got) == [("a", 0, "10.0.0.1", 8081), ("a", 1, "10.0.0.9", 9009)]
    assert got[1].queues.read_queue_nums == 2
    # Without the topic here, the own group is not listed from the name server's data.
    assert await peers.brokers("T", None) == []


async def test_without_a_name_server_route_the_own_queues_are_the_route() -> None:
    peers = Peers({}, None)
    assert summary(await peers.brokers("T", queues("a"))) == [("a", 0, "10.0.0.1", 8081)]
    assert await peers.brokers("T", None) == []


async def test_routes_are_cached_briefly_and_ports_refreshed_in_the_background() -> None:
    listing: dict[str, str] = {"grpcServerPort": "9001"}
    peers = Peers({"10.0.0.2:10911": listing}, cluster_route(("b", {0: "10.0.0.2:10911"})))
    await peers.brokers("T", None)
    await peers.brokers("T", None)
    assert (peers.routes_asked, peers.asked) == (1, ["10.0.0.2:10911"])
    peers.now += ROUTE_TTL
    await peers.brokers("T", None)
    assert peers.routes_asked == 2
    # A port older than PORT_TTL is answered from memory and refreshed behind.
    listing["grpcServerPort"] = "9100"
    peers.now += 3600
    assert summary(await peers.brokers("T", None)) == [("b", 0, "10.0.0.2", 9001)]
    for _ in range(10):
        await asyncio.sleep(0)
    peers.now += ROUTE_TTL
    assert summary(await peers.brokers("T", None)) == [("b", 0, "10.0.0.2", 9100)]
