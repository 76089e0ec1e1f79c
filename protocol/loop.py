"""Event-loop choice, made in one place (uvloop when it imports, asyncio's loop otherwise), and
the one way background tasks are stopped."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; this is for odd platforms
        return asyncio.new_event_loop
    return uvloop.new_event_loop


def new_event_loop() -> asyncio.AbstractEventLoop:
    return loop_factory()()


def run(main: Coroutine[Any, Any, T], *, debug: bool | None = None) -> T:
    """Run ``main`` to completion on a fresh loop of the preferred kind."""
    with asyncio.Runner(loop_factory=loop_factory(), debug=debug) as runner:
        return runner.run(main)


async def cancel_and_wait(*tasks: asyncio.Future[Any] | None) -> None:
    """Cancel ``tasks`` (None entries are skipped) and wait until every one has ended.

    Awaiting each inside ``suppress(CancelledError)`` would also swallow a cancel aimed at
    the caller; here that cancel still reaches the caller. A task's own failure is left to
    the task (or its done callback) to report."""
    live = [task for task in tasks if task is not None]
    for task in live:
        task.cancel()
    if live:
        await asyncio.wait(live)


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait until ``event`` is set or ``timeout`` seconds pass; True when it is set.

    Built on ``asyncio.timeout``: Python 3.11's ``wait_for`` can swallow a cancel that lands
    as the event fires, and a loop parked here would then outlive its shutdown."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()
    return event.is_set()
