"""Fixtures for the dashboard's tests: a real cluster (name server + two brokers), a real
``mqdashboard`` process on a free port, and one headless Chromium per module, driven by
Playwright. The browser is Debian's ``chromium``: Playwright never downloads one here."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from playwright.async_api import Browser, BrowserContext, Page, async_playwright

from tests.cluster import Cluster
from tests.support import ROOT, ServerProcess

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: Set to a folder (docs/screenshots) to refresh the screenshots of docs/dashboard.md from a test run.
SCREENSHOTS_ENV = "DASHBOARD_SCREENSHOTS"


def ensure_chromium() -> str:
    """Debian's chromium, installed when missing and this user may (``make test`` does the
    same before the suite)."""
    if not os.path.exists(CHROMIUM) and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=False, env=env, capture_output=True)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "chromium"], check=False, env=env, capture_output=True
        )
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"the browser tests need Debian's chromium at {CHROMIUM}: apt-get install chromium")
    return CHROMIUM


class DashboardProcess(ServerProcess):
    """An ``mqdashboard`` whose ``--data-dir`` (history files, monitor settings) is a
    temporary folder of its own, removed when it stops, unless the test gives one."""

    def __init__(self, args: list[str]) -> None:
        self.data_dir: Path | None = None
        if "--data-dir" not in args:
            self.data_dir = Path(tempfile.mkdtemp(prefix="mqdashboard-data-"))
            args = [*args, "--data-dir", str(self.data_dir)]
        super().__init__("aiorocketmq.dashboard", args)

    async def stop(self, timeout: float = 20.0) -> int:
        try:
            return await super().stop(timeout)
        finally:
            self._remove_data()

    async def kill(self) -> int:
        try:
            return await super().kill()
        finally:
            self._remove_data()

    def _remove_data(self) -> None:
        if self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)


async def start_dashboard(namesrv: str, *extra: str) -> DashboardProcess:
    proc = DashboardProcess(["--namesrv", namesrv, "--port", "0", "--refresh", "1", "--timeout", "2", *extra])
    await proc.start()
    return proc


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    cluster = Cluster(tmp_path_factory.mktemp("cluster"))
    await cluster.start_namesrv()
    try:
        await cluster.start_broker("broker-a")
        await cluster.start_broker("broker-b")
        yield cluster
    finally:
        await cluster.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def dashboard(cluster: Cluster) -> AsyncIterator[str]:
    """The base URL of a real ``mqdashboard`` for the cluster; it must stop cleanly (exit 0)."""
    proc = await start_dashboard(cluster.namesrv_addr)
    try:
        yield f"http://127.0.0.1:{proc.port}"
    finally:
        code = await proc.stop()
        assert code == 0, f"mqdashboard exited with {code}:\n{proc.output}"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Browser]:
    executable = ensure_chromium()
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            await browser.close()


@pytest_asyncio.fixture(loop_scope="module")
async def page(browser: Browser) -> AsyncIterator[Page]:
    context: BrowserContext = await browser.new_context(viewport={"width": 1280, "height": 760})
    page = await context.new_page()
    # Every asset comes from the dashboard itself: a request anywhere else fails the test.
    outside: list[str] = []
    page.on(
        "request",
        lambda request: (
            outside.append(request.url)
            if not request.url.startswith(("http://127.0.0.1:", "data:", "about:"))
            else None
        ),
    )
    # And nothing a page carries breaks its own Content-Security-Policy (Chromium reports each
    # refused script, style or frame on the console).
    refused: list[str] = []
    page.on(
        "console",
        lambda message: refused.append(message.text) if "Content Security Policy" in message.text else None,
    )
    try:
        yield page
    finally:
        await context.close()
    assert not outside, f"the page fetched from outside: {outside}"
    assert not refused, f"the page broke its Content-Security-Policy: {refused}"


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where screenshots go: a temporary folder, or the one ``DASHBOARD_SCREENSHOTS`` names."""
    wanted = os.environ.get(SCREENSHOTS_ENV)
    if wanted:
        folder = Path(wanted) if Path(wanted).is_absolute() else ROOT / wanted
        folder.mkdir(parents=True, exist_ok=True)
        return folder
    return tmp_path_factory.mktemp("screenshots")
