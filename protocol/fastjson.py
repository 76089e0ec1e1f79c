"""JSON the way RocketMQ's Java side writes it (fastjson) and the way its clients read it.

fastjson writes maps with non-string keys *unquoted* (``{0:"10.0.0.1:10911"}``) and, for
object keys, the key object itself (``{{"brokerName":"b","queueId":0,"topic":"T"}:5}``).
:func:`loads` accepts standard JSON plus those forms (bare-number keys become strings, object
keys become their compact JSON text) and a trailing newline; :func:`dumps` writes compact JSON,
optionally with bare integer keys for the old clients that expect them (docs/protocol.md §3.1).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic_core import from_json, to_json

from .errors import ProtocolError

_WHITESPACE = " \t\r\n"
_NUMBER_CHARS = frozenset("0123456789+-.eE")
_MAX_DEPTH = 200


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse JSON, tolerating fastjson's unquoted and object map keys."""
    if isinstance(data, memoryview):
        data = bytes(data)
    try:
        return from_json(data)
    except ValueError as strict_error:
        try:
            text = data.decode() if isinstance(data, (bytes, bytearray)) else data
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"JSON body is not UTF-8: {exc}") from None
        try:
            return _LenientParser(text).parse()
        except ProtocolError:
            raise ProtocolError(f"invalid JSON body: {strict_error}") from None


class _LenientParser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def parse(self) -> Any:
        value = self._value(0)
        self._skip()
        if self.pos != len(self.text):
            self._fail("trailing characters")
        return value

    def _fail(self, what: str) -> None:
        raise ProtocolError(f"{what} at position {self.pos}")

    def _skip(self) -> None:
        text, pos, n = self.text, self.pos, len(self.text)
        while pos < n and text[pos] in _WHITESPACE:
            pos += 1
        self.pos = pos

    def _value(self, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            self._fail("nesting too deep")
        self._skip()
        if self.pos >= len(self.text):
            self._fail("unexpected end")
        c = self.text[self.pos]
        if c == "{":
            return self._object(depth)
        if c == "[":
            return self._array(depth)
        if c == '"':
            return self._string()
        return self._scalar()

    def _object(self, depth: int) -> dict[str, Any]:
        self.pos += 1
        result: dict[str, Any] = {}
        self._skip()
        if self._peek() == "}":
            self.pos += 1
            return result
        while True:
            self._skip()
            c = self._peek()
            if c == '"':
                key = self._string()
            elif c in ("{", "["):
                start = self.pos
                parsed = self._value(depth + 1)
                key = to_json(parsed).decode() if parsed is not None else self.text[start : self.pos]
            else:
                scalar = self._scalar()
                key = "true" if scalar is True else "false" if scalar is False else str(scalar)
            self._skip()
            if self._peek() != ":":
                self._fail("expected ':'")
            self.pos += 1
            result[key] = self._value(depth + 1)
            self._skip()
            c = self._peek()
            self.pos += 1
            if c == "}":
                return result
            if c != ",":
                self._fail("expected ',' or '}'")

    def _array(self, depth: int) -> list[Any]:
        self.pos += 1
        result: list[Any] = []
        self._skip()
        if self._peek() == "]":
            self.pos += 1
            return result
        while True:
            result.append(self._value(depth + 1))
            self._skip()
            c = self._peek()
            self.pos += 1
            if c == "]":
                return result
            if c != ",":
                self._fail("expected ',' or ']'")

    def _peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def _string(self) -> str:
        text = self.text
        start = self.pos
        pos = start + 1
        n = len(text)
        while pos < n:
            c = text[pos]
            if c == "\\":
                pos += 2
                continue
            if c == '"':
                self.pos = pos + 1
                try:
                    value = from_json(text[start : pos + 1])
                except ValueError:
                    self._fail("bad string")
                return value
            pos += 1
        self._fail("unterminated string")
        raise AssertionError  # unreachable

    def _scalar(self) -> Any:
        text = self.text
        for word, value in (("true", True), ("false", False), ("null", None)):
            if text.startswith(word, self.pos):
                self.pos += len(word)
                return value
        start = self.pos
        pos = start
        while pos < len(text) and text[pos] in _NUMBER_CHARS:
            pos += 1
        if pos == start:
            self._fail("unexpected character")
        self.pos = pos
        try:
            return from_json(text[start:pos])
        except ValueError:
            self._fail("bad number")


def dumps(obj: Any, *, legacy_int_keys: bool = False) -> bytes:
    """Compact JSON. With ``legacy_int_keys`` maps keyed by ints keep their keys unquoted."""
    if not legacy_int_keys:
        return to_json(obj)
    parts: list[str] = []
    _write_legacy(obj, parts)
    return "".join(parts).encode()


def _write_legacy(obj: Any, out: list[str]) -> None:
    if isinstance(obj, Mapping):
        out.append("{")
        first = True
        for key, value in obj.items():
            if not first:
                out.append(",")
            first = False
            if isinstance(key, int) and not isinstance(key, bool):
                out.append(str(key))
            else:
                out.append(to_json(str(key)).decode())
            out.append(":")
            _write_legacy(value, out)
        out.append("}")
    elif isinstance(obj, (list, tuple, set, frozenset)):
        out.append("[")
        for i, value in enumerate(obj):
            if i:
                out.append(",")
            _write_legacy(value, out)
        out.append("]")
    else:
        out.append(to_json(obj).decode())
