"""Recall handles (RocketMQ 5.x ``RecallMessageHandle``): what a broker returns with each timer
message it accepts, and what RECALL_MESSAGE (370) later names to cancel that message before
its delivery time.

A handle is URL-safe base64 (padded) of ``"v1 <topic> <broker name> <timestamp> <message id>"``:
the timestamp is the message's delivery time plus one millisecond, the message id its client
unique id (``UNIQ_KEY``). Any client can decode it; the broker that issued it is the one asked.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from .errors import ProtocolError

VERSION = "v1"


@dataclass(frozen=True, slots=True)
class RecallHandle:
    topic: str
    broker_name: str
    timestamp: str
    message_id: str

    def encode(self) -> str:
        raw = " ".join((VERSION, self.topic, self.broker_name, self.timestamp, self.message_id))
        return base64.urlsafe_b64encode(raw.encode()).decode()

    @classmethod
    def decode(cls, handle: str) -> RecallHandle:
        """The handle's parts; ProtocolError ("recall handle is invalid") for anything else."""
        if not handle:
            raise ProtocolError("recall handle is invalid")
        try:
            raw = base64.b64decode(handle + "=" * (-len(handle) % 4), altchars=b"-_", validate=True)
            items = raw.decode().split(" ")
        except (binascii.Error, ValueError, UnicodeDecodeError):
            raise ProtocolError("recall handle is invalid") from None
        while items and not items[-1]:
            items.pop()  # as Java's split drops trailing empty strings
        if len(items) < 5 or items[0] != VERSION:
            raise ProtocolError("recall handle is invalid")
        return cls(items[1], items[2], items[3], items[4])


def delete_key(topic: str, unique_id: str) -> str:
    """What a recall marker's ``TIMER_DEL_UNIQKEY`` holds for the message it cancels."""
    return f"{topic}+{unique_id}"
