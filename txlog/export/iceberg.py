"""Iceberg tables through pyiceberg, with a SQLite catalog kept inside the table's directory.

A plain directory has no catalog, and an Iceberg commit is a catalog's atomic swap of the
table's metadata pointer; pyiceberg's SQL catalog on a SQLite file (`CATALOG_FILE`, in the
target directory) gives that swap without a server. The table's location is the target
directory itself (`metadata/`, `data/`), so any Iceberg reader can open its newest
`metadata/*.metadata.json` directly.

The next offsets of all partitions the table holds are one snapshot summary property
(`txlog.next-offsets`) of the append's snapshot, so rows and offsets are in one commit. It is
read back from the current snapshot, or the nearest ancestor that has it (a snapshot made by
another tool, e.g. a compaction, does not carry it).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from txlog.errors import ExportTargetError
from txlog.export.ranges import NEXT_OFFSETS_PROPERTY, TopicPartitionKey, decode_next_offsets
from txlog.scan.optional import optional_module

if TYPE_CHECKING:
    import pyarrow as pa

PURPOSE = "txlog export --format iceberg"
CATALOG_FILE = "_txlog_catalog.db"
CATALOG_NAME = "txlog"
IDENTIFIER = ("txlog", "export")


def _catalog(path: str) -> Any:
    optional_module("sqlalchemy", PURPOSE)  # pyiceberg's SQL catalog runs on it (pyiceberg[sql-sqlite])
    sql = optional_module("pyiceberg.catalog.sql", PURPOSE)
    root = os.path.abspath(path)
    return sql.SqlCatalog(CATALOG_NAME, uri=f"sqlite:///{os.path.join(root, CATALOG_FILE)}", warehouse=_uri(root))


def _uri(root: str) -> str:
    return "file://" + root


def _table(path: str) -> Any | None:
    if not os.path.exists(os.path.join(path, CATALOG_FILE)):
        return None
    catalog = _catalog(path)
    exceptions = optional_module("pyiceberg.exceptions", PURPOSE)
    try:
        return catalog.load_table(IDENTIFIER)
    except exceptions.NoSuchTableError:
        return None


def recorded_offsets(path: str) -> dict[TopicPartitionKey, int]:
    """The next offsets recorded by the newest snapshot that carries them; {} for a new table."""
    table = _table(path)
    if table is None:
        return {}
    snapshot = table.current_snapshot()
    while snapshot is not None:
        text = snapshot.summary.get(NEXT_OFFSETS_PROPERTY) if snapshot.summary else None
        if text is not None:
            return decode_next_offsets(text, path)
        parent = snapshot.parent_snapshot_id
        snapshot = table.snapshot_by_id(parent) if parent is not None else None
    return {}


def check_columns(path: str, schema: pa.Schema) -> None:
    table = _table(path)
    if table is None:
        return
    names = [f.name for f in table.schema().fields]
    if names != schema.names:
        raise ExportTargetError(
            f"{path} holds an Iceberg table with the columns {', '.join(names)}; an export writes "
            f"{', '.join(schema.names)}"
        )


def commit(path: str, reader: pa.RecordBatchReader, next_offsets: dict[TopicPartitionKey, int]) -> None:
    """Append `reader`'s rows in one snapshot whose summary records `next_offsets` (every partition's)."""
    from txlog.export.ranges import encode_next_offsets

    catalog = _catalog(path)
    catalog.create_namespace_if_not_exists(IDENTIFIER[0])
    table = catalog.create_table_if_not_exists(IDENTIFIER, schema=reader.schema, location=_uri(os.path.abspath(path)))
    exceptions = optional_module("pyiceberg.exceptions", PURPOSE)
    try:
        table.append(reader, snapshot_properties={NEXT_OFFSETS_PROPERTY: encode_next_offsets(next_offsets)})
    except exceptions.CommitFailedException as exc:  # another writer committed first (not a txlog export: those lock)
        raise ExportTargetError(f"{path}: the Iceberg commit failed, nothing was added: {exc}") from exc


def table_of(path: str) -> Any:
    """The exported table, for readers (pyiceberg's Table: `.scan().to_arrow()`)."""
    table = _table(path)
    if table is None:
        raise ExportTargetError(f"{path} holds no Iceberg table txlog exported")
    return table
