"""The official RocketMQ 5.x Python client (``rocketmq-python-client``) driven by the tests,
in its own process: ``python py5_client.py SCENARIO JSON``. It prints one JSON line, prefixed
``RESULT ``, with what it saw.

It runs apart from the test process because that package and the 4.x ``rocketmq`` package
of the dev dependencies are both imported as ``rocketmq``; the tests put it on PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)
from rocketmq.grpc_protocol import FilterType


def config(args: dict[str, Any]) -> ClientConfiguration:
    credentials = Credentials(args.get("ak", ""), args.get("sk", ""))
    return ClientConfiguration(args["endpoint"], credentials, request_timeout=args.get("request_timeout", 3))


def build(spec: dict[str, Any]) -> Message:
    msg = Message()
    msg.topic = spec["topic"]
    msg.body = spec["body"].encode()
    if spec.get("tag"):
        msg.tag = spec["tag"]
    if spec.get("keys"):
        msg.keys = spec["keys"][0]
        for key in spec["keys"][1:]:
            msg.keys = key
    for key, value in spec.get("properties", {}).items():
        msg.add_property(key, value)
    if spec.get("group"):
        msg.message_group = spec["group"]
    if spec.get("delivery_ms"):
        msg.delivery_timestamp = spec["delivery_ms"] // 1000
    return msg


def seen(msg: Any) -> dict[str, Any]:
    return {
        "body": msg.body.decode(),
        "topic": msg.topic,
        "tag": msg.tag,
        "keys": sorted(msg.keys or []),
        "properties": dict(msg.properties or {}),
        "message_id": msg.message_id,
        "group": msg.message_group,
        "attempt": msg.delivery_attempt,
        "delivery_ms": msg.delivery_timestamp,
        "received_ms": int(time.time() * 1000),
        "corrupted": msg.corrupted,
    }


def produce(args: dict[str, Any]) -> dict[str, Any]:
    topics = sorted({m["topic"] for m in args["messages"]})
    producer = Producer(config(args), tuple(topics), tls_enable=args.get("tls", False))
    producer.startup()
    receipts = []
    errors = []
    # ``progress``: a file that gets one line per acknowledged send, for a test that acts
    # part-way (kills a broker); ``interval``: seconds between sends.
    progress = open(args["progress"], "a", buffering=1) if args.get("progress") else None  # noqa: SIM115
    try:
        for spec in args["messages"]:
            try:
                receipt = producer.send(build(spec))
                receipts.append(
                    {"message_id": receipt.message_id, "offset": receipt.offset, "body": spec["body"]}
                )
                if progress is not None:
                    progress.write(spec["body"] + "\n")
            except Exception as exc:
                errors.append(f"{spec['body']}: {type(exc).__name__}: {exc}")
            time.sleep(args.get("interval", 0))
    finally:
        if progress is not None:
            progress.close()
        producer.shutdown()
    return {"receipts": receipts, "errors": errors}


class Checker(TransactionChecker):
    """Answers the broker's checks: COMMIT for the bodies listed, ROLLBACK otherwise."""

    def __init__(self, commit: set[str]) -> None:
        self.commit = commit
        self.checked: list[str] = []
        self.event = threading.Event()

    def check(self, message: Any) -> Any:
        body = message.body.decode()
        self.checked.append(body)
        self.event.set()
        return TransactionResolution.COMMIT if body in self.commit else TransactionResolution.ROLLBACK


def transaction(args: dict[str, Any]) -> dict[str, Any]:
    """Half messages: ``commit`` bodies committed, ``rollback`` bodies rolled back, ``orphan``
    bodies left for the broker to check (the checker commits them)."""
    checker = Checker(set(args["orphan"]))
    producer = Producer(config(args), (args["topic"],), checker=checker)
    producer.startup()
    ids = {}
    try:
        for what in ("commit", "rollback", "orphan"):
            for body in args[what]:
                tx = producer.begin_transaction()
                receipt = producer.send(build({"topic": args["topic"], "body": body}), transaction=tx)
                ids[body] = receipt.transaction_id
                if what == "commit":
                    tx.commit()
                elif what == "rollback":
                    tx.rollback()
        deadline = time.monotonic() + args.get("wait", 30)
        while set(checker.checked) < set(args["orphan"]) and time.monotonic() < deadline:
            checker.event.wait(0.5)
            checker.event.clear()
        time.sleep(1.0)  # let the EndTransaction the checker triggered go out
    finally:
        producer.shutdown()
    return {"checked": checker.checked, "transaction_ids": ids}


def simple(args: dict[str, Any]) -> dict[str, Any]:
    """Receive until ``count`` messages; ``ack`` them, or (``change``) give each one a new
    invisible duration and ack only its redelivery."""
    # ``sql``: the filter is an SQL92 expression over the messages' properties.
    expression = (
        FilterExpression(args["sql"], FilterType.SQL)
        if args.get("sql")
        else FilterExpression(args.get("filter", "*"))
    )
    consumer = SimpleConsumer(
        config(args), args["group"], {args["topic"]: expression}, await_duration=args.get("await", 5)
    )
    consumer.startup()
    got: list[dict[str, Any]] = []
    changed: list[dict[str, Any]] = []
    errors: list[str] = []
    deadline = time.monotonic() + args.get("wait", 40)
    try:
        while len(got) < args["count"] and time.monotonic() < deadline:
            try:
                received = consumer.receive(args.get("batch", 16), args.get("invisible", 15)) or []
            except Exception as exc:
                # ``tolerate``: receive errors (by text) recorded and receiving goes on; any
                # other error ends the run.
                if not any(text in str(exc) for text in args.get("tolerate", [])):
                    raise
                errors.append(str(exc))
                continue
            for msg in received:
                if args.get("change") and msg.delivery_attempt == 1:
                    consumer.change_invisible_duration(msg, args["change"])
                    changed.append(seen(msg))
                    continue
                if args.get("no_ack"):
                    got.append(seen(msg))
                    continue
                consumer.ack(msg)
                got.append(seen(msg))
    finally:
        consumer.shutdown()
    return {"messages": got, "changed": changed, "errors": errors}


class Listener(MessageListener):
    def __init__(self, fail_first: bool, fail_always: bool = False) -> None:
        self.got: list[dict[str, Any]] = []
        self.fail_first = fail_first
        self.fail_always = fail_always
        self.lock = threading.Lock()

    def consume(self, message: Any) -> Any:
        with self.lock:
            self.got.append(seen(message))
        if self.fail_always or (self.fail_first and message.delivery_attempt == 1):
            return ConsumeResult.FAILURE
        return ConsumeResult.SUCCESS


def recall(args: dict[str, Any]) -> dict[str, Any]:
    """Send timer messages (``messages`` with ``delivery_ms``), recall those listed in
    ``recall`` with their receipts' recall handles, then try each recall again and one with a
    made-up handle: what each attempt answered."""
    producer = Producer(config(args), (args["topic"],))
    producer.startup()
    handles: dict[str, str] = {}
    outcomes: list[dict[str, Any]] = []
    try:
        for spec in args["messages"]:
            receipt = producer.send(build(spec))
            handles[spec["body"]] = receipt.recall_handle or ""
        for body in args["recall"] + args["recall"] + ["made-up"]:
            handle = handles.get(body, "bWFkZS11cA==")
            try:
                outcomes.append({"body": body, "message_id": producer.recall_message(args["topic"], handle)})
            except Exception as exc:
                outcomes.append({"body": body, "error": f"{type(exc).__name__}: {exc}"})
    finally:
        producer.shutdown()
    return {"handles": handles, "outcomes": outcomes}


def push(args: dict[str, Any]) -> dict[str, Any]:
    listener = Listener(args.get("fail_first", False), args.get("fail_always", False))
    consumer = PushConsumer(
        config(args), args["group"], listener, {args["topic"]: FilterExpression(args.get("filter", "*"))}
    )
    consumer.startup()
    deadline = time.monotonic() + args.get("wait", 40)
    try:
        while time.monotonic() < deadline:
            with listener.lock:
                if len(listener.got) >= args["count"]:
                    break
            if args.get("stop_file") and os.path.exists(args["stop_file"]):
                break
            time.sleep(0.1)
    finally:
        consumer.shutdown()
    return {"messages": listener.got}


SCENARIOS = {"produce": produce, "transaction": transaction, "simple": simple, "push": push, "recall": recall}


if __name__ == "__main__":
    result = SCENARIOS[sys.argv[1]](json.loads(sys.argv[2]))
    print("RESULT " + json.dumps(result), flush=True)
