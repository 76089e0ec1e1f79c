"""ACL 2.0's model (``broker/auth/model.py``) against Apache 5.3.3's ``auth`` module, for the
mutants its first mutation run left alive (issue 38): the comparator and the sort that pick the
deciding policy entry (checked against what Apache's comparator and Java 17's ``List.sort``
print for the same entries), resource keys, source addresses and the stored forms of users,
entries, policies and ACLs.

The Java oracle: the comparator below is ``AclAuthorizationHandler.comparePolicyEntries``
copied as written, over entries parsed as ``Resource.of`` parses their keys; each list was
sorted with ``ArrayList.sort`` and the resulting order printed."""

from __future__ import annotations

import random
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

import pytest

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
    subject_username,
    valid_ip_or_cidr,
    without_retry_and_dlq,
)

ALLOW, DENY = Decision.ALLOW, Decision.DENY
PUB, SUB = Action.PUB, Action.SUB
ORDERS = Resource.topic("orders")

#: The entries below, all matching a PUB to ``Topic:orders``: resource key | Allow or Deny.
POOL = (
    "*|A",
    "*|D",
    "Topic:*|A",
    "Topic:*|D",
    "Topic:orders|A",
    "Topic:orders|D",
    "Topic:ord*|A",
    "Topic:ord*|D",
    "Topic:orders*|A",
    "Topic:o*|D",
)
#: ``comparePolicyEntries(POOL[i], POOL[j])``'s sign, row i, column j, as Apache 5.3.3 answers.
APACHE_SIGNS = (
    "0-++++++++",
    "++++++++++",
    "--0-0-0-0-",
    "--++++++++",
    "----0-----",
    "----++----",
    "------0--+",
    "------++-+",
    "------++0+",
    "---------+",
)
#: Lists of POOL entries and the order ``ArrayList.sort(this::comparePolicyEntries)`` leaves
#: them in (as indexes into the list), printed by Java 17.
APACHE_SORTED = [
    ("Topic:ord*|A Topic:ord*|A", "0 1"),
    ("*|D *|D", "0 1"),
    ("Topic:orders|D Topic:ord*|D Topic:orders|D", "2 1 0"),
    ("*|A Topic:o*|D Topic:*|A", "2 1 0"),
    ("Topic:o*|D Topic:orders|D Topic:orders|D", "1 2 0"),
    ("Topic:orders|A Topic:orders|D Topic:o*|D Topic:orders|A", "2 0 3 1"),
    ("Topic:ord*|D Topic:o*|D Topic:ord*|A Topic:*|D", "1 2 0 3"),
    ("Topic:o*|D *|D Topic:orders*|A Topic:ord*|D", "0 3 2 1"),
    ("Topic:*|A Topic:ord*|A Topic:orders*|A Topic:*|D *|A", "1 2 0 3 4"),
    ("Topic:ord*|A Topic:orders|D Topic:orders*|A Topic:o*|D Topic:orders*|A", "3 2 4 1 0"),
    ("*|A Topic:*|A Topic:ord*|D *|D Topic:orders|A", "4 2 1 0 3"),
    ("*|D Topic:*|A Topic:ord*|D *|D *|D Topic:ord*|A", "5 2 1 0 3 4"),
    ("Topic:orders|A Topic:*|A Topic:orders|D Topic:ord*|D Topic:ord*|A Topic:ord*|D", "4 3 5 0 2 1"),
    (
        "Topic:orders|A Topic:orders|A Topic:*|A Topic:ord*|A Topic:orders|A Topic:*|A Topic:orders|D",
        "3 0 1 4 6 2 5",
    ),
    ("*|D Topic:*|D Topic:orders*|A Topic:o*|D Topic:*|D Topic:orders|A *|A", "5 3 2 1 4 6 0"),
    ("Topic:*|A Topic:ord*|A Topic:*|D Topic:orders|D *|D *|A Topic:orders*|A Topic:o*|D", "7 3 1 6 0 2 5 4"),
    ("Topic:orders|D Topic:o*|D *|A Topic:*|D Topic:ord*|A Topic:*|A Topic:ord*|D *|D", "1 4 6 5 0 3 2 7"),
    (
        "Topic:*|A Topic:o*|D Topic:o*|D *|A Topic:orders*|A Topic:ord*|D *|A Topic:*|A Topic:ord*|A",
        "1 2 8 5 4 0 7 3 6",
    ),
    (
        "Topic:*|A Topic:orders*|A Topic:o*|D Topic:orders|A Topic:*|D *|A Topic:orders|D Topic:orders|A *|A *|D",
        "3 7 6 2 1 0 4 5 8 9",
    ),
    (
        "Topic:ord*|D Topic:orders*|A Topic:*|D Topic:orders|A Topic:orders|A Topic:*|A Topic:ord*|A Topic:*|A *|A Topic:orders*|A Topic:orders|A Topic:*|D",
        "6 3 4 10 5 0 1 9 7 2 11 8",
    ),
    ("Topic:ord*|A *|A", "0 1"),
    ("*|D Topic:orders*|A", "1 0"),
    ("Topic:orders*|A *|D Topic:orders*|A", "0 2 1"),
    ("Topic:ord*|D Topic:o*|D Topic:ord*|A", "1 2 0"),
    ("Topic:orders|A *|A Topic:ord*|A", "2 0 1"),
    ("Topic:orders|A Topic:ord*|A Topic:ord*|D Topic:ord*|D", "1 2 3 0"),
    ("Topic:orders|D Topic:*|A Topic:*|D Topic:ord*|A", "3 1 0 2"),
    ("Topic:o*|D *|D Topic:o*|D Topic:orders|D", "3 0 2 1"),
    ("Topic:o*|D Topic:orders|A Topic:*|A *|A Topic:o*|D", "1 2 0 4 3"),
    ("Topic:*|D Topic:*|D Topic:o*|D Topic:orders|A *|D", "3 2 0 1 4"),
    ("Topic:*|A Topic:o*|D *|D Topic:orders|D *|A", "3 1 0 4 2"),
    ("Topic:ord*|A Topic:ord*|D *|A Topic:orders*|A Topic:ord*|A Topic:ord*|D", "0 4 1 5 3 2"),
    ("Topic:*|D Topic:*|D Topic:*|D Topic:o*|D Topic:orders|D Topic:orders|A", "5 4 3 0 1 2"),
    ("*|D Topic:*|A Topic:orders*|A Topic:o*|D Topic:orders|A Topic:orders|D *|D", "4 5 3 2 1 0 6"),
    ("*|A *|A Topic:orders*|A Topic:ord*|A Topic:orders|D Topic:orders|A Topic:orders|D", "5 4 6 3 2 0 1"),
    (
        "Topic:orders|A Topic:ord*|A *|D Topic:ord*|A Topic:ord*|A Topic:ord*|D Topic:o*|D Topic:ord*|D",
        "6 1 3 4 5 7 0 2",
    ),
    (
        "Topic:*|D Topic:*|A Topic:o*|D Topic:orders|D Topic:orders*|A Topic:*|A Topic:ord*|D Topic:orders|A",
        "7 4 5 3 2 6 1 0",
    ),
    (
        "Topic:orders|A Topic:orders|A Topic:*|D Topic:ord*|A *|D *|D Topic:orders|D Topic:ord*|D Topic:o*|D",
        "8 3 7 0 1 6 2 4 5",
    ),
    (
        "Topic:orders|A Topic:orders|A Topic:o*|D Topic:*|A Topic:orders*|A Topic:orders|A *|A *|A *|A Topic:*|D",
        "2 4 0 1 5 3 9 6 7 8",
    ),
    (
        "Topic:orders*|A Topic:orders|D Topic:orders|A *|D Topic:*|A Topic:ord*|D *|A Topic:orders|A *|A *|D Topic:orders*|A Topic:ord*|A",
        "11 5 10 2 7 1 0 4 6 8 3 9",
    ),
    # Ties inside the first ascending run (Java extends the run on ``>= 0``):
    ("Topic:o*|D Topic:ord*|D Topic:orders*|A Topic:*|A", "0 1 2 3"),
    ("Topic:ord*|A Topic:ord*|D Topic:orders*|A Topic:*|A", "0 1 2 3"),
]


def pool_entry(spec: str) -> PolicyEntry:
    key, decision = spec.split("|")
    resource = Resource.parse(key)
    assert resource is not None
    return PolicyEntry(resource, [PUB], None, DENY if decision == "D" else ALLOW)


@contextmanager
def at_most_one_second() -> Iterator[None]:
    """Fail, rather than hang, when a sort does not end (a mutant's endless loop)."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError("the sort did not end")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# -- the deciding entry ------------------------------------------------------------------------


def test_the_comparator_answers_as_apaches_for_every_pair() -> None:
    """Mutants ``compare_entries_5/6/8/9/13/15/17/18/28``: which of two matching entries comes
    first (a typed resource before ``*``, the shorter prefix first, a deny last on a tie, and
    Apache's literal-or-prefixed quirk) differs from Apache's comparator for some pair."""
    entries = [pool_entry(spec) for spec in POOL]
    signs = tuple(
        "".join("-" if (c := compare_entries(a, b)) < 0 else "+" if c > 0 else "0" for b in entries)
        for a in entries
    )
    assert signs == APACHE_SIGNS


@pytest.mark.parametrize(("specs", "order"), APACHE_SORTED)
def test_matched_entries_are_sorted_as_java_sorts_them_in_apache(specs: str, order: str) -> None:
    """Mutants of ``java_sort`` (its first run found or reversed wrongly, the binary insertion
    off by one) and of ``compare_entries``: for lists the inconsistent comparator makes
    order-dependent, the entry that decides (the first after the sort) is another one than
    Apache's broker picks."""
    entries = [pool_entry(spec) for spec in specs.split()]
    expected = [entries[int(i)] for i in order.split()]
    acl = Acl("User:alice", [Policy(PolicyType.CUSTOM, list(entries))])
    with at_most_one_second():
        found = matched_entry(acl, ORDERS, [PUB], "10.0.0.7")
        ordered = list(entries)
        java_sort(ordered, compare_entries)
    assert found is expected[0]
    assert [next(i for i, x in enumerate(entries) if x is e) for e in ordered] == [
        int(i) for i in order.split()
    ]


def test_java_sort_is_a_stable_sort_for_a_consistent_order() -> None:
    """Mutants of ``java_sort``: Java's ``List.sort`` is stable, so for a consistent order it
    gives what Python's stable ``sorted`` gives, runs ascending, descending or with ties at
    the start included."""
    rnd = random.Random(38)
    lists = [[(rnd.randrange(4), i) for i in range(n)] for n in range(2, 21) for _ in range(15)]
    lists += [[(3, 0), (2, 1), (2, 2), (1, 3)], [(1, 0), (2, 1), (0, 2)], [(2, 0), (1, 1), (1, 2), (3, 3)]]
    for items in lists:
        got = list(items)
        with at_most_one_second():
            java_sort(got, lambda a, b: (a[0] > b[0]) - (a[0] < b[0]))
        assert got == sorted(items, key=lambda p: p[0]), items


# -- actions and sources -----------------------------------------------------------------------


def test_an_entry_without_actions_matches_nothing_and_any_matches_every_action() -> None:
    """Mutants ``matches_actions_2/4``: an entry with no actions (Apache: ``isMatchAction`` is
    false for an empty list) matching, or a request for ``Any`` action not matching an entry
    that grants one."""
    assert not PolicyEntry(ORDERS, [], None, ALLOW).matches_actions([PUB])
    assert not PolicyEntry(ORDERS, [], None, ALLOW).matches_actions([Action.ANY])
    assert PolicyEntry(ORDERS, [SUB], None, ALLOW).matches_actions([Action.ANY])
    acl = Acl("User:alice", [Policy(PolicyType.CUSTOM, [PolicyEntry(ORDERS, [], None, ALLOW)])])
    assert matched_entry(acl, ORDERS, [PUB], "10.0.0.7") is None


def test_an_entry_limited_to_addresses_does_not_match_a_request_without_one() -> None:
    """Mutant ``matches_source_4``: an allow limited to source addresses granting a request whose
    address is unknown (Apache fails such a request; it must not be allowed)."""
    entry = PolicyEntry(ORDERS, [PUB], ["10.0.0.0/8"], ALLOW)
    acl = Acl("User:alice", [Policy(PolicyType.CUSTOM, [entry])])
    assert matched_entry(acl, ORDERS, [PUB], "") is None
    assert matched_entry(acl, ORDERS, [PUB], "10.1.2.3") is entry


def test_source_address_edge_cases_as_apache_reads_them() -> None:
    """Mutants of ``_ip``, ``_java_split``, ``valid_ip_or_cidr`` and ``ip_in_range``: bracketed
    IPv6 (``InetAddress.getByName`` takes it), a trailing slash (``String.split`` drops the
    empty part), prefix lengths at both ends of their range, and three parts."""
    assert valid_ip_or_cidr("[::1]/128") and ip_in_range("::1", "[::1]/128")
    assert valid_ip_or_cidr("10.0.0.0/8/") and ip_in_range("10.1.1.1", "10.0.0.0/8/")
    assert valid_ip_or_cidr("0.0.0.0/0") and valid_ip_or_cidr("10.0.0.1/32") and valid_ip_or_cidr("::/128")
    assert not valid_ip_or_cidr("::/129") and not valid_ip_or_cidr("10.0.0.0/-1")
    assert not valid_ip_or_cidr("host.example/8") and not valid_ip_or_cidr("10.0.0.0/eight")
    assert not valid_ip_or_cidr("10.0.0.0/8/1")
    assert not ip_in_range("10.1.1.1", "10.0.0.0/8/1")
    assert not ip_in_range("10.0.0.1", "10.0.0.1/")  # one part: compared as text, as in Apache


# -- names -------------------------------------------------------------------------------------


def test_keys_split_at_the_first_colon_and_a_prefix_ends_at_the_first_star() -> None:
    """Mutants ``parse_13/34``, ``subject_username_4/11``: Apache's ``substringBefore`` and
    ``substringAfter`` take the first separator."""
    assert Resource.parse("Topic:a:b") == Resource(ResourceType.TOPIC, "a:b", ResourcePattern.LITERAL)
    assert Resource.parse("Topic:a*b*") == Resource(ResourceType.TOPIC, "a", ResourcePattern.PREFIXED)
    assert subject_username("User:a:b") == "a:b"
    assert subject_username("user:bob") == "bob"
    assert subject_username("User") == ""
    assert subject_username("Group:g") is None and subject_username(None) is None


def test_cluster_resources_and_retry_and_dlq_names() -> None:
    """Mutants ``cluster_1..3``, ``without_retry_and_dlq_2``."""
    assert Resource.cluster("C1") == Resource.parse("Cluster:C1")
    assert Resource.cluster("C1").key == "Cluster:C1"
    assert without_retry_and_dlq("%RETRY%g") == "g"
    assert without_retry_and_dlq("%DLQ%g") == "g"
    assert without_retry_and_dlq("g") == "g"


# -- stored forms ------------------------------------------------------------------------------


def test_a_user_is_stored_and_read_back_whole() -> None:
    """Mutants of ``User.to_json``/``from_json``: a field lost or misnamed between the metadata
    file and memory (``UserInfo``'s names; a password only when there is one)."""
    bob = User("bob", "secret", UserType.SUPER, UserStatus.DISABLE)
    assert bob.to_json() == {
        "password": "secret",
        "userStatus": "disable",
        "userType": "Super",
        "username": "bob",
    }
    assert User.from_json(bob.to_json()) == bob
    assert User("carol").to_json() == {"username": "carol"}
    assert User.from_json({"username": "carol"}) == User("carol")
    assert User.from_json({}).username == ""


def test_entries_policies_and_acls_are_stored_and_read_back_whole() -> None:
    """Mutants of the ``to_json``/``from_json`` of resources, entries, policies and ACLs: a
    part lost or misnamed between the metadata file and memory, or a missing decision or
    policy type that cannot be written."""
    entries = [
        PolicyEntry(Resource.parse("Topic:ord*"), [PUB, SUB], ["10.0.0.0/8"], DENY),  # type: ignore[arg-type]
        PolicyEntry(Resource.parse("Group:*"), [Action.ALL], None, None),  # type: ignore[arg-type]
        PolicyEntry(Resource.parse("*"), [SUB], None, ALLOW),  # type: ignore[arg-type]
    ]
    acl = Acl("User:bob", [Policy(PolicyType.CUSTOM, entries[:2]), Policy(None, entries[2:])])
    stored = acl.to_json()
    assert stored["subject"] == "User:bob"
    assert stored["policies"][0]["entries"][0] == {
        "actions": ["Pub", "Sub"],
        "decision": "Deny",
        "resource": {"name": "ord", "pattern": "PREFIXED", "type": "Topic"},
        "sourceIps": ["10.0.0.0/8"],
    }
    assert stored["policies"][1]["policyType"] is None
    assert Acl.from_json(stored) == acl
    # Unknown action names are dropped; a missing pattern reads as a literal name.
    read = PolicyEntry.from_json(
        {"actions": ["pub", "Fly"], "resource": {"name": "t", "type": "topic"}, "decision": "allow"}
    )
    assert read == PolicyEntry(Resource.topic("t"), [PUB], None, ALLOW)
    assert Acl.from_json({}) == Acl("", [])


def test_an_entry_as_the_admin_requests_show_it() -> None:
    """Mutants ``to_info_13..17``: ``PolicyEntryInfo``'s ``sourceIps`` (shown only when set)."""
    limited = PolicyEntry(Resource.parse("Topic:ord*"), [PUB], ["10.0.0.0/8"], DENY)  # type: ignore[arg-type]
    assert limited.to_info() == {
        "actions": ["Pub"],
        "decision": "Deny",
        "resource": "Topic:ord*",
        "sourceIps": ["10.0.0.0/8"],
    }
    assert "sourceIps" not in PolicyEntry(ORDERS, [PUB], None, ALLOW).to_info()


def test_updating_and_deleting_policies() -> None:
    """Mutants of ``Acl.update_policies`` and ``Acl.delete_entry`` (Apache's ``updatePolicy`` and
    ``deletePolicy``): a new policy type added as nothing; deleting from the wrong policy, the
    wrong entry, or leaving an emptied policy behind."""
    literal = PolicyEntry(ORDERS, [PUB], None, ALLOW)
    prefixed = PolicyEntry(Resource.parse("Topic:ord*"), [SUB], None, DENY)  # type: ignore[arg-type]
    acl = Acl("User:bob", [Policy(PolicyType.CUSTOM, [literal, prefixed])])
    default = Policy(PolicyType.DEFAULT, [PolicyEntry(Resource.parse("*"), [SUB], None, DENY)])  # type: ignore[arg-type]
    acl.update_policies([default])
    assert acl.policy(PolicyType.DEFAULT) is default
    acl.delete_entry(PolicyType.CUSTOM, ORDERS)
    assert acl.policy(PolicyType.CUSTOM) == Policy(PolicyType.CUSTOM, [prefixed])
    acl.delete_entry(PolicyType.CUSTOM, Resource.topic("nothing-here"))  # no such entry
    assert acl.policy(PolicyType.CUSTOM) == Policy(PolicyType.CUSTOM, [prefixed])
    acl.delete_entry(PolicyType.CUSTOM, prefixed.resource)
    assert acl.policy(PolicyType.CUSTOM) is None and acl.policies == [default]
    acl.delete_entry(PolicyType.CUSTOM, ORDERS)  # no such policy
    assert acl.policies == [default]
