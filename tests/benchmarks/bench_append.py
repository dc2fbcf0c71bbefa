"""On-demand benchmark of durable appends: PartitionLog.append against os.write + fdatasync.

Run: python tests/benchmarks/bench_append.py [--size-mb N | --records N] [--batch-kb K] [--reps R] [--profile]

Every append call carries one ~64 KB batch of records with a 10-byte key and a 100-byte
value, and PartitionLog.append fsyncs once per call. The baseline writes the very same
pre-built bytes with plain `os.write` + `os.fdatasync`, one fdatasync per 64 KB, to a
fresh file in the same directory. All batches are built before timing (encoding is
bench_codec.py's business), every repetition starts from a fresh partition / file, the
variants are interleaved within a repetition so drift hits them alike, the first (cold)
repetition is dropped and the median of the rest is reported.

Variants (rates in MiB/s of batch bytes, records/s, and the ratio to the baseline):
  idempotent, index entry/call   pid/epoch/sequence set, default index.interval.bytes
                                 (4096 < 64 KB, so every call writes one .index and
                                 one .timeindex entry - counted and printed)   target >= 0.50
  idempotent, no index entries   same, index.interval.bytes = 2^31-1: isolates index cost
  non-idempotent                 producer id -1, default index interval
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchutil import after_cold, scratch_dir, warm_median

from storage import Store
from storage.records import BatchBuilder, RecordBatch, build_batch

ROOT = Path(__file__).resolve().parents[2]

MiB = 1 << 20
KEY_BYTES, VALUE_BYTES = 10, 100
TARGET = 0.50
NO_INDEX = 2**31 - 1


def records_per_batch(batch_bytes: int) -> int:
    """How many 10 B / 100 B records a producer with batch.size = batch_bytes puts in one batch."""
    builder = BatchBuilder(max_bytes=batch_bytes)
    ts = int(time.time() * 1000)
    while builder.append(b"k" * KEY_BYTES, b"v" * VALUE_BYTES, None, ts):
        pass
    return builder.record_count


def build_batches(
    count: int, per_batch: int, *, producer_id: int, producer_epoch: int, idempotent: bool
) -> list[bytes]:
    """`count` batches a producer would send in order: consecutive sequences when idempotent."""
    ts = int(time.time() * 1000)
    out = []
    for i in range(count):
        records = [(os.urandom(KEY_BYTES), os.urandom(VALUE_BYTES), None, ts + i) for _ in range(per_batch)]
        if idempotent:
            out.append(
                build_batch(
                    records, producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=i * per_batch
                )
            )
        else:
            out.append(build_batch(records))
    return out


def run_baseline(workdir: str, batches: list[bytes]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) to write and fdatasync every batch."""
    path = os.path.join(workdir, "baseline.bin")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
    try:
        write, sync = os.write, os.fdatasync
        cpu, start = time.process_time(), time.perf_counter()
        for b in batches:
            write(fd, b)
            sync(fd)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    finally:
        os.close(fd)
        os.unlink(path)
    return elapsed, cpu


class TxlogRun:
    """One repetition against a fresh store; records what the index got, for the printout."""

    def __init__(self, workdir: str, batches: list[bytes], index_interval: int | None):
        self.workdir, self.batches, self.index_interval = workdir, batches, index_interval
        self.index_entries = self.time_index_entries = 0

    def __call__(self, profiler: cProfile.Profile | None = None) -> tuple[float, float]:
        root = tempfile.mkdtemp(prefix="store-", dir=self.workdir)
        store = Store.open(os.path.join(root, "s"))
        try:
            config = {} if self.index_interval is None else {"index.interval.bytes": self.index_interval}
            store.create_topic("t", 1, config=config)
            log = store.partition("t", 0)
            append = log.append
            if profiler is not None:
                profiler.enable()
            cpu, start = time.process_time(), time.perf_counter()
            for b in self.batches:
                append(b)
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
            if profiler is not None:
                profiler.disable()
            seg = log.segments[-1]
            expected = sum(RecordBatch.parse(b).records_count for b in self.batches)
            assert log.log_end_offset == expected, (log.log_end_offset, expected)
            self.index_entries = len(seg.offset_index)
            self.time_index_entries = len(seg.time_index)
        finally:
            store.close()
            shutil.rmtree(root)
        return elapsed, cpu


def median_after_cold(samples: list[tuple[float, float]], which: int = 0) -> float:
    """Median wall (which=0) or CPU (which=1) seconds, the cold first repetition dropped."""
    return warm_median([s[which] for s in samples])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--size-mb", type=float, default=32, help="MiB appended per repetition (default 32)")
    size.add_argument("--records", type=int, help="records appended per repetition (overrides --size-mb)")
    parser.add_argument("--batch-kb", type=int, default=64, help="batch size in KiB (default 64)")
    parser.add_argument("--reps", type=int, default=5, help="timed repetitions after the cold one (default 5)")
    parser.add_argument("--dir", help="parent of the scratch directory (default <repo>/.bench-tmp)")
    parser.add_argument(
        "--profile", action="store_true", help="also cProfile one idempotent run and print the top functions"
    )
    args = parser.parse_args()

    per_batch = records_per_batch(args.batch_kb * 1024)
    if args.records is not None:
        count = max(1, -(-args.records // per_batch))
    else:
        approx = len(build_batches(1, per_batch, producer_id=0, producer_epoch=0, idempotent=True)[0])
        count = max(1, round(args.size_mb * MiB / approx))
    idem = build_batches(count, per_batch, producer_id=0, producer_epoch=0, idempotent=True)
    plain = build_batches(count, per_batch, producer_id=0, producer_epoch=0, idempotent=False)
    total_bytes = sum(map(len, idem))
    total_records = count * per_batch

    with scratch_dir(args.dir, "bench-append-") as workdir:
        idem_indexed = TxlogRun(workdir, idem, None)
        idem_unindexed = TxlogRun(workdir, idem, NO_INDEX)
        plain_indexed = TxlogRun(workdir, plain, None)
        variants: list[tuple[str, Callable[[], tuple[float, float]], list[bytes], float | None]] = [
            ("os.write+fdatasync (baseline)", lambda: run_baseline(workdir, idem), idem, None),
            ("idempotent, index entry/call", idem_indexed, idem, TARGET),
            ("idempotent, no index entries", idem_unindexed, idem, TARGET),
            ("non-idempotent", plain_indexed, plain, None),
        ]
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name, *_ in variants}
        for _ in range(args.reps + 1):
            for name, fn, _, _ in variants:
                samples[name].append(fn())

        base = median_after_cold(samples[variants[0][0]])
        print(
            f"{count} append calls x 1 batch of {per_batch} records ({KEY_BYTES} B key, {VALUE_BYTES} B value) "
            f"= {len(idem[0])} bytes/batch, {total_bytes / MiB:.1f} MiB, {total_records:,} records per run; "
            f"median of {args.reps} runs after a cold one; dir {workdir}"
        )
        base_cpu = median_after_cold(samples[variants[0][0]], 1)
        print(
            f"{'variant':<32}{'MiB/s':>9}{'records/s':>13}{'us/call':>10}{'CPU us/call':>13}{'CPU x':>7}"
            f"{'ratio':>8}{'target':>8}"
        )
        for name, _, data, target in variants:
            t = median_after_cold(samples[name])
            cpu = median_after_cold(samples[name], 1)
            nbytes = sum(map(len, data))
            ratio = base / t
            verdict = "" if target is None else (f"{target:>7.2f}  " + ("ok" if ratio >= target else "MISSED"))
            print(
                f"{name:<32}{nbytes / MiB / t:>9.1f}{total_records / t:>13,.0f}{t / count * 1e6:>10.0f}"
                f"{cpu / count * 1e6:>13.0f}{cpu / base_cpu:>7.1f}{ratio:>8.2f}{verdict:>8}"
            )
        print(
            "ratio = baseline wall time / variant wall time (the target); CPU = this process's user+sys time, "
            "which fdatasync latency does not inflate (CPU x = multiple of the baseline's)"
        )
        spread = {
            name: (min(w for w, _ in after_cold(s)), max(w for w, _ in after_cold(s))) for name, s in samples.items()
        }
        print(
            "run-to-run spread (min..max seconds): "
            + "; ".join(f"{n.split(' (')[0]} {lo:.3f}..{hi:.3f}" for n, (lo, hi) in spread.items())
        )
        for label, run in (
            ("idempotent, index entry/call", idem_indexed),
            ("idempotent, no index entries", idem_unindexed),
            ("non-idempotent", plain_indexed),
        ):
            print(
                f"{label}: {run.index_entries} .index / {run.time_index_entries} .timeindex entries for {count} calls"
            )

        if args.profile:
            profiler = cProfile.Profile()
            TxlogRun(workdir, idem, None)(profiler)
            print("\ncProfile of one idempotent run (index entry/call), top 20 by own time:")
            pstats.Stats(profiler, stream=sys.stdout).strip_dirs().sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main()
