"""RocketMQ's reserved names and naming rules, defined once for the broker, the SDK, the tools
and the Spark connector.

* system topics (``TBW102``, ``SCHEDULE_TOPIC_XXXX``, the transaction half and op topics, ...)
  and the topics clients may not send to;
* the ``%RETRY%`` and ``%DLQ%`` topics of a consumer group;
* what a valid topic or group name is (RocketMQ's character set; 127 characters for a topic,
  the record's one-byte topic length, 255 for a group);
* tag expressions (``"*"``, ``"tagA || tagB"``) and the tag hash codes they match.

The transaction bits of a message's ``sysFlag`` live with the other flag bits in
:mod:`aiorocketmq.protocol.codes` (``TRANSACTION_*``, :func:`~.codes.transaction_type`); a
message's own tag hash (:func:`~.message.tags_code`) beside the hash in
:mod:`aiorocketmq.protocol.message`.
"""

from __future__ import annotations

import re

from .message import MAX_TOPIC_LENGTH, java_hash

# -- system topics and groups --------------------------------------------------------------

#: The template topic a producer's first send to an unknown topic names (``defaultTopic``);
#: a broker with ``autoCreateTopicEnable`` creates the topic from it.
AUTO_CREATE_TOPIC = "TBW102"
#: Where messages with a delay level wait (queue ``level - 1``) until they are due.
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
#: Half (prepared) transactional messages wait here for their producer's decision ...
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
#: ... and each decision is recorded here (the body is the half message's queue offset).
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
BENCHMARK_TOPIC = "BenchmarkTest"
#: A master records each PULL_OFFSET_MOVED correction as a message here.
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"

#: Topics clients may never send to directly.
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {
        SCHEDULE_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)

#: Groups the broker itself uses start with this.
SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"
#: The group under which a broker records how far the half topic is settled.
TRANSACTION_GROUP = SYSTEM_GROUP_PREFIX + "TRANS"
#: The group tools pull as (offset lookups, message browsing); it never commits.
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"
#: Groups every broker keeps for itself and its tools.
SYSTEM_GROUPS = (
    TOOLS_CONSUMER_GROUP,
    "FILTERSRV_CONSUMER",
    "__MONITOR_CONSUMER",
    "CLIENT_INNER_PRODUCER",
    "SELF_TEST_P_GROUP",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
    "CID_ONSAPI_PULL",
    TRANSACTION_GROUP,
)

#: Groups whose pulls are the broker's or its tools' own (never flow-controlled).
_SYSTEM_PULL_GROUPS = frozenset({*SYSTEM_GROUPS, "DEFAULT_CONSUMER", "SCHEDULE_CONSUMER"}) - {
    "CLIENT_INNER_PRODUCER",
    "SELF_TEST_P_GROUP",
}


def is_system_group(group: str) -> bool:
    """Whether ``group`` pulls for the broker or its tools (RocketMQ's system consumer groups)."""
    return group in _SYSTEM_PULL_GROUPS or group.startswith(SYSTEM_GROUP_PREFIX)


# -- retry and dead-letter topics ----------------------------------------------------------

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"


def retry_topic(group: str) -> str:
    """Where a consumer group's failed messages come back from."""
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    """Where a consumer group's messages go once retried ``maxReconsumeTimes`` times."""
    return DLQ_PREFIX + group


def is_retry_topic(topic: str) -> bool:
    return topic.startswith(RETRY_PREFIX)


def is_dlq_topic(topic: str) -> bool:
    return topic.startswith(DLQ_PREFIX)


def group_of_retry_topic(topic: str) -> str:
    """The group of a ``%RETRY%group`` topic."""
    return topic[len(RETRY_PREFIX) :]


# -- names -----------------------------------------------------------------------------------

MAX_GROUP_LENGTH = 255
#: The characters RocketMQ allows in topic and group names.
VALID_NAME_PATTERN = "^[%|a-zA-Z0-9_-]+$"
_VALID_NAME = re.compile(VALID_NAME_PATTERN)


def _name_problem(kind: str, name: object, max_length: int) -> str | None:
    if not isinstance(name, str) or not name.strip():
        return f"the {kind} name is empty"
    if len(name) > max_length:
        return f"the {kind} name {name!r} is longer than {max_length} characters"
    if not _VALID_NAME.match(name):
        return (
            f"the {kind} name {name!r} contains characters other than letters, digits, '%', '|', '_' and '-'"
        )
    return None


def topic_name_problem(topic: object) -> str | None:
    """Why ``topic`` is not a valid topic name, or ``None`` when it is."""
    return _name_problem("topic", topic, MAX_TOPIC_LENGTH)


def group_name_problem(group: object) -> str | None:
    """Why ``group`` is not a valid producer or consumer group name, or ``None`` when it is."""
    return _name_problem("group", group, MAX_GROUP_LENGTH)


# -- tags --------------------------------------------------------------------------------------

#: The tag expression that matches every message.
SUBSCRIBE_ALL = "*"
TAG_SEPARATOR = "||"


def parse_tag_expression(expression: str | None) -> list[str]:
    """The tags of ``"tagA || tagB"``, in order, blanks and duplicates dropped; ``[]`` for
    ``None``, ``""`` and ``"*"`` (every message) and for an expression that names no tag."""
    if expression is None:
        return []
    text = expression.strip()
    if not text or text == SUBSCRIBE_ALL:
        return []
    tags: list[str] = []
    for piece in text.split(TAG_SEPARATOR):
        tag = piece.strip()
        if tag and tag not in tags:
            tags.append(tag)
    return tags


def is_subscribe_all(expression: str | None) -> bool:
    """True for the expressions that mean "every message": ``None``, ``""`` and ``"*"``."""
    return expression is None or expression.strip() in ("", SUBSCRIBE_ALL)


def tag_codes(expression: str | None) -> frozenset[int] | None:
    """The tag hash codes an expression matches; ``None`` means every message."""
    codes = frozenset(java_hash(tag) for tag in parse_tag_expression(expression))
    return codes or None


# -- request-reply and message traces ----------------------------------------------------------

#: A cluster's reply topic is ``<cluster>_REPLY_TOPIC``; every broker of the cluster creates it.
REPLY_TOPIC_POSTFIX = "REPLY_TOPIC"
#: The ``MSG_TYPE`` property of a reply message: it is sent with SEND_REPLY_MESSAGE(_V2).
REPLY_MESSAGE_FLAG = "reply"
#: Where message traces go unless a producer or consumer names its own trace topic.
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"


def reply_topic(cluster: str) -> str:
    """The topic replies to requests sent to brokers of ``cluster`` are stored in."""
    return f"{cluster}_{REPLY_TOPIC_POSTFIX}"


#: Where 5.x timer messages wait until their delivery time (Apache's ``TimerMessageStore.TIMER_TOPIC``).
TIMER_TOPIC = "rmq_sys_wheel_timer"
#: The property holding a parked timer message's delivery time (ms since the epoch).
TIMER_OUT_MS = "TIMER_OUT_MS"
#: The properties by which a producer asks for a delivery time: absolute ms, seconds or ms from
#: arrival (5.x), and the 4.x absolute ``__STARTDELIVERTIME``.
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
TIMER_DELAY_MS = "TIMER_DELAY_MS"
START_DELIVER_TIME = "__STARTDELIVERTIME"
TIMER_REQUESTS = frozenset({TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS, START_DELIVER_TIME})
