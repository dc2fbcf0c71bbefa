"""create_topic killed (SIGKILL, for real) at each sync of its one sync round, then its unsynced files damaged.

docs/reliability-scenarios.md scenario 87: `Store.create_topic` writes every partition's files without
an fsync, makes them durable in one sync round (each partition's checkpoint and directory fsynced,
or one syncfs), then fsyncs the store directory and writes the metadata naming the topic. A worker
(tests/crash/parallel_sync_worker.py `create`) makes topics of PARTITIONS partitions one after
another and dies just before the n-th sync (fsync, fdatasync or syncfs) of a chosen creation, n
anywhere from the round's first sync to the metadata's last; or at a random moment. A kill before
the round ended leaves files no sync covered: a power loss may lose any of them, which the test
does to the creation's partitions (a directory gone, a file gone, the checkpoint emptied; chosen
at random per partition). Then a fresh process must find: every topic the worker was told of
whole (each partition opens, empty, with its epoch checkpoint); the topic of the killed creation
either whole or absent, never listed with a partition missing or damaged; the same name then
created afresh if absent (its leftover directories replaced); `check_store` clean.

Set TXLOG_CREATE_CRASH_SEED to replay a run's random choices; `--big` runs more kills.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from parallel_sync_worker import Worker
from txn_crash_worker import check_store

from storage import Store
from storage.checkpoint import LEADER_EPOCH_CHECKPOINT, read_leader_epoch_checkpoint

PARTITIONS = 20
SEED = int(os.environ.get("TXLOG_CREATE_CRASH_SEED") or random.randrange(1 << 30))


def _round_syncs(sync_method: str) -> int:
    """The syncs of one creation's round: one syncfs, or each partition's checkpoint and directory fsync."""
    return 1 if sync_method == "syncfs" else 2 * PARTITIONS


def _created(worker: Worker) -> set[int]:
    while worker.next_line(timeout=30) is not None:  # what it printed before dying
        pass
    return {int(line.split()[1]) for line in worker.lines if line.startswith("CREATED ")}


def _lose_unsynced(root: str, topic: str, rng: random.Random) -> int:
    """What a power loss may take of a creation whose round had not ended: per partition, its directory,
    one of its files, its checkpoint's bytes, or nothing. Returns how many partitions lost something."""
    damaged = 0
    for p in range(PARTITIONS):
        path = os.path.join(root, f"{topic}-{p}")
        if not os.path.isdir(path):
            continue  # never made: the kill came before
        choice = rng.choice(["dir", "file", "empty", "none"])
        names = sorted(os.listdir(path))
        if choice == "dir":
            shutil.rmtree(path)
        elif choice == "file" and names:
            os.unlink(os.path.join(path, rng.choice(names)))
        elif choice == "empty" and LEADER_EPOCH_CHECKPOINT in names:
            os.truncate(os.path.join(path, LEADER_EPOCH_CHECKPOINT), 0)
        else:
            continue
        damaged += 1
    return damaged


def _check_whole(store: Store, topic: str) -> None:
    assert store.partition_count(topic) == PARTITIONS, f"seed {SEED}: {topic}"
    for p in range(PARTITIONS):
        log = store.partition(topic, p)
        assert (log.log_start_offset, log.log_end_offset) == (0, 0), f"seed {SEED}: {topic}-{p}"
        assert read_leader_epoch_checkpoint(store.partition_dir(topic, p)) == [(0, 0)], f"seed {SEED}: {topic}-{p}"


def _kill_round(root: str, first: int, rng: random.Random, sync_method: str, phase: str) -> tuple[int, dict]:
    """One worker killed during the creation of topic `c<target>`, in its round's syncs (`phase` "round"),
    in the three after it (the store directory, the metadata's tmp file, its directory: "after"), or at a
    random moment ("moment"); the checks; (the next first, facts)."""
    target = first + rng.randrange(2)
    aimed = phase != "moment"
    syncs = _round_syncs(sync_method)
    n = {"round": rng.randint(1, syncs), "after": rng.randint(syncs + 1, syncs + 3), "moment": 0}[phase]
    kill = ("--kill-txn", target, "--kill-sync", n) if aimed else ()
    worker = Worker("create", root, "--first", first, "--partitions", PARTITIONS, *kill)
    try:
        worker.expect("IDS")
        if aimed:
            worker.proc.wait(timeout=120)  # it kills itself
        else:
            worker.expect(f"CREATED {first}")
            time.sleep(rng.uniform(0, 0.05))
    finally:
        worker.kill()
    told = _created(worker)
    if aimed:
        kills = [line for line in worker.lines if line.startswith("KILL ")]
        assert len(kills) == 1, f"seed {SEED}: the aimed kill did not fire: {worker.lines[-3:]}\n{worker.stderr}"
    in_flight = max(told, default=first - 1) + 1
    damaged = 0
    if aimed and n <= _round_syncs(sync_method):  # the round had not ended: nothing of c<target> is durable
        damaged = _lose_unsynced(root, f"c{in_flight}", rng)
    with Store.open(root) as store:
        for i in sorted(told):
            _check_whole(store, f"c{i}")
        topic = f"c{in_flight}"
        listed = store.has_topic(topic)
        if listed:
            _check_whole(store, topic)
        else:
            store.create_topic(topic, PARTITIONS)  # its leftovers, damaged or not, are replaced
            _check_whole(store, topic)
    check_store(root)
    return in_flight + 1, {"n": n, "target": target, "told": len(told), "listed": listed, "damaged": damaged}


def test_scenario87_create_topic_killed_at_each_sync_then_power_loss(tmp_path, big, sync_method):
    rng = random.Random(f"{SEED}-{sync_method}")
    root = str(tmp_path / "store")
    Store.open(root).close()
    first, rounds = 0, []
    for r in range(18 if big else 6):
        try:
            first, facts = _kill_round(root, first, rng, sync_method, ("round", "after", "moment")[r % 3])
        except AssertionError as exc:
            raise AssertionError(f"seed {SEED}, {sync_method}, after {rounds}:\n{exc}") from exc
        rounds.append(facts)
    assert any(f["damaged"] for f in rounds), f"seed {SEED}: no power loss took anything: {rounds}"
    print(f"seed={SEED} {sync_method} rounds={rounds}")
