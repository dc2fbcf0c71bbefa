"""Kafka's text checkpoint files (docs/kafka-formats.md §3.7): a version line, a count line, then one entry per line.

These small files record progress that must survive restarts (recovery points, log
start offsets, leader epochs). They are replaced atomically so a crash leaves either the
old or the new list, and parsed strictly so a damaged one is noticed rather than half
believed. Entries are returned as strings: what a field means is the caller's business.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from itertools import pairwise

from storage.durable import atomic_write, write_new_file
from storage.errors import CorruptIndexError, KafkaStorageError
from storage.safe_open import read_no_follow

CHECKPOINT_VERSION = 0
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
#: txlog's own: per segment, how many `.txnindex` entries its ABORT markers call for (storage/txnindex_check.py).
TXN_INDEX_COUNT_CHECKPOINT = "txnindex-count-checkpoint"
#: txlog's own, per partition: a log start DeleteRecords moved inside a segment (one entry, the offset).
#: Kafka keeps the same number in its log dir's `log-start-offset-checkpoint`, for all partitions at once.
LOG_START_CHECKPOINT = "log-start-checkpoint"

_INT = re.compile(r"[+-]?[0-9]+")  # what Java's Integer.parseInt accepts, and nothing more


def read_checkpoint(path: str, *, fields: int | None = None) -> list[tuple[str, ...]]:
    """The entries of a checkpoint file; a missing or empty file has none.

    `fields` is the number of whitespace-separated fields every entry must have; when
    omitted, every entry must have the same, non-zero number. Anything malformed is
    CorruptIndexError.
    """
    try:
        raw = read_no_follow(path)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise KafkaStorageError(f"cannot read {path}: {exc.strerror}") from exc
    if not raw:
        return []
    try:
        return _parse(raw.decode("utf-8"), fields)
    except (CorruptIndexError, UnicodeDecodeError) as exc:
        raise CorruptIndexError(f"malformed checkpoint file {path}: {exc}") from exc


def _parse(text: str, fields: int | None) -> list[tuple[str, ...]]:
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline ending the last line does not start another
    if len(lines) < 2:
        raise CorruptIndexError("missing the version or the count line")
    version = _parse_int(lines[0], "version")
    if version != CHECKPOINT_VERSION:
        raise CorruptIndexError(f"unsupported version {version}")
    count = _parse_int(lines[1], "entry count")
    entries = [tuple(line.split()) for line in lines[2:]]
    if count != len(entries):
        raise CorruptIndexError(f"expected {count} entries, found {len(entries)}")
    width = fields if fields is not None else (len(entries[0]) if entries else 0)
    for number, entry in enumerate(entries, start=3):
        if len(entry) != width or not entry:
            raise CorruptIndexError(f"line {number} has {len(entry)} fields, expected {width or 'some'}")
    return entries


def _parse_int(line: str, what: str) -> int:
    if not _INT.fullmatch(line):
        raise CorruptIndexError(f"{what} line {line!r} is not an integer")
    return int(line)


def write_checkpoint(path: str, entries: Iterable[tuple[object, ...]], *, new_unsynced: bool = False) -> None:
    """Replace `path` atomically (tmp, fsync, rename, directory fsync) with these entries. `new_unsynced`:
    create it, without an fsync, in a directory nothing names yet (`durable.write_new_file`)."""
    lines = [checkpoint_line(entry) for entry in entries]
    if new_unsynced:
        write_new_file(path, _checkpoint_text(lines))
    else:
        write_checkpoint_lines(path, lines)


def write_checkpoint_lines(path: str, lines: list[str]) -> None:
    """`write_checkpoint` of entries formatted by `checkpoint_line` (for a caller that keeps them between writes)."""
    atomic_write(path, _checkpoint_text(lines))


def _checkpoint_text(lines: list[str]) -> bytes:
    """A checkpoint file's bytes: Kafka's version line, the entry count, the entries."""
    return (f"{CHECKPOINT_VERSION}\n{len(lines)}\n" + "".join(lines)).encode("utf-8")


def checkpoint_line(entry: tuple[object, ...]) -> str:
    """One entry's line, newline included.

    Refuses what could not be read back: an empty entry, or a field that is empty or contains whitespace.
    """
    parts = [str(field) for field in entry]
    if not parts or any(not part or part.split() != [part] for part in parts):
        raise ValueError(f"checkpoint entry {entry!r} would not survive whitespace splitting")
    return " ".join(parts) + "\n"


# ---- leader-epoch-checkpoint --------------------------------------------------------


def write_leader_epoch_checkpoint(
    partition_dir: str, entries: list[tuple[int, int]], *, new_unsynced: bool = False
) -> None:
    """Persist the (epoch, startOffset) history; both columns strictly increase, as in Kafka's epoch cache.
    `new_unsynced`: as `write_checkpoint` says (a new partition's first checkpoint)."""
    for (epoch, start), (next_epoch, next_start) in pairwise(entries):
        if next_epoch <= epoch or next_start <= start:
            raise ValueError(f"leader epochs must strictly increase in epoch and start offset: {entries}")
    if any(epoch < 0 or start < 0 for epoch, start in entries):
        raise ValueError(f"leader epochs and start offsets are non-negative: {entries}")
    write_checkpoint(os.path.join(partition_dir, LEADER_EPOCH_CHECKPOINT), entries, new_unsynced=new_unsynced)


def read_leader_epoch_checkpoint(partition_dir: str) -> list[tuple[int, int]]:
    path = os.path.join(partition_dir, LEADER_EPOCH_CHECKPOINT)
    result = []
    for epoch, start in read_checkpoint(path, fields=2):
        if not (_INT.fullmatch(epoch) and _INT.fullmatch(start)):
            raise CorruptIndexError(f"malformed checkpoint file {path}: entry {epoch} {start} is not two integers")
        result.append((int(epoch), int(start)))
    return result


def write_log_start_checkpoint(partition_dir: str, offset: int) -> None:
    """Persist the partition's log start (before any data below it is deleted: rule 8)."""
    if offset < 0:
        raise ValueError(f"a log start offset is non-negative: {offset}")
    write_checkpoint(os.path.join(partition_dir, LOG_START_CHECKPOINT), [(offset,)])


def read_log_start_checkpoint(partition_dir: str) -> int | None:
    """The log start DeleteRecords persisted, or None if it never ran here; CorruptIndexError if damaged."""
    path = os.path.join(partition_dir, LOG_START_CHECKPOINT)
    entries = read_checkpoint(path, fields=1)
    if not entries:
        return None
    if len(entries) != 1 or not _INT.fullmatch(entries[0][0]) or int(entries[0][0]) < 0:
        raise CorruptIndexError(f"malformed checkpoint file {path}: expected one non-negative offset")
    return int(entries[0][0])


# ---- per-partition offset checkpoints of a log dir ------------------------------------------


def read_offset_checkpoint(path: str) -> dict[tuple[str, int], int]:
    """A log dir's `<topic> <partition> <offset>` checkpoint (recovery point, high watermark, log start).

    Kafka writes these at the log dir's root; txlog only reads them, from real Kafka log
    directories. A missing file has no entries; a malformed one is CorruptIndexError.
    """
    result: dict[tuple[str, int], int] = {}
    for topic, partition, offset in read_checkpoint(path, fields=3):
        if not (_INT.fullmatch(partition) and _INT.fullmatch(offset)):
            raise CorruptIndexError(
                f"malformed checkpoint file {path}: entry {topic} {partition} {offset} does not end in two integers"
            )
        result[(topic, int(partition))] = int(offset)
    return result
