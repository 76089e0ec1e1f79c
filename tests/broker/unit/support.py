"""In-process broker parts for unit tests: a real message store in ``tmp_path``, the real
tables, services and handler families wired the way the broker wires them, and a recorded
connection standing in for the network."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiorocketmq.broker.clients import ClientChannel, ClientRegistry
from aiorocketmq.broker.config import BrokerConfig
from aiorocketmq.broker.delay import DelayService
from aiorocketmq.broker.delay_levels import DelayLevels
from aiorocketmq.broker.groups import GroupTable
from aiorocketmq.broker.handlers.pull import Puller
from aiorocketmq.broker.handlers.send import Sender
from aiorocketmq.broker.handlers.transaction import TransactionHandlers
from aiorocketmq.broker.locks import QueueLocks
from aiorocketmq.broker.long_polling import LongPolling
from aiorocketmq.broker.offsets import OffsetTable
from aiorocketmq.broker.stats import BrokerStats
from aiorocketmq.broker.store import FlushDiskType, MessageStore
from aiorocketmq.broker.topics import TopicTable
from aiorocketmq.broker.transactions import TransactionService
from aiorocketmq.broker.writer import MessageWriter
from aiorocketmq.protocol.codes import RequestCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.headers import SendMessageRequestHeaderV2
from aiorocketmq.protocol.message import MessageExt, PropertyKey, decode_records, encode_properties, pack_host
from aiorocketmq.protocol.transport import Connection, HandlerResult, error_response
from tests.broker import requests
from tests.store.support import small_config

STORE_HOST = pack_host("127.0.0.1", 10911)


class RecordedConnection(Connection):
    """The network edge: what a handler or service sends on a connection is recorded.

    A real :class:`Connection` with no socket (the handlers are typed with it, and the
    compiled build checks argument types), its sends recorded instead of written."""

    def __init__(self, address: str = "10.0.0.7:52001") -> None:
        super().__init__(name="recorded")
        host, port = address.rsplit(":", 1)
        self.peer = (host, int(port))
        self.responses: list[RemotingCommand] = []
        self.oneways: list[RemotingCommand] = []
        self._answered = asyncio.Event()

    def send_response(self, response: RemotingCommand) -> None:
        self.responses.append(response)
        self._answered.set()

    def send_oneway(self, cmd: RemotingCommand) -> None:
        self.oneways.append(cmd)

    async def next_response(self, timeout: float = 10.0) -> RemotingCommand:
        async with asyncio.timeout(timeout):
            while not self.responses:
                self._answered.clear()
                await self._answered.wait()
        return self.responses.pop(0)


async def answer(
    handler: Callable[[Any, RemotingCommand], HandlerResult], conn: Any, cmd: RemotingCommand
) -> Any:
    """What the transport does with a request: run the handler (awaiting what it returns) and
    turn an exception it raises into the error response."""
    try:
        result = handler(conn, cmd)
        if inspect.isawaitable(result):
            result = await result
    except Exception as exc:
        return error_response(cmd, exc)
    return result


@dataclass
class Parts:
    config: BrokerConfig
    store: MessageStore
    stats: BrokerStats
    topics: TopicTable
    groups: GroupTable
    offsets: OffsetTable
    clients: ClientRegistry
    locks: QueueLocks
    writer: MessageWriter
    long_polling: LongPolling
    delay: DelayService
    transactions: TransactionService
    sender: Sender
    puller: Puller
    transaction_handlers: TransactionHandlers

    def messages(self, topic: str, queue_id: int) -> list[MessageExt]:
        """Every message stored in one queue."""
        store = self.store
        low = store.get_min_offset(topic, queue_id)
        high = store.get_max_offset(topic, queue_id)
        found = []
        for offset, size, _code in store.read_consume_queue(topic, queue_id, low, high - low):
            record = store.read_record(offset, size)
            assert record is not None
            found.extend(decode_records(record))
        return found

    def tags_codes(self, topic: str, queue_id: int) -> list[int]:
        store = self.store
        low = store.get_min_offset(topic, queue_id)
        high = store.get_max_offset(topic, queue_id)
        return [code for _o, _s, code in store.read_consume_queue(topic, queue_id, low, high - low)]


@asynccontextmanager
async def broker_parts(
    root: Path, store_overrides: dict[str, Any] | None = None, **broker: Any
) -> AsyncIterator[Parts]:
    """The broker's parts without its server; ``broker`` overrides broker.conf keys."""
    config = BrokerConfig.load(
        None,
        {"storePathRootDir": str(root), "brokerName": "broker-u", "brokerIP1": "127.0.0.1", **broker},
    )
    store_config = small_config(root, **(store_overrides or {}))
    store = MessageStore(store_config, store_host=STORE_HOST)
    stats = BrokerStats()
    topics = TopicTable(config)
    groups = GroupTable(config)
    offsets = OffsetTable(config)
    clients = ClientRegistry()
    locks = QueueLocks(config.lock_max_live_time)
    writer = MessageWriter(store, stats, DelayLevels(config.delay_levels), STORE_HOST)
    long_polling = LongPolling(store.get_max_offset)
    delay = DelayService(config, store=store, writer=writer)
    transactions = TransactionService(config, store=store, writer=writer, offsets=offsets, producers=clients)
    sender = Sender(
        config,
        store=store,
        topics=topics,
        groups=groups,
        writer=writer,
        transactions=transactions,
        max_message_size=store_config.max_message_size,
        sync_flush=store_config.flush_disk_type == FlushDiskType.SYNC_FLUSH,
    )
    puller = Puller(
        config,
        store=store,
        topics=topics,
        groups=groups,
        clients=clients,
        offsets=offsets,
        long_polling=long_polling,
        writer=writer,
        stats=stats,
    )
    topics.load()
    groups.load()
    offsets.load()
    await store.start()
    store.add_arrival_listener(long_polling.on_arrival)
    store.add_arrival_listener(delay.on_arrival)
    delay.load()
    await transactions.load()
    try:
        yield Parts(
            config,
            store,
            stats,
            topics,
            groups,
            offsets,
            clients,
            locks,
            writer,
            long_polling,
            delay,
            transactions,
            sender,
            puller,
            TransactionHandlers(config, transactions),
        )
    finally:
        await delay.stop()
        long_polling.clear()
        await store.shutdown()


def send_request(
    topic: str,
    body: bytes = b"payload",
    *,
    queue_id: int = 0,
    tags: str | None = None,
    properties: dict[str, str] | None = None,
    group: str = "unit-producer",
    code: int = RequestCode.SEND_MESSAGE_V2,
    **header: Any,
) -> RemotingCommand:
    props = {
        PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: f"UNIQ-{time.monotonic_ns()}",
        PropertyKey.WAIT_STORE_MSG_OK: "true",
    }
    if tags:
        props[PropertyKey.TAGS] = tags
    props.update(properties or {})
    h = SendMessageRequestHeaderV2(
        producer_group=group,
        topic=topic,
        queue_id=queue_id,
        born_timestamp=int(time.time() * 1000),
        properties=encode_properties(props),
        **header,
    )
    fields = h.to_fields() if code != RequestCode.SEND_MESSAGE else h.to_v1().to_fields()
    return RemotingCommand.request(code, fields, body)


def pull_request(topic: str, offset: int, **options: Any) -> RemotingCommand:
    """:func:`tests.broker.requests.pull_request`, for the unit tests' consumer group unless told."""
    options.setdefault("group", "unit-consumer")
    return requests.pull_request(topic, offset, **options)


async def send_ok(
    parts: Parts, conn: RecordedConnection, topic: str, body: bytes = b"payload", **kwargs: Any
) -> RemotingCommand:
    response = await answer(parts.sender.send, conn, send_request(topic, body, **kwargs))
    assert response.code == 0, (response.code, response.remark)
    return response


def producer_channel(conn: RecordedConnection, client_id: str = "producer-1") -> ClientChannel:
    return ClientChannel(conn, client_id, "JAVA", 401)  # type: ignore[arg-type]
