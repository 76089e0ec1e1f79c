"""Who is connected: producer and consumer groups, their connections and subscriptions.

Heartbeats register a connection (with the client id it announced) under its groups and keep
the consumer groups' subscriptions; a closed connection, an UNREGISTER_CLIENT or two minutes
without a heartbeat remove it. Whenever a consumer group's membership or topic set changes,
``on_consumers_changed`` fires so the broker can tell the members to rebalance.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from aiorocketmq.protocol.body import (
    ConsumeFromWhere,
    ConsumerData,
    ConsumeType,
    MessageModel,
    SubscriptionData,
)
from aiorocketmq.protocol.codes import RequestCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.headers import NotifyConsumerIdsChangedRequestHeader
from aiorocketmq.protocol.transport import Connection

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ClientChannel:
    """One client connection as a group member."""

    conn: Connection
    client_id: str
    language: str
    version: int
    last_update: float = field(default_factory=time.monotonic)


@dataclass(slots=True)
class ConsumerGroup:
    name: str
    consume_type: ConsumeType = ConsumeType.CONSUME_PASSIVELY
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    channels: dict[Connection, ClientChannel] = field(default_factory=dict)
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)
    last_update: float = field(default_factory=time.monotonic)

    def client_ids(self) -> list[str]:
        return [channel.client_id for channel in self.channels.values()]

    def notify_ids_changed(self) -> None:
        """Tell every live member the group changed (NOTIFY_CONSUMER_IDS_CHANGED), so each
        rebalances now rather than at its next periodic rebalance."""
        fields = NotifyConsumerIdsChangedRequestHeader(consumer_group=self.name).to_fields()
        for conn in list(self.channels):
            if not conn.closed:
                # Server-initiated requests go out as JSON: C++ and JS clients read nothing else.
                conn.send_oneway(
                    RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, dict(fields))
                )

    def update_subscriptions(self, subscriptions: list[SubscriptionData]) -> bool:
        """Adopt a heartbeat's subscriptions; True when the topic set changed."""
        changed = False
        topics = set()
        for sub in subscriptions:
            topics.add(sub.topic)
            old = self.subscriptions.get(sub.topic)
            if old is None:
                self.subscriptions[sub.topic] = sub
                changed = True
            elif sub.sub_version > old.sub_version or sub.sub_string != old.sub_string:
                self.subscriptions[sub.topic] = sub
        for topic in [t for t in self.subscriptions if t not in topics]:
            del self.subscriptions[topic]
            changed = True
        return changed


class ClientRegistry:
    def __init__(self, on_consumers_changed: Callable[[ConsumerGroup], None] | None = None) -> None:
        self.consumers: dict[str, ConsumerGroup] = {}
        self.producers: dict[str, dict[Connection, ClientChannel]] = {}
        self.on_consumers_changed = on_consumers_changed

    # -- registration ---------------------------------------------------------------------

    def register_consumer(self, channel: ClientChannel, data: ConsumerData) -> bool:
        group = self.consumers.get(data.group_name)
        if group is None:
            group = self.consumers[data.group_name] = ConsumerGroup(data.group_name)
        group.consume_type = data.consume_type
        group.message_model = data.message_model
        group.consume_from_where = data.consume_from_where
        existing = group.channels.get(channel.conn)
        if existing is None:
            group.channels[channel.conn] = channel
            joined = True
        else:
            existing.client_id = channel.client_id
            existing.last_update = channel.last_update
            joined = False
        group.last_update = channel.last_update
        changed = group.update_subscriptions(data.subscription_data_set) or joined
        if changed:
            log.info(
                "consumer group %s: %s %s (%d members)",
                group.name,
                channel.client_id,
                "joined" if joined else "changed subscriptions",
                len(group.channels),
            )
            self._notify(group)
        return changed

    def register_producer(self, channel: ClientChannel, group_name: str) -> None:
        members = self.producers.setdefault(group_name, {})
        existing = members.get(channel.conn)
        if existing is None:
            members[channel.conn] = channel
        else:
            existing.last_update = channel.last_update

    def unregister_consumer(self, group_name: str, conn: Connection) -> None:
        group = self.consumers.get(group_name)
        if group is None or group.channels.pop(conn, None) is None:
            return
        if not group.channels:
            del self.consumers[group_name]
        else:
            self._notify(group)

    def unregister_producer(self, group_name: str, conn: Connection) -> None:
        members = self.producers.get(group_name)
        if members is not None:
            members.pop(conn, None)
            if not members:
                del self.producers[group_name]

    def connection_closed(self, conn: Connection) -> None:
        """Remove a connection from every group it belonged to."""
        for name in [n for n, g in self.consumers.items() if conn in g.channels]:
            self.unregister_consumer(name, conn)
        for name in [n for n, m in self.producers.items() if conn in m]:
            self.unregister_producer(name, conn)

    def expire(self, max_idle_seconds: float) -> list[Connection]:
        """Drop channels without a heartbeat for ``max_idle_seconds``; returns their connections."""
        deadline = time.monotonic() - max_idle_seconds
        stale = {
            ch.conn
            for g in self.consumers.values()
            for ch in g.channels.values()
            if ch.last_update < deadline
        }
        stale |= {
            ch.conn
            for members in self.producers.values()
            for ch in members.values()
            if ch.last_update < deadline
        }
        for conn in stale:
            log.info("client %s expired after %.0fs without heartbeat", conn.address, max_idle_seconds)
            self.connection_closed(conn)
        return list(stale)

    def _notify(self, group: ConsumerGroup) -> None:
        if self.on_consumers_changed is not None:
            self.on_consumers_changed(group)

    # -- queries --------------------------------------------------------------------------

    def consumer_group(self, name: str) -> ConsumerGroup | None:
        return self.consumers.get(name)

    def producer_channels(self, group_name: str) -> list[ClientChannel]:
        return [ch for ch in self.producers.get(group_name, {}).values() if not ch.conn.closed]

    def groups_subscribing(self, topic: str) -> Iterator[ConsumerGroup]:
        for group in self.consumers.values():
            if topic in group.subscriptions:
                yield group

    def producer_connection(self, client_id: str) -> Connection | None:
        """The live connection a producer with ``client_id`` heartbeats on (where replies to
        its requests are pushed), None when no producer of that id is connected."""
        for members in self.producers.values():
            for channel in members.values():
                if channel.client_id == client_id and not channel.conn.closed:
                    return channel.conn
        return None
