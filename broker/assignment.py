"""Queues assigned by the broker: RocketMQ 5's server-side rebalance.

A 5.x push consumer built with ``setClientRebalance(false)`` does not allocate queues itself:
for each topic it asks one broker of the route (QUERY_ASSIGNMENT, 400) which queues it owns and
how to read them. The broker allocates the topic's queues on every broker (the route as the
name servers know it) among the group's live clients with the strategy the client names
(``AVG`` or ``AVG_BY_CIRCLE``, the two Apache registers), and marks each queue with the group's
message request mode:

- ``PULL``: the client pulls the queue as usual (a retry topic is always read so);
- ``POP``: the client pops. With ``popShareQueueNum`` at most 0 (or at least the number of
  clients less one) every client pops every broker's queues, each broker's given as queue id
  -1 ("any queue of that broker"); otherwise a client also shares the queues of the next
  ``popShareQueueNum`` clients of the sorted list.

The mode is set per topic and group (SET_MESSAGE_REQUEST_MODE, 401, ``mqadmin
setConsumeMode``) and kept in ``config/messageRequestMode.json`` in Apache's format, which
GET_ALL_MESSAGE_REQUEST_MODE (402) answers whole. A query the broker cannot answer (unknown
topic, group with no live client, unknown strategy) gets an empty body, which the client takes
as "keep what you have", as Apache does.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from aiorocketmq.client.allocation import AllocateStrategy, allocate_averagely, allocate_averagely_by_circle
from aiorocketmq.protocol.body import MessageModel, MessageQueue
from aiorocketmq.protocol.names import is_retry_topic

from .clients import ClientRegistry
from .config_files import ConfigFile

log = logging.getLogger(__name__)

#: The strategies a client may name, under Apache's names for them.
STRATEGIES: dict[str, AllocateStrategy] = {
    "AVG": allocate_averagely,
    "AVG_BY_CIRCLE": allocate_averagely_by_circle,
}

#: A POP assignment's queue id meaning "any queue of this broker".
ANY_QUEUE = -1


class RequestMode(StrEnum):
    PULL = "PULL"
    POP = "POP"


@dataclass(frozen=True, slots=True)
class RequestModeSetting:
    """How one group reads one topic (Apache's ``SetMessageRequestModeRequestBody``)."""

    topic: str
    consumer_group: str
    mode: RequestMode = RequestMode.PULL
    pop_share_queue_num: int = 0

    @classmethod
    def from_wire(cls, data: Any) -> RequestModeSetting:
        if not isinstance(data, dict):
            raise ValueError("a message request mode must be a JSON object")
        topic, group = data.get("topic"), data.get("consumerGroup")
        if not isinstance(topic, str) or not topic or not isinstance(group, str) or not group:
            raise ValueError("a message request mode needs a topic and a consumerGroup")
        mode = data.get("mode") or "PULL"
        if mode not in RequestMode.__members__:
            raise ValueError(f"unknown message request mode {mode!r} (PULL or POP)")
        share = data.get("popShareQueueNum", 0)
        if isinstance(share, bool) or not isinstance(share, int):
            raise ValueError(f"popShareQueueNum must be an integer, not {share!r}")
        return cls(topic, group, RequestMode(mode), share)

    def to_wire(self) -> dict[str, Any]:
        return {
            "consumerGroup": self.consumer_group,
            "mode": self.mode.value,
            "popShareQueueNum": self.pop_share_queue_num,
            "topic": self.topic,
        }


class RequestModeTable:
    """The modes set per topic and group, persisted as ``config/messageRequestMode.json``."""

    def __init__(self, config_dir: Path) -> None:
        self.file = ConfigFile(config_dir / "messageRequestMode.json")
        self.modes: dict[str, dict[str, RequestModeSetting]] = {}

    def load(self) -> None:
        raw = self.file.load()
        table = raw.get("messageRequestModeMap") if isinstance(raw, dict) else None
        if not isinstance(table, dict):
            return
        for topic, groups in table.items():
            if not isinstance(groups, dict):
                continue
            for group, setting in groups.items():
                try:
                    self.modes.setdefault(topic, {})[group] = RequestModeSetting.from_wire(setting)
                except ValueError as exc:
                    log.warning("%s: skipping the mode of %s/%s: %s", self.file.path, topic, group, exc)

    def encode(self) -> bytes:
        table = {
            topic: {group: s.to_wire() for group, s in sorted(groups.items())}
            for topic, groups in sorted(self.modes.items())
        }
        return json.dumps({"messageRequestModeMap": table}, indent=1).encode()

    def get(self, topic: str, group: str) -> RequestModeSetting | None:
        return self.modes.get(topic, {}).get(group)

    async def put(self, setting: RequestModeSetting) -> None:
        self.modes.setdefault(setting.topic, {})[setting.consumer_group] = setting
        await self.file.save(self.encode())


def allocate_for_pop(
    strategy: AllocateStrategy,
    group: str,
    client_id: str,
    queues: Sequence[MessageQueue],
    client_ids: Sequence[str],
    share: int,
) -> list[MessageQueue]:
    """The queues a POP client reads: every broker's (as queue id -1) when ``share`` does not
    limit them, else its own share plus those of the next ``share`` clients, or, with more
    clients than queues, the one queue its position points to."""
    if share <= 0 or share >= len(client_ids) - 1:
        return sorted(
            {MessageQueue(topic=q.topic, broker_name=q.broker_name, queue_id=ANY_QUEUE) for q in queues}
        )
    if client_id not in client_ids:
        return []
    index = list(client_ids).index(client_id)
    if len(client_ids) > len(queues):
        return [queues[index % len(queues)]]
    owned = set(strategy(group, client_id, queues, client_ids))
    for step in range(1, share + 1):
        other = client_ids[(index + step) % len(client_ids)]
        owned.update(strategy(group, other, queues, client_ids))
    return sorted(owned)


#: Where the assigner finds a topic's readable queues on every broker (None: unknown topic).
QueueSource = Callable[[str], Awaitable["set[MessageQueue] | None"]]


class Assigner:
    """Answers QUERY_ASSIGNMENT from the route, the live clients and the mode table."""

    def __init__(
        self,
        modes: RequestModeTable,
        clients: ClientRegistry,
        queues_of: QueueSource,
        *,
        default_mode: RequestMode = RequestMode.PULL,
        default_pop_share: int = -1,
        load_balance: bool = True,
    ) -> None:
        self.modes = modes
        self.clients = clients
        self.queues_of = queues_of
        self.default_mode = default_mode
        self.default_pop_share = default_pop_share
        self.load_balance = load_balance

    def mode_of(self, topic: str, group: str) -> RequestModeSetting:
        found = self.modes.get(topic, group)
        if found is not None:
            return found
        # A retry topic is always pulled: its messages go back through the consumer's own
        # retry path, which POP does not use.
        mode = RequestMode.PULL if is_retry_topic(topic) else self.default_mode
        share = self.default_pop_share if mode is RequestMode.POP else 0
        return RequestModeSetting(topic, group, mode, share)

    async def assign(
        self, topic: str, group: str, client_id: str, strategy_name: str, model: str
    ) -> tuple[list[MessageQueue], RequestMode] | None:
        """The client's queues and how to read them; None when the broker cannot tell."""
        setting = self.mode_of(topic, group)
        queues = await self.queues_of(topic)
        if queues is None:
            if not is_retry_topic(topic):
                log.warning("no assignment for %s of %s: the topic is not known", group, topic)
            return None
        if model == MessageModel.BROADCASTING:
            return sorted(queues), setting.mode
        if model != MessageModel.CLUSTERING:
            return None
        if not self.load_balance:
            return sorted(queues), setting.mode
        members = self.clients.consumer_group(group)
        if members is None:
            log.warning("no assignment for %s of %s: the group has no live client", group, topic)
            return None
        strategy = STRATEGIES.get(strategy_name)
        if strategy is None:
            log.warning("no assignment for %s of %s: unknown strategy %r", group, topic, strategy_name)
            return None
        ordered, client_ids = sorted(queues), sorted(members.client_ids())
        try:
            if setting.mode is RequestMode.POP:
                owned = allocate_for_pop(
                    strategy, group, client_id, ordered, client_ids, setting.pop_share_queue_num
                )
            else:
                owned = strategy(group, client_id, ordered, client_ids)
        except ValueError as exc:
            log.warning("no assignment for %s of %s: %s", group, topic, exc)
            return None
        return owned, setting.mode
