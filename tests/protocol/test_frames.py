"""Framing: a 4-byte big-endian length, then the body; fed in any pieces, refused when too large."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triolog.protocol.errors import ErrorCode
from triolog.protocol.frames import (
    DEFAULT_MAX_FRAME_BYTES,
    NEED_DATA,
    FrameDecoder,
    FrameTooLargeError,
    LocalProtocolError,
    RemoteProtocolError,
    encode_frame,
    frame_prefix,
)


def drain(decoder: FrameDecoder) -> list[bytes]:
    frames = []
    while (frame := decoder.next_frame()) is not NEED_DATA:
        frames.append(frame)
    return frames


def test_frame_prefix_is_four_bytes_big_endian_unsigned():
    assert frame_prefix(0) == b"\x00\x00\x00\x00"
    assert frame_prefix(258) == b"\x00\x00\x01\x02"
    assert frame_prefix(2**32 - 1) == b"\xff\xff\xff\xff"


@pytest.mark.parametrize("length", [-1, 2**32])
def test_frame_prefix_refuses_lengths_the_prefix_cannot_hold(length):
    with pytest.raises(LocalProtocolError):
        frame_prefix(length)


def test_encode_frame_is_prefix_then_payload():
    assert encode_frame(b"abc") == b"\x00\x00\x00\x03abc"


def test_frame_decoder_default_limit_is_socket_request_max_bytes():
    assert FrameDecoder().max_frame_bytes == DEFAULT_MAX_FRAME_BYTES == 104857600


def test_frame_decoder_returns_need_data_until_the_frame_is_whole():
    decoder = FrameDecoder()
    assert decoder.next_frame() is NEED_DATA
    assert repr(NEED_DATA) == "NEED_DATA"
    decoder.receive_data(b"\x00\x00")
    assert decoder.next_frame() is NEED_DATA
    decoder.receive_data(b"\x00\x03ab")
    assert decoder.next_frame() is NEED_DATA
    decoder.receive_data(b"c")
    assert decoder.next_frame() == b"abc"
    assert decoder.next_frame() is NEED_DATA
    assert decoder.pending_bytes == 0


def test_frame_decoder_byte_at_a_time():
    stream = encode_frame(b"first") + encode_frame(b"") + encode_frame(b"x" * 300)
    decoder = FrameDecoder()
    frames = []
    for byte in stream:
        decoder.receive_data(bytes([byte]))
        frames += drain(decoder)
    assert frames == [b"first", b"", b"x" * 300]


def test_frame_decoder_several_frames_in_one_chunk_come_out_in_order():
    payloads = [f"request {i}".encode() for i in range(100)]
    decoder = FrameDecoder()
    decoder.receive_data(b"".join(encode_frame(p) for p in payloads) + b"\x00\x00")
    assert drain(decoder) == payloads
    assert decoder.pending_bytes == 2  # the start of the next prefix is kept


def test_frame_decoder_zero_length_frame_has_an_empty_payload():
    decoder = FrameDecoder()
    decoder.receive_data(b"\x00\x00\x00\x00")
    assert decoder.next_frame() == b""


def test_frame_decoder_returns_bytes_not_views_of_its_buffer():
    decoder = FrameDecoder()
    decoder.receive_data(encode_frame(b"abc") + encode_frame(b"def"))
    first = decoder.next_frame()
    decoder.receive_data(encode_frame(b"ghi"))
    assert type(first) is bytes and first == b"abc"
    assert drain(decoder) == [b"def", b"ghi"]


def test_frame_decoder_accepts_a_frame_of_exactly_the_limit():
    decoder = FrameDecoder(max_frame_bytes=10)
    decoder.receive_data(encode_frame(b"0123456789"))
    assert decoder.next_frame() == b"0123456789"


def test_frame_decoder_refuses_an_oversized_prefix_before_the_body_arrives():
    decoder = FrameDecoder(max_frame_bytes=10)
    decoder.receive_data(encode_frame(b"ok") + frame_prefix(11))
    assert decoder.next_frame() == b"ok"
    with pytest.raises(FrameTooLargeError) as info:
        decoder.next_frame()
    assert info.value.length == 11
    assert info.value.max_frame_bytes == 10
    assert info.value.code == ErrorCode.INVALID_REQUEST
    assert isinstance(info.value, RemoteProtocolError)
    assert "11" in str(info.value) and "10" in str(info.value)


def test_frame_decoder_stays_failed_and_buffers_nothing_after_an_oversized_frame():
    decoder = FrameDecoder(max_frame_bytes=10)
    decoder.receive_data(frame_prefix(2**32 - 1) + b"body")
    with pytest.raises(FrameTooLargeError):
        decoder.next_frame()
    decoder.receive_data(b"x" * 1000)
    assert decoder.pending_bytes == 0
    with pytest.raises(FrameTooLargeError):
        decoder.next_frame()


@pytest.mark.parametrize("max_frame_bytes", [-1, 2**32])
def test_frame_decoder_refuses_an_impossible_limit(max_frame_bytes):
    with pytest.raises(ValueError):
        FrameDecoder(max_frame_bytes=max_frame_bytes)


def test_frame_decoder_pending_bytes_reveal_a_truncated_frame():
    decoder = FrameDecoder()
    decoder.receive_data(encode_frame(b"whole") + encode_frame(b"cut short")[:6])
    assert drain(decoder) == [b"whole"]
    assert decoder.pending_bytes == 6


def test_frame_decoder_buffer_stays_small_over_a_long_stream():
    decoder = FrameDecoder(max_frame_bytes=1000)
    frame = encode_frame(b"y" * 699)  # 703 bytes: chunk ends rarely fall on a frame end
    stream = frame * 2000
    received = 0
    for start in range(0, len(stream), 4096):
        decoder.receive_data(stream[start : start + 4096])
        received += len(drain(decoder))
        assert decoder.pending_bytes < len(frame)
        assert len(decoder._buffer) <= 4096 + len(frame) + 65536
    assert received == 2000


@given(
    payloads=st.lists(st.binary(max_size=300), max_size=20),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=30),
)
def test_frame_decoder_any_split_of_the_stream_yields_the_same_frames(payloads, cuts):
    stream = b"".join(encode_frame(p) for p in payloads)
    bounds = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    decoder = FrameDecoder(max_frame_bytes=300)
    frames = []
    for start, end in zip(bounds, bounds[1:]):
        decoder.receive_data(stream[start:end])
        frames += drain(decoder)
    assert frames == payloads
    assert decoder.pending_bytes == 0


@given(chunks=st.lists(st.binary(max_size=64), max_size=20))
def test_frame_decoder_random_bytes_give_frames_or_frame_too_large_only(chunks):
    decoder = FrameDecoder(max_frame_bytes=64)
    try:
        for chunk in chunks:
            decoder.receive_data(chunk)
            for frame in drain(decoder):
                assert len(frame) <= 64
    except FrameTooLargeError as exc:
        assert exc.length > 64
    assert decoder.pending_bytes < 4 + 64


# -- reading no further than the current frame (what a server reserves memory for) ------------


def test_read_size_asks_for_the_prefix_then_exactly_the_rest_of_the_body():
    decoder = FrameDecoder()
    assert decoder.frame_length is None
    assert decoder.read_size(1000) == 4
    decoder.receive_data(b"\x00\x00")
    assert decoder.read_size(1000) == 2 and decoder.frame_length is None
    decoder.receive_data(b"\x00\x0a")
    assert decoder.frame_length == 10
    assert decoder.read_size(1000) == 10
    assert decoder.read_size(3) == 3  # never more than the reader's chunk
    assert decoder.read_size(1000, read_ahead=5) == 15  # the body, then 5 bytes of what follows
    decoder.receive_data(b"abcd")
    assert decoder.read_size(1000) == 6
    decoder.receive_data(b"efghij")
    assert decoder.next_frame() == b"abcdefghij"
    assert decoder.read_size(1000) == 4 and decoder.frame_length is None


@given(st.lists(st.integers(0, 200) | st.integers(65536, 200_000), max_size=6), st.integers(1, 100_000),
       st.sampled_from([0, 1, 100, 16384]))
@settings(deadline=None)
def test_reading_by_read_size_buffers_at_most_read_ahead_bytes_past_the_frame(lengths, chunk, read_ahead):
    payloads = [bytes([i % 256]) * n for i, n in enumerate(lengths)]
    chunk = chunk if sum(lengths) < 10 * chunk else max(chunk, 4096)  # keep byte-at-a-time runs short
    stream = b"".join(encode_frame(p) for p in payloads)
    decoder = FrameDecoder()
    position, frames = 0, []
    while position < len(stream):
        want = decoder.read_size(chunk, read_ahead)
        assert 1 <= want <= chunk
        length = decoder.frame_length
        data = stream[position:position + want]
        position += len(data)
        decoder.receive_data(data)
        if length is not None:  # beyond the frame whose length was known: at most read_ahead
            assert decoder.pending_bytes <= 4 + length + read_ahead
        frames += drain(decoder)
    assert frames == payloads
    assert decoder.pending_bytes == 0


def test_a_large_frame_is_received_as_its_chunks_and_joined_once_whole():
    payload = bytes(range(256)) * 1024  # 256 KiB, over OWN_BODY_BYTES
    data = encode_frame(payload) + encode_frame(b"next")
    decoder = FrameDecoder()
    decoder.receive_data(data[:4])  # the prefix alone: the frame's buffer does not exist yet
    assert decoder.frame_length == len(payload) and decoder.pending_bytes == 4
    assert decoder.next_frame() is NEED_DATA
    for i in range(4, 4 + len(payload), 70_000):  # as a server reads: next_frame after each read
        assert decoder.next_frame() is NEED_DATA
        decoder.receive_data(data[i:min(i + 70_000, 4 + len(payload))])
    decoder.receive_data(data[4 + len(payload):])
    frame = decoder.next_frame()
    assert isinstance(frame, bytes) and frame == payload
    assert decoder.next_frame() == b"next"
    assert decoder.next_frame() is NEED_DATA and decoder.pending_bytes == 0


def test_a_large_frame_cut_short_stays_pending():
    decoder = FrameDecoder()
    decoder.receive_data(frame_prefix(100_000) + b"x" * 50_000)
    assert decoder.next_frame() is NEED_DATA
    assert decoder.pending_bytes == 50_004 and decoder.read_size(1 << 20) == 50_000
