"""The ``mqadmin`` command line: the command list and per-command usage (``mqadmin``,
``mqadmin help [<command>]``), parsing a command's options, running it with SDK clients and
printing its :class:`Result` as text or JSON, with the tools' exit codes."""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from collections.abc import Sequence

from aiorocketmq.client import ClientOptions
from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.loop import run

from ..cli import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    CommandFailed,
    Parser,
    add_tls_options,
    one_line,
    quiet_logging,
    tool_credentials,
    write_json,
)
from .command import Command, Context, Result
from .registry import COMMANDS

#: Apache's ``printHelp`` header and footer around the one-line-per-command list.
HELP_HEADER = "The most commonly used mqadmin commands are:"
HELP_FOOTER = "See 'mqadmin help <command>' for more information on a specific command."


def build_parser() -> tuple[Parser, dict[str, Parser]]:
    common = Parser(add_help=False)
    common.add_argument(
        "-n",
        "--namesrvAddr",
        dest="namesrv",
        metavar="namesrvAddr",
        default=os.environ.get("NAMESRV_ADDR"),
        help="name server address list, eg: '192.168.0.1:9876;192.168.0.2:9876' (default: $NAMESRV_ADDR)",
    )
    common.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    common.add_argument(
        "--timeout", type=float, default=3.0, metavar="seconds", help="request timeout in seconds (3)"
    )
    common.add_argument("--verbose", action="store_true", help="log the SDK's activity to stderr")
    add_tls_options(common)
    parser = Parser(prog="mqadmin", description="RocketMQ cluster administration.")
    actions = parser.add_subparsers(dest="command", metavar="<command>", required=True)
    subparsers: dict[str, Parser] = {}
    for cmd in COMMANDS.values():
        sub = actions.add_parser(
            cmd.name, parents=[common], help=cmd.description, description=cmd.description
        )
        for flags, kwargs in cmd.arguments:
            if kwargs.get("action") is None and "metavar" not in kwargs:
                # RocketMQ's help names a value after its long option: -t <topic>
                kwargs = {**kwargs, "metavar": flags[-1].lstrip("-")}
            sub.add_argument(*flags, **kwargs)
        subparsers[cmd.name] = sub
    return parser, subparsers


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser, subparsers = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    cmd = COMMANDS[args.command]
    for group in cmd.one_of:
        given = [name for name in group if getattr(args, name) is not None]
        if len(given) != 1:
            options = " or ".join(_option_of(cmd, name) for name in group)
            subparsers[cmd.name].error(f"give exactly one of {options}")
    return args


def command_list() -> list[str]:
    """What ``mqadmin`` alone prints, laid out as Apache's ``mqadmin`` prints it."""
    width = max(35, *(len(name) for name in COMMANDS))
    return [
        HELP_HEADER,
        *(f"   {cmd.name:<{width}} {cmd.description}" for cmd in COMMANDS.values()),
        "",
        HELP_FOOTER,
    ]


def unknown_command(name: str) -> str:
    """Why ``name`` is refused, with the closest command names when there are some."""
    reason = f"mqadmin: the sub command {name} does not exist; 'mqadmin help' lists the commands"
    close = difflib.get_close_matches(name, COMMANDS, n=3)
    return reason + (f" (did you mean {' or '.join(close)}?)" if close else "")


def show_help(words: Sequence[str]) -> int:
    """``mqadmin help``: the command list; ``mqadmin help <command>``: its usage and options."""
    if not words:
        sys.stdout.write("".join(f"{line}\n" for line in command_list()))
        return EXIT_OK
    if words[0] not in COMMANDS:
        print(unknown_command(words[0]), file=sys.stderr)
        return EXIT_USAGE
    _, subparsers = build_parser()
    subparsers[words[0]].print_help(sys.stdout)
    return EXIT_OK


def _option_of(cmd: Command, dest: str) -> str:
    for flags, kwargs in cmd.arguments:
        if kwargs.get("dest", flags[-1].lstrip("-")) == dest:
            return flags[0]
    return dest


async def execute(args: argparse.Namespace) -> Result:
    namesrv = args.namesrv
    if not namesrv:
        if COMMANDS[args.command].namesrv_needed:
            raise CommandFailed("no name server address: give -n host:9876 or set NAMESRV_ADDR")
        # The admin client wants a name server it will not ask: the controller named by -a
        # stands in (embedded in a name server, it is one).
        namesrv = args.controller.split(";")[0].strip()
    credentials = tool_credentials()
    options = ClientOptions(
        request_timeout=args.timeout,
        access_key=credentials.access_key if credentials else None,
        secret_key=credentials.secret_key if credentials else None,
        security_token=credentials.security_token if credentials else None,
        tls=args.tls,
        tls_ca_file=args.tls_ca_file,
        tls_verify=not args.tls_no_verify,
    )
    async with Context(namesrv, options) as ctx:
        return await COMMANDS[args.command].run(ctx, args)


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if not words or words[0] in ("help", "-h", "--help"):
        return show_help(words[1:2])
    if not words[0].startswith("-") and words[0] not in COMMANDS:
        print(f"usage: mqadmin <command> [<options>]\n{unknown_command(words[0])}", file=sys.stderr)
        return EXIT_USAGE
    args = parse_args(words)
    quiet_logging(args.verbose)
    try:
        result = run(execute(args))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except (MQError, CommandFailed, OSError, ValueError) as exc:
        print(f"mqadmin {args.command}: {one_line(exc)}", file=sys.stderr)
        return EXIT_FAILED
    try:
        if args.json:
            write_json(result.data)
        else:
            sys.stdout.write("".join(f"{line}\n" for line in result.lines))
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader (head, grep -q) stopped early; Python must not complain at exit either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_OK
