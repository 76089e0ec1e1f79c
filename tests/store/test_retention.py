"""Retention: which commit-log files go and when, and that consume queues, minimum offsets and
the index agree with the commit log afterwards (also across a restart)."""

from __future__ import annotations

import asyncio
import datetime
import os
import time
from pathlib import Path

from aiorocketmq.broker.store import GetStatus, MessageStore, PutStatus

from .support import consume_queue_matches_log, decode, make_message, running, small_config

FAR = 2**62
HOUR = 3600


def fill(store: MessageStore, count: int) -> None:
    for n in range(count):
        assert store.put_message(make_message("TopicA", n % 2, n, size=1000, keys=f"k{n}")).ok


def age(store: MessageStore, files: int, hours: float) -> None:
    """Make the first ``files`` commit-log files look last written ``hours`` ago."""
    then = time.time() - hours * HOUR
    for mapped in store.commit_log.queue.files[:files]:
        os.utime(mapped.path, (then, then))


def at_hour(hour: int) -> int:
    """A timestamp (ms) today at ``hour``:30 local time."""
    today = datetime.datetime.now().replace(hour=hour, minute=30, second=0, microsecond=0)
    return int(today.timestamp() * 1000)


async def test_expired_files_go_and_everything_follows(tmp_path: Path) -> None:
    async with running(small_config(tmp_path)) as store:
        fill(store, 400)
        files = [f.path for f in store.commit_log.queue.files]
        assert len(files) >= 6
        age(store, 3, 73)
        assert store.delete_expired_files() == 3
        await store.drain_io()
        assert [p.exists() for p in files[:4]] == [False, False, False, True]
        low = store.commit_log_min_offset
        assert low == store.commit_log.queue.files[0].start > 0
        for queue_id in (0, 1):
            minimum = store.get_min_offset("TopicA", queue_id)
            first = store.read_consume_queue("TopicA", queue_id, minimum, 1)[0]
            assert first[0] >= low
            before = store.read_consume_queue("TopicA", queue_id, minimum - 1, 1)
            assert before == []
            assert store.get_messages("g", "TopicA", queue_id, 0, 32).status is GetStatus.OFFSET_TOO_SMALL
        assert consume_queue_matches_log(store) == 400 - store.get_min_offset(
            "TopicA", 0
        ) - store.get_min_offset("TopicA", 1)
        assert store.query_by_key("TopicA", "k0", 5, 0, FAR).records == []
        assert decode(store.query_by_key("TopicA", "k399", 5, 0, FAR).records)[0].queue_offset == 199
        # Consume-queue files wholly below the minimum went too (50 entries a file).
        remaining = sorted(p.name for p in (tmp_path / "consumequeue" / "TopicA" / "0").iterdir())
        assert int(remaining[0]) // 20 <= store.get_min_offset("TopicA", 0) < int(remaining[0]) // 20 + 50
        mins = (store.get_min_offset("TopicA", 0), store.get_min_offset("TopicA", 1))
    async with running(small_config(tmp_path)) as store:
        assert (store.get_min_offset("TopicA", 0), store.get_min_offset("TopicA", 1)) == mins
        assert store.commit_log_min_offset == low
        assert store.put_message(make_message("TopicA", 0, 1000)).queue_offset == 200


async def test_force_keeps_only_the_last_file(tmp_path: Path) -> None:
    async with running(small_config(tmp_path)) as store:
        fill(store, 10)
        assert store.delete_expired_files(force=True) == 0
        fill(store, 200)
        last = store.commit_log.queue.files[-1].start
        assert store.delete_expired_files(force=True) >= 2
        assert [f.start for f in store.commit_log.queue.files] == [last]
        assert consume_queue_matches_log(store) >= 1


async def test_periodic_round_rules(tmp_path: Path) -> None:
    config = small_config(tmp_path, deleteWhen="04", diskMaxUsedSpaceRatio=100)
    async with running(config) as store:
        fill(store, 400)
        age(store, 2, 130)
        assert await store.clean_once(at_hour(5)) == 0  # not the hour, disk not full
        assert await store.clean_once(at_hour(4)) == 2
        age(store, 2, 130)
        config.disk_max_used_space_ratio = 0  # "disk full": any hour
        assert await store.clean_once(at_hour(5)) == 2
        assert await store.clean_once(at_hour(5)) == 0  # nothing else expired
        files = len(store.commit_log.queue.files)
        # Past the forcible ratio nothing unexpired goes, unless forced clean-up is enabled.
        config.disk_space_clean_forcibly_ratio = 0.0
        assert await store.clean_once(at_hour(5)) == 0
        assert len(store.commit_log.queue.files) == files > 1
        config.clean_file_forcibly_enable = True
        assert await store.clean_once(at_hour(5)) >= 1
        assert len(store.commit_log.queue.files) == 1


async def test_disk_warning_refuses_puts(tmp_path: Path) -> None:
    config = small_config(tmp_path, diskSpaceWarningLevelRatio=0.0)
    async with running(config) as store:
        await store.clean_once()
        assert store.put_message(make_message(n=1)).status is PutStatus.SERVICE_NOT_AVAILABLE
        config.disk_space_warning_level_ratio = 1.0
        await store.clean_once()
        assert store.put_message(make_message(n=1)).ok
        assert 0 < store.stats.disk_used_ratio < 1
        info = store.runtime_info()
        assert float(info["commitLogDiskRatio"]) > 0
        assert info["putMessageFailedTimes"] == "1"


async def test_retention_runs_by_itself(tmp_path: Path) -> None:
    hour = datetime.datetime.now().hour
    config = small_config(tmp_path, cleanResourceInterval=20, deleteWhen=f"{hour:02d};{(hour + 1) % 24:02d}")
    async with running(config) as store:
        fill(store, 300)
        age(store, 2, 100)
        first = store.commit_log.queue.files[2].start
        deadline = time.monotonic() + 5
        while store.commit_log_min_offset != first:
            assert time.monotonic() < deadline, "retention did not run"
            await asyncio.sleep(0.01)
        assert consume_queue_matches_log(store) > 0
