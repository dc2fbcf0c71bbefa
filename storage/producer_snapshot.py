"""The `.snapshot` file: producer state as of a log offset, in Kafka's ProducerSnapshot format
(docs/kafka-formats.md §3.6).

Replaying a whole partition to rebuild per-producer state would make every open O(log);
a snapshot lets recovery start from its offset instead. Layout: version:i16 = 1,
crc:u32 = CRC-32C of bytes [6, EOF), entryCount:i32, then 46-byte entries. The file is
named by the *exclusive* end offset of the state it holds.

Kafka writes entries in the iteration order of its `HashMap<Long, ProducerStateEntry>`;
readers do not care, but byte-identical files need that order, so it is emulated for a
map built by inserting the entries in the order given. Two Java behaviours are not
emulated, and only change the order, never the content or the CRC's validity: a live
map that grew and then lost producers keeps its larger table, and a bucket with 9 or
more colliding ids in a table of 64 or more becomes a red-black tree bin.
"""

from __future__ import annotations

import os
import struct
from collections import Counter
from collections.abc import Iterable
from typing import NamedTuple

from storage.durable import atomic_write, unlink_durably
from storage.errors import CorruptSnapshotError, KafkaStorageError
from storage.log_files import PRODUCER_SNAPSHOT_FILE_SUFFIX, offset_of, producer_snapshot_file
from storage.records import crc32c  # the native CRC: the crc32c package's import costs ~10 ms of every start
from storage.safe_open import read_no_follow

SNAPSHOT_VERSION = 1

_HEADER = struct.Struct(">hIi")  # version, crc, entryCount
_CRC_START = 6  # the CRC covers everything after itself
_STORED_CRC = struct.Struct(">I")  # bytes 2..6
_ENTRY = struct.Struct(">qhiqiqiq")


class SnapshotEntry(NamedTuple):
    producer_id: int
    epoch: int
    last_sequence: int  # -1 when the producer has no data batch (e.g. only a marker)
    last_offset: int  # -1 likewise
    offset_delta: int  # lastOffset − firstOffset of the producer's last batch
    timestamp: int
    coordinator_epoch: int  # -1 by default
    current_txn_first_offset: int  # -1 when no transaction is open


# ---- Java HashMap<Long, …> iteration order ------------------------------------------

_INITIAL_CAPACITY = 16
_LOAD_FACTOR = 0.75
_TREEIFY_THRESHOLD = 8
_MIN_TREEIFY_CAPACITY = 64


def _spread_hash(producer_id: int) -> int:
    """Long.hashCode() followed by HashMap.hash(), as an unsigned 32-bit value."""
    u = producer_id & 0xFFFFFFFFFFFFFFFF
    h = (u ^ (u >> 32)) & 0xFFFFFFFF
    return h ^ (h >> 16)


def _final_capacity(hashes: list[int]) -> int:
    """Table size after inserting `hashes` in order into a `new HashMap<>()`.

    The table doubles when size exceeds 3/4 of it, and also (instead of treeifying)
    when a bucket's chain reaches 9 while the table is smaller than 64.
    """
    cap = _INITIAL_CAPACITY
    chains: Counter[int] = Counter()
    for size, h in enumerate(hashes, start=1):
        chains[h & (cap - 1)] += 1
        if chains[h & (cap - 1)] > _TREEIFY_THRESHOLD and cap < _MIN_TREEIFY_CAPACITY:
            cap = _resized(cap, hashes[:size], chains)
        if size > _LOAD_FACTOR * cap:
            cap = _resized(cap, hashes[:size], chains)
    return cap


def _resized(cap: int, inserted: list[int], chains: Counter[int]) -> int:
    cap *= 2
    chains.clear()
    chains.update(h & (cap - 1) for h in inserted)
    return cap


def _hashmap_order(entries: list[SnapshotEntry]) -> list[SnapshotEntry]:
    """Buckets in index order; within a bucket, insertion order (resizes keep it)."""
    pids = [e.producer_id for e in entries]
    if len(set(pids)) != len(pids):
        raise ValueError("a snapshot holds one entry per producer id")
    hashes = [_spread_hash(pid) for pid in pids]
    mask = _final_capacity(hashes) - 1
    order = sorted(range(len(entries)), key=lambda i: (hashes[i] & mask, i))
    return [entries[i] for i in order]


# ---- encoding -------------------------------------------------------------------------


def encode_snapshot(entries: Iterable[SnapshotEntry]) -> bytes:
    ordered = _hashmap_order(list(entries))
    try:
        packed = [_ENTRY.pack(*entry) for entry in ordered]
    except struct.error as exc:
        raise ValueError(f"snapshot entry field out of range: {exc}") from exc
    body = struct.pack(">i", len(ordered)) + b"".join(packed)
    header = struct.pack(">hI", SNAPSHOT_VERSION, crc32c(body))
    return header + body


def snapshot_crcs(data: bytes) -> tuple[int, int] | None:
    """(stored, computed) CRC of a snapshot's bytes, or None if too short to hold one.

    For tools that report a damaged snapshot in Kafka's words, whatever else is wrong with it.
    """
    if len(data) < _CRC_START:
        return None
    return _STORED_CRC.unpack_from(data, _CRC_START - _STORED_CRC.size)[0], crc32c(data[_CRC_START:])


def decode_snapshot(data: bytes) -> list[SnapshotEntry]:
    """Parse a whole snapshot; any doubt is CorruptSnapshotError, so the loader falls back to an older one."""
    if len(data) < _HEADER.size:
        raise CorruptSnapshotError(f"snapshot is truncated: {len(data)} bytes, the header alone is {_HEADER.size}")
    version, crc, count = _HEADER.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"snapshot version {version} is not {SNAPSHOT_VERSION}")
    computed = crc32c(data[_CRC_START:])
    if computed != crc:
        raise CorruptSnapshotError(f"snapshot CRC mismatch: stored {crc:#010x}, computed {computed:#010x}")
    if count < 0:
        raise CorruptSnapshotError(f"snapshot entry count {count} is negative")
    expected = _HEADER.size + count * _ENTRY.size
    if len(data) != expected:
        what = "truncated" if len(data) < expected else "followed by trailing bytes"
        raise CorruptSnapshotError(f"snapshot of {count} entries is {what}: {len(data)} bytes, expected {expected}")
    return [SnapshotEntry(*fields) for fields in _ENTRY.iter_unpack(data[_HEADER.size :])]


# ---- files ----------------------------------------------------------------------------


def write_snapshot(directory: str, offset: int, entries: Iterable[SnapshotEntry]) -> str:
    """Write the snapshot for `offset` so that a crash leaves the old file or the complete new one."""
    path = producer_snapshot_file(directory, offset)
    data = encode_snapshot(entries)
    try:
        atomic_write(path, data)
    except OSError as exc:  # atomic_write wraps fsync and write failures, but not rename's
        raise KafkaStorageError(f"cannot write {path}: {exc.strerror or exc}") from exc
    return path


def read_snapshot(path: str) -> list[SnapshotEntry]:
    """Read and verify a snapshot. FileNotFoundError passes through: another process may have deleted it."""
    try:
        data = read_no_follow(path)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise KafkaStorageError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        return decode_snapshot(data)
    except CorruptSnapshotError as exc:
        raise CorruptSnapshotError(f"{path}: {exc}") from exc


def list_snapshots(directory: str) -> list[tuple[int, str]]:
    """(offset, path) of every snapshot in `directory`, oldest first.

    Names are parsed as Kafka does (the digits before the suffix); leftovers such as
    `*.tmp` and `*.snapshot.deleted`, and anything else, are not snapshots. A missing
    directory has none.
    """
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        offset = offset_of(name, PRODUCER_SNAPSHOT_FILE_SUFFIX)
        if offset is not None:
            found.append((offset, os.path.join(directory, name)))
    found.sort()
    return found


def delete_snapshot(path: str) -> None:
    """Remove a snapshot durably: a resurrected one beyond a truncation point would restore wrong state."""
    unlink_durably([path], os.path.dirname(path) or ".")
