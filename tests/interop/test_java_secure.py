"""Apache's Java client (4.9.8) on a secured cluster of ours: ACL on (plain_acl.yml) and TLS in
enforcing mode on the name server and the broker, the way RocketMQ users switch both on.

- signed with ``AclClientRPCHook`` and with ``-Dtls.enable=true`` (the server's certificate
  checked against the test CA, test mode off) it sends and consumes, content intact;
- a wrong secret is refused with the code Apache's broker answers and nothing it sent is stored;
- without TLS the client cannot reach the enforcing cluster at all.

The three runs share one JVM start-up cost each and run side by side.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml

from aiorocketmq.client import Admin, ClientOptions
from aiorocketmq.protocol.codes import ResponseCode
from tests.cluster import Cluster
from tests.interop.harness import ProgramRun, Toolchain, run_program
from tests.security.pki import make_pki

pytestmark = pytest.mark.asyncio(loop_scope="module")

TOPIC = "JavaSecureTopic"
GROUP = "JavaSecureGroup"
ADMIN = ("java_admin", "java_admin_secret")
USER = ("java_user", "java_user_secret")
COUNT = 12

ACL_YML: dict[str, Any] = {
    "globalWhiteRemoteAddresses": [],
    "accounts": [
        {"accessKey": ADMIN[0], "secretKey": ADMIN[1], "admin": True},
        {
            "accessKey": USER[0],
            "secretKey": USER[1],
            "admin": False,
            "defaultTopicPerm": "DENY",
            "defaultGroupPerm": "DENY",
            "topicPerms": [f"{TOPIC}=PUB|SUB"],
            "groupPerms": [f"{GROUP}=SUB"],
        },
    ],
}


class Secured:
    def __init__(self, cluster: Cluster, ca: Path) -> None:
        self.cluster = cluster
        self.ca = ca

    def client_options(self, account: tuple[str, str]) -> ClientOptions:
        return ClientOptions(access_key=account[0], secret_key=account[1], tls=True, tls_ca_file=str(self.ca))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def secured(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Secured]:
    root = tmp_path_factory.mktemp("java-secure")
    pki = make_pki(root)
    tls_file = root / "tls.properties"
    tls_file.write_text(
        f"tls.server.mode=enforcing\ntls.server.certPath={pki['cert']}\ntls.server.keyPath={pki['key']}\n"
        f"tls.enable=true\ntls.client.authServer=true\ntls.client.trustCertPath={pki['ca']}\n"
    )
    acl_file = root / "plain_acl.yml"
    acl_file.write_text(yaml.safe_dump(ACL_YML))
    cluster = Cluster(root)
    await cluster.start_namesrv(**{"tls.config.file": str(tls_file)})
    try:
        await cluster.start_broker(
            "broker-a",
            aclEnable="true",
            **{"rocketmq.acl.plain.file": str(acl_file), "tls.config.file": str(tls_file)},
        )
        secured = Secured(cluster, pki["ca"])
        async with Admin(cluster.namesrv_addr, options=secured.client_options(ADMIN)) as admin:
            await admin.create_topic(TOPIC, queue_nums=4)
        yield secured
    finally:
        await cluster.stop()


def _java_run(
    toolchain: Toolchain, secured: Secured, home: Path, *, tls: bool, account: tuple[str, str], group: str
) -> ProgramRun:
    props = {
        "user.home": str(home),
        "rocketmq.client.logRoot": str(home / "logs"),
        "rocketmq.client.localOffsetStoreDir": str(home / "offsets"),
    }
    if tls:
        props |= {
            "tls.enable": "true",
            "tls.test.mode.enable": "false",
            "tls.client.authServer": "true",
            "tls.client.trustCertPath": str(secured.ca),
        }
    args = [
        f"namesrv={secured.cluster.namesrv_addr}",
        f"topic={TOPIC}",
        f"group={group}",
        f"count={COUNT}",
        f"accessKey={account[0]}",
        f"secretKey={account[1]}",
        "timeout=40",
    ]
    command = toolchain.java_command("interop.Secure", args, props)
    return run_program(command, cwd=home, timeout=300, mkdir=True)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def runs(
    java_toolchain: Toolchain, secured: Secured, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, ProgramRun]:
    root = tmp_path_factory.mktemp("java-secure-runs")
    tag = os.getpid()
    plans = {
        "signed-tls": dict(tls=True, account=USER, group=GROUP),
        "wrong-secret": dict(tls=True, account=(USER[0], "not-the-secret"), group=GROUP),
        "plain-text": dict(tls=False, account=USER, group=GROUP),
    }
    done = await asyncio.gather(
        *(
            asyncio.to_thread(_java_run, java_toolchain, secured, root / f"{name}-{tag}", **plan)  # type: ignore[arg-type]
            for name, plan in plans.items()
        )
    )
    for name, run in zip(plans, done):
        (root / f"{name}.out").write_text(run.stdout + run.stderr)
    return dict(zip(plans, done))


def _events(run: ProgramRun, event: str) -> list[dict[str, Any]]:
    return [r for r in run.records if r["event"] == event]


def _done(run: ProgramRun) -> dict[str, Any]:
    done = _events(run, "done")
    assert run.returncode == 0 and done, run.describe()
    return done[-1]


async def test_signed_client_over_tls_sends_and_consumes(runs: dict[str, ProgramRun]) -> None:
    run = runs["signed-tls"]
    assert _done(run) == {"event": "done", "sent": COUNT, "received": COUNT}, run.describe()
    assert {r["status"] for r in _events(run, "sent")} == {"SEND_OK"}
    received = {r["keys"]: (r["body"], r["tags"]) for r in _events(run, "received")}
    assert received == {f"key-{i}": (f"secure:{i}", "secure") for i in range(COUNT)}


async def test_wrong_secret_is_refused_and_nothing_is_stored(
    runs: dict[str, ProgramRun], secured: Secured
) -> None:
    run = runs["wrong-secret"]
    assert _done(run)["sent"] == 0, run.describe()
    (error,) = _events(run, "send-error")
    # Apache's broker answers an ACL failure as a system error with the reason in the remark.
    assert error["code"] == ResponseCode.SYSTEM_ERROR, error
    assert "signature" in error["remark"].lower(), error
    # The signed run stored exactly its own messages; the refused one added nothing.
    async with Admin(secured.cluster.namesrv_addr, options=secured.client_options(ADMIN)) as admin:
        stats = await admin.topic_stats(TOPIC)
    assert sum(q.max_offset - q.min_offset for q in stats.values()) == COUNT


async def test_plain_text_client_cannot_reach_an_enforcing_cluster(
    runs: dict[str, ProgramRun], secured: Secured
) -> None:
    run = runs["plain-text"]
    assert _done(run)["sent"] == 0, run.describe()
    (error,) = _events(run, "send-error")
    # A client-side failure: its first plain-text request, for the route, gets no answer from the
    # name server, which speaks TLS only.
    assert error["code"] == -1, error
    assert secured.cluster.namesrv_addr in error["remark"], error
