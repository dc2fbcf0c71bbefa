"""The record view's Arrow columns, shared by `txlog.scan` and the Spark source's readers.

Names and types are Spark's Kafka source's (a `txlog.scan` table and a Spark DataFrame
of the same records agree column for column). Spark's TimestampType travels as Arrow
`timestamp[us, tz=UTC]` (what `pyspark.sql.pandas.types.to_arrow_schema` maps it to),
while Kafka's timestamps are epoch milliseconds: converted here, in one vectorised step
per column.

`record_batch` turns the natively decoded columns of `storage.arrow_records` into the
record view's Arrow batch: only the columns the query's schema names are built (a
user-supplied schema prunes the rest), each converted to the type the schema gives.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from storage.arrow_records import RecordColumns
from txlog.errors import IllegalArgumentError

TIMESTAMP = pa.timestamp("us", tz="UTC")

#: The record view's columns decoded from the batches: Spark name -> storage.arrow_records name.
DECODED = {
    "key": "key",
    "value": "value",
    "offset": "offset",
    "timestamp": "timestamp",
    "timestampType": "timestamp_type_id",
    "headers": "headers",
    "producerId": "producer_id",
    "producerEpoch": "producer_epoch",
    "sequence": "sequence",
    "isTransactional": "is_transactional",
}
#: Columns that are the same for every row of a range.
CONSTANT = ("topic", "partition")

#: Every column of the record view, in its order, with the Arrow type `txlog.scan` gives it.
RECORD_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", TIMESTAMP),
        ("timestampType", pa.int32()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        ("producerId", pa.int64()),
        ("producerEpoch", pa.int16()),
        ("sequence", pa.int32()),
        ("isTransactional", pa.bool_()),
    ]
)
#: The columns of a scan that names none: Spark's Kafka source's, with headers.
DEFAULT_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers")


def timestamp_array(epoch_ms: Iterable[int | None] | pa.Array) -> pa.Array:
    """Kafka epoch-millisecond timestamps (None for null) as Spark timestamps."""
    millis = epoch_ms if isinstance(epoch_ms, pa.Array) else pa.array(epoch_ms, pa.int64())
    return pc.multiply(millis, 1000).cast(TIMESTAMP)


def check_record_schema(schema: pa.Schema) -> None:
    """A schema for the record view may name only its columns (in any order, any subset)."""
    unknown = [name for name in schema.names if name not in DECODED and name not in CONSTANT]
    if unknown:
        known = ", ".join([*DECODED, *CONSTANT])
        raise IllegalArgumentError(
            f"the txlog record view has no column {', '.join(map(repr, unknown))} (its columns: {known})"
        )


def record_batch(columns: RecordColumns, topic: str, partition: int, schema: pa.Schema) -> pa.RecordBatch:
    """The rows gathered in `columns` as an Arrow batch of `schema`'s columns, in its order."""
    wanted = [DECODED[name] for name in schema.names if name in DECODED]
    rows = columns.rows  # before `table()` finishes the builder; a table of no column has no rows to count
    table = columns.table(wanted)
    arrays = []
    for field in schema:
        if field.name == "topic":
            array = pa.repeat(pa.scalar(topic, pa.string()), rows)
        elif field.name == "partition":
            array = pa.repeat(pa.scalar(partition, pa.int32()), rows)
        else:
            array = _view_column(field.name, table.column(DECODED[field.name]).combine_chunks())
        arrays.append(array if array.type == field.type else array.cast(field.type))
    if not arrays:  # no column asked for (a count): the batch still has its rows
        return pa.record_batch([pa.nulls(rows)], names=["rows"]).select([])
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _view_column(name: str, array: pa.Array) -> pa.Array:
    """One decoded column as Spark's Kafka source shows it."""
    if name == "timestamp":
        return timestamp_array(array)
    if name == "headers":  # null, not [], for a record without headers: what Spark's Kafka source returns
        empty = pc.equal(pc.list_value_length(array), 0)
        return pa.ListArray.from_arrays(array.offsets, array.values, mask=empty)
    return array
