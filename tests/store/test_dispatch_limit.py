"""The store's dispatch limit (controller mode's confirm offset): records that end past it are
in the commit log but in no consume queue, index or arrival notice until it passes them; puts
behind held records take the queue offsets after theirs, across file ends and batches; a
slave's replicated records wait the same way; the limit is kept in the checkpoint and bounds
what recovery dispatches; without one nothing changes."""

from __future__ import annotations

from pathlib import Path

from aiorocketmq.broker.store import MessageStore, PutStatus

from .support import STORE_HOST, make_message, small_config
from .test_replica import master_bytes

TOPIC = "TopicA"


class Limit:
    def __init__(self, value: int = 0) -> None:
        self.value = value
        self.held = 0

    def __call__(self) -> int:
        return self.value

    def on_held(self) -> None:
        self.held += 1


async def limited(root: Path, limit: Limit, **overrides: object) -> MessageStore:
    store = MessageStore(small_config(root, **overrides), store_host=STORE_HOST)
    store.limit_dispatch(limit, limit.on_held)
    await store.start()
    return store


def put(store: MessageStore, count: int, *, first: int = 0) -> list[int]:
    ends = []
    for n in range(first, first + count):
        result = store.put_message(make_message(TOPIC, n % 3, n, size=300, keys=f"K{n}"))
        assert result.status is PutStatus.PUT_OK
        ends.append(result.wrote_offset + result.wrote_bytes)
    return ends


def maxima(store: MessageStore) -> list[int]:
    return [store.get_max_offset(TOPIC, q) for q in range(3)]


async def test_held_puts_show_in_order_as_the_limit_passes_them(tmp_path: Path) -> None:
    limit = Limit()
    store = await limited(tmp_path / "s", limit)
    arrivals: list[tuple[str, int, int, int]] = []
    store.add_arrival_listener(lambda *arrival: arrivals.append(arrival))
    try:
        ends = put(store, 400)  # crosses 64 KiB commit-log files
        assert len(store.commit_log.queue.files) >= 2
        assert maxima(store) == [0, 0, 0] and not arrivals and limit.held == 400
        assert not store.query_by_key(TOPIC, "K5", 5, 0, 1 << 62).records
        batch = store.put_messages([make_message(TOPIC, 1, n) for n in range(5)])
        assert batch.queue_offset == 133  # after the 133 held records of queue 1
        limit.value = ends[9]
        assert store.dispatch_confirmed() == 10
        assert maxima(store) == [4, 3, 3] and store.reput_offset == ends[9]
        assert [a[2] for a in arrivals if a[1] == 0] == [4]
        assert len(store.query_by_key(TOPIC, "K5", 5, 0, 1 << 62).records) == 1
        limit.value = ends[9] + 10  # within the next record: it still waits
        assert store.dispatch_confirmed() == 0
        limit.value = store.commit_log_max_offset
        assert store.dispatch_confirmed() == 395
        assert maxima(store) == [134, 138, 133] and store.reput_offset == store.commit_log_max_offset
        # Nothing held and the limit at the end: the next put shows at once.
        limit.value = 1 << 62
        put(store, 1, first=400)
        assert maxima(store)[1] == 139 and limit.held == 401
    finally:
        await store.shutdown()


async def test_a_slave_dispatches_up_to_the_limit(tmp_path: Path) -> None:
    master = MessageStore(small_config(tmp_path / "m"), store_host=STORE_HOST)
    await master.start()
    limit = Limit()
    slave = await limited(tmp_path / "s", limit, brokerRole="SLAVE")
    try:
        ends = put(master, 200)
        data = master_bytes(master, 0)
        for pos in range(0, len(data), 997):
            slave.append_replicated(pos, data[pos : pos + 997])
        assert slave.commit_log_max_offset == master.commit_log_max_offset
        assert maxima(slave) == [0, 0, 0]
        limit.value = ends[99]
        slave.dispatch_replicated()
        assert maxima(slave) == [34, 33, 33]
        limit.value = master.commit_log_max_offset
        slave.dispatch_replicated()
        assert maxima(slave) == maxima(master)
    finally:
        await master.shutdown()
        await slave.shutdown()


async def test_recovery_dispatches_only_up_to_the_kept_limit(tmp_path: Path) -> None:
    limit = Limit()
    store = await limited(tmp_path / "s", limit)
    ends = put(store, 30)
    limit.value = ends[11]
    store.dispatch_confirmed()
    assert maxima(store) == [4, 4, 4]
    await store.shutdown()
    assert store.checkpoint.confirm_offset == ends[11]
    for crashed in (False, True):
        if crashed:
            (tmp_path / "s" / "abort").touch()
        again = Limit(ends[11])  # what the replication knows at first: the kept offset
        store = await limited(tmp_path / "s", again)
        try:
            assert store.recovery is not None and store.recovery.abnormal is crashed
            assert store.confirm_offset == ends[11] and store.reput_offset == ends[11]
            assert maxima(store) == [4, 4, 4]
            # A put behind the held records takes the queue offset after theirs.
            result = store.put_message(make_message(TOPIC, 0, 99))
            assert result.queue_offset == 10 + (1 if crashed else 0)
        finally:
            await store.shutdown()
    # Without a limit (no controller mode) the same store shows everything.
    store = MessageStore(small_config(tmp_path / "s"), store_host=STORE_HOST)
    await store.start()
    try:
        assert maxima(store) == [12, 10, 10]
    finally:
        await store.shutdown()


async def test_without_a_limit_nothing_waits(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path / "s"), store_host=STORE_HOST)
    await store.start()
    try:
        assert not store.dispatch_limited
        put(store, 30)
        assert maxima(store) == [10, 10, 10]
        assert store.dispatch_confirmed() == 0
    finally:
        await store.shutdown()
    assert store.checkpoint.confirm_offset == 0
