"""Byte ranges of segment files that a reader in another process can scan on its own.

A planner (Spark's driver) opens the partition log once, checks its indexes and decides
where a range of offsets lives; readers elsewhere (Spark's executors) then scan just
those bytes, without recovery, catch-up or index loading of their own. The extent's end
is fixed when it is planned: bytes appended later are not part of it, so a write in
flight past it can never be mistaken for damage.

Byte positions are only true of the file they were planned on. A cleaning (compaction,
storage/log_cleaner.py) replaces a segment by a new file under the same name, whose bytes
lie elsewhere; so an extent carries the identity of the file it was planned on (device and
inode of the view's open `.log` and the inode's generation, and the base offset and CRC of the
batch at its start), and `open_extent` refuses any other file (FileReplacedError). Offsets are
never rewritten, so the reader then plans the extent's offsets [start_offset, end_offset) again
and reads those (txlog/scan/range_reader.py). Why the generation and the header: the replaced
file is unlinked once the swap is done, and ext4 gives its inode number to the next file made
(a later cleaning's, under the same name); a cleaned group often keeps its first batch as it
was, at the same place, so the header alone cannot tell that file from the planned one, whose
end position then cut the cleaned file's batches or read on past the extent's offsets. Where the
file system keeps no generation (None both sides), the header is the check.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from dataclasses import dataclass

from storage.descriptor_cache import CachedFile, inode_generation
from storage.errors import FileReplacedError, KafkaStorageError
from storage.file_records import FileRecords
from storage.log_files import log_file
from storage.records import RecordBatch
from storage.segment import LogSegment

#: `first_base_offset` / `first_crc` of an extent holding no batch.
NO_BATCH = -1


@dataclass(frozen=True)
class SegmentExtent:
    """Whole batches of one segment file: [start_position, end_position) of its `.log`."""

    directory: str
    base_offset: int  # the segment's base offset, which names its files
    start_position: int  # a batch boundary at or before the first wanted offset
    end_position: int  # the bytes known to hold whole, CRC-valid batches when planned
    start_offset: int  # the offsets [start_offset, end_offset) it was planned to hold ...
    end_offset: int  # ... (what a reader plans again if the file was replaced)
    device: int  # st_dev and st_ino of the `.log` the planner's view had open
    inode: int
    first_base_offset: int  # base offset and CRC of the batch at start_position (NO_BATCH if none)
    first_crc: int
    generation: int | None = None  # the inode's generation (None where the file system keeps none)

    @property
    def log_path(self) -> str:
        return log_file(self.directory, self.base_offset)


def plan_extent(
    seg: LogSegment, start_position: int, end_position: int, start_offset: int, end_offset: int
) -> SegmentExtent:
    """The extent of `seg`'s bytes [start_position, end_position), with the identity of the file the view has open.

    The identity comes from the view's own descriptor, not the path: the positions were
    found in that file, and the path may already name a cleaned one.
    """
    header = seg.records.header_at(start_position, end_position) if end_position > start_position else None
    device, inode = seg.log.identity
    with seg.log as fd:
        generation = inode_generation(fd)
    return SegmentExtent(
        seg.directory,
        seg.base_offset,
        start_position,
        end_position,
        start_offset,
        end_offset,
        device,
        inode,
        NO_BATCH if header is None else header.base_offset,
        NO_BATCH if header is None else header.crc,
        generation,
    )


def open_extent(extent: SegmentExtent) -> Generator[RecordBatch, None, None]:
    """The CRC-checked batches of an extent, in file order, once its file is found to be the planned one.

    Everything inside the extent was whole and valid when planned, so a partial batch
    there is corruption (CorruptRecordError) rather than a torn tail. Raised here, before
    any batch is read: FileNotFoundError for a segment removed since planning (retention, or
    a cleaning that merged it into an earlier segment: the caller tells which), and
    FileReplacedError when the name holds another file (a cleaning swapped it). Only the
    `.log` is opened: the extent already says where to read.
    """
    path = extent.log_path
    try:
        file = CachedFile(path, os.O_RDONLY)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise KafkaStorageError(f"cannot open {path}: {exc.strerror}") from exc
    try:
        records = FileRecords(path, file)
        with file as fd:
            generation = inode_generation(fd)
        _check_identity(extent, (*file.identity, generation), records)
    except BaseException:
        file.close()
        raise
    return _batches(extent, file, records)


def read_extent(extent: SegmentExtent) -> Iterator[RecordBatch]:
    """`open_extent`'s batches, its checks made when the first batch is asked for."""
    yield from open_extent(extent)


def _check_identity(extent: SegmentExtent, identity: tuple[int, int, int | None], records: FileRecords) -> None:
    device, inode, generation = identity
    same_inode = (device, inode) == (extent.device, extent.inode) and generation == extent.generation
    if same_inode and _first_batch(extent, records) == (
        extent.first_base_offset,
        extent.first_crc,
    ):
        return
    raise FileReplacedError(f"{extent.log_path} was replaced (by a cleaning) after the read was planned")


def _first_batch(extent: SegmentExtent, records: FileRecords) -> tuple[int, int]:
    if extent.end_position <= extent.start_position:
        return NO_BATCH, NO_BATCH
    header = records.header_at(extent.start_position, extent.end_position)
    return (NO_BATCH, NO_BATCH) if header is None else (header.base_offset, header.crc)


def _batches(extent: SegmentExtent, file: CachedFile, records: FileRecords) -> Generator[RecordBatch, None, None]:
    try:
        yield from records.batches(extent.start_position, extent.end_position, strict=True)
    finally:
        file.close()
