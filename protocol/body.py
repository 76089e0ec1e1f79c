"""Structured JSON bodies (docs/protocol.md §5): routes, registrations, heartbeats, locks, admin.

Models read every dialect real peers write (fastjson's unquoted keys, C++ enum ordinals and
string ``subVersion``, absent empty sets) and :meth:`Body.encode` writes compact JSON with
numbers as numbers, the way the Java name server and broker do.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Mapping
from enum import Enum, StrEnum
from typing import Annotated, Any, Self

from pydantic import AliasChoices, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from . import fastjson
from .codes import PERM_READ_WRITE, MQVersion
from .errors import ProtocolError


class Body(BaseModel):
    """Base of every JSON body model."""

    model_config = ConfigDict(populate_by_name=True, coerce_numbers_to_str=True, extra="ignore")

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> Self:
        """Parse a body, tolerating fastjson's dialect."""
        try:
            return cls.model_validate(fastjson.loads(data))
        except ValidationError as exc:
            raise ProtocolError(f"bad {cls.__name__} body: {_first_error(exc)}") from None

    def to_wire(self) -> dict[str, Any]:
        # fastjson writes fields in alphabetical order, nested objects included
        return _sorted_keys(self.model_dump(by_alias=True, exclude_none=True, mode="json"))

    def encode(self) -> bytes:
        return fastjson.dumps(self.to_wire())


def _sorted_keys(value: Any) -> Any:
    if type(value) is dict:
        return {k: _sorted_keys(value[k]) for k in sorted(value)}
    if type(value) is list:
        return [_sorted_keys(v) for v in value]
    return value


def _first_error(exc: ValidationError) -> str:
    error = exc.errors(include_url=False)[0]
    field = ".".join(str(part) for part in error["loc"]) or "?"
    return f"{field}: {error['msg']}"


def _enum_by_name_or_ordinal(enum: type[Enum]) -> BeforeValidator:
    members = list(enum)

    def convert(value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            if 0 <= value < len(members):
                return members[value]
            raise ValueError(f"{enum.__name__} ordinal {value} out of range")
        if isinstance(value, str) and value.isdigit():
            return convert(int(value))
        return value

    return BeforeValidator(convert)


class ConsumeType(StrEnum):
    CONSUME_ACTIVELY = "CONSUME_ACTIVELY"
    CONSUME_PASSIVELY = "CONSUME_PASSIVELY"


class MessageModel(StrEnum):
    BROADCASTING = "BROADCASTING"
    CLUSTERING = "CLUSTERING"


class ConsumeFromWhere(StrEnum):
    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST = (
        "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST"
    )
    CONSUME_FROM_MIN_OFFSET = "CONSUME_FROM_MIN_OFFSET"
    CONSUME_FROM_MAX_OFFSET = "CONSUME_FROM_MAX_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


# -- routes and registration ----------------------------------------------------------------


class DataVersion(Body):
    timestamp: int = 0
    counter: int = 0
    #: RocketMQ 5: a controller-mode broker's master epoch at its last role change. A name
    #: server keeps a broker id's address against a registration with a lower one, so a
    #: deposed master cannot take the route back from the new one.
    state_version: int = Field(0, alias="stateVersion")


class TopicConfig(Body):
    topic_name: str = Field(alias="topicName")
    read_queue_nums: int = Field(16, alias="readQueueNums")
    write_queue_nums: int = Field(16, alias="writeQueueNums")
    perm: int = PERM_READ_WRITE
    topic_filter_type: str = Field("SINGLE_TAG", alias="topicFilterType")
    topic_sys_flag: int = Field(0, alias="topicSysFlag")
    order: bool = False
    #: RocketMQ 5's topic attributes (``message.type``, ``queue.type``, ...), plain keys.
    attributes: dict[str, str] = Field(default_factory=dict)


_V5_0_0 = int(MQVersion.V5_0_0)

#: The scope every static-topic mapping made by Apache's tools has.
GLOBAL_SCOPE = "__global__"


class LogicQueueMappingItem(Body):
    """A range of a global queue's logical offsets, held by ``bname``'s queue ``queue_id``
    from its physical offset ``start_offset`` (to ``end_offset``, -1 while it leads)."""

    gen: int = 0
    queue_id: int = Field(0, alias="queueId")
    bname: str = ""
    #: Where this item starts in the global queue; -1 while a move has not decided it.
    logic_offset: int = Field(0, alias="logicOffset")
    start_offset: int = Field(0, alias="startOffset")
    end_offset: int = Field(-1, alias="endOffset")
    time_of_start: int = Field(-1, alias="timeOfStart")
    time_of_end: int = Field(-1, alias="timeOfEnd")

    def to_physical(self, logical: int) -> int:
        return logical - self.logic_offset + self.start_offset

    def to_logical(self, physical: int) -> int:
        """Strictly: an offset before the item's start is its first logical offset."""
        if physical < self.start_offset:
            return self.logic_offset
        return self.logic_offset + physical - self.start_offset

    def to_logical_loosely(self, physical: int) -> int:
        """As :meth:`to_logical`, -1 while the item's start is undecided, and never past its
        decided end."""
        if self.logic_offset < 0:
            return -1
        if physical < self.start_offset:
            return self.logic_offset
        if 0 <= self.start_offset <= self.end_offset < physical:
            return self.logic_offset + self.end_offset - self.start_offset
        return self.logic_offset + physical - self.start_offset

    @property
    def end_decided(self) -> bool:
        return self.end_offset > self.start_offset

    @property
    def max_logical(self) -> int:
        if self.end_offset >= self.start_offset:
            return self.logic_offset + self.end_offset - self.start_offset
        return self.logic_offset


class TopicQueueMappingInfo(Body):
    """What a broker registers for a static topic: the global ids it leads, by local id."""

    topic: str = ""
    scope: str = GLOBAL_SCOPE
    total_queues: int = Field(0, alias="totalQueues")
    bname: str = ""
    epoch: int = 0
    dirty: bool = False
    curr_id_map: dict[int, int] = Field(default_factory=dict, alias="currIdMap")


class TopicQueueMappingDetail(TopicQueueMappingInfo):
    """A broker's whole share of a static topic: every global queue whose history touches it."""

    hosted_queues: dict[int, list[LogicQueueMappingItem]] = Field(default_factory=dict, alias="hostedQueues")

    def info(self) -> TopicQueueMappingInfo:
        """The summary registered with the name servers (Apache leaves the scope default)."""
        return TopicQueueMappingInfo(
            topic=self.topic,
            total_queues=self.total_queues,
            bname=self.bname,
            epoch=self.epoch,
            curr_id_map={
                gid: items[-1].queue_id
                for gid, items in sorted(self.hosted_queues.items())
                if items and items[-1].bname == self.bname
            },
        )


class TopicConfigSerializeWrapper(Body):
    topic_config_table: dict[str, TopicConfig] = Field(default_factory=dict, alias="topicConfigTable")
    data_version: DataVersion = Field(default_factory=DataVersion, alias="dataVersion")
    #: RocketMQ 5: the static topics this broker leads queues of (registrations only).
    topic_queue_mapping_info_map: dict[str, TopicQueueMappingInfo] | None = Field(
        None, alias="topicQueueMappingInfoMap"
    )


class RegisterBrokerBody(Body):
    topic_config_serialize_wrapper: TopicConfigSerializeWrapper = Field(
        default_factory=TopicConfigSerializeWrapper, alias="topicConfigSerializeWrapper"
    )
    filter_server_list: list[str] = Field(default_factory=list, alias="filterServerList")

    def encode_compressed(self) -> bytes:
        """The zlib form a broker sends with ``compressed=true`` (docs/protocol.md §3.1)."""
        wrapper = self.topic_config_serialize_wrapper
        parts = []
        version = wrapper.data_version.encode()
        parts.append(struct.pack(">i", len(version)) + version)
        parts.append(struct.pack(">i", len(wrapper.topic_config_table)))
        for cfg in wrapper.topic_config_table.values():
            # Five fields: a 4.9 name server drops a line with RocketMQ 5's sixth (the
            # attributes, which no route carries anyway); a 5.x one reads either.
            line = (
                f"{cfg.topic_name} {cfg.read_queue_nums} {cfg.write_queue_nums} "
                f"{cfg.perm} {cfg.topic_filter_type}"
            ).encode()
            parts.append(struct.pack(">i", len(line)) + line)
        filters = fastjson.dumps(self.filter_server_list)
        parts.append(struct.pack(">i", len(filters)) + filters)
        return zlib.compress(b"".join(parts))

    @classmethod
    def decode_registration(cls, data: bytes, *, compressed: bool, broker_version: int = 0) -> Self:
        if not compressed:
            if not data:
                return cls()
            return cls.decode(data)
        try:
            raw = zlib.decompress(data)
        except zlib.error as exc:
            raise ProtocolError(f"compressed RegisterBrokerBody does not inflate: {exc}") from None
        reader = _Reader(raw)
        version = DataVersion.decode(reader.chunk())
        table: dict[str, dict[str, Any]] = {}
        for _ in range(reader.int()):
            chunk = reader.chunk()
            fields = chunk.split(b" ", 5)
            if len(fields) < 5:
                raise ProtocolError(f"bad compressed topic config line {chunk!r}")
            try:
                name = fields[0].decode()
                table[name] = {
                    "topicName": name,
                    "readQueueNums": int(fields[1]),
                    "writeQueueNums": int(fields[2]),
                    "perm": int(fields[3]),
                    "topicFilterType": fields[4].decode(),
                }
            except ValueError:  # UnicodeDecodeError is a ValueError too
                raise ProtocolError(f"bad compressed topic config line {chunk!r}") from None
            if len(fields) == 6 and fields[5]:
                table[name]["attributes"] = _attributes(fields[5])
        filters = fastjson.loads(reader.chunk()) if reader.remaining() else []
        wrapper: dict[str, Any] = {"topicConfigTable": table, "dataVersion": version}
        # RocketMQ 5 brokers (their version says so) end with the static topics' mappings.
        if broker_version >= _V5_0_0 and reader.remaining():
            mappings = [fastjson.loads(reader.chunk()) for _ in range(reader.int())]
            wrapper["topicQueueMappingInfoMap"] = {
                m.get("topic"): m for m in mappings if isinstance(m, dict) and m.get("topic")
            }
        # One validation of the whole table: 10,000 topics in a few tens of milliseconds.
        try:
            return cls.model_validate({"topicConfigSerializeWrapper": wrapper, "filter_server_list": filters})
        except ValidationError as exc:
            raise ProtocolError(f"bad compressed RegisterBrokerBody: {_first_error(exc)}") from None


def _attributes(raw: bytes) -> dict[str, str]:
    """A compressed registration line's attributes; like Apache, ones that do not parse (a
    space inside a key or value splits them) are dropped rather than failing the line."""
    try:
        parsed = fastjson.loads(raw)
    except ProtocolError:
        return {}
    if not isinstance(parsed, dict):
        return {}
    return {str(key): str(value) for key, value in parsed.items()}


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def int(self) -> int:
        if self.remaining() < 4:
            raise ProtocolError("compressed RegisterBrokerBody truncated")
        (value,) = struct.unpack_from(">i", self.data, self.pos)
        self.pos += 4
        return int(value)

    def chunk(self) -> bytes:
        size = self.int()
        if size < 0 or size > self.remaining():
            raise ProtocolError("compressed RegisterBrokerBody truncated")
        value = self.data[self.pos : self.pos + size]
        self.pos += size
        return value


class QueueData(Body):
    broker_name: str = Field(alias="brokerName")
    read_queue_nums: int = Field(alias="readQueueNums")
    write_queue_nums: int = Field(alias="writeQueueNums")
    perm: int
    # Java <= 4.8 spells it "topicSynFlag".
    topic_sys_flag: int = Field(
        0,
        alias="topicSysFlag",
        validation_alias=AliasChoices("topicSysFlag", "topicSynFlag", "topic_sys_flag"),
    )


def _int_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {int(k): v for k, v in value.items()}
    return value


class BrokerData(Body):
    cluster: str
    broker_name: str = Field(alias="brokerName")
    broker_addrs: Annotated[dict[int, str], BeforeValidator(_int_keys)] = Field(
        default_factory=dict, alias="brokerAddrs"
    )

    def master_addr(self) -> str | None:
        return self.broker_addrs.get(0)

    def to_wire(self) -> dict[str, Any]:
        # brokerAddrs keeps int keys so the legacy writer can leave them unquoted.
        return {
            "brokerAddrs": dict(sorted(self.broker_addrs.items())),
            "brokerName": self.broker_name,
            "cluster": self.cluster,
        }


#: The name-server KV namespace of ordered topics: topic -> its ``orderTopicConf``.
ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


def parse_order_topic_conf(text: str) -> dict[str, int]:
    """An ``orderTopicConf`` (``brokerName:queues;...``) -> {broker name: queue count}, in
    the text's order; malformed items are skipped."""
    queue_nums: dict[str, int] = {}
    for item in text.split(";"):
        name, _, count = item.partition(":")
        if name and count.isdigit():
            queue_nums[name] = int(count)
    return queue_nums


def format_order_topic_conf(queue_nums: Mapping[str, int]) -> str:
    """{broker name: queue count} -> ``brokerName:queues;...``."""
    return ";".join(f"{name}:{count}" for name, count in queue_nums.items())


class TopicRouteData(Body):
    order_topic_conf: str | None = Field(None, alias="orderTopicConf")
    queue_datas: list[QueueData] = Field(default_factory=list, alias="queueDatas")
    broker_datas: list[BrokerData] = Field(default_factory=list, alias="brokerDatas")
    filter_server_table: dict[str, list[str]] = Field(default_factory=dict, alias="filterServerTable")
    #: RocketMQ 5 static topics: each broker's mapping summary, by broker name.
    topic_queue_mapping_by_broker: dict[str, TopicQueueMappingInfo] | None = Field(
        None, alias="topicQueueMappingByBroker"
    )

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "brokerDatas": [b.to_wire() for b in self.broker_datas],
            "filterServerTable": self.filter_server_table,
        }
        if self.order_topic_conf:
            wire["orderTopicConf"] = self.order_topic_conf
        wire["queueDatas"] = [q.to_wire() for q in self.queue_datas]
        if self.topic_queue_mapping_by_broker:
            wire["topicQueueMappingByBroker"] = {
                name: info.to_wire() for name, info in sorted(self.topic_queue_mapping_by_broker.items())
            }
        return wire

    def encode(self, *, standard_json: bool = True) -> bytes:
        """Standard JSON for clients at V4_9_4 or later, bare integer broker-id keys before."""
        return fastjson.dumps(self.to_wire(), legacy_int_keys=not standard_json)


class ClusterInfo(Body):
    broker_addr_table: dict[str, BrokerData] = Field(default_factory=dict, alias="brokerAddrTable")
    cluster_addr_table: dict[str, list[str]] = Field(default_factory=dict, alias="clusterAddrTable")

    def to_wire(self) -> dict[str, Any]:
        return {
            "brokerAddrTable": {name: b.to_wire() for name, b in self.broker_addr_table.items()},
            "clusterAddrTable": self.cluster_addr_table,
        }

    def encode(self, *, standard_json: bool = False) -> bytes:
        return fastjson.dumps(self.to_wire(), legacy_int_keys=not standard_json)


class KVTable(Body):
    table: dict[str, str] = Field(default_factory=dict)


class TopicList(Body):
    topic_list: list[str] = Field(default_factory=list, alias="topicList")
    broker_addr: str | None = Field(None, alias="brokerAddr")


class BrokerMemberGroup(Body):
    """The addresses of one broker name (a master and its slaves), by broker id."""

    cluster: str | None = None
    broker_name: str | None = Field(None, alias="brokerName")
    broker_addrs: Annotated[dict[int, str], BeforeValidator(_int_keys)] = Field(
        default_factory=dict, alias="brokerAddrs"
    )

    def to_wire(self) -> dict[str, Any]:
        # brokerAddrs keeps int keys so the legacy writer can leave them unquoted.
        wire: dict[str, Any] = {"brokerAddrs": dict(sorted(self.broker_addrs.items()))}
        if self.broker_name is not None:
            wire["brokerName"] = self.broker_name
        if self.cluster is not None:
            wire["cluster"] = self.cluster
        return wire


class GetBrokerMemberGroupResponseBody(Body):
    """GET_BROKER_MEMBER_GROUP's answer (RocketMQ 5)."""

    broker_member_group: BrokerMemberGroup | None = Field(None, alias="brokerMemberGroup")

    def to_wire(self) -> dict[str, Any]:
        if self.broker_member_group is None:
            return {}
        return {"brokerMemberGroup": self.broker_member_group.to_wire()}

    def encode(self, *, standard_json: bool = False) -> bytes:
        """Broker-id keys unquoted by default, as fastjson writes them."""
        return fastjson.dumps(self.to_wire(), legacy_int_keys=not standard_json)


# -- clients --------------------------------------------------------------------------------


def _sub_version(value: Any) -> Any:
    if isinstance(value, str):
        return int(value.strip() or 0)
    return value


class SubscriptionData(Body):
    class_filter_mode: bool = Field(False, alias="classFilterMode")
    topic: str
    sub_string: str = Field("*", alias="subString")
    tags_set: list[str] = Field(default_factory=list, alias="tagsSet")
    code_set: list[int] = Field(default_factory=list, alias="codeSet")
    sub_version: Annotated[int, BeforeValidator(_sub_version)] = Field(0, alias="subVersion")
    expression_type: str = Field("TAG", alias="expressionType")


class ConsumerData(Body):
    group_name: str = Field(alias="groupName")
    consume_type: Annotated[ConsumeType, _enum_by_name_or_ordinal(ConsumeType)] = Field(
        ConsumeType.CONSUME_PASSIVELY, alias="consumeType"
    )
    message_model: Annotated[MessageModel, _enum_by_name_or_ordinal(MessageModel)] = Field(
        MessageModel.CLUSTERING, alias="messageModel"
    )
    consume_from_where: Annotated[ConsumeFromWhere, _enum_by_name_or_ordinal(ConsumeFromWhere)] = Field(
        ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, alias="consumeFromWhere"
    )
    subscription_data_set: list[SubscriptionData] = Field(default_factory=list, alias="subscriptionDataSet")
    unit_mode: bool = Field(False, alias="unitMode")


class ProducerData(Body):
    group_name: str = Field(alias="groupName")


class HeartbeatData(Body):
    client_id: str = Field(alias="clientID")
    producer_data_set: list[ProducerData] = Field(default_factory=list, alias="producerDataSet")
    consumer_data_set: list[ConsumerData] = Field(default_factory=list, alias="consumerDataSet")


class MessageQueue(BaseModel):
    """A queue: topic, broker name, queue id. Hashable and ordered (topic, broker, id)."""

    model_config = ConfigDict(populate_by_name=True, frozen=True)

    topic: str
    broker_name: str = Field(alias="brokerName")
    queue_id: int = Field(alias="queueId")

    def _key(self) -> tuple[str, str, int]:
        return (self.topic, self.broker_name, self.queue_id)

    def __lt__(self, other: MessageQueue) -> bool:
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MessageQueue) and self._key() == other._key()

    def __repr__(self) -> str:
        return f"MessageQueue({self.topic!r}, {self.broker_name!r}, {self.queue_id})"

    def to_wire(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}


class LockBatchRequestBody(Body):
    consumer_group: str = Field(alias="consumerGroup")
    client_id: str = Field(alias="clientId")
    only_this_broker: bool = Field(False, alias="onlyThisBroker")
    mq_set: list[MessageQueue] = Field(default_factory=list, alias="mqSet")


class LockBatchResponseBody(Body):
    lock_ok_mq_set: list[MessageQueue] = Field(default_factory=list, alias="lockOKMQSet")


class UnlockBatchRequestBody(Body):
    consumer_group: str = Field(alias="consumerGroup")
    client_id: str = Field(alias="clientId")
    only_this_broker: bool = Field(False, alias="onlyThisBroker")
    mq_set: list[MessageQueue] = Field(default_factory=list, alias="mqSet")


class GetConsumerListByGroupResponseBody(Body):
    consumer_id_list: list[str] = Field(default_factory=list, alias="consumerIdList")


class CheckClientRequestBody(Body):
    client_id: str = Field("", alias="clientId")
    group: str = ""
    subscription_data: SubscriptionData | None = Field(None, alias="subscriptionData")


# -- broker administration ------------------------------------------------------------------


class SubscriptionGroupConfig(Body):
    group_name: str = Field(alias="groupName")
    consume_enable: bool = Field(True, alias="consumeEnable")
    consume_from_min_enable: bool = Field(True, alias="consumeFromMinEnable")
    consume_broadcast_enable: bool = Field(True, alias="consumeBroadcastEnable")
    retry_queue_nums: int = Field(1, alias="retryQueueNums")
    retry_max_times: int = Field(16, alias="retryMaxTimes")
    broker_id: int = Field(0, alias="brokerId")
    which_broker_when_consume_slowly: int = Field(1, alias="whichBrokerWhenConsumeSlowly")
    notify_consumer_ids_changed_enable: bool = Field(True, alias="notifyConsumerIdsChangedEnable")
    #: RocketMQ 5: the group consumes in order (5.x clients of the group are FIFO consumers).
    consume_message_orderly: bool = Field(False, alias="consumeMessageOrderly")
    #: RocketMQ 5 keeps an attribute map per group too (it defines no attribute yet).
    attributes: dict[str, str] = Field(default_factory=dict)


class SubscriptionGroupWrapper(Body):
    subscription_group_table: dict[str, SubscriptionGroupConfig] = Field(
        default_factory=dict, alias="subscriptionGroupTable"
    )
    #: RocketMQ 5: per group and topic, bits of what the group may not do (bit 2: read).
    forbidden_table: dict[str, dict[str, int]] = Field(default_factory=dict, alias="forbiddenTable")
    data_version: DataVersion = Field(default_factory=DataVersion, alias="dataVersion")


class TopicOffset(Body):
    min_offset: int = Field(0, alias="minOffset")
    max_offset: int = Field(0, alias="maxOffset")
    last_update_timestamp: int = Field(0, alias="lastUpdateTimestamp")


class OffsetWrapper(Body):
    broker_offset: int = Field(0, alias="brokerOffset")
    consumer_offset: int = Field(0, alias="consumerOffset")
    #: RocketMQ 5: how far the group's pulls have reached (its tools print pull - consumer as
    #: in flight); None from 4.x brokers.
    pull_offset: int | None = Field(None, alias="pullOffset")
    last_timestamp: int = Field(0, alias="lastTimestamp")


def _queue_keyed(value: Any) -> Any:
    """fastjson writes MessageQueue-keyed maps with object keys, which :mod:`fastjson` turns
    into their JSON text; accept that, queue objects, or a list of ``[queue, value]`` pairs."""
    if isinstance(value, dict):
        return {
            MessageQueue.model_validate(json.loads(k)) if isinstance(k, str) else k: v
            for k, v in value.items()
        }
    if isinstance(value, list):
        try:
            return {MessageQueue.model_validate(k) if isinstance(k, dict) else k: v for k, v in value}
        except TypeError:  # an element that is not a [queue, value] pair
            raise ValueError("offsetTable pairs must be [queue, value]") from None
    return value


def queue_map_json(table: Mapping[MessageQueue, int]) -> bytes:
    """A MessageQueue-keyed map of numbers as fastjson writes it (the keys bare objects), as
    GET_CONSUMER_STATUS_FROM_CLIENT's ``messageQueueTable`` carries it."""
    pairs = [fastjson.dumps(mq.to_wire()) + b":" + str(int(v)).encode() for mq, v in sorted(table.items())]
    return b"{" + b",".join(pairs) + b"}"


class _QueueKeyedBody(Body):
    """A body whose ``offsetTable`` maps MessageQueue -> value, written fastjson style."""

    def _table_to_wire(self, table: dict[MessageQueue, Any]) -> list[tuple[MessageQueue, Any]]:
        return sorted(table.items())

    def encode(self) -> bytes:
        # fastjson writes object keys bare: {{"brokerName":..,"queueId":..,"topic":..}:{...}}
        data = self.to_wire()
        table = data.pop("offsetTable")
        parts = []
        for mq, value in self._table_to_wire(table):
            parts.append(fastjson.dumps(mq.to_wire()) + b":" + fastjson.dumps(_wire(value)))
        rest = fastjson.dumps(data)
        inner = b"{" + b",".join(parts) + b"}"
        if rest == b"{}":
            return b'{"offsetTable":' + inner + b"}"
        return rest[:-1] + b',"offsetTable":' + inner + b"}"

    def to_wire(self) -> dict[str, Any]:
        data = self.model_dump(by_alias=True, exclude_none=True, exclude={"offset_table"}, mode="json")
        data["offsetTable"] = self.offset_table  # type: ignore[attr-defined]
        return data


def _wire(value: Any) -> Any:
    return value.to_wire() if isinstance(value, Body) else value


class TopicStatsTable(_QueueKeyedBody):
    offset_table: Annotated[dict[MessageQueue, TopicOffset], BeforeValidator(_queue_keyed)] = Field(
        default_factory=dict, alias="offsetTable"
    )


class ConsumeStats(_QueueKeyedBody):
    offset_table: Annotated[dict[MessageQueue, OffsetWrapper], BeforeValidator(_queue_keyed)] = Field(
        default_factory=dict, alias="offsetTable"
    )
    consume_tps: float = Field(0.0, alias="consumeTps")

    def diff_total(self) -> int:
        return sum(max(0, w.broker_offset - w.consumer_offset) for w in self.offset_table.values())


class ResetOffsetBody(_QueueKeyedBody):
    offset_table: Annotated[dict[MessageQueue, int], BeforeValidator(_queue_keyed)] = Field(
        default_factory=dict, alias="offsetTable"
    )


class ConnectionInfo(Body):
    client_id: str = Field(alias="clientId")
    client_addr: str = Field("", alias="clientAddr")
    language: str = "OTHER"
    version: int = 0


class ConsumerConnection(Body):
    connection_set: list[ConnectionInfo] = Field(default_factory=list, alias="connectionSet")
    subscription_table: dict[str, SubscriptionData] = Field(default_factory=dict, alias="subscriptionTable")
    consume_type: Annotated[ConsumeType, _enum_by_name_or_ordinal(ConsumeType)] | None = Field(
        None, alias="consumeType"
    )
    message_model: Annotated[MessageModel, _enum_by_name_or_ordinal(MessageModel)] | None = Field(
        None, alias="messageModel"
    )
    consume_from_where: Annotated[ConsumeFromWhere, _enum_by_name_or_ordinal(ConsumeFromWhere)] | None = (
        Field(None, alias="consumeFromWhere")
    )


class ProducerConnection(Body):
    connection_set: list[ConnectionInfo] = Field(default_factory=list, alias="connectionSet")


class GroupList(Body):
    group_list: list[str] = Field(default_factory=list, alias="groupList")


class CreateTopicListBody(Body):
    """UPDATE_AND_CREATE_TOPIC_LIST's body (RocketMQ 5)."""

    topic_config_list: list[TopicConfig] = Field(default_factory=list, alias="topicConfigList")


class SubscriptionGroupList(Body):
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST's body (RocketMQ 5)."""

    group_config_list: list[SubscriptionGroupConfig] = Field(default_factory=list, alias="groupConfigList")


class ConsumerOffsetTable(Body):
    """``consumerOffset.json`` / GET_ALL_CONSUMER_OFFSET: ``topic@group`` -> queue id -> offset."""

    offset_table: dict[str, Annotated[dict[int, int], BeforeValidator(_int_keys)]] = Field(
        default_factory=dict, alias="offsetTable"
    )

    def encode(self) -> bytes:
        return fastjson.dumps(
            {"offsetTable": {k: dict(sorted(v.items())) for k, v in self.offset_table.items()}},
            legacy_int_keys=True,
        )


class DelayOffsetTable(Body):
    """``delayOffset.json`` / GET_ALL_DELAY_OFFSET: delay level -> offset."""

    offset_table: Annotated[dict[int, int], BeforeValidator(_int_keys)] = Field(
        default_factory=dict, alias="offsetTable"
    )

    def encode(self) -> bytes:
        return fastjson.dumps({"offsetTable": dict(sorted(self.offset_table.items()))}, legacy_int_keys=True)
