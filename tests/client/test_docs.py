"""Every Python snippet of ``docs/sdk.md`` runs, as its own process, against a real cluster."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import pytest

from tests.cluster import Cluster
from tests.support import ROOT

DOC = Path(__file__).resolve().parents[2] / "docs" / "sdk.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def test_the_guide_has_snippets() -> None:
    assert len(SNIPPETS) >= 8


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("index", range(len(SNIPPETS)))
async def test_snippet_runs(cluster: Cluster, index: int) -> None:
    code = SNIPPETS[index].replace("127.0.0.1:9876", cluster.namesrv_addr)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        cwd=str(ROOT),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        output, _ = await asyncio.wait_for(proc.communicate(), 90)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"snippet {index} did not finish") from None
    assert proc.returncode == 0, f"snippet {index} failed:\n{output.decode()}"
