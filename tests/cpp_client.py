"""Lifecycle rules for driving the official C++ client (PyPI ``rocketmq==0.4.4``) in tests.

librocketmq 1.2.x refreshes its routes on a timer whose first run comes 3 s after start, and
a client shut down while that refresh is running aborts the whole process (``std::terminate``
from its timer thread; seen as "Fatal Python error: Aborted" with ``shutdown`` on the stack
and ``updateTopicRouteInfoFromNameServer`` as the last log line). Tests therefore keep every
C++ client alive past that first refresh before shutting it down.
"""

from __future__ import annotations

import time
from typing import Protocol

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
