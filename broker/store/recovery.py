"""Start-up: load the files of a store directory and make them agree.

* **Normal restart** (no abort file): the last three commit-log files are checked record by
  record (lengths, physical offset, no NULs in topic and properties) to find the end of the
  log, which is trusted; consume-queue and index entries past that end are dropped and what
  the consume queues lack is dispatched again.
* **Abnormal restart** (abort file present): recovery starts at the newest commit-log file
  whose first record is older than the checkpoint (less 3 s), or at the first file. Consume-
  queue and index entries from that file on are dropped, then every record from there is
  verified (with the body CRC if ``checkCRCOnRecover``) and dispatched again; the first record
  that fails ends the log: the rest of its file is zeroed and later files are deleted. So
  consume queues never point past valid commit-log data, and no torn record is ever served.

Runs in a worker thread before the store serves anything.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .checkpoint import RECOVERY_SLACK_MS
from .commit_log import END_OF_FILE
from .mapped_file import MappedFile

if TYPE_CHECKING:
    from .store import MessageStore

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RecoveryReport:
    abnormal: bool
    #: Commit-log offset where verification started, and where the log ends.
    verified_from: int = 0
    log_end: int = 0
    #: Commit-log offset from which records were dispatched again.
    dispatched_from: int = 0
    dispatched: int = 0
    #: Commit-log files deleted because they lay past the end of the log.
    files_removed: int = 0
    seconds: float = 0.0


def recover(store: MessageStore, abnormal: bool) -> RecoveryReport:
    """Load and recover ``store``'s files (blocking)."""
    started = time.perf_counter()
    report = RecoveryReport(abnormal)
    commit_log = store.commit_log
    commit_log.queue.load()
    store.load_consume_queues()
    if store.index is not None:
        store.index.load()
    files = commit_log.queue.files
    if abnormal:
        start = _abnormal_start(store, files)
        dispatch_from = files[start].start if files else 0
        _drop_derived_from(store, dispatch_from)
        report.verified_from = report.dispatched_from = dispatch_from
        end = _scan(store, files, start, store.config.check_crc_on_recover, dispatch=True, report=report)
    else:
        start = max(0, len(files) - 3)
        report.verified_from = files[start].start if files else 0
        end = _scan(store, files, start, False, dispatch=False, report=report)
    report.log_end = end
    removed = commit_log.queue.truncate(end)
    for mapped in removed:
        mapped.destroy()
    report.files_removed = len(removed)
    commit_log.queue.flushed_where = end
    if not abnormal:
        _drop_derived_from(store, end)
        dispatch_from = max((cq.max_physic_end for cq in store.consume_queues()), default=0)
        dispatch_from = min(max(dispatch_from, commit_log.min_offset), end)
        report.dispatched_from = dispatch_from
        if dispatch_from < end:
            holder = commit_log.queue.find(dispatch_from)
            if holder is not None:
                index = commit_log.queue.files.index(holder)
                _scan(
                    store,
                    files,
                    index,
                    False,
                    dispatch=True,
                    report=report,
                    first_pos=dispatch_from - holder.start,
                )
    minimum = commit_log.min_offset
    for cq in store.consume_queues():
        cq.correct_min_offset(minimum)
    report.seconds = time.perf_counter() - started
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
    check_crc: bool,
    *,
    dispatch: bool,
    report: RecoveryReport,
    first_pos: int = 0,
) -> int:
    """Verify records from ``files[start]`` (at ``first_pos``) on; returns where the valid log
    ends. With ``dispatch``, each valid record is dispatched to consume queues and index."""
    if start >= len(files):
        return store.commit_log.max_offset if files else 0
    commit_log = store.commit_log
    check = commit_log.check_record
    parse = commit_log.parse_record
    dispatch_record = store.dispatch_recovered
    end = files[start].start + first_pos
    count = 0
    for mapped in files[start:]:
        pos = first_pos if mapped is files[start] else 0
        if mapped.start != end:
            break
        while True:
            size = check(mapped, pos, check_crc)
            if size > 0:
                if dispatch:
                    dispatch_record(parse(mapped, pos, size))
                    count += 1
                pos += size
                end = mapped.start + pos
            elif size == END_OF_FILE:
                end = mapped.end
                break
            else:
                report.dispatched += count
                if pos + 8 <= mapped.size and any(mapped.view[pos : pos + 8]):
                    log.warning(
                        "commit log: invalid record at %d (file %s, position %d); the log ends there",
                        end,
                        mapped.path.name,
                        pos,
                    )
                return end
    report.dispatched += count
    return end
