"""Commands that read or write messages: look up by id, key, unique key or offset,
print or consume a queue's range, send one, read a consume queue, measure send round trips,
and show a message's trace."""

from __future__ import annotations

import argparse
import codecs
import random
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from aiorocketmq.client import Admin, Message, MessageExt, MessageQueue, Producer, PullClient, PullStatus
from aiorocketmq.client.cluster_admin import consume_message_directly, query_consume_queue
from aiorocketmq.protocol.body import ConsumeType
from aiorocketmq.protocol.codes import ResponseCode
from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.message import decode_offset_msg_id
from aiorocketmq.protocol.names import TRACE_TOPIC

from ..cli import (
    CommandFailed,
    human_time,
    message_json,
    message_text,
    non_negative_int,
    positive_int,
    queue_json,
    queue_text,
    table,
)
from .command import (
    BOOL,
    END_TIMESTAMP,
    TOPIC,
    CommandSet,
    Context,
    Result,
    arg,
    begin_timestamp,
    java_bool,
    pretty_json,
)
from .msg_trace import trace_lines, trace_views

commands = CommandSet()

#: queryMsgByKey asks for at most this many messages (as RocketMQ's tool does).
QUERY_MAX_NUM = 64
PULL_BATCH = 32


def message_block(msg: MessageExt, body_dir: Path) -> list[str]:
    """The fields RocketMQ's queryMsgById prints; the body is written to a file, as there."""
    body_dir.mkdir(parents=True, exist_ok=True)
    body_path = body_dir / msg.msg_id
    body_path.write_bytes(msg.body)
    pairs = [
        ("OffsetID:", msg.offset_msg_id),
        ("MsgId:", msg.msg_id),
        ("Topic:", msg.topic),
        ("Tags:", f"[{msg.tags}]"),
        ("Keys:", f"[{' '.join(msg.keys)}]" if msg.keys else "[None]"),
        ("Queue ID:", msg.queue_id),
        ("Queue Offset:", msg.queue_offset),
        ("CommitLog Offset:", msg.commit_log_offset),
        ("Reconsume Times:", msg.reconsume_times),
        ("Born Timestamp:", human_time(msg.born_timestamp)),
        ("Store Timestamp:", human_time(msg.store_timestamp)),
        ("Born Host:", msg.born_host),
        ("Store Host:", msg.store_host),
        ("System Flag:", msg.sys_flag),
        ("Properties:", "{" + ", ".join(f"{k}={v}" for k, v in msg.properties.items()) + "}"),
        ("Message Body Path:", body_path),
    ]
    return [f"{name:<20} {value}" for name, value in pairs]


BODY_DIR = arg(
    "--body-dir",
    type=Path,
    default=Path(tempfile.gettempdir()) / "rocketmq" / "msgbodys",
    help="where message bodies are written (default: <tmp>/rocketmq/msgbodys)",
)


@commands.add(
    "queryMsgById",
    "Query Message by Id.",
    arg("-i", "--msgId", dest="msg_ids", required=True, help="message id(s), comma-separated"),
    arg("-t", "--topic", help="topic name: needed for a unique (client) message id"),
    BODY_DIR,
)
async def query_msg_by_id(ctx: Context, args: argparse.Namespace) -> Result:
    ids = [item.strip() for item in args.msg_ids.split(",") if item.strip()]
    if not ids:
        raise CommandFailed("no message id given")
    messages = []
    lines: list[str] = []
    for msg_id in ids:
        if args.topic:
            msg = await ctx.admin.query_message_by_id(args.topic, msg_id)
        else:
            msg = await _view_by_offset_id(ctx.admin, msg_id)
        messages.append(message_json(msg))
        if not args.json:  # the JSON document carries the body itself
            lines += [*message_block(msg, args.body_dir), ""]
    return Result({"messages": messages}, lines)


async def _view_by_offset_id(admin: Admin, msg_id: str) -> MessageExt:
    """The message an offset msgId names, asked only of a broker the name server knows: a
    unique (client) id decodes to a meaningless address, which must not be dialled."""
    try:
        addr, _ = decode_offset_msg_id(msg_id)
    except MQError:
        addr = ""
    if addr not in await admin.brokers_by_addr():
        raise CommandFailed(
            f"{msg_id} is not an offset message id of a known broker; "
            "for a unique (client) message id give the topic: -t TOPIC"
        )
    return await admin.view_message(msg_id)


@commands.add(
    "queryMsgByKey",
    "Query Message by Key.",
    TOPIC,
    arg("-k", "--msgKey", dest="key", required=True, help="message key"),
)
async def query_msg_by_key(ctx: Context, args: argparse.Namespace) -> Result:
    found = await ctx.admin.query_messages_by_key(args.topic, args.key, max_num=QUERY_MAX_NUM)
    rows = [[msg.msg_id, msg.queue_id, msg.queue_offset] for msg in found]
    return Result(
        {"messages": [message_json(msg) for msg in found]},
        table(["#Message ID", "#QID", "#Offset"], rows),
    )


@commands.add(
    "queryMsgByOffset",
    "Query Message by offset.",
    TOPIC,
    arg("-b", "--brokerName", dest="broker_name", required=True, help="broker name"),
    arg("-i", "-q", "--queueId", dest="queue_id", type=non_negative_int, required=True, help="queue id"),
    arg("-o", "--offset", type=non_negative_int, required=True, help="queue offset"),
    BODY_DIR,
)
async def query_msg_by_offset(ctx: Context, args: argparse.Namespace) -> Result:
    queue = MessageQueue(topic=args.topic, broker_name=args.broker_name, queue_id=args.queue_id)
    puller = await ctx.puller()
    result = await puller.pull(queue, args.offset, 1)
    if result.status is not PullStatus.FOUND or not result.messages:
        raise CommandFailed(
            f"no message at offset {args.offset} of {queue_text(queue)} ({result.status.name}; "
            f"the queue holds offsets {result.min_offset}..{result.max_offset - 1})"
        )
    msg = result.messages[0]
    lines = [] if args.json else message_block(msg, args.body_dir)
    return Result({"messages": [message_json(msg)]}, lines)


async def read_queue(
    puller: PullClient,
    queue: MessageQueue,
    start: int,
    end: int,
    expression: str,
    on_status: Callable[[str], None],
    limit: int | None = None,
) -> list[MessageExt]:
    """Messages of ``queue`` in ``[start, end)`` matching ``expression`` (at most ``limit``),
    telling ``on_status`` how the reading went as RocketMQ's tools print it."""
    found: list[MessageExt] = []
    offset = start
    while offset < end and (limit is None or len(found) < limit):
        want = min(PULL_BATCH, end - offset)
        result = await puller.pull(queue, offset, want, expression=expression)
        if result.status is PullStatus.FOUND:
            batch = [m for m in result.messages if m.queue_offset < end]
            found.extend(batch if limit is None else batch[: limit - len(found)])
        elif result.status is PullStatus.NO_MATCHED_MSG:
            on_status(f"{queue_text(queue)} no matched msg. status={result.status.name}, offset={offset}")
        else:
            on_status(
                f"{queue_text(queue)} print msg finished. status={result.status.name}, "
                f"offset={result.next_begin_offset}"
            )
            break
        if result.next_begin_offset <= offset:
            break
        offset = result.next_begin_offset
    return found


def _message_line(msg: MessageExt, charset: str, print_body: bool) -> str:
    body = msg.body.decode(charset, errors="replace") if print_body else "NOT PRINT BODY"
    return f"MSGID: {msg.msg_id} {message_text(msg)} BODY: {body}"


async def _bounds(
    puller: PullClient, queue: MessageQueue, begin: int | None, end: int | None
) -> tuple[int, int]:
    low = (
        await puller.search_offset(queue, begin / 1000)
        if begin is not None
        else await puller.min_offset(queue)
    )
    high = (
        await puller.search_offset(queue, end / 1000) if end is not None else await puller.max_offset(queue)
    )
    return low, high


@commands.add(
    "printMsg",
    "Print Message Detail.",
    TOPIC,
    arg("-c", "--charsetName", dest="charset", default="UTF-8", help="charset of the bodies (UTF-8)"),
    arg(
        "-s",
        "--subExpression",
        dest="expression",
        default="*",
        help="subscribe expression (eg: TagA || TagB)",
    ),
    begin_timestamp("-b"),
    END_TIMESTAMP,
    arg("-d", "--printBody", dest="print_body", default=True, help="print the bodies (true)", **BOOL),
)
async def print_msg(ctx: Context, args: argparse.Namespace) -> Result:
    _check_charset(args.charset)
    puller = await ctx.puller()
    lines: list[str] = []
    queues = []
    for queue in await puller.queues(args.topic):
        low, high = await _bounds(puller, queue, args.begin, args.end)
        lines.append(f"minOffset={low}, maxOffset={high}, {queue_text(queue)}")
        found = await read_queue(puller, queue, low, high, args.expression, lines.append)
        lines.extend(_message_line(msg, args.charset, args.print_body) for msg in found)
        lines.append("-" * 56)
        queues.append(
            {
                **queue_json(queue),
                "minOffset": low,
                "maxOffset": high,
                "messages": [message_json(m, args.charset) for m in found],
            }
        )
    return Result({"queues": queues}, lines)


def _check_charset(name: str) -> None:
    try:
        codecs.lookup(name)
    except LookupError:
        raise CommandFailed(f"unknown charset {name!r}") from None


@commands.add(
    "consumeMessage",
    "Consume message (read without committing).",
    TOPIC,
    arg("-b", "--brokerName", dest="broker_name", help="broker name"),
    arg("-i", "-q", "--queueId", dest="queue_id", type=non_negative_int, help="queue id (needs -b)"),
    arg("-o", "--offset", type=non_negative_int, help="queue offset (needs -i)"),
    arg("-g", "--consumerGroup", dest="group", help="consumer group name to pull as"),
    begin_timestamp("-s"),
    END_TIMESTAMP,
    arg(
        "-c", "--MessageNumber", dest="count", type=positive_int, default=128, help="number of messages (128)"
    ),
)
async def consume_message(ctx: Context, args: argparse.Namespace) -> Result:
    if args.queue_id is not None and args.broker_name is None:
        raise CommandFailed("set the broker name (-b) to choose a queue (-i)")
    if args.offset is not None and args.queue_id is None:
        raise CommandFailed("set the queue id (-i) to start from an offset (-o)")
    now = int(time.time() * 1000)
    if any(moment is not None and moment > now for moment in (args.begin, args.end)):
        raise CommandFailed("the begin and end timestamps must not be in the future")
    if args.begin is not None and args.end is not None and args.begin > args.end:
        raise CommandFailed("the begin timestamp is after the end timestamp")
    if args.group:
        puller = PullClient(args.group, ctx.namesrv, options=ctx.options)
        await puller.start()
    else:
        puller = await ctx.puller()
    try:
        if args.queue_id is not None:
            queues = [MessageQueue(topic=args.topic, broker_name=args.broker_name, queue_id=args.queue_id)]
        else:
            queues = await puller.queues(args.topic)
            if args.broker_name is not None:
                queues = [q for q in queues if q.broker_name == args.broker_name]
                if not queues:
                    raise CommandFailed(f"broker {args.broker_name!r} has no queue of topic {args.topic!r}")
        lines: list[str] = []
        consumed: list[MessageExt] = []
        for queue in queues:
            remaining = args.count - len(consumed)
            if remaining <= 0:
                break
            low, high = await _bounds(puller, queue, args.begin, args.end)
            if args.offset is not None:
                if args.offset > high:
                    lines.append(f"{queue_text(queue)} no matched msg, offset={args.offset}")
                    continue
                low = max(low, args.offset)
            found = await read_queue(puller, queue, low, high, "*", lines.append, limit=remaining)
            if found:
                lines.append("Consume ok")
                lines.extend(_message_line(msg, "utf-8", True) for msg in found)
            consumed.extend(found)
    finally:
        if args.group:
            await puller.shutdown()
    return Result({"messages": [message_json(m) for m in consumed]}, lines)


@commands.add(
    "sendMessage",
    "Send a message.",
    arg("-t", "--topic", required=True, help="topic name"),
    arg("-p", "--body", required=True, help="UTF-8 string format of the message body"),
    arg("-k", "--key", help="message keys (space-separated)"),
    arg("-c", "--tags", help="message tags"),
    arg("-b", "--broker", dest="broker_name", help="send message to target broker"),
    arg(
        "-i", "--qid", dest="queue_id", type=non_negative_int, help="send message to target queue (needs -b)"
    ),
)
async def send_message(ctx: Context, args: argparse.Namespace) -> Result:
    if args.queue_id is not None and args.broker_name is None:
        raise CommandFailed("Broker name must be set if the queue is chosen!")
    keys = args.key.split() if args.key else None
    msg = Message(args.topic, args.body.encode(), tags=args.tags or None, keys=keys)
    # A fresh producer group per run, as RocketMQ's tool uses the current time.
    async with Producer(str(int(time.time() * 1000)), ctx.namesrv, options=ctx.options) as producer:
        queue = None
        if args.broker_name is not None:
            candidates = [q for q in await producer.queues(args.topic) if q.broker_name == args.broker_name]
            if args.queue_id is not None:
                candidates = [q for q in candidates if q.queue_id == args.queue_id]
            if not candidates:
                raise CommandFailed(
                    f"topic {args.topic!r} has no such writable queue on broker {args.broker_name!r}"
                )
            queue = random.choice(candidates)
        result = await producer.send(msg, queue=queue)
    row = [result.queue.broker_name, result.queue.queue_id, result.status.value, result.msg_id]
    document = {
        **queue_json(result.queue),
        "sendStatus": result.status.value,
        "msgId": result.msg_id,
        "offsetMsgId": result.offset_msg_id,
        "queueOffset": result.queue_offset,
    }
    return Result(document, table(["#Broker Name", "#QID", "#Send Result", "#MsgId"], [row]))


@commands.add(
    "queryMsgTraceById",
    "query a message trace",
    arg("-i", "--msgId", dest="msg_id", required=True, help="Message Id"),
    arg("-t", "--traceTopic", dest="trace_topic", help="The name value of message trace topic"),
)
async def query_msg_trace_by_id(ctx: Context, args: argparse.Namespace) -> Result:
    msg_id = args.msg_id.strip()
    topic = (args.trace_topic or TRACE_TOPIC).strip()
    found = await ctx.admin.query_messages_by_key(topic, msg_id, max_num=QUERY_MAX_NUM)
    views = trace_views(msg_id, found)
    return Result({"traces": [view.to_json() for view in views]}, trace_lines(views))


SEPARATOR = "======================================"


@commands.add(
    "checkMsgSendRT",
    "check message send response time.",
    TOPIC,
    arg("-a", "--amount", type=positive_int, default=100, help="message amount | default 100"),
    arg("-s", "--size", type=positive_int, default=128, help="message size | default 128 Byte"),
)
async def check_msg_send_rt(ctx: Context, args: argparse.Namespace) -> Result:
    body = b"x" * args.size
    lines = [f"{'#Broker Name':<32}  {'#QID':<4}  {'#Send Result':<20}    #RT"]
    rts = []
    async with Producer(f"PID_CMSRT_{int(time.time() * 1000)}", ctx.namesrv, options=ctx.options) as producer:
        queues = await producer.queues(args.topic)
        if not queues:
            raise CommandFailed(f"topic {args.topic!r} has no writable queue")
        for i in range(args.amount):
            queue = queues[i % len(queues)]
            began = time.perf_counter()
            try:
                await producer.send(Message(args.topic, body), queue=queue)
                ok = True
            except MQError:
                ok = False
            rt = int((time.perf_counter() - began) * 1000)
            rts.append(rt)
            lines.append(f"{queue.broker_name:<32}  {queue.queue_id:<4d}  {java_bool(ok):<20}    {rt}")
    # The first send also opens the connection: left out of the average, as Apache does.
    avg = sum(rts[1:]) / (len(rts) - 1) if len(rts) > 1 else float(rts[0])
    lines.append(f"Avg RT: {avg:.2f}")
    return Result({"rts": rts, "avgRt": avg}, lines)


def _track_lines(tracks: list[dict[str, str | None]]) -> str:
    return "".join(
        f"MessageTrack [consumerGroup={t['consumerGroup']}, trackType={t['trackType']}, "
        f"exceptionDesc={t['exceptionDesc'] or 'null'}]"
        for t in tracks
    )


async def message_tracks(ctx: Context, msg: MessageExt) -> list[dict[str, str | None]]:
    """Whether each group consuming the message's topic consumed it (Apache's MessageTrack)."""
    admin = ctx.admin
    tracks: list[dict[str, str | None]] = []
    for group in await admin.consumer_groups_of(msg.topic):
        track: dict[str, str | None] = {"consumerGroup": group, "trackType": "UNKNOWN", "exceptionDesc": None}
        try:
            conn = await admin.consumer_connections(group)
        except MQError as exc:
            track["trackType"] = "NOT_ONLINE"
            track["exceptionDesc"] = f"CODE: {int(ResponseCode.CONSUMER_NOT_ONLINE)}  DESC: {exc}"
            tracks.append(track)
            continue
        if conn.consume_type == ConsumeType.CONSUME_ACTIVELY:
            track["trackType"] = "PULL"
        else:
            try:
                stats = await admin.consume_stats(group, msg.topic)
                queue = MessageQueue(topic=msg.topic, broker_name=msg.broker_name, queue_id=msg.queue_id)
                wrapper = stats.offset_table.get(queue)
                consumed = wrapper is not None and wrapper.consumer_offset > msg.queue_offset
                track["trackType"] = "CONSUMED" if consumed else "NOT_CONSUME_YET"
            except MQError as exc:
                track["exceptionDesc"] = str(exc)
        tracks.append(track)
    return tracks


@commands.add(
    "queryMsgByUniqueKey",
    "Query Message by Unique key.",
    arg("-i", "--msgId", dest="msg_id", required=True, help="Message Id"),
    arg("-t", "--topic", required=True, help="The topic of msg"),
    arg("-g", "--consumerGroup", dest="group", help="consumer group name (with -d: consume it again there)"),
    arg("-d", "--clientId", dest="client_id", help="The consumer's client id (with -g)"),
    arg("-a", "--showAll", dest="show_all", action="store_true", help="Print all message, the limit is 32"),
    BODY_DIR,
)
async def query_msg_by_unique_key(ctx: Context, args: argparse.Namespace) -> Result:
    admin = ctx.admin
    found = await admin._query(args.topic, args.msg_id, unique=True, max_num=32, begin=0, end=None)
    if not found:
        try:
            found = [await _view_by_offset_id(admin, args.msg_id)]
        except (MQError, CommandFailed):
            raise CommandFailed(f"no message {args.msg_id} in topic {args.topic!r}") from None
    if args.group and args.client_id:
        # Consumed again, now, by that one client (Apache's tool prints the verdict alone).
        result = await consume_message_directly(admin, args.group, args.client_id, found[-1])
        text = (
            f"ConsumeMessageDirectlyResult [order={java_bool(result.order)}, "
            f"autoCommit={java_bool(result.auto_commit)}, consumeResult={result.consume_result}, "
            f"remark={result.remark}, spentTimeMills={result.spent_time_mills}]"
        ).replace("remark=None", "remark=null")
        return Result(result.to_wire(), [text])
    shown = found if args.show_all else found[-1:]
    lines: list[str] = []
    documents = []
    for msg in shown:
        block = message_block(msg, args.body_dir)[2:]  # Apache's view starts at Topic
        tracks = await message_tracks(ctx, msg)
        lines += [*block, "", "", _track_lines(tracks)]
        documents.append(
            {
                "msgId": msg.msg_id,
                "topic": msg.topic,
                "queueId": msg.queue_id,
                "queueOffset": msg.queue_offset,
                "messageTracks": tracks,
            }
        )
    return Result({"messages": documents}, lines)


@commands.add(
    "printMsgByQueue",
    "Print Message Detail.",
    TOPIC,
    arg("-a", "--brokerName", dest="broker_name", required=True, help="broker name"),
    arg("-i", "--queueId", dest="queue_id", type=non_negative_int, required=True, help="queue id"),
    arg("-c", "--charsetName", dest="charset", default="UTF-8", help="CharsetName(eg: UTF-8,GBK)"),
    arg(
        "-s", "--subExpression", dest="expression", default="*", help="Subscribe Expression(eg: TagA || TagB)"
    ),
    begin_timestamp("-b"),
    END_TIMESTAMP,
    arg(
        "-p",
        "--print msg",
        dest="print_msg",
        default=False,
        metavar="print msg",
        help="print msg. eg: true | false(default)",
        **{k: v for k, v in BOOL.items() if k != "metavar"},
    ),
    arg(
        "-d",
        "--printBody",
        dest="print_body",
        default=False,
        help="print body. eg: true | false(default)",
        **BOOL,
    ),
    arg("-f", "--calculate", default=False, help="calculate by tag. eg: true | false(default)", **BOOL),
)
async def print_msg_by_queue(ctx: Context, args: argparse.Namespace) -> Result:
    _check_charset(args.charset)
    puller = await ctx.puller()
    queue = MessageQueue(topic=args.topic, broker_name=args.broker_name, queue_id=args.queue_id)
    low, high = await _bounds(puller, queue, args.begin, args.end)
    lines: list[str] = []
    found = await read_queue(puller, queue, low, high, args.expression, lambda _line: None)
    tags: Counter[str] = Counter()
    for msg in found:
        if args.print_msg:
            body = msg.body.decode(args.charset, errors="replace") if args.print_body else "NOT PRINT BODY"
            lines.append(f"MSGID: {msg.msg_id} {message_text(msg)} BODY: {body}")
        if args.calculate:
            tags[msg.tags or ""] += 1
    if args.calculate:
        lines += [
            f"Tag: {tag:<30} Count: {count}" for tag, count in sorted(tags.items(), key=lambda kv: -kv[1])
        ]
    return Result(
        {**queue.to_wire(), "minOffset": low, "maxOffset": high, "count": len(found), "tags": dict(tags)},
        lines,
    )


@commands.add(
    "queryCq",
    "Query cq command.",
    TOPIC,
    arg("-q", "--queue", dest="queue_id", type=non_negative_int, required=True, help="queue num, ie. 1"),
    arg("-i", "--index", type=non_negative_int, required=True, help="start queue index."),
    arg("-c", "--count", type=positive_int, default=10, help="how many."),
    arg("-b", "--broker", dest="broker_addr", help="broker addr."),
    arg("-g", "--consumer", dest="group", help="consumer group."),
)
async def query_cq(ctx: Context, args: argparse.Namespace) -> Result:
    addr = args.broker_addr
    if not addr:
        masters = await ctx.admin._route_masters(args.topic)
        if not masters:
            raise CommandFailed(f"topic {args.topic!r} has no master broker")
        addr = masters[sorted(masters)[0]]
    body = await query_consume_queue(
        ctx.admin, addr, args.topic, args.queue_id, args.index, args.count, args.group
    )
    lines = []
    if body.subscription_data is not None:
        lines += ["Subscription data: ", pretty_json(body.subscription_data.to_wire()), SEPARATOR]
    if body.filter_data is not None:
        lines += ["Filter data: ", body.filter_data, SEPARATOR]
    lines += ["Queue data: ", f"max: {body.max_queue_index}, min: {body.min_queue_index}", SEPARATOR]
    for i, entry in enumerate(body.queue_data):
        lines.append(f"idx: {args.index + i}")
        lines.append(
            f"ConsumeQueueData{{physicOffset={entry.physic_offset}, physicSize={entry.physic_size}, "
            f"tagsCode={entry.tags_code}, extendDataJson='{entry.extend_data_json}', bitMap='{entry.bit_map}', "
            f"eval={java_bool(entry.eval)}, msg='{entry.msg}'}}".replace("'None'", "'null'")
        )
        lines.append(SEPARATOR)
    return Result(body.to_wire(), lines)
