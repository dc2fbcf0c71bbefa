"""What the export tests share: a store's history with every kind of record, the read_committed oracle
(txlog.Consumer), and each format's table read back by its own library and by DuckDB."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from storage import Store
from tests.cli.cli_helpers import txlog, txlog_process
from txlog import Consumer, Producer
from txlog.topic_partition import TopicPartition

FORMATS = ("parquet", "delta", "iceberg")
#: (topic, partition, offset, key, value, headers, timestamp in ms): a row as the table and the Consumer both give it.
Row = tuple[str, int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int]


def make_store(path: str, **topics: int) -> None:
    with Store.open(path) as store:
        for name, partitions in topics.items():
            store.create_topic(name, partitions)


def transaction(path: str, tid: str, records: Iterable[tuple[str, int, Any, Any, Any]], *, commit: bool) -> None:
    """One transaction of `records` (topic, partition, key, value, headers), committed or aborted."""
    p = Producer(path, transactional_id=tid, compression_type="gzip")
    try:
        p.init_transactions()
        p.begin_transaction()
        for topic, partition, key, value, headers in records:
            p.send(topic, value=value, key=key, partition=partition, headers=headers)
        p.flush()
        if commit:
            p.commit_transaction()
        else:
            p.abort_transaction()
    finally:
        p.close()


def plain(path: str, records: Iterable[tuple[str, int, Any, Any, Any]]) -> None:
    """Records of an idempotent producer outside any transaction."""
    p = Producer(path)
    try:
        for topic, partition, key, value, headers in records:
            p.send(topic, value=value, key=key, partition=partition, headers=headers)
        p.flush()
    finally:
        p.close()


def export_cli(store: str, fmt: str, path: str, *topics: str) -> Any:
    """`txlog export` in this process; Iceberg's as a process: pyiceberg keeps a thread pool for the life
    of the process, which the in-process runner (rightly) reports as a thread the command left running."""
    args = ("export", "--format", fmt, "--to", path, *topics)
    if fmt == "iceberg":
        return txlog_process(*args, data_dir=store)
    return txlog(*args, data_dir=store)


def committed_rows(path: str, topics: Iterable[str]) -> list[Row]:
    """What a read_committed Consumer reads from the beginning to the end (the oracle)."""
    with Store.open(path, read_only=True) as store:
        tps = [TopicPartition(t, p) for t in topics for p in store.partitions(t)]
    consumer = Consumer(path, isolation_level="read_committed", enable_auto_commit=False)
    try:
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        rows: list[Row] = []
        while True:
            records = consumer.poll(timeout_ms=0, max_records=10_000)
            if not records:
                break
            rows += [(r.topic, r.partition, r.offset, r.key, r.value, tuple(r.headers), r.timestamp) for r in records]
    finally:
        consumer.close(autocommit=False)
    return sorted(rows)


def rows_of(table: Any) -> list[Row]:
    """A table's rows (pyarrow, or anything with the Arrow stream interface) as Rows, in offset order;
    duplicates are kept, so a row written twice shows."""
    table = pa.table(table)
    micros = table.column("timestamp").cast(pa.int64()).to_pylist()
    out = []
    for row, us in zip(table.drop_columns(["timestamp"]).to_pylist(), micros, strict=True):
        headers = tuple((h["key"], h["value"]) for h in row["headers"] or ())
        out.append((row["topic"], row["partition"], row["offset"], row["key"], row["value"], headers, us // 1000))
    return sorted(out)


# ---- each format read back by its own library, and by DuckDB -------------------------------------------


def read_with_library(fmt: str, path: str) -> pa.Table:
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path)  # dataset discovery: every file of every partition directory
    if fmt == "delta":
        from deltalake import DeltaTable

        return DeltaTable(path).to_pyarrow_table()
    return iceberg_table(path).scan().to_arrow()


def iceberg_table(path: str) -> Any:
    """The table from its newest metadata file alone (pyiceberg's StaticTable): no catalog needed to read it."""
    from pyiceberg.table import StaticTable

    newest = max(glob.glob(os.path.join(path, "metadata", "*.metadata.json")))
    return StaticTable.from_metadata(newest)


def read_with_duckdb(fmt: str, path: str) -> pa.Table:
    """DuckDB's own reading: Parquet files directly; Delta's current files as deltalake lists them
    (DuckDB's delta extension is downloaded at run time, which a machine without network cannot);
    Iceberg through pyiceberg's Arrow (the same for its iceberg extension)."""
    import duckdb

    con = duckdb.connect()
    try:
        if fmt == "parquet":
            return con.sql(f"SELECT * FROM read_parquet('{path}/*/*.parquet')").to_arrow_table()
        if fmt == "delta":
            from deltalake import DeltaTable

            files = DeltaTable(path).file_uris()
            if not files:
                return con.sql("SELECT 1 WHERE false").to_arrow_table()
            return con.sql(f"SELECT * FROM read_parquet({files!r})").to_arrow_table()
        con.register("exported", iceberg_table(path).scan().to_arrow())
        return con.sql("SELECT * FROM exported").to_arrow_table()
    finally:
        con.close()


def table_version(fmt: str, path: str) -> Any:
    """What changes with every commit: Delta's version, Iceberg's current snapshot, the Parquet file names."""
    if fmt == "delta":
        from deltalake import DeltaTable

        return DeltaTable(path).version() if DeltaTable.is_deltatable(path) else None
    if fmt == "iceberg":
        if not glob.glob(os.path.join(path, "metadata", "*.metadata.json")):
            return None
        snapshot = iceberg_table(path).current_snapshot()
        return None if snapshot is None else snapshot.snapshot_id
    return sorted(os.path.relpath(p, path) for p in glob.glob(os.path.join(path, "*", "*.parquet")))
