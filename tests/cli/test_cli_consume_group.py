"""`txlog consume -g G` is a member of group G, as kafka-console-consumer with `--group` (issue 23, item 8).

Real processes: two `consume -g G --follow` split a two-partition topic between them, each
record printed once; `groups describe` lists them while they run; when one is stopped with
SIGTERM it leaves the group and the other takes its partition over from its committed offset.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import txlog as api
from tests.cli.cli_helpers import ROOT, _env, assert_ok, txlog

WAIT_S = 120  # a bound for the waits below, far beyond what they take on a loaded machine (never a timing check)


class _Member:
    """One `txlog consume -g G --follow` process, its stdout lines collected by a thread."""

    def __init__(self, data_dir: str, *args: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "--data-dir", data_dir, "consume", *args],
            cwd=ROOT,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def stop(self) -> tuple[int, str]:
        """SIGTERM, as a service manager stops it: (exit code, stderr)."""
        self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=WAIT_S)
        self._reader.join(WAIT_S)
        return self.proc.returncode, err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def _wait_for(what: str, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what}"
        time.sleep(0.1)


def _produce(path: str, tag: str, per_partition: int) -> list[str]:
    """`per_partition` records to each partition of 'two', valued p<partition>-<tag><i>."""
    values = [f"p{p}-{tag}{i}" for p in (0, 1) for i in range(per_partition)]
    with api.Producer(path) as producer:
        for value in values:
            producer.send("two", value=value.encode(), partition=int(value[1]))
    return values


def _members(path: str) -> dict[str, str] | None:
    """member id -> its current assignment, as `groups describe --members --verbose` shows it; None: no members."""
    proc = txlog("groups", "describe", "--group", "G", "--members", "--verbose", "--output", "json", data_dir=path)
    if "does not exist" in proc.stderr:  # no member has joined yet
        return None
    assert proc.returncode == 0, proc.stderr
    if not proc.stdout.strip():
        return None
    return {m["consumerId"]: m["currentAssignment"] for m in json.loads(proc.stdout)} or None


def test_two_consume_members_split_the_partitions_and_one_takes_over_when_the_other_stops(tmp_path):
    path = str(tmp_path / "store")
    with api.Admin(path) as admin:
        admin.create_topic("two", 2)
    first = _produce(path, "a", 50)
    a = _Member(path, "-t", "two", "-g", "G", "--follow")
    b = _Member(path, "-t", "two", "-g", "G", "--follow")
    try:
        # While both run: the group has two members holding one partition each, and every record
        # produced so far was printed by exactly one of them.
        def split() -> bool:
            members = _members(path)
            return members is not None and sorted(members.values()) == ["two:0", "two:1"]

        _wait_for("the group to give each member one partition", split)
        _wait_for("the first 100 records", lambda: len(a.lines) + len(b.lines) >= len(first))
        second = _produce(path, "b", 10)
        _wait_for("the next 20 records", lambda: len(a.lines) + len(b.lines) >= len(first) + len(second))
        for member in (a, b):  # each prints only its own partition's new records
            assert len({line.split("-")[0] for line in member.lines if "-b" in line}) == 1

        # SIGTERM: a leaves the group (its printed records committed); b takes its partition over.
        code, err = a.stop()
        assert code == 130, err
        assert "Traceback" not in err
        assert len(_members(path) or {}) == 1
        third = _produce(path, "c", 10)
        _wait_for(
            "b to print the records produced after a stopped",
            lambda: len([line for line in b.lines if "-c" in line]) >= len(third),
        )
        time.sleep(0.5)  # room for a duplicate to show up, were there one (it would fail the count below)
        printed = a.lines + b.lines
        assert sorted(printed) == sorted(first + second + third)  # each record exactly once
        code, err = b.stop()
        assert code == 130, err
        assert _members(path) is None  # b left too: the group has no members
    finally:
        a.kill()
        b.kill()


def test_consume_with_a_group_reads_to_the_end_and_leaves(tmp_path):
    """Without --follow a member exits at the end of its partitions, committed, and leaves the group."""
    path = str(tmp_path / "store")
    with api.Admin(path) as admin:
        admin.create_topic("two", 2)
    values = _produce(path, "a", 5)
    proc = txlog("consume", "-t", "two", "-g", "G", data_dir=path)
    assert_ok(proc)
    assert sorted(proc.stdout.splitlines()) == sorted(values)
    assert _members(path) is None
    again = txlog("consume", "-t", "two", "-g", "G", data_dir=path)
    assert_ok(again)
    assert again.stdout == ""  # resumed at the committed offsets
    assert txlog("consume", "-t", "two", "-g", "G", "--from-beginning", data_dir=path).stdout.count("\n") == 10
