"""The consumers waiting for a message to arrive, in one registry.

Every front parks a consumer that found nothing here, and the store has one listener for all of
them (:meth:`Arrivals.on_arrival`, called once for each message it dispatches):

- the remoting pull's long polling: held pulls, answered by callback from the compiled
  send/pull path (:class:`~.long_polling.LongPolling`, which this registry owns and wakes first,
  by queue, honouring each pull's tag filter);
- every consumer that waits as a coroutine: POP receives (remoting POP_MESSAGE and the 5.x
  ReceiveMessage, both through :class:`~.pop.PopService`) by topic, and the 5.x PullMessage by
  queue; the waiters of the message's queue and of its whole topic wake and look again.

A POP consumer of a topic also reads its group's POP retry topic, so an arrival there wakes the
topic's waiters too (:meth:`Arrivals.alias`).
"""

from __future__ import annotations

import asyncio

from .long_polling import LongPolling

#: The queue id a waiter for a whole topic waits on.
ANY_QUEUE = -1


class Arrivals:
    """Waiters by (topic, queue id), woken on arrival (module doc)."""

    def __init__(self, pulls: LongPolling | None = None) -> None:
        #: Held remoting pulls (none in a registry built for one front's tests).
        self.pulls = pulls
        self._waiters: dict[tuple[str, int], set[asyncio.Future[None]]] = {}
        #: A topic whose arrivals also wake another's waiters (a POP retry topic -> its topic).
        self._aliases: dict[str, str] = {}

    @property
    def waiting(self) -> int:
        return sum(len(waiters) for waiters in self._waiters.values())

    def alias(self, topic: str, woken: str) -> None:
        """Arrivals in ``topic`` wake the waiters of ``woken`` as well."""
        self._aliases[topic] = woken

    async def wait(self, topic: str, queue_id: int = ANY_QUEUE, timeout: float = 0.0) -> bool:
        """Wait up to ``timeout`` seconds for a message in ``topic`` (in ``queue_id``, or any of
        its queues); whether one arrived (or :meth:`wake` was called) before the timeout."""
        key = (topic, queue_id)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._waiters.setdefault(key, set())
        waiters.add(waiter)
        try:
            await asyncio.wait_for(waiter, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            waiters.discard(waiter)
            if not waiters and self._waiters.get(key) is waiters:
                del self._waiters[key]

    def wake(self, topic: str, queue_id: int = ANY_QUEUE) -> None:
        """Wake the waiters of ``topic``'s ``queue_id`` (of the whole topic: ANY_QUEUE)."""
        waiters = self._waiters.get((topic, queue_id))
        if waiters:
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def on_arrival(self, topic: str, queue_id: int, max_offset: int = 0, tags_code: int = 0) -> None:
        """The store's arrival listener: wake whoever waits for this queue or this topic."""
        if self.pulls is not None:
            self.pulls.on_arrival(topic, queue_id, max_offset, tags_code)
        if not self._waiters:
            return
        self.wake(topic, queue_id)
        self.wake(topic)
        woken = self._aliases.get(topic)
        if woken is not None:
            self.wake(woken)

    def cancel_all(self) -> None:
        """Wake every waiter at once (the broker stops): each sees nothing new and answers."""
        for waiters in self._waiters.values():
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)
