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
from spark_write_worker import batch_rows, run_batch, run_stream

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


def _wait_for_line(worker: subprocess.Popen, want: bytes, log: str) -> None:
    """Read the worker's stdout up to the line `want` (it prints "session", then "started")."""
    for line in worker.stdout:
        if line.strip() == want:
            return
    pytest.fail(f"the worker ended before printing {want!r}:\n{_tail(log)}")


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


def mark_text(spec: dict, name: str) -> str:
    with open(os.path.join(spec["marks"], name)) as f:
        return f.read()


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
    # --no-sweep: as the store is, without the sweep aborting what has outlived its timeout, so a
    # transaction a dead attempt left open shows, though the slow run outlasted its timeout
    listed = cli(path, "transactions", "list", "--no-sweep", "-o", "json")
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
def test_batch_write_driver_killed_in_the_commit_then_rerun_writes_once(spark, tmp_path, big, where):
    """All tasks prepared, the driver SIGKILLed in the commit (before any decision / after the first
    completion); the same write (same queryId) run again: the topic holds the input exactly once."""
    rows, partitions = (4000, 4) if big else (400, 4)
    spec = batch_spec(tmp_path, rows=rows, partitions=partitions)
    new_store(spec["store"], {"out": partitions})
    log = str(tmp_path / "worker.log")

    fault = {"kill_commit": where.replace("-", "_")}
    run_killed({**spec, "fault": fault}, log, where)
    assert len(marks(spec, "write-")) >= partitions, "every task wrote before the commit"
    run_batch(spark, spec)  # the rerun, in this process's session: no fault, no kill

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
def test_stream_driver_killed_in_a_micro_batch_commit_then_restarted_writes_once(spark, tmp_path, big, where):
    """Micro-batch 1's commit SIGKILLs the driver; restarted from the checkpoint, run to the end."""
    partitions = 2
    spec = stream_spec(tmp_path, keep_partition=True)
    new_store(spec["store"], {"in": partitions, "out": partitions})
    expected = produce_input(spec["store"], "in", partitions, transactions=60 if big else 15, per_txn=10)
    log = str(tmp_path / "worker.log")

    run_killed({**spec, "fault": {"kill_commit": where.replace("-", "_"), "kill_batch": 1}}, log, where)
    assert marks(spec, "commit-0") and marks(spec, "commit-1"), "batch 0 committed, batch 1 killed in its commit"
    run_stream(spark, spec)  # restarted from the checkpoint, run to the end

    assert_exactly(committed(spec["store"], "out", partitions), upper(expected))
    assert_clean(spec["store"])


# ---- 2. task attempts failing after writing part of their rows ----------------------------------------


@pytest.mark.parametrize("mode", ["batch", "stream"])
def test_task_attempts_failing_after_writing_part_of_their_rows_are_retried_once(tmp_path, big, mode):
    """The first attempt of two task partitions sends 2 Arrow batches (16 rows each) to the writer,
    then one raises and the other's Python worker is SIGKILLed; Spark retries them (local[2,4]:
    4 attempts); the retries' transactions fence the dead attempts' open ones."""
    fault = {"fail_partitions": {"0": "raise", "1": "kill"}, "fail_after": 2}
    conf = {"master": "local[2,4]", "fault": fault}
    if mode == "batch":
        rows, partitions = (4000, 4) if big else (400, 4)
        spec = batch_spec(tmp_path, rows=rows, partitions=partitions, **conf)
        new_store(spec["store"], {"out": partitions})
        expected = expected_batch(rows, partitions)
    else:
        partitions = 2
        spec = stream_spec(tmp_path, keep_partition=True, per_trigger=100, **conf)
        new_store(spec["store"], {"in": partitions, "out": partitions})
        expected = upper(produce_input(spec["store"], "in", partitions, transactions=60 if big else 18, per_txn=10))

    run_ok(spec, str(tmp_path / "worker.log"))

    assert marks(spec, "failed-attempt-raise") and marks(spec, "failed-attempt-kill"), "both faults happened"
    retried = {n.split(".")[0].split("-")[2] for n in marks(spec, "write-") if n.split(".")[0].endswith("-1")}
    assert {"0", "1"} <= retried, f"tasks 0 and 1 ran a second attempt: {sorted(marks(spec, 'write-'))}"
    assert_exactly(committed(spec["store"], "out", partitions), expected)
    assert_clean(spec["store"])


# ---- 3. a duplicate attempt of a task writing concurrently (what speculation does) --------------------


def test_a_duplicate_attempt_writing_concurrently_is_fenced(tmp_path, big):
    """Attempt 0 of task 1 leaves a copy writing while attempt 1 runs and fences it mid-write; attempt 0
    of task 3 leaves a copy that prepares all its rows before attempt 1 starts (attempt 1's
    initialisation aborts that prepared transaction). Only attempt 1's rows are committed."""
    rows, partitions = (4000, 4) if big else (400, 4)
    fault = {"zombie_partitions": {"1": "fenced", "3": "prepared"}}
    spec = batch_spec(tmp_path, rows=rows, partitions=partitions, master="local[2,4]", fault=fault)
    new_store(spec["store"], {"out": partitions})

    run_ok(spec, str(tmp_path / "worker.log"))

    fenced, prepared = marks(spec, "zombie-p1-"), marks(spec, "zombie-p3-")
    assert fenced and prepared, f"both copies ran to their end: {sorted(os.listdir(spec['marks']))}"
    assert not fenced[0].startswith("zombie-p1-ok"), "the copy writing after attempt 1 started was fenced"
    assert prepared[0].startswith("zombie-p3-ok"), "the copy prepared before attempt 1 started"
    assert marks(spec, "attempt-started-p1") and marks(spec, "attempt-started-p3")
    assert_exactly(committed(spec["store"], "out", partitions), expected_batch(rows, partitions))
    assert_clean(spec["store"])


# ---- 4. the replay procedure: the checkpoint's last commit-log entry deleted ---------------------------


def test_a_replayed_micro_batch_writes_nothing_new(tmp_path, big):
    """A stream runs to its end in several micro-batches; the last `commits/<n>` entry of its checkpoint is
    deleted (Spark then re-runs batch n on restart, as after a crash between the sink's commit and
    the commit log's write); the restarted query runs batch n's tasks and commit again, and the
    topic still holds every record once."""
    partitions = 2
    spec = stream_spec(tmp_path, keep_partition=True, fault={"count": True})
    new_store(spec["store"], {"in": partitions, "out": partitions})
    expected = upper(produce_input(spec["store"], "in", partitions, transactions=60 if big else 15, per_txn=10))
    log = str(tmp_path / "worker.log")
    run_ok(spec, log)
    commits = os.path.join(spec["checkpoint"], "commits")
    last = max(int(n) for n in os.listdir(commits) if n.isdigit())
    assert last >= 2, "several micro-batches"
    before = committed(spec["store"], "out", partitions)
    assert_exactly(before, expected)

    os.remove(os.path.join(commits, str(last)))
    crc = os.path.join(commits, f".{last}.crc")
    if os.path.exists(crc):
        os.remove(crc)
    replay = {**spec, "marks": str(tmp_path / "marks-replay")}
    run_ok(replay, log)

    # the batch really ran again: its tasks called the writer, Spark committed it to the writer again
    # (the writer may skip a decided batch without reading its rows, so rows are not counted)
    assert len(marks(replay, "write-")) >= partitions, "the replayed batch's tasks ran the writer"
    assert marks(replay, f"commit-{last}"), f"the writer's commit of batch {last} ran again"
    assert os.path.exists(os.path.join(commits, str(last))), "the replayed batch is in the commit log again"
    assert_exactly(committed(spec["store"], "out", partitions), expected)
    assert_clean(spec["store"])


# ---- 5. txlog -> transform -> txlog, killed -9 at random moments ---------------------------------------


def forget_unfinished_checkpoint_files(checkpoint: str) -> None:
    """Remove the temporary files Spark leaves in the checkpoint when killed while writing a log entry.

    Spark writes `offsets/<n>` as `.<n>.<uuid>.tmp` and renames it; a kill -9 before the rename
    leaves the temporary file, and when that was the first batch's entry, PySpark 4.3 refuses
    to restart ([STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY] "offsets should be empty on batch 0").
    That is Spark's own checkpoint, not the sink's; an operator restarting such a query removes them.
    """
    for folder, _, files in os.walk(checkpoint):
        for name in files:
            if name.endswith((".tmp", ".tmp.crc")):
                os.remove(os.path.join(folder, name))


def test_pipeline_killed_at_random_moments_writes_every_committed_input_once(spark, tmp_path, big):
    """A stream reads a topic holding committed and aborted transactions, upper-cases the values and
    writes another topic; its process is SIGKILLed at random moments (some inside the writer's commit,
    where a sink that is not exactly once duplicates), restarted from the checkpoint each time, then
    run to the end: every committed input key once in the output, nothing aborted."""
    partitions, kills = 3, (8 if big else 3)
    rng = random.Random(SEED)
    spec = stream_spec(tmp_path, per_trigger=20, until_killed=True)
    new_store(spec["store"], {"in": partitions, "out": partitions})
    expected = produce_input(spec["store"], "in", partitions, transactions=150 if big else 30, per_txn=10)
    want = {k: v.upper() for rows in expected.values() for k, v in rows}
    log = str(tmp_path / "worker.log")

    # each kill at a moment of its own kind, in a random order: inside the writer's commit of one of the
    # next micro-batches (at its entry, or after its first completed transaction: SIGKILL from the
    # driver's commit process), or past a random number of task writes plus a random pause
    moments = rng.sample(["entry", "after_first", "random"] * kills, kills)
    for kill, moment in enumerate(moments):
        commits = os.path.join(spec["checkpoint"], "commits")
        done = max((int(n) for n in os.listdir(commits) if n.isdigit()), default=-1) if os.path.isdir(commits) else -1
        fault = {"count": True}
        if moment != "random":
            fault.update(kill_commit=moment, kill_batch=done + rng.randint(1, 3))
        worker = _start({**spec, "fault": fault}, log)
        try:
            _wait_for_line(worker, b"started", log)
            if moment == "random":
                target = len(marks(spec, "write-")) + rng.randint(1, 4)
                while len(marks(spec, "write-")) < target:
                    assert worker.poll() is None, f"kill {kill}: the query died on its own:\n{_tail(log)}"
                    time.sleep(0.05)
                time.sleep(rng.uniform(0.0, 1.5))
                assert worker.poll() is None, f"kill {kill}: the query died on its own:\n{_tail(log)}"
            else:
                worker.wait(WORKER_TIMEOUT_S)
                assert marks(spec, f"killed-{moment.replace('_', '-')}"), f"kill {kill}: no kill in the commit"
        finally:
            code = _reap(worker)
        assert code == -signal.SIGKILL, f"kill {kill} ({moment}): exit {code}:\n{_tail(log)}"
        forget_unfinished_checkpoint_files(spec["checkpoint"])
    run_stream(spark, {**spec, "until_killed": False})  # restarted once more, run to the end

    out = committed(spec["store"], "out", partitions)
    keys = Counter(k for rows in out.values() for k, _ in rows)
    duplicated = {k: n for k, n in keys.items() if n > 1}
    assert not duplicated, f"seed {SEED}: {len(duplicated)} keys written more than once"
    got = {k: v for rows in out.values() for k, v in rows}
    assert set(got) == set(want), (
        f"seed {SEED}: {len(set(want) - set(got))} lost, {len(set(got) - set(want))} not committed input"
    )
    assert got == want
    assert_clean(spec["store"])
