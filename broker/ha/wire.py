"""The bytes of RocketMQ's HA port (classic master/slave replication), without sockets.

Raw TCP, big-endian, no handshake. The slave sends a stream of 8-byte commit-log offsets (its
max physical offset: where to send from, and an ack of everything before it); the master sends
frames ``[physical offset: int64][body size: int32][body: raw commit-log bytes]``. A frame with
an empty body is a heartbeat. Bodies are not aligned to records: a record may span frames.
"""

from __future__ import annotations

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
