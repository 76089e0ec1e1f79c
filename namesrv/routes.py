"""The route registry: which brokers are alive, how they group into broker names and clusters,
and which broker names host which topics (docs/protocol.md §6).

Pure state, no I/O: callers pass the time (monotonic seconds) and an opaque ``channel`` (the
connection a broker registered on) so the rules can be unit-tested without sockets or clocks.

Tables:

* cluster name -> broker names;
* broker name -> :class:`BrokerData` (cluster, address by broker id; id 0 is the master);
* topic -> broker name -> :class:`QueueData`;
* broker address -> :class:`LiveBroker` (last registration or heartbeat, dataVersion, channel,
  HA address, cluster);
* broker address -> filter server addresses.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from aiorocketmq.protocol.body import (
    BrokerData,
    ClusterInfo,
    DataVersion,
    QueueData,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicQueueMappingInfo,
    TopicRouteData,
)
from aiorocketmq.protocol.codes import MASTER_ID, Perm, TopicSysFlag


@dataclass
class LiveBroker:
    """What the registry knows about one registered broker address."""

    address: str
    last_update: float
    data_version: DataVersion
    channel: Hashable | None
    ha_server_addr: str
    #: The cluster it registered in; a BROKER_HEARTBEAT must name it (Apache keys its live
    #: table by cluster and address).
    cluster: str = ""


@dataclass(frozen=True)
class Registration:
    """The outcome of a registration: what to answer, and what changed (for logging)."""

    master_addr: str | None = None
    ha_server_addr: str | None = None
    new_broker: bool = False
    topics_updated: bool = False
    #: Refused as stale: the address holding the id with a newer stateVersion.
    rejected_by: str | None = None


class RouteRegistry:
    """Every table of the name server's routing state, and the rules that change them."""

    def __init__(self, broker_expiry: float = 120.0) -> None:
        #: Seconds a broker may go without registering before :meth:`expire` drops it.
        self.broker_expiry = broker_expiry
        self._clusters: dict[str, set[str]] = {}
        self._brokers: dict[str, BrokerData] = {}
        self._topics: dict[str, dict[str, QueueData]] = {}
        self._live: dict[str, LiveBroker] = {}
        self._filter_servers: dict[str, list[str]] = {}
        #: Static topics (RocketMQ 5): each broker's mapping summary, by topic and broker name.
        self._mappings: dict[str, dict[str, TopicQueueMappingInfo]] = {}

    # -- registration -------------------------------------------------------------------

    def register(
        self,
        *,
        cluster: str,
        broker_name: str,
        broker_addr: str,
        broker_id: int,
        ha_server_addr: str = "",
        topic_configs: TopicConfigSerializeWrapper | None = None,
        filter_servers: list[str] | None = None,
        channel: Hashable | None = None,
        now: float,
    ) -> Registration:
        """Record a broker's (re-)registration."""
        self._clusters.setdefault(cluster, set()).add(broker_name)
        broker = self._brokers.get(broker_name)
        first = broker is None
        if broker is None:
            broker = BrokerData(cluster=cluster, broker_name=broker_name, broker_addrs={})
            self._brokers[broker_name] = broker
        addrs = broker.broker_addrs
        # One address has one role: a slave promoted to master (or the reverse) re-registers
        # under its new id, and its old entry must go.
        for other_id in [i for i, a in addrs.items() if a == broker_addr and i != broker_id]:
            del addrs[other_id]

        version = topic_configs.data_version if topic_configs is not None else DataVersion()
        # The id is held by another address whose data has a newer stateVersion (the master
        # epoch a controller-mode broker stamps on it): this registration is stale, e.g. an old
        # master's periodic one sent just before it learnt it was demoted, arriving after the new
        # master's. As Apache does, it is refused (answered with no master) and the address is
        # forgotten until it registers again, so that it cannot take the new master's place.
        holder = addrs.get(broker_id)
        if holder is not None and holder != broker_addr:
            held = self._live.get(holder)
            if held is not None and held.data_version.state_version > version.state_version:
                self._live.pop(broker_addr, None)
                return Registration(rejected_by=holder)
        first = holder is None or first
        addrs[broker_id] = broker_addr

        topics_updated = False
        # Only a master's topics become queue data, and only when they may have changed.
        if (
            topic_configs is not None
            and broker_id == MASTER_ID
            and (first or self.data_version_changed(broker_addr, version))
        ):
            for config in topic_configs.topic_config_table.values():
                self._put_queue_data(broker_name, config)
            # Keyed by the broker each summary names, as Apache's name server keys them.
            for topic, info in (topic_configs.topic_queue_mapping_info_map or {}).items():
                self._mappings.setdefault(topic, {})[info.bname or broker_name] = info
            topics_updated = True

        previous = self._live.get(broker_addr)
        self._live[broker_addr] = LiveBroker(
            broker_addr, now, version.model_copy(), channel, ha_server_addr, cluster
        )
        if filter_servers is not None:
            if filter_servers:
                self._filter_servers[broker_addr] = list(filter_servers)
            else:
                self._filter_servers.pop(broker_addr, None)

        master_addr = ha_addr = None
        if broker_id != MASTER_ID:
            master = addrs.get(MASTER_ID)
            master_live = self._live.get(master) if master is not None else None
            if master_live is not None:
                master_addr, ha_addr = master, master_live.ha_server_addr
        return Registration(master_addr, ha_addr, previous is None, topics_updated)

    def _put_queue_data(self, broker_name: str, config: TopicConfig) -> None:
        self._topics.setdefault(config.topic_name, {})[broker_name] = QueueData(
            broker_name=broker_name,
            read_queue_nums=config.read_queue_nums,
            write_queue_nums=config.write_queue_nums,
            perm=config.perm,
            topic_sys_flag=config.topic_sys_flag,
        )

    def register_topic(self, topic: str, queue_datas: Iterable[QueueData]) -> bool:
        """REGISTER_TOPIC_IN_NAMESRV: make ``topic`` routable on the given queue datas, added to
        (or replacing, per broker name) any it has.

        Refused (``False``, nothing changed) when a queue data names a broker name with no
        registered broker, as Apache refuses it. The entries then live as a registration's do:
        until their broker name leaves or the topic is deleted.
        """
        queues = {q.broker_name: q.model_copy() for q in queue_datas}
        if not queues or not queues.keys() <= self._brokers.keys():
            return False
        self._topics.setdefault(topic, {}).update(queues)
        return True

    def unregister(self, broker_addr: str) -> list[str]:
        """A broker leaving on purpose; returns the broker names that lost their last address."""
        return self._remove_address(broker_addr)

    # -- liveness -----------------------------------------------------------------------

    def data_version_changed(self, broker_addr: str, version: DataVersion) -> bool:
        live = self._live.get(broker_addr)
        return live is None or live.data_version != version

    def data_version(self, broker_addr: str) -> DataVersion | None:
        live = self._live.get(broker_addr)
        return live.data_version.model_copy() if live is not None else None

    def touch(self, broker_addr: str, now: float, cluster: str | None = None) -> bool:
        """Refresh a broker's liveness without a full registration (QUERY_DATA_VERSION, and
        BROKER_HEARTBEAT, which also names the ``cluster`` the broker registered in)."""
        live = self._live.get(broker_addr)
        if live is None or (cluster is not None and live.cluster != cluster):
            return False
        live.last_update = now
        return True

    def expire(self, now: float) -> list[LiveBroker]:
        """Drop every broker silent for longer than :attr:`broker_expiry`; returns them."""
        deadline = now - self.broker_expiry
        expired = [live for live in self._live.values() if live.last_update < deadline]
        for live in expired:
            self._remove_address(live.address)
        return expired

    def channel_closed(self, channel: Hashable) -> list[LiveBroker]:
        """Drop every broker registered over ``channel``; returns them."""
        gone = [live for live in self._live.values() if live.channel is channel]
        for live in gone:
            self._remove_address(live.address)
        return gone

    def channel_in_use(self, channel: Hashable) -> bool:
        return any(live.channel is channel for live in self._live.values())

    def _remove_address(self, broker_addr: str) -> list[str]:
        self._live.pop(broker_addr, None)
        self._filter_servers.pop(broker_addr, None)
        emptied = []
        for name, broker in self._brokers.items():
            addrs = broker.broker_addrs
            for broker_id in [i for i, a in addrs.items() if a == broker_addr]:
                del addrs[broker_id]
            if not addrs:
                emptied.append(name)
        for name in emptied:
            self._drop_broker_name(name)
        return emptied

    def _drop_broker_name(self, broker_name: str) -> None:
        """A broker name with no address left: it leaves its cluster and every topic."""
        self._brokers.pop(broker_name, None)
        for cluster in [c for c, names in self._clusters.items() if broker_name in names]:
            names = self._clusters[cluster]
            names.discard(broker_name)
            if not names:
                del self._clusters[cluster]
        self._remove_queue_data({broker_name}, self._topics)

    def _remove_queue_data(self, broker_names: set[str], topics: Iterable[str]) -> None:
        for topic in list(topics):
            queues = self._topics.get(topic)
            if queues is None:
                continue
            for name in broker_names & queues.keys():
                del queues[name]
            if not queues:
                del self._topics[topic]

    # -- queries ------------------------------------------------------------------------

    def route(self, topic: str) -> TopicRouteData | None:
        """The route clients get for ``topic``, or ``None`` when no live broker hosts it."""
        queues = self._topics.get(topic)
        if not queues:
            return None
        queue_datas = [queues[name].model_copy() for name in sorted(queues)]
        broker_datas = []
        filter_table: dict[str, list[str]] = {}
        for name in sorted(queues):
            broker = self._brokers.get(name)
            if broker is None:
                continue
            broker_datas.append(broker.model_copy(update={"broker_addrs": dict(broker.broker_addrs)}))
            for addr in broker.broker_addrs.values():
                servers = self._filter_servers.get(addr)
                if servers:
                    filter_table[addr] = list(servers)
        if not broker_datas:
            return None
        mappings = self._mappings.get(topic)
        return TopicRouteData(
            queue_datas=queue_datas,
            broker_datas=broker_datas,
            filter_server_table=filter_table,
            topic_queue_mapping_by_broker=dict(mappings) if mappings else None,
        )

    def cluster_info(self) -> ClusterInfo:
        return ClusterInfo(
            broker_addr_table={
                name: broker.model_copy(update={"broker_addrs": dict(broker.broker_addrs)})
                for name, broker in sorted(self._brokers.items())
            },
            cluster_addr_table={cluster: sorted(names) for cluster, names in sorted(self._clusters.items())},
        )

    def topic_names(self) -> list[str]:
        return sorted(self._topics)

    def topics_by_cluster(self, cluster: str) -> list[str]:
        names = self._clusters.get(cluster, set())
        return sorted(topic for topic, queues in self._topics.items() if names & queues.keys())

    def system_topics(self) -> tuple[list[str], str | None]:
        """GET_SYSTEM_TOPIC_LIST_FROM_NS: every cluster name and broker name (each is a system
        topic on the brokers), and one broker address to ask for the brokers' own system topics
        (the lowest broker id of the first broker name, or ``None`` with no broker)."""
        names: dict[str, None] = {}  # ordered, and a name used twice listed once (Java's Set)
        for cluster, broker_names in sorted(self._clusters.items()):
            names[cluster] = None
            names.update(dict.fromkeys(sorted(broker_names)))
        addr = None
        for _, broker in sorted(self._brokers.items()):
            if broker.broker_addrs:
                addr = broker.broker_addrs[min(broker.broker_addrs)]
                break
        return list(names), addr

    def topics_with_sys_flag(self, *, unit: bool | None = None, unit_sub: bool | None = None) -> list[str]:
        """Topics whose ``topicSysFlag`` has (``True``) or lacks (``False``) the UNIT and
        UNIT_SUB bits; ``None`` does not look at that bit.

        The flag read is the first queue data's (the broker name that first hosted the topic),
        as Apache reads the first of its map: brokers of one topic agree on it.
        """
        found = []
        for topic, queues in sorted(self._topics.items()):
            if not queues:
                continue
            flag = next(iter(queues.values())).topic_sys_flag
            if unit is not None and bool(flag & TopicSysFlag.UNIT) != unit:
                continue
            if unit_sub is not None and bool(flag & TopicSysFlag.UNIT_SUB) != unit_sub:
                continue
            found.append(topic)
        return found

    def broker_addrs(self, broker_name: str) -> dict[int, str]:
        """Broker id -> address of one broker name (GET_BROKER_MEMBER_GROUP); empty if unknown."""
        broker = self._brokers.get(broker_name)
        return dict(sorted(broker.broker_addrs.items())) if broker is not None else {}

    def live_brokers(self) -> list[LiveBroker]:
        return list(self._live.values())

    # -- administration -----------------------------------------------------------------

    def delete_topic(self, topic: str, cluster: str | None = None) -> bool:
        """Forget a topic's queue data: everywhere, or only on ``cluster``'s broker names.

        The topic comes back when a master next registers a changed dataVersion listing it.
        """
        if topic not in self._topics:
            return False
        if cluster:
            self._remove_queue_data(self._clusters.get(cluster, set()), [topic])
        else:
            del self._topics[topic]
            self._mappings.pop(topic, None)
        return True

    def wipe_write_perm(self, broker_name: str) -> int:
        """Clear the write permission of ``broker_name`` on every topic; returns how many."""
        count = 0
        for queues in self._topics.values():
            queue = queues.get(broker_name)
            if queue is not None:
                queue.perm = queue.perm & ~int(Perm.WRITE)
                count += 1
        return count

    def add_write_perm(self, broker_name: str) -> int:
        """Give ``broker_name`` back its write permission on every topic; returns how many."""
        count = 0
        for queues in self._topics.values():
            queue = queues.get(broker_name)
            if queue is not None:
                queue.perm = queue.perm | int(Perm.WRITE)
                count += 1
        return count
