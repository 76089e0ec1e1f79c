"""Lifecycle rules for driving the official C++ client (PyPI ``rocketmq==0.4.4``) in tests.

librocketmq 1.2.x refreshes its routes on a timer whose first run comes 3 s after start, and
a client shut down while that refresh is running aborts the whole process (``std::terminate``
from its timer thread; seen as "Fatal Python error: Aborted" with ``shutdown`` on the stack
and ``updateTopicRouteInfoFromNameServer`` as the last log line). Tests therefore keep every
C++ client alive past that first refresh before shutting it down.

Its first send can also fail before leaving the client: while one of its threads is still
connecting to a broker, another asking for that connection gets none at once, and the send's own
retries skip the topic's only broker, so it is reported as "No route info of this topic".
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


def send_while_connecting(send: Callable[[], T], attempts: int = 5) -> T:
    """Blocking: ``send()``, again (a tenth of a second later, ``attempts`` times at most) when it
    failed as "No route info of this topic", which this client reports when the send never left
    it (above), so nothing can have been stored twice; any other failure is raised at once."""
    for attempt in range(1, attempts + 1):
        try:
            return send()
        except RocketMQException as exc:
            if "No route info of this topic" not in str(exc) or attempt == attempts:
                raise
            time.sleep(0.1)
    raise AssertionError("unreachable")


class TolerantProducer(Producer):
    """The C++ producer with its sync and orderly sends run by :func:`send_while_connecting`."""

    def send_sync(self, msg: Any) -> Any:
        return send_while_connecting(functools.partial(Producer.send_sync, self, msg))

    def send_orderly(self, msg: Any, *args: Any, **kwargs: Any) -> Any:
        return send_while_connecting(functools.partial(Producer.send_orderly, self, msg, *args, **kwargs))
