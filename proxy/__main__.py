"""``mqproxy``: ``mqproxy -pc rmq-proxy.json`` (Apache's flags: ``-pc``/``--proxyConfigPath``,
``-pm``/``--proxyMode``, ``-n``/``--namesrvAddr``)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence

from aiorocketmq.protocol.loop import run
from aiorocketmq.protocol.settings import server_logging

from .config import ConfigError, ProxyConfig
from .server import Proxy

log = logging.getLogger("aiorocketmq.proxy")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mqproxy",
        description="RocketMQ 5.x proxy (cluster mode): 5.x gRPC clients in front, brokers over remoting behind.",
    )
    parser.add_argument("-pc", "--proxyConfigPath", metavar="FILE", help="Apache's rmq-proxy.json")
    parser.add_argument("-pm", "--proxyMode", metavar="MODE", help="cluster (the only mode of this process)")
    parser.add_argument("-n", "--namesrvAddr", metavar="ADDRS", help="name servers, host:port;host:port")
    parser.add_argument("--grpc-port", type=int, metavar="PORT", help="grpcServerPort (0 = any free port)")
    parser.add_argument(
        "--remoting-port", type=int, metavar="PORT", help="remotingListenPort (0 = any free port, -1 = none)"
    )
    parser.add_argument("--bind-address", metavar="HOST", help="address the proxy's ports listen on")
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="default INFO"
    )
    return parser


async def serve(config: ProxyConfig) -> int:
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    proxy = Proxy(config)
    try:
        port = await proxy.start()
    except (OSError, RuntimeError) as exc:
        log.error("cannot serve gRPC on %s:%d: %s", config.bind_address, config.grpc_server_port, exc)
        return 1
    log.info(
        "mqproxy (cluster mode) listening on %s:%d for 5.x clients (gRPC: %s); %s; name servers %s",
        config.bind_address,
        port,
        proxy.endpoint.accepts,
        f"remoting clients on port {proxy.remoting_port}"
        if proxy.remoting is not None
        else "no remoting port",
        ";".join(config.namesrv_addrs),
    )
    if config.unused:
        log.info("rmq-proxy.json keys not used by this proxy: %s", ", ".join(config.unused))
    await stopping.wait()
    log.info("shutting down")
    await proxy.stop()
    log.info("stopped")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    server_logging(args.log_level)
    try:
        config = ProxyConfig.load(
            args.proxyConfigPath,
            proxy_mode=args.proxyMode,
            namesrv_addr=args.namesrvAddr,
            grpc_server_port=args.grpc_port,
            remoting_listen_port=args.remoting_port,
            bind_address=args.bind_address,
        )
    except ConfigError as exc:
        log.error("%s", exc)
        return 2
    return run(serve(config))


if __name__ == "__main__":
    sys.exit(main())
