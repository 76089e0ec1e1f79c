"""SQL92 filters: the cases mutation testing found untested (tests written for surviving mutants
of protocol/sql92.py). Every match/no-match below and every refusal was also run through Apache
RocketMQ 5.3.3's own filter (``FilterFactory`` compile, ``MessageEvaluationContext`` evaluation,
tests/interop/sql92/Sql92Oracle.java) and Apache decides the same; the reasons quoted in full are
Apache's words too, except where a test says ours differ."""

from __future__ import annotations

import pytest

from aiorocketmq.protocol.sql92 import Sql92Error, Sql92Filter, compile_sql92

# (expression, properties, matches), each decided the same by Apache's filter.
CASES: list[tuple[str, dict[str, str], bool]] = [
    # a property compared with an int literal parses as a Java int: the int's own bounds are in
    ("x < -5", {"x": "-2147483648"}, True),
    ("x > 5", {"x": "2147483647"}, True),
    # ... with a long literal, as a Java long: Long.valueOf takes a sign, no spaces, 19 digits at most
    ("x < 3000000000", {"x": "-5"}, True),
    ("x < 3000000000", {"x": " 5"}, False),
    ("x > 3000000000", {"x": "abc"}, False),
    ("x > 3000000000", {"x": "9999999999999999999"}, False),
    ("x > 3000000000", {"x": "3000000001.5"}, False),  # a long is not parsed as a double
    ("big > 2147483647", {"big": "3000000000"}, False),  # 2147483647 is still an int literal
    # ... with a double literal, as Double.valueOf: it trims control characters, nothing else
    ("x = 1.5", {"x": "\x031.5\x03"}, True),
    ("x = 1.5", {"x": "\xa01.5"}, False),
    ("x = 1.5", {"x": "X1.5"}, False),
    ("x = 1.5", {"x": "!1.5"}, False),
    ("x > 1.5", {"x": "Infinity"}, True),
    ("x < 0.5", {"x": "-2.5"}, True),
    ("x < 0.5", {"x": "-Infinity"}, True),
    ("1.5 < a", {"a": "1_5"}, False),
    ("1.5 < a", {"a": "inf"}, False),
    # two strings ordered as doubles, with Double.compareTo's order: -0.0 < 0.0, NaN above all
    ("x < y", {"x": "-0.0", "y": "0"}, True),
    ("x < y", {"x": "1", "y": "NaN"}, True),
    ("a < c", {"a": "10", "c": "9"}, False),  # as numbers, not as text
    # the literal first, or literals on both sides
    ("5 = a", {"a": "5"}, True),
    ("5 < a", {"a": "6"}, True),
    ("1.5 = a", {"a": "1.5"}, True),
    ("3000000000 = a", {"a": "3000000000"}, True),
    ("3000000000 < a", {"a": "3000000001"}, True),
    ("'x' = 'x'", {}, True),
    ("1 < 2", {}, True),
    ("1 < 1.5", {}, True),
    ("5.5 < 5", {}, False),
    ("3000000000 > 5", {}, True),
    ("3000000000 > 1.5", {}, True),
    ("3000000000.5 < 3000000000", {}, False),
    ("big = 3000000000", {"big": "3000000000"}, True),
    # a boolean compared with something that is no boolean: unequal, or an error with a string
    ("5 <> TRUE", {}, True),
    ("(a = 5) = 1", {"a": "5"}, False),
    ("(a = 5) <> 1", {"a": "5"}, True),
    ("TRUE <> t", {"t": "x"}, False),  # Boolean against String: an exception, no match
    # negative numbers: Java negation of longs and doubles
    ("neg = -3000000000", {"neg": "-3000000000"}, True),
    ("c = -2.5", {"c": "-2.5"}, True),
    ("-a IS NULL", {"a": "5"}, True),  # a string negated is unknown
    # unknown (a missing property) in AND, OR, NOT and =
    ("missing = 1 AND a = 5", {"a": "5"}, False),
    ("NOT (missing = 1 AND a = 5)", {"a": "5"}, False),
    ("NOT (a = 6 OR b = 'x')", {"a": "5", "b": "y"}, True),
    ("NOT (missing = 1 OR a = 6)", {"a": "5"}, False),
    ("TAGS = 'TagA' OR a > 1", {"TAGS": "TagB", "a": "5"}, True),
    ("a = b", {"a": "x", "b": "x"}, True),
    ("a = b", {"a": "x", "b": "y"}, False),
    ("missing = nothere", {}, True),  # null = null is TRUE in RocketMQ's equality
    ("a = missing", {"a": "x"}, False),
    ("NOT (a = missing)", {"a": "x"}, True),  # a value = null is FALSE, not unknown
    ("NOT ('x' = missing)", {}, True),
    ("NOT (missing = 'x')", {}, False),  # ... but null = a value is unknown
    # BETWEEN with equal bounds
    ("a BETWEEN 5 AND 5", {"a": "5"}, True),
    # 5.x string tests: an empty search never matches, not even negated
    ("b CONTAINS ''", {"b": "abc"}, False),
    ("b NOT CONTAINS ''", {"b": "abc"}, False),
    ("b NOT CONTAINS 'zz'", {"b": "abc"}, True),
    ("b NOT STARTSWITH 'zz'", {"b": "abc"}, True),
    ("b NOT ENDSWITH 'bc'", {"b": "abc"}, False),
    # literals: l suffix, long and double limits; text after a complete expression is ignored
    ("a = 5l", {"a": "5"}, True),
    ("a = 9223372036854775807", {"a": "9223372036854775807"}, True),
    ("a < 1.7976931348623157E308", {"a": "5"}, True),
    ("a > 4.9E-324", {"a": "5"}, True),
    ("a = 5 x IN ('y')", {"a": "5"}, True),
]

# (expression, the reason after "Invalid MessageSelector. "), Apache's words unless commented.
REASONS: list[tuple[str, str]] = [
    ("a BETWEEN NULL AND 1", "Illegal values of between, values can not be null!"),
    ("a BETWEEN 1 AND NULL", "Illegal values of between, values can not be null!"),
    (
        "a BETWEEN 5 AND 1",
        "Illegal values of between, left value(5) must less than or equal to right value(1)",
    ),
    (
        "a BETWEEN 2.5 AND 1.5",
        "Illegal values of between, left value(2.5) must less than or equal to right value(1.5)",
    ),
    # a boolean bound is below any number (Apache prints the boolean as "true")
    (
        "a BETWEEN 5 AND TRUE",
        "Illegal values of between, left value(5) must less than or equal to right value(TRUE)",
    ),
    (
        "a BETWEEN TRUE AND 5",
        "Illegal values of between, left value(TRUE) must less than or equal to right value(5)",
    ),
    (
        "a BETWEEN TRUE AND 3000000000",
        "Illegal values of between, left value(TRUE) must less than or equal to right value(3000000000)",
    ),
    (
        "a BETWEEN TRUE AND 1.5",
        "Illegal values of between, left value(TRUE) must less than or equal to right value(1.5)",
    ),
    # bounds that do not convert (Apache: the NumberFormatException / ClassCastException's text)
    ("a BETWEEN 'x' AND 5", "not a number: 'x'"),
    ("a BETWEEN 'x' AND 3000000000", "not a number: 'x'"),
    ("a BETWEEN 'x' AND 1.5", "not a number: 'x'"),
    ("a BETWEEN '3000000000' AND 5", "out of range: '3000000000'"),
    ("a BETWEEN 'x' AND TRUE", "a boolean cannot be compared with a string"),
    ("a BETWEEN 'x' AND 'x'", "Value ''x'' cannot be compared."),  # equal bounds pass the order check
    ("a = NULL", "'NULL' cannot be compared."),
    ("a > TRUE", "Value 'TRUE' cannot be compared."),
    ("a > FALSE", "Value 'FALSE' cannot be compared."),
    ("a > 'it''s'", "Value ''it''s'' cannot be compared."),
    ("TRUE = 1", "'TRUE' cannot be compared with '1'"),
    ("FALSE = 'x'", "'FALSE' cannot be compared with ''x''"),
    ("5", "Expression will not result in a boolean value: 5"),
    ("1 IN ('a')", "Expected a property for In expression, got: 1"),
    ("a = 9223372036854775808L", 'For input string: "9223372036854775808"'),
    ("a = 9223372036854775808l", 'For input string: "9223372036854775808"'),
    ("a > 1e999", "1e999 is greater than 1.7976931348623157E308"),
    ("a > 0.0", "0.0 is less than 4.9E-324"),
    ("", "the expression is empty"),
    ("  ", "the expression is empty"),
    # Apache adds 'at line 1, column N. Was expecting one of: ...' and the token's kind
    ("a = = 1", 'Encountered "=" at column 5'),
    ("a = , 1", 'Encountered "," at column 5'),
    ("a =", 'Encountered "<EOF>" at column 3'),
    ("a = /* x */", 'Encountered "<EOF>" at column 11'),
    # A sub-expression used where a value or a property is needed: the reason quotes it in the
    # selector's own syntax (Apache in its Java rendering: "(a == 1)", "(NOT a)", "(t || u)").
    ("-a", "Expression will not result in a boolean value: -a"),
    ("-a IN ('x')", "Expected a property for In expression, got: -a"),
    ("(a = 1) IN ('x')", "Expected a property for In expression, got: a = 1"),
    ("NOT a > 1", "Value 'NOT a' cannot be compared."),
    ("(t OR u) > 1", "Value '(t OR u)' cannot be compared."),
    ("(t AND u) > 1", "Value '(t AND u)' cannot be compared."),
    ("(a IS NULL) > 1", "Value 'a IS NULL' cannot be compared."),
    ("(a IS NOT NULL) > 1", "Value 'NOT a IS NULL' cannot be compared."),
    ("(a = 'x') > 1", "Value 'a = 'x'' cannot be compared."),
    ("('x' = a) > 1", "Value ''x' = a' cannot be compared."),
    ("(a = 1) > 1", "Value 'a = 1' cannot be compared."),
    ("(a > 1) > 1", "Value 'a > 1' cannot be compared."),
    ("(1 < a) > 1", "Value '1 < a' cannot be compared."),
    ("(a IN ('x', 'y')) > 1", "Value 'a IN ('x', 'y')' cannot be compared."),
    ("(a NOT IN ('x')) > 1", "Value 'a NOT IN ('x')' cannot be compared."),
    ("(b CONTAINS 'x') > 1", "Value 'b CONTAINS 'x'' cannot be compared."),
    ("(b NOT CONTAINS 'x') > 1", "Value 'b NOT CONTAINS 'x'' cannot be compared."),
]


def _case_id(expression: str, properties: dict[str, str]) -> str:
    shown = " ".join(f"{k}={v}" for k, v in properties.items())
    return f"{expression} on {shown or 'no properties'}".translate({0x03: "<03>", 0xA0: "<a0>"})


@pytest.mark.parametrize(
    ("expression", "properties", "expected"), CASES, ids=[_case_id(e, p) for e, p, _ in CASES]
)
def test_expression_matches_as_apaches_filter_decides(
    expression: str, properties: dict[str, str], expected: bool
) -> None:
    """Wrong conversions, bounds, unknown-value logic, operand order (mutants of _compare,
    _parse_integer/_parse_double, _negate, _equal, _and/_or, _to_int64, _decimal, _float)."""
    assert compile_sql92(expression)(properties) is expected


@pytest.mark.parametrize(
    ("expression", "reason"), REASONS, ids=[e if e.strip() else repr(e) for e, _ in REASONS]
)
def test_a_refused_expression_says_why(expression: str, reason: str) -> None:
    """The reason a consumer's start-up check shows (CHECK_CLIENT_CONFIG's remark): lost,
    garbled or quoting the wrong operand (mutants of the messages and of the nodes' texts)."""
    with pytest.raises(Sql92Error) as refused:
        compile_sql92(expression)
    assert str(refused.value) == f"Invalid MessageSelector. {reason}"


def test_a_filter_keeps_its_expression_and_the_properties_it_reads() -> None:
    """The broker's store-side matcher looks up only ``properties`` in each record's bytes
    (broker/filters.py): a name lost there makes matching messages miss."""
    compiled = compile_sql92("TAGS = 'a' AND (n > 5 OR -m IS NULL) AND s CONTAINS 'x'")
    assert compiled.expression == "TAGS = 'a' AND (n > 5 OR -m IS NULL) AND s CONTAINS 'x'"
    assert repr(compiled) == "Sql92Filter(\"TAGS = 'a' AND (n > 5 OR -m IS NULL) AND s CONTAINS 'x'\")"
    assert compiled.properties == frozenset({"TAGS", "n", "m", "s"})


def _needs(expression: str) -> frozenset[tuple[str, str]] | None:
    return compile_sql92(expression).needs


NEEDLES: list[tuple[str, set[tuple[str, str]] | None]] = [
    ("TAGS = 'a'", {("TAGS", "a")}),
    ("'a' = TAGS", {("TAGS", "a")}),
    ("TAGS IN ('a', 'b')", {("TAGS", "a"), ("TAGS", "b")}),
    ("TAGS = 'a' OR TAGS = 'b'", {("TAGS", "a"), ("TAGS", "b")}),
    ("TAGS = 'a' OR k IN ('x')", {("TAGS", "a"), ("k", "x")}),
    ("TAGS = 'a' AND n > 5", {("TAGS", "a")}),
    ("n > 5 AND TAGS = 'a'", {("TAGS", "a")}),
    ("TAGS IN ('a', 'b') AND k = 'x'", {("k", "x")}),  # the fewer needles, the fewer hits
    ("k = 'x' AND TAGS IN ('a', 'b')", {("k", "x")}),
    ("TAGS = 'a' OR n > 5", None),  # n > 5 alone may match: no needle
    ("n > 5 OR TAGS = 'a'", None),
    ("TAGS NOT IN ('a')", None),
    ("TAGS = 5", None),  # '5' and '05' both equal 5: no exact bytes to look for
]


@pytest.mark.parametrize(("expression", "needs"), NEEDLES, ids=[e for e, _ in NEEDLES])
def test_the_store_gets_needles_every_match_contains(
    expression: str, needs: set[tuple[str, str]] | None
) -> None:
    """``needs`` are the (property, value) byte strings the store searches the commit log for
    before decoding a record (broker/store/store.py): one that a matching message may lack
    loses messages; none where the expression has them makes every SQL92 pull decode every
    record (mutants of the needs of _and, _or, _in, _equal, _property_equals, Sql92Filter)."""
    assert _needs(expression) == (None if needs is None else frozenset(needs))


MATCHING: list[tuple[str, dict[str, str]]] = [
    ("TAGS = 'a' OR TAGS = 'b'", {"TAGS": "b"}),
    ("TAGS = 'a' OR k IN ('x')", {"k": "x"}),
    ("n > 5 AND TAGS IN ('a', 'b')", {"n": "6", "TAGS": "b"}),
]


@pytest.mark.parametrize(("expression", "properties"), MATCHING, ids=[e for e, _ in MATCHING])
def test_every_matching_message_has_one_of_the_needles(expression: str, properties: dict[str, str]) -> None:
    """The soundness of ``needs`` on messages that match (an intersection instead of a union
    would leave none to find)."""
    compiled: Sql92Filter = compile_sql92(expression)
    assert compiled(properties)
    assert compiled.needs is not None
    assert any(properties.get(name) == value for name, value in compiled.needs)
