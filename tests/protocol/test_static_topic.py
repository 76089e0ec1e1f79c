"""updateStaticTopic's dealing of global queues (protocol/static_topic.allocate)."""

from __future__ import annotations

import pytest

from aiorocketmq.protocol.static_topic import TopicConfigAndQueueMapping, allocate, block_round_up, remap


def test_new_queues_go_to_the_least_loaded_brokers_on_new_physical_queues() -> None:
    first = allocate("T", 4, ["b", "a"], {}, now_ms=1_000)
    assert {name: sorted(c.mapping_detail.hosted_queues) for name, c in first.items()} == {
        "a": [0, 2],
        "b": [1, 3],
    }
    assert [i.queue_id for i in first["a"].mapping_detail.hosted_queues[2]] == [1]
    assert (first["a"].read_queue_nums, first["a"].write_queue_nums) == (2, 2)
    assert {c.mapping_detail.epoch for c in first.values()} == {1_000}
    grown = allocate("T", 7, ["a", "b", "c"], first, now_ms=1_500)
    hosted = {name: sorted(c.mapping_detail.hosted_queues) for name, c in grown.items()}
    assert hosted == {"a": [0, 2, 6], "b": [1, 3], "c": [4, 5]}, "the least loaded first, ties by name"
    assert [grown["c"].mapping_detail.hosted_queues[g][0].queue_id for g in (4, 5)] == [0, 1]
    assert grown["a"].mapping_detail.hosted_queues[6][0].queue_id == 2
    assert {c.mapping_detail.epoch for c in grown.values()} == {2_000}, "an epoch past the old one"
    assert {c.mapping_detail.total_queues for c in grown.values()} == {7}
    assert sorted(first["a"].mapping_detail.hosted_queues) == [0, 2], "the old mapping is left as it was"


@pytest.mark.parametrize(
    ("total", "problem"),
    [(3, "Cannot decrease the queue num for static topic 3 < 4"), (4, "equal the existed queue num")],
)
def test_what_the_tool_refuses(total: int, problem: str) -> None:
    existing = allocate("T", 4, ["a"], {}, now_ms=1)
    with pytest.raises(ValueError, match=problem):
        allocate("T", total, ["a"], existing, now_ms=2)
    plain = {"a": TopicConfigAndQueueMapping(topic_name="T")}
    with pytest.raises(ValueError, match="Mapping info should not be null in broker a"):
        allocate("T", 4, ["a"], plain, now_ms=2)


def test_block_round_up() -> None:
    assert [block_round_up(n) for n in (0, 4_999, 5_000, 12_000, 19_999)] == [
        10_000,
        10_000,
        20_000,
        20_000,
        30_000,
    ]


def test_remapping_spreads_the_queues_and_extends_their_history() -> None:
    on_a = allocate("T", 4, ["a"], {}, now_ms=1_000)
    mapping, moves = remap("T", ["a", "b"], on_a, now_ms=1_200)
    assert moves == {2: ("a", "b"), 3: ("a", "b")}
    moved = mapping["b"].mapping_detail.hosted_queues[2]
    assert [(i.bname, i.gen, i.queue_id, i.logic_offset) for i in moved] == [("a", 0, 2, 0), ("b", 1, 0, -1)]
    assert mapping["a"].mapping_detail.hosted_queues[2] == moved, "the old broker keeps the same history"
    assert (mapping["b"].read_queue_nums, mapping["b"].write_queue_nums) == (2, 2)
    assert {c.mapping_detail.epoch for c in mapping.values()} == {2_000}
    assert mapping["a"].mapping_detail.info().curr_id_map == {0: 0, 1: 1}
    _, none = remap("T", ["a", "b"], mapping, now_ms=5_000)
    assert none == {}, "an even spread stays"
    with pytest.raises(ValueError, match="No topic route"):
        remap("T", ["a"], {}, now_ms=1)
