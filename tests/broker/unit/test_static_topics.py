"""Static topics' pure parts: a mapping item's offset arithmetic, which item holds an offset,
the rules a broker takes a new mapping by, and how a pull's answer is turned logical."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiorocketmq.broker.config import BrokerConfig
from aiorocketmq.broker.static_topics import StaticTopicTable, _pulled
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import ServerSystemError
from aiorocketmq.protocol.static_topic import (
    LogicQueueMappingItem,
    TopicQueueMappingDetail,
    check_items,
    find_item,
)


def item(
    bname: str, queue_id: int, gen: int = 0, logic: int = 0, start: int = 0, end: int = -1
) -> LogicQueueMappingItem:
    return LogicQueueMappingItem(
        gen=gen, queue_id=queue_id, bname=bname, logic_offset=logic, start_offset=start, end_offset=end
    )


def detail(
    hosted: dict[int, list[LogicQueueMappingItem]], epoch: int = 1000, bname: str = "a"
) -> TopicQueueMappingDetail:
    return TopicQueueMappingDetail(topic="T", total_queues=4, bname=bname, epoch=epoch, hosted_queues=hosted)


def test_offsets_convert_both_ways_within_an_item() -> None:
    moved = item("b", 2, gen=1, logic=10_000, start=5)
    assert moved.to_physical(10_003) == 8
    assert moved.to_logical(8) == 10_003
    assert moved.to_logical(1) == 10_000, "before its start an item answers its first logical offset"
    ended = item("a", 0, logic=0, start=0, end=7)
    assert (ended.end_decided, ended.max_logical) == (True, 7)
    assert ended.to_logical_loosely(9) == 7, "never past a decided end"
    assert item("a", 0, logic=-1).to_logical_loosely(3) == -1
    assert (item("a", 0).end_decided, item("a", 0, logic=40).max_logical) == (False, 40)


def test_the_item_holding_an_offset_is_the_newest_starting_at_or_before_it() -> None:
    old, new = item("b", 1), item("a", 2, gen=1, logic=10_000)
    assert find_item([old, new], 0) is old
    assert find_item([old, new], 9_999) is old
    assert find_item([old, new], 10_000) is new
    assert find_item([old, item("a", 2, gen=1, logic=-1)], 50_000) is old, "an undecided start is skipped"
    assert find_item([], 0) is None


@pytest.mark.parametrize(
    ("items", "problem"),
    [
        ([item("a", 0, gen=1), item("b", 0, gen=1, logic=5)], "generations do not increase"),
        ([item("a", 0, logic=-1), item("b", 0, gen=1, logic=5)], "only the newest mapping item"),
        ([item("a", 0, logic=9), item("b", 0, gen=1, logic=5)], "logic offsets do not increase"),
        ([item("a", -1)], "negative"),
    ],
)
def test_item_lists_apache_refuses(items: list[LogicQueueMappingItem], problem: str) -> None:
    assert problem in (check_items(items) or "")


def test_a_valid_history_passes() -> None:
    assert check_items([item("b", 1), item("a", 2, gen=1, logic=-1)]) is None


@pytest.fixture
def table(tmp_path: Path) -> StaticTopicTable:
    config = BrokerConfig.load(None, {"brokerName": "a", "storePathRootDir": str(tmp_path)})
    return StaticTopicTable(config)


def refusal(table: StaticTopicTable, mapping: TopicQueueMappingDetail) -> str:
    with pytest.raises(ServerSystemError) as refused:
        table.update(mapping, force=False)
    return refused.value.remark


def test_a_mapping_is_taken_by_epoch_and_persisted(table: StaticTopicTable) -> None:
    assert table.file.path.name == "topicQueueMapping.json", "Apache's file name"
    before = table.data_version.counter
    table.update(detail({0: [item("a", 0)], 2: [item("a", 1)]}), force=False)
    assert table.data_version.counter == before + 1 and table.data_version.timestamp > 0
    assert table.infos()["T"].curr_id_map == {0: 0, 2: 1}
    assert (
        refusal(table, detail({0: [item("a", 0)]}, epoch=999))
        == "Can't accept data with small epoch 999 < 1000"
    )
    assert refusal(table, detail({0: [item("a", 0)]})) == "Cannot accept equal epoch with null data"
    changed = detail({0: [item("a", 3)], 2: [item("a", 1)]})
    assert refusal(table, changed) == "The new leader is different but epoch equal"
    other_scope = detail({0: [item("a", 0)], 2: [item("a", 1)]}, epoch=1500)
    other_scope.scope = "elsewhere"
    assert refusal(table, other_scope) == "Can't accept data with unmatched scope elsewhere != __global__"
    bad_history = detail({0: [item("a", 0, gen=1), item("b", 0, gen=1, logic=5)]}, epoch=1600)
    assert (
        refusal(table, bad_history)
        == "global queue 0: the mapping items' generations do not increase: 1 then 1"
    )
    assert sorted(table.details["T"].hosted_queues) == [0, 2], "a refused mapping changed nothing"
    # a newer epoch that no longer names global 2 keeps it: this broker still holds its data
    table.update(detail({0: [item("a", 0)]}, epoch=2000), force=False)
    assert sorted(table.details["T"].hosted_queues) == [0, 2]
    # moved away: the summary lists only what this broker still leads
    table.update(detail({0: [item("a", 0), item("b", 0, gen=1, logic=-1)]}, epoch=3000), force=False)
    assert table.infos()["T"].curr_id_map == {2: 1}
    # forced, an older epoch is taken
    table.update(detail({0: [item("a", 0)]}, epoch=10), force=True)
    assert table.details["T"].epoch == 10


async def test_the_table_survives_a_reload(table: StaticTopicTable, tmp_path: Path) -> None:
    table.update(detail({1: [item("a", 0)]}), force=False)
    await table.file.save(table.encode())
    again = StaticTopicTable(BrokerConfig.load(None, {"brokerName": "a", "storePathRootDir": str(tmp_path)}))
    again.load()
    assert again.details == table.details
    assert again.data_version == table.data_version


def pull_answer(code: int, next_begin: int, low: int, high: int) -> RemotingCommand:
    request = RemotingCommand.request(RequestCode.PULL_MESSAGE, {})
    return request.response(
        code, None, {"nextBeginOffset": next_begin, "minOffset": low, "maxOffset": high}, b"records"
    )


def test_a_found_pull_answers_in_logical_offsets_with_the_delta() -> None:
    old, new = item("b", 1), item("a", 2, gen=1, logic=10_000)
    answer = _pulled(pull_answer(ResponseCode.SUCCESS, 4, 0, 9), 10_003, new, new, [old, new])
    assert answer.ext_fields == {
        "nextBeginOffset": "10004",
        "minOffset": "10000",
        "maxOffset": "10009",
        "offsetDelta": "10000",
    }
    assert answer.body == b"records"


def test_the_end_of_an_old_item_points_at_the_next_one() -> None:
    old, new = item("b", 1), item("a", 2, gen=1, logic=10_000)
    answer = _pulled(pull_answer(ResponseCode.PULL_NOT_FOUND, 6, 0, 6), 6, old, new, [old, new])
    assert answer.code == ResponseCode.PULL_RETRY_IMMEDIATELY
    assert answer.ext_fields["nextBeginOffset"] == "10000"
    assert answer.body == b""


def test_a_pull_before_the_oldest_item_moves_to_its_start() -> None:
    only = item("a", 0, logic=0, start=0)
    answer = _pulled(pull_answer(ResponseCode.PULL_OFFSET_MOVED, 0, 3, 9), 1, only, only, [only])
    assert (answer.code, answer.ext_fields["nextBeginOffset"]) == (ResponseCode.PULL_OFFSET_MOVED, "3")


def test_an_answer_without_offsets_passes_unchanged() -> None:
    only = item("a", 0)
    refused = RemotingCommand.request(RequestCode.PULL_MESSAGE, {}).response(
        ResponseCode.SYSTEM_ERROR, "busy"
    )
    assert _pulled(refused, 0, only, only, [only]).ext_fields == {}


def test_the_end_of_the_leader_is_no_move() -> None:
    only = item("a", 0)
    answer = _pulled(pull_answer(ResponseCode.PULL_NOT_FOUND, 3, 3, 3), 3, only, only, [only])
    assert (answer.code, answer.ext_fields["nextBeginOffset"]) == (ResponseCode.PULL_NOT_FOUND, "3")
    # past the end: the broker's own next offset stands unless it says the offset moved
    beyond = _pulled(pull_answer(ResponseCode.PULL_NOT_FOUND, 12, 0, 10), 12, only, only, [only])
    assert beyond.ext_fields["nextBeginOffset"] == "12"
    moved = _pulled(pull_answer(ResponseCode.PULL_OFFSET_MOVED, 12, 0, 10), 12, only, only, [only])
    assert (moved.code, moved.ext_fields["nextBeginOffset"]) == (ResponseCode.PULL_OFFSET_MOVED, "10")


def test_a_middle_item_retries_rather_than_moves() -> None:
    first, middle, last = item("a", 0), item("b", 0, gen=1, logic=10_000), item("a", 1, gen=2, logic=20_000)
    before = _pulled(
        pull_answer(ResponseCode.PULL_OFFSET_MOVED, 0, 4, 9), 10_001, middle, last, [first, middle, last]
    )
    assert (before.code, before.ext_fields["nextBeginOffset"]) == (
        ResponseCode.PULL_RETRY_IMMEDIATELY,
        "10004",
    )
    # within the item's range an answer stands as the broker gave it
    within = _pulled(
        pull_answer(ResponseCode.PULL_NOT_FOUND, 6, 4, 9), 10_005, middle, last, [first, middle, last]
    )
    assert (within.code, within.ext_fields["nextBeginOffset"]) == (ResponseCode.PULL_NOT_FOUND, "10006")


def test_an_old_item_whose_successor_is_undecided_is_not_found() -> None:
    old, undecided = item("b", 1), item("a", 2, gen=1, logic=-1)
    answer = _pulled(pull_answer(ResponseCode.PULL_NOT_FOUND, 6, 0, 6), 6, old, undecided, [old, undecided])
    assert answer.code == ResponseCode.PULL_NOT_FOUND


def test_the_edges_of_an_item() -> None:
    # a successor starting at logical 0 still follows (an emptied queue moved)
    old, empty_move = item("b", 1), item("a", 2, gen=1, logic=0)
    answer = _pulled(pull_answer(ResponseCode.PULL_NOT_FOUND, 0, 0, 0), 0, old, empty_move, [old, empty_move])
    assert (answer.code, answer.remark) == (ResponseCode.PULL_RETRY_IMMEDIATELY, None)
    # exactly at the leader's end the broker's own answer stands
    only = item("a", 0)
    at_end = _pulled(pull_answer(ResponseCode.PULL_OFFSET_MOVED, 7, 0, 10), 10, only, only, [only])
    assert at_end.ext_fields["nextBeginOffset"] == "7"
    # a decided end caps where to go next, at the end itself
    ended, after = item("b", 1, start=2, end=6), item("a", 0, gen=1, logic=10_000)
    capped = _pulled(pull_answer(ResponseCode.SUCCESS, 7, 2, 9), 3, ended, after, [ended, after])
    assert capped.ext_fields["nextBeginOffset"] == "4", "physical 6 is the item's end: logical 0 + 6 - 2"
    # the delta is logical start minus physical start
    shifted = item("a", 0, logic=100, start=40)
    found = _pulled(pull_answer(ResponseCode.SUCCESS, 45, 40, 50), 101, shifted, shifted, [shifted])
    assert found.ext_fields["offsetDelta"] == "60"
