"""Check points and acks: what POP consumption writes to the revive log, and reads back.

Every pop writes one check point ("ck") per popped queue batch: which queue offsets went out,
when, for how long they are invisible, and each message's delivery attempt. Every ack, change
of invisible time, redelivery and dead-lettering then writes an "ack" (one offset) or "bAck"
(several) record naming the check point by its key. The records are messages of the system
topic ``rmq_sys_REVIVE_LOG_<cluster>`` in the broker's own commit log, with Apache's JSON
field names (``so pt it bm n q t c ro d bn`` for a check point, ``ao`` / ``aol`` for acks), so
they are as durable as any message and a broker killed with -9 rebuilds its in-flight table
from them. Two fields are ours: ``ac`` (delivery attempts, which an orderly pop needs) and
``rq`` (the reviveQid the handles carry).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from aiorocketmq.protocol.pop import ORDER_REVIVE_QID

#: Tags of the revive-log records.
CK_TAG = "ck"
ACK_TAG = "ack"
BATCH_ACK_TAG = "bAck"

#: A string as a JSON value, as ``json.dumps`` writes it (ASCII, escaped).
_json_str = json.encoder.encode_basestring_ascii

#: ``(stored topic, group, queue id, start offset, pop time)``: what an ack names.
CheckPointKey = tuple[str, str, int, int, int]


def revive_topic(cluster: str) -> str:
    """The system topic POP's check points and acks are written to."""
    return f"rmq_sys_REVIVE_LOG_{cluster}"


@dataclass(slots=True, eq=False)
class CheckPoint:
    """One popped batch of one queue, until each of its messages is acked, redelivered or
    dead-lettered (``done`` has a bit per message)."""

    topic: str
    group: str
    queue_id: int
    start_offset: int
    pop_time: int
    invisible_time: int
    #: Queue offsets of the popped messages, ascending.
    offsets: list[int]
    #: Delivery attempt (1 for a first delivery) of each message of this pop.
    attempts: list[int]
    #: What the handles carry: the revive queue, or 999 for an orderly pop.
    revive_qid: int
    #: The revive-log queue this check point and its acks are written to.
    revive_queue: int
    broker_name: str
    done: int = 0
    #: Queue offset of this record in the revive log (-1 until written).
    revive_offset: int = -1
    orderly: bool = False
    index: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.index = {offset: i for i, offset in enumerate(self.offsets)}

    @property
    def key(self) -> CheckPointKey:
        return (self.topic, self.group, self.queue_id, self.start_offset, self.pop_time)

    @property
    def deadline(self) -> int:
        return self.pop_time + self.invisible_time

    def pending(self) -> list[int]:
        done = self.done
        return [i for i in range(len(self.offsets)) if not done >> i & 1]

    def is_pending(self, i: int) -> bool:
        return not self.done >> i & 1

    @property
    def finished(self) -> bool:
        return self.done == (1 << len(self.offsets)) - 1

    def encode(self) -> bytes:
        return json.dumps(
            {
                "so": self.start_offset,
                "pt": self.pop_time,
                "it": self.invisible_time,
                "bm": 0,
                "n": len(self.offsets),
                "q": self.queue_id,
                "t": self.topic,
                "c": self.group,
                "ro": 0,
                "d": [offset - self.start_offset for offset in self.offsets],
                "bn": self.broker_name,
                "rp": 0,
                "ac": self.attempts,
                "rq": self.revive_qid,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, body: bytes, revive_queue: int, revive_offset: int) -> CheckPoint:
        """A check point record's body; ValueError / KeyError / TypeError when it is not one."""
        raw: dict[str, Any] = json.loads(body)
        start = int(raw["so"])
        offsets = [start + int(d) for d in raw["d"]]
        attempts = [int(a) for a in raw.get("ac") or [1] * len(offsets)]
        if len(attempts) != len(offsets):
            raise ValueError("attempts and offsets differ in length")
        revive_qid = int(raw.get("rq", revive_queue))
        return cls(
            topic=str(raw["t"]),
            group=str(raw["c"]),
            queue_id=int(raw["q"]),
            start_offset=start,
            pop_time=int(raw["pt"]),
            invisible_time=int(raw["it"]),
            offsets=offsets,
            attempts=attempts,
            revive_qid=revive_qid,
            revive_queue=revive_queue,
            broker_name=str(raw.get("bn", "")),
            revive_offset=revive_offset,
            orderly=revive_qid == ORDER_REVIVE_QID,
        )


def encode_ack(ck: CheckPoint, offsets: list[int]) -> tuple[str, bytes]:
    """The tag and body of the record that marks ``offsets`` of ``ck`` handled.

    Written once per ack, so formatted directly rather than through ``json.dumps`` (a third
    of the cost): the same bytes, the fields in the same order, strings escaped by the json
    module's own encoder."""
    head = (
        f'{{"so":{int(ck.start_offset)},"c":{_json_str(ck.group)},"t":{_json_str(ck.topic)},'
        f'"q":{int(ck.queue_id)},"pt":{int(ck.pop_time)},"bn":{_json_str(ck.broker_name)}'
    )
    if len(offsets) == 1:
        return ACK_TAG, f'{head},"ao":{int(offsets[0])}}}'.encode()
    listed = ",".join([str(int(o)) for o in offsets])
    return BATCH_ACK_TAG, f'{head},"aol":[{listed}]}}'.encode()


def decode_ack(body: bytes) -> tuple[CheckPointKey, list[int]]:
    """The check point an ack record names and the offsets it marks."""
    raw: dict[str, Any] = json.loads(body)
    key = (str(raw["t"]), str(raw["c"]), int(raw["q"]), int(raw["so"]), int(raw["pt"]))
    offsets = [int(raw["ao"])] if "ao" in raw else [int(o) for o in raw["aol"]]
    return key, offsets
