"""Workers stopped by a signal stop cleanly: a worker written as docs/sdk.md shows
(``stop_on_signals``, a push consumer or a lite-pull ``async for``) runs in a child process
against a real name server and broker, gets SIGTERM or SIGINT in the middle of a backlog and
exits with 0; the offsets it committed cover exactly what it finished (below them nothing it
did not finish, above them nothing it did), and a restarted worker consumes the rest from
there: nothing lost, nothing consumed twice.

Also here: the helper's own signal handling, in process (handlers put back, a second signal
takes its usual course).
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from types import FrameType

import pytest

from aiorocketmq.client import Admin, Message, MessageQueue, Producer, stop_on_signals
from tests.cluster import Cluster

from .child_process import ConsumerProcess
from .conftest import unique, wait_until
from .graceful_worker import CONCURRENCY

pytestmark = pytest.mark.asyncio(loop_scope="module")

QUEUES = 4
MESSAGES = 400
#: Messages the first worker finishes before it gets its signal: well inside the backlog.
BEFORE_SIGNAL = 60


class Worker(ConsumerProcess):
    """One ``graceful_worker`` process: the messages it finished, and what else it printed."""

    PROGRAM = "tests.client.graceful_worker"

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.stderr: list[str] = []
        super().__init__(proc)

    def on_stderr(self, line: bytes) -> None:
        self.stderr.append(line.decode())

    def finished(self, queue_id: int) -> set[int]:
        return {offset for q, offset, _ in self.records if q == queue_id}


async def committed_offsets(admin: Admin, group: str, topic: str) -> dict[int, int]:
    return {
        q: await admin.committed_offset(group, MessageQueue(topic=topic, broker_name="broker-a", queue_id=q))
        for q in range(QUEUES)
    }


@pytest.mark.parametrize(
    ("kind", "sig"),
    [("push", signal.SIGTERM), ("lite", signal.SIGTERM), ("push", signal.SIGINT), ("lite", signal.SIGINT)],
    ids=["push-SIGTERM", "lite-SIGTERM", "push-SIGINT", "lite-SIGINT"],
)
async def test_a_signalled_worker_commits_what_it_finished_and_its_successor_the_rest(
    cluster: Cluster, admin: Admin, kind: str, sig: signal.Signals
) -> None:
    topic, group = unique(f"Graceful{kind.title()}"), unique(f"graceful-{kind}")
    namesrv = cluster.namesrv_addr
    await admin.create_topic(topic, QUEUES)
    async with Producer(unique("graceful-producer"), namesrv) as producer:
        sent = [f"m{n}" for n in range(MESSAGES)]
        for first in range(0, MESSAGES, 50):
            await asyncio.gather(
                *(producer.send(Message(topic, body.encode())) for body in sent[first : first + 50])
            )

    first = await Worker.start(kind, namesrv, topic, group)
    await wait_until(lambda: len(first.records) >= BEFORE_SIGNAL, timeout=60)
    assert await first.stop(sig) == 0, "".join(first.stderr)
    assert not any("Traceback" in line for line in first.stderr), "".join(first.stderr)
    assert len(first.records) < MESSAGES, "the worker finished the backlog before its signal"

    committed = await committed_offsets(admin, group, topic)
    for q in range(QUEUES):
        # Below the committed offset, nothing the worker did not finish: nothing is lost.
        assert set(range(committed[q])) <= first.finished(q), (q, committed[q], sorted(first.finished(q)))
    # Above it, what it finished comes again: the duplicates, bounded by what it had in hand
    # (its listener calls in flight); a lite-pull loop stops between two messages, so none.
    beyond = sum(1 for q, offset, _ in first.records if offset >= committed[q])
    assert beyond <= (CONCURRENCY if kind == "push" else 0), (beyond, committed)
    assert sum(committed.values()) >= len(first.records) - beyond

    second = await Worker.start(kind, namesrv, topic, group)
    await wait_until(lambda: len(second.records) + len(first.records) - beyond >= MESSAGES, timeout=60)
    assert await second.stop(sig) == 0, "".join(second.stderr)
    for q in range(QUEUES):
        if second.finished(q):
            assert min(second.finished(q)) == committed[q]  # it went on from the committed offset

    consumed = Counter(body for worker in (first, second) for *_, body in worker.records)
    assert set(consumed) == set(sent), sorted(set(sent) - set(consumed))[:20]
    duplicates = sum(n - 1 for n in consumed.values())
    assert duplicates == beyond
    # The second one committed everything at its stop.
    assert sum((await committed_offsets(admin, group, topic)).values()) == MESSAGES


async def test_the_first_signal_stops_and_puts_the_handlers_back() -> None:
    """In process, with SIGUSR1 standing in for SIGTERM (whose default would end the test
    run): the first signal ends ``wait()`` and puts the handler found before back, so the
    second reaches it, as a second Ctrl-C or SIGTERM reaches the default action."""
    heard: list[int] = []

    def previous(signum: int, frame: FrameType | None) -> None:
        heard.append(signum)

    before = signal.signal(signal.SIGUSR1, previous)
    try:
        async with stop_on_signals(signals=[signal.SIGUSR1]) as stop:
            assert signal.getsignal(signal.SIGUSR1) is not previous  # the loop's handler now
            assert not stop.stopping
            signal.raise_signal(signal.SIGUSR1)
            assert await asyncio.wait_for(stop.wait(), 5) is signal.SIGUSR1
            assert stop.stopping and heard == []
            assert signal.getsignal(signal.SIGUSR1) is previous
            signal.raise_signal(signal.SIGUSR1)
            await wait_until(lambda: heard == [signal.SIGUSR1], timeout=5)
        assert signal.getsignal(signal.SIGUSR1) is previous

        # Left without a signal, the handler found before is back too.
        async with stop_on_signals(signals=[signal.SIGUSR1]) as stop:
            assert signal.getsignal(signal.SIGUSR1) is not previous
        assert signal.getsignal(signal.SIGUSR1) is previous and not stop.stopping

        # A signal that cannot be caught fails on entry, and takes back the handler set before it.
        with pytest.raises(RuntimeError):
            async with stop_on_signals(signals=[signal.SIGUSR1, signal.SIGKILL]):
                pass
        assert signal.getsignal(signal.SIGUSR1) is previous
    finally:
        signal.signal(signal.SIGUSR1, before)
