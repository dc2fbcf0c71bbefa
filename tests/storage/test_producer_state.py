"""ProducerStateManager / ProducerAppend: the idempotence and transaction state machine of one partition.

Pure state-machine tests, no files (Kafka's ProducerStateManagerTest grain): sequence checks,
the 5-batch duplicate window, epoch bumps, fencing, transactional state, the first unstable
offset, expiry and snapshots. The scenarios mirror docs/kafka-formats.md §5.1, §5.5 and the
ProducerStateManagerTest list of docs/kafka-formats.md §6.
"""

from __future__ import annotations

import pytest

from storage.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
    UnknownProducerIdError,
)
from storage.producer_snapshot import SnapshotEntry
from storage.producer_state import (
    BATCH_WINDOW,
    BatchMetadata,
    CompletedTxn,
    ProducerAppend,
    ProducerStateEntry,
    ProducerStateManager,
    check_sequence,
    from_snapshot,
    to_snapshot,
)
from storage.records import ControlType
from storage.sequence import INT32_MAX

PID = 1000
OTHER = 2000


class Partition:
    """A tiny leader: assigns offsets and commits staged state the way the partition log does."""

    def __init__(self, manager: ProducerStateManager | None = None, verify_txn=None) -> None:
        self.manager = manager or ProducerStateManager()
        self.next_offset = 0
        self.verify_txn = verify_txn

    def append(
        self, pid: int, epoch: int, base_seq: int, count: int = 1, *, txn: bool = False, ts: int = 1000
    ) -> BatchMetadata:
        """Append one data batch; return where it landed (the original place for a duplicate)."""
        last_seq = (base_seq + count - 1) if base_seq >= 0 else -1
        if base_seq >= 0 and base_seq > INT32_MAX - (count - 1):
            last_seq = count - 1 - (INT32_MAX - base_seq) - 1
        staged = ProducerAppend(self.manager, self.verify_txn)
        dup = staged.check_data(pid, epoch, base_seq, last_seq, txn)
        if dup is not None:
            return dup
        meta = BatchMetadata(base_seq, last_seq, self.next_offset, self.next_offset + count - 1, ts)
        if pid >= 0:
            staged.stage_data(pid, epoch, meta, txn)
        staged.commit()
        self.next_offset += count
        self.manager.end_offset = self.next_offset
        return meta

    def marker(
        self, pid: int, epoch: int, control: ControlType, *, coordinator_epoch: int = 0, ts: int = 2000
    ) -> tuple[int | None, CompletedTxn | None]:
        """Write a marker if the state machine wants it; (its offset or None, completed txn)."""
        staged = ProducerAppend(self.manager)
        if not staged.check_marker(pid, epoch, coordinator_epoch):
            return None, None
        offset = self.next_offset
        completed = staged.stage_marker(pid, epoch, control, coordinator_epoch, offset, ts)
        staged.commit()
        self.next_offset += 1
        self.manager.end_offset = self.next_offset
        return offset, completed


# ---- sequence numbers ---------------------------------------------------------------------------


def test_first_batch_sets_epoch_and_sequence_and_the_next_must_follow() -> None:
    p = Partition()
    p.append(PID, 0, 0, 3)
    entry = p.manager.get(PID)
    assert (entry.epoch, entry.last_seq) == (0, 2)
    assert p.append(PID, 0, 3, 2).first_offset == 3
    assert p.manager.get(PID).last_seq == 4


def test_sequence_gap_is_out_of_order_and_leaves_state_untouched() -> None:
    p = Partition()
    p.append(PID, 0, 0, 5)
    with pytest.raises(OutOfOrderSequenceError, match="expected sequence 5, got 6"):
        p.append(PID, 0, 6)
    assert p.manager.get(PID).last_seq == 4
    assert p.next_offset == 5
    assert p.append(PID, 0, 5).first_offset == 5  # the gap filled, the batch is accepted


def test_unknown_producer_must_start_at_sequence_zero() -> None:
    p = Partition()
    with pytest.raises(UnknownProducerIdError):
        p.append(PID, 0, 7)
    assert p.manager.get(PID) is None
    p.append(PID, 0, 0)
    assert p.manager.get(PID) is not None


def test_sequence_wraps_from_int32_max_to_zero() -> None:
    m = ProducerStateManager()
    m.replay_data(PID, 0, INT32_MAX - 1, INT32_MAX, 0, 1, 1, False)
    p = Partition(m)
    p.next_offset = 2
    assert p.append(PID, 0, 0, 2).first_offset == 2
    assert m.get(PID).last_seq == 1


def test_after_int32_max_sequence_one_is_out_of_order() -> None:
    m = ProducerStateManager()
    m.replay_data(PID, 0, INT32_MAX, INT32_MAX, 0, 0, 1, False)
    with pytest.raises(OutOfOrderSequenceError, match="expected sequence 0, got 1"):
        ProducerAppend(m).check_data(PID, 0, 1, 1, False)


def test_batch_spanning_the_wrap_keeps_first_and_last_sequence() -> None:
    p = Partition()
    p.manager.replay_data(PID, 0, 0, INT32_MAX - 11, 0, 0, 1, False)
    p.next_offset = 1
    meta = p.append(PID, 0, INT32_MAX - 10, 20)
    assert (meta.first_seq, meta.last_seq) == (INT32_MAX - 10, 8)
    assert p.manager.get(PID).last_seq == 8
    snapshot = to_snapshot(p.manager.get(PID))
    back = from_snapshot(snapshot)
    assert (back.batches[-1].first_seq, back.batches[-1].last_seq) == (INT32_MAX - 10, 8)


def test_negative_sequence_or_epoch_on_an_idempotent_batch_is_an_invalid_record() -> None:
    m = ProducerStateManager()
    with pytest.raises(InvalidRecordError):
        ProducerAppend(m).check_data(PID, 0, -1, -1, False)
    with pytest.raises(InvalidRecordError):
        ProducerAppend(m).check_data(PID, -1, 0, 0, False)


def test_transactional_batch_without_producer_id_is_an_invalid_record() -> None:
    with pytest.raises(InvalidRecordError):
        ProducerAppend(ProducerStateManager()).check_data(-1, -1, -1, -1, True)


def test_plain_batch_without_producer_id_needs_no_state() -> None:
    p = Partition()
    assert p.append(-1, -1, -1, 3).first_offset == 0
    assert p.manager.producers == {}


def test_check_sequence_directly_for_an_entry_of_unknown_epoch() -> None:
    """A marker-only entry (epoch -1 before any data) accepts whatever sequence comes."""
    entry = ProducerStateEntry(PID)
    check_sequence(entry, -1, 42)  # no raise: the stored epoch is unknown
    check_sequence(entry, 0, 0)


# ---- duplicates: the last 5 batches ----------------------------------------------------------


def test_retry_of_any_of_the_last_five_batches_returns_the_original_offsets() -> None:
    p = Partition()
    assert BATCH_WINDOW == 5  # Kafka's window, matching max.in.flight.requests.per.connection <= 5
    originals = [p.append(PID, 0, seq * 2, 2) for seq in range(5)]
    end = p.next_offset
    for meta in originals:
        assert p.append(PID, 0, meta.first_seq, 2) == meta
    assert p.next_offset == end  # nothing appended


def test_retry_older_than_the_window_is_out_of_order() -> None:
    p = Partition()
    for seq in range(6):
        p.append(PID, 0, seq)
    with pytest.raises(OutOfOrderSequenceError):
        p.append(PID, 0, 0)
    assert p.append(PID, 0, 1).first_offset == 1  # still in the window


def test_partial_overlap_with_a_cached_batch_is_out_of_order_not_a_duplicate() -> None:
    p = Partition()
    p.append(PID, 0, 0, 4)
    with pytest.raises(OutOfOrderSequenceError):
        p.append(PID, 0, 0, 2)


def test_duplicate_is_recognised_only_under_the_same_epoch() -> None:
    p = Partition()
    p.append(PID, 0, 0)
    p.append(PID, 1, 0)  # a new epoch clears the window, then writes seq 0 again
    assert p.next_offset == 2
    with pytest.raises(InvalidProducerEpochError):
        p.append(PID, 0, 0)


def test_duplicates_within_one_append_call_see_the_earlier_batches() -> None:
    """ProducerAppend stages: a second batch in the same call is checked against the first."""
    m = ProducerStateManager()
    staged = ProducerAppend(m)
    assert staged.check_data(PID, 0, 0, 0, False) is None
    meta = BatchMetadata(0, 0, 0, 0, 1)
    staged.stage_data(PID, 0, meta, False)
    assert staged.check_data(PID, 0, 0, 0, False) == meta  # a retry inside the request
    assert staged.check_data(PID, 0, 1, 1, False) is None
    with pytest.raises(OutOfOrderSequenceError):
        staged.check_data(PID, 0, 2, 2, False)
    assert m.get(PID) is None  # nothing reached the manager before commit
    staged.commit()
    assert m.get(PID).last_seq == 0


def test_a_refused_append_is_never_committed() -> None:
    m = ProducerStateManager()
    Partition(m).append(PID, 0, 0)
    staged = ProducerAppend(m)
    staged.stage_data(PID, 0, BatchMetadata(1, 1, 1, 1, 5), False)
    # the caller's write failed: it never calls commit
    assert m.get(PID).last_seq == 0


def test_a_check_copies_nothing_and_commit_puts_back_every_producer_it_looked_at_in_order() -> None:
    """Copy on write: until a call stages a change it reads the manager's own entry; a stage
    changes only the call's copy. Commit then refreshes, in the order the call first looked at
    them, every producer it looked at (the table is least recently written first: the cap's
    eviction order and every snapshot's), as when each look took a copy."""
    m = ProducerStateManager()
    Partition(m).append(PID, 0, 0)
    Partition(m).append(OTHER, 0, 0)
    before = m.get(PID)
    staged = ProducerAppend(m)
    assert staged.check_data(OTHER, 0, 1, 1, False) is None
    staged.stage_data(OTHER, 0, BatchMetadata(1, 1, 2, 2, 5), False)
    assert staged.check_data(PID, 0, 0, 0, False) is not None  # a retry: looked at, not changed
    assert m.get(OTHER).last_seq == 0 and m.get(PID) is before  # the stage changed a copy only
    assert staged.check_data(OTHER, 0, 2, 2, False) is None  # later checks see the staged copy
    assert staged.check_data(3000, 0, 0, 0, False) is None  # an unknown producer: nothing to put back
    assert list(m.producers) == [PID, OTHER]
    staged.commit()
    assert list(m.producers) == [OTHER, PID] and m.get(OTHER).last_seq == 1
    assert m.get(PID) is before and before.last_seq == 0


# ---- epochs -------------------------------------------------------------------------------------


def test_new_epoch_must_start_at_sequence_zero() -> None:
    p = Partition()
    p.append(PID, 0, 0, 5)
    with pytest.raises(OutOfOrderSequenceError, match="new epoch 1 must start at sequence 0"):
        p.append(PID, 1, 5)
    p.append(PID, 1, 0)
    entry = p.manager.get(PID)
    assert (entry.epoch, entry.last_seq, len(entry.batches)) == (1, 0, 1)


def test_stale_epoch_is_invalid_producer_epoch() -> None:
    p = Partition()
    p.append(PID, 3, 0)
    with pytest.raises(InvalidProducerEpochError, match="epoch 2 is older"):
        p.append(PID, 2, 1)
    assert p.manager.get(PID).epoch == 3


def test_marker_with_a_higher_epoch_clears_the_sequence_window() -> None:
    p = Partition()
    p.append(PID, 0, 0, 3, txn=True)
    p.marker(PID, 1, ControlType.ABORT)
    entry = p.manager.get(PID)
    assert entry.epoch == 1 and not entry.batches
    with pytest.raises(OutOfOrderSequenceError):
        p.append(PID, 1, 3)
    p.append(PID, 1, 0)


def test_marker_with_the_same_epoch_keeps_the_numbering() -> None:
    p = Partition()
    p.append(PID, 0, 0, 2, txn=True)
    p.marker(PID, 0, ControlType.COMMIT)
    p.append(PID, 0, 2, txn=True)
    with pytest.raises(OutOfOrderSequenceError):
        p.append(PID, 0, 0, txn=True)


def test_marker_older_than_the_data_epoch_is_invalid_producer_epoch() -> None:
    p = Partition()
    p.append(PID, 2, 0, txn=True)
    with pytest.raises(InvalidProducerEpochError):
        p.marker(PID, 1, ControlType.COMMIT)
    assert p.manager.get(PID).has_open_txn


def test_marker_without_producer_state_creates_it() -> None:
    p = Partition()
    offset, completed = p.marker(PID, 5, ControlType.ABORT)
    assert (offset, completed) == (0, None)  # no transaction was open: nothing completed
    entry = p.manager.get(PID)
    assert entry.epoch == 5 and entry.coordinator_epoch == 0 and entry.last_timestamp == 2000
    with pytest.raises(InvalidProducerEpochError):
        p.append(PID, 4, 0)
    with pytest.raises(OutOfOrderSequenceError):
        p.append(PID, 6, 17)
    p.append(PID, 6, 0)


def test_lower_coordinator_epoch_is_fenced_and_equal_or_higher_is_accepted() -> None:
    p = Partition()
    p.append(PID, 0, 0, txn=True)
    p.marker(PID, 1, ControlType.COMMIT, coordinator_epoch=3)
    p.append(PID, 1, 0, txn=True)
    with pytest.raises(TransactionCoordinatorFencedError):
        p.marker(PID, 2, ControlType.COMMIT, coordinator_epoch=2)
    assert p.marker(PID, 2, ControlType.COMMIT, coordinator_epoch=3)[0] is not None
    p.append(PID, 2, 0, txn=True)
    assert p.marker(PID, 3, ControlType.ABORT, coordinator_epoch=4)[0] is not None
    assert p.manager.get(PID).coordinator_epoch == 4


def test_a_resent_marker_is_not_written_twice() -> None:
    """Roll-forward after a crash re-sends a marker; the epoch already bumped and no data since (KAFKA-19999)."""
    p = Partition()
    p.append(PID, 0, 0, txn=True)
    first, completed = p.marker(PID, 1, ControlType.COMMIT)
    assert first == 1 and completed == CompletedTxn(PID, 0, 1, False)
    again, _ = p.marker(PID, 1, ControlType.COMMIT)
    assert again is None
    assert p.next_offset == 2


# ---- transactions -------------------------------------------------------------------------------


def test_first_transactional_batch_opens_the_transaction_at_its_offset() -> None:
    p = Partition()
    p.append(OTHER, 0, 0, 4)  # offsets 0-3, not transactional
    p.append(PID, 0, 0, 2, txn=True)  # offsets 4-5
    p.append(PID, 0, 2, 1, txn=True)  # offset 6: same transaction
    assert p.manager.get(PID).current_txn_first_offset == 4
    assert p.manager.open_transactions() == {PID: 4}


def test_non_transactional_write_while_a_transaction_is_open_is_invalid_txn_state() -> None:
    p = Partition()
    p.append(PID, 0, 0, txn=True)
    with pytest.raises(InvalidTxnStateError, match="non-transactional"):
        p.append(PID, 0, 1)


def test_new_epoch_cannot_write_before_the_old_transaction_has_its_marker() -> None:
    p = Partition()
    p.append(PID, 0, 0, txn=True)
    with pytest.raises(InvalidTxnStateError, match="still open"):
        p.append(PID, 1, 0, txn=True)


def test_unregistered_partition_is_refused_before_the_first_transactional_write() -> None:
    registered: set[tuple[int, int]] = set()
    p = Partition(verify_txn=lambda pid, epoch: (pid, epoch) in registered)
    with pytest.raises(InvalidTxnStateError, match="not registered"):
        p.append(PID, 0, 0, txn=True)
    assert p.manager.get(PID) is None and p.next_offset == 0
    registered.add((PID, 0))
    p.append(PID, 0, 0, txn=True)
    registered.clear()
    p.append(PID, 0, 1, txn=True)  # the open transaction was verified already


def test_marker_completes_the_transaction_from_its_first_offset_to_the_marker() -> None:
    p = Partition()
    p.append(PID, 0, 0, 3, txn=True)
    offset, completed = p.marker(PID, 1, ControlType.ABORT)
    assert completed == CompletedTxn(PID, 0, offset, True)
    assert not p.manager.get(PID).has_open_txn
    assert p.manager.first_unstable_offset() is None


def test_marker_ending_an_empty_transaction_completes_nothing() -> None:
    p = Partition()
    p.append(PID, 0, 0)  # idempotent data, no transaction
    _, completed = p.marker(PID, 1, ControlType.ABORT)
    assert completed is None


def test_replayed_kraft_control_types_change_nothing() -> None:
    m = ProducerStateManager()
    m.replay_data(PID, 0, 0, 0, 0, 0, 1, True)
    assert m.replay_marker(PID, 1, 2, 0, 1, 5) is None  # LeaderChange
    entry = m.get(PID)
    assert entry.epoch == 0 and entry.has_open_txn


def test_replay_skips_every_check() -> None:
    """Recovery and catching up apply what the log holds, gaps and stale epochs included."""
    m = ProducerStateManager()
    m.replay_data(PID, 5, 10, 12, 0, 2, 100, False)
    m.replay_data(PID, 4, 99, 99, 3, 3, 101, True)
    entry = m.get(PID)
    assert entry.epoch == 4 and entry.last_seq == 99 and entry.current_txn_first_offset == 3
    completed = m.replay_marker(PID, 4, ControlType.COMMIT, 0, 4, 102)
    assert completed == CompletedTxn(PID, 3, 4, False)


# ---- first unstable offset and the LSO of an abort -------------------------------------------


def test_first_unstable_offset_is_the_earliest_open_transaction() -> None:
    p = Partition()
    assert p.manager.first_unstable_offset() is None
    p.append(OTHER, 0, 0, 2)  # 0-1 plain
    p.append(PID, 0, 0, 2, txn=True)  # 2-3
    p.append(OTHER + 1, 0, 0, 1, txn=True)  # 4
    assert p.manager.first_unstable_offset() == 2
    p.marker(PID, 1, ControlType.COMMIT)
    assert p.manager.first_unstable_offset() == 4
    p.marker(OTHER + 1, 1, ControlType.ABORT)
    assert p.manager.first_unstable_offset() is None


def test_lso_stored_for_an_abort_is_the_next_other_producers_open_transaction() -> None:
    """The worked example of docs/kafka-formats.md §5.5: pid1 at 100, pid2 at 102, abort pid2 at 106 -> LSO 100."""
    p = Partition()
    p.next_offset = 100
    p.append(1, 0, 0, 2, txn=True)  # 100-101
    p.append(2, 0, 0, 2, txn=True)  # 102-103
    p.append(3, 0, 0, 2)  # 104-105
    assert p.manager.last_stable_offset_for_abort(2, 106) == 100
    p.marker(2, 1, ControlType.ABORT)  # 106
    assert p.manager.last_stable_offset_for_abort(1, 107) == 108  # no other open txn: marker + 1


# ---- expiry and the producer cap --------------------------------------------------------------


def test_idle_producers_expire_but_an_open_transaction_pins_its_producer() -> None:
    m = ProducerStateManager(expiration_ms=1000)
    m.replay_data(PID, 0, 0, 0, 0, 0, 100, False)
    m.replay_data(OTHER, 0, 0, 0, 1, 1, 100, True)
    assert m.expire(1099) == []
    assert m.expire(1100) == [PID]
    assert m.get(PID) is None and m.get(OTHER) is not None


def test_cap_evicts_the_least_recently_written_producer_without_an_open_transaction() -> None:
    m = ProducerStateManager(max_producers=2)
    m.replay_data(1, 0, 0, 0, 0, 0, 1, True)  # open txn: never evicted
    m.replay_data(2, 0, 0, 0, 1, 1, 1, False)
    m.replay_data(3, 0, 0, 0, 2, 2, 1, False)
    assert set(m.producers) == {1, 3}
    m.replay_data(3, 0, 1, 1, 3, 3, 1, False)
    m.replay_data(4, 0, 0, 0, 4, 4, 1, False)
    assert set(m.producers) == {1, 4}


def test_an_evicted_producer_cannot_slip_a_retry_through() -> None:
    """docs/reliability-scenarios.md scenario 9: the retry of an evicted producer's batch is refused, not
    re-appended."""
    p = Partition(ProducerStateManager(max_producers=1))
    p.append(PID, 0, 0)
    p.append(PID, 0, 1)
    p.append(OTHER, 0, 0)  # evicts PID
    with pytest.raises(UnknownProducerIdError):
        p.append(PID, 0, 1)


# ---- snapshots ------------------------------------------------------------------------------------


def test_snapshot_keeps_only_the_last_batch_and_the_open_transaction() -> None:
    p = Partition()
    p.append(PID, 2, 0, 3, txn=True, ts=111)  # offsets 0-2
    p.append(PID, 2, 3, 2, txn=True, ts=222)  # offsets 3-4
    [snap] = p.manager.snapshot_entries()
    assert snap == SnapshotEntry(PID, 2, 4, 4, 1, 222, -1, 0)


def test_snapshot_of_a_marker_only_producer_has_no_batch() -> None:
    p = Partition()
    p.marker(PID, 3, ControlType.ABORT, coordinator_epoch=7, ts=333)
    [snap] = p.manager.snapshot_entries()
    assert snap == SnapshotEntry(PID, 3, -1, -1, 0, 333, 7, -1)
    restored = from_snapshot(snap)
    assert not restored.batches and restored.epoch == 3 and restored.coordinator_epoch == 7


def test_loaded_snapshot_answers_the_retry_of_its_last_batch_and_keeps_the_open_transaction() -> None:
    p = Partition()
    p.append(PID, 0, 0, 2, txn=True, ts=500)
    last = p.append(PID, 0, 2, 3, txn=True, ts=600)
    entries = p.manager.snapshot_entries()

    fresh = ProducerStateManager()
    fresh.load(entries, end_offset=5, now_ms=600)
    assert fresh.end_offset == 5
    assert fresh.first_unstable_offset() == 0
    dup = ProducerAppend(fresh).check_data(PID, 0, 2, 4, True)
    assert (
        (dup.first_offset, dup.last_offset, dup.first_seq, dup.last_seq)
        == (2, 4, 2, 4)
        == (last.first_offset, last.last_offset, last.first_seq, last.last_seq)
    )
    assert ProducerAppend(fresh).check_data(PID, 0, 5, 5, True) is None


def test_load_drops_expired_producers_without_an_open_transaction() -> None:
    m = ProducerStateManager(expiration_ms=1000)
    entries = [
        SnapshotEntry(PID, 0, 0, 0, 0, 100, -1, -1),
        SnapshotEntry(OTHER, 0, 0, 1, 0, 100, -1, 1),
    ]
    m.load(entries, end_offset=2, now_ms=5000)
    assert set(m.producers) == {OTHER}


def test_reset_forgets_every_producer() -> None:
    m = ProducerStateManager()
    m.replay_data(PID, 0, 0, 0, 0, 0, 1, False)
    m.reset(42)
    assert m.producers == {} and m.end_offset == 42


def test_entry_copy_is_independent_of_the_original() -> None:
    entry = ProducerStateEntry(PID, 0)
    entry.add_batch(0, BatchMetadata(0, 0, 0, 0, 1), False)
    clone = entry.copy()
    clone.add_batch(1, BatchMetadata(0, 0, 1, 1, 2), True)
    assert entry.epoch == 0 and len(entry.batches) == 1 and not entry.has_open_txn
    for seq in range(1, BATCH_WINDOW + 2):
        clone.add_batch(1, BatchMetadata(seq, seq, seq + 1, seq + 1, 2), True)
    assert [m.first_seq for m in clone.batches] == list(range(2, BATCH_WINDOW + 2))  # the window keeps the last 5
