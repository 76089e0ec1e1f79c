"""Name server settings, under RocketMQ's own key names so an existing
``namesrv.properties`` keeps working.

``listenPort``, ``kvConfigPath``, ``orderMessageEnable`` and ``enableTopicList`` are the Java
name server's keys; ``bindAddress`` and ``scanNotActiveBrokerInterval`` are RocketMQ 5's;
``brokerChannelExpiredTime`` is named after the Java constant that fixes the broker expiry at
120 s in 4.x (here it is a setting, so tests can run on a seconds scale). ``storePathRootDir``
is the data directory; ``kvConfigPath`` defaults to ``<storePathRootDir>/kvConfig.json``.
RocketMQ's ``tls.server.*`` keys (or ``tls.config.file``) put the listening socket under TLS.

``authenticationEnabled`` is Apache 5.3.3's ACL 2.0 switch (``AuthConfig``), which Apache's name
server does not read: here it makes every write signed by an account of ``authUsersFile``
(default ``<storePathRootDir>/namesrv_users.yml``; see :mod:`namesrv.auth`).

``enableControllerInNamesrv=true`` runs a controller replica inside the name server, as
Apache's does: the same file's controller keys (``controllerDLegerPeers``, ...; see
:mod:`controller.config`) configure it, and it serves on its own peer address.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

from pydantic import Field, field_validator

from aiorocketmq.controller.config import ControllerSettings
from aiorocketmq.protocol.settings import ServerLimitSettings, TlsSettings

DEFAULT_STORE_DIR = "~/namesrv"
KV_CONFIG_FILE = "kvConfig.json"
USERS_FILE = "namesrv_users.yml"


class NamesrvSettings(TlsSettings, ServerLimitSettings):
    listen_port: int = Field(9876, alias="listenPort", ge=0, le=65535)
    bind_address: str = Field("0.0.0.0", alias="bindAddress", min_length=1)
    store_path_root_dir: str = Field(DEFAULT_STORE_DIR, alias="storePathRootDir", min_length=1)
    kv_config_path: str = Field("", alias="kvConfigPath")
    order_message_enable: bool = Field(False, alias="orderMessageEnable")
    broker_channel_expired_time: int = Field(120_000, alias="brokerChannelExpiredTime", gt=0)
    scan_not_active_broker_interval: int = Field(10_000, alias="scanNotActiveBrokerInterval", gt=0)
    #: Off, the topic-list queries by cluster and by unit flag answer SYSTEM_ERROR "disable".
    enable_topic_list: bool = Field(True, alias="enableTopicList")
    #: Every write (registrations, KV config, permissions, topic deletion) signed by an account
    #: of the users file; off by default, as Apache's name server has no authentication.
    authentication_enabled: bool = Field(False, alias="authenticationEnabled")
    auth_users_file: str = Field("", alias="authUsersFile")
    #: Run a controller replica in this process (its keys are read from the same file).
    enable_controller_in_namesrv: bool = Field(False, alias="enableControllerInNamesrv")

    _controller_settings: ControllerSettings | None = None

    @classmethod
    def load(cls, path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> Self:
        """As :meth:`Settings.load`; the controller's keys in the file are known too."""
        settings = super().load(path, overrides)
        controller = ControllerSettings.load(path)
        settings._controller_settings = controller
        settings._unknown_keys = [k for k in settings.unknown_keys if k in controller.unknown_keys]
        return settings

    def to_properties(self) -> str:
        """As :meth:`TlsSettings.to_properties`; ``enableControllerInNamesrv`` only when on."""
        text = super().to_properties()
        if self.enable_controller_in_namesrv:
            return text
        return "".join(
            line
            for line in text.splitlines(keepends=True)
            if not line.startswith("enableControllerInNamesrv=")
        )

    @property
    def controller_settings(self) -> ControllerSettings:
        """The embedded controller's settings (from the file this was loaded from)."""
        if self._controller_settings is None:
            self._controller_settings = ControllerSettings()
        return self._controller_settings

    @field_validator("kv_config_path", "store_path_root_dir", "auth_users_file", mode="before")
    @classmethod
    def _strip(cls, value: object) -> object:
        return value.strip() if isinstance(value, str) else value

    @property
    def store_dir(self) -> Path:
        return Path(self.store_path_root_dir).expanduser()

    @property
    def kv_config_file(self) -> Path:
        """``kvConfigPath`` when set, else ``kvConfig.json`` in the store directory."""
        if self.kv_config_path:
            return Path(self.kv_config_path).expanduser()
        return self.store_dir / KV_CONFIG_FILE

    @property
    def users_file(self) -> Path:
        """``authUsersFile`` when set, else ``namesrv_users.yml`` in the store directory."""
        if self.auth_users_file:
            return Path(self.auth_users_file).expanduser()
        return self.store_dir / USERS_FILE

    @property
    def broker_expiry(self) -> float:
        """Seconds a broker may stay silent before it is dropped."""
        return self.broker_channel_expired_time / 1000

    @property
    def scan_interval(self) -> float:
        """Seconds between liveness scans."""
        return self.scan_not_active_broker_interval / 1000
