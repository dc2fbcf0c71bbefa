"""The runnable samples (the README's Python example among them) keep working."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_store_basics_sample_runs_and_deduplicates(tmp_path):
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, "samples", "store_basics.py"), str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert "appended at offset 0; the retry was answered with offset 0" in out.stdout
    assert "0 b'k1' b'v1' [('h', b'x')]" in out.stdout
    assert "log start 0 log end 1 LSO 1" in out.stdout


def test_exactly_once_sample_survives_kill_9_and_rerun(tmp_path):
    """The README's promise for samples/exactly_once.py: kill it, run it again, 1000 distinct squares."""
    import signal
    import time

    cmd = [sys.executable, os.path.join(ROOT, "samples", "exactly_once.py"), str(tmp_path / "data")]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(0.8)
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "squares holds 1000 records, 1000 distinct" in out.stdout


def test_spark_analysis_sample_answers_its_questions(tmp_path):
    """samples/spark_analysis.py: its own Spark session, in a process of its own like a user's."""
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, "samples", "spark_analysis.py"), str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert "orders: 225 committed records, 300 written" in out.stdout
    rates = [line.split("|")[1:4] for line in out.stdout.splitlines() if line.count("|") == 4]
    assert [[cell.strip() for cell in row] for row in rates[1:4]] == [
        ["0", "20", "0.00"],
        ["1", "20", "0.25"],
        ["2", "20", "0.50"],
    ]
    assert "CompleteAbort" in out.stdout and "CompleteCommit" in out.stdout
