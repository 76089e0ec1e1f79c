"""Batches through the store's put path: one topic-queue per batch (checked by the compiled
reader, or attribute by attribute for messages it does not read), one arrival notice for a
batch of one tag, and large bodies stored with the checksum zlib gives them."""

from __future__ import annotations

import os
from pathlib import Path

from aiorocketmq.broker.store import PutStatus, StoreMessage

from .support import crc, decode, make_message, running, small_config


class _Sub(StoreMessage):
    __slots__ = ()


async def test_a_batch_of_one_tag_is_one_arrival(tmp_path: Path) -> None:
    async with running(small_config(tmp_path)) as store:
        calls: list[tuple[str, int, int, int]] = []
        store.add_arrival_listener(lambda *a: calls.append(a))
        batch = [make_message("T", 1, n, tags="same") for n in range(5)]
        assert store.put_messages(batch).ok
        assert calls == [("T", 1, 5, batch[0].tags_code)]
        untagged = [make_message("T", 1, n, tags=None) for n in range(5, 8)]
        assert store.put_messages(untagged).ok
        assert calls[-1] == ("T", 1, 8, 0)


async def test_a_batch_of_several_queues_is_refused_whatever_its_messages(tmp_path: Path) -> None:
    async with running(small_config(tmp_path)) as store:
        for odd in (
            make_message("T", 2, 9),  # another queue
            make_message("U", 1, 9),  # another topic
        ):
            batch = [make_message("T", 1, 0), odd]
            assert store.put_messages(batch).status is PutStatus.MESSAGE_ILLEGAL
            sub = make_message("T", 1, 1)
            mixed = [_Sub(**{f: getattr(sub, f) for f in StoreMessage.__slots__}), odd]
            assert store.put_messages(mixed).status is PutStatus.MESSAGE_ILLEGAL
        assert store.get_max_offset("T", 1) == 0
        sub = make_message("T", 1, 2)
        same = [make_message("T", 1, 3), _Sub(**{f: getattr(sub, f) for f in StoreMessage.__slots__})]
        assert store.put_messages(same).ok
        assert store.get_max_offset("T", 1) == 2


async def test_large_bodies_are_stored_with_their_checksum(tmp_path: Path) -> None:
    async with running(small_config(tmp_path, mappedFileSizeCommitLog=1 << 20)) as store:
        batch = [make_message("T", 0, n) for n in range(4)]
        for msg, size in zip(batch, (1024, 1031, 4096 + 5, 63), strict=True):
            msg.body = os.urandom(size)
        result = store.put_messages(batch)
        assert result.ok
        got = store.get_messages("g", "T", 0, 0, 10)
        stored = decode(got.buffers)  # checks each record's CRC
        assert [m.body for m in stored] == [m.body for m in batch]
        assert [m.body_crc for m in stored] == [crc(m.body) for m in batch]
