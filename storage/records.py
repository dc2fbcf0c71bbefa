"""RecordBatch v2 (magic 2): the only batch format Kafka 4.x writes (docs/kafka-formats.md §1, §2).

Every byte that reaches a segment file passes through this module, so it has
two jobs that pull in different directions:

* be exactly Kafka's format - a batch written here must be read by Kafka and
  any Kafka client, and every batch Kafka accepts must be read here with the
  same meaning (CRC-32C scope, ZigZag varints, LOG_APPEND_TIME semantics,
  sequence wrap-around, the strict record-size checks of the Java reader);
* be fast - it is the hot path of producing and consuming, and per-record
  Python work is the bottleneck. The encoder therefore works column-wise with
  C-level `map`/`zip`/`join` over precomputed varint tables, and the decoder
  is one flat loop with table lookups for 1- and 2-byte varints and no
  per-field function calls. Both fall back to the general varint functions
  only for values the tables do not cover.

`RecordBatch.parse` checks the header and CRC only; records are decoded on
demand by `records()`, because most readers of the log (recovery, index
rebuilds, fetches that forward bytes) never need them.
"""

from __future__ import annotations

import struct
import time
from enum import IntEnum
from itertools import chain, repeat
from operator import itemgetter, sub
from typing import Iterator, NamedTuple, Sequence

from crc32c import crc32c

from storage.compression import Compression, compress, decompress
from storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    UnsupportedCompressionTypeError,
)
from storage.sequence import INT32_MAX, inc_seq
from storage.varint import (
    NULL_LENGTH,
    ONE_BYTE_ZIGZAG,
    SMALL_LIMIT,
    TWO_BYTE_ZIGZAG,
    VARINT_TABLE,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    size_of_varint,
    size_of_varlong,
)

__all__ = [
    "BatchBuilder",
    "BatchHeader",
    "COMPRESSION_MASK",
    "CONTROL_BATCH_SIZE",
    "CONTROL_MASK",
    "Compression",
    "ControlType",
    "DELETE_HORIZON_MASK",
    "EndTransactionMarker",
    "HEADER_SIZE",
    "Header",
    "LOG_OVERHEAD",
    "MAGIC",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "RECORD_BATCH_OVERHEAD",
    "Record",
    "RecordBatch",
    "TIMESTAMP_TYPE_MASK",
    "TRANSACTIONAL_MASK",
    "TimestampType",
    "build_batch",
    "build_control_batch",
]

# --- constants (docs/kafka-formats.md §1.1, §1.2, §2) -----------------------------
# The batch frame, defined here once: every reader of batch bytes (storage.file_records,
# the segment, the dump tool, the integrity check) takes these names instead of numbers.

MAGIC = 2
#: Byte offsets of the header fields inside a batch (docs/kafka-formats.md §1.1).
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21  # the CRC covers [attributes, end of batch)
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORDS_OFFSET = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength, the part not counted by batchLength
HEADER_SIZE = RECORDS_OFFSET
RECORD_BATCH_OVERHEAD = HEADER_SIZE
#: Fewer bytes than this cannot even say which format a batch is in; a log whose
#: tail is shorter is a torn write, not corruption.
HEADER_SIZE_UP_TO_MAGIC = MAGIC_OFFSET + 1
#: The smallest batchLength a writer produces (a header and no records); below it is damage.
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49
CRC_COVERED_START = ATTRIBUTES_OFFSET
CONTROL_BATCH_SIZE = 78

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

# Smallest record body: attributes, timestampDelta, offsetDelta, keyLength,
# valueLength, headerCount - one byte each.
_MIN_RECORD_BODY = 6

_HEADER = struct.Struct(">qiibIhiqqqhii")  # all 61 header bytes
_CRC_COVERED_HEADER = struct.Struct(">hiqqqhii")  # bytes 21..61
_FRAME = struct.Struct(">qiib")  # bytes 0..17: baseOffset, batchLength, leaderEpoch, magic
_OFFSET_LENGTH_EPOCH = struct.Struct(">qii")  # bytes 0..16, the part with_offset rewrites
_U32 = struct.Struct(">I")
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")

assert _HEADER.size == HEADER_SIZE and _CRC_COVERED_HEADER.size == HEADER_SIZE - CRC_COVERED_START


class TimestampType(IntEnum):
    """Attribute bit 3: who set the timestamps (docs/kafka-formats.md §1.2)."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1

    @property
    def kafka_name(self) -> str:
        """The name Kafka prints (kafka-dump-log, the console consumer): CreateTime, LogAppendTime."""
        return "LogAppendTime" if self is TimestampType.LOG_APPEND_TIME else "CreateTime"


class ControlType(IntEnum):
    """Type field of a control record key; only these two end a transaction."""

    ABORT = 0
    COMMIT = 1

    @staticmethod
    def kafka_name_of(type_id: int) -> str:
        """Kafka's ControlRecordType name for any type id (2-6 appear only in KRaft metadata logs)."""
        return _CONTROL_TYPE_NAMES.get(type_id, "UNKNOWN")


# Kafka's ControlRecordType names, the only table of them: 0-1 end transactions; the rest are
# KRaft's, which txlog reads in a real __cluster_metadata log but never writes.
_CONTROL_TYPE_NAMES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER",
                       5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}


Header = tuple[str, bytes | None]


class Record(NamedTuple):
    """One decoded record. A tuple subclass because nothing is cheaper to create in bulk."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    sequence: int


class EndTransactionMarker(NamedTuple):
    """The content of a control record (docs/kafka-formats.md §2).

    `control_type` is a ControlType for ABORT/COMMIT and the raw int for the
    KRaft-only types 2-6, which are not transaction markers: for those
    `coordinator_epoch` is -1 because their value has a different layout.
    """

    control_type: ControlType | int
    coordinator_epoch: int

    @property
    def is_commit(self) -> bool:
        return self.control_type == ControlType.COMMIT

    @property
    def is_abort(self) -> bool:
        return self.control_type == ControlType.ABORT


_new_tuple = tuple.__new__


# --- the decoded view of one batch -------------------------------------------------


class RecordBatch:
    """One magic-2 batch inside a buffer, with its header decoded and its CRC checked.

    Header fields are plain attributes set once by `parse`; everything derived
    is a property, so parsing stays a single `struct` unpack plus a CRC.
    The records are only decoded by `records()`. `position` is where the batch
    starts in its file (`origin` + its place in the buffer), so a batch read from
    a chunk of a segment, and every error it raises, names its real byte.
    """

    __slots__ = (
        "_buf",
        "_at",
        "_bytes",
        "path",
        "position",
        "base_offset",
        "batch_length",
        "size",
        "partition_leader_epoch",
        "magic",
        "crc",
        "attributes",
        "last_offset_delta",
        "base_timestamp",
        "max_timestamp",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "records_count",
    )

    @classmethod
    def parse(cls, buf, position: int = 0, *, path: str | None = None, verify_crc: bool = True,
              origin: int = 0) -> RecordBatch:
        """Check framing, magic and CRC of the batch at `buf[position]`; CorruptRecordError otherwise.

        `origin` is the file position of `buf[0]` (a reader's chunk of a segment): the
        batch's `position` and every error name `origin + position`.
        """
        available = len(buf) - position
        if position < 0 or available < HEADER_SIZE:
            raise CorruptRecordError(
                f"need {HEADER_SIZE} bytes for a batch header, {max(available, 0)} available",
                path=path, position=origin + position,
            )
        (base_offset, batch_length, leader_epoch, magic, crc, attributes, last_offset_delta,
         base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence,
         records_count) = _HEADER.unpack_from(buf, position)
        if magic != MAGIC:
            raise CorruptRecordError(f"unsupported magic {magic} (only {MAGIC} is supported)",
                                     path=path, position=origin + position)
        if batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"batch length {batch_length} is below the minimum {MIN_BATCH_LENGTH}",
                                     path=path, position=origin + position)
        size = batch_length + LOG_OVERHEAD
        if size > available:
            raise CorruptRecordError(f"batch of {size} bytes but only {available} bytes available",
                                     path=path, position=origin + position)
        if verify_crc:
            actual = crc32c(memoryview(buf)[position + CRC_COVERED_START:position + size])
            if actual != crc:
                raise CorruptRecordError(f"CRC mismatch: stored {crc:#010x}, computed {actual:#010x}",
                                         path=path, position=origin + position)
        batch = object.__new__(cls)
        batch._buf = buf
        batch._at = position
        batch._bytes = None
        batch.path = path
        batch.position = origin + position
        batch.base_offset = base_offset
        batch.batch_length = batch_length
        batch.size = size
        batch.partition_leader_epoch = leader_epoch
        batch.magic = magic
        batch.crc = crc
        batch.attributes = attributes
        batch.last_offset_delta = last_offset_delta
        batch.base_timestamp = base_timestamp
        batch.max_timestamp = max_timestamp
        batch.producer_id = producer_id
        batch.producer_epoch = producer_epoch
        batch.base_sequence = base_sequence
        batch.records_count = records_count
        return batch

    # -- derived header values

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Compression:
        code = self.attributes & COMPRESSION_MASK
        if code > Compression.ZSTD:
            raise UnsupportedCompressionTypeError(f"unknown compression type {code} in batch at byte {self.position}")
        return Compression(code)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType.LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return inc_seq(self.base_sequence, self.last_offset_delta)

    def is_valid(self) -> bool:
        """Whether the stored CRC matches the bytes: for batches parsed with `verify_crc=False`."""
        at = self._at
        return crc32c(memoryview(self._buf)[at + CRC_COVERED_START:at + self.size]) == self.crc

    @property
    def buffer(self) -> bytes:
        """Exactly this batch's bytes (copied once, so no view pins an mmap)."""
        if self._bytes is None:
            buf = self._buf
            if type(buf) is bytes and self._at == 0 and self.size == len(buf):
                self._bytes = buf
            else:
                self._bytes = bytes(memoryview(buf)[self._at:self._at + self.size])
        return self._bytes

    def __repr__(self) -> str:
        return (f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
                f"count={self.records_count}, size={self.size}, producer_id={self.producer_id}, "
                f"epoch={self.producer_epoch}, base_sequence={self.base_sequence}, "
                f"attributes={self.attributes:#x}, position={self.position})")

    # -- records

    def _records_region(self) -> bytes:
        start = self._at + HEADER_SIZE
        end = self._at + self.size
        buf = self._buf
        if type(buf) is bytes:
            return buf[start:end]
        return bytes(memoryview(buf)[start:end])

    def _corrupt(self, detail: str) -> CorruptRecordError:
        return CorruptRecordError(f"batch with base offset {self.base_offset}: {detail}",
                                  path=self.path, position=self.position)

    def records(self) -> list[Record]:
        """Decompress and decode every record, with the Java reader's strictness."""
        return self._decoded(named=True)

    def record_tuples(self) -> list[tuple]:
        """`records()` as plain tuples in Record's field order, for readers that regroup them by column.

        Skipping the Record wrapper saves a copy of every tuple, a sizeable share of
        decoding when the rows are only transposed into columns afterwards.
        """
        return self._decoded(named=False)

    def _decoded(self, *, named: bool) -> list:
        count = self.records_count
        if count < 0:
            raise InvalidRecordError(f"negative record count {count} in batch with base offset "
                                     f"{self.base_offset} at byte {self.position}")
        data = self._records_region()
        if count == 0 and not data:
            return []  # emptied by compaction: only the header survives
        codec = self.attributes & COMPRESSION_MASK
        if codec:
            try:
                data = decompress(codec, data)
            except CorruptRecordError as exc:
                raise self._corrupt(str(exc)) from None
        log_append = self.attributes & TIMESTAMP_TYPE_MASK
        try:
            rows = _decode_records(data, count, self.base_offset,
                                   self.max_timestamp if log_append else self.base_timestamp,
                                   not log_append, self.base_sequence)
            return list(map(_new_tuple, repeat(Record, len(rows)), rows)) if named else rows
        except IndexError:
            raise self._corrupt(f"records region of {len(data)} bytes ends inside a record "
                                f"(expected {count} records)") from None
        except CorruptRecordError as exc:
            raise self._corrupt(f"{exc} of the records region") from None

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())

    def control_marker(self) -> EndTransactionMarker:
        """Decode the EndTransactionMarker of a control batch (docs/kafka-formats.md §2)."""
        if not self.attributes & CONTROL_MASK:
            raise InvalidRecordError(f"batch at byte {self.position} is not a control batch")
        records = self.records()
        if not records:
            raise InvalidRecordError(f"control batch at byte {self.position} has no record")
        return _parse_control_record(records[0], self)

    def is_abort_marker(self) -> bool:
        """Whether this is a control batch ending its producer's transaction with ABORT.

        The one ABORT test of every reader (read_committed filtering, the `.txnindex`
        check). A method, not a property: it decodes the control record. A control batch
        emptied by compaction ends nothing, and one whose record is not a valid marker is
        no ABORT: either way the reader drops it as any control batch.
        """
        if not self.attributes & CONTROL_MASK or self.records_count == 0:
            return False
        try:
            return self.control_marker().is_abort
        except InvalidRecordError:
            return False

    def validate_framing(self) -> int:
        """Cheap structural check for the append path; returns the batch's true maxTimestamp.

        It walks the record length varints, never the record bodies, and jumps over
        runs of equal-length records in C (a slice with the record size as its step
        compares every run's length prefixes at once), so a producer's batch of
        same-sized records costs a few slices instead of a Python step per record. The
        same slices yield each record's timestamp delta, which is how the leader learns
        the real maximum timestamp (docs/kafka-formats.md §1.2) without decoding records.
        Compressed batches get the header rules only: inflating them here would cost
        more than the write it guards, so their header maxTimestamp is trusted.
        """
        count = self.records_count
        if count <= 0 or count != self.last_offset_delta + 1:
            raise InvalidRecordError(
                f"batch at byte {self.position}: record count {count} does not match last offset delta "
                f"{self.last_offset_delta} (must be lastOffsetDelta + 1 > 0)")
        if self.attributes & COMPRESSION_MASK:
            self.compression  # noqa: B018 - raises for codes 5-7
            return self.max_timestamp
        region = self._records_region()
        seen, max_delta = _walk_records(region, self._corrupt)
        if seen != count:
            raise self._corrupt(f"batch holds {seen} records but its header says {count}")
        if self.attributes & TIMESTAMP_TYPE_MASK:
            return self.max_timestamp  # LOG_APPEND_TIME: the header is the only timestamp
        return self.base_timestamp + max_delta

    def with_offset(self, base_offset: int, partition_leader_epoch: int | None = None,
                    max_timestamp: int | None = None) -> bytes:
        """A copy with baseOffset (and leader epoch) rewritten; neither is under the CRC.

        Giving a `max_timestamp` that differs from the header's also rewrites that field
        and the CRC, as Kafka's leader does for a batch that understates it.
        """
        epoch = self.partition_leader_epoch if partition_leader_epoch is None else partition_leader_epoch
        body = memoryview(self.buffer)[MAGIC_OFFSET:]
        if max_timestamp is None or max_timestamp == self.max_timestamp:
            return b"".join((_OFFSET_LENGTH_EPOCH.pack(base_offset, self.batch_length, epoch), body))
        out = bytearray(_OFFSET_LENGTH_EPOCH.pack(base_offset, self.batch_length, epoch))
        out += body
        struct.pack_into(">q", out, MAX_TIMESTAMP_OFFSET, max_timestamp)
        struct.pack_into(">I", out, CRC_OFFSET, crc32c(memoryview(out)[CRC_COVERED_START:]))
        return bytes(out)


class BatchHeader(NamedTuple):
    """The 61 header bytes of a batch, decoded without reading its records or checking its CRC.

    For walks that need only the frame: hopping from header to header to the batch of an
    offset, or reading every batch's maxTimestamp for retention.
    """

    position: int  # in the file
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @classmethod
    def parse(cls, buf, position: int = 0, *, path: str | None = None, origin: int = 0) -> BatchHeader:
        """The header at `buf[position]` (CorruptRecordError if fewer than 61 bytes, a magic other
        than 2 or a batchLength below 49); `origin` is the file position of `buf[0]`."""
        if position < 0 or len(buf) - position < HEADER_SIZE:
            raise CorruptRecordError(f"need {HEADER_SIZE} bytes for a batch header, "
                                     f"{max(len(buf) - position, 0)} available", path=path, position=origin + position)
        fields = _HEADER.unpack_from(buf, position)
        if fields[3] != MAGIC:
            raise CorruptRecordError(f"unsupported magic {fields[3]} (only {MAGIC} is supported)",
                                     path=path, position=origin + position)
        if fields[1] < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"batch length {fields[1]} is below the minimum {MIN_BATCH_LENGTH}",
                                     path=path, position=origin + position)
        return _new_tuple(cls, (origin + position, *fields))


def _walk_records(region: bytes, corrupt) -> tuple[int, int]:
    """Count the records tiling `region` exactly and find the largest timestamp delta.

    Raises `corrupt(detail)` when the lengths do not tile the region. A record is
    `length varint | attributes | timestampDelta varlong | ...`; within a run of
    records whose length prefix bytes are identical, record i starts at pos + i*stride.
    """
    end = len(region)
    pos = seen = 0
    max_delta = None
    one = ONE_BYTE_ZIGZAG
    while pos < end:
        b = region[pos]
        if b < 0x80:
            length, h = one[b], 1
        else:
            try:
                length, after = decode_varint(region, pos)
            except CorruptRecordError as exc:
                raise corrupt(f"length of record {seen}: {exc}") from None
            h = after - pos
        if length < _MIN_RECORD_BODY:
            raise corrupt(f"record {seen} has length {length}, below the minimum {_MIN_RECORD_BODY}")
        stride = h + length
        fit = (end - pos) // stride
        if fit == 0:
            raise corrupt(f"record lengths overrun the batch by {pos + stride - end} bytes")
        run = 1
        if fit > 1 and h <= 2:
            stop = pos + fit * stride
            firsts = region[pos:stop:stride]
            run = fit - len(firsts.lstrip(firsts[:1]))
            if h == 2:
                seconds = region[pos + 1:stop:stride]
                run = min(run, fit - len(seconds.lstrip(seconds[:1])))
        deltas = region[pos + h + 1:pos + run * stride:stride]
        if deltas.isascii():
            top = max(one[x] for x in set(deltas))
        else:
            top = max(_timestamp_delta(region, pos + i * stride + h + 1, corrupt) for i in range(run))
        if max_delta is None or top > max_delta:
            max_delta = top
        pos += run * stride
        seen += run
    return seen, (0 if max_delta is None else max_delta)


def _timestamp_delta(region: bytes, pos: int, corrupt) -> int:
    try:
        return decode_varlong(region, pos)[0]
    except CorruptRecordError as exc:
        raise corrupt(f"timestamp delta: {exc}") from None


def peek_control_type(key: bytes | None) -> int:
    """The type of a control record key, -1 when the key is too short to hold one.

    Lenient, for tools that show damaged control records instead of failing on them;
    `RecordBatch.control_marker` applies the reader's rules.
    """
    if key is None or len(key) < _CONTROL_KEY.size:
        return -1
    return _CONTROL_KEY.unpack_from(key)[1]


def peek_coordinator_epoch(value: bytes | None) -> int | None:
    """The coordinator epoch of an end-transaction marker's value, None when it is too short."""
    if value is None or len(value) < _CONTROL_VALUE.size:
        return None
    return _CONTROL_VALUE.unpack_from(value)[1]


def _parse_control_record(record: Record, batch: RecordBatch) -> EndTransactionMarker:
    """Apply the key/value rules of docs/kafka-formats.md §2 to the single record of a control batch."""
    key = record.key
    if key is None or len(key) < _CONTROL_KEY.size:
        raise batch._corrupt(f"control record key of {0 if key is None else len(key)} bytes, need 4")
    key_version, type_id = _CONTROL_KEY.unpack_from(key)
    if key_version < 0:
        raise batch._corrupt(f"negative control record key version {key_version}")
    if type_id not in (ControlType.ABORT, ControlType.COMMIT):
        return EndTransactionMarker(type_id, -1)
    value = record.value
    if value is None or len(value) < _CONTROL_VALUE.size:
        raise batch._corrupt(f"end transaction marker value of {0 if value is None else len(value)} bytes, need 6")
    value_version, coordinator_epoch = _CONTROL_VALUE.unpack_from(value)
    if value_version < 0:
        raise batch._corrupt(f"negative end transaction marker version {value_version}")
    return EndTransactionMarker(ControlType(type_id), coordinator_epoch)


# --- record decoding (the hot loop) ---------------------------------------------------


def _decode_records(data: bytes, count: int, base_offset: int, base_timestamp: int,
                    use_deltas: bool, base_sequence: int) -> list[tuple]:
    """Decode `count` records that must fill `data` exactly, as tuples in Record's field order.

    Structural errors raise CorruptRecordError (position relative to `data`);
    reading past the end raises IndexError, which the caller reports as
    truncation - a zero-cost `try` beats a bounds check per field.
    The fields are decoded inline (table lookups for 1- and 2-byte varints)
    because a function call per field would double the cost of this loop.
    """
    rows = []
    append = rows.append
    one = ONE_BYTE_ZIGZAG
    two = TWO_BYTE_ZIGZAG
    varint = decode_varint
    varlong = decode_varlong
    no_sequence = base_sequence < 0
    wrap_at = INT32_MAX - base_sequence  # offset delta at which the sequence wraps to 0
    pos = 0
    for _ in range(count):
        # length (usually 2 bytes: records of 64..8191 bytes)
        b = data[pos]
        if b < 0x80:
            pos += 1
            record_end = pos + one[b]
        else:
            length = two[b][data[pos + 1]]
            if length is None:
                length, pos = varint(data, pos)
            else:
                pos += 2
            record_end = pos + length
        # attributes (unused, skipped), then timestampDelta (usually 1 byte)
        ts_delta = one[data[pos + 1]]
        if ts_delta is None:
            ts_delta, pos = varlong(data, pos + 1)
        else:
            pos += 2
        # offsetDelta
        b = data[pos]
        if b < 0x80:
            offset_delta = one[b]
            pos += 1
        else:
            offset_delta = two[b][data[pos + 1]]
            if offset_delta is None:
                offset_delta, pos = varint(data, pos)
            else:
                pos += 2
        # key
        b = data[pos]
        if b < 0x80:
            size = one[b]
            pos += 1
        else:
            size = two[b][data[pos + 1]]
            if size is None:
                size, pos = varint(data, pos)
            else:
                pos += 2
        if size >= 0:
            key = data[pos:(pos := pos + size)]
        elif size == -1:
            key = None
        else:
            raise CorruptRecordError(f"negative key length {size}", position=pos)
        # value
        b = data[pos]
        if b < 0x80:
            size = one[b]
            pos += 1
        else:
            size = two[b][data[pos + 1]]
            if size is None:
                size, pos = varint(data, pos)
            else:
                pos += 2
        if size >= 0:
            value = data[pos:(pos := pos + size)]
        elif size == -1:
            value = None
        else:
            raise CorruptRecordError(f"negative value length {size}", position=pos)
        # headers: the common "none, and the record ends here" case costs one byte read
        if pos + 1 == record_end and not data[pos]:
            headers = []
            pos = record_end
        else:
            headers, pos = _decode_headers(data, pos, record_end)
            if pos != record_end:
                raise CorruptRecordError(
                    f"record size mismatch: length says it ends at byte {record_end}, fields end at {pos}",
                    position=pos)
        append((base_offset + offset_delta,
                base_timestamp + ts_delta if use_deltas else base_timestamp,
                key, value, headers,
                -1 if no_sequence else (
                    base_sequence + offset_delta if offset_delta <= wrap_at else offset_delta - wrap_at - 1)))
    if pos != len(data):
        raise CorruptRecordError(f"{len(data) - pos} bytes remain after the last of {count} records",
                                 position=pos)
    return rows


def _decode_headers(data: bytes, pos: int, record_end: int) -> tuple[list[tuple[str, bytes | None]], int]:
    """Headers of one record; rare enough that plain varint calls are fine.

    Header keys are decoded like Java's `new String(bytes, UTF_8)`: invalid
    UTF-8 becomes U+FFFD instead of failing, because Kafka accepts such keys.
    """
    count, pos = decode_varint(data, pos)
    if count < 0:
        raise CorruptRecordError(f"negative header count {count}", position=pos)
    if count and count > record_end - pos:
        raise CorruptRecordError(f"header count {count} exceeds the {max(record_end - pos, 0)} bytes left",
                                 position=pos)
    headers = []
    for _ in range(count):
        size, pos = decode_varint(data, pos)
        if size < 0:
            raise CorruptRecordError(f"negative header key length {size}", position=pos)
        name = data[pos:(pos := pos + size)].decode("utf-8", "replace")
        size, pos = decode_varint(data, pos)
        if size >= 0:
            value = data[pos:(pos := pos + size)]
        elif size == -1:
            value = None
        else:
            raise CorruptRecordError(f"negative header value length {size}", position=pos)
        headers.append((name, value))
    return headers, pos


# --- record encoding ------------------------------------------------------------------------

_ZERO = b"\x00"
#: attributes byte (always 0) + timestampDelta, for deltas 0 <= d < SMALL_LIMIT
_ATTRIBUTES_AND_DELTA = tuple(_ZERO + encoded for encoded in VARINT_TABLE)


def _encode_headers(headers) -> bytes:
    """Header block of one record: count, then (key, value) pairs; rare enough for plain calls."""
    parts = [encode_varint(len(headers))]
    for name, value in headers:
        raw = name.encode("utf-8") if isinstance(name, str) else bytes(name)
        parts.append(encode_varint(len(raw)))
        parts.append(raw)
        if value is None:
            parts.append(NULL_LENGTH)
        else:
            parts.append(encode_varint(len(value)))
            parts.append(value)
    return b"".join(parts)


def _lookup(table, indexes: Sequence) -> Sequence:
    """[table[i] for i in indexes] in one C call: itemgetter with many indexes beats map or a loop."""
    if len(indexes) == 1:
        return (table[indexes[0]],)  # itemgetter of one index returns a bare item
    return itemgetter(*indexes)(table)


def _length_prefixed(items: Sequence) -> tuple[Sequence, Sequence]:
    """(length varints, payloads) for a column of keys or values; None gets length -1.

    The fast path is C-level; a None (TypeError from len) or a length beyond
    the table (IndexError) sends the column to the general path.
    """
    try:
        return _lookup(VARINT_TABLE, list(map(len, items))), items
    except (TypeError, IndexError):
        prefixes = [NULL_LENGTH if item is None else encode_varint(len(item)) for item in items]
        return prefixes, [b"" if item is None else item for item in items]


def _timestamp_prefixes(timestamps: Sequence[int], base_timestamp: int) -> Sequence[bytes]:
    """attributes byte (always 0) + timestampDelta per record.

    Producers stamp a batch within a few milliseconds, so there are few
    distinct timestamps: encoding each once and looking them up beats
    subtracting and range-checking per record.
    """
    distinct = set(timestamps)
    if len(distinct) <= 64 or len(distinct) * 4 <= len(timestamps):
        table = {ts: _ZERO + encode_varlong(ts - base_timestamp) for ts in distinct}
        return _lookup(table, timestamps)
    deltas = list(map(sub, timestamps, repeat(base_timestamp)))
    if min(deltas) >= 0 and max(deltas) < SMALL_LIMIT:
        return _lookup(_ATTRIBUTES_AND_DELTA, deltas)
    return [_ZERO + encode_varlong(delta) for delta in deltas]


def _encode_records(keys: Sequence, values: Sequence, headers: Sequence, timestamps: Sequence[int],
                    base_timestamp: int) -> bytes:
    """The uncompressed records region, built column by column with C-level calls.

    offsetDelta is the record's index, timestampDelta is against `base_timestamp`.
    """
    n = len(keys)
    prefixes = _timestamp_prefixes(timestamps, base_timestamp)
    if n <= SMALL_LIMIT:
        offset_deltas = VARINT_TABLE[:n]
    else:
        offset_deltas = chain(VARINT_TABLE, map(encode_varint, range(SMALL_LIMIT, n)))
    key_lengths, keys = _length_prefixed(keys)
    value_lengths, values = _length_prefixed(values)
    if any(headers):
        header_blocks = [_encode_headers(h) if h else _ZERO for h in headers]
    else:
        header_blocks = repeat(_ZERO)
    bodies = list(map(b"".join, zip(prefixes, offset_deltas, key_lengths, keys,
                                    value_lengths, values, header_blocks)))
    sizes, _ = _length_prefixed(bodies)
    parts = bodies * 2  # then interleave [size, body, size, body, ...] by slice assignment
    parts[::2] = sizes
    parts[1::2] = bodies
    return b"".join(parts)


def _attributes(compression: int, timestamp_type: int, is_transactional: bool, is_control: bool) -> int:
    return (int(compression) | (TIMESTAMP_TYPE_MASK if timestamp_type else 0)
            | (TRANSACTIONAL_MASK if is_transactional else 0) | (CONTROL_MASK if is_control else 0))


def _assemble(payload: bytes, count: int, *, base_offset: int, partition_leader_epoch: int, attributes: int,
              base_timestamp: int, max_timestamp: int, producer_id: int, producer_epoch: int,
              base_sequence: int) -> bytes:
    """Header + records; the CRC covers attributes through the last record byte."""
    try:
        covered = _CRC_COVERED_HEADER.pack(attributes, count - 1, base_timestamp, max_timestamp,
                                           producer_id, producer_epoch, base_sequence, count)
        frame = _FRAME.pack(base_offset, MIN_BATCH_LENGTH + len(payload), partition_leader_epoch, MAGIC)
    except struct.error as exc:
        raise ValueError(f"batch header field out of range: {exc}") from None
    crc = crc32c(payload, crc32c(covered))
    return b"".join((frame, _U32.pack(crc), covered, payload))


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def build_batch(records: Sequence[tuple], *, base_offset: int = 0, producer_id: int = NO_PRODUCER_ID,
                producer_epoch: int = NO_PRODUCER_EPOCH, base_sequence: int = NO_SEQUENCE,
                is_transactional: bool = False, compression: Compression | int = Compression.NONE,
                timestamp_type: TimestampType | int = TimestampType.CREATE_TIME,
                partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
                log_append_time: int | None = None) -> bytes:
    """One batch from (key, value, headers, timestamp) tuples, laid out as a Kafka producer does.

    baseTimestamp is the first record's timestamp and maxTimestamp the
    largest; a None timestamp means "now". With LOG_APPEND_TIME,
    `log_append_time` (default: the largest record timestamp) becomes
    maxTimestamp, which readers then report for every record.
    """
    if not records:
        raise ValueError("a batch needs at least one record")
    keys, values, headers, timestamps = zip(*records)
    return _build_from_columns(keys, values, headers, timestamps, base_offset=base_offset, producer_id=producer_id,
                               producer_epoch=producer_epoch, base_sequence=base_sequence,
                               is_transactional=is_transactional, compression=compression,
                               timestamp_type=timestamp_type, partition_leader_epoch=partition_leader_epoch,
                               log_append_time=log_append_time)


def _build_from_columns(keys: Sequence, values: Sequence, headers: Sequence, timestamps: Sequence, *,
                        base_offset: int, producer_id: int, producer_epoch: int, base_sequence: int,
                        is_transactional: bool, compression: Compression | int, timestamp_type: TimestampType | int,
                        partition_leader_epoch: int, log_append_time: int | None) -> bytes:
    """build_batch of records given column by column (at least one)."""
    try:
        max_timestamp = max(timestamps)
    except TypeError:  # None among ints
        max_timestamp = None
    if max_timestamp is None:
        now = _now_ms()
        timestamps = [now if ts is None else ts for ts in timestamps]
        max_timestamp = max(timestamps)
    base_timestamp = timestamps[0]
    if timestamp_type and log_append_time is not None:
        max_timestamp = log_append_time
    payload = _encode_records(keys, values, headers, timestamps, base_timestamp)
    if compression:
        payload = compress(compression, payload)
    return _assemble(payload, len(keys), base_offset=base_offset, partition_leader_epoch=partition_leader_epoch,
                     attributes=_attributes(compression, timestamp_type, is_transactional, False),
                     base_timestamp=base_timestamp, max_timestamp=max_timestamp, producer_id=producer_id,
                     producer_epoch=producer_epoch, base_sequence=base_sequence)


def build_control_batch(control_type: ControlType | int, *, producer_id: int, producer_epoch: int,
                        coordinator_epoch: int = 0, timestamp: int, base_offset: int = 0,
                        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH) -> bytes:
    """The 78-byte EndTransactionMarker batch a coordinator has the leader write (docs/kafka-formats.md §2)."""
    try:
        key = _CONTROL_KEY.pack(0, int(control_type))
        value = _CONTROL_VALUE.pack(0, coordinator_epoch)
    except struct.error as exc:
        raise ValueError(f"control record field out of range: {exc}") from None
    payload = _encode_records((key,), (value,), (None,), (timestamp,), timestamp)
    return _assemble(payload, 1, base_offset=base_offset, partition_leader_epoch=partition_leader_epoch,
                     attributes=TRANSACTIONAL_MASK | CONTROL_MASK, base_timestamp=timestamp,
                     max_timestamp=timestamp, producer_id=producer_id, producer_epoch=producer_epoch,
                     base_sequence=NO_SEQUENCE)


#: _VARINT_SIZE[n] == len(encode_varint(n)) == len(encode_varlong(n)) for 0 <= n < 2**16: a
#: 64 KB bytes object, so a 1 MiB producer batch (~9,000 records) never leaves the table.
_VARINT_SIZE = bytes((n.bit_length() + 7) // 7 for n in range(1 << 16))


def _record_size(offset_delta: int, timestamp_delta: int, key, value, headers) -> int:
    """Encoded size of one record including its length varint, without encoding it."""
    body = 1 + size_of_varlong(timestamp_delta) + size_of_varint(offset_delta)
    body += 1 if key is None else size_of_varint(len(key)) + len(key)
    body += 1 if value is None else size_of_varint(len(value)) + len(value)
    if headers:
        body += size_of_varint(len(headers))
        for name, header_value in headers:
            raw = len(name.encode("utf-8")) if isinstance(name, str) else len(name)
            body += size_of_varint(raw) + raw
            body += 1 if header_value is None else size_of_varint(len(header_value)) + len(header_value)
    else:
        body += 1
    return size_of_varint(body) + body


class BatchBuilder:
    """Accumulates records for one batch up to `max_bytes`, like a producer's `batch.size`.

    The estimate is the exact uncompressed size, so for a compressed batch it
    is an upper bound; as in the Java producer the first record is always
    accepted, so an oversized record still makes a batch of its own.
    """

    def __init__(self, *, max_bytes: int = 16384, base_offset: int = 0, producer_id: int = NO_PRODUCER_ID,
                 producer_epoch: int = NO_PRODUCER_EPOCH, base_sequence: int = NO_SEQUENCE,
                 is_transactional: bool = False, compression: Compression | int = Compression.NONE,
                 timestamp_type: TimestampType | int = TimestampType.CREATE_TIME,
                 partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
                 log_append_time: int | None = None):
        self.max_bytes = max_bytes
        self._options = dict(base_offset=base_offset, producer_id=producer_id, producer_epoch=producer_epoch,
                             base_sequence=base_sequence, is_transactional=is_transactional,
                             compression=compression, timestamp_type=timestamp_type,
                             partition_leader_epoch=partition_leader_epoch, log_append_time=log_append_time)
        # The records column by column: build_batch wants columns anyway, and a tuple per
        # record was a garbage-collected object per send, which made the cyclic GC a
        # quarter of the producer's CPU time.
        self._keys: list[bytes | None] = []
        self._values: list[bytes | None] = []
        self._headers: list[list | None] = []
        self._timestamps: list[int] = []
        #: The batch's exact uncompressed size so far. A plain attribute, not a property:
        #: the producer reads it after every send.
        self.estimated_size = HEADER_SIZE
        self._base_timestamp = 0

    @property
    def record_count(self) -> int:
        return len(self._keys)

    def append(self, key: bytes | None, value: bytes | None, headers: list | None = None,
               timestamp: int | None = None) -> bool:
        """Add a record if it fits; False (and nothing changed) when it would exceed max_bytes.

        This runs once per `Producer.send`, so the common record (no headers, non-null key
        and value, small deltas) is sized in line from a table of varint sizes; the five
        varint-size calls of `_record_size` used to cost more than the rest of a send.
        """
        if timestamp is None:
            timestamp = _now_ms()
        count = len(self._keys)
        if not count:
            self._base_timestamp = timestamp
        delta = timestamp - self._base_timestamp
        size = 0
        if not headers and delta >= 0:
            sizes = _VARINT_SIZE
            try:  # attributes + timestampDelta + offsetDelta + key + value + headerCount(0)
                k, v = len(key), len(value)
                body = 2 + sizes[delta] + sizes[count] + sizes[k] + k + sizes[v] + v
                size = sizes[body] + body
            except (TypeError, IndexError):  # a null key or value, or a number past the table
                size = 0
        if not size:
            size = _record_size(count, delta, key, value, headers)
        if count and self.estimated_size + size > self.max_bytes:
            return False
        self._keys.append(key)
        self._values.append(value)
        self._headers.append(headers)
        self._timestamps.append(timestamp)
        self.estimated_size += size
        return True

    def build(self, **overrides) -> bytes:
        """The batch; `overrides` replace constructor options decided only at send time (e.g. the
        producer's base sequence, which a failed earlier batch must not consume)."""
        if not self._keys:
            raise ValueError("a batch needs at least one record")
        return _build_from_columns(self._keys, self._values, self._headers, self._timestamps,
                                   **{**self._options, **overrides})
