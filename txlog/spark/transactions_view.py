"""`view=transactions`: the transaction coordinator's log, `__transaction_state`, decoded, as a DataFrame.

    spark.read.format("txlog").option("view", "transactions").load(path)

Every state change of every transactional id is a record of that log, so its whole
history is one row per record: how long transactions stay open, which ids were
fenced or abort often, which partitions a transaction touched. For example the time
from start to completion of each finished transaction:

    df.where(F.col("state").isin("CompleteCommit", "CompleteAbort"))
      .select("transactionalId", (F.unix_millis("transactionLastUpdateTimestamp")
                                  - F.unix_millis("transactionStartTimestamp")).alias("openMs"))

Rows come from every partition of `__transaction_state`, each in offset order
(`logPartition`, `logOffset` say where a row is; Spark does not keep that order across
partitions). A store without the topic (no transactional producer ever ran) gives no
rows rather than an error. `subscribe` / `assign` may narrow the read to some of its
partitions but may not name other topics; offsets and isolation do not apply.

Keys and values are decoded by `txlog.schemas.transaction_log`, so the rows say what a
coordinator loading this log would rebuild. `state` uses Kafka's names (Empty, Ongoing,
PrepareCommit, ...). A tombstone (null value: the id expired and was removed) keeps its
`transactionalId` and has every value column null, state included: nothing was
persisted, and `Dead` exists only in a coordinator's memory (kafka-dump-log prints
`<DELETE>` for it). A record whose key has a version newer than Kafka's 0 is a record
type this reader does not know; Kafka's loader skips those, and here it is a row
with only its log position set. Bytes that do not decode fail the query, naming the
record. Timestamps of -1 (no transaction started) are null, and so is
`clientTransactionVersion` for a v0 value, which has no such field.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pyarrow as pa

from storage.errors import CorruptRecordError
from storage.records import Record
from storage.store import Store
from storage.topic_name import TRANSACTION_STATE_TOPIC
from txlog.errors import IllegalArgumentError
from txlog.scan.arrow_columns import timestamp_array
from txlog.scan.planning import open_store
from txlog.scan.range_reader import ROWS_PER_ARROW_BATCH
from txlog.schemas.transaction_log import KEY_VERSION, TxnLogValue, decode_key, decode_value
from txlog.spark.batches_view import LogPart, log_batches, plan_whole_logs
from txlog.spark.options import SourceOptions

SCHEMA = (
    "transactionalId string, producerId long, producerEpoch int, state string, transactionTimeoutMs int, "
    "partitions array<struct<topic: string, partition: int>>, transactionStartTimestamp timestamp, "
    "transactionLastUpdateTimestamp timestamp, previousProducerId long, nextProducerId long, "
    "nextProducerEpoch int, clientTransactionVersion int, logPartition int, logOffset long, logTimestamp timestamp"
)

_VERSION = struct.Struct(">h")


def plan(options: SourceOptions) -> list[LogPart]:
    """One part per partition of `__transaction_state` (none if the topic does not exist)."""
    store = open_store(options.path)
    try:
        return plan_whole_logs(store, _log_partitions(store, options), options.fail_on_data_loss)
    finally:
        store.close()


def _log_partitions(store: Store, options: SourceOptions) -> list[tuple[str, int]]:
    """All of the topic's partitions, or those `assign`/`subscribe` pick; naming another topic is a mistake."""
    if options.has_topic_selection:
        selected = options.select_partitions(store)
        others = sorted({topic for topic, _ in selected if topic != TRANSACTION_STATE_TOPIC})
        if others:
            raise IllegalArgumentError(
                f"view 'transactions' reads only {TRANSACTION_STATE_TOPIC}; the topic selection also names "
                f"{', '.join(others)}"
            )
        return selected
    if not store.has_topic(TRANSACTION_STATE_TOPIC):
        return []
    return [(TRANSACTION_STATE_TOPIC, p) for p in store.partitions(TRANSACTION_STATE_TOPIC)]


def read(part: LogPart | None, arrow_schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the part's decoded records; `part` is None when the plan was empty (Spark's stand-in)."""
    if part is None:
        return
    rows: list[tuple] = []
    for _, batch in log_batches(part):
        if batch.is_control:
            continue  # markers are not coordinator records (nothing writes them here transactionally)
        rows.extend(decode_row(part, record) for record in batch.records())
        if len(rows) >= ROWS_PER_ARROW_BATCH:
            yield _arrow(rows, part.partition, arrow_schema)
            rows = []
    if rows:
        yield _arrow(rows, part.partition, arrow_schema)


def decode_row(part: LogPart, record: Record) -> tuple:
    """(transactionalId, value, value version, offset, timestamp) of one record; value None for a tombstone."""
    if _key_version(record.key) > KEY_VERSION:
        return None, None, None, record.offset, record.timestamp
    try:
        transactional_id = decode_key(record.key)
        value = decode_value(record.value)
    except CorruptRecordError as exc:
        raise CorruptRecordError(
            f"record at offset {record.offset} of {part.topic}-{part.partition} is not a transaction log record: {exc}"
        ) from None
    version = None if record.value is None else _VERSION.unpack_from(record.value)[0]  # None: a tombstone
    return transactional_id, value, version, record.offset, record.timestamp


def _key_version(key: bytes | None) -> int:
    """The key's i16 version prefix (-1 if it has none), read before decoding to tell new record types apart."""
    return _VERSION.unpack_from(key)[0] if key is not None and len(key) >= _VERSION.size else -1


def _arrow(rows: list[tuple], log_partition: int, schema: pa.Schema) -> pa.RecordBatch:
    ids, values, versions, offsets, timestamps = zip(*rows, strict=True)
    n = len(rows)

    def column(get) -> list:
        return [None if v is None else get(v) for v in values]

    arrays = {
        "transactionalId": pa.array(ids, pa.string()),
        "producerId": pa.array(column(lambda v: v.producer_id), pa.int64()),
        "producerEpoch": pa.array(column(lambda v: v.producer_epoch), pa.int32()),
        "state": pa.array(column(lambda v: v.state.kafka_name), pa.string()),
        "transactionTimeoutMs": pa.array(column(lambda v: v.timeout_ms), pa.int32()),
        "partitions": pa.array(column(_partition_structs), schema.field("partitions").type),
        "transactionStartTimestamp": timestamp_array(column(lambda v: _ms_or_none(v.start_ms))),
        "transactionLastUpdateTimestamp": timestamp_array(column(lambda v: _ms_or_none(v.last_update_ms))),
        "previousProducerId": pa.array(column(lambda v: v.previous_producer_id), pa.int64()),
        "nextProducerId": pa.array(column(lambda v: v.next_producer_id), pa.int64()),
        "nextProducerEpoch": pa.array(column(lambda v: v.next_producer_epoch), pa.int32()),
        "clientTransactionVersion": pa.array(
            [_client_transaction_version(v, version) for v, version in zip(values, versions, strict=True)], pa.int32()
        ),
        "logPartition": pa.array([log_partition] * n, pa.int32()),
        "logOffset": pa.array(offsets, pa.int64()),
        "logTimestamp": timestamp_array(timestamps),
    }
    return pa.RecordBatch.from_arrays([arrays[name] for name in schema.names], schema=schema)


def _partition_structs(value: TxnLogValue) -> list[dict]:
    return [{"topic": topic, "partition": partition} for topic, partition in value.partitions]


def _client_transaction_version(value: TxnLogValue | None, version: int | None) -> int | None:
    """Only a v1 (flexible) value has the field; decode_value's 0 for v0 is a default, not data."""
    return value.client_transaction_version if value is not None and version is not None and version >= 1 else None


def _ms_or_none(ms: int) -> int | None:
    return None if ms < 0 else ms
