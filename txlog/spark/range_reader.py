"""The executor's half of a read: one planned offset range, straight from the segment files, as Arrow.

Visibility is decided by the Consumer's own code: `txlog.fetch.visible_batches` and
`visible_records`, with the same `AbortedFilter` over the same `.txnindex` entries (which
the plan carries), so a DataFrame and a Consumer given the same store, isolation level
and offsets see the same records. Batches are judged by their headers: an aborted or
control batch is never decompressed or decoded.

Records are gathered column by column and handed to Arrow a few thousand at a time;
building Python rows for Spark to convert would cost more than decoding them.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from itertools import repeat
from typing import Iterable, Iterator

import pyarrow as pa

from storage.errors import OffsetOutOfRangeError
from storage.extent import SegmentExtent, read_extent
from storage.records import RecordBatch
from txlog.fetch import AbortedFilter, visible_batches, visible_records
from txlog.spark.arrow_columns import timestamp_array
from txlog.spark.planning import OffsetRange

#: Rows per Arrow batch handed to Spark (its own default is 10,000 per Arrow batch).
ROWS_PER_ARROW_BATCH = 32_768


def read_range(r: OffsetRange, arrow_schema: pa.Schema, *, fail_on_data_loss: bool = True) -> Iterator[pa.RecordBatch]:
    """Arrow batches (in `arrow_schema`'s columns) of the records of `r` its isolation level may see."""
    columns = _Columns(r.topic, r.partition, arrow_schema)
    batches = range_batches(r, fail_on_data_loss=fail_on_data_loss)
    while True:
        with _collector_paused():
            chunk = columns.fill(batches, r.start, r.end)
        if chunk is None:
            return
        yield chunk


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Keep Python's cyclic GC out of the decoding of one Arrow batch.

    Every decoded record is a tuple holding a fresh headers list, so the tens of
    thousands kept until the batch is built are all GC-tracked: collections walking
    them took ~40% of the read's CPU (tests/benchmarks/bench_spark.py). Decoding makes
    no reference cycles, so reference counting alone frees it all; the collector is
    restored before control goes back to Spark.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def range_batches(r: OffsetRange, *, fail_on_data_loss: bool = True) -> Iterator[RecordBatch]:
    """The data batches of a planned range that its isolation level shows (control batches never are)."""
    aborted = AbortedFilter(r.aborted) if r.committed_only else None
    batches = (batch for _, batch in extent_batches(r.topic, r.partition, r.extents,
                                                      fail_on_data_loss=fail_on_data_loss))
    return visible_batches(batches, r.start, r.end, aborted)


def extent_batches(topic: str, partition: int, extents: Iterable[SegmentExtent], *,
                   fail_on_data_loss: bool) -> Iterator[tuple[int, RecordBatch]]:
    """(segment base offset, batch) of every planned extent, in offset order, straight from the files.

    A segment deleted by retention since planning is data loss: an error unless the query
    allowed it with failOnDataLoss=false, when what is left is read. Every view reads this way.
    """
    for extent in extents:
        try:
            for batch in read_extent(extent):
                yield extent.base_offset, batch
        except FileNotFoundError:
            if fail_on_data_loss:
                raise OffsetOutOfRangeError(
                    f"segment {extent.base_offset} of {topic}-{partition} was deleted after the query was "
                    f"planned (retention); set failOnDataLoss=false to skip what was lost"
                ) from None


class _Columns:
    """Columns of the rows gathered so far, in the schema's column order."""

    def __init__(self, topic: str, partition: int, schema: pa.Schema):
        self.topic, self.partition, self.schema = topic, partition, schema
        self.names = set(schema.names)
        self._reset()

    def fill(self, batches: Iterator[RecordBatch], start: int, end: int) -> pa.RecordBatch | None:
        """Decode batches until an Arrow batch is full; None once `batches` is exhausted and nothing is left."""
        for batch in batches:
            records = visible_records(batch, start, end)  # (offset, timestamp, key, value, headers, sequence)
            if records:
                self.add(batch, records)
            if self.rows >= ROWS_PER_ARROW_BATCH:
                return self.flush()
        return self.flush() if self.rows else None

    def _reset(self) -> None:
        self.records: list = []
        self.timestamp_types: list[int] = []
        self.producer_ids: list[int] = []
        self.producer_epochs: list[int] = []
        self.transactional: list[bool] = []
        self.rows = 0

    def add(self, batch: RecordBatch, records: list) -> None:
        n = len(records)
        self.records.extend(records)
        self.timestamp_types.extend(repeat(int(batch.timestamp_type), n))
        if "producerId" in self.names:
            self.producer_ids.extend(repeat(batch.producer_id, n))
            self.producer_epochs.extend(repeat(batch.producer_epoch, n))
            self.transactional.extend(repeat(batch.is_transactional, n))
        self.rows += n

    def flush(self) -> pa.RecordBatch:
        offsets, timestamps, keys, values, headers, sequences = zip(*self.records)
        n = self.rows
        arrays = {
            "key": pa.array(keys, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "topic": pa.repeat(pa.scalar(self.topic, pa.string()), n),
            "partition": pa.repeat(pa.scalar(self.partition, pa.int32()), n),
            "offset": pa.array(offsets, pa.int64()),
            "timestamp": timestamp_array(timestamps),
            "timestampType": pa.array(self.timestamp_types, pa.int32()),
        }
        if "headers" in self.names:
            # null, not [], for a record without headers: what Spark's Kafka source returns
            arrays["headers"] = pa.array([h or None for h in headers], self.schema.field("headers").type)
        if "producerId" in self.names:
            arrays["producerId"] = pa.array(self.producer_ids, pa.int64())
            arrays["producerEpoch"] = pa.array(self.producer_epochs, pa.int32())
            arrays["sequence"] = pa.array(sequences, pa.int32())
            arrays["isTransactional"] = pa.array(self.transactional, pa.bool_())
        self._reset()
        return pa.RecordBatch.from_arrays([arrays[name] for name in self.schema.names], schema=self.schema)
