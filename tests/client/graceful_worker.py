"""A worker as docs/sdk.md tells one to be written, for the test that stops it with a signal:
it consumes a topic with :func:`~aiorocketmq.client.stop_on_signals` and nothing else of its
own for stopping, and prints ``<queue id> <queue offset> <body>`` for each message once its
work on it is done (the side effect a real worker would have). Its first line on stderr is
``READY`` once it consumes.

Run: ``python -m tests.client.graceful_worker {push,lite} NAMESRV TOPIC GROUP``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from aiorocketmq import (
    ConsumeFrom,
    ConsumeResult,
    LitePullConsumer,
    MessageExt,
    PushConsumer,
    stop_on_signals,
)

#: The work per message: long enough that a signal finds messages in hand.
WORK_SECONDS = 0.01
#: Listener calls in flight at once in the push worker (each a message).
CONCURRENCY = 4


def record(msg: MessageExt) -> None:
    sys.stdout.write(f"{msg.queue_id} {msg.queue_offset} {msg.body.decode()}\n")
    sys.stdout.flush()


async def lite(namesrv: str, topic: str, group: str) -> None:
    async with (
        LitePullConsumer(group, namesrv, consume_from=ConsumeFrom.FIRST_OFFSET) as consumer,
        stop_on_signals(consumer),
    ):
        consumer.subscribe(topic)
        print("READY", file=sys.stderr, flush=True)
        async for msg in consumer:
            await asyncio.sleep(WORK_SECONDS)
            record(msg)


async def push(namesrv: str, topic: str, group: str) -> None:
    consumer = PushConsumer(group, namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, concurrency=CONCURRENCY)
    consumer.subscribe(topic)

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        for msg in messages:
            await asyncio.sleep(WORK_SECONDS)
            record(msg)
        return ConsumeResult.SUCCESS

    async with consumer, stop_on_signals(consumer) as stop:
        print("READY", file=sys.stderr, flush=True)
        await stop.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=("push", "lite"))
    parser.add_argument("namesrv")
    parser.add_argument("topic")
    parser.add_argument("group")
    args = parser.parse_args()
    asyncio.run({"push": push, "lite": lite}[args.kind](args.namesrv, args.topic, args.group))
