"""``mqbroker``: run a broker.

    mqbroker [-c broker.conf] [-n "ns1:9876;ns2:9876"] [-p] [--listen-port N] [--store-dir DIR]
             [--bind-address HOST]

The config file uses RocketMQ's key names for both broker and store settings; the options
override it. ``-p`` prints the effective configuration and exits. ``listenPort=0`` picks a
free port; the "listening on host:port" line says which.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import socket
import sys
from typing import Any

from aiorocketmq.broker.store import StoreConfig
from aiorocketmq.protocol.loop import run
from aiorocketmq.protocol.settings import ConfigError, server_logging

from .config import BrokerConfig
from .server import Broker

log = logging.getLogger("mqbroker")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mqbroker", description="Run a RocketMQ-compatible broker.")
    parser.add_argument(
        "-c", "--config", metavar="FILE", help="broker config file (RocketMQ key=value format)"
    )
    parser.add_argument(
        "-n", "--namesrv-addr", metavar="ADDRS", help="name servers, ';'-separated (namesrvAddr)"
    )
    parser.add_argument(
        "-p", "--print-config", action="store_true", help="print the effective config and exit"
    )
    parser.add_argument(
        "-l", "--listen-port", type=int, metavar="PORT", help="listenPort (default 10911; 0 = any free port)"
    )
    parser.add_argument("-d", "--store-dir", metavar="DIR", help="storePathRootDir (default ~/store)")
    parser.add_argument(
        "--bind-address", metavar="HOST", help="address every port listens on (bindAddress; default 0.0.0.0)"
    )
    parser.add_argument("--broker-ip", metavar="IP", help="brokerIP1: the address clients and records use")
    parser.add_argument("--broker-name", metavar="NAME", help="brokerName")
    parser.add_argument("--cluster", metavar="NAME", help="brokerClusterName")
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    return parser.parse_args(argv)


def load_config(args: argparse.Namespace) -> tuple[BrokerConfig, StoreConfig]:
    overrides: dict[str, Any] = {
        "namesrvAddr": args.namesrv_addr,
        "listenPort": args.listen_port,
        "storePathRootDir": args.store_dir,
        "brokerIP1": args.broker_ip,
        "bindAddress": args.bind_address,
        "brokerName": args.broker_name,
        "brokerClusterName": args.cluster,
    }
    broker_config = BrokerConfig.load(args.config, overrides)
    store_config = StoreConfig.load(args.config, {"storePathRootDir": broker_config.store_path_root_dir})
    return broker_config, store_config


def reserve_listen_port(broker_config: BrokerConfig) -> socket.socket | None:
    """``listenPort=0``: take a free port now and hold it until the broker listens on it.

    The broker's address is written into every stored record and registered with the name
    servers, so the port must be known before the broker is built. The holder is bound but
    never listens; with SO_REUSEADDR on both sides the broker's own listening socket can
    bind the same port, and nothing else can take it in between.
    """
    if broker_config.listen_port != 0:
        return None
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("0.0.0.0", 0))
    broker_config.listen_port = int(holder.getsockname()[1])
    return holder


def settle_heap() -> None:
    """Take what start-up built (modules, configurations, the store's tables) out of the cycle
    collector's walks. A full collection walked all of it while every request waited: about
    54,000 objects, 22-32 ms a time on the side-by-side's end-to-end load. What is made later
    is collected as before; frozen objects are still freed when nothing refers to them."""
    gc.collect()
    gc.freeze()


async def serve(broker_config: BrokerConfig, store_config: StoreConfig) -> None:
    holder = reserve_listen_port(broker_config)
    try:
        broker = Broker(broker_config, store_config)  # raises ConfigError for unusable ACL/TLS settings
    except BaseException:
        if holder is not None:
            holder.close()
        raise
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        try:
            await broker.start()
        finally:
            if holder is not None:
                holder.close()
        settle_heap()
        await stop.wait()
    finally:
        await broker.shutdown()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    server_logging(args.log_level)
    try:
        broker_config, store_config = load_config(args)
    except ConfigError as exc:
        print(f"mqbroker: {exc}", file=sys.stderr)
        return 2
    if args.print_config:
        sys.stdout.write(broker_config.to_properties())
        sys.stdout.write(store_config.to_properties())
        return 0
    unknown = set(broker_config.unknown_keys) & set(store_config.unknown_keys)
    if unknown:
        log.warning("ignoring unknown config keys: %s", ", ".join(sorted(unknown)))
    try:
        run(serve(broker_config, store_config))
    except ConfigError as exc:
        log.error("cannot start: %s", exc)
        print(f"mqbroker: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        log.error("cannot start: %s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
