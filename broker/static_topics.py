"""Static topics on the broker (RocketMQ 5): the mappings it holds and the requests it turns
from global queues and logical offsets into its physical ones.

``mqadmin updateStaticTopic`` sends each broker its share of a static topic
(UPDATE_AND_CREATE_STATIC_TOPIC, a :class:`TopicQueueMappingDetail`); :class:`StaticTopicTable`
checks it against what the broker holds (epochs only grow, a leader changes only with a new
epoch), keeps it in ``config/topicQueueMapping.json`` and hands the name servers the summary
5.x clients route by.

Clients then name a static topic's queues by global id, and offsets are logical.
:class:`StaticTopicRouter` sits in front of the handlers that take a queue (sends, pulls,
consumer offsets, offset lookups): it maps the global id to the physical queue of the mapping
item that holds the offset, lets the ordinary handler serve it, and maps the answer back. An item
held by another broker (the queue's history after a remapping) is asked of that broker with the
physical queue and ``lo=false``, the way Apache's brokers forward to each other. A queue this
broker does not lead is refused with NOT_LEADER_FOR_QUEUE for sends and pulls.

The router is installed into the server's handler table only once the broker holds a static
topic, so brokers without one pay nothing per request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from aiorocketmq.protocol.acl import Credentials, sign
from aiorocketmq.protocol.body import (
    DataVersion,
    LogicQueueMappingItem,
    TopicQueueMappingDetail,
    TopicQueueMappingInfo,
    TopicRouteData,
)
from aiorocketmq.protocol.codes import MASTER_ID, PullSysFlag, RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import BrokerError, MQError, NotLeaderForQueueError, ServerSystemError
from aiorocketmq.protocol.static_topic import check_items, find_item
from aiorocketmq.protocol.transport import Connection, Handler, HandlerResult, connect, error_response

from .config import BrokerConfig
from .config_files import ConfigFile

log = logging.getLogger(__name__)

FORWARD_TIMEOUT = 3.0

_SEND_CODES = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)
_PULL_CODES = (RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE)
_SUCCESS = int(ResponseCode.SUCCESS)


class StaticTopicTable:
    """This broker's static-topic mappings, persisted to ``config/topicQueueMapping.json``."""

    def __init__(self, config: BrokerConfig) -> None:
        self.file = ConfigFile(config.config_dir / "topicQueueMapping.json")
        self.details: dict[str, TopicQueueMappingDetail] = {}
        self.data_version = DataVersion(timestamp=_now_ms(), counter=0)

    def load(self) -> None:
        raw = self.file.load()
        if not raw:
            return
        self.details = {
            topic: TopicQueueMappingDetail.model_validate(detail)
            for topic, detail in (raw.get("topicQueueMappingInfoMap") or {}).items()
        }
        if raw.get("dataVersion"):
            self.data_version = DataVersion.model_validate(raw["dataVersion"])

    def encode(self) -> bytes:
        from aiorocketmq.protocol import fastjson

        return fastjson.dumps(
            {
                "dataVersion": self.data_version.to_wire(),
                "topicQueueMappingInfoMap": {t: d.to_wire() for t, d in sorted(self.details.items())},
            }
        )

    def update(self, detail: TopicQueueMappingDetail, *, force: bool) -> None:
        """Take ``detail`` for its topic, or raise :class:`ServerSystemError` saying why not
        (Apache's rules: no smaller epoch, one scope, a leader changes only with the epoch)."""
        for gid, items in detail.hosted_queues.items():
            problem = check_items(items)
            if problem is not None:
                raise ServerSystemError(f"global queue {gid}: {problem}")
        old = self.details.get(detail.topic)
        if old is not None:
            if not force:
                if detail.epoch < old.epoch:
                    raise ServerSystemError(
                        f"Can't accept data with small epoch {detail.epoch} < {old.epoch}"
                    )
                if detail.scope != old.scope:
                    raise ServerSystemError(
                        f"Can't accept data with unmatched scope {detail.scope} != {old.scope}"
                    )
            for gid, items in old.hosted_queues.items():
                new_items = detail.hosted_queues.get(gid)
                if new_items is None:
                    if detail.epoch == old.epoch and not force:
                        raise ServerSystemError("Cannot accept equal epoch with null data")
                    detail.hosted_queues[gid] = items  # kept: this broker still holds its data
                elif (
                    not force
                    and detail.epoch == old.epoch
                    and (new_items[-1].bname, new_items[-1].queue_id) != (items[-1].bname, items[-1].queue_id)
                ):
                    raise ServerSystemError("The new leader is different but epoch equal")
        detail.curr_id_map = {}
        self.details[detail.topic] = detail
        self.data_version = DataVersion(timestamp=_now_ms(), counter=self.data_version.counter + 1)
        log.info(
            "static topic %s: epoch %d, %d global queues, hosting %s",
            detail.topic,
            detail.epoch,
            detail.total_queues,
            sorted(detail.hosted_queues),
        )

    def delete(self, topic: str) -> bool:
        return self.details.pop(topic, None) is not None

    def infos(self) -> dict[str, TopicQueueMappingInfo]:
        """What registrations carry: each topic's summary of the queues this broker leads."""
        return {topic: detail.info() for topic, detail in sorted(self.details.items())}


class StaticTopicRouter:
    """Requests on a static topic's global queues, served on physical ones (module doc)."""

    def __init__(
        self,
        table: StaticTopicTable,
        route: Callable[[str], Awaitable[TopicRouteData | None]],
        credentials: Credentials | None = None,
    ) -> None:
        self.table = table
        self._route = route
        #: The broker's own account (innerClientAuthenticationCredentials): forwards are re-signed
        #: with it, since rewriting ``lo`` and ``bname`` voids the client's signature.
        self._signer = partial(sign, credentials=credentials) if credentials is not None else None
        self._peers: dict[str, Connection] = {}
        self._installed = False

    def install(self, handlers: dict[int, Handler]) -> None:
        """Put the router in front of the handlers that take a queue (once)."""
        if self._installed:
            return
        self._installed = True
        wrappers: dict[int, Callable[[Handler], Handler]] = {
            **{code: self._send for code in _SEND_CODES},
            **{code: self._pull for code in _PULL_CODES},
            RequestCode.QUERY_CONSUMER_OFFSET: self._query_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self._update_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self._search_offset,
            RequestCode.GET_MAX_OFFSET: self._max_offset,
            RequestCode.GET_MIN_OFFSET: self._min_offset,
            RequestCode.GET_EARLIEST_MSG_STORETIME: self._earliest_time,
        }
        for code, wrap in wrappers.items():
            handler = handlers.get(code)
            if handler is not None:
                handlers[code] = wrap(handler)

    async def close(self) -> None:
        for conn in self._peers.values():
            conn.close("broker stopping")
        self._peers.clear()

    # -- finding the mapping ----------------------------------------------------------------

    def _items(
        self, fields: dict[str, Any], topic_key: str = "topic", queue_key: str = "queueId"
    ) -> tuple[TopicQueueMappingDetail, int, list[LogicQueueMappingItem]] | None:
        """The mapping of the request's global queue, or None for a physical request (a topic
        that is not static here, or a peer's forwarded request, ``lo=false``)."""
        detail = self.table.details.get(str(fields.get(topic_key)))
        if detail is None or str(fields.get("lo", "")).lower() == "false":
            return None
        gid = int(fields.get(queue_key, -1))
        return detail, gid, detail.hosted_queues.get(gid, [])

    def _hosted(
        self, cmd: RemotingCommand
    ) -> tuple[TopicQueueMappingDetail, int, list[LogicQueueMappingItem]] | None:
        """:meth:`_items` of a request on a global queue whose history this broker holds (it
        is refused otherwise); None for a physical request."""
        found = self._items(cmd.ext_fields) if cmd.ext_fields else None
        if found is not None and not found[2]:
            detail, gid, _ = found
            raise NotLeaderForQueueError(f"{detail.topic}-{gid} is not hosted by broker {detail.bname}")
        return found

    def _leader(
        self, detail: TopicQueueMappingDetail, gid: int, items: list[LogicQueueMappingItem]
    ) -> LogicQueueMappingItem:
        if not items or items[-1].bname != detail.bname:
            raise NotLeaderForQueueError(
                f"{detail.topic}-{gid} does not exit in request process of current broker {detail.bname}"
            )
        return items[-1]

    # -- sends ------------------------------------------------------------------------------

    def _send(self, handler: Handler) -> Handler:
        def send(conn: Connection, cmd: RemotingCommand) -> HandlerResult:
            fields = cmd.ext_fields
            v2 = cmd.code != RequestCode.SEND_MESSAGE
            found = self._items(fields, "b" if v2 else "topic", "e" if v2 else "queueId") if fields else None
            if found is None:
                return handler(conn, cmd)
            detail, gid, items = found
            if gid < 0 and detail.hosted_queues:  # any queue: the first this broker hosts
                gid = min(detail.hosted_queues)
                items = detail.hosted_queues[gid]
            leader = self._leader(detail, gid, items)
            fields["e" if v2 else "queueId"] = str(leader.queue_id)

            def answer(response: RemotingCommand) -> RemotingCommand:
                out = response.ext_fields
                if response.code == _SUCCESS and out is not None and "queueOffset" in out:
                    out["queueId"] = str(gid)
                    out["queueOffset"] = str(leader.to_logical_loosely(int(out["queueOffset"])))
                return response

            return _then(handler(conn, cmd), answer)

        return send

    # -- pulls ------------------------------------------------------------------------------

    def _pull(self, handler: Handler) -> Handler:
        def pull(conn: Connection, cmd: RemotingCommand) -> HandlerResult:
            found = self._items(cmd.ext_fields) if cmd.ext_fields else None
            if found is None:
                return handler(conn, cmd)
            detail, gid, items = found
            leader = self._leader(detail, gid, items)
            fields = cmd.ext_fields
            logical = int(fields["queueOffset"])
            item = find_item(items, logical)
            assert item is not None  # the leader exists, so items is not empty
            fields["queueId"] = str(item.queue_id)
            fields["queueOffset"] = str(item.to_physical(logical))
            if item.end_decided and fields.get("maxMsgNums") is not None:
                fields["maxMsgNums"] = str(
                    min(item.end_offset - item.start_offset, int(fields["maxMsgNums"]))
                )
            commit = int(fields.get("commitOffset") or 0)
            if commit > 0:
                held = find_item(items, commit)
                if held is not None and held.bname == detail.bname:
                    fields["commitOffset"] = str(held.to_physical(commit))
                else:
                    fields["sysFlag"] = str(int(fields.get("sysFlag", 0)) & ~int(PullSysFlag.COMMIT_OFFSET))

            def answer(response: RemotingCommand) -> RemotingCommand:
                return _pulled(response, logical, item, leader, items)

            if item.bname == detail.bname:
                return _then(handler(conn, cmd), answer)
            flags = (
                int(fields.get("sysFlag", 0)) & ~int(PullSysFlag.SUSPEND) & ~int(PullSysFlag.COMMIT_OFFSET)
            )
            fields["sysFlag"] = str(flags)
            return _then(self._forward(detail.topic, item.bname, cmd), answer)

        return pull

    # -- consumer offsets -------------------------------------------------------------------

    def _query_offset(self, handler: Handler) -> Handler:
        def query(conn: Connection, cmd: RemotingCommand) -> HandlerResult:
            found = self._hosted(cmd)
            if found is None:
                return handler(conn, cmd)
            detail, _, items = found

            async def newest_committed() -> RemotingCommand:
                # Newest item first: a group that has read past a move committed on the new one.
                for item in reversed(items):
                    if item.logic_offset < 0:
                        continue
                    fields = dict(cmd.ext_fields or {}, queueId=str(item.queue_id), lo="false")
                    fields["setZeroIfNotFound"] = "false"
                    response = await self._ask(conn, cmd, handler, detail, item, fields)
                    out = response.ext_fields or {}
                    if response.code == _SUCCESS and int(out.get("offset", -1)) >= 0:
                        out["offset"] = str(item.to_logical(int(out["offset"])))
                        return response
                return cmd.response(
                    ResponseCode.QUERY_NOT_FOUND, "Not found, maybe this group consumer boot first"
                )

            return newest_committed()

        return query

    def _update_offset(self, handler: Handler) -> Handler:
        def update(conn: Connection, cmd: RemotingCommand) -> HandlerResult:
            found = self._hosted(cmd)
            if found is None:
                return handler(conn, cmd)
            detail, _, items = found
            fields = cmd.ext_fields
            commit = int(fields.get("commitOffset", 0))
            item = find_item(items, commit)
            assert item is not None  # the history is not empty
            fields["queueId"] = str(item.queue_id)
            fields["commitOffset"] = str(item.to_physical(commit))
            if item.bname == detail.bname:
                return handler(conn, cmd)
            return self._forward(detail.topic, item.bname, cmd)

        return update

    # -- offset lookups ---------------------------------------------------------------------

    def _lookup(
        self,
        handler: Handler,
        choose: Callable[[list[LogicQueueMappingItem]], LogicQueueMappingItem | None],
        convert: Callable[[LogicQueueMappingItem, int], int] | None,
    ) -> Handler:
        """A request answered by one item's broker (the newest, the earliest), its ``offset``
        converted back to a logical one."""

        def lookup(conn: Connection, cmd: RemotingCommand) -> HandlerResult:
            found = self._hosted(cmd)
            if found is None:
                return handler(conn, cmd)
            detail, gid, items = found
            item = choose(items)
            if item is None:  # every item's start still undecided
                raise NotLeaderForQueueError(
                    f"{detail.topic}-{gid} has no decided mapping item on broker {detail.bname}"
                )
            fields = dict(cmd.ext_fields or {}, queueId=str(item.queue_id), lo="false")

            async def answer() -> RemotingCommand:
                response = await self._ask(conn, cmd, handler, detail, item, fields)
                out = response.ext_fields
                if convert is not None and response.code == _SUCCESS and out and "offset" in out:
                    out["offset"] = str(convert(item, int(out["offset"])))
                return response

            return answer()

        return lookup

    def _max_offset(self, handler: Handler) -> Handler:
        return self._lookup(
            handler, lambda items: find_item(items, 2**63 - 1), LogicQueueMappingItem.to_logical
        )

    def _min_offset(self, handler: Handler) -> Handler:
        return self._lookup(handler, _earliest, LogicQueueMappingItem.to_logical_loosely)

    def _earliest_time(self, handler: Handler) -> Handler:
        return self._lookup(handler, _earliest, None)

    def _search_offset(self, handler: Handler) -> Handler:
        def search(conn: Connection, cmd: RemotingCommand) -> HandlerResult:
            found = self._hosted(cmd)
            if found is None:
                return handler(conn, cmd)
            detail, _, items = found

            async def oldest_match() -> RemotingCommand:
                # Oldest item first: the first holding a message at or after the time.
                last: RemotingCommand | None = None
                for item in items:
                    if item.logic_offset < 0:
                        continue
                    fields = dict(cmd.ext_fields or {}, queueId=str(item.queue_id), lo="false")
                    response = await self._ask(conn, cmd, handler, detail, item, fields)
                    out = response.ext_fields or {}
                    if response.code != _SUCCESS or "offset" not in out:
                        last = response
                        continue
                    physical = int(out["offset"])
                    if physical < 0 or (item.end_decided and physical > item.end_offset):
                        continue
                    out["offset"] = str(item.to_logical(physical))
                    last = response
                    if physical > item.start_offset or item is items[-1]:
                        return response
                return last or cmd.response(ResponseCode.SYSTEM_ERROR, "no mapping item answered")

            return oldest_match()

        return search

    # -- asking the broker that holds an item -------------------------------------------------

    async def _ask(
        self,
        conn: Connection,
        cmd: RemotingCommand,
        handler: Handler,
        detail: TopicQueueMappingDetail,
        item: LogicQueueMappingItem,
        fields: dict[str, Any],
    ) -> RemotingCommand:
        copy = RemotingCommand.request(cmd.code, fields, cmd.body, serialize_type=cmd.serialize_type)
        copy.opaque, copy.version, copy.language = cmd.opaque, cmd.version, cmd.language
        if item.bname != detail.bname:
            return await self._forward(detail.topic, item.bname, copy)
        try:
            result = handler(conn, copy)
            response = result if isinstance(result, RemotingCommand) or result is None else await result
        except BrokerError as exc:  # an answer like any other, to look past or pass on
            return error_response(copy, exc)
        if response is None:
            raise ServerSystemError("the local handler gave no answer")
        return response

    async def _forward(self, topic: str, bname: str, cmd: RemotingCommand) -> RemotingCommand:
        """``cmd`` as a physical request (``lo=false``) to ``bname``'s master."""
        fields = dict(cmd.ext_fields or {}, lo="false", bname=bname)
        request = RemotingCommand.request(cmd.code, fields, cmd.body)
        peer = await self._peer(topic, bname)
        try:
            response = await peer.request(request, FORWARD_TIMEOUT)
        except (TimeoutError, MQError) as exc:
            raise ServerSystemError(f"forwarding to broker {bname} failed: {exc}") from None
        response.opaque, response.serialize_type = cmd.opaque, cmd.serialize_type
        return response

    async def _peer(self, topic: str, bname: str) -> Connection:
        """The connection to ``bname``'s master, kept open; the name servers are asked where it
        is only when there is none (a first forward, or the last connection closed)."""
        conn = self._peers.get(bname)
        if conn is not None and not conn.closed:
            return conn
        route = await self._route(topic)
        addr = None
        for broker in route.broker_datas if route is not None else []:
            if broker.broker_name == bname:
                addr = broker.broker_addrs.get(MASTER_ID)
        if addr is None:
            raise ServerSystemError(f"cannot find addr for broker {bname}")
        host, _, port = addr.rpartition(":")
        try:
            conn = await connect(host, int(port), name=f"static topic peer {bname}", signer=self._signer)
        except (OSError, MQError) as exc:
            raise ServerSystemError(f"cannot reach broker {bname} at {addr}: {exc}") from None
        self._peers[bname] = conn
        return conn


def _earliest(items: list[LogicQueueMappingItem]) -> LogicQueueMappingItem | None:
    return next((item for item in items if item.logic_offset >= 0), None)


def _then(result: HandlerResult, answer: Callable[[RemotingCommand], RemotingCommand]) -> HandlerResult:
    """``answer`` applied to a handler's response, whether it came now or comes later."""
    if result is None:
        return None
    if isinstance(result, RemotingCommand):
        return answer(result)

    async def later(pending: Awaitable[RemotingCommand | None]) -> RemotingCommand | None:
        response = await pending
        return None if response is None else answer(response)

    return later(result)


def _pulled(
    response: RemotingCommand,
    logical: int,
    item: LogicQueueMappingItem,
    leader: LogicQueueMappingItem,
    items: list[LogicQueueMappingItem],
) -> RemotingCommand:
    """A pull's answer in logical offsets: where to go next (the next item once this one's
    physical range is read), the queue's bounds, and the delta clients add to each message's
    offset (``offsetDelta``)."""
    out = response.ext_fields
    if out is None or "nextBeginOffset" not in out:
        return response
    code = response.code
    physical = item.to_physical(logical)
    next_begin, low, high = int(out["nextBeginOffset"]), int(out["minOffset"]), int(out["maxOffset"])
    current = item
    if code != _SUCCESS:
        if physical < low:
            next_begin = low
            code = ResponseCode.PULL_OFFSET_MOVED if item is items[0] else ResponseCode.PULL_RETRY_IMMEDIATELY
        elif physical >= high and item is not leader:
            following = next((i for i in items if i.gen > item.gen and i.logic_offset >= 0), None)
            if following is not None:
                current = following
                next_begin = low = high = following.start_offset
                code = ResponseCode.PULL_RETRY_IMMEDIATELY
            else:
                code = ResponseCode.PULL_NOT_FOUND
        elif physical > high and code == ResponseCode.PULL_OFFSET_MOVED:
            next_begin = high
    if current.end_decided and next_begin >= current.end_offset:
        next_begin = current.end_offset
    out["nextBeginOffset"] = str(current.to_logical(next_begin))
    out["minOffset"] = str(current.to_logical(max(current.start_offset, low)))
    out["maxOffset"] = str(max(current.to_logical(high), leader.max_logical))
    out["offsetDelta"] = str(current.logic_offset - current.start_offset)
    if code != response.code:
        response.code = code
        response.body = b""
        response.remark = None
    return response


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
