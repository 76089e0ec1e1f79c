"""Forced clean-up never silently deletes messages a subscribed group has not consumed.

Past ``diskSpaceCleanForciblyRatio`` (forced here by setting it to 0) retention deletes
unexpired commit-log files only when every subscribed group has consumed their messages,
unless ``cleanFileForciblyEnable=true``; then it deletes them and logs and counts what each
group lost.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from aiorocketmq.broker.offsets import consumer_progress
from tests.store.support import make_message, running, small_config

PER_QUEUE = 300


def fill(store: object) -> None:
    for n in range(PER_QUEUE):
        assert store.put_message(make_message("TopicA", 0, n, size=1000)).ok  # type: ignore[attr-defined]


async def test_forced_clean_up_keeps_files_a_group_has_not_consumed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = small_config(tmp_path, diskSpaceCleanForciblyRatio=0.0, diskMaxUsedSpaceRatio=100)
    assert config.clean_file_forcibly_enable is False  # our default
    async with running(config) as store:
        fill(store)
        files = len(store.commit_log.queue.files)
        assert files > 3
        progress = {"offset": 0}
        store.consumer_progress = lambda: [("lagging", "TopicA", 0, progress["offset"])]
        assert await store.clean_once() == 0
        assert len(store.commit_log.queue.files) == files
        assert store.get_min_offset("TopicA", 0) == 0
        # The group reads half: the files holding only what it read may go, no further.
        progress["offset"] = PER_QUEUE // 2
        deleted = await store.clean_once()
        assert 0 < deleted < files - 1
        assert store.get_min_offset("TopicA", 0) <= PER_QUEUE // 2
        assert store.stats.unconsumed_deleted == 0
        # With nobody behind, everything but the last file may go.
        progress["offset"] = PER_QUEUE
        await store.clean_once()
        assert len(store.commit_log.queue.files) == 1

    # Opted in: the files go anyway, and the loss is logged per group and counted.
    config = small_config(
        tmp_path / "b",
        diskSpaceCleanForciblyRatio=0.0,
        diskMaxUsedSpaceRatio=100,
        cleanFileForciblyEnable=True,
    )
    async with running(config) as store:
        fill(store)
        store.consumer_progress = lambda: [("lagging", "TopicA", 0, 10)]
        with caplog.at_level(logging.ERROR):
            assert await store.clean_once() > 0
        minimum = store.get_min_offset("TopicA", 0)
        assert minimum > 10
        assert store.stats.unconsumed_deleted == minimum - 10
        assert "group lagging lost TopicA queue 0 offsets [10," in caplog.text
        assert store.runtime_info()["unconsumedMessagesDeleted"] == str(minimum - 10)


def test_consumer_progress_covers_committed_online_and_delayed() -> None:
    class Offsets:
        table = {"TopicA@g1": {0: 5, 1: 7}}

    progress = sorted(
        consumer_progress(
            Offsets(),  # type: ignore[arg-type]
            {"g1": ["TopicA"], "g2": ["TopicA", "TopicB"]},
            lambda topic: [0, 1] if topic == "TopicA" else [0],
            {3: 42},
            "SCHEDULE_TOPIC_XXXX",
        )
    )
    assert progress == [
        ("(delayed delivery)", "SCHEDULE_TOPIC_XXXX", 2, 42),
        ("g1", "TopicA", 0, 5),
        ("g1", "TopicA", 1, 7),
        ("g2", "TopicA", 0, 0),
        ("g2", "TopicA", 1, 0),
        ("g2", "TopicB", 0, 0),
    ]
