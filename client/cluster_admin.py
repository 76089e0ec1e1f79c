"""Operator requests to a cluster's servers, on top of :class:`~client.admin.Admin`: broker
and name-server configuration, write permission on the name servers, group-offset cloning,
statistics, the producer table, consume-queue inspection, store clean-ups on demand and a
consumer's running info. Each function asks one server (or each name server) and returns what
it answered.

::

    async with Admin("127.0.0.1:9876") as admin:
        await update_broker_config(admin, "127.0.0.1:10911", {"fileReservedTime": "48"})
        info = await consumer_running_info(admin, "billing", client_id)
"""

from __future__ import annotations

from collections.abc import Mapping

from aiorocketmq.protocol.admin_requests import (
    AddWritePermOfBrokerRequestHeader,
    AddWritePermOfBrokerResponseHeader,
    BrokerStatsData,
    CloneGroupOffsetRequestHeader,
    ConsumeMessageDirectlyResult,
    ConsumeMessageDirectlyResultRequestHeader,
    ConsumerRunningInfo,
    ConsumeStatsList,
    GetConsumerRunningInfoRequestHeader,
    GetConsumeStatsInBrokerHeader,
    ProducerTableInfo,
    QueryConsumeQueueRequestHeader,
    QueryConsumeQueueResponseBody,
    QueryCorrectionOffsetBody,
    QueryCorrectionOffsetHeader,
    ViewBrokerStatsDataRequestHeader,
)
from aiorocketmq.protocol.codes import RequestCode
from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.headers import (
    WipeWritePermOfBrokerRequestHeader,
    WipeWritePermOfBrokerResponseHeader,
)
from aiorocketmq.protocol.message import MessageExt
from aiorocketmq.protocol.settings import read_properties

from .admin import Admin

#: Store clean-ups may take a while on a large store.
MAINTENANCE_TIMEOUT = 30.0


def _properties(updates: Mapping[str, str]) -> bytes:
    return "".join(f"{k}={v}\n" for k, v in updates.items()).encode()


async def update_broker_config(admin: Admin, broker_addr: str, updates: Mapping[str, str]) -> None:
    """Change broker settings in memory (UPDATE_BROKER_CONFIG)."""
    await admin.instance.call(broker_addr, RequestCode.UPDATE_BROKER_CONFIG, None, _properties(updates))


async def namesrv_config(admin: Admin) -> dict[str, dict[str, str]]:
    """Every name server's settings (GET_NAMESRV_CONFIG), by address."""
    configs = {}
    for addr in admin.instance.namesrv_addrs:
        response = await admin.instance.call(addr, RequestCode.GET_NAMESRV_CONFIG)
        configs[addr] = read_properties((response.body or b"").decode())
    return configs


async def update_namesrv_config(admin: Admin, updates: Mapping[str, str]) -> list[str]:
    """Change every name server's settings in memory (UPDATE_NAMESRV_CONFIG)."""
    addrs = list(admin.instance.namesrv_addrs)
    for addr in addrs:
        await admin.instance.call(addr, RequestCode.UPDATE_NAMESRV_CONFIG, None, _properties(updates))
    return addrs


async def wipe_write_perm(admin: Admin, broker_name: str) -> dict[str, int]:
    """Take write permission away from ``broker_name`` on every name server; topic count each."""
    counts = {}
    header = WipeWritePermOfBrokerRequestHeader(broker_name=broker_name)
    for addr in admin.instance.namesrv_addrs:
        response = await admin.instance.call(addr, RequestCode.WIPE_WRITE_PERM_OF_BROKER, header)
        counts[addr] = WipeWritePermOfBrokerResponseHeader.from_fields(response.ext_fields).wipe_topic_count
    return counts


async def add_write_perm(admin: Admin, broker_name: str) -> dict[str, int]:
    """Give ``broker_name`` its write permission back on every name server; topic count each."""
    counts = {}
    header = AddWritePermOfBrokerRequestHeader(broker_name=broker_name)
    for addr in admin.instance.namesrv_addrs:
        response = await admin.instance.call(addr, RequestCode.ADD_WRITE_PERM_OF_BROKER, header)
        counts[addr] = AddWritePermOfBrokerResponseHeader.from_fields(response.ext_fields).add_topic_count
    return counts


async def clone_group_offset(
    admin: Admin, src_group: str, dest_group: str, topic: str, *, offline: bool = False
) -> list[str]:
    """Copy ``src_group``'s offsets on ``topic`` to ``dest_group`` on every master routing it."""
    header = CloneGroupOffsetRequestHeader(
        src_group=src_group, dest_group=dest_group, topic=topic, offline=offline
    )
    addrs = sorted((await admin._route_masters(topic)).values())
    for addr in addrs:
        await admin.instance.call(addr, RequestCode.CLONE_GROUP_OFFSET, header)
    return addrs


async def broker_stats(admin: Admin, broker_addr: str, stats_name: str, stats_key: str) -> BrokerStatsData:
    """One counter of a broker over the last minute, hour and day (VIEW_BROKER_STATS_DATA)."""
    header = ViewBrokerStatsDataRequestHeader(stats_name=stats_name, stats_key=stats_key)
    response = await admin.instance.call(broker_addr, RequestCode.VIEW_BROKER_STATS_DATA, header)
    return BrokerStatsData.decode(response.body)


async def broker_consume_stats(
    admin: Admin, broker_addr: str, *, order: bool = False, timeout: float | None = None
) -> ConsumeStatsList:
    """Every group's progress on one broker (GET_BROKER_CONSUME_STATS)."""
    response = await admin.instance.call(
        broker_addr,
        RequestCode.GET_BROKER_CONSUME_STATS,
        GetConsumeStatsInBrokerHeader(is_order=order),
        timeout=timeout,
    )
    return ConsumeStatsList.decode(response.body)


async def producer_table(admin: Admin, broker_addr: str) -> ProducerTableInfo:
    """The producers connected to one broker, by group (GET_ALL_PRODUCER_INFO)."""
    response = await admin.instance.call(broker_addr, RequestCode.GET_ALL_PRODUCER_INFO)
    return ProducerTableInfo.decode(response.body)


async def query_consume_queue(
    admin: Admin,
    broker_addr: str,
    topic: str,
    queue_id: int,
    index: int,
    count: int,
    group: str | None = None,
) -> QueryConsumeQueueResponseBody:
    """``count`` consume-queue entries of a queue from ``index`` (QUERY_CONSUME_QUEUE)."""
    header = QueryConsumeQueueRequestHeader(
        topic=topic, queue_id=queue_id, index=index, count=count, consumer_group=group
    )
    response = await admin.instance.call(broker_addr, RequestCode.QUERY_CONSUME_QUEUE, header)
    return QueryConsumeQueueResponseBody.decode(response.body)


async def store_maintenance(admin: Admin, broker_addr: str, code: RequestCode) -> str:
    """Run CLEAN_EXPIRED_CONSUMEQUEUE, DELETE_EXPIRED_COMMITLOG or CLEAN_UNUSED_TOPIC on one
    broker now; returns its remark."""
    if code not in (
        RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE,
        RequestCode.DELETE_EXPIRED_COMMITLOG,
        RequestCode.CLEAN_UNUSED_TOPIC,
    ):
        raise ValueError(f"{code!r} is not a store maintenance request")
    response = await admin.instance.call(broker_addr, code, timeout=MAINTENANCE_TIMEOUT)
    return response.remark or ""


async def consumer_running_info(
    admin: Admin, group: str, client_id: str, *, jstack: bool = False, broker_addr: str | None = None
) -> ConsumerRunningInfo:
    """What one consumer of ``group`` says about itself, asked through a broker it is
    connected to (GET_CONSUMER_RUNNING_INFO)."""
    if broker_addr is None:
        for addr in await admin.master_addrs():
            try:
                conn = await admin.consumer_connections(group, broker_addr=addr)
            except MQError:  # not online on that broker: try the next
                continue
            if any(c.client_id == client_id for c in conn.connection_set):
                broker_addr = addr
                break
        else:
            broker_addr = (await admin.master_addrs())[0]
    header = GetConsumerRunningInfoRequestHeader(
        consumer_group=group, client_id=client_id, jstack_enable=jstack
    )
    response = await admin.instance.call(
        broker_addr, RequestCode.GET_CONSUMER_RUNNING_INFO, header, timeout=10.0
    )
    return ConsumerRunningInfo.decode(response.body)


async def consume_message_directly(
    admin: Admin, group: str, client_id: str, msg: MessageExt
) -> ConsumeMessageDirectlyResult:
    """Have one consumer of ``group`` consume a stored message again, now, through the broker
    that stores it (CONSUME_MESSAGE_DIRECTLY); returns the consumer's verdict."""
    masters = await admin._route_masters(msg.topic)
    broker_addr = masters.get(msg.broker_name or "") or msg.store_host
    header = ConsumeMessageDirectlyResultRequestHeader(
        consumer_group=group, client_id=client_id, msg_id=msg.offset_msg_id, broker_name=msg.broker_name
    )
    response = await admin.instance.call(
        broker_addr, RequestCode.CONSUME_MESSAGE_DIRECTLY, header, timeout=10.0
    )
    return ConsumeMessageDirectlyResult.decode(response.body)


async def correction_offsets(
    admin: Admin, broker_addr: str, topic: str, compare_group: str, filter_groups: list[str] | None = None
) -> dict[int, int]:
    """Per queue of ``topic`` on one broker, the smallest offset of its groups but
    ``filter_groups`` (2**63 - 1 where ``compare_group`` is further behind) (QUERY_CORRECTION_OFFSET)."""
    header = QueryCorrectionOffsetHeader(
        filter_groups=",".join(filter_groups or []), compare_group=compare_group, topic=topic
    )
    response = await admin.instance.call(broker_addr, RequestCode.QUERY_CORRECTION_OFFSET, header)
    return QueryCorrectionOffsetBody.decode(response.body).correction_offsets
