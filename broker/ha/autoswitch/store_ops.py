"""What controller mode asks of the message store beyond the classic slave's appends: cutting
the commit log back to an offset with everything built from what is cut (consume-queue entries,
index keys), and finding where a replicated log's whole records end.

Built on the store's public parts (the commit log's file queue, the consume queues' truncation
by physical offset, the index's roll-back), as the store's own recovery and replicated-append
paths use them, and its dispatch limit (the confirm offset: records past it are held, not
dispatched, and are whole records all the same).
"""

from __future__ import annotations

import logging

from aiorocketmq.broker.store import MessageStore

log = logging.getLogger(__name__)


def is_record_boundary(store: MessageStore, offset: int) -> bool:
    """Whether ``offset`` is where a record (or a file's end blank) starts, or the log's end:
    a place the log may be cut (Apache's ``isOffsetAligned``)."""
    commit_log = store.commit_log
    if offset >= commit_log.max_offset or offset <= commit_log.min_offset:
        return True
    try:
        mapped, count, file_ended = commit_log.complete_records(offset, 1)
    except ValueError:
        return False
    return mapped is None or count > 0 or file_ended or offset - mapped.start == mapped.wrote


def truncate(store: MessageStore, offset: int) -> bool:
    """Make ``offset`` the end of the store's commit log: its files past it go, the consume
    queues forget the records that end past it, the index its keys there. False (nothing
    done) when ``offset`` is not a record boundary (Apache's ``truncateFiles``)."""
    commit_log = store.commit_log
    end = commit_log.max_offset
    if offset >= end:
        return True
    if not is_record_boundary(store, offset):
        log.error("cannot cut the commit log at %d: no record starts there", offset)
        return False
    for cq in store.consume_queues():
        for mapped in cq.truncate_from_physical(offset):
            mapped.destroy()
    if store.index is not None:
        store.index.roll_back(offset)
    # Destroyed here, not in the background: the next append may make a file of the same name.
    for mapped in commit_log.queue.truncate(offset):
        mapped.destroy()
    if store.reput_offset > offset or store.dispatch_limited:
        # (Under a limit, records held past ``offset`` are gone: the store notes it.)
        store.reput_offset = min(store.reput_offset, offset)
    log.warning("commit log cut back from %d to %d (with its consume-queue and index entries)", end, offset)
    return True


def truncate_invalid(store: MessageStore) -> int:
    """A replicated log's torn tail: dispatch the whole records past ``reput_offset`` (up to
    the confirm offset under the store's dispatch limit: the others stay, held), then cut
    what follows the last whole record. Returns the new end, or -1 when nothing was cut
    (Apache's ``truncateInvalidMsg``). Only for a log whose ``reput_offset`` is kept (a
    slave's, any store just after it started, or any under a dispatch limit)."""
    try:
        store.dispatch_replicated()
    except ValueError as exc:
        # The store already took back what followed the last good record.
        log.warning("replicated commit log: %s", exc)
    reput = store.held_records_end() if store.dispatch_limited else store.reput_offset
    if reput >= store.commit_log_max_offset:
        return -1
    cut = store.commit_log_max_offset
    for mapped in store.commit_log.queue.truncate(reput):
        mapped.destroy()
    log.info("replicated commit log: the torn tail [%d, %d) dropped", reput, cut)
    return reput
