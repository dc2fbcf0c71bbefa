"""storage.partition_log.WriterHold / sync_all and storage.durable.each_in_parallel: a commit's syncs (issue 26).

A hold takes several partitions' writer locks on the calling thread, catches each view up, and
runs only the bare fdatasyncs on other threads. What must still hold: another writer's appends and
rolls are seen (a second Store on the same directory takes its own flock, as another process does),
the HW is published only after the fdatasync, a failed fdatasync fails its partition alone and is
raised after every sync ended, two holds over the same partitions in opposite orders do not
deadlock, a hold pins no more descriptors than the cache allows, and the fdatasyncs never wait
behind `in_parallel`'s calls (which may be waiting for the very locks the hold has).
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import threading
from collections.abc import Callable, Iterator

import pytest

from storage import Store, durable
from storage.descriptor_cache import CACHE, set_limit
from storage.durable import PARALLEL_SYNCS, each_in_parallel, in_parallel
from storage.errors import KafkaStorageError
from storage.high_watermark import HighWatermarkFile
from storage.lock import writer_lock_if_free
from storage.partition_log import LOCK_FILE, PartitionLog, WriterHold, sync_all
from storage.records import build_batch

TOPIC = "t"
EVERY = -1  # the `fdatasyncs` hook's partition for a syncfs, which syncs every file of the filesystem


def _batch(value: bytes) -> bytes:
    return build_batch([(None, value, None, None)])


def _hw_on_disk(log: PartitionLog) -> int | None:
    """The HW a process opening the partition now would read."""
    return HighWatermarkFile(log.directory, writable=False).read()


def _partition_of(fd: int) -> int | None:
    path = os.readlink(f"/proc/self/fd/{fd}")
    directory = os.path.basename(os.path.dirname(path))
    if directory.startswith(TOPIC + "-"):
        return int(directory.rsplit("-", 1)[1])
    return None


@pytest.fixture
def fdatasyncs(monkeypatch) -> Iterator[tuple[list[str], list[Callable[[int | None], None]]]]:
    """The file each os.fdatasync hits (its path); `hook[0](partition)` runs first, in the syncing thread.
    A syncfs (storage.durable.syncfs) runs `hook[0](EVERY)` first: it stands for every file's sync."""
    hits: list[str] = []
    hook: list[Callable[[int | None], None]] = [lambda partition: None]
    real = os.fdatasync
    real_syncfs = durable.syncfs

    def fdatasync(fd: int) -> None:
        hits.append(os.readlink(f"/proc/self/fd/{fd}"))
        hook[0](_partition_of(fd))
        real(fd)

    def syncfs(fd: int) -> None:
        hook[0](EVERY)
        real_syncfs(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(durable, "syncfs", syncfs)
    yield hits, hook


@pytest.fixture
def two_stores(store_path) -> Iterator[tuple[Store, Store]]:
    """Two Stores on one directory: each view takes the writer lock through its own open file, as two processes do."""
    first = Store.open(store_path)
    first.create_topic(TOPIC, 4)
    second = Store.open(store_path)
    yield first, second
    second.close()
    first.close()


# ---- each_in_parallel ------------------------------------------------------------------------------------


def test_each_call_runs_and_its_error_comes_back_in_its_place() -> None:
    ran: list[int] = []

    def call(n: int) -> Callable[[], None]:
        def run() -> None:
            ran.append(n)
            if n % 3 == 0:
                raise OSError(errno.EIO, f"call {n}")

        return run

    outcomes = each_in_parallel([call(n) for n in range(40)])
    assert sorted(ran) == list(range(40))
    assert [n for n, error in enumerate(outcomes) if error is not None] == [n for n in range(40) if n % 3 == 0]
    assert all(isinstance(e, OSError) and str(n) in str(e) for n, e in enumerate(outcomes) if e is not None)


def test_the_calls_overlap() -> None:
    """Every call waits for all the others at a barrier: calls run one after another would break it."""
    barrier = threading.Barrier(PARALLEL_SYNCS, timeout=60)
    assert each_in_parallel([barrier.wait for _ in range(PARALLEL_SYNCS)]) == [None] * PARALLEL_SYNCS


def test_the_calls_do_not_wait_behind_in_parallels_calls() -> None:
    """in_parallel's threads may all be waiting for locks the caller of each_in_parallel holds (an acks=all
    round waiting for the partitions a commit holds): each_in_parallel's calls must run all the same."""
    release = threading.Event()
    waiting = threading.Semaphore(0)

    def wait_for_release() -> None:
        waiting.release()
        release.wait(120)

    blocked = threading.Thread(target=in_parallel, args=([wait_for_release] * (PARALLEL_SYNCS * 2),))
    blocked.start()
    try:
        for _ in range(PARALLEL_SYNCS):
            assert waiting.acquire(timeout=60)  # every one of in_parallel's threads is taken
        barrier = threading.Barrier(3, timeout=60)
        assert each_in_parallel([barrier.wait, barrier.wait, barrier.wait]) == [None, None, None]
    finally:
        release.set()
        blocked.join()


def test_a_forked_child_runs_the_calls_on_its_own_threads() -> None:
    each_in_parallel([lambda: 1, lambda: 2])  # the parent's pool exists before the fork
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit code
        signal.alarm(20)  # a child waiting on the parent's (absent) threads dies of SIGALRM
        barrier = threading.Barrier(2, timeout=10)
        os._exit(0 if each_in_parallel([barrier.wait, barrier.wait]) == [None, None] else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


# ---- sync_all / WriterHold ---------------------------------------------------------------------------------


def test_what_another_writer_appended_is_synced_and_under_the_hw(two_stores, fdatasyncs) -> None:
    """The hold catches each view up before it asks what is unsynced: another writer's unsynced append is
    made durable and the HW covers it, though this view never saw it before the sync."""
    first, second = two_stores
    logs = [first.partition(TOPIC, p) for p in range(4)]
    for p in range(4):
        logs[p].append(_batch(b"mine"))  # synced: this view's HW is at its end
    for p in (1, 3):
        second.partition(TOPIC, p).append(_batch(b"theirs"), sync=False)
    hits, _ = fdatasyncs
    hits.clear()
    sync_all(logs)
    assert sorted(os.path.basename(os.path.dirname(h)) for h in hits) == ["t-1", "t-3"]
    assert [_hw_on_disk(log) for log in logs] == [1, 2, 1, 2]
    assert [log.high_watermark for log in logs] == [1, 2, 1, 2]


def test_a_segment_another_writer_rolled_to_is_the_one_synced(two_stores, fdatasyncs) -> None:
    first, second = two_stores
    mine = first.partition(TOPIC, 0)
    mine.append(_batch(b"a"))
    theirs = second.partition(TOPIC, 0)
    theirs.roll()
    theirs.append(_batch(b"b"), sync=False)
    hits, _ = fdatasyncs
    hits.clear()
    sync_all([mine])
    assert [os.path.basename(h) for h in hits] == ["00000000000000000001.log"]
    assert _hw_on_disk(mine) == 2


def test_a_failed_fdatasync_fails_its_partition_alone_after_every_sync_ended(
    two_stores, fdatasyncs, sync_method
) -> None:
    """With syncfs, the lost page fails the syncfs too (the kernel reports it through the superblock), and
    the per-file fdatasyncs that follow find the partition whose data it was."""
    first, _ = two_stores
    logs = [first.partition(TOPIC, p) for p in range(4)]
    for log in logs:
        log.append(_batch(b"v"), sync=False)
    hits, hook = fdatasyncs

    def fail_partition_2(partition: int | None) -> None:
        if partition in (2, EVERY):
            raise OSError(errno.EIO, "I/O error")

    hook[0] = fail_partition_2
    hits.clear()
    with pytest.raises(KafkaStorageError, match="I/O error"):
        sync_all(logs)
    assert len(hits) == 4  # the failure did not stop the other syncs
    assert [_hw_on_disk(log) for log in logs] == [1, 1, 0, 1]  # no HW published past an fdatasync that failed
    assert [log.failed for log in logs] == [False, False, True, False]  # never retried (fsyncgate)


def test_two_holds_over_the_same_partitions_in_opposite_orders_do_not_deadlock(two_stores, monkeypatch) -> None:
    """Each hold, once it has a first lock, waits (a bounded while) for the other to have one too. Were
    the locks taken in the order given, each would hold one and wait for the other's for ever."""
    first, second = two_stores
    orders = {
        "first": [first.partition(TOPIC, p) for p in range(4)],
        "second": [second.partition(TOPIC, p) for p in reversed(range(4))],
    }
    has_a_lock = {name: threading.Event() for name in orders}
    real_catch_up = PartitionLog._catch_up

    def catch_up(self: PartitionLog, *, repair: bool) -> None:
        real_catch_up(self, repair=repair)
        name = threading.current_thread().name
        if name in has_a_lock and not has_a_lock[name].is_set():
            has_a_lock[name].set()
            other = "second" if name == "first" else "first"
            has_a_lock[other].wait(1.0)

    monkeypatch.setattr(PartitionLog, "_catch_up", catch_up)
    for logs in orders.values():
        for log in logs:
            log.append(_batch(b"v"), sync=False)
    threads = [threading.Thread(target=sync_all, args=(logs,), name=name, daemon=True) for name, logs in orders.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads), "the two holds deadlocked"
    assert [_hw_on_disk(log) for log in orders["first"]] == [2, 2, 2, 2]


def test_a_hold_takes_no_more_partitions_at_once_than_its_window(store_path, fdatasyncs) -> None:
    """Each held lock and each fdatasync pins a descriptor: with a cache limit of 4 a hold has 2 partitions."""
    store = Store.open(store_path)
    store.create_topic(TOPIC, 5)
    logs = [store.partition(TOPIC, p) for p in range(5)]
    for log in logs:
        log.append(_batch(b"v"), sync=False)
    held_at_each_sync: list[int] = []
    probing = threading.Lock()  # the syncs run at once: one thread's probe of a lock must not count as held

    def count_held(partition: int | None) -> None:
        held = 0
        with probing:
            for log in logs:
                with writer_lock_if_free(os.path.join(log.directory, LOCK_FILE)) as free:
                    held += not free
        held_at_each_sync.append(held)

    _, hook = fdatasyncs
    hook[0] = count_held
    limit = CACHE.limit
    set_limit(4)
    try:
        assert WriterHold.window() == 2
        sync_all(logs)
    finally:
        set_limit(limit)
    assert len(held_at_each_sync) == 5 and max(held_at_each_sync) <= 2
    assert [_hw_on_disk(log) for log in logs] == [1] * 5
    store.close()


def test_markers_appended_under_a_hold_are_synced_with_the_hw_after_them(two_stores) -> None:
    """A marker appended to a held partition (re-entering its lock) is in the sync that ends the hold."""
    from storage.records import ControlType

    first, second = two_stores
    logs = [first.partition(TOPIC, p) for p in range(2)]
    second.partition(TOPIC, 1).append(_batch(b"theirs"), sync=False)  # before the hold: the hold sees it
    with WriterHold(logs) as hold:
        for log in hold.take():
            assert hold.refusal(log) is None
        for log in logs:
            log.append_marker(ControlType.ABORT, producer_id=7, producer_epoch=0, sync=False)
            hold.sync(log)
        assert [_hw_on_disk(log) for log in logs] == [0, 0]  # nothing published before the fdatasyncs
    assert [_hw_on_disk(log) for log in logs] == [1, 2]
    assert [log.log_end_offset for log in logs] == [1, 2]


# ---- a marker appended under a hold skips its own catch-up -------------------------------------------------


def _lock_waited_for(lock_path: str) -> bool:
    """Whether some descriptor is blocked in flock on `lock_path` (a '->' line of /proc/locks for its inode)."""
    inode = os.stat(lock_path).st_ino
    with open("/proc/locks") as locks:
        return any("->" in line and line.split()[6].endswith(f":{inode}") for line in locks)


def test_a_writer_waiting_for_a_held_partition_appends_after_the_marker_made_under_the_hold(two_stores) -> None:
    """Under a hold no other writer can append (it waits for the lock), which is why a marker appended
    there skips its catch-up; the waiting writer's batch then lands after the marker."""
    from storage.records import ControlType

    first, second = two_stores
    mine, theirs = first.partition(TOPIC, 0), second.partition(TOPIC, 0)
    lock_path = os.path.join(mine.directory, LOCK_FILE)
    theirs.append(_batch(b"before"))  # the hold's catch-up takes this up
    with WriterHold([mine]) as hold:
        for log in hold.take():
            assert hold.refusal(log) is None
        writer = threading.Thread(target=theirs.append, args=(_batch(b"after"),), daemon=True)
        writer.start()
        for _ in range(6000):
            if _lock_waited_for(lock_path) or not writer.is_alive():
                break
            threading.Event().wait(0.01)
        assert writer.is_alive(), "the other writer appended while the partition was held"
        mine.append_marker(ControlType.ABORT, producer_id=7, producer_epoch=0, sync=False)
        hold.sync(mine)
    writer.join(120)
    batches = mine.read(0, 1 << 20)
    assert [(b.base_offset, b.is_control) for b in batches] == [(0, False), (1, True), (2, False)]


def test_a_marker_appended_after_a_hold_ended_catches_up_again(two_stores) -> None:
    from storage.records import ControlType

    first, second = two_stores
    mine = first.partition(TOPIC, 0)
    with WriterHold([mine]) as hold:
        for log in hold.take():
            hold.sync(log)
    second.partition(TOPIC, 0).append(_batch(b"theirs"))  # after the hold: the view must catch up on it
    mine.append_marker(ControlType.ABORT, producer_id=7, producer_epoch=0)
    assert [(b.base_offset, b.is_control) for b in mine.read(0, 1 << 20)] == [(0, False), (1, True)]


def test_a_section_whose_catch_up_fails_lets_the_lock_go_and_a_hold_goes_on(two_stores, monkeypatch) -> None:
    """`exclusive()` takes the lock, then catches up: when the catch-up fails, the file lock and the view's
    mutex are let go at once (another view, as another process, and another thread can write), and a hold
    over several partitions holds the others and refuses that one with the error."""
    first, second = two_stores
    logs = [first.partition(TOPIC, p) for p in range(3)]
    real_catch_up = PartitionLog._catch_up

    def catch_up(self: PartitionLog, *, repair: bool) -> None:
        if self is logs[1] and repair:
            raise KafkaStorageError("the disk said no")
        real_catch_up(self, repair=repair)

    monkeypatch.setattr(PartitionLog, "_catch_up", catch_up)
    with pytest.raises(KafkaStorageError, match="the disk said no"), logs[1].exclusive():
        pass
    with writer_lock_if_free(os.path.join(logs[1].directory, LOCK_FILE)) as free:
        assert free
    with WriterHold(logs) as hold:
        taken = list(hold.take())
        assert [type(hold.refusal(log)) for log in taken] == [type(None), KafkaStorageError, type(None)]
        with writer_lock_if_free(os.path.join(logs[1].directory, LOCK_FILE)) as free:
            assert free
        with writer_lock_if_free(os.path.join(logs[0].directory, LOCK_FILE)) as free:
            assert not free
    monkeypatch.setattr(PartitionLog, "_catch_up", real_catch_up)
    writer = threading.Thread(target=logs[1].append, args=(_batch(b"later"),), daemon=True)
    writer.start()
    writer.join(30)
    assert not writer.is_alive(), "the view's mutex was kept by the failed section"
    assert second.partition(TOPIC, 1).append(_batch(b"theirs")).base_offset == 1
    assert [_hw_on_disk(log) for log in logs] == [0, 2, 0]


# ---- one syncfs for a wide round (storage.durable.sync_round) ------------------------------------------------


class _SyncfsCalls(list):
    """What `syncfs_calls` saw, and what it is told to do."""

    logs: list[PartitionLog] = []
    fail = False
    dirty: int | None = 0


@pytest.fixture
def syncfs_calls(monkeypatch) -> Iterator[_SyncfsCalls]:
    """Each storage.durable.syncfs call, as the HWs on disk of the `synced` logs when it began (set
    `syncfs_calls.logs`); `syncfs_calls.fail` makes it raise EIO. The `auto` method, with nothing else
    dirty (`durable.dirty_bytes`, set `syncfs_calls.dirty` to change that), where syncfs works."""
    if not durable.syncfs_usable():
        pytest.skip("syncfs(2) reports no writeback error here")
    calls = _SyncfsCalls()
    monkeypatch.setenv(durable.SYNC_METHOD_ENV, "auto")
    monkeypatch.setattr(durable, "dirty_bytes", lambda: calls.dirty)
    real = durable.syncfs

    def syncfs(fd: int) -> None:
        calls.append([_hw_on_disk(log) for log in calls.logs])
        if calls.fail:
            raise OSError(errno.EIO, "I/O error")
        real(fd)

    monkeypatch.setattr(durable, "syncfs", syncfs)
    yield calls


def _unsynced(store: Store, partitions: int, syncfs_calls: _SyncfsCalls | None = None) -> list[PartitionLog]:
    """`partitions` partitions of a new topic, each with an appended batch not yet synced; the syncfs the
    topic's creation may make (its one sync round) is not counted in `syncfs_calls`."""
    store.create_topic(TOPIC, partitions)
    if syncfs_calls is not None:
        syncfs_calls.clear()
    logs = [store.partition(TOPIC, p) for p in range(partitions)]
    for log in logs:
        log.append(_batch(b"v"), sync=False)
    return logs


def test_a_wide_round_is_one_syncfs_and_every_hw_follows_it(store, fdatasyncs, syncfs_calls) -> None:
    logs = syncfs_calls.logs = _unsynced(store, durable.SYNCFS_MIN_FILES, syncfs_calls)
    hits, _ = fdatasyncs
    hits.clear()
    sync_all(logs)
    assert syncfs_calls == [[0] * len(logs)]  # one syncfs, before any HW moved
    assert not [h for h in hits if f"/{TOPIC}-" in h]  # and no data partition's fdatasync
    assert [_hw_on_disk(log) for log in logs] == [1] * len(logs)


def _synced_file_by_file(logs: list[PartitionLog], fdatasyncs, syncfs_calls: _SyncfsCalls) -> None:
    """`sync_all(logs)`, checked to make one fdatasync per data partition and no syncfs."""
    hits, _ = fdatasyncs
    hits.clear()
    sync_all(logs)
    assert syncfs_calls == []
    assert len([h for h in hits if f"/{TOPIC}-" in h]) == len(logs)
    assert all(_hw_on_disk(log) == log.log_end_offset for log in logs)


def test_a_round_narrower_than_the_threshold_is_fdatasynced(store, fdatasyncs, syncfs_calls) -> None:
    _synced_file_by_file(_unsynced(store, durable.SYNCFS_MIN_FILES - 1, syncfs_calls), fdatasyncs, syncfs_calls)


def test_the_environment_turns_syncfs_off(store, fdatasyncs, syncfs_calls, monkeypatch) -> None:
    monkeypatch.setenv(durable.SYNC_METHOD_ENV, "fdatasync")
    _synced_file_by_file(_unsynced(store, durable.SYNCFS_MIN_FILES, syncfs_calls), fdatasyncs, syncfs_calls)


def test_a_failed_syncfs_whose_files_all_sync_fails_nothing(store, fdatasyncs, syncfs_calls) -> None:
    """A syncfs reports a writeback error of any file of the filesystem, another program's too: the
    per-file fdatasyncs then decide, and here every partition's succeeds."""
    logs = _unsynced(store, durable.SYNCFS_MIN_FILES, syncfs_calls)
    syncfs_calls.fail = True
    hits, _ = fdatasyncs
    hits.clear()
    sync_all(logs)
    assert len(syncfs_calls) == 1
    assert len([h for h in hits if f"/{TOPIC}-" in h]) == len(logs)
    assert [_hw_on_disk(log) for log in logs] == [1] * len(logs)
    assert not any(log.failed for log in logs)


def test_partitions_on_two_filesystems_are_fdatasynced(store, tmp_path, fdatasyncs, syncfs_calls) -> None:
    """One syncfs covers one filesystem: a round over partitions of a store on another one (tmpfs) is not
    made durable by a syncfs of the first."""
    if not os.path.isdir("/dev/shm") or os.stat("/dev/shm").st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second filesystem at /dev/shm")
    elsewhere_path = os.path.join("/dev/shm", f"txlog-test-{os.getpid()}-{id(tmp_path)}")
    elsewhere = Store.open(elsewhere_path)
    try:
        logs = _unsynced(store, durable.SYNCFS_MIN_FILES, syncfs_calls) + _unsynced(elsewhere, 1, syncfs_calls)
        _synced_file_by_file(logs, fdatasyncs, syncfs_calls)
    finally:
        elsewhere.close()
        shutil.rmtree(elsewhere_path, ignore_errors=True)


@pytest.mark.parametrize("dirty", [None, durable.SYNCFS_MIN_FILES * durable.SYNCFS_DIRTY_PER_FILE + 1])
def test_auto_fdatasyncs_while_much_is_dirty_or_it_cannot_tell(store, fdatasyncs, syncfs_calls, dirty) -> None:
    """A syncfs would wait for other programs' dirty pages too: past the bound, or with /proc/meminfo
    unreadable, `auto` makes one fdatasync per file; `syncfs` makes the one call all the same."""
    syncfs_calls.dirty = dirty
    logs = _unsynced(store, durable.SYNCFS_MIN_FILES, syncfs_calls)
    _synced_file_by_file(logs, fdatasyncs, syncfs_calls)
    for log in logs:
        log.append(_batch(b"w"), sync=False)
    os.environ[durable.SYNC_METHOD_ENV] = "syncfs"  # restored by the fixture's monkeypatch
    sync_all(logs)
    assert len(syncfs_calls) == 1
    assert [_hw_on_disk(log) for log in logs] == [2] * len(logs)


def test_dirty_bytes_reads_the_kernels_count() -> None:
    if not os.path.exists("/proc/meminfo"):
        pytest.skip("no /proc/meminfo")
    pending = durable.dirty_bytes()
    assert pending is not None and pending >= 0 and pending % 1024 == 0


def test_an_unknown_sync_method_is_refused(store, monkeypatch) -> None:
    logs = _unsynced(store, durable.SYNCFS_MIN_FILES)
    monkeypatch.setenv(durable.SYNC_METHOD_ENV, "sometimes")
    with pytest.raises(KafkaStorageError, match="TXLOG_SYNC_METHOD='sometimes' is not one of auto, syncfs, fdatasync"):
        sync_all(logs)


# ---- a staged abort entry whose marker was never written -----------------------------------------------------


def test_a_failed_clean_up_of_an_abort_entry_with_no_marker_is_no_sync_calls_failure_and_the_exit_raises_it(
    store, monkeypatch
) -> None:
    """An abort's `.txnindex` entry staged by `index_aborts` whose marker never came is taken out when the
    round runs; when that fails, the failure belongs to no `sync` call: `settle_each` reports each call's
    own outcome (here none failed, although the hold synced its one partition twice, more calls than it
    has partitions), and the hold's exit raises the clean-up's failure rather than dropping it."""
    from storage.transaction_index import TransactionIndex

    store.create_topic(TOPIC, 1)
    log = store.partition(TOPIC, 0)
    txn = build_batch(
        [(None, b"open", None, None)], producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True
    )
    log.append(txn)
    full = OSError(errno.ENOSPC, "No space left on device")

    def refuse(self: TransactionIndex, offset: int) -> None:
        raise full

    with pytest.raises(OSError) as raised, WriterHold([log]) as hold:
        for taken in hold.take():
            assert hold.refusal(taken) is None
        hold.index_aborts(7, 0, 0, 1000)  # the entry is staged and durable; no marker follows it
        hold.sync(log)
        hold.sync(log)
        monkeypatch.setattr(TransactionIndex, "truncate_to", refuse)
        assert hold.settle_each() == [None, None]
    assert raised.value is full
