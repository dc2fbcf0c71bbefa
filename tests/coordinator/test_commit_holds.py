"""A commit's syncs and markers under held partitions (storage.partition_log.WriterHold, issue 26).

The coordinator takes the locks of a window of the transaction's partitions, catches each view up
once, writes the markers (in partition order) and syncs them all before releasing them. A commit
whose partitions fit one window holds them from their data syncs, across PREPARE_COMMIT, to their
markers' syncs: one lock and one catch-up each. Checked here through the transport, as a producer
reaches it: another writer's append made before the commit is seen and lands below the marker and
the HW; at PREPARE_COMMIT every data partition is durable and still held, and was caught up once; a
transaction wider than a window still has every marker durable before COMPLETE_COMMIT; a partition
whose lock or catch-up fails stops the markers there, with the markers before it durable and the
decision rolled forward later; a marker's failed fdatasync under the long hold leaves the decision
to the roll-forward.
"""

from __future__ import annotations

import os
import threading

from storage import Store
from storage.descriptor_cache import CACHE, set_limit
from storage.errors import KafkaStorageError
from storage.high_watermark import HighWatermarkFile
from storage.lock import writer_lock_if_free
from storage.partition_log import LOCK_FILE, PartitionLog, WriterHold
from storage.records import build_batch
from storage.topic_name import TRANSACTION_STATE_TOPIC
from tests.coordinator.direct_txn import DirectTxn
from txlog.fetch import IsolationLevel, fetch
from txlog.schemas.transaction_log import TxnState
from txlog.transport import Transport

TOPIC = "data"
TXN_ID = "tx-holds"
NOW_MS = 1_700_000_000_000


def _txn(transport: Transport) -> DirectTxn:
    return DirectTxn(transport, TXN_ID, TOPIC)


def _open(store_path: str, partitions: int) -> tuple[Store, Transport, DirectTxn]:
    store = Store.open(store_path)
    store.create_topic(TOPIC, partitions)
    transport = Transport(store, clock=lambda: NOW_MS)
    return store, transport, _txn(transport)


def _durable_end(log: PartitionLog) -> int | None:
    return HighWatermarkFile(log.directory, writable=False).read()


def _last_batch(log: PartitionLog):
    batches = log.read(0, 1 << 20)
    return batches[-1]


def _committed(store: Store, partition: int) -> list[bytes | None]:
    log = store.partition(TOPIC, partition)
    return [r.value for r in fetch(log, 0, IsolationLevel.READ_COMMITTED, max_records=100).records]


def _state(transport: Transport) -> TxnState:
    description = transport.transaction_coordinator.describe(TXN_ID)
    assert description is not None
    return description.state.state


def test_another_writers_append_before_the_commit_lies_below_the_marker_and_the_hw(store_path):
    store, _, txn = _open(store_path, 2)
    txn.send_to(range(2), b"txn")
    other = Store.open(store_path)  # its own flock, as another process
    other.partition(TOPIC, 0).append(build_batch([(None, b"other", None, None)]), sync=False)
    txn.commit()
    log = store.partition(TOPIC, 0)
    marker = _last_batch(log)
    assert marker.is_control and marker.base_offset == 2  # after the other writer's batch, not over it
    assert _durable_end(log) == log.log_end_offset == 3
    assert _committed(store, 0) == [b"txn", b"other"]
    other.close()
    store.close()


def test_a_transaction_wider_than_a_window_has_every_marker_durable_before_complete(store_path, monkeypatch):
    store, transport, txn = _open(store_path, 5)
    logs = [store.partition(TOPIC, p) for p in range(5)]
    txn.send_to(range(5), b"v")
    steps: list[tuple[str, int]] = []  # (what was fsynced, how many data partitions this process held then)
    real = os.fdatasync
    probing = (
        threading.Lock()
    )  # the syncs run at once: one thread's probe of a lock must not count as held by another's

    def fdatasync(fd: int) -> None:
        directory = os.path.basename(os.path.dirname(os.readlink(f"/proc/self/fd/{fd}")))
        held = 0
        with probing:
            for log in logs:
                with writer_lock_if_free(os.path.join(log.directory, LOCK_FILE)) as free:
                    held += not free
        steps.append(("coordinator" if directory.startswith(TRANSACTION_STATE_TOPIC) else "data", held))
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    limit = CACHE.limit
    set_limit(4)
    try:
        assert WriterHold.window() == 2
        txn.commit()
    finally:
        set_limit(limit)
    kinds = [kind for kind, _ in steps]
    # five data syncs, the decision, five markers' syncs, and COMPLETE_COMMIT unsynced
    assert kinds == ["data"] * 5 + ["coordinator"] + ["data"] * 5
    assert max(held for _, held in steps) <= 2, steps
    assert all(_last_batch(log).is_control and _durable_end(log) == log.log_end_offset for log in logs)
    assert _state(transport) == TxnState.COMPLETE_COMMIT
    store.close()


def _held_data_partitions(logs: list[PartitionLog]) -> list[bool]:
    """Which of `logs` have their writer lock taken (by this process: a probe from here cannot take it)."""
    held = []
    for log in logs:
        with writer_lock_if_free(os.path.join(log.directory, LOCK_FILE)) as free:
            held.append(not free)
    return held


def test_a_commit_within_one_window_holds_its_data_partitions_from_their_syncs_to_their_markers(
    store_path, monkeypatch
):
    store, transport, txn = _open(store_path, 4)
    logs = [store.partition(TOPIC, p) for p in range(4)]
    txn.send_to(range(4), b"v")
    catch_ups: dict[int, int] = {}
    real_catch_up = PartitionLog._catch_up

    def catch_up(self: PartitionLog, *, repair: bool) -> None:
        if repair:  # a writer's (a reader's, such as the checks below, does not repair)
            catch_ups[id(self)] = catch_ups.get(id(self), 0) + 1
        real_catch_up(self, repair=repair)

    monkeypatch.setattr(PartitionLog, "_catch_up", catch_up)
    at_prepare: list[tuple[list[bool], list[bool]]] = []
    real_prepare = transport.transaction_coordinator._prepare

    def prepare(*args, **kwargs):
        durable = [_durable_end(log) == log.log_end_offset for log in logs]
        at_prepare.append((durable, _held_data_partitions(logs)))
        return real_prepare(*args, **kwargs)

    monkeypatch.setattr(transport.transaction_coordinator, "_prepare", prepare)
    hw_reads: list[str] = []
    real_read = HighWatermarkFile.read

    def read(self: HighWatermarkFile) -> int | None:
        hw_reads.append(os.path.basename(os.path.dirname(self.path)))
        return real_read(self)

    monkeypatch.setattr(HighWatermarkFile, "read", read)
    txn.commit()
    assert at_prepare == [([True] * 4, [True] * 4)]  # synced, and still held for the markers
    # Neither round asks a HW file whether another process synced already: the data is this view's own,
    # unsynced (a sync too many at worst), and the markers were written under the hold, where nobody else
    # can have synced them. The reads left are the test's own, in `prepare` above.
    assert sorted(h for h in hw_reads if h.startswith(TOPIC)) == sorted([f"{TOPIC}-{p}" for p in range(4)])
    assert [catch_ups.get(id(log), 0) for log in logs] == [1] * 4  # one writer's catch-up serves both rounds
    assert _held_data_partitions(logs) == [False] * 4  # let go once the end is over
    assert all(_last_batch(log).is_control and _durable_end(log) == log.log_end_offset for log in logs)
    assert _state(transport) == TxnState.COMPLETE_COMMIT
    store.close()


def test_a_failed_marker_sync_under_the_long_hold_leaves_the_decision_to_the_roll_forward(store_path, monkeypatch):
    """Partition 2's marker cannot be made durable: the others' are, the partition refuses writes from then
    on (never retried), the decision stays PREPARE_COMMIT, and a fresh process (the partition reopened,
    its tail synced by recovery) completes it."""
    monkeypatch.setenv("TXLOG_SYNC_METHOD", "fdatasync")  # the failure is injected per file
    store, transport, txn = _open(store_path, 4)
    logs = [store.partition(TOPIC, p) for p in range(4)]
    txn.send_to(range(4), b"v")
    real = os.fdatasync
    markers_step = threading.Event()
    real_prepare = transport.transaction_coordinator._prepare

    def prepare(*args, **kwargs):
        prepared = real_prepare(*args, **kwargs)
        markers_step.set()
        return prepared

    def fdatasync(fd: int) -> None:
        if markers_step.is_set() and os.path.dirname(os.readlink(f"/proc/self/fd/{fd}")) == logs[2].directory:
            raise OSError(5, "Input/output error")
        real(fd)

    monkeypatch.setattr(transport.transaction_coordinator, "_prepare", prepare)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    txn.commit()  # decided: answered as committed, the last marker is the roll-forward's
    assert _state(transport) == TxnState.PREPARE_COMMIT
    assert logs[2].failed
    for p in (0, 1, 3):
        assert _last_batch(logs[p]).is_control and _durable_end(logs[p]) == logs[p].log_end_offset
    assert _held_data_partitions(logs) == [False] * 4
    store.close()
    monkeypatch.setattr(os, "fdatasync", real)
    after = Store.open(store_path)
    again = Transport(after, clock=lambda: NOW_MS)
    again.transaction_coordinator.sweep_all()
    assert _state(again) == TxnState.COMPLETE_COMMIT
    assert [_committed(after, p) for p in range(4)] == [[b"v"]] * 4
    after.close()


def test_a_partition_that_cannot_be_held_stops_the_markers_and_those_before_it_are_durable(store_path, monkeypatch):
    """A transaction wider than one window (the descriptor cache's limit at 4): its markers' windows are
    taken after PREPARE_COMMIT, and partition 1's catch-up fails then."""
    store, transport, txn = _open(store_path, 3)
    logs = [store.partition(TOPIC, p) for p in range(3)]
    txn.send_to(range(3), b"v")
    real_catch_up = PartitionLog._catch_up
    refusing = threading.Event()

    def catch_up(self: PartitionLog, *, repair: bool) -> None:
        if refusing.is_set() and self is logs[1] and repair:  # its writes fail; reads go on
            raise KafkaStorageError("the disk said no")
        real_catch_up(self, repair=repair)

    monkeypatch.setattr(PartitionLog, "_catch_up", catch_up)
    real_prepare = transport.transaction_coordinator._prepare

    def prepare_then_refuse(*args, **kwargs):
        prepared = real_prepare(*args, **kwargs)
        refusing.set()  # the data syncs went through; partition 1 refuses from the markers on
        return prepared

    monkeypatch.setattr(transport.transaction_coordinator, "_prepare", prepare_then_refuse)
    limit = CACHE.limit
    set_limit(4)
    try:
        assert WriterHold.window() == 2
        txn.commit()  # decided: the markers that could not be written are the roll-forward's
    finally:
        set_limit(limit)
    assert _state(transport) == TxnState.PREPARE_COMMIT
    assert _last_batch(logs[0]).is_control and _durable_end(logs[0]) == logs[0].log_end_offset
    assert not _last_batch(logs[1]).is_control and not _last_batch(logs[2]).is_control
    refusing.clear()
    transport.transaction_coordinator.sweep_all()  # the roll-forward writes the rest
    assert _state(transport) == TxnState.COMPLETE_COMMIT
    assert all(_last_batch(log).is_control and _durable_end(log) == log.log_end_offset for log in logs)
    assert [_committed(store, p) for p in range(3)] == [[b"v"]] * 3
    store.close()
