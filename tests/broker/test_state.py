"""Unit tests of the broker's pure state: topics, locks, client registry, tag parsing, config."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from aiorocketmq.broker.clients import ClientChannel, ClientRegistry
from aiorocketmq.broker.config import BrokerConfig, parse_delay_levels
from aiorocketmq.broker.config_files import ConfigFile
from aiorocketmq.broker.locks import QueueLocks
from aiorocketmq.broker.offsets import OffsetTable
from aiorocketmq.broker.topics import TopicTable
from aiorocketmq.protocol.body import ConsumerData, MessageModel, MessageQueue, SubscriptionData
from aiorocketmq.protocol.codes import Perm, RequestCode, SerializeType
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.message import java_hash
from aiorocketmq.protocol.names import AUTO_CREATE_TOPIC, tag_codes, topic_name_problem
from aiorocketmq.protocol.settings import ConfigError


def make_config(tmp_path: Path, **overrides: object) -> BrokerConfig:
    return BrokerConfig.load(None, {"storePathRootDir": str(tmp_path), "brokerName": "b1", **overrides})


class FakeConn:
    """Stands in for a transport connection: the registry only hashes and labels it."""

    def __init__(self, name: str) -> None:
        self.address = name
        self.closed = False


def test_delay_levels_parse_units() -> None:
    assert parse_delay_levels("1s 5s 1m 2h 1d") == [1000, 5000, 60_000, 7_200_000, 86_400_000]
    with pytest.raises(ConfigError, match="'3x'"):
        parse_delay_levels("1s 3x")


def test_broker_config_reads_rocketmq_keys(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=broker-z\nlistenPort = 12345\n# comment\nautoCreateTopicEnable=false\n")
    config = BrokerConfig.load(conf, {"namesrvAddr": "a:1;b:2"})
    assert (config.broker_name, config.listen_port, config.auto_create_topic_enable) == (
        "broker-z",
        12345,
        False,
    )
    assert config.namesrv_addrs == ["a:1", "b:2"]
    assert "brokerName=broker-z" in config.to_properties()
    with pytest.raises(ConfigError, match="listenPort"):
        BrokerConfig.load(None, {"listenPort": "not-a-port"})


def test_topic_name_validation() -> None:
    assert topic_name_problem("Orders_1-x") is None
    assert topic_name_problem("%RETRY%g") is None
    assert "characters" in (topic_name_problem("bad topic") or "")
    assert "longer" in (topic_name_problem("x" * 128) or "")


def test_auto_create_from_template_caps_queue_count(tmp_path: Path) -> None:
    changes: list[int] = []
    table = TopicTable(make_config(tmp_path), on_change=lambda: changes.append(1))
    table.load()
    template = table.get(AUTO_CREATE_TOPIC)
    assert template is not None and template.perm == Perm.INHERIT | Perm.READ | Perm.WRITE
    created = table.create_on_send("NewTopic", AUTO_CREATE_TOPIC, 4)
    assert created is not None
    assert (created.read_queue_nums, created.write_queue_nums, created.perm) == (4, 4, 6)
    assert table.create_on_send("Other", "NoSuchTemplate", 4) is None
    assert changes and table.data_version.counter == len(changes)


def test_auto_create_disabled_has_no_template(tmp_path: Path) -> None:
    table = TopicTable(make_config(tmp_path, autoCreateTopicEnable="false"))
    table.load()
    assert table.get(AUTO_CREATE_TOPIC) is None
    assert table.create_on_send("NewTopic", AUTO_CREATE_TOPIC, 4) is None


def test_topics_survive_reload_and_fall_back_to_backup(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    table = TopicTable(config)
    table.load()
    table.ensure("Kept", 3, 6)
    table.file.save_now(table.encode())
    table.ensure("Second", 1, 6)
    table.file.save_now(table.encode())
    table.file.path.write_text("{not json")
    reloaded = TopicTable(config)
    reloaded.load()
    assert reloaded.get("Kept") is not None  # from topics.json.bak
    assert reloaded.get("Second") is None


def test_config_file_accepts_fastjson_keys(tmp_path: Path) -> None:
    path = tmp_path / "config" / "consumerOffset.json"
    path.parent.mkdir()
    path.write_text('{\n\t"offsetTable":{\n\t\t"T@g":{0:5,1:7\n\t\t}\n\t}\n}')
    table = OffsetTable(make_config(tmp_path))
    table.load()
    assert table.query("g", "T", 1) == 7
    assert table.query("g", "T", 2) == -1
    assert ConfigFile(tmp_path / "missing.json").load() is None


def test_parse_tag_codes() -> None:
    assert tag_codes(None) is None
    assert tag_codes(" * ") is None
    assert tag_codes("") is None
    assert tag_codes("paid || refunded ||") == frozenset({java_hash("paid"), java_hash("refunded")})


def test_queue_locks_expire_and_belong_to_one_client() -> None:
    locks = QueueLocks(max_live_ms=50)
    mq = MessageQueue(topic="T", broker_name="b", queue_id=0)
    other = MessageQueue(topic="T", broker_name="b", queue_id=1)
    assert locks.try_lock("g", [mq], "c1") == [mq]
    assert locks.try_lock("g", [mq, other], "c2") == [other]
    locks.unlock("g", [mq], "c2")  # not the holder: no effect
    assert locks.holder("g", mq) == "c1"
    time.sleep(0.06)
    assert locks.try_lock("g", [mq], "c2") == [mq]
    locks.unlock("g", [mq], "c2")
    assert locks.holder("g", mq) is None


def test_a_queue_lock_belongs_to_one_client_id_not_to_its_host() -> None:
    """Here for the bug of a lock held by any client of the same host: real client ids are
    ``ip@instance`` (``10.0.0.7@12345``, ``10.0.0.7@DEFAULT``), and two consumers on one machine
    differ only after the ``@``, so comparing hosts would hand one's queue to the other."""
    locks = QueueLocks()
    mq = MessageQueue(topic="T", broker_name="b", queue_id=0)
    first, second = "10.0.0.7@12345", "10.0.0.7@12346"
    assert locks.try_lock("g", [mq], first) == [mq]
    assert locks.try_lock("g", [mq], second) == []
    assert locks.try_lock("g", [mq], "10.0.0.7@12345#1702") == []  # an id that merely starts the same
    locks.unlock("g", [mq], second)  # not the holder: no effect
    assert locks.holder("g", mq) == first
    assert locks.try_lock("g", [mq], first) == [mq]  # renewing its own
    locks.unlock("g", [mq], first)
    assert locks.try_lock("g", [mq], second) == [mq]


def test_client_registry_notifies_on_membership_and_topic_changes() -> None:
    changed: list[str] = []
    registry = ClientRegistry(on_consumers_changed=lambda g: changed.append(g.name))
    c1, c2 = FakeConn("c1"), FakeConn("c2")

    def data(*topics: str, version: int = 1) -> ConsumerData:
        subs = [SubscriptionData(topic=t, sub_version=version) for t in topics]
        return ConsumerData(group_name="G", message_model=MessageModel.CLUSTERING, subscription_data_set=subs)

    registry.register_consumer(ClientChannel(c1, "id1", "CPP", 63), data("T"))  # type: ignore[arg-type]
    registry.register_consumer(ClientChannel(c1, "id1", "CPP", 63), data("T", version=2))  # type: ignore[arg-type]
    assert changed == ["G"]  # a newer subVersion of the same topics is not a membership change
    registry.register_consumer(ClientChannel(c2, "id2", "JAVA", 407), data("T"))  # type: ignore[arg-type]
    group = registry.consumer_group("G")
    assert group is not None and sorted(group.client_ids()) == ["id1", "id2"]
    assert group.subscriptions["T"].sub_version == 2
    registry.register_consumer(ClientChannel(c2, "id2", "JAVA", 407), data("T", "U"))  # type: ignore[arg-type]
    registry.connection_closed(c1)  # type: ignore[arg-type]
    assert changed == ["G", "G", "G", "G"]
    assert group.client_ids() == ["id2"]
    registry.connection_closed(c2)  # type: ignore[arg-type]
    assert registry.consumer_group("G") is None


def test_client_registry_expires_silent_channels() -> None:
    registry = ClientRegistry()
    conn = FakeConn("c")
    channel = ClientChannel(conn, "id", "CPP", 63, last_update=time.monotonic() - 200)  # type: ignore[arg-type]
    registry.register_producer(channel, "P")
    assert registry.expire(120) == [conn]
    assert registry.producer_channels("P") == []


def test_consumer_group_tells_its_live_members_to_rebalance() -> None:
    sent: dict[str, list[RemotingCommand]] = {"live": [], "closed": []}

    class Member(FakeConn):
        def send_oneway(self, cmd: RemotingCommand) -> None:
            sent[self.address].append(cmd)

    live, closed = Member("live"), Member("closed")
    closed.closed = True
    registry = ClientRegistry()
    for conn in (live, closed):
        data = ConsumerData(group_name="G", subscription_data_set=[SubscriptionData(topic="T")])
        registry.register_consumer(ClientChannel(conn, conn.address, "JAVA", 401), data)  # type: ignore[arg-type]
    group = registry.consumer_group("G")
    assert group is not None
    group.notify_ids_changed()
    (notice,) = sent["live"]
    assert notice.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED
    assert notice.ext_fields == {"consumerGroup": "G"}
    assert notice.serialize_type == SerializeType.JSON
    assert sent["closed"] == []
