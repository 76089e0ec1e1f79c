"""Registration with the name servers for brokers with many topics.

The broker registers only the changed topics after a topic change (Apache 4.9's
``registerIncrementBrokerData``), the full table on a new connection, and a large table in
RocketMQ's compressed form; a real name server then lists 10,000 topics of a real broker.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiorocketmq.broker.config import BrokerConfig
from aiorocketmq.broker.registration import NameServerRegistration
from aiorocketmq.broker.topics import TopicTable
from aiorocketmq.protocol.body import (
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
)
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.headers import (
    CreateTopicRequestHeader,
    GetRouteInfoRequestHeader,
    RegisterBrokerRequestHeader,
)
from aiorocketmq.protocol.transport import Connection, Server, connect
from tests.cluster import Cluster
from tests.support import wait_until

Seen = tuple[bool, dict[str, TopicConfig], DataVersion, Connection]


class FakeNameServer:
    """A name server that keeps every registration it gets (real TCP, in process)."""

    def __init__(self) -> None:
        self.registrations: asyncio.Queue[Seen] = asyncio.Queue()
        self.server = Server(
            {
                RequestCode.REGISTER_BROKER: self._register,
                RequestCode.UNREGISTER_BROKER: lambda conn, cmd: cmd.response(),
            },
            name="fake-namesrv",
        )

    def _register(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header = RegisterBrokerRequestHeader.from_fields(cmd.ext_fields)
        body = RegisterBrokerBody.decode_registration(cmd.body, compressed=header.compressed)
        wrapper = body.topic_config_serialize_wrapper
        self.registrations.put_nowait(
            (header.compressed, wrapper.topic_config_table, wrapper.data_version, conn)
        )
        return cmd.response()

    async def next(self) -> Seen:
        return await asyncio.wait_for(self.registrations.get(), 15)


def broker_topics(tmp_path: Path, port: int, count: int, **overrides: object) -> TopicTable:
    config = BrokerConfig.load(
        None,
        {
            "storePathRootDir": str(tmp_path),
            "brokerName": "b1",
            "brokerIP1": "127.0.0.1",
            "namesrvAddr": f"127.0.0.1:{port}",
            **overrides,
        },
    )
    topics = TopicTable(config)
    topics.load()
    for i in range(count):
        name = f"T{i}"
        topics.topics[name] = TopicConfig(topic_name=name, read_queue_nums=8, write_queue_nums=8)
    return topics


async def test_a_topic_change_registers_only_the_changed_topic(tmp_path: Path) -> None:
    namesrv = FakeNameServer()
    port = await namesrv.server.listen("127.0.0.1", 0)
    topics = broker_topics(tmp_path, port, 1500)
    registration = NameServerRegistration(topics.config, topics.wrapper, changed_topics=topics.take_changed)
    topics.on_change = registration.register_soon
    await registration.start()
    try:
        compressed, table, version, first_conn = await namesrv.next()
        assert compressed, "1,500 topics go in the compressed form"
        assert table.keys() == topics.topics.keys()
        assert table["T7"].write_queue_nums == 8
        assert version == topics.data_version

        topics.put(TopicConfig(topic_name="Fresh", read_queue_nums=4, write_queue_nums=4))
        compressed, table, version, conn = await namesrv.next()
        assert not compressed
        assert list(table) == ["Fresh"]
        assert table["Fresh"].read_queue_nums == 4
        assert version == topics.data_version
        assert conn is first_conn

        # A new connection (the name server forgot the broker with the old one): the full table.
        first_conn.abort()
        compressed, table, version, conn = await namesrv.next()
        assert conn is not first_conn
        assert compressed
        assert table.keys() == topics.topics.keys()
        assert "Fresh" in table
    finally:
        await registration.stop()
        await namesrv.server.close()


async def test_small_tables_and_system_flags_register_as_json(tmp_path: Path) -> None:
    namesrv = FakeNameServer()
    port = await namesrv.server.listen("127.0.0.1", 0)
    small = broker_topics(tmp_path / "small", port, 10)
    flagged = broker_topics(tmp_path / "flagged", port, 1500)
    flagged.topics["T3"] = TopicConfig(topic_name="T3", topic_sys_flag=1)
    forced = broker_topics(tmp_path / "forced", port, 10, compressedRegister="true")
    for topics, expect_compressed in ((small, False), (flagged, False), (forced, True)):
        registration = NameServerRegistration(
            topics.config, topics.wrapper, changed_topics=topics.take_changed
        )
        await registration.start()
        try:
            compressed, table, _, _ = await namesrv.next()
        finally:
            await registration.stop()
        assert compressed is expect_compressed
        assert table.keys() == topics.topics.keys()
        if topics is flagged:
            assert table["T3"].topic_sys_flag == 1, "the JSON form keeps topicSysFlag"
    await namesrv.server.close()


async def test_a_broker_with_ten_thousand_topics_is_listed_by_the_name_server(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    names = [f"Many_{i}" for i in range(10_000)]
    config_dir = tmp_path / "broker-a" / "config"
    config_dir.mkdir(parents=True)
    table = {n: TopicConfig(topic_name=n, read_queue_nums=8, write_queue_nums=8) for n in names}
    (config_dir / "topics.json").write_bytes(TopicConfigSerializeWrapper(topic_config_table=table).encode())
    await cluster.start_namesrv()
    conn: Connection | None = None
    try:
        broker = await cluster.start_broker("broker-a")
        conn = await connect("127.0.0.1", cluster.namesrv_ports[0])
        listed: set[str] = set()

        async def all_listed() -> bool:
            assert conn is not None
            response = await conn.request(
                RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER), 10
            )
            assert response.code == ResponseCode.SUCCESS
            listed.clear()
            listed.update(TopicList.decode(response.body).topic_list)
            return listed.issuperset(names)

        await wait_until(all_listed, timeout=60)
        route = await conn.request(
            RemotingCommand.request(
                RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic="Many_9999").to_fields()
            ),
            10,
        )
        assert route.code == ResponseCode.SUCCESS
        queues = TopicRouteData.decode(route.body).queue_datas
        assert [(q.broker_name, q.write_queue_nums) for q in queues] == [("broker-a", 8)]

        # A topic created afterwards reaches the name server too (registered on its own).
        to_broker = await connect("127.0.0.1", broker.port)
        try:
            created = await to_broker.request(
                RemotingCommand.request(
                    RequestCode.UPDATE_AND_CREATE_TOPIC,
                    CreateTopicRequestHeader(
                        topic="AfterTenThousand", read_queue_nums=2, write_queue_nums=2, perm=6
                    ).to_fields(),
                ),
                10,
            )
            assert created.code == ResponseCode.SUCCESS, created.remark
        finally:
            to_broker.close()
        names.append("AfterTenThousand")
        await wait_until(all_listed, timeout=30)
    finally:
        if conn is not None:
            conn.close()
        await cluster.stop()
