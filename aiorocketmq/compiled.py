"""Which build of the broker's hot modules runs: mypyc-compiled or the Python sources.

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
  recorded. Rebuilding (``pip install -e .``) brings the compiled build back.

The two builds behave the same; CI runs the protocol, store and broker unit tests both ways.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType

#: The compiled modules: the send, store and pull path of the broker, and the transport under
#: it. Each is type-checked Python that also runs as is.
MODULES: tuple[str, ...] = (
    "aiorocketmq.protocol.transport",
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
    if _extension(root / LIBRARY.rpartition(".")[2]) is None:
        return False, "not compiled (no C compiler at install time, or AIOROCKETMQ_MYPYC=0)"
    recorded = _recorded_digests(root)
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
            return False, f"{source.name} changed since it was compiled; `pip install -e .` rebuilds"
    return True, f"{len(MODULES)} modules compiled with mypyc"


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


def activate() -> None:
    """Decide once, before any of :data:`MODULES` is imported, which build runs."""
    global COMPILED, reason
    if reason is not None:
        return
    COMPILED, reason = decide(os.environ)
    if not COMPILED:
        sys.meta_path.insert(0, _SourceFinder())


def describe() -> str:
    """One line for start-up logs: which build of the hot modules runs, and why."""
    return f"modules: {'mypyc' if COMPILED else 'pure'} ({reason})"
