"""The broker process: wires the message store, the metadata tables, the client registry,
the background services and the request handlers onto one remoting server.

Everything runs on one event loop; the store hands fsync and file preallocation to threads.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import random
import socket
import time
from collections.abc import Awaitable, Callable

from aiorocketmq.broker.store import FlushDiskType, MessageStore, PutResult, StoreConfig, StoreMessage
from aiorocketmq.protocol.codes import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    Perm,
    RequestCode,
    transaction_type,
)
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.headers import NotifyConsumerIdsChangedRequestHeader
from aiorocketmq.protocol.loop import cancel_and_wait
from aiorocketmq.protocol.message import PropertyKey, encode_properties, pack_host, tags_code
from aiorocketmq.protocol.transport import Connection, Handler, Server

from .clients import ClientRegistry, ConsumerGroup
from .config import BrokerConfig
from .config_files import Saver
from .delay import DelayService
from .groups import GroupTable
from .handlers import admin, consumer, pull, query, send, transaction
from .locks import QueueLocks
from .long_polling import LongPolling
from .metrics import MetricsExporter
from .offsets import OffsetTable
from .registration import NameServerRegistration
from .stats import BrokerStats, TpsSampler
from .topics import SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TopicTable
from .transactions import TransactionService

log = logging.getLogger(__name__)

_DELAY = PropertyKey.DELAY_TIME_LEVEL
_PERM_READ = int(Perm.READ)
_PERM_WRITE = int(Perm.WRITE)
_REAL_TOPIC = PropertyKey.REAL_TOPIC
_REAL_QID = PropertyKey.REAL_QUEUE_ID


def resolve_ipv4(host: str) -> str:
    """``brokerIP1`` may be a host name (a compose service, say); records need its address."""
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        return socket.gethostbyname(host)


class Broker:
    """One broker: ``await start()``, serve, ``await shutdown()``."""

    def __init__(self, config: BrokerConfig, store_config: StoreConfig) -> None:
        self.config = config
        self.store_config = store_config
        self.store_host = pack_host(resolve_ipv4(config.broker_ip1), config.listen_port)
        self.store = MessageStore(store_config, store_host=self.store_host)
        self.stats = BrokerStats()
        self.tps = TpsSampler(self.stats)
        self.topics = TopicTable(config, on_change=self._topics_changed)
        self.groups = GroupTable(config, on_change=lambda: self._group_saver.request())
        self.offsets = OffsetTable(config)
        self.clients = ClientRegistry(on_consumers_changed=self._consumers_changed)
        self.locks = QueueLocks(config.lock_max_live_time)
        self.delay_levels = config.delay_levels
        self.long_polling = LongPolling(self)
        self.delay = DelayService(self)
        self.transactions = TransactionService(self)
        self.registration = NameServerRegistration(self)
        self.metrics = MetricsExporter(self)
        self._topic_saver = Saver(self.topics.file, self.topics.encode)
        self._group_saver = Saver(self.groups.file, self.groups.encode)
        self._offset_saver = Saver(self.offsets.file, self.offsets.encode)
        handlers: dict[int, Handler] = {}
        for family in (send, pull, consumer, query, transaction, admin):
            handlers.update(family.handlers(self))
        self.server = Server(
            handlers,
            name=f"broker {config.broker_name}",
            on_disconnect=self._disconnected,
            idle_timeout=config.server_channel_max_idle_time_seconds,
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._store_started = False
        self._stopped = False
        self.is_sync_flush = store_config.flush_disk_type == FlushDiskType.SYNC_FLUSH
        self.started_at = time.time()
        self.running = False

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def writable(self) -> bool:
        return bool(self.config.broker_permission & _PERM_WRITE)

    @property
    def readable(self) -> bool:
        return bool(self.config.broker_permission & _PERM_READ)

    async def start(self, host: str | None = None) -> None:
        self.topics.load()
        self.groups.load()
        self.offsets.load()
        await self.store.start()
        self._store_started = True
        self.store.add_arrival_listener(self.long_polling.on_arrival)
        self.store.add_arrival_listener(self.delay.on_arrival)
        self.delay.load()
        await self.transactions.load()
        port = await self.server.listen(host, self.config.listen_port)
        vip_port = self.config.listen_port - 2
        if vip_port > 0:
            try:
                await self.server.listen(host, vip_port)
            except OSError as exc:
                log.warning("cannot listen on the VIP channel port %d: %s", vip_port, exc)
        if self.config.metrics_prom_exporter_enable:
            try:
                await self.metrics.start(host, self.config.metrics_prom_exporter_port)
            except OSError as exc:
                log.warning(
                    "cannot serve metrics on port %d: %s", self.config.metrics_prom_exporter_port, exc
                )
        self.running = True
        self.delay.start()
        self.transactions.start()
        self._spawn(self._sample_tps_periodically())
        self._spawn(self._persist_offsets_periodically())
        self._spawn(self._expire_clients_periodically())
        self._spawn(self.long_polling.recheck_periodically())
        await self.registration.start()
        log.info(
            "broker %s (cluster %s, id %d) serving %s; listening on %s:%d",
            self.config.broker_name,
            self.config.broker_cluster_name,
            self.config.broker_id,
            self.config.broker_addr,
            host or "0.0.0.0",
            port,
        )

    async def shutdown(self) -> None:
        """Unregister, stop serving, persist everything, close the store. Works on a broker
        whose start failed half-way; a step that fails is logged and the rest still run, so
        the store is closed whenever it was opened."""
        if self._stopped:
            return
        self._stopped = True
        self.running = False
        log.info("broker %s shutting down", self.config.broker_name)
        for task in self._tasks:
            task.cancel()
        steps: list[tuple[str, Callable[[], Awaitable[None]]]] = [
            ("unregister from the name servers", self.registration.stop),
            ("stop the metrics endpoint", self.metrics.stop),
            ("close client connections", self.server.close),
            ("stop background tasks", self._stop_tasks),
            ("stop delayed delivery", self.delay.stop),
            ("stop transaction checks", self.transactions.stop),
        ]
        if self._store_started:
            # Only a broker that owns its store directory writes to it (a second broker
            # started on a directory in use fails in store.start() and must leave it alone).
            steps += [
                ("save delayOffset.json", self.delay.flush),
                ("save topics.json", self._topic_saver.flush),
                ("save subscriptionGroup.json", self._group_saver.flush),
                ("save consumerOffset.json", self._offset_saver.flush),
                ("close the store", self.store.shutdown),
            ]
        for what, step in steps:
            try:
                await step()
            except Exception:
                log.exception("shutdown: cannot %s", what)
        self.long_polling.clear()
        log.info("broker %s stopped", self.config.broker_name)

    async def _stop_tasks(self) -> None:
        await cancel_and_wait(*self._tasks)
        self._tasks.clear()

    def _spawn(self, coro: Awaitable[None]) -> None:
        self._tasks.append(asyncio.ensure_future(coro))

    async def _sample_tps_periodically(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self.tps.sample()

    async def _persist_offsets_periodically(self) -> None:
        interval = self.config.flush_consumer_offset_interval / 1000
        while True:
            await asyncio.sleep(interval)
            if self.offsets.dirty:
                self._offset_saver.request()

    async def _expire_clients_periodically(self) -> None:
        interval = self.config.client_housekeeping_interval / 1000
        while True:
            await asyncio.sleep(interval)
            for conn in self.clients.expire(self.config.channel_expired_timeout / 1000):
                # Silent for two minutes: it is gone or stuck, so do not wait for it to read.
                conn.close_reason = "no heartbeat"
                conn.abort()

    # -- events ---------------------------------------------------------------------------

    def _topics_changed(self) -> None:
        self._topic_saver.request()
        self.registration.register_soon()

    def _disconnected(self, conn: Connection) -> None:
        self.clients.connection_closed(conn)
        self.long_polling.connection_closed(conn)

    def _consumers_changed(self, group: ConsumerGroup) -> None:
        if not self.config.notify_consumer_ids_changed_enable:
            return
        cfg = self.groups.get(group.name)
        if cfg is not None and not cfg.notify_consumer_ids_changed_enable:
            return
        fields = NotifyConsumerIdsChangedRequestHeader(consumer_group=group.name).to_fields()
        for conn in list(group.channels):
            if not conn.closed:
                # Server-initiated requests go out as JSON: C++ and JS clients read nothing else.
                conn.send_oneway(
                    RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, dict(fields))
                )

    # -- storing ----------------------------------------------------------------------------

    def born_host(self, conn: Connection) -> bytes:
        """The peer address as stored in records; IPv6 peers become 127.0.0.1 because the C++
        and JS clients read 4-byte hosts only (REMOTING.md §4.3)."""
        packed: bytes | None = conn.attrs.get("born_host")
        if packed is None:
            host, port = conn.peer
            try:
                packed = pack_host(host, port)
            except ValueError:
                packed = pack_host("127.0.0.1", port)
            if len(packed) != 8:
                packed = pack_host("127.0.0.1", port)
            conn.attrs["born_host"] = packed
        return packed

    def build_message(
        self,
        topic: str,
        queue_id: int,
        body: bytes,
        properties: dict[str, str],
        *,
        flag: int = 0,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: bytes = b"\0" * 8,
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
        store_timestamp: int = 0,
        encoded: str | None = None,
    ) -> StoreMessage:
        """A store message, diverted to ``SCHEDULE_TOPIC_XXXX`` when it carries a delay level
        (and is not a prepared transaction): the consume-queue tags slot then holds its
        delivery time and ``REAL_TOPIC``/``REAL_QID`` remember where it goes.

        ``encoded`` is ``properties`` already in wire form, when the caller has it."""
        tags = properties.get(PropertyKey.TAGS)
        code = tags_code(tags)
        delay = properties.get(_DELAY)
        if (
            delay
            and topic != TRANS_HALF_TOPIC
            and transaction_type(sys_flag) in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)
        ):
            try:
                level = int(delay)
            except ValueError:
                level = 0
            if level > 0:
                level = min(level, len(self.delay_levels))
                properties[_REAL_TOPIC] = topic
                properties[_REAL_QID] = str(queue_id)
                topic = SCHEDULE_TOPIC
                queue_id = level - 1
                if not store_timestamp:
                    store_timestamp = time.time_ns() // 1_000_000
                code = store_timestamp + self.delay_levels[level - 1]
                encoded = None
        return StoreMessage(
            topic=topic,
            queue_id=queue_id,
            body=body,
            properties=encoded if encoded is not None else encode_properties(properties),
            flag=flag,
            sys_flag=sys_flag,
            born_timestamp=born_timestamp,
            born_host=born_host,
            reconsume_times=reconsume_times,
            prepared_transaction_offset=prepared_transaction_offset,
            tags_code=code,
            keys=properties.get(PropertyKey.KEYS),
            uniq_key=properties.get(PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
            store_timestamp=store_timestamp,
        )

    def put(self, msg: StoreMessage) -> PutResult:
        started = time.perf_counter()
        result = self.store.put_message(msg)
        self.stats.on_put_latency(time.perf_counter() - started)
        self.stats.on_put(msg.topic, result)
        return result

    def put_batch(self, messages: list[StoreMessage]) -> PutResult:
        started = time.perf_counter()
        result = self.store.put_messages(messages)
        self.stats.on_put_latency(time.perf_counter() - started)
        self.stats.on_put(messages[0].topic, result)
        return result

    def random_queue(self, queue_nums: int) -> int:
        return random.randrange(max(1, queue_nums))
