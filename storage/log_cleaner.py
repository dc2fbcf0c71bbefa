"""Log compaction (Kafka's LogCleaner, Cleaner, LogCleanerManager, CleanedTransactionMetadata).

What a cleaning pass keeps, as Kafka's cleaner decides it (docs/kafka-formats.md §11):

* The dirty section is [first dirty, first uncleanable): the first dirty offset comes from the
  `cleaner-offset-checkpoint` at the store root (else the log start); the first uncleanable
  offset is the base of the segment holding the smallest of the active segment's base, the
  last stable offset (an open transaction's first offset, never past the high watermark) and the
  first segment younger than min.compaction.lag.ms. Nothing at or past it is touched.
* A key map (storage/offset_map.py, bounded as Kafka's dedupe buffer) is built over the dirty
  section, aborted transactions left out; when it fills, the pass cleans up to where the map
  got and the next pass goes on from there.
* Every segment below the map's end is recopied, grouped as Kafka groups them
  (`group_segments_by_size`): a record survives if it is the latest for its key (or past the
  map's end); a tombstone survives until its batch's delete horizon (KIP-534: set, with the
  batch's base timestamp, by the first pass that keeps it); records of aborted transactions
  go; a marker stays until its transaction's data is gone and its own delete horizon passed;
  a batch emptied of records stays as an empty header when it is a producer's last (its
  producer state) or ends the cleaning round. Offsets are never rewritten.

The swap of a cleaned group is crash-safe and runs as the module-level steps `SWAP_STEPS`
names (a crash test wraps each one); recovery of a swap cut short is LogLoader's
(`storage/log_loader.py`, `recover_swaps`). Unlike Kafka, which checkpoints after a round,
each group raises the `cleaner-offset-checkpoint` entry to its end once its swap is past the
point of no return (every `.cleaned` renamed to `.swap`) and before any replaced segment goes,
and recovery that completes a swap raises it the same way first. Readers read the old segments
until the first of them goes (`LogLoader.segment_listing`), so no cleaned batch can be seen, even
after a crash, with the checkpoint still below it, which state replayed from a point in the log
relies on (txlog/coordinator/replayed_state.py: a tombstone is only dropped by a cleaning of a
batch an earlier, visible cleaning recopied); and a group rolled back by recovery was never
checkpointed, so the next round cleans it again.
"""

from __future__ import annotations

import os
import struct
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from heapq import heappop, heappush
from operator import attrgetter

from storage.checkpoint import read_offset_checkpoint
from storage.checkpoint import write_checkpoint as write_checkpoint_file
from storage.config import TopicConfig
from storage.durable import create_durably, fsync_dir, fsync_fd, write_all
from storage.errors import CorruptIndexError
from storage.lock import FileLock
from storage.log_files import (
    CLEANED_FILE_SUFFIX,
    DELETED_FILE_SUFFIX,
    INDEX_FILE_SUFFIX,
    LOG_FILE_SUFFIX,
    SWAP_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
    segment_file,
)
from storage.offset_index import OffsetIndex
from storage.offset_map import OffsetMap
from storage.records import Record, RecordBatch
from storage.segment import LogSegment
from storage.time_index import TimeIndex
from storage.topic_name import parse_partition_dir
from storage.transaction_index import AbortedTxn, TransactionIndex
from storage.varint import INT32_MAX, INT64_MAX

#: The store-root file of per-partition cleaned-up-to offsets, as in a Kafka log dir.
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
#: The store-level lock its read-modify-write takes (processes clean different partitions at once).
CLEANER_CHECKPOINT_LOCK = "txlog.cleaner.lock"
#: Kafka's segment.index.bytes default: groupSegmentsBySize keeps a group's indexes under it.
MAX_INDEX_SIZE = 10 * 1024 * 1024
#: The order of the file steps of one group's swap (each a function of this module, see below).
SWAP_STEPS: tuple[str, ...] = (
    "write_cleaned",  # <base>.log.cleaned and .index/.timeindex/.txnindex.cleaned written and fsynced
    "rename_to_swap",  # each .cleaned renamed to .swap (the .log first); the directory fsynced
    "write_checkpoint",  # cleaner-offset-checkpoint = the group's end, before a replaced segment goes
    "delete_replaced",  # the replaced segments' files renamed to .deleted, then unlinked; directory fsynced
    "rename_swap_to_log",  # each .swap renamed to its real name (the .log last); directory fsynced
)
_SEGMENT_SUFFIXES = (LOG_FILE_SUFFIX, INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX, TXN_INDEX_FILE_SUFFIX)
_base_offset = attrgetter("base_offset")


@dataclass(frozen=True)
class CleanerStats:
    """What one `PartitionLog.compact` did (Kafka's CleanerStats, summed over its passes)."""

    topic: str
    partition: int
    first_dirty_offset: int
    cleaned_up_to: int  # [first dirty, first uncleanable) was cleaned when this reaches it
    bytes_read: int
    bytes_written: int
    records_read: int
    records_retained: int
    segments_before: int
    segments_after: int
    passes: int
    elapsed_s: float


# ---- where the dirty section lies (LogCleanerManager) ----------------------------------------------


@dataclass(frozen=True)
class Cleanable:
    """A partition's cleanable range and whether it is due (Kafka's LogToClean)."""

    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0

    @property
    def empty(self) -> bool:
        return self.first_uncleanable <= self.first_dirty

    def due(self, config: TopicConfig) -> bool:
        """Kafka's filter: past max.compaction.lag.ms with something to clean, or dirtier than the ratio."""
        if self.empty or self.cleanable_bytes <= 0:
            return False
        return self.need_compaction_now or self.ratio > config.min_cleanable_dirty_ratio


def segments_overlapping(segments: Sequence[LogSegment], start: int, end: int) -> list[LogSegment]:
    """Kafka's logSegments(start, end): the segments holding offsets in [start, end).

    Found by bisecting the base offsets, so a cleaning's bookkeeping after a roll does not walk
    every segment of a long log (issue 26).
    """
    if end <= start or not segments:
        return []
    first = max(bisect_right(segments, start, key=_base_offset) - 1, 0)  # the one holding `start`
    return list(segments[first : bisect_left(segments, end, key=_base_offset)])


def cleanable_range(
    segments: Sequence[LogSegment],
    config: TopicConfig,
    checkpoint: int | None,
    log_start: int,
    first_unstable: int | None,
    high_watermark: int,
    now: int,
) -> Cleanable:
    """Kafka's LogCleanerManager.cleanableOffsets and calculateCleanableBytes for one partition.

    Nothing at or past the last stable offset is cleaned, and Kafka's LSO is never past the high
    watermark: with no transaction open the HW alone caps the range. A roll fdatasyncs what it seals,
    so the HW is at the active segment's base or past it while the HW file keeps up; when a publish
    failed (storage/high_watermark.py: a full disk) it is behind, and the sealed records past it,
    which no reader may see yet, stay as written. So a reader's look never finds a cleaning past its
    cap (txlog/fetch.py `_stale_cap`).
    """
    active = segments[-1]
    first_dirty = log_start if checkpoint is None or not log_start <= checkpoint <= active.next_offset else checkpoint
    sealed_dirty = [s for s in segments_overlapping(segments, first_dirty, active.base_offset) if s is not active]
    last_stable = high_watermark if first_unstable is None else min(first_unstable, high_watermark)
    candidates = [active.base_offset, last_stable]
    if config.min_compaction_lag_ms > 0:
        young = [s.base_offset for s in sealed_dirty if s.largest_timestamp() > now - config.min_compaction_lag_ms]
        candidates.extend(young[:1])
    uncleanable = min(candidates)
    # Rounded down to the base of the segment holding it: only whole segments are dirty.
    holding = bisect_right(segments, uncleanable, key=_base_offset)  # how many start at or below it
    first_uncleanable = segments[holding - 1].base_offset if holding else segments[0].base_offset
    clean_bytes = sum(s.size for s in segments_overlapping(segments, -1, first_dirty))
    cleanable_bytes = sum(s.size for s in segments_overlapping(segments, first_dirty, first_uncleanable))
    need_now = False
    if config.max_compaction_lag_ms > 0:
        stamps = [s.first_batch_timestamp for s in sealed_dirty if s.first_batch_timestamp > 0]
        need_now = bool(stamps) and min(stamps) < now - config.max_compaction_lag_ms
    return Cleanable(first_dirty, first_uncleanable, clean_bytes, cleanable_bytes, need_now)


# ---- the cleaner checkpoint ------------------------------------------------------------------------


def read_cleaner_checkpoint(root: str, topic: str, partition: int) -> int | None:
    """Where cleaning of the partition got (None if never, or the file is damaged: cleaning starts over)."""
    try:
        return read_offset_checkpoint(os.path.join(root, CLEANER_CHECKPOINT)).get((topic, partition))
    except CorruptIndexError:
        return None


def write_checkpoint_entry(root: str, topic: str, partition: int, offset: int, *, raise_only: bool = False) -> None:
    """Set the partition's entry of `cleaner-offset-checkpoint`, atomically, under the store-level lock.

    `raise_only` never moves an entry back: recovery completing a swap (`swap_completed`).
    """
    lock = FileLock(os.path.join(root, CLEANER_CHECKPOINT_LOCK))
    try:
        with lock:
            path = os.path.join(root, CLEANER_CHECKPOINT)
            try:
                entries = read_offset_checkpoint(path)
            except CorruptIndexError:
                entries = {}  # a damaged file is rewritten whole; the others' cleaning starts over
            current = entries.get((topic, partition))
            if raise_only and current is not None and current >= offset:
                return
            entries[(topic, partition)] = offset
            write_checkpoint_file(path, [(t, p, o) for (t, p), o in sorted(entries.items())])
    finally:
        lock.close()


def swap_completed(directory: str, end: int) -> None:
    """Recovery completes a swap past its point of no return: the cleaner may have died before
    its `write_checkpoint`, so raise the entry to the swap's end first, as the cleaner would have."""
    named = parse_partition_dir(os.path.basename(os.path.normpath(directory)))
    if named is not None:
        write_checkpoint_entry(os.path.dirname(os.path.normpath(directory)), *named, end, raise_only=True)


# ---- which transactions' data goes (CleanedTransactionMetadata) ------------------------------------


@dataclass
class _AbortedInFlight:
    txn: AbortedTxn
    last_observed_batch: int | None = None
    first_retained: int | None = None  # the first of its batches the cleaned log keeps (empty)


@dataclass
class TransactionTracker:
    """Follows transactions through the batches in offset order: which data is aborted, which marker may go.

    Fed the aborted transactions of each range before its batches (from the `.txnindex`es);
    `cleaned_index` collects the aborts whose markers the cleaned segment keeps.
    """

    _aborted: list[tuple[int, int, AbortedTxn]] = field(default_factory=list)
    _ongoing_aborted: dict[int, _AbortedInFlight] = field(default_factory=dict)
    _ongoing_committed: set[int] = field(default_factory=set)
    _seen: set[AbortedTxn] = field(default_factory=set)
    cleaned_index: list[AbortedTxn] | None = None

    def add_aborted(self, txns: Iterable[AbortedTxn]) -> None:
        for txn in txns:
            if txn not in self._seen:
                self._seen.add(txn)
                heappush(self._aborted, (txn.first_offset, txn.last_offset, txn))

    def _consume_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0][0] <= offset:
            txn = heappop(self._aborted)[2]
            self._ongoing_aborted.setdefault(txn.producer_id, _AbortedInFlight(txn))

    def on_control_batch(self, batch: RecordBatch, control_type: int | None) -> bool:
        """Whether the marker may be discarded (its transaction's data is gone); notes a kept abort's entry."""
        self._consume_up_to(batch.last_offset)
        if control_type is None:
            return True  # an empty control batch was cleaned before: safe to discard
        pid = batch.producer_id
        if control_type == 0:  # ABORT
            ongoing = self._ongoing_aborted.pop(pid, None)
            if ongoing is not None and ongoing.last_observed_batch is not None:
                if self.cleaned_index is not None and ongoing.first_retained is not None:
                    # Kafka keeps the entry as it was, even when none of the transaction's batches
                    # survive this round; here it is kept only while one does (an empty batch
                    # holding producer state), starting there: the entry the log's ABORT marker
                    # replays to, so txlog's `.txnindex` checks (txnindex_check.py, file_check.py)
                    # agree with the cleaned log. A read_committed reader skips the same data.
                    self.cleaned_index.append(ongoing.txn._replace(first_offset=ongoing.first_retained))
                return False
            return True
        if control_type == 1:  # COMMIT
            if pid in self._ongoing_committed:
                self._ongoing_committed.discard(pid)
                return False
            return True
        return False

    def note_retained_aborted(self, batch: RecordBatch) -> None:
        """An aborted transaction's batch is kept (emptied): its `.txnindex` entry will start there at the latest."""
        ongoing = self._ongoing_aborted.get(batch.producer_id)
        if ongoing is not None and ongoing.first_retained is None:
            ongoing.first_retained = batch.base_offset

    def on_batch(self, batch: RecordBatch) -> bool:
        """Whether the data batch belongs to an aborted transaction."""
        self._consume_up_to(batch.last_offset)
        if not batch.is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(batch.producer_id)
        if ongoing is not None:
            ongoing.last_observed_batch = batch.last_offset
            return True
        self._ongoing_committed.add(batch.producer_id)
        return False


def _control_type(batch: RecordBatch) -> int | None:
    """The control record's type (ABORT 0, COMMIT 1, ...), or None for a control batch emptied by cleaning."""
    if batch.records_count == 0:
        return None
    key = batch.records()[0].key
    if key is None or len(key) < 4:
        return -1
    return int(struct.unpack_from(">h", key, 2)[0])


# ---- the key map (buildOffsetMap) ------------------------------------------------------------------


def build_offset_map(
    dirty: Sequence[LogSegment],
    start: int,
    end: int,
    offset_map: OffsetMap,
    aborted: Sequence[AbortedTxn],
    readable_end: Callable[[LogSegment], int],
) -> int:
    """Map the keys of [start, end) (whole segments `dirty`) until the map is full; returns bytes scanned.

    The map's latest offset then says where this pass's cleaning may go (Kafka's buildOffsetMap).
    """
    offset_map.clear()
    tracker = TransactionTracker()
    tracker.add_aborted(aborted)
    scanned = 0
    for i, seg in enumerate(dirty):
        following = dirty[i + 1].base_offset if i + 1 < len(dirty) else end
        position = seg.read_position(start) if seg.base_offset < start else 0
        for _, batch in seg.iter_batches(position, readable_end(seg)):
            scanned += batch.size
            if batch.is_control:
                tracker.on_control_batch(batch, _control_type(batch))
            elif not tracker.on_batch(batch):
                for record in batch.records():
                    if record.key is not None and record.offset >= start:
                        if len(offset_map) >= offset_map.capacity:
                            return scanned  # full: this pass cleans up to the latest offset mapped
                        offset_map.put(record.key, record.offset)
            if batch.last_offset >= start:
                offset_map.update_latest_offset(batch.last_offset)
        offset_map.update_latest_offset(following - 1)  # over a gap at the segment's end
    return scanned


# ---- grouping (groupSegmentsBySize) ----------------------------------------------------------------


def _file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except FileNotFoundError:
        return 0


def group_segments_by_size(
    segments: Sequence[LogSegment], max_size: int, max_index_size: int, first_uncleanable: int
) -> list[list[LogSegment]]:
    """Consecutive segments merged while the log stays within segment.bytes, each index within
    `max_index_size`, and the offsets within int32 of the group's base (Kafka's groupSegmentsBySize)."""
    groups: list[list[LogSegment]] = []
    rest = list(segments)
    while rest:
        group = [rest.pop(0)]
        log_size = group[0].size
        index_size = _file_size(group[0].offset_index.path)
        time_size = _file_size(group[0].time_index.path)
        while rest:
            head = rest[0]
            last_offset = rest[1].base_offset - 1 if len(rest) > 1 else first_uncleanable - 1
            if not (
                log_size + head.size <= max_size
                and index_size + _file_size(head.offset_index.path) <= max_index_size
                and time_size + _file_size(head.time_index.path) <= max_index_size
                and (head.size == 0 or last_offset - group[-1].base_offset <= INT32_MAX)
            ):
                break
            group.append(rest.pop(0))
            log_size += head.size
            index_size += _file_size(head.offset_index.path)
            time_size += _file_size(head.time_index.path)
        groups.append(group)
    return groups


# ---- the filter (Cleaner.cleanInto, MemoryRecords.filterTo) ----------------------------------------

_DELETE, _DELETE_EMPTY, _RETAIN_EMPTY = 0, 1, 2


@dataclass
class PassCounters:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_retained: int = 0


@dataclass
class BatchFilter:
    """Decides, batch by batch, what one cleaning round keeps."""

    offset_map: OffsetMap
    tracker: TransactionTracker
    now: int
    delete_retention_ms: int
    upper_bound: int  # the round's first uncleanable offset
    last_records: dict[int, tuple[int | None, int]]  # producer id -> (last data offset, epoch)
    counters: PassCounters = field(default_factory=PassCounters)

    def filter(self, batch: RecordBatch) -> bytes | None:
        """The bytes that replace `batch` in the cleaned segment, or None when it goes."""
        self.counters.bytes_read += batch.size
        control_type = _control_type(batch) if batch.is_control else None
        if batch.is_control:
            can_discard = self.tracker.on_control_batch(batch, control_type)
            horizon = batch.base_timestamp if batch.has_delete_horizon else None
            discard_records = can_discard and horizon is not None and horizon <= self.now
        else:
            can_discard = self.tracker.on_batch(batch)
            discard_records = can_discard
        retention = self._retention(batch, discard_records)
        if retention == _DELETE:
            return None
        records = batch.records()
        self.counters.records_read += len(records)
        keep = [self._keep(batch, r, discard_records) for r in records]
        kept = sum(keep)
        if kept:
            self.counters.records_retained += kept
            tombstones = not batch.is_control and any(r.value is None for r, k in zip(records, keep, strict=True) if k)
            needs_horizon = (tombstones or (can_discard and batch.is_control)) and not batch.has_delete_horizon
            if kept == len(records) and not needs_horizon:
                return batch.buffer
            if needs_horizon:
                # Clamped: delete.retention.ms may be Long.MAX (Java's sum would wrap negative).
                horizon_ms: int | None = min(self.now + self.delete_retention_ms, INT64_MAX)
            else:
                horizon_ms = batch.base_timestamp if batch.has_delete_horizon else None
            # Kafka's buildRetainedRecordsInto: offsets, producer fields and codec kept (natively encoded)
            return batch.retained(bytes(keep), horizon_ms)
        if retention == _RETAIN_EMPTY:
            if can_discard and not batch.is_control:
                self.tracker.note_retained_aborted(batch)
            return batch.retained(bytes(len(records)))  # nothing kept: Kafka's writeEmptyHeader
        return None

    def _retention(self, batch: RecordBatch, discard_records: bool) -> int:
        if batch.has_producer_id and self._last_of_producer(batch):
            return _RETAIN_EMPTY  # it carries the producer's last sequence (or epoch): producer state survives
        if batch.next_offset == self.upper_bound:
            return _RETAIN_EMPTY  # the round's last batch keeps the log's end offset where it was
        return _DELETE if discard_records else _DELETE_EMPTY

    def _last_of_producer(self, batch: RecordBatch) -> bool:
        last = self.last_records.get(batch.producer_id)
        if last is None:
            return False
        last_data_offset, epoch = last
        if last_data_offset is not None:
            return batch.last_offset == last_data_offset
        return batch.is_control and batch.producer_epoch == epoch

    def _keep(self, batch: RecordBatch, record: Record, discard_records: bool) -> bool:
        if discard_records:
            return False  # the batch stays only for its producer state
        if batch.is_control:
            return True
        if record.offset > self.offset_map.latest_offset:
            return True
        if record.key is None:
            return False  # invalid in a compacted topic (Kafka counts it as an invalid message)
        if record.offset < self.offset_map.get(record.key):
            return False
        if record.value is not None:
            return True
        return not batch.has_delete_horizon or self.now < batch.base_timestamp


# ---- the swap steps --------------------------------------------------------------------------------


def _path(directory: str, base: int, suffix: str, extra: str = "") -> str:
    return segment_file(directory, base, suffix) + extra


@dataclass
class CleanedOutput:
    """What a group's cleaning produced: its batches (bytes) and the aborts its `.txnindex` keeps."""

    base_offset: int
    batches: Iterator[bytes]
    aborted: list[AbortedTxn]
    index_interval_bytes: int


def write_cleaned(directory: str, output: CleanedOutput) -> int:
    """Write `<base>.log.cleaned` and its three indexes `.cleaned`, fsynced; returns the log's size.

    The indexes are built as a segment's rebuild builds them (an offset-index entry each time a
    batch starts more than index.interval.bytes after the last indexed one).
    """
    base = output.base_offset
    log_path = _path(directory, base, LOG_FILE_SUFFIX, CLEANED_FILE_SUFFIX)
    for suffix in _SEGMENT_SUFFIXES:
        try:
            os.unlink(_path(directory, base, suffix, CLEANED_FILE_SUFFIX))  # a leftover of a failed attempt
        except FileNotFoundError:
            pass
    offset_index = OffsetIndex(_path(directory, base, INDEX_FILE_SUFFIX, CLEANED_FILE_SUFFIX), base, writable=True)
    time_index = TimeIndex(_path(directory, base, TIME_INDEX_FILE_SUFFIX, CLEANED_FILE_SUFFIX), base, writable=True)
    txn_index = TransactionIndex(_path(directory, base, TXN_INDEX_FILE_SUFFIX, CLEANED_FILE_SUFFIX), base)
    fd = create_durably(log_path)
    position = last_indexed = 0
    max_ts, max_ts_offset = -1, base
    try:
        for data in output.batches:
            batch = RecordBatch.parse(data, verify_crc=False)  # copied whole-and-checked, or built here
            write_all(fd, data)
            if batch.max_timestamp > max_ts:
                max_ts, max_ts_offset = batch.max_timestamp, batch.last_offset
            if position - last_indexed > output.index_interval_bytes:
                offset_index.append(batch.last_offset, position)
                time_index.maybe_append(max_ts, max_ts_offset)
                last_indexed = position
            position += len(data)
        if max_ts >= 0:
            time_index.maybe_append(max_ts, max_ts_offset)
        for txn in output.aborted:
            txn_index.append(txn)
        fsync_fd(fd)
        for index in (offset_index, time_index, txn_index):
            index.flush()
            _fsync_path(index.path)
    finally:
        os.close(fd)
        for index in (offset_index, time_index, txn_index):
            index.close()
    return position


def _fsync_path(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return  # an index with nothing to say was never created
    try:
        fsync_fd(fd)
    finally:
        os.close(fd)


def _rename_all(directory: str, base: int, old: str, new: str, suffixes: Sequence[str]) -> None:
    for suffix in suffixes:
        try:
            os.rename(_path(directory, base, suffix, old), _path(directory, base, suffix, new))
        except FileNotFoundError:
            if suffix == LOG_FILE_SUFFIX:
                raise
    fsync_dir(directory)


def rename_to_swap(directory: str, base: int) -> None:
    """The cleaned files become `.swap`, the `.log` first: from here recovery completes the swap."""
    _rename_all(directory, base, CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX, _SEGMENT_SUFFIXES)


def delete_replaced(directory: str, bases: Sequence[int]) -> None:
    """The replaced segments' files renamed to `.deleted` (ascending, the `.log` first), then unlinked."""
    for base in sorted(bases):
        _rename_all(directory, base, "", DELETED_FILE_SUFFIX, _SEGMENT_SUFFIXES)
    for base in sorted(bases):
        for suffix in _SEGMENT_SUFFIXES:
            try:
                os.unlink(_path(directory, base, suffix, DELETED_FILE_SUFFIX))
            except FileNotFoundError:
                pass
    fsync_dir(directory)


def rename_swap_to_log(directory: str, base: int) -> None:
    """The `.swap` files take their real names, the indexes first and the `.log` last, so a segment
    that is listed (by its `.log`) has its indexes."""
    _rename_all(directory, base, SWAP_FILE_SUFFIX, "", tuple(reversed(_SEGMENT_SUFFIXES)))


def write_checkpoint(root: str, topic: str, partition: int, offset: int) -> None:
    """cleaner-offset-checkpoint: the partition is clean below `offset`."""
    write_checkpoint_entry(root, topic, partition, offset)


# ---- one pass ----------------------------------------------------------------------------------------


@dataclass
class PassPlan:
    """The inputs of one cleaning round, gathered by the partition log under its lock."""

    directory: str
    root: str
    topic: str
    partition: int
    segments: list[LogSegment]
    config: TopicConfig
    first_dirty: int
    first_uncleanable: int
    now: int
    last_records: dict[int, tuple[int | None, int]]
    aborted: Callable[[int, int], list[AbortedTxn]]
    readable_end: Callable[[LogSegment], int]


def clean_pass(
    plan: PassPlan,
    offset_map: OffsetMap,
    on_swapped: Callable[[list[LogSegment], int], None],
    progress: Callable[[int, int], None] | None = None,
) -> tuple[int, PassCounters]:
    """One Kafka cleaning round: map the dirty section, recopy every group below the map's end and swap
    each in (`on_swapped(replaced, base)` updates the caller's view), the checkpoint written before the
    first swap. Returns the end."""
    dirty = segments_overlapping(plan.segments, plan.first_dirty, plan.first_uncleanable)
    build_offset_map(
        dirty,
        plan.first_dirty,
        plan.first_uncleanable,
        offset_map,
        plan.aborted(plan.first_dirty, plan.first_uncleanable),
        plan.readable_end,
    )
    end = offset_map.latest_offset + 1
    tracker = TransactionTracker()
    counters = PassCounters()
    groups = group_segments_by_size(
        segments_overlapping(plan.segments, 0, end), plan.config.segment_bytes, MAX_INDEX_SIZE, plan.first_uncleanable
    )
    batch_filter = BatchFilter(
        offset_map,
        tracker,
        plan.now,
        plan.config.delete_retention_ms,
        plan.first_uncleanable,
        plan.last_records,
        counters,
    )
    following = {s.base_offset: plan.segments[i + 1] for i, s in enumerate(plan.segments[:-1])}
    total = sum(seg.size for group in groups for seg in group)
    done = [0]

    def step(size: int) -> None:
        done[0] += size
        if progress is not None:
            progress(done[0], total)

    for group in groups:
        cleaned_index: list[AbortedTxn] = []
        tracker.cleaned_index = cleaned_index
        output = CleanedOutput(
            group[0].base_offset,
            _group_batches(group, plan, tracker, batch_filter, following, step),
            cleaned_index,
            plan.config.index_interval_bytes,
        )
        counters.bytes_written += write_cleaned(plan.directory, output)
        rename_to_swap(plan.directory, output.base_offset)
        # past the point of no return, before anything cleaned can be seen (module docstring)
        reached = max(plan.first_dirty, _group_end(group, following, end))
        write_checkpoint(plan.root, plan.topic, plan.partition, reached)
        delete_replaced(plan.directory, [s.base_offset for s in group])
        rename_swap_to_log(plan.directory, output.base_offset)
        on_swapped(group, output.base_offset)
    write_checkpoint(plan.root, plan.topic, plan.partition, end)
    return end, counters


def _group_end(group: list[LogSegment], following: dict[int, LogSegment], end: int) -> int:
    """The offset after a group's last segment (the round's end at most): where its cleaning reached."""
    after = following.get(group[-1].base_offset)
    return end if after is None else min(end, after.base_offset)


def _group_batches(
    group: list[LogSegment],
    plan: PassPlan,
    tracker: TransactionTracker,
    batch_filter: BatchFilter,
    following: dict[int, LogSegment],
    progress: Callable[[int], None] | None,
) -> Iterator[bytes]:
    """The retained bytes of the group's batches, in order; each segment's aborts fed to the tracker first."""
    for seg in group:
        nxt = following.get(seg.base_offset)
        upper = nxt.base_offset if nxt is not None else seg.next_offset
        tracker.add_aborted(plan.aborted(seg.base_offset, upper))
        for _, batch in seg.iter_batches(0, plan.readable_end(seg)):
            kept = batch_filter.filter(batch)
            if kept is not None:
                yield kept
        if progress is not None:
            progress(seg.size)


def elapsed_since(start: float) -> float:
    return time.monotonic() - start
