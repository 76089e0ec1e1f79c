"""Every Python snippet of ``docs/sdk.md``, and the README's SDK example, runs as its own process
against a real cluster."""

from __future__ import annotations

import asyncio
import re
import sys
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
