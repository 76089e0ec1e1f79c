"""Cost of ACL and TLS on sends, with our SDK against real name server and broker processes.

Starts four clusters side by side (one name server and one broker each): **plain**, **acl**
(ACL 1.0: ``aclEnable=true``, the producer signs every request with an account that has PUB on
the topic), **acl2** (ACL 2.0: ``authenticationEnabled`` and ``authorizationEnabled``, the
producer a normal user whose ACL allows ``Pub`` on the topic) and **tls**
(``tls.server.mode=enforcing`` on both processes, the producer verifies the server against the
test CA). Then, for ``--runs`` rounds, runs the same scenarios against each cluster in turn,
rotating which goes first so that load from other work on the machine falls on all alike:

* **sync-1**: one producer sending 128-byte messages one at a time for ``--seconds``;
* **sync-64**: 64 coroutines sending on one producer (requests pipelined on one connection).

It reports, per cluster and scenario, the median Send TPS and the client's and the broker's
CPU time per message, and each configuration's TPS change against plain next to its target
(either ACL at most 10% lower, TLS at most 25% lower). Run:
``.venv/bin/python -m bench.security_bench [--runs 5] [--seconds 5]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from aiorocketmq.client import Admin, ClientOptions, Producer, auth_admin
from aiorocketmq.protocol.auth import AclInfo, PolicyEntryInfo, PolicyInfo, UserInfo
from aiorocketmq.protocol.loop import run as run_loop
from bench.machine import summary as machine_summary
from bench.sdk_bench import CpuMeter, Figures, sync_sends
from tests.cluster import Cluster
from tests.security.pki import make_pki

TOPIC = "BenchmarkSdk"  # the topic sdk_bench.sync_sends sends to
ACCESS_KEY, SECRET_KEY = "bench_user", "bench_secret_1"
ADMIN_KEY, ADMIN_SECRET = "bench_admin", "bench_admin_1"
SCENARIOS = {"sync-1": 1, "sync-64": 64}
TARGETS = {"acl": 0.10, "acl2": 0.10, "tls": 0.25}
KINDS = ["plain", "acl", "acl2", "tls"]


Settings = tuple[dict[str, Any], dict[str, Any], ClientOptions, ClientOptions]


def settings(root: Path, kind: str, pki: dict[str, Path]) -> Settings:
    """Name server and broker settings, and the producer's and the admin's client options."""
    root.mkdir(parents=True)
    namesrv: dict[str, Any] = {}
    broker: dict[str, Any] = {}
    options = ClientOptions()
    admin_options = ClientOptions()
    if kind == "acl":
        acl = root / "plain_acl.yml"
        acl.write_text(
            yaml.safe_dump(
                {
                    "accounts": [
                        {"accessKey": ADMIN_KEY, "secretKey": ADMIN_SECRET, "admin": True},
                        {
                            "accessKey": ACCESS_KEY,
                            "secretKey": SECRET_KEY,
                            "defaultTopicPerm": "DENY",
                            "topicPerms": [f"{TOPIC}=PUB"],
                        },
                    ]
                }
            )
        )
        broker = {"aclEnable": "true", "rocketmq.acl.plain.file": str(acl)}
        options = ClientOptions(access_key=ACCESS_KEY, secret_key=SECRET_KEY)
        admin_options = ClientOptions(access_key=ADMIN_KEY, secret_key=ADMIN_SECRET)
    elif kind == "acl2":
        broker = {
            "authenticationEnabled": "true",
            "authorizationEnabled": "true",
            "initAuthenticationUser": f'{{"username":"{ADMIN_KEY}","password":"{ADMIN_SECRET}"}}',
            "innerClientAuthenticationCredentials": f'{{"accessKey":"{ADMIN_KEY}","secretKey":"{ADMIN_SECRET}"}}',
        }
        options = ClientOptions(access_key=ACCESS_KEY, secret_key=SECRET_KEY)
        admin_options = ClientOptions(access_key=ADMIN_KEY, secret_key=ADMIN_SECRET)
    elif kind == "tls":
        tls = root / "tls.properties"
        tls.write_text(
            f"tls.server.mode=enforcing\ntls.server.certPath={pki['cert']}\ntls.server.keyPath={pki['key']}\n"
            f"tls.enable=true\ntls.client.authServer=true\ntls.client.trustCertPath={pki['ca']}\n"
        )
        namesrv = broker = {"tls.config.file": str(tls)}
        options = admin_options = ClientOptions(tls=True, tls_ca_file=str(pki["ca"]))
    return namesrv, broker, options, admin_options


async def start(root: Path, kind: str, pki: dict[str, Path]) -> tuple[Cluster, ClientOptions]:
    namesrv, broker, options, admin_options = settings(root, kind, pki)
    cluster = Cluster(root)
    await cluster.start_namesrv(**namesrv)
    await cluster.start_broker("broker-a", **broker)
    async with Admin(cluster.namesrv_addr, options=admin_options) as admin:
        await admin.create_topic(TOPIC, queue_nums=8)
        if kind == "acl2":
            # A normal user allowed to publish to the topic (the super user sets it up).
            addr = cluster.brokers["broker-a"].addr
            await auth_admin.create_user(admin, addr, UserInfo(username=ACCESS_KEY, password=SECRET_KEY))
            entry = PolicyEntryInfo(resource=f"Topic:{TOPIC}", actions=["Pub"], decision="Allow")
            policy = PolicyInfo(policy_type="Custom", entries=[entry])
            await auth_admin.create_acl(admin, addr, AclInfo(subject=f"User:{ACCESS_KEY}", policies=[policy]))
    return cluster, options


def median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


async def bench(args: argparse.Namespace) -> None:
    kinds = [k for k in KINDS if k in args.kinds]
    with tempfile.TemporaryDirectory(prefix="security-bench-") as tmp:
        work = Path(tmp)
        pki = make_pki(work)
        clusters: dict[str, Cluster] = {}
        producers: dict[str, Producer] = {}
        meters: dict[str, CpuMeter] = {}
        results: dict[tuple[str, str], list[Figures]] = {}
        try:
            for kind in kinds:
                cluster, options = await start(work / kind, kind, pki)
                clusters[kind] = cluster
                process = cluster.brokers["broker-a"].process
                assert process is not None and process.proc is not None
                meters[kind] = CpuMeter(process.proc.pid)
                producer = Producer(f"bench_{kind}", cluster.namesrv_addr, options=options)
                await producer.start()
                producers[kind] = producer
                await sync_sends(producer, 1.0, 8, args.size, meters[kind])  # warm up
            for round_no in range(args.runs):
                order = kinds[round_no % len(kinds) :] + kinds[: round_no % len(kinds)]
                for kind in order:
                    for label, workers in SCENARIOS.items():
                        f = await sync_sends(producers[kind], args.seconds, workers, args.size, meters[kind])
                        results.setdefault((kind, label), []).append(f)
                        print(
                            f"round {round_no + 1} {kind:<5} {label:<8} TPS {f.tps:7.0f}  CPU us/msg client "
                            f"{f.per_message_us(f.client_cpu):6.1f} broker {f.per_message_us(f.broker_cpu):6.1f}"
                            f"  failed {f.send_failed + f.response_failed}",
                            flush=True,
                        )
        finally:
            for producer in producers.values():
                await producer.shutdown()
            for cluster in clusters.values():
                await cluster.stop()

    def med(kind: str, label: str, value: Callable[[Figures], float]) -> float:
        return median([value(f) for f in results[(kind, label)]])

    print(f"\nmedians of {args.runs} alternating rounds, {args.seconds:g} s each, {args.size}-byte messages")
    print(
        f"{'':<6}{'scenario':<10}{'TPS':>8}{'vs plain':>10}{'target':>10}{'client us/msg':>15}{'broker us/msg':>15}"
    )
    for label in SCENARIOS:
        base = med("plain", label, lambda f: f.tps)
        for kind in kinds:
            tps = med(kind, label, lambda f: f.tps)
            change = (tps - base) / base if base else 0.0
            target = f"-{TARGETS[kind]:.0%} max" if kind in TARGETS else ""
            verdict = "" if kind == "plain" else (" ok" if -change <= TARGETS[kind] else " MISSED")
            client = med(kind, label, lambda f: f.per_message_us(f.client_cpu))
            broker = med(kind, label, lambda f: f.per_message_us(f.broker_cpu))
            print(
                f"{kind:<6}{label:<10}{tps:8.0f}{change:+10.1%}{target:>10}{client:15.1f}{broker:15.1f}{verdict}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument(
        "--kinds", type=lambda text: text.split(","), default=KINDS, help="a subset of " + ",".join(KINDS)
    )
    print(machine_summary(), flush=True)
    run_loop(bench(parser.parse_args()))


if __name__ == "__main__":
    main()
