"""What a partition view keeps between polls is dropped when another view's change makes it wrong (issue 26).

Two shortcuts of the read path at thousands of segments, each against a change made through a
second Store (its own view, lock and descriptors, as another process has):
- read_committed's abort lookup keeps which segments may index an abort under the segment
  list's generation (storage/log_loader.py `SegmentList`): segments another writer rolled
  since must be looked at, and an ABORT marker written into one of them found;
- a segment's `.txnindex` found absent is not opened again while the directory key vouches
  that nothing was created (EntryFile.vouch_absence_by): one another writer creates must be
  read as it is, not taken for lost and rewritten.
The key's own rules (racy mtimes, the directory's inode) are `PartitionLog._vouching_key`'s, which
tests/storage/test_writer_tail_walk.py and test_segment_view.py cover; EntryFile's use of the key is
tested in tests/storage/test_entry_file.py.
"""

from __future__ import annotations

import os
import time

from storage import Store
from storage.records import ControlType, build_batch


def _batch(values: list[bytes], *, pid: int = -1, seq: int = 0) -> bytes:
    records = [(None, v, (), int(time.time() * 1000)) for v in values]
    if pid < 0:
        return build_batch(records)
    return build_batch(records, producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True)


def _aborts(log) -> list[tuple[int, int, int]]:
    return [(t.producer_id, t.first_offset, t.last_offset) for t in log.aborted_transactions(0, log.log_end_offset)]


def _settle(directory: str) -> None:
    """Put the directory's mtime in the past, so the next look takes a key that can vouch (not racy)."""
    past = time.time_ns() - 10_000_000_000
    os.utime(directory, ns=(past, past))


def test_an_abort_written_into_segments_another_writer_rolled_since_the_last_lookup_is_found(store_path):
    writer_store, reader_store = Store.open(store_path), None
    try:
        writer_store.create_topic("t", 1)
        writer = writer_store.partition("t", 0)
        writer.append(_batch([b"a", b"b"], pid=7))  # a transaction left open across rolls
        for i in range(4):
            writer.append(_batch([b"x%d" % i]))
            writer.roll()
        reader_store = Store.open(store_path)
        reader = reader_store.partition("t", 0)
        # Only the segments past the range are looked up through the list of those that may hold an abort.
        assert reader.aborted_transactions(0, 2) == []
        for i in range(3):
            writer.append(_batch([b"y%d" % i]))
            writer.roll()
        marker = writer.append_marker(ControlType.ABORT, 7, 0)  # in a segment the reader has not seen yet
        found = reader.aborted_transactions(0, 2)
        assert [(t.producer_id, t.first_offset, t.last_offset) for t in found] == [(7, 0, marker.base_offset)]
        assert len(reader.segments) == len(writer.segments)
    finally:
        if reader_store is not None:
            reader_store.close()
        writer_store.close()


def _txnindex(log) -> str:
    return log.segments[-1].txn_index.path


def test_a_txnindex_another_writer_creates_after_a_lookup_found_none_is_read_not_rebuilt(store_path):
    writer_store, reader_store = Store.open(store_path), None
    try:
        writer_store.create_topic("t", 1)
        writer = writer_store.partition("t", 0)
        writer.append(_batch([b"a", b"b"], pid=7))
        reader_store = Store.open(store_path)
        reader = reader_store.partition("t", 0)
        _settle(reader.directory)
        assert _aborts(reader) == [] and _aborts(reader) == []  # found absent, under a key that vouches
        assert not os.path.exists(_txnindex(reader))
        marker = writer.append_marker(ControlType.ABORT, 7, 0)  # creates the active segment's `.txnindex`
        old = time.time_ns() - 5_000_000_000
        os.utime(_txnindex(writer), ns=(old, old))  # a rewrite by the reader would move it
        created = os.stat(_txnindex(writer))
        assert _aborts(reader) == [(7, 0, marker.base_offset)]
        after = os.stat(_txnindex(writer))
        assert (after.st_ino, after.st_mtime_ns, after.st_size) == (created.st_ino, old, created.st_size)
    finally:
        if reader_store is not None:
            reader_store.close()
        writer_store.close()
