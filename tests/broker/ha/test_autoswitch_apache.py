"""Our controller-mode replication with Apache 5.3.3's: an Apache broker in controller mode,
elected master by Apache's controller (embedded in its name server, on loopback), has our
store as its slave. The bytes we copy are Apache's commit log, our epoch file says what
Apache's says, and the Apache master counts our acknowledgements (GET_BROKER_HA_STATUS)."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from aiorocketmq.broker.config import BrokerConfig
from aiorocketmq.broker.ha.autoswitch import AutoSwitchReplication
from aiorocketmq.broker.ha.autoswitch.epoch import decode_file
from aiorocketmq.broker.store import MessageStore
from aiorocketmq.protocol.codes import ResponseCode
from aiorocketmq.protocol.transport import connect
from tests.broker.ha.support import held_port_pair
from tests.broker.requests import send
from tests.interop.harness import (
    ApacheController,
    ApacheControllerBroker,
    Toolchain,
    _port_free,
    _remoting_call,
    await_loopback_controller,
    build_java53_only,
    free_port,
    launch_loopback_controller,
    remoting_header,
)
from tests.store.support import STORE_HOST, small_config

pytestmark = pytest.mark.timeout(300)

TOPIC = "AutoSwitchInterop"
FILE_SIZE = 1 << 20


@pytest.fixture(scope="module")
def toolchain() -> Toolchain:
    # A missing JDK or Maven fails the test with the install hint (never a skip).
    return build_java53_only()


@pytest.fixture(scope="module")
def controllers(
    toolchain: Toolchain, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ApacheController, ApacheController]]:
    """Two Apache controllers (each in its name server) for the module, started side by side:
    one as configured for the suite, one with unclean elections (``enableElectUncleanMaster``).
    Each test has a broker group of its own (:func:`group`): the controller keeps its state per
    group."""
    root = tmp_path_factory.mktemp("controllers")
    # Launched from this (main) thread, awaited in threads: a JVM dies with the thread that
    # forked it.
    started = [launch_loopback_controller(toolchain, root / "clean")]
    try:
        started.append(launch_loopback_controller(toolchain, root / "unclean", enableElectUncleanMaster=True))
        with ThreadPoolExecutor(2) as pool:
            for waited in [pool.submit(await_loopback_controller, c) for c in started]:
                waited.result()
        yield started[0], started[1]
    finally:
        for controller in started:
            controller.kill()  # nothing to keep: no need for Apache's graceful shutdown (~10 s)


@pytest.fixture
def controller(controllers: tuple[ApacheController, ApacheController]) -> ApacheController:
    return controllers[0]


@pytest.fixture
def unclean_controller(controllers: tuple[ApacheController, ApacheController]) -> ApacheController:
    return controllers[1]


_groups = itertools.count(1)


@pytest.fixture
def group() -> str:
    """The test's own broker group (brokerName), fresh to the module's controllers: broker ids
    from 1, no master, no SyncStateSet, epoch 0."""
    return f"broker-a{next(_groups)}"


def _broker_port() -> int:
    while True:
        port = free_port()
        if all(_port_free(p) for p in (port - 2, port + 1)):
            return port


async def _until(predicate: object, timeout: float, what: str) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


def _commit_log(root: Path, end: int) -> bytes:
    chunks = []
    for path in sorted((root / "store" / "commitlog").iterdir()):
        start = int(path.name)
        if start >= end:
            break
        with open(path, "rb") as handle:
            chunks.append(handle.read(min(FILE_SIZE, end - start)))
    return b"".join(chunks)


async def test_an_apache_master_replicates_to_our_slave(
    controller: ApacheController, group: str, toolchain: Toolchain, tmp_path: Path
) -> None:
    apache = ApacheControllerBroker(
        toolchain,
        tmp_path / "apache",
        "127.0.0.1",
        controller.namesrv_addr,
        controller.addr,
        name=group,
        port=_broker_port(),
        overrides={"mappedFileSizeCommitLog": FILE_SIZE},
    )
    await asyncio.to_thread(apache.start)
    store = MessageStore(
        small_config(tmp_path / "ours", mappedFileSizeCommitLog=FILE_SIZE), store_host=STORE_HOST
    )
    await store.start()
    repl: AutoSwitchReplication | None = None
    try:
        replica: dict[str, str] = {}

        async def apache_is_master() -> bool:
            nonlocal replica
            try:
                replica = await asyncio.to_thread(
                    remoting_header, controller.addr, 1004, {"brokerName": group}
                )
            except (OSError, RuntimeError):
                return False
            return replica.get("masterAddress") == apache.addr

        await _until(apache_is_master, 60, "the Apache broker to be elected")
        epoch, master_id = int(replica["masterEpoch"]), int(replica["masterBrokerId"])
        conn = await connect("127.0.0.1", apache.port, timeout=5.0)
        try:
            sent = []
            for n in range(150):
                body = f"before-{n}-".encode() + bytes(200 + n % 50)
                response = await send(conn, TOPIC, body, queue_id=n % 4, keys=f"K{n}")
                assert response.code == ResponseCode.SUCCESS, response.remark
                sent.append(body)

            with held_port_pair() as port:
                config = BrokerConfig.model_validate({"listenPort": port, "brokerName": group, "brokerId": 2})
                repl = AutoSwitchReplication(config, store.config, store)
                repl.local_broker_id = 2
                await repl.start("127.0.0.1")
            await repl.change_to_slave(f"127.0.0.1:{apache.port + 1}", epoch, master_id)

            for n in range(150):
                body = f"after-{n}-".encode() + bytes(300)
                response = await send(conn, TOPIC, body, queue_id=n % 4, keys=f"A{n}")
                # Apache's master with allAckInSyncStateSet: once it proposed our slave for the
                # SyncStateSet, a send waits for our acknowledgement too.
                assert response.code == ResponseCode.SUCCESS, response.remark
                sent.append(body)
        finally:
            conn.close()

        async def all_copied() -> bool:
            return sum(store.get_max_offset(TOPIC, q) for q in range(4)) == len(sent)

        await _until(all_copied, 60, "every message on our slave")
        end = store.commit_log_max_offset
        ours: list[bytes] = []
        offset = store.commit_log_min_offset
        while (view := store.commit_log.data_at(offset, 1 << 20)) is not None and len(view):
            ours.append(bytes(view))
            offset += len(view)
        assert b"".join(ours) == _commit_log(apache.root, end)
        got: list[bytes] = []
        for queue_id in range(4):
            queue_offset = 0
            while queue_offset < store.get_max_offset(TOPIC, queue_id):
                result = store.get_messages("g", TOPIC, queue_id, queue_offset, 32)
                assert result.buffers
                got.extend(bytes(b) for b in result.buffers)
                queue_offset = result.next_begin_offset
        for body in sent:
            assert any(body in record for record in got)
        assert len(store.query_by_key(TOPIC, "A77", 5, 0, 1 << 62).records) == 1

        # Our epoch file holds Apache's entries, in Apache's format.
        theirs = decode_file((apache.root / "store" / "epochFileCheckpoint").read_text())
        assert [(e.epoch, e.start_offset) for e in repl.epoch_entries()] == [
            (e.epoch, e.start) for e in theirs
        ]
        # (Elected at epoch N with an empty log, Apache keeps its first entry only: an entry
        # needs a bigger start than the last one.)
        assert repl.last_epoch == theirs[-1].epoch <= epoch
        ours_file = decode_file((tmp_path / "ours" / "epochFileCheckpoint").read_text())
        assert ours_file == theirs

        # The Apache master has our acknowledgement of everything.
        async def acked() -> bool:
            status = json.loads(await asyncio.to_thread(_remoting_call, apache.addr, 907) or b"{}")
            links = status.get("haConnectionInfo") or []
            return bool(links) and links[0].get("slaveAckOffset") == store.commit_log_max_offset

        await _until(acked, 30, "the Apache master to see our ack")
        assert repl.confirm_offset() <= store.commit_log_max_offset
    finally:
        if repl is not None:
            await repl.stop()
        await store.shutdown()
        await asyncio.to_thread(apache.kill)  # (its store is not read after the test)


# -- a mixed group: our broker process and Apache's, failing over both ways -----------------------

#: Our broker in controller mode (as Apache's quick-start broker-n0.conf sets Apache's), with the
#: periods shortened for a test.
OUR_CONTROLLER_BROKER: dict[str, object] = {
    "brokerId": -1,
    "brokerRole": "SLAVE",
    "enableControllerMode": "true",
    "allAckInSyncStateSet": "true",
    "syncBrokerMetadataPeriod": 1000,
    "checkSyncStateSetPeriod": 1000,
    "controllerHeartBeatTimeoutMills": 3000,
    "haMaxTimeSlaveNotCatchup": 5000,
}


def _log_prefix(directory: Path, end: int) -> bytes:
    """The commit log in ``directory`` up to ``end`` (past a log's end, Apache's files may still
    hold what a truncation cut: only the positions say where a log ends)."""
    chunks = []
    for path in sorted(p for p in directory.iterdir() if p.name.isdigit()):
        start = int(path.name)
        if start >= end:
            break
        with open(path, "rb") as handle:
            chunks.append(handle.read(end - start))
    return b"".join(chunks)[: max(end, 0)]


async def _log_end(addr: str) -> int | None:
    """A broker's commit-log end (GET_BROKER_RUNTIME_INFO's ``commitLogMaxOffset``)."""
    body = await asyncio.to_thread(_remoting_call, addr, 28)
    if not body:
        return None
    value = (json.loads(body).get("table") or {}).get("commitLogMaxOffset")
    return int(value) if value else None


async def _same_logs(ours: str, our_dir: Path, apache: str, apache_dir: Path) -> bool:
    """Whether our broker at ``ours`` and Apache's at ``apache`` end their commit logs at the
    same offset, with the same bytes before it."""
    end, other = await _log_end(ours), await _log_end(apache)
    if end is None or end != other:
        return False
    return await asyncio.to_thread(lambda: _log_prefix(our_dir, end) == _log_prefix(apache_dir, end))


async def _sends(addr: str, prefix: str, count: int) -> None:
    host, port = addr.rsplit(":", 1)
    conn = await connect(host, int(port), timeout=5.0)
    try:
        for n in range(count):
            response = await send(conn, TOPIC, f"{prefix}-{n}".encode(), queue_id=n % 4)
            assert response.code == ResponseCode.SUCCESS, (prefix, n, response.code, response.remark)
    finally:
        conn.close()


async def _send_ok(addr: str) -> bool:
    host, port = addr.rsplit(":", 1)
    try:
        conn = await connect(host, int(port), timeout=3.0)
    except OSError:
        return False
    try:
        return (await send(conn, TOPIC, b"probe")).code == ResponseCode.SUCCESS
    except Exception:
        return False
    finally:
        conn.close()


async def test_a_mixed_group_fails_over_both_ways(
    controller: ApacheController, group: str, toolchain: Toolchain, tmp_path: Path
) -> None:
    from tests.cluster import Cluster

    ours = Cluster(tmp_path / "ours", cluster_name="DefaultCluster")
    ours.namesrv_ports.append(controller.namesrv_port)
    apache = ApacheControllerBroker(
        toolchain,
        tmp_path / "apache",
        "127.0.0.1",
        controller.namesrv_addr,
        controller.addr,
        name=group,
        port=_broker_port(),
    )
    settings = {"brokerName": group, "controllerAddr": controller.addr, **OUR_CONTROLLER_BROKER}

    async def master_is(addr: str) -> bool:
        try:
            info = await asyncio.to_thread(remoting_header, controller.addr, 1004, {"brokerName": group})
        except (OSError, RuntimeError):
            return False
        return info.get("masterAddress") == addr

    try:
        # Ours first: elected master. Apache's joins as its slave.
        r1 = await ours.start_broker("r1", **settings)
        assert r1.process is not None
        await r1.process.wait_for_line(r"is now SYNC_MASTER \(brokerId 0\)")
        await asyncio.to_thread(apache.start)

        async def r1_takes_sends() -> bool:
            return await _send_ok(r1.addr)

        # allAckInSyncStateSet: sends succeed once Apache's slave is in the SyncStateSet and acks.
        await _until(r1_takes_sends, 60, "our master to take sends")
        await _sends(r1.addr, "ours", 40)
        our_log = r1.store_dir / "commitlog"
        apache_log = apache.root / "store" / "commitlog"

        async def same_logs() -> bool:
            return await _same_logs(ours.brokers["r1"].addr, our_log, apache.addr, apache_log)

        await _until(same_logs, 30, "Apache's slave to hold our commit log")
        status = json.loads(await asyncio.to_thread(_remoting_call, apache.addr, 907) or b"{}")
        assert status.get("master") is False
        ours_epochs = decode_file((r1.store_dir / "epochFileCheckpoint").read_text())
        assert decode_file((apache.root / "store" / "epochFileCheckpoint").read_text()) == ours_epochs

        # Our master dies: Apache's slave is elected and takes sends.
        await ours.kill_broker("r1")
        await _until(lambda: master_is(apache.addr), 60, "Apache's broker to be elected")

        async def apache_takes_sends() -> bool:
            return await _send_ok(apache.addr)

        await _until(apache_takes_sends, 60, "Apache's new master to take sends")
        await _sends(apache.addr, "apache", 30)

        # Ours comes back: the controller makes it Apache's slave, and it copies the new epoch.
        r1 = await ours.start_broker("r1", **settings)
        assert r1.process is not None
        await r1.process.wait_for_line(r"is now SLAVE \(brokerId 1\)", timeout=60)
        await _until(same_logs, 60, "our slave to hold Apache's commit log")
        theirs = decode_file((apache.root / "store" / "epochFileCheckpoint").read_text())
        assert len(theirs) == len(ours_epochs) + 1
        await _until(
            lambda: asyncio.to_thread(
                lambda: decode_file((r1.store_dir / "epochFileCheckpoint").read_text()) == theirs
            ),
            30,
            "our epoch file to follow Apache's",
        )
        # Apache's master counts our slave in: its sends (all-ack) go on succeeding.
        await _sends(apache.addr, "apache-again", 10)
        await _until(same_logs, 30, "our slave to hold the last sends")
    finally:
        await ours.stop()
        await asyncio.to_thread(apache.kill)  # (its store is not read after the test)
        for name, broker in ours.brokers.items():
            if broker.process is not None:
                print(f"---- our broker {name} ----\n{broker.process.output}")


async def _holds(addr: str, directory: Path, needle: bytes) -> bool:
    """Whether the commit log of the broker at ``addr`` holds ``needle`` before its end."""
    end = await _log_end(addr)
    assert end is not None, f"no runtime info from {addr}"
    return needle in await asyncio.to_thread(_log_prefix, directory, end)


async def test_our_old_master_cuts_what_apaches_new_master_never_had(
    unclean_controller: ApacheController, group: str, toolchain: Toolchain, tmp_path: Path
) -> None:
    """Apache's controller with unclean elections: the Apache slave dies, our master goes on
    alone, then dies too; Apache's broker comes back and is elected under a new epoch without
    our master's last messages. When ours comes back as its slave, the epoch lists put the
    consistent point where Apache's log ends under the old epoch: ours cuts its messages past it
    (the handshake with Apache's bytes) and copies Apache's new epoch."""
    from tests.cluster import Cluster

    controller = unclean_controller
    ours = Cluster(tmp_path / "ours", cluster_name="DefaultCluster")
    ours.namesrv_ports.append(controller.namesrv_port)
    apache = ApacheControllerBroker(
        toolchain,
        tmp_path / "apache",
        "127.0.0.1",
        controller.namesrv_addr,
        controller.addr,
        name=group,
        port=_broker_port(),
    )
    settings = {"brokerName": group, "controllerAddr": controller.addr, **OUR_CONTROLLER_BROKER}
    our_log = tmp_path / "ours" / "r1" / "commitlog"
    apache_log = apache.root / "store" / "commitlog"

    async def same_logs() -> bool:
        return await _same_logs(ours.brokers["r1"].addr, our_log, apache.addr, apache_log)

    async def master_is(addr: str) -> bool:
        try:
            info = await asyncio.to_thread(remoting_header, controller.addr, 1004, {"brokerName": group})
        except (OSError, RuntimeError):
            return False
        return info.get("masterAddress") == addr

    try:
        r1 = await ours.start_broker("r1", **settings)
        assert r1.process is not None
        await r1.process.wait_for_line(r"is now SYNC_MASTER \(brokerId 0\)")
        await asyncio.to_thread(apache.start)
        await _until(lambda: _send_ok(r1.addr), 60, "our master to take sends")
        await _sends(r1.addr, "shared", 20)
        await _until(same_logs, 30, "Apache's slave to hold our commit log")
        # Apache's slave dies: ours drops it from the SyncStateSet and goes on alone.
        await asyncio.to_thread(apache.kill)
        await _until(lambda: _send_ok(r1.addr), 60, "our master to take sends alone")
        await _sends(r1.addr, "lost", 15)
        assert await _holds(ours.brokers["r1"].addr, our_log, b"lost-14")
        # (Apache's is down: its files, whole, never had them.)
        assert not any(b"lost-" in f.read_bytes() for f in apache_log.iterdir() if f.name.isdigit())
        # Ours dies too; Apache's comes back and is elected (unclean: it was not in sync).
        await ours.kill_broker("r1")
        await asyncio.to_thread(apache.start)
        await _until(lambda: master_is(apache.addr), 60, "Apache's broker to be elected")
        await _until(lambda: _send_ok(apache.addr), 60, "Apache's new master to take sends")
        await _sends(apache.addr, "new", 10)
        theirs = decode_file((apache.root / "store" / "epochFileCheckpoint").read_text())
        assert len(theirs) == 2
        # Ours comes back as Apache's slave: its "lost" messages go, Apache's new ones come.
        r1 = await ours.start_broker("r1", **settings)
        assert r1.process is not None
        await r1.process.wait_for_line(r"is now SLAVE \(brokerId 1\)", timeout=60)
        await _until(same_logs, 60, "our slave to hold Apache's commit log")
        assert not await _holds(ours.brokers["r1"].addr, our_log, b"lost-")
        assert await _holds(ours.brokers["r1"].addr, our_log, b"new-9")
        assert decode_file((r1.store_dir / "epochFileCheckpoint").read_text()) == theirs
        await r1.process.wait_for_line(rf"commit log cut back from \d+ to {theirs[1].start}\b", timeout=5)
    finally:
        await ours.stop()
        await asyncio.to_thread(apache.kill)  # (its store is not read after the test)
        for name, broker in ours.brokers.items():
            if broker.process is not None:
                print(f"---- our broker {name} ----\n{broker.process.output}")


async def test_apaches_old_master_cuts_what_our_new_master_never_had(
    unclean_controller: ApacheController, group: str, toolchain: Toolchain, tmp_path: Path
) -> None:
    """The other way round: Apache's broker is the old master that wrote on alone; ours is
    elected (unclean) under a new epoch; Apache's comes back as our slave, reads our epoch list
    in our handshake, and cuts its messages past the consistent point."""
    from tests.cluster import Cluster

    controller = unclean_controller
    ours = Cluster(tmp_path / "ours", cluster_name="DefaultCluster")
    ours.namesrv_ports.append(controller.namesrv_port)
    apache = ApacheControllerBroker(
        toolchain,
        tmp_path / "apache",
        "127.0.0.1",
        controller.namesrv_addr,
        controller.addr,
        name=group,
        port=_broker_port(),
    )
    settings = {"brokerName": group, "controllerAddr": controller.addr, **OUR_CONTROLLER_BROKER}
    our_log = tmp_path / "ours" / "r1" / "commitlog"
    apache_log = apache.root / "store" / "commitlog"

    async def same_logs() -> bool:
        return await _same_logs(ours.brokers["r1"].addr, our_log, apache.addr, apache_log)

    async def master_is(addr: str) -> bool:
        try:
            info = await asyncio.to_thread(remoting_header, controller.addr, 1004, {"brokerName": group})
        except (OSError, RuntimeError):
            return False
        return info.get("masterAddress") == addr

    try:
        await asyncio.to_thread(apache.start)
        await _until(lambda: master_is(apache.addr), 60, "Apache's broker to be elected")
        r1 = await ours.start_broker("r1", **settings)
        assert r1.process is not None
        await r1.process.wait_for_line(r"is now SLAVE \(brokerId 2\)", timeout=60)
        await _until(lambda: _send_ok(apache.addr), 60, "Apache's master to take sends")
        await _sends(apache.addr, "shared", 20)
        await _until(same_logs, 30, "our slave to hold Apache's commit log")
        # Ours dies: Apache's master goes on alone, then dies too.
        await ours.kill_broker("r1")
        await _until(lambda: _send_ok(apache.addr), 60, "Apache's master to take sends alone")
        await _sends(apache.addr, "lost", 15)
        assert await _holds(apache.addr, apache_log, b"lost-14")
        await asyncio.to_thread(apache.kill)
        # Ours comes back and is elected (unclean), under a new epoch.
        r1 = await ours.start_broker("r1", **settings)
        assert r1.process is not None
        await r1.process.wait_for_line(r"is now SYNC_MASTER \(brokerId 0\)", timeout=60)
        await _until(lambda: _send_ok(r1.addr), 60, "our new master to take sends")
        await _sends(r1.addr, "new", 10)
        mine = decode_file((r1.store_dir / "epochFileCheckpoint").read_text())
        assert len(mine) == 2
        # Apache's comes back as our slave: its "lost" messages go, ours come.
        await asyncio.to_thread(apache.start)
        await _until(same_logs, 90, "Apache's slave to hold our commit log")
        assert not await _holds(apache.addr, apache_log, b"lost-")
        assert await _holds(apache.addr, apache_log, b"new-9")
        assert decode_file((apache.root / "store" / "epochFileCheckpoint").read_text()) == mine
    finally:
        await ours.stop()
        await asyncio.to_thread(apache.kill)  # (its store is not read after the test)
        for name, broker in ours.brokers.items():
            if broker.process is not None:
                print(f"---- our broker {name} ----\n{broker.process.output}")
