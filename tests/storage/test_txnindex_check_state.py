"""The `.txnindex` check at its own grain (storage/txnindex_check.py): its per-segment state.

The check remembers, per segment object of this process's view, how many leading entries
agree with the log and, for a view that may not write, the replayed list that replaces an
index that failed. A fresh segment object (a reload) starts over; entries past the end of
the active segment wait for their marker; a mismatch stops the count before the bad entry.
docs/reliability-scenarios.md scenario 47 end to end is in test_txnindex_check.py.
"""

from __future__ import annotations

import os
import struct
import time

import pytest

from storage import Store
from storage.producer_state import ProducerStateManager
from storage.records import ControlType, build_batch
from storage.segment import LogSegment
from storage.transaction_index import AbortedTxn
from storage.txnindex_check import AbortReplay, TxnIndexCheck, abort_replayer, is_abort_of

TXN_ENTRY = struct.Struct(">hqqqq")  # version, producerId, firstOffset, lastOffset, lastStableOffset
A, B = 10, 11
# offsets: A data 0-1, plain 2, ABORT(A) 3, B data 4, COMMIT(B) 5, A data 6-7, ABORT(A) 8
EXPECTED = [AbortedTxn(A, 0, 3, 4), AbortedTxn(A, 6, 8, 9)]


@pytest.fixture
def pdir(store_path) -> str:
    s = Store.open(store_path)
    s.create_topic("t", partitions=1, config={"retention.ms": -1})
    log = s.partition("t", 0)
    seq = {A: 0, B: 0}
    now = int(time.time() * 1000)

    def data(pid, n):
        # Timestamps of now: the markers are stamped now, and an older batch would roll the segment.
        recs = [(None, b"%d-%d" % (pid or 0, i), None, now) for i in range(n)]
        if pid is None:
            log.append(build_batch(recs))
        else:
            log.append(
                build_batch(recs, producer_id=pid, producer_epoch=0, base_sequence=seq[pid], is_transactional=True)
            )
            seq[pid] += n

    data(A, 2)
    data(None, 1)
    log.append_marker(ControlType.ABORT, A, 0)
    data(B, 1)
    log.append_marker(ControlType.COMMIT, B, 0)
    data(A, 2)
    log.append_marker(ControlType.ABORT, A, 0)
    s.close()
    return os.path.join(store_path, "t-0")


def open_segment(directory: str, *, writable: bool = False) -> LogSegment:
    """The one segment as a view that saw every batch."""
    assert sorted(n for n in os.listdir(directory) if n.endswith(".log")) == ["00000000000000000000.log"]
    seg = LogSegment(directory, 0, writable=writable)
    for position, batch in seg.iter_batches(0):
        seg.note_batch(batch, position)
    return seg


def lookup(seg: LogSegment):
    return lambda offset: seg.batch_at(offset, seg.size)


def check_all(check: TxnIndexCheck, seg: LogSegment, *, active: bool = False) -> str | None:
    return check.first_mismatch(seg, active=active, log_start=0, batch_at=lookup(seg))


def test_the_fixture_holds_two_aborts(pdir):
    seg = open_segment(pdir)
    assert seg.txn_index.entries() == EXPECTED
    assert is_abort_of(seg.batch_at(3, seg.size), 3, A)
    assert not is_abort_of(seg.batch_at(5, seg.size), 5, B)  # a COMMIT
    assert not is_abort_of(seg.batch_at(3, seg.size), 3, B)  # another producer's
    seg.close()


def test_entries_are_checked_once_per_segment_object(pdir):
    check = TxnIndexCheck()
    seg = open_segment(pdir)
    assert check.has_unchecked(seg)
    assert check_all(check, seg) is None
    assert not check.has_unchecked(seg)
    reloaded = open_segment(pdir)  # a reload opens new segment objects: they start over
    assert check.has_unchecked(reloaded)
    assert not check.has_unchecked(seg)
    seg.close()
    reloaded.close()


def test_an_entry_past_the_active_segment_end_waits_for_its_marker(pdir):
    """append_marker writes the entry before the marker: a view may see the entry first."""
    check = TxnIndexCheck()
    seg = open_segment(pdir)
    seg.next_offset = 8  # this view has not seen the second ABORT yet
    assert check_all(check, seg, active=True) is None
    assert check.has_unchecked(seg)  # the first entry checked, the second left for later
    assert "lies outside the segment" in check_all(check, seg, active=False)
    seg.next_offset = 9
    assert check_all(check, seg, active=True) is None
    assert not check.has_unchecked(seg)
    seg.close()


@pytest.mark.parametrize(
    "field, value, problem",
    [
        (2, 2, "does not start at a transactional batch of its producer"),  # first offset onto the plain batch
        (3, 5, "does not name an ABORT marker of its producer"),  # last offset onto B's COMMIT
        (1, B, "does not name an ABORT marker of its producer"),  # the producer id
        (4, 2, "records an LSO that is not the start of another producer's transaction"),
    ],
)
def test_a_moved_entry_is_reported_and_the_count_stops_before_it(pdir, field, value, problem):
    path = os.path.join(pdir, "00000000000000000000.txnindex")
    with open(path, "r+b") as f:
        fields = list(TXN_ENTRY.unpack(f.read(TXN_ENTRY.size)))
        fields[field] = value
        f.seek(0)
        f.write(TXN_ENTRY.pack(*fields))
    check = TxnIndexCheck()
    seg = open_segment(pdir)
    found = check_all(check, seg)
    assert found is not None and problem in found, found
    assert check.has_unchecked(seg)
    seg.close()


def test_a_read_only_view_replaces_the_index_with_a_replay_until_rebuilt(pdir):
    check = TxnIndexCheck()
    seg = open_segment(pdir)
    assert check.replayed(seg) is None
    start = ProducerStateManager()
    start.reset(0)
    replay = check.replace_with_replay(seg, start)
    assert check.replayed(seg) is replay
    assert replay.advance(seg, seg.size) == EXPECTED
    assert replay.advance(seg, seg.size) == EXPECTED  # resumable: nothing new, nothing doubled
    check.mark_rebuilt(seg)
    assert check.replayed(seg) is None and not check.has_unchecked(seg)
    seg.close()


def test_rewrite_restores_a_damaged_file_from_the_log(pdir):
    path = os.path.join(pdir, "00000000000000000000.txnindex")
    with open(path, "rb") as f:
        original = f.read()
    with open(path, "r+b") as f:
        f.seek(TXN_ENTRY.size + 2)
        f.write(struct.pack(">q", B))
    check = TxnIndexCheck()
    seg = open_segment(pdir, writable=True)
    assert check_all(check, seg) is not None
    start = ProducerStateManager()
    start.reset(0)
    check.rewrite(seg, start, seg.size)
    assert not check.has_unchecked(seg)
    seg.close()
    with open(path, "rb") as f:
        assert f.read() == original


def test_abort_replayer_passes_over_batches_the_state_already_holds(pdir):
    seg = open_segment(pdir)
    full = AbortReplay(ProducerStateManager()).advance(seg, seg.size)
    assert full == EXPECTED
    state = ProducerStateManager()
    found: list[AbortedTxn] = []
    replay = abort_replayer(state, found.append)
    batches = [b for _, b in seg.iter_batches(0)]
    for b in batches:
        replay(b)
    for b in batches:  # a second pass is below the state's end offset: ignored
        replay(b)
    assert found == EXPECTED
    seg.close()
