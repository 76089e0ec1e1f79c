"""Fixtures of the broker's unit tests: its parts on a real store in ``tmp_path``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from .support import Parts, RecordedConnection, broker_parts


@pytest.fixture
async def parts(tmp_path: Path) -> AsyncIterator[Parts]:
    async with broker_parts(tmp_path) as built:
        yield built


@pytest.fixture
def conn() -> RecordedConnection:
    return RecordedConnection()
