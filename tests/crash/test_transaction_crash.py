"""Transaction crash tests with real processes, a real SIGKILL and a real SIGSTOP.

* docs/reliability-scenarios.md scenarios 28-35 (and 26): `txn_crash_worker.py txn` kills itself with SIGKILL at
  each step of a commit or abort (after registration, after data, in the middle of writing PREPARE_*,
  after PREPARE_*, after some markers, after all markers before COMPLETE_*, and with the
  group offsets partition still unmarked). A read-only view then checks what the crash left
  (LSO pinned, nothing of the transaction RC-visible, offsets unchanged), a recovery runs
  in a fresh process or a fresh Store (sweep past the timeout, re-init, rerun of the commit,
  the opposite end, a new producer instance), and `check_store` plus the expected outcome
  must hold: a decided end rolled forward, an undecided one aborted (or committed by the
  caller's own rerun), one marker per partition, offsets matching the decision.
  Each point runs twice with random partition sets by default and 100 times with `--big`.
* docs/reliability-scenarios.md scenario 23: an expired transaction of a killed process pins the LSO for read-only
  readers; the first writer / coordinator invocation aborts it before its own work.
* docs/reliability-scenarios.md scenario 25: a commit SIGSTOPped on its way to the coordinator arrives after a
  re-init and is refused by epoch; transaction N+1 is untouched.
* docs/reliability-scenarios.md scenario 38: two processes init the same transactional id at once and both write.

Set TXLOG_TXN_SEED to replay a run's random choices.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from txn_crash_worker import (
    OFFSETS_TOPIC,
    Worker,
    all_batches,
    check_store,
    clone_store,
    fetch_all,
    make_store,
    model,
    txn_histories,
    txn_values,
    wait_stopped,
)

from storage import Store
from txlog.clients.producer import Producer
from txlog.coordinator.group_offsets import GroupOffsets
from txlog.coordinator.internal_topics import owner_partition
from txlog.coordinator.transaction_coordinator import TransactionCoordinator
from txlog.errors import InvalidTxnStateError, UnstableOffsetCommitError
from txlog.schemas.transaction_log import TxnState
from txlog.topic_partition import TopicPartition

ALL_PARTS = [("A", 0), ("A", 1), ("t", 0), ("t", 1), ("t", 2)]  # "A" < "__consumer_offsets" < "t"
IN0 = TopicPartition("in", 0)
GROUP = "g"
OFFSETS_PART = (OFFSETS_TOPIC, owner_partition(GROUP, 8))
FIRST_OFFSET = 5  # g's committed offset before any transaction
TIDS = ["tx", "my-txn-id", "copier-0", "copier-1"]
SEED = int(os.environ.get("TXLOG_TXN_SEED") or random.randrange(1 << 30))
PARALLEL = 4  # crash workers alive at once while the parent checks the ones that died


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("template") / "store")
    make_store(root, {"A": 2, "t": 3, "in": 1})
    with Store.open(root) as s:
        GroupOffsets(s).commit(GROUP, {IN0: FIRST_OFFSET})
    return root


def read_only(root: str) -> Store:
    return Store.open(root, read_only=True)


def last_state(store: Store, tid: str):
    return txn_histories(store)[tid][-1]


def target_markers(store: Store, topic: str, p: int, pid: int, epoch: int) -> list[str]:
    """Kinds of the markers that ended the transaction begun by (pid, epoch) in a partition."""
    m = model(all_batches(store.partition(topic, p)))
    return [kind for mp, me, kind, _ in m["markers"] if mp == pid and epoch < me <= epoch + 2]


# =====================================================================================================
# D. kill -9 at each step of a commit / abort (28-35)
# =====================================================================================================

POINTS = {
    # name: (end, kill, which marker count, group offsets in the transaction)
    "28-after-registration": ("commit", "register", None, None),
    "29-after-data": ("commit", "data", None, None),
    "30-torn-prepare-commit": ("commit", "prepare-torn", None, None),
    "31-after-prepare-commit": ("commit", "prepare", None, None),
    "32-after-some-commit-markers": ("commit", "markers", "some", None),
    "33-after-all-commit-markers": ("commit", "markers", "all", None),
    "34-torn-prepare-abort": ("abort", "prepare-torn", None, None),
    "34-after-prepare-abort": ("abort", "prepare", None, None),
    "34-after-some-abort-markers": ("abort", "markers", "some", None),
    "34-after-all-abort-markers": ("abort", "markers", "all", None),
    "35-offsets-appended-before-commit": ("commit", "data", None, True),
    "35-offsets-partition-unmarked": ("commit", "markers", "before-offsets", True),
    # No flush() first: commit_transaction registers and sends the records itself, on the
    # caller's thread (RecordAccumulator.flush), so the kill lands inside the commit.
    "28-registered-by-the-commit": ("commit", "register", None, False),
    "31-prepared-after-the-commit-sent-its-data": ("commit", "prepare", None, False),
}
#: The points whose records the commit sends (`--sent-by commit`); the others flush() them first.
SENT_BY_COMMIT = {"28-registered-by-the-commit", "31-prepared-after-the-commit-sent-its-data"}
# How the crash is recovered: "retry" reruns EndTxn with the dead process's ids, "forced" is the
# operator's `commit|abort --transactional-id` (no ids), "opposite" asks for the other outcome first.
DECIDED_HOWS = ["retry", "sweep", "init", "opposite", "producer", "forced"]
UNDECIDED_HOWS = ["init", "sweep", "producer", "retry", "forced"]  # the last two only after a torn PREPARE


def plan_case(name: str, round_: int, rng: random.Random) -> dict:
    end, kill, which, with_offsets = POINTS[name]
    while True:
        parts = sorted(rng.sample(ALL_PARTS, rng.randint(1, len(ALL_PARTS))))
        offsets = with_offsets if with_offsets is not None else rng.random() < 0.5
        total = len(parts) + int(offsets)
        a_parts = sum(1 for t, _ in parts if t == "A")
        if which == "some" and total < 2 or which == "before-offsets" and a_parts == 0:
            continue
        break
    kill_n = {
        "some": rng.randint(1, total - 1) if which == "some" else 0,
        "all": total,
        "before-offsets": a_parts,
        None: 0,
    }[which]
    decided = kill in ("prepare", "markers")
    hows = DECIDED_HOWS if decided else UNDECIDED_HOWS[: 5 if kill == "prepare-torn" else 3]
    return {
        "name": name,
        "end": end,
        "kill": kill,
        "kill_n": kill_n,
        "parts": parts,
        "offsets": offsets,
        "decided": decided,
        "tid": rng.choice(TIDS),
        "warmup": rng.randint(0, 1) + (rng.random() < 0.2),
        "seed": rng.randrange(1 << 30),
        "torn_frac": rng.uniform(0.02, 0.98),
        "how": hows[(round_ + list(POINTS).index(name)) % len(hows)],
        "fresh_process": rng.random() < 0.35,
        "new_offset": 1000 + round_,
    }


def spawn(root: str, case: dict) -> Worker:
    offsets = {"group": GROUP, "tp": list(IN0), "offset": case["new_offset"], "warm": [100, 101, 102]}
    return Worker(
        "txn",
        root,
        "--tid",
        case["tid"],
        "--tag",
        "target",
        "--parts",
        json.dumps(case["parts"]),
        "--warm-parts",
        json.dumps(ALL_PARTS),
        "--offsets",
        json.dumps(offsets) if case["offsets"] else "",
        "--end",
        case["end"],
        "--kill",
        case["kill"],
        "--kill-n",
        case["kill_n"],
        "--torn-frac",
        case["torn_frac"],
        "--warmup",
        case["warmup"],
        "--seed",
        case["seed"],
        "--sent-by",
        "commit" if case["name"] in SENT_BY_COMMIT else "flush",
    )


def committed_offset_before(lines: list[str]) -> int:
    """g's offset after the warm-up transactions (the value the target must not change unless it commits)."""
    value = FIRST_OFFSET
    for line in lines:
        if line.startswith("WARM "):
            _, _, end, sent = line.split()
            if end == "commit" and int(sent) >= 0:
                value = int(sent)
    return value


def check_after_kill(root: str, case: dict, pid: int, epoch: int, old_offset: int) -> None:
    """What the crash left, seen by a read-only process: nothing decided is guessed."""
    kill, end = case["kill"], case["end"]
    registered = sorted(case["parts"] + ([OFFSETS_PART] if case["offsets"] and kill != "register" else []))
    marked = registered[: case["kill_n"]] if kill == "markers" else []
    with read_only(root) as ro:
        last = last_state(ro, case["tid"])
        if case["decided"]:
            assert last.state == (TxnState.PREPARE_COMMIT if end == "commit" else TxnState.PREPARE_ABORT)
            assert (last.producer_id, last.producer_epoch) == (pid, epoch + 1)
        else:
            assert last.state == TxnState.ONGOING and (last.producer_id, last.producer_epoch) == (pid, epoch)
        assert sorted(last.partitions) == registered
        kind = "COMMIT" if end == "commit" else "ABORT"
        for t, p in registered:
            assert target_markers(ro, t, p, pid, epoch) == ([kind] if (t, p) in marked else []), (t, p)
        for t, p in case["parts"]:
            log = ro.partition(t, p)
            mine = [v for tt, pp, v in txn_values("target", case["parts"]) if (tt, pp) == (t, p)]
            ru = [v for _, v in fetch_all(log, "read_uncommitted")]
            rc = [v for _, v in fetch_all(log, "read_committed")]
            if kill == "register":
                assert not set(mine) & set(ru) and log.last_stable_offset == log.log_end_offset
                continue
            assert set(mine) <= set(ru)
            visible = (t, p) in marked and end == "commit"
            assert (set(mine) <= set(rc)) if visible else not set(mine) & set(rc), (t, p, rc)
            first = min(o for o, v in fetch_all(log, "read_uncommitted") if v in mine)
            expected_lso = log.log_end_offset if (t, p) in marked else first
            assert log.last_stable_offset == expected_lso, (t, p)
        groups = GroupOffsets(ro)
        offsets_marked = OFFSETS_PART in marked
        expected = case["new_offset"] if case["offsets"] and offsets_marked and end == "commit" else old_offset
        assert groups.committed(GROUP, [IN0])[IN0].offset == expected
        if case["offsets"] and kill != "register" and not offsets_marked:
            with pytest.raises(UnstableOffsetCommitError):
                groups.committed(GROUP, [IN0], require_stable=True)


def recover(root: str, case: dict, pid: int, epoch: int) -> str:
    """Run the case's recovery; returns the outcome it must lead to (COMMIT / ABORT)."""
    how, tid, commit = case["how"], case["tid"], case["end"] == "commit"
    decided_kind = "COMMIT" if commit else "ABORT"
    outcome = decided_kind if case["decided"] or how in ("retry", "forced") else "ABORT"
    if case["fresh_process"] and how in ("sweep", "init", "retry", "forced"):
        args = {
            "sweep": ["--clock-offset-ms", 120_000],
            "init": [],
            "forced": [],
            "retry": ["--pid", pid, "--epoch", epoch],
        }[how]
        w = Worker("recover", root, "--how", case["end"] if how in ("retry", "forced") else how, "--tid", tid, *args)
        lines = w.finish()
        assert w.proc.returncode == 0 and any(line.startswith("RESULT ok") for line in lines), (lines, w.stderr)
        return outcome
    with Store.open(root) as s:
        if how == "sweep":
            TransactionCoordinator(s, clock=lambda: now_ms() + 120_000).sweep_all()
        elif how == "init":
            TransactionCoordinator(s).init_producer_id(tid)
        elif how == "retry":
            coordinator = TransactionCoordinator(s)
            ids = coordinator.end_transaction(tid, pid, epoch, commit)
            assert (ids.producer_id, ids.epoch) == (pid, epoch + 1)
            assert coordinator.end_transaction(tid, pid, epoch, commit) == ids  # a second rerun: same answer
        elif how == "forced":
            coordinator = TransactionCoordinator(s)
            ids = coordinator.end_transaction(tid, None, None, commit)
            assert (ids.producer_id, ids.epoch) == (pid, epoch + 1)
        elif how == "opposite":
            coordinator = TransactionCoordinator(s)
            with pytest.raises(InvalidTxnStateError):  # a decided commit is never turned into an abort
                coordinator.end_transaction(tid, pid, epoch, not commit)
            with pytest.raises(InvalidTxnStateError):
                coordinator.end_transaction(tid, None, None, not commit)  # nor by an operator
            coordinator.sweep_all()
        elif how == "producer":
            p = Producer(s, transactional_id=tid, linger_ms=10**9)
            p.init_transactions()
            p.begin_transaction()
            p.send("t", b"after", partition=0)
            p.commit_transaction()
            p.close()
    return outcome


def check_outcome(root: str, case: dict, pid: int, epoch: int, outcome: str, old_offset: int) -> None:
    check_store(root)  # every invariant, nothing left open anywhere
    registered = sorted(case["parts"] + ([OFFSETS_PART] if case["offsets"] and case["kill"] != "register" else []))
    with read_only(root) as ro:
        for t, p in registered:
            assert target_markers(ro, t, p, pid, epoch) == [outcome], (t, p)
        values = txn_values("target", case["parts"])
        for t, p in case["parts"]:
            log = ro.partition(t, p)
            mine = {v for tt, pp, v in values if (tt, pp) == (t, p)}
            rc = {v for _, v in fetch_all(log, "read_committed")}
            ru = {v for _, v in fetch_all(log, "read_uncommitted")}
            if case["kill"] != "register":
                assert mine <= ru
            assert (mine <= rc) if outcome == "COMMIT" else not mine & rc, (t, p, outcome)
        if case["how"] == "producer":
            assert b"after" in {v for _, v in fetch_all(ro.partition("t", 0), "read_committed")}
        committed = GroupOffsets(ro).committed(GROUP, [IN0], require_stable=True)[IN0].offset
        offsets_sent = case["offsets"] and case["kill"] != "register"
        assert committed == (case["new_offset"] if offsets_sent and outcome == "COMMIT" else old_offset)


def run_points(names: list[str], template: str, tmp_path, big: bool) -> None:
    """Each point `rounds` times (random partition sets, warm-ups, recoveries), workers pipelined:
    up to PARALLEL of them run while the parent checks the ones that already died."""
    rounds = 100 if big else 2
    rng = random.Random(f"{SEED}-{'-'.join(names)}")
    cases = [plan_case(name, r, rng) for r in range(rounds) for name in names]
    running: list[tuple[str, dict, Worker]] = []
    for i in range(len(cases) + PARALLEL):
        if i < len(cases):
            root = str(tmp_path / f"r{i}")
            clone_store(template, root)
            running.append((root, cases[i], spawn(root, cases[i])))
        if running and (len(running) >= PARALLEL or i >= len(cases)):
            checked = running.pop(0)
            check_case(*checked)
            if big:
                shutil.rmtree(checked[0], ignore_errors=True)  # keep a --big run's disk use flat


def check_case(root: str, case: dict, w: Worker) -> None:
    lines = w.finish()
    context = f"seed {SEED} case {case}\nlines {lines[-8:]}\nstderr {w.stderr}"
    assert w.proc.returncode == -signal.SIGKILL and lines[-1].startswith("KILL"), context
    _, pid, epoch = w.line("TARGET").split()
    pid, epoch = int(pid), int(epoch)
    old = committed_offset_before(lines)
    try:
        check_after_kill(root, case, pid, epoch, old)
        outcome = recover(root, case, pid, epoch)
        check_outcome(root, case, pid, epoch, outcome, old)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{context}") from exc


def test_scenarios28_29_killed_before_the_decision(template, tmp_path, big):
    """28 (after registration, before data) and 29 (after data, before EndTxn): Ongoing after the
    kill, LSO pinned at the data, aborted by the next init / a sweep past the timeout."""
    run_points(["28-after-registration", "29-after-data"], template, tmp_path, big)


def test_scenarios28_31_killed_inside_a_commit_that_sends_its_own_records(template, tmp_path, big):
    """The commit itself registers the partitions and appends the data (no flush before it), on
    the calling thread: killed after the registration it leaves 28's state, killed after
    PREPARE_COMMIT 31's (the data appended before the decision, which rolls forward)."""
    run_points(["28-registered-by-the-commit", "31-prepared-after-the-commit-sent-its-data"], template, tmp_path, big)


def test_scenario30_torn_prepare(template, tmp_path, big):
    """30 (and 34's torn PREPARE_ABORT): killed mid-write of PREPARE_*: the torn record is cut, the
    txn is Ongoing again: aborted by init/sweep, or ended as asked by the caller's rerun (26)."""
    run_points(["30-torn-prepare-commit", "34-torn-prepare-abort"], template, tmp_path, big)


def test_scenarios31_32_33_decided_commit_rolls_forward(template, tmp_path, big):
    """31 (PREPARE_COMMIT durable, no marker), 32 (some markers), 33 (all markers, no COMPLETE):
    every recovery rolls the commit forward, one COMMIT per partition, never an abort (26)."""
    run_points(
        ["31-after-prepare-commit", "32-after-some-commit-markers", "33-after-all-commit-markers"],
        template,
        tmp_path,
        big,
    )


def test_scenario34_decided_abort_rolls_forward(template, tmp_path, big):
    """34: the same points for PREPARE_ABORT: rolled forward to aborted, the aborted index complete."""
    run_points(
        ["34-after-prepare-abort", "34-after-some-abort-markers", "34-after-all-abort-markers"], template, tmp_path, big
    )


def test_scenario35_offsets_partition_in_the_middle(template, tmp_path, big):
    """35: killed after the transactional offset record was appended, before its marker (before
    the commit request, or after the markers of partitions sorted before __consumer_offsets):
    the committed offset keeps the old value until recovery, then follows the decision."""
    run_points(["35-offsets-appended-before-commit", "35-offsets-partition-unmarked"], template, tmp_path, big)


# =====================================================================================================
# C. expiry with no process running, late EndTxn
# =====================================================================================================


def same_coordinator_partition(tid: str) -> str:
    """Another transactional id owned by the same `__transaction_state` partition."""
    return next(f"w{i}" for i in range(10_000) if owner_partition(f"w{i}", 8) == owner_partition(tid, 8))


WRITERS = ["sweep-process", "producer-same-partition", "producer-same-id"]


def test_scenario23_expired_transaction_left_by_a_killed_process(template, tmp_path):
    """23: the producing process is killed after writing; nobody runs past the timeout; a read-only
    reader sees the LSO pinned (and guesses nothing); the first writer aborts it before its own work.

    One killed process per kind of writer: a sweep in a fresh process, a producer whose id lives
    in the same coordinator partition, a producer re-initialising the same id.
    """
    parts = [["t", 0], ["t", 1]]
    values = {v for _, _, v in txn_values("target", parts)}
    roots = {}
    for writer in WRITERS:
        roots[writer] = str(tmp_path / writer)
        clone_store(template, roots[writer])
    workers = {
        writer: Worker(
            "txn",
            root,
            "--tid",
            "tx",
            "--tag",
            "target",
            "--parts",
            json.dumps(parts),
            "--kill",
            "data",
            "--timeout-ms",
            300,
        )
        for writer, root in roots.items()
    }
    deadline = 0
    for writer, w in workers.items():
        lines = w.finish()
        assert w.proc.returncode == -signal.SIGKILL and "KILL data" in lines, (lines, w.stderr)
        with read_only(roots[writer]) as ro:
            deadline = max(deadline, last_state(ro, "tx").start_ms + 300)
            TransactionCoordinator(ro).sweep_all()  # a read-only process cannot act
            assert ro.partition("t", 0).last_stable_offset == 0 and ro.partition("t", 1).last_stable_offset == 0
    time.sleep(max(0.0, (deadline + 50 - now_ms()) / 1000))
    for writer, root in roots.items():
        with read_only(root) as ro:  # expired now, still pinned for a reader: it never guesses the outcome
            assert last_state(ro, "tx").state == TxnState.ONGOING
            for p in (0, 1):
                log = ro.partition("t", p)
                assert log.last_stable_offset == 0 and log.log_end_offset > 0
                assert fetch_all(log, "read_committed") == []
                assert {v for _, v in fetch_all(log, "read_uncommitted")} <= values
        if writer == "sweep-process":
            r = Worker("recover", root, "--how", "sweep")
            assert "RESULT ok" in r.finish(), r.stderr
        else:
            with Store.open(root) as s:
                tid = "tx" if writer == "producer-same-id" else same_coordinator_partition("tx")
                p = Producer(s, transactional_id=tid, linger_ms=10**9)
                p.init_transactions()  # its first coordinator call
                for part in (0, 1):  # already aborted, before the writer did any work of its own
                    log = s.partition("t", part)
                    assert log.last_stable_offset == log.log_end_offset
                assert TransactionCoordinator(s).describe("tx").state.state == (
                    TxnState.EMPTY if tid == "tx" else TxnState.COMPLETE_ABORT
                )
                p.begin_transaction()
                p.send("t", b"writer", partition=0)
                p.commit_transaction()
                p.close()
        with read_only(root) as ro:
            for p in (0, 1):
                log = ro.partition("t", p)
                rc = [v for _, v in fetch_all(log, "read_committed")]
                assert not set(rc) & values and log.last_stable_offset == log.log_end_offset
                assert [k for _, _, k, _ in model(all_batches(log))["markers"]][:1] == ["ABORT"]
            if writer != "sweep-process":
                assert [v for _, v in fetch_all(ro.partition("t", 0), "read_committed")] == [b"writer"]
        check_store(root)


@pytest.mark.parametrize("end,next_txn", [("commit", "open"), ("abort", "committed")])
def test_scenario25_late_end_txn_after_reinit(template, tmp_path, end, next_txn):
    """25 (KAFKA-17754): A's EndTxn for txn N is SIGSTOPped before it reaches the coordinator; the id
    is re-initialised and txn N+1 starts (or even commits); after SIGCONT, A's request is refused
    by epoch and txn N+1 is neither committed nor aborted by it."""
    root = str(tmp_path / "store")
    clone_store(template, root)
    a = Worker("late", root, "--tid", "tx", "--tag", "A", "--parts", json.dumps([["t", 0], ["t", 1]]), "--end", end)
    a.expect("ENDING")
    wait_stopped(a.pid)
    with Store.open(root) as s:
        b = Producer(s, transactional_id="tx", linger_ms=10**9)
        b.init_transactions()  # aborts txn N, fences A
        b.begin_transaction()
        b.send("t", b"B", partition=0)
        b.flush()
        if next_txn == "committed":
            b.commit_transaction()
        coordinator = TransactionCoordinator(s)
        before = coordinator.describe("tx").state
        txn_log = s.partition("__transaction_state", owner_partition("tx", 8))
        size = txn_log.log_end_offset
        os.kill(a.pid, signal.SIGCONT)
        result = a.expect("RESULT")
        assert result.split()[1] == "fenced", (result, a.stderr)
        a.finish()
        assert txn_log.log_end_offset == size and coordinator.describe("tx").state == before
        assert [v for _, v in fetch_all(s.partition("t", 0), "read_committed")] == (
            [b"B"] if next_txn == "committed" else []
        )
        if next_txn == "open":
            b.commit_transaction()
        b.close()
        for p in (0, 1):
            rc = [v for _, v in fetch_all(s.partition("t", p), "read_committed")]
            assert rc == ([b"B"] if p == 0 else []), (p, rc)
    check_store(root)


# =====================================================================================================
# E. the same transactional id started by two processes at once
# =====================================================================================================


def test_scenario38_same_transactional_id_started_concurrently(template, tmp_path, big):
    """38: two processes init id X at the same time and each writes (two transactions each):
    epochs strictly increase in the txn log, exactly one ends current, the other is fenced from
    its first operation after the other's init on, nothing of the fenced one is RC-visible."""
    rounds = 10 if big else 2
    everything = []
    for r in range(rounds):  # the rounds run side by side, each on its own store
        root = str(tmp_path / f"r{r}")
        clone_store(template, root)
        workers = {}
        for name, parts in (("A", [["t", 0], ["t", 1]]), ("B", [["t", 1], ["t", 2]])):
            workers[name] = Worker("race", root, "--tid", "X", "--tag", name, "--parts", json.dumps(parts), stdin=True)
        everything.append((root, workers))
    for _, workers in everything:
        for w in workers.values():
            w.expect("READY")
        for w in workers.values():
            w.send("GO")
    for _, workers in everything:
        for w in workers.values():
            w.expect("WAIT")
        for w in workers.values():
            w.send("GO2")
    for root, workers in everything:
        results = {}
        for name, w in workers.items():
            lines = w.finish()
            assert w.proc.returncode == 0 and "DONE" in lines, (lines, w.stderr)
            results[name] = [line.split() for line in lines if line.startswith("RESULT")]
        check_store(root)
        with read_only(root) as ro:
            current = last_state(ro, "X")
            ok_values = set()
            current_owners = []
            for name, res in results.items():
                words = [x[1] for x in res]
                assert set(words) <= {"ok", "fenced"}, res
                if "fenced" in words:  # once fenced, fenced for good
                    assert words[words.index("fenced") :] == ["fenced"] * (len(words) - words.index("fenced"))
                for round_, x in enumerate(res, 1):
                    if x[1] == "ok":
                        ok_values |= {
                            f"{name}-{round_}:{t}-{p}".encode()
                            for t, p in ([("t", 0), ("t", 1)] if name == "A" else [("t", 1), ("t", 2)])
                        }
                last_ok = [x for x in res if x[1] == "ok"]
                if words[-1] == "ok" and (int(last_ok[-1][2]), int(last_ok[-1][3])) == (
                    current.producer_id,
                    current.producer_epoch,
                ):
                    current_owners.append(name)
            assert len(current_owners) == 1, (results, current)
            other = "B" if current_owners == ["A"] else "A"
            assert results[other][-1][1] == "fenced", results
            rc = set()
            for p in range(3):
                rc |= {v for _, v in fetch_all(ro.partition("t", p), "read_committed")}
            assert rc == ok_values, (results, rc)
            inits = [v.producer_epoch for v in txn_histories(ro)["X"] if v.state == TxnState.EMPTY]
            assert len(inits) == 2 and inits[0] < inits[1]
