"""The example pipeline end to end: known order events in, windowed revenue per category out,
on the output topic and in Parquet, equal to what the events add up to."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from aiorocketmq.pipeline.examples import revenue
from tests.pipeline.conftest import TestCluster, unique

WINDOW_MS = 10_000
WATERMARK_MS = 10_000


def test_revenue_example_sums_closed_windows_into_the_topic_and_parquet(
    spark: Any, cluster: TestCluster, tmp_path: Path
) -> None:
    source = unique("Orders")
    target = unique("CategoryRevenue")
    # Event times end 3.5 s into a window, so no window ends exactly at the watermark.
    now_ms = 1_800_000_003_500
    orders = revenue.sample_orders(400, span_seconds=120, seed=11, now_ms=now_ms)
    revenue.ensure_topics(cluster.namesrv, [source, target], 2)
    revenue.produce(cluster.namesrv, source, orders)
    # A malformed event is skipped, not fatal.
    cluster.producer.send(revenue.Message(source, b"{not json"))

    watermark = max(o.ts_ms for o in orders) - WATERMARK_MS
    expected: dict[tuple[int, str], list[float]] = defaultdict(lambda: [0.0, 0])
    for order in orders:
        start = order.ts_ms - order.ts_ms % WINDOW_MS
        if start + WINDOW_MS <= watermark:
            cell = expected[(start, order.category)]
            cell[0] += order.amount
            cell[1] += 1
    assert len(expected) > 40

    code = revenue.main(
        [
            "--namesrv", cluster.namesrv,
            "--topic", source,
            "--output-topic", target,
            "--parquet", str(tmp_path / "parquet"),
            "--checkpoint", str(tmp_path / "checkpoint"),
            "--window", "10 seconds",
            "--watermark", "10 seconds",
            "--once",
        ],
        spark=spark,
    )  # fmt: skip
    assert code == 0

    def as_dict(rows: list[dict[str, Any]]) -> dict[tuple[int, str], tuple[float, int]]:
        return {(r["start"], r["category"]): (round(r["revenue"], 2), r["orders"]) for r in rows}

    want = {key: (round(total, 2), count) for key, (total, count) in expected.items()}
    parquet = spark.read.parquet(str(tmp_path / "parquet")).collect()
    got = as_dict(
        [
            {
                "start": int(r.window_start.timestamp() * 1000),
                "category": r.category,
                "revenue": r.revenue,
                "orders": r.orders,
            }
            for r in parquet
        ]
    )
    assert got == want
    assert len(parquet) == len(want)

    messages = (
        spark.read.format("rocketmq")
        .option("namesrv", cluster.namesrv)
        .option("topic", target)
        .load()
        .collect()
    )
    bodies = [json.loads(m.body) for m in messages]
    from_topic = {}
    for message, body in zip(messages, bodies):
        assert message.tags == body["category"]
        assert message.keys.startswith(body["category"] + "@")
        start_ms = int(
            revenue.datetime.fromisoformat(body["window_start"].replace("Z", "+00:00")).timestamp() * 1000
        )
        from_topic[(start_ms, body["category"])] = (round(body["revenue"], 2), body["orders"])
    assert from_topic == want
    assert len(messages) == len(want)
