"""The route registry's rules, without sockets or clocks."""

from __future__ import annotations

from aiorocketmq.namesrv.routes import Registration, RouteRegistry
from aiorocketmq.protocol.body import DataVersion, QueueData, TopicConfig, TopicConfigSerializeWrapper


def configs(*topics: tuple[str, int], counter: int = 1, perm: int = 6) -> TopicConfigSerializeWrapper:
    return TopicConfigSerializeWrapper(
        topic_config_table={
            name: TopicConfig(topic_name=name, read_queue_nums=n, write_queue_nums=n, perm=perm)
            for name, n in topics
        },
        data_version=DataVersion(timestamp=1000, counter=counter),
    )


def register(
    registry: RouteRegistry,
    name: str,
    addr: str,
    broker_id: int = 0,
    *,
    cluster: str = "c1",
    topics: TopicConfigSerializeWrapper | None = None,
    channel: object | None = None,
    now: float = 0.0,
    ha: str = "",
) -> Registration:
    return registry.register(
        cluster=cluster,
        broker_name=name,
        broker_addr=addr,
        broker_id=broker_id,
        ha_server_addr=ha,
        topic_configs=topics,
        channel=channel,
        now=now,
    )


def queue_nums(registry: RouteRegistry, topic: str) -> dict[str, int]:
    route = registry.route(topic)
    assert route is not None, topic
    return {q.broker_name: q.write_queue_nums for q in route.queue_datas}


def test_master_registration_creates_queue_data_and_route() -> None:
    r = RouteRegistry()
    result = register(r, "a", "10.0.0.1:10911", topics=configs(("T", 4), ("U", 2)))
    assert result.new_broker and result.topics_updated
    assert result.master_addr is None and result.ha_server_addr is None
    route = r.route("T")
    assert route is not None
    assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas] == [
        ("a", 4, 4, 6)
    ]
    assert [(b.broker_name, b.cluster, b.broker_addrs) for b in route.broker_datas] == [
        ("a", "c1", {0: "10.0.0.1:10911"})
    ]
    assert r.topic_names() == ["T", "U"]
    assert r.route("nope") is None


def test_routes_merge_across_broker_names_and_clusters() -> None:
    r = RouteRegistry()
    register(r, "a", "10.0.0.1:10911", cluster="c1", topics=configs(("T", 4), ("OnlyA", 1)))
    register(r, "b", "10.0.0.2:10911", cluster="c2", topics=configs(("T", 8)))
    assert queue_nums(r, "T") == {"a": 4, "b": 8}
    assert queue_nums(r, "OnlyA") == {"a": 1}
    info = r.cluster_info()
    assert info.cluster_addr_table == {"c1": ["a"], "c2": ["b"]}
    assert set(info.broker_addr_table) == {"a", "b"}
    assert r.topics_by_cluster("c1") == ["OnlyA", "T"]
    assert r.topics_by_cluster("c2") == ["T"]
    assert r.topics_by_cluster("unknown") == []


def test_queue_data_changes_only_with_a_new_data_version() -> None:
    r = RouteRegistry()
    register(r, "a", "A:1", topics=configs(("T", 4), counter=1))
    again = register(r, "a", "A:1", topics=configs(("T", 16), counter=1), now=1)
    assert not again.new_broker and not again.topics_updated
    assert queue_nums(r, "T") == {"a": 4}
    changed = register(r, "a", "A:1", topics=configs(("T", 16), counter=2), now=2)
    assert changed.topics_updated
    assert queue_nums(r, "T") == {"a": 16}


def test_slaves_never_create_queue_data_and_learn_their_master() -> None:
    r = RouteRegistry()
    early = register(r, "a", "S:1", 1, topics=configs(("T", 4)), ha="S:2")
    assert early.master_addr is None and early.ha_server_addr is None
    assert r.route("T") is None
    register(r, "a", "M:1", 0, topics=configs(("T", 4)), ha="M:2")
    later = register(r, "a", "S:1", 1, topics=configs(("T", 4)), ha="S:2")
    assert later.master_addr == "M:1"
    assert later.ha_server_addr == "M:2"
    route = r.route("T")
    assert route is not None and route.broker_datas[0].broker_addrs == {0: "M:1", 1: "S:1"}


def test_an_address_registered_under_another_id_is_moved() -> None:
    r = RouteRegistry()
    register(r, "a", "M:1", 0, topics=configs(("T", 4)))
    register(r, "a", "S:1", 1)
    # the master goes away and the slave comes back as master
    r.unregister("M:1")
    register(r, "a", "S:1", 0, topics=configs(("T", 4)))
    info = r.cluster_info()
    assert info.broker_addr_table["a"].broker_addrs == {0: "S:1"}


def epoch(state_version: int) -> TopicConfigSerializeWrapper:
    """A controller-mode broker's topics: its data version stamped with its master epoch."""
    wrapper = configs(("T", 4))
    wrapper.data_version.state_version = state_version
    return wrapper


def test_a_stale_registration_cannot_take_the_new_masters_id() -> None:
    """Controller mode, master A (epoch 1) and slave B; B elected (epoch 2) registers as id 0, then
    an old registration of A as id 0 (epoch 1, sent before it learnt it was demoted) arrives. As
    Apache's name server, it is refused (no master in the answer, A forgotten until it registers
    again), B stays the master, and A, registering as a slave, learns B's HA address at once."""
    r = RouteRegistry()
    register(r, "a", "A:1", 0, topics=epoch(1), ha="A:2")
    register(r, "a", "B:1", 2, topics=epoch(1), ha="B:2")
    register(r, "a", "B:1", 0, topics=epoch(2), ha="B:2")  # B elected
    stale = register(r, "a", "A:1", 0, topics=epoch(1), ha="A:2")
    assert stale.rejected_by == "B:1"
    assert stale.master_addr is None and stale.ha_server_addr is None
    assert r.broker_addrs("a") == {0: "B:1"}
    assert [live.address for live in r.live_brokers()] == ["B:1"]
    demoted = register(r, "a", "A:1", 1, topics=epoch(2), ha="A:2")
    assert (demoted.master_addr, demoted.ha_server_addr) == ("B:1", "B:2")
    assert r.broker_addrs("a") == {0: "B:1", 1: "A:1"}


def test_an_id_taken_over_with_a_newer_or_equal_state_version_moves() -> None:
    """Only a strictly newer stateVersion holds an id: a new master (epoch 2) takes id 0 from the
    old one (epoch 1), and brokers without one (0, classic mode) replace each other as before."""
    r = RouteRegistry()
    register(r, "a", "A:1", 0, topics=epoch(1), ha="A:2")
    taken = register(r, "a", "B:1", 0, topics=epoch(2), ha="B:2")
    assert taken.rejected_by is None and r.broker_addrs("a") == {0: "B:1"}
    classic = RouteRegistry()
    register(classic, "a", "A:1", 0, topics=configs(("T", 4)))
    register(classic, "a", "B:1", 0, topics=configs(("T", 4)))
    assert classic.broker_addrs("a") == {0: "B:1"}


def test_removing_the_last_address_of_a_broker_name_removes_its_queue_data() -> None:
    r = RouteRegistry()
    register(r, "a", "M:1", 0, topics=configs(("T", 4), ("OnlyA", 2)))
    register(r, "a", "S:1", 1)
    register(r, "b", "B:1", 0, cluster="c2", topics=configs(("T", 4)))
    r.unregister("M:1")
    # the slave keeps broker name "a" (and its queue data) alive, without a master
    route = r.route("OnlyA")
    assert route is not None and route.broker_datas[0].broker_addrs == {1: "S:1"}
    assert r.unregister("S:1") == ["a"]
    assert r.route("OnlyA") is None
    assert "OnlyA" not in r.topic_names()
    assert queue_nums(r, "T") == {"b": 4}
    assert r.cluster_info().cluster_addr_table == {"c2": ["b"]}


def test_expire_drops_only_silent_brokers() -> None:
    r = RouteRegistry(broker_expiry=10)
    register(r, "a", "A:1", topics=configs(("T", 4)), now=0)
    register(r, "b", "B:1", topics=configs(("T", 4)), now=0)
    register(r, "b", "B:1", topics=configs(("T", 4)), now=8)
    assert r.expire(10) == []  # exactly at the limit is still alive
    expired = r.expire(10.5)
    assert [b.address for b in expired] == ["A:1"]
    assert queue_nums(r, "T") == {"b": 4}
    assert r.expire(18) == []
    assert [b.address for b in r.expire(18.1)] == ["B:1"]
    assert r.route("T") is None
    assert r.cluster_info().cluster_addr_table == {}


def test_touch_refreshes_liveness_and_data_version_queries() -> None:
    r = RouteRegistry(broker_expiry=10)
    register(r, "a", "A:1", topics=configs(("T", 4), counter=3), now=0)
    assert not r.data_version_changed("A:1", DataVersion(timestamp=1000, counter=3))
    assert r.data_version_changed("A:1", DataVersion(timestamp=1000, counter=4))
    assert r.data_version_changed("unknown:1", DataVersion())
    assert r.data_version("A:1") == DataVersion(timestamp=1000, counter=3)
    assert r.data_version("unknown:1") is None
    assert r.touch("A:1", 9)
    assert not r.touch("unknown:1", 9)
    assert r.expire(15) == []
    assert len(r.expire(19.5)) == 1


def test_channel_closed_removes_every_broker_registered_on_it() -> None:
    r = RouteRegistry()
    first, second = object(), object()
    register(r, "a", "A:1", topics=configs(("T", 4)), channel=first)
    register(r, "b", "B:1", topics=configs(("T", 4)), channel=second)
    register(r, "c", "C:1", topics=configs(("T", 4)), channel=first)
    assert r.channel_in_use(first)
    gone = r.channel_closed(first)
    assert sorted(b.address for b in gone) == ["A:1", "C:1"]
    assert not r.channel_in_use(first)
    assert queue_nums(r, "T") == {"b": 4}
    assert r.channel_closed(first) == []


def test_reconnected_broker_survives_its_old_connection_closing() -> None:
    r = RouteRegistry()
    old, new = object(), object()
    register(r, "a", "A:1", topics=configs(("T", 4)), channel=old)
    register(r, "a", "A:1", topics=configs(("T", 4)), channel=new, now=1)
    assert r.channel_closed(old) == []
    assert queue_nums(r, "T") == {"a": 4}


def test_routes_are_copies() -> None:
    r = RouteRegistry()
    register(r, "a", "A:1", topics=configs(("T", 4)))
    route = r.route("T")
    assert route is not None
    route.queue_datas[0].perm = 0
    route.broker_datas[0].broker_addrs[5] = "X:1"
    again = r.route("T")
    assert again is not None
    assert again.queue_datas[0].perm == 6
    assert again.broker_datas[0].broker_addrs == {0: "A:1"}


def test_delete_topic_everywhere_or_per_cluster() -> None:
    r = RouteRegistry()
    register(r, "a", "A:1", cluster="c1", topics=configs(("T", 4), ("U", 4)))
    register(r, "b", "B:1", cluster="c2", topics=configs(("T", 4)))
    assert r.delete_topic("T", "c1")
    assert queue_nums(r, "T") == {"b": 4}
    assert r.delete_topic("U")
    assert r.route("U") is None
    assert not r.delete_topic("U")
    # a re-registration with the same data version does not bring it back...
    register(r, "a", "A:1", cluster="c1", topics=configs(("T", 4), ("U", 4)), now=1)
    assert r.route("U") is None
    # ...a changed one does
    register(r, "a", "A:1", cluster="c1", topics=configs(("T", 4), ("U", 4), counter=2), now=2)
    assert queue_nums(r, "U") == {"a": 4}


def test_wipe_write_perm() -> None:
    r = RouteRegistry()
    register(r, "a", "A:1", topics=configs(("T", 4), ("U", 4), perm=7))
    register(r, "b", "B:1", topics=configs(("T", 4)))
    assert r.wipe_write_perm("a") == 2
    assert r.wipe_write_perm("missing") == 0
    route = r.route("T")
    assert route is not None
    assert {q.broker_name: q.perm for q in route.queue_datas} == {"a": 5, "b": 6}


def test_filter_servers_follow_the_registration() -> None:
    r = RouteRegistry()
    r.register(
        cluster="c1",
        broker_name="a",
        broker_addr="A:1",
        broker_id=0,
        topic_configs=configs(("T", 4)),
        filter_servers=["F:1"],
        now=0,
    )
    route = r.route("T")
    assert route is not None and route.filter_server_table == {"A:1": ["F:1"]}
    r.register(
        cluster="c1",
        broker_name="a",
        broker_addr="A:1",
        broker_id=0,
        topic_configs=configs(("T", 4)),
        filter_servers=[],
        now=1,
    )
    route = r.route("T")
    assert route is not None and route.filter_server_table == {}


def test_heartbeat_touch_must_name_the_registered_cluster() -> None:
    r = RouteRegistry(broker_expiry=10)
    register(r, "a", "10.0.0.1:10911", cluster="c1", now=0)
    assert not r.touch("10.0.0.1:10911", 8, cluster="c2")
    assert not r.touch("10.0.0.9:10911", 8, cluster="c1")
    assert r.touch("10.0.0.1:10911", 8, cluster="c1")
    assert r.expire(15) == []
    assert [live.address for live in r.expire(19)] == ["10.0.0.1:10911"]


def test_register_topic_needs_registered_broker_names_and_changes_nothing_otherwise() -> None:
    r = RouteRegistry()
    register(r, "a", "10.0.0.1:10911", topics=configs(("T", 4)))
    register(r, "b", "10.0.0.2:10911")

    def qd(name: str, n: int) -> QueueData:
        return QueueData(broker_name=name, read_queue_nums=n, write_queue_nums=n, perm=6)

    assert r.register_topic("N", [qd("a", 2)])
    assert r.register_topic("T", [qd("b", 3)])
    assert queue_nums(r, "N") == {"a": 2} and queue_nums(r, "T") == {"a": 4, "b": 3}
    # all or nothing: one unknown broker name and no queue data is touched
    assert not r.register_topic("T", [qd("a", 9), qd("x", 1)])
    assert not r.register_topic("X", [qd("x", 1)])
    assert not r.register_topic("X", [])
    assert queue_nums(r, "T") == {"a": 4, "b": 3} and r.route("X") is None


def test_system_topics_and_sys_flag_lists() -> None:
    r = RouteRegistry()
    assert r.system_topics() == ([], None)
    flagged = TopicConfigSerializeWrapper(
        topic_config_table={
            name: TopicConfig(topic_name=name, topic_sys_flag=flag)
            for name, flag in {"P": 0, "U": 1, "S": 2, "US": 3}.items()
        },
    )
    register(r, "b", "10.0.0.21:10911", 1, cluster="c2")
    register(r, "a", "10.0.0.1:10911", cluster="c1", topics=flagged)
    register(r, "c1", "10.0.0.3:10911", cluster="c1")  # a broker named like its cluster: listed once
    assert r.system_topics() == (["c1", "a", "c2", "b"], "10.0.0.1:10911")
    assert r.topics_with_sys_flag(unit=True) == ["U", "US"]
    assert r.topics_with_sys_flag(unit_sub=True) == ["S", "US"]
    assert r.topics_with_sys_flag(unit=False, unit_sub=True) == ["S"]
    assert r.topics_with_sys_flag() == ["P", "S", "U", "US"]
    assert r.broker_addrs("b") == {1: "10.0.0.21:10911"} and r.broker_addrs("x") == {}
