"""The task helpers every server and client loop stops through: they must end what they
cancel and must never swallow a cancel aimed at their caller."""

from __future__ import annotations

import asyncio

import pytest

from aiorocketmq.protocol.loop import cancel_and_wait, wait_event


async def test_cancel_and_wait_ends_every_task_and_skips_none() -> None:
    tasks = [asyncio.ensure_future(asyncio.sleep(60)) for _ in range(3)]
    await cancel_and_wait(tasks[0], None, *tasks[1:])
    assert all(task.cancelled() for task in tasks)
    await cancel_and_wait()  # nothing to do


async def test_cancel_and_wait_passes_on_a_cancel_aimed_at_its_caller() -> None:
    cleaning = asyncio.Event()

    async def slow_to_stop() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            cleaning.set()
            await asyncio.sleep(0.5)  # a cleanup the caller is still waiting on

    worker = asyncio.ensure_future(slow_to_stop())
    await asyncio.sleep(0)
    stopper = asyncio.ensure_future(cancel_and_wait(worker))
    await cleaning.wait()
    stopper.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopper
    await asyncio.wait({worker})


async def test_wait_event_reports_set_or_timed_out() -> None:
    event = asyncio.Event()
    assert await wait_event(event, 0.01) is False
    asyncio.get_running_loop().call_later(0.01, event.set)
    assert await wait_event(event, 5) is True


@pytest.mark.parametrize("turns", range(4))
async def test_a_cancel_landing_as_the_event_fires_is_not_lost(turns: int) -> None:
    event = asyncio.Event()

    async def parked() -> None:
        while True:
            await wait_event(event, 60)
            event.clear()

    task = asyncio.ensure_future(parked())
    await asyncio.sleep(0)
    event.set()
    for _ in range(turns):  # the cancel lands 0..3 loop turns after the event fires
        await asyncio.sleep(0)
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=5)
    assert task in done and task.cancelled()
