"""A slave's copy of its master's metadata, refreshed every 10 s (first after 3 s) with the
requests Apache's slave sends to the master's remoting port: GET_ALL_TOPIC_CONFIG,
GET_ALL_CONSUMER_OFFSET, GET_ALL_DELAY_OFFSET and GET_ALL_SUBSCRIPTIONGROUP_CONFIG.

Topics and groups are replaced when the master's data version differs; delay offsets are
adopted as they are. Consumer offsets are merged with one addition to Apache's rule ("the
master wins per key"): an offset a consumer committed on this slave while the master was away
(newer than what the master had at the last sync) is first handed to the master with
UPDATE_CONSUMER_OFFSET, so the consumer's progress survives the master's return.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from aiorocketmq.protocol.body import (
    ConsumerOffsetTable,
    DelayOffsetTable,
    SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper,
)
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.headers import UpdateConsumerOffsetRequestHeader
from aiorocketmq.protocol.loop import cancel_and_wait, wait_event
from aiorocketmq.protocol.message import split_address
from aiorocketmq.protocol.transport import Connection, connect

from ..delay import DelayService
from ..groups import GroupTable
from ..offsets import KEY_SEPARATOR, OffsetTable
from ..topics import TopicTable

log = logging.getLogger(__name__)

FIRST_DELAY = 3.0
PERIOD = 10.0
TIMEOUT = 3.0
#: Least time between two rounds when they are asked for early.
MIN_GAP = 1.0

OffsetSnapshot = dict[str, dict[int, int]]


class MetadataSync:
    """Copies the master's topics, groups, consumer and delay offsets onto this slave."""

    def __init__(
        self,
        *,
        own_addr: str,
        topics: TopicTable,
        groups: GroupTable,
        offsets: OffsetTable,
        delay: DelayService,
        topics_changed: Callable[[], None],
        groups_changed: Callable[[], None],
        delay_changed: Callable[[], None],
        period: float = PERIOD,
    ) -> None:
        self.own_addr = own_addr
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.delay = delay
        self.topics_changed = topics_changed
        self.groups_changed = groups_changed
        self.delay_changed = delay_changed
        self.period = period
        #: The master's remoting address, from the name server's answer to registration.
        self.master_addr: str | None = None
        self.rounds = 0
        self.last_error = ""
        #: Offsets handed back to the master (committed here while it was away).
        self.offsets_returned = 0
        #: The consumer offsets as the master had them at the last sync.
        self._synced: OffsetSnapshot | None = None
        self._conn: Connection | None = None
        self._conn_addr = ""
        self._task: asyncio.Task[None] | None = None
        self._soon = asyncio.Event()
        self._last_round = 0.0

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        if self._conn is not None:
            self._conn.close("broker shutting down")

    def sync_soon(self) -> None:
        """Sync now rather than at the next period (at most once a second): the replicated
        log brought a topic this slave has no config for yet, so it could not serve it."""
        self._soon.set()

    async def _run(self) -> None:
        await wait_event(self._soon, FIRST_DELAY)
        while True:
            self._soon.clear()
            self._last_round = time.monotonic()
            try:
                await self.sync_all()
            except Exception as exc:
                # Whatever went wrong this round, the next one tries again.
                if str(exc) != self.last_error:
                    log.warning("slave sync from master %s failed: %s", self.master_addr, exc)
                self.last_error = str(exc)
            await wait_event(self._soon, self.period)
            await asyncio.sleep(max(0.0, self._last_round + MIN_GAP - time.monotonic()))

    async def _call(self, code: int, header: dict[str, str] | None = None) -> RemotingCommand:
        addr = self.master_addr
        assert addr is not None
        conn = self._conn
        if conn is None or conn.closed or self._conn_addr != addr:
            if conn is not None:
                conn.close("master moved")
            host, port = split_address(addr)
            conn = self._conn = await connect(host, port, name="slave->master", timeout=TIMEOUT)
            self._conn_addr = addr
        return await conn.request(RemotingCommand.request(code, header), TIMEOUT)

    async def sync_all(self) -> bool:
        """One round; False when there is no master to copy from."""
        if not self.master_addr or self.master_addr == self.own_addr:
            return False
        await self._sync_topics()
        await self._sync_offsets()
        await self._sync_delay_offsets()
        await self._sync_groups()
        self.rounds += 1
        self.last_error = ""
        return True

    async def _sync_topics(self) -> None:
        response = await self._call(RequestCode.GET_ALL_TOPIC_CONFIG)
        if response.code != ResponseCode.SUCCESS:
            raise MQError(f"GET_ALL_TOPIC_CONFIG: {response.remark}")
        wrapper = TopicConfigSerializeWrapper.decode(response.body)
        if wrapper.data_version != self.topics.data_version:
            self.topics.topics.clear()
            self.topics.topics.update(wrapper.topic_config_table)
            self.topics.data_version = wrapper.data_version
            self.topics_changed()
            log.info("slave sync: %d topics from the master", len(wrapper.topic_config_table))

    async def _sync_groups(self) -> None:
        response = await self._call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        if response.code != ResponseCode.SUCCESS:
            raise MQError(f"GET_ALL_SUBSCRIPTIONGROUP_CONFIG: {response.remark}")
        wrapper = SubscriptionGroupWrapper.decode(response.body)
        if wrapper.data_version != self.groups.data_version:
            self.groups.groups.clear()
            self.groups.groups.update(wrapper.subscription_group_table)
            self.groups.data_version = wrapper.data_version
            self.groups_changed()

    async def _sync_delay_offsets(self) -> None:
        response = await self._call(RequestCode.GET_ALL_DELAY_OFFSET)
        if response.code != ResponseCode.SUCCESS:
            raise MQError(f"GET_ALL_DELAY_OFFSET: {response.remark}")
        table = DelayOffsetTable.decode(response.body).offset_table
        if table != self.delay.offsets:
            self.delay.offsets = dict(table)
            self.delay_changed()

    async def _sync_offsets(self) -> None:
        response = await self._call(RequestCode.GET_ALL_CONSUMER_OFFSET)
        if response.code != ResponseCode.SUCCESS:
            raise MQError(f"GET_ALL_CONSUMER_OFFSET: {response.remark}")
        master = ConsumerOffsetTable.decode(response.body).offset_table
        local = self.offsets.table
        if self._synced is not None:
            for key, queues in local.items():
                before = self._synced.get(key, {})
                for queue_id, offset in queues.items():
                    # Committed here since the last sync, and ahead of the master: give it back.
                    newer = offset != before.get(queue_id) and offset > master.get(key, {}).get(queue_id, -1)
                    if newer and await self._return_offset(key, queue_id, offset):
                        master.setdefault(key, {})[queue_id] = offset
        self._synced = {key: dict(queues) for key, queues in master.items()}
        changed = False
        for key, queues in master.items():
            mine = local.setdefault(key, {})
            if mine != queues:
                mine.update(queues)
                changed = True
        if changed:
            self.offsets.dirty = True

    async def _return_offset(self, key: str, queue_id: int, offset: int) -> bool:
        topic, _, group = key.partition(KEY_SEPARATOR)
        header = UpdateConsumerOffsetRequestHeader(
            consumer_group=group, topic=topic, queue_id=queue_id, commit_offset=offset
        )
        with contextlib.suppress(MQError):
            response = await self._call(RequestCode.UPDATE_CONSUMER_OFFSET, header.to_fields())
            if response.code == ResponseCode.SUCCESS:
                self.offsets_returned += 1
                log.info(
                    "slave sync: offset %d of %s[%d] committed here handed to the master",
                    offset,
                    key,
                    queue_id,
                )
                return True
        return False
