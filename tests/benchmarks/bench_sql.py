"""On-demand benchmark of `txlog sql`: the first answer and a repeated statement, per engine.

Run: python tests/benchmarks/bench_sql.py [--records N] [--reps R] [--engines duckdb,spark]
         [--work-dir DIR] [--big]

Why: `txlog sql --engine spark` pays a JVM start before its first answer; the embedded DuckDB
engine was added to answer at once (goal: the first answer within 2 s), and the default engine
is chosen from these numbers (README, docs/analysis.md §4).

The store: topic "bench", 4 partitions, N records (default 200,000; --big 2,000,000) of a
10-byte key and a 100-byte value, written by a transactional producer in transactions of
10,000 records, every tenth aborted (so read_committed filters). Each engine is run as a user
runs it, a `txlog sql` process with the statement R+1 times (default R 5) in one script:
  first      seconds from launching the process to the first result (stderr's "N rows" line):
             Python start, imports, the engine's start, registering the views, the statement
  repeated   the median of the later statements' own times (as `txlog sql` reports them): the
             engine warm, the topic read again by each (both engines read the store per statement)
  CPU        the CPU seconds of the whole run of the txlog process (and the children it waited
             for, which Spark's JVM is not: for spark this leaves the JVM's CPU out): on a
             shared machine, a DuckDB first answer far above it is time other processes took
The statement: per partition, count(*), sum(octet_length(value)), max(`offset`) -- a scan of
every committed record, an aggregate, 4 rows out. Each engine's rows are checked equal.
`rows(...)` and `report(...)` give the same rows in tests/benchmarks/bench_analysis.py's run, over
its store (the same topic name, its N committed records).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchutil import cli_env, scratch_dir, warm_median  # noqa: E402

STATEMENT = (
    "SELECT partition, count(*) AS n, CAST(sum(octet_length(value)) AS BIGINT) AS bytes, max(`offset`) AS last "
    "FROM bench GROUP BY partition ORDER BY partition"
)
_DONE = re.compile(r"^\d+ rows? \((\d+\.\d+) s\)$")
SMALL, BIG = 200_000, 2_000_000


def build_store(path: str, records: int) -> int:
    """The bench topic; returns how many records read_committed sees."""
    import txlog

    with txlog.Admin(path) as admin:
        admin.create_topic("bench", 4)
    producer = txlog.Producer(path, transactional_id="bench-writer", linger_ms=50, batch_size=256 * 1024)
    producer.init_transactions()
    committed, per_txn = 0, 10_000
    value = b"v" * 100
    for start in range(0, records, per_txn):
        n = min(per_txn, records - start)
        producer.begin_transaction()
        for i in range(start, start + n):
            producer.send("bench", value, key=b"%010d" % i, partition=i % 4)
        abort = (start // per_txn) % 10 == 9
        producer.abort_transaction() if abort else producer.commit_transaction()
        committed += 0 if abort else n
    producer.close()
    return committed


def run_engine(store: str, engine: str, reps: int) -> tuple[float, float, float, str]:
    """(first answer s, repeated statement median s, the run's CPU s, the first result's text) of one
    `txlog sql` run. On a shared machine a first answer far above the CPU it took is other processes'."""
    import resource

    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    script = ";\n".join([STATEMENT] * (reps + 1)) + ";\n"
    argv = [sys.executable, "-m", "cli.main", "--data-dir", store, "sql", "--engine", engine, "--output", "csv", "-"]
    env = cli_env()
    started = time.monotonic()
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None and proc.stderr is not None
    proc.stdin.write(script)
    proc.stdin.close()
    first: float | None = None
    times = []
    for line in proc.stderr:
        match = _DONE.match(line.strip())
        if match:
            if first is None:
                first = time.monotonic() - started
            times.append(float(match.group(1)))
    assert proc.stdout is not None
    out = proc.stdout.read()  # a few lines: the pipe never filled while stderr was read
    proc.wait()
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
    assert proc.returncode == 0 and first is not None, (engine, proc.returncode, out)
    return first, warm_median(times), cpu, out.split("\n\n")[0]


def rows(store: str, committed: int, reps: int, engines: list[str]) -> list[tuple[str, float, float, float]]:
    """(engine, first s, repeated s, run CPU s) per engine, each result checked against the committed count."""
    out, results = [], set()
    for engine in engines:
        first, repeated, cpu, result = run_engine(store, engine, reps)
        lines = result.strip().splitlines()[1:]
        assert sum(int(line.split(",")[1]) for line in lines) == committed, (engine, result)
        results.add(result.strip())
        out.append((engine, first, repeated, cpu))
    assert len(results) == 1, results  # the engines agree
    return out


def report(table: list[tuple[str, float, float, float]], records: int, reps: int) -> None:
    print(f"txlog sql over {records:,} records (first answer goal: <= 2 s with the embedded engine)")
    cpu_title = f"CPU s, whole run of {reps + 1}"
    print(f"  {'engine':<8} {'first answer s':>15} {'repeated statement s':>21} {cpu_title:>24}")
    for engine, first, repeated, cpu in table:
        print(f"  {engine:<8} {first:>15.2f} {repeated:>21.3f} {cpu:>24.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=None)
    parser.add_argument("--big", action="store_true", help=f"{BIG:,} records (default {SMALL:,})")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--engines", default="duckdb,spark")
    parser.add_argument("--work-dir", default=None)
    args = parser.parse_args()
    records = args.records or (BIG if args.big else SMALL)
    with scratch_dir(args.work_dir, "bench-sql-") as work:
        store = os.path.join(work, "store")
        committed = build_store(store, records)
        report(rows(store, committed, args.reps, args.engines.split(",")), records, args.reps)


if __name__ == "__main__":
    main()
