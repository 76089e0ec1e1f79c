"""Cold-data flow control (RocketMQ 5): consumer groups that read far behind the commit log's
end are slowed down, so one backlog replay cannot evict what every other group reads from
memory.

A message is *cold* when it lies further behind the commit log's end than
``accessMessageInMemoryHotRatio`` percent of physical memory: reading it goes to the disk.
With ``coldDataFlowControlEnable`` on, every pull adds the cold bytes it returned to its
group's account and to a global one. A group whose account has reached its threshold (its own,
set with UPDATE_COLD_DATA_FLOW_CTR_CONFIG, else ``cgColdReadThreshold``), or any group once the
global account reaches ``globalColdReadThreshold``, is controlled: its next pull of cold data
is refused with SYSTEM_BUSY if it is a push consumer (the client backs off and pulls again),
or held for three seconds and then answered with one message if it pulls actively. Every five
seconds the accounts start again from zero; a group that has read nothing cold for a minute
leaves the table. Apache's optional adaptive strategy (``coldCtrStrategyEnable``) and its
page-cache scan (``coldDataScanEnable``: ours counts the whole cold area) are not built.

GET_COLD_DATA_FLOW_CTR_INFO answers the table as Apache's broker does, which ``mqadmin
getColdDataFlowCtrInfo`` prints.
"""

from __future__ import annotations

import json
import mmap
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from aiorocketmq.protocol.names import is_system_group

from .config import BrokerConfig
from .store import StoreConfig

#: Seconds between two resets of the accounts (Apache: 5 s while enabled).
SWEEP_INTERVAL = 5.0
#: A group that read nothing cold for this long leaves the table.
RESIDE_TIMEOUT_MS = 60_000
#: How long an active pull of cold data by a controlled group is held.
HOLD_SECONDS = 3.0

_PHYSICAL_OFFSET = struct.Struct(">q")
_PHYSICAL_OFFSET_AT = 28  # total size, magic, crc, queue id, flag, queue offset


@dataclass
class _Account:
    cold_acc: int = 0
    last_cold_read_time_mills: int = field(default_factory=lambda: _now_ms())
    create_time_mills: int = field(default_factory=lambda: _now_ms())


class ColdDataFlowControl:
    """The cold-read accounts of consumer groups, their thresholds, and the rules above."""

    def __init__(
        self, config: BrokerConfig, store_config: StoreConfig, max_physical_offset: Callable[[], int]
    ) -> None:
        """The settings are read where they are used, so UPDATE_BROKER_CONFIG changes them."""
        self.config = config
        self.store_config = store_config
        self._max_physical_offset = max_physical_offset
        #: Thresholds set by an operator, by group.
        self.configured: dict[str, int] = {}
        self._runtime: dict[str, _Account] = {}
        self.global_acc = 0

    @property
    def enabled(self) -> bool:
        return self.store_config.cold_data_flow_control_enable

    @property
    def group_threshold(self) -> int:
        return self.config.cg_cold_read_threshold

    @property
    def global_threshold(self) -> int:
        return self.config.global_cold_read_threshold

    # -- what pulls ask ----------------------------------------------------------------------

    def is_cold(self, physical_offset: int) -> bool:
        return self._max_physical_offset() - physical_offset > self.store_config.cold_area_bytes

    def controlled(self, group: str) -> bool:
        """Whether ``group``'s cold reads are being slowed down now."""
        if not self.enabled or is_system_group(group):
            return False
        account = self._runtime.get(group)
        if account is None:
            return False
        if account.cold_acc >= self.threshold(group):
            return True
        return self.global_acc >= self.global_threshold

    def account(self, group: str, records: Iterable[bytes | memoryview]) -> int:
        """Add the cold bytes of the records a pull returned to ``group``'s account; returns
        them."""
        if not self.enabled or is_system_group(group):
            return 0
        end, hot = self._max_physical_offset(), self.store_config.cold_area_bytes
        cold = sum(
            len(record)
            for record in records
            if end - _PHYSICAL_OFFSET.unpack_from(record, _PHYSICAL_OFFSET_AT)[0] > hot
        )
        if cold:
            self.global_acc += cold
            account = self._runtime.setdefault(group, _Account())
            account.cold_acc += cold
            account.last_cold_read_time_mills = _now_ms()
        return cold

    def threshold(self, group: str) -> int:
        return self.configured.get(group, self.group_threshold)

    # -- administration -----------------------------------------------------------------------

    def configure(self, thresholds: dict[str, int]) -> None:
        self.configured.update(thresholds)

    def remove(self, group: str) -> None:
        self.configured.pop(group, None)

    def sweep(self) -> None:
        """Start every account again from zero; forget groups that stopped reading cold data."""
        deadline = _now_ms() - RESIDE_TIMEOUT_MS
        for group in [g for g, a in self._runtime.items() if a.last_cold_read_time_mills <= deadline]:
            del self._runtime[group]
        for account in self._runtime.values():
            account.cold_acc = 0
        self.global_acc = 0

    def info(self) -> bytes:
        """GET_COLD_DATA_FLOW_CTR_INFO's body (Apache's keys)."""
        return json.dumps(
            {
                "runtimeTable": {
                    group: {
                        "coldAcc": a.cold_acc,
                        "lastColdReadTimeMills": a.last_cold_read_time_mills,
                        "createTimeMills": a.create_time_mills,
                    }
                    for group, a in self._runtime.items()
                },
                "configTable": dict(self.configured),
                "cgColdReadThreshold": self.group_threshold,
                "globalColdReadThreshold": self.global_threshold,
                "globalAcc": self.global_acc,
            }
        ).encode()


def advise_read_ahead(maps: Iterable[mmap.mmap], read_ahead: bool) -> int:
    """Tell the kernel whether to read ahead in these mappings (the commit log's files):
    SET_COMMITLOG_READ_MODE's MADV_NORMAL or MADV_RANDOM. Returns how many were advised."""
    advice = mmap.MADV_NORMAL if read_ahead else mmap.MADV_RANDOM
    count = 0
    for mapping in maps:
        mapping.madvise(advice)
        count += 1
    return count


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
