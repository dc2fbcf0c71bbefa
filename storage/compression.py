"""Batch compression codecs, in the exact stream formats Kafka's Java client uses.

The records region of a compressed batch is ONE stream of the codec below
(docs/kafka-formats.md §1.4). What matters for byte compatibility is the framing,
not the compressed bytes themselves (no two snappy/zstd implementations
produce identical output), so each writer here emits the framing Java's
reader expects and each reader accepts everything Java's reader accepts:

* gzip   - a standard gzip stream (several members are accepted, as
           java.util.zip.GZIPInputStream does).
* snappy - xerial `SnappyOutputStream` framing: 16-byte header, then
           [i32 big-endian length + raw snappy block]*. Readers also accept a
           bare raw snappy block, because xerial's input stream falls back to
           that when the header is missing and some clients write it.
* lz4    - the LZ4 frame format with *independent* blocks and no content
           size: Kafka's KafkaLZ4BlockInputStream rejects linked blocks,
           which is what general-purpose lz4 frame writers produce by default,
           so the frame is assembled here from raw blocks.
* zstd   - a standard zstd frame.

The codecs run in the Rust extension (storage/native/src/compression.rs, on the flate2,
snap, lz4_flex and zstd crates); storage/compression_reference.py is the same rules in
Python, kept as the readable reference and the test oracle. Anything that cannot be
inflated becomes CorruptRecordError (storage.codec_errors), so callers only ever see the
typed errors of storage.errors.

A stream inflates incrementally and only so far: to `inflation_limit(len(data))`, 64 times
its size and at least 64 MiB (docs/kafka-formats.md §1.4). Past that it is refused
(CorruptRecordError) with no more than the limit held, whatever sizes the stream claims, so a
small hostile batch cannot make a reader allocate gigabytes; the append path refuses such a
batch before it reaches the log (storage.records.RecordBatch.validate_framing).
"""

from __future__ import annotations

from enum import IntEnum

import storage._native as _native
from storage.codec_errors import CodecError, corrupt_record_error
from storage.errors import UnsupportedCompressionTypeError

__all__ = ["Compression", "XERIAL_HEADER", "XERIAL_MAGIC", "compress", "decompress", "inflation_limit"]

#: The most a records region of `compressed_len` bytes may inflate to (the rule is the extension's).
inflation_limit = _native.inflation_limit

#: The xerial stream header (magic, version 1, minimum compatible version 1) that
#: SnappyOutputStream writes before its blocks.
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01"


class Compression(IntEnum):
    """The compression codes of batch attribute bits 0-2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def kafka_name(self) -> str:
        """Kafka's `compression.type` value and what kafka-dump-log prints: none, gzip, ..."""
        return self.name.lower()

    @classmethod
    def name_of(cls, code: int) -> str:
        """The name of attribute bits 0-2, or `unknown(N)` for a code Kafka does not define."""
        return cls(code).kafka_name if code in cls._value2member_map_ else f"unknown({code})"

    @classmethod
    def kafka_names(cls) -> tuple[str, ...]:
        """Every `compression.type` value, in code order."""
        return tuple(codec.kafka_name for codec in cls)


def _codec(codec: int) -> Compression:
    """Map an attribute code to the enum; codes 5-7 exist on the wire but name no codec."""
    try:
        return Compression(codec)
    except ValueError:
        raise UnsupportedCompressionTypeError(f"unknown compression type {codec}") from None


def compress(codec: int, data) -> bytes:
    """Compress a records region with `codec` into the stream Kafka expects."""
    kind = _codec(codec)
    if kind is Compression.NONE:
        return bytes(data)
    return _native.compress(kind, data)


def decompress(codec: int, data) -> bytes:
    """Inflate a records region; anything the codec cannot read, or that inflates past
    `inflation_limit(len(data))`, is CorruptRecordError."""
    kind = _codec(codec)
    if kind is Compression.NONE:
        return bytes(data)
    try:
        return _native.decompress(kind, data)
    except CodecError as exc:
        raise corrupt_record_error(exc) from None
