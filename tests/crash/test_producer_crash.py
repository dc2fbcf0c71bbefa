"""The producer pipeline under a real kill -9 followed by a simulated power loss (issue 14).

Acknowledged means durable: with acks=all a record's future completes only once the
partition's high watermark (HW, docs/DESIGN.md: the offset below which the log is known to
be fdatasync'ed) covers it, readers never get past the HW, and a transaction's commit is
decided only after its data was synced. These tests check that from the outside:

* group commit: a child runs an idempotent Producer (acks=all, the default linger) over
  several partitions and logs every acknowledged (partition, offset, value) from its
  callbacks; a read_uncommitted Consumer child logs every record it got. The parent kills
  both with SIGKILL at a seeded random moment, then cuts every partition's log back to its
  published HW (what a power loss at that moment may leave, as nothing past the last
  fdatasync is known to be on disk), reopens the store, and checks: every acknowledged record
  is there exactly once at its offset with its value, each partition holds a gap-free prefix
  of what was sent to it in send order, every record the reader saw is still there, and
  `check_store` finds every batch and index sound. The same with acks=1, whose
  acknowledgement promises less (written, not synced): kill -9 only, no power loss.
* transactions: a child loops begin / k sends / commit (a quarter aborted instead, half of
  them flushed first) and prints `C n` once commit n returned; it is killed at a random
  moment, or by a step fault at EndTxn and at the coordinator's WriteTxnMarkers
  (txlog.tools.fault_injection KILL_BEFORE / KILL_AFTER); every partition, `__transaction_state`
  included, is cut back to its HW; a new instance of the transactional id, or the
  coordinator's sweep once the transaction timed out, settles what was left. Then under
  read_committed every returned commit is there exactly once and whole, every transaction is
  all or nothing, no returned abort is visible, only the transaction in
  flight at the kill may be visible without a returned commit (and then only if its commit
  was decided: `check_store` ties every marker to a durable PREPARE_COMMIT), nothing is left
  open, a read_committed reader child never saw a record that vanished, and every
  transaction whose flush() returned is whole in the log (flush = durable).

The cut point is the published HW read from its file (`power_loss.durable_watermark`),
not `PartitionLog.high_watermark`: asked after the writer died, any view syncs the tail and
answers the log end, so the "power loss" would cut nothing. For the same reason the reader
child is always killed before the producer: a view that finds the HW behind the
log end with no writer holding the lock fdatasyncs the tail itself and reads on (a read-only
view keeps that HW in memory, unpublished). Once the producer is dead that is always the
case, so a reader outliving it could see records that are durable only by its own sync,
beyond the published HW this simulation cuts at.

Sizes are small by default (a few rounds); `--big` runs the full matrix. Set TXLOG_CRASH_SEED
to replay a run.
"""

from __future__ import annotations

import os
import random
import sys
import time
from collections import defaultdict

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from crash_worker import HANG_GUARD, parse_value
from power_loss import segment_bases, simulate_power_loss, writeback_policy
from producer_crash_worker import (
    TOPIC,
    TXN_ID,
    Worker,
    count_lines,
    parse_txn_value,
    read_record_log,
)
from txn_crash_worker import check_store, clone_store, fetch_all, make_store, partition_dirs

from storage import Store
from txlog.clients.producer import Producer
from txlog.requests import DEFAULT_TRANSACTION_TIMEOUT_MS
from txlog.transport import Transport

SEED = int(os.environ.get("TXLOG_CRASH_SEED") or random.randrange(1 << 30))
PARTITIONS = 3
SMALL_SEGMENT = 16384

Record = tuple[int, int, bytes]  # (partition, offset, value)


def _wait_for_lines(path: str, count: int, worker: Worker) -> None:
    """Until the worker's record log holds `count` lines; fails if it dies or stalls first."""
    deadline = time.monotonic() + HANG_GUARD
    while count_lines(path) < count:
        if worker.proc.poll() is not None:
            raise AssertionError(f"worker exited {worker.proc.returncode} early\n{worker.stderr}")
        if time.monotonic() > deadline:
            worker.kill()
            raise AssertionError(f"worker wrote fewer than {count} lines in {HANG_GUARD} s\n{worker.stderr}")
        time.sleep(0.005)


def _kill_both(reader: Worker, writer: Worker) -> None:
    """SIGKILL the reader, then the writer (the module docstring says why in this order)."""
    reader.kill()
    writer.kill()
    for w in (reader, writer):
        w.drain()
        failures = [line for line in w.lines if line.startswith("FAIL")]
        assert not failures and w.proc.returncode == -9, (w.cmd, w.proc.returncode, failures, w.stderr)


def _records_after_recovery(root: str, isolation: str) -> dict[int, list[tuple[int, bytes]]]:
    """(offset, value) of every record of each partition of TOPIC, from a view opened after every
    partition of the store was reopened writable (recovery at open)."""
    with Store.open(root) as s:
        for topic, p, _ in partition_dirs(root):
            s.partition(topic, p)  # recovery runs at the first writable open of each partition
    with Store.open(root, read_only=True) as s:
        return {p: fetch_all(s.partition(TOPIC, p), isolation) for p in range(s.partition_count(TOPIC))}


def _segment_count(root: str) -> int:
    return sum(len(segment_bases(d)) for t, _, d in partition_dirs(root) if t == TOPIC)


def _check_present(what: str, records: list[Record], log: dict[tuple[int, int], bytes]) -> None:
    for p, offset, value in records:
        assert log.get((p, offset)) == value, (
            f"{what} record {value!r} at {p}/{offset} is {log.get((p, offset))!r} after the power loss"
        )


# =====================================================================================================
# (1) group commit: acks=all survives kill -9 plus power loss
# =====================================================================================================


def _check_group_commit(
    partitions: int, log: dict[int, list[tuple[int, bytes]]], acked: list[Record], seen: list[Record]
) -> None:
    """Each partition p holds records p, p+P, p+2P, ... (the worker's round-robin) at offsets 0, 1, 2, ...:
    no gap, no duplicate, send order kept; every acknowledged and every seen record is there."""
    by_offset = {}
    for p, records in log.items():
        for expected, (offset, value) in enumerate(records):
            assert offset == expected, f"partition {p}: offset {offset} where {expected} was expected"
            _, number = parse_value(value)  # the bytes are intact
            assert number == p + expected * partitions, (
                f"partition {p} offset {offset} holds record {number}, expected {p + expected * partitions}"
            )
            by_offset[(p, offset)] = value
    assert len({(p, off) for p, off, _ in acked}) == len(acked), "an offset was acknowledged twice"
    _check_present("acknowledged", acked, by_offset)
    _check_present("read_uncommitted-seen", seen, by_offset)


def _group_commit_round(
    root: str,
    rng: random.Random,
    partitions: int,
    max_delay: float,
    segment_bytes: int | None,
    acks: str,
    *extra: str,
) -> dict:
    """One producer run killed at random; with acks=all a power loss follows the kill. `extra`:
    more arguments of the producing worker."""
    with Store.open(root) as s:
        s.create_topic(TOPIC, partitions=partitions, config={"segment.bytes": segment_bytes} if segment_bytes else None)
    acks_path, seen_path = root + ".acks", root + ".seen"
    reader = Worker("read", root, "--log", seen_path, "--isolation", "read_uncommitted")
    reader.expect("READY")
    producer = Worker("produce", root, "--log", acks_path, "--seed", rng.randrange(1 << 30), "--acks", acks, *extra)
    producer.expect("READY")
    _wait_for_lines(acks_path, 1, producer)
    time.sleep(rng.uniform(0, max_delay))
    _kill_both(reader, producer)
    acked, seen = read_record_log(acks_path), read_record_log(seen_path)
    cut = simulate_power_loss(root) if acks == "all" else {}
    log = _records_after_recovery(root, "read_uncommitted")
    check_store(root)  # kafka-python parses every batch; indexes agree with the cut logs
    _check_group_commit(partitions, log, acked, seen)
    return {
        "acked": len(acked),
        "seen": len(seen),
        "kept": sum(map(len, log.values())),
        "bytes_cut": sum(c for _, c in cut.values()),
        "segments": _segment_count(root),
    }


def _run_group_commit(tmp_path, rounds: int, partitions: int, max_delay: float, acks: str, *extra: str) -> list[dict]:
    rng = random.Random(f"{SEED}-{acks}-{extra}")
    stats = []
    for r in range(rounds):
        try:
            segment_bytes = SMALL_SEGMENT if r % 3 == 2 else None  # rolls: the cut may drop whole segments
            root = str(tmp_path / f"r{r}")
            stats.append(_group_commit_round(root, rng, partitions, max_delay, segment_bytes, acks, *extra))
        except AssertionError as exc:
            raise AssertionError(f"[TXLOG_CRASH_SEED={SEED} acks={acks} round {r}] {exc}") from exc
    return stats


def test_group_commit_acknowledged_records_survive_kill_and_power_loss(tmp_path, big):
    rounds, partitions, max_delay = (40, 6, 1.0) if big else (3, PARTITIONS, 0.3)
    stats = _run_group_commit(tmp_path, rounds, partitions, max_delay, "all")
    print(f"group commit seed={SEED} rounds={stats}")


def test_durable_one_record_sends_survive_kill_and_power_loss(tmp_path, big):
    """Each record is a `send(...).get()`: the get() sends its batch itself on the main thread (the
    accumulator's caller-run round, no hand-off to the sender), and every record acknowledged so
    survives a kill -9 and a power loss, in order and without gaps."""
    rounds, partitions, max_delay = (20, 6, 1.0) if big else (3, PARTITIONS, 0.3)
    stats = _run_group_commit(tmp_path, rounds, partitions, max_delay, "all", "--one-at-a-time")
    print(f"one-record sends seed={SEED} rounds={stats}")


def test_acks1_acknowledged_records_survive_kill(tmp_path, big):
    """acks=1 acknowledges a write before its fdatasync: that must survive the kill of every process
    (the page cache keeps it), not a power loss, so here the store is reopened as the kill left it."""
    rounds, partitions, max_delay = (20, 6, 1.0) if big else (2, PARTITIONS, 0.3)
    stats = _run_group_commit(tmp_path, rounds, partitions, max_delay, "1")
    print(f"acks=1 seed={SEED} rounds={stats}")


# ---- a wide acks=all round: one sync round over every partition (scenario 86) -------------------------

WIDE_PARTITIONS = 50


def _wide_round(root: str, rng: random.Random, kill_sync: int, policy: str) -> dict:
    """One `--wide` producer (one record a partition, then flush(), over and over) SIGKILLed at a random
    moment (`kill_sync` 0) or just before its `kill_sync`-th fdatasync or syncfs; then a power loss that
    keeps, of each partition's unsynced tail, what the writeback `policy` says; then the checks."""
    make_store(root, {TOPIC: WIDE_PARTITIONS})
    acks_path = root + ".acks"
    aimed = ("--kill-sync", kill_sync) if kill_sync else ()
    producer = Worker("produce", root, "--log", acks_path, "--seed", rng.randrange(1 << 30), "--wide", *aimed)
    try:
        producer.expect("READY")
        if kill_sync:
            producer.proc.wait(timeout=HANG_GUARD)  # it kills itself
        else:
            _wait_for_lines(acks_path, 1, producer)
            time.sleep(rng.uniform(0, 0.2))
    finally:
        producer.kill()
    producer.drain()
    failures = [line for line in producer.lines if line.startswith("FAIL")]
    assert not failures and producer.proc.returncode == -9, (producer.proc.returncode, failures, producer.stderr)
    if kill_sync:
        assert any(line.startswith("KILL ") for line in producer.lines), (
            f"the aimed kill did not fire\n{producer.stderr}"
        )
    acked = read_record_log(acks_path)
    cut = simulate_power_loss(root, writeback_policy(policy, rng))
    log = _records_after_recovery(root, "read_uncommitted")
    check_store(root)
    _check_group_commit(WIDE_PARTITIONS, log, acked, [])
    return {"kill_sync": kill_sync, "policy": policy, "acked": len(acked), "bytes_cut": sum(c for _, c in cut.values())}


def test_scenario86_wide_acks_all_rounds_survive_kill_and_power_loss(tmp_path, big, sync_method):
    """docs/reliability-scenarios.md scenario 86: every record acknowledged by a wide round survives a
    kill -9 and a power loss at any moment of the next one, whichever way its round is made durable
    (one syncfs, or every partition's fdatasync). Aimed kills die just before a sync of the first few
    rounds, where the round before was acknowledged and the one being synced was not (a future completed
    before its round's sync, or an HW published before it, shows here as an acknowledged record cut)."""
    rng = random.Random(f"{SEED}-wide-{sync_method}")
    per_round = 1 if sync_method == "syncfs" else WIDE_PARTITIONS
    kills = [rng.randint(per_round + 1, 3 * per_round) for _ in range(6 if big else 2)] + [0] * (6 if big else 2)
    stats = []
    for r, kill_sync in enumerate(kills):
        policy = rng.choice(["none", "random"])
        try:
            stats.append(_wide_round(str(tmp_path / f"w{r}"), rng, kill_sync, policy))
        except AssertionError as exc:
            raise AssertionError(f"[TXLOG_CRASH_SEED={SEED} {sync_method} round {r}] {exc}") from exc
    assert any(s["acked"] for s in stats) and any(s["bytes_cut"] for s in stats), stats
    print(f"wide rounds seed={SEED} {sync_method} {stats}")


# =====================================================================================================
# (2) transactions: all or nothing, returned commits durable, nothing left open
# =====================================================================================================


@pytest.fixture(scope="module")
def txn_template(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("template") / "store")
    make_store(root, {TOPIC: PARTITIONS})
    return root


def _settle(root: str, how: str) -> None:
    """Settle what the dead producer left: `init`, a new instance of its transactional id (fences
    it, rolls a decided end forward, aborts an undecided one); `sweep`, the coordinator's sweep
    once the transaction timed out (a clock past the timeout), which rolls forward or aborts too."""
    with Store.open(root) as s:
        if how == "init":
            producer = Producer(s, transactional_id=TXN_ID)
            producer.init_transactions()
            producer.close()
        else:
            later = 2 * DEFAULT_TRANSACTION_TIMEOUT_MS
            Transport(s, clock=lambda: int(time.time() * 1000) + later).abort_expired_transactions()


def _transactions_in(log: dict[int, list[tuple[int, bytes]]]) -> dict[int, list[tuple[int, int]]]:
    """Transaction number -> [(record index, count)] of every record given."""
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for records in log.values():
        for _, value in records:
            n, i, k = parse_txn_value(value)
            out[n].append((i, k))
    return out


def _assert_whole_once(what: str, n: int, parts: list[tuple[int, int]]) -> None:
    """Transaction n's records are all there (i = 0..k-1 of its k), each once."""
    k = parts[0][1] if parts else 0
    assert parts and sorted(parts) == [(i, k) for i in range(k)], (
        f"{what} transaction {n} is not whole once: {sorted(parts)}"
    )


def _txn_lines(lines: list[str]) -> tuple[dict[int, str], set[int], set[int], int | None]:
    """(intended end per transaction, commits returned, aborts returned, the one in flight at the kill)."""
    intent = {int(line.split()[1]): line.split()[2] for line in lines if line.startswith("B ")}
    committed = {int(line.split()[1]) for line in lines if line.startswith("C ")}
    aborted = {int(line.split()[1]) for line in lines if line.startswith("A ")}
    open_ = set(intent) - committed - aborted
    assert len(open_) <= 1 and open_ <= {max(intent, default=-1)}, (open_, lines[-5:])
    return intent, committed, aborted, next(iter(open_), None)


def _check_transactions(rc: dict[int, list[tuple[int, bytes]]], lines: list[str], seen: list[Record]) -> set[int]:
    """The read_committed checks of the module docstring; returns the visible transaction numbers."""
    intent, committed, aborted, in_flight = _txn_lines(lines)
    visible = _transactions_in(rc)
    for n, parts in visible.items():
        _assert_whole_once("visible", n, parts)
    missing = committed - set(visible)
    assert not missing, f"transactions {sorted(missing)} returned from commit but are not read_committed-visible"
    assert not aborted & set(visible), f"aborted transactions {sorted(aborted & set(visible))} are visible"
    may_show = {in_flight} if in_flight is not None and intent[in_flight] == "commit" else set()
    unreturned = set(visible) - committed
    assert unreturned <= may_show, (
        f"transactions {sorted(unreturned)} are visible without a returned commit; in flight at the kill: "
        f"{in_flight} ({intent.get(in_flight)})"
    )
    _check_present("read_committed-seen", seen, {(p, off): v for p, recs in rc.items() for off, v in recs})
    return set(visible)


def _check_flushed(ru: dict[int, list[tuple[int, bytes]]], lines: list[str]) -> None:
    """flush() inside a transaction makes its records durable: every transaction whose flush returned
    is whole in the log (read_uncommitted: aborted or not), even the one the kill left in flight."""
    flushed = {int(line.split()[1]) for line in lines if line.startswith("F ")}
    present = _transactions_in(ru)
    for n in flushed:
        _assert_whole_once("flushed", n, present.get(n, []))


StepKill = tuple[str, str, int, str]  # (Step name, KILL_BEFORE/KILL_AFTER, occurrence, commit/abort)


def _txn_round(template: str, root: str, rng: random.Random, step: StepKill | None, max_delay: float) -> dict:
    clone_store(template, root)
    seen_path = root + ".seen"
    reader = Worker("read", root, "--log", seen_path, "--isolation", "read_committed")
    reader.expect("READY")
    args: list = ["--seed", rng.randrange(1 << 30), "--abort-p", 0.25]
    kill_txn = rng.randint(0, 2)
    if step is not None:
        args += [
            "--kill-step",
            step[0],
            "--kill-action",
            step[1],
            "--kill-n",
            step[2],
            "--kill-end",
            step[3],
            "--kill-txn",
            kill_txn,
        ]
    producer = Worker("txn", root, *args)
    producer.expect("READY")
    if step is None:
        producer.expect("B 0 ")
        time.sleep(rng.uniform(0, max_delay))
    else:
        producer.expect("KILL")
    _kill_both(reader, producer)
    in_flight = _txn_lines(producer.lines)[3]
    if step is not None:
        assert in_flight == kill_txn, (in_flight, kill_txn, producer.lines)
    seen = read_record_log(seen_path)
    cut = simulate_power_loss(root)
    settle = rng.choice(["init", "sweep"])
    _settle(root, settle)
    rc = _records_after_recovery(root, "read_committed")
    check_store(root)  # every marker matches a durable decision, nothing open, RC/RU/LSO agree
    visible = _check_transactions(rc, producer.lines, seen)
    _check_flushed(_records_after_recovery(root, "read_uncommitted"), producer.lines)
    if step is not None:
        # Only an EndTxn that never reached the coordinator leaves the transaction undecided (aborted);
        # once PREPARE_COMMIT is durable (its data synced first) the commit must roll forward whole.
        decided_commit = step[3] == "commit" and step[:2] != ("END_TXN", "KILL_BEFORE")
        assert (in_flight in visible) == decided_commit, (step, settle, in_flight, sorted(visible))
    return {
        "settle": settle,
        "lines": len(producer.lines),
        "seen": len(seen),
        "in_flight_visible": in_flight in visible,
        "bytes_cut": sum(c for _, c in cut.values()),
    }


def _run_txn_rounds(template: str, tmp_path, cases: list, max_delay: float) -> list[dict]:
    rng = random.Random(f"{SEED}-{cases}")
    stats = []
    for r, step in enumerate(cases):
        try:
            stats.append(_txn_round(template, str(tmp_path / f"r{r}"), rng, step, max_delay))
        except AssertionError as exc:
            raise AssertionError(f"[TXLOG_CRASH_SEED={SEED} round {r} step {step}] {exc}") from exc
    return stats


def test_transactions_survive_random_kill_and_power_loss(txn_template, tmp_path, big):
    rounds = 30 if big else 3
    stats = _run_txn_rounds(txn_template, tmp_path, [None] * rounds, 1.0 if big else 0.3)
    print(f"transactions seed={SEED} rounds={stats}")


STEP_KILLS: list[StepKill] = (
    [("END_TXN", action, 1, end) for action in ("KILL_BEFORE", "KILL_AFTER") for end in ("commit", "abort")]
    + [("WRITE_TXN_MARKERS", action, n, "commit") for action in ("KILL_BEFORE", "KILL_AFTER") for n in (1, PARTITIONS)]
    + [("WRITE_TXN_MARKERS", "KILL_AFTER", 1, "abort")]
)


@pytest.mark.parametrize("step", STEP_KILLS, ids=["-".join(map(str, s)) for s in STEP_KILLS])
def test_transactions_killed_at_end_txn_steps_then_power_loss(txn_template, tmp_path, big, step):
    stats = _run_txn_rounds(txn_template, tmp_path, [step] * (5 if big else 1), 0)
    print(f"transactions seed={SEED} step={step} rounds={stats}")
