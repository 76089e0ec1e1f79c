"""Store settings under RocketMQ's broker-config key names (``broker.conf``).

The broker reads its own settings and these from the same file; every field's alias is the key
an operator already knows (``storePathRootDir``, ``flushDiskType``, ``mappedFileSizeCommitLog``,
...). Sizes are bytes, intervals milliseconds, ``fileReservedTime`` hours, as in RocketMQ.
"""

from __future__ import annotations

import os
import re
from enum import StrEnum
from pathlib import Path

from pydantic import Field, field_validator

from aiorocketmq.protocol.settings import ConfigError, Settings

CONSUME_QUEUE_UNIT_SIZE = 20
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_DELAY_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class FlushDiskType(StrEnum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


class BrokerRole(StrEnum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


def parse_delay_levels(text: str) -> list[int]:
    """``"1s 5s 10s ..."`` → delays in ms; level N is index N-1."""
    delays = []
    for item in text.split():
        match = re.fullmatch(r"(\d+)([smhd])", item)
        if not match:
            raise ConfigError(f"messageDelayLevel item {item!r} is not <number><s|m|h|d>")
        delays.append(int(match.group(1)) * _DELAY_UNITS[match.group(2)])
    if not delays:
        raise ConfigError("messageDelayLevel defines no level")
    return delays


def _total_physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 << 30


class StoreConfig(Settings):
    """Message-store settings; field aliases are RocketMQ's ``MessageStoreConfig`` keys."""

    store_path_root_dir: str = Field(str(Path.home() / "store"), alias="storePathRootDir")
    #: Commit-log directory; empty means ``{storePathRootDir}/commitlog``.
    store_path_commit_log: str = Field("", alias="storePathCommitLog")
    mapped_file_size_commit_log: int = Field(1 << 30, alias="mappedFileSizeCommitLog", ge=4096)
    #: Rounded up to a whole number of 20-byte entries.
    mapped_file_size_consume_queue: int = Field(
        300_000 * CONSUME_QUEUE_UNIT_SIZE, alias="mappedFileSizeConsumeQueue", ge=CONSUME_QUEUE_UNIT_SIZE
    )
    flush_disk_type: FlushDiskType = Field(FlushDiskType.ASYNC_FLUSH, alias="flushDiskType")
    broker_role: BrokerRole = Field(BrokerRole.ASYNC_MASTER, alias="brokerRole")
    max_message_size: int = Field(4 << 20, alias="maxMessageSize", ge=1)
    message_index_enable: bool = Field(True, alias="messageIndexEnable")
    max_hash_slot_num: int = Field(5_000_000, alias="maxHashSlotNum", ge=1)
    max_index_num: int = Field(20_000_000, alias="maxIndexNum", ge=2)
    flush_interval_commit_log: int = Field(500, alias="flushIntervalCommitLog", ge=1)
    flush_commit_log_least_pages: int = Field(4, alias="flushCommitLogLeastPages", ge=0)
    flush_commit_log_thorough_interval: int = Field(10_000, alias="flushCommitLogThoroughInterval", ge=0)
    flush_interval_consume_queue: int = Field(1000, alias="flushIntervalConsumeQueue", ge=1)
    flush_consume_queue_least_pages: int = Field(2, alias="flushConsumeQueueLeastPages", ge=0)
    flush_consume_queue_thorough_interval: int = Field(
        60_000, alias="flushConsumeQueueThoroughInterval", ge=0
    )
    sync_flush_timeout: int = Field(5000, alias="syncFlushTimeout", ge=1)
    #: Hours a commit-log file is kept after its last write.
    file_reserved_time: int = Field(72, alias="fileReservedTime", ge=0)
    #: Hours of the day (``"04"``, or ``"04;05"``) at which expired files are deleted.
    delete_when: str = Field("04", alias="deleteWhen")
    #: Percent of the disk above which expired files are deleted at any hour.
    disk_max_used_space_ratio: int = Field(75, alias="diskMaxUsedSpaceRatio", ge=0, le=100)
    #: Fraction of the disk above which files are deleted even before they expire (a percent,
    #: as RocketMQ 5 gives it, is taken too).
    disk_space_clean_forcibly_ratio: float = Field(0.85, alias="diskSpaceCleanForciblyRatio", ge=0, le=1)
    #: Fraction of the disk above which the store refuses new messages (or a percent).
    disk_space_warning_level_ratio: float = Field(0.90, alias="diskSpaceWarningLevelRatio", ge=0, le=1)
    #: Whether forced clean-up (past ``diskSpaceCleanForciblyRatio``) may delete commit-log files
    #: holding messages a subscribed group has not consumed yet. Apache defaults to true; we
    #: default to false so a full disk refuses new messages rather than dropping unread ones
    #: (docs/operations.md).
    clean_file_forcibly_enable: bool = Field(False, alias="cleanFileForciblyEnable")
    clean_resource_interval: int = Field(10_000, alias="cleanResourceInterval", ge=1)
    check_crc_on_recover: bool = Field(True, alias="checkCRCOnRecover")
    max_transfer_bytes_on_message_in_memory: int = Field(
        256 * 1024, alias="maxTransferBytesOnMessageInMemory", ge=1
    )
    max_transfer_count_on_message_in_memory: int = Field(32, alias="maxTransferCountOnMessageInMemory", ge=1)
    max_transfer_bytes_on_message_in_disk: int = Field(
        64 * 1024, alias="maxTransferBytesOnMessageInDisk", ge=1
    )
    max_transfer_count_on_message_in_disk: int = Field(8, alias="maxTransferCountOnMessageInDisk", ge=1)
    #: Messages further than this percent of RAM behind the commit-log end count as "in disk".
    access_message_in_memory_max_ratio: int = Field(40, alias="accessMessageInMemoryMaxRatio", ge=0, le=100)
    #: Bytes of RAM the hot/cold rule uses; 0 probes the machine. Not a RocketMQ key: it makes
    #: the rule deterministic for tests and for containers whose limit is below the host's RAM.
    total_physical_memory: int = Field(0, alias="totalPhysicalMemory", ge=0)
    offset_check_in_slave: bool = Field(False, alias="offsetCheckInSlave")
    #: RocketMQ 5's cold-data flow control (broker/cold_data.py): on, groups reading further
    #: behind than ``accessMessageInMemoryHotRatio`` percent of RAM are slowed down.
    cold_data_flow_control_enable: bool = Field(False, alias="coldDataFlowControlEnable")
    access_message_in_memory_hot_ratio: int = Field(26, alias="accessMessageInMemoryHotRatio", ge=0, le=100)
    #: Whether the kernel reads ahead in the commit log (SET_COMMITLOG_READ_MODE turns it off).
    data_read_ahead_enable: bool = Field(True, alias="dataReadAheadEnable")
    #: Delay levels; recovery rebuilds ``SCHEDULE_TOPIC_XXXX`` entries (delivery time) with them.
    message_delay_level: str = Field(DEFAULT_DELAY_LEVELS, alias="messageDelayLevel")
    # -- master/slave replication (docs/operations.md "High availability") --------------------
    #: Accepted for old config files only: the HA port is always ``listenPort + 1``.
    ha_listen_port: int = Field(10912, alias="haListenPort")
    #: A slave's fixed ``host:port`` of its master's HA port; unset, the name server tells it.
    ha_master_address: str | None = Field(None, alias="haMasterAddress")
    #: Idle ms after which the slave re-reports its offset and the master sends a heartbeat.
    ha_send_heartbeat_interval: int = Field(5000, alias="haSendHeartbeatInterval", ge=1)
    #: Ms without traffic after which either side closes the replication connection.
    ha_housekeeping_interval: int = Field(20_000, alias="haHousekeepingInterval", ge=1)
    #: Most commit-log bytes in one transfer frame.
    ha_transfer_batch_size: int = Field(32 * 1024, alias="haTransferBatchSize", ge=1)
    #: A SYNC_MASTER answers SLAVE_NOT_AVAILABLE while its slave lags more than this many bytes.
    ha_slave_fallbehind_max: int = Field(256 << 20, alias="haSlaveFallbehindMax", ge=0)
    #: Ms a SYNC_MASTER waits for its slave before answering FLUSH_SLAVE_TIMEOUT.
    slave_timeout: int = Field(3000, alias="slaveTimeout", ge=1)
    #: Controller mode: dispatch (make visible to consumers) past the confirm offset, the
    #: commit-log offset every SyncStateSet member holds (RocketMQ's key; off as there).
    read_un_committed: bool = Field(False, alias="readUnCommitted")

    @field_validator("disk_space_clean_forcibly_ratio", "disk_space_warning_level_ratio", mode="before")
    @classmethod
    def _fraction_or_percent(cls, value: object) -> object:
        """4.x gives these as a fraction (0.90), RocketMQ 5 as a percent (90): both are taken."""
        try:
            number = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return value  # pydantic says what is wrong with it
        return number / 100 if 1 < number <= 100 else number

    @field_validator("ha_master_address")
    @classmethod
    def _short_address_is_none(cls, value: str | None) -> str | None:
        # RocketMQ uses haMasterAddress only when it has at least 6 characters.
        return value.strip() if value is not None and len(value.strip()) >= 6 else None

    @field_validator("message_delay_level")
    @classmethod
    def _valid_levels(cls, value: str) -> str:
        parse_delay_levels(value)
        return value

    @field_validator("delete_when")
    @classmethod
    def _valid_hours(cls, value: str) -> str:
        for part in value.split(";"):
            part = part.strip()
            if part and not (part.isdigit() and 0 <= int(part) <= 23):
                raise ValueError(f"deleteWhen hour {part!r} is not 0..23")
        return value

    @field_validator("store_path_root_dir", "store_path_commit_log")
    @classmethod
    def _expand_home(cls, value: str) -> str:
        return os.path.expanduser(value) if value else value

    # -- derived -----------------------------------------------------------------------------

    @property
    def root_dir(self) -> Path:
        return Path(self.store_path_root_dir)

    @property
    def commit_log_dir(self) -> Path:
        return Path(self.store_path_commit_log) if self.store_path_commit_log else self.root_dir / "commitlog"

    @property
    def consume_queue_dir(self) -> Path:
        return self.root_dir / "consumequeue"

    @property
    def index_dir(self) -> Path:
        return self.root_dir / "index"

    @property
    def consume_queue_file_size(self) -> int:
        unit = CONSUME_QUEUE_UNIT_SIZE
        return -(-self.mapped_file_size_consume_queue // unit) * unit

    @property
    def delete_hours(self) -> frozenset[int]:
        return frozenset(int(p) for p in self.delete_when.split(";") if p.strip())

    @property
    def delay_levels(self) -> list[int]:
        return parse_delay_levels(self.message_delay_level)

    @property
    def cold_area_bytes(self) -> int:
        """How far behind the commit-log end a message may be before cold-data flow control
        counts reading it as cold."""
        memory = self.total_physical_memory or _total_physical_memory()
        return memory * self.access_message_in_memory_hot_ratio // 100

    @property
    def hot_data_bytes(self) -> int:
        """How far behind the commit-log end a message may be and still count as in memory."""
        memory = self.total_physical_memory or _total_physical_memory()
        return memory * self.access_message_in_memory_max_ratio // 100
