"""The gRPC endpoint's receive limit and refusal log, on a real broker process with ACL on:
requests over ``maxMessageSize`` plus headroom are refused by grpcio (RESOURCE_EXHAUSTED)
before they are buffered, so four concurrent oversized sends from an unauthenticated client
leave the broker's memory where it was; a body of exactly ``maxMessageSize`` still fits; every
refusal (the size limit, credentials, permissions, a bad request) leaves a line in the
broker's log, at most one a minute per method and kind."""

from __future__ import annotations

import asyncio
import re
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
from aiorocketmq.broker.grpc.endpoint import HEADROOM
from tests.cluster import Cluster
from tests.support import ServerProcess

from .conftest import start_grpc_broker
from .test_security import signed

pytestmark = pytest.mark.asyncio(loop_scope="module")

TOPIC = "GrpcLimitTopic"
ALICE = ("grpc_limit_alice", "alice_secret_1")
BOB = ("grpc_limit_bob", "bob_secret_1")
MAX_MESSAGE_SIZE = 4 * 1024 * 1024
#: Each attacker request: under Apache's 130 MiB, far over ours.
OVERSIZED = 48 * 1024 * 1024
ATTACKERS = 4
ACL_YML: dict[str, Any] = {
    "accounts": [
        {
            "accessKey": ALICE[0],
            "secretKey": ALICE[1],
            "defaultTopicPerm": "DENY",
            "defaultGroupPerm": "DENY",
            "topicPerms": [f"{TOPIC}=PUB|SUB"],
        },
        {"accessKey": BOB[0], "secretKey": BOB[1], "defaultTopicPerm": "DENY", "defaultGroupPerm": "DENY"},
    ],
}


class Endpoint:
    def __init__(self, cluster: Cluster, port: int) -> None:
        self.cluster = cluster
        self.port = port

    @property
    def process(self) -> ServerProcess:
        process = self.cluster.brokers["broker-a"].process
        assert process is not None
        return process

    def rss(self) -> int:
        """The broker's resident memory, bytes."""
        assert self.process.proc is not None
        status = Path(f"/proc/{self.process.proc.pid}/status").read_text()
        match = re.search(r"VmRSS:\s+(\d+) kB", status)
        assert match is not None
        return int(match.group(1)) * 1024

    def log_lines(self, pattern: str) -> list[str]:
        return [line for line in self.process.lines if re.search(pattern, line)]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def endpoint(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Endpoint]:
    root = tmp_path_factory.mktemp("grpc-limits")
    acl = root / "plain_acl.yml"
    acl.write_text(yaml.safe_dump(ACL_YML))
    cluster = Cluster(root)
    await cluster.start_namesrv()
    try:
        port = await start_grpc_broker(
            cluster,
            aclEnable="true",
            maxMessageSize=MAX_MESSAGE_SIZE,
            autoCreateTopicEnable="true",
            **{"rocketmq.acl.plain.file": str(acl)},
        )
        yield Endpoint(cluster, port)
    finally:
        await cluster.stop()


def send_request(body: bytes, topic: str = TOPIC) -> pb.SendMessageRequest:
    return pb.SendMessageRequest(
        messages=[
            pb.Message(
                topic=pb.Resource(name=topic),
                body=body,
                system_properties=pb.SystemProperties(
                    message_id=f"ID{time.time_ns()}", message_type=pb.NORMAL
                ),
            )
        ]
    )


async def test_oversized_requests_are_refused_before_they_are_buffered(endpoint: Endpoint) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{endpoint.port}") as channel:
        stub = pb_grpc.MessagingServiceStub(channel)
        # Warm up (the first calls allocate grpcio's and the service's working memory).
        for _ in range(3):
            assert (
                await stub.SendMessage(send_request(b"warm"), metadata=signed(*ALICE))
            ).status.code == pb.OK
        request = send_request(b"x" * OVERSIZED)
        before = endpoint.rss()
        started = time.monotonic()
        results = await asyncio.gather(
            *(stub.SendMessage(request) for _ in range(ATTACKERS)), return_exceptions=True
        )
        elapsed = time.monotonic() - started
        after = endpoint.rss()
        for result in results:
            assert isinstance(result, grpc.aio.AioRpcError), result
            assert result.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, result
        growth = after - before
        print(
            f"RSS before {before / 2**20:.0f} MiB, after {ATTACKERS} x {OVERSIZED >> 20} MiB sends "
            f"{after / 2**20:.0f} MiB (+{growth / 2**20:.1f} MiB), refused in {elapsed:.2f}s"
        )
        # Buffered whole, the four would take 192 MiB at least (Apache's 130 MiB limit let them
        # in); refused at the limit, less than one request's worth is left.
        assert growth < OVERSIZED, (before, after)

        # The broker serves on, and a body of exactly maxMessageSize fits under the limit.
        fits = await stub.SendMessage(send_request(b"y" * MAX_MESSAGE_SIZE), metadata=signed(*ALICE))
        assert fits.status.code == pb.OK, fits
        too_big = await stub.SendMessage(send_request(b"z" * (MAX_MESSAGE_SIZE + 1)), metadata=signed(*ALICE))
        assert too_big.status.code == pb.MESSAGE_BODY_TOO_LARGE, too_big
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.SendMessage(
                send_request(b"w" * (MAX_MESSAGE_SIZE + HEADROOM + 1)), metadata=signed(*ALICE)
            )
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

    # Logged once for the burst (rate-limited), with the receive limit.
    line = await endpoint.process.wait_for_line(r"refused gRPC SendMessage from .*RESOURCE_EXHAUSTED", 10)
    assert f"over the {MAX_MESSAGE_SIZE + HEADROOM}-byte receive limit" in line
    assert len(endpoint.log_lines(r"refused gRPC SendMessage .*RESOURCE_EXHAUSTED")) == 1


async def test_every_kind_of_refusal_is_logged(endpoint: Endpoint) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{endpoint.port}") as channel:
        stub = pb_grpc.MessagingServiceStub(channel)
        unsigned = await stub.SendMessage(send_request(b"x"))
        assert unsigned.status.code == pb.UNAUTHORIZED
        forged = await stub.SendMessage(send_request(b"x"), metadata=signed(ALICE[0], "not her secret"))
        assert forged.status.code == pb.UNAUTHORIZED
        forbidden = await stub.SendMessage(send_request(b"x"), metadata=signed(*BOB))
        assert forbidden.status.code == pb.FORBIDDEN
        empty = await stub.SendMessage(pb.SendMessageRequest(), metadata=signed(*ALICE))
        assert empty.status.code == pb.BAD_REQUEST
        route = await stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name=TOPIC)))
        assert route.status.code == pb.UNAUTHORIZED
        # A normal answer is not a refusal: nothing new to pull.
        ok = await stub.SendMessage(send_request(b"fine"), metadata=signed(*ALICE))
        assert ok.status.code == pb.OK

    await endpoint.process.wait_for_line(r"refused gRPC QueryRoute from .*: UNAUTHORIZED: ", 10)
    unauthorized = endpoint.log_lines(
        r"refused gRPC SendMessage from .*: UNAUTHORIZED: no authorization header"
    )
    assert len(unauthorized) == 1, endpoint.log_lines("refused gRPC")
    # The forged signature came within the minute: counted, not logged again.
    assert not endpoint.log_lines(r"refused gRPC SendMessage .*signature check failed")
    forbidden_lines = endpoint.log_lines(r"refused gRPC SendMessage from .*: FORBIDDEN: .*grpc_limit_bob")
    assert len(forbidden_lines) == 1
    assert len(endpoint.log_lines(r"refused gRPC SendMessage from .*: BAD_REQUEST: no message to send")) == 1
    assert not endpoint.log_lines(r"refused gRPC .*: OK")
