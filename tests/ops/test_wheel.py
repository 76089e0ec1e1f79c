"""The built distribution installs one import package, ``aiorocketmq``, and works from outside
the repository: the wheel is built with ``pip wheel``, installed into a fresh virtual
environment, the README's SDK example runs there against a real cluster, and ``mqdashboard``
serves its pages and assets from there. Installed with its base dependencies only (what
``pip install aiorocketmq`` brings), the SDK runs and the servers' scripts say which extra
they need."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from aiorocketmq import compiled
from tests.client.test_docs import README_SNIPPETS
from tests.cluster import Cluster
from tests.ops.test_installs import SDK_PROBE, venv_with_our_dependencies
from tests.support import ROOT


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(ROOT),
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
        ],
        check=True,
        cwd=out,
    )
    (built,) = out.glob("aiorocketmq-*.whl")
    return built


def top_level_names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as zf:
        return {name.split("/", 1)[0] for name in zf.namelist()}


def test_wheel_holds_only_the_aiorocketmq_namespace(wheel: Path) -> None:
    names = top_level_names(wheel)
    dist_info = {name for name in names if name.endswith(".dist-info")}
    assert names - dist_info == {"aiorocketmq"}, names
    assert len(dist_info) == 1
    with zipfile.ZipFile(wheel) as zf:
        files = set(zf.namelist())
        entry_points = zf.read(f"{dist_info.pop()}/entry_points.txt").decode()
    for package in (
        "protocol",
        "namesrv",
        "broker",
        "broker/store",
        "broker/handlers",
        "client",
        "pipeline",
        "tools",
        "dashboard",
    ):
        assert f"aiorocketmq/{package}/__init__.py" in files, package
    assert "aiorocketmq/py.typed" in files
    # the compiled codecs, built by setup.py where a C compiler is present (as here)
    assert any(f.startswith("aiorocketmq/protocol/_speedups.") and f.endswith(".so") for f in files), files
    # the mypyc build of the hot modules: the group's shared library, an extension per module
    # beside its source, and the sources' digests the build recorded
    assert any(f.startswith("aiorocketmq/_native__mypyc.") and f.endswith(".so") for f in files), files
    for module in compiled.MODULES:
        stem = "/".join(module.split("."))
        assert f"{stem}.py" in files, module
        assert any(f.startswith(f"{stem}.") and f.endswith(".so") for f in files), module
    assert f"aiorocketmq/{compiled.SOURCES_FILE}" in files
    # The dashboard serves its pages and assets from the installed package.
    for asset in ("templates/base.html", "templates/cluster.html", "static/style.css", "static/live.js"):
        assert f"aiorocketmq/dashboard/{asset}" in files, asset
    for script in ("mqnamesrv", "mqbroker", "mqproxy", "mqadmin", "mqbench", "mqdashboard"):
        assert f"{script} = aiorocketmq.scripts:{script}" in entry_points, entry_points


def install_wheel(wheel: Path, env_dir: Path, app_dir: Path) -> Path:
    """A fresh virtual environment holding the wheel (:func:`venv_with_our_dependencies`);
    returns its python."""
    python, target = venv_with_our_dependencies(env_dir)
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(target)
    app_dir.mkdir()
    (app_dir / "client.py").write_text("raise SystemExit('the application client.py was imported')\n")
    where = subprocess.run(
        [str(python), "-c", "import aiorocketmq; print(aiorocketmq.__file__)"],
        check=True,
        capture_output=True,
        text=True,
        cwd=app_dir,
    ).stdout.strip()
    assert where.startswith(target), where
    return python


def test_an_installed_wheel_runs_its_compiled_modules(wheel: Path, tmp_path: Path) -> None:
    python = install_wheel(wheel, tmp_path / "venv", tmp_path / "app")
    probe = (
        "import aiorocketmq.compiled as c, importlib\n"
        "print(c.describe())\n"
        "for m in c.MODULES:\n"
        "    print(importlib.import_module(m).__spec__.origin)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", compiled.PURE_ENV)}
    run = subprocess.run(
        [str(python), "-c", probe], check=True, capture_output=True, text=True, cwd=tmp_path / "app", env=env
    )
    first, *origins = run.stdout.splitlines()
    assert first.startswith("modules: mypyc"), run.stdout
    assert len(origins) == len(compiled.MODULES) and all(o.endswith(".so") for o in origins), origins


async def test_readme_example_runs_from_an_installed_wheel(wheel: Path, tmp_path: Path) -> None:
    outside = tmp_path / "app"
    python = await asyncio.to_thread(install_wheel, wheel, tmp_path / "venv", outside)

    (code,) = README_SNIPPETS
    cluster = Cluster(tmp_path / "cluster")
    await cluster.start_namesrv()
    try:
        await cluster.start_broker("broker-a")
        proc = await asyncio.create_subprocess_exec(
            str(python),
            "-c",
            code.replace("127.0.0.1:9876", cluster.namesrv_addr),
            cwd=outside,
            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        output, _ = await asyncio.wait_for(proc.communicate(), 90)
        assert proc.returncode == 0, output.decode()
        assert b"Orders paid" in output, output.decode()
    finally:
        await cluster.stop()


async def test_dashboard_serves_from_an_installed_wheel(
    wheel: Path, tmp_path: Path, dead_address: str
) -> None:
    """The templates and assets come from the installed package, not the source tree."""
    outside = tmp_path / "app"
    python = await asyncio.to_thread(install_wheel, wheel, tmp_path / "venv", outside)
    silent = dead_address  # no name server: the page says so and still renders
    proc = await asyncio.create_subprocess_exec(
        str(python),
        "-m",
        "aiorocketmq.dashboard",
        "--namesrv",
        silent,
        "--port",
        "0",
        "--data-dir",
        str(tmp_path / "dashboard-data"),
        cwd=outside,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stderr is not None
        line = await asyncio.wait_for(proc.stderr.readline(), 30)
        match = re.search(rb"listening on 127\.0\.0\.1:(\d+)", line)
        assert match, line
        port = int(match.group(1))

        async def get(path: str) -> bytes:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
            data = await asyncio.wait_for(reader.read(), 30)
            writer.close()
            return data

        page = await get("/")
        assert page.startswith(b"HTTP/1.1 200 OK") and b'role="alert"' in page and silent.encode() in page
        for asset in ("/static/style.css", "/static/live.js"):
            assert (await get(asset)).startswith(b"HTTP/1.1 200 OK"), asset
    finally:
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 30) == 0


def base_dependencies(wheel: Path) -> list[metadata.Distribution]:
    """The distributions ``pip install`` of ``wheel`` brings without extras, transitively, as
    installed in this environment."""
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        requires = [
            line.partition(":")[2].strip()
            for line in zf.read(name).decode().splitlines()
            if line.startswith("Requires-Dist:")
        ]
    found: dict[str, metadata.Distribution] = {}
    pending = list(requires)
    while pending:
        requirement = Requirement(pending.pop())
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        key = requirement.name.lower().replace("-", "_")
        if key in found:
            continue
        found[key] = dist = metadata.distribution(requirement.name)
        pending += dist.requires or []
    return list(found.values())


def install_wheel_alone(wheel: Path, env_dir: Path, app_dir: Path) -> Path:
    """A fresh virtual environment holding the wheel and, linked from this environment, its
    base dependencies and nothing else; returns its python."""
    python = install_wheel(wheel, env_dir, app_dir)
    deps = env_dir / "base-dependencies"
    deps.mkdir()
    for dist in base_dependencies(wheel):
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops - {"__pycache__"}:
            source = Path(str(dist.locate_file(top)))
            if source.exists() and not (deps / top).exists():
                (deps / top).symlink_to(source)
    (pth,) = env_dir.glob("lib/python*/site-packages/dependencies.pth")
    pth.write_text(f"{deps}\n")
    return python


def test_the_wheel_with_its_base_dependencies_is_the_sdk(
    wheel: Path, tmp_path: Path, dead_address: str
) -> None:
    """What ``pip install aiorocketmq`` gives: the SDK, compiled, and none of the extras."""
    names = {d.metadata["Name"].lower() for d in base_dependencies(wheel)}
    assert not names & {"grpcio", "protobuf", "pyyaml", "starlette", "uvicorn", "jinja2", "pyspark"}, names
    app = tmp_path / "app"
    python = install_wheel_alone(wheel, tmp_path / "venv", app)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", compiled.PURE_ENV)}

    def run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(python), "-c", code, *args], capture_output=True, text=True, cwd=app, env=env
        )

    sdk = run(SDK_PROBE + "print(aiorocketmq.compiled.describe())", dead_address)
    assert sdk.returncode == 0, sdk.stderr
    outcome, build = sdk.stdout.splitlines()
    assert outcome == "ConnectionClosedError" and build.startswith("modules: mypyc"), sdk.stdout

    for script, extra in (("mqbroker", "server"), ("mqdashboard", "dashboard")):
        missing = run(f"import sys; from aiorocketmq.scripts import {script}; sys.exit({script}())")
        assert missing.returncode == 1, missing.stderr
        assert missing.stderr.strip().endswith(f"pip install 'aiorocketmq[{extra}]' installs it"), (
            missing.stderr
        )
        assert "Traceback" not in missing.stderr, missing.stderr
