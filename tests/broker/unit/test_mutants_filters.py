"""SQL92 filters on the broker, bytes in: the store-side matcher reading a stored record's
properties (IPv6 hosts, the first property, a body that looks like properties, a missing
property, an unreadable value), and the per-group filter data a heartbeat registers (tests
written for surviving mutants of broker/filters.py)."""

from __future__ import annotations

import pytest

from aiorocketmq.broker.filters import ConsumerFilters, compile_expression, record_filter
from aiorocketmq.protocol.body import SubscriptionData
from aiorocketmq.protocol.message import encode_properties, encode_record, pack_host, stored_properties

V4 = pack_host("10.0.0.7", 40001)
V6 = pack_host("2001:db8::7", 40001)


def record(
    properties: str,
    *,
    body: bytes = b"payload",
    born_host: bytes = V4,
    store_host: bytes = V4,
) -> memoryview:
    return memoryview(
        encode_record(
            topic=b"Orders",
            body=body,
            properties=properties.encode(),
            born_host=born_host,
            store_host=store_host,
        )
    )


def matches(expression: str, rec: memoryview) -> bool:
    return record_filter(compile_expression(expression, "SQL92"))(rec)


@pytest.mark.parametrize(
    ("born_host", "store_host"),
    [(V4, V4), (V6, V4), (V4, V6), (V6, V6)],
    ids=["v4-v4", "born-v6", "store-v6", "both-v6"],
)
def test_properties_are_read_after_ipv6_hosts_too(born_host: bytes, store_host: bytes) -> None:
    """A message from an IPv6 producer (born host) or stored by a broker on IPv6 (store host)
    has a 12-byte longer header per IPv6 address; its properties, the filtered one first,
    must still be found where they are. Mutants: the header's length computed wrong
    (``- 12``, 13 bytes, the IPv6 bits ignored)."""
    props = stored_properties({"kind": "paid", "n": "7"})
    rec = record(props, born_host=born_host, store_host=store_host)
    assert matches("kind = 'paid'", rec)
    assert matches("n = 7", rec)
    assert not matches("kind = 'unpaid'", rec)


def test_the_first_property_of_a_record_is_read() -> None:
    """The property the expression reads may be the first of the record (no separator before
    it): it must be read at the start of the properties. Mutants: the properties' position
    off (``+ 4``, ``- 3``, None), the ``startswith`` at the wrong place, the value's start
    wrong."""
    rec = record(stored_properties({"kind": "paid", "UNIQ_KEY": "AC11000100002A9F0000000000000000"}))
    assert matches("kind = 'paid'", rec)
    assert matches("kind IS NOT NULL", rec)
    assert not matches("kind = 'unpaid'", rec)


def test_a_body_that_looks_like_properties_does_not_count() -> None:
    """A message body may hold any bytes, also ``\\x02kind\\x01paid\\x02``; only the
    record's properties decide (Apache decodes the properties section alone). Mutants: the
    topic or properties position computed before the body's end, the search for a property
    started at the record's beginning."""
    body = b"\x02kind\x01paid\x02n\x0199\x02"
    rec = record(stored_properties({"TAGS": "a", "kind": "unpaid", "n": "1"}), body=body)
    assert not matches("kind = 'paid'", rec)
    assert matches("kind = 'unpaid'", rec)
    assert not matches("n > 50", rec)
    assert matches("n = 1", rec)
    absent = record(stored_properties({"TAGS": "a"}), body=b"\x02zone\x01eu\x02")
    assert not matches("zone = 'eu'", absent)
    assert matches("zone IS NULL", absent)


def test_a_missing_property_does_not_hide_the_next_one() -> None:
    """An expression reading two properties, the first (by name) absent from the message:
    the second is still read. Mutant: ``continue`` → ``break`` after a property is not
    found."""
    rec = record(stored_properties({"TAGS": "a", "zone": "eu"}))
    assert matches("amount IS NULL AND zone = 'eu'", rec)


def test_the_last_property_without_a_trailing_separator_is_read_whole() -> None:
    """RocketMQ 4.x brokers store the properties without a separator after the last one: its
    value runs to the end of the record. Mutant: the value cut at ``stop = -1`` (the last
    character dropped)."""
    rec = record(encode_properties({"TAGS": "a", "kind": "paid"}))
    assert matches("kind = 'paid'", rec)


def test_an_unreadable_record_or_value_does_not_match() -> None:
    """A value that does not convert to what the expression compares it with (``n > 3`` on
    ``n = abc``) or a record cut short: no match, as RocketMQ's filter answers false. Mutant:
    the matcher answering True on those errors."""
    assert not matches("n > 3", record(stored_properties({"n": "abc"})))
    whole = bytes(record(stored_properties({"n": "7"})))
    assert not matches("n > 3", memoryview(whole[:60]))


def sql(topic: str, expression: str, version: int, expression_type: str | None = "SQL92") -> SubscriptionData:
    return SubscriptionData(
        topic=topic, sub_string=expression, sub_version=version, expression_type=expression_type
    )


def test_a_tag_subscription_in_a_heartbeat_leaves_the_others_registered() -> None:
    """A consumer subscribing to one topic by tag and another by SQL92: the tag subscription
    has no filter data (and never had), and the SQL92 one after it is compiled. Mutants:
    ``pop(None)`` / ``pop(key)`` without default (KeyError on the heartbeat), ``continue`` →
    ``break``."""
    filters = ConsumerFilters(True)
    filters.register("g", [sql("Tagged", "a || b", 1, "TAG"), sql("Sql", "n > 1", 1)])
    assert filters.get("g", "Tagged") is None
    data = filters.get("g", "Sql")
    assert data is not None and data.expression == "n > 1"


def test_an_older_heartbeat_does_not_lower_the_filter_version() -> None:
    """Consumers of one group heartbeat with their own subscription versions: a heartbeat with
    an older version of the same expression keeps the newer version, or a pull from the newer
    consumer would get FILTER_DATA_NOT_LATEST. Mutants: the known data ignored, the equality
    tests inverted, the expression or its type not kept."""
    filters = ConsumerFilters(True)
    filters.register("g", [sql("Sql", "n > 1", 9)])
    filters.register("g", [sql("Sql", "n > 1", 5)])
    data = filters.get("g", "Sql")
    assert data is not None
    assert (data.expression, data.expression_type, data.version) == ("n > 1", "SQL92", 9)
    filters.register("g", [sql("Sql", "n > 2", 10)])
    data = filters.get("g", "Sql")
    assert data is not None and (data.expression, data.version) == ("n > 2", 10)


def test_an_unchanged_subscription_does_not_stop_the_next_from_registering() -> None:
    """A heartbeat whose first subscription is unchanged and whose second is new: the second
    is compiled. Mutant: ``continue`` → ``break`` for an unchanged subscription."""
    filters = ConsumerFilters(True)
    filters.register("g", [sql("A", "n > 1", 1), sql("B", "n > 1", 1)])
    filters.register("g", [sql("A", "n > 1", 1), sql("B", "n < 0", 2)])
    data = filters.get("g", "B")
    assert data is not None and (data.expression, data.version) == ("n < 0", 2)


def test_a_malformed_expression_is_skipped_and_the_rest_registered() -> None:
    """A malformed expression for a topic the group never had filter data for: the heartbeat
    goes through, that topic has none, and the next subscription is compiled. Mutants:
    ``pop(key)`` without default (KeyError), ``continue`` → ``break``."""
    filters = ConsumerFilters(True)
    filters.register("g", [sql("Bad", "n >", 1), sql("Good", "n > 1", 1)])
    assert filters.get("g", "Bad") is None
    assert filters.get("g", "Good") is not None


@pytest.mark.parametrize(
    ("properties", "value"),
    [
        ("TAGS\x01a\x02kind\x01unpaid\x02kind\x01paid\x02", "paid"),
        ("kind\x01unpaid\x02TAGS\x01a\x02kind\x01paid", "paid"),
        ("kind\x01paid\x02TAGS\x01a\x02kind\x01\x02", "paid"),
        ("TAGS\x01a\x02kind\x01paid\x02kind\x01\x02", "paid"),
    ],
    ids=["later-wins", "first-and-last", "empty-last-skipped", "empty-last-skipped-inside"],
)
def test_a_property_given_twice_counts_with_its_last_value(properties: str, value: str) -> None:
    """A name may occur twice in a stored record (a batch entry's own property and the
    batch's, appended by the broker): Apache's broker decodes the properties into a map
    (MessageDecoder.string2messageProperties), so the last non-empty value is the one its
    SQL92 filter and the consumer see. The matcher read the first one (found through the
    mutant ``find`` → ``rfind``; fixed)."""
    rec = record(properties)
    assert matches(f"kind = '{value}'", rec)
    assert not matches("kind = 'unpaid'", rec)


def test_a_property_given_twice_without_a_value_is_absent() -> None:
    """A name given twice, both times with an empty value: absent, as RocketMQ's decoding
    drops empty values (``kind IS NULL``), and no error. Mutants: the missing name's default
    None (AttributeError out of the store's read) or ``"XXXX"``."""
    rec = record("TAGS\x01a\x02kind\x01\x02kind\x01\x02")
    assert matches("kind IS NULL", rec)
    assert not matches("kind = ''", rec)
