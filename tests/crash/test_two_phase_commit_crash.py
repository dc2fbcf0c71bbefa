"""KIP-939's recovery matrix with real processes killed -9 (tests/crash/two_pc_worker.py).

A two-phase commit participant dies before or after `prepare_transaction()`; what the next
instance of its transactional id does decides the transaction, never the transaction timeout:

* died before prepare: the manager kept no state, so the new instance keeping it completes it
  with none (-> aborted); a new instance that does not keep prepared transactions aborts it;
* died after prepare: a sweep of the coordinator long past any timeout leaves it open; the new
  instance keeping it commits it by the state the manager kept, aborts it for a state naming
  another transaction, and an instance that does not keep it aborts it; a recovering instance
  killed between its init and its completion leaves it for the next one.

After each: read_committed is exactly the transaction (or nothing), the store's invariants hold
(txn_crash_worker.check_store, settled: nothing open or decided-but-unmarked), `txlog verify`
is clean and `txlog transactions list --state Ongoing` is empty.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from two_pc_worker import Worker, value  # noqa: E402
from txn_crash_worker import Worker as TxnWorker  # noqa: E402
from txn_crash_worker import check_store, fetch_all, make_store  # noqa: E402

from storage import Store  # noqa: E402
from tests.cli.cli_helpers import assert_ok, txlog  # noqa: E402

TID = "2pc-0"
COUNT = 5
MONTH_MS = 30 * 24 * 3600 * 1000


@pytest.fixture
def root(tmp_path) -> str:
    path = str(tmp_path / "store")
    make_store(path, {"t": 1})
    return path


def _killed_writer(root: str, point: str) -> str | None:
    """A writer killed -9 at `point`; returns the prepared state it printed (None before prepare)."""
    w = Worker("write", root, "--tid", TID, "--count", COUNT, "--kill", point)
    w.expect(f"KILL {point}")
    w.finish()
    prepared = w.line("PREPARED ")
    return None if prepared is None else prepared.split(" ", 1)[1]


def _recover(root: str, *, keep: bool, state: str, kill: str = "none") -> str | None:
    args = ["--tid", TID, "--state", state, "--kill", kill] + (["--keep"] if keep else [])
    w = Worker("recover", root, *args)
    if kill != "none":
        w.expect(f"KILL {kill}")
        w.finish()
        return None
    lines = w.check_ok()
    return next(line for line in lines if line.startswith("RESULT ")).split(" ", 1)[1]


def _sweep_long_after(root: str) -> None:
    """Another process runs the coordinator's sweep a month later (the timeout path of every id)."""
    w = TxnWorker("recover", root, "--how", "sweep", "--clock-offset-ms", MONTH_MS)
    assert "RESULT ok" in w.check_ok()


def _committed(root: str) -> list[bytes]:
    with Store.open(root, read_only=True) as store:
        return [v for _, v in fetch_all(store.partition("t", 0), "read_committed")]


def _described(root: str) -> dict:
    proc = txlog("transactions", "describe", "--transactional-id", TID, "--no-sweep", "-o", "json", data_dir=root)
    assert_ok(proc)
    return json.loads(proc.stdout)


def _assert_settled(root: str, committed: bool) -> None:
    assert _committed(root) == ([value("v", i) for i in range(COUNT)] if committed else [])
    check_store(root, settled=True)
    proc = txlog("verify", "-o", "json", data_dir=root)
    assert_ok(proc)
    assert json.loads(proc.stdout) == []
    proc = txlog("transactions", "list", "--state", "Ongoing", "-o", "json", data_dir=root)
    assert_ok(proc)
    assert json.loads(proc.stdout) == []


def _assert_open(root: str, state: str | None) -> None:
    """Still open and invisible: Ongoing at the coordinator, nothing read_committed, the LSO pinned."""
    d = _described(root)
    assert d["transactionState"] == "Ongoing" and d["twoPhaseCommit"] is True
    if state is not None:
        assert d["preparedTxnState"] == state
    assert _committed(root) == []
    check_store(root, settled=False)


@pytest.mark.parametrize("keep", [True, False], ids=["keep-with-no-state", "no-keep"])
def test_crash_before_prepare_is_aborted_by_the_next_instance(root, keep):
    assert _killed_writer(root, "data") is None
    _sweep_long_after(root)
    _assert_open(root, None)  # a 2PC transaction waits for its manager, even unprepared
    assert _recover(root, keep=keep, state="") == ("done" if keep else "nothing")
    _assert_settled(root, committed=False)


def test_crash_after_prepare_is_committed_by_the_kept_state_long_after(root):
    state = _killed_writer(root, "prepared")
    assert state
    _sweep_long_after(root)
    _assert_open(root, state)
    assert _recover(root, keep=True, state=state) == "done"
    _assert_settled(root, committed=True)


def test_crash_after_prepare_with_a_mismatching_state_is_aborted(root):
    state = _killed_writer(root, "prepared")
    pid, epoch = map(int, state.split(":"))
    assert _recover(root, keep=True, state=f"{pid}:{epoch + 1}") == "done"
    _assert_settled(root, committed=False)


def test_crash_after_prepare_then_an_instance_without_keep_aborts_it(root):
    state = _killed_writer(root, "prepared")
    assert _recover(root, keep=False, state=state) == "nothing"
    _assert_settled(root, committed=False)


def test_a_recovery_killed_before_completing_leaves_it_to_the_next(root):
    state = _killed_writer(root, "prepared")
    _recover(root, keep=True, state=state, kill="after-init")
    _sweep_long_after(root)
    _assert_open(root, state)  # the same transaction, named by the same state
    assert _recover(root, keep=True, state=state) == "done"
    _assert_settled(root, committed=True)
