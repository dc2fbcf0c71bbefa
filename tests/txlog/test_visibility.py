"""The one definition of visibility, at its own grain: no log, no files.

`txlog.fetch.visible_batches` / `visible_records` / `AbortedFilter` decide what each
isolation level shows for both the Consumer's fetch and the Spark executor, and
`latest_offset` where that view ends. Here they are fed batches built in memory with
chosen offsets, so every case (interleaved committed, aborted and open transactions,
control batches, the LSO cap, a batch straddling the start) is written out by hand.
"""

from __future__ import annotations

import struct

import pytest

from storage.records import (
    CRC_COVERED_START,
    CRC_OFFSET,
    HEADER_SIZE,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    RECORDS_COUNT_OFFSET,
    ControlType,
    RecordBatch,
    build_batch,
    build_control_batch,
    crc32c,
)
from storage.transaction_index import AbortedTxn
from txlog.fetch import AbortedFilter, IsolationLevel, LogBounds, latest_offset, visible_batches, visible_records

NOW = 1_700_000_000_000
RC = IsolationLevel.READ_COMMITTED
RU = IsolationLevel.READ_UNCOMMITTED


def data(base: int, n: int = 1, *, pid: int = -1, transactional: bool = False) -> RecordBatch:
    """A data batch of `n` records at offsets base..base+n-1 (values name their offsets)."""
    records = [(None, f"v{base + i}".encode(), [], NOW) for i in range(n)]
    raw = build_batch(
        records,
        base_offset=base,
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=0 if pid >= 0 else -1,
        is_transactional=transactional,
    )
    return RecordBatch.parse(raw)


def txn(base: int, pid: int, n: int = 1) -> RecordBatch:
    return data(base, n, pid=pid, transactional=True)


def marker(base: int, pid: int, control_type: ControlType) -> RecordBatch:
    return RecordBatch.parse(
        build_control_batch(control_type, producer_id=pid, producer_epoch=1, timestamp=NOW, base_offset=base)
    )


def abort(base: int, pid: int) -> RecordBatch:
    return marker(base, pid, ControlType.ABORT)


def commit(base: int, pid: int) -> RecordBatch:
    return marker(base, pid, ControlType.COMMIT)


def entry(pid: int, first: int, last: int) -> AbortedTxn:
    """The `.txnindex` entry of producer `pid`'s transaction [first, ABORT marker at last]."""
    return AbortedTxn(pid, first, last, first)


def shown(batches, start, end, aborted=None) -> list[int]:
    """Base offsets of the batches the view shows."""
    return [b.base_offset for b in visible_batches(batches, start, end, aborted)]


def offsets(batches, start, end, aborted=None) -> list[int]:
    """Offsets of the records the view shows."""
    return [r[0] for b in visible_batches(batches, start, end, aborted) for r in visible_records(b, start, end)]


# ---- which batches ---------------------------------------------------------------------------------------


# Producers 1 (committed), 2 (aborted) and 3 (still open) interleaved, with plain data between:
#   0 p1  1 p2  2-3 plain  4 p2  5 ABORT(p2)  6 p1  7 COMMIT(p1)  8 plain  9 p3 (open)  10 plain
MIXED = [
    txn(0, 1),
    txn(1, 2),
    data(2, 2),
    txn(4, 2),
    abort(5, 2),
    txn(6, 1),
    commit(7, 1),
    data(8),
    txn(9, 3),
    data(10),
]
MIXED_ABORTED = [entry(2, 1, 5)]


def test_read_committed_skips_aborted_batches_and_every_control_batch():
    assert shown(MIXED, 0, 9, AbortedFilter(MIXED_ABORTED)) == [0, 2, 6, 8]


def test_read_uncommitted_shows_aborted_and_open_data_but_no_control_batch():
    assert shown(MIXED, 0, 11) == [0, 1, 2, 4, 6, 8, 9, 10]


def test_the_lso_cap_hides_the_open_transaction_and_everything_after_it():
    lso = 9  # producer 3's transaction is open from offset 9
    assert shown(MIXED, 0, lso, AbortedFilter(MIXED_ABORTED)) == [0, 2, 6, 8]
    assert offsets(MIXED, 0, lso, AbortedFilter(MIXED_ABORTED)) == [0, 2, 3, 6, 8]


def test_an_abort_marker_ends_the_skipping_for_its_producer_only():
    # producer 2 aborts at 2, then writes again (committed at 4); producer 5 stays aborted until 6
    batches = [txn(0, 2), txn(1, 5), abort(2, 2), txn(3, 2), commit(4, 2), txn(5, 5), abort(6, 5)]
    aborted = AbortedFilter([entry(2, 0, 2), entry(5, 1, 6)])
    assert shown(batches, 0, 7, aborted) == [3]


def test_a_producer_is_skipped_only_from_its_entry_first_offset():
    # producer 4 commits a transaction at 0-1, then the next one (2-3) is aborted
    batches = [txn(0, 4), commit(1, 4), txn(2, 4), abort(3, 4), data(4)]
    assert shown(batches, 0, 5, AbortedFilter([entry(4, 2, 3)])) == [0, 4]


def test_entries_added_between_reads_continue_the_filter():
    """fetch reads a partition in pieces and adds each piece's entries before walking it."""
    aborted = AbortedFilter(())
    first, second = [txn(0, 7), txn(1, 8)], [txn(2, 7), abort(3, 7), data(4)]
    aborted.add([entry(7, 0, 3)])  # the entry overlapping the first piece
    assert shown(first, 0, 5, aborted) == [1]
    aborted.add([entry(7, 0, 3)])  # spans both pieces: comes again, changes nothing
    assert shown(second, 0, 5, aborted) == [4]


def test_non_transactional_and_idempotent_batches_are_never_skipped():
    batches = [data(0), data(1, pid=9), abort(2, 9), data(3, pid=9)]
    assert shown(batches, 0, 4, AbortedFilter([entry(9, 0, 2)])) == [0, 1, 3]


def test_a_control_batch_emptied_by_compaction_ends_nothing():
    header = bytearray(
        build_control_batch(ControlType.ABORT, producer_id=6, producer_epoch=1, timestamp=NOW, base_offset=2)[
            :HEADER_SIZE
        ]
    )  # only the header survives compaction
    struct.pack_into(">i", header, LENGTH_OFFSET, HEADER_SIZE - LOG_OVERHEAD)
    struct.pack_into(">i", header, RECORDS_COUNT_OFFSET, 0)
    struct.pack_into(">I", header, CRC_OFFSET, crc32c(header[CRC_COVERED_START:]))
    emptied = RecordBatch.parse(bytes(header))
    batches = [txn(0, 6), txn(1, 6), emptied, txn(3, 6)]
    assert shown(batches, 0, 4, AbortedFilter([entry(6, 0, 5)])) == []


def test_batches_wholly_before_the_start_are_passed_unread():
    # an index lookup starts a little before the range: p2's ABORT at 1 lies before it
    batches = [txn(0, 2), abort(1, 2), data(2), txn(3, 2), commit(4, 2)]
    assert shown(batches, 2, 5, AbortedFilter(())) == [2, 3]


def test_the_walk_stops_at_the_first_batch_at_or_past_the_end():
    class Unreadable:
        base_offset = 5
        last_offset_delta = 0

        @property
        def attributes(self):
            raise AssertionError("a batch past the end was looked at")

    assert shown([data(0, 2), data(2, 3), Unreadable()], 0, 5) == [0, 2]


# ---- which records ---------------------------------------------------------------------------------------


def test_a_batch_straddling_the_start_shows_its_records_from_the_start():
    batches = [data(0, 4), data(4, 2)]
    assert offsets(batches, 2, 6) == [2, 3, 4, 5]


def test_a_batch_straddling_the_end_shows_its_records_before_the_end():
    assert offsets([data(0, 3), data(3, 4)], 0, 5) == [0, 1, 2, 3, 4]


def test_a_batch_straddling_both_edges():
    assert offsets([data(10, 10)], 13, 16) == [13, 14, 15]


def test_a_batch_inside_the_range_is_taken_whole_as_decoded():
    batch = data(0, 3)
    assert visible_records(batch, 0, 3) == batch.record_tuples()
    assert [tuple(r) for r in batch.records()] == visible_records(batch, 0, 3)


def test_a_straddling_aborted_batch_stays_hidden():
    batches = [txn(0, 3, n=4), abort(4, 3), data(5, 2)]
    assert offsets(batches, 2, 7, AbortedFilter([entry(3, 0, 4)])) == [5, 6]


# ---- the ABORT predicate and the latest offset -----------------------------------------------------------


def test_is_abort_marker_is_true_only_for_an_abort_control_batch():
    assert abort(0, 1).is_abort_marker()
    assert not commit(0, 1).is_abort_marker()
    assert not txn(0, 1).is_abort_marker()
    assert not marker(0, 1, 2).is_abort_marker()  # a KRaft control type is no transaction marker


@pytest.mark.parametrize(
    "lso, hw, isolation, expected", [(7, 12, RC, 7), (7, 12, RU, 12), (7, 5, RC, 5), (7, 5, RU, 5), (12, 12, RC, 12)]
)
def test_latest_offset_stops_at_the_lso_and_never_passes_the_high_watermark(lso, hw, isolation, expected):
    """read_committed ends at the LSO, read_uncommitted at the high watermark (the durable end),
    and neither passes the high watermark (tests/storage/test_high_watermark.py covers how it moves)."""
    bounds = LogBounds(log_start_offset=3, last_stable_offset=lso, log_end_offset=12, high_watermark=hw)
    assert latest_offset(bounds, isolation) == expected
