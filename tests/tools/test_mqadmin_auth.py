"""Our ``mqadmin`` ACL 2.0 commands (createUser ... listAcl, copyUser, copyAcl) and the admin
client under them (client/auth_admin.py) against a real name server and two brokers of one
cluster with ACL 2.0 on (authentication and authorization, a super user created at start).

Commands run in process (the parsing and execution ``mqadmin`` itself uses), signed as the
super user through ``$ROCKETMQ_ACCESS_KEY``/``$ROCKETMQ_SECRET_KEY``; one subprocess run shows
they are registered in the installed tool. Each check reads back what the brokers hold; the
refusals (unsigned, a normal user, a wrong secret) leave nothing stored.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest
import pytest_asyncio

from aiorocketmq.client import Admin, ClientOptions
from aiorocketmq.client.auth_admin import (
    acl_of,
    create_acl,
    create_user,
    delete_acl,
    get_acl,
    get_user,
    list_acls,
    list_users,
    update_user,
)
from aiorocketmq.protocol.auth import UserInfo
from aiorocketmq.protocol.codes import ResponseCode
from aiorocketmq.protocol.errors import BrokerError
from aiorocketmq.tools.mqadmin import Result, execute, parse_args
from tests.cluster import Cluster

from .conftest import spawn_tool, tool_env, unique, wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")

CLUSTER = "DefaultCluster"
SUPER = ("rocketmq", "12345678")
ACL2 = {
    "authenticationEnabled": "true",
    "authorizationEnabled": "true",
    "initAuthenticationUser": json.dumps({"username": SUPER[0], "password": SUPER[1]}),
    "innerClientAuthenticationCredentials": json.dumps({"accessKey": SUPER[0], "secretKey": SUPER[1]}),
}
USER_ROW = "{:<16}  {:<22}  {:<22}  {:<22}"
ACL_ROW = "{:<16}  {:<10}  {:<22}  {:<20}  {:<24}  {:<10}"


@dataclass
class World:
    cluster: Cluster
    ns: str
    a: str
    b: str


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    root = tmp_path_factory.mktemp("auth")
    cluster = Cluster(root)
    await cluster.start_namesrv()
    try:
        for name in ("broker-a", "broker-b"):
            await cluster.start_broker(name, authConfigPath=str(root / f"{name}-auth"), **ACL2)
        async with Admin(cluster.namesrv_addr) as admin:

            async def registered() -> bool:
                return len((await admin.cluster_info()).broker_addr_table) == 2

            await wait_until(registered)
        yield World(
            cluster, cluster.namesrv_addr, cluster.brokers["broker-a"].addr, cluster.brokers["broker-b"].addr
        )
    finally:
        await cluster.stop()


@pytest.fixture
def as_super(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("ROCKETMQ_ACCESS_KEY", SUPER[0])
    monkeypatch.setenv("ROCKETMQ_SECRET_KEY", SUPER[1])
    yield


async def run(ns: str, *argv: str) -> Result:
    """One mqadmin command, in process, signed as the environment says."""
    return await execute(parse_args([argv[0], "-n", ns, *argv[1:]]))


def signed(ns: str, user: str, password: str) -> Admin:
    return Admin(ns, options=ClientOptions(access_key=user, secret_key=password))


def user_rows(result: Result) -> list[str]:
    return [line.rstrip() for line in result.lines]


async def test_create_user_goes_to_every_broker_of_the_cluster(world: World, as_super: None) -> None:
    name = unique("alice")
    created = await run(world.ns, "createUser", "-c", CLUSTER, "-u", name, "-p", "alice-pw")
    assert sorted(created.lines) == sorted(f"create user to {addr} success." for addr in (world.a, world.b))
    for addr in (world.a, world.b):
        shown = await run(world.ns, "getUser", "-b", addr, "-u", name)
        assert shown.lines == [
            USER_ROW.format("#UserName", "#Password", "#UserType", "#UserStatus"),
            USER_ROW.format(name, "alice-pw", "Normal", "enable"),
        ]
        assert shown.data == {
            "username": name,
            "password": "alice-pw",
            "userType": "Normal",
            "userStatus": "enable",
        }


async def test_update_user_changes_status_type_and_password(world: World, as_super: None) -> None:
    name = unique("bob")
    await run(world.ns, "createUser", "-b", world.a, "-u", name, "-p", "first")
    updated = await run(world.ns, "updateUser", "-b", world.a, "-u", name, "-s", "disable")
    assert updated.lines == [f"update user to {world.a} success."]
    await run(world.ns, "updateUser", "-b", world.a, "-u", name, "-p", "second", "-t", "Super")
    shown = await run(world.ns, "getUser", "-b", world.a, "-u", name)
    assert shown.lines[1].rstrip() == USER_ROW.format(name, "second", "Super", "disable").rstrip()
    # Only on broker-a: broker-b never heard of the user.
    assert (await run(world.ns, "getUser", "-b", world.b, "-u", name)).lines == []


async def test_list_user_filters_and_names_the_broker_for_a_cluster(world: World, as_super: None) -> None:
    name = unique("carol")
    await run(world.ns, "createUser", "-c", CLUSTER, "-u", name, "-p", "carol-pw", "-t", "Normal")
    listed = await run(world.ns, "listUser", "-b", world.a)
    names = [row.split()[0] for row in listed.lines[1:]]
    assert SUPER[0] in names and name in names
    filtered = await run(world.ns, "listUser", "-c", CLUSTER, "-f", name)
    assert filtered.lines[0] == USER_ROW.format("#UserName", "#Password", "#UserType", "#UserStatus")
    assert filtered.lines[1].rstrip() == USER_ROW.format(name, "carol-pw", "Normal", "enable").rstrip()
    assert filtered.lines[2] in (f"get user from {world.a} success.", f"get user from {world.b} success.")
    assert len(filtered.lines) == 3


async def test_acl_create_get_list_delete(world: World, as_super: None) -> None:
    name = unique("dave")
    subject = f"User:{name}"
    await run(world.ns, "createUser", "-c", CLUSTER, "-u", name, "-p", "dave-pw")
    created = await run(
        world.ns,
        *("createAcl", "-c", CLUSTER, "-s", subject, "-r", "Topic:orders, Topic:pre-*"),
        *("-a", "Pub,Sub", "-i", "127.0.0.1,10.0.0.0/8", "-d", "Allow"),
    )
    assert sorted(created.lines) == sorted(f"create acl to {addr} success." for addr in (world.a, world.b))
    await run(
        world.ns, "updateAcl", "-b", world.a, "-s", subject, "-r", "Group:g1", "-a", "Sub", "-d", "Deny"
    )
    shown = await run(world.ns, "getAcl", "-b", world.a, "-s", subject)
    ips = "[127.0.0.1, 10.0.0.0/8]"
    assert [line.rstrip() for line in shown.lines] == [
        ACL_ROW.format("#Subject", "#PolicyType", "#Resource", "#Actions", "#SourceIp", "#Decision").rstrip(),
        ACL_ROW.format(subject, "Custom", "Topic:orders", "[Pub, Sub]", ips, "Allow").rstrip(),
        ACL_ROW.format(subject, "Custom", "Topic:pre-*", "[Pub, Sub]", ips, "Allow").rstrip(),
        ACL_ROW.format(subject, "Custom", "Group:g1", "[Sub]", "null", "Deny").rstrip(),
    ]
    by_resource = await run(world.ns, "listAcl", "-b", world.a, "-s", name, "-r", "Group:g1")
    # Apache's resource filter keeps only the matching entries of each ACL
    assert [line.split()[2] for line in by_resource.lines[1:]] == ["Group:g1"]
    # broker-b got the createAcl (-c) but not the updateAcl (-b broker-a)
    on_b = await run(world.ns, "getAcl", "-c", CLUSTER, "-s", subject)
    assert len([line for line in on_b.lines if line.startswith(subject)]) == 5  # 3 on a, 2 on b

    deleted = await run(world.ns, "deleteAcl", "-b", world.a, "-s", subject, "-r", "Topic:orders")
    assert deleted.lines == [f"delete acl to {world.a} success."]
    left = await run(world.ns, "getAcl", "-b", world.a, "-s", subject)
    assert [line.split()[2] for line in left.lines[1:]] == ["Topic:pre-*", "Group:g1"]
    await run(world.ns, "deleteAcl", "-b", world.a, "-s", subject)
    assert (await run(world.ns, "getAcl", "-b", world.a, "-s", subject)).lines == []


async def test_copy_user_and_acl_between_brokers(world: World, as_super: None) -> None:
    name = unique("erin")
    subject = f"User:{name}"
    await run(world.ns, "createUser", "-b", world.a, "-u", name, "-p", "erin-pw")
    await run(
        world.ns, "createAcl", "-b", world.a, "-s", subject, "-r", "Topic:t", "-a", "Pub", "-d", "Allow"
    )
    copied = await run(world.ns, "copyUser", "-f", world.a, "-t", world.b, "-u", name)
    assert copied.lines == [f"copy user of {name} from {world.a} to {world.b} success."]
    copied = await run(world.ns, "copyAcl", "-f", world.a, "-t", world.b, "-s", subject)
    assert copied.lines == [f"copy acl of {subject} from {world.a} to {world.b} success."]
    async with signed(world.ns, *SUPER) as admin:
        assert await get_user(admin, world.b, name) == await get_user(admin, world.a, name)
        assert await get_acl(admin, world.b, subject) == await get_acl(admin, world.a, subject)


async def test_delete_user_from_the_cluster(world: World, as_super: None) -> None:
    name = unique("frank")
    await run(world.ns, "createUser", "-c", CLUSTER, "-u", name, "-p", "frank-pw")
    deleted = await run(world.ns, "deleteUser", "-c", CLUSTER, "-u", name)
    assert sorted(deleted.lines) == sorted(f"delete user to {addr} success." for addr in (world.a, world.b))
    for addr in (world.a, world.b):
        assert (await run(world.ns, "getUser", "-b", addr, "-u", name)).lines == []


async def test_admin_client_reads_and_errors(world: World) -> None:
    name = unique("gus")
    async with signed(world.ns, *SUPER) as admin:
        assert await get_user(admin, world.a, name) is None
        await create_user(admin, world.a, UserInfo(username=name, password="gus-pw"))
        with pytest.raises(BrokerError):  # the name is taken
            await create_user(admin, world.a, UserInfo(username=name, password="other"))
        assert [u.username for u in await list_users(admin, world.a, name)] == [name]
        assert await list_users(admin, world.a, unique("nobody")) == []
        subject = f"User:{name}"
        assert await get_acl(admin, world.a, subject) is None
        await create_acl(admin, world.a, acl_of(subject, ["Topic:a", "Topic:b"], ["Get"], "Allow"))
        await delete_acl(admin, world.a, subject, policy_type="Custom", resource="Topic:a")
        acl = await get_acl(admin, world.a, subject)
        assert acl is not None and acl.policies is not None
        assert [e.resource for p in acl.policies for e in p.entries or []] == ["Topic:b"]
        assert [a.subject for a in await list_acls(admin, world.a, subject_filter=name)] == [subject]
        assert await list_acls(admin, world.a, subject_filter=name, resource_filter="Topic:zzz") == []


@pytest.mark.parametrize(
    "who", ["unsigned", "normal", "wrong-secret"], ids=["unsigned", "normal-user", "wrong-secret"]
)
async def test_refused_callers_change_nothing(world: World, who: str) -> None:
    normal = unique("henry")
    async with signed(world.ns, *SUPER) as admin:
        await create_user(admin, world.a, UserInfo(username=normal, password="henry-pw"))
    credentials = {"unsigned": None, "normal": (normal, "henry-pw"), "wrong-secret": (SUPER[0], "guess")}[who]
    victim = unique("victim")
    options = (
        ClientOptions(access_key=credentials[0], secret_key=credentials[1])
        if credentials
        else ClientOptions()
    )
    async with Admin(world.ns, options=options) as intruder:
        with pytest.raises(BrokerError) as refused:
            await create_user(intruder, world.a, UserInfo(username=victim, password="x", user_type="Super"))
        assert refused.value.code == ResponseCode.NO_PERMISSION
        with pytest.raises(BrokerError) as refused:
            await update_user(intruder, world.a, UserInfo(username=normal, user_type="Super"))
        assert refused.value.code == ResponseCode.NO_PERMISSION
        with pytest.raises(BrokerError) as refused:
            await list_users(intruder, world.a)
        assert refused.value.code == ResponseCode.NO_PERMISSION
    async with signed(world.ns, *SUPER) as admin:
        assert await get_user(admin, world.a, victim) is None
        user = await get_user(admin, world.a, normal)
        assert user is not None and user.user_type == "Normal"


async def test_installed_tool_prints_users_as_json(world: World) -> None:
    env = {**tool_env(), "ROCKETMQ_ACCESS_KEY": SUPER[0], "ROCKETMQ_SECRET_KEY": SUPER[1]}
    proc = await spawn_tool(
        "mqadmin", "getUser", "-n", world.ns, "-b", world.a, "-u", SUPER[0], "--json", env=env
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert json.loads(out) == {
        "username": SUPER[0],
        "password": SUPER[1],
        "userType": "Super",
        "userStatus": "enable",
    }
    unsigned = await spawn_tool("mqadmin", "listUser", "-n", world.ns, "-b", world.a)
    _, err = await unsigned.communicate()
    assert unsigned.returncode != 0 and "mqadmin listUser:" in err.decode()
