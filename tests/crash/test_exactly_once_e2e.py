"""docs/reliability-scenarios.md scenario 60 end to end: consume-transform-produce under kill -9, SIGSTOP, power loss.

Real processes (tests/crash/eos_worker.py) on one store directory:

* the input topic `in` is seeded with N unique integers by an idempotent Producer;
* copier i (transactional id `copier-i`, group `g`) is a TransformLoop over input partition i
  only, writing to `out` in transactions of 100 records with its offsets in the same
  transaction, identity transform, random aborts with p = 1/3 (the `abort_if` hook, which
  first flushes the round's output so aborted data really reaches the log);
* a concurrent read_committed reader process polls `out` throughout and records every
  (partition, offset, value) it is given, plus the LSO after each poll;
* this process is the chaos: a watchdog kill -9s a random live copier every
  `kill_every` seconds, plus targeted kills until every copier has been killed at least
  3 times after ≥ 20 % of its input was committed; some ticks SIGSTOP a copier for less
  than the transaction timeout instead (late actors); one long SIGSTOP of a copier inside
  an Ongoing transaction outlasts the timeout, so the coordinator (swept by a thread here,
  as a broker's background thread would) fences it and aborts its transaction, and the
  copier must exit with ProducerFencedError after SIGCONT. Every copier that dies is
  restarted until the group's committed offsets reach the input end offsets.
* power-loss variant: before a killed copier is restarted, a torn write (part of one of
  the segment's batches, random bytes or zeros) is appended to the active segment of one
  of the partitions it writes, under that partition's lock, so recovery has to cut it.

Then the invariants of docs/reliability-scenarios.md scenario 60 are checked, including a Jepsen-style checker over the
reader's history (`check_history`), and every batch of every partition is parsed with
kafka-python (the independent oracle).

Default sizes keep the file well under a minute on 2 cores; `--big` runs the scenario's
sizes and timings (20,000 records, kills every 1-5 s, stops of 2-10 s). Set
TXLOG_E2E_SEED to replay a run's chaos schedule (process timing still varies).
"""

from __future__ import annotations

import bisect
import fcntl
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pytest

# the worker script and its sibling test modules are imported by name from this folder, and the
# repository root makes storage and txlog importable outside pytest too
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import eos_worker as ew

from storage.log_files import segment_filename
from storage.partition_log import LOCK_FILE
from storage.store import Store
from storage.topic_name import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from txlog.clients.producer import Producer
from txlog.coordinator.group_offsets import GroupOffsets
from txlog.coordinator.internal_topics import owner_partition
from txlog.coordinator.transaction_coordinator import TransactionCoordinator
from txlog.fetch import IsolationLevel, fetch
from txlog.schemas.transaction_log import TxnState
from txlog.topic_partition import TopicPartition

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

WORKER = os.path.join(HERE, "eos_worker.py")
GROUP = "g"
IN, OUT = "in", "out"
TXN_SIZE = 100
ABORT_P = 1 / 3
KILL_QUOTA = 3  # kills per copier after ≥ 20 % progress
URGENT_STOP_GAP_S = 0.3  # between forced short stops while the run is below its quota
QUOTA_PROGRESS = 0.20
CONTROL_BATCH_BYTES = 78


# =====================================================================================================
# The checker: Jepsen-style anomalies over the reader's history and the final log
# =====================================================================================================

ANOMALIES = (
    ":duplicate",  # a value twice in the final RC output, or given twice to the reader
    ":lost-write",  # an input value missing from the final RC output
    ":phantom-write",  # a final RC value that was never an input
    ":unseen",  # in the final RC output, but the reader never got it (after its final drain)
    ":inconsistent-offsets",  # the reader got value v at (p, o), the final log has another value there
    ":nonmonotonic-poll",  # the reader's offsets in a partition did not strictly increase
    ":poll-skip",  # the reader got offsets a then c in a partition; a committed b lies between
    ":G1a",  # the reader got a record that is not in the final RC output (aborted read)
    ":precommitted-read",  # the reader got an offset ≥ the partition's LSO at that poll
    ":nonmonotonic-send",  # in an output partition, one input partition's records out of input order
    ":offset-regression",  # the group's committed offset of an input partition moved backwards
)

Final = Mapping[int, Sequence[tuple[int, bytes]]]  # output partition -> [(offset, value)] in offset order
Read = tuple[int, int, int, bytes]  # (poll number, partition, offset, value), in the order polls returned them
Commits = Mapping[int, Sequence[int]]  # input partition -> the group's committed offsets, in the order they took effect


def check_history(
    inputs: Mapping[bytes, tuple[int, int]],
    final: Final,
    reads: Sequence[Read],
    lsos: Mapping[tuple[int, int], int],
    commits: Commits | None = None,
) -> dict[str, list]:
    """Every anomaly found, by name (ANOMALIES); all lists empty means exactly-once held.

    `inputs` maps each input value to its (input partition, offset); `final` is the final
    read_committed view of the output; `reads` is the reader's history and `lsos[(poll,
    partition)]` the LSO it read right after that poll (the LSO never moves back, so an
    offset at or past it was not stable when it was fetched). `commits`, when given, is
    the group's committed-offset history per input partition (`committed_offset_history`).
    """
    found: dict[str, list] = {name: [] for name in ANOMALIES}
    for p, offsets in (commits or {}).items():
        for before, after in itertools.pairwise(offsets):
            if after < before:
                found[":offset-regression"].append((p, before, after))
    where: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    final_at: dict[tuple[int, int], bytes] = {}
    committed_offsets: dict[int, list[int]] = {}
    for p, records in final.items():
        committed_offsets[p] = [off for off, _ in records]
        last_input: dict[int, tuple[int, int]] = {}  # input partition -> (output offset, input offset)
        for off, value in records:
            where[value].append((p, off))
            final_at[(p, off)] = value
            if value not in inputs:
                found[":phantom-write"].append((p, off, value))
                continue
            ip, ioff = inputs[value]
            prev = last_input.get(ip)
            if prev is not None and ioff <= prev[1]:
                found[":nonmonotonic-send"].append(
                    {"partition": p, "offsets": (prev[0], off), "input": (ip, prev[1], ioff)}
                )
            last_input[ip] = (off, ioff)
    for value, places in where.items():
        if len(places) > 1:
            found[":duplicate"].append(("final", value, places))
    found[":lost-write"] = sorted(v for v in inputs if v not in where)

    seen: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    last_offset: dict[int, int] = {}
    for poll, p, off, value in reads:
        seen[value].append((p, off))
        lso = lsos.get((poll, p))
        if lso is not None and off >= lso:
            found[":precommitted-read"].append((poll, p, off, lso))
        at_end = final_at.get((p, off))
        if value not in where:
            found[":G1a"].append((poll, p, off, value))
        elif at_end is not None and at_end != value:
            found[":inconsistent-offsets"].append((p, off, value, at_end))
        elif at_end is None:  # the value is committed, but somewhere else
            found[":inconsistent-offsets"].append((p, off, value, where[value]))
        prev = last_offset.get(p, -1)
        if off <= prev:
            found[":nonmonotonic-poll"].append((poll, p, prev, off))
        else:
            offsets = committed_offsets.get(p, [])
            i = bisect.bisect_right(offsets, prev)
            if i < len(offsets) and offsets[i] < off:
                found[":poll-skip"].append((poll, p, prev, offsets[i], off))
        last_offset[p] = off
    for value, places in seen.items():
        if len(places) > 1:
            found[":duplicate"].append(("reader", value, places))
    found[":unseen"] = sorted(v for v in where if v not in seen)
    return found


def assert_no_anomalies(found: dict[str, list], context: str = "") -> None:
    bad = {name: items for name, items in found.items() if items}
    if bad:
        summary = {name: f"{len(items)}: {items[:5]}" for name, items in bad.items()}
        pytest.fail(f"{context}anomalies: {json.dumps(summary, indent=1, default=str)}")


def test_checker_finds_each_anomaly():
    """The checker itself: a clean history passes, each injected anomaly is named."""
    inputs = {b"a": (0, 0), b"b": (0, 1), b"c": (1, 0), b"d": (1, 1)}
    final = {0: [(0, b"a"), (2, b"c"), (4, b"b")], 1: [(1, b"d")]}  # offsets 1, 3 of p0: aborted / markers
    reads = [(1, 0, 0, b"a"), (1, 1, 1, b"d"), (2, 0, 2, b"c"), (3, 0, 4, b"b")]
    lsos = {(1, 0): 2, (1, 1): 3, (2, 0): 3, (3, 0): 6}
    clean = check_history(inputs, final, reads, lsos)
    assert not any(clean.values()), clean

    def names(found):
        return {n for n, items in found.items() if items}

    assert names(
        check_history(inputs, {0: [(0, b"a"), (2, b"c"), (4, b"b"), (6, b"a")], 1: [(1, b"d")]}, reads, lsos)
    ) == {":duplicate", ":nonmonotonic-send"}
    assert names(check_history(inputs, {0: [(0, b"a"), (2, b"c"), (4, b"b")], 1: []}, reads[:1] + reads[2:], lsos)) == {
        ":lost-write"
    }
    assert names(check_history(inputs, final, reads[:3], lsos)) == {":unseen"}
    assert names(check_history(inputs, final, reads[:1] + [(1, 0, 1, b"x")] + reads[1:], lsos)) == {":G1a"}
    assert names(check_history(inputs, final, [(1, 0, 0, b"c")] + reads[1:], lsos)) >= {":inconsistent-offsets"}
    assert names(check_history(inputs, final, reads[:2] + reads[3:], lsos)) == {":poll-skip", ":unseen"}
    assert ":nonmonotonic-poll" in names(check_history(inputs, final, reads + [(4, 0, 2, b"c")], lsos))
    assert names(check_history(inputs, final, reads, {**lsos, (3, 0): 4})) == {":precommitted-read"}
    swapped = {0: [(0, b"a"), (2, b"b"), (4, b"c")], 1: [(1, b"d")]}
    assert ":nonmonotonic-send" not in names(check_history(inputs, swapped, [], {}))
    backwards = {0: [(0, b"b"), (2, b"c"), (4, b"a")], 1: [(1, b"d")]}
    assert ":nonmonotonic-send" in names(check_history(inputs, backwards, [], {}))
    assert ":phantom-write" in names(check_history(inputs, {**final, 1: [(1, b"d"), (2, b"zz")]}, [], {}))
    assert not names(check_history(inputs, final, reads, lsos, {0: [0, 2, 2, 5], 1: [1]}))
    assert names(check_history(inputs, final, reads, lsos, {0: [0, 20, 10]})) == {":offset-regression"}


def committed_offset_history(store_path: str, group: str, topic: str = IN) -> dict[int, list[int]]:
    """The group's committed offset of each partition of `topic`, every time it changed, from the log.

    Replays the group's `__consumer_offsets` partition as the group coordinator loads it:
    plain commits take effect at once, transactional ones at their producer's COMMIT
    marker (unless a later-written commit already replaced them), aborted ones never.
    """
    from txlog.schemas.offset_log import OffsetKey, decode_key, decode_offset_value

    store = Store.open(store_path, read_only=True)
    try:
        owner = owner_partition(group, store.partition_count(CONSUMER_OFFSETS_TOPIC))
        log = store.partition(CONSUMER_OFFSETS_TOPIC, owner)
        history: dict[int, list[int]] = defaultdict(list)
        current: dict[int, tuple[int, int]] = {}  # partition -> (offset, batch offset that wrote it)
        pending: dict[int, dict[int, tuple[int, int]]] = defaultdict(dict)

        def take(partition: int, offset: int, batch_offset: int) -> None:
            if partition in current and current[partition][1] > batch_offset:
                return
            current[partition] = (offset, batch_offset)
            history[partition].append(offset)

        pos = log.log_start_offset
        while pos < log.log_end_offset:
            batches = log.read(pos, 1 << 20)
            for batch in batches:
                pos = batch.last_offset + 1
                if batch.is_control:
                    done = pending.pop(batch.producer_id, {})
                    if batch.control_marker().is_commit:
                        for partition, (offset, at) in sorted(done.items(), key=lambda kv: kv[1][1]):
                            take(partition, offset, at)
                    continue
                for record in batch.records():
                    key = decode_key(record.key)
                    if not isinstance(key, OffsetKey) or key.group != group or key.topic != topic:
                        continue
                    value = decode_offset_value(record.value)
                    if value is None:
                        continue
                    if batch.is_transactional:
                        pending[batch.producer_id][key.partition] = (value.offset, batch.base_offset)
                    else:
                        take(key.partition, value.offset, batch.base_offset)
        return dict(history)
    finally:
        store.close()


# =====================================================================================================
# Sizes and timings
# =====================================================================================================


@dataclass(frozen=True)
class Profile:
    records: int
    deadline_s: float  # the chaos phase fails (instead of hanging) after this long
    kill_every: tuple[float, float]  # watchdog tick interval
    stop_for: tuple[float, float]  # short SIGSTOPs: always well under the transaction timeout
    stop_share: float  # share of watchdog ticks that SIGSTOP instead of SIGKILL
    min_short_stops: int
    txn_timeout_ms: int
    long_stop_extra_s: float  # the long SIGSTOP lasts the transaction timeout plus this
    delay_ms: float  # per round, inside the open transaction (see eos_worker copy)
    min_life: tuple[float, float]  # a copier is not killed by a tick before this much life (random per life)
    sweep_every_s: float


CI = Profile(
    records=2_000,
    deadline_s=90,
    kill_every=(0.2, 1.0),
    stop_for=(0.2, 0.6),
    stop_share=0.25,
    min_short_stops=2,
    txn_timeout_ms=2_000,
    long_stop_extra_s=1.0,
    delay_ms=100,
    min_life=(0.05, 0.6),
    sweep_every_s=0.2,
)
BIG = Profile(
    records=20_000,
    deadline_s=900,
    kill_every=(1.0, 5.0),
    stop_for=(2.0, 10.0),
    stop_share=0.2,
    min_short_stops=3,
    txn_timeout_ms=15_000,
    long_stop_extra_s=3.0,
    delay_ms=20,
    min_life=(0.05, 1.5),
    sweep_every_s=0.5,
)


# =====================================================================================================
# Processes and store helpers
# =====================================================================================================


def seed_input(
    store_path: str, records: int, in_partitions: int, out_partitions: int, rng: random.Random
) -> tuple[dict[bytes, tuple[int, int]], dict[int, int]]:
    """Create the topics and write `records` unique integers with an idempotent producer.

    Returns value -> (input partition, offset) and each input partition's end offset.
    """
    store = Store.open(store_path)
    try:
        store.create_topic(IN, in_partitions)
        store.create_topic(OUT, out_partitions)
        producer = Producer(store)  # idempotent by default
        assert producer.idempotent and producer.producer_id >= 0
        sent = []
        for i, n in enumerate(rng.sample(range(10**12), records)):
            value = str(n).encode()
            sent.append((value, producer.send(IN, value=value, key=value, partition=i % in_partitions)))
        producer.flush()
        placed = {}
        for value, future in sent:
            md = future.get()
            placed[value] = (md.partition, md.offset)
        producer.close()
        ends = {p: store.partition(IN, p).log_end_offset for p in range(in_partitions)}
        for p in range(in_partitions):  # what the copiers will read is exactly what was acknowledged
            got = read_view(store.partition(IN, p), IsolationLevel.READ_COMMITTED)
            assert [(p, off) for off, _ in got] == sorted(pl for pl in placed.values() if pl[0] == p)
            assert all(placed[v] == (p, off) for off, v in got)
    finally:
        store.close()
    assert len(placed) == records and sum(ends.values()) == records
    return placed, ends


def read_view(log, isolation: IsolationLevel) -> list[tuple[int, bytes]]:
    """[(offset, value)] of a whole partition under an isolation level."""
    out: list[tuple[int, bytes]] = []
    pos = log.log_start_offset
    while True:
        result = fetch(log, pos, isolation, max_records=5000, max_bytes=8 << 20)
        out.extend((r.offset, r.value) for r in result.records)
        if result.next_offset <= pos:
            return out
        pos = result.next_offset


def _log_lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def _tail(path: str, n: int = 25) -> str:
    return "\n".join(_log_lines(path)[-n:])


def dump_stacks(*procs: subprocess.Popen | None) -> None:
    """Ask hung workers for their Python stacks (faulthandler on SIGUSR1, into their logs)."""
    live = [p for p in procs if p is not None and p.poll() is None]
    for _ in range(3 if live else 0):  # a few samples: a busy loop shows up as the same frames
        for proc in live:
            for sig in (signal.SIGCONT, signal.SIGUSR1):
                try:
                    os.kill(proc.pid, sig)
                except ProcessLookupError:
                    pass
        time.sleep(0.3)


def parse_history(path: str) -> tuple[list[Read], dict[tuple[int, int], int]]:
    reads: list[Read] = []
    lsos: dict[tuple[int, int], int] = {}
    for line in _log_lines(path):
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "R" and len(parts) == 5:
            reads.append((int(parts[1]), int(parts[2]), int(parts[3]), parts[4].encode()))
        elif parts[0] == "L" and len(parts) == 4:
            lsos[(int(parts[1]), int(parts[2]))] = int(parts[3])
        else:
            raise AssertionError(f"reader history has a torn or unknown line: {line!r}")
    return reads, lsos


def tear_tail(store_path: str, topic: str, partition: int, rng: random.Random) -> str | None:
    """Append a torn write to the partition's active segment, holding its writer lock.

    The bytes are strictly less than a batch (a prefix of one of the segment's batches),
    random bytes, or zeros: a write the power cut short. Recovery must cut exactly them.
    Returns what was done, or None if the lock stayed busy (its holder may be SIGSTOPped).
    """
    directory = os.path.join(store_path, f"{topic}-{partition}")
    if not os.path.isdir(directory):
        return None
    fd = os.open(os.path.join(directory, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + 1.0
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    return None
                time.sleep(0.01)
        bases = sorted(int(n[:-4]) for n in os.listdir(directory) if n.endswith(".log") and n[:-4].isdigit())
        path = os.path.join(directory, segment_filename(bases[-1], ".log"))
        with open(path, "rb") as f:
            data = f.read()
        batches = []
        pos = 0
        while len(data) - pos >= 12:
            size = int.from_bytes(data[pos + 8 : pos + 12], "big", signed=True) + 12
            if size < 61 or pos + size > len(data):
                break
            batches.append((pos, size))
            pos += size
        kind = rng.choice(["partial-batch", "random", "zeros"]) if batches else rng.choice(["random", "zeros"])
        if kind == "partial-batch":
            start, size = rng.choice(batches)
            junk = data[start : start + rng.randint(1, size - 1)]
        elif kind == "random":
            junk = rng.randbytes(rng.randint(1, 400))
        else:
            junk = bytes(rng.randint(1, 4096))
        with open(path, "ab") as f:
            f.write(junk)
            f.flush()
            os.fsync(f.fileno())
        return f"{topic}-{partition}: {kind} {len(junk)} B after byte {len(data)}"
    finally:
        os.close(fd)  # drops the lock


def held_locks(pid: int, store_path: str) -> list[str]:
    """The store's lock files `pid` holds an flock on right now (from /proc/locks; waiters excluded)."""
    names: dict[int, str] = {}
    for name in os.listdir(store_path):
        path = os.path.join(store_path, name)
        candidates = [os.path.join(path, LOCK_FILE)] if os.path.isdir(path) else [path]
        for lock in candidates:
            if lock.endswith(".lock") and os.path.exists(lock):
                names[os.stat(lock).st_ino] = os.path.relpath(lock, store_path)
    held = []
    try:
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return held
    for line in lines:
        parts = line.split()
        if len(parts) < 6 or parts[1] == "->" or parts[1] != "FLOCK" or int(parts[4]) != pid:
            continue
        inode = int(parts[5].rsplit(":", 1)[1])
        if inode in names:
            held.append(names[inode])
    return sorted(held)


class Sweeper(threading.Thread):
    """The coordinator's housekeeping, as a broker's background thread would run it.

    Rolls PREPAREs forward and times out expired transactions on every coordinator
    partition; this is what fences a SIGSTOPped copier whose transaction outlived its
    timeout while the copier cannot act.
    """

    def __init__(self, store_path: str, every_s: float):
        super().__init__(daemon=True, name="sweeper")
        self.store_path, self.every_s = store_path, every_s
        self.stop_event = threading.Event()
        self.errors: list[str] = []
        self.sweeps = 0

    def run(self) -> None:
        store = Store.open(self.store_path)
        try:
            coordinator = TransactionCoordinator(store)
            while not self.stop_event.wait(self.every_s):
                try:
                    coordinator.sweep_all()
                    self.sweeps += 1
                except Exception:  # noqa: BLE001 - reported by the test
                    self.errors.append(traceback.format_exc())
        finally:
            try:
                store.close()
            except Exception:  # noqa: BLE001
                self.errors.append(traceback.format_exc())


@dataclass
class Slot:
    """One copier position: its transactional id and input partitions, across restarts."""

    index: int
    tid: str
    partitions: list[int]
    proc: subprocess.Popen | None = None
    log_path: str = ""
    incarnation: int = 0
    started: float = 0.0
    min_life: float = 0.0
    committed_at_start: int = 0
    prev_life_progressed: bool = True
    stopped_until: float | None = None  # a short SIGSTOP in progress
    zombie: str | None = None  # "stopped" / "waiting": the long-stop experiment owns it
    urgent_at: float | None = None
    done: bool = False
    kills: int = 0
    counted_kills: int = 0  # kills at ≥ 20 % progress
    short_stops: int = 0
    exits: list[int] = field(default_factory=list)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Scenario60:
    """Runs the copiers, the reader, the sweeper and the chaos until the group has committed everything."""

    def __init__(
        self, tmp_path, profile: Profile, *, in_partitions: int, out_partitions: int, power_loss: bool, seed: int
    ):
        self.profile = profile
        self.in_partitions, self.out_partitions = in_partitions, out_partitions
        self.power_loss = power_loss
        self.seed = seed
        self.rng = random.Random(seed)
        self.store_path = str(tmp_path / "store")
        self.logs = str(tmp_path / "logs")
        os.makedirs(self.logs)
        self.history_path = str(tmp_path / "reader-history.txt")
        self.stop_file = str(tmp_path / "reader-stop")
        self.slots = [Slot(i, f"copier-{i}", [i]) for i in range(in_partitions)]
        self.reader: subprocess.Popen | None = None
        self.sweeper: Sweeper | None = None
        self.inputs: dict[bytes, tuple[int, int]] = {}
        self.ends: dict[int, int] = {}
        self.fenced_other = 0
        self.tears: list[str] = []
        self.tear_skipped = 0
        self.long_stops: list[dict] = []
        self.long_stop_state = "idle"
        self.long_stop_current: dict = {}
        self.long_stop_probes = 0
        self.next_probe = 0.0
        self.ticks = 0
        self.next_urgent_stop = 0.0
        self.problems: list[str] = []
        self.mon_store: Store | None = None

    # ---- monitoring (a read-only view: it never waits for a lock a stopped copier holds) ---------

    def committed(self) -> dict[int, int]:
        found = self.mon_groups.committed(GROUP, [TopicPartition(IN, p) for p in self.ends])
        return {tp.partition: om.offset for tp, om in found.items()}

    def slot_committed(self, slot: Slot, committed: dict[int, int]) -> int:
        return sum(committed.get(p, 0) for p in slot.partitions)

    def slot_total(self, slot: Slot) -> int:
        return sum(self.ends[p] for p in slot.partitions)

    def progress(self, slot: Slot, committed: dict[int, int]) -> float:
        return self.slot_committed(slot, committed) / self.slot_total(slot)

    # ---- processes -------------------------------------------------------------------------------

    def _popen(self, args: list[str], log_path: str) -> subprocess.Popen:
        with open(log_path, "w") as log:
            return subprocess.Popen(
                [sys.executable, WORKER, *args],
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def spawn(self, slot: Slot, committed: dict[int, int]) -> None:
        slot.incarnation += 1
        slot.log_path = os.path.join(self.logs, f"{slot.tid}.{slot.incarnation}.log")
        args = [
            "copy",
            "--store",
            self.store_path,
            "--transactional-id",
            slot.tid,
            "--input-topic",
            IN,
            "--output-topic",
            OUT,
            "--group",
            GROUP,
            "--txn-size",
            str(TXN_SIZE),
            "--abort-p",
            repr(ABORT_P),
            "--txn-timeout-ms",
            str(self.profile.txn_timeout_ms),
            "--delay-ms",
            str(self.profile.delay_ms),
            "--seed",
            str(self.rng.randrange(1 << 30)),
        ]
        for p in slot.partitions:
            args += ["--partition", str(p)]
        slot.proc = self._popen(args, slot.log_path)
        slot.started = time.monotonic()
        slot.min_life = self.rng.uniform(*self.profile.min_life)
        slot.committed_at_start = self.slot_committed(slot, committed)
        slot.urgent_at = None

    def kill(self, slot: Slot, committed: dict[int, int]) -> None:
        os.kill(slot.proc.pid, signal.SIGKILL)
        slot.proc.wait(timeout=30)
        slot.kills += 1
        if self.progress(slot, committed) >= QUOTA_PROGRESS:
            slot.counted_kills += 1

    def start_reader(self) -> None:
        log = os.path.join(self.logs, "reader.log")
        self.reader = self._popen(
            [
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
                "60",
            ],
            log,
        )
        deadline = time.monotonic() + 60
        while not any(line.startswith("READY") for line in _log_lines(log)):
            if self.reader.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the reader did not start (rc {self.reader.poll()}):\n{_tail(log)}")
            time.sleep(0.02)

    def kill_everything(self) -> None:
        """finally: no child outlives the test, stopped or not."""
        procs = [s.proc for s in self.slots if s.proc is not None] + ([self.reader] if self.reader else [])
        for proc in procs:
            if proc.poll() is None:
                for sig in (signal.SIGCONT, signal.SIGKILL):
                    try:
                        os.kill(proc.pid, sig)
                    except ProcessLookupError:
                        pass
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        if self.sweeper is not None:
            self.sweeper.stop_event.set()
            self.sweeper.join(timeout=30)
        if self.mon_store is not None:
            self.mon_store.close()

    # ---- the run ---------------------------------------------------------------------------------

    def run(self) -> dict:
        t0 = time.monotonic()
        self.inputs, self.ends = seed_input(
            self.store_path, self.profile.records, self.in_partitions, self.out_partitions, self.rng
        )
        self.mon_store = Store.open(self.store_path, read_only=True)
        self.mon_groups = GroupOffsets(self.mon_store)
        self.mon_coord = TransactionCoordinator(self.mon_store)
        self.start_reader()
        self.sweeper = Sweeper(self.store_path, self.profile.sweep_every_s)
        self.sweeper.start()
        committed = self.committed()
        for slot in self.slots:
            self.spawn(slot, committed)
        deadline = time.monotonic() + self.profile.deadline_s
        next_tick = time.monotonic() + self.rng.uniform(*self.profile.kill_every)
        while True:
            now = time.monotonic()
            if now > deadline:
                dump_stacks(self.reader, *(s.proc for s in self.slots))
                raise AssertionError(
                    f"[seed {self.seed}] not done after {self.profile.deadline_s} s: {self.describe_state()}"
                )
            if self.reader.poll() is not None:
                raise AssertionError(
                    f"the reader died (rc {self.reader.returncode}):\n{_tail(os.path.join(self.logs, 'reader.log'))}"
                )
            self.reap()
            if all(s.done for s in self.slots):
                break
            committed = self.committed()
            self.resume_short_stops(now)
            self.long_stop_step(now, committed)
            self.urgent_kills(now, committed)
            self.urgent_stops(now, committed)
            if now >= next_tick:
                self.tick(now, committed)
                next_tick = now + self.rng.uniform(*self.profile.kill_every)
            time.sleep(0.02)
        chaos_s = time.monotonic() - t0
        self.sweeper.stop_event.set()
        self.sweeper.join(timeout=60)
        assert not self.sweeper.is_alive(), "the sweeper thread hangs"
        assert not self.sweeper.errors, "sweep_all failed:\n" + "\n".join(self.sweeper.errors[:3])
        self.final_recovery()
        open(self.stop_file, "w").close()
        try:
            rc = self.reader.wait(timeout=90)
        except subprocess.TimeoutExpired:
            dump_stacks(self.reader)
            raise AssertionError(
                f"the reader did not finish its final drain:\n{_tail(os.path.join(self.logs, 'reader.log'), 60)}"
            ) from None
        assert rc == 0, f"reader exit {rc}:\n{_tail(os.path.join(self.logs, 'reader.log'))}"
        return {"chaos_s": round(chaos_s, 1)}

    def describe_state(self) -> str:
        committed = self.committed()
        return json.dumps(
            {
                s.tid: {
                    "committed": self.slot_committed(s, committed),
                    "of": self.slot_total(s),
                    "alive": s.alive(),
                    "incarnation": s.incarnation,
                    "kills": s.kills,
                    "counted": s.counted_kills,
                    "zombie": s.zombie,
                    "exits": s.exits[-10:],
                    "log": _tail(s.log_path, 8),
                }
                for s in self.slots
            }
            | {"long_stop": self.long_stop_state},
            indent=1,
        )

    def reap(self) -> None:
        """Handle copiers that exited: check how, tear a tail (power loss), restart unless finished."""
        for slot in self.slots:
            if slot.proc is None or slot.proc.poll() is None:
                continue
            rc = slot.proc.returncode
            slot.exits.append(rc)
            slot.stopped_until = None
            committed = self.committed()
            if slot.zombie == "waiting":
                self.long_stop_current["exit"] = rc
                self.long_stop_current["log"] = [ln for ln in _log_lines(slot.log_path) if ln.startswith("FENCED")]
                self.long_stops.append(self.long_stop_current)
                if rc != ew.EXIT_FENCED:
                    self.problems.append(
                        f"{slot.tid}#{slot.incarnation} resumed after its transaction timed out "
                        f"and exited {rc}, not with ProducerFencedError:\n{_tail(slot.log_path)}"
                    )
                ok = self.long_stop_current["fenced_while_stopped"] or len(self.long_stops) >= 3
                self.long_stop_state = "done" if ok else "idle"
                slot.zombie = None
            elif rc == ew.EXIT_FENCED:
                self.fenced_other += 1
            elif rc not in (0, -signal.SIGKILL):
                raise AssertionError(
                    f"[seed {self.seed}] {slot.tid}#{slot.incarnation} failed with exit {rc}:\n"
                    f"{_tail(slot.log_path, 40)}"
                )
            if self.power_loss and rc == -signal.SIGKILL:
                self.tear(slot)
            now_committed = self.slot_committed(slot, committed)
            slot.prev_life_progressed = now_committed > slot.committed_at_start
            if now_committed >= self.slot_total(slot):
                slot.done, slot.proc = True, None
            else:
                if rc == 0:
                    self.problems.append(
                        f"{slot.tid}#{slot.incarnation} exited 0 with {now_committed} of "
                        f"{self.slot_total(slot)} committed"
                    )
                self.spawn(slot, committed)

    def tear(self, slot: Slot) -> None:
        targets = [(OUT, p) for p in range(self.out_partitions)]
        if self.mon_store.has_topic(CONSUMER_OFFSETS_TOPIC):
            targets.append(
                (CONSUMER_OFFSETS_TOPIC, owner_partition(GROUP, self.mon_store.partition_count(CONSUMER_OFFSETS_TOPIC)))
            )
        if self.mon_store.has_topic(TRANSACTION_STATE_TOPIC):
            targets.append(
                (
                    TRANSACTION_STATE_TOPIC,
                    owner_partition(slot.tid, self.mon_store.partition_count(TRANSACTION_STATE_TOPIC)),
                )
            )
        self.rng.shuffle(targets)
        for topic, partition in targets:  # the first whose lock is free (a stopped copier may hold one)
            done = tear_tail(self.store_path, topic, partition, self.rng)
            if done is not None:
                self.tears.append(done)
                return
        self.tear_skipped += 1

    def eligible(self, slot: Slot, now: float, committed: dict[int, int], *, min_life: bool = True) -> bool:
        """May the watchdog touch this copier now? Never a stopped one; never twice in a row without progress.

        Random ticks also wait out the life's `min_life`; urgent kills do not (a life that already
        committed is old enough), or a fast copier on a loaded machine could finish short of its quota.
        """
        return (
            slot.alive()
            and not slot.done
            and slot.stopped_until is None
            and slot.zombie is None
            and (not min_life or now - slot.started >= slot.min_life)
            and (slot.prev_life_progressed or self.slot_committed(slot, committed) > slot.committed_at_start)
        )

    def tick(self, now: float, committed: dict[int, int]) -> None:
        """The watchdog: SIGKILL a random live copier, or now and then SIGSTOP it for a while."""
        candidates = [s for s in self.slots if self.eligible(s, now, committed)]
        if not candidates:
            return
        self.ticks += 1
        slot = self.rng.choice(candidates)
        short_stops = sum(s.short_stops for s in self.slots)
        stop = (
            short_stops < self.profile.min_short_stops and self.ticks % 2 == 1
        ) or self.rng.random() < self.profile.stop_share
        if stop:
            self.short_stop(slot, now)
        else:
            self.kill(slot, committed)

    def short_stop(self, slot: Slot, now: float) -> None:
        """SIGSTOP a copier for a while (a late actor); resume_short_stops sends the SIGCONT."""
        os.kill(slot.proc.pid, signal.SIGSTOP)
        slot.stopped_until = now + self.rng.uniform(*self.profile.stop_for)
        slot.short_stops += 1

    def urgent_kills(self, now: float, committed: dict[int, int]) -> None:
        """Until a copier has KILL_QUOTA kills past 20 % progress, kill each life soon after its first commit."""
        for slot in self.slots:
            if (
                slot.counted_kills >= KILL_QUOTA
                or not self.eligible(slot, now, committed, min_life=False)
                or self.progress(slot, committed) < QUOTA_PROGRESS
                or self.slot_committed(slot, committed) <= slot.committed_at_start
            ):
                continue
            if slot.urgent_at is None:
                slot.urgent_at = now + self.rng.uniform(0, 0.15)  # somewhere in the next transaction
            elif now >= slot.urgent_at:
                self.kill(slot, committed)

    def urgent_stops(self, now: float, committed: dict[int, int]) -> None:
        """Until the run has its quota of short stops, stop an eligible copier every URGENT_STOP_GAP_S:
        a run that finishes in fewer watchdog ticks than planned still gets its late actors."""
        if sum(s.short_stops for s in self.slots) >= self.profile.min_short_stops or now < self.next_urgent_stop:
            return
        candidates = [s for s in self.slots if self.eligible(s, now, committed)]
        if candidates:
            self.short_stop(self.rng.choice(candidates), now)
            self.next_urgent_stop = now + URGENT_STOP_GAP_S

    def resume_short_stops(self, now: float) -> None:
        for slot in self.slots:
            if slot.stopped_until is not None and now >= slot.stopped_until:
                if slot.alive():
                    os.kill(slot.proc.pid, signal.SIGCONT)
                slot.stopped_until = None

    def long_stop_step(self, now: float, committed: dict[int, int]) -> None:
        """One SIGSTOP inside an Ongoing transaction that outlasts the transaction timeout.

        The sweeper must time the transaction out (abort it and bump the epoch) while the
        copier is stopped; after SIGCONT the copier must exit with ProducerFencedError.
        """
        if self.long_stop_state == "idle":
            if now < self.next_probe:
                return
            self.next_probe = now + 0.05
            candidates = [
                s
                for s in self.slots
                if self.eligible(s, now, committed)
                and self.progress(s, committed) >= QUOTA_PROGRESS
                and any(ln.startswith("INIT ") for ln in _log_lines(s.log_path))
            ]
            if not candidates:
                return
            slot = min(candidates, key=lambda s: self.progress(s, committed))
            os.kill(slot.proc.pid, signal.SIGSTOP)
            time.sleep(0.02)
            self.long_stop_probes += 1
            desc = self.mon_coord.describe(slot.tid)
            locks = held_locks(slot.proc.pid, self.store_path)
            if desc is None or desc.state.state != TxnState.ONGOING or locks:
                # Not inside a transaction, or holding a lock the coordinator would need to
                # time it out (the other copier would wait behind it too): try again later.
                os.kill(slot.proc.pid, signal.SIGCONT)
                return
            self.long_stop_state, slot.zombie = "stopped", "stopped"
            self.long_stop_current = {
                "tid": slot.tid,
                "incarnation": slot.incarnation,
                "slot": slot.index,
                "producer": (desc.state.producer_id, desc.state.producer_epoch),
                "stopped_at": now,
                "cont_at": now + self.profile.txn_timeout_ms / 1000 + self.profile.long_stop_extra_s,
            }
        elif self.long_stop_state == "stopped":
            cur = self.long_stop_current
            if now < cur["cont_at"]:
                return
            slot = self.slots[cur["slot"]]
            desc = self.mon_coord.describe(slot.tid)
            cur["state_at_cont"] = (desc.state.state.name, desc.state.producer_id, desc.state.producer_epoch)
            cur["fenced_while_stopped"] = (
                desc.state.state != TxnState.ONGOING and desc.state.producer_epoch >= cur["producer"][1] + 2
            )
            cur["stopped_s"] = round(now - cur["stopped_at"], 2)
            os.kill(slot.proc.pid, signal.SIGCONT)
            cur["wait_until"] = now + 30
            self.long_stop_state, slot.zombie = "waiting", "waiting"
        elif self.long_stop_state == "waiting" and now > self.long_stop_current["wait_until"]:
            slot = self.slots[self.long_stop_current["slot"]]
            dump_stacks(slot.proc)
            raise AssertionError(
                f"{slot.tid} kept running 30 s after resuming from a stop that outlived "
                f"its transaction timeout:\n{_tail(slot.log_path, 60)}"
            )

    def final_recovery(self) -> None:
        """What the next start after the run does: open every partition (recovery), sweep once."""
        store = Store.open(self.store_path)
        try:
            for topic in store.list_topics():
                for p in range(store.partition_count(topic)):
                    store.partition(topic, p)
            TransactionCoordinator(store).sweep_all()
        finally:
            store.close()


# =====================================================================================================
# Final invariants
# =====================================================================================================


def kafka_python_scan(store_path: str) -> Counter:
    """Parse every batch of every segment of every partition with kafka-python; returns counts.

    Each file must be whole batches end to end with dense offsets, every CRC valid,
    control batches exactly 78 bytes with one COMMIT/ABORT marker.
    """
    from kafka.record.default_records import DefaultRecordBatch
    from kafka.record.memory_records import MemoryRecords

    counts: Counter = Counter()
    for name in sorted(os.listdir(store_path)):
        directory = os.path.join(store_path, name)
        if not os.path.isdir(directory):
            continue
        topic = name.rsplit("-", 1)[0]
        expected = None
        for seg in sorted(n for n in os.listdir(directory) if n.endswith(".log")):
            with open(os.path.join(directory, seg), "rb") as f:
                buf = f.read()
            memory = MemoryRecords(buf)
            consumed = 0
            expected = int(seg[:-4]) if expected is None else expected
            while True:
                batch = memory.next_batch()
                if batch is None:
                    break
                where = f"{name}/{seg} at byte {consumed}"
                assert isinstance(batch, DefaultRecordBatch), f"{where}: not a v2 batch"
                assert batch.validate_crc(), f"{where}: kafka-python finds a bad CRC"
                assert batch.base_offset == expected, (
                    f"{where}: batch at offset {batch.base_offset}, expected {expected}"
                )
                records = list(batch)
                assert len(records) == batch.last_offset_delta + 1, f"{where}: record count"
                if batch.is_control_batch:
                    assert batch.size_in_bytes == CONTROL_BATCH_BYTES, (
                        f"{where}: control batch of {batch.size_in_bytes} B"
                    )
                    assert batch.is_transactional and len(records) == 1, f"{where}: control batch shape"
                    marker = records[0]
                    assert marker.commit != marker.abort, f"{where}: marker is neither COMMIT nor ABORT"
                    counts[(topic, "commit" if marker.commit else "abort")] += 1
                else:
                    counts[(topic, "data-batches")] += 1
                    counts[(topic, "records")] += len(records)
                consumed += batch.size_in_bytes
                expected = batch.base_offset + batch.last_offset_delta + 1
            assert consumed == len(buf), f"{name}/{seg}: {len(buf) - consumed} bytes after the last whole batch"
    return counts


def verify(sc: Scenario60) -> dict:
    """Every invariant of docs/reliability-scenarios.md scenario 60 on the finished store; returns the run's numbers."""
    inputs, ends = sc.inputs, sc.ends
    store = Store.open(sc.store_path)
    try:
        coordinator = TransactionCoordinator(store)
        coordinator.sweep_all()
        txns = coordinator.list_transactions()
        unfinished = [
            (d.transactional_id, d.state.state.name)
            for d in txns
            if d.state.state in (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
        ]
        assert not unfinished, f"transactions left open: {unfinished}"
        pinned = []
        for topic in store.list_topics():
            for p in range(store.partition_count(topic)):
                log = store.partition(topic, p)
                if log.last_stable_offset != log.log_end_offset:
                    pinned.append((topic, p, log.last_stable_offset, log.log_end_offset))
        assert not pinned, f"partitions with LSO < log end: {pinned}"
        committed = GroupOffsets(store).committed(GROUP)
        assert {tp: om.offset for tp, om in committed.items()} == {TopicPartition(IN, p): e for p, e in ends.items()}, (
            f"group {GROUP} committed {committed}, input ends {ends}"
        )
        final = {
            p: read_view(store.partition(OUT, p), IsolationLevel.READ_COMMITTED)
            for p in range(store.partition_count(OUT))
        }
        ru_records = sum(
            len(read_view(store.partition(OUT, p), IsolationLevel.READ_UNCOMMITTED))
            for p in range(store.partition_count(OUT))
        )
    finally:
        store.close()
    counts = kafka_python_scan(sc.store_path)

    values = [v for recs in final.values() for _, v in recs]
    assert len(values) == len(set(values)), f"{len(values) - len(set(values))} duplicates in the final RC output"
    assert Counter(values) == Counter(inputs.keys()), (
        f"final RC output != input: {len(set(inputs) - set(values))} missing, {len(set(values) - set(inputs))} extra"
    )

    reads, lsos = parse_history(sc.history_path)
    seen = [v for _, _, _, v in reads]
    assert len(seen) == len(set(seen)), f"the concurrent reader got {len(seen) - len(set(seen))} duplicates"
    assert set(seen) == set(inputs), (
        f"reader set != input: {len(set(inputs) - set(seen))} unseen, {len(set(seen) - set(inputs))} extra"
    )
    per_partition: dict[int, list[int]] = defaultdict(list)
    for _, p, off, _ in reads:
        per_partition[p].append(off)
    for p, offs in per_partition.items():
        assert all(a < b for a, b in itertools.pairwise(offs)), f"reader offsets of out-{p} not strictly increasing"
    final_at = {(p, off): v for p, recs in final.items() for off, v in recs}
    assert all(final_at.get((p, off)) == v for _, p, off, v in reads), "the reader saw offsets that are not committed"
    assert all(off < lsos[(poll, p)] for poll, p, off, _ in reads), "the reader saw an offset at or past the LSO"

    if sc.in_partitions == 1 and sc.out_partitions == 1:
        in_order = [v for v, _ in sorted(inputs.items(), key=lambda item: item[1])]
        assert [v for _, v in final[0]] == in_order, "1 -> 1 copy: output is not the input in order"
        assert seen == [v for _, v in final[0]], "1 -> 1 copy: the reader's sequence is not the output"

    assert_no_anomalies(
        check_history(inputs, final, reads, lsos, committed_offset_history(sc.store_path, GROUP)), f"[seed {sc.seed}] "
    )
    return {
        "records": len(inputs),
        "out_data_batches": counts[(OUT, "data-batches")],
        "out_records_incl_aborted": ru_records,
        "out_commit_markers": counts[(OUT, "commit")],
        "out_abort_markers": counts[(OUT, "abort")],
        "offsets_commit_markers": counts[(CONSUMER_OFFSETS_TOPIC, "commit")],
        "offsets_abort_markers": counts[(CONSUMER_OFFSETS_TOPIC, "abort")],
        "reader_polls": max((poll for poll, _, _, _ in reads), default=0),
    }


# =====================================================================================================
# The test
# =====================================================================================================

VARIANTS = {
    "2in-3out": {"in_partitions": 2, "out_partitions": 3, "power_loss": False},
    "1in-1out-ordered": {"in_partitions": 1, "out_partitions": 1, "power_loss": False},
    "2in-3out-power-loss": {"in_partitions": 2, "out_partitions": 3, "power_loss": True},
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_scenario60_consume_transform_produce_under_kill9(tmp_path, big, variant):
    profile = BIG if big else CI
    seed = int(os.environ.get("TXLOG_E2E_SEED") or random.randrange(1 << 30))
    sc = Scenario60(tmp_path, profile, seed=seed, **VARIANTS[variant])
    started = time.monotonic()
    try:
        timing = sc.run()
    finally:
        sc.kill_everything()
    assert not sc.problems, f"[seed {seed}] " + "\n\n".join(sc.problems)

    # The chaos the scenario asks for really happened.
    for slot in sc.slots:
        assert slot.counted_kills >= KILL_QUOTA, (
            f"[seed {seed}] {slot.tid}: only {slot.counted_kills} kills after {QUOTA_PROGRESS:.0%} progress"
        )
    assert sum(s.short_stops for s in sc.slots) >= profile.min_short_stops
    assert sc.long_stops and all(ls["exit"] == ew.EXIT_FENCED for ls in sc.long_stops), sc.long_stops
    assert any(ls["fenced_while_stopped"] for ls in sc.long_stops), (
        f"the coordinator never timed out a stopped copier's transaction: {sc.long_stops}"
    )
    if sc.power_loss:
        assert len(sc.tears) >= KILL_QUOTA * len(sc.slots), sc.tears

    numbers = verify(sc)
    summary = {
        "variant": variant,
        "seed": seed,
        "big": big,
        **timing,
        "total_s": round(time.monotonic() - started, 1),
        "kills": {s.tid: s.kills for s in sc.slots},
        "kills_after_20pct": {s.tid: s.counted_kills for s in sc.slots},
        "short_stops": {s.tid: s.short_stops for s in sc.slots},
        "long_stops": [
            {k: ls[k] for k in ("tid", "producer", "state_at_cont", "fenced_while_stopped", "stopped_s", "exit")}
            for ls in sc.long_stops
        ],
        "long_stop_probes": sc.long_stop_probes,
        "other_fenced_exits": sc.fenced_other,
        "incarnations": {s.tid: s.incarnation for s in sc.slots},
        "torn_tails": len(sc.tears),
        "tear_skipped": sc.tear_skipped,
        "sweeps": sc.sweeper.sweeps,
        **numbers,
    }
    print("\nscenario 60 " + json.dumps(summary))
    with open(tmp_path / "summary.json", "w") as f:
        json.dump(summary | {"tears": sc.tears}, f, indent=1)
