"""Commands that move a group's consumer offsets: reset to a time, clone from another
group, skip to the end."""

from __future__ import annotations

import argparse

from aiorocketmq.client.cluster_admin import clone_group_offset

from ..cli import CommandFailed, queue_json, table, timestamp_millis
from .command import BOOL, TOPIC, CommandSet, Context, Result, arg

commands = CommandSet()


@commands.add(
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


@commands.add(
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


@commands.add(
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
