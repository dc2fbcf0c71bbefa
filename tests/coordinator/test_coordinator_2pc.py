"""KIP-939 at the transaction coordinator: what a two-phase-commit transactional id changes.

A 2PC id's transactions are never aborted by the transaction timeout; the mark is the
TransactionTimeoutMs Kafka records for it (Integer.MAX_VALUE), so it survives a restart in the
bytes Kafka writes; a kept transaction stages its new instance in the Ongoing record.
"""

from __future__ import annotations

import time

import pytest

from storage.store import Store
from txlog.coordinator.transaction_coordinator import TransactionCoordinator
from txlog.errors import InvalidRequestError, ProducerFencedError
from txlog.requests import ProducerIdAndEpoch
from txlog.schemas.transaction_log import TWO_PHASE_COMMIT_TIMEOUT_MS, TxnState, decode_value, encode_value

DAY_MS = 24 * 3600 * 1000


@pytest.fixture
def clock() -> list[int]:
    return [int(time.time() * 1000)]


def _coordinator(store: Store, clock: list[int]) -> TransactionCoordinator:
    return TransactionCoordinator(store, clock=lambda: clock[0])


def _open(coordinator: TransactionCoordinator, txn_id: str, *, two_pc: bool) -> ProducerIdAndEpoch:
    """An instance of `txn_id` with a transaction open in out-0 (registered: what the timeout would abort)."""
    if two_pc:
        ids = coordinator.init_producer_id_2pc(txn_id, enable_2pc=True, keep_prepared_txn=False).ids
    else:
        ids = coordinator.init_producer_id(txn_id, 1000)
    coordinator.add_partitions(txn_id, ids.producer_id, ids.epoch, [("out", 0)])
    return ids


def test_the_timeout_never_aborts_a_two_phase_commit_transaction(store, clock):
    store.create_topic("out", 1)
    coordinator = _coordinator(store, clock)
    _open(coordinator, "two-pc", two_pc=True)
    _open(coordinator, "plain", two_pc=False)  # the control: same age, ordinary timeout
    clock[0] += 30 * DAY_MS  # far past any timeout, and past transactional.id.expiration.ms
    coordinator.sweep_all()
    assert coordinator.describe("plain").state.state == TxnState.COMPLETE_ABORT
    kept = coordinator.describe("two-pc").state
    assert kept.state == TxnState.ONGOING and kept.partitions == (("out", 0),)
    assert kept.timeout_ms == TWO_PHASE_COMMIT_TIMEOUT_MS


def test_the_mark_and_a_kept_transaction_survive_a_restart(store_path, clock):
    store = Store.open(store_path)
    store.create_topic("out", 1)
    wrote = _open(_coordinator(store, clock), "w", two_pc=True)
    kept = _coordinator(store, clock).init_producer_id_2pc("w", enable_2pc=True, keep_prepared_txn=True)
    store.close()
    clock[0] += 30 * DAY_MS
    store = Store.open(store_path)
    coordinator = _coordinator(store, clock)  # replays __transaction_state from the files
    coordinator.sweep_all()
    again = coordinator.init_producer_id_2pc("w", enable_2pc=True, keep_prepared_txn=True)
    assert kept.ongoing == again.ongoing == wrote  # the same transaction, named by the ids that wrote it
    assert again.ids == ProducerIdAndEpoch(wrote.producer_id, wrote.epoch + 2)
    with pytest.raises(ProducerFencedError):
        coordinator.end_transaction("w", kept.ids.producer_id, kept.ids.epoch, True)  # the first recovery's
    coordinator.end_transaction("w", again.ids.producer_id, again.ids.epoch, True)
    assert coordinator.describe("w").state.state == TxnState.COMPLETE_COMMIT
    store.close()


def test_the_staged_instance_is_kafkas_record(store, clock):
    """Ongoing + NextProducerId/NextProducerEpoch (tags 1 and 3 of TransactionLogValue v1), round-tripped."""
    store.create_topic("out", 1)
    coordinator = _coordinator(store, clock)
    wrote = _open(coordinator, "w", two_pc=True)
    coordinator.init_producer_id_2pc("w", enable_2pc=True, keep_prepared_txn=True)
    value = coordinator.describe("w").state
    assert (value.producer_id, value.producer_epoch) == (wrote.producer_id, wrote.epoch)
    assert (value.next_producer_id, value.next_producer_epoch) == (wrote.producer_id, wrote.epoch + 1)
    assert decode_value(encode_value(value)) == value


def test_the_writer_of_a_kept_transaction_is_fenced_from_its_partitions(store, clock):
    store.create_topic("out", 1)
    coordinator = _coordinator(store, clock)
    wrote = _open(coordinator, "w", two_pc=True)
    assert coordinator.verify("w", wrote.producer_id, wrote.epoch, "out", 0)
    coordinator.init_producer_id_2pc("w", enable_2pc=True, keep_prepared_txn=True)
    with pytest.raises(ProducerFencedError):
        coordinator.verify("w", wrote.producer_id, wrote.epoch, "out", 0)
    with pytest.raises(ProducerFencedError):
        coordinator.end_transaction("w", wrote.producer_id, wrote.epoch, True)


def test_init_without_keep_aborts_a_two_phase_commit_transaction(store, clock):
    store.create_topic("out", 1)
    coordinator = _coordinator(store, clock)
    _open(coordinator, "w", two_pc=True)
    coordinator.init_producer_id_2pc("w", enable_2pc=True, keep_prepared_txn=False)
    log = store.partition("out", 0)
    assert coordinator.describe("w").state.state == TxnState.EMPTY
    assert log.last_stable_offset == log.log_end_offset  # the abort marker closed it


def test_keep_prepared_txn_without_two_phase_commit_is_an_invalid_request(store, clock):
    with pytest.raises(InvalidRequestError):
        _coordinator(store, clock).init_producer_id_2pc("w", enable_2pc=False, keep_prepared_txn=True)


def test_an_operator_may_still_end_a_two_phase_commit_transaction(store, clock):
    """`txlog abort --transactional-id` (a forced end) is how an operator ends one nobody will complete."""
    store.create_topic("out", 1)
    coordinator = _coordinator(store, clock)
    _open(coordinator, "w", two_pc=True)
    coordinator.init_producer_id_2pc("w", enable_2pc=True, keep_prepared_txn=True)  # a kept one too
    coordinator.end_transaction("w", None, None, False)
    assert coordinator.describe("w").state.state == TxnState.COMPLETE_ABORT
