"""Consume progress per queue.

Clustering groups share progress on the brokers (:class:`RemoteOffsetStore`: memory here,
pushed to the queue's master every few seconds, piggy-backed on pulls, and written through on
rebalance and shutdown). Broadcasting consumers each keep their own progress in a local JSON
file (:class:`LocalFileOffsetStore`). Offsets only move forward during consumption
(``increase_only``); seeks, resets and orderly commits set them outright.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from aiorocketmq.protocol.body import MessageQueue
from aiorocketmq.protocol.codes import RequestCode
from aiorocketmq.protocol.errors import BrokerError, MQError
from aiorocketmq.protocol.headers import (
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    UpdateConsumerOffsetRequestHeader,
)

if TYPE_CHECKING:
    from .client_instance import ClientInstance

log = logging.getLogger(__name__)

#: ``read_store`` results besides a real offset.
NOT_FOUND = -1
READ_FAILED = -2
OFFSET_TIMEOUT = 5.0


class OffsetStore(Protocol):
    async def load(self) -> None: ...

    def update(self, queue: MessageQueue, offset: int, *, increase_only: bool) -> None: ...

    def read_memory(self, queue: MessageQueue) -> int: ...

    async def read_store(self, queue: MessageQueue) -> int: ...

    async def persist(self, queue: MessageQueue) -> None: ...

    async def persist_all(self, queues: Iterable[MessageQueue], *, wait: bool = False) -> None: ...

    def remove(self, queue: MessageQueue) -> None: ...

    def slot(self, queue: MessageQueue) -> OffsetSlot: ...

    def snapshot(self) -> dict[MessageQueue, int]: ...


class OffsetSlot:
    """One queue's offset in memory. Consumption updates it through the slot its process
    queue holds, sparing a table lookup (and a MessageQueue hash) per consumed batch."""

    __slots__ = ("value",)

    def __init__(self, value: int = NOT_FOUND) -> None:
        self.value = value

    def advance(self, offset: int) -> None:
        if offset > self.value:
            self.value = offset


class _MemoryTable:
    def __init__(self) -> None:
        self._slots: dict[MessageQueue, OffsetSlot] = {}

    def update(self, queue: MessageQueue, offset: int, *, increase_only: bool) -> None:
        if offset < 0:
            return
        slot = self._slots.get(queue)
        if slot is None:
            self._slots[queue] = OffsetSlot(offset)
        elif not increase_only or offset > slot.value:
            slot.value = offset

    def slot(self, queue: MessageQueue) -> OffsetSlot:
        """The queue's slot (kept while the queue is owned; ``remove`` forgets it)."""
        slot = self._slots.get(queue)
        if slot is None:
            slot = self._slots[queue] = OffsetSlot()
        return slot

    def _set(self, queue: MessageQueue, offset: int) -> None:
        slot = self._slots.get(queue)
        if slot is None:
            self._slots[queue] = OffsetSlot(offset)
        else:
            slot.value = offset

    def read_memory(self, queue: MessageQueue) -> int:
        slot = self._slots.get(queue)
        return NOT_FOUND if slot is None else slot.value

    def remove(self, queue: MessageQueue) -> None:
        self._slots.pop(queue, None)

    def snapshot(self) -> dict[MessageQueue, int]:
        """Queue -> offset, for queues with a known offset."""
        return {queue: slot.value for queue, slot in self._slots.items() if slot.value >= 0}


class RemoteOffsetStore(_MemoryTable):
    """Clustering progress, kept by each queue's master broker."""

    def __init__(self, instance: ClientInstance, group: str) -> None:
        super().__init__()
        self.instance = instance
        self.group = group

    async def load(self) -> None:
        return None

    async def read_store(self, queue: MessageQueue) -> int:
        """The broker's committed offset (cached here), ``NOT_FOUND`` or ``READ_FAILED``."""
        try:
            # The master, or while it is away any node of the broker (the Java client's rule).
            addr = await self.instance.find_broker_addr(queue.broker_name, topic=queue.topic, only_this=False)
            response = await self.instance.call(
                addr,
                RequestCode.QUERY_CONSUMER_OFFSET,
                QueryConsumerOffsetRequestHeader(
                    consumer_group=self.group, topic=queue.topic, queue_id=queue.queue_id
                ),
                timeout=OFFSET_TIMEOUT,
            )
        except BrokerError:
            return NOT_FOUND
        except MQError as exc:
            log.warning("cannot read the offset of %s for %s: %s", queue, self.group, exc)
            return READ_FAILED
        offset = QueryConsumerOffsetResponseHeader.from_fields(response.ext_fields).offset
        if offset < 0:
            return NOT_FOUND
        self._set(queue, offset)
        return offset

    async def _push(self, queue: MessageQueue, offset: int, *, wait: bool) -> None:
        addr = await self.instance.find_broker_addr(queue.broker_name, topic=queue.topic, only_this=False)
        header = UpdateConsumerOffsetRequestHeader(
            consumer_group=self.group, topic=queue.topic, queue_id=queue.queue_id, commit_offset=offset
        )
        if wait:
            await self.instance.call(addr, RequestCode.UPDATE_CONSUMER_OFFSET, header, timeout=OFFSET_TIMEOUT)
        else:
            await self.instance.oneway(addr, RequestCode.UPDATE_CONSUMER_OFFSET, header)

    async def persist(self, queue: MessageQueue) -> None:
        offset = self.read_memory(queue)
        if offset >= 0:
            try:
                await self._push(queue, offset, wait=True)
            except MQError as exc:
                log.warning("cannot persist the offset of %s for %s: %s", queue, self.group, exc)

    async def persist_all(self, queues: Iterable[MessageQueue], *, wait: bool = False) -> None:
        """Push the offsets of ``queues``; forget offsets of queues no longer owned."""
        owned = set(queues)
        targets = []
        for queue, slot in list(self._slots.items()):
            if queue not in owned:
                del self._slots[queue]
            elif slot.value >= 0:
                targets.append((queue, slot.value))
        results = await asyncio.gather(
            *(self._push(queue, offset, wait=wait) for queue, offset in targets), return_exceptions=True
        )
        for (queue, _), result in zip(targets, results):
            if isinstance(result, BaseException):
                log.warning("cannot persist the offset of %s for %s: %s", queue, self.group, result)


def default_offset_dir() -> Path:
    configured = os.environ.get("ROCKETMQ_CLIENT_LOCAL_OFFSET_STORE_DIR")
    return Path(configured) if configured else Path.home() / ".rocketmq_offsets"


def _queue_key(queue: MessageQueue) -> str:
    return f"{queue.topic}@{queue.broker_name}@{queue.queue_id}"


def _parse_key(key: str) -> MessageQueue:
    topic, broker_name, queue_id = key.rsplit("@", 2)
    return MessageQueue(topic=topic, broker_name=broker_name, queue_id=int(queue_id))


class LocalFileOffsetStore(_MemoryTable):
    """Broadcasting progress in ``<dir>/<client id>/<group>/offsets.json``.

    Writes go to a temporary file renamed over the old one, after copying the old one to
    ``offsets.json.bak``; loading falls back to the backup when the file is unreadable.
    """

    def __init__(self, directory: Path, client_id: str, group: str) -> None:
        super().__init__()
        self.group = group
        self.path = directory / client_id.replace(":", "_") / group / "offsets.json"

    @property
    def backup_path(self) -> Path:
        return self.path.with_name(self.path.name + ".bak")

    def _read_file(self) -> dict[MessageQueue, int]:
        for candidate in (self.path, self.backup_path):
            try:
                text = candidate.read_text(encoding="utf-8")
                data = json.loads(text)
                return {_parse_key(k): int(v) for k, v in data["offsetTable"].items()}
            except FileNotFoundError:
                continue
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("offset file %s is unreadable (%s); trying its backup", candidate, exc)
                continue
        return {}

    async def load(self) -> None:
        for queue, offset in (await asyncio.to_thread(self._read_file)).items():
            self._set(queue, offset)

    async def read_store(self, queue: MessageQueue) -> int:
        offsets = await asyncio.to_thread(self._read_file)
        offset = offsets.get(queue)
        if offset is None:
            return NOT_FOUND
        self._set(queue, offset)
        return offset

    def _write(self, table: dict[MessageQueue, int]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"offsetTable": {_queue_key(q): o for q, o in sorted(table.items())}}, indent=1)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        if self.path.exists():
            self.backup_path.write_bytes(self.path.read_bytes())
        os.replace(tmp, self.path)

    async def persist(self, queue: MessageQueue) -> None:
        return None

    async def persist_all(self, queues: Iterable[MessageQueue], *, wait: bool = False) -> None:
        owned = set(queues)
        table = {q: o for q, o in self.snapshot().items() if q in owned}
        if table:
            await asyncio.to_thread(self._write, table)
