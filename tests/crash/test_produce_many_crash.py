"""Scenario 90: produce_many's rounds of several appends made durable by one fdatasync, under kill -9 and power loss.

With acks=all outside a transaction, a sender round with one partition to send appends up to
max_in_flight_requests_per_connection groups of batches one after the other and makes them
durable with one fdatasync (storage/partition_log.py `PartitionLog.append_requests`; the writeback
of each but the last is started early, a hint). The batches are the producer's own bytearrays,
stamped with their offsets in place and written without a copy. Here a producer child calls
produce_many to one partition at a time (small batches and requests, so a call is many appends
and a round several), a plain send() to the same partition every other call, with a
read_uncommitted reader child, all SIGKILLed at a seeded random moment; then every partition is cut
back to its published HW, or to a batch boundary past it that writeback may have saved
(tests/crash/power_loss.py), and the store is reopened. Checked as for scenario 83: every
acknowledged record is there at its offset with its bytes, offsets are gap-free from 0, the records
of each partition keep their order and none appears twice, every record the reader saw survived
(the HW, which readers stop at, was never published past the durable data), `check_store` finds
every batch and index sound, and the producer's log shows rounds of more than one append.

`--big` runs more rounds; TXLOG_CRASH_SEED replays a run.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

from producer_crash_worker import TOPIC, Worker
from test_quiet_append_crash import PARTITIONS, SMALL_SEGMENT, _killed_cut_and_checked, _wait_for_acks

from storage import Store

SEED = int(os.environ.get("TXLOG_CRASH_SEED") or random.randrange(1 << 30))


def _round(root: str, rng: random.Random, segment_bytes: int | None, max_delay: float) -> dict:
    with Store.open(root) as s:
        s.create_topic(TOPIC, PARTITIONS, {"segment.bytes": segment_bytes} if segment_bytes else None)
    seen_path, acks, rounds = root + ".seen", root + ".acks", root + ".rounds"
    reader = Worker("read", root, "--log", seen_path, "--isolation", "read_uncommitted")
    reader.expect("READY")
    writer = Worker(
        "produce",
        root,
        "--log",
        acks,
        "--seed",
        rng.randrange(1 << 30),
        "--many",
        rng.choice((40, 200)),
        "--max-size",
        300,
        "--batch-size",
        1024,
        "--max-request-size",
        2048,
        "--requests-log",
        rounds,
    )
    writer.expect("READY")
    _wait_for_acks([acks], [writer], 50)
    time.sleep(rng.uniform(0, max_delay))
    outcome = _killed_cut_and_checked(root, rng, [reader, writer], [acks], seen_path)
    made = Path(rounds).read_bytes()
    return {
        **outcome,
        "rounds": len(made),
        "several": sum(1 for n in made if n > ord("1")),
    }


def test_scenario90_produce_many_rounds_survive_kill_and_power_loss(tmp_path, big):
    rounds, max_delay = (20, 1.0) if big else (3, 0.4)
    rng = random.Random(f"{SEED}-90")
    stats = []
    for r in range(rounds):
        try:
            stats.append(_round(str(tmp_path / f"r{r}"), rng, SMALL_SEGMENT * 4 if r % 2 else None, max_delay))
        except AssertionError as exc:
            raise AssertionError(f"[TXLOG_CRASH_SEED={SEED} round {r}] {exc}") from exc
    print(f"scenario 90 seed={SEED} rounds={stats}")
    assert sum(s["several"] for s in stats) > 0, "no round made more than one append"
