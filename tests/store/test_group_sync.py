"""The group commit's disk thread, both twins (the compiled ``GroupSync`` when built, and
``PureGroupSync``): a round covers every hand-over before it started, wakes the loop through its
pipe, counts the rounds that ended (``ended``, read without a system call), reports a failed
``fdatasync`` by its errno and the hand-overs it had taken, syncs a directory handed over with
the files, and ``close`` syncs what was handed over before the thread stops."""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from aiorocketmq.broker.store import flush
from aiorocketmq.protocol.speedups import compiled

TWINS = [pytest.param(flush.PureGroupSync, id="pure")]
if compiled is not None:
    TWINS.append(pytest.param(compiled.GroupSync, id="compiled"))


@pytest.fixture(params=TWINS)
def group(request: pytest.FixtureRequest) -> Iterator[flush.PureGroupSync]:
    made = request.param()
    yield made
    made.close()


@pytest.fixture
def data_fd(tmp_path: Path) -> Iterator[int]:
    fd = os.open(tmp_path / "data", os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, b"x" * 4096)
    yield fd
    os.close(fd)


async def next_round(group: flush.PureGroupSync) -> tuple[int, int, int, int]:
    """Wait for the pipe to wake the loop, then collect."""
    loop = asyncio.get_running_loop()
    woken = loop.create_future()
    loop.add_reader(group.fileno(), lambda: woken.done() or woken.set_result(None))
    try:
        await asyncio.wait_for(woken, 5)
    finally:
        loop.remove_reader(group.fileno())
    return group.collect()


async def test_a_round_covers_every_hand_over_before_it(group: flush.PureGroupSync, data_fd: int) -> None:
    assert group.collect() == (0, 0, 0, 0)
    assert group.ended() == 0
    group.submit((data_fd,))
    assert await next_round(group) == (1, 1, 0, 0)
    assert group.ended() == 1
    # Hand-overs made while a round runs are taken together by the next one.
    for _ in range(4):
        group.submit((data_fd, data_fd))
    while group.collect()[0] < 5:
        await next_round(group)
    covered, rounds, error, failed = group.collect()
    assert (covered, error, failed) == (5, 0, 0) and 2 <= rounds <= 5
    assert group.ended() == rounds


async def test_a_failed_round_reports_its_errno_and_what_it_had_taken(
    group: flush.PureGroupSync, data_fd: int
) -> None:
    reader, writer = os.pipe()
    try:
        group.submit((data_fd, reader))  # fdatasync of a pipe: EINVAL
        assert await next_round(group) == (0, 0, errno.EINVAL, 1)
        assert group.ended() == 1  # a failed round ended too
        assert group.collect()[2] == 0  # the errno is reported once
        group.submit((data_fd,))
        assert await next_round(group) == (2, 1, 0, 1)
        group.submit((data_fd,), reader)  # a directory that cannot be synced fails the round
        assert await next_round(group) == (2, 1, errno.EINVAL, 3)
        assert group.ended() == 3
    finally:
        os.close(reader)
        os.close(writer)


async def test_a_round_with_a_real_directory_succeeds(
    group: flush.PureGroupSync, data_fd: int, tmp_path: Path
) -> None:
    # That the directory is synced at all shows in the failed round above (a pipe as the
    # directory fails it); here a directory opened read-only, as the flusher opens it, syncs.
    directory = os.open(tmp_path, os.O_RDONLY)
    try:
        group.submit((data_fd,), directory)
        assert await next_round(group) == (1, 1, 0, 0)
    finally:
        os.close(directory)


async def test_close_syncs_what_was_handed_over_then_refuses_more(
    group: flush.PureGroupSync, data_fd: int
) -> None:
    group.submit((data_fd,))
    group.close()
    assert group.collect() == (1, 1, 0, 0)
    with pytest.raises(RuntimeError, match="closed"):
        group.submit((data_fd,))
    with pytest.raises(ValueError, match="closed"):
        group.fileno()
    group.close()  # a second close is harmless


def test_a_negative_descriptor_is_refused(group: flush.PureGroupSync) -> None:
    with pytest.raises(ValueError, match="not a file descriptor: -1"):
        group.submit((-1,))
    with pytest.raises(ValueError, match="not a file descriptor: -2"):
        group.submit((), -2)
