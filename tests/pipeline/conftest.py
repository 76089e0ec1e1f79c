"""Fixtures for the Spark connector tests: one real local SparkSession for the whole run, and
real name server + broker processes (two brokers, so rows come from more than one).

Spark's API is blocking, so these tests are plain functions; the cluster's processes are
driven from an event loop in a background thread.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from aiorocketmq.client.blocking import BlockingAdmin, BlockingProducer
from aiorocketmq.protocol.loop import new_event_loop
from aiorocketmq.protocol.message import Message
from tests.cluster import Cluster

T = TypeVar("T")
_names = itertools.count(1)


def unique(prefix: str) -> str:
    """A topic or group name no other test uses."""
    return f"{prefix}_{os.getpid()}_{next(_names)}"


class LoopThread:
    """An event loop in a daemon thread, for driving the cluster's processes."""

    def __init__(self) -> None:
        self.loop = new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="cluster-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 120.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class TestCluster:
    """A started :class:`tests.cluster.Cluster` with blocking helpers."""

    __test__ = False

    def __init__(self, root: Path, brokers: Iterable[str] = ("broker-a",), **broker_conf: Any) -> None:
        self.runner = LoopThread()
        self.cluster = Cluster(root)
        self.runner.run(self.cluster.start_namesrv())
        for name in brokers:
            self.runner.run(self.cluster.start_broker(name, **broker_conf))
        self.namesrv = self.cluster.namesrv_addr
        self.admin = BlockingAdmin(self.namesrv)
        self.producer = BlockingProducer(unique("test-producer"), self.namesrv)

    def broker_addr(self, name: str) -> str:
        return self.cluster.brokers[name].addr

    def create_topic(self, topic: str, queues: int = 4, *, broker: str | None = None) -> None:
        addr = self.broker_addr(broker) if broker else None
        self.admin.create_topic(topic, queues, broker_addr=addr)
        self.wait_for_route(topic, broker)

    def wait_for_route(self, topic: str, broker: str | None) -> None:
        """Until the name server routes ``topic`` on ``broker`` (every broker when None)."""
        self.admin.wait_for_route(topic, brokers=[broker] if broker else self.cluster.brokers, timeout=30)

    def produce(self, messages: list[Message]) -> None:
        """Send ``messages`` (one topic) spread round robin over all the topic's queues, as
        batch requests."""
        if not messages:
            return
        queues = self.admin.queues(messages[0].topic)
        for i, queue in enumerate(queues):
            share = messages[i :: len(queues)]
            for first in range(0, len(share), 256):
                self.producer.send_batch(share[first : first + 256], queue=queue)

    def delete_files(self, broker: str) -> None:
        """Run the broker's retention now."""
        self.admin.trigger_delete_files(self.broker_addr(broker))

    def stop(self) -> None:
        self.producer.close()
        self.admin.close()
        self.runner.run(self.cluster.stop())
        self.runner.close()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestCluster]:
    started = TestCluster(
        tmp_path_factory.mktemp("spark-cluster"), ("broker-a", "broker-b"), enablePropertyFilter="true"
    )
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    # The workers must run this interpreter (the venv's), which has pyarrow and the project.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from aiorocketmq import pipeline

    session = (
        SparkSession.builder.master("local[2]")
        .appName("aiorocketmq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    pipeline.register(session)
    try:
        yield session
    finally:
        session.stop()


def wait_until(predicate: Callable[[], bool], timeout: float = 60.0, interval: float = 0.1) -> None:
    """Poll an external condition until it holds, failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)
