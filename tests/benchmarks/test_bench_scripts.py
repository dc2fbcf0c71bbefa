"""Every benchmark script still runs to the end (at a tiny size): the scripts are run by hand, on demand,
so nothing else would notice one that broke.

bench_groups.py's throughput part failed for months, from the move of tests into folders until it was
found by hand: it looked for its worker at a path that no longer existed. These runs check the
scripts' plumbing only (exit status 0, no traceback, the report printed, the scratch directory left
empty), never a number or a verdict: timing belongs to the scripts themselves, read by a person in one
sitting (tests/benchmarks/README.md). The runs whose cost is a JVM starting (Spark, or the rig's Kafka
broker) run with `--big`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@dataclass(frozen=True)
class Script:
    name: str
    args: str  # a size small enough for a few seconds (split on spaces)
    printed: str  # a piece of the report's last part: the run got there
    scratch: str | None = "--dir"  # the flag naming the scratch directory's parent, when the script has one
    jvm: bool = False  # starts a JVM (Spark, a Kafka broker): only with --big


SCRIPTS = [
    Script("bench_codec.py", "--records 2000 --batches 5 --reps 2", "decode+iterate", scratch=None),
    Script("bench_append.py", "--records 3000 --reps 2", "run-to-run spread"),
    Script(
        "bench_segments.py",
        "--segments 1,20 --records 2000 --rolls-at 5,20 --rolls 3 --reps 2",
        "roll CPU at 20 vs 5 segments",
    ),
    Script("bench_parallel_sync.py", "--reps 2 --partitions 1,10 --create-reps 2", "partitions"),
    Script("bench_groups.py", "--records 2000 --reps 2 --workers 2", "throughput 2 members"),
    Script(
        "bench_compaction.py",
        "--records 50000 --segment-mb 1 --reps 2 --skip-broker --skip-offsets",
        "txlog Store.compact",
    ),
    Script(
        "bench_producer.py",
        "--records 5000 --reps 2 --sizes 16384 --skip-cli --txn-sizes 1 --max-txns 50 --durable-sends 100"
        " --cold-sleep-us 100 --commit-seconds 1",
        "Part 4c",
    ),
    Script("bench_recovery.py", "--sizes-mb 2,4 --reps 2", "goal: the largest"),
    Script("bench_consume_inspect.py", "--records 20000 --reps 2", "inspect --print-data-log"),
    Script("bench_sql.py", "--records 5000 --reps 2 --engines duckdb", "duckdb", scratch="--work-dir"),
    Script("bench_coordinator.py", "--reps 2 --ids 10 --short 10 --long 100", "verdict"),
    Script("bench_read_committed.py", "--records 5000 --reps 2", "run-to-run spread"),
    Script("bench_serve.py", "--only txlog --records 2000 --reps 2", "server CPU s per phase"),
    Script("bench_analysis.py", "--records 2000 --reps 2 --only duckdb", "duckdb group by"),
    Script("bench_mirror.py", "--records 2000 --reps 2", "ratio mirror / copy loop", jvm=True),
    # its --work-dir keeps what it built there, by design (--reuse): without it, a directory of its own it deletes
    Script("bench_spark.py", "--records 2000 --reps 2 --skip-profile", "run-to-run spread", scratch=None, jvm=True),
    Script("bench_spark_write.py", "--records 2000 --reps 2", "txlog / parquet", jvm=True),
]


def test_every_script_is_listed() -> None:
    """A new bench_*.py gets a tiny run here too."""
    on_disk = {name for name in os.listdir(HERE) if name.startswith("bench_") and name.endswith(".py")}
    assert on_disk == {script.name for script in SCRIPTS}


@pytest.mark.parametrize("script", SCRIPTS, ids=[script.name for script in SCRIPTS])
def test_the_script_runs_to_its_report(script: Script, tmp_path, big: bool) -> None:
    if script.jvm and not big:
        pytest.skip("starts a JVM (Spark or a Kafka broker): run with --big")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    argv = [sys.executable, os.path.join(HERE, script.name), *script.args.split()]
    if script.scratch is not None:
        argv += [script.scratch, str(scratch)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, (
        f"{script.name} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    )
    assert "Traceback" not in done.stderr, done.stderr[-4000:]
    assert script.printed in done.stdout, done.stdout[-2000:]
    assert os.listdir(scratch) == [], f"{script.name} left {os.listdir(scratch)} in its scratch directory"


def test_a_script_stopped_with_sigterm_removes_its_scratch_directory(tmp_path) -> None:
    """`kill` or `timeout` ends a long run half-way; its scratch directory (gigabytes with --big) goes
    with it (benchutil.scratch_dir), where it used to stay under .bench-tmp."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    argv = [sys.executable, os.path.join(HERE, "bench_append.py"), "--records", "200000", "--reps", "50", "--dir"]
    proc = subprocess.Popen([*argv, str(scratch)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while not any(os.scandir(scratch)) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert any(os.scandir(scratch)), "the script made no scratch directory: nothing to stop half-way"
        time.sleep(0.5)  # into its timed appends
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, stderr.decode(errors="replace")[-2000:]
    assert b"Traceback" not in stderr, stderr.decode(errors="replace")[-2000:]
    assert os.listdir(scratch) == [], f"left {os.listdir(scratch)} in its scratch directory"
