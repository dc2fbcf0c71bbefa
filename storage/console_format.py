"""Kafka's console-consumer text formatter in native code (storage/native/src/format.rs).

`ConsoleFormatter(flags=..., key_separator=..., ...)` holds `txlog consume`'s text options
(the six `print.*` flags in the order timestamp, partition, offset, headers, key, value; the
separators and null literal as bytes; `value_format` 'utf8', 'base64' or 'hex'; the Kafka
names of the timestamp types, indexed by a record's timestamp_type). It writes lines two ways:

* `formatter.format(records)`: a list of txlog.consumer_record.ConsumerRecord to every
  record's line, each followed by the line separator, as one bytes;
* `record_lines(formatter, batch, ...)`: the same lines straight from a batch's bytes, one
  (offset, line) tuple per record and no ConsumerRecord, for a reader that only prints them;
* `batch_lines(formatter, batch, ...)`: every record's line of a batch taken whole in one
  bytes, in the shape of `record_lines`' list at the cost of one object per batch.

`dump_record_lines(batch, ...)` is `txlog inspect --print-data-log`'s (kafka-dump-log's) record
lines of a data batch, straight from its bytes, where keys and values are UTF-8; cli/dump_log.py
formats the rest itself and is the reference.

This module is the formatter's public door: only storage imports the private
`storage._native`, so cli/consume.py comes through here. cli/consume.py's `_KafkaFormatter`
keeps the Python writer of the same bytes as the reference (and for ISO timestamps).
"""

from __future__ import annotations

from typing import TypeVar

from storage._native import CodecError, ConsoleFormatter
from storage._native import dump_record_lines as _dump_record_lines
from storage.records import RecordBatch

__all__ = ["ConsoleFormatter", "batch_lines", "dump_record_lines", "record_lines"]

_T = TypeVar("_T", bound=tuple[object, ...])


def record_lines(
    formatter: ConsoleFormatter, batch: RecordBatch, cls: type[_T], partition: int, start: int, end: int
) -> list[_T]:
    """The lines of the batch's records at offsets in [start, end) as `cls` (offset, line) tuples.

    Decoded as `RecordBatch.consumer_records` decodes them (the same checks, the same
    CorruptRecordError for a records region that cannot be decoded), so a reader of lines
    sees exactly the records, and the errors, a reader of ConsumerRecords would.
    """
    if not batch._has_record_bytes():
        return []
    try:
        return formatter.lines(
            batch._buf, batch._at, batch, cls=cls, partition=partition, start_offset=start, end_offset=end
        )
    except CodecError as exc:
        raise batch._codec_error(exc) from None


def batch_lines(formatter: ConsoleFormatter, batch: RecordBatch, cls: type[_T], partition: int) -> list[_T]:
    """`record_lines` of every record of the batch, made as one `cls` (last offset, all the lines)
    tuple, listed once per record.

    The list has one item per record and its last item's offset is the last record's, which is
    all a fetch's walk and the Consumer count and move by; `ConsoleFormatter.join` writes an
    item repeated back to back once. Decoded, and failing, as `record_lines` is.
    """
    if not batch._has_record_bytes():
        return []
    try:
        count, last, data = formatter.batch_lines(batch._buf, batch._at, batch, partition=partition)
    except CodecError as exc:
        raise batch._codec_error(exc) from None
    return [tuple.__new__(cls, (last, data))] * count if count else []  # as the native maker fills a `cls`


def dump_record_lines(batch: RecordBatch, *, skip_metadata: bool, print_data: bool) -> bytes | None:
    """The kafka-dump-log lines of a data batch's records, newline-separated, or None where the
    caller must format them itself (a key or value that is not UTF-8, no records, or records that
    cannot be decoded: decoding them again raises the reader's error there). Raises as
    `RecordBatch.record_tuples` does for a batch no decoder may see."""
    if not batch._has_record_bytes():
        return None
    return _dump_record_lines(batch._buf, batch._at, batch, skip_metadata=skip_metadata, print_data=print_data)
