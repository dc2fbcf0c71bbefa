"""`txlog produce` reads any input without hanging and in bounded memory (issue 23, item 8).

A line longer than any record within the topic's max.message.bytes can come from is refused as
soon as that many of its bytes are read, never held whole; SIGTERM while produce waits on an
open, empty pipe ends it at once with the usual message.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.cli.cli_helpers import ROOT, _env, make_store, txlog

WAIT_S = 120  # a bound on waits, far beyond what they take on a loaded machine (never a timing check)
LINE = 40_000_000  # the line: 40 MB after a short one
# Peak RSS of that produce: about 45 MB reading the line no further than the limit allows; 155 MB
# when the whole line was read into memory first (measured). The bound sits between, with margin.
RSS_BOUND_MB = 100

_MEASURE = """
import resource, subprocess, sys
with open(sys.argv[1], "rb") as stdin:
    done = subprocess.run(sys.argv[2:], stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
sys.stdout.flush()
sys.stderr.write(done.stderr.decode(errors="replace"))
"""


def test_a_40_mb_line_is_refused_without_being_read_whole(tmp_path):
    store = str(tmp_path / "store")
    make_store(store, t=1)
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:
        f.write(b"a\n")
        f.write(b"x" * LINE)
        f.write(b"\nb\n")
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(big), sys.executable, "-m", "cli.main", "--data-dir", store]
        + ["produce", "-t", "t"],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    code, rss = map(int, proc.stdout.split())
    assert code == 1, proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith("Error: line 2: longer than 2098200 bytes, more than any record within ")
    assert "the 1 record before it was written, nothing after it" in line
    assert "txlog topics alter t --config max.message.bytes=" in line
    assert rss < RSS_BOUND_MB, f"produce peaked at {rss} MB on a {LINE}-byte line"
    assert txlog("consume", "-t", "t", data_dir=store).stdout == "a\n"


def test_a_too_long_line_is_skipped_under_ignore_error(tmp_path):
    store = str(tmp_path / "store")
    make_store(store, t=1)
    line = b"y" * (2 * 1_048_588 + 1025)  # one byte over what the default limit lets a line be
    proc = txlog(
        "produce", "-t", "t", "--property", "ignore.error=true", data_dir=store, input=b"a\n" + line + b"\r\nb"
    )
    assert proc.returncode == 0, proc.stderr
    assert "Skipped line 2: longer than 2098200 bytes" in proc.stderr
    assert txlog("consume", "-t", "t", data_dir=store).stdout == "a\nb\n"


def test_a_line_as_long_as_a_hex_record_within_the_limit_is_still_read(tmp_path):
    """The bound is the longest text a record within the limit can be: hex doubles its bytes."""
    store = str(tmp_path / "store")
    make_store(store, t=1)
    value = b"\xab" * 1_000_000
    proc = txlog("produce", "-t", "t", "--value-format", "hex", data_dir=store, input=value.hex().encode() + b"\n")
    assert proc.returncode == 0, proc.stderr
    assert txlog("consume", "-t", "t", "--value-format", "hex", data_dir=store).stdout == value.hex() + "\n"


def test_sigterm_while_waiting_on_an_empty_pipe_exits_at_once(tmp_path):
    store = str(tmp_path / "store")
    make_store(store, t=1)
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "--data-dir", store, "produce", "-t", "t"],
        cwd=ROOT,
        env=_env(),
        stdin=read_end,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    os.close(read_end)
    try:
        os.write(write_end, b"first\n")  # sent when the input goes quiet: then produce waits on the pipe
        deadline = time.monotonic() + WAIT_S
        while txlog("consume", "-t", "t", data_dir=store).stdout != "first\n":
            assert time.monotonic() < deadline, "the first line was never written"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=WAIT_S)  # the pipe is still open: only the signal ends it
    finally:
        os.close(write_end)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert err.decode() == "Interrupted after producing 1 record to t: partition 0 offsets 0-0.\n"
