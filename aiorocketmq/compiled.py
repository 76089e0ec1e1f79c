"""Which build of the hot modules runs: mypyc-compiled or the Python sources; and the rules
their sources keep so that mypyc can compile them.

``pip install`` compiles the modules named in :data:`MODULES` with mypyc when a C compiler is
at hand (setup.py reads this file for the list). The compiled build is the same typed Python,
turned into a C extension per module plus one shared library (:data:`GROUP`), as black and
mypy ship themselves. Whether it runs is decided once, by :func:`activate`, before any of
those modules is imported; the answer is all or nothing, because compiled modules of one group
call each other's functions directly in C, so a half-compiled set would mix two versions of
the code.

The sources run instead when:

- ``AIOROCKETMQ_PURE=1`` is set (the same switch as for the C codecs, protocol/speedups.py);
- the shared library or a module's extension is missing (no compiler at install time);
- a module's source changed since it was compiled (an editable checkout being worked on):
  its file is newer than its extension and its SHA-256 differs from the one the build
  recorded. Rebuilding (``pip install -e .``, or ``make``) brings the compiled build back.

The last two, with a compiled build installed, cost about 1.6x the CPU per send, so
:func:`activate` logs a WARNING naming the modules and why, and the broker's start-up line is
a warning too. The two builds behave the same; CI runs the protocol, store and broker unit
tests both ways.

Each compiled module says so in the first line of its docstring and keeps to mypyc's rules
(tests/ops/test_compiled.py checks the header and the last two rules):

- Annotations are checked at run time: a value of another type than declared raises
  ``TypeError`` where it crosses a function, attribute or collection boundary, so no ``cast``
  or ``# type: ignore`` that hides a wrong type.
- Classes are native: every attribute is declared with its type (in the class body or
  ``__init__``); none is added later, deleted, or reached through ``setattr``/``__dict__``;
  interpreted code subclasses one only where it is marked
  ``@mypyc_attr(allow_interpreted_subclasses=True)``.
- No monkeypatching: calls to functions, classes and ``Final`` constants of compiled modules
  are bound when compiled, so replacing one afterwards (``mock.patch``, assigning to a module
  attribute) does not reach compiled callers; tests pass doubles in, they do not patch.
- No frame tricks (``locals()``, ``sys._getframe``, ``inspect`` on these functions).
- No ``await`` inside an ``except`` or ``finally`` block, and one exception type per
  ``except ... as name`` in a function (mypyc 2.4 gets both wrong at run time).
- The module passes ``mypy`` as configured in pyproject.toml: a failed check builds none of
  them (setup.py warns) and all of them run interpreted.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType

#: The compiled modules: the send, store and pull path of the broker, and the transport under
#: it. Each is type-checked Python that also runs as is.
MODULES: tuple[str, ...] = (
    "aiorocketmq.protocol.transport",
    "aiorocketmq.broker.accept",
    "aiorocketmq.broker.handlers.pull",
    "aiorocketmq.broker.handlers.send",
    "aiorocketmq.broker.long_polling",
    "aiorocketmq.broker.stats",
    "aiorocketmq.broker.topics",
    "aiorocketmq.broker.writer",
    "aiorocketmq.broker.store.commit_log",
    "aiorocketmq.broker.store.consume_queue",
    "aiorocketmq.broker.store.flush",
    "aiorocketmq.broker.store.index",
    "aiorocketmq.broker.store.mapped_file",
    "aiorocketmq.broker.store.store",
    "aiorocketmq.broker.store.append",
    "aiorocketmq.broker.store.queues",
    "aiorocketmq.broker.store.dispatch",
    "aiorocketmq.broker.store.reads",
    "aiorocketmq.broker.store.disk",
    "aiorocketmq.broker.store.store_stats",
    "aiorocketmq.broker.store.workers",
)

#: mypyc's group, and the shared library it builds for it (``aiorocketmq/_native__mypyc.*.so``).
GROUP = "aiorocketmq._native"
LIBRARY = GROUP + "__mypyc"
#: Written by the build next to the shared library: ``module sha256`` per line.
SOURCES_FILE = "_compiled_sources.txt"
#: Set to ``1`` to run the Python code (these modules' sources, and the codecs' pure twins in
#: protocol/speedups.py) even where the compiled build is installed.
PURE_ENV = "AIOROCKETMQ_PURE"

_PACKAGE_DIR = Path(__file__).resolve().parent


def source_path(module: str, root: Path = _PACKAGE_DIR) -> Path:
    """The ``.py`` file of one of :data:`MODULES`, under the package folder ``root``."""
    parts = module.split(".")
    if parts[0] != "aiorocketmq":
        raise ValueError(f"{module} is not in the aiorocketmq package")
    return root.joinpath(*parts[1:-1], parts[-1] + ".py")


def source_digest(path: Path) -> str:
    """The SHA-256 the build records for a source file, hex."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _extension(path_without_suffix: Path) -> Path | None:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = path_without_suffix.with_name(path_without_suffix.name + suffix)
        if candidate.exists():
            return candidate
    return None


def _recorded_digests(root: Path) -> dict[str, str]:
    try:
        text = (root / SOURCES_FILE).read_text()
    except OSError:
        return {}
    digests = {}
    for line in text.splitlines():
        module, _, digest = line.partition(" ")
        if digest:
            digests[module] = digest.strip()
    return digests


def pure_requested(environ: Mapping[str, str]) -> bool:
    """Whether :data:`PURE_ENV` asks for the Python code (set to anything but empty or 0)."""
    return environ.get(PURE_ENV, "").strip() not in ("", "0")


def decide(environ: Mapping[str, str], root: Path = _PACKAGE_DIR) -> tuple[bool, str]:
    """Whether the compiled build can run from the package folder ``root``, and why (or why not)."""
    if pure_requested(environ):
        return False, f"{PURE_ENV} is set"
    if not installed(root):
        return False, "not compiled (no C compiler at install time, or AIOROCKETMQ_MYPYC=0)"
    recorded = _recorded_digests(root)
    changed = []
    for module in MODULES:
        source = source_path(module, root)
        extension = _extension(source.with_suffix(""))
        if extension is None:
            return False, f"{module} has no compiled extension"
        try:
            newer = source.stat().st_mtime > extension.stat().st_mtime
        except OSError:
            continue  # an installed build without its sources: the extension is all there is
        if newer and recorded.get(module) != source_digest(source):
            changed.append(module)
    if changed:
        return False, f"{', '.join(changed)} changed since compiled; `pip install -e .` (or make) rebuilds"
    return True, f"{len(MODULES)} modules compiled with mypyc"


def installed(root: Path = _PACKAGE_DIR) -> bool:
    """Whether a compiled build (the group's shared library) sits in the package folder ``root``."""
    return _extension(root / LIBRARY.rpartition(".")[2]) is not None


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Imports :data:`MODULES` from their ``.py`` files even where an extension sits beside them."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _MODULE_SET or not path:
            return None
        leaf = fullname.rpartition(".")[2] + ".py"
        for folder in path:
            source = os.path.join(folder, leaf)
            if os.path.exists(source):
                return importlib.util.spec_from_file_location(fullname, source)
        return None


_MODULE_SET = frozenset(MODULES)

#: True when the compiled build runs; set by :func:`activate`.
COMPILED = False
#: Why the compiled build runs or not; None until :func:`activate` decides.
reason: str | None = None
#: True when a compiled build is installed but the sources run without being asked to.
degraded = False

log = logging.getLogger(__name__)


def activate(root: Path = _PACKAGE_DIR) -> None:
    """Decide once, before any of :data:`MODULES` is imported, which build runs; log a warning
    when a compiled build is installed and still the sources run without being asked to."""
    global COMPILED, reason, degraded
    if reason is not None:
        return
    COMPILED, reason = decide(os.environ, root)
    if not COMPILED:
        sys.meta_path.insert(0, _SourceFinder())
        degraded = installed(root) and not pure_requested(os.environ)
        if degraded:
            log.warning(
                "aiorocketmq: the %d mypyc-compiled modules run interpreted, about 1.6x the CPU per send: %s",
                len(MODULES),
                reason,
            )


def describe() -> str:
    """One line for start-up logs: which build of the hot modules runs, and why."""
    return f"modules: {'mypyc' if COMPILED else 'pure'} ({reason})"


def startup_level() -> int:
    """The level of a server's start-up line: WARNING while a compiled build is installed but
    not running (see :data:`degraded`), INFO otherwise."""
    return logging.WARNING if degraded else logging.INFO
