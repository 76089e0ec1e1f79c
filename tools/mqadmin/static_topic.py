"""Static topics (RocketMQ 5): create one with a fixed number of global queues, or
remap its queues onto other brokers, writing the mapping each broker holds."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from aiorocketmq.protocol.body import ClusterInfo
from aiorocketmq.protocol.codes import MASTER_ID, RequestCode
from aiorocketmq.protocol.errors import TopicNotExistError
from aiorocketmq.protocol.names import AUTO_CREATE_TOPIC
from aiorocketmq.protocol.static_topic import (
    TopicConfigAndQueueMapping,
    TopicQueueMappingDetail,
    allocate,
    block_round_up,
    remap,
)

from ..cli import CommandFailed, positive_int
from .command import TOPIC, CommandSet, Context, Result, arg

commands = CommandSet()


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


@commands.add(
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


@commands.add(
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
