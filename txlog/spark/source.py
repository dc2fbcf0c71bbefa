"""The `txlog` format: a PySpark Python data source over a txlog store or Kafka data directory.

    spark.read.format("txlog").option("subscribe", "orders").load("/path/to/store")

`DataSource` is what Spark instantiates from the format name; it hands out a batch
reader (planning on the driver, reading on executors), a stream reader, and the exactly-once
batch and streaming writers of txlog/spark/writer.py. Which rows
come out is chosen by the `view` option: the records themselves (Spark's Kafka source
schema), one row per batch, or the decoded `__transaction_state` history.

The classes live in an importable module and are pickled by reference, so executors
need nothing but the txlog package installed. `format("txlog")` always reads here;
`txlog.spark.read` (txlog/spark/jvm_reader.py) reads the record view with the JVM reader
instead, format "txlog_jvm", with the same planner's plan, and comes here for the rest.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from storage.errors import KafkaError
from txlog.scan.range_reader import read_range
from txlog.spark.options import FORMAT, SourceOptions, parse_options, plan_batch
from txlog.spark.schemas import record_schema
from txlog.spark.worker_errors import one_line_errors


class TxlogDataSource(DataSource):
    """Spark's entry point for `format("txlog")`."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        with one_line_errors():
            options = parse_options(self.options, streaming=None)
        if options.view != "records":
            return _view_module(options.view).SCHEMA
        return record_schema(
            include_headers=options.include_headers, include_transaction_columns=options.include_transaction_columns
        )

    def reader(self, schema: StructType) -> DataSourceReader:
        with one_line_errors():
            return TxlogReader(parse_options(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from txlog.spark.stream import RefusedStreamReader, TxlogStreamReader  # streaming is the rarer path

        try:
            options = parse_options(self.options, streaming=True)
        except KafkaError as exc:
            # Raised here, PySpark 4.3's stream runner would hide it behind an UnboundLocalError of
            # its own (its `finally: reader.stop()` has no reader): the query's first call raises it
            return RefusedStreamReader(exc)
        return TxlogStreamReader(options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from txlog.spark.writer import batch_writer  # the sink: txlog/spark/writer.py

        with one_line_errors():
            return batch_writer(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from txlog.spark.writer import stream_writer

        with one_line_errors():
            return stream_writer(self.options, schema, overwrite)


class TxlogReader(DataSourceReader):
    """A batch query: `partitions()` runs once on the driver, `read()` once per task on an executor."""

    def __init__(self, options: SourceOptions, schema: StructType):
        self.options = options
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")

    def partitions(self) -> list[InputPartition]:
        with one_line_errors():
            return [InputPartition(part) for part in plan_view(self.options)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        with one_line_errors():
            yield from read_view(self.options, partition.value, self.arrow_schema)


def _view_module(view: str):
    """The module of an analysis view: its SCHEMA, plan(options) and read(part, arrow_schema)."""
    if view == "batches":
        import txlog.spark.batches_view as batches_view

        return batches_view
    import txlog.spark.transactions_view as transactions_view

    return transactions_view


def plan_view(options: SourceOptions) -> list:
    """The picklable input partitions of a batch query of the chosen view."""
    if options.view != "records":
        return _view_module(options.view).plan(options)
    return plan_batch(options)


def read_view(options: SourceOptions, part, arrow_schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Read one input partition planned by `plan_view`.

    Spark replaces an empty list of input partitions by one partition holding None.
    """
    if part is None:
        return iter(())
    if options.view != "records":
        return _view_module(options.view).read(part, arrow_schema)
    return read_range(part, arrow_schema, fail_on_data_loss=options.fail_on_data_loss)
