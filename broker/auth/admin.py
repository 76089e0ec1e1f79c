"""The ACL 2.0 management requests, codes 3001-3010: users and ACLs created, changed, deleted,
read and listed, answered as Apache 5.3.3's broker answers them.

Who may call them is the request check's business (:mod:`.requests` asks ``Update`` or ``Get``
on ``Cluster:<brokerClusterName>``, which super users hold); on top of that, as in Apache, only
a super user may create, promote, change or delete a super user. A rejected change answers
NO_PERMISSION with Apache's message (``The user is existed``, ``The subject is not exist.``);
a request without its username answers INVALID_PARAMETER. Bodies are Apache's ``UserInfo`` and
``AclInfo`` JSON (:mod:`aiorocketmq.protocol.auth`).

With ACL 2.0 off the requests still manage the metadata (Apache's broker serves them whatever
its switches say), so users and policies can be prepared before the checks are turned on.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from aiorocketmq.protocol import fastjson
from aiorocketmq.protocol.acl import ACCESS_KEY
from aiorocketmq.protocol.auth import (
    POLICY_TYPE,
    RESOURCE,
    RESOURCE_FILTER,
    SUBJECT,
    SUBJECT_FILTER,
    USER_FILTER,
    USERNAME,
)
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import ProtocolError
from aiorocketmq.protocol.transport import Connection, Handler

from .model import (
    Acl,
    Action,
    Decision,
    Policy,
    PolicyEntry,
    PolicyType,
    Resource,
    User,
    UserStatus,
    UserType,
    subject_username,
)
from .store import AuthenticationError, AuthError, AuthorizationError, AuthStore, _validate_entry

log = logging.getLogger(__name__)

_SYSTEM_ERROR = "An system error occurred, please try again later."
_AUTHZ_EXCEPTION = "org.apache.rocketmq.auth.authorization.exception.AuthorizationException"


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _json_body(body: bytes | None) -> Any:
    if not body:
        return None
    return fastjson.loads(body)


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class AuthAdminHandlers:
    """The handlers of codes 3001-3010 over one :class:`AuthStore`."""

    def __init__(self, store: AuthStore) -> None:
        self.store = store

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.AUTH_CREATE_USER: self.create_user,
            RequestCode.AUTH_UPDATE_USER: self.update_user,
            RequestCode.AUTH_DELETE_USER: self.delete_user,
            RequestCode.AUTH_GET_USER: self.get_user,
            RequestCode.AUTH_LIST_USER: self.list_users,
            RequestCode.AUTH_CREATE_ACL: self.create_acl,
            RequestCode.AUTH_UPDATE_ACL: self.update_acl,
            RequestCode.AUTH_DELETE_ACL: self.delete_acl,
            RequestCode.AUTH_GET_ACL: self.get_acl,
            RequestCode.AUTH_LIST_ACL: self.list_acls,
        }

    # -- helpers ----------------------------------------------------------------------------

    def _caller_not_super(self, cmd: RemotingCommand) -> bool:
        """Apache's ``isNotSuperUserLogin``: an unsigned request (authentication off) counts
        as a super user's."""
        access_key = _text(cmd.ext_fields.get(ACCESS_KEY))
        if not access_key:
            return False
        return not self.store.is_super(access_key)

    @staticmethod
    def _failed(cmd: RemotingCommand, what: str, exc: Exception) -> RemotingCommand:
        if isinstance(exc, AuthError):
            log.info("%s refused: %s", what, exc)
            return cmd.response(ResponseCode.NO_PERMISSION, str(exc))
        log.error("%s failed", what, exc_info=exc)
        return cmd.response(ResponseCode.SYSTEM_ERROR, _SYSTEM_ERROR)

    def _user_from_body(self, cmd: RemotingCommand, username: str) -> User:
        data = _json_body(cmd.body) or {}
        if not isinstance(data, dict):
            raise ValueError("the body is not a UserInfo object")
        return User(
            username=username,
            password=_text(data.get("password")),
            user_type=UserType.by_name(_text(data.get("userType"))),
            user_status=UserStatus.by_name(_text(data.get("userStatus"))),
        )

    # -- users ------------------------------------------------------------------------------

    def create_user(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        username = _text(cmd.ext_fields.get(USERNAME))
        if not username:
            return cmd.response(ResponseCode.INVALID_PARAMETER, "The username is blank")
        try:
            user = self._user_from_body(cmd, username)
            if user.user_type is UserType.SUPER and self._caller_not_super(cmd):
                return cmd.response(
                    ResponseCode.SYSTEM_ERROR, "The super user can only be create by super user"
                )
            self.store.create_user(user)
        except Exception as exc:
            return self._failed(cmd, f"create user {username}", exc)
        return cmd.response(ResponseCode.SUCCESS)

    def update_user(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        username = _text(cmd.ext_fields.get(USERNAME))
        if not username:
            return cmd.response(ResponseCode.INVALID_PARAMETER, "The username is blank")
        try:
            user = self._user_from_body(cmd, username)
            if user.user_type is UserType.SUPER and self._caller_not_super(cmd):
                return cmd.response(
                    ResponseCode.SYSTEM_ERROR, "The super user can only be update by super user"
                )
            old = self.store.get_user(username)
            if old is None:
                raise AuthenticationError("The user is not exist")
            if old.is_super and self._caller_not_super(cmd):
                raise AuthenticationError("The super user can only be update by super user")
            self.store.update_user(user)
        except Exception as exc:
            return self._failed(cmd, f"update user {username}", exc)
        return cmd.response(ResponseCode.SUCCESS)

    def delete_user(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        username = _text(cmd.ext_fields.get(USERNAME))
        try:
            user = self.store.get_user(username)
            if user is not None:
                if user.is_super and self._caller_not_super(cmd):
                    raise AuthenticationError("The super user can only be update by super user")
                self.store.delete_user(username)
        except Exception as exc:
            return self._failed(cmd, f"delete user {username}", exc)
        return cmd.response(ResponseCode.SUCCESS)

    def get_user(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        username = _text(cmd.ext_fields.get(USERNAME))
        if username is None or not username.strip():
            return cmd.response(ResponseCode.INVALID_PARAMETER, "The username is blank")
        try:
            user = self.store.get_user(username)
        except Exception as exc:
            return self._failed(cmd, f"get user {username}", exc)
        body = _dumps(user.to_json()) if user is not None else b""
        return cmd.response(ResponseCode.SUCCESS, body=body)

    def list_users(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        users = self.store.list_users(_text(cmd.ext_fields.get(USER_FILTER)))
        body = _dumps([u.to_json() for u in users]) if users else b""
        return cmd.response(ResponseCode.SUCCESS, body=body)

    # -- ACLs -------------------------------------------------------------------------------

    def _acl_from_body(self, cmd: RemotingCommand) -> Acl | RemotingCommand:
        """The ACL of a create or update request, or the error answer Apache gives."""
        try:
            data = _json_body(cmd.body)
        except (ValueError, ProtocolError):
            data = None
        policies_info = data.get("policies") if isinstance(data, dict) else None
        if not policies_info:
            # Apache throws from the processor itself; its remoting layer answers SYSTEM_ERROR
            # with the exception's text.
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"{_AUTHZ_EXCEPTION}: The body of acl is null")
        assert isinstance(data, dict)
        subject = _text(data.get("subject"))
        if subject_username(subject) is None:
            subject = _text(cmd.ext_fields.get(SUBJECT))
        if subject_username(subject) is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, _SYSTEM_ERROR)
        assert subject is not None
        policies, problem = policies_from_info(policies_info)
        if not policies:
            return cmd.response(ResponseCode.NO_PERMISSION, "The policies is empty.")
        if problem is not None:
            return cmd.response(ResponseCode.NO_PERMISSION, problem)
        return Acl(subject, policies)

    def create_acl(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return self._put_acl(cmd, "create")

    def update_acl(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return self._put_acl(cmd, "update")

    def _put_acl(self, cmd: RemotingCommand, what: str) -> RemotingCommand:
        acl = self._acl_from_body(cmd)
        if isinstance(acl, RemotingCommand):
            return acl
        try:
            self.store.put_acl(acl)
        except Exception as exc:
            return self._failed(cmd, f"{what} acl for {acl.subject}", exc)
        return cmd.response(ResponseCode.SUCCESS)

    def delete_acl(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        subject = _text(cmd.ext_fields.get(SUBJECT))
        if subject_username(subject) is None:
            return cmd.response(ResponseCode.NO_PERMISSION, "The subject is null.")
        assert subject is not None
        policy_type = PolicyType.by_name(_text(cmd.ext_fields.get(POLICY_TYPE)))
        resource = Resource.parse(_text(cmd.ext_fields.get(RESOURCE)))
        try:
            self.store.delete_acl(subject, policy_type, resource)
        except Exception as exc:
            return self._failed(cmd, f"delete acl for {subject}", exc)
        return cmd.response(ResponseCode.SUCCESS)

    def get_acl(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        subject = _text(cmd.ext_fields.get(SUBJECT))
        if subject_username(subject) is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, _SYSTEM_ERROR)
        assert subject is not None
        try:
            acl = self.store.acl_of_existing(subject)
        except Exception as exc:
            return self._failed(cmd, f"get acl for {subject}", exc)
        body = _dumps(acl_info(acl)) if acl is not None else b""
        return cmd.response(ResponseCode.SUCCESS, body=body)

    def list_acls(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        acls = self.store.list_acls(
            _text(cmd.ext_fields.get(SUBJECT_FILTER)), _text(cmd.ext_fields.get(RESOURCE_FILTER))
        )
        body = _dumps([acl_info(a) for a in acls]) if acls else b""
        return cmd.response(ResponseCode.SUCCESS, body=body)


def acl_info(acl: Acl) -> dict[str, Any]:
    """Apache's ``AclInfo`` JSON, keys in fastjson's order."""
    return {
        "policies": [
            {
                "entries": [e.to_info() for e in p.entries],
                **({"policyType": p.policy_type.value} if p.policy_type is not None else {}),
            }
            for p in acl.policies
        ],
        "subject": acl.subject,
    }


def policies_from_info(policies_info: list[Any]) -> tuple[list[Policy], str | None]:
    """The policies of Apache's ``AclInfo`` JSON (``policies``), and the first problem an
    entry has (None: all valid). Entries without a resource are left out."""
    policies: list[Policy] = []
    problem: str | None = None
    for info in policies_info:
        if not isinstance(info, dict):
            continue
        entries_info = info.get("entries")
        if not entries_info:
            continue
        entries: list[PolicyEntry] = []
        for entry_info in entries_info:
            if not isinstance(entry_info, dict):
                continue
            resource = Resource.parse(_text(entry_info.get("resource")))
            actions = [
                a
                for a in (Action.by_name(_text(n)) for n in entry_info.get("actions") or [])
                if a is not None
            ]
            source_ips = entry_info.get("sourceIps") or None
            decision = Decision.by_name(_text(entry_info.get("decision")))
            if problem is None:
                try:
                    _validate_entry(resource, actions, source_ips, decision)
                except AuthorizationError as exc:
                    problem = str(exc)
            if resource is not None:
                entries.append(
                    PolicyEntry(
                        resource,
                        actions,
                        [str(ip) for ip in source_ips] if source_ips else None,
                        decision,
                    )
                )
        policies.append(Policy(PolicyType.by_name(_text(info.get("policyType"))), entries))
    return policies, problem
