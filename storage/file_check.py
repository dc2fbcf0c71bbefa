"""The file-level integrity check of a partition directory: every byte of every segment file.

What `txlog verify` reports about files, as a library: per partition it walks each segment
with the one batch reader (`FileRecords`) and checks

* every batch frames and has a valid CRC, and offsets increase across segments (and are
  dense in a txlog store but in the sealed segments of a compacted topic, which the cleaner
  thins out; a Kafka log dir has gaps after compaction). Bad bytes are judged
  by the rule every view applies (`FileRecords.judge_damage`): at the very end of the
  *active* segment with no valid batch after them, a torn/unflushed tail (a writer died
  mid-write; the next writer cuts it), a warning; followed by valid data, or anywhere in a
  sealed segment, an error;
* every batch's records decode with the readers' own decoder (`RecordBatch.check_records`):
  a valid CRC over records no reader can decode is an error;
* `.index` / `.timeindex`: the broker's sanity check, then every entry against the log
  (`.index` for every layout a writer makes, `index_entry_mismatch`; `.timeindex` for what
  Kafka writes: a batch holds the entry's offset, anywhere inside it, and has its timestamp);
* `.txnindex` entries against the ABORT markers replayed from the log, both ways;
* in a Kafka log dir, the log end against the offsets the broker checkpointed at the root;
* producer state replayed from the log against what the partition reports (its snapshot
  plus catch-up), the log end and the last stable offset against the scan.

Everything is read-only: no lock, nothing written or repaired. Transaction-level findings
(hanging or expired transactions, the coordinator) need txlog and are `txlog.tools.store_check`'s.
"""

from __future__ import annotations

import bisect
import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from storage.errors import (
    CorruptRecordError,
    CorruptSnapshotError,
    InvalidRecordError,
    KafkaError,
    UnsupportedCompressionTypeError,
    UnsupportedForMessageFormatError,
)
from storage.file_records import FileRecords
from storage.log_files import (
    INDEX_FILE_SUFFIX,
    LOG_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
    segment_bases,
    segment_file,
)
from storage.offset_index import OffsetIndex
from storage.producer_snapshot import list_snapshots, read_snapshot
from storage.producer_state import ProducerStateManager
from storage.records import RecordBatch
from storage.time_index import TimeIndex
from storage.transaction_index import AbortedTxn, TransactionIndex
from storage.txnindex_check import abort_replayer

if TYPE_CHECKING:  # pragma: no cover
    from storage.config import TopicConfig
    from storage.partition_log import PartitionLog

TORN_TAIL = "unflushed/torn tail"
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024  # what kafka-dump-log reads at an indexed position


class Severity(str, Enum):
    """An error is damage or a broken rule; a warning is a fact that breaks no rule but is worth a
    look (a torn tail no reader sees; a two-phase-commit transaction open for very long)."""

    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Location:
    """Where a finding is: a partition (or "-" for the log dir), and within it a file and an offset."""

    topic: str
    partition: int | None = None
    file: str | None = None  # the file's base name
    offset: int | None = None


@dataclass(frozen=True, slots=True)
class Finding:
    severity: Severity
    location: Location
    message: str


class Findings(list[Finding]):
    """The findings of one check, in the order they were found."""

    def add(
        self, severity: Severity, topic: str, partition: int | None, file: str | None, offset: int | None, message: str
    ) -> None:
        name = None if file is None else os.path.basename(file)
        self.append(Finding(severity, Location(topic, partition, name, offset), message))


# ---- a Kafka log dir's checkpoint files --------------------------------------------------------------

CHECKPOINT_MEANINGS = {  # file -> what its offset is, for the finding
    "recovery-point-offset-checkpoint": "recovery point (flushed to disk)",
    "replication-offset-checkpoint": "high watermark (acknowledged, visible to consumers)",
    "log-start-offset-checkpoint": "log start offset",
}
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"


@dataclass
class LogDirCheckpoints:
    """What a Kafka broker recorded at the log dir's root about each partition's offsets."""

    offsets: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)  # file name -> entries
    clean_shutdown: bool = True  # Kafka trusts every index after a clean shutdown

    def recovered_from(self, topic: str, partition: int) -> int | None:
        """Where Kafka's next start rebuilds this partition's segments and indexes from; None: it will not.

        Without a clean-shutdown marker the broker recovers every segment holding offsets at
        or past the recovery point (0 when the checkpoint does not list the partition).
        """
        if self.clean_shutdown:
            return None
        return self.offsets.get("recovery-point-offset-checkpoint", {}).get((topic, partition), 0)


def read_log_dir_checkpoints(root: str, kafka_layout: bool, findings: Findings) -> LogDirCheckpoints:
    """The root's checkpoint files, where present (a txlog store has none); a malformed one is a finding."""
    from storage.checkpoint import read_offset_checkpoint

    clean_shutdown = not kafka_layout or os.path.exists(os.path.join(root, CLEAN_SHUTDOWN_FILE))
    found = LogDirCheckpoints(clean_shutdown=clean_shutdown)
    for name in CHECKPOINT_MEANINGS:
        path = os.path.join(root, name)
        if not os.path.exists(path):
            continue
        try:
            found.offsets[name] = read_offset_checkpoint(path)
        except KafkaError as exc:
            findings.add(Severity.ERROR, "-", None, path, None, f"cannot read the checkpoint: {exc}")
    return found


# ---- Kafka's sanity checks of the two indexes (the broker's words) ------------------------------------


def offset_index_sanity(path: str, base: int) -> str | None:
    """OffsetIndex.sanityCheck() as the broker runs it at startup: the reason it throws, or None."""
    with OffsetIndex(path, base, writable=False) as index:
        entries, length = index.stored_entries(), index.file_length()
    if entries and entries[-1][0] < base:
        return (
            f"Corrupt index found, index file ({os.path.abspath(path)}) has non-zero size but the last offset "
            f"is {entries[-1][0]} which is less than the base offset {base}"
        )
    if length % OffsetIndex.ENTRY_SIZE:
        return (
            f"Index file {os.path.abspath(path)} is corrupt, found {length} bytes which is neither positive "
            f"nor a multiple of {OffsetIndex.ENTRY_SIZE}"
        )
    return None


def time_index_sanity(path: str, base: int) -> str | None:
    """TimeIndex.sanityCheck() as the broker runs it at startup: the reason it throws, or None."""
    with TimeIndex(path, base, writable=False) as index:
        entries, length = index.stored_entries(), index.file_length()
    if entries and entries[-1][0] < entries[0][0]:
        return (
            f"Corrupt time index found, time index file ({os.path.abspath(path)}) has non-zero size but the last "
            f"timestamp is {entries[-1][0]} which is less than the first timestamp {entries[0][0]}"
        )
    if entries and entries[-1][1] < base:
        return (
            f"Corrupt time index found, time index file ({os.path.abspath(path)}) has non-zero size but the last "
            f"offset is {entries[-1][1]} which is less than the first offset {base}"
        )
    if length % TimeIndex.ENTRY_SIZE:
        return (
            f"Time index file {os.path.abspath(path)} is corrupt, found {length} bytes which is neither "
            f"positive nor a multiple of {TimeIndex.ENTRY_SIZE}"
        )
    return None


# ---- one partition --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Span:
    """What the index checks need of one valid batch."""

    base_offset: int
    last_offset: int
    max_timestamp: int


def index_entry_mismatch(
    records: FileRecords,
    offset: int,
    position: int,
    before: int | None = None,
    *,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
) -> int | None:
    """None if an offset-index entry (`offset`, `position`) is one a writer makes; else the last
    offset of the batch at `position` (-1: no batch there), for the finding.

    Kafka's LogSegment.append (and txlog's `LogSegment.append`, which follows it) indexes the
    largest offset of the batches one append wrote at the position of the first of them;
    recovery's rebuild indexes one batch at a time. So the batch at `position` must start at
    or before `offset`, and a batch starting before byte `before` (the next entry's position;
    default the file's end) must end exactly at it. kafka-dump-log's --verify-index-only asks
    the first batch alone to end there, which every indexed append of several batches (a
    producer's group commit) fails. Headers are read a little at a time, with no CRC check.
    """
    size = records.size()
    if position < 0 or position >= size:
        return -1
    before = size if before is None else max(before, position + 1)
    try:
        headers = records.headers(position, size, chunk_size=4096)
        first = next(headers, None)
        if first is None:
            return -1
        if first.base_offset <= offset:
            for header in itertools.chain((first,), headers):
                if header.position >= before or header.last_offset > offset:
                    break
                if header.last_offset == offset:
                    return None
        return first.last_offset
    except UnsupportedForMessageFormatError:
        # Pre-0.11 messages (a Kafka log dir): kafka-dump-log's own check, the first message alone.
        message = next(
            records.batches(position, min(size, position + max_message_size), verify_crc=False, legacy=True), None
        )
        last = message.last_offset if message is not None else -1
        return None if last == offset else last


class PartitionFileCheck:
    """The file-level scan of one partition directory, replaying producer state as it goes.

    `run()` scans; then `state` is the producer state the log replays to (complete from
    offset 0 when `complete_base`), `next_offset` the offset after the last whole batch
    (None after bytes that could not be framed), and `against_the_log` / `against_checkpoints`
    compare what the partition reports with that.
    """

    def __init__(
        self,
        findings: Findings,
        directory: str,
        topic: str,
        partition: int,
        config: TopicConfig,
        *,
        now: int,
        gaps_allowed: bool,
        checkpoints: LogDirCheckpoints | None = None,
    ):
        self.findings = findings
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.now = now
        self.state = ProducerStateManager(
            expiration_ms=config.producer_id_expiration_ms, max_producers=config.max_producer_ids
        )
        self.complete_base = True  # the replay saw (or restored) every producer from offset 0
        self.log_damaged = False
        self.next_offset: int | None = None  # the offset the next batch must have
        self.batches = 0  # valid batches scanned
        # Kafka leaves offset gaps (compaction, a log start offset moved inside a segment).
        # In a txlog store only the cleaner makes them, and only in the sealed segments of a
        # topic whose cleanup.policy has `compact`: it drops whole batches there (the offsets of
        # those that stay never change). So a gap between batches is normal in such a segment
        # (and at the end of one: the next starts at its base offset). A gap in the active
        # segment, which the cleaner never touches, or in a topic that is not compacted, is lost
        # data. (A gap cannot be told from compaction's in a sealed segment of a compact topic;
        # the other checks, CRCs, framing, indexes, producer state, still hold there. The
        # cleaner's checkpoint is not the bound: it is written after the swap, so after a crash
        # between the two a cleaned segment lies above it.)
        self.gaps_allowed = gaps_allowed
        self.compacted = config.compact
        self.checkpoints = checkpoints or LogDirCheckpoints()

    def add(self, severity: Severity, file: str | None, offset: int | None, text: str) -> None:
        if severity is Severity.ERROR and file is not None and file.endswith(LOG_FILE_SUFFIX):
            self.log_damaged = True
        self.findings.add(severity, self.topic, self.partition, file, offset, text)

    def bases(self) -> list[int]:
        return segment_bases(os.listdir(self.directory))

    def run(self) -> None:
        bases = self.bases()
        if not bases:
            self.add(Severity.ERROR, None, None, "the partition directory holds no log segments")
            return
        self._restore(bases[0])
        for i, base in enumerate(bases):
            self._segment(base, active=i == len(bases) - 1)

    def _restore(self, start: int) -> None:
        """Start the replay at the log start: empty state at 0, else the snapshot taken there."""
        self.state.reset(start)
        self.next_offset = start
        if start == 0:
            return
        self.complete_base = False
        for offset, path in list_snapshots(self.directory):
            if offset == start:
                try:
                    self.state.load(read_snapshot(path), start, now_ms=0)
                    self.complete_base = True
                except (CorruptSnapshotError, FileNotFoundError):
                    pass

    def _path(self, base: int, suffix: str) -> str:
        return segment_file(self.directory, base, suffix)

    def _lso_before_cleaning(self, recorded: int, replayed: AbortedTxn) -> bool:
        """Whether an entry's LSO may be the one of its time in a log the cleaner compacted.

        The LSO an entry records is where the earliest transaction open at its marker began;
        cleaning may remove that batch (it never rewrites entries' LSOs, as Kafka's cleaner
        does not), so the replay of the cleaned log finds a later start or none. Only in a
        log with gaps (a Kafka log dir, or a compacted topic of a txlog store), and never past the
        replayed value or the marker.
        """
        return (
            self.gaps_allowed or self.compacted
        ) and recorded <= replayed.last_stable_offset <= replayed.last_offset + 1

    # ---- .log ----------------------------------------------------------------------------------

    def _segment(self, base: int, *, active: bool) -> None:
        path = self._path(base, LOG_FILE_SUFFIX)
        aborts: list[AbortedTxn] = []
        abort_markers: dict[int, int] = {}  # offset -> producer id of each ABORT marker in the segment
        replay = abort_replayer(self.state, aborts.append)
        if self.next_offset is None:
            self.next_offset = base  # resynchronise after bytes that could not be framed
        elif self.next_offset < base and (self.gaps_allowed or self.compacted):
            self.next_offset = base  # the cleaner emptied the end of the segment before: not a gap to report
        bad_crc: list[Any] = []
        spans: list[_Span] = []
        end = 0
        with FileRecords.open(path) as records:
            size = records.size()
            try:
                for batch in records.batches(verify_crc=False):
                    end = batch.position + batch.size
                    if not batch.is_valid():
                        bad_crc.append(batch)
                        self.next_offset = None
                        continue
                    self.batches += 1
                    self._check_records(path, batch)
                    spans.append(_Span(batch.base_offset, batch.last_offset, batch.max_timestamp))
                    self._check_offsets(
                        path, base, batch, gaps_allowed=self.gaps_allowed or (self.compacted and not active)
                    )
                    replay(batch)
                    if batch.is_control and batch.has_producer_id and self._is_abort(batch):
                        abort_markers[batch.base_offset] = batch.producer_id
                    self.next_offset = batch.last_offset + 1
            except UnsupportedForMessageFormatError as exc:  # pre-0.11 data: not damage, but nothing here reads it
                self.add(Severity.ERROR, path, None, str(exc))
                self.next_offset = None
            except CorruptRecordError as exc:
                self._bad_bytes(records, path, end, active, f"bytes that are not a batch ({exc})")
                self.next_offset = None
            else:
                if end < size:
                    self._bad_bytes(records, path, end, active, f"{size - end} bytes at the end are not a whole batch")
            for batch in bad_crc:
                tail = records.judge_damage(batch.position, last_segment=active).torn_tail
                self.add(
                    Severity.WARNING if tail else Severity.ERROR,
                    path,
                    batch.base_offset,
                    f"{TORN_TAIL}: batch at byte {batch.position} has an invalid CRC"
                    if tail
                    else f"batch at byte {batch.position} has an invalid CRC"
                    + (" in a sealed segment" if not active else "; valid batches follow it"),
                )
            self._indexes(records, base, spans)
        self._txn_index(base, aborts, active, self.next_offset, abort_markers)

    def _check_records(self, path: str, batch: RecordBatch) -> None:
        """The readers' own decoding of the batch's records: what every reader refuses is an error here."""
        try:
            batch.check_records()
        except (CorruptRecordError, InvalidRecordError, UnsupportedCompressionTypeError) as exc:
            what = f"batch at byte {batch.position}: readers refuse it ({exc})"
            self.add(Severity.ERROR, path, batch.base_offset, what)

    def _bad_bytes(self, records: FileRecords, path: str, position: int, active: bool, what: str) -> None:
        """Bad bytes judged by the rule every view applies (`FileRecords.judge_damage`)."""
        damage = records.judge_damage(position, last_segment=active)
        if damage.torn_tail:
            self.add(
                Severity.WARNING,
                path,
                None,
                f"{TORN_TAIL}: {what} at byte {position} (a writer died mid-write; the next writer cuts it)",
            )
        elif damage.resume is not None:
            self.add(
                Severity.ERROR,
                path,
                None,
                f"{what} at byte {position}, followed by a valid batch at byte {damage.resume}",
            )
        else:
            self.add(Severity.ERROR, path, None, f"{what} at byte {position} of a sealed segment")

    def _check_offsets(self, path: str, base: int, batch: Any, *, gaps_allowed: bool) -> None:
        expected = self.next_offset
        if batch.base_offset < base:
            self.add(
                Severity.ERROR,
                path,
                batch.base_offset,
                f"batch at byte {batch.position} starts at offset {batch.base_offset}, "
                f"below the segment's base offset {base}",
            )
        elif expected is not None and batch.base_offset < expected:
            self.add(
                Severity.ERROR,
                path,
                batch.base_offset,
                f"offsets go backwards: batch at byte {batch.position} starts at {batch.base_offset}, "
                f"expected {expected}",
            )
        elif expected is not None and batch.base_offset > expected and not gaps_allowed:
            self.add(
                Severity.ERROR,
                path,
                expected,
                f"offsets {expected}..{batch.base_offset - 1} are missing before byte {batch.position}",
            )

    # ---- .index / .timeindex ---------------------------------------------------------------------

    def _indexes(self, records: FileRecords, base: int, spans: list[_Span]) -> None:
        """The broker's sanity check of both indexes, then every entry against the log.

        `.index` entries get kafka-dump-log's check (each names the last offset of the batch
        at its position). `.timeindex` entries are checked for what Kafka writes, no more:
        since 3.6 an entry may name any offset inside a batch (the record with the largest
        timestamp), so an entry is right when a batch holds its offset and that batch's max
        timestamp is the entry's, with timestamps increasing (TimeIndex only appends larger ones).
        """
        sanity_checks: tuple[tuple[str, Callable[[str, int], str | None]], ...] = (
            (INDEX_FILE_SUFFIX, offset_index_sanity),
            (TIME_INDEX_FILE_SUFFIX, time_index_sanity),
        )
        for suffix, sanity in sanity_checks:
            path = self._path(base, suffix)
            if os.path.exists(path):  # derived data: Kafka and txlog rebuild a missing index
                reason = sanity(path, base)
                if reason is not None:
                    self.add(Severity.ERROR, path, None, f"fails the broker's sanity check: {reason}")
        path = self._path(base, INDEX_FILE_SUFFIX)
        if os.path.exists(path):
            self._offset_index(records, path, base)
        path = self._path(base, TIME_INDEX_FILE_SUFFIX)
        if os.path.exists(path):
            self._time_index(path, base, spans)

    def _offset_index(self, records: FileRecords, path: str, base: int) -> None:
        """Each entry must be what a writer puts there: the last offset of an append, at its first batch
        (`index_entry_mismatch`)."""
        with OffsetIndex(path, base, writable=False) as index:
            entries = index.stored_entries()
        mismatches: list[tuple[int, int]] = []
        try:
            for i, (offset, position) in enumerate(entries):
                if offset == base and i > 0:
                    break  # the zero-filled tail of a preallocated index
                following = entries[i + 1][1] if i + 1 < len(entries) and entries[i + 1][0] != base else None
                first = index_entry_mismatch(records, offset, position, following)
                if first is not None:
                    mismatches.append((offset, first))
        except KafkaError as exc:
            self.add(Severity.ERROR, path, None, f"an entry points at no batch boundary ({exc})")
        for index_offset, log_offset in mismatches:
            at = f"a batch ending at {log_offset}" if log_offset >= 0 else "no batch"
            self.add(
                Severity.ERROR,
                path,
                index_offset,
                f"index entry for offset {index_offset} points at {at}, and no batch after it ends at {index_offset}"
                if log_offset >= 0
                else f"index entry for offset {index_offset} points at {at}",
            )

    def _time_index(self, path: str, base: int, spans: list[_Span]) -> None:
        """Each entry against the batch holding its offset."""
        with TimeIndex(path, base, writable=False) as index:
            entries = index.stored_entries()
        starts = [s.base_offset for s in spans]
        previous: int | None = None
        for i, (timestamp, offset) in enumerate(entries):
            if offset == base and i > 0:
                return  # the zero-filled tail of a preallocated index, as Kafka stops there
            at = bisect.bisect_right(starts, offset) - 1
            span = spans[at] if at >= 0 and spans[at].last_offset >= offset else None
            if span is None:
                self.add(
                    Severity.ERROR,
                    path,
                    offset,
                    f"time index entry ({timestamp}, offset {offset}) names an offset no batch of the segment holds",
                )
            elif span.max_timestamp != timestamp:
                self.add(
                    Severity.ERROR,
                    path,
                    offset,
                    f"time index timestamp {timestamp} for offset {offset}, but the batch holding it (offsets "
                    f"{span.base_offset}..{span.last_offset}) has max timestamp {span.max_timestamp}",
                )
            if previous is not None and timestamp <= previous:
                self.add(
                    Severity.ERROR,
                    path,
                    offset,
                    f"time index timestamp {timestamp} is not after the previous {previous}",
                )
            previous = timestamp

    # ---- .txnindex against the ABORT markers -----------------------------------------------------

    def _txn_index_entries(self, path: str, base: int) -> list[Any]:
        """The file's entries up to the first of an unknown version (Kafka stops reading there)."""
        if not os.path.exists(path):
            return []
        with TransactionIndex(path, base, writable=False) as index:
            stored = index.stored_entries()
        out = []
        for e in stored:
            if e.version > 0:
                self.add(Severity.ERROR, path, None, f"Unexpected aborted transaction version {e.version} in {path}")
                break
            out.append(e)
        return out

    @staticmethod
    def _is_abort(batch: RecordBatch) -> bool:
        try:
            return batch.control_marker().is_abort
        except KafkaError:
            return False  # a malformed marker: _check_records reports it

    def _txn_index(
        self, base: int, aborts: list[AbortedTxn], active: bool, log_end: int | None, abort_markers: dict[int, int]
    ) -> None:
        """Every entry names an ABORT of its producer at `lastOffset` whose transaction starts at
        `firstOffset`, and every ABORT that closed a transaction with data has its entry.

        In a sealed segment of a compacted topic an entry may name an ABORT marker whose
        transaction's data the cleaner removed: Kafka's cleaner keeps the entry in the pass that
        removes the data (CleanedTransactionMetadata), so the replay, which no longer sees the
        transaction begin, has no abort to match it with. The marker must still be there.
        """
        path = self._path(base, TXN_INDEX_FILE_SUFFIX)
        entries = self._txn_index_entries(path, base)
        by_marker = {a.last_offset: a for a in aborts}
        matched: set[int] = set()
        previous = -1
        for e in entries:
            pid, first, last, lso = e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset
            desc = f".txnindex entry (producer {pid}, first {first}, last {last})"
            if last <= previous:
                self.add(Severity.ERROR, path, last, f"{desc} is not after the previous entry's last offset {previous}")
            previous = max(previous, last)
            abort = by_marker.get(last)
            if abort is None and self.compacted and not active and abort_markers.get(last) == pid and first <= last:
                continue  # its transaction's data was cleaned away (docstring)
            if abort is None or abort.producer_id != pid:
                if active and log_end is not None and last >= log_end:
                    self.add(
                        Severity.WARNING,
                        path,
                        last,
                        f"{desc} lies past the log end: a writer died before its "
                        "ABORT marker (the next writer drops the entry)",
                    )
                else:
                    self.add(Severity.ERROR, path, last, f"{desc} does not name an ABORT marker of its producer")
                continue
            matched.add(last)
            if abort.first_offset != first and not self._first_batches_cleaned(first, abort, active):
                self.add(Severity.ERROR, path, last, f"{desc}: the aborted transaction starts at {abort.first_offset}")
            elif self.complete_base and abort.last_stable_offset != lso and not self._lso_before_cleaning(lso, abort):
                self.add(
                    Severity.ERROR,
                    path,
                    last,
                    f"{desc} records LSO {lso}; replaying the log gives {abort.last_stable_offset}",
                )
        self._missing_txn_entries(path, aborts, matched, log_end)

    def _first_batches_cleaned(self, first: int, abort: AbortedTxn, active: bool) -> bool:
        """An entry starting before the replayed transaction, in a sealed segment of a compacted
        topic: the cleaner removed the transaction's first batches and kept a later one (the
        producer's last, kept empty for its state), and the entry keeps the first offset it was
        written with, as Kafka's cleaner keeps it."""
        return self.compacted and not active and first < abort.first_offset

    def _missing_txn_entries(self, path: str, aborts: list[AbortedTxn], matched: set[int], log_end: int | None) -> None:
        """A missing entry is only a warning where Kafka rebuilds the index at its next start:
        the index is a cache of the markers."""
        rebuilt_from = self.checkpoints.recovered_from(self.topic, self.partition)
        for a in aborts:
            if a.last_offset in matched:
                continue
            what = (
                f"ABORT marker of producer {a.producer_id} at {a.last_offset} (transaction from "
                f"{a.first_offset}) has no .txnindex entry"
            )
            if rebuilt_from is not None and log_end is not None and log_end > rebuilt_from:
                self.add(
                    Severity.WARNING,
                    path,
                    a.last_offset,
                    f"{what}; the index is rebuilt from the markers when Kafka next starts (no clean "
                    f"shutdown, segment past the recovery point {rebuilt_from}): a repair, not exposed data",
                )
            else:
                self.add(
                    Severity.ERROR,
                    path,
                    a.last_offset,
                    f"{what}, and Kafka rebuilds nothing before a read: its read_committed readers would "
                    "see the aborted data (txlog rebuilds the index from the markers first)",
                )

    # ---- what the partition reports, against the scan --------------------------------------------

    def against_checkpoints(self, log_end: int) -> None:
        """A log ending before an offset the broker checkpointed lost data it had (or was copied mid-write)."""
        for name, meaning in CHECKPOINT_MEANINGS.items():
            offset = self.checkpoints.offsets.get(name, {}).get((self.topic, self.partition))
            if offset is not None and log_end < offset:
                self.add(
                    Severity.ERROR,
                    None,
                    log_end,
                    f"the log ends at offset {log_end}, before the {meaning} {offset} that {name} records: "
                    "the log directory was copied while the broker was writing, or data was lost",
                )

    def against_the_log(self, log: PartitionLog) -> None:
        """What the partition's view reports (snapshot + catch-up) against what the scan replayed."""
        if self.log_damaged or self.next_offset is None:
            # The damage is the finding; what either side replayed past it is not known (and the
            # view refuses to state its transactions there, PartitionLog.check_transactions_known).
            return
        leo, lso, start = log.log_end_offset, log.last_stable_offset, log.log_start_offset
        if lso > leo:
            self.add(Severity.ERROR, None, lso, f"last stable offset {lso} is past the log end offset {leo}")
        if leo != self.next_offset:
            self.add(
                Severity.ERROR,
                None,
                leo,
                f"log end offset {leo}, but the last whole batch ends before {self.next_offset}",
            )
        first = self.state.first_unstable_offset()
        want = self.state.last_stable_offset(start, leo)
        if lso != want:
            self.add(
                Severity.ERROR,
                None,
                lso,
                f"last stable offset {lso}, but the log says {want} "
                + (
                    "(the log end: no transaction is open)"
                    if first is None
                    else f"(the first open transaction starts at {first})"
                ),
            )
        self._producers_against(log.producer_states())

    def _producers_against(self, theirs: dict[int, dict]) -> None:
        mine = self.state.producers
        for pid, s in sorted(theirs.items()):
            m = mine.get(pid)
            if m is None:
                if self.complete_base:
                    self.add(
                        Severity.ERROR,
                        None,
                        None,
                        f"producer {pid}: in the partition's producer state "
                        f"(epoch {s['producer_epoch']}, last sequence {s['last_sequence']}) but not in the log",
                    )
                continue
            got = (s["producer_epoch"], s["last_sequence"], s["current_txn_start_offset"])
            replayed = (m.epoch, m.last_seq, m.current_txn_first_offset)
            if got != replayed:
                self.add(
                    Severity.ERROR,
                    None,
                    None,
                    f"producer {pid}: producer state says epoch {got[0]}, last sequence {got[1]}, open "
                    f"transaction at {got[2]}; the log says epoch {replayed[0]}, last sequence {replayed[1]}, "
                    f"open transaction at {replayed[2]}",
                )
        for pid, m in sorted(mine.items()):
            if pid not in theirs and (m.has_open_txn or self.now - m.last_timestamp < self.state.expiration_ms):
                self.add(
                    Severity.ERROR,
                    None,
                    None,
                    f"producer {pid} (epoch {m.epoch}, last sequence {m.last_seq}) "
                    "is in the log but missing from the partition's producer state",
                )
