"""``mqcontroller`` / ``python -m aiorocketmq.controller``: command line, logging, signals.

As Apache's ``ControllerStartup``: ``-c FILE`` reads the controller's properties
(``controllerDLegerGroup``, ``controllerDLegerPeers``, ``controllerDLegerSelfId``,
``controllerStorePath``, ...), ``-p`` prints the effective configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence

from aiorocketmq.protocol.loop import run
from aiorocketmq.protocol.settings import ConfigError, server_logging

from .config import ControllerSettings
from .manager import ControllerManager

log = logging.getLogger("controller")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mqcontroller",
        description="RocketMQ 5 controller: elects each broker group's master (controller mode).",
    )
    parser.add_argument(
        "-c", "--configFile", dest="config", metavar="FILE", help="controller properties file"
    )
    parser.add_argument(
        "-p",
        "--printConfigItem",
        dest="print_config",
        action="store_true",
        help="print all config items and exit",
    )
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="default INFO"
    )
    return parser


async def serve(settings: ControllerSettings) -> int:
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    try:
        controller = ControllerManager(settings)
    except (ConfigError, OSError) as exc:
        log.error("cannot start: %s", exc)
        return 1
    try:
        await controller.start()
    except OSError as exc:
        log.error("cannot listen on %s: %s", controller.self_peer.address, exc)
        await controller.close()
        return 1
    log.info("mqcontroller %s listening on %s:%d", controller.self_id, settings.bind_address, controller.port)
    # Apache's ControllerStartup prints this once it serves.
    print("The Controller Server boot success. serializeType=JSON", flush=True)
    await stopping.wait()
    log.info("shutting down")
    await controller.close()
    log.info("stopped")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    server_logging(args.log_level)
    try:
        settings = ControllerSettings.load(args.config)
    except ConfigError as exc:
        log.error("%s", exc)
        return 2
    for key in settings.unknown_keys:
        log.warning("unknown configuration key %r ignored", key)
    if args.print_config:
        sys.stdout.write(settings.to_properties())
        return 0
    try:
        settings.peers()
    except ConfigError as exc:
        log.error("%s", exc)
        return 2
    return run(serve(settings))


if __name__ == "__main__":
    sys.exit(main())
