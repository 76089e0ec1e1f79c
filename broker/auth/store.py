"""ACL 2.0's metadata: the users and the ACLs, kept in one JSON file under ``authConfigPath``.

Apache keeps them in two RocksDB databases (``users`` and ``acls``); we keep them in
``<authConfigPath>/auth.json``, rewritten whole and atomically on every change (a temporary
file, fsync, rename, fsync of the directory), so a crash leaves the previous or the new
metadata, never a torn file. Reads come from memory. The tables are small (accounts and their
policies), so rewriting the file per change costs nothing worth a database.

The rules of creating, updating and deleting are Apache's ``AuthenticationMetadataManager`` and
``AuthorizationMetadataManager``: the same checks, in the same order, with the same messages,
raised as :class:`AuthenticationError` or :class:`AuthorizationError` (which the broker answers
with NO_PERMISSION, as Apache does). Listings come sorted by key, as RocksDB iterates.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .model import (
    Acl,
    Action,
    Policy,
    PolicyType,
    Resource,
    User,
    UserStatus,
    UserType,
    subject_username,
    valid_ip_or_cidr,
)

FILE_NAME = "auth.json"


class AuthError(Exception):
    """A refusal or a rejected change; its message is the remark clients see."""


class AuthenticationError(AuthError):
    """Apache's ``AuthenticationException``."""


class AuthorizationError(AuthError):
    """Apache's ``AuthorizationException``."""


def _key_order(key: str) -> bytes:
    return key.encode("utf-8")


class AuthStore:
    """The users and ACLs of one broker, durable in ``<path>/auth.json``."""

    def __init__(self, path: str | Path) -> None:
        self.dir = Path(path)
        self.file = self.dir / FILE_NAME
        self.users: dict[str, User] = {}
        self.acls: dict[str, Acl] = {}
        #: Bumped by every load and change, so that decisions cached on it are never stale.
        self.version = 0

    def load(self) -> None:
        try:
            data = json.loads(self.file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        self.users = {u["username"]: User.from_json(u) for u in data.get("users") or []}
        self.acls = {a["subject"]: Acl.from_json(a) for a in data.get("acls") or []}
        self.version += 1

    def _save(self) -> None:
        self.version += 1
        data = {
            "acls": [self.acls[k].to_json() for k in sorted(self.acls, key=_key_order)],
            "users": [self.users[k].to_json() for k in sorted(self.users, key=_key_order)],
        }
        self.dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{FILE_NAME}.", dir=self.dir)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(data, out, indent=1, ensure_ascii=False)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.file)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        dir_fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    # -- users ----------------------------------------------------------------------------

    def get_user(self, username: str | None) -> User | None:
        if username is None or not username.strip():
            raise AuthenticationError("username can not be blank")
        return self.users.get(username)

    def is_super(self, username: str) -> bool:
        user = self.get_user(username)
        if user is None:
            raise AuthenticationError(f"User:{username} is not found")
        return user.is_super

    def create_user(self, user: User) -> None:
        _validate_user(user, create=True)
        if user.user_type is None:
            user.user_type = UserType.NORMAL
        if user.user_status is None:
            user.user_status = UserStatus.ENABLE
        if user.username in self.users:
            raise AuthenticationError("The user is existed")
        self.users[user.username] = user
        self._save()

    def update_user(self, user: User) -> None:
        _validate_user(user, create=False)
        old = self.users.get(user.username)
        if old is None:
            raise AuthenticationError("The user is not exist")
        if user.password is not None and user.password.strip():
            old.password = user.password
        if user.user_type is not None:
            old.user_type = user.user_type
        if user.user_status is not None:
            old.user_status = user.user_status
        self._save()

    def delete_user(self, username: str | None) -> None:
        """The user and its ACL."""
        if username is None or not username.strip():
            raise AuthenticationError("username can not be blank")
        self.users.pop(username, None)
        self.acls.pop(User(username).subject_key, None)
        self._save()

    def list_users(self, filter: str | None = None) -> list[User]:
        return [
            self.users[name]
            for name in sorted(self.users, key=_key_order)
            if not (filter and filter.strip()) or filter in name
        ]

    # -- ACLs -----------------------------------------------------------------------------

    def _subject_exists(self, subject: str) -> bool:
        username = subject_username(subject)
        return username is not None and username in self.users

    def get_acl(self, subject: str) -> Acl | None:
        """The subject's ACL as the authorization check sees it (no existence check)."""
        return self.acls.get(_canonical(subject))

    def acl_of_existing(self, subject: str) -> Acl | None:
        """GET_ACL: the subject must exist."""
        if not self._subject_exists(subject):
            raise AuthorizationError("The subject is not exist.")
        return self.get_acl(subject)

    def put_acl(self, acl: Acl) -> None:
        """CREATE_ACL and UPDATE_ACL (Apache treats both alike): merge into the subject's ACL."""
        _validate_acl(acl)
        for policy in acl.policies:
            if policy.policy_type is None:
                policy.policy_type = PolicyType.CUSTOM
        if not self._subject_exists(acl.subject):
            raise AuthorizationError(f"The subject of {_canonical(acl.subject)} is not exist.")
        key = _canonical(acl.subject)
        old = self.acls.get(key)
        if old is None:
            self.acls[key] = Acl(key, acl.policies)
        else:
            old.update_policies(acl.policies)
        self._save()

    def delete_acl(
        self, subject: str, policy_type: PolicyType | None = None, resource: Resource | None = None
    ) -> None:
        """The whole ACL, or one resource's entry of one policy (Custom by default); an ACL
        left without policies goes."""
        if policy_type is None:
            policy_type = PolicyType.CUSTOM
        key = _canonical(subject)
        if not self._subject_exists(subject):
            raise AuthorizationError("The subject is not exist.")
        old = self.acls.get(key)
        if old is None:
            raise AuthorizationError("The acl is not exist.")
        if resource is not None:
            old.delete_entry(policy_type, resource)
        if resource is None or not old.policies:
            del self.acls[key]
        self._save()

    def list_acls(self, subject_filter: str | None = None, resource_filter: str | None = None) -> list[Acl]:
        """Apache's listing: ACLs whose subject contains ``subject_filter``; of those, the entries
        whose resource contains ``resource_filter`` (all of them when the subject itself
        contains it), ACLs left empty omitted."""
        result: list[Acl] = []
        for key in sorted(self.acls, key=_key_order):
            if subject_filter and subject_filter.strip() and subject_filter not in key:
                continue
            policies: list[Policy] = []
            for policy in self.acls[key].policies:
                entries = list(policy.entries)
                if not entries:
                    policies.append(Policy(policy.policy_type, entries))
                    continue
                if resource_filter and resource_filter.strip() and resource_filter not in key:
                    entries = [e for e in entries if resource_filter in e.resource.key]
                if entries:
                    policies.append(Policy(policy.policy_type, entries))
            if policies:
                result.append(Acl(key, policies))
        return result


def _canonical(subject: str) -> str:
    username = subject_username(subject)
    return User(username).subject_key if username is not None else subject


def _validate_user(user: User, *, create: bool) -> None:
    if not user.username or not user.username.strip():
        raise AuthenticationError("username can not be blank")
    if create and (user.password is None or not user.password.strip()):
        raise AuthenticationError("password can not be blank")


def _validate_acl(acl: Acl) -> None:
    if subject_username(acl.subject) is None:
        raise AuthorizationError("The subject type is null.")
    if not acl.policies:
        raise AuthorizationError("The policies is empty.")
    for policy in acl.policies:
        if not policy.entries:
            raise AuthorizationError("The policy entries is empty.")
        for entry in policy.entries:
            _validate_entry(entry.resource, entry.actions, entry.source_ips, entry.decision)


def _validate_entry(resource: Resource | None, actions: list[Action], source_ips: Any, decision: Any) -> None:
    if resource is None:
        raise AuthorizationError("The resource is null.")
    if not actions:
        raise AuthorizationError("The actions is empty.")
    if Action.ANY in actions:
        raise AuthorizationError("The actions can not be Any.")
    for ip in source_ips or []:
        if ip is None or not str(ip).strip():
            raise AuthorizationError("The source ip is empty.")
        if not valid_ip_or_cidr(str(ip)):
            raise AuthorizationError("The source ip is invalid.")
    if decision is None:
        raise AuthorizationError("The decision is null or illegal.")
