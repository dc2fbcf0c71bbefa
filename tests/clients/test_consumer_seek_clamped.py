"""Consumer.seek_clamped: `--offset N|-N` positioning (kcat's -o) as a library call."""

from __future__ import annotations

import txlog

TP = txlog.TopicPartition


def _store_with_open_transaction(store):
    """t-0: 5 committed records then an open transaction: LSO 5, log end 6."""
    store.create_topic("t", 1)
    p = txlog.Producer(store)
    for i in range(5):
        p.send("t", value=b"%d" % i, partition=0)
    p.close()
    q = txlog.Producer(store, transactional_id="open")
    q.init_transactions()
    q.begin_transaction()
    q.send("t", value=b"pending", partition=0)
    q.flush()


def test_negative_counts_back_from_the_end_under_the_isolation_level(store):
    _store_with_open_transaction(store)
    committed = txlog.Consumer(store, isolation_level="read_committed")
    committed.assign([TP("t", 0)])
    assert committed.seek_clamped(TP("t", 0), -2) == 3  # the LSO (5) minus 2
    assert [r.value for r in committed.poll(timeout_ms=0)] == [b"3", b"4"]
    uncommitted = txlog.Consumer(store, isolation_level="read_uncommitted")
    uncommitted.assign([TP("t", 0)])
    assert uncommitted.seek_clamped(TP("t", 0), -2) == 4  # the log end (6) minus 2


def test_offsets_outside_the_log_are_clamped_not_reset(store):
    _store_with_open_transaction(store)
    c = txlog.Consumer(store, isolation_level="read_committed", auto_offset_reset="earliest")
    c.assign([TP("t", 0)])
    assert c.seek_clamped(TP("t", 0), -100) == 0
    assert c.seek_clamped(TP("t", 0), 3) == 3
    assert c.seek_clamped(TP("t", 0), 100) == 6  # the log end, as --offset N always clamped
