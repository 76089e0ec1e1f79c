"""Settings in RocketMQ's ``key=value`` files, the error registry, and the loop choice."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pydantic import Field

from aiorocketmq.protocol import loop
from aiorocketmq.protocol.codes import ResponseCode
from aiorocketmq.protocol.errors import (
    BrokerError,
    ClientError,
    ConnectionClosedError,
    MQError,
    NoRouteError,
    ProtocolError,
    PullNotFoundError,
    RemotingError,
    RequestTimeoutError,
    ServerSystemError,
    TopicNotExistError,
    error_class,
    error_for_code,
)
from aiorocketmq.protocol.settings import ConfigError, Settings, read_properties


def test_read_properties_like_java() -> None:
    text = (
        "# broker.conf\n"
        "! also a comment\n"
        "brokerClusterName = DefaultCluster\n"
        "brokerName=broker-a\n"
        "brokerId: 0\n"
        "listenPort 10911\n"
        "\tdeleteWhen\t=\t04  \n"
        "namesrvAddr=10.0.0.1:9876;\\\n"
        "    10.0.0.2:9876\n"
        "emptyValue=\n"
        "bareKey\n"
        "url=http://x/y?a=b\n"
        "\n"
    )
    assert read_properties(text) == {
        "brokerClusterName": "DefaultCluster",
        "brokerName": "broker-a",
        "brokerId": "0",
        "listenPort": "10911",
        "deleteWhen": "04",
        "namesrvAddr": "10.0.0.1:9876;10.0.0.2:9876",
        "emptyValue": "",
        "bareKey": "",
        "url": "http://x/y?a=b",
    }


class _Demo(Settings):
    listen_port: int = Field(10911, alias="listenPort")
    broker_name: str = Field("broker-a", alias="brokerName")
    auto_create: bool = Field(True, alias="autoCreateTopicEnable")


def test_settings_load_file_then_overrides(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("listenPort=20911\nautoCreateTopicEnable=false\nflushDiskType=SYNC_FLUSH\n")
    settings = _Demo.load(conf, {"brokerName": "broker-b", "listenPort": None})
    assert settings.listen_port == 20911
    assert settings.broker_name == "broker-b"
    assert settings.auto_create is False
    assert settings.unknown_keys == ["flushDiskType"]
    assert settings.to_properties() == "listenPort=20911\nbrokerName=broker-b\nautoCreateTopicEnable=false\n"
    assert _Demo.load().unknown_keys == []


def test_settings_errors_name_the_key_and_file(tmp_path: Path) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text("listenPort=abc\n")
    with pytest.raises(
        ConfigError, match=r"invalid configuration in .*bad\.conf: listenPort: .* \(got 'abc'\)"
    ):
        _Demo.load(conf)
    with pytest.raises(ConfigError, match="cannot read config file"):
        _Demo.load(tmp_path / "missing.conf")
    assert issubclass(ConfigError, MQError)


def test_every_registered_code_maps_to_one_class() -> None:
    seen: dict[type[BrokerError], int] = {}
    for code in ResponseCode:
        if code == ResponseCode.SUCCESS:
            continue
        error = error_for_code(code, "why")
        assert isinstance(error, BrokerError)
        assert error.code == code
        assert error.remark == "why"
        assert error_class(code) is type(error)
        if type(error) is not BrokerError:
            assert type(error) not in seen, f"{type(error).__name__} registered twice"
            seen[type(error)] = code
    assert error_class(ResponseCode.TOPIC_NOT_EXIST) is TopicNotExistError
    assert error_class(ResponseCode.SYSTEM_ERROR) is ServerSystemError
    assert isinstance(error_for_code(19), PullNotFoundError)


def test_broker_error_text() -> None:
    assert str(error_for_code(17, "no route")) == "TOPIC_NOT_EXIST(17): no route"
    assert str(error_for_code(17)) == "TOPIC_NOT_EXIST(17)"
    unknown = error_for_code(999, "odd")
    assert type(unknown) is BrokerError and unknown.code == 999
    assert str(unknown) == "CODE_999(999): odd"
    assert error_class(999) is BrokerError


def test_exception_tree() -> None:
    for cls in (ProtocolError, RemotingError, BrokerError, ClientError):
        assert issubclass(cls, MQError)
    assert issubclass(ConnectionClosedError, RemotingError)
    assert issubclass(RequestTimeoutError, RemotingError) and issubclass(RequestTimeoutError, TimeoutError)
    assert issubclass(NoRouteError, ClientError)


def test_loop_runs_on_uvloop() -> None:
    async def which() -> str:
        return type(asyncio.get_running_loop()).__module__

    assert loop.run(which()).startswith("uvloop")
    fresh = loop.new_event_loop()
    try:
        assert type(fresh).__module__.startswith("uvloop")
    finally:
        fresh.close()
