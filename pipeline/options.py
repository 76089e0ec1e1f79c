"""The options of the ``rocketmq`` source and sink: parsed and checked once, on the driver,
into typed settings, so bad input fails when the query starts with an error that names the
option and the problem.

Spark hands a data source its options as a case-insensitive mapping of strings; the classes
here are plain picklable dataclasses that travel to the executors with the partitions. The
read options follow Spark's Kafka source (``subscribe``, ``subscribePattern``, ``assign``,
per-queue offsets JSON, ``maxOffsetsPerTrigger``, ...), with RocketMQ's queue, a broker name
and a queue id, where Kafka has a partition number.

The connector's errors live here too, with :func:`one_line_errors`, which makes them reach
the user as one line rather than at the bottom of a traceback.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, ParamSpec, TypeVar, cast

from aiorocketmq.client.client_instance import ClientOptions
from aiorocketmq.client.credentials import resolve_credentials
from aiorocketmq.protocol.names import SUBSCRIBE_ALL, TAG_SEPARATOR, group_name_problem, topic_name_problem
from aiorocketmq.protocol.sql92 import EXPRESSION_TYPE_SQL92, Sql92Error, compile_sql92

#: Offsets in the JSON of ``startingOffsets`` / ``endingOffsets`` with a special meaning
#: (Kafka's convention).
EARLIEST = -2
LATEST = -1

#: Offsets keyed by broker name, then queue id (queue ids as JSON object keys are strings).
BrokerOffsets = dict[str, dict[int, int]]
#: Offsets keyed by topic, then broker name, then queue id: Kafka's per-partition JSON
#: (``{"topic": {"partition": offset}}``) with RocketMQ's queue, which a broker name and a
#: queue id identify together.
TopicOffsets = dict[str, BrokerOffsets]
#: ``assign``'s queues: topic -> broker name -> queue ids.
AssignedQueues = dict[str, dict[str, tuple[int, ...]]]

_SPARK_KEYS = frozenset({"path", "checkpointlocation", "queryname"})

#: The options that say what a read covers; a read gives exactly one of them (Kafka's
#: ``subscribe``, ``subscribePattern`` and ``assign``, and this source's single ``topic``).
SUBSCRIPTION_OPTIONS = ("topic", "subscribe", "subscribePattern", "assign")

#: Kafka's name -> the RocketMQ-named option with the same meaning. Either spelling works;
#: both given must agree.
KAFKA_ALIASES = {
    "maxOffsetsPerTrigger": "maxMessagesPerTrigger",
    "maxRecordsPerPartition": "maxMessagesPerPartition",
}

_ASSIGN_EXAMPLE = '{"Orders": {"broker-a": [0, 1], "broker-b": [0]}}'
_OFFSETS_EXAMPLE = '{"Orders": {"broker-a": {"0": 42, "1": -2}}}'

READ_OPTIONS = {
    "namesrv": "name server address(es), 'host:port[;host:port]' (required)",
    "topic": "one topic to read (or give subscribe, subscribePattern or assign)",
    "subscribe": "comma-separated topics to read",
    "subscribePattern": "regular expression a whole topic name matches; re-resolved every micro-batch",
    "assign": f"queues to read, JSON {_ASSIGN_EXAMPLE}",
    "startingOffsets": f"'earliest', 'latest' or JSON {_OFFSETS_EXAMPLE} (one topic: {{\"broker\": ...}})",
    "endingOffsets": "batch only: 'latest' or JSON as startingOffsets",
    "startingTimestamp": "start each queue at the first message stored at or after this time (ms)",
    "tags": "subscription expression, e.g. 'paid || refunded' (default '*')",
    "maxMessagesPerPartition": "split a queue range into Spark partitions of at most this many offsets",
    "maxRecordsPerPartition": "Kafka's name for maxMessagesPerPartition",
    "minPartitions": "split the queue ranges into at least about this many Spark partitions",
    "maxMessagesPerTrigger": "streaming only: at most this many offsets per micro-batch",
    "maxOffsetsPerTrigger": "Kafka's name for maxMessagesPerTrigger",
    "failOnDataLoss": "'true' (default) or 'false': fail when offsets were deleted by retention",
    "includeHeaders": "'true' or 'false' (default): add a 'headers' column, the properties as key/value pairs",
    "consumerGroup": "streaming only: group whose offsets the stream's commits update",
    "pullBatchSize": "messages asked for per pull request (default 32)",
    "accessKey": "ACL access key: sign every request (with secretKey)",
    "secretKey": "ACL secret key (with accessKey)",
    "securityToken": "ACL security token of the account (with accessKey)",
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
    "securityToken": "ACL security token of the account (with accessKey)",
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


#: The errors whose one-line message says all a user needs: bad input or the state of the
#: data, never a bug of ours (whose traceback matters).
CONNECTOR_ERRORS = (RocketMQOptionError, DataLossError, RocketMQWriteError)

P = ParamSpec("P")
R = TypeVar("R")


def one_line_errors(method: Callable[P, R]) -> Callable[P, R]:
    """Let our own errors reach the user as their one-line message, not at the bottom of a
    traceback of our internals.

    PySpark runs a data source's methods in Python worker processes and hands the JVM the
    error as text, which becomes the message of the ``AnalysisException``,
    ``StreamingQueryException`` or task failure the user sees. That text is the whole
    traceback, unless ``SPARK_HIDE_TRACEBACK`` is set in the worker's environment (what
    ``spark.sql.execution.pyspark.udf.hideTraceback.enabled`` sets for every worker), in which
    case it is only ``Class: message``. A worker exits after reporting an error, so setting
    the variable as one of our errors leaves a data-source method affects that one report:
    other errors, of other sources and of user code, keep their tracebacks. Outside a PySpark
    worker (a test calling the method directly) nothing is changed."""

    if inspect.isgeneratorfunction(method):
        # A read's errors come while Spark iterates the rows, not when it calls read().
        @functools.wraps(method)
        def rows(*args: P.args, **kwargs: P.kwargs) -> Any:
            try:
                return (yield from cast(Iterator[Any], method(*args, **kwargs)))
            except CONNECTOR_ERRORS:
                _hide_traceback()
                raise

        return cast(Callable[P, R], rows)

    @functools.wraps(method)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except CONNECTOR_ERRORS:
            _hide_traceback()
            raise

    return call


def _hide_traceback() -> None:
    if _in_pyspark_worker():
        os.environ["SPARK_HIDE_TRACEBACK"] = "1"


def _in_pyspark_worker() -> bool:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return spec is not None and str(spec.name).startswith("pyspark.")


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
    return None if raw is None else _positive_int_value(name, raw)


def _positive_int_value(name: str, raw: str) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise RocketMQOptionError(name, f"{raw!r} is not an integer") from None
    if value <= 0:
        raise RocketMQOptionError(name, f"must be positive, got {value}")
    return value


def _aliased(given: dict[str, str], kafka: str) -> tuple[str, str] | None:
    """The option given under Kafka's name or ours (see :data:`KAFKA_ALIASES`), as the name the
    user wrote and its value; both names with different values are an error."""
    ours = KAFKA_ALIASES[kafka]
    mine, theirs = given.get(ours.lower()), given.get(kafka.lower())
    if mine is not None and theirs is not None and mine.strip() != theirs.strip():
        raise RocketMQOptionError(
            kafka, f"is Kafka's name for {ours}, and the two disagree ({theirs!r} vs {mine!r}); give one"
        )
    if theirs is not None:
        return kafka, theirs
    return None if mine is None else (ours, mine)


def _bool(given: dict[str, str], name: str, default: bool) -> bool:
    raw = given.get(name.lower())
    if raw is None:
        return default
    text = raw.strip().lower()
    if text not in ("true", "false"):
        raise RocketMQOptionError(name, f"{raw!r} is not 'true' or 'false'")
    return text == "true"


def _json_object(name: str, raw: str, example: str, what: str) -> dict[str, object]:
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise RocketMQOptionError(
            name, f"is not valid JSON ({exc.msg} at column {exc.colno}); expected e.g. {example}"
        ) from None
    if not isinstance(parsed, dict) or not parsed:
        raise RocketMQOptionError(name, f"JSON must be a non-empty object of {what}, e.g. {example}")
    return parsed


@dataclass(frozen=True)
class Subscription:
    """What a read covers, from exactly one of :data:`SUBSCRIPTION_OPTIONS`: fixed topics
    (``topic``, ``subscribe``), the topics a pattern matches when asked (``subscribePattern``),
    or fixed queues (``assign``)."""

    #: The option that set it, named in errors about the topics.
    option: str
    topics: tuple[str, ...] = ()
    pattern: re.Pattern[str] | None = None
    queues: AssignedQueues | None = None

    def describe(self) -> str:
        if self.pattern is not None:
            return f"topics matching {self.pattern.pattern!r}"
        return ", ".join(repr(t) for t in self.topics)


def parse_subscription(given: dict[str, str]) -> Subscription:
    named = [name for name in SUBSCRIPTION_OPTIONS if given.get(name.lower(), "").strip()]
    if not named:
        raise RocketMQOptionError("topic", "is required (or one of subscribe, subscribePattern, assign)")
    if len(named) > 1:
        raise RocketMQOptionError(
            named[1], f"give one of topic, subscribe, subscribePattern, assign, not {' and '.join(named)}"
        )
    option = named[0]
    raw = given[option.lower()].strip()
    if option == "topic":
        return Subscription(option, topics=(check_topic(raw),))
    if option == "subscribe":
        topics = [check_topic(t.strip(), option) for t in raw.split(",") if t.strip()]
        if not topics:
            raise RocketMQOptionError(option, f"{raw!r} names no topic; give comma-separated topics")
        return Subscription(option, topics=tuple(dict.fromkeys(topics)))
    if option == "subscribePattern":
        try:
            pattern = re.compile(raw)
        except re.error as exc:
            raise RocketMQOptionError(option, f"{raw!r} is not a regular expression: {exc}") from None
        return Subscription(option, pattern=pattern)
    queues = parse_assign(raw)
    return Subscription(option, topics=tuple(queues), queues=queues)


def parse_assign(raw: str) -> AssignedQueues:
    """``assign``'s JSON: topic -> broker name -> queue ids. Kafka's ``{"topic": [0, 1]}`` has
    no broker level; a RocketMQ queue id means nothing without its broker."""
    name = "assign"
    parsed = _json_object(name, raw, _ASSIGN_EXAMPLE, "topic -> broker -> queue ids")
    result: AssignedQueues = {}
    for topic, brokers in parsed.items():
        check_topic(topic, name)
        if not isinstance(brokers, dict) or not brokers:
            raise RocketMQOptionError(
                name,
                f"topic {topic!r} must map to an object of broker name -> queue ids (a RocketMQ queue "
                f"is a broker's queue), e.g. {_ASSIGN_EXAMPLE}",
            )
        per_broker: dict[str, tuple[int, ...]] = {}
        for broker, ids in brokers.items():
            if (
                not isinstance(ids, list)
                or not ids
                or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids)
            ):
                raise RocketMQOptionError(
                    name,
                    f"broker {broker!r} of topic {topic!r} must map to a non-empty list of queue ids "
                    f"(integers >= 0), got {json.dumps(ids)}",
                )
            per_broker[str(broker)] = tuple(sorted(set(ids)))
        result[topic] = per_broker
    return result


def parse_offsets(
    name: str, raw: str, *, allow_earliest: bool, topics: tuple[str, ...] | None = None
) -> Literal["earliest", "latest"] | TopicOffsets:
    """``earliest`` / ``latest`` or the JSON form, checked: topic -> broker name -> queue id ->
    offset (``-2`` earliest, ``-1`` latest). ``topics`` are the topics the read covers (None:
    not known yet, a pattern); with exactly one, the topic level may be left out, as in
    ``{"broker-a": {"0": 42}}``."""
    text = raw.strip()
    if text.lower() == "latest":
        return "latest"
    if text.lower() == "earliest":
        if not allow_earliest:
            raise RocketMQOptionError(name, "'earliest' is not allowed here")
        return "earliest"
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RocketMQOptionError(
            name,
            f"is neither 'earliest', 'latest' nor valid JSON ({exc.msg} at column {exc.colno}); "
            f"expected e.g. {_OFFSETS_EXAMPLE}",
        ) from None
    if not isinstance(parsed, dict) or not parsed:
        raise RocketMQOptionError(
            name,
            f"JSON must be a non-empty object of topic -> broker -> queue id -> offset, e.g. {_OFFSETS_EXAMPLE}",
        )
    by_topic = all(
        isinstance(brokers, dict) and brokers and all(isinstance(q, dict) for q in brokers.values())
        for brokers in parsed.values()
    )
    if not by_topic:
        if topics is None or len(topics) != 1:
            raise RocketMQOptionError(
                name,
                f"reads of several topics (or a pattern) name the topic of each queue, e.g. {_OFFSETS_EXAMPLE}",
            )
        return {topics[0]: _broker_offsets(name, parsed, allow_earliest=allow_earliest)}
    result: TopicOffsets = {}
    for topic, brokers in parsed.items():
        if topics is not None and topic not in topics:
            covered = ", ".join(repr(t) for t in topics)
            raise RocketMQOptionError(
                name, f"names topic {topic!r}, which the read does not cover ({covered})"
            )
        assert isinstance(brokers, dict)
        result[topic] = _broker_offsets(name, brokers, allow_earliest=allow_earliest)
    return result


def _broker_offsets(name: str, parsed: Mapping[str, object], *, allow_earliest: bool) -> BrokerOffsets:
    example = '{"broker-a": {"0": 42, "1": -2}}'
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
    security_token: str | None = field(default=None, repr=False)
    tls: bool = False
    tls_ca_file: str | None = None
    tls_verify: bool = True

    @classmethod
    def parse(cls, given: dict[str, str]) -> Security:
        """The options' credentials, key by key, else the driver's environment, as the tools
        read it (``$ROCKETMQ_ACCESS_KEY``, ``$ROCKETMQ_SECRET_KEY``, ``$ROCKETMQ_SECURITY_TOKEN``)."""
        access_key = given.get("accesskey", "").strip() or None
        secret_key = given.get("secretkey", "").strip() or None
        try:
            credentials = resolve_credentials(access_key, secret_key)
        except ValueError as exc:
            missing = "secretKey" if access_key and not secret_key else "accessKey"
            raise RocketMQOptionError(missing, f"accessKey and secretKey go together: {exc}") from None
        token = given.get("securitytoken", "").strip() or None
        if token and credentials is None:
            raise RocketMQOptionError("securityToken", "goes with accessKey and secretKey")
        return cls(
            access_key=credentials.access_key if credentials else None,
            secret_key=credentials.secret_key if credentials else None,
            security_token=token or (credentials.security_token if credentials else None),
            tls=_bool(given, "tls", False),
            tls_ca_file=given.get("tlscafile", "").strip() or None,
            tls_verify=_bool(given, "tlsVerify", True),
        )

    def client_options(self) -> ClientOptions:
        return ClientOptions(
            access_key=self.access_key,
            secret_key=self.secret_key,
            security_token=self.security_token,
            tls=self.tls,
            tls_ca_file=self.tls_ca_file,
            tls_verify=self.tls_verify,
        )


@dataclass(frozen=True)
class ReadOptions:
    """What a read needs, checked. ``starting`` / ``ending`` are ``"earliest"``, ``"latest"``,
    per-queue offsets by topic, or (``starting`` only) a timestamp in milliseconds."""

    namesrv: str
    subscription: Subscription
    starting: Literal["earliest", "latest"] | TopicOffsets | int
    ending: Literal["latest"] | TopicOffsets
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
    min_partitions: int | None = None
    include_headers: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool | None) -> ReadOptions:
        """Check ``options`` for a batch read, a stream, or (``streaming=None``, when Spark asks
        for the schema and the kind of query is not known yet) either."""
        given = _lookup(options)
        _check_known(given, READ_OPTIONS, "source")
        namesrv = check_namesrv(_required(given, "namesrv"))
        subscription = parse_subscription(given)
        topics = None if subscription.pattern is not None else subscription.topics

        starting: Literal["earliest", "latest"] | TopicOffsets | int
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
            starting = parse_offsets("startingOffsets", raw_start, allow_earliest=True, topics=topics)
        else:
            starting = "latest" if streaming else "earliest"

        ending: Literal["latest"] | TopicOffsets = "latest"
        raw_end = given.get("endingoffsets")
        if raw_end is not None:
            if streaming is True:
                raise RocketMQOptionError("endingOffsets", "is for batch reads only; a stream has no end")
            parsed_end = parse_offsets("endingOffsets", raw_end, allow_earliest=False, topics=topics)
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
        per_partition = _aliased(given, "maxRecordsPerPartition")
        max_per_partition = None if per_partition is None else _positive_int_value(*per_partition)
        per_trigger = _aliased(given, "maxOffsetsPerTrigger")
        max_per_trigger = None
        if per_trigger is not None:
            max_per_trigger = _positive_int_value(*per_trigger)
            if streaming is False:
                raise RocketMQOptionError(per_trigger[0], "is for streaming reads only")
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
            subscription=subscription,
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
            min_partitions=_positive_int(given, "minPartitions"),
            include_headers=_bool(given, "includeHeaders", False),
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
