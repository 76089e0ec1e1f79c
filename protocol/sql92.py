"""SQL92 message filters: RocketMQ's selector language over message properties.

A consumer may subscribe with an expression such as ``TAGS IN ('a', 'b') AND price > 10``
instead of a tag list; the broker evaluates it against each stored message's properties
(``TAGS`` is just one more property) so that only matching messages travel. Brokers and
clients must agree exactly on what matches, so this module reproduces RocketMQ's grammar and
its three-valued evaluation, quirks included:

* Operators: ``=``, ``<>``, ``>``, ``>=``, ``<``, ``<=``, ``[NOT] BETWEEN .. AND ..``,
  ``[NOT] IN ('..', ..)``, ``IS [NOT] NULL``, ``AND``, ``OR``, ``NOT``, unary ``+``/``-`` and
  the 5.x ``[NOT] CONTAINS | STARTSWITH | ENDSWITH '..'``; literals ``'it''s'``, ``12``,
  ``12L``, ``1.5``, ``.5``, ``5E3``, ``TRUE``, ``FALSE``, ``NULL``; keywords in any case;
  ``--`` and ``/* */`` comments. ``NOT`` binds tighter than comparisons, as in RocketMQ:
  ``NOT a = 'x'`` is ``(NOT a) = 'x'``. Text after a complete expression is ignored, as
  RocketMQ's parser does.
* Property values are strings. Compared with a number they are parsed as the number's type
  (Java int for small literals, long for large or ``L`` ones, double for decimals); compared
  with a boolean they are true when they spell ``true``; ``<``-style comparisons of two
  strings compare them as doubles. A value that does not parse makes the whole expression
  false for that message.
* A missing property is unknown (SQL ``NULL``): comparisons with it are unknown, ``NOT
  unknown`` is unknown, ``unknown AND false`` is false, ``unknown OR true`` is true, and a
  message matches only when the expression is true.
* Refused at compile time, as RocketMQ does: ``<``-style operands that are string or boolean
  literals, ``= NULL``, ``IN`` on a non-property, a decimal literal that is zero or out of
  double range, ``BETWEEN`` literal bounds in the wrong order, a lone literal.

:func:`compile_sql92` returns a :class:`Sql92Filter`, a callable from a property map to bool.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

__all__ = ["EXPRESSION_TYPE_SQL92", "EvaluationError", "Sql92Error", "Sql92Filter", "compile_sql92"]

#: The ``expressionType`` that names this language in subscriptions and pulls.
EXPRESSION_TYPE_SQL92 = "SQL92"


class Sql92Error(ValueError):
    """The expression does not compile; the message says where and why."""


class EvaluationError(Exception):
    """Evaluation failed (a value that does not parse): the message does not match."""


class _I32(int):
    """A Java ``int`` literal; a plain :class:`int` value stands for a Java ``long``."""

    __slots__ = ()


Value = object  # None (unknown), bool, str, _I32, int (long), float
Evaluator = Callable[[Mapping[str, str]], Value]

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+")
_JAVA_DOUBLE = re.compile(
    r"([+-]?)(?:(NaN)|(Infinity)|((?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[fFdD]?)"
)
_DOUBLE_BITS = struct.Struct(">d")
_LONG_BITS = struct.Struct(">q")
_DOUBLE_MIN = 5e-324  # Java's Double.MIN_VALUE: the smallest positive double


# -- Java's number parsing and ordering --------------------------------------------------------


def _parse_integer(text: str, bounds: tuple[int, int]) -> int:
    """``Integer.valueOf`` / ``Long.valueOf``: ASCII digits with an optional sign, in range."""
    if _JAVA_INTEGER.fullmatch(text) is None:
        raise EvaluationError(f"not a number: {text!r}")
    value = int(text)
    if not bounds[0] <= value <= bounds[1]:
        raise EvaluationError(f"out of range: {text!r}")
    return value


def _parse_double(text: str) -> float:
    """``Double.valueOf``: surrounding control characters and spaces trimmed, an optional
    ``f``/``d`` suffix, ``NaN`` and ``Infinity`` spelled as Java spells them."""
    match = _JAVA_DOUBLE.fullmatch(text.strip("".join(map(chr, range(33)))))
    if match is None:
        raise EvaluationError(f"not a number: {text!r}")
    sign, nan, inf, digits = match.groups()
    if nan:
        return math.nan
    value = math.inf if inf else float(digits)
    return -value if sign == "-" else value


def _double_bits(value: float) -> int:
    if value != value:
        return 0x7FF8000000000000  # Java canonicalises every NaN
    bits: int = _LONG_BITS.unpack(_DOUBLE_BITS.pack(value))[0]
    return bits


def _compare_doubles(a: float, b: float) -> int:
    """``Double.compareTo``: NaN above everything and equal to itself, -0.0 below 0.0."""
    if a < b:
        return -1
    if a > b:
        return 1
    ab, bb = _double_bits(a), _double_bits(b)
    return (ab > bb) - (ab < bb)


def _compare(lv: Value, rv: Value) -> int:
    """RocketMQ's comparison of two non-null values, converting strings as it does (the
    string conversion its parser always turns on); -1 for pairs it cannot convert."""
    lc, rc = type(lv), type(rv)
    if lc is not rc:
        if lc is bool:
            if rc is str:
                raise EvaluationError("a boolean cannot be compared with a string")
            return -1
        if lc is _I32:
            if rc is int:
                pass
            elif rc is float:
                lv = float(lv)  # type: ignore[arg-type]
            elif rc is str:
                rv = _parse_integer(rv, _INT32)  # type: ignore[arg-type]
            else:
                return -1
        elif lc is int:
            if rc is _I32:
                pass
            elif rc is float:
                lv = float(lv)  # type: ignore[arg-type]
            elif rc is str:
                rv = _parse_integer(rv, _INT64)  # type: ignore[arg-type]
            else:
                return -1
        elif lc is float:
            if rc is _I32 or rc is int:
                rv = float(rv)  # type: ignore[arg-type]
            elif rc is str:
                rv = _parse_double(rv)  # type: ignore[arg-type]
            else:
                return -1
        elif lc is str:
            if rc is bool:
                lv = lv.lower() == "true"  # type: ignore[attr-defined]
            elif rc is _I32:
                lv = _parse_integer(lv, _INT32)  # type: ignore[arg-type]
            elif rc is int:
                lv = _parse_integer(lv, _INT64)  # type: ignore[arg-type]
            elif rc is float:
                lv = _parse_double(lv)  # type: ignore[arg-type]
            else:
                return -1
        else:
            return -1
    if type(lv) is float or type(rv) is float:
        return _compare_doubles(lv, rv)  # type: ignore[arg-type]
    return (lv > rv) - (lv < rv)  # type: ignore[operator]


def _negate(value: Value) -> Value:
    kind = type(value)
    if kind is _I32:
        wrapped = (-value + 2**31) % 2**32 - 2**31  # type: ignore[operator]
        return _I32(wrapped)
    if kind is int:
        return (-value + 2**63) % 2**64 - 2**63  # type: ignore[operator]
    if kind is float:
        return -value  # type: ignore[operator]
    return None


def _java_text(value: Value) -> str:
    if value is None:
        return "NULL"
    if type(value) is bool:
        return "TRUE" if value else "FALSE"
    if type(value) is str:
        return "'" + value.replace("'", "''") + "'"
    return repr(value) if type(value) is float else str(int(value))  # type: ignore[call-overload]


# -- the syntax tree, compiled to closures ---------------------------------------------------

_CONST, _BOOL_CONST, _PROPERTY, _BOOLEAN, _OTHER = range(5)


@dataclass(slots=True)
class _Node:
    evaluate: Evaluator
    kind: int
    text: str
    value: Value = None  # the literal's value, for _CONST and _BOOL_CONST
    #: When the node is true, the message has one of these (property, value) pairs: a
    #: necessary condition a broker can test on raw bytes before evaluating anything.
    needs: frozenset[tuple[str, str]] | None = None


def _constant(value: Value) -> _Node:
    kind = _BOOL_CONST if value is None or type(value) is bool else _CONST
    return _Node(lambda _p: value, kind, _java_text(value), value)


def _property(name: str) -> _Node:
    return _Node(lambda p: p.get(name), _PROPERTY, name)


def _as_boolean(node: _Node) -> _Node:
    if node.kind in (_BOOLEAN, _BOOL_CONST):
        return node
    if node.kind == _PROPERTY:
        name = node.text
        # A property used as a condition: values are strings, never booleans, so present means false.
        return _Node(lambda p: None if p.get(name) is None else False, _BOOLEAN, name)
    raise Sql92Error(f"Expression will not result in a boolean value: {node.text}")


def _not(node: _Node) -> _Node:
    inner = node.evaluate

    def evaluate(p: Mapping[str, str]) -> Value:
        value = inner(p)
        return None if value is None else not value

    return _Node(evaluate, _BOOLEAN, f"NOT {node.text}")


def _and(left: _Node, right: _Node) -> _Node:
    lf, rf = left.evaluate, right.evaluate

    def evaluate(p: Mapping[str, str]) -> Value:
        lv = lf(p)
        if lv is False:
            return False
        rv = rf(p)
        if rv is False:
            return False
        return None if lv is None or rv is None else True

    needs = (
        left.needs
        if right.needs is None or (left.needs is not None and len(left.needs) <= len(right.needs))
        else right.needs
    )
    return _Node(evaluate, _BOOLEAN, f"({left.text} AND {right.text})", needs=needs)


def _or(left: _Node, right: _Node) -> _Node:
    lf, rf = left.evaluate, right.evaluate

    def evaluate(p: Mapping[str, str]) -> Value:
        lv = lf(p)
        if lv is True:
            return True
        rv = rf(p)
        if rv is True:
            return True
        return None if lv is None or rv is None else False

    needs = left.needs | right.needs if left.needs is not None and right.needs is not None else None
    return _Node(evaluate, _BOOLEAN, f"({left.text} OR {right.text})", needs=needs)


def _is_null(node: _Node) -> _Node:
    inner = node.evaluate
    return _Node(lambda p: inner(p) is None, _BOOLEAN, f"{node.text} IS NULL")


def _check_equal_operand(node: _Node) -> None:
    if node.kind in (_CONST, _BOOL_CONST) and node.value is None:
        raise Sql92Error(f"'{node.text}' cannot be compared.")


def _equal(left: _Node, right: _Node) -> _Node:
    _check_equal_operand(left)
    _check_equal_operand(right)
    if left.kind == _BOOL_CONST and right.kind == _CONST:
        raise Sql92Error(f"'{left.text}' cannot be compared with '{right.text}'")
    if left.kind == _PROPERTY and right.kind == _CONST and type(right.value) is str:
        return _property_equals(left.text, right.value, f"{left.text} = {right.text}")
    if right.kind == _PROPERTY and left.kind == _CONST and type(left.value) is str:
        name, constant = right.text, left.value

        def constant_first(p: Mapping[str, str]) -> Value:
            value = p.get(name)
            return False if value is None else value == constant

        return _Node(
            constant_first, _BOOLEAN, f"{left.text} = {right.text}", needs=frozenset({(name, constant)})
        )
    lf, rf = left.evaluate, right.evaluate

    def evaluate(p: Mapping[str, str]) -> Value:
        lv = lf(p)
        rv = rf(p)
        if lv is None:
            return None if rv is not None else True
        if rv is None:
            return False
        if type(lv) is type(rv) and lv == rv and type(lv) is not float:
            return True
        return _compare(lv, rv) == 0

    return _Node(evaluate, _BOOLEAN, f"{left.text} = {right.text}")


def _property_equals(name: str, constant: str, text: str) -> _Node:
    """``property = 'literal'``, the most common test, without the general comparison."""

    def evaluate(p: Mapping[str, str]) -> Value:
        value = p.get(name)
        return None if value is None else value == constant

    return _Node(evaluate, _BOOLEAN, text, needs=frozenset({(name, constant)}))


def _check_ordering_operand(node: _Node) -> None:
    if node.kind == _CONST and type(node.value) in (_I32, int, float):
        return
    if node.kind in (_CONST, _BOOL_CONST, _BOOLEAN):
        raise Sql92Error(f"Value '{node.text}' cannot be compared.")


_ORDERINGS: dict[str, Callable[[int], bool]] = {
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
}


def _to_int32(text: str) -> int:
    if text.isascii() and text.isdigit() and len(text) < 10:
        return int(text)  # the common case, without the general parser
    return _parse_integer(text, _INT32)


def _to_int64(text: str) -> int:
    if text.isascii() and text.isdigit() and len(text) < 19:
        return int(text)
    return _parse_integer(text, _INT64)


def _property_ordering(op: str, name: str, constant: Value, text: str) -> _Node:
    """``property < number``, the common ordering, with the string parsed as the number's
    type exactly as the general comparison would."""
    kind = type(constant)
    parse: Callable[[str], int | float] = (
        _to_int32 if kind is _I32 else _to_int64 if kind is int else _parse_double
    )
    accept = _ORDERINGS[op]
    if kind is float:

        def evaluate(p: Mapping[str, str]) -> Value:
            value = p.get(name)
            if value is None:
                return None
            return accept(_compare_doubles(parse(value), constant))  # type: ignore[arg-type]

    else:

        def evaluate(p: Mapping[str, str]) -> Value:
            value = p.get(name)
            if value is None:
                return None
            number = parse(value)
            return accept((number > constant) - (number < constant))  # type: ignore[operator]

    return _Node(evaluate, _BOOLEAN, text)


def _ordering(op: str, left: _Node, right: _Node) -> _Node:
    _check_ordering_operand(left)
    _check_ordering_operand(right)
    if left.kind == _PROPERTY and right.kind == _CONST:
        return _property_ordering(op, left.text, right.value, f"{left.text} {op} {right.text}")
    lf, rf = left.evaluate, right.evaluate
    accept = _ORDERINGS[op]

    def evaluate(p: Mapping[str, str]) -> Value:
        lv = lf(p)
        if lv is None:
            return None
        rv = rf(p)
        if rv is None:
            return None
        if type(lv) is str and type(rv) is str:
            # Two strings are ordered as doubles, or not at all.
            return accept(_compare_doubles(_parse_double(lv), _parse_double(rv)))
        return accept(_compare(lv, rv))

    return _Node(evaluate, _BOOLEAN, f"{left.text} {op} {right.text}")


def _between(value: _Node, low: _Node, high: _Node) -> _Node:
    if low.kind in (_CONST, _BOOL_CONST) and high.kind in (_CONST, _BOOL_CONST):
        if low.value is None or high.value is None:
            raise Sql92Error("Illegal values of between, values can not be null!")
        try:
            order = _compare(high.value, low.value)
        except EvaluationError as exc:
            raise Sql92Error(str(exc)) from None
        if order < 0:
            raise Sql92Error(
                f"Illegal values of between, left value({low.text}) must less than or equal "
                f"to right value({high.text})"
            )
    return _and(_ordering(">=", value, low), _ordering("<=", value, high))


def _in(node: _Node, values: list[str], negated: bool) -> _Node:
    if node.kind != _PROPERTY:
        raise Sql92Error(f"Expected a property for In expression, got: {node.text}")
    name = node.text
    members = frozenset(values)

    def evaluate(p: Mapping[str, str]) -> Value:
        value = p.get(name)
        if value is None:
            return None
        return (value in members) is not negated

    word = "NOT IN" if negated else "IN"
    needs = None if negated else frozenset((name, v) for v in values)
    return _Node(evaluate, _BOOLEAN, f"{name} {word} ({', '.join(map(_java_text, values))})", needs=needs)


_STRING_TESTS: dict[str, Callable[[str, str], bool]] = {
    "CONTAINS": lambda value, search: search in value,
    "STARTSWITH": str.startswith,
    "ENDSWITH": str.endswith,
}


def _string_test(word: str, node: _Node, search: str, negated: bool) -> _Node:
    inner = node.evaluate
    test = _STRING_TESTS[word]

    def evaluate(p: Mapping[str, str]) -> Value:
        if not search:
            return False
        value = inner(p)
        if type(value) is not str:
            return False  # unknown or not a string: false, not unknown (RocketMQ 5.x)
        return test(value, search) is not negated

    return _Node(evaluate, _BOOLEAN, f"{node.text} {'NOT ' if negated else ''}{word} {_java_text(search)}")


def _negation(node: _Node) -> _Node:
    inner = node.evaluate
    return _Node(lambda p: _negate(inner(p)), _OTHER, f"-{node.text}")


# -- tokens -----------------------------------------------------------------------------------

_KEYWORDS = frozenset(
    {"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS", "CONTAINS", "STARTSWITH", "ENDSWITH"}
)
_TOKEN = re.compile(
    r"""
    (?P<space>[ \t\n\r\f]+)
  | (?P<comment>--[^\n\r]*(?:\r\n|\n|\r)|/\*[^*]*\*+(?:[^*/][^*]*\*+)*/)
  | (?P<float>[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)
  | (?P<decimal>0|[1-9][0-9]*[lL]?)
  | (?P<string>'(?:''|[^'])*')
  | (?P<id>[a-zA-Z_$][a-zA-Z0-9_$]*)
  | (?P<op><>|>=|<=|[=><(),+-])
    """,
    re.VERBOSE,
)


@dataclass(slots=True, frozen=True)
class _Token:
    kind: str  # "float", "decimal", "string", "id", "op", a keyword, or "end"
    text: str
    pos: int


def _tokens(text: str) -> Iterator[_Token]:
    """Tokens on demand: like RocketMQ's parser, only what parsing reaches is ever read."""
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise Sql92Error(f'Lexical error at column {pos + 1}: encountered "{text[pos]}"')
        kind = match.lastgroup
        assert kind is not None
        pos = match.end()
        if kind in ("space", "comment"):
            continue
        word = match.group()
        if kind == "id" and word.upper() in _KEYWORDS:
            kind = word.upper()
        yield _Token(kind, word, match.start() + 1)
    while True:
        # RocketMQ's parser puts the end at the last character's column, not one past it.
        yield _Token("end", "<EOF>", len(text))


class _Parser:
    """Recursive descent over RocketMQ's grammar: or > and > equality > comparison > unary."""

    def __init__(self, text: str) -> None:
        self._stream = _tokens(text)
        self._ahead: list[_Token] = []
        #: The property names the expression reads.
        self.names: set[str] = set()

    def _peek(self, n: int = 0) -> _Token:
        while len(self._ahead) <= n:
            self._ahead.append(next(self._stream))
        return self._ahead[n]

    def _next(self) -> _Token:
        token = self._peek()
        self._ahead.pop(0)
        return token

    def _at(self, *words: str, n: int = 0) -> bool:
        token = self._peek(n)
        return token.kind in words or (token.kind == "op" and token.text in words)

    def _expect(self, word: str) -> _Token:
        if not self._at(word):
            self._fail()
        return self._next()

    def _fail(self) -> None:
        token = self._peek()
        raise Sql92Error(f'Encountered "{token.text}" at column {token.pos}')

    def selector(self) -> _Node:
        return _as_boolean(self._or())

    def _or(self) -> _Node:
        left = self._and()
        while self._at("OR"):
            self._next()
            left = _or(_as_boolean(left), _as_boolean(self._and()))
        return left

    def _and(self) -> _Node:
        left = self._equality()
        while self._at("AND"):
            self._next()
            left = _and(_as_boolean(left), _as_boolean(self._equality()))
        return left

    def _equality(self) -> _Node:
        left = self._comparison()
        while True:
            if self._at("="):
                self._next()
                left = _equal(left, self._comparison())
            elif self._at("<>"):
                self._next()
                left = _not(_equal(left, self._comparison()))
            elif self._at("IS") and self._at("NULL", n=1):
                self._next()
                self._next()
                left = _is_null(left)
            elif self._at("IS"):
                self._next()
                self._expect("NOT")
                self._expect("NULL")
                left = _not(_is_null(left))
            else:
                return left

    def _comparison(self) -> _Node:
        left = self._unary()
        while True:
            token = self._peek()
            if token.kind == "op" and token.text in _ORDERINGS:
                self._next()
                left = _ordering(token.text, left, self._unary())
            elif token.kind == "BETWEEN":
                self._next()
                left = self._between_bounds(left, negated=False)
            elif token.kind == "IN":
                self._next()
                left = _in(left, self._string_list(), negated=False)
            elif token.kind in _STRING_TESTS:
                self._next()
                left = _string_test(token.kind, left, self._string(), negated=False)
            elif token.kind == "NOT" and self._at("BETWEEN", "IN", *_STRING_TESTS, n=1):
                self._next()
                word = self._next().kind
                if word == "BETWEEN":
                    left = self._between_bounds(left, negated=True)
                elif word == "IN":
                    left = _in(left, self._string_list(), negated=True)
                else:
                    left = _string_test(word, left, self._string(), negated=True)
            else:
                return left

    def _between_bounds(self, value: _Node, *, negated: bool) -> _Node:
        low = self._unary()
        self._expect("AND")
        high = self._unary()
        if negated:
            return _or(_ordering("<", value, low), _ordering(">", value, high))
        return _between(value, low, high)

    def _string_list(self) -> list[str]:
        self._expect("(")
        values = [self._string()]
        while self._at(","):
            self._next()
            values.append(self._string())
        self._expect(")")
        return values

    def _string(self) -> str:
        token = self._peek()
        if token.kind != "string":
            self._fail()
        self._next()
        return token.text[1:-1].replace("''", "'")

    def _unary(self) -> _Node:
        if self._at("+"):
            self._next()
            return self._unary()
        if self._at("-"):
            self._next()
            return _negation(self._unary())
        if self._at("NOT"):
            self._next()
            return _not(_as_boolean(self._unary()))
        return self._primary()

    def _primary(self) -> _Node:
        token = self._peek()
        kind = token.kind
        if kind == "op" and token.text == "(":
            self._next()
            node = self._or()
            self._expect(")")
            return node
        if kind == "id":
            self._next()
            self.names.add(token.text)
            return _property(token.text)
        if kind == "string":
            return _constant(self._string())
        if kind == "decimal":
            self._next()
            return _constant(_decimal(token.text))
        if kind == "float":
            self._next()
            return _constant(_float(token.text))
        if kind in ("TRUE", "FALSE", "NULL"):
            self._next()
            return _constant({"TRUE": True, "FALSE": False, "NULL": None}[kind])
        self._fail()
        raise AssertionError("unreachable")


def _decimal(text: str) -> Value:
    value = int(text.rstrip("lL"))
    if value > _INT64[1]:
        raise Sql92Error(f'For input string: "{text.rstrip("lL")}"')
    return _I32(value) if value <= _INT32[1] else value


def _float(text: str) -> float:
    value = float(text)
    if value > 1.7976931348623157e308:
        raise Sql92Error(f"{text} is greater than 1.7976931348623157E308")
    if value < _DOUBLE_MIN:
        raise Sql92Error(f"{text} is less than 4.9E-324")
    return value


class Sql92Filter:
    """A compiled expression: ``filter(properties)`` is True when the message matches."""

    __slots__ = ("expression", "properties", "evaluate", "needs")

    def __init__(
        self,
        expression: str,
        evaluate: Evaluator,
        properties: frozenset[str],
        needs: frozenset[tuple[str, str]] | None = None,
    ) -> None:
        self.expression = expression
        #: (property, value) pairs one of which every matching message has (None: no such set).
        self.needs = needs
        #: The property names the expression reads (a message's other properties do not matter).
        self.properties = properties
        #: The raw evaluation: True, False or None (unknown); raises :class:`EvaluationError`
        #: when a value does not convert (the message then does not match).
        self.evaluate = evaluate

    def __call__(self, properties: Mapping[str, str]) -> bool:
        try:
            return self.evaluate(properties) is True
        except EvaluationError:
            return False

    def __repr__(self) -> str:
        return f"Sql92Filter({self.expression!r})"


def compile_sql92(expression: str) -> Sql92Filter:
    """Compile ``expression``; raises :class:`Sql92Error` saying why it is not valid."""
    if expression is None or not expression.strip():
        raise Sql92Error("Invalid MessageSelector. the expression is empty")
    parser = _Parser(expression)
    try:
        node = parser.selector()
    except Sql92Error as exc:
        raise Sql92Error(f"Invalid MessageSelector. {exc}") from None
    return Sql92Filter(expression, node.evaluate, frozenset(parser.names), node.needs)
