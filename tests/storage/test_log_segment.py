"""LogSegment: one `.log` file and its three indexes, at the grain of Kafka's LogSegmentTest.

Real files in tmp_path. Append and the sparse index rule (docs/kafka-formats.md §3.3); reading
the batch that holds an offset; a damaged index that must not change what a reader sees
(docs/reliability-scenarios.md rule 6); torn tails versus corruption in the middle
(docs/reliability-scenarios.md rule 7); truncation, index rebuild and the open-time checks.
Roll conditions (docs/kafka-formats.md §3.2) are the log's decision, so they are tested
through the public partition API at the end.
"""

from __future__ import annotations

import itertools
import os

import pytest

from storage import Store
from storage.errors import CorruptIndexError, CorruptRecordError
from storage.records import ControlType, build_batch, build_control_batch
from storage.segment import LogSegment

T0 = 1_700_000_000_000


def data_batch(base_offset: int, count: int = 1, *, ts: int = T0, size: int = 10) -> bytes:
    return build_batch([(None, b"v" * size, None, ts + i) for i in range(count)], base_offset=base_offset)


class Writer:
    """Appends batches the way the partition log does: offsets assigned, one append call per batch."""

    def __init__(self, segment: LogSegment) -> None:
        self.segment = segment
        self.positions: list[int] = []

    def add(self, count: int = 1, *, ts: int = T0, size: int = 10) -> bytes:
        base = self.segment.next_offset
        data = data_batch(base, count, ts=ts, size=size)
        self.positions.append(self.segment.size)
        self.segment.append(data, [(0, base + count - 1, ts + count - 1)])
        return data


@pytest.fixture
def segment(tmp_path):
    # Reopened after create, as the partition log finds it: index files present from the start.
    LogSegment.create(str(tmp_path), 100).close()
    seg = LogSegment(str(tmp_path), 100, writable=True, index_interval_bytes=100)
    yield seg
    seg.close()


def names(directory) -> list[str]:
    return sorted(os.listdir(directory))


# ---- create and append -------------------------------------------------------------------------


def test_create_makes_an_empty_segment_named_by_its_base_offset(tmp_path, segment) -> None:
    assert os.path.basename(segment.log_path) == "00000000000000000100.log"
    assert "00000000000000000100.log" in names(tmp_path)
    assert (segment.size, segment.next_offset, segment.file_size()) == (0, 100, 0)
    assert list(segment.iter_batches()) == []


def test_append_writes_the_bytes_and_advances_size_and_next_offset(segment) -> None:
    w = Writer(segment)
    first = w.add(3)
    second = w.add(2, ts=T0 + 50)
    with open(segment.log_path, "rb") as f:
        assert f.read() == first + second
    assert segment.size == len(first) + len(second)
    assert segment.next_offset == 105
    assert [(pos, b.base_offset, b.last_offset) for pos, b in segment.iter_batches()] == [
        (0, 100, 102),
        (len(first), 103, 104),
    ]
    assert segment.max_timestamp == T0 + 51 and segment.offset_of_max_timestamp == 104
    assert segment.first_batch_timestamp == T0 + 2


def test_offset_index_is_sparse_and_never_indexes_the_first_batch(segment) -> None:
    w = Writer(segment)
    for _ in range(8):
        w.add(size=40)  # each batch is ~110 bytes, above index.interval.bytes = 100
    entries = segment.offset_index.entries()
    assert entries and all(position > 0 for _, position in entries)
    assert (100, 0) not in entries
    for (offset, position), (next_offset, next_position) in itertools.pairwise(entries):
        assert next_offset > offset and next_position - position > 100
    # each entry is keyed by the last offset of the batch that starts at its position
    for offset, position in entries:
        assert position in w.positions and w.positions.index(position) + 100 == offset


def test_no_index_entry_while_the_bytes_since_the_last_stay_within_the_interval(tmp_path) -> None:
    seg = LogSegment.create(str(tmp_path), 0, index_interval_bytes=4096)
    w = Writer(seg)
    for _ in range(20):
        w.add()
    assert seg.size < 4096 and seg.offset_index.entries() == []
    seg.close()


# ---- read at an offset ---------------------------------------------------------------------------


def test_batch_at_returns_the_batch_holding_the_offset(segment) -> None:
    w = Writer(segment)
    for _ in range(10):
        w.add(3, size=40)  # offsets 100..129, three per batch
    end = segment.size
    for offset in (100, 101, 102, 103, 117, 129):
        batch = segment.batch_at(offset, end)
        assert batch.base_offset <= offset <= batch.last_offset
        assert batch.base_offset == 100 + (offset - 100) // 3 * 3
    assert segment.batch_at(130, end) is None
    assert segment.batch_at(129, w.positions[-1]) is None  # the batch does not end before `end`


def test_read_position_starts_at_the_indexed_batch_at_or_before_the_offset(segment) -> None:
    w = Writer(segment)
    for _ in range(10):
        w.add(size=40)
    entries = segment.offset_index.entries()
    assert len(entries) >= 3
    for target in range(100, 112):
        at_or_before = [position for offset, position in entries if offset <= target]
        assert segment.read_position(target) == (at_or_before[-1] if at_or_before else 0)


def test_a_damaged_index_entry_makes_the_read_scan_from_the_start(segment) -> None:
    """An index entry pointing into a batch must not change what is read (docs/reliability-scenarios.md rule 6)."""
    w = Writer(segment)
    for _ in range(10):
        w.add(size=40)
    offset, position = segment.offset_index.entries()[0]
    with open(segment.offset_index.path, "r+b") as f:
        f.seek(4)
        f.write((position + 5).to_bytes(4, "big"))  # now inside a batch
    reader = LogSegment(segment.directory, 100, writable=False)  # the next process to open it
    assert reader.read_position(offset) == 0
    assert reader.batch_at(offset, segment.size).base_offset == offset
    reader.close()


def test_untrusted_indexes_are_not_used_at_all(segment) -> None:
    w = Writer(segment)
    for _ in range(10):
        w.add(size=40)
    offset, _ = segment.offset_index.entries()[-1]
    segment.indexes_trusted = False
    assert segment.read_position(offset) == 0
    assert segment.batch_at(offset, segment.size).last_offset == offset


# ---- torn tails and corruption -------------------------------------------------------------------


def test_a_torn_tail_ends_the_scan_quietly_but_not_a_strict_one(segment) -> None:
    w = Writer(segment)
    w.add()
    torn = data_batch(101)[:-7]
    with open(segment.log_path, "ab") as f:
        f.write(torn)
    assert [b.base_offset for _, b in segment.iter_batches()] == [100]
    with pytest.raises(CorruptRecordError) as exc:
        list(segment.iter_batches(strict=True))
    assert exc.value.position == len(data_batch(100))  # where the torn batch starts
    assert exc.value.path == segment.log_path


def test_fewer_than_a_frame_header_of_bytes_is_a_torn_tail(segment) -> None:
    Writer(segment).add()
    with open(segment.log_path, "ab") as f:
        f.write(b"\x00" * 16)
    assert len(list(segment.iter_batches())) == 1


def test_a_bad_crc_raises_and_names_file_and_position(segment) -> None:
    w = Writer(segment)
    w.add()
    w.add()
    w.add()
    bad = w.positions[1]
    with open(segment.log_path, "r+b") as f:
        f.seek(bad + 70)
        byte = f.read(1)
        f.seek(bad + 70)
        f.write(bytes([byte[0] ^ 0xFF]))
    seen = []
    with pytest.raises(CorruptRecordError) as exc:
        for position, _ in segment.iter_batches():
            seen.append(position)
    assert seen == [0]
    assert segment.log_path in str(exc.value) and str(bad) in str(exc.value)


def test_find_valid_batch_after_tells_a_torn_tail_from_corruption_in_the_middle(segment) -> None:
    w = Writer(segment)
    for _ in range(4):
        w.add()
    # garbage over batch 1: valid batches follow, so this is corruption, not a tail
    with open(segment.log_path, "r+b") as f:
        f.seek(w.positions[1])
        f.write(b"\xab" * 30)
    assert segment.find_valid_batch_after(w.positions[1]) == w.positions[2]
    # garbage at the end: nothing valid follows, a torn tail that may be cut
    with open(segment.log_path, "ab") as f:
        f.write(os.urandom(200))
    assert segment.find_valid_batch_after(w.positions[3]) is None


def test_a_zero_batch_length_is_corruption_not_a_partial_batch(segment) -> None:
    Writer(segment).add()
    with open(segment.log_path, "ab") as f:
        f.write(b"\x00" * 100)
    with pytest.raises(CorruptRecordError, match="batch length 0"):
        list(segment.iter_batches())


# ---- truncate -------------------------------------------------------------------------------------


def test_truncate_cuts_the_log_and_every_index_to_the_same_offset(segment) -> None:
    w = Writer(segment)
    for _ in range(10):
        w.add(size=40)
    segment.txn_index.append(_aborted(pid=1, first=100, last=103, lso=104))
    segment.txn_index.append(_aborted(pid=2, first=104, last=107, lso=108))
    segment.truncate(w.positions[5], 105)
    assert segment.file_size() == w.positions[5] == segment.size
    assert segment.next_offset == 105
    assert all(offset < 105 for offset, _ in segment.offset_index.entries())
    assert all(offset < 105 for _, offset in segment.time_index.entries())
    assert [e.last_offset for e in segment.txn_index.entries()] == [103]
    assert [b.last_offset for _, b in segment.iter_batches()] == [100, 101, 102, 103, 104]


def test_truncate_to_the_start_empties_the_segment(segment) -> None:
    w = Writer(segment)
    for _ in range(5):
        w.add(size=40)
    segment.truncate(0, 100)
    assert segment.file_size() == 0 and segment.offset_index.entries() == []
    assert segment.time_index.entries() == []


def _aborted(*, pid: int, first: int, last: int, lso: int):
    from storage.transaction_index import AbortedTxn

    return AbortedTxn(pid, first, last, lso)


# ---- reopen, checks and rebuild -------------------------------------------------------------------


def test_reopen_sees_the_same_indexes_and_restores_time_stats_after_seal(tmp_path, segment) -> None:
    w = Writer(segment)
    for i in range(6):
        w.add(size=40, ts=T0 + i * 10)
    segment.seal()
    entries = segment.offset_index.entries()
    times = segment.time_index.entries()
    assert times[-1] == (T0 + 50, 105)  # the final entry forced at seal
    reopened = LogSegment(str(tmp_path), 100, writable=False)
    assert not reopened.missing_indexes
    assert reopened.offset_index.entries() == entries
    reopened.load_time_stats()
    assert reopened.max_timestamp == T0 + 50 and reopened.offset_of_max_timestamp == 105
    assert reopened.first_batch_timestamp == T0
    assert reopened.scan_max_timestamp() == T0 + 50
    reopened.close()


def test_rebuild_indexes_rewrites_what_append_wrote(tmp_path, segment) -> None:
    w = Writer(segment)
    for i in range(10):
        w.add(size=40, ts=T0 + i)
    segment.seal()
    entries = segment.offset_index.entries()
    times = segment.time_index.entries()
    segment.close()
    os.remove(os.path.join(tmp_path, "00000000000000000100.index"))
    with open(os.path.join(tmp_path, "00000000000000000100.timeindex"), "wb") as f:
        f.write(b"\x00" * 120)
    seg = LogSegment(str(tmp_path), 100, writable=True, index_interval_bytes=100)
    assert seg.missing_indexes
    seen = []
    seg.rebuild_indexes(lambda batch: seen.append(batch.base_offset))
    assert seen == list(range(100, 110))
    assert seg.offset_index.entries() == entries
    assert seg.time_index.entries() == times
    assert (seg.size, seg.next_offset, seg.missing_indexes) == (w.segment.size, 110, False)
    seg.full_index_check()
    seg.close()


def test_quick_index_check_catches_a_missing_or_zero_filled_index(tmp_path, segment) -> None:
    w = Writer(segment)
    for _ in range(6):
        w.add(size=40)
    segment.quick_index_check()
    index_path = segment.offset_index.path
    size = os.path.getsize(index_path)
    with open(index_path, "r+b") as f:
        f.seek(size - 8)
        f.write(b"\x00" * 8)  # last entry zeroed, as a Kafka preallocated tail looks
    with pytest.raises(CorruptIndexError, match="outside the segment"):
        segment.quick_index_check()
    segment.close()
    os.remove(index_path)
    reopened = LogSegment(str(tmp_path), 100, writable=False)
    reopened.size, reopened.next_offset = w.segment.size, 106
    with pytest.raises(CorruptIndexError, match="missing"):
        reopened.quick_index_check()
    reopened.close()


def test_full_index_check_catches_an_entry_beyond_the_log(segment) -> None:
    w = Writer(segment)
    for _ in range(6):
        w.add(size=40)
    segment.full_index_check()
    segment.truncate(w.positions[2], 102)
    segment.offset_index.append(104, w.positions[2] + 500)  # an entry no batch backs
    with pytest.raises(CorruptIndexError):
        segment.full_index_check()


def test_delete_files_lists_the_log_first(segment) -> None:
    paths = segment.delete_files()
    assert [os.path.basename(p) for p in paths] == [
        "00000000000000000100.log",
        "00000000000000000100.index",
        "00000000000000000100.timeindex",
        "00000000000000000100.txnindex",
    ]


def test_control_batches_are_scanned_like_data(segment) -> None:
    w = Writer(segment)
    w.add()
    marker = build_control_batch(
        ControlType.COMMIT, producer_id=7, producer_epoch=1, coordinator_epoch=0, base_offset=101, timestamp=T0 + 5
    )
    segment.append(marker, [(0, 101, T0 + 5)])
    batches = [b for _, b in segment.iter_batches()]
    assert [b.is_control for b in batches] == [False, True]
    assert len(marker) == 78 and segment.next_offset == 102


# ---- roll conditions (docs/kafka-formats.md §3.2), through the partition log --------------------------


def _bases(log) -> list[int]:
    return [seg.base_offset for seg in log.segments]


def test_segment_rolls_only_when_the_next_batch_would_exceed_segment_bytes(tmp_path) -> None:
    size = len(data_batch(0))
    store = Store.open(str(tmp_path / "s"))
    store.create_topic("fits", partitions=1, config={"segment.bytes": 2 * size, "retention.ms": -1})
    store.create_topic("over", partitions=1, config={"segment.bytes": 2 * size - 1, "retention.ms": -1})
    fits, over = store.partition("fits", 0), store.partition("over", 0)
    for _ in range(4):
        fits.append(data_batch(0))
        over.append(data_batch(0))
    assert _bases(fits) == [0, 2]  # exactly segment.bytes: two batches share a segment
    assert _bases(over) == [0, 1, 2, 3]
    store.close()


def test_an_empty_active_segment_takes_a_batch_larger_than_segment_bytes(tmp_path) -> None:
    store = Store.open(str(tmp_path / "s"))
    store.create_topic("t", partitions=1, config={"segment.bytes": 100, "retention.ms": -1})
    log = store.partition("t", 0)
    log.append(data_batch(0, size=300))
    log.append(data_batch(0, size=300))
    assert _bases(log) == [0, 1]
    store.close()


def test_segment_rolls_when_the_batch_is_more_than_segment_ms_newer_than_the_first(tmp_path) -> None:
    store = Store.open(str(tmp_path / "s"))
    store.create_topic("t", partitions=1, config={"segment.ms": 1000, "retention.ms": -1})
    log = store.partition("t", 0)
    log.append(data_batch(0, ts=T0))
    log.append(data_batch(0, ts=T0 + 1000))
    assert _bases(log) == [0]
    log.append(data_batch(0, ts=T0 + 1001))
    assert _bases(log) == [0, 2]
    store.close()


def test_a_group_commit_writes_each_index_once_with_the_entries_a_rebuild_makes(tmp_path, segment, monkeypatch):
    """One append of many batches (the producer's group commit) indexes them batch by batch, as
    a rebuild from the log does, in one write per index file: each system call is a point where
    the producer's sender thread gives up the GIL (an entry at a time was 2 x 64 writes per group)."""
    batches = []
    for i in range(40):
        base = 100 + i * 2
        batches.append(data_batch(base, 2, ts=T0 + (i * 7) % 13, size=30))
    chunk = b"".join(batches)
    written, at = [], 0
    for i, data in enumerate(batches):
        written.append((at, 100 + i * 2 + 1, T0 + (i * 7) % 13 + 1))
        at += len(data)
    writes: dict[str, int] = {}
    real_write = os.write

    def counting_write(fd: int, data) -> int:
        name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        writes[name] = writes.get(name, 0) + 1
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", counting_write)
    segment.append(chunk, written)
    monkeypatch.undo()
    assert writes == {
        "00000000000000000100.log": 1,
        "00000000000000000100.index": 1,
        "00000000000000000100.timeindex": 1,
    }
    entries, times = segment.offset_index.entries(), segment.time_index.entries()
    assert len(entries) > 20 and len(times) > 1
    segment.close()
    seg = LogSegment(str(tmp_path), 100, writable=True, index_interval_bytes=100)
    seg.rebuild_indexes()
    assert seg.offset_index.entries() == entries
    assert seg.time_index.entries()[: len(times)] == times  # the rebuild also adds the final entry
    seg.close()
