"""ACL 2.0's pure parts: resource keys and matching, source addresses, Apache's choice of the
deciding policy entry (its comparator's quirks under Java's sort included), the table of what
each request needs, and the engine's two checks over a metadata file in a temporary directory.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aiorocketmq.broker.auth.engine import AuthEngine, AuthRefused
from aiorocketmq.broker.auth.migrate import account_to_auth
from aiorocketmq.broker.auth.model import (
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
    UserStatus,
    UserType,
    compare_entries,
    ip_in_range,
    java_sort,
    matched_entry,
    valid_ip_or_cidr,
)
from aiorocketmq.broker.auth.requests import Need, remoting_needs
from aiorocketmq.broker.auth.store import AuthenticationError, AuthorizationError, AuthStore
from aiorocketmq.broker.config import BrokerConfig
from aiorocketmq.protocol.acl import ACCESS_KEY, Credentials, sign
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand

ALLOW, DENY = Decision.ALLOW, Decision.DENY
PUB, SUB = Action.PUB, Action.SUB


def entry(
    key: str, decision: Decision = ALLOW, actions: tuple[Action, ...] = (PUB,), ips: list[str] | None = None
) -> PolicyEntry:
    resource = Resource.parse(key)
    assert resource is not None
    return PolicyEntry(resource, list(actions), ips, decision)


def custom(*entries: PolicyEntry) -> Acl:
    return Acl("User:alice", [Policy(PolicyType.CUSTOM, list(entries))])


# -- resources -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "kind", "name", "pattern", "back"),
    [
        ("*", ResourceType.ANY, None, ResourcePattern.ANY, "*"),
        ("Topic:*", ResourceType.TOPIC, None, ResourcePattern.ANY, "Topic:*"),
        ("Topic:ord*", ResourceType.TOPIC, "ord", ResourcePattern.PREFIXED, "Topic:ord*"),
        ("topic:orders", ResourceType.TOPIC, "orders", ResourcePattern.LITERAL, "Topic:orders"),
        ("Group:g1", ResourceType.GROUP, "g1", ResourcePattern.LITERAL, "Group:g1"),
        ("Cluster:DefaultCluster", ResourceType.CLUSTER, "DefaultCluster", ResourcePattern.LITERAL, None),
    ],
)
def test_resource_keys_parse_as_apache_reads_them(
    key: str, kind: ResourceType, name: str | None, pattern: ResourcePattern, back: str | None
) -> None:
    resource = Resource.parse(key)
    assert resource == Resource(kind, name, pattern)
    assert resource.key == (back or key)


def test_unknown_resource_types_and_blank_keys_parse_to_nothing() -> None:
    assert Resource.parse("Queue:q") is None
    assert Resource.parse("  ") is None
    assert Resource.parse(None) is None


def test_a_retry_topic_names_its_group() -> None:
    assert Resource.group("%RETRY%g1") == Resource(ResourceType.GROUP, "g1", ResourcePattern.LITERAL)
    assert Resource.group("%DLQ%g1").name == "%DLQ%g1"  # only a retry topic is unwrapped


def test_matching_by_pattern() -> None:
    orders = Resource.topic("orders")
    assert Resource.parse("*").matches(orders)  # type: ignore[union-attr]
    assert Resource.parse("Topic:*").matches(orders)  # type: ignore[union-attr]
    assert Resource.parse("Topic:ord*").matches(orders)  # type: ignore[union-attr]
    assert not Resource.parse("Topic:orx*").matches(orders)  # type: ignore[union-attr]
    assert not Resource.parse("Group:*").matches(orders)  # type: ignore[union-attr]
    assert not Resource.parse("Topic:order").matches(orders)  # type: ignore[union-attr]
    assert not Resource.parse("Topic:ord*").matches(Resource.topic(None))  # type: ignore[union-attr]


# -- source addresses ------------------------------------------------------------------------


def test_source_addresses_plain_and_cidr() -> None:
    assert ip_in_range("10.1.2.3", "10.0.0.0/8")
    assert not ip_in_range("11.1.2.3", "10.0.0.0/8")
    assert ip_in_range("192.168.1.7", "192.168.1.7/32")
    assert ip_in_range("127.0.0.1", "127.0.0.1")
    assert not ip_in_range("127.0.0.1", "127.0.0.2")
    assert ip_in_range("::1", "::/0")
    assert ip_in_range("1.2.3.4", "0.0.0.0/0")
    assert valid_ip_or_cidr("10.0.0.0/8") and valid_ip_or_cidr("::1") and valid_ip_or_cidr("fe80::/10")
    assert not valid_ip_or_cidr("10.0.0.0/33")
    assert not valid_ip_or_cidr("10.0.0")
    assert not valid_ip_or_cidr("host.example")


# -- the decision ----------------------------------------------------------------------------


def test_a_literal_entry_outranks_the_any_pattern_whatever_the_order() -> None:
    topic = Resource.topic("orders")
    for entries in (
        (entry("Topic:*", DENY), entry("Topic:orders")),
        (entry("Topic:orders"), entry("Topic:*", DENY)),
    ):
        found = matched_entry(custom(*entries), topic, [PUB], "127.0.0.1")
        assert found is not None and found.decision is ALLOW


def test_a_typed_entry_outranks_star() -> None:
    found = matched_entry(custom(entry("*", DENY), entry("Topic:*")), Resource.topic("t"), [PUB], "1.1.1.1")
    assert found is not None and found.resource.key == "Topic:*"


def test_among_prefixes_the_shorter_wins_as_in_apache() -> None:
    acl = custom(entry("Topic:orders-*", DENY), entry("Topic:ord*"))
    found = matched_entry(acl, Resource.topic("orders-eu"), [PUB], "1.1.1.1")
    assert found is not None and found.resource.key == "Topic:ord*"


def test_apache_comparator_is_order_dependent_for_a_literal_deny_and_an_any_allow() -> None:
    """Apache 5.3.3 sorts [literal deny, Topic:* allow] to put the allow first, and
    [Topic:* allow, literal deny] to put the deny first: the stored order decides."""
    topic = Resource.topic("orders")
    deny_first = matched_entry(custom(entry("Topic:orders", DENY), entry("Topic:*")), topic, [PUB], "")
    allow_first = matched_entry(custom(entry("Topic:*"), entry("Topic:orders", DENY)), topic, [PUB], "")
    assert deny_first is not None and deny_first.decision is ALLOW
    assert allow_first is not None and allow_first.decision is DENY


def test_java_sort_matches_timsort_binary_insertion() -> None:
    items = [5, 1, 4, 1, 3, 9, 2, 6]
    java_sort(items, lambda a, b: (a > b) - (a < b))
    assert items == sorted(items)
    descending = [9, 7, 5, 3]
    java_sort(descending, lambda a, b: (a > b) - (a < b))
    assert descending == [3, 5, 7, 9]


def test_comparator_ranks_deny_after_allow_on_ties() -> None:
    star_allow, star_deny = entry("*"), entry("*", DENY)
    assert compare_entries(star_deny, star_allow) == 1
    assert compare_entries(star_allow, star_deny) == -1


def test_default_policy_only_when_custom_matches_nothing() -> None:
    acl = Acl(
        "User:alice",
        [
            Policy(PolicyType.CUSTOM, [entry("Topic:a")]),
            Policy(PolicyType.DEFAULT, [entry("Topic:*", DENY), entry("Group:*", ALLOW, (SUB,))]),
        ],
    )
    assert matched_entry(acl, Resource.topic("a"), [PUB], "").decision is ALLOW  # type: ignore[union-attr]
    assert matched_entry(acl, Resource.topic("b"), [PUB], "").decision is DENY  # type: ignore[union-attr]
    assert matched_entry(acl, Resource.group("g"), [SUB], "").decision is ALLOW  # type: ignore[union-attr]
    assert matched_entry(acl, Resource.group("g"), [PUB], "") is None


def test_actions_and_sources_filter_entries() -> None:
    acl = custom(entry("Topic:t", ALLOW, (SUB,)), entry("Topic:u", ALLOW, (Action.ALL,), ["10.0.0.0/8"]))
    assert matched_entry(acl, Resource.topic("t"), [PUB], "") is None
    assert matched_entry(acl, Resource.topic("t"), [PUB, SUB], "") is not None  # any one action
    assert matched_entry(acl, Resource.topic("u"), [PUB], "10.9.9.9") is not None
    assert matched_entry(acl, Resource.topic("u"), [PUB], "127.0.0.1") is None


# -- what requests need ----------------------------------------------------------------------


def test_sends_pulls_and_offsets_need_what_apache_asks() -> None:
    topic, group = Resource.topic, Resource.group
    assert remoting_needs(RequestCode.SEND_MESSAGE_V2, {"a": "pg", "b": "t"}, None, "C") == [
        Need(topic("t"), (PUB,))
    ]
    assert remoting_needs(RequestCode.SEND_MESSAGE_V2, {"a": "g", "b": "%RETRY%g"}, None, "C") == [
        Need(group("g"), (SUB,))
    ]
    assert remoting_needs(RequestCode.PULL_MESSAGE, {"topic": "t", "consumerGroup": "g"}, None, "C") == [
        Need(topic("t"), (SUB,)),
        Need(group("g"), (SUB,)),
    ]
    assert remoting_needs(
        RequestCode.UPDATE_CONSUMER_OFFSET, {"topic": "t", "consumerGroup": "g"}, None, "C"
    ) == [
        Need(topic("t"), (SUB, Action.UPDATE)),
        Need(group("g"), (SUB, Action.UPDATE)),
    ]
    heartbeat = json.dumps(
        {
            "clientID": "c",
            "consumerDataSet": [
                {"groupName": "g", "subscriptionDataSet": [{"topic": "t"}, {"topic": "%RETRY%g"}]}
            ],
        }
    ).encode()
    assert remoting_needs(RequestCode.HEART_BEAT, {"x": "1"}, heartbeat, "C") == [
        Need(group("g"), (SUB,)),
        Need(topic("t"), (SUB,)),
    ]


def test_annotated_codes_and_the_cluster() -> None:
    assert remoting_needs(RequestCode.AUTH_CREATE_USER, {"username": "u"}, None, "C1") == [
        Need(Resource.cluster("C1"), (Action.UPDATE,))
    ]
    assert remoting_needs(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "t"}, None, "C") == [
        Need(Resource.topic("t"), (Action.CREATE,))
    ]
    assert remoting_needs(308, {"filterGroups": "a,,b", "topic": "t"}, None, "C") == [
        Need(Resource.group("a"), (Action.GET,)),
        Need(Resource.group("b"), (Action.GET,)),
        Need(Resource.topic("t"), (Action.GET,)),
    ]
    # Apache leaves UPDATE_BROKER_CONFIG open; we ask the cluster of it (an admin code).
    assert remoting_needs(RequestCode.UPDATE_BROKER_CONFIG, {"x": "y"}, None, "C") == []
    assert remoting_needs(
        RequestCode.UPDATE_BROKER_CONFIG, {"x": "y"}, None, "C", frozenset({RequestCode.UPDATE_BROKER_CONFIG})
    ) == [Need(Resource.cluster("C"), (Action.UPDATE,))]


def test_an_unreadable_body_is_refused() -> None:
    with pytest.raises(AuthorizationError, match="parse authorization context error"):
        remoting_needs(RequestCode.HEART_BEAT, {"x": "1"}, b"not json", "C")


# -- the store and the engine ----------------------------------------------------------------


def test_store_rules_and_durability(tmp_path: Path) -> None:
    store = AuthStore(tmp_path)
    store.create_user(User("bob", "bob_secret"))
    with pytest.raises(AuthenticationError, match="The user is existed"):
        store.create_user(User("bob", "other"))
    with pytest.raises(AuthenticationError, match="password can not be blank"):
        store.create_user(User("carol", " "))
    with pytest.raises(AuthorizationError, match=r"The subject of User:nobody is not exist\."):
        store.put_acl(Acl("User:nobody", [Policy(None, [entry("Topic:t")])]))
    store.put_acl(Acl("User:bob", [Policy(None, [entry("Topic:t")])]))
    store.put_acl(Acl("User:bob", [Policy(None, [entry("Topic:t", DENY), entry("Topic:u")])]))
    again = AuthStore(tmp_path)
    again.load()
    assert (
        again.users["bob"].user_type is UserType.NORMAL
        and again.users["bob"].user_status is UserStatus.ENABLE
    )
    acl = again.get_acl("User:bob")
    assert acl is not None
    assert [(e.resource.key, e.decision) for e in acl.policies[0].entries] == [
        ("Topic:t", DENY),
        ("Topic:u", ALLOW),
    ]
    assert acl.policies[0].policy_type is PolicyType.CUSTOM
    again.delete_acl("User:bob", None, Resource.parse("Topic:t"))
    again.delete_user("bob")
    assert again.get_acl("User:bob") is None and not again.list_users()


def _engine(tmp_path: Path, **settings: str) -> AuthEngine:
    config = BrokerConfig.model_validate(
        {
            "storePathRootDir": str(tmp_path),
            "brokerClusterName": "C",
            "authenticationEnabled": "true",
            "authorizationEnabled": "true",
            "initAuthenticationUser": '{"username":"root","password":"root_secret"}',
            **settings,
        }
    )
    engine = AuthEngine(config)
    engine.start()
    engine.store.create_user(User("alice", "alice_secret"))
    engine.store.create_user(User("off", "off_secret", user_status=UserStatus.DISABLE))
    engine.store.put_acl(
        Acl("User:alice", [Policy(None, [entry("Topic:t", ALLOW, (PUB,), ["127.0.0.0/8"])])])
    )
    return engine


def _signed(credentials: Credentials | None, code: int, fields: dict[str, str]) -> RemotingCommand:
    cmd = RemotingCommand.request(code, dict(fields), b"body")
    if credentials is not None:
        sign(cmd, credentials)
    return cmd


def _check(engine: AuthEngine, cmd: RemotingCommand, addr: str = "127.0.0.1:5000") -> str | None:
    try:
        engine.check_remoting(cmd.code, cmd.ext_fields, cmd.body, cmd.version, addr)
    except AuthRefused as exc:
        assert exc.code == ResponseCode.NO_PERMISSION
        return exc.remark
    return None


def test_engine_refusals_carry_apache_messages(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    send = {"a": "pg", "b": "t", "c": "TBW102"}
    alice = Credentials("alice", "alice_secret")
    assert engine.store.users["root"].user_type is UserType.SUPER
    assert _check(engine, _signed(alice, RequestCode.SEND_MESSAGE_V2, send)) is None
    assert _check(engine, _signed(None, RequestCode.SEND_MESSAGE_V2, send)) == "username cannot be null."
    assert _check(engine, _signed(Credentials("alice", "wrong"), RequestCode.SEND_MESSAGE_V2, send)) == (
        "check signature failed."
    )
    assert _check(engine, _signed(Credentials("eve", "x"), 310, send)) == "User:eve is not found."
    assert _check(engine, _signed(Credentials("off", "off_secret"), 310, send)) == "User:off is disabled."
    assert _check(engine, _signed(alice, 310, {**send, "b": "u"})) == (
        "User:alice has no permission to access Topic:u from 127.0.0.1, no matched policies."
    )
    assert _check(engine, _signed(alice, 310, send), "10.0.0.1:5000") == (
        "User:alice has no permission to access Topic:t from 10.0.0.1, no matched policies."
    )
    # A super user passes whatever the resource.
    assert _check(engine, _signed(Credentials("root", "root_secret"), 310, {**send, "b": "u"})) is None
    # A body altered after signing fails the signature.
    cmd = _signed(alice, RequestCode.SEND_MESSAGE_V2, send)
    cmd.body = b"other body"
    assert _check(engine, cmd) == "check signature failed."


def test_whitelists_skip_one_check_each(tmp_path: Path) -> None:
    engine = _engine(tmp_path, authenticationWhitelist="310, 11", authorizationWhitelist="10")
    send = {"a": "pg", "b": "u", "c": "TBW102"}
    unsigned_v2 = RemotingCommand.request(310, {**send, ACCESS_KEY: "alice"}, b"x")
    # Authentication skipped for 310, authorization still asks for Topic:u.
    assert _check(engine, unsigned_v2) == (
        "User:alice has no permission to access Topic:u from 127.0.0.1, no matched policies."
    )
    signed_v1 = _signed(Credentials("alice", "alice_secret"), 10, {"topic": "u", "producerGroup": "pg"})
    assert _check(engine, signed_v1) is None


def test_migrated_account_keeps_its_rights() -> None:
    user, acl = account_to_auth(
        {
            "accessKey": "rocketmq2",
            "secretKey": "12345678",
            "admin": False,
            "defaultTopicPerm": "DENY",
            "defaultGroupPerm": "SUB",
            "topicPerms": ["topicA=DENY", "topicB=PUB|SUB", "broken"],
            "groupPerms": ["groupA=DENY", "groupB=PUB|SUB"],
        }
    )
    assert (user.username, user.password, user.user_type) == ("rocketmq2", "12345678", UserType.NORMAL)
    assert acl is not None
    custom_policy, default_policy = acl.policies
    assert [e.to_info() for e in custom_policy.entries] == [
        {"actions": ["All"], "decision": "Deny", "resource": "Topic:topicA"},
        {"actions": ["Pub", "Sub"], "decision": "Allow", "resource": "Topic:topicB"},
        {"actions": ["All"], "decision": "Deny", "resource": "Group:groupA"},
        {"actions": ["Pub", "Sub"], "decision": "Allow", "resource": "Group:groupB"},
    ]
    assert [e.to_info() for e in default_policy.entries] == [
        {"actions": ["All"], "decision": "Deny", "resource": "Topic:*"},
        {"actions": ["Sub"], "decision": "Allow", "resource": "Group:*"},
    ]
    admin, none = account_to_auth({"accessKey": "boss", "secretKey": "s", "admin": True})
    assert admin.user_type is UserType.SUPER and none is None
