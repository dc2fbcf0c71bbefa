"""Building a process's view of a partition from its files, recovering them when allowed to (Kafka's LogLoader).

Opening a partition: remove leftovers of interrupted operations (temp files, orphan indexes),
open the segments, restore producer state from the newest usable snapshot, replay the batches
after it (cutting a torn tail, filling index gaps a crashed writer left), then check the
indexes, rebuilding any that fail. A clean close leaves a snapshot at the log end, so the
replay is empty; after a crash only the tail since the last snapshot is scanned
(docs/kafka-formats.md §5.7, docs/DESIGN.md §3).

Catching up on what other processes appended is the same replay, started where this view
stopped, so the partition log calls `replay` for that too.

Every view is built from one listing of the segments (`segment_listing`), which reads a
cleaner's `.log.swap` by recovery's own rule (`swaps_to_complete`): a swap recovery would
complete stands in for the segments it replaces, so a reader of a dead cleaner's swap reads
what recovery will leave, without writing (docs/reliability-scenarios.md rule 22).

`repair` means the caller holds the partition's writer lock: a torn tail past the last whole
batch then belongs to a dead writer and may be cut, and derived files may be rewritten.
Without it (a reader, or a read-only store) nothing is written and a torn tail is just not
visible. Corruption (bad bytes followed by valid batches, or in a sealed segment) is the same
for both: noted, passed over to the file's real end, never cut (`FileRecords.judge_damage`).

The loader fills the partition log's segment list in place (the list is shared, as Kafka's
LogLoader fills the log's `LogSegments`) and restores the producer state it is given.
"""

from __future__ import annotations

import os
import time
from bisect import bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import pairwise
from operator import attrgetter
from typing import Any, Self, SupportsIndex

from storage.checkpoint import LEADER_EPOCH_CHECKPOINT, write_leader_epoch_checkpoint
from storage.config import TopicConfig
from storage.descriptor_cache import file_identity
from storage.durable import fsync_dir, unlink_durably, write_new_file
from storage.errors import (
    CorruptIndexError,
    CorruptRecordError,
    CorruptSnapshotError,
    FileReplacedError,
    KafkaStorageError,
    UnsupportedForMessageFormatError,
)
from storage.file_records import Damage, FileRecords
from storage.log_files import (
    CLEANED_FILE_SUFFIX,
    INDEX_FILE_SUFFIX,
    INDEX_FILE_SUFFIXES,
    LOG_FILE_SUFFIX,
    SWAP_FILE_SUFFIX,
    TEMP_FILE_SUFFIXES,
    TIME_INDEX_FILE_SUFFIX,
    offset_of,
    segment_bases,
    segment_file,
)
from storage.producer_snapshot import delete_snapshot, list_snapshots, read_snapshot
from storage.producer_state import ProducerStateManager
from storage.producer_state_snapshots import delete_snapshots_after, state_at_segment_start, take_snapshot
from storage.records import BatchHeader, RecordBatch
from storage.segment import LogSegment
from storage.transaction_index import AbortedTxn
from storage.txnindex_check import TxnIndexCheck, abort_replayer, read_txn_counts, replay_abort, write_txn_counts

LEADER_EPOCH = 0  # a single "broker" that never changes leadership
RELOAD_ATTEMPTS = 20
# What `drop_stale_txn_entries` answers for an active segment with no `.txnindex`: a (size, mtime_ns)
# no file has, which the quiet append (storage/native/src/bindings/append.rs) takes as "look at none".
NO_TXNINDEX = (-1, 0)
#: How long a reader waits (at most) for a cleaner's swap in flight to end before listing anyway.
SWAP_WAIT_ATTEMPTS = 5000
SWAP_WAIT_S = 0.001
_SWAP_LOG_SUFFIX = LOG_FILE_SUFFIX + SWAP_FILE_SUFFIX


def create_empty_log(directory: str) -> None:
    """Lay out a new partition: an empty first segment at offset 0 and its epoch checkpoint, each durable."""
    LogSegment.create(directory, 0).close()
    write_leader_epoch_checkpoint(directory, [(LEADER_EPOCH, 0)])  # what `lay_out_empty_log` says


def lay_out_empty_log(directory: str) -> list[str]:
    """Lay out a new partition in its new, empty `directory`: an empty first segment at offset 0 (its
    `.log`, `.index` and `.timeindex`) and its epoch checkpoint, none of them fsynced; returns the files
    whose contents need an fsync (the empty files' need only the directory's).

    For `Store.create_topic`, which makes every new partition durable in one sync round (each such
    file's fsync and each directory's) before the store directory's fsync and the metadata naming the
    topic (rule 3: nothing points at a file before it and its directory entry are durable).
    """
    for suffix in (LOG_FILE_SUFFIX, INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX):
        write_new_file(segment_file(directory, 0, suffix), b"")
    # Every batch carries leader epoch 0 from offset 0: what Kafka's epoch cache would hold.
    write_leader_epoch_checkpoint(directory, [(LEADER_EPOCH, 0)], new_unsynced=True)
    return [os.path.join(directory, LEADER_EPOCH_CHECKPOINT)]


def segment_index_for(segments: list[LogSegment], offset: int) -> int:
    """Index of the segment holding `offset`: the last whose base is at or below it (else the first).

    A C bisection: of a SegmentList's base offsets (kept per generation), else of the segments
    by base offset. A poll looks twice, and at thousands of segments a Python loop was a
    visible part of it (issue 26).
    """
    if isinstance(segments, SegmentList):
        return max(bisect_right(segments.bases(), offset) - 1, 0)
    return max(bisect_right(segments, offset, key=_base_offset) - 1, 0)


_base_offset = attrgetter("base_offset")


class SegmentList(list[LogSegment]):
    """A partition's segments, in base-offset order, with a generation bumped by every change of the list.

    What a view works out from its whole list of segments (their base offsets, which of them may
    hold an abort) is kept under the generation it was worked out at, so a poll checks one integer
    instead of walking thousands of segments (Kafka keeps its LogSegments in a map for the same
    reason). Every way of changing a list in place goes through one of the methods below.
    """

    generation = 0
    _bases: list[int] = []
    _bases_generation = -1

    def bases(self) -> list[int]:
        """The segments' base offsets, in order (a segment's base never changes: only the list does)."""
        if self._bases_generation != self.generation:
            self._bases = [seg.base_offset for seg in self]
            self._bases_generation = self.generation
        return self._bases

    def _changed(self) -> None:
        self.generation += 1

    def append(self, seg: LogSegment, /) -> None:
        super().append(seg)
        self._changed()

    def extend(self, segs: Iterable[LogSegment], /) -> None:
        super().extend(segs)
        self._changed()

    def insert(self, index: SupportsIndex, seg: LogSegment, /) -> None:
        super().insert(index, seg)
        self._changed()

    def pop(self, index: SupportsIndex = -1, /) -> LogSegment:
        seg = super().pop(index)
        self._changed()
        return seg

    def remove(self, seg: LogSegment, /) -> None:
        super().remove(seg)
        self._changed()

    def clear(self) -> None:
        super().clear()
        self._changed()

    def sort(self, *args: object, **kwargs: object) -> None:
        raise TypeError("a segment list is kept in base-offset order; it is never sorted")

    def reverse(self) -> None:
        raise TypeError("a segment list is kept in base-offset order; it is never reversed")

    def __setitem__(self, index: Any, value: Any) -> None:
        super().__setitem__(index, value)
        self._changed()

    def __delitem__(self, index: SupportsIndex | slice) -> None:
        super().__delitem__(index)
        self._changed()

    def __iadd__(self, segs: Iterable[LogSegment]) -> Self:  # type: ignore[override, misc]
        self.extend(segs)
        return self

    def __imul__(self, times: SupportsIndex) -> Self:
        raise TypeError("a segment list never repeats its segments")


@dataclass(frozen=True)
class SegmentListing:
    """The segments of a partition directory: base offsets ascending, and those read from a `.log.swap`."""

    bases: list[int]
    from_swap: frozenset[int]
    #: Whether the directory held any `.log.swap` (one in flight, or one a dead cleaner left).
    swap_left_over: bool = False


def readable_end(segments: list[LogSegment], seg: LogSegment) -> int:
    """Bytes of a segment a reader may scan, all of which must be whole batches.

    A sealed segment is read to its file end (damage anywhere in it raises); the active
    one only up to what this view validated, since past that a write may be in flight.
    """
    return seg.size if seg is segments[-1] else seg.file_size()


class LogLoader:
    """Loads and recovers one partition directory into a shared segment list and producer state."""

    def __init__(
        self,
        directory: str,
        config: TopicConfig,
        segments: list[LogSegment],
        state: ProducerStateManager,
        txn_check: TxnIndexCheck,
        *,
        read_only: bool,
        clock: Callable[[], int],
        swap_in_flight: Callable[[], bool] | None = None,
    ):
        self.directory = directory
        # The view's directory key while it vouches that no file was created since it was taken (else
        # None): segments' `.txnindex` lookups skip opening a file found absent under it (EntryFile).
        self.absence_key: Callable[[], object | None] | None = None
        self.hold_token: Callable[[], object | None] | None = None  # for `EntryFile.trust_while`
        # Whether another process holds the partition's lock (a cleaner mid-swap): see _settled_listing.
        self._swap_in_flight = swap_in_flight
        # What `_swap_end` read of the `.log.swap` it read last (one swap at a time: the older ones are gone).
        self._swap_read: _SwapRead | None = None
        self.config = config
        self.segments = segments  # the partition log's list, filled here in place
        self.state = state
        self.txn_check = txn_check
        self.read_only = read_only
        self._clock = clock
        # Corruption the replay passed over (docs/reliability-scenarios.md rule 7), read-only or
        # writable: writes are refused with it, reads of the damaged batch raise, the rest stays readable.
        self.corruption: CorruptRecordError | None = None
        # The first offset the damage may hold (the end of the whole batches before it).
        self.corruption_offset = -1
        self._reads_swap = False  # see `reads_swap`
        # (device, inode, generation) of the directory at the first load: no later load reads another one.
        self.directory_identity: tuple[int, int, int | None] | None = None

    # ---- the whole load -----------------------------------------------------------------------

    def load(self, *, repair: bool) -> None:
        """Build the view from the files, recovering them when `repair` (caller holds the lock).

        Another process's retention may delete a segment between the listing and its
        opening, or its cleaner replace it; the load then starts over from a fresh listing.
        """
        self._check_own_directory()
        vanished: OSError | FileReplacedError | None = None
        for _ in range(RELOAD_ATTEMPTS):
            try:
                return self._load_once(repair=repair)
            except (FileNotFoundError, FileReplacedError) as exc:
                vanished = exc  # a cleaner's swap replaces files by name, as retention removes them
        raise KafkaStorageError(f"segments of {self.directory} keep disappearing while loading: {vanished}")

    def owns_directory(self) -> bool:
        """Whether the directory under the name is the one the view first loaded (not its topic deleted and
        made again, docs/reliability-scenarios.md scenario 71); an open and an ioctl, asked when it changed.

        Its inode number alone cannot tell: ext4 gives a freed number to the next directory made once
        nothing holds the old one, and a view whose descriptors the bound closed holds nothing in it
        (storage/descriptor_cache.py). The generation tells the two apart.
        """
        try:
            return self.directory_identity in (None, file_identity(self.directory))
        except FileNotFoundError:
            return False

    def _check_own_directory(self) -> None:
        """Note the directory at the first load; refuse a later load of another one under its name."""
        if self.directory_identity is None:
            try:
                self.directory_identity = file_identity(self.directory)
            except FileNotFoundError:
                pass  # the load says what is missing
        elif not self.owns_directory():
            raise KafkaStorageError(
                f"{self.directory} is gone or another directory since this view opened it: "
                "its topic (or the store) was deleted while open"
            )

    def _load_once(self, *, repair: bool) -> None:
        for seg in self.segments:
            seg.close()
        self.segments.clear()
        self.corruption, self.corruption_offset = None, -1
        if repair:
            self._remove_temp_and_orphan_files()
        self.segments.extend(self._open_segments(repair))
        # Only a load opens a segment from its `.swap`; kept as a flag, as every look at the directory asks.
        self._reads_swap = any(seg.from_swap for seg in self.segments)
        for seg, following in pairwise(self.segments):
            seg.size, seg.next_offset = seg.file_size(), following.base_offset
        seg_idx, position = self.restore_producer_state(repair)
        self._expect_counted_aborts(seg_idx, position)
        scanned = self.replay(seg_idx, position, repair=repair)
        # A corrupt log gets no derived file written from it: nothing here may seem to vouch for it.
        repair = repair and self.corruption is None
        self.check_indexes(repair)
        if repair:
            self.drop_stale_txn_entries()
            if scanned:
                self.snapshot()

    def snapshot(self) -> None:
        """A producer-state snapshot at the state's end, the `.txnindex` counts first (caller holds the lock).

        The counts go first: a later open replays from its newest snapshot, and everything
        below it must be covered by counts at least as recent (docs/reliability-scenarios.md rule 16).
        """
        write_txn_counts(self.directory, self.segments, self.txn_check)
        take_snapshot(self.directory, self.state)

    def _expect_counted_aborts(self, seg_idx: int, position: int) -> None:
        """Seed what each `.txnindex` must hold, for the bytes this load does not replay.

        Segments before the replay's start take the count checkpoint's word, when it covers
        them whole; the segment the replay starts in takes it when it covers the bytes below
        the start; the replay counts the rest itself. Anything else stays unknown and is
        checked by a scan before its index is first trusted.
        """
        counts = read_txn_counts(self.directory)
        start_offset = self.state.end_offset
        for i, seg in enumerate(self.segments[: seg_idx + 1]):
            # A segment read from its `.swap` is not the one the counts were taken of: unknown.
            through, count = (-1, None) if seg.from_swap else counts.get(seg.base_offset, (-1, None))
            needed = start_offset if i == seg_idx else seg.next_offset
            if i == seg_idx and position == 0:
                continue  # replayed whole: the replay counts every abort
            self.txn_check.expect(seg, count if through >= needed else None, max(through, 0))

    def _open_segments(self, repair: bool) -> list[LogSegment]:
        listing = self.segment_listing()
        if not listing.bases:
            if not repair:
                raise KafkaStorageError(f"{self.directory} holds no log segments")
            create_empty_log(self.directory)
            return [self.open_segment(0, writable=True)]
        opened: list[LogSegment] = []
        try:
            for base in listing.bases:
                from_swap = base in listing.from_swap
                opened.append(self.open_segment(base, writable=not self.read_only, from_swap=from_swap))
        except BaseException:
            for seg in opened:
                seg.close()
            raise
        return opened

    def open_segment(self, base: int, *, writable: bool, from_swap: bool = False) -> LogSegment:
        seg = LogSegment(
            self.directory,
            base,
            writable=writable and not from_swap,  # a `.swap` is read, never written (a writer completes it)
            index_interval_bytes=self.config.index_interval_bytes,
            from_swap=from_swap,
        )
        seg.load_time_stats()
        if self.absence_key is not None:
            seg.txn_index.vouch_absence_by(self.absence_key)
        if self.hold_token is not None:
            seg.txn_index.trust_while(self.hold_token)
        return seg

    def segment_listing(self) -> SegmentListing:
        """The log's segments as the directory holds them: the one listing every view is built from.

        A listing taken while a cleaner swaps segments in (a `.log.swap` beside them, the lock
        held elsewhere) is taken again once the swap is over (docs/DESIGN.md §3), as is one the
        directory changed under (`_listing`). Whatever the listing then shows, a `.log.swap` past
        its swap's point of no return stands in for the segments it replaces, by recovery's own
        rule (`swaps_to_complete`, `_complete_swap`): a cleaner killed after deleting them leaves
        readers its cleaned segment to read until a writer completes the swap, never a gap.
        """
        for _ in range(RELOAD_ATTEMPTS):
            names = self._settled_listing()
            try:
                return self._segments_of(names)
            except (FileNotFoundError, FileReplacedError):
                continue  # the swap completed while its cleaned segment was read: list again
        raise KafkaStorageError(f"the segments of {self.directory} keep changing while listed")

    def _settled_listing(self) -> list[str]:
        """The directory's names once no live cleaner's swap is in flight (or after waiting a bounded time)."""
        names = self._listing()
        for _ in range(SWAP_WAIT_ATTEMPTS):
            if self._swap_in_flight is None:
                break
            if names is not None and not any(n.endswith(_SWAP_LOG_SUFFIX) for n in names):
                break
            if names is not None and not self._swap_in_flight():
                break
            time.sleep(SWAP_WAIT_S)
            names = self._listing()
        return os.listdir(self.directory) if names is None else names

    def _segments_of(self, names: list[str]) -> SegmentListing:
        """The segments `names` show, each `.log.swap` recovery would complete in place of what it replaces."""
        bases = set(segment_bases(names))
        # a swap stands in once its replaced segments start to go (its base's `.log` goes first):
        # until then they are whole, and the cleaner checkpoint may not yet cover the cleaned one
        swaps = [swap for swap in swaps_to_complete(names)[1] if swap not in bases]
        for swap in swaps:
            end = self._swap_end(swap)
            # As `_complete_swap` does: the `.log` files in [swap, end) go, and the swap takes its base.
            bases = {base for base in bases if not swap <= base < end}
        left_over = any(name.endswith(_SWAP_LOG_SUFFIX) for name in names)
        return SegmentListing(sorted(bases | set(swaps)), frozenset(swaps), left_over)

    def _swap_end(self, base: int) -> int:
        """The offset after a `.log.swap`'s last batch, remembered with that batch's header (`_SwapRead`).

        A read-only view of a dead cleaner's swap lists the directory at every look, so the walk
        over the file's headers is done once per file. No file identity can say "the same file",
        though: ext4 gives a freed inode number to the next file created, and the next cleaning's
        segment is often the size of the last one (the same keys, values as long). Taken for the
        last one's, its end kept a replaced segment beside it and readers saw records twice. So
        the answer is reused only while the same header still ends the file where it did.
        """
        with FileRecords.open(segment_file(self.directory, base, _SWAP_LOG_SUFFIX)) as records:
            size = records.size()
            known = self._swap_read
            if known is not None and known.base == base and known.size == size and known.still_last(records):
                return known.end
            last = _last_header(records)
            self._swap_read = _SwapRead(base, size, last)
            return self._swap_read.end

    @property
    def reads_swap(self) -> bool:
        """Whether the view holds a segment read from its `.swap` files (a dead cleaner's swap)."""
        return self._reads_swap

    def _listing(self) -> list[str] | None:
        """The directory's names, or None if it changed while they were read.

        A directory read concurrent with a rename may see neither name of the file: the
        directory's mtime, the same before and after, says no rename happened meanwhile.
        """
        before = os.stat(self.directory).st_mtime_ns
        names = os.listdir(self.directory)
        return names if os.stat(self.directory).st_mtime_ns == before else None

    def _remove_temp_and_orphan_files(self) -> None:
        """Remove leftovers of interrupted writes, deletes and cleanings, complete interrupted swaps,
        and remove indexes whose `.log` is gone.

        Retention deletes a segment's `.log` first, so a crash midway leaves such orphans.
        """
        recover_swaps(self.directory)
        names = os.listdir(self.directory)
        logs = {n[: -len(LOG_FILE_SUFFIX)] for n in names if n.endswith(LOG_FILE_SUFFIX)}
        doomed = []
        for name in names:
            temporary = name.endswith(TEMP_FILE_SUFFIXES)  # `.snapshot.deleted` among them
            orphan_index = name.endswith(INDEX_FILE_SUFFIXES) and name.split(".", 1)[0] not in logs
            if temporary or orphan_index:
                doomed.append(name)
        if doomed:
            unlink_durably([os.path.join(self.directory, n) for n in doomed], self.directory)

    # ---- producer state -------------------------------------------------------------------------

    def restore_producer_state(self, repair: bool) -> tuple[int, int]:
        """Load the newest usable snapshot; returns where the replay must start (segment, position).

        A snapshot is usable only if its offset is a batch boundary inside the log: one
        from beyond a cut tail (KAFKA-5747) or a corrupt one is skipped, and deleted when
        this process may write.
        """
        start = self.segments[0].base_offset
        now = self._clock()
        for offset, path in reversed(list_snapshots(self.directory)):
            if offset < start:
                if repair:
                    delete_snapshot(path)
                continue
            location = self.locate(offset)
            try:
                entries = read_snapshot(path) if location is not None else None
            except (CorruptSnapshotError, FileNotFoundError):
                entries = None
            if location is None or entries is None:
                if repair:
                    delete_snapshot(path)
                continue
            self.state.load(entries, offset, now)
            return location
        self.state.reset(start)
        return 0, 0

    def locate(self, offset: int) -> tuple[int, int] | None:
        """(segment index, file position) of the batch starting at `offset`, or of the end if it is the end.

        None when `offset` is not a batch boundary of whole, CRC-valid batches. Corruption
        passed on the way (valid batches follow it) does not make the offset unknown: the
        replay from there, or a read of the damage, reports it.
        """
        idx = segment_index_for(self.segments, offset)
        seg = self.segments[idx]
        if offset == seg.base_offset:
            return idx, 0
        position = seg.probe_position(offset)
        end = seg.file_size()
        while True:
            try:
                return self._locate_from(idx, seg, position, end, offset)
            except CorruptRecordError as exc:
                # CRC-checked: a snapshot written after a batch that was later torn (power loss)
                # must not be trusted, or the torn batch would survive recovery. Corruption with
                # valid batches after it is no torn tail: the snapshot past it is still the truth.
                damage = seg.records.judge_damage(
                    exc.position if exc.position is not None else position, last_segment=idx == len(self.segments) - 1
                )
                if damage.torn_tail or damage.resume is None:
                    return None
                position = damage.resume

    @staticmethod
    def _locate_from(idx: int, seg: LogSegment, position: int, end: int, offset: int) -> tuple[int, int] | None:
        """`locate`'s walk from `position`; damage raises."""
        for pos, batch in seg.iter_batches(position, end):
            if batch.base_offset >= offset:
                # The batch at `offset`, or the first after a gap cleaning left (compacted
                # segments keep offsets, not every batch): the replay starts there either way.
                return idx, pos
            if batch.last_offset >= offset:
                return None
            if batch.last_offset + 1 == offset:
                return idx, pos + batch.size  # whatever follows is validated by the replay
        return None

    def state_at_segment_start(self, seg: LogSegment) -> ProducerStateManager:
        return state_at_segment_start(self.directory, self.segments, self.segments.index(seg))

    # ---- the replay (recovery, and catching up on other writers) -----------------------------------

    def replay(self, seg_idx: int, position: int, *, repair: bool) -> int:
        """Apply every whole batch from (segment, position) to the end; returns bytes scanned.

        Bad bytes get the one rule (`FileRecords.judge_damage`), whoever scans: a torn tail
        of the last segment is cut with `repair` (caller holds the lock) and otherwise ends
        the scan quietly (it may be a write in flight). Corruption (valid batches after it,
        or a sealed segment) is noted in `self.corruption`, where writes refuse with it and
        a read of it raises, and the scan goes on at the next valid batch: the view's log
        end, offsets and markers past the damage are the file's, never a shorter log.
        With `repair`, index gaps left by a crashed writer are filled.
        """
        scanned = 0
        segments = self.segments
        for i in range(seg_idx, len(segments)):
            seg = segments[i]
            pos = position if i == seg_idx else 0
            seg.size = pos
            seg.next_offset = self.state.end_offset if i == seg_idx else seg.base_offset
            if pos == 0:
                self.txn_check.expect(seg, 0, seg.base_offset)  # replayed whole: every abort is counted
            last_segment = i == len(segments) - 1
            done, whole = self._replay_segment(seg, pos, last_segment, repair)
            scanned += done
            if not whole:
                return scanned  # a torn tail: the end of the log
            if not last_segment:
                following = segments[i + 1].base_offset
                if seg.next_offset > following:
                    raise CorruptRecordError(
                        f"segment overlaps the next one (ends at offset {seg.next_offset})", path=seg.log_path
                    )
                if seg.size < seg.file_size():  # damage reached its end: a sealed segment is read to its file end
                    seg.size, seg.next_offset = seg.file_size(), following
                    self.state.end_offset = max(self.state.end_offset, following)
        return scanned

    def _replay_segment(self, seg: LogSegment, position: int, last_segment: bool, repair: bool) -> tuple[int, bool]:
        """Replay one segment from `position`: (bytes scanned, False if it ended at a torn tail)."""
        scanned = 0
        rechecked = -1
        while True:
            try:
                for bpos, batch in seg.iter_batches(position):
                    self._apply_replayed(seg, batch, bpos, repair)
                    scanned += batch.size
                if seg.size >= seg.file_size():
                    return scanned, True
                raise CorruptRecordError("incomplete batch", path=seg.log_path, position=seg.size)
            except CorruptRecordError as exc:
                at = max(seg.size, exc.position if exc.position is not None else seg.size)
                damage = seg.records.judge_damage(at, last_segment=last_segment)
                if damage.torn_tail:
                    if repair:
                        self._cut_torn_tail(seg)
                    return scanned, False
                if not repair and rechecked != at and seg.records.whole_batch_at(at):
                    # Read without the lock: a writer may have cut a torn tail and appended
                    # since, putting a batch where the bad bytes were. Read them once more.
                    rechecked = position = at
                    continue
                self._note_corruption(seg, exc, damage)
                if damage.resume is None:
                    return scanned, True  # the rest of a sealed segment: the next one goes on
                position = damage.resume

    def _note_corruption(self, seg: LogSegment, exc: CorruptRecordError, damage: Damage) -> None:
        """Remember the first corruption this view met; markers in it went uncounted."""
        self.txn_check.expect(seg, None, seg.base_offset)
        if self.corruption is not None:
            return
        reason = str(exc)
        where = reason.rfind(f" in {exc.path}") if exc.path else -1
        self.corruption = CorruptRecordError(
            damage.describe(reason[:where] if where >= 0 else reason), path=seg.log_path, position=damage.position
        )
        self.corruption_offset = seg.next_offset

    def _apply_replayed(self, seg: LogSegment, batch: RecordBatch, position: int, repair: bool) -> None:
        if batch.base_offset < self.state.end_offset:
            raise CorruptRecordError(
                f"batch offset {batch.base_offset} goes backwards (expected >= {self.state.end_offset})",
                path=seg.log_path,
                position=position,
            )
        txn = replay_abort(self.state, batch)
        seg.note_batch(batch, position)
        if txn is not None:
            self.txn_check.note_abort(seg, txn.last_offset)
            self._index_replayed_abort(seg, txn, repair)

    def _index_replayed_abort(self, seg: LogSegment, txn: AbortedTxn, repair: bool) -> None:
        """Recovery's side of the txn index: append an abort it lacks, rebuild it if it disagrees.

        An abort below the last entry must already be indexed, for the same producer and
        first offset; otherwise an entry was deleted or altered. This replay is the one
        place a deleted entry is noticed. The LSO is not compared: a replay that lost older
        producer state (no snapshot left after retention) may compute it differently.
        A view that may not write (read-only, or no lock held) keeps a replayed list instead.
        """
        last = seg.txn_index.last_entry()
        if repair and (last is None or last.last_offset < txn.last_offset):
            seg.txn_index.append(txn)
            return
        indexed = seg.txn_index.entry_at(txn.last_offset)
        if self.txn_check.replayed(seg) is None and (indexed is None or indexed[:2] != txn[:2]):
            if repair:
                self.rewrite_txn_index(seg)
            else:
                self.txn_check.replace_with_replay(seg, self.state_at_segment_start(seg))

    def _cut_torn_tail(self, seg: LogSegment) -> None:
        """Cut a torn tail at the end of the last whole batch (caller holds the lock: no write is in flight)."""
        seg.truncate(seg.size, seg.next_offset)
        delete_snapshots_after(self.directory, seg.next_offset)

    # ---- derived files: the indexes ---------------------------------------------------------------

    def check_indexes(self, repair: bool) -> None:
        """Rebuild any index that is missing or fails its checks (indexes are derived data).

        Every segment gets a constant-time check at open (files present, whole entries, last
        entry inside the segment: what a crash leaves), so opening grows neither with the log
        nor with the active segment (Kafka loads its indexes lazily too), and the full one
        before its first lookup (PartitionLog._indexes_checked_repairing) or, for the active
        segment, before a writer's first write to it (PartitionLog._catch_up).
        A process that may not write (read-only) stops trusting a damaged index instead:
        its lookups scan the segment, so the damage never changes what a reader sees.
        """
        for seg in self.segments:
            try:
                seg.quick_index_check()
            except CorruptIndexError:
                self.repair_indexes(seg, repair)

    def repair_indexes(self, seg: LogSegment, repair: bool) -> None:
        """Rebuild `seg`'s indexes from its batches when `repair` (lock held), else stop trusting them.

        A view that met corruption rebuilds nothing: the rebuild would stop at the damage.
        """
        if repair and self.corruption is None:
            self.rebuild_indexes(seg)
        else:
            seg.indexes_trusted = False
            seg.indexes_verified = True

    def rebuild_indexes(self, seg: LogSegment) -> None:
        """Rewrite a segment's three indexes from its batches (Kafka's segment recovery); lock held."""
        state = self.state_at_segment_start(seg)
        seg.txn_index.reset()
        seg.rebuild_indexes(abort_replayer(state, seg.txn_index.append))
        self.txn_check.mark_rebuilt(seg)

    def rewrite_txn_index(self, seg: LogSegment) -> None:
        """Rewrite a segment's `.txnindex` from its batches, durably (caller holds the lock)."""
        self.txn_check.rewrite(seg, self.state_at_segment_start(seg), readable_end(self.segments, seg))

    def drop_stale_txn_entries(self) -> tuple[int, int] | None:
        """Remove `.txnindex` entries of the active segment for markers that never reached the log.

        append_marker makes the entry durable before the marker; a writer that died in
        between leaves an entry at an offset the next append would reuse. Lock held.
        Returns the file's (size, mtime_ns) when it holds no such entry (NO_TXNINDEX when there
        is no file), None when it held one (dropped now) or the look was cut short. Only appending
        to the file brings such an entry, and that changes its size and mtime (creating it moves
        the directory's): while the file keeps that key (and the `.log` its length), a writer's
        catch-up may skip this look (PartitionLog._quiet_append).
        """
        active = self.segments[-1]
        looked = active.txn_index.last_look()  # the writer's one look at it in this lock hold
        if looked is None:
            return NO_TXNINDEX  # the usual case: no abort has landed in this segment
        last, key = looked
        if last is None or last.last_offset < active.next_offset:
            return key
        if self._dead_writers_entry(active, last):
            active.txn_index.truncate_to(active.next_offset)
        else:
            # An entry past the log end that no dying writer leaves: damage, which truncating
            # would turn into a lost abort. Rebuild from the log instead.
            self.rewrite_txn_index(active)
        return None

    def _dead_writers_entry(self, active: LogSegment, last: AbortedTxn) -> bool:
        """Whether `last` is what append_marker leaves when it dies before the marker.

        That entry is alone past the end, names the very offset the marker would have taken,
        and its transaction is still open in the producer state replayed from the log.
        """
        entries = active.txn_index.entries()
        alone = len(entries) < 2 or entries[-2].last_offset < active.next_offset
        return (
            alone
            and last.last_offset == active.next_offset
            and self.state.open_transactions().get(last.producer_id) == last.first_offset
        )


# ---- an interrupted cleaner swap (Kafka's LogLoader: .cleaned, .swap and .deleted files) -----------


def recover_swaps(directory: str) -> None:
    """Finish or undo a cleaner's swap cut short (caller holds the partition's lock), as Kafka's LogLoader does.

    * `.deleted` files are what a swap had already replaced: removed (with every temp file, later).
    * `.cleaned` files are a cleaning that never reached its swap: removed; a `.swap` at or past
      the smallest of them belongs to a swap whose renames to `.swap` were not all done, so the
      replaced segments are all still there: it is removed too.
    * A `.swap` index is removed (its segment's indexes are rebuilt from the log).
    * A remaining `.log.swap` is the cleaned segment of a swap past its point of no return: the
      cleaner checkpoint is raised to its end (`log_cleaner.swap_completed`), the segments it
      replaces (the `.log` files with bases in [its base, its next offset)) are removed, and it
      takes its real name.
    """
    doomed, swaps = swaps_to_complete(os.listdir(directory))
    if doomed:
        unlink_durably([os.path.join(directory, n) for n in doomed], directory)
    for base in swaps:
        _complete_swap(directory, base)


def swaps_to_complete(names: list[str]) -> tuple[list[str], list[int]]:
    """(the `.swap` names recovery removes, the bases of the `.log.swap` files it completes, ascending).

    The one rule for what a swap cut short means, for recovery (`recover_swaps`) and for every
    listing of the segments (`LogLoader.segment_listing`), so a reader reads what recovery will leave.
    """
    prefixes = (n.split(".", 1)[0] for n in names if n.endswith(CLEANED_FILE_SUFFIX))
    min_cleaned = min((int(p) for p in prefixes if p.isdigit() and p.isascii()), default=None)
    doomed: list[str] = []
    swaps: list[int] = []
    for name in names:
        if name.endswith(SWAP_FILE_SUFFIX):
            base = offset_of(name, _SWAP_LOG_SUFFIX)
            if base is None or (min_cleaned is not None and base >= min_cleaned):
                doomed.append(name)
            else:
                swaps.append(base)
    return doomed, sorted(swaps)


def _complete_swap(directory: str, base: int) -> None:
    swap_path = segment_file(directory, base, _SWAP_LOG_SUFFIX)
    end = _next_offset_of(swap_path, base)
    from storage.log_cleaner import swap_completed  # here: opening a log without a swap never loads the cleaner

    swap_completed(directory, end)  # before a replaced segment goes (storage/log_cleaner.py docstring)
    replaced: list[str] = []
    for name in os.listdir(directory):
        offset = offset_of(name, LOG_FILE_SUFFIX)
        if offset is not None and base <= offset < end:
            replaced.extend(
                segment_file(directory, offset, suffix) for suffix in (LOG_FILE_SUFFIX, *INDEX_FILE_SUFFIXES)
            )
    for suffix in INDEX_FILE_SUFFIXES:  # the cleaned segment's indexes are rebuilt from its log
        replaced.append(segment_file(directory, base, suffix))
    unlink_durably(replaced, directory)
    os.rename(swap_path, segment_file(directory, base, LOG_FILE_SUFFIX))
    fsync_dir(directory)


def _next_offset_of(path: str, base: int) -> int:
    """The offset after the last whole batch of a segment file (its base if it holds none)."""
    with FileRecords.open(path) as records:
        last = _last_header(records)
    return base if last is None else last.last_offset + 1


def _last_header(records: FileRecords) -> BatchHeader | None:
    """The header of a segment file's last whole batch (None if it holds none), by a walk over every header."""
    last = None
    try:
        for header in records.headers():
            last = header
    except CorruptRecordError:
        pass  # a torn tail: what precedes it is the segment
    return last


@dataclass(frozen=True)
class _SwapRead:
    """What a listing read of a `.log.swap`: its base, its size and the header of its last whole batch."""

    base: int
    size: int
    last: BatchHeader | None

    @property
    def end(self) -> int:
        """The offset after the swap's last batch: where the segments it replaces end."""
        return self.base if self.last is None else self.last.last_offset + 1

    def still_last(self, records: FileRecords) -> bool:
        """Whether `records` (of this size) holds the same last batch where this one read it.

        The header carries the batch's CRC: a file of the same size with the same header at the
        same place holds the same last batch, whatever its inode. A cleaned file is written
        whole before it is named `.swap`, so its size says where its last batch ends.
        """
        if self.last is None:
            return self.size == 0
        try:
            return records.header_at(self.last.position) == self.last
        except (CorruptRecordError, UnsupportedForMessageFormatError):
            return False
