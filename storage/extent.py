"""Byte ranges of segment files that a reader in another process can scan on its own.

A planner (Spark's driver) opens the partition log once, checks its indexes and decides
where a range of offsets lives; readers elsewhere (Spark's executors) then scan just
those bytes, without recovery, catch-up or index loading of their own. The extent's end
is fixed when it is planned: bytes appended later are not part of it, so a write in
flight past it can never be mistaken for damage.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from storage.file_records import FileRecords
from storage.log_files import log_file
from storage.records import RecordBatch


@dataclass(frozen=True)
class SegmentExtent:
    """Whole batches of one segment file: [start_position, end_position) of its `.log`."""

    directory: str
    base_offset: int  # the segment's base offset, which names its files
    start_position: int  # a batch boundary at or before the first wanted offset
    end_position: int  # the bytes known to hold whole, CRC-valid batches when planned


def read_extent(extent: SegmentExtent) -> Iterator[RecordBatch]:
    """The CRC-checked batches of an extent, in file order.

    Everything inside the extent was whole and valid when planned, so a partial batch
    there is corruption (CorruptRecordError) rather than a torn tail. A segment removed by
    retention since planning raises FileNotFoundError: whether that is data loss is the
    caller's call. Only the `.log` is opened: the extent already says where to read.
    """
    with FileRecords.open(log_file(extent.directory, extent.base_offset)) as records:
        yield from records.batches(extent.start_position, extent.end_position, strict=True)
