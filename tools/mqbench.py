"""``mqbench``: RocketMQ's benchmark tools on the asyncio SDK, with their options and report
lines (``distribution/benchmark/producer.sh``, ``batchproducer.sh``, ``consumer.sh``).

::

    mqbench producer -n 127.0.0.1:9876 -t BenchmarkTest -w 64 -s 128
    mqbench batchproducer -n 127.0.0.1:9876 -b 16 -q 100000
    mqbench consumer -n 127.0.0.1:9876 -t BenchmarkTest -g benchmark_consumer

Concurrency is tasks, not threads: ``-w`` is the number of concurrent senders (or listener
calls in flight, for the consumer). The measuring follows RocketMQ's tools: a snapshot of the
counters every second, the last ten kept; each report (every ``-ri`` ms) compares the newest
snapshot with the oldest kept, so rates and averages cover the last ~10 s; maxima are since the
start (producer) or since the previous report (consumer). Reports start as soon as two
snapshots exist (RocketMQ waits for ten), and every run ends with a ``[Complete]`` line whose
window includes a final snapshot taken when the run stops (``-q`` reached, ``--count`` reached,
or SIGINT/SIGTERM). A live progress line goes to stderr every second: redrawn in place on a
terminal, one line each otherwise (``--no-progress`` turns it off).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import signal
import string
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from aiorocketmq.client import (
    Admin,
    BrokerError,
    ClientOptions,
    ConsumeResult,
    Message,
    MessageExt,
    MQError,
    Producer,
    PushConsumer,
    RemotingError,
)
from aiorocketmq.client.errors import TopicNotExistError
from aiorocketmq.protocol.loop import run, wait_event

from .cli import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    CommandFailed,
    Parser,
    add_tls_options,
    human_time,
    non_negative_int,
    one_line,
    parse_bool,
    positive_int,
    quiet_logging,
    rate,
    tool_credentials,
)

PRODUCER_GROUP = "benchmark_producer"
DEFAULT_TOPIC = "BenchmarkTest"
SNAPSHOT_INTERVAL = 1.0
SNAPSHOTS_KEPT = 10
#: After a remoting or broker error a sender waits this long (RocketMQ's tool sleeps 3 s).
ERROR_PAUSE = 3.0
#: Async mode keeps at most this many sends in flight (RocketMQ's MAX_LENGTH_ASYNC_QUEUE).
MAX_ASYNC_IN_FLIGHT = 10_000
#: The SDK compresses with zlib at this level.
COMPRESS_LEVEL = 5
NO_COMPRESSION = 1 << 62


def now_millis() -> int:
    return time.time_ns() // 1_000_000


# -- measuring ----------------------------------------------------------------------------------


class Window:
    """The last :data:`SNAPSHOTS_KEPT` snapshots of a counter tuple whose first item is the
    time in milliseconds."""

    def __init__(self, take: Callable[[], tuple[float, ...]]) -> None:
        self.take = take
        self.snapshots: deque[tuple[float, ...]] = deque([take()], maxlen=SNAPSHOTS_KEPT)

    def snap(self) -> None:
        self.snapshots.append(self.take())

    @property
    def ready(self) -> bool:
        return len(self.snapshots) >= 2

    def deltas(self) -> tuple[float, ...]:
        """Newest minus oldest, item by item (the first item is the span in milliseconds)."""
        first, last = self.snapshots[0], self.snapshots[-1]
        return tuple(b - a for a, b in zip(first, last))


def per_second(count: float, span_ms: float) -> int:
    return int(count / span_ms * 1000) if span_ms > 0 else 0


def average(total: float, count: float) -> float:
    return total / count if count else 0.0


class Progress:
    """The live progress line on stderr: redrawn in place on a terminal, one line per update
    otherwise. Report lines printed to stdout first clear a line drawn in place."""

    def __init__(self, enabled: bool, stream: TextIO = sys.stderr) -> None:
        self.enabled = enabled
        self.stream = stream
        self.in_place = enabled and stream.isatty()
        self.started = time.monotonic()
        self._drawn = False

    def update(self, text: str) -> None:
        if not self.enabled:
            return
        line = f"[{time.monotonic() - self.started:7.1f}s] {text}"
        if self.in_place:
            self.stream.write(f"\r{line}\x1b[K")
            self._drawn = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def clear(self) -> None:
        if self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False


def report(progress: Progress, line: str) -> None:
    progress.clear()
    print(line, flush=True)


async def every(interval: float, action: Callable[[], None]) -> None:
    """Call ``action`` every ``interval`` seconds on a fixed schedule (no drift)."""
    loop = asyncio.get_running_loop()
    due = loop.time() + interval
    while True:
        await asyncio.sleep(max(0.0, due - loop.time()))
        action()
        due += interval


async def pause(stop: asyncio.Event, seconds: float) -> None:
    """Sleep, unless the run is stopped meanwhile."""
    await wait_event(stop, seconds)


def stop_on_signals(stop: asyncio.Event) -> None:
    """The first SIGINT or SIGTERM ends the run cleanly (in-flight work finishes, the
    ``[Complete]`` line prints); a second one interrupts at once."""
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)

    def first_signal() -> None:
        stop.set()
        for sig in signals:
            loop.remove_signal_handler(sig)

    for sig in signals:
        loop.add_signal_handler(sig, first_signal)


def split_quantity(total: int, workers: int) -> list[int]:
    """RocketMQ's split: an equal share each, the remainder to the first; 0 means unlimited."""
    if total <= 0:
        return [0] * workers
    shares = [total // workers] * workers
    shares[0] += total % workers
    return [share for share in shares if share > 0]


# -- producers ----------------------------------------------------------------------------------


@dataclass
class ProducerStats:
    requests_ok: int = 0
    requests_failed: int = 0
    responses_failed: int = 0
    messages_ok: int = 0
    messages_failed: int = 0
    rt_total_ms: float = 0.0
    max_rt_ms: float = 0.0

    def snapshot(self) -> tuple[float, ...]:
        return (
            float(now_millis()),
            self.requests_ok,
            self.requests_failed,
            self.responses_failed,
            self.messages_ok,
            self.messages_failed,
            self.rt_total_ms,
        )

    def succeeded(self, began: float, messages: int) -> None:
        rt = (time.perf_counter() - began) * 1000
        self.requests_ok += 1
        self.messages_ok += messages
        self.rt_total_ms += rt
        if rt > self.max_rt_ms:
            self.max_rt_ms = rt

    def failed(self, messages: int, *, response: bool) -> None:
        if response:
            self.responses_failed += 1
        else:
            self.requests_failed += 1
        self.messages_failed += messages


def producer_line(stats: ProducerStats, window: Window, *, done: bool) -> str:
    span, ok, _, _, _, _, rt = window.deltas()
    _, _, send_failed, response_failed, _, _, _ = window.snapshots[-1]
    fields = (
        f"Send TPS: {per_second(ok, span)} | Max RT(ms): {round(stats.max_rt_ms)} | "
        f"Average RT(ms): {average(rt, ok):7.3f} | Send Failed: {int(send_failed)} | "
        f"Response Failed: {int(response_failed)}"
    )
    if done:
        total = stats.requests_ok + stats.requests_failed + stats.responses_failed
        return f"[Complete] Send Total: {total} | {fields}"
    return f"Current Time: {human_time(now_millis())} | {fields}"


def batch_line(stats: ProducerStats, window: Window, *, done: bool) -> str:
    span, requests, _, _, messages, _, rt = window.deltas()
    _, _, send_failed, response_failed, _, message_failed, _ = window.snapshots[-1]
    fields = (
        f"Send TPS: {per_second(requests, span)} | Send MPS: {per_second(messages, span)} | "
        f"Max RT(ms): {round(stats.max_rt_ms)} | Average RT(ms): {average(rt, requests):7.3f} | "
        f"Average Message RT(ms): {average(rt, messages):7.3f} | "
        f"Send Failed: {int(send_failed + response_failed)} | Send Message Failed: {int(message_failed)}"
    )
    if done:
        return f"[Complete] Send Total: {stats.messages_ok + stats.messages_failed} | {fields}"
    return f"Current Time: {human_time(now_millis())} | {fields}"


class MessageFactory:
    """Builds each benchmark message as RocketMQ's tool does: one random alphanumeric body
    made once, and per message a key (the second it was built), a tag (``tag<ms % count>``),
    a delay level and user properties of at least ``propertySize`` characters, as asked."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.topic = args.topic
        self.body = "".join(random.choices(string.ascii_letters + string.digits, k=args.messageSize)).encode()
        self.key_enable = args.keyEnable
        self.tag_count = args.tagCount
        self.delay_level = args.delayLevel if args.delayEnable else 0
        self.property_size = args.propertySize

    def build(self) -> Message:
        now = now_millis()
        msg = Message(self.topic, self.body, properties=self.properties(now) if self.property_size else None)
        if self.key_enable:
            msg.keys = [str(now // 1000)]
        if self.tag_count > 0:
            msg.tags = f"tag{now % self.tag_count}"
        if self.delay_level:
            msg.delay_level = self.delay_level
        return msg

    def properties(self, now: int) -> dict[str, str]:
        props: dict[str, str] = {}
        value = random.Random(now).randrange(100)
        size = i = 0
        while True:
            first, second = f"prop{i}", f"prop{i + 1}"
            props[first], props[second] = f"hello{value}", str(value)
            size += len(first) + len(second) + len(props[first]) + len(props[second])
            if size > self.property_size:
                return props
            i += 2
            value += 2


async def send_and_count(
    producer: Producer,
    messages: list[Message],
    stats: ProducerStats,
    stop: asyncio.Event,
) -> None:
    began = time.perf_counter()
    try:
        if len(messages) == 1:
            await producer.send(messages[0])
        else:
            await producer.send_batch(messages)
    except BrokerError:
        stats.failed(len(messages), response=True)
        await pause(stop, ERROR_PAUSE)
    except RemotingError:
        stats.failed(len(messages), response=False)
        await pause(stop, ERROR_PAUSE)
    except MQError:
        # Failures after the SDK's retries, no route, ...: RocketMQ counts its client
        # exceptions as send failures and goes on at once.
        stats.failed(len(messages), response=False)
    else:
        stats.succeeded(began, len(messages))


async def run_producer(args: argparse.Namespace, *, batch: bool) -> int:
    threads = 1 if args.asyncEnable else args.threadCount
    batch_size = args.batchSize if batch else 1
    print(
        f"topic: {args.topic}, threadCount: {threads}, messageSize: {args.messageSize}, "
        + (f"batchSize: {batch_size}, " if batch else "")
        + f"keyEnable: {_java(args.keyEnable)}, propertySize: {args.propertySize}, tagCount: {args.tagCount}, "
        f"traceEnable: false, aclEnable: {_java(args.aclEnable)}, messageQuantity: {args.messageQuantity}, "
        + (
            ""
            if batch
            else f"delayEnable: {_java(args.delayEnable)}, delayLevel: {args.delayLevel}, "
            f"asyncEnable: {_java(args.asyncEnable)}, "
        )
        + f"compressEnable: {_java(args.compressEnable)}, reportInterval: {args.reportInterval}",
        flush=True,
    )
    factory = MessageFactory(args)
    producer = Producer(
        PRODUCER_GROUP,
        args.namesrvAddr,
        instance_name=str(now_millis()),
        compress_threshold=args.compressOverHowMuch if args.compressEnable else NO_COMPRESSION,
        options=client_options(args),
    )
    await producer.start()
    try:
        # Fails fast (exit 1) when no name server answers or the topic cannot be routed.
        await producer.queues(args.topic)
        return await _produce(args, producer, factory, threads, batch_size, batch)
    finally:
        await producer.shutdown()


async def _produce(
    args: argparse.Namespace,
    producer: Producer,
    factory: MessageFactory,
    threads: int,
    batch_size: int,
    batch: bool,
) -> int:
    stats = ProducerStats()
    window = Window(stats.snapshot)
    progress = Progress(not args.no_progress)
    stop = asyncio.Event()
    stop_on_signals(stop)
    line = batch_line if batch else producer_line

    def snap() -> None:
        window.snap()
        span, ok, _, _, messages, _, _ = _last_step(window)
        failed = stats.requests_failed + stats.responses_failed
        progress.update(
            f"sent {stats.messages_ok} messages ({per_second(messages if batch else ok, span)}/s), "
            f"{failed} failed"
        )

    def print_stats() -> None:
        if window.ready:
            report(progress, line(stats, window, done=False))

    async def sender(quota: int) -> None:
        sent = 0
        while not stop.is_set() and (quota == 0 or sent < quota):
            size = batch_size if quota == 0 else min(batch_size, quota - sent)
            await send_and_count(producer, [factory.build() for _ in range(size)], stats, stop)
            sent += size

    async def async_sender(quota: int) -> None:
        # One sender that does not wait for each answer, bounded like RocketMQ's async mode.
        slots = asyncio.Semaphore(MAX_ASYNC_IN_FLIGHT)
        in_flight: set[asyncio.Task[None]] = set()

        async def one(messages: list[Message]) -> None:
            try:
                await send_and_count(producer, messages, stats, stop)
            finally:
                slots.release()

        sent = 0
        while not stop.is_set() and (quota == 0 or sent < quota):
            await slots.acquire()
            task = asyncio.create_task(one([factory.build()]))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
            sent += 1
        if in_flight:
            await asyncio.gather(*in_flight)

    work = async_sender if args.asyncEnable else sender
    senders = [asyncio.create_task(work(quota)) for quota in split_quantity(args.messageQuantity, threads)]
    timers = [
        asyncio.create_task(every(SNAPSHOT_INTERVAL, snap)),
        asyncio.create_task(every(args.reportInterval / 1000, print_stats)),
    ]
    try:
        await asyncio.gather(*senders)
    finally:
        for timer in timers:
            timer.cancel()
        await asyncio.gather(*timers, return_exceptions=True)
    window.snap()
    report(progress, line(stats, window, done=True))
    return EXIT_OK


def _last_step(window: Window) -> tuple[float, ...]:
    if len(window.snapshots) < 2:
        return (0.0,) * len(window.snapshots[0])
    before, after = window.snapshots[-2], window.snapshots[-1]
    return tuple(b - a for a, b in zip(before, after))


def _java(value: bool) -> str:
    return "true" if value else "false"


# -- consumer -----------------------------------------------------------------------------------


@dataclass
class ConsumerStats:
    received: int = 0
    failed: int = 0
    b2c_total_ms: float = 0.0
    s2c_total_ms: float = 0.0
    #: Maxima since the previous report (reset by it), and since the start.
    b2c_max_ms: int = 0
    s2c_max_ms: int = 0
    b2c_max_all_ms: int = 0
    s2c_max_all_ms: int = 0

    def snapshot(self) -> tuple[float, ...]:
        return (float(now_millis()), self.received, self.b2c_total_ms, self.s2c_total_ms, self.failed)

    def consumed(self, msg: MessageExt) -> None:
        now = now_millis()
        b2c = now - msg.born_timestamp
        s2c = now - msg.store_timestamp
        self.received += 1
        self.b2c_total_ms += b2c
        self.s2c_total_ms += s2c
        self.b2c_max_ms = max(self.b2c_max_ms, b2c)
        self.s2c_max_ms = max(self.s2c_max_ms, s2c)
        self.b2c_max_all_ms = max(self.b2c_max_all_ms, b2c)
        self.s2c_max_all_ms = max(self.s2c_max_all_ms, s2c)


def consumer_line(stats: ConsumerStats, window: Window, *, done: bool) -> str:
    span, received, b2c, s2c, failed = window.deltas()
    if done:
        head = f"[Complete] Consume Total: {stats.received}"
        b2c_max, s2c_max, failures = stats.b2c_max_all_ms, stats.s2c_max_all_ms, stats.failed
    else:
        head = f"Current Time: {human_time(now_millis())}"
        b2c_max, s2c_max, failures = stats.b2c_max_ms, stats.s2c_max_ms, int(failed)
        stats.b2c_max_ms = stats.s2c_max_ms = 0
    return (
        f"{head} | Consume TPS: {per_second(received, span)} | "
        f"AVG(B2C) RT(ms): {average(b2c, received):7.3f} | AVG(S2C) RT(ms): {average(s2c, received):7.3f} | "
        f"MAX(B2C) RT(ms): {b2c_max} | MAX(S2C) RT(ms): {s2c_max} | Consume Fail: {failures}"
    )


async def run_consumer(args: argparse.Namespace) -> int:
    group = args.group
    if args.groupSuffix:
        group = f"{group}_{now_millis() % 100}"
    expression = "*"
    if args.filterType is not None and args.expression is not None:
        expression = args.expression.read_text().strip()
    print(
        f"topic: {args.topic}, threadCount {args.threadCount}, group: {group}, suffix: {_java(args.groupSuffix)}, "
        f"filterType: {args.filterType}, expression: {args.expression}, msgTraceEnable: false, "
        f"aclEnable: {_java(args.aclEnable)}, reportInterval: {args.reportInterval}",
        flush=True,
    )
    if expression != "*":
        print(f"Expression: {expression}", flush=True)
    # Fails fast (exit 1) when no name server answers; the topic itself may come later.
    async with Admin(args.namesrvAddr) as admin:
        await admin.cluster_info()
        try:
            await admin.topic_route(args.topic)
        except TopicNotExistError:
            print(
                f"mqbench consumer: topic {args.topic} has no route yet; the consumer picks it up "
                "at its next route refresh (within 30 s)",
                file=sys.stderr,
                flush=True,
            )

    stats = ConsumerStats()
    window = Window(stats.snapshot)
    progress = Progress(not args.no_progress)
    stop = asyncio.Event()
    stop_on_signals(stop)
    fail_rate = args.failRate
    count = args.count

    consumer = PushConsumer(
        group,
        args.namesrvAddr,
        concurrency=args.threadCount,
        allocation="averagely",
        instance_name=str(now_millis()),
        options=client_options(args),
    )
    consumer.subscribe(args.topic, expression)

    @consumer.listener
    def listen(messages: list[MessageExt]) -> ConsumeResult:
        stats.consumed(messages[0])
        if count and stats.received >= count:
            stop.set()
        if fail_rate and random.random() < fail_rate:
            stats.failed += 1
            return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS

    def snap() -> None:
        window.snap()
        span, received, _, _, _ = _last_step(window)
        progress.update(
            f"consumed {stats.received} messages ({per_second(received, span)}/s), {stats.failed} failed"
        )

    def print_stats() -> None:
        if window.ready:
            report(progress, consumer_line(stats, window, done=False))

    await consumer.start()
    print("Consumer Started.", flush=True)
    timers = [
        asyncio.create_task(every(SNAPSHOT_INTERVAL, snap)),
        asyncio.create_task(every(args.reportInterval / 1000, print_stats)),
    ]
    try:
        await stop.wait()
    finally:
        for timer in timers:
            timer.cancel()
        await asyncio.gather(*timers, return_exceptions=True)
        window.snap()
        await consumer.shutdown()
    report(progress, consumer_line(stats, window, done=True))
    return EXIT_OK


# -- command line -------------------------------------------------------------------------------


def client_options(args: argparse.Namespace) -> ClientOptions:
    """Credentials (``-a -ak -sk``) and TLS (``--tls``) as the command line says."""
    credentials = args.credentials
    return ClientOptions(
        access_key=credentials.access_key if credentials else None,
        secret_key=credentials.secret_key if credentials else None,
        security_token=credentials.security_token if credentials else None,
        tls=args.tls,
        tls_ca_file=args.tls_ca_file,
        tls_verify=not args.tls_no_verify,
    )


def _flag(parser: argparse.ArgumentParser, short: str, name: str, help_text: str) -> None:
    """A RocketMQ boolean option: ``-k true``, ``-k false``, or just ``-k``."""
    parser.add_argument(
        short, f"--{name}", dest=name, type=parse_bool, nargs="?", const=True, default=False,
        metavar="true|false", help=help_text,
    )  # fmt: skip


def _common(parser: argparse.ArgumentParser, threads: int) -> None:
    parser.add_argument("-n", "--namesrvAddr", help="name server address list (default: $NAMESRV_ADDR)")
    parser.add_argument("-t", "--topic", default=DEFAULT_TOPIC, help=f"topic name ({DEFAULT_TOPIC})")
    parser.add_argument(
        "-w", "--threadCount", type=positive_int, default=threads, help=f"concurrent tasks ({threads})"
    )
    parser.add_argument(
        "-ri", "--reportInterval", type=positive_int, default=10000, help="ms between reports (10000)"
    )
    _flag(parser, "-m", "msgTraceEnable", "message trace (not supported: false)")
    _flag(
        parser, "-a", "aclEnable", "sign requests with -ak/-sk (or $ROCKETMQ_ACCESS_KEY/$ROCKETMQ_SECRET_KEY)"
    )
    parser.add_argument("-ak", "--accessKey", dest="accessKey", help="ACL access key (with -a)")
    parser.add_argument("-sk", "--secretKey", dest="secretKey", help="ACL secret key (with -a)")
    add_tls_options(parser)
    parser.add_argument("--no-progress", action="store_true", help="no live progress line on stderr")
    parser.add_argument("--verbose", action="store_true", help="log the SDK's activity to stderr")


def _producer_options(parser: argparse.ArgumentParser, *, batch: bool) -> None:
    _common(parser, 64)
    parser.add_argument("-s", "--messageSize", type=positive_int, default=128, help="message size (128)")
    if batch:
        parser.add_argument("-b", "--batchSize", type=positive_int, default=16, help="batch size (16)")
    _flag(parser, "-k", "keyEnable", "message key (false)")
    parser.add_argument("-l", "--tagCount", type=non_negative_int, default=0, help="tag count (0)")
    parser.add_argument(
        "-p", "--propertySize", type=non_negative_int, default=0, help="user property characters (0)"
    )
    parser.add_argument(
        "-q",
        "--messageQuantity",
        type=non_negative_int,
        default=0,
        help="messages to send, 0: until SIGINT (0)",
    )
    if batch:
        # Batches carry no delay level and are always awaited (as in RocketMQ's tool).
        parser.set_defaults(delayEnable=False, delayLevel=1, asyncEnable=False)
    else:
        _flag(parser, "-d", "delayEnable", "delay messages (false)")
        parser.add_argument(
            "-e",
            "--delayLevel",
            type=int,
            choices=range(1, 19),
            default=1,
            metavar="1..18",
            help="delay level (1)",
        )
        _flag(parser, "-y", "asyncEnable", "send without waiting for each answer; forces -w 1 (false)")
    _flag(parser, "-c", "compressEnable", "compress bodies over -ch bytes (false)")
    parser.add_argument("-ct", "--compressType", default="ZLIB", help="ZLIB (the only one supported)")
    parser.add_argument(
        "-cl",
        "--compressLevel",
        type=int,
        default=COMPRESS_LEVEL,
        help=f"{COMPRESS_LEVEL} (the only one supported)",
    )
    parser.add_argument(
        "-ch",
        "--compressOverHowMuch",
        type=positive_int,
        default=4096,
        help="compress bodies of this many bytes (4096)",
    )


def build_parser() -> tuple[Parser, dict[str, Parser]]:
    parser = Parser(prog="mqbench", description="RocketMQ's benchmark tools on the asyncio SDK.")
    actions = parser.add_subparsers(dest="tool", metavar="<tool>", required=True)
    subparsers: dict[str, Parser] = {}
    producer = actions.add_parser("producer", help="send messages and report TPS and RT")
    _producer_options(producer, batch=False)
    batch = actions.add_parser("batchproducer", help="send batches and report TPS, MPS and RT")
    _producer_options(batch, batch=True)
    consumer = actions.add_parser("consumer", help="consume with a push consumer and report TPS and latency")
    _common(consumer, 20)
    consumer.add_argument(
        "-g", "--group", default="benchmark_consumer", help="consumer group (benchmark_consumer)"
    )
    _flag(consumer, "-p", "groupSuffix", "append _<ms %% 100> to the group name (false)")
    consumer.add_argument("-f", "--filterType", choices=("TAG", "SQL92"), help="filter type (with -e)")
    consumer.add_argument("-e", "--expression", type=Path, help="file holding the filter expression")
    consumer.add_argument("-r", "--failRate", type=rate, default=0.0, help="share of messages to fail (0)")
    consumer.add_argument(
        "--count", type=non_negative_int, default=0, help="stop after this many messages, 0: until SIGINT (0)"
    )
    subparsers.update(producer=producer, batchproducer=batch, consumer=consumer)
    return parser, subparsers


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser, subparsers = build_parser()
    args = parser.parse_args(argv)
    sub = subparsers[args.tool]
    if args.msgTraceEnable:
        sub.error("message trace (-m) is not supported")
    if args.aclEnable:
        try:
            args.credentials = tool_credentials(args.accessKey, args.secretKey)
        except CommandFailed as exc:
            sub.error(str(exc))
        if args.credentials is None:
            sub.error("ACL (-a) needs -ak and -sk (or $ROCKETMQ_ACCESS_KEY and $ROCKETMQ_SECRET_KEY)")
    else:
        args.credentials = None
    if args.tool == "consumer":
        if args.filterType == "SQL92":
            sub.error("SQL92 filtering is not supported by the broker; use -f TAG")
        if args.expression is not None and not args.expression.is_file():
            sub.error(f"expression file {args.expression} does not exist")
    else:
        if args.compressType.upper() != "ZLIB":
            sub.error(f"compress type {args.compressType!r} is not supported; only ZLIB")
        if args.compressLevel != COMPRESS_LEVEL:
            sub.error(f"the SDK compresses at level {COMPRESS_LEVEL} only")
    return args


async def execute(args: argparse.Namespace) -> int:
    if args.tool == "consumer":
        return await run_consumer(args)
    return await run_producer(args, batch=args.tool == "batchproducer")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    quiet_logging(args.verbose)
    try:
        return run(execute(args))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except (MQError, OSError) as exc:
        print(f"mqbench {args.tool}: {one_line(exc)}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
