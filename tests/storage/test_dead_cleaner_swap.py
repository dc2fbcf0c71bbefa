"""A cleaner process killed after deleting the segments it replaced, before its `.log.swap` took its
name: readers that take no lock must still read every record once (docs/reliability-scenarios.md
scenario 76, rule 22). A read-only view reads the `.swap` in place of the missing segments and writes
nothing; a reader of a writable store, finding the cleaner's lock free, completes the swap; a view
opened before the crash sees the same on its next read."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import storage.log_loader
from storage import Store
from storage.file_check import Findings, PartitionFileCheck
from tests.crash.cleaner_crash_worker import AFTER, BEFORE, T0, TOPIC, dirty_log, kill_cleaner_after, read_all

SWAP = "00000000000000000000.log.swap"
GROUP_LOGS = [f"{base:020d}.log" for base in (0, 10, 20)]


def _crashed_mid_swap(path: str) -> str:
    """A real cleaner process SIGKILLed right after `delete_replaced`; returns the partition directory."""
    kill_cleaner_after(path, "delete_replaced")
    directory = os.path.join(path, f"{TOPIC}-0")
    names = os.listdir(directory)
    # The hole: the group's records are in the swap only.
    assert SWAP in names and not set(GROUP_LOGS) & set(names), names
    return directory


def _file_findings(store: Store) -> list:
    findings = Findings()
    check = PartitionFileCheck(
        findings, store.partition_dir(TOPIC, 0), TOPIC, 0, store.topic_config(TOPIC), now=T0, gaps_allowed=True
    )
    check.run()
    check.against_the_log(store.partition(TOPIC, 0))
    return list(findings)


def _first_read_from(log, offset: int) -> int:
    return log.read(offset)[0].base_offset


def test_a_read_only_view_reads_a_dead_cleaners_swap_in_place_and_writes_nothing(store_path):
    dirty_log(store_path)
    directory = _crashed_mid_swap(store_path)
    files = sorted(os.listdir(directory))
    with Store.open(store_path, read_only=True) as store:
        log = store.partition(TOPIC, 0)
        assert log.log_start_offset == 0
        assert read_all(log) == AFTER  # every record of the cleaned log, each once
        assert _first_read_from(log, 5) == 26  # a consumer at 5 goes on at the next record kept
        assert log.offset_for_timestamp(T0) == 26
        assert [s.base_offset for s in log.segments] == [0, 30]
        assert read_all(log) == AFTER  # and again, once the view has looked at the files twice
    assert sorted(os.listdir(directory)) == files  # a read-only view writes nothing


def test_a_writable_reader_completes_a_dead_cleaners_swap(store_path):
    directory = dirty_log(store_path)
    with Store.open_for_reading(store_path) as store:  # writable: this process may write the directory
        log = store.partition(TOPIC, 0)
        assert read_all(log) == BEFORE
        _crashed_mid_swap(store_path)
        assert read_all(log) == AFTER  # its next look finds the cleaner's lock free and completes the swap
        names = os.listdir(directory)
        assert [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))] == []
        assert "00000000000000000000.log" in names and GROUP_LOGS[1] not in names and GROUP_LOGS[2] not in names
        assert _file_findings(store) == []
    with Store.open(store_path) as store:  # the files are as a finished swap leaves them
        log = store.partition(TOPIC, 0)
        assert read_all(log) == AFTER
        for seg in log.segments:
            seg.full_index_check()
        assert _file_findings(store) == []


def test_a_read_only_view_opened_before_the_crash_sees_every_record_on_its_next_read(store_path):
    dirty_log(store_path)
    with Store.open(store_path, read_only=True) as store:
        log = store.partition(TOPIC, 0)
        assert read_all(log) == BEFORE
        assert _first_read_from(log, 5) == 5
        _crashed_mid_swap(store_path)
        assert log.log_start_offset == 0  # not moved past the group the cleaner deleted
        assert _first_read_from(log, 5) == 26
        assert read_all(log) == AFTER


HOLD_LOCK = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
print("HELD", flush=True)
sys.stdin.read()
"""


def test_a_writable_reader_that_finds_the_lock_held_reads_the_swap_in_place(store_path, monkeypatch):
    """The lock's holder (alive) completes the swap at its next write: the reader neither waits for it
    past its bounded wait nor takes the lock, and reads the `.swap` meanwhile; once the lock is free,
    its next look completes the swap itself."""
    directory = dirty_log(store_path)
    monkeypatch.setattr(storage.log_loader, "SWAP_WAIT_ATTEMPTS", 1)  # the wait is for a live swap's renames
    with Store.open_for_reading(store_path) as store:
        log = store.partition(TOPIC, 0)
        assert read_all(log) == BEFORE
        _crashed_mid_swap(store_path)
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD_LOCK, os.path.join(directory, "txlog.lock")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "HELD\n"
            assert read_all(log) == AFTER
            assert _first_read_from(log, 5) == 26
            assert SWAP in os.listdir(directory)  # left to the lock's holder
        finally:
            holder.communicate("")
        assert read_all(log) == AFTER  # the lock is free now: this look completes the swap
        assert SWAP not in os.listdir(directory)
        assert "00000000000000000000.log" in os.listdir(directory)


def _midway_through_delete_replaced(directory: str) -> None:
    """As if killed inside `delete_replaced`: the first replaced segment renamed to `.deleted`, the
    second's `.log` unlinked, the third still there."""
    for name in os.listdir(directory):
        if name.startswith("00000000000000000000.") and not name.endswith(".swap"):
            os.rename(os.path.join(directory, name), os.path.join(directory, name + ".deleted"))
    os.unlink(os.path.join(directory, GROUP_LOGS[1]))


@pytest.mark.parametrize(
    ("step", "midway", "seen", "recovered"),
    [
        ("write_cleaned", False, BEFORE, BEFORE),  # `.cleaned` files only: not the log yet
        # `.swap` beside the whole replaced segments: past the point of no return, but the cleaner
        # checkpoint may not cover it yet, so readers keep the old segments until one goes
        ("rename_to_swap", False, BEFORE, AFTER),
        ("rename_to_swap", True, AFTER, AFTER),  # some replaced segments gone, some there
    ],
)
def test_a_read_only_view_reads_what_recovery_will_leave(store_path, step, midway, seen, recovered):
    """Whatever step the cleaner died after, a read-only view reads the group whole, before or after
    its cleaning, each record once, and after the first replaced segment went, what recovery gives
    (docs/kafka-formats.md §11.4's table)."""
    directory = dirty_log(store_path)
    kill_cleaner_after(store_path, step)
    if midway:
        _midway_through_delete_replaced(directory)
    with Store.open(store_path, read_only=True) as store:
        log = store.partition(TOPIC, 0)
        assert log.log_start_offset == 0
        assert read_all(log) == seen
    with Store.open(store_path) as store:  # recovery
        assert read_all(store.partition(TOPIC, 0)) == recovered
