"""Fixtures for the HA tests: they start their own brokers (a master/slave pair, see
``support.start_pair``), so their cluster begins with the name server alone."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.cluster import Cluster


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    """A name server and no broker yet; every process must stop cleanly."""
    cluster = Cluster(tmp_path)
    await cluster.start_namesrv()
    try:
        yield cluster
    finally:
        await cluster.stop()
