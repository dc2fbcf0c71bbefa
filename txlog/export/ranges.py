"""The exported-range bookkeeping every format shares: what a table records, and the next run's plan.

An export is exactly once because each table records, in the same commit as the rows, the
next offset to export of every partition it holds (docs/analysis.md §3): Delta as one
SetTransaction per partition (`app_id`), Iceberg as one snapshot summary property
(`NEXT_OFFSETS_PROPERTY`), Parquet in its file names. A run reads those offsets back, scans
each partition from there to its last stable offset (`txlog.scan` under read_committed fixes
that end when it plans), and commits the rows with the new offsets. A rerun therefore starts
where the last commit ended and adds nothing twice; a run that dies before its commit leaves
the recorded offsets, and so the next run's start, as they were.

Which format a target directory holds is decided here too (`target_format`), from the marker
file the first export writes (`MARKER`), so a table whose first export died before its first
commit is still known by its format.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from storage.durable import atomic_write
from storage.store import Store
from txlog.errors import ExportTargetError

if TYPE_CHECKING:
    import pyarrow as pa

TopicPartitionKey = tuple[str, int]

#: The columns every format writes: the scan's default record view, headers included (a list of
#: (key, value) structs, null when a record has none). The producer columns are left out: they
#: describe how the rows were written, not what they say.
COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers")
FORMATS = ("parquet", "delta", "iceberg")
#: Iceberg's snapshot summary property holding the next offsets (JSON: {"topic": {"partition": offset}}).
NEXT_OFFSETS_PROPERTY = "txlog.next-offsets"
#: Files txlog keeps in the target directory: both start with '_', which Delta, pyarrow's dataset
#: discovery and Spark treat as not part of the table.
MARKER = "_txlog_export.json"
LOCK = "_txlog_export.lock"


def app_id(topic: str, partition: int) -> str:
    """Delta's SetTransaction app id of one partition (topic names cannot hold ':', so it parses back)."""
    return f"txlog:{topic}:{partition}"


def encode_next_offsets(offsets: dict[TopicPartitionKey, int]) -> str:
    """The next offsets as one JSON text: {"topic": {"partition": offset}}, sorted."""
    nested: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        nested.setdefault(topic, {})[str(partition)] = offset
    return json.dumps(nested, separators=(",", ":"))


def decode_next_offsets(text: str, where: str) -> dict[TopicPartitionKey, int]:
    """What `encode_next_offsets` wrote; anything else is a damaged table, named as such."""
    try:
        nested = json.loads(text)
        return {
            (topic, int(partition)): int(offset)
            for topic, parts in nested.items()
            for partition, offset in parts.items()
        }
    except (ValueError, AttributeError, TypeError) as exc:
        raise ExportTargetError(f"{where}: the recorded offsets ({NEXT_OFFSETS_PROPERTY}) are not readable") from exc


# ---- the target directory ------------------------------------------------------------------------------


def target_format(path: str) -> str | None:
    """The format the directory at `path` holds ('parquet', 'delta', 'iceberg'), None when it is new or empty.

    A directory txlog exported to carries its marker; a Delta table made by something else is
    recognised by its `_delta_log` (txlog appends to it if its columns are the export's). Anything
    else that is not empty is refused: an export never mixes its files into another directory.
    """
    if not os.path.lexists(path):
        return None
    if not os.path.isdir(path):
        raise ExportTargetError(f"{path} is not a directory")
    marker = os.path.join(path, MARKER)
    if os.path.exists(marker):
        return _marker_format(marker)
    entries = [name for name in os.listdir(path) if name != LOCK]
    if "_delta_log" in entries:
        return "delta"
    if "metadata" in entries:
        raise ExportTargetError(f"{path} holds an Iceberg table txlog did not create (it has no {MARKER})")
    if entries:
        raise ExportTargetError(f"{path} is not empty and holds no table txlog exported; give a new or empty directory")
    return None


def _marker_format(marker: str) -> str:
    try:
        with open(marker, encoding="utf-8") as f:
            fmt = json.load(f)["format"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ExportTargetError(f"{marker} is not readable") from exc
    if fmt not in FORMATS:
        raise ExportTargetError(f"{marker} names an unknown format {fmt!r}")
    return str(fmt)


def check_target(path: str, fmt: str, *, mark: bool = True) -> None:
    """Refuse a directory that holds a table of another format; mark a new one as `fmt`'s.

    Marking is done under the export's lock (`mark=False` before it is taken): two first runs
    with different formats then cannot both pass, since the second sees the first's mark.
    """
    found = target_format(path)
    if found is not None and found != fmt:
        raise ExportTargetError(
            f"{path} holds a {_NAMES[found]} table, not {_NAMES[fmt]} (export to it with --format {found})"
        )
    os.makedirs(path, exist_ok=True)
    marker = os.path.join(path, MARKER)
    if mark and not os.path.exists(marker):
        atomic_write(marker, json.dumps({"format": fmt, "version": 1}).encode() + b"\n")


_NAMES = {"parquet": "Parquet", "delta": "Delta", "iceberg": "Iceberg"}


# ---- the plan of one run ---------------------------------------------------------------------------------


@dataclass
class ExportPlan:
    """What one run exports: [starts, next_offsets) of every partition, and the scan that reads it."""

    starts: dict[TopicPartitionKey, int]
    next_offsets: dict[TopicPartitionKey, int]
    scan: Any  # txlog.scan's Scan (typed loosely: its module imports pyarrow)
    deleted: dict[TopicPartitionKey, tuple[int, int]] = field(default_factory=dict)  # gone before exported

    @property
    def advances(self) -> bool:
        """Whether any partition has offsets to export (else the run commits nothing)."""
        return any(self.next_offsets[tp] > start for tp, start in self.starts.items())


def check_topics(store: Store, topics: Sequence[str]) -> None:
    """Every topic must exist: a typo is an error before anything is written, not an empty export."""
    from storage.errors import UnknownTopicOrPartitionError

    if not topics:
        from txlog.errors import IllegalArgumentError

        raise IllegalArgumentError("name at least one topic to export")
    for topic in topics:
        if not store.has_topic(topic):
            raise UnknownTopicOrPartitionError(f"topic '{topic}' does not exist")


def plan_export(store: Store, topics: Sequence[str], recorded: dict[TopicPartitionKey, int]) -> ExportPlan:
    """Scan each partition of `topics` from its recorded next offset (else its log start) to its LSO.

    A recorded offset past the partition's last stable offset cannot come from this store's
    partition (offsets only grow): the topic was deleted and created again, or the table was
    exported from another store; that is refused rather than guessed. Offsets deleted by
    retention before they were exported are skipped, and reported in `deleted`.
    """
    from txlog.scan import scan

    starts: dict[TopicPartitionKey, int] = {}
    deleted: dict[TopicPartitionKey, tuple[int, int]] = {}
    for topic in topics:
        for partition in store.partitions(topic):
            log = store.partition(topic, partition)
            log_start, lso = log.log_start_offset, log.last_stable_offset
            start = recorded.get((topic, partition), log_start)
            if start > lso:
                raise ExportTargetError(
                    f"the table records offset {start} as the next of {topic}-{partition}, but that partition's "
                    f"last stable offset is {lso} (was the topic deleted and created again, or is this table "
                    "another store's?)"
                )
            if start < log_start:
                deleted[(topic, partition)] = (start, log_start)
                start = log_start
            starts[(topic, partition)] = start
    planned = scan(store, list(topics), isolation_level="read_committed", starting_offsets=starts, columns=COLUMNS)
    next_offsets = dict(starts)
    for r in planned.ranges:
        tp = (r.topic, r.partition)
        next_offsets[tp] = max(next_offsets[tp], r.end)
    return ExportPlan(starts, next_offsets, planned, deleted)


# ---- what a run did --------------------------------------------------------------------------------------


@dataclass
class ExportResult:
    """One run's outcome: rows written per topic, and each partition's exported span [start, next)."""

    fmt: str
    path: str
    rows: dict[str, int]
    spans: dict[TopicPartitionKey, tuple[int, int]]
    deleted: dict[TopicPartitionKey, tuple[int, int]]

    @property
    def total(self) -> int:
        return sum(self.rows.values())


class RowCounter:
    """Passes a scan's batches through, counting rows per topic and telling `on_rows` the running total.

    A writer that pulls the batches through Arrow's C stream (deltalake, pyiceberg) reports an
    error raised while reading as its own, with the original only as text; `failure` keeps
    the original (a CorruptRecordError naming the file, an interrupt) so it can be raised as is.
    """

    def __init__(self, topics: Sequence[str], on_rows: Any = None):
        self.rows = dict.fromkeys(topics, 0)
        self.total = 0
        self.on_rows = on_rows
        self.failure: BaseException | None = None

    def count(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.compute as pc

        try:
            for batch in batches:
                if batch.num_rows:
                    for item in pc.value_counts(batch.column("topic")).to_pylist():
                        self.rows[item["values"]] += item["counts"]
                    self.total += batch.num_rows
                    if self.on_rows is not None:
                        self.on_rows(self.total)
                yield batch
        except BaseException as exc:
            self.failure = exc
            raise

    @contextmanager
    def original_errors(self) -> Iterator[None]:
        """Around a writer reading `count`'s batches: an error of the reading comes out as itself."""
        try:
            yield
        except Exception:
            if self.failure is not None:
                raise self.failure from None
            raise
