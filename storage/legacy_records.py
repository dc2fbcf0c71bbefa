"""Pre-0.11 message sets (magic 0 and 1): recognised everywhere, read only by `txlog inspect`.

Kafka before 0.11 wrote one message per log entry (docs/kafka-formats.md has the v2 layout; the
legacy one is Kafka's documented "Message sets" format):

    offset int64, message_size int32,
    crc int32 (CRC-32 of everything after it), magic int8, attributes int8,
    [timestamp int64, magic 1 only], key bytes (int32 length, -1 null), value bytes (likewise)

Attributes bits 0-2 are the codec; bit 3 (magic 1) means LogAppendTime. A compressed
message is a *wrapper*: its value is the compressed message set of the inner messages.
Under magic 1 the inner offsets are relative (0..n-1) and the wrapper carries the last
absolute one; under magic 0 they are absolute.

Such entries carry no producer ids and no transactions. txlog's reader, consumer and Spark
source read RecordBatch v2 only, so they refuse a segment holding these loudly
(`UnsupportedForMessageFormatError`, "magic 1 (pre-0.11) format") instead of taking it for
a torn tail; `is_legacy_message` is the one test of "this is a legacy message, not garbage".
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from storage.errors import CorruptRecordError, UnsupportedForMessageFormatError
from storage.records import (  # offset + message_size frame a legacy entry too
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    TimestampType,
)

_ENTRY = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_TIMESTAMP = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
_MAGIC_AT = MAGIC_OFFSET  # same place as a v2 batch's magic byte
# crc + magic + attributes (+ timestamp) + two null lengths: the smallest message of each magic
MIN_MESSAGE_SIZE = {0: 14, 1: 22}
CODEC_MASK = 0x07
LOG_APPEND_TIME = 0x08
NO_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class LegacyMessage:
    """One magic 0/1 message (a shallow entry of the log, or a message inside a wrapper)."""

    offset: int
    position: int  # in the buffer it was parsed from
    size: int  # LOG_OVERHEAD + message_size
    magic: int
    attributes: int
    crc: int
    valid: bool  # the stored CRC matches the bytes
    timestamp: int
    key: bytes | None
    value: bytes | None

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def last_offset(self) -> int:
        """The last offset the entry covers: a wrapper carries its last inner offset."""
        return self.offset

    @property
    def timestamp_type(self) -> str:
        """Kafka's TimestampType name: magic 0 has none."""
        if self.magic == 0:
            return "NoTimestampType"
        return TimestampType(bool(self.attributes & LOG_APPEND_TIME)).kafka_name


def is_legacy_message(buf, position: int) -> bool:
    """A whole magic 0/1 message with a matching CRC starts at `position` (zeros or garbage do not)."""
    if len(buf) - position < LOG_OVERHEAD + 5:
        return False
    magic = buf[position + _MAGIC_AT]
    size = _LENGTH.unpack_from(buf, position + LENGTH_OFFSET)[0]
    if magic not in MIN_MESSAGE_SIZE or size < MIN_MESSAGE_SIZE[magic]:
        return False
    end = position + LOG_OVERHEAD + size
    if end > len(buf):
        return False
    stored = struct.unpack_from(">I", buf, position + LOG_OVERHEAD)[0]
    return zlib.crc32(memoryview(buf)[position + _MAGIC_AT : end]) == stored


def refuse(magic: int, path: str | None, position: int) -> UnsupportedForMessageFormatError:
    """The error every v2-only reader raises at a legacy message."""
    where = f" at byte {position}" + (f" of {path}" if path else "")
    return UnsupportedForMessageFormatError(
        f"magic {magic} (pre-0.11) format{where}: txlog reads only RecordBatch v2 (magic 2) here; "
        "`txlog inspect` prints these messages"
    )


def parse_legacy(buf, position: int, *, path: str | None = None, origin: int = 0) -> LegacyMessage:
    """The message at `position`, every length bounds-checked; CorruptRecordError names where it breaks.

    `origin` is the file position of `buf[0]`: the message's `position` and errors name
    `origin + position`.
    """

    def corrupt(what: str) -> CorruptRecordError:
        return CorruptRecordError(f"legacy message: {what}", path=path, position=origin + position)

    if len(buf) - position < LOG_OVERHEAD + 6:
        raise corrupt("header runs past the end of the data")
    offset, size, crc, magic, attributes = _ENTRY.unpack_from(buf, position)
    if magic not in MIN_MESSAGE_SIZE:
        raise corrupt(f"magic {magic} is not 0 or 1")
    if size < MIN_MESSAGE_SIZE[magic]:
        raise corrupt(f"message size {size} is below the minimum {MIN_MESSAGE_SIZE[magic]}")
    end = position + LOG_OVERHEAD + size
    if end > len(buf):
        raise corrupt(f"message of {size} bytes runs past the end of the data")
    pos = position + LOG_OVERHEAD + 6
    timestamp = NO_TIMESTAMP
    if magic == 1:
        timestamp = _TIMESTAMP.unpack_from(buf, pos)[0]
        pos += 8
    key, pos = _read_bytes(buf, pos, end, corrupt, "key")
    value, pos = _read_bytes(buf, pos, end, corrupt, "value")
    if pos != end:
        raise corrupt(f"{end - pos} bytes after the value")
    valid = zlib.crc32(memoryview(buf)[position + _MAGIC_AT : end]) == crc
    return LegacyMessage(
        offset, origin + position, size + LOG_OVERHEAD, magic, attributes, crc, valid, timestamp, key, value
    )


def _read_bytes(buf, pos: int, end: int, corrupt, what: str) -> tuple[bytes | None, int]:
    if end - pos < 4:
        raise corrupt(f"{what} length runs past the message")
    length = _LENGTH.unpack_from(buf, pos)[0]
    pos += 4
    if length < 0:
        if length != -1:
            raise corrupt(f"negative {what} length {length}")
        return None, pos
    if length > end - pos:
        raise corrupt(f"{what} of {length} bytes runs past the message")
    return bytes(buf[pos : pos + length]), pos + length


def records_of(message: LegacyMessage, *, path: str | None = None) -> list[LegacyMessage]:
    """The logical messages of a shallow entry: itself, or a wrapper's inner messages with absolute offsets."""
    if message.codec == 0:
        return [message]
    from storage.compression import decompress

    if message.value is None:
        raise CorruptRecordError("legacy wrapper message has no value", path=path, position=message.position)
    data = decompress(message.codec, message.value)
    inner: list[LegacyMessage] = []
    pos = 0
    while pos < len(data):
        m = parse_legacy(data, pos, path=path)
        if m.codec != 0:
            raise CorruptRecordError(
                "legacy wrapper nests another compressed message", path=path, position=message.position
            )
        inner.append(m)
        pos += m.size
    if not inner:
        raise CorruptRecordError("legacy wrapper message holds no messages", path=path, position=message.position)
    return [_absolute(m, message, inner[-1].offset) for m in inner]


def _absolute(m: LegacyMessage, wrapper: LegacyMessage, last_relative: int) -> LegacyMessage:
    """Magic 1 inner offsets are relative (the wrapper holds the last absolute one); LogAppendTime is the wrapper's."""
    offset = wrapper.offset - last_relative + m.offset if wrapper.magic == 1 else m.offset
    timestamp = wrapper.timestamp if wrapper.attributes & LOG_APPEND_TIME else m.timestamp
    attributes = (m.attributes & ~LOG_APPEND_TIME) | (wrapper.attributes & LOG_APPEND_TIME)
    return LegacyMessage(offset, m.position, m.size, m.magic, attributes, m.crc, m.valid, timestamp, m.key, m.value)
