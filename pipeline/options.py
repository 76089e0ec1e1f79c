"""The options of the ``rocketmq`` source and sink: parsed and checked once, on the driver,
into typed settings, so bad input fails when the query starts with an error that names the
option and the problem.

Spark hands a data source its options as a case-insensitive mapping of strings; the classes
here are plain picklable dataclasses that travel to the executors with the partitions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from aiorocketmq.client.client_instance import ClientOptions
from aiorocketmq.protocol.names import SUBSCRIBE_ALL, TAG_SEPARATOR, group_name_problem, topic_name_problem
from aiorocketmq.protocol.sql92 import EXPRESSION_TYPE_SQL92, Sql92Error, compile_sql92

#: Offsets in the JSON of ``startingOffsets`` / ``endingOffsets`` with a special meaning
#: (Kafka's convention).
EARLIEST = -2
LATEST = -1

#: Offsets keyed by broker name, then queue id (queue ids as JSON object keys are strings).
BrokerOffsets = dict[str, dict[int, int]]

#: RocketMQ's consumer group / topic name characters.

_SPARK_KEYS = frozenset({"path", "checkpointlocation", "queryname"})

READ_OPTIONS = {
    "namesrv": "name server address(es), 'host:port[;host:port]' (required)",
    "topic": "topic to read (required)",
    "startingOffsets": "'earliest', 'latest' or JSON {\"broker\": {\"queueId\": offset}}",
    "endingOffsets": 'batch only: \'latest\' or JSON {"broker": {"queueId": offset}}',
    "startingTimestamp": "start each queue at the first message stored at or after this time (ms)",
    "tags": "subscription expression, e.g. 'paid || refunded' (default '*')",
    "maxMessagesPerPartition": "batch only: split a queue range into partitions of at most this many",
    "maxMessagesPerTrigger": "streaming only: at most this many messages per micro-batch",
    "failOnDataLoss": "'true' (default) or 'false': fail when offsets were deleted by retention",
    "consumerGroup": "streaming only: group whose offsets the stream's commits update",
    "pullBatchSize": "messages asked for per pull request (default 32)",
    "accessKey": "ACL access key: sign every request (with secretKey)",
    "secretKey": "ACL secret key (with accessKey)",
    "tls": "'true' or 'false' (default): TLS to the name servers and brokers",
    "tlsCaFile": "CA certificates to check the servers against (default: the system store)",
    "tlsVerify": "'true' (default) or 'false': check the servers' certificates",
    "sql": "SQL92 filter on message properties, evaluated by the broker (enablePropertyFilter); not with tags",
}

WRITE_OPTIONS = {
    "namesrv": "name server address(es) (required)",
    "topic": "topic for every row (overrides a 'topic' column)",
    "producerGroup": "producer group of the sink (default 'spark-rocketmq-sink')",
    "accessKey": "ACL access key: sign every request (with secretKey)",
    "secretKey": "ACL secret key (with accessKey)",
    "tls": "'true' or 'false' (default): TLS to the name servers and brokers",
    "tlsCaFile": "CA certificates to check the servers against (default: the system store)",
    "tlsVerify": "'true' (default) or 'false': check the servers' certificates",
}


class RocketMQOptionError(ValueError):
    """A ``rocketmq`` source or sink option is missing, malformed or refers to something that
    does not exist. The message names the option."""

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"rocketmq option '{option}': {problem}")
        self.option = option
        self.problem = problem


class RocketMQWriteError(RuntimeError):
    """A sink task could not send its rows."""


class DataLossError(RuntimeError):
    """Offsets the query must read are gone (deleted by retention) and ``failOnDataLoss`` is on."""


def _lookup(options: Mapping[str, str]) -> dict[str, str]:
    return {key.lower(): value for key, value in options.items() if value is not None}


def _check_known(given: dict[str, str], known: Mapping[str, str], what: str) -> None:
    allowed = {key.lower(): key for key in known}
    for key in given:
        if key not in allowed and key not in _SPARK_KEYS:
            names = ", ".join(sorted(known))
            raise RocketMQOptionError(key, f"unknown {what} option; the {what} knows {names}")


def _required(given: dict[str, str], name: str) -> str:
    value = given.get(name.lower(), "").strip()
    if not value:
        raise RocketMQOptionError(name, "is required")
    return value


def check_namesrv(value: str, option: str = "namesrv") -> str:
    for addr in value.replace(",", ";").split(";"):
        addr = addr.strip()
        host, sep, port = addr.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise RocketMQOptionError(option, f"{addr!r} is not a host:port address (value {value!r})")
    return value


def check_topic(value: str, option: str = "topic") -> str:
    if topic_name_problem(value) is not None:
        raise RocketMQOptionError(
            option, f"{value!r} is not a valid topic name (letters, digits, %|_- ; at most 127 characters)"
        )
    return value


def _positive_int(given: dict[str, str], name: str) -> int | None:
    raw = given.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise RocketMQOptionError(name, f"{raw!r} is not an integer") from None
    if value <= 0:
        raise RocketMQOptionError(name, f"must be positive, got {value}")
    return value


def _bool(given: dict[str, str], name: str, default: bool) -> bool:
    raw = given.get(name.lower())
    if raw is None:
        return default
    text = raw.strip().lower()
    if text not in ("true", "false"):
        raise RocketMQOptionError(name, f"{raw!r} is not 'true' or 'false'")
    return text == "true"


def parse_offsets(
    name: str, raw: str, *, allow_earliest: bool
) -> Literal["earliest", "latest"] | BrokerOffsets:
    """``earliest`` / ``latest`` or the JSON form, checked: broker names map to objects of
    queue id -> offset (``-2`` earliest, ``-1`` latest)."""
    text = raw.strip()
    if text.lower() == "latest":
        return "latest"
    if text.lower() == "earliest":
        if not allow_earliest:
            raise RocketMQOptionError(name, "'earliest' is not allowed here")
        return "earliest"
    example = '{"broker-a": {"0": 42, "1": -2}}'
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RocketMQOptionError(
            name,
            f"is neither 'earliest', 'latest' nor valid JSON ({exc.msg} at column {exc.colno}); "
            f"expected e.g. {example}",
        ) from None
    if not isinstance(parsed, dict) or not parsed:
        raise RocketMQOptionError(
            name, f"JSON must be a non-empty object of broker name -> queues, e.g. {example}"
        )
    result: BrokerOffsets = {}
    for broker, queues in parsed.items():
        if not isinstance(queues, dict) or not queues:
            raise RocketMQOptionError(
                name,
                f"broker {broker!r} must map to a non-empty object of queue id -> offset, e.g. {example}",
            )
        per_queue: dict[int, int] = {}
        for queue_id, offset in queues.items():
            if not str(queue_id).isdigit():
                raise RocketMQOptionError(name, f"queue id {queue_id!r} of broker {broker!r} is not a number")
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise RocketMQOptionError(
                    name, f"offset of broker {broker!r} queue {queue_id} must be an integer, got {offset!r}"
                )
            if offset < EARLIEST or (offset == EARLIEST and not allow_earliest):
                allowed = "-2 (earliest), -1 (latest) or" if allow_earliest else "-1 (latest) or"
                raise RocketMQOptionError(
                    name, f"offset {offset} of broker {broker!r} queue {queue_id} must be {allowed} >= 0"
                )
            per_queue[int(queue_id)] = offset
        result[str(broker)] = per_queue
    return result


@dataclass(frozen=True)
class Security:
    """ACL credentials and TLS, for every client a read or write starts (planner and tasks)."""

    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    tls: bool = False
    tls_ca_file: str | None = None
    tls_verify: bool = True

    @classmethod
    def parse(cls, given: dict[str, str]) -> Security:
        access_key = given.get("accesskey", "").strip() or None
        secret_key = given.get("secretkey", "").strip() or None
        if (access_key is None) != (secret_key is None):
            missing = "secretKey" if secret_key is None else "accessKey"
            raise RocketMQOptionError(missing, "accessKey and secretKey go together")
        return cls(
            access_key=access_key,
            secret_key=secret_key,
            tls=_bool(given, "tls", False),
            tls_ca_file=given.get("tlscafile", "").strip() or None,
            tls_verify=_bool(given, "tlsVerify", True),
        )

    def client_options(self) -> ClientOptions:
        return ClientOptions(
            access_key=self.access_key,
            secret_key=self.secret_key,
            tls=self.tls,
            tls_ca_file=self.tls_ca_file,
            tls_verify=self.tls_verify,
        )


@dataclass(frozen=True)
class ReadOptions:
    """What a read needs, checked. ``starting`` / ``ending`` are ``"earliest"``, ``"latest"``,
    per-queue offsets, or (``starting`` only) a timestamp in milliseconds."""

    namesrv: str
    topic: str
    starting: Literal["earliest", "latest"] | BrokerOffsets | int
    ending: Literal["latest"] | BrokerOffsets
    expression: str
    tags: frozenset[str] | None
    max_per_partition: int | None
    max_per_trigger: int | None
    fail_on_data_loss: bool
    consumer_group: str | None
    pull_batch_size: int
    security: Security = Security()
    #: ``"SQL92"`` when ``expression`` is the ``sql`` option, else ``"TAG"``.
    expression_type: str = "TAG"

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool | None) -> ReadOptions:
        """Check ``options`` for a batch read, a stream, or (``streaming=None``, when Spark asks
        for the schema and the kind of query is not known yet) either."""
        given = _lookup(options)
        _check_known(given, READ_OPTIONS, "source")
        namesrv = check_namesrv(_required(given, "namesrv"))
        topic = check_topic(_required(given, "topic"))

        starting: Literal["earliest", "latest"] | BrokerOffsets | int
        raw_start = given.get("startingoffsets")
        raw_time = given.get("startingtimestamp")
        if raw_start is not None and raw_time is not None:
            raise RocketMQOptionError(
                "startingTimestamp", "set either startingOffsets or startingTimestamp, not both"
            )
        if raw_time is not None:
            try:
                starting = int(raw_time.strip())
            except ValueError:
                raise RocketMQOptionError(
                    "startingTimestamp", f"{raw_time!r} is not milliseconds since the epoch"
                ) from None
            if starting < 0:
                raise RocketMQOptionError("startingTimestamp", f"must not be negative, got {starting}")
        elif raw_start is not None:
            starting = parse_offsets("startingOffsets", raw_start, allow_earliest=True)
        else:
            starting = "latest" if streaming else "earliest"

        ending: Literal["latest"] | BrokerOffsets = "latest"
        raw_end = given.get("endingoffsets")
        if raw_end is not None:
            if streaming is True:
                raise RocketMQOptionError("endingOffsets", "is for batch reads only; a stream has no end")
            parsed_end = parse_offsets("endingOffsets", raw_end, allow_earliest=False)
            assert parsed_end != "earliest"
            ending = parsed_end
        if streaming is False and starting == "latest":
            raise RocketMQOptionError(
                "startingOffsets", "'latest' makes an empty batch read; use it for streams"
            )

        expression, tags = parse_expression(given.get("tags", "*"))
        expression_type = "TAG"
        sql = given.get("sql")
        if sql is not None:
            if "tags" in given:
                raise RocketMQOptionError("sql", "set either tags or sql, not both")
            try:
                compile_sql92(sql)
            except Sql92Error as exc:
                raise RocketMQOptionError("sql", f"{sql!r} is not a valid SQL92 filter: {exc}") from None
            expression, tags, expression_type = sql, None, EXPRESSION_TYPE_SQL92
        max_per_partition = _positive_int(given, "maxMessagesPerPartition")
        max_per_trigger = _positive_int(given, "maxMessagesPerTrigger")
        if max_per_trigger is not None and streaming is False:
            raise RocketMQOptionError("maxMessagesPerTrigger", "is for streaming reads only")
        group = given.get("consumergroup")
        if group is not None:
            if streaming is False:
                raise RocketMQOptionError("consumerGroup", "is for streaming reads only")
            group = group.strip()
            if group_name_problem(group) is not None:
                raise RocketMQOptionError(
                    "consumerGroup", f"{group!r} is not a valid group name (letters, digits, %|_-)"
                )
        return cls(
            namesrv=namesrv,
            topic=topic,
            starting=starting,
            ending=ending,
            expression=expression,
            tags=tags,
            max_per_partition=max_per_partition,
            max_per_trigger=max_per_trigger,
            fail_on_data_loss=_bool(given, "failOnDataLoss", True),
            consumer_group=group,
            pull_batch_size=_positive_int(given, "pullBatchSize") or 32,
            security=Security.parse(given),
            expression_type=expression_type,
        )


def parse_expression(raw: str) -> tuple[str, frozenset[str] | None]:
    """A tag subscription expression (``*`` or ``a || b``): its normalised text and the exact
    tags it keeps (None for all)."""
    text = raw.strip()
    if text in ("", SUBSCRIBE_ALL):
        return SUBSCRIBE_ALL, None
    tags = frozenset(part.strip() for part in text.split(TAG_SEPARATOR))
    if "" in tags or SUBSCRIBE_ALL in tags:
        raise RocketMQOptionError("tags", f"{raw!r} is not '*' or tags joined by '||'")
    return f" {TAG_SEPARATOR} ".join(sorted(tags)), tags


@dataclass(frozen=True)
class WriteOptions:
    namesrv: str
    topic: str | None
    producer_group: str
    security: Security = Security()

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        given = _lookup(options)
        _check_known(given, WRITE_OPTIONS, "sink")
        namesrv = check_namesrv(_required(given, "namesrv"))
        topic = given.get("topic")
        if topic is not None:
            topic = check_topic(topic.strip())
        group = given.get("producergroup", "spark-rocketmq-sink").strip()
        if group_name_problem(group) is not None:
            raise RocketMQOptionError("producerGroup", f"{group!r} is not a valid group name")
        return cls(namesrv=namesrv, topic=topic, producer_group=group, security=Security.parse(given))
