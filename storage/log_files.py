"""The names of a partition directory's files (Kafka's LogFileUtils): the one place they are made and read.

A segment's files share the 20-digit, zero-padded base offset as their prefix and differ
by suffix; a producer-state snapshot is named by the offset its state ends at; files
being deleted, cleaned or swapped carry a second suffix (docs/kafka-formats.md §3.1). Every
module that builds or parses such a name uses these functions, so the layout is
written down once.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from storage.durable import TMP_SUFFIX

__all__ = [
    "BOOTSTRAP_CHECKPOINT",
    "kraft_snapshot_id",
    "CLEANED_FILE_SUFFIX",
    "DELETED_FILE_SUFFIX",
    "INDEX_FILE_SUFFIX",
    "INDEX_FILE_SUFFIXES",
    "KRAFT_SNAPSHOT_FILE_SUFFIX",
    "LOG_FILE_SUFFIX",
    "PRODUCER_SNAPSHOT_FILE_SUFFIX",
    "SWAP_FILE_SUFFIX",
    "TEMP_FILE_SUFFIXES",
    "TIME_INDEX_FILE_SUFFIX",
    "TMP_SUFFIX",
    "TXN_INDEX_FILE_SUFFIX",
    "HIGH_WATERMARK_FILE",
    "filename_prefix",
    "is_log_file",
    "log_file",
    "offset_from_file_name",
    "offset_of",
    "producer_snapshot_file",
    "segment_file",
    "segment_filename",
    "sibling_file",
    "snapshot_filename",
]

LOG_FILE_SUFFIX = ".log"
INDEX_FILE_SUFFIX = ".index"
TIME_INDEX_FILE_SUFFIX = ".timeindex"
TXN_INDEX_FILE_SUFFIX = ".txnindex"
PRODUCER_SNAPSHOT_FILE_SUFFIX = ".snapshot"
#: A KRaft metadata snapshot (`<endOffset>-<epoch>.checkpoint`): record batches, read like a `.log`.
KRAFT_SNAPSHOT_FILE_SUFFIX = ".checkpoint"
DELETED_FILE_SUFFIX = ".deleted"
CLEANED_FILE_SUFFIX = ".cleaned"
SWAP_FILE_SUFFIX = ".swap"

#: The partition's high watermark (storage/high_watermark.py): not a segment file, never a leftover or an orphan.
HIGH_WATERMARK_FILE = "txlog.high-watermark"

#: The derived files of a segment, rebuilt from its `.log`.
INDEX_FILE_SUFFIXES = (INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX, TXN_INDEX_FILE_SUFFIX)
#: Leftovers of an interrupted write, delete, clean or swap: never data a reader may use.
TEMP_FILE_SUFFIXES = (TMP_SUFFIX, DELETED_FILE_SUFFIX, CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX)

_OFFSET_DIGITS = 20


def filename_prefix(offset: int) -> str:
    """The 20-digit, zero-padded offset every segment and snapshot name starts with."""
    if offset < 0:
        raise ValueError(f"file name offset {offset} is negative")
    return f"{offset:0{_OFFSET_DIGITS}d}"


def segment_filename(base_offset: int, suffix: str) -> str:
    """`00000000000000001234.log` and its siblings: the segment's base offset, then `suffix`."""
    return filename_prefix(base_offset) + suffix


def segment_file(directory: str, base_offset: int, suffix: str) -> str:
    return os.path.join(directory, segment_filename(base_offset, suffix))


def log_file(directory: str, base_offset: int) -> str:
    return segment_file(directory, base_offset, LOG_FILE_SUFFIX)


def snapshot_filename(offset: int) -> str:
    """A producer-state snapshot is named by the exclusive end offset of the state it holds."""
    return filename_prefix(offset) + PRODUCER_SNAPSHOT_FILE_SUFFIX


def producer_snapshot_file(directory: str, offset: int) -> str:
    return os.path.join(directory, snapshot_filename(offset))


def offset_from_file_name(name: str) -> int:
    """The offset a file is named by: the digits before its first '.' (ValueError if there are none).

    Kafka parses the prefix as a number, so any run of digits is accepted, not only 20.
    """
    prefix = os.path.basename(name).split(".", 1)[0]
    if not prefix.isdigit() or not prefix.isascii():
        raise ValueError(f"{name}: the file name does not start with an offset")
    return int(prefix)


def offset_of(name: str, suffix: str) -> int | None:
    """The offset of `name` if it is exactly `<digits><suffix>` (no leftover suffix after it), else None."""
    if not name.endswith(suffix):
        return None
    stem = name[: -len(suffix)]
    return int(stem) if stem.isdigit() and stem.isascii() else None


def is_log_file(name: str) -> bool:
    """`<digits>.log`: a segment, not a leftover such as `….log.deleted` or `….log.swap`."""
    return offset_of(name, LOG_FILE_SUFFIX) is not None


def segment_bases(names: Iterable[str]) -> list[int]:
    """The base offsets of the segments among directory entries `names`, in order (`is_log_file`)."""
    return sorted(base for base in (offset_of(name, LOG_FILE_SUFFIX) for name in names) if base is not None)


#: The KRaft snapshot a controller bootstraps from (record batches, no snapshot id in its name).
BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"
_KRAFT_SNAPSHOT_NAME = re.compile(r"(\d{20})-(\d{10})" + re.escape(KRAFT_SNAPSHOT_FILE_SUFFIX))


def kraft_snapshot_id(name: str) -> tuple[int, int] | None:
    """(end offset, epoch) of a KRaft snapshot named `<20-digit end offset>-<10-digit epoch>.checkpoint`."""
    match = _KRAFT_SNAPSHOT_NAME.fullmatch(os.path.basename(name))
    return None if match is None else (int(match[1]), int(match[2]))


def sibling_file(path: str, suffix: str) -> str:
    """The file of the same segment with another suffix (`….index` beside `….log`)."""
    directory = os.path.dirname(os.path.abspath(path))
    return os.path.join(directory, os.path.basename(path).split(".", 1)[0] + suffix)
