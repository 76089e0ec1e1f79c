"""The controller's metrics, served in the Prometheus text format on
``metricsPromExporterHost:metricsPromExporterPort`` when ``metricsExporterType=PROM`` (off by
default, as in Apache RocketMQ 5.3's ``ControllerMetricsManager``).

Apache's instruments, under the names its OpenTelemetry Prometheus exporter (1.29) gives them,
each with Apache's labels ``address``, ``group`` and ``peer_id`` (and ``metricsLabel``'s
``k:v`` pairs, and ``aggregation="delta"`` with ``metricsInDelta``):

* ``role``: this replica's Raft role, 0 unknown, 1 candidate, 2 follower, 3 leader.
* ``active_broker_num{cluster,broker_set}``: brokers heartbeating to this replica.
* ``request_total{request_type,request_handle_status}``: requests handled (``success``; or
  ``failed``/``timeout`` when the handler failed, a Raft commit included).
* ``request_latency_microseconds{request_type}``: histogram, Apache's buckets (1 us to 10 s).
* ``dledger_op_total{dledger_operation,dLedger_operation_status}`` and
  ``dledger_op_latency_microseconds{dledger_operation}``: the leader's appends to the replicated
  log (ours is Raft by PySyncObj; the name is Apache's).
* ``election_total{cluster,broker_set,election_result}``: elections, as
  ``new_master_elected``, ``keep_current_master`` or ``no_master_elected``.
* ``dledger_disk_usage_bytes``: the size of ``controllerStorePath``.

Ours, for what Apache's metrics leave out (the replicated state, so every replica reports
it; labels ``cluster`` and ``broker_set`` as Apache's):

* ``rocketmq_controller_leader``: 1 while this replica leads and schedules requests.
* ``rocketmq_controller_raft_term``: its Raft term.
* ``rocketmq_controller_broker_sets``: broker groups (broker names) known.
* ``rocketmq_controller_brokers{cluster,broker_set}``: broker ids registered in each group.
* ``rocketmq_controller_master_broker_id`` (-1: none), ``rocketmq_controller_master_alive``,
  ``rocketmq_controller_master_epoch``, ``rocketmq_controller_sync_state_set_epoch``,
  ``rocketmq_controller_sync_state_set_size``: each group's master and SyncStateSet.
"""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from aiorocketmq.protocol.codes import ResponseCode
from aiorocketmq.protocol.controller import ControllerRequestCode, ControllerResponseCode
from aiorocketmq.protocol.prometheus import MetricsEndpoint, PromText

from .config import JRAFT_CONTROLLER, ControllerSettings

if TYPE_CHECKING:
    from .manager import ControllerManager

log = logging.getLogger("controller")

PROM = "PROM"
EXPORTER_TYPES = ("DISABLE", "OTLP_GRPC", "PROM", "LOG")

#: Apache's ``RequestType``: the label value of each request code.
REQUEST_TYPES: dict[int, str] = {
    ControllerRequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: "CONTROLLER_ALTER_SYNC_STATE_SET",
    ControllerRequestCode.CONTROLLER_ELECT_MASTER: "CONTROLLER_ELECT_MASTER",
    ControllerRequestCode.CONTROLLER_REGISTER_BROKER: "CONTROLLER_REGISTER_BROKER",
    ControllerRequestCode.CONTROLLER_GET_REPLICA_INFO: "CONTROLLER_GET_REPLICA_INFO",
    ControllerRequestCode.CONTROLLER_GET_METADATA_INFO: "CONTROLLER_GET_METADATA_INFO",
    ControllerRequestCode.CONTROLLER_GET_SYNC_STATE_DATA: "CONTROLLER_GET_SYNC_STATE_DATA",
    ControllerRequestCode.GET_BROKER_EPOCH_CACHE: "CONTROLLER_GET_BROKER_EPOCH_CACHE",
    ControllerRequestCode.NOTIFY_BROKER_ROLE_CHANGED: "CONTROLLER_NOTIFY_BROKER_ROLE_CHANGED",
    ControllerRequestCode.BROKER_HEARTBEAT: "CONTROLLER_BROKER_HEARTBEAT",
    ControllerRequestCode.UPDATE_CONTROLLER_CONFIG: "CONTROLLER_UPDATE_CONTROLLER_CONFIG",
    ControllerRequestCode.GET_CONTROLLER_CONFIG: "CONTROLLER_GET_CONTROLLER_CONFIG",
    ControllerRequestCode.CLEAN_BROKER_DATA: "CONTROLLER_CLEAN_BROKER_DATA",
    ControllerRequestCode.CONTROLLER_GET_NEXT_BROKER_ID: "CONTROLLER_GET_NEXT_BROKER_ID",
    ControllerRequestCode.CONTROLLER_APPLY_BROKER_ID: "CONTROLLER_APPLY_BROKER_ID",
}

SUCCESS, FAILED, TIMEOUT = "success", "failed", "timeout"
NEW_MASTER_ELECTED = "new_master_elected"
KEEP_CURRENT_MASTER = "keep_current_master"
NO_MASTER_ELECTED = "no_master_elected"

#: Apache's latency view: 1 us .. 10 s.
LATENCY_BUCKETS_US: tuple[float, ...] = (
    *(unit * n for unit in (1.0, 1e3) for n in (1, 3, 5, 10, 30, 50, 100, 300, 500)),
    *(1e6 * n for n in (1, 3, 5, 10)),
)


def election_result(code: int) -> str | None:
    """Apache's ``election_result`` of an election's response code (None: not counted)."""
    if code == ResponseCode.SUCCESS:
        return NEW_MASTER_ELECTED
    if code == ControllerResponseCode.CONTROLLER_MASTER_STILL_EXIST:
        return KEEP_CURRENT_MASTER
    if code in (
        ControllerResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE,
        ControllerResponseCode.CONTROLLER_ELECT_MASTER_FAILED,
    ):
        return NO_MASTER_ELECTED
    return None


@dataclass
class Histogram:
    bounds: tuple[float, ...] = LATENCY_BUCKETS_US
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.bounds)

    def observe(self, value: float) -> None:
        index = bisect.bisect_left(self.bounds, value)
        if index < len(self.counts):
            self.counts[index] += 1
        self.total += value
        self.count += 1

    def write(self, out: PromText, name: str, labels: dict[str, str]) -> None:
        cumulative = 0
        for bound, count in zip(self.bounds, self.counts, strict=True):
            cumulative += count
            out.sample(f"{name}_bucket", {**labels, "le": f"{bound:g}"}, cumulative)
        out.sample(f"{name}_bucket", {**labels, "le": "+Inf"}, self.count)
        out.sample(f"{name}_sum", labels, self.total)
        out.sample(f"{name}_count", labels, self.count)


def _tree_size(path: Path) -> int | None:
    if not path.exists():
        return None
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


#: Apache's role values by PySyncObj's states (follower 0, candidate 1, leader 2).
ROLE_VALUES = {0: 2, 1: 1, 2: 3}


class ControllerMetrics:
    """Counters kept by one controller replica, rendered on scrape."""

    def __init__(self, settings: ControllerSettings, labels: dict[str, str]) -> None:
        self.settings = settings
        self.labels = dict(labels)
        for pair in settings.metrics_label.split(","):
            if not pair.strip():
                continue
            key, sep, value = pair.partition(":")
            if not sep or not key.strip() or ":" in value:
                log.warning("metrics label is not valid: %s", pair)
                continue
            self.labels[key.strip()] = value.strip()
        if settings.metrics_in_delta:
            self.labels["aggregation"] = "delta"
        self.requests: dict[tuple[str, str], int] = {}
        self.request_latency: dict[str, Histogram] = {}
        self.raft_ops: dict[tuple[str, str], int] = {}
        self.raft_latency: dict[str, Histogram] = {}
        self.elections: dict[tuple[str, str, str], int] = {}
        self.manager: ControllerManager | None = None
        self.endpoint: MetricsEndpoint | None = None
        #: Set once :meth:`start` serves: where.
        self.port: int | None = None

    @classmethod
    def for_manager(cls, manager: ControllerManager) -> ControllerMetrics:
        settings = manager.settings
        if settings.controller_type == JRAFT_CONTROLLER:
            address = manager.self_peer.raft_address
        else:
            address = manager.self_peer.address
        metrics = cls(settings, {"address": address, "group": settings.group, "peer_id": manager.self_id})
        metrics.manager = manager
        return metrics

    # -- recording ------------------------------------------------------------------------

    def request(self, code: int, status: str, elapsed_us: float | None) -> None:
        kind = REQUEST_TYPES.get(code, str(code))
        key = (kind, status)
        self.requests[key] = self.requests.get(key, 0) + 1
        if elapsed_us is not None:
            hist = self.request_latency.get(kind)
            if hist is None:
                hist = self.request_latency[kind] = Histogram()
            hist.observe(elapsed_us)

    def raft_op(self, operation: str, status: str, elapsed_us: float | None) -> None:
        key = (operation, status)
        self.raft_ops[key] = self.raft_ops.get(key, 0) + 1
        if elapsed_us is not None:
            hist = self.raft_latency.get(operation)
            if hist is None:
                hist = self.raft_latency[operation] = Histogram()
            hist.observe(elapsed_us)

    def election(self, cluster: str | None, broker_set: str | None, code: int) -> None:
        result = election_result(code)
        if result is None:
            return
        key = (cluster or "", broker_set or "", result)
        self.elections[key] = self.elections.get(key, 0) + 1

    # -- serving --------------------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        return self.settings.metrics_exporter_type.strip().upper() == PROM

    async def start(self) -> int | None:
        """Serve ``/metrics`` when ``metricsExporterType=PROM``; a port that cannot be bound is
        logged and the controller runs on without it (as the broker's endpoint)."""
        kind = self.settings.metrics_exporter_type.strip().upper()
        if kind in ("", "DISABLE"):
            return None
        if kind != PROM:
            log.warning(
                "metricsExporterType=%s is not supported by this controller (only PROM): no metrics exported",
                self.settings.metrics_exporter_type,
            )
            return None
        host = self.settings.metrics_prom_exporter_host.strip() or "0.0.0.0"
        self.endpoint = MetricsEndpoint(self.render, name="controller metrics")
        try:
            self.port = await self.endpoint.start(host, self.settings.metrics_prom_exporter_port)
        except OSError as exc:
            log.error(
                "cannot serve controller metrics on %s:%d: %s",
                host,
                self.settings.metrics_prom_exporter_port,
                exc,
            )
            self.endpoint = None
            return None
        return self.port

    async def stop(self) -> None:
        if self.endpoint is not None:
            await self.endpoint.stop()
            self.endpoint = None

    # -- rendering ------------------------------------------------------------------------

    def render(self) -> str:
        out = PromText()
        base = self.labels
        manager = self.manager
        out.header("role", "gauge", "role of current node")
        role = 0
        if manager is not None and manager.raft is not None:
            role = ROLE_VALUES.get(manager.raft_role, 0)
        out.sample("role", base, role)

        out.header("dledger_disk_usage_bytes", "gauge", "disk usage of dledger")
        size = _tree_size(self.settings.store_dir)
        if size is not None:
            out.sample("dledger_disk_usage_bytes", base, size)

        out.header("active_broker_num", "gauge", "now active brokers num")
        if manager is not None:
            for cluster, per in sorted(manager.heartbeats.active_brokers_num().items()):
                for broker_set, num in sorted(per.items()):
                    out.sample(
                        "active_broker_num", {**base, "cluster": cluster, "broker_set": broker_set}, num
                    )

        out.header("request_total", "counter", "total request num")
        for (kind, status), count in sorted(self.requests.items()):
            labels = {**base, "request_type": kind, "request_handle_status": status}
            out.sample("request_total", labels, count)
        out.header("request_latency_microseconds", "histogram", "request latency")
        for kind, hist in sorted(self.request_latency.items()):
            hist.write(out, "request_latency_microseconds", {**base, "request_type": kind})

        out.header("dledger_op_total", "counter", "total dledger operation num")
        for (operation, status), count in sorted(self.raft_ops.items()):
            labels = {**base, "dledger_operation": operation, "dLedger_operation_status": status}
            out.sample("dledger_op_total", labels, count)
        out.header("dledger_op_latency_microseconds", "histogram", "dledger operation latency")
        for operation, hist in sorted(self.raft_latency.items()):
            hist.write(out, "dledger_op_latency_microseconds", {**base, "dledger_operation": operation})

        out.header("election_total", "counter", "total elect num")
        for (cluster, broker_set, result), count in sorted(self.elections.items()):
            labels = {**base, "cluster": cluster, "broker_set": broker_set, "election_result": result}
            out.sample("election_total", labels, count)

        if manager is not None:
            self._state(out, manager)
        return out.text()

    def _state(self, out: PromText, manager: ControllerManager) -> None:
        base = self.labels
        out.header("rocketmq_controller_leader", "gauge", "1 while this replica leads and schedules requests")
        out.sample("rocketmq_controller_leader", base, 1 if manager.is_leader else 0)
        out.header("rocketmq_controller_raft_term", "gauge", "this replica's Raft term")
        out.sample(
            "rocketmq_controller_raft_term", base, manager.raft.term if manager.raft is not None else 0
        )
        groups = manager.group_states()
        out.header("rocketmq_controller_broker_sets", "gauge", "broker groups the controllers know")
        out.sample("rocketmq_controller_broker_sets", base, len(groups))
        families: list[tuple[str, str, Callable[[GroupState], int]]] = [
            ("rocketmq_controller_brokers", "broker ids registered in the group", lambda g: g.brokers),
            (
                "rocketmq_controller_master_broker_id",
                "the group's master broker id (-1: none)",
                lambda g: -1 if g.master_broker_id is None else g.master_broker_id,
            ),
            (
                "rocketmq_controller_master_alive",
                "1 while the group has a master that heartbeats to this replica",
                lambda g: 1 if g.master_alive else 0,
            ),
            ("rocketmq_controller_master_epoch", "the group's master epoch", lambda g: g.master_epoch),
            (
                "rocketmq_controller_sync_state_set_epoch",
                "the group's SyncStateSet epoch",
                lambda g: g.sync_state_set_epoch,
            ),
            (
                "rocketmq_controller_sync_state_set_size",
                "replicas in the group's SyncStateSet",
                lambda g: g.sync_state_set_size,
            ),
        ]
        for name, help_text, value in families:
            out.header(name, "gauge", help_text)
            for group in groups:
                out.sample(
                    name, {**base, "cluster": group.cluster, "broker_set": group.broker_set}, value(group)
                )


@dataclass(frozen=True)
class GroupState:
    """One broker group as the replicated state holds it (read under the Raft lock)."""

    cluster: str
    broker_set: str
    brokers: int
    master_broker_id: int | None
    master_alive: bool
    master_epoch: int
    sync_state_set_epoch: int
    sync_state_set_size: int
