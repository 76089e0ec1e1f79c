"""What every ``mqadmin`` command is made of: the :class:`Command` record and the
:class:`CommandSet` a command module declares its commands in, the :class:`Context` (SDK
clients) a command runs with, the :class:`Result` it returns, and the option shapes and
helpers several command modules share."""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from aiorocketmq.client import Admin, ClientOptions, PullClient
from aiorocketmq.protocol.body import SubscriptionGroupConfig, TopicConfig
from aiorocketmq.protocol.codes import MQVersion
from aiorocketmq.protocol.names import TOOLS_CONSUMER_GROUP

from ..cli import parse_bool, timestamp_millis


@dataclass
class Result:
    """What a command produced: a JSON document for scripts and text lines for people."""

    data: Any
    lines: list[str] = field(default_factory=list)


class Context:
    """The clients a command uses: an :class:`Admin` (always) and a :class:`PullClient` for
    the commands that read messages (started on first use)."""

    def __init__(self, namesrv: str | None, options: ClientOptions) -> None:
        self.namesrv = namesrv
        self.options = options
        self.admin = Admin(namesrv, options=options)
        self._puller: PullClient | None = None

    async def __aenter__(self) -> Self:
        await self.admin.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._puller is not None:
            await self._puller.shutdown()
        await self.admin.shutdown()

    async def puller(self) -> PullClient:
        if self._puller is None:
            self._puller = PullClient(TOOLS_CONSUMER_GROUP, self.namesrv, options=self.options)
            await self._puller.start()
        return self._puller


Run = Callable[[Context, argparse.Namespace], Awaitable[Result]]


@dataclass
class Command:
    name: str
    description: str
    arguments: tuple[Argument, ...]
    run: Run
    #: Groups of option names of which exactly one must be given.
    one_of: tuple[tuple[str, ...], ...] = ()
    #: False for commands that talk only to servers named in their options (the controllers),
    #: which run without ``-n`` as Apache's do.
    namesrv_needed: bool = True


Argument = tuple[tuple[str, ...], dict[str, Any]]


def arg(*flags: str, **kwargs: Any) -> Argument:
    """One option as ``argparse.add_argument`` takes it."""
    return flags, kwargs


class CommandSet:
    """The commands one module defines, in the order it defines them. Each command module
    holds one as ``commands``; :mod:`.registry` lists the modules, so nothing registers itself
    by being imported."""

    def __init__(self) -> None:
        self.commands: list[Command] = []

    def add(
        self,
        name: str,
        description: str,
        *arguments: Argument,
        one_of: tuple[tuple[str, ...], ...] = (),
        namesrv_needed: bool = True,
    ) -> Callable[[Run], Run]:
        """A decorator: the function runs ``mqadmin <name>`` with these options."""

        def define(fn: Run) -> Run:
            self.commands.append(Command(name, description, arguments, fn, one_of, namesrv_needed))
            return fn

        return define

    def __iter__(self) -> Iterator[Command]:
        return iter(self.commands)


# Option shapes several commands share.
TOPIC = arg("-t", "--topic", required=True, help="topic name")
_TIME_HELP = "currentTimeMillis|yyyy-MM-dd#HH:mm:ss:SSS"
END_TIMESTAMP = arg("-e", "--endTimestamp", dest="end", type=timestamp_millis, help=_TIME_HELP)


def begin_timestamp(flag: str) -> Argument:
    """``--beginTimestamp``, whose short flag differs between RocketMQ's commands."""
    return arg(flag, "--beginTimestamp", dest="begin", type=timestamp_millis, help=_TIME_HELP)


GROUP = arg("-g", "--groupName", dest="group", required=True, help="consumer group name")
BROKER_ADDR = arg("-b", "--brokerAddr", dest="broker_addr", help="broker address (host:port)")
CLUSTER = arg("-c", "--clusterName", dest="cluster", help="cluster name")
#: Commands aimed at one broker (-b) or at every master of a cluster (-c): exactly one of them.
BROKER_OR_CLUSTER = (("broker_addr", "cluster"),)
BOOL = {"type": parse_bool, "metavar": "true|false"}


async def target_masters(admin: Admin, args: argparse.Namespace) -> list[str]:
    """``-b`` as given, or the masters of the ``-c`` cluster."""
    if args.broker_addr:
        return [args.broker_addr]
    return await admin.master_addrs(args.cluster)


def version_desc(version: int) -> str:
    try:
        return MQVersion(version).name
    except ValueError:
        return str(version)


def json_list(path: str, model: type[TopicConfig] | type[SubscriptionGroupConfig]) -> list[Any] | None:
    """A file's JSON list of configs (Apache's ``-f``); None when the file does not exist."""
    file = Path(path)
    if not file.exists():
        return None
    data = json.loads(file.read_bytes() or b"[]")
    if not isinstance(data, list):
        raise ValueError(f"{path} must hold a JSON list")
    return [model.model_validate(item) for item in data]


def batch_options(what: str) -> tuple[Argument, ...]:
    return (
        arg("-b", "--brokerAddr", dest="broker_addr", help=f"create {what} to which broker"),
        arg("-c", "--clusterName", dest="cluster", help=f"create {what} to which cluster"),
        arg(
            "-f", "--filename", dest="filename", required=True, help=f"path to a JSON list of {what} configs"
        ),
    )


async def batch_update(
    ctx: Context,
    args: argparse.Namespace,
    model: type[TopicConfig] | type[SubscriptionGroupConfig],
    send: Callable[..., Awaitable[list[str]]],
    what: str,
) -> Result:
    """updateTopicList / updateSubGroupList: one request per master with the file's configs."""
    configs = json_list(args.filename, model)
    if configs is None:
        return Result({"error": "no such file"}, [f"the file path {args.filename} does not exists"])
    if not configs:
        return Result({"brokerAddrs": []}, [])
    addrs = await send(configs, cluster=args.cluster, broker_addr=args.broker_addr)
    lines = [f"submit batch of {what} to {addr} success, please check the result later." for addr in addrs]
    return Result({"brokerAddrs": addrs, "count": len(configs)}, lines)


def pretty_json(document: Any) -> str:
    """fastjson's pretty format (``JSON.toJSONString(obj, true)``): tabs, no space after colons."""
    return json.dumps(document, indent="\t", separators=(",", ":"), ensure_ascii=False)


def java_bool(value: bool) -> str:
    return "true" if value else "false"


def emit(line: str) -> None:
    # A command that runs until interrupted prints as it goes, not at the end.
    print(line, flush=True)
