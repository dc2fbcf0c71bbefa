"""KIP-939 on the Producer: prepare_transaction, complete_transaction, init_transactions(keep_prepared_txn)."""

from __future__ import annotations

import pytest

import txlog
from txlog import PreparedTxnState
from txlog.errors import (
    IllegalArgumentError,
    IllegalStateError,
    InvalidConfigurationError,
    InvalidRequestError,
    InvalidTxnStateError,
)
from txlog.schemas.transaction_log import TxnState
from txlog.topic_partition import TopicPartition


def _producer(path: str, **kw) -> txlog.Producer:
    return txlog.Producer(path, transactional_id="w-0", transaction_two_phase_commit_enable=True, **kw)


def _committed(path: str, topic: str = "out") -> list[bytes]:
    consumer = txlog.Consumer(path, isolation_level="read_committed")
    consumer.assign([TopicPartition(topic, 0)])
    out = []
    while batch := consumer.poll(100):
        out.extend(r.value for r in batch)
    consumer.close()
    return out


def _prepared_and_closed(path: str, values: list[bytes]) -> PreparedTxnState:
    """A first instance writes `values` in a transaction, prepares it and goes away without completing."""
    p = _producer(path)
    p.init_transactions()
    p.begin_transaction()
    for v in values:
        p.send("out", value=v)
    state = p.prepare_transaction()
    p.close()
    return state


@pytest.fixture
def path(store_path: str) -> str:
    txlog.Admin(store_path).create_topic("out", 1)
    return store_path


def test_a_new_instance_keeping_the_prepared_transaction_commits_it_by_the_kept_state(path):
    state = _prepared_and_closed(path, [b"a", b"b"])
    kept = PreparedTxnState.parse(str(state))  # the manager keeps it as text
    assert _committed(path) == []  # closing a producer leaves its prepared transaction open
    p = _producer(path)
    p.init_transactions(keep_prepared_txn=True)
    p.complete_transaction(kept)
    assert _committed(path) == [b"a", b"b"]
    p.begin_transaction()  # the instance goes on with new transactions
    p.send("out", value=b"c")
    p.commit_transaction()
    p.close()
    assert _committed(path) == [b"a", b"b", b"c"]


def test_a_mismatching_state_aborts_the_kept_transaction(path):
    state = _prepared_and_closed(path, [b"a"])
    p = _producer(path)
    p.init_transactions(keep_prepared_txn=True)
    p.complete_transaction(PreparedTxnState(state.producer_id, state.epoch + 1))
    p.close()
    assert _committed(path) == []
    assert txlog.Admin(path).coordinator.describe("w-0").state.state == TxnState.COMPLETE_ABORT


def test_the_empty_state_aborts_the_kept_transaction(path):
    _prepared_and_closed(path, [b"a"])
    p = _producer(path)
    p.init_transactions(keep_prepared_txn=True)
    p.complete_transaction(PreparedTxnState())
    p.close()
    assert _committed(path) == []


def test_a_new_instance_that_does_not_keep_prepared_transactions_aborts_it(path):
    state = _prepared_and_closed(path, [b"a"])
    p = _producer(path)
    p.init_transactions()
    with pytest.raises(InvalidTxnStateError):
        p.complete_transaction(state)  # nothing is prepared here any more
    p.close()
    assert _committed(path) == []
    log = txlog.Admin(path).store.partition("out", 0)
    assert log.last_stable_offset == log.log_end_offset  # aborted, not left open


def test_the_instance_that_wrote_it_is_fenced_once_another_keeps_it(path):
    p = _producer(path)
    p.init_transactions()
    p.begin_transaction()
    p.send("out", value=b"a")
    state = p.prepare_transaction()
    q = _producer(path)
    q.init_transactions(keep_prepared_txn=True)
    with pytest.raises(txlog.errors.ProducerFencedError):
        p.complete_transaction(state)
    q.complete_transaction(state)
    q.close()
    p.close()
    assert _committed(path) == [b"a"]


def test_a_second_recovery_finds_the_same_prepared_transaction(path):
    """A recovering instance that dies before completing leaves the transaction as it found it."""
    state = _prepared_and_closed(path, [b"a"])
    first = _producer(path)
    first.init_transactions(keep_prepared_txn=True)
    first.close()  # died before complete_transaction
    second = _producer(path)
    second.init_transactions(keep_prepared_txn=True)
    second.complete_transaction(state)
    second.close()
    assert _committed(path) == [b"a"]


def test_complete_in_the_same_instance_commits_or_aborts(path):
    p = _producer(path)
    p.init_transactions()
    p.begin_transaction()
    p.send("out", value=b"a")
    p.complete_transaction(p.prepare_transaction())
    p.begin_transaction()
    p.send("out", value=b"b")
    p.prepare_transaction()
    p.complete_transaction(PreparedTxnState())
    p.close()
    assert _committed(path) == [b"a"]


def test_a_prepared_transaction_allows_only_its_end(path):
    p = _producer(path)
    p.init_transactions()
    p.begin_transaction()
    p.send("out", value=b"a")
    p.prepare_transaction()
    for call in (lambda: p.send("out", value=b"x"), p.begin_transaction, p.prepare_transaction):
        with pytest.raises(IllegalStateError, match="prepared"):
            call()
    p.abort_transaction()
    p.close()
    assert _committed(path) == []


def test_keep_prepared_txn_finding_nothing_open_leaves_nothing_to_complete(path):
    p = _producer(path)
    p.init_transactions(keep_prepared_txn=True)
    with pytest.raises(InvalidTxnStateError, match="none is prepared"):
        p.complete_transaction(PreparedTxnState(0, 0))
    p.begin_transaction()
    p.send("out", value=b"a")
    p.commit_transaction()
    p.close()
    assert _committed(path) == [b"a"]


def test_misuse_is_refused_as_kafka_refuses_it(path):
    plain = txlog.Producer(path, transactional_id="plain")
    with pytest.raises(InvalidRequestError, match="keep_prepared_txn"):
        plain.init_transactions(keep_prepared_txn=True)
    plain.close()
    plain = txlog.Producer(path, transactional_id="plain")
    plain.init_transactions()
    plain.begin_transaction()
    with pytest.raises(InvalidTxnStateError, match="two-phase commit is not enabled"):
        plain.prepare_transaction()
    plain.abort_transaction()
    plain.close()
    p = _producer(path)
    p.init_transactions()
    with pytest.raises(InvalidTxnStateError, match="no transaction in progress"):
        p.prepare_transaction()
    with pytest.raises(InvalidTxnStateError, match="none is prepared"):
        p.complete_transaction(PreparedTxnState(1, 1))
    with pytest.raises(IllegalArgumentError):
        p.complete_transaction("1:1")  # type: ignore[arg-type]
    p.close()
    with pytest.raises(InvalidConfigurationError, match="transaction_timeout_ms"):
        _producer(path, transaction_timeout_ms=1000)
    with pytest.raises(InvalidConfigurationError, match="transactional_id"):
        txlog.Producer(path, transaction_two_phase_commit_enable=True)


def test_an_open_transaction_of_a_non_2pc_instance_cannot_be_kept(path):
    plain = txlog.Producer(path, transactional_id="w-0")
    plain.init_transactions()
    plain.begin_transaction()
    plain.send("out", value=b"a")
    plain.flush()
    p = _producer(path)
    with pytest.raises(InvalidTxnStateError, match="not a two-phase commit"):
        p.init_transactions(keep_prepared_txn=True)


def test_prepared_txn_state_text_is_kafkas():
    assert str(PreparedTxnState(123, 45)) == "123:45"
    assert PreparedTxnState.parse("123:45") == PreparedTxnState(123, 45)
    assert str(PreparedTxnState()) == "" and not PreparedTxnState().has_transaction
    assert PreparedTxnState.parse("") == PreparedTxnState(-1, -1)
    for bad in ("1", "1:2:3", "-1:-1", "a:b", "1:99999"):
        with pytest.raises(IllegalArgumentError):
            PreparedTxnState.parse(bad)


def test_close_aborts_a_two_phase_commit_transaction_that_was_not_prepared(path):
    """Only prepare hands the outcome to the manager; before it, close() aborts as always
    (the timeout would never do it for a 2PC id)."""
    p = _producer(path)
    p.init_transactions()
    p.begin_transaction()
    p.send("out", value=b"a")
    p.flush()
    p.close()
    log = txlog.Admin(path).store.partition("out", 0)
    assert log.last_stable_offset == log.log_end_offset
    q = _producer(path)
    q.init_transactions(keep_prepared_txn=True)
    with pytest.raises(InvalidTxnStateError):
        q.complete_transaction(PreparedTxnState(0, 0))
    q.close()
    assert _committed(path) == []
