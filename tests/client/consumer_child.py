"""A consumer in a child process, for tests that kill it: it consumes a topic from its first
offset and prints one line per message it consumed, ``<queue id> <queue offset> <body>``,
flushed before the message counts as consumed (before the listener returns, or before the next
poll), so that a kill -9 never takes the line of a message whose consumption was committed.
SIGTERM shuts it down cleanly (the consumer finishes what it is consuming and persists its
progress). Its first line on stderr is ``READY`` once it runs. A push consumer takes
:data:`SLOW_SECONDS` over every 50th message (``m7``, ``m57``, ...), announcing it on stderr as
``SLOW <queue id> <queue offset>`` when it starts: the others overtake it, so a test can kill the
consumer while one message is in its hands behind messages it has finished.

Run: ``python -m tests.client.consumer_child {push,orderly,lite} NAMESRV TOPIC GROUP``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import signal
import sys

from aiorocketmq import ClientOptions, ConsumeFrom, ConsumeResult, LitePullConsumer, MessageExt, PushConsumer
from aiorocketmq.protocol.loop import run

#: Each listener call takes a while, more or less, so a kill finds several messages in its
#: hands and they finish out of order; offsets reach the broker every 0.1 s (not 5), so the
#: broker holds what the consumer committed while they are in flight.
WORK_SECONDS = (0.002, 0.03)
OPTIONS = ClientOptions(persist_offset_interval=0.1)
SLOW_SECONDS = 3.0


def slow(msg: MessageExt) -> bool:
    return int(msg.body[1:]) % 50 == 7


def record(messages: list[MessageExt]) -> None:
    sys.stdout.write("".join(f"{m.queue_id} {m.queue_offset} {m.body.decode()}\n" for m in messages))
    sys.stdout.flush()


async def main(kind: str, namesrv: str, topic: str, group: str) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    if kind == "lite":
        lite = LitePullConsumer(
            group, namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, auto_commit_interval=0.2
        )
        lite.subscribe(topic)
        async with lite:
            print("READY", file=sys.stderr, flush=True)
            while not stop.is_set():
                batch = await lite.poll(timeout=0.1)
                if batch:
                    record(batch)
                    await asyncio.sleep(random.uniform(*WORK_SECONDS))
        return
    push = PushConsumer(
        group,
        namesrv,
        consume_from=ConsumeFrom.FIRST_OFFSET,
        orderly=kind == "orderly",
        concurrency=8,
        options=OPTIONS,
    )
    push.subscribe(topic)

    @push.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        if kind == "push" and any(slow(m) for m in messages):
            print(f"SLOW {messages[0].queue_id} {messages[0].queue_offset}", file=sys.stderr, flush=True)
            await asyncio.sleep(SLOW_SECONDS)
        await asyncio.sleep(random.uniform(*WORK_SECONDS))
        record(messages)
        return ConsumeResult.SUCCESS

    async with push:
        print("READY", file=sys.stderr, flush=True)
        await stop.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=("push", "orderly", "lite"))
    parser.add_argument("namesrv")
    parser.add_argument("topic")
    parser.add_argument("group")
    args = parser.parse_args()
    run(main(args.kind, args.namesrv, args.topic, args.group))
