"""Request handlers whose only tests checked the answer's code, held to their effect: each test
here fails if its handler answered SUCCESS and did nothing (docs/testing.md keeps the table of
every request code and the tests that hold it)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from aiorocketmq.broker.handlers.admin import AdminHandlers
from aiorocketmq.broker.handlers.consumer import ConsumerHandlers
from aiorocketmq.broker.handlers.maintenance import SYSTEM_TOPICS, MaintenanceHandlers
from aiorocketmq.broker.handlers.reply import ReplyHandlers
from aiorocketmq.broker.stats_history import StatsHistory
from aiorocketmq.broker.timers import TimerStore
from aiorocketmq.protocol.body import ConsumerOffsetTable, TopicConfig, TopicList
from aiorocketmq.protocol.codes import PERM_READ_WRITE, RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.headers import SendMessageRequestHeader
from aiorocketmq.protocol.message import PropertyKey, encode_properties
from tests.store.support import small_config

from .support import Parts, RecordedConnection, answer, broker_parts, producer_channel, send_ok


@pytest.fixture
async def parts(tmp_path: Path) -> AsyncIterator[Parts]:
    # Commit-log files of 64 KiB (small_config), so a few hundred messages roll several.
    async with broker_parts(tmp_path) as parts:
        yield parts


def maintenance(parts: Parts) -> MaintenanceHandlers:
    return MaintenanceHandlers(
        parts.config,
        store=parts.store,
        topics=parts.topics,
        groups=parts.groups,
        offsets=parts.offsets,
        clients=parts.clients,
        history=StatsHistory(parts.stats),
    )


def request(code: int, **fields: object) -> RemotingCommand:
    return RemotingCommand.request(code, {k: str(v) for k, v in fields.items()})


async def fill(parts: Parts, conn: RecordedConnection, topic: str, count: int) -> None:
    parts.topics.ensure(topic, 1, PERM_READ_WRITE)
    for n in range(count):
        await send_ok(parts, conn, topic, f"{topic}-{n}".encode() + bytes(900))


async def test_clean_expired_consume_queue_drops_queues_wholly_below_the_log(parts: Parts) -> None:
    conn = RecordedConnection()
    await fill(parts, conn, "OldTopic", 200)  # several commit-log files
    await fill(parts, conn, "NewTopic", 100)  # more than the last file holds: none of OldTopic there
    parts.store.delete_expired_files(force=True)
    assert parts.store.consume_queue("OldTopic", 0) is not None  # retention keeps a queue's last file
    response = await answer(maintenance(parts).clean_expired_consume_queues, conn, request(306))
    assert response.code == ResponseCode.SUCCESS
    assert parts.store.consume_queue("OldTopic", 0) is None
    assert parts.store.get_max_offset("NewTopic", 0) == 100


async def test_delete_expired_commit_log_deletes_old_files_now(parts: Parts) -> None:
    conn = RecordedConnection()
    await fill(parts, conn, "Aging", 200)
    files = parts.store.commit_log.queue.files
    then = time.time() - 80 * 3600  # past fileReservedTime (72 h)
    for mapped in files[:2]:
        os.utime(mapped.path, (then, then))
    before = parts.store.commit_log_min_offset
    response = await answer(maintenance(parts).delete_expired_commit_log, conn, request(329))
    assert (response.code, response.remark) == (ResponseCode.SUCCESS, "2 expired commit log files deleted")
    assert parts.store.commit_log_min_offset > before


async def test_clean_unused_topic_drops_queues_of_topics_without_config(parts: Parts) -> None:
    conn = RecordedConnection()
    await fill(parts, conn, "Kept", 3)
    await fill(parts, conn, "Gone", 3)
    parts.topics.delete("Gone")
    response = await answer(maintenance(parts).clean_unused_topics, conn, request(316))
    assert response.code == ResponseCode.SUCCESS
    assert "Gone" not in parts.store.topics() and "Kept" in parts.store.topics()


async def test_system_topic_list_names_the_brokers_own_topics_only(parts: Parts) -> None:
    parts.topics.put(TopicConfig(topic_name="UserTopic", read_queue_nums=1, write_queue_nums=1))
    config = parts.config
    for topic in (
        config.broker_name,
        config.broker_cluster_name,
        f"{config.broker_cluster_name}_REPLY_TOPIC",
    ):
        parts.topics.put(TopicConfig(topic_name=topic, read_queue_nums=1, write_queue_nums=1))
    response = await answer(maintenance(parts).system_topics, RecordedConnection(), request(305))
    listed = TopicList.decode(response.body)
    expected = {config.broker_name, config.broker_cluster_name, f"{config.broker_cluster_name}_REPLY_TOPIC"}
    expected |= {t for t in parts.topics.topics if t in SYSTEM_TOPICS}
    assert set(listed.topic_list) == expected and "UserTopic" not in listed.topic_list
    assert listed.broker_addr == config.broker_addr


async def test_all_consumer_offsets_carry_every_committed_offset(parts: Parts) -> None:
    parts.offsets.commit("g1", "T1", 0, 7)
    parts.offsets.commit("g2", "T2", 3, 42)
    admin = AdminHandlers(
        parts.config,
        store_config=small_config(Path(parts.config.store_path_root_dir)),
        store=parts.store,
        topics=parts.topics,
        groups=parts.groups,
        offsets=parts.offsets,
        clients=parts.clients,
        runtime_info=dict,
        delay_offsets=lambda: b"{}",
        register=_nothing,
        timers=TimerStore(parts.store, parts.writer, Path(parts.config.store_path_root_dir) / "timercheck"),
    )
    response = await answer(admin.all_consumer_offsets, RecordedConnection(), request(43))
    table = ConsumerOffsetTable.decode(response.body).offset_table
    assert table == {"T1@g1": {0: 7}, "T2@g2": {3: 42}}


async def _nothing() -> None:
    return None


async def test_search_offset_by_time_finds_the_first_message_stored_from_then_on(parts: Parts) -> None:
    conn = RecordedConnection()
    await fill(parts, conn, "Timed", 3)
    earlier = parts.messages("Timed", 0)[-1].store_timestamp
    await asyncio.sleep(0.005)  # store timestamps are milliseconds: the next ones carry a later one
    for n in range(3, 6):
        await send_ok(parts, conn, "Timed", f"Timed-{n}".encode())
    boundary = parts.messages("Timed", 0)[3].store_timestamp
    assert boundary > earlier
    handlers = ConsumerHandlers(
        store=parts.store,
        topics=parts.topics,
        groups=parts.groups,
        offsets=parts.offsets,
        clients=parts.clients,
        locks=parts.locks,
    )
    for timestamp, expected in ((0, 0), (boundary, 3), (boundary + 3_600_000, 6)):
        cmd = request(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, topic="Timed", queueId=0, timestamp=timestamp)
        response = await answer(handlers.search_offset, conn, cmd)
        assert int(response.ext_fields["offset"]) == expected, (timestamp, response)


class Requester(RecordedConnection):
    """A requester's connection: the broker pushes replies to it as requests, answered here."""

    def __init__(self) -> None:
        super().__init__("10.0.0.9:40000")
        self.pushed: list[RemotingCommand] = []

    async def request(self, cmd: RemotingCommand, timeout: float | None = None) -> RemotingCommand:
        self.pushed.append(cmd)
        return cmd.response(ResponseCode.SUCCESS)


async def test_a_reply_with_a_v1_header_is_pushed_to_its_requester_and_stored(parts: Parts) -> None:
    requester = Requester()
    parts.clients.register_producer(producer_channel(requester, "requester-1"), "requesters")  # type: ignore[arg-type]
    reply_topic = f"{parts.config.broker_cluster_name}_REPLY_TOPIC"
    parts.topics.ensure(reply_topic, 1, PERM_READ_WRITE)
    props = {PropertyKey.REPLY_TO_CLIENT: "requester-1", PropertyKey.CORRELATION_ID: "corr-1"}
    header = SendMessageRequestHeader(
        producer_group="repliers",
        topic=reply_topic,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=0,
        sys_flag=0,
        born_timestamp=int(time.time() * 1000),
        flag=0,
        properties=encode_properties(props),
    )
    cmd = RemotingCommand.request(RequestCode.SEND_REPLY_MESSAGE, header.to_fields(), b"the answer")
    handlers = ReplyHandlers(parts.config, topics=parts.topics, clients=parts.clients, writer=parts.writer)
    response = await answer(handlers.send_reply, RecordedConnection(), cmd)
    assert response.code == ResponseCode.SUCCESS, response
    (pushed,) = requester.pushed
    assert pushed.code == RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT and pushed.body == b"the answer"
    (stored,) = parts.messages(reply_topic, 0)
    assert stored.body == b"the answer" and stored.properties[PropertyKey.CORRELATION_ID] == "corr-1"
