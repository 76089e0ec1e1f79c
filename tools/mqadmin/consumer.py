"""Commands about consumer groups' clients: progress and consume TPS, connections,
each client's running state (``consumerStatus``) and the group's configuration per broker."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from aiorocketmq.client import Admin
from aiorocketmq.client.cluster_admin import consumer_running_info
from aiorocketmq.protocol import fastjson
from aiorocketmq.protocol.admin_requests import (
    PROP_CONSUME_ORDERLY,
    PROP_CONSUME_TYPE,
    PROP_CONSUMER_START_TIMESTAMP,
    ConsumerRunningInfo,
    ProcessQueueInfo,
)
from aiorocketmq.protocol.body import ConsumerConnection, ConsumeType, SubscriptionGroupConfig
from aiorocketmq.protocol.codes import MASTER_ID, RequestCode
from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.names import RETRY_PREFIX

from ..cli import CommandFailed, date_time, queue_json, table
from .command import CommandSet, Context, Result, arg, java_bool, version_desc

commands = CommandSet()


@commands.add(
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


@commands.add(
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


def java_time(millis: int) -> str:
    """RocketMQ's ``UtilAll.timeMillisToHumanString``: ``yyyyMMddHHmmssSSS`` local time."""
    moment = time.localtime(millis / 1000)
    return time.strftime("%Y%m%d%H%M%S", moment) + f"{millis % 1000:03d}"


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


@commands.add(
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


@commands.add(
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
