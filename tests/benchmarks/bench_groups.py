"""Consumer groups: how fast a partition moves to another member, and what N members buy.

    python tests/benchmarks/bench_groups.py [--records N] [--reps R] [--workers 2,4] [--dir D]

Three measurements, each repeated (the first, cold repetition dropped, the median of the
rest printed with its spread):

* failover after SIGKILL: two member processes share a 4-partition topic; one is killed
  with SIGKILL and the clock runs until the survivor returns a record of a partition the
  dead one owned. Measured for plain consumers and for TransformLoop members killed inside
  an open transaction (the dead member's lock tells the group at once, so the survivor's
  heartbeat interval bounds it), and for TransformLoop members held between
  send_offsets_to_transaction and the commit ("loop-pending"): there the survivor must wait
  for the dead transaction to time out (KIP-447 require_stable), so `transaction.timeout.ms`
  plus the coordinator's sweep bound it, as in Kafka;
* failover after close(): the same with a clean `close()` (SIGUSR1 / SIGINT to the member) instead;
* throughput: N TransformLoop members (processes) copying the same input against one
  member in the same run; ratio = N-member rate / 1-member rate (2 cores here).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [ROOT, HERE, os.path.dirname(HERE)]

from benchutil import after_cold, fsync_skipped, scratch_dir  # noqa: E402

import txlog  # noqa: E402

HEARTBEAT_MS = 500
SESSION_MS = 10_000
TXN_TIMEOUT_MS = 3_000

MEMBER = r"""
import os, signal, sys, time, txlog
path, mode = sys.argv[1], sys.argv[2]
c = txlog.Consumer(path, group_id="g", enable_auto_commit=False, heartbeat_interval_ms=%(hb)d,
                   session_timeout_ms=%(session)d, max_poll_records=1)
c.subscribe(["in"])
closing = []
signal.signal(signal.SIGUSR1, lambda *a: closing.append(1))
seen = set()
while True:
    if closing:
        print("CLOSE", time.time(), flush=True)
        c.close()
        break
    for r in c.poll(timeout_ms=5):
        if r.partition not in seen:
            seen.add(r.partition)
            print("FIRST", r.partition, time.time(), flush=True)
    print("OWN", ",".join(str(tp.partition) for tp in sorted(c.assignment())), flush=True) if mode == "v" else None
"""

LOOP_MEMBER = r"""
import sys, time, txlog
path, tid, pending = sys.argv[1], sys.argv[2], sys.argv[3] == "pending"
seen = set()
def transform(records):
    for r in records:
        if r.partition not in seen:
            seen.add(r.partition)
            print("FIRST", r.partition, time.time(), flush=True)
    time.sleep(0.05)   # a round takes a while: a kill lands inside an open transaction
    return [(r.key, r.value) for r in records]
loop = txlog.TransformLoop(path, input_topic="in", output_topic="out", group_id="g", transactional_id=tid,
                           transform=transform, transaction_size=20, transaction_timeout_ms=%(txn)d,
                           consumer_config=dict(heartbeat_interval_ms=%(hb)d, session_timeout_ms=%(session)d))
if pending:  # hold each round between send_offsets_to_transaction and the commit: a kill finds offsets pending
    commit = loop.producer.commit_transaction
    loop.producer.commit_transaction = lambda: (time.sleep(0.5), commit())
try:
    loop.run(until_caught_up=False)
except KeyboardInterrupt:
    loop.close()   # the open transaction was aborted on the way out; close() leaves the group
"""


def seed(path: str, records: int) -> None:
    with fsync_skipped(), txlog.Admin(path) as admin:
        admin.create_topic("in", 4)
        admin.create_topic("out", 4)
        p = txlog.Producer(admin.store)
        for i in range(records):
            p.send("in", value=b"%08d" % i, key=b"%d" % i, partition=i % 4)
        p.flush()
        p.close()
    os.sync()


def _spawn(code: str, *args: str) -> tuple[subprocess.Popen, list[str]]:
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    return proc, []


def _read_until(proc: subprocess.Popen, lines: list[str], word: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"member exited before {word}")
        lines.append(line)
        if line.startswith(word):
            return line
    raise RuntimeError(f"no {word} within {timeout}s")


def failover(workdir: str, records: int, *, kind: str, how: str) -> float:
    """Seconds from A's death (or close) to B's first record of a partition A owned."""
    path = os.path.join(workdir, f"{kind}-{how}-{time.monotonic_ns()}")
    seed(path, records)
    params = {"hb": HEARTBEAT_MS, "session": SESSION_MS, "txn": TXN_TIMEOUT_MS}
    if kind == "consumer":
        a, a_lines = _spawn(MEMBER % params, path, "v")
        _read_until(a, a_lines, "OWN 0,1,2,3", 30)
        b, b_lines = _spawn(MEMBER % params, path, "v")
    else:
        mode = "pending" if kind == "loop-pending" else "plain"
        a, a_lines = _spawn(LOOP_MEMBER % params, path, "A", mode)
        _read_until(a, a_lines, "FIRST", 30)
        b, b_lines = _spawn(LOOP_MEMBER % params, path, "B", "plain")
    try:
        b_first = set()
        # Wait until both hold two partitions: A's are then the ones B does not read yet.
        deadline = time.monotonic() + 60
        while len(b_first) < 2:
            line = b.stdout.readline()
            if line.startswith("FIRST"):
                b_first.add(int(line.split()[1]))
            if time.monotonic() > deadline:
                raise RuntimeError("B never got two partitions")
        time.sleep(0.3)
        start = time.time()
        if how == "kill":
            a.send_signal(signal.SIGKILL)
        elif kind == "consumer":
            a.send_signal(signal.SIGUSR1)
        else:
            a.send_signal(signal.SIGINT)  # the loop aborts its open transaction and closes on KeyboardInterrupt
        while True:
            line = b.stdout.readline()
            if line.startswith("FIRST") and int(line.split()[1]) not in b_first:
                return float(line.split()[2]) - start
    finally:
        for proc in (a, b):
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def throughput(workdir: str, records: int, workers: int) -> float:
    """Records per second copied by `workers` TransformLoop members together."""
    path = os.path.join(workdir, f"tp-{workers}-{time.monotonic_ns()}")
    seed(path, records)
    worker = os.path.join(os.path.dirname(HERE), "crash", "eos_worker.py")  # tests/crash/eos_worker.py
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                worker,
                "member",
                "--store",
                path,
                "--transactional-id",
                f"w{i}",
                "--group",
                "g",
                "--txn-size",
                "500",
                "--abort-p",
                "0",
                "--session-timeout-ms",
                str(SESSION_MS),
                "--heartbeat-interval-ms",
                "200",
            ],
            stdout=subprocess.DEVNULL,
            cwd=ROOT,
        )
        for i in range(workers)
    ]
    for proc in procs:
        if proc.wait(timeout=600) != 0:
            raise RuntimeError(f"worker exited {proc.returncode}")
    return records / (time.perf_counter() - start)


def _median(values: list[float]) -> tuple[float, float, float]:
    rest = after_cold(values)
    return statistics.median(rest), min(rest), max(rest)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000, help="input of the throughput runs")
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--workers", default="2,4")
    ap.add_argument("--dir")
    ap.add_argument("--pending-only", action="store_true", help="only the loop-pending failover, no throughput")
    args = ap.parse_args()
    with scratch_dir(args.dir, "bench-groups-") as workdir:
        print(
            f"heartbeat.interval.ms={HEARTBEAT_MS} session.timeout.ms={SESSION_MS} "
            f"transaction.timeout.ms={TXN_TIMEOUT_MS}; median of {args.reps - 1} after a cold run"
        )
        kinds = (
            [("loop-pending", "kill")]
            if args.pending_only
            else [
                ("consumer", "kill"),
                ("consumer", "close"),
                ("loop", "kill"),
                ("loop", "close"),
                ("loop-pending", "kill"),
            ]
        )
        for kind, how in kinds:
            times = [failover(workdir, 2_000, kind=kind, how=how) for _ in range(args.reps)]
            med, lo, hi = _median(times)
            print(f"failover {kind:12} after {how:5}: {med * 1000:7.0f} ms  (min {lo * 1000:.0f}, max {hi * 1000:.0f})")
        if args.pending_only:
            return
        counts = [1] + [int(n) for n in args.workers.split(",")]
        rates: dict[int, list[float]] = {n: [] for n in counts}
        for _ in range(args.reps):  # interleaved, so drift on a shared machine hits every variant alike
            for n in counts:
                rates[n].append(throughput(workdir, args.records, n))
        base, _, _ = _median(rates[1])
        for n in counts:
            med, lo, hi = _median(rates[n])
            print(
                f"throughput {n} member{'s' if n > 1 else ' '}: {med:9.0f} records/s  "
                f"({lo:.0f}..{hi:.0f})  ratio to 1 member {med / base:.2f}x"
            )


if __name__ == "__main__":
    main()
