"""Transactions over 50 partitions killed (SIGKILL, for real) at random moments of their ends.

docs/reliability-scenarios.md scenario 79: the coordinator syncs a transaction's data partitions
at once before PREPARE_COMMIT, and writes its markers one by one without fdatasync, then syncs
them at once before COMPLETE_* (issue 26). A worker (tests/crash/parallel_sync_worker.py) runs
transactions over every partition of a 50-partition topic, one record each, every fourth one
aborted; the parent kills it a random moment after it began ending one, then starts the next
worker on the same store (its init_transactions rolls a decided end forward or aborts an
undecided one). At the end a fresh process's view must show: every transaction either wholly
committed (all 50 records RC-visible) or not at all; every commit the worker was told of
visible, every abort it was told of invisible; `check_store` (kafka-python parses every batch,
RC/RU match a model of the raw batches, one marker per transaction end and partition, each
matching the PREPARE record, nothing left open).

Set TXLOG_SYNC_CRASH_SEED to replay a run's random choices; `--big` runs 20 kills instead of 4.
"""

from __future__ import annotations

import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from parallel_sync_worker import Worker, parse_value
from txn_crash_worker import check_store, fetch_all, make_store

from storage import Store
from txlog.transport import Transport

TOPIC = "wide"
PARTITIONS = 50
TID = "wide-txn"
SEED = int(os.environ.get("TXLOG_SYNC_CRASH_SEED") or random.randrange(1 << 30))


def _kill_during_an_end(root: str, first: int, rng: random.Random) -> tuple[int, dict[int, str]]:
    """Run one worker until it began ending a transaction, then SIGKILL it a random moment later.

    Returns (the number of the next transaction, {i: "COMMITTED" | "ABORTED"} it reported).
    """
    worker = Worker("run", root, "--topic", TOPIC, "--tid", TID, "--first", first)
    try:
        worker.expect("IDS")
        target = first + rng.randrange(3)  # a commit or an abort, a few transactions in
        worker.expect(f"BEGIN {target}")
        time.sleep(rng.uniform(0, 0.05))  # somewhere in the end: its syncs, PREPARE, markers, COMPLETE
    finally:
        worker.kill()
    while worker.next_line(timeout=30) is not None:  # what it printed before dying
        pass
    told = {}
    last = first - 1
    for line in worker.lines:
        word, _, n = line.partition(" ")
        if word in ("COMMITTED", "ABORTED"):
            told[int(n)] = word
        if word == "BEGIN":
            last = int(n)
    return last + 1, told


def _settle(root: str) -> None:
    """A fresh process's first coordinator request: re-init rolls a decided end forward, aborts an open one."""
    with Store.open(root) as store:
        Transport(store).init_producer_id(TID)


def test_scenario77_killed_during_wide_commits_every_transaction_is_whole(tmp_path, big):
    rng = random.Random(SEED)
    root = str(tmp_path / "store")
    make_store(root, {TOPIC: PARTITIONS})
    told: dict[int, str] = {}
    begun = 0
    for _ in range(20 if big else 4):
        begun, reported = _kill_during_an_end(root, begun, rng)
        told.update(reported)
    _settle(root)
    check_store(root)  # settled: nothing Ongoing or Prepare*, every LSO at the log end
    with Store.open(root, read_only=True) as store:
        visible: dict[int, set[int]] = {}
        for p in range(PARTITIONS):
            for _, value in fetch_all(store.partition(TOPIC, p), "read_committed"):
                i, partition = parse_value(value)
                assert partition == p, f"seed {SEED}: {value!r} in partition {p}"
                assert partition not in visible.setdefault(i, set()), f"seed {SEED}: {value!r} twice"
                visible[i].add(partition)
    whole = set(range(PARTITIONS))
    for i, parts in visible.items():
        assert parts == whole, f"seed {SEED}: transaction {i} is visible in {len(parts)} of {PARTITIONS} partitions"
    for i, word in told.items():
        seen = i in visible
        assert seen == (word == "COMMITTED"), f"seed {SEED}: transaction {i} was {word}, visible: {seen}"
    assert any(w == "COMMITTED" for w in told.values()), f"seed {SEED}: no commit ran to its end"
