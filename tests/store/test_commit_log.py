"""Commit log: record bytes, offsets, file rolling and the END-OF-FILE blank, rejections."""

from __future__ import annotations

import struct
import time
from pathlib import Path

from aiorocketmq.broker.store import BrokerRole, MessageStore, PutStatus, StoreMessage
from aiorocketmq.protocol.codes import MessageSysFlag
from aiorocketmq.protocol.message import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    decode_records,
    encode_offset_msg_id,
    encode_properties,
    encode_record,
    pack_host,
)

from .support import BORN_HOST, STORE_HOST, decode, make_message, running, small_config


async def test_record_is_the_wire_record(tmp_path: Path) -> None:
    async with running(small_config(tmp_path)) as store:
        store.put_message(make_message(n=0))
        msg = make_message(n=1, keys="k1 k2")
        result = store.put_message(msg)
        assert result.status is PutStatus.PUT_OK and result.ok
        stored = store.read_record(result.wrote_offset)
        expected = encode_record(
            topic=msg.topic.encode(),
            body=msg.body,
            properties=msg.properties.encode(),
            queue_id=msg.queue_id,
            flag=msg.flag,
            queue_offset=1,
            commit_log_offset=result.wrote_offset,
            sys_flag=msg.sys_flag,
            born_timestamp=msg.born_timestamp,
            born_host=BORN_HOST,
            store_timestamp=result.store_timestamp,
            store_host=STORE_HOST,
        )
        assert stored == expected
        assert result.wrote_bytes == len(expected)
        assert result.msg_ids == [encode_offset_msg_id(STORE_HOST, result.wrote_offset)]


async def test_offsets_per_topic_queue(tmp_path: Path) -> None:
    async with running(small_config(tmp_path)) as store:
        seen: dict[tuple[str, int], list[int]] = {}
        next_physical = 0
        for n in range(60):
            topic, queue_id = ("TopicA", "TopicB")[n % 2], (n // 2) % 3
            result = store.put_message(make_message(topic, queue_id, n))
            assert result.ok
            seen.setdefault((topic, queue_id), []).append(result.queue_offset)
            assert result.wrote_offset >= next_physical
            next_physical = result.wrote_offset + result.wrote_bytes
        for (topic, queue_id), offsets in seen.items():
            assert offsets == list(range(len(offsets)))
            assert store.get_max_offset(topic, queue_id) == len(offsets)
            assert store.get_min_offset(topic, queue_id) == 0
        assert sorted(store.topics()) == ["TopicA", "TopicB"]
        assert store.queue_ids("TopicA") == [0, 1, 2]
        assert store.get_max_offset("TopicA", 7) == 0
        assert store.get_max_offset("Nope", 0) == 0


async def test_store_timestamp_and_host(tmp_path: Path) -> None:
    async with running(small_config(tmp_path)) as store:
        before = time.time_ns() // 1_000_000
        stamped = store.put_message(make_message(n=1))
        after = time.time_ns() // 1_000_000
        given = store.put_message(make_message(n=2, store_timestamp=1_234_567))
        first, second = decode(
            [store.read_record(stamped.wrote_offset) or b"", store.read_record(given.wrote_offset) or b""]
        )
        assert before <= first.store_timestamp <= after
        assert stamped.store_timestamp == first.store_timestamp
        assert second.store_timestamp == 1_234_567
        assert first.store_host == "127.0.0.1:10911"
        assert first.born_host == "10.0.0.7:52001"
        assert first.commit_log_offset == stamped.wrote_offset


async def test_files_roll_with_end_of_file_blank(tmp_path: Path) -> None:
    size = 64 * 1024
    async with running(small_config(tmp_path)) as store:
        results = [store.put_message(make_message(n=n, size=1000)) for n in range(100)]
        assert all(r.ok for r in results)
        files = sorted(p.name for p in (tmp_path / "commitlog").iterdir() if p.name.isdigit())
        assert files[:2] == ["00000000000000000000", "00000000000000065536"]
        # Records fill the first file until the next one would not fit with 8 bytes to spare.
        in_first = [r for r in results if r.wrote_offset < size]
        end = in_first[-1].wrote_offset + in_first[-1].wrote_bytes
        assert size - end < results[0].wrote_bytes + 8
        data = (tmp_path / "commitlog" / files[0]).read_bytes()
        assert struct.unpack_from(">ii", data, end) == (size - end, BLANK_MAGIC_CODE)
        assert data[end + 8 :] == bytes(size - end - 8)
        following = results[len(in_first)]
        assert following.wrote_offset == size
        second = (tmp_path / "commitlog" / files[1]).read_bytes()
        assert struct.unpack_from(">ii", second, 0) == (following.wrote_bytes, MESSAGE_MAGIC_CODE)
        # Every record reads back intact from both files.
        for n, r in enumerate(results):
            (msg,) = decode_records(store.read_record(r.wrote_offset) or b"", check_crc=True)
            assert msg.queue_offset == n and msg.body == make_message(n=n, size=1000).body


async def test_batch_is_contiguous_and_never_split(tmp_path: Path) -> None:
    async with running(small_config(tmp_path)) as store:
        store.put_message(make_message(n=0, size=60_000))
        batch = [make_message(n=n, size=500) for n in range(1, 11)]
        result = store.put_messages(batch)
        assert result.ok and result.msg_count == 10
        assert result.wrote_offset == 64 * 1024  # did not fit behind the big one: next file
        assert result.queue_offset == 1
        offsets = [int(i[16:], 16) for i in result.msg_ids]
        assert offsets[0] == result.wrote_offset
        got = store.get_messages("g", "TopicA", 0, 1, 32)
        msgs = decode(got.buffers)
        assert [m.queue_offset for m in msgs] == list(range(1, 11))
        assert [m.commit_log_offset for m in msgs] == offsets
        assert sum(m.store_size for m in msgs) == result.wrote_bytes
        assert all(b - a == m.store_size for a, b, m in zip(offsets, offsets[1:], msgs))


async def test_rejected_messages_write_nothing(tmp_path: Path) -> None:
    async with running(small_config(tmp_path, maxMessageSize=2000)) as store:
        store.put_message(make_message(n=0))
        end = store.commit_log_max_offset

        def status(msg: StoreMessage) -> PutStatus:
            return store.put_message(msg).status

        assert status(make_message(n=1, size=2001)) is PutStatus.MESSAGE_ILLEGAL
        long_props = make_message(n=1, extra={"X": "y" * 40_000})
        assert status(long_props) is PutStatus.PROPERTIES_SIZE_EXCEEDED
        assert status(make_message(n=1, extra={"X": "a\0b"})) is PutStatus.MESSAGE_ILLEGAL
        assert status(make_message("T" * 128, n=1)) is PutStatus.MESSAGE_ILLEGAL
        assert status(make_message("", n=1)) is PutStatus.MESSAGE_ILLEGAL
        assert status(make_message("../evil", n=1)) is PutStatus.MESSAGE_ILLEGAL
        assert status(StoreMessage("bad\udc80", 0, b"body", "")) is PutStatus.MESSAGE_ILLEGAL
        assert status(make_message(n=1, extra={"X": "\udc80"})) is PutStatus.MESSAGE_ILLEGAL
        bad_host = make_message(n=1)
        bad_host.born_host = b"\0" * 5
        assert status(bad_host) is PutStatus.MESSAGE_ILLEGAL
        mixed = [make_message(n=1), make_message(queue_id=1, n=2)]
        assert store.put_messages(mixed).status is PutStatus.MESSAGE_ILLEGAL
        assert store.put_messages([]).status is PutStatus.MESSAGE_ILLEGAL
        assert not store.put_messages(mixed).ok
        assert store.commit_log_max_offset == end
        assert store.get_max_offset("TopicA", 0) == 1
        assert store.stats.put_message_failures == 12


async def test_batch_larger_than_a_file_is_illegal(tmp_path: Path) -> None:
    async with running(small_config(tmp_path)) as store:
        batch = [make_message(n=n, size=1000) for n in range(70)]
        assert store.put_messages(batch).status is PutStatus.MESSAGE_ILLEGAL
        assert store.commit_log_max_offset == 0


async def test_transaction_types(tmp_path: Path) -> None:
    prepared = MessageSysFlag.TRANSACTION_PREPARED.value
    rollback = MessageSysFlag.TRANSACTION_ROLLBACK.value
    commit = MessageSysFlag.TRANSACTION_COMMIT.value
    async with running(small_config(tmp_path)) as store:
        arrivals: list[tuple[str, int, int, int]] = []
        store.add_arrival_listener(lambda *a: arrivals.append(a))
        half = store.put_message(make_message("Half", n=1, sys_flag=prepared, keys="hk"))
        assert half.ok and half.queue_offset == 0
        normal = store.put_message(make_message("Half", n=2))
        done = store.put_message(make_message("Half", n=3, sys_flag=commit))
        undone = store.put_message(make_message("Half", n=4, sys_flag=rollback, keys="rk"))
        assert (normal.queue_offset, done.queue_offset, undone.queue_offset) == (0, 1, 0)
        assert store.get_max_offset("Half", 0) == 2
        entries = store.read_consume_queue("Half", 0, 0, 10)
        assert [e[0] for e in entries] == [normal.wrote_offset, done.wrote_offset]
        half_msg = store.look_message(half.wrote_offset)
        assert half_msg is not None and half_msg.queue_offset == 0 and half_msg.sys_flag & 0xC == prepared
        assert [a[2] for a in arrivals] == [1, 2]
        # Half messages are indexed (the broker finds them by key); rolled-back ones are not.
        assert len(store.query_by_key("Half", "hk", 10, 0, 2**62).records) == 1
        assert store.query_by_key("Half", "rk", 10, 0, 2**62).records == []
        batch = [make_message("Half", n=5, sys_flag=prepared), make_message("Half", n=6)]
        mixed = store.put_messages(batch)
        assert mixed.ok and store.get_max_offset("Half", 0) == 3
        assert decode([store.read_record(int(mixed.msg_ids[1][16:], 16)) or b""])[0].queue_offset == 2


async def test_ipv6_hosts(tmp_path: Path) -> None:
    v6_store = pack_host("::1", 10911)
    store = MessageStore(small_config(tmp_path), store_host=v6_store)
    await store.start()
    try:
        msg = make_message(n=1, born_host=pack_host("fe80::1", 4000))
        result = store.put_message(msg)
        assert result.ok
        assert result.msg_ids == [encode_offset_msg_id(v6_store, result.wrote_offset)]
        (got,) = decode(store.get_messages("g", "TopicA", 0, 0, 1).buffers)
        assert got.sys_flag & 0x30 == 0x30
        assert got.born_host == "[fe80::1]:4000" and got.store_host == "[::1]:10911"
        assert got.body == msg.body
    finally:
        await store.shutdown()


async def test_look_message_and_read_record(tmp_path: Path) -> None:
    async with running(small_config(tmp_path)) as store:
        first = store.put_message(make_message(n=0, keys="a b"))
        second = store.put_message(make_message(n=1))
        msg = store.look_message(second.wrote_offset)
        assert msg is not None and msg.body == make_message(n=1).body and msg.keys == []
        assert msg.properties["UNIQ_KEY"] == "U-TopicA-0-1"
        assert store.read_record(first.wrote_offset, first.wrote_bytes) is not None
        assert store.read_record(first.wrote_offset, first.wrote_bytes + 1) is None
        assert store.read_record(first.wrote_offset + 4) is None
        assert store.read_record(second.wrote_offset + second.wrote_bytes) is None
        assert store.look_message(10**12) is None


async def test_put_refused_when_not_running_or_slave(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path / "a"), store_host=STORE_HOST)
    assert store.put_message(make_message()).status is PutStatus.SERVICE_NOT_AVAILABLE
    async with running(small_config(tmp_path / "b", brokerRole=BrokerRole.SLAVE)) as slave:
        assert slave.put_message(make_message()).status is PutStatus.SERVICE_NOT_AVAILABLE


async def test_arrival_listener_per_tag_in_a_batch(tmp_path: Path) -> None:
    async with running(small_config(tmp_path)) as store:
        calls: list[tuple[str, int, int, int]] = []
        store.add_arrival_listener(lambda *a: calls.append(a))

        def broken(*_: object) -> None:
            raise RuntimeError("listener bug")

        store.add_arrival_listener(broken)
        batch = [make_message("T", 2, n, tags=t) for n, t in enumerate(["a", "b", "a", "a"])]
        assert store.put_messages(batch).ok
        a, b = batch[0].tags_code, batch[1].tags_code
        assert calls == [("T", 2, 2, b), ("T", 2, 4, a)]
        assert store.put_message(make_message("T", 2, 9, tags=None)).ok
        assert calls[-1] == ("T", 2, 5, 0)


async def test_a_listener_for_one_topic_hears_only_that_topic(tmp_path: Path) -> None:
    async with running(small_config(tmp_path)) as store:
        everything: list[str] = []
        only_b: list[tuple[str, int, int, int]] = []
        store.add_arrival_listener(lambda topic, *_: everything.append(topic))
        assert store.put_message(make_message("A", 0, 1)).ok
        # Registered after "A" and "B" arrivals were heard: it must still be called for "B".
        assert store.put_message(make_message("B", 1, 2)).ok
        store.add_arrival_listener(lambda *a: only_b.append(a), "B")
        for n, topic in enumerate(["A", "B", "C", "B"]):
            assert store.put_message(make_message(topic, 1, n, tags=None)).ok
        assert everything == ["A", "B", "A", "B", "C", "B"]
        assert only_b == [("B", 1, 2, 0), ("B", 1, 3, 0)]
        # What a deleted topic's arrivals cost stays with the topic, and comes back with it.
        store.delete_topic("B")
        assert "B" not in store._topic_listeners
        assert store.put_message(make_message("B", 1, 9, tags=None)).ok
        assert only_b[-1] == ("B", 1, 1, 0)


async def test_properties_string_is_stored_verbatim(tmp_path: Path) -> None:
    props = encode_properties({"TAGS": "x", "WAIT": "true", "中文": "値"}) + "\x02"
    async with running(small_config(tmp_path)) as store:
        msg = StoreMessage("TopicA", 0, b"body", props, born_host=BORN_HOST)
        result = store.put_message(msg)
        (got,) = decode([store.read_record(result.wrote_offset) or b""])
        assert got.properties == {"TAGS": "x", "WAIT": "true", "中文": "値"}
        raw = store.read_record(result.wrote_offset) or b""
        assert raw.endswith(props.encode())


async def test_consume_queue_file_failure_refuses_the_put_before_appending(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    async with running(config) as store:
        assert store.put_message(make_message(n=0)).ok
        # A file where the topic's consume-queue directory must go: no entry can be written, and
        # the put learns it before anything reaches the commit log.
        (tmp_path / "consumequeue" / "Blocked").write_bytes(b"")
        end = store.commit_log_max_offset
        failed = store.put_message(make_message("Blocked", n=1))
        assert failed.status is PutStatus.CREATE_MAPPED_FILE_FAILED and not failed.ok
        assert store.commit_log_max_offset == end
        assert store.put_message(make_message(n=2)).ok  # other queues are unaffected
    (tmp_path / "consumequeue" / "Blocked").unlink()
    async with running(config) as store:
        assert store.get_messages("g", "Blocked", 0, 0, 32).message_count == 0
        assert store.put_message(make_message("Blocked", n=3)).queue_offset == 0


async def test_crc_check_on_read(tmp_path: Path) -> None:
    async with running(small_config(tmp_path)) as store:
        result = store.put_message(make_message(n=1, size=300))
        assert store.read_record(result.wrote_offset, check_crc=True) is not None
        with (tmp_path / "commitlog" / "00000000000000000000").open("r+b") as f:
            f.seek(result.wrote_offset + 150)  # a body byte; the page cache is the mapping's
            f.write(b"\xee")
        assert store.read_record(result.wrote_offset) is not None
        assert store.read_record(result.wrote_offset, check_crc=True) is None
        assert store.look_message(result.wrote_offset, check_crc=True) is None
        assert store.look_message(result.wrote_offset) is not None
