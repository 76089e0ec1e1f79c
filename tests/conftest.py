"""Shared test configuration: every async test runs on the loop our processes use (uvloop)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from aiorocketmq.protocol.loop import loop_factory


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], Any]]:
    return {"preferred": loop_factory()}
