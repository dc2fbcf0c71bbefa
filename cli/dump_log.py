"""kafka-dump-log's file readers and its exact text lines (cli-conventions.md §2, Kafka ≥ 3.5).

Each `dump_*` function reads one file read-only (a plain `open(..., "rb")`, never the
storage classes, which may take locks or repair files) and yields *items*: small dicts
with a `type` key. `text_line` turns an item into the line kafka-dump-log.sh prints;
`cli.inspect` prints those lines or collects the items as JSON. Problems found on the way
(index entries that do not match the log, a corrupt snapshot, ...) are collected in a
`Problems`, printed on stderr in Kafka's words, and make `txlog inspect` exit 3.
"""

from __future__ import annotations

import base64
import json
import os
import re
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
KRAFT_SNAPSHOT_SUFFIX = ".checkpoint"  # a KRaft metadata snapshot: record batches, dumped like a .log
BOOTSTRAP_SNAPSHOT = "bootstrap.checkpoint"
KNOWN_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, SNAPSHOT_SUFFIX,
                  KRAFT_SNAPSHOT_SUFFIX)

INT32_MAX = 2**31 - 1
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024

_OFFSET_ENTRY = struct.Struct(">ii")  # relativeOffset, position
_TIME_ENTRY = struct.Struct(">qi")  # timestamp, relativeOffset
_TXN_ENTRY = struct.Struct(">bxqqqq")  # version (first byte only, as Java reads it), pid, first, last, lso
_FRAME = struct.Struct(">qi")  # baseOffset, batchLength
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")
_CRC_START = 21
_LOG_OVERHEAD = 12
_MIN_FRAME = 17  # baseOffset + batchLength + leaderEpoch + magic

# Kafka's ControlRecordType names, for the control records that are not transaction markers.
_CONTROL_TYPES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER",
                  5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}


@dataclass
class Options:
    print_data: bool = False
    deep: bool = False
    skip_metadata: bool = False
    max_bytes: int = INT32_MAX
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    sanity_only: bool = False
    verify_only: bool = False
    parser: Callable[[Any], tuple[str | None, str | None]] | None = None


@dataclass
class Problems:
    """What kafka-dump-log reports on stderr; any of it makes `inspect` exit 3."""

    index_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    out_of_order: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    not_found: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    non_consecutive: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    other: list[str] = field(default_factory=list)  # printed on stderr as they happen
    flagged: int = 0  # problems already shown on stdout (Kafka's "Found N invalid bytes")

    @staticmethod
    def _add(table: dict[str, list[tuple[int, int]]], path: str, pair: tuple[int, int]) -> None:
        # Kafka prepends (`list ::= pair`), so its lists print newest first.
        table.setdefault(os.path.abspath(path), []).insert(0, pair)

    def __bool__(self) -> bool:
        return any((self.index_mismatches, self.time_mismatches, self.out_of_order, self.not_found,
                    self.non_consecutive, self.other, self.flagged))

    def summary_lines(self) -> list[str]:
        """The stderr block DumpLogSegments prints after the last file, in its order and words."""
        lines: list[str] = []
        for name, pairs in self.index_mismatches.items():
            lines.append(f"Mismatches in :{name}")
            lines += [f"  Index offset: {a}, log offset: {b}" for a, b in pairs]
        for name, pairs in self.time_mismatches.items():
            lines.append(f"Found timestamp mismatch in :{name}")
            lines += [f"  Index timestamp: {a}, log timestamp: {b}" for a, b in pairs]
        for name, pairs in self.out_of_order.items():
            lines.append(f"Found out of order timestamp in :{name}")
            lines += [f"  Index timestamp: {a}, Previously indexed timestamp: {b}" for a, b in pairs]
        for pairs in self.not_found.values():
            lines.append("The following indexed offsets are not found in the log.")
            lines += [f"Indexed offset: {a}, found log offset: {b}" for a, b in pairs]
        for name, pairs in self.non_consecutive.items():
            lines.append(f"Non-consecutive offsets in {name}")
            lines += [f"  {a} is followed by {b}" for a, b in pairs]
        return lines


class DumpError(Exception):
    """A file that cannot be dumped at all (bad name, unreadable batch framing)."""


# ---- helpers ------------------------------------------------------------------------------------


def base_offset_of(path: str) -> int:
    """The segment's base offset: the file name before its first '.' (kafka-formats.md §3.1)."""
    name = os.path.basename(path).split(".")[0]
    try:
        return int(name)
    except ValueError:
        raise DumpError(f"{path}: the file name does not start with an offset") from None


def _read(path: str, limit: int | None = None) -> bytes:
    with open(path, "rb") as f:  # read-only: inspect never writes
        return f.read() if limit is None else f.read(limit)


def _sibling(path: str, suffix: str) -> str:
    directory = os.path.dirname(os.path.abspath(path))
    return os.path.join(directory, os.path.basename(path).split(".")[0] + suffix)


def optional_long(value: int | None) -> str:
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


def _utf8(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")


def string_parser(record: Any) -> tuple[str | None, str | None]:
    """Kafka's default StringDecoder for keys and values."""
    return _utf8(record.key), _utf8(record.value)


# ---- .log ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LegacyEntry:
    """A shallow magic 0/1 log entry, with the few batch attributes the index checks use."""

    message: Any  # storage.legacy_records.LegacyMessage
    path: str

    @property
    def position(self) -> int:
        return self.message.position

    @property
    def size(self) -> int:
        return self.message.size

    @property
    def last_offset(self) -> int:
        return self.message.offset  # a wrapper carries its last inner offset

    def records(self) -> list[Any]:
        from storage.legacy_records import records_of

        return records_of(self.message, path=self.path)


def iter_log_batches(data: bytes, path: str, *, legacy: bool = False) -> Iterator[Any]:
    """Every complete batch, CRC unchecked (the batch line says `isvalid:`), like FileRecords.batches.

    A pre-0.11 message (magic 0/1) is yielded as a `LegacyEntry` when `legacy` (the dump and
    its index checks read them, as kafka-dump-log does); otherwise it is refused with
    UnsupportedForMessageFormatError, never taken for bad bytes.
    """
    from storage.errors import CorruptRecordError
    from storage.legacy_records import is_legacy_message, parse_legacy, refuse
    from storage.records import MAGIC, RecordBatch

    pos, end = 0, len(data)
    while end - pos >= _MIN_FRAME:
        if data[pos + 16] != MAGIC and is_legacy_message(data, pos):
            if not legacy:
                raise refuse(data[pos + 16], path, pos)
            entry = LegacyEntry(parse_legacy(data, pos, path=path), path)
            yield entry
            pos += entry.size
            continue
        _, length = _FRAME.unpack_from(data, pos)
        if length < 49:
            raise DumpError(f"{path}: batch at position {pos} has length {length}, below the minimum 49")
        if pos + _LOG_OVERHEAD + length > end:
            return
        try:
            batch = RecordBatch.parse(data, pos, path=path, verify_crc=False)
        except CorruptRecordError as exc:
            raise DumpError(str(exc)) from None
        yield batch
        pos += batch.size


def _batch_valid(data: bytes, batch: Any) -> bool:
    from crc32c import crc32c

    return crc32c(memoryview(data)[batch.position + _CRC_START:batch.position + batch.size]) == batch.crc


def batch_item(batch: Any, valid: bool) -> dict[str, Any]:
    return {
        "type": "batch",
        "baseOffset": batch.base_offset,
        "lastOffset": batch.last_offset,
        "count": batch.records_count,
        "baseSequence": batch.base_sequence,
        "lastSequence": batch.last_sequence,
        "producerId": batch.producer_id,
        "producerEpoch": batch.producer_epoch,
        "partitionLeaderEpoch": batch.partition_leader_epoch,
        "isTransactional": batch.is_transactional,
        "isControl": batch.is_control,
        "deleteHorizonMs": batch.base_timestamp if batch.has_delete_horizon else None,
        "position": batch.position,
        "timestampType": "LogAppendTime" if batch.attributes & 0x08 else "CreateTime",
        "maxTimestamp": batch.max_timestamp,
        "size": batch.size,
        "magic": batch.magic,
        "compresscodec": _codec_name(batch.attributes & 0x07),
        "crc": batch.crc,
        "isvalid": valid,
    }


def legacy_batch_item(m: Any) -> dict[str, Any]:
    """A shallow magic 0/1 entry: Kafka prints only its (last) offset and the common fields."""
    return {"type": "batch", "lastOffset": m.offset, "position": m.position, "timestampType": m.timestamp_type,
            "maxTimestamp": m.timestamp, "size": m.size, "magic": m.magic, "compresscodec": _codec_name(m.codec),
            "crc": m.crc, "isvalid": m.valid}


def legacy_record_item(m: Any, opts: Options) -> dict[str, Any]:
    item: dict[str, Any] = {
        "type": "record", "magic": m.magic, "offset": m.offset, "timestampType": m.timestamp_type,
        "timestamp": m.timestamp, "keySize": -1 if m.key is None else len(m.key),
        "valueSize": -1 if m.value is None else len(m.value), "isValid": m.valid, "crc": m.crc,
    }
    if opts.print_data:
        key, payload = (opts.parser or string_parser)(m)
        item["key"] = key
        item["payload"] = payload
    return item


def _snapshot_header(r: Any) -> dict[str, Any]:
    return {"version": r.i16("version"), "lastContainedLogTimestamp": r.i64("last contained log timestamp")}


def _snapshot_footer(r: Any) -> dict[str, Any]:
    return {"version": r.i16("version")}


def _kraft_version(r: Any) -> dict[str, Any]:
    return {"version": r.i16("version"), "kRaftVersion": r.i16("kraft version")}


# KRaft's control records that DumpLogSegments prints as JSON: type -> (its label, the v0 fields).
# Each value is a flexible struct whose first field is its own version; the voters record
# (type 6, Kafka 3.9+) is not decoded here and prints as `controlType: KRAFT_VOTERS(6)`.
_KRAFT_CONTROL_RECORDS: dict[int, tuple[str, Callable[[Any], dict[str, Any]]]] = {
    3: ("SnapshotHeader", _snapshot_header),
    4: ("SnapshotFooter", _snapshot_footer),
    5: ("KRaftVersion", _kraft_version),
}


def _kraft_control_json(ctype: int, record: Any) -> dict[str, Any]:
    from storage.errors import CorruptRecordError
    from txlog.schema_types import SchemaReader

    label, read = _KRAFT_CONTROL_RECORDS[ctype]
    if record.value is None:
        raise CorruptRecordError(f"{label} control record at offset {record.offset} has no value")
    r = SchemaReader(record.value, f"{label} control record at offset {record.offset}")
    fields = read(r)
    r.tagged_fields()
    r.expect_end()
    return fields


def _codec_name(code: int) -> str:
    names = ("none", "gzip", "snappy", "lz4", "zstd")
    return names[code] if code < len(names) else f"unknown({code})"


def record_item(batch: Any, record: Any, opts: Options) -> dict[str, Any]:
    item: dict[str, Any] = {
        "type": "record",
        "offset": record.offset,
        "timestampType": "LogAppendTime" if batch.attributes & 0x08 else "CreateTime",
        "timestamp": record.timestamp,
        "keySize": -1 if record.key is None else len(record.key),
        "valueSize": -1 if record.value is None else len(record.value),
        "sequence": record.sequence,
        "headerKeys": [k for k, _ in record.headers],
    }
    if batch.is_control:
        ctype = _CONTROL_KEY.unpack_from(record.key)[1] if record.key is not None and len(record.key) >= 4 else -1
        item["controlType"] = _CONTROL_TYPES.get(ctype, "UNKNOWN")
        item["controlTypeId"] = ctype
        if ctype in (0, 1) and record.value is not None and len(record.value) >= 6:
            item["coordinatorEpoch"] = _CONTROL_VALUE.unpack_from(record.value)[1]
        elif ctype in _KRAFT_CONTROL_RECORDS:
            item["controlRecord"] = _kraft_control_json(ctype, record)
    elif opts.print_data:
        key, payload = (opts.parser or string_parser)(record)
        item["key"] = key
        item["payload"] = payload
    return item


def dump_log(path: str, opts: Options, problems: Problems) -> Iterator[dict[str, Any]]:
    base = base_offset_of(path)
    yield {"type": "logStartOffset", "offset": base}
    yield from _dump_batches(path, opts, problems)


_SNAPSHOT_NAME = re.compile(r"(\d{20})-(\d{10})\.checkpoint")


def dump_kraft_snapshot(path: str, opts: Options, problems: Problems) -> Iterator[dict[str, Any]]:
    """A KRaft snapshot (`<endOffset>-<epoch>.checkpoint`, or the bootstrap one): its id line, then its batches."""
    name = os.path.basename(path)
    if name == BOOTSTRAP_SNAPSHOT:
        yield {"type": "message", "text": "KRaft bootstrap snapshot"}
    else:
        match = _SNAPSHOT_NAME.fullmatch(name)
        if match is None:
            raise DumpError(f"{path}: not a KRaft snapshot name (<20-digit end offset>-<10-digit epoch>.checkpoint)")
        yield {"type": "snapshotId", "endOffset": int(match[1]), "epoch": int(match[2]),
               "text": f"Snapshot end offset: {int(match[1])}, epoch: {int(match[2])}"}
    yield from _dump_batches(path, opts, problems)


def _dump_batches(path: str, opts: Options, problems: Problems) -> Iterator[dict[str, Any]]:
    data = _read(path, opts.max_bytes if opts.max_bytes != INT32_MAX else None)
    valid_bytes = 0
    last_offset = -1
    for batch in iter_log_batches(data, path, legacy=True):
        if isinstance(batch, LegacyEntry):
            yield legacy_batch_item(batch.message)
            if opts.deep:
                for record in batch.records():
                    if last_offset != -1 and record.offset != last_offset + 1:
                        problems._add(problems.non_consecutive, path, (last_offset, record.offset))
                    last_offset = record.offset
                    yield legacy_record_item(record, opts)
            valid_bytes += batch.size
            continue
        valid = _batch_valid(data, batch)
        if not valid:
            problems.other.append(f"Batch at position {batch.position} of {path} has an invalid CRC")
        yield batch_item(batch, valid)
        if opts.deep:
            for record in batch.records():
                if last_offset != -1 and record.offset != last_offset + 1:
                    problems._add(problems.non_consecutive, path, (last_offset, record.offset))
                last_offset = record.offset
                yield record_item(batch, record, opts)
        valid_bytes += batch.size
    trailing = len(data) - valid_bytes
    if trailing > 0 and opts.max_bytes == INT32_MAX:
        problems.flagged += 1
        yield {"type": "message", "text": f"Found {trailing} invalid bytes at the end of {os.path.basename(path)}"}


# ---- .index and .timeindex ----------------------------------------------------------------------


def _offset_entries(data: bytes, base: int) -> list[tuple[int, int]]:
    """(absolute offset, position) of every whole entry, as OffsetIndex reads them."""
    usable = len(data) - len(data) % _OFFSET_ENTRY.size
    return [(base + rel, pos) for rel, pos in _OFFSET_ENTRY.iter_unpack(data[:usable])]


def time_index_entries(data: bytes, base: int) -> list[tuple[int, int]]:
    """(timestamp, absolute offset) of every whole entry, as TimeIndex reads them."""
    usable = len(data) - len(data) % _TIME_ENTRY.size
    return [(ts, base + rel) for ts, rel in _TIME_ENTRY.iter_unpack(data[:usable])]


def _sanity_item(path: str, reason: str | None, problems: Problems) -> dict[str, Any]:
    """What --index-sanity-check reports for one file; a failure is also a problem (exit 3)."""
    if reason is None:
        return {"type": "sanityCheck", "passed": True, "text": f"{path} passed sanity check."}
    problems.other.append(f"{path} failed sanity check: {reason}")
    return {"type": "sanityCheck", "passed": False, "reason": reason}


def offset_index_sanity(path: str, data: bytes, base: int) -> str | None:
    """OffsetIndex.sanityCheck(): the reason it throws, or None."""
    entries = _offset_entries(data, base)
    if entries and entries[-1][0] < base:
        return (f"Corrupt index found, index file ({os.path.abspath(path)}) has non-zero size but the last offset "
                f"is {entries[-1][0]} which is less than the base offset {base}")
    if len(data) % _OFFSET_ENTRY.size:
        return (f"Index file {os.path.abspath(path)} is corrupt, found {len(data)} bytes which is neither positive "
                f"nor a multiple of {_OFFSET_ENTRY.size}")
    return None


def time_index_sanity(path: str, data: bytes, base: int) -> str | None:
    """TimeIndex.sanityCheck(): the reason it throws, or None."""
    entries = time_index_entries(data, base)
    if entries and entries[-1][0] < entries[0][0]:
        return (f"Corrupt time index found, time index file ({os.path.abspath(path)}) has non-zero size but the last "
                f"timestamp is {entries[-1][0]} which is less than the first timestamp {entries[0][0]}")
    if entries and entries[-1][1] < base:
        return (f"Corrupt time index found, time index file ({os.path.abspath(path)}) has non-zero size but the last "
                f"offset is {entries[-1][1]} which is less than the first offset {base}")
    if len(data) % _TIME_ENTRY.size:
        return (f"Time index file {os.path.abspath(path)} is corrupt, found {len(data)} bytes which is neither "
                f"positive nor a multiple of {_TIME_ENTRY.size}")
    return None


def _log_data(path: str) -> bytes | None:
    log_path = _sibling(path, LOG_SUFFIX)
    try:
        return _read(log_path)
    except FileNotFoundError:
        return None


def _log_to_verify_against(path: str, problems: Problems) -> bytes | None:
    """The `.log` beside an index; its absence is a problem, since nothing can be verified."""
    log = _log_data(path)
    if log is None:
        problems.other.append(f"cannot verify {path}: {_sibling(path, LOG_SUFFIX)} does not exist")
    return log


def dump_index(path: str, opts: Options, problems: Problems) -> Iterator[dict[str, Any]]:
    base = base_offset_of(path)
    data = _read(path)
    entries = _offset_entries(data, base)
    if not entries:
        yield {"type": "message", "text": f"{path} is empty."}
        return
    if opts.sanity_only:
        yield _sanity_item(path, offset_index_sanity(path, data, base), problems)
        return
    log = _log_to_verify_against(path, problems)
    for i, (offset, position) in enumerate(entries):
        if offset == base and i > 0:
            return  # the zero-filled tail of a preallocated index
        if log is not None:
            window = log[position:position + opts.max_message_size] if position >= 0 else b""
            first = next(iter_log_batches(window, path, legacy=True), None)
            log_offset = first.last_offset if first is not None else -1
            if log_offset != offset:
                problems._add(problems.index_mismatches, path, (offset, log_offset))
        if not opts.verify_only:
            yield {"type": "indexEntry", "offset": offset, "position": position}


def _lookup(entries: list[tuple[int, int]], base: int, target: int) -> int:
    """OffsetIndex.lookup(target).position: the greatest entry ≤ target, else position 0."""
    position = 0
    for i, (offset, pos) in enumerate(entries):
        if offset == base and i > 0:
            break
        if offset > target:
            break
        position = pos
    return position


def dump_time_index(path: str, opts: Options, problems: Problems) -> Iterator[dict[str, Any]]:
    base = base_offset_of(path)
    data = _read(path)
    if opts.sanity_only:
        yield _sanity_item(path, time_index_sanity(path, data, base), problems)
        return
    log = _log_to_verify_against(path, problems)
    try:
        offset_entries = _offset_entries(_read(_sibling(path, INDEX_SUFFIX)), base)
    except FileNotFoundError:
        offset_entries = []
    prev = -1
    for i, (timestamp, offset) in enumerate(time_index_entries(data, base)):
        if offset == base and i > 0:
            return
        if log is not None:
            start = _lookup(offset_entries, base, offset)
            found = next((b for b in iter_log_batches(log[start:], path, legacy=True) if b.last_offset >= offset), None)
            if found is None:
                problems._add(problems.not_found, path, (offset, -1))
            elif found.last_offset != offset:
                problems._add(problems.not_found, path, (offset, found.last_offset))
            else:
                max_ts = max((r.timestamp for r in found.records()), default=-1)
                if max_ts != timestamp:
                    problems._add(problems.time_mismatches, path, (timestamp, max_ts))
                if prev >= timestamp:
                    problems._add(problems.out_of_order, path, (timestamp, prev))
        if not opts.verify_only:
            yield {"type": "timeIndexEntry", "timestamp": timestamp, "offset": offset}
        prev = timestamp


# ---- .txnindex and .snapshot --------------------------------------------------------------------


def dump_txn_index(path: str, opts: Options, problems: Problems) -> Iterator[dict[str, Any]]:
    data = _read(path)
    usable = len(data) - len(data) % _TXN_ENTRY.size  # a trailing partial entry is ignored
    for version, pid, first, last, lso in _TXN_ENTRY.iter_unpack(data[:usable]):
        if version > 0:
            problems.other.append(f"Unexpected aborted transaction version {version} in {path}")
            return
        yield {"type": "abortedTxn", "version": version, "producerId": pid, "firstOffset": first,
               "lastOffset": last, "lastStableOffset": lso}


def dump_snapshot(path: str, opts: Options, problems: Problems) -> Iterator[dict[str, Any]]:
    from crc32c import crc32c

    from storage.errors import CorruptSnapshotError
    from storage.producer_snapshot import decode_snapshot
    from storage.sequence import dec_seq

    data = _read(path)
    try:
        entries = decode_snapshot(data)
    except CorruptSnapshotError as exc:
        if len(data) >= 6:
            stored = struct.unpack_from(">I", data, 2)[0]
            computed = crc32c(data[6:])
            if stored != computed:
                problems.other.append(
                    f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {stored} Computed crc: {computed}")
                return
        problems.other.append(f"{path}: {exc}")
        return
    for e in entries:
        item: dict[str, Any] = {
            "type": "producer",
            "producerId": e.producer_id,
            "producerEpoch": e.epoch,
            "coordinatorEpoch": e.coordinator_epoch,
            "currentTxnFirstOffset": None if e.current_txn_first_offset < 0 else e.current_txn_first_offset,
            "lastTimestamp": e.timestamp,
        }
        if e.last_offset >= 0:  # batch metadata is restored only for a producer with a data batch
            item.update(firstSequence=dec_seq(e.last_sequence, e.offset_delta), lastSequence=e.last_sequence,
                        lastOffset=e.last_offset, offsetDelta=e.offset_delta, timestamp=e.timestamp)
        yield item


DUMPERS: dict[str, Callable[[str, Options, Problems], Iterator[dict[str, Any]]]] = {
    LOG_SUFFIX: dump_log,
    INDEX_SUFFIX: dump_index,
    TIME_INDEX_SUFFIX: dump_time_index,
    SNAPSHOT_SUFFIX: dump_snapshot,
    TXN_INDEX_SUFFIX: dump_txn_index,
    KRAFT_SNAPSHOT_SUFFIX: dump_kraft_snapshot,
}


def dumper_for(path: str):
    for suffix, fn in DUMPERS.items():
        if path.endswith(suffix):
            return fn
    return None


# ---- text lines ---------------------------------------------------------------------------------


def _bool(value: bool) -> str:
    return "true" if value else "false"


def batch_line(b: dict[str, Any]) -> str:
    if b["magic"] < 2:  # printBatchLevel: a legacy entry shows only its offset before the common fields
        return (f"offset: {b['lastOffset']} position: {b['position']} {b['timestampType']}: {b['maxTimestamp']} "
                f"size: {b['size']} magic: {b['magic']} compresscodec: {b['compresscodec']} crc: {b['crc']} "
                f"isvalid: {_bool(b['isvalid'])}")
    return (f"baseOffset: {b['baseOffset']} lastOffset: {b['lastOffset']} count: {b['count']} "
            f"baseSequence: {b['baseSequence']} lastSequence: {b['lastSequence']} producerId: {b['producerId']} "
            f"producerEpoch: {b['producerEpoch']} partitionLeaderEpoch: {b['partitionLeaderEpoch']} "
            f"isTransactional: {_bool(b['isTransactional'])} isControl: {_bool(b['isControl'])} "
            f"deleteHorizonMs: {optional_long(b['deleteHorizonMs'])} position: {b['position']} "
            f"{b['timestampType']}: {b['maxTimestamp']} size: {b['size']} magic: {b['magic']} "
            f"compresscodec: {b['compresscodec']} crc: {b['crc']} isvalid: {_bool(b['isvalid'])}")


def record_line(r: dict[str, Any], skip_metadata: bool) -> str:
    """DumpLogSegments.dumpLog's record line, including its `--skip-record-metadata` quirks."""
    out = ""
    prefix = "| "
    if not skip_metadata and r.get("magic", 2) < 2:
        # Kafka's legacy record line has no sequence or headers, and its format string ends
        # in a stray '}' ("crc: ${r.checksum}}"), printed as is.
        out += (f"{prefix}offset: {r['offset']} {r['timestampType']}: {r['timestamp']} keySize: {r['keySize']} "
                f"valueSize: {r['valueSize']} isValid: {_bool(r['isValid'])} crc: {r['crc']}}}")
        prefix = " "
    elif not skip_metadata:
        out += (f"{prefix}offset: {r['offset']} {r['timestampType']}: {r['timestamp']} keySize: {r['keySize']} "
                f"valueSize: {r['valueSize']} sequence: {r['sequence']} headerKeys: [{','.join(r['headerKeys'])}]")
        prefix = " "
        if "controlType" in r:
            if "coordinatorEpoch" in r:
                out += f" endTxnMarker: {r['controlType']} coordinatorEpoch: {r['coordinatorEpoch']}"
            elif "controlRecord" in r:
                out += f" {_KRAFT_CONTROL_RECORDS[r['controlTypeId']][0]} {_compact(r['controlRecord'])}"
            else:
                out += f" controlType: {r['controlType']}({r['controlTypeId']})"
    if "controlType" not in r:
        if r.get("key") is not None:
            out += f"{prefix}key: {r['key']}"
        if r.get("payload") is not None:
            out += f" payload: {r['payload']}"
    return out


def producer_line(p: dict[str, Any]) -> str:
    line = (f"producerId: {p['producerId']} producerEpoch: {p['producerEpoch']} "
            f"coordinatorEpoch: {p['coordinatorEpoch']} currentTxnFirstOffset: "
            f"{optional_long(p['currentTxnFirstOffset'])} lastTimestamp: {p['lastTimestamp']} ")
    if "lastOffset" in p:
        line += (f"firstSequence: {p['firstSequence']} lastSequence: {p['lastSequence']} "
                 f"lastOffset: {p['lastOffset']} offsetDelta: {p['offsetDelta']} timestamp: {p['timestamp']}")
    return line


def text_line(item: dict[str, Any], opts: Options) -> str | None:
    """The kafka-dump-log line of one item (None: the item prints nothing on stdout)."""
    kind = item["type"]
    if kind == "file":
        return f"Dumping {item['file']}"
    if kind == "logStartOffset":
        return f"Log starting offset: {item['offset']}"
    if kind == "batch":
        return batch_line(item)
    if kind == "record":
        return record_line(item, opts.skip_metadata)
    if kind == "indexEntry":
        return f"offset: {item['offset']} position: {item['position']}"
    if kind == "timeIndexEntry":
        return f"timestamp: {item['timestamp']} offset: {item['offset']}"
    if kind == "abortedTxn":
        return (f"version: {item['version']} producerId: {item['producerId']} firstOffset: {item['firstOffset']} "
                f"lastOffset: {item['lastOffset']} lastStableOffset: {item['lastStableOffset']}")
    if kind == "producer":
        return producer_line(item)
    if kind in ("message", "sanityCheck", "snapshotId"):
        return item.get("text")
    raise AssertionError(f"unknown item type {kind}")


# ---- decoders for internal topics ---------------------------------------------------------------

_TXN_STATE_NAMES = {
    "EMPTY": "Empty", "ONGOING": "Ongoing", "PREPARE_COMMIT": "PrepareCommit", "PREPARE_ABORT": "PrepareAbort",
    "COMPLETE_COMMIT": "CompleteCommit", "COMPLETE_ABORT": "CompleteAbort", "DEAD": "Dead",
    "PREPARE_EPOCH_FENCE": "PrepareEpochFence",
}


def transaction_log_parser(record: Any) -> tuple[str | None, str | None]:
    """`--transaction-log-decoder`: TransactionLogMessageParser's key and payload strings."""
    from txlog.transaction_log import decode_key, decode_value

    if record.key is None:
        return None, None
    version = struct.unpack_from(">h", record.key)[0] if len(record.key) >= 2 else -1
    if version != 0:
        return f"unknown::version={version}", None
    try:
        txn_id = decode_key(record.key)
        value = decode_value(record.value)
    except Exception as exc:  # noqa: BLE001  a bad record is reported in the line, as Kafka does
        return f"Error at offset {record.offset}, skipping. {exc}", None
    key = f"transaction_metadata::transactionalId={txn_id}"
    if value is None:
        return key, "<DELETE>"
    partitions = ",".join(f"{t}-{p}" for t, p in value.partitions)
    return key, (f"producerId:{value.producer_id},producerEpoch:{value.producer_epoch},"
                 f"state={_TXN_STATE_NAMES.get(value.state.name, value.state.name)},partitions=[{partitions}],"
                 f"txnLastUpdateTimestamp={value.last_update_ms},txnTimeoutMs={value.timeout_ms}")


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def offsets_parser(record: Any) -> tuple[str | None, str | None]:
    """`--offsets-decoder`: `{"type":"1","data":{…}}` keys and `{"version":"3","data":{…}}` payloads."""
    from txlog.offset_log import (
        GroupMetadataKey,
        OffsetKey,
        decode_key,
        decode_offset_value,
    )

    if record.key is None:
        return f"Error at offset {record.offset}, skipping. the record has no key", None
    try:
        key = decode_key(record.key)
        key_version = struct.unpack_from(">h", record.key)[0]
        if isinstance(key, OffsetKey):
            key_json = _compact({"type": str(key_version),
                                 "data": {"group": key.group, "topic": key.topic, "partition": key.partition}})
            value = decode_offset_value(record.value)
            if value is None:
                return key_json, "<DELETE>"
            version = struct.unpack_from(">h", record.value)[0]
            data: dict[str, Any] = {"offset": value.offset}
            if version >= 3:
                data["leaderEpoch"] = value.leader_epoch
            data["metadata"] = value.metadata
            data["commitTimestamp"] = value.commit_timestamp
            if version == 1:
                data["expireTimestamp"] = value.expire_timestamp
            return key_json, _compact({"version": str(version), "data": data})
        if isinstance(key, GroupMetadataKey):
            key_json = _compact({"type": str(key_version), "data": {"group": key.group}})
            if record.value is None:
                return key_json, "<DELETE>"
            return key_json, _compact(group_metadata_json(record.value))
        return f"Unknown record type {key_version} at offset {record.offset}, skipping.", None
    except Exception as exc:  # noqa: BLE001
        return f"Error at offset {record.offset}, skipping. {exc}", None


def cluster_metadata_parser(record: Any) -> tuple[str | None, str | None]:
    """`--cluster-metadata-decoder`: ClusterMetadataLogMessageParser's payload; metadata records have no key.

    A record that does not decode prints Kafka's `Error at <offset>, skipping. <reason>` as
    its payload, so one damaged record never hides the rest of the file.
    """
    from storage.errors import CorruptRecordError
    from txlog.cluster_metadata import decode_metadata_record, metadata_record_json

    try:
        return None, metadata_record_json(decode_metadata_record(record.value))
    except CorruptRecordError as exc:
        return None, f"Error at {record.offset}, skipping. {exc}"


def _base64(data: bytes | None) -> str | None:
    """Jackson's BinaryNode text: standard base64 with padding (null stays null)."""
    return None if data is None else base64.b64encode(data).decode("ascii")


def _partitions_json(grouped: Any) -> list[dict[str, Any]]:
    return [{"topic": topic, "partitions": list(ids)} for topic, ids in grouped]


def subscription_json(data: bytes) -> dict[str, Any]:
    """ConsumerProtocolSubscriptionJsonConverter.write: the fields the decoded version has."""
    from txlog.group_metadata import decode_subscription

    version, sub = decode_subscription(data)
    out: dict[str, Any] = {"topics": list(sub.topics), "userData": _base64(sub.user_data)}
    if version >= 1:
        out["ownedPartitions"] = _partitions_json(sub.owned_partitions)
    if version >= 2:
        out["generationId"] = sub.generation_id
    if version >= 3:
        out["rackId"] = sub.rack_id
    return out


def assignment_json(data: bytes) -> dict[str, Any]:
    """ConsumerProtocolAssignmentJsonConverter.write."""
    from txlog.group_metadata import decode_assignment

    _, assignment = decode_assignment(data)
    return {"assignedPartitions": _partitions_json(assignment.assigned_partitions),
            "userData": _base64(assignment.user_data)}


def _decoded_or_bytes(decode: Callable[[bytes], dict[str, Any]], data: bytes) -> Any:
    """Kafka swallows a member's undecodable subscription or assignment and keeps the bytes."""
    from storage.errors import KafkaError

    try:
        return decode(data)
    except (KafkaError, ValueError):
        return _base64(data)


def group_metadata_json(data: bytes) -> dict[str, Any]:
    """`{"version":"N","data":{...}}` of a GroupMetadataValue, as OffsetsMessageParser prints it.

    Fields appear in the schema's order and only from the version that has them; for
    protocol type "consumer" each member's subscription and assignment are decoded,
    otherwise (and when they do not decode) they stay base64 bytes.
    """
    from txlog.group_metadata import CONSUMER_PROTOCOL_TYPE, decode_group_metadata_value

    version, value = decode_group_metadata_value(data)
    consumer = value.protocol_type == CONSUMER_PROTOCOL_TYPE
    body: dict[str, Any] = {"protocolType": value.protocol_type, "generation": value.generation,
                            "protocol": value.protocol, "leader": value.leader}
    if version >= 2:
        body["currentStateTimestamp"] = value.current_state_timestamp
    members = []
    for m in value.members:
        member: dict[str, Any] = {"memberId": m.member_id}
        if version >= 3:
            member["groupInstanceId"] = m.group_instance_id
        member.update(clientId=m.client_id, clientHost=m.client_host)
        if version >= 1:
            member["rebalanceTimeout"] = m.rebalance_timeout
        member["sessionTimeout"] = m.session_timeout
        member["subscription"] = (_decoded_or_bytes(subscription_json, m.subscription) if consumer
                                  else _base64(m.subscription))
        member["assignment"] = (_decoded_or_bytes(assignment_json, m.assignment) if consumer
                                else _base64(m.assignment))
        members.append(member)
    body["members"] = members
    return {"version": str(version), "data": body}
