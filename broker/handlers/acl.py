"""The ACL administration requests (RocketMQ 4.9's codes 50-54): create or update an account,
delete one, replace the global white list, and read the ACL files' versions or contents.

Edits go through :mod:`aiorocketmq.broker.acl`, which rewrites the yml file atomically and
reloads the rules at once. Who may call these is the access check's business (they are
admin-only codes when ACL is on); with ACL off they answer that ACL is not enabled.
"""

from __future__ import annotations

import json

from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import BrokerError, ServerSystemError
from aiorocketmq.protocol.headers import (
    CreateAccessConfigRequestHeader,
    DeleteAccessConfigRequestHeader,
    GetBrokerAclConfigResponseHeader,
    UpdateGlobalWhiteAddrsConfigRequestHeader,
)
from aiorocketmq.protocol.transport import Connection, Handler

from ..acl import (
    AccessValidator,
    AclConfigError,
    data_versions,
    delete_account,
    update_account,
    update_global_white,
)
from ..config import BrokerConfig


def _split(text: str | None) -> list[str]:
    return [item.strip() for item in (text or "").split(",") if item.strip()]


class AclHandlers:
    def __init__(self, config: BrokerConfig, validator: AccessValidator | None) -> None:
        self.config = config
        self.validator = validator

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.UPDATE_AND_CREATE_ACL_CONFIG: self.update_account,
            RequestCode.DELETE_ACL_CONFIG: self.delete_account,
            RequestCode.GET_BROKER_CLUSTER_ACL_INFO: self.versions,
            RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: self.update_global_white,
            RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG: self.contents,
        }

    def _enabled(self) -> AccessValidator:
        if self.validator is None:
            raise ServerSystemError("ACL is not enabled on this broker (aclEnable=false)")
        return self.validator

    def update_account(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        validator = self._enabled()
        h = CreateAccessConfigRequestHeader.from_fields(cmd.ext_fields)
        existing = validator.config.accounts.get(h.access_key)
        # An update may leave out what it does not change, as mqadmin's updateAclConfig does.
        entry: dict[str, object] = existing.to_yaml() if existing is not None else {}
        entry["accessKey"] = h.access_key
        for key, value in (
            ("secretKey", h.secret_key),
            ("whiteRemoteAddress", h.white_remote_address),
            ("defaultTopicPerm", h.default_topic_perm),
            ("defaultGroupPerm", h.default_group_perm),
        ):
            if value is not None:
                entry[key] = value
        if h.topic_perms is not None:
            entry["topicPerms"] = _split(h.topic_perms)
        if h.group_perms is not None:
            entry["groupPerms"] = _split(h.group_perms)
        entry["admin"] = h.admin
        try:
            update_account(validator, entry)
        except (AclConfigError, ValueError, OSError) as exc:
            raise BrokerError(str(exc), code=ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED) from None
        return cmd.response(ResponseCode.SUCCESS)

    def delete_account(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        validator = self._enabled()
        h = DeleteAccessConfigRequestHeader.from_fields(cmd.ext_fields)
        try:
            found = delete_account(validator, h.access_key)
        except (AclConfigError, OSError) as exc:
            raise BrokerError(str(exc), code=ResponseCode.DELETE_ACL_CONFIG_FAILED) from None
        if not found:
            raise BrokerError(
                f"no ACL account with accessKey {h.access_key}", code=ResponseCode.DELETE_ACL_CONFIG_FAILED
            )
        return cmd.response(ResponseCode.SUCCESS)

    def update_global_white(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        validator = self._enabled()
        h = UpdateGlobalWhiteAddrsConfigRequestHeader.from_fields(cmd.ext_fields)
        path = next((p for p in validator.files if str(p) == h.acl_file_full_path), None)
        if h.acl_file_full_path and path is None:
            raise BrokerError(
                f"{h.acl_file_full_path} is not one of this broker's ACL files",
                code=ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED,
            )
        try:
            update_global_white(validator, _split(h.global_white_addrs), path=path)
        except (AclConfigError, ValueError, OSError) as exc:
            raise BrokerError(str(exc), code=ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED) from None
        return cmd.response(ResponseCode.SUCCESS)

    def versions(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        validator = self._enabled()
        versions = data_versions(validator)
        header = GetBrokerAclConfigResponseHeader(
            version=json.dumps(versions[validator.files[0]], separators=(",", ":"), sort_keys=True),
            all_acl_file_version=json.dumps(
                {str(path): v for path, v in versions.items()}, separators=(",", ":"), sort_keys=True
            ),
            broker_name=self.config.broker_name,
            broker_addr=self.config.broker_addr,
            cluster_name=self.config.broker_cluster_name,
        )
        return cmd.response(ResponseCode.SUCCESS, ext_fields=header.to_fields())

    def contents(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        validator = self._enabled()
        config = validator.config
        body = {
            "globalWhiteAddrs": list(config.global_white),
            "plainAccessConfigs": [_plain_access_config(a.to_yaml()) for a in config.accounts.values()],
        }
        return cmd.response(ResponseCode.SUCCESS, body=json.dumps(body).encode())


def _plain_access_config(entry: dict[str, object]) -> dict[str, object]:
    """An account as RocketMQ's ``PlainAccessConfig`` JSON (perm lists always present)."""
    return {
        **{k: v for k, v in entry.items() if v is not None},
        "topicPerms": entry.get("topicPerms", []),
        "groupPerms": entry.get("groupPerms", []),
    }
