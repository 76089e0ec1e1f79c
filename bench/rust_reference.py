"""rocketmq-rust 1.0.0 (crates.io ``rocketmq-namesrv`` and ``rocketmq-broker``) as a third
reference system for bench/side_by_side.py, beside Apache RocketMQ 4.9.7 and 5.3.3.

This module owns getting its two binaries (``install``) and starting them from the RocketMQ
broker keys the benchmark already gives Apache and us (``start_namesrv``, ``start_broker``,
``broker_toml``); the benchmark owns the loads and the measuring. ``python -m
bench.rust_reference`` is a smoke run (fresh name server and broker; our SDK's admin, 100 sync
sends and lite pull; the Java admin, producer, batch and push-consumer loads, the lean batch
load and the C++ load; with ASYNC_FLUSH, then SYNC_FLUSH), printing one JSON line a step.

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

What the smoke run showed (2 shared cores, 07:55-08:05 UTC 2026-12-07): start-up (spawn to first
SEND_OK) 0.22-0.26 s with ASYNC_FLUSH, 0.23-0.87 s with SYNC_FLUSH; SEND_BATCH_MESSAGE, push
consumers, our admin's and the Java admin's updateTopic, our lite pull all work. The C++ client
(rocketmq 0.4.4) cannot use it: its name server and broker close a connection whose JSON header
lacks ``serializeTypeCurrentRPC``, which that client never sends (Apache defaults it to JSON).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
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
LOAD_TOPIC = "SideBySide"
QUEUES = 8


def _smoke_sdk(namesrv_addr: str) -> dict[str, Any]:
    """Our SDK against the running cluster: the topic through our admin (auto-created on the
    first send if that fails), 100 sync sends, read back with the lite pull consumer."""
    import asyncio

    from aiorocketmq import Admin, ConsumeFrom, LitePullConsumer, Message, Producer
    from aiorocketmq.client.types import SendStatus

    async def run() -> dict[str, Any]:
        out: dict[str, Any] = {}
        try:
            async with Admin(namesrv=namesrv_addr) as admin:
                await admin.create_topic(SMOKE_TOPIC, QUEUES)
            out["admin_create_topic"] = "ok"
        except Exception as exc:
            out["admin_create_topic"] = f"failed: {exc!r}"
        sent: dict[str, bytes] = {}
        statuses: dict[str, int] = {}
        async with Producer("rust_smoke_producer", namesrv=namesrv_addr) as producer:
            for i in range(100):
                body = f"rust-smoke-{i}".encode()
                result = await producer.send(Message(SMOKE_TOPIC, body))
                statuses[str(result.status)] = statuses.get(str(result.status), 0) + 1
                if result.status is SendStatus.SEND_OK:
                    sent[result.msg_id] = body
        out["send_statuses"] = statuses
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
        out["received"] = len(received)
        out["received_match_sent"] = received == sent
        return out

    return asyncio.run(run())


class _Cluster:
    """One rocketmq-rust name server and broker for the smoke run."""

    def __init__(self, work: Path) -> None:
        from bench.procs import free_port

        self.namesrv_bin, self.broker_bin = install()
        self.work = work
        self.namesrv_port = free_port()
        self.namesrv_addr = f"127.0.0.1:{self.namesrv_port}"
        self.namesrv = start_namesrv(self.namesrv_bin, self.namesrv_port, work / "namesrv")
        self.broker: subprocess.Popen[bytes] | None = None
        self.broker_port = 0

    def start_broker(self, flush: str) -> float:
        """A broker with a fresh store; seconds from spawn to its first SEND_OK."""
        import time

        from bench.side_by_side import broker_port, first_send, store_settings

        home = self.work / f"broker-{flush.lower()}"
        shutil.rmtree(home, ignore_errors=True)
        port = broker_port()
        settings = {
            **store_settings(home),
            "brokerName": "broker-a",
            "listenPort": port,
            "namesrvAddr": self.namesrv_addr,
            "flushDiskType": flush,
        }
        self.broker_port = port
        started = time.monotonic()
        self.broker = start_broker(self.broker_bin, settings, home)
        try:
            first_send(port, self.broker)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}; its output:\n{(home / 'broker.out').read_text()[-3000:]}") from None
        return time.monotonic() - started

    def broker_cpu(self) -> float:
        from bench.procs import cpu_seconds

        assert self.broker is not None
        return cpu_seconds(self.broker.pid)

    def stop_broker(self) -> None:
        from bench.side_by_side import stop

        if self.broker is not None:
            stop(self.broker)
            self.broker = None

    def stop(self) -> None:
        from bench.side_by_side import stop

        self.stop_broker()
        stop(self.namesrv)


def _java(cluster: _Cluster, toolchain: Any, mode: str, **opts: Any) -> dict[str, Any]:
    """The benchmark's Java load (benchload.Load) as bench/side_by_side.py ``Loads.java`` runs
    it, with the broker's CPU over its measuring window in ``broker_cpu_us_per_msg``."""
    import contextlib

    from bench.side_by_side import LOAD_JVM

    window = float(opts.get("seconds", 0))
    cmd = [
        toolchain.java,
        *LOAD_JVM,
        "-Dorg.apache.rocketmq.client.sendSmartMsg=true",
        f"-Drocketmq.client.logRoot={cluster.work / 'client-logs'}",
        "-Drocketmq.client.logLevel=WARN",
        "-cp",
        toolchain.client_classpath,
        "benchload.Load",
        mode,
        f"namesrv={cluster.namesrv_addr}",
        *(f"{k}={v}" for k, v in opts.items()),
    ]
    errors = cluster.work / f"load-{mode}.err"
    with errors.open("w") as err:
        proc = subprocess.Popen(cmd, cwd=cluster.work, stdout=subprocess.PIPE, stderr=err, text=True)
    assert proc.stdout is not None
    cpu = None
    seen = []
    if window and mode in ("producer", "batch"):
        for line in proc.stdout:
            seen.append(line)
            if line.startswith('{"event": "window"}'):
                before = cluster.broker_cpu()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(window)
                cpu = cluster.broker_cpu() - before
                break
    else:
        before = cluster.broker_cpu()
    out = "".join(seen) + proc.stdout.read()
    proc.wait(600)
    if cpu is None:
        cpu = cluster.broker_cpu() - before
    lines = [line for line in out.splitlines() if line.startswith("{") and '"event"' not in line]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"Load {mode} failed ({proc.returncode}):\n{out[-1500:]}\n{errors.read_text()[-2500:]}"
        )
    result: dict[str, Any] = json.loads(lines[-1])
    if "count" in result:
        result["broker_cpu_us_per_msg"] = round(1e6 * cpu / max(1, result["count"]), 2)
    return result


def _cpp(cluster: _Cluster, cpp_load: Path, threads: int, seconds: float) -> dict[str, Any]:
    """bench/cpp_load.c (the official C++ client, sync sends) as side_by_side runs it."""
    import time

    start_at = time.time() + 3.0
    cmd = [str(cpp_load), "produce", cluster.namesrv_addr, LOAD_TOPIC, str(threads), str(seconds), "128"]
    proc = subprocess.Popen(
        [*cmd, f"{start_at:.3f}"],
        cwd=cluster.work,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    time.sleep(max(0.0, start_at - time.time()))
    before = cluster.broker_cpu()
    time.sleep(seconds)
    cpu = cluster.broker_cpu() - before
    out, _ = proc.communicate(timeout=300)
    if proc.returncode:
        raise RuntimeError(f"cpp_load failed ({proc.returncode}): {out[-1500:]}")
    result = json.loads(out.strip().splitlines()[-1])
    sent = result["sent"]
    if sent == 0 and result["failed"] == 0:
        # Its first send (10 s timeout, retried) never came back before the window closed.
        raise RuntimeError(
            "cpp_load sent nothing: its route lookups never got an answer (rocketmq-rust 1.0.0 drops "
            "a connection whose JSON header lacks serializeTypeCurrentRPC, which the C++ client omits)"
        )
    return {
        "tps": round(sent / seconds, 1),
        "count": sent,
        "failed": result["failed"],
        "first_failure": result.get("first_failure"),
        "avg_rt_ms": round(result["rt_sum_us"] / 1000 / max(1, sent), 3),
        "broker_cpu_us_per_msg": round(1e6 * cpu / max(1, sent), 2),
    }


def _lean(cluster: _Cluster, port: int, seconds: float, warmup: float) -> dict[str, Any]:
    """bench/batch_load.c: 16 batches of 32 128-byte messages in flight (SEND_BATCH_MESSAGE
    frames our SDK's encoders build), as side_by_side's ``batch, lean load``."""
    import time

    from bench.side_by_side import batch_frames, build_batch_load

    binary = build_batch_load(cluster.work)
    frames = cluster.work / "frames-32.bin"
    frames.write_bytes(batch_frames(LOAD_TOPIC, QUEUES, 32, 128))
    argv = [str(binary), str(seconds), str(warmup), "16", "32", f"127.0.0.1:{port}", str(frames)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(warmup)
    before = cluster.broker_cpu()
    time.sleep(seconds)
    cpu = cluster.broker_cpu() - before
    out, err = proc.communicate(timeout=120)
    if proc.returncode:
        raise RuntimeError(f"batch_load failed ({proc.returncode}): {err.strip()}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    result["broker_cpu_us_per_msg"] = round(1e6 * cpu / max(1, result["count"]), 2)
    return result


def main() -> None:
    import argparse
    import functools
    import tempfile
    import traceback

    from tests.interop.harness import build_java_only

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the run's directory")
    args = parser.parse_args()
    print(machine_summary(), flush=True)

    def report(name: str, value: Any) -> None:
        print(
            json.dumps({"step": name, **(value if isinstance(value, dict) else {"result": value})}),
            flush=True,
        )

    def attempt(name: str, step: Callable[..., Any], *step_args: Any, **step_opts: Any) -> Any:
        try:
            value = step(*step_args, **step_opts)
        except Exception as exc:
            report(name, {"error": f"{type(exc).__name__}: {exc}"[-2500:]})
            traceback.print_exc(file=sys.stderr)
            return None
        report(name, value)
        return value

    work = Path(tempfile.mkdtemp(prefix="rust-reference-"))
    print(f"run directory: {work}", flush=True)
    toolchain = build_java_only()
    cpp_load: Path | None = None
    try:
        from bench.broker_bench import build_cpp_load

        cpp_load = build_cpp_load(work)
    except Exception as exc:
        report("build cpp_load", {"error": repr(exc)})
    cluster = _Cluster(work)
    load = {"topic": LOAD_TOPIC, "seconds": args.seconds, "warmup": args.warmup, "size": 128}
    try:
        for flush in ("ASYNC_FLUSH", "SYNC_FLUSH"):
            startup = attempt(
                f"{flush}: broker start-up (spawn to first SEND_OK), s", cluster.start_broker, flush
            )
            if startup is None:
                continue
            attempt(f"{flush}: SDK admin + 100 sync sends + lite pull", _smoke_sdk, cluster.namesrv_addr)
            java = functools.partial(_java, cluster, toolchain)
            attempt(
                f"{flush}: Java admin updateTopic (Load topic)",
                java,
                "topic",
                topic=LOAD_TOPIC,
                queues=QUEUES,
            )
            produced = attempt(f"{flush}: Java producer -w 16", java, "producer", threads=16, **load)
            attempt(f"{flush}: Java batch -b 32", java, "batch", threads=16, batch=32, **load)
            if produced:
                attempt(
                    f"{flush}: Java push consumer",
                    java,
                    "consumer",
                    topic=LOAD_TOPIC,
                    group="benchmark_consumer",
                    count=produced["count"],
                    timeout=60,
                )
            attempt(
                f"{flush}: batch_load (lean) -b 32",
                _lean,
                cluster,
                cluster.broker_port,
                args.seconds,
                args.warmup,
            )
            if cpp_load is not None:
                attempt(f"{flush}: cpp_load -w 16", _cpp, cluster, cpp_load, 16, args.seconds)
            cluster.stop_broker()
    finally:
        cluster.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
