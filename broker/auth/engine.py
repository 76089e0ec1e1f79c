"""ACL 2.0's checks on every request: who is calling (authentication) and whether they may
(authorization), on the remoting and the gRPC fronts alike.

Authentication (``authenticationEnabled``): the request names a user (remoting: the
``AccessKey`` ext field; gRPC: ``Credential`` in the ``authorization`` header) that exists, is
enabled, and whose password signs the request as ACL 1.0 does (HMAC-SHA1, the remoting ext
fields in key order then the body; gRPC: the ``x-mq-date-time`` header, hex). Authorization
(``authorizationEnabled``): a super user may do anything; a normal user needs, for every
resource the request touches (:mod:`.requests`), a policy entry that allows one of the actions
from the caller's address (:func:`.model.matched_entry`).

Request codes (remoting: the decimal code; gRPC: the request message's full name, such as
``apache.rocketmq.v2.SendMessageRequest``) listed in ``authenticationWhitelist`` or
``authorizationWhitelist`` skip that check, as in Apache.

A refusal answers NO_PERMISSION on remoting and UNAUTHORIZED on gRPC, both with Apache's
message (``User:alice has no permission to access Topic:orders from 10.0.0.7, the decision is
deny.``). Remoting refusals are logged by the transport's refusal log; gRPC ones here, at most
once a minute per request kind and reason, with a count of those left out.
"""

from __future__ import annotations

import base64
import hmac
import json
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiorocketmq.protocol.acl import ACCESS_KEY, SIGNATURE, UNIQUE_KEY_QUERY, Credentials, signing_content
from aiorocketmq.protocol.acl import signature as hmac_signature
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.errors import BrokerError
from aiorocketmq.protocol.settings import ConfigError

from .model import Action, Resource, User, UserStatus, UserType, matched_entry
from .requests import Need, grpc_needs, remoting_needs
from .store import AuthenticationError, AuthError, AuthorizationError, AuthStore

if TYPE_CHECKING:
    from aiorocketmq.broker.config import BrokerConfig

log = logging.getLogger(__name__)

#: Clients up to 4.9.3 added ``_UNIQUE_KEY_QUERY`` after signing (MQVersion ordinal 399).
_V4_9_3 = 399
_SKIP_SIGNATURE = frozenset({SIGNATURE})
_SKIP_SIGNATURE_OLD = frozenset({SIGNATURE, UNIQUE_KEY_QUERY})

#: gRPC headers (Apache's ``GrpcConstants``).
AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"

#: Apache's provider class names: the only ones this broker has (any other is refused at start).
_PROVIDERS = {
    "authenticationProvider": "org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider",
    "authenticationMetadataProvider": (
        "org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider"
    ),
    "authorizationProvider": "org.apache.rocketmq.auth.authorization.provider.DefaultAuthorizationProvider",
    "authorizationMetadataProvider": (
        "org.apache.rocketmq.auth.authorization.provider.LocalAuthorizationMetadataProvider"
    ),
}

_GENERIC_AUTHZ = "Authorization failed. Please verify your access rights and try again."


#: Decisions remembered at most (a bound for callers naming ever new topics or addresses).
_DECISIONS_KEPT = 10_000
#: The requests whose authorization depends only on the header fields of the cache key
#: (``remoting_needs`` reads nothing else for them: no body).
_DECIDED_BY_HEADER = frozenset(
    {
        RequestCode.SEND_MESSAGE,
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.SEND_BATCH_MESSAGE,
        RequestCode.PULL_MESSAGE,
        RequestCode.LITE_PULL_MESSAGE,
        RequestCode.QUERY_CONSUMER_OFFSET,
        RequestCode.UPDATE_CONSUMER_OFFSET,
        RequestCode.CONSUMER_SEND_MSG_BACK,
        RequestCode.END_TRANSACTION,
    }
)


class AuthRefused(BrokerError):
    """A remoting request refused by ACL 2.0: NO_PERMISSION with Apache's message."""

    code = ResponseCode.NO_PERMISSION


def _whitelist(text: str | None) -> frozenset[str]:
    return frozenset(item.strip() for item in (text or "").split(",") if item.strip())


def _json_object(text: str, key: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{key} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{key} must be a JSON object")
    return data


def inner_credentials(config: BrokerConfig) -> Credentials | None:
    """What the broker signs its own requests with (``innerClientAuthenticationCredentials``,
    ``{"accessKey": ..., "secretKey": ...}``); None when unset or incomplete, as Apache's
    broker then sends unsigned. The name-server registration reads the same key."""
    from aiorocketmq.broker.registration import inner_client_credentials

    return inner_client_credentials(config.inner_client_authentication_credentials)


def auth_config_path(config: BrokerConfig) -> Path:
    """``authConfigPath``; ``<storePathRootDir>/config`` when unset (where Apache puts it)."""
    if config.auth_config_path:
        return Path(config.auth_config_path)
    return config.config_dir


class _RefusalLog:
    """At most one line a minute per (request kind, reason); the rest counted."""

    def __init__(self, interval: float = 60.0) -> None:
        self.interval = interval
        self._seen: dict[tuple[str, str], list[float]] = {}

    def refused(self, front: str, rpc: str, peer: str, reason: str) -> None:
        key = (rpc, reason.split(" ", 1)[-1][:40])
        now = time.monotonic()
        entry = self._seen.get(key)
        if entry is not None and now - entry[0] < self.interval:
            entry[1] += 1
            return
        more = f" ({int(entry[1])} more since the last line)" if entry is not None and entry[1] else ""
        self._seen[key] = [now, 0.0]
        log.info("ACL 2.0 refused %s %s from %s: %s%s", front, rpc, peer, reason, more)


class AuthEngine:
    """ACL 2.0 for one broker: the metadata store and the two checks."""

    def __init__(self, config: BrokerConfig, store: AuthStore | None = None) -> None:
        for key, expected in _PROVIDERS.items():
            value = getattr(config, _ATTRS[key])
            if value and value.strip() and value.strip() != expected:
                raise ConfigError(f"{key}={value}: this broker has only {expected}")
        self.config = config
        self.cluster = config.broker_cluster_name
        self.authentication_enabled = config.authentication_enabled
        self.authorization_enabled = config.authorization_enabled
        self.authentication_whitelist = _whitelist(config.authentication_whitelist)
        self.authorization_whitelist = _whitelist(config.authorization_whitelist)
        self.store = store if store is not None else AuthStore(auth_config_path(config))
        self.refusals = _RefusalLog()
        self._decisions: dict[tuple[Any, ...], str | None] = {}
        self._decisions_version = -1
        # The codes ACL 1.0 keeps for admins; those Apache's table leaves open ask the cluster.
        from aiorocketmq.broker.acl import ADMIN_CODES

        self.admin_codes = frozenset(int(c) for c in ADMIN_CODES)

    @property
    def enabled(self) -> bool:
        return self.authentication_enabled or self.authorization_enabled

    def start(self) -> None:
        """Load the metadata, create the configured users, migrate ACL 1.0 when asked."""
        try:
            self.store.load()
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"the ACL 2.0 metadata {self.store.file} cannot be read: {exc}") from None
        config = self.config
        if config.init_authentication_user and config.init_authentication_user.strip():
            data = _json_object(config.init_authentication_user, "initAuthenticationUser")
            user = User(
                username=str(data.get("username") or ""),
                password=data.get("password"),
                user_type=UserType.SUPER,
                user_status=UserStatus.by_name(data.get("userStatus")),
            )
            self._create_if_absent(user, "initAuthenticationUser")
        credentials = inner_credentials(config)
        if credentials is not None:
            user = User(credentials.access_key, credentials.secret_key, UserType.SUPER)
            self._create_if_absent(user, "innerClientAuthenticationCredentials")
        if config.migrate_auth_from_v1_enabled:
            from .migrate import migrate_v1

            migrate_v1(self.store, config)
        log.info(
            "ACL 2.0: authentication %s, authorization %s; %d users, %d ACLs in %s",
            "on" if self.authentication_enabled else "off",
            "on" if self.authorization_enabled else "off",
            len(self.store.users),
            len(self.store.acls),
            self.store.file,
        )

    def _create_if_absent(self, user: User, key: str) -> None:
        try:
            if self.store.get_user(user.username) is None:
                self.store.create_user(user)
        except AuthError as exc:
            raise ConfigError(f"{key}: {exc}") from None

    # -- the two checks ---------------------------------------------------------------------

    def authenticate(
        self, username: str | None, signature: str | None, content: bytes, body: bytes | None
    ) -> None:
        """Raise :class:`AuthenticationError` unless ``username`` exists, is enabled and its
        password gives ``signature`` over ``content`` + ``body``."""
        if username is None or username == "":
            raise AuthenticationError("username cannot be null.")
        user = self.store.users.get(username)
        if user is None:
            raise AuthenticationError(f"User:{username} is not found.")
        if user.user_status is UserStatus.DISABLE:
            raise AuthenticationError(f"User:{username} is disabled.")
        expected = hmac_signature(user.password or "", content, body)
        if signature is None or not hmac.compare_digest(signature.encode("utf-8"), expected.encode("ascii")):
            raise AuthenticationError("check signature failed.")

    def authorize(self, username: str | None, needs: Sequence[Need], source_ip: str) -> None:
        """Raise :class:`AuthorizationError` unless the user may do every one of ``needs``."""
        for need in needs:
            self._authorize_one(username, need.resource, need.actions, source_ip)

    def _authorize_one(
        self, username: str | None, resource: Resource, actions: Sequence[Action], source_ip: str
    ) -> None:
        if username is None:
            # Apache's check has no subject to look up and fails with its generic message.
            raise AuthorizationError(_GENERIC_AUTHZ)
        user = self.store.users.get(username)
        if user is None:
            raise AuthorizationError(f"User:{username} not found.")
        if user.is_super:
            return
        subject = user.subject_key
        acl = self.store.acls.get(subject)  # subject_key is already the stored spelling

        def deny(detail: str) -> AuthorizationError:
            return AuthorizationError(
                f"{subject} has no permission to access {resource.key} from {source_ip}, {detail}"
            )

        if acl is None:
            raise deny("no matched policies.")
        try:
            entry = matched_entry(acl, resource, actions, source_ip)
        except ValueError:
            raise AuthorizationError(_GENERIC_AUTHZ) from None
        if entry is None:
            raise deny("no matched policies.")
        if entry.decision is not None and entry.decision.name == "DENY":
            raise deny("the decision is deny.")

    # -- remoting ---------------------------------------------------------------------------

    def check_remoting(
        self, code: int, fields: Mapping[str, Any], body: bytes | None, version: int, remote_addr: str
    ) -> None:
        """Return when the request may proceed; raise :class:`AuthRefused` otherwise."""
        rpc = str(code)
        try:
            if self.authentication_enabled and rpc not in self.authentication_whitelist:
                username = fields.get(ACCESS_KEY) if fields else None
                signature = fields.get(SIGNATURE) if username is not None else None
                skip = _SKIP_SIGNATURE_OLD if version <= _V4_9_3 else _SKIP_SIGNATURE
                content = signing_content(fields, None, skip=skip) if username is not None else b""
                self.authenticate(
                    None if username is None else str(username),
                    None if signature is None else str(signature),
                    content,
                    body if username is not None else None,
                )
            if self.authorization_enabled:
                if code in _DECIDED_BY_HEADER and fields:
                    self._authorize_cached(code, fields, body, remote_addr)
                else:
                    self._authorize_remoting(code, fields, body, remote_addr)
        except AuthError as exc:
            raise AuthRefused(str(exc)) from None

    def _authorize_remoting(
        self, code: int, fields: Mapping[str, Any], body: bytes | None, remote_addr: str
    ) -> None:
        try:
            needs = remoting_needs(code, fields, body, self.cluster, self.admin_codes)
        except AuthError:
            raise
        except Exception:
            raise AuthorizationError("parse authorization context error.") from None
        if needs and str(code) not in self.authorization_whitelist:
            access_key = fields.get(ACCESS_KEY)
            self.authorize(None if access_key is None else str(access_key), needs, _source_ip(remote_addr))

    def _authorize_cached(
        self, code: int, fields: Mapping[str, Any], body: bytes | None, remote_addr: str
    ) -> None:
        # Sends, pulls and offsets ask the same question on every request of a connection, and
        # the answer depends only on these header fields: remember it until the users or ACLs
        # change (the store's version), so a cached decision is never stale.
        get = fields.get
        key = (
            code,
            get(ACCESS_KEY),
            remote_addr,
            get("b"),
            get("a"),
            get("topic"),
            get("consumerGroup"),
            get("group"),
        )
        if self._decisions_version != self.store.version:
            self._decisions.clear()
            self._decisions_version = self.store.version
        try:
            refusal = self._decisions[key]
        except KeyError:
            try:
                self._authorize_remoting(code, fields, body, remote_addr)
                refusal = None
            except AuthorizationError as exc:
                refusal = str(exc)
            if len(self._decisions) >= _DECISIONS_KEPT:
                self._decisions.clear()
            self._decisions[key] = refusal
        if refusal is not None:
            raise AuthorizationError(refusal)

    # -- gRPC -------------------------------------------------------------------------------

    def check_grpc(self, metadata: Mapping[str, str], peer_ip: str, message: Any) -> None:
        """Return when the 5.x request may proceed; raise :class:`AuthError` (which the gRPC
        front answers UNAUTHORIZED) otherwise. ``message`` is the request (for the stream,
        the telemetry command)."""
        rpc = type(message).DESCRIPTOR.full_name
        ip = peer = peer_ip
        try:
            username: str | None = None
            if self.authentication_enabled:
                username, signature, content = _grpc_credentials(metadata)
                if rpc not in self.authentication_whitelist:
                    self.authenticate(username, signature, content, None)
            if self.authorization_enabled:
                needs = grpc_needs(message)
                if needs and rpc not in self.authorization_whitelist:
                    self.authorize(username or None, needs, ip)
        except AuthError as exc:
            self.refusals.refused("gRPC", rpc, peer, str(exc))
            raise


_ATTRS = {
    "authenticationProvider": "authentication_provider",
    "authenticationMetadataProvider": "authentication_metadata_provider",
    "authorizationProvider": "authorization_provider",
    "authorizationMetadataProvider": "authorization_metadata_provider",
}


def _source_ip(remote_addr: str) -> str:
    """The address before the last colon (Apache's ``substringBeforeLast``), brackets off."""
    host = remote_addr.rsplit(":", 1)[0] if ":" in remote_addr else remote_addr
    return host.strip("[]").lstrip("/")


def _grpc_credentials(metadata: Mapping[str, str]) -> tuple[str | None, str | None, bytes]:
    """(username, base64 signature, signed content) from the 5.x headers, read as Apache's
    proxy reads them."""
    header = metadata.get(AUTHORIZATION)
    if not header:
        return None, None, b""
    date_time = metadata.get(DATE_TIME)
    if not date_time:
        raise AuthenticationError("datetime is null.")
    parts = header.split(" ", 1)
    if len(parts) != 2:
        raise AuthenticationError("authentication header is incorrect.")
    username: str | None = None
    signature: str | None = None
    for item in parts[1].split(","):
        kv = item.strip().split("=", 1)
        if len(kv) != 2:
            raise AuthenticationError(
                f"authentication keyValues length is incorrect, actual length={len(kv)}."
            )
        key, value = kv
        if key == "Credential":
            username = value.split("/")[0]
        elif key == "Signature":
            try:
                signature = base64.b64encode(bytes.fromhex(value)).decode("ascii")
            except ValueError:
                raise AuthenticationError("create authentication context error.") from None
    return username, signature, date_time.encode("utf-8")
