"""Statistics commands: per-topic and per-group rates over a minute and an hour
(``statsAll``) and the running consume-lag monitor (``startMonitoring``)."""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from aiorocketmq.client.cluster_admin import broker_stats
from aiorocketmq.protocol.admin_requests import BrokerStatsData
from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.names import DLQ_PREFIX, RETRY_PREFIX, SYSTEM_GROUP_PREFIX, TOOLS_CONSUMER_GROUP

from ..cli import non_negative_int
from .command import CommandSet, Context, Result, arg, emit

commands = CommandSet()


@commands.add(
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


@commands.add(
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
                emit(
                    "reportUndoneMsgs: UndoneMsgs [" + ", ".join(f"{k}={v}" for k, v in report.items()) + "]"
                )
        done += 1
        if args.rounds and done >= args.rounds:
            break
        await asyncio.sleep(args.interval)
    return Result({"reports": reports}, [])
