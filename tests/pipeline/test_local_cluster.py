"""A batch read on ``local-cluster[2,1,1024]``, Spark's pseudo-distributed mode: separate
executor JVMs, each with its own Python workers, read the queue ranges the driver planned,
so nothing of the connector depends on running in one process."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
from pathlib import Path

from aiorocketmq.protocol.message import Message
from tests.pipeline.conftest import TestCluster, unique

ROOT = Path(__file__).resolve().parents[2]


def test_read_on_a_local_cluster_of_two_executors(cluster: TestCluster) -> None:
    first, second = unique("LocalCluster"), unique("LocalCluster")
    cluster.create_topic(first, 2)
    cluster.create_topic(second, 1, broker="broker-b")
    sent = {topic: [f"{topic}/{i}" for i in range(n)] for topic, n in ((first, 120), (second, 30))}
    for topic, bodies in sent.items():
        cluster.produce([Message(topic, body.encode()) for body in bodies])

    done = subprocess.run(
        [sys.executable, "-m", "tests.pipeline.local_cluster_job", cluster.namesrv, f"{first},{second}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])

    # Two executors (a local-cluster driver runs no tasks); five queue ranges of 30 offsets,
    # each cut in two by minPartitions=10.
    assert seen["executors"] == 2
    assert seen["partitions"] == 10
    rows = seen["rows"]
    by_topic = collections.defaultdict(list)
    for topic, _broker, _queue_id, _offset, body in rows:
        by_topic[topic].append(body)
    assert {t: sorted(b) for t, b in by_topic.items()} == {t: sorted(b) for t, b in sent.items()}
    assert len({tuple(r[:4]) for r in rows}) == 150  # no message twice
