"""Start-up: load the files of a store directory and make them agree.

* **Normal restart** (no abort file): the last three commit-log files are checked record by
  record (lengths, physical offset, no NULs in topic and properties) to find the end of the
  log, which is trusted; consume-queue and index entries past that end are dropped and what
  the consume queues lack is dispatched again.
* **Abnormal restart** (abort file present): verification starts at the newest commit-log file
  whose first record is older than the checkpoint allows (its oldest timestamp less 3 s), or
  at the first file, and checks every record from there, with its body CRC if
  ``checkCRCOnRecover``. Consume-queue and index entries are trusted for records stored before
  the checkpoint's consume-queue and index timestamps (less 3 s), which were on disk when it
  was written; from the first record at or after that point on, they are dropped and every
  record is dispatched again. The first record that fails verification ends the log: the rest
  of its file is zeroed, later files are deleted, and entries pointing there are dropped. So
  consume queues never point past valid commit-log data, and no torn record is ever served.

Runs in a worker thread before the store serves anything.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from .checkpoint import RECOVERY_SLACK_MS, Checkpoint
from .commit_log import END_OF_FILE, STOPPED, CommitLog, ScannedRecord
from .config import StoreConfig
from .consume_queue import ConsumeQueue
from .flush import sync_all
from .index import Index
from .mapped_file import MappedFile

log = logging.getLogger(__name__)

_NEVER = 1 << 62
#: Records dispatched together (their index keys go in as one batch).
_CHUNK = 512


class MessageStore(Protocol):
    """What recovery uses of the store it loads (:class:`.store.MessageStore`)."""

    @property
    def config(self) -> StoreConfig: ...
    @property
    def commit_log(self) -> CommitLog: ...
    @property
    def index(self) -> Index | None: ...
    @property
    def checkpoint(self) -> Checkpoint: ...
    def load_consume_queues(self) -> None: ...
    def consume_queues(self) -> Iterable[ConsumeQueue]: ...
    def dispatch_recovered(self, records: Sequence[ScannedRecord]) -> None: ...
    def recovered(self, logics_timestamp: int, index_timestamp: int) -> None: ...


@dataclass(slots=True)
class RecoveryReport:
    abnormal: bool
    #: Commit-log offset where verification started, and where the log ends.
    verified_from: int = 0
    log_end: int = 0
    #: Commit-log offset from which records were dispatched again (``log_end``: none were).
    dispatched_from: int = 0
    dispatched: int = 0
    #: Commit-log files deleted because they lay past the end of the log.
    files_removed: int = 0
    #: Commit-log offset of the last valid record (-1: none verified).
    last_record_offset: int = -1
    seconds: float = 0.0
    #: CPU time of the recovering thread (the wall time less waiting for a core or the disk).
    cpu_seconds: float = 0.0


def recover(store: MessageStore, abnormal: bool) -> RecoveryReport:
    """Load and recover ``store``'s files (blocking)."""
    started = time.perf_counter()
    cpu_started = time.thread_time()
    report = RecoveryReport(abnormal)
    commit_log = store.commit_log
    commit_log.queue.load()
    store.load_consume_queues()
    if store.index is not None:
        store.index.load()
    files = commit_log.queue.files
    if abnormal:
        start = _abnormal_start(store, files)
        checkpoint = store.checkpoint
        trusted_until = checkpoint.logics_timestamp
        if store.index is not None:
            trusted_until = min(trusted_until, checkpoint.index_timestamp)
        dispatch_at = trusted_until - RECOVERY_SLACK_MS
    else:
        start = max(0, len(files) - 3)
        dispatch_at = _NEVER
    report.verified_from = files[start].start if files else 0
    end = _scan(store, files, start, 0, store.config.check_crc_on_recover and abnormal, dispatch_at, report)
    report.log_end = end
    removed = commit_log.queue.truncate(end)
    for mapped in removed:
        mapped.destroy()
    report.files_removed = len(removed)
    commit_log.queue.flushed_where = end
    _drop_derived_from(store, end)
    if not abnormal:
        # Consume queues behind the log (an index behind it is caught up by the same pass).
        dispatch_from = max((cq.max_physic_end for cq in store.consume_queues()), default=0)
        dispatch_from = min(max(dispatch_from, commit_log.min_offset), end)
        if dispatch_from < end:
            holder = commit_log.queue.find(dispatch_from)
            if holder is not None:
                index = commit_log.queue.files.index(holder)
                _scan(store, files, index, dispatch_from - holder.start, False, 0, report)
    if not report.dispatched:
        report.dispatched_from = end
    minimum = commit_log.min_offset
    for cq in store.consume_queues():
        cq.correct_min_offset(minimum)
    report.seconds = time.perf_counter() - started
    report.cpu_seconds = time.thread_time() - cpu_started
    log.info(
        "store recovered (%s): commit log [%d, %d), verified from %d, %d records dispatched from %d in %.3fs",
        "abnormal" if abnormal else "normal",
        minimum,
        end,
        report.verified_from,
        report.dispatched,
        report.dispatched_from,
        report.seconds,
    )
    return report


def recover_and_checkpoint(store: MessageStore, abnormal: bool) -> RecoveryReport:
    """:func:`recover` (blocking), then make the result durable and checkpoint it: every file
    synced, the checkpoint's timestamps at least the last record's store time."""
    report = recover(store, abnormal)
    commit_log = store.commit_log
    files = list(commit_log.queue.files)
    for cq in store.consume_queues():
        files.extend(cq.queue.files)
        cq.queue.flushed_where = cq.queue.max_offset
    sync_all(files)
    if store.index is not None:
        sync_all(store.index.dirty_files())
    stamp = 0
    if report.last_record_offset >= 0:
        stamp = commit_log.store_timestamp_at(report.last_record_offset)
    checkpoint = store.checkpoint
    if stamp > 0:
        commit_log.last_store_timestamp = stamp
        checkpoint.physic_timestamp = max(checkpoint.physic_timestamp, stamp)
        checkpoint.logics_timestamp = max(checkpoint.logics_timestamp, stamp)
        checkpoint.index_timestamp = max(checkpoint.index_timestamp, stamp)
    store.recovered(checkpoint.logics_timestamp, checkpoint.index_timestamp)
    checkpoint.flush()
    return report


def _abnormal_start(store: MessageStore, files: list[MappedFile]) -> int:
    """Index of the newest file whose first record is older than the checkpoint allows."""
    checkpoint = store.checkpoint
    limit = checkpoint.min_timestamp(store.index is not None) - RECOVERY_SLACK_MS
    for i in range(len(files) - 1, -1, -1):
        stamp = store.commit_log.first_store_timestamp(files[i])
        if 0 < stamp <= limit:
            return i
    return 0


def _drop_derived_from(store: MessageStore, offset: int) -> None:
    """Forget consume-queue and index entries of records at or past ``offset``."""
    for cq in store.consume_queues():
        for mapped in cq.truncate_from_physical(offset):
            mapped.destroy()
    if store.index is not None:
        store.index.roll_back(offset)


def _scan(
    store: MessageStore,
    files: list[MappedFile],
    start: int,
    first_pos: int,
    check_crc: bool,
    dispatch_at: int,
    report: RecoveryReport,
) -> int:
    """Verify records from ``files[start]`` (at ``first_pos``) on; returns where the valid log
    ends. From the first record stored at or after ``dispatch_at`` (ms) on, the consume-queue
    and index entries of the records are dropped and each record is dispatched again."""
    commit_log = store.commit_log
    if start >= len(files):
        return commit_log.max_offset if files else 0
    verify = commit_log.verify
    read_run = commit_log.read_run
    dispatch = store.dispatch_recovered
    dispatching = False
    end = files[start].start + first_pos
    for mapped in files[start:]:
        pos = first_pos if mapped is files[start] else 0
        if mapped.start + pos != end:
            break
        if not dispatching:
            pos, outcome, last = verify(mapped, pos, check_crc, dispatch_at)
            if last >= 0:
                report.last_record_offset = mapped.start + last
            if outcome == END_OF_FILE:
                end = mapped.end
                continue
            end = mapped.start + pos
            if outcome != STOPPED:
                return _ended(mapped, pos, end)
            dispatching = True
            report.dispatched_from = end
            _drop_derived_from(store, end)
        while True:
            records, pos, outcome = read_run(mapped, pos, check_crc, _CHUNK)
            if records:
                dispatch(records)
                report.dispatched += len(records)
                report.last_record_offset = records[-1][0]
            if outcome == END_OF_FILE:
                end = mapped.end
                break
            end = mapped.start + pos
            if outcome != STOPPED:
                return _ended(mapped, pos, end)
    return end


def _ended(mapped: MappedFile, pos: int, end: int) -> int:
    if pos + 8 <= mapped.size and any(mapped.view[pos : pos + 8]):
        log.warning(
            "commit log: invalid record at %d (file %s, position %d); the log ends there",
            end,
            mapped.path.name,
            pos,
        )
    return end
