"""Primitive types of Kafka's message schemas, as both internal topics' records use them.

Keys and values of `__transaction_state` and `__consumer_offsets` are Kafka
"version-prefixed" schema structs (docs/kafka-formats.md §4): big-endian integers,
non-flexible strings and arrays with fixed-width lengths, and in flexible versions
compact (uvarint) lengths plus a tagged-field section after every struct. Malformed
bytes raise CorruptRecordError naming what was being read and where.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable

from storage.errors import CorruptRecordError
from storage.varint import decode_unsigned_varint, encode_unsigned_varint

_I16_MAX = (1 << 15) - 1


class SchemaWriter:
    """Appends Kafka schema primitives; out-of-range input is a caller bug (ValueError)."""

    __slots__ = ("_out",)

    def __init__(self) -> None:
        self._out = bytearray()

    def _pack(self, fmt: str, value: int, what: str) -> None:
        try:
            self._out += struct.pack(fmt, value)
        except struct.error:
            raise ValueError(f"{what} out of range: {value!r}") from None

    def i8(self, value: int) -> None:
        self._pack(">b", value, "int8")

    def i16(self, value: int) -> None:
        self._pack(">h", value, "int16")

    def i32(self, value: int) -> None:
        self._pack(">i", value, "int32")

    def i64(self, value: int) -> None:
        self._pack(">q", value, "int64")

    def uvarint(self, value: int) -> None:
        self._out += encode_unsigned_varint(value)

    def raw(self, data: bytes) -> None:
        self._out += data

    def string(self, value: str) -> None:
        """i16 length + UTF-8: the string of non-flexible versions."""
        data = value.encode("utf-8")
        if len(data) > _I16_MAX:
            raise ValueError(f"string of {len(data)} UTF-8 bytes does not fit an i16 length")
        self.i16(len(data))
        self._out += data

    def compact_string(self, value: str) -> None:
        """uvarint(len+1) + UTF-8: the string of flexible versions (0 would be null)."""
        data = value.encode("utf-8")
        if len(data) > _I16_MAX:
            raise ValueError(f"string of {len(data)} UTF-8 bytes is longer than Kafka allows")
        self.uvarint(len(data) + 1)
        self._out += data

    def nullable_string(self, value: str | None) -> None:
        """A non-flexible string that may be null (length -1)."""
        if value is None:
            self.i16(-1)
        else:
            self.string(value)

    def compact_nullable_string(self, value: str | None) -> None:
        """A flexible string that may be null (uvarint 0)."""
        if value is None:
            self.uvarint(0)
        else:
            self.compact_string(value)

    def bytes_(self, value: bytes | None) -> None:
        """i32 length + bytes; None writes the null bytes (-1)."""
        if value is None:
            self.i32(-1)
            return
        self.i32(len(value))
        self._out += value

    def compact_bytes(self, value: bytes | None) -> None:
        """uvarint(len+1) + bytes; None writes the null bytes (0)."""
        if value is None:
            self.uvarint(0)
            return
        self.uvarint(len(value) + 1)
        self._out += value

    def array_count(self, count: int | None) -> None:
        """i32 element count; None writes the null array (-1)."""
        self.i32(-1 if count is None else count)

    def compact_array_count(self, count: int | None) -> None:
        """uvarint(count+1); None writes the null array (0)."""
        self.uvarint(0 if count is None else count + 1)

    def tagged_fields(self, fields: list[tuple[int, bytes]]) -> None:
        """A tag section; `fields` are (tag, payload) already filtered to non-defaults."""
        self.uvarint(len(fields))
        for tag, payload in sorted(fields):
            self.uvarint(tag)
            self.uvarint(len(payload))
            self._out += payload

    def getvalue(self) -> bytes:
        return bytes(self._out)


class SchemaReader:
    """Reads Kafka schema primitives; every malformation becomes CorruptRecordError.

    `what` names the schema in error messages so that a corrupt record found while
    replaying a log says which of the internal topics' schemas it broke.
    """

    __slots__ = ("_buf", "_pos", "_what")

    def __init__(self, data: bytes, what: str) -> None:
        self._buf = data
        self._pos = 0
        self._what = what

    @property
    def position(self) -> int:
        return self._pos

    def value_version(self, known: tuple[int, ...]) -> int:
        """The i16 version prefix of a value, which must be one this reader knows (docs/kafka-formats.md §4)."""
        version = self.i16("value version")
        if version not in known:
            raise self.corrupt(f"unknown value version {version}", 0)
        return version

    def corrupt(self, message: str, position: int | None = None) -> CorruptRecordError:
        pos = self._pos if position is None else position
        return CorruptRecordError(f"{self._what}: {message}", position=pos)

    def _take(self, size: int, what: str) -> int:
        """Reserve `size` bytes; returns where they start."""
        start = self._pos
        if size < 0 or start + size > len(self._buf):
            raise self.corrupt(f"truncated {what}")
        self._pos = start + size
        return start

    def _unpack(self, fmt: str, size: int, what: str) -> int:
        start = self._take(size, what)
        return struct.unpack_from(fmt, self._buf, start)[0]

    def i8(self, what: str = "int8") -> int:
        return self._unpack(">b", 1, what)

    def i16(self, what: str = "int16") -> int:
        return self._unpack(">h", 2, what)

    def i32(self, what: str = "int32") -> int:
        return self._unpack(">i", 4, what)

    def i64(self, what: str = "int64") -> int:
        return self._unpack(">q", 8, what)

    def u16(self, what: str = "uint16") -> int:
        return self._unpack(">H", 2, what)

    def f64(self, what: str = "float64") -> float:
        """A big-endian IEEE 754 double (Kafka's float64)."""
        start = self._take(8, what)
        return struct.unpack_from(">d", self._buf, start)[0]

    def raw(self, size: int, what: str) -> bytes:
        """The next `size` bytes as they are (bounds-checked), for callers that decode them their way."""
        start = self._take(size, what)
        return bytes(self._buf[start : start + size])

    def uuid(self, what: str = "uuid") -> bytes:
        """Kafka's Uuid: 16 raw bytes (most then least significant long); see `uuid_text`."""
        start = self._take(16, what)
        return bytes(self._buf[start : start + 16])

    def uvarint(self) -> int:
        try:
            value, self._pos = decode_unsigned_varint(self._buf, self._pos)
        except CorruptRecordError as exc:
            # The varint error already names its position; keep it once, not twice.
            detail = str(exc.args[0])
            if exc.position is not None:
                detail = detail.removesuffix(f" at byte {exc.position}")
            raise self.corrupt(detail, exc.position) from None
        return value

    def _utf8(self, size: int, what: str) -> str:
        start = self._take(size, what)
        try:
            return bytes(self._buf[start : start + size]).decode("utf-8")
        except UnicodeDecodeError:
            raise self.corrupt(f"{what} is not valid UTF-8", start) from None

    def string(self, what: str) -> str | None:
        """Non-flexible string; None for the null string (length -1)."""
        start = self._pos
        length = self.i16(what)
        if length == -1:
            return None
        if length < 0:
            raise self.corrupt(f"negative length {length} of {what}", start)
        return self._utf8(length, what)

    def compact_string(self, what: str) -> str | None:
        """Flexible string; None for the null string (uvarint 0)."""
        size = self.uvarint()
        if size == 0:
            return None
        return self._utf8(size - 1, what)

    def bytes_(self, what: str) -> bytes | None:
        """Non-flexible bytes (i32 length); None for null (-1)."""
        start = self._pos
        length = self.i32(what)
        if length == -1:
            return None
        if length < 0:
            raise self.corrupt(f"negative length {length} of {what}", start)
        at = self._take(length, what)
        return bytes(self._buf[at : at + length])

    def compact_bytes(self, what: str) -> bytes | None:
        """Flexible bytes (uvarint length+1); None for null (0)."""
        size = self.uvarint()
        if size == 0:
            return None
        at = self._take(size - 1, what)
        return bytes(self._buf[at : at + size - 1])

    def at_end(self) -> bool:
        """True when every byte was read (for schemas whose newer versions append fields)."""
        return self._pos >= len(self._buf)

    def _checked_count(self, count: int, min_element_size: int, what: str, start: int) -> int:
        # Checking the count against the bytes left stops a corrupt count from
        # making us loop (or allocate) billions of times before noticing.
        if count * min_element_size > len(self._buf) - self._pos:
            raise self.corrupt(f"{what} count {count} exceeds the remaining bytes", start)
        return count

    def array_count(self, min_element_size: int, what: str) -> int | None:
        """i32 element count of a non-flexible array; None for the null array."""
        start = self._pos
        count = self.i32(what)
        if count == -1:
            return None
        if count < 0:
            raise self.corrupt(f"negative count {count} of {what}", start)
        return self._checked_count(count, min_element_size, what, start)

    def compact_array_count(self, min_element_size: int, what: str) -> int | None:
        """uvarint(count+1) of a flexible array; None for the null array."""
        start = self._pos
        raw = self.uvarint()
        if raw == 0:
            return None
        return self._checked_count(raw - 1, min_element_size, what, start)

    def tagged_fields(self, known: dict[int, Callable[[SchemaReader], None]] | None = None) -> None:
        """Read a tag section, handing known tags to their reader and skipping the rest.

        Unknown tags are skipped, not rejected: tags are Kafka's way of adding
        fields without a version bump, so a newer writer's record must still load.
        A known tag must fill exactly its declared size, or the field means
        something we do not understand.
        """
        known = known or {}
        count = self.uvarint()
        self._checked_count(count, 2, "tagged fields", self._pos)
        for _ in range(count):
            tag = self.uvarint()
            size = self.uvarint()
            start = self._take(size, f"tagged field {tag}")
            read = known.get(tag)
            if read is None:
                continue
            self._pos = start
            read(self)
            if self._pos != start + size:
                raise self.corrupt(f"tagged field {tag} has size {size}, not its type's size", start)

    def expect_end(self) -> None:
        """Reject trailing bytes: they mean the version or a length is wrong."""
        if self._pos != len(self._buf):
            raise self.corrupt(f"{len(self._buf) - self._pos} trailing bytes")


def uuid_text(raw: bytes) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes without padding (22 characters)."""
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")
