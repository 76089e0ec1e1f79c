"""Commands on the name servers: their configuration, a broker's write permission
and the KV configuration."""

from __future__ import annotations

import argparse

from aiorocketmq.client.cluster_admin import (
    add_write_perm,
    namesrv_config,
    update_namesrv_config,
    wipe_write_perm,
)

from .command import CommandSet, Context, Result, arg

commands = CommandSet()


@commands.add(
    "updateKvConfig",
    "Create or update KV config.",
    arg("-s", "--namespace", required=True, help="the namespace"),
    arg("-k", "--key", required=True, help="the key name"),
    arg("-v", "--value", required=True, help="the key value"),
)
async def update_kv_config(ctx: Context, args: argparse.Namespace) -> Result:
    await ctx.admin.update_kv_config(args.namespace, args.key, args.value)
    return Result(
        {"namespace": args.namespace, "key": args.key, "value": args.value},
        ["create or update kv config to namespace success."],
    )


@commands.add(
    "deleteKvConfig",
    "Delete KV config.",
    arg("-s", "--namespace", required=True, help="the namespace"),
    arg("-k", "--key", required=True, help="the key name"),
)
async def delete_kv_config_cmd(ctx: Context, args: argparse.Namespace) -> Result:
    await ctx.admin.delete_kv_config(args.namespace, args.key)
    return Result(
        {"namespace": args.namespace, "key": args.key}, ["delete kv config from namespace success."]
    )


@commands.add("getNamesrvConfig", "Get configs of name server.")
async def get_namesrv_config(ctx: Context, args: argparse.Namespace) -> Result:
    configs = await namesrv_config(ctx.admin)
    lines = []
    for addr, config in configs.items():
        lines.append(f"============{addr}============")
        lines.extend(f"{key:<50}=  {value}" for key, value in config.items())
    return Result(configs, lines)


@commands.add(
    "updateNamesrvConfig",
    "Update configs of name server.",
    arg("-k", "--key", required=True, help="config key"),
    arg("-v", "--value", required=True, help="config value"),
)
async def update_namesrv_config_cmd(ctx: Context, args: argparse.Namespace) -> Result:
    addrs = await update_namesrv_config(ctx.admin, {args.key: args.value})
    return Result(
        {"namesrvAddrs": addrs, "key": args.key, "value": args.value},
        [f"update name server config success!{_java_list(addrs)}", f"{args.key} : {args.value}"],
    )


def _java_list(items: list[str]) -> str:
    return "[" + ", ".join(items) + "]"


@commands.add(
    "wipeWritePerm",
    "Wipe write perm of broker in all name server you defined in the -n param.",
    arg("-b", "--brokerName", dest="broker_name", required=True, help="broker name"),
)
async def wipe_write_perm_cmd(ctx: Context, args: argparse.Namespace) -> Result:
    counts = await wipe_write_perm(ctx.admin, args.broker_name)
    lines = [
        f"wipe write perm of broker[{args.broker_name}] in name server[{addr}] OK, {count}"
        for addr, count in counts.items()
    ]
    return Result({"brokerName": args.broker_name, "wipeTopicCount": counts}, lines)


@commands.add(
    "addWritePerm",
    "Add write perm of broker in all name server you defined in the -n param.",
    arg("-b", "--brokerName", dest="broker_name", required=True, help="broker name"),
)
async def add_write_perm_cmd(ctx: Context, args: argparse.Namespace) -> Result:
    counts = await add_write_perm(ctx.admin, args.broker_name)
    lines = [
        f"add write perm of broker[{args.broker_name}] in name server[{addr}] OK, {count}"
        for addr, count in counts.items()
    ]
    return Result({"brokerName": args.broker_name, "addTopicCount": counts}, lines)
