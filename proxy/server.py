"""One proxy process: a client instance on the cluster's name servers (the proxy's remoting
side: routes, heartbeats, requests to brokers, transaction checks coming back), the 5.x gRPC
endpoint in front of it, and the remoting port for 5.x remoting clients (:mod:`.remoting`). Stateless: stop one, start another, and clients carry on
(receipt handles name their broker; see :mod:`.cluster`)."""

from __future__ import annotations

import asyncio
import logging
import os
import time

from aiorocketmq.broker.grpc.endpoint import GrpcEndpoint
from aiorocketmq.broker.grpc.routes import endpoints_of
from aiorocketmq.client.client_instance import ClientInstance, ClientOptions
from aiorocketmq.protocol.body import ClusterInfo
from aiorocketmq.protocol.codes import RequestCode
from aiorocketmq.protocol.message import local_ipv4

from .auth import engine_for, keep_mirrored
from .config import ProxyConfig
from .remoting import RemotingFront
from .service import ProxyService

log = logging.getLogger(__name__)

#: A 5.x client silent this long (no heartbeat, no telemetry) is forgotten (Apache's
#: ``channelExpiredInSeconds``... its gRPC clients heartbeat every 10 s).
CLIENT_IDLE_SECONDS = 120.0


class Proxy:
    """``await start()``, ``await stop()``; ``port`` is the gRPC port bound."""

    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        client_id = f"{config.proxy_name}@proxy-{os.getpid()}#{time.monotonic_ns()}"
        inner = config.inner_credentials if config.signs_as_inner_user else None
        if config.inner_credentials is not None and inner is None:
            log.warning(
                "innerClientAuthenticationCredentials is set but the proxy checks no client "
                "(authenticationEnabled/authorizationEnabled off) and enableAclRpcHookForClusterMode "
                "is false: its requests to brokers go unsigned"
            )
        options = ClientOptions(
            serialization="json",
            access_key=inner[0] if inner else None,
            secret_key=inner[1] if inner else None,
        )
        self.instance = ClientInstance(client_id, config.namesrv_addrs, options)
        self.auth = engine_for(config) if config.auth_enabled else None
        self.auth_ready = asyncio.Event()
        self.service = ProxyService(config, self.instance, self.auth)
        self.endpoint = GrpcEndpoint(self.service, config.grpc_tls())
        self.remoting = (
            RemotingFront(self.instance, auth=self.auth, access_addr=config.remoting_access_addr)
            if config.remoting_listen_port >= 0
            else None
        )
        self.port = 0
        self.remoting_port = 0

    async def start(self) -> int:
        self.instance.start()
        if self.auth is not None:
            interval = min(self.config.user_cache_refresh_second, self.config.acl_cache_refresh_second)
            self.instance.spawn(
                keep_mirrored(self.auth, self.instance, self._masters, interval, self.auth_ready)
            )
            try:  # clients are refused until the brokers' users are known
                await asyncio.wait_for(self.auth_ready.wait(), 10.0)
            except TimeoutError:
                log.warning(
                    "ACL 2.0: no broker listed its users and ACLs yet; requests are refused until one does"
                )
        try:
            self.port = await self.endpoint.start(self.config.bind_address, self.config.grpc_server_port)
        except BaseException:
            await self.instance.shutdown()
            raise
        if self.remoting is not None:
            try:
                self.remoting_port = await self.remoting.start(
                    self.config.bind_address, self.config.remoting_listen_port
                )
            except BaseException:
                await self.endpoint.stop()
                await self.instance.shutdown()
                raise
        host = self.config.bind_address
        if host in ("0.0.0.0", "::", ""):
            host = local_ipv4()
        self.service.bind(endpoints_of(host, self.port))
        self.instance.spawn(self.instance._every(10.0, self._expire))
        return self.port

    async def _masters(self) -> list[str]:
        """Every master of the cluster, from the name servers."""
        response = await self.instance.call_namesrv(RequestCode.GET_BROKER_CLUSTER_INFO)
        info = ClusterInfo.decode(response.body)
        return sorted(
            addr
            for broker in info.broker_addr_table.values()
            for broker_id, addr in broker.broker_addrs.items()
            if int(broker_id) == 0
        )

    async def _expire(self) -> None:
        self.service.expire(CLIENT_IDLE_SECONDS)
        self.service.sweep()

    async def stop(self) -> None:
        if self.remoting is not None:
            await self.remoting.close()
        await self.endpoint.stop()
        await self.instance.shutdown()
