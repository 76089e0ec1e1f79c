"""Controller settings, under Apache RocketMQ 5.3's ``ControllerConfig`` (and ``JraftConfig``)
key names, so an existing ``controller.conf`` (or a name server's file with
``enableControllerInNamesrv=true``) keeps working.

Where a controller serves and where its replicas talk Raft:

* ``controllerType=DLedger`` (the default): ``controllerDLegerPeers`` is
  ``n0-127.0.0.1:9878;n1-127.0.0.1:9868;...`` and ``controllerDLegerSelfId`` names this
  replica. As in Apache, each peer's address is where that controller *serves* brokers and
  ``mqadmin`` (the broker's ``controllerAddr``); our Raft (PySyncObj) needs a port of its
  own, given by ``controllerRaftPeers`` (ours: same ``id-host:port`` list) or, when absent,
  the peer's port plus ``controllerRaftPortOffset`` (ours, default 1000) on the same host.
* ``controllerType=jRaft``: as Apache's JRaft controller, ``jRaftInitConf`` lists the Raft
  addresses (``host:port,host:port,...``), ``jRaftServerId`` is this replica's, and
  ``jRaftControllerRPCAddr`` the controllers' serving addresses in the same order.

Either way the Raft is ours (PySyncObj); its journal and snapshot live in
``controllerStorePath`` (default ``~/<controllerType>Controller``), so a restarted replica
recovers its state. ``listenPort`` is accepted (Apache's default 19876) but, as in Apache, a
controller serves on its own peer address.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import AliasChoices, Field, field_validator

from aiorocketmq.protocol.settings import ConfigError, ServerLimitSettings, TlsSettings

DLEDGER_CONTROLLER = "DLedger"
JRAFT_CONTROLLER = "jRaft"


@dataclass(frozen=True)
class Peer:
    """One controller replica: its id, where it serves requests, where it talks Raft."""

    id: str
    address: str
    raft_address: str


def _split_address(address: str, what: str) -> tuple[str, int]:
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{what}: {address!r} is not host:port")
    return host, int(port)


class ControllerSettings(TlsSettings, ServerLimitSettings):
    #: As Apache: ``$ROCKETMQ_HOME`` unless set.
    rocketmq_home: str = Field(
        default_factory=lambda: os.environ.get("ROCKETMQ_HOME", ""), alias="rocketmqHome"
    )
    #: As Apache: under the user's home, spelt out (getControllerConfig shows it).
    config_store_path: str = Field(
        default_factory=lambda: str(Path.home() / "controller" / "controller.properties"),
        alias="configStorePath",
    )
    controller_type: str = Field(DLEDGER_CONTROLLER, alias="controllerType")
    #: Milliseconds between scans for brokers whose heartbeats stopped.
    scan_not_active_broker_interval: int = Field(5_000, alias="scanNotActiveBrokerInterval", gt=0)
    controller_thread_pool_nums: int = Field(16, alias="controllerThreadPoolNums", ge=1)
    controller_request_thread_pool_queue_capacity: int = Field(
        50_000, alias="controllerRequestThreadPoolQueueCapacity", ge=1
    )
    controller_dleger_group: str | None = Field(None, alias="controllerDLegerGroup")
    controller_dleger_peers: str | None = Field(None, alias="controllerDLegerPeers")
    controller_dleger_self_id: str | None = Field(None, alias="controllerDLegerSelfId")
    mapped_file_size: int = Field(1024 * 1024 * 1024, alias="mappedFileSize")
    controller_store_path: str = Field("", alias="controllerStorePath")
    elect_master_max_retry_count: int = Field(3, alias="electMasterMaxRetryCount", ge=1)
    #: Whether a broker outside the SyncStateSet may be elected (it may lack messages).
    enable_elect_unclean_master: bool = Field(False, alias="enableElectUncleanMaster")
    #: Apache's field is ``isProcessReadEvent`` (so getControllerConfig lists that name), its
    #: setter ``setProcessReadEvent`` (so its files and updates say ``processReadEvent``): both read.
    process_read_event: bool = Field(
        False,
        alias="isProcessReadEvent",
        validation_alias=AliasChoices("processReadEvent", "isProcessReadEvent"),
    )
    #: Whether the brokers of a group are told (NOTIFY_BROKER_ROLE_CHANGED) of a new master.
    notify_broker_role_changed: bool = Field(True, alias="notifyBrokerRoleChanged")
    #: Milliseconds between the leader's scans for groups whose master is not alive.
    scan_inactive_master_interval: int = Field(5_000, alias="scanInactiveMasterInterval", gt=0)
    metrics_exporter_type: str = Field("DISABLE", alias="metricsExporterType")
    metrics_grpc_exporter_target: str = Field("", alias="metricsGrpcExporterTarget")
    metrics_grpc_exporter_header: str = Field("", alias="metricsGrpcExporterHeader")
    metric_grpc_exporter_time_out_in_mills: int = Field(3_000, alias="metricGrpcExporterTimeOutInMills")
    metric_grpc_exporter_interval_in_mills: int = Field(60_000, alias="metricGrpcExporterIntervalInMills")
    metric_logging_exporter_interval_in_mills: int = Field(
        10_000, alias="metricLoggingExporterIntervalInMills"
    )
    metrics_prom_exporter_port: int = Field(5557, alias="metricsPromExporterPort")
    metrics_prom_exporter_host: str = Field("", alias="metricsPromExporterHost")
    metrics_label: str = Field("", alias="metricsLabel")
    metrics_in_delta: bool = Field(False, alias="metricsInDelta")
    config_black_list: str = Field("configBlackList;configStorePath", alias="configBlackList")
    # Apache's JraftConfig
    jraft_election_timeout_ms: int = Field(1000, alias="jRaftElectionTimeoutMs", gt=0)
    jraft_scan_wait_timeout_ms: int = Field(1000, alias="jRaftScanWaitTimeoutMs")
    jraft_snapshot_interval_secs: int = Field(3600, alias="jRaftSnapshotIntervalSecs")
    jraft_group_id: str = Field("jRaft-Controller", alias="jRaftGroupId")
    jraft_server_id: str = Field("localhost:9880", alias="jRaftServerId")
    jraft_init_conf: str = Field("localhost:9880,localhost:9881,localhost:9882", alias="jRaftInitConf")
    jraft_controller_rpc_addr: str = Field(
        "localhost:9770,localhost:9771,localhost:9772", alias="jRaftControllerRPCAddr"
    )
    # NettyServerConfig
    listen_port: int = Field(19876, alias="listenPort", ge=0, le=65535)
    bind_address: str = Field("0.0.0.0", alias="bindAddress", min_length=1)
    # Ours
    controller_raft_peers: str = Field("", alias="controllerRaftPeers")
    controller_raft_port_offset: int = Field(1000, alias="controllerRaftPortOffset")

    @field_validator("controller_type", mode="before")
    @classmethod
    def _type(cls, value: object) -> object:
        if isinstance(value, str):
            text = value.strip()
            for known in (DLEDGER_CONTROLLER, JRAFT_CONTROLLER):
                if text.lower() == known.lower():
                    return known
            raise ValueError(f"controllerType must be {DLEDGER_CONTROLLER} or {JRAFT_CONTROLLER}")
        return value

    @property
    def store_dir(self) -> Path:
        path = self.controller_store_path.strip() or f"~/{self.controller_type}Controller"
        return Path(path).expanduser()

    @property
    def group(self) -> str:
        if self.controller_type == JRAFT_CONTROLLER:
            return self.jraft_group_id
        return self.controller_dleger_group or ""

    def peers(self) -> tuple[list[Peer], str]:
        """Every replica and this one's id; :class:`ConfigError` when they cannot be read."""
        if self.controller_type == JRAFT_CONTROLLER:
            return self._jraft_peers()
        text = (self.controller_dleger_peers or "").strip()
        if not text:
            raise ConfigError("Attribute value controllerDLegerPeers of ControllerConfig is null or empty")
        self_id = (self.controller_dleger_self_id or "").strip()
        if not self_id:
            raise ConfigError("Attribute value controllerDLegerSelfId of ControllerConfig is null or empty")
        served = _id_list(text, "controllerDLegerPeers")
        raft: dict[str, str] = {}
        if self.controller_raft_peers.strip():
            raft = dict(_id_list(self.controller_raft_peers, "controllerRaftPeers"))
            missing = [pid for pid, _ in served if pid not in raft]
            if missing:
                raise ConfigError(f"controllerRaftPeers has no address for {', '.join(missing)}")
        peers = []
        for pid, address in served:
            if pid in raft:
                raft_address = raft[pid]
            else:
                host, port = _split_address(address, "controllerDLegerPeers")
                raft_port = port + self.controller_raft_port_offset
                if not 0 < raft_port < 65536:
                    raise ConfigError(
                        f"controllerRaftPortOffset puts {pid}'s Raft port out of range ({raft_port})"
                    )
                raft_address = f"{host}:{raft_port}"
            peers.append(Peer(pid, address, raft_address))
        if self_id not in {p.id for p in peers}:
            raise ConfigError(f"controllerDLegerSelfId {self_id!r} is not in controllerDLegerPeers")
        return peers, self_id

    def _jraft_peers(self) -> tuple[list[Peer], str]:
        rafts = [a.strip() for a in self.jraft_init_conf.split(",") if a.strip()]
        rpcs = [a.strip() for a in self.jraft_controller_rpc_addr.split(",") if a.strip()]
        if not rafts:
            raise ConfigError("Attribute value jRaftInitConf of ControllerConfig is null or empty")
        if not self.jraft_server_id.strip():
            raise ConfigError("Attribute value jRaftServerId of ControllerConfig is null or empty")
        if len(rpcs) != len(rafts):
            raise ConfigError("jRaftControllerRPCAddr must list one address per jRaftInitConf peer")
        for address in rafts + rpcs:
            _split_address(address, "jRaftInitConf/jRaftControllerRPCAddr")
        self_id = self.jraft_server_id.strip()
        if self_id not in rafts:
            raise ConfigError(f"jRaftServerId {self_id!r} is not in jRaftInitConf")
        return [Peer(raft, rpc, raft) for raft, rpc in zip(rafts, rpcs, strict=True)], self_id

    def black_list(self) -> set[str]:
        keys = {"configBlackList", "configStorePath", "rocketmqHome"}
        keys.update(k for k in self.config_black_list.split(";") if k)
        return keys


def _id_list(text: str, key: str) -> list[tuple[str, str]]:
    found = []
    for item in text.split(";"):
        item = item.strip()
        if not item:
            continue
        pid, sep, address = item.partition("-")
        if not sep or not pid:
            raise ConfigError(f"{key}: {item!r} is not id-host:port")
        _split_address(address, key)
        found.append((pid, address.strip()))
    ids = [pid for pid, _ in found]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{key} names a peer twice")
    return found
