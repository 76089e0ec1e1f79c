"""What guards the HA port: the replication account's signed handshake, TLS, the cap on
connections and the bound on what a connection may hold in memory.

Apache's HA protocol has no handshake: whoever connects and reports an offset is sent the
commit log, and its acknowledgements release SYNC_MASTER sends. With ``haAuthAccessKey`` and
``haAuthSecretKey`` set, a master first sends a challenge and a slave answers it with an
HMAC-SHA256 of both sides' nonces under the shared secret; the master answers with its own
HMAC, so each side knows the other holds the secret before a byte of the log moves (the
bytes are in :mod:`.wire`). Only then does the master read the slave's offsets: an
unauthenticated peer gets no log and its acknowledgements count for nothing. With
``haTlsEnable`` the port speaks TLS only (mutual with ``haTlsNeedClientAuth``). All of this is
off by default, so Apache's slaves and masters still pair with ours.

The cap (``haMaxConnections``) and the bound per connection (``haWriteBufferLimit``,
``haWriteTimeout``) are always on: a peer that does not read is disconnected rather than
buffered for.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import ssl
import time
from dataclasses import dataclass
from typing import Protocol

from aiorocketmq.protocol.settings import ConfigError
from aiorocketmq.protocol.tls import client_context

from . import wire

log = logging.getLogger(__name__)

#: How long a peer has to finish the TLS handshake or the signed handshake.
HANDSHAKE_TIMEOUT = 5.0


class HandshakeError(ConnectionError):
    """The other side did not prove it holds the replication account's secret."""


@dataclass(frozen=True)
class HaSecurity:
    """The HA port's guards, as both a master and a slave apply them."""

    access_key: str = ""
    secret_key: bytes = b""
    #: A master's TLS context (``haTlsEnable``); None: plain text.
    server_ssl: ssl.SSLContext | None = None
    #: A slave's TLS context for reaching its master (``haTlsEnable``); None: plain text.
    client_ssl: ssl.SSLContext | None = None
    max_connections: int = 16
    write_buffer_limit: int = 1 << 20
    write_timeout: float = 10.0
    handshake_timeout: float = HANDSHAKE_TIMEOUT

    @property
    def auth(self) -> bool:
        """Whether peers must pass the signed handshake."""
        return bool(self.secret_key)

    @classmethod
    def from_config(cls, config: HaSettings, *, master: bool) -> HaSecurity:
        """The guards ``config`` asks for, on a master or a slave; raises :class:`ConfigError`
        naming a key that cannot be used."""
        access, secret = config.ha_auth_access_key or "", config.ha_auth_secret_key or ""
        if bool(access) != bool(secret):
            raise ConfigError("haAuthAccessKey and haAuthSecretKey are set together or not at all")
        if len(access.encode()) > wire.MAX_ACCESS_KEY:
            raise ConfigError(f"haAuthAccessKey: longer than {wire.MAX_ACCESS_KEY} bytes")
        server_ssl = client_ssl = None
        if config.ha_tls_enable:
            server_ssl, client_ssl = _contexts(config)
            if master and server_ssl is None:
                raise ConfigError(
                    "haTlsEnable=true on a master needs haTlsCertPath and haTlsKeyPath "
                    "(or tls.server.certPath and tls.server.keyPath)"
                )
        return cls(
            access_key=access,
            secret_key=secret.encode(),
            server_ssl=server_ssl,
            client_ssl=client_ssl,
            max_connections=config.ha_max_connections,
            write_buffer_limit=config.ha_write_buffer_limit,
            write_timeout=config.ha_write_timeout / 1000,
        )

    def describe(self) -> str:
        """For the start-up line: which guards are on."""
        parts = [
            "signed handshake" if self.auth else "no handshake",
            "TLS" if self.server_ssl is not None or self.client_ssl is not None else "plain text",
        ]
        if self.server_ssl is not None and self.server_ssl.verify_mode == ssl.CERT_REQUIRED:
            parts[-1] = "mutual TLS"
        return ", ".join(parts)

    # -- the handshake ------------------------------------------------------------------------

    async def admit_slave(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Master side: challenge the peer and check its answer; raises HandshakeError."""
        master_nonce = os.urandom(wire.NONCE_SIZE)
        writer.write(wire.encode_challenge(master_nonce))
        try:
            async with asyncio.timeout(self.handshake_timeout):
                head = await reader.readexactly(wire.PROOF_HEAD_SIZE)
                slave_nonce, key_size = wire.decode_proof_head(head)
                access_key = (await reader.readexactly(key_size)).decode(errors="replace")
                mac = await reader.readexactly(wire.MAC_SIZE)
        except TimeoutError:
            raise HandshakeError(
                f"no handshake answer within {self.handshake_timeout:.0f}s "
                "(a slave without haAuthSecretKey, or not a slave)"
            ) from None
        except asyncio.IncompleteReadError:
            raise HandshakeError("closed during the handshake") from None
        except ValueError as exc:
            raise HandshakeError(str(exc)) from None
        expected = wire.sign(self.secret_key, wire.SLAVE, master_nonce, slave_nonce, access_key)
        # Both compared, in constant time, so the answer does not tell which one was wrong.
        key_ok = hmac.compare_digest(access_key.encode(), self.access_key.encode())
        if not (hmac.compare_digest(mac, expected) and key_ok):
            raise HandshakeError(f"wrong replication account or secret (access key {access_key!r})")
        writer.write(wire.sign(self.secret_key, wire.MASTER, master_nonce, slave_nonce, access_key))

    async def prove_slave(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Slave side: answer the master's challenge and check that it holds the secret too;
        raises HandshakeError."""
        try:
            async with asyncio.timeout(self.handshake_timeout):
                challenge = await reader.readexactly(wire.CHALLENGE_SIZE)
                master_nonce = wire.decode_challenge(challenge)
                slave_nonce = os.urandom(wire.NONCE_SIZE)
                mac = wire.sign(self.secret_key, wire.SLAVE, master_nonce, slave_nonce, self.access_key)
                writer.write(wire.encode_proof(slave_nonce, self.access_key, mac))
                answer = await reader.readexactly(wire.MAC_SIZE)
        except TimeoutError:
            raise HandshakeError(
                f"the master sent no handshake within {self.handshake_timeout:.0f}s "
                "(is haAuthSecretKey set on the master?)"
            ) from None
        except asyncio.IncompleteReadError:
            raise HandshakeError(
                "the master closed the connection during the handshake (wrong replication account "
                "or secret? the master's log says)"
            ) from None
        except ValueError as exc:
            raise HandshakeError(f"{exc} (is haAuthSecretKey set on the master?)") from None
        expected = wire.sign(self.secret_key, wire.MASTER, master_nonce, slave_nonce, self.access_key)
        if not hmac.compare_digest(answer, expected):
            raise HandshakeError("the master does not hold this replication account's secret")


class RefusalLog:
    """Logs refusals without letting a flood of them flood the log: the first one of each
    period in full, then how many more there were."""

    def __init__(self, period: float = 10.0) -> None:
        self.period = period
        self.count = 0
        self._suppressed = 0
        self._last = -period

    def refused(self, message: str, *args: object) -> None:
        """A connection turned away (counted in ``count``), logged."""
        self.count += 1
        self.note(message, *args)

    def note(self, message: str, *args: object) -> None:
        """Log ``message`` unless the period's line was written; then it is counted for the
        next line."""
        now = time.monotonic()
        if now - self._last < self.period:
            self._suppressed += 1
            return
        if self._suppressed:
            log.warning(
                "HA port: %d more refusals or drops in the last %.0fs", self._suppressed, now - self._last
            )
            self._suppressed = 0
        self._last = now
        log.warning(message, *args)


class HaSettings(Protocol):
    """The keys :meth:`HaSecurity.from_config` reads (``BrokerConfig`` has them)."""

    ha_auth_access_key: str | None
    ha_auth_secret_key: str | None
    ha_tls_enable: bool
    ha_tls_cert_path: str | None
    ha_tls_key_path: str | None
    ha_tls_key_password: str | None
    ha_tls_trust_cert_path: str | None
    ha_tls_need_client_auth: bool
    ha_max_connections: int
    ha_write_buffer_limit: int
    ha_write_timeout: int
    tls_server_cert_path: str | None
    tls_server_key_path: str | None
    tls_server_key_password: str | None
    tls_server_trust_cert_path: str | None


def _contexts(config: HaSettings) -> tuple[ssl.SSLContext | None, ssl.SSLContext]:
    """The master's and the slave's TLS contexts. The certificate (``haTlsCertPath``, else
    ``tls.server.certPath``) is the master's server certificate and the slave's client one; the
    trust file (``haTlsTrustCertPath``, else ``tls.server.trustCertPath``) is the CA that signs
    the cluster's brokers. Peers are checked against that CA, not against a host name: slaves
    reach masters at the IP the name server hands out."""
    cert = config.ha_tls_cert_path or config.tls_server_cert_path
    key = config.ha_tls_key_path or config.tls_server_key_path
    password = config.ha_tls_key_password or config.tls_server_key_password
    trust = config.ha_tls_trust_cert_path or config.tls_server_trust_cert_path
    if config.ha_tls_need_client_auth and not trust:
        raise ConfigError("haTlsNeedClientAuth=true needs haTlsTrustCertPath (the CA that signs slaves)")
    server = None
    try:
        if cert and key:
            server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            server.load_cert_chain(cert, key, password=password)
            if config.ha_tls_need_client_auth:
                server.verify_mode = ssl.CERT_REQUIRED
                server.load_verify_locations(trust)
        client = client_context(
            verify=bool(trust),
            ca_file=trust,
            cert_file=cert if cert and key else None,
            key_file=key,
            key_password=password,
        )
        client.check_hostname = False
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"haTlsEnable: cannot load the HA port's certificates: {exc}") from None
    return server, client
