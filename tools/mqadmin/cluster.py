"""Commands on a whole cluster: its brokers as the name servers list them, and the
send round trip to each of them (``clusterRT``)."""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from aiorocketmq.client import Message, Producer
from aiorocketmq.protocol.errors import MQError

from ..cli import CommandFailed, non_negative_int, positive_int, table
from .command import BOOL, CommandSet, Context, Result, arg, emit

commands = CommandSet()


@commands.add(
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


@commands.add(
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
        emit(
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
                        emit(f"{stamp}|{args.machine_room}|{cluster}|{name}|{round(rt)}")
                    else:
                        emit(f"{cluster:<24}  {name:<24}  {rt:<8.2f}  {ok:<16d}  {failed:<16d}")
                    rows.append(
                        {"cluster": cluster, "brokerName": name, "rt": rt, "success": ok, "fail": failed}
                    )
            done += 1
            if args.rounds and done >= args.rounds:
                break
            await asyncio.sleep(args.interval)
    return Result({"rounds": rows}, [])
