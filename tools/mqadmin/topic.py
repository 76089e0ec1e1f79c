"""Topic commands: list, route, status, create or update (one or a batch), delete,
permission, ordered-topic configuration, the clusters serving a topic and a queue allocation."""

from __future__ import annotations

import argparse
import json
from typing import Any

from aiorocketmq.client import ClientError
from aiorocketmq.client.allocation import allocate_averagely
from aiorocketmq.protocol.body import ORDER_TOPIC_CONFIG, TopicConfig
from aiorocketmq.protocol.codes import Perm, TopicSysFlag
from aiorocketmq.protocol.errors import TopicNotExistError
from aiorocketmq.protocol.names import DLQ_PREFIX, RETRY_PREFIX
from aiorocketmq.protocol.topic_attributes import AttributeRefused, parse_modification

from ..cli import CommandFailed, human_time, positive_int, queue_json, table
from .command import (
    BOOL,
    BROKER_ADDR,
    BROKER_OR_CLUSTER,
    TOPIC,
    CommandSet,
    Context,
    Result,
    arg,
    batch_options,
    batch_update,
    target_masters,
)

commands = CommandSet()

#: How long ``updateTopic`` waits until the name servers route the new settings.
ROUTE_WAIT = 10.0


def perm_text(perm: int) -> str:
    """RocketMQ's ``PermName.perm2String``: ``R``, ``W``, ``X`` (inherit) or ``-``."""
    return (
        ("R" if perm & Perm.READ else "-")
        + ("W" if perm & Perm.WRITE else "-")
        + ("X" if perm & Perm.INHERIT else "-")
    )


@commands.add(
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


@commands.add(
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


@commands.add("topicStatus", "Examine topic Status info.", TOPIC)
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


@commands.add(
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


@commands.add(
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


@commands.add(
    "updateTopicList", "create or update topic in batch", *batch_options("topic"), one_of=BROKER_OR_CLUSTER
)
async def update_topic_list(ctx: Context, args: argparse.Namespace) -> Result:
    return await batch_update(ctx, args, TopicConfig, ctx.admin.create_topics, "topic config")


@commands.add(
    "updateOrderConf",
    "Create or update or delete order conf.",
    TOPIC,
    arg("-v", "--orderConf", dest="order_conf", help="set order conf [eg. brokerName1:num;brokerName2:num]"),
    arg(
        "-m",
        "--method",
        required=True,
        choices=("put", "get", "delete"),
        help="option type [eg. put|get|delete",
    ),
)
async def update_order_conf(ctx: Context, args: argparse.Namespace) -> Result:
    admin = ctx.admin
    if args.method == "get":
        conf = await admin.kv_config(ORDER_TOPIC_CONFIG, args.topic)
        line = f"get orderConf success. topic=[{args.topic}], orderConf=[{conf}] "
    elif args.method == "put":
        if not args.order_conf:
            raise CommandFailed("please set orderConf with option -v.")
        conf = args.order_conf
        await admin.update_kv_config(ORDER_TOPIC_CONFIG, args.topic, conf)
        line = f"update orderConf success. topic=[{args.topic}], orderConf=[{conf}]"
    else:
        conf = None
        await admin.delete_kv_config(ORDER_TOPIC_CONFIG, args.topic)
        line = f"delete orderConf success. topic=[{args.topic}]"
    return Result({"topic": args.topic, "method": args.method, "orderConf": conf}, [line])


@commands.add(
    "updateTopicPerm",
    "Update topic perm.",
    arg("-b", "--brokerAddr", dest="broker_addr", help="create topic to which broker"),
    arg("-c", "--clusterName", dest="cluster", help="create topic to which cluster"),
    TOPIC,
    arg(
        "-p",
        "--perm",
        type=int,
        required=True,
        choices=(2, 4, 6),
        help="set topic's permission(2|4|6), intro[2:W; 4:R; 6:RW]",
    ),
    one_of=BROKER_OR_CLUSTER,
)
async def update_topic_perm(ctx: Context, args: argparse.Namespace) -> Result:
    admin = ctx.admin
    route = await admin.topic_route(args.topic)
    known = await admin.brokers_by_addr()
    queues = {q.broker_name: q for q in route.queue_datas}
    lines = []
    changed = []
    for addr in await target_masters(ctx.admin, args):
        name = known[addr].broker_name if addr in known else None
        queue = queues.get(name) if name is not None else None
        if queue is None:
            raise CommandFailed(f"topic {args.topic!r} is not on broker {addr}")
        # Apache's tool compares only for one broker (-b); for a cluster it always writes.
        if args.broker_addr and queue.perm == args.perm:
            lines.append("new perm equals to the old one!")
            continue
        await admin.create_topic(
            args.topic,
            read_queue_nums=queue.read_queue_nums,
            write_queue_nums=queue.write_queue_nums,
            broker_addr=addr,
            perm=args.perm,
            topic_sys_flag=queue.topic_sys_flag,
            wait=0,
        )
        lines.append(f"update topic perm from {queue.perm} to {args.perm} in {addr} success.")
        changed.append(addr)
    return Result({"topic": args.topic, "perm": args.perm, "brokerAddrs": changed}, lines)


@commands.add("topicClusterList", "get cluster info for topic.", TOPIC)
async def topic_cluster_list(ctx: Context, args: argparse.Namespace) -> Result:
    route = await ctx.admin.topic_route(args.topic)
    info = await ctx.admin.cluster_info()
    names = {d.broker_name for d in route.broker_datas}
    clusters = sorted(c for c, brokers in info.cluster_addr_table.items() if names & set(brokers))
    return Result({"topic": args.topic, "clusters": clusters}, clusters)


@commands.add(
    "allocateMQ",
    "Allocate MQ.",
    TOPIC,
    arg("-i", "--ipList", dest="ip_list", required=True, help="ipList"),
)
async def allocate_mq(ctx: Context, args: argparse.Namespace) -> Result:
    queues = await ctx.admin.queues(args.topic)
    ips = sorted({ip.strip() for ip in args.ip_list.split(",") if ip.strip()})
    result = {ip: [q.to_wire() for q in allocate_averagely("", ip, queues, ips)] for ip in ips}
    document = {"result": result}
    return Result(document, [json.dumps(document, separators=(",", ":"))])
