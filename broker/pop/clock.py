"""The one clock of POP's state: pop times, invisible-time deadlines and the expiry of receipt
handles are all read through :func:`now_ms`, looked up on this module at each call, so a test
that holds the time (``monkeypatch.setattr(clock, "now_ms", ...)``) holds it for every part
of :class:`~.service.PopService` at once."""

from __future__ import annotations

import time


def now_ms() -> int:
    """Wall-clock time in milliseconds, the unit of pop times and invisible times."""
    return time.time_ns() // 1_000_000
