"""The broker's Prometheus endpoint, scraped over HTTP and parsed."""

from __future__ import annotations

import asyncio
import re

from aiorocketmq.protocol.body import SubscriptionGroupConfig
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from tests.cluster import Cluster

from .conftest import ConnectTo
from .requests import call, pull_all, send_ok

SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\{(?P<labels>.*)\} (?P<value>\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse(text: str) -> list[tuple[str, dict[str, str], float]]:
    samples = []
    declared: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            declared.add(line.split()[2])
            continue
        if not line or line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        assert match, f"not Prometheus text: {line!r}"
        name = match["name"]
        assert name in declared or re.sub(r"_(bucket|sum|count)$", "", name) in declared, name
        samples.append((name, dict(LABEL.findall(match["labels"])), float(match["value"])))
    return samples


async def scrape(port: int, path: str = "/metrics") -> tuple[str, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, body = raw.decode().partition("\r\n\r\n")
    return head.splitlines()[0], body


def value(samples: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    found = [v for n, lab, v in samples if n == name and all(lab.get(k) == w for k, w in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


async def test_metrics_report_throughput_offsets_and_lag(cluster: Cluster, connect_to: ConnectTo) -> None:
    await cluster.stop_broker("broker-a")
    broker_process = await cluster.start_broker(
        "broker-a", metricsPromExporterEnable="true", metricsPromExporterPort=0
    )
    assert broker_process.process is not None
    line = await broker_process.process.wait_for_line(r"metrics on http://\S+:\d+/metrics")
    metrics_port = int(re.search(r":(\d+)/metrics", line)[1])  # type: ignore[index]
    conn = await connect_to(cluster.brokers["broker-a"].port)
    await call(
        conn,
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {"topic": "Metered", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6},
    )
    group = SubscriptionGroupConfig(group_name="mg", retry_max_times=0)
    await call(conn, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=group.encode())
    for i in range(30):
        await send_ok(conn, "Metered", f"m{i}".encode())
    consumed = await pull_all(conn, "Metered", 0, group="mg", max_nums=8)
    assert len(consumed) == 30
    update = {"consumerGroup": "mg", "topic": "Metered", "queueId": 0, "commitOffset": 12}
    assert (await call(conn, RequestCode.UPDATE_CONSUMER_OFFSET, update)).code == ResponseCode.SUCCESS
    # retryMaxTimes 0: a failed message goes straight to the dead-letter queue.
    back = await call(
        conn,
        RequestCode.CONSUMER_SEND_MSG_BACK,
        {"offset": consumed[0].commit_log_offset, "group": "mg", "delayLevel": 0, "maxReconsumeTimes": 0},
        version=407,
    )
    assert back.code == ResponseCode.SUCCESS

    status, body = await scrape(metrics_port)
    assert status == "HTTP/1.1 200 OK"
    samples = parse(body)
    broker = {"cluster": "DefaultCluster", "broker": "broker-a"}
    assert value(samples, "rocketmq_broker_tps", **broker) > 0
    assert value(samples, "rocketmq_broker_qps", **broker) > 0
    assert value(samples, "rocketmq_producer_tps", topic="Metered") > 0
    assert value(samples, "rocketmq_producer_offset", topic="Metered") == 30
    assert value(samples, "rocketmq_consumer_tps", topic="Metered", group="mg") > 0
    assert value(samples, "rocketmq_consumer_offset", topic="Metered", group="mg") == 12
    assert value(samples, "rocketmq_group_diff", group="mg", topic="Metered") == 30 - 12
    assert value(samples, "rocketmq_group_dlqdiff", group="mg", topic="%DLQ%mg") == 1
    puts = value(samples, "rocketmq_broker_put_latency_seconds_count", **broker)
    assert puts >= 31
    assert value(samples, "rocketmq_broker_put_latency_seconds_bucket", le="+Inf", **broker) == puts
    pmdt = sum(v for n, _l, v in samples if n.startswith("rocketmq_brokeruntime_pmdt_"))
    assert pmdt == puts

    missing, _ = await scrape(metrics_port, "/nothing")
    assert missing == "HTTP/1.1 404 Not Found"
