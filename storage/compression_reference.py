"""The pure-Python batch codecs: the readable reference and test oracle of storage._native.

At runtime storage.compression compresses and inflates through the Rust extension; this
module states the same stream formats in Python (docs/kafka-formats.md §1.4) on top of
zlib and cramjam, and tests/native/test_native_codec.py checks both agree on every stream. See
storage/compression.py for what each framing must be and why. Nothing in txlog imports it.

The inflation limit (docs/kafka-formats.md §1.4) is stated here too, so the oracle refuses what
the extension refuses. gzip and snappy stop at it as they inflate; lz4 and zstd are inflated
whole by cramjam and then measured - this module runs in tests only, never on a reader's data.
"""

from __future__ import annotations

import struct
import zlib

import cramjam

from storage.compression import Compression, _codec  # one rule for which codes name a codec
from storage.errors import CorruptRecordError
from storage.varint import INT32_MAX

__all__ = ["compress", "decompress", "inflation_limit"]


# --- the inflation limit --------------------------------------------------------

_INFLATION_RATIO = 64
_MIN_INFLATION_LIMIT = 64 << 20  # 64 times the default max.message.bytes (about 1 MiB)
_MAX_INFLATED = INT32_MAX  # what one Java ByteBuffer holds


def inflation_limit(compressed_len: int) -> int:
    """The most a records region of `compressed_len` bytes may inflate to."""
    return min(_MAX_INFLATED, max(_MIN_INFLATION_LIMIT, _INFLATION_RATIO * compressed_len))


class _TooLarge(Exception):
    """Inflating went past the limit (the dispatcher names the codec and sizes)."""


# --- gzip ---------------------------------------------------------------

_GZIP_LEVEL = 6  # java.util.zip.Deflater.DEFAULT_COMPRESSION, Kafka's default
_GZIP_WBITS = 31  # 16 + 15: gzip header and trailer instead of zlib's


def _gzip_compress(data) -> bytes:
    packer = zlib.compressobj(_GZIP_LEVEL, zlib.DEFLATED, _GZIP_WBITS)
    return packer.compress(data) + packer.flush()


def _gzip_decompress(data, limit: int) -> bytes:
    """Inflate every gzip member, stopping one byte past `limit`; a member cut short is
    corruption, not an empty result."""
    out = []
    size = 0
    rest = data
    while True:
        inflater = zlib.decompressobj(_GZIP_WBITS)
        part = inflater.decompress(rest, limit + 1 - size)
        out.append(part)
        size += len(part)
        if size > limit:
            raise _TooLarge
        if not inflater.eof:
            if inflater.unconsumed_tail:  # stopped by max_length with input left: past the limit
                raise _TooLarge
            raise CorruptRecordError("truncated gzip stream")
        rest = inflater.unused_data
        if not rest:
            return b"".join(out)


# --- snappy (xerial framing) -----------------------------------------------

XERIAL_MAGIC = b"\x82SNAPPY\x00"
#: magic + version 1 + minimum compatible version 1, as SnappyOutputStream writes it.
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024  # SnappyOutputStream's default block size
_I32 = struct.Struct(">i")


def _snappy_compress(data) -> bytes:
    parts = [XERIAL_HEADER]
    view = memoryview(data)
    compress_raw = cramjam.snappy.compress_raw
    pack = _I32.pack
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(compress_raw(view[start : start + _XERIAL_BLOCK]))
        parts.append(pack(len(block)))
        parts.append(block)
    return b"".join(parts)


# No snappy element expands more than ~21x (a 3-byte copy of 64 bytes), so a block
# claiming more is corrupt - and must be rejected before its claim is allocated.
_SNAPPY_MAX_EXPANSION = 32


def _snappy_block(block: bytes, room: int) -> bytes:
    claimed = cramjam.snappy.decompress_raw_len(block)
    if claimed > _SNAPPY_MAX_EXPANSION * len(block) + 64:
        raise CorruptRecordError(f"snappy block of {len(block)} bytes claims {claimed} uncompressed bytes")
    if claimed > room:
        raise _TooLarge
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decompress(data, limit: int) -> bytes:
    """Read xerial framing, or a bare raw block when the magic header is absent."""
    data = bytes(data)
    if not data.startswith(XERIAL_MAGIC):
        return _snappy_block(data, limit)
    end = len(data)
    pos = 0
    out = []
    size = 0
    while pos < end:
        # xerial streams may be concatenated; a repeated header is skipped
        # (an i32 block length can never start with 0x82: it would be negative)
        if data.startswith(XERIAL_MAGIC, pos):
            if pos + len(XERIAL_HEADER) > end:
                raise CorruptRecordError("truncated xerial snappy header")
            pos += len(XERIAL_HEADER)
            continue
        if pos + 4 > end:
            raise CorruptRecordError("truncated xerial snappy block length")
        (length,) = _I32.unpack_from(data, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise CorruptRecordError(f"xerial snappy block of {length} bytes overruns the stream")
        out.append(_snappy_block(data[pos : pos + length], limit - size))
        size += len(out[-1])
        pos += length
    return b"".join(out)


# --- lz4 (frame format, independent blocks) --------------------------------

_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_FLG = 0x60  # version 01, block independence, no checksums, no content size
_LZ4_BD = 0x40  # 64 KiB maximum block size, what Kafka's writer uses
_LZ4_BLOCK = 64 * 1024
_LZ4_UNCOMPRESSED = 0x80000000  # high bit of a block size: stored as-is
_LZ4_END_MARK = b"\x00\x00\x00\x00"
_U32LE = struct.Struct("<I")


def _xxh32_short(data: bytes, seed: int = 0) -> int:
    """XXH32 of an input shorter than 16 bytes: all an lz4 descriptor checksum needs."""
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    mask = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & mask

    assert len(data) < 16
    h = (seed + p5 + len(data)) & mask
    pos = 0
    while pos + 4 <= len(data):
        h = (rotl((h + _U32LE.unpack_from(data, pos)[0] * p3) & mask, 17) * p4) & mask
        pos += 4
    for byte in data[pos:]:
        h = (rotl((h + byte * p5) & mask, 11) * p1) & mask
    h = ((h ^ (h >> 15)) * p2) & mask
    h = ((h ^ (h >> 13)) * p3) & mask
    return h ^ (h >> 16)


_LZ4_DESCRIPTOR = bytes((_LZ4_FLG, _LZ4_BD))
_LZ4_FRAME_HEADER = _LZ4_MAGIC + _LZ4_DESCRIPTOR + bytes(((_xxh32_short(_LZ4_DESCRIPTOR) >> 8) & 0xFF,))


def _lz4_compress(data) -> bytes:
    parts = [_LZ4_FRAME_HEADER]
    view = memoryview(data)
    compress_block = cramjam.lz4.compress_block
    pack = _U32LE.pack
    for start in range(0, len(view), _LZ4_BLOCK):
        chunk = view[start : start + _LZ4_BLOCK]
        block = bytes(compress_block(chunk, store_size=False))
        if len(block) >= len(chunk):  # incompressible: store the chunk itself
            parts.append(pack(len(chunk) | _LZ4_UNCOMPRESSED))
            parts.append(bytes(chunk))
        else:
            parts.append(pack(len(block)))
            parts.append(block)
    parts.append(_LZ4_END_MARK)
    return b"".join(parts)


def _lz4_decompress(data, limit: int) -> bytes:
    return _measured(bytes(cramjam.lz4.decompress(data)), limit)


def _measured(out: bytes, limit: int) -> bytes:
    if len(out) > limit:
        raise _TooLarge
    return out


# --- zstd --------------------------------------------------------------------

_ZSTD_LEVEL = 3  # zstd's own default and Kafka's compression.zstd.level default


def _zstd_compress(data) -> bytes:
    return bytes(cramjam.zstd.compress(data, level=_ZSTD_LEVEL))


def _zstd_decompress(data, limit: int) -> bytes:
    return _measured(bytes(cramjam.zstd.decompress(data)), limit)


# --- dispatch ------------------------------------------------------------------

_COMPRESSORS = {
    Compression.GZIP: _gzip_compress,
    Compression.SNAPPY: _snappy_compress,
    Compression.LZ4: _lz4_compress,
    Compression.ZSTD: _zstd_compress,
}
_DECOMPRESSORS = {
    Compression.GZIP: _gzip_decompress,
    Compression.SNAPPY: _snappy_decompress,
    Compression.LZ4: _lz4_decompress,
    Compression.ZSTD: _zstd_decompress,
}


def compress(codec: int, data) -> bytes:
    """Compress a records region with `codec` into the stream Kafka expects."""
    kind = _codec(codec)
    if kind is Compression.NONE:
        return bytes(data)
    return _COMPRESSORS[kind](data)


def decompress(codec: int, data) -> bytes:
    """Inflate a records region; anything the codec cannot read, or that inflates past
    `inflation_limit(len(data))`, is CorruptRecordError."""
    kind = _codec(codec)
    if kind is Compression.NONE:
        return bytes(data)
    limit = inflation_limit(len(data))
    try:
        return _DECOMPRESSORS[kind](data, limit)
    except _TooLarge:
        raise CorruptRecordError(
            f"{kind.kafka_name} records region of {len(data)} bytes inflates past {limit} bytes, "
            "the most a batch of its size may hold"
        ) from None
    except CorruptRecordError:
        raise
    except (cramjam.DecompressionError, zlib.error, ValueError, MemoryError) as exc:
        raise CorruptRecordError(f"cannot decompress {kind.name.lower()} data: {exc}") from None
