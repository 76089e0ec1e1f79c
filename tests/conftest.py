"""Shared fixtures: every async test runs on the loop our processes use (uvloop)."""

from __future__ import annotations

import asyncio

import pytest

from protocol.loop import loop_factory


class _PreferredLoopPolicy(asyncio.DefaultEventLoopPolicy):
    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        return loop_factory()()


@pytest.fixture(scope="session")
def event_loop_policy() -> asyncio.AbstractEventLoopPolicy:
    return _PreferredLoopPolicy()
