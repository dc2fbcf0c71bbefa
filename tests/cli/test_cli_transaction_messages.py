"""Clear transaction-state messages (issue 23, item 8).

A second `produce --transactional-id ID --no-commit` fences the first instance and aborts its open
transaction (Kafka's InitProducerId): it now says so. A transaction aborted by its timeout is named
as such by `txlog commit`/`txlog abort`, which said only "last state: CompleteAbort" -- and a
transaction someone aborted is never called timed out.
"""

from __future__ import annotations

import json
import re
import time

from tests.cli.cli_helpers import assert_ok, assert_one_error, make_store, txlog


def _produce_open(store: str, transactional_id: str, *extra: str, lines: str = "a\nb\nc\n"):
    proc = txlog(
        "produce", "-t", "t", "-p", "0", "--transactional-id", transactional_id, "--no-commit", *extra,
        data_dir=store, input=lines,
    )  # fmt: skip
    assert_ok(proc)
    return proc


def test_a_second_no_commit_produce_says_it_aborted_the_first_ones_transaction(tmp_path):
    store = str(tmp_path / "store")
    make_store(store, t=1)
    first = _produce_open(store, "load-1")
    pid, epoch = re.search(r"left open \(producer id (\d+), epoch (\d+)\)", first.stderr).groups()
    assert "note:" not in first.stderr
    second = _produce_open(store, "load-1", lines="d\n")
    assert (
        f"note: transactional id load-1 had an open transaction (producer id {pid}, epoch {epoch}, 1 partition); "
        "starting this producer aborted it\n"
    ) in second.stderr
    assert_ok(txlog("commit", "--transactional-id", "load-1", data_dir=store))
    assert txlog("consume", "-t", "t", data_dir=store).stdout == "d\n"  # the first one's records were aborted
    third = _produce_open(store, "load-1", lines="e\n")  # nothing was open: nothing to say
    assert "note:" not in third.stderr


def test_commit_and_abort_say_a_transaction_was_aborted_by_its_timeout(tmp_path):
    store = str(tmp_path / "store")
    make_store(store, t=1)
    _produce_open(store, "slow", "--transaction-timeout-ms", "2000")
    # --no-sweep: a look that cannot abort it, however long this machine took to get here
    described = json.loads(
        txlog(
            "transactions", "describe", "--transactional-id", "slow", "--no-sweep", "-o", "json", data_dir=store
        ).stdout
    )
    deadline_ms = described["currentTransactionStartTimeMs"] + described["transactionTimeoutMs"]
    while time.time() * 1000 <= deadline_ms + 5:  # past its deadline: the next look at it aborts it
        time.sleep(0.05)
    for verb in ("commit", "abort"):
        message = assert_one_error(txlog(verb, "--transactional-id", "slow", data_dir=store))
        assert message == (
            f"cannot {verb}: transactional id 'slow' has no open transaction: its last transaction (producer id "
            f"{described['producerId']}, epoch {described['producerEpoch']}, 1 partition) was aborted by the "
            "transaction timeout (transaction.timeout.ms=2000: open for more than 2000 ms)"
        )
    assert txlog("consume", "-t", "t", data_dir=store).stdout == ""


def test_a_transaction_aborted_by_a_person_is_not_called_timed_out(tmp_path):
    store = str(tmp_path / "store")
    make_store(store, t=1)
    _produce_open(store, "quick")
    assert_ok(txlog("abort", "--transactional-id", "quick", data_dir=store))
    message = assert_one_error(txlog("abort", "--transactional-id", "quick", data_dir=store))
    assert message == "cannot abort: transactional id 'quick' has no open transaction (last state: CompleteAbort)"
