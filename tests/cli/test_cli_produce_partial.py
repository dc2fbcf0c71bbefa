"""A `txlog produce` that fails part-way says exactly what it wrote (issue 23, item 6).

The store refuses part-way for real: one partition directory is a read-only bind mount (a private
mount namespace, `unshare -m`, root only: chmod does not stop root), so the records keyed to the
other partitions are acknowledged while that partition's appends fail. The line before the Error
line names the acknowledged records by partition and offsets, and that is exactly what the log
holds; in a transaction, nothing is visible and the line says so.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.cli.cli_helpers import ROOT, _env, make_store, txlog

LINES = 400


def _produce_with_a_read_only_partition(store: str, tmp_path, *extra: str) -> tuple[int, list[str]]:
    """`txlog produce -t t -K:` of LINES keyed lines while t-2 is read-only: (exit code, stderr lines)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare for a read-only mount")
    lines = tmp_path / "keyed.txt"
    lines.write_text("".join(f"k{i}:v{i}\n" for i in range(LINES)))
    part = os.path.join(store, "t-2")
    args = " ".join(f"'{a}'" for a in ("produce", "-t", "t", "-K:", str(lines), *extra))
    script = (
        f"mount --bind {part} {part} && mount -o remount,bind,ro {part} || exit 99\n"
        f"{sys.executable} -m cli.main --data-dir {store} {args}"
    )
    proc = subprocess.run(
        ["unshare", "-m", "bash", "-c", script], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300
    )
    if proc.returncode == 99:
        pytest.skip(f"no read-only bind mount here: {proc.stderr}")
    return proc.returncode, proc.stderr.splitlines()


def _offsets(store: str, partition: int) -> set[int]:
    proc = txlog("consume", "-t", "t", "-p", str(partition), "-f", "%o\\n", data_dir=store)
    return {int(line) for line in proc.stdout.split()}


def test_a_produce_that_fails_part_way_names_exactly_what_it_wrote(tmp_path):
    store = str(tmp_path / "store")
    make_store(store, t=4)
    code, err = _produce_with_a_read_only_partition(store, tmp_path)
    assert code == 1, err
    assert len(err) == 2 and err[1].startswith("Error: ") and "Read-only file system" in err[1], err
    report = re.fullmatch(
        r"Written before the failure: (\d+) of the (\d+) records sent, to t (.*); the other (\d+) were not "
        r"acknowledged \(records go to partitions by key, so these are not the first lines of the input\)\.",
        err[0],
    )
    assert report is not None, err[0]
    written, sent, where, missed = int(report[1]), int(report[2]), report[3], int(report[4])
    assert 0 < written < sent <= LINES and written + missed == sent
    named: dict[int, set[int]] = {}
    for part in where.split(", "):
        m = re.fullmatch(r"partition (\d+) offsets (.*)", part)
        assert m is not None, part
        runs = [tuple(map(int, run.split("-"))) for run in m[2].split(" and ")]
        named[int(m[1])] = {o for lo, hi in runs for o in range(lo, hi + 1)}
    in_log = {p: _offsets(store, p) for p in range(4)}
    assert 2 not in named and in_log[2] == set()
    assert named == {p: offsets for p, offsets in in_log.items() if offsets}  # exactly what the log holds
    assert sum(map(len, in_log.values())) == written


def test_a_transactional_produce_that_fails_part_way_says_nothing_is_visible(tmp_path):
    store = str(tmp_path / "store")
    make_store(store, t=4)
    code, err = _produce_with_a_read_only_partition(store, tmp_path, "--transactional-id", "load-1")
    assert code == 1, err
    assert len(err) == 2 and err[1].startswith("Error: "), err
    assert re.fullmatch(
        r"Transaction 'load-1' aborted: nothing from this input is visible(; the \d+ records it wrote stay in the "
        r"log as aborted records)?\.",
        err[0],
    ), err[0]
    assert txlog("consume", "-t", "t", data_dir=store).stdout == ""
