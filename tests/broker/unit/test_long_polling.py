"""Long polling on its own: hold, wake on a matching arrival, time out, recheck, forget the
pulls of a closed connection. The pull handler is replaced by a recorded ``repull``."""

from __future__ import annotations

from typing import Any

from aiorocketmq.broker.long_polling import LongPolling
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import TopicNotExistError

from .support import RecordedConnection


class Queues:
    """Max offsets by queue, as the store would report them."""

    def __init__(self) -> None:
        self.max: dict[tuple[str, int], int] = {}

    def __call__(self, topic: str, queue_id: int) -> int:
        return self.max.get((topic, queue_id), 0)


class Repull:
    def __init__(self, fail: Exception | None = None) -> None:
        self.calls: list[RemotingCommand] = []
        self.fail = fail

    def __call__(self, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        self.calls.append(cmd)
        if self.fail is not None:
            raise self.fail
        return cmd.response(ResponseCode.SUCCESS, "FOUND")


def request() -> RemotingCommand:
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, {})


async def test_a_matching_arrival_wakes_the_held_pull() -> None:
    polling, repull, conn = LongPolling(Queues()), Repull(), RecordedConnection()
    cmd = request()
    polling.hold(conn, cmd, "T", 0, 5, frozenset({11, 12}), 30_000, repull)  # type: ignore[arg-type]
    assert polling.held_count == 1
    polling.on_arrival("T", 1, 9, 11)  # another queue
    polling.on_arrival("T", 0, 5, 11)  # not past the held offset
    polling.on_arrival("T", 0, 6, 99)  # another tag
    assert repull.calls == [] and polling.held_count == 1
    polling.on_arrival("T", 0, 6, 12)
    assert repull.calls == [cmd]
    (response,) = conn.responses
    assert (response.code, response.opaque) == (ResponseCode.SUCCESS, cmd.opaque)
    assert polling.held_count == 0


async def test_any_tag_wakes_a_pull_without_a_filter() -> None:
    polling, repull, conn = LongPolling(Queues()), Repull(), RecordedConnection()
    polling.hold(conn, request(), "T", 0, 0, None, 30_000, repull)  # type: ignore[arg-type]
    polling.on_arrival("T", 0, 1, 12345)
    assert len(conn.responses) == 1


async def test_the_hold_times_out() -> None:
    polling, repull, conn = LongPolling(Queues()), Repull(), RecordedConnection()
    polling.hold(conn, request(), "T", 0, 0, None, 20, repull)  # type: ignore[arg-type]
    await conn.next_response()
    assert len(repull.calls) == 1 and polling.held_count == 0
    polling.on_arrival("T", 0, 1, 0)  # already answered: nothing more
    assert len(repull.calls) == 1


async def test_recheck_wakes_pulls_whose_queue_grew() -> None:
    queues = Queues()
    polling, repull = LongPolling(queues), Repull()
    grown, idle = RecordedConnection(), RecordedConnection()
    polling.hold(grown, request(), "T", 0, 3, frozenset({1}), 30_000, repull)  # type: ignore[arg-type]
    polling.hold(idle, request(), "T", 1, 3, None, 30_000, repull)  # type: ignore[arg-type]
    queues.max[("T", 0)] = 4
    queues.max[("T", 1)] = 3
    polling.recheck()
    assert len(grown.responses) == 1 and not idle.responses
    assert polling.held_count == 1


async def test_a_closed_connection_loses_its_held_pulls() -> None:
    polling, repull = LongPolling(Queues()), Repull()
    gone, kept = RecordedConnection(), RecordedConnection()
    polling.hold(gone, request(), "T", 0, 0, None, 30_000, repull)  # type: ignore[arg-type]
    polling.hold(kept, request(), "T", 0, 0, None, 30_000, repull)  # type: ignore[arg-type]
    polling.connection_closed(gone)  # type: ignore[arg-type]
    assert polling.held_count == 1
    polling.on_arrival("T", 0, 1, 0)
    assert not gone.responses and len(kept.responses) == 1
    assert len(repull.calls) == 1


async def test_a_pull_whose_connection_closed_meanwhile_is_not_rerun() -> None:
    polling, repull, conn = LongPolling(Queues()), Repull(), RecordedConnection()
    polling.hold(conn, request(), "T", 0, 0, None, 30_000, repull)  # type: ignore[arg-type]
    conn.closed = True
    polling.on_arrival("T", 0, 1, 0)
    assert repull.calls == [] and polling.held_count == 0


async def test_a_failing_rerun_is_answered_with_its_error() -> None:
    repull = Repull(TopicNotExistError("topic[T] not exist, apply first please!"))
    polling, conn = LongPolling(Queues()), RecordedConnection()
    polling.hold(conn, request(), "T", 0, 0, None, 30_000, repull)  # type: ignore[arg-type]
    polling.on_arrival("T", 0, 1, 0)
    (response,) = conn.responses
    assert (response.code, response.remark) == (
        ResponseCode.TOPIC_NOT_EXIST,
        "topic[T] not exist, apply first please!",
    )


async def test_clear_cancels_every_hold() -> None:
    polling, repull, conn = LongPolling(Queues()), Repull(), RecordedConnection()
    polling.hold(conn, request(), "T", 0, 0, None, 10, repull)  # type: ignore[arg-type]
    polling.clear()
    assert polling.held_count == 0
    later = request()
    polling.hold(conn, later, "T", 1, 0, None, 60, repull)  # type: ignore[arg-type]
    response = await conn.next_response()
    assert response.opaque == later.opaque  # the cleared hold never answered
    assert repull.calls == [later]
