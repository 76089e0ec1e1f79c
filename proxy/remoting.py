"""The proxy's remoting port (``remotingListenPort``): RocketMQ's 4.x wire protocol for the 5.x
remoting clients, as Apache's proxy serves it in cluster mode.

A client takes the proxy for its name server and for every broker: a route names the proxy (the
address the client reached it by) for each broker of the topic, and each request the client then
sends names its broker in the ``bname`` field (``n`` in SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE),
which RocketMQ 5's clients set. A request without it is refused with VERSION_NOT_SUPPORTED,
"Request doesn't have field bname", as Apache's proxy refuses 4.x clients; the group questions
that name no broker (GET_CONSUMER_LIST_BY_GROUP, GET_CONSUMER_CONNECTION_LIST,
CHECK_CLIENT_CONFIG) go to a master. Only Apache's proxy's request codes are relayed (others,
admin requests among them, are REQUEST_CODE_NOT_SUPPORTED), and with ACL 2.0 on at the proxy
each request is checked there first, against the client's own address.

Requests are relayed as they are, signature included (ACL 1.0 and 2.0 are checked by the broker,
against the client's own account), on connections the proxy opens to each broker **for that
client**: the broker sees one connection per client, as if the client were connected directly,
so what it keeps per connection (the client's heartbeat, its producer and consumer groups,
orderly locks) and what it sends the client (transaction checks, consumer-list changes,
running-info and direct-consumption requests) pass through unchanged. A heartbeat goes to every
broker of the cluster; when the client goes, its connections to the brokers close with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable
from typing import Any

from aiorocketmq.broker.auth import AuthEngine
from aiorocketmq.broker.auth.engine import AuthRefused
from aiorocketmq.client.client_instance import ClientInstance
from aiorocketmq.protocol.body import ClusterInfo, TopicRouteData
from aiorocketmq.protocol.codes import MQVersion, RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import ConnectionClosedError, MQError, RequestTimeoutError
from aiorocketmq.protocol.pop import PopRequestCode
from aiorocketmq.protocol.transport import Connection, Server, connect

log = logging.getLogger(__name__)

MASTER_ID = 0
BROKER_NAME_FIELD = "bname"
#: Sends with the V2 header (short field names) carry the broker name as ``n``; with a reply
#: (SEND_REPLY_MESSAGE_V2) too, which Apache's proxy does not relay.
SEND_BROKER_NAME_FIELD = "n"
_SHORT_SENDS = frozenset(
    {
        int(RequestCode.SEND_MESSAGE_V2),
        int(RequestCode.SEND_BATCH_MESSAGE),
        int(RequestCode.SEND_REPLY_MESSAGE_V2),
    }
)
#: Extra time a relayed request may take beyond what it asks the broker to wait (long polls).
RELAY_MARGIN = 5.0
RELAY_TIMEOUT = 10.0
CLUSTER_TTL = 3.0
#: A client silent this long is dropped (RocketMQ's channel expiry).
IDLE_TIMEOUT = 120.0
_UPSTREAM = "proxy.upstream"
#: What the port relays by ``bname`` (Apache's proxy's list, and replies' sends); anything else
#: is answered REQUEST_CODE_NOT_SUPPORTED, admin requests included.
RELAYED = frozenset(
    int(code)
    for code in (
        RequestCode.SEND_MESSAGE,
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.SEND_BATCH_MESSAGE,
        RequestCode.SEND_REPLY_MESSAGE_V2,
        RequestCode.CONSUMER_SEND_MSG_BACK,
        RequestCode.END_TRANSACTION,
        RequestCode.RECALL_MESSAGE,
        RequestCode.PULL_MESSAGE,
        RequestCode.LITE_PULL_MESSAGE,
        PopRequestCode.POP_MESSAGE,
        PopRequestCode.ACK_MESSAGE,
        PopRequestCode.CHANGE_MESSAGE_INVISIBLETIME,
        RequestCode.UPDATE_CONSUMER_OFFSET,
        RequestCode.QUERY_CONSUMER_OFFSET,
        RequestCode.GET_MAX_OFFSET,
        RequestCode.GET_MIN_OFFSET,
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
        RequestCode.LOCK_BATCH_MQ,
        RequestCode.UNLOCK_BATCH_MQ,
    )
)


def copy_of(cmd: RemotingCommand) -> RemotingCommand:
    """The request as the broker gets it (its own opaque is given when sent)."""
    return RemotingCommand(
        cmd.code,
        flag=cmd.flag,
        remark=cmd.remark,
        ext_fields=dict(cmd.ext_fields),
        body=bytes(cmd.body),
        language=cmd.language,
        version=cmd.version,
        serialize_type=cmd.serialize_type,
    )


def _wait_of(cmd: RemotingCommand) -> float:
    """How long the broker may hold the request (a pull's or pop's long poll), in seconds."""
    fields = cmd.ext_fields
    for key in ("suspendTimeoutMillis", "pollTime"):
        value = fields.get(key)
        if value is not None:
            with contextlib.suppress(TypeError, ValueError):
                return int(value) / 1000
    return 0.0


class RemotingFront:
    """The proxy's remoting server (module doc). ``instance`` reaches the name servers."""

    def __init__(
        self, instance: ClientInstance, *, auth: AuthEngine | None = None, access_addr: str = ""
    ) -> None:
        self.instance = instance
        #: ACL 2.0 at the proxy (:mod:`.auth`): every request checked against the client's
        #: own address before it is relayed.
        self.auth = auth
        #: ``remotingAccessAddr``: the address routes name (else the one the client reached).
        self.access_addr = access_addr
        handlers: dict[int, Any] = {code: self._relay for code in RELAYED}
        handlers.update(
            {
                RequestCode.GET_ROUTEINFO_BY_TOPIC: self._route,
                RequestCode.HEART_BEAT: self._heartbeat,
                RequestCode.UNREGISTER_CLIENT: self._unregister,
                RequestCode.GET_CONSUMER_LIST_BY_GROUP: self._to_any_master,
                RequestCode.GET_CONSUMER_CONNECTION_LIST: self._to_any_master,
                RequestCode.CHECK_CLIENT_CONFIG: self._to_any_master,
            }
        )
        self.server = Server(
            {code: self._checked(handler) for code, handler in handlers.items()},
            name="mqproxy remoting",
            on_disconnect=self._client_gone,
            idle_timeout=IDLE_TIMEOUT,
        )
        self._cluster: tuple[float, ClusterInfo] | None = None
        self._refreshing: asyncio.Future[ClusterInfo] | None = None

    def _checked(self, handler: Any) -> Any:
        """``handler`` behind ACL 2.0's check of the request, when the proxy checks clients."""
        auth = self.auth
        if auth is None:
            return handler

        def check_then(client: Connection, cmd: RemotingCommand) -> Any:
            try:
                auth.check_remoting(cmd.code, cmd.ext_fields, bytes(cmd.body), cmd.version, client.address)
            except AuthRefused as exc:
                return cmd.response(ResponseCode.NO_PERMISSION, str(exc))
            return handler(client, cmd)

        return check_then

    async def start(self, host: str, port: int) -> int:
        return await self.server.listen(host, port)

    async def close(self) -> None:
        await self.server.close()

    # -- the cluster ------------------------------------------------------------------------

    async def cluster(self) -> ClusterInfo:
        """The cluster's brokers, from the name servers: kept :data:`CLUSTER_TTL` seconds, one
        refresh at a time, and the last answer kept while no name server answers."""
        now = time.monotonic()
        if self._cluster is not None and self._cluster[0] > now:
            return self._cluster[1]
        if self._refreshing is None:
            self._refreshing = asyncio.ensure_future(self._fetch_cluster())
        refreshing = self._refreshing
        try:
            return await asyncio.shield(refreshing)
        except MQError:
            if self._cluster is not None:
                return self._cluster[1]
            raise
        finally:
            if self._refreshing is refreshing and refreshing.done():
                self._refreshing = None

    async def _fetch_cluster(self) -> ClusterInfo:
        response = await self.instance.call_namesrv(RequestCode.GET_BROKER_CLUSTER_INFO)
        info = ClusterInfo.decode(response.body)
        self._cluster = (time.monotonic() + CLUSTER_TTL, info)
        return info

    async def _master(self, broker_name: str) -> str | None:
        broker = (await self.cluster()).broker_addr_table.get(broker_name)
        if broker is None:
            return None
        return broker.broker_addrs.get(MASTER_ID)

    # -- per-client connections to the brokers ----------------------------------------------

    async def _upstream(self, client: Connection, addr: str) -> Connection:
        """The client's own connection to the broker at ``addr`` (opened on first use)."""
        if client.closed:
            raise ConnectionClosedError(f"{client.address} went away")
        ups: dict[str, Awaitable[Connection]] = client.attrs.setdefault(_UPSTREAM, {})
        pending = ups.get(addr)
        if pending is None:
            pending = ups[addr] = asyncio.ensure_future(self._open(client, addr))
        try:
            conn = await pending
        except MQError:
            ups.pop(addr, None)
            raise
        if conn.closed:
            ups.pop(addr, None)
            return await self._upstream(client, addr)
        return conn

    async def _open(self, client: Connection, addr: str) -> Connection:
        host, _, port = addr.rpartition(":")

        def back_to_client(conn: Connection, cmd: RemotingCommand) -> Awaitable[RemotingCommand] | None:
            # A request of the broker's for the client: a transaction check, a consumer-list
            # change, a running-info or direct-consumption request.
            if client.closed:
                return None
            forwarded = copy_of(cmd)
            if cmd.is_oneway:
                client.send_oneway(forwarded)
                return None
            return client.request(forwarded, RELAY_TIMEOUT)

        conn = await connect(
            host, int(port), default_handler=back_to_client, name=f"proxy for {client.address}"
        )
        conn.add_close_callback(lambda _: self._upstream_gone(client, addr))
        return conn

    def _upstream_gone(self, client: Connection, addr: str) -> None:
        ups = client.attrs.get(_UPSTREAM)
        if ups is not None:
            ups.pop(addr, None)

    def _client_gone(self, client: Connection) -> None:
        for pending in list(client.attrs.pop(_UPSTREAM, {}).values()):
            if isinstance(pending, asyncio.Future):
                pending.add_done_callback(_close_opened)

    async def _forward(self, client: Connection, addr: str, cmd: RemotingCommand) -> RemotingCommand | None:
        upstream = await self._upstream(client, addr)
        forwarded = copy_of(cmd)
        if cmd.is_oneway:
            upstream.send_oneway(forwarded)
            return None
        return await upstream.request(forwarded, max(RELAY_TIMEOUT, _wait_of(cmd) + RELAY_MARGIN))

    # -- handlers ---------------------------------------------------------------------------

    async def _route(self, client: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """The name server's route, every broker at this proxy (the address the client used)."""
        response = await self._ask_namesrv(cmd)
        if response.code != ResponseCode.SUCCESS or not response.body:
            return response
        route = TopicRouteData.decode(response.body)
        here = self.access_addr or f"{client.local[0]}:{client.local[1]}"
        for broker in route.broker_datas:
            broker.broker_addrs = {MASTER_ID: here} if MASTER_ID in broker.broker_addrs else {}
        standard = (
            cmd.version >= MQVersion.V4_9_4 or str(cmd.ext_fields.get("acceptStandardJsonOnly")) == "true"
        )
        return cmd.response(ResponseCode.SUCCESS, body=route.encode(standard_json=standard))

    async def _ask_namesrv(self, cmd: RemotingCommand) -> RemotingCommand:
        """The answer of the first name server that answers (whatever its code)."""
        failure: MQError | None = None
        for addr in self.instance.namesrv_addrs:
            try:
                return await self.instance.invoke(addr, cmd.code, dict(cmd.ext_fields), bytes(cmd.body))
            except MQError as exc:
                failure = exc
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"no name server answered: {failure}")

    async def _heartbeat(self, client: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """To every broker of the cluster, on the client's own connections."""
        addrs = sorted(
            {
                addr
                for broker in (await self.cluster()).broker_addr_table.values()
                for addr in broker.broker_addrs.values()
            }
        )
        results = await asyncio.gather(
            *(self._forward(client, addr, cmd) for addr in addrs), return_exceptions=True
        )
        answered = [r for r in results if isinstance(r, RemotingCommand)]
        failed = [r for r in results if isinstance(r, BaseException)]
        for addr, result in zip(addrs, results, strict=True):
            if isinstance(result, BaseException):
                log.info("heartbeat of %s to %s failed: %s", client.address, addr, result)
        if not answered and failed:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"no broker took the heartbeat: {failed[0]}")
        refused = [r for r in answered if r.code != ResponseCode.SUCCESS]
        if refused:
            return refused[0]
        # Full heartbeats every time: the brokers each keep what the client last sent them,
        # and one that joins later has seen no earlier heartbeat to compare a fingerprint with.
        return cmd.response(ResponseCode.SUCCESS)

    async def _unregister(self, client: Connection, cmd: RemotingCommand) -> RemotingCommand:
        ups: dict[str, Awaitable[Connection]] = client.attrs.get(_UPSTREAM, {})
        await asyncio.gather(
            *(self._forward(client, addr, cmd) for addr in list(ups)), return_exceptions=True
        )
        return cmd.response(ResponseCode.SUCCESS)

    async def _to_any_master(self, client: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        """A group's question that names no broker (its members, a filter's check): every
        master knows the answer, the clients heartbeating to all of them through proxies."""
        masters = sorted(
            addr
            for broker in (await self.cluster()).broker_addr_table.values()
            for broker_id, addr in broker.broker_addrs.items()
            if int(broker_id) == MASTER_ID
        )
        if not masters:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "no master broker in the cluster")
        return await self._forward(client, masters[0], cmd)

    async def _relay(self, client: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        field = SEND_BROKER_NAME_FIELD if cmd.code in _SHORT_SENDS else BROKER_NAME_FIELD
        broker_name = cmd.ext_fields.get(field)
        if not broker_name:
            return cmd.response(ResponseCode.VERSION_NOT_SUPPORTED, "Request doesn't have field bname")
        try:
            addr = await self._master(str(broker_name))
            if addr is None:
                return cmd.response(ResponseCode.SYSTEM_ERROR, f"broker {broker_name} has no master now")
            return await self._forward(client, addr, cmd)
        except RequestTimeoutError as exc:
            return cmd.response(
                ResponseCode.SYSTEM_BUSY, f"broker {broker_name} did not answer in time: {exc}"
            )
        except MQError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"broker {broker_name} cannot be reached: {exc}")


def _close_opened(done: asyncio.Future[Connection]) -> None:
    """Close a connection to a broker whose client went away (once it is open)."""
    if not done.cancelled() and done.exception() is None:
        done.result().close("its client went away")
