"""A partition's in-memory view of its segments (Kafka's LogSegments): kept up to date, listed rarely.

A view lists the partition directory only when the directory changed (its mtime moved) and
otherwise trusts its segment list: so a reader must still see another process's roll,
retention, DeleteRecords, cleaner's swap, and a topic deleted and made again, without being
reopened; a change made in the same mtime tick as the view's last look ("racy git") must not
be missed; and a poll or a roll on an unchanged directory lists nothing. read_committed's
abort lookup opens the `.txnindex` only of the segments that may hold an abort it needs, and
answers exactly what a scan of every index would.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import storage.partition_log as partition_log
from storage import Store
from storage.config import TopicConfig
from storage.errors import KafkaStorageError
from storage.partition_log import PartitionLog
from storage.records import ControlType, build_batch
from txlog.fetch import IsolationLevel, fetch

ROOT = Path(__file__).resolve().parents[2]


# ---- helpers ------------------------------------------------------------------------------------------


def batch(
    values: list[bytes], *, keys: list[bytes] | None = None, pid: int = -1, seq: int = 0, txn: bool = False
) -> bytes:
    ts = int(time.time() * 1000)
    records = [(keys[i] if keys else None, v, (), ts) for i, v in enumerate(values)]
    if pid < 0:
        return build_batch(records)
    return build_batch(records, producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=txn)


def values(log: PartitionLog, start: int | None = None) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every data record from `start` (default the log start), read through `log`."""
    out = []
    position = log.log_start_offset if start is None else start
    end = log.log_end_offset
    while position < end:
        batches = log.read(position)
        if not batches:
            break
        for b in batches:
            if not b.is_control:
                out.extend((r.offset, r.value) for r in b.records() if r.offset >= position)
        position = batches[-1].next_offset
    return out


def in_other_process(root: str, code: str) -> None:
    """Run `code` in a fresh Python process with `store` open on `root` (closed afterwards)."""
    program = "from storage import Store\nstore = Store.open(ROOT)\ntry:\n" + textwrap.indent(
        textwrap.dedent(code), "    "
    )
    program += "\nfinally:\n    store.close()\n"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    subprocess.run([sys.executable, "-c", program.replace("ROOT", repr(root))], check=True, env=env)


def fresh_view(store: Store, topic: str) -> PartitionLog:
    """A view opened now, read-only: what the files say."""
    return PartitionLog(store.partition_dir(topic, 0), topic, 0, TopicConfig(), read_only=True)


def assert_same_as_fresh(view: PartitionLog, store: Store, topic: str) -> None:
    fresh = fresh_view(store, topic)
    try:
        assert view.bounds() == fresh.bounds()
        assert [s.base_offset for s in view.segments] == [s.base_offset for s in fresh.segments]
        assert values(view) == values(fresh)
    finally:
        fresh.close()


def set_directory_mtime(directory: str, mtime_ns: int) -> None:
    os.utime(directory, ns=(mtime_ns, mtime_ns))


@contextmanager
def listings(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Record every directory listing (os.listdir, os.scandir) made inside the block."""
    seen: list[str] = []
    real_listdir, real_scandir = os.listdir, os.scandir

    def listdir(path="."):
        seen.append(str(path))
        return real_listdir(path)

    def scandir(path="."):
        seen.append(str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "listdir", listdir)
    monkeypatch.setattr(os, "scandir", scandir)
    try:
        yield seen
    finally:
        monkeypatch.setattr(os, "listdir", real_listdir)
        monkeypatch.setattr(os, "scandir", real_scandir)


def fill(log: PartitionLog, segments: int, *, keys: bool = False) -> None:
    """Append a batch and roll until `log` has `segments` segments."""
    for i in range(segments * 2):
        if len(log.segments) >= segments:
            return
        key = [b"k%d" % (i % 3)] if keys else None
        log.append(batch([b"v%d" % i], keys=key))
        log.roll()
    raise AssertionError(f"{log} did not reach {segments} segments")


# ---- another process's changes are seen without reopening ---------------------------------------------

# Never cleaned after a roll (the ratio cannot be passed): only the other process's compact() cleans.
COMPACTED = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 1.0}

CHANGES = {
    "roll": ("t", {}, "log = store.partition('t', 0)\nlog.append(BATCH)\nlog.roll()\nlog.append(BATCH)"),
    "retention": ("t", {}, "store.alter_topic_config('t', {'retention.bytes': 1})\nstore.enforce_retention()"),
    "delete_records": ("t", {}, "store.partition('t', 0).delete_records(3)"),
    "compaction": ("c", COMPACTED, "store.partition('c', 0).compact(force=True)"),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_view_sees_another_process_change_without_reopening(store_path, change):
    topic, config, code = CHANGES[change]
    store = Store.open(store_path)
    try:
        store.create_topic(topic, 1, config)
        view = store.partition(topic, 0)
        fill(view, 6, keys=True)
        view.bounds()  # the view has looked at the directory
        before = values(view)
        in_other_process(store_path, code.replace("BATCH", repr(batch([b"other"], keys=[b"k9"]))))
        assert_same_as_fresh(view, store, topic)
        assert values(view) != before
    finally:
        store.close()


def test_a_view_keeps_to_its_own_directory_when_the_topic_is_made_again(store_path):
    """The topic deleted and made again by another process: the old view never mixes in the new
    directory's segments, and refuses writes (docs/reliability-scenarios.md scenario 71)."""
    store = Store.open(store_path)
    try:
        store.create_topic("t", 1)
        view = store.partition("t", 0)
        fill(view, 3)
        old = values(view)
        in_other_process(
            store_path,
            f"""
            store.delete_topic('t')
            store.create_topic('t', 1)
            log = store.partition('t', 0)
            for _ in range(5):
                log.append({batch([b"new"])!r})
                log.roll()
            """,
        )
        assert values(view, 0) == old
        assert all(value != b"new" for _, value in values(view, 0))
        with pytest.raises(KafkaStorageError):
            view.append(batch([b"late"]))
    finally:
        store.close()


def test_a_view_keeps_to_its_own_directory_when_the_topic_made_again_has_its_inode_number(store_path, tmp_path):
    """ext4 gives a freed inode number to the next directory made too, once nothing holds the old one:
    a view whose descriptors were all closed by the descriptor bound (storage/descriptor_cache.py) took
    the topic deleted and made again under its directory's number for its own directory, and moved into
    it (docs/reliability-scenarios.md scenario 71, and 88 for the reuse)."""
    from storage.descriptor_cache import CACHE, CachedFile

    saved = CACHE.limit
    with Store.open(store_path) as store, Store.open(store_path) as other:
        store.create_topic("t", 1)
        view = store.partition("t", 0)
        fill(view, 3)
        assert [value for _, value in values(view)] == [b"v0", b"v1"]
        directory = view.directory
        inode = os.stat(directory).st_ino
        try:
            CACHE.set_limit(1)  # every descriptor of the view closed: nothing pins the directory
            fillers = [CachedFile(str(tmp_path / f"filler{i}"), os.O_RDWR | os.O_CREAT) for i in range(3)]
            other.delete_topic("t")
            for i in range(64):  # directories kept aside until the next one made gets the freed number
                os.mkdir(directory)
                if os.stat(directory).st_ino == inode:
                    os.rmdir(directory)
                    break
                os.rename(directory, str(tmp_path / f"aside{i}"))
            other.create_topic("t", 1)
            if os.stat(directory).st_ino != inode:
                pytest.skip("this file system gave the freed inode number to no new directory")
            log = other.partition("t", 0)
            for _ in range(5):
                log.append(batch([b"new"]))
                log.roll()
            with pytest.raises(KafkaStorageError, match="deleted while open"):
                values(view, 0)  # its files are gone with its directory: never the new topic's records
            with pytest.raises(KafkaStorageError):
                view.append(batch([b"late"]))
        finally:
            CACHE.set_limit(saved)
            for filler in fillers:
                filler.close()


# ---- the same-tick race ----------------------------------------------------------------------------------


def test_a_change_in_the_same_mtime_tick_as_the_last_look_is_not_missed(store_path):
    """Two changes in one tick leave the directory's mtime as the view saw it: forced here by putting
    the mtime back where the view's look found it. That look came before the tick was over (the
    mtime is in the future of the stamping clock), so the view may not trust its key."""
    store = Store.open(store_path)
    try:
        store.create_topic("c", 1, COMPACTED)
        view = store.partition("c", 0)
        fill(view, 6, keys=True)
        directory = store.partition_dir("c", 0)
        seen = time.time_ns() + 60_000_000_000  # not yet past by the clock: a look cannot vouch for it
        set_directory_mtime(directory, seen)
        view.bounds()  # the look takes the key (seen, inode)
        before = values(view)
        in_other_process(store_path, "store.partition('c', 0).compact(force=True)")  # a cleaner's swap
        set_directory_mtime(directory, seen)  # the key is as the view left it
        assert os.stat(directory).st_mtime_ns == seen
        assert_same_as_fresh(view, store, "c")
        assert values(view) != before
    finally:
        store.close()


def test_a_key_a_later_look_vouched_for_is_trusted_and_a_read_lists_nothing(store_path, monkeypatch):
    store = Store.open(store_path)
    try:
        store.create_topic("t", 1)
        log = store.partition("t", 0)
        fill(log, 20)
        directory = store.partition_dir("t", 0)
        set_directory_mtime(directory, time.time_ns() - 10_000_000_000)  # long past
        log.bounds()
        log.bounds()  # the first look saw a change (the mtime moved), this one vouches for the key
        with listings(monkeypatch) as seen:
            for _ in range(20):
                result = fetch(log, 0, IsolationLevel.READ_COMMITTED)
                assert result.records
                log.aborted_transactions(0, log.log_end_offset)
                log.read(log.log_end_offset - 1)
        assert seen == []
    finally:
        store.close()


def test_a_writer_rolling_a_log_of_many_segments_lists_nothing(store_path, monkeypatch):
    """A roll lists neither the segments nor the snapshots: its own changes need no listing, and the
    view waits out the clock tick of its last change (ADOPT_WAIT_SEGMENTS; lowered here) instead."""
    monkeypatch.setattr(partition_log, "ADOPT_WAIT_SEGMENTS", 1, raising=False)
    store = Store.open(store_path)
    try:
        store.create_topic("t", 1)
        log = store.partition("t", 0)
        fill(log, 10)
        with listings(monkeypatch) as seen:
            for i in range(10):
                log.append(batch([b"x%d" % i]))
                log.roll()
        assert seen == []
        assert len(log.segments) == 20
        assert_same_as_fresh(log, store, "t")
    finally:
        store.close()


# ---- read_committed's abort lookup ----------------------------------------------------------------------


@contextmanager
def txnindex_opens(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Record every open or stat of a `.txnindex` file inside the block."""
    seen: list[str] = []
    real_open, real_stat = os.open, os.stat

    def opening(path, *args, **kwargs):
        if str(path).endswith(".txnindex"):
            seen.append(str(path))
        return real_open(path, *args, **kwargs)

    def stat(path, *args, **kwargs):
        if str(path).endswith(".txnindex"):
            seen.append(str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", opening)
    monkeypatch.setattr(os, "stat", stat)
    try:
        yield seen
    finally:
        monkeypatch.setattr(os, "open", real_open)
        monkeypatch.setattr(os, "stat", real_stat)


def test_the_abort_lookup_of_a_range_opens_no_later_segment_index_without_aborts(store_path, monkeypatch):
    store = Store.open(store_path)
    try:
        store.create_topic("t", 1)
        log = store.partition("t", 0)
        log.append(batch([b"a", b"b"], pid=7, txn=True))
        log.append_marker(ControlType.ABORT, 7, 0)
        log.append(batch([b"c"]))
        log.roll()
        first_end = log.log_end_offset
        fill(log, 30)
    finally:
        store.close()
    store = Store.open(store_path)  # a fresh view: the counts come from the checkpoint
    try:
        log = store.partition("t", 0)
        later = {seg.base_offset for seg in log.segments if seg.base_offset >= first_end}
        with txnindex_opens(monkeypatch) as seen:
            found = log.aborted_transactions(0, first_end)
            for start in range(first_end):
                assert log.aborted_transactions(start, first_end) == (found if start <= 2 else [])
        assert [(t.producer_id, t.first_offset, t.last_offset) for t in found] == [(7, 0, 2)]
        opened = {int(os.path.basename(path).split(".")[0]) for path in seen}
        assert not opened & later
    finally:
        store.close()


def _transactional_log(root: str, seed: int) -> int:
    """A log of interleaved transactions (committed and aborted) spanning many segment rolls; its end."""
    rng = random.Random(seed)
    store = Store.open(root)
    try:
        store.create_topic("t", 1)
        log = store.partition("t", 0)
        open_txns: list[int] = []
        sequences: dict[int, int] = {}
        next_pid = 100
        for _ in range(160):
            action = rng.random()
            if action < 0.3 or not open_txns:
                log.append(batch([b"d"], pid=next_pid, txn=True))
                open_txns.append(next_pid)
                sequences[next_pid] = 1
                next_pid += 1
            elif action < 0.4:
                log.append(batch([b"plain"]))
            elif action < 0.55:
                pid = rng.choice(open_txns)
                log.append(batch([b"more"], pid=pid, seq=sequences[pid], txn=True))
                sequences[pid] += 1
            elif action < 0.75:
                pid = open_txns.pop(rng.randrange(len(open_txns)))
                log.append_marker(rng.choice([ControlType.ABORT, ControlType.COMMIT]), pid, 0)
            else:
                log.roll()
        for pid in open_txns:
            log.append_marker(ControlType.ABORT, pid, 0)
        return log.log_end_offset
    finally:
        store.close()


@pytest.fixture(scope="module")
def transactional_store(tmp_path_factory) -> Iterator[tuple[Store, int]]:
    root = str(tmp_path_factory.mktemp("txns"))
    end = _transactional_log(root, seed=26)
    store = Store.open(root)
    yield store, end
    store.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_abort_lookup_of_any_range_is_what_a_scan_of_every_index_finds(transactional_store, data):
    store, end = transactional_store
    log = store.partition("t", 0)
    start = data.draw(st.integers(0, end - 1), label="start")
    upper = data.draw(st.integers(start + 1, end), label="upper")
    every = [txn for seg in log.segments for txn in seg.txn_index.entries()]
    expected = [txn for txn in every if txn.last_offset >= start and txn.first_offset < upper]
    assert log.aborted_transactions(start, upper) == expected


def test_the_transactional_log_spans_many_segments_with_aborts_across_them(transactional_store):
    """The property above is about something: aborts whose data and marker lie in different segments."""
    store, _ = transactional_store
    log = store.partition("t", 0)
    segments = log.segments
    assert len(segments) > 20
    spanning = [
        txn
        for i, seg in enumerate(segments)
        for txn in seg.txn_index.entries()
        if txn.first_offset < seg.base_offset and i > 0
    ]
    assert spanning


def test_a_writer_behind_a_roll_and_retention_keeps_its_producers(tmp_path: Path) -> None:
    """Another view rolls and retention deletes every segment this writer's view knew of: the writer
    follows the rolls from its last segment (as it always did) instead of reloading from the snapshot at
    the new log start, where a producer whose timestamps are past producer.id.expiration.ms is gone; so
    the producer's next sequence is taken, not refused as UNKNOWN_PRODUCER_ID."""
    root = str(tmp_path)
    writer_store, other_store = Store.open(root), None
    writer_store.create_topic("t", 1, config={"retention.ms": 1000})
    other_store = Store.open(root)
    try:
        writer, other = writer_store.partition("t", 0), other_store.partition("t", 0)
        old = int(time.time() * 1000) - 10 * 86_400_000  # past retention and producer expiry alike
        for seq in range(3):
            writer.append(
                build_batch([(b"k", b"v%d" % seq, None, old)], producer_id=7, producer_epoch=0, base_sequence=seq)
            )
        other.append(build_batch([(b"k", b"x", None, old)]))
        other.roll()  # seals offsets 0-3 and deletes them: retention.ms has passed
        assert other.log_start_offset == 4
        result = writer.append(
            build_batch([(b"k", b"next", None, old)], producer_id=7, producer_epoch=0, base_sequence=3)
        )
        assert result.base_offset == 4
        assert writer.log_start_offset == 4
    finally:
        writer_store.close()
        other_store.close()
