"""The log of one topic-partition (Kafka's UnifiedLog): locks, catch-up, append, markers, reads, roll, close.

There is no broker. Every process that opens a partition keeps its own view (segments,
producer state) and brings it up to date from the files before acting:

* Writers take the partition's flock and, holding it, *catch up* on the tail other
  processes wrote, validate, append, fdatasync (one per call, unless the caller asks for
  none: a transaction's data is synced once at its commit), then update their view.
  Under the lock every byte past the last whole batch belongs to a dead writer, so a
  torn tail may be cut there.
* Readers take no lock; they read whole, CRC-valid batches only and stop quietly at a
  partial tail, which may be a write in flight.
* The high watermark (`storage/high_watermark.py`) is the offset below which the log is
  known to be fdatasync'ed; every fdatasync publishes it, and readers of records
  (`txlog/fetch.py`) stop there, so none sees a record a power loss could take away.

The rest sits beside the log, along Kafka's seams: recovery at open and the replay that
catching up shares with it in `log_loader.py` (LogLoader), when producer-state snapshots
are taken and removed in `producer_state_snapshots.py` (ProducerStateManager's file half),
the `.txnindex` check against the log's markers in `txnindex_check.py`, and retention in
`retention.py`.

Reads can write, and say so: a lookup gives a sealed segment's indexes their full check on
first use and, in a writable view, rebuilds the ones that fail it
(`_indexes_checked_repairing`); read_committed's abort lookup rewrites a `.txnindex` that
disagrees with the log (`_aborts_checked_repairing`). Both write only under the writer lock;
a read-only view (or one whose fsync failed) keeps its repairs in memory instead.
"""

from __future__ import annotations

import functools
import logging
import os
import posix
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from itertools import pairwise
from typing import TYPE_CHECKING, Concatenate, ParamSpec, TypeVar

from storage._native import quiet_append, start_writeback
from storage.checkpoint import LOG_START_CHECKPOINT, read_log_start_checkpoint, write_log_start_checkpoint
from storage.config import TopicConfig
from storage.descriptor_cache import CACHE, CachedFile
from storage.durable import raise_first, sync_round, write_refused
from storage.errors import (
    CorruptIndexError,
    CorruptRecordError,
    FileReplacedError,
    InvalidRecordError,
    KafkaError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    ReadOnlyStoreError,
    RecordTooLargeError,
)
from storage.file_records import FileRecords
from storage.file_stamp import change_key, racy, stamp_clock_ns
from storage.high_watermark import HighWatermarkFile
from storage.legacy_records import LegacyMessage
from storage.lock import FileLock, writer_lock_if_free
from storage.log_files import log_file
from storage.log_loader import LEADER_EPOCH, NO_TXNINDEX, LogLoader, SegmentList, readable_end, segment_index_for
from storage.producer_snapshot import list_snapshots
from storage.producer_state import (
    BatchMetadata,
    ProducerAppend,
    ProducerStateManager,
    TxnVerifier,
)
from storage.producer_state_snapshots import SNAPSHOT_INTERVAL_BYTES, clean_snapshots
from storage.records import ControlType, RecordBatch, build_control_batch, with_base_offset
from storage.retention import delete_segments, segments_below, segments_past_retention
from storage.safe_open import refuse_links
from storage.segment import LogSegment
from storage.transaction_index import AbortedTxn, collect_aborted
from storage.txnindex_check import AbortReplay, TxnIndexCheck, write_txn_counts
from storage.varint import INT32_MAX

# Imported where used, so that a reader never loads them: the cleaner by the compaction methods (~7 ms),
# the extents of planned readers by `extents`.
if TYPE_CHECKING:
    from storage.extent import SegmentExtent
    from storage.log_cleaner import Cleanable, CleanerStats, PassPlan

_log = logging.getLogger(__name__)

LOCK_FILE = "txlog.lock"
MAX_RELATIVE_OFFSET = INT32_MAX  # an index entry keeps an offset as 4 bytes past its segment's base
RELOAD_ON_SWAP_ATTEMPTS = 20
EXPIRY_CHECK_INTERVAL_MS = 60_000
# `quiet_append`'s answers (storage/native/src/bindings/append.rs): a look disagreed (nothing written),
# the write failed, the fdatasync failed; 0 is success.
_QUIET_FALLBACK, _QUIET_WRITE_FAILED, _QUIET_SYNC_FAILED = 1, 2, 3


def _stage_batch(plan: ProducerAppend, batch: RecordBatch, base: int, last: int, max_ts: int) -> None:
    """Stage a data batch written at offsets base..last in the producer's entry (a batch with no producer
    id has none)."""
    if batch.has_producer_id:
        plan.stage_data(
            batch.producer_id,
            batch.producer_epoch,
            BatchMetadata(batch.base_sequence, batch.last_sequence, base, last, max_ts),
            batch.is_transactional,
        )


def _record_written(state: ProducerStateManager, batch: RecordBatch, base: int, last: int, max_ts: int) -> None:
    """A lone batch, checked and now written at base..last, taken into its producer's entry in place.

    What a replay of the batch from the log derives (`ProducerStateManager.replay_data`, which
    recovery and catching up use): after the write nothing can fail before the state takes it, so
    the quiet append (`PartitionLog._quiet_append`) stages no copy of the entry to commit (issue 26).
    """
    if batch.has_producer_id:
        state.replay_data(
            batch.producer_id,
            batch.producer_epoch,
            batch.base_sequence,
            batch.last_sequence,
            base,
            last,
            max_ts,
            batch.is_transactional,
        )


def _os_calls_own() -> bool:
    """Whether the `os` functions the quiet append makes natively are still the interpreter's own.

    Tests and crash workers inject failures and kills by replacing them on `os` (storage/durable.py
    looks them up at call time for that); while one is replaced, appends take the Python path,
    whose calls go through the replacement.
    """
    return (
        os.write is posix.write
        and os.fdatasync is posix.fdatasync
        and os.fstat is posix.fstat
        and os.stat is posix.stat
        and os.pwrite is posix.pwrite
    )


ADOPT_WAIT_ATTEMPTS = 50
ADOPT_WAIT_S = 0.001


@dataclass(frozen=True, slots=True)
class BatchAppendResult:
    base_offset: int
    last_offset: int
    duplicate: bool


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Offsets of an append call; `duplicate` is True when every batch was a retry already in the log."""

    base_offset: int
    last_offset: int
    duplicate: bool
    batches: tuple[BatchAppendResult, ...] = field(default=())


def _now_ms() -> int:
    return int(time.time() * 1000)


#: Segments from which one listing of the directory costs more than waiting out one clock tick (`_adopt_directory`).
ADOPT_WAIT_SEGMENTS = 200


def _scan_end(seg: LogSegment, position: int, end: int, budget: int) -> int:
    """Where a read from `position` wanting about `budget` bytes may stop reading the segment.

    The batch at `position` is read whole however large (Kafka's rule); past it, only the
    budget. A batch cut by this bound is left for the next read, as one over budget is.
    """
    want = position + max(budget, 0)
    if want >= end:
        return end
    header = seg.records.header_at(position, end)
    if header is None:
        return end
    return min(end, max(want, position + header.size))


_P = ParamSpec("_P")
# A marker appended now (`PartitionLog._plan_marker`): its staged producer state, its bytes, its segment, its
# abort's `.txnindex` entry.
_MarkerPlan = tuple[ProducerAppend, bytes, LogSegment, AbortedTxn | None]
_R = TypeVar("_R")


def _fresh_view_on_replace(
    method: Callable[Concatenate[PartitionLog, _P], _R],
) -> Callable[Concatenate[PartitionLog, _P], _R]:
    """Run a lookup again on a fresh view when a file it used was replaced under its name (a cleaner's
    swap met by a view that did not see it coming: docs/DESIGN.md §3). Offsets never change, so the
    answer is the one the lookup would have given after the swap."""

    @functools.wraps(method)
    def retrying(self: PartitionLog, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        for _ in range(RELOAD_ON_SWAP_ATTEMPTS):
            try:
                return method(self, *args, **kwargs)
            except FileReplacedError:
                with self._mutex:
                    self._loader.load(repair=False)
                    self._dir_key = None
        return method(self, *args, **kwargs)

    return retrying


def _consecutive(batches: list[tuple[RecordBatch, int]]) -> bool:
    """One idempotent producer's batches with consecutive sequences: the shape of a group commit."""
    first = batches[0][0]
    return first.producer_id >= 0 and all(
        b.producer_id == first.producer_id
        and b.producer_epoch == first.producer_epoch
        and b.base_sequence == ((a.last_sequence + 1) & 0x7FFFFFFF)
        for (a, _), (b, _) in pairwise(batches)
    )


def _stamped(raw: bytes | bytearray, stamps: list[tuple[RecordBatch, int, int]], *, whole: bool) -> bytearray:
    """The bytes an append writes: its batches copied once into one buffer (all of `raw` when
    `whole`: every batch of the request is written) and their offsets, leader epoch and true
    maxTimestamp rewritten in place (storage.records.RecordBatch.stamp_offset_into). A batch
    copied, sliced and joined again was three copies of every byte of a group commit.

    A bytearray `raw` is a trusted request handed over whole (`PartitionLog.append`): written
    as it is, stamped in place, with no copy at all (issue 26: two copies of every byte were a
    third of produce_many's sender thread with 1 KiB values)."""
    if whole:
        out = raw if type(raw) is bytearray else bytearray(raw)
    else:
        view = memoryview(raw)
        out = bytearray().join([view[batch.position : batch.position + batch.size] for batch, _, _ in stamps])
    at = 0
    for batch, base, max_ts in stamps:
        batch.stamp_offset_into(out, at, base, LEADER_EPOCH, max_ts)
        at += batch.size
    return out


def marker_template(
    control_type: ControlType, producer_id: int, producer_epoch: int, coordinator_epoch: int, ts: int
) -> bytes:
    """The bytes of the marker `append_marker` writes with these arguments, at base offset 0: every partition
    stamps its own offset on them (`with_base_offset`), so a window's markers are encoded once (`WriterHold.mark`)."""
    return build_control_batch(
        control_type,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        coordinator_epoch=coordinator_epoch,
        timestamp=ts,
        partition_leader_epoch=LEADER_EPOCH,
    )


def _duplicate_of(plan: ProducerAppend, batch: RecordBatch) -> BatchMetadata | None:
    """The batch's original if it is a retry; raises if the batch must be refused (ProducerAppend.check_data)."""
    return plan.check_data(
        batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.last_sequence, batch.is_transactional
    )


class PartitionLog:
    """Append, read, recover and retain one partition directory."""

    def __init__(
        self,
        directory: str,
        topic: str,
        partition: int,
        config: TopicConfig,
        *,
        read_only: bool = False,
        clock: Callable[[], int] = _now_ms,
    ):
        refuse_links(directory)  # for reads too: a link could serve, or take, another directory's files
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.read_only = read_only
        self._clock = clock
        self._mutex = threading.RLock()
        self._lock = None if read_only else FileLock(os.path.join(directory, LOCK_FILE))
        # The loader fills this list in place; the log never replaces it, only edits it (every edit
        # moves its generation, which is what `_segments_with_aborts` keeps its answer under).
        self._segments = SegmentList()
        self._state = ProducerStateManager(
            expiration_ms=config.producer_id_expiration_ms, max_producers=config.max_producer_ids
        )
        self._txn_check = TxnIndexCheck()
        self._hw_file = HighWatermarkFile(directory, writable=not read_only)
        # The offset through which this view knows the log is fdatasync'ed (its own syncs, or
        # the HW file's word); the HW readers get is this, capped at the log end.
        self._durable = 0
        self._loader = LogLoader(
            directory,
            config,
            self._segments,
            self._state,
            self._txn_check,
            read_only=read_only,
            clock=clock,
            swap_in_flight=self._locked_elsewhere,
        )
        self._loader.absence_key = self._absence_key
        self._loader.hold_token = self._hold_token
        # The partition directory's (mtime, inode) when this view last compared its segments with
        # the files, and whether that look came too soon after the mtime to vouch for it
        # (`_directory_unchanged`): the view lists the directory only when the key moved.
        self._dir_key: tuple[int, int] | None = None
        self._dir_key_racy = True
        # The stamping clock just before the directory key was taken (`_directory_unchanged`): a file the walk
        # after that stat looks at is vouched for by its mtime only when that mtime is older (`racy`).
        self._dir_looked = 0
        # Whether the last `_directory_unchanged` vouched for the directory (the key it took is trusted).
        self._dir_trusted = False
        # Whether the key was taken by this look at the view (`_catch_up` clears it, the stat sets it):
        # only such a key may say a file is still absent (`_absence_key`).
        self._dir_key_fresh = False
        # The tail a writer's catch-up last found quiet, None when none is: (the directory key under
        # which it found no segment after the active one and no `.txnindex` entry of the active segment
        # past the log end, the key taken before it looked and not racy (`_catch_up`): while the key
        # stays so, no file can have been created since; the active segment's `.txnindex` as it found
        # it, (size, mtime_ns) not racy, or NO_TXNINDEX: while the file keeps it, no entry can have been
        # added since (`_quiet_append`)). One field, so the two are always of the same look. With no
        # `.txnindex` at all the writer's catch-up skips both stats (the per-append cost, issue 26).
        self._quiet_tail: tuple[tuple[int, int], tuple[int, int]] | None = None
        # The same for the next segment alone: the directory key under which the writer's last walk found no
        # segment after the active one (it spares that look to a catch-up that still checks the active segment's
        # `.txnindex`).
        self._no_next_key: tuple[int, int] | None = None
        # Whether a snapshot off the segment bases may exist (a close's or recovery's at the log end):
        # only then does a roll list the snapshots to remove them (`_clean_snapshots`). Every roll
        # cleans them, so only this view's open, a change it did not make (another process's
        # close) or a snapshot it took off a base can leave one.
        self._strays_possible = True
        # The segment list's generation when `_segments_with_aborts` last looked, and what it found.
        self._aborts_cache_key = -1
        self._aborts_cache: list[int] = []
        # The directory's inode when this view first looked: another directory under the name
        # (the topic deleted and made again) is no swap, and this view must not move into it.
        self._dir_ino: int | None = None
        self._dir_dev: int | None = None  # the directory's filesystem (`WriterHold`'s one syncfs covers one)
        self._failed: str | None = None
        # Why this view of a writable store may not write (the disk refused recovery's writes at open).
        self._write_refused: str | None = None
        self._refusal: OSError | None = None  # the disk's answer, the cause of every refused write
        # Log data this view wrote that no fdatasync covers yet: close must make it durable or say so.
        self._own_unsynced = False
        self._last_expiry_check = 0
        self._closed = False
        # The active segment when the writer's catch-up found its log still linked under the lock: the
        # first write after that look needs no fstat of its own to prove it (`_check_not_deleted`).
        self._linked_log: LogSegment | None = None
        # Whether this thread caught the view up under a writer lock held ever since (`exclusive`): no
        # other process can have written since, so a marker appended inside needs no catch-up of its own.
        self._held_caught_up = False
        # Whether this view wrote to the log inside the `exclusive` section it is in: the lock held since,
        # no other process can have synced that write, so `_unsynced_segment` need not ask the HW file.
        self._wrote_while_held = False
        # An ABORT's `.txnindex` entry appended ahead of its marker by a `WriterHold` (lock held since),
        # and whether its fsync ended: the marker then finds it in place and durable (`_index_abort`).
        self._staged_abort: tuple[LogSegment, AbortedTxn] | None = None
        self._staged_abort_durable = False
        # While a thread holds the writer lock inside `exclusive`: (that thread, an object of that hold alone).
        # Nobody else can change the partition's files then, so what its indexes read under it stays the file
        # (`EntryFile.trust_while`).
        self._hold: tuple[int, object] | None = None
        # The plan of the marker that staged entry was made for, and what it was planned from (the marker's
        # arguments, the producer states, the offset): its marker reuses it rather than planning it again.
        self._staged_plan: tuple[tuple[object, ...], _MarkerPlan] | None = None
        # A log start DeleteRecords moved inside a segment (LOG_START_CHECKPOINT), and which
        # version of that file this view read: the log start is the larger of it and the first
        # segment's base offset (`_log_start`).
        self._start_floor = 0
        self._start_file: tuple[int, int, int, int] | None = None
        if read_only:
            with self._mutex:
                self._loader.load(repair=False)
        else:
            try:
                os.makedirs(directory, exist_ok=True)
                with self._mutex, self._writer_lock:
                    self._loader.load(repair=True)
                    self._recover_high_watermark()
            except (KafkaStorageError, OSError) as exc:
                refusal = write_refused(exc)
                if refusal is None or self._failed:
                    raise
                self._open_without_writing(refusal)
        with self._mutex:
            self._refresh_log_start()
            found = os.stat(directory)
            self._dir_ino, self._dir_dev = found.st_ino, found.st_dev
            # Where in the active segment this view knows the newest snapshot (`_maybe_snapshot_active`):
            # recovery left one at the log end, unless it had nothing to replay (a clean close did).
            self._snapshot_mark = (self._segments[-1].base_offset, self._segments[-1].size)

    def _open_without_writing(self, refusal: OSError) -> None:
        """The disk refused recovery's writes (full, read-only, no permission): open as a read-only view.

        Readers never need to write (docs/reliability-scenarios.md scenario 70): the view reads
        by the read-only rules (a torn tail is not cut but never shown, repairs stay in memory),
        and every write through it is refused with the reason. Reopening once the disk takes
        writes again recovers the files.
        """
        self._write_refused = (
            f"the disk refused recovery's writes when it was opened ({refusal.strerror or refusal}); "
            "reopen the store once it can be written"
        )
        self._refusal = refusal
        self.read_only = True
        self._loader.read_only = True
        if self._lock is not None:
            self._lock.close()
            self._lock = None
        self._hw_file.close()
        self._hw_file = HighWatermarkFile(self.directory, writable=False)
        self._durable = 0
        with self._mutex:
            self._loader.load(repair=False)

    # ---- public properties ---------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        """The first offset a reader may read: the first segment's, or past it where DeleteRecords moved it."""
        with self._mutex:
            self._refresh_segment_list()
            return self._log_start()

    @property
    def log_end_offset(self) -> int:
        """Offset the next appended record gets; includes what other processes appended."""
        with self._mutex:
            if not self._held_caught_up:  # inside `exclusive` the view is the file: nobody else can write
                self._catch_up(repair=False)
            return self._segments[-1].next_offset

    @property
    def last_stable_offset(self) -> int:
        """First offset of the earliest open transaction, else the log end (docs/DESIGN.md §6)."""
        with self._mutex:
            self._catch_up(repair=False)
            self._check_transactions_known()
            return self._lso()

    def check_transactions_known(self) -> None:
        """Raise the corruption this view's replay passed over if a transaction it holds open began before it.

        The damaged batch may have held that transaction's marker: the view cannot tell an
        open transaction from one that ended there, so answers about transactions (and a
        read_committed reader held at the LSO) fail loudly instead of guessing
        (docs/reliability-scenarios.md rule 7). A view whose snapshot covered the damage
        replayed none of it and knows its producers.
        """
        with self._mutex:
            self._check_transactions_known()

    def _check_transactions_known(self) -> None:
        damage = self._loader.corruption
        if damage is not None and any(
            first < self._loader.corruption_offset for first in self._state.open_transactions().values()
        ):
            raise damage

    def bounds(self) -> tuple[int, int, int]:
        """(log start, last stable offset, log end) from one look at the files.

        A reader needs all three before every fetch; asking for them one property at a
        time would catch up on other writers and list the directory once per property.
        """
        with self._mutex:
            self._refresh_segment_list()
            return self._log_start(), self._lso(), self._segments[-1].next_offset

    def _lso(self) -> int:
        return self._state.last_stable_offset(self._log_start(), self._segments[-1].next_offset)

    def _log_start(self) -> int:
        """The log start of this view: never before its first segment, never past its log end."""
        return max(self._segments[0].base_offset, min(self._start_floor, self._segments[-1].next_offset))

    @property
    def high_watermark(self) -> int:
        """The offset below which the log is known to be fdatasync'ed: where readers of records stop.

        A read that may write: when the HW file says less than the log end and no writer
        holds the partition's lock (the writer died, or is between calls, before syncing),
        this view fdatasyncs the tail itself and publishes the HW (a read-only view keeps
        it in memory). See `_high_watermark`.
        """
        with self._mutex:
            self._catch_up(repair=False)
            return self._high_watermark()

    def visible_bounds(self, *, committed_only: bool = False) -> tuple[int, int, int, int]:
        """(log start, last stable offset, log end, high watermark) from one look at the files.

        `bounds()` plus the HW: what a fetch needs before it reads (`txlog.fetch.LogBounds`).
        May sync and publish the HW, as `high_watermark` says; a `committed_only` caller
        (read_committed) reads no further than the LSO, so only a lag below the LSO makes it
        sync: a read_committed consumer polling beside an open transaction never fsyncs.
        """
        with self._mutex:
            self._refresh_segment_list()
            lso = self._lso()
            hw = self._high_watermark(lso if committed_only else None)
            return self._log_start(), lso, self._segments[-1].next_offset, hw

    def _high_watermark(self, needed: int | None = None) -> int:
        """The HW of this view (caught up), from the HW file; with no file (older stores, Kafka dirs) the log end.

        A damaged file's word is not taken: the view keeps what it knew, and the sync below
        (or the writer's next one) rewrites the file. The sync happens only when the durable
        end is below `needed` (default: the log end), what the caller is about to read.
        """
        stored = self._hw_file.read()
        if stored is None:
            return self._segments[-1].next_offset
        self._durable = max(self._durable, stored)
        if self._durable < (self._segments[-1].next_offset if needed is None else needed):
            self._sync_for_reader()
        return max(self._log_start(), min(self._durable, self._segments[-1].next_offset))

    def _sync_for_reader(self) -> None:
        """Make the unsynced tail durable if no writer is at work, as recovery would (see `high_watermark`).

        A writer holding the lock will sync (or die, and the next look does this): a reader
        never waits for it. This thread holding the lock is itself that writer, mid-operation.
        """
        if (self._lock is not None and self._lock.held) or self._failed:
            return  # a view whose fsync failed may not trust a later one (fsyncgate)
        with writer_lock_if_free(os.path.join(self.directory, LOCK_FILE)) as free:
            if not free:
                return
            self._catch_up(repair=False)  # the lock is held through our own descriptor: never self._lock here
            active = self._segments[-1]
            try:
                active.sync()
            except KafkaStorageError:
                return  # not known durable: the HW stays where it was
            self._durable = active.next_offset
            if not self.read_only:
                self._hw_file.publish(self._durable)

    def open_transactions(self) -> dict[int, int]:
        """producer id -> first offset of its still-open transaction in this partition."""
        with self._mutex:
            self._catch_up(repair=False)
            self._check_transactions_known()
            return self._state.open_transactions()

    def producer_states(self) -> dict[int, dict]:
        """What the partition remembers per producer (for `describe-producers` and tests)."""
        with self._mutex:
            self._catch_up(repair=False)
            self._check_transactions_known()
            out = {}
            for pid, e in self._state.producers.items():
                last = e.batches[-1] if e.batches else None
                out[pid] = {
                    "producer_epoch": e.epoch,
                    "last_sequence": last.last_seq if last else -1,
                    "last_offset": last.last_offset if last else -1,
                    "last_timestamp": e.last_timestamp,
                    "coordinator_epoch": e.coordinator_epoch,
                    "current_txn_start_offset": e.current_txn_first_offset,
                }
            return out

    @property
    def failed(self) -> bool:
        """True once an fsync failed: the last write's durability is unknown and writes are refused."""
        return self._failed is not None

    @property
    def size_bytes(self) -> int:
        with self._mutex:
            self._refresh_segment_list()
            return sum(s.file_size() for s in self._segments)

    @property
    def segments(self) -> list[LogSegment]:
        with self._mutex:
            self._refresh_segment_list()
            return list(self._segments)

    # ---- catching up with the files ----------------------------------------------------------------

    def _catch_up(self, *, repair: bool) -> None:
        """Bring the view up to what other processes appended or rolled since we last looked.

        With `repair` (writer lock held) this is recovery's replay and may cut a torn tail
        and drop a dead writer's `.txnindex` entry; without it nothing is written.
        """
        if self._closed:
            raise KafkaStorageError(f"partition {self.topic}-{self.partition} is closed")
        self._dir_key_fresh = False  # until this look stats the directory (`_absence_key`)
        self._linked_log = None  # until this look's fstat of the active log (`_check_not_deleted`)
        self._catch_up_view(repair=repair)
        if repair:
            self._check_active_indexes()

    def _check_active_indexes(self) -> None:
        """The active segment's indexes, given their full check once before a writer writes to it (lock held).

        Opening checks every segment's indexes in constant time only (LogLoader.check_indexes), so
        a writer's first write after an open (or a reload, or a roll) runs the full check first and
        rebuilds a damaged index before appending to it. Caught up under the lock, the view is the
        file: a failure is damage, never this view being behind (`_passes_once_caught_up`).
        """
        active = self._segments[-1]
        if not active.indexes_verified and not self._full_index_check_passes(active):
            self._loader.repair_indexes(active, repair=not self.read_only)

    def _catch_up_view(self, *, repair: bool) -> None:
        """`_catch_up`'s walk of the directory and of the tail."""
        quiet = last = False
        if repair:
            quiet_tail, self._quiet_tail = self._quiet_tail, None
            no_next_key, self._no_next_key = self._no_next_key, None
            if self._sync_with_directory(repair=True):
                return  # another process's cleaner replaced segments: the view was loaded afresh
            # Creating a file moves the directory's mtime: a trusted key equal to the one under which
            # the last walk found neither the next segment nor a `.txnindex` says neither exists now.
            # A `.txnindex` present is looked at (one fstat) by every catch-up of the Python path.
            quiet = (
                quiet_tail is not None
                and self._dir_trusted
                and self._dir_key == quiet_tail[0]
                and quiet_tail[1] == NO_TXNINDEX
            )
            last = no_next_key is not None and self._dir_trusted and self._dir_key == no_next_key
        try:
            self._catch_up_on_tail(repair=repair, quiet=quiet_tail if quiet else None, last=last)
        except FileReplacedError:
            # The view's last segment was rolled and cleaned since it looked (a reader far
            # behind): its file name holds the cleaned segment now. Start from the files.
            self._loader.load(repair=repair)
            self._dir_key = None

    def _catch_up_on_tail(
        self,
        *,
        repair: bool,
        quiet: tuple[tuple[int, int], tuple[int, int]] | None = None,
        last: bool = False,
    ) -> None:
        """`_catch_up`'s walk: replay what grew in the view's last segment, open the segments rolled after it.

        `quiet`: the quiet tail (`_quiet_tail`) under whose directory key, the one just taken, the
        directory vouches that no segment follows the active one and that the active segment has no
        `.txnindex` (`_catch_up`), so neither is looked for. `last`: it vouches for the first alone
        (`_no_next_key`), so the next segment is not looked for.
        """
        while True:
            active = self._segments[-1]
            size, links = active.records.size_and_links()
            if repair and links:
                self._linked_log = active  # still linked as the writer looked, lock held (`_check_not_deleted`)
            if size < active.size:
                self._loader.load(repair=repair)  # someone cut bytes we had seen: start over
                self._durable = min(self._durable, self._segments[-1].next_offset)
                return
            if size > active.size:
                self._loader.replay(len(self._segments) - 1, active.size, repair=repair)
            if quiet is not None:
                self._quiet_tail, self._no_next_key = quiet, quiet[0]
                return
            following = None if last else log_file(self.directory, active.next_offset)
            if active.next_offset == active.base_offset or following is None or not os.path.exists(following):
                if repair and self._vouching_key():
                    self._no_next_key = self._dir_key
                if repair:
                    self._note_quiet_tail(self._loader.drop_stale_txn_entries())
                return
            try:
                rolled = self._loader.open_segment(active.next_offset, writable=not self.read_only)
            except FileNotFoundError:
                self._loader.load(repair=repair)  # deleted by retention since we looked: this view is far behind
                return
            self._segments.append(rolled)
            self._txn_check.expect(rolled, 0, rolled.base_offset)  # this view replays all of it

    def _note_quiet_tail(self, txn_key: tuple[int, int] | None) -> None:
        """After a writer's walk found no next segment: make the tail quiet (`_quiet_append`) when the
        directory key vouches for that and `txn_key`, the active `.txnindex`'s key from the stale-entry
        check, vouches for the file; a key whose mtime is not older than the look (`racy`) does not, as a
        later change in the same clock tick could leave it as it is (the next catch-up looks again)."""
        key = self._dir_key
        if txn_key is None or key is None or not self._vouching_key():
            return
        if txn_key != NO_TXNINDEX and racy(txn_key[1], self._dir_looked):
            return
        self._quiet_tail = (key, txn_key)

    def _vouching_key(self) -> bool:
        """Whether the directory key this catch-up took can vouch for what the walk then found absent.

        Only a key taken before the walk looked (the writer's catch-up stats the directory first),
        of the directory the view opened, and not racy: a file created after that stat then moves
        the mtime past the key's, so an equal key later means nothing was created.
        """
        key = self._dir_key
        return key is not None and key[1] == self._dir_ino and not self._dir_key_racy

    def _absence_key(self) -> tuple[int, int] | None:
        """The directory key, when it can vouch that no file was created since it was taken (`_vouching_key`).

        A segment's `.txnindex` found absent under it is absent until the key moves
        (EntryFile.vouch_absence_by). Only a key this look at the view took counts: a reader's
        catch-up walks the tail (and may meet a new ABORT) before it stats the directory, and the
        key of the last look says nothing about what was created since.
        """
        return self._dir_key if self._dir_key_fresh and self._vouching_key() else None

    def _refresh_segment_list(self) -> None:
        """Bring the view up to the files before a read: other writers' appends and rolls (the tail),
        then, only when the directory changed, retention's deletions, DeleteRecords and cleaners' swaps."""
        self._catch_up(repair=False)
        self._sync_with_directory(repair=False)

    def _locked_elsewhere(self) -> bool:
        """Whether another process (or descriptor) holds this partition's writer lock: a swap may be in flight."""
        if self._lock is not None and self._lock.held:
            return False  # this view is the writer: no other process is cleaning
        with writer_lock_if_free(os.path.join(self.directory, LOCK_FILE)) as free:
            return not free

    def _directory_unchanged(self) -> bool:
        """Whether the partition directory is as this view last compared its segments with it: one stat.

        Every change to the set of segments (a roll, retention, DeleteRecords' checkpoint, a
        cleaner's swap) creates, renames or unlinks a name in the directory, which moves its
        mtime. The mtime comes from a coarse clock, though: a change made in the same tick as
        the look that took the key leaves the key as it was ("racy git"). A key whose mtime was
        not yet in the past by that clock when the look began is therefore never trusted: the
        view compares again at its next look, until a look comes a tick later and vouches for it.
        """
        before = stamp_clock_ns()
        self._dir_trusted = False
        try:
            st = os.stat(self.directory)
        except FileNotFoundError:
            return True  # deleted under the view (scenario 71): there is nothing left to compare with
        key = (st.st_mtime_ns, st.st_ino)
        trusted = key == self._dir_key and not self._dir_key_racy and not self._loader.reads_swap
        self._dir_key = key
        self._dir_key_racy = racy(st.st_mtime_ns, before)
        self._dir_looked = before
        self._dir_trusted = trusted
        self._dir_key_fresh = True
        return trusted

    def _adopt_directory(self) -> None:
        """After this view changed the segments itself, under the writer lock: the directory is its view.

        Nobody else changes the set of segments without the lock, so the next look need not
        list the directory for this view's own roll, retention or cleaning. The key is as
        racy as any (`_directory_unchanged`): another process's change after the lock is
        released, in the same clock tick, would leave it as it is. A view with many segments,
        whose listing costs more than a tick, waits that tick out (no CPU, at most a few ms,
        once per roll) before its look, so the key it keeps is one it can trust.
        """
        self._dir_key = None
        self._quiet_tail = self._no_next_key = None
        if len(self._segments) >= ADOPT_WAIT_SEGMENTS:
            self._wait_for_tick_after_mtime()
        self._directory_unchanged()

    def _wait_for_tick_after_mtime(self) -> None:
        """Sleep until the stamping clock has passed the directory's mtime (bounded: a clock set back ends it)."""
        try:
            mtime = os.stat(self.directory).st_mtime_ns
        except FileNotFoundError:
            return
        for _ in range(ADOPT_WAIT_ATTEMPTS):
            if not racy(mtime, stamp_clock_ns()):
                return
            time.sleep(ADOPT_WAIT_S)

    def _sync_with_directory(self, *, repair: bool) -> bool:
        """Compare the view with the directory when it changed (`_directory_unchanged`); True if it was reloaded.

        One listing then says everything: a `.swap` a dead cleaner left is completed when this
        view may (`_complete_dead_swap`); leading segments retention deleted are dropped (every
        one of them: the view is loaded afresh); a segment whose file name now holds another
        file (a cleaner's swap) makes the view load again (with `repair`, the writer lock held,
        as recovery). A directory under the name that is not the one the view opened (the topic
        deleted and made again) is no change of this log: the view must not move into it.
        """
        if self._directory_unchanged() or self._dir_key is None or not self._own_directory():
            return False
        self._strays_possible = True  # another process's close may have left its snapshot at the log end
        listing = self._loader.segment_listing()
        if listing.swap_left_over and self._complete_dead_swap(repair=repair):
            return True
        bases = listing.bases
        if not bases:
            return False
        if self._segments[-1].base_offset < bases[0] and not self._followed_rolls(repair=repair, first=bases[0]):
            self._loader.load(repair=repair)  # retention removed every segment this view knew of
            self._refresh_log_start()
            return True
        while len(self._segments) > 1 and self._segments[0].base_offset < bases[0]:
            self._segments.pop(0).close()
        if self._replaced_segment():
            self._loader.load(repair=repair)
            self._refresh_log_start()
            return True
        self._refresh_log_start()
        return False

    def _own_directory(self) -> bool:
        """Whether the changed directory under the name is the one this view opened: the inode number of the
        stat just taken, then the generation (`LogLoader.owns_directory`), as ext4 reuses freed numbers."""
        return self._dir_key is not None and self._dir_key[1] == self._dir_ino and self._loader.owns_directory()

    def _followed_rolls(self, *, repair: bool, first: int) -> bool:
        """Whether the tail walk, from the view's last segment (rolled and deleted behind it), reached the
        segment `first` retention left: the view then keeps the producer state it holds, where a reload
        would start from the snapshot at the new log start, without the producers expired since."""
        try:
            self._catch_up_on_tail(repair=repair)
        except FileReplacedError:
            return False
        return self._segments[-1].base_offset >= first

    def _replaced_segment(self) -> bool:
        """Whether a file name of one of this view's segments holds another file now, or none (a cleaner's swap)."""
        # Device and inode are enough here though ext4 gives a freed inode number to the next file made:
        # while this view holds a segment's descriptor its inode is not freed, so no other file can have
        # its number; an evicted one (storage/descriptor_cache.py) whose number another file took passes
        # this check, but its next use reopens it by name, where the generation check refuses the other
        # file (FileReplacedError) and the lookup reloads the view (`_fresh_view_on_replace`).
        for seg in self._segments:
            try:
                found = os.stat(seg.log_path)
                identity: tuple[int, int] | None = (found.st_dev, found.st_ino)
            except FileNotFoundError:
                identity = None
            if identity != seg.log.identity:
                return True
        return False

    def _complete_dead_swap(self, *, repair: bool) -> bool:
        """Complete the `.swap` a dead cleaner left, as recovery does; True if the view was loaded afresh.

        A cleaner swaps under the partition's writer lock, and flock dies with its holder: under
        this view's own lock (`repair`) a `.swap` is a crashed cleaner's, and recovery completes it
        now rather than leaving readers to read around it. A reader of a writable store completes it
        too when the lock is free, taking it with the non-blocking probe as `_sync_for_reader` does
        (never waiting, never through this view's FileLock). A read-only view, or a reader that finds
        the lock held (a live cleaner mid-swap, or a writer that will complete it), completes
        nothing: its listing reads the `.swap` in place of the segments it replaces
        (`LogLoader.segment_listing`; docs/reliability-scenarios.md rule 22).
        """
        if repair:
            self._loader.load(repair=True)
        else:
            if self.read_only or self._failed or (self._lock is not None and self._lock.held):
                return False
            with writer_lock_if_free(os.path.join(self.directory, LOCK_FILE)) as free:
                if not free:
                    return False
                try:
                    self._loader.load(repair=True)
                except (KafkaStorageError, OSError) as exc:
                    # The disk refused recovery's writes: read the `.swap` in place, as a read-only view does.
                    _log.warning("%s: cannot complete a dead cleaner's swap (%s); reading it in place", self, exc)
                    self._loader.load(repair=False)
        self._refresh_log_start()
        return True

    def _refresh_log_start(self) -> None:
        """Take up a log start another process's DeleteRecords persisted (the file is read only when it changed)."""
        try:
            # Not inode, mtime and size alone: a DeleteRecords' checkpoint replaced twice in one clock
            # tick may take its first version's inode number back, with the same mtime and size.
            key = change_key(os.path.join(self.directory, LOG_START_CHECKPOINT))
        except FileNotFoundError:
            return
        if key is not None and key == self._start_file:
            return
        self._start_file = key
        try:
            offset = read_log_start_checkpoint(self.directory)
        except (CorruptIndexError, KafkaStorageError) as exc:
            # The view keeps the log start it knew; the next DeleteRecords rewrites the file.
            _log.warning("%s: ignoring its log start checkpoint (%s)", self, exc)
            return
        if offset is not None:
            self._start_floor = max(self._start_floor, offset)

    # ---- appending -----------------------------------------------------------------------------------

    @property
    def _writer_lock(self) -> FileLock:
        """The lock every write holds; a read-only view has none (its writes stop at _check_writable)."""
        if self._lock is None:
            raise ReadOnlyStoreError(f"{self.directory} is open read-only")
        return self._lock

    def _check_writable(self) -> None:
        if self._write_refused:
            raise KafkaStorageError(
                f"partition {self.topic}-{self.partition} cannot be written: {self._write_refused}"
            ) from self._refusal
        if self.read_only:
            raise ReadOnlyStoreError(f"{self.directory} is open read-only")
        if self._failed:
            raise KafkaStorageError(f"partition {self.topic}-{self.partition} refuses writes: {self._failed}")
        if self._loader.corruption is not None:
            raise self._loader.corruption

    def _parse_client_batches(
        self, data: bytes | bytearray | memoryview, trusted: bool = False
    ) -> list[tuple[RecordBatch, int]]:
        """Validate a Produce request's bytes before taking any lock; nothing partial gets in.

        The request is walked by the one batch reader, strictly: a batch cut short here is a
        malformed request, not a torn tail. Returns each batch with its true maxTimestamp
        (the leader corrects a header that understates it, docs/kafka-formats.md §1.2).
        `trusted` skips only the CRC: bytes this process's encoder just built cannot have
        been damaged on a wire, and the CRC is most of the check's cost.
        """
        batches = []
        # A copy of a caller's mutable buffer: the batches must not change under the append
        # (a trusted bytearray is handed over: `append` says why it is not copied).
        if not (trusted and type(data) is bytearray):
            data = bytes(data)
        sole = FileRecords.sole_batch(data, verify_crc=not trusted)
        walk = (
            (sole,)
            if sole is not None
            else FileRecords.in_memory(data).batches(strict=True, legacy=True, verify_crc=not trusted)
        )
        for batch in walk:
            if isinstance(batch, LegacyMessage):
                # In a request, magic 0/1 is corruption like any other bad magic (as it always
                # was here); only on disk is it refused as an unsupported format.
                raise CorruptRecordError(f"unsupported magic {batch.magic}", position=batch.position)
            if batch.size > self.config.max_message_bytes:
                raise RecordTooLargeError(
                    f"batch of {batch.size} bytes exceeds max.message.bytes={self.config.max_message_bytes}"
                )
            if batch.is_control:
                raise InvalidRecordError("control batches can only be written by the transaction coordinator")
            batches.append((batch, batch.validate_framing(trusted)))
            if self.config.compact:
                self._check_keys(batch)
        if not batches:
            raise InvalidRecordError("append of zero batches")
        return batches

    def _check_keys(self, batch: RecordBatch) -> None:
        """A compacted topic refuses records without a key, as Kafka's LogValidator does: the cleaner could
        not keep or drop them by key."""
        if any(record.key is None for record in batch.records()):
            raise InvalidRecordError(
                f"Compacted topic cannot accept message without key in topic partition {self.topic}-{self.partition}."
            )

    def append(
        self,
        data: bytes | bytearray | memoryview,
        *,
        verify_txn: TxnVerifier | None = None,
        sync: bool = True,
        trusted: bool = False,
    ) -> AppendResult:
        """Append a client's RecordBatch v2 bytes (one or more batches); one fdatasync per call when `sync`.

        Offsets are assigned here. A retry of one of a producer's last 5 batches is
        answered with the original offsets and writes nothing. With `sync` the batches are
        durable on return and the high watermark covers them; without it they are in the
        file (they survive a kill -9, not a power loss) and readers do not see them until a
        later sync (`sync()`, a synced append or marker, a roll, close). `trusted`: the bytes
        were built by this process's own encoder, so their CRC is not recomputed; framing and
        the checks against producer state run as for any request. A trusted bytearray is handed
        over for the call: it is stamped with the offsets in place and written without a copy.
        """
        self._check_writable()
        # The batches must not change under the append: a caller's buffer is copied, except a
        # trusted bytearray, which the caller (the producer's sender, its own encoder's batch
        # buffer) hands over for the call and touches again only after it returns; it is then
        # written as it is and stamped in place (`_stamped`), no copy of its bytes at all.
        raw = data if type(data) is bytes or (trusted and type(data) is bytearray) else bytes(data)
        batches = self._parse_client_batches(raw, trusted)
        with self._mutex, self._writer_lock:
            if sync and verify_txn is None and len(batches) == 1 and _os_calls_own():
                quiet = self._quiet_append(raw, *batches[0])
                if quiet is not None:
                    return quiet
            if not self._held_caught_up:  # inside `exclusive` the view is caught up (as in `append_marker`)
                self._catch_up(repair=True)
            self._check_writable()
            self._maybe_expire_producers()
            plan = ProducerAppend(self._state, verify_txn)
            retry = self._retried_group(plan, batches) if len(batches) > 1 else None
            if retry is not None:
                return retry
            stamps: list[tuple[RecordBatch, int, int]] = []  # each batch written, its base offset and max_ts
            size = 0
            written: list[tuple[int, int, int]] = []
            results = []
            next_offset = self._segments[-1].next_offset
            for batch, max_ts in batches:
                dup = _duplicate_of(plan, batch)
                if dup is not None:
                    results.append(BatchAppendResult(dup.first_offset, dup.last_offset, True))
                    continue
                base, last = next_offset, next_offset + batch.last_offset_delta
                _stage_batch(plan, batch, base, last, max_ts)
                written.append((size, last, max_ts))
                stamps.append((batch, base, max_ts))
                size += batch.size
                results.append(BatchAppendResult(base, last, False))
                next_offset = last + 1
            if written:
                self._write(_stamped(raw, stamps, whole=len(stamps) == len(batches)), written, sync=sync)
            plan.commit()
            self._state.end_offset = self._segments[-1].next_offset
            self._maybe_snapshot_active()
        duplicate = results[0].duplicate if len(results) == 1 else all(r.duplicate for r in results)
        return AppendResult(results[0].base_offset, results[-1].last_offset, duplicate, tuple(results))

    def append_requests(
        self, requests: Sequence[bytes | bytearray], *, trusted: bool = False
    ) -> tuple[list[AppendResult], KafkaError | None]:
        """Several Produce requests of one producer appended in order and made durable by ONE
        fdatasync: what `append(data)` of each in turn does, without the fdatasyncs of all but the
        last (issue 26: a producer's 1 MiB batches cost an fdatasync each, most of it a fixed cost).

        Each request is appended as `append(data, sync=False)` appends it (its own checks, a roll
        before it when one is due: a segment still overshoots by one request at most), all under one
        hold of the writer lock, kept through the fdatasync and the HW's publication: no reader sees
        any of it, and no other writer has its tail unsynced, before it is durable (as one append;
        docs/reliability-scenarios.md scenario 90). Returns the results of the requests written, in
        order, and the error of the first one refused (nothing of it written, the ones after it not
        tried), else None. A failed fdatasync raises KafkaStorageError for all of them (rule 9: the
        partition then refuses writes), so none is acknowledged.

        Each request but the last has its writeback started as soon as it is written
        (`start_writeback`, a hint): the disk writes it while the next ones are, and the fdatasync
        then waits for little more than the last.
        """
        self._check_writable()
        results: list[AppendResult] = []
        refused: KafkaError | None = None
        with self._mutex, self._writer_lock:
            for n, data in enumerate(requests):
                active, start = self._segments[-1], self._segments[-1].size
                try:
                    results.append(self.append(data, sync=False, trusted=trusted))
                except KafkaError as exc:
                    refused = exc
                    break
                if n + 1 < len(requests):
                    self._start_writeback(active, start)
            if results:
                self._sync_locked()  # the lock was held since the appends caught up: no catch-up
        return results, refused

    def _start_writeback(self, before: LogSegment, start: int) -> None:
        """Have the disk start on what the last append wrote: from `start` in `before` (the active
        segment then), or from the start of the segment a roll made since (the roll synced `before`)."""
        active = self._segments[-1]
        if active is not before:
            start = 0
        with active.log as fd:
            start_writeback(fd, start, active.size - start)

    def _quiet_append(self, raw: bytes | bytearray, batch: RecordBatch, max_ts: int) -> AppendResult | None:
        """A lone batch's durable append whose looks, write, fdatasync and HW pwrite are one native call
        (the one-record durable send, issue 26); None when the quiet case does not hold, nothing
        written: the caller then appends as always, catching up first. Writer lock held.

        Taken only when the looks `quiet_append` makes (storage/native/src/bindings/append.rs)
        cover everything the catch-up would: the directory key vouched at the view's last look and
        found no next segment then (`_quiet_tail`), so an equal key now says no roll, retention,
        DeleteRecords or cleaner's swap happened since (each creates, renames or unlinks a name); a
        `.log` of the view's length says nobody appended or cut.

        The active segment's `.txnindex` is the third look. What a writer's catch-up does with it is
        drop an entry past the log end (`LogLoader.drop_stale_txn_entries`): an abort's entry is made
        durable before its marker (docs/reliability-scenarios.md rule 19; scenario 89 (c)), and a
        writer that died in between leaves one at the offset this append would take, which would then
        name this batch as the abort's marker and hide that transaction's records from read_committed
        readers. Nothing else in the append depends on the file: readers read it afresh on every
        abort lookup, and every other change of it comes with a change the two looks see (an ABORT's
        marker grows the `.log`; a cut of the log shortens it; a cleaner's swap renames). Only such an
        entry is the change neither look sees: it is appended to a `.txnindex` already there without
        touching the `.log`, and appending to a file moves no directory mtime. So the catch-up that
        made the tail quiet keeps the file's (size, mtime_ns) (`_quiet_tail`, its mtime older than
        the look began: `_note_quiet_tail`), and the call compares the file with it: any append moves
        the size (and the mtime), and an equal pair says nothing was added since. With no file
        (NO_TXNINDEX) there is no look: creating one moves the directory key. The stale-entry check
        cuts such an entry back to the same size and contents, which is the file as the view knew it;
        the size alone is not enough for a file another process both repaired shorter (a rewrite from
        the log, `LogLoader.rewrite_txn_index`) and then grew by a dead writer's entry, which the mtime
        tells. The append must need no roll or producer
        expiry, the active segment's indexes must be checked, and the batch must be no retry and
        not refused (the Python path judges those on the caught-up view). The check against the
        producer's entry (the one every append makes, storage/native/src/producer.rs) runs inside
        the call on the view, before the looks, which then prove the view was the files; the entry
        takes the batch in the call once it is durable, as a replay of it would (a producer with
        no entry yet gets one here, `_record_written`). The rest of the bookkeeping after the write
        is the Python path's own (`LogSegment.wrote`, which writes an index entry falling due,
        `_synced`, `_maybe_snapshot_active`): an index entry is written after the fdatasync rather than before
        it, which no reader or recovery can tell (index files are never synced with the log: a
        crash may lose the entry either way).
        """
        tail = self._quiet_tail
        if tail is None or tail[0] != self._dir_key or not self._vouching_key() or self._loader.reads_swap:
            return None
        key, (txn_size, txn_mtime_ns) = tail
        self._check_writable()
        active = self._segments[-1]
        indexed = active.known_indexed_position()
        if indexed is None or not active.indexes_verified or self._closed:
            return None
        start, base = active.size, active.next_offset
        last = base + batch.last_offset_delta
        if self._roll_due(active, batch.size, max_ts, last) or self._expiry_due(self._clock()):
            return None
        hw_file = self._hw_file.opened()
        if hw_file is None:
            return None
        state = self._state
        entry = state.producers.get(batch.producer_id)  # None too for a batch with no producer id
        # The bytes written: a bytearray is a trusted request handed over (`_stamped`), which
        # `quiet_append` stamps in place as `_stamped` would.
        data = raw if type(raw) is bytearray else bytearray(raw)
        looked = stamp_clock_ns()  # before the look, as `_directory_unchanged` takes it
        with active.log as log_fd, hw_file as hw_fd:
            status, errno = quiet_append(
                self.directory,
                key[0],
                key[1],
                log_fd,
                start,
                active.txn_index.path,
                txn_size,
                txn_mtime_ns,
                data,
                LEADER_EPOCH,
                hw_fd,
                last + 1,  # the HW, encoded by the call (storage/native/src/high_watermark.rs)
                batch,
                entry,
                base,
                max_ts,
            )
        if status == _QUIET_FALLBACK:
            return None
        # The look found the key unchanged: what `_directory_unchanged` records for a trusted key.
        self._dir_key_racy = racy(key[0], looked)
        self._dir_trusted = self._dir_key_fresh = True
        self._linked_log = None
        if status == _QUIET_WRITE_FAILED:
            saved = (active.max_timestamp, active.offset_of_max_timestamp, active.first_batch_timestamp)
            self._undo_partial_write(active, start, base, saved)
            raise KafkaStorageError(f"write failed: {os.strerror(errno) if errno else 'wrote 0 bytes'}")
        active.wrote(start, len(data), [(0, last, max_ts)], indexed)
        self._own_unsynced = True
        if status == _QUIET_SYNC_FAILED:
            failure = KafkaStorageError(f"fsync failed: {os.strerror(errno)}")
            self._sync_failed(failure)
            raise failure
        self._synced(active, published=True)
        if entry is not None:
            state.wrote(entry)  # `quiet_append` recorded the batch in it
        else:
            _record_written(state, batch, base, last, max_ts)
        state.end_offset = active.next_offset
        self._maybe_snapshot_active()
        return AppendResult(base, last, False, (BatchAppendResult(base, last, False),))

    def _retried_group(self, plan: ProducerAppend, batches: list[tuple[RecordBatch, int]]) -> AppendResult | None:
        """The answer to a retried group commit, or None if the request is not one (lock held).

        Called for requests of two batches or more (a lone batch is checked as any batch). A
        producer's sender appends several batches of a partition in one request, with
        consecutive sequences, and an append is all or nothing: when the request's last
        batch is a duplicate, the whole request was appended before, contiguously, and
        nothing may be written. The partition remembers only a producer's last 5 batches
        (Kafka's window); an older batch of the group gets the offsets just before the next
        one's, once the log confirms that batch is there (same producer, epoch and sequence),
        else -1 (appended, offset unknown: Kafka's DUPLICATE_SEQUENCE_NUMBER). Any other
        shape of request is checked batch by batch.
        """
        try:
            if _duplicate_of(plan, batches[0][0]) is None:
                return None  # the usual group commit: its first batch is new, so it is no retry
        except KafkaError:
            pass  # older than the window, or refused: the last batch decides
        if not _consecutive(batches):
            return None
        last = batches[-1][0]
        try:
            if _duplicate_of(plan, last) is None:
                return None
        except KafkaError:
            return None  # not a retry: the batch-by-batch checks say what is wrong with it
        results: list[BatchAppendResult] = []
        next_base = None
        for batch, _ in reversed(batches):
            try:
                dup = _duplicate_of(plan, batch)
            except KafkaError:
                dup = None
            found: tuple[int, int] | None
            if dup is not None:
                found = (dup.first_offset, dup.last_offset)
            elif next_base is not None and next_base > 0:
                found = self._confirmed_at(batch, next_base - 1 - batch.last_offset_delta)
            else:
                found = None
            results.append(BatchAppendResult(*found, True) if found else BatchAppendResult(-1, -1, True))
            next_base = found[0] if found else None
        results.reverse()
        return AppendResult(results[0].base_offset, results[-1].last_offset, True, tuple(results))

    def _confirmed_at(self, batch: RecordBatch, base: int) -> tuple[int, int] | None:
        """(base, last) if the log holds `batch` (same producer, epoch, sequence) at `base`."""
        if base < self._segments[0].base_offset:
            return None
        for found in self.read(base, 1, max_offset=base + 1):
            if (found.base_offset, found.producer_id, found.producer_epoch, found.base_sequence) == (
                base,
                batch.producer_id,
                batch.producer_epoch,
                batch.base_sequence,
            ):
                return base, found.last_offset
        return None

    def append_marker(
        self,
        control_type: ControlType,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int = 0,
        timestamp: int | None = None,
        *,
        sync: bool = True,
    ) -> AppendResult:
        """Write a COMMIT/ABORT marker as the transaction coordinator does (origin COORDINATOR).

        Re-sending the marker that ended the producer's last transaction writes nothing
        (roll-forward after a crash must be repeatable). For an abort that covered data,
        the `.txnindex` entry is made durable *before* the marker: a reader may never see
        the marker without the entry that tells it to skip the aborted data (rule 19 of
        docs/reliability-scenarios.md). A `WriterHold` may have appended and fsynced that entry
        already (`WriterHold.index_aborts`, the fsyncs of a window at once); otherwise it is done
        here. `sync=False` leaves the marker's fdatasync to a later `sync()` (the coordinator syncs
        a transaction's markers together); until then it is below no high watermark.
        """
        self._check_writable()
        with self._mutex, self._writer_lock:
            if not self._held_caught_up:  # inside `exclusive` the view is caught up, and nobody else can write
                self._catch_up(repair=True)
            self._check_writable()
            ts = self._clock() if timestamp is None else timestamp
            offset = self._marker_locked(control_type, producer_id, producer_epoch, coordinator_epoch, ts, sync=sync)
        if offset < 0:
            return AppendResult(-1, -1, True, ())
        return AppendResult(offset, offset, False, (BatchAppendResult(offset, offset, False),))

    def _marker_locked(
        self,
        control_type: ControlType,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        ts: int,
        *,
        sync: bool,
        template: bytes | None = None,
    ) -> int:
        """`append_marker`'s work, writer lock held and caught up: the marker's offset, or -1 when it repeats
        the producer's last one (nothing written). `template`: these very marker's bytes at another offset
        (`marker_template`), stamped here instead of encoded again."""
        marker_key = (control_type, producer_id, producer_epoch, coordinator_epoch, ts)
        planned = self._plan_staged_for(marker_key) or self._plan_marker(*marker_key, template)
        if planned is None:
            self._drop_staged_abort()
            return -1
        plan, marker, segment, entry = planned
        offset = segment.next_offset
        if entry is not None:
            self._index_abort(segment, entry)
        else:
            self._drop_staged_abort()
        self._write(marker, [(0, offset, ts)], segment=segment, sync=sync)
        if entry is not None:
            self._txn_check.note_abort(segment, offset)
        plan.commit()
        self._state.end_offset = offset + 1
        return offset

    def _plan_marker(
        self,
        control_type: ControlType,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        ts: int,
        template: bytes | None = None,
    ) -> _MarkerPlan | None:
        """What a marker appended now would be (lock held, caught up): its staged producer state, its bytes,
        the segment it goes to (rolled first if it must be) and the abort's `.txnindex` entry, or None
        when it repeats the marker that ended the producer's last transaction (nothing to write)."""
        plan = ProducerAppend(self._state)
        if not plan.check_marker(producer_id, producer_epoch, coordinator_epoch):
            return None
        offset = self._segments[-1].next_offset
        completed = plan.stage_marker(producer_id, producer_epoch, control_type, coordinator_epoch, offset, ts)
        if template is None:
            template = marker_template(control_type, producer_id, producer_epoch, coordinator_epoch, ts)
        marker = with_base_offset(template, offset)
        segment = self._segment_for_write(len(marker), ts, offset)
        entry = None
        if completed is not None and completed.is_aborted:
            # The partition's producer states, not the plan's staged ones (nothing is committed yet).
            lso = self._state.last_stable_offset_for_abort(producer_id, offset)
            entry = AbortedTxn(producer_id, completed.first_offset, offset, lso)
        return plan, marker, segment, entry

    def _index_abort(self, segment: LogSegment, entry: AbortedTxn) -> None:
        """Make the abort's `.txnindex` entry durable before its marker is written (lock held).

        Nothing to do when a hold staged this very entry and its fsync ended. Otherwise the entry
        is appended and fsynced now; if that fsync fails the entry is taken out again (its marker
        will not follow it) and the error is raised.
        """
        if not (self._staged_abort == (segment, entry) and self._staged_abort_durable):
            self._drop_staged_abort()
            self._stage_abort_entry(segment, entry)
            self._flush_staged_abort()
        self._staged_abort, self._staged_abort_durable = None, False  # the marker follows: nothing left to drop
        self._staged_plan = None

    def _stage_abort_entry(self, segment: LogSegment, entry: AbortedTxn) -> None:
        """Append the entry without fsync (lock held); an entry a dead writer left at its offset goes first."""
        segment.txn_index.truncate_to(entry.last_offset)
        segment.txn_index.append(entry)
        self._staged_abort, self._staged_abort_durable = (segment, entry), False

    def _flush_staged_abort(self) -> None:
        """fsync the staged entry's `.txnindex` (lock held); on failure the entry is dropped and the error raised."""
        assert self._staged_abort is not None
        try:
            self._staged_abort[0].txn_index.flush()
        except KafkaStorageError:
            self._drop_staged_abort()
            raise
        self._staged_abort_durable = True

    def _stage_abort(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int, ts: int, template: bytes | None = None
    ) -> LogSegment | None:
        """Inside `exclusive`: append, without fsync, the entry the ABORT marker `append_marker` would
        write next needs; returns the segment whose `.txnindex` must be fsynced (then `_staged_abort_synced`),
        or None when that marker needs no entry (it covers no data, or repeats the last one). `template`:
        as for `_marker_locked`."""
        self._drop_staged_abort()
        self._check_writable()
        marker_key = (ControlType.ABORT, producer_id, producer_epoch, coordinator_epoch, ts)
        planned = self._plan_marker(*marker_key, template)
        if planned is None or planned[3] is None:
            return None
        self._stage_abort_entry(planned[2], planned[3])
        self._staged_plan = (self._plan_origin(marker_key), planned)
        return planned[2]

    def _plan_origin(self, marker_key: tuple[object, ...]) -> tuple[object, ...]:
        """What a marker's plan depends on (lock held): its arguments, the producer states and the offset it
        takes. Producer states change only by a write (which moves the offset) or a reload (a new manager)."""
        active = self._segments[-1]
        return (marker_key, self._state, active, active.next_offset)

    def _plan_staged_for(self, marker_key: tuple[object, ...]) -> _MarkerPlan | None:
        """The plan `_stage_abort` made for this very marker, when nothing was written or reloaded since: an
        abort's marker is then planned once, for its entry and for itself (issue 26)."""
        staged = self._staged_plan
        if staged is None or self._staged_abort is None:
            return None
        (key, state, active, offset), now = staged[0], self._plan_origin(marker_key)
        if key != now[0] or state is not now[1] or active is not now[2] or offset != now[3]:
            return None
        return staged[1]

    def _staged_abort_synced(self, error: BaseException | None) -> None:
        """The staged entry's fsync ended (lock held): durable, so its marker may follow; or failed, so it goes."""
        if error is None:
            self._staged_abort_durable = self._staged_abort is not None
        else:
            self._drop_staged_abort()

    def _drop_staged_abort(self) -> None:
        """Take out an entry staged for a marker that was not written after it (lock held)."""
        staged, self._staged_abort, self._staged_abort_durable = self._staged_abort, None, False
        self._staged_plan = None
        if staged is not None:
            segment, entry = staged
            segment.txn_index.truncate_to(entry.last_offset)

    def exclusive(self) -> _ExclusiveSection:
        """Hold this partition's writer lock across several steps, caught up on other writers.

        The transaction coordinator keeps its state in a partition of `__transaction_state`
        and makes each state change under that partition's lock (docs/DESIGN.md §3). Appends
        made while holding it re-enter the lock. `with log.exclusive() as held:` (`held` is the log).
        """
        return _ExclusiveSection(self)

    def _hold_token(self) -> object | None:
        """The token of the `exclusive` section the calling thread is in (`EntryFile.trust_while`), or None."""
        hold = self._hold
        return hold[1] if hold is not None and hold[0] == threading.get_ident() else None

    def _segment_for_write(self, incoming: int, max_timestamp: int, last_offset: int) -> LogSegment:
        """The active segment, rolled first if the append would overflow it (docs/kafka-formats.md §3.2)."""
        if self._roll_due(self._segments[-1], incoming, max_timestamp, last_offset):
            self._roll()
        return self._segments[-1]

    def _roll_due(self, active: LogSegment, incoming: int, max_timestamp: int, last_offset: int) -> bool:
        """Whether an append of `incoming` bytes ending at `last_offset` must roll `active` first (not if empty)."""
        if active.size == 0:
            return False
        too_big = active.size + incoming > self.config.segment_bytes
        first_ts = active.first_batch_timestamp
        too_old = first_ts >= 0 and max_timestamp - first_ts > self.config.max_segment_ms
        overflow = last_offset - active.base_offset > MAX_RELATIVE_OFFSET
        return too_big or too_old or overflow

    def _write(
        self,
        chunk: bytes | bytearray,
        written: list[tuple[int, int, int]],
        segment: LogSegment | None = None,
        *,
        sync: bool = True,
    ) -> None:
        """Write one chunk and (if `sync`) fdatasync it. A failed write is cut back; a failed fsync is fatal."""
        if segment is None:
            max_ts = written[0][2] if len(written) == 1 else max(w[2] for w in written)
            segment = self._segment_for_write(len(chunk), max_ts, written[-1][1])
        before_size, before_next = segment.size, segment.next_offset
        saved = (segment.max_timestamp, segment.offset_of_max_timestamp, segment.first_batch_timestamp)
        try:
            segment.append(chunk, written)
        except KafkaStorageError:
            self._undo_partial_write(segment, before_size, before_next, saved)
            raise
        self._own_unsynced = True
        self._wrote_while_held = self._held_caught_up
        self._check_not_deleted(segment)
        if sync:
            self._make_durable(segment)

    def _check_not_deleted(self, segment: LogSegment) -> None:
        """Refuse to acknowledge bytes written into a file nobody can open any more (lock held).

        A store directory deleted under an open writer (`rm -rf`, `topics delete` from another
        process) leaves this view's descriptors on unlinked files: writes to them succeed and
        reach nobody. The partition then refuses every write, as Kafka takes a log dir offline
        (KafkaStorageException): docs/reliability-scenarios.md scenario 71. The proof is one fstat
        per append call: the writer's catch-up one, taken under this lock hold just before the
        write, when the write went to the segment it looked at (one stat fewer per durable send,
        issue 26); else one of its own after the write (a roll's new segment, a marker). A deletion
        between that look and the write is one just after it: no look at any moment can see it.
        """
        proof, self._linked_log = self._linked_log, None
        if proof is segment:
            return
        try:
            with segment.log as fd:  # an evicted descriptor's reopen by path fails once the file is gone
                links = os.fstat(fd).st_nlink
        except OSError as exc:
            links, why = 0, exc.strerror
        except KafkaStorageError as exc:
            links, why = 0, str(exc)
        else:
            why = "its file was deleted"
        if links == 0:
            self._failed = f"{segment.log_path} is gone ({why}): the store or topic was deleted while open"
            raise KafkaStorageError(f"partition {self.topic}-{self.partition} refuses writes: {self._failed}")

    def _make_durable(self, segment: LogSegment) -> None:
        """fdatasync `segment` (the active one, or the one a roll seals) and publish HW = its end; lock held.

        Every segment before it was synced when it was sealed, so its end is the durable end.
        A failed fsync is fatal: what reached the disk is unknown, and it is never retried.
        """
        try:
            segment.sync()
        except KafkaStorageError as exc:
            self._sync_failed(exc)
            raise
        self._synced(segment)

    def _sync_failed(self, exc: KafkaStorageError) -> None:
        self._failed = f"fsync failed ({exc}); reopen the store to recover"

    def _synced(self, segment: LogSegment, *, published: bool = False) -> None:
        """After `segment`'s fdatasync (lock held): its end is the durable end, and the HW says so
        (`published`: the quiet append's native call wrote the HW file already)."""
        self._durable = segment.next_offset
        self._own_unsynced = False
        if not published:
            self._hw_file.publish(self._durable)

    def sync(self) -> int:
        """Make everything appended so far durable (other processes' appends included) and return the new HW.

        Under the writer lock, caught up: one fdatasync of the active segment (a roll already
        synced the sealed ones), skipped when the HW already covers the log end, then the HW
        file says the log end. The transaction coordinator calls this for every data
        partition of a transaction before writing PREPARE_COMMIT.
        """
        self._check_writable()
        with self._mutex, self._writer_lock:
            self._catch_up(repair=True)
            self._check_writable()
            return self._sync_locked()

    def _sync_locked(self) -> int:
        unsynced = self._unsynced_segment()
        if unsynced is not None:
            self._make_durable(unsynced)
        return self._segments[-1].next_offset

    def _unsynced_segment(self) -> LogSegment | None:
        """`sync`'s question (lock held, caught up): the segment to fdatasync, or None when the log is durable.

        Only the active segment can be unsynced (a roll syncs what it seals); the HW file (another
        process's sync) or this view's own syncs may already cover its end. When they do, this
        view takes the log end as durable now.
        """
        active = self._segments[-1]
        end = active.next_offset
        if self._durable < end and (self._wrote_while_held or self._own_unsynced):
            # Written under the lock held since: nobody else can have synced it. Or bytes this view wrote
            # unsynced (a transaction's data, before its commit): another process's sync may have covered
            # them, which costs one fdatasync too many, never a missing one; a wide commit saves a read of
            # the HW file per partition (issue 26).
            return active
        stored = self._hw_file.read()
        if max(self._durable, -1 if stored is None else stored) < end:
            return active
        self._durable = max(self._durable, end)
        self._own_unsynced = False
        return None

    def _recover_high_watermark(self) -> None:
        """At open, lock held: sync what a dead writer left unsynced and publish HW = log end.

        Skipped when the HW file already says the log end (a clean close, or nothing since).
        """
        active = self._segments[-1]
        if self._hw_file.read() != active.next_offset:
            self._make_durable(active)
        self._durable = active.next_offset

    def _undo_partial_write(self, segment: LogSegment, size: int, next_offset: int, saved: tuple) -> None:
        try:
            segment.cut_log(size)
        except (OSError, KafkaStorageError):  # the latter: its evicted descriptor could not be reopened
            self._failed = "could not cut a partial write"
        segment.size, segment.next_offset = size, next_offset
        segment.max_timestamp, segment.offset_of_max_timestamp, segment.first_batch_timestamp = saved
        segment.offset_index.truncate_to(next_offset)
        segment.time_index.truncate_to(next_offset)
        segment.txn_index.truncate_to(next_offset)  # an abort's entry goes in before its marker

    def _maybe_snapshot_active(self) -> None:
        """Snapshot producer state once the active segment grew SNAPSHOT_INTERVAL_BYTES past the last one (lock held).

        Bounds what recovery after a kill -9 replays, whatever the segment's size (docs/DESIGN.md
        §3, "Recovery from a recent durable point"); the older mid-segment snapshot goes. Taken only
        where the log is durable (after a synced append), so a power loss cannot leave it past
        the log end with the older one gone. The data is written already, so a failure to
        snapshot is logged, not raised: the next open replays more.
        """
        active = self._segments[-1]
        base, position = self._snapshot_mark
        if base != active.base_offset:
            position = 0  # rolled since: the roll snapshotted at this segment's base
        self._snapshot_mark = (active.base_offset, position)
        if active.size - position < SNAPSHOT_INTERVAL_BYTES or self._durable < active.next_offset:
            return
        if self._loader.corruption is not None:
            return  # nothing derived is written from a corrupt log (as close does)
        self._snapshot_mark = (active.base_offset, active.size)
        try:
            self._loader.snapshot()
            self._clean_snapshots(keep_latest=True)
        except (KafkaStorageError, OSError) as exc:
            self._strays_possible = True
            _log.warning("%s: no snapshot in the active segment (%s); recovery after a crash replays more", self, exc)
            return
        self._strays_possible = True  # a snapshot off the segment bases: the next roll removes it

    def _roll(self) -> None:
        """Seal the active segment, snapshot producer state at the new base, start a new segment."""
        active = self._segments[-1]
        self._make_durable(active)  # a sealed segment is durable: only the active one may hold unsynced bytes
        active.seal()
        base = active.next_offset
        self._state.end_offset = base
        self._loader.snapshot()  # the state at the new base: that segment's rebuild starts there
        rolled = LogSegment.create(self.directory, base, index_interval_bytes=self.config.index_interval_bytes)
        rolled.txn_index.vouch_absence_by(self._absence_key)
        rolled.txn_index.trust_while(self._hold_token)
        self._segments.append(rolled)
        self._txn_check.expect(rolled, 0, base)
        if self._strays_possible:
            self._clean_snapshots(keep_latest=False)
            self._strays_possible = False
        self._enforce_retention_locked(self._clock())
        if self.config.compact:
            self._compact_after_roll()
        self._adopt_directory()  # the roll's own files: the next look need not list them

    def roll(self) -> None:
        """Force a new segment (as `segment.ms` would); a no-op on an empty active segment."""
        self._check_writable()
        with self._mutex, self._writer_lock:
            self._catch_up(repair=True)
            if self._segments[-1].size > 0:
                self._roll()

    def _maybe_expire_producers(self) -> None:
        now = self._clock()
        if self._expiry_due(now):
            self._state.expire(now)
            self._last_expiry_check = now

    def _expiry_due(self, now: int) -> bool:
        return now - self._last_expiry_check >= min(EXPIRY_CHECK_INTERVAL_MS, self.config.producer_id_expiration_ms)

    # ---- reading --------------------------------------------------------------------------------------------

    def read(self, start_offset: int, max_bytes: int = 1 << 20, *, max_offset: int | None = None) -> list[RecordBatch]:
        """Whole, CRC-valid batches holding offsets ≥ start_offset, about max_bytes of them.

        At least one batch is returned when one is available, however large (Kafka's
        rule, so a big batch cannot stall a reader). `max_offset` (exclusive) caps the
        read, e.g. at the last stable offset; batches starting at or past it are left out.
        May rebuild a sealed segment's index files (see `_indexes_checked_repairing`).
        """
        with self._mutex:
            self._refresh_segment_list()
            start = self._log_start()
            end = self._segments[-1].next_offset
            if start_offset < start or start_offset > end:
                raise OffsetOutOfRangeError(
                    f"offset {start_offset} is outside [{start}, {end}] of {self.topic}-{self.partition}"
                )
            limit = end if max_offset is None else min(max_offset, end)
            out: list[RecordBatch] = []
            try:
                self._read_into_retrying(out, start_offset, max_bytes, limit)
            except CorruptRecordError:
                # Damage met after some batches were read: they are returned, and the next
                # read, which starts at the damaged batch, raises (docs/reliability-scenarios.md rule 17).
                if not out:
                    raise
            return out

    def _read_into_retrying(self, out: list[RecordBatch], start_offset: int, max_bytes: int, limit: int) -> None:
        """`_read_into`, started again from the same offset on a fresh view when a cleaner replaced a
        segment file under this view (its descriptor was evicted, and the name now holds the cleaned one)."""
        for _ in range(RELOAD_ON_SWAP_ATTEMPTS):
            try:
                self._read_into(out, start_offset, max_bytes, limit)
                return
            except FileReplacedError:
                out.clear()
                self._loader.load(repair=False)
                self._dir_key = None
        self._read_into(out, start_offset, max_bytes, limit)

    def _read_into(self, out: list[RecordBatch], start_offset: int, max_bytes: int, limit: int) -> None:
        """Append to `out` the whole, CRC-checked batches from the one holding `start_offset`, about max_bytes of them.

        The batch holding `start_offset` is found by hopping over batch headers (no CRC: a
        damaged batch passed over does not make later offsets unreadable); from there only
        about the bytes wanted are read, not a whole scan chunk.
        """
        total = 0
        segments = self._segments
        for i in range(segment_index_for(segments, start_offset), len(segments)):  # no copy of the list's tail
            seg = segments[i]
            if seg.base_offset >= limit or (total >= max_bytes and out):
                return
            seg_end = readable_end(segments, seg)
            if seg.base_offset <= start_offset:
                first = self._indexes_checked_repairing(seg).locate_batch(start_offset, seg_end)
                if first is None:
                    continue
                position = first.position
            else:
                position = 0
            scan_end = _scan_end(seg, position, seg_end, max_bytes - total)
            for _, batch in seg.iter_batches(position, scan_end, strict=scan_end == seg_end):
                if batch.base_offset >= limit:
                    return
                if batch.last_offset < start_offset:
                    continue
                if out and total + batch.size > max_bytes:
                    return
                out.append(batch)
                total += batch.size
            if scan_end < seg_end:
                return  # the byte budget ended inside this segment

    @_fresh_view_on_replace
    def extents(self, start_offset: int, end_offset: int) -> list[SegmentExtent]:
        """Where the batches holding offsets [start_offset, end_offset) lie, one extent per segment.

        For readers in other processes (docs/DESIGN.md §8): each extent starts at the offset
        index's position for `start_offset` (its indexes checked first, as any lookup
        here is) and ends where this view's whole batches end, so the reader needs no
        recovery or index of its own. Batches outside the offsets may lie at either end.
        Each names the offsets it holds and the file it was planned on (storage/extent.py),
        so a reader can tell a segment a cleaning replaced since and plan those offsets again.
        May rebuild a sealed segment's index files (see `_indexes_checked_repairing`).
        """
        from storage.extent import plan_extent  # a planned reader's: a plain read never loads it

        with self._mutex:
            self._refresh_segment_list()
            if end_offset <= start_offset:
                return []
            out: list[SegmentExtent] = []
            segments = self._segments
            for i in range(segment_index_for(segments, start_offset), len(segments)):
                seg = segments[i]
                if seg.base_offset >= end_offset:
                    break
                position = (
                    self._indexes_checked_repairing(seg).read_position(start_offset)
                    if seg.base_offset < start_offset
                    else 0
                )
                following = segments[i + 1].base_offset if i + 1 < len(segments) else end_offset
                offsets = max(start_offset, seg.base_offset), min(end_offset, following)
                out.append(plan_extent(seg, position, readable_end(segments, seg), *offsets))
            return out

    @_fresh_view_on_replace
    def aborted_transactions(self, start_offset: int, end_offset: int) -> list[AbortedTxn]:
        """Aborted transactions with data in [start_offset, end_offset): what a read_committed
        reader must skip there (docs/kafka-formats.md §5.6).

        Walks the `.txnindex` of the segment holding `start_offset` and the ones after it,
        stopping at the first entry whose recorded LSO is ≥ `end_offset`: no later abort can
        cover the range. Each entry's data runs from `first_offset` to its ABORT marker at
        `last_offset`, and only batches of its `producer_id` in that span are aborted.
        Each `.txnindex` is checked against the log first and, in a writable view, rewritten
        if it disagrees (see `_aborts_checked_repairing`).
        """
        with self._mutex:
            self._refresh_segment_list()
            return self._aborted_in(start_offset, end_offset)

    def _aborted_in(self, start_offset: int, end_offset: int) -> list[AbortedTxn]:
        """Kafka's collectAbortedTransactions: the segments from the one holding `start_offset`, until an
        entry proves the search complete (`collect_aborted`), skipping the later ones that hold no abort."""
        found: list[AbortedTxn] = []
        for seg in self._abort_lookup_segments(start_offset, end_offset):
            entries, complete = collect_aborted(self._aborts_checked_repairing(seg), start_offset, end_offset)
            found.extend(entries)
            if complete:
                break
        return found

    def _abort_lookup_segments(self, start_offset: int, end_offset: int) -> list[LogSegment]:
        """The segments whose `.txnindex` may hold an abort overlapping [start_offset, end_offset), in order.

        Those the range touches, then those after it that may index an abort: a transaction
        with data in the range may have its ABORT marker (and so its entry) in any later
        segment, so Kafka walks on until an entry's LSO proves nothing is left. A later
        segment this view knows holds no ABORT marker (`TxnIndexCheck.known_count` 0: counted
        by a replay, an append or the count checkpoint) can index nothing, and its `.txnindex`
        is not opened: with no aborts after the range the lookup costs O(segments touched).
        """
        segments = self._segments
        first = segment_index_for(segments, start_offset)
        after = first
        while after < len(segments) and segments[after].base_offset < end_offset:
            after += 1
        out = segments[first:after]
        later = self._segments_with_aborts()
        for i in later[bisect_left(later, after) :]:
            if self._txn_check.known_count(segments[i]) != 0:
                out.append(segments[i])
        return out

    def _segments_with_aborts(self) -> list[int]:
        """Indexes in the view of the segments whose count of ABORT markers is not known to be 0.

        Worked out again only when the view's segments changed (the list's generation moved: one
        integer compared, whatever the segment count); a count that became 0 since is skipped by
        the caller, and the active segment, whose count grows, is always listed.
        """
        if self._aborts_cache_key != self._segments.generation:
            self._aborts_cache_key = self._segments.generation
            self._aborts_cache = [
                i for i, seg in enumerate(self._segments[:-1]) if self._txn_check.known_count(seg) != 0
            ]
            self._aborts_cache.append(len(self._segments) - 1)
        return self._aborts_cache

    # ---- lookups that may repair derived files ---------------------------------------------------

    def _indexes_checked_repairing(self, seg: LogSegment) -> LogSegment:
        """`seg`, its indexes given their full check before a lookup trusts them: may rebuild index files.

        Opening checks sealed segments in constant time only; the first lookup in one runs the
        full check. If that fails, a writable view rebuilds the segment's three indexes from its
        batches under the writer lock; a read-only view stops trusting them instead (its lookups
        then scan the segment), so the damage never changes what a reader sees.
        """
        if seg.indexes_verified or self._full_index_check_passes(seg):
            return seg
        if self.read_only:
            if not self._passes_once_caught_up(seg):
                self._loader.repair_indexes(seg, repair=False)
        else:
            with self._writer_lock:
                if not self._passes_once_caught_up(seg):
                    self._loader.repair_indexes(seg, repair=True)
        return seg

    @staticmethod
    def _full_index_check_passes(seg: LogSegment) -> bool:
        try:
            seg.full_index_check()
        except CorruptIndexError:
            return False
        seg.indexes_verified = True
        return True

    def _passes_once_caught_up(self, seg: LogSegment) -> bool:
        """Whether a failed index check of this view's last segment was only this view being behind.

        A writer may append (and index) between this view's catch-up and its check: the index
        then points past what the view has seen, which is no damage. Rebuilding from the file
        would also move the segment's end past the view's producer state, and the next
        catch-up would put the end back (a log end going backwards, then read(end) out of
        range). So catch up first (holding the lock in a writable view, so the view then is
        the file) and check again; only a second failure is damage. A catch-up that reloaded
        the view (a cleaner's swap) closed `seg`: FileReplacedError, and the lookup starts again.
        """
        if seg is not self._segments[-1]:
            return False  # a sealed segment in this view is whole: nothing was behind
        self._catch_up(repair=not self.read_only)
        if seg not in self._segments:  # the view was reloaded under the lookup: `seg` is closed, start again
            raise FileReplacedError(f"{seg.log_path}: this view was reloaded after a cleaner's swap")
        return self._full_index_check_passes(seg)

    def _batch_at_repairing(self, offset: int) -> RecordBatch | None:
        """The batch holding `offset`, found through its segment's offset index (which may be rebuilt first)."""
        seg = self._segments[segment_index_for(self._segments, offset)]
        return self._indexes_checked_repairing(seg).batch_at(offset, readable_end(self._segments, seg))

    def _aborts_checked_repairing(self, seg: LogSegment) -> list[AbortedTxn]:
        """The segment's aborted transactions, its `.txnindex` checked against the log first: may rewrite it.

        Entries not yet checked by this view are checked against the batches they name (see
        txnindex_check.py). On a mismatch, or when recovery's replay without the lock found
        one, a writable view rewrites the `.txnindex` from the log under the writer lock; a
        view that may not write reads a replayed list kept up as the segment grows.
        """
        replay = self._txn_check.replayed(seg)
        if replay is not None:
            if self.read_only or self._failed:
                return replay.advance(seg, readable_end(self._segments, seg))
            return self._rebuild_txn_index(seg)  # found by a replay without the lock: fix the file
        self._indexes_checked_repairing(seg)
        lost = self._txn_check.entries_lost(seg)
        if lost is None:  # what the index must hold is unknown here: the markers tell
            try:
                lost = not self._txn_check.matches_replay(seg, self._replay_aborts(seg))
            except CorruptRecordError:
                lost = False  # markers past damaged bytes cannot be read: the index is the best word left
        if lost:
            return self._rebuild_txn_index(seg)
        if (
            self._txn_check.has_unchecked(seg)
            and self._txn_check.first_mismatch(
                seg,
                active=seg is self._segments[-1],
                log_start=self._segments[0].base_offset,
                batch_at=self._batch_at_repairing,
            )
            is not None
        ):
            return self._rebuild_txn_index(seg)
        return seg.txn_index.entries()

    def _replay_aborts(self, seg: LogSegment) -> list[AbortedTxn]:
        """The aborts `seg`'s ABORT markers call for, from a scan of its batches (the truth the index caches)."""
        return AbortReplay(self._loader.state_at_segment_start(seg)).advance(seg, readable_end(self._segments, seg))

    def _rebuild_txn_index(self, seg: LogSegment) -> list[AbortedTxn]:
        """Replace a `.txnindex` that disagrees with the log by recovery's replay of the segment.

        A writable view rewrites the file under the lock, caught up first so the replay also
        covers what other writers appended; a read-only view (or one whose fsync failed) may
        not write, so it keeps the replayed list for its own reads.
        """
        if self.read_only or self._failed:
            replay = self._txn_check.replace_with_replay(seg, self._loader.state_at_segment_start(seg))
            return replay.advance(seg, readable_end(self._segments, seg))
        with self._writer_lock:
            self._catch_up(repair=True)
            if seg not in self._segments:  # the view was reloaded meanwhile: check the fresh segment
                fresh = [s for s in self._segments if s.base_offset == seg.base_offset]
                return self._aborts_checked_repairing(fresh[0]) if fresh else []
            self._loader.rewrite_txn_index(seg)
        return seg.txn_index.entries()

    @_fresh_view_on_replace
    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """First offset whose record timestamp is ≥ `timestamp` (Kafka's ListOffsets), or None.

        May rebuild a sealed segment's index files (see `_indexes_checked_repairing`).
        """
        with self._mutex:
            self._refresh_segment_list()
            start = self._log_start()
            for seg in self._segments:
                if seg.size == 0 and seg is self._segments[-1]:
                    continue
                # No segment is skipped on the time index's word alone: a time index cut short
                # would then hide records. The index only picks where in a segment to start.
                self._indexes_checked_repairing(seg)
                indexed_offset = seg.time_index.lookup(timestamp)[1] if seg.indexes_trusted else seg.base_offset
                end = readable_end(self._segments, seg)
                for header in seg.headers(seg.read_position(indexed_offset), end):
                    if header.max_timestamp < timestamp:
                        continue  # passed over on its header: not CRC-checked (docs/reliability-scenarios.md rule 17)
                    batch = seg.records.batch_at(header.position, end)
                    if batch is None or batch.is_control:
                        continue
                    for record in batch.records():
                        if record.timestamp >= timestamp and record.offset >= start:  # none below the log start
                            return record.offset
            return None

    @_fresh_view_on_replace
    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp (ListOffsets MAX_TIMESTAMP), or None if empty.

        Kafka's UnifiedLog rule: the first segment with the largest indexed timestamp, in it the
        first batch with that max timestamp, in that batch the first record carrying it.
        May rebuild a sealed segment's index files (see `_indexes_checked_repairing`).
        """
        with self._mutex:
            self._refresh_segment_list()
            candidates = [self._indexes_checked_repairing(seg) for seg in self._segments if seg.size > 0]
            if not candidates:
                return None
            best = max(candidates, key=lambda seg: seg.largest_timestamp())  # the first of equals, as Scala's maxBy
            largest = best.largest_timestamp()
            end = readable_end(self._segments, best)
            for header in best.headers(0, end):
                if header.max_timestamp != largest:
                    continue
                batch = best.records.batch_at(header.position, end)
                for record in batch.records() if batch is not None else ():
                    if record.timestamp == largest:
                        return record.offset, largest
            return None

    # ---- compaction (storage/log_cleaner.py) -------------------------------------------------------------

    def compact(
        self,
        *,
        force: bool = False,
        now: int | None = None,
        dedupe_buffer_size: int | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> CleanerStats | None:
        """Clean the partition as Kafka's log cleaner does, under the writer lock; None when nothing was done.

        Nothing is done when cleanup.policy has no `compact`, when nothing is cleanable, or
        (without `force`) when the dirty ratio is not above min.cleanable.dirty.ratio and no
        dirty record is past max.compaction.lag.ms. `now` is the cleaner's clock (ms; delete
        horizons and the compaction lags use it), `dedupe_buffer_size` Kafka's
        log.cleaner.dedupe.buffer.size (a smaller one makes more passes), `progress(bytes done,
        bytes to do)` is called after each segment recopied (each pass counts from 0 again).
        """
        from storage.offset_map import DEFAULT_DEDUPE_BUFFER_SIZE, cleaner_buffer_size

        self._check_writable()
        if not self.config.compact:
            return None
        with self._mutex, self._writer_lock:
            self._catch_up(repair=True)
            self._check_writable()
            return self._compact_locked(
                force=force,
                now=self._clock() if now is None else now,
                memory=cleaner_buffer_size(
                    DEFAULT_DEDUPE_BUFFER_SIZE if dedupe_buffer_size is None else dedupe_buffer_size
                ),
                progress=progress,
            )

    def _compact_after_roll(self) -> None:
        """The automatic trigger: after a roll of a compacted topic, clean if it is due (lock held).

        A cleaning that fails leaves the log as it was (the swap is crash-safe) and does not fail
        the append that rolled: it is logged, as Kafka's cleaner logs and skips a partition.
        """
        from storage.offset_map import cleaner_buffer_size

        try:
            self._compact_locked(force=False, now=self._clock(), memory=cleaner_buffer_size(), progress=None)
        except (KafkaError, OSError) as exc:
            _log.warning("%s: compaction after a roll failed (%s); the next roll tries again", self, exc)

    def _cleanable(self, now: int) -> Cleanable:
        from storage.log_cleaner import cleanable_range, read_cleaner_checkpoint

        root = os.path.dirname(os.path.abspath(self.directory))
        return cleanable_range(
            self._segments,
            self.config,
            read_cleaner_checkpoint(root, self.topic, self.partition),
            self._log_start(),
            self._state.first_unstable_offset(),
            self._high_watermark(),
            now,
        )

    def _compact_locked(
        self, *, force: bool, now: int, memory: int, progress: Callable[[int, int], None] | None
    ) -> CleanerStats | None:
        from storage.log_cleaner import CleanerStats, clean_pass
        from storage.offset_map import OffsetMap

        started = time.monotonic()
        cleanable = self._cleanable(now)
        if cleanable.empty or not (force or cleanable.due(self.config)):
            return None
        self._check_transactions_known()  # the LSO bounds the cleaning: it must be known
        segments_before = len(self._segments)
        offset_map = OffsetMap(memory)
        first_dirty, passes = cleanable.first_dirty, 0
        totals = [0, 0, 0, 0]
        while first_dirty < cleanable.first_uncleanable:
            plan = self._pass_plan(first_dirty, cleanable.first_uncleanable, now)
            end, counters = clean_pass(plan, offset_map, self._swapped_in, progress)
            passes += 1
            for i, value in enumerate(
                (counters.bytes_read, counters.bytes_written, counters.records_read, counters.records_retained)
            ):
                totals[i] += value
            first_dirty = end
        # The `.txnindex` counts of the cleaned segments, for the next open (see LogLoader.snapshot).
        write_txn_counts(self.directory, self._segments, self._txn_check)
        self._adopt_directory()
        return CleanerStats(
            self.topic,
            self.partition,
            cleanable.first_dirty,
            first_dirty,
            totals[0],
            totals[1],
            totals[2],
            totals[3],
            segments_before,
            len(self._segments),
            passes,
            time.monotonic() - started,
        )

    def _pass_plan(self, first_dirty: int, first_uncleanable: int, now: int) -> PassPlan:
        from storage.log_cleaner import PassPlan

        last_records = {
            pid: (entry.batches[-1].last_offset if entry.batches else None, entry.epoch)
            for pid, entry in self._state.producers.items()
        }
        return PassPlan(
            directory=self.directory,
            root=os.path.dirname(os.path.abspath(self.directory)),
            topic=self.topic,
            partition=self.partition,
            segments=list(self._segments),
            config=self.config,
            first_dirty=first_dirty,
            first_uncleanable=first_uncleanable,
            now=now,
            last_records=last_records,
            aborted=self._aborted_in,
            readable_end=lambda seg: readable_end(self._segments, seg),
        )

    def _swapped_in(self, replaced: list[LogSegment], base: int) -> None:
        """Put the cleaned segment in this view where the group it replaced was (lock held)."""
        at = self._segments.index(replaced[0])
        following = self._segments[at + len(replaced)]
        for seg in replaced:
            seg.close()
        cleaned = self._loader.open_segment(base, writable=True)
        cleaned.size, cleaned.next_offset = cleaned.file_size(), following.base_offset
        self._segments[at : at + len(replaced)] = [cleaned]
        self._txn_check.mark_rebuilt(cleaned)  # its `.txnindex` was written with it, from the same batches

    # ---- retention and snapshots -------------------------------------------------------------------------

    def enforce_retention(self) -> int:
        """Delete whole sealed segments past retention.ms / retention.bytes; returns how many."""
        self._check_writable()
        with self._mutex, self._writer_lock:
            self._catch_up(repair=True)
            return self._enforce_retention_locked(self._clock())

    def _enforce_retention_locked(self, now: int) -> int:
        self._refresh_log_start()
        doomed = max(
            # Time and size retention only where cleanup.policy has delete (Kafka's rule); the log
            # start DeleteRecords moved applies to every policy.
            segments_past_retention(self._segments, self.config, now) if self.config.delete else [],
            segments_below(self._segments, self._log_start()),
            key=len,
        )
        if not doomed:
            return 0
        # The counts go before the snapshot retention takes (see LogLoader.snapshot).
        write_txn_counts(self.directory, self._segments[len(doomed) :], self._txn_check)
        delete_segments(self.directory, doomed, self._segments[len(doomed)].base_offset, self._state)
        self._strays_possible = True  # delete_segments took one at the log end
        del self._segments[: len(doomed)]
        self._adopt_directory()
        return len(doomed)

    def delete_records(self, offset: int) -> int:
        """Kafka's DeleteRecords: move the log start up to `offset`; returns the log start after it.

        The new log start is persisted first (LOG_START_CHECKPOINT), then the whole segments
        below it are deleted as retention deletes them; a segment holding it stays, its
        offsets below it no longer readable. An offset at or below the log start changes
        nothing; one past the high watermark is refused (OffsetOutOfRangeError), as Kafka does.
        """
        self._check_writable()
        with self._mutex, self._writer_lock:
            self._catch_up(repair=True)
            self._refresh_segment_list()
            hw = self._high_watermark()
            if offset < 0 or offset > hw:
                raise OffsetOutOfRangeError(
                    f"cannot move the log start of {self.topic}-{self.partition} to {offset}: "
                    f"it is outside [0, {hw}] (the high watermark)"
                )
            if offset > self._log_start():
                write_log_start_checkpoint(self.directory, offset)
                self._start_floor = offset
                self._enforce_retention_locked(self._clock())
            return self._log_start()

    def _clean_snapshots(self, *, keep_latest: bool) -> None:
        clean_snapshots(self.directory, (s.base_offset for s in self._segments), keep_latest=keep_latest)

    # ---- closing ---------------------------------------------------------------------------------------------

    def flush(self) -> None:
        """Make the derived index files durable (the data's durability is `sync()`'s and the appends')."""
        with self._mutex:
            for seg in self._segments:
                seg.offset_index.flush()
                seg.time_index.flush()

    def close(self) -> None:
        """Clean close: the log synced (HW = log end), then a snapshot at the log end so the next open scans nothing.

        Only a failure to make this view's own appends durable is raised: the snapshot and the
        sealed indexes are derived files the next open rebuilds, and a view that only read has
        nothing of its own to make durable, so their failures (a full disk) are logged instead
        (docs/reliability-scenarios.md scenario 70).
        """
        with self._mutex:
            if self._closed:
                return
            try:
                if not self.read_only and not self._failed and self._loader.corruption is None:
                    self._close_under_lock()
            finally:
                for seg in self._segments:
                    seg.close()
                self._hw_file.close()
                if self._lock is not None:
                    self._lock.close()
                self._closed = True

    def _close_under_lock(self) -> None:
        """`close`'s sync and derived files, under the writer lock, unless the lock file is another file now.

        An evicted lock file reopened under its name refuses another file (storage/descriptor_cache.py):
        the topic was deleted (and maybe made again) while open, and this view's files went with it.
        """
        try:
            with self._writer_lock:
                if self._sync_on_close():
                    self._save_derived_files_on_close()
        except FileReplacedError as exc:
            if self._own_unsynced:
                raise
            _log.warning("closing %s: its directory was deleted while open (%s)", self, exc)

    def _sync_on_close(self) -> bool:
        """Catch up and sync (lock held); whether the close may go on to write its derived files."""
        try:
            self._catch_up(repair=True)
            self._sync_locked()
        except (KafkaStorageError, OSError) as exc:
            if self._own_unsynced:
                raise  # this view's own appends may not be durable: the caller must hear it
            _log.warning("closing %s: could not sync a tail other writers left (%s)", self, exc)
            return False
        return True

    def _save_derived_files_on_close(self) -> None:
        """Seal the active segment's indexes and snapshot at the log end (lock held); a failure is logged."""
        if not os.path.isdir(self.directory):
            return  # deleted under us (scenario 71): there is nowhere to save them, nor anyone to read them
        try:
            self._segments[-1].seal()
            snapshots = list_snapshots(self.directory)
            if snapshots and snapshots[-1][0] == self._state.end_offset:
                return  # closed cleanly before, nothing since: a reader's close writes nothing
            self._loader.snapshot()
            self._clean_snapshots(keep_latest=True)
        except (KafkaStorageError, OSError) as exc:
            _log.warning("closing %s: no snapshot at the log end (%s); the next open replays the tail", self, exc)

    def __repr__(self) -> str:
        return f"PartitionLog({self.topic}-{self.partition})"


class _ExclusiveSection:
    """`PartitionLog.exclusive`'s section: the writer lock taken and the view caught up on entry, let go on exit.

    A class rather than a generator context manager: a `WriterHold` enters one per partition of a
    window, twice per wide commit's partition counting the exit, and the generator's frame and
    `ExitStack`'s wrapping were about a quarter of a held partition's lock-and-catch-up CPU (issue 26).
    """

    __slots__ = ("_log", "_lock", "_hold", "_outer", "_wrote")

    def __init__(self, log: PartitionLog):
        self._log = log

    def __enter__(self) -> PartitionLog:
        log = self._log
        log._check_writable()
        lock = self._lock = log._writer_lock
        log._mutex.acquire()
        try:
            lock.acquire()
        except BaseException:
            log._mutex.release()
            raise
        self._hold = hold = log._hold
        if hold is None:  # the outermost section: its hold's token lives until it lets the lock go
            log._hold = (threading.get_ident(), object())
        try:
            log._catch_up(repair=True)
        except BaseException:
            self._let_go()
            raise
        self._outer, log._held_caught_up = log._held_caught_up, True
        self._wrote, log._wrote_while_held = log._wrote_while_held, False
        return log

    def __exit__(self, *_: object) -> None:
        log, outer = self._log, self._outer
        log._held_caught_up = outer
        log._wrote_while_held = outer and (self._wrote or log._wrote_while_held)  # the outer section's
        self._let_go()

    def _let_go(self) -> None:
        log = self._log
        log._hold = self._hold
        try:
            self._lock.release()
        finally:
            log._mutex.release()


class WriterHold:
    """The writer locks of several partitions held at once, each view caught up; their syncs overlapped.

    What a transaction's commit does twice: once for its data before PREPARE_COMMIT, once for its
    markers before COMPLETE_* (txlog/coordinator/transaction_coordinator.py). Each log is synced as
    `sync()` syncs it: under its writer lock, caught up, its HW published after its own fdatasync. What
    changes is who does the work. The calling thread takes the locks, catches each view up and
    publishes each HW; only the bare fdatasyncs go to other threads, all at once on exit
    (`storage.durable.each_in_parallel`). Giving each `sync()` whole to a pool thread cost about
    100 µs of CPU per partition on two busy cores (thread hand-offs, GIL contention). Starting each
    fdatasync as soon as its partition was ready cost more than it saved: fdatasyncs that trickle in
    share fewer journal commits, and a 100-partition commit's system CPU doubled.

    `take()` takes the locks in directory order, the one order every holder of several writer locks
    uses, so two holds cannot deadlock (whoever holds one lock waits for no other). The caller may
    append to a held partition in between (the lock is re-entrant): a marker appended under the hold
    is synced by `sync` without a second catch-up, since no other process can have written there
    since the hold's. Before ABORT markers, `index_aborts` appends their `.txnindex` entries and
    fsyncs them at once (each entry durable before its own marker, rule 19). A partition whose lock
    or catch-up failed is not held, and its `sync` fails with that error. On exit the fdatasyncs
    run, the synced partitions' HWs are published and the locks are released; then the first failure
    (in the order of the `sync` calls) is raised, unless the block itself raised. A block that raised
    a KafkaError or an OSError (a marker write failed: the disk is full) still has its syncs made;
    any other exception (a simulated crash) releases the locks only.

    Each held lock and each fdatasync pins a descriptor: callers hold `window()` logs at a time,
    which pins at most the descriptor cache's limit of them (storage/descriptor_cache.py).
    """

    def __init__(self, logs: Sequence[PartitionLog]):
        self._logs = sorted({id(log): log for log in logs}.values(), key=lambda log: log.directory)
        self._stack = ExitStack()  # the locks taken, released on exit
        self._held: dict[int, BaseException | None] = {}  # id(log) -> None when held, else why it is not
        self._todo: list[tuple[int, PartitionLog, LogSegment]] = []
        self._errors: dict[int, BaseException] = {}  # by the order of `sync` calls
        # Failures to take out a staged abort entry whose marker was not written (`_run_round`): no `sync`
        # call's, so apart from `_errors`, raised after them (`_first_failure`).
        self._cleanup_errors: list[BaseException] = []
        self._calls = 0  # `sync` calls since the last round settled (one that found the log durable included)
        self._staged: list[PartitionLog] = []  # logs given an abort's `.txnindex` entry by `index_aborts`
        self._index_errors: dict[int, BaseException] = {}  # id(log) -> why its entry is not durable
        self._template: tuple[tuple[ControlType, int, int, int, int], bytes] | None = None  # `_marker_template`

    @staticmethod
    def window() -> int:
        """How many partitions one hold may take: the descriptors it pins stay within the cache's limit."""
        return max(1, CACHE.limit // 2)

    def __enter__(self) -> WriterHold:
        return self

    def take(self) -> Iterator[PartitionLog]:
        """Take the locks in directory order, yielding each log once it is held and caught up, or refused
        (`refusal` says why; its `sync` fails with that)."""
        for log in self._logs:
            try:
                section = log.exclusive()
                section.__enter__()
                self._stack.push(section.__exit__)
            except (KafkaError, OSError) as exc:  # this partition fails; the others go on, as their `sync()`s would
                self._held[id(log)] = exc
            else:
                self._held[id(log)] = None
            yield log

    def covers(self, logs: Sequence[PartitionLog]) -> bool:
        """Whether this hold was made over exactly `logs` (in any order) and `take` has visited them all."""
        return {id(log) for log in logs} == {id(log) for log in self._logs} and len(self._held) == len(self._logs)

    def refusal(self, log: PartitionLog) -> BaseException | None:
        """Why `log` (already yielded by `take`) is not held, or None when it is."""
        return self._held[id(log)]

    def index_aborts(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, timestamp: int) -> None:
        """Before ABORT markers are appended to the held logs: the `.txnindex` entry each marker needs is
        appended to its log (the marker `append_marker` would write with these arguments next), then the
        entries' fsyncs run at once (`each_in_parallel`).

        Rule 19 of docs/reliability-scenarios.md (a reader never sees an ABORT marker without its
        entry) orders each partition's entry before its own marker only; no rule orders one
        partition's entry against another's, so a window pays one round of fsyncs for its entries
        where a marker at a time paid one fsync after another. The marker then finds its entry in
        place and durable (`PartitionLog._index_abort`). An entry whose fsync failed is taken out
        again and `index_failure` says why: its marker must not be written, and its `sync` fails
        with that error. On exit, an entry whose marker was not written (a marker before it failed)
        is taken out.
        """
        staged: list[tuple[PartitionLog, LogSegment]] = []
        template = self._marker_template(ControlType.ABORT, producer_id, producer_epoch, coordinator_epoch, timestamp)
        for log in self._logs:
            if id(log) not in self._held or self.refusal(log) is not None:
                continue
            try:
                segment = log._stage_abort(producer_id, producer_epoch, coordinator_epoch, timestamp, template)
            except (KafkaError, OSError) as exc:
                self._index_errors[id(log)] = exc
                continue
            if segment is not None:
                staged.append((log, segment))
        self._staged.extend(log for log, _ in staged)
        outcomes = sync_round([segment.txn_index.flush for _, segment in staged], _anchor(staged))
        for (log, _), error in zip(staged, outcomes, strict=True):
            log._staged_abort_synced(error)
            if error is not None:
                self._index_errors[id(log)] = error

    def mark(
        self,
        logs: Sequence[PartitionLog],
        control_type: ControlType,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        timestamp: int,
    ) -> None:
        """Each of `logs` (yielded by `take`) given, in that order, the marker `append_marker` would write with
        these arguments, without fdatasync, then to `sync`: a transaction end's loop of WriteTxnMarkers in
        one call, for a caller no wrapper watches marker by marker (issue 26: a wide commit's fixed cost per
        partition). The marker is encoded once and stamped with each partition's offset (`marker_template`);
        each partition's rules are `append_marker`'s own (`PartitionLog._marker_locked`), on a view the hold
        caught up. As for a loop of `append_marker` calls: a log not held raises why, the markers before it
        given to `sync` (the caller settles them); a failed write raises likewise; a log whose abort entry is
        not durable (`index_failure`) gets no marker, and its `sync` fails with that.
        """
        marker = (control_type, producer_id, producer_epoch, coordinator_epoch, timestamp)
        template = self._marker_template(*marker)
        for log in logs:
            refusal = self.refusal(log)
            if refusal is not None:
                raise refusal
            if self.index_failure(log) is None:
                log._check_writable()
                log._marker_locked(*marker, sync=False, template=template)
            self.sync(log)

    def _marker_template(
        self, control_type: ControlType, producer_id: int, producer_epoch: int, coordinator_epoch: int, ts: int
    ) -> bytes:
        """`marker_template`, encoded once per hold: an abort's `.txnindex` entries and its markers are planned
        from the same marker."""
        key = (control_type, producer_id, producer_epoch, coordinator_epoch, ts)
        if self._template is None or self._template[0] != key:
            self._template = (key, marker_template(*key))
        return self._template[1]

    def index_failure(self, log: PartitionLog) -> BaseException | None:
        """Why `index_aborts` could not make `log`'s entry durable (so no marker may follow), or None."""
        return self._index_errors.get(id(log))

    def sync(self, log: PartitionLog) -> None:
        """Make `log` (yielded by `take`) durable to its end on exit: its fdatasync, then its HW. A log
        that could not be taken, or whose abort entry `index_aborts` could not make durable, fails, with
        the reason."""
        if id(log) not in self._held:
            raise ValueError(f"{log} is not taken by this hold")
        order, self._calls = self._calls, self._calls + 1
        try:
            refusal = self.refusal(log) or self.index_failure(log)
            if refusal is not None:
                raise refusal
            log._check_writable()
            unsynced = log._unsynced_segment()
        except (KafkaError, OSError) as exc:
            self._errors[order] = exc
            return
        if unsynced is not None:
            self._todo.append((order, log, unsynced))

    def settle(self) -> None:
        """Run the syncs asked for so far now, as on exit, with every partition still held; then raise the
        first failure. For a commit holding its data partitions from their syncs (before PREPARE_COMMIT)
        to their markers' syncs: one lock and one catch-up per partition serve both rounds."""
        self._run_round()
        failure = self._first_failure()
        self._errors, self._cleanup_errors, self._calls = {}, [], 0
        if failure is not None:
            raise failure

    def settle_each(self) -> list[BaseException | None]:
        """Run the syncs asked for so far now, as `settle` does, and raise nothing: each `sync` call's failure
        (its partition's refusal, or its file's failed sync), or None, in the order of the calls. For
        `append_all`, whose callers answer each partition apart (an acks=all round's futures). Not for
        a hold with abort entries staged (`index_aborts`): their clean-up failures have no call to go to (they
        stay for the hold's exit to raise)."""
        self._run_round()
        errors, self._errors, calls, self._calls = self._errors, {}, self._calls, 0
        return [errors.get(n) for n in range(calls)]

    def _first_failure(self) -> BaseException | None:
        """What `settle` and the exit raise: the failure of the first `sync` call that failed, else the first
        clean-up failure of a staged abort entry, else None."""
        if self._errors:
            return self._errors[min(self._errors)]
        return self._cleanup_errors[0] if self._cleanup_errors else None

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        with self._stack:
            if kind is not None and not issubclass(kind, (KafkaError, OSError)):
                return
            self._run_round()
        failure = self._first_failure()
        if failure is not None and kind is None:
            raise failure

    def _run_round(self) -> None:
        """The round's work: staged abort entries whose markers were not written taken out, every file
        `sync` asked for made durable at once (`sync_round`), each synced log's HW published; the
        failures kept in `_errors`."""
        staged, self._staged = self._staged, []
        for log in staged:
            try:
                log._drop_staged_abort()  # its marker was not written (a written one consumed its entry)
            except (KafkaError, OSError) as exc:  # the markers written are still synced below
                self._cleanup_errors.append(exc)
        todo, self._todo = self._todo, []
        pairs = [(log, segment) for _, log, segment in todo]
        outcomes = sync_round([segment.sync for _, segment in pairs], _anchor(pairs))
        for (order, log, segment), error in zip(todo, outcomes, strict=True):
            if error is None:
                log._synced(segment)
                continue
            if isinstance(error, KafkaStorageError):
                log._sync_failed(error)
            self._errors[order] = error


def _anchor(pairs: Sequence[tuple[PartitionLog, LogSegment]]) -> CachedFile | None:
    """For `sync_round`: the first segment's `.log` when every log's directory (where its segments' files
    live) is on one filesystem, else None."""
    devices = {log._dir_dev for log, _ in pairs}
    if not pairs or len(devices) != 1 or None in devices:
        return None
    return pairs[0][1].log


def sync_all(logs: Sequence[PartitionLog]) -> None:
    """`sync()` every log, their fdatasyncs at once (`sync_each`); the first failure (in the order of
    `logs`) is raised once every sync ended, so the caller's next step is never written while one
    could still fail."""
    raise_first(sync_each(logs))


def sync_each(logs: Sequence[PartitionLog]) -> list[KafkaError | OSError | None]:
    """`sync()` every log, a window at a time, each window's fdatasyncs one sync round (`WriterHold`: one
    syncfs where allowed); each log's failure, or None, in the order of `logs`, once every sync ended."""
    if len(logs) == 1:
        try:
            logs[0].sync()  # the same work, without a hold's bookkeeping: a one-partition commit pays nothing for it
        except (KafkaError, OSError) as exc:
            return [exc]
        return [None]
    failures: dict[int, KafkaError | OSError | None] = {}  # id(log) -> its failure
    window = WriterHold.window()
    for start in range(0, len(logs), window):
        with WriterHold(logs[start : start + window]) as hold:
            taken = list(hold.take())  # in directory order: the order of the `sync` calls below
            for log in taken:
                hold.sync(log)
            for log, failure in zip(taken, hold.settle_each(), strict=True):
                failures[id(log)] = _as_storage_failure(failure)
    return [failures[id(log)] for log in logs]


def _as_storage_failure(failure: BaseException | None) -> KafkaError | OSError | None:
    """A hold's failure as `sync()` raises it (a lock or catch-up refused, an fsync failed)."""
    if failure is None or isinstance(failure, (KafkaError, OSError)):
        return failure
    raise failure  # nothing else is kept by a hold: a bug, not a partition's failure


def append_all(
    appends: Sequence[tuple[PartitionLog, bytes | bytearray]], *, trusted: bool = False
) -> list[AppendResult | KafkaError]:
    """Each `(log, data)` appended and made durable, as `log.append(data)` would, with one sync round
    per window of partitions instead of one fdatasync each: each append's result, or its error.

    An acks=all round over many partitions (txlog/clients/sender.py, through `Transport.produce_durably`). A window
    of logs is held (`WriterHold`: locks taken in directory order, each view caught up), each log
    appended to without an fdatasync of its own (the hold's lock is re-entered), then the round
    makes every written file durable at once (`sync_round`: one syncfs where allowed, else the
    parallel fdatasyncs, which name the file a failed syncfs lost) and publishes each synced log's
    HW, all before the locks are let go: no reader sees the data, and no other writer syncs it on
    our behalf, before it is durable (`_sync_for_reader` leaves a held partition alone). A failure
    fails only its own partition: a refused lock or append (nothing written) or a failed sync (the
    partition then refuses writes: rule 9 of docs/reliability-scenarios.md). Results come back once
    every window's round ended, so a caller acknowledges nothing that is not durable.
    """
    outcomes: list[AppendResult | KafkaError] = []
    window = WriterHold.window()
    for start in range(0, len(appends), window):
        outcomes.extend(_append_window(appends[start : start + window], trusted))
    return outcomes


def _append_window(
    appends: Sequence[tuple[PartitionLog, bytes | bytearray]], trusted: bool
) -> list[AppendResult | KafkaError]:
    """`append_all` for one hold's worth of logs."""
    outcomes: list[AppendResult | KafkaError] = []  # one per append, in order
    synced: list[int] = []  # which appends the hold syncs, in the order of its `sync` calls
    with WriterHold([log for log, _ in appends]) as hold:
        for _ in hold.take():
            pass
        for n, (log, data) in enumerate(appends):
            refusal = hold.refusal(log)
            if refusal is not None:
                outcomes.append(as_kafka_error(refusal))
                continue
            try:
                outcomes.append(log.append(data, sync=False, trusted=trusted))
            except KafkaError as exc:  # checked or cut back: nothing of it stays written
                outcomes.append(exc)
                continue
            synced.append(n)
            hold.sync(log)
        for n, failure in zip(synced, hold.settle_each(), strict=True):
            if failure is not None:
                outcomes[n] = as_kafka_error(failure)
    return outcomes


def as_kafka_error(exc: BaseException) -> KafkaError:
    """A partition's failure as its caller answers it: a KafkaError as it is, an OSError (a lock that
    could not be taken) as KafkaStorageError (`append_all`; `Transport` for `sync_each`'s failures)."""
    if isinstance(exc, KafkaError):
        return exc
    return KafkaStorageError(f"{exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}")
