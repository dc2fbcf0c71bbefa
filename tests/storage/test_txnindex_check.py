"""docs/reliability-scenarios.md scenario 47: a `.txnindex` entry changed to plausible values is caught and rebuilt.

The structural checks (whole 34-byte entries, version 0, first ≤ last, LSO ≤ last + 1,
last offsets increasing) pass for every damaged file used here: only checking each
entry against the batches it names (its ABORT marker, the first batch of its
transaction, the transaction its LSO points at) finds the damage. A writable view
rewrites the file to the bytes it had; a read-only view leaves it alone and reads a
list replayed from the log. Either way the read_committed view does not change, and
opening the partition does not scan the log for it.
"""

from __future__ import annotations

import os
import struct
import time

import pytest

from storage import Store
from storage.errors import CorruptIndexError
from storage.log_files import segment_filename
from storage.partition_log import PartitionLog
from storage.records import ControlType, build_batch
from storage.transaction_index import TransactionIndex
from txlog.fetch import IsolationLevel, fetch

TXN_ENTRY = struct.Struct(">hqqqq")  # version, producerId, firstOffset, lastOffset, lastStableOffset
FIELDS = {"producer_id": 1, "first_offset": 2, "last_offset": 3, "lso": 4}
PIDS = (10, 11, 12, 13)  # flipping bit 0 of one gives another producer of the workload


# ---- building a partition with interleaved transactions -------------------------------------------


class Workload:
    """Transactions of four producers, interleaved so that aborts are recorded while another
    producer's transaction is open (their LSO is then below the abort's data)."""

    def __init__(self, log: PartitionLog):
        self.log = log
        self.seq = {pid: 0 for pid in PIDS}
        self.ts = int(time.time() * 1000)

    def data(self, pid: int | None, n: int = 2, pad: int = 24) -> None:
        self.ts += 1
        tag = f"p{pid}" if pid is not None else "plain"
        values = [f"{tag}-{self.ts}-{i}".encode() + b"." * pad for i in range(n)]
        recs = [(None, v, None, self.ts) for v in values]
        if pid is None:
            self.log.append(build_batch(recs))
            return
        self.log.append(
            build_batch(recs, producer_id=pid, producer_epoch=0, base_sequence=self.seq[pid], is_transactional=True)
        )
        self.seq[pid] += n

    def end(self, pid: int, abort: bool) -> None:
        self.log.append_marker(ControlType.ABORT if abort else ControlType.COMMIT, pid, 0)

    def round(self, r: int, filler: int = 0) -> None:
        a, b = PIDS[r % 4], PIDS[(r + 1) % 4]
        self.data(a)
        self.data(None)
        self.data(b)
        self.data(a, n=1)
        self.data(b, n=3)
        self.end(b, abort=r % 3 != 2)  # recorded while a's transaction is open: LSO = a's first offset
        self.data(None, n=1)
        self.end(a, abort=r % 2 == 1)
        for _ in range(filler):
            self.data(None, n=1, pad=2000)


def build(store_path: str, rounds: int = 14, segment_bytes: int = 2000, filler: int = 0) -> None:
    s = Store.open(store_path)
    s.create_topic("t", partitions=1, config={"segment.bytes": segment_bytes, "retention.ms": -1})
    log = s.partition("t", 0)
    w = Workload(log)
    for r in range(rounds):
        w.round(r, filler)
    s.close()


def pdir(store_path: str) -> str:
    return os.path.join(store_path, "t-0")


def txn_files(directory: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith(".txnindex"):
            with open(os.path.join(directory, name), "rb") as f:
                out[name] = f.read()
    return out


def segment_bases(directory: str) -> list[int]:
    return sorted(int(n[:20]) for n in os.listdir(directory) if n.endswith(".log"))


# ---- the two read_committed views ----------------------------------------------------------------


def rc_by_fetch(log: PartitionLog) -> list[tuple[int, bytes]]:
    """docs/kafka-formats.md §5.6 through txlog.fetch, one batch per fetch so most start mid-transaction."""
    out = []
    offset, lso = log.log_start_offset, log.last_stable_offset
    while offset < lso:
        r = fetch(log, offset, IsolationLevel.READ_COMMITTED, max_records=2, max_bytes=1)
        out.extend((rec.offset, rec.value) for rec in r.records)
        assert r.next_offset > offset
        offset = r.next_offset
    return out


def rc_by_markers(log: PartitionLog) -> list[tuple[int, bytes]]:
    """The same view from the markers alone, never looking at a `.txnindex`."""
    batches = log.read(log.log_start_offset, max_bytes=1 << 40)
    lso = log.last_stable_offset
    pending: dict[int, list[int]] = {}
    committed: set[int] = set()
    for i, b in enumerate(batches):
        if b.is_control:
            ids = pending.pop(b.producer_id, [])
            if b.control_marker().is_commit:
                committed.update(ids)
        elif b.is_transactional:
            pending.setdefault(b.producer_id, []).append(i)
    return [
        (rec.offset, rec.value)
        for i, b in enumerate(batches)
        if not b.is_control and b.last_offset < lso and (not b.is_transactional or i in committed)
        for rec in b.records()
    ]


# ---- damage -----------------------------------------------------------------------------------------


def segment_with_entries(directory: str, which: str) -> tuple[int, int, str]:
    """(base, end offset, path) of the newest sealed segment, or the active one, holding ≥ 2 entries."""
    bases = segment_bases(directory)
    s = Store.open(os.path.dirname(directory), read_only=True)
    end = s.partition("t", 0).log_end_offset
    s.close()
    bounds = list(zip(bases, bases[1:] + [end], strict=True))
    candidates = bounds[-1:] if which == "active" else bounds[:-1]
    for base, seg_end in reversed(candidates):
        path = os.path.join(directory, segment_filename(base, ".txnindex"))
        if os.path.exists(path) and os.path.getsize(path) >= 2 * TXN_ENTRY.size:
            return base, seg_end, path
    raise AssertionError(f"no {which} segment with two aborts: rework the workload")


def structurally_sound(path: str, base: int, end: int) -> bool:
    """What the checks before this change saw: the damaged file passes them all."""
    idx = TransactionIndex(path, base, writable=False)
    try:
        idx.sanity_check()
        return len(idx) == os.path.getsize(path) // TXN_ENTRY.size and all(
            base <= t.last_offset < end for t in idx.entries()
        )
    except CorruptIndexError:
        return False
    finally:
        idx.close()


def damage(directory: str, which: str, field: str, how: str) -> tuple[str, bytes]:
    """Change one entry's field to another plausible value; returns (path, damaged bytes).

    "flip" flips the lowest bit that keeps the file structurally sound; "back" moves
    last_offset back to the lowest plausible offset (the harmful way: a reader fetching
    from between the two offsets no longer sees the abort).
    """
    base, end, path = segment_with_entries(directory, which)
    with open(path, "rb") as f:
        original = f.read()
    count = len(original) // TXN_ENTRY.size
    for i in reversed(range(count)):  # newest first: their data leaves room for a harmful move back
        entry = list(TXN_ENTRY.unpack_from(original, i * TXN_ENTRY.size))
        col = FIELDS[field]
        if how == "flip":
            values = [entry[col] ^ (1 << bit) for bit in range(40)]
        else:
            values = list(range(base, entry[col]))
        for value in values:
            changed = list(entry)
            changed[col] = value
            data = bytearray(original)
            TXN_ENTRY.pack_into(data, i * TXN_ENTRY.size, *changed)
            with open(path, "wb") as f:
                f.write(data)
            if structurally_sound(path, base, end):
                return path, bytes(data)
        with open(path, "wb") as f:
            f.write(original)
    raise AssertionError(f"no plausible {how} of {field} in {path}")


# ---- fixtures ------------------------------------------------------------------------------------------


@pytest.fixture
def built(store_path):
    """A partition with aborts in sealed segments and in the active one, and its pre-damage answers."""
    build(store_path)
    s = Store.open(store_path)
    log = s.partition("t", 0)
    assert len(log.segments) >= 4
    assert log.open_transactions() == {}
    rc = rc_by_fetch(log)
    assert rc == rc_by_markers(log)
    aborted = log.aborted_transactions(log.log_start_offset, log.log_end_offset)
    assert len(aborted) >= 8 and len({t.producer_id for t in aborted}) == 4
    assert any(
        t.first_offset < max(b.base_offset for b in log.segments if b.base_offset <= t.last_offset) for t in aborted
    ), "no aborted transaction spans two segments"
    s.close()
    return rc, aborted, txn_files(pdir(store_path))


DAMAGES = [(which, field, "flip") for which in ("sealed", "active") for field in FIELDS] + [
    ("sealed", "last_offset", "back"),
    ("active", "last_offset", "back"),
]


# ---- docs/reliability-scenarios.md scenario 47 -------------------------------------------------------


@pytest.mark.parametrize("which,field,how", DAMAGES)
def test_writable_reopen_detects_and_rewrites_the_original_bytes(store_path, built, which, field, how):
    rc, aborted, files = built
    d = pdir(store_path)
    path, damaged = damage(d, which, field, how)
    s = Store.open(store_path)
    log = s.partition("t", 0)
    with open(path, "rb") as f:
        assert f.read() == damaged, "opening must not check the txn index (it stays O(1))"
    assert rc_by_fetch(log) == rc
    assert txn_files(d) == files  # detected and rebuilt, byte for byte
    assert log.aborted_transactions(log.log_start_offset, log.log_end_offset) == aborted
    s.close()
    assert txn_files(d) == files
    again = Store.open(store_path, read_only=True)
    assert rc_by_fetch(again.partition("t", 0)) == rc
    again.close()


@pytest.mark.parametrize("which,field,how", DAMAGES)
def test_read_only_reopen_reads_a_replayed_list_and_writes_nothing(store_path, built, which, field, how):
    rc, aborted, files = built
    d = pdir(store_path)
    path, damaged = damage(d, which, field, how)
    s = Store.open(store_path, read_only=True)
    log = s.partition("t", 0)
    assert rc_by_fetch(log) == rc
    assert log.aborted_transactions(log.log_start_offset, log.log_end_offset) == aborted
    s.close()
    with open(path, "rb") as f:
        assert f.read() == damaged
    assert {n: b for n, b in txn_files(d).items() if not path.endswith(n)} == {
        n: b for n, b in files.items() if not path.endswith(n)
    }


@pytest.mark.parametrize("which", ["sealed", "active"])
def test_the_damage_would_change_what_read_committed_sees(store_path, built, which, monkeypatch):
    """The test data is sharp: trusting the damaged entry as before shows aborted records."""
    rc, _, _ = built
    damage(pdir(store_path), which, "last_offset", "back")
    monkeypatch.setattr(PartitionLog, "_aborts_checked_repairing", lambda self, seg: seg.txn_index.entries())
    s = Store.open(store_path, read_only=True)
    assert rc_by_fetch(s.partition("t", 0)) != rc
    s.close()


def test_a_live_read_only_view_keeps_its_replayed_list_up_to_date(store_path, built):
    """A damaged active segment read through a replayed list still sees aborts written later."""
    rc, _, _ = built
    damage(pdir(store_path), "active", "producer_id", "flip")
    reader_store = Store.open(store_path, read_only=True)
    reader = reader_store.partition("t", 0)
    assert rc_by_fetch(reader) == rc
    active = reader.segments[-1]
    assert reader._txn_check.replayed(active) is not None  # the damage was found and a replayed list is in use
    writer_store = Store.open(store_path)
    w = Workload(writer_store.partition("t", 0))
    w.seq = {pid: state["last_sequence"] + 1 for pid, state in w.log.producer_states().items()}
    w.data(PIDS[0], n=2)
    w.data(None)
    w.end(PIDS[0], abort=True)
    assert reader.segments[-1] is active  # the new abort went into the same segment
    after = rc_by_fetch(reader)
    assert reader._txn_check.replayed(active).aborts[-1].producer_id == PIDS[0]
    assert after == rc_by_markers(reader) and after[: len(rc)] == rc and len(after) == len(rc) + 2
    writer_store.close()
    reader_store.close()


def test_an_entry_moved_past_the_log_end_is_rebuilt_not_dropped(store_path, built):
    """At open a writer drops the entry a dead append_marker left past the end; a damaged
    entry there is told apart (its transaction is not open) and the index rebuilt."""
    rc, _, files = built
    d = pdir(store_path)
    _, end, path = segment_with_entries(d, "active")
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        last = len(data) - TXN_ENTRY.size
        entry = list(TXN_ENTRY.unpack_from(data, last))
        entry[3] = end + 5
        TXN_ENTRY.pack_into(data, last, *entry)
        f.seek(0)
        f.write(data)
    s = Store.open(store_path)
    log = s.partition("t", 0)
    assert txn_files(d) == files
    assert rc_by_fetch(log) == rc
    s.close()


@pytest.mark.parametrize("which", ["sealed", "active"])
@pytest.mark.parametrize("read_only", [False, True])
def test_a_deleted_entry_is_restored_by_recovery_of_its_segment(store_path, built, which, read_only):
    """A deleted entry leaves nothing the lazy check can see; an unclean open whose replay
    covers the segment restores it (in the file, or in memory for a read-only view)."""
    rc, aborted, files = built
    d = pdir(store_path)
    base, _, path = segment_with_entries(d, which)
    with open(path, "r+b") as f:
        data = f.read()
        f.seek(0)
        f.truncate()
        f.write(data[: TXN_ENTRY.size] + data[2 * TXN_ENTRY.size :])  # the second entry is gone
    for name in os.listdir(d):  # crash: no snapshot after the segment's own
        if name.endswith(".snapshot") and int(name[:20]) > base:
            os.unlink(os.path.join(d, name))
    s = Store.open(store_path, read_only=read_only)
    log = s.partition("t", 0)
    assert rc_by_fetch(log) == rc
    assert log.aborted_transactions(log.log_start_offset, log.log_end_offset) == aborted
    s.close()
    if read_only:
        assert len(txn_files(d)[os.path.basename(path)]) == len(files[os.path.basename(path)]) - TXN_ENTRY.size
    else:
        assert txn_files(d) == files


# ---- the check stays lazy and O(entries) ---------------------------------------------------------


class LogReads:
    """Bytes read from `.log` files through os.pread (all segment reads go through it)."""

    def __init__(self, monkeypatch):
        self.bytes = 0
        real = os.pread

        def counting(fd, n, pos):
            data = real(fd, n, pos)
            try:
                if os.readlink(f"/proc/self/fd/{fd}").endswith(".log"):
                    self.bytes += len(data)
            except OSError:
                pass
            return data

        monkeypatch.setattr(os, "pread", counting)

    def take(self) -> int:
        n, self.bytes = self.bytes, 0
        return n


def log_size(directory: str) -> int:
    return sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory) if n.endswith(".log"))


def first_check_reads(store_path: str, monkeypatch, filler: int) -> tuple[int, int, int, int]:
    """(bytes read at open, by the first check, by the second, log size) for a fresh build."""
    build(store_path, rounds=30, segment_bytes=8192, filler=filler)
    d = pdir(store_path)
    reads = LogReads(monkeypatch)
    s = Store.open(store_path)
    log = s.partition("t", 0)
    opened = reads.take()
    segments = len(log.segments)
    assert segments >= 3
    # Each segment's first header (roll timestamp) and the batch at the snapshot, found from
    # the offset index: a bound that does not grow with the segments' size.
    assert opened <= 61 * segments + 2 * log.config.index_interval_bytes
    aborted = log.aborted_transactions(log.log_start_offset, log.log_end_offset)
    first = reads.take()
    assert log.aborted_transactions(log.log_start_offset, log.log_end_offset) == aborted
    second = reads.take()
    s.close()
    monkeypatch.undo()
    return opened, first, second, log_size(d)


def test_the_check_is_lazy_and_costs_per_entry_not_per_byte(tmp_path, monkeypatch):
    _, first, second, size = first_check_reads(str(tmp_path / "lean"), monkeypatch, filler=0)
    _, first_big, second_big, size_big = first_check_reads(str(tmp_path / "fat"), monkeypatch, filler=8)
    assert size_big > 5 * size
    assert second == second_big == 0  # checked once per segment per view
    assert first_big < size_big / 10, "the check must not scan the segments"
    # the same transactions cost about the same, however much other data surrounds them
    assert first_big < 2 * first


def test_a_clean_open_reads_the_same_whether_or_not_the_index_is_damaged(store_path, built, monkeypatch):
    _, aborted, _ = built
    reads = LogReads(monkeypatch)
    s = Store.open(store_path)
    s.partition("t", 0)
    clean = reads.take()
    s.close()
    damage(pdir(store_path), "sealed", "last_offset", "back")
    reads.take()
    s = Store.open(store_path)
    log = s.partition("t", 0)
    assert reads.take() == clean  # no log read at open was added to look for damage
    assert log.aborted_transactions(log.log_start_offset, log.log_end_offset) == aborted
    s.close()
