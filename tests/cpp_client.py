"""Lifecycle rules for driving the official C++ client (PyPI ``rocketmq==0.4.4``) in tests.

librocketmq 1.2.x refreshes its routes on a timer whose first run comes 3 s after start, and
a client shut down while that refresh is running aborts the whole process (``std::terminate``
from its timer thread; seen as "Fatal Python error: Aborted" with ``shutdown`` on the stack
and ``updateTopicRouteInfoFromNameServer`` as the last log line). Tests therefore keep every
C++ client alive past that first refresh before shutting it down.

A producer's first send can also fail before leaving the client: while one of its threads is
still connecting to a broker, another asking for that connection gets none at once, and the
send's own retries skip the topic's only broker. The client words every send whose retries ran
out as "No route info of this topic", whatever the cause (a timeout or a broker's error too), so
:class:`TolerantProducer` tries again only a producer's first sends, only when they failed
within :data:`NEVER_LEFT` (the failure above comes back in well under a millisecond).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from rocketmq.client import Producer
from rocketmq.exceptions import RocketMQException

T = TypeVar("T")

#: Past the first route refresh (3 s after start) with room for it to finish.
SAFE_LIFETIME = 3.5


class _Client(Protocol):
    def shutdown(self) -> None: ...


def shutdown_safely(client: _Client, started_at: float) -> None:
    """Blocking (call it from a worker thread): shut ``client`` down once it is past its first
    route refresh; ``started_at`` is ``time.monotonic()`` when it was started."""
    remaining = started_at + SAFE_LIFETIME - time.monotonic()
    if remaining > 0:
        time.sleep(remaining)
    client.shutdown()


#: A failed send that came back sooner than this never reached a broker (see above).
NEVER_LEFT = 0.05


class TolerantProducer(Producer):
    """The C++ producer, its sync and orderly sends tried again (a tenth of a second later,
    5 times at most) when they fail at once before any send of this producer succeeded: the
    connection race above. Every later failure, and any slower one, is raised as it is."""

    attempts = 5
    _connected = False

    def send_sync(self, msg: Any) -> Any:
        return self._send(functools.partial(Producer.send_sync, self, msg))

    def send_orderly(self, msg: Any, *args: Any, **kwargs: Any) -> Any:
        return self._send(functools.partial(Producer.send_orderly, self, msg, *args, **kwargs))

    def _send(self, send: Callable[[], T]) -> T:
        for attempt in range(1, self.attempts + 1):
            began = time.monotonic()
            try:
                result = send()
            except RocketMQException as exc:
                if (
                    self._connected
                    or attempt == self.attempts
                    or time.monotonic() - began > NEVER_LEFT
                    or "No route info of this topic" not in str(exc)
                ):
                    raise
                time.sleep(0.1)
            else:
                self._connected = True
                return result
        raise AssertionError("unreachable")
