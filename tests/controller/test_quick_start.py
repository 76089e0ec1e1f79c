"""Apache RocketMQ 5.3's controller quick start (``distribution/conf/controller/quick-start``),
run with our processes from its three files as Apache ships them: a name server with the
controller inside, two brokers of ``broker-a`` in controller mode. Only the store paths move
(from ``/tmp/rmqstore`` into the test's directory); the fixed addresses and ports
(``127.0.0.1:9876``, ``:9878``, ``30911``, ``30921``) are kept, which one simulated host makes
possible: its loopback and ports are its own. ``mqadmin`` runs on that host as a user would,
with the quick start's commands: a master is elected, the SyncStateSet holds both brokers,
messages are sent; the master is killed and the other broker takes over."""

from __future__ import annotations

import asyncio
import re
import sys
import time
from pathlib import Path

from tests.hosts import Host, Network
from tests.support import ServerProcess

#: The quick start's files, key for key (Apache's comments and license header left out).
NAMESRV_CONF = """\
enableControllerInNamesrv = true
controllerDLegerGroup = group1
controllerDLegerPeers = n0-127.0.0.1:9878
controllerDLegerSelfId = n0
"""
BROKER_CONF = """\
brokerClusterName = DefaultCluster
brokerName = broker-a
brokerId = -1
brokerRole = SLAVE
deleteWhen = 04
fileReservedTime = 48
enableControllerMode = true
controllerAddr = 127.0.0.1:9878
namesrvAddr = 127.0.0.1:9876
allAckInSyncStateSet=true
listenPort={port}
storePathRootDir=/tmp/rmqstore/node0{n}
storePathCommitLog=/tmp/rmqstore/node0{n}/commitlog
"""


async def mqadmin(host: Host, *args: str) -> str:
    """``mqadmin args`` on ``host``; its standard output (a failure raises with both streams)."""
    proc = await host.run(
        [sys.executable, "-m", "aiorocketmq.tools.mqadmin", *args],
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, f"mqadmin {' '.join(args)}: {out.decode()}{err.decode()}"
    return out.decode()


async def sync_state(host: Host, want: str, timeout: float = 60.0) -> str:
    """``getSyncStateSet`` as the quick start runs it, until its output matches ``want``."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            last = await mqadmin(host, "getSyncStateSet", "-a", "127.0.0.1:9878", "-b", "broker-a")
        except AssertionError as exc:
            last = str(exc)
        if re.search(want, last):
            return last
        await asyncio.sleep(0.5)
    raise AssertionError(f"getSyncStateSet never showed {want!r}; last:\n{last}")


async def test_apaches_quick_start_files_run_as_they_are(tmp_path: Path) -> None:
    async with Network(tmp_path) as net:
        host = await net.host("qs")
        try:
            await _quick_start(host)
        finally:
            for i, server in enumerate(host._servers):
                (host.dir / f"server{i}.log").write_text(server.output)


async def _quick_start(host: Host) -> None:
    store = host.dir / "rmqstore"
    # What the files leave to defaults under the home directory (the controller's store,
    # ~/DLedgerController; the name server's kv config) is the test's own too.
    home = {"HOME": str(host.dir)}
    (host.dir / "namesrv.conf").write_text(NAMESRV_CONF)
    await host.serve("aiorocketmq.namesrv", ["-c", str(host.dir / "namesrv.conf")], env=home)
    brokers: dict[int, ServerProcess] = {}
    for n, port in enumerate((30911, 30921)):
        conf = host.dir / f"broker-n{n}.conf"
        conf.write_text(BROKER_CONF.format(port=port, n=n).replace("/tmp/rmqstore", str(store)))
        brokers[port] = await host.serve("aiorocketmq.broker", ["-c", str(conf)], env=home)

    meta = await mqadmin(host, "getControllerMetaData", "-a", "localhost:9878")
    assert "#ControllerGroup\tgroup1" in meta and "#ControllerLeaderAddress\t127.0.0.1:9878" in meta, meta
    formed = await sync_state(host, r"#SyncStateSetNums\t2")
    master = re.search(r"#MasterAddr\t(\S+):(\d+)", formed)
    assert master is not None, formed
    old_port = int(master.group(2))
    assert old_port in brokers

    sent = await mqadmin(host, "sendMessage", "-n", "127.0.0.1:9876", "-t", "QuickStart", "-p", "before")
    assert "SEND_OK" in sent, sent
    epochs = await mqadmin(host, "getBrokerEpoch", "-n", "127.0.0.1:9876", "-b", "broker-a")
    assert epochs.count("#Epoch: EpochEntry{epoch=1, startOffset=0") == 2, epochs

    # The quick start's switch: kill -9 the master; the other broker becomes master.
    await brokers[old_port].kill()
    (other,) = set(brokers) - {old_port}
    switched = await sync_state(host, rf"#MasterAddr\t\S+:{other}\n#MasterEpoch\t2")
    assert "#MasterEpoch\t2" in switched
    deadline = time.monotonic() + 60
    while True:
        try:
            sent = await mqadmin(
                host, "sendMessage", "-n", "127.0.0.1:9876", "-t", "QuickStart", "-p", "after"
            )
            break
        except AssertionError:
            assert time.monotonic() < deadline, "no send succeeded within 60 s of the switch"
            await asyncio.sleep(0.5)
    assert "SEND_OK" in sent, sent  # only the new master is left to store it
