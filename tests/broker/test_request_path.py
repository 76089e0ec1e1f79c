"""``bench/request_path.py``, the in-process request-path benchmark, in a short window: every
request it feeds must be answered SUCCESS and every message must be in the store, or it fails
(so its figures always describe sends the broker took)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("batch", [1, 8])
async def test_request_path_bench_counts_only_stored_sends(batch: int) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.request_path",
        "--batch",
        str(batch),
        "--requests",
        "300",
        "--runs",
        "2",
        "--json",
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()[-3000:]
    figures = json.loads(out)
    # A warm-up of 30 requests, then two windows of 300 (whole reads of 15 requests).
    assert figures["messages_stored"] == (30 + 2 * 300) * batch
    assert figures["batch"] == batch
    assert 0 < figures["wall_us_per_request"] < 1e6
    assert 0 < figures["cpu_us_per_request"] < 1e6
