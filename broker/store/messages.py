"""What goes into the store and what comes out: the message the broker hands over, and the
results of putting, getting and querying."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


@dataclass(slots=True)
class StoreMessage:
    """A message as the broker hands it to the store; the store encodes the record itself."""

    topic: str
    queue_id: int
    body: bytes
    #: Encoded properties string (``protocol.message.encode_properties``).
    properties: str
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    #: ``protocol.message.pack_host`` form: 8 (IPv4) or 20 (IPv6) bytes.
    born_host: bytes = b"\0" * 8
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    #: ``java_hash(TAGS)`` or 0; for ``SCHEDULE_TOPIC_XXXX`` the delivery time (ms).
    tags_code: int = 0
    #: The KEYS property (space-separated), indexed as ``topic#key``.
    keys: str | None = None
    #: The UNIQ_KEY property, indexed as ``topic#uniqKey``.
    uniq_key: str | None = None
    #: 0: the store stamps the time of the append (ms).
    store_timestamp: int = 0


class PutStatus(Enum):
    # Members are singletons compared by identity: the C hash of the object instead of
    # Enum's Python-level hash of the name, looked up a few times per put.
    __hash__ = object.__hash__

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


#: Statuses under which the message is stored (only its durability or replication lags).
STORED_STATUSES = frozenset(
    {
        PutStatus.PUT_OK,
        PutStatus.FLUSH_DISK_TIMEOUT,
        PutStatus.FLUSH_SLAVE_TIMEOUT,
        PutStatus.SLAVE_NOT_AVAILABLE,
    }
)


@dataclass(slots=True)
class PutResult:
    status: PutStatus
    #: Commit-log offset of the first record.
    wrote_offset: int = 0
    wrote_bytes: int = 0
    #: Consume-queue offset of the first record.
    queue_offset: int = 0
    msg_count: int = 0
    #: Offset msgIds (``protocol.message.encode_offset_msg_id``) of each record.
    msg_ids: list[str] = field(default_factory=list)
    store_timestamp: int = 0
    #: Why the put was refused, for the producer (the disk-full remark); "" otherwise.
    remark: str = ""

    @property
    def ok(self) -> bool:
        """The message is stored."""
        return self.status in STORED_STATUSES


class GetStatus(Enum):
    __hash__ = object.__hash__  # as PutStatus's

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(slots=True)
class GetResult:
    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    #: Complete raw records in queue-offset order: slices of the store's mapped files (valid
    #: for as long as they are referenced, even if the file is deleted meanwhile).
    buffers: list[bytes | memoryview] = field(default_factory=list)
    message_count: int = 0
    buffer_total_size: int = 0
    suggest_pulling_from_slave: bool = False


@dataclass(slots=True)
class QueryResult:
    """Records whose index key matched, newest first, plus where the index stood."""

    records: list[bytes] = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phyoffset: int = 0
