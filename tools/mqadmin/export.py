"""Exports of a cluster's metadata, configurations and metrics as JSON files, as
Apache's ``exportMetadata``/``exportConfigs``/``exportMetrics`` write them."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from aiorocketmq.client.cluster_admin import producer_table
from aiorocketmq.protocol import fastjson
from aiorocketmq.protocol.body import BrokerData
from aiorocketmq.protocol.codes import MASTER_ID, RequestCode
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

from ..cli import CommandFailed
from .command import BROKER_OR_CLUSTER, CommandSet, Context, Result, arg, pretty_json, version_desc

commands = CommandSet()

#: Where the exports go unless ``-f`` says otherwise (Apache's default).
EXPORT_DIR = "/tmp/rocketmq/export"

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


@commands.add(
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


@commands.add(
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


@commands.add(
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
