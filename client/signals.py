"""Stopping a worker cleanly when its process is told to stop: SIGTERM from a supervisor
(systemd, Kubernetes, Docker, a shell's ``kill``) or SIGINT from Ctrl-C.

Without a handler either signal ends the process at once, in the middle of whatever it was
consuming: nothing committed since the last periodic commit (every 5 s) counts as consumed, so
the next owner of the queues consumes those messages again. :func:`stop_on_signals` turns the
first signal into an orderly stop instead, with the event loop's own signal handling
(``loop.add_signal_handler``): the consumers given to it stop fetching at once, the code waiting
on it carries on, and leaving the clients' ``async with`` finishes the messages in hand, commits
and leaves the group. Its handlers are removed at the first signal, so a second one takes its
usual course (a stuck worker can still be stopped by force).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Iterable
from types import FrameType, TracebackType
from typing import Any, Self

from .lifecycle import ClientLifecycle

log = logging.getLogger(__name__)

__all__ = ["SignalStop", "stop_on_signals"]

DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_Handler = Callable[[int, FrameType | None], Any] | int | None


class SignalStop:
    """What ``async with stop_on_signals(...) as stop`` gives: :meth:`wait` for the first
    signal, :attr:`received` to ask whether one came (which one)."""

    def __init__(self, clients: Iterable[ClientLifecycle], signals: Iterable[int]) -> None:
        self._clients = list(clients)
        self._signals = [signal.Signals(s) for s in signals]
        self._event = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        #: The handlers in place before ours, put back when ours go.
        self._previous: dict[signal.Signals, _Handler] = {}
        self._via_loop = True
        #: The first signal received, ``None`` until one comes.
        self.received: signal.Signals | None = None

    async def __aenter__(self) -> Self:
        loop = asyncio.get_running_loop()
        self._loop = loop
        try:
            for sig in self._signals:
                previous = signal.getsignal(sig)
                try:
                    loop.add_signal_handler(sig, self._on_signal, sig)
                except NotImplementedError:  # Windows' loops: a plain handler that calls into the loop
                    self._via_loop = False
                    signal.signal(sig, self._on_plain_signal)
                self._previous[sig] = previous
        except BaseException:
            # Off the main thread, or a signal that cannot be caught: __aexit__ will not run,
            # so the handlers already set go now.
            self._restore()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._restore()

    @property
    def stopping(self) -> bool:
        """Whether a signal came (the clients stopped fetching)."""
        return self.received is not None

    async def wait(self) -> signal.Signals:
        """Wait for the first of the signals; returns it."""
        await self._event.wait()
        assert self.received is not None
        return self.received

    def _on_plain_signal(self, signum: int, frame: FrameType | None) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._on_signal, signal.Signals(signum))

    def _on_signal(self, sig: signal.Signals) -> None:
        if self.received is not None:
            return
        self.received = sig
        log.info("%s received: stopping (the next one stops at once)", sig.name)
        self._restore()
        for client in self._clients:
            client._stop_fetching()
        self._event.set()

    def _restore(self) -> None:
        loop = self._loop
        previous, self._previous = self._previous, {}
        for sig, handler in previous.items():
            if self._via_loop and loop is not None and not loop.is_closed():
                loop.remove_signal_handler(sig)
            if handler is not None:
                signal.signal(sig, handler)


def stop_on_signals(*clients: ClientLifecycle, signals: Iterable[int] = DEFAULT_SIGNALS) -> SignalStop:
    """An async context that turns SIGTERM and SIGINT (or ``signals``) into a clean stop.

    At the first signal every consumer among ``clients`` stops fetching: a
    :class:`LitePullConsumer`'s ``async for`` (and ``messages()``) ends after the message (or
    batch) in progress, and its ``poll()`` returns ``[]``; a :class:`PushConsumer` pulls no more
    and only finishes what it has pulled. Then :meth:`SignalStop.wait` returns. Shutting the
    clients down (leaving their ``async with``) does the rest: running listener calls finish,
    pulled messages nobody started go back (they are not committed), offsets are committed and
    the consumer leaves its group so the others take its queues over at once.

    ::

        async with LitePullConsumer("etl", namesrv) as consumer, stop_on_signals(consumer):
            consumer.subscribe("Orders")
            async for msg in consumer:  # ends after the message in hand at SIGTERM or SIGINT
                await handle(msg)

        async with push_consumer, stop_on_signals(push_consumer) as stop:
            await stop.wait()

    It must run in the main thread (where Python receives signals), inside the event loop.
    """
    return SignalStop(clients, signals)
