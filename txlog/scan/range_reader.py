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

from collections.abc import Iterable, Iterator

import pyarrow as pa

from storage.arrow_records import RecordColumns
from storage.errors import OffsetOutOfRangeError
from storage.extent import SegmentExtent, read_extent
from storage.records import RecordBatch
from txlog.fetch import AbortedFilter, visible_batches
from txlog.scan.arrow_columns import DECODED, check_record_schema, record_batch
from txlog.scan.planning import OffsetRange

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
