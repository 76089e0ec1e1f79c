"""Shared test configuration: every async test runs on the loop our processes use (uvloop);
``dead_address`` is an address where connections are refused."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from aiorocketmq.protocol.loop import loop_factory
from tests.support import held_port


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], Any]]:
    return {"preferred": loop_factory()}


@pytest.fixture
def dead_address() -> Iterator[str]:
    """``127.0.0.1:<port>`` with the port bound for the whole test and never listening."""
    with held_port() as port:
        yield f"127.0.0.1:{port}"
