"""The bytes of the HA port in controller mode (Apache 5's ``AutoSwitchHAConnection`` and
``AutoSwitchHAClient``), without sockets. Big-endian throughout.

Slave to master:

* handshake (16 bytes): ``[state HANDSHAKE: int32][syncFromLastFile: int16][asyncLearner: int16]
  [slave broker id: int64]``;
* report (12 bytes): ``[state TRANSFER: int32][slave's commit-log max offset: int64]``, which
  acknowledges everything before that offset.

Master to slave:

* handshake (20-byte header + 12 bytes per epoch entry): ``[state HANDSHAKE: int32]
  [body size: int32][master's max offset: int64][master's last epoch: int32]``, then
  ``[epoch: int32][start offset: int64]`` per entry;
* transfer (36-byte header + body): ``[state TRANSFER: int32][body size: int32]
  [commit-log offset of the body: int64][epoch: int32][the epoch's start offset: int64]
  [confirm offset: int64]`` then raw commit-log bytes; an empty body is a heartbeat.

A state is the ordinal of Apache's ``HAConnectionState``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum


class State(IntEnum):
    """Apache's ``HAConnectionState``, by ordinal."""

    READY = 0
    HANDSHAKE = 1
    TRANSFER = 2
    SUSPEND = 3
    SHUTDOWN = 4


SLAVE_HANDSHAKE = struct.Struct(">ihhq")
SLAVE_REPORT = struct.Struct(">iq")
MASTER_HANDSHAKE = struct.Struct(">iiqi")
MASTER_TRANSFER = struct.Struct(">iiqiqq")
EPOCH_ENTRY = struct.Struct(">iq")
_STATE = struct.Struct(">i")

#: The most epoch entries a master's handshake carries (Apache's buffer holds 1000).
MAX_EPOCH_ENTRIES = 1000


@dataclass(frozen=True, slots=True)
class SlaveHandshake:
    broker_id: int
    sync_from_last_file: bool = False
    async_learner: bool = False


@dataclass(frozen=True, slots=True)
class TransferHeader:
    offset: int
    epoch: int
    epoch_start: int
    confirm_offset: int
    body_size: int


def encode_slave_handshake(
    broker_id: int, *, sync_from_last_file: bool = False, async_learner: bool = False
) -> bytes:
    return SLAVE_HANDSHAKE.pack(State.HANDSHAKE, int(sync_from_last_file), int(async_learner), broker_id)


def encode_report(offset: int) -> bytes:
    return SLAVE_REPORT.pack(State.TRANSFER, offset)


def encode_master_handshake(max_offset: int, last_epoch: int, entries: list[tuple[int, int]]) -> bytes:
    """The master's answer to a handshake: its end, last epoch and ``(epoch, start)`` list."""
    entries = entries[-MAX_EPOCH_ENTRIES:]
    body = b"".join(EPOCH_ENTRY.pack(epoch, start) for epoch, start in entries)
    return MASTER_HANDSHAKE.pack(State.HANDSHAKE, len(body), max_offset, last_epoch) + body


def encode_transfer_header(
    offset: int, body_size: int, epoch: int, epoch_start: int, confirm_offset: int
) -> bytes:
    return MASTER_TRANSFER.pack(State.TRANSFER, body_size, offset, epoch, epoch_start, confirm_offset)


class SlaveMessageReader:
    """Master side: the slave's handshakes and reports, as they complete."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[SlaveHandshake | int]:
        """Each complete message: a :class:`SlaveHandshake` or a reported offset. ValueError
        for a state no slave sends."""
        buffer = self._buffer
        buffer += data
        out: list[SlaveHandshake | int] = []
        pos = 0
        end = len(buffer)
        while end - pos >= _STATE.size:
            (state,) = _STATE.unpack_from(buffer, pos)
            if state == State.HANDSHAKE:
                if end - pos < SLAVE_HANDSHAKE.size:
                    break
                _, last_file, learner, broker_id = SLAVE_HANDSHAKE.unpack_from(buffer, pos)
                out.append(SlaveHandshake(broker_id, last_file == 1, learner == 1))
                pos += SLAVE_HANDSHAKE.size
            elif state == State.TRANSFER:
                if end - pos < SLAVE_REPORT.size:
                    break
                out.append(int(SLAVE_REPORT.unpack_from(buffer, pos)[1]))
                pos += SLAVE_REPORT.size
            else:
                raise ValueError(f"not an auto-switch slave message (state {state})")
        if pos:
            del buffer[:pos]
        return out


class MasterMessageReader:
    """Slave side: the master's handshake answer and transfer frames, as they complete."""

    __slots__ = ("_buffer", "max_body")

    def __init__(self, max_body: int = 64 << 20) -> None:
        self._buffer = bytearray()
        self.max_body = max_body

    def feed(
        self, data: bytes
    ) -> list[tuple[int, int, list[tuple[int, int]]] | tuple[TransferHeader, bytes]]:
        """Each complete message: ``(master max offset, last epoch, [(epoch, start), ...])`` for
        a handshake answer, ``(header, body)`` for a transfer frame. ValueError for bytes no
        master sends."""
        buffer = self._buffer
        buffer += data
        out: list[tuple[int, int, list[tuple[int, int]]] | tuple[TransferHeader, bytes]] = []
        pos = 0
        end = len(buffer)
        while end - pos >= MASTER_HANDSHAKE.size:
            state, size, offset, epoch = MASTER_HANDSHAKE.unpack_from(buffer, pos)
            if size < 0 or size > self.max_body:
                raise ValueError(f"not an auto-switch master message (body size {size})")
            if state == State.HANDSHAKE:
                if end - pos < MASTER_HANDSHAKE.size + size:
                    break
                start = pos + MASTER_HANDSHAKE.size
                entries = [
                    (int(e), int(s))
                    for e, s in (
                        EPOCH_ENTRY.unpack_from(buffer, start + i * EPOCH_ENTRY.size)
                        for i in range(size // EPOCH_ENTRY.size)
                    )
                ]
                out.append((int(offset), int(epoch), entries))
                pos = start + size
            elif state == State.TRANSFER:
                if end - pos < MASTER_TRANSFER.size + size:
                    break
                _, _, offset, epoch, epoch_start, confirm = MASTER_TRANSFER.unpack_from(buffer, pos)
                start = pos + MASTER_TRANSFER.size
                header = TransferHeader(offset, epoch, epoch_start, confirm, size)
                out.append((header, bytes(buffer[start : start + size])))
                pos = start + size
            else:
                raise ValueError(f"not an auto-switch master message (state {state})")
        if pos:
            del buffer[:pos]
        return out
