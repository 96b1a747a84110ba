"""Compression streams: round trips, and the exact framing Kafka's Java producer writes and reads."""

from __future__ import annotations

import gzip
import io
import os
import struct
import zlib

import cramjam
import lz4.block
import lz4.frame
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from triolog.protocol.compression import SNAPPY_BLOCK_SIZE, XERIAL_HEADER, compress, decompress
from triolog.protocol.errors import CorruptRecordError
from triolog.protocol.record_batch import CompressionType

CODECS = list(CompressionType)
COMPRESSED = [c for c in CompressionType if c is not CompressionType.NONE]

# Half random, half repetitive: exercises both stored and compressed lz4 blocks.
MIXED = os.urandom(70_000) + b"kafka-record " * 20_000


def _xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 for inputs under 16 bytes (LZ4 frame descriptors), written out to check the HC byte."""
    assert len(data) < 16
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    mask = 0xFFFFFFFF

    def rotl(x, r):
        return ((x << r) | (x >> (32 - r))) & mask

    acc = (seed + p5 + len(data)) & mask
    i = 0
    while i + 4 <= len(data):
        (lane,) = struct.unpack_from("<I", data, i)
        acc = (rotl((acc + lane * p3) & mask, 17) * p4) & mask
        i += 4
    for byte in data[i:]:
        acc = (rotl((acc + byte * p5) & mask, 11) * p1) & mask
    acc ^= acc >> 15
    acc = (acc * p2) & mask
    acc ^= acc >> 13
    acc = (acc * p3) & mask
    acc ^= acc >> 16
    return acc


def _lz4_frame(flg: int, bd: int, body: bytes) -> bytes:
    descriptor = bytes([flg, bd])
    return b"\x04\x22\x4d\x18" + descriptor + bytes([(_xxh32(descriptor) >> 8) & 0xFF]) + body


# --- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=5_000) | st.binary(max_size=50).map(lambda b: b * 1_500))
def test_compress_round_trips_any_bytes(codec, data):
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
@pytest.mark.parametrize("size", [0, 1, SNAPPY_BLOCK_SIZE, 65_536, 65_537, 300_000])
def test_compress_round_trips_block_boundaries(codec, size):
    data = (MIXED * 3)[:size]
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.kafka_name)
def test_decompress_accepts_bytearray_and_memoryview(codec):
    stream = compress(codec, MIXED)
    assert decompress(codec, bytearray(stream)) == MIXED
    assert decompress(codec, memoryview(b"xx" + stream)[2:]) == MIXED


@pytest.mark.parametrize(
    ("codec", "levels"),
    [
        (CompressionType.GZIP, [-1, 1, 5, 9]),
        (CompressionType.LZ4, list(range(1, 18))),
        (CompressionType.ZSTD, [-131072, -5, 1, 3, 19, 22]),
    ],
    ids=["gzip", "lz4", "zstd"],
)
def test_compress_accepts_every_kafka_level(codec, levels):
    for level in levels:
        assert decompress(codec, compress(codec, MIXED, level)) == MIXED


@pytest.mark.parametrize(
    ("codec", "level"),
    [
        (CompressionType.GZIP, 0),
        (CompressionType.GZIP, 10),
        (CompressionType.LZ4, 0),
        (CompressionType.LZ4, 18),
        (CompressionType.ZSTD, 23),
        (CompressionType.ZSTD, -131073),
    ],
)
def test_compress_rejects_levels_kafka_rejects(codec, level):
    with pytest.raises(ValueError, match="level"):
        compress(codec, b"data", level)


def test_compress_higher_levels_compress_better():
    text = b"".join(b"record %d of the log with some repeated text\n" % (i % 977) for i in range(20_000))
    for codec, low, high in [
        (CompressionType.GZIP, 1, 9),
        (CompressionType.LZ4, 1, 17),
        (CompressionType.ZSTD, 1, 19),
    ]:
        assert len(compress(codec, text, high)) < len(compress(codec, text, low)), codec


# --- gzip -------------------------------------------------------------------------------------


def test_gzip_writes_java_gzipoutputstream_header_and_trailer():
    stream = compress(CompressionType.GZIP, MIXED)
    assert stream[:10] == bytes.fromhex("1f8b0800000000000000")
    crc, isize = struct.unpack("<II", stream[-8:])
    assert crc == zlib.crc32(MIXED) and isize == len(MIXED)
    # The body is one raw deflate stream at zlib's default level.
    inflater = zlib.decompressobj(-15)
    assert inflater.decompress(stream[10:-8]) == MIXED and inflater.eof


def test_gzip_output_is_deterministic():
    assert compress(CompressionType.GZIP, MIXED) == compress(CompressionType.GZIP, MIXED)


def test_gzip_decodes_streams_with_optional_header_fields():
    # Python's gzip writes an mtime, XFL and OS byte; GzipFile with a name also sets FNAME.
    assert decompress(CompressionType.GZIP, gzip.compress(MIXED, mtime=123456)) == MIXED
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="records.bin", mode="wb", fileobj=buffer, mtime=1) as f:
        f.write(b"named")
    assert buffer.getvalue()[3] & 0x08  # FNAME
    assert decompress(CompressionType.GZIP, buffer.getvalue()) == b"named"


def test_gzip_decodes_several_members():
    stream = compress(CompressionType.GZIP, b"first ") + gzip.compress(b"second ") + compress(CompressionType.GZIP, b"")
    assert decompress(CompressionType.GZIP, stream) == b"first second "


def test_gzip_ignores_trailing_bytes_that_are_not_a_member():
    # Java's GZIPInputStream stops at anything after a member that is not a gzip header.
    assert decompress(CompressionType.GZIP, compress(CompressionType.GZIP, b"abc") + b"\x00\x07junk") == b"abc"


def test_gzip_rejects_a_wrong_trailer_crc():
    stream = bytearray(compress(CompressionType.GZIP, MIXED))
    stream[-8] ^= 1
    with pytest.raises(CorruptRecordError, match="gzip"):
        decompress(CompressionType.GZIP, stream)


# --- snappy -----------------------------------------------------------------------------------


def _xerial_chunks(stream: bytes) -> list[bytes]:
    assert stream[:16] == XERIAL_HEADER
    chunks, position = [], 16
    while position < len(stream):
        (length,) = struct.unpack_from(">i", stream, position)
        chunks.append(stream[position + 4 : position + 4 + length])
        position += 4 + length
    assert position == len(stream)
    return chunks


def test_snappy_writes_the_xerial_header():
    stream = compress(CompressionType.SNAPPY, b"hello")
    assert stream[:16] == bytes.fromhex("82534e41505059000000000100000001")


def test_snappy_chunks_compress_at_most_32_kib_of_input_each():
    data = (MIXED * 2)[: 100 * 1024]
    chunks = _xerial_chunks(compress(CompressionType.SNAPPY, data))
    assert len(chunks) == 4
    decoded = [bytes(cramjam.snappy.decompress_raw(chunk)) for chunk in chunks]
    assert [len(d) for d in decoded] == [32768, 32768, 32768, 4096]
    assert b"".join(decoded) == data


def test_snappy_of_empty_input_is_the_bare_header():
    assert compress(CompressionType.SNAPPY, b"") == XERIAL_HEADER
    assert decompress(CompressionType.SNAPPY, XERIAL_HEADER) == b""


@pytest.mark.parametrize("data", [b"", b"x", b"short raw block", MIXED])
def test_snappy_reads_a_raw_block_without_xerial_header(data):
    assert decompress(CompressionType.SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data


def test_snappy_reads_concatenated_xerial_streams():
    stream = compress(CompressionType.SNAPPY, MIXED[:50_000]) + compress(CompressionType.SNAPPY, b"tail")
    assert decompress(CompressionType.SNAPPY, stream) == MIXED[:50_000] + b"tail"


def test_snappy_reads_chunks_of_any_size():
    # Other writers (kafka-python, librdkafka) may pick other block sizes.
    block = bytes(cramjam.snappy.compress_raw(MIXED))
    stream = XERIAL_HEADER + struct.pack(">i", len(block)) + block
    assert decompress(CompressionType.SNAPPY, stream) == MIXED


def test_snappy_rejects_a_truncated_chunk():
    stream = compress(CompressionType.SNAPPY, MIXED)
    with pytest.raises(CorruptRecordError, match="snappy: xerial chunk at position 16 declares"):
        decompress(CompressionType.SNAPPY, stream[:100])


def test_snappy_rejects_a_negative_chunk_length():
    with pytest.raises(CorruptRecordError, match="negative xerial chunk length"):
        decompress(CompressionType.SNAPPY, XERIAL_HEADER + struct.pack(">i", -5) + b"abcdefgh")


def test_snappy_rejects_a_corrupt_block():
    stream = XERIAL_HEADER + struct.pack(">i", 3) + b"\xff\xff\xff"
    with pytest.raises(CorruptRecordError, match="snappy"):
        decompress(CompressionType.SNAPPY, stream)


# --- lz4 --------------------------------------------------------------------------------------


def test_lz4_writes_kafkas_frame_descriptor():
    stream = compress(CompressionType.LZ4, MIXED)
    hc = (_xxh32(b"\x60\x40") >> 8) & 0xFF
    assert stream[:7] == bytes([0x04, 0x22, 0x4D, 0x18, 0x60, 0x40, hc])
    assert hc == 0x82


@pytest.mark.parametrize("level", [1, 9, 17])
def test_lz4_writes_independent_64_kib_blocks_and_no_checksums(level):
    data = (MIXED * 3)[:200_000]
    stream = compress(CompressionType.LZ4, data, level)
    assert stream[4:6] == b"\x60\x40"
    position, decoded = 7, []
    while True:
        (word,) = struct.unpack_from("<I", stream, position)
        position += 4
        if word == 0:
            break  # end mark, and no content checksum may follow
        size, stored = word & 0x7FFFFFFF, bool(word & 0x80000000)
        block = stream[position : position + size]
        position += size
        # Each block decodes on its own: no dependency on previous blocks.
        expected = min(65_536, len(data) - sum(map(len, decoded)))
        decoded.append(block if stored else lz4.block.decompress(block, uncompressed_size=expected))
    assert position == len(stream)
    assert [len(d) for d in decoded] == [65_536, 65_536, 65_536, 200_000 - 3 * 65_536]
    assert b"".join(decoded) == data


def test_lz4_of_empty_input_is_header_and_end_mark():
    assert compress(CompressionType.LZ4, b"") == bytes.fromhex("04224d1860408200000000")


@pytest.mark.parametrize(
    "options",
    [
        {"store_size": True},
        {"block_checksum": True},
        {"content_checksum": True},
        {"block_size": lz4.frame.BLOCKSIZE_MAX256KB},
        {"block_size": lz4.frame.BLOCKSIZE_MAX1MB},
        {"block_size": lz4.frame.BLOCKSIZE_MAX4MB},
    ],
    ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()),
)
def test_lz4_reads_frames_kafka_accepts(options):
    stream = lz4.frame.compress(MIXED, block_linked=False, **options)
    assert decompress(CompressionType.LZ4, stream) == MIXED


def test_lz4_reads_only_the_first_frame():
    stream = compress(CompressionType.LZ4, b"first") + compress(CompressionType.LZ4, b"second")
    assert decompress(CompressionType.LZ4, stream) == b"first"


def test_lz4_rejects_linked_blocks():
    stream = lz4.frame.compress(MIXED, block_linked=True)
    assert not stream[4] & 0x20
    with pytest.raises(CorruptRecordError, match="lz4: dependent block stream is unsupported"):
        decompress(CompressionType.LZ4, stream)


@pytest.mark.parametrize(
    ("flg", "bd", "message"),
    [
        (0x61, 0x40, "reserved FLG bits"),  # dictionary id flag
        (0xA0, 0x40, "frame version 2"),
        (0x60, 0x30, "block descriptor 0x30"),
        (0x60, 0xC0, "block descriptor 0xc0"),
        (0x60, 0x41, "block descriptor 0x41"),
    ],
)
def test_lz4_rejects_descriptors_kafka_rejects(flg, bd, message):
    with pytest.raises(CorruptRecordError, match=message):
        decompress(CompressionType.LZ4, _lz4_frame(flg, bd, b"\x00\x00\x00\x00"))


def test_lz4_rejects_a_bad_descriptor_checksum():
    stream = bytearray(compress(CompressionType.LZ4, b"data"))
    stream[6] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="lz4"):
        decompress(CompressionType.LZ4, stream)


def test_lz4_rejects_a_bad_magic():
    with pytest.raises(CorruptRecordError, match="invalid magic"):
        decompress(CompressionType.LZ4, b"\x02\x21\x4c\x18" + compress(CompressionType.LZ4, b"x")[4:])


@pytest.mark.parametrize("cut", [1, 4, 100, 30_000])
def test_lz4_rejects_a_truncated_frame(cut):
    stream = compress(CompressionType.LZ4, MIXED)
    with pytest.raises(CorruptRecordError, match="lz4"):
        decompress(CompressionType.LZ4, stream[:-cut])


def test_lz4_rejects_a_bad_block_checksum():
    stream = bytearray(lz4.frame.compress(b"payload" * 100, block_linked=False, block_checksum=True))
    stream[-6] ^= 0xFF  # inside the block checksum, before the end mark
    with pytest.raises(CorruptRecordError, match="lz4"):
        decompress(CompressionType.LZ4, stream)


# --- zstd -------------------------------------------------------------------------------------


def test_zstd_writes_one_frame_without_content_size_or_checksum():
    stream = compress(CompressionType.ZSTD, MIXED)
    assert stream[:4] == b"\x28\xb5\x2f\xfd"
    params = zstandard.get_frame_parameters(stream)
    assert params.content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert not params.has_checksum
    # Frame header descriptor: Frame_Content_Size_flag (bits 7-6) = 0 and Single_Segment = 0.
    assert stream[4] & 0xE0 == 0


def test_zstd_reads_concatenated_frames_with_and_without_content_size():
    with_size = zstandard.ZstdCompressor(write_content_size=True, write_checksum=True).compress(b"sized ")
    stream = compress(CompressionType.ZSTD, b"first ") + with_size + compress(CompressionType.ZSTD, b"last")
    assert decompress(CompressionType.ZSTD, stream) == b"first sized last"


def test_zstd_skips_skippable_frames():
    skippable = struct.pack("<II", 0x184D2A50, 3) + b"abc"
    assert decompress(CompressionType.ZSTD, skippable + compress(CompressionType.ZSTD, b"data")) == b"data"


def test_zstd_of_empty_stream_is_empty():
    assert decompress(CompressionType.ZSTD, b"") == b""


@pytest.mark.parametrize("cut", [1, 10, 1000])
def test_zstd_rejects_a_truncated_frame(cut):
    stream = compress(CompressionType.ZSTD, MIXED)
    with pytest.raises(CorruptRecordError, match="zstd"):
        decompress(CompressionType.ZSTD, stream[:-cut])


def test_zstd_rejects_a_truncated_second_frame():
    stream = compress(CompressionType.ZSTD, b"first") + compress(CompressionType.ZSTD, MIXED)[:-5]
    with pytest.raises(CorruptRecordError, match="zstd: stream ended in the middle of a frame"):
        decompress(CompressionType.ZSTD, stream)


# --- corrupt input ----------------------------------------------------------------------------


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.kafka_name)
def test_decompress_rejects_garbage_naming_the_codec(codec):
    with pytest.raises(CorruptRecordError, match=f"^{codec.kafka_name}"):
        decompress(codec, b"\x01\x02 definitely not a compressed stream \xff" * 3)


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.kafka_name)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_decompress_of_damaged_streams_raises_only_corrupt_record_error(codec, data):
    stream = bytearray(compress(codec, b"some record bytes " * 50))
    cut = data.draw(st.integers(0, len(stream)), label="length")
    stream = stream[:cut]
    if stream:
        position = data.draw(st.integers(0, len(stream) - 1), label="position")
        stream[position] ^= data.draw(st.integers(1, 255), label="xor")
    try:
        decompress(codec, stream)
    except CorruptRecordError as exc:
        assert str(exc).startswith(codec.kafka_name)


def test_decompress_of_none_copies_the_bytes():
    assert decompress(CompressionType.NONE, memoryview(b"raw")) == b"raw"
    assert compress(CompressionType.NONE, bytearray(b"raw")) == b"raw"


# --- bounded decompression ----------------------------------------------------------------------


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.kafka_name)
@pytest.mark.parametrize("size", [1, 70_000, 300_000])
def test_decompress_allows_exactly_the_limit_and_refuses_one_byte_more(codec, size):
    from triolog.protocol.compression import DecompressionLimitError

    data = (MIXED * 5)[:size]
    stream = compress(codec, data)
    assert decompress(codec, stream, size) == data
    with pytest.raises(DecompressionLimitError, match=f"^{codec.kafka_name}: record batch decompresses to more "
                                                      f"than {size - 1} bytes") as error:
        decompress(codec, stream, size - 1)
    assert isinstance(error.value, CorruptRecordError) and error.value.limit == size - 1


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.kafka_name)
def test_decompress_limit_counts_every_member_frame_and_chunk(codec):
    from triolog.protocol.compression import DecompressionLimitError

    first, second = MIXED[:40_000], MIXED[40_000:90_000]
    if codec is CompressionType.LZ4:  # Kafka reads one LZ4 frame only; its blocks are the chunks
        stream = compress(codec, first + second)
    else:
        stream = compress(codec, first) + compress(codec, second)
    assert decompress(codec, stream, 90_000) == first + second
    with pytest.raises(DecompressionLimitError):
        decompress(codec, stream, 89_999)


def test_zstd_frame_larger_than_its_one_call_bound_is_read_in_bounded_chunks():
    # 300 KB in a few compressed blocks: the header walk bounds it at 128 KiB a block, above the
    # limit given, so it is decoded through the bounded reader, with the same result.
    data = (MIXED * 5)[:300_000]
    stream = compress(CompressionType.ZSTD, data)
    assert decompress(CompressionType.ZSTD, stream, 300_000) == data == decompress(CompressionType.ZSTD, stream)


def _zstd_rle_frame(blocks: int, last_size: int = 128 * 1024) -> bytes:
    """A zstd frame of RLE blocks (4 input bytes per 128 KiB of output): the cheapest bomb."""
    frame = bytearray(b"\x28\xb5\x2f\xfd\x00\x58")  # magic, no size or checksum, 2 MiB window
    for i in range(blocks):
        size = last_size if i == blocks - 1 else 128 * 1024
        frame += ((size << 3) | 2 | (i == blocks - 1)).to_bytes(3, "little") + b"\x61"
    return bytes(frame)


def test_zstd_bomb_of_a_gib_in_32_kib_is_refused_within_the_limit():
    import tracemalloc

    from triolog.protocol.compression import DecompressionLimitError

    bomb = _zstd_rle_frame(8192)
    assert len(bomb) < 33 * 1024
    assert decompress(CompressionType.ZSTD, _zstd_rle_frame(3, 10)) == b"a" * (2 * 128 * 1024 + 10)
    tracemalloc.start()
    try:
        with pytest.raises(DecompressionLimitError):
            decompress(CompressionType.ZSTD, bomb, 4 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < (4 << 20) + (2 << 20)


def test_zstd_header_walk_refuses_reserved_block_types_and_unknown_magics():
    frame = bytearray(_zstd_rle_frame(1))
    frame[6] |= 0x06  # block type 3, reserved
    with pytest.raises(CorruptRecordError, match="zstd: reserved block type"):
        decompress(CompressionType.ZSTD, frame)
    with pytest.raises(CorruptRecordError, match="zstd: unknown frame magic"):
        decompress(CompressionType.ZSTD, compress(CompressionType.ZSTD, b"x") + b"\x00\x01\x02\x03\x04\x05")


def test_snappy_block_declaring_a_huge_length_is_refused_before_decoding():
    from triolog.protocol.compression import DecompressionLimitError

    block = b"\xff\xff\xff\xff\x0f" + b"\x00" * 10  # varint preamble: 4 GiB - 1
    with pytest.raises(DecompressionLimitError):
        decompress(CompressionType.SNAPPY, block)
    with pytest.raises(DecompressionLimitError):
        decompress(CompressionType.SNAPPY, XERIAL_HEADER + struct.pack(">i", len(block)) + block)


def test_gzip_bomb_is_refused_while_inflating():
    import tracemalloc

    from triolog.protocol.compression import DecompressionLimitError

    deflater = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    zeros = bytes(1 << 20)
    first = deflater.compress(zeros) + deflater.flush(zlib.Z_FULL_FLUSH)
    again = deflater.compress(zeros) + deflater.flush(zlib.Z_FULL_FLUSH)
    bomb = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x00" + first + again * 1023 + deflater.flush() + bytes(8)
    tracemalloc.start()
    try:
        with pytest.raises(DecompressionLimitError):
            decompress(CompressionType.GZIP, bomb, 8 << 20)  # 1 GiB of zeros in ~1 MB
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < (8 << 20) + (2 << 20) + len(bomb)
