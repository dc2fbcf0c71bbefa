"""Plain Parquet files: one directory per partition, one file per exported range, named by that range.

A directory of files has no commit, so each file is its own: it is written under a hidden
name (`.<name>.partial`, which neither pyarrow's dataset discovery nor a `*.parquet` glob
reads), fsynced, then renamed to `<topic>-<partition>/<start>-<next>.parquet` (20-digit
offsets, as Kafka names segments) and the directory fsynced. The rename is the commit: a file
is either absent or whole. The recorded next offset of a partition is the largest `<next>` among
its files, so a rerun starts there; a run killed part-way leaves the partitions it finished
done and the others as they were, plus `.partial` files the next run removes.

`<start>` and `<next>` are the planned range (the LSO at export time is `<next>`), not the
first and last row: the rows are the committed records inside it. A range with no committed
record (only aborted ones or markers) gets no file; the next run reads it again, to no effect.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from storage.durable import fsync_dir, fsync_fd
from storage.log_files import segment_filename
from storage.topic_name import parse_partition_dir
from txlog.errors import IllegalStateError
from txlog.export.ranges import TopicPartitionKey
from txlog.scan.optional import optional_module

if TYPE_CHECKING:
    import pyarrow as pa

PURPOSE = "txlog export --format parquet"
SUFFIX = ".parquet"
PARTIAL_SUFFIX = ".partial"
_RANGE_FILE = re.compile(r"(\d{20})-(\d{20})\.parquet")


def file_name(start: int, next_offset: int) -> str:
    """`<start>-<next>.parquet`, each offset in 20 digits (Kafka's segment-name width)."""
    return f"{segment_filename(start, '')}-{segment_filename(next_offset, SUFFIX)}"


def recorded_offsets(path: str) -> dict[TopicPartitionKey, int]:
    """Each partition's next offset: the end of the furthest range among its finished files."""
    out: dict[TopicPartitionKey, int] = {}
    for directory in _partition_dirs(path):
        tp = parse_partition_dir(directory)
        assert tp is not None  # _partition_dirs keeps only those
        for name in os.listdir(os.path.join(path, directory)):
            match = _RANGE_FILE.fullmatch(name)
            if match:
                out[tp] = max(out.get(tp, 0), int(match.group(2)))
    return out


def remove_partial_files(path: str) -> None:
    """Files a killed run left half-written (only ever under their hidden names)."""
    for directory in _partition_dirs(path):
        full = os.path.join(path, directory)
        for name in os.listdir(full):
            if name.startswith(".") and name.endswith(PARTIAL_SUFFIX):
                os.unlink(os.path.join(full, name))


def _partition_dirs(path: str) -> list[str]:
    if not os.path.isdir(path):
        return []
    return sorted(
        name
        for name in os.listdir(path)
        if parse_partition_dir(name) is not None and os.path.isdir(os.path.join(path, name))
    )


def commit(
    path: str,
    schema: pa.Schema,
    batches: Iterator[pa.RecordBatch],
    starts: dict[TopicPartitionKey, int],
    next_offsets: dict[TopicPartitionKey, int],
) -> None:
    """Write the batches (partition after partition, as a scan yields them) as one finished file per partition."""
    pq = optional_module("pyarrow.parquet", PURPOSE)
    current: _RangeFile | None = None
    finished: set[TopicPartitionKey] = set()
    try:
        for batch in batches:
            tp = (batch.column("topic")[0].as_py(), batch.column("partition")[0].as_py())
            if current is None or current.tp != tp:
                if current is not None:
                    current.finish()
                    finished.add(current.tp)
                    current = None
                if tp in finished:  # a scan yields each partition's rows together, in offset order
                    raise IllegalStateError(f"the scan came back to {tp[0]}-{tp[1]} after another partition")
                current = _RangeFile(pq, path, tp, starts[tp], next_offsets[tp], schema)
            current.write(batch)
    except BaseException:
        if current is not None:
            current.discard()  # the finished partitions stay: each file is whole and named by its range
        raise
    if current is not None:
        current.finish()


class _RangeFile:
    """One partition's file of one run: written hidden, renamed to its range's name once whole."""

    def __init__(self, pq: object, root: str, tp: TopicPartitionKey, start: int, next_offset: int, schema: pa.Schema):
        self.tp = tp
        self.directory = os.path.join(root, f"{tp[0]}-{tp[1]}")
        os.makedirs(self.directory, exist_ok=True)
        self.final = os.path.join(self.directory, file_name(start, next_offset))
        self.partial = os.path.join(self.directory, f".{file_name(start, next_offset)}{PARTIAL_SUFFIX}")
        self.writer = pq.ParquetWriter(self.partial, schema)  # type: ignore[attr-defined]

    def write(self, batch: pa.RecordBatch) -> None:
        self.writer.write_batch(batch)

    def discard(self) -> None:
        self.writer.close()
        os.unlink(self.partial)

    def finish(self) -> None:
        self.writer.close()
        fd = os.open(self.partial, os.O_RDONLY)
        try:
            fsync_fd(fd)
        finally:
            os.close(fd)
        os.rename(self.partial, self.final)
        fsync_dir(self.directory)
