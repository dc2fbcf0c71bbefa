"""The scoreboard's common part: results, allow-lists, findings files, the table, the cache.

A suite runner (compat/<suite>/__init__.py) fetches and builds its pinned client test suite (cached
outside the repository), runs it against one bootstrap address and returns a SuiteResult: one
Outcome per test. This module judges it against the suite's allow-list (compat/<suite>/allowlist),
writes compat/<suite>/findings.md and renders the table that compat/README.md shows.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from txlog.spark.jvm_build import cache_dir as jvm_cache_dir

PASSED = "passed"
FAILED = "failed"
SKIPPED = "skipped"

COMPAT_DIR = os.path.dirname(os.path.abspath(__file__))

# Broker settings the client suites assume of the broker they are pointed at, on top of the rig's
# single-node settings (tests/kafka_rig/broker.py). Each is what the suite's own fixture broker runs:
# kafka-python's and librdkafka's test brokers create topics on first use (Kafka's default, which
# the rig turns off) with 4 partitions (kafka-python's fixture; its transactional offsets test
# commits for partition 1 of an auto-created topic), kafka-python's group tests use 3 s session
# timeouts (the broker's minimum is 6 s by default), and kafka-python's CreatePartitions test
# assigns replicas to broker id 0.
BASELINE_BROKER_PROPS: dict[str, str] = {
    "auto.create.topics.enable": "true",
    "num.partitions": "4",
    "group.min.session.timeout.ms": "1000",
    "node.id": "0",
}


# What the txlog target (`python3 -m compat --serve`) starts `txlog serve` with: the same
# assumptions of the suites as BASELINE_BROKER_PROPS, plus the rig's immediate first group join
# (tests/kafka_rig/broker.py's BASE_PROPS gives the baseline group.initial.rebalance.delay.ms=0).
# Only the keys this checkout's server knows are passed (`txlog serve --config` refuses others);
# the rest are named in the run's output and findings, since a suite's test that relies on one
# (kafka-python's CreatePartitions test assigns replicas to node 0) may fail for that reason.
# librdkafka's 0103 creates every topic with replication factor 3 (its own test cluster has three
# brokers; the names are random, so nothing can create them first): the server's opt-in takes the
# factor and makes one replica, which Metadata then reports (docs/serve.md §7).
TXLOG_SERVE_CONFIGS: dict[str, str] = {
    **BASELINE_BROKER_PROPS,
    "group.initial.rebalance.delay.ms": "0",
    "txlog.replication.factor.cap.enable": "true",
}

# The targets a run is judged for: each has its own allow-list and findings file in every suite's
# folder, since what may fail against the baseline (one Kafka broker) and against txlog serve
# differ, and the rule (every test passing at the baseline passes against txlog, or is
# listed with its reason) needs the txlog list apart.
BASELINE = "baseline"
TXLOG = "txlog"
TARGET_KINDS = (BASELINE, TXLOG)


def allowlist_name(kind: str) -> str:
    """`allowlist` for the baseline, `allowlist.txlog` for txlog serve."""
    return "allowlist" if kind == BASELINE else f"allowlist.{kind}"


def findings_name(kind: str) -> str:
    """`findings.md` for the baseline, `findings.txlog.md` for txlog serve."""
    return "findings.md" if kind == BASELINE else f"findings.{kind}.md"


class CompatError(RuntimeError):
    """A suite could not be fetched, built or run at all (not a test failure); the message says why."""


@dataclass(frozen=True)
class Outcome:
    """One test of a suite: its id (as the allow-list names it), passed/failed/skipped, and why."""

    test: str
    status: str
    detail: str = ""


@dataclass
class SuiteResult:
    suite: str
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0
    log_path: str = ""


@dataclass(frozen=True)
class Verdict:
    """A SuiteResult judged against its allow-list: `unexpected` are failures the allow-list lacks."""

    result: SuiteResult
    allowlist: Mapping[str, str]
    allowlist_file: str = "allowlist"  # its name in the suite's folder, for findings.md

    @property
    def run(self) -> int:
        return sum(1 for o in self.result.outcomes if o.status != SKIPPED)

    @property
    def passed(self) -> int:
        return sum(1 for o in self.result.outcomes if o.status == PASSED)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.result.outcomes if o.status == FAILED]

    @property
    def allowed(self) -> list[Outcome]:
        return [o for o in self.failed if o.test in self.allowlist]

    @property
    def unexpected(self) -> list[Outcome]:
        return [o for o in self.failed if o.test not in self.allowlist]

    @property
    def stale(self) -> list[str]:
        """Allow-listed tests that ran and passed: the allow-list entry no longer describes the target."""
        passing = {o.test for o in self.result.outcomes if o.status == PASSED}
        return sorted(passing & set(self.allowlist))


def cache_root() -> str:
    """Where suites keep their downloads and builds: beside the broker's jars, outside the repository."""
    return os.path.join(os.path.dirname(jvm_cache_dir()), "compat")


def suite_dir(suite: str) -> str:
    return os.path.join(COMPAT_DIR, suite)


def load_allowlist(path: str) -> dict[str, str]:
    """Read `TEST | reason` lines (`#` starts a comment line); every entry must give its reason."""
    entries: dict[str, str] = {}
    if not os.path.exists(path):
        return entries
    with open(path) as f:
        for number, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            test, sep, reason = (part.strip() for part in line.partition("|"))
            if not sep or not test or not reason:
                raise CompatError(f"{path}:{number}: an allow-list line is `TEST | reason`, got {line!r}")
            entries[test] = reason
    return entries


def judge(result: SuiteResult, folder: str, kind: str = BASELINE) -> Verdict:
    """The result against compat/<folder>/allowlist (or the allow-list of another target kind)."""
    name = allowlist_name(kind)
    return Verdict(result, load_allowlist(os.path.join(suite_dir(folder), name)), name)


def table(verdicts: Sequence[Verdict]) -> str:
    """The scoreboard: one row per suite, as a Markdown table (compat/README.md carries a copy)."""
    header = ("suite", "tests run", "passed", "failed", "allowed to fail", "time")
    rows = [
        (
            v.result.suite,
            str(v.run),
            str(v.passed),
            str(len(v.failed)),
            str(len(v.allowed)),
            f"{v.result.seconds:.0f} s",
        )
        for v in verdicts
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["| " + " | ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)) + " |" for row in [header, *rows]]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def findings(verdict: Verdict, bootstrap: str, target: str, notes: Sequence[str] = ()) -> str:
    """findings.md: what failed against which target, and why (allowed or not); `notes` are what a
    reader must know about the target itself (a config it lacked, a server that died)."""
    result = verdict.result
    out = [
        f"# {result.suite}: findings",
        "",
        f"Last run against {target} at `{bootstrap}`: {verdict.run} tests run, {verdict.passed} passed, "
        f"{len(verdict.failed)} failed ({len(verdict.allowed)} allowed by `{verdict.allowlist_file}`), "
        f"{sum(1 for o in result.outcomes if o.status == SKIPPED)} skipped by the suite itself, "
        f"{result.seconds:.0f} s.",
        "",
    ]
    if notes:
        out += ["## About the target", ""]
        out += ["- " + note.replace("\n", "\n    ") for note in notes] + [""]
    if verdict.unexpected:
        out += ["## Failures not in the allow-list", ""]
        out += [f"- `{o.test}`: {_one_line(o.detail)}" for o in verdict.unexpected] + [""]
    if verdict.allowed:
        out += ["## Allowed failures", ""]
        out += [
            f"- `{o.test}`: {verdict.allowlist[o.test]} (failed with: {_one_line(o.detail)})" for o in verdict.allowed
        ]
        out += [""]
    if verdict.stale:
        out += ["## Allow-listed but passed (the entry may be stale)", ""]
        out += [f"- `{test}`" for test in verdict.stale] + [""]
    skipped = [o for o in result.outcomes if o.status == SKIPPED]
    if skipped:
        out += ["## Skipped by the suite", ""]
        out += [f"- `{o.test}`: {_one_line(o.detail)}" for o in skipped] + [""]
    if not verdict.failed:
        out += ["No test failed.", ""]
    return "\n".join(out)


def _one_line(text: str, limit: int = 700) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def run_logged(
    command: Sequence[str],
    *,
    log_path: str,
    timeout: float,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> tuple[int, float]:
    """Run a suite's process with its output in `log_path`; (exit code, seconds). A hang is killed."""
    began = time.monotonic()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            list(command),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env else None,
            cwd=cwd,
            start_new_session=True,
        )
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            # the whole process group: test runners fork (go's test2json, librdkafka's sub-tests)
            os.killpg(process.pid, 9)
            process.wait()
            code = -9
    return code, time.monotonic() - began


def require(tool: str, why: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise CompatError(f"`{tool}` is not on PATH: {why}")
    return path
