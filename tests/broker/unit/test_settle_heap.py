"""``mqbroker`` freezes what start-up built, so the cycle collector's full walks skip it."""

from __future__ import annotations

import gc

from aiorocketmq.broker.__main__ import settle_heap


def test_objects_made_before_settling_leave_the_collectors_walks_and_later_ones_do_not() -> None:
    built = [[n] for n in range(1000)]  # containers, which the collector walks
    try:
        settle_heap()
        later = [[n] for n in range(10)]
        walked = {id(o) for generation in range(3) for o in gc.get_objects(generation)}
        assert not any(id(x) in walked for x in built)
        assert all(id(x) in walked for x in later)
        assert gc.get_freeze_count() >= len(built)
    finally:
        gc.unfreeze()
