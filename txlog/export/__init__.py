"""Committed records of a store into a lake table (Parquet files, Delta Lake, Iceberg), exactly once.

    from txlog.export import export
    result = export("txlog-data", ["orders"], "lake/orders", "delta")

`export` reads each partition from the next offset the table records to the partition's last
stable offset, through `txlog.scan` under read_committed (so no aborted or still-open record
is ever written), and commits the rows together with the new next offsets in the table's own
metadata (txlog/export/ranges.py says what is recorded where). Running it again exports only
what was committed since; a run that dies before its commit leaves the table as it was.

One run at a time per table: an export holds an exclusive lock on the target directory's
`_txlog_export.lock` (an flock: a killed run leaves none behind). The store is opened
read-only, so an export runs beside producers and works on a real Kafka data directory.
The libraries (pyarrow, deltalake, pyiceberg) are imported when a run starts.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from storage.lock import FileLock
from storage.store import Store
from txlog.export.ranges import FORMATS, LOCK, ExportResult, RowCounter, check_target, check_topics, plan_export

__all__ = ["FORMATS", "ExportResult", "export"]


def export(
    store: str | os.PathLike[str] | Store,
    topics: Sequence[str],
    path: str | os.PathLike[str],
    fmt: str,
    *,
    on_rows: Callable[[int], None] | None = None,
) -> ExportResult:
    """Export what `topics` committed since the last export to the `fmt` table at `path`.

    `on_rows(total)` is told the rows written so far as batches go out (for progress).
    """
    if fmt not in FORMATS:
        from txlog.errors import IllegalArgumentError

        raise IllegalArgumentError(f"unknown export format {fmt!r} (one of: {', '.join(FORMATS)})")
    from txlog.scan.optional import optional_module

    optional_module("pyarrow", f"txlog export --format {fmt}")
    target = os.fspath(path)
    names = list(dict.fromkeys(topics))
    opened = store if isinstance(store, Store) else Store.open(store, read_only=True)
    try:
        check_topics(opened, names)
        check_target(target, fmt, mark=False)  # the directory exists for the lock; marked under it
        lock = FileLock(os.path.join(target, LOCK))
        try:
            with lock:
                return _export_locked(opened, names, target, fmt, on_rows)
        finally:
            lock.close()
    finally:
        if opened is not store:
            opened.close()


def _export_locked(
    store: Store, topics: list[str], path: str, fmt: str, on_rows: Callable[[int], None] | None
) -> ExportResult:
    from txlog.export import delta, iceberg, parquet

    check_target(path, fmt)
    recorded: dict[tuple[str, int], int]
    if fmt == "delta":
        recorded = delta.recorded_offsets(path, [(t, p) for t in topics for p in store.partitions(t)])
    elif fmt == "iceberg":
        recorded = iceberg.recorded_offsets(path)
    else:
        parquet.remove_partial_files(path)
        recorded = parquet.recorded_offsets(path)
    plan = plan_export(store, topics, recorded)
    schema = plan.scan.schema
    counter = RowCounter(topics, on_rows)
    if plan.advances:
        batches = counter.count(plan.scan.to_batches())
        if fmt == "parquet":
            parquet.commit(path, schema, batches, plan.starts, plan.next_offsets)
        else:
            import pyarrow as pa

            reader = pa.RecordBatchReader.from_batches(schema, batches)
            if fmt == "delta":
                delta.check_columns(path, schema)
                with counter.original_errors():
                    delta.commit(path, reader, plan.next_offsets)
            else:
                iceberg.check_columns(path, schema)
                with counter.original_errors():  # the property holds every partition the table has
                    iceberg.commit(path, reader, {**recorded, **plan.next_offsets})
    spans = {tp: (start, plan.next_offsets[tp]) for tp, start in plan.starts.items()}
    return ExportResult(fmt, path, counter.rows, spans, plan.deleted)
