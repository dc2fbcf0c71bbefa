"""`txlog inspect` against Kafka's DumpLogSegments (kafka-dump-log.sh), line for line.

Both tools get the same options and the same `--files` list (one JVM per option set, since a
JVM start costs a second or two); their stdout must be the same lines. Where txlog
legitimately prints something else, the pair of lines must match one entry of an explicit
allow-list (`Allowed`), each with its reason and the section of docs/kafka-formats.md that
documents it. Used by the broker-written data set (item 2 of issue 21) and the txlog-written
store (item 3).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tests.kafka_rig.kafka_dist import run_tool

DUMP_LOG_SEGMENTS = "org.apache.kafka.tools.DumpLogSegments"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass(frozen=True)
class Allowed:
    """One known difference: `matches(kafka_line, txlog_line)` says whether a pair is it."""

    name: str
    reason: str
    matches: Callable[[str, str], bool]


#: option set -> the known differences of its lines. Each entry is documented in
#: docs/kafka-formats.md §10 under its name; none is needed today (every difference found was fixed).
ALLOWED: dict[str, list[Allowed]] = {}


@dataclass
class Run:
    stdout: list[str]
    stderr: str
    returncode: int


def kafka_dump(options: Iterable[str], files: list[str]) -> Run:
    result = run_tool(DUMP_LOG_SEGMENTS, *options, "--files", ",".join(files), check=False)
    return Run(result.stdout.splitlines(), result.stderr, result.returncode)


def txlog_inspect(options: Iterable[str], files: list[str]) -> Run:
    """The installed CLI's `inspect` in a process of its own, as a user runs it."""
    result = subprocess.run(
        [sys.executable, "-c", "from cli.main import app; app()", "inspect", *options, "--files", ",".join(files)],
        capture_output=True,
        text=True,
        errors="surrogateescape",
        timeout=600,
        env={**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")},
    )
    return Run(result.stdout.splitlines(), result.stderr, result.returncode)


def unexplained(kafka: list[str], txlog: list[str], allowed: Iterable[Allowed] = ()) -> list[str]:
    """The differing lines no allow-list entry explains, as `-kafka` / `+txlog` pairs."""
    allowed = list(allowed)
    problems = []
    if len(kafka) != len(txlog):
        problems.append(f"kafka printed {len(kafka)} lines, txlog {len(txlog)}")
    for number, (k, t) in enumerate(zip(kafka, txlog, strict=False), 1):
        if k != t and not any(a.matches(k, t) for a in allowed):
            problems.append(f"line {number}:\n-{k}\n+{t}")
    return problems


def used_entries(kafka: list[str], txlog: list[str], allowed: Iterable[Allowed]) -> set[str]:
    """The allow-list entries some differing pair needed (an entry nothing needs is stale)."""
    return {a.name for k, t in zip(kafka, txlog, strict=False) if k != t for a in allowed if a.matches(k, t)}


def regex_pair(kafka_pattern: str, txlog_pattern: str) -> Callable[[str, str], bool]:
    k, t = re.compile(kafka_pattern), re.compile(txlog_pattern)
    return lambda kafka, txlog: bool(k.search(kafka)) and bool(t.search(txlog))


def tree_state(root: str) -> dict[str, tuple[str, int, int, int]]:
    """Every file and directory under root: its digest (files), size, mode and mtime in ns."""
    state: dict[str, tuple[str, int, int, int]] = {}
    for directory, _, names in os.walk(root):
        st = os.stat(directory)
        state[directory] = ("dir", 0, st.st_mode, st.st_mtime_ns)
        for name in names:
            path = os.path.join(directory, name)
            st = os.stat(path)
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            state[path] = (digest, st.st_size, st.st_mode, st.st_mtime_ns)
    return state
