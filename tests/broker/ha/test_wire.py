"""The HA port's bytes: the slave's 8-byte offset reports and the master's transfer frames."""

from __future__ import annotations

import struct

import pytest

from aiorocketmq.broker.ha.wire import FrameReader, OffsetReader, encode_header, encode_offset


def test_an_offset_report_is_one_big_endian_long() -> None:
    assert encode_offset(0x0102030405060708) == bytes(range(1, 9))


def test_the_master_keeps_only_the_last_complete_report() -> None:
    reader = OffsetReader()
    assert reader.feed(encode_offset(5)[:3]) is None
    # The rest of the first report, a whole second one and half of a third.
    assert reader.feed(encode_offset(5)[3:] + encode_offset(700) + encode_offset(900)[:4]) == 700
    assert reader.feed(encode_offset(900)[4:]) == 900


def test_frames_are_header_then_raw_bytes_and_may_split_anywhere() -> None:
    stream = encode_header(4096, 5) + b"hello" + encode_header(4101, 0) + encode_header(4101, 3) + b"abc"
    assert struct.unpack(">qi", stream[:12]) == (4096, 5)
    reader = FrameReader()
    frames = []
    for i in range(len(stream)):  # one byte at a time: every split point
        frames += reader.feed(stream[i : i + 1])
    assert frames == [(4096, b"hello"), (4101, b""), (4101, b"abc")]
    assert reader.pending == 0


def test_a_header_no_master_sends_is_refused() -> None:
    with pytest.raises(ValueError, match="not an HA transfer frame"):
        FrameReader(max_body=1024).feed(encode_header(0, 4096))
    with pytest.raises(ValueError):
        FrameReader().feed(encode_header(-1, 0))
