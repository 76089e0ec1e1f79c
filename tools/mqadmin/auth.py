"""ACL 2.0 commands of RocketMQ 5.3 (Apache's ``tools/command/auth``): users (createUser,
updateUser, deleteUser, getUser, listUser, copyUser) and ACL policies (createAcl, updateAcl,
deleteAcl, getAcl, listAcl, copyAcl), with Apache 5.3.3's options and output.

As in Apache, a change aimed at a cluster (``-c``) goes to every broker of it, masters and
slaves, each of which keeps its own users and ACLs; a read aimed at a cluster asks its masters
(getUser and listUser stop at the first that answers something). The tool signs with the
account ``ROCKETMQ_ACCESS_KEY``/``ROCKETMQ_SECRET_KEY`` name, which must be a super user (or
hold Cluster Update/Get rights) on the brokers.
"""

from __future__ import annotations

import argparse
from typing import Any

from aiorocketmq.client import Admin
from aiorocketmq.client.auth_admin import (
    acl_of,
    create_acl,
    create_user,
    delete_acl,
    delete_user,
    get_acl,
    get_user,
    list_acls,
    list_users,
    update_acl,
    update_user,
)
from aiorocketmq.protocol.auth import AclInfo, UserInfo
from aiorocketmq.protocol.errors import ClientError

from .command import BROKER_OR_CLUSTER, CommandSet, Context, Result, arg, target_masters

commands = CommandSet()

#: Apache's column layouts (GetUserSubCommand, GetAclSubCommand).
_USER_COLUMNS = (16, 22, 22, 22)
_ACL_COLUMNS = (16, 10, 22, 20, 24, 10)
_USER_HEADER = ("#UserName", "#Password", "#UserType", "#UserStatus")
_ACL_HEADER = ("#Subject", "#PolicyType", "#Resource", "#Actions", "#SourceIp", "#Decision")


def _java(value: Any) -> str:
    """A value as Java's ``%s`` prints it: ``null``, and lists as ``[a, b]``."""
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ", ".join(_java(v) for v in value) + "]"
    return str(value)


def _row(widths: tuple[int, ...], values: tuple[Any, ...]) -> str:
    # Apache's "%-16s  %-22s ..." format: left-aligned columns two spaces apart, padding kept.
    return "  ".join(_java(v).ljust(w) for w, v in zip(widths, values, strict=True))


def _user_lines(users: list[UserInfo]) -> list[str]:
    rows = [(u.username, u.password, u.user_type, u.user_status) for u in users]
    return [_row(_USER_COLUMNS, _USER_HEADER), *(_row(_USER_COLUMNS, r) for r in rows)]


def _acl_lines(acls: list[AclInfo]) -> list[str]:
    lines = [_row(_ACL_COLUMNS, _ACL_HEADER)]
    for acl in acls:
        if not acl.policies:
            lines.append(_row(_ACL_COLUMNS, (acl.subject, "", "", "", "", "")))
        for policy in acl.policies or []:
            for entry in policy.entries or []:
                values = (acl.subject, policy.policy_type, entry.resource, entry.actions, entry.source_ips)
                lines.append(_row(_ACL_COLUMNS, (*values, entry.decision)))
    return lines


def _split(text: str | None) -> list[str] | None:
    # StringUtils.split: empty pieces dropped; each piece trimmed.
    if text is None:
        return None
    return [piece.strip() for piece in text.split(",") if piece.strip()]


def _trim(text: str | None) -> str | None:
    return text.strip() if text is not None else None


async def _brokers(admin: Admin, args: argparse.Namespace) -> list[str]:
    """Where a change goes: ``-b`` as given, or every broker of the ``-c`` cluster, masters and
    slaves (Apache's fetchMasterAndSlaveAddrByClusterName)."""
    if args.broker_addr:
        return [args.broker_addr.strip()]
    info = await admin.cluster_info()
    cluster = args.cluster.strip()
    if cluster not in info.cluster_addr_table:
        raise ClientError(f"cluster {cluster!r} is unknown; known: {sorted(info.cluster_addr_table)}")
    addrs: list[str] = []
    for name in sorted(info.cluster_addr_table[cluster]):
        data = info.broker_addr_table.get(name)
        if data is not None:
            addrs.extend(data.broker_addrs[i] for i in sorted(data.broker_addrs))
    return addrs


def _target(what: str, verb: str) -> tuple[tuple[tuple[str, ...], dict[str, Any]], ...]:
    return (
        arg("-c", "--clusterName", dest="cluster", help=f"{verb} {what} to which cluster"),
        arg("-b", "--brokerAddr", dest="broker_addr", help=f"{verb} {what} to which broker"),
    )


def _reads(what: str, verb: str) -> tuple[tuple[tuple[str, ...], dict[str, Any]], ...]:
    return (
        arg("-b", "--brokerAddr", dest="broker_addr", help=f"{verb} {what} for which broker"),
        arg("-c", "--clusterName", dest="cluster", help=f"{verb} {what} for specified cluster"),
    )


# -- users -------------------------------------------------------------------------------------


@commands.add(
    "createUser",
    "Create user to cluster.",
    *_target("user", "create"),
    arg("-u", "--username", required=True, help="the username of user to create."),
    arg("-p", "--password", required=True, help="the password of user to create"),
    arg("-t", "--userType", dest="user_type", help="the userType of user to create"),
    one_of=BROKER_OR_CLUSTER,
)
async def create_user_command(ctx: Context, args: argparse.Namespace) -> Result:
    user = UserInfo(
        username=_trim(args.username), password=_trim(args.password), user_type=_trim(args.user_type)
    )
    addrs = await _brokers(ctx.admin, args)
    for addr in addrs:
        await create_user(ctx.admin, addr, user)
    return Result(
        {"username": user.username, "brokerAddrs": addrs}, [f"create user to {a} success." for a in addrs]
    )


@commands.add(
    "updateUser",
    "Update user to cluster.",
    *_target("user", "update"),
    arg("-u", "--username", required=True, help="the username of user to update."),
    arg("-p", "--password", help="the password of user to update"),
    arg("-t", "--userType", dest="user_type", help="the userType of user to update"),
    arg("-s", "--userStatus", dest="user_status", help="the userStatus of user to update"),
    one_of=BROKER_OR_CLUSTER,
)
async def update_user_command(ctx: Context, args: argparse.Namespace) -> Result:
    # Apache's option group wants exactly one of -p/-t/-s; any of them is enough for the broker.
    if args.password is None and args.user_type is None and args.user_status is None:
        raise ClientError("give at least one of -p (password), -t (userType), -s (userStatus)")
    user = UserInfo(
        username=_trim(args.username),
        password=_trim(args.password),
        user_type=_trim(args.user_type),
        user_status=_trim(args.user_status),
    )
    addrs = await _brokers(ctx.admin, args)
    for addr in addrs:
        await update_user(ctx.admin, addr, user)
    return Result(
        {"username": user.username, "brokerAddrs": addrs}, [f"update user to {a} success." for a in addrs]
    )


@commands.add(
    "deleteUser",
    "Delete user from cluster.",
    arg("-c", "--clusterName", dest="cluster", help="delete user from which cluster"),
    arg("-b", "--brokerAddr", dest="broker_addr", help="delete user from which broker"),
    arg("-u", "--username", required=True, help="the username of user to delete."),
    one_of=BROKER_OR_CLUSTER,
)
async def delete_user_command(ctx: Context, args: argparse.Namespace) -> Result:
    username = args.username.strip()
    addrs = await _brokers(ctx.admin, args)
    for addr in addrs:
        await delete_user(ctx.admin, addr, username)
    # "to", as Apache 5.3.3 prints it.
    return Result(
        {"username": username, "brokerAddrs": addrs}, [f"delete user to {a} success." for a in addrs]
    )


@commands.add(
    "getUser",
    "Get user from cluster.",
    *_reads("user", "get"),
    arg("-u", "--username", help="the username of user to get"),
    one_of=BROKER_OR_CLUSTER,
)
async def get_user_command(ctx: Context, args: argparse.Namespace) -> Result:
    username = _trim(args.username) or ""
    for addr in await target_masters(ctx.admin, args):
        user = await get_user(ctx.admin, addr, username)
        if user is not None:
            return Result(user.model_dump(by_alias=True, exclude_none=True), _user_lines([user]))
    return Result(None, [])


@commands.add(
    "listUser",
    "List user from cluster.",
    *_reads("user", "list"),
    arg("-f", "--filter", help="the filter to list users"),
    one_of=BROKER_OR_CLUSTER,
)
async def list_user_command(ctx: Context, args: argparse.Namespace) -> Result:
    for addr in await target_masters(ctx.admin, args):
        users = await list_users(ctx.admin, addr, _trim(args.filter))
        if users:
            lines = _user_lines(users)
            if args.cluster:
                lines.append(f"get user from {addr} success.")
            return Result([u.model_dump(by_alias=True, exclude_none=True) for u in users], lines)
    return Result([], [])


@commands.add(
    "copyUser",
    "Copy user to cluster.",
    arg(
        "-f",
        "--fromBroker",
        dest="from_broker",
        required=True,
        help="the source broker that the users copy from",
    ),
    arg("-t", "--toBroker", dest="to_broker", required=True, help="the target broker that the users copy to"),
    arg("-u", "--usernames", help="the username list of user to copy."),
)
async def copy_user_command(ctx: Context, args: argparse.Namespace) -> Result:
    source, target = args.from_broker.strip(), args.to_broker.strip()
    names = _split(args.usernames)
    if names:
        found = [await get_user(ctx.admin, source, name) for name in names]
        users = [u for u in found if u is not None]
    else:
        users = await list_users(ctx.admin, source)
    lines = []
    for user in users:
        assert user.username is not None
        if await get_user(ctx.admin, target, user.username) is None:
            await create_user(ctx.admin, target, user)
        else:
            await update_user(ctx.admin, target, user)
        lines.append(f"copy user of {user.username} from {source} to {target} success.")
    return Result({"usernames": [u.username for u in users], "from": source, "to": target}, lines)


# -- ACLs --------------------------------------------------------------------------------------


def _acl_options(verb: str) -> tuple[tuple[tuple[str, ...], dict[str, Any]], ...]:
    return (
        *_target("acl", verb),
        arg("-s", "--subject", required=True, help=f"the subject of acl to {verb}."),
        arg("-r", "--resources", required=True, help=f"the resources of acl to {verb}"),
        arg("-a", "--actions", required=True, help=f"the actions of acl to {verb}"),
        arg("-i", "--sourceIp", dest="source_ip", help=f"the sourceIps of acl to {verb}"),
        arg("-d", "--decision", required=True, help=f"the decision of acl to {verb}"),
    )


def _acl_from(args: argparse.Namespace) -> AclInfo:
    return acl_of(
        args.subject.strip(),
        _split(args.resources) or [],
        _split(args.actions) or [],
        args.decision.strip(),
        _split(args.source_ip),
    )


@commands.add("createAcl", "Create acl to cluster.", *_acl_options("create"), one_of=BROKER_OR_CLUSTER)
async def create_acl_command(ctx: Context, args: argparse.Namespace) -> Result:
    acl = _acl_from(args)
    addrs = await _brokers(ctx.admin, args)
    for addr in addrs:
        await create_acl(ctx.admin, addr, acl)
    data = {"acl": acl.model_dump(by_alias=True, exclude_none=True), "brokerAddrs": addrs}
    return Result(data, [f"create acl to {a} success." for a in addrs])


@commands.add("updateAcl", "Update acl to cluster.", *_acl_options("update"), one_of=BROKER_OR_CLUSTER)
async def update_acl_command(ctx: Context, args: argparse.Namespace) -> Result:
    acl = _acl_from(args)
    addrs = await _brokers(ctx.admin, args)
    for addr in addrs:
        await update_acl(ctx.admin, addr, acl)
    data = {"acl": acl.model_dump(by_alias=True, exclude_none=True), "brokerAddrs": addrs}
    return Result(data, [f"update acl to {a} success." for a in addrs])


@commands.add(
    "deleteAcl",
    "Delete acl from cluster.",
    arg("-c", "--clusterName", dest="cluster", help="delete acl from which cluster"),
    arg("-b", "--brokerAddr", dest="broker_addr", help="delete acl from which broker"),
    arg("-s", "--subject", required=True, help="the subject of acl to delete."),
    arg("-r", "--resources", help="the resources of acl to delete"),
    one_of=BROKER_OR_CLUSTER,
)
async def delete_acl_command(ctx: Context, args: argparse.Namespace) -> Result:
    subject, resource = args.subject.strip(), _trim(args.resources)
    addrs = await _brokers(ctx.admin, args)
    for addr in addrs:
        await delete_acl(ctx.admin, addr, subject, resource=resource)
    data = {"subject": subject, "resource": resource, "brokerAddrs": addrs}
    return Result(data, [f"delete acl to {a} success." for a in addrs])


@commands.add(
    "getAcl",
    "Get acl from cluster.",
    *_reads("acl", "get"),
    arg("-s", "--subject", help="the subject of acl to get"),
    one_of=BROKER_OR_CLUSTER,
)
async def get_acl_command(ctx: Context, args: argparse.Namespace) -> Result:
    subject = _trim(args.subject) or ""
    found: dict[str, Any] = {}
    lines: list[str] = []
    # Unlike getUser, Apache prints every master's answer.
    for addr in await target_masters(ctx.admin, args):
        acl = await get_acl(ctx.admin, addr, subject)
        if acl is not None:
            found[addr] = acl.model_dump(by_alias=True, exclude_none=True)
            lines.extend(_acl_lines([acl]))
    return Result(found, lines)


@commands.add(
    "listAcl",
    "List acl from cluster.",
    arg("-b", "--brokerAddr", dest="broker_addr", help="list acl for which broker."),
    arg("-c", "--clusterName", dest="cluster", help="list acl for specified cluster."),
    arg("-s", "--subject", help="the subject of acl to filter."),
    arg("-r", "--resource", help="the resource of acl to filter."),
    one_of=BROKER_OR_CLUSTER,
)
async def list_acl_command(ctx: Context, args: argparse.Namespace) -> Result:
    found: dict[str, Any] = {}
    lines: list[str] = []
    for addr in await target_masters(ctx.admin, args):
        acls = await list_acls(ctx.admin, addr, _trim(args.subject), _trim(args.resource))
        if acls:
            found[addr] = [a.model_dump(by_alias=True, exclude_none=True) for a in acls]
            lines.extend(_acl_lines(acls))
    return Result(found, lines)


@commands.add(
    "copyAcl",
    "Copy acl to cluster.",
    arg(
        "-f",
        "--fromBroker",
        dest="from_broker",
        required=True,
        help="the source broker that the acls copy from",
    ),
    arg("-t", "--toBroker", dest="to_broker", required=True, help="the target broker that the acls copy to"),
    arg("-s", "--subjects", help="the subject list of acl to copy."),
)
async def copy_acl_command(ctx: Context, args: argparse.Namespace) -> Result:
    source, target = args.from_broker.strip(), args.to_broker.strip()
    subjects = _split(args.subjects)
    if subjects:
        found = [await get_acl(ctx.admin, source, subject) for subject in subjects]
        acls = [a for a in found if a is not None]
    else:
        acls = await list_acls(ctx.admin, source)
    lines = []
    for acl in acls:
        assert acl.subject is not None
        if await get_acl(ctx.admin, target, acl.subject) is None:
            await create_acl(ctx.admin, target, acl)
        else:
            await update_acl(ctx.admin, target, acl)
        lines.append(f"copy acl of {acl.subject} from {source} to {target} success.")
    return Result({"subjects": [a.subject for a in acls], "from": source, "to": target}, lines)
