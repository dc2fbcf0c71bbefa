"""The `txlog` format as a sink: batch and streaming writes, exactly once, with KIP-939 two-phase commit.

    df.write.format("txlog").option("topic", "out").mode("append").save("/path/to/store")
    df.writeStream.format("txlog").option("topic", "out").option("checkpointLocation", ck).start(store)

Rows take Spark's Kafka sink columns (`key`, `value`, `headers`, `topic`, `partition`). Each task
writes its rows in one two-phase-commit transaction and prepares it; the driver's commit records
its decision and completes them all; a batch already decided is a no-op when it runs again (the
replay guard). txlog/spark/write_guard.py keeps the protocol on the store; docs/spark.md
"Writing" argues why it is exactly once, failure by failure.

Arrow batches come in (DataSourceArrowWriter / DataSourceStreamArrowWriter) and go out as
natively encoded record batches (`Producer.produce_many`): columns, not rows, cross into Python.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

import txlog.spark.write_guard as write_guard
from storage.store import Store
from txlog.clients.partitioner import partition_many
from txlog.clients.prepared_txn_state import PreparedTxnState
from txlog.clients.producer import Producer
from txlog.errors import IllegalArgumentError, InvalidTxnStateError, UnknownTopicOrPartitionError
from txlog.spark.worker_errors import one_line_errors
from txlog.spark.write_guard import Decision

#: Spark's Kafka sink columns (KafkaWriter's attributes); txlog refuses any other.
SINK_COLUMNS = ("key", "value", "headers", "topic", "partition")
#: The options the sink takes (`path` is the store; `checkpointLocation` is Spark's own).
SINK_OPTIONS = ("path", "topic", "queryId", "batchId", "checkpointLocation")
#: Where Spark's micro-batch execution names the running batch to its tasks (StreamExecution.BATCH_ID_KEY).
BATCH_ID_PROPERTY = "streaming.sql.batchId"
#: Bytes per record batch the tasks' producers build: big batches, few appends.
TASK_BATCH_BYTES = 1024 * 1024


@dataclass(frozen=True)
class WritePlan:
    """What the driver fixed for a write's tasks (pickled to the executors with the writer)."""

    path: str
    topic: str | None  # the default topic: rows without a `topic` value go there
    query_id: str
    batch_id: int | None  # a batch write's; None for streaming (the tasks read Spark's)
    decided_through: int  # the query's latest decided batch when the write was planned (-1: none)
    columns: tuple[str, ...]


@dataclass
class TxlogCommitMessage(WriterCommitMessage):
    """One task's answer: its transaction, prepared, as the driver must complete it."""

    partition_id: int
    transactional_id: str
    state: str  # PreparedTxnState text; "" when the task wrote nothing (a decided batch)
    rows: int
    skipped: bool


# ---- options and schema, checked on the driver when the write is set up --------------------------------


def _option(options: Mapping[str, str], name: str) -> str | None:
    """An option by Spark's case-insensitive name (Spark hands them over lower-cased)."""
    value = options.get(name)
    if value is None:
        value = options.get(name.lower())
    return value


def check_options(options: Mapping[str, str]) -> str:
    """Refuse an option the sink does not take (a typo must not pass silently); returns the store path."""
    known = {o.lower() for o in SINK_OPTIONS}
    for name in options:
        if name.lower() not in known:
            raise IllegalArgumentError(
                f"unknown option '{name}' for the txlog sink: it takes {', '.join(SINK_OPTIONS[1:])} and the store path"
            )
    path = _option(options, "path")
    if not path:
        raise IllegalArgumentError("the txlog sink needs a store path: .save('/path/to/store')")
    return path


def check_schema(schema: StructType, topic: str | None) -> tuple[str, ...]:
    """Spark's Kafka sink rules for the columns, worded as its KafkaWriter words them; returns the names."""
    types = {f.name: f.dataType for f in schema.fields}
    for name in types:
        if name not in SINK_COLUMNS:
            raise IllegalArgumentError(
                f"unknown column '{name}' for the txlog sink: its columns are {', '.join(SINK_COLUMNS)}"
            )
    if "value" not in types:
        raise IllegalArgumentError("Required attribute 'value' not found")
    for name in ("key", "value"):
        if name in types and not isinstance(types[name], (StringType, BinaryType)):
            raise IllegalArgumentError(f"{name} attribute type must be a string or binary")
    if "topic" not in types and topic is None:
        raise IllegalArgumentError(
            "topic option required when no 'topic' attribute is present. Use the topic option for setting a topic."
        )
    if "topic" in types and not isinstance(types["topic"], StringType):
        raise IllegalArgumentError("Topic type must be a string")
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise IllegalArgumentError("partition attribute type must be an int")
    if "headers" in types and not _is_headers_type(types["headers"]):
        raise IllegalArgumentError("headers attribute type must be an array<struct<key:string,value:binary>>")
    return tuple(types)


def _is_headers_type(data_type) -> bool:
    if not isinstance(data_type, ArrayType) or not isinstance(data_type.elementType, StructType):
        return False
    fields = [(f.name, type(f.dataType)) for f in data_type.elementType.fields]
    return fields == [("key", StringType), ("value", BinaryType)]


def _batch_query_id(options: Mapping[str, str]) -> tuple[str, int]:
    """A batch write's (query id, batch id): the user's `queryId` (a re-run with it is a no-op) and
    `batchId` (default 0), or a fresh id, so every write without one is new."""
    query_id = _option(options, "queryId")
    batch = _option(options, "batchId")
    if query_id is None:
        if batch is not None:
            raise IllegalArgumentError("option 'batchId' needs option 'queryId'")
        return uuid.uuid4().hex, 0
    return write_guard.check_query_id(query_id), _batch_id(batch)


def _batch_id(text: str | None) -> int:
    if text is None:
        return 0
    if not text.isascii() or not text.isdigit() or int(text) >= 1 << 62:
        raise IllegalArgumentError(f"option 'batchId' must be a number >= 0, not {text!r}")
    return int(text)


def stream_query_id(options: Mapping[str, str]) -> str:
    """A streaming write's query id, the same across restarts from the checkpoint: the `queryId`
    option, else the id Spark keeps in the checkpoint's `metadata` file (StreamingQuery.id)."""
    query_id = _option(options, "queryId")
    if query_id is not None:
        return write_guard.check_query_id(query_id)
    checkpoint = _option(options, "checkpointLocation")
    if not checkpoint:
        raise IllegalArgumentError(
            "a streaming write to txlog needs option 'checkpointLocation' (or 'queryId'), which names the query "
            "across restarts"
        )
    local = checkpoint[len("file:") :] if checkpoint.startswith("file:") else checkpoint
    try:
        with open(os.path.join(local, "metadata"), encoding="utf-8") as f:
            return write_guard.check_query_id(json.loads(f.readline())["id"])
    except (OSError, ValueError, KeyError, TypeError):
        raise IllegalArgumentError(
            f"cannot read the query id from checkpoint {checkpoint!r} (a local directory is needed): "
            "give the query an id with option 'queryId'"
        ) from None


def batch_writer(options: Mapping[str, str], schema: StructType, overwrite: bool) -> TxlogBatchWriter:
    """`df.write.format("txlog")`: checked here, when `.save()` runs, before any task."""
    if overwrite:
        raise IllegalArgumentError("save mode Overwrite is not supported by the txlog sink: use mode('append')")
    path = check_options(options)
    topic = _option(options, "topic")
    columns = check_schema(schema, topic)
    query_id, batch_id = _batch_query_id(options)
    with _driver_store(path) as store:
        _check_topic(store, path, topic)
        decided = write_guard.settle(store, query_id)
    return TxlogBatchWriter(WritePlan(path, topic, query_id, batch_id, decided, columns))


def stream_writer(options: Mapping[str, str], schema: StructType, overwrite: bool) -> TxlogStreamWriter:
    """`df.writeStream.format("txlog")`: Spark asks for this on the driver before every micro-batch
    (and again to commit it), so the guard is settled before each batch's tasks start."""
    if overwrite:
        raise IllegalArgumentError("output mode Complete is not supported by the txlog sink: use append or update")
    path = check_options(options)
    topic = _option(options, "topic")
    columns = check_schema(schema, topic)
    if _option(options, "batchId") is not None:
        raise IllegalArgumentError("option 'batchId' is for batch writes: a stream's batches are Spark's")
    query_id = stream_query_id(options)
    with _driver_store(path) as store:
        _check_topic(store, path, topic)
        decided = write_guard.settle(store, query_id)
    return TxlogStreamWriter(WritePlan(path, topic, query_id, None, decided, columns))


# ---- the writers -------------------------------------------------------------------------------------


class TxlogBatchWriter(DataSourceArrowWriter):
    """`df.write`: one batch (the plan's batch id) of one query id."""

    def __init__(self, plan: WritePlan):
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TxlogCommitMessage:
        assert self.plan.batch_id is not None, "a batch write's plan carries its batch id"
        with one_line_errors():
            return write_task(self.plan, self.plan.batch_id, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        assert self.plan.batch_id is not None
        with one_line_errors():
            commit_batch(self.plan.path, self.plan.query_id, self.plan.batch_id, messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        assert self.plan.batch_id is not None
        with one_line_errors():
            abort_batch(self.plan.path, self.plan.query_id, self.plan.batch_id, messages)


class TxlogStreamWriter(DataSourceStreamArrowWriter):
    """`df.writeStream`: Spark's batch ids; the tasks read theirs from the task's local properties."""

    def __init__(self, plan: WritePlan):
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TxlogCommitMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        text = None if context is None else context.getLocalProperty(BATCH_ID_PROPERTY)
        with one_line_errors():
            if text is None:
                raise InvalidTxnStateError(f"the task has no Spark batch id ({BATCH_ID_PROPERTY} is not set)")
            return write_task(self.plan, int(text), iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        with one_line_errors():
            commit_batch(self.plan.path, self.plan.query_id, batchId, messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        with one_line_errors():
            abort_batch(self.plan.path, self.plan.query_id, batchId, messages)


# ---- a task: its rows in one prepared transaction -------------------------------------------------------


def write_task(plan: WritePlan, batch_id: int, batches: Iterator[pa.RecordBatch]) -> TxlogCommitMessage:
    """Write the task's rows in one two-phase-commit transaction and prepare it (on an executor)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    partition_id = context.partitionId() if context is not None else 0
    tid = write_guard.transactional_id(plan.query_id, batch_id, partition_id)
    if batch_id <= plan.decided_through:
        # The batch was decided before (a replayed micro-batch, a re-run write): its records are in
        # the log already, and the driver settled its transactions before this task started.
        return TxlogCommitMessage(partition_id, tid, "", 0, skipped=True)
    rows = 0
    with Producer(
        plan.path, transactional_id=tid, transaction_two_phase_commit_enable=True, batch_size=TASK_BATCH_BYTES
    ) as producer:
        # aborts what an earlier attempt of this task left open, and fences it if it still runs
        producer.init_transactions()
        producer.begin_transaction()
        for batch in batches:
            rows += send_batch(producer, batch, plan.topic)
        offsets, group = write_guard.written_mark(plan.query_id, batch_id, partition_id)
        producer.send_offsets_to_transaction(offsets, group)
        state = producer.prepare_transaction()
        # closing leaves the prepared transaction open (KIP-939): the driver completes it
    return TxlogCommitMessage(partition_id, tid, str(state), rows, skipped=False)


def send_batch(producer: Producer, batch: pa.RecordBatch, default_topic: str | None) -> int:
    """Send one Arrow batch: one `produce_many` per (topic, partition) group, rows in order within each."""
    if batch.num_rows == 0:
        return 0
    names = batch.schema.names
    if "topic" not in names:
        assert default_topic is not None, "check_schema requires the topic option without a topic column"
        _send_topic(producer, default_topic, batch)
        return batch.num_rows
    topics = batch.column(names.index("topic"))
    if topics.null_count:
        if default_topic is None:
            raise IllegalArgumentError("null topic present in the data. Use the topic option for setting a topic.")
        topics = pc.fill_null(topics, default_topic)
    distinct = pc.unique(topics).to_pylist()
    if len(distinct) == 1:
        _send_topic(producer, distinct[0], batch)
    else:
        for topic in distinct:
            _send_topic(producer, topic, batch.filter(pc.equal(topics, topic)))
    return batch.num_rows


def _send_topic(producer: Producer, topic: str, batch: pa.RecordBatch) -> None:
    """Rows of one topic, one `produce_many` per partition: a row's `partition` where given, else
    Kafka's partitioner on its key, computed here for the whole column at once (natively), so the
    producer gets whole runs of rows for one partition and no row is looked at in Python."""
    names = batch.schema.names
    keys = _bytes_column(batch, "key")
    given = batch.column(names.index("partition")) if "partition" in names else None
    if given is not None and given.null_count == batch.num_rows:
        given = None
    count = producer.store.partition_count(topic)
    if given is None and (keys is None or count == 1):
        _produce(producer, topic, batch, keys, None)  # one partition, or keyless rows: the sticky partition
        return
    chosen = pa.array(partition_many(keys or [None] * batch.num_rows, count), type=pa.int32())
    if given is not None:
        chosen = pc.if_else(pc.is_null(given), chosen, given.cast(pa.int32()))
    distinct = pc.unique(chosen).to_pylist()
    for p in distinct:  # -1: a keyless row without a partition, to the producer's sticky partition
        part = batch if len(distinct) == 1 else batch.filter(pc.equal(chosen, p))
        _produce(producer, topic, part, keys if part is batch else _bytes_column(part, "key"), None if p < 0 else p)


def _produce(producer: Producer, topic: str, batch: pa.RecordBatch, keys: list | None, partition: int | None) -> None:
    values = _bytes_column(batch, "value")
    assert values is not None, "check_schema requires a value column"
    producer.produce_many(topic, values, keys, partition=partition, headers=_headers_column(batch))


def _bytes_column(batch: pa.RecordBatch, name: str) -> list | None:
    """A key or value column as bytes (strings as their UTF-8, as Spark's Kafka sink sends them)."""
    names = batch.schema.names
    if name not in names:
        return None
    column = batch.column(names.index(name))
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = column.cast(pa.binary() if pa.types.is_string(column.type) else pa.large_binary())
    return column.to_pylist()


def _headers_column(batch: pa.RecordBatch) -> list | None:
    """The headers column as the producer takes it: per row None or [(key, value), ...]."""
    names = batch.schema.names
    if "headers" not in names:
        return None
    rows = batch.column(names.index("headers")).to_pylist()
    return [None if row is None else [(h["key"], h["value"]) for h in row] for row in rows]


# ---- the driver: decide, complete, abort ------------------------------------------------------------


def commit_batch(path: str, query_id: str, batch_id: int, messages: list[WriterCommitMessage | None]) -> None:
    """Record the decision (the commit point), then complete every task's prepared transaction."""
    with _driver_store(path) as store:
        decided, written = write_guard.latest_decision(store, query_id)
        if decided is not None and decided.batch_id >= batch_id:
            # decided before: the tasks wrote nothing (they saw it when the batch was planned)
            if decided.batch_id == batch_id:
                write_guard.complete(store, decided, written)
            return
        answers = _task_answers(messages)
        if any(m.skipped for m in answers):
            raise InvalidTxnStateError(
                f"batch {batch_id} of query {query_id} was planned as decided, but no decision for it is in the store"
            )
        write_guard.check_prepared(store, [(m.transactional_id, PreparedTxnState.parse(m.state)) for m in answers])
        decision = Decision(query_id, batch_id, tuple(m.state for m in answers))
        write_guard.record_decision(store, decision)
        write_guard.complete(store, decision)


def _task_answers(messages: list[WriterCommitMessage | None]) -> list[TxlogCommitMessage]:
    answers = sorted((m for m in messages if isinstance(m, TxlogCommitMessage)), key=lambda m: m.partition_id)
    if len(answers) != len(messages) or [m.partition_id for m in answers] != list(range(len(answers))):
        raise InvalidTxnStateError("the write's commit messages do not cover its tasks 0..n-1 once each")
    return answers


def abort_batch(path: str, query_id: str, batch_id: int, messages: list[WriterCommitMessage | None]) -> None:
    """Abort every transaction of the batch's tasks (by their ids: a failed task sends no message)."""
    with _driver_store(path) as store:
        decided = write_guard.settle(store, query_id)
        if decided >= batch_id:
            return  # decided: nothing of it is left to abort, and settle completed what was left
        for partition_id in range(len(messages)):
            write_guard.abort(store, write_guard.transactional_id(query_id, batch_id, partition_id))


def _check_topic(store: Store, path: str, topic: str | None) -> None:
    """The `topic` option names a topic of the store (rows' own topics are checked as they are sent)."""
    if topic is not None and not store.has_topic(topic):
        raise UnknownTopicOrPartitionError(f"topic '{topic}' does not exist in store {path}: create it first")


@contextmanager
def _driver_store(path: str) -> Iterator[Store]:
    """The store, opened once for all of a driver step's clients (each open and close of a store
    costs fsyncs of its derived files). A path without a store is refused, not made into one."""
    if not os.path.isdir(path):
        raise IllegalArgumentError(f"no txlog store at {path}: a write goes into an existing store and topic")
    store = Store.open(path)
    try:
        yield store
    finally:
        store.close()
