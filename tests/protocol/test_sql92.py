"""SQL92 filters: what matches, what does not, and what does not compile, case by case.

Each expectation is what Apache RocketMQ's broker decides for the same expression and
properties (its selector parser runs with string conversion on, property values are strings).
"""

from __future__ import annotations

import pytest

from aiorocketmq.protocol.sql92 import Sql92Error, compile_sql92

P = {"a": "5", "b": "abc", "c": "2.5", "t": "true", "TAGS": "TagA", "big": "3000000000", "neg": "-7"}

# (expression, properties, matches)
CASES: list[tuple[str, dict[str, str], bool]] = [
    # equality and inequality, strings and numbers
    ("a = 5", P, True),
    ("a = 6", P, False),
    ("a <> 6", P, True),
    ("a <> 5", P, False),
    ("b = 'abc'", P, True),
    ("b = 'ABC'", P, False),
    ("b <> 'abc'", P, False),
    ("a = '5'", P, True),
    ("a = 5.0", P, True),
    ("c = 2.5", P, True),
    ("c = 2", P, False),  # "2.5" does not parse as an int: the whole expression is false
    ("NOT (c = 2)", P, False),  # ... even under NOT
    ("b = 1", P, False),
    ("b <> 1", P, False),  # an unparsable value is an error, not a mismatch
    ("'abc' = b", P, True),
    # ordering
    ("a > 4", P, True),
    ("a > 5", P, False),
    ("a >= 5", P, True),
    ("a < 10", P, True),
    ("a <= 4", P, False),
    ("neg < 0", P, True),
    ("neg < -6", P, True),
    ("c > 2", P, False),  # int comparison: "2.5" does not parse
    ("c > 2.4", P, True),
    ("c < 2.6", P, True),
    ("big > 5", P, False),  # 3000000000 is no Java int
    ("big > 5L", P, False),  # 5L still fits an int, so RocketMQ makes it one
    ("big > 2999999999", P, True),  # a literal beyond int is a long
    ("a > b", P, False),  # two strings ordered as doubles: "abc" is none
    ("a < c", {"a": "1", "c": "2.5"}, True),
    ("b > 1", P, False),
    # BETWEEN
    ("a BETWEEN 1 AND 5", P, True),
    ("a BETWEEN 6 AND 9", P, False),
    ("a NOT BETWEEN 6 AND 9", P, True),
    ("a NOT BETWEEN 1 AND 9", P, False),
    ("c BETWEEN 2.0 AND 3.0", P, True),
    ("a BETWEEN -1 AND 5", P, True),
    ("missing BETWEEN 1 AND 5", P, False),
    ("missing NOT BETWEEN 1 AND 5", P, False),
    # IN
    ("TAGS IN ('TagA', 'TagB')", P, True),
    ("TAGS IN ('TagB')", P, False),
    ("TAGS NOT IN ('TagB', 'TagC')", P, True),
    ("TAGS NOT IN ('TagA')", P, False),
    ("missing IN ('x')", P, False),
    ("missing NOT IN ('x')", P, False),
    ("a IN ('5', '6', '7', '8', '9')", P, True),
    # IS NULL
    ("missing IS NULL", P, True),
    ("a IS NULL", P, False),
    ("a IS NOT NULL", P, True),
    ("missing IS NOT NULL", P, False),
    # missing properties are unknown
    ("missing = 1", P, False),
    ("missing <> 1", P, False),
    ("NOT (missing = 1)", P, False),
    ("missing > 1", P, False),
    ("missing = 1 OR a = 5", P, True),
    ("missing = 1 OR a = 6", P, False),
    ("missing = 1 AND a = 6", P, False),
    ("NOT (missing = 1 AND a = 6)", P, True),  # unknown AND false is false
    ("NOT (missing = 1 OR a = 5)", P, False),
    ("'x' = missing", P, False),
    # booleans
    ("t = TRUE", P, True),
    ("t = FALSE", P, False),
    ("t = TRUE", {"t": "TRUE"}, True),  # Boolean.valueOf ignores case
    ("t = TRUE", {"t": "yes"}, False),
    ("b = TRUE", P, False),
    ("TRUE", {}, True),
    ("FALSE", P, False),
    ("NULL", P, False),
    ("t", P, False),  # a property alone is never true: its value is a string
    ("NOT t", P, True),
    ("NOT missing", P, False),
    # NOT binds tighter than comparisons
    ("NOT a = 'x'", P, False),
    ("NOT (a = 'x')", P, True),
    # AND / OR / precedence / parentheses
    ("a = 5 AND b = 'abc'", P, True),
    ("a = 5 AND b = 'x'", P, False),
    ("a = 6 OR b = 'abc'", P, True),
    ("a = 6 OR b = 'x' AND a = 5", P, False),
    ("(a = 6 OR b = 'abc') AND a = 5", P, True),
    ("(TAGS IS NOT NULL AND TAGS IN ('TagA', 'TagB')) AND (a IS NOT NULL AND a BETWEEN 0 AND 5)", P, True),
    # literals, case, comments
    ("a = +5", P, True),
    ("neg = -7", P, True),
    ("neg = - -(-7)", P, True),
    ("a = 5L", P, True),
    ("c = .25E1", P, True),
    ("b = 'it''s'", {"b": "it's"}, True),
    ("a = 5 and B = 'x'", {"a": "5", "B": "x"}, True),
    ("a = 5 -- trailing comment\n", P, True),
    ("/* lead */ a = 5", P, True),
    ("a = 5 garbage after", P, True),  # RocketMQ stops at the end of the first expression
    # double quirks
    ("c = 2.50", P, True),
    ("x = 1.0", {"x": " 1 "}, True),  # Double.valueOf trims
    ("x = 1", {"x": " 1 "}, False),  # Integer.valueOf does not
    ("x > 1.0", {"x": "NaN"}, True),  # NaN orders above every number
    ("x > 1.0", {"x": "1e3"}, True),
    ("x = 1.0", {"x": "1d"}, True),
    # 5.x string tests
    ("b CONTAINS 'bc'", P, True),
    ("b NOT CONTAINS 'bc'", P, False),
    ("b STARTSWITH 'ab'", P, True),
    ("b ENDSWITH 'ab'", P, False),
    ("missing CONTAINS 'x'", P, False),
    ("missing NOT CONTAINS 'x'", P, False),
]

MALFORMED = [
    "",
    "   ",
    "a >",
    "a = ",
    "(a = 1",
    "a > 'x'",
    "'x' < a",
    "a > TRUE",
    "(a = 1) > 2",
    "a = NULL",
    "TRUE = 1",
    "1",
    "'abc'",
    "a BETWEEN 5 AND 1",
    "a BETWEEN NULL AND 1",
    "1 IN ('a')",
    "a IN (1, 2)",
    "a IN ()",
    "a > 0.0",  # Java's createFloat refuses anything below Double.MIN_VALUE, zero included
    "a > 1e999",
    "a = 9223372036854775808",
    "a # 1",
    "a.b = 1",
    "a != 1",
    "a = 'unterminated",
    "a IS 5",
    "AND a = 1",
]


@pytest.mark.parametrize(("expression", "properties", "expected"), CASES)
def test_expression_matches(expression: str, properties: dict[str, str], expected: bool) -> None:
    assert compile_sql92(expression)(properties) is expected


def test_there_are_enough_cases() -> None:
    assert len(CASES) >= 60


@pytest.mark.parametrize("expression", MALFORMED)
def test_malformed_expressions_are_refused(expression: str) -> None:
    with pytest.raises(Sql92Error, match="Invalid MessageSelector"):
        compile_sql92(expression)


def test_trailing_text_after_a_complete_expression_is_ignored() -> None:
    assert compile_sql92("a = 1)")({"a": "1"}) is True


def test_errors_say_what_is_wrong() -> None:
    with pytest.raises(Sql92Error, match="cannot be compared"):
        compile_sql92("a > 'x'")
    with pytest.raises(Sql92Error, match="must less than or equal"):
        compile_sql92("a BETWEEN 5 AND 1")
    with pytest.raises(Sql92Error, match=r"column 3"):
        compile_sql92("a # 1")
