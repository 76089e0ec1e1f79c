"""The broker process: composes the message store, the metadata tables, the client registry,
the background services and the request handlers onto one remoting server, and runs their
lifecycle. Each part is given only the other parts it uses; nothing but this module sees the
whole broker.

Everything runs on one event loop; the store hands fsync and file preallocation to threads.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING

from aiorocketmq import compiled
from aiorocketmq.broker.store import BrokerRole, FlushDiskType, MessageStore, StoreConfig
from aiorocketmq.client.routing import subscribe_queues
from aiorocketmq.protocol import speedups
from aiorocketmq.protocol.body import MessageQueue, TopicConfigSerializeWrapper
from aiorocketmq.protocol.codes import CURRENT_VERSION, Perm
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.loop import cancel_and_wait
from aiorocketmq.protocol.message import pack_host
from aiorocketmq.protocol.names import SCHEDULE_TOPIC, TIMER_TOPIC
from aiorocketmq.protocol.settings import ConfigError
from aiorocketmq.protocol.transport import Connection, Handler, HandlerResult, Server

from .acl import AccessValidator, AclConfigError, acl_files
from .arrivals import Arrivals
from .assignment import Assigner, RequestMode, RequestModeTable
from .auth import AuthEngine, inner_credentials
from .auth.admin import AuthAdminHandlers
from .clients import ClientRegistry, ConsumerGroup
from .cold_data import SWEEP_INTERVAL, ColdDataFlowControl, advise_read_ahead
from .config import BrokerConfig
from .config_files import Saver
from .delay import DelayService
from .delay_levels import DelayLevels
from .filters import ConsumerFilters
from .groups import GroupTable
from .ha import HighAvailability
from .handlers.acl import AclHandlers
from .handlers.admin import AdminHandlers, ControllerModeHandlers
from .handlers.assignment import AssignmentHandlers
from .handlers.cold_data import ColdDataHandlers
from .handlers.consumer import ConsumerHandlers
from .handlers.maintenance import MaintenanceHandlers
from .handlers.pull import Puller
from .handlers.query import QueryHandlers
from .handlers.recall import RecallHandlers
from .handlers.reply import ReplyHandlers
from .handlers.send import Sender
from .handlers.static_topic import StaticTopicHandlers
from .handlers.transaction import TransactionHandlers
from .locks import QueueLocks
from .long_polling import LongPolling
from .metrics import MetricsExporter
from .offsets import OffsetTable, consumer_progress
from .pop import PopService
from .pop.handlers import PopHandlers
from .recall import Recaller
from .registration import NameServerRegistration
from .replicas import AutoSwitch, ReplicasManager
from .static_topics import StaticTopicRouter, StaticTopicTable
from .stats import BrokerStats, TpsSampler
from .stats_history import SAMPLE_INTERVAL, StatsHistory
from .timers import TimerStore
from .topics import TopicTable
from .transactions import TransactionService
from .writer import MessageWriter

if TYPE_CHECKING:
    from .grpc import GrpcEndpoint, MessagingService

log = logging.getLogger(__name__)

#: What GET_BROKER_RUNTIME_INFO reports as ``brokerVersionDesc``.
BROKER_VERSION_DESC = "V4_9_4"


def resolve_ipv4(host: str) -> str:
    """``brokerIP1`` may be a host name (a compose service, say); records need its address."""
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        return socket.gethostbyname(host)


def uptime(seconds: float) -> str:
    """RocketMQ's ``runtime`` format: ``[ 0 days, 1 hours, 2 minutes, 3 seconds ]``."""
    total = int(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"[ {days} days, {hours} hours, {minutes} minutes, {secs} seconds ]"


def access_validator(config: BrokerConfig) -> AccessValidator | None:
    """The ACL rules when ``aclEnable=true``; a broker that should check requests but has no
    usable ACL file refuses to start (raises :class:`ConfigError`) rather than serve open."""
    if not config.acl_enable:
        return None
    if config.authentication_enabled or config.authorization_enabled:
        # RocketMQ 5.3 has ACL 2.0 only: its switches replace aclEnable (migrateAuthFromV1Enabled
        # carries the ACL 1.0 accounts over).
        log.warning("aclEnable=true is ignored: ACL 2.0 (authenticationEnabled/authorizationEnabled) is on")
        return None
    files = acl_files(config.rocketmq_home, config.acl_plain_file)
    if not files:
        raise ConfigError(
            "aclEnable=true but no ACL file: set ROCKETMQ_HOME (for $ROCKETMQ_HOME/conf/plain_acl.yml) "
            "or rocketmq.acl.plain.file in the broker config"
        )
    if not any(path.is_file() for path in files):
        raise ConfigError(f"aclEnable=true but no ACL file exists: {', '.join(map(str, files))}")
    try:
        validator = AccessValidator(files)
    except AclConfigError as exc:
        raise ConfigError(f"aclEnable=true but the ACL file is not usable: {exc}") from None
    log.info(
        "ACL on: %d accounts from %s",
        len(validator.config.accounts),
        ", ".join(str(p) for p in files if p.is_file()),
    )
    return validator


def guarded(access: AccessValidator, handler: Handler) -> Handler:
    """``handler`` behind the access check: a refused request raises, which the transport
    answers with SYSTEM_ERROR and the reason (no answer to a one-way request)."""
    check = access.check

    def checked(conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        check(cmd.code, cmd.ext_fields, cmd.body, conn.address)
        return handler(conn, cmd)

    return checked


def auth_engine(config: BrokerConfig) -> AuthEngine:
    """ACL 2.0's metadata and checks; a broker whose ACL 2.0 settings cannot be used refuses to
    start (raises :class:`ConfigError`)."""
    engine = AuthEngine(config)
    engine.start()
    return engine


def auth_guarded(engine: AuthEngine, handler: Handler) -> Handler:
    """``handler`` behind ACL 2.0: a refused request raises NO_PERMISSION with Apache's remark,
    which the transport answers and logs (rate-limited)."""
    check = engine.check_remoting

    def checked(conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        check(cmd.code, cmd.ext_fields, cmd.body, cmd.version, conn.address)
        return handler(conn, cmd)

    return checked


class _RoleSwitch:
    """What controller mode's :class:`ReplicasManager` changes in the broker on a role change."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    @property
    def auto(self) -> AutoSwitch:
        return self._broker.ha.auto

    def commit_log_max_offset(self) -> int:
        return self._broker.store.commit_log_max_offset

    async def become_master(self, master_epoch: int) -> None:
        await self._broker.ha.become_master(master_epoch)
        # The name servers prefer the registration with the newest epoch for a broker id.
        self._broker.topics.next_version(master_epoch)

    async def become_slave(self, master_addr: str, master_epoch: int, master_broker_id: int) -> None:
        await self._broker.ha.become_slave(master_addr, master_epoch, master_broker_id)
        self._broker.topics.next_version(master_epoch)

    async def role_changed(self) -> None:
        await self._broker.role_changed()


class Broker:
    """One broker: ``await start()``, serve, ``await shutdown()``."""

    def __init__(self, config: BrokerConfig, store_config: StoreConfig) -> None:
        self.config = config
        self.store_config = store_config
        if config.enable_controller_mode:
            # Controller mode: a slave (taking no writes) until the controllers say otherwise.
            store_config.broker_role = BrokerRole.SLAVE
        if config.enable_slave_acting_master:
            log.warning(
                "enableSlaveActingMaster=true is not supported here and is ignored (use enableControllerMode)"
            )
        store_host = pack_host(resolve_ipv4(config.broker_ip1), config.listen_port)
        # The parts; each service and handler family is given only the parts it uses.
        self.store = store = MessageStore(store_config, store_host=store_host)
        store.consumer_progress = self._consumer_progress
        self.stats = stats = BrokerStats()
        self.tps = TpsSampler(stats)
        self.history = StatsHistory(stats)
        self.topics = topics = TopicTable(config, on_change=self._topics_changed)
        self.groups = groups = GroupTable(config, on_change=lambda: self._group_saver.request())
        self.offsets = offsets = OffsetTable(config)
        self.clients = clients = ClientRegistry(on_consumers_changed=self._consumers_changed)
        self.locks = QueueLocks(config.lock_max_live_time)
        self.writer = writer = MessageWriter(store, stats, DelayLevels(config.delay_levels), store_host)
        self.long_polling = LongPolling(store.get_max_offset)
        self.filters = ConsumerFilters(config.enable_property_filter)
        self.delay = DelayService(config, store=store, writer=writer)
        self.timers = writer.timers = TimerStore(
            store,
            writer,
            config.config_dir / "timercheck",
            enabled=config.timer_wheel_enable,
            max_delay_sec=config.timer_max_delay_sec,
        )
        self.transactions = TransactionService(
            config, store=store, writer=writer, offsets=offsets, producers=clients
        )
        self.ha = HighAvailability(
            config,
            store_config,
            store,
            topics=topics,
            groups=groups,
            offsets=offsets,
            delay=self.delay,
            topics_changed=self._topics_changed,
            groups_changed=lambda: self._group_saver.request(),
            delay_changed=self.delay.save_soon,
        )
        self.cold_data = ColdDataFlowControl(config, store_config, lambda: store.commit_log_max_offset)
        self.static_topics = StaticTopicTable(config)
        self.registration = NameServerRegistration(
            config, self._registered_topics, self.ha.registered, topics.take_changed
        )
        self.static_router = StaticTopicRouter(
            self.static_topics, self.registration.route, inner_credentials(config)
        )
        #: Controller mode (RocketMQ 5): the controllers give the id and the role, which may
        #: change at run time; no name-server registration until it is known.
        self.replicas: ReplicasManager | None = None
        if config.enable_controller_mode:
            self.registration.isolated = True
            self.replicas = ReplicasManager(
                config, _RoleSwitch(self), signer=self.registration.credentials.sign
            )
        #: Whether delayed delivery, timers, transaction checks and POP revive run (a master's).
        self._special_services = False
        self._role_lock = asyncio.Lock()
        #: Every consumer waiting for a message: held remoting pulls (long_polling), POP and the
        #: 5.x receives and pulls; the store's one listener for all of them.
        self.arrivals = Arrivals(self.long_polling)
        self.pop = PopService(
            config,
            store=store,
            writer=writer,
            topics=topics,
            groups=groups,
            offsets=offsets,
            arrivals=self.arrivals,
        )
        self.metrics = MetricsExporter(
            config, stats=stats, store=store, topics=topics, offsets=offsets, clients=clients
        )
        self.access = access_validator(config)
        #: ACL 2.0: its metadata is kept (and managed by 3001-3010) even with both switches off.
        self.auth = auth_engine(config)
        self.request_modes = RequestModeTable(config.config_dir)
        self.assigner = Assigner(
            self.request_modes,
            clients,
            self._subscribe_queues,
            default_mode=RequestMode(config.default_message_request_mode),
            default_pop_share=config.default_pop_share_queue_num,
            load_balance=config.server_load_balancer_enable,
        )
        self._topic_saver = Saver(topics.file, topics.encode)
        self._group_saver = Saver(groups.file, groups.encode)
        self._offset_saver = Saver(offsets.file, offsets.encode)
        self._static_saver = Saver(self.static_topics.file, self.static_topics.encode)
        self.recaller = Recaller(config, store=store, topics=topics, timers=self.timers)
        self.sender = Sender(
            config,
            store=store,
            topics=topics,
            groups=groups,
            writer=writer,
            transactions=self.transactions,
            max_message_size=store_config.max_message_size,
            sync_flush=store_config.flush_disk_type == FlushDiskType.SYNC_FLUSH,
        )
        families = (
            self.sender,
            Puller(
                config,
                store=store,
                topics=topics,
                groups=groups,
                clients=clients,
                offsets=offsets,
                long_polling=self.long_polling,
                writer=writer,
                stats=stats,
                filters=self.filters,
                cold=self.cold_data,
            ),
            ConsumerHandlers(
                store=store,
                topics=topics,
                groups=groups,
                offsets=offsets,
                clients=clients,
                locks=self.locks,
                filters=self.filters,
            ),
            QueryHandlers(config, store),
            TransactionHandlers(config, self.transactions),
            AdminHandlers(
                config,
                store_config=store_config,
                store=store,
                topics=topics,
                groups=groups,
                offsets=offsets,
                clients=clients,
                runtime_info=self.runtime_info,
                delay_offsets=self.delay.encode,
                register=self.registration.register_changes,
                timers=self.timers,
                ha_status=self.ha.ha_status,
                static_topics=self.static_topics,
                static_changed=self._static_topics_changed,
                consumer_tps=self.metrics.consumer_tps,
            ),
            ControllerModeHandlers(config, store=store, replicas=self.replicas),
            AclHandlers(config, self.access),
            AuthAdminHandlers(self.auth.store),
            MaintenanceHandlers(
                config,
                store=store,
                topics=topics,
                groups=groups,
                offsets=offsets,
                clients=clients,
                history=self.history,
            ),
            ReplyHandlers(config, topics=topics, clients=clients, writer=writer),
            PopHandlers(self.pop),
            AssignmentHandlers(self.assigner, self.request_modes, topics=topics, groups=groups),
            RecallHandlers(config, recaller=self.recaller),
            ColdDataHandlers(self.cold_data, self._set_read_ahead),
            StaticTopicHandlers(
                config,
                topics=topics,
                table=self.static_topics,
                changed=self._static_topics_changed,
                register=self.registration.register_changes,
            ),
        )
        handlers: dict[int, Handler] = {}
        for family in families:
            handlers.update(family.handlers())
        self.grpc = self._grpc_endpoint() if config.enable_grpc_server else None
        if self.auth.enabled:
            handlers = {code: auth_guarded(self.auth, handler) for code, handler in handlers.items()}
        elif self.access is not None:
            # Every request passes the access check first; with ACL off the handlers are
            # registered as they are, so the check costs nothing.
            handlers = {code: guarded(self.access, handler) for code, handler in handlers.items()}
        self.server = Server(
            handlers,
            name=f"broker {config.broker_name}",
            on_disconnect=self._disconnected,
            idle_timeout=config.server_channel_max_idle_time_seconds,
            tls=config.server_tls(),
            limits=config.connection_limits(),
        )
        self.metrics.connections_dropped = lambda: self.server.dropped
        self.metrics.slave_lag = self.ha.slave_lag
        self._tasks: list[asyncio.Task[None]] = []
        self._store_started = False
        self._stopped = False
        self.started_at = time.time()

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self, host: str | None = None) -> None:
        """Open the store and serve; ``host`` overrides ``bindAddress``."""
        host = host or self.config.bind_address
        self.topics.load()
        self.groups.load()
        self.offsets.load()
        self.request_modes.load()
        self.static_topics.load()
        if self.static_topics.details:
            self.static_router.install(self.server.handlers)
        await self.store.start()
        self._store_started = True
        self.server.between_requests = self.store.flush_settler()
        self.store.add_arrival_listener(self.arrivals.on_arrival)
        self.store.add_arrival_listener(self.delay.on_arrival, SCHEDULE_TOPIC)
        self.delay.load()
        self.store.add_arrival_listener(self.timers.on_arrival, TIMER_TOPIC)
        self.timers.load()
        await self.transactions.load()
        self.pop.recover()
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
        if self.grpc is not None:
            await self._start_grpc(self.grpc, host)
        await self._set_special_services(not self.ha.is_slave)
        await self.ha.start(host)
        self._spawn(self._sample_tps_periodically())
        self._spawn(self._sample_history_periodically())
        self._spawn(self._persist_offsets_periodically())
        self._spawn(self._sweep_cold_data_periodically())
        self._spawn(self._expire_clients_periodically())
        self._spawn(self.long_polling.recheck_periodically())
        await self.registration.start()
        if self.replicas is not None:
            await self.replicas.start()
        log.info(
            "broker %s (cluster %s, id %d) serving %s; listening on %s:%d (ACL %s, TLS %s)",
            self.config.broker_name,
            self.config.broker_cluster_name,
            self.config.broker_id,
            self.config.broker_addr,
            host,
            port,
            "2.0" if self.auth.enabled else "on" if self.access is not None else "off",
            self.server.tls.mode if self.server.tls is not None else "disabled",
        )
        log.log(  # a warning while a compiled build is installed but not running (compiled.py)
            compiled.startup_level(),
            "broker %s %s; %s",
            self.config.broker_name,
            speedups.describe(),
            compiled.describe(),
        )

    def _grpc_endpoint(self) -> GrpcEndpoint[MessagingService]:
        # grpcio is imported only by brokers that serve 5.x clients.
        from .grpc import GrpcEndpoint, MessagingService

        service = MessagingService(
            self.config,
            store=self.store,
            topics=self.topics,
            groups=self.groups,
            offsets=self.offsets,
            clients=self.clients,
            transactions=self.transactions,
            pop=self.pop,
            acceptor=self.sender.acceptor,
            recaller=self.recaller,
            access=self.access,
            auth=self.auth if self.auth.enabled else None,
            route=self.registration.route,
            signer=self.registration.credentials.sign,
        )
        return GrpcEndpoint(service, self.config.grpc_server_tls())

    async def _start_grpc(self, endpoint: GrpcEndpoint[MessagingService], host: str) -> None:
        """The 5.x endpoint; a busy port is reported and the broker serves 4.x clients on
        (as for the VIP and metrics ports)."""
        try:
            port = await endpoint.start(host, self.config.grpc_server_port)
        except (OSError, RuntimeError, ValueError) as exc:
            log.warning("cannot serve 5.x clients (gRPC) on port %d: %s", self.config.grpc_server_port, exc)
            return
        endpoint.service.bind(resolve_ipv4(self.config.broker_ip1), port)
        # The port bound (grpcServerPort=0 picks one) is what the config listing reports, so
        # that other brokers route 5.x clients here (grpc/routes.py).
        self.config.grpc_server_port = port
        log.info("gRPC endpoint for 5.x clients on %s port %d accepts %s", host, port, endpoint.accepts)

    async def shutdown(self) -> None:
        """Unregister, stop serving, persist everything, close the store. Works on a broker
        whose start failed half-way; a step that fails is logged and the rest still run, so
        the store is closed whenever it was opened."""
        if self._stopped:
            return
        self._stopped = True
        log.info("broker %s shutting down", self.config.broker_name)
        for task in self._tasks:
            task.cancel()
        steps: list[tuple[str, Callable[[], Awaitable[None]]]] = [
            ("leave the controllers", self._stop_replicas),
            ("unregister from the name servers", self.registration.stop),
            ("stop the metrics endpoint", self.metrics.stop),
            ("stop replication", self.ha.stop),
            ("close client connections", self.server.close),
            ("stop the gRPC endpoint", self._stop_grpc),
            ("stop background tasks", self._stop_tasks),
            ("stop delayed delivery", self.delay.stop),
            ("stop transaction checks", self.transactions.stop),
            ("stop POP revive", self.pop.stop),
            ("close static-topic peer connections", self.static_router.close),
        ]
        if self._store_started:
            # Only a broker that owns its store directory writes to it (a second broker
            # started on a directory in use fails in store.start() and must leave it alone).
            steps += [
                ("stop timer messages and save their checkpoint", self.timers.stop),
                ("save delayOffset.json", self.delay.flush),
                ("save topics.json", self._topic_saver.flush),
                ("save subscriptionGroup.json", self._group_saver.flush),
                ("save consumerOffset.json", self._offset_saver.flush),
                ("save topicQueueMapping.json", self._static_saver.flush),
                ("close the store", self.store.shutdown),
            ]
        for what, step in steps:
            try:
                await step()
            except Exception:
                log.exception("shutdown: cannot %s", what)
        self.long_polling.clear()
        log.info("broker %s stopped", self.config.broker_name)

    async def _set_special_services(self, run: bool) -> None:
        """A slave's store takes writes only from its master: it neither delivers delayed or
        timer messages, nor checks transactions back, nor revives POP check points. Apache's
        ``changeSpecialServiceStatus``: started on a master, stopped when it becomes a slave."""
        if run == self._special_services:
            return
        self._special_services = run
        if run:
            self.delay.start()
            self.timers.start()
            self.transactions.start()
            self.pop.start()
        else:
            await self.delay.stop()
            await self.timers.stop()
            await self.transactions.stop()
            await self.pop.stop()

    async def role_changed(self) -> None:
        """Controller mode, after a role change: the master's services follow the role, and
        the name servers learn it (``brokerId`` 0 for the master, the controller's id for a
        slave)."""
        async with self._role_lock:
            if self._stopped:
                return
            await self._set_special_services(not self.ha.is_slave)
            if self.grpc is not None:
                # 5.x clients' routes name this broker under the id it has now (0: master),
                # not the one it started with (-1 in controller mode).
                self.grpc.service.routes.broker_id = self.config.broker_id
            log.info(
                "broker %s is now %s (brokerId %d)",
                self.config.broker_name,
                self.ha.role.value,
                self.config.broker_id,
            )
            await self.registration.unisolate()

    async def _stop_replicas(self) -> None:
        if self.replicas is not None:
            await self.replicas.stop()

    async def _stop_grpc(self) -> None:
        if self.grpc is not None:
            await self.grpc.stop()

    async def _stop_tasks(self) -> None:
        await cancel_and_wait(*self._tasks)
        self._tasks.clear()

    def _spawn(self, coro: Awaitable[None]) -> None:
        self._tasks.append(asyncio.ensure_future(coro))

    async def _sample_tps_periodically(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self.tps.sample()
            self.metrics.sample()

    async def _sample_history_periodically(self) -> None:
        while True:
            await asyncio.sleep(SAMPLE_INTERVAL)
            self.history.sample()

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
            if self.grpc is not None:
                self.grpc.service.expire(self.config.channel_expired_timeout / 1000)
            for conn in self.clients.expire(self.config.channel_expired_timeout / 1000):
                # Silent for two minutes: it is gone or stuck, so do not wait for it to read.
                conn.close_reason = "no heartbeat"
                conn.abort()

    # -- events ---------------------------------------------------------------------------

    def _registered_topics(self) -> TopicConfigSerializeWrapper:
        """What registrations carry: the topic table and the static topics' mappings."""
        wrapper = self.topics.wrapper()
        if self.static_topics.details:
            wrapper.topic_queue_mapping_info_map = self.static_topics.infos()
        return wrapper

    def _set_read_ahead(self, read_ahead: bool) -> None:
        """SET_COMMITLOG_READ_MODE: the kernel's read-ahead on the commit log's files."""
        self.store_config.data_read_ahead_enable = read_ahead
        count = advise_read_ahead((f.mm for f in self.store.commit_log.queue.files), read_ahead)
        log.info("commit-log read-ahead %s on %d file(s)", "on" if read_ahead else "off", count)

    async def _sweep_cold_data_periodically(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_INTERVAL)
            if self.cold_data.enabled:
                self.cold_data.sweep()

    def _static_topics_changed(self) -> None:
        self._static_saver.request()
        self.static_router.install(self.server.handlers)

    def _topics_changed(self) -> None:
        self._topic_saver.request()
        self.registration.register_soon()

    async def _subscribe_queues(self, topic: str) -> set[MessageQueue] | None:
        """A topic's readable queues on every broker: the name servers' route, or this
        broker's own queues when no name server knows the topic (yet)."""
        if self.config.namesrv_addrs:
            route = await self.registration.route(topic)
            if route is not None:
                return subscribe_queues(topic, route)
        found = self.topics.get(topic)
        if found is None or not found.perm & Perm.READ:
            return None
        name = self.config.broker_name
        return {MessageQueue(topic=topic, broker_name=name, queue_id=i) for i in range(found.read_queue_nums)}

    def _consumer_progress(self) -> Iterator[tuple[str, str, int, int]]:
        """What the store's forced clean-up must keep (see ``offsets.consumer_progress``)."""
        return consumer_progress(
            self.offsets,
            {name: list(group.subscriptions) for name, group in self.clients.consumers.items()},
            self.store.queue_ids,
            self.delay.offsets,
            SCHEDULE_TOPIC,
        )

    def _disconnected(self, conn: Connection) -> None:
        self.clients.connection_closed(conn)
        self.long_polling.connection_closed(conn)

    def _consumers_changed(self, group: ConsumerGroup) -> None:
        if not self.config.notify_consumer_ids_changed_enable:
            return
        cfg = self.groups.get(group.name)
        if cfg is not None and not cfg.notify_consumer_ids_changed_enable:
            return
        group.notify_ids_changed()

    # -- state ----------------------------------------------------------------------------

    def runtime_info(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO under RocketMQ's key names (what ``mqadmin clusterList`` and
        ``brokerStatus`` show), plus a few of our own."""
        store = self.store
        stats = self.stats
        earliest = store.look_message(store.commit_log_min_offset) if store.commit_log_max_offset else None
        return {
            **store.runtime_info(),
            "brokerVersionDesc": BROKER_VERSION_DESC,
            "brokerVersion": str(CURRENT_VERSION),
            "brokerName": self.config.broker_name,
            "brokerAddr": self.config.broker_addr,
            "bootTimestamp": str(int(self.started_at * 1000)),
            "runtime": uptime(time.time() - self.started_at),
            "putTps": self.tps.put_tps(),
            "getTransferedTps": self.tps.get_tps(),
            # RocketMQ 5's spelling, which its tools read (exportMetrics fails without it).
            "getTransferredTps": self.tps.get_tps(),
            "brokerActive": "true",
            "msgPutTotalTodayNow": str(stats.total_put),
            "msgGetTotalTodayNow": str(stats.total_got),
            "msgPutTotal": str(stats.total_put),
            "msgGetTotal": str(stats.total_got),
            "earliestMessageTimeStamp": str(earliest.store_timestamp if earliest is not None else -1),
            "putFailures": str(stats.put_failures),
            "topicCount": str(len(self.topics.topics)),
            "consumerGroupCount": str(len(self.clients.consumers)),
            "producerGroupCount": str(len(self.clients.producers)),
            "heldPullRequests": str(self.long_polling.held_count),
            "openTransactions": str(len(self.transactions.pending)),
            "delayedDelivered": str(self.delay.delivered),
            # No send or pull thread pools here (requests run on the event loop): nothing ever
            # waits in one. mqadmin clusterList prints these as its LOAD columns.
            "sendThreadPoolQueueSize": "0",
            "sendThreadPoolQueueHeadWaitTimeMills": "0",
            "pullThreadPoolQueueSize": "0",
            "pullThreadPoolQueueHeadWaitTimeMills": "0",
            "ackThreadPoolQueueSize": "0",
            "ackThreadPoolQueueHeadWaitTimeMills": "0",
            # What mqadmin exportMetrics reads: counts at the last two midnights, average size.
            "msgPutTotalTodayMorning": str(self.history.today_morning[0]),
            "msgGetTotalTodayMorning": str(self.history.today_morning[1]),
            "msgPutTotalYesterdayMorning": str(self.history.yesterday_morning[0]),
            "msgGetTotalYesterdayMorning": str(self.history.yesterday_morning[1]),
            "putMessageAverageSize": str(
                sum(stats.put_bytes.values()) / stats.total_put if stats.total_put else 0.0
            ),
            **self.timers.runtime_info(),
            **self.ha.runtime_info(),
            **(self.replicas.runtime_info() if self.replicas is not None else {}),
        }
