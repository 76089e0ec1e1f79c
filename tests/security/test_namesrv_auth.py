"""Authenticated name-server writes (``authenticationEnabled=true``) on real processes.

With the setting on, every write an attacker on the network would send (a fake REGISTER_BROKER
claiming a topic, PUT/DELETE_KV_CONFIG, WIPE/ADD_WRITE_PERM, DELETE_TOPIC_IN_NAMESRV,
UNREGISTER_BROKER, UPDATE_NAMESRV_CONFIG, REGISTER_TOPIC_IN_NAMESRV, the liveness requests) is
refused unsigned, with a wrong secret and from an account without the role, and the routes,
cluster, KV config and settings are the same afterwards; our broker registers signed (with
``innerClientAuthenticationCredentials``, or on ACL 1.0 with its first admin account) and
clients route to it unsigned; ``mqadmin`` and the SDK's admin writes work signed by an admin.
With the setting off the name server behaves as before: the same attacks succeed.
"""

from __future__ import annotations

import asyncio
import json
import os
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml

from aiorocketmq.broker.registration import inner_client_credentials
from aiorocketmq.client import Admin, ClientOptions, Producer
from aiorocketmq.client.cluster_admin import (
    add_write_perm,
    namesrv_config,
    update_namesrv_config,
    wipe_write_perm,
)
from aiorocketmq.namesrv.auth import ADMIN_WRITES, BROKER_WRITES, Role, Users, UsersFileError
from aiorocketmq.protocol.acl import Credentials, sign
from aiorocketmq.protocol.admin_requests import AddWritePermOfBrokerRequestHeader
from aiorocketmq.protocol.body import (
    PERM_READ_WRITE,
    ClusterInfo,
    DataVersion,
    KVTable,
    QueueData,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
)
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import BrokerError
from aiorocketmq.protocol.headers import (
    BrokerHeartbeatRequestHeader,
    DeleteKVConfigRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetKVListByNamespaceRequestHeader,
    GetRouteInfoRequestHeader,
    PutKVConfigRequestHeader,
    QueryDataVersionRequestHeader,
    RegisterBrokerRequestHeader,
    RegisterTopicRequestHeader,
    UnregisterBrokerRequestHeader,
    WipeWritePermOfBrokerRequestHeader,
)
from aiorocketmq.protocol.message import Message
from aiorocketmq.protocol.settings import ConfigError
from aiorocketmq.protocol.transport import Connection, connect
from tests.cluster import Cluster
from tests.interop.harness import ApacheBroker, build_java53_only
from tests.support import ServerProcess, wait_until
from tests.tools.conftest import spawn_tool

pytestmark = pytest.mark.asyncio(loop_scope="module")

BROKER = Credentials("ns_broker", "broker_secret_1")
ADMIN = Credentials("ns_admin", "admin_secret_1")
#: Listed in the users file without a role: a client of the brokers, not a name-server account.
CLIENT = Credentials("ns_client", "client_secret_1")
STRANGER = Credentials("ns_stranger", "stranger_secret_1")
TOPIC = "NsAuthTopic"
NAMESPACE = "NS_AUTH"
ATTACKER_ADDR = "10.66.66.66:10911"

USERS: dict[str, Any] = {
    "accounts": [
        {"accessKey": BROKER.access_key, "secretKey": BROKER.secret_key, "role": "broker"},
        {"accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key, "role": "admin"},
        {"accessKey": CLIENT.access_key, "secretKey": CLIENT.secret_key, "defaultTopicPerm": "PUB"},
    ]
}


def credentials_property(credentials: Credentials) -> str:
    return json.dumps({"accessKey": credentials.access_key, "secretKey": credentials.secret_key})


def options(credentials: Credentials | None) -> ClientOptions:
    if credentials is None:
        return ClientOptions()
    return ClientOptions(access_key=credentials.access_key, secret_key=credentials.secret_key)


async def request(
    conn: Connection,
    code: int,
    fields: dict[str, Any] | None = None,
    body: bytes = b"",
    credentials: Credentials | None = None,
) -> RemotingCommand:
    cmd = RemotingCommand.request(code, dict(fields or {}), body)
    if credentials is not None:
        sign(cmd, credentials)
    return await conn.request(cmd, 10)


# -- what a name server holds, read unsigned -------------------------------------------------


async def state(conn: Connection, topics: tuple[str, ...]) -> dict[str, Any]:
    """Everything the attacks could change: cluster, topic list, the topics' routes, the KV
    namespace and the settings."""
    snapshot: dict[str, Any] = {}
    response = await request(conn, RequestCode.GET_BROKER_CLUSTER_INFO)
    assert response.code == ResponseCode.SUCCESS, response.remark
    snapshot["cluster"] = ClusterInfo.decode(response.body).model_dump()
    response = await request(conn, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    snapshot["topics"] = sorted(TopicList.decode(response.body).topic_list)
    for topic in topics:
        response = await request(
            conn, RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic=topic).to_fields()
        )
        snapshot[f"route {topic}"] = (
            TopicRouteData.decode(response.body).model_dump()
            if response.code == ResponseCode.SUCCESS
            else response.code
        )
    response = await request(
        conn,
        RequestCode.GET_KVLIST_BY_NAMESPACE,
        GetKVListByNamespaceRequestHeader(namespace=NAMESPACE).to_fields(),
    )
    snapshot["kv"] = KVTable.decode(response.body).table if response.code == ResponseCode.SUCCESS else {}
    response = await request(conn, RequestCode.GET_NAMESRV_CONFIG)
    snapshot["config"] = response.body
    return snapshot


# -- the attacker's writes -------------------------------------------------------------------


@dataclass(frozen=True)
class Attack:
    name: str
    code: int
    fields: dict[str, Any]
    body: bytes = b""


def fake_registration(topic: str) -> Attack:
    """A broker nobody runs, registering ``topic`` as its own: on an open name server its
    address joins the topic's route and producers send there."""
    wrapper = TopicConfigSerializeWrapper(
        topic_config_table={topic: TopicConfig(topic_name=topic, read_queue_nums=8, write_queue_nums=8)},
        data_version=DataVersion(timestamp=1, counter=1),
    )
    body = RegisterBrokerBody(topic_config_serialize_wrapper=wrapper).encode()
    header = RegisterBrokerRequestHeader(
        broker_name="evil-broker",
        broker_addr=ATTACKER_ADDR,
        cluster_name="DefaultCluster",
        ha_server_addr="10.66.66.66:10912",
        broker_id=0,
        body_crc32=zlib.crc32(body) & 0x7FFFFFFF,
    )
    return Attack(
        "fake REGISTER_BROKER claiming a topic", RequestCode.REGISTER_BROKER, header.to_fields(), body
    )


def attacks(broker_addr: str) -> list[Attack]:
    hijack = TopicRouteData(
        queue_datas=[QueueData(broker_name="broker-a", read_queue_nums=1, write_queue_nums=1, perm=6)]
    ).encode()
    member = {
        "brokerName": "broker-a",
        "brokerAddr": broker_addr,
        "clusterName": "DefaultCluster",
        "brokerId": 0,
    }
    return [
        Attack(
            "PUT_KV_CONFIG",
            RequestCode.PUT_KV_CONFIG,
            PutKVConfigRequestHeader(namespace=NAMESPACE, key="planted", value="evil").to_fields(),
        ),
        Attack(
            "DELETE_KV_CONFIG",
            RequestCode.DELETE_KV_CONFIG,
            DeleteKVConfigRequestHeader(namespace=NAMESPACE, key="kept").to_fields(),
        ),
        fake_registration(TOPIC),
        Attack(
            "WIPE_WRITE_PERM_OF_BROKER",
            RequestCode.WIPE_WRITE_PERM_OF_BROKER,
            WipeWritePermOfBrokerRequestHeader(broker_name="broker-a").to_fields(),
        ),
        Attack(
            "ADD_WRITE_PERM_OF_BROKER",
            RequestCode.ADD_WRITE_PERM_OF_BROKER,
            AddWritePermOfBrokerRequestHeader(broker_name="broker-a").to_fields(),
        ),
        Attack(
            "DELETE_TOPIC_IN_NAMESRV",
            RequestCode.DELETE_TOPIC_IN_NAMESRV,
            DeleteTopicFromNamesrvRequestHeader(topic=TOPIC).to_fields(),
        ),
        Attack(
            "UNREGISTER_BROKER",
            RequestCode.UNREGISTER_BROKER,
            UnregisterBrokerRequestHeader(**member).to_fields(),
        ),
        Attack(
            "UPDATE_NAMESRV_CONFIG",
            RequestCode.UPDATE_NAMESRV_CONFIG,
            {},
            b"orderMessageEnable=true\nenableTopicList=false\n",
        ),
        Attack(
            "REGISTER_TOPIC_IN_NAMESRV",
            RequestCode.REGISTER_TOPIC_IN_NAMESRV,
            RegisterTopicRequestHeader(topic="HijackedTopic").to_fields(),
            hijack,
        ),
        Attack(
            "QUERY_DATA_VERSION",
            RequestCode.QUERY_DATA_VERSION,
            QueryDataVersionRequestHeader(**member).to_fields(),
            DataVersion(timestamp=1, counter=1).encode(),
        ),
        Attack(
            "BROKER_HEARTBEAT",
            RequestCode.BROKER_HEARTBEAT,
            BrokerHeartbeatRequestHeader(
                cluster_name="DefaultCluster", broker_addr=broker_addr, broker_name="broker-a"
            ).to_fields(),
        ),
    ]


# -- fixtures ------------------------------------------------------------------------------


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def secured(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    """A name server with authenticationEnabled=true and a broker signing as BROKER."""
    root = tmp_path_factory.mktemp("ns-auth")
    users = root / "namesrv_users.yml"
    users.write_text(yaml.safe_dump(USERS))
    cluster = Cluster(root)
    await cluster.start_namesrv(authenticationEnabled=True, authUsersFile=str(users))
    try:
        await cluster.start_broker(
            "broker-a", innerClientAuthenticationCredentials=credentials_property(BROKER)
        )
        async with Admin(cluster.namesrv_addr, options=options(ADMIN)) as admin:
            await admin.create_topic(TOPIC, 4)
            await admin.update_kv_config(NAMESPACE, "kept", "by the admin")
        yield cluster
    finally:
        await cluster.stop()


@pytest_asyncio.fixture(loop_scope="module")
async def conn(secured: Cluster) -> AsyncIterator[Connection]:
    connection = await connect("127.0.0.1", secured.namesrv_ports[0])
    try:
        yield connection
    finally:
        connection.close()


# -- authentication on -------------------------------------------------------------------------


async def test_signed_broker_registers_and_unsigned_clients_route_to_it(
    secured: Cluster, conn: Connection
) -> None:
    broker = secured.brokers["broker-a"]
    assert broker.process is not None
    await broker.process.wait_for_line(r"name-server requests signed as AccessKey=ns_broker")
    snapshot = await state(conn, (TOPIC,))
    assert snapshot["cluster"]["cluster_addr_table"] == {"DefaultCluster": ["broker-a"]}
    assert snapshot["route " + TOPIC]["broker_datas"][0]["broker_addrs"] == {0: broker.addr}
    assert snapshot["kv"] == {"kept": "by the admin"}
    # An unsigned client reads routes and sends through them (the broker has no ACL here).
    async with Producer("NsAuthProducer", secured.namesrv_addr) as producer:
        result = await producer.send(Message(TOPIC, b"routed by an authenticated name server"))
    assert result.queue.broker_name == "broker-a"
    # The broker lists the setting but does not serve its secret.
    broker_conn = await connect("127.0.0.1", broker.port)
    try:
        listing = (await request(broker_conn, RequestCode.GET_BROKER_CONFIG)).body.decode()
    finally:
        broker_conn.close()
    assert "innerClientAuthenticationCredentials=******" in listing.splitlines()
    assert BROKER.secret_key not in listing


@pytest.mark.parametrize("who", ["unsigned", "wrong secret", "unknown account", "account without the role"])
async def test_every_write_refused_and_nothing_changes(secured: Cluster, conn: Connection, who: str) -> None:
    broker_addr = secured.brokers["broker-a"].addr
    watched = (TOPIC, "HijackedTopic")
    before = await state(conn, watched)
    outcomes = {}
    for attack in attacks(broker_addr):
        signer: Credentials | None
        if who == "unsigned":
            signer = None
        elif who == "wrong secret":
            signer = Credentials(ADMIN.access_key, "not_the_admin_secret")
        elif who == "unknown account":
            signer = STRANGER
        else:
            # Admin writes from the broker account; broker writes from a client account.
            signer = BROKER if attack.code in ADMIN_WRITES else CLIENT
        response = await request(conn, attack.code, attack.fields, attack.body, signer)
        outcomes[attack.name] = (response.code, response.remark)
    expected = {
        "unsigned": (ResponseCode.SYSTEM_ERROR, "(no AccessKey)"),
        "wrong secret": (ResponseCode.SYSTEM_ERROR, "signature check failed for AccessKey=ns_admin"),
        "unknown account": (ResponseCode.SYSTEM_ERROR, "AccessKey=ns_stranger is not a name-server account"),
    }
    for name, (code, remark) in outcomes.items():
        if who in expected:
            assert code == expected[who][0] and expected[who][1] in remark, (name, code, remark)
        elif name in {a.name for a in attacks(broker_addr) if a.code in ADMIN_WRITES}:
            assert code == ResponseCode.NO_PERMISSION, (name, code, remark)
            assert "AccessKey=ns_broker is a broker account" in remark and "needs an admin account" in remark
        else:
            assert code == ResponseCode.SYSTEM_ERROR, (name, code, remark)
            assert "AccessKey=ns_client is not a name-server account" in remark
            assert "must be signed by a broker or admin account" in remark
    assert len(outcomes) == 11
    after = await state(conn, watched)
    assert after == before
    assert after["route HijackedTopic"] == ResponseCode.TOPIC_NOT_EXIST
    assert [b["broker_addrs"] for b in after["route " + TOPIC]["broker_datas"]] == [{0: broker_addr}]
    assert all(q["perm"] == PERM_READ_WRITE for q in after["route " + TOPIC]["queue_datas"])


async def test_refusals_are_logged(secured: Cluster, conn: Connection) -> None:
    response = await request(conn, RequestCode.PUT_KV_CONFIG, {"namespace": "X", "key": "k", "value": "v"})
    assert response.code == ResponseCode.SYSTEM_ERROR
    line = await secured.namesrv_processes[0].wait_for_line(
        r"refused PUT_KV_CONFIG \(code 100\) from 127\.0\.0\.1"
    )
    assert "must be signed by an admin account" in line
    assert "WARNING" in line


async def test_reads_stay_open(secured: Cluster, conn: Connection) -> None:
    for code, fields in [
        (RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic=TOPIC).to_fields()),
        (RequestCode.GET_BROKER_CLUSTER_INFO, {}),
        (RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {}),
        (RequestCode.GET_KV_CONFIG, {"namespace": NAMESPACE, "key": "kept"}),
        (RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": NAMESPACE}),
        (RequestCode.GET_NAMESRV_CONFIG, {}),
        (RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "DefaultCluster"}),
        (RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS, {}),
        (RequestCode.GET_BROKER_MEMBER_GROUP, {"clusterName": "DefaultCluster", "brokerName": "broker-a"}),
    ]:
        response = await request(conn, code, fields)
        assert response.code == ResponseCode.SUCCESS, (code, response.remark)


async def test_sdk_admin_writes_work_signed_by_an_admin(secured: Cluster, conn: Connection) -> None:
    async with Admin(secured.namesrv_addr, options=options(ADMIN)) as admin:
        await admin.update_kv_config(NAMESPACE, "sdk", "signed")
        assert await admin.kv_config(NAMESPACE, "sdk") == "signed"
        await admin.delete_kv_config(NAMESPACE, "sdk")
        assert await admin.kv_config(NAMESPACE, "sdk") is None
        assert sum((await wipe_write_perm(admin, "broker-a")).values()) > 0
        route = await admin.topic_route(TOPIC)
        assert route.queue_datas[0].perm == PERM_READ_WRITE & ~2
        assert sum((await add_write_perm(admin, "broker-a")).values()) > 0
        assert (await admin.topic_route(TOPIC)).queue_datas[0].perm == PERM_READ_WRITE
        await update_namesrv_config(admin, {"scanNotActiveBrokerInterval": "9000"})
        assert [c["scanNotActiveBrokerInterval"] for c in (await namesrv_config(admin)).values()] == ["9000"]
        await admin.create_topic("NsAuthDoomed", 1)
        await admin.delete_topic("NsAuthDoomed")
        assert "NsAuthDoomed" not in await admin.topic_list()
    for who, code in [(None, ResponseCode.SYSTEM_ERROR), (BROKER, ResponseCode.NO_PERMISSION)]:
        async with Admin(secured.namesrv_addr, options=options(who)) as admin:
            with pytest.raises(BrokerError) as refused:
                await admin.update_kv_config(NAMESPACE, "sdk", "not signed by an admin")
            assert refused.value.code == code
            with pytest.raises(BrokerError):
                await wipe_write_perm(admin, "broker-a")
    assert "sdk" not in (await state(conn, ()))["kv"]
    assert (await state(conn, (TOPIC,)))["route " + TOPIC]["queue_datas"][0]["perm"] == PERM_READ_WRITE


async def _mqadmin(*args: str, credentials: Credentials | None) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROCKETMQ_", "RMQ_", "NAMESRV_ADDR"))}
    if credentials is not None:
        env |= {"ROCKETMQ_ACCESS_KEY": credentials.access_key, "ROCKETMQ_SECRET_KEY": credentials.secret_key}
    proc = await spawn_tool("mqadmin", *args, env=env, cwd=None)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_mqadmin_writes_refused_unsigned_and_work_signed(secured: Cluster, conn: Connection) -> None:
    ns = ["-n", secured.namesrv_addr]
    kv = ["updateKvConfig", *ns, "-s", NAMESPACE, "-k", "cli", "-v", "from mqadmin"]
    code, _, err = await _mqadmin(*kv, credentials=None)
    assert code != 0 and "must be signed by an admin account" in err, err
    code, _, err = await _mqadmin("wipeWritePerm", *ns, "-b", "broker-a", credentials=None)
    assert code != 0 and "must be signed by an admin account" in err, err
    code, _, err = await _mqadmin(*kv, credentials=BROKER)
    assert code != 0 and "is a broker account" in err, err
    assert "cli" not in (await state(conn, ()))["kv"]
    code, out, err = await _mqadmin(*kv, credentials=ADMIN)
    assert code == 0 and "success" in out, err
    assert (await state(conn, ()))["kv"]["cli"] == "from mqadmin"
    code, _, err = await _mqadmin("deleteKvConfig", *ns, "-s", NAMESPACE, "-k", "cli", credentials=ADMIN)
    assert code == 0, err
    assert "cli" not in (await state(conn, ()))["kv"]


async def test_users_file_edits_take_effect(secured: Cluster, conn: Connection) -> None:
    users = secured.root / "namesrv_users.yml"
    carol = Credentials("ns_carol", "carol_secret_1")
    put = PutKVConfigRequestHeader(namespace=NAMESPACE, key="carol", value="admin now").to_fields()
    response = await request(conn, RequestCode.PUT_KV_CONFIG, put, credentials=carol)
    assert response.code == ResponseCode.SYSTEM_ERROR
    edited = {
        "accounts": [
            *USERS["accounts"],
            {"accessKey": carol.access_key, "secretKey": carol.secret_key, "admin": True},
        ]
    }
    users.write_text(yaml.safe_dump(edited))

    async def accepted() -> bool:
        return (
            await request(conn, RequestCode.PUT_KV_CONFIG, put, credentials=carol)
        ).code == ResponseCode.SUCCESS

    await wait_until(accepted, timeout=10)
    # A broken edit keeps the accounts in force.
    users.write_text("accounts: [unbalanced")
    await secured.namesrv_processes[0].wait_for_line("keeping the previous accounts")
    assert (
        await request(conn, RequestCode.PUT_KV_CONFIG, put, credentials=carol)
    ).code == ResponseCode.SUCCESS
    users.write_text(yaml.safe_dump(USERS))

    async def refused() -> bool:
        return (
            await request(conn, RequestCode.PUT_KV_CONFIG, put, credentials=carol)
        ).code != ResponseCode.SUCCESS

    await wait_until(refused, timeout=10)
    response = await request(
        conn,
        RequestCode.DELETE_KV_CONFIG,
        DeleteKVConfigRequestHeader(namespace=NAMESPACE, key="carol").to_fields(),
        credentials=ADMIN,
    )
    assert response.code == ResponseCode.SUCCESS


async def test_unsigned_broker_cannot_register(secured: Cluster, conn: Connection) -> None:
    other = Cluster(secured.root / "unsigned", namesrv_ports=list(secured.namesrv_ports))
    try:
        broker = await other.start_broker("broker-unsigned")
        assert broker.process is not None
        line = await broker.process.wait_for_line(r"refused the registration")
        assert "must be signed by a broker or admin account" in line
        cluster = (await state(conn, ()))["cluster"]
        assert "broker-unsigned" not in cluster["broker_addr_table"]
    finally:
        await other.stop()


async def test_acl1_broker_signs_with_the_admin_account_of_its_acl_file(tmp_path: Path) -> None:
    """ACL 1.0: the name server and the broker read the same plain_acl.yml; the broker signs
    with its first ``admin: true`` account, which the name server takes as an admin."""
    plain_acl = tmp_path / "plain_acl.yml"
    plain_acl.write_text(
        yaml.safe_dump(
            {
                "accounts": [
                    {
                        "accessKey": CLIENT.access_key,
                        "secretKey": CLIENT.secret_key,
                        "defaultTopicPerm": "PUB",
                    },
                    {"accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key, "admin": True},
                ]
            }
        )
    )
    cluster = Cluster(tmp_path)
    await cluster.start_namesrv(authenticationEnabled=True, authUsersFile=str(plain_acl))
    conn = await connect("127.0.0.1", cluster.namesrv_ports[0])
    try:
        broker = await cluster.start_broker(
            "broker-acl1", aclEnable="true", **{"rocketmq.acl.plain.file": str(plain_acl)}
        )
        assert broker.process is not None
        await broker.process.wait_for_line(
            r"name-server requests signed as AccessKey=ns_admin \(first admin account"
        )

        async def registered() -> bool:
            return "broker-acl1" in (await state(conn, ()))["cluster"]["broker_addr_table"]

        await wait_until(registered, timeout=15)
    finally:
        conn.close()
        await cluster.stop()


async def test_authentication_needs_a_users_file(tmp_path: Path) -> None:
    conf = tmp_path / "namesrv.conf"
    conf.write_text(f"authenticationEnabled=true\nauthUsersFile={tmp_path / 'missing.yml'}\n")
    proc = ServerProcess(
        "aiorocketmq.namesrv", ["--listen-port", "0", "--store-dir", str(tmp_path / "ns"), "-c", str(conf)]
    )
    with pytest.raises(RuntimeError, match="authenticationEnabled=true but cannot read the users file"):
        await proc.start()
    assert proc.proc is not None and proc.proc.returncode == 1
    (tmp_path / "clients.yml").write_text(yaml.safe_dump({"accounts": [USERS["accounts"][2]]}))
    conf.write_text(f"authenticationEnabled=true\nauthUsersFile={tmp_path / 'clients.yml'}\n")
    proc = ServerProcess(
        "aiorocketmq.namesrv", ["--listen-port", "0", "--store-dir", str(tmp_path / "ns"), "-c", str(conf)]
    )
    with pytest.raises(RuntimeError, match="has no broker or admin account"):
        await proc.start()


async def test_apache_53_broker_registers_signed_with_its_inner_client_credentials(tmp_path: Path) -> None:
    """Apache 5.3.3's broker signs its name-server requests with
    ``innerClientAuthenticationCredentials`` (BrokerOuterAPI's ACL hook): our authenticated
    name server takes its registration and routes its topics."""
    toolchain = await asyncio.to_thread(build_java53_only)
    users = tmp_path / "namesrv_users.yml"
    users.write_text(yaml.safe_dump(USERS))
    cluster = Cluster(tmp_path)
    await cluster.start_namesrv(authenticationEnabled=True, authUsersFile=str(users))
    broker = ApacheBroker(
        toolchain,
        tmp_path / "apache53",
        cluster.namesrv_addr,
        name="apache53-signed",
        overrides={
            "innerClientAuthenticationCredentials": credentials_property(BROKER),
            # Apache stores the inner client as a user at start, so it needs a user store.
            "authenticationMetadataProvider": (
                "org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider"
            ),
        },
    )
    conn = await connect("127.0.0.1", cluster.namesrv_ports[0])
    try:
        # start() returns once the name server lists the broker (5.x brokers), so a refused
        # registration fails here.
        await asyncio.to_thread(broker.start)
        snapshot = await state(conn, ("TBW102",))
        assert snapshot["cluster"]["broker_addr_table"]["apache53-signed"]["broker_addrs"] == {0: broker.addr}
        assert [q["broker_name"] for q in snapshot["route TBW102"]["queue_datas"]] == ["apache53-signed"]
        assert "refused" not in cluster.namesrv_processes[0].output
    finally:
        conn.close()
        await asyncio.to_thread(broker.stop)
        await cluster.stop()


# -- authentication off: as before ------------------------------------------------------------


async def test_with_authentication_off_writes_are_open_as_before(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    await cluster.start_namesrv()
    conn = await connect("127.0.0.1", cluster.namesrv_ports[0])
    try:
        # A broker that signs registers with a name server that checks nothing, too.
        broker = await cluster.start_broker(
            "broker-a", innerClientAuthenticationCredentials=credentials_property(BROKER)
        )
        async with Admin(cluster.namesrv_addr) as admin:
            await admin.create_topic(TOPIC, 4)
        attack = fake_registration(TOPIC)
        response = await request(conn, attack.code, attack.fields, attack.body)
        assert response.code == ResponseCode.SUCCESS
        route = (await state(conn, (TOPIC,)))["route " + TOPIC]
        assert sorted(a for b in route["broker_datas"] for a in b["broker_addrs"].values()) == sorted(
            [broker.addr, ATTACKER_ADDR]
        )
        put = PutKVConfigRequestHeader(namespace=NAMESPACE, key="planted", value="evil").to_fields()
        assert (await request(conn, RequestCode.PUT_KV_CONFIG, put)).code == ResponseCode.SUCCESS
        assert (await state(conn, ()))["kv"] == {"planted": "evil"}
    finally:
        conn.close()
        await cluster.stop()


# -- the users file, without processes --------------------------------------------------------


async def test_users_file_roles() -> None:
    users = Users.parse(
        yaml.safe_dump(
            {
                "accounts": [
                    {"accessKey": "b", "secretKey": "s1", "role": "Broker"},
                    {"accessKey": "a", "secretKey": "s2", "role": "admin"},
                    {"accessKey": "p", "secretKey": "s3", "admin": "true"},
                    {"accessKey": "c", "secretKey": "s4", "admin": False},
                ]
            }
        )
    )
    assert {k: a.role for k, a in users.accounts.items()} == {
        "b": Role.BROKER,
        "a": Role.ADMIN,
        "p": Role.ADMIN,
    }
    assert users.ignored == 1
    assert all(users.accounts["b"].may(code) for code in BROKER_WRITES)
    assert not any(users.accounts["b"].may(code) for code in ADMIN_WRITES)
    assert all(users.accounts["a"].may(code) for code in BROKER_WRITES | ADMIN_WRITES)
    assert "s1" not in repr(users.accounts["b"])
    for bad, reason in [
        ("accounts: [{accessKey: x}]", "needs accessKey and secretKey"),
        ("accounts: [{accessKey: x, secretKey: y, role: root}]", "neither 'broker' nor 'admin'"),
        ("accounts: 3", "'accounts' must be a list"),
        ("- a\n- b\n", "not a mapping"),
    ]:
        with pytest.raises(UsersFileError, match=reason):
            Users.parse(bad)


async def test_inner_client_credentials_as_apache_reads_them() -> None:
    assert inner_client_credentials(None) is None
    assert inner_client_credentials("  ") is None
    # Apache signs nothing when either key is blank.
    assert inner_client_credentials('{"accessKey": "a", "secretKey": ""}') is None
    parsed = inner_client_credentials('{"accessKey": "a", "secretKey": "s", "securityToken": "t"}')
    assert parsed == Credentials("a", "s", "t")
    for bad in ("accessKey=a", '["a", "s"]'):
        with pytest.raises(ConfigError, match="innerClientAuthenticationCredentials"):
            inner_client_credentials(bad)
