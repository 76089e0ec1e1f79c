"""Fixtures for the interop suite: the built toolchains (session), Apache's name server and broker
(session, started once: 4.9.7 as ``apache``, 5.3.3 as ``apache53``), and our own cluster configured
the way the scenarios need it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.interop.harness import (
    ApacheBroker,
    ApacheNamesrv,
    Toolchain,
    build_all,
    build_java53_only,
    build_java_only,
)

#: Our broker's settings for the scenarios: transactions checked back within a second or two.
OUR_BROKER = {"transactionTimeOut": 1000, "transactionCheckInterval": 1000}


@pytest.fixture(scope="session")
def java_toolchain() -> Toolchain:
    """Apache RocketMQ's jars and the suite's Java programs (built once, cached)."""
    return build_java_only()


@pytest.fixture(scope="session")
def toolchain() -> Toolchain:
    """Java and Go: everything the harness builds."""
    return build_all()


@pytest.fixture(scope="session")
def apache(java_toolchain: Toolchain, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheCluster]:
    """Apache RocketMQ's own name server and broker, the reference."""
    cluster = ApacheCluster(java_toolchain, tmp_path_factory.mktemp("apache"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def java53_toolchain() -> Toolchain:
    """The RocketMQ 5.3 side: the suite's Scenarios53 on the 5.3.2 remoting client, and Apache's
    5.3.3 name server, broker and tools (java53/, built once, cached)."""
    return build_java53_only()


#: Apache 5.3.3's broker for the 5.3 scenarios: the trace topic created at start, as on ours, and
#: RECALL_MESSAGE allowed (off by default; test_java53_client.py's recall scenario).
APACHE53_BROKER = {"traceTopicEnable": True, "recallMessageEnable": True}


@pytest.fixture(scope="session")
def apache53(
    java53_toolchain: Toolchain, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApacheCluster]:
    """Apache RocketMQ 5.3.3's name server and broker, the 5.x reference."""
    cluster = ApacheCluster(java53_toolchain, tmp_path_factory.mktemp("apache53"), **APACHE53_BROKER)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


class ApacheCluster:
    def __init__(self, toolchain: Toolchain, root: Path, **broker: Any) -> None:
        self.namesrv = ApacheNamesrv(toolchain, root / "namesrv")
        self.toolchain = toolchain
        self.root = root
        self.broker_overrides = broker
        self.brokers: list[ApacheBroker] = []

    @property
    def namesrv_addr(self) -> str:
        return self.namesrv.addr

    @property
    def broker(self) -> ApacheBroker:
        return self.brokers[0]

    def start(self) -> None:
        self.namesrv.start()
        self.add_broker(self.namesrv.addr, "broker-a")

    def add_broker(self, namesrv_addr: str, name: str, **overrides: Any) -> ApacheBroker:
        broker = ApacheBroker(
            self.toolchain,
            self.root / name,
            namesrv_addr,
            name=name,
            overrides={**self.broker_overrides, **overrides},
        )
        self.brokers.append(broker)
        broker.start()
        return broker

    def stop(self) -> None:
        for broker in self.brokers:
            broker.stop()
        self.namesrv.stop()
