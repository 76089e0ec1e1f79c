"""ACL commands of RocketMQ 4.x's plain-ACL brokers: accounts, the global white list,
the ACL file versions across a cluster and the whole configuration."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..cli import date_time, table
from .command import BOOL, BROKER_OR_CLUSTER, CommandSet, Context, Result, arg, target_masters

commands = CommandSet()


@commands.add(
    "updateAclConfig",
    "Update acl config yaml file in broker.",
    arg("-b", "--brokerAddr", dest="broker_addr", help="update acl config file to which broker"),
    arg("-c", "--clusterName", dest="cluster", help="update acl config file to which cluster"),
    arg("-a", "--accessKey", dest="access_key", required=True, help="set accessKey in acl config file"),
    arg("-s", "--secretKey", dest="secret_key", help="set secretKey in acl config file"),
    arg(
        "-w", "--whiteRemoteAddress", dest="white", help="set white ip Address for account in acl config file"
    ),
    arg("-i", "--defaultTopicPerm", dest="topic_perm", help="set default topicPerm in acl config file"),
    arg("-u", "--defaultGroupPerm", dest="group_perm", help="set default GroupPerm in acl config file"),
    arg("-t", "--topicPerms", dest="topic_perms", help="set topicPerms list, eg: topicA=DENY,topicD=SUB"),
    arg("-g", "--groupPerms", dest="group_perms", help="set groupPerms list, eg: groupD=DENY,groupD=SUB"),
    arg(
        "-m", "--admin", dest="admin", default=False, help="set admin flag in acl config file (false)", **BOOL
    ),
    one_of=BROKER_OR_CLUSTER,
)
async def update_acl_config(ctx: Context, args: argparse.Namespace) -> Result:
    def perms(text: str | None) -> list[str] | None:
        return [p.strip() for p in text.split(",") if p.strip()] if text is not None else None

    addrs = await target_masters(ctx.admin, args)
    for addr in addrs:
        await ctx.admin.update_acl_config(
            addr,
            args.access_key,
            secret_key=args.secret_key,
            white_remote_address=args.white,
            admin=args.admin,
            default_topic_perm=args.topic_perm,
            default_group_perm=args.group_perm,
            topic_perms=perms(args.topic_perms),
            group_perms=perms(args.group_perms),
        )
    lines = [f"create or update plain access config to {addr} success." for addr in addrs]
    return Result({"accessKey": args.access_key, "brokerAddrs": addrs}, lines)


@commands.add(
    "deleteAclConfig",
    "Delete Acl Config Account in broker.",
    arg("-b", "--brokerAddr", dest="broker_addr", help="delete acl config account from which broker"),
    arg("-c", "--clusterName", dest="cluster", help="delete acl config account from which cluster"),
    arg(
        "-a",
        "--accessKey",
        dest="access_key",
        required=True,
        help="set accessKey in acl config file for deleting",
    ),
    one_of=BROKER_OR_CLUSTER,
)
async def delete_acl_config(ctx: Context, args: argparse.Namespace) -> Result:
    addrs = await target_masters(ctx.admin, args)
    for addr in addrs:
        await ctx.admin.delete_acl_config(addr, args.access_key)
    lines = [f"delete plain access config account from {addr} success." for addr in addrs]
    return Result({"accessKey": args.access_key, "brokerAddrs": addrs}, lines)


@commands.add(
    "updateGlobalWhiteAddr",
    "Update global white address for acl Config File in broker.",
    arg("-b", "--brokerAddr", dest="broker_addr", help="update global white address to which broker"),
    arg("-c", "--clusterName", dest="cluster", help="update global white address to which cluster"),
    arg(
        "-g",
        "--globalWhiteRemoteAddresses",
        dest="addresses",
        required=True,
        help="set globalWhiteRemoteAddress list, eg: 10.10.103.*,192.168.0.*",
    ),
    arg("-p", "--aclFileFullPath", dest="acl_file", help="which ACL file of the broker (default: its first)"),
    one_of=BROKER_OR_CLUSTER,
)
async def update_global_white_addr(ctx: Context, args: argparse.Namespace) -> Result:
    patterns = [p.strip() for p in args.addresses.split(",") if p.strip()]
    addrs = await target_masters(ctx.admin, args)
    for addr in addrs:
        await ctx.admin.update_global_white_addrs(addr, patterns, acl_file=args.acl_file)
    lines = [f"update global white remote addresses to {addr} success." for addr in addrs]
    return Result({"globalWhiteRemoteAddresses": patterns, "brokerAddrs": addrs}, lines)


@commands.add(
    "clusterAclConfigVersion",
    "List all of acl config version information in cluster.",
    arg("-b", "--brokerAddr", dest="broker_addr", help="query acl config version for which broker"),
    arg("-c", "--clusterName", dest="cluster", help="query acl config version for specified cluster"),
    one_of=BROKER_OR_CLUSTER,
)
async def cluster_acl_config_version(ctx: Context, args: argparse.Namespace) -> Result:
    rows: list[list[Any]] = []
    documents = []
    for addr in await target_masters(ctx.admin, args):
        info = await ctx.admin.acl_config_version(addr)
        per_file = json.loads(info.all_acl_file_version or "{}") or {"": json.loads(info.version)}
        for path, version in per_file.items():
            stamp = int(version.get("timestamp", 0))
            rows.append(
                [
                    info.cluster_name,
                    info.broker_name,
                    info.broker_addr,
                    path,
                    version.get("counter", 0),
                    date_time(stamp) if stamp else "-",
                ]
            )
        documents.append(info.model_dump(by_alias=True))
    headers = [
        "#Cluster Name",
        "#Broker Name",
        "#Broker Addr",
        "#AclFilePath",
        "#AclConfigVersionNum",
        "#AclLastUpdateTime",
    ]
    return Result(documents, table(headers, rows))


@commands.add(
    "getAclConfig",
    "List all of acl config information in cluster (secrets included; admin accounts only).",
    arg("-b", "--brokerAddr", dest="broker_addr", help="query acl config for which broker"),
    arg("-c", "--clusterName", dest="cluster", help="query acl config for specified cluster"),
    one_of=BROKER_OR_CLUSTER,
)
async def get_acl_config(ctx: Context, args: argparse.Namespace) -> Result:
    documents = {}
    lines = []
    for addr in await target_masters(ctx.admin, args):
        config = await ctx.admin.acl_config(addr)
        documents[addr] = config
        lines.append(f"{addr}:")
        lines.extend(f"  {line}" for line in json.dumps(config, indent=2, sort_keys=True).splitlines())
    return Result(documents, lines)
