"""The proxy's settings, read from Apache's own ``rmq-proxy.json`` under Apache's key names, so
an existing file works unchanged.

Read and used: ``proxyMode`` (``cluster``; ``local`` means the gRPC endpoint embedded in each
of our brokers, which ``mqbroker`` serves itself), ``namesrvAddr``, ``grpcServerPort``,
``remotingListenPort``,
``rocketMQClusterName``, ``proxyName``, ``maxMessageSize``, ``defaultInvisibleTimeMills``,
``tlsTestModeEnable``, ``tlsKeyPath`` and ``tlsCertPath``, and of Apache's AuthConfig (ACL 2.0,
read from the same file): ``authenticationEnabled``, ``authorizationEnabled``, their whitelists,
``innerClientAuthenticationCredentials``, ``userCacheRefreshSecond`` and
``aclCacheRefreshSecond``. Apache's other keys (thread pools, cache sizes ...) are accepted and
listed at start as not used; a key Apache does not know is refused, since it is most likely a
typing error.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from aiorocketmq.protocol.tls import ServerTls, default_permissive

#: Apache 5.3.3's ProxyConfig keys the proxy accepts without acting on them.
APACHE_KEYS = frozenset(
    [
        "regionId",
        "traceOn",
        "channelExpiredTimeout",
        "metricsPromExporterHost",
        "sendLatencyEnable",
        "messageDelayLevel",
        "metadataThreadPoolNums",
        "metadataThreadPoolQueueCapacity",
        "localProxyConnectTimeoutMs",
        "startDetectorEnable",
        "detectTimeout",
        "detectInterval",
        "remotingSendThreadPoolQueueCapacity",
        "remotingPullThreadPoolQueueCapacity",
        "remotingWaitTimeMillsInUpdateOffsetQueue",
        "proxyClusterName",
        "localServeAddr",
        "heartbeatSyncerTopicClusterName",
        "heartbeatSyncerThreadPoolNums",
        "heartbeatSyncerThreadPoolQueueCapacity",
        "heartbeatSyncerTopicName",
        "enablePrintJstack",
        "printJstackInMillis",
        "printThreadPoolStatusInMillis",
        "namesrvDomain",
        "namesrvDomainSubgroup",
        "grpcShutdownTimeSeconds",
        "grpcBossLoopNum",
        "grpcWorkerLoopNum",
        "enableGrpcEpoll",
        "grpcThreadPoolNums",
        "grpcThreadPoolQueueCapacity",
        "brokerConfigPath",
        "grpcMaxInboundMessageSize",
        "enableMessageBodyEmptyCheck",
        "maxUserPropertySize",
        "userPropertyMaxNum",
        "maxMessageGroupSize",
        "minInvisibleTimeMillsForRecv",
        "maxInvisibleTimeMills",
        "maxDelayTimeMills",
        "maxTransactionRecoverySecond",
        "enableTopicMessageTypeCheck",
        "grpcClientProducerMaxAttempts",
        "grpcClientProducerBackoffInitialMillis",
        "grpcClientProducerBackoffMaxMillis",
        "grpcClientProducerBackoffMultiplier",
        "grpcClientConsumerMinLongPollingTimeoutMillis",
        "grpcClientConsumerMaxLongPollingTimeoutMillis",
        "grpcClientConsumerLongPollingBatchSize",
        "grpcClientIdleTimeMills",
        "channelExpiredInSeconds",
        "contextExpiredInSeconds",
        "rocketmqMQClientNum",
        "grpcProxyRelayRequestTimeoutInSeconds",
        "grpcProducerThreadPoolNums",
        "grpcProducerThreadQueueCapacity",
        "grpcConsumerThreadPoolNums",
        "grpcConsumerThreadQueueCapacity",
        "grpcRouteThreadPoolNums",
        "grpcRouteThreadQueueCapacity",
        "grpcClientManagerThreadPoolNums",
        "grpcClientManagerThreadQueueCapacity",
        "grpcTransactionThreadPoolNums",
        "grpcTransactionThreadQueueCapacity",
        "producerProcessorThreadPoolNums",
        "producerProcessorThreadPoolQueueCapacity",
        "consumerProcessorThreadPoolNums",
        "consumerProcessorThreadPoolQueueCapacity",
        "useEndpointPortFromRequest",
        "topicRouteServiceCacheExpiredSeconds",
        "topicRouteServiceCacheRefreshSeconds",
        "topicRouteServiceCacheMaxNum",
        "topicRouteServiceThreadPoolNums",
        "topicRouteServiceThreadPoolQueueCapacity",
        "topicConfigCacheExpiredSeconds",
        "topicConfigCacheRefreshSeconds",
        "topicConfigCacheMaxNum",
        "subscriptionGroupConfigCacheExpiredSeconds",
        "subscriptionGroupConfigCacheRefreshSeconds",
        "subscriptionGroupConfigCacheMaxNum",
        "userCacheExpiredSeconds",
        "userCacheRefreshSeconds",
        "userCacheMaxNum",
        "aclCacheExpiredSeconds",
        "aclCacheRefreshSeconds",
        "aclCacheMaxNum",
        "metricCollectorMode",
        "metricCollectorAddress",
        "transactionHeartbeatThreadPoolNums",
        "transactionHeartbeatThreadPoolQueueCapacity",
        "transactionHeartbeatPeriodSecond",
        "transactionHeartbeatBatchNum",
        "transactionDataExpireScanPeriodMillis",
        "transactionDataMaxWaitClearMillis",
        "transactionDataExpireMillis",
        "transactionDataMaxNum",
        "longPollingReserveTimeInMillis",
        "invisibleTimeMillisWhenClear",
        "enableProxyAutoRenew",
        "maxRenewRetryTimes",
        "renewThreadPoolNums",
        "renewMaxThreadPoolNums",
        "renewThreadPoolQueueCapacity",
        "lockTimeoutMsInHandleGroup",
        "renewAheadTimeMillis",
        "renewMaxTimeMillis",
        "renewSchedulePeriodMillis",
        "enableACL",
        "useDelayLevel",
        "metricsPromExporterPort",
        "metricsExporterType",
        "metricsGrpcExporterTarget",
        "metricsGrpcExporterHeader",
        "metricGrpcExporterTimeOutInMills",
        "metricGrpcExporterIntervalInMills",
        "metricLoggingExporterIntervalInMills",
        "metricsInDelta",
        "metricsLabel",
        "remotingHeartbeatThreadPoolNums",
        "remotingTopicRouteThreadPoolNums",
        "remotingSendMessageThreadPoolNums",
        "remotingPullMessageThreadPoolNums",
        "remotingUpdateOffsetThreadPoolNums",
        "remotingDefaultThreadPoolNums",
        "remotingHeartbeatThreadPoolQueueCapacity",
        "remotingTopicRouteThreadPoolQueueCapacity",
        "remotingSendMessageThreadPoolQueueCapacity",
        "remotingPullMessageThreadPoolQueueCapacity",
        "remotingUpdateOffsetThreadPoolQueueCapacity",
        "remotingDefaultThreadPoolQueueCapacity",
        "remotingWaitTimeMillsInSendQueue",
        "remotingWaitTimeMillsInPullQueue",
        "remotingWaitTimeMillsInHeartbeatQueue",
        "remotingWaitTimeMillsInTopicRouteQueue",
        "remotingWaitTimeMillsInDefaultQueue",
        "enableRemotingLocalProxyGrpc",
        "enableBatchAck",
        "enableGrpcRequestAuth",
    ]
)


class ConfigError(ValueError):
    """A proxy setting that cannot be used, said with its key."""


class ProxyConfig(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid", frozen=True)

    proxy_mode: str = Field("cluster", alias="proxyMode")
    namesrv_addr: str = Field("", alias="namesrvAddr")
    grpc_server_port: int = Field(8081, alias="grpcServerPort", ge=0, le=65535)
    #: The 5.x remoting clients' port (:mod:`.remoting`); -1: not served.
    remoting_listen_port: int = Field(8080, alias="remotingListenPort", ge=-1, le=65535)
    rocketmq_cluster_name: str = Field("DefaultCluster", alias="rocketMQClusterName")
    proxy_name: str = Field(default_factory=socket.gethostname, alias="proxyName")
    #: Where the gRPC port listens (not an Apache key: Apache's proxy listens on every address).
    bind_address: str = Field("0.0.0.0", alias="bindAddress")
    max_message_size: int = Field(4 * 1024 * 1024, alias="maxMessageSize", gt=0)
    default_invisible_time_mills: int = Field(60_000, alias="defaultInvisibleTimeMills", gt=0)
    tls_test_mode_enable: bool = Field(True, alias="tlsTestModeEnable")
    tls_key_path: str = Field("", alias="tlsKeyPath")
    tls_cert_path: str = Field("", alias="tlsCertPath")
    #: Apache's switch for signing the proxy's requests to the brokers as the inner user when
    #: the proxy does not check clients itself (off: then the proxy signs nothing, so that an
    #: unchecked client never acts as the inner user).
    enable_acl_rpc_hook_for_cluster_mode: bool = Field(False, alias="enableAclRpcHookForClusterMode")
    #: The address the remoting port's routes name (``host:port``; empty: the one the client
    #: reached the proxy by), for a proxy behind NAT or a load balancer.
    remoting_access_addr: str = Field("", alias="remotingAccessAddr")
    #: ACL 2.0 (Apache's AuthConfig keys, read from the same file): clients are checked here,
    #: against the users and ACLs the brokers hold (mirrored every refresh seconds), and the
    #: proxy signs its requests to the brokers as ``innerClientAuthenticationCredentials``.
    authentication_enabled: bool = Field(False, alias="authenticationEnabled")
    authorization_enabled: bool = Field(False, alias="authorizationEnabled")
    authentication_whitelist: str = Field("", alias="authenticationWhitelist")
    authorization_whitelist: str = Field("", alias="authorizationWhitelist")
    inner_client_authentication_credentials: str = Field("", alias="innerClientAuthenticationCredentials")
    user_cache_refresh_second: int = Field(60, alias="userCacheRefreshSecond", gt=0)
    acl_cache_refresh_second: int = Field(60, alias="aclCacheRefreshSecond", gt=0)
    #: The producer group the proxy's own sends carry (5.x producers have no group; a
    #: transactional send carries its topic, as Apache's proxy names it).
    producer_group: str = Field("PROXY_SEND", alias="proxyProducerGroup")
    #: Apache's keys that were set and are not acted on (listed at start).
    unused: tuple[str, ...] = ()

    @field_validator("proxy_mode")
    @classmethod
    def _mode(cls, value: str) -> str:
        mode = value.strip().lower()
        if mode != "cluster":
            raise ValueError(
                f"proxyMode {value!r}: this proxy runs in cluster mode only; the local mode is the gRPC "
                "endpoint every mqbroker serves itself (grpcServerPort in the broker's config)"
            )
        return mode

    @property
    def auth_enabled(self) -> bool:
        return self.authentication_enabled or self.authorization_enabled

    @property
    def signs_as_inner_user(self) -> bool:
        """Whether the proxy's requests to brokers carry the inner user's signature: when it
        checks clients itself, or when Apache's ``enableAclRpcHookForClusterMode`` says so."""
        return self.inner_credentials is not None and (
            self.auth_enabled or self.enable_acl_rpc_hook_for_cluster_mode
        )

    @property
    def inner_credentials(self) -> tuple[str, str] | None:
        """(access key, secret key) of ``innerClientAuthenticationCredentials``, if set."""
        text = self.inner_client_authentication_credentials.strip()
        if not text:
            return None
        try:
            data = json.loads(text)
            return str(data["accessKey"]), str(data["secretKey"])
        except (ValueError, KeyError, TypeError):
            raise ConfigError(
                'innerClientAuthenticationCredentials: not {"accessKey": "...", "secretKey": "..."}'
            ) from None

    @property
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]

    def grpc_tls(self) -> ServerTls:
        """Apache's proxy's default: TLS beside plain text, with the configured certificate
        or, in test mode, a self-signed one."""
        props: dict[str, Any] = {}
        if self.tls_cert_path and self.tls_key_path and Path(self.tls_cert_path).is_file():
            props = {"tls.server.certPath": self.tls_cert_path, "tls.server.keyPath": self.tls_key_path}
        return default_permissive(props, self.tls_test_mode_enable)

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None = None, **overrides: Any) -> ProxyConfig:
        """``rmq-proxy.json`` at ``path`` (none: the defaults), then ``overrides`` by field
        name; ``namesrvAddr`` falls back to the NAMESRV_ADDR environment variable, as Apache's."""
        values: dict[str, Any] = {}
        if path is not None:
            try:
                values = json.loads(Path(path).read_text())
            except (OSError, json.JSONDecodeError) as exc:
                raise ConfigError(f"cannot read the proxy config {path}: {exc}") from None
            if not isinstance(values, dict):
                raise ConfigError(f"{path}: the proxy config is a JSON object of settings")
        unused = tuple(sorted(k for k in values if k in APACHE_KEYS))
        values = {k: v for k, v in values.items() if k not in APACHE_KEYS}
        values.setdefault("namesrvAddr", os.environ.get("NAMESRV_ADDR", ""))
        names = {f.alias or name: name for name, f in cls.model_fields.items()}
        merged = {names.get(k, k): v for k, v in values.items()}
        merged.update({k: v for k, v in overrides.items() if v is not None})
        try:
            config = cls(**merged, unused=unused)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'config'}: {e['msg']}" for e in exc.errors()
            )
            raise ConfigError(f"{path or 'proxy config'}: {problems}") from None
        if not config.namesrv_addrs:
            raise ConfigError("namesrvAddr is not set (rmq-proxy.json, -n, or NAMESRV_ADDR)")
        _ = config.inner_credentials  # a malformed value is refused now, not at the first request
        return config
