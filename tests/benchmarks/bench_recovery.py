"""On-demand benchmark of opening a partition: after a clean close, after a crash, and with no snapshots.

Run: python tests/benchmarks/bench_recovery.py [--sizes-mb 16,64,256 | --size-mb N]
         [--segment-mb 64] [--tail-mb 8] [--batch-kb 64] [--reps R] [--cold] [--profile]
         [--active-mb 10,256 | --big] [--only-active]

For each log size a writer *subprocess* appends ~64 KB idempotent batches (10-byte key,
100-byte value, a few producers round-robin, one append call per batch; --batch-kb makes
smaller batches, packed ~64 KB per append call) until the log
holds SIZE MiB, rolls a segment (which snapshots producer state at the new base, as
every roll does), appends a TAIL of --tail-mb MiB, and is then killed with SIGKILL.
Nothing is deleted or repaired: that directory is the crash state. From it:

(a) reopen after a clean close - Store.open + partition() on a copy that was opened once
    and closed cleanly (a snapshot at the log end). Must be flat in log size: it must
    not rescan the log. Bytes read are counted by wrapping os.pread/os.read (per file
    kind) and cross-checked with /proc/self/io rchar (every read syscall).
(b) reopen after the crash - on a fresh copy of the crash state each repetition. Only the
    tail since the snapshot at the last roll should be scanned: bytes scanned ~ TAIL,
    the same for every log size.
(c) full recovery - every .snapshot deleted before each open (the worst case): the whole
    log is replayed. Reported in MiB/s against a baseline measured in the same run: the
    same .log files read with os.pread in 1 MiB chunks and CRC-32C'd (the floor of any
    scan that verifies what it reads).

(d) reopen after SIGKILL with one big active segment (issue 26): a writer appends (~1 MiB
    per append call, each fdatasync'ed, so the HW file says the log end) into a single
    segment of --active-mb MiB (default 10 and 256; --big: 10 and 1024) and is killed with
    no roll, so the only snapshots inside the segment are the writer's periodic ones (every
    SNAPSHOT_INTERVAL_BYTES, 16 MiB, taken where the HW covers the log end). Recovery at open
    replays, validated, from the newest: its time should not grow with the segment (issue
    26's goal: the largest <= 2x the smallest) and its `.log` bytes read should stay at most
    about an interval.
    The `.log` is hard-linked into each copy (recovery never writes it: no torn tail).
    --only-active runs (d) alone.

Timings are the median after a dropped cold repetition. By default the page cache is
warm (the files were just written), so these are CPU costs; --cold fsyncs and drops
every file of the partition from the page cache (posix_fadvise DONTNEED) before each
timed open. Every timed open starts after os.sync(), so the fsyncs recovery does (the new
snapshot) do not also pay for writing back the scratch copies. Sealed segments are
hard-linked, not copied, into each crash copy: recovery never writes a sealed segment
(checked at the end).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchutil import after_cold, scratch_dir, warm_median
from crc32c import crc32c

from storage import Store
from storage.records import BatchBuilder, build_batch

ROOT = Path(__file__).resolve().parents[2]

MiB = 1 << 20
TOPIC = "t"
KEY_BYTES, VALUE_BYTES = 10, 100
KINDS = (".log", ".index", ".timeindex", ".txnindex", ".snapshot", "other")

_pread, _read, _close, _fsync, _fdatasync = os.pread, os.read, os.close, os.fsync, os.fdatasync


# ---- counting reads -----------------------------------------------------------------------------------


class ReadCounter:
    """Counts bytes returned by os.pread / os.read per kind of file (by the fd's path).

    The path of an fd is resolved on its first read and forgotten on os.close, so a
    reused fd number is classified afresh. Reads through Python file objects (the
    snapshot and metadata files) bypass this and show up only in rchar. Time spent in
    os.fsync / os.fdatasync is summed too: on a shared disk its latency varies far
    more than the scan it follows, so the report shows reopen times with and without it.
    """

    def __init__(self) -> None:
        self.bytes: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()
        self.sync_seconds = 0.0
        self._kind: dict[int, str] = {}

    def install(self) -> None:
        def pread(fd, n, offset):
            data = _pread(fd, n, offset)
            self._count(fd, len(data))
            return data

        def read(fd, n):
            data = _read(fd, n)
            self._count(fd, len(data))
            return data

        def close(fd):
            self._kind.pop(fd, None)
            _close(fd)

        def timed(sync):
            def wrapper(fd):
                start = time.perf_counter()
                try:
                    sync(fd)
                finally:
                    self.sync_seconds += time.perf_counter() - start

            return wrapper

        os.pread, os.read, os.close = pread, read, close
        os.fsync, os.fdatasync = timed(_fsync), timed(_fdatasync)

    def reset(self) -> None:
        self.bytes.clear()
        self.calls.clear()
        self.sync_seconds = 0.0

    def snapshot(self) -> tuple[Counter, Counter]:
        return Counter(self.bytes), Counter(self.calls)

    def _count(self, fd: int, n: int) -> None:
        kind = self._kind.get(fd)
        if kind is None:
            try:
                path = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                path = ""
            kind = next((k for k in KINDS[:-1] if path.endswith(k)), "other")
            self._kind[fd] = kind
        self.bytes[kind] += n
        self.calls[kind] += 1


COUNTER = ReadCounter()


def rchar() -> int:
    """Bytes this process has read through any read syscall (page-cache hits included),
    less what reading /proc/self/io itself costs."""
    return _rchar() - RCHAR_SELF


def _rchar() -> int:
    try:
        with open("/proc/self/io", "rb") as f:
            for line in f.read().split(b"\n"):
                if line.startswith(b"rchar:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


_first = _rchar()
RCHAR_SELF = _rchar() - _first  # the second read of /proc/self/io counts the first one


# ---- the writer subprocess ----------------------------------------------------------------------------


def records_per_batch(batch_bytes: int) -> int:
    builder = BatchBuilder(max_bytes=batch_bytes)
    while builder.append(b"k" * KEY_BYTES, b"v" * VALUE_BYTES, None, 0):
        pass
    return builder.record_count


def writer(args: argparse.Namespace) -> None:
    """Build the log, roll, append the tail, report, then wait to be SIGKILLed."""
    per_batch = records_per_batch(int(args.batch_kb * 1024))
    call_kb = 1024 if args.no_roll else 64  # (d) builds big segments: fewer fsyncs, the same HW at the end
    per_call = max(1, round(call_kb / args.batch_kb))  # ~64 KB per append call (and fsync) whatever the batch size
    now = int(time.time() * 1000)
    pool = [(os.urandom(KEY_BYTES), os.urandom(VALUE_BYTES), None, now) for _ in range(per_batch)]
    store = Store.open(args.writer)
    store.create_topic(TOPIC, 1, config={"segment.bytes": int(args.segment_mb * MiB)})
    log = store.partition(TOPIC, 0)
    pids = [store.allocate_producer_id() for _ in range(args.producers)]
    seqs = dict.fromkeys(pids, 0)
    calls = 0

    def append_until(target: int) -> int:
        nonlocal calls
        written = 0
        while written < target:
            pid = pids[calls % len(pids)]
            chunk = []
            for _ in range(per_call):
                chunk.append(build_batch(pool, producer_id=pid, producer_epoch=0, base_sequence=seqs[pid]))
                seqs[pid] += per_batch
            data = b"".join(chunk)
            log.append(data)
            written += len(data)
            calls += 1
        return written

    body = append_until(int(args.log_mb * MiB))
    tail = 0
    if not args.no_roll:
        log.roll()
        tail = append_until(int(args.tail_mb * MiB))
    info = {
        "end_offset": log.log_end_offset,
        "body_bytes": body,
        "tail_bytes": tail,
        "segments": len(log.segments),
        "calls": calls,
    }
    print(json.dumps(info), flush=True)
    while True:  # never closes: the parent kills us
        time.sleep(3600)


def build_crashed_log(directory: str, log_mb: float, args: argparse.Namespace, *, no_roll: bool = False) -> dict:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--writer",
        directory,
        "--log-mb",
        str(log_mb),
        "--tail-mb",
        str(args.tail_mb),
        "--segment-mb",
        str(args.segment_mb),
        "--producers",
        str(args.producers),
        "--batch-kb",
        str(args.batch_kb),
        *(["--no-roll"] if no_roll else []),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"writer for {log_mb} MiB exited with {proc.wait()} before building the log")
        info = json.loads(line)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    if proc.returncode != -signal.SIGKILL:
        raise RuntimeError(f"writer ended with {proc.returncode}, not SIGKILL")
    return info


# ---- directories ---------------------------------------------------------------------------------------


def partition_dir(store_root: str) -> str:
    return os.path.join(store_root, f"{TOPIC}-0")


def log_files(store_root: str) -> list[str]:
    pdir = partition_dir(store_root)
    return sorted(os.path.join(pdir, n) for n in os.listdir(pdir) if n.endswith(".log"))


def clone(src: str, dst: str, *, link_active: bool = False) -> None:
    """Copy a store; sealed segments (every .log but the newest) are hard links, the newest too if `link_active`."""
    logs = log_files(src)
    sealed = set(logs if link_active else logs[:-1])

    def copy(s: str, d: str) -> None:
        if s in sealed:
            os.link(s, d)
        else:
            shutil.copy2(s, d)

    shutil.copytree(src, dst, copy_function=copy)


def drop_page_cache(store_root: str) -> None:
    for dirpath, _, names in os.walk(store_root):
        for name in names:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                _fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                _close(fd)


def delete_snapshots(store_root: str) -> None:
    pdir = partition_dir(store_root)
    for name in os.listdir(pdir):
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(pdir, name))


# ---- measuring ---------------------------------------------------------------------------------------------


class Open:
    """One timed Store.open + partition(); the close afterwards is not timed."""

    def __init__(self, store_root: str, expected_end: int, cold: bool, profiler: cProfile.Profile | None = None):
        os.sync()  # the copy / the deleted snapshots must not be flushed by the fsyncs being timed
        if cold:
            drop_page_cache(store_root)
        COUNTER.reset()
        r0 = rchar()
        if profiler is not None:
            profiler.enable()
        t0 = time.perf_counter()
        store = Store.open(store_root)
        log = store.partition(TOPIC, 0)
        self.seconds = time.perf_counter() - t0
        if profiler is not None:
            profiler.disable()
        self.rchar = rchar() - r0
        self.bytes, self.calls = COUNTER.snapshot()
        self.sync_seconds = COUNTER.sync_seconds
        self.cpu_seconds = self.seconds - self.sync_seconds  # wall time outside fsync
        try:
            end = log.log_end_offset
            if end != expected_end:
                raise AssertionError(f"reopened log ends at {end}, the writer wrote up to {expected_end}")
        finally:
            store.close()


def median_open(samples: list[Open]) -> Open:
    """The run with the median time (after dropping the cold first one), so its byte counts go with it."""
    rest = sorted(after_cold(samples), key=lambda o: o.seconds)
    return rest[len(rest) // 2]


def median_time(samples: list[Open], attr: str = "seconds") -> float:
    return warm_median([getattr(o, attr) for o in samples])


def read_and_crc(paths: list[str], cold: bool, store_root: str) -> float:
    """Baseline: read every .log byte in 1 MiB preads and CRC-32C it; returns seconds."""
    if cold:
        drop_page_cache(store_root)
    start = time.perf_counter()
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            pos = 0
            while chunk := _pread(fd, MiB, pos):
                crc32c(chunk)
                pos += len(chunk)
        finally:
            _close(fd)
    return time.perf_counter() - start


def fmt_bytes(n: float) -> str:
    if n >= 10 * MiB:
        return f"{n / MiB:.1f} MiB"
    if n >= 10 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n:.0f} B"


def measure_size(parent: str, log_mb: float, args: argparse.Namespace) -> dict:
    crashed = os.path.join(parent, f"crashed-{log_mb:g}")
    info = build_crashed_log(crashed, log_mb, args)
    logs = log_files(crashed)
    sealed_stat = {p: (os.stat(p).st_size, os.stat(p).st_mtime_ns) for p in logs[:-1]}
    total = sum(os.path.getsize(p) for p in logs)
    tail = os.path.getsize(logs[-1])
    end = info["end_offset"]
    reps = args.reps + 1

    crash: list[Open] = []
    for i in range(reps):
        work = os.path.join(parent, f"crash-copy-{log_mb:g}-{i}")
        clone(crashed, work)
        crash.append(Open(work, end, args.cold))
        shutil.rmtree(work)

    clean_root = os.path.join(parent, f"clean-{log_mb:g}")
    clone(crashed, clean_root)
    Open(clean_root, end, False)  # crash recovery, then a clean close: a snapshot at the log end
    clean = [Open(clean_root, end, args.cold) for _ in range(reps)]

    full: list[Open] = []
    floor: list[float] = []
    for _ in range(reps):  # interleaved, so recovery and its baseline see the same machine load
        delete_snapshots(clean_root)
        full.append(Open(clean_root, end, args.cold))
        floor.append(read_and_crc(log_files(clean_root), args.cold, clean_root))
    baseline = warm_median(floor)

    profiles = {}
    if args.profile:
        work = os.path.join(parent, f"crash-copy-{log_mb:g}-profile")
        clone(crashed, work)
        profiles["crash reopen"] = cProfile.Profile()
        Open(work, end, False, profiles["crash reopen"])
        shutil.rmtree(work)
        profiles["clean reopen"] = cProfile.Profile()
        Open(clean_root, end, False, profiles["clean reopen"])
        delete_snapshots(clean_root)
        profiles["full recovery"] = cProfile.Profile()
        Open(clean_root, end, False, profiles["full recovery"])

    for path, before in sealed_stat.items():
        st = os.stat(path)
        if (st.st_size, st.st_mtime_ns) != before:
            raise AssertionError(f"recovery modified the sealed segment {path}")
    shutil.rmtree(clean_root)
    shutil.rmtree(crashed)
    return {
        "log_mb": log_mb,
        "total": total,
        "tail": tail,
        "segments": len(logs),
        "info": info,
        "crash": crash,
        "clean": clean,
        "full": full,
        "baseline": baseline,
        "profiles": profiles,
    }


def measure_active(parent: str, active_mb: float, args: argparse.Namespace) -> dict:
    """(d): reopen after SIGKILL of a writer whose only segment holds `active_mb` MiB."""
    crashed = os.path.join(parent, f"active-{active_mb:g}")
    args = argparse.Namespace(**vars(args))
    args.segment_mb = min(max(2 * active_mb, 64), 2047)  # no roll before the kill (segment.bytes is an int32)
    info = build_crashed_log(crashed, active_mb, args, no_roll=True)
    logs = log_files(crashed)
    if len(logs) != 1:
        raise AssertionError(f"the writer rolled: {len(logs)} segments")
    before = (os.stat(logs[0]).st_size, os.stat(logs[0]).st_mtime_ns)
    samples: list[Open] = []
    for i in range(args.reps + 1):
        work = os.path.join(parent, f"active-copy-{active_mb:g}-{i}")
        clone(crashed, work, link_active=True)
        samples.append(Open(work, info["end_offset"], args.cold))
        shutil.rmtree(work)
    if (os.stat(logs[0]).st_size, os.stat(logs[0]).st_mtime_ns) != before:
        raise AssertionError(f"recovery modified the active segment {logs[0]}")
    size = os.path.getsize(logs[0])
    shutil.rmtree(crashed)
    return {"active_mb": active_mb, "size": size, "batches": info["calls"], "samples": samples}


def report_active(results: list[dict], args: argparse.Namespace) -> None:
    print(
        f"\n(d) reopen after SIGKILL with one active segment (no roll), HW file at the log end "
        f"({args.batch_kb:g} KiB batches, ~1 MiB per fdatasync'ed append call; "
        f"{'COLD' if args.cold else 'warm'} page cache; median of {args.reps} after a cold one)"
    )
    print(
        f"{'active MiB':>11}{'reopen ms':>11}{'fsync ms':>10}{'rest ms':>9}{'x smallest':>12}"
        f"{'.log read':>12}{'read/size':>11}{'.log preads':>13}"
    )
    base = median_time(results[0]["samples"], "cpu_seconds")
    for r in results:
        o = median_open(r["samples"])
        rest = median_time(r["samples"], "cpu_seconds")
        print(
            f"{r['size'] / MiB:>11.1f}{median_time(r['samples']) * 1e3:>11.1f}"
            f"{median_time(r['samples'], 'sync_seconds') * 1e3:>10.1f}{rest * 1e3:>9.1f}{rest / base:>11.2f}x"
            f"{fmt_bytes(o.bytes['.log']):>12}{o.bytes['.log'] / r['size']:>11.4f}{o.calls['.log']:>13}"
        )
    growth = median_time(results[-1]["samples"], "cpu_seconds") / base
    print(
        f"   rest = reopen time outside fsync; goal: the largest <= 2x the smallest: "
        f"{growth:.2f}x ({'ok' if growth <= 2 else 'GROWS WITH THE SEGMENT'})"
    )


# ---- report ------------------------------------------------------------------------------------------------


def report(results: list[dict], args: argparse.Namespace) -> None:
    first = results[0]
    sizes = ", ".join(f"{r['log_mb']:g}" for r in results)
    print(
        f"log sizes {sizes} MiB, each + a {args.tail_mb:g} MiB tail "
        f"after the last roll; segment.bytes {args.segment_mb:g} MiB; {args.producers} idempotent producers, "
        f"{args.batch_kb:g} KiB batches, ~64 KB per append call; {'COLD' if args.cold else 'warm'} page cache; "
        f"median of {args.reps} opens after a cold one"
    )

    print("\n(a) reopen after a clean close (snapshot at the log end): must be flat in log size")
    print(
        f"{'log MiB':>9}{'segs':>6}{'reopen ms':>11}{'x smallest':>12}{'.log read':>12}"
        f"{'index read':>12}{'rchar':>12}{'.log preads':>13}"
    )
    base_t = median_time(first["clean"])
    for r in results:
        t = median_time(r["clean"])
        o = median_open(r["clean"])
        idx = o.bytes[".index"] + o.bytes[".timeindex"] + o.bytes[".txnindex"]
        print(
            f"{r['total'] / MiB:>9.1f}{r['segments']:>6}{t * 1e3:>11.2f}{t / base_t:>11.2f}x"
            f"{fmt_bytes(o.bytes['.log']):>12}{fmt_bytes(idx):>12}{fmt_bytes(o.rchar):>12}{o.calls['.log']:>13}"
        )
    last = results[-1]
    growth = median_time(last["clean"]) / base_t
    size_growth = last["total"] / first["total"]
    log_read = median_open(last["clean"]).bytes[".log"]
    rescan = "ok, not rescanned" if log_read < 64 * last["segments"] + 64 * 1024 else "RESCANNED"
    timing = "flat" if growth <= 2 else "GROWS (every segment's indexes are read and checked on open)"
    print(
        f"   log grew {size_growth:.1f}x: .log bytes read {fmt_bytes(log_read)} ({rescan}); "
        f"reopen time {growth:.2f}x ({timing})"
    )

    print("\n(b) reopen after SIGKILL: only the tail since the last roll's snapshot should be scanned")
    print(
        f"{'log MiB':>9}{'tail MiB':>10}{'reopen ms':>11}{'fsync ms':>10}{'rest ms':>9}{'x smallest':>12}"
        f"{'.log read':>12}{'read/tail':>11}{'ms/MiB':>9}{'x full':>8}"
    )
    base_rest = median_time(first["crash"], "cpu_seconds")
    worst = 0.0
    for r in results:
        t = median_time(r["crash"])
        sync = median_time(r["crash"], "sync_seconds")
        rest = median_time(r["crash"], "cpu_seconds")
        scanned = median_open(r["crash"]).bytes[".log"]
        full_rest = median_time(r["full"], "cpu_seconds")
        worst = max(worst, scanned / r["tail"])
        print(
            f"{r['total'] / MiB:>9.1f}{r['tail'] / MiB:>10.1f}{t * 1e3:>11.1f}{sync * 1e3:>10.1f}{rest * 1e3:>9.1f}"
            f"{rest / base_rest:>11.2f}x{fmt_bytes(scanned):>12}{scanned / r['tail']:>11.2f}"
            f"{rest * 1e3 / (r['tail'] / MiB):>9.2f}{rest / full_rest:>8.2f}"
        )
    print(
        "   rest = reopen time outside fsync (the new snapshot's fsyncs wait on the disk, not on the scan); "
        "x smallest, ms/MiB (per MiB of tail) and x full (vs full recovery) use it; each column is its own median. "
        f"{'ok (tail only)' if worst < 1.25 else 'SCANS MORE THAN THE TAIL'}"
    )

    print(
        "\n(c) full recovery, every snapshot deleted (worst case); "
        "baseline = pread 1 MiB + CRC-32C of the same .log files"
    )
    print(
        f"{'log MiB':>9}{'seconds':>9}{'fsync ms':>10}{'MiB/s':>9}{'ms/MiB':>9}{'.log read':>12}"
        f"{'baseline MiB/s':>16}{'ratio':>8}{'x smallest ms/MiB':>19}"
    )
    base_per_mb = median_time(first["full"], "cpu_seconds") / (first["total"] / MiB)
    for r in results:
        t = median_time(r["full"])
        sync = median_time(r["full"], "sync_seconds")
        rest = median_time(r["full"], "cpu_seconds")
        o = median_open(r["full"])
        mb = r["total"] / MiB
        rate, floor = mb / rest, mb / r["baseline"]
        print(
            f"{mb:>9.1f}{t:>9.3f}{sync * 1e3:>10.1f}{rate:>9.1f}{rest * 1e3 / mb:>9.2f}"
            f"{fmt_bytes(o.bytes['.log']):>12}{floor:>16.1f}{rate / floor:>8.2f}{rest / mb / base_per_mb:>18.2f}x"
        )
    print("   MiB/s, ms/MiB and ratio (recovery rate / baseline rate) leave out the fsync of the final snapshot")

    for r in results:
        for name, prof in r["profiles"].items():
            print(f"\ncProfile of one {name} of the {r['total'] / MiB:.0f} MiB log, top 15 by own time:")
            pstats.Stats(prof, stream=sys.stdout).strip_dirs().sort_stats("tottime").print_stats(15)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--sizes-mb", default="16,64,256", help="comma-separated log sizes in MiB (default 16,64,256)")
    sizes.add_argument("--size-mb", type=float, help="a single log size in MiB")
    parser.add_argument("--segment-mb", type=float, default=64, help="segment.bytes in MiB (default 64)")
    parser.add_argument("--tail-mb", type=float, default=8, help="MiB appended after the last roll (default 8)")
    parser.add_argument(
        "--batch-kb",
        type=float,
        default=64,
        help="batch size in KiB (default 64); smaller batches are packed ~64 KB per append call",
    )
    parser.add_argument("--producers", type=int, default=4, help="idempotent producers, round-robin (default 4)")
    parser.add_argument("--reps", type=int, default=9, help="timed opens after the cold one (default 9)")
    parser.add_argument(
        "--cold", action="store_true", help="drop the partition's files from the page cache before each open"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="cProfile one clean reopen, crash reopen and full recovery of the largest log",
    )
    parser.add_argument(
        "--active-mb", default="10,256", help="(d): comma-separated active segment sizes in MiB (default 10,256)"
    )
    parser.add_argument("--big", action="store_true", help="(d) with a 1 GiB active segment: --active-mb 10,1024")
    parser.add_argument("--only-active", action="store_true", help="run (d) alone")
    parser.add_argument("--dir", help="parent of the scratch directory (default <repo>/.bench-tmp)")
    parser.add_argument("--writer", help=argparse.SUPPRESS)
    parser.add_argument("--no-roll", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--log-mb", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.writer:
        writer(args)
        return

    sizes = [args.size_mb] if args.size_mb is not None else [float(s) for s in args.sizes_mb.split(",")]
    COUNTER.install()
    active = [10.0, 1024.0] if args.big else [float(s) for s in args.active_mb.split(",")]
    with scratch_dir(args.dir, "bench-recovery-") as workdir:
        if not args.only_active:
            results = []
            for i, size in enumerate(sorted(sizes)):
                args_for_size = argparse.Namespace(**vars(args))
                args_for_size.profile = args.profile and i == len(sizes) - 1
                results.append(measure_size(workdir, size, args_for_size))
            report(results, args)
        report_active([measure_active(workdir, size, args) for size in sorted(active)], args)


if __name__ == "__main__":
    main()
