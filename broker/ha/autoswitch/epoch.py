"""The epoch file: which master epoch wrote which range of the commit log.

Each time a broker becomes master it appends ``(its master epoch, where its commit log ends)``;
a slave appends the entries the master's transfer headers announce. An entry's end is the next
entry's start (the last one's is open). When a slave meets its master, the two lists say up to
where the two logs are the same (:meth:`EpochFileCache.find_consistent_point`); the slave cuts
its log back there before copying.

The file is Apache's ``epochFileCheckpoint`` (``storePathEpochFile``, by default in
``storePathRootDir``), in its ``CheckpointFile`` format: the number of entries, the CRC32 (its
low 31 bits) of the entry lines, then one ``epoch-startOffset`` line per entry; the previous
version is kept as ``epochFileCheckpoint.bak`` and read when the file is missing, empty or
damaged. Apache writes nothing when the list becomes empty (the old file would come back on
restart); here both files are removed.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from aiorocketmq.broker.store import StoreConfig
from aiorocketmq.protocol.controller import EpochEntry

log = logging.getLogger(__name__)

#: Java's ``Long.MAX_VALUE``: the open end of the last entry.
OPEN_END = (1 << 63) - 1
FILE_NAME = "epochFileCheckpoint"


@dataclass(slots=True)
class Epoch:
    """One entry: ``epoch`` wrote the commit log from ``start`` up to ``end`` (exclusive)."""

    epoch: int
    start: int
    end: int = OPEN_END

    def to_entry(self) -> EpochEntry:
        return EpochEntry(epoch=self.epoch, start_offset=self.start, end_offset=self.end)


def epoch_file_path(store_config: StoreConfig) -> Path:
    """Where Apache keeps the epoch file: ``storePathEpochFile`` or
    ``{storePathRootDir}/epochFileCheckpoint``."""
    explicit = getattr(store_config, "store_path_epoch_file", None)
    if explicit:
        return Path(str(explicit))
    return Path(str(store_config.store_path_root_dir)) / FILE_NAME


def encode_file(entries: Iterable[Epoch]) -> str:
    """The file's text for ``entries`` (Apache's ``CheckpointFile.write``)."""
    items = list(entries)
    lines = "".join(f"{e.epoch}-{e.start}\n" for e in items)
    crc = zlib.crc32(lines.encode()) & 0x7FFFFFFF
    return f"{len(items)}\n{crc}\n{lines}"


def decode_file(text: str) -> list[Epoch]:
    """The entries of a file's text; ValueError when it is not one (count or CRC wrong)."""
    lines = text.split("\n")
    if len(lines) < 2:
        raise ValueError("epoch file: no header")
    expected = int(lines[0].strip())
    expected_crc = int(lines[1].strip())
    body = [line for line in lines[2:] if line != ""]
    entries = []
    for line in body:
        parts = line.strip().split("-")
        if len(parts) == 2:
            entries.append(Epoch(int(parts[0]), int(parts[1])))
    if len(entries) != expected:
        raise ValueError(f"epoch file: {expected} entries announced, {len(entries)} found")
    actual_crc = zlib.crc32("".join(f"{line}\n" for line in body).encode()) & 0x7FFFFFFF
    if expected_crc != 0 and expected_crc != actual_crc:
        raise ValueError(f"epoch file: CRC {actual_crc}, the file says {expected_crc}")
    return entries


class EpochFileCache:
    """The epoch entries by epoch, kept in the epoch file when given a path (Apache's
    ``EpochFileCache``)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._entries: list[Epoch] = []

    # -- loading ---------------------------------------------------------------------------

    def load(self) -> None:
        """Read the file (or its ``.bak`` when the file is missing, empty or damaged)."""
        if self.path is None:
            return
        entries: list[Epoch] = []
        for candidate in (self.path, self.path.with_name(self.path.name + ".bak")):
            try:
                entries = decode_file(candidate.read_text())
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as exc:
                log.error("cannot read the epoch file %s: %s", candidate, exc)
                continue
            if entries:
                break
        self._set(entries)
        log.info("epoch entries loaded from %s: %s", self.path, self.describe())

    def init_from(self, entries: Iterable[Epoch | EpochEntry]) -> None:
        """Replace the entries (ends recomputed from the starts) and write the file."""
        self._set(
            [
                Epoch(e.epoch, e.start) if isinstance(e, Epoch) else Epoch(e.epoch, e.start_offset)
                for e in entries
            ]
        )
        self._flush()

    def _set(self, entries: list[Epoch]) -> None:
        by_epoch: dict[int, Epoch] = {}
        for entry in entries:
            by_epoch[entry.epoch] = Epoch(entry.epoch, entry.start)
        ordered = [by_epoch[k] for k in sorted(by_epoch)]
        for before, after in itertools.pairwise(ordered):
            before.end = after.start
        self._entries = ordered

    # -- reading ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[Epoch]:
        """Copies of the entries, by epoch."""
        return [Epoch(e.epoch, e.start, e.end) for e in self._entries]

    def first(self) -> Epoch | None:
        return Epoch(*_fields(self._entries[0])) if self._entries else None

    def last(self) -> Epoch | None:
        return Epoch(*_fields(self._entries[-1])) if self._entries else None

    @property
    def last_epoch(self) -> int:
        """The newest epoch; -1 without entries."""
        return self._entries[-1].epoch if self._entries else -1

    def get(self, epoch: int) -> Epoch | None:
        for entry in self._entries:
            if entry.epoch == epoch:
                return Epoch(*_fields(entry))
        return None

    def find_by_offset(self, offset: int) -> Epoch | None:
        """The entry whose range holds ``offset``."""
        for entry in self._entries:
            if entry.start <= offset < entry.end:
                return Epoch(*_fields(entry))
        return None

    def next_after(self, epoch: int) -> Epoch | None:
        """The first entry with a bigger epoch."""
        for entry in self._entries:
            if entry.epoch > epoch:
                return Epoch(*_fields(entry))
        return None

    def describe(self) -> str:
        return ", ".join(f"{e.epoch}@[{e.start},{'' if e.end == OPEN_END else e.end})" for e in self._entries)

    # -- changing --------------------------------------------------------------------------

    def append(self, epoch: int, start: int) -> bool:
        """Add ``(epoch, start)`` after the last entry, whose end becomes ``start``. Refused
        (False, as Apache's) unless both the epoch and the start are bigger than the last
        entry's: an epoch that wrote nothing has no entry."""
        if self._entries:
            last = self._entries[-1]
            if last.epoch >= epoch or last.start >= start:
                log.info(
                    "epoch entry %d@%d not appended: the last entry is %d@%d",
                    epoch,
                    start,
                    last.epoch,
                    last.start,
                )
                return False
            last.end = start
        self._entries.append(Epoch(epoch, start))
        self._flush()
        return True

    def set_last_end(self, end: int) -> None:
        """Close the last entry at ``end`` (not before its start)."""
        if self._entries and self._entries[-1].start <= end:
            self._entries[-1].end = end

    def truncate_suffix_by_epoch(self, epoch: int) -> None:
        """Remove the entries of ``epoch`` and later ones."""
        self._truncate_suffix(lambda e: e.epoch >= epoch)

    def truncate_suffix_by_offset(self, offset: int) -> None:
        """Remove the entries starting at or after ``offset`` (the log was cut there)."""
        self._truncate_suffix(lambda e: e.start >= offset)

    def _truncate_suffix(self, drop: Callable[[Epoch], bool]) -> None:
        kept = [e for e in self._entries if not drop(e)]
        if kept:
            kept[-1].end = OPEN_END
        changed = len(kept) != len(self._entries)
        self._entries = kept
        if changed:
            self._flush()

    def truncate_prefix_by_offset(self, offset: int) -> None:
        """Remove the entries ending at or before ``offset`` (the log's files there are gone)."""
        kept = [e for e in self._entries if e.end > offset]
        if len(kept) != len(self._entries):
            self._entries = kept
            self._flush()

    # -- comparing -------------------------------------------------------------------------

    def find_consistent_point(self, other: EpochFileCache) -> int:
        """Up to where this log and ``other``'s hold the same bytes: from the newest local
        entry down, the first epoch both have with the same start; the smaller of the two
        ends. -1 when no epoch matches (Apache's ``findConsistentPoint``)."""
        for entry in reversed(self._entries):
            theirs = other.get(entry.epoch)
            if theirs is not None and theirs.start == entry.start:
                return min(entry.end, theirs.end)
        return -1

    # -- the file --------------------------------------------------------------------------

    def _flush(self) -> None:
        path = self.path
        if path is None:
            return
        backup = path.with_name(path.name + ".bak")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if not self._entries:
                for stale in (path, backup):
                    with contextlib.suppress(FileNotFoundError):
                        stale.unlink()
                return
            with contextlib.suppress(FileNotFoundError):
                previous = path.read_bytes()
                _write(backup, previous)
            _write(path, encode_file(self._entries).encode())
        except OSError as exc:
            log.error("cannot write the epoch file %s: %s", path, exc)


def _fields(entry: Epoch) -> tuple[int, int, int]:
    return entry.epoch, entry.start, entry.end


def _write(path: Path, data: bytes) -> None:
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
