"""Transactions over 50 partitions killed (SIGKILL, for real) at random moments of their ends.

docs/reliability-scenarios.md scenario 79: the coordinator syncs a transaction's data partitions
at once before PREPARE_COMMIT, and writes its markers one by one without fdatasync, then syncs
them at once before COMPLETE_* (issue 26). A worker (tests/crash/parallel_sync_worker.py) runs
transactions over every partition of a 50-partition topic, one record each, every fourth one
aborted; the parent kills it a random moment after it began ending one, then starts the next
worker on the same store (its init_transactions rolls a decided end forward or aborts an
undecided one). At the end a fresh process's view must show: every transaction either wholly
committed (all 50 records RC-visible) or not at all; every commit the worker was told of
visible, every abort it was told of invisible; `check_store` (kafka-python parses every batch,
RC/RU match a model of the raw batches, one marker per transaction end and partition, each
matching the PREPARE record, nothing left open).

The power-loss variant also cuts every partition's unsynced tail after each kill,
`__transaction_state` included (tests/crash/power_loss.py), so what only the page cache held is
gone: markers appended but not yet synced (the durable PREPARE_COMMIT must be rolled forward
and its markers written again), a PREPARE appended but not synced (the transaction must abort),
a COMPLETE_* that is never synced. Most of its kills are aimed: the worker dies just before the
n-th sync of a chosen end (`phases`: with syncfs a round is one call), and a writeback policy says which unsynced tails
reached the disk anyway (all of `__transaction_state`'s while the data partitions' are lost is
the one that shows a COMPLETE_* made durable before its markers).

Set TXLOG_SYNC_CRASH_SEED to replay a run's random choices; `--big` runs 20 kills instead of 4
(the power-loss variant: 40 random cases instead of its 10 listed ones).
"""

from __future__ import annotations

import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from parallel_sync_worker import Worker, parse_value
from power_loss import WRITEBACK_NAMES, simulate_power_loss, writeback_policy
from txn_crash_worker import TXN_TOPIC, check_store, fetch_all, make_store

from storage import Store
from txlog.transport import Transport

TOPIC = "wide"
PARTITIONS = 50
TID = "wide-txn"
SEED = int(os.environ.get("TXLOG_SYNC_CRASH_SEED") or random.randrange(1 << 30))


def _kill_during_an_end(root: str, first: int, rng: random.Random) -> tuple[int, dict[int, str]]:
    """Run one worker until it began ending a transaction, then SIGKILL it a random moment later.

    Returns (the number of the next transaction, {i: "COMMITTED" | "ABORTED"} it reported).
    """
    worker = Worker("run", root, "--topic", TOPIC, "--tid", TID, "--first", first)
    try:
        worker.expect("IDS")
        target = first + rng.randrange(3)  # a commit or an abort, a few transactions in
        worker.expect(f"BEGIN {target}")
        time.sleep(rng.uniform(0, 0.05))  # somewhere in the end: its syncs, PREPARE, markers, COMPLETE
    finally:
        worker.kill()
    return _reported(worker, first)


def _reported(worker: Worker, first: int) -> tuple[int, dict[int, str]]:
    """After the worker died: (the number of the next transaction, {i: "COMMITTED" | "ABORTED"} it reported)."""
    while worker.next_line(timeout=30) is not None:  # what it printed before dying
        pass
    told = {}
    last = first - 1
    for line in worker.lines:
        word, _, n = line.partition(" ")
        if word in ("COMMITTED", "ABORTED"):
            told[int(n)] = word
        if word == "BEGIN":
            last = int(n)
    return last + 1, told


def _settle(root: str) -> None:
    """A fresh process's first coordinator request: re-init rolls a decided end forward, aborts an open one."""
    with Store.open(root) as store:
        Transport(store).init_producer_id(TID)


def _check_outcomes(root: str, told: dict[int, str], expected: dict[int, str]) -> set[int]:
    """Settle, then the checks of the module docstring; `expected`: outcomes the test knows without
    being told ({i: "COMMITTED" | "ABORTED"}). Returns the RC-visible transactions."""
    _settle(root)
    check_store(root)  # settled: nothing Ongoing or Prepare*, every LSO at the log end
    with Store.open(root, read_only=True) as store:
        visible: dict[int, set[int]] = {}
        for p in range(PARTITIONS):
            for _, value in fetch_all(store.partition(TOPIC, p), "read_committed"):
                i, partition = parse_value(value)
                assert partition == p, f"seed {SEED}: {value!r} in partition {p}"
                assert partition not in visible.setdefault(i, set()), f"seed {SEED}: {value!r} twice"
                visible[i].add(partition)
    whole = set(range(PARTITIONS))
    for i, parts in visible.items():
        assert parts == whole, f"seed {SEED}: transaction {i} is visible in {len(parts)} of {PARTITIONS} partitions"
    for i, word in told.items():
        seen = i in visible
        assert seen == (word == "COMMITTED"), f"seed {SEED}: transaction {i} was {word}, visible: {seen}"
    for i, word in expected.items():
        seen = i in visible
        assert seen == (word == "COMMITTED"), f"seed {SEED}: transaction {i} must be {word}, visible: {seen}"
    return set(visible)


def test_scenario79_killed_during_wide_commits_every_transaction_is_whole(tmp_path, big):
    rng = random.Random(SEED)
    root = str(tmp_path / "store")
    make_store(root, {TOPIC: PARTITIONS})
    told: dict[int, str] = {}
    begun = 0
    for _ in range(20 if big else 4):
        begun, reported = _kill_during_an_end(root, begun, rng)
        told.update(reported)
    # Every kill may land before any commit's end returned (all on the first transactions, within a
    # few ms): kill again until one did, so the check below is never of aborts alone.
    for _ in range(10):
        if any(w == "COMMITTED" for w in told.values()):
            break
        begun, reported = _kill_during_an_end(root, begun, rng)
        told.update(reported)
    _check_outcomes(root, told, {})
    assert any(w == "COMMITTED" for w in told.values()), f"seed {SEED}: no commit ran to its end"


# ---- the power-loss variant -------------------------------------------------------------------------


def phases(per_round: int, index_rounds: int = 0) -> dict[str, tuple[int, int] | None]:
    """Where a kill is aimed: the range of the sync of the end to die before, counted from its BEGIN
    line, or None for a random moment after BEGIN (the kill-only test's). An end's syncs (a commit's;
    an abort, flushed first, has the same ones: the flush registers and syncs the data): 1 the ONGOING
    registration in `__transaction_state`, then the data partitions' round, then the PREPARE_* record
    (the decision), then the markers' round; past them, the worker dies once the end returned. A round
    is `per_round` calls: one fdatasync per partition, or one syncfs. `index_rounds` more rounds count
    in the markers step: an abort's, which makes the `.txnindex` entries of its markers durable before
    them (rule 19 of docs/reliability-scenarios.md, `WriterHold.index_aborts`), when the worker counts
    that round (`_index_rounds`). The worker's KILL line says which step it met (`_step_of`), checked
    against this."""
    last_marker_sync = (2 + index_rounds) * per_round + 2
    return {
        "data": (2, per_round + 1),
        "decision": (per_round + 2, per_round + 2),
        "markers": (per_round + 3, last_marker_sync),
        "after": (last_marker_sync + 1, last_marker_sync + 1),
        "moment": None,
    }


def _index_rounds(end: str, per_round: int) -> int:
    """The counted rounds an end adds for its `.txnindex` entries (`phases`): an abort's entries round
    is one syncfs with syncfs, counted; with fdatasync it is an fsync of each `.txnindex` file
    (EntryFile.flush), which the worker's counter (`kill_before_sync`, fdatasync and syncfs) leaves out."""
    return 1 if end == "abort" and per_round == 1 else 0  # a round of one call: syncfs (the test's per_round)


#: (end, phase, writeback policy) of the default run, every step of both ends under a power loss.
POWER_CASES = [
    ("commit", "data", "random"),
    ("commit", "decision", "none"),  # PREPARE_COMMIT appended, never synced: lost, so aborted
    ("commit", "decision", "coordinator"),  # ... reached the disk by writeback: committed
    ("commit", "markers", "none"),  # markers appended, unsynced, lost: rolled forward, written again
    ("commit", "markers", "coordinator"),  # COMPLETE_* before the markers' syncs would show here
    ("commit", "after", "random"),  # told of the commit; COMPLETE_COMMIT itself never synced
    ("abort", "decision", "data"),
    ("abort", "markers", "coordinator"),
    ("commit", "moment", "random"),
    ("abort", "moment", "none"),
]


def _is_abort(i: int) -> bool:
    return i % 4 == 3  # the worker's choice


def _target(first: int, end: str, rng: random.Random) -> int:
    """A transaction a few after `first` that the worker ends as `end` says."""
    i = first + rng.randrange(3)
    while _is_abort(i) != (end == "abort"):
        i += 1
    return i


def _step_of(worker: Worker) -> str:
    """The step of the end the aimed kill met, from the worker's KILL line (a `phases` name).

    `fdatasync|syncfs <n> <k> <file>`: k syncs of `__transaction_state` came before this one, the
    registration and then the decision; "registration" if it met the registration's own.
    """
    kills = [line for line in worker.lines if line.startswith("KILL ")]
    assert len(kills) == 1, f"seed {SEED}: the aimed kill did not fire: {worker.lines[-5:]}\n{worker.stderr}"
    if kills[0] == "KILL after-end":
        return "after"
    _, _, _, before, path = kills[0].split(" ", 4)
    coordinator = os.path.basename(os.path.dirname(path)).startswith(f"{TXN_TOPIC}-")
    if coordinator:
        return ("registration", "decision")[min(int(before), 1)]
    return "data" if int(before) <= 1 else "markers"


def _expected(end: str, phase: str, policy: str) -> str | None:
    """The outcome a kill at `phase` must leave, whatever else happened; None: either (but whole)."""
    if end == "abort":
        return "ABORTED"
    if phase in ("markers", "after"):
        return "COMMITTED"  # PREPARE_COMMIT was durable: rolled forward
    if phase == "data":
        return "ABORTED"  # no decision was written yet
    if phase == "decision":  # PREPARE_COMMIT appended, not synced: on disk only if written back
        return {"none": "ABORTED", "data": "ABORTED", "coordinator": "COMMITTED"}.get(policy)
    return None


def _power_loss_round(
    root: str, first: int, case: tuple[str, str, str], rng: random.Random, per_round: int
) -> tuple[int, dict]:
    """One worker killed as `case` says, then the power loss; returns (next first, this round's facts)."""
    end, phase, policy = case
    target = _target(first, end, rng)
    span = phases(per_round, _index_rounds(end, per_round))[phase]
    n = rng.randint(*span) if span else 0
    aimed = ("--kill-txn", target, "--kill-sync", n) if span else ()
    worker = Worker("run", root, "--topic", TOPIC, "--tid", TID, "--first", first, *aimed)
    try:
        worker.expect("IDS")
        worker.expect(f"BEGIN {target}")
        if span:
            worker.proc.wait(timeout=120)  # it kills itself
        else:
            time.sleep(rng.uniform(0, 0.05))
    finally:
        worker.kill()
    following, told = _reported(worker, first)
    if span:
        step = _step_of(worker)
        assert step == phase, f"seed {SEED}: aimed at fdatasync {n} ({phase}), met {step}: {worker.lines[-3:]}"
    cut = simulate_power_loss(root, writeback_policy(policy, rng))
    facts = {
        "case": case,
        "target": target,
        "n": n,
        "told": told,
        "expected": _expected(end, phase, policy),
        "bytes_cut": sum(c for _, c in cut.values()),
    }
    return following, facts


def _power_cases(big: bool, rng: random.Random) -> list[tuple[str, str, str]]:
    if not big:
        return POWER_CASES
    ends, steps = ("commit", "abort"), list(phases(1))
    return [(rng.choice(ends), rng.choice(steps), rng.choice(WRITEBACK_NAMES)) for _ in range(40)]


def test_scenario79_killed_during_wide_ends_then_power_loss_every_transaction_is_whole(tmp_path, big, sync_method):
    """Both ways a round is made durable (scenario 84): an fdatasync per partition, or one syncfs."""
    per_round = 1 if sync_method == "syncfs" else PARTITIONS
    rng = random.Random(f"{SEED}-power")
    root = str(tmp_path / "store")
    make_store(root, {TOPIC: PARTITIONS})
    told: dict[int, str] = {}
    expected: dict[int, str] = {}
    rounds = []
    begun = 0
    for case in _power_cases(big, rng):
        try:
            begun, facts = _power_loss_round(root, begun, case, rng, per_round)
        except AssertionError as exc:  # e.g. the next worker met a transaction a power loss left open
            raise AssertionError(f"seed {SEED}, case {case} after the rounds {rounds}:\n{exc}") from exc
        told.update(facts["told"])
        if facts["expected"] is not None:
            expected[facts["target"]] = facts["expected"]
        rounds.append(facts)
    try:
        visible = _check_outcomes(root, told, expected)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nrounds: {rounds}") from exc
    assert sum(f["bytes_cut"] for f in rounds) > 0, f"seed {SEED}: the power losses cut nothing"
    print(f"seed={SEED} visible={len(visible)} rounds={rounds}")
