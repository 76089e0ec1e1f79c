"""ACL 2.0 at the proxy, as Apache's proxy does it in cluster mode: each 5.x request is
authenticated and authorized here, against the users and ACLs the brokers hold, which the
proxy mirrors (AUTH_LIST_USER and AUTH_LIST_ACL from a master, again every refresh interval);
its own requests to brokers and name servers are signed as ``innerClientAuthenticationCredentials``
(a super user of the brokers).

The checks are the broker's own (:class:`~aiorocketmq.broker.auth.AuthEngine`): the same
rules, messages and caches, on a store that is read-only here (users and ACLs are changed on
the brokers, with ``mqadmin`` or the dashboard).
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

from aiorocketmq.broker.auth import AuthEngine
from aiorocketmq.broker.auth.admin import policies_from_info
from aiorocketmq.broker.auth.model import Acl, User
from aiorocketmq.broker.auth.store import AuthStore
from aiorocketmq.broker.config import BrokerConfig
from aiorocketmq.client.client_instance import ClientInstance
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.errors import MQError

from .config import ProxyConfig

log = logging.getLogger(__name__)


class MirroredAuthStore(AuthStore):
    """The brokers' users and ACLs, in memory; changed only by :meth:`adopt`."""

    def __init__(self) -> None:
        super().__init__(Path("/nonexistent-proxy-auth"))

    def load(self) -> None:
        pass  # nothing on disk: the brokers hold the metadata

    def _save(self) -> None:
        raise PermissionError(
            "the proxy's ACL 2.0 metadata is a mirror: change users and ACLs on the brokers"
        )

    def adopt(self, users: list[User], acls: list[Acl]) -> None:
        self.users = {u.username: u for u in users}
        self.acls = {a.subject: a for a in acls}
        self.version += 1


def engine_for(config: ProxyConfig) -> AuthEngine:
    """The broker's ACL 2.0 engine, set as the proxy's config says, on a mirrored store."""
    settings = BrokerConfig(
        brokerClusterName=config.rocketmq_cluster_name,
        authenticationEnabled=config.authentication_enabled,
        authorizationEnabled=config.authorization_enabled,
        authenticationWhitelist=config.authentication_whitelist,
        authorizationWhitelist=config.authorization_whitelist,
    )
    return AuthEngine(settings, MirroredAuthStore())


def _listing(body: bytes) -> list[Any]:
    if not body:
        return []
    data = json.loads(body)
    if not isinstance(data, list):
        raise ValueError("the listing is not a JSON array")
    return data


async def refresh(engine: AuthEngine, instance: ClientInstance, masters: list[str]) -> bool:
    """Mirror the first master that answers; False when none did (the mirror stays)."""
    store = engine.store
    assert isinstance(store, MirroredAuthStore)
    for addr in masters:
        try:
            users_answer = await instance.invoke(addr, RequestCode.AUTH_LIST_USER, {})
            acls_answer = await instance.invoke(addr, RequestCode.AUTH_LIST_ACL, {})
            if users_answer.code != ResponseCode.SUCCESS or acls_answer.code != ResponseCode.SUCCESS:
                log.warning(
                    "ACL 2.0 mirror: %s refused the listing: %s",
                    addr,
                    users_answer.remark if users_answer.code != ResponseCode.SUCCESS else acls_answer.remark,
                )
                continue
            users = [User.from_json(u) for u in _listing(users_answer.body)]
            acls = []
            for info in _listing(acls_answer.body):
                policies, _ = policies_from_info(info.get("policies") or [])
                acls.append(Acl(str(info.get("subject")), policies))
        except (MQError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("ACL 2.0 mirror: cannot read %s: %s", addr, exc)
            continue
        store.adopt(users, acls)
        return True
    return False


async def keep_mirrored(
    engine: AuthEngine, instance: ClientInstance, masters: Any, interval: float, ready: asyncio.Event
) -> None:
    """Refresh the mirror every ``interval`` seconds (``masters()``: the addresses to ask);
    ``ready`` is set after the first successful refresh."""
    while True:
        try:
            if await refresh(engine, instance, await masters()):
                ready.set()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("ACL 2.0 mirror refresh failed")
        await asyncio.sleep(interval if ready.is_set() else 1.0)
