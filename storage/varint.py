"""Kafka's variable-length integers (docs/kafka-formats.md conventions).

Records (magic 2) use ZigZag varints (int32, at most 5 bytes) and varlongs
(int64, at most 10 bytes); flexible message schemas use the same base-128
groups without ZigZag (`*_unsigned_varint`). A longer encoding is corrupt
data, never "a big number": the Java reader gives up after 5 / 10 bytes and
so must we, or we would accept batches Kafka rejects.

Besides the general functions this module exports tables that let the
record codec skip a function call for the small values that dominate real
batches (lengths of short keys/values, offset deltas, small time deltas).
Decoding masks to 32 / 64 bits the way Java's shifts do, so every 5- or
10-byte encoding Java accepts decodes to the same number here.
"""

from __future__ import annotations

from storage.errors import CorruptRecordError

MAX_VARINT_BYTES = 5
MAX_VARLONG_BYTES = 10

# Java's int and long bounds: every int32/int64 field of Kafka's formats (and txlog's own settings
# and offsets, which Kafka keeps in longs) is checked against these, and storage defines them only here.
INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1


def _encode_unsigned(z: int) -> bytes:
    """Base-128 groups, least significant first; `z` must already be non-negative."""
    if z < 0x80:
        return bytes((z,))
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """ZigZag-encode an int32; out-of-range values are a caller bug, hence ValueError."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"varint out of int32 range: {value}")
    return _encode_unsigned((value << 1) ^ (value >> 31))


def encode_varlong(value: int) -> bytes:
    """ZigZag-encode an int64; out-of-range values are a caller bug, hence ValueError."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"varlong out of int64 range: {value}")
    return _encode_unsigned((value << 1) ^ (value >> 63))


def encode_unsigned_varint(value: int) -> bytes:
    """Unsigned (no ZigZag) varint of flexible schemas, u32 range."""
    if not 0 <= value <= 0xFFFFFFFF:
        raise ValueError(f"unsigned varint out of u32 range: {value}")
    return _encode_unsigned(value)


def size_of_varint(value: int) -> int:
    """Encoded size, for estimating batch sizes without encoding."""
    z = ((value << 1) ^ (value >> 31)) & 0xFFFFFFFF
    return (z.bit_length() + 6) // 7 or 1


def size_of_varlong(value: int) -> int:
    """Encoded size, for estimating batch sizes without encoding."""
    z = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    return (z.bit_length() + 6) // 7 or 1


def _decode_unsigned(buf, pos: int, max_bytes: int, what: str) -> tuple[int, int]:
    """Read raw base-128 groups; reject encodings longer than `max_bytes`."""
    try:
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
        raw = b & 0x7F
        shift = 7
        limit = 7 * max_bytes
        i = pos + 1
        while True:
            b = buf[i]
            i += 1
            raw |= (b & 0x7F) << shift
            if b < 0x80:
                return raw, i
            shift += 7
            if shift >= limit:
                raise CorruptRecordError(f"{what} longer than {max_bytes} bytes", position=pos)
    except IndexError:
        raise CorruptRecordError(f"truncated {what}", position=pos) from None


def decode_varint(buf, pos: int) -> tuple[int, int]:
    """Decode a ZigZag int32 at `pos`; returns (value, position after it)."""
    raw, end = _decode_unsigned(buf, pos, MAX_VARINT_BYTES, "varint")
    raw &= 0xFFFFFFFF
    return (raw >> 1) ^ -(raw & 1), end


def decode_varlong(buf, pos: int) -> tuple[int, int]:
    """Decode a ZigZag int64 at `pos`; returns (value, position after it)."""
    raw, end = _decode_unsigned(buf, pos, MAX_VARLONG_BYTES, "varlong")
    raw &= 0xFFFFFFFFFFFFFFFF
    return (raw >> 1) ^ -(raw & 1), end


def decode_unsigned_varint(buf, pos: int) -> tuple[int, int]:
    """Decode an unsigned (no ZigZag) u32 varint; returns (value, position after it)."""
    raw, end = _decode_unsigned(buf, pos, MAX_VARINT_BYTES, "unsigned varint")
    return raw & 0xFFFFFFFF, end


# --- fast-path tables for the record codec -------------------------------

#: Values 0 <= n < SMALL_LIMIT have a precomputed ZigZag encoding in VARINT_TABLE.
#: 2**13 covers every 1- and 2-byte encoding of a non-negative number.
SMALL_LIMIT = 1 << 13

#: VARINT_TABLE[n] == encode_varint(n) == encode_varlong(n) for 0 <= n < SMALL_LIMIT.
VARINT_TABLE: tuple[bytes, ...] = tuple(encode_varint(n) for n in range(SMALL_LIMIT))

#: Encoding of -1, the "null" length of keys, values and header values.
NULL_LENGTH = encode_varint(-1)

#: SINGLE_BYTE_ZIGZAG[b] is the value of the single-byte varint b, for b < 0x80 only
#: (a decoder that has already tested the continuation bit indexes this one).
SINGLE_BYTE_ZIGZAG: tuple[int, ...] = tuple((b >> 1) ^ -(b & 1) for b in range(0x80))
#: ONE_BYTE_ZIGZAG[b] is the value of the single-byte varint b, or None when b has
#: the continuation bit (b >= 0x80) and the varint is longer.
ONE_BYTE_ZIGZAG: tuple[int | None, ...] = SINGLE_BYTE_ZIGZAG + (None,) * 0x80


def _two_byte_row(first: int) -> tuple[int | None, ...]:
    """Values of the 2-byte varints starting with `first`; None where a third byte follows."""
    low = first & 0x7F
    row: list[int | None] = []
    for second in range(0x100):
        if second < 0x80:
            raw = low | (second << 7)
            row.append((raw >> 1) ^ -(raw & 1))
        else:
            row.append(None)
    return tuple(row)


_NOT_TWO_BYTES: tuple[None, ...] = (None,) * 0x100

#: TWO_BYTE_ZIGZAG[b][c] is the value of the 2-byte varint `b c` (b >= 0x80),
#: or None when c has the continuation bit too (a longer varint, decode it fully).
TWO_BYTE_ZIGZAG: tuple[tuple[int | None, ...], ...] = tuple(
    _two_byte_row(b) if b >= 0x80 else _NOT_TWO_BYTES for b in range(0x100)
)
