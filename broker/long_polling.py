"""Compiled with mypyc (aiorocketmq/compiled.py, which lists the rules): declared, typed
attributes only; no monkeypatching, setattr or frame tricks; no await in except/finally.

Long polling: pulls that found nothing wait here until a matching message arrives in their
queue or their suspend timeout passes, then run again and are answered.

Arrivals are pushed by the store's arrival listener the moment a message is dispatched; a
periodic recheck (every 5 s) catches anything else. A held pull carries the function that
runs it again (the pull handler's), so this module knows nothing of how pulls are served.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.transport import Connection, error_response

log = logging.getLogger(__name__)

RECHECK_INTERVAL = 5.0

#: Runs a held pull again: its response, or ``None`` when it answered some other way.
Repull: TypeAlias = Callable[[Connection, RemotingCommand], "RemotingCommand | None"]
#: ``max_offset(topic, queue_id)``: the next offset the queue will hand out.
MaxOffset: TypeAlias = Callable[[str, int], int]


@dataclass(slots=True, eq=False)
class HeldPull:
    conn: Connection
    cmd: RemotingCommand
    offset: int
    tag_codes: frozenset[int] | None
    repull: Repull
    timer: asyncio.TimerHandle | None = None


class LongPolling:
    def __init__(self, max_offset: MaxOffset) -> None:
        self._max_offset = max_offset
        self._held: dict[tuple[str, int], list[HeldPull]] = {}

    @property
    def held_count(self) -> int:
        return sum(len(v) for v in self._held.values())

    def hold(
        self,
        conn: Connection,
        cmd: RemotingCommand,
        topic: str,
        queue_id: int,
        offset: int,
        tag_codes: frozenset[int] | None,
        timeout_ms: int,
        repull: Repull,
    ) -> None:
        """Hold a pull of ``topic``/``queue_id`` that found nothing from ``offset`` on, until a
        message matching ``tag_codes`` (``None``: any) arrives there or ``timeout_ms`` passes;
        then ``repull`` answers it."""
        key = (topic, queue_id)
        held = HeldPull(conn, cmd, offset, tag_codes, repull)
        held.timer = asyncio.get_running_loop().call_later(max(0, timeout_ms) / 1000, self._expire, key, held)
        self._held.setdefault(key, []).append(held)

    def on_arrival(self, topic: str, queue_id: int, max_offset: int, tags_code: int) -> None:
        """Store listener: a message was dispatched to (topic, queue_id)."""
        waiting = self._held.get((topic, queue_id))
        if not waiting:
            return
        keep = []
        for held in waiting:
            if max_offset > held.offset and (held.tag_codes is None or tags_code in held.tag_codes):
                self._wake(held)
            else:
                keep.append(held)
        self._settle((topic, queue_id), keep)

    def _expire(self, key: tuple[str, int], held: HeldPull) -> None:
        waiting = self._held.get(key)
        if waiting is None or held not in waiting:
            return
        waiting.remove(held)
        self._settle(key, waiting)
        held.timer = None
        self._wake(held)

    def _settle(self, key: tuple[str, int], remaining: list[HeldPull]) -> None:
        if remaining:
            self._held[key] = remaining
        else:
            self._held.pop(key, None)

    def _wake(self, held: HeldPull) -> None:
        if held.timer is not None:
            held.timer.cancel()
            held.timer = None
        if held.conn.closed:
            return
        try:
            response = held.repull(held.conn, held.cmd)
        except Exception as exc:
            log.warning("held pull failed on wake-up: %s", exc)
            response = error_response(held.cmd, exc)
        if response is not None and not held.cmd.is_oneway:
            held.conn.send_response(response)

    def recheck(self) -> None:
        """Wake every held pull whose queue has grown past its offset."""
        for key in list(self._held):
            waiting = self._held.get(key)
            if not waiting:
                continue
            max_offset = self._max_offset(*key)
            keep = []
            for held in waiting:
                if max_offset > held.offset:
                    self._wake(held)
                else:
                    keep.append(held)
            self._settle(key, keep)

    async def recheck_periodically(self) -> None:
        while True:
            await asyncio.sleep(RECHECK_INTERVAL)
            self.recheck()

    def connection_closed(self, conn: Connection) -> None:
        for key in list(self._held):
            waiting = self._held[key]
            keep = []
            for held in waiting:
                if held.conn is conn:
                    if held.timer is not None:
                        held.timer.cancel()
                else:
                    keep.append(held)
            self._settle(key, keep)

    def clear(self) -> None:
        for waiting in self._held.values():
            for held in waiting:
                if held.timer is not None:
                    held.timer.cancel()
        self._held.clear()
