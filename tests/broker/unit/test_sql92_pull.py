"""Pulls of SQL92 subscriptions on the broker's parts: the store hands out only records whose
properties match, the subscription comes from the heartbeat (compiled per group, topic and
version) or from the pull itself, and each refusal answers with RocketMQ's code and remark."""

from __future__ import annotations

from pathlib import Path

from aiorocketmq.protocol.body import ConsumerData, SubscriptionData
from aiorocketmq.protocol.codes import PERM_READ_WRITE, ResponseCode
from aiorocketmq.protocol.message import decode_records

from .support import RecordedConnection, answer, broker_parts, producer_channel, pull_request, send_ok

TOPIC = "SqlTopic"
GROUP = "unit-consumer"


async def test_sql92_pulls_return_only_matching_records(tmp_path: Path, conn: RecordedConnection) -> None:
    async with broker_parts(tmp_path, enablePropertyFilter="true") as parts:
        parts.topics.ensure(TOPIC, 1, PERM_READ_WRITE)
        for i in range(10):
            await send_ok(
                parts,
                conn,
                TOPIC,
                f"m{i}".encode(),
                tags="even" if i % 2 == 0 else "odd",
                properties={"n": str(i)},
            )

        def heartbeat(expression: str, version: int) -> None:
            subs = [
                SubscriptionData(
                    topic=TOPIC, sub_string=expression, sub_version=version, expression_type="SQL92"
                )
            ]
            parts.clients.register_consumer(
                producer_channel(conn, "consumer-1"),
                ConsumerData(group_name=GROUP, subscription_data_set=subs),
            )
            parts.puller.filters.register(GROUP, subs)

        # From the pull itself (the SUBSCRIPTION flag).
        response = await answer(
            parts.puller.pull,
            conn,
            pull_request(TOPIC, 0, subscription="TAGS = 'even' AND n > 3", expression_type="SQL92"),
        )
        assert response.code == ResponseCode.SUCCESS
        assert [m.body for m in decode_records(response.body)] == [b"m4", b"m6", b"m8"]
        assert response.ext_fields["nextBeginOffset"] == 10

        # From the heartbeat.
        heartbeat("n BETWEEN 2 AND 3", 5)
        response = await answer(
            parts.puller.pull, conn, pull_request(TOPIC, 0, subscription=None, sub_version=5)
        )
        assert [m.body for m in decode_records(response.body)] == [b"m2", b"m3"]
        nothing = await answer(
            parts.puller.pull, conn, pull_request(TOPIC, 4, subscription=None, sub_version=5)
        )
        assert (nothing.code, nothing.remark) == (ResponseCode.PULL_RETRY_IMMEDIATELY, "NO_MATCHED_MESSAGE")
        assert nothing.ext_fields["nextBeginOffset"] == 10

        # The consumer moved on to a version the broker has no compiled filter for.
        parts.clients.register_consumer(
            producer_channel(conn, "consumer-1"),
            ConsumerData(
                group_name=GROUP,
                subscription_data_set=[
                    SubscriptionData(topic=TOPIC, sub_string="n > 1", sub_version=9, expression_type="SQL92")
                ],
            ),
        )
        response = await answer(
            parts.puller.pull, conn, pull_request(TOPIC, 0, subscription=None, sub_version=9)
        )
        assert (response.code, response.remark) == (
            ResponseCode.FILTER_DATA_NOT_LATEST,
            "the consumer's consumer filter data not latest",
        )
        # A malformed expression leaves no filter data behind.
        heartbeat("n > 'x'", 11)
        response = await answer(
            parts.puller.pull, conn, pull_request(TOPIC, 0, subscription=None, sub_version=11)
        )
        assert response.code == ResponseCode.FILTER_DATA_NOT_EXIST
        response = await answer(
            parts.puller.pull, conn, pull_request(TOPIC, 0, subscription="n >", expression_type="SQL92")
        )
        assert response.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED


async def test_without_property_filter_sql92_pulls_are_refused(
    tmp_path: Path, conn: RecordedConnection
) -> None:
    async with broker_parts(tmp_path) as parts:
        parts.topics.ensure(TOPIC, 1, PERM_READ_WRITE)
        response = await answer(
            parts.puller.pull, conn, pull_request(TOPIC, 0, subscription="n > 1", expression_type="SQL92")
        )
        assert (response.code, response.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "The broker does not support consumer to filter message by SQL92",
        )
