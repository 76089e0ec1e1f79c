"""Commands of RocketMQ 5's controller mode: the controllers' leader and settings, each broker
group's SyncStateSet, a designated election, forgetting brokers, and a broker's epochs. Names,
options and output follow Apache 5.3's ``mqadmin``."""

from __future__ import annotations

import argparse
from typing import Any

from aiorocketmq.client.controller_admin import (
    broker_epochs,
    clean_broker_metadata,
    controller_config,
    controller_metadata,
    elect_master,
    sync_state_data,
    update_controller_config,
)
from aiorocketmq.protocol.body import ClusterInfo

from .command import CommandSet, Context, Result, arg

commands = CommandSet()

CONTROLLER = arg(
    "-a", "--controllerAddress", dest="controller", required=True, help="the address of controller"
)
CONTROLLERS = arg(
    "-a",
    "--controllerAddress",
    dest="controller",
    required=True,
    help="Controller address list, eg: 192.168.0.1:9878;192.168.0.2:9878",
)
#: ``Long.MAX_VALUE``: the open end of a broker's last epoch, which the tool shows as the log's end.
OPEN_END = (1 << 63) - 1


def _addresses(text: str) -> list[str]:
    return [part.strip() for part in text.split(";") if part.strip()]


@commands.add("getControllerMetaData", "Get controller cluster's metadata.", CONTROLLER, namesrv_needed=False)
async def get_controller_metadata(ctx: Context, args: argparse.Namespace) -> Result:
    metadata = await controller_metadata(ctx.admin, args.controller.strip())
    lines = [
        "",
        f"#ControllerGroup\t{metadata.group}",
        f"#ControllerLeaderId\t{metadata.controller_leader_id}",
        f"#ControllerLeaderAddress\t{metadata.controller_leader_address}",
    ]
    lines += [f"#Peer:\t{peer}" for peer in _addresses(metadata.peers or "")]
    return Result(metadata.to_fields(), lines)


def _broker_names(info: ClusterInfo, cluster: str) -> list[str]:
    return sorted(info.cluster_addr_table.get(cluster, []))


@commands.add(
    "getSyncStateSet",
    "Fetch syncStateSet for target brokers.",
    CONTROLLER,
    arg("-c", "--clusterName", dest="cluster", help="which cluster"),
    arg("-b", "--brokerName", dest="broker_name", help="which broker to fetch"),
    one_of=(("broker_name", "cluster"),),
    namesrv_needed=False,
)
async def get_sync_state_set(ctx: Context, args: argparse.Namespace) -> Result:
    if args.broker_name:
        names = [args.broker_name.strip()]
    elif not args.namesrv:
        raise ValueError(
            "-c needs a name server to list the cluster's brokers: give -n host:9876 or set NAMESRV_ADDR"
        )
    else:
        names = _broker_names(await ctx.admin.cluster_info(), args.cluster.strip())
    controller = _addresses(args.controller)[0]
    info = await sync_state_data(ctx.admin, controller, names)
    lines: list[str] = []
    for name, replicas in info.replicas_info_table.items():
        lines += [
            "",
            f"#brokerName\t{name}",
            f"#MasterBrokerId\t{replicas.master_broker_id}",
            f"#MasterAddr\t{replicas.master_address}",
            f"#MasterEpoch\t{replicas.master_epoch}",
            f"#SyncStateSetEpoch\t{replicas.sync_state_set_epoch}",
            f"#SyncStateSetNums\t{len(replicas.in_sync_replicas)}",
        ]
        for kind, members in (
            ("InSyncReplica", replicas.in_sync_replicas),
            ("NotInSyncReplica", replicas.not_in_sync_replicas),
        ):
            for member in members:
                lines += [
                    "",
                    f"{kind}:\tReplicaIdentity{{brokerName='{member.broker_name}', brokerId={member.broker_id}, "
                    f"brokerAddress='{member.broker_address}', alive={str(member.alive).lower()}}}",
                ]
    return Result(info.to_wire(), lines)


@commands.add(
    "getBrokerEpoch",
    "Fetch broker epoch entries.",
    arg("-c", "--clusterName", dest="cluster", help="which cluster"),
    arg("-b", "--brokerName", dest="broker_name", help="which broker to fetch"),
    one_of=(("broker_name", "cluster"),),
)
async def get_broker_epoch(ctx: Context, args: argparse.Namespace) -> Result:
    info = await ctx.admin.cluster_info()
    names = [args.broker_name.strip()] if args.broker_name else _broker_names(info, args.cluster.strip())
    addrs = [
        addr
        for name in names
        if (data := info.broker_addr_table.get(name))
        for addr in data.broker_addrs.values()
    ]
    caches: dict[str, Any] = {}
    lines: list[str] = []
    for addr in addrs:
        cache = await broker_epochs(ctx.admin, addr)
        caches[addr] = cache.to_wire()
        lines += [
            "",
            f"#clusterName\t{cache.cluster_name}",
            f"#brokerName\t{cache.broker_name}",
            f"#brokerAddr\t{addr}",
            f"#brokerId\t{cache.broker_id}",
        ]
        for i, entry in enumerate(cache.epoch_list):
            end = cache.max_offset if i == len(cache.epoch_list) - 1 else entry.end_offset
            lines.append(
                f"#Epoch: EpochEntry{{epoch={entry.epoch}, startOffset={entry.start_offset}, endOffset={end}}}"
            )
    return Result(caches, lines)


@commands.add(
    "electMaster",
    "Re-elect the specified broker as master.",
    CONTROLLER,
    arg(
        "-b",
        "--brokerId",
        dest="broker_id",
        type=int,
        required=True,
        help="The id of the broker which requires to become master",
    ),
    arg(
        "-bn",
        "--brokerName",
        dest="broker_name",
        required=True,
        help="The broker name of the replicas that require to be manipulated",
    ),
    arg("-c", "--clusterName", dest="cluster", required=True, help="the clusterName of broker"),
    namesrv_needed=False,
)
async def elect_master_cmd(ctx: Context, args: argparse.Namespace) -> Result:
    header, body = await elect_master(
        ctx.admin, args.controller.strip(), args.cluster.strip(), args.broker_name.strip(), args.broker_id
    )
    lines = [
        "",
        f"#ClusterName\t{args.cluster}",
        f"#BrokerName\t{args.broker_name}",
        f"#BrokerMasterAddr\t{header.master_address}",
        f"#MasterEpoch\t{header.master_epoch}",
        f"#SyncStateSetEpoch\t{header.sync_state_set_epoch}",
    ]
    # Apache 5.3.3's tool reads the response body as a BrokerMemberGroup, which it is not (an
    # ElectMasterResponseBody holding one): its "#Broker id addr" lines never print. Ours prints
    # what it prints; the group is in the result's data (--json).
    return Result({**header.to_fields(), **body.to_wire()}, lines)


@commands.add(
    "cleanBrokerMetadata",
    "Clean metadata of broker on controller.",
    arg("-a", "--controllerAddress", dest="controller", required=True, help="The address of controller"),
    arg(
        "-b",
        "--brokerControllerIdsToClean",
        dest="broker_ids",
        help="The brokerController id list which requires to clean metadata. eg: 1;2;3",
    ),
    arg("-bn", "--brokerName", dest="broker_name", required=True, help="The broker name of the replicas"),
    arg("-c", "--clusterName", dest="cluster", help="The clusterName of broker"),
    arg(
        "-l",
        "--cleanLivingBroker",
        dest="clean_living",
        action="store_true",
        help="Whether clean up living brokers",
    ),
    namesrv_needed=False,
)
async def clean_broker_metadata_cmd(ctx: Context, args: argparse.Namespace) -> Result:
    # Ids that are not numbers are the controller's to refuse (CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
    # naming the bad one), as with Apache's tool, whose own check never runs.
    if not args.clean_living and not args.cluster:
        raise ValueError("cleanLivingBroker option is false, clusterName option can not be empty.")
    await clean_broker_metadata(
        ctx.admin,
        args.controller.strip(),
        args.broker_name.strip(),
        cluster=args.cluster,
        broker_ids=args.broker_ids,
        clean_living_broker=args.clean_living,
    )
    return Result(
        {"brokerName": args.broker_name, "brokerIds": args.broker_ids},
        [f"clear broker {args.broker_name} metadata from controller success! "],
    )


@commands.add("getControllerConfig", "Get controller config.", CONTROLLERS, namesrv_needed=False)
async def get_controller_config(ctx: Context, args: argparse.Namespace) -> Result:
    configs = await controller_config(ctx.admin, _addresses(args.controller))
    lines = []
    for addr, config in configs.items():
        lines.append(f"============{addr}============")
        lines.extend(f"{key:<50}=  {value}" for key, value in config.items())
    return Result(configs, lines)


@commands.add(
    "updateControllerConfig",
    "Update controller config.",
    CONTROLLERS,
    arg("-k", "--key", required=True, help="config key"),
    arg("-v", "--value", required=True, help="config value"),
    namesrv_needed=False,
)
async def update_controller_config_cmd(ctx: Context, args: argparse.Namespace) -> Result:
    addrs = _addresses(args.controller)
    await update_controller_config(ctx.admin, addrs, {args.key.strip(): args.value.strip()})
    return Result(
        {"controllerAddrs": addrs, "key": args.key, "value": args.value},
        [f"update controller config success![{', '.join(addrs)}]", f"{args.key} : {args.value}"],
    )
