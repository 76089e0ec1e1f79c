"""ACL 2.0's vocabulary and its one decision: users, resources, policies, and which policy entry
answers a request (RocketMQ 5.3's ``auth`` module, ``docs/security.md``).

Everything here is pure: no I/O, no clock. The names on the wire and in the metadata file are
Apache 5.3.3's (``Topic:orders``, ``Pub``, ``Allow``, ``Super``, ``enable``), parsed without
regard to case as Apache parses them.

The decision follows Apache's ``AclAuthorizationHandler`` to the letter, quirks included, so
that a broker of ours and one of Apache's answer the same request the same way: the entries of
the subject's ``Custom`` policy that match the resource, the actions and the source address are
taken (those of the ``Default`` policy only when none matches), sorted with Apache's
comparator, and the first one decides. That comparator is not a consistent order (a literal and
a prefixed entry each claim to come first, and a deny tie is broken by which side it is on), so
the result depends on the sort algorithm: :func:`java_sort` reproduces what Java's
``List.sort`` does for the lists a request can produce.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypeVar

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"


class _Named(Enum):
    """An enum whose wire form is its value, read without regard to case (Apache's
    ``getByName``)."""

    @classmethod
    def by_name(cls: type[_E], name: str | None) -> _E | None:
        if name is None:
            return None
        wanted = name.lower()
        for member in cls:
            if str(member.value).lower() == wanted:
                return member
        return None


_E = TypeVar("_E", bound=_Named)


class ResourceType(_Named):
    UNKNOWN = "Unknown"
    ANY = "Any"
    CLUSTER = "Cluster"
    NAMESPACE = "Namespace"
    TOPIC = "Topic"
    GROUP = "Group"


class ResourcePattern(_Named):
    ANY = "ANY"
    LITERAL = "LITERAL"
    PREFIXED = "PREFIXED"


class Action(_Named):
    UNKNOWN = "Unknown"
    ALL = "All"
    ANY = "Any"
    PUB = "Pub"
    SUB = "Sub"
    CREATE = "Create"
    UPDATE = "Update"
    DELETE = "Delete"
    GET = "Get"
    LIST = "List"


class Decision(_Named):
    ALLOW = "Allow"
    DENY = "Deny"


class PolicyType(_Named):
    CUSTOM = "Custom"
    DEFAULT = "Default"


class UserType(_Named):
    SUPER = "Super"
    NORMAL = "Normal"


class UserStatus(_Named):
    ENABLE = "enable"
    DISABLE = "disable"


USER_SUBJECT = "User"


# -- users --------------------------------------------------------------------------------


@dataclass
class User:
    username: str
    password: str | None = None
    user_type: UserType | None = None
    user_status: UserStatus | None = None

    @property
    def subject_key(self) -> str:
        return f"{USER_SUBJECT}:{self.username}"

    @property
    def is_super(self) -> bool:
        return self.user_type is UserType.SUPER

    def to_json(self) -> dict[str, Any]:
        """The stored and the wire form (Apache's ``UserInfo``), keys in fastjson's order."""
        data: dict[str, Any] = {}
        if self.password is not None:
            data["password"] = self.password
        if self.user_status is not None:
            data["userStatus"] = self.user_status.value
        if self.user_type is not None:
            data["userType"] = self.user_type.value
        data["username"] = self.username
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> User:
        return cls(
            username=str(data.get("username") or ""),
            password=data.get("password"),
            user_type=UserType.by_name(data.get("userType")),
            user_status=UserStatus.by_name(data.get("userStatus")),
        )


def subject_username(subject_key: str | None) -> str | None:
    """The username of a ``User:<name>`` subject; None for anything else (Apache's
    ``Subject.of``: the type before the first colon, any case)."""
    if subject_key is None:
        return None
    kind, sep, name = subject_key.partition(":")
    if kind.lower() != USER_SUBJECT.lower():
        return None
    return name if sep else ""


# -- resources ------------------------------------------------------------------------------


def is_retry_topic(name: str | None) -> bool:
    return name is not None and name.startswith(RETRY_PREFIX)


def without_retry_and_dlq(name: str) -> str:
    if name.startswith(RETRY_PREFIX):
        return name[len(RETRY_PREFIX) :]
    if name.startswith(DLQ_PREFIX):
        return name[len(DLQ_PREFIX) :]
    return name


@dataclass(frozen=True)
class Resource:
    type: ResourceType
    name: str | None
    pattern: ResourcePattern

    @classmethod
    def topic(cls, name: str | None) -> Resource:
        return cls(ResourceType.TOPIC, name, ResourcePattern.LITERAL)

    @classmethod
    def group(cls, name: str | None) -> Resource:
        """A group; a retry topic names its group (``%RETRY%g`` is ``Group:g``)."""
        if is_retry_topic(name):
            assert name is not None
            name = without_retry_and_dlq(name)
        return cls(ResourceType.GROUP, name, ResourcePattern.LITERAL)

    @classmethod
    def cluster(cls, name: str | None) -> Resource:
        return cls(ResourceType.CLUSTER, name, ResourcePattern.LITERAL)

    @classmethod
    def parse(cls, key: str | None) -> Resource | None:
        """``*``, ``Topic:*``, ``Topic:orders*``, ``Group:g``...; None when the type is unknown
        or the key blank."""
        if key is None or not key.strip():
            return None
        if key == "*":
            return cls(ResourceType.ANY, None, ResourcePattern.ANY)
        kind, _, name = key.partition(":")
        resource_type = ResourceType.by_name(kind)
        if resource_type is None:
            return None
        if name == "*":
            return cls(resource_type, None, ResourcePattern.ANY)
        if name.endswith("*"):
            return cls(resource_type, name[: name.index("*")], ResourcePattern.PREFIXED)
        return cls(resource_type, name, ResourcePattern.LITERAL)

    @property
    def key(self) -> str:
        if self.type is ResourceType.ANY:
            return "*"
        # Java's string concatenation spells a missing name "null".
        name = "null" if self.name is None else self.name
        if self.pattern is ResourcePattern.ANY:
            return f"{self.type.value}:*"
        if self.pattern is ResourcePattern.PREFIXED:
            return f"{self.type.value}:{name}*"
        return f"{self.type.value}:{name}"

    def matches(self, requested: Resource) -> bool:
        """Whether this (policy) resource covers the ``requested`` one."""
        if self.type is ResourceType.ANY:
            return True
        if self.type is not requested.type:
            return False
        if self.pattern is ResourcePattern.ANY:
            return True
        if self.pattern is ResourcePattern.LITERAL:
            return requested.name == self.name
        return requested.name is not None and self.name is not None and requested.name.startswith(self.name)

    def to_json(self) -> dict[str, Any]:
        """The stored form: every part, so that no key spelling loses one."""
        return {"name": self.name, "pattern": self.pattern.value, "type": self.type.value}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Resource:
        return cls(
            ResourceType.by_name(data.get("type")) or ResourceType.UNKNOWN,
            data.get("name"),
            ResourcePattern.by_name(data.get("pattern")) or ResourcePattern.LITERAL,
        )


# -- source addresses ---------------------------------------------------------------------


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text.strip("[]"))


def valid_ip_or_cidr(text: str) -> bool:
    """An address (v4 or v6) or a CIDR block with a prefix length in range."""
    try:
        _ip(text)
        return True
    except ValueError:
        pass
    parts = _java_split(text, "/")
    if len(parts) != 2:
        return False
    try:
        address = _ip(parts[0])
        prefix = int(parts[1])
    except ValueError:
        return False
    return 0 <= prefix <= address.max_prefixlen


def _java_split(text: str, sep: str) -> list[str]:
    """``String.split``: trailing empty strings dropped."""
    parts = text.split(sep)
    while len(parts) > 1 and parts[-1] == "":
        parts.pop()
    return parts


def ip_in_range(ip: str, cidr: str) -> bool:
    """Whether ``ip`` is ``cidr`` (compared as text, as Apache does for a plain address) or
    lies in the block. Raises ValueError for what cannot be read, which refuses the request."""
    parts = _java_split(cidr, "/")
    if len(parts) == 1:
        return ip == cidr
    if len(parts) != 2:
        return False
    network = _ip(parts[0])
    prefix = int(parts[1])
    bits = network.max_prefixlen
    mask = -1 << (bits - prefix)
    lower = int(network) & mask
    upper = lower + ~mask
    target = int(_ip(ip))
    return lower <= target <= upper


# -- policies -------------------------------------------------------------------------------


@dataclass
class PolicyEntry:
    resource: Resource
    actions: list[Action]
    source_ips: list[str] | None = None
    decision: Decision | None = None

    def matches_resource(self, requested: Resource) -> bool:
        return self.resource.matches(requested)

    def matches_actions(self, requested: Sequence[Action]) -> bool:
        if not self.actions:
            return False
        if Action.ANY in requested:
            return True
        return any(action in self.actions or Action.ALL in self.actions for action in requested)

    def matches_source(self, ip: str) -> bool:
        if not self.source_ips:
            return True
        if not ip:
            return False
        return any(ip_in_range(ip, allowed) for allowed in self.source_ips)

    def to_info(self) -> dict[str, Any]:
        """Apache's ``PolicyEntryInfo``, keys in fastjson's order."""
        data: dict[str, Any] = {}
        if self.actions:
            data["actions"] = [a.value for a in self.actions]
        if self.decision is not None:
            data["decision"] = self.decision.value
        data["resource"] = self.resource.key
        if self.source_ips is not None:
            data["sourceIps"] = list(self.source_ips)
        return data

    def to_json(self) -> dict[str, Any]:
        return {
            "actions": [a.value for a in self.actions],
            "decision": self.decision.value if self.decision is not None else None,
            "resource": self.resource.to_json(),
            "sourceIps": self.source_ips,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PolicyEntry:
        return cls(
            resource=Resource.from_json(data.get("resource") or {}),
            actions=[a for a in (Action.by_name(n) for n in data.get("actions") or []) if a is not None],
            source_ips=data.get("sourceIps"),
            decision=Decision.by_name(data.get("decision")),
        )


@dataclass
class Policy:
    policy_type: PolicyType | None
    entries: list[PolicyEntry] = field(default_factory=list)

    def entry_for(self, resource: Resource) -> PolicyEntry | None:
        for entry in self.entries:
            if entry.resource == resource:
                return entry
        return None

    def update_entries(self, entries: Iterable[PolicyEntry]) -> None:
        """Add the entries; one for a resource already present replaces its actions, sources
        and decision in place (its position is kept)."""
        for new in entries:
            old = self.entry_for(new.resource)
            if old is None:
                self.entries.append(new)
            else:
                old.actions, old.source_ips, old.decision = new.actions, new.source_ips, new.decision

    def to_json(self) -> dict[str, Any]:
        return {
            "entries": [e.to_json() for e in self.entries],
            "policyType": self.policy_type.value if self.policy_type is not None else None,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Policy:
        return cls(
            policy_type=PolicyType.by_name(data.get("policyType")),
            entries=[PolicyEntry.from_json(e) for e in data.get("entries") or []],
        )


@dataclass
class Acl:
    subject: str
    policies: list[Policy] = field(default_factory=list)

    def policy(self, policy_type: PolicyType) -> Policy | None:
        for policy in self.policies:
            if policy.policy_type is policy_type:
                return policy
        return None

    def update_policies(self, policies: Iterable[Policy]) -> None:
        for new in policies:
            old = self.policy(new.policy_type) if new.policy_type is not None else None
            if old is None:
                self.policies.append(new)
            else:
                old.update_entries(new.entries)

    def delete_entry(self, policy_type: PolicyType, resource: Resource) -> None:
        policy = self.policy(policy_type)
        if policy is None:
            return
        entry = policy.entry_for(resource)
        if entry is not None:
            policy.entries.remove(entry)
        if not policy.entries:
            self.policies.remove(policy)

    def to_json(self) -> dict[str, Any]:
        return {"policies": [p.to_json() for p in self.policies], "subject": self.subject}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Acl:
        return cls(
            subject=str(data.get("subject") or ""),
            policies=[Policy.from_json(p) for p in data.get("policies") or []],
        )


# -- the decision -------------------------------------------------------------------------


def compare_entries(o1: PolicyEntry, o2: PolicyEntry) -> int:
    """Apache 5.3.3's ordering of matched entries (``comparePolicyEntries``), as written:
    a typed resource before ``*``; among prefixes the shorter first; otherwise whichever of a
    literal or prefixed entry is on the left; ties by decision, a deny on the left last."""
    r1, r2 = o1.resource, o2.resource
    compare = 0
    if r1.type is not r2.type:
        if r1.type is ResourceType.ANY:
            compare = 1
        if r2.type is ResourceType.ANY:
            compare = -1
    elif r1.pattern is r2.pattern:
        if r1.pattern is ResourcePattern.PREFIXED:
            n1, n2 = len(r1.name or ""), len(r2.name or "")
            compare = (n1 > n2) - (n1 < n2)
    elif r1.pattern in (ResourcePattern.LITERAL, ResourcePattern.PREFIXED):
        compare = -1
    if compare:
        return compare
    if o1.decision is Decision.DENY:
        return 1
    if o2.decision is Decision.DENY:
        return -1
    return 0


_T = TypeVar("_T")


def java_sort(items: list[_T], compare: Callable[[_T, _T], int]) -> None:
    """Sort in place as Java's ``List.sort`` does a list shorter than 32 (TimSort's first run,
    then binary insertion), which matters when ``compare`` is not a consistent order. Longer
    lists get the same procedure (Java would merge runs; no request matches that many)."""
    n = len(items)
    if n < 2:
        return
    run = 1
    if compare(items[1], items[0]) < 0:
        run = 2
        while run < n and compare(items[run], items[run - 1]) < 0:
            run += 1
        items[:run] = items[:run][::-1]
    else:
        run = 2
        while run < n and compare(items[run], items[run - 1]) >= 0:
            run += 1
    for start in range(run, n):
        pivot = items[start]
        left, right = 0, start
        while left < right:
            mid = (left + right) >> 1
            if compare(pivot, items[mid]) < 0:
                right = mid
            else:
                left = mid + 1
        items[left + 1 : start + 1] = items[left:start]
        items[left] = pivot


def matched_entry(
    acl: Acl, resource: Resource, actions: Sequence[Action], source_ip: str
) -> PolicyEntry | None:
    """The entry that decides: the Custom policy's matching entries, or the Default policy's
    when none matches, first after Apache's sort; None when nothing matches. Raises ValueError
    when a source address cannot be compared."""
    matched: list[PolicyEntry] = []
    for policy_type in (PolicyType.CUSTOM, PolicyType.DEFAULT):
        policy = acl.policy(policy_type)
        if policy is not None:
            matched = [
                e
                for e in policy.entries
                if e.matches_resource(resource) and e.matches_actions(actions) and e.matches_source(source_ip)
            ]
        if matched:
            break
    if not matched:
        return None
    java_sort(matched, compare_entries)
    return matched[0]
