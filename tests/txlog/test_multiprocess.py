"""Several real processes on one store directory (docs/reliability-scenarios.md scenarios 36, 37, 39-style, 42).

No broker: every process opens the store and appends under the partition's flock
(docs/DESIGN.md §3). The workers are `tests/crash/crash_worker.py` subprocesses; the checks run in
this process over the files they leave. Sizes are small by default; `--big` runs the
scenarios' full sizes (4 x 10,000 batches, 100 kill rounds, ...).
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from bisect import bisect_left

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from storage import Store
from storage.producer_ids import ProducerIdAllocator
from tests.crash.crash_worker import (
    TOPIC,
    Worker,
    check_batch,
    check_segment_files,
    check_segment_indexes,
    parse_acks,
    scan_log,
)

TS_BASE = int(time.time() * 1000) - 60_000


def _create(store_path: str, config: dict) -> None:
    s = Store.open(store_path)
    s.create_topic(TOPIC, partitions=1, config=config)
    s.close()


def _start_together(workers: list[Worker]) -> None:
    """Every worker has opened the store and waits on stdin; release them at once."""
    for w in workers:
        w.expect("READY")
    for w in workers:
        w.send("GO")


def _stats(lines: list[str]) -> dict[str, int]:
    line = next(x for x in lines if x.startswith("STATS "))
    return {k: int(v) for k, v in (kv.split("=") for kv in line.split()[1:])}


# =====================================================================================================
# docs/reliability-scenarios.md scenario 36: four processes appending to one partition, rolling segments concurrently
# =====================================================================================================


def _kafka_python_parse(path: str) -> int:
    """Parse a whole segment file with kafka-python (an independent reader); returns batches seen."""
    from kafka.record import MemoryRecords

    with open(path, "rb") as f:
        data = f.read()
    records = MemoryRecords(data)
    n = 0
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc(), f"{path}: kafka-python finds a bad CRC in batch {n}"
        offsets = [r.offset for r in batch]
        assert offsets == list(range(batch.base_offset, batch.base_offset + len(offsets)))
        n += 1
    assert records.valid_bytes() == len(data), (
        f"{path}: kafka-python stops at byte {records.valid_bytes()} of {len(data)}"
    )
    return n


def test_four_appenders_one_partition(store_path, big):
    n = 10_000 if big else 300
    seg_bytes = 1 << 18 if big else 16384
    _create(store_path, {"segment.bytes": seg_bytes, "index.interval.bytes": 1024})
    workers = [
        Worker(
            "append",
            store_path,
            "--count",
            n,
            "--go-stdin",
            "--min-size",
            1,
            "--max-size",
            2500,
            "--max-records",
            4,
            "--ts-base",
            TS_BASE + 7 * i,
            stdin=True,
        )
        for i in range(4)
    ]
    _start_together(workers)
    acks = {}
    for w in workers:
        lines = w.check_ok(timeout=3600)
        got = parse_acks(lines)
        assert len(got) == n and not any(a[5] for a in got)
        acks[got[0][0]] = got
    assert len(acks) == 4, "four distinct producer ids"

    store = Store.open(store_path, read_only=True)
    try:
        log = store.partition(TOPIC, 0)
        batches = scan_log(log)  # dense and unique across every segment
        assert len(batches) == 4 * n
        assert log.log_start_offset == 0
        last_seq = {pid: -1 for pid in acks}
        where = {}
        for b in batches:
            check_batch(b)  # whole, CRC-valid, the bytes that producer sent: nothing torn or interleaved
            assert b.base_sequence == last_seq[b.producer_id] + 1, (
                f"producer {b.producer_id}: sequence {b.base_sequence} at offset {b.base_offset} after "
                f"{last_seq[b.producer_id]} (send order broken)"
            )
            last_seq[b.producer_id] = b.base_sequence + b.records_count - 1
            where[(b.producer_id, b.base_sequence)] = (b.base_offset, b.last_offset)
        for pid, got in acks.items():
            for _, seq, _, base, last, _ in got:
                assert where[(pid, seq)] == (base, last), f"ack of {pid}/{seq} says {base}..{last}"

        # Segment files: contiguous, fully parseable by kafka-python, no bytes after the last batch.
        segs = log.segments
        assert len(segs) > 10, "segments should roll many times while the processes race"
        assert segs[0].base_offset == 0
        assert check_segment_files(log) == 4 * n
        assert sum(_kafka_python_parse(seg.log_path) for seg in segs) == 4 * n

        # Index lookups agree with the full scan.
        check_segment_indexes(log)
        by_offset = []
        for b in batches:
            by_offset.append((b.base_offset, b.last_offset, b.crc))
        firsts = [x[0] for x in by_offset]
        end = log.log_end_offset
        samples = 20_000 if big else 600
        probe = range(end) if end <= samples else random.Random(1).sample(range(end), samples)
        for o in probe:
            got = log.read(o, max_bytes=1)
            want = by_offset[bisect_left(firsts, o + 1) - 1]
            assert got and (got[0].base_offset, got[0].last_offset, got[0].crc) == want, f"read({o})"
        recs = [(r.offset, r.timestamp) for b in batches for r in b.records()]
        prefix_max = []
        m = -1
        for _, ts in recs:
            m = max(m, ts)
            prefix_max.append(m)
        stamps = sorted({ts for _, ts in recs})
        rng = random.Random(2)
        samples = 3000 if big else 300
        targets = stamps if len(stamps) <= samples else rng.sample(stamps, samples)
        for ts in list(targets) + [stamps[0] - 1, stamps[-1] + 1]:
            i = bisect_left(prefix_max, ts)
            want = recs[i][0] if i < len(recs) else None
            assert log.offset_for_timestamp(ts) == want, f"offset_for_timestamp({ts})"
    finally:
        store.close()


# =====================================================================================================
# docs/reliability-scenarios.md scenario 37: concurrent producer-id allocation, and kill -9 during allocation
# =====================================================================================================


def test_twenty_processes_allocate_distinct_ids(store_path):
    Store.open(store_path).close()
    workers = [Worker("alloc", store_path, "--count", 1, "--go-stdin", stdin=True) for _ in range(20)]
    _start_together(workers)
    ids = []
    for w in workers:
        ids += [int(x.split()[1]) for x in w.check_ok() if x.startswith("PID ")]
    assert len(ids) == 20 and len(set(ids)) == 20, sorted(ids)
    assert ProducerIdAllocator(store_path).next_id() > max(ids)


def test_pid_allocation_survives_kill9(store_path, big):
    rounds = 100 if big else 6
    seed = int(os.environ.get("TXLOG_CRASH_SEED") or random.randrange(1 << 30))  # set it to replay a run
    rng = random.Random(seed)
    Store.open(store_path).close()
    issued: list[int] = []
    for rnd in range(rounds):
        workers = [Worker("alloc", store_path) for _ in range(4)]
        for w in workers:
            for _ in range(rng.randint(0, 5)):
                w.expect("PID")
        time.sleep(rng.uniform(0, 0.02))
        for w in workers:
            os.kill(w.pid, signal.SIGKILL)
            time.sleep(rng.uniform(0, 0.003))
        for w in workers:
            w.proc.wait()
            lines = w.drain()
            assert w.proc.returncode == -signal.SIGKILL, f"[seed {seed}] {w.stderr}"
            issued += [int(x.split()[1]) for x in lines if x.startswith("PID ")]
        assert len(issued) == len(set(issued)), f"[seed {seed}] round {rnd}: an id was handed out twice"
        hwm = ProducerIdAllocator(store_path).next_id()  # raises if the file was left damaged
        assert not issued or hwm > max(issued), (
            f"[seed {seed}] round {rnd}: persisted high-water mark {hwm} <= issued id {max(issued)}"
        )
    with Store.open(store_path) as s:
        fresh = s.allocate_producer_id()
    assert fresh not in issued and fresh > max(issued)


# =====================================================================================================
# docs/reliability-scenarios.md scenario 42: retention deletes segments while another process reads them
# =====================================================================================================


def _parse_at(line: str) -> tuple[int, int, int, int]:
    _, pos, resets, batches, leo = line.split()
    return int(pos), int(resets), int(batches), int(leo)


def _append(log, pid: int, seq: int, count: int) -> int:
    from tests.crash.crash_worker import make_batch

    for _ in range(count):
        data, nrec = make_batch(pid, seq, ts_base=TS_BASE, min_size=100, max_size=400)
        log.append(data)
        seq += nrec
    return seq


def _step_until_caught_up(reader: Worker, log, max_steps: int = 2000) -> tuple[int, int, int, int]:
    """Let a lock-step reader take steps until it sits at the log end (a bounded number of steps)."""
    end = log.log_end_offset
    for _ in range(max_steps):
        reader.send("NEXT")
        at = _parse_at(reader.expect("AT"))
        if at[0] == end:
            return at
    raise AssertionError(
        f"reader never caught up: stuck at position {at[0]}, its log end {at[3]}, "
        f"real log end {end}, log start {log.log_start_offset}"
    )


@pytest.mark.parametrize("behind", ["some-segments", "every-segment-it-knew"])
def test_retention_under_a_reader_lockstep(store_path, behind):
    """Deterministic interleaving: B holds segments open, A deletes them, B must reset and go on."""
    _create(store_path, {"segment.bytes": 2048, "index.interval.bytes": 200})
    store = Store.open(store_path)  # this process is A
    try:
        log = store.partition(TOPIC, 0)
        pid = store.allocate_producer_id()
        seq = _append(log, pid, 0, 40)
        reader = Worker("read", store_path, "--follow-retention", "--lockstep", stdin=True)
        pos, resets, _, _ = _parse_at(reader.expect("AT"))
        assert 0 < pos < log.log_end_offset and resets == 0
        if behind == "every-segment-it-knew":
            seq = _append(log, pid, seq, 40)  # roll well past the reader's view
        store.alter_topic_config(TOPIC, {"retention.bytes": 3000})
        assert log.enforce_retention() > 0
        assert log.log_start_offset > pos
        at = _step_until_caught_up(reader, log)
        assert at[1] >= 1, "the reader must have been told OFFSET_OUT_OF_RANGE and reset"
        seq = _append(log, pid, seq, 10)
        _step_until_caught_up(reader, log)
        reader.send("STOP")
        stats = _stats(reader.check_ok())
        assert stats["resets"] >= 1
    finally:
        store.close()


def test_retention_while_reading_race(store_path, big):
    n = 4000 if big else 250
    _create(store_path, {"segment.bytes": 2048, "retention.bytes": 6144, "index.interval.bytes": 256})
    stop = os.path.join(os.path.dirname(store_path), "stop")
    readers = [
        Worker("read", store_path, "--follow-retention", "--stop-file", stop),
        Worker("read", store_path, "--follow-retention", "--stop-file", stop, "--writable"),
        Worker("read", store_path, "--follow-retention", "--stop-file", stop, "--pause-every", 7, "--pause-ms", 15),
    ]
    writer = Worker(
        "append",
        store_path,
        "--count",
        n,
        "--enforce-retention",
        "--min-size",
        20,
        "--max-size",
        600,
        "--ts-base",
        TS_BASE,
    )
    try:
        writer.check_ok(timeout=3600)
    finally:
        with open(stop, "w"):
            pass
    store = Store.open(store_path, read_only=True)
    try:
        log = store.partition(TOPIC, 0)
        end = log.log_end_offset
        for r in readers:
            stats = _stats(r.check_ok())  # exit 0: never garbage, never a crash, positions monotonic
            print(f"retention race reader {' '.join(r.cmd[5:])}: {stats}")
            assert stats["batches"] > 0
            assert stats["pos"] == end, f"reader {r.cmd[4:]} stopped at {stats['pos']}, the log ends at {end}"
        assert log.log_start_offset > 0, "retention should have deleted segments"
        for b in scan_log(log):
            check_batch(b)
    finally:
        store.close()


# =====================================================================================================
# A lock-free reader while writers append (docs/reliability-scenarios.md scenario 39's "never a partial
# batch, positions monotonic")
# =====================================================================================================


@pytest.mark.parametrize("reader_open", ["read-only", "writable"])
def test_reader_while_writers_append(store_path, big, reader_open):
    n = 4000 if big else 150
    _create(store_path, {"segment.bytes": 8192, "index.interval.bytes": 512})
    extra = ["--writable"] if reader_open == "writable" else []
    reader = Worker("read", store_path, "--expect-batches", 2 * n, *extra)
    writers = [
        Worker("append", store_path, "--count", n, "--min-size", 1, "--max-size", 3000, "--ts-base", TS_BASE + i)
        for i in range(2)
    ]
    for w in writers:
        w.check_ok(timeout=3600)
    stats = _stats(reader.check_ok(timeout=3600))
    assert stats["batches"] == 2 * n
    assert stats["resets"] == 0


def test_reader_opens_a_topic_nobody_wrote_yet(store_path):
    """A lock-free reader process may start before any writer: a new topic reads as empty."""
    _create(store_path, {})
    stop = os.path.join(os.path.dirname(store_path), "stop")
    with open(stop, "w"):
        pass
    reader = Worker("read", store_path, "--stop-file", stop)
    stats = _stats(reader.check_ok())
    assert stats["batches"] == 0 and stats["pos"] == 0
