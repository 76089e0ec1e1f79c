"""What each install brings (pyproject.toml's dependencies and extras, aiorocketmq/scripts.py):
the SDK imports and runs with every extra's modules missing, each console script whose extra is
missing says which ``pip install`` fixes it, and an editable install is one that mypy finds
from another project. tests/ops/test_wheel.py installs the wheel with its base dependencies
only."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from aiorocketmq import scripts
from tests.support import ROOT

# Run first in a child: every optional module (scripts.EXTRAS, or those of the extras named)
# fails to import, as it would where its extra is not installed.
BLOCKER = """
import importlib.abc, sys
BLOCKED = {blocked!r}
class _NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, _NotInstalled())
"""


def without(*extras: str) -> str:
    """The blocker for the modules of ``extras`` (all of them when none is named)."""
    blocked = sorted(m for m, e in scripts.EXTRAS.items() if not extras or e in extras)
    return BLOCKER.format(blocked=blocked)


def run_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120
    )


SDK_PROBE = """
import asyncio, importlib, pkgutil, sys
import aiorocketmq
from aiorocketmq import Message, Producer
from aiorocketmq.protocol.errors import MQError

# every module of the SDK, not only those its __init__ imports
for package in ("aiorocketmq.client", "aiorocketmq.protocol"):
    for info in pkgutil.walk_packages(importlib.import_module(package).__path__, package + "."):
        importlib.import_module(info.name)

async def send() -> str:
    try:
        async with Producer("lean-producer", namesrv=sys.argv[1]) as producer:
            await producer.send(Message("LeanTopic", b"x"))
    except MQError as exc:
        return type(exc).__name__
    return "sent"

print(asyncio.run(send()))
"""


def test_the_sdk_imports_and_runs_without_any_extra(dead_address: str) -> None:
    run = run_python(without() + SDK_PROBE, dead_address)
    assert run.returncode == 0, run.stderr
    # the producer got as far as the name server's address, where nothing listens
    assert run.stdout.strip() == "ConnectionClosedError", run.stdout + run.stderr


@pytest.mark.parametrize(
    ("script", "extra"),
    [("mqbroker", "server"), ("mqproxy", "server"), ("mqcontroller", "server"), ("mqdashboard", "dashboard")],
)
def test_a_script_without_its_extra_says_what_to_install(script: str, extra: str) -> None:
    run = run_python(without(extra) + f"from aiorocketmq.scripts import {script}; sys.exit({script}())")
    assert run.returncode == 1, run.stderr
    (line,) = run.stderr.strip().splitlines()[-1:]
    assert line.startswith(f"{script}: the Python module "), run.stderr
    assert line.endswith(f"pip install 'aiorocketmq[{extra}]' installs it"), run.stderr
    assert "Traceback" not in run.stderr, run.stderr


@pytest.mark.parametrize(
    ("script", "args", "expected"),
    [
        ("mqnamesrv", ["-p"], "listenPort"),
        ("mqadmin", ["--help"], "mqadmin"),
        ("mqbench", ["--help"], "mqbench"),
    ],
)
def test_the_sdk_install_runs_the_tools_and_the_name_server(
    script: str, args: list[str], expected: str
) -> None:
    code = (
        without()
        + f"sys.argv[0] = {script!r}\nfrom aiorocketmq.scripts import {script}; sys.exit({script}())"
    )
    run = run_python(code, *args)
    assert run.returncode == 0, run.stderr
    assert expected in run.stdout, run.stdout


def test_a_missing_base_dependency_keeps_its_traceback() -> None:
    assert scripts.install_hint("mqbroker", ModuleNotFoundError(name="msgpack")) is None
    hint = scripts.install_hint("mqbroker", ModuleNotFoundError(name="google.protobuf"))
    assert (
        hint
        == "mqbroker: the Python module 'google.protobuf' is missing; pip install 'aiorocketmq[server]' installs it"
    )


def test_every_console_script_goes_through_the_guard() -> None:
    import tomllib

    entries = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert entries == {name: f"aiorocketmq.scripts:{name}" for name in entries}
    assert set(entries) == {
        "mqnamesrv",
        "mqbroker",
        "mqproxy",
        "mqcontroller",
        "mqadmin",
        "mqbench",
        "mqdashboard",
    }


# -- editable install ------------------------------------------------------------------------------


def copy_project(dst: Path) -> None:
    """What ``pip install -e`` reads: the build files, aiorocketmq/ with its links, and the
    folders they point to (no build outputs, so nothing of the working tree's build is used)."""
    skip = shutil.ignore_patterns("__pycache__", "*.so", "_compiled_sources.txt")
    dst.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(ROOT / name, dst / name)
    package_dirs = {p.name for p in (ROOT / "aiorocketmq").iterdir() if p.is_symlink()}
    for name in sorted(package_dirs | {"aiorocketmq"}):
        shutil.copytree(ROOT / name, dst / name, symlinks=True, ignore=skip)


def venv_with_our_dependencies(env_dir: Path) -> tuple[Path, str]:
    """A fresh virtual environment that reaches this interpreter's site-packages (pip,
    setuptools and the dependencies) through a .pth line: its python and its site-packages.
    A path added by a .pth line has its own .pth files ignored, so the working tree's editable
    install stays out of sight."""
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(purelib, "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python, purelib


def test_mypy_finds_an_editable_install_from_another_project(tmp_path: Path) -> None:
    """setuptools' default editable install for this layout is an import hook that type
    checkers do not run; setup.py's is a .pth line they read."""
    project, env_dir, app = tmp_path / "aiorocketmq", tmp_path / "venv", tmp_path / "app"
    copy_project(project)
    python, _ = venv_with_our_dependencies(env_dir)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"AIOROCKETMQ_MYPYC": "0"}
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", str(project)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert install.returncode == 0, install.stdout + install.stderr

    # An edit made after the install is what both the interpreter and mypy see.
    with (project / "aiorocketmq" / "__init__.py").open("a") as init:
        init.write('\nEDITED_AFTER_INSTALL: str = "yes"\n')
    app.mkdir()
    (app / "main.py").write_text(
        "from aiorocketmq import EDITED_AFTER_INSTALL, Message\n\n"
        "count: int = EDITED_AFTER_INSTALL\n"
        'reveal_type(Message("T", b"x"))\n'
    )
    where = subprocess.run(
        [
            str(python),
            "-c",
            "import aiorocketmq; print(aiorocketmq.__file__, aiorocketmq.EDITED_AFTER_INSTALL)",
        ],
        capture_output=True,
        text=True,
        cwd=app,
        env=env,
    )
    assert where.returncode == 0, where.stderr
    assert where.stdout.split() == [
        str(project / "build" / "editable" / "aiorocketmq" / "__init__.py"),
        "yes",
    ]

    check = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--python-executable",
            str(python),
            "--cache-dir",
            str(tmp_path / "mypy-cache"),
            "main.py",
        ],
        capture_output=True,
        text=True,
        cwd=app,
        env=env,
        timeout=300,
    )
    assert "import-not-found" not in check.stdout, check.stdout
    assert 'main.py:3: error: Incompatible types in assignment (expression has type "str"' in check.stdout
    assert 'main.py:4: note: Revealed type is "aiorocketmq.protocol.message.Message"' in check.stdout, (
        check.stdout
    )
