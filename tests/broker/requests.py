"""Raw broker requests for tests, built with the protocol package the way real clients
build them (JSON by default, ROCKETMQ or msgpack on demand)."""

from __future__ import annotations

import time
from typing import Any

from aiorocketmq.protocol.body import (
    ConsumerData,
    ConsumeType,
    HeartbeatData,
    MessageModel,
    ProducerData,
    SubscriptionData,
)
from aiorocketmq.protocol.codes import PullSysFlag, RequestCode, ResponseCode, SerializeType
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.headers import PullMessageRequestHeader, SendMessageRequestHeaderV2
from aiorocketmq.protocol.message import (
    MessageExt,
    PropertyKey,
    decode_records,
    encode_properties,
    new_unique_id,
)
from aiorocketmq.protocol.transport import Connection

JSON = SerializeType.JSON.value
ROCKETMQ = SerializeType.ROCKETMQ.value
MSGPACK = SerializeType.MSGPACK.value


async def call(
    conn: Connection,
    code: int,
    fields: dict[str, Any] | None = None,
    body: bytes = b"",
    *,
    serialize_type: int = JSON,
    version: int | None = None,
    timeout: float = 10.0,
) -> RemotingCommand:
    cmd = RemotingCommand.request(code, fields, body, serialize_type=serialize_type)
    if version is not None:
        cmd.version = version
    response = await conn.request(cmd, timeout=timeout)
    assert response.serialize_type == serialize_type, response
    return response


def message_properties(tags: str | None = None, keys: str | None = None, **extra: str) -> str:
    props: dict[str, str] = {PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: new_unique_id(), "WAIT": "true"}
    if tags:
        props[PropertyKey.TAGS] = tags
    if keys:
        props[PropertyKey.KEYS] = keys
    props.update(extra)
    return encode_properties(props)


async def send(
    conn: Connection,
    topic: str,
    body: bytes,
    *,
    queue_id: int = 0,
    tags: str | None = None,
    keys: str | None = None,
    properties: dict[str, str] | None = None,
    group: str = "test-producer",
    serialize_type: int = JSON,
    sys_flag: int = 0,
) -> RemotingCommand:
    header = SendMessageRequestHeaderV2(
        producer_group=group,
        topic=topic,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=queue_id,
        sys_flag=sys_flag,
        born_timestamp=int(time.time() * 1000),
        flag=0,
        properties=message_properties(tags, keys, **(properties or {})),
    )
    return await call(
        conn, RequestCode.SEND_MESSAGE_V2, header.to_fields(), body, serialize_type=serialize_type
    )


async def send_ok(conn: Connection, topic: str, body: bytes, **kwargs: Any) -> RemotingCommand:
    response = await send(conn, topic, body, **kwargs)
    assert response.code == ResponseCode.SUCCESS, response
    return response


async def pull(
    conn: Connection,
    topic: str,
    queue_id: int,
    offset: int,
    *,
    group: str = "test-consumer",
    max_nums: int = 32,
    subscription: str = "*",
    suspend_ms: int = 0,
    commit_offset: int | None = None,
    serialize_type: int = JSON,
    timeout: float = 10.0,
) -> RemotingCommand:
    request = pull_request(
        topic,
        offset,
        queue_id=queue_id,
        group=group,
        subscription=subscription,
        suspend_ms=suspend_ms,
        commit_offset=commit_offset,
        max_nums=max_nums,
    )
    return await call(conn, request.code, request.ext_fields, serialize_type=serialize_type, timeout=timeout)


def pull_request(
    topic: str,
    offset: int,
    *,
    queue_id: int = 0,
    group: str = "test-consumer",
    subscription: str | None = "*",
    suspend_ms: int = 0,
    commit_offset: int | None = None,
    max_nums: int = 32,
    **header: Any,
) -> RemotingCommand:
    """A PULL_MESSAGE request; its system flag says what it carries (a subscription, a suspend
    time for long polling, an offset to commit). ``header``: more of the header's fields."""
    sys_flag = 0
    if subscription is not None:
        sys_flag |= PullSysFlag.SUBSCRIPTION
    if suspend_ms:
        sys_flag |= PullSysFlag.SUSPEND
    if commit_offset is not None:
        sys_flag |= PullSysFlag.COMMIT_OFFSET
    h = PullMessageRequestHeader(
        consumer_group=group,
        topic=topic,
        queue_id=queue_id,
        queue_offset=offset,
        max_msg_nums=max_nums,
        sys_flag=int(sys_flag),
        commit_offset=commit_offset or 0,
        suspend_timeout_millis=suspend_ms,
        subscription=subscription,
        **header,
    )
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, h.to_fields())


async def pull_all(conn: Connection, topic: str, queue_id: int, **kwargs: Any) -> list[MessageExt]:
    """Every message of one queue from offset 0."""
    messages: list[MessageExt] = []
    offset = 0
    while True:
        response = await pull(conn, topic, queue_id, offset, **kwargs)
        if response.code != ResponseCode.SUCCESS:
            return messages
        messages.extend(decode_records(response.body))
        offset = int(response.ext_fields["nextBeginOffset"])


async def pull_queues(conn: Connection, topic: str, queues: int, **kwargs: Any) -> list[MessageExt]:
    """Every message of queues ``0 .. queues - 1``, queue by queue."""
    return [m for queue_id in range(queues) for m in await pull_all(conn, topic, queue_id, **kwargs)]


async def heartbeat(
    conn: Connection,
    client_id: str,
    group: str,
    topics: dict[str, str],
    *,
    model: MessageModel = MessageModel.CLUSTERING,
    producer_groups: tuple[str, ...] = (),
    consume_type: ConsumeType = ConsumeType.CONSUME_PASSIVELY,
) -> RemotingCommand:
    data = HeartbeatData(
        client_id=client_id,
        consumer_data_set=[
            ConsumerData(
                group_name=group,
                consume_type=consume_type,
                message_model=model,
                subscription_data_set=[
                    SubscriptionData(topic=t, sub_string=expr, sub_version=int(time.time() * 1000))
                    for t, expr in topics.items()
                ],
            )
        ]
        if group
        else [],
        producer_data_set=[ProducerData(group_name=g) for g in producer_groups],
    )
    response = await call(conn, RequestCode.HEART_BEAT, body=data.encode())
    assert response.code == ResponseCode.SUCCESS, response
    return response


async def max_offset(conn: Connection, topic: str, queue_id: int) -> int:
    response = await call(conn, RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": queue_id})
    assert response.code == ResponseCode.SUCCESS, response
    return int(response.ext_fields["offset"])
