"""The typed interface of `storage._native`, txlog's record codec in Rust (storage/native/src/bindings/).

Private to storage: storage.records, storage.compression, storage.arrow_records, storage.murmur2,
storage.console_format and storage.codec_errors wrap it. `python3 -m mypy.stubtest storage._native` checks this file
against the built module (.ci/run).
"""

from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar, Literal, Self, TypeAlias, TypedDict, TypeVar, final, overload

from _typeshed import ReadableBuffer, WriteableBuffer
from typing_extensions import Unpack, disjoint_base

from storage.producer_state import BatchMetadata

__all__ = [
    "BatchHeader",
    "CodecError",
    "ColumnBuffer",
    "ColumnBuilder",
    "ConsoleFormatter",
    "ProducerStateEntry",
    "RecordBatchBuilder",
    "RowFormatter",
    "SendFastPath",
    "check_batch",
    "check_sequence",
    "compress",
    "crc32c",
    "decode_consumer_records",
    "decode_high_watermark",
    "decode_records",
    "decompress",
    "dump_record_lines",
    "encode_batch",
    "encode_batches",
    "encode_high_watermark",
    "inflated_size",
    "inflation_limit",
    "murmur2_partitions",
    "own_stream_within_limit",
    "quiet_append",
    "retain_records",
    "stamp_batch",
    "stamp_offset",
    "start_writeback",
    "table_lines",
    "table_widths_of",
    "walk_records",
]

_T = TypeVar("_T", bound=tuple[object, ...])

#: A record's headers as the encoders take them: (name, value) pairs, names as str (UTF-8) or bytes.
_HeadersIn: TypeAlias = Iterable[tuple[str | ReadableBuffer, ReadableBuffer | str | None]] | None

class CodecError(ValueError):
    """Bytes that are not a valid batch (storage.codec_errors maps it to CorruptRecordError).

    `args` is (kind, message, position): kind 'corrupt', 'truncated', 'decompress' or 'too_large'
    (the stream inflates past what its batch may hold), position the byte inside the parsed
    region or None.
    """

    args: tuple[Literal["corrupt", "truncated", "decompress", "too_large"], str, int | None]

@disjoint_base
class BatchHeader:
    """The 13 fields of a batch's 61 header bytes (read-only), checked when constructed.

    storage.records.RecordBatch subclasses it: a parsed batch is its header.
    """

    def __new__(cls, buf: ReadableBuffer, position: int, verify_crc: bool = True) -> Self:
        """The header of the batch at `buf[position]`: magic, length, extent and (optionally) CRC
        checked; CodecError otherwise."""

    @property
    def base_offset(self) -> int: ...
    @property
    def batch_length(self) -> int: ...
    @property
    def partition_leader_epoch(self) -> int: ...
    @property
    def magic(self) -> int: ...
    @property
    def crc(self) -> int: ...
    @property
    def attributes(self) -> int: ...
    @property
    def last_offset_delta(self) -> int: ...
    @property
    def base_timestamp(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...
    @property
    def producer_id(self) -> int: ...
    @property
    def producer_epoch(self) -> int: ...
    @property
    def base_sequence(self) -> int: ...
    @property
    def records_count(self) -> int: ...

#: offset, timestamp, key, value, headers, sequence: storage.records.Record's fields.
_RecordTuple: TypeAlias = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]], int]

@overload
def decode_records(buf: ReadableBuffer, position: int, header: BatchHeader, cls: None = None) -> list[_RecordTuple]:
    """The records of the batch `header` (parsed at `buf[position]`), as plain tuples or as
    instances of the tuple subclass `cls` (storage.records.Record)."""

@overload
def decode_records(buf: ReadableBuffer, position: int, header: BatchHeader, cls: type[_T]) -> list[_T]: ...
def decode_consumer_records(
    buf: ReadableBuffer,
    position: int,
    header: BatchHeader,
    *,
    cls: type[_T],
    topic: str,
    partition: int,
    timestamp_type: int,
    start_offset: int,
    end_offset: int,
) -> list[_T]:
    """The records at offsets in [start_offset, end_offset) as `cls` instances of a Consumer's
    twelve fields (txlog.consumer_record.ConsumerRecord)."""

def walk_records(buf: ReadableBuffer, start: int, end: int) -> tuple[int, int]:
    """(records seen, largest timestamp delta) of the uncompressed records region buf[start:end]."""

@final
class ConsoleFormatter:
    """Kafka's console-consumer text formatter with fixed options (storage.console_format)."""

    def __new__(
        cls,
        *,
        flags: tuple[bool, bool, bool, bool, bool, bool],
        key_separator: bytes,
        line_separator: bytes,
        headers_separator: bytes,
        null_literal: bytes,
        value_format: Literal["utf8", "base64", "hex"],
        timestamp_kinds: Sequence[str],
        iso_timestamps: bool = False,
    ) -> Self:
        """flags: print.timestamp, print.partition, print.offset, print.headers, print.key, print.value;
        iso_timestamps: timestamps as ISO 8601 UTC text (cli/consume.py `iso_timestamp`)."""

    def format(self, records: list[_T]) -> bytes:
        """Each ConsumerRecord's line followed by the line separator, as one bytes."""

    @staticmethod
    def join(lines: list[_T]) -> bytes:
        """The line (item 1) of every (offset, line) tuple of `lines`, as one bytes; an item
        repeated (the same object, one after the other) is written once."""

    @staticmethod
    def parts(lines: list[_T]) -> list[bytes]:
        """What `join` joins: the line (item 1) of each distinct item of `lines` in order (an item
        repeated, the same object one after the other, is taken once), for a writer that writes
        them one after the other."""

    def batch_lines(
        self,
        buf: ReadableBuffer,
        position: int,
        header: BatchHeader,
        *,
        partition: int,
        start_offset: int,
        end_offset: int,
        limit: int,
        stop_timestamp: int | None = None,
    ) -> tuple[int, int | None, bytes, bool, int | None]:
        """The lines of the batch `header`'s records (parsed at `buf[position]`) at offsets in
        [start_offset, end_offset), the first `limit` of them, ending before the first whose
        timestamp is at or past `stop_timestamp` (kcat's e@MS), back to back, each ending with the
        line separator: (records written, the offset of the last one or None, the bytes, whether
        records in the range were left past `limit` or the stop, the offset of the record the stop
        timestamp stopped at or None)."""

@final
class RowFormatter:
    """`txlog consume --output jsonl|json|csv|table`'s rows (or kcat's -J lines, or -f text) straight from
    batches (storage.console_format)."""

    def __new__(
        cls,
        *,
        output: Literal["jsonl", "json", "csv", "table", "kcat_json", "kcat"],
        topic: str,
        value_format: Literal["utf8", "base64", "hex"],
        csv_quoted: bytes,
        iso_timestamps: bool = False,
        kcat_parts: Sequence[str | bytes] = ...,
        broker: int = 0,
    ) -> Self:
        """csv_quoted: the characters that make Python's csv writer quote a field; iso_timestamps:
        timestamps as ISO 8601 UTC text; kcat_parts: a kcat -f format, bytes literal text and a str
        the letter of a field (ValueError for an unknown one); broker: the id kcat_json's lines name."""

    @property
    def replaced(self) -> bool:
        """Whether some key or value written so far was not UTF-8 (shown with U+FFFD)."""

    def batch_lines(
        self,
        buf: ReadableBuffer,
        position: int,
        header: BatchHeader,
        *,
        partition: int,
        start_offset: int,
        end_offset: int,
        limit: int,
        stop_timestamp: int | None = None,
    ) -> tuple[int, int | None, bytes, bool, int | None]:
        """ConsoleFormatter.batch_lines, with this formatter's rows for lines."""

def table_widths_of(data: bytes, widths: list[int]) -> tuple[list[int], int, bool]:
    """`widths` widened to the cells of the whole table rows at the start of `data`, the bytes of
    those rows, and whether every cell of them is printable ASCII (what `table_lines` lays out)."""

def table_lines(data: bytes, widths: list[int]) -> tuple[bytes, int]:
    """The "simple" table lines of the whole rows at the start of `data`, cells padded to
    `widths`, each line ending with a newline; and the bytes of those rows."""

def dump_record_lines(
    buf: ReadableBuffer, position: int, header: BatchHeader, *, skip_metadata: bool, print_data: bool
) -> bytes | None:
    """kafka-dump-log's record lines of the data batch `header` (parsed at `buf[position]`),
    newline-separated; None for a key or value that is not UTF-8, no records or undecodable ones."""

@final
class ColumnBuffer:
    """One column's bytes handed over by `ColumnBuilder.finish` without a copy (read-only buffer protocol)."""

    def __len__(self) -> int: ...
    def __bytes__(self) -> bytes: ...

class _ColumnBuffers(TypedDict):
    rows: int
    offset: ColumnBuffer
    timestamp: ColumnBuffer
    sequence: ColumnBuffer
    batch_index: ColumnBuffer
    key_offsets: ColumnBuffer
    key_data: ColumnBuffer
    key_validity: ColumnBuffer | None
    key_nulls: int
    value_offsets: ColumnBuffer
    value_data: ColumnBuffer
    value_validity: ColumnBuffer | None
    value_nulls: int
    header_offsets: ColumnBuffer
    header_key_offsets: ColumnBuffer
    header_key_data: ColumnBuffer
    header_key_validity: ColumnBuffer | None
    header_key_nulls: int
    header_value_offsets: ColumnBuffer
    header_value_data: ColumnBuffer
    header_value_validity: ColumnBuffer | None
    header_value_nulls: int

@final
class ColumnBuilder:
    """Decoded records gathered column by column in Arrow's layout (storage.arrow_records)."""

    def __new__(cls, columns: Sequence[str] | None = None) -> Self:
        """Fill only the named columns (offset, timestamp, sequence, batch_index, key, value,
        headers; all when None); ValueError for an unknown name."""

    def add(
        self,
        buf: ReadableBuffer,
        position: int,
        header: BatchHeader,
        *,
        start_offset: int = -9223372036854775808,
        end_offset: int = 9223372036854775807,
    ) -> int:
        """Append the records of the batch `header` at offsets in [start_offset, end_offset);
        the rows added. A corrupt batch adds nothing."""

    def add_batches(
        self,
        spans: Iterable[tuple[ReadableBuffer, int, BatchHeader]],
        *,
        start_offset: int = -9223372036854775808,
        end_offset: int = 9223372036854775807,
    ) -> int:
        """`add` for each (buf, position, header) in order, in one call (without the GIL for
        large spans); stops at the first corrupt batch, the earlier ones staying added."""

    @property
    def rows(self) -> int: ...
    @property
    def batches(self) -> int:
        """How many batches were added since the last finish: the next batch_index."""

    def finish(self) -> _ColumnBuffers:
        """The columns as little-endian buffers (see storage/native/src/columns.rs); empties the builder."""

def compress(codec: int, data: ReadableBuffer) -> bytes:
    """`data` compressed with `codec` (1-4) in the stream format Kafka's Java client writes."""

def decompress(codec: int, data: ReadableBuffer) -> bytes:
    """`data` inflated from `codec` (1-4); CodecError for a stream Java's reader refuses, and
    'too_large' once it inflates past `inflation_limit(len(data))` (it stops there)."""

def inflated_size(codec: int, data: ReadableBuffer) -> int:
    """How many bytes `data` inflates to from `codec` (0-4), inflating it block by block without
    holding it; CodecError as `decompress` would raise it ('too_large' past the limit)."""

def inflation_limit(compressed_len: int) -> int:
    """The most a records region of `compressed_len` bytes may inflate to (docs/kafka-formats.md §1.4)."""

def own_stream_within_limit(codec: int, data: ReadableBuffer) -> bool:
    """Whether `data`, a `codec` stream this process's own encoder built, is certainly within its
    inflation limit without inflating it (by the codec's largest expansion, or zstd's content size)."""

def encode_batch(
    keys: Iterable[ReadableBuffer | None],
    values: Iterable[ReadableBuffer | None],
    headers: Iterable[_HeadersIn],
    timestamps: Iterable[int],
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
) -> bytes:
    """One whole batch from record columns, compressed per `attributes & 7`, with its CRC."""

def encode_batches(
    values: Iterable[ReadableBuffer | str | None],
    keys: Iterable[ReadableBuffer | str | None] | None,
    headers: Iterable[_HeadersIn] | None,
    timestamps: Iterable[int | None] | None,
    *,
    max_bytes: int,
    codec: int,
    is_transactional: bool,
    now_ms: int,
    cls: type[_T],
    buffers: list[bytearray] | None = None,
) -> list[_T]:
    """Whole batches split as BatchBuilder splits, as `cls` (data: bytearray, record_count,
    max_timestamp) instances (storage.records.EncodedBatch); uncompressed ones reuse the
    bytearrays popped from the end of `buffers` that nothing else refers to."""

def stamp_batch(data: WriteableBuffer, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
    """Set the producer fields of the one batch in `data` in place, its CRC updated."""

def encode_high_watermark(high_watermark: int) -> bytes:
    """The high watermark file's 14 bytes for `high_watermark` (storage/high_watermark.py's layout)."""

def decode_high_watermark(data: ReadableBuffer) -> int:
    """The HW the file's bytes hold, or -1: short, another version, a bad CRC, a negative value."""

def stamp_offset(
    out: WriteableBuffer,
    at: int,
    base_offset: int,
    partition_leader_epoch: int | None = None,
    max_timestamp: int | None = None,
) -> None:
    """The leader's stamp on the batch at `out[at]`, in place: base offset, partition leader epoch
    unless None, maxTimestamp unless None or the header's (the CRC recomputed then)."""

def retain_records(
    buf: ReadableBuffer, position: int, keep: ReadableBuffer, delete_horizon: int | None = None
) -> bytes:
    """The batch at `buf[position]` rebuilt with the records whose byte in `keep` is non-zero,
    offsets and producer fields kept (the log cleaner's re-encoding; Kafka's empty header when
    none is kept); `delete_horizon` sets the KIP-534 bit and base timestamp."""

class _BuildOptions(TypedDict, total=False):
    base_offset: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    is_transactional: bool
    compression: int
    timestamp_type: int
    partition_leader_epoch: int
    log_append_time: int | None

@disjoint_base
class RecordBatchBuilder:
    """One batch encoded a record at a time up to `max_bytes` (storage.records.BatchBuilder)."""

    def __new__(
        cls,
        *,
        max_bytes: int = 16384,
        base_offset: int = 0,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        is_transactional: bool = False,
        compression: int = 0,
        timestamp_type: int = 0,
        partition_leader_epoch: int = -1,
        log_append_time: int | None = None,
    ) -> Self: ...
    def try_append(
        self,
        key: ReadableBuffer | str | None,
        value: ReadableBuffer | str | None,
        headers: _HeadersIn = None,
        timestamp: int | None = None,
    ) -> int:
        """The record's index in the batch, or -1 (nothing changed) when closed or full."""

    def append(
        self,
        key: ReadableBuffer | str | None,
        value: ReadableBuffer | str | None,
        headers: _HeadersIn = None,
        timestamp: int | None = None,
    ) -> bool:
        """Whether the record was added (False, nothing changed, when closed or full)."""

    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def record_count(self) -> int: ...
    @property
    def estimated_size(self) -> int:
        """The exact uncompressed size so far, the 61-byte header included."""

    @property
    def max_bytes(self) -> int: ...
    @property
    def max_timestamp(self) -> int | None: ...
    def timestamp_at(self, index: int) -> int: ...
    def key_size_at(self, index: int) -> int: ...
    def value_size_at(self, index: int) -> int: ...
    def metadata_at(self, index: int) -> tuple[int, int, int]:
        """Record `index`'s (timestamp, key size, value size): the three `*_at` reads in one call."""

    def build(self, **overrides: Unpack[_BuildOptions]) -> bytes:
        """The batch, with `overrides` replacing constructor options (the builder is unchanged)."""

    def stamp_build(self, producer_id: int, producer_epoch: int, base_sequence: int) -> bytes:
        """`build(producer_id=..., producer_epoch=..., base_sequence=...)`, positionally (no keyword dict)."""

@final
class SendFastPath:
    """Producer.send's usual record in one native call (into the batch `append_new` opens when none
    is open or it is full); every other call goes to `slow` (storage.records.SendFastPath,
    installed by txlog.clients.producer.Producer)."""

    def __new__(
        cls,
        *,
        status: object,
        single: dict[Any, Any],
        known: dict[Any, Any],
        open: dict[Any, Any],
        future: type[tuple[object, ...]],
        slow: Callable[..., object],
        append_new: Callable[[Any, bytes | None, bytes | None, None, int | None], tuple[object, int]],
        custom_partitioner: bool,
        wall_clock: bool,
    ) -> Self: ...
    def send(
        self,
        topic: object,
        value: object = None,
        key: object = None,
        partition: object = None,
        headers: object = None,
        timestamp_ms: object = None,
    ) -> object:
        """The record's future: future((batch, index)) on the native path, else what `slow` returns."""

def crc32c(data: ReadableBuffer, value: int = 0) -> int:
    """CRC-32C (Castagnoli) of `data`, continuing from `value`."""

def murmur2_partitions(keys: Iterable[ReadableBuffer | str | None], count: int) -> list[int]:
    """Kafka's murmur2 partition of every key among `count`; -1 for a None key."""

def quiet_append(
    directory: str,
    dir_mtime_ns: int,
    dir_ino: int,
    log_fd: int,
    log_size: int,
    txn_path: str,
    txn_size: int,
    txn_mtime_ns: int,
    data: WriteableBuffer,
    leader_epoch: int,
    hw_fd: int,
    high_watermark: int,
    batch: BatchHeader,
    entry: ProducerStateEntry | None,
    base_offset: int,
    max_timestamp: int,
) -> tuple[int, int]:
    """A quiet durable append of `batch` (its bytes `data`, the batch alone, stamped in place as
    `stamp_offset` stamps it: `base_offset`, `leader_epoch`, `max_timestamp`): the check against its
    producer's `entry` (`check_batch`'s), the stamp, the looks, write, fdatasync and the pwrite of
    `high_watermark` (encoded as `encode_high_watermark` encodes it) with the GIL released once,
    then the batch recorded in `entry` at `base_offset` (None: the caller records it). The looks
    include the `.txnindex` at `txn_path` keeping (`txn_size`, `txn_mtime_ns`), unless `txn_size`
    is -1 (the view found none).

    (status, errno): 0 written, 1 a retry, a refusal or a look that disagreed, and nothing was
    written, 2 the write failed, 3 the fdatasync failed (storage/native/src/bindings/append.rs).
    """

@final
class ProducerStateEntry:
    """What a partition remembers of one producer: epoch, coordinator epoch, last timestamp, open
    transaction's first offset and the last 5 data batches (storage/native/src/producer.rs)."""

    BATCH_WINDOW: ClassVar[int]
    __hash__: ClassVar[None]  # type: ignore[assignment]
    def __new__(
        cls,
        producer_id: int,
        epoch: int = ...,
        coordinator_epoch: int = ...,
        last_timestamp: int = ...,
        current_txn_first_offset: int = ...,
    ) -> Self:
        """A producer the partition knows nothing more of than these (-1: unknown, no open transaction)."""
    def __eq__(self, other: object, /) -> bool: ...
    @property
    def producer_id(self) -> int: ...
    @property
    def epoch(self) -> int: ...
    @epoch.setter
    def epoch(self, value: int) -> None: ...
    @property
    def coordinator_epoch(self) -> int: ...
    @coordinator_epoch.setter
    def coordinator_epoch(self, value: int) -> None: ...
    @property
    def last_timestamp(self) -> int: ...
    @last_timestamp.setter
    def last_timestamp(self, value: int) -> None: ...
    @property
    def current_txn_first_offset(self) -> int: ...
    @current_txn_first_offset.setter
    def current_txn_first_offset(self, value: int) -> None: ...
    @property
    def batches(self) -> tuple[BatchMetadata, ...]:
        """The remembered data batches, oldest first."""
    @property
    def last_seq(self) -> int: ...
    @property
    def has_open_txn(self) -> bool: ...
    def copy(self) -> ProducerStateEntry: ...
    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None: ...
    def update_epoch(self, epoch: int) -> None:
        """Any change of epoch clears the sequence window: the new epoch starts at 0."""
    def add_batch(self, epoch: int, meta: tuple[int, int, int, int, int], is_transactional: bool) -> None: ...

def check_batch(
    entry: ProducerStateEntry | None,
    producer_id: int,
    epoch: int,
    base_seq: int,
    last_seq: int,
    is_transactional: bool,
) -> BatchMetadata | bool:
    """A client batch checked against its producer's entry (docs/kafka-formats.md §5.1): raises the
    storage.errors refusal, returns a retry's original batch, else whether it opens a transaction."""

def check_sequence(entry: ProducerStateEntry | None, epoch: int, first_seq: int) -> None:
    """The sequence rule alone: raises OutOfOrderSequenceError or UnknownProducerIdError."""

def start_writeback(fd: int, offset: int, length: int) -> None:
    """Start writing `length` bytes of `fd` from `offset` to disk without waiting (a hint:
    sync_file_range(SYNC_FILE_RANGE_WRITE) on Linux, nothing elsewhere; failures ignored, the
    caller's fdatasync makes the range durable; storage/native/src/bindings/writeback.rs)."""
