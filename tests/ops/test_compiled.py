"""The mypyc build of the hot modules (aiorocketmq/compiled.py): which build runs and why, that
the suite runs the compiled one where it is built, that ``AIOROCKETMQ_PURE=1`` gives the
sources, and the few source rules the compiler needs kept."""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aiorocketmq import compiled
from tests.support import ROOT

SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]
LIBRARY_FILE = compiled.LIBRARY.rpartition(".")[2] + SUFFIX


def test_the_suite_runs_the_compiled_build() -> None:
    """`make test` installs with a C compiler at hand, so the hot modules here are the
    compiled ones, unless the pure rerun asked for the sources."""
    if compiled.pure_requested(os.environ):
        assert not compiled.COMPILED and compiled.reason == f"{compiled.PURE_ENV} is set"
        for module in compiled.MODULES:
            assert importlib.import_module(module).__spec__.origin.endswith(".py"), module
        return
    assert compiled.COMPILED, compiled.reason
    for module in compiled.MODULES:
        origin = importlib.import_module(module).__spec__.origin
        assert origin is not None and origin.endswith(SUFFIX), (module, origin)


def test_the_pure_switch_imports_every_hot_module_from_its_source() -> None:
    probe = (
        "import importlib, aiorocketmq.compiled as c\n"
        "print(c.describe())\n"
        "for m in c.MODULES: print(importlib.import_module(m).__spec__.origin)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, compiled.PURE_ENV: "1"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    first, *origins = run.stdout.splitlines()
    assert first == f"modules: pure ({compiled.PURE_ENV} is set)"
    assert origins == [str(compiled.source_path(m)) for m in compiled.MODULES]


# -- decide(): on made-up package folders ----------------------------------------------------------


def fake_build(root: Path, *, digests: bool = True) -> None:
    """A package folder laid out as a build leaves it: sources, extensions, the group library
    and the recorded digests (the extensions are empty files; decide() only looks)."""
    (root / LIBRARY_FILE).write_bytes(b"")
    lines = []
    for module in compiled.MODULES:
        source = compiled.source_path(module, root)
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text(f"# {module}\n")
        os.utime(source, (1_000_000, 1_000_000))
        source.with_suffix(SUFFIX).write_bytes(b"")
        lines.append(f"{module} {compiled.source_digest(source)}")
    if digests:
        (root / compiled.SOURCES_FILE).write_text("\n".join(lines) + "\n")


def test_a_complete_build_is_used(tmp_path: Path) -> None:
    fake_build(tmp_path)
    assert compiled.decide({}, tmp_path) == (True, f"{len(compiled.MODULES)} modules compiled with mypyc")


def test_the_environment_switch_wins(tmp_path: Path) -> None:
    fake_build(tmp_path)
    assert compiled.decide({compiled.PURE_ENV: "1"}, tmp_path) == (False, f"{compiled.PURE_ENV} is set")
    assert compiled.decide({compiled.PURE_ENV: "0"}, tmp_path)[0]


def test_no_group_library_means_sources(tmp_path: Path) -> None:
    fake_build(tmp_path)
    (tmp_path / LIBRARY_FILE).unlink()
    used, reason = compiled.decide({}, tmp_path)
    assert not used and reason.startswith("not compiled")


def test_one_missing_extension_means_sources_for_all(tmp_path: Path) -> None:
    fake_build(tmp_path)
    module = compiled.MODULES[3]
    compiled.source_path(module, tmp_path).with_suffix(SUFFIX).unlink()
    assert compiled.decide({}, tmp_path) == (False, f"{module} has no compiled extension")


def test_an_edited_source_means_sources_for_all(tmp_path: Path) -> None:
    fake_build(tmp_path)
    source = compiled.source_path(compiled.MODULES[-1], tmp_path)
    source.write_text("# edited\n")  # newer than its extension, and its digest differs
    used, reason = compiled.decide({}, tmp_path)
    assert not used and reason.startswith(f"{compiled.MODULES[-1]} changed since compiled;"), reason


def test_every_edited_source_is_named(tmp_path: Path) -> None:
    fake_build(tmp_path)
    edited = [compiled.MODULES[1], compiled.MODULES[4]]
    for module in edited:
        compiled.source_path(module, tmp_path).write_text("# edited\n")
    used, reason = compiled.decide({}, tmp_path)
    assert not used and reason.startswith(f"{edited[0]}, {edited[1]} changed since compiled;"), reason


def test_a_touched_but_unchanged_source_keeps_the_build(tmp_path: Path) -> None:
    """A checkout or `git stash` that rewrites a file with the same bytes is not an edit."""
    fake_build(tmp_path)
    source = compiled.source_path(compiled.MODULES[0], tmp_path)
    source.write_text(source.read_text())
    assert compiled.decide({}, tmp_path)[0]
    # Without recorded digests, a newer source can only be taken as edited.
    (tmp_path / compiled.SOURCES_FILE).unlink()
    assert not compiled.decide({}, tmp_path)[0]


def test_modules_outside_the_package_are_refused() -> None:
    with pytest.raises(ValueError, match="not in the aiorocketmq package"):
        compiled.source_path("broker.store.store")


# -- source rules for the compiled modules -------------------------------------------------------


def compiled_trees() -> list[tuple[str, ast.Module]]:
    return [(m, ast.parse(compiled.source_path(m).read_text())) for m in compiled.MODULES]


def test_no_await_inside_except_or_finally_blocks() -> None:
    """With mypyc 2.4, a coroutine that awaits inside a finally block while an exception
    passes through leaves that exception set as the one being handled in its caller after the
    caller's own handler ended (``sys.exc_info()`` still returns it; tried on a small module,
    where an await inside an except block did not show it). The rule covers except blocks too,
    which keep the same state across the suspension; the compiled modules do such work after
    the try."""
    found = []
    for module, tree in compiled_trees():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Try):
                continue
            for block in [*(h.body for h in node.handlers), node.finalbody]:
                for statement in block:
                    for inner in ast.walk(statement):
                        if isinstance(inner, ast.Await | ast.AsyncFor | ast.AsyncWith):
                            found.append(f"{module}:{inner.lineno}")
    assert found == []


def test_an_exception_name_holds_one_type_per_function() -> None:
    """mypyc gives a local one type, the first ``except ... as name`` one's: a second handler
    binding the same name to another type fails at run time ("DiskFullError object expected;
    got OSError")."""
    found = []
    for module, tree in compiled_trees():
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            types: dict[str, set[str]] = {}
            for node in ast.walk(function):
                if isinstance(node, ast.ExceptHandler) and node.name and node.type is not None:
                    types.setdefault(node.name, set()).add(ast.unparse(node.type))
            found += [f"{module}.{function.name}: {n}" for n, t in types.items() if len(t) > 1]
    assert found == []


def test_every_compiled_module_says_so_first() -> None:
    """A reader of any of them learns before the rest that it is compiled, and where the rules
    it keeps are written (compiled.py's docstring)."""
    missing = []
    for module, tree in compiled_trees():
        doc = ast.get_docstring(tree) or ""
        if not doc.startswith("Compiled with mypyc (aiorocketmq/compiled.py"):
            missing.append(module)
    assert missing == []
    assert "No monkeypatching" in (compiled.__doc__ or "")


# -- the warning when a compiled build is installed but the sources run ---------------------------


def stale_copy(root: Path, edited: str) -> Path:
    """A copy of the package laid out as a build leaves it (stand-in extensions, recorded
    digests), with ``edited``'s source changed afterwards; returns the folder to import from."""
    package = root / "aiorocketmq"
    skip = shutil.ignore_patterns("__pycache__", "*.so", compiled.SOURCES_FILE)
    shutil.copytree(ROOT / "aiorocketmq", package, ignore=skip)  # the links become folders
    (package / LIBRARY_FILE).write_bytes(b"")
    lines = []
    for module in compiled.MODULES:
        source = compiled.source_path(module, package)
        os.utime(source, (1_000_000, 1_000_000))
        source.with_suffix(SUFFIX).write_bytes(b"")  # never loaded: the sources run
        lines.append(f"{module} {compiled.source_digest(source)}")
    (package / compiled.SOURCES_FILE).write_text("\n".join(lines) + "\n")
    with compiled.source_path(edited, package).open("a") as out:
        out.write("\n# an edit since the build\n")
    return root


PROBE = (
    "import importlib, aiorocketmq.compiled as c\n"
    "print(c.startup_level(), importlib.import_module(c.MODULES[-1]).__spec__.origin)\n"
)


def run_probe(path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != compiled.PURE_ENV} | {
        "PYTHONPATH": str(path),
        **env,
    }
    return subprocess.run(
        [sys.executable, "-c", PROBE], env=environ, cwd=path, capture_output=True, text=True, check=True
    )


def test_an_edited_module_is_named_in_a_warning_at_start_up(tmp_path: Path) -> None:
    edited = "aiorocketmq.broker.store.flush"
    root = stale_copy(tmp_path, edited)
    run = run_probe(root)
    level, origin = run.stdout.split()
    # the sources run, from the copy
    assert origin == str(compiled.source_path(compiled.MODULES[-1], root / "aiorocketmq"))
    assert int(level) == logging.WARNING  # the broker's start-up line is a warning too
    (line,) = run.stderr.splitlines()
    assert line.startswith(
        f"aiorocketmq: the {len(compiled.MODULES)} mypyc-compiled modules run interpreted"
    ), line
    assert line.endswith(f": {edited} changed since compiled; `pip install -e .` (or make) rebuilds"), line


def test_no_warning_when_the_sources_are_asked_for_or_nothing_was_compiled(tmp_path: Path) -> None:
    root = stale_copy(tmp_path, compiled.MODULES[0])
    asked = run_probe(root, **{compiled.PURE_ENV: "1"})
    assert asked.stderr == "" and int(asked.stdout.split()[0]) == logging.INFO
    (root / "aiorocketmq" / LIBRARY_FILE).unlink()
    uncompiled = run_probe(root)
    assert uncompiled.stderr == "" and int(uncompiled.stdout.split()[0]) == logging.INFO
