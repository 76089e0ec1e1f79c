"""Administration requests the SDK's :class:`client.Admin` does not offer yet, sent through its
client instance with :mod:`protocol` headers: name-server KV config, topic configs with
separate read/write queue counts, ordered-topic configs, which groups consume a topic, and
requests aimed at one broker (group deletion, consumer connections). Each belongs in the SDK;
until it is there, it lives here and nowhere else."""

from __future__ import annotations

import asyncio
import contextlib
import time

from client import Admin
from protocol.body import ConsumerConnection, GroupList, TopicConfig, TopicRouteData
from protocol.codes import MASTER_ID, RequestCode
from protocol.errors import MQError, QueryNotFoundError
from protocol.headers import (
    CreateTopicRequestHeader,
    DeleteKVConfigRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetKVConfigRequestHeader,
    PutKVConfigRequestHeader,
    QueryTopicConsumeByWhoRequestHeader,
)

#: The name-server KV namespace of ordered-topic configs (``brokerName:queues;...``).
ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


async def broker_names_by_addr(admin: Admin) -> dict[str, tuple[str, str, int]]:
    """Broker address -> (cluster, broker name, broker id), from the name server."""
    info = await admin.cluster_info()
    cluster_of = {name: cluster for cluster, names in info.cluster_addr_table.items() for name in names}
    return {
        addr: (cluster_of.get(name, data.cluster), name, broker_id)
        for name, data in info.broker_addr_table.items()
        for broker_id, addr in data.broker_addrs.items()
    }


# -- name-server KV config -----------------------------------------------------------------------


async def put_kv_config(admin: Admin, namespace: str, key: str, value: str) -> None:
    """Write a KV config entry on every name server (they share nothing)."""
    fields = PutKVConfigRequestHeader(namespace=namespace, key=key, value=value).to_fields()
    for addr in admin.instance.namesrv_addrs:
        await admin.instance.call(addr, RequestCode.PUT_KV_CONFIG, fields)


async def delete_kv_config(admin: Admin, namespace: str, key: str) -> None:
    fields = DeleteKVConfigRequestHeader(namespace=namespace, key=key).to_fields()
    for addr in admin.instance.namesrv_addrs:
        await admin.instance.call(addr, RequestCode.DELETE_KV_CONFIG, fields)


async def get_kv_config(admin: Admin, namespace: str, key: str) -> str | None:
    fields = GetKVConfigRequestHeader(namespace=namespace, key=key).to_fields()
    try:
        response = await admin.instance.call_namesrv(RequestCode.GET_KV_CONFIG, fields)
    except QueryNotFoundError:
        return None
    return response.ext_fields.get("value")


# -- topics ---------------------------------------------------------------------------------------


async def update_topic_config(admin: Admin, broker_addr: str, config: TopicConfig) -> None:
    """Create or update a topic on one broker with everything ``config`` says (the SDK's
    ``create_topic`` takes one queue count for reading and writing)."""
    header = CreateTopicRequestHeader(
        topic=config.topic_name,
        read_queue_nums=config.read_queue_nums,
        write_queue_nums=config.write_queue_nums,
        perm=config.perm,
        topic_filter_type=config.topic_filter_type,
        topic_sys_flag=config.topic_sys_flag,
        order=config.order,
    )
    await admin.instance.call(broker_addr, RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_fields())


async def wait_for_topic_route(
    admin: Admin, config: TopicConfig, broker_names: set[str], timeout: float
) -> bool:
    """Whether, within ``timeout`` seconds, the name servers route ``config``'s queue counts
    and permission on every broker of ``broker_names`` (brokers re-register right after a
    topic change, so this is normally quick)."""
    deadline = time.monotonic() + timeout
    wanted = (config.read_queue_nums, config.write_queue_nums, config.perm)
    while True:
        with contextlib.suppress(MQError):
            route = await admin.instance.fetch_route(config.topic_name)
            current = {
                q.broker_name
                for q in route.queue_datas
                if (q.read_queue_nums, q.write_queue_nums, q.perm) == wanted
            }
            if broker_names <= current:
                admin.instance.adopt_route(config.topic_name, route)
                return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.05)


def parse_order_conf(text: str) -> dict[str, int]:
    """``brokerName:queues;...`` -> {broker name: queues}; malformed items are skipped."""
    entries: dict[str, int] = {}
    for item in text.split(";"):
        name, _, count = item.partition(":")
        if name and count.isdigit():
            entries[name] = int(count)
    return entries


async def update_order_conf(admin: Admin, topic: str, entries: dict[str, int], *, merge: bool) -> str:
    """Store an ordered topic's ``brokerName:queues;...`` on the name servers; with ``merge``
    the entries of brokers not in ``entries`` are kept. Returns what was stored."""
    if merge:
        entries = {**parse_order_conf(await get_kv_config(admin, ORDER_TOPIC_CONFIG, topic) or ""), **entries}
    text = ";".join(f"{name}:{count}" for name, count in entries.items())
    await put_kv_config(admin, ORDER_TOPIC_CONFIG, topic, text)
    return text


async def consumer_groups_of(admin: Admin, route: TopicRouteData, topic: str) -> list[str]:
    """The groups that consume ``topic`` (QUERY_TOPIC_CONSUME_BY_WHO on its masters)."""
    fields = QueryTopicConsumeByWhoRequestHeader(topic=topic).to_fields()
    groups: set[str] = set()
    for data in route.broker_datas:
        addr = data.broker_addrs.get(MASTER_ID)
        if addr is not None:
            response = await admin.instance.call(addr, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, fields)
            groups.update(GroupList.decode(response.body).group_list)
    return sorted(groups)


# -- one broker -----------------------------------------------------------------------------------


async def delete_subscription_group_at(
    admin: Admin, broker_addr: str, group: str, *, remove_offsets: bool
) -> None:
    fields = DeleteSubscriptionGroupRequestHeader(group_name=group, remove_offset=remove_offsets).to_fields()
    await admin.instance.call(broker_addr, RequestCode.DELETE_SUBSCRIPTIONGROUP, fields)


async def consumer_connections_at(admin: Admin, broker_addr: str, group: str) -> ConsumerConnection:
    fields = GetConsumerConnectionListRequestHeader(consumer_group=group).to_fields()
    response = await admin.instance.call(broker_addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, fields)
    return ConsumerConnection.decode(response.body)
