"""`txlog consume`'s text output made straight from the batches' bytes, with no ConsumerRecords.

Kafka's text formatter needs only each record's line, so the fetch's walk (txlog/fetch.py,
the one definition of what an isolation level shows and where the next fetch starts) is given
decoders that make the lines in native code instead of twelve-field ConsumerRecords, through
the Consumer's own seam, its Transport: a batch taken whole becomes one `Line` holding all its
lines (storage.console_format.batch_lines), listed once per record so that every count stays a
count of records; a batch the fetch cuts (at its offsets or its record limit) one `Line` per
record (record_lines). Everything else - positions, read_committed's filter,
groups and commits, errors and their order - is the Consumer's, unchanged. Imported only when
`consume` runs (the CLI does not load txlog for --help).
"""

from __future__ import annotations

from typing import NamedTuple

from storage.console_format import ConsoleFormatter, batch_lines, record_lines
from storage.partition_log import PartitionLog
from storage.records import RecordBatch
from storage.store import Store
from txlog.fetch import FetchResult, IsolationLevel, fetch
from txlog.topic_partition import TopicPartition
from txlog.transport import Transport


class Line(NamedTuple):
    """One record as the text formatter prints it: its offset (what the fetch's walk needs) and its line;
    or, listed once per record of a batch, the batch's last offset and all its lines."""

    offset: int
    line: bytes


class LinesTransport(Transport):
    """A Transport whose Fetch returns `Line`s instead of ConsumerRecords; every other request is the base's."""

    def __init__(self, store: Store, formatter: ConsoleFormatter):
        super().__init__(store)
        self._formatter = formatter

    def fetch(
        self, tp: TopicPartition, offset: int, isolation: IsolationLevel, *, max_records: int, max_bytes: int
    ) -> FetchResult:
        return fetch(
            self.store.partition(tp.topic, tp.partition),
            offset,
            isolation,
            max_records=max_records,
            max_bytes=max_bytes,
            decode=self._lines,
            decode_whole=self._batch_lines,
        )

    def _lines(self, log: PartitionLog, batch: RecordBatch, start: int, end: int) -> list[Line]:
        return record_lines(self._formatter, batch, Line, log.partition, start, end)

    def _batch_lines(self, log: PartitionLog, batch: RecordBatch) -> list[Line]:
        return batch_lines(self._formatter, batch, Line, log.partition)


def joined(lines: list[Line]) -> bytes:
    """The lines of one poll as one bytes (each already ends with the line separator; a batch's
    `Line`, listed once per record, is written once)."""
    return ConsoleFormatter.join(lines)
