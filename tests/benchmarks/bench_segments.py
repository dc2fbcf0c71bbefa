"""On-demand benchmark: does the cost of a poll and of a roll stay flat as a partition's segment count grows?

Run: python tests/benchmarks/bench_segments.py [--segments 1,100,1000,2500] [--records N]
         [--rolls-at 15,2000] [--rolls R] [--reps R] [--profile]

For each segment count S a partition is built with one first segment of N records (10-byte
key, 100-byte value, batches of 100) followed by S-1 small segments of one batch each,
rolled explicitly (fsyncs skipped while building). A default Consumer (read_committed,
max_records 500, assigned, no group), opened and polled once untimed, then polls the first
segment from offset 0 to about 1,200 records short of its end (a poll's first read asks for
~128 KiB, which must not reach the small segments) in each repetition: every timed poll reads
the same bytes whatever S is, so any
growth with S is per-poll work that depends on the segment count (directory listings, the
`.txnindex` of later segments). Printed: poll p50 (wall and CPU) per S and its ratio to the
1-segment case (issue 26's goal: <= 1.5x at ~2,500 segments), then the full-read rate
(every record of the partition, polled from offset 0) per S.

Roll cost: a log is grown to each count of --rolls-at; then R times, one small append and a
forced roll (`PartitionLog.roll`) are timed (CPU and wall minus fsync, the fsync being the
disk's). Ratio of the p50 at the largest count to the smallest (goal: <= 1.5x at 2,000 vs 15).

Repetitions: every count's partition is built first, then the counts take turns, one repetition
(a roll, for the roll part) each, so a burst of load on the shared machine falls on every count
alike instead of on one count's block (in blocks, the poll ratio at 2,500 segments read 0.65x to
1.68x in one sitting). The first (cold) repetition is dropped, the median of the rest is shown.
Sizes are small by default (the whole run takes about a minute on an idle machine).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchutil import FsyncMeter, fsync_skipped, scratch_dir, warm_median

from storage import Store
from storage.partition_log import PartitionLog
from storage.records import build_batch
from txlog.clients.consumer import Consumer
from txlog.topic_partition import TopicPartition

TOPIC = "t"
KEY_BYTES, VALUE_BYTES, PER_BATCH = 10, 100, 100
POLL_RATIO_GOAL = 1.5
ROLL_RATIO_GOAL = 1.5


def _batch(records: int = PER_BATCH) -> bytes:
    now = int(time.time() * 1000)
    return build_batch([(os.urandom(KEY_BYTES), os.urandom(VALUE_BYTES), (), now) for _ in range(records)])


def grow(log: PartitionLog, segments: int) -> None:
    """Roll `log` until it has `segments` segments, one small batch in each new one."""
    small = _batch(1)
    while len(log.segments) < segments:
        log.append(small, sync=False)
        log.roll()


def build(root: str, segments: int, records: int) -> int:
    """A store at `root` whose partition 0 has `records` records in its first segment, then S-1 small ones."""
    store = Store.open(root)
    try:
        store.create_topic(TOPIC, 1)
        log = store.partition(TOPIC, 0)
        with fsync_skipped():
            for _ in range(records // PER_BATCH):
                log.append(_batch(), sync=False)
            if segments > 1:
                log.roll()
                grow(log, segments)
            log.sync()
        first_end = log.segments[1].base_offset if segments > 1 else log.log_end_offset
        return first_end
    finally:
        store.close()


#: Records short of the first segment's end where the timed polls stop: a poll's first read asks
#: for about 128 KiB (txlog/fetch.py), ~1,000 records here, and must not reach the small segments.
SPILL_RECORDS = 1200


def poll_times(root: str, first_end: int) -> tuple[list[float], list[float], int]:
    """(wall seconds, CPU seconds) of each poll reading the first segment from offset 0.

    The partition is opened and polled once before the timed polls (opening is not polling),
    and the timed polls stop SPILL_RECORDS short of the first segment's end, so each of them
    reads the same bytes of the first segment whatever follows it.
    """
    store = Store.open(root)
    consumer = Consumer(store, enable_auto_commit=False)
    tp = TopicPartition(TOPIC, 0)
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        consumer.poll()
        consumer.seek(tp, 0)
        walls, cpus, seen = [], [], 0
        while consumer.position(tp) < first_end - SPILL_RECORDS:
            cpu, start = time.process_time(), time.perf_counter()
            got = consumer.poll()
            walls.append(time.perf_counter() - start)
            cpus.append(time.process_time() - cpu)
            seen += len(got)
        return walls, cpus, seen
    finally:
        consumer.close()
        store.close()


def full_read(root: str) -> tuple[int, float]:
    """(records, wall seconds) of polling the whole partition from offset 0."""
    store = Store.open(root)
    consumer = Consumer(store, enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition(TOPIC, 0)])
        consumer.seek(TopicPartition(TOPIC, 0), 0)
        seen, start = 0, time.perf_counter()
        while got := consumer.poll():
            seen += len(got)
        return seen, time.perf_counter() - start
    finally:
        consumer.close()
        store.close()


def roll_costs(root: str, counts: list[int], rolls: int) -> list[tuple[float, float]]:
    """Per segment count, p50 (CPU, wall minus fsync) seconds of one small append and a forced roll at about
    that many segments: a log per count is grown first, then the counts take turns, one roll each, so a
    burst of load on the shared machine falls on every count alike rather than on one count's block."""
    stores = [Store.open(os.path.join(root, f"roll-{count}")) for count in counts]
    try:
        logs = []
        for store, count in zip(stores, counts, strict=True):
            store.create_topic(TOPIC, 1)
            logs.append(store.partition(TOPIC, 0))
            with fsync_skipped():
                grow(logs[-1], count)
        small = _batch(1)
        cpus: list[list[float]] = [[] for _ in counts]
        walls: list[list[float]] = [[] for _ in counts]
        for _ in range(rolls + 1):
            for n, log in enumerate(logs):
                _, fsync_before = FsyncMeter.reading()
                cpu, start = time.process_time(), time.perf_counter()
                log.append(small, sync=False)
                log.roll()
                walls[n].append(time.perf_counter() - start - (FsyncMeter.reading()[1] - fsync_before))
                cpus[n].append(time.process_time() - cpu)
        return [(warm_median(c), warm_median(w)) for c, w in zip(cpus, walls, strict=True)]
    finally:
        for store in stores:
            store.close()


def _counts(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=_counts, default=[1, 100, 1000, 2500], help="segment counts polled")
    parser.add_argument("--records", type=int, default=5000, help="records in the first segment (default 5000)")
    parser.add_argument("--rolls-at", type=_counts, default=[15, 2000], help="segment counts rolled at")
    parser.add_argument("--rolls", type=int, default=20, help="timed rolls per count (default 20)")
    parser.add_argument("--reps", type=int, default=5, help="poll repetitions after the cold one (default 5)")
    parser.add_argument("--dir", help="parent of the scratch directory (default <repo>/.bench-tmp)")
    parser.add_argument("--profile", action="store_true", help="cProfile the polls at the largest count")
    args = parser.parse_args()
    if args.records <= SPILL_RECORDS:  # the timed polls stop SPILL_RECORDS short of the end (`poll_times`)
        parser.error(f"--records must be more than {SPILL_RECORDS}: fewer leave no poll to time")
    FsyncMeter.install()

    print(f"poll: default Consumer, read_committed, {args.records} records in the first segment, polled from 0")
    with scratch_dir(args.dir, "bench-seg-") as parent:
        polls(parent, args)

    print(f"roll: one small append + a forced roll, p50 of {args.rolls}")
    with scratch_dir(args.dir, "bench-roll-") as root:
        costs = roll_costs(root, args.rolls_at, args.rolls)
    for count, (cpu, wall) in zip(args.rolls_at, costs, strict=True):
        print(f"  {count:>5} segments: {cpu * 1e3:7.3f} ms CPU, {wall * 1e3:7.3f} ms wall without fsync")
    if len(costs) > 1:
        ratio = costs[-1][0] / costs[0][0]
        verdict = "ok" if ratio <= ROLL_RATIO_GOAL else "MISSED"
        counts = f"{args.rolls_at[-1]} vs {args.rolls_at[0]} segments"
        print(f"  roll CPU at {counts}: {ratio:.2f}x (goal <= {ROLL_RATIO_GOAL}x) {verdict}")


def polls(parent: str, args: argparse.Namespace) -> None:
    """The poll part: a partition per segment count built first, then the counts take turns, one
    repetition each (the first, cold, dropped), so a burst of load falls on every count alike."""
    roots, ends, built = [], [], []
    for count in args.segments:
        roots.append(os.path.join(parent, f"seg-{count}"))
        started = time.perf_counter()
        ends.append(build(roots[-1], count, args.records))
        built.append(time.perf_counter() - started)
    walls: list[list[float]] = [[] for _ in roots]
    cpus: list[list[float]] = [[] for _ in roots]
    for rep in range(args.reps + 1):
        for n, (root, first_end) in enumerate(zip(roots, ends, strict=True)):
            w, c, _ = poll_times(root, first_end)
            if rep:  # the first repetition is cold
                walls[n] += w
                cpus[n] += c
    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(poll_times, roots[-1], ends[-1])
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    base_wall = base_cpu = None
    for n, count in enumerate(args.segments):
        records, seconds = full_read(roots[n])
        wall, cpu = statistics.median(walls[n]) * 1e3, statistics.median(cpus[n]) * 1e3
        base_wall, base_cpu = base_wall or wall, base_cpu or cpu
        print(
            f"  {count:>5} segments: poll p50 {wall:7.3f} ms wall ({wall / base_wall:5.2f}x), "
            f"{cpu:7.3f} ms CPU ({cpu / base_cpu:5.2f}x); full read {records / seconds:9.0f} records/s; "
            f"built in {built[n]:.1f} s"
        )
    if len(args.segments) > 1:
        ratio = wall / base_wall
        verdict = "ok" if ratio <= POLL_RATIO_GOAL else "MISSED"
        counts = f"{args.segments[-1]} vs {args.segments[0]} segments"
        print(f"  poll p50 at {counts}: {ratio:.2f}x (goal <= {POLL_RATIO_GOAL}x) {verdict}")


if __name__ == "__main__":
    main()
