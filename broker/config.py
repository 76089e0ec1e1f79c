"""Broker settings under RocketMQ's own key names (``broker.conf``).

Store settings (commit log, flush, index, retention) belong to :class:`aiorocketmq.broker.store.StoreConfig`;
the broker reads both from the same file, so an operator's existing ``broker.conf`` works as is.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, field_validator

from aiorocketmq.broker.store.config import DEFAULT_DELAY_LEVELS, parse_delay_levels
from aiorocketmq.protocol.codes import PERM_READ_WRITE, Perm
from aiorocketmq.protocol.message import local_ipv4
from aiorocketmq.protocol.settings import ConfigError, ServerLimitSettings, TlsSettings
from aiorocketmq.protocol.tls import ServerTls, default_permissive

_PERM_READ = int(Perm.READ)
_PERM_WRITE = int(Perm.WRITE)


#: The lines of controller-mode paths left to their defaults (not printed, as in Apache).
_UNSET_PATH_LINES = frozenset({"storePathBrokerIdentity=", "storePathEpochFile="})


class BrokerConfig(TlsSettings, ServerLimitSettings):
    """Broker-level settings (store settings live in ``StoreConfig``), RocketMQ's ``tls.*``
    keys, and the limits on client connections (:class:`ServerLimitSettings`)."""

    broker_cluster_name: str = Field("DefaultCluster", alias="brokerClusterName")
    broker_name: str = Field(default_factory=lambda: socket.gethostname(), alias="brokerName")
    broker_id: int = Field(0, alias="brokerId")
    namesrv_addr: str | None = Field(None, alias="namesrvAddr")
    listen_port: int = Field(10911, alias="listenPort")
    #: The address every port of the broker listens on (remoting, VIP, metrics); RocketMQ 5's
    #: ``bindAddress``. All interfaces by default, as RocketMQ.
    bind_address: str = Field("0.0.0.0", alias="bindAddress", min_length=1)
    broker_ip1: str = Field(default_factory=local_ipv4, alias="brokerIP1")
    store_path_root_dir: str = Field(str(Path.home() / "store"), alias="storePathRootDir")
    broker_permission: int = Field(PERM_READ_WRITE, alias="brokerPermission")
    auto_create_topic_enable: bool = Field(True, alias="autoCreateTopicEnable")
    auto_create_subscription_group: bool = Field(True, alias="autoCreateSubscriptionGroup")
    default_topic_queue_nums: int = Field(8, alias="defaultTopicQueueNums")
    cluster_topic_enable: bool = Field(True, alias="clusterTopicEnable")
    broker_topic_enable: bool = Field(True, alias="brokerTopicEnable")
    message_delay_level: str = Field(DEFAULT_DELAY_LEVELS, alias="messageDelayLevel")
    long_polling_enable: bool = Field(True, alias="longPollingEnable")
    short_polling_time_mills: int = Field(1000, alias="shortPollingTimeMills")
    notify_consumer_ids_changed_enable: bool = Field(True, alias="notifyConsumerIdsChangedEnable")
    transaction_time_out: int = Field(6000, alias="transactionTimeOut")
    transaction_check_max: int = Field(15, alias="transactionCheckMax")
    transaction_check_interval: int = Field(60_000, alias="transactionCheckInterval")
    register_name_server_period: int = Field(30_000, alias="registerNameServerPeriod")
    flush_consumer_offset_interval: int = Field(5000, alias="flushConsumerOffsetInterval")
    flush_delay_offset_interval: int = Field(10_000, alias="flushDelayOffsetInterval")
    channel_expired_timeout: int = Field(120_000, alias="channelExpiredTimeout")
    server_channel_max_idle_time_seconds: int = Field(120, alias="serverChannelMaxIdleTimeSeconds")
    client_housekeeping_interval: int = Field(10_000, alias="clientHousekeepingInterval")
    lock_max_live_time: int = Field(60_000, alias="rebalanceLockMaxLiveTime")
    region_id: str = Field("DefaultRegion", alias="regionId")
    trace_on: bool = Field(True, alias="traceOn")
    #: RocketMQ 5: RECALL_MESSAGE served (off by default, as in Apache); and whether a broker
    #: that refuses writes (``brokerPermission``) still takes recalls.
    recall_message_enable: bool = Field(False, alias="recallMessageEnable")
    allow_recall_when_broker_not_writeable: bool = Field(True, alias="allowRecallWhenBrokerNotWriteable")
    #: RocketMQ 5: LITE_PULL_MESSAGE (361) served; off, lite-pull consumers are refused.
    lite_pull_message_enable: bool = Field(True, alias="litePullMessageEnable")
    #: RocketMQ 5's cold-data flow control (broker/cold_data.py): the cold bytes a group may
    #: read between two resets (5 s) before it is slowed down, and all groups together.
    cg_cold_read_threshold: int = Field(3 * 1024 * 1024, alias="cgColdReadThreshold", ge=0)
    global_cold_read_threshold: int = Field(100 * 1024 * 1024, alias="globalColdReadThreshold", ge=0)
    #: RocketMQ 5: whether a topic may be made ``message.type=MIXED``.
    enable_mixed_message_type: bool = Field(False, alias="enableMixedMessageType")
    #: RocketMQ 5's server-side rebalance (QUERY_ASSIGNMENT): the mode of a topic and group
    #: no one set (PULL or POP), POP's default share, and whether the broker allocates at all
    #: (off, every client gets every queue).
    default_message_request_mode: Literal["PULL", "POP"] = Field("PULL", alias="defaultMessageRequestMode")
    default_pop_share_queue_num: int = Field(-1, alias="defaultPopShareQueueNum")
    server_load_balancer_enable: bool = Field(True, alias="serverLoadBalancerEnable")
    default_query_max_num: int = Field(32, alias="defaultQueryMaxNum")
    reject_transaction_message: bool = Field(False, alias="rejectTransactionMessage")
    metrics_prom_exporter_port: int = Field(5557, alias="metricsPromExporterPort")
    metrics_prom_exporter_enable: bool = Field(True, alias="metricsPromExporterEnable")
    #: RocketMQ's plain ACL: every request checked against ``plain_acl.yml``.
    acl_enable: bool = Field(False, alias="aclEnable")
    #: Where ``conf/plain_acl.yml`` and ``conf/acl/`` are (``$ROCKETMQ_HOME`` by default).
    rocketmq_home: str | None = Field(
        default_factory=lambda: os.environ.get("ROCKETMQ_HOME") or None, alias="rocketmqHome"
    )
    #: One ACL file instead of the defaults (RocketMQ's ``-Drocketmq.acl.plain.file``).
    acl_plain_file: str | None = Field(None, alias="rocketmq.acl.plain.file")
    #: Apache 5.3.3's ``AuthConfig`` key: JSON ``{"accessKey": .., "secretKey": ..}`` the broker
    #: signs its own requests with (to the name servers: ``broker.registration``).
    inner_client_authentication_credentials: str | None = Field(
        None, alias="innerClientAuthenticationCredentials", repr=False
    )
    #: ACL 2.0 (broker/auth/, docs/security.md), under Apache 5.3.3's ``AuthConfig`` keys:
    #: either switch on replaces ACL 1.0 (``aclEnable``), as RocketMQ 5.3 has only ACL 2.0.
    authentication_enabled: bool = Field(False, alias="authenticationEnabled")
    authorization_enabled: bool = Field(False, alias="authorizationEnabled")
    #: Where the users and ACLs live (``auth.json``); ``<storePathRootDir>/config`` when unset.
    auth_config_path: str | None = Field(None, alias="authConfigPath")
    #: JSON ``{"username": .., "password": ..}``: a super user created at start if absent.
    init_authentication_user: str | None = Field(None, alias="initAuthenticationUser", repr=False)
    #: Request codes (comma-separated) that skip authentication / authorization.
    authentication_whitelist: str | None = Field(None, alias="authenticationWhitelist")
    authorization_whitelist: str | None = Field(None, alias="authorizationWhitelist")
    #: Turn the ACL 1.0 accounts (plain_acl.yml) into users and ACLs at start.
    migrate_auth_from_v1_enabled: bool = Field(False, alias="migrateAuthFromV1Enabled")
    #: Apache's plug-in class names: accepted when blank or naming Apache's defaults (the only
    #: implementations here); the strategy and cache keys are accepted and have no effect.
    authentication_provider: str | None = Field(None, alias="authenticationProvider")
    authentication_metadata_provider: str | None = Field(None, alias="authenticationMetadataProvider")
    authentication_strategy: str | None = Field(None, alias="authenticationStrategy")
    authorization_provider: str | None = Field(None, alias="authorizationProvider")
    authorization_metadata_provider: str | None = Field(None, alias="authorizationMetadataProvider")
    authorization_strategy: str | None = Field(None, alias="authorizationStrategy")
    user_cache_max_num: int = Field(1000, alias="userCacheMaxNum")
    user_cache_expired_second: int = Field(600, alias="userCacheExpiredSecond")
    user_cache_refresh_second: int = Field(60, alias="userCacheRefreshSecond")
    acl_cache_max_num: int = Field(1000, alias="aclCacheMaxNum")
    acl_cache_expired_second: int = Field(600, alias="aclCacheExpiredSecond")
    acl_cache_refresh_second: int = Field(60, alias="aclCacheRefreshSecond")
    stateful_authentication_cache_max_num: int = Field(10000, alias="statefulAuthenticationCacheMaxNum")
    stateful_authentication_cache_expired_second: int = Field(
        60, alias="statefulAuthenticationCacheExpiredSecond"
    )
    stateful_authorization_cache_max_num: int = Field(10000, alias="statefulAuthorizationCacheMaxNum")
    stateful_authorization_cache_expired_second: int = Field(
        60, alias="statefulAuthorizationCacheExpiredSecond"
    )
    #: Create the message-trace topic (``msgTraceTopicName``, one queue) at start-up.
    trace_topic_enable: bool = Field(False, alias="traceTopicEnable")
    msg_trace_topic_name: str = Field("RMQ_SYS_TRACE_TOPIC", alias="msgTraceTopicName", min_length=1)
    #: Store replies (in ``<cluster>_REPLY_TOPIC``) besides pushing them to the requester.
    store_reply_message_enable: bool = Field(True, alias="storeReplyMessageEnable")
    #: Apache's filter-server count (``mqadmin exportConfigs`` reads it); this broker runs no
    #: filter servers: SQL92 and tags are evaluated in the broker itself.
    filter_server_nums: int = Field(0, alias="filterServerNums", ge=0)
    #: Consumers may subscribe with SQL92 expressions over message properties, evaluated here.
    enable_property_filter: bool = Field(False, alias="enablePropertyFilter")
    #: 5.x timer messages (TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS / __STARTDELIVERTIME).
    timer_wheel_enable: bool = Field(True, alias="timerWheelEnable")
    #: The furthest delivery time a timer message may ask for, in seconds from its arrival.
    timer_max_delay_sec: int = Field(3 * 24 * 3600, alias="timerMaxDelaySec", gt=0)
    #: The 5.x gRPC endpoint (broker/grpc/): RocketMQ 5 proxy's ``grpcServerPort``, served in
    #: the broker process as the proxy's "local" mode does.
    enable_grpc_server: bool = Field(True, alias="enableGrpcServer")
    grpc_server_port: int = Field(8081, alias="grpcServerPort", ge=0, le=65535)
    #: The proxy's ``tlsTestModeEnable`` (also under its system-property name): with
    #: ``tls.server.mode`` unset and no certificate, the gRPC port serves TLS with a
    #: self-signed certificate made at start beside plain text; off, plain text only.
    tls_test_mode_enable: bool = Field(
        True,
        alias="tlsTestModeEnable",
        validation_alias=AliasChoices("tlsTestModeEnable", "tls.test.mode.enable"),
    )
    #: The address slaves reach the HA port at (``haServerAddr``); ``brokerIP1`` when unset.
    broker_ip2: str | None = Field(None, alias="brokerIP2")
    #: Let the master steer slow consumers to a slave (``suggestWhichBrokerId``), and let a
    #: slave answer pulls as a master would.
    slave_read_enable: bool = Field(False, alias="slaveReadEnable")
    #: Always send the registration body in its compressed form (a large topic table is
    #: compressed anyway, see ``broker.registration``).
    compressed_register: bool = Field(False, alias="compressedRegister")
    #: The HA port's guards (ours; Apache has none, so all are off or generous by default and
    #: Apache's masters and slaves still pair with ours): the replication account a slave
    #: signs its handshake with (both set on master and slaves, or neither), TLS on the port
    #: (mutual with ``haTlsNeedClientAuth``; certificates default to ``tls.server.*``), the
    #: cap on connections, and the unread bytes a slave may leave for ``haWriteTimeout`` ms.
    #: See broker/ha/security.py and docs/broker.md.
    ha_auth_access_key: str | None = Field(None, alias="haAuthAccessKey")
    ha_auth_secret_key: str | None = Field(None, alias="haAuthSecretKey", repr=False)
    ha_tls_enable: bool = Field(False, alias="haTlsEnable")
    ha_tls_cert_path: str | None = Field(None, alias="haTlsCertPath")
    ha_tls_key_path: str | None = Field(None, alias="haTlsKeyPath")
    ha_tls_key_password: str | None = Field(None, alias="haTlsKeyPassword", repr=False)
    ha_tls_trust_cert_path: str | None = Field(None, alias="haTlsTrustCertPath")
    ha_tls_need_client_auth: bool = Field(False, alias="haTlsNeedClientAuth")
    ha_max_connections: int = Field(16, alias="haMaxConnections", ge=1)
    ha_write_buffer_limit: int = Field(1 << 20, alias="haWriteBufferLimit", ge=64 * 1024)
    ha_write_timeout: int = Field(10_000, alias="haWriteTimeout", ge=100)
    #: RocketMQ 5's controller mode (broker/replicas.py, docs/controller.md), under Apache
    #: 5.3.3's keys and defaults: the controllers assign the broker its id (``brokerId=-1``),
    #: elect the group's master and move the role on failure. ``controllerAddr`` is
    #: ``;``-separated (a domain name with ``fetchControllerAddrByDnsLookup``).
    enable_controller_mode: bool = Field(False, alias="enableControllerMode")
    controller_addr: str = Field("", alias="controllerAddr")
    fetch_controller_addr_by_dns_lookup: bool = Field(False, alias="fetchControllerAddrByDnsLookup")
    #: How long a controller waits for this broker's heartbeat before counting it dead (sent
    #: in each heartbeat), and how often heartbeats go (``brokerHeartbeatInterval``).
    controller_heart_beat_timeout_mills: int = Field(10_000, alias="controllerHeartBeatTimeoutMills", gt=0)
    broker_heartbeat_interval: int = Field(1000, alias="brokerHeartbeatInterval", gt=0)
    send_heartbeat_timeout_millis: int = Field(1000, alias="sendHeartbeatTimeoutMillis", gt=0)
    #: How often the group's state is read from the controller (a fallback to its
    #: notifications), the master checks its SyncStateSet, and the controller leader is looked up.
    sync_broker_metadata_period: int = Field(5000, alias="syncBrokerMetadataPeriod", gt=0)
    check_sync_state_set_period: int = Field(5000, alias="checkSyncStateSetPeriod", gt=0)
    sync_controller_metadata_period: int = Field(10_000, alias="syncControllerMetadataPeriod", gt=0)
    #: Lower is preferred when the controller elects a master.
    broker_election_priority: int = Field(2**31 - 1, alias="brokerElectionPriority")
    #: Apache's slave-acting-master mode (without controllers): accepted, not implemented here.
    enable_slave_acting_master: bool = Field(False, alias="enableSlaveActingMaster")
    broker_not_active_timeout_millis: int = Field(10_000, alias="brokerNotActiveTimeoutMillis", gt=0)
    sync_broker_member_group_period: int = Field(1000, alias="syncBrokerMemberGroupPeriod", gt=0)
    #: Apache's ``MessageStoreConfig`` keys of controller mode (read from the same file; our
    #: StoreConfig does not carry them): a send waits for every SyncStateSet member
    #: (``allAckInSyncStateSet``) or ``inSyncReplicas`` of them (at least
    #: ``minInSyncReplicas``, lowered with the SyncStateSet under ``enableAutoInSyncReplicas``);
    #: a new slave copies from the master's last file (``syncFromLastFile``); an
    #: ``asyncLearner`` never joins the SyncStateSet; a slave further than
    #: ``haMaxGapNotInSync`` bytes or ``haMaxTimeSlaveNotCatchup`` ms behind leaves it.
    all_ack_in_sync_state_set: bool = Field(False, alias="allAckInSyncStateSet")
    sync_from_last_file: bool = Field(False, alias="syncFromLastFile")
    async_learner: bool = Field(False, alias="asyncLearner")
    total_replicas: int = Field(1, alias="totalReplicas", ge=1)
    in_sync_replicas: int = Field(1, alias="inSyncReplicas", ge=1)
    min_in_sync_replicas: int = Field(1, alias="minInSyncReplicas", ge=1)
    enable_auto_in_sync_replicas: bool = Field(False, alias="enableAutoInSyncReplicas")
    ha_max_gap_not_in_sync: int = Field(256 * 1024 * 1024, alias="haMaxGapNotInSync", ge=0)
    ha_max_time_slave_not_catchup: int = Field(15_000, alias="haMaxTimeSlaveNotCatchup", gt=0)
    #: The broker-id files (``<storePathRootDir>/brokerIdentity`` and ``...-temp``) and the
    #: epoch file (``<storePathRootDir>/epochFileCheckpoint``) when unset.
    store_path_broker_identity: str | None = Field(None, alias="storePathBrokerIdentity")
    store_path_epoch_file: str | None = Field(None, alias="storePathEpochFile")

    @field_validator("message_delay_level")
    @classmethod
    def _valid_levels(cls, value: str) -> str:
        parse_delay_levels(value)
        return value

    @field_validator("namesrv_addr")
    @classmethod
    def _blank_is_none(cls, value: str | None) -> str | None:
        return value.strip() or None if value is not None else None

    def grpc_server_tls(self) -> ServerTls:
        """The gRPC port's TLS: Apache's proxy's default (TLS and plain text) unless
        ``tls.server.mode`` is set (:func:`~aiorocketmq.protocol.tls.default_permissive`);
        the remoting ports keep :meth:`server_tls`."""
        values = self.tls_values()
        test_mode = self.tls_test_mode_enable
        if "tls_test_mode_enable" not in self.model_fields_set and "tls.test.mode.enable" in values:
            test_mode = values["tls.test.mode.enable"].strip().lower() == "true"  # from tls.config.file
        try:
            return default_permissive(values, test_mode)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    @property
    def readable(self) -> bool:
        """``brokerPermission`` lets clients pull."""
        return bool(self.broker_permission & _PERM_READ)

    @property
    def writable(self) -> bool:
        """``brokerPermission`` lets clients send."""
        return bool(self.broker_permission & _PERM_WRITE)

    @property
    def broker_addr(self) -> str:
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def ha_listen_port(self) -> int:
        """The HA port: always ``listenPort + 1``, as RocketMQ's start-up sets it."""
        return self.listen_port + 1

    @property
    def ha_server_addr(self) -> str:
        return f"{self.broker_ip2 or self.broker_ip1}:{self.ha_listen_port}"

    @property
    def namesrv_addrs(self) -> list[str]:
        if not self.namesrv_addr:
            return []
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]

    @property
    def controller_addrs(self) -> list[str]:
        """``controllerAddr``'s addresses (``;``-separated)."""
        return [a.strip() for a in self.controller_addr.split(";") if a.strip()]

    def to_properties(self) -> str:
        """As the settings print, except the controller-mode paths left unset: Apache prints
        no line for a setting that is null, and these default to files under the store root."""
        lines = super().to_properties().splitlines()
        return "".join(f"{line}\n" for line in lines if line not in _UNSET_PATH_LINES)

    @property
    def broker_identity_path(self) -> Path:
        """Where controller mode keeps the broker id the controllers gave (Apache's
        ``storePathBrokerIdentity``); the file being written is beside it with ``-temp``."""
        if self.store_path_broker_identity:
            return Path(self.store_path_broker_identity)
        return Path(self.store_path_root_dir) / "brokerIdentity"

    @property
    def epoch_file_path(self) -> Path:
        """Apache's ``storePathEpochFile``: the master epochs and their commit-log start offsets."""
        if self.store_path_epoch_file:
            return Path(self.store_path_epoch_file)
        return Path(self.store_path_root_dir) / "epochFileCheckpoint"

    @property
    def delay_levels(self) -> list[int]:
        return parse_delay_levels(self.message_delay_level)

    @property
    def config_dir(self) -> Path:
        return Path(self.store_path_root_dir) / "config"
