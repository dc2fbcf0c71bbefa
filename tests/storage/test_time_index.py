"""TimeIndex: Kafka's `.timeindex` layout, the monotonic append rule, lookups and damage."""

from __future__ import annotations

import os
import struct

import pytest

from storage.errors import CorruptIndexError, ReadOnlyStoreError
from storage.time_index import TimeIndex

BASE = 100
ENTRIES = [(1000, 105), (2000, 110), (3000, 120)]


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "00000000000000000100.timeindex")


def filled(path, entries=ENTRIES, **kwargs):
    idx = TimeIndex(path, BASE, **kwargs)
    for ts, offset in entries:
        assert idx.maybe_append(ts, offset)
    return idx


def raw(*pairs):
    """Entries as Kafka lays them out: int64 timestamp, int32 relative offset, big-endian."""
    return b"".join(struct.pack(">qi", ts, rel) for ts, rel in pairs)


def write_raw(path, data):
    with open(path, "wb") as f:
        f.write(data)


def test_new_index_is_empty(path):
    idx = TimeIndex(path, BASE)
    assert os.path.getsize(path) == 0
    assert idx.entries() == []
    assert idx.last_entry() is None
    assert idx.lookup(10**12) == (-1, BASE)


def test_entries_are_timestamp_and_relative_offset_big_endian(path):
    filled(path, ENTRIES[:2]).close()
    with open(path, "rb") as f:
        assert f.read() == bytes.fromhex("00000000000003e8 00000005 00000000000007d0 0000000a")


def test_maybe_append_only_moves_forward(path):
    idx = TimeIndex(path, BASE)
    assert not idx.maybe_append(-1, 105)  # nothing beats an empty index's -1
    assert idx.maybe_append(1000, 105)
    assert not idx.maybe_append(1000, 106)  # same timestamp: no news
    assert not idx.maybe_append(999, 107)  # older timestamp
    assert not idx.maybe_append(2000, 104)  # offset behind the last entry
    assert idx.maybe_append(2000, 105)  # same offset, later timestamp: Kafka's roll entry
    assert idx.entries() == [(1000, 105), (2000, 105)]
    assert os.path.getsize(path) == 24


def test_maybe_append_compares_with_what_another_process_wrote(path):
    mine = filled(path, ENTRIES[:1])
    other = TimeIndex(path, BASE)
    assert other.maybe_append(5000, 130)
    assert not mine.maybe_append(4000, 125)
    assert mine.maybe_append(6000, 131)
    assert other.entries() == [(1000, 105), (5000, 130), (6000, 131)]


def test_offsets_that_do_not_fit_are_refused(path):
    idx = TimeIndex(path, BASE)
    with pytest.raises(OverflowError):
        idx.maybe_append(1000, BASE - 1)
    with pytest.raises(OverflowError):
        idx.maybe_append(1000, BASE + 2**31)
    with pytest.raises(OverflowError):
        idx.maybe_append(2**63, 105)
    assert idx.entries() == []


def test_lookup_finds_the_greatest_entry_at_or_below_the_timestamp(path):
    idx = filled(path)
    assert idx.lookup(999) == (-1, BASE)
    assert idx.lookup(1000) == (1000, 105)
    assert idx.lookup(1999) == (1000, 105)
    assert idx.lookup(2000) == (2000, 110)
    assert idx.lookup(10**15) == (3000, 120)
    assert idx.last_entry() == (3000, 120)


@pytest.mark.parametrize(
    "cut, kept",
    [(BASE, []), (105, []), (106, ENTRIES[:1]), (110, ENTRIES[:1]), (120, ENTRIES[:2]), (121, ENTRIES)],
)
def test_truncate_to_drops_entries_at_or_after_the_offset(path, cut, kept):
    idx = filled(path)
    idx.truncate_to(cut)
    assert idx.entries() == kept
    assert os.path.getsize(path) == 12 * len(kept)


def test_truncate_with_repeated_offsets(path):
    idx = filled(path, [(1000, 105), (2000, 110), (2500, 110), (3000, 120)])
    idx.truncate_to(110)
    assert idx.entries() == [(1000, 105)]


def test_reset_then_reuse(path):
    idx = filled(path)
    idx.reset()
    assert idx.entries() == []
    assert idx.maybe_append(500, 101)
    assert idx.entries() == [(500, 101)]


def test_reopen_appends_at_the_end(path):
    filled(path, ENTRIES[:2]).close()
    idx = TimeIndex(path, BASE)
    assert idx.entries() == ENTRIES[:2]
    assert idx.maybe_append(3000, 120)
    idx.close()
    assert TimeIndex(path, BASE, writable=False).entries() == ENTRIES


def test_a_reader_sees_appends_and_truncation(path):
    writer = TimeIndex(path, BASE)
    reader = TimeIndex(path, BASE, writable=False)
    writer.maybe_append(1000, 105)
    assert reader.lookup(1500) == (1000, 105)
    writer.maybe_append(2000, 110)
    assert reader.entries() == ENTRIES[:2]
    writer.truncate_to(106)
    assert reader.entries() == ENTRIES[:1]


def test_zero_filled_tail_is_ignored(path):
    write_raw(path, raw((1000, 5), (2000, 10)) + bytes(12 * 50))
    idx = TimeIndex(path, BASE, writable=False)
    assert idx.entries() == ENTRIES[:2]
    assert idx.lookup(10**9) == (2000, 110)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check()


@pytest.mark.parametrize(
    "data",
    [
        raw((1000, 5), (1000, 10)),  # timestamp repeats
        raw((2000, 5), (1000, 10)),  # timestamp goes back
        raw((1000, 10), (2000, 5)),  # offset goes back
        raw((1000, -1)),  # offset below the base
        raw((1000, 5)) + b"\x00" * 7,  # length not a multiple of 12
    ],
)
def test_sanity_check_rejects_what_no_writer_leaves(path, data):
    write_raw(path, data)
    with pytest.raises(CorruptIndexError):
        TimeIndex(path, BASE, writable=False).sanity_check()


def test_sanity_check_bounds_offsets_by_the_segment_end(path):
    idx = filled(path)
    idx.sanity_check()
    idx.sanity_check(next_offset=121)
    with pytest.raises(CorruptIndexError, match="beyond the segment end"):
        idx.sanity_check(next_offset=120)


def test_is_full_keeps_the_last_slot_for_the_roll_entry(path):
    idx = TimeIndex(path, BASE, max_index_size=12 * 3)
    assert idx.max_entries == 3
    idx.maybe_append(1000, 105)
    assert not idx.is_full()
    idx.maybe_append(2000, 110)
    assert idx.is_full()
    assert idx.maybe_append(3000, 120)  # the roll entry still fits
    assert len(idx) == 3


def test_read_only_index_creates_no_file_and_refuses_appends(path):
    reader = TimeIndex(path, BASE, writable=False)
    assert reader.entries() == []
    assert not os.path.exists(path)
    with pytest.raises(ReadOnlyStoreError):
        reader.maybe_append(1000, 105)


def test_delete_removes_the_file_and_closes_the_index(path):
    idx = filled(path)
    idx.flush()
    idx.delete()
    assert not os.path.exists(path)
    with pytest.raises(ValueError):
        idx.entries()
