"""Per-producer state of one partition: the idempotence and transaction rules of Kafka's leader.

For every producer id the partition remembers its epoch, the coordinator epoch of its
last marker, the sequence ranges and offsets of its last 5 data batches (the
duplicate-detection window, matching `max.in.flight.requests.per.connection` ≤ 5), and the
first offset of its open transaction. Client batches are checked against this state
(docs/kafka-formats.md §5.1) before a byte is written; markers complete transactions and
feed the transaction index and the last stable offset (docs/kafka-formats.md §5.5).

Validation never mutates the manager: a `ProducerAppend` stages copies of the entries
it touches, and the partition log commits them only after the bytes are durable, so a
failed write or fsync leaves the state exactly as it was (the sequence is not consumed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

from storage._native import ProducerStateEntry, check_batch
from storage._native import check_sequence as check_sequence  # the sequence rule alone, for its tests
from storage.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from storage.producer_snapshot import SnapshotEntry
from storage.records import ControlType, RecordBatch
from storage.sequence import dec_seq

# The size of a producer's duplicate window (storage/native/src/producer.rs holds the window).
BATCH_WINDOW = ProducerStateEntry.BATCH_WINDOW
NO_OFFSET = -1

# Called with (producer_id, epoch) before a producer's first transactional write to the
# partition; False means the coordinator never registered the partition (KIP-890 part 1).
TxnVerifier = Callable[[int, int], bool]


class BatchMetadata(NamedTuple):
    """Where one data batch of a producer landed: enough to answer its retry."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class CompletedTxn(NamedTuple):
    """A transaction finished by a marker at `last_offset` (the marker's own offset)."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


def to_snapshot(entry: ProducerStateEntry) -> SnapshotEntry:
    """The entry as a snapshot keeps it: Kafka's snapshot keeps only the last data batch of each producer."""
    batches = entry.batches
    if batches:
        last = batches[-1]
        return SnapshotEntry(
            entry.producer_id,
            entry.epoch,
            last.last_seq,
            last.last_offset,
            last.last_offset - last.first_offset,
            entry.last_timestamp,
            entry.coordinator_epoch,
            entry.current_txn_first_offset,
        )
    return SnapshotEntry(
        entry.producer_id,
        entry.epoch,
        -1,
        -1,
        0,
        entry.last_timestamp,
        entry.coordinator_epoch,
        entry.current_txn_first_offset,
    )


def from_snapshot(s: SnapshotEntry) -> ProducerStateEntry:
    """The entry a snapshot's line restores: its one batch is the window (`to_snapshot`)."""
    entry = ProducerStateEntry(s.producer_id, s.epoch, s.coordinator_epoch, s.timestamp, s.current_txn_first_offset)
    if s.last_offset >= 0:
        first_seq = dec_seq(s.last_sequence, s.offset_delta) if s.last_sequence >= 0 else -1
        entry.add_batch(
            s.epoch,
            BatchMetadata(first_seq, s.last_sequence, s.last_offset - s.offset_delta, s.last_offset, s.timestamp),
            False,
        )
    return entry


class ProducerStateManager:
    """All producer entries of one partition plus the offset they are valid up to."""

    def __init__(self, *, expiration_ms: int = 86400000, max_producers: int = 0):
        self.producers: dict[int, ProducerStateEntry] = {}
        self.end_offset = 0
        self.expiration_ms = expiration_ms
        self.max_producers = max_producers

    # ---- queries -------------------------------------------------------------------------

    def get(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def first_unstable_offset(self) -> int | None:
        """First offset of the earliest open transaction; the LSO can never pass it."""
        firsts = [e.current_txn_first_offset for e in self.producers.values() if e.has_open_txn]
        return min(firsts) if firsts else None

    def last_stable_offset(self, log_start: int, log_end: int) -> int:
        """The LSO of a log spanning [log_start, log_end): the first unstable offset, else the log end.

        Clamped into the log, since an open transaction may start before a moved log start.
        """
        first = self.first_unstable_offset()
        return log_end if first is None else max(min(first, log_end), log_start)

    def open_transactions(self) -> dict[int, int]:
        """producer id -> first offset of its open transaction."""
        return {pid: e.current_txn_first_offset for pid, e in self.producers.items() if e.has_open_txn}

    def last_stable_offset_for_abort(self, producer_id: int, marker_offset: int) -> int:
        """The LSO recorded in an AbortedTxn entry: earliest open txn of another producer, else marker + 1."""
        firsts = [
            e.current_txn_first_offset for pid, e in self.producers.items() if e.has_open_txn and pid != producer_id
        ]
        return min(firsts) if firsts else marker_offset + 1

    # ---- snapshots -----------------------------------------------------------------------

    def snapshot_entries(self) -> list[SnapshotEntry]:
        return [to_snapshot(e) for e in self.producers.values()]

    def load(self, entries: Iterable[SnapshotEntry], end_offset: int, now_ms: int) -> None:
        self.producers = {s.producer_id: from_snapshot(s) for s in entries}
        self.end_offset = end_offset
        self.expire(now_ms)

    def reset(self, end_offset: int) -> None:
        self.producers = {}
        self.end_offset = end_offset

    # ---- expiry and the per-partition cap --------------------------------------------------

    def expire(self, now_ms: int) -> list[int]:
        """Forget producers idle for producer.id.expiration.ms; an open transaction pins a producer."""
        gone = [
            pid
            for pid, e in self.producers.items()
            if not e.has_open_txn and now_ms - e.last_timestamp >= self.expiration_ms
        ]
        for pid in gone:
            del self.producers[pid]
        return gone

    def _make_room(self) -> None:
        """Evict least recently written producers (never ones with an open transaction)."""
        if self.max_producers <= 0:
            return
        excess = len(self.producers) - self.max_producers
        if excess <= 0:
            return
        for pid in [pid for pid, e in self.producers.items() if not e.has_open_txn][:excess]:
            del self.producers[pid]

    def _put(self, entry: ProducerStateEntry) -> None:
        """Insert or refresh, keeping dict order = least recently written first."""
        self.producers.pop(entry.producer_id, None)
        self.producers[entry.producer_id] = entry
        self._make_room()

    def wrote(self, entry: ProducerStateEntry) -> None:
        """`_put` of an entry of this manager that just took a batch in place (the quiet append,
        storage/native/src/bindings/append.rs): the most recently written now, and no new one to make room for."""
        producers = self.producers
        pid = entry.producer_id
        if next(reversed(producers)) != pid:
            del producers[pid]
            producers[pid] = entry

    # ---- replay (recovery and catching up on other processes' appends): no checks ------------

    def replay_data(
        self,
        producer_id: int,
        epoch: int,
        base_seq: int,
        last_seq: int,
        first_offset: int,
        last_offset: int,
        max_timestamp: int,
        is_transactional: bool,
    ) -> None:
        entry = self.producers.pop(producer_id, None) or ProducerStateEntry(producer_id)
        entry.add_batch(
            epoch, BatchMetadata(base_seq, last_seq, first_offset, last_offset, max_timestamp), is_transactional
        )
        self._put(entry)

    def replay_batch(self, batch: RecordBatch) -> CompletedTxn | None:
        """Apply a batch read from the log (origin REPLICATION: no checks); returns the transaction a marker ends.

        Recovery, catch-up on other processes' appends and every rebuild from the log feed
        batches through here, so they all derive the same state from the same bytes.
        """
        self.end_offset = batch.last_offset + 1
        if not batch.has_producer_id:
            return None
        if batch.is_control:
            if batch.records_count == 0:
                return None
            marker = batch.control_marker()
            return self.replay_marker(
                batch.producer_id,
                batch.producer_epoch,
                int(marker.control_type),
                marker.coordinator_epoch,
                batch.base_offset,
                batch.max_timestamp,
            )
        self.replay_data(
            batch.producer_id,
            batch.producer_epoch,
            batch.base_sequence,
            batch.last_sequence,
            batch.base_offset,
            batch.last_offset,
            batch.max_timestamp,
            batch.is_transactional,
        )
        return None

    def replay_marker(
        self, producer_id: int, epoch: int, control_type: int, coordinator_epoch: int, offset: int, timestamp: int
    ) -> CompletedTxn | None:
        """Apply a marker read from the log; Kafka-only control types (KRaft) change nothing."""
        if control_type not in (ControlType.ABORT, ControlType.COMMIT):
            return None
        entry = self.producers.pop(producer_id, None) or ProducerStateEntry(producer_id)
        completed = _complete(entry, epoch, control_type, coordinator_epoch, offset, timestamp)
        self._put(entry)
        return completed


def _complete(
    entry: ProducerStateEntry, epoch: int, control_type: int, coordinator_epoch: int, offset: int, timestamp: int
) -> CompletedTxn | None:
    completed = None
    if entry.has_open_txn:
        completed = CompletedTxn(
            entry.producer_id, entry.current_txn_first_offset, offset, control_type == ControlType.ABORT
        )
    entry.update_epoch(epoch)
    entry.coordinator_epoch = coordinator_epoch
    entry.last_timestamp = timestamp
    entry.current_txn_first_offset = NO_OFFSET
    return completed


class ProducerAppend:
    """Validates one append call's batches against staged copies of the producer entries.

    Batches are checked in order, each seeing the effect of the ones before it in the
    same call (Kafka's ProducerAppendInfo); nothing reaches the manager until `commit`.
    """

    def __init__(self, manager: ProducerStateManager, verify_txn: TxnVerifier | None = None):
        self._manager = manager
        # Every producer the call looked at, in the order it first did, with the entry `commit` puts
        # back: the manager's own while the call only read it, the call's copy once it staged a
        # change (`_copied`). Copy on write: a check alone copies nothing, so a lone batch's check
        # costs no copy of its producer's window (issue 26).
        self._staged: dict[int, ProducerStateEntry | None] = {}
        self._copied: set[int] = set()
        self._verify_txn = verify_txn

    def _entry(self, producer_id: int) -> ProducerStateEntry | None:
        """The producer's entry as this call sees it, to read (never to change: see `_writable`)."""
        staged = self._staged
        if producer_id in staged:
            return staged[producer_id]
        entry = staged[producer_id] = self._manager.get(producer_id)
        return entry

    def _writable(self, producer_id: int) -> ProducerStateEntry:
        """The call's own copy of the producer's entry, made on its first change (a new entry if none)."""
        if producer_id in self._copied:
            entry = self._staged[producer_id]
            assert entry is not None, "a copied entry is staged"
            return entry
        current = self._entry(producer_id)
        entry = current.copy() if current is not None else ProducerStateEntry(producer_id)
        self._staged[producer_id] = entry
        self._copied.add(producer_id)
        return entry

    def check_data(
        self, producer_id: int, epoch: int, base_seq: int, last_seq: int, is_transactional: bool
    ) -> BatchMetadata | None:
        """Raise if the batch must be refused; return the original batch if it is a retry.

        The rules (docs/kafka-formats.md §5.1) are storage/native/src/producer.rs `check`, the one the
        quiet append (storage/native/src/bindings/append.rs) makes too; only the transaction
        verifier, a Python callable, is consulted here, last, for a batch opening a transaction.
        """
        entry = self._entry(producer_id) if producer_id >= 0 else None
        verdict = check_batch(entry, producer_id, epoch, base_seq, last_seq, is_transactional)
        if verdict is True and self._verify_txn is not None and not self._verify_txn(producer_id, epoch):
            raise InvalidTxnStateError(
                f"partition is not registered in a transaction of producer {producer_id} epoch {epoch}"
            )
        return verdict if type(verdict) is BatchMetadata else None

    def stage_data(self, producer_id: int, epoch: int, meta: BatchMetadata, is_transactional: bool) -> None:
        """Record an accepted batch (with its assigned offsets) in the staged entry."""
        self._writable(producer_id).add_batch(epoch, meta, is_transactional)

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> bool:
        """Validate a coordinator's marker; False means it repeats the last one and must not be written.

        Under transaction protocol v2 every transaction ends with an epoch bump, so a marker
        whose epoch equals the producer's current epoch while no transaction is open and no
        data was written since can only be a re-sent marker (roll-forward after a crash):
        writing it again would add a second control record (KAFKA-19999).
        """
        entry = self._entry(producer_id)
        if entry is None:
            return True
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"marker epoch {epoch} is older than producer {producer_id}'s epoch {entry.epoch}"
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker coordinator epoch {coordinator_epoch} < {entry.coordinator_epoch}"
            )
        return not (epoch == entry.epoch and not entry.has_open_txn and not entry.batches)

    def stage_marker(
        self, producer_id: int, epoch: int, control_type: int, coordinator_epoch: int, offset: int, timestamp: int
    ) -> CompletedTxn | None:
        return _complete(self._writable(producer_id), epoch, control_type, coordinator_epoch, offset, timestamp)

    def commit(self) -> None:
        for entry in self._staged.values():
            if entry is not None:
                self._manager._put(entry)
