"""Crash recovery with a big active segment (docs/DESIGN.md §3, scenario 77), real processes, real SIGKILL.

A worker appends large idempotent batches into one big active segment (it never rolls). The first
worker writes past SNAPSHOT_INTERVAL_BYTES, so it snapshots inside the active segment, and every
later reopen recovers from such a snapshot (a writer's, or the one the last recovery left) instead
of the segment's base. Workers are killed at random moments (mid-write, mid-fsync, at start-up
while they recover); after each kill a reopen (writable or read-only) finds every acknowledged
batch once at its acknowledged offset, the in-flight one at most once, and at the end
`check_store` (what `txlog verify` runs) finds nothing.
"""

from __future__ import annotations

import os
import random
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from crash_worker import TOPIC, Worker, check_batch, check_segment_files, check_segment_indexes, parse_acks, scan_log

from storage import Store
from storage.producer_snapshot import list_snapshots
from storage.producer_state_snapshots import SNAPSHOT_INTERVAL_BYTES
from txlog.tools.store_check import check_store

TS_BASE = int(time.time() * 1000) - 60_000
SIZES = ["--min-size", 20_000, "--max-size", 60_000, "--max-records", 3, "--ts-base", TS_BASE]


def _verify(store_path: str, pid: int, acked: dict, *, writable: bool) -> dict[int, tuple[int, int]]:
    """Reopen and check: every acknowledged batch at its offsets, sequences dense, files tile the log."""
    store = Store.open(store_path, read_only=not writable)
    try:
        log = store.partition(TOPIC, 0)
        present: dict[int, tuple[int, int]] = {}
        next_seq = 0
        for b in scan_log(log):
            check_batch(b)
            assert b.producer_id == pid and b.base_sequence == next_seq, (b.producer_id, b.base_sequence, next_seq)
            present[b.base_sequence] = (b.base_offset, b.last_offset)
            next_seq = b.base_sequence + b.records_count
        for seq, (_, base, last) in acked.items():
            assert present.get(seq) == (base, last), f"acknowledged seq {seq} at {base}..{last}: {present.get(seq)}"
        assert check_segment_files(log, allow_torn_tail=not writable) == len(present)
        if writable:
            check_segment_indexes(log)
        return present
    finally:
        store.close()


def test_sigkill_with_a_big_active_segment(store_path, big):
    kills = 30 if big else 8
    seed = int(os.environ.get("TXLOG_CRASH_SEED") or random.randrange(1 << 30))
    rng = random.Random(seed)
    store = Store.open(store_path)
    store.create_topic(TOPIC, partitions=1, config={"segment.bytes": 1 << 30})
    store.close()
    pid: int | None = None
    next_seq, end = 0, 0
    acked: dict[int, tuple[int, int, int]] = {}
    landed: tuple[int, int] | None = None
    for rnd in range(kills):
        w = Worker("append", store_path, "--seq", next_seq, *SIZES, *(["--pid", pid] if pid is not None else []))
        if pid is None:
            pid = int(w.expect("PID").split()[1])
        if rnd > 0 and rng.random() < 0.15:
            time.sleep(rng.uniform(0, 0.3))  # during start-up: the recovery itself is killed
        else:
            # The first worker writes past SNAPSHOT_INTERVAL_BYTES (~80 KB a batch, ~210 of them): it
            # snapshots mid-segment; the second is killed near its own snapshot, maybe in the middle of it.
            wanted = {0: 300, 1: rng.randint(190, 240)}.get(rnd) or rng.randint(20, 80)
            for _ in range(wanted):
                w.expect("ACK")
            time.sleep(rng.uniform(0, 0.01))  # inside the next append: write, fdatasync, HW, snapshot
        w.kill()
        acks = parse_acks(w.drain())
        if w.proc.returncode != -9:
            pytest.fail(f"[seed {seed}] worker ended with {w.proc.returncode} before the kill:\n{w.stderr}")
        if rnd == 0:  # it opened an empty log (no recovery snapshot): a snapshot past 0 is a periodic one
            snapshots = list_snapshots(os.path.join(store_path, f"{TOPIC}-0"))
            assert any(offset > 0 for offset, _ in snapshots), f"no snapshot in the active segment: {snapshots}"
        for i, (_, seq, nrec, base, last, dup) in enumerate(acks):
            assert seq == next_seq, f"[seed {seed}] ack of seq {seq}, expected {next_seq}"
            if i == 0 and landed is not None:
                assert dup and (base, last) == landed, f"[seed {seed}] round {rnd}: retry of a landed batch"
            else:
                assert not dup and base == end, f"[seed {seed}] round {rnd}: seq {seq} at {base}, log end {end}"
            acked[seq] = (nrec, base, last)
            next_seq, end = seq + nrec, max(end, last + 1)
        present = _verify(store_path, pid, acked, writable=rnd % 2 == 1)
        extra = {s: v for s, v in present.items() if s not in acked}
        assert set(extra) <= {next_seq}, f"[seed {seed}] round {rnd}: unacknowledged batches {sorted(extra)}"
        landed = extra.get(next_seq)
        end = landed[1] + 1 if landed else end

    pdir = os.path.join(store_path, f"{TOPIC}-0")
    logs = [n for n in os.listdir(pdir) if n.endswith(".log")]
    assert len(logs) == 1, logs  # one active segment throughout: every recovery went through its durable point
    assert os.path.getsize(os.path.join(pdir, logs[0])) > SNAPSHOT_INTERVAL_BYTES
    _verify(store_path, pid, acked, writable=True)
    store = Store.open(store_path, read_only=True)
    try:
        findings = list(check_store(store, TOPIC).findings)
    finally:
        store.close()
    assert not findings, f"[seed {seed}] verify found {findings}"
    print(f"big active segment seed={seed} kills={kills} acked={len(acked)} log end={end}")
