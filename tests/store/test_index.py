"""The message index: on-disk layout, queries by key and time, collisions, rolling, roll-back."""

from __future__ import annotations

import struct
from pathlib import Path

from aiorocketmq.broker.store.index import HEADER_SIZE, IndexFile, key_hash
from aiorocketmq.protocol.message import java_hash

from .support import decode, make_message, running, small_config

FAR = 2**62


def test_key_hash_is_javas_abs_hash() -> None:
    for key in ["TopicA#k1", "T#" + "x" * 5000, "主题#键", ""]:
        h = java_hash(key)
        assert key_hash(key) == (abs(h) if h != -(2**31) else 0)


async def test_layout_on_disk(tmp_path: Path) -> None:
    config = small_config(tmp_path, maxHashSlotNum=16, maxIndexNum=10)
    async with running(config) as store:
        first = store.put_message(make_message(n=1, keys="alpha", uniq_key="U2", store_timestamp=5_000))
        second = store.put_message(make_message(n=2, keys="alpha", uniq_key="", store_timestamp=7_500))
        (path,) = (tmp_path / "index").iterdir()
        assert len(path.name) == 17 and path.name.isdigit()
    data = path.read_bytes()
    assert len(data) == HEADER_SIZE + 16 * 4 + 10 * 20
    header = struct.unpack_from(">qqqqii", data, 0)
    # begin/end timestamps, begin/end commit-log offsets, used slots, next entry number (from 1)
    assert header == (5_000, 7_500, first.wrote_offset, second.wrote_offset, 2, 4)

    def entry(number: int) -> tuple[int, int, int, int]:
        return struct.unpack_from(">iqii", data, HEADER_SIZE + 16 * 4 + number * 20)

    def slot(key: str) -> int:
        return int(struct.unpack_from(">i", data, HEADER_SIZE + key_hash(key) % 16 * 4)[0])

    assert entry(1) == (key_hash("TopicA#U2"), first.wrote_offset, 0, 0)
    assert entry(2) == (key_hash("TopicA#alpha"), first.wrote_offset, 0, 0)
    # Second "alpha": 2.5 s after the file's begin → 2 s; chained to the first.
    assert entry(3) == (key_hash("TopicA#alpha"), second.wrote_offset, 2, 2)
    assert slot("TopicA#alpha") == 3 and slot("TopicA#U2") == 1


async def test_query_by_keys_and_uniq_key(tmp_path: Path) -> None:
    async with running(small_config(tmp_path)) as store:
        for n in range(30):
            keys = f"order-{n % 5} all"
            assert store.put_message(make_message(n=n, keys=keys)).ok
            assert store.put_message(make_message("Other", n=n, keys="all")).ok
        by_key = store.query_by_key("TopicA", "order-3", 32, 0, FAR)
        msgs = decode(by_key.records)
        assert [m.queue_offset for m in msgs] == [28, 23, 18, 13, 8, 3]  # newest first
        assert all(m.topic == "TopicA" for m in msgs)
        assert len(store.query_by_key("TopicA", "all", 100, 0, FAR).records) == 30
        assert len(store.query_by_key("TopicA", "all", 7, 0, FAR).records) == 7
        (uniq,) = decode(store.query_by_key("Other", "U-Other-0-17", 32, 0, FAR).records)
        assert uniq.queue_offset == 17 and uniq.body == make_message("Other", n=17).body
        assert store.query_by_key("TopicA", "missing", 32, 0, FAR).records == []
        assert by_key.index_last_update_phyoffset > 0 and by_key.index_last_update_timestamp > 0


async def test_query_time_range(tmp_path: Path) -> None:
    async with running(small_config(tmp_path)) as store:
        for n in range(10):
            store.put_message(make_message(n=n, keys="k", store_timestamp=100_000 + 10_000 * n))
        got = decode(store.query_by_key("TopicA", "k", 32, 130_000, 160_000).records)
        assert [m.queue_offset for m in got] == [6, 5, 4, 3]
        assert store.query_by_key("TopicA", "k", 32, 200_000, 300_000).records == []


async def test_hash_collisions_are_filtered(tmp_path: Path) -> None:
    async with running(small_config(tmp_path, maxHashSlotNum=1)) as store:
        for n in range(40):
            store.put_message(make_message(f"T{n % 2}", n=n, keys=f"key{n % 4}"))
        got = decode(store.query_by_key("T1", "key3", 32, 0, FAR).records)
        assert sorted(m.queue_offset for m in got) == list(range(1, 20, 2))
        assert all(m.topic == "T1" and m.properties["KEYS"] == "key3" for m in got)


async def test_index_files_roll(tmp_path: Path) -> None:
    async with running(small_config(tmp_path, maxIndexNum=21)) as store:
        for n in range(50):
            store.put_message(make_message(n=n, keys="same"))
        files = sorted((tmp_path / "index").iterdir())
        # 20 entries a file, two keys (the key and UNIQ_KEY) per message.
        assert len(files) == 5
        got = decode(store.query_by_key("TopicA", "same", 100, 0, FAR).records)
        assert [m.queue_offset for m in got] == list(range(49, -1, -1))
        (one,) = decode(store.query_by_key("TopicA", "U-TopicA-0-3", 5, 0, FAR).records)
        assert one.queue_offset == 3


async def test_index_disabled(tmp_path: Path) -> None:
    async with running(small_config(tmp_path, messageIndexEnable=False)) as store:
        store.put_message(make_message(n=1, keys="k"))
        assert store.query_by_key("TopicA", "k", 32, 0, FAR).records == []
        assert not (tmp_path / "index").exists() or not any((tmp_path / "index").iterdir())


def test_roll_back_restores_the_file_exactly(tmp_path: Path) -> None:
    path = tmp_path / "20240101000000000"
    index = IndexFile(path, 7, 100, create=True)
    for n in range(20):
        assert index.put_key(f"T#k{n % 6}", 1000 + n * 100, 50_000 + n * 1000)
    index.write_header()
    before = bytes(index.view[HEADER_SIZE:])
    count, slots = index.index_count, index.hash_slot_count
    for n in range(20, 36):
        index.put_key(f"T#k{n % 9}", 1000 + n * 100, 50_000 + n * 1000)
    # A crash after writing those entries and slots, before the header: reopen from disk.
    index.close()
    index = IndexFile(path, 7, 100)
    assert index.index_count == count
    removed = index.roll_back(1000 + 20 * 100)
    assert removed == 16
    assert bytes(index.view[HEADER_SIZE:]) == before
    assert (index.index_count, index.hash_slot_count, index.end_phy_offset) == (count, slots, 1000 + 19 * 100)
    found: list[int] = []
    index.select("T#k1", 10, 0, FAR, found)
    assert found == [2900, 2300, 1700, 1100]
    index.destroy()
    assert not path.exists()
