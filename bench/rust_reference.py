"""rocketmq-rust 1.0.0 (crates.io ``rocketmq-namesrv`` and ``rocketmq-broker``) as a third
reference system for bench/side_by_side.py, beside Apache RocketMQ 4.9.7 and 5.3.3.

This module owns getting its two binaries (``install``) and starting them from the RocketMQ
broker keys the benchmark already gives Apache and us (``start_namesrv``, ``start_broker``,
``broker_toml``); the benchmark owns the loads and the measuring
(``python -m bench.side_by_side --reference rust``). ``python -m bench.rust_reference`` is a
smoke run: a fresh name server and broker, its start-up time, our SDK's admin, 100 sync sends
and a lite pull of them.

Configuration, one reason each (from the crates' README files and sources, 1.0.0):

* ``cargo install --locked``: the dependency versions of the crates' own Cargo.lock, the build as published.
* Binaries ``rocketmq-namesrv-rust`` / ``rocketmq-broker-rust``: the crates' ``[[bin]]`` names.
* Broker config is TOML given with ``-c``: the canonical format (``.properties`` is a migration path).
* Keys go under ``[broker]``, ``[broker.brokerIdentity]`` (brokerName, brokerClusterName, brokerId) or
  ``[store]``: the schema rejects flat files and unknown keys, so an unmapped key raises here instead.
* ``brokerIP1`` is written as ``broker.brokerIp1``: the Rust schema's name for the advertised address.
* ``storePathRootDir`` goes to both ``broker`` and ``store``: two independent roots there, one in Apache.
* ``store.flushDiskType`` = ASYNC_FLUSH / SYNC_FLUSH: the same key and values as Java's MessageStoreConfig.
* ``store.brokerRole = "ASYNC_MASTER"``: a standalone master, Apache's default role.
* ``store.haListenPort = listenPort + 1``: its default is a fixed 10912 (Apache derives listenPort + 1).
* ``diskMaxUsedSpaceRatio=98`` is written with diskSpaceCleanForciblyRatio 99 and diskSpaceWarningLevelRatio
  100: validation needs max < forcibly < warning, and the store clamps them to 95 / 85 / 90 %, its most
  permissive; it refuses writes only above 90 % disk use (the tmpfs story), so at 26 % it never acts.
* ``autoCreateTopicEnable`` / ``autoCreateSubscriptionGroup`` under ``[broker]`` as given: same as Apache.
* ``metricsPromExporterEnable`` / ``enableGrpcServer`` dropped: ours only; it has no gRPC server and
  exporters are off unless configured.
* Listeners on 127.0.0.1 (``broker.brokerServerConfig.bindAddress``, namesrv ``--bindAddress``): one host,
  and its name server refuses a non-loopback listener without a security profile.
* Name server: ``--listenPort`` / ``--bindAddress`` / ``--rocketmqHome`` flags and a TOML ``-c`` file with
  ``kvConfigPath`` and ``configStorePath`` in the run's directory: their defaults are under ``~``.
* ``ROCKETMQ_HOME`` = the run's directory: both binaries refuse to start without it.
* ``HOME`` = the run's directory: some broker defaults (``~/store/config``, the auth path) hang off ``~``.
* Broker ``-n namesrvAddr`` and no ``NAMESRV_ADDR`` in its environment: ``-n`` comes first, the env second.
* ``--log-filter warn`` on both: Apache runs with logback at WARN here and ours at WARNING.
* No ``ROCKETMQ_SECURITY_PROFILE``, no ACL: as the Apache and our brokers in the benchmark.
* Tokio worker threads left at the default (available parallelism, 2 here): as a user runs it.

What it supports, as found on 2026-12-07: SEND_BATCH_MESSAGE, push consumers, our admin's and
the Java admin's updateTopic, our lite pull. The C++ client (rocketmq 0.4.4) cannot use it: its
name server and broker close a connection whose JSON header lacks ``serializeTypeCurrentRPC``,
which that client never sends (Apache defaults it to JSON), so the benchmark skips that load.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.machine import summary as machine_summary  # noqa: E402
from bench.procs import wait_port  # noqa: E402
from tests.interop.harness import CACHE  # noqa: E402

VERSION = "1.0.0"
NAMESRV_BINARY = "rocketmq-namesrv-rust"
BROKER_BINARY = "rocketmq-broker-rust"

#: RocketMQ broker keys and the canonical TOML path that owns each in rocketmq-rust 1.0.0.
IDENTITY_KEYS = {"brokerName", "brokerClusterName", "brokerId"}
BROKER_KEYS = {
    "brokerIP1": "brokerIp1",
    "brokerIP2": "brokerIp2",
    "listenPort": "listenPort",
    "namesrvAddr": "namesrvAddr",
    "autoCreateTopicEnable": "autoCreateTopicEnable",
    "autoCreateSubscriptionGroup": "autoCreateSubscriptionGroup",
}
STORE_KEYS = {
    "storePathCommitLog",
    "flushDiskType",
    "brokerRole",
    "mappedFileSizeCommitLog",
    "mappedFileSizeConsumeQueue",
    "maxMessageSize",
    "transientStorePoolEnable",
}
#: Keys only our broker knows; the Rust schema rejects unknown keys (see the module docstring).
OURS_ONLY_KEYS = {"metricsPromExporterEnable", "enableGrpcServer"}


def _cargo() -> str:
    found = shutil.which("cargo")
    if found:
        return found
    fallback = Path.home() / ".cargo" / "bin" / "cargo"
    if fallback.is_file():
        return str(fallback)
    raise RuntimeError(
        "rocketmq-rust is built from crates.io with cargo, which is not installed: install Rust "
        "1.95 or newer (https://rustup.rs) and run again"
    )


def install(cache: Path = CACHE) -> tuple[Path, Path]:
    """The name server and broker binaries of rocketmq-rust ``VERSION``, built into
    ``cache/rocketmq-rust-VERSION`` by ``cargo install`` the first time (tens of minutes on
    two cores). Concurrent callers wait on one lock rather than building twice."""
    root = cache / f"rocketmq-rust-{VERSION}"
    namesrv, broker = root / "bin" / NAMESRV_BINARY, root / "bin" / BROKER_BINARY
    if namesrv.is_file() and broker.is_file():
        return namesrv, broker
    cargo = _cargo()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (namesrv.is_file() and broker.is_file()):
            cmd = [
                cargo,
                "install",
                "--locked",
                "--root",
                str(root),
                f"rocketmq-namesrv@{VERSION}",
                f"rocketmq-broker@{VERSION}",
            ]
            log = root / "cargo-install.log"
            with log.open("w") as out:
                done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT)
            if done.returncode != 0:
                tail = log.read_text()[-3000:]
                raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}); end of {log}:\n{tail}")
    return namesrv, broker


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    # A JSON string is a valid TOML basic string for everything a path or a name holds here.
    return json.dumps(str(value))


def _toml(tables: Mapping[str, Mapping[str, Any]]) -> str:
    lines = []
    for name, table in tables.items():
        lines.append(f"[{name}]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in table.items()]
        lines.append("")
    return "\n".join(lines)


def _toml_value_lines(values: Mapping[str, Any]) -> str:
    return "".join(f"{key} = {_toml_value(value)}\n" for key, value in values.items())


def broker_toml(settings: Mapping[str, Any]) -> str:
    """The canonical rocketmq-rust broker configuration for RocketMQ broker ``settings`` (the
    keys of bench/side_by_side.py ``store_settings`` plus brokerName, listenPort, namesrvAddr
    and flushDiskType); KeyError naming a key this module does not know where to put."""
    broker: dict[str, Any] = {}
    identity: dict[str, Any] = {}
    store: dict[str, Any] = {"brokerRole": "ASYNC_MASTER"}
    unknown = []
    for key, value in settings.items():
        if key in IDENTITY_KEYS:
            identity[key] = value
        elif key in BROKER_KEYS:
            broker[BROKER_KEYS[key]] = value
        elif key in STORE_KEYS:
            store[key] = value
        elif key == "storePathRootDir":
            broker[key] = store[key] = value
        elif key == "diskMaxUsedSpaceRatio":
            store["diskSpaceWarningLevelRatio"] = max(100, int(value) + 2)
            store["diskSpaceCleanForciblyRatio"] = max(99, int(value) + 1)
            store[key] = value
        elif key not in OURS_ONLY_KEYS:
            unknown.append(key)
    if unknown:
        raise KeyError(f"no rocketmq-rust owner known for broker key(s) {sorted(unknown)}")
    port = int(settings["listenPort"])
    store.update(haListenAddress="127.0.0.1", haListenPort=port + 1)
    return _toml(
        {
            "broker": broker,
            "broker.brokerServerConfig": {"bindAddress": "127.0.0.1"},
            "broker.brokerIdentity": identity,
            "store": store,
        }
    )


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NAMESRV_ADDR", "ROCKETMQ_SECURITY_PROFILE")}
    env.update(ROCKETMQ_HOME=str(home), HOME=str(home))
    return env


def _spawn(cmd: list[str], home: Path, name: str) -> subprocess.Popen[bytes]:
    """Start ``cmd`` in ``home``; its stdout and stderr (banner, start-up errors) go to
    ``home/<name>.out``, its own logs under ``home``."""
    with (home / f"{name}.out").open("wb") as out:
        return subprocess.Popen(cmd, cwd=home, env=_env(home), stdout=out, stderr=subprocess.STDOUT)


def start_namesrv(binary: Path, port: int, home: Path) -> subprocess.Popen[bytes]:
    """The rocketmq-rust name server on 127.0.0.1:``port`` with its files in ``home``; returns
    once it accepts connections (RuntimeError, with its output, if it exits first)."""
    home.mkdir(parents=True, exist_ok=True)
    conf = home / "namesrv.toml"
    conf.write_text(
        _toml_value_lines(
            {
                "rocketmqHome": str(home),
                "kvConfigPath": str(home / "namesrv" / "kvConfig.json"),
                "configStorePath": str(home / "namesrv" / "namesrv.properties"),
            }
        )
    )
    cmd = [
        str(binary),
        "-c",
        str(conf),
        "--listenPort",
        str(port),
        "--bindAddress",
        "127.0.0.1",
        "--rocketmqHome",
        str(home),
        "--log-filter",
        "warn",
    ]
    proc = _spawn(cmd, home, "namesrv")
    try:
        wait_port(port, 60, proc)
    except RuntimeError as exc:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"{exc}; its output:\n{(home / 'namesrv.out').read_text()[-3000:]}") from None
    return proc


def start_broker(binary: Path, settings: Mapping[str, Any], home: Path) -> subprocess.Popen[bytes]:
    """The rocketmq-rust broker for RocketMQ broker ``settings`` (see :func:`broker_toml`),
    its configuration file and output in ``home``. Returns at once: the caller waits for it
    (bench/side_by_side.py ``first_send``); its output is in ``home/broker.out``."""
    home.mkdir(parents=True, exist_ok=True)
    conf = home / "broker.toml"
    conf.write_text(broker_toml(settings))
    cmd = [
        str(binary),
        "-c",
        str(conf),
        "-n",
        str(settings["namesrvAddr"]),
        "--log-filter",
        "warn",
    ]
    return _spawn(cmd, home, "broker")


# ---- the smoke run --------------------------------------------------------------------------

SMOKE_TOPIC = "RustSmoke"
QUEUES = 8


def _smoke_sdk(namesrv_addr: str) -> dict[str, Any]:
    """Our SDK against the running cluster: the topic through our admin, 100 sync sends, read
    back with the lite pull consumer."""
    import asyncio

    from aiorocketmq import Admin, ConsumeFrom, LitePullConsumer, Message, Producer
    from aiorocketmq.client.types import SendStatus

    async def run() -> dict[str, Any]:
        async with Admin(namesrv=namesrv_addr) as admin:
            await admin.create_topic(SMOKE_TOPIC, QUEUES)
        sent: dict[str, bytes] = {}
        statuses: dict[str, int] = {}
        async with Producer("rust_smoke_producer", namesrv=namesrv_addr) as producer:
            for i in range(100):
                body = f"rust-smoke-{i}".encode()
                result = await producer.send(Message(SMOKE_TOPIC, body))
                statuses[str(result.status)] = statuses.get(str(result.status), 0) + 1
                if result.status is SendStatus.SEND_OK:
                    sent[result.msg_id] = body
        consumer = LitePullConsumer(
            "rust_smoke_consumer", namesrv=namesrv_addr, consume_from=ConsumeFrom.FIRST_OFFSET
        )
        consumer.subscribe(SMOKE_TOPIC)
        received: dict[str, bytes] = {}
        async with consumer:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            while len(received) < len(sent) and loop.time() < deadline:
                for msg in await consumer.poll(1.0):
                    received[msg.msg_id] = msg.body
        return {"send_statuses": statuses, "received": len(received), "received_match_sent": received == sent}

    return asyncio.run(run())


def main() -> None:
    """Install if needed, start a name server and a broker (ASYNC_FLUSH, a fresh store), time
    the broker's start-up and run :func:`_smoke_sdk`. The loads are bench/side_by_side.py's
    (``--reference rust``)."""
    import tempfile
    import time

    from bench.procs import free_port
    from bench.side_by_side import broker_port, first_send, stop, store_settings

    print(machine_summary(), flush=True)
    namesrv_bin, broker_bin = install()
    work = Path(tempfile.mkdtemp(prefix="rust-reference-"))
    namesrv_port = free_port()
    namesrv = start_namesrv(namesrv_bin, namesrv_port, work / "namesrv")
    broker = None
    try:
        home = work / "broker-a"
        port = broker_port()
        settings = {
            **store_settings(home),
            "brokerName": "broker-a",
            "listenPort": port,
            "namesrvAddr": f"127.0.0.1:{namesrv_port}",
        }
        started = time.monotonic()
        broker = start_broker(broker_bin, settings, home)
        first_send(port, broker)
        print(json.dumps({"startup_s": round(time.monotonic() - started, 3)}), flush=True)
        print(json.dumps(_smoke_sdk(f"127.0.0.1:{namesrv_port}")), flush=True)
    finally:
        if broker is not None:
            stop(broker)
        stop(namesrv)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
