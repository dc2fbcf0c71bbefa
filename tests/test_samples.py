"""The runnable samples (the README's Python example among them) keep working."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_store_basics_sample_runs_and_deduplicates(tmp_path):
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, "samples", "store_basics.py"), str(tmp_path / "data")],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert "appended at offset 0; the retry was answered with offset 0" in out.stdout
    assert "0 b'k1' b'v1' [('h', b'x')]" in out.stdout
    assert "log start 0 log end 1 LSO 1" in out.stdout
