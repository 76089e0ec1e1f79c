"""One proxy process: a client instance on the cluster's name servers (the proxy's remoting
side: routes, heartbeats, requests to brokers, transaction checks coming back) and the 5.x
gRPC endpoint in front of it. Stateless: stop one, start another, and clients carry on
(receipt handles name their broker; see :mod:`.cluster`)."""

from __future__ import annotations

import logging
import os
import time

from aiorocketmq.broker.grpc.endpoint import GrpcEndpoint
from aiorocketmq.broker.grpc.routes import endpoints_of
from aiorocketmq.client.client_instance import ClientInstance, ClientOptions
from aiorocketmq.protocol.message import local_ipv4

from .config import ProxyConfig
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
        self.instance = ClientInstance(client_id, config.namesrv_addrs, ClientOptions(serialization="json"))
        self.service = ProxyService(config, self.instance)
        self.endpoint = GrpcEndpoint(self.service, config.grpc_tls())
        self.port = 0

    async def start(self) -> int:
        self.instance.start()
        try:
            self.port = await self.endpoint.start(self.config.bind_address, self.config.grpc_server_port)
        except BaseException:
            await self.instance.shutdown()
            raise
        host = self.config.bind_address
        if host in ("0.0.0.0", "::", ""):
            host = local_ipv4()
        self.service.bind(endpoints_of(host, self.port))
        self.instance.spawn(self.instance._every(10.0, self._expire))
        return self.port

    async def _expire(self) -> None:
        self.service.expire(CLIENT_IDLE_SECONDS)

    async def stop(self) -> None:
        await self.endpoint.stop()
        await self.instance.shutdown()
