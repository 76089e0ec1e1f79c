"""``mqnamesrv`` / ``python -m aiorocketmq.namesrv``: command line, logging, signals."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence
from importlib import metadata

from aiorocketmq.protocol.loop import run
from aiorocketmq.protocol.settings import ConfigError, server_logging

from .config import NamesrvSettings
from .server import NameServer

log = logging.getLogger("namesrv")


def _version() -> str:
    try:
        return metadata.version("aiorocketmq")
    except metadata.PackageNotFoundError:
        return "dev"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mqnamesrv",
        description="RocketMQ 4.x compatible name server: brokers register here, clients ask for routes.",
    )
    parser.add_argument(
        "-c", "--config", metavar="FILE", help="RocketMQ-style properties file (listenPort=9876, ...)"
    )
    parser.add_argument(
        "-p", "--print-config", action="store_true", help="print the effective configuration and exit"
    )
    parser.add_argument(
        "--listen-port", type=int, metavar="PORT", help="TCP port (listenPort; 0 = any free port)"
    )
    parser.add_argument("--bind-address", metavar="HOST", help="address to listen on (bindAddress)")
    parser.add_argument(
        "--store-dir", metavar="DIR", help="data directory holding kvConfig.json (storePathRootDir)"
    )
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="default INFO"
    )
    return parser


def load_settings(args: argparse.Namespace) -> NamesrvSettings:
    settings = NamesrvSettings.load(
        args.config,
        {
            "listenPort": args.listen_port,
            "bindAddress": args.bind_address,
            "storePathRootDir": args.store_dir,
        },
    )
    # Show and use the resolved path, so `-p` tells the operator where the file really is.
    settings.kv_config_path = str(settings.kv_config_file)
    settings.auth_users_file = str(settings.users_file)
    return settings


async def serve(settings: NamesrvSettings) -> int:
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    try:
        settings.store_dir.mkdir(parents=True, exist_ok=True)
        settings.kv_config_file.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        log.error("cannot create data directory: %s", exc)
        return 1
    try:
        namesrv = NameServer(settings)
    except (ConfigError, OSError) as exc:
        log.error("cannot start: %s", exc)
        return 1
    try:
        port = await namesrv.start()
    except OSError as exc:
        log.error("cannot listen on %s:%d: %s", settings.bind_address, settings.listen_port, exc)
        await namesrv.close()
        return 1
    log.info(
        "mqnamesrv %s listening on %s:%d (TLS %s; store dir %s, kv config %s, broker expiry %gs, scan every %gs)",
        _version(),
        settings.bind_address,
        port,
        namesrv.server.tls.mode if namesrv.server.tls else "disabled",
        settings.store_dir,
        settings.kv_config_file,
        settings.broker_expiry,
        settings.scan_interval,
    )
    if namesrv.auth is not None:
        log.info("authenticated writes: %s", namesrv.auth.describe())
    else:
        log.info("writes are not authenticated (authenticationEnabled=false)")
    await stopping.wait()
    log.info("shutting down")
    await namesrv.close()
    log.info("stopped")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    server_logging(args.log_level)
    try:
        settings = load_settings(args)
    except ConfigError as exc:
        log.error("%s", exc)
        return 2
    for key in settings.unknown_keys:
        log.warning("unknown configuration key %r ignored", key)
    if args.print_config:
        sys.stdout.write(settings.to_properties())
        return 0
    return run(serve(settings))


if __name__ == "__main__":
    sys.exit(main())
