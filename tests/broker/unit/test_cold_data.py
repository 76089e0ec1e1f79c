"""Cold-data flow control's accounts: what counts as cold, when a group is controlled (its own
threshold, the default, the global one), the periodic reset, and the table it answers."""

from __future__ import annotations

import json
import mmap
import struct
import time
from pathlib import Path

import pytest

from aiorocketmq.broker import cold_data
from aiorocketmq.broker.cold_data import ColdDataFlowControl, advise_read_ahead
from aiorocketmq.broker.config import BrokerConfig
from aiorocketmq.broker.store import StoreConfig

MEMORY = 10_000  # bytes of "RAM": 26 % of it, 2,600 bytes behind the end, is the hot area


def record(physical_offset: int, size: int = 100) -> bytes:
    data = bytearray(size)
    struct.pack_into(">q", data, 28, physical_offset)
    return bytes(data)


def control(tmp_path: Path, end: list[int], **broker: object) -> ColdDataFlowControl:
    config = BrokerConfig.load(
        None, {"storePathRootDir": str(tmp_path), "cgColdReadThreshold": 250, **broker}
    )
    store_config = StoreConfig.model_validate(
        {"storePathRootDir": str(tmp_path), "totalPhysicalMemory": MEMORY, "coldDataFlowControlEnable": True}
    )
    return ColdDataFlowControl(config, store_config, lambda: end[0])


def test_only_reads_further_behind_than_the_hot_area_count(tmp_path: Path) -> None:
    end = [10_000]
    cold = control(tmp_path, end)
    assert cold.is_cold(7_399) and not cold.is_cold(7_400)
    assert cold.account("g", [record(7_000), record(7_400), record(9_000)]) == 100
    assert cold.account("CID_RMQ_SYS_TRANS", [record(0)]) == 0, "system groups are never counted"
    assert cold.account("TOOLS_CONSUMER", [record(0)]) == 0
    assert cold.global_acc == 100


def test_a_group_is_controlled_at_its_threshold_or_the_global_one(tmp_path: Path) -> None:
    end = [100_000]
    cold = control(tmp_path, end, globalColdReadThreshold=1_000)
    assert not cold.controlled("g"), "a group that read nothing cold is not in the table"
    cold.account("g", [record(0), record(100)])
    assert not cold.controlled("g")  # 200 < 250
    cold.account("g", [record(200)])
    assert cold.controlled("g")  # 300 >= the default 250
    cold.configure({"g": 1_000, "h": 50})
    assert not cold.controlled("g"), "its own threshold rules"
    cold.account("h", [record(0)])
    assert cold.controlled("h")
    cold.remove("h")
    assert not cold.controlled("h")
    cold.account("other", [record(0, size=700)])  # everyone together: 1,100 >= 1,000
    assert cold.controlled("g") and cold.controlled("h")


def test_the_reset_clears_accounts_and_forgets_quiet_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    end = [100_000]
    cold = control(tmp_path, end)
    now = [1_000_000]
    monkeypatch.setattr(cold_data, "_now_ms", lambda: now[0])
    cold.account("g", [record(0, size=300)])
    cold.account("h", [record(0, size=300)])
    assert cold.controlled("g")
    now[0] += 30_000
    cold.account("h", [record(0, size=40)])
    now[0] += 31_000  # g last read cold 61 s ago, h 31 s ago
    cold.sweep()
    assert not cold.controlled("h") and cold.global_acc == 0
    table = json.loads(cold.info())
    assert table["runtimeTable"] == {
        "h": {"coldAcc": 0, "lastColdReadTimeMills": 1_030_000, "createTimeMills": 1_000_000}
    }
    assert {k: table[k] for k in ("cgColdReadThreshold", "globalColdReadThreshold", "globalAcc")} == {
        "cgColdReadThreshold": 250,
        "globalColdReadThreshold": 100 * 1024 * 1024,
        "globalAcc": 0,
    }


def test_nothing_counts_while_switched_off(tmp_path: Path) -> None:
    cold = control(tmp_path, [100_000])
    cold.store_config.cold_data_flow_control_enable = False
    assert cold.account("g", [record(0, size=1_000)]) == 0
    assert not cold.controlled("g")


def test_read_ahead_advice_reaches_every_mapping() -> None:
    maps = [mmap.mmap(-1, 4096) for _ in range(3)]
    try:
        assert advise_read_ahead(maps, False) == 3
        assert advise_read_ahead(maps, True) == 3
    finally:
        for m in maps:
            m.close()


def test_thresholds_are_reached_at_equality(tmp_path: Path) -> None:
    cold = control(tmp_path, [100_000], globalColdReadThreshold=500)
    cold.account("g", [record(0, size=250)])
    assert cold.controlled("g"), "250 of 250"
    cold.configure({"g": 10_000})
    cold.account("h", [record(0, size=250)])  # together 500 of 500
    assert cold.controlled("g")
    cold.remove("never-configured")  # nothing to remove is no error
    assert json.loads(cold.info())["configTable"] == {"g": 10_000}


def test_a_group_quiet_for_exactly_a_minute_leaves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cold = control(tmp_path, [100_000])
    now = [5_000_000]
    monkeypatch.setattr(cold_data, "_now_ms", lambda: now[0])
    cold.account("g", [record(0)])
    now[0] += cold_data.RESIDE_TIMEOUT_MS
    cold.sweep()
    assert json.loads(cold.info())["runtimeTable"] == {}


def test_times_are_whole_milliseconds() -> None:
    before = int(time.time() * 1000)
    stamp = cold_data._now_ms()
    assert isinstance(stamp, int) and before <= stamp <= before + 1_000


class RecordedMapping:
    """Stands in for an mmap to see the advice given (madvise's effect is the kernel's)."""

    def __init__(self) -> None:
        self.advice: list[int] = []

    def madvise(self, advice: int) -> None:
        self.advice.append(advice)


def test_read_ahead_off_advises_random_reads_and_on_normal() -> None:
    maps = [RecordedMapping(), RecordedMapping()]
    advise_read_ahead(maps, False)  # type: ignore[arg-type]
    advise_read_ahead(maps, True)  # type: ignore[arg-type]
    assert [m.advice for m in maps] == [[mmap.MADV_RANDOM, mmap.MADV_NORMAL]] * 2
