"""Kafka's four compression streams, framed byte for byte the way the Java producer frames them.

A batch's records are compressed as one stream (the bytes after offset 61). Compressed bytes
themselves need not match Java's (different deflate/lz4/zstd builds), but the framing must, so
that Kafka and its clients read what we write and we read what they write:

* gzip   - one RFC 1952 member with Java GZIPOutputStream's fixed 10-byte header (no mtime, no
           name); any gzip stream, including several members, is read.
* snappy - xerial snappy-java SnappyOutputStream framing (not Google's framing format): a
           16-byte header then ``[int32 BE length][raw snappy block]`` chunks of <= 32 KiB input.
           A payload without the header is one raw snappy block, as SnappyInputStream accepts.
* lz4    - one LZ4 frame, FLG 0x60 / BD 0x40 (independent 64 KiB blocks, no checksums, no
           content size) like Kafka's Lz4BlockOutputStream; the reader enforces what Kafka's
           Lz4BlockInputStream enforces.
* zstd   - zstd frame(s) without a content-size field, like zstd-jni's streaming output.

Every decoding failure is a CorruptRecordError naming the codec, since it means the batch is bad.

Decompression is bounded: ``decompress`` never holds more than ``limit`` decoded bytes (default
MAX_DECOMPRESSED_BYTES) plus one read chunk, whatever the input claims, and raises
DecompressionLimitError (a CorruptRecordError) as soon as the stream would produce more. Each
codec's own incremental API enforces it while decoding: zlib's ``max_length``, LZ4's frame
decompressor ``max_length``, the declared length of each snappy block before it is decoded, and
for zstd a walk of the frame and block headers (exact frame extents, so truncation is caught,
and an upper bound of the output) followed by bounded reads.
"""

from __future__ import annotations

import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from .errors import CorruptRecordError
from .record_batch import CompressionType

__all__ = [
    "GZIP_HEADER",
    "LZ4_DEFAULT_LEVEL",
    "MAX_DECOMPRESSED_BYTES",
    "DecompressionLimitError",
    "SNAPPY_BLOCK_SIZE",
    "XERIAL_HEADER",
    "ZSTD_DEFAULT_LEVEL",
    "compress",
    "decompress",
]

# --- gzip -----------------------------------------------------------------------------------

#: Java's GZIPOutputStream header up to JDK 15: magic, CM=deflate, FLG=0, MTIME=0, XFL=0, OS=0.
#: (JDK 16+ writes OS=255; readers ignore the byte.)
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x00"
_GZIP_MAGIC = b"\x1f\x8b"
GZIP_LEVELS = range(1, 10)  # plus -1, zlib's default (6)

# --- snappy ---------------------------------------------------------------------------------

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
#: SnappyCodec header: magic, int32 BE version 1, int32 BE minimum compatible version 1.
XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_HEADER_SIZE = 16
#: SnappyOutputStream's default block size: each chunk compresses at most this much input.
SNAPPY_BLOCK_SIZE = 32 * 1024
_INT32 = struct.Struct(">i")

# --- lz4 ------------------------------------------------------------------------------------

_LZ4_MAGIC = b"\x04\x22\x4d\x18"
LZ4_DEFAULT_LEVEL = 9
LZ4_LEVELS = range(1, 18)

# --- zstd -----------------------------------------------------------------------------------

ZSTD_DEFAULT_LEVEL = 3
ZSTD_LEVELS = range(-131072, 23)
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ZSTD_SKIPPABLE_SUFFIX = b"\x2a\x4d\x18"  # skippable magics are 0x184D2A50..0x184D2A5F
#: A zstd block never decodes to more than 128 KiB (Block_Maximum_Size, RFC 8878 3.1.1.2.3).
_ZSTD_BLOCK_MAX = 128 * 1024
_ZSTD_DICT_ID_BYTES = (0, 1, 2, 4)
_ZSTD_CONTENT_SIZE_BYTES = (0, 2, 4, 8)

# --- bounds ---------------------------------------------------------------------------------

#: Default ceiling on what one batch's record stream may decompress to, for readers that have no
#: topic configuration at hand (consumers, the cleaner, dump tools). The broker's validator uses
#: a tighter, topic-derived limit that never exceeds this one, so whatever the broker stored is
#: always readable.
MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024
#: Bytes of output asked for per call when a codec's output is read incrementally.
_CHUNK = 1024 * 1024
#: Compressed bytes handed to zlib per call.
_GZIP_INPUT = 64 * 1024


class DecompressionLimitError(CorruptRecordError):
    """A record stream that would decompress to more than the allowed number of bytes."""

    def __init__(self, codec: CompressionType, limit: int):
        super().__init__(f"{codec.kafka_name}: record batch decompresses to more than {limit} bytes")
        self.limit = limit


def compress(codec: CompressionType, data: bytes, level: int | None = None) -> bytes:
    """Compress a batch's record bytes as one stream of ``codec``; ``level=None`` is Kafka's default.

    Levels outside Kafka's accepted range for the codec are a caller bug (ValueError).
    """
    codec = CompressionType(codec)
    if codec is CompressionType.NONE:
        return bytes(data)
    if codec is CompressionType.GZIP:
        return _gzip_compress(data, level)
    if codec is CompressionType.SNAPPY:
        return _snappy_compress(data)
    if codec is CompressionType.LZ4:
        return _lz4_compress(data, level)
    return _zstd_compress(data, level)


def decompress(codec: CompressionType, data, limit: int | None = None) -> bytes:
    """Decompress one batch's record stream of at most ``limit`` bytes (MAX_DECOMPRESSED_BYTES
    when None): a longer stream raises DecompressionLimitError before more than ``limit`` bytes
    (plus one chunk) are held; any malformed stream raises CorruptRecordError."""
    codec = CompressionType(codec)
    if codec is CompressionType.NONE:
        return bytes(data)
    if limit is None:
        limit = MAX_DECOMPRESSED_BYTES
    try:
        if codec is CompressionType.GZIP:
            return _gzip_decompress(data, limit)
        if codec is CompressionType.SNAPPY:
            return _snappy_decompress(data, limit)
        if codec is CompressionType.LZ4:
            return _lz4_decompress(data, limit)
        return _zstd_decompress(data, limit)
    except CorruptRecordError:
        raise
    except Exception as exc:  # each binding has its own error types; all mean "corrupt stream"
        raise CorruptRecordError(f"{codec.kafka_name}: cannot decompress record batch: {exc}") from exc


# --- gzip -----------------------------------------------------------------------------------


def _gzip_compress(data, level: int | None) -> bytes:
    if level is None or level == -1:
        level = zlib.Z_DEFAULT_COMPRESSION
    elif level not in GZIP_LEVELS:
        raise ValueError(f"gzip level must be -1 or 1..9, got {level}")
    # Raw deflate between our own header and trailer: zlib's gzip wrapper would stamp XFL/OS
    # bytes that differ from Java's.
    deflater = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = deflater.compress(data) + deflater.flush()
    trailer = struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)
    return GZIP_HEADER + body + trailer


def _gzip_decompress(data, limit: int) -> bytes:
    # zlib parses the member header (any flags) and checks the CRC32/ISIZE trailer. Like Java's
    # GZIPInputStream, bytes after a member that do not start a new member are ignored.
    view = memoryview(data)
    total = len(view)
    if view[:2] != _GZIP_MAGIC:
        raise CorruptRecordError("gzip: stream does not start with the gzip magic 1f 8b")
    parts = []
    produced = 0
    position = 0
    while True:
        # Input goes in in slices and output comes out in chunks (max_length): zlib copies the
        # unconsumed input and joins a call's output into a new object, so this keeps both small.
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        pending: memoryview | bytes = view[position : position + _GZIP_INPUT]  # or zlib's unconsumed tail
        position += len(pending)
        while True:
            part = inflater.decompress(pending, min(_CHUNK, limit - produced + 1))
            produced += len(part)
            if produced > limit:
                raise DecompressionLimitError(CompressionType.GZIP, limit)
            parts.append(part)
            if inflater.eof:
                break
            pending = inflater.unconsumed_tail
            if not pending:
                if position >= total:
                    raise CorruptRecordError("gzip: stream ended before the end of the gzip member")
                pending = view[position : position + _GZIP_INPUT]
                position += len(pending)
        position -= len(inflater.unused_data)  # the next member (or trailing bytes) starts here
        if view[position : position + 2] != _GZIP_MAGIC:
            return b"".join(parts)


# --- snappy ---------------------------------------------------------------------------------


def _snappy_compress(data) -> bytes:
    view = memoryview(data)
    out = [XERIAL_HEADER]
    for start in range(0, len(view), SNAPPY_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + SNAPPY_BLOCK_SIZE]))
        out.append(_INT32.pack(len(block)))
        out.append(block)
    return b"".join(out)


def _snappy_block(block, room: int, limit: int) -> bytes:
    """One raw snappy block of at most ``room`` bytes; its declared length (a varint preamble) is
    checked before decoding, and the decoder checks the output matches it."""
    if cramjam.snappy.decompress_raw_len(block) > room:
        raise DecompressionLimitError(CompressionType.SNAPPY, limit)
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decompress(data, limit: int) -> bytes:
    view = memoryview(data)
    total = len(view)
    if total == 0:
        return b""
    # SnappyInputStream decides on the 8-byte magic prefix; anything else is one raw block.
    if total < _XERIAL_HEADER_SIZE or view[:8] != _XERIAL_MAGIC:
        return _snappy_block(view, limit, limit)
    position = _XERIAL_HEADER_SIZE
    parts = []
    produced = 0
    while total - position >= 4:  # like SnappyInputStream, < 4 trailing bytes end the stream
        (length,) = _INT32.unpack_from(view, position)
        position += 4
        if length < 0:
            # A concatenated stream repeats the header; its first 4 bytes read as a negative int.
            if view[position - 4 : position + 4] == _XERIAL_MAGIC:
                if total - position < _XERIAL_HEADER_SIZE - 4:
                    raise CorruptRecordError("snappy: truncated header of a concatenated xerial stream")
                position += _XERIAL_HEADER_SIZE - 4
                continue
            raise CorruptRecordError(f"snappy: negative xerial chunk length {length} at position {position - 4}")
        if total - position < length:
            raise CorruptRecordError(
                f"snappy: xerial chunk at position {position - 4} declares {length} bytes "
                f"but only {total - position} remain"
            )
        part = _snappy_block(view[position : position + length], limit - produced, limit)
        produced += len(part)
        parts.append(part)
        position += length
    return b"".join(parts)


# --- lz4 ------------------------------------------------------------------------------------


def _lz4_compress(data, level: int | None) -> bytes:
    if level is None:
        level = LZ4_DEFAULT_LEVEL
    elif level not in LZ4_LEVELS:
        raise ValueError(f"lz4 level must be 1..17, got {level}")
    # Kafka uses lz4-java's fast compressor at its default level 9 and highCompressor(level)
    # (LZ4HC) otherwise. lz4.frame runs the fast compressor below level 3 and LZ4HC from 3 up
    # (clamped by liblz4 at 12, as lz4-java's native HC is), so: 9 -> 0 (fast), 1-2 -> 3 (the
    # lowest HC level lz4.frame exposes), others as given.
    if level == LZ4_DEFAULT_LEVEL:
        frame_level = 0
    else:
        frame_level = min(max(level, lz4.frame.COMPRESSIONLEVEL_MINHC), 12)
    return lz4.frame.compress(
        data,
        compression_level=frame_level,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        block_checksum=False,
        content_checksum=False,
        store_size=False,
    )


def _lz4_decompress(data, limit: int) -> bytes:
    view = memoryview(data)
    if len(view) < 7:
        raise CorruptRecordError("lz4: stream ended prematurely (no complete frame header)")
    if view[:4] != _LZ4_MAGIC:
        raise CorruptRecordError("lz4: stream unsupported (invalid magic bytes)")
    flg, bd = view[4], view[5]
    # Kafka's FLG/BD validation, stricter than liblz4's: no dictionary id, no linked blocks.
    if flg & 0x03:
        raise CorruptRecordError("lz4: reserved FLG bits must be 0")
    if not flg & 0x20:
        raise CorruptRecordError("lz4: dependent block stream is unsupported")
    if flg >> 6 != 1:
        raise CorruptRecordError(f"lz4: frame version {flg >> 6} is unsupported")
    if bd & 0x8F or not 4 <= (bd >> 4) & 7 <= 7:
        raise CorruptRecordError(f"lz4: invalid block descriptor 0x{bd:02x} (block size code must be 4..7)")
    # liblz4 checks the header checksum, block sizes and checksums and the content checksum.
    # Kafka reads only the first frame; bytes after it are ignored. max_length bounds each call
    # (the binding allocates it up front, hence chunks rather than the whole limit).
    decompressor = lz4.frame.LZ4FrameDecompressor()
    parts = []
    produced = 0
    part = decompressor.decompress(view, max_length=min(_CHUNK, limit + 1))
    while True:
        produced += len(part)
        if produced > limit:
            raise DecompressionLimitError(CompressionType.LZ4, limit)
        parts.append(part)
        if decompressor.eof:
            return b"".join(parts)
        if decompressor.needs_input:
            raise CorruptRecordError("lz4: stream ended in the middle of a frame")
        part = decompressor.decompress(b"", max_length=min(_CHUNK, limit + 1 - produced))


# --- zstd -----------------------------------------------------------------------------------


def _zstd_compress(data, level: int | None) -> bytes:
    if level is None:
        level = ZSTD_DEFAULT_LEVEL
    elif level not in ZSTD_LEVELS:
        raise ValueError(f"zstd level must be -131072..22, got {level}")
    # zstd-jni's ZstdOutputStream never knows the size up front, so writes no content size.
    return zstandard.ZstdCompressor(level=level, write_content_size=False).compress(data)


def _zstd_frames(view) -> list[tuple[int, int, int]]:
    """(start, end, most bytes it can decode to) of each zstd frame in ``view``, skippable
    frames left out, from the frame and block headers alone (RFC 8878).

    The zstandard binding's readers return short output for a truncated frame without an error,
    and its one-shot decoder stops after one frame, so the framing is checked here.
    """
    frames = []
    total = len(view)
    position = 0
    while position < total:
        start = position
        if total - position < 5:
            raise CorruptRecordError("zstd: stream ended in the middle of a frame")
        magic = bytes(view[position : position + 4])
        if magic[1:] == _ZSTD_SKIPPABLE_SUFFIX and magic[0] & 0xF0 == 0x50:
            if total - position < 8:
                raise CorruptRecordError("zstd: stream ended in the middle of a frame")
            position += 8 + int.from_bytes(view[position + 4 : position + 8], "little")
            if position > total:
                raise CorruptRecordError("zstd: stream ended in the middle of a frame")
            continue
        if magic != _ZSTD_MAGIC:
            raise CorruptRecordError(f"zstd: unknown frame magic {magic.hex()} at position {position}")
        descriptor = view[position + 4]
        if descriptor & 0x08:
            raise CorruptRecordError("zstd: reserved bit set in the frame header descriptor")
        single_segment = (descriptor >> 5) & 1
        position += (
            5
            + (1 - single_segment)
            + _ZSTD_DICT_ID_BYTES[descriptor & 3]
            + (_ZSTD_CONTENT_SIZE_BYTES[descriptor >> 6] or single_segment)
        )
        most = 0
        last = 0
        while not last:
            if total - position < 3:
                raise CorruptRecordError("zstd: stream ended in the middle of a frame")
            block_header = view[position] | (view[position + 1] << 8) | (view[position + 2] << 16)
            position += 3
            last = block_header & 1
            block_type = (block_header >> 1) & 3
            block_size = block_header >> 3
            if block_type == 0:  # raw
                position += block_size
                most += block_size
            elif block_type == 1:  # RLE: one byte repeated block_size times
                position += 1
                most += block_size
            elif block_type == 2:  # compressed
                position += block_size
                most += _ZSTD_BLOCK_MAX
            else:
                raise CorruptRecordError("zstd: reserved block type")
        if descriptor & 0x04:  # content checksum
            position += 4
        if position > total:
            raise CorruptRecordError("zstd: stream ended in the middle of a frame")
        frames.append((start, position, most))
    return frames


def _zstd_decompress(data, limit: int) -> bytes:
    # A decompressor is not safe to share between threads, hence one per call.
    decompressor = zstandard.ZstdDecompressor()
    view = memoryview(data)
    parts = []
    produced = 0
    for start, end, most in _zstd_frames(view):
        frame = view[start:end]
        if produced + most <= limit:  # cannot exceed the limit: decode in one call
            dobj = decompressor.decompressobj()
            part = dobj.decompress(frame)
            if not dobj.eof:
                raise CorruptRecordError("zstd: stream ended in the middle of a frame")
            produced += len(part)
            parts.append(part)
            continue
        reader = decompressor.stream_reader(frame, read_across_frames=False)
        while True:
            part = reader.read(min(_CHUNK, limit + 1 - produced))
            if not part:
                break
            produced += len(part)
            if produced > limit:
                raise DecompressionLimitError(CompressionType.ZSTD, limit)
            parts.append(part)
    return b"".join(parts)
