"""kafka-dump-log's file readers and its exact text lines (docs/cli-conventions.md §2, Kafka ≥ 3.5).

Each `dump_*` function reads one file through the storage layer's read-only entry points
(`FileRecords` for batches, the index classes opened `writable=False`, the snapshot
decoder: none of them takes a lock, creates or repairs a file) and yields *items*: small
dicts with a `type` key. What stays here is Kafka's: which checks DumpLogSegments runs
and the words and lines it prints. `text_line` turns an item into the line kafka-dump-log.sh prints;
`cli.inspect` prints those lines or collects the items as JSON. Problems found on the way
(index entries that do not match the log, a corrupt snapshot, ...) are collected in a
`Problems`, printed on stderr in Kafka's words, and make `txlog inspect` exit 3.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from storage.compression import Compression
from storage.console_format import dump_record_lines
from storage.errors import CorruptSnapshotError
from storage.file_check import DEFAULT_MAX_MESSAGE_SIZE, index_entry_mismatch, offset_index_sanity, time_index_sanity
from storage.file_records import FileRecords
from storage.legacy_records import LegacyMessage, records_of
from storage.log_files import (
    BOOTSTRAP_CHECKPOINT,
    HIGH_WATERMARK_FILE,
    INDEX_FILE_SUFFIX,
    KRAFT_SNAPSHOT_FILE_SUFFIX,
    LOG_FILE_SUFFIX,
    PRODUCER_SNAPSHOT_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
    kraft_snapshot_id,
    offset_from_file_name,
    sibling_file,
)
from storage.offset_index import OffsetIndex
from storage.producer_snapshot import decode_snapshot, snapshot_crcs
from storage.records import (
    COMPRESSION_MASK,
    TIMESTAMP_TYPE_MASK,
    ControlType,
    Record,
    RecordBatch,
    TimestampType,
    peek_control_type,
    peek_coordinator_epoch,
)
from storage.sequence import INT32_MAX, dec_seq
from storage.time_index import TimeIndex
from storage.transaction_index import TransactionIndex
from txlog.schemas.message_parsers import compact_json

if TYPE_CHECKING:
    from txlog.schemas.schema_types import SchemaReader

#: What a key/value decoder is given: a v2 record, or a magic 0/1 message.
DumpedRecord = Record | LegacyMessage

#: The files kafka-dump-log reads (a KRaft `.checkpoint` is record batches, dumped like a `.log`).
KNOWN_SUFFIXES = (
    LOG_FILE_SUFFIX,
    INDEX_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
    PRODUCER_SNAPSHOT_FILE_SUFFIX,
    KRAFT_SNAPSHOT_FILE_SUFFIX,
)


@dataclass
class Options:
    print_data: bool = False
    deep: bool = False
    skip_metadata: bool = False
    max_bytes: int = INT32_MAX
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    sanity_only: bool = False
    verify_only: bool = False
    parser: Callable[[DumpedRecord], tuple[str | None, str | None]] | None = None


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
        return any(
            (
                self.index_mismatches,
                self.time_mismatches,
                self.out_of_order,
                self.not_found,
                self.non_consecutive,
                self.other,
                self.flagged,
            )
        )

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
    """The segment's base offset: the file name before its first '.' (docs/kafka-formats.md §3.1)."""
    try:
        return offset_from_file_name(path)
    except ValueError:
        raise DumpError(f"{path}: the file name does not start with an offset") from None


def optional_long(value: int | None) -> str:
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


def _continuation(b: int) -> bool:
    return b & 0xC0 == 0x80


def _java_malformed_length(data: bytes, start: int) -> int:
    """How many bytes Java's `new String(bytes, UTF_8)` replaces with one U+FFFD at `start`.

    Kafka's StringDecoder is that constructor, and Java groups malformed bytes differently
    from Python's `errors="replace"` (which replaces each maximal subpart): a lead byte and
    a valid second byte followed by a bad third (`ED BF 4A`) are one U+FFFD in Java, two in
    Python; a well-formed surrogate (`ED A0 80`) is one in Java, three in Python; a
    truncated sequence at the end of the input is one for all its bytes. This follows the
    JDK 17 decoder (java.lang.String.decodeUTF8_UTF16 and its malformed3/malformed4).
    """
    b1, rest = data[start], len(data) - start - 1
    if 0xE0 <= b1 <= 0xEF:
        if rest >= 2:
            b2 = data[start + 1]
            bad2 = (b1 == 0xE0 and b2 & 0xE0 == 0x80) or not _continuation(b2)
            if not bad2 and _continuation(data[start + 2]):
                return 3  # well-formed bytes of a surrogate
            return 1 if bad2 else 2
        if rest == 1 and ((b1 == 0xE0 and data[start + 1] & 0xE0 == 0x80) or not _continuation(data[start + 1])):
            return 1
        return rest + 1  # truncated at the end: the rest is one U+FFFD
    if 0xF0 <= b1 <= 0xF7:
        if rest >= 3:
            b2 = data[start + 1]
            if (
                b1 > 0xF4
                or (b1 == 0xF0 and not 0x90 <= b2 <= 0xBF)
                or (b1 == 0xF4 and b2 & 0xF0 != 0x80)
                or not _continuation(b2)
            ):
                return 1
            return 2 if not _continuation(data[start + 2]) else 3
        if b1 > 0xF4 or (
            rest >= 1
            and (
                (b1 == 0xF0 and not 0x90 <= data[start + 1] <= 0xBF)
                or (b1 == 0xF4 and data[start + 1] & 0xF0 != 0x80)
                or not _continuation(data[start + 1])
            )
        ):
            return 1
        if rest >= 2 and not _continuation(data[start + 2]):
            return 2
        return rest + 1
    return 1


def _java_replace(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    return "\ufffd", exc.start + _java_malformed_length(exc.object, exc.start)


codecs.register_error("txlog-java-replace", _java_replace)


def java_string(data: bytes) -> str:
    """`new String(data, UTF_8)` as Java decodes it (Kafka's StringDecoder), malformed bytes and all."""
    return data.decode("utf-8", errors="txlog-java-replace")


def _utf8(data: bytes | None) -> str | None:
    return None if data is None else java_string(data)


def string_parser(record: DumpedRecord) -> tuple[str | None, str | None]:
    """Kafka's default StringDecoder for keys and values."""
    return _utf8(record.key), _utf8(record.value)


# ---- .log ---------------------------------------------------------------------------------------


def batch_item(batch: RecordBatch, valid: bool) -> dict[str, Any]:
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
        "timestampType": TimestampType(bool(batch.attributes & TIMESTAMP_TYPE_MASK)).kafka_name,
        "maxTimestamp": batch.max_timestamp,
        "size": batch.size,
        "magic": batch.magic,
        "compresscodec": Compression.name_of(batch.attributes & COMPRESSION_MASK),
        "crc": batch.crc,
        "isvalid": valid,
    }


def legacy_batch_item(m: LegacyMessage) -> dict[str, Any]:
    """A shallow magic 0/1 entry: Kafka prints only its (last) offset and the common fields."""
    return {
        "type": "batch",
        "lastOffset": m.offset,
        "position": m.position,
        "timestampType": m.timestamp_type,
        "maxTimestamp": m.timestamp,
        "size": m.size,
        "magic": m.magic,
        "compresscodec": Compression.name_of(m.codec),
        "crc": m.crc,
        "isvalid": m.valid,
    }


def legacy_record_item(m: LegacyMessage, opts: Options) -> dict[str, Any]:
    item: dict[str, Any] = {
        "type": "record",
        "magic": m.magic,
        "offset": m.offset,
        "timestampType": m.timestamp_type,
        "timestamp": m.timestamp,
        "keySize": -1 if m.key is None else len(m.key),
        "valueSize": -1 if m.value is None else len(m.value),
        "isValid": m.valid,
        "crc": m.crc,
    }
    if opts.print_data:
        key, payload = (opts.parser or string_parser)(m)
        item["key"] = key
        item["payload"] = payload
    return item


def _snapshot_header(r: SchemaReader) -> dict[str, Any]:
    return {"version": r.i16("version"), "lastContainedLogTimestamp": r.i64("last contained log timestamp")}


def _snapshot_footer(r: SchemaReader) -> dict[str, Any]:
    return {"version": r.i16("version")}


def _kraft_version(r: SchemaReader) -> dict[str, Any]:
    return {"version": r.i16("version"), "kRaftVersion": r.i16("kraft version")}


def _compact_array(r: SchemaReader, read: Callable[[SchemaReader], dict[str, Any]], what: str) -> list:
    """A flexible array of structs, each followed by its own tag section."""
    items = []
    for _ in range(r.compact_array_count(1, what) or 0):
        items.append(read(r))
        r.tagged_fields()
    return items


def _voter_id(r: SchemaReader) -> dict[str, Any]:
    return {"voterId": r.i32("voter id")}


def _leader_change(r: SchemaReader) -> dict[str, Any]:
    """LeaderChangeMessage v0 (KIP-595): the new leader and the voters that elected it."""
    return {
        "version": r.i16("version"),
        "leaderId": r.i32("leader id"),
        "voters": _compact_array(r, _voter_id, "voters"),
        "grantingVoters": _compact_array(r, _voter_id, "granting voters"),
    }


def _endpoint(r: SchemaReader) -> dict[str, Any]:
    return {"name": r.compact_string("endpoint name"), "host": r.compact_string("host"), "port": r.u16("port")}


def _voter(r: SchemaReader) -> dict[str, Any]:
    from txlog.schemas.schema_types import uuid_text

    voter: dict[str, Any] = {"voterId": r.i32("voter id"), "voterDirectoryId": uuid_text(r.uuid("directory id"))}
    voter["endpoints"] = _compact_array(r, _endpoint, "endpoints")
    voter["kRaftVersionFeature"] = {
        "minSupportedVersion": r.i16("min supported version"),
        "maxSupportedVersion": r.i16("max supported version"),
    }
    r.tagged_fields()  # the feature struct's own tag section
    return voter


def _kraft_voters(r: SchemaReader) -> dict[str, Any]:
    """VotersRecord v0 (KIP-853, Kafka 3.9+): the voter set with each voter's endpoints."""
    return {"version": r.i16("version"), "voters": _compact_array(r, _voter, "voters")}


# KRaft's control records that DumpLogSegments prints as JSON: type -> (its label, the v0
# fields). Each value is a flexible struct whose first field is its own version. The label
# is printed as Kafka prints it: `LeaderChange:` with a colon, the others without.
_KRAFT_CONTROL_RECORDS: dict[int, tuple[str, Callable[[SchemaReader], dict[str, Any]]]] = {
    2: ("LeaderChange:", _leader_change),
    3: ("SnapshotHeader", _snapshot_header),
    4: ("SnapshotFooter", _snapshot_footer),
    5: ("KRaftVersion", _kraft_version),
    6: ("KRaftVoters", _kraft_voters),
}


def _kraft_control_json(ctype: int, record: Record) -> dict[str, Any]:
    from storage.errors import CorruptRecordError
    from txlog.schemas.schema_types import SchemaReader

    label, read = _KRAFT_CONTROL_RECORDS[ctype]
    label = label.rstrip(":")
    if record.value is None:
        raise CorruptRecordError(f"{label} control record at offset {record.offset} has no value")
    r = SchemaReader(record.value, f"{label} control record at offset {record.offset}")
    fields = read(r)
    r.tagged_fields()
    r.expect_end()
    return fields


def record_item(batch: RecordBatch, record: Record, opts: Options) -> dict[str, Any]:
    item: dict[str, Any] = {
        "type": "record",
        "offset": record.offset,
        "timestampType": TimestampType(bool(batch.attributes & TIMESTAMP_TYPE_MASK)).kafka_name,
        "timestamp": record.timestamp,
        "keySize": -1 if record.key is None else len(record.key),
        "valueSize": -1 if record.value is None else len(record.value),
        "sequence": record.sequence,
        "headerKeys": [k for k, _ in record.headers],
    }
    if batch.is_control:
        ctype = peek_control_type(record.key)
        item["controlType"] = ControlType.kafka_name_of(ctype)
        item["controlTypeId"] = ctype
        coordinator_epoch = peek_coordinator_epoch(record.value) if ctype in (0, 1) else None
        if coordinator_epoch is not None:
            item["coordinatorEpoch"] = coordinator_epoch
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


def dump_kraft_snapshot(path: str, opts: Options, problems: Problems) -> Iterator[dict[str, Any]]:
    """A KRaft snapshot (`<endOffset>-<epoch>.checkpoint`, or the bootstrap one): its id line, then its batches."""
    name = os.path.basename(path)
    if name == BOOTSTRAP_CHECKPOINT:
        yield {"type": "message", "text": "KRaft bootstrap snapshot"}
    else:
        snapshot_id = kraft_snapshot_id(name)
        if snapshot_id is None:
            raise DumpError(f"{path}: not a KRaft snapshot name (<20-digit end offset>-<10-digit epoch>.checkpoint)")
        end_offset, epoch = snapshot_id
        yield {
            "type": "snapshotId",
            "endOffset": end_offset,
            "epoch": epoch,
            "text": f"Snapshot end offset: {end_offset}, epoch: {epoch}",
        }
    yield from _dump_batches(path, opts, problems)


def _dump_batches(path: str, opts: Options, problems: Problems) -> Iterator[dict[str, Any]]:
    with FileRecords.open(path) as log:
        end = log.size() if opts.max_bytes == INT32_MAX else min(log.size(), opts.max_bytes)
        valid_bytes = 0
        last_offset = -1
        # CRCs unchecked, as FileRecords.batches() in DumpLogSegments: each batch line says `isvalid:`.
        for batch in log.batches(0, end, verify_crc=False, legacy=True):
            if isinstance(batch, LegacyMessage):
                yield legacy_batch_item(batch)
                if opts.deep:
                    for record in records_of(batch, path=path):
                        if last_offset != -1 and record.offset != last_offset + 1:
                            problems._add(problems.non_consecutive, path, (last_offset, record.offset))
                        last_offset = record.offset
                        yield legacy_record_item(record, opts)
                valid_bytes += batch.size
                continue
            valid = batch.is_valid()
            if not valid:
                problems.other.append(f"Batch at position {batch.position} of {path} has an invalid CRC")
            yield batch_item(batch, valid)
            if opts.deep:
                # One item for the batch's records: `text_of` formats them in one go, `expanded`
                # turns them into one "record" item each for the JSON outputs.
                # Offset gaps between v2 records are not reported: compaction leaves them (and
                # Kafka's stderr list of them is no error either; docs/kafka-formats.md §10).
                # Decoded when formatted (`batch_records`): text output may print them natively instead.
                yield {"type": "records", "batch": batch, "records": None}
            valid_bytes += batch.size
    trailing = end - valid_bytes
    if trailing > 0 and opts.max_bytes == INT32_MAX:
        problems.flagged += 1
        yield {"type": "message", "text": f"Found {trailing} invalid bytes at the end of {os.path.basename(path)}"}


# ---- .index and .timeindex ----------------------------------------------------------------------


def _sanity_item(path: str, reason: str | None, problems: Problems) -> dict[str, Any]:
    """What --index-sanity-check reports for one file; a failure is also a problem (exit 3)."""
    if reason is None:
        return {"type": "sanityCheck", "passed": True, "text": f"{path} passed sanity check."}
    problems.other.append(f"{path} failed sanity check: {reason}")
    return {"type": "sanityCheck", "passed": False, "reason": reason}


def _stored(index_class: type, path: str, base: int) -> tuple[list, int]:
    """(every whole entry, file length) of an index file, opened read-only."""
    with index_class(path, base, writable=False) as index:
        return index.stored_entries(), index.file_length()


def _log_to_verify_against(path: str, problems: Problems) -> FileRecords | None:
    """The `.log` beside an index; its absence is a problem, since nothing can be verified."""
    log_path = sibling_file(path, LOG_FILE_SUFFIX)
    try:
        return FileRecords.open(log_path)
    except FileNotFoundError:
        problems.other.append(f"cannot verify {path}: {log_path} does not exist")
        return None


def dump_index(path: str, opts: Options, problems: Problems) -> Iterator[dict[str, Any]]:
    base = base_offset_of(path)
    entries, _ = _stored(OffsetIndex, path, base)
    if not entries:
        yield {"type": "message", "text": f"{path} is empty."}
        return
    if opts.sanity_only:
        yield _sanity_item(path, offset_index_sanity(path, base), problems)
        return
    log = _log_to_verify_against(path, problems)
    try:
        for i, (offset, position) in enumerate(entries):
            if offset == base and i > 0:
                return  # the zero-filled tail of a preallocated index
            if log is not None:
                # The writers' layouts, as `txlog verify` accepts them (an append's largest offset at
                # its first batch): kafka-dump-log's first-batch check flags every group commit.
                following = entries[i + 1][1] if i + 1 < len(entries) and entries[i + 1][0] != base else None
                log_offset = index_entry_mismatch(
                    log, offset, position, following, max_message_size=opts.max_message_size
                )
                if log_offset is not None:
                    problems._add(problems.index_mismatches, path, (offset, log_offset))
            if not opts.verify_only:
                yield {"type": "indexEntry", "offset": offset, "position": position}
    finally:
        if log is not None:
            log.close()


def _lookup(entries: list[tuple[int, int]], base: int, target: int) -> int:
    """OffsetIndex.lookup(target).position as DumpLogSegments sees the file: up to its zero-filled tail."""
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
    if opts.sanity_only:
        yield _sanity_item(path, time_index_sanity(path, base), problems)
        return
    entries, _ = _stored(TimeIndex, path, base)
    log = _log_to_verify_against(path, problems)
    offset_entries, _ = _stored(OffsetIndex, sibling_file(path, INDEX_FILE_SUFFIX), base)
    prev = -1
    try:
        for i, (timestamp, offset) in enumerate(entries):
            if offset == base and i > 0:
                return
            if log is not None:
                start = _lookup(offset_entries, base, offset)
                found = next(
                    (b for b in log.batches(start, verify_crc=False, legacy=True) if b.last_offset >= offset), None
                )
                if found is None:
                    problems._add(problems.not_found, path, (offset, -1))
                elif found.last_offset != offset:
                    problems._add(problems.not_found, path, (offset, found.last_offset))
                else:
                    records = records_of(found, path=path) if isinstance(found, LegacyMessage) else found.records()
                    max_ts = max((r.timestamp for r in records), default=-1)
                    if max_ts != timestamp:
                        problems._add(problems.time_mismatches, path, (timestamp, max_ts))
                    if prev >= timestamp:
                        problems._add(problems.out_of_order, path, (timestamp, prev))
            if not opts.verify_only:
                yield {"type": "timeIndexEntry", "timestamp": timestamp, "offset": offset}
            prev = timestamp
    finally:
        if log is not None:
            log.close()


# ---- .txnindex and .snapshot --------------------------------------------------------------------


def dump_txn_index(path: str, opts: Options, problems: Problems) -> Iterator[dict[str, Any]]:
    entries, _ = _stored(TransactionIndex, path, base_offset_of(path))  # a trailing partial entry is ignored
    for e in entries:
        if e.version > 0:
            problems.other.append(f"Unexpected aborted transaction version {e.version} in {path}")
            return
        yield {
            "type": "abortedTxn",
            "version": e.version,
            "producerId": e.producer_id,
            "firstOffset": e.first_offset,
            "lastOffset": e.last_offset,
            "lastStableOffset": e.last_stable_offset,
        }


def dump_high_watermark(path: str, opts: Options, problems: Problems) -> Iterator[dict[str, Any]]:
    """txlog's own `txlog.high-watermark` (no Kafka counterpart): the offset its log is known durable to."""
    from storage.high_watermark import UNREADABLE, decode

    with open(path, "rb") as f:
        value = decode(f.read())
    if value == UNREADABLE:
        problems.other.append(f"{path} holds no valid high watermark (the partition's next writer rewrites it)")
        return
    yield {"type": "message", "text": f"highWatermark: {value}"}


def dump_snapshot(path: str, opts: Options, problems: Problems) -> Iterator[dict[str, Any]]:
    with open(path, "rb") as f:  # the bytes as they are: a damaged snapshot is reported, not skipped
        data = f.read()
    try:
        entries = decode_snapshot(data)
    except CorruptSnapshotError as exc:
        crcs = snapshot_crcs(data)
        if crcs is not None and crcs[0] != crcs[1]:
            problems.other.append(
                f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {crcs[0]} Computed crc: {crcs[1]}"
            )
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
            item.update(
                firstSequence=dec_seq(e.last_sequence, e.offset_delta),
                lastSequence=e.last_sequence,
                lastOffset=e.last_offset,
                offsetDelta=e.offset_delta,
                timestamp=e.timestamp,
            )
        yield item


DUMPERS: dict[str, Callable[[str, Options, Problems], Iterator[dict[str, Any]]]] = {
    LOG_FILE_SUFFIX: dump_log,
    INDEX_FILE_SUFFIX: dump_index,
    TIME_INDEX_FILE_SUFFIX: dump_time_index,
    PRODUCER_SNAPSHOT_FILE_SUFFIX: dump_snapshot,
    TXN_INDEX_FILE_SUFFIX: dump_txn_index,
    KRAFT_SNAPSHOT_FILE_SUFFIX: dump_kraft_snapshot,
    HIGH_WATERMARK_FILE: dump_high_watermark,  # a whole name: dumped when named, not picked from a directory
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
        return (
            f"offset: {b['lastOffset']} position: {b['position']} {b['timestampType']}: {b['maxTimestamp']} "
            f"size: {b['size']} magic: {b['magic']} compresscodec: {b['compresscodec']} crc: {b['crc']} "
            f"isvalid: {_bool(b['isvalid'])}"
        )
    return (
        f"baseOffset: {b['baseOffset']} lastOffset: {b['lastOffset']} count: {b['count']} "
        f"baseSequence: {b['baseSequence']} lastSequence: {b['lastSequence']} producerId: {b['producerId']} "
        f"producerEpoch: {b['producerEpoch']} partitionLeaderEpoch: {b['partitionLeaderEpoch']} "
        f"isTransactional: {_bool(b['isTransactional'])} isControl: {_bool(b['isControl'])} "
        f"deleteHorizonMs: {optional_long(b['deleteHorizonMs'])} position: {b['position']} "
        f"{b['timestampType']}: {b['maxTimestamp']} size: {b['size']} magic: {b['magic']} "
        f"compresscodec: {b['compresscodec']} crc: {b['crc']} isvalid: {_bool(b['isvalid'])}"
    )


def record_line(r: dict[str, Any], skip_metadata: bool) -> str:
    """DumpLogSegments.dumpLog's record line, including its `--skip-record-metadata` quirks."""
    out = ""
    prefix = "| "
    if not skip_metadata and r.get("magic", 2) < 2:
        # Kafka's legacy record line has no sequence or headers, and its format string ends
        # in a stray '}' ("crc: ${r.checksum}}"), printed as is.
        out += (
            f"{prefix}offset: {r['offset']} {r['timestampType']}: {r['timestamp']} keySize: {r['keySize']} "
            f"valueSize: {r['valueSize']} isValid: {_bool(r['isValid'])} crc: {r['crc']}}}"
        )
        prefix = " "
    elif not skip_metadata:
        out += (
            f"{prefix}offset: {r['offset']} {r['timestampType']}: {r['timestamp']} keySize: {r['keySize']} "
            f"valueSize: {r['valueSize']} sequence: {r['sequence']} headerKeys: [{','.join(r['headerKeys'])}]"
        )
        prefix = " "
        if "controlType" in r:
            if "coordinatorEpoch" in r:
                out += f" endTxnMarker: {r['controlType']} coordinatorEpoch: {r['coordinatorEpoch']}"
            elif "controlRecord" in r:
                out += f" {_KRAFT_CONTROL_RECORDS[r['controlTypeId']][0]} {compact_json(r['controlRecord'])}"
            else:
                out += f" controlType: {r['controlType']}({r['controlTypeId']})"
    if "controlType" not in r:
        if r.get("key") is not None:
            out += f"{prefix}key: {r['key']}"
        if r.get("payload") is not None:
            out += f" payload: {r['payload']}"
    return out


def producer_line(p: dict[str, Any]) -> str:
    line = (
        f"producerId: {p['producerId']} producerEpoch: {p['producerEpoch']} "
        f"coordinatorEpoch: {p['coordinatorEpoch']} currentTxnFirstOffset: "
        f"{optional_long(p['currentTxnFirstOffset'])} lastTimestamp: {p['lastTimestamp']}"
    )
    if "lastOffset" in p:
        line += (
            f" firstSequence: {p['firstSequence']} lastSequence: {p['lastSequence']} "
            f"lastOffset: {p['lastOffset']} offsetDelta: {p['offsetDelta']} timestamp: {p['timestamp']}"
        )
    return line


def expanded(items: Iterator[dict[str, Any]], opts: Options) -> Iterator[dict[str, Any]]:
    """The items with each batch's "records" item as one "record" item per record (the JSON outputs)."""
    for item in items:
        if item["type"] == "records":
            batch = item["batch"]
            for record in batch_records(item):
                yield record_item(batch, Record._make(record), opts)
        else:
            yield item


def text_of(item: dict[str, Any], opts: Options) -> str | bytes | None:
    """The kafka-dump-log line(s) of one item, newline-separated (None: nothing on stdout).

    A batch's record lines come as UTF-8 bytes when they could be formatted without
    decoding keys and payloads (see `_ascii_record_lines`), else as str.
    """
    if item["type"] == "records":
        batch = item["batch"]
        native = _native_record_lines(batch, opts) if item["records"] is None else None  # not decoded yet
        if native is not None:
            return native
        records = batch_records(item)
        if not records:
            return None
        fast = _ascii_record_lines(batch, records, opts)
        return fast if fast is not None else "\n".join(record_lines(batch, records, opts))
    return text_line(item, opts)


def batch_records(item: dict[str, Any]) -> list[tuple]:
    """The record tuples of a "records" item, decoded on first use (CorruptRecordError as any reader's)."""
    if item["records"] is None:
        item["records"] = item["batch"].record_tuples()
    return item["records"]


def _native_record_lines(batch: RecordBatch, opts: Options) -> bytes | None:
    """The record lines of a data batch made natively from its bytes (storage.console_format), or
    None where the Python lines below must make them: control batches, a --key-decoder-class or
    --value-decoder-class, keys or values that are not UTF-8 (Java's replacement rules live here)."""
    if batch.is_control or (opts.print_data and opts.parser is not None):
        return None
    return dump_record_lines(batch, skip_metadata=opts.skip_metadata, print_data=opts.print_data)


def _ascii_record_lines(batch: RecordBatch, records: list[tuple], opts: Options) -> bytes | None:
    """The record lines of a data batch as bytes, or None when this shortcut does not apply.

    It applies to the common case only: the default string decoder, no null key or value,
    no headers, and every key and value ASCII, so that the bytes printed raw are exactly
    what decoding them as UTF-8 (with replacement) and encoding back would give. One
    bytes %-format per record over columns is about half the cost of an f-string line
    with two decodes.
    """
    if batch.is_control or (opts.print_data and opts.parser is not None):
        return None
    offsets, timestamps, keys, values, headers, sequences = zip(*records, strict=True)
    if None in keys or None in values or any(headers):
        return None
    data = opts.print_data
    if data and not (b"".join(keys).isascii() and b"".join(values).isascii()):
        return None
    columns: list[Iterable[object]] = []
    template = b""
    if not opts.skip_metadata:
        ts_name = TimestampType(bool(batch.attributes & TIMESTAMP_TYPE_MASK)).kafka_name.encode()
        template = b"| offset: %d " + ts_name + b": %d keySize: %d valueSize: %d sequence: %d headerKeys: []"
        columns += [offsets, timestamps, map(len, keys), map(len, values), sequences]
    if data:
        template += b"| key: %s payload: %s" if opts.skip_metadata else b" key: %s payload: %s"
        columns += [keys, values]
    if not columns:
        return b"\n".join([b""] * len(records))  # --skip-record-metadata without data: empty lines
    return b"\n".join([template % row for row in zip(*columns, strict=True)])


def record_lines(batch: RecordBatch, records: list[tuple], opts: Options) -> list[str]:
    """`record_line` of each record of a v2 batch, without an item dict per record.

    This is `inspect --print-data-log`'s per-record cost, so the common case (a data batch)
    formats straight from the record tuples; control batches take the general path.
    """
    skip = opts.skip_metadata
    if batch.is_control:
        return [record_line(record_item(batch, Record._make(r), opts), skip) for r in records]
    ts_name = TimestampType(bool(batch.attributes & TIMESTAMP_TYPE_MASK)).kafka_name
    parser = opts.parser if opts.print_data else None
    print_data, prefix = opts.print_data, "| " if skip else " "
    lines = []
    for record in records:
        offset, timestamp, key, value, headers, sequence = record
        if skip:
            line = ""
        else:
            header_keys = ",".join([k for k, _ in headers]) if headers else ""
            line = (
                f"| offset: {offset} {ts_name}: {timestamp} keySize: {-1 if key is None else len(key)} "
                f"valueSize: {-1 if value is None else len(value)} sequence: {sequence} "
                f"headerKeys: [{header_keys}]"
            )
        if print_data:
            if parser is None:  # string_parser, inline
                if key is not None:
                    line += f"{prefix}key: {java_string(key)}"
                if value is not None:
                    line += f" payload: {java_string(value)}"
            else:
                shown_key, payload = parser(Record._make(record))
                if shown_key is not None:
                    line += f"{prefix}key: {shown_key}"
                if payload is not None:
                    line += f" payload: {payload}"
        lines.append(line)
    return lines


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
        return (
            f"version: {item['version']} producerId: {item['producerId']} firstOffset: {item['firstOffset']} "
            f"lastOffset: {item['lastOffset']} lastStableOffset: {item['lastStableOffset']}"
        )
    if kind == "producer":
        return producer_line(item)
    if kind in ("message", "sanityCheck", "snapshotId"):
        return item.get("text")
    raise AssertionError(f"unknown item type {kind}")
