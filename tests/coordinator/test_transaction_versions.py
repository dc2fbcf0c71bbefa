"""Both transaction protocols' epoch rules in the coordinator (Kafka's TransactionCoordinator.endTransaction).

Protocol v2 (txlog's producer, EndTxn v5+: Java 4.x, franz-go) bumps the epoch at every end;
protocol v1 (EndTxn v0-v4: librdkafka, kafka-python, aiokafka) keeps it, so the same instance
writes its next transaction with the same epoch and continuing sequences.
"""

from __future__ import annotations

import pytest

from storage import Store
from storage.records import build_batch
from txlog.coordinator.transaction_coordinator import TransactionCoordinator
from txlog.errors import InvalidTxnStateError, ProducerFencedError
from txlog.requests import CLIENT_TRANSACTION_VERSION_0, CLIENT_TRANSACTION_VERSION_2, ProducerIdAndEpoch
from txlog.schemas.transaction_log import TxnState

TID = "app-1"


@pytest.fixture
def store(tmp_path):
    s = Store.open(tmp_path / "store")
    s.create_topic("t", 1)
    yield s
    s.close()


def _write(store: Store, ids: ProducerIdAndEpoch, seq: int, value: bytes) -> None:
    batch = build_batch(
        [(None, value, None, None)],
        producer_id=ids.producer_id,
        producer_epoch=ids.epoch,
        base_sequence=seq,
        is_transactional=True,
    )
    store.partition("t", 0).append(batch)


def _transaction(coordinator: TransactionCoordinator, store: Store, ids: ProducerIdAndEpoch, seq: int) -> None:
    coordinator.add_partitions(TID, ids.producer_id, ids.epoch, [("t", 0)])
    _write(store, ids, seq, b"v%d" % seq)


def test_a_v1_end_keeps_the_epoch_and_the_next_transaction_continues_the_sequences(store):
    coordinator = TransactionCoordinator(store)
    ids = coordinator.init_producer_id(TID)
    _transaction(coordinator, store, ids, 0)
    after = coordinator.end_transaction(
        TID, ids.producer_id, ids.epoch, True, client_version=CLIENT_TRANSACTION_VERSION_0
    )
    assert after == ids
    state = coordinator.describe(TID).state
    assert (state.state, state.producer_epoch, state.client_transaction_version) == (TxnState.COMPLETE_COMMIT, 0, 0)
    assert store.partition("t", 0).producer_states()[ids.producer_id]["producer_epoch"] == ids.epoch  # the marker's
    _transaction(coordinator, store, ids, 1)  # same epoch, next sequence: accepted by the partition
    assert coordinator.end_transaction(TID, ids.producer_id, ids.epoch, False, client_version=0) == ids
    assert coordinator.describe(TID).state.state == TxnState.COMPLETE_ABORT


def test_a_retried_v1_end_succeeds_again_and_the_other_outcome_or_no_transaction_is_refused(store):
    coordinator = TransactionCoordinator(store)
    ids = coordinator.init_producer_id(TID)
    with pytest.raises(InvalidTxnStateError):  # Empty: nothing to end (v2 may abort here, v1 may not)
        coordinator.end_transaction(TID, ids.producer_id, ids.epoch, False, client_version=0)
    _transaction(coordinator, store, ids, 0)
    coordinator.end_transaction(TID, ids.producer_id, ids.epoch, True, client_version=0)
    assert coordinator.end_transaction(TID, ids.producer_id, ids.epoch, True, client_version=0) == ids
    with pytest.raises(InvalidTxnStateError):
        coordinator.end_transaction(TID, ids.producer_id, ids.epoch, False, client_version=0)
    with pytest.raises(ProducerFencedError):  # v1 has no "epoch + 1 is my retry"
        coordinator.end_transaction(TID, ids.producer_id, ids.epoch - 1, True, client_version=0)


def test_a_v2_end_bumps_the_epoch_and_its_retry_with_the_old_epoch_gets_the_new_one(store):
    coordinator = TransactionCoordinator(store)
    ids = coordinator.init_producer_id(TID)
    _transaction(coordinator, store, ids, 0)
    after = coordinator.end_transaction(
        TID, ids.producer_id, ids.epoch, True, client_version=CLIENT_TRANSACTION_VERSION_2
    )
    assert after == ProducerIdAndEpoch(ids.producer_id, ids.epoch + 1)
    assert coordinator.end_transaction(TID, ids.producer_id, ids.epoch, True) == after
    assert coordinator.describe(TID).state.client_transaction_version == 2


def test_a_fenced_v1_instance_cannot_end_or_reinitialise_with_its_old_ids(store):
    coordinator = TransactionCoordinator(store)
    old = coordinator.init_producer_id(TID)
    _transaction(coordinator, store, old, 0)
    new = coordinator.init_producer_id(TID)  # a second instance: aborts the open transaction
    assert new.epoch > old.epoch
    with pytest.raises(ProducerFencedError):
        coordinator.end_transaction(TID, old.producer_id, old.epoch, True, client_version=0)
    with pytest.raises(ProducerFencedError):  # KIP-360: only the current instance may re-initialise itself
        coordinator.init_producer_id(TID, expected=old)
    again = coordinator.init_producer_id(TID, expected=new)
    assert again == ProducerIdAndEpoch(new.producer_id, new.epoch + 1)
