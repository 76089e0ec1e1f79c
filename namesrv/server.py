"""The name server process's request handlers, liveness scan and lifecycle.

Handlers stay thin: decode the header and body, ask :class:`~namesrv.routes.RouteRegistry` or
:class:`~namesrv.kv_config.KVConfig`, encode the answer (docs/protocol.md §3.1). Bad headers and
bodies raise :class:`~protocol.errors.ProtocolError`, which the transport turns into a
SYSTEM_ERROR response naming the problem; unknown request codes get REQUEST_CODE_NOT_SUPPORTED
from the transport. With ``authenticationEnabled`` every write goes through
:class:`~namesrv.auth.WriteAuthenticator` first; a refused one changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Callable, Coroutine
from typing import Any

from aiorocketmq.protocol.admin_requests import (
    AddWritePermOfBrokerRequestHeader,
    AddWritePermOfBrokerResponseHeader,
)
from aiorocketmq.protocol.body import (
    ORDER_TOPIC_CONFIG,
    BrokerMemberGroup,
    DataVersion,
    GetBrokerMemberGroupResponseBody,
    KVTable,
    RegisterBrokerBody,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
)
from aiorocketmq.protocol.codes import MQVersion, RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import ProtocolError
from aiorocketmq.protocol.headers import (
    BrokerHeartbeatRequestHeader,
    DeleteKVConfigRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetBrokerMemberGroupRequestHeader,
    GetKVConfigRequestHeader,
    GetKVConfigResponseHeader,
    GetKVListByNamespaceRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    PutKVConfigRequestHeader,
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    RegisterTopicRequestHeader,
    UnregisterBrokerRequestHeader,
    WipeWritePermOfBrokerRequestHeader,
    WipeWritePermOfBrokerResponseHeader,
)
from aiorocketmq.protocol.settings import ConfigError, read_properties
from aiorocketmq.protocol.transport import REFUSALS, Connection, Handler, HandlerResult, Server

from .auth import WRITES, UsersFileError, WriteAuthenticator
from .config import NamesrvSettings
from .kv_config import KVConfig
from .routes import LiveBroker, RouteRegistry

log = logging.getLogger(__name__)

# Java appends this hint to its TOPIC_NOT_EXIST remark (FAQUrl.suggestTodo).
#: Keys no request may change: where the server keeps its files and whom it serves on.
NAMESRV_CONFIG_BLACK_LIST = frozenset(
    {
        "configBlackList",
        "configStorePath",
        "kvConfigPath",
        "storePathRootDir",
        "listenPort",
        "bindAddress",
        # Authentication is the file's and the restart's business: a request must not lift it.
        "authenticationEnabled",
        "authUsersFile",
    }
)

_FAQ_HINT = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


class NameServer:
    """Routes and KV config behind one listening socket."""

    def __init__(
        self,
        settings: NamesrvSettings,
        *,
        kv: KVConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.routes = RouteRegistry(settings.broker_expiry)
        self.kv = kv if kv is not None else KVConfig.load(settings.kv_config_file)
        self.auth: WriteAuthenticator | None = None
        if settings.authentication_enabled:
            try:
                self.auth = WriteAuthenticator(settings.users_file)
            except UsersFileError as exc:
                raise ConfigError(f"authenticationEnabled=true but {exc}") from None
            if not self.auth.users.accounts:
                raise ConfigError(
                    f"authenticationEnabled=true but {settings.users_file} has no broker or admin "
                    "account: no broker could register"
                )
        # Like RocketMQ (serverChannelMaxIdleTimeSeconds): brokers and clients talk every 30 s.
        self.server = Server(
            self._handlers(),
            name="namesrv",
            on_disconnect=self._connection_closed,
            idle_timeout=120.0,
            tls=settings.server_tls(),
            limits=settings.connection_limits(),
        )
        self.port: int | None = None
        self._scanner: asyncio.Task[None] | None = None
        #: The embedded controller replica (``enableControllerInNamesrv``), on its own port.
        self.controller: Any = None
        if settings.enable_controller_in_namesrv:
            # Imported here: PySyncObj is needed only by a name server that runs a controller.
            from aiorocketmq.controller.manager import ControllerManager

            self.controller = ControllerManager(settings.controller_settings)

    def _handlers(self) -> dict[int, Handler]:
        handlers = self._all_handlers()
        if self.auth is not None:
            for code in WRITES:
                handlers[code] = self._authenticated(self.auth, handlers[code])
        return handlers

    @staticmethod
    def _authenticated(auth: WriteAuthenticator, handler: Handler) -> Handler:
        """``handler`` behind the write check: a refusal is answered (and logged, at most once a
        minute per request code and kind) before the handler sees the request."""
        check = auth.check

        def checked(conn: Connection, cmd: RemotingCommand) -> HandlerResult:
            refusal = check(cmd.code, cmd.ext_fields, cmd.body)
            if refusal is None:
                return handler(conn, cmd)
            REFUSALS.refused(conn.address, cmd.code, int(refusal.code), refusal.remark, logging.WARNING)
            return cmd.response(refusal.code, refusal.remark)

        return checked

    def _all_handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.PUT_KV_CONFIG: self.put_kv_config,
            RequestCode.GET_KV_CONFIG: self.get_kv_config,
            RequestCode.DELETE_KV_CONFIG: self.delete_kv_config,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self.get_kv_list,
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.QUERY_DATA_VERSION: self.query_data_version,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topics,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.get_topics_by_cluster,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm,
            RequestCode.GET_NAMESRV_CONFIG: self.get_config,
            RequestCode.UPDATE_NAMESRV_CONFIG: self.update_config,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self.add_write_perm,
            # RocketMQ 5
            RequestCode.BROKER_HEARTBEAT: self.broker_heartbeat,
            RequestCode.GET_BROKER_MEMBER_GROUP: self.get_broker_member_group,
            RequestCode.REGISTER_TOPIC_IN_NAMESRV: self.register_topic,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: self.get_system_topics,
            RequestCode.GET_UNIT_TOPIC_LIST: self.get_unit_topics,
            RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST: self.get_unit_sub_topics,
            RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: self.get_unit_sub_non_unit_topics,
        }

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> int:
        """Listen and start the liveness scan; returns the bound port."""
        self.port = await self.server.listen(self.settings.bind_address, self.settings.listen_port)
        self._scanner = asyncio.ensure_future(self._scan_forever())
        if self.controller is not None:
            await self.controller.start()
        return self.port

    async def close(self) -> None:
        if self.controller is not None:
            await self.controller.close()
        if self._scanner is not None:
            self._scanner.cancel()
            try:
                await self._scanner
            except asyncio.CancelledError:
                pass
        await self.server.close()
        if self.kv.dirty:
            await self.kv.persist()

    async def _scan_forever(self) -> None:
        interval = self.settings.scan_interval
        while True:
            await asyncio.sleep(interval)
            try:
                self.scan()
            except Exception:
                log.exception("liveness scan failed")

    def scan(self) -> list[LiveBroker]:
        """Drop brokers silent for longer than the expiry, closing their connections."""
        expired = self.routes.expire(self.clock())
        for live in expired:
            log.warning(
                "broker %s expired: no registration for %.1fs, removed",
                live.address,
                self.settings.broker_expiry,
            )
            channel = live.channel
            # A silent broker on an open connection is stuck; closing the connection makes it
            # reconnect and register afresh. Another broker still registered on it keeps it open.
            if isinstance(channel, Connection) and not self.routes.channel_in_use(channel):
                channel.close("broker registration expired")
        return expired

    def _connection_closed(self, conn: Connection) -> None:
        for live in self.routes.channel_closed(conn):
            log.info("broker %s removed: its connection %s closed", live.address, conn.address)

    # -- brokers ------------------------------------------------------------------------

    def register_broker(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header = RegisterBrokerRequestHeader.from_fields(cmd.ext_fields)
        if header.body_crc32 != 0:
            crc = zlib.crc32(cmd.body) & 0x7FFFFFFF
            if crc != header.body_crc32:
                log.warning(
                    "registration of %s rejected: body crc32 %d, header says %d",
                    header.broker_addr,
                    crc,
                    header.body_crc32,
                )
                return cmd.response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        topic_configs: TopicConfigSerializeWrapper | None
        filter_servers: list[str] | None
        if cmd.version >= MQVersion.V3_0_11:
            body = RegisterBrokerBody.decode_registration(
                cmd.body, compressed=header.compressed, broker_version=cmd.version
            )
            topic_configs = body.topic_config_serialize_wrapper
            filter_servers = body.filter_server_list
        else:
            # Brokers older than 3.0.11 send the bare topic config wrapper.
            topic_configs = TopicConfigSerializeWrapper.decode(cmd.body) if cmd.body else None
            filter_servers = None
        result = self.routes.register(
            cluster=header.cluster_name,
            broker_name=header.broker_name,
            broker_addr=header.broker_addr,
            broker_id=header.broker_id,
            ha_server_addr=header.ha_server_addr,
            topic_configs=topic_configs,
            filter_servers=filter_servers,
            channel=conn,
            now=self.clock(),
        )
        if result.rejected_by is not None:
            log.warning(
                "registration of %s as %s id %d ignored: %s holds the id with a newer stateVersion",
                header.broker_addr,
                header.broker_name,
                header.broker_id,
                result.rejected_by,
            )
        elif result.new_broker:
            log.info(
                "broker registered: %s name=%s id=%d cluster=%s ha=%s topics=%d",
                header.broker_addr,
                header.broker_name,
                header.broker_id,
                header.cluster_name,
                header.ha_server_addr,
                len(topic_configs.topic_config_table) if topic_configs is not None else 0,
            )
        order_topics = self.kv.namespace(ORDER_TOPIC_CONFIG)
        return cmd.response(
            ext_fields=RegisterBrokerResponseHeader(
                ha_server_addr=result.ha_server_addr, master_addr=result.master_addr
            ).to_fields(),
            body=KVTable(table=order_topics).encode() if order_topics else b"",
        )

    def unregister_broker(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header = UnregisterBrokerRequestHeader.from_fields(cmd.ext_fields)
        emptied = self.routes.unregister(header.broker_addr)
        log.info(
            "broker unregistered: %s name=%s id=%d cluster=%s%s",
            header.broker_addr,
            header.broker_name,
            header.broker_id,
            header.cluster_name,
            f" (broker names gone: {', '.join(emptied)})" if emptied else "",
        )
        return cmd.response()

    def query_data_version(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header = QueryDataVersionRequestHeader.from_fields(cmd.ext_fields)
        if not cmd.body:
            raise ProtocolError("QUERY_DATA_VERSION needs the broker's DataVersion as its body")
        version = DataVersion.decode(cmd.body)
        changed = self.routes.data_version_changed(header.broker_addr, version)
        if not changed:
            self.routes.touch(header.broker_addr, self.clock())
        stored = self.routes.data_version(header.broker_addr)
        return cmd.response(
            ext_fields=QueryDataVersionResponseHeader(changed=changed).to_fields(),
            body=stored.encode() if stored is not None else b"",
        )

    def broker_heartbeat(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """BROKER_HEARTBEAT (RocketMQ 5): brokers that may act as master for a lost one
        (``enableSlaveActingMaster``, controller-mode clusters) send it oneway between their
        registrations to say they are alive. As in Apache it only refreshes the last-update
        time of the address registered in that cluster, which keeps the liveness scan off it;
        an unknown address or cluster is answered SUCCESS all the same (it must register)."""
        header = BrokerHeartbeatRequestHeader.from_fields(cmd.ext_fields)
        if not self.routes.touch(header.broker_addr, self.clock(), cluster=header.cluster_name):
            log.debug(
                "heartbeat from unregistered broker %s (cluster %s) ignored",
                header.broker_addr,
                header.cluster_name,
            )
        return cmd.response()

    def get_broker_member_group(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_MEMBER_GROUP (RocketMQ 5): the addresses of a broker name by broker id.

        As in Apache, the cluster and broker name are echoed from the request (the cluster is
        not checked) and an unknown broker name gets an empty address map.
        """
        header = GetBrokerMemberGroupRequestHeader.from_fields(cmd.ext_fields)
        group = BrokerMemberGroup(
            cluster=header.cluster_name,
            broker_name=header.broker_name,
            broker_addrs=self.routes.broker_addrs(header.broker_name),
        )
        return cmd.response(body=GetBrokerMemberGroupResponseBody(broker_member_group=group).encode())

    # -- routes -------------------------------------------------------------------------

    def register_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """REGISTER_TOPIC_IN_NAMESRV (RocketMQ 5): the body's TopicRouteData queue datas become
        the topic's route. As in Apache the answer is SUCCESS even when nothing is registered
        (no body, no queue datas, or a queue data naming an unregistered broker name)."""
        header = RegisterTopicRequestHeader.from_fields(cmd.ext_fields)
        queue_datas = TopicRouteData.decode(cmd.body).queue_datas if cmd.body else []
        if queue_datas:
            if self.routes.register_topic(header.topic, queue_datas):
                log.info(
                    "topic %s registered on %s by %s",
                    header.topic,
                    ", ".join(sorted({q.broker_name for q in queue_datas})),
                    conn.address,
                )
            else:
                log.warning(
                    "topic %s not registered: its queue data names a broker name no broker "
                    "registered (%s), from %s",
                    header.topic,
                    ", ".join(sorted({q.broker_name for q in queue_datas})),
                    conn.address,
                )
        return cmd.response()

    def get_route(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header = GetRouteInfoRequestHeader.from_fields(cmd.ext_fields)
        route = self.routes.route(header.topic)
        if route is None:
            return cmd.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {header.topic}{_FAQ_HINT}",
            )
        if self.settings.order_message_enable:
            route.order_topic_conf = self.kv.get(ORDER_TOPIC_CONFIG, header.topic)
        # Go clients before v2.1.2 cannot read quoted broker-id keys; every 4.9.4+ client
        # asks for standard JSON through its version (docs/protocol.md §3.1).
        standard = cmd.version >= MQVersion.V4_9_4 or bool(header.accept_standard_json_only)
        return cmd.response(body=route.encode(standard_json=standard))

    def get_cluster_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=self.routes.cluster_info().encode())

    def get_all_topics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=TopicList(topic_list=self.routes.topic_names()).encode())

    def get_topics_by_cluster(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        if not self.settings.enable_topic_list:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "disable")
        header = GetTopicsByClusterRequestHeader.from_fields(cmd.ext_fields)
        topics = self.routes.topics_by_cluster(header.cluster)
        return cmd.response(body=TopicList(topic_list=topics).encode())

    def get_system_topics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_SYSTEM_TOPIC_LIST_FROM_NS: cluster and broker names, which brokers serve as
        system topics, plus ``brokerAddr``, one broker for the client to ask for the rest."""
        names, addr = self.routes.system_topics()
        return cmd.response(body=TopicList(topic_list=names, broker_addr=addr).encode())

    def get_unit_topics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_UNIT_TOPIC_LIST: topics with the UNIT flag."""
        return self._topics_by_flag(cmd, unit=True)

    def get_unit_sub_topics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_HAS_UNIT_SUB_TOPIC_LIST: topics with the UNIT_SUB flag."""
        return self._topics_by_flag(cmd, unit_sub=True)

    def get_unit_sub_non_unit_topics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: topics with UNIT_SUB but not UNIT."""
        return self._topics_by_flag(cmd, unit=False, unit_sub=True)

    def _topics_by_flag(
        self, cmd: RemotingCommand, *, unit: bool | None = None, unit_sub: bool | None = None
    ) -> RemotingCommand:
        # As Apache: these lists are refused as a whole when enableTopicList is off.
        if not self.settings.enable_topic_list:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "disable")
        topics = self.routes.topics_with_sys_flag(unit=unit, unit_sub=unit_sub)
        return cmd.response(body=TopicList(topic_list=topics).encode())

    def delete_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header = DeleteTopicFromNamesrvRequestHeader.from_fields(cmd.ext_fields)
        if self.routes.delete_topic(header.topic, header.cluster_name):
            scope = f" on cluster {header.cluster_name}" if header.cluster_name else ""
            log.info("topic %s deleted%s by %s", header.topic, scope, conn.address)
        return cmd.response()

    def wipe_write_perm(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header = WipeWritePermOfBrokerRequestHeader.from_fields(cmd.ext_fields)
        count = self.routes.wipe_write_perm(header.broker_name)
        log.info(
            "write permission of broker %s wiped on %d topics by %s", header.broker_name, count, conn.address
        )
        return cmd.response(
            ext_fields=WipeWritePermOfBrokerResponseHeader(wipe_topic_count=count).to_fields()
        )

    def get_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=self.settings.to_properties().encode())

    def add_write_perm(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """ADD_WRITE_PERM_OF_BROKER (``mqadmin addWritePerm``): undo ``wipeWritePerm``."""
        header = AddWritePermOfBrokerRequestHeader.from_fields(cmd.ext_fields)
        count = self.routes.add_write_perm(header.broker_name)
        log.info(
            "write permission of broker %s restored on %d topics by %s",
            header.broker_name,
            count,
            conn.address,
        )
        return cmd.response(ext_fields=AddWritePermOfBrokerResponseHeader(add_topic_count=count).to_fields())

    def update_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """UPDATE_NAMESRV_CONFIG (``mqadmin updateNamesrvConfig``): the body's ``key=value``
        lines, applied in memory to the keys this name server knows (others are ignored, as
        Apache does); the file and path keys are refused, as Apache 4.9.6+ refuses its black
        list, so that no request can make the server write somewhere else."""
        try:
            updates = read_properties((cmd.body or b"").decode())
        except UnicodeDecodeError:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "the config body is not UTF-8 text")
        refused = sorted(set(updates) & NAMESRV_CONFIG_BLACK_LIST)
        if refused:
            return cmd.response(
                ResponseCode.NO_PERMISSION, f"Can not update config in black list: {', '.join(refused)}"
            )
        fields = {info.alias or name: name for name, info in type(self.settings).model_fields.items()}
        for key, value in updates.items():
            if key in fields:
                try:
                    setattr(self.settings, fields[key], value)
                except ValueError as exc:
                    return cmd.response(
                        ResponseCode.SYSTEM_ERROR, f"{key}={value}: {str(exc).splitlines()[-1].strip()}"
                    )
        log.info("config updated by %s: %s", conn.address, updates)
        return cmd.response()

    # -- KV config ----------------------------------------------------------------------

    def put_kv_config(self, conn: Connection, cmd: RemotingCommand) -> Coroutine[Any, Any, RemotingCommand]:
        header = PutKVConfigRequestHeader.from_fields(cmd.ext_fields)
        self.kv.put(header.namespace, header.key, header.value)
        log.info("KV config put: %s/%s=%s", header.namespace, header.key, header.value)
        return self._persisted(cmd)

    def delete_kv_config(
        self, conn: Connection, cmd: RemotingCommand
    ) -> Coroutine[Any, Any, RemotingCommand] | RemotingCommand:
        header = DeleteKVConfigRequestHeader.from_fields(cmd.ext_fields)
        if not self.kv.delete(header.namespace, header.key):
            return cmd.response()
        log.info("KV config deleted: %s/%s", header.namespace, header.key)
        return self._persisted(cmd)

    async def _persisted(self, cmd: RemotingCommand) -> RemotingCommand:
        """Answer a KV change once it is on disk."""
        try:
            await self.kv.persist()
        except OSError as exc:
            log.error("cannot write KV config %s: %s", self.kv.path, exc)
            return cmd.response(
                ResponseCode.SYSTEM_ERROR,
                f"KV config changed in memory but could not be written to {self.kv.path}: {exc}",
            )
        return cmd.response()

    def get_kv_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header = GetKVConfigRequestHeader.from_fields(cmd.ext_fields)
        value = self.kv.get(header.namespace, header.key)
        if value is None:
            return cmd.response(
                ResponseCode.QUERY_NOT_FOUND,
                f"No config item, Namespace: {header.namespace} Key: {header.key}",
            )
        return cmd.response(ext_fields=GetKVConfigResponseHeader(value=value).to_fields())

    def get_kv_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header = GetKVListByNamespaceRequestHeader.from_fields(cmd.ext_fields)
        table = self.kv.namespace(header.namespace)
        if not table:
            return cmd.response(
                ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {header.namespace}"
            )
        return cmd.response(body=KVTable(table=table).encode())
