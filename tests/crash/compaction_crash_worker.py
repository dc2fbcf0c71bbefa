"""Worker process for the compaction crash tests (tests/crash/test_compaction_crash.py), plus the
history and the views both sides share.

Not a test module (no `test_` prefix). Run as a script, one of:

    compact ROOT --kill before|after --step NAME --nth N
        `Store.compact` of the topic, with `storage.log_cleaner.<NAME>` (one of its SWAP_STEPS)
        wrapped so that the process SIGKILLs itself just before or just after the step's N-th
        call: a real kill -9, no finally blocks, no clean close. Prints `KILL <where>` first.
        Prints `DONE` if the step was called fewer than N times (nothing killed).
    churn ROOT --rounds R
        R more rounds of: every key written again (a plain producer), then `Store.compact`; prints
        `ROUND r` after each round's cleaning.
    read ROOT --stop FILE
        a lock-free reader (`Store.open_for_reading`) reading the whole partition under
        read_uncommitted in a loop until FILE exists (and at least once after), checking every
        pass against `churn`'s history (`check_churn_view`); exits 1 with `FAIL ...` on the first
        violation, else prints `READS <passes>`.

`fill` (called in the test process) writes the history the crash tests clean: idempotent and
transactional producers (commits and aborts, a transaction left open near the end), tombstones,
keys written again and again, over many small segments, cleaned once half-way. Timestamps increase by one per record
and per marker, so timestamp lookups have one right answer.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

TOPIC = "t"
KEYS = 20
SEGMENT_BYTES = 1024
TS0 = 1_600_000_000_000  # far in the past: nothing is within min.compaction.lag.ms or a horizon
LEFTOVER_SUFFIXES = (".cleaned", ".swap", ".deleted")  # Kafka's names for a swap's files

View = list[tuple[int, int, bytes | None, bytes | None]]  # (offset, timestamp, key, value)


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _die(where: str) -> None:
    _say(f"KILL {where}")
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # not reached


# ---- the history -----------------------------------------------------------------------------------


def fill(root: str, *, seed: int, batches: int) -> None:
    """Write the history of the crash tests into a new store at `root` (deterministic per seed)."""
    from storage import Store
    from storage.records import ControlType

    rng = random.Random(seed)
    ts = [TS0]

    def tick() -> int:
        ts[0] += 1
        return ts[0]

    with Store.open(root) as store:
        # Dirty ratio 1.0: the roll trigger (a ratio *above* it, as Kafka's) leaves the history dirty.
        config = {"cleanup.policy": "compact", "segment.bytes": SEGMENT_BYTES, "min.cleanable.dirty.ratio": "1.0"}
        store.create_topic(TOPIC, 1, config)
        log = store.partition(TOPIC, 0)
        seq = {1: 0, 2: 0, 3: 0}
        open_txn: set[int] = set()
        for i in range(batches):
            if i == batches // 2:
                # Cleaned once half-way: the crash tests' cleaning then merges these small cleaned
                # segments into groups (a first cleaning of full segments merges none).
                store.compact(TOPIC)
            pid = rng.choice([-1, 1, 2, 3])
            txn = pid in (2, 3)
            if txn and pid in open_txn and rng.random() < 0.3:
                control = ControlType.ABORT if rng.random() < 0.35 else ControlType.COMMIT
                log.append_marker(control, pid, 0, timestamp=tick())
                open_txn.discard(pid)
                continue
            _send(log, rng, pid, seq, tick, i)
            if txn:
                open_txn.add(pid)
        for pid in sorted(open_txn):
            log.append_marker(ControlType.COMMIT, pid, 0, timestamp=tick())
        # One transaction left open, then a little more: the LSO stops cleaning near the end.
        _send(log, rng, 3, seq, tick, batches)
        for i in range(3):
            _send(log, rng, -1, seq, tick, batches + 1 + i)


def _send(log, rng: random.Random, pid: int, seq: dict[int, int], tick, i: int) -> None:
    from storage.records import build_batch

    n = rng.randint(1, 4)
    records = []
    for _ in range(n):
        key = b"k%d" % rng.randrange(KEYS)
        value = None if rng.random() < 0.15 else b"v%d-%s" % (i, key)
        records.append((key, value, None, tick()))
    data = build_batch(
        records,
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=seq[pid] if pid >= 0 else -1,
        is_transactional=pid in (2, 3),
    )
    log.append(data)
    if pid >= 0:
        seq[pid] += n


def view(log, isolation: str) -> View:
    """Every record of the partition visible under `isolation`, through the public fetch path."""
    from txlog.fetch import fetch

    out: View = []
    pos = log.log_start_offset
    while True:
        result = fetch(log, pos, isolation, max_records=1000)
        out += [(r.offset, r.timestamp, r.key, r.value) for r in result.records]
        if result.next_offset == pos and not result.records:
            return out
        pos = result.next_offset


def leftovers(root: str) -> list[str]:
    part = os.path.join(root, f"{TOPIC}-0")
    return sorted(n for n in os.listdir(part) if any(s in n for s in LEFTOVER_SUFFIXES))


# ---- churn and its reader --------------------------------------------------------------------------


def churn_value(rnd: int, key: int) -> bytes:
    return b"r%d-k%d" % (rnd, key)


def check_churn_view(got: View, end: int) -> str | None:
    """What is wrong with a reader's pass over `churn`'s partition (None: nothing).

    `churn` writes round r as KEYS plain records, key i at offset r*KEYS+i, and cleans after each
    round. Whatever the cleaner did meanwhile, a pass that began when the high watermark was `end`
    must return: offsets in order and each once, every record as written, and for every key its
    latest record below `end` or a later one (the cleaner removes a key's record only once a later
    one is in the log, and the pass reads on to the log's end).
    """
    offsets = [o for o, _, _, _ in got]
    if offsets != sorted(set(offsets)):
        return f"offsets repeated or out of order: {offsets}"
    newest: dict[int, int] = {}
    for o, _, key, value in got:
        rnd, k = divmod(o, KEYS)
        if (key, value) != (b"k%d" % k, churn_value(rnd, k)):
            return f"offset {o} holds {key!r}={value!r}"
        newest[k] = o
    for k in range(min(KEYS, end)):
        latest = (end - 1 - k) // KEYS * KEYS + k  # key k's last offset below end
        if newest.get(k, -1) < latest:
            return f"key k{k}: its record at offset {latest} (or a later one) is missing (high watermark {end})"
    return None


def _churn(args) -> None:
    from storage import Store
    from storage.records import build_batch

    with Store.open(args.root) as store:
        if not store.has_topic(TOPIC):
            store.create_topic(TOPIC, 1, {"cleanup.policy": "compact", "segment.bytes": SEGMENT_BYTES})
        log = store.partition(TOPIC, 0)
        first = log.log_end_offset // KEYS  # a second run goes on from the rounds already written
        for rnd in range(first, first + args.rounds):
            assert log.log_end_offset == rnd * KEYS
            for k in range(KEYS):
                log.append(build_batch([(b"k%d" % k, churn_value(rnd, k), None, TS0 + rnd * KEYS + k)]))
            store.compact(TOPIC)
            _say(f"ROUND {rnd}")
    _say("DONE")


def _read(args) -> None:
    from storage import Store

    passes = 0
    with Store.open_for_reading(args.root) as store:
        while True:
            stopping = os.path.exists(args.stop)
            log = store.partition(TOPIC, 0)
            end = log.high_watermark
            try:
                got = view(log, "read_uncommitted")
            except Exception as exc:  # noqa: BLE001  any error is the finding: reported with where it came from
                where = "".join(traceback.format_tb(exc.__traceback__)[-4:])
                _say(f"FAIL pass {passes}: {type(exc).__name__}: {exc}\n{where}")
                sys.exit(1)
            problem = check_churn_view(got, end)
            if problem is not None:
                _say(f"FAIL pass {passes}: {problem}")
                sys.exit(1)
            passes += 1
            if stopping:
                break
    _say(f"READS {passes}")


# ---- compact with a kill at a swap step ------------------------------------------------------------


def _arm(when: str, step: str, nth: int) -> None:
    import storage.log_cleaner as cleaner

    real = getattr(cleaner, step)
    calls = [0]
    where = f"{when}:{step}:{nth}"

    def wrapped(*args, **kwargs):
        calls[0] += 1
        if when == "before" and calls[0] == nth:
            _die(where)
        result = real(*args, **kwargs)
        if when == "after" and calls[0] == nth:
            _die(where)
        return result

    setattr(cleaner, step, wrapped)


def _compact(args) -> None:
    from storage import Store

    if args.kill != "none":
        _arm(args.kill, args.step, args.nth)
    with Store.open(args.root) as store:
        stats = store.compact(TOPIC)
        _say("STATS " + json.dumps([s.cleaned_up_to for s in stats]))
    _say("DONE")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["compact", "churn", "read"])
    parser.add_argument("root")
    parser.add_argument("--kill", choices=["before", "after", "none"], default="none")
    parser.add_argument("--step", default="")
    parser.add_argument("--nth", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--stop", default="")
    args = parser.parse_args()
    {"compact": _compact, "churn": _churn, "read": _read}[args.mode](args)


if __name__ == "__main__":
    main()
