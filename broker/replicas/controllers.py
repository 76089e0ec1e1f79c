"""The broker's link to the controllers: their addresses (or a domain name resolved), which
one leads (CONTROLLER_GET_METADATA_INFO), one connection to each, requests to the leader, and
one-way heartbeats to every one it can reach."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import Any

from aiorocketmq.protocol.codes import ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.controller import (
    ControllerRequestCode,
    ControllerResponseCode,
    GetMetaDataResponseHeader,
)
from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.loop import cancel_and_wait
from aiorocketmq.protocol.message import split_address
from aiorocketmq.protocol.transport import Connection, Signer, connect

from ..config import BrokerConfig

log = logging.getLogger(__name__)

#: Timeout of each request to a controller (Apache's 3 s).
REQUEST_TIMEOUT = 3.0


class ControllerError(Exception):
    """A controller refused a request (its response code and remark)."""

    def __init__(self, code: int, remark: str | None) -> None:
        super().__init__(f"code {code}: {remark or ''}")
        self.code = code


class Controllers:
    """``controllerAddr``'s controllers as one broker talks to them."""

    def __init__(self, config: BrokerConfig, *, signer: Signer | None = None) -> None:
        self.config = config
        self.signer = signer
        self.addresses: list[str] = config.controller_addrs
        self.leader_address = ""
        self._conns: dict[str, Connection] = {}
        self._conn_locks: dict[str, asyncio.Lock] = {}
        self._connecting: dict[str, asyncio.Task[None]] = {}
        self._refreshing: asyncio.Task[bool] | None = None
        self._closed = False

    async def close(self) -> None:
        self._closed = True
        await cancel_and_wait(self._refreshing, *self._connecting.values())
        for conn in self._conns.values():
            conn.close("broker shutting down")
        self._conns.clear()

    async def resolve(self) -> None:
        """``controllerAddr`` as configured, or, with ``fetchControllerAddrByDnsLookup``, the
        addresses its names resolve to (kept when none resolves)."""
        if not self.config.fetch_controller_addr_by_dns_lookup:
            self.addresses = self.config.controller_addrs
            return
        resolved: list[str] = []
        loop = asyncio.get_running_loop()
        for entry in self.config.controller_addrs:
            host, port = split_address(entry)
            try:
                infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except OSError as exc:
                log.warning("cannot resolve controller address %s: %s", entry, exc)
                continue
            for info in infos:
                addr = f"{info[4][0]}:{port}"
                if addr not in resolved:
                    resolved.append(addr)
        if resolved:
            self.addresses = resolved

    async def _connection(self, address: str) -> Connection:
        lock = self._conn_locks.setdefault(address, asyncio.Lock())
        async with lock:  # one connection per controller, however many ask at once
            conn = self._conns.get(address)
            if conn is None or conn.closed:
                host, port = split_address(address)
                conn = await connect(
                    host, port, name="broker->controller", timeout=REQUEST_TIMEOUT, signer=self.signer
                )
                self._conns[address] = conn
            return conn

    async def call(
        self, address: str, code: int, fields: dict[str, Any] | None = None, body: bytes = b""
    ) -> RemotingCommand:
        """A request to a controller; its response whatever the code (MQError when none came)."""
        if not address:
            raise ControllerError(ControllerResponseCode.CONTROLLER_NOT_LEADER, "no controller leader known")
        conn = await self._connection(address)
        try:
            return await conn.request(RemotingCommand.request(code, fields, body), REQUEST_TIMEOUT)
        except MQError:
            conn.abort()
            raise

    async def call_leader(
        self, code: int, fields: dict[str, Any] | None = None, body: bytes = b""
    ) -> RemotingCommand:
        """A request to the leader; a leader that does not answer or says it no longer leads is
        looked for again at once (Apache waits for its next periodic look)."""
        try:
            response = await self.call(self.leader_address, code, fields, body)
        except (MQError, OSError):
            self._refresh_soon()
            raise
        if response.code == ControllerResponseCode.CONTROLLER_NOT_LEADER:
            self._refresh_soon()
        return response

    def _refresh_soon(self) -> None:
        if not self._closed and (self._refreshing is None or self._refreshing.done()):
            self._refreshing = asyncio.ensure_future(self.update_leader())

    async def find_leader(self) -> bool:
        """The first look for the leader: three tries a second apart (Apache's)."""
        for attempt in range(3):
            if await self.update_leader():
                return True
            if attempt < 2:
                await asyncio.sleep(1.0)
        log.error("controller mode: no controller leader found at %s", ";".join(self.addresses))
        return False

    async def update_leader(self) -> bool:
        """CONTROLLER_GET_METADATA_INFO on each controller until one names the leader."""
        for address in self.addresses:
            try:
                response = await self.call(address, ControllerRequestCode.CONTROLLER_GET_METADATA_INFO)
            except (MQError, OSError, ValueError) as exc:
                log.debug("controller %s: %s", address, exc)
                continue
            if response.code != ResponseCode.SUCCESS:
                continue
            header = GetMetaDataResponseHeader.from_fields(response.ext_fields)
            if header.controller_leader_address:
                if header.controller_leader_address != self.leader_address:
                    log.info(
                        "controller leader is %s (%s)",
                        header.controller_leader_address,
                        header.controller_leader_id,
                    )
                self.leader_address = header.controller_leader_address
                return True
        return False

    def heartbeat(self, fields: dict[str, Any]) -> None:
        """BROKER_HEARTBEAT (``fields``), one-way, to every controller this broker is connected
        to; the others are connected to in the background (Apache's scan of the reachable
        controllers) and get the next one."""
        for address in self.addresses:
            conn = self._conns.get(address)
            if conn is not None and not conn.closed:
                with contextlib.suppress(MQError):
                    conn.send_oneway(
                        RemotingCommand.request(ControllerRequestCode.BROKER_HEARTBEAT, dict(fields))
                    )
            elif address not in self._connecting and not self._closed:
                self._connecting[address] = asyncio.ensure_future(self._reach(address))

    async def _reach(self, address: str) -> None:
        try:
            await self._connection(address)
        except (MQError, OSError, ValueError) as exc:
            log.debug("controller %s unreachable: %s", address, exc)
        finally:
            self._connecting.pop(address, None)
