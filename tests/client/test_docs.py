"""Every Python snippet of ``docs/sdk.md``, and the README's SDK example, runs as its own process
against a real cluster (``tests/pipeline/test_readme.py`` runs the README's Spark snippet on a real
SparkSession). Every command the README shows exists with the options it is given: a make
target, a console script's subcommand and options (asked with ``-h``, not run), a module with a
``__main__`` that takes those options."""

from __future__ import annotations

import asyncio
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.cluster import Cluster
from tests.support import ROOT

DOC = ROOT / "docs" / "sdk.md"
README = ROOT / "README.md"


def python_snippets(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.S)


GUIDE_SNIPPETS = python_snippets(DOC)
# the README's Spark snippet needs a SparkSession; tests/pipeline covers the connector
README_SNIPPETS = [code for code in python_snippets(README) if "from aiorocketmq import" in code]
SNIPPETS = GUIDE_SNIPPETS + README_SNIPPETS


def test_the_docs_have_snippets() -> None:
    assert len(GUIDE_SNIPPETS) >= 8
    assert len(README_SNIPPETS) == 1


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("index", range(len(SNIPPETS)))
async def test_snippet_runs(cluster: Cluster, index: int, tmp_path: Path) -> None:
    code = SNIPPETS[index].replace("127.0.0.1:9876", cluster.namesrv_addr)
    log = tmp_path / "output.txt"
    with log.open("wb") as out:  # a file, so that a hung snippet's output can still be shown
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, cwd=str(ROOT), stdout=out, stderr=asyncio.subprocess.STDOUT
        )
        try:
            await asyncio.wait_for(proc.wait(), 90)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise AssertionError(f"snippet {index} did not finish:\n{log.read_text()}") from None
    assert proc.returncode == 0, f"snippet {index} failed:\n{log.read_text()}"


# -- the README's commands ----------------------------------------------------------------------

SCRIPTS: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
MAKE_TARGETS = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
# a console script's entry point, called as the installed script would call it
RUN_SCRIPT = (
    "import importlib, sys; module, _, func = sys.argv[1].partition(':'); "
    "sys.argv = sys.argv[2:]; sys.exit(getattr(importlib.import_module(module), func)())"
)


def readme_commands() -> list[list[str]]:
    """Each command of the README's shell blocks, and each inline one (`make ...`, `python -m ...`),
    as argv without the ``.venv/bin/`` prefix."""
    text = README.read_text(encoding="utf-8")
    lines = [line for block in re.findall(r"```sh\n(.*?)```", text, re.S) for line in block.splitlines()]
    lines += re.findall(r"`((?:\.venv/bin/)?(?:python -m|make|mq[a-z]+) [^`]+)`", text)
    commands: list[list[str]] = []
    for line in lines:
        argv = shlex.split(line, comments=True)
        if argv:
            argv[0] = argv[0].removeprefix(".venv/bin/")
            if argv not in commands:
                commands.append(argv)
    return commands


COMMANDS = readme_commands()


def options(argv: list[str]) -> list[str]:
    return [arg for arg in argv if re.match(r"-{1,2}[A-Za-z]", arg)]


def test_the_readme_shows_commands() -> None:
    names = {argv[0] for argv in COMMANDS}
    assert {"make", "mqadmin", "mqbench", "python"} <= names, names


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(argv)[:60] for argv in COMMANDS])
def test_readme_command_exists(argv: list[str]) -> None:
    name, args = argv[0], argv[1:]
    if name == "make":
        # VAR=value words set make variables; each must be one the Makefile reads.
        variables = {arg.split("=", 1)[0] for arg in args if "=" in arg}
        makefile = (ROOT / "Makefile").read_text()
        assert all(re.search(rf"\$\({v}\)|^{v}\s*[?:]?=", makefile, re.M) for v in variables), variables
        targets = {arg for arg in args if "=" not in arg}
        assert targets <= MAKE_TARGETS, f"no such make target: {targets - MAKE_TARGETS}"
    elif name in ("python", "python3"):
        assert args[0] == "-m", argv
        module = args[1]
        # found in the tree (aiorocketmq/ links to the folders) without importing its package
        base = ROOT.joinpath(*module.split("."))
        found = [path for path in (base.with_suffix(".py"), base / "__main__.py") if path.is_file()]
        assert found, f"no module {module}"
        source = found[0].read_text(encoding="utf-8")
        assert "__main__" in source, f"{module} cannot be run with -m"
        missing = [opt for opt in options(args[2:]) if f'"{opt}"' not in source]
        assert not missing, f"{module} takes no {missing}"
    elif name == "docker":
        compose = (ROOT / "docker-compose.yml").read_text()
        assert args[0] == "compose"
        if "--profile" in args:
            assert f"- {args[args.index('--profile') + 1]}" in compose
    elif name in SCRIPTS:
        # a subcommand (mqadmin clusterList, mqbench producer) comes before the first option
        head = [arg for arg in args[:1] if not arg.startswith("-")]
        proc = subprocess.run(
            [sys.executable, "-c", RUN_SCRIPT, SCRIPTS[name], name, *head, "-h"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert proc.returncode == 0, f"{name} {' '.join(head)} -h failed:\n{proc.stderr[-2000:]}"
        missing = [
            opt
            for opt in options(args)
            if not re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", proc.stdout)
        ]
        assert not missing, f"{name} {' '.join(head)} has no {missing}:\n{proc.stdout}"
    else:
        raise AssertionError(f"the README shows {name!r}, which this test does not know how to check")
