"""On-demand benchmark of fsyncs over many partitions: commit latency, create_topic, an acks=all flush.

Run: python tests/benchmarks/bench_parallel_sync.py [--partitions 1,10,100] [--big] [--reps R]
         [--create-reps R] [--skip-abort] [--skip-floor] [--skip-flush] [--skip-create] [--dir DIR]

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
  floor        (printed under the commit's and the abort's rows) the same I/O as that end with no txlog
               code, at the same partition counts, interleaved with it, by the same sync method
               (`Floor`): how much of a wide end's ratio is the disk's and how much is code's.
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
import os
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchutil import FsyncMeter, Sample, after_cold, median_after_cold, scratch_dir, timed

import txlog
from storage import Store, durable

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


class Floor:
    """The I/O of a transaction's end over P partitions with no txlog code: what the disk alone costs.

    Files laid out once: per partition a log, a HW file and (abort) a `.txnindex`, plus one
    `__transaction_state` log and its HW file. Per repetition a small record is written untimed to
    every partition's log (the data, written unsynced as a transaction's is); then, timed, what
    `commit_transaction()` makes of it: the data round's sync and the HW pwrites, PREPARE (one write,
    one fdatasync, one HW pwrite), a marker written to every log, the markers round's sync and the
    HW pwrites, COMPLETE (one write, unsynced). An abort has no data round; it makes every partition's
    `.txnindex` entry durable in one round before its markers instead (rule 19). A round is synced as
    `storage.durable.sync_round` would choose for the same `TXLOG_SYNC_METHOD`: one syncfs for 4 or
    more files where allowed, else one fdatasync per file, at once on a share of 16 threads
    (`each_in_parallel`'s shape), a lone file inline.
    """

    DATA = b"d" * 180  # about a one-record batch of a 10-byte key and a 100-byte value
    MARKER = b"m" * 78  # a control batch
    ENTRY = b"e" * 34  # a `.txnindex` entry
    STATE = b"s" * 120  # a TransactionLog record
    HW = b"h" * 14
    THREADS = 16
    _pool: ThreadPoolExecutor | None = None

    def __init__(self, workdir: str, partitions: int, *, abort: bool = False):
        self.partitions, self.abort = partitions, abort
        self.dir = os.path.join(workdir, f"floor-{'abort' if abort else 'commit'}-{partitions}")
        os.makedirs(self.dir)
        self.logs = [self._file(f"{n}.log") for n in range(partitions)]
        self.hws = [self._file(f"{n}.hw") for n in range(partitions)]
        self.entries = [self._file(f"{n}.txnindex") for n in range(partitions)] if abort else []
        self.state, self.state_hw = self._file("state.log"), self._file("state.hw")
        for fd in [*self.logs, *self.hws, *self.entries, self.state, self.state_hw]:
            os.fsync(fd)
        os.fsync(os.open(self.dir, os.O_RDONLY))

    def _file(self, name: str) -> int:
        return os.open(os.path.join(self.dir, name), os.O_RDWR | os.O_CREAT | os.O_APPEND)

    def once(self) -> Sample:
        for fd in self.logs:
            os.write(fd, self.DATA)
        with timed() as out:
            if self.abort:
                self._prepare()
                for fd in self.entries:
                    os.write(fd, self.ENTRY)
                self._round(self.entries)
            else:
                self._round(self.logs)
                self._publish()
                self._prepare()
            for fd in self.logs:
                os.write(fd, self.MARKER)
            self._round(self.logs)
            self._publish()
            os.write(self.state, self.STATE)  # COMPLETE: not synced
        return out[0]

    def _prepare(self) -> None:
        os.write(self.state, self.STATE)
        os.fdatasync(self.state)
        os.pwrite(self.state_hw, self.HW, 0)

    def _publish(self) -> None:
        for fd in self.hws:
            os.pwrite(fd, self.HW, 0)

    def _round(self, fds: list[int]) -> None:
        if len(fds) >= durable.SYNCFS_MIN_FILES and durable.syncfs_allowed(len(fds)):
            durable.syncfs(fds[0])  # the ctypes call of libc's syncfs (the FsyncMeter counts it)
        elif len(fds) == 1:
            os.fdatasync(fds[0])
        else:
            shares = min(self.THREADS, len(fds))

            def share(first: int) -> None:
                for fd in fds[first::shares]:
                    os.fdatasync(fd)

            if Floor._pool is None:
                Floor._pool = ThreadPoolExecutor(self.THREADS - 1)
            futures = [Floor._pool.submit(share, first) for first in range(1, shares)]
            share(0)
            for future in futures:
                future.result()

    def close(self) -> None:
        for fd in [*self.logs, *self.hws, *self.entries, self.state, self.state_hw]:
            os.close(fd)


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


def run_part(
    name: str,
    make: Callable[[int], Commits | Flushes | Creates],
    counts: list[int],
    reps: int,
    floor: Callable[[int], Floor] | None = None,
) -> None:
    """Interleave the partition counts repetition by repetition (each count's `floor` run right after
    it); print p50/p99 and ratios against 1, then the floor's rows and txlog against the floor."""
    runners = {n: make(n) for n in counts}
    floors = {n: floor(n) for n in counts} if floor is not None else {}
    samples: dict[int, list[Sample]] = {n: [] for n in counts}
    floor_samples: dict[int, list[Sample]] = {n: [] for n in floors}
    for _ in range(reps + 1):
        for n in counts:
            samples[n].append(runners[n].once())
            if n in floors:
                floor_samples[n].append(floors[n].once())
    for runner in [*runners.values(), *floors.values()]:
        runner.close()
    base = median_after_cold(samples[counts[0]], "wall")
    print(f"\n{name} (reps {reps} after a cold one; ratio = p50 / p50 at {counts[0]} partition(s))")
    print(f"{'partitions':>10} {'p50 ms':>9} {'p99 ms':>9} {'ratio':>7} {'cpu ms':>8} {'fsyncs':>7} {'fsync ms':>9}")
    for n in counts:
        _print_row(f"{n:>10}", samples[n], base)
        if name == "commit" and n == 100:
            verdict = "ok" if median_after_cold(samples[n], "wall") / base <= COMMIT_TARGET else "MISSED"
            print(f"{'':>10} target: 100 partitions ≤ {COMMIT_TARGET:.0f}x one partition -> {verdict}")
    if floors:
        floor_base = median_after_cold(floor_samples[counts[0]], "wall")
        print(f"{name} floor: the same I/O, no txlog code (ratio = floor p50 / floor p50 at {counts[0]})")
        for n in counts:
            over = median_after_cold(samples[n], "wall") / median_after_cold(floor_samples[n], "wall")
            _print_row(f"{'floor ' + str(n):>10}", floor_samples[n], floor_base, f"  txlog/floor {over:.1f}x")


def _print_row(label: str, samples: list[Sample], base: float, tail: str = "") -> None:
    rest = after_cold(samples)
    p50 = median_after_cold(samples, "wall")
    line = f"{label} {p50 * 1e3:>9.1f} {_p99([s.wall for s in rest]) * 1e3:>9.1f} {p50 / base:>6.1f}x"
    cpu, fsyncs, fsync_ms = (
        median_after_cold(samples, "cpu"),
        median_after_cold(samples, "fsyncs"),
        median_after_cold(samples, "fsync"),
    )
    print(f"{line} {cpu * 1e3:>8.1f} {fsyncs:>7.0f} {fsync_ms * 1e3:>9.1f}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", default="1,10,100", help="comma-separated partition counts (first = baseline)")
    parser.add_argument("--big", action="store_true", help="add 1,000 partitions")
    parser.add_argument("--reps", type=int, default=10, help="timed commits/flushes after the cold one (default 10)")
    parser.add_argument("--create-reps", type=int, default=4, help="timed create_topic calls after the cold one")
    parser.add_argument("--skip-create", action="store_true", help="skip the create_topic part")
    parser.add_argument("--skip-abort", action="store_true", help="skip the abort part")
    parser.add_argument("--skip-floor", action="store_true", help="skip the floor rows of the commit and abort")
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
            floor = None if args.skip_floor else (lambda n: Floor(workdir, n))
            run_part("commit", lambda n: Commits(store, n), counts, args.reps, floor)
            if not args.skip_abort:
                abort_floor = None if args.skip_floor else (lambda n: Floor(workdir, n, abort=True))
                run_part("abort", lambda n: Commits(store, n, abort=True), counts, args.reps, abort_floor)
            if not args.skip_flush:
                run_part("acks=all flush", lambda n: Flushes(store, n), counts, args.reps)
            if not args.skip_create:
                run_part("create_topic", lambda n: Creates(store, n), [c for c in counts if c <= 100], args.create_reps)
        finally:
            store.close()


if __name__ == "__main__":
    main()
