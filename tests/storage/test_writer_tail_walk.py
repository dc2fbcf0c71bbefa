"""A writer's catch-up skips the look for a next segment and for a `.txnindex` while the directory vouches.

Before each append, marker or sync a writer catches up with the files (PartitionLog._catch_up):
it replays what another process appended, opens a segment another process rolled, and drops a
`.txnindex` entry a writer left when it died between that entry and its ABORT marker. The
next segment and the `.txnindex` are looked for only when the partition directory changed since
a look that found neither (creating either moves the directory's mtime), and never on a key
taken too soon after the mtime to vouch for it (the racy-mtime rule). These tests show the look
is skipped on an unchanged directory, and that each change it detects is still seen when another
process makes it: they fail if the skip ignored the directory. A partition with a `.txnindex` in its
active segment skips the next segment's look alone, and checks its `.txnindex` through the open
descriptor once per writer hold; another process's dead entry is still seen by the next hold.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from storage import Store
from storage.config import TopicConfig
from storage.partition_log import PartitionLog
from storage.records import ControlType, build_batch
from storage.transaction_index import AbortedTxn
from tests.storage.second_process import in_other_process

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "t"
PID = 7  # the dead writer's transaction
OWN_PID = 5  # the writer's own, aborted


def batch(value: bytes, *, pid: int = -1, txn: bool = False) -> bytes:
    records = [(None, value, (), int(time.time() * 1000))]
    if pid < 0:
        return build_batch(records)
    return build_batch(records, producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=txn)


@contextmanager
def tail_looks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Record every stat of a `.log` or `.txnindex` path (os.path.exists stats too) made in the block."""
    seen: list[str] = []
    real_stat = os.stat

    def stat(path, *args, **kwargs):
        if isinstance(path, str) and path.endswith((".log", ".txnindex")):
            seen.append(path)
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    try:
        yield seen
    finally:
        monkeypatch.setattr(os, "stat", real_stat)


def writer_with_quiet_directory(store: Store) -> PartitionLog:
    """The writer's view after appends on a directory whose mtime is long past: its key vouches."""
    store.create_topic(TOPIC, 1)
    log = store.partition(TOPIC, 0)
    log.append(batch(b"a"))
    past = time.time_ns() - 10_000_000_000
    os.utime(store.partition_dir(TOPIC, 0), ns=(past, past))
    log.append(batch(b"b"))  # the key moved: this catch-up looks, under a key that can vouch
    log.append(batch(b"c"))
    return log


def fresh_bases_and_values(store: Store) -> tuple[list[int], list[tuple[int, bytes | None]]]:
    fresh = PartitionLog(store.partition_dir(TOPIC, 0), TOPIC, 0, TopicConfig(), read_only=True)
    try:
        out = [(r.offset, r.value) for b in fresh.read(0) if not b.is_control for r in b.records()]
        return [s.base_offset for s in fresh.segments], out
    finally:
        fresh.close()


def test_an_unchanged_directory_spares_the_writer_both_looks(store_path, monkeypatch):
    store = Store.open(store_path)
    try:
        log = writer_with_quiet_directory(store)
        for i in range(5):
            with tail_looks(monkeypatch) as seen:
                log.append(batch(b"x%d" % i))
                log.sync()
            assert seen == []
            assert log.bounds()[1] == 4 + i  # a read by the writer's own view spoils nothing
        assert log.log_end_offset == 8
    finally:
        store.close()


def test_another_process_roll_is_seen_by_the_next_append(store_path):
    store = Store.open(store_path)
    try:
        log = writer_with_quiet_directory(store)
        in_other_process(
            store_path, TOPIC, f"log.append({batch(b'other')!r})\nlog.roll()\nlog.append({batch(b'rolled')!r})"
        )
        result = log.append(batch(b"mine"))
        assert result.base_offset == 5
        bases, values = fresh_bases_and_values(store)
        assert [s.base_offset for s in log.segments] == bases == [0, 4]
        assert values[-3:] == [(3, b"other"), (4, b"rolled"), (5, b"mine")]
    finally:
        store.close()


def test_a_roll_in_the_same_mtime_tick_as_the_writer_look_is_seen(store_path):
    """The directory's mtime put back where the writer's look found it, in that look's tick: the key
    cannot vouch (its mtime was not yet past by the clock), so the writer looks again."""
    store = Store.open(store_path)
    try:
        store.create_topic(TOPIC, 1)
        log = store.partition(TOPIC, 0)
        directory = store.partition_dir(TOPIC, 0)
        seen = time.time_ns() + 60_000_000_000  # in the future of the stamping clock: racy
        for value in (b"a", b"b", b"c"):
            os.utime(directory, ns=(seen, seen))
            log.append(batch(value))
        in_other_process(store_path, TOPIC, f"log.roll()\nlog.append({batch(b'rolled')!r})")
        os.utime(directory, ns=(seen, seen))  # the key is as the writer left it
        result = log.append(batch(b"mine"))
        assert result.base_offset == 4
        bases, values = fresh_bases_and_values(store)
        assert [s.base_offset for s in log.segments] == bases == [0, 3]
        assert values[-2:] == [(3, b"rolled"), (4, b"mine")]
    finally:
        store.close()


@pytest.mark.parametrize("index", ["first", "existing"])
def test_a_dead_writer_txnindex_entry_is_dropped_by_the_next_append(store_path, index):
    """Another process opens a transaction, makes its abort's `.txnindex` entry durable and dies
    before the ABORT marker: the entry names the offset the next append takes, and must go before
    that append. `first`: the entry creates the segment's `.txnindex` (the directory changes);
    `existing`: the writer's own abort made the file before, and the entry only grows it."""
    store = Store.open(store_path)
    try:
        log = writer_with_quiet_directory(store)
        directory = store.partition_dir(TOPIC, 0)
        past = time.time_ns() - 5_000_000_000
        expected = []
        if index == "existing":
            first = log.append(batch(b"aborted", pid=OWN_PID, txn=True)).base_offset
            log.append_marker(ControlType.ABORT, OWN_PID, 0)
            expected = [AbortedTxn(OWN_PID, first, first + 1, first + 2)]  # LSO past the marker
            os.utime(directory, ns=(past, past))
            log.append(batch(b"d"))
            log.append(batch(b"e"))  # the writer's key vouches again, the `.txnindex` is there
        start = log.log_end_offset
        in_other_process(
            store_path,
            TOPIC,
            f"""
            first = log.append({batch(b"txn", pid=PID, txn=True)!r}).base_offset
            active = log.segments[-1]
            active.txn_index.append(AbortedTxn({PID}, first, log.log_end_offset, first))
            active.txn_index.flush()
            os._exit(0)
            """,
        )
        if index == "existing":
            # The entry only grew a file: nothing in the directory changed for it. (The other process's
            # open may have written a snapshot; its mtime is put back so only the entry is new.)
            os.utime(directory, ns=(past, past))
        result = log.append(batch(b"mine"))
        assert result.base_offset == start + 1
        fresh = PartitionLog(store.partition_dir(TOPIC, 0), TOPIC, 0, TopicConfig(), read_only=True)
        try:
            stored = fresh.segments[-1].txn_index.stored_entries()  # what the file holds
            assert [AbortedTxn(*entry[1:]) for entry in stored] == expected
            assert fresh.aborted_transactions(0, fresh.log_end_offset) == expected
        finally:
            fresh.close()
        assert log.aborted_transactions(0, log.log_end_offset) == expected
    finally:
        store.close()


def writer_with_an_abort_in_its_segment(store: Store, store_path: str) -> PartitionLog:
    """`writer_with_quiet_directory`, then an abort of its own (the active segment has a `.txnindex`: the
    tail is never quiet), then writes under holds on a directory whose key vouches again."""
    log = writer_with_quiet_directory(store)
    with log.exclusive():
        log.append(batch(b"aborted", pid=OWN_PID, txn=True))
        log.append_marker(ControlType.ABORT, OWN_PID, 0)
    past = time.time_ns() - 5_000_000_000
    os.utime(store.partition_dir(TOPIC, 0), ns=(past, past))
    for value in (b"d", b"e"):
        with log.exclusive():
            log.append(batch(value))
    return log


def test_a_held_writer_with_an_abort_in_its_segment_looks_for_no_file_by_path(store_path, monkeypatch):
    """With a `.txnindex` in the active segment the writer's catch-up still checks it for a dead writer's
    entry, but through its open descriptor (one look per hold, `EntryFile.trust_while`), and the next
    segment is not looked for while the directory vouches that the last walk found none (`_no_next_key`)."""
    store = Store.open(store_path)
    try:
        log = writer_with_an_abort_in_its_segment(store, store_path)
        for i in range(3):
            with tail_looks(monkeypatch) as seen, log.exclusive():
                log.append(batch(b"x%d" % i))
            assert seen == []
        assert log.aborted_transactions(0, log.log_end_offset) == [AbortedTxn(OWN_PID, 3, 4, 5)]
    finally:
        store.close()


def test_another_process_roll_is_seen_by_a_held_writer_with_an_abort_in_its_segment(store_path):
    store = Store.open(store_path)
    try:
        log = writer_with_an_abort_in_its_segment(store, store_path)
        in_other_process(
            store_path, TOPIC, f"log.append({batch(b'other')!r})\nlog.roll()\nlog.append({batch(b'rolled')!r})"
        )
        with log.exclusive():
            result = log.append(batch(b"mine"))
        assert result.base_offset == 9
        bases, values = fresh_bases_and_values(store)
        assert [s.base_offset for s in log.segments] == bases == [0, 8]
        assert values[-3:] == [(7, b"other"), (8, b"rolled"), (9, b"mine")]
    finally:
        store.close()


def test_a_dead_writer_txnindex_entry_is_dropped_by_the_next_hold(store_path):
    """The writer's `.txnindex` read under one hold is looked at again under the next: another process's
    entry, left when it died before its ABORT marker, only grew the file (the directory did not change)."""
    store = Store.open(store_path)
    try:
        log = writer_with_an_abort_in_its_segment(store, store_path)
        directory = store.partition_dir(TOPIC, 0)
        start = log.log_end_offset
        in_other_process(
            store_path,
            TOPIC,
            f"""
            first = log.append({batch(b"txn", pid=PID, txn=True)!r}).base_offset
            active = log.segments[-1]
            active.txn_index.append(AbortedTxn({PID}, first, log.log_end_offset, first))
            active.txn_index.flush()
            os._exit(0)
            """,
        )
        past = time.time_ns() - 5_000_000_000
        os.utime(directory, ns=(past, past))  # only the entry is new (the other process's open may write a snapshot)
        with log.exclusive():
            result = log.append(batch(b"mine"))
        assert result.base_offset == start + 1
        expected = [AbortedTxn(OWN_PID, 3, 4, 5)]
        fresh = PartitionLog(store.partition_dir(TOPIC, 0), TOPIC, 0, TopicConfig(), read_only=True)
        try:
            assert [AbortedTxn(*entry[1:]) for entry in fresh.segments[-1].txn_index.stored_entries()] == expected
        finally:
            fresh.close()
        assert log.aborted_transactions(0, log.log_end_offset) == expected
    finally:
        store.close()
