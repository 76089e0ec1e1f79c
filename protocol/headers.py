"""Typed request and response headers ("custom headers" carried in ``extFields``).

Each header is declared once as a pydantic model whose aliases are the wire names
(docs/protocol.md §3). :meth:`Header.from_fields` reads a command's ``extFields`` leniently
(numbers, booleans, ``"0"``/``"1"``, strings for numbers), raising :class:`ProtocolError` that
names the bad field; :meth:`Header.to_fields` gives the map to put on the wire. The broker parses
with these models and the SDK builds and reads with them, so a wire name is spelled only here;
hot paths that cannot afford a validation per request look names up once with
:meth:`Header.wire`.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, NamedTuple, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from .errors import ProtocolError
from .names import AUTO_CREATE_TOPIC
from .speedups import compiled as _compiled

_BOOL_WORDS = {"true": True, "false": False, "1": True, "0": False}


def _parse_bool(value: Any) -> Any:
    # Java reads booleans with Boolean.parseBoolean; the C++ client writes "0"/"1".
    if isinstance(value, str):
        known = _BOOL_WORDS.get(value)
        if known is not None:
            return known
        text = value.strip().lower()
        return text == "true" or text == "1"
    return value


WireBool = Annotated[bool, BeforeValidator(_parse_bool)]
#: Java ``Integer`` / ``Long`` header fields: wider values are refused at the header, where
#: the error can name the field, instead of failing later in a struct or a store.
Int32 = Annotated[int, Field(ge=-(1 << 31), le=(1 << 31) - 1)]
Int64 = Annotated[int, Field(ge=-(1 << 63), le=(1 << 63) - 1)]


class Header(BaseModel):
    """Base of every header model."""

    model_config = ConfigDict(
        populate_by_name=True,
        coerce_numbers_to_str=True,
        extra="ignore",
        validate_assignment=False,
    )

    _wire_names: ClassVar[tuple[tuple[str, str], ...]] = ()
    _wire_by_name: ClassVar[dict[str, str]] = {}

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls._wire_names = tuple((name, info.alias or name) for name, info in cls.model_fields.items())
        cls._wire_by_name = dict(cls._wire_names)

    @classmethod
    def wire(cls, name: str) -> str:
        """The wire name of field ``name``, for code that reads or writes one field of a
        prepared map on a hot path (a KeyError for a field the model does not declare)."""
        return cls._wire_by_name[name]

    @classmethod
    def from_fields(cls, fields: dict[str, Any] | None) -> Self:
        """Validate a command's extFields into this header."""
        try:
            # The validator itself: model_validate's wrapper costs a third of a small header.
            return cls.__pydantic_validator__.validate_python(fields or {})
        except ValidationError as exc:
            raise ProtocolError(_describe(cls, exc)) from None

    def to_fields(self) -> dict[str, Any]:
        """Wire name -> native value, ``None`` left out (encoders stringify for JSON)."""
        values = self.__dict__
        return {wire: value for name, wire in self._wire_names if (value := values[name]) is not None}


def _describe(cls: type[Header], exc: ValidationError) -> str:
    names = {info.alias: name for name, info in cls.model_fields.items() if info.alias not in (None, name)}
    problems = []
    for error in exc.errors(include_url=False):
        wire = ".".join(str(part) for part in error["loc"]) or "?"
        # The wire name is what the peer sent; the field name explains a one-letter V2 key.
        label = f"{wire!r} ({names[wire]})" if wire in names else repr(wire)
        if error["type"] == "missing":
            problems.append(f"missing field {label}")
        else:
            problems.append(f"field {label}: {error['msg']} (got {error.get('input')!r})")
    return f"bad {cls.__name__}: " + "; ".join(problems)


# -- name server ----------------------------------------------------------------------------


class GetRouteInfoRequestHeader(Header):
    topic: str
    accept_standard_json_only: WireBool | None = Field(None, alias="acceptStandardJsonOnly")


class RegisterBrokerRequestHeader(Header):
    broker_name: str = Field(alias="brokerName")
    broker_addr: str = Field(alias="brokerAddr")
    cluster_name: str = Field(alias="clusterName")
    ha_server_addr: str = Field("", alias="haServerAddr")
    broker_id: Int64 = Field(alias="brokerId")
    compressed: WireBool = False
    body_crc32: Int32 = Field(0, alias="bodyCrc32")


class RegisterBrokerResponseHeader(Header):
    ha_server_addr: str | None = Field(None, alias="haServerAddr")
    master_addr: str | None = Field(None, alias="masterAddr")


class UnregisterBrokerRequestHeader(Header):
    broker_name: str = Field(alias="brokerName")
    broker_addr: str = Field(alias="brokerAddr")
    cluster_name: str = Field(alias="clusterName")
    broker_id: Int64 = Field(alias="brokerId")


class QueryDataVersionRequestHeader(UnregisterBrokerRequestHeader):
    pass


class QueryDataVersionResponseHeader(Header):
    changed: WireBool


class GetKVConfigRequestHeader(Header):
    namespace: str
    key: str


class GetKVConfigResponseHeader(Header):
    value: str | None = None


class PutKVConfigRequestHeader(Header):
    namespace: str
    key: str
    value: str


class DeleteKVConfigRequestHeader(Header):
    namespace: str
    key: str


class GetKVListByNamespaceRequestHeader(Header):
    namespace: str


class GetTopicsByClusterRequestHeader(Header):
    cluster: str


class DeleteTopicFromNamesrvRequestHeader(Header):
    topic: str
    cluster_name: str | None = Field(None, alias="clusterName")


class WipeWritePermOfBrokerRequestHeader(Header):
    broker_name: str = Field(alias="brokerName")


class WipeWritePermOfBrokerResponseHeader(Header):
    wipe_topic_count: Int32 = Field(alias="wipeTopicCount")


class RegisterTopicRequestHeader(Header):
    """REGISTER_TOPIC_IN_NAMESRV (RocketMQ 5): the body is a TopicRouteData whose queue datas
    become the topic's route."""

    topic: str


class GetBrokerMemberGroupRequestHeader(Header):
    """GET_BROKER_MEMBER_GROUP (RocketMQ 5)."""

    cluster_name: str = Field(alias="clusterName")
    broker_name: str = Field(alias="brokerName")


class BrokerHeartbeatRequestHeader(Header):
    """BROKER_HEARTBEAT (RocketMQ 5, controller mode): a registered broker saying it is alive.

    The name server reads only the cluster and address; the rest is for the controller.
    """

    cluster_name: str = Field(alias="clusterName")
    broker_addr: str = Field(alias="brokerAddr")
    broker_name: str = Field(alias="brokerName")
    broker_id: Int64 | None = Field(None, alias="brokerId")
    epoch: Int32 | None = None
    max_offset: Int64 | None = Field(None, alias="maxOffset")
    confirm_offset: Int64 | None = Field(None, alias="confirmOffset")
    heartbeat_timeout_mills: Int64 | None = Field(None, alias="heartbeatTimeoutMills")
    election_priority: Int32 | None = Field(None, alias="electionPriority")


# -- producing ------------------------------------------------------------------------------


class SendMessageRequestHeader(Header):
    """SEND_MESSAGE (10) header, full names."""

    producer_group: str = Field(alias="producerGroup")
    topic: str
    default_topic: str = Field(AUTO_CREATE_TOPIC, alias="defaultTopic")
    default_topic_queue_nums: Int32 = Field(4, alias="defaultTopicQueueNums")
    queue_id: Int32 = Field(alias="queueId")
    sys_flag: Int32 = Field(0, alias="sysFlag")
    born_timestamp: Int64 = Field(alias="bornTimestamp")
    flag: Int32 = 0
    properties: str | None = None
    reconsume_times: Int32 | None = Field(None, alias="reconsumeTimes")
    unit_mode: WireBool = Field(False, alias="unitMode")
    batch: WireBool = False
    max_reconsume_times: Int32 | None = Field(None, alias="maxReconsumeTimes")

    def to_v2(self) -> SendMessageRequestHeaderV2:
        return SendMessageRequestHeaderV2.model_construct(**self.__dict__)


class SendMessageRequestHeaderV2(Header):
    """SEND_MESSAGE_V2 (310) / SEND_BATCH_MESSAGE (320): the same fields under one-letter keys."""

    producer_group: str = Field(alias="a")
    topic: str = Field(alias="b")
    default_topic: str = Field(AUTO_CREATE_TOPIC, alias="c")
    default_topic_queue_nums: Int32 = Field(4, alias="d")
    queue_id: Int32 = Field(alias="e")
    sys_flag: Int32 = Field(0, alias="f")
    born_timestamp: Int64 = Field(alias="g")
    flag: Int32 = Field(0, alias="h")
    properties: str | None = Field(None, alias="i")
    reconsume_times: Int32 | None = Field(None, alias="j")
    unit_mode: WireBool = Field(False, alias="k")
    max_reconsume_times: Int32 | None = Field(None, alias="l")
    batch: WireBool = Field(False, alias="m")

    def to_v1(self) -> SendMessageRequestHeader:
        return SendMessageRequestHeader.model_construct(**self.__dict__)


class SendHeader(NamedTuple):
    """What the broker's send path reads of a SEND_MESSAGE, SEND_MESSAGE_V2 or
    SEND_BATCH_MESSAGE header: the two models' fields, in V2's order, in a tuple that the
    compiled reader builds without a validation per request (see :func:`send_header`)."""

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: str | None
    reconsume_times: int | None
    unit_mode: bool
    max_reconsume_times: int | None
    batch: bool


def pure_send_header(fields: dict[str, Any] | None, v2: bool) -> SendHeader:
    """:func:`send_header` through the pydantic model."""
    model = (SendMessageRequestHeaderV2 if v2 else SendMessageRequestHeader).from_fields(fields)
    return SendHeader(**model.__dict__)


def send_header(fields: dict[str, Any] | None, v2: bool) -> SendHeader:
    """A send request's header: ``v2`` for the one-letter names of SEND_MESSAGE_V2 and
    SEND_BATCH_MESSAGE. Raises :class:`ProtocolError` naming a bad field."""
    return pure_send_header(fields, v2)


def setup_compiled(module: Any) -> None:
    """Register with the compiled extension the class and wire names its ``send_header``
    builds and reads."""
    module.setup_send_header(
        SendHeader,
        tuple(SendMessageRequestHeader.wire(name) for name in SendHeader._fields),
        tuple(SendMessageRequestHeaderV2.wire(name) for name in SendHeader._fields),
        AUTO_CREATE_TOPIC,
    )


if _compiled is not None:
    setup_compiled(_compiled)
    _c_send_header = _compiled.send_header

    def send_header(fields: dict[str, Any] | None, v2: bool) -> SendHeader:
        # The compiled reader takes the common shape; the model reads (or refuses) the rest.
        return _c_send_header(fields, v2) or pure_send_header(fields, v2)


class SendMessageResponseHeader(Header):
    msg_id: str = Field(alias="msgId")
    queue_id: Int32 = Field(alias="queueId")
    queue_offset: Int64 = Field(alias="queueOffset")
    transaction_id: str | None = Field(None, alias="transactionId")
    msg_region: str | None = Field(None, alias="MSG_REGION")
    trace_on: str | None = Field(None, alias="TRACE_ON")


class EndTransactionRequestHeader(Header):
    producer_group: str = Field(alias="producerGroup")
    tran_state_table_offset: Int64 = Field(alias="tranStateTableOffset")
    commit_log_offset: Int64 = Field(alias="commitLogOffset")
    commit_or_rollback: Int32 = Field(alias="commitOrRollback")
    from_transaction_check: WireBool = Field(False, alias="fromTransactionCheck")
    msg_id: str = Field(alias="msgId")
    transaction_id: str | None = Field(None, alias="transactionId")


class CheckTransactionStateRequestHeader(Header):
    tran_state_table_offset: Int64 = Field(alias="tranStateTableOffset")
    commit_log_offset: Int64 = Field(alias="commitLogOffset")
    msg_id: str | None = Field(None, alias="msgId")
    transaction_id: str | None = Field(None, alias="transactionId")
    offset_msg_id: str | None = Field(None, alias="offsetMsgId")


# -- consuming ------------------------------------------------------------------------------


class PullMessageRequestHeader(Header):
    consumer_group: str = Field(alias="consumerGroup")
    topic: str
    queue_id: Int32 = Field(alias="queueId")
    queue_offset: Int64 = Field(alias="queueOffset")
    max_msg_nums: Int32 = Field(alias="maxMsgNums")
    sys_flag: Int32 = Field(alias="sysFlag")
    commit_offset: Int64 = Field(0, alias="commitOffset")
    suspend_timeout_millis: Int64 = Field(0, alias="suspendTimeoutMillis")
    subscription: str | None = None
    sub_version: Int64 = Field(0, alias="subVersion")
    expression_type: str | None = Field(None, alias="expressionType")


class PullMessageResponseHeader(Header):
    suggest_which_broker_id: Int64 = Field(0, alias="suggestWhichBrokerId")
    next_begin_offset: Int64 = Field(alias="nextBeginOffset")
    min_offset: Int64 = Field(alias="minOffset")
    max_offset: Int64 = Field(alias="maxOffset")
    #: RocketMQ 5 static topics: what turns each record's physical offset into a logical one.
    offset_delta: Int64 | None = Field(None, alias="offsetDelta")


class QueryConsumerOffsetRequestHeader(Header):
    consumer_group: str = Field(alias="consumerGroup")
    topic: str
    queue_id: Int32 = Field(alias="queueId")
    #: RocketMQ 5: false asks for QUERY_NOT_FOUND rather than 0 when the group has no offset.
    set_zero_if_not_found: WireBool | None = Field(None, alias="setZeroIfNotFound")


class QueryConsumerOffsetResponseHeader(Header):
    offset: Int64


class UpdateConsumerOffsetRequestHeader(Header):
    consumer_group: str = Field(alias="consumerGroup")
    topic: str
    queue_id: Int32 = Field(alias="queueId")
    commit_offset: Int64 = Field(alias="commitOffset")


class QueueRequestHeader(Header):
    """GET_MAX_OFFSET (30), GET_MIN_OFFSET (31), GET_EARLIEST_MSG_STORETIME (32)."""

    topic: str
    queue_id: Int32 = Field(alias="queueId")


GetMaxOffsetRequestHeader = QueueRequestHeader
GetMinOffsetRequestHeader = QueueRequestHeader
GetEarliestMsgStoretimeRequestHeader = QueueRequestHeader


class OffsetResponseHeader(Header):
    """GET_MAX_OFFSET, GET_MIN_OFFSET and SEARCH_OFFSET_BY_TIMESTAMP responses."""

    offset: Int64


GetMaxOffsetResponseHeader = OffsetResponseHeader
GetMinOffsetResponseHeader = OffsetResponseHeader
SearchOffsetResponseHeader = OffsetResponseHeader


class GetEarliestMsgStoretimeResponseHeader(Header):
    timestamp: Int64


class SearchOffsetRequestHeader(Header):
    topic: str
    queue_id: Int32 = Field(alias="queueId")
    timestamp: Int64


class GetConsumerListByGroupRequestHeader(Header):
    consumer_group: str = Field(alias="consumerGroup")


class ConsumerSendMsgBackRequestHeader(Header):
    offset: Int64
    group: str
    delay_level: Int32 = Field(0, alias="delayLevel")
    origin_msg_id: str | None = Field(None, alias="originMsgId")
    origin_topic: str | None = Field(None, alias="originTopic")
    unit_mode: WireBool = Field(False, alias="unitMode")
    max_reconsume_times: Int32 | None = Field(None, alias="maxReconsumeTimes")


class UnregisterClientRequestHeader(Header):
    client_id: str = Field(alias="clientID")
    producer_group: str | None = Field(None, alias="producerGroup")
    consumer_group: str | None = Field(None, alias="consumerGroup")


class NotifyConsumerIdsChangedRequestHeader(Header):
    consumer_group: str = Field(alias="consumerGroup")


# -- queries --------------------------------------------------------------------------------


class QueryMessageRequestHeader(Header):
    topic: str
    key: str
    max_num: Int32 = Field(32, alias="maxNum")
    begin_timestamp: Int64 = Field(0, alias="beginTimestamp")
    end_timestamp: Int64 = Field(alias="endTimestamp")
    unique_key_query: WireBool = Field(False, alias="_UNIQUE_KEY_QUERY")


class QueryMessageResponseHeader(Header):
    index_last_update_timestamp: Int64 = Field(alias="indexLastUpdateTimestamp")
    index_last_update_phyoffset: Int64 = Field(alias="indexLastUpdatePhyoffset")


class ViewMessageRequestHeader(Header):
    offset: Int64


# -- administration -------------------------------------------------------------------------


class CreateTopicRequestHeader(Header):
    topic: str
    default_topic: str = Field(AUTO_CREATE_TOPIC, alias="defaultTopic")
    read_queue_nums: Int32 = Field(alias="readQueueNums")
    write_queue_nums: Int32 = Field(alias="writeQueueNums")
    perm: Int32
    topic_filter_type: str = Field("SINGLE_TAG", alias="topicFilterType")
    topic_sys_flag: Int32 | None = Field(None, alias="topicSysFlag")
    order: WireBool = False
    #: RocketMQ 5: ``+key=value,-key`` changes to the topic's attributes.
    attributes: str | None = None
    #: RocketMQ 5 static topics: replace the broker's mapping whatever its epoch.
    force: WireBool | None = None


class DeleteTopicRequestHeader(Header):
    topic: str


class GetTopicStatsInfoRequestHeader(Header):
    topic: str


class GetConsumeStatsRequestHeader(Header):
    consumer_group: str = Field(alias="consumerGroup")
    topic: str | None = None


class DeleteSubscriptionGroupRequestHeader(Header):
    group_name: str = Field(alias="groupName")
    remove_offset: WireBool = Field(False, alias="removeOffset")


class GetConsumerConnectionListRequestHeader(Header):
    consumer_group: str = Field(alias="consumerGroup")


class GetProducerConnectionListRequestHeader(Header):
    producer_group: str = Field(alias="producerGroup")


class ResetOffsetRequestHeader(Header):
    """INVOKE_BROKER_TO_RESET_OFFSET (222) and RESET_CONSUMER_CLIENT_OFFSET (220)."""

    topic: str
    group: str
    timestamp: Int64
    is_force: WireBool = Field(True, alias="isForce")


class QueryTopicConsumeByWhoRequestHeader(Header):
    topic: str


# -- ACL administration (RocketMQ 4.9's plain ACL requests, codes 50-54) ----------------------


class CreateAccessConfigRequestHeader(Header):
    """UPDATE_AND_CREATE_ACL_CONFIG (50); ``topicPerms``/``groupPerms`` are comma-separated
    ``name=PERM`` lists."""

    access_key: str = Field(alias="accessKey")
    secret_key: str | None = Field(None, alias="secretKey", repr=False)
    white_remote_address: str | None = Field(None, alias="whiteRemoteAddress")
    admin: WireBool = False
    default_topic_perm: str | None = Field(None, alias="defaultTopicPerm")
    default_group_perm: str | None = Field(None, alias="defaultGroupPerm")
    topic_perms: str | None = Field(None, alias="topicPerms")
    group_perms: str | None = Field(None, alias="groupPerms")


class DeleteAccessConfigRequestHeader(Header):
    """DELETE_ACL_CONFIG (51)."""

    access_key: str = Field(alias="accessKey")


class UpdateGlobalWhiteAddrsConfigRequestHeader(Header):
    """UPDATE_GLOBAL_WHITE_ADDRS_CONFIG (53): comma-separated patterns; ``aclFileFullPath``
    picks the file (4.9.3+), the first ACL file when absent."""

    global_white_addrs: str = Field(alias="globalWhiteAddrs")
    acl_file_full_path: str | None = Field(None, alias="aclFileFullPath")


class GetBrokerAclConfigResponseHeader(Header):
    """GET_BROKER_CLUSTER_ACL_INFO (52): ``version`` is the ACL data version as JSON,
    ``allAclFileVersion`` a JSON map of file -> data version."""

    version: str
    all_acl_file_version: str | None = Field(None, alias="allAclFileVersion")
    broker_name: str = Field(alias="brokerName")
    broker_addr: str = Field(alias="brokerAddr")
    cluster_name: str = Field(alias="clusterName")


# -- request-reply --------------------------------------------------------------------------


class ReplyMessageRequestHeader(Header):
    """PUSH_REPLY_MESSAGE_TO_CLIENT (326): a broker hands a reply to the requester's connection.
    The send header's fields (full names), plus where and when the reply was stored; the hosts
    are Java's ``SocketAddress.toString()`` (``/127.0.0.1:10911``)."""

    producer_group: str = Field(alias="producerGroup")
    topic: str
    default_topic: str = Field(AUTO_CREATE_TOPIC, alias="defaultTopic")
    default_topic_queue_nums: Int32 = Field(4, alias="defaultTopicQueueNums")
    queue_id: Int32 = Field(alias="queueId")
    sys_flag: Int32 = Field(0, alias="sysFlag")
    born_timestamp: Int64 = Field(alias="bornTimestamp")
    flag: Int32 = 0
    properties: str | None = None
    reconsume_times: Int32 | None = Field(None, alias="reconsumeTimes")
    unit_mode: WireBool = Field(False, alias="unitMode")
    born_host: str = Field(alias="bornHost")
    store_host: str = Field(alias="storeHost")
    store_timestamp: Int64 = Field(alias="storeTimestamp")
