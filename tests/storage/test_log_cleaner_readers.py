"""Readers in other processes take no lock (docs/DESIGN.md §3): a cleaning that swaps segments under
them must never make them return a record twice, miss one, or fail on a file that changed under them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from storage import Store
from storage.descriptor_cache import CACHE, set_limit

KEYS = 12
ROUNDS = 30

READER = textwrap.dedent(
    """
    import os, sys
    from storage import Store
    from storage.descriptor_cache import set_limit

    path, done, progress, keys, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    if sys.argv[6] == "no-wait":
        # Listings never wait for a swap in flight: the `.log.swap` stand-in rule alone must carry them.
        import storage.log_loader
        storage.log_loader.SWAP_WAIT_ATTEMPTS = 0
    set_limit(3)  # descriptors are evicted and reopened by name: names a swap gave to other files
    store = Store.open(path, read_only=True)
    log = store.partition("c", 0)
    scans = 0
    while True:
        finished = os.path.exists(done)
        offset, end = log.log_start_offset, log.log_end_offset
        last, latest = -1, {}
        while offset < end:
            batches = log.read(offset, 2048)
            if not batches:
                sys.exit(f"a read at {offset} below the end {end} returned nothing")
            for batch in batches:
                for record in batch.records():
                    if record.offset <= last:
                        sys.exit(f"offset {record.offset} after {last}: a record twice")
                    last = record.offset
                    latest[record.key] = record.value
            offset = batches[-1].last_offset + 1
        for k in range(keys):
            want = f"{rounds - 1}".encode()
            if latest.get(f"k{k}".encode()) != want:
                sys.exit(f"key k{k}: latest {latest.get(f'k{k}'.encode())!r}, not {want!r}: a record missed")
        log.aborted_transactions(log.log_start_offset, end)  # the other lookups cross swaps too
        log.offset_for_timestamp(0)
        scans += 1
        with open(progress, "w") as f:
            f.write(str(scans))
        if finished:
            break
    print(scans)
    """
)


def _write_rounds(log, rounds: int) -> None:
    for r in range(rounds):
        for k in range(KEYS):
            log.append(_batch(f"k{k}", f"{r}"))
        log.roll()


def _batch(key: str, value: str) -> bytes:
    from storage.records import build_batch

    return build_batch([(key.encode(), value.encode(), None, 1_700_000_000_000)])


def _compact_topic(store):
    store.create_topic("c", 1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 1.0})
    return store.partition("c", 0)


@pytest.mark.parametrize("wait", ["wait", "no-wait"])
def test_a_reader_process_reads_right_while_cleaning_swaps_segments(store_path, tmp_path, wait):
    with Store.open(store_path) as store:
        log = _compact_topic(store)
        _write_rounds(log, ROUNDS)
        done, progress = str(tmp_path / "done"), str(tmp_path / "progress")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        reader = subprocess.Popen(
            [sys.executable, "-c", READER, store_path, done, progress, str(KEYS), str(ROUNDS), wait],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            cleanings = 0
            # Dirty data under other keys, then a cleaning in many passes (each pass swaps every group),
            # until the reader has scanned the log many times while cleanings ran (bounded by count).
            while cleanings < 400 and (cleanings < 20 or _scans(progress) < 20):
                for j in range(3):
                    log.append(_batch(f"d{j}", f"{cleanings}"))
                log.roll()
                stats = log.compact(force=True, dedupe_buffer_size=4 * 24)
                assert stats is not None and stats.passes >= 1
                cleanings += 1
                if reader.poll() is not None:
                    break
        finally:
            with open(done, "w"):
                pass
            out, err = reader.communicate(timeout=600)
        assert reader.returncode == 0, err or out
        assert int(out) > 0


def _scans(progress: str) -> int:
    try:
        with open(progress) as f:
            return int(f.read() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def test_a_view_opened_before_a_cleaning_reads_the_cleaned_log(store_path):
    """The reader's view holds the replaced segments; its descriptors are evicted, so a read by the old
    name would reopen the cleaned file in its place (storage/descriptor_cache.py refuses that)."""
    limit = CACHE.limit
    with Store.open(store_path) as store:
        log = _compact_topic(store)
        _write_rounds(log, 5)
        with Store.open(store_path, read_only=True) as other:
            view = other.partition("c", 0)
            assert len(view.read(0, 1 << 20)) == 5 * KEYS
            set_limit(1)
            try:
                log.compact(force=True)
                got = [
                    (r.offset, r.key, r.value) for b in view.read(view.log_start_offset, 1 << 20) for r in b.records()
                ]
            finally:
                set_limit(limit)
        assert got == [(4 * KEYS + k, f"k{k}".encode(), b"4") for k in range(KEYS)]


def test_a_writer_completes_a_swap_a_crashed_cleaner_left_before_it_writes(store_path, monkeypatch):
    """Another process's view, open across the crash, finds the `.swap` at its next write and completes
    it, so readers do not wait on it at every listing."""
    import storage.log_cleaner as cleaner

    with Store.open(store_path) as writer, Store.open(store_path) as crashed:
        log = _compact_topic(writer)
        _write_rounds(log, 4)
        victim = crashed.partition("c", 0)

        def crash(*args, **kwargs):
            raise RuntimeError("killed")

        monkeypatch.setattr(cleaner, "delete_replaced", crash)
        try:
            victim.compact(force=True)
        except RuntimeError:
            pass
        monkeypatch.undo()
        directory = writer.partition_dir("c", 0)
        assert any(n.endswith(".log.swap") for n in os.listdir(directory))
        log.append(_batch("k0", "4"))
        assert not any(n.endswith((".swap", ".cleaned", ".deleted")) for n in os.listdir(directory))
        got = [(r.key, r.value) for b in log.read(log.log_start_offset, 1 << 20) for r in b.records()]
        assert got == [(f"k{k}".encode(), b"3") for k in range(KEYS)] + [(b"k0", b"4")]


def test_a_view_of_a_deleted_topic_does_not_move_into_a_new_one_of_the_name(store_path):
    """The swap check reloads a view whose segment names hold other files; a topic deleted and made
    again is not that: the old view's writes are refused (scenario 71), nothing reaches the new topic."""
    from storage.errors import KafkaStorageError

    with Store.open(store_path) as old, Store.open(store_path) as other:
        stale = _compact_topic(old)
        stale.append(_batch("k0", "old"))
        other.delete_topic("c")
        _compact_topic(other).append(_batch("k0", "new"))
        try:
            stale.append(_batch("k0", "stale"))
        except KafkaStorageError:
            pass
        fresh = other.partition("c", 0)
        got = [(r.key, r.value) for b in fresh.read(0, 1 << 20) for r in b.records()]
        assert got == [(b"k0", b"new")]


def test_a_listing_reads_a_swap_afresh_when_a_new_one_has_an_old_ones_inode_and_size(store_path):
    """ext4 gives a freed inode number to the next file created, and a cleaning's segment is often the
    size of the last one (the same keys, values as long): a `.log.swap` can have the inode and size of
    one a reader read before and end at another offset. Read by the old one's end, its stand-in rule
    kept a segment the new one covers, and a reader got those records twice (scenario 73's flake). The
    test gives the second swap the first one's inode itself, as the file system would."""
    from storage.log_files import DELETED_FILE_SUFFIX, SWAP_FILE_SUFFIX, log_file
    from storage.log_loader import recover_swaps

    with Store.open(store_path) as store:
        log = _compact_topic(store)
        _write_rounds(log, 5)  # segments 0, 12, 24, 36, 48, one round of the keys each; 60 is empty
        directory = store.partition_dir("c", 0)
    first, later = log_file(directory, 0), log_file(directory, 4 * KEYS)
    swap = first + SWAP_FILE_SUFFIX

    def rewrite(path: str, data: bytes) -> None:
        with open(path, "r+b") as f:  # in place: the inode stays
            f.write(data)

    def offsets(view) -> list[int]:
        return [r.offset for b in view.read(view.log_start_offset, 1 << 20) for r in b.records()]

    with Store.open(store_path, read_only=True) as reader:
        view = reader.partition("c", 0)
        # A cleaning of [0, 48) past its point of no return: its swap stands in for the segments it replaces.
        with open(log_file(directory, 3 * KEYS), "rb") as f, open(swap, "wb") as out:
            out.write(f.read())
        os.rename(first, first + DELETED_FILE_SUFFIX)
        assert offsets(view) == list(range(3 * KEYS, 5 * KEYS))
        recover_swaps(directory)  # completed: the cleaned file is `0.log` now
        assert offsets(view) == list(range(3 * KEYS, 5 * KEYS))
        # The next cleaning, of [0, 60), in flight: its swap has the first one's inode and size.
        os.rename(first, swap)
        with open(later, "rb") as f:
            data = f.read()
        assert len(data) == os.path.getsize(swap)
        rewrite(swap, data)
        assert offsets(view) == list(range(4 * KEYS, 5 * KEYS))
