"""The console scripts (``[project.scripts]`` in pyproject.toml), and which extra brings each
optional dependency.

``pip install aiorocketmq`` is the SDK with what it needs, which is also all that ``mqadmin``,
``mqbench`` and ``mqnamesrv`` need; ``mqbroker`` and ``mqproxy`` need the ``server`` extra and ``mqdashboard``
the ``dashboard`` one. Each script imports its program only when run, inside a guard, so that a
missing extra ends it with one line on stderr naming the ``pip install`` that fixes it (exit
code 1) rather than with a ``ModuleNotFoundError`` traceback. The guard stays up while the
program runs: the broker imports grpcio only once it serves 5.x clients.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

#: The top-level name of each optional import, and the extra that installs it.
EXTRAS: dict[str, str] = {
    "yaml": "server",
    "grpc": "server",
    "google": "server",  # protobuf's package is google.protobuf
    "pysyncobj": "server",
    "starlette": "dashboard",
    "uvicorn": "dashboard",
    "jinja2": "dashboard",
    "pyspark": "spark",
    "pyarrow": "spark",
    "pandas": "spark",
    "numpy": "spark",
    "opentelemetry": "otel",
}


def extra_for(exc: ModuleNotFoundError) -> str | None:
    """The extra that installs the module ``exc`` could not find; None when it is not optional
    (a missing base dependency or a bug, which keeps its traceback)."""
    return EXTRAS.get((exc.name or "").partition(".")[0])


def install_hint(program: str, exc: ModuleNotFoundError) -> str | None:
    """The one line a script prints when ``exc`` comes from a missing extra."""
    extra = extra_for(exc)
    if extra is None:
        return None
    return f"{program}: the Python module {exc.name!r} is missing; pip install 'aiorocketmq[{extra}]' installs it"


@contextmanager
def _extras_of(program: str) -> Iterator[None]:
    try:
        yield
    except ModuleNotFoundError as exc:
        hint = install_hint(program, exc)
        if hint is None:
            raise
        print(hint, file=sys.stderr)
        raise SystemExit(1) from None


def mqnamesrv() -> int:
    with _extras_of("mqnamesrv"):
        from aiorocketmq.namesrv.__main__ import main

        return main()


def mqbroker() -> int:
    with _extras_of("mqbroker"):
        from aiorocketmq.broker.__main__ import main

        return main()


def mqproxy() -> int:
    with _extras_of("mqproxy"):
        from aiorocketmq.proxy.__main__ import main

        return main()


def mqcontroller() -> int:
    with _extras_of("mqcontroller"):
        from aiorocketmq.controller.__main__ import main

        return main()


def mqadmin() -> int:
    with _extras_of("mqadmin"):
        from aiorocketmq.tools.mqadmin import main

        return main()


def mqbench() -> int:
    with _extras_of("mqbench"):
        from aiorocketmq.tools.mqbench import main

        return main()


def mqdashboard() -> int:
    with _extras_of("mqdashboard"):
        from aiorocketmq.dashboard.cli import main

        return main()
