"""Kafka's console-consumer text formatter in native code (storage/native/src/format.rs).

`ConsoleFormatter(flags=..., key_separator=..., ...)` holds `txlog consume`'s text options
(the six `print.*` flags in the order timestamp, partition, offset, headers, key, value; the
separators and null literal as bytes; `value_format` 'utf8', 'base64' or 'hex'; the Kafka
names of the timestamp types, indexed by a record's timestamp_type). It writes lines two ways:

* `formatter.format(records)`: a list of txlog.consumer_record.ConsumerRecord to every
  record's line, each followed by the line separator, as one bytes;
* `batch_lines(formatter, batch, ...)`: the same lines straight from a batch's bytes, with no
  ConsumerRecord and no object per record, for a reader that only prints them.

`row_formatter(output, topic, value_format, iso_timestamps=...)` makes `txlog consume --output
jsonl|json|csv|table`'s rows (and kcat's `-J` lines and `-f` text) the same way (`RowFormatter`,
with `batch_lines` as above); its `replaced` says whether some key or value was not UTF-8 and was
shown with U+FFFD. A json row is an element of the array, led by `,` (the writer makes the first
one's `[`); a table row is its cells, each a little-endian u32 length and UTF-8 text, which
`table_widths_of` measures and `table_lines` lays out as tabulate's "simple" table once every row
is known (cli/output.py `RenderedTable`; where a cell is not printable ASCII, only tabulate can,
from `table_cells`). Both formatters print `--timestamp-format iso` themselves (cli/consume.py
`iso_timestamp`).

`dump_record_lines(batch, ...)` is `txlog inspect --print-data-log`'s (kafka-dump-log's) record
lines of a data batch, straight from its bytes, where keys and values are UTF-8; cli/dump_log.py
formats the rest itself and is the reference.

This module is the formatter's public door: only storage imports the private
`storage._native`, so cli/consume.py comes through here. cli/consume.py's `_KafkaFormatter`
keeps the Python writer of the same bytes as the reference, as
`_Rows` (through cli/output.py's RowWriter) does for the rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal, TypeVar

from storage._native import CodecError, ConsoleFormatter, RowFormatter, table_lines, table_widths_of
from storage._native import dump_record_lines as _dump_record_lines
from storage.records import RecordBatch

__all__ = [
    "ConsoleFormatter",
    "RowFormatter",
    "batch_lines",
    "dump_record_lines",
    "row_formatter",
    "table_cells",
    "table_lines",
    "table_widths_of",
]

_T = TypeVar("_T", bound=tuple[object, ...])


def row_formatter(
    output: Literal["jsonl", "json", "csv", "table", "kcat_json", "kcat"],
    topic: str,
    value_format: Literal["utf8", "base64", "hex"],
    *,
    iso_timestamps: bool = False,
    kcat_parts: list[str | bytes] | None = None,
    broker: int = 0,
) -> RowFormatter:
    """The native rows of `topic`'s records for `--output jsonl|json|csv|table` (cli/consume.py's `_Rows`' rows),
    kcat's -J lines (`kcat_json`: cli/consume.py's `_KcatJson`) or the text of a kcat -f format (`kcat`, its
    parts as cli/consume.py's `_KcatFormatter` parsed them: bytes literal text, a str a field's letter);
    `broker` is the id -J's lines name."""
    quoted = _csv_quoted() if output == "csv" else b""
    return RowFormatter(
        output=output,
        topic=topic,
        value_format=value_format,
        csv_quoted=quoted,
        iso_timestamps=iso_timestamps,
        kcat_parts=kcat_parts or [],
        broker=broker,
    )


def table_cells(data: bytes, columns: int) -> Iterator[list[str]]:
    """The rows of a table formatter's lines (whole rows, back to back) as lists of cell text."""
    at = 0
    while at < len(data):
        row = []
        for _ in range(columns):
            size = int.from_bytes(data[at : at + 4], "little")
            row.append(data[at + 4 : at + 4 + size].decode("utf-8"))
            at += 4 + size
        yield row


def _csv_quoted() -> bytes:
    """The ASCII characters that make the running Python's csv writer (excel dialect, `\n` line
    ends, as cli/output.py's RowWriter) quote a field: asked of the csv module itself, since they
    differ between CPython releases (a bare `\r` forces quoting only from 3.11.9 and 3.12.3 on,
    CPython gh-67044)."""
    import csv
    import io

    quoted = bytearray()
    for code in range(128):
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow([f"a{chr(code)}b"])
        if buf.getvalue().startswith('"'):
            quoted.append(code)
    return bytes(quoted)


def batch_lines(
    formatter: ConsoleFormatter | RowFormatter,
    batch: RecordBatch,
    cls: type[_T],
    partition: int,
    start: int,
    end: int,
    limit: int,
    stop_timestamp: int | None = None,
) -> tuple[list[_T], bool, int | None]:
    """The lines of the batch's records at offsets in [start, end), the first `limit` of them,
    whether records in that range were left past `limit`, and (with `stop_timestamp`, kcat's
    `-o e@MS`) the offset of the first of those records whose timestamp is at or past it, where
    the lines end (None when none is).

    The lines are made as one `cls` (offset of the last record, all the lines) tuple listed once
    per record: the list has one item per record and its last item's offset is the last record's,
    all a fetch's walk and the Consumer count and move by; `ConsoleFormatter.join` writes an item
    repeated back to back once (`ConsoleFormatter.parts` lists it once, for a writer that writes the
    pieces one after the other). Decoded as `RecordBatch.consumer_records` decodes (the same checks,
    the same CorruptRecordError for a records region that cannot be decoded), so a reader of lines
    sees exactly the records, and the errors, a reader of ConsumerRecords would.
    """
    if not batch._has_record_bytes():
        return [], False, None
    try:
        count, last, data, more, stopped = formatter.batch_lines(
            batch._buf,
            batch._at,
            batch,
            partition=partition,
            start_offset=start,
            end_offset=end,
            limit=limit,
            stop_timestamp=stop_timestamp,
        )
    except CodecError as exc:
        raise batch._codec_error(exc) from None
    return ([tuple.__new__(cls, (last, data))] * count if count else []), more, stopped  # as a native maker fills `cls`


def dump_record_lines(batch: RecordBatch, *, skip_metadata: bool, print_data: bool) -> bytes | None:
    """The kafka-dump-log lines of a data batch's records, newline-separated, or None where the
    caller must format them itself (a key or value that is not UTF-8, no records, or records that
    cannot be decoded: decoding them again raises the reader's error there). Raises as
    `RecordBatch.record_tuples` does for a batch no decoder may see."""
    if not batch._has_record_bytes():
        return None
    return _dump_record_lines(batch._buf, batch._at, batch, skip_metadata=skip_metadata, print_data=print_data)
