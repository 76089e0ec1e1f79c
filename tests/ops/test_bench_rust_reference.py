"""bench/rust_reference.py turns the benchmark's RocketMQ broker keys into rocketmq-rust's TOML:
every key lands in the table its schema owns, and a key it has no owner for is refused rather
than silently dropped (its broker rejects unknown keys at start-up, after a long wait)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from bench.rust_reference import broker_toml
from bench.side_by_side import store_settings


def settings(tmp_path: Path, **overrides: object) -> dict[str, object]:
    return {
        **store_settings(tmp_path),
        "brokerName": "broker-a",
        "listenPort": 30911,
        "namesrvAddr": "127.0.0.1:30876",
        **overrides,
    }


def test_the_benchmarks_keys_land_in_the_tables_rocketmq_rust_reads(tmp_path: Path) -> None:
    config = tomllib.loads(broker_toml(settings(tmp_path, flushDiskType="SYNC_FLUSH")))
    broker, store = config["broker"], config["store"]
    assert config["broker"]["brokerIdentity"] == {
        "brokerClusterName": "BenchCluster",
        "brokerId": 0,
        "brokerName": "broker-a",
    }
    assert broker["brokerIp1"] == "127.0.0.1"
    assert broker["listenPort"] == 30911
    assert broker["namesrvAddr"] == "127.0.0.1:30876"
    assert broker["brokerServerConfig"] == {"bindAddress": "127.0.0.1"}
    assert broker["storePathRootDir"] == store["storePathRootDir"] == str(tmp_path / "store")
    assert store["storePathCommitLog"] == str(tmp_path / "store" / "commitlog")
    assert store["flushDiskType"] == "SYNC_FLUSH"
    assert store["brokerRole"] == "ASYNC_MASTER"
    assert store["haListenPort"] == 30912
    # Its validation wants max < forcibly < warning.
    assert (
        store["diskMaxUsedSpaceRatio"]
        < store["diskSpaceCleanForciblyRatio"]
        < store["diskSpaceWarningLevelRatio"]
    )
    # Ours only: not passed on (the Rust schema would refuse them).
    text = broker_toml(settings(tmp_path))
    assert "metricsPromExporterEnable" not in text and "enableGrpcServer" not in text


def test_a_key_without_a_known_owner_is_refused(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="fileReservedTime"):
        broker_toml(settings(tmp_path, fileReservedTime=48))
