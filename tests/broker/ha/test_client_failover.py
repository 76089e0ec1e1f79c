"""The SDK fails over as the Java client does when a master dies: producers send to the other
broker group, consumers read the dead master's queues from its slave (committing their
progress there), and once the master is back the slave hands that progress to it and the
consumers read from the master again."""

from __future__ import annotations

from aiorocketmq import Admin, ConsumeFrom, Message, Producer, PushConsumer
from aiorocketmq.client.client_instance import ClientOptions
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.transport import connect
from tests.broker.requests import call, max_offset
from tests.cluster import Cluster
from tests.support import wait_until

from .support import consume_until, has_slaves, runtime_info, start_pair

TOPIC = "FailoverSdk"
GROUP = "FailoverSdkGroup"
QUEUES = 4
FAST = ClientOptions(route_refresh_interval=0.5, persist_offset_interval=0.5, rebalance_interval=1.0)


async def queue_offsets(port: int, *, committed: bool) -> list[int]:
    conn = await connect("127.0.0.1", port, timeout=3.0)
    try:
        if not committed:
            return [await max_offset(conn, TOPIC, q) for q in range(QUEUES)]
        offsets = []
        for q in range(QUEUES):
            response = await call(
                conn,
                RequestCode.QUERY_CONSUMER_OFFSET,
                {"consumerGroup": GROUP, "topic": TOPIC, "queueId": q},
            )
            offsets.append(
                int(response.ext_fields["offset"]) if response.code == ResponseCode.SUCCESS else -1
            )
        return offsets
    finally:
        conn.close()


async def consume(namesrv: str, want: set[str]) -> list[str]:
    consumer = PushConsumer(GROUP, namesrv=namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, options=FAST)
    consumer.subscribe(TOPIC, "*")
    got = await consume_until(consumer, want, 40)
    assert want <= set(got), f"missing {sorted(want - set(got))[:10]}"
    return got


async def test_clients_fail_over_to_the_slave_and_back(cluster: Cluster) -> None:
    master, slave = await start_pair(cluster, master={"brokerRole": "ASYNC_MASTER"})
    await cluster.start_broker("broker-b")
    await wait_until(lambda: has_slaves(master.port), 30)
    async with Admin(cluster.namesrv_addr) as admin:
        await admin.create_topic(TOPIC, QUEUES)
    async with Producer("FailoverSdkP", namesrv=cluster.namesrv_addr, options=FAST) as producer:
        before = [await producer.send(Message(TOPIC, f"before {i}".encode())) for i in range(40)]
        on_a = {f"before {i}" for i, r in enumerate(before) if r.queue.broker_name == "broker-a"}
        assert on_a and len(on_a) < 40
        # broker-a's messages are on its slave; then its master dies.
        master_end = await queue_offsets(master.port, committed=False)
        await wait_until(lambda: _slave_has(slave.port, master_end), 20)
        await cluster.kill_broker("broker-a")

        # Sends go to broker-b (a failed attempt is retried on another broker group).
        during = [await producer.send(Message(TOPIC, f"during {i}".encode())) for i in range(20)]
        assert {r.queue.broker_name for r in during[-10:]} == {"broker-b"}

        # A consumer started now reads broker-a's queues from the slave and commits there.
        await consume(cluster.namesrv_addr, {f"before {i}" for i in range(40)})
        assert await queue_offsets(slave.port, committed=True) == master_end

        # The master returns: the slave hands it the progress committed meanwhile.
        await cluster.start_broker("broker-a", brokerRole="ASYNC_MASTER")
        await wait_until(lambda: has_slaves(master.port), 30)
        await wait_until(lambda: _committed_on_master(master.port, master_end), 30)

        # And consumers read from the master again, from where they left off.
        async def routed_to_a() -> bool:
            return any(q.broker_name == "broker-a" for q in await producer.queues(TOPIC))

        await wait_until(routed_to_a, 30)  # the producer's route lists broker-a again
        after = []
        while len({r.queue.broker_name for r in after}) < 2:
            after.append(await producer.send(Message(TOPIC, f"after {len(after)}".encode())))
    again = await consume(cluster.namesrv_addr, {f"after {i}" for i in range(len(after))})
    assert not {body for body in again if body.startswith("before")}, "progress was lost"
    assert int((await runtime_info(master.port))["msgGetTotal"]) > 0


async def _slave_has(port: int, ends: list[int]) -> bool:
    return await queue_offsets(port, committed=False) == ends


async def _committed_on_master(port: int, ends: list[int]) -> bool:
    try:
        return await queue_offsets(port, committed=True) == ends
    except Exception:
        return False
