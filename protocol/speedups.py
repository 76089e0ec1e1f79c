"""Which implementation of the hot codecs is active: the compiled ``_speedups`` extension
("C") or the pure-Python code beside it ("pure"). Decided once, here, at import.

The extension is built by ``pip install`` when a C compiler is present; without it, or with
``AIOROCKETMQ_PURE=1`` in the environment, the pure-Python codecs run. The two give identical
results, errors included (tests/protocol/test_speedups.py holds them to it); the choice is
only about speed. :mod:`.command` and :mod:`.message` bind their public names to whichever
is active.
"""

from __future__ import annotations

import os
from types import ModuleType

# The one switch for every compiled part: set to ``1`` to run the pure-Python codecs even where
# the extension is built.
from aiorocketmq.compiled import PURE_ENV, pure_requested


def _load() -> tuple[ModuleType | None, str]:
    if pure_requested(os.environ):
        return None, f"{PURE_ENV} is set"
    try:
        from . import _speedups
    except ImportError as exc:
        return None, f"the compiled extension is not built ({exc})"
    return _speedups, "compiled extension loaded"


#: The compiled module, or None when the pure-Python codecs are active.
compiled: ModuleType | None
#: Why: the environment variable, a missing build, or the extension loaded.
reason: str
compiled, reason = _load()

#: "C" or "pure".
ACTIVE = "C" if compiled is not None else "pure"


def describe() -> str:
    """One line for start-up logs: which codecs run and why."""
    return f"codecs: {ACTIVE} ({reason})"
