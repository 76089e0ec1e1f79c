"""``python -m aiorocketmq.broker.local_cluster`` (what ``make run`` starts) with several broker
processes: both register in one cluster, a topic spreads over them, and SIGTERM stops every
process cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from pathlib import Path

from aiorocketmq import Admin, Message, Producer, compiled
from aiorocketmq.protocol import speedups
from tests.support import ROOT, die_with_parent, held_port, wait_until


async def test_two_brokers_share_the_cluster_and_stop_cleanly(tmp_path: Path) -> None:
    # The ports stay held (bound, never listening) until the servers listen on them.
    with contextlib.ExitStack() as ports:
        await run_two_brokers(tmp_path, ports)


async def run_two_brokers(tmp_path: Path, ports: contextlib.ExitStack) -> None:
    namesrv_port = ports.enter_context(held_port())
    first, second = sorted(ports.enter_context(held_port()) for _ in range(2))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "aiorocketmq.broker.local_cluster",
        "--data", str(tmp_path),
        "--namesrv-port", str(namesrv_port),
        "--broker-port", str(first),
        "--port-step", str(second - first),
        "--brokers", "2",
        cwd=ROOT,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        preexec_fn=die_with_parent,
    )  # fmt: skip
    namesrv = f"127.0.0.1:{namesrv_port}"
    try:
        async with Admin(namesrv) as admin:

            async def both_registered() -> bool:
                try:
                    info = await admin.cluster_info()
                except Exception:
                    return False
                return set(info.cluster_addr_table.get("DefaultCluster", ())) == {"broker-a", "broker-b"}

            await wait_until(both_registered, timeout=60)
            ports.close()
            info = await admin.cluster_info()
            addrs = {name: data.broker_addrs[0] for name, data in info.broker_addr_table.items()}
            assert addrs == {"broker-a": f"127.0.0.1:{first}", "broker-b": f"127.0.0.1:{second}"}
            await admin.create_topic("Spread", 2, cluster="DefaultCluster")
        async with Producer("spread-producer", namesrv) as producer:
            results = [await producer.send(Message("Spread", f"m{i}".encode())) for i in range(8)]
        assert {r.queue.broker_name for r in results} == {"broker-a", "broker-b"}
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    # It says which builds run (what `make run` shows): the codecs' and the hot modules'.
    said = err.decode()
    assert f"local cluster: {speedups.describe()}; {compiled.describe()}" in said, said
    for name in ("broker-a", "broker-b"):
        assert (tmp_path / name / "commitlog").is_dir()
