"""Commands about producers: the producer groups a broker knows and a group's
connections on a topic."""

from __future__ import annotations

import argparse

from aiorocketmq.client.cluster_admin import producer_table
from aiorocketmq.protocol.body import ProducerConnection
from aiorocketmq.protocol.codes import RequestCode
from aiorocketmq.protocol.headers import GetProducerConnectionListRequestHeader

from ..cli import CommandFailed
from .command import TOPIC, CommandSet, Context, Result, arg, version_desc

commands = CommandSet()


@commands.add(
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


@commands.add(
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
