"""A retried group commit: one request of many consecutive batches, sent again after a lost answer.

The producer's sender appends every sealed batch of a partition in one request, which may
hold more batches than the 5 a partition remembers per producer. The partition must answer
the whole retry as a duplicate, write nothing, and give every batch its original offsets
where the log confirms them.
"""

from __future__ import annotations

from kafka.record.default_records import DefaultRecordBatchBuilder

from storage.records import BatchBuilder

PID, EPOCH = 7, 0


def batches(first_seq: int, count: int, records: int = 3) -> list[bytes]:
    """`count` idempotent batches of `records` records each, with consecutive sequences."""
    out, seq = [], first_seq
    for i in range(count):
        builder = BatchBuilder(max_bytes=1 << 20)
        for r in range(records):
            builder.append(b"k", b"batch-%d-record-%d" % (i, r), None, 1_700_000_000_000)
        out.append(builder.build(producer_id=PID, producer_epoch=EPOCH, base_sequence=seq))
        seq += records
    return out


def offsets(result) -> list[tuple[int, int]]:
    return [(b.base_offset, b.last_offset) for b in result.batches]


def test_a_retried_group_larger_than_the_window_is_a_whole_duplicate(store):
    store.create_topic("t", 1)
    log = store.partition("t", 0)
    group = b"".join(batches(0, 8))
    first = log.append(group)
    assert offsets(first) == [(3 * i, 3 * i + 2) for i in range(8)] and not first.duplicate
    size = log.size_bytes
    again = log.append(group)  # the answer was lost; the sender sends the same bytes
    assert again.duplicate and offsets(again) == offsets(first)
    assert log.size_bytes == size and log.log_end_offset == 24
    nxt = log.append(b"".join(batches(24, 2)))  # the sequence goes on after the group
    assert offsets(nxt) == [(24, 26), (27, 29)]


def test_older_batches_not_where_the_group_puts_them_are_duplicates_of_unknown_offset(store):
    """Batches appended one request each, with another producer's batch between them: a request
    regrouping them gets the remembered offsets, derived ones the log confirms, and -1 where the
    log has something else at the derived offset."""
    store.create_topic("t", 1)
    log = store.partition("t", 0)
    parts = batches(0, 7)
    log.append(parts[0])
    other = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=99,
        producer_epoch=0,
        base_sequence=0,
        batch_size=1 << 20,
    )
    other.append(0, 1_700_000_000_000, b"x", b"other producer", [])
    log.append(bytes(other.build()))
    for part in parts[1:]:
        log.append(part)
    end = log.log_end_offset
    again = log.append(b"".join(parts))
    assert again.duplicate and log.log_end_offset == end
    got = offsets(again)
    assert got[2:] == [(4 + 3 * i, 6 + 3 * i) for i in range(1, 6)]  # the last 5: remembered
    assert got[1] == (4, 6)  # confirmed in the log just before the next one
    assert got[0] == (-1, -1)  # not where the regrouped request would put it: offset unknown
