"""Coverage-guided fuzzing of everything that parses a peer's bytes: the frame decoder (and
with it the JSON, ROCKETMQ-binary and msgpack header codecs), every request/response header
model, every JSON body model, stored records, batches, properties and message ids.

    python -m bench.fuzz --seconds 300            # all targets, one libFuzzer run
    python -m bench.fuzz --replay DIR             # run each file once (no atheris needed)

The contract under test: a parser returns a value or raises :class:`ProtocolError` (which a
server turns into an error response or a closed connection); any other exception is a crash
and a parse taking more than ``--hang-seconds`` is a hang. The first input byte picks the
target, the rest is its input. Inputs that found new coverage land in ``--work`` (a copy of
the committed seed corpus ``tests/reliability/fuzz_corpus``); ``--merge-into`` keeps a
minimised set of them. Needs ``atheris`` (``pip install -e '.[fuzz]'``); not part of the
test suite, whose regression test replays the committed corpus through :func:`one_input`.
"""

from __future__ import annotations

import argparse
import shutil
import struct
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

# The parsers are imported by _load(): under atheris's import hook when fuzzing (so their
# branches report coverage), plainly when the corpus is replayed.
if TYPE_CHECKING:
    from aiorocketmq.protocol import body, headers

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "reliability" / "fuzz_corpus"


def _atheris() -> Any:
    try:
        import atheris
    except ImportError:
        return None
    return atheris


HEADERS: list[type[headers.Header]] = []
BODIES: list[type[body.Body]] = []
_parsers: dict[str, Any] = {}


def _load() -> dict[str, Any]:
    """Import the parsers (once) and list every header and body model."""
    if _parsers:
        return _parsers
    from aiorocketmq.protocol import body, fastjson, headers
    from aiorocketmq.protocol.command import FrameDecoder
    from aiorocketmq.protocol.errors import ProtocolError
    from aiorocketmq.protocol.message import (
        decode_batch,
        decode_offset_msg_id,
        decode_properties,
        decode_records,
        read_record_header,
        unpack_host,
    )

    HEADERS.extend(
        sorted(
            (c for c in vars(headers).values() if isinstance(c, type) and issubclass(c, headers.Header)),
            key=lambda c: c.__name__,
        )
    )
    BODIES.extend(
        sorted(
            (
                c
                for c in vars(body).values()
                if isinstance(c, type)
                and issubclass(c, body.Body)
                and c is not body.Body
                and not c.__name__.startswith("_")
            ),
            key=lambda c: c.__name__,
        )
    )
    _parsers.update(
        body=body,
        fastjson=fastjson,
        FrameDecoder=FrameDecoder,
        ProtocolError=ProtocolError,
        decode_batch=decode_batch,
        decode_offset_msg_id=decode_offset_msg_id,
        decode_properties=decode_properties,
        decode_records=decode_records,
        read_record_header=read_record_header,
        unpack_host=unpack_host,
    )
    return _parsers


def _frames(data: bytes) -> None:
    """Feed a stream in chunks (sizes from the first byte) and read every header from each
    command, then answer it in its own serialization, as a server does."""
    if not data:
        return
    step = data[0] + 1
    p = _parsers
    decoder = p["FrameDecoder"](1 << 20)
    for start in range(1, len(data), step):
        for cmd in decoder.feed(data[start : start + step]):
            for model in HEADERS:
                try:
                    model.from_fields(cmd.ext_fields)
                except p["ProtocolError"]:
                    pass
            p["FrameDecoder"]().feed(cmd.response(1, "fuzz", {"k": "v"}).encode())


def _fields(data: bytes) -> None:
    """Header models from arbitrary extFields: NUL-separated key/value pairs."""
    parts = data.decode("utf-8", errors="replace").split("\0")
    fields = dict(zip(parts[::2], parts[1::2], strict=False))
    for model in HEADERS:
        try:
            model.from_fields(fields)
        except _parsers["ProtocolError"]:
            pass


def _bodies(data: bytes) -> None:
    if not data:
        return
    model = BODIES[data[0] % len(BODIES)]
    model.decode(data[1:])


def _registration(data: bytes) -> None:
    _parsers["body"].RegisterBrokerBody.decode_registration(
        data[1:], compressed=bool(data[:1]) and data[0] & 1 == 1
    )


def _records(data: bytes) -> None:
    check = bool(data[:1]) and data[0] & 1 == 1
    _parsers["decode_records"](data[1:], check_crc=check, decompress=not check)


def _record_header(data: bytes) -> None:
    _parsers["read_record_header"](data)


def _batch(data: bytes) -> None:
    _parsers["decode_batch"](data)


def _text(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    _parsers["decode_properties"](text)
    _parsers["decode_offset_msg_id"](text)


def _host(data: bytes) -> None:
    _parsers["unpack_host"](data)


def _json(data: bytes) -> None:
    _parsers["fastjson"].loads(data)


TARGETS: list[Callable[[bytes], None]] = [
    _frames,
    _fields,
    _bodies,
    _registration,
    _records,
    _record_header,
    _batch,
    _text,
    _host,
    _json,
]


def one_input(data: bytes) -> None:
    """One fuzz case: the first byte picks the target. Only ProtocolError may escape a parser;
    anything else propagates (a crash)."""
    if not data:
        return
    parsers = _parsers or _load()
    target = TARGETS[data[0] % len(TARGETS)]
    try:
        target(data[1:])
    except parsers["ProtocolError"]:
        pass


# -- seeds -----------------------------------------------------------------------------------


def _frame(header: bytes, payload: bytes = b"", serialize_type: int = 0) -> bytes:
    return (
        struct.pack(">iI", 4 + len(header) + len(payload), serialize_type << 24 | len(header))
        + header
        + payload
    )


def seeds() -> dict[str, bytes]:
    """Well-formed inputs for each target, the fuzzer's starting points."""
    _load()
    from aiorocketmq.protocol import body
    from aiorocketmq.protocol.command import RemotingCommand
    from aiorocketmq.protocol.message import Message, encode_batch, encode_record, pack_host

    def pick(target: Callable[[bytes], None], payload: bytes) -> bytes:
        return bytes([TARGETS.index(target)]) + payload

    send_v2 = RemotingCommand.request(
        310,
        {
            "a": "PG",
            "b": "TopicTest",
            "c": "TBW102",
            "d": "4",
            "e": "0",
            "f": "0",
            "g": "1700000000000",
            "h": "0",
            "i": "UNIQ_KEY\x01AB\x02WAIT\x01true",
            "j": "0",
            "k": "false",
            "m": "false",
        },
        b"hello",
    )
    pull = RemotingCommand.request(
        11,
        {
            "consumerGroup": "g",
            "topic": "T",
            "queueId": "0",
            "queueOffset": "5",
            "maxMsgNums": "32",
            "sysFlag": "2",
            "commitOffset": "0",
            "suspendTimeoutMillis": "15000",
            "subscription": "*",
            "subVersion": "0",
        },
    )
    frames = [send_v2.encode(), pull.encode(), RemotingCommand.request(105, {"topic": "T"}).encode()]
    binary = RemotingCommand.request(10, {"topic": "T", "queueId": "1"}, b"x", serialize_type=1).encode()
    msgpack_frame = RemotingCommand.request(10, {"topic": "T"}, b"", serialize_type=2).encode()
    record = encode_record(
        topic=b"TopicTest",
        body=zlib.compress(b"hello" * 20),
        properties=b"UNIQ_KEY\x01A\x02TAGS\x01TagA",
        sys_flag=1,
        born_host=pack_host("10.0.0.5", 1),
        store_host=pack_host("::1", 2),
    )
    batch = encode_batch([Message("T", b"one", tags="a"), Message("T", b"", keys=["k1", "k2"])])
    route = (
        b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911"},"brokerName":"b","cluster":"C"}],'
        b'"filterServerTable":{},"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":4,'
        b'"topicSynFlag":0,"writeQueueNums":4}]}'
    )
    heartbeat = (
        b'{"clientID":"c@1","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET",'
        b'"consumeType":"CONSUME_PASSIVELY","groupName":"g","messageModel":"CLUSTERING",'
        b'"subscriptionDataSet":[{"classFilterMode":false,"codeSet":[],"expressionType":"TAG",'
        b'"subString":"*","subVersion":1,"tagsSet":[],"topic":"T"}],"unitMode":false}],'
        b'"producerDataSet":[{"groupName":"p"}]}'
    )
    registration = (
        b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":1,"timestamp":2},'
        b'"topicConfigTable":{"T":{"perm":6,"readQueueNums":4,"topicName":"T","writeQueueNums":4}}}}'
    )
    out = {
        "frame-send-v2": pick(_frames, b"\x07" + b"".join(frames)),
        "frame-binary": pick(_frames, b"\xff" + binary + msgpack_frame),
        "fields-send": pick(_fields, b"\0".join(f"{k}\0{v}".encode() for k, v in send_v2.ext_fields.items())),
        "body-route": pick(_bodies, bytes([BODIES.index(body.TopicRouteData)]) + route),
        "body-heartbeat": pick(_bodies, bytes([BODIES.index(body.HeartbeatData)]) + heartbeat),
        "body-registration": pick(_registration, b"\x00" + registration),
        "body-registration-compressed": pick(
            _registration, b"\x01" + body.RegisterBrokerBody.decode(registration).encode_compressed()
        ),
        "records": pick(_records, b"\x01" + record + record),
        "record-header": pick(_record_header, record),
        "batch": pick(_batch, batch),
        "text-properties": pick(_text, b"UNIQ_KEY\x01A\x02TAGS\x01TagA"),
        "text-msgid": pick(_text, b"7F00000100002A9F0000000000000000"),
        "host": pick(_host, pack_host("10.0.0.5", 1)),
        "json-fastjson": pick(_json, b'{1:{"a":[1,2.5,true,null,"x"]},"b":{}}'),
    }
    for i, frame in enumerate(frames):
        out[f"frame-{i}"] = pick(_frames, b"\x00" + frame)
    _ = _frame  # the hand-made frame helper is for odd seeds written by hand
    return out


def write_seeds(directory: Path) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in seeds().items():
        (directory / f"seed-{name}").write_bytes(data)
    return len(seeds())


def replay(directory: Path) -> int:
    """Run every file of ``directory`` once; returns how many ran (raises on a crash)."""
    count = 0
    for path in sorted(directory.iterdir()):
        if path.is_file():
            one_input(path.read_bytes())
            count += 1
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=300, help="fuzzing time (default 300)")
    parser.add_argument("--work", type=Path, help="working corpus directory (default: a temporary copy)")
    parser.add_argument("--merge-into", type=Path, help="minimise the working corpus into this directory")
    parser.add_argument("--replay", type=Path, help="only run the files of this directory once")
    parser.add_argument("--write-seeds", type=Path, help="write the seed inputs into this directory and exit")
    parser.add_argument(
        "--hang-seconds", type=int, default=10, help="a single input slower than this is a hang"
    )
    parser.add_argument("--max-len", type=int, default=8192)
    args, passthrough = parser.parse_known_args(argv)
    if passthrough:
        # A child libFuzzer started (merging runs inputs in subprocesses): its own flags.
        return _fuzz([sys.argv[0], *passthrough])
    if args.write_seeds:
        print(f"{write_seeds(args.write_seeds)} seeds written to {args.write_seeds}")
        return 0
    if args.replay:
        started = time.monotonic()
        print(f"replayed {replay(args.replay)} inputs in {time.monotonic() - started:.2f}s, no crash")
        return 0
    if _atheris() is None:
        print("atheris is not installed: pip install -e '.[fuzz]'", file=sys.stderr)
        return 2
    work = args.work or Path(tempfile.mkdtemp(prefix="fuzz-corpus-"))
    work.mkdir(parents=True, exist_ok=True)
    if CORPUS.is_dir():
        for path in CORPUS.iterdir():
            shutil.copy(path, work / path.name)
    write_seeds(work)
    artifacts = work.parent / (work.name + "-crashes")
    artifacts.mkdir(exist_ok=True)
    # libFuzzer re-runs argv[0] for merging: make it this module, under this interpreter.
    launcher = work.parent / (work.name + "-launcher")
    launcher.write_text(f'#!/bin/sh\ncd {ROOT} && exec {sys.executable} -m bench.fuzz "$@"\n')
    launcher.chmod(0o755)
    libfuzzer = [
        str(launcher),
        str(work),
        f"-max_total_time={args.seconds}",
        f"-timeout={args.hang_seconds}",
        f"-max_len={args.max_len}",
        "-rss_limit_mb=2048",
        "-print_final_stats=1",
        f"-artifact_prefix={artifacts}/",
    ]
    if args.merge_into:
        args.merge_into.mkdir(parents=True, exist_ok=True)
        libfuzzer = [str(launcher), "-merge=1", f"-max_len={args.max_len}", str(args.merge_into), str(work)]
    print(
        f"fuzzing {len(TARGETS)} targets ({len(HEADERS)} header models, {len(BODIES)} body models); "
        f"corpus {work}, crashes to {artifacts}",
        flush=True,
    )
    return _fuzz(libfuzzer)


def _fuzz(libfuzzer: list[str]) -> int:
    atheris = _atheris()
    # Coverage feedback: the parsers' bytecode is rewritten as they are imported, so libFuzzer
    # sees which of their branches an input reached.
    with atheris.instrument_imports(include=["aiorocketmq"]):
        _load()
    atheris.Setup(libfuzzer, one_input)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main())
