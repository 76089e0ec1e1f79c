"""ACL 2.0 on a real broker process (``authenticationEnabled`` and ``authorizationEnabled``):
the start-up users, the management requests 3001-3010 and who may call them, signatures
checked as the 5.x clients compute them, disabled users, allow and deny decisions, source
addresses, our SDK producing and consuming (with a retry through the broker's own retry topic)
and refused where the policy says, nothing stored on a refusal, the gRPC front answering
UNAUTHORIZED with Apache's messages, and ACL 1.0 accounts migrated and kept across a restart.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
import yaml

from aiorocketmq.broker.grpc import messaging_pb2 as pb
from aiorocketmq.broker.grpc import messaging_pb2_grpc as pb_grpc
from aiorocketmq.client import (
    Admin,
    ClientOptions,
    ConsumeFrom,
    ConsumeResult,
    Producer,
    PushConsumer,
    SendFailedError,
    auth_admin,
)
from aiorocketmq.protocol import fastjson
from aiorocketmq.protocol.acl import Credentials, sign
from aiorocketmq.protocol.auth import AclInfo, PolicyEntryInfo, PolicyInfo, UserInfo
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import BrokerError
from aiorocketmq.protocol.message import Message, MessageExt, decode_records
from aiorocketmq.protocol.pop import BatchAck, PopRequestCode, encode_batch_ack_body
from aiorocketmq.protocol.transport import Connection, connect
from tests.broker.requests import call, pull_request, send
from tests.cluster import Cluster
from tests.grpc.conftest import Grpc5, install_py5_client, start_grpc_broker
from tests.grpc.test_security import signed
from tests.support import ServerProcess, wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")

ROOT = Credentials("root", "root_secret_1")
INNER = Credentials("broker_inner", "inner_secret_1")
ALICE = Credentials("alice", "alice_secret_1")
BOB = Credentials("bob", "bob_secret_1")
TOPIC = "Acl2Topic"
SECRET = "Acl2Secret"
GROUP = "Acl2Group"
NO_PERMISSION = ResponseCode.NO_PERMISSION

_ids = itertools.count(1)


def options(credentials: Credentials) -> ClientOptions:
    return ClientOptions(access_key=credentials.access_key, secret_key=credentials.secret_key)


def acl(subject: str, *entries: PolicyEntryInfo) -> AclInfo:
    return AclInfo(subject=subject, policies=[PolicyInfo(entries=list(entries))])


def allow(
    resource: str, *actions: str, ips: list[str] | None = None, decision: str = "Allow"
) -> PolicyEntryInfo:
    return PolicyEntryInfo(resource=resource, actions=list(actions), source_ips=ips, decision=decision)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Cluster, int]]:
    cluster = Cluster(tmp_path_factory.mktemp("acl2"))
    await cluster.start_namesrv()
    try:
        grpc_port = await start_grpc_broker(
            cluster,
            authenticationEnabled="true",
            authorizationEnabled="true",
            initAuthenticationUser=f'{{"username":"{ROOT.access_key}","password":"{ROOT.secret_key}"}}',
            innerClientAuthenticationCredentials=(
                f'{{"accessKey":"{INNER.access_key}","secretKey":"{INNER.secret_key}"}}'
            ),
        )
        addr = cluster.brokers["broker-a"].addr
        async with Admin(cluster.namesrv_addr, options=options(ROOT)) as admin:
            await admin.create_topic(TOPIC, queue_nums=2)
            await admin.create_topic(SECRET, queue_nums=1)
            for user in (ALICE, BOB):
                await auth_admin.create_user(
                    admin, addr, UserInfo(username=user.access_key, password=user.secret_key)
                )
            await auth_admin.create_acl(
                admin,
                addr,
                acl(
                    "User:alice",
                    allow("Topic:Acl2*", "Pub", "Sub", "Get"),
                    allow(f"Topic:{SECRET}", "Pub", decision="Deny"),
                    allow(f"Group:{GROUP}", "Sub"),
                ),
            )
        yield cluster, grpc_port
    finally:
        await cluster.stop()


@pytest_asyncio.fixture(loop_scope="module")
async def root_admin(cluster: tuple[Cluster, int]) -> AsyncIterator[Admin]:
    async with Admin(cluster[0].namesrv_addr, options=options(ROOT)) as admin:
        yield admin


def broker_addr(cluster: tuple[Cluster, int]) -> str:
    return cluster[0].brokers["broker-a"].addr


async def open_as(cluster: tuple[Cluster, int], credentials: Credentials | None) -> Connection:
    port = cluster[0].brokers["broker-a"].port
    signer = (lambda cmd: sign(cmd, credentials)) if credentials is not None else None
    return await connect("127.0.0.1", port, signer=signer)


async def max_offsets(admin: Admin, addr: str, topic: str, queues: int) -> list[int]:
    found = []
    for queue_id in range(queues):
        response = await admin.instance.call(
            addr, RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": queue_id}
        )
        found.append(int(response.ext_fields["offset"]))
    return found


async def test_start_up_users_are_super_users(cluster: tuple[Cluster, int], root_admin: Admin) -> None:
    users = {u.username: u for u in await auth_admin.list_users(root_admin, broker_addr(cluster))}
    assert users["root"].user_type == "Super" and users["root"].user_status == "enable"
    assert users["broker_inner"].user_type == "Super"
    assert users["alice"].user_type == "Normal"
    # The broker's own registration (signed or not) put its topics on the name server.
    route = await root_admin.topic_route(TOPIC)
    assert route is not None and route.broker_datas[0].broker_name == "broker-a"


async def test_managing_users_and_acls_needs_a_super_user(
    cluster: tuple[Cluster, int], root_admin: Admin
) -> None:
    addr = broker_addr(cluster)
    evil = UserInfo(username="mallory", password="mallory_secret", user_type="Super")
    conn = await open_as(cluster, None)
    try:
        unsigned = await call(conn, RequestCode.AUTH_CREATE_USER, {"username": "mallory"}, body=evil.encode())
        assert (unsigned.code, unsigned.remark) == (NO_PERMISSION, "username cannot be null.")
    finally:
        conn.close()
    async with Admin(cluster[0].namesrv_addr, options=options(ALICE)) as alice:
        for attempt in (
            auth_admin.create_user(alice, addr, evil),
            auth_admin.list_users(alice, addr),
            auth_admin.create_acl(alice, addr, acl("User:alice", allow("*", "All"))),
            auth_admin.delete_user(alice, addr, "root"),
        ):
            with pytest.raises(BrokerError) as refused:
                await attempt
            assert refused.value.code == NO_PERMISSION
            assert refused.value.remark == (
                "User:alice has no permission to access Cluster:DefaultCluster from 127.0.0.1, no matched policies."
            )
    # Nothing was stored or changed.
    assert await auth_admin.get_user(root_admin, addr, "mallory") is None
    assert await auth_admin.get_user(root_admin, addr, "root") is not None
    stored = await auth_admin.get_acl(root_admin, addr, "User:alice")
    assert stored is not None and "*" not in [
        e.resource for p in stored.policies or [] for e in p.entries or []
    ]
    # Apache's own rules for the requests themselves.
    with pytest.raises(BrokerError, match="The user is existed"):
        await auth_admin.create_user(root_admin, addr, UserInfo(username="alice", password="x"))
    with pytest.raises(BrokerError, match="The subject of User:nobody is not exist"):
        await auth_admin.create_acl(root_admin, addr, acl("User:nobody", allow("Topic:t", "Pub")))
    with pytest.raises(BrokerError, match="The source ip is invalid"):
        await auth_admin.create_acl(
            root_admin, addr, acl("User:bob", allow("Topic:t", "Pub", ips=["10.0.0/8"]))
        )


async def test_signatures_unknown_and_disabled_users(cluster: tuple[Cluster, int], root_admin: Admin) -> None:
    addr = broker_addr(cluster)
    cases = [
        (Credentials("alice", "not_the_secret"), "check signature failed."),
        (Credentials("nobody", "whatever_secret"), "User:nobody is not found."),
    ]
    for credentials, remark in cases:
        conn = await open_as(cluster, credentials)
        try:
            response = await send(conn, TOPIC, b"bad credentials", group="Acl2Producer")
            assert (response.code, response.remark) == (NO_PERMISSION, remark)
        finally:
            conn.close()
    await auth_admin.update_user(root_admin, addr, UserInfo(username="alice", user_status="disable"))
    try:
        conn = await open_as(cluster, ALICE)
        try:
            response = await send(conn, TOPIC, b"disabled", group="Acl2Producer")
            assert (response.code, response.remark) == (NO_PERMISSION, "User:alice is disabled.")
        finally:
            conn.close()
    finally:
        await auth_admin.update_user(root_admin, addr, UserInfo(username="alice", user_status="enable"))


async def test_sdk_produces_and_consumes_with_a_retry(cluster: tuple[Cluster, int]) -> None:
    namesrv = cluster[0].namesrv_addr
    body = f"acl2-{next(_ids)}".encode()
    async with Producer("Acl2Producer", namesrv, options=options(ALICE)) as producer:
        result = await producer.send(Message(TOPIC, body))
        assert result.msg_id
    deliveries: list[MessageExt] = []
    redelivered = asyncio.Event()
    consumer = PushConsumer(GROUP, namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, options=options(ALICE))
    consumer.subscribe(TOPIC)

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        mine = [m for m in messages if m.body == body]
        deliveries.extend(mine)
        if mine and len(deliveries) == 1:
            return ConsumeResult.RECONSUME_LATER  # back through the broker's retry topic
        if len(deliveries) >= 2:
            redelivered.set()
        return ConsumeResult.SUCCESS

    async with consumer:
        await asyncio.wait_for(redelivered.wait(), 60)
    assert [m.body for m in deliveries[:2]] == [body, body]
    assert deliveries[1].reconsume_times == 1


async def test_refusals_store_nothing(cluster: tuple[Cluster, int], root_admin: Admin) -> None:
    namesrv, addr = cluster[0].namesrv_addr, broker_addr(cluster)
    before = await max_offsets(root_admin, addr, TOPIC, 2) + await max_offsets(root_admin, addr, SECRET, 1)
    async with Producer("Acl2Producer", namesrv, options=options(BOB), retries=0) as producer:
        with pytest.raises(SendFailedError, match="User:bob has no permission to access Topic:Acl2Topic"):
            await producer.send(Message(TOPIC, b"bob has no policy"))
    async with Producer("Acl2Producer", namesrv, options=options(ALICE), retries=0) as producer:
        with pytest.raises(
            SendFailedError, match=r"Topic:Acl2Secret from 127\.0\.0\.1, the decision is deny"
        ):
            await producer.send(Message(SECRET, b"denied by a literal entry"))
    async with Producer("Acl2Producer", namesrv, retries=0) as producer:
        with pytest.raises(SendFailedError, match="username cannot be null"):
            await producer.send(Message(TOPIC, b"unsigned"))
    after = await max_offsets(root_admin, addr, TOPIC, 2) + await max_offsets(root_admin, addr, SECRET, 1)
    assert after == before
    # Refusals leave lines in the broker's log (one a minute per request code and response
    # code), with the response code and Apache's remark.
    process = cluster[0].brokers["broker-a"].process
    assert process is not None
    await process.wait_for_line(r"refused SEND_MESSAGE\S* \(code \d+\) from .*: NO_PERMISSION\(16\): \S")
    # A super user is not asked for policies at all.
    async with Producer("Acl2Producer", namesrv, options=options(ROOT)) as producer:
        await producer.send(Message(SECRET, b"root may"))


async def test_source_addresses_decide(cluster: tuple[Cluster, int], root_admin: Admin) -> None:
    addr = broker_addr(cluster)
    await auth_admin.create_acl(
        root_admin, addr, acl("User:bob", allow(f"Topic:{TOPIC}", "Pub", ips=["10.0.0.0/8"]))
    )
    conn = await open_as(cluster, BOB)
    try:
        refused = await send(conn, TOPIC, b"from the wrong network", group="Acl2Producer")
        assert refused.code == NO_PERMISSION and "no matched policies" in (refused.remark or "")
        await auth_admin.update_acl(
            root_admin,
            addr,
            acl("User:bob", allow(f"Topic:{TOPIC}", "Pub", ips=["10.0.0.0/8", "127.0.0.0/24"])),
        )
        accepted = await send(conn, TOPIC, b"from the right network", group="Acl2Producer")
        assert accepted.code == ResponseCode.SUCCESS
    finally:
        conn.close()
        await auth_admin.delete_acl(root_admin, addr, "User:bob")
    assert await auth_admin.get_acl(root_admin, addr, "User:bob") is None


async def test_lite_pulls_assignments_and_batch_acks_need_sub(
    cluster: tuple[Cluster, int], root_admin: Admin
) -> None:
    """Beyond Apache 5.3.3, which lets any authenticated user make these requests (no
    annotation on their headers): a lite pull reads a topic, a queue assignment and a batch ack
    act for a group, so each needs Sub as a pull does. Bob, with no policy, is refused each;
    a super user's lite pull is served."""
    stored_before = await max_offsets(root_admin, broker_addr(cluster), TOPIC, 2)
    fields = pull_request(TOPIC, stored_before[0], queue_id=0, group=GROUP).ext_fields
    assignment = fastjson.dumps(
        {"topic": TOPIC, "consumerGroup": GROUP, "clientId": "x", "strategyName": "AVG"}
    )
    ack = encode_batch_ack_body("broker-a", [BatchAck(GROUP, TOPIC, False, 0, 0, 0, 0, 60_000, (0,))])
    requests = [
        (RequestCode.LITE_PULL_MESSAGE, fields, b""),
        (RequestCode.QUERY_ASSIGNMENT, {}, assignment),
        (PopRequestCode.BATCH_ACK_MESSAGE, {}, ack),
    ]
    bob, root = await open_as(cluster, BOB), await open_as(cluster, ROOT)
    try:
        stored = await send(root, TOPIC, b"for the lite pull", queue_id=0, group="Acl2Producer")
        assert stored.code == ResponseCode.SUCCESS, stored
        for code, header, body in requests:
            refused = await call(bob, code, dict(header), body)
            assert refused.code == NO_PERMISSION, (code, refused)
            assert "User:bob has no permission" in (refused.remark or ""), refused.remark
        served = await call(root, RequestCode.LITE_PULL_MESSAGE, dict(fields))
        assert served.code == ResponseCode.SUCCESS and served.body, served
    finally:
        bob.close()
        root.close()


async def test_grpc_front_answers_unauthorized(cluster: tuple[Cluster, int]) -> None:
    def send_request(topic: str) -> pb.SendMessageRequest:
        system = pb.SystemProperties(message_id=f"ID{time.time_ns()}", message_type=pb.NORMAL)
        return pb.SendMessageRequest(
            messages=[pb.Message(topic=pb.Resource(name=topic), body=b"grpc", system_properties=system)]
        )

    async with grpc.aio.insecure_channel(f"127.0.0.1:{cluster[1]}") as channel:
        stub = pb_grpc.MessagingServiceStub(channel)
        unsigned = await stub.SendMessage(send_request(TOPIC))
        assert (unsigned.status.code, unsigned.status.message) == (
            pb.UNAUTHORIZED,
            "username cannot be null.",
        )
        forged = await stub.SendMessage(send_request(TOPIC), metadata=signed(ALICE.access_key, "guess"))
        assert (forged.status.code, forged.status.message) == (pb.UNAUTHORIZED, "check signature failed.")
        denied = await stub.SendMessage(
            send_request(SECRET), metadata=signed(ALICE.access_key, ALICE.secret_key)
        )
        assert denied.status.code == pb.UNAUTHORIZED
        assert denied.status.message.endswith("the decision is deny.")
        route = await stub.QueryRoute(
            pb.QueryRouteRequest(topic=pb.Resource(name=TOPIC)),
            metadata=signed(ALICE.access_key, ALICE.secret_key),
        )
        assert route.status.code == pb.OK
        sent = await stub.SendMessage(
            send_request(TOPIC), metadata=signed(ALICE.access_key, ALICE.secret_key)
        )
        assert sent.status.code == pb.OK


async def test_acl1_accounts_migrate_and_survive_a_restart(tmp_path: Path) -> None:
    plain = tmp_path / "plain_acl.yml"
    plain.write_text(
        yaml.safe_dump(
            {
                "accounts": [
                    {"accessKey": "v1admin", "secretKey": "v1admin_secret", "admin": True},
                    {
                        "accessKey": "v1user",
                        "secretKey": "v1user_secret",
                        "defaultTopicPerm": "DENY",
                        "defaultGroupPerm": "SUB",
                        "topicPerms": ["V1Topic=PUB|SUB"],
                    },
                ]
            }
        )
    )
    settings: dict[str, Any] = {
        "aclEnable": "true",
        "rocketmq.acl.plain.file": str(plain),
        "authenticationEnabled": "true",
        "authorizationEnabled": "true",
        "migrateAuthFromV1Enabled": "true",
    }
    cluster = Cluster(tmp_path / "cluster")
    await cluster.start_namesrv()
    try:
        broker = await cluster.start_broker("broker-a", **settings)
        v1admin, v1user = Credentials("v1admin", "v1admin_secret"), Credentials("v1user", "v1user_secret")
        async with Admin(cluster.namesrv_addr, options=options(v1admin)) as admin:
            await admin.create_topic("V1Topic", queue_nums=1)
            await admin.create_topic("V1Other", queue_nums=1)
            user = await auth_admin.get_user(admin, broker.addr, "v1user")
            assert user is not None and user.user_type == "Normal"
            await auth_admin.update_user(
                admin, broker.addr, UserInfo(username="v1user", password="changed_secret")
            )
        await cluster.stop_broker("broker-a")
        # Migration again on restart leaves the changed user alone; the metadata file kept it.
        await cluster.start_broker("broker-a", **settings)
        async with Producer(
            "V1Producer", cluster.namesrv_addr, options=options(v1user), retries=0
        ) as producer:
            with pytest.raises(SendFailedError, match="check signature failed"):
                await producer.send(Message("V1Topic", b"old secret"))
        changed = Credentials("v1user", "changed_secret")
        async with Producer(
            "V1Producer", cluster.namesrv_addr, options=options(changed), retries=0
        ) as producer:
            await producer.send(Message("V1Topic", b"migrated right"))
            with pytest.raises(
                SendFailedError, match=r"Topic:V1Other from 127\.0\.0\.1, the decision is deny"
            ):
                await producer.send(Message("V1Other", b"default DENY"))
        assert (broker.store_dir / "config" / "auth.json").is_file()
    finally:
        await cluster.stop()


async def test_official_5x_client_authenticates(cluster: tuple[Cluster, int]) -> None:
    path = await asyncio.to_thread(install_py5_client)
    grpc5 = Grpc5(cluster[0], cluster[1], path)
    body = f"py5-{next(_ids)}"
    messages = [{"topic": TOPIC, "body": body, "tag": "T"}]
    sent = await grpc5.run("produce", messages=messages, ak=ALICE.access_key, sk=ALICE.secret_key)
    assert sent["errors"] == [] and len(sent["receipts"]) == 1
    got = await grpc5.run(
        "simple", topic=TOPIC, group=GROUP, count=1, ak=ALICE.access_key, sk=ALICE.secret_key, wait=30
    )
    assert body in [m["body"] for m in got["messages"]]
    refused = await grpc5.run("produce", messages=messages, ak=BOB.access_key, sk=BOB.secret_key)
    assert refused["receipts"] == [] and len(refused["errors"]) == 1


async def test_mqproxy_checks_clients_against_the_brokers_users_and_acls(
    cluster: tuple[Cluster, int], root_admin: Admin, tmp_path: Path
) -> None:
    """``mqproxy`` with Apache's AuthConfig keys in its rmq-proxy.json: it mirrors the brokers'
    users and ACLs (refreshed every second here), checks each 5.x request itself, and signs its
    own requests to the broker as its inner (super) user; a user created on the broker after
    the proxy started is known to it within the refresh."""
    config = tmp_path / "rmq-proxy.json"
    config.write_text(
        json.dumps(
            {
                "namesrvAddr": cluster[0].namesrv_addr,
                "grpcServerPort": 0,
                "remotingListenPort": -1,
                "authenticationEnabled": True,
                "authorizationEnabled": True,
                "innerClientAuthenticationCredentials": json.dumps(
                    {"accessKey": ROOT.access_key, "secretKey": ROOT.secret_key}
                ),
                "userCacheRefreshSecond": 1,
                "aclCacheRefreshSecond": 1,
            }
        )
    )
    proxy = await ServerProcess(
        "aiorocketmq.proxy", ["-pc", str(config), "--bind-address", "127.0.0.1"]
    ).start()
    try:
        assert proxy.port is not None
        grpc5 = Grpc5(cluster[0], proxy.port, await asyncio.to_thread(install_py5_client))
        body = f"proxied-{next(_ids)}"
        messages = [{"topic": TOPIC, "body": body, "tag": "T"}]
        sent = await grpc5.run("produce", messages=messages, ak=ALICE.access_key, sk=ALICE.secret_key)
        assert sent["errors"] == [] and len(sent["receipts"]) == 1
        got = await grpc5.run(
            "simple", topic=TOPIC, group=GROUP, count=1, ak=ALICE.access_key, sk=ALICE.secret_key, wait=30
        )
        assert body in [m["body"] for m in got["messages"]]
        # Bob exists but no ACL lets him publish; a wrong secret does not authenticate.
        for ak, sk in ((BOB.access_key, BOB.secret_key), (ALICE.access_key, "not-her-secret")):
            refused = await grpc5.run("produce", messages=messages, ak=ak, sk=sk)
            assert refused["receipts"] == [] and len(refused["errors"]) == 1, (ak, refused)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{proxy.port}") as channel:
            stub = pb_grpc.MessagingServiceStub(channel)
            unsigned = await stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name=TOPIC)))
            assert unsigned.status.code == pb.UNAUTHORIZED, unsigned.status
        # A user created on the broker now: the proxy knows her after its next refresh.
        carol = Credentials(f"carol{next(_ids)}", "carol_secret_1")
        addr = cluster[0].brokers["broker-a"].addr
        await auth_admin.create_user(
            root_admin, addr, UserInfo(username=carol.access_key, password=carol.secret_key)
        )
        await auth_admin.create_acl(
            root_admin, addr, acl(f"User:{carol.access_key}", allow(f"Topic:{TOPIC}", "Pub"))
        )
        async with grpc.aio.insecure_channel(f"127.0.0.1:{proxy.port}") as channel:
            stub = pb_grpc.MessagingServiceStub(channel)

            async def carol_known() -> bool:
                answer = await stub.QueryRoute(
                    pb.QueryRouteRequest(topic=pb.Resource(name=TOPIC)),
                    metadata=signed(carol.access_key, carol.secret_key),
                )
                return answer.status.code == pb.OK

            await wait_until(carol_known, timeout=10, interval=0.2)
        sent = await grpc5.run("produce", messages=messages, ak=carol.access_key, sk=carol.secret_key)
        assert sent["errors"] == [] and len(sent["receipts"]) == 1
    finally:
        assert await proxy.stop() == 0


async def test_static_topic_forwards_are_signed_by_the_broker(tmp_path: Path) -> None:
    """A pull of a static topic's global queue whose old part another broker holds is forwarded
    there with its fields rewritten (``lo``, ``bname``), which voids the client's signature: the
    broker signs the forward with its own account (innerClientAuthenticationCredentials)."""
    settings: dict[str, Any] = {
        "authenticationEnabled": "true",
        "authorizationEnabled": "true",
        "initAuthenticationUser": f'{{"username":"{ROOT.access_key}","password":"{ROOT.secret_key}"}}',
        "innerClientAuthenticationCredentials": f'{{"accessKey":"{INNER.access_key}","secretKey":"{INNER.secret_key}"}}',
    }
    cluster = Cluster(tmp_path)
    await cluster.start_namesrv()
    conns: list[Connection] = []
    try:
        for name in ("broker-a", "broker-b"):
            await cluster.start_broker(name, **settings)

        async def open_to(name: str, credentials: Credentials) -> Connection:
            port = cluster.brokers[name].port
            conn = await connect("127.0.0.1", port, signer=lambda cmd: sign(cmd, credentials))
            conns.append(conn)
            return conn

        a, b = await open_to("broker-a", ROOT), await open_to("broker-b", ROOT)
        for conn in (a, b):
            assert (await auth_admin_call(conn, "alice", ALICE.secret_key)).code == ResponseCode.SUCCESS
            entries = [allow("Topic:StaticOrders", "Sub", "Pub"), allow(f"Group:{GROUP}", "Sub")]
            response = await call(
                conn,
                RequestCode.AUTH_CREATE_ACL,
                {"subject": "User:alice"},
                body=acl("User:alice", *entries).encode(),
            )
            assert response.code == ResponseCode.SUCCESS, response
        first = [static_item("broker-b", 0)]
        assert (await static_create(b, "broker-b", {0: first}, EPOCH, 1)).code == 0
        assert (await send(b, "StaticOrders", b"first", queue_id=0)).code == ResponseCode.SUCCESS
        moved = [static_item("broker-b", 0), static_item("broker-a", 0, gen=1, logic=10_000)]
        assert (await static_create(a, "broker-a", {0: moved}, EPOCH + 1000, 1)).code == 0
        assert (await static_create(b, "broker-b", {0: moved}, EPOCH + 1000, 1)).code == 0
        alice = await open_to("broker-a", ALICE)
        fields = pull_request("StaticOrders", 0, queue_id=0, group=GROUP).ext_fields
        pulled = await call(alice, RequestCode.PULL_MESSAGE, fields)
        assert pulled.code == ResponseCode.SUCCESS, pulled
        assert [m.body for m in decode_records(pulled.body)] == [b"first"]
    finally:
        for conn in conns:
            conn.close()
        await cluster.stop()


EPOCH = 1_700_000_000_000


async def auth_admin_call(conn: Connection, username: str, password: str) -> RemotingCommand:
    body = UserInfo(username=username, password=password).encode()
    return await call(conn, RequestCode.AUTH_CREATE_USER, {"username": username}, body=body)


def static_item(bname: str, queue_id: int, *, gen: int = 0, logic: int = 0) -> str:
    return (
        f'{{"bname":"{bname}","endOffset":-1,"gen":{gen},"logicOffset":{logic},"queueId":{queue_id},'
        '"startOffset":0,"timeOfEnd":-1,"timeOfStart":-1}'
    )


async def static_create(
    conn: Connection, bname: str, hosted: dict[int, list[str]], epoch: int, queues: int
) -> RemotingCommand:
    items = ",".join(f"{gid}:[{','.join(entries)}]" for gid, entries in sorted(hosted.items()))
    body = (
        f'{{"bname":"{bname}","currIdMap":{{}},"dirty":false,"epoch":{epoch},"hostedQueues":{{{items}}},'
        f'"scope":"__global__","topic":"StaticOrders","totalQueues":1}}'
    ).encode()
    fields = {
        "topic": "StaticOrders",
        "readQueueNums": queues,
        "writeQueueNums": queues,
        "perm": 6,
        "force": "false",
    }
    return await call(conn, RequestCode.UPDATE_AND_CREATE_STATIC_TOPIC, fields, body)
