"""On-demand benchmark of the Spark `txlog` source: the same rows read from a txlog store and from Parquet.

Run: python tests/benchmarks/bench_spark.py [--records N] [--partitions P] [--txn-records K]
         [--abort-every A] [--batch-kb B] [--reps R] [--cores C] [--work-dir DIR [--reuse]]
         [--skip-profile] [--top T]

Why: the source's promise is that a Spark job can read a transactional log where it lies,
without first copying it to a columnar format. Parquet, read by Spark's own vectorised
reader, is what such a copy would be, so it is the baseline, measured in the same run on
the same rows.

The store (topic "bench", P partitions, default 4) is built straight from batches, not
through Producer: each partition holds rounds of two transactional producers' transactions
of K records (default 500), their batches (B KiB, default 16: ~130 records of a 16-byte key
and 100-byte value) interleaved in the log, each transaction ended by its COMMIT or ABORT
marker (every A-th transaction aborted, default 10 = 10%), plus one plain (non-transactional)
batch per round. So read_committed has real filtering to do: aborted data interleaved with
committed data, `.txnindex` entries and markers. Appends are the real PartitionLog.append /
append_marker, with fsync skipped (setup only; os.sync() afterwards). `--records` counts data
records (committed + aborted + plain). Building is checked by a read_committed Consumer pass
over the whole store, and every timed query checks its row count. With `--work-dir` the store
and its Parquet copy are kept there, and `--reuse` skips building them when the parameters
match; without it both live in a scratch directory removed at the end.

The Parquet copy is written once, before timing, with `df.write.parquet` from the txlog
source under read_committed: exactly the rows (key, value, topic, partition, offset,
timestamp, timestampType) the txlog queries return.

Timed, in one local[2] session, each query built from `spark.read` (so the timing includes
what a user's query pays: schema, planning, the scan, the aggregate), variants interleaved
inside a repetition, the first (cold) repetition dropped and the median of the rest shown:
  count           df.count()
  groupBy         df.groupBy("partition").agg(count("*"), sum(length("value")), max("offset")).collect()
  select3         df.select("key", "offset", "timestamp") written to Spark's no-op sink (every row
                  materialised, nothing collected: the scan with column pruning)
for txlog read_committed (RC), txlog read_uncommitted (RU, groupBy only; it returns the
aborted records too, so its rate counts more rows) and Parquet. "txlog" is the JVM reader
(txlog/spark/jvm/, what a session with its jar reads batches with), "txlog ... py" the Python
source (what a session without a JDK reads with); a line gives JVM/Python ratios. Records/s = rows the query
covers / wall second. "CPU s" is the CPU of the whole process tree during the query
(this driver, the JVM, Spark's Python workers), split into JVM and Python-worker parts,
and "others" the CPU other processes took meanwhile (from /proc/stat): on a shared machine
a wall time our CPU time does not explain is theirs, so records per CPU second are shown
too. A query over one offset per partition (endingOffsets 1) shows the source's fixed
per-query cost. Parquet's count() reads only footers, so that ratio shows what a columnar
copy saves rather than the scan speed. Target: txlog groupBy ≥ 1.0x Parquet's rate.

Then, unless --skip-profile, the executor's half is run in this process, without Spark:
`plan_batch` + `read_range` with the Arrow schema Spark hands the reader, in CPU seconds
(one Python thread). It shows the Python-side ceiling (Spark on 2 cores can at best double
one core's rate) and where the time goes: stages (frame + CRC + abort filter, + record
decoding, + column gathering and Arrow arrays, and the same with the cyclic GC disabled, with
the CPU spent inside collections measured by gc.callbacks), the Arrow step taken apart on
one flush's worth of records (with pa.repeat as the alternative for constant columns), and
a cProfile of one partition's read_range.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import pstats
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from itertools import repeat, zip_longest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchutil import (
    MiB,
    Sample,
    after_cold,
    fsync_skipped,
    median_after_cold,
    scratch_dir,
    spread,
    verdict,
    warm_median,
)

from storage import Store
from storage.records import ControlType, build_batch
from txlog.clients.consumer import Consumer
from txlog.topic_partition import TopicPartition

TOPIC = "bench"
KEY_BYTES, VALUE_BYTES = 16, 100
# encoded record: length(2) attributes(1) timestampDelta(1) offsetDelta(≤2) key(1+16) value(2+100) headers(1)
RECORD_BYTES = 2 + 1 + 1 + 2 + 1 + KEY_BYTES + 2 + VALUE_BYTES + 1
EPOCH = 0
TXLOG_VS_PARQUET_TARGET = 1.0
BUILD_VERSION = 1  # bump when the layout below changes, so --reuse rebuilds
TS0 = 1_700_000_000_000


# ---- building the store ------------------------------------------------------------------------------


class _Records:
    """Deterministic keys, values and timestamps; record i gets key b"key-%012d" % i."""

    def __init__(self) -> None:
        self._blob = os.urandom(1 << 20)
        self._span = len(self._blob) - VALUE_BYTES
        self.next = 0

    def take(self, n: int) -> list[tuple]:
        i, blob, span = self.next, self._blob, self._span
        self.next += n
        return [
            (b"key-%012d" % j, blob[(o := j * 7919 % span) : o + VALUE_BYTES], None, TS0 + j // 64)
            for j in range(i, i + n)
        ]


def _batches(source: _Records, n: int, per_batch: int, **fields) -> tuple[list[bytes], int]:
    """n records as batches of `per_batch`; returns the batches and the sequence after them."""
    out, seq = [], fields.pop("base_sequence", -1)
    while n:
        k = min(n, per_batch)
        out.append(build_batch(source.take(k), base_sequence=seq, **fields))
        if seq >= 0:
            seq += k
        n -= k
    return out, seq


def build_store(root: str, args: argparse.Namespace) -> dict:
    """Write the store; returns what a reader must find (per-partition and total counts)."""
    per_batch = max(1, (args.batch_kb * 1024 - 61) // RECORD_BYTES)
    source = _Records()
    with fsync_skipped():  # setup only, see the docstring
        store = Store.open(root)
        try:
            store.create_topic(TOPIC, args.partitions)
            pids = [store.allocate_producer_id() for _ in range(2)]
            txns = 0
            parts = []
            for p in range(args.partitions):
                log = store.partition(TOPIC, p)
                quota = args.records // args.partitions + (p < args.records % args.partitions)
                c = {"committed": 0, "aborted": 0, "plain": 0, "markers": 0, "aborted_txns": 0}
                seqs = {pid: 0 for pid in pids}
                while quota:
                    sizes = []
                    for _ in pids:
                        sizes.append(min(args.txn_records, quota))
                        quota -= sizes[-1]
                    lanes = []
                    for pid, n in zip(pids, sizes, strict=True):
                        batches, seqs[pid] = _batches(
                            source,
                            n,
                            per_batch,
                            producer_id=pid,
                            producer_epoch=EPOCH,
                            base_sequence=seqs[pid],
                            is_transactional=True,
                        )
                        lanes.append(batches)
                    # the two producers' batches interleaved, as concurrent producers would leave them
                    interleaved = [b for pair in zip_longest(*lanes) for b in pair if b is not None]
                    if interleaved:
                        log.append(b"".join(interleaved))
                    for pid, n in zip(pids, sizes, strict=True):
                        if not n:
                            continue
                        txns += 1
                        abort = txns % args.abort_every == 0
                        log.append_marker(
                            ControlType.ABORT if abort else ControlType.COMMIT,
                            pid,
                            EPOCH,
                            timestamp=TS0 + source.next // 64,
                        )
                        c["aborted" if abort else "committed"] += n
                        c["aborted_txns"] += abort
                        c["markers"] += 1
                    n = min(per_batch, quota)
                    if n:
                        quota -= n
                        log.append(_batches(source, n, per_batch)[0][0])
                        c["plain"] += n
                c["log_end"] = log.log_end_offset
                assert c["log_end"] == c["committed"] + c["aborted"] + c["plain"] + c["markers"], (p, c)
                assert log.last_stable_offset == log.log_end_offset
                parts.append(c)
        finally:
            store.close()
    total = {k: sum(c[k] for c in parts) for k in parts[0]}
    total["visible"] = total["committed"] + total["plain"]
    total["data"] = total["visible"] + total["aborted"]
    total["transactions"] = txns
    total["records_per_batch"] = per_batch
    return {"partitions": parts, "total": total}


def check_store(root: str, expected: dict) -> tuple[int, float]:
    """Cheap proof the files are a valid store: offsets, LSO and `.txnindex` entries per partition,
    and a read_committed Consumer pass over everything (counts per partition, offsets rising,
    no key twice on partition 0)."""
    start = time.perf_counter()
    store = Store.open(root, read_only=True)
    try:
        for p, want in enumerate(expected["partitions"]):
            log = store.partition(TOPIC, p)
            assert log.log_end_offset == log.last_stable_offset == want["log_end"], (p, log, want)
            assert len(log.aborted_transactions(0, want["log_end"])) == want["aborted_txns"], p
        consumer = Consumer(store, isolation_level="read_committed", enable_auto_commit=False, max_poll_records=10_000)
        try:
            consumer.assign([TopicPartition(TOPIC, p) for p in range(len(expected["partitions"]))])
            seen, per_partition, last_offset, keys = 0, {}, {}, set()
            while batch := consumer.poll():
                seen += len(batch)
                for rec in batch:
                    p = rec.partition
                    per_partition[p] = per_partition.get(p, 0) + 1
                    assert rec.offset > last_offset.get(p, -1) and len(rec.value) == VALUE_BYTES, rec
                    last_offset[p] = rec.offset
                    if p == 0:
                        keys.add(rec.key)
        finally:
            consumer.close()
    finally:
        store.close()
    want = [c["committed"] + c["plain"] for c in expected["partitions"]]
    assert seen == expected["total"]["visible"], (seen, expected["total"])
    assert [per_partition.get(p, 0) for p in range(len(want))] == want, (per_partition, want)
    assert len(keys) == want[0], "partition 0 returned a record twice"
    return seen, time.perf_counter() - start


def build_params(args: argparse.Namespace) -> dict:
    return {
        "version": BUILD_VERSION,
        "records": args.records,
        "partitions": args.partitions,
        "txn_records": args.txn_records,
        "abort_every": args.abort_every,
        "batch_kb": args.batch_kb,
    }


def prepare(workdir: str, args: argparse.Namespace, spark) -> tuple[dict, str]:
    """The store and its Parquet copy under `workdir`, built unless --reuse finds matching ones."""
    root, parquet = os.path.join(workdir, "store"), os.path.join(workdir, "parquet")
    manifest_path = os.path.join(workdir, "manifest.json")
    params = build_params(args)
    if args.reuse and os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)
        if manifest.get("params") == params and os.path.isdir(root) and os.path.isdir(parquet):
            print(f"reusing the store and Parquet copy in {workdir}")
            return manifest, root
        print(f"{workdir} holds a different build; rebuilding")
    for path in (root, parquet, manifest_path):
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)

    start = time.perf_counter()
    expected = build_store(root, args)
    built_s = time.perf_counter() - start
    seen, check_s = check_store(root, expected)
    print(f"built the store in {built_s:.1f} s; Consumer read_committed check: {seen:,} records in {check_s:.1f} s")

    start = time.perf_counter()
    txlog_df(spark, root, "read_committed").write.mode("overwrite").parquet(parquet)
    written = spark.read.parquet(parquet).count()
    assert written == expected["total"]["visible"], (written, expected["total"])
    print(f"wrote the Parquet copy in {time.perf_counter() - start:.1f} s")
    manifest = {"params": params, "expected": expected, "built_s": built_s}
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=1)
    return manifest, root


# ---- Spark queries ----------------------------------------------------------------------------------


def txlog_df(spark, root: str, isolation: str, ending: str | None = None, reader_kind: str = "jvm"):
    """The txlog DataFrame read by the JVM reader ("jvm": txlog.spark.read, which plans and loads
    format "txlog_jvm") or by the Python source ("python": format "txlog")."""
    import txlog.spark

    options = {"subscribe": TOPIC, "isolation.level": isolation, "endingOffsets": ending}
    if reader_kind == "jvm":
        return txlog.spark.read(spark, root, **options)
    reader = spark.read.format(txlog.spark.FORMAT)
    for key, value in options.items():
        if value is not None:
            reader = reader.option(key, value)
    return reader.load(root)


def select3(df) -> None:
    """Three columns of every row, materialised by Spark's no-op sink (nothing comes back to check)."""
    df.select("key", "offset", "timestamp").write.format("noop").mode("overwrite").save()


def group_by(df) -> list[tuple]:
    from pyspark.sql import functions as F

    rows = df.groupBy("partition").agg(F.count("*"), F.sum(F.length("value")), F.max("offset")).collect()
    return sorted(tuple(r) for r in rows)


class TreeCpu:
    """CPU seconds from /proc: (driver, JVM, Python workers, the whole machine).

    Spark's work happens in the JVM this driver started and in the Python workers the JVM
    forks, none of which time.process_time() sees. A process that exits is counted in its
    parent's cutime/cstime once reaped, so summing live processes loses nothing. The
    machine's busy time (/proc/stat) minus ours is what other processes took meanwhile:
    on a shared machine it explains a wall time that our CPU time does not.
    """

    TICK = os.sysconf("SC_CLK_TCK")

    @classmethod
    def reading(cls) -> tuple[float, float, float, float]:
        procs = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read().decode("ascii", "replace")
            except OSError:
                continue
            comm = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2 :].split()
            procs[int(name)] = (int(fields[1]), comm, sum(map(int, fields[11:15])))
        me = os.getpid()
        children: dict[int, list[int]] = {}
        for pid, (ppid, _, _) in procs.items():
            children.setdefault(ppid, []).append(pid)
        driver = procs.get(me, (0, "", 0))[2]
        jvm = workers = 0
        stack = list(children.get(me, []))
        while stack:
            pid = stack.pop()
            _, comm, ticks = procs[pid]
            if comm == "java":
                jvm += ticks
            else:
                workers += ticks
            stack.extend(children.get(pid, []))
        with open("/proc/stat") as f:
            cpu = [int(x) for x in f.readline().split()[1:]]
        machine = sum(cpu[:3]) + sum(cpu[5:8])  # user nice system, irq softirq steal (not idle, iowait)
        return driver / cls.TICK, jvm / cls.TICK, workers / cls.TICK, machine / cls.TICK


class Run:
    """One timed query: a Sample (wall, our CPU), its JVM and worker parts, and other processes' CPU."""

    def __init__(self, wall: float, cpu: tuple[float, float, float, float]):
        self.driver, self.jvm, self.workers, machine = cpu
        ours = self.driver + self.jvm + self.workers
        self.sample = Sample(wall, ours)
        self.others = max(0.0, machine - ours)


def timed_query(query: Callable[[], object]) -> tuple[Run, object]:
    before = TreeCpu.reading()
    start = time.perf_counter()
    result = query()
    wall = time.perf_counter() - start
    after = TreeCpu.reading()
    return Run(wall, tuple(a - b for a, b in zip(after, before, strict=True))), result


def run_spark(spark, root: str, parquet: str, expected: dict, reps: int) -> tuple[dict, dict]:
    total = expected["total"]
    # The fixed cost of a query: one offset per partition, so it still runs one task per
    # partition as the full queries do (an empty plan would run a single empty task).
    partitions = len(expected["partitions"])
    tiny = json.dumps({TOPIC: {str(p): 1 for p in range(partitions)}})
    rc, ru = "read_committed", "read_uncommitted"
    # "txlog" is the JVM reader (what a session with its jar reads with), "txlog ... py" the Python source
    variants: dict[str, tuple[int, Callable[[], object]]] = {
        "count txlog RC": (total["visible"], lambda: txlog_df(spark, root, rc).count()),
        "count txlog RC py": (total["visible"], lambda: txlog_df(spark, root, rc, reader_kind="python").count()),
        "count Parquet": (total["visible"], lambda: spark.read.parquet(parquet).count()),
        "groupBy txlog RC": (total["visible"], lambda: group_by(txlog_df(spark, root, rc))),
        "groupBy txlog RC py": (total["visible"], lambda: group_by(txlog_df(spark, root, rc, reader_kind="python"))),
        "groupBy txlog RU": (total["data"], lambda: group_by(txlog_df(spark, root, ru))),
        "groupBy txlog RU py": (total["data"], lambda: group_by(txlog_df(spark, root, ru, reader_kind="python"))),
        "groupBy Parquet": (total["visible"], lambda: group_by(spark.read.parquet(parquet))),
        "select3 txlog RC": (total["visible"], lambda: select3(txlog_df(spark, root, rc))),
        "select3 txlog RC py": (total["visible"], lambda: select3(txlog_df(spark, root, rc, reader_kind="python"))),
        "select3 Parquet": (total["visible"], lambda: select3(spark.read.parquet(parquet))),
        "groupBy txlog RU, 1 offset": (partitions, lambda: group_by(txlog_df(spark, root, ru, tiny))),
        "groupBy txlog RU py, 1 offset": (
            partitions,
            lambda: group_by(txlog_df(spark, root, ru, tiny, reader_kind="python")),
        ),
    }
    runs: dict[str, list[Run]] = {name: [] for name in variants}
    results: dict[str, object] = {}
    for _ in range(reps + 1):
        for name, (rows, query) in variants.items():
            run, result = timed_query(query)
            runs[name].append(run)
            if name.startswith("count"):
                assert result == rows, (name, result, rows)
            elif name.startswith("select3"):
                pass  # the no-op sink returns nothing; count and groupBy check the same rows
            else:
                assert sum(r[1] for r in result) == rows, (name, result, rows)
            results[name] = result
    # the same rows: the txlog RC aggregate and the Parquet aggregate must agree exactly
    assert results["groupBy txlog RC"] == results["groupBy txlog RC py"] == results["groupBy Parquet"], results
    assert results["groupBy txlog RU"] == results["groupBy txlog RU py"], results
    return runs, {name: rows for name, (rows, _) in variants.items()}


def report_spark(
    runs: dict[str, list[Run]], rows: dict[str, int], reps: int, cores: int
) -> tuple[dict[str, float], dict[str, tuple[float, ...]]]:
    """Print the Spark table; returns each query's records/s and medians (wall, CPU, JVM, workers, others)."""
    print(
        f"\nSpark local[{cores}]: median of {reps} queries after a cold one; records/s = rows the query covers / "
        f"wall second. CPU s = driver + JVM + Python\nworkers; 'others' = CPU s other processes took meanwhile "
        f"(the machine has {os.cpu_count()} cores); 'per CPU s' rates are less disturbed by them than wall "
        f"rates.\nVerdicts use wall rates."
    )
    rate, cpu_rate, med = {}, {}, {}
    for name, rs in runs.items():
        rest = after_cold(rs)
        wall, cpu = median_after_cold([r.sample for r in rs]), median_after_cold([r.sample for r in rs], "cpu")
        med[name] = (
            wall,
            cpu,
            statistics.median(r.jvm for r in rest),
            statistics.median(r.workers for r in rest),
            statistics.median(r.others for r in rest),
        )
        rate[name], cpu_rate[name] = rows[name] / wall, rows[name] / cpu
    print(
        f"{'query':<28}{'records':>11}{'seconds':>9}{'records/s':>12}{'vs Parquet':>11}{'target':>8}{'':<8}"
        f"{'CPU s':>7}{'JVM':>6}{'py':>6}{'others':>7}{'per CPU s':>11}{'vs Parquet':>11}"
    )
    for name in runs:
        wall, cpu, jvm, py, others = med[name]
        base = name.split()[0] + " Parquet"
        fixed_cost = "1 offset" in name  # its seconds are the point, not a rate
        compared = "txlog" in name and not fixed_cost
        line = f"{name:<28}{rows[name]:>11,}{wall:>9.3f}" + (f"{'-':>12}" if fixed_cost else f"{rate[name]:>12,.0f}")
        line += f"{rate[name] / rate[base]:>10.2f}x" if compared else f"{'':>11}"
        if name == "groupBy txlog RC":
            ratio = rate[name] / rate[base]
            line += f"{TXLOG_VS_PARQUET_TARGET:>7.1f}x {verdict(ratio, TXLOG_VS_PARQUET_TARGET):<7}"
        else:
            line += f"{'':<16}"
        line += f"{cpu:>7.2f}{jvm:>6.2f}{py:>6.2f}{others:>7.2f}"
        line += f"{'-':>11}" if fixed_cost else f"{cpu_rate[name]:>11,.0f}"
        line += f"{cpu_rate[name] / cpu_rate[base]:>10.2f}x" if compared else ""
        print(line)
    (rc_wall, rc_cpu, *_), (ru_wall, ru_cpu, *_) = med["groupBy txlog RC"], med["groupBy txlog RU"]
    rc_rows, ru_rows = rows["groupBy txlog RC"], rows["groupBy txlog RU"]
    print(
        f"read_committed vs read_uncommitted (groupBy): records/s RC/RU "
        f"{rate['groupBy txlog RC'] / rate['groupBy txlog RU']:.2f} ({rc_rows:,} vs {ru_rows:,} rows); "
        f"wall RC {rc_wall:.3f} s vs RU {ru_wall:.3f} s (RC/RU {rc_wall / ru_wall:.2f}); CPU s RC/RU "
        f"{rc_cpu / ru_cpu:.2f}, per row {rc_cpu / rc_rows / (ru_cpu / ru_rows):.2f}"
    )

    def python_twin(name: str) -> str:
        return name.replace(" txlog RC", " txlog RC py").replace(" txlog RU", " txlog RU py")

    print(
        "JVM reader vs Python source, records/s: "
        + "; ".join(
            f"{name} {rate[name] / rate[python_twin(name)]:.2f}x"
            for name in runs
            if "txlog" in name and " py" not in name and "1 offset" not in name
        )
    )
    print(
        "run-to-run spread (min..max s): "
        + "; ".join(
            f"{name} {lo:.3f}..{hi:.3f}"
            for name, (lo, hi) in ((n, spread([r.sample for r in rs])) for n, rs in runs.items())
        )
    )
    return rate, med


# ---- in-process profile of the executor's read -------------------------------------------------------


class GcMeter:
    """CPU seconds spent in CPython's cyclic garbage collector (gc.callbacks start/stop)."""

    def __init__(self) -> None:
        self.seconds, self._start = 0.0, 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.process_time()
        else:
            self.seconds += time.process_time() - self._start

    def __enter__(self):
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self)


def median_of(step: Callable[[], int], rows: int, runs: int = 4) -> tuple[float, float]:
    """(median CPU s, median GC CPU s) of `runs` calls after the first, each checked to return `rows`.

    CPU time, not wall: this part is one Python thread, and CPU time is what other processes
    sharing the cores disturb least."""
    walls, gcs = [], []
    for _ in range(runs):
        with GcMeter() as meter:
            start = time.process_time()
            got = step()
            walls.append(time.process_time() - start)
        gcs.append(meter.seconds)
        assert got == rows, (got, rows)
    return warm_median(walls), warm_median(gcs)


def profile_read(
    spark, root: str, expected: dict, spark_rate: dict[str, float], spark_cpu: dict[str, tuple], cores: int, top: int
) -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    from txlog.scan.range_reader import range_batches, read_range
    from txlog.spark.options import parse_options, plan_batch

    schema = to_arrow_schema(txlog_df(spark, root, "read_committed", reader_kind="python").schema, timezone="UTC")

    def plan(isolation: str):
        return plan_batch(parse_options({"path": root, "subscribe": TOPIC, "isolation.level": isolation}))

    def frames(ranges) -> int:
        return sum(b.records_count for r in ranges for b in range_batches(r))

    def decoded(ranges) -> int:
        return sum(len(b.record_tuples()) for r in ranges for b in range_batches(r))

    def full(ranges) -> int:
        return sum(batch.num_rows for r in ranges for batch in read_range(r, schema))

    def full_without_gc(ranges) -> int:
        gc.disable()
        try:
            return full(ranges)
        finally:
            gc.enable()

    print(
        "\nIn-process executor read, no Spark: every partition in turn in this process, page cache warm, "
        "median of 3 after a cold one,\nin CPU seconds (records/s = records per CPU second). Each stage includes "
        "the ones above it; 'own' is what it adds, as a share of\nthe whole read_range; GC s = CPU seconds inside "
        "the cyclic garbage collector."
    )
    print(f"{'stage':<52}{'records':>11}{'CPU s':>8}{'records/s':>12}{'own':>6}{'GC s':>7}")
    in_process = {}
    for label, isolation, rows in (
        ("RC", "read_committed", expected["total"]["visible"]),
        ("RU", "read_uncommitted", expected["total"]["data"]),
    ):
        start = time.process_time()
        ranges = plan(isolation)
        print(f"{label + ' plan_batch (driver side, once per query)':<52}{'':>11}{time.process_time() - start:>8.3f}")
        steps = {
            "frame + CRC + abort filter (visible_batches)": frames,
            "  + decode (batch.record_tuples())": decoded,
            "  + gather columns + Arrow (read_range)": full,
            "read_range with the GC disabled": full_without_gc,
        }
        times = {name: median_of(partial(step, ranges), rows) for name, step in steps.items()}
        whole = times["  + gather columns + Arrow (read_range)"][0]
        previous = 0.0
        for name, (seconds, gc_seconds) in times.items():
            own = f"{(seconds - previous) / whole:>6.0%}" if "disabled" not in name else f"{'':>6}"
            previous = seconds
            print(f"{label + ' ' + name:<52}{rows:>11,}{seconds:>8.3f}{rows / seconds:>12,.0f}{own}{gc_seconds:>7.3f}")
        nogc = times["read_range with the GC disabled"][0]
        print(
            f"{'':<4}=> the cyclic GC costs {whole - nogc:.3f} s = {(whole - nogc) / whole:.0%} of read_range "
            f"({times['  + gather columns + Arrow (read_range)'][1]:.3f} s measured inside collections)"
        )
        in_process[label] = (rows, whole, nogc)
    print("Against Spark's groupBy of the same rows through the Python source (Spark CPU from the table above):")
    for label, query in (("RC", "groupBy txlog RC py"), ("RU", "groupBy txlog RU py")):
        rows, whole, nogc = in_process[label]
        wall, cpu, jvm, py, others = spark_cpu[query]
        ceiling = rows / whole * min(cores, len(expected["partitions"]))
        print(
            f"  {label}: read_range alone {rows / whole:,.0f} records/s per core ({rows / nogc:,.0f} with the GC "
            f"off), so a {cores}-core ceiling of {ceiling:,.0f}; Spark reached {spark_rate[query]:,.0f} records/s "
            f"= {spark_rate[query] / ceiling:.0%} of it.\n"
            f"      Spark spent {py:.2f} CPU s in Python workers (read_range alone: {whole:.2f}) and {jvm:.2f} in "
            f"the JVM: {cpu:.2f} CPU s over {wall:.2f} s wall on {cores} cores = {cpu / wall / cores:.0%} busy "
            f"(other processes took {others:.2f} CPU s meanwhile)."
        )

    r0 = plan("read_committed")[0]
    arrow_pieces(r0)

    profiler = cProfile.Profile()
    profiler.enable()
    n = sum(batch.num_rows for batch in read_range(r0, schema))
    profiler.disable()
    assert n == expected["partitions"][0]["committed"] + expected["partitions"][0]["plain"]
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).strip_dirs().sort_stats("tottime").print_stats(top)
    text = out.getvalue()
    print(
        f"\ncProfile of read_range over partition {r0.partition} (read_committed, {n:,} records), "
        f"top {top} by own time (GC time lands in whichever function allocated):"
    )
    print(text[text.index("   ncalls") :].rstrip() if "   ncalls" in text else text)


def arrow_pieces(r0) -> None:
    """Time what read_range's flush() does, piece by piece, on the first chunk of a range it would flush."""
    import pyarrow as pa

    from txlog.scan.arrow_columns import timestamp_array
    from txlog.scan.range_reader import ROWS_PER_ARROW_BATCH, range_batches

    batches, n = [], 0
    for batch in range_batches(r0):
        batches.append(batch)
        n += batch.records_count
        if n >= ROWS_PER_ARROW_BATCH:
            break
    decode_s = _best(lambda: sum(len(b.record_tuples()) for b in batches))  # nothing kept alive: pure decode
    records = [rec for b in batches for rec in b.record_tuples()]
    cols = list(zip(*records, strict=True))
    topic_scalar, int_scalar = pa.scalar(TOPIC, pa.string()), pa.scalar(0, pa.int32())
    pieces = {
        "zip(*records) (rows to columns)": lambda: list(zip(*records, strict=True)),
        "pa.array(keys, binary)": lambda: pa.array(cols[2], pa.binary()),
        "pa.array(values, binary)": lambda: pa.array(cols[3], pa.binary()),
        "pa.array(offsets, int64)": lambda: pa.array(cols[0], pa.int64()),
        "timestamp_array(timestamps)": lambda: timestamp_array(cols[1]),
        "topic: pa.array(repeat(topic, n))": lambda: pa.array(repeat(TOPIC, n), pa.string(), size=n),
        "partition: pa.array(repeat(p, n))": lambda: pa.array(repeat(0, n), pa.int32(), size=n),
        "timestampType: list.extend + pa.array": lambda: pa.array(list(repeat(0, n)), pa.int32()),
        "alternative: pa.repeat(string scalar, n)": lambda: pa.repeat(topic_scalar, n),
        "alternative: pa.repeat(int32 scalar, n)": lambda: pa.repeat(int_scalar, n),
    }
    print(
        f"\nread_range's flush() taken apart, on the first {n:,} visible records of partition {r0.partition} "
        f"(one flush's worth; least CPU of 3); decode for comparison:"
    )
    print(f"  {'decode (batch.record_tuples())':<42}{decode_s * 1e3:>8.1f} ms {decode_s / n * 1e9:>7.0f} ns/record")
    for name, fn in pieces.items():
        seconds = _best(fn)
        print(f"  {name:<42}{seconds * 1e3:>8.1f} ms {seconds / n * 1e9:>7.0f} ns/record")


def _best(fn: Callable[[], object], runs: int = 3) -> float:
    """Least CPU seconds of `runs` calls."""
    out = []
    for _ in range(runs):
        start = time.process_time()
        fn()
        out.append(time.process_time() - start)
    return min(out)


# ---- main -------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--records",
        type=int,
        default=2_000_000,
        help="data records written, committed + aborted + plain (default 2000000)",
    )
    parser.add_argument("--partitions", type=int, default=4, help="partitions of the topic (default 4)")
    parser.add_argument("--txn-records", type=int, default=500, help="records per transaction (default 500)")
    parser.add_argument("--abort-every", type=int, default=10, help="abort every A-th transaction (default 10)")
    parser.add_argument("--batch-kb", type=int, default=16, help="record batch size in KiB (default 16)")
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions after the cold one (default 3)")
    parser.add_argument("--cores", type=int, default=2, help="Spark master local[N] (default 2)")
    parser.add_argument(
        "--work-dir",
        help="keep the store and its Parquet copy here (default: a scratch "
        "directory under <repo>/.bench-tmp, removed at the end)",
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="with --work-dir: skip building when it holds a store built with the same parameters",
    )
    parser.add_argument("--skip-profile", action="store_true", help="skip the in-process profile of read_range")
    parser.add_argument("--top", type=int, default=20, help="functions shown by the cProfile (default 20)")
    args = parser.parse_args()
    if args.reuse and not args.work_dir:
        parser.error("--reuse needs --work-dir (the default scratch directory is removed after each run)")

    import txlog.spark
    from txlog.spark.jvm_reader import jvm_available

    spark = txlog.spark.local_session(f"local[{args.cores}]", app_name="bench_spark")
    if not jvm_available(spark):
        spark.stop()
        raise SystemExit("bench_spark: the JVM reader is not on the session (is a JDK with javac installed?)")
    try:
        if args.work_dir:
            os.makedirs(args.work_dir, exist_ok=True)
            run(spark, os.path.abspath(args.work_dir), args)
        else:
            with scratch_dir(None, "bench-spark-") as workdir:
                run(spark, workdir, args)
    finally:
        spark.stop()


def run(spark, workdir: str, args: argparse.Namespace) -> None:
    manifest, root = prepare(workdir, args, spark)
    expected, total = manifest["expected"], manifest["expected"]["total"]
    parquet = os.path.join(workdir, "parquet")
    store_bytes = sum(
        os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs if f.endswith(".log")
    )
    parquet_bytes = sum(
        os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(parquet) for f in fs if f.endswith(".parquet")
    )
    print(
        f"store: topic '{TOPIC}', {len(expected['partitions'])} partitions, {total['data']:,} data records "
        f"({KEY_BYTES}-byte key, {VALUE_BYTES}-byte value) = {total['committed']:,} committed + "
        f"{total['aborted']:,} aborted + {total['plain']:,} plain, {total['markers']:,} markers; "
        f"{total['transactions']:,} transactions of ≤{args.txn_records} records, {total['aborted_txns']:,} "
        f"aborted; ~{total['records_per_batch']} records per batch; .log files {store_bytes / MiB:.1f} MiB, "
        f"Parquet {parquet_bytes / MiB:.1f} MiB"
    )
    runs, rows = run_spark(spark, root, parquet, expected, args.reps)
    rate, med = report_spark(runs, rows, args.reps, args.cores)
    if not args.skip_profile:
        profile_read(spark, root, expected, rate, med, args.cores, args.top)


if __name__ == "__main__":
    main()
