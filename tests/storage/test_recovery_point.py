"""Recovery after a kill -9 replays at most SNAPSHOT_INTERVAL_BYTES, however large the active segment.

A writer snapshots producer state every SNAPSHOT_INTERVAL_BYTES of active segment, at a point the
HW says is durable (docs/DESIGN.md §3, "Recovery from a recent durable point"); recovery replays,
fully validated, from the newest usable snapshot as it always did. Damage below that snapshot is
not looked for at open (as below a clean close's), but every read CRC-checks what it returns and
`check_store` (`txlog verify`) finds it. A `.log` cut below the snapshot (power loss, simulated) is
caught by the snapshot's own check (KAFKA-5747): the state comes from an older snapshot.

The crash state is the store's files copied while its writer is open and has not closed: what a
kill -9 leaves (the page cache is the file). Bytes of `.log` read are counted by wrapping
os.pread/os.read, as tests/benchmarks/bench_recovery.py does.
"""

from __future__ import annotations

import os
import shutil
import time

import pytest

from storage import Store
from storage.errors import CorruptRecordError
from storage.file_records import FileRecords
from storage.producer_snapshot import list_snapshots
from storage.producer_state_snapshots import SNAPSHOT_INTERVAL_BYTES
from storage.records import ControlType, RecordBatch, build_batch
from txlog.tools.store_check import check_store

TOPIC = "t"
PID, TXN_PID = 4242, 4343
NOW = int(time.time() * 1000)
VALUE = 60_000  # ~60 KB batches: an interval is ~280 of them
BIG_SEGMENT = {"segment.bytes": 1 << 30}


class LogReads:
    """Bytes read from `.log` files through os.pread / os.read while installed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.log_bytes = 0
        pread, read = os.pread, os.read

        def counted_pread(fd: int, n: int, offset: int) -> bytes:
            data = pread(fd, n, offset)
            self._count(fd, len(data))
            return data

        def counted_read(fd: int, n: int) -> bytes:
            data = read(fd, n)
            self._count(fd, len(data))
            return data

        monkeypatch.setattr(os, "pread", counted_pread)
        monkeypatch.setattr(os, "read", counted_read)

    def _count(self, fd: int, n: int) -> None:
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return
        if path.endswith(".log"):
            self.log_bytes += n


def _pdir(root: str) -> str:
    return os.path.join(root, f"{TOPIC}-0")


def _active_log(root: str) -> str:
    names = sorted(n for n in os.listdir(_pdir(root)) if n.endswith(".log"))
    return os.path.join(_pdir(root), names[-1])


def _snapshots_inside(root: str, end: int) -> list[int]:
    """Offsets of the snapshots strictly inside the only segment (past its base 0, before the log end)."""
    return [offset for offset, _ in list_snapshots(_pdir(root)) if 0 < offset < end]


def _data(seq: int, value_size: int = VALUE, *, pid: int = PID, transactional: bool = False) -> bytes:
    return build_batch(
        [(b"k%d" % seq, (b"%d:" % seq) + b"v" * value_size, None, NOW + seq)],
        producer_id=pid,
        producer_epoch=0,
        base_sequence=seq,
        is_transactional=transactional,
    )


def _batches(path: str) -> list[RecordBatch]:
    with FileRecords.open(path) as records:
        return list(records.batches(0))


def _crash_copy(tmp_path, batches: int, *, with_txns: bool = False) -> tuple[str, int]:
    """A store whose writer appended `batches` synced batches into one active segment and never
    closed, copied as a kill -9 leaves it: (the copy, its log end)."""
    src, dst = str(tmp_path / "live"), str(tmp_path / "crashed")
    store = Store.open(src)
    store.create_topic(TOPIC, 1, config=BIG_SEGMENT)
    log = store.partition(TOPIC, 0)
    txn_seq = 0
    for seq in range(batches):
        log.append(_data(seq))
        if with_txns and seq % 50 == 10:  # an aborted and a committed transaction, on both sides of a snapshot
            for kind in (ControlType.ABORT, ControlType.COMMIT):
                log.append(_data(txn_seq, 100, pid=TXN_PID, transactional=True))
                txn_seq += 1
                log.append_marker(kind, TXN_PID, 0)
    end = log.log_end_offset
    shutil.copytree(src, dst)
    store.close()
    return dst, end


def _flip_payload_byte(path: str, batch: RecordBatch) -> None:
    """Damage a record's bytes (past the 61-byte header): only a CRC check notices."""
    at = batch.position + 61 + 5
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0xFF]))


def _view(root: str) -> tuple[dict, list, int]:
    store = Store.open(root)
    try:
        log = store.partition(TOPIC, 0)
        return log.producer_states(), log.aborted_transactions(0, log.log_end_offset), log.log_end_offset
    finally:
        store.close()


BATCHES = SNAPSHOT_INTERVAL_BYTES * 3 // 2 // VALUE  # ~1.5 intervals: one snapshot inside the segment


def test_crash_recovery_replays_at_most_an_interval(tmp_path, monkeypatch):
    crashed, end = _crash_copy(tmp_path, BATCHES, with_txns=True)
    size = os.path.getsize(_active_log(crashed))
    [inside] = _snapshots_inside(crashed, end)
    # What a replay of the whole segment derives (the mid-segment snapshot removed).
    whole = str(tmp_path / "whole")
    shutil.copytree(crashed, whole)
    for offset, path in list_snapshots(_pdir(whole)):
        if offset == inside:
            os.unlink(path)
    expected = _view(whole)

    reads = LogReads(monkeypatch)
    store = Store.open(crashed)
    try:
        log = store.partition(TOPIC, 0)
        assert reads.log_bytes < size - SNAPSHOT_INTERVAL_BYTES // 2, f"recovery read {reads.log_bytes} of {size}"
        assert (log.producer_states(), log.aborted_transactions(0, end), log.log_end_offset) == expected
        assert log.append(_data(BATCHES - 1)).duplicate  # the idempotent retry of the last batch, in place
        assert log.append(_data(BATCHES)).base_offset == end
    finally:
        store.close()


def test_only_the_newest_snapshot_of_the_active_segment_is_kept(tmp_path):
    crashed, end = _crash_copy(tmp_path, SNAPSHOT_INTERVAL_BYTES * 5 // 2 // VALUE)
    inside = _snapshots_inside(crashed, end)
    assert len(inside) == 1 and inside[0] > SNAPSHOT_INTERVAL_BYTES * 3 // 2 // (VALUE + 100), inside


def test_no_snapshot_past_the_durable_end(tmp_path):
    """Appends left unsynced (a transaction's data, acks=1) get no snapshot until a synced one covers them."""
    store = Store.open(str(tmp_path / "s"))
    try:
        store.create_topic(TOPIC, 1, config=BIG_SEGMENT)
        log = store.partition(TOPIC, 0)
        seq = 0
        while log.segments[-1].size <= SNAPSHOT_INTERVAL_BYTES + 4 * VALUE:
            log.append(_data(seq), sync=False)
            seq += 1
        assert _snapshots_inside(str(tmp_path / "s"), log.log_end_offset) == []
        log.append(_data(seq))  # synced: the HW covers the log end
        assert _snapshots_inside(str(tmp_path / "s"), log.log_end_offset + 1) == [log.log_end_offset]
    finally:
        store.close()


def test_damage_past_the_newest_snapshot_is_found_at_open(tmp_path):
    crashed, end = _crash_copy(tmp_path, BATCHES)
    [inside] = _snapshots_inside(crashed, end)
    path = _active_log(crashed)
    victim = next(b for b in _batches(path) if b.base_offset > inside + 3)
    _flip_payload_byte(path, victim)
    store = Store.open(crashed)
    try:
        log = store.partition(TOPIC, 0)
        assert log.log_end_offset == end
        with pytest.raises(CorruptRecordError) as refused:
            log.append(_data(BATCHES))
        assert refused.value.position == victim.position
    finally:
        store.close()


def test_damage_below_the_newest_snapshot_is_found_by_reads_and_verify(tmp_path, monkeypatch):
    crashed, end = _crash_copy(tmp_path, BATCHES)
    [inside] = _snapshots_inside(crashed, end)
    path = _active_log(crashed)
    victim = next(b for b in _batches(path) if b.base_offset == inside // 2)
    _flip_payload_byte(path, victim)
    reads = LogReads(monkeypatch)
    store = Store.open(crashed)
    try:
        log = store.partition(TOPIC, 0)
        assert log.log_end_offset == end
        # Recovery replayed from the snapshot: the bytes before it, the damage among them, went unread.
        assert reads.log_bytes < os.path.getsize(path) - SNAPSHOT_INTERVAL_BYTES // 2
        # A read CRC-checks what it returns: the damaged batch raises, its neighbours read.
        with pytest.raises(CorruptRecordError):
            log.read(victim.base_offset, max_bytes=1)
        assert [b.base_offset for b in log.read(victim.base_offset + 1, max_bytes=1)] == [victim.base_offset + 1]
    finally:
        store.close()
    store = Store.open(crashed, read_only=True)
    try:
        findings = list(check_store(store, TOPIC).findings)
    finally:
        store.close()
    assert any(str(victim.position) in str(f) for f in findings), findings


def test_a_log_cut_below_the_snapshot_is_not_trusted(tmp_path):
    """Power loss cut the `.log` under the mid-segment snapshot: its state covers batches that are gone."""
    crashed, end = _crash_copy(tmp_path, BATCHES)
    [inside] = _snapshots_inside(crashed, end)
    path = _active_log(crashed)
    cut = next(b for b in _batches(path) if b.base_offset == inside - 20)
    with open(path, "r+b") as f:
        f.truncate(cut.position + 1000)  # mid-batch
    store = Store.open(crashed)
    try:
        log = store.partition(TOPIC, 0)
        assert log.log_end_offset == cut.base_offset
        assert os.path.getsize(path) == cut.position  # the torn tail is cut
        assert _snapshots_inside(crashed, end) == [cut.base_offset]  # the one past the cut went; recovery's
        assert log.append(_data(cut.base_offset - 1)).duplicate  # the state is the log's, not the snapshot's
        assert not log.append(_data(cut.base_offset)).duplicate
    finally:
        store.close()


def test_a_roll_removes_the_active_segments_snapshot(tmp_path):
    """Past a roll the mid-segment snapshot is a stray (one snapshot per segment base is kept): it goes."""
    store = Store.open(str(tmp_path / "s"))
    store.create_topic(TOPIC, 1, config=BIG_SEGMENT)
    log = store.partition(TOPIC, 0)
    log.append(_data(0))
    log.roll()  # a first roll: whatever the open left is cleaned, the view expects no stray
    start = log.log_end_offset
    for seq in range(1, BATCHES + 1):
        log.append(_data(seq))
    end = log.log_end_offset
    offsets = [offset for offset, _ in list_snapshots(_pdir(str(tmp_path / "s")))]
    assert len([o for o in offsets if start < o < end]) == 1, offsets
    log.roll()
    log.append(_data(BATCHES + 1))
    offsets = [offset for offset, _ in list_snapshots(_pdir(str(tmp_path / "s")))]
    store.close()
    assert [o for o in offsets if start < o < end] == [], offsets
