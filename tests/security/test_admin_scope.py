"""Admin scope under ACL 1.0, on a real broker process: an account with rights on topic T and
group G cannot move, copy or commit another group's offsets, nor delete files, clean queues,
drop topics or groups, forbid a group or change the broker's settings; everything it tried
is as before (offsets, commit-log files, topics, groups, settings). With rights on the group
the same reset works, and an admin account does all of it (TRIGGER_DELETE_FILES deletes)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import pytest
import pytest_asyncio
import yaml

from aiorocketmq.protocol.acl import Credentials, sign
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.pop import PopRequestCode
from aiorocketmq.protocol.transport import Connection, connect
from tests.broker.requests import call, send_ok
from tests.cluster import Cluster
from tests.security.test_acl import start_acl_cluster
from tests.support import wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")

TOPIC = "ScopeTopic"
OWN_GROUP = "ScopeOwnGroup"
OTHER_GROUP = "ScopeOtherGroup"
ADMIN = Credentials("scope_admin", "scope_admin_secret")
ALICE = Credentials("scope_alice", "scope_alice_secret")
QUEUES = 2
#: Small commit-log files, so that the messages below fill several and a forced deletion has
#: files to delete.
FILE_SIZE = 64 * 1024
BODY = b"x" * 2000
MESSAGES = 100
OTHER_OFFSET = 7

ACL_YML: dict[str, Any] = {
    "accounts": [
        {"accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key, "admin": True},
        {
            "accessKey": ALICE.access_key,
            "secretKey": ALICE.secret_key,
            "admin": False,
            "defaultTopicPerm": "DENY",
            "defaultGroupPerm": "DENY",
            "topicPerms": [f"{TOPIC}=PUB|SUB"],
            "groupPerms": [f"{OWN_GROUP}=SUB"],
        },
    ],
}


class Scope:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.conns: list[Connection] = []

    async def open(self, credentials: Credentials) -> Connection:
        signer = partial(sign, credentials=credentials)
        conn = await connect("127.0.0.1", self.cluster.brokers["broker-a"].port, signer=signer)
        self.conns.append(conn)
        return conn

    @property
    def commit_log_files(self) -> list[str]:
        # (not the ``.alloc`` file the store prepares for the next one)
        folder = self.cluster.brokers["broker-a"].store_dir / "commitlog"
        return sorted(p.name for p in folder.iterdir() if p.name.isdigit())


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def scope(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Scope]:
    root = tmp_path_factory.mktemp("scope")
    acl_file = root / "plain_acl.yml"
    acl_file.write_text(yaml.safe_dump(ACL_YML))
    cluster = await start_acl_cluster(
        root / "cluster", acl_file, mappedFileSizeCommitLog=FILE_SIZE, fileReservedTime=72
    )
    scope = Scope(cluster)
    try:
        admin = await scope.open(ADMIN)
        response = await call(admin, RequestCode.UPDATE_AND_CREATE_TOPIC, _topic_fields(TOPIC))
        assert response.code == ResponseCode.SUCCESS, response
        for group in (OWN_GROUP, OTHER_GROUP):
            body = json.dumps({"groupName": group, "consumeEnable": True}).encode()
            response = await call(admin, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
            assert response.code == ResponseCode.SUCCESS, response
        alice = await scope.open(ALICE)
        for i in range(MESSAGES):
            await send_ok(alice, TOPIC, BODY, queue_id=i % QUEUES)
        for queue_id in range(QUEUES):
            await _commit(admin, OTHER_GROUP, queue_id, OTHER_OFFSET)
            await _commit(alice, OWN_GROUP, queue_id, OTHER_OFFSET)
        yield scope
    finally:
        for conn in scope.conns:
            conn.close()
        await cluster.stop()


def _topic_fields(topic: str) -> dict[str, Any]:
    return {
        "topic": topic,
        "defaultTopic": "TBW102",
        "readQueueNums": QUEUES,
        "writeQueueNums": QUEUES,
        "perm": 6,
        "topicFilterType": "SINGLE_TAG",
    }


async def _commit(conn: Connection, group: str, queue_id: int, offset: int) -> None:
    fields = {"consumerGroup": group, "topic": TOPIC, "queueId": queue_id, "commitOffset": offset}
    response = await call(conn, RequestCode.UPDATE_CONSUMER_OFFSET, fields)
    assert response.code == ResponseCode.SUCCESS, response


async def _offsets(conn: Connection, group: str) -> list[int]:
    found = []
    for queue_id in range(QUEUES):
        fields = {"consumerGroup": group, "topic": TOPIC, "queueId": queue_id}
        response = await call(conn, RequestCode.QUERY_CONSUMER_OFFSET, fields)
        assert response.code == ResponseCode.SUCCESS, response
        found.append(int((response.ext_fields or {})["offset"]))
    return found


def _reset(group: str) -> tuple[int, dict[str, Any], bytes]:
    # timestamp -1 moves to the end of every queue: the messages in between are skipped.
    return RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {"topic": TOPIC, "group": group, "timestamp": -1}, b""


def _batch_ack(group: str) -> tuple[int, dict[str, Any], bytes]:
    ack = {"c": group, "t": TOPIC, "r": "0", "so": 0, "q": 0, "rq": 0, "pt": 0, "it": 60_000, "b": "AQ=="}
    return (
        PopRequestCode.BATCH_ACK_MESSAGE,
        {},
        json.dumps({"brokerName": "broker-a", "acks": [ack]}).encode(),
    )


#: Requests that touch another group's offsets: refused for want of rights on that group.
OTHER_GROUP_REQUESTS = {
    "reset offset": _reset(OTHER_GROUP),
    "clone offsets into it": (
        RequestCode.CLONE_GROUP_OFFSET,
        {"srcGroup": OWN_GROUP, "destGroup": OTHER_GROUP, "topic": TOPIC, "offline": "false"},
        b"",
    ),
    "clone offsets from it": (
        RequestCode.CLONE_GROUP_OFFSET,
        {"srcGroup": OTHER_GROUP, "destGroup": OWN_GROUP, "topic": TOPIC, "offline": "false"},
        b"",
    ),
    "commit offset": (
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": OTHER_GROUP, "topic": TOPIC, "queueId": 0, "commitOffset": 0},
        b"",
    ),
    "batch ack": _batch_ack(OTHER_GROUP),
    "consume directly": (
        RequestCode.CONSUME_MESSAGE_DIRECTLY,
        {"consumerGroup": OTHER_GROUP, "clientId": "nobody", "msgId": "00"},
        b"",
    ),
}

#: Requests that can lose data or change how the broker keeps it: admin accounts only.
ADMIN_ONLY_REQUESTS: dict[str, tuple[int, dict[str, Any], bytes]] = {
    "trigger delete files": (RequestCode.TRIGGER_DELETE_FILES, {}, b""),
    "delete expired commit log": (RequestCode.DELETE_EXPIRED_COMMITLOG, {}, b""),
    "clean expired consume queues": (RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE, {}, b""),
    "clean unused topics": (RequestCode.CLEAN_UNUSED_TOPIC, {}, b""),
    "delete topic": (RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": TOPIC}, b""),
    "delete group": (
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
        {"groupName": OTHER_GROUP, "cleanOffset": "true"},
        b"",
    ),
    "delete own group": (
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
        {"groupName": OWN_GROUP, "cleanOffset": "true"},
        b"",
    ),
    "update broker config": (RequestCode.UPDATE_BROKER_CONFIG, {}, b"fileReservedTime=0\n"),
    "forbid a group": (
        RequestCode.UPDATE_AND_GET_GROUP_FORBIDDEN,
        {"group": OWN_GROUP, "topic": TOPIC, "readable": "false"},
        b"",
    ),
    "reset master flush offset": (RequestCode.RESET_MASTER_FLUSH_OFFSET, {"masterFlushOffset": 0}, b""),
    "create topic": (RequestCode.UPDATE_AND_CREATE_TOPIC, _topic_fields("ScopeEvilTopic"), b""),
}


async def _state(scope: Scope, admin: Connection) -> dict[str, Any]:
    """Everything the refused requests could have changed."""
    topics = await call(admin, RequestCode.GET_ALL_TOPIC_CONFIG)
    groups = await call(admin, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    config = await call(admin, RequestCode.GET_BROKER_CONFIG)
    forbidden = await call(
        admin, RequestCode.UPDATE_AND_GET_GROUP_FORBIDDEN, {"group": OWN_GROUP, "topic": TOPIC}
    )
    return {
        "other offsets": await _offsets(admin, OTHER_GROUP),
        "own offsets": await _offsets(admin, OWN_GROUP),
        "commit-log files": scope.commit_log_files,
        "topics": sorted(json.loads(topics.body)["topicConfigTable"]),
        "groups": sorted(json.loads(groups.body)["subscriptionGroupTable"]),
        "fileReservedTime": [
            line for line in config.body.decode().splitlines() if line.startswith("fileReservedTime=")
        ],
        "own group readable": json.loads(forbidden.body)["readable"],
    }


async def _ask(conn: Connection, request: tuple[int, dict[str, Any], bytes]) -> RemotingCommand:
    code, fields, body = request
    return await call(conn, code, dict(fields), body)


async def test_a_non_admin_cannot_touch_other_groups_or_lose_data(scope: Scope) -> None:
    admin, alice = await scope.open(ADMIN), await scope.open(ALICE)
    before = await _state(scope, admin)
    assert len(before["commit-log files"]) >= 3, before  # something for a deletion to delete
    assert before["other offsets"] == [OTHER_OFFSET] * QUEUES
    assert TOPIC in before["topics"] and OTHER_GROUP in before["groups"]

    for name, request in OTHER_GROUP_REQUESTS.items():
        response = await _ask(alice, request)
        assert response.code == ResponseCode.SYSTEM_ERROR, (name, response)
        assert f"No permission for group={OTHER_GROUP}" in (response.remark or ""), (name, response)
    for name, request in ADMIN_ONLY_REQUESTS.items():
        response = await _ask(alice, request)
        assert response.code == ResponseCode.SYSTEM_ERROR, (name, response)
        assert "scope_alice is not an admin account" in (response.remark or ""), (name, response)

    after = await _state(scope, admin)
    assert after == before


async def test_rights_on_the_group_allow_a_reset(scope: Scope) -> None:
    alice = await scope.open(ALICE)
    response = await _ask(alice, _reset(OWN_GROUP))
    assert response.code == ResponseCode.SUCCESS, response
    admin = await scope.open(ADMIN)
    ends = await _offsets(admin, OWN_GROUP)
    assert ends == [MESSAGES // QUEUES] * QUEUES  # moved to the end of each queue
    assert await _offsets(admin, OTHER_GROUP) == [OTHER_OFFSET] * QUEUES


async def test_an_admin_resets_other_groups_and_deletes_files(scope: Scope) -> None:
    admin = await scope.open(ADMIN)
    response = await _ask(admin, _reset(OTHER_GROUP))
    assert response.code == ResponseCode.SUCCESS, response
    assert await _offsets(admin, OTHER_GROUP) == [MESSAGES // QUEUES] * QUEUES

    files = scope.commit_log_files
    response = await _ask(admin, ADMIN_ONLY_REQUESTS["trigger delete files"])
    assert response.code == ResponseCode.SUCCESS, response
    assert f"{len(files) - 1} commit log files deleted" in (response.remark or ""), (files, response)
    # (the broker unlinks them once their mappings are released, just after answering)
    await wait_until(lambda: scope.commit_log_files == files[-1:], timeout=10)

    response = await _ask(admin, ADMIN_ONLY_REQUESTS["delete group"])
    assert response.code == ResponseCode.SUCCESS, response
    groups = await call(admin, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    assert OTHER_GROUP not in json.loads(groups.body)["subscriptionGroupTable"]
