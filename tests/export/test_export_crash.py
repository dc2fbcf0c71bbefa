"""An export killed with SIGKILL part-way, then run again: exactly the committed records, once.

The export runs in a child process whose progress callback (the `on_rows` of txlog.export.export,
what the CLI's progress line uses) blocks once rows of the third partition are being written:
the first partition's rows are then written and handed on, the second's part-way. The parent kills
it there. Delta and Iceberg must show no trace of the run (their commit never happened); Parquet
keeps the finished file of the first partition and drops the half-written one. The rerun
completes the table, and the table then equals what a read_committed Consumer reads.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.cli.cli_helpers import ROOT, assert_ok
from tests.export.export_helpers import (
    FORMATS,
    committed_rows,
    export_cli,
    make_store,
    plain,
    read_with_library,
    rows_of,
    table_version,
    transaction,
)

pytest.importorskip("deltalake")
pytest.importorskip("pyiceberg")

PER_PARTITION = 3000
CHILD = """
import sys, time
from txlog.export import export

store, path, fmt, blocked_after, signal_file = sys.argv[1:6]

def on_rows(total):
    if total > int(blocked_after):
        open(signal_file, "w").close()
        time.sleep(600)  # killed here

export(store, ["big"], path, fmt, on_rows=on_rows)
"""
WAIT_S = 300  # a generous bound for a loaded machine: only a hang reaches it


def _kill_mid_export(store: str, path: str, fmt: str, blocked_after: int, signal_file: str) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, store, path, fmt, str(blocked_after), signal_file],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    try:
        deadline = time.monotonic() + WAIT_S
        while not os.path.exists(signal_file):
            assert child.poll() is None, "the export ended before it was blocked"
            assert time.monotonic() < deadline, "the export never reached the third partition"
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_killed_export_rerun_writes_every_committed_record_once(tmp_path, fmt):
    store, path = str(tmp_path / "store"), str(tmp_path / "table")
    make_store(store, big=3)
    plain(store, [("big", p, b"first", b"v", None) for p in range(3)])
    assert_ok(export_cli(store, fmt, path, "big"))
    before = table_version(fmt, path)
    value = b"x" * 100
    for p in range(3):
        records = [("big", p, f"k{p}-{i}".encode(), value, None) for i in range(PER_PARTITION)]
        transaction(store, f"t{p}", records, commit=True)
        transaction(store, f"t{p}", [("big", p, b"aborted", value, None) for i in range(50)], commit=False)

    _kill_mid_export(store, path, fmt, 2 * PER_PARTITION, str(tmp_path / "blocked"))

    if fmt == "parquet":  # the first partition's file was finished; the second's was being written
        files = sorted(os.listdir(os.path.join(path, "big-0")))
        # after the first export's record: 3000 committed, a COMMIT marker, 50 aborted, an ABORT marker
        assert files[-1] == f"{1:020d}-{PER_PARTITION + 53:020d}.parquet"
        assert any(n.endswith(".partial") for n in os.listdir(os.path.join(path, "big-1")))
        assert len(rows_of(read_with_library(fmt, path))) == 3 + PER_PARTITION
    else:  # nothing of the killed run is visible
        assert table_version(fmt, path) == before
        assert len(rows_of(read_with_library(fmt, path))) == 3

    assert_ok(export_cli(store, fmt, path, "big"))
    rows = rows_of(read_with_library(fmt, path))
    assert rows == committed_rows(store, ["big"])
    assert len(rows) == 3 + 3 * PER_PARTITION
    if fmt == "parquet":
        left = [n for d in ("big-0", "big-1", "big-2") for n in os.listdir(os.path.join(path, d))]
        assert not [n for n in left if n.endswith(".partial")]
