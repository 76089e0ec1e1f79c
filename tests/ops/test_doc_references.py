"""References from the code and the docs lead somewhere a reader of the repository can follow.

The protocol facts the code relies on are written down in ``docs/`` (``docs/protocol.md`` for
the remoting wire); modules cite them as ``docs/X.md §N`` or link to ``docs/X.md#anchor``. This
test fails when a file points at a document outside the repository (the design notes the
project was started from), when a cited section number or anchor does not exist, and when a
Markdown link in README.md or docs/ leads to a missing file or heading.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from tests.support import ROOT

SKIP_DIRS = {".git", ".venv", "build", "mutants", "node_modules", ".mypy_cache", ".ruff_cache", "__pycache__"}
DOCS = ROOT / "docs"

# The notes outside the repository; built from parts so this file does not match itself.
OUTSIDE = re.compile(
    "|".join(
        [
            "REMOTING" + r"\.md",
            r"shared/" + "spec",
            r"shared/" + "protocol",
            r"\b(?:ACL|BENCHMARK|GRPC-5X|HA-REPLICATION|PUSH-CONSUMER|PYSPARK|SEND-STORE-CONSUME"
            + r"|STORAGE-AND-PULL|DESIGN|STYLE)"
            + r"\.md",
        ]
    )
)
SECTION = re.compile(r"§\s?(\d+(?:\.\d+)*)")
DOC_NAME = re.compile(r"(?:docs/)?\b([a-z][a-z0-9_-]*\.md)\b")
DOC_ANCHOR = re.compile(r"docs/([a-z][a-z0-9_-]*\.md)#([a-z0-9_-]+)")
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")


def files(*suffixes: str) -> Iterator[Path]:
    for path in ROOT.rglob("*"):
        parts = path.relative_to(ROOT).parts
        if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in parts):
            continue
        if path.suffix in suffixes and path.is_file():
            yield path


def relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


@cache
def headings(doc: Path) -> tuple[frozenset[str], frozenset[str]]:
    """A document's section numbers (``## 4. ...`` gives "4", ``### 4.3 ...`` gives "4.3")
    and its headings' anchors, as GitHub makes them."""
    numbers: set[str] = set()
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    in_code = False
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not re.match(r"#{1,6} ", line):
            continue
        title = line.lstrip("#").strip()
        number = re.match(r"(\d+(?:\.\d+)*)\.?\s", title)
        if number:
            numbers.add(number.group(1))
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return frozenset(numbers), frozenset(anchors)


def test_nothing_points_outside_the_repository() -> None:
    here = Path(__file__)
    found = [
        f"{relative(path)}:{number}: {line.strip()}"
        for path in files(".py", ".md")
        if path != here
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not found, "references to notes that are not in the repository:\n" + "\n".join(found)


def section_references(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line, document, section) for every ``§N`` in a file. A ``§`` belongs to the last
    document named before it on its line, else to the first ``docs/`` document the file names
    (its module docstring's)."""
    text = path.read_text(encoding="utf-8")
    named = re.search(r"docs/([a-z][a-z0-9_-]*\.md)", text)
    default = named.group(1) if named else ""
    for number, line in enumerate(text.splitlines(), 1):
        for match in SECTION.finditer(line):
            before = DOC_NAME.findall(line[: match.start()])
            doc = before[-1] if before else default
            yield number, doc, match.group(1)


def test_every_cited_section_exists() -> None:
    checked = 0
    wrong = []
    for path in files(".py"):
        for number, doc, section in section_references(path):
            target = DOCS / doc if doc else None
            if target is None or not target.is_file():
                wrong.append(f"{relative(path)}:{number}: §{section} names no document in docs/")
                continue
            checked += 1
            if section not in headings(target)[0]:
                wrong.append(f"{relative(path)}:{number}: docs/{doc} has no section {section}")
    assert not wrong, "\n".join(wrong)
    # the protocol modules cite docs/protocol.md throughout; finding none means the scan broke
    assert checked >= 30


def test_every_cited_anchor_exists() -> None:
    wrong = [
        f"{relative(path)}:{number}: docs/{doc} has no heading #{anchor}"
        for path in files(".py")
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for doc, anchor in DOC_ANCHOR.findall(line)
        if not (DOCS / doc).is_file() or anchor not in headings(DOCS / doc)[1]
    ]
    assert not wrong, "\n".join(wrong)


MARKDOWN = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


@pytest.mark.parametrize("page", MARKDOWN, ids=[relative(p) for p in MARKDOWN])
def test_markdown_links_lead_somewhere(page: Path) -> None:
    wrong = []
    for target in MD_LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):  # http(s), mailto: not ours to check
            continue
        file_part, _, anchor = target.partition("#")
        linked = (page.parent / file_part).resolve() if file_part else page
        if not linked.exists():
            wrong.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in headings(linked)[1]:
            wrong.append(f"{target}: no such heading")
    assert not wrong, f"{relative(page)}:\n" + "\n".join(wrong)


def test_the_protocol_page_has_the_sections_the_code_cites() -> None:
    numbers, _ = headings(DOCS / "protocol.md")
    assert {"1.2", "1.3", "1.4", "1.5", "3.1", "4.3", "4.7", "5.6", "7.3"} <= numbers


# Scripts in bench/ that measure nothing: the fuzzer, and helpers the benchmarks run.
NOT_BENCHMARKS = {"fuzz.py", "fake_broker.py", "grpc_load.py", "machine.py", "procs.py", "__init__.py"}


def test_every_benchmark_prints_the_machine_line() -> None:
    """README.md and docs/performance.md say so: a figure comes with the machine it was
    measured on."""
    benchmarks = [
        path
        for path in sorted((ROOT / "bench").glob("*.py"))
        if path.name not in NOT_BENCHMARKS and "__main__" in path.read_text(encoding="utf-8")
    ]
    assert len(benchmarks) >= 15
    silent = []
    for path in benchmarks:
        source = path.read_text(encoding="utf-8")
        imported = re.search(r"^from bench\.machine import summary(?: as (\w+))?(?:\s*#.*)?$", source, re.M)
        name = (imported.group(1) or "summary") if imported else None
        if name is None or not re.search(rf"print\({name}\(\)", source):
            silent.append(path.name)
    assert not silent, f"benchmarks that do not print bench/machine.py's line: {silent}"


MAKE_TARGETS = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
PYTHON_M = re.compile(r"python3? -m ([\w.]+)((?: --?[\w-]+(?: [^\s`|;&]+)?)*)")
IMPORT = re.compile(
    r"^\s*from ((?:aiorocketmq|protocol|broker|client|namesrv|pipeline|tools|dashboard)[\w.]*) import ([^#\n]+)",
    re.M,
)


@pytest.mark.parametrize("page", MARKDOWN, ids=[relative(p) for p in MARKDOWN])
def test_commands_in_the_docs_exist(page: Path) -> None:
    """``make X`` names a target, ``python -m M --opt`` a module of the tree that takes ``--opt``."""
    text = page.read_text(encoding="utf-8")
    wrong = [f"make {target}" for target in re.findall(r"`make ([\w-]+)", text) if target not in MAKE_TARGETS]
    for module, args in PYTHON_M.findall(text):
        base = ROOT.joinpath(*module.split("."))
        found = [path for path in (base.with_suffix(".py"), base / "__main__.py") if path.is_file()]
        if not found:
            wrong.append(f"python -m {module}: no such module in the tree")
            continue
        source = found[0].read_text(encoding="utf-8")
        wrong += [
            f"python -m {module} {opt}" for opt in re.findall(r"--[\w-]+", args) if f'"{opt}"' not in source
        ]
    assert not wrong, f"{relative(page)}:\n" + "\n".join(wrong)


@pytest.mark.parametrize("page", MARKDOWN, ids=[relative(p) for p in MARKDOWN])
def test_imports_in_the_docs_work(page: Path) -> None:
    """Every ``from aiorocketmq... import ...`` a page shows imports; the folders are only
    importable as ``aiorocketmq.<folder>`` once installed, so a bare ``from broker...`` is wrong."""
    wrong = []
    for module, names in IMPORT.findall(page.read_text(encoding="utf-8")):
        if not module.startswith("aiorocketmq"):
            wrong.append(f"from {module}: the installed package is aiorocketmq.{module}")
            continue
        imported = importlib.import_module(module)
        for part in names.strip(" ()\\").split(","):
            name = part.split(" as ")[0].strip()
            if not name.isidentifier():
                continue
            if not hasattr(imported, name) and importlib.util.find_spec(f"{module}.{name}") is None:
                wrong.append(f"from {module} import {name}")
    assert not wrong, f"{relative(page)}:\n" + "\n".join(wrong)
