"""The official C++ client (PyPI ``rocketmq``, librocketmq 1.2) keeps consuming from the slave
while the master is down: its route lists only the slave for the broker, and it pulls there."""

from __future__ import annotations

from aiorocketmq.protocol.codes import ResponseCode
from aiorocketmq.protocol.transport import connect
from tests.broker.ha.support import has_slaves, runtime_info, start_pair
from tests.broker.requests import send
from tests.broker.test_cpp_client import Collector, collecting, start_push_consumer, stop_consumer
from tests.cluster import Cluster
from tests.support import wait_until

TOPIC = "CppFromSlave"
COUNT = 24


async def test_the_cpp_consumer_reads_from_the_slave_while_the_master_is_down(cluster: Cluster) -> None:
    master, slave = await start_pair(cluster, master={"brokerRole": "SYNC_MASTER"})
    await wait_until(lambda: has_slaves(master.port), 30)
    conn = await connect("127.0.0.1", master.port, timeout=5.0)
    try:
        for i in range(COUNT):
            assert (await send(conn, TOPIC, f"cpp {i}".encode(), queue_id=i % 4)).code == ResponseCode.SUCCESS
    finally:
        conn.close()

    async def slave_knows_topic() -> bool:
        # The slave copies the topic's config from its master (within a second of the data).
        return "topicCount" in (info := await runtime_info(slave.port)) and int(info["topicCount"]) > 10

    await wait_until(slave_knows_topic, 20)
    await cluster.kill_broker("broker-a")
    collector = Collector()
    consumer = start_push_consumer(cluster, "CppSlaveReaders", TOPIC, collecting(collector))
    try:
        items = await collector.wait_for(
            lambda got: {d.body for d in got} >= {f"cpp {i}" for i in range(COUNT)}, 60, "every message"
        )
    finally:
        await stop_consumer(consumer)
    assert {d.body for d in items} == {f"cpp {i}" for i in range(COUNT)}
