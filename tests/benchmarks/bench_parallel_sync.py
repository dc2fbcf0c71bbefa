"""On-demand benchmark of fsyncs over many partitions: commit latency, create_topic, an acks=all flush.

Run: python tests/benchmarks/bench_parallel_sync.py [--partitions 1,10,100] [--big] [--reps R]
         [--create-reps R] [--skip-abort] [--skip-flush] [--skip-create] [--dir DIR]

Each part compares P partitions against 1 partition, in the same run on the same disk:

  commit       a transactional producer sends one record (10-byte key, 100-byte value) to each
               of P partitions (explicit partition) and waits until every one is written (its
               future done), then `commit_transaction()` is timed: the data syncs before
               PREPARE_COMMIT, PREPARE, the markers and their syncs, COMPLETE_COMMIT.
               p50 and p99 over R transactions (the first, cold one dropped).
               Issue 26's target: 100 partitions ≤ 5x one partition (63x before it).
  abort        the same transactions ended by `abort_transaction()` (timed): PREPARE_ABORT, the
               aborted partitions' `.txnindex` entries and markers and their syncs, COMPLETE_ABORT.
  create_topic `Store.create_topic(name, P)` on a fresh name each repetition: every partition's
               files, then their one sync round (a syncfs where allowed), the metadata.
  acks=all     a plain producer (acks=all, linger long enough that `flush()` makes one
               sender round of all of them) sends one record to each of P partitions;
               `flush()` is timed: the write of every partition, their one sync round (a
               syncfs where allowed, else their fdatasyncs at once), the futures.

Variants are interleaved (1 partition, then P, repetition by repetition) so that the disk's
mood hits both alike. `TXLOG_SYNC_METHOD` (docs/cli-conventions.md) chooses how a round is made
durable: `auto` by default, `syncfs` to take it whatever else is dirty. Besides wall time the
script prints the CPU seconds of this process and the fsync calls per operation
(benchutil.FsyncMeter). `--big` adds 1,000 partitions.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchutil import FsyncMeter, Sample, scratch_dir, timed

import txlog
from storage import Store

KEY = b"k" * 10
VALUE = b"v" * 100
COMMIT_TARGET = 5.0  # issue 26: a 100-partition commit at most 5x a one-partition one


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


class Commits:
    """One transactional producer per partition count, each on its own topic of that many partitions.

    `abort` ends each transaction with `abort_transaction()` instead: the data is written first
    (the futures done), so the abort has a `.txnindex` entry and a marker to make durable in
    every partition."""

    def __init__(self, store: Store, partitions: int, *, abort: bool = False):
        self.partitions = partitions
        self.abort = abort
        kind = "abort" if abort else "commit"
        self.topic = f"{kind}-{partitions}"
        store.create_topic(self.topic, partitions)
        self.producer = txlog.Producer(store, transactional_id=f"bench-{kind}-{partitions}", linger_ms=0)
        self.producer.init_transactions()

    def once(self) -> Sample:
        p = self.producer
        p.begin_transaction()
        futures = [p.send(self.topic, value=VALUE, key=KEY, partition=n) for n in range(self.partitions)]
        for future in futures:
            future.get()  # written (without fdatasync, as a transaction's data is): the commit syncs it
        with timed() as out:
            if self.abort:
                p.abort_transaction()
            else:
                p.commit_transaction()
        return out[0]

    def close(self) -> None:
        self.producer.close()


class Flushes:
    """An acks=all producer writing one record per partition, flushed as one round."""

    def __init__(self, store: Store, partitions: int):
        self.partitions = partitions
        self.topic = f"flush-{partitions}"
        store.create_topic(self.topic, partitions)
        self.producer = txlog.Producer(store, acks="all", linger_ms=60_000)

    def once(self) -> Sample:
        p = self.producer
        for partition in range(self.partitions):
            p.send(self.topic, value=VALUE, key=KEY, partition=partition)
        with timed() as out:
            p.flush()
        return out[0]

    def close(self) -> None:
        self.producer.close()


class Creates:
    def __init__(self, store: Store, partitions: int):
        self.store, self.partitions, self.n = store, partitions, 0

    def once(self) -> Sample:
        self.n += 1
        with timed() as out:
            self.store.create_topic(f"create-{self.partitions}-{self.n}", self.partitions)
        return out[0]

    def close(self) -> None:
        pass


def run_part(name: str, make: Callable[[int], Commits | Flushes | Creates], counts: list[int], reps: int) -> None:
    """Interleave the partition counts repetition by repetition; print p50/p99 and ratios against 1."""
    runners = {n: make(n) for n in counts}
    samples: dict[int, list[Sample]] = {n: [] for n in counts}
    for _ in range(reps + 1):
        for n in counts:
            samples[n].append(runners[n].once())
    for runner in runners.values():
        runner.close()
    base = statistics.median(s.wall for s in samples[counts[0]][1:])
    print(f"\n{name} (reps {reps} after a cold one; ratio = p50 / p50 at {counts[0]} partition(s))")
    print(f"{'partitions':>10} {'p50 ms':>9} {'p99 ms':>9} {'ratio':>7} {'cpu ms':>8} {'fsyncs':>7} {'fsync ms':>9}")
    for n in counts:
        rest = samples[n][1:]
        p50 = statistics.median(s.wall for s in rest)
        cpu = statistics.median(s.cpu for s in rest)
        fsyncs = statistics.median(s.fsyncs for s in rest)
        fsync_ms = statistics.median(s.fsync for s in rest)
        line = f"{n:>10} {p50 * 1e3:>9.1f} {_p99([s.wall for s in rest]) * 1e3:>9.1f} {p50 / base:>6.1f}x"
        print(f"{line} {cpu * 1e3:>8.1f} {fsyncs:>7.0f} {fsync_ms * 1e3:>9.1f}")
        if name == "commit" and n == 100:
            verdict = "ok" if p50 / base <= COMMIT_TARGET else "MISSED"
            print(f"{'':>10} target: 100 partitions ≤ {COMMIT_TARGET:.0f}x one partition -> {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", default="1,10,100", help="comma-separated partition counts (first = baseline)")
    parser.add_argument("--big", action="store_true", help="add 1,000 partitions")
    parser.add_argument("--reps", type=int, default=10, help="timed commits/flushes after the cold one (default 10)")
    parser.add_argument("--create-reps", type=int, default=4, help="timed create_topic calls after the cold one")
    parser.add_argument("--skip-create", action="store_true", help="skip the create_topic part")
    parser.add_argument("--skip-abort", action="store_true", help="skip the abort part")
    parser.add_argument("--skip-flush", action="store_true", help="skip the acks=all flush part")
    parser.add_argument("--dir", help="parent of the scratch directory (default <repo>/.bench-tmp)")
    args = parser.parse_args()
    counts = [int(n) for n in args.partitions.split(",")]
    if args.big and 1000 not in counts:
        counts.append(1000)
    FsyncMeter.install()
    with scratch_dir(args.dir, "parallel-sync-") as workdir:
        store = Store.open(workdir)
        try:
            run_part("commit", lambda n: Commits(store, n), counts, args.reps)
            if not args.skip_abort:
                run_part("abort", lambda n: Commits(store, n, abort=True), counts, args.reps)
            if not args.skip_flush:
                run_part("acks=all flush", lambda n: Flushes(store, n), counts, args.reps)
            if not args.skip_create:
                run_part("create_topic", lambda n: Creates(store, n), [c for c in counts if c <= 100], args.create_reps)
        finally:
            store.close()


if __name__ == "__main__":
    main()
