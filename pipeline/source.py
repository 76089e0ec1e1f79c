"""The ``rocketmq`` data source: batch and streaming reads of topics (one, several, a pattern's
or chosen queues, as Kafka's source reads them), and the sink.

Register it once per session, then use the short name::

    from aiorocketmq.pipeline import RocketMQDataSource
    spark.dataSource.register(RocketMQDataSource)
    df = spark.read.format("rocketmq").option("namesrv", "127.0.0.1:9876").option("topic", "Orders").load()

Options are checked when the DataFrame is defined (``load()``): their syntax, that the name
server answers and that it routes the topics. Offsets are resolved when the query is planned,
on the driver; executors only pull the offset ranges they are given. The methods PySpark
calls are wrapped in :func:`~.options.one_line_errors`, so the user sees our errors' causes
first.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
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

from .options import ReadOptions, RocketMQOptionError, one_line_errors
from .planning import (
    Bounds,
    JsonOffsets,
    check_cluster,
    check_data_loss,
    close_quietly,
    commit_group_offsets,
    from_json,
    open_admin,
    partition_ranges,
    rate_limit,
    resolve_end,
    resolve_start,
    subscribed_bounds,
    to_json,
)
from .reading import RangeSpec, read_range
from .schema import read_schema


@dataclass(frozen=True)
class QueueRangePartition(InputPartition):
    """One Spark partition: an offset range of one queue."""

    spec: RangeSpec


def _check_schema(schema: StructType, options: ReadOptions) -> None:
    expected = read_schema(options.include_headers)
    if schema != expected:
        raise RocketMQOptionError(
            "schema",
            f"the rocketmq source has a fixed schema ({expected.simpleString()}); do not pass another",
        )


def _partitions(
    options: ReadOptions, start: dict[MessageQueue, int], end: dict[MessageQueue, int]
) -> list[QueueRangePartition]:
    ranges = {queue: (start.get(queue, 0), end[queue]) for queue in end}
    return [
        QueueRangePartition(
            RangeSpec(
                namesrv=options.namesrv,
                topic=queue.topic,
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
                include_headers=options.include_headers,
            )
        )
        for queue, lo, hi in partition_ranges(
            ranges, max_size=options.max_per_partition, min_count=options.min_partitions
        )
    ]


class RocketMQBatchReader(DataSourceReader):
    """A batch read: the offset ranges are fixed when the reader is made (planning)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        admin = open_admin(options.namesrv, options.security)
        try:
            bounds = subscribed_bounds(admin, options, strict=True)
            start = resolve_start(options, admin, bounds)
        finally:
            admin.close()
        end = resolve_end(options, bounds)
        for queue, offset in start.items():
            if offset > end[queue] and isinstance(options.starting, dict):
                raise RocketMQOptionError(
                    "startingOffsets",
                    f"offset {offset} of queue {queue.broker_name}:{queue.queue_id} (topic {queue.topic!r}) "
                    f"is after its end {end[queue]}",
                )
        start = check_data_loss(options, start, bounds, "option 'startingOffsets'")
        self.ranges = _partitions(options, start, end)

    def partitions(self) -> Sequence[InputPartition]:
        return self.ranges

    @one_line_errors
    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, QueueRangePartition):
            # Spark reads one placeholder partition when planning found nothing to read.
            return
        yield from read_range(partition.spec)


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A streaming read. The stream's offset is the next offset of every queue; queues,
    brokers and (with ``subscribePattern``) topics that appear later start at offset 0 (a
    new queue's first offset)."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self._given = dict(options)
        self._schema = schema
        self._admin: BlockingAdmin | None = None
        self._target: dict[MessageQueue, int] | None = None
        self._reported: JsonOffsets | None = None

    @functools.cached_property
    def options(self) -> ReadOptions:
        # Checked at the first call rather than in __init__: PySpark 4's streaming runner
        # loses an error raised while it makes the reader (its clean-up then refers to the
        # reader that was never made, and that UnboundLocalError is all the user would see).
        options = ReadOptions.parse(self._given, streaming=True)
        _check_schema(self._schema, options)
        return options

    @property
    def admin(self) -> BlockingAdmin:
        if self._admin is None:
            self._admin = open_admin(self.options.namesrv, self.options.security)
        return self._admin

    def _bounds(self) -> dict[MessageQueue, Bounds]:
        # A pattern's topics are looked up again here, so every micro-batch sees new ones.
        return subscribed_bounds(self.admin, self.options, strict=False)

    def _offsets(self, offsets: JsonOffsets) -> dict[MessageQueue, int]:
        return from_json(offsets, self.options.subscription)

    @one_line_errors
    def initialOffset(self) -> JsonOffsets:
        bounds = self._bounds()
        start = resolve_start(self.options, self.admin, bounds)
        return to_json(check_data_loss(self.options, start, bounds, "option 'startingOffsets'"))

    def _latest(self) -> dict[MessageQueue, int]:
        return {queue: bound.max_offset for queue, bound in self._bounds().items()}

    @one_line_errors
    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    @one_line_errors
    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_per_trigger is not None:
            return ReadMaxRows(self.options.max_per_trigger)
        return ReadAllAvailable()

    @one_line_errors
    def latestOffset(self, start: JsonOffsets, limit: ReadLimit) -> JsonOffsets:
        # Spark plans the next micro-batch only once the one ending at ``start`` is
        # committed, so ``start`` is processed input: report it now rather than one batch
        # later, when Spark calls commit() while constructing the batch after next.
        self.commit(start)
        begin = self._offsets(start)
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

    @one_line_errors
    def partitions(self, start: JsonOffsets, end: JsonOffsets) -> Sequence[InputPartition]:
        begin = self._offsets(start)
        finish = self._offsets(end)
        first = {queue: begin.get(queue, 0) for queue in finish}
        if any(finish[q] > first[q] for q in finish):
            first = check_data_loss(
                self.options, first, self._bounds(), "stream (offsets of its last micro-batch)"
            )
        return _partitions(self.options, first, finish)

    @one_line_errors
    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, QueueRangePartition):
            # Spark reads one placeholder partition when planning found nothing to read.
            return
        yield from read_range(partition.spec)

    @one_line_errors
    def commit(self, end: JsonOffsets) -> None:
        group = self.options.consumer_group
        if group is None or end == self._reported:
            return
        commit_group_offsets(self.admin, group, self._offsets(end))
        self._reported = end

    def stop(self) -> None:
        close_quietly([self._admin])
        self._admin = None


class RocketMQDataSource(DataSource):
    """``format("rocketmq")``: read topics (batch or stream) or write rows to topics."""

    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    @one_line_errors
    def schema(self) -> StructType:
        # Spark asks for the schema when a read is defined: the earliest point to reject
        # bad options, an unreachable name server or an unknown topic.
        options = ReadOptions.parse(self.options, streaming=None)
        check_cluster(options)
        return read_schema(options.include_headers)

    @one_line_errors
    def reader(self, schema: StructType) -> DataSourceReader:
        options = ReadOptions.parse(self.options, streaming=False)
        _check_schema(schema, options)
        return RocketMQBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return RocketMQStreamReader(self.options, schema)

    @one_line_errors
    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .sink import RocketMQWriter

        return RocketMQWriter.create(self.options, schema, overwrite)

    @one_line_errors
    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .sink import RocketMQStreamWriter

        return RocketMQStreamWriter.create(self.options, schema, overwrite)
