"""Apache RocketMQ 5.3.3's ``mqadmin`` controller commands against Apache's controller and against
ours, side by side; and our ``mqadmin`` against Apache's controller.

Two setups, started at once, each a name server with a controller embedded
(``enableControllerInNamesrv``, one replica, on free loopback ports) and two Apache 5.3.3 brokers
of one group in controller mode (``brokerId=-1``: the controller hands out ids 1 and 2):

* ``apache``: Apache 5.3.3's name server and controller (DLedger);
* ``ours``: our ``mqnamesrv`` with our controller (Raft over PySyncObj).

The same scenario runs on both, through Apache's mqadmin 5.3.3 (java53admin/AdminSession.java,
one JVM per setup): the group formed (1 master, {1, 2} in sync), read by getControllerMetaData,
getSyncStateSet (-b and -c), getBrokerEpoch (which asks the brokers, found through the name
server) and getControllerConfig; updateControllerConfig (a key, then a black-listed one);
electMaster to the slave (and to an unknown id and group, and to the master), read again once
the group settled, then back to broker 1; cleanBrokerMetadata refused (a living broker, the living
group, an unknown group, bad ids, no cluster), then of the slave once killed. Outputs are
normalized (each address by its role, paths, and across setups the SyncStateSet epoch, which the
brokers' own timing moves: ``SSS_EPOCH``) and compared whole (``SAME_OUTPUT``, ``SAME_BLOCKS``);
what differs on purpose is in ``EXPECTED_DIFFERENCES`` with its reason.

On the ``apache`` setup our ``mqadmin`` (``python -m aiorocketmq.tools.mqadmin``) runs the same
commands next to Apache's (``OUR_MQADMIN``; the writes that would change the scenario's state are
run where they leave it unchanged) and prints the same, bar ``OUR_MQADMIN_DIFFERENCES``.

test_bad_requests_leave_state_intact sends our controller malformed or misdirected requests
directly (unknown group, wrong ids, a follower asked for a write, a garbage body).
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from aiorocketmq.client import Admin
from aiorocketmq.compiled import PURE_ENV
from aiorocketmq.protocol.codes import ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.controller import BrokerReplicasInfo, SyncStateSet
from aiorocketmq.protocol.controller import ControllerRequestCode as Req
from aiorocketmq.protocol.controller import ControllerResponseCode as Code
from aiorocketmq.protocol.transport import connect
from tests.controller.test_controller_cluster import (  # noqa: F401 - fixtures
    CLUSTER,
    GROUP,
    Controllers,
    FakeBroker,
    _group,
    _group_with_master,
    _join,
    brokers,
    controllers,
)
from tests.interop.harness import (
    ApacheController,
    ApacheControllerBroker,
    Toolchain,
    ToolchainMissing,
    _port_free,
    await_controller_leader,
    build_java53_admin,
    build_java53_only,
    free_port,
)
from tests.interop.test_mqadmin53 import MqAdmin, prepare_home
from tests.support import ROOT, ServerProcess, held_port, wait_until
from tests.tools.conftest import tool_env

pytestmark = pytest.mark.timeout(300)

UNKNOWN_GROUP = "broker-nope"


# ---- the two setups --------------------------------------------------------------------------


@dataclass
class Setup:
    """A name server with a controller and two Apache brokers of GROUP."""

    name: str
    namesrv: str
    controller: str
    brokers: list[ApacheControllerBroker] = field(default_factory=list)
    #: mqadmin outputs by label: Apache's mqadmin, and (apache setup) ours.
    outputs: dict[str, str] = field(default_factory=dict)
    ours: dict[str, str] = field(default_factory=dict)
    timings: list[tuple[str, float]] = field(default_factory=list)

    def names(self) -> dict[str, str]:
        """Each address of this setup by its role, for normalizing outputs."""
        return {
            self.controller: "<CONTROLLER>",
            self.namesrv: "<NAMESRV>",
            **{b.addr: f"<BROKER{i + 1}>" for i, b in enumerate(self.brokers)},
            **{f"127.0.0.1:{b.port + 1}": f"<BROKER{i + 1}-HA>" for i, b in enumerate(self.brokers)},
        }


def broker_port() -> int:
    """A free port whose HA port (+1) and fast port (-2) are free too."""
    while True:
        port = free_port()
        if all(_port_free(p) for p in (port - 2, port + 1)):
            return port


def apache_broker(toolchain: Toolchain, root: Path, namesrv: str, controller: str) -> ApacheControllerBroker:
    # A slave learns its new master's HA address from the name server's answer to its
    # registration: when it re-registers before the master has, only at the next one (30 s by
    # default; 10 s is the least a broker takes), on either setup.
    return ApacheControllerBroker(
        toolchain,
        root,
        "127.0.0.1",
        namesrv,
        controller,
        name=GROUP,
        port=broker_port(),
        overrides={"registerNameServerPeriod": 10_000},
    )


def namesrv_conf(root: Path, served: int, raft: int) -> Path:
    """Our name server's file, the controller embedded serving on ``served``."""
    root.mkdir(parents=True, exist_ok=True)
    conf = root / "namesrv.conf"
    conf.write_text(
        "\n".join(
            [
                "listenPort=0",
                f"storePathRootDir={root / 'namesrv'}",
                "enableControllerInNamesrv=true",
                "controllerDLegerGroup=group1",
                f"controllerDLegerPeers=n0-127.0.0.1:{served}",
                f"controllerRaftPeers=n0-127.0.0.1:{raft}",
                "controllerDLegerSelfId=n0",
                f"controllerStorePath={root / 'controller'}",
                # As tests/interop/harness.APACHE_CONTROLLER sets Apache's.
                "mappedFileSize=16777216",
                "scanNotActiveBrokerInterval=1000",
                "enableElectUncleanMaster=false",
                "notifyBrokerRoleChanged=true",
                "",
            ]
        )
    )
    return conf


async def start_our_namesrv(root: Path) -> tuple[ServerProcess, str]:
    """Our mqnamesrv with our controller embedded; the controller's address."""
    with held_port() as served, held_port() as raft:
        conf = namesrv_conf(root, served, raft)
        process = await ServerProcess("aiorocketmq.namesrv", ["-c", str(conf)]).start()
    return process, f"127.0.0.1:{served}"


async def replicas_info(controller: str) -> BrokerReplicasInfo:
    host, _, port = controller.rpartition(":")
    conn = await connect(host, int(port))
    try:
        response = await conn.request(
            RemotingCommand.request(Req.CONTROLLER_GET_SYNC_STATE_DATA, {}, f'["{GROUP}"]'.encode()),
            timeout=5.0,
        )
    finally:
        conn.close()
    assert response.code == ResponseCode.SUCCESS, response
    return BrokerReplicasInfo.decode(response.body)


async def settled(setup: Setup, master: int, in_sync: set[int], timeout: float = 90.0) -> None:
    """The group has ``master`` and ``in_sync``, every broker alive, and the name server routes
    the master as brokerId 0 and the others."""
    master_addr = setup.brokers[master - 1].addr

    async def ready() -> bool:
        table = (await replicas_info(setup.controller)).replicas_info_table
        info = table.get(GROUP)
        if info is None or info.master_broker_id != master:
            return False
        if {r.broker_id for r in info.in_sync_replicas} != in_sync:
            return False
        if not all(r.alive for r in [*info.in_sync_replicas, *info.not_in_sync_replicas]):
            return False
        async with Admin(setup.namesrv) as admin:
            data = (await admin.cluster_info()).broker_addr_table.get(GROUP)
        return data is not None and data.broker_addrs.get(0) == master_addr and len(data.broker_addrs) == 2

    await wait_until(ready, timeout=timeout, interval=0.3)


# ---- the scenario ----------------------------------------------------------------------------


async def our_mqadmin(*args: str) -> str:
    """Our mqadmin's output, stdout then stderr (Apache's session captures both)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "aiorocketmq.tools.mqadmin",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
        # The pure-Python modules asked for: no warning about stale compiled ones in the output.
        env={**tool_env(), PURE_ENV: "1"},
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return out.decode() + err.decode()


Args = Callable[[Setup], list[str]]


def a(setup: Setup) -> list[str]:
    return ["-a", setup.controller]


#: The read-only commands, run on the settled group, by label.
READS: dict[str, Args] = {
    "getControllerMetaData": lambda s: ["getControllerMetaData", *a(s)],
    "getSyncStateSet": lambda s: ["getSyncStateSet", *a(s), "-b", GROUP],
    "getSyncStateSet cluster": lambda s: ["getSyncStateSet", *a(s), "-n", s.namesrv, "-c", CLUSTER],
    "getSyncStateSet unknown group": lambda s: ["getSyncStateSet", *a(s), "-b", UNKNOWN_GROUP],
    "getBrokerEpoch": lambda s: ["getBrokerEpoch", "-n", s.namesrv, "-b", GROUP],
    "getBrokerEpoch cluster": lambda s: ["getBrokerEpoch", "-n", s.namesrv, "-c", CLUSTER],
    "getControllerConfig": lambda s: ["getControllerConfig", *a(s)],
}


def elect(broker_id: str, group: str = GROUP) -> Args:
    return lambda s: ["electMaster", *a(s), "-c", CLUSTER, "-bn", group, "-b", broker_id]


def clean(*extra: str, group: str = GROUP) -> Args:
    return lambda s: ["cleanBrokerMetadata", *a(s), "-bn", group, *extra]


#: Labels our mqadmin runs only once Apache's has: its clean then finds nothing left to clean.
AFTER_APACHE = {"cleanBrokerMetadata stopped broker"}


async def scenario(setup: Setup, mqadmin: MqAdmin) -> None:
    on_apache = setup.name == "apache"

    async def run(label: str, args: Args, *, apache_tool: bool = True, our_tool: bool = on_apache) -> None:
        """The command by Apache's mqadmin and (on Apache's controller) by ours: at once, as the
        scenario has them leave the state as it was, or after (``AFTER_APACHE``)."""
        started = time.monotonic()

        async def apache() -> None:
            if apache_tool:
                setup.outputs[label] = await mqadmin.run(args(setup))

        async def mine() -> None:
            if our_tool:
                setup.ours[label] = await our_mqadmin(*args(setup))

        if label in AFTER_APACHE:
            await apache()
            await mine()
        else:
            await asyncio.gather(apache(), mine())
        setup.timings.append((label, time.monotonic() - started))

    await settled(setup, 1, {1, 2})
    setup.timings.append(("settled", 0.0))
    for label, args in READS.items():
        await run(label, args)
    await run(
        "updateControllerConfig",
        lambda s: ["updateControllerConfig", *a(s), "-k", "electMasterMaxRetryCount", "-v", "5"],
    )
    await run(
        "updateControllerConfig black list",
        lambda s: ["updateControllerConfig", *a(s), "-k", "configBlackList", "-v", "nothing"],
    )
    await run("getControllerConfig after update", READS["getControllerConfig"])
    # Elections refused: an id nobody has, a group nobody registered.
    await run("electMaster unknown id", elect("9"))
    await run("electMaster unknown group", elect("1", UNKNOWN_GROUP))
    # The slave (id 2) designated master by Apache's tool; the group settles (1 back in sync).
    await run("electMaster", elect("2"), our_tool=False)
    await run("electMaster current master", elect("2"))
    started = time.monotonic()
    await settled(setup, 2, {1, 2})
    setup.timings.append(("settled on 2", time.monotonic() - started))
    await run("getSyncStateSet after electMaster", READS["getSyncStateSet"])
    await run("getBrokerEpoch after electMaster", READS["getBrokerEpoch"])
    # 1 designated back: by our tool on Apache's controller, by Apache's on ours.
    await run("electMaster back", elect("1"), apache_tool=not on_apache)
    started = time.monotonic()
    await settled(setup, 1, {1, 2})
    setup.timings.append(("settled on 1", time.monotonic() - started))
    # Cleaning refused: a living broker, the whole group (it has a master), an unknown group,
    # ids that are not numbers, no cluster name (refused by the tool itself).
    await run("cleanBrokerMetadata living broker", clean("-c", CLUSTER, "-b", "1"))
    await run("cleanBrokerMetadata living group", clean("-c", CLUSTER))
    await run("cleanBrokerMetadata unknown group", clean("-c", CLUSTER, "-b", "1", group=UNKNOWN_GROUP))
    await run("cleanBrokerMetadata bad ids", clean("-c", CLUSTER, "-b", "2;x"))
    await run("cleanBrokerMetadata no cluster", clean("-b", "2"))
    # Broker 2, the slave, killed: once the controller sees it gone, it is forgotten (our tool
    # then cleans what is already gone: a success that changes nothing, on both controllers).
    started = time.monotonic()
    await asyncio.to_thread(setup.brokers[1].kill)  # kill -9: its connections close at once
    setup.timings.append(("broker 2 killed", time.monotonic() - started))

    async def broker2_gone() -> bool:
        """Not alive, and out of the SyncStateSet (the master shrinks it once 2 falls behind)."""
        info = (await replicas_info(setup.controller)).replicas_info_table[GROUP]
        members = [*info.in_sync_replicas, *info.not_in_sync_replicas]
        return {r.broker_id for r in info.in_sync_replicas} == {1} and not any(
            r.alive for r in members if r.broker_id == 2
        )

    await wait_until(broker2_gone, timeout=60, interval=0.3)
    setup.timings.append(("broker 2 gone", time.monotonic() - started))
    await run("cleanBrokerMetadata stopped broker", clean("-c", CLUSTER, "-b", "2"))
    await run("getSyncStateSet after clean", READS["getSyncStateSet"])


@pytest.fixture(scope="module")
def java53() -> Toolchain:
    try:
        return build_java53_only()
    except ToolchainMissing as exc:
        pytest.fail(str(exc))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def setups(
    java53: Toolchain, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[dict[str, Setup]]:
    java, classpath = await asyncio.to_thread(build_java53_admin)
    root = tmp_path_factory.mktemp("mqadmin53controller")
    theirs = ApacheController(
        java53, root / "apache-controller", ["127.0.0.1"], port=free_port(), namesrv_port=free_port()
    )
    namesrv, our_controller = await start_our_namesrv(root / "ours-namesrv")
    apache = Setup("apache", theirs.namesrv_addr, theirs.addr)
    ours = Setup("ours", f"127.0.0.1:{namesrv.port}", our_controller)
    for setup in (apache, ours):
        setup.brokers = [
            apache_broker(java53, root / f"{setup.name}-broker{i}", setup.namesrv, setup.controller)
            for i in (1, 2)
        ]
    started: list[Any] = []
    try:
        # Every JVM launched at once; the second brokers once the first are master (ids 1, 2).
        theirs.launch()
        started.append(theirs)
        for setup in (apache, ours):
            setup.brokers[0].launch()
            started.append(setup.brokers[0])
        await asyncio.gather(*(asyncio.to_thread(p.wait_ready) for p in started))
        await asyncio.to_thread(await_controller_leader, theirs.addr)

        async def second(setup: Setup) -> None:
            async def first_master() -> bool:
                info = (await replicas_info(setup.controller)).replicas_info_table.get(GROUP)
                return info is not None and info.master_broker_id == 1

            await wait_until(first_master, timeout=60, interval=0.3)
            setup.brokers[1].launch()
            started.append(setup.brokers[1])
            await asyncio.to_thread(setup.brokers[1].wait_ready)

        await asyncio.gather(second(apache), second(ours))

        async def drive(setup: Setup) -> None:
            home = root / f"{setup.name}-admin"
            prepare_home(home)
            async with MqAdmin(java, classpath, home) as mqadmin:
                await scenario(setup, mqadmin)
            (home / "outputs.txt").write_text(
                "".join(f"===== {k}\n{v}\n" for k, v in setup.outputs.items())
                + "".join(f"===== ours {k}\n{v}\n" for k, v in setup.ours.items())
                + "".join(f"{label}: {seconds:.1f}s\n" for label, seconds in setup.timings)
            )

        await asyncio.gather(drive(apache), drive(ours))
        yield {"apache": apache, "ours": ours, "namesrv": namesrv}  # type: ignore[dict-item]
    finally:
        await asyncio.gather(
            *(asyncio.to_thread(process.kill) for process in started), namesrv.stop(), return_exceptions=True
        )


# ---- normalization ---------------------------------------------------------------------------


def normalize(setup: Setup, text: str) -> str:
    """Each address by its role, paths and Java object ids out, trailing blanks off."""
    for address, role in sorted(setup.names().items(), key=lambda item: -len(item[0])):
        text = text.replace(address, role)
    text = re.sub(r"/tmp/\S+", "<PATH>", text)
    text = re.sub(r"@[0-9a-f]{6,8}\b", "@<HASH>", text)
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def blocks(text: str) -> list[str]:
    """Blank-line-separated blocks, sorted: Apache's getBrokerEpoch walks a HashSet of addresses."""
    return sorted(block.strip() for block in text.split("\n\n") if block.strip())


def failure(output: str) -> tuple[str, str] | None:
    """(code, reason) of a failed command, either tool's way of printing it: Apache's
    ``CODE: n  DESC: reason`` in a stack trace (or the tool's own IllegalArgumentException), ours
    one line ``mqadmin cmd: NAME(n): reason``; whitespace runs collapsed (ours prints one line)."""
    apache = re.search(r"CODE: (\d+)\s+DESC: (.*)", output)
    if apache:
        return apache.group(1), " ".join(apache.group(2).split())
    tool = re.search(r"IllegalArgumentException: (.*)", output)
    if tool:
        return "tool", " ".join(tool.group(1).split())
    ours = re.match(r"mqadmin \w+: (?:\w+\((\d+)\): )?(.*)", output.strip())
    if ours:
        return ours.group(1) or "tool", " ".join(ours.group(2).split())
    return None


def config_lines(setup: Setup, output: str) -> dict[str, str]:
    found = (re.match(r"(\S+) +=(.*)$", line) for line in normalize(setup, output).splitlines())
    return {match.group(1): match.group(2).strip() for match in found if match}


# ---- what is compared -----------------------------------------------------------------------

#: Labels whose whole output (normalized) Apache's mqadmin prints the same against both controllers.
SAME_OUTPUT = [
    "getControllerMetaData",
    "getSyncStateSet",
    "getSyncStateSet cluster",
    "getSyncStateSet unknown group",
    "updateControllerConfig",
    "updateControllerConfig black list",
    "electMaster unknown id",
    "electMaster unknown group",
    "electMaster",
    "electMaster current master",
    "getSyncStateSet after electMaster",
    "cleanBrokerMetadata living broker",
    "cleanBrokerMetadata living group",
    "cleanBrokerMetadata unknown group",
    "cleanBrokerMetadata bad ids",
    "cleanBrokerMetadata no cluster",
    "cleanBrokerMetadata stopped broker",
    "getSyncStateSet after clean",
]
#: The same, the blocks in any order (the tool's HashSet of broker addresses).
SAME_BLOCKS = ["getBrokerEpoch", "getBrokerEpoch cluster", "getBrokerEpoch after electMaster"]

#: What Apache's mqadmin prints differently against our controller, on purpose.
EXPECTED_DIFFERENCES = {
    "getControllerConfig": (
        "the settings each controller has (test_controller_config): Apache's lists its Netty server's "
        "tuning (NETTY_ONLY_KEYS), its JRaft settings as one object (jraftConfig=JraftConfig@hash) and "
        "every key of the file it loaded (enableControllerInNamesrv, the name server's file); ours lists "
        "the JRaft keys one by one, its Raft port (controllerRaftPeers, controllerRaftPortOffset) and "
        "its connection limits (OUR_OWN_KEYS)"
    ),
    "getControllerConfig after update": "the same (test_controller_config)",
    "electMaster back": (
        "run by our mqadmin on Apache's controller, by Apache's on ours: compared with each other "
        "(test_our_mqadmin_elects_as_apache_prints)"
    ),
}

#: Apache's controller (NettyServerConfig, and the Configuration's file keys) has these; ours
#: has no Netty server to tune.
NETTY_ONLY_KEYS = {
    "serverWorkerThreads",
    "serverCallbackExecutorThreads",
    "serverSelectorThreads",
    "serverOnewaySemaphoreValue",
    "serverAsyncSemaphoreValue",
    "serverChannelMaxIdleTimeSeconds",
    "serverSocketSndBufSize",
    "serverSocketRcvBufSize",
    "writeBufferHighWaterMark",
    "writeBufferLowWaterMark",
    "serverSocketBacklog",
    "serverPooledByteBufAllocatorEnable",
    "serverNettyWorkerGroupEnable",
    "useEpollNativeSelector",
    "enableShutdownGracefully",
    "shutdownWaitTimeSeconds",
    # an object's toString: ours lists JRaft's keys (OUR_OWN_KEYS)
    "jraftConfig",
    # Apache's Configuration echoes the file's keys: the embedded controller's is the name server's
    "enableControllerInNamesrv",
}
OUR_OWN_KEYS = {
    "jRaftElectionTimeoutMs",
    "jRaftScanWaitTimeoutMs",
    "jRaftSnapshotIntervalSecs",
    "jRaftGroupId",
    "jRaftServerId",
    "jRaftInitConf",
    "jRaftControllerRPCAddr",
    # our Raft (PySyncObj) talks on a port of its own
    "controllerRaftPeers",
    "controllerRaftPortOffset",
    # limits on peers (docs/operations.md)
    "serverBufferedFrameBytesMax",
    "serverFrameMaxBytes",
    "serverFrameReadTimeoutMillis",
    "serverMaxConnectionsPerAddress",
}
#: Apache 5.3.3's ControllerConfig keys (bar jraftConfig): both list every one.
CONTROLLER_CONFIG_KEYS = {
    "rocketmqHome",
    "configStorePath",
    "controllerType",
    "scanNotActiveBrokerInterval",
    "controllerThreadPoolNums",
    "controllerRequestThreadPoolQueueCapacity",
    "controllerDLegerGroup",
    "controllerDLegerPeers",
    "controllerDLegerSelfId",
    "mappedFileSize",
    "controllerStorePath",
    "electMasterMaxRetryCount",
    "enableElectUncleanMaster",
    "isProcessReadEvent",
    "notifyBrokerRoleChanged",
    "scanInactiveMasterInterval",
    "metricsExporterType",
    "metricsGrpcExporterTarget",
    "metricsGrpcExporterHeader",
    "metricGrpcExporterTimeOutInMills",
    "metricGrpcExporterIntervalInMills",
    "metricLoggingExporterIntervalInMills",
    "metricsPromExporterPort",
    "metricsPromExporterHost",
    "metricsLabel",
    "metricsInDelta",
    "configBlackList",
    "listenPort",
    "bindAddress",
}
#: Keys whose values differ between the two setups by construction (each its own directories).
PER_SETUP_VALUES = {"controllerStorePath", "configStorePath", "rocketmqHome", "listenPort"}

#: Labels our mqadmin ran on Apache's controller; each compared with Apache's mqadmin's output.
OUR_MQADMIN = [
    *READS,
    "updateControllerConfig",
    "updateControllerConfig black list",
    "getControllerConfig after update",
    "electMaster unknown id",
    "electMaster unknown group",
    "electMaster current master",
    "getSyncStateSet after electMaster",
    "getBrokerEpoch after electMaster",
    "cleanBrokerMetadata living broker",
    "cleanBrokerMetadata living group",
    "cleanBrokerMetadata unknown group",
    "cleanBrokerMetadata bad ids",
    "cleanBrokerMetadata no cluster",
    "cleanBrokerMetadata stopped broker",
    "getSyncStateSet after clean",
]

#: What our mqadmin prints differently from Apache's, on purpose.
OUR_MQADMIN_DIFFERENCES = {
    "failures": (
        "a refusal is one line on stderr, 'mqadmin <command>: NAME(code): reason' with whitespace "
        "runs collapsed, and exit status 1; Apache's prints a Java stack trace holding "
        "'CODE: n  DESC: reason' (compared: the code and the reason, test_our_mqadmin_output)"
    ),
    "getControllerConfig": (
        "ours sorts the keys; Apache's walks a java.util.Properties (a hash table: no order) "
        "(compared as sets of lines)"
    ),
    "getBrokerEpoch": "both walk a set of addresses: blocks compared in any order",
}


# ---- bad input to our controller ------------------------------------------------------------


async def _state(cluster: Controllers, leader: str) -> tuple[Any, ...]:
    """What a bad request must leave as it was: the group's replicas, next id and settings."""
    data = await cluster.request(leader, Req.CONTROLLER_GET_SYNC_STATE_DATA, body=f'["{GROUP}"]'.encode())
    info = await cluster.request(leader, Req.CONTROLLER_GET_REPLICA_INFO, {"brokerName": GROUP})
    nxt = await cluster.request(leader, Req.CONTROLLER_GET_NEXT_BROKER_ID, _group())
    config = await cluster.request(leader, Req.GET_CONTROLLER_CONFIG)
    assert data.code == info.code == nxt.code == config.code == ResponseCode.SUCCESS
    return (
        BrokerReplicasInfo.decode(data.body),
        info.ext_fields,
        SyncStateSet.decode(info.body),
        nxt.ext_fields["nextBrokerId"],
        config.body,
    )


async def test_bad_requests_leave_state_intact(
    controllers: Controllers,  # noqa: F811 - the fixture imported above
    brokers: list[FakeBroker],  # noqa: F811
) -> None:
    """Our controller (three mqcontroller processes) answers each malformed or misdirected request
    with a refusal that says why, and its state (replicas, epochs, ids, settings) stays as it was."""
    leader = await _group_with_master(controllers, brokers)
    follower = next(r.address for r in controllers.replicas if r.address != leader)
    before = await _state(controllers, leader)
    group, sss = _group(), SyncStateSet(sync_state_set={1, 2, 3}, sync_state_set_epoch=2).encode()
    cases: list[tuple[str, str, int, dict[str, Any], bytes, int | None, str]] = [
        # (what, to, code, header, body, expected code or None for SYSTEM_ERROR, reason pattern)
        ("elect: unknown group", leader, Req.CONTROLLER_ELECT_MASTER,
         {"clusterName": CLUSTER, "brokerName": UNKNOWN_GROUP, "brokerId": 1}, b"",
         Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, "hasn't been registered"),
        ("elect: unknown id", leader, Req.CONTROLLER_ELECT_MASTER,
         {**group, "brokerId": 9, "designateElect": "true"}, b"",
         Code.CONTROLLER_ELECT_MASTER_FAILED, "Failed to elect"),
        ("elect: id not a number", leader, Req.CONTROLLER_ELECT_MASTER,
         {**group, "brokerId": "abc", "designateElect": "true"}, b"", None, "brokerId"),
        ("elect: no broker name", leader, Req.CONTROLLER_ELECT_MASTER, {"clusterName": CLUSTER}, b"",
         Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, "hasn't been registered"),
        ("alter: not the master", leader, Req.CONTROLLER_ALTER_SYNC_STATE_SET,
         {"brokerName": GROUP, "masterBrokerId": 2, "masterEpoch": 1}, sss,
         Code.CONTROLLER_INVALID_MASTER, "current leader"),
        ("alter: old master epoch", leader, Req.CONTROLLER_ALTER_SYNC_STATE_SET,
         {"brokerName": GROUP, "masterBrokerId": 1, "masterEpoch": 0}, sss,
         Code.CONTROLLER_FENCED_MASTER_EPOCH, "master epoch"),
        ("alter: unknown replica", leader, Req.CONTROLLER_ALTER_SYNC_STATE_SET,
         {"brokerName": GROUP, "masterBrokerId": 1, "masterEpoch": 1}, sss,
         Code.CONTROLLER_INVALID_REPLICAS, "replicas {3}"),
        ("alter: garbage body", leader, Req.CONTROLLER_ALTER_SYNC_STATE_SET,
         {"brokerName": GROUP, "masterBrokerId": 1, "masterEpoch": 1}, b"\x00{not json", None, "invalid JSON body"),
        ("alter: no body", leader, Req.CONTROLLER_ALTER_SYNC_STATE_SET,
         {"brokerName": GROUP, "masterBrokerId": 1, "masterEpoch": 1}, b"", None, "SyncStateSet"),
        ("apply: id taken", leader, Req.CONTROLLER_APPLY_BROKER_ID,
         {**group, "appliedBrokerId": 1, "registerCheckCode": "127.0.0.1:1;9"}, b"",
         Code.CONTROLLER_BROKER_ID_INVALID, "Fail to apply brokerId: 1"),
        ("apply: unknown group, not the first id", leader, Req.CONTROLLER_APPLY_BROKER_ID,
         {"clusterName": CLUSTER, "brokerName": UNKNOWN_GROUP, "appliedBrokerId": 5,
          "registerCheckCode": "127.0.0.1:1;9"}, b"",
         Code.CONTROLLER_BROKER_ID_INVALID, "hasn't been registered"),
        ("register: unknown id", leader, Req.CONTROLLER_REGISTER_BROKER,
         {**group, "brokerId": 9, "brokerAddress": "127.0.0.1:1"}, b"",
         Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, "BrokerId: 9"),
        ("clean: ids not numbers", leader, Req.CLEAN_BROKER_DATA,
         {**group, "brokerControllerIdsToClean": "2;x"}, b"",
         Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA, 'For input string: "x"'),
        ("clean: living broker", leader, Req.CLEAN_BROKER_DATA,
         {**group, "brokerControllerIdsToClean": "2"}, b"",
         Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA, "still alive"),
        ("clean: unknown group", leader, Req.CLEAN_BROKER_DATA,
         {"clusterName": CLUSTER, "brokerName": UNKNOWN_GROUP, "brokerControllerIdsToClean": "1"}, b"",
         Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA, "not existed"),
        ("sync state data: garbage body", leader, Req.CONTROLLER_GET_SYNC_STATE_DATA, {}, b"\xff[garbage",
         None, "JSON"),
        ("config: not UTF-8", leader, Req.UPDATE_CONTROLLER_CONFIG, {}, b"\xff\xfe=\x80", None, "UTF-8"),
        ("config: a bad value after a good one", leader, Req.UPDATE_CONTROLLER_CONFIG, {},
         b"electMasterMaxRetryCount=7\nscanNotActiveBrokerInterval=soon\n", None,
         "scanNotActiveBrokerInterval=soon"),
        ("config: black-listed key", leader, Req.UPDATE_CONTROLLER_CONFIG, {},
         b"electMasterMaxRetryCount=7\nconfigStorePath=/tmp/x\n", ResponseCode.NO_PERMISSION, "black list"),
        ("write to a follower: apply", follower, Req.CONTROLLER_APPLY_BROKER_ID,
         {**group, "appliedBrokerId": 3, "registerCheckCode": "127.0.0.1:1;9"}, b"",
         Code.CONTROLLER_NOT_LEADER, "not in leader state"),
        ("write to a follower: elect", follower, Req.CONTROLLER_ELECT_MASTER,
         {**group, "brokerId": 2, "designateElect": "true"}, b"", Code.CONTROLLER_NOT_LEADER,
         "not in leader state"),
        ("write to a follower: clean", follower, Req.CLEAN_BROKER_DATA,
         {**group, "isCleanLivingBroker": "true"}, b"", Code.CONTROLLER_NOT_LEADER, "not in leader state"),
    ]  # fmt: skip
    for what, to, code, header, body, expected, reason in cases:
        response = await controllers.request(to, code, header, body)
        wanted = ResponseCode.SYSTEM_ERROR if expected is None else expected
        assert response.code == wanted, (what, response.code, response.remark)
        assert response.remark and re.search(re.escape(reason), response.remark), (what, response.remark)
    assert await _state(controllers, leader) == before
    # Still serving: the next broker joins, and the group's master is unchanged.
    await _join(controllers, leader, brokers[2])
    info = await controllers.request(leader, Req.CONTROLLER_GET_REPLICA_INFO, {"brokerName": GROUP})
    assert (info.ext_fields["masterBrokerId"], info.ext_fields["masterEpoch"]) == ("1", "1")


# ---- tests ----------------------------------------------------------------------------------


def test_every_command_is_compared() -> None:
    run = set(READS) | set(OUR_MQADMIN) | {"electMaster", "electMaster back"}
    assert set(SAME_OUTPUT) | set(SAME_BLOCKS) | set(EXPECTED_DIFFERENCES) == run
    assert not set(SAME_OUTPUT) & set(EXPECTED_DIFFERENCES)


#: A SyncStateSet's epoch counts every change the brokers asked for: on a loaded machine Apache's
#: master drops a slave that has not caught up within haMaxTimeSlaveNotCatchup and takes it back
#: (two changes), at its own pace on either setup, and after the kill the master's shrinking
#: races the clean. Across setups it is compared as a number that grows
#: (test_sync_state_set_epochs_grow); our mqadmin and Apache's, on one controller, print the same.
SSS_EPOCH = re.compile(r"(#SyncStateSetEpoch\t)(\d+)")


def without_sss_epoch(text: str) -> str:
    return SSS_EPOCH.sub(r"\1<EPOCH>", text)


@pytest.mark.parametrize("label", SAME_OUTPUT)
def test_same_output_from_both_controllers(setups: dict[str, Setup], label: str) -> None:
    apache, ours = setups["apache"], setups["ours"]
    mine, theirs = normalize(ours, ours.outputs[label]), normalize(apache, apache.outputs[label])
    assert without_sss_epoch(mine) == without_sss_epoch(theirs)


#: The labels printing a SyncStateSet epoch, in the order they ran.
EPOCH_LABELS = [
    "getSyncStateSet",
    "electMaster",
    "getSyncStateSet after electMaster",
    "electMaster back",
    "getSyncStateSet after clean",
]


@pytest.mark.parametrize("side", ["apache", "ours"])
def test_sync_state_set_epochs_grow(setups: dict[str, Setup], side: str) -> None:
    """Each election and SyncStateSet change makes the epoch grow: 2 once the group formed
    ({1} then {1, 2}), more after each election, more again after the clean."""
    setup = setups[side]
    outputs = {**setup.ours, **setup.outputs}
    epochs = [int(SSS_EPOCH.findall(outputs[label])[0][1]) for label in EPOCH_LABELS]
    assert epochs[0] >= 2 and epochs == sorted(epochs) and len(set(epochs)) == len(epochs), epochs


@pytest.mark.parametrize("label", SAME_BLOCKS)
def test_same_blocks_from_both_controllers(setups: dict[str, Setup], label: str) -> None:
    apache, ours = setups["apache"], setups["ours"]
    theirs = blocks(normalize(apache, apache.outputs[label]))  # no SyncStateSet epoch here
    assert blocks(normalize(ours, ours.outputs[label])) == theirs
    assert len(theirs) == 2, theirs


def test_scenario_went_as_planned(setups: dict[str, Setup]) -> None:
    """What the compared outputs say, on Apache's controller: the group, the elections, the
    refusals and the clean."""
    apache = setups["apache"]

    def out(label: str) -> str:
        return normalize(apache, apache.outputs[label])

    assert "#MasterAddr\t<BROKER1>" in out("getSyncStateSet") and "#SyncStateSetNums\t2" in out(
        "getSyncStateSet"
    )
    assert out("getSyncStateSet unknown group") == ""
    assert "#BrokerMasterAddr\t<BROKER2>" in out("electMaster") and "#MasterEpoch\t2" in out("electMaster")
    assert "#MasterAddr\t<BROKER2>" in out("getSyncStateSet after electMaster")
    assert failure(apache.outputs["electMaster unknown id"]) == ("2012", "Failed to elect a new master")
    assert failure(apache.outputs["cleanBrokerMetadata living broker"]) == (
        "2009",
        "Broker [broker-a, 1] is still alive, clean up failure",
    )
    assert failure(apache.outputs["cleanBrokerMetadata bad ids"])[0] == "2009"  # type: ignore[index]
    assert "clear broker broker-a metadata from controller success!" in out(
        "cleanBrokerMetadata stopped broker"
    )
    after = out("getSyncStateSet after clean")
    assert "#SyncStateSetNums\t1" in after and "<BROKER2>" not in after
    assert "electMasterMaxRetryCount" in config_lines(apache, apache.outputs["getControllerConfig"])


@pytest.mark.parametrize("label", ["getControllerConfig", "getControllerConfig after update"])
def test_controller_config(setups: dict[str, Setup], label: str) -> None:
    """The keys both have hold the same values (the update applied on both); each has the keys
    the other lacks only for the reasons given (NETTY_ONLY_KEYS, OUR_OWN_KEYS)."""
    apache, ours = setups["apache"], setups["ours"]
    theirs = config_lines(apache, apache.outputs[label])
    mine = config_lines(ours, ours.outputs[label])
    assert set(theirs) - set(mine) <= NETTY_ONLY_KEYS, sorted(set(theirs) - set(mine) - NETTY_ONLY_KEYS)
    assert set(mine) - set(theirs) <= OUR_OWN_KEYS, sorted(set(mine) - set(theirs) - OUR_OWN_KEYS)
    assert set(mine) & set(theirs) >= CONTROLLER_CONFIG_KEYS
    shared = (set(mine) & set(theirs)) - PER_SETUP_VALUES
    assert {k: mine[k] for k in shared} == {k: theirs[k] for k in shared}
    expected_retries = "5" if label.endswith("update") else "3"
    assert mine["electMasterMaxRetryCount"] == theirs["electMasterMaxRetryCount"] == expected_retries
    # Where each serves (not the name server's listenPort of the same file); paths spelt out.
    assert mine["listenPort"] == ours.controller.rpartition(":")[2]
    assert theirs["listenPort"] == apache.controller.rpartition(":")[2]
    assert mine["configStorePath"].startswith(("/", "<PATH>")), mine["configStorePath"]


@pytest.mark.parametrize("label", OUR_MQADMIN)
def test_our_mqadmin_output(setups: dict[str, Setup], label: str) -> None:
    """Our mqadmin against Apache's controller prints what Apache's prints (failures: the same
    code and reason, OUR_MQADMIN_DIFFERENCES)."""
    apache = setups["apache"]
    theirs, mine = apache.outputs[label], apache.ours[label]
    if failure(theirs) is not None:
        assert failure(mine) == failure(theirs), mine
    elif label.startswith("getControllerConfig"):
        assert sorted(normalize(apache, mine).splitlines()) == sorted(normalize(apache, theirs).splitlines())
    elif label.startswith("getBrokerEpoch"):
        assert blocks(normalize(apache, mine)) == blocks(normalize(apache, theirs))
    else:
        assert normalize(apache, mine) == normalize(apache, theirs)


def test_our_mqadmin_elects_as_apache_prints(setups: dict[str, Setup]) -> None:
    """electMaster back to broker 1: our mqadmin on Apache's controller prints what Apache's
    mqadmin prints on ours."""
    apache, ours = setups["apache"], setups["ours"]
    mine = normalize(apache, apache.ours["electMaster back"])
    assert without_sss_epoch(mine) == without_sss_epoch(normalize(ours, ours.outputs["electMaster back"]))
    assert "#BrokerMasterAddr\t<BROKER1>" in mine and "#MasterEpoch\t3" in mine
