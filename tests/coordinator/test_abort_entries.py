"""A wide abort's `.txnindex` entries: all fsynced at once, each before its own marker (issue 26).

Rule 19 of docs/reliability-scenarios.md: a reader may never see an ABORT marker without the
`.txnindex` entry that tells it to skip the aborted data, so each partition's entry is durable
before its marker is written. The coordinator stages a window's entries under the hold
(`WriterHold.index_aborts`), fsyncs them at once, then appends the markers and fdatasyncs those
at once. Checked through the transport with os.fsync / os.fdatasync / os.write wrapped and keyed
by file: per partition, the entry's fsync ends before the marker's bytes are written (so no
writeback can put the marker on disk first), the entries' fsyncs are in flight together, and an
entry whose fsync fails fails its partition alone (no marker, no entry left behind; the others'
markers written and synced; the decision PREPARE_ABORT rolled forward later). The transports
keep the real clock: a marker stamped far in the past would let a reopened partition expire its
producer (transactional.id and producer-id expiry) and take the roll-forward's repeat for a new marker.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable

import pytest

from storage import Store, durable
from storage.high_watermark import HighWatermarkFile
from storage.partition_log import PartitionLog
from storage.records import build_batch
from storage.topic_name import TRANSACTION_STATE_TOPIC
from tests.coordinator.direct_txn import DirectTxn
from txlog.fetch import IsolationLevel, fetch
from txlog.schemas.transaction_log import TxnState
from txlog.tools.store_check import Severity, check_store
from txlog.transport import Transport

TOPIC = "data"
TXN_ID = "tx-abort-entries"
PARTITIONS = 4


#: How `calls` records a syncfs (storage.durable.syncfs): one call that syncs every file of the filesystem.
SYNCFS = ("syncfs", "filesystem")


class _Calls(list):
    """(call, file) of every fsync, fdatasync and write to a data partition or the coordinator, in the
    order they began: call is 'fsync' or 'write', file 'coordinator' or '<p>.txnindex' / '<p>.log';
    a syncfs is SYNCFS. `before(call, file)`, when set, runs first in the calling thread (it may raise
    OSError or wait)."""

    before: Callable[[str, str], None] | None = None


@pytest.fixture
def calls(monkeypatch) -> _Calls:
    seen = _Calls()
    real = {"fsync": os.fsync, "fdatasync": os.fdatasync, "write": os.write, "syncfs": durable.syncfs}

    def name(fd: int) -> str | None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        directory = os.path.basename(os.path.dirname(path))
        if directory.startswith(TRANSACTION_STATE_TOPIC + "-"):
            return "coordinator"
        if directory.startswith(TOPIC + "-"):
            return directory.rsplit("-", 1)[1] + os.path.splitext(path)[1]
        return None

    def hit(call: str, fd: int) -> None:
        file = name(fd)
        if file is None:
            return
        seen.append((call, file))
        if seen.before is not None:
            seen.before(call, file)

    def fsync(fd):
        hit("fsync", fd)
        real["fsync"](fd)

    def fdatasync(fd):
        hit("fsync", fd)
        real["fdatasync"](fd)

    def write(fd, data):
        hit("write", fd)
        return real["write"](fd, data)

    def syncfs(fd):
        seen.append(SYNCFS)
        if seen.before is not None:
            seen.before(*SYNCFS)
        real["syncfs"](fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(durable, "syncfs", syncfs)
    return seen


def _txn(transport: Transport) -> DirectTxn:
    return DirectTxn(transport, TXN_ID, TOPIC)


@pytest.fixture
def opened(store_path):
    """A store with TOPIC, a transaction's data written (unsynced) to every partition."""
    store = Store.open(store_path)
    store.create_topic(TOPIC, PARTITIONS)
    transport = Transport(store)
    txn = _txn(transport)
    txn.send_to(range(PARTITIONS), b"aborted")
    yield store, transport, txn
    store.close()


def _state(transport: Transport) -> TxnState:
    description = transport.transaction_coordinator.describe(TXN_ID)
    assert description is not None
    return description.state.state


def _visible(store: Store, partition: int) -> list[bytes | None]:
    log = store.partition(TOPIC, partition)
    return [r.value for r in fetch(log, 0, IsolationLevel.READ_COMMITTED, max_records=100).records]


def _aborts(store: Store, partition: int) -> list[int]:
    """The marker offsets of the partition's `.txnindex` entries."""
    return [
        entry.last_offset for seg in store.partition(TOPIC, partition).segments for entry in seg.txn_index.entries()
    ]


def _last_is_abort_marker(store: Store, partition: int) -> bool:
    last = store.partition(TOPIC, partition).read(0, 1 << 20)[-1]
    return last.is_control


def _after_decision(seen: _Calls) -> list[tuple[str, str]]:
    """The calls after PREPARE_ABORT's fsync (the data partitions' calls of the markers' step)."""
    decision = seen.index(("fsync", "coordinator"))
    return [c for c in seen[decision + 1 :] if c[1] != "coordinator"]


def test_each_entry_is_durable_before_its_marker_is_written(opened, calls, sync_method):
    """With syncfs, one syncfs stands for the round's fsyncs: the entries', then the markers'."""
    store, transport, txn = opened
    calls.clear()
    txn.abort()
    assert _state(transport) is TxnState.COMPLETE_ABORT
    step = _after_decision(calls)

    def sync(file: str) -> tuple[str, str]:
        return SYNCFS if sync_method == "syncfs" else ("fsync", file)

    for p in range(PARTITIONS):
        mine = [c for c in step if c[1].startswith(f"{p}.") or c == SYNCFS]
        # the entry written, its fsync, then (only then) the marker's bytes and their fdatasync
        assert mine == [
            ("write", f"{p}.txnindex"),
            sync(f"{p}.txnindex"),
            ("write", f"{p}.log"),
            sync(f"{p}.log"),
        ], mine
    # every entry's fsync ended before the first marker was written: the entries are one round
    first_marker = step.index(next(c for c in step if c == ("write", "0.log")))
    synced = sorted({sync(f"{p}.txnindex") for p in range(PARTITIONS)})
    assert sorted(c for c in step[:first_marker] if c[0] != "write") == synced
    for p in range(PARTITIONS):
        assert _visible(store, p) == [] and _last_is_abort_marker(store, p)
        end = store.partition(TOPIC, p).log_end_offset
        assert _aborts(store, p) == [end - 1]  # one entry, at the marker
        assert HighWatermarkFile(store.partition(TOPIC, p).directory, writable=False).read() == end


def test_the_entries_fsyncs_are_in_flight_at_once(opened, calls, monkeypatch):
    """A serial loop of entry fsyncs never brings two to the barrier (it breaks after the timeout,
    only a bound on a hang: fsyncs issued at once meet at once however slow the machine is). Of the
    per-file method: a syncfs makes them one call."""
    monkeypatch.setenv(durable.SYNC_METHOD_ENV, "fdatasync")
    _, transport, txn = opened
    barrier = threading.Barrier(PARTITIONS, timeout=120)

    def before(call: str, file: str) -> None:
        if call == "fsync" and file.endswith(".txnindex"):
            barrier.wait()

    calls.before = before
    txn.abort()
    assert not barrier.broken
    assert _state(transport) is TxnState.COMPLETE_ABORT


def _abort_failing(calls, transport: Transport, txn: DirectTxn, at: tuple[str, str], error: OSError) -> list:
    """End `txn` with an abort whose call `at` ((call, file name)) raises `error`: the decision is made,
    so the transaction stays PREPARE_ABORT; a failing fsync fails a syncfs too (the kernel reports a
    file's lost writeback through the filesystem's as well). Returns the calls made after the decision."""

    def before(call: str, file: str) -> None:
        if (call, file) == at or ((call, file) == SYNCFS and at[0] == "fsync"):
            raise error

    calls.clear()
    calls.before = before
    txn.abort()
    calls.before = None
    assert _state(transport) is TxnState.PREPARE_ABORT
    return _after_decision(calls)


def _assert_rolled_forward_whole(store_path: str) -> None:
    """A fresh process's first coordinator request rolls the decided abort forward: the transaction
    ends, every partition has its ABORT marker and the `.txnindex` entry for it, nothing is visible,
    and `check_store` finds no error."""
    after = Store.open(store_path)
    try:
        again = Transport(after)
        _txn(again)  # any coordinator request first rolls the decided transaction forward
        assert _state(again) is TxnState.EMPTY
        for p in range(PARTITIONS):
            assert _visible(after, p) == [] and _last_is_abort_marker(after, p)
            assert _aborts(after, p) == [after.partition(TOPIC, p).log_end_offset - 1]
        assert [f for f in check_store(after, TOPIC).findings if f.severity is Severity.ERROR] == []
    finally:
        after.close()


def test_a_failed_entry_fsync_fails_its_partition_alone(opened, calls, store_path, sync_method):
    """Partition 1's entry cannot be made durable: it gets no marker and keeps no entry; the other
    partitions' markers are written and synced; the decision stays PREPARE_ABORT (the client is
    answered as before) and a fresh process rolls it forward. With syncfs, the failed syncfs is
    followed by each entry's own fsync, which finds partition 1's."""
    store, transport, txn = opened

    step = _abort_failing(calls, transport, txn, ("fsync", "1.txnindex"), OSError(errno.EIO, "Input/output error"))
    assert not [c for c in step if c[1] == "1.log"]  # partition 1: no marker written, none synced
    assert _aborts(store, 1) == [] and not _last_is_abort_marker(store, 1)
    for p in (0, 2, 3):
        assert ("fsync", f"{p}.log") in step and _last_is_abort_marker(store, p)
        assert _aborts(store, p) == [store.partition(TOPIC, p).log_end_offset - 1]
    store.close()
    _assert_rolled_forward_whole(store_path)


def test_a_one_partition_abort_keeps_its_order(store_path, calls):
    """The one-partition path (no hold): the entry written and fsynced, then the marker, then its sync."""
    store = Store.open(store_path)
    try:
        store.create_topic(TOPIC, 1)
        transport = Transport(store)
        txn = _txn(transport)
        txn.send_to(range(1), b"aborted")
        calls.clear()
        txn.abort()
        assert _after_decision(calls) == [
            ("write", "0.txnindex"),
            ("fsync", "0.txnindex"),
            ("write", "0.log"),
            ("fsync", "0.log"),
        ]
        assert _visible(store, 0) == [] and _aborts(store, 0) == [store.partition(TOPIC, 0).log_end_offset - 1]
    finally:
        store.close()


def test_entries_whose_markers_were_not_written_are_taken_out(opened, calls, store_path):
    """The disk refuses partition 2's marker (ENOSPC): the markers before it are synced, and the
    entries staged for partitions 2 and 3, whose markers were not written, are taken out again (an
    entry without its marker would tell readers of an abort at an offset that holds something else);
    a fresh process rolls the decision forward."""
    store, transport, txn = opened

    step = _abort_failing(calls, transport, txn, ("write", "2.log"), OSError(errno.ENOSPC, "No space left on device"))
    assert sorted(f for c, f in step if c == "fsync" and f.endswith(".log")) == ["0.log", "1.log"]
    for p in (0, 1):
        assert _last_is_abort_marker(store, p) and _aborts(store, p) == [store.partition(TOPIC, p).log_end_offset - 1]
    for p in (2, 3):
        assert not _last_is_abort_marker(store, p) and _aborts(store, p) == []
    store.close()
    _assert_rolled_forward_whole(store_path)


class _WritesBeforeEachMarker(Transport):
    """A wrapper that appends a plain record to the partition before passing its marker on: a write between the
    entry the hold staged for the marker (and the marker planned with it) and the marker itself."""

    def write_txn_markers(self, topic, partition, *args, **kwargs):
        self.store.partition(topic, partition).append(build_batch([(None, b"between", None, None)]), sync=False)
        return super().write_txn_markers(topic, partition, *args, **kwargs)


def test_a_write_between_an_entry_and_its_marker_plans_the_marker_again(store_path):
    """An abort's marker reuses the plan its staged entry was made for only while nothing was written since:
    after a write in between, the marker takes the new log end and its entry is made again for that offset
    (the stale one taken out), so every partition ends on its ABORT marker at its entry's offset."""
    store = Store.open(store_path)
    try:
        store.create_topic(TOPIC, PARTITIONS)
        txn = _txn(_WritesBeforeEachMarker(store))
        txn.send_to(range(PARTITIONS), b"aborted")
        txn.abort()
        for p in range(PARTITIONS):
            log = store.partition(TOPIC, p)
            assert _last_is_abort_marker(store, p) and _aborts(store, p) == [log.log_end_offset - 1], p
            assert _visible(store, p) == [b"between"] and log.open_transactions() == {}, p
        assert [f for f in check_store(store, TOPIC).findings if f.severity is Severity.ERROR] == []
    finally:
        store.close()


def test_a_wide_abort_plans_each_marker_once(opened, monkeypatch):
    """The entry staged ahead of each marker and the marker itself come from one plan (issue 26: the
    abort's CPU per partition down to the commit's)."""
    store, transport, txn = opened
    planned: list[str] = []
    real = PartitionLog._plan_marker

    def plan_marker(self, *args, **kwargs):
        planned.append(self.directory)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(PartitionLog, "_plan_marker", plan_marker)
    txn.abort()
    assert sorted(planned) == sorted(store.partition(TOPIC, p).directory for p in range(PARTITIONS))
    for p in range(PARTITIONS):
        assert _last_is_abort_marker(store, p) and _aborts(store, p) == [store.partition(TOPIC, p).log_end_offset - 1]
