"""``mqadmin``: cluster administration with RocketMQ's command names and option letters.

::

    mqadmin clusterList -n 127.0.0.1:9876
    mqadmin updateTopic -n 127.0.0.1:9876 -c DefaultCluster -t Orders -r 8 -w 8
    mqadmin consumerProgress -n 127.0.0.1:9876 -g billing --json

Each command prints aligned text for people, or one JSON document with ``--json`` (RocketMQ's
field names). A command that fails prints one line saying why on stderr and exits 1; bad
arguments print the usage and exit 2. Everything goes through the SDK (:class:`Admin`,
:class:`PullClient`, :class:`Producer`).
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import contextlib
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from aiorocketmq.client import (
    Admin,
    ClientError,
    ClientOptions,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PullClient,
    PullStatus,
)
from aiorocketmq.protocol.body import ConsumerConnection, SubscriptionGroupConfig, TopicConfig
from aiorocketmq.protocol.codes import MQVersion, Perm, TopicSysFlag
from aiorocketmq.protocol.errors import MQError, TopicNotExistError
from aiorocketmq.protocol.loop import run
from aiorocketmq.protocol.message import decode_offset_msg_id
from aiorocketmq.protocol.names import DLQ_PREFIX, RETRY_PREFIX, dlq_topic, retry_topic
from aiorocketmq.protocol.topic_attributes import AttributeRefused, parse_modification

from .cli import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    CommandFailed,
    Parser,
    add_tls_options,
    date_time,
    human_time,
    key_values,
    message_json,
    message_text,
    non_negative_int,
    one_line,
    parse_bool,
    positive_int,
    queue_json,
    queue_text,
    quiet_logging,
    table,
    timestamp_millis,
    tool_credentials,
    write_json,
)

#: RocketMQ's ``MixAll.TOOLS_CONSUMER_GROUP``: the group tools pull with (never commits).
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"
#: How long ``updateTopic`` waits until the name servers route the new settings.
ROUTE_WAIT = 10.0
#: queryMsgByKey asks for at most this many messages (as RocketMQ's tool does).
QUERY_MAX_NUM = 64
PULL_BATCH = 32


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
    arguments: tuple[tuple[tuple[str, ...], dict[str, Any]], ...]
    run: Run
    #: Groups of option names of which exactly one must be given.
    one_of: tuple[tuple[str, ...], ...] = ()


COMMANDS: dict[str, Command] = {}


def arg(*flags: str, **kwargs: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
    return flags, kwargs


def command(
    name: str,
    description: str,
    *arguments: tuple[tuple[str, ...], dict[str, Any]],
    one_of: tuple[tuple[str, ...], ...] = (),
) -> Callable[[Run], Run]:
    def register(fn: Run) -> Run:
        COMMANDS[name] = Command(name, description, arguments, fn, one_of)
        return fn

    return register


# Option shapes several commands share.
TOPIC = arg("-t", "--topic", required=True, help="topic name")
_TIME_HELP = "currentTimeMillis|yyyy-MM-dd#HH:mm:ss:SSS"
END_TIMESTAMP = arg("-e", "--endTimestamp", dest="end", type=timestamp_millis, help=_TIME_HELP)


def begin_timestamp(flag: str) -> tuple[tuple[str, ...], dict[str, Any]]:
    """``--beginTimestamp``, whose short flag differs between RocketMQ's commands."""
    return arg(flag, "--beginTimestamp", dest="begin", type=timestamp_millis, help=_TIME_HELP)


GROUP = arg("-g", "--groupName", dest="group", required=True, help="consumer group name")
BROKER_ADDR = arg("-b", "--brokerAddr", dest="broker_addr", help="broker address (host:port)")
CLUSTER = arg("-c", "--clusterName", dest="cluster", help="cluster name")
#: Commands aimed at one broker (-b) or at every master of a cluster (-c): exactly one of them.
BROKER_OR_CLUSTER = (("broker_addr", "cluster"),)
BOOL = {"type": parse_bool, "metavar": "true|false"}


# -- shared helpers ----------------------------------------------------------------------------


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


def perm_text(perm: int) -> str:
    """RocketMQ's ``PermName.perm2String``: ``R``, ``W``, ``X`` (inherit) or ``-``."""
    return (
        ("R" if perm & Perm.READ else "-")
        + ("W" if perm & Perm.WRITE else "-")
        + ("X" if perm & Perm.INHERIT else "-")
    )


# -- cluster and brokers ------------------------------------------------------------------------


@command(
    "clusterList", "List cluster infos.", arg("-c", "--clusterName", dest="cluster", help="which cluster")
)
async def cluster_list(ctx: Context, args: argparse.Namespace) -> Result:
    info = await ctx.admin.cluster_info()
    if args.cluster is not None and args.cluster not in info.cluster_addr_table:
        raise CommandFailed(f"cluster {args.cluster!r} is unknown; known: {sorted(info.cluster_addr_table)}")
    entries: list[tuple[str, str, int, str]] = []
    for cluster in sorted(info.cluster_addr_table):
        if args.cluster is not None and cluster != args.cluster:
            continue
        for name in sorted(info.cluster_addr_table[cluster]):
            data = info.broker_addr_table.get(name)
            if data is not None:
                entries.extend((cluster, name, bid, addr) for bid, addr in sorted(data.broker_addrs.items()))

    async def runtime(addr: str) -> dict[str, str]:
        # An unreachable broker is still listed, with empty statistics (as RocketMQ does).
        try:
            return await ctx.admin.broker_runtime_info(addr)
        except MQError:
            return {}

    tables = await asyncio.gather(*(runtime(addr) for _, _, _, addr in entries))
    rows = []
    brokers = []
    for (cluster, name, bid, addr), stats in zip(entries, tables):
        rows.append(
            [
                cluster,
                name,
                bid,
                addr,
                stats.get("brokerVersionDesc", "N/A"),
                _first_number(stats.get("putTps")),
                _first_number(stats.get("getTransferedTps")),
                _count(stats.get("msgPutTotal")),
                _count(stats.get("msgGetTotal")),
                stats.get("runtime", "N/A"),
            ]
        )
        brokers.append(
            {"clusterName": cluster, "brokerName": name, "brokerId": bid, "addr": addr, "runtimeInfo": stats}
        )
    headers = [
        "#Cluster Name", "#Broker Name", "#BID", "#Addr", "#Version",
        "#InTPS", "#OutTPS", "#InTotal", "#OutTotal", "#Runtime",
    ]  # fmt: skip
    if any(bid != 0 for _, _, bid, _ in entries):
        # With slaves: how many commit-log bytes each is behind its master ("-" for masters).
        headers.append("#Behind")
        master_end = {
            (cluster, name): stats.get("commitLogMaxOffset")
            for (cluster, name, bid, _), stats in zip(entries, tables)
            if bid == 0
        }
        for row, (cluster, name, bid, _), stats in zip(rows, entries, tables):
            ends = master_end.get((cluster, name)), stats.get("commitLogMaxOffset")
            if bid == 0:
                row.append("-")
            elif ends[0] is not None and ends[1] is not None and ends[0].isdigit() and ends[1].isdigit():
                row.append(max(0, int(ends[0]) - int(ends[1])))
            else:
                row.append("N/A")
    return Result({"clusterAddrTable": info.cluster_addr_table, "brokers": brokers}, table(headers, rows))


def _count(value: str | None) -> int | str:
    return int(value) if value is not None and value.isdigit() else "N/A"


def _first_number(value: str | None) -> str:
    # RocketMQ reports TPS as "<last 10s> <last 60s> <last 10min>"; the tools show the first.
    return value.split()[0] if value else "N/A"


@command(
    "brokerStatus",
    "Fetch broker runtime status data.",
    BROKER_ADDR,
    CLUSTER,
    one_of=BROKER_OR_CLUSTER,
)
async def broker_status(ctx: Context, args: argparse.Namespace) -> Result:
    if args.broker_addr:
        addrs = [args.broker_addr]
    else:
        # Slaves too, as RocketMQ's tool shows them.
        known = await ctx.admin.brokers_by_addr()
        addrs = sorted(addr for addr, broker in known.items() if broker.cluster == args.cluster)
        if not addrs:
            raise CommandFailed(f"cluster {args.cluster!r} has no broker")
    tables = await asyncio.gather(*(ctx.admin.broker_runtime_info(addr) for addr in addrs))
    lines: list[str] = []
    for addr, stats in zip(addrs, tables):
        pairs = sorted(stats.items())
        if args.broker_addr:
            lines.extend(key_values(pairs))
        else:
            lines.extend(f"{addr}  {line}" for line in key_values(pairs))
    return Result(dict(zip(addrs, tables)), lines)


@command(
    "getBrokerConfig",
    "Get broker config by cluster or special broker.",
    BROKER_ADDR,
    CLUSTER,
    one_of=BROKER_OR_CLUSTER,
)
async def get_broker_config(ctx: Context, args: argparse.Namespace) -> Result:
    addrs = await target_masters(ctx.admin, args)
    configs = await asyncio.gather(*(ctx.admin.broker_config(addr) for addr in addrs))
    lines: list[str] = []
    for addr, config in zip(addrs, configs):
        lines.append(
            f"============{addr}============"
            if args.broker_addr
            else f"============Master: {addr}============"
        )
        if not config:
            lines.append(f"Broker[{addr}] has no config property!")
        lines.extend(key_values(sorted(config.items()), "=  "))
        lines.append("")
    return Result(dict(zip(addrs, configs)), lines)


# -- topics -------------------------------------------------------------------------------------


@command(
    "topicList",
    "Fetch all topic list from name server.",
    arg(
        "-c",
        "--clusterModel",
        dest="cluster_model",
        action="store_true",
        help="with clusters and consumer groups",
    ),
)
async def topic_list(ctx: Context, args: argparse.Namespace) -> Result:
    admin = ctx.admin
    topics = await admin.topic_list()
    if not args.cluster_model:
        return Result({"topicList": topics}, list(topics))
    rows: list[dict[str, str]] = []
    for topic in topics:
        if topic.startswith((RETRY_PREFIX, DLQ_PREFIX)):
            continue
        try:
            route = await admin.topic_route(topic)
            groups = await admin.consumer_groups_of(topic) or [""]
        except TopicNotExistError:
            continue  # deleted since the list was fetched
        cluster = route.broker_datas[0].cluster if route.broker_datas else ""
        rows.extend({"clusterName": cluster, "topic": topic, "consumerGroup": group} for group in groups)
    return Result(
        {"topics": rows},
        table(["#Cluster Name", "#Topic", "#Consumer Group"], [list(row.values()) for row in rows]),
    )


@command(
    "topicRoute",
    "Examine topic route info.",
    TOPIC,
    arg("-l", "--list", dest="list_format", action="store_true", help="use list format to print data"),
)
async def topic_route(ctx: Context, args: argparse.Namespace) -> Result:
    route = await ctx.admin.topic_route(args.topic)
    document = route.to_wire()
    if not args.list_format:
        return Result(document, _json_lines(document))
    queues = {q.broker_name: q for q in route.queue_datas}
    rows: list[list[Any]] = []
    total_read = total_write = 0
    for data in sorted(route.broker_datas, key=lambda d: d.broker_name):
        queue = queues.get(data.broker_name)
        if queue is None:
            continue
        total_read += queue.read_queue_nums
        total_write += queue.write_queue_nums
        addrs = ",".join(f"{bid}={addr}" for bid, addr in sorted(data.broker_addrs.items()))
        rows.append(
            [data.cluster, data.broker_name, addrs, queue.read_queue_nums, queue.write_queue_nums, queue.perm]
        )
    lines = table(["#ClusterName", "#BrokerName", "#BrokerAddrs", "#ReadQueue", "#WriteQueue", "#Perm"], rows)
    lines.append(f"Total: {len(rows)} brokers, {total_read} read queues, {total_write} write queues")
    return Result(document, lines)


def _json_lines(document: Any) -> list[str]:
    return json.dumps(document, indent=2, ensure_ascii=False).splitlines()


@command("topicStatus", "Examine topic Status info.", TOPIC)
async def topic_status(ctx: Context, args: argparse.Namespace) -> Result:
    stats = await ctx.admin.topic_stats(args.topic)
    rows = []
    entries = []
    for queue, offsets in stats.items():
        updated = human_time(offsets.last_update_timestamp) if offsets.last_update_timestamp > 0 else ""
        rows.append([queue.broker_name, queue.queue_id, offsets.min_offset, offsets.max_offset, updated])
        entries.append({**queue_json(queue), **offsets.to_wire()})
    return Result(
        {"topic": args.topic, "offsetTable": entries},
        table(["#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated"], rows),
    )


@command(
    "updateTopic",
    "Update or create topic.",
    BROKER_ADDR,
    arg("-c", "--clusterName", dest="cluster", help="create topic to which cluster"),
    TOPIC,
    arg(
        "-r", "--readQueueNums", dest="read_queues", type=positive_int, default=8, help="read queue nums (8)"
    ),
    arg(
        "-w",
        "--writeQueueNums",
        dest="write_queues",
        type=positive_int,
        default=8,
        help="write queue nums (8)",
    ),
    arg("-p", "--perm", type=int, choices=(2, 4, 6), default=6, help="permission: 2 W, 4 R, 6 RW (6)"),
    arg("-o", "--order", default=False, help="ordered topic (false)", **BOOL),
    arg("-u", "--unit", default=False, help="is unit topic (false)", **BOOL),
    arg("-s", "--hasUnitSub", dest="unit_sub", default=False, help="has unit sub (false)", **BOOL),
    arg("-a", "--attributes", help="attribute(+a=b,+c=d,-e)"),
    one_of=BROKER_OR_CLUSTER,
)
async def update_topic(ctx: Context, args: argparse.Namespace) -> Result:
    admin = ctx.admin
    sys_flag = (TopicSysFlag.UNIT if args.unit else 0) | (TopicSysFlag.UNIT_SUB if args.unit_sub else 0)
    try:
        attributes = parse_modification(args.attributes.strip() if args.attributes else None)
    except AttributeRefused as exc:
        raise CommandFailed(str(exc)) from None
    addrs = await target_masters(admin, args)
    known = await admin.brokers_by_addr()
    lines: list[str] = []
    for addr in addrs:
        # Waiting comes once, below, for the brokers the name servers know.
        config = await admin.create_topic(
            args.topic,
            read_queue_nums=args.read_queues,
            write_queue_nums=args.write_queues,
            broker_addr=addr,
            perm=args.perm,
            order=args.order,
            topic_sys_flag=int(sys_flag),
            attributes=attributes,
            wait=0,
        )
        lines.append(f"create topic to {addr} success.")
    broker_names = {known[addr].broker_name for addr in addrs if addr in known}
    document: dict[str, Any] = {"brokerAddrs": addrs, "topicConfig": config.to_wire()}
    if args.order:
        queue_nums = dict.fromkeys(sorted(broker_names), config.write_queue_nums)
        # One broker (-b) keeps the other brokers' entries; a cluster (-c) replaces them all.
        order_conf = await admin.update_order_topic_conf(
            config.topic_name, queue_nums, merge=bool(args.broker_addr)
        )
        scope = "broker" if args.broker_addr else "cluster"
        lines.append(f"set {scope} orderConf. isOrder={str(args.order).lower()}, orderConf=[{order_conf}]")
        document["orderConf"] = order_conf
    config.attributes = attributes  # printed as the tool sent them, as Apache's prints them
    lines.append(_topic_config_text(config))
    # A broker this name server does not know cannot be waited for: its route never shows here.
    if broker_names:
        try:
            await admin.wait_for_route(
                config.topic_name,
                brokers=broker_names,
                read_queue_nums=config.read_queue_nums,
                write_queue_nums=config.write_queue_nums,
                perm=config.perm,
                timeout=ROUTE_WAIT,
            )
        except ClientError:
            raise CommandFailed(
                f"topic {config.topic_name!r} was updated but the name servers do not route the new "
                f"settings after {ROUTE_WAIT:g}s"
            ) from None
    return Result(document, lines)


def _topic_config_text(config: TopicConfig) -> str:
    return (
        f"TopicConfig [topicName={config.topic_name}, readQueueNums={config.read_queue_nums}, "
        f"writeQueueNums={config.write_queue_nums}, perm={perm_text(config.perm)}, "
        f"topicFilterType={config.topic_filter_type}, topicSysFlag={config.topic_sys_flag}, "
        f"order={str(config.order).lower()}, attributes={_java_map(config.attributes)}]"
    )


def _java_map(mapping: dict[str, str]) -> str:
    return "{" + ", ".join(f"{key}={value}" for key, value in mapping.items()) + "}"


@command(
    "deleteTopic",
    "Delete topic from broker and NameServer.",
    TOPIC,
    arg(
        "-c", "--clusterName", dest="cluster", help="delete topic from which cluster (default: every cluster)"
    ),
)
async def delete_topic(ctx: Context, args: argparse.Namespace) -> Result:
    await ctx.admin.delete_topic(args.topic, cluster=args.cluster)
    where = args.cluster if args.cluster is not None else "*"
    return Result(
        {"topic": args.topic, "clusterName": args.cluster},
        [
            f"delete topic [{args.topic}] from cluster [{where}] success.",
            f"delete topic [{args.topic}] from NameServer success.",
        ],
    )


# -- subscription groups ------------------------------------------------------------------------


@command(
    "updateSubGroup",
    "Update or create subscription group.",
    arg("-b", "--brokerAddr", dest="broker_addr", help="create subscription group to which broker"),
    arg("-c", "--clusterName", dest="cluster", help="create subscription group to which cluster"),
    GROUP,
    arg("-s", "--consumeEnable", dest="consume_enable", default=True, help="consume enable (true)", **BOOL),
    arg("-m", "--consumeFromMinEnable", dest="from_min", default=True, help="from min offset (true)", **BOOL),
    arg("-d", "--consumeBroadcastEnable", dest="broadcast", default=True, help="broadcast (true)", **BOOL),
    arg(
        "-q",
        "--retryQueueNums",
        dest="retry_queues",
        type=non_negative_int,
        default=1,
        help="retry queue nums (1)",
    ),
    arg(
        "-r",
        "--retryMaxTimes",
        dest="retry_max",
        type=non_negative_int,
        default=16,
        help="retry max times (16)",
    ),
    arg(
        "-i",
        "--brokerId",
        dest="broker_id",
        type=non_negative_int,
        default=0,
        help="consume from which broker id (0)",
    ),
    arg(
        "-w",
        "--whichBrokerWhenConsumeSlowly",
        dest="slow_broker",
        type=non_negative_int,
        default=1,
        help="which broker id when consume slowly (1)",
    ),
    arg(
        "-a",
        "--notifyConsumerIdsChanged",
        dest="notify",
        default=True,
        help="notify consumer ids changed (true)",
        **BOOL,
    ),
    one_of=BROKER_OR_CLUSTER,
)
async def update_sub_group(ctx: Context, args: argparse.Namespace) -> Result:
    config = SubscriptionGroupConfig(
        group_name=args.group,
        consume_enable=args.consume_enable,
        consume_from_min_enable=args.from_min,
        consume_broadcast_enable=args.broadcast,
        retry_queue_nums=args.retry_queues,
        retry_max_times=args.retry_max,
        broker_id=args.broker_id,
        which_broker_when_consume_slowly=args.slow_broker,
        notify_consumer_ids_changed_enable=args.notify,
    )
    addrs = await target_masters(ctx.admin, args)
    lines = []
    for addr in addrs:
        await ctx.admin.update_subscription_group(config, broker_addr=addr)
        lines.append(f"create subscription group to {addr} success.")
    wire = config.to_wire()
    lines.append("SubscriptionGroupConfig [" + ", ".join(f"{k}={_java(v)}" for k, v in wire.items()) + "]")
    return Result({"brokerAddrs": addrs, "subscriptionGroupConfig": wire}, lines)


def _java(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


# -- RocketMQ 5 -----------------------------------------------------------------------------


def _json_list(path: str, model: type[TopicConfig] | type[SubscriptionGroupConfig]) -> list[Any] | None:
    """A file's JSON list of configs (Apache's ``-f``); None when the file does not exist."""
    file = Path(path)
    if not file.exists():
        return None
    data = json.loads(file.read_bytes() or b"[]")
    if not isinstance(data, list):
        raise ValueError(f"{path} must hold a JSON list")
    return [model.model_validate(item) for item in data]


def _batch_options(what: str) -> tuple[tuple[tuple[str, ...], dict[str, Any]], ...]:
    return (
        arg("-b", "--brokerAddr", dest="broker_addr", help=f"create {what} to which broker"),
        arg("-c", "--clusterName", dest="cluster", help=f"create {what} to which cluster"),
        arg(
            "-f", "--filename", dest="filename", required=True, help=f"path to a JSON list of {what} configs"
        ),
    )


async def _batch_update(
    ctx: Context,
    args: argparse.Namespace,
    model: type[TopicConfig] | type[SubscriptionGroupConfig],
    send: Callable[..., Awaitable[list[str]]],
    what: str,
) -> Result:
    """updateTopicList / updateSubGroupList: one request per master with the file's configs."""
    configs = _json_list(args.filename, model)
    if configs is None:
        return Result({"error": "no such file"}, [f"the file path {args.filename} does not exists"])
    if not configs:
        return Result({"brokerAddrs": []}, [])
    addrs = await send(configs, cluster=args.cluster, broker_addr=args.broker_addr)
    lines = [f"submit batch of {what} to {addr} success, please check the result later." for addr in addrs]
    return Result({"brokerAddrs": addrs, "count": len(configs)}, lines)


@command(
    "updateTopicList", "create or update topic in batch", *_batch_options("topic"), one_of=BROKER_OR_CLUSTER
)
async def update_topic_list(ctx: Context, args: argparse.Namespace) -> Result:
    return await _batch_update(ctx, args, TopicConfig, ctx.admin.create_topics, "topic config")


@command(
    "updateSubGroupList",
    "Update or create subscription group in batch",
    *_batch_options("subscription group"),
    one_of=BROKER_OR_CLUSTER,
)
async def update_sub_group_list(ctx: Context, args: argparse.Namespace) -> Result:
    # Apache words the line per target as here: -b "group config", -c "subscription group config".
    what = "group config" if args.broker_addr else "subscription group config"
    return await _batch_update(ctx, args, SubscriptionGroupConfig, ctx.admin.update_subscription_groups, what)


@command(
    "setConsumeMode",
    "Set consume message mode. pull/pop etc.",
    arg("-b", "--brokerAddr", dest="broker_addr", help="create subscription group to which broker"),
    arg("-c", "--clusterName", dest="cluster", help="create subscription group to which cluster"),
    arg("-t", "--topicName", dest="topic", required=True, help="topic name"),
    GROUP,
    arg("-m", "--mode", dest="mode", required=True, choices=("PULL", "POP"), help="consume mode. PULL/POP"),
    arg(
        "-q",
        "--popShareQueueNum",
        dest="share",
        type=int,
        default=0,
        help="num of queue which share in pop mode",
    ),
    one_of=BROKER_OR_CLUSTER,
)
async def set_consume_mode(ctx: Context, args: argparse.Namespace) -> Result:
    addrs = await ctx.admin.set_message_request_mode(
        args.topic,
        args.group,
        args.mode,
        pop_share_queue_num=args.share,
        cluster=args.cluster,
        broker_addr=args.broker_addr,
    )
    lines = []
    for addr in addrs:
        lines.append(f"set consume mode to {addr} success.")
        lines.append(
            f"topic[{args.topic}] group[{args.group}] consume mode[{args.mode}] popShareQueueNum[{args.share}]"
        )
    return Result({"brokerAddrs": addrs, "topic": args.topic, "group": args.group, "mode": args.mode}, lines)


@command(
    "deleteSubGroup",
    "Delete subscription group from broker.",
    arg("-b", "--brokerAddr", dest="broker_addr", help="delete subscription group from which broker"),
    arg("-c", "--clusterName", dest="cluster", help="delete subscription group from which cluster"),
    GROUP,
    arg(
        "-r", "--removeOffset", dest="remove_offset", default=False, help="remove offsets too (false)", **BOOL
    ),
    one_of=BROKER_OR_CLUSTER,
)
async def delete_sub_group(ctx: Context, args: argparse.Namespace) -> Result:
    admin = ctx.admin
    lines = []
    if args.broker_addr:
        await admin.delete_subscription_group(
            args.group, broker_addr=args.broker_addr, remove_offsets=args.remove_offset
        )
        lines.append(f"delete subscription group [{args.group}] from broker [{args.broker_addr}] success.")
        return Result({"group": args.group, "brokerAddrs": [args.broker_addr]}, lines)
    masters = await admin.master_addrs(args.cluster)
    await admin.delete_subscription_group(args.group, cluster=args.cluster, remove_offsets=args.remove_offset)
    lines.extend(
        f"delete subscription group [{args.group}] from broker [{addr}] in cluster [{args.cluster}] success."
        for addr in masters
    )
    # Its retry and dead-letter topics go too; they may never have existed.
    for topic in (retry_topic(args.group), dlq_topic(args.group)):
        with contextlib.suppress(MQError):
            await admin.delete_topic(topic, cluster=args.cluster)
            lines.append(f"delete topic [{topic}] from cluster [{args.cluster}] success.")
    return Result({"group": args.group, "brokerAddrs": masters}, lines)


# -- consumption --------------------------------------------------------------------------------


@command(
    "consumerProgress",
    "Query consumers's progress, speed.",
    arg("-g", "--groupName", dest="group", help="consumer group name (default: every group)"),
    arg("-t", "--topicName", dest="topic", help="topic name (default: every topic of the group)"),
)
async def consumer_progress(ctx: Context, args: argparse.Namespace) -> Result:
    admin = ctx.admin
    if args.group is None:
        return await _all_groups_progress(admin)
    stats = await admin.consume_stats(args.group, args.topic)
    rows = []
    entries = []
    diff_total = 0
    for queue, wrapper in stats.offset_table.items():
        diff = wrapper.broker_offset - wrapper.consumer_offset
        diff_total += diff
        last = date_time(wrapper.last_timestamp) if wrapper.last_timestamp else "N/A"
        rows.append(
            [
                queue.topic,
                queue.broker_name,
                queue.queue_id,
                wrapper.broker_offset,
                wrapper.consumer_offset,
                diff,
                last,
            ]
        )
        entries.append(
            {
                **queue_json(queue),
                "brokerOffset": wrapper.broker_offset,
                "consumerOffset": wrapper.consumer_offset,
                "diff": diff,
                "lastTimestamp": wrapper.last_timestamp,
            }
        )
    headers = ["#Topic", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset", "#Diff", "#LastTime"]
    lines = table(headers, rows)
    lines += ["", f"Consume TPS: {stats.consume_tps:.2f}", f"Diff Total: {diff_total}"]
    document = {
        "consumerGroup": args.group,
        "offsetTable": entries,
        "consumeTps": stats.consume_tps,
        "diffTotal": diff_total,
    }
    return Result(document, lines)


async def _all_groups_progress(admin: Admin) -> Result:
    """One line per consumer group (found through its retry topic), as RocketMQ's tool does."""
    groups = [t[len(RETRY_PREFIX) :] for t in await admin.topic_list() if t.startswith(RETRY_PREFIX)]
    rows = []
    entries = []
    for group in groups:
        try:
            stats = await admin.consume_stats(group)
            tps, diff_total = (
                stats.consume_tps,
                sum(w.broker_offset - w.consumer_offset for w in stats.offset_table.values()),
            )
        except MQError:
            tps, diff_total = 0.0, 0
        try:
            conn: ConsumerConnection | None = await admin.consumer_connections(group)
        except MQError:
            conn = None
        count = len(conn.connection_set) if conn is not None else 0
        version = type_desc = model = ""
        if conn is not None and count:
            version = version_desc(min(c.version for c in conn.connection_set))
            type_desc = "PULL" if conn.consume_type == "CONSUME_ACTIVELY" else "PUSH"
            model = str(conn.message_model or "") if type_desc == "PUSH" else ""
        rows.append([group, count, version if count else "OFFLINE", type_desc, model, int(tps), diff_total])
        entries.append(
            {
                "group": group,
                "count": count,
                "version": version,
                "consumeType": type_desc,
                "messageModel": model,
                "consumeTps": tps,
                "diffTotal": diff_total,
            }
        )
    headers = ["#Group", "#Count", "#Version", "#Type", "#Model", "#TPS", "#Diff Total"]
    return Result({"groups": entries}, table(headers, rows))


@command(
    "consumerConnection",
    "Query consumer's socket connection, client version and subscription.",
    arg("-g", "--consumerGroup", dest="group", required=True, help="consumer group name"),
    arg("-b", "--brokerAddr", dest="broker_addr", help="broker address"),
)
async def consumer_connection(ctx: Context, args: argparse.Namespace) -> Result:
    conn = await ctx.admin.consumer_connections(args.group, broker_addr=args.broker_addr)
    rows = [[c.client_id, c.client_addr, c.language, version_desc(c.version)] for c in conn.connection_set]
    lines = table(["#ClientId", "#ClientAddr", "#Language", "#Version"], rows)
    lines += ["", "Below is subscription:"]
    lines += table(
        ["#Topic", "#SubExpression"], [[s.topic, s.sub_string] for s in conn.subscription_table.values()]
    )
    lines += [
        "",
        f"ConsumeType: {conn.consume_type}",
        f"MessageModel: {conn.message_model}",
        f"ConsumeFromWhere: {conn.consume_from_where}",
    ]
    return Result(conn.to_wire(), lines)


@command(
    "resetOffsetByTime",
    "Reset consumer offset by timestamp (without client restart).",
    arg("-g", "--group", required=True, help="the consumer group"),
    TOPIC,
    arg(
        "-s",
        "--timestamp",
        required=True,
        help="now | currentTimeMillis | yyyy-MM-dd#HH:mm:ss:SSS (now: to the end of every queue)",
    ),
    arg("-f", "--force", default=True, help="also move offsets forward (true)", **BOOL),
)
async def reset_offset_by_time(ctx: Context, args: argparse.Namespace) -> Result:
    text = args.timestamp.strip()
    millis = -1 if text == "now" else _timestamp(text)
    offsets = await ctx.admin.reset_offset_by_time(
        args.group, args.topic, -1 if millis < 0 else millis / 1000, force=args.force
    )
    lines = [
        f"rollback consumer offset by specified group[{args.group}], topic[{args.topic}], "
        f"force[{str(args.force).lower()}], timestamp(string)[{text}], timestamp(long)[{millis}]"
    ]
    rows = [[queue.broker_name, queue.queue_id, offset] for queue, offset in offsets.items()]
    lines += table(["#brokerName", "#queueId", "#offset"], rows)
    document = {
        "group": args.group,
        "topic": args.topic,
        "force": args.force,
        "timestamp": millis,
        "offsetTable": [{**queue_json(q), "offset": offset} for q, offset in offsets.items()],
    }
    return Result(document, lines)


def _timestamp(text: str) -> int:
    try:
        return timestamp_millis(text)
    except argparse.ArgumentTypeError as exc:
        raise CommandFailed(str(exc)) from None


# -- messages -----------------------------------------------------------------------------------


def message_block(msg: MessageExt, body_dir: Path) -> list[str]:
    """The fields RocketMQ's queryMsgById prints; the body is written to a file, as there."""
    body_dir.mkdir(parents=True, exist_ok=True)
    body_path = body_dir / msg.msg_id
    body_path.write_bytes(msg.body)
    pairs = [
        ("OffsetID:", msg.offset_msg_id),
        ("MsgId:", msg.msg_id),
        ("Topic:", msg.topic),
        ("Tags:", f"[{msg.tags}]"),
        ("Keys:", f"[{' '.join(msg.keys)}]" if msg.keys else "[None]"),
        ("Queue ID:", msg.queue_id),
        ("Queue Offset:", msg.queue_offset),
        ("CommitLog Offset:", msg.commit_log_offset),
        ("Reconsume Times:", msg.reconsume_times),
        ("Born Timestamp:", human_time(msg.born_timestamp)),
        ("Store Timestamp:", human_time(msg.store_timestamp)),
        ("Born Host:", msg.born_host),
        ("Store Host:", msg.store_host),
        ("System Flag:", msg.sys_flag),
        ("Properties:", "{" + ", ".join(f"{k}={v}" for k, v in msg.properties.items()) + "}"),
        ("Message Body Path:", body_path),
    ]
    return [f"{name:<20} {value}" for name, value in pairs]


BODY_DIR = arg(
    "--body-dir",
    type=Path,
    default=Path(tempfile.gettempdir()) / "rocketmq" / "msgbodys",
    help="where message bodies are written (default: <tmp>/rocketmq/msgbodys)",
)


@command(
    "queryMsgById",
    "Query Message by Id.",
    arg("-i", "--msgId", dest="msg_ids", required=True, help="message id(s), comma-separated"),
    arg("-t", "--topic", help="topic name: needed for a unique (client) message id"),
    BODY_DIR,
)
async def query_msg_by_id(ctx: Context, args: argparse.Namespace) -> Result:
    ids = [item.strip() for item in args.msg_ids.split(",") if item.strip()]
    if not ids:
        raise CommandFailed("no message id given")
    messages = []
    lines: list[str] = []
    for msg_id in ids:
        if args.topic:
            msg = await ctx.admin.query_message_by_id(args.topic, msg_id)
        else:
            msg = await _view_by_offset_id(ctx.admin, msg_id)
        messages.append(message_json(msg))
        if not args.json:  # the JSON document carries the body itself
            lines += [*message_block(msg, args.body_dir), ""]
    return Result({"messages": messages}, lines)


async def _view_by_offset_id(admin: Admin, msg_id: str) -> MessageExt:
    """The message an offset msgId names, asked only of a broker the name server knows: a
    unique (client) id decodes to a meaningless address, which must not be dialled."""
    try:
        addr, _ = decode_offset_msg_id(msg_id)
    except MQError:
        addr = ""
    if addr not in await admin.brokers_by_addr():
        raise CommandFailed(
            f"{msg_id} is not an offset message id of a known broker; "
            "for a unique (client) message id give the topic: -t TOPIC"
        )
    return await admin.view_message(msg_id)


@command(
    "queryMsgByKey",
    "Query Message by Key.",
    TOPIC,
    arg("-k", "--msgKey", dest="key", required=True, help="message key"),
)
async def query_msg_by_key(ctx: Context, args: argparse.Namespace) -> Result:
    found = await ctx.admin.query_messages_by_key(args.topic, args.key, max_num=QUERY_MAX_NUM)
    rows = [[msg.msg_id, msg.queue_id, msg.queue_offset] for msg in found]
    return Result(
        {"messages": [message_json(msg) for msg in found]},
        table(["#Message ID", "#QID", "#Offset"], rows),
    )


@command(
    "queryMsgByOffset",
    "Query Message by offset.",
    TOPIC,
    arg("-b", "--brokerName", dest="broker_name", required=True, help="broker name"),
    arg("-i", "-q", "--queueId", dest="queue_id", type=non_negative_int, required=True, help="queue id"),
    arg("-o", "--offset", type=non_negative_int, required=True, help="queue offset"),
    BODY_DIR,
)
async def query_msg_by_offset(ctx: Context, args: argparse.Namespace) -> Result:
    queue = MessageQueue(topic=args.topic, broker_name=args.broker_name, queue_id=args.queue_id)
    puller = await ctx.puller()
    result = await puller.pull(queue, args.offset, 1)
    if result.status is not PullStatus.FOUND or not result.messages:
        raise CommandFailed(
            f"no message at offset {args.offset} of {queue_text(queue)} ({result.status.name}; "
            f"the queue holds offsets {result.min_offset}..{result.max_offset - 1})"
        )
    msg = result.messages[0]
    lines = [] if args.json else message_block(msg, args.body_dir)
    return Result({"messages": [message_json(msg)]}, lines)


async def read_queue(
    puller: PullClient,
    queue: MessageQueue,
    start: int,
    end: int,
    expression: str,
    on_status: Callable[[str], None],
    limit: int | None = None,
) -> list[MessageExt]:
    """Messages of ``queue`` in ``[start, end)`` matching ``expression`` (at most ``limit``),
    telling ``on_status`` how the reading went as RocketMQ's tools print it."""
    found: list[MessageExt] = []
    offset = start
    while offset < end and (limit is None or len(found) < limit):
        want = min(PULL_BATCH, end - offset)
        result = await puller.pull(queue, offset, want, expression=expression)
        if result.status is PullStatus.FOUND:
            batch = [m for m in result.messages if m.queue_offset < end]
            found.extend(batch if limit is None else batch[: limit - len(found)])
        elif result.status is PullStatus.NO_MATCHED_MSG:
            on_status(f"{queue_text(queue)} no matched msg. status={result.status.name}, offset={offset}")
        else:
            on_status(
                f"{queue_text(queue)} print msg finished. status={result.status.name}, "
                f"offset={result.next_begin_offset}"
            )
            break
        if result.next_begin_offset <= offset:
            break
        offset = result.next_begin_offset
    return found


def _message_line(msg: MessageExt, charset: str, print_body: bool) -> str:
    body = msg.body.decode(charset, errors="replace") if print_body else "NOT PRINT BODY"
    return f"MSGID: {msg.msg_id} {message_text(msg)} BODY: {body}"


async def _bounds(
    puller: PullClient, queue: MessageQueue, begin: int | None, end: int | None
) -> tuple[int, int]:
    low = (
        await puller.search_offset(queue, begin / 1000)
        if begin is not None
        else await puller.min_offset(queue)
    )
    high = (
        await puller.search_offset(queue, end / 1000) if end is not None else await puller.max_offset(queue)
    )
    return low, high


@command(
    "printMsg",
    "Print Message Detail.",
    TOPIC,
    arg("-c", "--charsetName", dest="charset", default="UTF-8", help="charset of the bodies (UTF-8)"),
    arg(
        "-s",
        "--subExpression",
        dest="expression",
        default="*",
        help="subscribe expression (eg: TagA || TagB)",
    ),
    begin_timestamp("-b"),
    END_TIMESTAMP,
    arg("-d", "--printBody", dest="print_body", default=True, help="print the bodies (true)", **BOOL),
)
async def print_msg(ctx: Context, args: argparse.Namespace) -> Result:
    _check_charset(args.charset)
    puller = await ctx.puller()
    lines: list[str] = []
    queues = []
    for queue in await puller.queues(args.topic):
        low, high = await _bounds(puller, queue, args.begin, args.end)
        lines.append(f"minOffset={low}, maxOffset={high}, {queue_text(queue)}")
        found = await read_queue(puller, queue, low, high, args.expression, lines.append)
        lines.extend(_message_line(msg, args.charset, args.print_body) for msg in found)
        lines.append("-" * 56)
        queues.append(
            {
                **queue_json(queue),
                "minOffset": low,
                "maxOffset": high,
                "messages": [message_json(m, args.charset) for m in found],
            }
        )
    return Result({"queues": queues}, lines)


def _check_charset(name: str) -> None:
    try:
        codecs.lookup(name)
    except LookupError:
        raise CommandFailed(f"unknown charset {name!r}") from None


@command(
    "consumeMessage",
    "Consume message (read without committing).",
    TOPIC,
    arg("-b", "--brokerName", dest="broker_name", help="broker name"),
    arg("-i", "-q", "--queueId", dest="queue_id", type=non_negative_int, help="queue id (needs -b)"),
    arg("-o", "--offset", type=non_negative_int, help="queue offset (needs -i)"),
    arg("-g", "--consumerGroup", dest="group", help="consumer group name to pull as"),
    begin_timestamp("-s"),
    END_TIMESTAMP,
    arg(
        "-c", "--MessageNumber", dest="count", type=positive_int, default=128, help="number of messages (128)"
    ),
)
async def consume_message(ctx: Context, args: argparse.Namespace) -> Result:
    if args.queue_id is not None and args.broker_name is None:
        raise CommandFailed("set the broker name (-b) to choose a queue (-i)")
    if args.offset is not None and args.queue_id is None:
        raise CommandFailed("set the queue id (-i) to start from an offset (-o)")
    now = int(time.time() * 1000)
    if any(moment is not None and moment > now for moment in (args.begin, args.end)):
        raise CommandFailed("the begin and end timestamps must not be in the future")
    if args.begin is not None and args.end is not None and args.begin > args.end:
        raise CommandFailed("the begin timestamp is after the end timestamp")
    if args.group:
        puller = PullClient(args.group, ctx.namesrv, options=ctx.options)
        await puller.start()
    else:
        puller = await ctx.puller()
    try:
        if args.queue_id is not None:
            queues = [MessageQueue(topic=args.topic, broker_name=args.broker_name, queue_id=args.queue_id)]
        else:
            queues = await puller.queues(args.topic)
            if args.broker_name is not None:
                queues = [q for q in queues if q.broker_name == args.broker_name]
                if not queues:
                    raise CommandFailed(f"broker {args.broker_name!r} has no queue of topic {args.topic!r}")
        lines: list[str] = []
        consumed: list[MessageExt] = []
        for queue in queues:
            remaining = args.count - len(consumed)
            if remaining <= 0:
                break
            low, high = await _bounds(puller, queue, args.begin, args.end)
            if args.offset is not None:
                if args.offset > high:
                    lines.append(f"{queue_text(queue)} no matched msg, offset={args.offset}")
                    continue
                low = max(low, args.offset)
            found = await read_queue(puller, queue, low, high, "*", lines.append, limit=remaining)
            if found:
                lines.append("Consume ok")
                lines.extend(_message_line(msg, "utf-8", True) for msg in found)
            consumed.extend(found)
    finally:
        if args.group:
            await puller.shutdown()
    return Result({"messages": [message_json(m) for m in consumed]}, lines)


@command(
    "sendMessage",
    "Send a message.",
    arg("-t", "--topic", required=True, help="topic name"),
    arg("-p", "--body", required=True, help="UTF-8 string format of the message body"),
    arg("-k", "--key", help="message keys (space-separated)"),
    arg("-c", "--tags", help="message tags"),
    arg("-b", "--broker", dest="broker_name", help="send message to target broker"),
    arg(
        "-i", "--qid", dest="queue_id", type=non_negative_int, help="send message to target queue (needs -b)"
    ),
)
async def send_message(ctx: Context, args: argparse.Namespace) -> Result:
    if args.queue_id is not None and args.broker_name is None:
        raise CommandFailed("Broker name must be set if the queue is chosen!")
    keys = args.key.split() if args.key else None
    msg = Message(args.topic, args.body.encode(), tags=args.tags or None, keys=keys)
    # A fresh producer group per run, as RocketMQ's tool uses the current time.
    async with Producer(str(int(time.time() * 1000)), ctx.namesrv, options=ctx.options) as producer:
        queue = None
        if args.broker_name is not None:
            candidates = [q for q in await producer.queues(args.topic) if q.broker_name == args.broker_name]
            if args.queue_id is not None:
                candidates = [q for q in candidates if q.queue_id == args.queue_id]
            if not candidates:
                raise CommandFailed(
                    f"topic {args.topic!r} has no such writable queue on broker {args.broker_name!r}"
                )
            queue = random.choice(candidates)
        result = await producer.send(msg, queue=queue)
    row = [result.queue.broker_name, result.queue.queue_id, result.status.value, result.msg_id]
    document = {
        **queue_json(result.queue),
        "sendStatus": result.status.value,
        "msgId": result.msg_id,
        "offsetMsgId": result.offset_msg_id,
        "queueOffset": result.queue_offset,
    }
    return Result(document, table(["#Broker Name", "#QID", "#Send Result", "#MsgId"], [row]))


# -- name server KV config ----------------------------------------------------------------------


@command(
    "updateKvConfig",
    "Create or update KV config.",
    arg("-s", "--namespace", required=True, help="the namespace"),
    arg("-k", "--key", required=True, help="the key name"),
    arg("-v", "--value", required=True, help="the key value"),
)
async def update_kv_config(ctx: Context, args: argparse.Namespace) -> Result:
    await ctx.admin.update_kv_config(args.namespace, args.key, args.value)
    return Result(
        {"namespace": args.namespace, "key": args.key, "value": args.value},
        ["create or update kv config to namespace success."],
    )


@command(
    "deleteKvConfig",
    "Delete KV config.",
    arg("-s", "--namespace", required=True, help="the namespace"),
    arg("-k", "--key", required=True, help="the key name"),
)
async def delete_kv_config_cmd(ctx: Context, args: argparse.Namespace) -> Result:
    await ctx.admin.delete_kv_config(args.namespace, args.key)
    return Result(
        {"namespace": args.namespace, "key": args.key}, ["delete kv config from namespace success."]
    )


# -- ACL ----------------------------------------------------------------------------------------


@command(
    "updateAclConfig",
    "Update acl config yaml file in broker.",
    arg("-b", "--brokerAddr", dest="broker_addr", help="update acl config file to which broker"),
    arg("-c", "--clusterName", dest="cluster", help="update acl config file to which cluster"),
    arg("-a", "--accessKey", dest="access_key", required=True, help="set accessKey in acl config file"),
    arg("-s", "--secretKey", dest="secret_key", help="set secretKey in acl config file"),
    arg(
        "-w", "--whiteRemoteAddress", dest="white", help="set white ip Address for account in acl config file"
    ),
    arg("-i", "--defaultTopicPerm", dest="topic_perm", help="set default topicPerm in acl config file"),
    arg("-u", "--defaultGroupPerm", dest="group_perm", help="set default GroupPerm in acl config file"),
    arg("-t", "--topicPerms", dest="topic_perms", help="set topicPerms list, eg: topicA=DENY,topicD=SUB"),
    arg("-g", "--groupPerms", dest="group_perms", help="set groupPerms list, eg: groupD=DENY,groupD=SUB"),
    arg(
        "-m", "--admin", dest="admin", default=False, help="set admin flag in acl config file (false)", **BOOL
    ),
    one_of=BROKER_OR_CLUSTER,
)
async def update_acl_config(ctx: Context, args: argparse.Namespace) -> Result:
    def perms(text: str | None) -> list[str] | None:
        return [p.strip() for p in text.split(",") if p.strip()] if text is not None else None

    addrs = await target_masters(ctx.admin, args)
    for addr in addrs:
        await ctx.admin.update_acl_config(
            addr,
            args.access_key,
            secret_key=args.secret_key,
            white_remote_address=args.white,
            admin=args.admin,
            default_topic_perm=args.topic_perm,
            default_group_perm=args.group_perm,
            topic_perms=perms(args.topic_perms),
            group_perms=perms(args.group_perms),
        )
    lines = [f"create or update plain access config to {addr} success." for addr in addrs]
    return Result({"accessKey": args.access_key, "brokerAddrs": addrs}, lines)


@command(
    "deleteAclConfig",
    "Delete Acl Config Account in broker.",
    arg("-b", "--brokerAddr", dest="broker_addr", help="delete acl config account from which broker"),
    arg("-c", "--clusterName", dest="cluster", help="delete acl config account from which cluster"),
    arg(
        "-a",
        "--accessKey",
        dest="access_key",
        required=True,
        help="set accessKey in acl config file for deleting",
    ),
    one_of=BROKER_OR_CLUSTER,
)
async def delete_acl_config(ctx: Context, args: argparse.Namespace) -> Result:
    addrs = await target_masters(ctx.admin, args)
    for addr in addrs:
        await ctx.admin.delete_acl_config(addr, args.access_key)
    lines = [f"delete plain access config account from {addr} success." for addr in addrs]
    return Result({"accessKey": args.access_key, "brokerAddrs": addrs}, lines)


@command(
    "updateGlobalWhiteAddr",
    "Update global white address for acl Config File in broker.",
    arg("-b", "--brokerAddr", dest="broker_addr", help="update global white address to which broker"),
    arg("-c", "--clusterName", dest="cluster", help="update global white address to which cluster"),
    arg(
        "-g",
        "--globalWhiteRemoteAddresses",
        dest="addresses",
        required=True,
        help="set globalWhiteRemoteAddress list, eg: 10.10.103.*,192.168.0.*",
    ),
    arg("-p", "--aclFileFullPath", dest="acl_file", help="which ACL file of the broker (default: its first)"),
    one_of=BROKER_OR_CLUSTER,
)
async def update_global_white_addr(ctx: Context, args: argparse.Namespace) -> Result:
    patterns = [p.strip() for p in args.addresses.split(",") if p.strip()]
    addrs = await target_masters(ctx.admin, args)
    for addr in addrs:
        await ctx.admin.update_global_white_addrs(addr, patterns, acl_file=args.acl_file)
    lines = [f"update global white remote addresses to {addr} success." for addr in addrs]
    return Result({"globalWhiteRemoteAddresses": patterns, "brokerAddrs": addrs}, lines)


@command(
    "clusterAclConfigVersion",
    "List all of acl config version information in cluster.",
    arg("-b", "--brokerAddr", dest="broker_addr", help="query acl config version for which broker"),
    arg("-c", "--clusterName", dest="cluster", help="query acl config version for specified cluster"),
    one_of=BROKER_OR_CLUSTER,
)
async def cluster_acl_config_version(ctx: Context, args: argparse.Namespace) -> Result:
    rows: list[list[Any]] = []
    documents = []
    for addr in await target_masters(ctx.admin, args):
        info = await ctx.admin.acl_config_version(addr)
        per_file = json.loads(info.all_acl_file_version or "{}") or {"": json.loads(info.version)}
        for path, version in per_file.items():
            stamp = int(version.get("timestamp", 0))
            rows.append(
                [
                    info.cluster_name,
                    info.broker_name,
                    info.broker_addr,
                    path,
                    version.get("counter", 0),
                    date_time(stamp) if stamp else "-",
                ]
            )
        documents.append(info.model_dump(by_alias=True))
    headers = [
        "#Cluster Name",
        "#Broker Name",
        "#Broker Addr",
        "#AclFilePath",
        "#AclConfigVersionNum",
        "#AclLastUpdateTime",
    ]
    return Result(documents, table(headers, rows))


@command(
    "getAclConfig",
    "List all of acl config information in cluster (secrets included; admin accounts only).",
    arg("-b", "--brokerAddr", dest="broker_addr", help="query acl config for which broker"),
    arg("-c", "--clusterName", dest="cluster", help="query acl config for specified cluster"),
    one_of=BROKER_OR_CLUSTER,
)
async def get_acl_config(ctx: Context, args: argparse.Namespace) -> Result:
    documents = {}
    lines = []
    for addr in await target_masters(ctx.admin, args):
        config = await ctx.admin.acl_config(addr)
        documents[addr] = config
        lines.append(f"{addr}:")
        lines.extend(f"  {line}" for line in json.dumps(config, indent=2, sort_keys=True).splitlines())
    return Result(documents, lines)


# -- command line -------------------------------------------------------------------------------


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
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["help"]:
        # RocketMQ's "mqadmin help <command>"
        args_list = [*args_list[1:2], "--help"]
    args = parser.parse_args(args_list)
    cmd = COMMANDS[args.command]
    for group in cmd.one_of:
        given = [name for name in group if getattr(args, name) is not None]
        if len(given) != 1:
            options = " or ".join(_option_of(cmd, name) for name in group)
            subparsers[cmd.name].error(f"give exactly one of {options}")
    return args


def _option_of(cmd: Command, dest: str) -> str:
    for flags, kwargs in cmd.arguments:
        if kwargs.get("dest", flags[-1].lstrip("-")) == dest:
            return flags[0]
    return dest


async def execute(args: argparse.Namespace) -> Result:
    if not args.namesrv:
        raise CommandFailed("no name server address: give -n host:9876 or set NAMESRV_ADDR")
    access_key, secret_key = tool_credentials()
    options = ClientOptions(
        request_timeout=args.timeout,
        access_key=access_key,
        secret_key=secret_key,
        tls=args.tls,
        tls_ca_file=args.tls_ca_file,
        tls_verify=not args.tls_no_verify,
    )
    async with Context(args.namesrv, options) as ctx:
        return await COMMANDS[args.command].run(ctx, args)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
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


# -- message traces ---------------------------------------------------------------------------


@command(
    "queryMsgTraceById",
    "query a message trace",
    arg("-i", "--msgId", dest="msg_id", required=True, help="Message Id"),
    arg("-t", "--traceTopic", dest="trace_topic", help="The name value of message trace topic"),
)
async def query_msg_trace_by_id(ctx: Context, args: argparse.Namespace) -> Result:
    from aiorocketmq.protocol.names import TRACE_TOPIC

    from .msg_trace import trace_lines, trace_views

    msg_id = args.msg_id.strip()
    topic = (args.trace_topic or TRACE_TOPIC).strip()
    found = await ctx.admin.query_messages_by_key(topic, msg_id, max_num=QUERY_MAX_NUM)
    views = trace_views(msg_id, found)
    return Result({"traces": [view.to_json() for view in views]}, trace_lines(views))


# The rest of Apache's commands register themselves in COMMANDS on import.
from . import mqadmin_ops  # noqa: E402, F401

if __name__ == "__main__":
    # Run as ``python -m``, this file is ``__main__``: the command modules register in the
    # importable ``aiorocketmq.tools.mqadmin``, so its ``main`` is the one with every command.
    from aiorocketmq.tools.mqadmin import main as installed_main

    sys.exit(installed_main())
