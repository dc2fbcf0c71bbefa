"""Decompression bombs for the tests: small batches whose records region inflates far past what a
batch may hold (docs/kafka-formats.md §1.4, "How far a batch may inflate").

Each bomb is ONE valid record whose value is `inflated` zero bytes, so nothing but its size is
wrong: a reader that inflated it all would decode it. The streams are built from repeated
pieces (gzip members, zstd frames, lz4 blocks), so crafting a 512 MiB bomb costs this process
a few MiB, never the inflated size.
"""

from __future__ import annotations

import struct
import zlib

import cramjam

from storage.compression import XERIAL_HEADER, Compression
from storage.records import HEADER_SIZE, build_batch, crc32c

MIB = 1 << 20
_PIECE = 16 * MIB  # zeros per gzip member / zstd frame


def _varint(value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag >= 0x80:
        out.append(zigzag & 0x7F | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def record_around(value_len: int) -> tuple[bytes, bytes]:
    """The bytes before and after the value of one record (offset 0, no key, no headers) whose
    value is `value_len` zero bytes."""
    body_head = b"\x00" + _varint(0) + _varint(0) + _varint(-1) + _varint(value_len)
    body_len = len(body_head) + value_len + 1
    return _varint(body_len) + body_head, b"\x00"


def _gzip(data: bytes) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    return packer.compress(data) + packer.flush()


def _pieces(inflated: int) -> tuple[int, int]:
    return divmod(inflated, _PIECE)


def _zero_stream(codec: Compression, inflated: int, head: bytes, tail: bytes) -> bytes:
    """head + `inflated` zeros + tail as one `codec` stream, made of repeated pieces."""
    whole, rest = _pieces(inflated)
    if codec is Compression.GZIP:
        one = _gzip(bytes(_PIECE))
        return _gzip(head) + one * whole + _gzip(bytes(rest)) + _gzip(tail)
    if codec is Compression.ZSTD:
        z = cramjam.zstd.compress
        one = bytes(z(bytes(_PIECE), level=19))
        return bytes(z(head)) + one * whole + bytes(z(bytes(rest))) + bytes(z(tail))
    if codec is Compression.LZ4:
        return _lz4_frame(head, inflated, tail)
    raise ValueError(f"no bomb for {codec.name}: snappy cannot inflate past ~21x (see snappy_claims)")


def _lz4_frame(head: bytes, zeros: int, tail: bytes) -> bytes:
    """One LZ4 frame, 4 MiB blocks (BD 0x70), no checksums: head and tail stored, zeros compressed."""
    block = 4 * MIB
    flg_bd = bytes((0x60, 0x70))
    header = b"\x04\x22\x4d\x18" + flg_bd + bytes(((_xxh32(flg_bd) >> 8) & 0xFF,))
    stored = struct.Struct("<I")
    one = bytes(cramjam.lz4.compress_block(bytes(block), store_size=False))
    parts = [header, stored.pack(len(head) | 0x8000_0000), head]
    whole, rest = divmod(zeros, block)
    parts += [stored.pack(len(one)), one] * whole
    if rest:
        last = bytes(cramjam.lz4.compress_block(bytes(rest), store_size=False))
        parts += [stored.pack(len(last)), last]
    parts += [stored.pack(len(tail) | 0x8000_0000), tail, b"\x00\x00\x00\x00"]
    return b"".join(parts)


def _xxh32(data: bytes) -> int:
    """XXH32 (seed 0) of a short input: the lz4 frame descriptor checksum."""
    from storage.compression_reference import _xxh32_short

    return _xxh32_short(data)


def with_region(codec: Compression, region: bytes, count: int = 1) -> bytes:
    """A CRC-valid batch of `count` records (header fields from a real one) whose compressed
    records region is `region`."""
    template = bytearray(build_batch([(None, b"v", None, 1)] * count, compression=codec))
    out = template[:HEADER_SIZE] + region
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def bomb(codec: Compression, inflated: int) -> bytes:
    """A batch of one record whose `codec` records region inflates to about `inflated` bytes."""
    head, tail = record_around(inflated)
    return with_region(codec, _zero_stream(codec, inflated, head, tail))


def legit_batch(codec: Compression, inflated: int) -> bytes:
    """The same one-record batch as `bomb`, for a size the rule allows (the round-trip test)."""
    return bomb(codec, inflated)


def snappy_claims(inflated: int, *, xerial: bool) -> bytes:
    """A snappy batch whose (raw or xerial-framed) block claims `inflated` bytes in a few bytes:
    snappy cannot really inflate more than ~21x, so its bomb is a lie in the length prefix."""
    block = bytes(cramjam.snappy.compress_raw(bytes(60_000)))
    claim = bytearray()
    n = inflated
    while n >= 0x80:
        claim.append(n & 0x7F | 0x80)
        n >>= 7
    claim.append(n)
    start = 0
    while block[start] & 0x80:
        start += 1
    lying = bytes(claim) + block[start + 1 :]
    region = XERIAL_HEADER + struct.pack(">i", len(lying)) + lying if xerial else lying
    return with_region(Compression.SNAPPY, region)
