"""The HA master's port in process, on a real loopback socket with a stand-in commit log: where
transfer starts, frames that never cross a file's end, heartbeats, acks, and the slaves it turns
away (tests written for the HA port's mutants of broker/ha/master.py that no test reached)."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from aiorocketmq.broker.ha import master as master_module
from aiorocketmq.broker.ha.master import ReplicationMaster
from aiorocketmq.broker.ha.wire import FrameReader, encode_offset
from aiorocketmq.broker.store import PutStatus
from tests.store.support import small_config

FILE_SIZE = 1000
END = 2500
LOG = bytes(i % 251 for i in range(END))


class CommitLog:
    """Three files of 1,000 bytes, the last one half written: [0, 2500)."""

    file_size = FILE_SIZE
    min_offset = 0
    max_offset = END

    def data_at(self, offset: int, max_bytes: int) -> bytes | None:
        if offset < self.min_offset or offset >= self.max_offset:
            return None
        file_end = (offset // FILE_SIZE + 1) * FILE_SIZE
        return LOG[offset : min(offset + max_bytes, file_end, self.max_offset)]


class Store:
    def __init__(self) -> None:
        self.commit_log = CommitLog()
        self.commit_log_max_offset = END


@pytest.fixture
async def ha(tmp_path: Path) -> AsyncIterator[ReplicationMaster]:
    config = small_config(
        tmp_path, haTransferBatchSize=300, haSendHeartbeatInterval=1, haHousekeepingInterval=10_000
    )
    master = ReplicationMaster(Store(), config, sync=True)  # type: ignore[arg-type]
    await master.start("127.0.0.1", 0)
    try:
        yield master
    finally:
        await master.stop()


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(10):
        while not condition():  # noqa: ASYNC110 (a link leaves no event to wait on)
            await asyncio.sleep(0.005)


async def frames_until_heartbeat(reader: asyncio.StreamReader) -> list[tuple[int, int, bytes]]:
    """The master's frames as (offset, size, body) up to and including the first heartbeat."""
    frames = FrameReader()
    got: list[tuple[int, int, bytes]] = []
    async with asyncio.timeout(10):
        while not got or got[-1][1] != 0:
            data = await reader.read(65536)
            assert data, "the master closed the connection"
            got += [(offset, len(body), body) for offset, body in frames.feed(data)]
    return got


async def test_an_empty_slave_gets_the_last_file_in_batches_then_heartbeats(ha: ReplicationMaster) -> None:
    """A slave reporting 0 starts at the master's last commit-log file (RocketMQ's rule), gets
    it in frames of at most haTransferBatchSize, then heartbeats at the end; its ack of the end
    answers a SYNC send and shows in the slave list."""
    reader, writer = await asyncio.open_connection("127.0.0.1", ha.port)
    try:
        await until(lambda: len(ha.links) == 1)
        assert not ha.slave_ok(END) or ha.acked_offset == 0
        writer.write(encode_offset(0))
        got = await frames_until_heartbeat(reader)
        assert [(o, n) for o, n, _ in got] == [(2000, 300), (2300, 200), (2500, 0)]
        assert b"".join(body for _, _, body in got) == LOG[2000:]
        waiting = asyncio.ensure_future(ha.wait(END))
        writer.write(encode_offset(END))
        assert await asyncio.wait_for(waiting, 10) is PutStatus.PUT_OK
        local = writer.get_extra_info("sockname")
        [slave] = ha.slaves()
        assert slave == {
            "address": f"{local[0]}:{local[1]}",
            "ackOffset": str(END),
            "lagBytes": "0",
            "bytesSent": "500",
        }
    finally:
        writer.close()
    await until(lambda: not ha.links)


async def test_a_slave_resuming_mid_log_gets_frames_that_never_cross_a_file_end(
    ha: ReplicationMaster,
) -> None:
    """A slave reporting 900 is sent from 900 on, each frame within one commit-log file."""
    reader, writer = await asyncio.open_connection("127.0.0.1", ha.port)
    try:
        writer.write(encode_offset(900))
        got = await frames_until_heartbeat(reader)
        assert [(o, n) for o, n, _ in got] == [
            (900, 100),
            (1000, 300),
            (1300, 300),
            (1600, 300),
            (1900, 100),
            (2000, 300),
            (2300, 200),
            (2500, 0),
        ]
        assert b"".join(body for _, _, body in got) == LOG[900:]
    finally:
        writer.close()


async def test_reports_split_across_reads_are_put_together(ha: ReplicationMaster) -> None:
    """The slave's 8-byte reports may arrive in pieces: only complete ones count."""
    reader, writer = await asyncio.open_connection("127.0.0.1", ha.port)
    try:
        report = encode_offset(1000)
        writer.write(report[:3])
        await writer.drain()
        await asyncio.sleep(0.05)
        assert ha.acked_offset == 0
        writer.write(report[3:])
        got = await frames_until_heartbeat(reader)
        assert got[0][:2] == (1000, 300)
        assert ha.acked_offset == 1000
    finally:
        writer.close()


async def test_a_slave_with_more_log_than_the_master_is_refused(ha: ReplicationMaster) -> None:
    """A slave reporting an offset past the master's end has diverged: the master counts and
    explains the refusal and closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", ha.port)
    try:
        writer.write(encode_offset(END + 1))
        async with asyncio.timeout(10):
            assert await reader.read(65536) == b""
        await until(lambda: not ha.links)
        local = writer.get_extra_info("sockname")
        assert ha.refused == 1
        assert ha.last_refusal == (
            f"slave {local[0]}:{local[1]} reports commit-log offset {END + 1}, beyond this master's "
            f"end {END}: its log has diverged from the master's; refusing it"
        )
        assert ha.runtime_info()["haSlavesRefused"] == "1"
        assert ha.acked_offset == 0
    finally:
        writer.close()


async def test_a_slave_reporting_exactly_the_master_end_is_kept(ha: ReplicationMaster) -> None:
    """A slave that holds the whole log reports the master's end: not ahead, so it stays."""
    reader, writer = await asyncio.open_connection("127.0.0.1", ha.port)
    try:
        writer.write(encode_offset(END))
        got = await frames_until_heartbeat(reader)
        assert [(o, n) for o, n, _ in got] == [(2500, 0)]
        assert ha.refused == 0 and len(ha.links) == 1 and ha.acked_offset == END
    finally:
        writer.close()


async def test_a_silent_slave_is_dropped_after_the_housekeeping_interval(tmp_path: Path) -> None:
    """A slave that reports nothing for haHousekeepingInterval is disconnected."""
    config = small_config(tmp_path, haHousekeepingInterval=50)
    ha = ReplicationMaster(Store(), config, sync=True)  # type: ignore[arg-type]
    await ha.start("127.0.0.1", 0)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", ha.port)
        async with asyncio.timeout(10):
            assert await reader.read(65536) == b""
        await until(lambda: not ha.links)
        writer.close()
    finally:
        await ha.stop()


async def test_a_slave_connection_sends_without_delay_and_is_logged(
    ha: ReplicationMaster, caplog: pytest.LogCaptureFixture
) -> None:
    """Each slave's socket has TCP_NODELAY, so small frames (and a SYNC_MASTER's waits on the
    acks they bring) are not held back by Nagle's algorithm; the connection is logged."""
    with caplog.at_level(logging.INFO, logger=master_module.__name__):
        _reader, writer = await asyncio.open_connection("127.0.0.1", ha.port)
        try:
            await until(lambda: len(ha.links) == 1)
            [slave] = ha.links
            assert slave.writer is not None
            sock = slave.writer.get_extra_info("socket")
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
            local = writer.get_extra_info("sockname")
            messages = [r.getMessage() for r in caplog.records if r.name == master_module.__name__]
            assert f"slave {local[0]}:{local[1]} connected to the HA port (1 connected)" in messages
        finally:
            writer.close()


class _AsyncioRecordingTimeouts:
    """The master module's ``asyncio``, recording the length of every ``asyncio.timeout``."""

    def __init__(self) -> None:
        self.timeouts: list[float | None] = []

    def timeout(self, delay: float | None) -> asyncio.Timeout:
        self.timeouts.append(delay)
        return asyncio.timeout(delay)

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)


async def test_the_master_waits_on_a_slave_exactly_its_configured_intervals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slave is given haHousekeepingInterval (ms) to report before it is dropped, and an idle
    writer looks again after the shorter of 100 ms and haSendHeartbeatInterval (ms)."""
    recording = _AsyncioRecordingTimeouts()
    monkeypatch.setattr(master_module, "asyncio", recording)
    config = small_config(tmp_path, haHousekeepingInterval=20_000, haSendHeartbeatInterval=50)
    master = ReplicationMaster(Store(), config, sync=True)  # type: ignore[arg-type]
    await master.start("127.0.0.1", 0)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", master.port)
        writer.write(encode_offset(END))
        await frames_until_heartbeat(reader)
        writer.close()
        assert 20.0 in recording.timeouts
        assert 0.05 in recording.timeouts
        # (and a writer waits haWriteTimeout for the slave to read what it was sent)
        assert set(recording.timeouts) == {20.0, 0.05, master.security.write_timeout}
    finally:
        await master.stop()


async def test_every_refused_slave_is_counted(ha: ReplicationMaster) -> None:
    """``haSlavesRefused`` counts each diverged slave turned away, not just whether one was."""
    for _ in range(2):
        reader, writer = await asyncio.open_connection("127.0.0.1", ha.port)
        writer.write(encode_offset(END + 100))
        async with asyncio.timeout(10):
            assert await reader.read(65536) == b""
        writer.close()
    assert ha.refused == 2
    assert ha.runtime_info()["haSlavesRefused"] == "2"


async def test_an_up_to_date_slave_gets_no_heartbeat_before_the_interval(tmp_path: Path) -> None:
    """Heartbeats go out every haSendHeartbeatInterval of silence, not on every idle look (every
    100 ms): a slave holding the whole log hears nothing for a while after connecting."""
    config = small_config(tmp_path, haSendHeartbeatInterval=60_000)
    master = ReplicationMaster(Store(), config, sync=True)  # type: ignore[arg-type]
    await master.start("127.0.0.1", 0)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", master.port)
        writer.write(encode_offset(END))
        await until(lambda: master.acked_offset == END)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.5):  # five idle looks of the writer
                await reader.read(65536)
        writer.close()
    finally:
        await master.stop()
