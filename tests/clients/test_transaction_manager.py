"""The producer's TransactionManager through its public interface: the client-side state machine
(legal and illegal transitions, with Kafka's error types), fencing, the KIP-360 epoch bump after
an unknown outcome, and per-partition sequences. The coordinator behind it is the real one, on
the test's store; a Transport subclass stands in where a request must fail on cue."""

from __future__ import annotations

import pytest

from txlog.clients.transaction_manager import (
    CONCURRENT_RETRIES,
    TransactionManager,
    TransactionState,
    increment_sequence,
)
from txlog.errors import (
    ConcurrentTransactionsError,
    IllegalStateError,
    InvalidProducerEpochError,
    KafkaError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    RecordTooLargeError,
    TransactionAbortableError,
    UnknownProducerIdError,
)
from txlog.requests import ProducerIdAndEpoch
from txlog.topic_partition import TopicPartition
from txlog.transport import Transport

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


class Died(BaseException):
    """What a sender round dies of (as a fault plan's Crashed): no Kafka error handler catches it."""


class BusyCoordinator(Transport):
    """Answers the next `busy` EndTxn requests with ConcurrentTransactionsError (a pending transition)."""

    def __init__(self, store, busy: int):
        super().__init__(store)
        self.busy = busy
        self.end_txn_calls = 0

    def end_txn(self, transactional_id, producer_id, epoch, commit):
        self.end_txn_calls += 1
        if self.busy:
            self.busy -= 1
            raise ConcurrentTransactionsError("a transition of the id is pending")
        return super().end_txn(transactional_id, producer_id, epoch, commit)


@pytest.fixture
def transport(store):
    store.create_topic("t", 2)
    return Transport(store)


def transactional(transport, tid="tm") -> TransactionManager:
    return TransactionManager(transport, transactional_id=tid, idempotent=True)


def in_transaction(transport, tid="tm") -> TransactionManager:
    """A manager whose transaction is open and has written to T0 (so EndTxn has something to end)."""
    tm = transactional(transport, tid)
    tm.init_transactions()
    tm.begin_transaction()
    with tm.lock:
        tm.before_transactional_write([T0])
    return tm


def idempotent(transport) -> TransactionManager:
    tm = TransactionManager(transport, transactional_id=None, idempotent=True)
    tm.init_producer_id()
    return tm


# ---- the transactional state machine ------------------------------------------------------------------------


def test_a_transaction_goes_uninitialized_ready_in_transaction_ready(transport):
    tm = transactional(transport)
    assert tm.state is TransactionState.UNINITIALIZED and not tm.sendable
    assert tm.producer_id_and_epoch == ProducerIdAndEpoch(-1, -1)
    tm.init_transactions()
    ids = tm.producer_id_and_epoch
    assert tm.state is TransactionState.READY and ids.producer_id >= 0 and not tm.sendable
    tm.begin_transaction()
    assert tm.state is TransactionState.IN_TRANSACTION and tm.sendable and tm.has_open_transaction
    tm.check_can_send()
    with tm.lock:
        tm.before_transactional_write([T0])
    tm.ensure_can_commit()
    tm.commit_transaction()
    assert tm.state is TransactionState.READY and not tm.has_open_transaction and not tm.sendable
    assert tm.producer_id_and_epoch == ProducerIdAndEpoch(ids.producer_id, ids.epoch + 1)  # EndTxn (KIP-890)


def test_begin_before_init_and_init_twice_are_illegal(transport):
    tm = transactional(transport)
    with pytest.raises(IllegalStateError, match="init_transactions"):
        tm.begin_transaction()
    tm.init_transactions()
    with pytest.raises(IllegalStateError, match="called twice"):
        tm.init_transactions()
    tm.begin_transaction()
    with pytest.raises(IllegalStateError, match="begin_transaction"):
        tm.begin_transaction()


def test_send_commit_and_abort_need_an_open_transaction(transport):
    tm = transactional(transport)
    tm.init_transactions()
    with pytest.raises(IllegalStateError, match="begin_transaction"):
        tm.check_can_send()
    with pytest.raises(IllegalStateError, match="commit_transaction"):
        tm.ensure_can_commit()
    with pytest.raises(IllegalStateError, match="abort_transaction"):
        tm.ensure_can_abort()


def test_a_transaction_without_writes_ends_without_a_request(transport):
    tm = transactional(transport)
    tm.init_transactions()
    ids = tm.producer_id_and_epoch
    tm.begin_transaction()
    tm.commit_transaction()
    assert tm.state is TransactionState.READY
    assert tm.producer_id_and_epoch == ids  # no EndTxn: no epoch bump


def test_transactional_calls_on_a_producer_without_transactional_id_are_illegal(transport):
    tm = idempotent(transport)
    assert tm.state is TransactionState.READY and tm.sendable
    for call in (tm.init_transactions, tm.begin_transaction, tm.ensure_can_commit, tm.ensure_can_abort):
        with pytest.raises(IllegalStateError, match="without transactional_id"):
            call()
    tm.check_can_send()  # an idempotent producer sends outside transactions


def test_init_producer_id_is_for_idempotent_producers_only(transport):
    with pytest.raises(IllegalStateError):
        transactional(transport).init_producer_id()
    with pytest.raises(IllegalStateError):
        TransactionManager(transport, transactional_id=None, idempotent=False).init_producer_id()
    tm = idempotent(transport)
    assert tm.producer_id_and_epoch.producer_id >= 0 and tm.producer_id_and_epoch.epoch == 0


def test_closed_refuses_everything(transport):
    tm = in_transaction(transport)
    tm.close()
    assert tm.state is TransactionState.CLOSED and not tm.sendable
    for call in (tm.check_can_send, tm.begin_transaction, tm.ensure_can_commit, tm.ensure_can_abort):
        with pytest.raises(IllegalStateError, match="closed"):
            call()


# ---- errors reported by the sender --------------------------------------------------------------------------


def test_a_failed_write_makes_the_transaction_abortable_until_it_is_aborted(transport):
    tm = in_transaction(transport)
    error = RecordTooLargeError("too large")
    with tm.lock:
        assert tm.batch_failed(error) is error
    assert tm.state is TransactionState.ABORTABLE and not tm.sendable and tm.has_open_transaction
    assert isinstance(tm.send_blocker(), TransactionAbortableError)
    with pytest.raises(TransactionAbortableError, match="too large"):
        tm.check_can_send()
    with pytest.raises(TransactionAbortableError, match="too large"):
        tm.ensure_can_commit()
    tm.ensure_can_abort()
    tm.abort_transaction()
    assert tm.state is TransactionState.READY
    tm.begin_transaction()  # the next transaction starts clean
    tm.check_can_send()
    assert tm.send_blocker() is None


def test_an_error_met_while_flushing_refuses_the_commit(transport):
    """ensure_can_commit passed, then a batch failed during the flush: commit raises, nothing is decided."""
    tm = in_transaction(transport)
    tm.ensure_can_commit()
    with tm.lock:
        tm.batch_failed(KafkaError("lost"))
    with pytest.raises(TransactionAbortableError, match="lost"):
        tm.commit_transaction()
    assert tm.state is TransactionState.ABORTABLE


def test_an_epoch_error_fences_a_transactional_producer_for_good(transport):
    tm = in_transaction(transport)
    with tm.lock:
        reported = tm.batch_failed(InvalidProducerEpochError("epoch 0 is older than 1"))
    assert isinstance(reported, ProducerFencedError) and "fenced by a newer instance" in str(reported)
    assert tm.state is TransactionState.FENCED and tm.fatal_error is reported and not tm.sendable
    assert tm.send_blocker() is reported
    for call in (tm.check_can_send, tm.ensure_can_abort, tm.begin_transaction):
        with pytest.raises(ProducerFencedError):
            call()


def test_end_txn_of_a_fenced_instance_raises_producer_fenced(transport):
    zombie = in_transaction(transport, "shared")
    newer = transactional(transport, "shared")
    newer.init_transactions()  # bumps the epoch: the zombie's transaction is aborted
    zombie.ensure_can_commit()
    with pytest.raises(ProducerFencedError):
        zombie.commit_transaction()
    assert zombie.state is TransactionState.FENCED
    with pytest.raises(ProducerFencedError):
        zombie.check_can_send()


def test_an_idempotent_producer_fenced_keeps_its_state_but_not_its_use(transport):
    tm = idempotent(transport)
    fenced = ProducerFencedError("fenced")
    with tm.lock:
        assert tm.batch_failed(fenced) is fenced
    assert tm.state is TransactionState.READY and tm.fatal_error is fenced and not tm.sendable
    with pytest.raises(ProducerFencedError):
        tm.check_can_send()


def test_a_dead_sender_kills_the_producer_and_the_first_death_counts(transport):
    tm = in_transaction(transport)
    first = Died("crash")
    tm.died(first)
    tm.died(Died("later"))
    assert tm.fatal_error is first and not tm.sendable and tm.send_blocker() is first
    with pytest.raises(Died):
        tm.check_can_send()
    with pytest.raises(Died):
        tm.abort_transaction()  # not a Kafka error: nothing more is asked of the coordinator


# ---- KIP-360: an unknown outcome bumps the epoch -----------------------------------------------------------


def test_an_unknown_outcome_bumps_an_idempotent_producers_epoch_and_restarts_sequences(transport):
    tm = idempotent(transport)
    pid = tm.producer_id_and_epoch.producer_id
    with tm.lock:
        tm.advance_sequence(T0, 5)
        tm.advance_sequence(T1, 2)
        tm.outcome_unknown(T0)
    assert tm.producer_id_and_epoch == ProducerIdAndEpoch(pid, 1)
    assert tm.sequence(T0) == tm.sequence(T1) == 0


@pytest.mark.parametrize("error", [OutOfOrderSequenceError("gap"), UnknownProducerIdError("forgotten")])
def test_a_sequence_error_bumps_an_idempotent_producers_epoch(transport, error):
    tm = idempotent(transport)
    with tm.lock:
        tm.advance_sequence(T0, 3)
        assert tm.batch_failed(error) is error
    assert tm.producer_id_and_epoch.epoch == 1 and tm.sequence(T0) == 0 and tm.fatal_error is None


def test_an_unknown_outcome_in_a_transaction_waits_for_the_abort_to_bump_the_epoch(transport):
    tm = in_transaction(transport)
    ids = tm.producer_id_and_epoch
    with tm.lock:
        tm.advance_sequence(T0, 4)
        tm.outcome_unknown(T0)
    assert tm.producer_id_and_epoch == ids and tm.sequence(T0) == 4
    with tm.lock:
        tm.batch_failed(KafkaError("timed out"))
    tm.abort_transaction()
    assert tm.producer_id_and_epoch == ProducerIdAndEpoch(ids.producer_id, ids.epoch + 1)
    assert tm.sequence(T0) == 0


def test_without_idempotence_an_unknown_outcome_changes_nothing(transport):
    tm = TransactionManager(transport, transactional_id=None, idempotent=False)
    with tm.lock:
        tm.outcome_unknown(T0)
    assert tm.producer_id_and_epoch == ProducerIdAndEpoch(-1, -1)


# ---- sequences and unsynced partitions ---------------------------------------------------------------------


def test_sequences_are_per_partition_and_wrap_at_two_to_the_31(transport):
    tm = idempotent(transport)
    assert tm.sequence(T0) == 0
    with tm.lock:
        tm.advance_sequence(T0, 3)
        tm.advance_sequence(T0, 4)
        tm.advance_sequence(T1, 1)
    assert (tm.sequence(T0), tm.sequence(T1)) == (7, 1)
    assert increment_sequence(2**31 - 2, 3) == 1
    assert increment_sequence(0, 0) == 0


def test_a_new_epoch_from_end_txn_restarts_every_sequence(transport):
    tm = in_transaction(transport)
    with tm.lock:
        tm.advance_sequence(T0, 9)
    tm.commit_transaction()
    assert tm.sequence(T0) == 0


def test_unsynced_partitions_are_forgotten_once_synced_or_the_transaction_ends(transport):
    tm = in_transaction(transport)
    with tm.lock:
        tm.mark_unsynced(T0)
        tm.mark_unsynced(T1)
        tm.sync([T1])
    assert tm.unsynced_partitions() == [T0]
    tm.sync_unsynced()
    assert tm.unsynced_partitions() == []
    with tm.lock:
        tm.mark_unsynced(T0)
    tm.commit_transaction()  # the coordinator synced the data before PREPARE_COMMIT
    assert tm.unsynced_partitions() == []


# ---- coordinator requests ------------------------------------------------------------------------------------


def test_a_busy_coordinator_is_asked_again(store):
    store.create_topic("t", 2)
    transport = BusyCoordinator(store, busy=2)
    tm = in_transaction(transport)
    tm.commit_transaction()
    assert transport.end_txn_calls == 3 and tm.state is TransactionState.READY


def test_a_coordinator_busy_for_every_retry_is_reported(store, monkeypatch):
    monkeypatch.setattr("txlog.clients.transaction_manager.time.sleep", lambda s: None)
    store.create_topic("t", 2)
    transport = BusyCoordinator(store, busy=CONCURRENT_RETRIES)
    tm = in_transaction(transport)
    with pytest.raises(ConcurrentTransactionsError):
        tm.commit_transaction()
    assert transport.end_txn_calls == CONCURRENT_RETRIES
    assert tm.state is TransactionState.IN_TRANSACTION  # undecided: the application may retry or abort
