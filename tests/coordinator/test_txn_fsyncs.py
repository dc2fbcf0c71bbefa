"""A transaction pays only the fsyncs its order needs (docs/reliability-scenarios.md rule 19).

Counted by wrapping os.fsync / os.fdatasync (storage/durable.py looks them up at call time)
and naming the file each one hit. For a transaction of data in N partitions:

* registration (the ONGOING record), before any data: 1;
* data, written without fdatasync (`produce(..., sync=False)`): 0;
* commit: each data partition synced before PREPARE_COMMIT (N), PREPARE_COMMIT (1), a marker
  per partition (N); COMPLETE_COMMIT none: 2 + 2N, so 4 for one partition;
* abort: no data sync: PREPARE_ABORT, then per partition the `.txnindex` entry (durable before
  its marker) and the marker: 1 + 2N after the registration.

The claim behind the unsynced COMPLETE is tested too: when a power loss takes it, the durable
PREPARE is rolled forward again and the markers are not written twice.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable

import pytest

from storage import Store
from storage.errors import KafkaStorageError
from storage.file_records import FileRecords
from storage.high_watermark import HighWatermarkFile
from storage.log_files import log_file
from storage.topic_name import TRANSACTION_STATE_TOPIC
from tests.coordinator.direct_txn import DirectTxn
from txlog.fetch import IsolationLevel, fetch
from txlog.schemas.transaction_log import TxnState
from txlog.tools.fault_injection import FaultInjectingTransport, FaultPlan
from txlog.transport import Transport

TOPIC = "data"
TXN_ID = "tx-fsyncs"
NOW_MS = 1_700_000_000_000  # a fixed clock: no timeout or periodic sweep can add work to a count


def _txn(transport: Transport) -> DirectTxn:
    return DirectTxn(transport, TXN_ID, TOPIC)


@pytest.fixture
def setup(store_path):
    """A store with TOPIC (2 partitions), one transaction already run (everything is open), a fixed clock."""
    store = Store.open(store_path)
    store.create_topic(TOPIC, 2)
    transport = Transport(store, clock=lambda: NOW_MS)
    txn = _txn(transport)
    txn.run((0, 1), commit=True)
    yield store, transport, txn
    store.close()


class _Hits(list):
    """The names of the files fsynced, in the order the calls began; `before(name)`, when set, runs
    first in the calling thread (it may raise OSError, as a failing disk does, or wait)."""

    before: Callable[[str], None] | None = None


@pytest.fixture
def fsyncs(monkeypatch) -> _Hits:
    """The file each os.fsync / os.fdatasync call hits, as 'coordinator', 'data-<p>' or the path."""
    hits = _Hits()
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def name(fd: int) -> str:
        path = os.readlink(f"/proc/self/fd/{fd}")
        directory = os.path.basename(os.path.dirname(path))
        if directory.startswith(TRANSACTION_STATE_TOPIC + "-"):
            return "coordinator"
        if directory.startswith(TOPIC + "-"):
            return "data-" + directory.rsplit("-", 1)[1]
        return path

    def hit(fd: int) -> None:
        hits.append(name(fd))
        if hits.before is not None:
            hits.before(name(fd))

    def fsync(fd):
        hit(fd)
        real_fsync(fd)

    def fdatasync(fd):
        hit(fd)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    return hits


def _committed(store: Store, partition: int) -> list[bytes]:
    log = store.partition(TOPIC, partition)
    return [r.value for r in fetch(log, 0, IsolationLevel.READ_COMMITTED, max_records=1000).records]


def test_a_one_partition_commit_costs_four_fsyncs_in_order(setup, fsyncs):
    store, _, txn = setup
    txn.register(0)
    assert fsyncs == ["coordinator"]  # registration, durable before any data
    for i in range(5):
        txn.send(0, b"%d" % i)
    assert fsyncs == ["coordinator"]  # the data: no fsync of its own
    txn.end(commit=True)
    # data synced, then the decision, then the marker; COMPLETE_COMMIT not synced
    assert fsyncs == ["coordinator", "data-0", "coordinator", "data-0"]
    assert _committed(store, 0)[-5:] == [b"0", b"1", b"2", b"3", b"4"]


def test_an_abort_syncs_no_data(setup, fsyncs):
    store, _, txn = setup
    txn.run((0,), commit=False)  # the segment's first abort also creates its .txnindex (a directory fsync)
    before = _committed(store, 0)
    fsyncs.clear()
    txn.register(0)
    txn.send(0, b"gone")
    txn.end(commit=False)
    # registration, PREPARE_ABORT, then per partition the .txnindex entry (durable before its
    # marker, rule 16) and the marker; no data sync: the marker's fdatasync covers the file
    assert fsyncs == ["coordinator", "coordinator", "data-0", "data-0"]
    assert _committed(store, 0) == before


def test_a_two_partition_commit_syncs_both_before_the_decision(setup, fsyncs):
    _, _, txn = setup
    txn.run((0, 1), commit=True)
    # the two syncs of a step run at once, so their order within the step is not fixed
    steps = [fsyncs[0], sorted(fsyncs[1:3]), fsyncs[3], sorted(fsyncs[4:])]
    assert steps == ["coordinator", ["data-0", "data-1"], "coordinator", ["data-0", "data-1"]]


def _meet_at(barrier: threading.Barrier) -> Callable[[str], None]:
    """A `before` hook: every data partition's fsync waits until the barrier's other party's has begun.

    A serial loop of syncs never brings two to the barrier, which breaks after the timeout (only a
    bound on a hang: a parallel sync meets its partner at once however slow the machine is).
    """

    def before(name: str) -> None:
        if name.startswith("data-"):
            barrier.wait()

    return before


def test_the_syncs_of_each_commit_step_are_in_flight_at_once(setup, fsyncs):
    """Data syncs before PREPARE_COMMIT, and the markers' syncs after it, are issued in parallel."""
    store, _, txn = setup
    barrier = threading.Barrier(2, timeout=120)
    txn.register(0, 1)
    txn.send(0, b"p0")
    txn.send(1, b"p1")
    fsyncs.clear()
    fsyncs.before = _meet_at(barrier)
    txn.end(commit=True)  # a serial sync would break the barrier: BrokenBarrierError
    assert not barrier.broken
    assert fsyncs[2] == "coordinator" and sorted(fsyncs[:2]) == sorted(fsyncs[3:]) == ["data-0", "data-1"]
    assert (_committed(store, 0)[-1], _committed(store, 1)[-1]) == (b"p0", b"p1")


def _fail(partition: str, *, after_decision: bool, hits: list[str]) -> Callable[[str], None]:
    """A `before` hook: EIO for `partition`'s fsync (only once the PREPARE was synced, if `after_decision`)."""

    def before(name: str) -> None:
        if name == partition and (not after_decision or "coordinator" in hits):
            raise OSError(errno.EIO, "Input/output error")

    return before


def test_a_failed_data_sync_fails_the_commit_before_the_decision(setup, fsyncs, store_path):
    """One data partition's sync fails: the end fails, no PREPARE is written, the other partition's
    sync still ran to its end first, and the transaction stays open, so it can be aborted."""
    store, transport, txn = setup
    txn.register(0, 1)
    txn.send(0, b"lost-0")
    txn.send(1, b"lost-1")
    pid, epoch = txn.pid, txn.epoch
    fsyncs.clear()
    fsyncs.before = _fail("data-0", after_decision=False, hits=fsyncs)
    with pytest.raises(KafkaStorageError):
        txn.end(commit=True)
    assert sorted(fsyncs) == ["data-0", "data-1"]  # both syncs issued, no decision written
    fsyncs.before = None
    assert transport.transaction_coordinator.describe(TXN_ID).state.state is TxnState.ONGOING
    store.close()  # the failed view refuses writes: a fresh process aborts
    after = Store.open(store_path)
    try:
        again = Transport(after, clock=lambda: NOW_MS)
        again.end_txn(TXN_ID, pid, epoch, commit=False)
        assert again.transaction_coordinator.describe(TXN_ID).state.state is TxnState.COMPLETE_ABORT
        assert b"lost-0" not in _committed(after, 0) and b"lost-1" not in _committed(after, 1)
    finally:
        after.close()


def test_a_failed_marker_sync_leaves_the_decision_to_roll_forward(setup, fsyncs, store_path):
    """A marker's sync fails after PREPARE_COMMIT: as before, the end answers with the decision and
    no COMPLETE is written; the other partition's marker is still written and synced; a fresh
    process rolls the durable decision forward."""
    store, transport, txn = setup
    txn.register(0, 1)
    txn.send(0, b"kept-0")
    txn.send(1, b"kept-1")
    fsyncs.clear()
    fsyncs.before = _fail("data-0", after_decision=True, hits=fsyncs)
    txn.end(commit=True)  # decided: the client is told the commit happened
    assert fsyncs[3:] and sorted(fsyncs[3:]) == ["data-0", "data-1"]  # both markers' syncs were issued
    fsyncs.before = None
    assert transport.transaction_coordinator.describe(TXN_ID).state.state is TxnState.PREPARE_COMMIT
    store.close()
    after = Store.open(store_path)
    try:
        again = Transport(after, clock=lambda: NOW_MS)
        _txn(again)  # any coordinator request first rolls the decided transaction forward
        assert again.transaction_coordinator.describe(TXN_ID).state.state is TxnState.EMPTY
        assert (_committed(after, 0)[-1], _committed(after, 1)[-1]) == (b"kept-0", b"kept-1")
    finally:
        after.close()


def test_data_already_flushed_is_not_synced_again_at_commit(setup, fsyncs):
    store, transport, _ = setup
    wrapped = FaultInjectingTransport(transport, FaultPlan())
    txn = _txn(wrapped)
    fsyncs.clear()
    txn.register(0)
    txn.send(0, b"x")
    wrapped.sync_partitions([(TOPIC, 0)])  # a transactional producer's flush()
    assert fsyncs == ["coordinator", "data-0"]
    txn.end(commit=True)
    assert fsyncs == ["coordinator", "data-0", "coordinator", "data-0"]  # PREPARE and marker only
    assert _committed(store, 0)[-1] == b"x"


def _coordinator_log(store: Store, transport: Transport):
    return store.partition(TRANSACTION_STATE_TOPIC, transport.transaction_coordinator.partition_for(TXN_ID))


def test_a_complete_lost_to_power_loss_is_rolled_forward_without_a_second_marker(setup, store_path):
    store, transport, txn = setup
    txn.register(0)
    txn.send(0, b"kept")
    txn.end(commit=True)
    coordinator = _coordinator_log(store, transport)
    end = coordinator.log_end_offset
    hw_file = HighWatermarkFile(coordinator.directory, writable=False)
    try:
        durable = hw_file.read()
    finally:
        hw_file.close()
    assert durable == end - 1  # everything but the COMPLETE_COMMIT record is known durable
    data_end = store.partition(TOPIC, 0).log_end_offset

    # Power loss: the unsynced COMPLETE_COMMIT never reached the disk.
    path = log_file(coordinator.directory, coordinator.segments[-1].base_offset)
    with FileRecords.open(path) as records:
        cut = next(b.position for b in records.batches() if b.base_offset == durable)
    os.truncate(path, cut)

    after = Store.open(store_path)
    try:
        again = Transport(after, clock=lambda: NOW_MS)
        assert again.transaction_coordinator.describe(TXN_ID).state.state is TxnState.PREPARE_COMMIT
        _txn(again)  # any coordinator request first rolls the decided transaction forward
        assert after.partition(TOPIC, 0).log_end_offset == data_end  # the marker was not written again
        assert _committed(after, 0).count(b"kept") == 1
        assert again.transaction_coordinator.describe(TXN_ID).state.state is TxnState.EMPTY
    finally:
        after.close()


def test_markers_written_before_a_failed_marker_write_are_still_made_durable(setup, fsyncs, monkeypatch):
    """The disk refuses the second marker (ENOSPC): the first one, written without its fdatasync,
    is synced all the same before the error ends the step; the decision stays for roll-forward."""
    _, transport, txn = setup
    txn.register(0, 1)
    txn.send(0, b"a")
    txn.send(1, b"b")
    real_write = os.write

    def write(fd, data):
        if "coordinator" in fsyncs and f"/{TOPIC}-1/" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    fsyncs.clear()
    monkeypatch.setattr(os, "write", write)
    txn.end(commit=True)  # decided: the client is told the commit happened
    monkeypatch.setattr(os, "write", real_write)
    prepare = fsyncs.index("coordinator")  # the PREPARE_COMMIT (after both data syncs)
    assert fsyncs[prepare + 1 :] == ["data-0"]  # the first marker's sync, though the second failed
    assert transport.transaction_coordinator.describe(TXN_ID).state.state is TxnState.PREPARE_COMMIT
