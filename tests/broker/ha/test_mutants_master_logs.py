"""What the HA master tells its operator (tests written for the log-text mutants of
broker/ha/master.py): why each slave left, where each transfer starts, a refusal, and a slave
asking for log this master no longer has (once, not on every loop)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from aiorocketmq.broker.ha import master as master_module
from aiorocketmq.broker.ha.master import ReplicationMaster
from aiorocketmq.broker.ha.wire import encode_offset
from tests.store.support import small_config

from .test_mutants_master_port import END, CommitLog, Store, frames_until_heartbeat, until


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == master_module.__name__]


async def started(tmp_path: Path, store: object, **settings: int) -> ReplicationMaster:
    config = small_config(tmp_path, haTransferBatchSize=300, haSendHeartbeatInterval=1, **settings)
    master = ReplicationMaster(store, config, sync=True)  # type: ignore[arg-type]
    await master.start("127.0.0.1", 0)
    return master


@pytest.fixture
async def ha(tmp_path: Path) -> AsyncIterator[ReplicationMaster]:
    master = await started(tmp_path, Store(), haHousekeepingInterval=10_000)
    try:
        yield master
    finally:
        await master.stop()


async def test_a_slave_that_hangs_up_is_logged_as_closed_after_its_transfer_start(
    ha: ReplicationMaster, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger=master_module.__name__):
        reader, writer = await asyncio.open_connection("127.0.0.1", ha.port)
        local = writer.get_extra_info("sockname")
        writer.write(encode_offset(0))
        await frames_until_heartbeat(reader)
        writer.close()
        await until(lambda: not ha.links)
    slave = f"{local[0]}:{local[1]}"
    assert f"slave {slave}: transfer starts at commit-log offset 2000" in messages(caplog)
    assert f"slave {slave} disconnected from the HA port: closed" in messages(caplog)


async def test_a_refused_slave_is_logged_with_the_reason_and_why_it_left(
    ha: ReplicationMaster, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger=master_module.__name__):
        reader, writer = await asyncio.open_connection("127.0.0.1", ha.port)
        local = writer.get_extra_info("sockname")
        writer.write(encode_offset(END + 1))
        async with asyncio.timeout(10):
            assert await reader.read(65536) == b""
        await until(lambda: not ha.links)
        writer.close()
    slave = f"{local[0]}:{local[1]}"
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == [ha.last_refusal] and ha.last_refusal.startswith(f"slave {slave} reports")
    assert f"slave {slave} disconnected from the HA port: slave ahead of master" in messages(caplog)


async def test_a_silent_slave_is_logged_with_how_long_it_was_silent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ha = await started(tmp_path, Store(), haHousekeepingInterval=1000)
    try:
        with caplog.at_level(logging.INFO, logger=master_module.__name__):
            reader, writer = await asyncio.open_connection("127.0.0.1", ha.port)
            local = writer.get_extra_info("sockname")
            async with asyncio.timeout(10):
                assert await reader.read(65536) == b""
            await until(lambda: not ha.links)
            writer.close()
    finally:
        await ha.stop()
    assert (
        f"slave {local[0]}:{local[1]} disconnected from the HA port: nothing from the slave for 1s"
        in messages(caplog)
    )


class TrimmedStore(Store):
    """A master whose first commit-log file was deleted: its log starts at 1000."""

    def __init__(self) -> None:
        super().__init__()
        self.commit_log = TrimmedLog()


class TrimmedLog(CommitLog):
    min_offset = 1000


async def test_a_slave_needing_deleted_log_is_told_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The error names the slave, the offset it needs and where this master's log starts; the
    transfer loop keeps heartbeating, without repeating the line."""
    ha = await started(tmp_path, TrimmedStore(), haHousekeepingInterval=10_000)
    try:
        with caplog.at_level(logging.INFO, logger=master_module.__name__):
            reader, writer = await asyncio.open_connection("127.0.0.1", ha.port)
            local = writer.get_extra_info("sockname")
            writer.write(encode_offset(500))
            for _ in range(3):  # three heartbeats: three turns of the loop past the missing log
                got = await frames_until_heartbeat(reader)
                assert got[-1][:2] == (500, 0)
            writer.close()
    finally:
        await ha.stop()
    wanted = f"slave {local[0]}:{local[1]} needs commit-log offset 500, which this master no longer has (from 1000)"
    assert [m for m in messages(caplog) if "no longer has" in m] == [wanted]


class EmptyStore(Store):
    """A master that has stored nothing yet."""

    def __init__(self) -> None:
        super().__init__()
        self.commit_log = EmptyLog()
        self.commit_log_max_offset = 0


class EmptyLog(CommitLog):
    max_offset = 0


async def test_an_empty_master_and_slave_exchange_heartbeats_without_an_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Offset 0 on a master holding nothing is not missing log: no "no longer has" error."""
    ha = await started(tmp_path, EmptyStore(), haHousekeepingInterval=10_000)
    try:
        with caplog.at_level(logging.INFO, logger=master_module.__name__):
            reader, writer = await asyncio.open_connection("127.0.0.1", ha.port)
            writer.write(encode_offset(0))
            for _ in range(2):
                got = await frames_until_heartbeat(reader)
                assert got[-1][:2] == (0, 0)
            writer.close()
    finally:
        await ha.stop()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
