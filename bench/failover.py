"""Controller-mode failover, repeated: how long a broker group is without a master, and without
acknowledged writes, when its master's host dies under a SYNC load.

``--system apache`` (the default): Apache RocketMQ 5.3.3 on simulated hosts (tests/hosts.py, run
as root): its controller embedded in a name server on one host, ``--replicas`` brokers of one
group (``allAckInSyncStateSet=true``) each on a host of its own, our SDK's producer in this
process. ``--system ours``: the same with our processes (tests/controller/hosted.py): our name
server(s) with our controller embedded (``enableControllerInNamesrv``; ``--controllers 3``: three
of them), or with ``--standalone`` ``mqcontroller`` replicas on hosts of their own beside one name
server, and our brokers in controller mode with the same settings. Each run is
tests/controller/failover.py's scenario on a topic of its own: the group in sync, a SYNC load,
kill -9 of the master's host (``--fault isolate``: its cable pulled instead), a new master,
writes again, everything read back from the new master; then the old master's broker is started
again on its host (same store) and rejoins as a slave before the next run. Prints each run and
min / median / max of the time to a new master and to the first acknowledged send, with the
lost / duplicated totals.

Run: ``.venv/bin/python -m bench.failover [--system apache|ours] [--runs 10] [--replicas 3]
[--senders 2] [--fault kill|isolate] [--controllers 1] [--standalone]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from bench.machine import summary
from tests.controller.failover import FailoverFigures, FailoverScenario, Tally, spread
from tests.controller.hosted import start_controllers, start_group
from tests.hosts import Network
from tests.interop.harness import ApacheHostedGroup, build_java53_only, start_apache_group

BROKER_NAME = "broker-a"


@contextlib.asynccontextmanager
async def apache_group(root: Path, replicas: int, controllers: int, standalone: bool) -> AsyncIterator[Any]:
    toolchain = await asyncio.to_thread(build_java53_only)
    group: ApacheHostedGroup | None = None
    try:
        async with Network(root) as net:
            started = time.monotonic()
            group = await start_apache_group(
                toolchain, net, replicas=replicas, controllers=controllers, broker_name=BROKER_NAME
            )
            print(
                f"apache 5.3.3: {controllers} controller(s) in name server(s) + {replicas} brokers "
                f"booted in {time.monotonic() - started:.1f}s"
            )
            yield group
    finally:
        if group is not None:
            group.stop()  # reaps the JVMs, killed with their hosts


@contextlib.asynccontextmanager
async def our_group(root: Path, replicas: int, controllers: int, standalone: bool) -> AsyncIterator[Any]:
    async with Network(root) as net:
        started = time.monotonic()
        embedded = not standalone
        ours = await start_controllers(net, count=controllers, embedded=embedded)
        group = await start_group(ours, broker_name=BROKER_NAME, replicas=replicas)
        where = "embedded in our name server(s)" if embedded else "mqcontrollers beside our name server"
        print(
            f"ours: {controllers} controller(s) {where} + {replicas} brokers booted in "
            f"{time.monotonic() - started:.1f}s"
        )
        yield group


async def bench(
    system: str,
    runs: int,
    replicas: int,
    senders: int,
    fault: str,
    controllers: int,
    standalone: bool,
    root: Path,
) -> list[tuple[FailoverFigures, Tally]]:
    results: list[tuple[FailoverFigures, Tally]] = []
    cluster = apache_group if system == "apache" else our_group
    async with cluster(root, replicas, controllers, standalone) as group:
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
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--system", choices=("apache", "ours"), default="apache", help="whose controller and brokers"
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
    parser.add_argument(
        "--controllers",
        type=int,
        default=1,
        help="controller replicas, each embedded in a name server of its own (default 1)",
    )
    parser.add_argument(
        "--standalone",
        action="store_true",
        help="ours only: the controllers as mqcontroller processes on hosts of their own, beside one "
        "name server",
    )
    args = parser.parse_args()
    if args.standalone and args.system != "ours":
        parser.error("--standalone runs our mqcontroller (use --system ours)")
    with tempfile.TemporaryDirectory(prefix="failover-bench-") as root:
        results = asyncio.run(
            bench(
                args.system,
                args.runs,
                args.replicas,
                args.senders,
                args.fault,
                args.controllers,
                args.standalone,
                Path(root),
            )
        )
    what = "kills of" if args.fault == "kill" else "cables pulled from"
    system = "apache 5.3.3" if args.system == "apache" else "ours"
    print(summary(), flush=True)
    print(f"\n{system}, {len(results)} {what} the master's host ({args.replicas} replicas):")
    print(f"  time to new master:          {spread([f.time_to_master for f, _ in results])}")
    print(f"  time to first acked send:    {spread([f.time_to_first_send for f, _ in results])}")
    print(
        f"  acked {sum(t.acked for _, t in results)}, lost {sum(len(t.lost) for _, t in results)}, "
        f"duplicated {sum(len(t.duplicated) for _, t in results)}, "
        f"failed sends {sum(t.failed for _, t in results)}"
    )


if __name__ == "__main__":
    main()
