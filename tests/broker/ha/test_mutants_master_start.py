"""Opening the HA master's port: the address and port it binds, the port it reports, and the line
it logs (tests written for surviving mutants of ReplicationMaster.start)."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest

from aiorocketmq.broker.ha import master as master_module
from aiorocketmq.broker.ha.master import ReplicationMaster
from tests.store.support import small_config


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize(("sync", "role"), [(True, "SYNC_MASTER"), (False, "ASYNC")])
async def test_the_ha_port_opens_on_the_configured_address_and_port(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, sync: bool, role: str
) -> None:
    """``haListenPort`` on the broker's address: the master listens exactly there (not on every
    interface, not on a port of its choosing), reports that port, and logs it with its role."""
    port = free_port()
    ha = ReplicationMaster(None, small_config(tmp_path), sync=sync)  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger=master_module.__name__):
        assert await ha.start("127.0.0.1", port) == port
    try:
        assert ha.port == port
        assert ha._server is not None
        assert [s.getsockname() for s in ha._server.sockets] == [("127.0.0.1", port)]
        messages = [r.getMessage() for r in caplog.records if r.name == master_module.__name__]
        assert f"HA port open on 127.0.0.1:{port} ({role})" in messages
    finally:
        await ha.stop()
