"""Commands on brokers: runtime status and configuration, consume statistics, store
clean-ups on demand, send round trips, cold-data flow control and read-ahead (RocketMQ 5),
and replication (HA status, master flush offset)."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from aiorocketmq.client import Message, Producer
from aiorocketmq.client.cluster_admin import broker_consume_stats, store_maintenance, update_broker_config
from aiorocketmq.protocol.codes import RequestCode

from ..cli import CommandFailed, date_time, key_values, non_negative_int, positive_int
from .command import (
    BOOL,
    BROKER_ADDR,
    BROKER_OR_CLUSTER,
    CLUSTER,
    CommandSet,
    Context,
    Result,
    arg,
    target_masters,
)

commands = CommandSet()


@commands.add(
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


@commands.add(
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


@commands.add(
    "updateBrokerConfig",
    "Update broker's config.",
    arg("-b", "--brokerAddr", dest="broker_addr", help="update which broker"),
    arg("-c", "--clusterName", dest="cluster", help="update which cluster"),
    arg("-k", "--key", required=True, help="config key"),
    arg("-v", "--value", required=True, help="config value"),
    one_of=BROKER_OR_CLUSTER,
)
async def update_broker_config_cmd(ctx: Context, args: argparse.Namespace) -> Result:
    addrs = await target_masters(ctx.admin, args)
    for addr in addrs:
        await update_broker_config(ctx.admin, addr, {args.key: args.value})
    lines = [f"update broker config success, {addr}" for addr in addrs]
    return Result({"brokerAddrs": addrs, "key": args.key, "value": args.value}, lines)


@commands.add(
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


@commands.add(
    "cleanExpiredCQ",
    "Clean expired ConsumeQueue on broker.",
    arg("-b", "--brokerAddr", dest="broker_addr", help="Broker address"),
    arg("-c", "--cluster", dest="cluster", help="clustername"),
)
async def clean_expired_cq(ctx: Context, args: argparse.Namespace) -> Result:
    return await _maintenance(ctx, args, RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE)


@commands.add(
    "deleteExpiredCommitLog",
    "Delete expired CommitLog files.",
    arg("-b", "--brokerAddr", dest="broker_addr", help="Broker address"),
    arg("-c", "--cluster", dest="cluster", help="clustername"),
)
async def delete_expired_commit_log(ctx: Context, args: argparse.Namespace) -> Result:
    return await _maintenance(ctx, args, RequestCode.DELETE_EXPIRED_COMMITLOG)


@commands.add(
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


@commands.add(
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


async def _cold_data(
    ctx: Context, args: argparse.Namespace, code: RequestCode, body: bytes, done: str
) -> Result:
    addrs = await target_masters(ctx.admin, args)
    for addr in addrs:
        await ctx.admin.instance.call(addr, code, None, body)
    return Result({"brokerAddrs": addrs}, [f"{done}, {addr}" for addr in addrs])


@commands.add(
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


@commands.add(
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


@commands.add(
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


@commands.add(
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


@commands.add(
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


@commands.add(
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
