"""The executor's half of a read: one planned offset range, straight from the segment files, as Arrow.

Visibility is decided by the Consumer's own code: `txlog.fetch.visible_batches` and
`visible_records`, with the same `AbortedFilter` over the same `.txnindex` entries (which
the plan carries), so a DataFrame and a Consumer given the same store, isolation level
and offsets see the same records. Batches are judged by their headers: an aborted or
control batch is never decompressed or decoded.

Records are decoded natively straight into Arrow columns (storage.arrow_records: no Python
object per record) and handed on (to Spark, to `txlog.scan`) tens of thousands at a time.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import replace

import pyarrow as pa

from storage.arrow_records import RecordColumns
from storage.errors import FileReplacedError, KafkaError, KafkaStorageError, OffsetOutOfRangeError
from storage.extent import SegmentExtent, open_extent
from storage.records import RecordBatch
from txlog.fetch import AbortedFilter, visible_batches
from txlog.scan.arrow_columns import DECODED, check_record_schema, record_batch
from txlog.scan.planning import OffsetRange, open_store

#: Rows per Arrow batch handed on (Spark's own default is 10,000 per Arrow batch).
ROWS_PER_ARROW_BATCH = 32_768
#: ... and at most about this many bytes of batches in one, so large records stay far below
#: Arrow's 2 GiB per binary column (a compressed batch decodes to more than its size).
BYTES_PER_ARROW_BATCH = 64 << 20


def read_range(r: OffsetRange, arrow_schema: pa.Schema, *, fail_on_data_loss: bool = True) -> Iterator[pa.RecordBatch]:
    """Arrow batches (in `arrow_schema`'s columns) of the records of `r` its isolation level may see.

    Only the columns `arrow_schema` names are built: a user-supplied schema is column pruning.
    """
    columns = _Columns(r.topic, r.partition, arrow_schema)
    batches = range_batches(r, fail_on_data_loss=fail_on_data_loss)
    while True:
        chunk = columns.fill(batches, r.start, r.end)
        if chunk is None:
            return
        if chunk.num_rows:  # batches at the range's edges may hold no row inside it
            yield chunk


def range_batches(r: OffsetRange, *, fail_on_data_loss: bool = True) -> Iterator[RecordBatch]:
    """The data batches of a planned range that its isolation level shows (control batches never are)."""
    aborted = AbortedFilter(r.aborted) if r.committed_only else None
    batches = (
        batch for _, batch in extent_batches(r.topic, r.partition, r.extents, fail_on_data_loss=fail_on_data_loss)
    )
    return visible_batches(batches, r.start, r.end, aborted)


def extent_batches(
    topic: str, partition: int, extents: Iterable[SegmentExtent], *, fail_on_data_loss: bool
) -> Iterator[tuple[int, RecordBatch]]:
    """(segment base offset, batch) of every planned extent, in offset order, straight from the files.

    An extent whose file a cleaning replaced since planning (or merged into an earlier
    segment) is planned again by its offsets, which cleaning never changes, and those
    extents are read instead: the same records, less what the cleaning removed. A segment
    deleted by retention is data loss: an error unless the query allowed it with
    failOnDataLoss=false, when what is left is read. Every view reads this way.
    """
    for extent in extents:
        yield from _extent_batches(topic, partition, extent, fail_on_data_loss, replanned=False)


#: How many times one extent is planned again before the read gives up (each time a cleaning
#: replaced its file between the plan and the read: only a partition cleaned without pause).
MAX_REPLANS = 8


def _extent_batches(
    topic: str, partition: int, extent: SegmentExtent, fail_on_data_loss: bool, *, replanned: bool, depth: int = 0
) -> Iterator[tuple[int, RecordBatch]]:
    """One extent's batches; a re-planned one yields only batches of its offsets (its segment may hold more).

    The file is checked when opened, and again if its descriptor is evicted and reopened by
    name mid-read (storage/descriptor_cache.py): either way the offsets not read yet are
    planned again.
    """
    next_offset = extent.start_offset
    try:
        batches = open_extent(extent)
        for batch in batches:
            if replanned and batch.base_offset >= extent.end_offset:
                batches.close()  # closes the file now, not when the generator is collected
                return
            if replanned and batch.last_offset < extent.start_offset:
                continue
            next_offset = max(next_offset, batch.last_offset + 1)
            yield extent.base_offset, batch
        return
    except (FileNotFoundError, FileReplacedError):
        if depth >= MAX_REPLANS:
            raise KafkaStorageError(
                f"{extent.log_path} was replaced by cleanings {depth} times while it was read; rerun the query"
            ) from None
    rest = replace(extent, start_offset=next_offset)
    for again in _replan(topic, partition, rest, fail_on_data_loss):
        yield from _extent_batches(topic, partition, again, fail_on_data_loss, replanned=True, depth=depth + 1)


def _replan(topic: str, partition: int, extent: SegmentExtent, fail_on_data_loss: bool) -> list[SegmentExtent]:
    """The extents now holding `extent`'s offsets, from a fresh read-only view of its partition.

    Offsets below the log's start were deleted by retention since the plan: an error unless
    failOnDataLoss=false, when the rest is read. A partition that can no longer be opened
    (deleted) is one error naming the file.
    """
    try:
        store = open_store(os.path.dirname(extent.directory))
    except KafkaError as exc:
        raise KafkaStorageError(
            f"{extent.log_path} changed after the query was planned and its store "
            f"cannot be opened again ({exc}); rerun the query"
        ) from None
    try:
        log = store.partition(topic, partition)
        start = max(extent.start_offset, log.log_start_offset)
        # a log ending before the extent's offsets lost its files by other means than retention
        lost = start > extent.start_offset or log.log_end_offset < extent.end_offset
        if lost and fail_on_data_loss:
            raise OffsetOutOfRangeError(
                f"segment {extent.base_offset} of {topic}-{partition} was deleted after the query was "
                f"planned (retention); set failOnDataLoss=false to skip what was lost"
            )
        return log.extents(start, extent.end_offset)
    except OffsetOutOfRangeError:
        raise
    except KafkaError as exc:
        raise KafkaStorageError(
            f"{extent.log_path} changed after the query was planned and its partition "
            f"cannot be planned again ({exc}); rerun the query"
        ) from None
    finally:
        store.close()


class _Columns:
    """The rows gathered so far, decoded natively into columns (no Python object per record).

    Visible batches are judged one by one (their headers, in Python: the Consumer's rule),
    then decoded together, an Arrow batch's worth in one native call that releases the GIL
    (other Python threads run meanwhile) and builds only the columns the schema names.
    """

    def __init__(self, topic: str, partition: int, schema: pa.Schema):
        check_record_schema(schema)
        self.topic, self.partition, self.schema = topic, partition, schema
        self.decoded = [DECODED[name] for name in schema.names if name in DECODED]

    def fill(self, batches: Iterator[RecordBatch], start: int, end: int) -> pa.RecordBatch | None:
        """Decode batches until an Arrow batch is full; None once `batches` is exhausted and nothing is left.

        `add_all(batches, start, end)` keeps the records at offsets in [start, end): `visible_records`' rule.
        A batch's record count bounds the rows it adds (a batch at an edge adds fewer).
        """
        pending: list[RecordBatch] = []
        rows = size = 0
        for batch in batches:
            pending.append(batch)
            rows += batch.records_count
            size += batch.size
            if rows >= ROWS_PER_ARROW_BATCH or size >= BYTES_PER_ARROW_BATCH:
                break
        if not pending:
            return None
        columns = RecordColumns(self.decoded)
        columns.add_all(pending, start, end)
        return record_batch(columns, self.topic, self.partition, self.schema)
