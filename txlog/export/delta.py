"""Delta Lake tables through deltalake (delta-rs): rows and recorded offsets in one commit.

Each partition's next offset is a SetTransaction (Delta's own idempotence action: an app id and
a version) in the commit that adds the rows: app id `txlog:<topic>:<partition>`, version the
next offset to export. delta-rs writes the data files first and then the commit file, which
appears atomically (put-if-absent on the log's next version); a run killed before that leaves
only data files no version names, which readers never see (and `DeltaTable.vacuum` removes).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from txlog.errors import ExportTargetError
from txlog.export.ranges import TopicPartitionKey, app_id
from txlog.scan.optional import optional_module

if TYPE_CHECKING:
    import pyarrow as pa

PURPOSE = "txlog export --format delta"


def recorded_offsets(path: str, partitions: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
    """The next offset the table records for each of `partitions` that it holds."""
    deltalake = optional_module("deltalake", PURPOSE)
    if not deltalake.DeltaTable.is_deltatable(path):
        return {}
    table = deltalake.DeltaTable(path)
    out = {}
    for tp in partitions:
        version = table.transaction_version(app_id(*tp))
        if version is not None:
            out[tp] = version
    return out


def check_columns(path: str, schema: pa.Schema) -> None:
    """An existing table must have the export's columns (a table made by something else may not)."""
    deltalake = optional_module("deltalake", PURPOSE)
    if not deltalake.DeltaTable.is_deltatable(path):
        return
    names = [f.name for f in deltalake.DeltaTable(path).schema().fields]
    if names != schema.names:
        raise ExportTargetError(
            f"{path} holds a Delta table with the columns {', '.join(names)}; an export writes "
            f"{', '.join(schema.names)}"
        )


def commit(path: str, reader: pa.RecordBatchReader, next_offsets: dict[TopicPartitionKey, int]) -> None:
    """Append `reader`'s rows and every partition's next offset as one Delta commit (creating the table)."""
    deltalake = optional_module("deltalake", PURPOSE)
    transactions = [deltalake.Transaction(app_id(*tp), offset) for tp, offset in sorted(next_offsets.items())]
    errors = optional_module("deltalake.exceptions", PURPOSE)
    try:
        deltalake.write_deltalake(
            path,
            reader,
            mode="append",
            commit_properties=deltalake.CommitProperties(app_transactions=transactions),
        )
    except errors.DeltaError as exc:  # a commit that lost to another writer, a protocol it cannot write...
        raise ExportTargetError(f"{path}: the Delta commit failed, nothing was added: {exc}") from exc
