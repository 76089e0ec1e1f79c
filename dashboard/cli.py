"""``mqdashboard --namesrv ADDR [--port 8080] [--host 127.0.0.1]``: serve the dashboard with
uvicorn on the project's event loop. Logs ``listening on HOST:PORT`` once the socket is bound
(``--port 0`` picks a free port) and stops cleanly, exit code 0, on SIGTERM or Ctrl-C.

Without a users file anyone who reaches the port may change the cluster (delete topics, reset
offsets), so the dashboard serves beyond loopback only with ``--users`` (``--init-users``
creates one with a random admin password), or when ``--insecure-no-login`` says so out loud."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
from collections.abc import Generator, Sequence
from contextlib import contextmanager
from pathlib import Path

import uvicorn

from aiorocketmq.client.credentials import resolve_credentials
from aiorocketmq.protocol.loop import run

from .app import DEFAULT_DATA_DIR, Settings, create_app
from .users import Sessions, UsersFileError, create_users_file, is_loopback, load_users

log = logging.getLogger("mqdashboard")


class _Server(uvicorn.Server):
    """uvicorn re-raises a caught SIGTERM after its graceful shutdown, so the process would
    end "killed by signal"; here a signal only asks the server to stop."""

    @contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stop)
        try:
            yield
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    def _stop(self) -> None:
        if self.should_exit:
            self.force_exit = True
        self.should_exit = True


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="mqdashboard", description="A web dashboard for a RocketMQ cluster."
    )
    parser.add_argument(
        "-n",
        "--namesrv",
        default=os.environ.get("NAMESRV_ADDR"),
        help="name server address(es), 'host:9876;host2:9876' (default: $NAMESRV_ADDR)",
    )
    parser.add_argument(
        "--controller",
        default=os.environ.get("CONTROLLER_ADDR"),
        help="controller address(es) of a controller-mode cluster, 'host:9878;host2:9878': the "
        "Controller page (default: $CONTROLLER_ADDR)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port to listen on (8080; 0: any free port)")
    parser.add_argument(
        "--users", type=Path, help="users file (user=password[,1]; 1 marks an admin): login required"
    )
    parser.add_argument(
        "--init-users",
        action="store_true",
        help="create the --users file when it does not exist: one admin, 'admin', with a random "
        "password (read it from the file, mode 0600)",
    )
    parser.add_argument(
        "--insecure-no-login",
        action="store_true",
        help="serve a non-loopback --host without a users file: anyone who reaches the port may "
        "change the cluster (for a dashboard behind a proxy that does the login)",
    )
    parser.add_argument("--refresh", type=float, default=5.0, help="seconds between live chart samples (5)")
    parser.add_argument("--timeout", type=float, default=3.0, help="cluster request timeout in seconds (3)")
    parser.add_argument(
        "--data-dir", type=Path, default=DEFAULT_DATA_DIR,
        help=f"where the TPS history and the group monitors are kept ({DEFAULT_DATA_DIR})",
    )  # fmt: skip
    parser.add_argument(
        "--collect-interval", type=float, default=60.0,
        help="seconds between history samples and group monitor checks (60; 0: neither)",
    )  # fmt: skip
    parser.add_argument("--history-days", type=int, default=7, help="days of TPS history kept (7)")
    parser.add_argument(
        "--tls",
        action="store_true",
        default=os.environ.get("ROCKETMQ_TLS_ENABLE", "").lower() == "true",
        help="talk TLS to every server (default: $ROCKETMQ_TLS_ENABLE=true)",
    )
    parser.add_argument(
        "--tls-ca-file", "--tlsCaFile", dest="tls_ca_file", metavar="FILE",
        help="CA certificates to check servers against (default: the system store)",
    )  # fmt: skip
    parser.add_argument(
        "--tls-no-verify", "--tlsNoVerify", dest="tls_no_verify", action="store_true",
        help="do not check the servers' certificates",
    )  # fmt: skip
    parser.add_argument("--access-key", help="ACL access key (default: $ROCKETMQ_ACCESS_KEY)")
    parser.add_argument("--secret-key", help="ACL secret key (default: $ROCKETMQ_SECRET_KEY)")
    args = parser.parse_args(argv)
    try:
        # Key by key, as the tools: an option, else the environment ($ROCKETMQ_ACCESS_KEY, ...,
        # $RMQ_ACCESS_KEY/$RMQ_SECRET_KEY still work), with its security token.
        credentials = resolve_credentials(args.access_key, args.secret_key)
    except ValueError as exc:
        parser.error(str(exc))
    args.access_key, args.secret_key, args.security_token = (
        (credentials.access_key, credentials.secret_key, credentials.security_token)
        if credentials
        else (None, None, None)
    )
    if not args.namesrv:
        parser.error("no name server address: give --namesrv host:9876 or set NAMESRV_ADDR")
    if args.refresh <= 0 or args.timeout <= 0:
        parser.error("--refresh and --timeout must be positive")
    if args.collect_interval < 0 or args.history_days < 1:
        parser.error("--collect-interval must not be negative and --history-days must be at least 1")
    if not 0 <= args.port <= 65535:
        parser.error("--port must be between 0 and 65535")
    if args.init_users and args.users is None:
        parser.error("--init-users needs --users FILE (the file to create)")
    if args.users is None and not args.insecure_no_login and not is_loopback(args.host):
        parser.error(
            f"refusing to serve {args.host} without a login: anyone who reaches it could change the "
            "cluster. Give --users FILE (user=password[,1] a line; --init-users creates one), or "
            "--host 127.0.0.1, or --insecure-no-login if a proxy in front does the login"
        )
    return args


async def serve(settings: Settings, host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.setblocking(False)
    bound = sock.getsockname()[1]
    # A request stuck on a silent cluster must not hold up a SIGTERM for long.
    config = uvicorn.Config(
        create_app(settings),
        loop="none",
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    server = _Server(config)
    log.info("mqdashboard for name server %s listening on %s:%d", settings.namesrv, host, bound)
    await server.serve(sockets=[sock])


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    sessions = None
    if args.users is not None:
        try:
            if args.init_users and create_users_file(args.users):
                log.warning(
                    "created users file %s with one admin, 'admin'; its password is in the file", args.users
                )
            sessions = Sessions(load_users(args.users))
        except (OSError, UsersFileError) as exc:
            print(f"mqdashboard: cannot use users file {args.users}: {exc}", file=sys.stderr)
            return 2
    settings = Settings(
        namesrv=args.namesrv,
        refresh=args.refresh,
        request_timeout=args.timeout,
        sessions=sessions,
        access_key=args.access_key,
        secret_key=args.secret_key,
        security_token=args.security_token,
        tls=args.tls,
        tls_ca_file=args.tls_ca_file,
        tls_verify=not args.tls_no_verify,
        data_dir=args.data_dir.expanduser(),
        collect_interval=args.collect_interval,
        history_days=args.history_days,
        controllers=args.controller or None,
    )
    if sessions is None and not is_loopback(args.host):
        log.warning(
            "serving %s WITHOUT A LOGIN (--insecure-no-login): anyone who reaches port %d may change the cluster",
            args.host,
            args.port,
        )
    try:
        run(serve(settings, args.host, args.port))
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        print(f"mqdashboard: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
