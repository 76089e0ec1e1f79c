"""The bytes of RocketMQ's HA port (classic master/slave replication), without sockets.

Raw TCP, big-endian, no handshake in Apache's protocol. The slave sends a stream of 8-byte commit-log offsets (its
max physical offset: where to send from, and an ack of everything before it); the master sends
frames ``[physical offset: int64][body size: int32][body: raw commit-log bytes]``. A frame with
an empty body is a heartbeat. Bodies are not aligned to records: a record may span frames.

Ours adds a signed handshake in front when the replication account is configured (see
:mod:`.security`): the master sends ``[magic: 8 bytes][master nonce: 32 bytes]``; the slave
answers ``[slave nonce: 32][access key size: uint16][access key: UTF-8][HMAC: 32]``; the
master answers with its own HMAC (32 bytes). Each HMAC-SHA256 is over the signer's role, both
nonces and the access key, under the account's secret. Apache's offsets and frames follow.
"""

from __future__ import annotations

import hashlib
import hmac
import struct

HEADER = struct.Struct(">qi")
HEADER_SIZE = HEADER.size
OFFSET = struct.Struct(">q")
OFFSET_SIZE = OFFSET.size


def encode_offset(offset: int) -> bytes:
    """A slave's report: its commit log's max physical offset."""
    return OFFSET.pack(offset)


def encode_header(offset: int, size: int) -> bytes:
    """A transfer frame's header; ``size`` body bytes follow (0: a heartbeat)."""
    return HEADER.pack(offset, size)


class OffsetReader:
    """Master side: the slave's reports. Only the newest complete report matters (each one
    acknowledges everything before it), as RocketMQ's master reads them."""

    __slots__ = ("_tail",)

    def __init__(self) -> None:
        self._tail = b""

    def feed(self, data: bytes) -> int | None:
        """The last complete offset in ``data`` (with what was left over before); None if
        no report completed."""
        buffer = self._tail + data if self._tail else data
        whole = len(buffer) - len(buffer) % OFFSET_SIZE
        self._tail = bytes(buffer[whole:])
        if not whole:
            return None
        return int(OFFSET.unpack_from(buffer, whole - OFFSET_SIZE)[0])


class FrameReader:
    """Slave side: the master's frames, as complete ``(offset, body)`` pairs."""

    __slots__ = ("_buffer", "max_body")

    def __init__(self, max_body: int = 64 << 20) -> None:
        self._buffer = bytearray()
        #: A larger declared body is not a frame of this protocol (the peer is not an HA port).
        self.max_body = max_body

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """Every frame completed by ``data``; raises ValueError on a header no master sends."""
        buffer = self._buffer
        buffer += data
        frames = []
        pos = 0
        end = len(buffer)
        while end - pos >= HEADER_SIZE:
            offset, size = HEADER.unpack_from(buffer, pos)
            if size < 0 or size > self.max_body or offset < 0:
                raise ValueError(f"not an HA transfer frame: offset {offset}, body size {size}")
            if end - pos - HEADER_SIZE < size:
                break
            start = pos + HEADER_SIZE
            frames.append((offset, bytes(buffer[start : start + size])))
            pos = start + size
        if pos:
            del buffer[:pos]
        return frames

    @property
    def pending(self) -> int:
        """Bytes received that do not complete a frame yet."""
        return len(self._buffer)


# -- the signed handshake (ours, only when haAuthSecretKey is set) ------------------------------

#: Starts the master's challenge; as a transfer frame's header it would declare an offset
#: beyond any commit log, so a slave without the handshake refuses it rather than storing it.
MAGIC = b"RMQHAUTH"
NONCE_SIZE = 32
MAC_SIZE = 32
CHALLENGE_SIZE = len(MAGIC) + NONCE_SIZE
_KEY_SIZE = struct.Struct(">H")
PROOF_HEAD_SIZE = NONCE_SIZE + _KEY_SIZE.size
MAX_ACCESS_KEY = 255
SLAVE = b"slave"
MASTER = b"master"


def encode_challenge(nonce: bytes) -> bytes:
    """The master's first bytes when the handshake is on."""
    return MAGIC + nonce


def decode_challenge(data: bytes) -> bytes:
    """The master's nonce; ValueError if ``data`` is not a challenge."""
    if len(data) != CHALLENGE_SIZE or not data.startswith(MAGIC):
        raise ValueError("the master sent no handshake challenge")
    return data[len(MAGIC) :]


def sign(secret: bytes, role: bytes, master_nonce: bytes, slave_nonce: bytes, access_key: str) -> bytes:
    """The HMAC one side sends: over its role, both nonces and the access key."""
    key = access_key.encode()
    message = role + master_nonce + slave_nonce + _KEY_SIZE.pack(len(key)) + key
    return hmac.new(secret, message, hashlib.sha256).digest()


def encode_proof(slave_nonce: bytes, access_key: str, mac: bytes) -> bytes:
    """The slave's answer to the challenge."""
    key = access_key.encode()
    return slave_nonce + _KEY_SIZE.pack(len(key)) + key + mac


def decode_proof_head(data: bytes) -> tuple[bytes, int]:
    """The slave's nonce and the size of the access key that follows; ValueError for a size
    no slave sends."""
    (size,) = _KEY_SIZE.unpack_from(data, NONCE_SIZE)
    if size > MAX_ACCESS_KEY:
        raise ValueError(f"not a handshake answer (access key of {size} bytes)")
    return data[:NONCE_SIZE], int(size)
