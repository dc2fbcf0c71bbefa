"""Records of many batches as one Arrow table, decoded by the native codec without a Python
object per record (storage._native.ColumnBuilder; docs/kafka-formats.md §1.3 for the fields).

pyarrow is optional (the `spark` extra), so it is imported only when a table is built. The
native builder hands over contiguous little-endian buffers which pyarrow wraps as they are
(`pa.Array.from_buffers`, zero-copy: `finish` moves them into `_native.ColumnBuffer`s, not
bytes); only the per-batch columns (producer id and epoch,
the transactional flag, the timestamp type as Kafka's name or its id) are broadcast here,
once per column.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import storage._native as _native
from storage.records import RecordBatch, TimestampType
from storage.varint import INT64_MAX, INT64_MIN

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["COLUMNS", "RecordColumns"]

#: Every column `RecordColumns.table` can return, in this order.
COLUMNS = (
    "offset",
    "timestamp",
    "timestamp_type",
    "key",
    "value",
    "headers",
    "producer_id",
    "producer_epoch",
    "sequence",
    "is_transactional",
    "timestamp_type_id",
)


#: The native builder's columns each record column is made from.
_BUILT_FROM = {
    "offset": ("offset",),
    "timestamp": ("timestamp",),
    "key": ("key",),
    "value": ("value",),
    "headers": ("headers",),
    "sequence": ("sequence",),
}


class RecordColumns:
    """Accumulates the records of batches (in log order) and turns them into Arrow columns.

    `columns` (a subset of COLUMNS; all when None) are the only ones `table` may be asked
    for: the others are never decoded into buffers (a query of values copies no key).
    """

    def __init__(self, columns: Iterable[str] | None = None) -> None:
        self._columns = None if columns is None else frozenset(columns)
        if columns is None:
            self._builder = _native.ColumnBuilder()
        else:
            unknown = [name for name in columns if name not in COLUMNS]
            if unknown:
                raise ValueError(f"unknown record column {unknown[0]!r} (known: {', '.join(COLUMNS)})")
            # per-batch columns (producer id, ...) are broadcast by the index of each row's batch
            built = {part for name in columns for part in _BUILT_FROM.get(name, ("batch_index",))}
            self._builder = _native.ColumnBuilder(sorted(built))
        self._batches: list[tuple[int, int, bool, int]] = []  # per add: producer_id, epoch, txn, timestamp type

    @property
    def rows(self) -> int:
        return self._builder.rows

    def add(self, batch: RecordBatch, start: int = INT64_MIN, end: int = INT64_MAX) -> int:
        """Add the batch's records at offsets in [start, end); CorruptRecordError (adding nothing)
        on damage. Returns the rows added."""
        before = self._builder.batches
        added = batch.add_columns(self._builder, start, end)
        if self._builder.batches > before:  # the builder numbered this batch: keep its values at that index
            self._batches.append(
                (batch.producer_id, batch.producer_epoch, batch.is_transactional, int(batch.timestamp_type))
            )
        return added

    def add_all(self, batches: Sequence[RecordBatch], start: int = INT64_MIN, end: int = INT64_MAX) -> int:
        """`add` for every batch, decoded in one native call (see RecordBatch.add_columns_of)."""
        numbered: list[RecordBatch] = []
        try:
            return RecordBatch.add_columns_of(self._builder, batches, numbered, start, end)
        finally:  # the builder numbered these, also when a later batch was corrupt
            self._batches.extend(
                (b.producer_id, b.producer_epoch, b.is_transactional, int(b.timestamp_type)) for b in numbered
            )

    def table(self, columns: Iterable[str] = COLUMNS) -> pa.Table:
        """The requested columns (a subset of COLUMNS, in the order given) as a pyarrow Table;
        timestamps stay epoch milliseconds (int64), as Kafka stores them. Empties the builder:
        call it once."""
        import pyarrow as pa

        cols = self._builder.finish()
        rows = cols["rows"]
        built = {}
        for name in columns:
            if name not in COLUMNS:
                raise ValueError(f"unknown record column {name!r} (known: {', '.join(COLUMNS)})")
            if self._columns is not None and name not in self._columns:
                raise ValueError(f"record column {name!r} was not built (built: {', '.join(sorted(self._columns))})")
            built[name] = self._column(pa, cols, rows, name)
        return pa.table(built)

    def _column(self, pa, cols: Mapping[str, Any], rows: int, name: str) -> pa.Array:
        if name in ("offset", "timestamp"):
            return pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(cols[name])])
        if name == "sequence":
            return pa.Array.from_buffers(pa.int32(), rows, [None, pa.py_buffer(cols[name])])
        if name in ("key", "value"):
            return _binary(pa, pa.binary(), cols, name, rows)
        if name == "headers":
            keys = _binary(pa, pa.string(), cols, "header_key", None)
            values = _binary(pa, pa.binary(), cols, "header_value", None)
            entries = pa.StructArray.from_arrays([keys, values], names=["key", "value"])
            offsets = pa.Array.from_buffers(pa.int32(), rows + 1, [None, pa.py_buffer(cols["header_offsets"])])
            return pa.ListArray.from_arrays(offsets, entries)
        # per-batch columns, broadcast by the index of the batch each row came from
        index = pa.Array.from_buffers(pa.int32(), rows, [None, pa.py_buffer(cols["batch_index"])])
        # timestamp_type_id is the attribute's value (0 CreateTime, 1 LogAppendTime): no string per row
        field = {"producer_id": 0, "producer_epoch": 1, "is_transactional": 2}.get(name, 3)
        kind = {
            "producer_id": pa.int64(),
            "producer_epoch": pa.int16(),
            "is_transactional": pa.bool_(),
            "timestamp_type": pa.string(),
            "timestamp_type_id": pa.int32(),
        }[name]
        per_batch = [b[field] for b in self._batches]
        if name == "timestamp_type":
            return pa.array([TimestampType(t).kafka_name for t in per_batch], kind).take(index)
        return pa.array(per_batch, kind).take(index)


def _binary(pa, kind, cols: Mapping[str, Any], prefix: str, rows: int | None) -> pa.Array:
    """A binary/string column from the builder's buffers, zero-copy."""
    offsets = cols[f"{prefix}_offsets"]
    length = len(offsets) // 4 - 1 if rows is None else rows
    validity = cols[f"{prefix}_validity"]
    return pa.Array.from_buffers(
        kind,
        length,
        [
            None if validity is None else pa.py_buffer(validity),
            pa.py_buffer(offsets),
            pa.py_buffer(cols[f"{prefix}_data"]),
        ],
        null_count=cols[f"{prefix}_nulls"],
    )
