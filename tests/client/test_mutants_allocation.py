"""Queue allocation against Apache RocketMQ 4.9.8's own strategies: the expected shares below
were printed by AllocateMessageQueueAveragely and AllocateMessageQueueConsistentHash run on the
same queues and client ids (tests written for surviving mutants of client/allocation.py)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from aiorocketmq.client import allocate_averagely, allocate_averagely_by_circle, consistent_hash
from aiorocketmq.client.allocation import resolve_strategy
from aiorocketmq.protocol.body import MessageQueue


def queues(n: int, topic: str = "T", broker: str = "b") -> list[MessageQueue]:
    return [MessageQueue(topic=topic, broker_name=broker, queue_id=i) for i in range(n)]


def names(share: list[MessageQueue]) -> list[str]:
    return [f"{q.broker_name}/{q.queue_id}" for q in sorted(share, key=lambda q: (q.broker_name, q.queue_id))]


@pytest.mark.parametrize(
    ("n", "cids", "expected"),
    [
        (4, ["c0", "c1", "c2"], [[0, 1], [2], [3]]),  # one queue over: the first client takes it
        (1, ["c0", "c1"], [[0], []]),
        (7, ["c0", "c1", "c2"], [[0, 1, 2], [3, 4], [5, 6]]),
    ],
)
def test_averagely_matches_java_when_one_queue_is_left_over(
    n: int, cids: list[str], expected: list[list[int]]
) -> None:
    """AVG with ``queues % clients == 1``: every queue is held, the extra one by the first
    client, exactly as Java's AllocateMessageQueueAveragely splits them."""
    shares = [[q.queue_id for q in allocate_averagely("g", c, queues(n), cids)] for c in cids]
    assert shares == expected


CIDS = ["10.0.0.7@100", "10.0.0.7@200", "10.0.0.8@100"]
MQS = queues(8, "TopicTest", "broker-a") + queues(8, "TopicTest", "broker-b")


def test_consistent_hash_default_matches_java_ten_virtual_nodes() -> None:
    """``consistent_hash()`` is Java's ``new AllocateMessageQueueConsistentHash()``: 10 virtual
    nodes per client, MD5 ring, so mixed Java/Python groups agree on every queue (with 9 or
    11 virtual nodes this group's shares differ)."""
    cids = [*CIDS, "10.0.0.8@200"]
    mqs = queues(16, "TopicTest", "broker-a") + queues(16, "TopicTest", "broker-b")
    a, b = "broker-a", "broker-b"
    expected = [
        [f"{a}/2", f"{a}/9", f"{a}/12", f"{b}/0", f"{b}/3", f"{b}/8"],
        [f"{a}/8", f"{a}/10", f"{b}/5", f"{b}/6", f"{b}/10", f"{b}/12", f"{b}/13", f"{b}/15"],
        [f"{a}/7", f"{a}/13", f"{a}/14", f"{b}/2", f"{b}/4", f"{b}/11"],
        [f"{a}/{i}" for i in (0, 1, 3, 4, 5, 6, 11, 15)] + [f"{b}/{i}" for i in (1, 7, 9, 14)],
    ]
    assert [names(consistent_hash()("g", c, mqs, cids)) for c in cids] == expected
    assert [names(resolve_strategy("consistent_hash")("g", c, mqs, cids)) for c in cids] == expected


def test_consistent_hash_with_one_virtual_node_matches_java() -> None:
    """One virtual node per client is allowed, as ``new AllocateMessageQueueConsistentHash(1)``."""
    allocate = consistent_hash(virtual_nodes=1)
    assert [names(allocate("g", c, MQS, CIDS)) for c in CIDS] == [
        ["broker-a/0", "broker-a/2", "broker-b/0", "broker-b/1", "broker-b/5", "broker-b/7"],
        ["broker-a/1", "broker-a/3", "broker-a/4", "broker-a/7", "broker-b/3"],
        ["broker-a/5", "broker-a/6", "broker-b/2", "broker-b/4", "broker-b/6"],
    ]


@pytest.mark.parametrize(
    ("topic", "owner", "other"),
    [("Orders1239", "10.0.0.7@519792", "10.0.0.9@1"), ("Orders3843", "10.0.0.7@465680", "10.0.0.8@4242")],
)
def test_a_queue_hashing_onto_a_client_point_belongs_to_that_client(
    topic: str, owner: str, other: str
) -> None:
    """The ring's hash is the MD5 digest's first 4 bytes, big-endian (Java's MD5Hash). These
    queues hash to exactly one of ``owner``'s points (the 5th digest byte is larger), and Java's
    ``tailMap(hash)`` includes an equal key: the queue is ``owner``'s, not the next point's."""
    mq = queues(1, topic, "broker-a")
    cids = sorted([owner, other])
    allocate = consistent_hash()
    assert allocate("g", owner, mq, cids) == mq
    assert allocate("g", other, mq, cids) == []


def test_fewer_than_one_virtual_node_is_refused_with_its_reason() -> None:
    """A ring without points cannot hold queues: ``virtual_nodes=0`` is refused, saying why."""
    with pytest.raises(ValueError, match=r"^virtual_nodes must be at least 1$"):
        consistent_hash(virtual_nodes=0)


@pytest.mark.parametrize("strategy", [allocate_averagely, allocate_averagely_by_circle, consistent_hash()])
def test_a_strategy_called_without_a_client_id_or_clients_says_which(strategy: object) -> None:
    """As Java's ``check`` (currentCID / cidAll empty): the error names the missing argument."""
    assert callable(strategy)
    with pytest.raises(ValueError, match=r"^client_id is empty$"):
        strategy("g", "", queues(2), ["c0"])
    with pytest.raises(ValueError, match=r"^client_ids is empty$"):
        strategy("g", "c0", queues(2), [])


def test_a_custom_strategy_is_used_as_given() -> None:
    """A consumer may be given its own allocation callable: it is used as is."""

    def first_client_takes_all(
        group: str, client_id: str, mqs: Sequence[MessageQueue], cids: Sequence[str]
    ) -> list[MessageQueue]:
        return list(mqs) if client_id == cids[0] else []

    allocate = resolve_strategy(first_client_takes_all)
    assert allocate is first_client_takes_all
    assert allocate("g", "c0", queues(3), ["c0", "c1"]) == queues(3)
