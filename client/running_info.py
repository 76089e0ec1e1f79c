"""A consumer's answers to a broker's diagnosis requests. Its running info, as the Java client reports it when a broker relays
GET_CONSUMER_RUNNING_INFO (``mqadmin consumerStatus``): its settings as properties, its
subscriptions, and per held queue the committed offset and what the process queue caches.

Per-topic pull and consume rates (the Java client's ``statusTable``) are not measured by this
SDK, so that table is left empty rather than filled with made-up numbers.
"""

from __future__ import annotations

import time
from typing import Any

from aiorocketmq.protocol.admin_requests import (
    CR_LATER,
    CR_RETURN_NULL,
    CR_SUCCESS,
    CR_THROW_EXCEPTION,
    PROP_CLIENT_VERSION,
    PROP_CONSUME_ORDERLY,
    PROP_CONSUME_TYPE,
    PROP_CONSUMER_START_TIMESTAMP,
    PROP_NAMESERVER_ADDR,
    PROP_THREADPOOL_CORE_SIZE,
    ConsumeMessageDirectlyResult,
    ConsumerRunningInfo,
    ProcessQueueInfo,
)
from aiorocketmq.protocol.codes import CURRENT_VERSION, MQVersion
from aiorocketmq.protocol.message import MessageExt

_MIB = 1024 * 1024


def _wall_ms(monotonic_at: float) -> int:
    """A ``time.monotonic()`` moment as epoch milliseconds."""
    return int((time.time() - (time.monotonic() - monotonic_at)) * 1000)


def running_info(member: Any, namesrv: str, started_at: float) -> ConsumerRunningInfo:
    """Describe a registered consumer (push or lite pull). ``started_at`` is epoch seconds."""
    data = member._consumer_data()
    orderly = bool(getattr(member, "orderly", False))
    try:
        version = MQVersion(CURRENT_VERSION).name
    except ValueError:
        version = str(CURRENT_VERSION)
    properties = {
        PROP_NAMESERVER_ADDR: namesrv,
        PROP_CONSUME_TYPE: str(data.consume_type),
        PROP_CONSUME_ORDERLY: str(orderly).lower(),
        PROP_THREADPOOL_CORE_SIZE: str(getattr(member, "concurrency", 1)),
        PROP_CLIENT_VERSION: version,
        PROP_CONSUMER_START_TIMESTAMP: str(int(started_at * 1000)),
        "consumerGroup": data.group_name,
        "messageModel": str(data.message_model),
        "consumeFromWhere": str(data.consume_from_where),
        "unitMode": str(data.unit_mode).lower(),
    }
    for attr, key in (("pull_batch_size", "pullBatchSize"), ("batch_size", "consumeMessageBatchMaxSize")):
        value = getattr(member, attr, None)
        if value is not None:
            properties[key] = str(value)
    info = ConsumerRunningInfo(
        properties=properties,
        subscription_set=sorted(data.subscription_data_set, key=lambda s: (s.topic, s.sub_string)),
    )
    rebalance = getattr(member, "_rebalance", None)
    store = getattr(member, "_offset_store", None)
    for queue, pq in sorted(getattr(rebalance, "process_queues", {}).items()):
        commit = store.read_memory(queue) if store is not None else -1
        first = pq.first_offset()
        info.mq_table[queue] = ProcessQueueInfo(
            commit_offset=commit,
            cached_msg_min_offset=first if first is not None else 0,
            cached_msg_max_offset=pq.max_offset if pq.count else 0,
            cached_msg_count=pq.count,
            cached_msg_size_in_mib=pq.size // _MIB,
            locked=pq.locked,
            last_lock_timestamp=_wall_ms(pq.last_lock_time),
            droped=pq.dropped,
            last_pull_timestamp=_wall_ms(pq.last_pull_time),
            last_consume_timestamp=_wall_ms(getattr(pq, "last_consume_time", pq.last_pull_time)),
        )
    return info


async def consume_directly(member: Any, msg: MessageExt) -> ConsumeMessageDirectlyResult:
    """Let a registered consumer's listener consume ``msg`` now, as the Java client answers
    CONSUME_MESSAGE_DIRECTLY: the listener's verdict, or the exception it raised."""
    consume = getattr(member, "_consume_directly", None)
    if consume is None:
        return ConsumeMessageDirectlyResult(consume_result=CR_THROW_EXCEPTION, remark="not a push consumer")
    began = time.perf_counter()
    try:
        outcome = await consume(msg)
    except Exception as exc:
        result = ConsumeMessageDirectlyResult(consume_result=CR_THROW_EXCEPTION, remark=repr(exc))
    else:
        if outcome is None:
            code = CR_RETURN_NULL
        elif getattr(outcome, "value", None) == "SUCCESS":
            code = CR_SUCCESS
        else:
            code = CR_LATER
        result = ConsumeMessageDirectlyResult(consume_result=code)
    result.order = bool(getattr(member, "orderly", False))
    result.spent_time_mills = int((time.perf_counter() - began) * 1000)
    return result
