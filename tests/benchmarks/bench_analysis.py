"""On-demand benchmark of analysis without a JVM: `txlog.scan` and what is built on it, against Parquet.

Run: python tests/benchmarks/bench_analysis.py [--big] [--records N] [--partitions P] [--reps R]
         [--only NAME] [--dir DIR] [--profile]

Why: `txlog.scan` promises that a log can be analysed where it lies, with pandas, Polars and
DuckDB, without first copying it to a columnar format. A Parquet file of the same rows, read
by pyarrow's own reader, is what such a copy would be, so it is the baseline, measured in the
same run on the same rows.

The store (topic "bench", P partitions, default 4) is written straight from batches through
PartitionLog.append (fsync skipped: setup only): transactions of 512 records (10-byte key,
100-byte value, batches of 128 records) by one transactional producer, each ended by its
COMMIT marker, every tenth one by ABORT instead, so a read_committed scan has aborted data to
skip. N (default 200,000; --big: 2,000,000) counts the committed rows, what every case
returns; the aborted ones come on top. The Parquet copy is written once, before timing, from
`txlog.scan(store).to_arrow()` with pyarrow's defaults (snappy): the same rows and columns.

Each case times a txlog variant and, when it has one, its baseline, interleaved inside a
repetition; the first (cold) repetition is dropped and the median of the rest shown, with
rows per second and the ratio txlog rate / baseline rate (goal in the last column). Each
variant's row count is checked against N.

Cases are a list (`CASES`): a case is a name, a txlog function, an optional baseline
function and a goal; each function takes the `Bench` (paths, N) and returns its row count.
Add a case by appending to `CASES` (or with `add_case`).

Then `txlog sql`'s rows (tests/benchmarks/bench_sql.py says what they time): the first answer
and a repeated statement, each engine run as a `txlog sql` process over the same store.

--profile runs cProfile over one `to_arrow()` of the scan and prints where its time goes.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import analysis_engines as engines
from benchutil import Sample, fsync_skipped, median_after_cold, scratch_dir, spread, timed, verdict

import txlog
from storage import Store
from storage.records import ControlType, build_batch

TOPIC = "bench"
KEY_BYTES, VALUE_BYTES = 10, 100
RECORDS_PER_BATCH, BATCHES_PER_TXN, ABORT_EVERY = 128, 4, 10
TS0 = 1_700_000_000_000
DEFAULT_RECORDS, BIG_RECORDS = 200_000, 2_000_000


@dataclass(frozen=True)
class Bench:
    """What every case reads: the store, its Parquet copy, and the row count each must return."""

    store: str
    parquet: str
    rows: int
    partitions: int


@dataclass(frozen=True)
class Case:
    name: str
    txlog: Callable[[Bench], int]
    baseline: Callable[[Bench], int] | None = None
    baseline_name: str = ""
    goal: float = 1.0


# ---- the cases ----------------------------------------------------------------------------------------


def scan_to_arrow(b: Bench) -> int:
    return txlog.scan(b.store, TOPIC).to_arrow().num_rows


def parquet_read_table(b: Bench) -> int:
    import pyarrow.parquet as pq

    return pq.read_table(b.parquet).num_rows


CASES: list[Case] = [
    Case("scan to_arrow", scan_to_arrow, parquet_read_table, "parquet read_table"),
    # a GROUP BY partition (count, value bytes) in each engine, over txlog and over the Parquet copy
    Case("duckdb group by", engines.duckdb_over_txlog, engines.duckdb_over_parquet, "duckdb group by parquet"),
    Case("polars group_by", engines.polars_over_txlog, engines.polars_over_parquet, "polars group_by parquet"),
]


def add_case(case: Case) -> None:
    CASES.append(case)


# ---- building -------------------------------------------------------------------------------------------


def build_store(root: str, records: int, partitions: int) -> int:
    """Write the store; returns the aborted records written on top of `records` committed ones."""
    value = os.urandom(1 << 16)
    aborted = 0
    with fsync_skipped(), Store.open(root) as store:
        store.create_topic(TOPIC, partitions, {"retention.ms": -1})
        pid = store.allocate_producer_id()
        for p in range(partitions):
            log = store.partition(TOPIC, p)
            quota = records // partitions + (p < records % partitions)
            seq, txns, i = 0, 0, 0
            while quota:
                txns += 1
                abort = txns % ABORT_EVERY == 0
                n = RECORDS_PER_BATCH * BATCHES_PER_TXN if abort else min(quota, RECORDS_PER_BATCH * BATCHES_PER_TXN)
                batches = []
                for start in range(0, n, RECORDS_PER_BATCH):
                    k = min(RECORDS_PER_BATCH, n - start)
                    rows = [
                        (b"k%09d" % (i + j), value[(o := (i + j) * 7919 % 60000) : o + VALUE_BYTES], None, TS0 + i + j)
                        for j in range(k)
                    ]
                    batches.append(
                        build_batch(rows, producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True)
                    )
                    seq, i = seq + k, i + k
                log.append(b"".join(batches))
                log.append_marker(ControlType.ABORT if abort else ControlType.COMMIT, pid, 0, timestamp=TS0 + i)
                if abort:
                    aborted += n
                else:
                    quota -= n
    return aborted


def write_parquet(store: str, path: str) -> None:
    import pyarrow.parquet as pq

    pq.write_table(txlog.scan(store, TOPIC).to_arrow(), path)


# ---- running --------------------------------------------------------------------------------------------


def run_cases(b: Bench, cases: list[Case], reps: int) -> None:
    variants = [(c.name, c.txlog) for c in cases] + [
        (c.baseline_name, c.baseline) for c in cases if c.baseline is not None
    ]
    samples: dict[str, list[Sample]] = {name: [] for name, _ in variants}
    for _ in range(reps):
        for name, fn in variants:  # interleaved: a slow minute of the shared machine hits every variant
            with timed() as out:
                got = fn(b)
            assert got == b.rows, f"{name} returned {got} rows, not {b.rows}"
            samples[name].append(out[0])
    print(f"{'case':<28} {'median s':>9} {'min..max s':>15} {'rows/s':>12} {'ratio':>7} {'goal':>6}")
    for c in cases:
        line = _line(c.name, samples[c.name], b.rows)
        if c.baseline is not None:
            ratio = median_after_cold(samples[c.baseline_name]) / median_after_cold(samples[c.name])
            line += f" {ratio:>6.2f}x {c.goal:>5.1f}x {verdict(ratio, c.goal)}"
        print(line)
        if c.baseline is not None:
            print(_line(f"  {c.baseline_name}", samples[c.baseline_name], b.rows))


def _line(name: str, samples: list[Sample], rows: int) -> str:
    median = median_after_cold(samples)
    low, high = spread(samples)
    return f"{name:<28} {median:>9.3f} {low:>7.3f}..{high:<7.3f} {rows / median:>12,.0f}"


def profile(b: Bench) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    scan_to_arrow(b)
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(15)
    print(text.getvalue())


def sql_rows(b: Bench, reps: int) -> None:
    """`txlog sql`'s first answer and repeated statement with each engine (tests/benchmarks/bench_sql.py)."""
    import bench_sql

    bench_sql.report(bench_sql.rows(b.store, b.rows, reps, ["duckdb", "spark"]), b.rows, reps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big", action="store_true", help=f"{BIG_RECORDS:,} rows (default {DEFAULT_RECORDS:,})")
    parser.add_argument("--records", type=int, default=None)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--only", default=None, help="run the cases whose name contains this")
    parser.add_argument("--dir", default=None, help="scratch directory parent (default <repo>/.bench-tmp)")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    records = args.records or (BIG_RECORDS if args.big else DEFAULT_RECORDS)
    with scratch_dir(args.dir, "analysis-") as workdir:
        store, parquet = os.path.join(workdir, "store"), os.path.join(workdir, "bench.parquet")
        start = time.perf_counter()
        aborted = build_store(store, records, args.partitions)
        write_parquet(store, parquet)
        size = sum(e.stat().st_size for d in os.scandir(store) if d.is_dir() for e in os.scandir(d.path))
        print(
            f"{records:,} committed rows (+{aborted:,} aborted) of {KEY_BYTES} B keys and {VALUE_BYTES} B values "
            f"in {args.partitions} partitions: store {size / 2**20:.0f} MiB, Parquet "
            f"{os.path.getsize(parquet) / 2**20:.0f} MiB, built in {time.perf_counter() - start:.1f} s; "
            f"{args.reps} repetitions, the first dropped"
        )
        bench = Bench(store, parquet, records, args.partitions)
        cases = [c for c in CASES if args.only is None or args.only in c.name]
        run_cases(bench, cases, args.reps)
        if args.only is None or args.only in "txlog sql":
            sql_rows(bench, args.reps)
        if args.profile:
            profile(bench)


if __name__ == "__main__":
    main()
