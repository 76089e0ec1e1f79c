"""ACL 2.0 (RocketMQ 5.3) on our broker against Apache 5.3.3's: the same users and ACL policies,
the same signed requests, the same allow/deny outcome and response code.

Both brokers start with the same ACL 2.0 settings (``ACL2_BROKER``: authentication and
authorization on, a super user created at start, the inner-client credentials, the metadata in
a temporary directory). Every user and policy is then created on each broker by Apache 5.3.3's
own ``mqadmin`` (createUser, updateUser, createAcl, ... signed with the super user's
``conf/tools.yml``), which shows Apache's tools work against ours. Then each case of ``CASES``
(a user, a request on a resource needing some action, from 127.0.0.1, against policies whose
source IPs vary) is sent as a real request to both brokers, twice: signed by the RocketMQ 5.3
Java remoting client's ``AclClientRPCHook`` (java53acl/AclProbe.java) and by our SDK. The test
prints the table (case, Apache's code, ours) and asserts that the codes agree, and that Apache
answered what ``Case.apache`` says (so a case cannot pass by both brokers letting everything
through). Last, Apache's ``mqadmin`` getUser/listUser/getAcl/listAcl print the same on both.

Apache 5.3.3's choice between several matching entries (``AclAuthorizationHandler
.comparePolicyEntries``) is not a total order: with an ``Allow`` on ``Topic:*`` and a ``Deny`` on
a literal topic, the answer depends on which entry was created first, and of two matching prefixes
the shorter wins. The cases ``frank-*`` pin that behaviour down as Apache has it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from aiorocketmq import Admin
from aiorocketmq.client import ClientOptions
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.tools.mqadmin import execute, parse_args
from tests.cluster import Cluster
from tests.interop.conftest import ApacheCluster
from tests.interop.harness import HERE, Toolchain, _build_module, build_java53_admin, run_program
from tests.interop.test_mqadmin53 import MqAdmin, prepare_home

pytestmark = pytest.mark.timeout(900)

CLUSTER = "DefaultCluster"
SUPER = ("rocketmq", "12345678")

#: The broker settings of both sides, Apache 5.3.3's AuthConfig names (``authConfigPath`` is
#: added per broker). Apache needs the metadata providers named; ours reads the same names.
ACL2_BROKER: dict[str, Any] = {
    "authenticationEnabled": True,
    "authorizationEnabled": True,
    "authenticationProvider": "org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider",
    "authenticationMetadataProvider": (
        "org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider"
    ),
    "authorizationProvider": "org.apache.rocketmq.auth.authorization.provider.DefaultAuthorizationProvider",
    "authorizationMetadataProvider": (
        "org.apache.rocketmq.auth.authorization.provider.LocalAuthorizationMetadataProvider"
    ),
    "initAuthenticationUser": json.dumps({"username": SUPER[0], "password": SUPER[1]}, separators=(",", ":")),
    "innerClientAuthenticationCredentials": json.dumps(
        {"accessKey": SUPER[0], "secretKey": SUPER[1]}, separators=(",", ":")
    ),
}

PASSWORDS = {
    "rocketmq": SUPER[1],
    "admin2": "admin2-pw",
    "alice": "alice-pw",
    "bob": "bob-pw",
    "carol": "carol-pw",
    "dave": "dave-pw",
    "erin": "erin-pw",
    "frank": "frank-pw",
    "gus": "gus-pw",
    "ops": "ops-pw",
    "lister": "lister-pw",
    # never created
    "mallory": "mallory-pw",
}

TOPICS = [
    "AclOrders",
    "pre-events",
    "AclSecret",
    "AclAdminTopic",
    "IpExact",
    "IpCidr",
    "IpOther",
    "IpMulti",
    "IpDenyLocal",
    "IpDenyRemote",
    "ErinSecret",
    "erin-news",
    "FrankSecret",
    "frank-news",
    "frank-deep-x",
    "GusDeny",
]
GROUPS = ["AclGroup", "pre-group", "OtherGroup"]


def acl(user: str, resources: str, actions: str, decision: str, ips: str | None = None) -> list[str]:
    args = ["createAcl", "-s", f"User:{user}", "-r", resources, "-a", actions, "-d", decision]
    return args + (["-i", ips] if ips else [])


#: What Apache's mqadmin runs on each broker (``-n`` and ``-b`` added), in this order. The
#: policies' entry order matters to Apache's choice between matching entries (the module's doc).
SETUP: list[list[str]] = [
    *(["updateTopic", "-t", t, "-r", "1", "-w", "1"] for t in TOPICS),
    *(["updateSubGroup", "-g", g] for g in GROUPS),
    ["createUser", "-u", "admin2", "-p", PASSWORDS["admin2"], "-t", "Super"],
    ["createUser", "-u", "alice", "-p", PASSWORDS["alice"]],
    ["createUser", "-u", "bob", "-p", PASSWORDS["bob"], "-t", "Normal"],
    ["createUser", "-u", "carol", "-p", PASSWORDS["carol"]],
    ["updateUser", "-u", "carol", "-s", "disable"],
    ["createUser", "-u", "dave", "-p", PASSWORDS["dave"]],
    ["createUser", "-u", "erin", "-p", PASSWORDS["erin"]],
    ["createUser", "-u", "frank", "-p", "frank-old-pw"],
    ["updateUser", "-u", "frank", "-p", PASSWORDS["frank"]],
    ["createUser", "-u", "gus", "-p", PASSWORDS["gus"]],
    ["createUser", "-u", "ops", "-p", PASSWORDS["ops"]],
    ["createUser", "-u", "lister", "-p", PASSWORDS["lister"]],
    # alice: literal, prefixed, group and admin-action rights
    acl("alice", "Topic:AclOrders", "Pub,Get", "Allow"),
    acl("alice", "Topic:pre-*", "Sub", "Allow"),
    acl("alice", "Group:AclGroup", "Sub", "Allow"),
    acl("alice", "Group:pre-*", "Sub,Get", "Allow"),
    acl("alice", "Topic:AclAdminTopic", "Create,Update,Delete", "Allow"),
    # bob: the source IPs (every client comes from 127.0.0.1)
    acl("bob", "Topic:IpExact", "Pub", "Allow", "127.0.0.1"),
    acl("bob", "Topic:IpCidr", "Pub", "Allow", "127.0.0.0/8"),
    acl("bob", "Topic:IpOther", "Pub", "Allow", "10.0.0.0/8"),
    acl("bob", "Topic:IpMulti", "Pub", "Allow", "10.0.0.0/8,127.0.0.1"),
    acl("bob", "Topic:IpDeny*", "Pub", "Allow"),
    acl("bob", "Topic:IpDenyLocal", "Pub", "Deny", "127.0.0.0/8"),
    acl("bob", "Topic:IpDenyRemote", "Pub", "Deny", "10.0.0.0/8"),
    # erin: an Allow on every topic first, then narrower Denies
    acl("erin", "Topic:*", "All", "Allow"),
    acl("erin", "Topic:ErinSecret", "Pub", "Deny"),
    acl("erin", "Topic:erin-*", "Pub", "Deny"),
    acl("erin", "Group:*", "Sub", "Allow"),
    # frank: a literal Deny first, then an Allow on every topic, then two prefixes
    acl("frank", "Topic:FrankSecret", "Pub", "Deny"),
    acl("frank", "Topic:*", "Pub,Get", "Allow"),
    acl("frank", "Topic:frank-*", "Pub", "Deny"),
    acl("frank", "Topic:frank-deep-*", "Pub", "Allow"),
    # gus: any resource (*), one topic denied
    acl("gus", "*", "Get", "Allow"),
    acl("gus", "Topic:GusDeny", "Get", "Deny"),
    # ops: this cluster read-only, another cluster writable (a cluster-wide -c target)
    acl("ops", f"Cluster:{CLUSTER}", "Get", "Allow"),
    ["updateAcl", "-s", "User:ops", "-r", "Cluster:OtherCluster", "-a", "Update", "-d", "Allow"],
    # lister: List on every topic, nothing else
    acl("lister", "Topic:*", "List", "Allow"),
]

#: Commands run with ``-c`` (every broker of the cluster) rather than ``-b``.
BY_CLUSTER = {"updateAcl"}


# ---- the requests ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    code: int
    header: dict[str, str] = field(default_factory=dict)
    body: str = ""


def send(topic: str) -> Request:
    return Request(
        RequestCode.SEND_MESSAGE,
        {
            "producerGroup": "AclProbeProducer",
            "topic": topic,
            "defaultTopic": "TBW102",
            "defaultTopicQueueNums": "4",
            "queueId": "0",
            "sysFlag": "0",
            "bornTimestamp": str(int(time.time() * 1000)),
            "flag": "0",
            "properties": "",
            "reconsumeTimes": "0",
            "unitMode": "false",
            "batch": "false",
        },
        "acl probe",
    )


def topic_stats(topic: str) -> Request:
    return Request(RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})


def topic_config(topic: str) -> Request:
    return Request(RequestCode.GET_TOPIC_CONFIG, {"topic": topic})


def max_offset(topic: str) -> Request:
    return Request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": "0"})


def create_topic(topic: str) -> Request:
    return Request(
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {
            "topic": topic,
            "defaultTopic": "TBW102",
            "readQueueNums": "1",
            "writeQueueNums": "1",
            "perm": "6",
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": "0",
            "order": "false",
        },
    )


def delete_topic(topic: str) -> Request:
    return Request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic})


def pull(topic: str, group: str) -> Request:
    return Request(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": group,
            "topic": topic,
            "queueId": "0",
            "queueOffset": "0",
            "maxMsgNums": "1",
            "sysFlag": "0",
            "commitOffset": "0",
            "suspendTimeoutMillis": "0",
            "subscription": "*",
            "subVersion": "0",
            "expressionType": "TAG",
        },
    )


def query_offset(topic: str, group: str) -> Request:
    return Request(
        RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": "0"}
    )


def update_offset(topic: str, group: str) -> Request:
    return Request(
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": group, "topic": topic, "queueId": "0", "commitOffset": "0"},
    )


def consumers_of(group: str) -> Request:
    return Request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})


def heartbeat(group: str, topic: str) -> Request:
    consumer = {
        "groupName": group,
        "consumeType": "CONSUME_PASSIVELY",
        "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
        "subscriptionDataSet": [
            {
                "topic": topic,
                "subString": "*",
                "classFilterMode": False,
                "tagsSet": [],
                "codeSet": [],
                "subVersion": 0,
                "expressionType": "TAG",
            }
        ],
        "unitMode": False,
    }
    document = {"clientID": "127.0.0.1@acl-probe", "consumerDataSet": [consumer], "producerDataSet": []}
    return Request(RequestCode.HEART_BEAT, {}, json.dumps(document, separators=(",", ":")))


def delete_group(group: str) -> Request:
    return Request(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": group})


BROKER_CONSUME_STATS = Request(RequestCode.GET_BROKER_CONSUME_STATS, {"isOrder": "false"})
ALL_TOPIC_CONFIG = Request(RequestCode.GET_ALL_TOPIC_CONFIG)
BROKER_CONFIG = Request(RequestCode.GET_BROKER_CONFIG)
LIST_USERS = Request(RequestCode.AUTH_LIST_USER)
LIST_ACLS = Request(RequestCode.AUTH_LIST_ACL)


def get_user(name: str) -> Request:
    return Request(RequestCode.AUTH_GET_USER, {"username": name})


def get_acl(subject: str) -> Request:
    return Request(RequestCode.AUTH_GET_ACL, {"subject": subject})


def create_user(name: str) -> Request:
    body = json.dumps({"username": name, "password": f"{name}-pw"}, separators=(",", ":"))
    return Request(RequestCode.AUTH_CREATE_USER, {"username": name}, body)


ALLOW, DENY = "allow", "deny"


@dataclass(frozen=True)
class Case:
    """One row of the table: ``user`` (None: unsigned) sends ``request``; ``what`` says which
    resource, action and policy are at stake; ``apache`` is Apache 5.3.3's decision."""

    id: str
    user: str | None
    request: Request
    what: str
    apache: str
    #: The secret to sign with when not the user's own (a wrong secret).
    secret: str | None = None


def cases(client: str) -> list[Case]:
    """The table; ``client`` names what a case creates, so each client's pass creates its own."""
    return [
        # authentication
        Case("super-send", "rocketmq", send("AclSecret"), "super user, Topic Pub, no policy", ALLOW),
        Case(
            "super-create", "rocketmq", create_topic(f"SuperMade-{client}"), "super user, Topic Create", ALLOW
        ),
        Case("super2-stats", "admin2", topic_stats("AclSecret"), "Super made by mqadmin, Topic Get", ALLOW),
        Case("unsigned-send", None, send("AclOrders"), "no signature", DENY),
        Case("unsigned-list", None, ALL_TOPIC_CONFIG, "no signature, no resource", DENY),
        Case("unknown-user", "mallory", send("AclOrders"), "user never created", DENY),
        Case("wrong-secret", "alice", send("AclOrders"), "right user, wrong secret", DENY, secret="guess"),
        Case(
            "old-secret",
            "frank",
            topic_stats("AclOrders"),
            "password changed by updateUser",
            DENY,
            secret="frank-old-pw",
        ),
        Case("disabled-user", "carol", send("AclOrders"), "user disabled by updateUser", DENY),
        Case("no-acl-send", "dave", send("AclOrders"), "user without any ACL, Topic Pub", DENY),
        Case(
            "no-acl-all-topics",
            "dave",
            ALL_TOPIC_CONFIG,
            "no ACL; GET_ALL_TOPIC_CONFIG names no resource",
            ALLOW,
        ),
        Case(
            "no-acl-broker-config",
            "dave",
            BROKER_CONFIG,
            "no ACL; GET_BROKER_CONFIG names no resource",
            ALLOW,
        ),
        # literal topics and actions
        Case("literal-pub", "alice", send("AclOrders"), "Topic:AclOrders Pub,Get Allow -> Pub", ALLOW),
        Case("literal-get-stats", "alice", topic_stats("AclOrders"), "Topic:AclOrders Get", ALLOW),
        Case("literal-get-config", "alice", topic_config("AclOrders"), "Topic:AclOrders Get (351)", ALLOW),
        Case("literal-get-offset", "alice", max_offset("AclOrders"), "Topic:AclOrders Get (30)", ALLOW),
        Case("literal-other-topic", "alice", send("AclSecret"), "no entry for Topic:AclSecret", DENY),
        Case("literal-no-create", "alice", create_topic("AclOrders"), "Pub,Get only -> Create", DENY),
        Case("literal-no-delete", "alice", delete_topic("AclOrders"), "Pub,Get only -> Delete", DENY),
        Case("literal-create", "alice", create_topic("AclAdminTopic"), "Topic:AclAdminTopic Create", ALLOW),
        Case(
            "literal-update-offset",
            "alice",
            update_offset("AclAdminTopic", "AclGroup"),
            "Topic Update + Group Sub",
            ALLOW,
        ),
        Case(
            "literal-pub-not-granted",
            "alice",
            send("AclAdminTopic"),
            "Create,Update,Delete only -> Pub",
            DENY,
        ),
        Case("literal-delete", "alice", delete_topic("AclAdminTopic"), "Topic:AclAdminTopic Delete", ALLOW),
        # prefixed topics and groups
        Case(
            "prefix-pull",
            "alice",
            pull("pre-events", "AclGroup"),
            "Topic:pre-* Sub + Group:AclGroup Sub",
            ALLOW,
        ),
        Case("prefix-no-pub", "alice", send("pre-events"), "Topic:pre-* Sub only -> Pub", DENY),
        Case(
            "pull-topic-without-sub",
            "alice",
            pull("AclOrders", "AclGroup"),
            "Topic:AclOrders has no Sub",
            DENY,
        ),
        Case(
            "prefix-group-offset",
            "alice",
            query_offset("AclOrders", "pre-group"),
            "Group:pre-* Sub,Get + Topic:AclOrders Get",
            ALLOW,
        ),
        Case("prefix-group-consumers", "alice", consumers_of("pre-group"), "Group:pre-* Sub", ALLOW),
        Case("group-not-granted", "alice", consumers_of("OtherGroup"), "no entry for Group:OtherGroup", DENY),
        Case(
            "heartbeat-granted",
            "alice",
            heartbeat("AclGroup", "pre-events"),
            "HEART_BEAT: group and topic Sub",
            ALLOW,
        ),
        Case(
            "heartbeat-topic-denied",
            "alice",
            heartbeat("AclGroup", "AclSecret"),
            "HEART_BEAT: topic not granted",
            DENY,
        ),
        # source IPs
        Case("ip-exact", "bob", send("IpExact"), "sourceIps 127.0.0.1", ALLOW),
        Case("ip-cidr", "bob", send("IpCidr"), "sourceIps 127.0.0.0/8", ALLOW),
        Case("ip-other-net", "bob", send("IpOther"), "sourceIps 10.0.0.0/8", DENY),
        Case("ip-list", "bob", send("IpMulti"), "sourceIps 10.0.0.0/8,127.0.0.1", ALLOW),
        Case("ip-deny-local", "bob", send("IpDenyLocal"), "Deny from 127.0.0.0/8 over prefix Allow", DENY),
        Case("ip-deny-remote", "bob", send("IpDenyRemote"), "Deny from 10.0.0.0/8 only: prefix Allow", ALLOW),
        # Allow and Deny
        Case("any-topic-allow", "erin", send("AclOrders"), "Topic:* All Allow", ALLOW),
        Case(
            "literal-deny-over-any",
            "erin",
            send("ErinSecret"),
            "Topic:ErinSecret Deny (after Topic:* Allow)",
            DENY,
        ),
        Case(
            "deny-other-action",
            "erin",
            topic_stats("ErinSecret"),
            "Deny is Pub only -> Get via Topic:*",
            ALLOW,
        ),
        Case("prefix-deny-over-any", "erin", send("erin-news"), "Topic:erin-* Deny over Topic:* Allow", DENY),
        Case(
            "any-topic-and-group", "erin", pull("AclOrders", "OtherGroup"), "Topic:* All + Group:* Sub", ALLOW
        ),
        Case("any-group-no-delete", "erin", delete_group("OtherGroup"), "Group:* Sub only -> Delete", DENY),
        # Apache 5.3.3's entry ordering: a literal Deny created before Topic:* Allow loses to it
        Case(
            "frank-deny-first",
            "frank",
            send("FrankSecret"),
            "Deny literal then Allow Topic:* (entry order)",
            ALLOW,
        ),
        Case("frank-prefix-deny", "frank", send("frank-news"), "Topic:frank-* Deny over Topic:* Allow", DENY),
        Case(
            "frank-shorter-prefix", "frank", send("frank-deep-x"), "frank-* Deny vs frank-deep-* Allow", DENY
        ),
        Case("frank-get", "frank", topic_stats("FrankSecret"), "Topic:* Pub,Get -> Get", ALLOW),
        # any resource
        Case("any-resource-topic", "gus", topic_stats("AclOrders"), "* Get Allow -> Topic Get", ALLOW),
        Case("any-resource-deny", "gus", topic_stats("GusDeny"), "Topic:GusDeny Deny over * Allow", DENY),
        Case("any-resource-no-pub", "gus", send("AclOrders"), "* Get only -> Pub", DENY),
        Case("any-resource-cluster", "gus", BROKER_CONSUME_STATS, "* Get -> Cluster Get", ALLOW),
        Case(
            "any-resource-group",
            "gus",
            query_offset("AclOrders", "AclGroup"),
            "* Get -> Topic and Group Get",
            ALLOW,
        ),
        # cluster resources and the ACL 2.0 requests
        Case("cluster-get", "ops", BROKER_CONSUME_STATS, f"Cluster:{CLUSTER} Get", ALLOW),
        Case("cluster-get-user", "ops", get_user("alice"), "AUTH_GET_USER needs Cluster Get", ALLOW),
        Case("cluster-list-acl", "ops", LIST_ACLS, "AUTH_LIST_ACL needs Cluster Get", ALLOW),
        Case(
            "cluster-other-update",
            "ops",
            create_user(f"opsmade-{client}"),
            "Update on another cluster only",
            DENY,
        ),
        Case("normal-list-users", "alice", LIST_USERS, "no Cluster right", DENY),
        Case("normal-cluster-get", "alice", BROKER_CONSUME_STATS, "no Cluster right", DENY),
        Case("super-list-users", "rocketmq", LIST_USERS, "super user", ALLOW),
        Case(
            "super-create-user",
            "rocketmq",
            create_user(f"newbie-{client}"),
            "super user, AUTH_CREATE_USER",
            ALLOW,
        ),
        Case("super2-get-acl", "admin2", get_acl("User:alice"), "Super made by mqadmin, AUTH_GET_ACL", ALLOW),
        # List
        Case("list-not-get", "lister", topic_stats("AclOrders"), "Topic:* List only -> Get", DENY),
        Case("list-all-topics", "lister", ALL_TOPIC_CONFIG, "GET_ALL_TOPIC_CONFIG names no resource", ALLOW),
        Case("super-delete-group", "rocketmq", delete_group("OtherGroup"), "super user, Group Delete", ALLOW),
    ]


# ---- running the table -----------------------------------------------------------------------

JAVA53_ACL_DIR = HERE / "java53acl"


def build_java53_acl() -> tuple[str, str]:
    """``(java, classpath)`` of AclProbe (java53acl/) on the 5.3.2 client and ACL modules."""
    sources = [*JAVA53_ACL_DIR.rglob("*.java"), JAVA53_ACL_DIR / "pom.xml"]
    return _build_module(JAVA53_ACL_DIR, "java53acl", "the RocketMQ 5.3 Java client is Java", sources)


@dataclass
class Answer:
    code: int | None
    remark: str = ""

    @property
    def decision(self) -> str:
        if self.code is None:
            return "error"
        return DENY if self.code == ResponseCode.NO_PERMISSION else ALLOW

    def __str__(self) -> str:
        return "error" if self.code is None else f"{self.decision} ({self.code})"


def credentials_of(case: Case) -> tuple[str, str]:
    if case.user is None:
        return "", ""
    return case.user, case.secret if case.secret is not None else PASSWORDS[case.user]


def java_probe(
    java: str, classpath: str, work: Path, sides: dict[str, str], table: list[Case]
) -> dict[str, dict[str, Answer]]:
    """Each case sent by AclProbe to each side's broker, side by side in one JVM."""
    lines = []
    for side, addr in sides.items():
        for case in table:
            key, secret = credentials_of(case)
            header = "\x1f".join(f"{k}={v}" for k, v in case.request.header.items())
            lines.append(
                "\t".join(
                    [
                        f"{side}|{case.id}",
                        addr,
                        key,
                        secret,
                        str(case.request.code),
                        header,
                        case.request.body,
                    ]
                )
            )
    done = run_program(
        [java, "-Xmx128m", "-XX:+UseSerialGC", "-cp", classpath, "interop53acl.AclProbe"],
        cwd=work,
        timeout=300,
        stdin="\n".join(lines) + "\n",
        mkdir=True,
    )
    answers: dict[str, dict[str, Answer]] = {side: {} for side in sides}
    for record in done.records:
        if record.get("event") != "probe":
            continue
        side, case_id = record["id"].split("|", 1)
        answers[side][case_id] = Answer(record.get("code"), record.get("remark") or record.get("error", ""))
    missing = [(s, c.id) for s in sides for c in table if c.id not in answers[s]]
    assert not missing, f"AclProbe did not answer {missing}:\n{done.describe()}"
    return answers


async def sdk_probe(namesrv: str, addr: str, table: list[Case]) -> dict[str, Answer]:
    """Each case sent by our SDK (an Admin signing as the case's user) to ``addr``."""
    admins: dict[tuple[str, str], Admin] = {}
    answers = {}
    try:
        for case in table:
            key, secret = credentials_of(case)
            admin = admins.get((key, secret))
            if admin is None:
                options = ClientOptions(access_key=key or None, secret_key=secret or None, request_timeout=10)
                admin = admins[key, secret] = Admin(namesrv, options=options)
                await admin.start()
            response = await admin.instance.invoke(
                addr, case.request.code, case.request.header, case.request.body.encode()
            )
            answers[case.id] = Answer(response.code, response.remark or "")
    finally:
        for admin in admins.values():
            await admin.shutdown()
    return answers


def settings(auth_dir: Path) -> dict[str, Any]:
    return {**ACL2_BROKER, "authConfigPath": str(auth_dir)}


def admin_home(home: Path) -> Path:
    """Apache mqadmin's ROCKETMQ_HOME, whose ``conf/tools.yml`` makes it sign as the super user."""
    prepare_home(home)
    (home / "conf" / "tools.yml").write_text(f"accessKey: {SUPER[0]}\nsecretKey: {SUPER[1]}\n")
    return home


#: What the inspection commands print, once the table has run (``-n``/``-b`` added).
INSPECT = {
    "getUser": ["getUser", "-u", "alice"],
    "getUser super": ["getUser", "-u", "admin2"],
    "getUser disabled": ["getUser", "-u", "carol"],
    "getUser cluster": ["getUser", "-u", "bob"],
    "listUser": ["listUser"],
    "listUser filter": ["listUser", "-f", "a"],
    "getAcl": ["getAcl", "-s", "User:alice"],
    "getAcl ips": ["getAcl", "-s", "User:bob"],
    "getAcl cluster": ["getAcl", "-s", "User:frank"],
    "listAcl": ["listAcl"],
    "listAcl subject": ["listAcl", "-s", "erin"],
    "listAcl resource": ["listAcl", "-r", "Topic:pre"],
}


@dataclass
class Side:
    name: str
    namesrv: str
    broker: str
    setup: list[tuple[list[str], str]] = field(default_factory=list)
    inspect: dict[str, str] = field(default_factory=dict)
    #: INSPECT's commands printed by our mqadmin.
    our_tool: dict[str, str] = field(default_factory=dict)
    java: dict[str, Answer] = field(default_factory=dict)
    sdk: dict[str, Answer] = field(default_factory=dict)


async def run_setup(mqadmin: MqAdmin, side: Side) -> None:
    for args in SETUP:
        target = ["-c", CLUSTER] if args[0] in BY_CLUSTER else ["-b", side.broker]
        side.setup.append((args, await mqadmin.run([*args, "-n", side.namesrv, *target])))


async def run_inspect(mqadmin: MqAdmin, side: Side) -> None:
    for label, args in INSPECT.items():
        target = ["-c", CLUSTER] if label.endswith("cluster") else ["-b", side.broker]
        side.inspect[label] = await mqadmin.run([*args, "-n", side.namesrv, *target])


async def run_our_inspect(side: Side) -> None:
    """The same inspection commands run by our mqadmin (in process, signed as the super user)."""
    saved = {k: os.environ.get(k) for k in ("ROCKETMQ_ACCESS_KEY", "ROCKETMQ_SECRET_KEY")}
    os.environ.update({"ROCKETMQ_ACCESS_KEY": SUPER[0], "ROCKETMQ_SECRET_KEY": SUPER[1]})
    try:
        for label, args in INSPECT.items():
            target = ["-c", CLUSTER] if label.endswith("cluster") else ["-b", side.broker]
            result = await execute(parse_args([args[0], "-n", side.namesrv, *target, *args[1:]]))
            side.our_tool[label] = "".join(f"{line}\n" for line in result.lines)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sides(
    java53_toolchain: Toolchain, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[dict[str, Side]]:
    root = tmp_path_factory.mktemp("acl2")
    (admin_java, admin_cp), (probe_java, probe_cp) = await asyncio.gather(
        asyncio.to_thread(build_java53_admin), asyncio.to_thread(build_java53_acl)
    )
    apache = ApacheCluster(java53_toolchain, root / "apache", **settings(root / "apache-auth"))
    ours = Cluster(root / "ours")
    try:
        await asyncio.gather(asyncio.to_thread(apache.start), ours.start_namesrv())
        broker = await ours.start_broker("broker-a", **settings(root / "ours-auth"))
        result = {
            "apache": Side("apache", apache.namesrv_addr, apache.broker.addr),
            "ours": Side("ours", ours.namesrv_addr, broker.addr),
        }
        homes = {name: admin_home(root / f"{name}-admin") for name in result}
        async with (
            MqAdmin(admin_java, admin_cp, homes["apache"]) as theirs_admin,
            MqAdmin(admin_java, admin_cp, homes["ours"]) as ours_admin,
        ):
            admins = {"apache": theirs_admin, "ours": ours_admin}
            await asyncio.gather(*(run_setup(admins[n], s) for n, s in result.items()))
            java_answers = await asyncio.to_thread(
                java_probe,
                probe_java,
                probe_cp,
                root / "probe",
                {n: s.broker for n, s in result.items()},
                cases("java"),
            )
            for name, side in result.items():
                side.java = java_answers[name]
                side.sdk = await sdk_probe(side.namesrv, side.broker, cases("sdk"))
            await asyncio.gather(*(run_inspect(admins[n], s) for n, s in result.items()))
        for side in result.values():
            await run_our_inspect(side)
        report = render(result)
        (root / "table.txt").write_text(report)
        for name, side in result.items():
            (root / f"{name}-inspect.txt").write_text(
                "".join(f"== {k}\n{v}" for k, v in side.inspect.items())
            )
        print(f"\n{report}")
        yield result
    finally:
        await ours.stop()
        await asyncio.to_thread(apache.stop)


def render(sides: dict[str, Side]) -> str:
    """The table the lead quotes: each case, Apache's answer and ours, per client."""
    apache, ours = sides["apache"], sides["ours"]
    rows = [("case", "user", "at stake", "apache (java)", "ours (java)", "apache (sdk)", "ours (sdk)", "")]
    for case in cases("java"):
        a, o = apache.java[case.id], ours.java[case.id]
        sa, so = apache.sdk[case.id], ours.sdk[case.id]
        same = a.code == o.code and sa.code == so.code
        rows.append(
            (
                case.id,
                case.user or "-",
                case.what,
                str(a),
                str(o),
                str(sa),
                str(so),
                "" if same else "DIFFERS",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    agree = sum(1 for r in rows[1:] if not r[-1])
    lines.append(f"{agree} of {len(rows) - 1} cases agree (code for code, both clients)")
    return "\n".join(lines)


# ---- the tests -------------------------------------------------------------------------------


def test_table_has_enough_cases() -> None:
    table = cases("java")
    assert len(table) >= 40
    assert len({c.id for c in table}) == len(table)
    assert {ALLOW, DENY} == {c.apache for c in table}


@pytest.mark.parametrize("side", ["apache", "ours"])
def test_apache_mqadmin_sets_up_users_and_acls(sides: dict[str, Side], side: str) -> None:
    """Apache 5.3.3's mqadmin auth commands (and updateTopic, updateSubGroup, signed by the super
    user) succeed on both brokers."""
    failures = [(args, out) for args, out in sides[side].setup if "success" not in out]
    assert not failures, failures


@pytest.mark.parametrize("client", ["java", "sdk"])
def test_apache_decides_as_the_table_says(sides: dict[str, Side], client: str) -> None:
    """The reference first: Apache's answers are the table's (ACL 2.0 is really on)."""
    answers = getattr(sides["apache"], client)
    wrong = {
        c.id: (c.apache, str(answers[c.id]), answers[c.id].remark)
        for c in cases(client)
        if answers[c.id].decision != c.apache
    }
    assert not wrong, wrong


@pytest.mark.parametrize("client", ["java", "sdk"])
def test_ours_answers_as_apache(sides: dict[str, Side], client: str) -> None:
    """Same allow/deny outcome and the same response code, case for case."""
    theirs, ours = getattr(sides["apache"], client), getattr(sides["ours"], client)
    differ = {
        c.id: {"apache": str(theirs[c.id]), "ours": str(ours[c.id]), "ours remark": ours[c.id].remark}
        for c in cases(client)
        if theirs[c.id].code != ours[c.id].code
    }
    assert not differ, json.dumps(differ, indent=1)


def normalize(text: str) -> str:
    return re.sub(r"/?127\.0\.0\.1:\d+", "<ADDR>", text)


@pytest.mark.parametrize("label", list(INSPECT))
def test_mqadmin_inspection_prints_the_same(sides: dict[str, Side], label: str) -> None:
    """Apache's getUser/listUser/getAcl/listAcl print the same rows for both brokers."""
    theirs, ours = (normalize(sides[s].inspect[label]) for s in ("apache", "ours"))
    header = "#UserName" if INSPECT[label][0].endswith("User") else "#Subject"
    assert theirs.startswith(header) and len(theirs.splitlines()) > 1, theirs
    assert ours == theirs


@pytest.mark.parametrize("side", ["apache", "ours"])
@pytest.mark.parametrize("label", list(INSPECT))
def test_our_mqadmin_prints_as_apaches(sides: dict[str, Side], side: str, label: str) -> None:
    """Our mqadmin's getUser/listUser/getAcl/listAcl print what Apache's prints, against
    Apache's broker as against ours."""
    assert sides[side].our_tool[label] == sides[side].inspect[label]
