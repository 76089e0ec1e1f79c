"""The HA port's frames as they really arrive: several in one read, a fresh commit log's first
frame at offset 0, a body of exactly the largest allowed size (tests written for surviving
mutants of broker/ha/wire.py)."""

from __future__ import annotations

from aiorocketmq.broker.ha.wire import FrameReader, encode_header


def test_several_frames_in_one_read_each_keep_their_own_offset() -> None:
    """A master writes frames back to back and one read may bring several: each frame's offset
    and body come from its own header, not the first one's."""
    stream = encode_header(8192, 3) + b"abc" + encode_header(8195, 0) + encode_header(8195, 2) + b"de"
    reader = FrameReader()
    assert reader.feed(stream) == [(8192, b"abc"), (8195, b""), (8195, b"de")]
    assert reader.pending == 0


def test_a_frame_cut_short_after_a_whole_one_waits_for_its_body() -> None:
    """A whole frame then a frame whose body is still in flight: the first is delivered, the
    second only once all its bytes are there, never with a truncated body."""
    reader = FrameReader()
    first = encode_header(100, 4) + b"wxyz"
    second = encode_header(104, 10) + b"0123456789"
    assert reader.feed(first + second[:15]) == [(100, b"wxyz")]
    assert reader.pending == 15
    assert reader.feed(second[15:]) == [(104, b"0123456789")]
    assert reader.pending == 0


def test_a_slave_with_an_empty_commit_log_gets_frames_at_offset_0() -> None:
    """A new slave reports offset 0, so the master's first frames (data and heartbeats) start at
    physical offset 0: that is a valid frame, not a foreign peer."""
    reader = FrameReader()
    assert reader.feed(encode_header(0, 0) + encode_header(0, 5) + b"hello") == [(0, b""), (0, b"hello")]


def test_a_body_of_exactly_max_body_bytes_is_a_frame() -> None:
    """``max_body`` is the largest body accepted: a frame of exactly that size is read."""
    reader = FrameReader(max_body=8)
    assert reader.feed(encode_header(64, 8) + b"12345678") == [(64, b"12345678")]
