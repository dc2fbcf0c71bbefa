"""TransactionIndex: Kafka's 34-byte AbortedTxn entries and the read_committed search.

docs/kafka-formats.md §3.5, §5.6.
"""

from __future__ import annotations

import os
import struct

import pytest

from storage.errors import CorruptIndexError, ReadOnlyStoreError
from storage.transaction_index import AbortedTxn, TransactionIndex

# Worked cases shaped like Kafka's TransactionIndexTest: four aborts whose LSOs interleave.
TXNS = [
    AbortedTxn(0, 0, 10, 11),
    AbortedTxn(1, 5, 15, 13),
    AbortedTxn(2, 18, 35, 25),
    AbortedTxn(3, 32, 50, 40),
]


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "00000000000000000000.txnindex")


def filled(path, txns=TXNS, base=0, **kwargs):
    idx = TransactionIndex(path, base, **kwargs)
    for txn in txns:
        idx.append(txn)
    return idx


def raw(version, pid, first, last, lso):
    return struct.pack(">hqqqq", version, pid, first, last, lso)


def write_raw(path, data):
    with open(path, "wb") as f:
        f.write(data)


def test_file_is_created_lazily(path):
    idx = TransactionIndex(path, 0)
    assert not idx.exists
    assert idx.entries() == []
    assert idx.last_entry() is None
    assert idx.collect_aborted(0, 100) == ([], False)
    idx.truncate_to(0)
    idx.reset()
    idx.sanity_check()
    assert not os.path.exists(path)
    idx.append(TXNS[0])
    assert idx.exists
    assert os.path.getsize(path) == 34


def test_entry_layout_is_kafkas_34_bytes(path):
    filled(path, [AbortedTxn(0x0102030405060708, 102, 106, 100)]).close()
    with open(path, "rb") as f:
        data = f.read()
    assert data == bytes.fromhex("000001020304050607080000000000000066000000000000006a0000000000000064")


def test_worked_example_of_section_5_5_round_trips(path):
    filled(path, [AbortedTxn(2, 102, 106, 100)]).close()
    assert TransactionIndex(path, 0, writable=False).entries() == [AbortedTxn(2, 102, 106, 100)]


@pytest.mark.parametrize(
    "fetch, upper, expected, complete",
    [
        (0, 100, TXNS, False),  # no LSO reaches 100: keep looking in the next segment
        (0, 32, TXNS[:3], True),  # txn 3 starts at 32, not below the bound; its LSO 40 ends the search
        (0, 35, TXNS, True),
        (10, 35, TXNS, True),  # last offset 10 is still ≥ the fetch offset
        (11, 35, TXNS[1:], True),
        (20, 41, TXNS[2:], False),
        (0, 12, TXNS[:2], True),  # LSO 13 of the second entry ends the search; txn 2 is never seen
        (51, 100, [], False),
    ],
)
def test_collect_aborted(path, fetch, upper, expected, complete):
    idx = filled(path)
    assert idx.collect_aborted(fetch, upper) == (expected, complete)


def test_collect_stops_at_the_first_entry_whose_lso_reaches_the_bound(path):
    idx = filled(path, [AbortedTxn(1, 0, 10, 5), AbortedTxn(2, 12, 20, 21), AbortedTxn(3, 15, 30, 14)])
    found, complete = idx.collect_aborted(0, 18)
    assert complete
    assert found == [AbortedTxn(1, 0, 10, 5), AbortedTxn(2, 12, 20, 21)]


@pytest.mark.parametrize(
    "cut, kept",
    [(0, []), (10, []), (11, TXNS[:1]), (15, TXNS[:1]), (16, TXNS[:2]), (50, TXNS[:3]), (51, TXNS)],
)
def test_truncate_drops_the_first_entry_at_or_after_the_offset_and_all_later(path, cut, kept):
    idx = filled(path)
    idx.truncate_to(cut)
    assert idx.entries() == kept
    assert os.path.getsize(path) == 34 * len(kept)
    assert idx.collect_aborted(0, 100)[0] == kept


@pytest.mark.parametrize("last_offset", [50, 49])
def test_last_offset_must_increase(path, last_offset):
    idx = filled(path)
    with pytest.raises(ValueError):
        idx.append(AbortedTxn(4, 45, last_offset, 45))
    assert idx.entries() == TXNS
    assert os.path.getsize(path) == 34 * 4


def test_implausible_entries_are_refused(path):
    idx = TransactionIndex(path, 0)
    with pytest.raises(ValueError):
        idx.append(AbortedTxn(1, 20, 10, 5))  # first offset after the marker
    with pytest.raises(ValueError):
        idx.append(AbortedTxn(1, 5, 10, 12))  # LSO beyond marker + 1
    assert not idx.exists


def test_order_is_checked_against_another_process(path):
    mine = filled(path, TXNS[:1])
    other = TransactionIndex(path, 0)
    other.append(TXNS[1])
    with pytest.raises(ValueError):
        mine.append(TXNS[1])
    mine.append(TXNS[2])
    assert other.entries() == TXNS[:3]


def test_a_reader_created_before_the_file_sees_it_later(path):
    reader = TransactionIndex(path, 0, writable=False)
    assert reader.entries() == []
    filled(path)
    assert reader.entries() == TXNS
    assert reader.last_entry() == TXNS[-1]


def test_sanity_check_rejects_entries_below_the_segment_base(path):
    filled(path, TXNS[:2]).close()
    TransactionIndex(path, 0).sanity_check()
    with pytest.raises(CorruptIndexError):
        TransactionIndex(path, 11).sanity_check()


def test_reopening_appends_at_the_end(path):
    filled(path, TXNS[:2]).close()
    idx = TransactionIndex(path, 0)
    idx.append(TXNS[2])
    idx.close()
    assert TransactionIndex(path, 0).entries() == TXNS[:3]
    assert os.path.getsize(path) == 3 * 34


def test_partial_trailing_entry_is_ignored_and_cut_by_the_next_append(path):
    write_raw(path, raw(0, *TXNS[0]) + raw(0, *TXNS[1])[:20])
    idx = TransactionIndex(path, 0)
    assert idx.entries() == TXNS[:1]
    idx.sanity_check()
    idx.append(TXNS[1])
    assert os.path.getsize(path) == 68
    assert idx.entries() == TXNS[:2]


def test_truncate_past_every_entry_still_cuts_a_partial_trailing_entry(path):
    """Nothing to drop, but a torn tail (a writer's crash) is cut: what follows is appended at an entry boundary."""
    write_raw(path, raw(0, *TXNS[0]) + raw(0, *TXNS[1])[:20])
    idx = TransactionIndex(path, 0)
    idx.truncate_to(TXNS[1].last_offset)
    assert os.path.getsize(path) == 34
    assert idx.entries() == TXNS[:1]


@pytest.mark.parametrize(
    "bad",
    [
        raw(0x0100, *TXNS[1]),  # version 1 in the byte Kafka reads
        raw(-0x0100, *TXNS[1]),  # a negative version byte
        raw(0, 1, 5, 10, 13),  # last offset does not increase
        bytes(34),  # a zero-filled entry
    ],
    ids=["version-1", "negative-version", "not-increasing", "zeros"],
)
def test_damage_hides_later_entries_and_fails_the_sanity_check(path, bad):
    write_raw(path, raw(0, *TXNS[0]) + bad + raw(0, *TXNS[2]))
    idx = TransactionIndex(path, 0)
    assert idx.entries() == TXNS[:1]
    with pytest.raises(CorruptIndexError):
        idx.sanity_check()
    with pytest.raises(CorruptIndexError):
        idx.append(TXNS[3])


def test_only_the_first_version_byte_counts_as_in_kafka(path):
    write_raw(path, b"\x00\x07" + raw(0, *TXNS[0])[2:])
    idx = TransactionIndex(path, 0)
    assert idx.entries() == TXNS[:1]
    idx.sanity_check()


def test_reset_keeps_an_empty_file(path):
    idx = filled(path)
    idx.reset()
    assert idx.exists
    assert idx.entries() == []
    assert len(idx) == 0


def test_read_only_refuses_writes_and_delete_removes_the_file(path):
    filled(path).close()
    reader = TransactionIndex(path, 0, writable=False)
    with pytest.raises(ReadOnlyStoreError):
        reader.append(AbortedTxn(9, 60, 70, 71))
    with pytest.raises(ReadOnlyStoreError):
        reader.truncate_to(0)
    writer = TransactionIndex(path, 0)
    writer.flush()
    writer.delete()
    assert not writer.exists
