"""Scenario 83: durable one-record sends through the native quiet append, under kill -9 and power loss.

A lone batch's durable append makes its looks, write, fdatasync and high-watermark pwrite in one
native call (storage/partition_log.py `_quiet_append`, storage/native/src/bindings/append.rs)
while the view's directory key vouches and the `.log` is as long as the view knows; otherwise it
falls back to the Python path. Here one or two producer children send `send(...).get()` one
record at a time to the same partitions (alone, nearly every append is native; two keep finding
each other's appends, and fall back), with a read_uncommitted reader child, all SIGKILLed at a
seeded random moment; then every partition is cut back to its published HW, or to a batch
boundary past it that writeback may have saved (tests/crash/power_loss.py), and the store is
reopened. Checked: every acknowledged record is there at its offset with its bytes, offsets are
gap-free from 0, each writer's records keep their send order in every partition and none appears
twice, every record the reader saw survived, `check_store` finds every batch and index sound, and
the workers' logs of the native call's answers show that both the native writes and their
fallbacks were exercised.

The reader is killed first (tests/crash/test_producer_crash.py says why). `--big` runs more rounds;
TXLOG_CRASH_SEED replays a run. The same rounds run once more with an aborted transaction written
to every partition before the producers start (scenario 83 (g)): its active segment then has a
`.txnindex`, whose size and mtime are the native call's third look.
"""

from __future__ import annotations

import os
import random
import time
from collections import defaultdict
from pathlib import Path

from crash_worker import parse_value
from power_loss import random_written_back, simulate_power_loss
from producer_crash_worker import TOPIC, Worker, count_lines, read_record_log
from txn_crash_worker import check_store, fetch_all, partition_dirs

from storage import Store
from txlog.clients.producer import Producer

SEED = int(os.environ.get("TXLOG_CRASH_SEED") or random.randrange(1 << 30))
PARTITIONS = 2
SMALL_SEGMENT = 8192  # some rounds roll: a roll is a fallback, and the cut may drop whole segments
# Scenario 83 (g)'s aborted transaction, written before the producers start: in every partition its
# one record is at offset 0 and its marker at 1.
ABORTED_VALUE, AFTER_ABORT = b"aborted before the round", 2


def _wait_for_acks(paths: list[str], workers: list[Worker], count: int) -> None:
    deadline = time.monotonic() + 120
    while min(count_lines(p) for p in paths) < count:
        for w in workers:
            assert w.proc.poll() is None, f"worker exited {w.proc.returncode} early\n{w.stderr}"
        assert time.monotonic() < deadline, "the writers stalled"
        time.sleep(0.005)


def _kill(workers: list[Worker]) -> None:
    for w in workers:
        w.kill()
    for w in workers:
        w.drain()
        failures = [line for line in w.lines if line.startswith("FAIL")]
        assert not failures and w.proc.returncode == -9, (w.cmd, w.proc.returncode, failures, w.stderr)


def _abort_in_every_partition(root: str) -> None:
    """Scenario 83 (g): a transaction of one record in every partition, aborted through the coordinator
    (so `check_store` finds its decision for the markers): the record at offset 0, its marker at 1."""
    with Store.open(root) as s:
        producer = Producer(s, transactional_id="aborted-before-the-round")
        try:
            producer.init_transactions()
            producer.begin_transaction()
            for p in range(PARTITIONS):
                producer.send(TOPIC, ABORTED_VALUE, partition=p)
            producer.flush()
            producer.abort_transaction()
        finally:
            producer.close()


def _records_after_recovery(root: str, aborted: bool) -> dict[int, list[tuple[int, bytes]]]:
    """Each partition's records after recovery, read_committed after an abort (which must hide its
    record, and only it) and read_uncommitted otherwise."""
    with Store.open(root) as s:
        for topic, p, _ in partition_dirs(root):
            s.partition(topic, p)  # recovery at the first writable open
    with Store.open(root, read_only=True) as s:
        logs = {p: s.partition(TOPIC, p) for p in range(PARTITIONS)}
        if not aborted:
            return {p: fetch_all(log, "read_uncommitted") for p, log in logs.items()}
        for p, log in logs.items():
            assert fetch_all(log, "read_uncommitted")[:1] == [(0, ABORTED_VALUE)], f"partition {p} lost its abort"
        return {p: fetch_all(log, "read_committed") for p, log in logs.items()}


def _check(
    log: dict[int, list[tuple[int, bytes]]], acked: list[tuple[int, int, bytes]], seen: list, first: int = 0
) -> None:
    at: dict[tuple[int, int], bytes] = {}
    for p, records in log.items():
        last: dict[int, int] = defaultdict(lambda: -1)  # writer -> its last record number in p
        for expected, (offset, value) in enumerate(records, first):
            assert offset == expected, f"partition {p}: offset {offset} where {expected} was expected"
            writer, number = parse_value(value)  # the bytes are intact
            assert number % PARTITIONS == p, f"partition {p} holds writer {writer}'s record {number}"
            assert number > last[writer], f"partition {p}: writer {writer}'s record {number} after {last[writer]}"
            last[writer] = number
            at[(p, offset)] = value
    assert len({(p, off) for p, off, _ in acked}) == len(acked), "an offset was acknowledged twice"
    for what, records in (("acknowledged", acked), ("seen", seen)):
        for p, offset, value in records:
            assert at.get((p, offset)) == value, f"{what} record at {p}/{offset} is not in the log as sent"


def _killed_cut_and_checked(
    root: str, rng: random.Random, workers: list[Worker], acks: list[str], seen_path: str, aborted: bool = False
) -> dict[str, int]:
    """SIGKILL every worker, cut the store as a power loss may (tests/crash/power_loss.py), reopen it and
    check it against what the writers acknowledged (`acks`) and the reader saw: the round's counts.
    `aborted`: the round began with scenario 83 (g)'s abort, which the read_uncommitted reader saw too."""
    _kill(workers)
    acked = [record for path in acks for record in read_record_log(path)]
    seen = [record for record in read_record_log(seen_path) if record[2] != ABORTED_VALUE]
    policy = random_written_back(rng) if rng.random() < 0.5 else None
    cut = simulate_power_loss(root, policy)
    log = _records_after_recovery(root, aborted)
    check_store(root)
    _check(log, acked, seen, AFTER_ABORT if aborted else 0)
    return {"acked": len(acked), "kept": sum(map(len, log.values())), "bytes_cut": sum(c for _, c in cut.values())}


def _round(
    root: str,
    rng: random.Random,
    writers_count: int,
    segment_bytes: int | None,
    max_delay: float,
    callback_every: int = 0,
    aborted: bool = False,
) -> dict:
    with Store.open(root) as s:
        s.create_topic(TOPIC, PARTITIONS, {"segment.bytes": segment_bytes} if segment_bytes else None)
    if aborted:
        _abort_in_every_partition(root)
    seen_path = root + ".seen"
    reader = Worker("read", root, "--log", seen_path, "--isolation", "read_uncommitted")
    reader.expect("READY")
    acks = [f"{root}.acks{w}" for w in range(writers_count)]
    quiet = [f"{root}.quiet{w}" for w in range(writers_count)]
    paths = [f"{root}.paths{w}" for w in range(writers_count)]
    writers = [
        Worker(
            "produce",
            root,
            "--log",
            acks[w],
            "--seed",
            rng.randrange(1 << 30),
            "--one-at-a-time",
            "--writer",
            w,
            "--quiet-log",
            quiet[w],
            "--path-log",
            paths[w],
            "--callback-every",
            callback_every,
        )
        for w in range(writers_count)
    ]
    for w in writers:
        w.expect("READY")
    _wait_for_acks(acks, writers, 5)
    time.sleep(rng.uniform(0, max_delay))
    outcome = _killed_cut_and_checked(root, rng, [reader, *writers], acks, seen_path, aborted)
    statuses = b"".join(Path(path).read_bytes() for path in quiet)
    taken = b"".join(Path(path).read_bytes() for path in paths)
    return {
        **outcome,
        "native": statuses.count(b"0"),
        "fell_back": statuses.count(b"1"),
        "direct": taken.count(b"d"),
        "general": taken.count(b"g"),
    }


def test_scenario83_native_quiet_appends_survive_kill_and_power_loss(tmp_path, big):
    rounds, max_delay = (20, 1.0) if big else (3, 0.4)
    rng = random.Random(f"{SEED}-83")
    stats = []
    for r in range(rounds):
        try:
            writers = 1 if r % 3 == 0 else 2  # alone, nearly every append is native; two, most fall back
            segment_bytes = SMALL_SEGMENT if r % 2 else None
            stats.append(_round(str(tmp_path / f"r{r}"), rng, writers, segment_bytes, max_delay))
        except AssertionError as exc:
            raise AssertionError(f"[TXLOG_CRASH_SEED={SEED} round {r}] {exc}") from exc
    print(f"scenario 83 seed={SEED} rounds={stats}")
    assert sum(s["native"] for s in stats) > 0, "no append took the native path"
    assert sum(s["fell_back"] for s in stats) > 0, "no native look fell back"


def test_scenario83_quiet_appends_after_an_abort_survive_kill_and_power_loss(tmp_path, big):
    """Scenario 83 (g): (a)'s rounds on partitions whose active segment holds an aborted transaction,
    so a `.txnindex` the native call looks at: every acknowledged record survives as in (a), the
    aborted record stays in the log and out of read_committed reads, and the appends went native."""
    rounds, max_delay = (20, 1.0) if big else (3, 0.4)
    rng = random.Random(f"{SEED}-83g")
    stats = []
    for r in range(rounds):
        try:
            writers = 1 if r % 3 != 2 else 2  # mostly alone: the native path is what is under test
            segment_bytes = SMALL_SEGMENT if r % 2 else None
            stats.append(_round(str(tmp_path / f"r{r}"), rng, writers, segment_bytes, max_delay, aborted=True))
        except AssertionError as exc:
            raise AssertionError(f"[TXLOG_CRASH_SEED={SEED} round {r}] {exc}") from exc
    print(f"scenario 83 (g) seed={SEED} rounds={stats}")
    assert stats[0]["native"] > 0, "no append after the abort took the native path"


def test_scenario85_direct_path_sends_survive_kill_and_power_loss(tmp_path, big):
    """Scenario 85: durable one-record sends whose get() takes the direct path of a lone batch
    (txlog/clients/record_accumulator.py `_take_lone`), every third record's get() the general path
    instead (it has a callback, so the sender thread sends it), killed at a random moment and cut
    back as in scenario 83: every acknowledged record survives, once, in order, whichever path sent it."""
    rounds, max_delay = (20, 1.0) if big else (3, 0.4)
    rng = random.Random(f"{SEED}-85")
    stats = []
    for r in range(rounds):
        try:
            writers = 1 if r % 2 == 0 else 2
            stats.append(_round(str(tmp_path / f"r{r}"), rng, writers, SMALL_SEGMENT if r % 2 else None, max_delay, 3))
        except AssertionError as exc:
            raise AssertionError(f"[TXLOG_CRASH_SEED={SEED} round {r}] {exc}") from exc
    print(f"scenario 85 seed={SEED} rounds={stats}")
    assert sum(s["direct"] for s in stats) > 0, "no get() took the direct path"
    assert sum(s["general"] for s in stats) > 0, "no get() took the general path"
