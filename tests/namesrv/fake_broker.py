"""Test helpers that speak to a name server the way brokers and clients do, with raw requests."""

from __future__ import annotations

import asyncio
import functools
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiorocketmq.protocol.body import (
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.transport import Connection
from tests.broker import requests
from tests.broker.requests import JSON

#: One request and its response, checked to mirror the serialization; the name server answers
#: within 5 s.
call = functools.partial(requests.call, timeout=5.0)


async def route(conn: Connection, topic: str, *, serialize_type: int = JSON) -> TopicRouteData | None:
    """The topic's route, or ``None`` on TOPIC_NOT_EXIST."""
    response = await call(
        conn, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, serialize_type=serialize_type
    )
    if response.code == ResponseCode.TOPIC_NOT_EXIST:
        return None
    assert response.code == ResponseCode.SUCCESS, response
    return TopicRouteData.decode(response.body)


async def broker_names(conn: Connection, topic: str) -> set[str]:
    found = await route(conn, topic)
    return {q.broker_name for q in found.queue_datas} if found is not None else set()


async def eventually(
    check: Callable[[], Awaitable[bool]], *, timeout: float, interval: float = 0.05
) -> float:
    """Poll ``check`` until it holds; returns the seconds it took, fails after ``timeout``."""
    start = time.monotonic()
    while True:
        if await check():
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


@dataclass
class FakeBroker:
    """A broker as the name server sees it: registrations over its own connection."""

    conn: Connection
    cluster: str
    name: str
    addr: str
    broker_id: int = 0
    topics: dict[str, int] = field(default_factory=dict)
    #: topic -> its ``topicSysFlag`` (TopicSysFlag bits), for the topics that have one.
    sys_flags: dict[str, int] = field(default_factory=dict)
    counter: int = 1
    ha_addr: str = ""
    serialize_type: int = JSON
    #: The data version's stateVersion: a controller-mode broker's master epoch.
    state_version: int = 0

    def body(self) -> RegisterBrokerBody:
        return RegisterBrokerBody(
            topic_config_serialize_wrapper=TopicConfigSerializeWrapper(
                topic_config_table={
                    t: TopicConfig(
                        topic_name=t,
                        read_queue_nums=n,
                        write_queue_nums=n,
                        topic_sys_flag=self.sys_flags.get(t, 0),
                    )
                    for t, n in self.topics.items()
                },
                data_version=self.data_version(),
            )
        )

    def data_version(self) -> DataVersion:
        return DataVersion(
            timestamp=1_700_000_000_000, counter=self.counter, state_version=self.state_version
        )

    def header(self) -> dict[str, Any]:
        return {
            "brokerName": self.name,
            "brokerAddr": self.addr,
            "clusterName": self.cluster,
            "brokerId": self.broker_id,
        }

    def register_command(self, *, compressed: bool = False, crc: int | None = None) -> RemotingCommand:
        body = self.body().encode_compressed() if compressed else self.body().encode()
        fields = {
            **self.header(),
            "haServerAddr": self.ha_addr or self.addr.replace(":10911", ":10912"),
            "compressed": compressed,
            "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF if crc is None else crc,
        }
        return RemotingCommand.request(
            RequestCode.REGISTER_BROKER, fields, body, serialize_type=self.serialize_type
        )

    async def register(self, *, compressed: bool = False, crc: int | None = None) -> RemotingCommand:
        response = await self.conn.request(self.register_command(compressed=compressed, crc=crc), timeout=5)
        assert response.serialize_type == self.serialize_type
        return response

    async def unregister(self) -> RemotingCommand:
        return await call(
            self.conn, RequestCode.UNREGISTER_BROKER, self.header(), serialize_type=self.serialize_type
        )
