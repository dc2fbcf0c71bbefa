"""The `.txnindex` checked against the log's ABORT markers before a read_committed reader trusts it.

A reader skips an aborted transaction's data on the word of its `.txnindex` entry. The
index's structural checks cannot see an entry whose offsets or producer id changed to other
plausible values, yet a reader would then skip the wrong data (or show aborted data). So
this process checks each entry once, lazily (opening stays O(1) in log size), at a few
single-batch reads per entry; a mismatch means the index is rebuilt from the log: rewritten
by a view that may write, replaced by a replayed list in one that may not.

The check keeps its own per-segment state (how many leading entries were checked, and a
read-only view's replayed list): it lives exactly as long as this process's view of the
segment, so a reload (new segment objects) or retention (segment dropped) starts it over.

Checking the entries an index holds cannot see entries it lost (a deleted, emptied or cut
file, one entry dropped). So each segment also has a count of the entries its ABORT markers
call for, known without trusting the index: the count checkpoint (`read_txn_counts`,
`write_txn_counts`) covers what a later open does not replay, the replay and this view's own
appends count the rest, and a segment whose count is unknown is scanned once before its
index is first trusted (docs/reliability-scenarios.md rule 16).

The replay half (`replay_abort`, `AbortReplay`) derives entries from batches as recovery
does; the log loader's replay and the store's integrity check use it too.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from weakref import WeakKeyDictionary

from storage.checkpoint import TXN_INDEX_COUNT_CHECKPOINT, checkpoint_line, read_checkpoint, write_checkpoint_lines
from storage.errors import CorruptIndexError, KafkaStorageError
from storage.producer_state import ProducerStateManager
from storage.records import RecordBatch
from storage.segment import LogSegment
from storage.transaction_index import AbortedTxn

# offset -> the CRC-checked batch holding it, or None (a lookup that may repair the offset index).
BatchLookup = Callable[[int], "RecordBatch | None"]


# ---- entries derived from the log ------------------------------------------------------------


def replay_abort(state: ProducerStateManager, batch: RecordBatch) -> AbortedTxn | None:
    """Apply a log batch to `state`; the `.txnindex` entry it calls for if it is an ABORT marker
    that ends a transaction."""
    lso = _abort_lso(state, batch)
    completed = state.replay_batch(batch)
    if completed is None or not completed.is_aborted:
        return None
    assert lso is not None, "only a marker completes a transaction, and a marker has a producer id"
    return AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset, lso)


def _abort_lso(state: ProducerStateManager, batch: RecordBatch) -> int | None:
    """The LSO an AbortedTxn entry records, computed before the marker closes its transaction."""
    if batch.is_control and batch.has_producer_id:
        return state.last_stable_offset_for_abort(batch.producer_id, batch.base_offset)
    return None


def abort_replayer(state: ProducerStateManager, sink: Callable[[AbortedTxn], None]) -> Callable[[RecordBatch], None]:
    """Recovery's replay of one segment's batches from `state`, handing each abort's entry to `sink`.

    Batches below the state's end offset are already in it and are passed over.
    """

    def replay(batch: RecordBatch) -> None:
        if batch.base_offset < state.end_offset:
            return
        txn = replay_abort(state, batch)
        if txn is not None:
            sink(txn)

    return replay


class AbortReplay:
    """A segment's aborted transactions replayed from its batches, resumable as the segment grows.

    A read-only view keeps one in place of a `.txnindex` that failed its check against the
    markers; a writable view uses one to rewrite that file.
    """

    def __init__(self, state: ProducerStateManager):
        self.aborts: list[AbortedTxn] = []
        self.position = 0
        self._replay = abort_replayer(state, self.aborts.append)

    def advance(self, seg: LogSegment, end: int) -> list[AbortedTxn]:
        """Replay the batches between the last position and `end`; returns every abort so far."""
        for position, batch in seg.iter_batches(self.position, end, strict=True):
            self._replay(batch)
            self.position = position + batch.size
        return self.aborts


# ---- the count checkpoint: what each `.txnindex` must hold ----------------------------------------


def read_txn_counts(directory: str) -> dict[int, tuple[int, int]]:
    """segment base -> (through, count): `count` entries are due for ABORT markers below offset `through`.

    A missing or damaged checkpoint reads as empty: every segment's count is then unknown and
    its index is checked by a scan before first use, so losing this file costs time, not data.
    """
    try:
        rows = read_checkpoint(os.path.join(directory, TXN_INDEX_COUNT_CHECKPOINT), fields=3)
        return {int(base): (int(through), int(count)) for base, through, count in rows}
    except (CorruptIndexError, KafkaStorageError, ValueError):
        return {}


def write_txn_counts(directory: str, segments: list[LogSegment], check: TxnIndexCheck) -> None:
    """Record the counts this view knows (caller holds the lock and is caught up to every segment's end).

    Written before each producer-state snapshot, so the bytes a later open does not replay
    (those below its snapshot) are covered by counts at least that recent.
    """
    write_checkpoint_lines(os.path.join(directory, TXN_INDEX_COUNT_CHECKPOINT), check.count_lines(segments))


# ---- the check and its per-segment state -------------------------------------------------------


@dataclass
class _SegmentCheck:
    checked: int = 0  # leading `.txnindex` entries found to agree with the log
    replay: AbortReplay | None = None  # a read-only view's replacement for an index that failed
    # How many entries the log calls for with an ABORT marker below `through`, as far as this
    # view knows without trusting the `.txnindex` (the count checkpoint, its own replays and
    # appends), or None when it does not know: the segment is then scanned before its index is
    # trusted. Markers from `through` on were replayed or appended by this view and counted.
    expected: int | None = None
    through: int = 0


class TxnIndexCheck:
    """This process's check of each segment's `.txnindex`, and what it found so far."""

    def __init__(self) -> None:
        # Keyed by the segment object: a reloaded or deleted segment takes its state with it.
        self._segments: WeakKeyDictionary[LogSegment, _SegmentCheck] = WeakKeyDictionary()
        # `count_lines`' lines of the sealed segments it was last given ("" where the count is
        # unknown), in step with them, kept until one of them changes (`_changed`): a roll then
        # formats one line, not one per segment. Strong references: no id below can be reused.
        self._lines_of: list[LogSegment] = []
        self._lines: list[str] = []
        self._lines_members: set[int] = set()

    def _of(self, seg: LogSegment) -> _SegmentCheck:
        found = self._segments.get(seg)
        if found is None:
            found = self._segments[seg] = _SegmentCheck()
        return found

    def _changed(self, seg: LogSegment) -> None:
        """`seg`'s count changed: forget the lines `count_lines` keeps if it is among them."""
        if id(seg) in self._lines_members:
            self._lines_of, self._lines, self._lines_members = [], [], set()

    def count_lines(self, segments: list[LogSegment]) -> list[str]:
        """The count checkpoint's lines for `segments` (each known count: base, through, count).

        The sealed segments' lines are kept between calls: those of a segment list that only
        lost leading segments (retention) or gained segments after them (rolls) are reused, so
        a roll costs one line (and a copy at C speed), whatever the number of segments.
        """
        sealed = segments[:-1]
        kept = self._lines_of
        start = 0
        if kept and sealed:
            try:
                start = kept.index(sealed[0])  # retention dropped the ones before it
            except ValueError:
                start = -1
        if start < 0 or sealed[: len(kept) - start] != kept[start:]:
            kept, start = [], 0
            self._lines_members = set()
        added = sealed[len(kept) - start :]
        lines = self._lines[start:] + [self._count_line(seg) for seg in added]
        self._lines_members.difference_update(id(seg) for seg in kept[:start])
        self._lines_members.update(id(seg) for seg in added)
        self._lines_of, self._lines = sealed, lines
        return list(filter(None, lines + [self._count_line(seg) for seg in segments[-1:]]))

    def _count_line(self, seg: LogSegment) -> str:
        count = self.known_count(seg)
        return "" if count is None else checkpoint_line((seg.base_offset, seg.next_offset, count))

    def replayed(self, seg: LogSegment) -> AbortReplay | None:
        """The replayed list this view reads in place of `seg`'s `.txnindex`, if its check failed."""
        found = self._segments.get(seg)
        return None if found is None else found.replay

    def replace_with_replay(self, seg: LogSegment, state_at_start: ProducerStateManager) -> AbortReplay:
        """Stop trusting `seg`'s `.txnindex` without writing: reads use a replay of its batches instead."""
        replay = self._of(seg).replay = AbortReplay(state_at_start)
        return replay

    def rewrite(self, seg: LogSegment, state_at_start: ProducerStateManager, end: int) -> None:
        """Rewrite `seg`'s `.txnindex` durably from its batches up to byte `end` (caller holds the lock)."""
        seg.txn_index.rewrite(AbortReplay(state_at_start).advance(seg, end))
        self.mark_rebuilt(seg)

    def mark_rebuilt(self, seg: LogSegment) -> None:
        """`seg`'s `.txnindex` was just written from the log: every entry agrees with it."""
        check = self._of(seg)
        check.checked, check.replay = seg.txn_index.stored_count(), None
        check.expected, check.through = _entries_below(seg, seg.next_offset), seg.next_offset
        self._changed(seg)

    # ---- what the index must hold (docs/reliability-scenarios.md rule 16) ----------------------------

    def expect(self, seg: LogSegment, count: int | None, through: int) -> None:
        """This view knows `count` entries are due for ABORT markers below `through` (None: unknown)."""
        check = self._of(seg)
        check.expected, check.through = count, through
        self._changed(seg)

    def note_abort(self, seg: LogSegment, marker_offset: int) -> None:
        """An abort this view replayed or appended at `marker_offset`: one more entry is due."""
        check = self._of(seg)
        if check.expected is not None and marker_offset >= check.through:
            check.expected += 1
            check.through = marker_offset + 1
            self._changed(seg)

    def known_count(self, seg: LogSegment) -> int | None:
        """How many entries `seg`'s `.txnindex` must hold for markers this view has seen, or None."""
        found = self._segments.get(seg)
        return None if found is None else found.expected

    def entries_lost(self, seg: LogSegment) -> bool | None:
        """Whether `seg`'s `.txnindex` holds fewer (or more) entries than the log calls for; None: unknown.

        A deleted, emptied, cut or thinned index passes every check of the entries it still
        holds; only the count of what it must hold tells. Entries past this view's end of the
        segment are left out: a writer makes an entry durable before its marker.
        """
        expected = self.known_count(seg)
        if expected is None:
            return None
        return _entries_below(seg, seg.next_offset) != expected

    def matches_replay(self, seg: LogSegment, replayed: list[AbortedTxn]) -> bool:
        """Whether the index holds exactly the aborts a scan of the segment replayed (LSO aside).

        The LSO is not compared: a replay that lost older producer state (no snapshot left
        after retention) may compute it differently. On a match the count becomes known.
        """
        stored = [txn[:3] for txn in seg.txn_index.entries() if txn.last_offset < seg.next_offset]
        if stored != [txn[:3] for txn in replayed]:
            return False
        self.expect(seg, len(replayed), seg.next_offset)
        return True

    def has_unchecked(self, seg: LogSegment) -> bool:
        """Whether `seg`'s `.txnindex` holds entries this view has not checked yet."""
        return self._of(seg).checked < seg.txn_index.stored_count()

    def first_mismatch(self, seg: LogSegment, *, active: bool, log_start: int, batch_at: BatchLookup) -> str | None:
        """Why `seg`'s `.txnindex` disagrees with the log, or None; advances what counts as checked.

        Entries past the end of this view's active segment are left unchecked: a writer makes
        the entry durable before its marker, which may still be in flight. `batch_at` is the
        log's lookup (which may repair an offset index on its first use of a segment).
        """
        try:
            seg.txn_index.sanity_check()
        except CorruptIndexError as exc:
            return str(exc)
        check = self._of(seg)
        previous: dict[int, int] = {}  # producer id -> marker offset of its previous entry here
        for i, txn in enumerate(seg.txn_index.entries()):
            if i >= check.checked:
                if active and txn.last_offset >= seg.next_offset:
                    return None
                problem = _entry_mismatch(seg, txn, previous.get(txn.producer_id), log_start, batch_at)
                if problem is not None:
                    return f"{seg.txn_index.path}: {txn} {problem}"
                check.checked = i + 1
            previous[txn.producer_id] = txn.last_offset
        return None


def _entry_mismatch(
    seg: LogSegment, txn: AbortedTxn, previous: int | None, log_start: int, batch_at: BatchLookup
) -> str | None:
    """What an entry claims that the batches it names deny, or None.

    The ABORT marker of its producer sits at last_offset, in this segment; a
    transactional batch of that producer starts at first_offset, after the producer's
    previous indexed abort; the LSO is marker + 1 or where another producer's
    transaction starts (docs/kafka-formats.md §5.5). A first_offset moved onto an earlier transaction of the
    same producer that is not indexed here passes: telling that apart needs a scan.
    """
    if not seg.base_offset <= txn.last_offset < seg.next_offset:
        return "lies outside the segment"
    if not is_abort_of(batch_at(txn.last_offset), txn.last_offset, txn.producer_id):
        return "does not name an ABORT marker of its producer"
    if previous is not None and txn.first_offset <= previous:
        return "overlaps the producer's previous aborted transaction"
    if not _starts_txn(txn.first_offset, txn.producer_id, log_start, batch_at, same_producer=True):
        return "does not start at a transactional batch of its producer"
    if txn.last_stable_offset != txn.last_offset + 1 and not _starts_txn(
        txn.last_stable_offset, txn.producer_id, log_start, batch_at, same_producer=False
    ):
        return "records an LSO that is not the start of another producer's transaction"
    return None


def _starts_txn(offset: int, producer_id: int, log_start: int, batch_at: BatchLookup, *, same_producer: bool) -> bool:
    """Whether a transactional data batch of (or, if not same_producer, not of) the producer starts at offset.

    Below the log start the batch went with its segment and cannot be checked; a
    reader never starts there, so such an offset reads the same as any other there.
    """
    if offset < log_start:
        return True
    batch = batch_at(offset)
    if batch is None:
        # No batch holds the offset: a gap the log cleaner left (it removes whole batches and
        # keeps every other offset; a log it never cleaned has no gaps). The batch went with
        # the data it held, so there is nothing left to check it against.
        return True
    return (
        batch is not None
        and batch.base_offset == offset
        and batch.is_transactional
        and not batch.is_control
        and (batch.producer_id == producer_id) == same_producer
    )


def _entries_below(seg: LogSegment, offset: int) -> int:
    """Entries of `seg`'s `.txnindex` whose ABORT marker lies below `offset`."""
    return seg.txn_index.count_below(offset)


def is_abort_of(batch: RecordBatch | None, offset: int, producer_id: int) -> bool:
    """Whether `batch` is the producer's ABORT marker at `offset`."""
    if batch is None or batch.base_offset != offset or not batch.is_control or batch.producer_id != producer_id:
        return False
    return batch.is_abort_marker()
