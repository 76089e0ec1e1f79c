"""Who may change the name server's state: signed writes from broker and admin accounts
(``authenticationEnabled=true``; docs/namesrv.md "Authenticated writes").

Every client must reach a name server, so a firewall cannot keep a stranger from registering a
broker that claims a topic, wiping a broker's write permission or rewriting the KV config. With
authentication on, each request that changes state must carry an ``AccessKey`` and a
``Signature`` made as ACL clients make them (HMAC-SHA1 over the ext fields and the body,
:mod:`protocol.acl`), by an account of the users file: a *broker* account may register,
unregister and keep a broker alive; an *admin* account may do that and every operator write.
Reads (routes, cluster info, KV values, topic lists, the configuration) stay open, so Apache's
clients and tools work unchanged.

The users file is YAML in the shape of RocketMQ's ``plain_acl.yml`` (``accounts:`` with
``accessKey``/``secretKey``), each account naming its ``role`` (``broker`` or ``admin``);
``admin: true``, as ``plain_acl.yml`` writes it, also makes an admin, so a cluster on ACL 1.0
can point the name server at its brokers' file. Accounts with neither are clients and are not
name-server accounts. The file is re-read when it changes; an edit that cannot be used keeps
the accounts in force and is logged.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiorocketmq.protocol.acl import ACCESS_KEY, SIGNATURE, verify
from aiorocketmq.protocol.codes import RequestCode, ResponseCode

log = logging.getLogger(__name__)


class Role(enum.Enum):
    BROKER = "broker"
    ADMIN = "admin"


#: What a broker sends to keep its routes: register, unregister, stay alive, claim a topic.
BROKER_WRITES: frozenset[int] = frozenset(
    {
        RequestCode.REGISTER_BROKER,
        RequestCode.UNREGISTER_BROKER,
        RequestCode.QUERY_DATA_VERSION,  # an unchanged version refreshes the broker's liveness
        RequestCode.BROKER_HEARTBEAT,
        RequestCode.REGISTER_TOPIC_IN_NAMESRV,
    }
)
#: Operator writes: only an admin account.
ADMIN_WRITES: frozenset[int] = frozenset(
    {
        RequestCode.PUT_KV_CONFIG,
        RequestCode.DELETE_KV_CONFIG,
        RequestCode.DELETE_TOPIC_IN_NAMESRV,
        RequestCode.WIPE_WRITE_PERM_OF_BROKER,
        RequestCode.ADD_WRITE_PERM_OF_BROKER,
        RequestCode.UPDATE_NAMESRV_CONFIG,
    }
)
WRITES: frozenset[int] = BROKER_WRITES | ADMIN_WRITES


class UsersFileError(ValueError):
    """A users file that cannot be used; the message names the file and the entry."""


@dataclass(frozen=True, slots=True)
class NamesrvAccount:
    access_key: str
    secret_key: str
    role: Role

    def __repr__(self) -> str:  # keep the secret out of logs and tracebacks
        return f"NamesrvAccount({self.access_key!r}, role={self.role.value})"

    def may(self, code: int) -> bool:
        return self.role is Role.ADMIN or code in BROKER_WRITES


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a write is refused: the response code and the remark the caller gets."""

    code: ResponseCode
    remark: str


@dataclass
class Users:
    """The accounts of one reading of the users file."""

    accounts: dict[str, NamesrvAccount] = field(default_factory=dict)
    #: Accounts the file lists without a name-server role (clients of the brokers).
    ignored: int = 0

    @classmethod
    def parse(cls, text: str, source: Path | str = "users file") -> Users:
        # Imported here: a name server without authentication runs from the SDK's install,
        # which has no YAML library (the [server] extra brings it).
        import yaml

        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise UsersFileError(f"{source}: {exc}") from None
        if not isinstance(data, dict):
            raise UsersFileError(f"{source}: not a mapping with an 'accounts' list")
        entries = data.get("accounts") or []
        if not isinstance(entries, list):
            raise UsersFileError(f"{source}: 'accounts' must be a list")
        users = cls()
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict):
                raise UsersFileError(f"{source}: accounts[{i}] is not a mapping")
            account = _account(entry, f"{source}: accounts[{i}]")
            if account is None:
                users.ignored += 1
            else:
                users.accounts.setdefault(account.access_key, account)
        return users

    @classmethod
    def load(cls, path: Path) -> Users:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise UsersFileError(f"cannot read the users file: {exc}") from None
        return cls.parse(text, path)


def _account(entry: Mapping[str, Any], where: str) -> NamesrvAccount | None:
    access_key = str(entry.get("accessKey") or "").strip()
    secret_key = str(entry.get("secretKey") or "").strip()
    if not access_key or not secret_key:
        raise UsersFileError(f"{where}: an account needs accessKey and secretKey")
    role_name = entry.get("role")
    if role_name is not None:
        try:
            return NamesrvAccount(access_key, secret_key, Role(str(role_name).strip().lower()))
        except ValueError:
            raise UsersFileError(
                f"{where}: account {access_key}: role {role_name!r} is neither 'broker' nor 'admin'"
            ) from None
    admin = entry.get("admin", False)
    if admin is True or str(admin).lower() == "true":
        return NamesrvAccount(access_key, secret_key, Role.ADMIN)
    return None


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _code_name(code: int) -> str:
    try:
        return f"{RequestCode(code).name} (code {code})"
    except ValueError:
        return f"request code {code}"


class WriteAuthenticator:
    """Checks each write against the users file, re-reading it when it changes."""

    def __init__(self, path: Path, *, reload_interval: float = 1.0) -> None:
        self.path = path
        self.reload_interval = reload_interval
        self._stamp = _stamp(path)
        self.users = Users.load(path)
        self._next_look = time.monotonic() + reload_interval

    def reload_if_changed(self) -> bool:
        """Re-read the file when it was edited; an unusable edit keeps the accounts in force."""
        stamp = _stamp(self.path)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            users = Users.load(self.path)
        except UsersFileError as exc:
            log.error("name server authentication: keeping the previous accounts: %s", exc)
            return False
        self.users = users
        log.info("name server authentication: %s", self.describe())
        return True

    def describe(self) -> str:
        roles = [a.role for a in self.users.accounts.values()]
        return (
            f"{roles.count(Role.BROKER)} broker and {roles.count(Role.ADMIN)} admin accounts "
            f"from {self.path}"
            + (f" ({self.users.ignored} without a role ignored)" if self.users.ignored else "")
        )

    def check(self, code: int, fields: Mapping[str, Any], body: bytes | None) -> Refusal | None:
        """None when the request may change the name server's state, else why not."""
        now = time.monotonic()
        if now >= self._next_look:
            self._next_look = now + self.reload_interval
            self.reload_if_changed()
        what = _code_name(code)
        needs = "an admin account" if code in ADMIN_WRITES else "a broker or admin account"
        access_key = fields.get(ACCESS_KEY)
        if not access_key:
            return Refusal(
                ResponseCode.SYSTEM_ERROR,
                f"name server authentication: {what} must be signed by {needs} (no AccessKey)",
            )
        account = self.users.accounts.get(str(access_key))
        if account is None:
            return Refusal(
                ResponseCode.SYSTEM_ERROR,
                f"name server authentication: AccessKey={access_key} is not a name-server account; "
                f"{what} must be signed by {needs}",
            )
        if SIGNATURE not in fields or not verify(fields, body, account.secret_key):
            return Refusal(
                ResponseCode.SYSTEM_ERROR,
                f"name server authentication: signature check failed for AccessKey={access_key} on {what}",
            )
        if not account.may(code):
            return Refusal(
                ResponseCode.NO_PERMISSION,
                f"name server authentication: AccessKey={access_key} is a {account.role.value} account; "
                f"{what} needs {needs}",
            )
        return None
