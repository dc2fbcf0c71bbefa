"""N workers in one consumer group stay exactly-once under SIGKILL, long SIGSTOPs and late joiners.

Real processes on one store directory: 2, 3 or 4 group members (tests/crash/eos_worker.py
`member`, a TransformLoop subscribed to the input topic, or real `txlog process` runs)
copy 4-8 input partitions to the output topic in transactions, with random aborts. A
concurrent read_committed reader records everything it is given. This process is the
chaos: it SIGKILLs random workers (restarting them with the same transactional id),
SIGSTOPs some past their session timeout (the group must expire them and hand their
partitions on; after SIGCONT their stale round must be refused), and starts one worker
only once the others are under way. Then:

* every input appears exactly once in the read_committed output, per-partition order
  holds, and the reader's history has no anomaly (the checker of docs/reliability-scenarios.md scenario 60, extended
  with `:offset-regression`: the group's committed offsets never move backwards);
* the group's committed offsets equal the input end offsets, no transaction is left open;
* every batch parses with kafka-python.

`test_a_paused_zombie_is_fenced` is the issue's paused-worker case made deterministic:
the zombie is paused inside its transaction, replaced, resumed, and its commit refused.

Default sizes keep each run to seconds; `--big` runs more records and more chaos.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

import pytest

# the worker script and its sibling test modules are imported by name from this folder, and the
# repository root makes storage and txlog importable outside pytest too
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import eos_worker as ew
import test_exactly_once_e2e as e2e

from storage.store import Store
from txlog.coordinator.group_offsets import GroupOffsets
from txlog.coordinator.transaction_coordinator import TransactionCoordinator
from txlog.fetch import IsolationLevel
from txlog.schemas.transaction_log import TxnState
from txlog.topic_partition import TopicPartition

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

GROUP, IN, OUT = e2e.GROUP, e2e.IN, e2e.OUT
SESSION_MS = 1_500
HEARTBEAT_MS = 100
TXN_TIMEOUT_MS = 4_000


@dataclass
class Stop:
    """One SIGSTOP past the session timeout: what the worker held, and where the others' logs stood."""

    incarnation: int
    owned: set[int]
    at_stop: dict[str, tuple[int, int]]  # other worker -> (incarnation, lines in its log)
    at_resume: dict[str, tuple[int, int]] = field(default_factory=dict)


@dataclass
class Worker:
    index: int
    tid: str
    proc: subprocess.Popen | None = None
    log_path: str = ""
    incarnation: int = 0
    started: float = 0.0
    resumed: float = 0.0
    stopped_until: float | None = None
    done: bool = False
    kills: int = 0
    long_stops: int = 0
    exits: list[int] = field(default_factory=list)
    killed: set[int] = field(default_factory=set)  # incarnations this test SIGKILLed
    stops: list[Stop] = field(default_factory=list)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def owned_partitions(log_path: str) -> set[int]:
    """The input partitions a worker holds now, from its rebalance listener's lines."""
    return owned_partitions_of(e2e._log_lines(log_path))


def owned_partitions_of(lines: list[str]) -> set[int]:
    """The partitions held after these rebalance-listener lines."""
    owned: set[int] = set()
    for line in lines:
        word, _, rest = line.partition(" ")
        numbers = {int(p.rsplit("-", 1)[-1]) for p in rest.replace(",", " ").split() if p.rsplit("-", 1)[-1].isdigit()}
        if word in ("ASSIGNED", "Assigned"):
            owned |= numbers
        elif word in ("REVOKED", "Revoked"):
            owned -= numbers
        elif word in ("LOST", "Lost"):
            owned.clear()
    return owned


class GroupChaos:
    """Workers, reader, sweeper and chaos until the group has committed the whole input."""

    def __init__(
        self,
        tmp_path,
        *,
        workers: int,
        in_partitions: int,
        records: int,
        cli: bool,
        seed: int,
        kills: int,
        long_stops: int,
    ):
        self.tmp = tmp_path
        self.store_path = str(tmp_path / "store")
        self.rng = random.Random(seed)
        self.seed, self.cli = seed, cli
        self.inputs, self.ends = e2e.seed_input(self.store_path, records, in_partitions, 3, self.rng)
        self.workers = [Worker(i, f"worker-{i}") for i in range(workers)]
        self.kill_budget, self.stop_budget = kills, long_stops
        self.history_path = str(tmp_path / "reader.history")
        self.stop_file = str(tmp_path / "stop")
        self.problems: list[str] = []
        self.sweeper = e2e.Sweeper(self.store_path, 0.2)

    # ---- processes ------------------------------------------------------------------------------------

    def _command(self, w: Worker) -> list[str]:
        if self.cli:
            return [
                sys.executable,
                "-m",
                "cli.main",
                "--data-dir",
                self.store_path,
                "process",
                "-i",
                IN,
                "-o",
                OUT,
                "-g",
                GROUP,
                "--transactional-id",
                w.tid,
                "-n",
                "50",
                "--session-timeout-ms",
                str(SESSION_MS),
                "--heartbeat-interval-ms",
                str(HEARTBEAT_MS),
                "--transaction-timeout-ms",
                str(TXN_TIMEOUT_MS),
                "--",
                "sh",
                "-c",
                "sleep 0.1; cat",
            ]
        return [
            sys.executable,
            os.path.join(HERE, "eos_worker.py"),
            "member",
            "--store",
            self.store_path,
            "--transactional-id",
            w.tid,
            "--group",
            GROUP,
            "--txn-size",
            "50",
            "--abort-p",
            "0.25",
            "--txn-timeout-ms",
            str(TXN_TIMEOUT_MS),
            "--delay-ms",
            "100",
            "--session-timeout-ms",
            str(SESSION_MS),
            "--heartbeat-interval-ms",
            str(HEARTBEAT_MS),
            "--seed",
            str(self.rng.randrange(1 << 30)),
        ]

    def start(self, w: Worker) -> None:
        w.incarnation += 1
        w.log_path = str(self.tmp / f"{w.tid}.{w.incarnation}.log")
        with open(w.log_path, "w") as log:
            w.proc = subprocess.Popen(self._command(w), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        w.stopped_until = None
        w.started = time.monotonic()

    def start_reader(self) -> None:
        self.reader_log = str(self.tmp / "reader.log")
        with open(self.reader_log, "w") as log:
            self.reader = subprocess.Popen(
                [
                    sys.executable,
                    os.path.join(HERE, "eos_worker.py"),
                    "read",
                    "--store",
                    self.store_path,
                    "--topic",
                    OUT,
                    "--history",
                    self.history_path,
                    "--stop-file",
                    self.stop_file,
                    "--drain-timeout",
                    "30",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def committed_total(self) -> int:
        with Store.open(self.store_path, read_only=True) as store:
            committed = GroupOffsets(store).committed(GROUP)
        return sum(om.offset for om in committed.values())

    # ---- the run ----------------------------------------------------------------------------------------

    def run(self, deadline_s: float) -> None:
        self.sweeper.start()
        self.start_reader()
        for w in self.workers[:-1]:
            self.start(w)
        late = self.workers[-1]
        total = sum(self.ends.values())
        deadline = time.monotonic() + deadline_s
        next_tick = time.monotonic() + 0.5
        try:
            while not all(w.done for w in self.workers):
                now = time.monotonic()
                if now > deadline:
                    self.problems.append("deadline passed: " + self._state())
                    e2e.dump_stacks(*(w.proc for w in self.workers))
                    return
                if late.proc is None and self.committed_total() >= total // 4:
                    self.start(late)  # a member joining mid-stream
                self._reap()
                self._resume_stopped(now)
                if now >= next_tick and late.proc is not None:
                    self._chaos()
                    next_tick = now + self.rng.uniform(0.3, 0.8)
                time.sleep(0.05)
        finally:
            self.kill_everything()

    def _reap(self) -> None:
        for w in self.workers:
            if w.proc is None or w.done or w.proc.poll() is None:
                continue
            code = w.proc.returncode
            w.exits.append(code)
            if code == 0:
                w.done = True
            elif code in (-signal.SIGKILL, ew.EXIT_FENCED, 1):
                # Killed by us; or fenced because its transaction timed out while it was stopped
                # (1 is `txlog process` exiting with that error): it comes back with its id.
                if code == 1 and "fenced" not in e2e._tail(w.log_path).lower():
                    self.problems.append(f"{w.tid} exited 1:\n{e2e._tail(w.log_path)}")
                    w.done = True
                    continue
                self.start(w)
            else:
                self.problems.append(f"{w.tid} exited {code}:\n{e2e._tail(w.log_path)}")
                w.done = True

    def _resume_stopped(self, now: float) -> None:
        for w in self.workers:
            if w.stopped_until is not None and now >= w.stopped_until:
                w.stops[-1].at_resume = self._log_marks(w)
                os.kill(w.proc.pid, signal.SIGCONT)
                w.stopped_until = None
                w.resumed = now

    def _chaos(self) -> None:
        """One tick: SIGSTOP a worker that owns partitions (first), or SIGKILL one.

        Only workers that have run a while are hit (a worker killed while importing tests
        nothing), and a resumed worker gets time to learn that the group replaced it.
        """
        now = time.monotonic()
        settled = [
            w for w in self.workers if w.alive() and w.stopped_until is None and now - max(w.started, w.resumed) > 1.0
        ]
        if not settled:
            return
        owners = [w for w in settled if owned_partitions(w.log_path)]
        first_stop = not any(x.long_stops for x in self.workers)
        if self.stop_budget and owners and (first_stop or self.rng.random() < 0.35):
            w = self.rng.choice(owners)
            self.stop_budget -= 1
            w.long_stops += 1
            w.stops.append(Stop(w.incarnation, owned_partitions(w.log_path), self._log_marks(w)))
            os.kill(w.proc.pid, signal.SIGSTOP)  # past the session timeout: the group must replace it
            w.stopped_until = now + SESSION_MS / 1000 + self.rng.uniform(0.5, 1.5)
        elif self.kill_budget and not first_stop and len(settled) >= 2:
            # (while a worker is stopped, a kill must leave a running one to replace it)
            w = self.rng.choice(settled)
            self.kill_budget -= 1
            w.kills += 1
            w.killed.add(w.incarnation)
            os.kill(w.proc.pid, signal.SIGKILL)

    def _log_path(self, w: Worker, incarnation: int) -> str:
        return str(self.tmp / f"{w.tid}.{incarnation}.log")

    def _log_marks(self, stopped: Worker) -> dict[str, tuple[int, int]]:
        return {
            w.tid: (w.incarnation, len(e2e._log_lines(w.log_path)))
            for w in self.workers
            if w is not stopped and w.incarnation
        }

    def lines_between(self, w: Worker, start: tuple[int, int] | None, end: tuple[int, int]) -> list[str]:
        """What `w` logged between two marks (its logs across restarts in between)."""
        first, skip = start if start is not None else (1, 0)
        lines: list[str] = []
        for incarnation in range(first, end[0] + 1):
            got = e2e._log_lines(self._log_path(w, incarnation))
            stop = end[1] if incarnation == end[0] else len(got)
            lines += got[skip if incarnation == first else 0 : stop]
        return lines

    def unreported_replacements(self) -> list[str]:
        """Stopped workers whose partitions went to another member during the stop, yet never
        learned it (no LOST, no fencing) although they ran on after SIGCONT.

        A stop under a loaded machine may pass without anyone expiring the member (nobody
        touched the group in time): it then was not replaced and has nothing to learn.
        """
        unreported = []
        for w in self.workers:
            for stop in w.stops:
                if stop.incarnation in w.killed or not stop.at_resume:
                    continue
                told = [
                    line
                    for line in e2e._log_lines(self._log_path(w, stop.incarnation))
                    if line.startswith(("LOST", "Lost", "FENCED")) or "fenced" in line.lower()
                ]
                if told:
                    continue
                others = [
                    line
                    for o in self.workers
                    if o is not w and o.tid in stop.at_resume
                    for line in self.lines_between(o, stop.at_stop.get(o.tid), stop.at_resume[o.tid])
                ]
                taken = stop.owned & {
                    p
                    for line in others
                    if line.startswith(("ASSIGNED", "Assigned"))
                    for p in owned_partitions_of([line])
                }
                if taken:
                    unreported.append(f"{w.tid}.{stop.incarnation} lost {sorted(taken)} while stopped, never told")
        return unreported

    def _state(self) -> str:
        return json.dumps(
            {
                w.tid: {"alive": w.alive(), "done": w.done, "exits": w.exits, "tail": e2e._tail(w.log_path, 6)}
                for w in self.workers
            },
            indent=1,
        )

    def kill_everything(self) -> None:
        for w in self.workers:
            if w.alive():
                try:
                    os.kill(w.proc.pid, signal.SIGCONT)
                    w.proc.kill()
                except ProcessLookupError:
                    pass
                w.proc.wait()
        self.sweeper.stop_event.set()
        self.sweeper.join()

    def finish_reader(self) -> None:
        open(self.stop_file, "w").close()
        try:
            code = self.reader.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.reader.kill()
            code = "timeout"
        if code != 0:
            self.problems.append(f"reader exited {code}:\n{e2e._tail(self.reader_log)}")


def verify(sc: GroupChaos) -> dict:
    """Exactly-once, order, offsets, no open transaction, kafka-python parses every batch."""
    with Store.open(sc.store_path) as store:
        coordinator = TransactionCoordinator(store)
        coordinator.sweep_all()
        unfinished = [
            (d.transactional_id, d.state.state.name)
            for d in coordinator.list_transactions()
            if d.state.state in (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
        ]
        assert not unfinished, f"transactions left open: {unfinished}"
        committed = GroupOffsets(store).committed(GROUP)
        assert {tp: om.offset for tp, om in committed.items()} == {
            TopicPartition(IN, p): end for p, end in sc.ends.items()
        }, f"committed {committed}, ends {sc.ends}"
        final = {
            p: e2e.read_view(store.partition(OUT, p), IsolationLevel.READ_COMMITTED)
            for p in range(store.partition_count(OUT))
        }
    lost = sum(
        1
        for w in sc.workers
        for i in range(1, w.incarnation + 1)
        for line in e2e._log_lines(sc._log_path(w, i))
        if line.startswith(("LOST", "Lost"))
    )
    assert not sc.unreported_replacements(), sc.unreported_replacements()
    reads, lsos = e2e.parse_history(sc.history_path)
    commits = e2e.committed_offset_history(sc.store_path, GROUP)
    e2e.assert_no_anomalies(e2e.check_history(sc.inputs, final, reads, lsos, commits), f"[seed {sc.seed}] ")
    counts = e2e.kafka_python_scan(sc.store_path)
    return {
        "records": len(sc.inputs),
        "reader_polls": max((r[0] for r in reads), default=0),
        "out_abort_markers": counts[(OUT, "abort")],
        "offset_commits": sum(len(v) for v in commits.values()),
        "replaced_members_told": lost,
    }


CASES = {
    "2-loops-4-partitions": dict(workers=2, in_partitions=4, cli=False),
    "3-loops-6-partitions": dict(workers=3, in_partitions=6, cli=False),
    "4-loops-8-partitions": dict(workers=4, in_partitions=8, cli=False),
    "3-txlog-process-4-partitions": dict(workers=3, in_partitions=4, cli=True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_group_workers_stay_exactly_once_under_kills_and_stops(tmp_path, big, case):
    seed = int(os.environ.get("TXLOG_E2E_SEED") or random.randrange(1 << 30))
    per_partition = 2_500 if big else 750
    sc = GroupChaos(
        tmp_path,
        records=per_partition * CASES[case]["in_partitions"],
        seed=seed,
        kills=12 if big else 3,
        long_stops=4 if big else 1,
        **CASES[case],
    )
    started = time.monotonic()
    sc.run(deadline_s=600 if big else 150)
    sc.finish_reader()
    assert not sc.problems, f"[seed {seed}] " + "\n\n".join(sc.problems)
    assert sum(w.kills for w in sc.workers) >= 1 and sum(w.long_stops for w in sc.workers) >= 1, sc._state()
    numbers = verify(sc)
    print(
        f"\ngroup workers {case} "
        + json.dumps(
            {
                "seed": seed,
                "s": round(time.monotonic() - started, 1),
                "kills": sum(w.kills for w in sc.workers),
                "long_stops": sum(w.long_stops for w in sc.workers),
                **numbers,
            }
        )
    )


def test_a_paused_zombie_is_fenced(tmp_path):
    """A worker paused inside its transaction is replaced; resumed, its commit is refused and
    its output never becomes visible; the group's committed offsets never move backwards."""
    rng = random.Random(7)
    store_path = str(tmp_path / "store")
    inputs, ends = e2e.seed_input(store_path, 400, 4, 1, rng)
    hold = str(tmp_path / "hold")

    def start(tid: str, *extra: str) -> tuple[subprocess.Popen, str]:
        log_path = str(tmp_path / f"{tid}.log")
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    os.path.join(HERE, "eos_worker.py"),
                    "member",
                    "--store",
                    store_path,
                    "--transactional-id",
                    tid,
                    "--group",
                    GROUP,
                    "--txn-size",
                    "20",
                    "--abort-p",
                    "0",
                    "--txn-timeout-ms",
                    "60000",
                    "--session-timeout-ms",
                    "1000",
                    "--heartbeat-interval-ms",
                    "50",
                    *extra,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return proc, log_path

    def wait_for(log_path: str, word: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in e2e._log_lines(log_path):
                if line.startswith(word):
                    return line
            time.sleep(0.02)
        raise AssertionError(f"no {word} in {log_path}:\n{e2e._tail(log_path)}")

    zombie, zombie_log = start("zombie", "--hold-file", hold)
    try:
        held = wait_for(zombie_log, "HOLD").split()  # its first round's output is in the log, uncommitted
        os.kill(zombie.pid, signal.SIGSTOP)
        replacement, replacement_log = start("replacement")
        assert replacement.wait(timeout=60) == 0, e2e._tail(replacement_log)  # it took over and did everything
        assert "ASSIGNED 0,1,2,3" in "\n".join(e2e._log_lines(replacement_log))
        open(hold, "w").close()
        os.kill(zombie.pid, signal.SIGCONT)
        assert zombie.wait(timeout=60) == 0, e2e._tail(zombie_log)
    finally:
        for proc in (zombie,):
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
                proc.wait()
    lines = e2e._log_lines(zombie_log)
    assert any(line.startswith("LOST") for line in lines), lines  # it learned it had been replaced
    stats = next(line for line in lines if line.startswith("STATS")).split()
    assert int(stats[2]) >= 1, lines  # the held round was aborted: its offsets were refused
    with Store.open(store_path, read_only=True) as store:
        final = {0: e2e.read_view(store.partition(OUT, 0), IsolationLevel.READ_COMMITTED)}
        committed = GroupOffsets(store).committed(GROUP)
    values = [v for _, v in final[0]]
    assert sorted(values) == sorted(inputs) and len(values) == len(set(values))
    assert {tp.partition: om.offset for tp, om in committed.items()} == ends
    held_partition, first, last = int(held[1]), int(held[2]), int(held[3])
    held_values = {v for v, (p, off) in inputs.items() if p == held_partition and first <= off <= last}
    assert held_values <= set(values)  # processed once, by the replacement
    commits = e2e.committed_offset_history(store_path, GROUP)
    e2e.assert_no_anomalies(e2e.check_history(inputs, final, [], {}, commits) | {":unseen": []})
