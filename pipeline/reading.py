"""Reading one queue's offset range on an executor, as Arrow record batches.

A read task owns a private event loop in its own thread (no hop to another thread per pull)
and a client instance (:class:`aiorocketmq.client.Admin`) on it. The range is cut into windows of
``pull_batch_size`` offsets; several windows are pulled at once, so the broker serves the next pulls while this
process decodes the previous ones. Each window keeps pulling until it is covered, and keeps
only its own offsets, so a broker that answers with fewer messages than asked (its per-pull
caps) or one that scans past the window (a tag filter) never loses or repeats a row.

Pull responses are decoded straight into columns (:mod:`aiorocketmq.pipeline.records`); the raw bodies
are why this module uses ``client.pull.pull_raw`` rather than ``client.PullClient``, whose
pulls return decoded message objects.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiorocketmq.client import Admin
from aiorocketmq.client.client_instance import ClientInstance
from aiorocketmq.client.pull import pull_raw
from aiorocketmq.protocol.body import MessageQueue
from aiorocketmq.protocol.codes import PullSysFlag, RequestCode, ResponseCode
from aiorocketmq.protocol.errors import error_for_code
from aiorocketmq.protocol.loop import new_event_loop

from .options import DataLossError, Security

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

#: The consumer group named in the source's pull requests (pulls by offset commit nothing).
READER_GROUP = "spark-rocketmq-reader"
#: Pulled bytes decoded into one record batch for Spark (about 8,000 small messages).
CHUNK_BYTES = 2 * 1024 * 1024
#: Pull requests in flight per read task.
PULLS_IN_FLIGHT = 8
PULL_TIMEOUT = 30.0

_PULL = int(RequestCode.PULL_MESSAGE)
_FOUND = int(ResponseCode.SUCCESS)
_NOT_FOUND = int(ResponseCode.PULL_NOT_FOUND)
_RETRY = int(ResponseCode.PULL_RETRY_IMMEDIATELY)
_MOVED = int(ResponseCode.PULL_OFFSET_MOVED)
_SUBSCRIPTION = int(PullSysFlag.SUBSCRIPTION)


@dataclass(frozen=True)
class RangeSpec:
    """One queue range to read, with how to read it."""

    namesrv: str
    topic: str
    broker: str
    queue_id: int
    start: int
    end: int
    expression: str
    tags: frozenset[str] | None
    fail_on_data_loss: bool
    pull_batch_size: int
    security: Security = field(default_factory=Security)
    expression_type: str = "TAG"
    include_headers: bool = False


@dataclass
class _Window:
    end: int
    bodies: list[bytes]
    #: Offsets found missing (deleted by retention) as ``(first, next present)`` pairs.
    lost: list[tuple[int, int]]


class _Puller:
    def __init__(self, instance: ClientInstance, addr: str, spec: RangeSpec) -> None:
        self.instance = instance
        self.addr = addr
        self.spec = spec
        self.queue = MessageQueue(topic=spec.topic, broker_name=spec.broker, queue_id=spec.queue_id)

    async def window(self, start: int, end: int) -> _Window:
        spec = self.spec
        result = _Window(end, [], [])
        offset = start
        while offset < end:
            response = await pull_raw(
                self.instance,
                READER_GROUP,
                self.queue,
                offset,
                max_nums=end - offset,
                suspend=0,
                timeout=PULL_TIMEOUT,
                expression=spec.expression,
                addr=self.addr,
                expression_type=spec.expression_type,
            )
            code = response.code
            if code not in (_FOUND, _NOT_FOUND, _RETRY, _MOVED):
                raise error_for_code(code, response.remark)
            ext = response.ext_fields
            nxt = int(ext["nextBeginOffset"])
            if code == _FOUND:
                if response.body:
                    result.bodies.append(response.body)
            elif code == _MOVED or (code == _RETRY and response.remark == "MESSAGE_WAS_REMOVING"):
                # The offsets below nextBeginOffset are gone (retention), or the offset is
                # beyond the queue's end (the queue was cleared and refilled).
                first_present = int(ext["minOffset"])
                if offset < first_present:
                    result.lost.append((offset, min(first_present, end)))
                    nxt = max(nxt, first_present)
                elif code == _RETRY:
                    result.lost.append((offset, min(nxt, end)))
                elif not spec.fail_on_data_loss:
                    log.warning(
                        "rocketmq: queue %s:%s of topic %r now ends at %s, before offset %s the query "
                        "planned to read; skipping the rest of its range (failOnDataLoss=false)",
                        spec.broker,
                        spec.queue_id,
                        spec.topic,
                        ext["maxOffset"],
                        offset,
                    )
                    return result
                else:
                    raise DataLossError(
                        f"rocketmq: queue {spec.broker}:{spec.queue_id} of topic {spec.topic!r} now ends at "
                        f"{ext['maxOffset']}, before offset {offset} the query planned to read"
                    )
            elif code == _NOT_FOUND:
                # Nothing stored there (yet): the range ends beyond the queue's end.
                return result
            if nxt <= offset:
                return result
            offset = nxt
        return result


def read_range(spec: RangeSpec) -> Iterator[pa.RecordBatch]:
    """Every message of the range whose tag matches, in queue order, as record batches."""
    # numpy and the Arrow kernels load only in the processes that read, not in the planners.
    from .records import decode_chunk, keep_rows

    loop = new_event_loop()
    admin = Admin(
        spec.namesrv, instance_name=f"spark-reader-{os.getpid()}", options=spec.security.client_options()
    )
    reader: _RangeReader | None = None
    try:
        loop.run_until_complete(admin.start())
        instance = admin.instance
        addr = loop.run_until_complete(instance.find_broker_addr(spec.broker, topic=spec.topic))
        reader = _RangeReader(_Puller(instance, addr, spec))
        while not reader.done:
            # One loop run per chunk, not per pull: each run of a loop has a fixed cost, and
            # requests issued in one loop iteration leave in one socket write.
            bodies, limits = loop.run_until_complete(reader.next_chunk())
            if bodies:
                # Without a tag filter a pull never answers past the window it asked for.
                batch = decode_chunk(
                    bodies,
                    spec.topic,
                    spec.broker,
                    limits if spec.tags else None,
                    include_headers=spec.include_headers,
                )
                batch = keep_rows(batch, spec.end, spec.tags)
                if batch.num_rows:
                    yield batch
    finally:
        if reader is not None:
            loop.run_until_complete(reader.cancel())
        loop.run_until_complete(admin.shutdown())
        loop.close()


class _RangeReader:
    """Windows of one range, ``PULLS_IN_FLIGHT`` of them pulled at a time."""

    def __init__(self, puller: _Puller) -> None:
        self.puller = puller
        self.spec = puller.spec
        self.pending: collections.deque[asyncio.Task[_Window]] = collections.deque()
        self.next_window = self.spec.start

    @property
    def done(self) -> bool:
        return not self.pending and self.next_window >= self.spec.end

    def _top_up(self) -> None:
        spec = self.spec
        while len(self.pending) < PULLS_IN_FLIGHT and self.next_window < spec.end:
            stop = min(self.next_window + spec.pull_batch_size, spec.end)
            self.pending.append(asyncio.ensure_future(self.puller.window(self.next_window, stop)))
            self.next_window = stop

    async def next_chunk(self) -> tuple[list[bytes], list[int]]:
        """The bodies of the next windows, about ``CHUNK_BYTES`` of them, and each body's
        window end."""
        bodies: list[bytes] = []
        limits: list[int] = []
        size = 0
        self._top_up()
        while self.pending and size < CHUNK_BYTES:
            window = await self.pending.popleft()
            self._top_up()
            if window.lost:
                _report_loss(self.spec, window.lost)
            for body in window.bodies:
                bodies.append(body)
                limits.append(window.end)
                size += len(body)
        return bodies, limits

    async def cancel(self) -> None:
        for task in self.pending:
            task.cancel()
        await asyncio.gather(*self.pending, return_exceptions=True)
        self.pending.clear()


def _report_loss(spec: RangeSpec, lost: list[tuple[int, int]]) -> None:
    first, upto = lost[0]
    where = f"offsets {first}..{upto - 1} of queue {spec.broker}:{spec.queue_id} (topic {spec.topic!r})"
    if not spec.fail_on_data_loss:
        log.warning(
            "rocketmq: %s were deleted by retention before this query read them; skipped "
            "(failOnDataLoss=false)",
            where,
        )
        return
    raise DataLossError(
        f"rocketmq: {where} were deleted by retention before this query read them; some messages "
        "are lost. Set the option failOnDataLoss=false to skip them."
    )
