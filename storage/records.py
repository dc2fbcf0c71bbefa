"""RecordBatch v2 (magic 2): the only batch format Kafka 4.x writes (docs/kafka-formats.md §1, §2).

Every byte that reaches a segment file passes through this module, so it has
two jobs that pull in different directions:

* be exactly Kafka's format - a batch written here must be read by Kafka and
  any Kafka client, and every batch Kafka accepts must be read here with the
  same meaning (CRC-32C scope, ZigZag varints, LOG_APPEND_TIME semantics,
  sequence wrap-around, the strict record-size checks of the Java reader);
* be fast - it is the hot path of producing and consuming, and per-record
  Python work was the bottleneck. So every per-record loop (header parse and
  CRC, decompression, record decoding into tuples or Arrow columns, the framing
  walk of the append path, batch encoding) runs in the Rust extension
  `storage._native` (storage/native/src/, safe Rust; storage/_native.pyi is its
  typed interface); this module keeps the orchestration, and turns the
  extension's errors into the typed errors of storage.errors naming the file and
  the byte through storage.codec_errors. storage/records_reference.py is
  the same codec in Python: the readable reference and the test oracle, never a
  runtime fallback.

`RecordBatch.parse` checks the header and CRC only; records are decoded on
demand by `records()`, because most readers of the log (recovery, index
rebuilds, fetches that forward bytes) never need them.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator, Sequence
from enum import IntEnum
from typing import TYPE_CHECKING, NamedTuple

import storage._native as _native
from storage.codec_errors import CodecError, corrupt_record_error
from storage.compression import Compression
from storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
)
from storage.sequence import inc_seq
from storage.varint import INT64_MAX, INT64_MIN

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

crc32c = _native.crc32c  # CRC-32C (Castagnoli), `crc32c(data, crc=0)`, as the crc32c package spells it

__all__ = [
    "BatchBuilder",
    "BatchHeader",
    "COMPRESSION_MASK",
    "CONTROL_BATCH_SIZE",
    "CONTROL_MASK",
    "Compression",
    "ControlType",
    "DELETE_HORIZON_MASK",
    "EncodedBatch",
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
    "SendFastPath",
    "TIMESTAMP_TYPE_MASK",
    "TRANSACTIONAL_MASK",
    "TimestampType",
    "build_batch",
    "build_control_batch",
    "encode_batches",
    "stamp_batch",
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

_HEADER = struct.Struct(">qiibIhiqqqhii")  # all 61 header bytes
_CRC_COVERED_HEADER = struct.Struct(">hiqqqhii")  # bytes 21..61
_BASE_OFFSET = struct.Struct(">q")  # bytes 0..8
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
_CONTROL_TYPE_NAMES = {
    0: "ABORT",
    1: "COMMIT",
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VERSION",
    6: "KRAFT_VOTERS",
}


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


class RecordBatch(_native.BatchHeader):
    """One magic-2 batch inside a buffer, with its header decoded and its CRC checked.

    A RecordBatch is its header: the thirteen header fields (base_offset,
    batch_length, partition_leader_epoch, magic, crc, attributes,
    last_offset_delta, base_timestamp, max_timestamp, producer_id,
    producer_epoch, base_sequence, records_count) are the read-only attributes
    of its native base class, `_native.BatchHeader`, set once when `parse`
    constructs it; everything derived is a property, so parsing stays one
    native call plus a CRC, and the record decoders take the batch itself.
    The records are only decoded by `records()`. `position` is where the batch
    starts in its file (`origin` + its place in the buffer), so a batch read from
    a chunk of a segment, and every error it raises, names its real byte.
    (storage.records.BatchHeader is the lighter header of the frame walks: no
    extent or CRC check, no buffer.)
    """

    __slots__ = ("_buf", "_at", "_bytes", "path", "position", "size")
    _buf: ReadableBuffer
    _at: int  # where the batch starts in _buf
    _bytes: bytes | None
    path: str | None
    position: int
    size: int  # the whole batch, log overhead included

    @classmethod
    def parse(
        cls, buf, position: int = 0, *, path: str | None = None, verify_crc: bool = True, origin: int = 0
    ) -> RecordBatch:
        """Check framing, magic and CRC of the batch at `buf[position]`; CorruptRecordError otherwise.

        `origin` is the file position of `buf[0]` (a reader's chunk of a segment): the
        batch's `position` and every error name `origin + position`.
        """
        if position < 0:
            raise CorruptRecordError(
                f"need {HEADER_SIZE} bytes for a batch header, 0 available", path=path, position=origin + position
            )
        try:
            batch = cls(buf, position, verify_crc)  # the native header parse
        except CodecError as exc:
            raise corrupt_record_error(exc, path=path, position=origin + position) from None
        batch._buf = buf
        batch._at = position
        batch._bytes = None
        batch.path = path
        batch.position = origin + position
        batch.size = batch.batch_length + LOG_OVERHEAD
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
        return crc32c(memoryview(self._buf)[at + CRC_COVERED_START : at + self.size]) == self.crc

    @property
    def buffer(self) -> bytes:
        """Exactly this batch's bytes (copied once, so no view pins an mmap)."""
        if self._bytes is None:
            buf = self._buf
            if type(buf) is bytes and self._at == 0 and self.size == len(buf):
                self._bytes = buf
            else:
                self._bytes = bytes(memoryview(buf)[self._at : self._at + self.size])
        return self._bytes

    def __repr__(self) -> str:
        return (
            f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
            f"count={self.records_count}, size={self.size}, producer_id={self.producer_id}, "
            f"epoch={self.producer_epoch}, base_sequence={self.base_sequence}, "
            f"attributes={self.attributes:#x}, position={self.position})"
        )

    # -- records

    def _corrupt(self, detail: str) -> CorruptRecordError:
        return CorruptRecordError(
            f"batch with base offset {self.base_offset}: {detail}", path=self.path, position=self.position
        )

    def _codec_error(self, exc: CodecError) -> CorruptRecordError:
        """The error of a native call on this batch's records region, as this batch's CorruptRecordError."""
        return corrupt_record_error(
            exc,
            context=f"batch with base offset {self.base_offset}",
            records_count=self.records_count,
            path=self.path,
            position=self.position,
        )

    def records(self) -> list[Record]:
        """Decompress and decode every record, with the Java reader's strictness."""
        return self._decoded(Record)

    def record_tuples(self) -> list[tuple]:
        """`records()` as plain tuples in Record's field order, for readers that regroup them by column.

        Skipping the Record wrapper saves a copy of every tuple, a sizeable share of
        decoding when the rows are only transposed into columns afterwards.
        """
        return self._decoded(None)

    def _has_record_bytes(self) -> bool:
        """Whether the native decoders have a records region to decode; raises for what they must not see.

        The decoders take everything else from the header (region, codec, count, the base
        offset, timestamp and sequence, LOG_APPEND_TIME's rule).
        """
        count = self.records_count
        if count < 0:
            raise InvalidRecordError(
                f"negative record count {count} in batch with base offset {self.base_offset} at byte {self.position}"
            )
        if count == 0 and self.size == HEADER_SIZE:
            return False  # emptied by compaction: only the header survives
        self.compression  # noqa: B018 - UnsupportedCompressionTypeError for codes 5-7
        return True

    def _decoded(self, cls: type | None) -> list:
        if not self._has_record_bytes():
            return []
        try:
            return _native.decode_records(self._buf, self._at, self, cls)
        except CodecError as exc:
            raise self._codec_error(exc) from None

    def check_records(self) -> None:
        """Decode every record as every reader does, keeping none; raises where a reader would.

        `txlog verify` runs this on each batch, so it finds exactly the batches readers refuse
        (a valid CRC over an impossible record count or key length) with the readers' decoder.
        """
        self._decoded(None)

    def consumer_records(self, cls: type, topic: str, partition: int, start: int, end: int) -> list:
        """The records at offsets in [start, end) as `cls` tuples of a Consumer's twelve fields.

        cls is txlog.consumer_record.ConsumerRecord (passed in: storage cannot import txlog):
        (topic, partition, offset, timestamp, timestamp_type, key, value, headers,
        producer_id, producer_epoch, sequence, is_transactional), built in one native pass
        with no intermediate tuple per record.
        """
        if not self._has_record_bytes():
            return []
        try:
            return _native.decode_consumer_records(
                self._buf,
                self._at,
                self,
                cls=cls,
                topic=topic,
                partition=partition,
                timestamp_type=self.timestamp_type,
                start_offset=start,
                end_offset=end,
            )
        except CodecError as exc:
            raise self._codec_error(exc) from None

    def add_columns(self, builder: _native.ColumnBuilder, start: int = INT64_MIN, end: int = INT64_MAX) -> int:
        """Decode the records at offsets in [start, end) into an Arrow column builder (see
        storage.arrow_records); returns the rows added. A corrupt batch adds none."""
        if not self._has_record_bytes():
            return 0
        try:
            return builder.add(self._buf, self._at, self, start_offset=start, end_offset=end)
        except CodecError as exc:
            raise self._codec_error(exc) from None

    @staticmethod
    def add_columns_of(
        builder: _native.ColumnBuilder,
        batches: Sequence[RecordBatch],
        numbered: list[RecordBatch],
        start: int = INT64_MIN,
        end: int = INT64_MAX,
    ) -> int:
        """`add_columns` for many batches in one native call (decoded without the GIL once
        they are large enough to be worth it); returns the rows added. The batches the builder
        numbered are appended to `numbered`, in order. A corrupt batch raises its
        CorruptRecordError; the ones before it stay added (and numbered)."""
        decoded = [batch for batch in batches if batch._has_record_bytes()]
        before = builder.batches
        try:
            added = builder.add_batches([(b._buf, b._at, b) for b in decoded], start_offset=start, end_offset=end)
        except CodecError as exc:
            done = builder.batches - before
            numbered.extend(decoded[:done])
            raise decoded[done]._codec_error(exc) from None
        numbered.extend(decoded)
        return added

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

    def validate_framing(self, trusted: bool = False) -> int:
        """Cheap structural check for the append path; returns the batch's true maxTimestamp.

        It walks the record length varints, never the record bodies, and jumps over
        runs of equal-length records in C (a slice with the record size as its step
        compares every run's length prefixes at once), so a producer's batch of
        same-sized records costs a few slices instead of a Python step per record. The
        same slices yield each record's timestamp delta, which is how the leader learns
        the real maximum timestamp (docs/kafka-formats.md §1.2) without decoding records.
        Compressed batches get the header rules and the inflation limit only (decoding their
        records would cost more than the write it guards, so their header maxTimestamp is
        trusted): see `_check_inflation`. `trusted` (this process's encoder built the bytes)
        skips inflating a stream its encoder's output shows to be within the limit.
        """
        count = self.records_count
        if count <= 0 or count != self.last_offset_delta + 1:
            raise InvalidRecordError(
                f"batch at byte {self.position}: record count {count} does not match last offset delta "
                f"{self.last_offset_delta} (must be lastOffsetDelta + 1 > 0)"
            )
        if self.attributes & COMPRESSION_MASK:
            self._check_inflation(trusted)
            return self.max_timestamp
        try:
            seen, max_delta = _native.walk_records(self._buf, self._at + HEADER_SIZE, self._at + self.size)
        except CodecError as exc:
            raise self._codec_error(exc) from None
        if seen != count:
            raise self._corrupt(f"batch holds {seen} records but its header says {count}")
        if self.attributes & TIMESTAMP_TYPE_MASK:
            return self.max_timestamp  # LOG_APPEND_TIME: the header is the only timestamp
        return self.base_timestamp + max_delta

    def _check_inflation(self, trusted: bool) -> None:
        """Refuse a compressed batch that inflates past what a batch of its size may hold
        (docs/kafka-formats.md §1.4): every reader would refuse it, so the log must not take it.

        The stream is inflated block by block and thrown away (memory stays at a codec block),
        which also refuses a stream that does not inflate at all, as Kafka's LogValidator does
        by reading every record of a compressed batch. Trusted bytes (this process's encoder)
        are not inflated when the codec cannot pass the limit at their size, or when their zstd
        frame's content size is within it (a size believed of this process's encoder only).
        The error is RecordTooLargeError, Kafka's MESSAGE_TOO_LARGE: the records may be valid,
        just more than a batch of this size may carry, so a producer can resend them in
        smaller batches.
        """
        codec = self.compression  # UnsupportedCompressionTypeError for codes 5-7
        region = memoryview(self._buf)[self._at + HEADER_SIZE : self._at + self.size]
        if trusted and _native.own_stream_within_limit(codec, region):
            return
        try:
            _native.inflated_size(codec, region)
        except CodecError as exc:
            if exc.args[0] == "too_large":
                raise RecordTooLargeError(
                    f"batch at byte {self.position}: {exc.args[1]} (docs/kafka-formats.md §1.4)"
                ) from None
            raise self._codec_error(exc) from None

    def retained(self, keep: bytes, delete_horizon: int | None = None) -> bytes:
        """This batch rebuilt with only the records whose byte in `keep` is non-zero, as Kafka's
        cleaner rebuilds a filtered batch (MemoryRecords.filterTo; docs/kafka-formats.md §11).

        `keep` has one byte per record, in order. Offsets stay: the base offset, lastOffsetDelta,
        producer id, epoch, base sequence and leader epoch are this batch's, each kept record
        keeps its offset delta, timestamp, key, value and headers, and the records are
        compressed with this batch's codec. A `delete_horizon` (KIP-534) sets the attribute bit
        and becomes the base timestamp; without one the bit is cleared. With no record kept the
        result is Kafka's empty header (writeEmptyHeader): no records, no codec, both
        timestamps this batch's maxTimestamp. Natively encoded (storage/native/src/retain.rs);
        CorruptRecordError for records readers would refuse, ValueError for a mask of the
        wrong length.
        """
        if any(keep):
            self.compression  # noqa: B018 - UnsupportedCompressionTypeError for codes 5-7, as the decoders raise
        try:
            return _native.retain_records(self._buf, self._at, keep, delete_horizon)
        except OverflowError as exc:
            raise ValueError(f"delete horizon out of range: {exc}") from None
        except CodecError as exc:
            raise self._codec_error(exc) from None

    def with_offset(
        self, base_offset: int, partition_leader_epoch: int | None = None, max_timestamp: int | None = None
    ) -> bytes:
        """A copy with baseOffset (and leader epoch) rewritten; neither is under the CRC.

        Giving a `max_timestamp` that differs from the header's also rewrites that field
        and the CRC, as Kafka's leader does for a batch that understates it.
        """
        out = bytearray(self.buffer)
        self.stamp_offset_into(out, 0, base_offset, partition_leader_epoch, max_timestamp)
        return bytes(out)

    def stamp_offset_into(
        self,
        out: bytearray,
        at: int,
        base_offset: int,
        partition_leader_epoch: int | None = None,
        max_timestamp: int | None = None,
    ) -> None:
        """`with_offset`'s rewrite made in place, on a copy of this batch's bytes at out[at:]
        (an append of several batches copies them all once, not each batch twice). The rule is
        the native one the quiet append stamps with too (storage/native/src/codec.rs `stamp_offset`:
        the CRC is recomputed only when maxTimestamp changes)."""
        _native.stamp_offset(out, at, base_offset, partition_leader_epoch, max_timestamp)


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
            raise CorruptRecordError(
                f"need {HEADER_SIZE} bytes for a batch header, {max(len(buf) - position, 0)} available",
                path=path,
                position=origin + position,
            )
        fields = _HEADER.unpack_from(buf, position)
        if fields[3] != MAGIC:
            raise CorruptRecordError(
                f"unsupported magic {fields[3]} (only {MAGIC} is supported)", path=path, position=origin + position
            )
        if fields[1] < MIN_BATCH_LENGTH:
            raise CorruptRecordError(
                f"batch length {fields[1]} is below the minimum {MIN_BATCH_LENGTH}",
                path=path,
                position=origin + position,
            )
        return _new_tuple(cls, (origin + position, *fields))


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


# --- record encoding ------------------------------------------------------------------------


def _attributes(compression: int, timestamp_type: int, is_transactional: bool, is_control: bool) -> int:
    return (
        int(compression)
        | (TIMESTAMP_TYPE_MASK if timestamp_type else 0)
        | (TRANSACTIONAL_MASK if is_transactional else 0)
        | (CONTROL_MASK if is_control else 0)
    )


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def build_batch(
    records: Sequence[tuple],
    *,
    base_offset: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    compression: Compression | int = Compression.NONE,
    timestamp_type: TimestampType | int = TimestampType.CREATE_TIME,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    log_append_time: int | None = None,
) -> bytes:
    """One batch from (key, value, headers, timestamp) tuples, laid out as a Kafka producer does.

    baseTimestamp is the first record's timestamp and maxTimestamp the
    largest; a None timestamp means "now". With LOG_APPEND_TIME,
    `log_append_time` (default: the largest record timestamp) becomes
    maxTimestamp, which readers then report for every record.
    """
    if not records:
        raise ValueError("a batch needs at least one record")
    keys, values, headers, timestamps = zip(*records, strict=True)
    return _build_from_columns(
        keys,
        values,
        headers,
        timestamps,
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        compression=compression,
        timestamp_type=timestamp_type,
        partition_leader_epoch=partition_leader_epoch,
        log_append_time=log_append_time,
    )


def _build_from_columns(
    keys: Sequence,
    values: Sequence,
    headers: Sequence,
    timestamps: Sequence,
    *,
    base_offset: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    is_transactional: bool,
    compression: Compression | int,
    timestamp_type: TimestampType | int,
    partition_leader_epoch: int,
    log_append_time: int | None,
) -> bytes:
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
    if compression not in Compression._value2member_map_:
        raise UnsupportedCompressionTypeError(f"unknown compression type {compression}")
    return _encode(
        keys,
        values,
        headers,
        timestamps,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=_attributes(compression, timestamp_type, is_transactional, False),
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )


def _encode(keys: Sequence, values: Sequence, headers: Sequence, timestamps: Sequence[int], **fields: int) -> bytes:
    """One batch by the native encoder (records region, compression, header, CRC in one pass)."""
    try:
        return _native.encode_batch(keys, values, headers, timestamps, **fields)
    except OverflowError as exc:
        raise ValueError(f"batch header field out of range: {exc}") from None


def build_control_batch(
    control_type: ControlType | int,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int = 0,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """The 78-byte EndTransactionMarker batch a coordinator has the leader write (docs/kafka-formats.md §2)."""
    try:
        key = _CONTROL_KEY.pack(0, int(control_type))
        value = _CONTROL_VALUE.pack(0, coordinator_epoch)
    except struct.error as exc:
        raise ValueError(f"control record field out of range: {exc}") from None
    return _encode(
        (key,),
        (value,),
        (None,),
        (timestamp,),
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=TRANSACTIONAL_MASK | CONTROL_MASK,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
    )


def with_base_offset(batch: bytes, base_offset: int) -> bytes:
    """A whole batch's bytes moved to `base_offset`: the baseOffset field comes before the part the CRC
    covers (attributes onward), so nothing else changes. A transaction's markers differ only there from
    one partition to the next: their end builds one and stamps it for each partition."""
    return _BASE_OFFSET.pack(base_offset) + batch[_BASE_OFFSET.size :]


#: Accumulates records for one batch up to `max_bytes`, like a producer's `batch.size`.
#:
#: Native (storage/native/src/batch_builder.rs): each `append` / `try_append` is one C call
#: that sizes the record and encodes it into the batch's records region at once, so a send
#: does no Python work per record and `build(**overrides)` is a header, a CRC and (for a
#: compressed batch) one compression. `estimated_size` is the exact uncompressed size so far,
#: header included (an upper bound for a compressed batch); as in the Java producer a batch's
#: first record is always accepted, so an oversized record still makes a batch of its own -
#: the split rule `encode_batches` shares.
#:
#: API: keyword options max_bytes=16384, base_offset, producer_id, producer_epoch,
#: base_sequence, is_transactional, compression, timestamp_type, partition_leader_epoch,
#: log_append_time (build's overrides take the same names except max_bytes);
#: `try_append(key, value, headers=None, timestamp=None) -> int` (the record's index, -1 when
#: closed or full; atomic under the GIL), `append(...) -> bool`, `close()` / `closed`,
#: `record_count`, `estimated_size`, `max_bytes`, `max_timestamp`, `timestamp_at(i)`,
#: `key_size_at(i)`, `value_size_at(i)` (-1 for null), `metadata_at(i)` (the three in one call),
#: `stamp_build(producer_id, producer_epoch, base_sequence)` (build with the producer's stamp,
#: positional: no keyword dict on the per-batch path). Keys and values are bytes, bytearray,
#: memoryview, str (UTF-8) or None; headers None or (str | bytes name, value) pairs; a None
#: timestamp means now (ms). A wrong type is a TypeError, an unknown compression an
#: UnsupportedCompressionTypeError, a header field out of range a ValueError; an append that
#: raises changes nothing. One class, not a Python subclass: a Python `__new__` would cost
#: more than the native constructor itself, once per batch.
BatchBuilder = _native.RecordBatchBuilder

#: The producer's `send` of the usual record in one native call, deferring every other call
#: to the Python `send` it is given (txlog.clients.producer.Producer installs it; the class
#: docstring in storage/native/src/bindings/builder.rs says what it reads and when it defers).
SendFastPath = _native.SendFastPath


# --- the producer's bulk path: whole batches from columns, stamped at send time ----------------


class EncodedBatch(NamedTuple):
    """One batch built by `encode_batches`, producer fields still -1 until `stamp_batch`.

    `data` is a bytearray so the sender can stamp it in place without a copy.
    """

    data: bytearray
    record_count: int
    max_timestamp: int


_ONE_ITEM = (str, bytes, bytearray, memoryview)


def encode_batches(
    values: Sequence,
    keys: Sequence | None = None,
    headers: Sequence | None = None,
    timestamps: Sequence | None = None,
    *,
    max_bytes: int,
    compression: Compression | int = Compression.NONE,
    is_transactional: bool = False,
    now_ms: int | None = None,
    buffers: list[bytearray] | None = None,
) -> list[EncodedBatch]:
    """Whole batches from record columns, in one native pass (no Python work per record).

    values/keys items are bytes, bytearray, memoryview, str (UTF-8) or None; headers items
    are None or (name, value) pairs; timestamps are ints, None items (or no column) meaning
    `now_ms` (default: now). Records are split into batches exactly where BatchBuilder
    (max_bytes=max_bytes) would split them: the exact uncompressed size may not pass
    max_bytes, but a batch's first record is always accepted. Base offset 0, leader epoch,
    producer id, epoch and base sequence -1 (see stamp_batch), CREATE_TIME timestamps.
    TypeError names the index of an item of the wrong type; no values, no batches.

    `buffers` (the producer's buffer pool): uncompressed batches are written into bytearrays
    popped from its end, those nothing else refers to (one still referenced is dropped from it,
    never written), before new ones are allocated.
    """
    if compression not in Compression._value2member_map_:
        raise UnsupportedCompressionTypeError(f"unknown compression type {compression}")
    for name, column in (("values", values), ("keys", keys), ("headers", headers), ("timestamps", timestamps)):
        if isinstance(column, _ONE_ITEM):  # iterable, but as characters or ints: surely one record meant as many
            raise TypeError(f"{name} must be a sequence with an item per record, not a single {type(column).__name__}")
    try:
        return _native.encode_batches(
            values,
            keys,
            headers,
            timestamps,
            max_bytes=max(-INT64_MAX, min(max_bytes, INT64_MAX)),
            codec=int(compression),
            is_transactional=bool(is_transactional),
            now_ms=_now_ms() if now_ms is None else now_ms,
            cls=EncodedBatch,
            buffers=buffers,
        )
    except OverflowError as exc:
        raise ValueError(f"batch field out of range: {exc}") from None


def stamp_batch(data: bytearray, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
    """Set the producer id, epoch and base sequence of the one batch in `data` in place (a
    bytearray, or a writable memoryview of one), natively. The sender stamps at drain time,
    so a batch built before a KIP-360 epoch bump is sent with the new epoch.

    The CRC is updated for the change, not recomputed: constant time whatever the batch size,
    and a batch damaged since it was built keeps a CRC that does not match (a stamp never
    makes damaged bytes look good). CorruptRecordError if the header is not a magic-2 batch
    header; ValueError if `data` holds more or less than that one batch."""
    try:
        _native.stamp_batch(data, producer_id, producer_epoch, base_sequence)
    except OverflowError as exc:
        raise ValueError(f"producer field out of range: {exc}") from None
    except CodecError as exc:
        raise corrupt_record_error(exc, context="cannot stamp the batch", position=0) from None
