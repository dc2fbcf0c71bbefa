"""`txlog transactions list|describe|force-terminate` and `txlog commit|abort` on KIP-939 2PC transactions."""

from __future__ import annotations

import json

import pytest

import txlog as api
from tests.cli.cli_helpers import assert_ok, assert_one_error, assert_usage_error, txlog


def _committed_values(path, topic="t"):
    from txlog.fetch import IsolationLevel, fetch

    with api.Admin(path, read_only=True) as admin:
        log = admin.store.partition(topic, 0)
        return [r.value for r in fetch(log, log.log_start_offset, IsolationLevel.READ_COMMITTED).records]


def _prepared(path, transactional_id="w") -> api.PreparedTxnState:
    """A 2PC producer prepares a transaction and is closed without completing it."""
    p = api.Producer(path, transactional_id=transactional_id, transaction_two_phase_commit_enable=True)
    p.init_transactions()
    p.begin_transaction()
    p.send("t", value=b"x")
    state = p.prepare_transaction()
    p.close()
    return state


@pytest.fixture
def store_dir(tmp_path) -> str:
    path = str(tmp_path / "data")
    with api.Admin(path) as admin:
        admin.create_topic("t", 1)
    return path


def test_a_prepared_transaction_is_listed_and_described_with_its_state(store_dir):
    state = _prepared(store_dir)
    proc = txlog("transactions", "list", "-o", "json", data_dir=store_dir)
    assert_ok(proc)
    [row] = json.loads(proc.stdout)
    assert (row["transactionalId"], row["transactionState"], row["twoPhaseCommit"]) == ("w", "Ongoing", True)
    proc = txlog("transactions", "describe", "--transactional-id", "w", "-o", "json", data_dir=store_dir)
    assert_ok(proc)
    doc = json.loads(proc.stdout)
    assert doc["preparedTxnState"] == str(state) and doc["topicPartitions"] == ["t-0"]
    assert doc["transactionTimeoutMs"] == 2**31 - 1  # what Kafka records for a 2PC id


def test_commit_needs_the_prepared_state_that_names_it(store_dir):
    state = _prepared(store_dir)
    message = assert_one_error(txlog("commit", "--transactional-id", "w", data_dir=store_dir))
    assert "two-phase commit" in message and str(state) in message
    wrong = f"{state.producer_id}:{state.epoch + 1}"
    message = assert_one_error(
        txlog("commit", "--transactional-id", "w", "--prepared-state", wrong, data_dir=store_dir)
    )
    assert "does not name" in message and "nothing was committed" in message
    assert_usage_error(txlog("commit", "--transactional-id", "w", "--prepared-state", "x:y", data_dir=store_dir))
    assert_usage_error(txlog("commit", "--transactional-id", "w", "--prepared-state", "", data_dir=store_dir))
    assert _committed_values(store_dir) == []
    proc = txlog("commit", "--transactional-id", "w", "--prepared-state", str(state), data_dir=store_dir)
    assert_ok(proc)
    assert _committed_values(store_dir) == [b"x"]
    message = assert_one_error(
        txlog("commit", "--transactional-id", "w", "--prepared-state", str(state), data_dir=store_dir)
    )
    assert "no open transaction" in message


def test_a_prepared_state_for_an_ordinary_transaction_is_refused(store_dir):
    p = api.Producer(store_dir, transactional_id="plain")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", value=b"x")
    p.flush()
    p.store.close()  # dies mid-transaction
    message = assert_one_error(
        txlog("commit", "--transactional-id", "plain", "--prepared-state", f"{p.producer_id}:0", data_dir=store_dir)
    )
    assert "not a two-phase commit" in message


@pytest.mark.parametrize("command", [("abort",), ("transactions", "force-terminate")])
def test_abort_and_force_terminate_end_a_prepared_transaction(store_dir, command):
    _prepared(store_dir)
    proc = txlog(*command, "--transactional-id", "w", data_dir=store_dir)
    assert_ok(proc)
    assert "Aborted" in proc.stderr
    assert _committed_values(store_dir) == []
    with api.Admin(store_dir, read_only=True) as admin:
        log = admin.store.partition("t", 0)
        assert log.last_stable_offset == log.log_end_offset
    proc = txlog("transactions", "list", "--state", "Ongoing", "-o", "json", data_dir=store_dir)
    assert json.loads(proc.stdout) == []
