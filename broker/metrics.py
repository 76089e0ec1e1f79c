"""Prometheus metrics served by the broker itself on ``metricsPromExporterPort`` (5557).

Names follow rocketmq-exporter where it has one, so existing dashboards keep working:
``rocketmq_broker_tps``/``qps``, ``rocketmq_producer_tps``/``message_size``/``offset``,
``rocketmq_consumer_tps``/``message_size``/``offset``, ``rocketmq_group_diff``/``retrydiff``/
``dlqdiff``, and the put-latency distribution as ``rocketmq_brokeruntime_pmdt_*``; a standard
histogram ``rocketmq_broker_put_latency_seconds`` carries the same data for new dashboards.

Rates are per second over the last ~10 s, from counter snapshots taken every second.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import TypeVar

from aiorocketmq.broker.store import PUT_LATENCY_BUCKETS_MS, MessageStore
from aiorocketmq.protocol.names import SYSTEM_GROUP_PREFIX, dlq_topic, is_dlq_topic, is_retry_topic
from aiorocketmq.protocol.prometheus import CONTENT_TYPE, answer_http
from aiorocketmq.protocol.prometheus import PromText as _Text
from aiorocketmq.protocol.prometheus import escape_label as _escape

from .clients import ClientRegistry
from .config import BrokerConfig
from .offsets import OffsetTable
from .stats import PUT_LATENCY_LABELS, BrokerStats
from .topics import TopicTable

log = logging.getLogger(__name__)

RATE_WINDOW = 10.0
#: Re-exported from :mod:`aiorocketmq.protocol.prometheus` (the controller's metrics use it too).
__all__ = ["CONTENT_TYPE", "RATE_WINDOW", "MetricsExporter", "_Text", "_escape"]


class _Snapshot:
    __slots__ = ("at", "got", "got_bytes", "put", "put_bytes")

    def __init__(self, stats: BrokerStats) -> None:
        self.at = time.monotonic()
        self.put = dict(stats.put_messages)
        self.put_bytes = dict(stats.put_bytes)
        self.got = dict(stats.got_messages)
        self.got_bytes = dict(stats.got_bytes)


class MetricsExporter:
    """A tiny HTTP endpoint: ``GET /metrics`` answers the Prometheus text format."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        stats: BrokerStats,
        store: MessageStore,
        topics: TopicTable,
        offsets: OffsetTable,
        clients: ClientRegistry,
    ) -> None:
        self.config = config
        self.stats = stats
        self.store = store
        #: Set by the broker once its server exists: connections dropped over a limit.
        self.connections_dropped: Callable[[], int] = lambda: 0
        #: Set by the broker: each connected slave's address and how many bytes it lags.
        self.slave_lag: Callable[[], list[tuple[str, int]]] = list
        self.topics = topics
        self.offsets = offsets
        self.clients = clients
        self._server: asyncio.Server | None = None
        self._snapshots: deque[_Snapshot] = deque([_Snapshot(stats)], maxlen=int(RATE_WINDOW) + 2)
        self.port: int | None = None

    def sample(self) -> None:
        """Snapshot the counters; the broker calls this every second, served or not, because
        GET_CONSUME_STATS reports :meth:`consumer_tps` too."""
        self._snapshots.append(_Snapshot(self.stats))

    def consumer_tps(self, group: str, topic: str) -> float:
        """``rocketmq_consumer_tps`` of ``group`` on ``topic``: messages pulled per second over
        the window, the figure ``mqadmin consumerProgress`` and the dashboard show as well."""
        elapsed, base, now = self._window()
        key = (group, topic)
        return (now.got.get(key, 0) - base.got.get(key, 0)) / elapsed

    async def start(self, host: str | None, port: int) -> int:
        self._server = await asyncio.start_server(self._serve, host, port, reuse_address=True)
        self.port = int(self._server.sockets[0].getsockname()[1])
        log.info("metrics on http://%s:%d/metrics", host or "0.0.0.0", self.port)
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await answer_http(reader, writer, self.render)

    # -- rendering --------------------------------------------------------------------------

    def render(self) -> str:
        out = _Text()
        base_labels = {"cluster": self.config.broker_cluster_name, "broker": self.config.broker_name}
        self._throughput(out, base_labels)
        self._groups(out)
        self._latency(out, base_labels)
        self._reliability(out, base_labels)
        self._replication(out, base_labels)
        return out.text()

    def _replication(self, out: _Text, labels: dict[str, str]) -> None:
        """rocketmq-exporter's gauge: how far each slave of this master is behind, in bytes."""
        name = "rocketmq_broker_commitlog_diff"
        out.header(name, "gauge", "brokerCommitLogDiffGauge")
        for address, lag in self.slave_lag():
            out.sample(name, {**labels, "brokerIP": address}, lag)

    def _reliability(self, out: _Text, labels: dict[str, str]) -> None:
        """Disk-full refusals, messages retention took before they were consumed, and peers
        dropped for going over a connection limit."""
        store = self.store
        stats = store.stats
        out.header(
            "rocketmq_store_disk_full", "gauge", "1 while the store refuses puts for lack of disk space"
        )
        out.sample("rocketmq_store_disk_full", labels, 1 if store.disk_full else 0)
        out.header("rocketmq_store_disk_used_ratio", "gauge", "Fraction of the commit-log disk in use")
        out.sample("rocketmq_store_disk_used_ratio", labels, float(stats.disk_used_ratio))
        name = "rocketmq_store_put_refused_disk_full_total"
        out.header(name, "counter", "Puts refused because the disk was full")
        out.sample(name, labels, stats.put_refused_disk_full)
        name = "rocketmq_store_unconsumed_messages_deleted_total"
        out.header(
            name,
            "counter",
            "Messages some consumer group (or no group at all) had not consumed when retention "
            "deleted their commit-log file, per topic",
        )
        for topic, count in sorted(stats.unconsumed_deleted_by_topic.items()):
            out.sample(name, {**labels, "topic": topic}, count)
        name = "rocketmq_store_index_missed_keys_total"
        out.header(name, "counter", "Message keys left out of the index for lack of disk space")
        out.sample(name, labels, store.index.missed_keys if store.index is not None else 0)
        name = "rocketmq_remoting_connections_dropped_total"
        out.header(name, "counter", "Connections refused or dropped for going over a limit")
        out.sample(name, labels, self.connections_dropped())

    def _window(self) -> tuple[float, _Snapshot, _Snapshot]:
        now = _Snapshot(self.stats)
        base = next((s for s in self._snapshots if now.at - s.at <= RATE_WINDOW), self._snapshots[-1])
        return max(1e-9, now.at - base.at), base, now

    def _throughput(self, out: _Text, labels: dict[str, str]) -> None:
        store = self.store
        elapsed, base, now = self._window()

        def rate(current: dict[_K, int], previous: dict[_K, int], key: _K) -> float:
            return (current.get(key, 0) - previous.get(key, 0)) / elapsed

        out.header("rocketmq_broker_tps", "gauge", "BrokerPutNums")
        out.sample("rocketmq_broker_tps", labels, (sum(now.put.values()) - sum(base.put.values())) / elapsed)
        out.header("rocketmq_broker_qps", "gauge", "BrokerGetNums")
        out.sample("rocketmq_broker_qps", labels, (sum(now.got.values()) - sum(base.got.values())) / elapsed)
        topics = sorted(set(now.put) | set(self.topics.topics))
        out.header("rocketmq_producer_tps", "gauge", "TopicPutNums")
        for topic in topics:
            out.sample("rocketmq_producer_tps", {**labels, "topic": topic}, rate(now.put, base.put, topic))
        out.header("rocketmq_producer_message_size", "gauge", "TopicPutMessageSize")
        for topic in topics:
            out.sample(
                "rocketmq_producer_message_size",
                {**labels, "topic": topic},
                rate(now.put_bytes, base.put_bytes, topic),
            )
        out.header("rocketmq_producer_offset", "counter", "TopicOffset")
        for topic in topics:
            config = self.topics.get(topic)
            queues = range(config.write_queue_nums) if config is not None else store.queue_ids(topic)
            out.sample(
                "rocketmq_producer_offset",
                {**labels, "topic": topic},
                sum(store.get_max_offset(topic, q) for q in queues),
            )
        pairs = sorted(now.got)
        out.header("rocketmq_consumer_tps", "gauge", "GroupGetNums")
        for group, topic in pairs:
            out.sample(
                "rocketmq_consumer_tps",
                {**labels, "topic": topic, "group": group},
                rate(now.got, base.got, (group, topic)),
            )
        out.header("rocketmq_consumer_message_size", "gauge", "GroupGetMessageSize")
        for group, topic in pairs:
            out.sample(
                "rocketmq_consumer_message_size",
                {**labels, "topic": topic, "group": group},
                rate(now.got_bytes, base.got_bytes, (group, topic)),
            )

    def _groups(self, out: _Text) -> None:
        """Committed offsets and lag per group and topic; retry and dead-letter lag apart."""
        store = self.store
        offsets = self.offsets
        lags: list[tuple[str, str, int, int]] = []  # group, topic, committed, lag
        groups = set(self.clients.consumers)
        for key in sorted(offsets.table):
            topic, _, group = key.rpartition("@")
            if not topic or group.startswith(SYSTEM_GROUP_PREFIX):
                continue
            groups.add(group)
            queues = offsets.table[key]
            lag = sum(max(0, store.get_max_offset(topic, q) - committed) for q, committed in queues.items())
            lags.append((group, topic, sum(queues.values()), lag))
        dead: list[tuple[str, str, int]] = []
        for group in sorted(groups):
            dlq = dlq_topic(group)
            config = self.topics.get(dlq)
            if config is not None:
                dlq_offsets = offsets.queues_of(group, dlq)
                lag = sum(
                    max(0, store.get_max_offset(dlq, q) - dlq_offsets.get(q, 0))
                    for q in range(config.read_queue_nums)
                )
                dead.append((group, dlq, lag))

        def group_labels(group: str, topic: str) -> dict[str, object]:
            info = self.clients.consumer_group(group)
            return {
                "group": group,
                "topic": topic,
                "countOfOnlineConsumers": len(info.channels) if info is not None else 0,
                "msgModel": info.message_model.value if info is not None else "",
            }

        base = {"cluster": self.config.broker_cluster_name, "broker": self.config.broker_name}
        out.header("rocketmq_consumer_offset", "counter", "GroupOffset")
        for group, topic, committed, _lag in lags:
            out.sample("rocketmq_consumer_offset", {**base, "topic": topic, "group": group}, committed)
        out.header("rocketmq_group_diff", "gauge", "GroupDiff")
        for group, topic, _committed, lag in lags:
            if not is_retry_topic(topic) and not is_dlq_topic(topic):
                out.sample("rocketmq_group_diff", group_labels(group, topic), lag)
        out.header("rocketmq_group_retrydiff", "gauge", "GroupRetryDiff")
        for group, topic, _committed, lag in lags:
            if is_retry_topic(topic):
                out.sample("rocketmq_group_retrydiff", group_labels(group, topic), lag)
        out.header("rocketmq_group_dlqdiff", "gauge", "GroupDLQDiff")
        for group, topic, lag in dead:
            out.sample("rocketmq_group_dlqdiff", group_labels(group, topic), lag)

    def _latency(self, out: _Text, labels: dict[str, str]) -> None:
        stats = self.store.stats
        buckets = stats.put_latency_buckets
        runtime_labels = {
            "cluster": labels["cluster"],
            "brokerIP": self.config.broker_addr,
            "brokerHost": labels["broker"],
        }
        for label, count in zip(PUT_LATENCY_LABELS, buckets, strict=True):
            name = f"rocketmq_brokeruntime_pmdt_{label}"
            out.header(name, "gauge", f"PutMessageDistributeTime {label}")
            out.sample(name, runtime_labels, count)
        hist = "rocketmq_broker_put_latency_seconds"
        out.header(hist, "histogram", "Time to append a message to the store")
        cumulative = 0
        for bound, count in zip(PUT_LATENCY_BUCKETS_MS, buckets, strict=False):
            cumulative += count
            out.sample(f"{hist}_bucket", {**labels, "le": f"{bound / 1000:g}"}, cumulative)
        out.sample(f"{hist}_bucket", {**labels, "le": "+Inf"}, stats.put_calls)
        out.sample(f"{hist}_sum", labels, stats.put_latency_total_ns / 1e9)
        out.sample(f"{hist}_count", labels, stats.put_calls)


_K = TypeVar("_K")
