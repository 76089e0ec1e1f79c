"""The SDK's public surface is what users need and nothing else: ``dir()`` and ``help()`` of
every class ``aiorocketmq.client`` exports (and of the blocking facade) list exactly the names
below. The machinery a client needs to run (its part in rebalance, the pull loop's questions,
the client instance's callbacks) has underscore names.

A new public name is a decision: add it here, with the docs."""

from __future__ import annotations

import enum
import inspect
import pydoc
import re
from typing import Any

import pytest

import aiorocketmq.client as client
from aiorocketmq.client import (
    Admin,
    LitePullConsumer,
    Producer,
    PullClient,
    PushConsumer,
    SimpleConsumer,
    TransactionProducer,
    TransactionState,
    blocking,
    stop_on_signals,
)

NAMESRV = "127.0.0.1:9876"

LIFECYCLE = {"start", "shutdown"}
PRODUCER = LIFECYCLE | {
    "client_id",
    "queues",
    "recall",
    "reply",
    "request",
    "request_with_callback",
    "send",
    "send_batch",
    "send_oneway",
    "state",
}
PRODUCER_SETTINGS = {
    "compress_threshold",
    "default_topic_queue_nums",
    "enable_trace",
    "group",
    "instance_name",
    "max_message_size",
    "namesrv",
    "options",
    "retries",
    "send_timeout",
    "trace_topic",
}
CONSUMER_SETTINGS = {
    "consume_from",
    "enable_trace",
    "group",
    "instance_name",
    "max_span",
    "model",
    "namesrv",
    "offset_dir",
    "options",
    "pull_batch_size",
    "queue_size_threshold",
    "queue_threshold",
    "trace_topic",
}
ADMIN = LIFECYCLE | {
    "acl_config",
    "acl_config_version",
    "broker_config",
    "broker_runtime_info",
    "brokers_by_addr",
    "cluster_info",
    "committed_offset",
    "consume_stats",
    "consumer_connections",
    "consumer_groups_of",
    "consumer_lag",
    "create_topic",
    "create_topics",
    "delete_acl_config",
    "delete_kv_config",
    "delete_subscription_group",
    "delete_topic",
    "earliest_store_time",
    "instance",  # the raw-request escape hatch of operator tools
    "kv_config",
    "master_addrs",
    "max_offset",
    "message_request_modes",
    "min_offset",
    "order_topic_conf",
    "producer_connections",
    "query_message_by_id",
    "query_messages_by_key",
    "queues",
    "reset_offset_by_time",
    "search_offset",
    "set_message_request_mode",
    "topic_list",
    "topic_route",
    "topic_stats",
    "trigger_delete_files",
    "update_acl_config",
    "update_consumer_offset",
    "update_global_white_addrs",
    "update_kv_config",
    "update_order_topic_conf",
    "update_subscription_group",
    "update_subscription_groups",
    "view_message",
    "wait_for_route",
}

#: class -> (what help() and dir() of the class show, what dir() of an instance adds)
SURFACE: dict[type, tuple[set[str], set[str]]] = {
    Producer: (PRODUCER, PRODUCER_SETTINGS),
    TransactionProducer: (PRODUCER | {"send_in_transaction"}, PRODUCER_SETTINGS | {"checker"}),
    PushConsumer: (
        LIFECYCLE
        | {
            "assigned_queues",
            "client_id",
            "listener",
            "pause",
            "persist_offsets",
            "resume",
            "send_back",
            "state",
            "subscribe",
            "unsubscribe",
        },
        CONSUMER_SETTINGS
        | {
            "batch_size",
            "concurrency",
            "max_reconsume_times",
            "orderly",
            "pull_interval",
            "shutdown_timeout",
            "suspend_time",
        },
    ),
    LitePullConsumer: (
        LIFECYCLE
        | {
            "assign",
            "assignment",
            "commit",
            "committed",
            "messages",
            "pause",
            "poll",
            "queues",
            "resume",
            "seek",
            "seek_to_begin",
            "seek_to_end",
            "state",
            "subscribe",
            "unsubscribe",
        },
        CONSUMER_SETTINGS | {"auto_commit", "auto_commit_interval", "poll_timeout", "threshold_for_all"},
    ),
    Admin: (ADMIN, {"instance_name", "namesrv", "options"}),
    SimpleConsumer: (
        LIFECYCLE
        | {
            "ack",
            "ack_batch",
            "change_invisible_duration",
            "receive",
            "subscribe",
            "subscriptions",
            "unsubscribe",
        },
        {"await_duration", "fifo", "group", "instance_name", "namesrv", "options"},
    ),
    PullClient: (
        LIFECYCLE
        | {"commit", "committed", "max_offset", "min_offset", "pull", "queues", "read", "search_offset"},
        {"admin", "group"},
    ),
    client.SignalStop: ({"stopping", "wait"}, {"received"}),
    client.ClientOptions: (
        {
            "access_key",
            "busy_poll",
            "client_ip",
            "credentials",
            "heartbeat_interval",
            "persist_offset_interval",
            "rebalance_interval",
            "request_timeout",
            "route_refresh_interval",
            "secret_key",
            "security_token",
            "ssl_context",
            "tls",
            "tls_ca_file",
            "tls_verify",
        },
        set(),
    ),
    client.SendResult: (
        {"msg_id", "offset_msg_id", "queue", "queue_offset", "recall_handle", "status", "transaction_id"},
        set(),
    ),
    client.TransactionSendResult: ({"send_result", "state"}, set()),
    client.PullResult: (
        {"max_offset", "messages", "min_offset", "next_begin_offset", "status", "suggest_which_broker_id"},
        set(),
    ),
    client.BrokerIdentity: ({"broker_id", "broker_name", "cluster"}, set()),
    client.ReceivedMessage: (
        {
            "body",
            "broker_addr",
            "broker_name",
            "delivery_attempt",
            "invisible_until",
            "keys",
            "message",
            "msg_id",
            "properties",
            "queue_id",
            "queue_offset",
            "receipt_handle",
            "tags",
            "topic",
        },
        set(),
    ),
    blocking.BlockingProducer: ({"close", "queues", "send", "send_all", "send_batch", "send_oneway"}, set()),
    blocking.BlockingPullClient: (
        {
            "close",
            "commit",
            "committed",
            "max_offset",
            "min_offset",
            "pull",
            "queues",
            "read",
            "search_offset",
        },
        set(),
    ),
    blocking.BlockingAdmin: (
        {
            "broker_config",
            "broker_runtime_info",
            "brokers_by_addr",
            "close",
            "cluster_info",
            "committed_offset",
            "consume_stats",
            "consumer_connections",
            "consumer_groups_of",
            "consumer_lag",
            "create_topic",
            "delete_kv_config",
            "delete_subscription_group",
            "delete_topic",
            "kv_config",
            "master_addrs",
            "max_offset",
            "min_offset",
            "order_topic_conf",
            "query_message_by_id",
            "query_messages_by_key",
            "queues",
            "reset_offset_by_time",
            "search_offset",
            "topic_list",
            "topic_route",
            "topic_stats",
            "trigger_delete_files",
            "update_consumer_offset",
            "update_kv_config",
            "update_order_topic_conf",
            "update_subscription_group",
            "wait_for_route",
        },
        set(),
    ),
}

#: One object of each class whose instances carry attributes of their own.
INSTANCES: dict[type, Any] = {
    Producer: lambda: Producer("g", NAMESRV),
    TransactionProducer: lambda: TransactionProducer(
        "g", NAMESRV, checker=lambda msg: TransactionState.COMMIT
    ),
    PushConsumer: lambda: PushConsumer("g", NAMESRV),
    LitePullConsumer: lambda: LitePullConsumer("g", NAMESRV),
    Admin: lambda: Admin(NAMESRV),
    SimpleConsumer: lambda: SimpleConsumer("g", NAMESRV),
    PullClient: lambda: PullClient("g", NAMESRV),
    client.SignalStop: lambda: stop_on_signals(),
}


def shown(obj: object, names: list[str]) -> set[str]:
    """What help() lists besides the dunder protocol methods (pydoc's own rule)."""
    return {name for name in names if pydoc.visiblename(name, obj=obj) and not name.startswith("__")}


def test_every_exported_class_is_listed() -> None:
    exported = {
        obj
        for name in client.__all__
        if inspect.isclass(obj := getattr(client, name))
        and obj.__module__.startswith("aiorocketmq.client")
        and not issubclass(obj, (BaseException, enum.Enum))
    }
    assert exported - set(SURFACE) == set()


@pytest.mark.parametrize("cls", list(SURFACE), ids=lambda cls: cls.__name__)
def test_help_and_dir_of_a_class_show_its_public_api_only(cls: type) -> None:
    methods, _ = SURFACE[cls]
    assert shown(cls, dir(cls)) == methods
    text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    headings = set(re.findall(r"^[ |]*(?:async )?(\w+)(?:\(| = |$)", text, re.M))
    headings -= {base.__name__ for base in cls.__mro__}  # the method resolution order's lines
    assert {name for name in headings if name.startswith("_") and not name.startswith("__")} == set()
    assert methods <= headings


@pytest.mark.parametrize("cls", list(INSTANCES), ids=lambda cls: cls.__name__)
def test_dir_of_an_instance_adds_only_its_settings(cls: type) -> None:
    methods, settings = SURFACE[cls]
    assert shown(cls, dir(INSTANCES[cls]())) == methods | settings
