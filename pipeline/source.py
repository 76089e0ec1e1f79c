"""The ``rocketmq`` data source: batch and streaming reads of a topic, and the sink.

Register it once per session, then use the short name::

    from aiorocketmq.pipeline import RocketMQDataSource
    spark.dataSource.register(RocketMQDataSource)
    df = spark.read.format("rocketmq").option("namesrv", "127.0.0.1:9876").option("topic", "Orders").load()

Options are checked when the DataFrame is defined (``load()``): their syntax, that the name
server answers and that it routes the topic. Offsets are resolved when the query is planned,
on the driver; executors only pull the offset ranges they are given.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from aiorocketmq.client.blocking import BlockingAdmin
from aiorocketmq.client.errors import MQError
from aiorocketmq.protocol.body import MessageQueue

from .options import ReadOptions, RocketMQOptionError
from .planning import (
    Bounds,
    JsonOffsets,
    check_cluster,
    check_data_loss,
    close_quietly,
    commit_group_offsets,
    from_json,
    open_admin,
    queue_bounds,
    rate_limit,
    resolve_end,
    resolve_start,
    split_ranges,
    to_json,
)
from .reading import RangeSpec, read_range
from .schema import READ_SCHEMA


@dataclass(frozen=True)
class QueueRangePartition(InputPartition):
    """One Spark partition: an offset range of one queue."""

    spec: RangeSpec


def _check_schema(schema: StructType) -> None:
    if schema != READ_SCHEMA:
        raise RocketMQOptionError(
            "schema",
            f"the rocketmq source has a fixed schema ({READ_SCHEMA.simpleString()}); do not pass another",
        )


def _partitions(
    options: ReadOptions, start: dict[MessageQueue, int], end: dict[MessageQueue, int]
) -> list[QueueRangePartition]:
    parts = []
    for queue in sorted(end):
        first = start.get(queue, 0)
        for lo, hi in split_ranges(first, end[queue], options.max_per_partition):
            spec = RangeSpec(
                namesrv=options.namesrv,
                topic=options.topic,
                broker=queue.broker_name,
                queue_id=queue.queue_id,
                start=lo,
                end=hi,
                expression=options.expression,
                tags=options.tags,
                fail_on_data_loss=options.fail_on_data_loss,
                pull_batch_size=options.pull_batch_size,
                security=options.security,
                expression_type=options.expression_type,
            )
            parts.append(QueueRangePartition(spec))
    return parts


class RocketMQBatchReader(DataSourceReader):
    """A batch read: the offset ranges are fixed when the reader is made (planning)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        admin = open_admin(options.namesrv, options.security)
        try:
            bounds = queue_bounds(admin, options.namesrv, options.topic)
            start = resolve_start(options, admin, bounds)
        finally:
            admin.close()
        end = resolve_end(options, bounds)
        for queue, offset in start.items():
            if offset > end[queue] and isinstance(options.starting, dict):
                raise RocketMQOptionError(
                    "startingOffsets",
                    f"offset {offset} of queue {queue.broker_name}:{queue.queue_id} is after its end {end[queue]}",
                )
        start = check_data_loss(options, start, bounds, "option 'startingOffsets'")
        self.ranges = _partitions(options, start, end)

    def partitions(self) -> Sequence[InputPartition]:
        return self.ranges

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, QueueRangePartition):
            # Spark reads one placeholder partition when planning found nothing to read.
            return iter(())
        return read_range(partition.spec)


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A streaming read. The stream's offset is the next offset of every queue; queues and
    brokers that appear later start at offset 0 (a new queue's first offset)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._admin: BlockingAdmin | None = None
        self._target: dict[MessageQueue, int] | None = None
        self._reported: JsonOffsets | None = None

    @property
    def admin(self) -> BlockingAdmin:
        if self._admin is None:
            self._admin = open_admin(self.options.namesrv, self.options.security)
        return self._admin

    def _bounds(self) -> dict[MessageQueue, Bounds]:
        return queue_bounds(self.admin, self.options.namesrv, self.options.topic)

    def initialOffset(self) -> JsonOffsets:
        bounds = self._bounds()
        start = resolve_start(self.options, self.admin, bounds)
        return to_json(check_data_loss(self.options, start, bounds, "option 'startingOffsets'"))

    def _latest(self) -> dict[MessageQueue, int]:
        return {queue: bound.max_offset for queue, bound in self._bounds().items()}

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_per_trigger is not None:
            return ReadMaxRows(self.options.max_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: JsonOffsets, limit: ReadLimit) -> JsonOffsets:
        # Spark plans the next micro-batch only once the one ending at ``start`` is
        # committed, so ``start`` is processed input: report it now rather than one batch
        # later, when Spark calls commit() while constructing the batch after next.
        self.commit(start)
        begin = from_json(self.options.topic, start)
        latest = self._latest() if self._target is None else dict(self._target)
        # Never move a queue backwards (a broker that lost its tail, or one that is away).
        for queue, offset in begin.items():
            latest[queue] = max(offset, latest.get(queue, offset))
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(begin, latest, limit.max_rows)
        return to_json(latest)

    def reportLatestOffset(self) -> JsonOffsets | None:
        try:
            return to_json(self._latest())
        except (MQError, RocketMQOptionError):
            return None

    def partitions(self, start: JsonOffsets, end: JsonOffsets) -> Sequence[InputPartition]:
        topic = self.options.topic
        begin = from_json(topic, start)
        finish = from_json(topic, end)
        first = {queue: begin.get(queue, 0) for queue in finish}
        if any(finish[q] > first[q] for q in finish):
            first = check_data_loss(
                self.options, first, self._bounds(), "stream (offsets of its last micro-batch)"
            )
        return _partitions(self.options, first, finish)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, QueueRangePartition):
            # Spark reads one placeholder partition when planning found nothing to read.
            return iter(())
        return read_range(partition.spec)

    def commit(self, end: JsonOffsets) -> None:
        group = self.options.consumer_group
        if group is None or end == self._reported:
            return
        commit_group_offsets(self.admin, group, from_json(self.options.topic, end))
        self._reported = end

    def stop(self) -> None:
        close_quietly([self._admin])
        self._admin = None


class RocketMQDataSource(DataSource):
    """``format("rocketmq")``: read a topic (batch or stream) or write rows to topics."""

    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def schema(self) -> StructType:
        # Spark asks for the schema when a read is defined: the earliest point to reject
        # bad options, an unreachable name server or an unknown topic.
        options = ReadOptions.parse(self.options, streaming=None)
        check_cluster(options)
        return READ_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        _check_schema(schema)
        return RocketMQBatchReader(ReadOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        _check_schema(schema)
        return RocketMQStreamReader(ReadOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .sink import RocketMQWriter

        return RocketMQWriter.create(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .sink import RocketMQStreamWriter

        return RocketMQStreamWriter.create(self.options, schema, overwrite)
