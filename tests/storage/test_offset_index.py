"""OffsetIndex: Kafka's `.index` layout, lookups, and the multi-process rules of txlog."""

from __future__ import annotations

import errno
import os
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage.errors import CorruptIndexError, KafkaStorageError, ReadOnlyStoreError
from storage.offset_index import OffsetIndex

BASE = 100
ENTRIES = [(105, 4100), (110, 8300), (120, 12500)]


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "00000000000000000100.index")


def filled(path, entries=ENTRIES, **kwargs):
    idx = OffsetIndex(path, BASE, **kwargs)
    for offset, position in entries:
        idx.append(offset, position)
    return idx


def raw(*pairs):
    """Entries as Kafka lays them out: relative offset and position, big-endian int32."""
    return b"".join(struct.pack(">ii", rel, pos) for rel, pos in pairs)


def write_raw(path, data):
    with open(path, "wb") as f:
        f.write(data)


# ---- layout and lookups -----------------------------------------------------------


def test_new_index_creates_an_empty_file(path):
    idx = OffsetIndex(path, BASE)
    assert os.path.getsize(path) == 0
    assert len(idx) == 0
    assert idx.entries() == []
    assert idx.last_entry() is None
    assert idx.lookup(500) == (BASE, 0)


def test_entries_are_relative_offset_and_position_big_endian(path):
    filled(path).close()
    with open(path, "rb") as f:
        assert f.read() == bytes.fromhex("00000005 00001004 0000000a 0000206c 00000014 000030d4")


def test_lookup_exact_between_before_and_after(path):
    idx = filled(path)
    assert idx.lookup(105) == (105, 4100)
    assert idx.lookup(110) == (110, 8300)
    assert idx.lookup(109) == (105, 4100)
    assert idx.lookup(119) == (110, 8300)
    assert idx.lookup(104) == (BASE, 0)
    assert idx.lookup(BASE) == (BASE, 0)
    assert idx.lookup(120) == (120, 12500)
    assert idx.lookup(10**12) == (120, 12500)
    assert idx.last_entry() == (120, 12500)
    assert len(idx) == 3


@given(
    rels=st.lists(st.integers(min_value=0, max_value=5000), unique=True, max_size=40),
    targets=st.lists(st.integers(min_value=-10, max_value=5100), max_size=20),
)
def test_lookup_agrees_with_a_linear_search(tmp_path_factory, rels, targets):
    path = str(tmp_path_factory.mktemp("idx") / "00000000000000000100.index")
    entries = [(BASE + rel, 4096 * (i + 1)) for i, rel in enumerate(sorted(rels))]
    idx = filled(path, entries)
    for target in targets:
        below = [e for e in entries if e[0] <= BASE + target]
        assert idx.lookup(BASE + target) == (below[-1] if below else (BASE, 0))
    idx.close()


# ---- reopen and ordering ----------------------------------------------------------


def test_reopen_sees_the_same_entries_and_appends_at_the_end(path):
    filled(path).close()
    idx = OffsetIndex(path, BASE)
    assert idx.entries() == ENTRIES
    idx.append(130, 16700)
    idx.close()
    reopened = OffsetIndex(path, BASE, writable=False)
    assert reopened.entries() == ENTRIES + [(130, 16700)]
    assert os.path.getsize(path) == 4 * 8


def test_non_increasing_offset_is_refused(path):
    idx = filled(path)
    with pytest.raises(ValueError):
        idx.append(120, 20000)
    with pytest.raises(ValueError):
        idx.append(119, 20000)
    assert idx.entries() == ENTRIES
    assert os.path.getsize(path) == 3 * 8


def test_non_increasing_position_is_refused(path):
    idx = filled(path)
    with pytest.raises(ValueError):
        idx.append(125, 12500)
    assert len(idx) == 3


def test_offsets_that_do_not_fit_are_refused(path):
    idx = OffsetIndex(path, BASE)
    with pytest.raises(OverflowError):
        idx.append(BASE - 1, 4100)
    with pytest.raises(OverflowError):
        idx.append(BASE + 2**31, 4100)
    with pytest.raises(OverflowError):
        idx.append(105, -1)
    idx.append(BASE + 2**31 - 1, 4100)  # the largest relative offset fits
    assert idx.entries() == [(BASE + 2**31 - 1, 4100)]


def test_append_checks_against_what_another_process_wrote(path):
    mine = filled(path, ENTRIES[:1])
    assert mine.last_entry() == (105, 4100)
    other = OffsetIndex(path, BASE)  # a second process, same file
    other.append(110, 8300)
    with pytest.raises(ValueError):
        mine.append(110, 8300)  # already indexed by the other process
    mine.append(120, 12500)
    assert other.entries() == ENTRIES


def test_a_second_object_sees_entries_appended_by_the_first(path):
    writer = OffsetIndex(path, BASE)
    reader = OffsetIndex(path, BASE, writable=False)
    assert reader.entries() == []
    writer.append(105, 4100)
    assert reader.entries() == [(105, 4100)]
    writer.append(110, 8300)
    writer.append(120, 12500)
    assert reader.lookup(115) == (110, 8300)
    assert reader.entries() == ENTRIES


def test_a_reader_notices_entries_rewritten_under_it(path):
    writer = filled(path, ENTRIES[:2])
    reader = OffsetIndex(path, BASE, writable=False)
    assert reader.entries() == ENTRIES[:2]
    writer.truncate_to(106)  # the log was cut, then other batches appended
    writer.append(107, 5000)
    writer.append(109, 9000)
    assert reader.entries() == [(105, 4100), (107, 5000), (109, 9000)]
    writer.truncate_to(BASE)
    assert reader.entries() == []


def test_a_reader_notices_a_same_size_rewrite_from_a_later_moment(path):
    writer = filled(path, ENTRIES[:2])
    reader = OffsetIndex(path, BASE, writable=False)
    assert reader.entries() == ENTRIES[:2]
    before = os.stat(path).st_mtime_ns
    writer.truncate_to(110)
    writer.append(112, 9000)
    # Same length as before; pin the modification time to a later tick, as a rewrite by
    # another process normally has (within one clock tick it cannot be told apart).
    os.utime(path, ns=(before + 10**9, before + 10**9))
    assert reader.entries() == [(105, 4100), (112, 9000)]


# ---- truncation -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "cut, kept",
    [
        (BASE, []),
        (105, []),
        (106, ENTRIES[:1]),
        (110, ENTRIES[:1]),
        (111, ENTRIES[:2]),
        (121, ENTRIES),
        (10**9, ENTRIES),
    ],
)
def test_truncate_to_removes_entries_at_or_after_the_offset(path, cut, kept):
    idx = filled(path)
    idx.truncate_to(cut)
    assert idx.entries() == kept
    assert os.path.getsize(path) == 8 * len(kept)
    idx.append(200, 30000)
    assert idx.entries() == kept + [(200, 30000)]


def test_reset_empties_the_file(path):
    idx = filled(path)
    idx.reset()
    assert idx.entries() == []
    assert os.path.getsize(path) == 0
    idx.append(105, 4100)
    assert idx.entries() == [(105, 4100)]


# ---- damaged and foreign files -----------------------------------------------------


def test_zero_filled_preallocated_tail_is_ignored(path):
    write_raw(path, raw((5, 4100), (10, 8300), (20, 12500)) + bytes(800))
    idx = OffsetIndex(path, BASE, writable=False)
    assert idx.entries() == ENTRIES
    assert len(idx) == 3
    assert idx.lookup(10**6) == (120, 12500)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check()


def test_appending_after_a_damaged_entry_is_refused_until_truncated(path):
    write_raw(path, raw((5, 4100), (10, 8300)) + bytes(16))
    idx = OffsetIndex(path, BASE)
    with pytest.raises(CorruptIndexError):
        idx.append(130, 16700)
    idx.truncate_to(10**9)  # cuts the zero tail: what remains is trustworthy
    idx.sanity_check()
    idx.append(130, 16700)
    assert idx.entries() == [(105, 4100), (110, 8300), (130, 16700)]


def test_partial_trailing_entry_is_ignored_and_cut_by_the_next_append(path):
    write_raw(path, raw((5, 4100), (10, 8300)) + b"\x00\x00\x00\x14\x00")
    idx = OffsetIndex(path, BASE)
    assert idx.entries() == ENTRIES[:2]
    with pytest.raises(CorruptIndexError, match="multiple of"):
        idx.sanity_check()
    idx.append(120, 12500)
    assert os.path.getsize(path) == 24
    assert idx.entries() == ENTRIES
    idx.sanity_check()


@pytest.mark.parametrize(
    "data",
    [
        raw((5, 4100), (5, 8300)),  # offsets repeat
        raw((10, 4100), (5, 8300)),  # offsets go back
        raw((5, 4100), (10, 4100)),  # positions do not increase
        raw((-1, 4100)),  # offset below the base
        raw((5, -4)),  # negative position
        raw((5, 4100)) + b"\x00\x00\x00",  # length not a multiple of 8
    ],
)
def test_sanity_check_rejects_what_no_writer_leaves(path, data):
    write_raw(path, data)
    with pytest.raises(CorruptIndexError):
        OffsetIndex(path, BASE, writable=False).sanity_check()


def test_sanity_check_bounds_positions_by_the_log_size(path):
    idx = filled(path)
    idx.sanity_check()
    idx.sanity_check(12501)
    with pytest.raises(CorruptIndexError, match="beyond the log size"):
        idx.sanity_check(12500)
    idx.reset()
    idx.sanity_check(0)


def test_a_damaged_middle_entry_hides_everything_after_it(path):
    write_raw(path, raw((5, 4100), (3, 8300), (20, 12500)))
    idx = OffsetIndex(path, BASE, writable=False)
    assert idx.entries() == [(105, 4100)]
    assert idx.lookup(200) == (105, 4100)


# ---- read-only, lifecycle, failures ------------------------------------------------


def test_read_only_missing_file_is_empty_until_someone_creates_it(path):
    reader = OffsetIndex(path, BASE, writable=False)
    assert reader.entries() == []
    assert reader.lookup(150) == (BASE, 0)
    assert not os.path.exists(path)
    filled(path)
    assert reader.entries() == ENTRIES


def test_read_only_index_refuses_writes(path):
    filled(path).close()
    reader = OffsetIndex(path, BASE, writable=False)
    for write in (lambda: reader.append(130, 20000), lambda: reader.truncate_to(105), reader.reset, reader.delete):
        with pytest.raises(ReadOnlyStoreError):
            write()
    assert reader.entries() == ENTRIES


def test_flush_close_and_delete(path):
    idx = filled(path)
    idx.flush()
    idx.close()
    idx.close()
    with pytest.raises(ValueError):
        idx.entries()
    other = OffsetIndex(path, BASE)
    other.delete()
    assert not os.path.exists(path)


def test_is_full_at_the_configured_size(path):
    idx = OffsetIndex(path, BASE, max_index_size=8 * 3 + 5)
    assert idx.max_entries == 3
    for offset, position in ENTRIES[:2]:
        idx.append(offset, position)
    assert not idx.is_full()
    idx.append(*ENTRIES[2])
    assert idx.is_full()


def test_a_failed_write_leaves_no_torn_entry(path, monkeypatch):
    idx = filled(path, ENTRIES[:2])
    real_write = os.write
    calls = []

    def short_then_enospc(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data)[:3])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", short_then_enospc)
    with pytest.raises(KafkaStorageError):
        idx.append(120, 12500)
    monkeypatch.undo()
    assert os.path.getsize(path) == 16
    assert idx.entries() == ENTRIES[:2]
    idx.append(120, 12500)
    assert idx.entries() == ENTRIES
