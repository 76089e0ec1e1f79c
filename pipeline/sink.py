"""The ``rocketmq`` sink: rows to messages, batch and streaming.

Columns: ``body`` (binary or string, required), ``topic`` (string; required unless the
``topic`` option is set, which then wins), ``tags`` (string), ``keys`` (string of
space-separated keys, or array of strings) and ``properties`` (map of strings). Each task
sends its rows as pipelined batch requests through one
:class:`aiorocketmq.client.blocking.BlockingProducer`; a failed send fails the task with an error naming
the topic and the cause.

Delivery is at least once: a task retried by Spark sends its rows again.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    MapType,
    StringType,
    StructType,
)

from aiorocketmq.client.blocking import BlockingProducer
from aiorocketmq.protocol.message import Message

from .options import RocketMQOptionError, RocketMQWriteError, WriteOptions, check_topic, one_line_errors
from .planning import open_admin

_COLUMNS: dict[str, tuple[str, tuple[DataType, ...]]] = {
    "body": ("binary or string", (BinaryType(), StringType())),
    "topic": ("string", (StringType(),)),
    "tags": ("string", (StringType(),)),
    "keys": (
        "string or array<string>",
        (StringType(), ArrayType(StringType(), True), ArrayType(StringType(), False)),
    ),
    "properties": (
        "map<string,string>",
        (MapType(StringType(), StringType(), True), MapType(StringType(), StringType(), False)),
    ),
}


@dataclass
class SinkCommit(WriterCommitMessage):
    """What one task sent."""

    messages: int


def check_write_schema(schema: StructType, options: WriteOptions) -> None:
    """The DataFrame's columns fit the sink (checked on the driver when the write starts)."""
    names = {field.name.lower(): field for field in schema.fields}
    for name, field in names.items():
        if name not in _COLUMNS:
            raise RocketMQOptionError(
                "schema", f"column {field.name!r} is not a sink column; the sink takes {', '.join(_COLUMNS)}"
            )
        wanted, types = _COLUMNS[name]
        if field.dataType not in types:
            raise RocketMQOptionError(
                "schema", f"column {field.name!r} must be {wanted}, not {field.dataType.simpleString()}"
            )
    if "body" not in names:
        raise RocketMQOptionError("schema", "the sink needs a 'body' column (binary or string)")
    if options.topic is None and "topic" not in names:
        raise RocketMQOptionError("topic", "set the topic option or give the rows a 'topic' column")


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    for i, field in enumerate(batch.schema):
        if field.name.lower() == name:
            return batch.column(i).to_pylist()
    return None


def batch_to_messages(batch: pa.RecordBatch, topic: str | None) -> list[Message]:
    """One message per row. Raises :class:`RocketMQWriteError` for a row without a body or
    topic, or with an invalid topic name."""
    rows = batch.num_rows
    bodies = _column(batch, "body")
    assert bodies is not None
    topics = _column(batch, "topic") if topic is None else None
    tags = _column(batch, "tags") or [None] * rows
    keys = _column(batch, "keys") or [None] * rows
    props = _column(batch, "properties") or [None] * rows
    checked: set[str] = set()
    messages = []
    for i in range(rows):
        body = bodies[i]
        if body is None:
            raise RocketMQWriteError(f"rocketmq sink: row {i} of a batch has a null 'body'")
        row_topic = topic if topics is None else topics[i]
        if row_topic is None:
            raise RocketMQWriteError(
                f"rocketmq sink: row {i} of a batch has a null 'topic' and no topic option is set"
            )
        if row_topic not in checked:
            try:
                check_topic(row_topic, "topic")
            except RocketMQOptionError as exc:
                raise RocketMQWriteError(f"rocketmq sink: row {i}: {exc.problem}") from None
            checked.add(row_topic)
        row_props = props[i]
        row_keys = keys[i]
        messages.append(
            Message(
                row_topic,
                body,
                tags=tags[i],
                keys=row_keys.split(" ") if isinstance(row_keys, str) else row_keys,
                properties={k: v for k, v in row_props if v is not None} if row_props else None,
            )
        )
    return messages


def send_batches(options: WriteOptions, batches: Iterable[pa.RecordBatch]) -> int:
    """Send every row of ``batches``; the number sent."""
    sent = 0
    try:
        producer = BlockingProducer(
            options.producer_group, options.namesrv, options=options.security.client_options()
        )
    except Exception as exc:
        raise RocketMQWriteError(
            f"rocketmq sink: cannot start a producer for name server {options.namesrv}: {type(exc).__name__}: {exc}"
        ) from exc
    try:
        for batch in batches:
            if not batch.num_rows:
                continue
            messages = batch_to_messages(batch, options.topic)
            try:
                producer.send_all(messages)
            except Exception as exc:
                topics = sorted({m.topic for m in messages})
                raise RocketMQWriteError(
                    f"rocketmq sink: sending {len(messages)} messages to topic(s) {', '.join(topics)} failed "
                    f"after {sent} were sent: {type(exc).__name__}: {exc}"
                ) from exc
            sent += len(messages)
    finally:
        producer.close()
    return sent


def _prepare(options: Mapping[str, str], schema: StructType, overwrite: bool) -> WriteOptions:
    parsed = WriteOptions.parse(options)
    if overwrite:
        raise RocketMQOptionError("mode", "the rocketmq sink only appends; use mode('append')")
    check_write_schema(schema, parsed)
    open_admin(parsed.namesrv, parsed.security).close()
    return parsed


class RocketMQWriter(DataSourceArrowWriter):
    """``df.write.format("rocketmq")``."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    @classmethod
    def create(cls, options: Mapping[str, str], schema: StructType, overwrite: bool) -> RocketMQWriter:
        return cls(_prepare(options, schema, overwrite))

    @one_line_errors
    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        return SinkCommit(send_batches(self.options, iterator))


class RocketMQStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("rocketmq")``: each micro-batch's rows, at least once."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    @classmethod
    def create(cls, options: Mapping[str, str], schema: StructType, overwrite: bool) -> RocketMQStreamWriter:
        # Streaming "complete" output mode asks for overwrite; a topic can only be appended to.
        return cls(_prepare(options, schema, overwrite))

    @one_line_errors
    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        return SinkCommit(send_batches(self.options, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: every task's messages are stored once its send returns."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: sent messages cannot be recalled (at-least-once)."""
