"""The broker's access control: RocketMQ's plain ACL (ACL 1.0, ``docs/protocol.md`` §7).

Accounts, their permissions and the address white lists come from ``plain_acl.yml`` and the
``*.yml`` files under ``conf/acl/`` (or one file named by ``rocketmq.acl.plain.file``); the
files are re-read when they change. Every request is checked before its handler runs, in
RocketMQ's order: a globally white-listed address passes; otherwise the request must name a
known ``AccessKey``; an account's own white-listed address passes; otherwise the signature
must verify and the account must hold the permission each resource of the request needs
(topics PUB or SUB, groups as ``%RETRY%group``), and admin-only codes need an admin account.

A refusal answers SYSTEM_ERROR with a remark naming the account, the resource and the
permissions involved, as Apache's broker answers ACL failures (4.x raises them from its RPC
hook, which the remoting layer turns into SYSTEM_ERROR).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntFlag
from pathlib import Path
from typing import Any

import yaml

from aiorocketmq.protocol import fastjson
from aiorocketmq.protocol.acl import ACCESS_KEY, SIGNATURE, verify
from aiorocketmq.protocol.body import HeartbeatData, LockBatchRequestBody
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.errors import BrokerError, ProtocolError
from aiorocketmq.protocol.pop import PopRequestCode, decode_batch_ack_body

log = logging.getLogger(__name__)

RETRY_PREFIX = "%RETRY%"
#: Trace messages are accepted from any signed account (RocketMQ's exception to the checks).
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
PLAIN_ACL_FILE = "plain_acl.yml"
#: The system property (in broker.conf, as a key) naming one ACL file instead of the defaults.
ACL_FILE_PROPERTY = "rocketmq.acl.plain.file"


class Perm(IntFlag):
    """Permission bits (Java ``Permission``)."""

    DENY = 1
    ANY = 2
    PUB = 4
    SUB = 8


_PERM_NAMES = {
    "DENY": Perm.DENY,
    "PUB": Perm.PUB,
    "SUB": Perm.SUB,
    "PUB|SUB": Perm.PUB | Perm.SUB,
    "SUB|PUB": Perm.PUB | Perm.SUB,
}


def parse_perm(text: Any) -> Perm:
    """``DENY``, ``PUB``, ``SUB``, ``PUB|SUB``; anything else means DENY, as in RocketMQ."""
    return _PERM_NAMES.get(str(text).strip().upper() if text is not None else "", Perm.DENY)


def perm_name(perm: Perm) -> str:
    if perm & Perm.DENY:
        return "DENY"
    names = [name for name, bit in (("PUB", Perm.PUB), ("SUB", Perm.SUB)) if perm & bit]
    return "|".join(names) or ("ANY" if perm & Perm.ANY else "DENY")


def permitted(needed: Perm, owned: Perm) -> bool:
    """RocketMQ's ``checkPermission``: DENY owned refuses; ANY needs PUB or SUB; otherwise
    any shared bit will do."""
    # On plain ints: IntFlag's operators build enum members, a cost paid on every request.
    have, want = int(owned), int(needed)
    if have & _DENY:
        return False
    if want & _ANY:
        return bool(have & _PUB_SUB)
    return bool(want & have)


_DENY, _ANY, _PUB, _PUB_SUB = int(Perm.DENY), int(Perm.ANY), int(Perm.PUB), int(Perm.PUB | Perm.SUB)
_SEND_V2 = int(RequestCode.SEND_MESSAGE_V2)


#: Codes only admin accounts may call. RocketMQ's ACL 1.0 names five (creating and deleting
#: topics and groups, broker settings); we add every other request that can lose data or change
#: how the broker keeps it: their RocketMQ 5 bulk and static-topic forms, file deletion and the
#: cleaners (TRIGGER_DELETE_FILES, DELETE_EXPIRED_COMMITLOG, CLEAN_EXPIRED_CONSUMEQUEUE,
#: CLEAN_UNUSED_TOPIC), forbidding a group, the replication and POP-record resets, the 5.x
#: broker settings (cold-data thresholds, commit-log read-ahead, request modes), the ACL
#: requests that change the rules or show the secrets, and the ACL 2.0 user and policy
#: requests. RocketMQ leaves all of these to any signed account; docs/operations.md lists
#: every code with the permission it needs and says why we differ. Reading the ACL files'
#: versions stays open to any signed account.
ADMIN_CODES = frozenset(
    {
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        RequestCode.UPDATE_AND_CREATE_TOPIC_LIST,
        RequestCode.UPDATE_AND_CREATE_STATIC_TOPIC,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST,
        RequestCode.UPDATE_COLD_DATA_FLOW_CTR_CONFIG,
        RequestCode.REMOVE_COLD_DATA_FLOW_CTR_CONFIG,
        RequestCode.SET_COMMITLOG_READ_MODE,
        RequestCode.UPDATE_BROKER_CONFIG,
        RequestCode.DELETE_TOPIC_IN_BROKER,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
        RequestCode.SET_MESSAGE_REQUEST_MODE,
        RequestCode.UPDATE_AND_CREATE_ACL_CONFIG,
        RequestCode.DELETE_ACL_CONFIG,
        RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
        RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG,
        # Data loss: deleting files or index entries, dropping topics.
        RequestCode.TRIGGER_DELETE_FILES,
        RequestCode.DELETE_EXPIRED_COMMITLOG,
        RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE,
        RequestCode.CLEAN_UNUSED_TOPIC,
        # A group forbidden to read a topic stops consuming; replication and POP-record resets.
        RequestCode.UPDATE_AND_GET_GROUP_FORBIDDEN,
        RequestCode.RESET_MASTER_FLUSH_OFFSET,
        PopRequestCode.POP_ROLLBACK,
        # ACL 2.0's users and policies (their secrets included) under ACL 1.0's rules.
        RequestCode.AUTH_CREATE_USER,
        RequestCode.AUTH_UPDATE_USER,
        RequestCode.AUTH_DELETE_USER,
        RequestCode.AUTH_GET_USER,
        RequestCode.AUTH_LIST_USER,
        RequestCode.AUTH_CREATE_ACL,
        RequestCode.AUTH_UPDATE_ACL,
        RequestCode.AUTH_DELETE_ACL,
        RequestCode.AUTH_GET_ACL,
        RequestCode.AUTH_LIST_ACL,
    }
)


# -- address patterns ------------------------------------------------------------------------

Matcher = Callable[[str], bool]


def _never(_ip: str) -> bool:
    return False


def _always(_ip: str) -> bool:
    return True


def _segment_matcher(pattern: str) -> Callable[[str], bool]:
    if pattern == "*":
        return lambda seg: True
    if "-" in pattern:
        low, high = (int(part) for part in pattern.split("-", 1))
        if not 0 <= low <= high <= 255:
            raise ValueError(f"bad address range {pattern!r}")
        return lambda seg: seg.isdigit() and low <= int(seg) <= high
    int(pattern)  # validates
    return lambda seg: seg == pattern


def address_matcher(pattern: str | None) -> Matcher:
    """A predicate over IP address strings for one of RocketMQ's white-list patterns:
    blank (never), ``*`` / ``*.*.*.*`` (all), ``a.b.c.{1,2,3}``, ``a,b,c``, ranges such as
    ``192.168.*.*`` or ``192.168.1.1-100``, a plain address (IPv4 or IPv6)."""
    text = (pattern or "").strip()
    if not text:
        return _never
    if text in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
        return _always
    if text.endswith("}") and "{" in text:
        prefix, _, members = text[:-1].partition("{")
        allowed = {prefix + member.strip() for member in members.split(",") if member.strip()}
        return lambda ip: ip in allowed
    if "," in text:
        allowed = {part.strip() for part in text.split(",") if part.strip()}
        return lambda ip: ip in allowed
    if ":" in text and "*" not in text and "-" not in text:
        exact = ipaddress.ip_address(text)
        return lambda ip: _same_address(ip, exact)
    parts = text.split(".")
    if len(parts) != 4:
        raise ValueError(f"bad address pattern {text!r}")
    matchers = [_segment_matcher(part) for part in parts]

    def match(ip: str) -> bool:
        segs = ip.split(".")
        return len(segs) == 4 and all(m(seg) for m, seg in zip(matchers, segs, strict=True))

    return match


def _same_address(ip: str, exact: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    try:
        return ipaddress.ip_address(ip) == exact
    except ValueError:
        return False


def remote_ip(remote_addr: str) -> str:
    """The IP of a peer address: ``host:port``, ``[v6]:port`` or a bare address."""
    if remote_addr.startswith("["):
        return remote_addr[1 : remote_addr.find("]")]
    if remote_addr.count(":") == 1:
        return remote_addr.split(":", 1)[0]
    return remote_addr


# -- accounts and files ---------------------------------------------------------------------


class AclConfigError(ValueError):
    """An ACL file that cannot be used; the message names the file and the entry."""


@dataclass
class Account:
    access_key: str
    secret_key: str
    white_remote_address: str = ""
    admin: bool = False
    default_topic_perm: Perm = Perm.DENY
    default_group_perm: Perm = Perm.DENY
    #: resource (topic, or ``%RETRY%group`` for groups) -> permission
    resource_perms: dict[str, Perm] = field(default_factory=dict)
    source: Path | None = None
    _white: Matcher = field(default=_never, repr=False)

    def __post_init__(self) -> None:
        self._white = address_matcher(self.white_remote_address)

    def white_listed(self, ip: str) -> bool:
        return self._white(ip)

    def owned(self, resource: str) -> Perm:
        perm = self.resource_perms.get(resource)
        if perm is not None:
            return perm
        return self.default_group_perm if resource.startswith(RETRY_PREFIX) else self.default_topic_perm

    def refused(self, needed: Mapping[str, Perm]) -> tuple[str, str, Perm, Perm] | None:
        """The first of the ``needed`` resources this account does not hold enough of, as
        (``"topic"`` or ``"group"``, its name, the permission held, the one needed); None when
        it holds them all. Both the remoting and the gRPC checks word their refusals with it."""
        for resource, perm in needed.items():
            owned = self.owned(resource)
            if not permitted(perm, owned):
                if resource.startswith(RETRY_PREFIX):
                    return "group", resource[len(RETRY_PREFIX) :], owned, perm
                return "topic", resource, owned, perm
        return None

    @classmethod
    def from_yaml(cls, entry: Mapping[str, Any], source: Path | None = None) -> Account:
        where = f"{source}: " if source else ""
        access_key = str(entry.get("accessKey") or "").strip()
        secret_key = str(entry.get("secretKey") or "").strip()
        if not access_key or not secret_key:
            raise AclConfigError(f"{where}an account needs accessKey and secretKey")
        perms: dict[str, Perm] = {}
        for key, prefix in (("topicPerms", ""), ("groupPerms", RETRY_PREFIX)):
            for item in entry.get(key) or []:
                name, sep, perm = str(item).partition("=")
                # Apache refuses an entry that does not split into exactly name and PERM.
                if not sep or not name.strip() or not perm.strip() or "=" in perm:
                    raise AclConfigError(
                        f"{where}account {access_key}: {key} entry {item!r} is not name=PERM"
                    )
                perms[prefix + name.strip()] = parse_perm(perm)
        admin = entry.get("admin", False)
        return cls(
            access_key=access_key,
            secret_key=secret_key,
            white_remote_address=str(entry.get("whiteRemoteAddress") or ""),
            admin=admin is True or str(admin).lower() == "true",
            default_topic_perm=parse_perm(entry.get("defaultTopicPerm")),
            default_group_perm=parse_perm(entry.get("defaultGroupPerm")),
            resource_perms=perms,
            source=source,
        )

    def to_yaml(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "accessKey": self.access_key,
            "secretKey": self.secret_key,
            "whiteRemoteAddress": self.white_remote_address or None,
            "admin": self.admin,
            "defaultTopicPerm": perm_name(self.default_topic_perm),
            "defaultGroupPerm": perm_name(self.default_group_perm),
        }
        topics = [
            f"{name}={perm_name(p)}"
            for name, p in self.resource_perms.items()
            if not name.startswith(RETRY_PREFIX)
        ]
        groups = [
            f"{name[len(RETRY_PREFIX) :]}={perm_name(p)}"
            for name, p in self.resource_perms.items()
            if name.startswith(RETRY_PREFIX)
        ]
        if topics:
            entry["topicPerms"] = topics
        if groups:
            entry["groupPerms"] = groups
        return entry


def acl_files(rocketmq_home: str | Path | None, configured: str | Path | None = None) -> list[Path]:
    """Where RocketMQ looks: the configured file alone, or ``conf/plain_acl.yml`` and every
    ``*.yml``/``*.yaml`` under ``conf/acl/`` (recursively, sorted) of ``rocketmq_home``."""
    if configured:
        return [Path(configured)]
    if not rocketmq_home:
        return []
    conf = Path(rocketmq_home) / "conf"
    files = [conf / PLAIN_ACL_FILE]
    extra = conf / "acl"
    if extra.is_dir():
        files += sorted(p for p in extra.rglob("*") if p.suffix in (".yml", ".yaml") and p.is_file())
    return files


@dataclass
class AclConfig:
    """Everything the ACL files say, merged (an access key defined twice keeps its first)."""

    accounts: dict[str, Account] = field(default_factory=dict)
    global_white: list[str] = field(default_factory=list)
    #: per file: (mtime_ns, size) when read, to notice edits
    stamps: dict[Path, tuple[int, int] | None] = field(default_factory=dict)
    version: int = 0
    _global: list[Matcher] = field(default_factory=list, repr=False)

    def white_listed(self, ip: str) -> bool:
        return any(match(ip) for match in self._global)

    @classmethod
    def load(cls, files: Iterable[Path]) -> AclConfig:
        config = cls(version=time.time_ns() // 1_000_000)
        for path in files:
            config.stamps[path] = _stamp(path)
            if config.stamps[path] is None:
                continue
            try:
                data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            except (OSError, yaml.YAMLError) as exc:
                raise AclConfigError(f"{path}: {exc}") from None
            if not isinstance(data, dict):
                raise AclConfigError(f"{path}: not a mapping of ACL settings")
            for pattern in data.get("globalWhiteRemoteAddresses") or []:
                try:
                    config._global.append(address_matcher(str(pattern)))
                except ValueError as exc:
                    raise AclConfigError(f"{path}: globalWhiteRemoteAddresses: {exc}") from None
                config.global_white.append(str(pattern))
            for entry in data.get("accounts") or []:
                if not isinstance(entry, dict):
                    raise AclConfigError(f"{path}: accounts must be a list of mappings")
                try:
                    account = Account.from_yaml(entry, path)
                except ValueError as exc:
                    raise AclConfigError(
                        str(exc) if isinstance(exc, AclConfigError) else f"{path}: {exc}"
                    ) from None
                config.accounts.setdefault(account.access_key, account)
        return config

    def changed(self) -> bool:
        return any(_stamp(path) != stamp for path, stamp in self.stamps.items())


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_mtime_ns, st.st_size)


# -- what each request needs -----------------------------------------------------------------


_POP_CODES = frozenset(
    {
        PopRequestCode.POP_MESSAGE,
        PopRequestCode.ACK_MESSAGE,
        PopRequestCode.CHANGE_MESSAGE_INVISIBLETIME,
        PopRequestCode.PEEK_MESSAGE,
        PopRequestCode.NOTIFICATION,
        PopRequestCode.POLLING_INFO,
    }
)


def needed_resources(code: int, fields: Mapping[str, Any], body: bytes | None) -> dict[str, Perm]:
    """The resources a request touches and the permission each needs (``docs/protocol.md`` §7.3)."""
    need: dict[str, Perm] = {}

    def group(name: Any) -> None:
        if name:
            need[RETRY_PREFIX + str(name)] = Perm.SUB

    if code == RequestCode.SEND_MESSAGE:
        topic = fields.get("topic")
        if topic:
            if str(topic).startswith(RETRY_PREFIX):
                group(fields.get("group"))
            else:
                need[str(topic)] = Perm.PUB
    elif code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        # Batches carry the V2 header; RocketMQ 4.9 checks only their signature, we check
        # the topic as for single sends (docs/operations.md).
        topic = fields.get("b")
        if topic:
            if str(topic).startswith(RETRY_PREFIX):
                group(fields.get("a"))
            else:
                need[str(topic)] = Perm.PUB
    elif code in (RequestCode.SEND_REPLY_MESSAGE, RequestCode.SEND_REPLY_MESSAGE_V2):
        # Ours, beyond RocketMQ (signature only): a reply is stored in its topic (the cluster's
        # reply topic), so it is publishing there.
        topic = fields.get("b" if code == RequestCode.SEND_REPLY_MESSAGE_V2 else "topic")
        if topic:
            need[str(topic)] = Perm.PUB
    elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
        group(fields.get("group"))
    elif code in (RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE):
        if fields.get("topic"):
            need[str(fields["topic"])] = Perm.SUB
        group(fields.get("consumerGroup"))
    elif code == RequestCode.QUERY_MESSAGE:
        if fields.get("topic"):
            need[str(fields["topic"])] = Perm.SUB
    elif code == RequestCode.HEART_BEAT:
        if body:
            try:
                heartbeat = HeartbeatData.decode(body)
            except (ProtocolError, ValueError):
                return need  # the handler refuses the malformed body with a clear answer
            for consumer in heartbeat.consumer_data_set:
                group(consumer.group_name)
                for sub in consumer.subscription_data_set:
                    need[sub.topic] = Perm.SUB
    elif code in (RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ):
        # Ours, beyond RocketMQ 4.9 (signature only): locking a group's queues is consuming.
        if body:
            try:
                lock = LockBatchRequestBody.decode(body)
            except (ProtocolError, ValueError):
                return need
            group(lock.consumer_group)
            for mq in lock.mq_set:
                need[mq.topic] = Perm.SUB
    elif code == RequestCode.QUERY_CONSUMER_OFFSET:
        # Ours, beyond RocketMQ 4.9: reading a group's progress needs what updating it needs.
        group(fields.get("consumerGroup"))
        if fields.get("topic"):
            need[str(fields["topic"])] = Perm.SUB
    elif code == RequestCode.RECALL_MESSAGE:
        # Cancelling a message is publishing, as in Apache 5 (PUB on the topic).
        if fields.get("topic"):
            need[str(fields["topic"])] = Perm.PUB
    elif code == RequestCode.QUERY_ASSIGNMENT:
        # Learning which queues a group reads is consuming them (Apache 5 asks SUB of both).
        if body:
            try:
                query = fastjson.loads(body)
            except (ProtocolError, ValueError):
                return need
            if isinstance(query, dict):
                group(query.get("consumerGroup"))
                if query.get("topic"):
                    need[str(query["topic"])] = Perm.SUB
    elif code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP):
        group(fields.get("consumerGroup"))
    elif code == RequestCode.UPDATE_CONSUMER_OFFSET:
        group(fields.get("consumerGroup"))
        if fields.get("topic"):
            need[str(fields["topic"])] = Perm.SUB
    elif code == RequestCode.INVOKE_BROKER_TO_RESET_OFFSET:
        # Ours, beyond RocketMQ 4.9 (signature only): moving a group's offsets is consuming as
        # that group, so it needs what committing them needs.
        group(fields.get("group"))
        if fields.get("topic"):
            need[str(fields["topic"])] = Perm.SUB
    elif code == RequestCode.CLONE_GROUP_OFFSET:
        # Overwrites the destination group's offsets with what the source group has read.
        group(fields.get("srcGroup"))
        group(fields.get("destGroup"))
        if fields.get("topic"):
            need[str(fields["topic"])] = Perm.SUB
    elif code == RequestCode.CONSUME_MESSAGE_DIRECTLY:
        # Makes a client of the group consume a stored message again.
        group(fields.get("consumerGroup"))
    elif code == RequestCode.END_TRANSACTION:
        # Committing or rolling back a half message is publishing it (Apache 5 asks PUB of the
        # topic when the client names it; 4.x clients do not).
        if fields.get("topic"):
            need[str(fields["topic"])] = Perm.PUB
    elif code == PopRequestCode.BATCH_ACK_MESSAGE:
        # Acknowledging is consuming: every group (and topic) the batch names.
        if body:
            try:
                _, acks = decode_batch_ack_body(body)
            except ValueError:
                return need
            for ack in acks:
                group(ack.consumer_group)
                if not ack.topic.startswith(RETRY_PREFIX):
                    need[ack.topic] = Perm.SUB
    elif code in _POP_CODES:
        # RocketMQ 5's POP requests consume as a pull does: the topic (an ack names the
        # retry topic for a redelivery, which the group's own permission covers) and the group.
        topic = fields.get("topic")
        if topic and not str(topic).startswith(RETRY_PREFIX):
            need[str(topic)] = Perm.SUB
        group(fields.get("consumerGroup"))
    return need


class AclDeniedError(BrokerError):
    """An ACL refusal: SYSTEM_ERROR, as Apache's ACL 1.0 answers (not registered for the
    code, which stays ServerSystemError's)."""

    code = ResponseCode.SYSTEM_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(f"AclException: {message}")


class AccessValidator:
    """Checks each request against the ACL files, reloading them when they change."""

    def __init__(self, files: list[Path], *, reload_interval: float = 1.0) -> None:
        self.files = files
        self.reload_interval = reload_interval
        self.config = AclConfig.load(files)
        self._next_look = time.monotonic() + reload_interval

    def reload_if_changed(self) -> bool:
        """Re-read the files when one was edited (a bad edit keeps the previous rules and is
        logged); returns whether new rules are in force."""
        if not self.config.changed():
            return False
        try:
            self.config = AclConfig.load(self.files)
        except AclConfigError as exc:
            log.error("ACL: keeping the previous rules, the edited file is not usable: %s", exc)
            self.config.stamps = {path: _stamp(path) for path in self.files}
            return False
        log.info("ACL: rules reloaded from %s", ", ".join(map(str, self.files)))
        return True

    def check(self, code: int, fields: Mapping[str, Any], body: bytes | None, remote_addr: str) -> None:
        """Return when the request may proceed; raise :class:`AclDeniedError` otherwise."""
        now = time.monotonic()
        if now >= self._next_look:
            self._next_look = now + self.reload_interval
            self.reload_if_changed()
        config = self.config
        # The address is parsed only when a white list may admit it (or a refusal names it).
        if config.global_white and config.white_listed(remote_ip(remote_addr)):
            return
        access_key = fields.get(ACCESS_KEY)
        if not access_key:
            raise self._deny(
                f"No accessKey is configured (request code {code} from {remote_ip(remote_addr)})"
            )
        account = config.accounts.get(access_key if type(access_key) is str else str(access_key))
        if account is None:
            raise self._deny(
                f"No acl config for {access_key} (request code {code} from {remote_ip(remote_addr)})"
            )
        if account.white_remote_address and account.white_listed(remote_ip(remote_addr)):
            return
        if SIGNATURE not in fields or not verify(fields, body, account.secret_key):
            raise self._deny(
                f"Check signature failed for accessKey={access_key} "
                f"(request code {code} from {remote_ip(remote_addr)})"
            )
        if code == _SEND_V2 and self._send_permitted(account, fields.get("b")):
            return  # the common case, without building the resource map
        needed = needed_resources(code, fields, body)
        if needed.get(TRACE_TOPIC) == Perm.PUB:
            return
        if code in ADMIN_CODES and not account.admin:
            raise self._deny(f"accessKey={access_key} is not an admin account, needed by request code {code}")
        if not needed or (account.admin and not account.resource_perms):
            return
        refused = account.refused(needed)
        if refused is not None:
            kind, name, owned, perm = refused
            raise self._deny(
                f"No permission for {kind}={name}: accessKey={access_key} holds {perm_name(owned)}, "
                f"request code {code} needs {perm_name(perm)}"
            )

    @staticmethod
    def _send_permitted(account: Account, topic: Any) -> bool:
        """Whether a SEND_MESSAGE_V2 to ``topic`` (not a retry topic) is surely allowed: what
        the general path decides for it, on plain ints; False sends it there (and a refusal
        is worded there)."""
        if type(topic) is not str or not topic or topic.startswith(RETRY_PREFIX):
            return False
        if topic == TRACE_TOPIC or (account.admin and not account.resource_perms):
            return True
        owned = account.resource_perms.get(topic)
        have = int(owned if owned is not None else account.default_topic_perm)
        return not have & _DENY and bool(have & _PUB)

    @staticmethod
    def _deny(message: str) -> AclDeniedError:
        log.warning("ACL denied: %s", message)
        return AclDeniedError(message)


# -- editing the files (the ACL admin requests) ----------------------------------------------


def _write_yaml(path: Path, data: Mapping[str, Any]) -> None:
    """Replace ``path`` atomically: a reader (or a crash) sees the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            yaml.safe_dump(dict(data), out, sort_keys=False, allow_unicode=True)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise AclConfigError(f"{path}: not a mapping of ACL settings")
    return data


def _bump_version(data: dict[str, Any]) -> None:
    versions = data.get("dataVersion") or [{"counter": 0, "timestamp": 0}]
    current = versions[0] if isinstance(versions, list) and versions else {"counter": 0}
    data["dataVersion"] = [
        {"counter": int(current.get("counter", 0)) + 1, "timestamp": time.time_ns() // 1_000_000}
    ]


def update_account(validator: AccessValidator, entry: Mapping[str, Any]) -> Account:
    """Create or update an account (in the file that defines it, or the first file)."""
    account = Account.from_yaml(entry)
    if len(account.access_key) <= 6 or len(account.secret_key) <= 6:
        raise AclConfigError("accessKey and secretKey must be longer than 6 characters")
    existing = validator.config.accounts.get(account.access_key)
    path = existing.source if existing is not None and existing.source is not None else validator.files[0]
    data = _read_yaml(path)
    accounts = [a for a in data.get("accounts") or [] if str(a.get("accessKey")) != account.access_key]
    accounts.append(account.to_yaml())
    data["accounts"] = accounts
    _bump_version(data)
    _write_yaml(path, data)
    validator.reload_if_changed()
    return account


def delete_account(validator: AccessValidator, access_key: str) -> bool:
    """Remove an account; returns whether it existed."""
    existing = validator.config.accounts.get(access_key)
    if existing is None or existing.source is None:
        return False
    data = _read_yaml(existing.source)
    data["accounts"] = [a for a in data.get("accounts") or [] if str(a.get("accessKey")) != access_key]
    _bump_version(data)
    _write_yaml(existing.source, data)
    validator.reload_if_changed()
    return True


def update_global_white(
    validator: AccessValidator, patterns: Iterable[str], *, path: Path | None = None
) -> None:
    """Replace the global white list of ``path`` (one of the ACL files; the first when None)."""
    listed = [p.strip() for p in patterns if p.strip()]
    for pattern in listed:
        address_matcher(pattern)  # refuse a bad pattern before writing anything
    if path is None:
        path = validator.files[0]
    elif path not in validator.files:
        raise AclConfigError(f"{path} is not one of the broker's ACL files")
    data = _read_yaml(path)
    data["globalWhiteRemoteAddresses"] = listed
    _bump_version(data)
    _write_yaml(path, data)
    validator.reload_if_changed()


def data_versions(validator: AccessValidator) -> dict[Path, dict[str, int]]:
    """Each ACL file's ``dataVersion`` (``counter``, ``timestamp``; zeros for a file never
    edited through the admin requests)."""
    versions: dict[Path, dict[str, int]] = {}
    for path in validator.files:
        try:
            data = _read_yaml(path)
        except (OSError, yaml.YAMLError, AclConfigError):
            data = {}
        listed = data.get("dataVersion")
        current = listed[0] if isinstance(listed, list) and listed and isinstance(listed[0], dict) else {}
        versions[path] = {
            "counter": int(current.get("counter", 0) or 0),
            "timestamp": int(current.get("timestamp", 0) or 0),
        }
    return versions
