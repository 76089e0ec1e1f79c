"""ACL 1.0 to ACL 2.0 (``migrateAuthFromV1Enabled``): each account of the ``plain_acl.yml``
files becomes a user with an ACL, as Apache's ``AuthMigrator`` does at start-up.

An account becomes a user of the same name whose password is its secret key (a super user when
it was an admin). Its ``topicPerms`` and ``groupPerms`` become the ``Custom`` policy (``PUB``,
``SUB``, ``PUB|SUB`` grant those actions, ``DENY`` denies all, anything else allows all);
``defaultTopicPerm`` and ``defaultGroupPerm`` become the ``Default`` policy on ``Topic:*`` and
``Group:*``. An account whose user already exists is left alone, so running it again changes
nothing and never overwrites what an administrator changed since. White-listed addresses have
no ACL 2.0 counterpart and are not carried over (as in Apache).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import yaml

from aiorocketmq.broker.acl import acl_files

from .model import (
    Acl,
    Action,
    Decision,
    Policy,
    PolicyEntry,
    PolicyType,
    Resource,
    ResourcePattern,
    ResourceType,
    User,
    UserType,
)
from .store import AuthError, AuthStore

if TYPE_CHECKING:
    from aiorocketmq.broker.config import BrokerConfig

log = logging.getLogger(__name__)


def _actions(perm: str) -> list[Action]:
    text = perm.strip()
    if text == "PUB":
        return [Action.PUB]
    if text == "SUB":
        return [Action.SUB]
    if text in ("PUB|SUB", "SUB|PUB"):
        return [Action.PUB, Action.SUB]
    return [Action.ALL]


def _decision(perm: str) -> Decision:
    if not perm.strip():
        return Decision.DENY
    return Decision.DENY if perm == "DENY" else Decision.ALLOW


def _entries(perms: Any, resource_of: Any) -> list[PolicyEntry]:
    entries: list[PolicyEntry] = []
    for item in perms or []:
        pieces = [p for p in str(item).split("=") if p]
        if len(pieces) != 2:
            continue
        name, perm = pieces[0].strip(), pieces[1].strip()
        entries.append(PolicyEntry(resource_of(name), _actions(perm), None, _decision(perm)))
    return entries


def account_to_auth(account: dict[str, Any]) -> tuple[User, Acl | None]:
    """The user and the ACL (None: no permissions given) an ACL 1.0 account becomes."""
    access_key = str(account.get("accessKey") or "")
    admin = account.get("admin", False)
    is_admin = admin is True or str(admin).lower() == "true"
    user = User(
        username=access_key,
        password=None if account.get("secretKey") is None else str(account.get("secretKey")),
        user_type=UserType.SUPER if is_admin else UserType.NORMAL,
    )
    policies: list[Policy] = []
    custom = _entries(account.get("topicPerms"), Resource.topic) + _entries(
        account.get("groupPerms"), Resource.group
    )
    if custom:
        policies.append(Policy(PolicyType.CUSTOM, custom))
    defaults: list[PolicyEntry] = []
    for key, resource_type in (
        ("defaultTopicPerm", ResourceType.TOPIC),
        ("defaultGroupPerm", ResourceType.GROUP),
    ):
        value = account.get(key)
        if value is not None and str(value).strip():
            perm = str(value).strip()
            defaults.append(
                PolicyEntry(
                    Resource(resource_type, None, ResourcePattern.ANY), _actions(perm), None, _decision(perm)
                )
            )
    if defaults:
        policies.append(Policy(PolicyType.DEFAULT, defaults))
    return user, (Acl(user.subject_key, policies) if policies else None)


def migrate_v1(store: AuthStore, config: BrokerConfig) -> int:
    """Migrate every account of the broker's ACL 1.0 files; returns how many became users.
    A file that cannot be read is logged and skipped, as is an account that cannot be moved."""
    migrated = 0
    for path in acl_files(config.rocketmq_home, config.acl_plain_file):
        if not path.is_file():
            continue
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            log.error("[ACL MIGRATE] cannot read %s: %s", path, exc)
            continue
        for account in (data.get("accounts") or []) if isinstance(data, dict) else []:
            if not isinstance(account, dict):
                continue
            user, acl = account_to_auth(account)
            try:
                if store.get_user(user.username) is not None:
                    continue
                store.create_user(user)
                if acl is not None:
                    store.put_acl(acl)
                migrated += 1
            except AuthError as exc:
                log.error("[ACL MIGRATE] cannot migrate AccessKey %s: %s", user.username, exc)
    if migrated:
        log.info("[ACL MIGRATE] %d ACL 1.0 accounts migrated to ACL 2.0 users", migrated)
    return migrated
