"""Controller mode's broker side without a controller: the settings (Apache 5.3.3's keys and
defaults), the start-up rule on brokerId/brokerRole, the broker-id files under the store (Apache's
``BrokerMetadata`` format), and the controller-mode requests on a broker outside controller mode.

The protocol against a real controller (Apache 5.3.3's) is tests/interop/test_controller_mode_apache.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from aiorocketmq.broker.config import BrokerConfig
from aiorocketmq.broker.ha import check_role, ha_address
from aiorocketmq.broker.handlers.admin import ControllerModeHandlers
from aiorocketmq.broker.replicas import BrokerIdentityFile
from aiorocketmq.broker.store import BrokerRole, MessageStore, StoreConfig
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.controller import ControllerRequestCode
from aiorocketmq.protocol.errors import ServerSystemError
from aiorocketmq.protocol.settings import ConfigError
from aiorocketmq.protocol.transport import Connection


def test_controller_keys_default_as_apache() -> None:
    config = BrokerConfig()
    assert not config.enable_controller_mode
    assert config.controller_addr == "" and config.controller_addrs == []
    assert not config.fetch_controller_addr_by_dns_lookup
    assert config.controller_heart_beat_timeout_mills == 10_000
    assert config.broker_heartbeat_interval == 1000
    assert config.sync_broker_metadata_period == 5000
    assert config.check_sync_state_set_period == 5000
    assert config.sync_controller_metadata_period == 10_000
    assert config.broker_election_priority == 2**31 - 1
    assert not config.enable_slave_acting_master
    assert not config.all_ack_in_sync_state_set
    assert not config.sync_from_last_file and not config.async_learner
    assert config.in_sync_replicas == config.min_in_sync_replicas == config.total_replicas == 1
    assert config.ha_max_time_slave_not_catchup == 15_000


def test_controller_keys_from_a_broker_conf(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "brokerId=-1\nbrokerRole=SLAVE\nenableControllerMode=true\n"
        "controllerAddr=10.0.0.1:9878; 10.0.0.2:9878\nallAckInSyncStateSet=true\n"
        "brokerElectionPriority=3\ncontrollerHeartBeatTimeoutMills=3000\n"
        f"storePathRootDir={tmp_path}\n"
    )
    config = BrokerConfig.load(conf)
    store_config = StoreConfig.load(conf)
    assert config.enable_controller_mode and config.broker_id == -1
    assert config.controller_addrs == ["10.0.0.1:9878", "10.0.0.2:9878"]
    assert config.all_ack_in_sync_state_set and config.broker_election_priority == 3
    assert config.broker_identity_path == tmp_path / "brokerIdentity"
    assert config.epoch_file_path == tmp_path / "epochFileCheckpoint"
    check_role(config, store_config)  # brokerId -1 and SLAVE: the controller decides


def test_controller_mode_needs_controller_addresses() -> None:
    with pytest.raises(ConfigError, match="controllerAddr"):
        check_role(BrokerConfig(enableControllerMode=True, brokerId=-1), StoreConfig(brokerRole="SLAVE"))


def test_without_controller_mode_a_slave_still_needs_a_positive_id() -> None:
    with pytest.raises(ConfigError, match="brokerId > 0"):
        check_role(BrokerConfig(brokerId=-1), StoreConfig(brokerRole=BrokerRole.SLAVE))
    check_role(BrokerConfig(brokerId=1), StoreConfig(brokerRole=BrokerRole.SLAVE))


def test_ha_address_is_the_next_port() -> None:
    assert ha_address("10.0.0.7:30911") == "10.0.0.7:30912"


def test_identity_files_in_apaches_format(tmp_path: Path) -> None:
    final = BrokerIdentityFile(tmp_path / "brokerIdentity")
    temp = BrokerIdentityFile(tmp_path / "brokerIdentity-temp", temp=True)
    assert not final.read() and not temp.read()
    temp.persist("DefaultCluster", "broker-a", 3, "127.0.0.1:30911;1700000000000")
    assert temp.path.read_text() == "DefaultCluster#broker-a#3#127.0.0.1:30911;1700000000000"
    again = BrokerIdentityFile(temp.path, temp=True)
    assert (
        again.read() and again.broker_id == 3 and again.register_check_code == "127.0.0.1:30911;1700000000000"
    )
    final.persist("DefaultCluster", "broker-a", 3)
    temp.clear()
    assert final.path.read_text() == "DefaultCluster#broker-a#3"
    assert not temp.path.exists() and temp.broker_id is None
    reread = BrokerIdentityFile(final.path)
    assert reread.read() and (reread.cluster_name, reread.broker_name, reread.broker_id) == (
        "DefaultCluster",
        "broker-a",
        3,
    )


def test_a_temp_file_without_its_check_code_is_not_loaded(tmp_path: Path) -> None:
    (tmp_path / "brokerIdentity-temp").write_text("DefaultCluster#broker-a#3")
    assert not BrokerIdentityFile(tmp_path / "brokerIdentity-temp", temp=True).read()
    (tmp_path / "brokerIdentity").write_text("garbage")
    assert not BrokerIdentityFile(tmp_path / "brokerIdentity").read()


def test_controller_requests_outside_controller_mode(tmp_path: Path) -> None:
    """As Apache's broker: a role notification is answered SUCCESS (and ignored), the epoch
    cache is refused."""
    store = MessageStore(StoreConfig(storePathRootDir=str(tmp_path)), store_host=bytes(8))
    handlers = ControllerModeHandlers(BrokerConfig(), store=store, replicas=None)
    conn = cast(Connection, None)
    with pytest.raises(ServerSystemError, match="only for controllerMode"):
        handlers.epoch_cache(conn, RemotingCommand.request(ControllerRequestCode.GET_BROKER_EPOCH_CACHE))
    assert set(handlers.handlers()) == {
        ControllerRequestCode.NOTIFY_BROKER_ROLE_CHANGED,
        ControllerRequestCode.GET_BROKER_EPOCH_CACHE,
    }


async def test_role_notification_outside_controller_mode_succeeds(tmp_path: Path) -> None:
    store = MessageStore(StoreConfig(storePathRootDir=str(tmp_path)), store_host=bytes(8))
    handlers = ControllerModeHandlers(BrokerConfig(), store=store, replicas=None)
    request = RemotingCommand.request(
        ControllerRequestCode.NOTIFY_BROKER_ROLE_CHANGED,
        {"masterAddress": "127.0.0.1:1", "masterEpoch": "2", "masterBrokerId": "1", "syncStateSetEpoch": "1"},
        b'{"syncStateSet":[1],"syncStateSetEpoch":1}',
    )
    response = await handlers.role_changed(cast(Connection, None), request)
    assert response.code == 0
