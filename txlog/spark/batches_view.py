"""`view=batches`: one row per record batch, the header kafka-dump-log prints, as a DataFrame.

    spark.read.format("txlog").option("view", "batches").load(path)

Questions about how a log was written (who wrote what, transactional or not, how
batches were compressed, which transactions were aborted) are about batch headers,
not records, and a DataFrame of headers answers them in one query, e.g. the abort rate
per producer:

    df.where("isControl").groupBy("producerId")
      .agg(F.avg((F.col("controlType") == "ABORT").cast("int")).alias("abortRate"))

Every selected partition is read whole, from its log start to its log end, control
batches and aborted or still-open transactions included: `isolation.level`,
`startingOffsets` and `endingOffsets` do not apply, since a header view filtered by
visibility could no longer show what was hidden. Without `subscribe`,
`subscribePattern` or `assign` every topic is read, internal ones too. The rows are
those `txlog inspect` lists for the same `.log` files (up to the log end when
planned; bytes appended later or a torn tail are not batches yet).

Records are never decoded, except the single record of a control batch, for its
marker; `controlType` is Kafka's ControlRecordType name (COMMIT and ABORT, or the KRaft
types of a metadata log) and null when that record cannot be read, e.g. a marker
batch emptied by compaction. Kafka's "no timestamp" (-1) is null; `baseTimestamp` is the
header field as stored, which for a batch compaction marked with a delete horizon is
that horizon. `crc` is the stored CRC-32C as an unsigned number (every batch here was
checked against it when read).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from storage.compression import Compression
from storage.errors import KafkaError
from storage.extent import SegmentExtent
from storage.records import COMPRESSION_MASK, NO_TIMESTAMP, ControlType, RecordBatch
from storage.store import Store
from txlog.scan.arrow_columns import timestamp_array
from txlog.scan.planning import open_store
from txlog.scan.range_reader import ROWS_PER_ARROW_BATCH, extent_batches
from txlog.spark.options import SourceOptions

SCHEMA = (
    "topic string, partition int, baseOffset long, lastOffset long, recordCount int, sizeBytes int, "
    "position long, segment long, magic int, crc long, partitionLeaderEpoch int, compression string, "
    "timestampType int, baseTimestamp timestamp, maxTimestamp timestamp, producerId long, producerEpoch int, "
    "baseSequence int, lastSequence int, isTransactional boolean, isControl boolean, controlType string, "
    "coordinatorEpoch int"
)


@dataclass(frozen=True)
class LogPart:
    """A whole partition log as fixed on the driver: the segment bytes that held it when planned."""

    topic: str
    partition: int
    extents: tuple[SegmentExtent, ...]
    fail_on_data_loss: bool = True


def plan(options: SourceOptions) -> list[LogPart]:
    """One part per selected topic-partition, each its whole log."""
    store = open_store(options.path)
    try:
        return plan_whole_logs(store, options.select_partitions(store), options.fail_on_data_loss)
    finally:
        store.close()


def plan_whole_logs(store: Store, partitions, fail_on_data_loss: bool) -> list[LogPart]:
    """Fix each partition's extents from its log start to its log end, one look per partition."""
    parts = []
    for topic, partition in partitions:
        log = store.partition(topic, partition)
        log_start, _, log_end = log.bounds()
        parts.append(LogPart(topic, partition, tuple(log.extents(log_start, log_end)), fail_on_data_loss))
    return parts


def log_batches(part: LogPart) -> Iterator[tuple[int, RecordBatch]]:
    """(segment base offset, batch) for every batch of the part, with the records view's data-loss rule."""
    return extent_batches(part.topic, part.partition, part.extents, fail_on_data_loss=part.fail_on_data_loss)


def read(part: LogPart | None, arrow_schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the part's batch headers; `part` is None when the plan was empty (Spark's stand-in)."""
    if part is None:
        return
    columns = _HeaderColumns(part.topic, part.partition)
    for segment, batch in log_batches(part):
        columns.add(segment, batch)
        if columns.rows >= ROWS_PER_ARROW_BATCH:
            yield columns.flush(arrow_schema)
    if columns.rows:
        yield columns.flush(arrow_schema)


def compression_name(attributes: int) -> str:
    """kafka-dump-log's codec name; an unknown code is shown, not an error, in a view meant for inspection."""
    code = attributes & COMPRESSION_MASK
    return Compression.name_of(code)


def control_fields(batch: RecordBatch) -> tuple[str | None, int | None]:
    """(controlType, coordinatorEpoch) of a control batch; (None, None) for data or unreadable markers."""
    if not batch.is_control:
        return None, None
    try:
        marker = batch.control_marker()
    except KafkaError:  # emptied by compaction or undecodable: nothing to report, not a failed query
        return None, None
    name = ControlType.kafka_name_of(marker.control_type)
    epoch = marker.coordinator_epoch if marker.control_type in (ControlType.ABORT, ControlType.COMMIT) else None
    return name, epoch


def _no_timestamp_as_null(timestamp: int) -> int | None:
    return None if timestamp == NO_TIMESTAMP else timestamp


#: (column, Arrow type or None for a timestamp, value from (segment, batch, control fields)) of
#: every column but topic and partition: name, type and source side by side, so they cannot drift.
_COLUMNS = (
    ("baseOffset", pa.int64(), lambda seg, b, ctl: b.base_offset),
    ("lastOffset", pa.int64(), lambda seg, b, ctl: b.last_offset),
    ("recordCount", pa.int32(), lambda seg, b, ctl: b.records_count),
    ("sizeBytes", pa.int32(), lambda seg, b, ctl: b.size),
    ("position", pa.int64(), lambda seg, b, ctl: b.position),
    ("segment", pa.int64(), lambda seg, b, ctl: seg),
    ("magic", pa.int32(), lambda seg, b, ctl: b.magic),
    ("crc", pa.int64(), lambda seg, b, ctl: b.crc),
    ("partitionLeaderEpoch", pa.int32(), lambda seg, b, ctl: b.partition_leader_epoch),
    ("compression", pa.string(), lambda seg, b, ctl: compression_name(b.attributes)),
    ("timestampType", pa.int32(), lambda seg, b, ctl: int(b.timestamp_type)),
    ("baseTimestamp", None, lambda seg, b, ctl: _no_timestamp_as_null(b.base_timestamp)),
    ("maxTimestamp", None, lambda seg, b, ctl: _no_timestamp_as_null(b.max_timestamp)),
    ("producerId", pa.int64(), lambda seg, b, ctl: b.producer_id),
    ("producerEpoch", pa.int32(), lambda seg, b, ctl: b.producer_epoch),
    ("baseSequence", pa.int32(), lambda seg, b, ctl: b.base_sequence),
    ("lastSequence", pa.int32(), lambda seg, b, ctl: b.last_sequence),
    ("isTransactional", pa.bool_(), lambda seg, b, ctl: b.is_transactional),
    ("isControl", pa.bool_(), lambda seg, b, ctl: b.is_control),
    ("controlType", pa.string(), lambda seg, b, ctl: ctl[0]),
    ("coordinatorEpoch", pa.int32(), lambda seg, b, ctl: ctl[1]),
)


class _HeaderColumns:
    """The header fields of the batches gathered so far, column by column.

    Only batches are decoded here, never records, so a Python value per field is cheap;
    Arrow takes each column in one call at flush.
    """

    def __init__(self, topic: str, partition: int):
        self.topic, self.partition = topic, partition
        self._reset()

    def _reset(self) -> None:
        self.values: list[list] = [[] for _ in _COLUMNS]
        self.rows = 0

    def add(self, segment: int, batch: RecordBatch) -> None:
        control = control_fields(batch)
        for column, (_, _, value_of) in zip(self.values, _COLUMNS, strict=True):
            column.append(value_of(segment, batch, control))
        self.rows += 1

    def flush(self, schema: pa.Schema) -> pa.RecordBatch:
        n = self.rows
        arrays = {
            "topic": pa.array([self.topic] * n, pa.string()),
            "partition": pa.array([self.partition] * n, pa.int32()),
        }
        for (name, kind, _), values in zip(_COLUMNS, self.values, strict=True):
            arrays[name] = timestamp_array(values) if kind is None else pa.array(values, kind)
        self._reset()
        return pa.RecordBatch.from_arrays([arrays[name] for name in schema.names], schema=schema)
