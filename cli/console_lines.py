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
from storage.varint import INT64_MAX
from txlog.transport import Transport


class Line(NamedTuple):
    """The records a fetch took from one batch as the text formatter prints them, listed once per
    record: the last one's offset (what the fetch's walk needs) and all their lines."""

    offset: int
    line: bytes


class LinesTransport(Transport):
    """A Transport whose Fetch returns `Line`s instead of ConsumerRecords; every other request is the base's.

    With `stop_at` (kcat's `-o e@MS`) a partition's lines end before its first record whose
    timestamp is at or past it: the walk sees that batch as cut there (so the position stops
    short of it and no later batch of that fetch is read), and `reached` keeps the record's
    offset per partition until the caller takes it (cli/consume.py pauses the partition there).
    """

    def __init__(self, store: Store, formatter: ConsoleFormatter | RowFormatter, stop_at: int | None = None):
        super().__init__(store, decode_batch=self._lines)
        self._formatter = formatter
        # A record's timestamp is a 64-bit number: a stop past the largest one stops at no record.
        self._stop_at = stop_at if stop_at is None or stop_at <= INT64_MAX else None
        self.reached: dict[tuple[str, int], int] = {}

    def _lines(self, log: PartitionLog, batch: RecordBatch, start: int, end: int, room: int) -> tuple[list[Line], bool]:
        lines, cut, stopped = batch_lines(self._formatter, batch, Line, log.partition, start, end, room, self._stop_at)
        if stopped is not None:
            self.reached[(log.topic, log.partition)] = stopped
        return lines, cut


def chunks(lines: list[Line]) -> list[bytes]:
    """The lines of one poll as the bytes the fetch made, in order, to be written one after the
    other (`writelines`): each `Line`, listed once per record, once. A writer of bytes that need
    not be one object takes these over `joined`: no buffer of the whole poll is made (zeroed, copied
    into, written once and dropped: with 1 MiB polls, fresh pages for every poll)."""
    return ConsoleFormatter.parts(lines)


def joined(lines: list[Line]) -> bytes:
    """The lines of one poll as one bytes (each already ends with the line separator; a `Line`,
    listed once per record, is written once)."""
    return ConsoleFormatter.join(lines)
