"""Configuration in RocketMQ's own style: ``key=value`` properties files with RocketMQ's key
names, so an operator's existing ``broker.conf`` / ``namesrv.properties`` keep working.

A process declares its settings as a :class:`Settings` model whose aliases are the RocketMQ
keys; :meth:`Settings.load` merges a file and command-line overrides, and
:meth:`Settings.to_properties` prints the effective configuration (``-p``).
"""

from __future__ import annotations

import logging
import ssl
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .command import DEFAULT_MAX_FRAME_SIZE
from .errors import MQError
from .tls import ServerTls, client_context_from_properties, tls_properties
from .transport import ConnectionLimits


class ConfigError(MQError):
    """A configuration file or option that cannot be used."""


_BLANKS = " \t\f"
_KEY_TERMINATORS = frozenset("=:" + _BLANKS)


def read_properties(text: str) -> dict[str, str]:
    """Parse Java-properties-style text: ``key=value``, ``key: value`` or ``key value`` lines, ``#``/``!``
    comments, surrounding whitespace ignored; a trailing backslash continues a line."""
    result: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        # As java.util.Properties: the key ends at the first '=', ':' or whitespace; then
        # whitespace and at most one '=' or ':' separate it from the value.
        for i, ch in enumerate(line):
            if ch in _KEY_TERMINATORS:
                key, rest = line[:i], line[i:].lstrip(_BLANKS)
                if rest[:1] in ("=", ":"):
                    rest = rest[1:]
                value = rest.strip()
                break
        else:
            key, value = line, ""
        if key:
            result[key] = value
    return result


def read_properties_file(path: str | Path) -> dict[str, str]:
    try:
        return read_properties(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None


class Settings(BaseModel):
    """Base of process settings: field aliases are RocketMQ's key names."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", validate_assignment=True)

    @classmethod
    def load(cls, path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> Self:
        """Defaults, then the file's values, then ``overrides`` (``None`` values skipped)."""
        values: dict[str, Any] = {}
        if path is not None:
            values.update(read_properties_file(path))
        if overrides:
            values.update({k: v for k, v in overrides.items() if v is not None})
        known = {info.alias or name for name, info in cls.model_fields.items()} | set(cls.model_fields)
        for info in cls.model_fields.values():  # a key's other spellings (AliasChoices)
            known.update(c for c in getattr(info.validation_alias, "choices", ()) if isinstance(c, str))
        unknown = sorted(set(values) - known)
        try:
            settings = cls.model_validate(values)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']} (got {e.get('input')!r})"
                for e in exc.errors(include_url=False)
            )
            where = f" in {path}" if path else ""
            raise ConfigError(f"invalid configuration{where}: {problems}") from None
        settings._unknown_keys = unknown
        return settings

    _unknown_keys: list[str] = []

    @property
    def unknown_keys(self) -> list[str]:
        """Keys the file set that this process does not know (logged as a warning)."""
        return self._unknown_keys

    def to_properties(self) -> str:
        """``key=value`` lines, RocketMQ key names, in declaration order (inherited keys last)."""
        lines = []
        # A process's own keys first, then those it shares with others (server limits).
        shared: set[str] = set()
        for base in type(self).__mro__[1:]:
            if isinstance(base, type) and issubclass(base, Settings) and base is not Settings:
                shared.update(base.model_fields)
        fields = type(self).model_fields
        ordered = [n for n in fields if n not in shared] + [n for n in fields if n in shared]
        for name in ordered:
            info = fields[name]
            value = getattr(self, name)
            if isinstance(value, bool):
                text = "true" if value else "false"
            elif value is None:
                text = ""
            else:
                text = str(getattr(value, "value", value))
            lines.append(f"{info.alias or name}={text}")
        return "\n".join(lines) + "\n"


class TlsSettings(Settings):
    """RocketMQ's ``tls.*`` keys, for processes that serve (``tls.server.*``) or reach a
    TLS server (``tls.enable``, ``tls.client.*``); ``tls.config.file`` names a properties
    file holding them, as RocketMQ's ``-Dtls.config.file`` does (keys given here win)."""

    tls_config_file: str | None = Field(None, alias="tls.config.file")
    tls_server_mode: str | None = Field(None, alias="tls.server.mode")
    tls_server_cert_path: str | None = Field(None, alias="tls.server.certPath")
    tls_server_key_path: str | None = Field(None, alias="tls.server.keyPath")
    tls_server_key_password: str | None = Field(None, alias="tls.server.keyPassword", repr=False)
    tls_server_trust_cert_path: str | None = Field(None, alias="tls.server.trustCertPath")
    tls_server_need_client_auth: str | None = Field(None, alias="tls.server.need.client.auth")
    tls_enable: bool | None = Field(None, alias="tls.enable")
    tls_client_auth_server: bool | None = Field(None, alias="tls.client.authServer")
    tls_client_trust_cert_path: str | None = Field(None, alias="tls.client.trustCertPath")
    tls_client_cert_path: str | None = Field(None, alias="tls.client.certPath")
    tls_client_key_path: str | None = Field(None, alias="tls.client.keyPath")
    tls_client_key_password: str | None = Field(None, alias="tls.client.keyPassword", repr=False)

    def to_properties(self) -> str:
        """As :meth:`Settings.to_properties`, the process's own keys first and only the
        ``tls.*`` keys that are set (an operator without TLS sees no change)."""
        own, tls = [], []
        for line in super().to_properties().splitlines():
            if not line.startswith("tls."):
                own.append(line)
            elif not line.endswith("="):
                tls.append(line)
        return "\n".join(own + tls) + "\n"

    def tls_values(self) -> dict[str, str]:
        """Every ``tls.*`` setting in force, the config file's merged under these."""
        given = {
            info.alias: getattr(self, name)
            for name, info in type(self).model_fields.items()
            if info.alias and info.alias.startswith("tls.")
        }
        return tls_properties(given)

    def server_tls(self) -> ServerTls:
        """The listening sockets' TLS (``disabled`` unless ``tls.server.mode`` says otherwise);
        raises :class:`ConfigError` naming the key that cannot be used."""
        try:
            return ServerTls.from_properties(self.tls_values())
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    def client_ssl_context(self) -> ssl.SSLContext | None:
        """The context for reaching TLS servers when ``tls.enable=true``; None otherwise."""
        try:
            return client_context_from_properties(self.tls_values())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"tls.client settings: {exc}") from None


class ServerLimitSettings(Settings):
    """The limits a server process puts on its peers (:class:`~.transport.ConnectionLimits`).

    ``serverSocketBacklog`` is RocketMQ's key; the others are ours (RocketMQ has no such
    limits; its frame size is the ``com.rocketmq.remoting.frameMaxLength`` property)."""

    server_socket_backlog: int = Field(1024, alias="serverSocketBacklog", ge=1)
    server_frame_max_bytes: int = Field(DEFAULT_MAX_FRAME_SIZE, alias="serverFrameMaxBytes", ge=1024)
    server_buffered_frame_bytes_max: int = Field(
        256 * 1024 * 1024, alias="serverBufferedFrameBytesMax", ge=1024
    )
    server_frame_read_timeout_millis: int = Field(60_000, alias="serverFrameReadTimeoutMillis", ge=1)
    server_max_connections_per_address: int = Field(1000, alias="serverMaxConnectionsPerAddress", ge=1)

    def connection_limits(self) -> ConnectionLimits:
        return ConnectionLimits(
            backlog=self.server_socket_backlog,
            max_frame_size=self.server_frame_max_bytes,
            max_buffered=self.server_buffered_frame_bytes_max,
            frame_timeout=self.server_frame_read_timeout_millis / 1000,
            max_per_address=self.server_max_connections_per_address,
        )


def server_logging(level: str) -> None:
    """The servers' log lines on standard error (``mqnamesrv``, ``mqbroker``, ``mqproxy``,
    ``mqcontroller``): a millisecond timestamp, the level, the logger's name."""
    logging.basicConfig(
        stream=sys.stderr,
        level=level.upper(),
        format="%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
    )
