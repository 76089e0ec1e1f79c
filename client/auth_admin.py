"""ACL 2.0 management (RocketMQ 5.3's users and ACLs, request codes 3001-3010), on top of
:class:`~client.admin.Admin`: create, change, delete, read and list the users and the ACL
policies one broker holds. Each function asks one broker; ``mqadmin``'s auth commands and the
dashboard fan out over a cluster themselves.

The requests and bodies are Apache 5.3.3's (``MQClientAPIImpl.createUser`` ... ``listAcl``): the
header names the user or subject, the body carries the JSON :class:`UserInfo` or :class:`AclInfo`.
A broker that answers anything but SUCCESS raises the code's
:class:`~protocol.errors.BrokerError` (NO_PERMISSION when the caller may not manage accounts,
INVALID_PARAMETER for a blank username, ...), with the broker's remark as its message.

::

    async with Admin("127.0.0.1:9876", options=ClientOptions(credentials=admin_credentials)) as admin:
        await create_user(admin, "127.0.0.1:10911", UserInfo(username="app", password="s3cret"))
        await create_acl(admin, "127.0.0.1:10911", acl_of("User:app", ["Topic:orders"], ["Pub"], "Allow"))
"""

from __future__ import annotations

from collections.abc import Sequence

from aiorocketmq.protocol import fastjson
from aiorocketmq.protocol.auth import (
    POLICY_TYPE,
    RESOURCE,
    RESOURCE_FILTER,
    SUBJECT,
    SUBJECT_FILTER,
    USER_FILTER,
    USERNAME,
    AclInfo,
    PolicyEntryInfo,
    PolicyInfo,
    UserInfo,
)
from aiorocketmq.protocol.codes import RequestCode
from aiorocketmq.protocol.errors import ProtocolError

from .admin import Admin


def _fields(**values: str | None) -> dict[str, str]:
    # Apache leaves an unset header field out of the request rather than sending it empty.
    return {name: value for name, value in values.items() if value is not None}


async def create_user(admin: Admin, broker_addr: str, user: UserInfo) -> None:
    """Create ``user`` on one broker (AUTH_CREATE_USER). A super user can only be created by a
    super user; an existing name is refused."""
    await admin.instance.call(
        broker_addr, RequestCode.AUTH_CREATE_USER, _fields(**{USERNAME: user.username}), user.encode()
    )


async def update_user(admin: Admin, broker_addr: str, user: UserInfo) -> None:
    """Change a user's password, type or status (AUTH_UPDATE_USER): the fields set in ``user``."""
    await admin.instance.call(
        broker_addr, RequestCode.AUTH_UPDATE_USER, _fields(**{USERNAME: user.username}), user.encode()
    )


async def delete_user(admin: Admin, broker_addr: str, username: str) -> None:
    """Delete a user (AUTH_DELETE_USER); deleting one that does not exist succeeds."""
    await admin.instance.call(broker_addr, RequestCode.AUTH_DELETE_USER, _fields(**{USERNAME: username}))


async def get_user(admin: Admin, broker_addr: str, username: str) -> UserInfo | None:
    """One user (AUTH_GET_USER), None when the broker has no such user."""
    response = await admin.instance.call(
        broker_addr, RequestCode.AUTH_GET_USER, _fields(**{USERNAME: username})
    )
    return UserInfo.decode(response.body) if response.body else None


async def list_users(admin: Admin, broker_addr: str, filter: str | None = None) -> list[UserInfo]:
    """The users of one broker (AUTH_LIST_USER), those whose name contains ``filter`` if given."""
    response = await admin.instance.call(
        broker_addr, RequestCode.AUTH_LIST_USER, _fields(**{USER_FILTER: filter})
    )
    return [UserInfo.model_validate(item) for item in _json_list(response.body, "AUTH_LIST_USER")]


async def create_acl(admin: Admin, broker_addr: str, acl: AclInfo) -> None:
    """Add ``acl``'s policies to its subject (AUTH_CREATE_ACL); the subject must exist (a user)."""
    await admin.instance.call(
        broker_addr, RequestCode.AUTH_CREATE_ACL, _fields(**{SUBJECT: acl.subject}), acl.encode()
    )


async def update_acl(admin: Admin, broker_addr: str, acl: AclInfo) -> None:
    """Replace the entries of ``acl``'s resources in its subject's policies (AUTH_UPDATE_ACL)."""
    await admin.instance.call(
        broker_addr, RequestCode.AUTH_UPDATE_ACL, _fields(**{SUBJECT: acl.subject}), acl.encode()
    )


async def delete_acl(
    admin: Admin,
    broker_addr: str,
    subject: str,
    policy_type: str | None = None,
    resource: str | None = None,
) -> None:
    """Delete a subject's ACL (AUTH_DELETE_ACL): all of it, or only the entry of ``resource``
    (in the ``policy_type`` policy when given)."""
    header = _fields(**{SUBJECT: subject, POLICY_TYPE: policy_type, RESOURCE: resource})
    await admin.instance.call(broker_addr, RequestCode.AUTH_DELETE_ACL, header)


async def get_acl(admin: Admin, broker_addr: str, subject: str) -> AclInfo | None:
    """A subject's ACL (AUTH_GET_ACL), None when it has none."""
    response = await admin.instance.call(broker_addr, RequestCode.AUTH_GET_ACL, _fields(**{SUBJECT: subject}))
    return AclInfo.decode(response.body) if response.body else None


async def list_acls(
    admin: Admin,
    broker_addr: str,
    subject_filter: str | None = None,
    resource_filter: str | None = None,
) -> list[AclInfo]:
    """The ACLs of one broker (AUTH_LIST_ACL), those whose subject contains ``subject_filter``
    and with an entry whose resource contains ``resource_filter``, when given."""
    header = _fields(**{SUBJECT_FILTER: subject_filter, RESOURCE_FILTER: resource_filter})
    response = await admin.instance.call(broker_addr, RequestCode.AUTH_LIST_ACL, header)
    return [AclInfo.model_validate(item) for item in _json_list(response.body, "AUTH_LIST_ACL")]


def acl_of(
    subject: str,
    resources: Sequence[str],
    actions: Sequence[str],
    decision: str,
    source_ips: Sequence[str] | None = None,
) -> AclInfo:
    """An ACL of one custom policy with an entry per resource, each with the same actions,
    source IPs and decision: what ``mqadmin createAcl``/``updateAcl`` send (Apache's
    ``AclInfo.of``)."""
    entries = [
        PolicyEntryInfo(
            resource=resource,
            actions=list(actions),
            source_ips=list(source_ips) if source_ips else None,
            decision=decision,
        )
        for resource in resources
    ]
    return AclInfo(subject=subject, policies=[PolicyInfo(entries=entries)])


def _json_list(body: bytes | None, what: str) -> list[object]:
    # The broker leaves the body out when there is nothing to list.
    if not body:
        return []
    items = fastjson.loads(body)
    if not isinstance(items, list):
        raise ProtocolError(f"{what} answered something other than a JSON list")
    return items
