"""Retention never deletes a message early unless the operator said so, and never silently.

The rule (docs/store.md, Retention): disk pressure alone deletes no commit-log file younger than
``fileReservedTime`` while ``cleanFileForciblyEnable`` is false (our default); with it true,
forced clean-up (past ``diskSpaceCleanForciblyRatio``, set to 0 here to stand for a full disk)
deletes them, and every message it takes before some group, or any group, consumed it is logged
at WARNING with topic, queue and offsets, and counted per topic. Each case is shown for three
topics stored side by side: one no group reads, one whose group is behind, one fully consumed.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import time
from pathlib import Path

import pytest

from aiorocketmq.broker.offsets import consumer_progress
from aiorocketmq.broker.store import MessageStore
from tests.store.support import consume_queue_matches_log, make_message, running, small_config

PER_TOPIC = 200
TOPICS = ("NoGroup", "Behind", "Done")
BEHIND_AT = 10


def fill(store: MessageStore) -> None:
    # Interleaved, so every commit-log file holds messages of all three topics.
    for n in range(PER_TOPIC):
        for topic in TOPICS:
            assert store.put_message(make_message(topic, 0, n, size=1000)).ok


def progress() -> list[tuple[str, str, int, int]]:
    return [("lagging", "Behind", 0, BEHIND_AT), ("caught-up", "Done", 0, PER_TOPIC)]


def loss_lines(text: str) -> dict[str, list[tuple[int, int, str]]]:
    """topic → (first, end, behind) of each loss line logged."""
    found: dict[str, list[tuple[int, int, str]]] = {}
    pattern = r"topic (\S+) queue 0 offsets \[(\d+), (\d+)\), behind: (.+)"
    for topic, first, end, who in re.findall(pattern, text):
        found.setdefault(topic, []).append((int(first), int(end), who))
    return found


async def test_without_forced_clean_up_a_full_disk_deletes_nothing_unexpired(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = small_config(tmp_path, diskSpaceCleanForciblyRatio=0.0, diskMaxUsedSpaceRatio=0)
    assert config.clean_file_forcibly_enable is False  # our default
    async with running(config) as store:
        fill(store)
        store.consumer_progress = progress
        files = len(store.commit_log.queue.files)
        assert files > 3
        with caplog.at_level(logging.INFO):
            assert await store.clean_once() == 0
            assert await store.clean_once() == 0
        assert len(store.commit_log.queue.files) == files
        for topic in TOPICS:
            assert store.get_min_offset(topic, 0) == 0
        assert consume_queue_matches_log(store) == 3 * PER_TOPIC
        assert store.stats.unconsumed_deleted == 0 and loss_lines(caplog.text) == {}
        assert "cleanFileForciblyEnable is false" in caplog.text
        assert store._retention.state.spared_rounds == 2
        # Every group caught up: what no group reads is still kept (the bug this is here for
        # deleted it, as nobody subscribed was behind).
        store.consumer_progress = lambda: [("lagging", "Behind", 0, PER_TOPIC), *progress()[1:]]
        assert await store.clean_once() == 0
        assert len(store.commit_log.queue.files) == files
        assert store.get_min_offset("NoGroup", 0) == 0


async def test_forced_clean_up_logs_and_counts_every_unconsumed_message(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = small_config(tmp_path, diskSpaceCleanForciblyRatio=0.0, cleanFileForciblyEnable=True)
    async with running(config) as store:
        fill(store)
        store.consumer_progress = progress
        with caplog.at_level(logging.WARNING):
            assert await store.clean_once() > 0
        minimum = {topic: store.get_min_offset(topic, 0) for topic in TOPICS}
        assert all(minimum[topic] > BEHIND_AT for topic in TOPICS), minimum
        lines = loss_lines(caplog.text)
        # No group: everything deleted was unconsumed; behind: from its offset; done: nothing.
        assert set(lines) == {"NoGroup", "Behind"}
        assert lines["NoGroup"][0][0] == 0 and lines["NoGroup"][-1][1] == minimum["NoGroup"]
        assert {who for *_, who in lines["NoGroup"]} == {"(no consumer group)"}
        assert lines["Behind"][0][0] == BEHIND_AT and lines["Behind"][-1][1] == minimum["Behind"]
        assert {who for *_, who in lines["Behind"]} == {"lagging"}
        for topic in ("NoGroup", "Behind"):  # ranges follow each other, file by file
            ranges = lines[topic]
            assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
        counted = store.stats.unconsumed_deleted_by_topic
        assert counted == {"NoGroup": minimum["NoGroup"], "Behind": minimum["Behind"] - BEHIND_AT}
        assert store.stats.unconsumed_deleted == sum(counted.values())
        assert store.runtime_info()["unconsumedMessagesDeleted"] == str(sum(counted.values()))


async def test_expiry_deletes_old_files_whatever_the_consumers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with running(small_config(tmp_path)) as store:
        fill(store)
        store.consumer_progress = progress
        then = time.time() - 73 * 3600
        for mapped in store.commit_log.queue.files[:2]:
            os.utime(mapped.path, (then, then))
        with caplog.at_level(logging.INFO):
            assert store.delete_expired_files() == 2
        # The lagging group's loss is a warning; what no group reads simply expired.
        warned = [
            r for r in caplog.records if r.levelno == logging.WARNING and "behind: lagging" in r.message
        ]
        informed = [
            r for r in caplog.records if r.levelno == logging.INFO and "(no consumer group)" in r.message
        ]
        assert warned and informed
        assert "Done" not in loss_lines(caplog.text)
        assert (
            store.stats.unconsumed_deleted_by_topic["Behind"] == store.get_min_offset("Behind", 0) - BEHIND_AT
        )


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
