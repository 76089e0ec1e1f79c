"""StoreConfig: RocketMQ key names from a broker.conf, defaults, derived values, validation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from aiorocketmq.broker.store import BrokerRole, FlushDiskType, StoreConfig
from aiorocketmq.protocol.settings import ConfigError

BROKER_CONF = """\
# a broker.conf as operators write it: broker keys and store keys together
brokerClusterName=DefaultCluster
brokerName=broker-a
brokerId=0
storePathRootDir=~/rmq-store
storePathCommitLog=/data/commitlog
flushDiskType=SYNC_FLUSH
brokerRole=SLAVE
mappedFileSizeCommitLog=268435456
mappedFileSizeConsumeQueue=1001
fileReservedTime=48
deleteWhen=01;02
diskMaxUsedSpaceRatio=88
messageIndexEnable=false
checkCRCOnRecover=false
maxMessageSize=1048576
flushIntervalCommitLog=200
syncFlushTimeout=3000
maxTransferCountOnMessageInMemory=16
accessMessageInMemoryMaxRatio=30
"""


def test_loads_rocketmq_keys(tmp_path: Path) -> None:
    path = tmp_path / "broker.conf"
    path.write_text(BROKER_CONF)
    config = StoreConfig.load(path)
    assert config.store_path_root_dir == os.path.expanduser("~/rmq-store")
    assert config.commit_log_dir == Path("/data/commitlog")
    assert config.consume_queue_dir == Path(os.path.expanduser("~/rmq-store")) / "consumequeue"
    assert config.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert config.broker_role is BrokerRole.SLAVE
    assert config.mapped_file_size_commit_log == 256 << 20
    assert config.consume_queue_file_size == 1020
    assert config.delete_hours == frozenset({1, 2})
    assert (config.file_reserved_time, config.disk_max_used_space_ratio) == (48, 88)
    assert not config.message_index_enable and not config.check_crc_on_recover
    assert (config.max_message_size, config.flush_interval_commit_log, config.sync_flush_timeout) == (
        1 << 20,
        200,
        3000,
    )
    assert config.max_transfer_count_on_message_in_memory == 16
    assert "brokerName" in config.unknown_keys
    again = StoreConfig.load(
        overrides=dict(line.split("=", 1) for line in config.to_properties().splitlines())
    )
    assert again.model_dump() == config.model_dump()


def test_defaults_are_rocketmqs() -> None:
    config = StoreConfig()
    assert config.mapped_file_size_commit_log == 1 << 30
    assert config.consume_queue_file_size == 300_000 * 20
    assert config.flush_disk_type is FlushDiskType.ASYNC_FLUSH
    assert config.broker_role is BrokerRole.ASYNC_MASTER
    assert (config.max_hash_slot_num, config.max_index_num) == (5_000_000, 20_000_000)
    assert (config.flush_interval_commit_log, config.flush_commit_log_least_pages) == (500, 4)
    assert config.flush_commit_log_thorough_interval == 10_000
    assert (config.flush_interval_consume_queue, config.sync_flush_timeout) == (1000, 5000)
    assert (config.file_reserved_time, config.delete_when, config.disk_max_used_space_ratio) == (72, "04", 75)
    assert (
        config.max_transfer_bytes_on_message_in_memory,
        config.max_transfer_count_on_message_in_memory,
    ) == (
        262144,
        32,
    )
    assert (config.max_transfer_bytes_on_message_in_disk, config.max_transfer_count_on_message_in_disk) == (
        65536,
        8,
    )
    assert config.access_message_in_memory_max_ratio == 40 and config.max_message_size == 4 << 20
    assert config.delay_levels[:3] == [1000, 5000, 10_000] and len(config.delay_levels) == 18
    assert StoreConfig(totalPhysicalMemory=1000).hot_data_bytes == 400


@pytest.mark.parametrize(
    "key, value",
    [
        ("deleteWhen", "25"),
        ("flushDiskType", "SOMETIMES"),
        ("messageDelayLevel", "1x"),
        ("diskMaxUsedSpaceRatio", "101"),
    ],
)
def test_rejects_bad_values(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=key if key != "flushDiskType" else "flush"):
        StoreConfig.load(overrides={key: value})
