"""What each request asks of ACL 2.0: the resources it touches and the actions it needs on each
(Apache 5.3.3's ``DefaultAuthorizationContextBuilder``). This module is the table.

Remoting requests: the client requests of the data path are spelled out in
:func:`remoting_needs` (sends need ``Pub`` on the topic, or ``Sub`` on the group for a send to a
retry topic; pulls, heartbeats and queue locks need ``Sub`` on the group and each topic; reading
and committing offsets ``Sub`` with ``Get`` or ``Update``). Every other code follows
:data:`ANNOTATED`, Apache's ``@RocketMQAction``/``@RocketMQResource`` annotations on its
request headers: the header fields that name topics, groups or clusters, and the actions; a
code whose header names none asks the action on ``Cluster:<brokerClusterName>`` when its
annotation says so, and nothing otherwise.

Beyond Apache (docs/security.md): a code Apache leaves without any resource but that changes
the broker or can lose data (``broker.acl.ADMIN_CODES``: broker settings, group creation,
topic lists...) asks ``Update`` on the cluster, so only super users and accounts granted the
cluster may call it.

A group always reaches the check by its name: ``%RETRY%g`` is ``Group:g``.

gRPC requests (:func:`grpc_needs`) follow Apache's proxy: routes need ``Pub`` and ``Sub`` on the
topic, sends and transaction ends ``Pub``, receiving, acking and assignments ``Sub`` on group and
topic; a consumer's heartbeat ``Sub`` on its group. The 5.x pull-style calls (PullMessage,
UpdateOffset, GetOffset, QueryOffset), which Apache's table leaves open, need ``Sub`` as their
remoting forms do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from aiorocketmq.protocol import fastjson
from aiorocketmq.protocol.codes import RequestCode
from aiorocketmq.protocol.errors import ProtocolError
from aiorocketmq.protocol.pop import PopRequestCode, decode_batch_ack_body

from .model import Action, Resource, ResourcePattern, ResourceType, is_retry_topic
from .store import AuthorizationError


class Need(NamedTuple):
    """One authorization context: a resource and the actions (any one of which an entry must
    grant) a request needs on it."""

    resource: Resource
    actions: tuple[Action, ...]


class _Rule(NamedTuple):
    #: The class-level resource type: CLUSTER means ``Cluster:<name>`` when no field names one.
    cluster: bool
    actions: tuple[Action, ...]
    #: (ext field, resource type, splitter)
    fields: tuple[tuple[str, ResourceType, str], ...]


_TOPIC, _GROUP, _CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
_PUB, _SUB, _GET, _UPDATE = Action.PUB, Action.SUB, Action.GET, Action.UPDATE
_CREATE, _DELETE, _LIST = Action.CREATE, Action.DELETE, Action.LIST


def _rule(
    cluster: ResourceType | None, actions: tuple[Action, ...], fields: Sequence[tuple[Any, ...]]
) -> _Rule:
    return _Rule(
        cluster is _CLUSTER,
        actions,
        tuple((f[0], f[1], f[2] if len(f) > 2 else "") for f in fields),
    )


#: Apache 5.3.3's request-header annotations, by request code (codes this broker does not serve
#: are listed too, so that the table reads as Apache's).
ANNOTATED: dict[int, _Rule] = {
    17: _rule(None, (_CREATE,), [("topic", _TOPIC)]),  # UPDATE_AND_CREATE_TOPIC
    18: _rule(None, (_CREATE,), []),  # UPDATE_AND_CREATE_TOPIC_LIST
    21: _rule(_TOPIC, (_LIST,), []),  # GET_ALL_TOPIC_CONFIG
    29: _rule(None, (_GET,), [("topic", _TOPIC)]),  # SEARCH_OFFSET_BY_TIMESTAMP
    30: _rule(None, (_GET,), [("topic", _TOPIC)]),  # GET_MAX_OFFSET
    31: _rule(None, (_GET,), [("topic", _TOPIC)]),  # GET_MIN_OFFSET
    32: _rule(None, (_GET,), [("topic", _TOPIC)]),  # GET_EARLIEST_MSG_STORETIME
    33: _rule(None, (_GET,), [("topic", _TOPIC)]),  # VIEW_MESSAGE_BY_ID
    39: _rule(None, (_PUB,), [("topic", _TOPIC)]),  # CHECK_TRANSACTION_STATE
    40: _rule(None, (_SUB,), [("consumerGroup", _GROUP)]),  # NOTIFY_CONSUMER_IDS_CHANGED
    100: _rule(_CLUSTER, (_UPDATE,), []),  # PUT_KV_CONFIG
    101: _rule(_CLUSTER, (_GET,), []),  # GET_KV_CONFIG
    102: _rule(_CLUSTER, (_UPDATE,), []),  # DELETE_KV_CONFIG
    103: _rule(_CLUSTER, (_UPDATE,), [("clusterName", _CLUSTER)]),  # REGISTER_BROKER
    104: _rule(_CLUSTER, (_UPDATE,), [("clusterName", _CLUSTER)]),  # UNREGISTER_BROKER
    202: _rule(None, (_GET,), [("topic", _TOPIC)]),  # GET_TOPIC_STATS_INFO
    203: _rule(None, (_GET,), [("consumerGroup", _GROUP)]),  # GET_CONSUMER_CONNECTION_LIST
    204: _rule(_CLUSTER, (_GET,), []),  # GET_PRODUCER_CONNECTION_LIST
    205: _rule(_CLUSTER, (_UPDATE,), []),  # WIPE_WRITE_PERM_OF_BROKER
    207: _rule(None, (_DELETE,), [("groupName", _GROUP)]),  # DELETE_SUBSCRIPTIONGROUP
    208: _rule(None, (_GET,), [("consumerGroup", _GROUP), ("topic", _TOPIC), ("topicList", _TOPIC)]),
    215: _rule(None, (_DELETE,), [("topic", _TOPIC)]),  # DELETE_TOPIC_IN_BROKER
    216: _rule(_CLUSTER, (_UPDATE,), [("clusterName", _CLUSTER)]),  # DELETE_TOPIC_IN_NAMESRV
    217: _rule(_CLUSTER, (_UPDATE,), []),  # REGISTER_TOPIC_IN_NAMESRV
    219: _rule(_CLUSTER, (_GET,), []),  # GET_KVLIST_BY_NAMESPACE
    222: _rule(None, (_UPDATE,), [("group", _GROUP), ("topic", _TOPIC)]),  # INVOKE_BROKER_TO_RESET_OFFSET
    223: _rule(None, (_GET,), [("topic", _TOPIC), ("group", _GROUP)]),  # ..._TO_GET_CONSUMER_STATUS
    224: _rule(_TOPIC, (_LIST,), []),  # GET_TOPICS_BY_CLUSTER
    300: _rule(None, (_GET,), [("topic", _TOPIC)]),  # QUERY_TOPIC_CONSUME_BY_WHO
    303: _rule(None, (_GET,), [("topic", _TOPIC), ("group", _GROUP)]),  # QUERY_CONSUME_TIME_SPAN
    307: _rule(None, (_GET,), [("consumerGroup", _GROUP)]),  # GET_CONSUMER_RUNNING_INFO
    308: _rule(  # QUERY_CORRECTION_OFFSET
        None, (_GET,), [("filterGroups", _GROUP, ","), ("compareGroup", _GROUP), ("topic", _TOPIC)]
    ),
    309: _rule(None, (_SUB,), [("consumerGroup", _GROUP), ("topic", _TOPIC)]),  # CONSUME_MESSAGE_DIRECTLY
    314: _rule(None, (_UPDATE,), [("destGroup", _GROUP), ("topic", _TOPIC)]),  # CLONE_GROUP_OFFSET
    315: _rule(_CLUSTER, (_GET,), []),  # VIEW_BROKER_STATS_DATA
    317: _rule(_CLUSTER, (_GET,), []),  # GET_BROKER_CONSUME_STATS
    321: _rule(None, (_GET,), [("topic", _TOPIC), ("consumerGroup", _GROUP)]),  # QUERY_CONSUME_QUEUE
    322: _rule(_CLUSTER, (_GET,), [("clusterName", _CLUSTER)]),  # QUERY_DATA_VERSION
    323: _rule(None, (_UPDATE,), [("topic", _TOPIC)]),  # RESUME_CHECK_HALF_MESSAGE
    326: _rule(None, (_SUB,), [("producerGroup", _GROUP), ("topic", _TOPIC)]),  # PUSH_REPLY_MESSAGE_TO_CLIENT
    327: _rule(_CLUSTER, (_UPDATE,), []),  # ADD_WRITE_PERM_OF_BROKER
    328: _rule(_CLUSTER, (_GET,), []),  # GET_ALL_PRODUCER_INFO
    343: _rule(None, (_GET,), [("group", _GROUP)]),  # QUERY_TOPICS_BY_CONSUMER
    345: _rule(None, (_GET,), [("group", _GROUP), ("topic", _TOPIC)]),  # QUERY_SUBSCRIPTION_BY_CONSUMER
    351: _rule(None, (_GET,), [("topic", _TOPIC)]),  # GET_TOPIC_CONFIG
    352: _rule(None, (_GET,), [("group", _GROUP)]),  # GET_SUBSCRIPTIONGROUP_CONFIG
    353: _rule(None, (_UPDATE,), [("group", _GROUP), ("topic", _TOPIC)]),  # UPDATE_AND_GET_GROUP_FORBIDDEN
    354: _rule(None, (_GET,), [("topic", _TOPIC)]),  # CHECK_ROCKSDB_CQ_WRITE_PROGRESS
    355: _rule(_CLUSTER, (_GET,), []),  # EXPORT_ROCKSDB_CONFIG_TO_JSON
    901: _rule(None, (_GET,), [("clusterName", _CLUSTER)]),  # GET_BROKER_MEMBER_GROUP
    902: _rule(_CLUSTER, (_UPDATE,), []),  # ADD_BROKER
    903: _rule(_CLUSTER, (_UPDATE,), [("brokerClusterName", _CLUSTER)]),  # REMOVE_BROKER
    904: _rule(_CLUSTER, (_UPDATE,), [("clusterName", _CLUSTER)]),  # BROKER_HEARTBEAT
    905: _rule(_CLUSTER, (_UPDATE,), []),  # NOTIFY_MIN_BROKER_ID_CHANGE
    906: _rule(_CLUSTER, (_UPDATE,), []),  # EXCHANGE_BROKER_HA_INFO
    908: _rule(_CLUSTER, (_UPDATE,), []),  # RESET_MASTER_FLUSH_OFFSET
    1001: _rule(_CLUSTER, (_UPDATE,), []),  # CONTROLLER_ALTER_SYNC_STATE_SET
    1002: _rule(_CLUSTER, (_UPDATE,), [("clusterName", _CLUSTER)]),  # CONTROLLER_ELECT_MASTER
    1003: _rule(_CLUSTER, (_UPDATE,), [("clusterName", _CLUSTER)]),  # CONTROLLER_REGISTER_BROKER
    1004: _rule(_CLUSTER, (_GET,), []),  # CONTROLLER_GET_REPLICA_INFO
    1008: _rule(_CLUSTER, (_UPDATE,), []),  # NOTIFY_BROKER_ROLE_CHANGED
    1011: _rule(_CLUSTER, (_UPDATE,), [("clusterName", _CLUSTER)]),  # CLEAN_BROKER_DATA
    1012: _rule(_CLUSTER, (_GET,), [("clusterName", _CLUSTER)]),  # CONTROLLER_GET_NEXT_BROKER_ID
    1013: _rule(_CLUSTER, (_UPDATE,), [("clusterName", _CLUSTER)]),  # CONTROLLER_APPLY_BROKER_ID
    3001: _rule(_CLUSTER, (_UPDATE,), []),  # AUTH_CREATE_USER
    3002: _rule(_CLUSTER, (_UPDATE,), []),  # AUTH_UPDATE_USER
    3003: _rule(_CLUSTER, (_UPDATE,), []),  # AUTH_DELETE_USER
    3004: _rule(_CLUSTER, (_GET,), []),  # AUTH_GET_USER
    3005: _rule(_CLUSTER, (_GET,), []),  # AUTH_LIST_USER
    3006: _rule(_CLUSTER, (_UPDATE,), []),  # AUTH_CREATE_ACL
    3007: _rule(_CLUSTER, (_UPDATE,), []),  # AUTH_UPDATE_ACL
    3008: _rule(_CLUSTER, (_UPDATE,), []),  # AUTH_DELETE_ACL
    3009: _rule(_CLUSTER, (_GET,), []),  # AUTH_GET_ACL
    3010: _rule(_CLUSTER, (_GET,), []),  # AUTH_LIST_ACL
    200050: _rule(None, (_SUB,), [("consumerGroup", _GROUP), ("topic", _TOPIC)]),  # POP_MESSAGE
    200051: _rule(None, (_SUB,), [("consumerGroup", _GROUP), ("topic", _TOPIC)]),  # ACK_MESSAGE
    200052: _rule(None, (_SUB,), [("topic", _TOPIC), ("consumerGroup", _GROUP)]),  # PEEK_MESSAGE
    200053: _rule(None, (_SUB,), [("consumerGroup", _GROUP), ("topic", _TOPIC)]),  # CHANGE_..._INVISIBLETIME
    200054: _rule(None, (_SUB,), [("consumerGroup", _GROUP), ("topic", _TOPIC)]),  # NOTIFICATION
    200055: _rule(None, (_GET,), [("consumerGroup", _GROUP), ("topic", _TOPIC)]),  # POLLING_INFO
}


def _str(value: Any) -> str | None:
    if value is None:
        return None
    if value is True or value is False:
        return "true" if value else "false"
    return str(value)


def _blank(value: str | None) -> bool:
    return value is None or not value.strip()


def _body_json(body: bytes | None) -> dict[str, Any]:
    if not body:
        raise AuthorizationError("parse authorization context error.")
    try:
        data = fastjson.loads(body)
    except (ValueError, ProtocolError):
        raise AuthorizationError("parse authorization context error.") from None
    if not isinstance(data, dict):
        raise AuthorizationError("parse authorization context error.")
    return data


def _retry_send(topic: str | None, group: str | None) -> Need:
    return Need(Resource.group(group if not _blank(group) else topic), (_SUB,))


def remoting_needs(
    code: int,
    fields: Mapping[str, Any],
    body: bytes | None,
    cluster: str,
    admin_codes: frozenset[int] = frozenset(),
) -> list[Need]:
    """The authorization contexts of a remoting request; raises :class:`AuthorizationError`
    when the request cannot be read (``parse authorization context error.``)."""
    if not fields:
        return []
    get = fields.get
    needs: list[Need] = []
    if code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
        topic = _str(get("topic"))
        if is_retry_topic(topic):
            needs.append(Need(Resource.group(topic), (_SUB, _GET)))
        else:
            needs.append(Need(Resource.topic(topic), (_PUB, _SUB, _GET)))
    elif code == RequestCode.SEND_MESSAGE:
        topic = _str(get("topic"))
        if is_retry_topic(topic):
            needs.append(_retry_send(topic, _str(get("group"))))
        else:
            needs.append(Need(Resource.topic(topic), (_PUB,)))
    elif code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        topic = _str(get("b"))
        if is_retry_topic(topic):
            needs.append(_retry_send(topic, _str(get("a"))))
        else:
            needs.append(Need(Resource.topic(topic), (_PUB,)))
    elif code == RequestCode.RECALL_MESSAGE:
        needs.append(Need(Resource.topic(_str(get("topic"))), (_PUB,)))
    elif code == RequestCode.END_TRANSACTION:
        topic = _str(get("topic"))
        if not _blank(topic):
            needs.append(Need(Resource.topic(topic), (_PUB,)))
    elif code in (RequestCode.SEND_REPLY_MESSAGE, RequestCode.SEND_REPLY_MESSAGE_V2):
        # Beyond Apache (authenticated only there): a reply is stored in its topic.
        topic = _str(get("b" if code == RequestCode.SEND_REPLY_MESSAGE_V2 else "topic"))
        needs.append(Need(Resource.topic(topic), (_PUB,)))
    elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
        needs.append(Need(Resource.group(_str(get("group"))), (_SUB,)))
    elif code in (RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE):
        # LITE_PULL_MESSAGE is beyond Apache (authenticated only there, so any user could read
        # any topic): it reads as a pull does.
        topic = _str(get("topic"))
        if not is_retry_topic(topic):
            needs.append(Need(Resource.topic(topic), (_SUB,)))
        needs.append(Need(Resource.group(_str(get("consumerGroup"))), (_SUB,)))
    elif code == RequestCode.QUERY_MESSAGE:
        needs.append(Need(Resource.topic(_str(get("topic"))), (_SUB, _GET)))
    elif code == RequestCode.HEART_BEAT:
        heartbeat = _body_json(body)
        for consumer in heartbeat.get("consumerDataSet") or []:
            needs.append(Need(Resource.group(_str(consumer.get("groupName"))), (_SUB,)))
            for sub in consumer.get("subscriptionDataSet") or []:
                topic = _str(sub.get("topic"))
                if not is_retry_topic(topic):
                    needs.append(Need(Resource.topic(topic), (_SUB,)))
    elif code == RequestCode.UNREGISTER_CLIENT:
        group = _str(get("consumerGroup"))
        if not _blank(group):
            needs.append(Need(Resource.group(group), (_SUB,)))
    elif code == RequestCode.GET_CONSUMER_LIST_BY_GROUP:
        needs.append(Need(Resource.group(_str(get("consumerGroup"))), (_SUB, _GET)))
    elif code in (RequestCode.QUERY_CONSUMER_OFFSET, RequestCode.UPDATE_CONSUMER_OFFSET):
        actions = (_SUB, _GET) if code == RequestCode.QUERY_CONSUMER_OFFSET else (_SUB, _UPDATE)
        topic = _str(get("topic"))
        if not is_retry_topic(topic):
            needs.append(Need(Resource.topic(topic), actions))
        needs.append(Need(Resource.group(_str(get("consumerGroup"))), actions))
    elif code == RequestCode.QUERY_ASSIGNMENT:
        # Beyond Apache (authenticated only there): learning a group's queues is consuming.
        query = _body_json(body)
        needs.append(Need(Resource.group(_str(query.get("consumerGroup"))), (_SUB,)))
        topic = _str(query.get("topic"))
        if not is_retry_topic(topic):
            needs.append(Need(Resource.topic(topic), (_SUB,)))
    elif code == PopRequestCode.BATCH_ACK_MESSAGE:
        # Beyond Apache (authenticated only there): every group and topic the batch acks.
        try:
            _, acks = decode_batch_ack_body(body or b"")
        except ValueError:
            raise AuthorizationError("parse authorization context error.") from None
        for ack in acks:
            needs.append(Need(Resource.group(ack.consumer_group), (_SUB,)))
            if not is_retry_topic(ack.topic):
                needs.append(Need(Resource.topic(ack.topic), (_SUB,)))
    elif code in (RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ):
        lock = _body_json(body)
        needs.append(Need(Resource.group(_str(lock.get("consumerGroup"))), (_SUB,)))
        for mq in lock.get("mqSet") or []:
            topic = _str(mq.get("topic")) if isinstance(mq, dict) else None
            if not is_retry_topic(topic):
                needs.append(Need(Resource.topic(topic), (_SUB,)))
    else:
        needs = _annotated(code, fields, cluster)
        if not needs and code in admin_codes:
            needs = [Need(Resource.cluster(cluster), (_UPDATE,))]
    return needs


def _annotated(code: int, fields: Mapping[str, Any], cluster: str) -> list[Need]:
    rule = ANNOTATED.get(code)
    if rule is None:
        return []
    needs: list[Need] = []
    for name, resource_type, splitter in rule.fields:
        value = _str(fields.get(name))
        if value is None:
            continue
        values = [v for v in _split_any(value, splitter)] if splitter else [value]
        for item in values:
            if resource_type is _TOPIC and is_retry_topic(item):
                needs.append(Need(Resource.group(item), rule.actions))
            else:
                needs.append(Need(Resource(resource_type, item, ResourcePattern.LITERAL), rule.actions))
    if not needs and rule.cluster:
        needs.append(Need(Resource.cluster(cluster), rule.actions))
    return needs


def _split_any(text: str, separators: str) -> list[str]:
    """``StringUtils.split``: split on any of the characters, no empty pieces."""
    pieces: list[str] = []
    current: list[str] = []
    for ch in text:
        if ch in separators:
            if current:
                pieces.append("".join(current))
                current = []
        else:
            current.append(ch)
    if current:
        pieces.append("".join(current))
    return pieces


# -- gRPC -----------------------------------------------------------------------------------

_CONSUMER_CLIENT_TYPES = frozenset({"PUSH_CONSUMER", "SIMPLE_CONSUMER", "PULL_CONSUMER"})


def _named(resource: Any, what: str) -> str:
    name = getattr(resource, "name", "") if resource is not None else ""
    if not name or not name.strip():
        raise AuthorizationError(f"{what} is null.")
    return str(name)


def _sub(group: Any, topic: Any) -> list[Need]:
    return [
        Need(Resource.group(_named(group, "group")), (_SUB,)),
        Need(Resource.topic(_named(topic, "topic")), (_SUB,)),
    ]


def grpc_needs(message: Any) -> list[Need] | None:
    """The authorization contexts of a 5.x request message (None: nothing to check);
    raises :class:`AuthorizationError` for a request that names no topic or group."""
    kind = type(message).DESCRIPTOR.name
    if kind == "SendMessageRequest":
        if not message.messages:
            raise AuthorizationError("message is null.")
        return [Need(Resource.topic(_named(message.messages[0].topic, "topic")), (_PUB,))]
    if kind in ("RecallMessageRequest", "EndTransactionRequest"):
        return [Need(Resource.topic(_named(message.topic, "topic")), (_PUB,))]
    if kind == "HeartbeatRequest":
        client_type = _enum_name(message, "client_type")
        if client_type not in _CONSUMER_CLIENT_TYPES:
            return None
        return [Need(Resource.group(_named(message.group, "group")), (_SUB,))]
    if kind == "ReceiveMessageRequest":
        if not message.HasField("message_queue"):
            raise AuthorizationError("messageQueue is null.")
        return _sub(message.group, message.message_queue.topic)
    if kind in ("AckMessageRequest", "ForwardMessageToDeadLetterQueueRequest", "QueryAssignmentRequest"):
        return _sub(message.group, message.topic)
    if kind == "NotifyClientTerminationRequest":
        if message.group.name and message.group.name.strip():
            return [Need(Resource.group(message.group.name), (_SUB,))]
        return None
    if kind == "ChangeInvisibleDurationRequest":
        return [Need(Resource.group(_named(message.group, "group")), (_SUB,))]
    if kind == "QueryRouteRequest":
        return [Need(Resource.topic(_named(message.topic, "topic")), (_PUB, _SUB))]
    if kind == "TelemetryCommand":
        return _telemetry_needs(message)
    # Ours, beyond Apache's table: the pull-style calls consume as their remoting forms do.
    if kind in ("PullMessageRequest", "UpdateOffsetRequest", "GetOffsetRequest"):
        return _sub(message.group, message.message_queue.topic)
    if kind == "QueryOffsetRequest":
        return [Need(Resource.topic(_named(message.message_queue.topic, "topic")), (_SUB,))]
    return None


def _enum_name(message: Any, field: str) -> str:
    value = getattr(message, field)
    descriptor = type(message).DESCRIPTOR.fields_by_name[field].enum_type
    found = descriptor.values_by_number.get(value) if descriptor is not None else None
    return str(found.name) if found is not None else ""


def _telemetry_needs(command: Any) -> list[Need] | None:
    if command.WhichOneof("command") != "settings":
        return None
    settings = command.settings
    if not settings.HasField("publishing") and not settings.HasField("subscription"):
        raise AuthorizationError("settings command doesn't have publishing or subscription.")
    needs: list[Need] = []
    if settings.HasField("publishing"):
        for topic in settings.publishing.topics:
            needs.append(Need(Resource.topic(_named(topic, "topic")), (_PUB,)))
    if settings.HasField("subscription"):
        subscription = settings.subscription
        needs.append(Need(Resource.group(_named(subscription.group, "group")), (_SUB,)))
        for entry in subscription.subscriptions:
            needs.append(Need(Resource.topic(_named(entry.topic, "topic")), (_SUB,)))
    return needs
