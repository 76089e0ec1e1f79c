"""Fixtures for SDK tests: real name server + broker processes, an admin client, unique
names, and collectors that let a test await deliveries instead of sleeping."""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from aiorocketmq.client import Admin, PushConsumer
from aiorocketmq.protocol.message import MessageExt
from tests.cluster import Cluster
from tests.support import wait_until

__all__ = [
    "Collector",
    "start_cluster",
    "unique",
    "wait_consumed_to_end",
    "wait_no_open_transactions",
    "wait_until",
]

_names = itertools.count(1)


def unique(prefix: str) -> str:
    """A topic or group name no other test uses."""
    return f"{prefix}_{os.getpid()}_{next(_names)}"


async def start_cluster(root: Path, **broker_overrides: Any) -> Cluster:
    cluster = Cluster(root)
    await cluster.start_namesrv()
    try:
        await cluster.start_broker("broker-a", **broker_overrides)
    except BaseException:
        await cluster.stop()
        raise
    return cluster


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    """One name server and one broker shared by a test module (tests use unique names)."""
    cluster = await start_cluster(tmp_path_factory.mktemp("cluster"))
    try:
        yield cluster
    finally:
        await cluster.stop()


@pytest_asyncio.fixture(loop_scope="module")
async def admin(cluster: Cluster) -> AsyncIterator[Admin]:
    async with Admin(cluster.namesrv_addr) as admin:
        yield admin


class Collector:
    """Messages delivered to listeners, awaitable by count or by predicate."""

    def __init__(self) -> None:
        self.messages: list[MessageExt] = []
        self.by_consumer: dict[str, list[MessageExt]] = {}
        self._changed = asyncio.Condition()

    async def add(self, messages: Iterable[MessageExt], consumer: str = "") -> None:
        async with self._changed:
            batch = list(messages)
            self.messages.extend(batch)
            self.by_consumer.setdefault(consumer, []).extend(batch)
            self._changed.notify_all()

    async def wait_for(self, predicate: Callable[[list[MessageExt]], bool], timeout: float = 30.0) -> None:
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: predicate(self.messages))

    async def wait_count(self, count: int, timeout: float = 30.0) -> list[MessageExt]:
        try:
            await self.wait_for(lambda msgs: len(msgs) >= count, timeout)
        except TimeoutError:
            raise AssertionError(
                f"only {len(self.messages)} of {count} messages arrived in {timeout}s"
            ) from None
        return self.messages

    def bodies(self) -> list[bytes]:
        return [msg.body for msg in self.messages]

    def distinct_bodies(self) -> set[bytes]:
        return set(self.bodies())


async def wait_consumed_to_end(
    consumer: PushConsumer, admin: Admin, topic: str, timeout: float = 30.0
) -> None:
    """Until ``consumer``'s progress on every queue of ``topic`` reached the queue's end: all
    it will ever be given of what is stored now has gone through its listener, so a test can
    check that something did *not* arrive."""
    queues = await admin.queues(topic)

    async def at_end() -> bool:
        for queue in queues:
            if consumer._offset_store.read_memory(queue) != await admin.max_offset(queue):
                return False
        return True

    await wait_until(at_end, timeout=timeout)


async def wait_no_open_transactions(cluster: Cluster, admin: Admin, timeout: float = 30.0) -> None:
    """Until every broker's transaction table is empty: each half message was decided."""

    async def settled() -> bool:
        for broker in cluster.brokers.values():
            info = await admin.broker_runtime_info(broker.addr)
            if info["openTransactions"] != "0":
                return False
        return True

    await wait_until(settled, timeout=timeout)


@pytest_asyncio.fixture(loop_scope="module")
async def stopped_at_end() -> AsyncIterator[Callable[[PushConsumer], PushConsumer]]:
    """Register a consumer to be shut down when the test ends, however it ends (shutting
    down twice is harmless), so one failure leaves nothing running into the next test."""
    started: list[PushConsumer] = []

    def register(consumer: PushConsumer) -> PushConsumer:
        started.append(consumer)
        return consumer

    yield register
    for consumer in started:
        await consumer.shutdown()
