"""EntryFile: the fixed-size-entry machinery under `.index`, `.timeindex` and `.txnindex`.

Real files in tmp_path, one entry layout of its own (so the machinery is tested apart from
any one index): append, read back, the trusted prefix, torn and zero-filled tails, truncation,
files that grow, shrink or are rewritten by another process under a reader's cache, read-only
and closed handles. The last tests go through OffsetIndex, the thinnest subclass, for lookup.
"""

from __future__ import annotations

import os
import struct
from operator import le, lt

import pytest

from storage.entry_file import (
    INT32_MAX,
    EntryFile,
    EntryView,
    IndexOrderError,
    increasing_columns,
    relative_offset,
)
from storage.errors import CorruptIndexError, ReadOnlyStoreError
from storage.offset_index import OffsetIndex

LAYOUT = struct.Struct(">iq")  # key, value: 12 bytes


def follows(prev, cur) -> bool:
    """Keys strictly increase and start above zero, so a zero-filled tail is never trusted."""
    return cur[0] > 0 if prev is None else cur[0] > prev[0]


def open_file(path, *, writable: bool = True, create: bool = True, run_check: bool = True) -> EntryFile:
    return EntryFile(
        str(path),
        LAYOUT,
        follows,
        rule="keys must strictly increase",
        writable=writable,
        create=create,
        run_check=increasing_columns((0, lt)) if run_check else None,
    )


def write_entries(f: EntryFile, *entries) -> None:
    for entry in entries:
        f.prepare_append()
        f.append(entry)


@pytest.fixture
def path(tmp_path):
    return tmp_path / "00000000000000000000.idx"


# ---- append and read back ------------------------------------------------------------------------


def test_appended_entries_are_on_disk_big_endian_and_read_back(path) -> None:
    f = open_file(path)
    write_entries(f, (1, 10), (2, -5), (7, 2**40))
    assert path.read_bytes() == LAYOUT.pack(1, 10) + LAYOUT.pack(2, -5) + LAYOUT.pack(7, 2**40)
    assert f.view() == EntryView([(1, 10), (2, -5), (7, 2**40)], 3, 36)
    reader = open_file(path, writable=False, create=False)
    assert reader.view().entries == [(1, 10), (2, -5), (7, 2**40)]


def test_create_makes_an_empty_file_and_a_read_only_handle_of_a_missing_file_sees_nothing(tmp_path) -> None:
    created = tmp_path / "a.idx"
    open_file(created)
    assert created.exists() and created.stat().st_size == 0
    missing = open_file(tmp_path / "missing.idx", writable=False, create=False)
    assert not missing.exists
    assert missing.view() == EntryView([], 0, 0)
    assert missing.peek() == (0, None)


def test_peek_returns_length_and_last_whole_entry_without_parsing(path) -> None:
    f = open_file(path)
    write_entries(f, (1, 1), (2, 2))
    with open(path, "ab") as raw:
        raw.write(b"\x00" * 5)  # a torn partial entry
    assert f.peek() == (29, (2, 2))


# ---- the trusted prefix ------------------------------------------------------------------------------


@pytest.mark.parametrize("run_check", [True, False])
def test_only_the_ordered_prefix_is_trusted(path, run_check) -> None:
    path.write_bytes(LAYOUT.pack(1, 1) + LAYOUT.pack(5, 5) + LAYOUT.pack(3, 3) + LAYOUT.pack(9, 9))
    view = open_file(path, run_check=run_check).view()
    assert len(view.entries) == 4
    assert view.valid == 2  # (3, 3) breaks the order; (9, 9) after it is not trusted either


def test_zero_filled_kafka_tail_is_invisible(path) -> None:
    path.write_bytes(LAYOUT.pack(1, 1) + LAYOUT.pack(2, 2) + b"\x00" * (LAYOUT.size * 10))
    view = open_file(path, writable=False, create=False).view()
    assert view.valid == 2 and len(view.entries) == 12


def test_trailing_partial_entry_is_ignored_by_readers(path) -> None:
    path.write_bytes(LAYOUT.pack(1, 1) + b"\x00\x00\x00")
    view = open_file(path, writable=False, create=False).view()
    assert view.entries == [(1, 1)] and view.valid == 1 and view.length == LAYOUT.size + 3


def test_check_shape_names_the_file_and_the_broken_entry(path) -> None:
    path.write_bytes(LAYOUT.pack(4, 1) + LAYOUT.pack(2, 2))
    f = open_file(path, writable=False, create=False)
    with pytest.raises(CorruptIndexError, match=r"entry 1 \(2, 2\) is out of order after entry 0 \(4, 1\)") as exc:
        f.check_shape()
    assert str(path) in str(exc.value) and "keys must strictly increase" in str(exc.value)


def test_check_shape_rejects_a_partial_entry_unless_allowed(path) -> None:
    path.write_bytes(LAYOUT.pack(1, 1) + b"\x01")
    f = open_file(path, writable=False, create=False)
    with pytest.raises(CorruptIndexError, match="not a multiple of the 12-byte entry size"):
        f.check_shape()
    assert f.check_shape(allow_partial=True).valid == 1


def test_increasing_columns_checks_every_neighbour_pair_from_start() -> None:
    check = increasing_columns((0, lt), (1, le))
    assert check([(1, 1), (2, 1), (3, 4)], 0)
    assert not check([(1, 1), (1, 2)], 0)
    assert not check([(1, 5), (2, 4)], 0)
    assert check([(9, 9), (1, 1), (2, 2)], 1)  # only entries[start:] are compared
    assert check([(1, 1)], 0)


# ---- writing -------------------------------------------------------------------------------------------


def test_prepare_append_cuts_a_torn_partial_entry_before_writing(path) -> None:
    f = open_file(path)
    write_entries(f, (1, 1))
    with open(path, "ab") as raw:
        raw.write(b"\xff" * 7)
    view = f.prepare_append()
    assert view.length == LAYOUT.size and path.stat().st_size == LAYOUT.size
    f.append((2, 2))
    assert open_file(path, writable=False, create=False).view().entries == [(1, 1), (2, 2)]


def test_prepare_append_refuses_a_damaged_file(path) -> None:
    path.write_bytes(LAYOUT.pack(3, 3) + LAYOUT.pack(1, 1))
    f = open_file(path)
    with pytest.raises(CorruptIndexError, match="must be rebuilt"):
        f.prepare_append()
    assert path.stat().st_size == 2 * LAYOUT.size  # nothing cut, nothing written


def test_an_out_of_order_append_is_untrusted_by_the_writer_itself(path) -> None:
    """The order check is the caller's; an entry that breaks it is written but never served."""
    f = open_file(path)
    write_entries(f, (5, 5))
    f.append((4, 4))
    assert f.view().valid == 1


def test_truncate_entries_keeps_a_prefix_and_drops_garbage(path) -> None:
    f = open_file(path)
    write_entries(f, (1, 1), (2, 2), (3, 3))
    with open(path, "ab") as raw:
        raw.write(b"junk")
    f.truncate_entries(2)
    assert path.stat().st_size == 2 * LAYOUT.size
    assert f.view().entries == [(1, 1), (2, 2)]
    f.truncate_entries(0)
    assert path.stat().st_size == 0 and f.view() == EntryView([], 0, 0)


def test_read_only_handle_refuses_every_write(path) -> None:
    write_entries(open_file(path), (1, 1))
    ro = open_file(path, writable=False, create=False)
    for attempt in (ro.prepare_append, lambda: ro.append((2, 2)), lambda: ro.truncate_entries(0), ro.delete):
        with pytest.raises(ReadOnlyStoreError):
            attempt()
    assert path.stat().st_size == LAYOUT.size


def test_closed_handle_refuses_reads_and_writes(path) -> None:
    f = open_file(path)
    f.close()
    with pytest.raises(ValueError, match="closed"):
        f.view()
    with pytest.raises(ValueError, match="closed"):
        f.prepare_append()


def test_delete_unlinks_the_file(path) -> None:
    f = open_file(path)
    write_entries(f, (1, 1))
    f.delete()
    assert not path.exists()


# ---- other processes change the file under a reader's cache ---------------------------------------


def test_reader_sees_entries_another_handle_appended(path) -> None:
    writer = open_file(path)
    reader = open_file(path, writable=False, create=False)
    write_entries(writer, (1, 1))
    assert reader.view().entries == [(1, 1)]
    write_entries(writer, (2, 2), (3, 3))
    assert reader.view().entries == [(1, 1), (2, 2), (3, 3)]
    assert reader.view().valid == 3


def test_reader_notices_the_file_shrank(path) -> None:
    writer = open_file(path)
    reader = open_file(path, writable=False, create=False)
    write_entries(writer, (1, 1), (2, 2), (3, 3))
    assert reader.view().valid == 3
    writer.truncate_entries(1)
    assert reader.view().entries == [(1, 1)]


def test_reader_notices_an_in_place_rewrite_of_the_same_length(path) -> None:
    writer = open_file(path)
    reader = open_file(path, writable=False, create=False)
    write_entries(writer, (1, 1), (2, 2))
    assert reader.view().entries == [(1, 1), (2, 2)]
    writer.truncate_entries(0)
    write_entries(writer, (1, 10), (2, 20), (3, 30))
    assert reader.view().entries == [(1, 10), (2, 20), (3, 30)]
    # a truncate-and-rewrite back to the old length with a different last entry
    writer.truncate_entries(1)
    write_entries(writer, (6, 60))
    os.utime(path, ns=(1, 1))  # even with an mtime that says nothing, the size changed twice
    assert reader.view().entries == [(1, 10), (6, 60)]


def test_writer_cache_follows_another_writer(path) -> None:
    """Two writable handles (two processes taking the lock in turn) never lose each other's entries."""
    a = open_file(path)
    b = open_file(path)
    write_entries(a, (1, 1))
    write_entries(b, (2, 2))
    write_entries(a, (3, 3))
    assert a.view().entries == b.view().entries == [(1, 1), (2, 2), (3, 3)]


def test_damage_in_the_middle_hides_everything_after_it(path) -> None:
    """A handle opened after the damage (the next process) trusts only the entries before it."""
    write_entries(open_file(path), (1, 1), (2, 2), (3, 3))
    with open(path, "r+b") as raw:
        raw.seek(LAYOUT.size)
        raw.write(LAYOUT.pack(0, 0))  # entry 1 zeroed: entries 1.. are untrusted
    f = open_file(path)
    assert f.view().valid == 1
    with pytest.raises(CorruptIndexError):
        f.prepare_append()


def test_cached_handle_rereads_when_its_last_known_entry_changed(path) -> None:
    """The cache re-checks only the last entry it knew: a rewrite there forces a full re-read."""
    writer = open_file(path)
    write_entries(writer, (1, 1), (2, 2))
    reader = open_file(path, writable=False, create=False)
    assert reader.view().valid == 2
    with open(path, "r+b") as raw:
        raw.write(LAYOUT.pack(5, 5) + LAYOUT.pack(3, 3))  # same length, both entries changed
    os.utime(path, ns=(10**18, 10**18))
    view = reader.view()
    assert view.entries == [(5, 5), (3, 3)] and view.valid == 1


# ---- relative offsets and a real index -----------------------------------------------------------


def test_relative_offset_must_fit_an_int32() -> None:
    assert relative_offset(100, 100) == 0
    assert relative_offset(100 + INT32_MAX, 100) == INT32_MAX
    with pytest.raises(OverflowError):
        relative_offset(101 + INT32_MAX, 100)
    with pytest.raises(OverflowError):
        relative_offset(99, 100)


def test_offset_index_lookup_finds_the_greatest_entry_at_or_below(tmp_path) -> None:
    with OffsetIndex(str(tmp_path / "00000000000000000100.index"), 100) as index:
        for offset, position in ((110, 4100), (125, 8300), (140, 12600)):
            index.append(offset, position)
        assert index.lookup(105) == (100, 0)
        assert index.lookup(110) == (110, 4100)
        assert index.lookup(139) == (125, 8300)
        assert index.lookup(10**6) == (140, 12600)
        assert len(index) == 3 and index.entries() == [(110, 4100), (125, 8300), (140, 12600)]
        with pytest.raises(IndexOrderError):
            index.append(140, 13000)
        index.truncate_to(125)
        assert index.entries() == [(110, 4100)]
        assert index.peek_last() == (8, (110, 4100))


def test_offset_index_ignores_a_kafka_preallocated_zero_tail(tmp_path) -> None:
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(struct.pack(">ii", 35, 4329) + struct.pack(">ii", 65, 8440) + b"\x00" * 8 * 100)
    index = OffsetIndex(str(path), 0, writable=False)
    assert index.entries() == [(35, 4329), (65, 8440)]
    assert index.lookup(70) == (65, 8440)
    with pytest.raises(CorruptIndexError):
        index.sanity_check()


# ---- an absent file under a vouching key; a bisection in place ------------------------------------


def test_an_absent_file_is_looked_for_again_once_the_absence_key_moves_or_cannot_vouch(path) -> None:
    keys: list[object | None] = ["k1"]
    reader = open_file(path, writable=False, create=False)
    reader.vouch_absence_by(lambda: keys[0])
    assert reader.view().entries == []  # absent under "k1"
    write_entries(open_file(path), (1, 10))  # created elsewhere: in a directory, that moves the key
    assert reader.view().entries == [] and reader.peek() == (0, None)  # "k1" still says absent: not opened
    keys[0] = "k2"
    assert reader.view().entries == [(1, 10)]

    racy = open_file(path.with_name("other.idx"), writable=False, create=False)
    keys[0] = None  # a key that cannot vouch: every look opens
    racy.vouch_absence_by(lambda: keys[0])
    assert racy.view().entries == []
    write_entries(open_file(path.with_name("other.idx")), (3, 30))
    assert racy.view().entries == [(3, 30)]


@pytest.mark.parametrize("count", [0, 1, 2, 7, 64])
def test_probe_finds_the_last_entry_at_or_below_a_key_without_parsing(path, count) -> None:
    f = open_file(path)
    write_entries(f, *[(3 * i + 1, i) for i in range(count)])
    probe = open_file(path, writable=False, create=False)
    for key in range(-1, 3 * count + 3):
        below = [(k, v) for k, v in ((3 * i + 1, i) for i in range(count)) if k <= key]
        assert probe.probe(0, key) == (below[-1] if below else None)
    assert probe.view().length == count * LAYOUT.size


def test_probe_of_a_missing_file_finds_nothing(tmp_path) -> None:
    assert open_file(tmp_path / "missing.idx", writable=False, create=False).probe(0, 5) is None
