"""Signed 5.x requests under the broker's ACL.

ACL 2.0 (:func:`authorize_v2`): the engine of ``broker.auth`` reads the same headers and the
request message, as Apache's proxy does; every refusal, of authentication or authorization, is
UNAUTHORIZED with Apache's message.

ACL 1.0: the ``authorization`` header
(``MQv2-HMAC-SHA1 Credential=<ak>, SignedHeaders=x-mq-date-time, Signature=<hex>``) is an
HMAC-SHA1 of the ``x-mq-date-time`` header under the account's secret key; the account's
resource permissions then decide, as for remoting requests (``plain_acl.yml``).

Clients write the signature in lower or upper case hex; it is compared as bytes, in constant
time. There is no clock-skew check (the proxy has none: the telemetry stream is signed once
and lives for hours).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from aiorocketmq.broker.acl import AccessValidator, Perm, perm_name, remote_ip
from aiorocketmq.broker.auth.store import AuthError

if TYPE_CHECKING:
    from aiorocketmq.broker.auth import AuthEngine

AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"
ALGORITHM = "MQv2-HMAC-SHA1"


class Unauthorized(Exception):
    """The request's credentials are missing or wrong (UNAUTHORIZED)."""


class Forbidden(Exception):
    """The account may not do this (FORBIDDEN)."""


def parse_authorization(value: str) -> dict[str, str]:
    """``{"Credential": ..., "SignedHeaders": ..., "Signature": ...}`` from the header."""
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise Unauthorized(f"unsupported authorization algorithm {algorithm!r}")
    parts: dict[str, str] = {}
    for item in rest.split(","):
        key, sep, val = item.strip().partition("=")
        if sep:
            parts[key.strip()] = val.strip()
    return parts


def sign(secret_key: str, date_time: str) -> str:
    """The hex signature a client sends for ``date_time`` (lower case)."""
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def authorize(
    access: AccessValidator,
    metadata: Mapping[str, str],
    peer_ip: str,
    needed: Mapping[str, Perm],
) -> None:
    """Return when the request may proceed; raise :class:`Unauthorized` or :class:`Forbidden`.

    ``needed`` maps resources (topics, ``%RETRY%group`` for groups) to the permission the
    request needs, as the remoting checks name them."""
    config = access.config
    ip = remote_ip(peer_ip)
    if config.global_white and config.white_listed(ip):
        return
    header = metadata.get(AUTHORIZATION)
    if not header:
        raise Unauthorized("no authorization header (ACL is on)")
    parts = parse_authorization(header)
    access_key = parts.get("Credential", "").split("/", 1)[0]
    account = config.accounts.get(access_key)
    if account is None:
        raise Unauthorized(f"no account for accessKey {access_key!r}")
    if not account.white_listed(ip):
        try:
            given = bytes.fromhex(parts.get("Signature", ""))
        except ValueError:
            raise Unauthorized("the signature is not hexadecimal") from None
        expected = bytes.fromhex(sign(account.secret_key, metadata.get(DATE_TIME, "")))
        if not given or not hmac.compare_digest(given, expected):
            raise Unauthorized(f"signature check failed for accessKey {access_key!r}")
    if account.admin and not account.resource_perms:
        return
    refused = account.refused(needed)
    if refused is not None:
        kind, name, owned, perm = refused
        raise Forbidden(
            f"no permission for {kind}={name}: accessKey={access_key} holds {perm_name(owned)}, "
            f"needs {perm_name(perm)}"
        )


def authorize_v2(engine: AuthEngine, metadata: Mapping[str, str], peer_ip: str, request: Any) -> None:
    """ACL 2.0's check of a 5.x request; raises :class:`Unauthorized` when refused."""
    try:
        engine.check_grpc(metadata, peer_ip, request)
    except AuthError as exc:
        raise Unauthorized(str(exc)) from None
