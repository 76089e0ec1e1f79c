"""Controller-mode failover, repeated: how long a broker group is without a master, and without
acknowledged writes, when its master's host dies under a SYNC load.

Apache RocketMQ 5.3.3 on simulated hosts (tests/hosts.py, run as root): its controller embedded
in a name server on one host, ``--replicas`` brokers of one group (``allAckInSyncStateSet=true``)
each on a host of its own, our SDK's producer in this process. Each run is
tests/controller/failover.py's scenario on a topic of its own: the group in sync, a SYNC load,
kill -9 of the master's host (``--fault isolate``: its cable pulled instead), a new master,
writes again, everything read back from the new master; then the old master's broker is started
again on its host (same store) and rejoins as a slave before the next run. Prints each run and
min / median / max of the time to a new master and to the first acknowledged send, with the
lost / duplicated totals.

Run: ``.venv/bin/python -m bench.failover [--runs 10] [--replicas 3] [--senders 2] [--fault kill|isolate]``.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from tests.controller.failover import FailoverFigures, FailoverScenario, Tally, spread
from tests.hosts import Network
from tests.interop.harness import ApacheHostedGroup, build_java53_only, start_apache_group

BROKER_NAME = "broker-a"


async def bench(
    runs: int, replicas: int, senders: int, fault: str, root: Path
) -> list[tuple[FailoverFigures, Tally]]:
    toolchain = await asyncio.to_thread(build_java53_only)
    results: list[tuple[FailoverFigures, Tally]] = []
    group: ApacheHostedGroup | None = None
    try:
        async with Network(root) as net:
            started = time.monotonic()
            group = await start_apache_group(toolchain, net, replicas=replicas, broker_name=BROKER_NAME)
            print(
                f"apache 5.3.3: controller + {replicas} brokers booted in {time.monotonic() - started:.1f}s"
            )
            for run in range(runs):
                async with FailoverScenario(
                    namesrv=group.namesrv_addr,
                    controllers=group.controller_addrs,
                    broker_name=BROKER_NAME,
                    topic=f"FailoverBench{run}",
                    senders=senders,
                ) as scenario:
                    figures, tally = await scenario.run(
                        group.kill if fault == "kill" else group.isolate,
                        replicas=replicas,
                        before=50,
                        after=50,
                        ready_timeout=120,
                    )
                    results.append((figures, tally))
                    print(f"run {run + 1}/{runs}: {figures.describe()}; {tally.describe()}", flush=True)
                    await group.restart(figures.old_master)
    finally:
        if group is not None:
            group.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--senders", type=int, default=2)
    parser.add_argument(
        "--fault",
        choices=("kill", "isolate"),
        default="kill",
        help="kill -9 of the master's host (default), or its cable pulled (a power loss)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="failover-bench-") as root:
        results = asyncio.run(bench(args.runs, args.replicas, args.senders, args.fault, Path(root)))
    what = "kills of" if args.fault == "kill" else "cables pulled from"
    print(f"\napache 5.3.3, {len(results)} {what} the master's host ({args.replicas} replicas):")
    print(f"  time to new master:          {spread([f.time_to_master for f, _ in results])}")
    print(f"  time to first acked send:    {spread([f.time_to_first_send for f, _ in results])}")
    print(
        f"  acked {sum(t.acked for _, t in results)}, lost {sum(len(t.lost) for _, t in results)}, "
        f"duplicated {sum(len(t.duplicated) for _, t in results)}, "
        f"failed sends {sum(t.failed for _, t in results)}"
    )


if __name__ == "__main__":
    main()
