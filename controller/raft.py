"""The replicas info replicated over the controllers by Raft (PySyncObj).

PySyncObj runs its own thread: it elects the Raft leader, replicates the log, and applies
committed entries to :class:`ReplicatedState` on that thread. :class:`RaftNode` bridges it to
asyncio: :meth:`RaftNode.append` returns when the events are committed and applied on this
replica (a future completed through ``call_soon_threadsafe``), and role changes are
delivered on the event loop. The state is only changed by applying log entries; reads and
the leader's request checks hold :attr:`ReplicatedState.lock`, as applying does.

The Raft journal and snapshot (``raft.journal``, ``raft.dump``) are kept in the controller's
store directory, so a restarted replica gets its state back (and catches up from the others).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

# PySyncObj replaces socket.inet_ntop on import, on every platform, with a Windows-only shim
# (pysyncobj/win_inet_pton.py) that fails everywhere else: keep the process's own, which the
# name server embedding this controller and everything else in the process use.
_inet_ntop, _inet_pton = socket.inet_ntop, socket.inet_pton
from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, SyncObjConsumer, replicated  # type: ignore[import-untyped]  # noqa: E402

socket.inet_ntop, socket.inet_pton = _inet_ntop, _inet_pton

from .replicas import Event, ReplicasInfo  # noqa: E402

log = logging.getLogger(__name__)

#: PySyncObj's Raft states (``_RAFT_STATE``).
FOLLOWER, CANDIDATE, LEADER = 0, 1, 2
ROLE_NAMES = {FOLLOWER: "follower", CANDIDATE: "candidate", LEADER: "leader"}


class RaftError(Exception):
    """An append that was not committed (leadership lost, timeout, queue full)."""


class ReplicatedState(SyncObjConsumer):
    """The replicas info as PySyncObj replicates it: one replicated method applies events."""

    def __init__(self, replicas: ReplicasInfo) -> None:
        # Set before the consumer's init: PySyncObj leaves these out of snapshots.
        self.lock = threading.RLock()
        self.replicas = replicas
        self.applied = 0
        super().__init__()

    @replicated
    def apply_events(self, events: list[Event]) -> int:
        with self.lock:
            self.replicas.apply_events(events)
            self.applied += 1
            return self.applied

    @replicated
    def barrier(self, tag: str) -> str:
        """A no-op entry: when it is applied, every entry before it is applied too."""
        return tag

    def _serialize(self) -> dict[str, Any]:
        with self.lock:
            return {"replicas": self.replicas.to_wire()}

    def _deserialize(self, data: dict[str, Any]) -> None:
        with self.lock:
            self.replicas.load_wire(data.get("replicas", {}))


class RaftNode:
    """This replica's PySyncObj, seen from asyncio."""

    def __init__(
        self,
        self_address: str,
        other_addresses: list[str],
        store_dir: Path,
        replicas: ReplicasInfo,
        loop: asyncio.AbstractEventLoop,
        on_role_changed: Callable[[int], None],
        *,
        election_timeout: float = 1.0,
    ) -> None:
        self.loop = loop
        self.on_role_changed = on_role_changed
        self.state = ReplicatedState(replicas)
        store_dir.mkdir(parents=True, exist_ok=True)
        conf = SyncObjConf(
            journalFile=str(store_dir / "raft.journal"),
            fullDumpFile=str(store_dir / "raft.dump"),
            useFork=False,
            dynamicMembershipChange=False,
            onStateChanged=self._state_changed,
            raftMinTimeout=0.4 * election_timeout,
            raftMaxTimeout=1.4 * election_timeout,
            appendEntriesPeriod=0.1 * election_timeout,
            connectionRetryTime=min(5.0, election_timeout),
            connectionTimeout=max(1.0, 3.5 * election_timeout),
            leaderFallbackTimeout=max(3.0, 5 * election_timeout),
        )
        self._closed = False
        self.sync = SyncObj(self_address, other_addresses, conf, consumers=[self.state])

    @property
    def lock(self) -> threading.RLock:
        return self.state.lock

    def _state_changed(self, old: int, new: int) -> None:
        """On PySyncObj's thread."""
        if self._closed:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: shutting down
            self.loop.call_soon_threadsafe(self.on_role_changed, new)

    def is_leader(self) -> bool:
        return bool(self.sync._isLeader())

    def leader_address(self) -> str | None:
        leader = self.sync._getLeader()
        return None if leader is None else str(leader.address)

    @property
    def term(self) -> int:
        return int(self.sync.raftCurrentTerm)

    async def _call(self, method: Callable[..., Any], *args: Any, timeout: float) -> Any:
        future: asyncio.Future[Any] = self.loop.create_future()

        def done(result: Any, error: int) -> None:  # on PySyncObj's thread
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(_settle, future, result, error)

        method(*args, callback=done)
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise RaftError(f"not committed within {timeout:g}s") from None

    async def append(self, events: list[Event], timeout: float = 5.0) -> None:
        """Replicate ``events``; returns once they are committed and applied here."""
        await self._call(self.state.apply_events, events, timeout=timeout)

    async def barrier(self, tag: str, timeout: float = 5.0) -> None:
        await self._call(self.state.barrier, tag, timeout=timeout)

    def status(self) -> dict[str, Any]:
        return dict(self.sync.getStatus())

    async def close(self) -> None:
        """Stop PySyncObj's thread (its sockets and journal closed) and wait for it."""
        self._closed = True
        with contextlib.suppress(Exception):
            self.sync.destroy()
        thread = getattr(self.sync, "_SyncObj__thread", None)
        if thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, thread.join, 10.0)


def _settle(future: asyncio.Future[Any], result: Any, error: int) -> None:
    if future.done():
        return
    if error == FAIL_REASON.SUCCESS:
        future.set_result(result)
    else:
        names = {v: k for k, v in vars(FAIL_REASON).items() if k.isupper()}
        future.set_exception(RaftError(f"Raft append failed: {names.get(error, error)}"))
