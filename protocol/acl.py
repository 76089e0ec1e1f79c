"""Request signing for RocketMQ's ACL 1.0: what a client adds to a request and what a broker
recomputes to check it (``docs/protocol.md`` §7.1, §7.2, §7.4).

A signed request carries ``AccessKey`` (and optionally ``SecurityToken``) in its ext fields
and ``Signature`` = Base64(HMAC-SHA1(secretKey, content)), where content is the values of all
ext fields but ``Signature`` in key order (Java's ``TreeMap``: code-unit order, which Python's
``sorted`` matches for these ASCII keys), UTF-8 encoded, followed by the raw body. Values are
signed as the strings the wire carries: decimal integers, ``true``/``false``.

The broker signs whatever ext fields arrived, so the extra fields other clients sign (the C++
client's and ali-ons' ``OnsChannel``) verify without special cases; it skips
``_UNIQUE_KEY_QUERY``, a flag older Java clients added after signing.
"""

from __future__ import annotations

import binascii
import functools
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .command import RemotingCommand
from .speedups import compiled as _compiled

ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
#: The C++ client's and ali-ons' channel field, signed like any other.
ONS_CHANNEL = "OnsChannel"
#: Added by Java clients up to 4.9.3 after signing; brokers leave it out of the content.
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"

_CLIENT_SKIPPED = frozenset({SIGNATURE})
_BROKER_SKIPPED = frozenset({SIGNATURE, UNIQUE_KEY_QUERY})
_SHA1_BLOCK = 64
_c_field_values = _compiled.acl_field_values if _compiled is not None else None


@dataclass(frozen=True, slots=True)
class Credentials:
    """An ACL account's keys as a client holds them (the secret never leaves the client)."""

    access_key: str
    secret_key: str
    security_token: str | None = None

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ValueError("ACL credentials need both an access key and a secret key")

    def __repr__(self) -> str:  # keep the secret out of logs and tracebacks
        return f"Credentials(access_key={self.access_key!r}, secret_key='***')"


def _field_values(fields: Mapping[str, Any], skip: frozenset[str]) -> bytes:
    """The string values of ``fields`` (but ``skip``, and None values) in key order, UTF-8
    encoded: compiled for plain dicts when the extension is active (see .speedups)."""
    if _c_field_values is not None and type(fields) is dict:
        return _c_field_values(fields, skip)
    return pure_field_values(fields, skip)


def pure_field_values(fields: Mapping[str, Any], skip: frozenset[str]) -> bytes:
    """The string values of ``fields`` (but ``skip``, and None values, which the wire leaves
    out) in key order, UTF-8 encoded."""
    parts = []
    for key in sorted(fields):
        value = fields[key]
        if value is None or key in skip:
            continue
        # stringify_fields' conversions, inline: this runs for every signed request.
        parts.append(
            value
            if type(value) is str
            else "true"
            if value is True
            else "false"
            if value is False
            else str(value)
        )
    return "".join(parts).encode("utf-8")


def signing_content(
    fields: Mapping[str, Any], body: bytes | None, *, skip: frozenset[str] = _CLIENT_SKIPPED
) -> bytes:
    """The bytes a signature covers: the string values of ``fields`` (but ``skip``, and None
    values, which the wire leaves out) in key order, then ``body``."""
    content = _field_values(fields, skip)
    return content + body if body else content


def signature(secret_key: str, content: bytes, body: bytes | None = None) -> str:
    """Base64(HMAC-SHA1(secret_key, content + body)), as every RocketMQ 4.x client computes
    it (``body`` apart so that a request's body is hashed where it lies, never copied)."""
    # HMAC by hand from the two pad states hashed once per secret: copying a SHA-1 state is
    # far cheaper than copying (or keying) an hmac.HMAC, which OpenSSL 3 makes costly.
    inner_pad, outer_pad = _pads(secret_key)
    inner = inner_pad.copy()
    inner.update(content)
    if body:
        inner.update(body)
    outer = outer_pad.copy()
    outer.update(inner.digest())
    return binascii.b2a_base64(outer.digest(), newline=False).decode("ascii")


@functools.lru_cache(maxsize=256)
def _pads(secret_key: str) -> tuple[Any, Any]:
    key = secret_key.encode("utf-8")
    if len(key) > _SHA1_BLOCK:
        key = hashlib.sha1(key).digest()
    key = key.ljust(_SHA1_BLOCK, b"\0")
    return (
        hashlib.sha1(bytes(b ^ 0x36 for b in key)),
        hashlib.sha1(bytes(b ^ 0x5C for b in key)),
    )


def sign(cmd: RemotingCommand, credentials: Credentials) -> None:
    """Add ``AccessKey`` (and ``SecurityToken``) and the ``Signature`` over the command's ext
    fields and body, as Java's ``AclClientRPCHook`` does. The signature covers the values as
    the strings the wire carries (decimal integers, ``true``/``false``), which is what a broker
    signs whatever the header encoding; the values themselves keep their types, so a msgpack
    header stays as cheap to read as an unsigned one."""
    fields = dict(cmd.ext_fields)
    fields[ACCESS_KEY] = credentials.access_key
    if credentials.security_token:
        fields[SECURITY_TOKEN] = credentials.security_token
    fields.pop(SIGNATURE, None)
    fields[SIGNATURE] = signature(credentials.secret_key, _field_values(fields, _CLIENT_SKIPPED), cmd.body)
    cmd.ext_fields = fields


def verify(fields: Mapping[str, Any], body: bytes | None, secret_key: str) -> bool:
    """Whether the ``Signature`` in ``fields`` is the one ``secret_key`` gives over the fields
    as received (constant-time comparison)."""
    given = fields.get(SIGNATURE)
    if not isinstance(given, str):
        return False
    expected = signature(secret_key, _field_values(fields, _BROKER_SKIPPED), body)
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("ascii"))
