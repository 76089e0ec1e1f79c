"""``python -m aiorocketmq.broker.local_cluster`` (what ``make run`` starts) with several broker
processes: both register in one cluster, a topic spreads over them, and SIGTERM stops every
process cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc

from aiorocketmq import Admin, Message, Producer, compiled
from aiorocketmq.broker.grpc import messaging_pb2 as pb
from aiorocketmq.broker.grpc import messaging_pb2_grpc as pb_grpc
from aiorocketmq.protocol import speedups
from tests.support import ROOT, die_with_parent, held_port, wait_until


async def test_two_brokers_share_the_cluster_and_stop_cleanly(tmp_path: Path) -> None:
    # The ports stay held (bound, never listening) until the servers listen on them.
    with contextlib.ExitStack() as ports:
        await run_two_brokers(tmp_path, ports)


async def run_two_brokers(tmp_path: Path, ports: contextlib.ExitStack) -> None:
    namesrv_port = ports.enter_context(held_port())
    first, second = sorted(ports.enter_context(held_port()) for _ in range(2))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "aiorocketmq.broker.local_cluster",
        "--data", str(tmp_path),
        "--namesrv-port", str(namesrv_port),
        "--broker-port", str(first),
        "--port-step", str(second - first),
        "--brokers", "2",
        cwd=ROOT,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        preexec_fn=die_with_parent,
    )  # fmt: skip
    namesrv = f"127.0.0.1:{namesrv_port}"
    try:
        async with Admin(namesrv) as admin:

            async def both_registered() -> bool:
                try:
                    info = await admin.cluster_info()
                except Exception:
                    return False
                return set(info.cluster_addr_table.get("DefaultCluster", ())) == {"broker-a", "broker-b"}

            await wait_until(both_registered, timeout=60)
            ports.close()
            info = await admin.cluster_info()
            addrs = {name: data.broker_addrs[0] for name, data in info.broker_addr_table.items()}
            assert addrs == {"broker-a": f"127.0.0.1:{first}", "broker-b": f"127.0.0.1:{second}"}
            await admin.create_topic("Spread", 2, cluster="DefaultCluster")
        async with Producer("spread-producer", namesrv) as producer:
            results = [await producer.send(Message("Spread", f"m{i}".encode())) for i in range(8)]
        assert {r.queue.broker_name for r in results} == {"broker-a", "broker-b"}
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    # It says which builds run (what `make run` shows): the codecs' and the hot modules'.
    said = err.decode()
    assert f"local cluster: {speedups.describe()}; {compiled.describe()}" in said, said
    for name in ("broker-a", "broker-b"):
        assert (tmp_path / name / "commitlog").is_dir()


@contextlib.contextmanager
def held_pair() -> Iterator[int]:
    """Two consecutive ports held (see ``held_port``): a proxy's gRPC port and the next one,
    its remoting port."""
    for _ in range(50):
        with contextlib.ExitStack() as stack:
            first = stack.enter_context(held_port())
            holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            stack.callback(holder.close)
            holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                holder.bind(("0.0.0.0", first + 1))
            except OSError:
                continue
            yield first
            return
    raise AssertionError("no two consecutive free ports")


async def test_a_proxy_port_adds_mqproxy_for_5x_clients(tmp_path: Path) -> None:
    """``make run PROXY_PORT=...``: mqproxy in front of the broker, 5.x gRPC clients on that
    port and 5.x remoting clients on the next."""
    with contextlib.ExitStack() as ports:
        namesrv_port = ports.enter_context(held_port())
        broker_port = ports.enter_context(held_port())
        proxy_port = ports.enter_context(held_pair())
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "aiorocketmq.broker.local_cluster",
            "--data", str(tmp_path),
            "--namesrv-port", str(namesrv_port),
            "--broker-port", str(broker_port),
            "--proxy-port", str(proxy_port),
            cwd=ROOT,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            preexec_fn=die_with_parent,
        )  # fmt: skip
        try:
            async with Admin(f"127.0.0.1:{namesrv_port}") as admin:

                async def registered() -> bool:
                    try:
                        return "broker-a" in (await admin.cluster_info()).broker_addr_table
                    except Exception:
                        return False

                await wait_until(registered, timeout=60)
                ports.close()
                await admin.create_topic("ViaProxy", 2, cluster="DefaultCluster")
                await admin.wait_for_route("ViaProxy", timeout=10)
            async with grpc.aio.insecure_channel(f"127.0.0.1:{proxy_port}") as channel:
                stub = pb_grpc.MessagingServiceStub(channel)

                async def routed() -> bool:
                    try:
                        answer = await stub.QueryRoute(
                            pb.QueryRouteRequest(topic=pb.Resource(name="ViaProxy"))
                        )
                    except grpc.aio.AioRpcError:
                        return False
                    return answer.status.code == pb.OK and len(answer.message_queues) == 2

                await wait_until(routed, timeout=30, interval=0.2)
            _, writer = await asyncio.open_connection("127.0.0.1", proxy_port + 1)
            writer.close()
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
