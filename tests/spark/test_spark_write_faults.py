"""Fault tests of the exactly-once Spark writer (format "txlog"): real kills, real task retries.

Every job runs in its own process (tests/spark/spark_write_worker.py, one Spark session per
process), started in a new process group so that a kill -9 takes the driver's Python, its JVM
and their Python workers at once. Faults come from the worker script, never from the product:
it registers a subclass of txlog's data source whose writer commits/writes through wrappers
(SIGKILL of the driver inside the commit, task attempts that fail after writing part of their
rows, a duplicate attempt of a task writing concurrently). Each test checks, through public
interfaces only, that the topic read with read_committed holds the input exactly once in order
per partition, that `txlog verify` finds nothing and that `txlog transactions list` shows no
transaction open or prepared; and each checks from the worker's marker files that its fault
really happened, so that none can pass because the fault was never reached.

Speculation: Spark never launches a speculative copy in local mode (TaskSchedulerImpl starts
its speculation thread only when the master is not local) nor in local-cluster mode (every
executor is on the same host, and a speculative copy is never placed on a host already running
the task), both checked with PySpark 4.3. What speculation does to a sink - two attempts of the
same task partition writing at once, the later one started while the earlier still runs - is
therefore made directly: attempt 0 forks a copy of itself that keeps writing while Spark runs
attempt 1 (test_a_duplicate_attempt_writing_concurrently_is_fenced).

Sizes are small by default (each test a few Spark processes); `--big` writes more rows and
kills the pipeline more often.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from spark_stores import consumer_rows
from spark_write_worker import batch_rows

import txlog

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WORKER = os.path.join(HERE, "spark_write_worker.py")
#: Longest a worker may take (a Spark start and a small job on a loaded 2-core machine is ~10-30 s).
WORKER_TIMEOUT_S = 300
#: Transaction states that leave nothing open or prepared (Dead reads as Unknown in Kafka's Admin).
FINISHED_STATES = {"Empty", "CompleteCommit", "CompleteAbort", "Unknown"}
SEED = int(os.environ.get("TXLOG_CRASH_SEED", random.randrange(1 << 30)))


# ---- running the worker ------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (ROOT, HERE, env.get("PYTHONPATH"))))
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return env


def _start(spec: dict, log: str) -> subprocess.Popen:
    os.makedirs(spec["marks"], exist_ok=True)
    with open(log, "ab") as err:
        return subprocess.Popen(
            [sys.executable, WORKER, json.dumps(spec)],
            stdout=subprocess.PIPE,
            stderr=err,
            env=_env(),
            start_new_session=True,  # its own process group: kill -9 of the driver takes its JVM too
        )


def _reap(worker: subprocess.Popen) -> int:
    """Kill whatever is left of the worker's process group (Python workers, the JVM), wait for the worker."""
    try:
        os.killpg(worker.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return worker.wait()


def _tail(log: str) -> str:
    with open(log, "rb") as f:
        return f.read()[-3000:].decode(errors="replace")


def run(spec: dict, log: str) -> int:
    """Run the worker to its end; its exit code (-9 when it was SIGKILLed)."""
    worker = _start(spec, log)
    try:
        worker.wait(WORKER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _reap(worker)
        pytest.fail(f"the Spark worker did not finish in {WORKER_TIMEOUT_S} s:\n{_tail(log)}")
    code = worker.returncode
    _reap(worker)
    return code


def run_ok(spec: dict, log: str) -> None:
    code = run(spec, log)
    assert code == 0, f"the Spark worker failed (exit {code}):\n{_tail(log)}"


def run_killed(spec: dict, log: str, where: str) -> None:
    """Run a worker whose fault SIGKILLs its driver; check it died by that kill, at `where`."""
    code = run(spec, log)
    assert code == -signal.SIGKILL, f"the worker was not killed (exit {code}):\n{_tail(log)}"
    assert marks(spec, f"killed-{where}"), f"the kill did not happen in the commit ({where}):\n{_tail(log)}"


def marks(spec: dict, prefix: str) -> list[str]:
    return [n for n in os.listdir(spec["marks"]) if n.startswith(prefix)]


# ---- stores and checks -------------------------------------------------------------------------------


def new_store(path: str, topics: dict[str, int]) -> str:
    with txlog.Admin(path) as admin:
        for topic, partitions in topics.items():
            admin.create_topic(topic, partitions)
    return path


def produce_input(path: str, topic: str, partitions: int, transactions: int, per_txn: int) -> dict[int, list]:
    """Transactions of `per_txn` records each, every third one aborted; the committed (key, value) per partition."""
    producer = txlog.Producer(path, transactional_id="test-input")
    producer.init_transactions()
    committed: dict[int, list] = {p: [] for p in range(partitions)}
    for t in range(transactions):
        aborted = t % 3 == 1
        producer.begin_transaction()
        records = []
        for j in range(per_txn):
            p = (t + j) % partitions
            key, value = f"in-{t:04d}-{j:03d}", f"{'aborted' if aborted else 'value'}-{t}-{j}"
            producer.send(topic, value.encode(), key=key.encode(), partition=p)
            records.append((p, key, value))
        producer.flush()
        if aborted:
            producer.abort_transaction()
        else:
            producer.commit_transaction()
            for p, key, value in records:
                committed[p].append((key, value))
    producer.close()
    return committed


def committed(path: str, topic: str, partitions: int) -> dict[int, list[tuple[str, str]]]:
    """read_committed contents of `topic`: (key, value) per partition in offset order."""
    rows = consumer_rows(path, [(topic, p) for p in range(partitions)], "read_committed")
    out: dict[int, list] = {p: [] for p in range(partitions)}
    for r in rows:
        out[r.partition].append((r.key.decode(), r.value.decode()))
    return out


def assert_exactly(actual: dict[int, list], expected: dict[int, list]) -> None:
    """`actual` equals `expected` partition by partition; the message says what broke (lost, duplicated, order)."""
    problems = []
    for p in sorted(set(actual) | set(expected)):
        got, want = actual.get(p, []), expected.get(p, [])
        if got == want:
            continue
        counts, wanted = Counter(got), Counter(want)
        duplicated = sum(n - 1 for r, n in counts.items() if n > 1)
        lost = sum(1 for r in wanted if r not in counts)
        extra = sum(1 for r in counts if r not in wanted)
        problems.append(
            f"partition {p}: {len(got)} records, {len(want)} expected "
            f"({duplicated} duplicated, {lost} lost, {extra} not in the input"
            f"{', order differs' if not (duplicated or lost or extra) else ''})"
        )
    assert not problems, "; ".join(problems)


def cli(path: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "--data-dir", path, *args],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
    )


def assert_clean(path: str) -> None:
    """`txlog verify` finds nothing; `txlog transactions list` shows nothing open or prepared."""
    verify = cli(path, "verify", "-o", "json")
    assert verify.returncode == 0 and json.loads(verify.stdout) == [], verify.stdout + verify.stderr
    listed = cli(path, "transactions", "list", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    left = [t for t in json.loads(listed.stdout) if t["transactionState"] not in FINISHED_STATES]
    assert not left, f"transactions left open or prepared: {left}"


def batch_spec(tmp_path, **extra) -> dict:
    spec = {
        "mode": "batch",
        "store": str(tmp_path / "store"),
        "topic": "out",
        "marks": str(tmp_path / "marks"),
        "query_id": "faults-batch-1",
    }
    spec.update(extra)
    return spec


def expected_batch(rows: int, partitions: int) -> dict[int, list[tuple[str, str]]]:
    out: dict[int, list] = {p: [] for p in range(partitions)}
    for key, value, p in batch_rows(rows, partitions):
        out[p].append((key, value))
    return out


def upper(expected: dict[int, list]) -> dict[int, list]:
    return {p: [(k, v.upper()) for k, v in rows] for p, rows in expected.items()}


# ---- 1. kill -9 of the driver between the tasks' success and the commit -----------------------------


@pytest.mark.parametrize("where", ["entry", "after-first"])
def test_batch_write_driver_killed_in_the_commit_then_rerun_writes_once(tmp_path, big, where):
    """All tasks prepared, the driver SIGKILLed in the commit (before any decision / after the first
    completion); the same write (same queryId) run again: the topic holds the input exactly once."""
    rows, partitions = (4000, 4) if big else (400, 4)
    spec = batch_spec(tmp_path, rows=rows, partitions=partitions)
    new_store(spec["store"], {"out": partitions})
    log = str(tmp_path / "worker.log")

    fault = {"kill_commit": where.replace("-", "_")}
    run_killed({**spec, "fault": fault}, log, where)
    assert len(marks(spec, "write-")) >= partitions, "every task wrote before the commit"
    run_ok(spec, log)

    assert_exactly(committed(spec["store"], "out", partitions), expected_batch(rows, partitions))
    assert_clean(spec["store"])


def stream_spec(tmp_path, **extra) -> dict:
    spec = {
        "mode": "stream",
        "store": str(tmp_path / "store"),
        "input": "in",
        "topic": "out",
        "checkpoint": str(tmp_path / "checkpoint"),
        "marks": str(tmp_path / "marks"),
        "per_trigger": 40,
    }
    spec.update(extra)
    return spec


@pytest.mark.parametrize("where", ["entry", "after-first"])
def test_stream_driver_killed_in_a_micro_batch_commit_then_restarted_writes_once(tmp_path, big, where):
    """Micro-batch 1's commit SIGKILLs the driver; restarted from the checkpoint, run to the end."""
    partitions = 2
    spec = stream_spec(tmp_path, keep_partition=True)
    new_store(spec["store"], {"in": partitions, "out": partitions})
    expected = produce_input(spec["store"], "in", partitions, transactions=60 if big else 15, per_txn=10)
    log = str(tmp_path / "worker.log")

    run_killed({**spec, "fault": {"kill_commit": where.replace("-", "_"), "kill_batch": 1}}, log, where)
    assert marks(spec, "commit-0") and marks(spec, "commit-1"), "batch 0 committed, batch 1 killed in its commit"
    run_ok(spec, log)

    assert_exactly(committed(spec["store"], "out", partitions), upper(expected))
    assert_clean(spec["store"])
