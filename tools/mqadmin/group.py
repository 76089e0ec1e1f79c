"""Subscription-group commands: create or update one or a batch, set a group's
consume mode (pull or pop, RocketMQ 5) and delete one."""

from __future__ import annotations

import argparse
import contextlib
from typing import Any

from aiorocketmq.protocol.body import SubscriptionGroupConfig
from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.names import dlq_topic, retry_topic

from ..cli import non_negative_int
from .command import (
    BOOL,
    BROKER_OR_CLUSTER,
    GROUP,
    CommandSet,
    Context,
    Result,
    arg,
    batch_options,
    batch_update,
    target_masters,
)

commands = CommandSet()


@commands.add(
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


@commands.add(
    "updateSubGroupList",
    "Update or create subscription group in batch",
    *batch_options("subscription group"),
    one_of=BROKER_OR_CLUSTER,
)
async def update_sub_group_list(ctx: Context, args: argparse.Namespace) -> Result:
    # Apache words the line per target as here: -b "group config", -c "subscription group config".
    what = "group config" if args.broker_addr else "subscription group config"
    return await batch_update(ctx, args, SubscriptionGroupConfig, ctx.admin.update_subscription_groups, what)


@commands.add(
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


@commands.add(
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
