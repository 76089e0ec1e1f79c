"""The rest of RocketMQ 4.9's ``mqadmin`` commands: broker and name-server configuration,
topic permission, statistics, diagnosis of producers and consumers, offset cloning and
skipping, send round trips, consume-queue inspection, store clean-ups on demand, monitoring
and exports. Names, option letters and printed text follow Apache's tool (its fixed-width
``printf`` layouts), so scripts that read its output read ours.

The commands register in :data:`tools.mqadmin.COMMANDS` when this module is imported.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from aiorocketmq.client import Message, MessageExt, MessageQueue, Producer
from aiorocketmq.client.allocation import allocate_averagely
from aiorocketmq.client.operations import (
    add_write_perm,
    broker_consume_stats,
    broker_stats,
    clone_group_offset,
    consume_message_directly,
    consumer_running_info,
    namesrv_config,
    producer_table,
    query_consume_queue,
    store_maintenance,
    update_broker_config,
    update_namesrv_config,
    wipe_write_perm,
)
from aiorocketmq.protocol import fastjson
from aiorocketmq.protocol.body import (
    ORDER_TOPIC_CONFIG,
    BrokerData,
    ClusterInfo,
    ConsumeType,
    ProducerConnection,
    SubscriptionGroupConfig,
)
from aiorocketmq.protocol.codes import MASTER_ID, RequestCode, ResponseCode
from aiorocketmq.protocol.errors import MQError, TopicNotExistError
from aiorocketmq.protocol.headers import GetProducerConnectionListRequestHeader
from aiorocketmq.protocol.names import (
    AUTO_CREATE_TOPIC,
    BENCHMARK_TOPIC,
    DLQ_PREFIX,
    NOT_ALLOWED_SEND_TOPICS,
    OFFSET_MOVED_EVENT,
    RETRY_PREFIX,
    SELF_TEST_TOPIC,
    SYSTEM_GROUP_PREFIX,
    TOOLS_CONSUMER_GROUP,
)
from aiorocketmq.protocol.operations import (
    PROP_CONSUME_ORDERLY,
    PROP_CONSUME_TYPE,
    PROP_CONSUMER_START_TIMESTAMP,
    BrokerStatsData,
    ConsumerRunningInfo,
    ProcessQueueInfo,
)
from aiorocketmq.protocol.static_topic import (
    TopicConfigAndQueueMapping,
    TopicQueueMappingDetail,
    allocate,
    block_round_up,
    remap,
)

from .cli import CommandFailed, date_time, message_text, non_negative_int, positive_int
from .mqadmin import (
    BODY_DIR,
    BOOL,
    BROKER_OR_CLUSTER,
    END_TIMESTAMP,
    TOPIC,
    Context,
    Result,
    _bounds,
    _check_charset,
    _view_by_offset_id,
    arg,
    begin_timestamp,
    command,
    message_block,
    read_queue,
    target_masters,
    version_desc,
)

EXPORT_DIR = "/tmp/rocketmq/export"
SEPARATOR = "======================================"


def pretty_json(document: Any) -> str:
    """fastjson's pretty format (``JSON.toJSONString(obj, true)``): tabs, no space after colons."""
    return json.dumps(document, indent="\t", separators=(",", ":"), ensure_ascii=False)


def java_bool(value: bool) -> str:
    return "true" if value else "false"


def java_time(millis: int) -> str:
    """RocketMQ's ``UtilAll.timeMillisToHumanString``: ``yyyyMMddHHmmssSSS`` local time."""
    moment = time.localtime(millis / 1000)
    return time.strftime("%Y%m%d%H%M%S", moment) + f"{millis % 1000:03d}"


async def _addrs(ctx: Context, args: argparse.Namespace) -> list[str]:
    return await target_masters(ctx.admin, args)


# -- brokers ------------------------------------------------------------------------------------


@command(
    "updateBrokerConfig",
    "Update broker's config.",
    arg("-b", "--brokerAddr", dest="broker_addr", help="update which broker"),
    arg("-c", "--clusterName", dest="cluster", help="update which cluster"),
    arg("-k", "--key", required=True, help="config key"),
    arg("-v", "--value", required=True, help="config value"),
    one_of=BROKER_OR_CLUSTER,
)
async def update_broker_config_cmd(ctx: Context, args: argparse.Namespace) -> Result:
    addrs = await _addrs(ctx, args)
    for addr in addrs:
        await update_broker_config(ctx.admin, addr, {args.key: args.value})
    lines = [f"update broker config success, {addr}" for addr in addrs]
    return Result({"brokerAddrs": addrs, "key": args.key, "value": args.value}, lines)


@command(
    "brokerConsumeStats",
    "Fetch broker consume stats data.",
    arg("-b", "--brokerAddr", dest="broker_addr", required=True, help="Broker address"),
    arg(
        "-t",
        "--timeoutMillis",
        dest="timeout_ms",
        type=positive_int,
        default=50000,
        help="request timeout Millis",
    ),
    arg("-l", "--level", type=int, default=0, help="threshold of print diff"),
    arg("-o", "--order", default=False, help="order topic", **BOOL),
)
async def broker_consume_stats_cmd(ctx: Context, args: argparse.Namespace) -> Result:
    stats = await broker_consume_stats(
        ctx.admin, args.broker_addr, order=args.order, timeout=args.timeout_ms / 1000
    )
    header = f"{'#Topic':<64}  {'#Group':<64}  {'#Broker Name':<32}  {'#QID':<4}  {'#Broker Offset':<20}  "
    header += f"{'#Consumer Offset':<20}  {'#Diff':<20}  #LastTime"
    lines = [header]
    rows = []
    for entry in stats.consume_stats_list:
        for group, per_topic in entry.items():
            for consume_stats in per_topic:
                for queue, w in sorted(consume_stats.offset_table.items()):
                    diff = w.broker_offset - w.consumer_offset
                    if w.last_timestamp <= 0 or diff < args.level:
                        continue
                    lines.append(
                        f"{queue.topic:<64}  {group:<64}  {queue.broker_name:<32}  {queue.queue_id:<4d}  "
                        f"{w.broker_offset:<20d}  {w.consumer_offset:<20d}  {diff:<20d}  "
                        f"{date_time(w.last_timestamp)}"
                    )
                    rows.append({"group": group, **queue.to_wire(), **w.to_wire(), "diff": diff})
    lines += ["", f"Diff Total: {stats.total_diff}"]
    return Result({"brokerAddr": args.broker_addr, "rows": rows, "totalDiff": stats.total_diff}, lines)


@command(
    "cleanExpiredCQ",
    "Clean expired ConsumeQueue on broker.",
    arg("-b", "--brokerAddr", dest="broker_addr", help="Broker address"),
    arg("-c", "--cluster", dest="cluster", help="clustername"),
)
async def clean_expired_cq(ctx: Context, args: argparse.Namespace) -> Result:
    return await _maintenance(ctx, args, RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE)


@command(
    "deleteExpiredCommitLog",
    "Delete expired CommitLog files.",
    arg("-b", "--brokerAddr", dest="broker_addr", help="Broker address"),
    arg("-c", "--cluster", dest="cluster", help="clustername"),
)
async def delete_expired_commit_log(ctx: Context, args: argparse.Namespace) -> Result:
    return await _maintenance(ctx, args, RequestCode.DELETE_EXPIRED_COMMITLOG)


@command(
    "cleanUnusedTopic",
    "Clean unused topic on broker.",
    arg("-b", "--brokerAddr", dest="broker_addr", help="Broker address"),
    arg("-c", "--cluster", dest="cluster", help="cluster name"),
)
async def clean_unused_topic(ctx: Context, args: argparse.Namespace) -> Result:
    return await _maintenance(ctx, args, RequestCode.CLEAN_UNUSED_TOPIC)


async def _maintenance(ctx: Context, args: argparse.Namespace, code: RequestCode) -> Result:
    # Without -b or -c: every master, as Apache's tool does.
    addrs = [args.broker_addr] if args.broker_addr else await ctx.admin.master_addrs(args.cluster)
    remarks = {}
    for addr in addrs:
        remarks[addr] = await store_maintenance(ctx.admin, addr, code)
    return Result({"brokerAddrs": addrs, "remarks": remarks}, ["success"])


@command(
    "producer",
    "Query producer's instances, connection, status, etc.",
    arg("-b", "--broker", dest="broker_addr", required=True, help="broker address"),
)
async def producer_cmd(ctx: Context, args: argparse.Namespace) -> Result:
    table = await producer_table(ctx.admin, args.broker_addr)
    lines = []
    for group, producers in table.data.items():
        for p in producers:
            lines.append(
                f"producer group ({group}) instance : clientId={p.client_id},remoteIP={p.remote_ip}, "
                f"language={p.language}, version={p.version}, lastUpdateTimestamp={p.last_update_timestamp}"
            )
    return Result(table.to_wire(), lines)


@command(
    "sendMsgStatus",
    "send msg to broker.",
    arg("-b", "--brokerName", dest="broker_name", required=True, help="Broker Name"),
    arg(
        "-s", "--messageSize", dest="size", type=positive_int, default=128, help="Message Size, Default: 128"
    ),
    arg("-c", "--count", type=positive_int, default=50, help="send message count, Default: 50"),
)
async def send_msg_status(ctx: Context, args: argparse.Namespace) -> Result:
    body = b"x" * args.size
    lines = []
    results = []
    async with Producer(f"PID_SMSC_{int(time.time() * 1000)}", ctx.namesrv, options=ctx.options) as producer:
        # A first message warms the route and the connection up; it is not reported.
        await producer.send(Message(args.broker_name, body))
        for _ in range(args.count):
            began = time.perf_counter()
            result = await producer.send(Message(args.broker_name, body))
            rt = int((time.perf_counter() - began) * 1000)
            queue = result.queue
            lines.append(
                f"rt={rt}ms, SendResult=SendResult [sendStatus={result.status.value}, msgId={result.msg_id}, "
                f"offsetMsgId={result.offset_msg_id}, messageQueue=MessageQueue [topic={queue.topic}, "
                f"brokerName={queue.broker_name}, queueId={queue.queue_id}], queueOffset={result.queue_offset}]"
            )
            results.append({"rt": rt, "msgId": result.msg_id, "queueOffset": result.queue_offset})
    return Result({"results": results}, lines)


# -- name servers -------------------------------------------------------------------------------


@command("getNamesrvConfig", "Get configs of name server.")
async def get_namesrv_config(ctx: Context, args: argparse.Namespace) -> Result:
    configs = await namesrv_config(ctx.admin)
    lines = []
    for addr, config in configs.items():
        lines.append(f"============{addr}============")
        lines.extend(f"{key:<50}=  {value}" for key, value in config.items())
    return Result(configs, lines)


@command(
    "updateNamesrvConfig",
    "Update configs of name server.",
    arg("-k", "--key", required=True, help="config key"),
    arg("-v", "--value", required=True, help="config value"),
)
async def update_namesrv_config_cmd(ctx: Context, args: argparse.Namespace) -> Result:
    addrs = await update_namesrv_config(ctx.admin, {args.key: args.value})
    return Result(
        {"namesrvAddrs": addrs, "key": args.key, "value": args.value},
        [f"update name server config success!{_java_list(addrs)}", f"{args.key} : {args.value}"],
    )


def _java_list(items: list[str]) -> str:
    return "[" + ", ".join(items) + "]"


@command(
    "wipeWritePerm",
    "Wipe write perm of broker in all name server you defined in the -n param.",
    arg("-b", "--brokerName", dest="broker_name", required=True, help="broker name"),
)
async def wipe_write_perm_cmd(ctx: Context, args: argparse.Namespace) -> Result:
    counts = await wipe_write_perm(ctx.admin, args.broker_name)
    lines = [
        f"wipe write perm of broker[{args.broker_name}] in name server[{addr}] OK, {count}"
        for addr, count in counts.items()
    ]
    return Result({"brokerName": args.broker_name, "wipeTopicCount": counts}, lines)


@command(
    "addWritePerm",
    "Add write perm of broker in all name server you defined in the -n param.",
    arg("-b", "--brokerName", dest="broker_name", required=True, help="broker name"),
)
async def add_write_perm_cmd(ctx: Context, args: argparse.Namespace) -> Result:
    counts = await add_write_perm(ctx.admin, args.broker_name)
    lines = [
        f"add write perm of broker[{args.broker_name}] in name server[{addr}] OK, {count}"
        for addr, count in counts.items()
    ]
    return Result({"brokerName": args.broker_name, "addTopicCount": counts}, lines)


@command(
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


# -- topics -------------------------------------------------------------------------------------


@command(
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
    for addr in await _addrs(ctx, args):
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


@command("topicClusterList", "get cluster info for topic.", TOPIC)
async def topic_cluster_list(ctx: Context, args: argparse.Namespace) -> Result:
    route = await ctx.admin.topic_route(args.topic)
    info = await ctx.admin.cluster_info()
    names = {d.broker_name for d in route.broker_datas}
    clusters = sorted(c for c, brokers in info.cluster_addr_table.items() if names & set(brokers))
    return Result({"topic": args.topic, "clusters": clusters}, clusters)


@command(
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


@command(
    "statsAll",
    "Topic and Consumer tps stats.",
    arg("-a", "--activeTopic", dest="active", action="store_true", help="print active topic only"),
    arg("-t", "--topic", help="print select topic only"),
)
async def stats_all(ctx: Context, args: argparse.Namespace) -> Result:
    admin = ctx.admin
    topics = [args.topic] if args.topic else await admin.topic_list()
    header = f"{'#Topic':<64}  {'#Consumer Group':<64} {'#Accumulation':>12} {'#InTPS':>11} {'#OutTPS':>11} "
    header += f"{'#InMsg24Hour':>14} {'#OutMsg24Hour':>14}"
    lines = [header]
    rows = []
    for topic in sorted(topics):
        if topic.startswith((RETRY_PREFIX, DLQ_PREFIX)):
            continue
        try:
            masters = await admin._route_masters(topic)
        except MQError:
            continue
        in_tps, in_day = await _stats_sum(ctx, masters.values(), "TOPIC_PUT_NUMS", topic)
        try:
            groups = await admin.consumer_groups_of(topic)
        except MQError:
            groups = []
        if not groups:
            if not args.active or in_day > 0:
                lines.append(
                    f"{topic:<64}  {'':<64} {0:>12d} {in_tps:>11.2f} {'':>11} {in_day:>14d} {'NO_CONSUMER':>14}"
                )
                rows.append({"topic": topic, "inTps": in_tps, "inMsg24Hour": in_day})
            continue
        for group in groups:
            try:
                accumulation = (await admin.consume_stats(group, topic)).diff_total()
            except MQError:
                accumulation = 0
            out_tps, out_day = await _stats_sum(ctx, masters.values(), "GROUP_GET_NUMS", f"{topic}@{group}")
            if args.active and in_day <= 0 and out_day <= 0:
                continue
            lines.append(
                f"{topic:<64}  {group:<64} {accumulation:>12d} {in_tps:>11.2f} {out_tps:>11.2f} "
                f"{in_day:>14d} {out_day:>14d}"
            )
            rows.append(
                {
                    "topic": topic,
                    "group": group,
                    "accumulation": accumulation,
                    "inTps": in_tps,
                    "outTps": out_tps,
                    "inMsg24Hour": in_day,
                    "outMsg24Hour": out_day,
                }
            )
    return Result({"stats": rows}, lines)


async def _stats_sum(ctx: Context, addrs: Any, name: str, key: str) -> tuple[float, int]:
    """Minute TPS and day count of one counter, summed over brokers (absent counts as 0)."""
    tps, day = 0.0, 0
    for addr in addrs:
        try:
            data: BrokerStatsData = await broker_stats(ctx.admin, addr, name, key)
        except MQError:
            continue
        tps += data.stats_minute.tps
        # Apache's compute24HourSum: the day, else the hour, else the minute (a broker's day
        # window counts only completed hours).
        day += data.stats_day.sum or data.stats_hour.sum or data.stats_minute.sum
    return tps, day


@command(
    "checkMsgSendRT",
    "check message send response time.",
    TOPIC,
    arg("-a", "--amount", type=positive_int, default=100, help="message amount | default 100"),
    arg("-s", "--size", type=positive_int, default=128, help="message size | default 128 Byte"),
)
async def check_msg_send_rt(ctx: Context, args: argparse.Namespace) -> Result:
    body = b"x" * args.size
    lines = [f"{'#Broker Name':<32}  {'#QID':<4}  {'#Send Result':<20}    #RT"]
    rts = []
    async with Producer(f"PID_CMSRT_{int(time.time() * 1000)}", ctx.namesrv, options=ctx.options) as producer:
        queues = await producer.queues(args.topic)
        if not queues:
            raise CommandFailed(f"topic {args.topic!r} has no writable queue")
        for i in range(args.amount):
            queue = queues[i % len(queues)]
            began = time.perf_counter()
            try:
                await producer.send(Message(args.topic, body), queue=queue)
                ok = True
            except MQError:
                ok = False
            rt = int((time.perf_counter() - began) * 1000)
            rts.append(rt)
            lines.append(f"{queue.broker_name:<32}  {queue.queue_id:<4d}  {java_bool(ok):<20}    {rt}")
    # The first send also opens the connection: left out of the average, as Apache does.
    avg = sum(rts[1:]) / (len(rts) - 1) if len(rts) > 1 else float(rts[0])
    lines.append(f"Avg RT: {avg:.2f}")
    return Result({"rts": rts, "avgRt": avg}, lines)


@command(
    "clusterRT",
    "List All clusters Message Send RT.",
    arg("-a", "--amount", type=positive_int, default=100, help="message amount | default 100"),
    arg("-s", "--size", type=positive_int, default=128, help="message size | default 128 Byte"),
    arg("-c", "--cluster", help="cluster name | default display all cluster"),
    arg(
        "-p",
        "--print log",
        dest="print_log",
        default=False,
        metavar="print log",
        help="print as tlog | default false",
        **{k: v for k, v in BOOL.items() if k != "metavar"},
    ),
    arg(
        "-m",
        "--machine room",
        dest="machine_room",
        default="noname",
        metavar="machine room",
        help="machine room name | default noname",
    ),
    arg("-i", "--interval", type=positive_int, default=10, help="print interval | default 10 seconds"),
    arg(
        "--rounds",
        type=non_negative_int,
        default=0,
        help="stop after this many rounds (ours; default 0: run until interrupted)",
    ),
)
async def cluster_rt(ctx: Context, args: argparse.Namespace) -> Result:
    info = await ctx.admin.cluster_info()
    clusters = [args.cluster] if args.cluster else sorted(info.cluster_addr_table)
    if args.cluster and args.cluster not in info.cluster_addr_table:
        raise CommandFailed(f"cluster {args.cluster!r} is unknown")
    body = b"x" * args.size
    rows: list[dict[str, Any]] = []
    if not args.print_log:
        _emit(
            f"{'#Cluster Name':<24}  {'#Broker Name':<24}  {'#RT':<4}  {'#successCount':<8}  {'#failCount':<8}"
        )
    async with Producer(
        f"PID_ClusterRTCommand_{int(time.time() * 1000)}", ctx.namesrv, options=ctx.options
    ) as producer:
        done = 0
        while True:
            for cluster in clusters:
                for name in sorted(info.cluster_addr_table.get(cluster, [])):
                    ok = failed = 0
                    elapsed = 0.0
                    for i in range(args.amount):
                        began = time.perf_counter()
                        try:
                            await producer.send(Message(name, body))
                            ok += 1
                        except MQError:
                            failed += 1
                        if i > 0:
                            elapsed += (time.perf_counter() - began) * 1000
                    rt = elapsed / (args.amount - 1) if args.amount > 1 else elapsed
                    if args.print_log:
                        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
                        _emit(f"{stamp}|{args.machine_room}|{cluster}|{name}|{round(rt)}")
                    else:
                        _emit(f"{cluster:<24}  {name:<24}  {rt:<8.2f}  {ok:<16d}  {failed:<16d}")
                    rows.append(
                        {"cluster": cluster, "brokerName": name, "rt": rt, "success": ok, "fail": failed}
                    )
            done += 1
            if args.rounds and done >= args.rounds:
                break
            await asyncio.sleep(args.interval)
    return Result({"rounds": rows}, [])


def _emit(line: str) -> None:
    # A command that runs until interrupted prints as it goes, not at the end.
    print(line, flush=True)


# -- producers and consumers --------------------------------------------------------------------


@command(
    "producerConnection",
    "Query producer's socket connection and client version.",
    arg("-g", "--producerGroup", dest="group", required=True, help="producer group name"),
    TOPIC,
)
async def producer_connection(ctx: Context, args: argparse.Namespace) -> Result:
    masters = await ctx.admin._route_masters(args.topic)
    if not masters:
        raise CommandFailed(f"topic {args.topic!r} has no master broker")
    # One broker of the topic's route, as Apache's tool asks.
    addr = masters[sorted(masters)[0]]
    response = await ctx.admin.instance.call(
        addr,
        RequestCode.GET_PRODUCER_CONNECTION_LIST,
        GetProducerConnectionListRequestHeader(producer_group=args.group),
    )
    conn = ProducerConnection.decode(response.body)
    lines = [
        f"{i:04d}  {c.client_id:<32} {c.client_addr:<22} {c.language:<8} {version_desc(c.version)}"
        for i, c in enumerate(conn.connection_set, 1)
    ]
    return Result(conn.to_wire(), lines)


def running_info_text(info: ConsumerRunningInfo) -> list[str]:
    """Java's ``ConsumerRunningInfo.formatString()`` (4.9)."""
    lines = ["#Consumer Properties#"]
    lines += [f"{k:<40}: {v}" for k, v in info.properties.items()]
    lines += ["", "", "#Consumer Subscription#"]
    lines += [
        f"{i:03d} Topic: {s.topic:<40} ClassFilter: {java_bool(s.class_filter_mode):<8} SubExpression: {s.sub_string}"
        for i, s in enumerate(info.subscription_set, 1)
    ]
    lines += [
        "",
        "",
        "#Consumer Offset#",
        f"{'#Topic':<64}  {'#Broker Name':<32}  {'#QID':<4}  {'#Consumer Offset':<20}",
    ]
    lines += [
        f"{q.topic:<32}  {q.broker_name:<32}  {q.queue_id:<4d}  {pq.commit_offset:<20d}"
        for q, pq in sorted(info.mq_table.items())
    ]
    lines += [
        "",
        "",
        "#Consumer MQ Detail#",
        f"{'#Topic':<64}  {'#Broker Name':<32}  {'#QID':<4}  {'#ProcessQueueInfo':<20}",
    ]
    lines += [
        f"{q.topic:<64}  {q.broker_name:<32}  {q.queue_id:<4d}  {_pq_text(pq)}"
        for q, pq in sorted(info.mq_table.items())
    ]
    lines += ["", "", "#Consumer RT&TPS#"]
    lines.append(
        f"{'#Topic':<64}  {'#Pull RT':>14} {'#Pull TPS':>14} {'#Consume RT':>14} {'#ConsumeOK TPS':>14} "
        f"{'#ConsumeFailed TPS':>18} {'#ConsumeFailedMsgsInHour':>25}"
    )
    lines += [
        f"{topic:<32}  {s.pull_rt:14.2f} {s.pull_tps:14.2f} {s.consume_rt:14.2f} {s.consume_ok_tps:14.2f} "
        f"{s.consume_failed_tps:18.2f} {s.consume_failed_msgs:25d}"
        for topic, s in sorted(info.status_table.items())
    ]
    if info.jstack is not None:
        lines += ["", "", "#Consumer jstack#", info.jstack]
    return lines


def _pq_text(pq: ProcessQueueInfo) -> str:
    """Java's ``ProcessQueueInfo.toString()``."""
    return (
        f"ProcessQueueInfo [commitOffset={pq.commit_offset}, cachedMsgMinOffset={pq.cached_msg_min_offset}, "
        f"cachedMsgMaxOffset={pq.cached_msg_max_offset}, cachedMsgCount={pq.cached_msg_count}, "
        f"cachedMsgSizeInMiB={pq.cached_msg_size_in_mib}, transactionMsgMinOffset={pq.transaction_msg_min_offset}, "
        f"transactionMsgMaxOffset={pq.transaction_msg_max_offset}, transactionMsgCount={pq.transaction_msg_count}, "
        f"locked={java_bool(pq.locked)}, tryUnlockTimes={pq.try_unlock_times}, "
        f"lastLockTimestamp={java_time(pq.last_lock_timestamp)}, droped={java_bool(pq.droped)}, "
        f"lastPullTimestamp={java_time(pq.last_pull_timestamp)}, "
        f"lastConsumeTimestamp={java_time(pq.last_consume_timestamp)}]"
    )


def _analyze(client_id: str, info: ConsumerRunningInfo) -> list[str]:
    """Java's ``ConsumerRunningInfo.analyzeProcessQueue``: queues that look stuck."""
    if info.properties.get(PROP_CONSUME_TYPE) != ConsumeType.CONSUME_PASSIVELY:
        return []
    now = int(time.time() * 1000)
    orderly = info.properties.get(PROP_CONSUME_ORDERLY) == "true"
    found = []
    for q, pq in sorted(info.mq_table.items()):
        mq = f"MessageQueue [topic={q.topic}, brokerName={q.broker_name}, queueId={q.queue_id}]"
        if orderly and not pq.locked:
            found.append(f"{client_id} {mq} can't lock for a while, {now - pq.last_lock_timestamp}ms")
        elif orderly and pq.droped and pq.try_unlock_times > 0:
            found.append(f"{client_id} {mq} unlock {pq.try_unlock_times} times, still failed")
        elif not orderly and now - pq.last_consume_timestamp > 60_000 and pq.cached_msg_count > 0:
            found.append(
                f"{client_id} {mq} can't consume for a while, maybe blocked, {now - pq.last_consume_timestamp}ms"
            )
    return found


def _same_subscription(infos: dict[str, ConsumerRunningInfo]) -> bool:
    """Java's ``analyzeSubscription``: push consumers up for 2 minutes must subscribe alike."""
    first = next(iter(infos.values()))
    push = first.properties.get(PROP_CONSUME_TYPE) == ConsumeType.CONSUME_PASSIVELY
    started = int(first.properties.get(PROP_CONSUMER_START_TIMESTAMP, "0") or 0)
    if not (push and time.time() * 1000 - started > 120_000):
        return True
    subs = [sorted((s.topic, s.sub_string) for s in i.subscription_set) for i in infos.values()]
    return all(s == subs[0] for s in subs) and bool(subs[-1])


@command(
    "consumerStatus",
    "Query consumer's internal data structure.",
    arg("-g", "--consumerGroup", dest="group", required=True, help="consumer group name"),
    arg("-i", "--clientId", dest="client_id", help="The consumer's client id"),
    arg("-b", "--brokerAddr", dest="broker_addr", help="broker address"),
    arg("-s", "--jstack", action="store_true", help="Run jstack command in the consumer progress"),
)
async def consumer_status(ctx: Context, args: argparse.Namespace) -> Result:
    admin = ctx.admin
    if args.client_id:
        info = await consumer_running_info(
            admin, args.group, args.client_id, jstack=args.jstack, broker_addr=args.broker_addr
        )
        return Result(info.to_wire() | {"mqTable": _mq_table(info)}, running_info_text(info))
    conn = await admin.consumer_connections(args.group, broker_addr=args.broker_addr)
    now = int(time.time() * 1000)
    lines = [f"{'#Index':<10} {'#ClientId':<40} {'#Version':<20} #ConsumerRunningInfoFile"]
    infos: dict[str, ConsumerRunningInfo] = {}
    for i, c in enumerate(sorted(conn.connection_set, key=lambda c: c.client_id), 1):
        try:
            info = await consumer_running_info(
                admin, args.group, c.client_id, jstack=args.jstack, broker_addr=args.broker_addr
            )
        except MQError as exc:
            lines.append(f"{c.client_id}: {exc}")
            continue
        infos[c.client_id] = info
        path = Path(str(now)) / c.client_id
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(running_info_text(info)) + "\n")
        lines.append(f"{i:<10d} {c.client_id:<40} {version_desc(c.version):<20} {path}")
    if infos:
        if _same_subscription(infos):
            ok = True  # RocketMQ 4.9 does not analyse rebalancing further
            lines += [
                "",
                "",
                "Same subscription in the same group of consumer",
                "",
                f"Rebalance {'OK' if ok else 'Failed'}",
            ]
            for client_id, info in infos.items():
                lines += _analyze(client_id, info)
        else:
            lines += ["", "", "WARN: Different subscription in the same group of consumer!!!"]
    return Result({cid: i.to_wire() | {"mqTable": _mq_table(i)} for cid, i in infos.items()}, lines)


def _mq_table(info: ConsumerRunningInfo) -> list[dict[str, Any]]:
    return [{**q.to_wire(), **pq.to_wire()} for q, pq in sorted(info.mq_table.items())]


@command(
    "cloneGroupOffset",
    "clone offset from other group.",
    arg("-s", "--srcGroup", dest="src", required=True, help="set source consumer group"),
    arg("-d", "--destGroup", dest="dest", required=True, help="set destination consumer group"),
    arg("-t", "--topic", required=True, help="set the topic"),
    arg("-o", "--offline", default=False, help="the group or the topic is offline", **BOOL),
)
async def clone_group_offset_cmd(ctx: Context, args: argparse.Namespace) -> Result:
    addrs = await clone_group_offset(ctx.admin, args.src, args.dest, args.topic, offline=args.offline)
    return Result(
        {"srcGroup": args.src, "destGroup": args.dest, "topic": args.topic, "brokerAddrs": addrs},
        [f"clone group offset success. srcGroup[{args.src}], destGroup=[{args.dest}], topic[{args.topic}]"],
    )


@command(
    "skipAccumulatedMessage",
    "Skip all messages that are accumulated (not consumed) currently.",
    arg("-g", "--group", required=True, help="set the consumer group"),
    arg("-t", "--topic", required=True, help="set the topic"),
    arg("-f", "--force", default=True, help="set the force rollback by timestamp switch[true|false]", **BOOL),
)
async def skip_accumulated_message(ctx: Context, args: argparse.Namespace) -> Result:
    offsets = await ctx.admin.reset_offset_by_time(args.group, args.topic, -1, force=args.force)
    lines = [f"{'#brokerName':<40}  {'#queueId':<40}  {'#offset':<40}"]
    lines += [f"{q.broker_name:<40}  {q.queue_id:<40d}  {o:<40d}" for q, o in offsets.items()]
    return Result({"offsetTable": [{**q.to_wire(), "offset": o} for q, o in offsets.items()]}, lines)


@command(
    "getConsumerConfig",
    "Get consumer config by subscription group name!",
    arg("-g", "--groupName", dest="group", required=True, help="subscription group name"),
)
async def get_consumer_config(ctx: Context, args: argparse.Namespace) -> Result:
    admin = ctx.admin
    info = await admin.cluster_info()
    lines = []
    found = {}
    for cluster in sorted(info.cluster_addr_table):
        for name in sorted(info.cluster_addr_table[cluster]):
            data = info.broker_addr_table.get(name)
            if data is None or MASTER_ID not in data.broker_addrs:
                continue
            response = await admin.instance.call(
                data.broker_addrs[MASTER_ID], RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG
            )
            table = fastjson.loads(response.body).get("subscriptionGroupTable", {})
            if args.group not in table:
                continue
            config = SubscriptionGroupConfig.model_validate(table[args.group])
            found[f"{cluster}:{name}"] = config.to_wire()
            lines.append(f"{'=' * 29}{cluster}:{name}{'=' * 29}")
            for field_name, field in SubscriptionGroupConfig.model_fields.items():
                value = getattr(config, field_name)
                lines.append(
                    f"{field.alias or field_name:<40}=  {java_bool(value) if isinstance(value, bool) else value}"
                )
    if not found:
        raise CommandFailed(f"no broker has subscription group {args.group!r}")
    return Result(found, lines)


# -- messages and queues ------------------------------------------------------------------------


def _track_lines(tracks: list[dict[str, str | None]]) -> str:
    return "".join(
        f"MessageTrack [consumerGroup={t['consumerGroup']}, trackType={t['trackType']}, "
        f"exceptionDesc={t['exceptionDesc'] or 'null'}]"
        for t in tracks
    )


async def message_tracks(ctx: Context, msg: MessageExt) -> list[dict[str, str | None]]:
    """Whether each group consuming the message's topic consumed it (Apache's MessageTrack)."""
    admin = ctx.admin
    tracks: list[dict[str, str | None]] = []
    for group in await admin.consumer_groups_of(msg.topic):
        track: dict[str, str | None] = {"consumerGroup": group, "trackType": "UNKNOWN", "exceptionDesc": None}
        try:
            conn = await admin.consumer_connections(group)
        except MQError as exc:
            track["trackType"] = "NOT_ONLINE"
            track["exceptionDesc"] = f"CODE: {int(ResponseCode.CONSUMER_NOT_ONLINE)}  DESC: {exc}"
            tracks.append(track)
            continue
        if conn.consume_type == ConsumeType.CONSUME_ACTIVELY:
            track["trackType"] = "PULL"
        else:
            try:
                stats = await admin.consume_stats(group, msg.topic)
                queue = MessageQueue(topic=msg.topic, broker_name=msg.broker_name, queue_id=msg.queue_id)
                wrapper = stats.offset_table.get(queue)
                consumed = wrapper is not None and wrapper.consumer_offset > msg.queue_offset
                track["trackType"] = "CONSUMED" if consumed else "NOT_CONSUME_YET"
            except MQError as exc:
                track["exceptionDesc"] = str(exc)
        tracks.append(track)
    return tracks


@command(
    "queryMsgByUniqueKey",
    "Query Message by Unique key.",
    arg("-i", "--msgId", dest="msg_id", required=True, help="Message Id"),
    arg("-t", "--topic", required=True, help="The topic of msg"),
    arg("-g", "--consumerGroup", dest="group", help="consumer group name (with -d: consume it again there)"),
    arg("-d", "--clientId", dest="client_id", help="The consumer's client id (with -g)"),
    arg("-a", "--showAll", dest="show_all", action="store_true", help="Print all message, the limit is 32"),
    BODY_DIR,
)
async def query_msg_by_unique_key(ctx: Context, args: argparse.Namespace) -> Result:
    admin = ctx.admin
    found = await admin._query(args.topic, args.msg_id, unique=True, max_num=32, begin=0, end=None)
    if not found:
        try:
            found = [await _view_by_offset_id(admin, args.msg_id)]
        except (MQError, CommandFailed):
            raise CommandFailed(f"no message {args.msg_id} in topic {args.topic!r}") from None
    if args.group and args.client_id:
        # Consumed again, now, by that one client (Apache's tool prints the verdict alone).
        result = await consume_message_directly(admin, args.group, args.client_id, found[-1])
        text = (
            f"ConsumeMessageDirectlyResult [order={java_bool(result.order)}, "
            f"autoCommit={java_bool(result.auto_commit)}, consumeResult={result.consume_result}, "
            f"remark={result.remark}, spentTimeMills={result.spent_time_mills}]"
        ).replace("remark=None", "remark=null")
        return Result(result.to_wire(), [text])
    shown = found if args.show_all else found[-1:]
    lines: list[str] = []
    documents = []
    for msg in shown:
        block = message_block(msg, args.body_dir)[2:]  # Apache's view starts at Topic
        tracks = await message_tracks(ctx, msg)
        lines += [*block, "", "", _track_lines(tracks)]
        documents.append(
            {
                "msgId": msg.msg_id,
                "topic": msg.topic,
                "queueId": msg.queue_id,
                "queueOffset": msg.queue_offset,
                "messageTracks": tracks,
            }
        )
    return Result({"messages": documents}, lines)


@command(
    "printMsgByQueue",
    "Print Message Detail.",
    TOPIC,
    arg("-a", "--brokerName", dest="broker_name", required=True, help="broker name"),
    arg("-i", "--queueId", dest="queue_id", type=non_negative_int, required=True, help="queue id"),
    arg("-c", "--charsetName", dest="charset", default="UTF-8", help="CharsetName(eg: UTF-8,GBK)"),
    arg(
        "-s", "--subExpression", dest="expression", default="*", help="Subscribe Expression(eg: TagA || TagB)"
    ),
    begin_timestamp("-b"),
    END_TIMESTAMP,
    arg(
        "-p",
        "--print msg",
        dest="print_msg",
        default=False,
        metavar="print msg",
        help="print msg. eg: true | false(default)",
        **{k: v for k, v in BOOL.items() if k != "metavar"},
    ),
    arg(
        "-d",
        "--printBody",
        dest="print_body",
        default=False,
        help="print body. eg: true | false(default)",
        **BOOL,
    ),
    arg("-f", "--calculate", default=False, help="calculate by tag. eg: true | false(default)", **BOOL),
)
async def print_msg_by_queue(ctx: Context, args: argparse.Namespace) -> Result:
    _check_charset(args.charset)
    puller = await ctx.puller()
    queue = MessageQueue(topic=args.topic, broker_name=args.broker_name, queue_id=args.queue_id)
    low, high = await _bounds(puller, queue, args.begin, args.end)
    lines: list[str] = []
    found = await read_queue(puller, queue, low, high, args.expression, lambda _line: None)
    tags: Counter[str] = Counter()
    for msg in found:
        if args.print_msg:
            body = msg.body.decode(args.charset, errors="replace") if args.print_body else "NOT PRINT BODY"
            lines.append(f"MSGID: {msg.msg_id} {message_text(msg)} BODY: {body}")
        if args.calculate:
            tags[msg.tags or ""] += 1
    if args.calculate:
        lines += [
            f"Tag: {tag:<30} Count: {count}" for tag, count in sorted(tags.items(), key=lambda kv: -kv[1])
        ]
    return Result(
        {**queue.to_wire(), "minOffset": low, "maxOffset": high, "count": len(found), "tags": dict(tags)},
        lines,
    )


@command(
    "queryCq",
    "Query cq command.",
    TOPIC,
    arg("-q", "--queue", dest="queue_id", type=non_negative_int, required=True, help="queue num, ie. 1"),
    arg("-i", "--index", type=non_negative_int, required=True, help="start queue index."),
    arg("-c", "--count", type=positive_int, default=10, help="how many."),
    arg("-b", "--broker", dest="broker_addr", help="broker addr."),
    arg("-g", "--consumer", dest="group", help="consumer group."),
)
async def query_cq(ctx: Context, args: argparse.Namespace) -> Result:
    addr = args.broker_addr
    if not addr:
        masters = await ctx.admin._route_masters(args.topic)
        if not masters:
            raise CommandFailed(f"topic {args.topic!r} has no master broker")
        addr = masters[sorted(masters)[0]]
    body = await query_consume_queue(
        ctx.admin, addr, args.topic, args.queue_id, args.index, args.count, args.group
    )
    lines = []
    if body.subscription_data is not None:
        lines += ["Subscription data: ", pretty_json(body.subscription_data.to_wire()), SEPARATOR]
    if body.filter_data is not None:
        lines += ["Filter data: ", body.filter_data, SEPARATOR]
    lines += ["Queue data: ", f"max: {body.max_queue_index}, min: {body.min_queue_index}", SEPARATOR]
    for i, entry in enumerate(body.queue_data):
        lines.append(f"idx: {args.index + i}")
        lines.append(
            f"ConsumeQueueData{{physicOffset={entry.physic_offset}, physicSize={entry.physic_size}, "
            f"tagsCode={entry.tags_code}, extendDataJson='{entry.extend_data_json}', bitMap='{entry.bit_map}', "
            f"eval={java_bool(entry.eval)}, msg='{entry.msg}'}}".replace("'None'", "'null'")
        )
        lines.append(SEPARATOR)
    return Result(body.to_wire(), lines)


# -- monitoring ---------------------------------------------------------------------------------


@command(
    "startMonitoring",
    "Start Monitoring.",
    arg(
        "--rounds",
        type=non_negative_int,
        default=0,
        help="stop after this many rounds (ours; default 0: run until interrupted)",
    ),
    arg("--interval", type=float, default=20.0, help="seconds between rounds (ours; Apache's default 20)"),
)
async def start_monitoring(ctx: Context, args: argparse.Namespace) -> Result:
    """Every round, each consumer group's undone messages per topic (Apache's monitor
    listener writes these lines to its log; ours prints them)."""
    admin = ctx.admin
    done = 0
    reports = []
    while True:
        groups = sorted(
            t[len(RETRY_PREFIX) :] for t in await admin.topic_list() if t.startswith(RETRY_PREFIX)
        )
        for group in groups:
            if group.startswith(SYSTEM_GROUP_PREFIX) or group == TOOLS_CONSUMER_GROUP:
                continue
            try:
                stats = await admin.consume_stats(group)
            except MQError:
                continue
            per_topic: dict[str, list[int]] = {}
            now = int(time.time() * 1000)
            for queue, w in stats.offset_table.items():
                per_topic.setdefault(queue.topic, []).append(max(0, w.broker_offset - w.consumer_offset))
            for topic, diffs in sorted(per_topic.items()):
                if topic.startswith(RETRY_PREFIX):
                    continue
                delay = max(
                    (
                        now - w.last_timestamp
                        for q, w in stats.offset_table.items()
                        if q.topic == topic and w.last_timestamp > 0 and w.broker_offset > w.consumer_offset
                    ),
                    default=0,
                )
                report = {
                    "consumerGroup": group,
                    "topic": topic,
                    "undoneMsgsTotal": sum(diffs),
                    "undoneMsgsSingleMQ": max(diffs),
                    "undoneMsgsDelayTimeMills": delay,
                }
                reports.append(report)
                _emit(
                    "reportUndoneMsgs: UndoneMsgs [" + ", ".join(f"{k}={v}" for k, v in report.items()) + "]"
                )
        done += 1
        if args.rounds and done >= args.rounds:
            break
        await asyncio.sleep(args.interval)
    return Result({"reports": reports}, [])


# -- exports ------------------------------------------------------------------------------------

#: The broker settings ``exportConfigs`` keeps (Apache's list).
EXPORTED_BROKER_KEYS = (
    "brokerClusterName",
    "brokerId",
    "brokerName",
    "brokerRole",
    "fileReservedTime",
    "filterServerNums",
    "flushDiskType",
    "maxMessageSize",
    "messageDelayLevel",
    "msgTraceTopicName",
    "slaveReadEnable",
    "traceOn",
    "traceTopicEnable",
    "useTLS",
    "autoCreateTopicEnable",
    "autoCreateSubscriptionGroup",
)


def _export_path_arg(name: str) -> tuple[tuple[str, ...], dict[str, Any]]:
    """The export commands' -f option, worded as Apache's tool words it for the file ``name``."""
    return arg(
        "-f",
        "--filePath",
        dest="path",
        default=EXPORT_DIR,
        help=f"export {name} path | default {EXPORT_DIR}",
    )


EXPORT_CLUSTER = arg("-c", "--clusterName", dest="cluster", required=True, help="choose a cluster to export")


async def _cluster_brokers(ctx: Context, cluster: str) -> list[tuple[str, BrokerData]]:
    """The brokers of ``cluster`` by name, in name order, that the name servers know addresses of."""
    info = await ctx.admin.cluster_info()
    if cluster not in info.cluster_addr_table:
        raise CommandFailed(f"cluster {cluster!r} is unknown")
    named = ((name, info.broker_addr_table.get(name)) for name in sorted(info.cluster_addr_table[cluster]))
    return [(name, data) for name, data in named if data is not None]


def _write_export(path: Path, name: str, document: Any) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    target = path / name
    target.write_text(pretty_json(document))
    return target


def _is_system_group(group: str) -> bool:
    return group.startswith(SYSTEM_GROUP_PREFIX) or group in {
        TOOLS_CONSUMER_GROUP,
        "FILTERSRV_CONSUMER",
        "__MONITOR_CONSUMER",
        "CLIENT_INNER_PRODUCER",
        "SELF_TEST_P_GROUP",
        "SELF_TEST_C_GROUP",
    }


async def _broker_tables(ctx: Context, addr: str) -> tuple[dict[str, Any], dict[str, Any]]:
    topics = await ctx.admin.instance.call(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
    groups = await ctx.admin.instance.call(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    return fastjson.loads(topics.body), fastjson.loads(groups.body)


@command(
    "exportMetadata",
    "export metadata.",
    arg("-c", "--clusterName", dest="cluster", help="choose a cluster to export"),
    arg("-b", "--brokerAddr", dest="broker_addr", help="choose a broker to export"),
    _export_path_arg("metadata.json"),
    arg("-t", "--topic", action="store_true", help="only export topic metadata"),
    arg(
        "-g",
        "--subscriptionGroup",
        dest="groups",
        action="store_true",
        help="only export subscriptionGroup metadata",
    ),
    arg("-s", "--specialTopic", dest="special", action="store_true", help="need retryTopic and dlqTopic"),
    one_of=BROKER_OR_CLUSTER,
)
async def export_metadata(ctx: Context, args: argparse.Namespace) -> Result:
    path = Path(args.path)
    if args.broker_addr:
        topics, groups = await _broker_tables(ctx, args.broker_addr)
        # Apache's tool, given one broker, writes that broker's own files (and nothing without -t/-g).
        written = []
        if args.topic:
            written.append(_write_export(path, "topic.json", topics))
        elif args.groups:
            written.append(_write_export(path, "subscriptionGroup.json", groups))
        return Result({"files": [str(p) for p in written]}, [f"export {p} success" for p in written])
    topic_table: dict[str, Any] = {}
    group_table: dict[str, Any] = {}
    known = await ctx.admin.brokers_by_addr()
    # Apache's TopicValidator.isSystemTopic, plus the per-broker and per-cluster topics.
    system_topics = (
        set(NOT_ALLOWED_SEND_TOPICS)
        | {AUTO_CREATE_TOPIC, BENCHMARK_TOPIC, OFFSET_MOVED_EVENT, SELF_TEST_TOPIC}
        | {b.broker_name for b in known.values()}
        | {b.cluster for b in known.values()}
    )
    for addr in await ctx.admin.master_addrs(args.cluster):
        topics, groups = await _broker_tables(ctx, addr)
        for name, config in topics.get("topicConfigTable", {}).items():
            if name in system_topics:
                continue
            if not args.special and name.startswith((RETRY_PREFIX, DLQ_PREFIX)):
                continue
            if name in topic_table:
                # One topic over several brokers: the cluster-wide queue counts.
                topic_table[name]["readQueueNums"] += config["readQueueNums"]
                topic_table[name]["writeQueueNums"] += config["writeQueueNums"]
            else:
                topic_table[name] = dict(config)
        for name, config in groups.get("subscriptionGroupTable", {}).items():
            if not _is_system_group(name):
                group_table[name] = config
    document: dict[str, Any] = {"exportTime": int(time.time() * 1000)}
    if not args.groups:
        document["topicConfigTable"] = topic_table
    if not args.topic:
        document["subscriptionGroupTable"] = group_table
    target = _write_export(path, "metadata.json", document)
    return Result(document, [f"export {target} success"])


@command(
    "exportConfigs",
    "export configs.",
    EXPORT_CLUSTER,
    _export_path_arg("configs.json"),
)
async def export_configs(ctx: Context, args: argparse.Namespace) -> Result:
    admin = ctx.admin
    masters = slaves = 0
    configs = {}
    for name, data in await _cluster_brokers(ctx, args.cluster):
        slaves += sum(1 for bid in data.broker_addrs if bid != MASTER_ID)
        if MASTER_ID in data.broker_addrs:
            masters += 1
            config = await admin.broker_config(data.broker_addrs[MASTER_ID])
            configs[name] = {k: config[k] for k in EXPORTED_BROKER_KEYS if k in config}
    document = {
        "clusterScale": {
            "namesrvSize": len(admin.instance.namesrv_addrs),
            "slaveBrokerSize": slaves,
            "masterBrokerSize": masters,
        },
        "brokerConfigs": configs,
    }
    target = _write_export(Path(args.path), "configs.json", document)
    return Result(document, [f"export {target} success"])


@command(
    "exportMetrics",
    "export metrics.",
    EXPORT_CLUSTER,
    _export_path_arg("metrics.json"),
)
async def export_metrics(ctx: Context, args: argparse.Namespace) -> Result:
    admin = ctx.admin
    brokers = await _cluster_brokers(ctx, args.cluster)
    report: dict[str, Any] = {}
    totals = {
        "totalNormalInTps": 0.0,
        "totalNormalOutTps": 0.0,
        "totalScheduleInTps": 0.0,
        "totalTransInTps": 0.0,
    }
    day_totals = {
        "normalOneDayInNum": 0,
        "normalOneDayOutNum": 0,
        "scheduleOneDayInNum": 0,
        "transOneDayInNum": 0,
    }
    for name, data in brokers:
        if MASTER_ID not in data.broker_addrs:
            continue
        addr = data.broker_addrs[MASTER_ID]
        runtime = await admin.broker_runtime_info(addr)
        topics, groups = await _broker_tables(ctx, addr)
        in_tps = _first_float(runtime.get("putTps"))
        out_tps = _first_float(runtime.get("getTransferedTps"))
        # The day before the last midnight, as Apache's tool counts it (0 before a first midnight).
        put_total = _int(runtime.get("msgPutTotalTodayMorning")) - _int(
            runtime.get("msgPutTotalYesterdayMorning")
        )
        got_total = _int(runtime.get("msgGetTotalTodayMorning")) - _int(
            runtime.get("msgGetTotalYesterdayMorning")
        )
        producers = await producer_table(admin, addr)
        clients = sorted(
            {f"{p.language}%{version_desc(p.version)}" for ps in producers.data.values() for p in ps}
        )
        totals["totalNormalInTps"] += in_tps
        totals["totalNormalOutTps"] += out_tps
        day_totals["normalOneDayInNum"] += put_total
        day_totals["normalOneDayOutNum"] += got_total
        report[name] = {
            "runtimeVersion": {
                "rocketmqVersion": runtime.get("brokerVersionDesc", ""),
                "clientInfo": clients,
            },
            "runtimeQuota": {
                "diskRatio": {
                    "commitLogDiskRatio": runtime.get("commitLogDiskRatio", ""),
                    "consumeQueueDiskRatio": runtime.get("consumeQueueDiskRatio", ""),
                },
                "topicSize": sum(
                    1
                    for t in topics.get("topicConfigTable", {})
                    if not t.startswith((RETRY_PREFIX, DLQ_PREFIX))
                ),
                "messageAverageSize": runtime.get("putMessageAverageSize", "0.0"),
                "groupSize": sum(
                    1 for g in groups.get("subscriptionGroupTable", {}) if not _is_system_group(g)
                ),
                "tps": {
                    "normalInTps": in_tps,
                    "normalOutTps": out_tps,
                    "scheduleInTps": 0.0,
                    "transInTps": 0.0,
                },
                "oneDayNum": {
                    "normalOneDayInNum": put_total,
                    "normalOneDayOutNum": got_total,
                    "scheduleOneDayInNum": 0,
                    "transOneDayInNum": 0,
                },
            },
            "runtimeEnv": {"cpuNum": str(os.cpu_count() or 1)},
        }
    document = {"totalData": {"totalOneDayNum": day_totals, "totalTps": totals}, "evaluateReport": report}
    target = _write_export(Path(args.path), "metrics.json", document)
    return Result(document, [f"export {target} success"])


def _int(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


def _first_float(value: str | None) -> float:
    try:
        return float((value or "0").split()[0])
    except (ValueError, IndexError):
        return 0.0


# -- cold-data flow control (RocketMQ 5) -----------------------------------------------------


async def _cold_data(
    ctx: Context, args: argparse.Namespace, code: RequestCode, body: bytes, done: str
) -> Result:
    addrs = await target_masters(ctx.admin, args)
    for addr in addrs:
        await ctx.admin.instance.call(addr, code, None, body)
    return Result({"brokerAddrs": addrs}, [f"{done}, {addr}" for addr in addrs])


@command(
    "updateColdDataFlowCtrGroupConfig",
    "Add or update the cold read threshold of a consumer group",
    arg("-b", "--brokerAddr", dest="broker_addr", help="update which broker"),
    arg("-c", "--clusterName", dest="cluster", help="update which cluster"),
    arg("-g", "--consumerGroup", dest="group", required=True, help="specific consumerGroup"),
    arg("-v", "--threshold", type=non_negative_int, required=True, help="cold read threshold value (bytes)"),
    one_of=BROKER_OR_CLUSTER,
)
async def update_cold_data_group(ctx: Context, args: argparse.Namespace) -> Result:
    body = f"{args.group}={args.threshold}\n".encode()
    return await _cold_data(
        ctx,
        args,
        RequestCode.UPDATE_COLD_DATA_FLOW_CTR_CONFIG,
        body,
        "updateColdDataFlowCtrGroupConfig success",
    )


@command(
    "removeColdDataFlowCtrGroupConfig",
    "Remove the cold read threshold of a consumer group",
    arg("-b", "--brokerAddr", dest="broker_addr", help="update which broker"),
    arg("-c", "--clusterName", dest="cluster", help="update which cluster"),
    arg("-g", "--consumerGroup", dest="group", required=True, help="the consumer group to remove"),
    one_of=BROKER_OR_CLUSTER,
)
async def remove_cold_data_group(ctx: Context, args: argparse.Namespace) -> Result:
    return await _cold_data(
        ctx,
        args,
        RequestCode.REMOVE_COLD_DATA_FLOW_CTR_CONFIG,
        args.group.encode(),
        "remove broker cold read threshold success",
    )


@command(
    "getColdDataFlowCtrInfo",
    "Get the cold-data flow control table of brokers",
    arg("-b", "--brokerAddr", dest="broker_addr", help="get from which broker"),
    arg("-c", "--clusterName", dest="cluster", help="get from which cluster"),
    one_of=BROKER_OR_CLUSTER,
)
async def cold_data_info(ctx: Context, args: argparse.Namespace) -> Result:
    addrs = await target_masters(ctx.admin, args)
    tables: dict[str, Any] = {}
    lines: list[str] = []
    for addr in addrs:
        answer = await ctx.admin.instance.call(addr, RequestCode.GET_COLD_DATA_FLOW_CTR_INFO)
        table = json.loads(answer.body)
        for account in table.get("runtimeTable", {}).values():
            for stamp in ("lastColdReadTimeMills", "createTimeMills"):
                if stamp in account:
                    account[stamp.replace("Mills", "Format")] = date_time(account.pop(stamp))
        tables[addr] = table
        lines += [f"============{addr}============", *json.dumps(table, indent=2).splitlines()]
    return Result(tables, lines)


@command(
    "setCommitLogReadAheadMode",
    "set read ahead mode for all commitlog files",
    arg("-b", "--brokerAddr", dest="broker_addr", help="set which broker"),
    arg("-c", "--clusterName", dest="cluster", help="set which cluster"),
    arg(
        "-m",
        "--commitLogReadAheadMode",
        dest="mode",
        type=int,
        choices=(0, 1),
        required=True,
        help="the CommitLog read ahead mode; 0 is default, 1 random read",
    ),
    one_of=BROKER_OR_CLUSTER,
)
async def set_read_ahead_mode(ctx: Context, args: argparse.Namespace) -> Result:
    addrs = await target_masters(ctx.admin, args)
    for addr in addrs:
        await ctx.admin.instance.call(
            addr, RequestCode.SET_COMMITLOG_READ_MODE, {"READ_AHEAD_MODE": str(args.mode)}
        )
    return Result(
        {"brokerAddrs": addrs, "mode": args.mode},
        [f"set the read ahead mode of {addr}: {args.mode}" for addr in addrs],
    )


# -- replication (RocketMQ 5) ----------------------------------------------------------------


@command(
    "haStatus",
    "Fetch ha runtime status data",
    arg("-b", "--brokerAddr", dest="broker_addr", help="which broker to fetch"),
    arg("-c", "--clusterName", dest="cluster", help="which cluster"),
    one_of=BROKER_OR_CLUSTER,
)
async def ha_status(ctx: Context, args: argparse.Namespace) -> Result:
    """GET_BROKER_HA_STATUS of each master, printed as Apache 5's tool prints it."""
    addrs = await target_masters(ctx.admin, args)
    statuses: dict[str, Any] = {}
    lines: list[str] = []
    for addr in addrs:
        status = json.loads((await ctx.admin.instance.call(addr, RequestCode.GET_BROKER_HA_STATUS)).body)
        statuses[addr] = status
        lines.append("")
        if status.get("master"):
            links = status.get("haConnectionInfo", [])
            lines += [
                f"#MasterAddr\t{addr}",
                f"#MasterCommitLogMaxOffset\t{status.get('masterCommitLogMaxOffset', 0)}",
                f"#SlaveNum\t{len(links)}",
                f"#InSyncSlaveNum\t{status.get('inSyncSlaveNums', 0)}",
                f"{'#SlaveAddr':<32}  {'#SlaveAckOffset':<16} {'#Diff':>16} {'#TransferSpeed(KB/s)':>16} "
                f"{'#Status':>16} {'#TransferFromWhere':>16}",
            ]
            lines += [
                f"{link['addr']:<32}  {link['slaveAckOffset']:<16} {link['diff']:>16} "
                f"{link['transferredByteInSecond'] / 1024:>16.2f} {'OK' if link['inSync'] else 'Fall Behind':>16} "
                f"{link['transferFromWhere']:>16}"
                for link in links
            ]
        else:
            client = status.get("haClientRuntimeInfo", {})
            lines += [
                f"#MasterAddr\t{client.get('masterAddr')}",
                f"#CommitLogMaxOffset\t{client.get('maxOffset', 0)}",
                f"#TransferSpeed(KB/s)\t{client.get('transferredByteInSecond', 0) / 1024:.2f}",
                f"#LastReadTime\t{date_time(client.get('lastReadTimestamp', 0))}",
                f"#LastWriteTime\t{date_time(client.get('lastWriteTimestamp', 0))}",
                f"#MasterFlushOffset\t{client.get('masterFlushOffset', 0)}",
            ]
    return Result(statuses, lines)


@command(
    "resetMasterFlushOffset",
    "Reset master flush offset in slave",
    arg("-b", "--brokerAddr", dest="broker_addr", required=True, help="which broker to reset"),
    arg("-o", "--offset", type=non_negative_int, required=True, help="the offset to reset at"),
)
async def reset_master_flush_offset(ctx: Context, args: argparse.Namespace) -> Result:
    """RESET_MASTER_FLUSH_OFFSET: our slaves recover from their own log, so the broker has
    nothing to reset and says so by succeeding, as Apache's master does."""
    await ctx.admin.instance.call(
        args.broker_addr, RequestCode.RESET_MASTER_FLUSH_OFFSET, {"masterFlushOffset": str(args.offset)}
    )
    return Result(
        {"brokerAddr": args.broker_addr, "offset": args.offset},
        [f"reset master flush offset to {args.offset} success"],
    )


# -- static topics (RocketMQ 5) --------------------------------------------------------------


async def _static_mappings(
    ctx: Context, topic: str, brokers: str | None, clusters: str | None
) -> tuple[ClusterInfo, dict[str, str | None], set[str], dict[str, TopicConfigAndQueueMapping]]:
    """The cluster, each broker's master, the target brokers (``-b`` names or the ``-c``
    clusters' brokers) and the topic's mapping on every broker that has it (GET_TOPIC_CONFIG
    with ``lo``)."""
    info = await ctx.admin.cluster_info()
    masters = {name: data.broker_addrs.get(MASTER_ID) for name, data in info.broker_addr_table.items()}
    if brokers:
        targets = {name.strip() for name in brokers.split(",") if name.strip()}
    else:
        wanted = {name.strip() for name in (clusters or "").split(",")}
        targets = {name for c in wanted for name in info.cluster_addr_table.get(c, [])}
    if not targets:
        raise CommandFailed("Find none brokers, do nothing")
    existing: dict[str, TopicConfigAndQueueMapping] = {}
    for name, addr in sorted(masters.items()):
        if addr is None:
            continue
        try:
            answer = await ctx.admin.instance.call(
                addr, RequestCode.GET_TOPIC_CONFIG, {"topic": topic, "lo": "true"}
            )
        except TopicNotExistError:
            continue
        existing[name] = TopicConfigAndQueueMapping.decode(answer.body)
    return info, masters, targets, existing


def _complete_clusters(info: ClusterInfo, mapping: dict[str, TopicConfigAndQueueMapping], topic: str) -> None:
    """The brokers of a mapped broker's cluster that host none of the queues get the topic with
    no queue, so that the route lists them (Apache's ``completeNoTargetBrokers``)."""
    detail = next(iter(mapping.values())).mapping_detail
    assert detail is not None
    for broker_names in info.cluster_addr_table.values():
        if mapping.keys() & set(broker_names):
            for name in broker_names:
                mapping.setdefault(
                    name,
                    TopicConfigAndQueueMapping(
                        topic_name=topic,
                        read_queue_nums=0,
                        write_queue_nums=0,
                        mapping_detail=TopicQueueMappingDetail(
                            topic=topic, total_queues=detail.total_queues, bname=name, epoch=detail.epoch
                        ),
                    ),
                )


def _write_mapping(
    topic: str, stamp: int, suffix: str, configs: dict[str, TopicConfigAndQueueMapping]
) -> Path:
    path = Path(tempfile.gettempdir()) / f"{topic}-{stamp}.{suffix}"
    path.write_text(json.dumps({name: c.to_wire() for name, c in configs.items()}, indent=2))
    return path


async def _send_static(
    ctx: Context,
    masters: dict[str, str | None],
    mapping: dict[str, TopicConfigAndQueueMapping],
    names: list[str],
) -> None:
    """UPDATE_AND_CREATE_STATIC_TOPIC to each named broker's master, with its mapping."""
    for name in names:
        addr = masters.get(name)
        if addr is None:
            raise CommandFailed(f"Can't find addr for broker {name}")
        config = mapping[name]
        assert config.mapping_detail is not None
        header = {
            "topic": config.topic_name,
            "defaultTopic": AUTO_CREATE_TOPIC,
            "readQueueNums": config.read_queue_nums,
            "writeQueueNums": config.write_queue_nums,
            "perm": config.perm,
            "topicFilterType": config.topic_filter_type,
            "topicSysFlag": config.topic_sys_flag,
            "order": "false",
            "force": "false",
        }
        body = config.mapping_detail.encode()
        await ctx.admin.instance.call(addr, RequestCode.UPDATE_AND_CREATE_STATIC_TOPIC, header, body)


_STATIC_TARGETS = (
    arg("-b", "--brokers", dest="brokers", help="the static topic's brokers, comma separated"),
    arg("-c", "--clusters", dest="clusters", help="the static topic's clusters, comma separated"),
)


@command(
    "updateStaticTopic",
    "Update or create static topic, which has fixed number of queues",
    TOPIC,
    arg("-qn", "--totalQueueNum", dest="total", type=positive_int, required=True, help="total queue num"),
    *_STATIC_TARGETS,
    one_of=(("brokers", "clusters"),),
)
async def update_static_topic(ctx: Context, args: argparse.Namespace) -> Result:
    """Deal the topic's global queues over the brokers (protocol/static_topic.allocate: the
    queues mapped already stay, new ones go to the least-loaded brokers) and send each broker
    its mapping; the mappings before and after are written to files, as Apache's tool writes
    them."""
    info, masters, targets, existing = await _static_mappings(ctx, args.topic, args.brokers, args.clusters)
    now = int(time.time() * 1000)
    try:
        mapping = allocate(args.topic, args.total, sorted(targets | existing.keys()), existing, now)
    except ValueError as exc:
        raise CommandFailed(str(exc)) from None
    _complete_clusters(info, mapping, args.topic)
    epoch = next(iter(mapping.values())).mapping_detail.epoch  # type: ignore[union-attr]
    lines = [
        f"The old mapping data is written to file {_write_mapping(args.topic, now, 'before', existing)}",
        f"The new mapping data is written to file {_write_mapping(args.topic, epoch, 'after', mapping)}",
    ]
    await _send_static(ctx, masters, mapping, sorted(mapping))
    return Result({"epoch": epoch, "brokers": {n: c.to_wire() for n, c in mapping.items()}}, lines)


@command(
    "remappingStaticTopic",
    "Remapping static topic.",
    TOPIC,
    *_STATIC_TARGETS,
    one_of=(("brokers", "clusters"),),
)
async def remapping_static_topic(ctx: Context, args: argparse.Namespace) -> Result:
    """Spread the topic's global queues evenly over the brokers (protocol/static_topic.remap).
    As Apache's tool does: the brokers taking queues get their mapping first (they lead them
    from then on), then those giving them up; once each moved queue's old end is read
    (GET_MAX_OFFSET of the old physical queue), its new item starts at the next block past it
    and every broker gets the final mapping."""
    info, masters, targets, existing = await _static_mappings(ctx, args.topic, args.brokers, args.clusters)
    now = int(time.time() * 1000)
    try:
        mapping, moves = remap(args.topic, sorted(targets), existing, now)
    except ValueError as exc:
        raise CommandFailed(str(exc)) from None
    _complete_clusters(info, mapping, args.topic)
    epoch = next(iter(mapping.values())).mapping_detail.epoch  # type: ignore[union-attr]
    # Apache's tool says "old" of both files.
    lines = [
        f"The old mapping data is written to file {_write_mapping(args.topic, now, 'before', existing)}",
        f"The old mapping data is written to file {_write_mapping(args.topic, epoch, 'after', mapping)}",
    ]
    mapped_in = sorted({new for _, new in moves.values()})
    mapped_out = sorted({old for old, _ in moves.values()})
    await _send_static(ctx, masters, mapping, mapped_in)
    await _send_static(ctx, masters, mapping, mapped_out)
    for gid, (old, new) in sorted(moves.items()):
        old_detail, new_detail = mapping[old].mapping_detail, mapping[new].mapping_detail
        assert old_detail is not None and new_detail is not None
        previous = old_detail.hosted_queues[gid][-2]
        end = await ctx.admin.instance.call(
            masters[old] or "",
            RequestCode.GET_MAX_OFFSET,
            {"topic": args.topic, "queueId": previous.queue_id, "lo": "false"},
        )
        start = block_round_up(previous.to_logical(int(end.ext_fields["offset"])))
        for detail in (old_detail, new_detail):
            detail.hosted_queues[gid][-1].logic_offset = start
    await _send_static(ctx, masters, mapping, mapped_in)
    await _send_static(ctx, masters, mapping, sorted(set(mapping) - set(mapped_in)))
    moved = {str(gid): {"from": old, "to": new} for gid, (old, new) in moves.items()}
    return Result({"epoch": epoch, "moves": moved}, lines)
