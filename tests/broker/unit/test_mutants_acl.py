"""Mutation tests for aiorocketmq.broker.acl (ACL 1.0): table-driven checks of the decisions
(permission parsing and checking, address patterns, accounts, the resources each request
needs, the validator's order of checks) against Apache RocketMQ 4.9's plain ACL semantics
(PlainAccessResource, PlainPermissionManager, Permission, AclUtils) and docs/operations.md's
permission table, and of loading and editing the ACL files."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from aiorocketmq.broker.acl import (
    AccessValidator,
    Account,
    AclConfig,
    AclConfigError,
    AclDeniedError,
    Perm,
    acl_files,
    address_matcher,
    data_versions,
    delete_account,
    needed_resources,
    parse_perm,
    perm_name,
    permitted,
    remote_ip,
    update_account,
    update_global_white,
)
from aiorocketmq.protocol.acl import Credentials, sign
from aiorocketmq.protocol.body import (
    ConsumerData,
    HeartbeatData,
    LockBatchRequestBody,
    MessageQueue,
    SubscriptionData,
)
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.pop import BatchAck, PopRequestCode, encode_batch_ack_body

PUB, SUB, DENY, ANY = Perm.PUB, Perm.SUB, Perm.DENY, Perm.ANY
PS = Perm.PUB | Perm.SUB


# -- permissions ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "perm"),
    [
        ("DENY", DENY),
        ("PUB", PUB),
        ("SUB", SUB),
        ("PUB|SUB", PS),
        ("SUB|PUB", PS),
        (" pub ", PUB),
        ("sub|pub", PS),
        ("ANY", DENY),
        ("PUB | SUB", DENY),
        ("", DENY),
        (None, DENY),
    ],
)
def test_parse_perm_as_apache_permission_parse(text: Any, perm: Perm) -> None:
    """Apache's Permission.parsePermFromString: trimmed, upper-cased, four spellings, else DENY
    (a mutant that drops the trim, the upper-casing or a spelling grants the wrong rights)."""
    assert parse_perm(text) == perm


@pytest.mark.parametrize(
    ("perm", "name"),
    [
        (DENY, "DENY"),
        (PUB, "PUB"),
        (SUB, "SUB"),
        (PS, "PUB|SUB"),
        (ANY, "ANY"),
        (DENY | PUB, "DENY"),
        (Perm(0), "DENY"),
    ],
)
def test_perm_names_in_refusals_and_files(perm: Perm, name: str) -> None:
    """The name a refusal remark and a rewritten file give each permission (parse_perm reads
    it back to the same rights)."""
    assert perm_name(perm) == name
    if name != "ANY":
        assert parse_perm(name) == (perm if perm in (PUB, SUB, PS) else DENY)


def _apache_check_permission(needed: int, owned: int) -> bool:
    """Permission.checkPermission of RocketMQ 4.9, transliterated."""
    if owned & 1:
        return False
    if needed & 2:
        return bool(owned & 4) or bool(owned & 8)
    return (needed & owned) > 0


@pytest.mark.parametrize("needed", [PUB, SUB, PS, ANY])
@pytest.mark.parametrize("owned", [DENY, PUB, SUB, PS, DENY | PUB, DENY | SUB, ANY, Perm(0)])
def test_permitted_matches_apache_check_permission(needed: Perm, owned: Perm) -> None:
    """Every needed x owned pair decides as Apache's checkPermission."""
    assert permitted(needed, owned) is _apache_check_permission(int(needed), int(owned))


# -- addresses --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "yes", "no"),
    [
        (None, [], ["127.0.0.1"]),
        ("   ", [], ["127.0.0.1", ""]),
        (" 10.0.0.1 ", ["10.0.0.1"], ["10.0.0.2"]),
        ("*:*:*:*:*:*:*:*", ["::1", "10.0.0.1"], []),
        (" * ", ["1.2.3.4"], []),
        ("192.168.0.{1, 2 ,3}", ["192.168.0.1", "192.168.0.2", "192.168.0.3"], ["192.168.0.", "192.168.0.4"]),
        ("192.168.0.{1,,2}", ["192.168.0.1", "192.168.0.2"], ["192.168.0."]),
        ("10.0.0.1, 10.0.0.9,", ["10.0.0.1", "10.0.0.9"], ["", "10.0.0.2"]),
        ("10.1.*.7", ["10.1.0.7", "10.1.255.7"], ["10.1.0.8", "10.2.0.7", "10.1.7", "10.1.0.7.1"]),
        ("10.0.0.0-255", ["10.0.0.0", "10.0.0.255"], ["10.0.0.x", "10.0.0.-1", "10.0.1.0"]),
        ("10.0.0.5-5", ["10.0.0.5"], ["10.0.0.4", "10.0.0.6"]),
        ("10.0.0.7", ["10.0.0.7"], ["10.0.0.70", "10.0.0.07x", "10.0.0"]),
        ("::1", ["::1"], ["not-an-address", "10.0.0.1"]),
        ("fe80::1", ["FE80:0:0:0:0:0:0:1"], ["fe80::2"]),
        # Apache: *.*.*.* is its match-all strategy, IPv6 peers included
        ("*.*.*.*", ["::1", "10.0.0.1"], []),
        # Apache: braces only when the pattern ends with "}"; otherwise the comma list
        ("10.0.0.{1,2", [], ["10.0.0.1", "10.0.0.2"]),
    ],
)
def test_address_pattern_table(pattern: str | None, yes: list[str], no: list[str]) -> None:
    """Apache's RemoteAddressStrategyFactory patterns: blank never matches, the wildcards
    match all, {a,b} and a,b lists, per-segment * and low-high ranges, an exact address."""
    match = address_matcher(pattern)
    for ip in yes:
        assert match(ip), (pattern, ip)
    for ip in no:
        assert not match(ip), (pattern, ip)


@pytest.mark.parametrize(
    "pattern",
    ["10.0.0", "10.0.0.0.1", "10.0.0.5-4", "10.0.0.0-256", "10.0.0.a", "10.0.0.1-x", "10.*.0", "10.0.0.-1-4"],
)
def test_bad_address_patterns_are_refused(pattern: str) -> None:
    """A pattern Apache refuses (wrong segment count, a range out of 0-255 or upside down, a
    segment that is not a number) is refused, never silently matching nothing or everything."""
    with pytest.raises(ValueError):
        address_matcher(pattern)


@pytest.mark.parametrize(
    ("remote", "ip"),
    [
        ("10.0.0.1:4000", "10.0.0.1"),
        ("[::1]:4000", "::1"),
        ("[fe80::1]:1", "fe80::1"),
        ("::1", "::1"),
        ("10.0.0.1", "10.0.0.1"),
    ],
)
def test_remote_ip(remote: str, ip: str) -> None:
    """The white lists see the peer's IP without its port, IPv4 or IPv6."""
    assert remote_ip(remote) == ip


# -- accounts ---------------------------------------------------------------------------------


def test_account_owned_and_refused() -> None:
    """Listed resources use their own permission, the rest the account's defaults (groups as
    %RETRY%group use defaultGroupPerm); the first resource not held is named, groups without
    their prefix, with what is held and what is needed."""
    account = Account(
        "ak123456",
        "sk123456",
        default_topic_perm=SUB,
        default_group_perm=PUB,
        resource_perms={"T1": PUB, "%RETRY%g1": DENY},
    )
    assert account.owned("T1") == PUB
    assert account.owned("T2") == SUB
    assert account.owned("%RETRY%g1") == DENY
    assert account.owned("%RETRY%g2") == PUB
    assert account.refused({}) is None
    assert account.refused({"T1": PUB, "T2": SUB, "%RETRY%g2": PUB}) is None
    assert account.refused({"T1": PUB, "T2": PUB, "%RETRY%g1": SUB}) == ("topic", "T2", SUB, PUB)
    assert account.refused({"T1": PUB, "%RETRY%g1": SUB, "T2": PUB}) == ("group", "g1", DENY, SUB)
    assert account.refused({"%RETRY%g2": SUB}) == ("group", "g2", PUB, SUB)


def test_account_from_yaml_reads_apache_keys() -> None:
    """plain_acl.yml's keys: trimmed keys, name=PERM lists (groups as %RETRY%group), the
    defaults DENY when absent, admin only when true."""
    account = Account.from_yaml(
        {
            "accessKey": " ak123456 ",
            "secretKey": " sk123456 ",
            "whiteRemoteAddress": "10.0.0.*",
            "admin": "TRUE",
            "defaultTopicPerm": "PUB",
            "defaultGroupPerm": "SUB",
            "topicPerms": [" T1 =PUB|SUB", "T2=DENY"],
            "groupPerms": ["g1=PUB"],
        }
    )
    assert (account.access_key, account.secret_key, account.admin) == ("ak123456", "sk123456", True)
    assert account.resource_perms == {"T1": PS, "T2": DENY, "%RETRY%g1": PUB}
    assert (account.default_topic_perm, account.default_group_perm) == (PUB, SUB)
    assert account.white_listed("10.0.0.9") and not account.white_listed("10.0.1.9")
    bare = Account.from_yaml({"accessKey": "ak123456", "secretKey": "sk123456"})
    assert (bare.admin, bare.default_topic_perm, bare.default_group_perm, bare.resource_perms) == (
        False,
        DENY,
        DENY,
        {},
    )
    assert bare.white_remote_address == "" and not bare.white_listed("127.0.0.1")
    for admin, expected in (
        (True, True),
        ("true", True),
        (False, False),
        ("false", False),
        ("yes", False),
        (1, False),
    ):
        entry = {"accessKey": "ak123456", "secretKey": "sk123456", "admin": admin}
        assert Account.from_yaml(entry).admin is expected, admin


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"secretKey": "sk123456"}, "needs accessKey and secretKey"),
        ({"accessKey": "ak123456"}, "needs accessKey and secretKey"),
        ({"accessKey": "  ", "secretKey": "sk123456"}, "needs accessKey and secretKey"),
        (
            {"accessKey": "ak123456", "secretKey": "sk123456", "groupPerms": ["=SUB"]},
            "groupPerms entry '=SUB'",
        ),
        (
            {"accessKey": "ak123456", "secretKey": "sk123456", "topicPerms": ["T1"]},
            "account ak123456: topicPerms",
        ),
        # Apache's Permission.parseResourcePerms: exactly a name and a PERM, else refused
        (
            {"accessKey": "ak123456", "secretKey": "sk123456", "topicPerms": ["T1=1=PUB"]},
            "'T1=1=PUB' is not name=PERM",
        ),
        (
            {"accessKey": "ak123456", "secretKey": "sk123456", "topicPerms": ["T1= "]},
            "'T1= ' is not name=PERM",
        ),
    ],
)
def test_account_entries_refused(entry: dict[str, Any], message: str) -> None:
    """An account without both keys, or a permission entry that is not name=PERM, is refused
    naming the file and the entry."""
    with pytest.raises(AclConfigError, match=message) as info:
        Account.from_yaml(entry, Path("/x/plain_acl.yml"))
    assert str(info.value).startswith("/x/plain_acl.yml: ")
    # from an admin request (no file yet): the message starts with the reason itself
    with pytest.raises(AclConfigError) as info:
        Account.from_yaml(entry)
    assert str(info.value).startswith(("an account needs", "account ak123456: "))


def test_account_to_yaml_round_trip() -> None:
    """An account written back to a file reads back the same (the admin edits rewrite files)."""
    account = Account(
        "ak123456",
        "sk123456",
        white_remote_address="10.0.0.*",
        admin=True,
        default_topic_perm=PUB,
        default_group_perm=PS,
        resource_perms={"T1": SUB, "%RETRY%g1": PUB},
    )
    entry = account.to_yaml()
    assert entry == {
        "accessKey": "ak123456",
        "secretKey": "sk123456",
        "whiteRemoteAddress": "10.0.0.*",
        "admin": True,
        "defaultTopicPerm": "PUB",
        "defaultGroupPerm": "PUB|SUB",
        "topicPerms": ["T1=SUB"],
        "groupPerms": ["g1=PUB"],
    }
    again = Account.from_yaml(entry)
    assert again.resource_perms == account.resource_perms and again.admin
    bare = Account("ak123456", "sk123456").to_yaml()
    assert bare["whiteRemoteAddress"] is None
    assert "topicPerms" not in bare and "groupPerms" not in bare
    assert Account.from_yaml(bare).white_remote_address == ""


# -- files ------------------------------------------------------------------------------------


def test_acl_files_where_apache_looks(tmp_path: Path) -> None:
    """No home: no files; a home without conf/acl: plain_acl.yml alone; *.yml and *.yaml under
    conf/acl (not other names, not directories) sorted after it."""
    assert acl_files(None) == [] and acl_files("") == []
    assert acl_files(tmp_path) == [tmp_path / "conf" / "plain_acl.yml"]
    extra = tmp_path / "conf" / "acl"
    (extra / "dir.yml").mkdir(parents=True)
    (extra / "b.yml").write_text("{}")
    (extra / "a.yaml").write_text("{}")
    (extra / "c.txt").write_text("{}")
    assert acl_files(str(tmp_path)) == [
        tmp_path / "conf" / "plain_acl.yml",
        extra / "a.yaml",
        extra / "b.yml",
    ]
    assert acl_files(tmp_path, str(tmp_path / "one.yml")) == [tmp_path / "one.yml"]


def test_config_load(tmp_path: Path) -> None:
    """A missing file is skipped (and noticed when it appears); global white lists of every
    file apply; an access key defined twice keeps its first definition."""
    first, second, missing = tmp_path / "a.yml", tmp_path / "b.yml", tmp_path / "none.yml"
    first.write_text(
        "globalWhiteRemoteAddresses: ['10.0.0.1']\n"
        "accounts:\n  - {accessKey: ak123456, secretKey: first111}\n"
    )
    second.write_text(
        "globalWhiteRemoteAddresses: ['10.0.0.2']\n"
        "accounts:\n  - {accessKey: ak123456, secretKey: second11}\n"
        "  - {accessKey: other123, secretKey: other123}\n"
    )
    config = AclConfig.load([missing, first, second])
    assert config.global_white == ["10.0.0.1", "10.0.0.2"]
    assert config.white_listed("10.0.0.1") and config.white_listed("10.0.0.2")
    assert not config.white_listed("10.0.0.3")
    assert config.accounts["ak123456"].secret_key == "first111"
    assert config.accounts["ak123456"].source == first
    assert set(config.accounts) == {"ak123456", "other123"}
    assert config.stamps[missing] is None and not config.changed()
    missing.write_text("{}")
    assert config.changed()
    empty = AclConfig.load([missing])
    assert empty.accounts == {} and not empty.white_listed("10.0.0.1")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- just a list\n", "not a mapping of ACL settings"),
        ("accounts: [x]\n", "accounts must be a list of mappings"),
        ("globalWhiteRemoteAddresses: ['10.0.0']\n", "globalWhiteRemoteAddresses: bad address"),
        ("accounts: [{accessKey: ak123456}]\n", "an account needs accessKey and secretKey$"),
        ("globalWhiteRemoteAddresses: ['10.0.0.5-4']\n", "bad address range '5-4'"),
        ("accounts: [{accessKey: ak123456, secretKey: s, whiteRemoteAddress: '1.2.3'}]\n", "bad address"),
        ("accounts: [ {", "a.yml: "),
    ],
)
def test_config_load_refuses_bad_files_naming_them(tmp_path: Path, text: str, message: str) -> None:
    """Every unusable file is refused with its path in the message (so a bad edit is found)."""
    path = tmp_path / "a.yml"
    path.write_text(text)
    with pytest.raises(AclConfigError, match=message) as info:
        AclConfig.load([path])
    assert str(info.value).startswith(str(path) + ": ")
    assert str(path) + ": " + str(path) not in str(info.value)  # the file named once


# -- what each request needs ------------------------------------------------------------------


def _heartbeat() -> bytes:
    return HeartbeatData(
        client_id="c",
        consumer_data_set=[
            ConsumerData(group_name="g1", subscription_data_set=[SubscriptionData(topic="T1")]),
            ConsumerData(group_name="g2", subscription_data_set=[SubscriptionData(topic="T2")]),
        ],
    ).encode()


def _lock() -> bytes:
    return LockBatchRequestBody(
        consumer_group="g1",
        client_id="c",
        mq_set=[MessageQueue(topic="T1", broker_name="b", queue_id=0)],
    ).encode()


def _batch_ack() -> bytes:
    acks = [
        BatchAck("g1", "T1", False, 0, 0, 0, 1, 1000, (0,)),
        BatchAck("g2", "%RETRY%g2", True, 0, 0, 0, 1, 1000, (0,)),
    ]
    return encode_batch_ack_body("b", acks)


C = RequestCode
P = PopRequestCode
NEEDED_TABLE: list[tuple[int, dict[str, Any], bytes | None, dict[str, Perm]]] = [
    # sends: PUB on the topic; a send to a retry topic is the group's (SUB)
    (C.SEND_MESSAGE, {"topic": "T1", "group": "pg"}, None, {"T1": PUB}),
    (C.SEND_MESSAGE, {"topic": "%RETRY%g1", "group": "g1"}, None, {"%RETRY%g1": SUB}),
    (C.SEND_MESSAGE, {"group": "pg"}, None, {}),
    (C.SEND_MESSAGE_V2, {"a": "pg", "b": "T1"}, None, {"T1": PUB}),
    (C.SEND_MESSAGE_V2, {"a": "g1", "b": "%RETRY%g1"}, None, {"%RETRY%g1": SUB}),
    (C.SEND_MESSAGE_V2, {"a": "pg"}, None, {}),
    (C.SEND_BATCH_MESSAGE, {"a": "pg", "b": "T1"}, None, {"T1": PUB}),
    (C.SEND_BATCH_MESSAGE, {"a": "g1", "b": "%RETRY%g1"}, None, {"%RETRY%g1": SUB}),
    (C.SEND_REPLY_MESSAGE, {"topic": "R1", "b": "x"}, None, {"R1": PUB}),
    (C.SEND_REPLY_MESSAGE_V2, {"b": "R1", "topic": "x"}, None, {"R1": PUB}),
    (C.SEND_REPLY_MESSAGE_V2, {}, None, {}),
    (C.CONSUMER_SEND_MSG_BACK, {"group": "g1", "topic": "T1"}, None, {"%RETRY%g1": SUB}),
    (C.CONSUMER_SEND_MSG_BACK, {}, None, {}),
    # pulls and queries: SUB on the topic and the group
    (C.PULL_MESSAGE, {"topic": "T1", "consumerGroup": "g1"}, None, {"T1": SUB, "%RETRY%g1": SUB}),
    (C.LITE_PULL_MESSAGE, {"topic": "T1", "consumerGroup": "g1"}, None, {"T1": SUB, "%RETRY%g1": SUB}),
    (C.PULL_MESSAGE, {"consumerGroup": "g1"}, None, {"%RETRY%g1": SUB}),
    (C.QUERY_MESSAGE, {"topic": "T1"}, None, {"T1": SUB}),
    (C.QUERY_MESSAGE, {}, None, {}),
    (C.HEART_BEAT, {}, _heartbeat(), {"%RETRY%g1": SUB, "T1": SUB, "%RETRY%g2": SUB, "T2": SUB}),
    (C.HEART_BEAT, {}, None, {}),
    (C.HEART_BEAT, {}, b"[1]", {}),
    (C.LOCK_BATCH_MQ, {}, _lock(), {"%RETRY%g1": SUB, "T1": SUB}),
    (C.UNLOCK_BATCH_MQ, {}, _lock(), {"%RETRY%g1": SUB, "T1": SUB}),
    (C.LOCK_BATCH_MQ, {}, b"{oops", {}),
    (C.LOCK_BATCH_MQ, {}, None, {}),
    (C.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g1", "topic": "T1"}, None, {"%RETRY%g1": SUB, "T1": SUB}),
    (C.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g1"}, None, {"%RETRY%g1": SUB}),
    (C.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g1"}, None, {"%RETRY%g1": SUB}),
    (C.RECALL_MESSAGE, {"topic": "T1", "producerGroup": "pg"}, None, {"T1": PUB}),
    (C.RECALL_MESSAGE, {}, None, {}),
    (
        C.QUERY_ASSIGNMENT,
        {},
        json.dumps({"consumerGroup": "g1", "topic": "T1"}).encode(),
        {"%RETRY%g1": SUB, "T1": SUB},
    ),
    (C.QUERY_ASSIGNMENT, {}, json.dumps({"consumerGroup": "g1"}).encode(), {"%RETRY%g1": SUB}),
    (C.QUERY_ASSIGNMENT, {}, b"[1, 2]", {}),
    (C.QUERY_ASSIGNMENT, {}, b"{oops", {}),
    (C.QUERY_ASSIGNMENT, {}, None, {}),
    (C.UNREGISTER_CLIENT, {"consumerGroup": "g1", "producerGroup": "pg"}, None, {"%RETRY%g1": SUB}),
    (C.UNREGISTER_CLIENT, {"producerGroup": "pg"}, None, {}),
    (C.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "g1"}, None, {"%RETRY%g1": SUB}),
    (C.INVOKE_BROKER_TO_RESET_OFFSET, {"group": "g1", "topic": "T1"}, None, {"%RETRY%g1": SUB, "T1": SUB}),
    (C.INVOKE_BROKER_TO_RESET_OFFSET, {"group": "g1"}, None, {"%RETRY%g1": SUB}),
    (
        C.CLONE_GROUP_OFFSET,
        {"srcGroup": "g1", "destGroup": "g2", "topic": "T1"},
        None,
        {"%RETRY%g1": SUB, "%RETRY%g2": SUB, "T1": SUB},
    ),
    (C.CLONE_GROUP_OFFSET, {"srcGroup": "g1", "destGroup": "g2"}, None, {"%RETRY%g1": SUB, "%RETRY%g2": SUB}),
    (C.CONSUME_MESSAGE_DIRECTLY, {"consumerGroup": "g1", "topic": "T1"}, None, {"%RETRY%g1": SUB}),
    (C.END_TRANSACTION, {"producerGroup": "pg", "topic": "T1"}, None, {"T1": PUB}),
    (P.BATCH_ACK_MESSAGE, {}, _batch_ack(), {"%RETRY%g1": SUB, "T1": SUB, "%RETRY%g2": SUB}),
    (P.BATCH_ACK_MESSAGE, {}, b"{oops", {}),
    (P.BATCH_ACK_MESSAGE, {}, None, {}),
    (P.POP_MESSAGE, {"topic": "T1", "consumerGroup": "g1"}, None, {"T1": SUB, "%RETRY%g1": SUB}),
    (P.ACK_MESSAGE, {"topic": "%RETRY%g1", "consumerGroup": "g1"}, None, {"%RETRY%g1": SUB}),
    (P.ACK_MESSAGE, {"topic": "T1", "consumerGroup": "g1"}, None, {"T1": SUB, "%RETRY%g1": SUB}),
    (
        P.CHANGE_MESSAGE_INVISIBLETIME,
        {"topic": "T1", "consumerGroup": "g1"},
        None,
        {"T1": SUB, "%RETRY%g1": SUB},
    ),
    (P.PEEK_MESSAGE, {"topic": "T1", "consumerGroup": "g1"}, None, {"T1": SUB, "%RETRY%g1": SUB}),
    (P.NOTIFICATION, {"topic": "T1", "consumerGroup": "g1"}, None, {"T1": SUB, "%RETRY%g1": SUB}),
    (P.POLLING_INFO, {"topic": "T1", "consumerGroup": "g1"}, None, {"T1": SUB, "%RETRY%g1": SUB}),
    (P.POP_MESSAGE, {"consumerGroup": "g1"}, None, {"%RETRY%g1": SUB}),
    # signature only
    (C.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}, None, {}),
    (C.UPDATE_AND_CREATE_TOPIC, {"topic": "T1"}, None, {}),
]


@pytest.mark.parametrize(("code", "fields", "body", "needed"), NEEDED_TABLE)
def test_needed_resources_table(
    code: int, fields: dict[str, Any], body: bytes | None, needed: dict[str, Perm]
) -> None:
    """docs/operations.md's permission table, request code by request code: which topics and
    groups (as %RETRY%group) each request touches and the permission each needs; a body that
    cannot be read needs nothing here (its handler refuses it)."""
    assert needed_resources(code, fields, body) == needed


# -- the validator ----------------------------------------------------------------------------

RULES = """\
globalWhiteRemoteAddresses:
  - 10.9.9.*
accounts:
  - accessKey: user1234
    secretKey: usersecret
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
    topicPerms:
      - Pub1=PUB
      - Deny1=DENY
      - Both1=PUB|SUB
    groupPerms:
      - gdeny=DENY
  - accessKey: admin123
    secretKey: adminsecret
    admin: true
  - accessKey: admlimit
    secretKey: admlimitsecret
    admin: true
    defaultTopicPerm: DENY
    topicPerms:
      - Pub1=PUB
  - accessKey: white123
    secretKey: whitesecret
    whiteRemoteAddress: 10.5.5.5
  - accessKey: pubuser1
    secretKey: pubsecret
    defaultTopicPerm: PUB
    defaultGroupPerm: DENY
    topicPerms:
      - Deny1=DENY
    groupPerms:
      - gsub=SUB
"""

SECRETS = {
    "user1234": "usersecret",
    "admin123": "adminsecret",
    "admlimit": "admlimitsecret",
    "white123": "whitesecret",
    "pubuser1": "pubsecret",
}


def _validator(tmp_path: Path, text: str = RULES, **kwargs: Any) -> AccessValidator:
    path = tmp_path / "plain_acl.yml"
    path.write_text(text)
    return AccessValidator([path], **kwargs)


def _signed(code: int, fields: dict[str, Any], body: bytes | None, ak: str) -> dict[str, Any]:
    cmd = RemotingCommand.request(code, dict(fields), body or b"")
    sign(cmd, Credentials(ak, SECRETS[ak]))
    return dict(cmd.ext_fields)


def _decide(
    validator: AccessValidator,
    code: int,
    fields: dict[str, Any],
    ak: str | None = "user1234",
    body: bytes | None = None,
    addr: str = "127.0.0.1:4000",
) -> str:
    """ "ok" or the refusal's remark."""
    ext = _signed(code, fields, body, ak) if ak else dict(fields)
    try:
        validator.check(code, ext, body, addr)
    except AclDeniedError as exc:
        assert exc.code == ResponseCode.SYSTEM_ERROR
        return exc.remark
    return "ok"


DECISIONS: list[tuple[str, int, dict[str, Any], str]] = [
    # listed topics: their own permission; others: defaultTopicPerm (SUB)
    ("user1234", C.SEND_MESSAGE_V2, {"a": "pg", "b": "Pub1"}, "ok"),
    ("user1234", C.SEND_MESSAGE_V2, {"a": "pg", "b": "Both1"}, "ok"),
    (
        "user1234",
        C.SEND_MESSAGE_V2,
        {"a": "pg", "b": "Deny1"},
        "No permission for topic=Deny1: accessKey=user1234 holds DENY, request code 310 needs PUB",
    ),
    ("user1234", C.SEND_MESSAGE_V2, {"a": "pg", "b": "Other"}, "topic=Other: accessKey=user1234 holds SUB"),
    ("user1234", C.SEND_MESSAGE, {"topic": "Pub1", "group": "pg"}, "ok"),
    ("user1234", C.SEND_MESSAGE, {"topic": "Other", "group": "pg"}, "holds SUB, request code 10 needs PUB"),
    # a send to the retry topic is the group's: SUB on it
    ("user1234", C.SEND_MESSAGE_V2, {"a": "g1", "b": "%RETRY%g1"}, "ok"),
    ("user1234", C.SEND_MESSAGE_V2, {"a": "gdeny", "b": "%RETRY%gdeny"}, "No permission for group=gdeny"),
    # trace messages pass for any signed account
    ("user1234", C.SEND_MESSAGE_V2, {"a": "pg", "b": "RMQ_SYS_TRACE_TOPIC"}, "ok"),
    ("user1234", C.SEND_MESSAGE, {"topic": "RMQ_SYS_TRACE_TOPIC", "group": "pg"}, "ok"),
    ("admlimit", C.SEND_MESSAGE_V2, {"a": "pg", "b": "RMQ_SYS_TRACE_TOPIC"}, "ok"),
    # pulls: SUB on topic and group
    ("user1234", C.PULL_MESSAGE, {"topic": "Other", "consumerGroup": "g1"}, "ok"),
    (
        "user1234",
        C.PULL_MESSAGE,
        {"topic": "Pub1", "consumerGroup": "g1"},
        "topic=Pub1: accessKey=user1234 holds PUB",
    ),
    (
        "user1234",
        C.PULL_MESSAGE,
        {"topic": "Other", "consumerGroup": "gdeny"},
        "group=gdeny: accessKey=user1234 holds DENY",
    ),
    # no resources: signature alone
    ("user1234", C.GET_ROUTEINFO_BY_TOPIC, {"topic": "Deny1"}, "ok"),
    # admin codes
    (
        "user1234",
        C.UPDATE_AND_CREATE_TOPIC,
        {"topic": "T"},
        "accessKey=user1234 is not an admin account, needed by request code 17",
    ),
    ("user1234", C.DELETE_TOPIC_IN_BROKER, {"topic": "T"}, "not an admin account"),
    ("user1234", C.AUTH_LIST_USER, {}, "not an admin account"),
    ("user1234", P.POP_ROLLBACK, {}, "not an admin account"),
    ("admin123", C.UPDATE_AND_CREATE_TOPIC, {"topic": "T"}, "ok"),
    ("admin123", P.POP_ROLLBACK, {}, "ok"),
    # an admin without resource permissions may do everything
    ("admin123", C.SEND_MESSAGE_V2, {"a": "pg", "b": "Any"}, "ok"),
    ("admin123", C.SEND_MESSAGE, {"topic": "Any", "group": "pg"}, "ok"),
    ("admin123", C.PULL_MESSAGE, {"topic": "Any", "consumerGroup": "g"}, "ok"),
    # an admin with resource permissions is checked against them (and its defaults)
    ("admlimit", C.SEND_MESSAGE_V2, {"a": "pg", "b": "Pub1"}, "ok"),
    ("admlimit", C.SEND_MESSAGE_V2, {"a": "pg", "b": "Any"}, "topic=Any: accessKey=admlimit holds DENY"),
    ("admlimit", C.SEND_MESSAGE, {"topic": "Any", "group": "pg"}, "topic=Any: accessKey=admlimit holds DENY"),
    (
        "admlimit",
        C.PULL_MESSAGE,
        {"topic": "Pub1", "consumerGroup": "g"},
        "topic=Pub1: accessKey=admlimit holds PUB",
    ),
    ("admlimit", C.UPDATE_AND_CREATE_TOPIC, {"topic": "T"}, "ok"),
    # a non-admin's admin request is refused whatever topic its header names
    ("user1234", C.UPDATE_AND_CREATE_TOPIC, {"b": "Pub1", "topic": "Pub1"}, "not an admin account"),
    (
        "user1234",
        C.SEND_BATCH_MESSAGE,
        {"a": "pg", "b": "Deny1"},
        "topic=Deny1: accessKey=user1234 holds DENY",
    ),
    # an account publishing by default: a listed DENY and a denied group's retry topic still refuse
    ("pubuser1", C.SEND_MESSAGE_V2, {"a": "pg", "b": "Other"}, "ok"),
    ("pubuser1", C.SEND_MESSAGE_V2, {"a": "pg", "b": "Deny1"}, "topic=Deny1: accessKey=pubuser1 holds DENY"),
    (
        "pubuser1",
        C.SEND_MESSAGE_V2,
        {"a": "gdeny", "b": "%RETRY%gdeny"},
        "group=gdeny: accessKey=pubuser1 holds DENY",
    ),
    ("pubuser1", C.SEND_MESSAGE_V2, {"a": "gsub", "b": "%RETRY%gsub"}, "ok"),
    ("pubuser1", C.SEND_MESSAGE_V2, {"a": "g1", "b": "%RETRY%g1"}, "group=g1: accessKey=pubuser1 holds DENY"),
    # an account not white-listed from here signs as any other (defaults DENY)
    ("white123", C.SEND_MESSAGE_V2, {"a": "pg", "b": "Any"}, "topic=Any: accessKey=white123 holds DENY"),
]


@pytest.mark.parametrize(("ak", "code", "fields", "expected"), DECISIONS)
def test_validator_decision_table(
    tmp_path: Path, ak: str, code: int, fields: dict[str, Any], expected: str
) -> None:
    """PlainPermissionManager.checkPerm's decisions (and ours beyond it, docs/operations.md):
    admin codes need an admin, an admin without resource permissions passes, the others are
    checked per resource against the listed or default permission; the refusal names the
    account, resource, held and needed permissions. SEND_MESSAGE_V2's fast path decides as
    the general path (the same cases through SEND_MESSAGE)."""
    outcome = _decide(_validator(tmp_path), code, fields, ak)
    if expected == "ok":
        assert outcome == "ok"
    else:
        assert outcome.startswith("AclException: ") and expected in outcome, outcome


def test_validator_order_of_checks(tmp_path: Path) -> None:
    """Apache's order: the global white list (even without an AccessKey), then a known
    AccessKey, the account's own white list (no signature needed), the signature, then the
    permissions; each refusal names the request code and the peer's IP."""
    validator = _validator(tmp_path)
    send = {"a": "pg", "b": "Deny1"}
    assert _decide(validator, C.UPDATE_AND_CREATE_TOPIC, {}, None, addr="10.9.9.1:1") == "ok"
    assert _decide(validator, C.UPDATE_AND_CREATE_TOPIC, {}, None, addr="10.9.8.1:1") == (
        "AclException: No accessKey is configured (request code 17 from 10.9.8.1)"
    )
    assert _decide(validator, C.SEND_MESSAGE_V2, {"AccessKey": ""}, None) == (
        "AclException: No accessKey is configured (request code 310 from 127.0.0.1)"
    )
    assert _decide(validator, C.SEND_MESSAGE_V2, {"AccessKey": "nobody12", **send}, None, addr="[::1]:9") == (
        "AclException: No acl config for nobody12 (request code 310 from ::1)"
    )
    # the account's white list passes unsigned requests, for anything
    assert (
        _decide(validator, C.UPDATE_AND_CREATE_TOPIC, {"AccessKey": "white123"}, None, addr="10.5.5.5:1")
        == "ok"
    )
    assert _decide(validator, C.SEND_MESSAGE_V2, {"AccessKey": "white123"}, None, addr="10.5.5.6:1") == (
        "AclException: Check signature failed for accessKey=white123 (request code 310 from 10.5.5.6)"
    )
    # a user's own white list does not help another user
    assert "Check signature failed" in _decide(
        validator, C.SEND_MESSAGE_V2, {"AccessKey": "user1234"}, None, addr="10.5.5.5:1"
    )
    # a wrong signature, or one signed with another account's secret
    fields = _signed(C.SEND_MESSAGE_V2, {"a": "pg", "b": "Pub1"}, None, "user1234")
    fields["Signature"] = "AAAA" + str(fields["Signature"])[4:]
    assert "Check signature failed for accessKey=user1234" in (
        _refusal(validator, C.SEND_MESSAGE_V2, fields).remark
    )
    fields = _signed(C.SEND_MESSAGE_V2, {"a": "pg", "b": "Pub1"}, None, "admin123")
    fields["AccessKey"] = "user1234"
    assert "Check signature failed" in (_refusal(validator, C.SEND_MESSAGE_V2, fields).remark)
    # the signature covers the body
    fields = _signed(C.SEND_MESSAGE_V2, {"a": "pg", "b": "Pub1"}, b"one", "user1234")
    validator.check(C.SEND_MESSAGE_V2, fields, b"one", "127.0.0.1:1")
    assert "Check signature failed" in (_refusal(validator, C.SEND_MESSAGE_V2, fields, b"two").remark)
    # a global white list is checked before anything else, signed or not
    assert _decide(validator, C.SEND_MESSAGE_V2, send, "user1234", addr="10.9.9.200:1") == "ok"
    # the signature is checked before the admin scope
    fields = {"AccessKey": "user1234", "Signature": "bad"}
    assert "Check signature failed" in (_refusal(validator, C.UPDATE_AND_CREATE_TOPIC, fields).remark)


def _refusal(
    validator: AccessValidator, code: int, fields: dict[str, Any], body: bytes | None = None
) -> AclDeniedError:
    with pytest.raises(AclDeniedError) as info:
        validator.check(code, fields, body, "127.0.0.1:1")
    return info.value


def test_access_key_that_is_not_a_string(tmp_path: Path) -> None:
    """An AccessKey that decodes as a number (a JSON header) is looked up by its text."""
    validator = _validator(tmp_path, "accounts:\n  - {accessKey: '12345678', secretKey: sk123456}\n")
    cmd = RemotingCommand.request(C.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}, b"")
    sign(cmd, Credentials("12345678", "sk123456"))
    fields = dict(cmd.ext_fields)
    fields["AccessKey"] = 12345678
    assert _try(validator, C.GET_ROUTEINFO_BY_TOPIC, fields) == "ok"


def _try(validator: AccessValidator, code: int, fields: dict[str, Any]) -> object:
    try:
        validator.check(code, fields, b"", "127.0.0.1:1")
    except AclDeniedError as exc:
        return exc
    return "ok"


def test_validator_reloads_after_its_interval(tmp_path: Path) -> None:
    """Edited files are noticed on the first request after reload_interval, not before."""
    validator = _validator(tmp_path, reload_interval=3600)
    path = tmp_path / "plain_acl.yml"
    path.write_text(RULES.replace("Deny1=DENY", "Deny1=PUB"))
    os.utime(path, ns=(1, 1))
    send = {"a": "pg", "b": "Deny1"}
    assert "holds DENY" in _decide(validator, C.SEND_MESSAGE_V2, send)
    validator._next_look = 0  # the interval has passed
    assert _decide(validator, C.SEND_MESSAGE_V2, send) == "ok"
    assert validator._next_look > 0


def test_reload_if_changed(tmp_path: Path) -> None:
    """Nothing changed: no reload; an edit: the new rules; a bad edit: the previous rules
    stay, and the bad file is not re-read until it changes again."""
    validator = _validator(tmp_path)
    path = tmp_path / "plain_acl.yml"
    assert validator.reload_if_changed() is False
    path.write_text(RULES.replace("Deny1=DENY", "Deny1=PUB"))
    os.utime(path, ns=(1, 1))
    assert validator.reload_if_changed() is True
    assert validator.config.accounts["user1234"].owned("Deny1") == PUB
    path.write_text("accounts: [x]\n")
    os.utime(path, ns=(2, 2))
    assert validator.reload_if_changed() is False
    assert validator.config.accounts["user1234"].owned("Deny1") == PUB
    assert not validator.config.changed()
    assert validator.reload_if_changed() is False


# -- editing the files ------------------------------------------------------------------------


def test_update_account_writes_the_defining_file(tmp_path: Path) -> None:
    """An account is updated in the file that defines it (a new one goes to the first file);
    the file's dataVersion counter goes up by one each edit; the new rules are in force."""
    first, second = tmp_path / "a.yml", tmp_path / "b.yml"
    first.write_text("accounts:\n  - {accessKey: first123, secretKey: first123}\n")
    second.write_text(
        "dataVersion: [{counter: 7, timestamp: 1}]\naccounts:\n  - {accessKey: second12, secretKey: second12}\n"
    )
    validator = AccessValidator([first, second])
    update_account(validator, {"accessKey": "second12", "secretKey": "changed12", "admin": True})
    data = yaml.safe_load(second.read_text())
    assert data["dataVersion"][0]["counter"] == 8
    assert [a["accessKey"] for a in data["accounts"]] == ["second12"]
    assert data["accounts"][0]["secretKey"] == "changed12"
    assert "second12" not in first.read_text()
    assert validator.config.accounts["second12"].admin
    update_account(validator, {"accessKey": "brandnew", "secretKey": "brandnew"})
    assert "brandnew" in first.read_text() and validator.config.accounts["brandnew"].source == first
    assert data_versions(validator) == {
        first: {"counter": 1, "timestamp": data_versions(validator)[first]["timestamp"]},
        second: {"counter": 8, "timestamp": data["dataVersion"][0]["timestamp"]},
    }
    assert data_versions(validator)[first]["timestamp"] > 0
    for short in (
        {"accessKey": "sixsix", "secretKey": "longenough"},
        {"accessKey": "longenough", "secretKey": "sixsix"},
    ):
        with pytest.raises(
            AclConfigError, match=r"^accessKey and secretKey must be longer than 6 characters$"
        ):
            update_account(validator, short)
    update_account(validator, {"accessKey": "seven77", "secretKey": "seven77"})
    assert "seven77" in validator.config.accounts


def test_delete_account_and_global_white(tmp_path: Path) -> None:
    """Deleting removes only that account from its file; the global white list is replaced
    in the named file (or the first), a file not the broker's is refused, a bad pattern is
    refused before anything is written."""
    first, second = tmp_path / "a.yml", tmp_path / "b.yml"
    first.write_text("accounts:\n  - {accessKey: first123, secretKey: first123}\n")
    second.write_text(
        "accounts:\n  - {accessKey: second12, secretKey: second12}\n  - {accessKey: third123, secretKey: third123}\n"
    )
    validator = AccessValidator([first, second])
    assert delete_account(validator, "second12") is True
    assert set(validator.config.accounts) == {"first123", "third123"}
    assert "third123" in second.read_text() and "second12" not in second.read_text()
    assert delete_account(validator, "second12") is False
    update_global_white(validator, [" 10.1.1.* ", " "], path=second)
    assert yaml.safe_load(second.read_text())["globalWhiteRemoteAddresses"] == ["10.1.1.*"]
    assert validator.config.white_listed("10.1.1.5")
    update_global_white(validator, ["10.2.2.2"])
    assert yaml.safe_load(first.read_text())["globalWhiteRemoteAddresses"] == ["10.2.2.2"]
    with pytest.raises(AclConfigError, match="not one of the broker's ACL files"):
        update_global_white(validator, ["10.3.3.3"], path=tmp_path / "c.yml")
    before = first.read_text()
    with pytest.raises(ValueError):
        update_global_white(validator, ["10.3.3"])
    assert first.read_text() == before
    assert not (tmp_path / "c.yml").exists()
    assert {p.name for p in tmp_path.iterdir()} == {"a.yml", "b.yml"}  # no temporary file left


def test_data_versions_of_unedited_or_unreadable_files(tmp_path: Path) -> None:
    """Files never edited (or missing, or not YAML mappings) report zeros."""
    good, missing, bad = tmp_path / "a.yml", tmp_path / "none.yml", tmp_path / "bad.yml"
    good.write_text("accounts: []\n")
    validator = AccessValidator([good, missing])
    bad.write_text("- a list\n")
    validator.files.append(bad)
    zero = {"counter": 0, "timestamp": 0}
    assert data_versions(validator) == {good: zero, missing: zero, bad: zero}
    good.write_text("dataVersion: [{counter: 3, timestamp: 42}]\n")
    assert data_versions(validator)[good] == {"counter": 3, "timestamp": 42}


def test_validator_checks_the_resources_named_in_bodies(tmp_path: Path) -> None:
    """Heartbeats, queue locks, assignment queries and batch acks name their groups and
    topics in the body: the validator reads them there (a group denied is refused)."""
    validator = _validator(tmp_path)
    beat = HeartbeatData(
        client_id="c",
        consumer_data_set=[
            ConsumerData(group_name="gdeny", subscription_data_set=[SubscriptionData(topic="T")])
        ],
    ).encode()
    assert "group=gdeny" in _decide(validator, C.HEART_BEAT, {}, "user1234", body=beat)
    assert _decide(validator, C.HEART_BEAT, {}, "user1234", body=_heartbeat()) == "ok"
    ack = encode_batch_ack_body("b", [BatchAck("gdeny", "T1", False, 0, 0, 0, 1, 1000, (0,))])
    assert "group=gdeny" in _decide(validator, P.BATCH_ACK_MESSAGE, {}, "user1234", body=ack)


def test_a_numeric_topic_header_is_checked_as_its_text(tmp_path: Path) -> None:
    """A header value decoded as a number (JSON headers) names the topic by its text and is
    decided by the permissions, not crashing the check."""
    validator = _validator(tmp_path)
    fields = _signed(C.SEND_MESSAGE_V2, {"a": "pg", "b": 123}, None, "user1234")
    assert "topic=123: accessKey=user1234 holds SUB" in _decide_signed(validator, C.SEND_MESSAGE_V2, fields)
    fields = _signed(C.SEND_MESSAGE_V2, {"a": "pg", "b": 123}, None, "pubuser1")
    assert _decide_signed(validator, C.SEND_MESSAGE_V2, fields) == "ok"


def _decide_signed(validator: AccessValidator, code: int, fields: dict[str, Any]) -> str:
    try:
        validator.check(code, fields, None, "127.0.0.1:1")
    except AclDeniedError as exc:
        return exc.remark
    return "ok"


def test_default_reload_interval_is_a_second(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/operations.md: the files are re-read within a second of being edited; and not on
    every request in between (one look per interval)."""
    clock = [1000.0]
    monkeypatch.setattr("aiorocketmq.broker.acl.time.monotonic", lambda: clock[0])
    validator = _validator(tmp_path)
    path = tmp_path / "plain_acl.yml"
    send = {"a": "pg", "b": "Deny1"}
    path.write_text(RULES.replace("Deny1=DENY", "Deny1=PUB"))
    os.utime(path, ns=(1, 1))
    clock[0] = 1000.5
    assert "holds DENY" in _decide(validator, C.SEND_MESSAGE_V2, send)
    clock[0] = 1001.0
    assert _decide(validator, C.SEND_MESSAGE_V2, send) == "ok"
    path.write_text(RULES)
    os.utime(path, ns=(2, 2))
    clock[0] = 1001.5
    assert _decide(validator, C.SEND_MESSAGE_V2, send) == "ok"  # not looked at yet
    clock[0] = 1002.0
    assert "holds DENY" in _decide(validator, C.SEND_MESSAGE_V2, send)


def test_reloads_and_refusals_are_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An operator sees in the log which files were reloaded, why a bad edit was not used,
    and every refusal with its reason."""
    path, extra = tmp_path / "plain_acl.yml", tmp_path / "extra.yml"
    path.write_text(RULES)
    validator = AccessValidator([path, extra])
    caplog.set_level("INFO", logger="aiorocketmq.broker.acl")
    path.write_text(RULES + "\n")
    os.utime(path, ns=(1, 1))
    assert validator.reload_if_changed()
    assert f"ACL: rules reloaded from {path}, {extra}" in caplog.messages
    caplog.clear()
    path.write_text("accounts: [x]\n")
    os.utime(path, ns=(2, 2))
    assert not validator.reload_if_changed()
    assert caplog.messages == [
        f"ACL: keeping the previous rules, the edited file is not usable: {path}: accounts must be a list of mappings"
    ]
    caplog.clear()
    remark = _decide(validator, C.SEND_MESSAGE_V2, {"a": "pg", "b": "Deny1"})
    assert caplog.messages == [f"ACL denied: {remark.removeprefix('AclException: ')}"]


def test_editing_a_file_in_a_folder_not_made_yet(tmp_path: Path) -> None:
    """rocketmq.acl.plain.file may name a file whose folders do not exist yet: the first
    admin edit creates them."""
    path = tmp_path / "a" / "b" / "acl.yml"
    validator = AccessValidator([path])
    update_account(validator, {"accessKey": "newuser1", "secretKey": "newsecret"})
    assert "newuser1" in validator.config.accounts and path.is_file()


def test_edits_write_beside_the_file_whatever_the_temp_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rewrite is atomic by a rename in the ACL file's own folder: it works whatever the
    system temporary folder is (another file system, or missing)."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-dir"))
    path = tmp_path / "plain_acl.yml"
    path.write_text("accounts: []\n")
    validator = AccessValidator([path])
    update_account(validator, {"accessKey": "newuser1", "secretKey": "newsecret"})
    assert "newuser1" in validator.config.accounts


def test_a_failed_rewrite_keeps_the_old_file_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the final rename fails, the error is the rename's, the old file is untouched and
    the temporary file is removed."""
    path = tmp_path / "plain_acl.yml"
    path.write_text("accounts: []\n")
    validator = AccessValidator([path])

    def refuse(*_args: Any) -> None:
        raise PermissionError("read-only")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(PermissionError, match="read-only"):
        update_account(validator, {"accessKey": "newuser1", "secretKey": "newsecret"})
    assert path.read_text() == "accounts: []\n"
    assert [p.name for p in tmp_path.iterdir()] == ["plain_acl.yml"]


def test_edits_keep_the_files_key_order(tmp_path: Path) -> None:
    """A rewritten file keeps its keys in the operator's order (not sorted)."""
    path = tmp_path / "plain_acl.yml"
    path.write_text("globalWhiteRemoteAddresses: []\naccounts: []\n")
    validator = AccessValidator([path])
    update_account(validator, {"accessKey": "newuser1", "secretKey": "newsecret"})
    assert list(yaml.safe_load(path.read_text())) == ["globalWhiteRemoteAddresses", "accounts", "dataVersion"]
    assert list(yaml.safe_load(path.read_text())["accounts"][0])[:2] == ["accessKey", "secretKey"]


@pytest.mark.parametrize(
    ("version", "counter"),
    [
        (None, 1),
        ([], 1),
        ([{"counter": 4, "timestamp": 9}], 5),
        ([{"timestamp": 9}], 1),
        ({"counter": 4}, 1),
    ],
)
def test_edits_count_data_versions(tmp_path: Path, version: Any, counter: int) -> None:
    """Each edit sets dataVersion to [{counter: previous + 1, timestamp: now in ms}]; a file
    without a usable dataVersion starts at 1."""
    import time

    path = tmp_path / "plain_acl.yml"
    path.write_text(yaml.safe_dump({"accounts": [], "dataVersion": version}))
    validator = AccessValidator([path])
    before = time.time_ns() // 1_000_000
    update_global_white(validator, ["10.0.0.1"])
    after = time.time_ns() // 1_000_000
    (written,) = yaml.safe_load(path.read_text())["dataVersion"]
    assert written["counter"] == counter
    assert before <= written["timestamp"] <= after


def test_an_edit_of_a_file_that_is_not_a_mapping_is_refused(tmp_path: Path) -> None:
    """The admin edit refuses to rewrite a file that is not a mapping, naming it."""
    path = tmp_path / "plain_acl.yml"
    path.write_text("accounts: []\n")
    validator = AccessValidator([path])
    path.write_text("- a list\n")
    with pytest.raises(AclConfigError, match=r"plain_acl\.yml: not a mapping of ACL settings"):
        update_global_white(validator, ["10.0.0.1"])


@pytest.mark.parametrize("version", ["[]", "[5]", "{counter: 3}", "7"])
def test_data_versions_of_odd_files(tmp_path: Path, version: str) -> None:
    """A dataVersion that is not Apache's list of one mapping reports zeros."""
    path = tmp_path / "plain_acl.yml"
    path.write_text(f"dataVersion: {version}\n")
    validator = AccessValidator([path])
    assert data_versions(validator) == {path: {"counter": 0, "timestamp": 0}}
