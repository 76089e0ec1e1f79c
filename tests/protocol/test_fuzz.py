"""Fuzzing the decoders with random, truncated and mutated input: a decoder returns commands
(or messages, or models) or raises ProtocolError; any other exception, or a hang, is a bug a
peer could use to kill a connection or a server."""

from __future__ import annotations

import itertools
import random
import struct
import zlib

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiorocketmq.protocol import fastjson
from aiorocketmq.protocol.body import (
    ClusterInfo,
    ConsumeStats,
    HeartbeatData,
    RegisterBrokerBody,
    TopicRouteData,
)
from aiorocketmq.protocol.codes import ResponseCode, SerializeType
from aiorocketmq.protocol.command import FrameDecoder, RemotingCommand
from aiorocketmq.protocol.errors import ProtocolError
from aiorocketmq.protocol.headers import (
    PullMessageRequestHeader,
    SendMessageRequestHeader,
    SendMessageRequestHeaderV2,
)
from aiorocketmq.protocol.message import (
    Message,
    decode_batch,
    decode_records,
    encode_batch,
    encode_record,
    pack_host,
)

from .test_bodies import CPP_HEARTBEAT, JAVA_HEARTBEAT, ROUTE_LEGACY
from .test_frames import ALI_ONS_SEND_V2, CPP_SEND_V1, JAVA_ROUTE_REQUEST, frame, rocketmq_header

SEED_FRAMES = [
    frame(JAVA_ROUTE_REQUEST),
    frame(CPP_SEND_V1, b"body"),
    frame(ALI_ONS_SEND_V2, b"x" * 40),
    frame(
        rocketmq_header(310, 0, 407, 9, 0, b"remark", [(b"a", b"PG"), (b"e", b"3"), (b"m", b"true")]), b"b", 1
    ),
    frame(
        msgpack.packb({"code": 11, "opaque": 3, "flag": 0, "extFields": {"queueId": 1, "topic": "T"}}), b"", 2
    ),
    RemotingCommand(0, flag=1, opaque=5, remark="ok", ext_fields={"msgId": "X", "queueId": 1}).encode(),
]


def _mutate(data: bytes, rng: random.Random) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        choice = rng.random()
        if choice < 0.4 and buf:
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        elif choice < 0.55 and buf:
            del buf[rng.randrange(len(buf))]
        elif choice < 0.7:
            buf.insert(rng.randrange(len(buf) + 1), rng.randrange(256))
        elif choice < 0.85 and len(buf) >= 8:
            # Rewrite one of the two length words: the interesting boundary cases live there.
            at = rng.choice((0, 4))
            buf[at : at + 4] = struct.pack(
                ">i", rng.choice((0, 3, 4, len(buf), len(buf) - 4, -1, 1 << 24, rng.getrandbits(31)))
            )
        else:
            buf = buf[: rng.randrange(len(buf) + 1)]
    return bytes(buf)


def _exercise(cmd: RemotingCommand) -> None:
    """What a server does with a decoded command: read headers, answer in its serialization."""
    assert isinstance(cmd, RemotingCommand)
    for model in (SendMessageRequestHeaderV2, SendMessageRequestHeader, PullMessageRequestHeader):
        try:
            model.from_fields(cmd.ext_fields)
        except ProtocolError:
            pass
    response = cmd.response(ResponseCode.SYSTEM_ERROR, "fuzz", {"k": "v"})
    (echo,) = FrameDecoder().feed(response.encode())
    assert echo.opaque == cmd.opaque and echo.serialize_type == cmd.serialize_type


def _feed_all(stream: bytes, cuts: list[int], max_frame_size: int) -> None:
    decoder = FrameDecoder(max_frame_size)
    points = sorted({c % (len(stream) + 1) for c in cuts})
    bounds = [0, *points, len(stream)]
    try:
        for start, end in itertools.pairwise(bounds):
            for cmd in decoder.feed(stream[start:end]):
                _exercise(cmd)
    except ProtocolError:
        pass


@st.composite
def hostile_streams(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["random", "truncated", "mutated", "glued"]))
    seed = draw(st.sampled_from(SEED_FRAMES))
    if kind == "random":
        return draw(st.binary(max_size=200))
    if kind == "truncated":
        return seed[: draw(st.integers(0, len(seed)))]
    rng = random.Random(draw(st.integers(0, 2**32)))
    if kind == "mutated":
        return _mutate(seed, rng)
    return b"".join(
        _mutate(s, rng) if rng.random() < 0.5 else s
        for s in draw(st.lists(st.sampled_from(SEED_FRAMES), max_size=4))
    )


@pytest.mark.timeout(120)
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    hostile_streams(),
    st.lists(st.integers(0, 1000), max_size=6),
    st.sampled_from([64, 4096, 16 * 1024 * 1024]),
)
def test_frame_decoder_yields_commands_or_protocol_errors(
    stream: bytes, cuts: list[int], max_frame: int
) -> None:
    _feed_all(stream, cuts, max_frame)


@pytest.mark.timeout(120)
def test_frame_decoder_survives_many_seeded_mutations() -> None:
    rng = random.Random(20240229)
    for i in range(20_000):
        stream = _mutate(rng.choice(SEED_FRAMES), rng)
        _feed_all(stream, [rng.randrange(len(stream) + 1) for _ in range(i % 4)], 1 << 16)


def test_valid_frames_after_a_truncated_one_are_only_delayed() -> None:
    # A truncated frame is not an error: the decoder waits for the rest.
    whole = SEED_FRAMES[0]
    decoder = FrameDecoder()
    assert decoder.feed(whole[:-1]) == []
    assert [c.opaque for c in decoder.feed(whole[-1:] + whole)] == [7, 7]


# -- bodies and records -------------------------------------------------------------------------

_RECORD = encode_record(
    topic=b"TopicTest",
    body=zlib.compress(b"hello" * 50),
    properties=b"UNIQ_KEY\x01A\x02TAGS\x01TagA",
    sys_flag=1,
    born_host=pack_host("10.0.0.5", 1),
    store_host=pack_host("::1", 2),
)
_BATCH = encode_batch([Message("T", b"one", tags="a"), Message("T", b"", keys=["k1", "k2"])])
_REGISTRATION = RegisterBrokerBody.decode(
    b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":1,"timestamp":2},'
    b'"topicConfigTable":{"T":{"perm":6,"readQueueNums":4,"topicName":"T","writeQueueNums":4}}}}'
).encode_compressed()
_STATS = b'{"consumeTps":1.0,"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"brokerOffset":1}}}'
_CLUSTER = b'{"brokerAddrTable":{"b":{"brokerAddrs":{0:"a:1"},"brokerName":"b","cluster":"C"}},"clusterAddrTable":{"C":["b"]}}'


@pytest.mark.timeout(120)
def test_body_and_record_decoders_yield_values_or_protocol_errors() -> None:
    rng = random.Random(7)
    json_seeds = [
        (TopicRouteData.decode, ROUTE_LEGACY),
        (HeartbeatData.decode, CPP_HEARTBEAT),
        (HeartbeatData.decode, JAVA_HEARTBEAT),
        (ConsumeStats.decode, _STATS),
        (ClusterInfo.decode, _CLUSTER),
        (fastjson.loads, ROUTE_LEGACY),
    ]
    for _ in range(5000):
        decode, seed = rng.choice(json_seeds)
        try:
            decode(_mutate(seed, rng))
        except ProtocolError:
            pass
        try:
            decode_records(_mutate(_RECORD, rng), check_crc=rng.random() < 0.5)
        except ProtocolError:
            pass
        try:
            decode_batch(_mutate(_BATCH, rng))
        except ProtocolError:
            pass
        try:
            RegisterBrokerBody.decode_registration(_mutate(_REGISTRATION, rng), compressed=True)
        except ProtocolError:
            pass


def test_compressed_registration_inner_mutations() -> None:
    rng = random.Random(11)
    raw = zlib.decompress(_REGISTRATION)
    for _ in range(3000):
        try:
            RegisterBrokerBody.decode_registration(zlib.compress(_mutate(raw, rng)), compressed=True)
        except ProtocolError:
            pass


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_everywhere(data: bytes) -> None:
    for decode in (
        TopicRouteData.decode,
        HeartbeatData.decode,
        fastjson.loads,
        decode_records,
        decode_batch,
        lambda d: RegisterBrokerBody.decode_registration(d, compressed=False),
    ):
        try:
            decode(data)
        except ProtocolError:
            pass


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(list(SerializeType)), st.binary(max_size=120))
def test_random_headers_of_each_type(serialize_type: int, header: bytes) -> None:
    _feed_all(frame(header, b"", serialize_type), [], 1 << 16)
