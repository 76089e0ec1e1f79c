"""Shared test configuration: every async test runs on the loop our processes use (uvloop);
``dead_address`` is an address where connections are refused."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from aiorocketmq.protocol.loop import loop_factory
from tests.support import held_port

# The gRPC tests run channels and servers inside this process, and grpcio's core keeps its
# threads afterwards. With grpcio's fork support on (its default), a child forked later for a
# test's server (subprocess with a preexec_fn forks) sometimes aborts between fork and exec:
# "Epoll1Poller ... epoll_wait error: Bad file descriptor", exit -6 (1-2 of 300 forks after a
# grpc.aio server and channel had run, in a scratch reproduction; none of 900 with it off).
# Nothing here forks to keep using gRPC, so it is off (grpcio reads this when it initialises).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], Any]]:
    return {"preferred": loop_factory()}


@pytest.fixture
def dead_address() -> Iterator[str]:
    """``127.0.0.1:<port>`` with the port bound for the whole test and never listening."""
    with held_port() as port:
        yield f"127.0.0.1:{port}"
