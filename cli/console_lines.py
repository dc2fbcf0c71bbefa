"""`txlog consume`'s text lines (and jsonl and csv rows) made straight from the batches' bytes.

Kafka's text formatter needs only each record's line (a jsonl or csv row is a line too), so
the fetch's walk (txlog/fetch.py, the one definition of what an isolation level shows and
where the next fetch starts) is given a decoder that makes the lines in native code instead of
twelve-field ConsumerRecords, through the Consumer's own seam, its Transport: the records the
walk takes from a batch (all of them, or those its offsets and record limit leave) become one
`Line` holding all their lines (storage.console_format.batch_lines), listed once per record so
that every count stays a count of records. Everything else - positions, read_committed's
filter, groups and commits, errors and their order - is the Consumer's, unchanged. Imported
only when `consume` runs (the CLI does not load txlog for --help).
"""

from __future__ import annotations

from typing import NamedTuple

from storage.console_format import ConsoleFormatter, RowFormatter, batch_lines
from storage.partition_log import PartitionLog
from storage.records import RecordBatch
from storage.store import Store
from txlog.transport import Transport


class Line(NamedTuple):
    """The records a fetch took from one batch as the text formatter prints them, listed once per
    record: the last one's offset (what the fetch's walk needs) and all their lines."""

    offset: int
    line: bytes


class LinesTransport(Transport):
    """A Transport whose Fetch returns `Line`s instead of ConsumerRecords; every other request is the base's."""

    def __init__(self, store: Store, formatter: ConsoleFormatter | RowFormatter):
        super().__init__(store, decode_batch=self._lines)
        self._formatter = formatter

    def _lines(self, log: PartitionLog, batch: RecordBatch, start: int, end: int, room: int) -> tuple[list[Line], bool]:
        return batch_lines(self._formatter, batch, Line, log.partition, start, end, room)


def joined(lines: list[Line]) -> bytes:
    """The lines of one poll as one bytes (each already ends with the line separator; a `Line`,
    listed once per record, is written once)."""
    return ConsoleFormatter.join(lines)
