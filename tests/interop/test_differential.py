"""Differential tests: one scripted scenario against Apache's name server + broker and against ours.

The script speaks raw remoting requests (tests/broker/requests.py builds them the way clients do)
and records what a client observes: route data, queue ids and offsets after a sequence of sends,
pull statuses and next offsets (found, no new message, offset moved), consumer progress after
commits, offsets by time, and the response code of faulty requests. Each observation is one test:
ours must equal Apache's, except the differences ``KNOWN`` lists, each explained in
docs/interop.md. Both brokers run with ``autoCreateTopicEnable`` and
``autoCreateSubscriptionGroup`` switched off for the script (UPDATE_BROKER_CONFIG), restored after.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from aiorocketmq.protocol.body import ConsumeStats, SubscriptionGroupConfig
from aiorocketmq.protocol.codes import PullSysFlag, RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import RequestTimeoutError
from aiorocketmq.protocol.headers import PullMessageRequestHeader, SendMessageRequestHeaderV2
from aiorocketmq.protocol.message import decode_records
from aiorocketmq.protocol.transport import Connection, connect
from tests.broker.requests import call, message_properties
from tests.cluster import Cluster
from tests.interop.conftest import ApacheCluster

PID = os.getpid()
TOPIC = f"Diff{PID}"
READ_ONLY = f"DiffReadOnly{PID}"
WRITE_ONLY = f"DiffWriteOnly{PID}"
GROUP = f"DiffGroup{PID}"
DISABLED_GROUP = f"DiffDisabled{PID}"
SEND_QUEUES = [0, 1, 1, 2, 0, 3, 0]

#: Differences kept on purpose, each explained in docs/interop.md ("Differential tests"), per
#: reference generation: observation -> (what Apache's servers answer, what ours answer).
KNOWN_497: dict[str, tuple[Any, Any]] = {
    # By time, past the last message: Apache gives the nearest message, we give the end.
    "offsets/by-time-after-sends": (("SUCCESS", 2), ("SUCCESS", 3)),
    # Apache's broker checks only the broker's permission on a send, not the topic's.
    "fault/send-no-write-permission": ("SUCCESS", "NO_PERMISSION"),
    # Apache answers an empty table for a group it has never seen.
    "fault/consume-stats-unknown-group": ("SUCCESS", "CONSUMER_NOT_ONLINE"),
    # Apache's name server leaves a request it does not know unanswered.
    "fault/namesrv-unknown-request-code": ("no response", "REQUEST_CODE_NOT_SUPPORTED"),
    # Ours answers these as RocketMQ 5.3.3 does (INVALID_PARAMETER; 4.9 said SYSTEM_ERROR, which
    # the 4.x producer takes as a reason to retry on another broker).
    **{
        f"fault/{name}": ("SYSTEM_ERROR", "INVALID_PARAMETER")
        for name in (
            "send-illegal-queue-id",
            "send-invalid-topic-name",
            "pull-illegal-queue-id",
            "create-topic-cluster-name",
            "create-topic-invalid-name",
        )
    },
}
KNOWN_533: dict[str, tuple[Any, Any]] = {
    # The same two kept on purpose against 4.9.7 (docs/interop.md).
    "fault/send-no-write-permission": ("SUCCESS", "NO_PERMISSION"),
    "fault/consume-stats-unknown-group": ("SUCCESS", "CONSUMER_NOT_ONLINE"),
}
#: The references the script runs against, by the fixture that starts each.
REFERENCES = {"4.9.7": ("apache", KNOWN_497), "5.3.3": ("apache53", KNOWN_533)}
CATEGORIES = ["route", "send", "pull", "progress", "offsets", "fault"]


async def open_conn(addr: str) -> Connection:
    host, port = addr.rsplit(":", 1)
    return await connect(host, int(port))


def send_fields(
    topic: str, queue_id: int, *, tags: str = "a", keys: str = "k", props: str | None = None
) -> dict[str, Any]:
    return SendMessageRequestHeaderV2(
        producer_group="diff-producer",
        topic=topic,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=queue_id,
        sys_flag=0,
        born_timestamp=int(time.time() * 1000),
        flag=0,
        properties=props if props is not None else message_properties(tags, keys),
    ).to_fields()


def pull_fields(
    topic: str, queue_id: int, offset: int, *, group: str = GROUP, flag: int = PullSysFlag.SUBSCRIPTION
) -> dict[str, Any]:
    return PullMessageRequestHeader(
        consumer_group=group,
        topic=topic,
        queue_id=queue_id,
        queue_offset=offset,
        max_msg_nums=32,
        sys_flag=int(flag),
        commit_offset=0,
        suspend_timeout_millis=0,
        subscription="*",
        sub_version=0,
    ).to_fields()


class Script:
    """Runs the scenario against one name server + broker and records the observations."""

    def __init__(self, namesrv: Connection, broker: Connection, broker_name: str, cluster: str) -> None:
        self.namesrv = namesrv
        self.broker = broker
        self.broker_name = broker_name
        self.cluster = cluster
        self.seen: dict[str, Any] = {}

    async def req(
        self, code: int, fields: dict[str, Any] | None = None, body: bytes = b"", *, to_namesrv: bool = False
    ) -> RemotingCommand:
        return await call(self.namesrv if to_namesrv else self.broker, code, fields, body)

    def note(self, name: str, value: Any) -> None:
        self.seen[name] = value

    async def code(
        self,
        name: str,
        code: int,
        fields: dict[str, Any] | None = None,
        body: bytes = b"",
        *,
        to_namesrv: bool = False,
    ) -> RemotingCommand | None:
        try:
            response = await call(self.namesrv if to_namesrv else self.broker, code, fields, body, timeout=3)
        except RequestTimeoutError:
            self.note(f"fault/{name}", "no response")
            return None
        known = response.code in ResponseCode._value2member_map_
        self.note(f"fault/{name}", ResponseCode(response.code).name if known else response.code)
        return response

    async def broker_config(self, **settings: str) -> None:
        text = "".join(f"{k}={v}\n" for k, v in settings.items())
        response = await self.req(RequestCode.UPDATE_BROKER_CONFIG, body=text.encode())
        assert response.code == ResponseCode.SUCCESS, response

    async def create_topic(self, topic: str, queues: int, perm: int = 6) -> None:
        fields = {
            "topic": topic,
            "defaultTopic": "TBW102",
            "readQueueNums": queues,
            "writeQueueNums": queues,
            "perm": perm,
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0,
            "order": False,
        }
        response = await self.req(RequestCode.UPDATE_AND_CREATE_TOPIC, fields)
        assert response.code == ResponseCode.SUCCESS, response

    async def route(self, topic: str) -> dict[str, Any]:
        deadline = time.monotonic() + 30
        while True:
            response = await self.req(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, to_namesrv=True)
            if response.code == ResponseCode.SUCCESS or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        assert response.code == ResponseCode.SUCCESS, response
        data = json.loads(response.body.decode().replace("{0:", '{"0":'))
        for broker in data["brokerDatas"]:
            broker["brokerAddrs"] = sorted(broker["brokerAddrs"])
        return data

    async def group(self, name: str, **settings: Any) -> None:
        body = SubscriptionGroupConfig(group_name=name, **settings).encode()
        response = await self.req(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
        assert response.code == ResponseCode.SUCCESS, response

    async def run(self) -> dict[str, Any]:
        await self.broker_config(autoCreateTopicEnable="false", autoCreateSubscriptionGroup="false")
        try:
            await self.observe()
        finally:
            # The reference servers are the session's, shared with the files after this one: put
            # auto-creation back even when the broker closed this connection during a fault.
            if self.broker.closed:
                self.broker = await open_conn(self.broker.address)
            await self.broker_config(autoCreateTopicEnable="true", autoCreateSubscriptionGroup="true")
        return self.seen

    async def observe(self) -> None:
        await self.create_topic(TOPIC, 4)
        await self.create_topic(READ_ONLY, 2, perm=4)
        await self.create_topic(WRITE_ONLY, 2, perm=2)
        await self.group(GROUP)
        await self.group(DISABLED_GROUP, consume_enable=False)
        route = await self.route(TOPIC)
        self.note(
            "route/queueDatas",
            [
                {k: q[k] for k in ("readQueueNums", "writeQueueNums", "perm", "topicSysFlag")}
                for q in route["queueDatas"]
            ],
        )
        self.note(
            "route/brokerDatas",
            [
                {
                    "cluster": b["cluster"],
                    "brokerName": b["brokerName"] == self.broker_name,
                    "ids": b["brokerAddrs"],
                }
                for b in route["brokerDatas"]
            ],
        )
        self.note("route/readOnly", [q["perm"] for q in (await self.route(READ_ONLY))["queueDatas"]])

        # Sends: queue ids and offsets.
        started = int(time.time() * 1000)
        for i, queue_id in enumerate(SEND_QUEUES):
            response = await self.req(
                RequestCode.SEND_MESSAGE_V2,
                send_fields(TOPIC, queue_id, tags=f"t{i % 2}", keys=f"key{i}"),
                f"body {i}".encode(),
            )
            self.note(
                f"send/{i}",
                (response.code, int(response.ext_fields["queueId"]), int(response.ext_fields["queueOffset"])),
            )
        # Apache's broker builds consume queues after answering a send: wait until every send
        # is dispatched, so both sides are read in the same state.
        for queue_id in set(SEND_QUEUES):
            expected = SEND_QUEUES.count(queue_id)
            async with asyncio.timeout(30):
                while True:
                    high = await self.req(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": queue_id})
                    if int(high.ext_fields["offset"]) == expected:
                        break
                    await asyncio.sleep(0.05)
        after = int(time.time() * 1000) + 1000

        # Pull statuses and next offsets.
        async def pull(label: str, queue_id: int, offset: int, **kwargs: Any) -> None:
            response = await self.req(
                RequestCode.PULL_MESSAGE, pull_fields(TOPIC, queue_id, offset, **kwargs)
            )
            fields = response.ext_fields
            found = (
                [m.body.decode() for m in decode_records(response.body)]
                if response.code == ResponseCode.SUCCESS
                else []
            )
            self.note(
                f"pull/{label}",
                {
                    "code": ResponseCode(response.code).name,
                    "next": int(fields.get("nextBeginOffset", -1)),
                    "min": int(fields.get("minOffset", -1)),
                    "max": int(fields.get("maxOffset", -1)),
                    "bodies": found,
                },
            )

        await pull("found", 0, 0)
        await pull("found-middle", 0, 1)
        await pull("no-new-message", 0, 3)
        await pull("offset-overflow-one", 0, 4)
        await pull("offset-overflow-badly", 0, 100)
        await pull("empty-queue", 3, 0)
        await pull("empty-queue-overflow", 3, 5)
        await pull("negative-offset", 1, -1)

        # Consumer progress after commits.
        async def offsets(label: str, queue_id: int) -> None:
            response = await self.req(
                RequestCode.QUERY_CONSUMER_OFFSET,
                {"consumerGroup": GROUP, "topic": TOPIC, "queueId": queue_id},
            )
            self.note(
                f"progress/{label}",
                (ResponseCode(response.code).name, int(response.ext_fields.get("offset", -1))),
            )

        await offsets("before-commit", 0)
        for queue_id, committed in ((0, 2), (1, 2), (1, 1)):
            response = await self.req(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                {"consumerGroup": GROUP, "topic": TOPIC, "queueId": queue_id, "commitOffset": committed},
            )
            self.note(f"progress/commit-{queue_id}-{committed}", ResponseCode(response.code).name)
        await offsets("queue0", 0)
        await offsets("queue1-after-lower-commit", 1)
        await offsets("queue2-never", 2)
        stats = await self.req(RequestCode.GET_CONSUME_STATS, {"consumerGroup": GROUP, "topic": TOPIC})
        rows = []
        if stats.code == ResponseCode.SUCCESS:
            table = ConsumeStats.decode(stats.body).offset_table
            rows = sorted((mq.queue_id, w.broker_offset, w.consumer_offset) for mq, w in table.items())
        self.note("progress/consume-stats", (ResponseCode(stats.code).name, rows))

        # Offsets: min, max, by time, earliest store time.
        for queue_id in range(4):
            low = await self.req(RequestCode.GET_MIN_OFFSET, {"topic": TOPIC, "queueId": queue_id})
            high = await self.req(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": queue_id})
            self.note(
                f"offsets/min-max-{queue_id}", (int(low.ext_fields["offset"]), int(high.ext_fields["offset"]))
            )
        for label, ts in (("zero", 0), ("before-sends", started - 60_000), ("after-sends", after)):
            response = await self.req(
                RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": TOPIC, "queueId": 0, "timestamp": ts}
            )
            self.note(
                f"offsets/by-time-{label}",
                (ResponseCode(response.code).name, int(response.ext_fields.get("offset", -1))),
            )
        await self.faults()

    async def faults(self) -> None:
        big = b"x" * (4 * 1024 * 1024 + 1)
        await self.code(
            "send-unknown-topic-autocreate-off",
            RequestCode.SEND_MESSAGE_V2,
            send_fields(f"NoSuchTopic{PID}", 0),
            b"x",
        )
        await self.code("send-illegal-queue-id", RequestCode.SEND_MESSAGE_V2, send_fields(TOPIC, 99), b"x")
        await self.code("send-body-over-limit", RequestCode.SEND_MESSAGE_V2, send_fields(TOPIC, 0), big)
        await self.code(
            "send-properties-over-limit",
            RequestCode.SEND_MESSAGE_V2,
            send_fields(TOPIC, 0, props=message_properties("a", "k", big="p" * 40_000)),
            b"x",
        )
        await self.code(
            "send-invalid-topic-name", RequestCode.SEND_MESSAGE_V2, send_fields("bad topic!", 0), b"x"
        )
        await self.code(
            "send-to-system-topic", RequestCode.SEND_MESSAGE_V2, send_fields("SCHEDULE_TOPIC_XXXX", 0), b"x"
        )
        await self.code(
            "send-no-write-permission", RequestCode.SEND_MESSAGE_V2, send_fields(READ_ONLY, 0), b"x"
        )
        bad_send = send_fields(TOPIC, 0)
        del bad_send["b"]
        await self.code("send-bad-header-no-topic", RequestCode.SEND_MESSAGE_V2, bad_send, b"x")
        await self.code("pull-no-read-permission", RequestCode.PULL_MESSAGE, pull_fields(WRITE_ONLY, 0, 0))
        await self.code(
            "pull-unknown-topic",
            RequestCode.PULL_MESSAGE,
            {**pull_fields(TOPIC, 0, 0), "topic": f"NoSuchTopic{PID}"},
        )
        await self.code("pull-illegal-queue-id", RequestCode.PULL_MESSAGE, pull_fields(TOPIC, 99, 0))
        await self.code(
            "pull-unknown-group-autocreate-off",
            RequestCode.PULL_MESSAGE,
            pull_fields(TOPIC, 0, 0, group=f"NoSuchGroup{PID}"),
        )
        await self.code(
            "pull-group-consume-disabled",
            RequestCode.PULL_MESSAGE,
            pull_fields(TOPIC, 0, 0, group=DISABLED_GROUP),
        )
        await self.code(
            "pull-no-subscription-registered", RequestCode.PULL_MESSAGE, pull_fields(TOPIC, 0, 0, flag=0)
        )
        bad_pull = pull_fields(TOPIC, 0, 0)
        del bad_pull["queueOffset"]
        await self.code("pull-bad-header-no-offset", RequestCode.PULL_MESSAGE, bad_pull)
        await self.code("unknown-request-code", 9999, {})
        await self.code(
            "query-offset-unknown-group",
            RequestCode.QUERY_CONSUMER_OFFSET,
            {"consumerGroup": f"NoSuchGroup{PID}", "topic": TOPIC, "queueId": 0},
        )
        for label, name in (
            ("create-topic-cluster-name", self.cluster),
            ("create-topic-invalid-name", "bad topic!"),
        ):
            await self.code(
                label,
                RequestCode.UPDATE_AND_CREATE_TOPIC,
                {
                    "topic": name,
                    "defaultTopic": "TBW102",
                    "readQueueNums": 1,
                    "writeQueueNums": 1,
                    "perm": 6,
                    "topicFilterType": "SINGLE_TAG",
                    "topicSysFlag": 0,
                    "order": False,
                },
            )
        await self.code(
            "consumer-connections-unknown-group",
            RequestCode.GET_CONSUMER_CONNECTION_LIST,
            {"consumerGroup": f"NoSuchGroup{PID}"},
        )
        await self.code(
            "consume-stats-unknown-group",
            RequestCode.GET_CONSUME_STATS,
            {"consumerGroup": f"NoSuchGroup{PID}", "topic": TOPIC},
        )
        await self.code("view-message-bad-offset", RequestCode.VIEW_MESSAGE_BY_ID, {"offset": 1 << 40})
        await self.code(
            "send-back-bad-offset",
            RequestCode.CONSUMER_SEND_MSG_BACK,
            {
                "offset": 1 << 40,
                "group": GROUP,
                "delayLevel": 0,
                "originMsgId": "00",
                "originTopic": TOPIC,
                "unitMode": False,
                "maxReconsumeTimes": 16,
            },
        )
        await self.code(
            "max-offset-unknown-topic",
            RequestCode.GET_MAX_OFFSET,
            {"topic": f"NoSuchTopic{PID}", "queueId": 0},
        )
        await self.code("heartbeat-garbage-body", RequestCode.HEART_BEAT, {}, b"not json")
        await self.code(
            "namesrv-route-unknown-topic",
            RequestCode.GET_ROUTEINFO_BY_TOPIC,
            {"topic": f"NoSuchTopic{PID}"},
            to_namesrv=True,
        )
        await self.code(
            "namesrv-kv-unknown-key",
            RequestCode.GET_KV_CONFIG,
            {"namespace": "ORDER_TOPIC_CONFIG", "key": f"NoSuchTopic{PID}"},
            to_namesrv=True,
        )
        await self.code("namesrv-unknown-request-code", 9999, {}, to_namesrv=True)


async def observe(namesrv_addr: str, broker_addr: str, broker_name: str, cluster: str) -> dict[str, Any]:
    namesrv, broker = await open_conn(namesrv_addr), await open_conn(broker_addr)
    script = Script(namesrv, broker, broker_name, cluster)
    try:
        return await script.run()
    finally:
        namesrv.close()
        script.broker.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=list(REFERENCES))
async def observed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[dict[str, dict[str, Any]]]:
    fixture, known = REFERENCES[request.param]
    apache: ApacheCluster = request.getfixturevalue(fixture)
    cluster = Cluster(tmp_path_factory.mktemp("differential"))
    await cluster.start_namesrv()
    try:
        broker = await cluster.start_broker("broker-a")
        theirs = await observe(
            apache.namesrv_addr, apache.broker.addr, apache.broker.name, apache.broker.cluster_name
        )
        ours = await observe(cluster.namesrv_addr, broker.addr, "broker-a", cluster.cluster_name)
        yield {"ours": ours, "apache": theirs, "known": known}
    finally:
        await cluster.stop()


@pytest.mark.parametrize("category", CATEGORIES)
def test_same_observations(observed: dict[str, dict[str, Any]], category: str) -> None:
    theirs = {k: v for k, v in observed["apache"].items() if k.startswith(category + "/")}
    ours = {k: v for k, v in observed["ours"].items() if k.startswith(category + "/")}
    assert set(ours) == set(theirs) and theirs
    known = observed["known"]
    differences = {
        k: {"apache": theirs[k], "ours": ours[k]} for k in theirs if theirs[k] != ours[k] and k not in known
    }
    assert not differences, json.dumps(differences, indent=1, default=str)


def test_faulty_requests_cover_twenty(observed: dict[str, dict[str, Any]]) -> None:
    faults = [k for k in observed["apache"] if k.startswith("fault/")]
    assert len(faults) >= 20
    # Each fault was refused by Apache's servers in some way, bar the documented ones.
    refused = [k for k in faults if observed["apache"][k] != "SUCCESS"]
    assert len(refused) >= 20, refused


def test_known_differences_still_hold(observed: dict[str, dict[str, Any]]) -> None:
    """docs/interop.md describes these; if either side changes, the docs must change too."""
    held = {name: (observed["apache"][name], observed["ours"][name]) for name in observed["known"]}
    assert held == observed["known"]
