"""A held clock for the broker's timed services (the timer wheel, delay levels): it stands in
for a module's ``time`` (the wall clock) and its ``asyncio`` (the loop's timers and sleeps), so
a test moves time by exactly what it says, and nothing is raced.

Everything else (tasks, futures, events, the store) stays real: only what a module asks of the
clock is held. :meth:`HeldClock.advance` walks through the timers due in order, letting the
real tasks run after each one, and fails on a loop that keeps re-arming at one instant.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable, Coroutine
from typing import Any

#: A realistic wall clock (2023-11-14T22:13:20Z), in milliseconds.
EPOCH_MS = 1_700_000_000_000
#: More timer callbacks than this at one instant is a busy loop, not progress.
SPIN_LIMIT = 1000


class HeldHandle:
    def __init__(self, when_ns: int, callback: Callable[..., object], args: tuple[Any, ...]) -> None:
        self.when_ns = when_ns
        self.callback = callback
        self.args = args
        self.cancelled = False
        self.sleeper: asyncio.Future[None] | None = None

    def cancel(self) -> None:
        self.cancelled = True


class HeldClock:
    """``time`` and ``asyncio`` for a module under test, with time held until :meth:`advance`."""

    def __init__(self, now_ms: int = EPOCH_MS) -> None:
        self.ns = now_ms * 1_000_000
        self._timers: list[tuple[int, int, HeldHandle]] = []
        self._order = itertools.count()
        self.asyncio = _HeldAsyncio(self)

    # -- the ``time`` module ----------------------------------------------------------------

    def time_ns(self) -> int:
        return self.ns

    def time(self) -> float:
        return self.ns / 1e9

    def monotonic(self) -> float:
        return self.ns / 1e9

    @property
    def now_ms(self) -> int:
        return self.ns // 1_000_000

    # -- the loop's timers ------------------------------------------------------------------

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> HeldHandle:
        handle = HeldHandle(self.ns + round(delay * 1e9), callback, args)
        heapq.heappush(self._timers, (handle.when_ns, next(self._order), handle))
        return handle

    def create_task(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        return asyncio.get_running_loop().create_task(coro)

    async def sleep(self, delay: float) -> None:
        if delay <= 0:  # as asyncio.sleep: a zero sleep only yields
            await asyncio.sleep(0)
            return
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not woken.done():
                woken.set_result(None)

        handle = self.call_later(delay, wake)
        handle.sleeper = woken
        try:
            await woken
        finally:
            handle.cancel()

    def kill(self) -> None:
        """What kill -9 does to the module's timers: none of them runs, every sleep ends
        (its task is cancelled there)."""
        for _when, _order, handle in self._timers:
            handle.cancelled = True
            if handle.sleeper is not None:
                handle.sleeper.cancel()
        self._timers.clear()

    def armed(self) -> list[int]:
        """When (ms, rounded down) each pending timer or sleep will run."""
        return sorted(h.when_ns // 1_000_000 for _w, _o, h in self._timers if not h.cancelled)

    async def settle(self) -> None:
        """Let the real tasks run until they wait for something."""
        for _ in range(50):
            await asyncio.sleep(0)

    async def advance(self, ms: float) -> None:
        """Move the clock ``ms`` on, running every timer and sleep due on the way, in order."""
        target = self.ns + round(ms * 1_000_000)
        fired_at: dict[int, int] = {}
        while True:
            await self.settle()
            while self._timers and self._timers[0][2].cancelled:
                heapq.heappop(self._timers)
            if not self._timers or self._timers[0][0] > target:
                if self.ns < target:
                    self.ns = target
                    continue
                return
            when, _order, handle = heapq.heappop(self._timers)
            self.ns = max(self.ns, when)
            fired_at[self.ns] = fired_at.get(self.ns, 0) + 1
            if fired_at[self.ns] > SPIN_LIMIT:
                raise AssertionError(f"timers re-armed {SPIN_LIMIT} times at one instant: a busy loop")
            handle.callback(*handle.args)

    async def advance_to(self, when_ms: float) -> None:
        await self.advance(when_ms - self.ns / 1_000_000)


class _HeldAsyncio:
    """A module's ``asyncio``: the held clock's loop, timers and sleeps; the rest is asyncio's."""

    def __init__(self, clock: HeldClock) -> None:
        self._clock = clock
        self.sleep = clock.sleep

    def get_running_loop(self) -> HeldClock:
        asyncio.get_running_loop()  # raises outside a loop, as the real one does
        return self._clock

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)
