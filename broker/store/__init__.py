"""The message store: commit log, consume queues, index, flush, checkpoint, recovery, retention.

The broker talks to :class:`MessageStore` only; see ``docs/store.md`` for the design.
"""

from .config import BrokerRole, FlushDiskType, StoreConfig
from .mapped_file import StoreError
from .messages import (
    GetResult,
    GetStatus,
    PutResult,
    PutStatus,
    QueryResult,
    StoreMessage,
)
from .store import MessageStore
from .store_stats import PUT_LATENCY_BUCKETS_MS, StoreStats

__all__ = [
    "PUT_LATENCY_BUCKETS_MS",
    "BrokerRole",
    "FlushDiskType",
    "GetResult",
    "GetStatus",
    "MessageStore",
    "PutResult",
    "PutStatus",
    "QueryResult",
    "StoreConfig",
    "StoreError",
    "StoreMessage",
    "StoreStats",
]
