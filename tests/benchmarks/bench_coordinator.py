"""On-demand benchmark of opening the transaction coordinator: a long history against a short one.

Run: python tests/benchmarks/bench_coordinator.py [--long N] [--short N] [--ids K] [--tail N]
         [--real-history] [--reps R] [--profile]

Two stores are prepared, each holding the `__transaction_state` history of K transactional
ids (default 4, which land on 4 different coordinator partitions) that completed N
transactions in turn: `--long` (default 100,000) and `--short` (default 2,000). For each
transaction the coordinator log holds what TransactionCoordinator writes: Ongoing
(AddPartitionsToTxn), PrepareCommit and CompleteCommit, one record per batch.

The bulk of each history is written straight to the coordinator partitions - the same
records, encoded by txlog.schemas.transaction_log and built by build_batch exactly as
`TransactionCoordinator._write` does, with the same epoch bumps - in appends of 32 batches
and without fsync (setup only; running 100,000 transactions through the coordinator takes
minutes; `--real-history` does it anyway). The COMMIT markers those transactions wrote to their data partition are
left out: opening the coordinator never reads data partitions. Then every id is
re-initialised and `--tail` (default 200) transactions run through the real coordinator,
with markers: its first operation on each partition replays the bulk and writes the
state snapshot, as a coordinator that had run the whole history would have. Both
stores therefore end the same way - a snapshot, then the same tail - and differ only in
the length of the history before it. (`--short` should be at least ~1,500 x ids / 1,000
transactions, so that its partitions are past their first snapshot too: a history below
SNAPSHOT_EVERY batches per partition is simply replayed whole.)

Timed, on a fresh Store object each time (page cache warm):
  open + describe        Store.open + TransactionCoordinator + describe() of one id
                         (loads that id's partition: snapshot + tail)
  open + list            ... + list_transactions() (every coordinator partition)
  open + init            ... + init_producer_id() of one id: the first operation of a
                         restarted producer (it writes one record each repetition)
Target: flat - long/short ratio near 1.0. The script prints the batches each open
replays after the snapshot and the coordinator log size.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchutil import Sample, fsync_skipped, median_after_cold, scratch_dir, spread, timed

from storage import Store
from storage.records import build_batch
from storage.topic_name import TRANSACTION_STATE_TOPIC
from txlog.coordinator.transaction_coordinator import EXHAUSTED_EPOCH, SNAPSHOT_NAME, TransactionCoordinator
from txlog.requests import DEFAULT_TRANSACTION_TIMEOUT_MS
from txlog.schemas.transaction_log import TxnLogValue, TxnState, encode_key, encode_value

TOPIC = "t"
APPEND_BATCHES = 32  # ~4 KB per append: about one index entry per append, as the coordinator's own
FLAT_TOLERANCE = 1.25  # "near 1.0": the verdict allows a quarter of noise either way


def ids_of(count: int) -> list[str]:
    return [f"app-{i}" for i in range(count)]


# ---- writing a history ----------------------------------------------------------------------------------


def synthesize(store: Store, coordinator: TransactionCoordinator, ids: list[str], transactions: int) -> None:
    """Append the coordinator records of `transactions` committed transactions, round-robin over ids."""
    now = int(time.time() * 1000)
    pending: dict[int, list[bytes]] = {}
    logs = {}
    state: dict[str, TxnLogValue] = {}
    for txn_id in ids:
        index = coordinator.partition_for(txn_id)
        logs[index] = store.partition(TRANSACTION_STATE_TOPIC, index)
        state[txn_id] = TxnLogValue(
            producer_id=store.allocate_producer_id(),
            producer_epoch=0,
            timeout_ms=DEFAULT_TRANSACTION_TIMEOUT_MS,
            state=TxnState.EMPTY,
            partitions=(),
            last_update_ms=now,
            start_ms=-1,
        )
        _queue(pending, logs, index, txn_id, state[txn_id], now)
    per_id = -(-transactions // len(ids))
    assert per_id < EXHAUSTED_EPOCH, "more transactions per id than epochs: use more --ids"
    for i in range(transactions):
        txn_id = ids[i % len(ids)]
        index = coordinator.partition_for(txn_id)
        value = state[txn_id]
        ongoing = replace(value, state=TxnState.ONGOING, partitions=((TOPIC, 0),), last_update_ms=now, start_ms=now)
        prepared = replace(
            ongoing,
            producer_epoch=value.producer_epoch + 1,
            next_producer_id=-1,
            state=TxnState.PREPARE_COMMIT,
            last_update_ms=now,
        )
        done = replace(prepared, state=TxnState.COMPLETE_COMMIT, partitions=(), last_update_ms=now)
        for step in (ongoing, prepared, done):
            _queue(pending, logs, index, txn_id, step, now)
        state[txn_id] = done
    for index in list(pending):
        _flush(pending, logs, index)


def _queue(pending: dict[int, list[bytes]], logs: dict, index: int, txn_id: str, value: TxnLogValue, now: int) -> None:
    batches = pending.setdefault(index, [])
    batches.append(build_batch([(encode_key(txn_id), encode_value(value), None, now)]))
    if len(batches) >= APPEND_BATCHES:
        _flush(pending, logs, index)


def _flush(pending: dict[int, list[bytes]], logs: dict, index: int) -> None:
    batches = pending.pop(index, [])
    if batches:
        logs[index].append(b"".join(batches))


def run_transactions(coordinator: TransactionCoordinator, ids: list[str], transactions: int) -> None:
    """Real transactions through the coordinator: re-init every id, then add/commit round-robin."""
    ids_now = {txn_id: coordinator.init_producer_id(txn_id) for txn_id in ids}
    for i in range(transactions):
        txn_id = ids[i % len(ids)]
        pe = ids_now[txn_id]
        coordinator.add_partitions(txn_id, pe.producer_id, pe.epoch, [(TOPIC, 0)])
        ids_now[txn_id] = coordinator.end_transaction(txn_id, pe.producer_id, pe.epoch, commit=True)


def write_history(root: str, ids: list[str], transactions: int, tail: int, real: bool) -> float:
    """Build one store; returns the seconds it took."""
    start = time.perf_counter()
    store = Store.open(root)
    try:
        store.create_topic(TOPIC, 1)
        coordinator = TransactionCoordinator(store)
        if real:
            run_transactions(coordinator, ids, transactions)
        else:
            coordinator.partition_for(ids[0])  # creates __transaction_state
            with fsync_skipped():
                synthesize(store, coordinator, ids, transactions)
        run_transactions(TransactionCoordinator(store), ids, tail)
    finally:
        store.close()
    return time.perf_counter() - start


# ---- what an open costs ------------------------------------------------------------------------------


def open_describe(root: str, ids: list[str]) -> None:
    store = Store.open(root)
    try:
        description = TransactionCoordinator(store).describe(ids[0])
        assert description is not None and description.state.state in (TxnState.COMPLETE_COMMIT, TxnState.EMPTY)
    finally:
        store.close()


def open_list(root: str, ids: list[str]) -> None:
    store = Store.open(root)
    try:
        assert len(TransactionCoordinator(store).list_transactions()) == len(ids)
    finally:
        store.close()


def open_init(root: str, ids: list[str]) -> None:
    store = Store.open(root)
    try:
        TransactionCoordinator(store).init_producer_id(ids[0])
    finally:
        store.close()


def replay_tail(root: str, ids: list[str]) -> tuple[int, int, int]:
    """(batches after the snapshot, snapshot offset, log end) of ids[0]'s coordinator partition."""
    store = Store.open(root, read_only=True)
    try:
        index = TransactionCoordinator(store).partition_for(ids[0])
        log = store.partition(TRANSACTION_STATE_TOPIC, index)
        try:
            with open(os.path.join(log.directory, f"{SNAPSHOT_NAME}.json"), "rb") as f:
                offset = json.loads(f.read())["offset"]
        except OSError:
            offset = log.log_start_offset
        end = log.log_end_offset
        return end - offset, offset, end
    finally:
        store.close()


def coordinator_bytes(root: str) -> int:
    total = 0
    for dirpath, _, files in os.walk(root):
        if os.path.basename(dirpath).startswith(TRANSACTION_STATE_TOPIC):
            total += sum(os.path.getsize(os.path.join(dirpath, f)) for f in files if f.endswith(".log"))
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--long", type=int, default=100_000, help="transactions in the long history (default 100000)")
    parser.add_argument("--short", type=int, default=2_000, help="transactions in the short history (default 2000)")
    parser.add_argument("--ids", type=int, default=4, help="transactional ids (default 4)")
    parser.add_argument(
        "--tail", type=int, default=200, help="transactions run through the coordinator after the bulk (default 200)"
    )
    parser.add_argument(
        "--real-history",
        action="store_true",
        help="run every transaction through the coordinator (slow: minutes for 100000)",
    )
    parser.add_argument("--reps", type=int, default=9, help="timed repetitions after the cold one (default 9)")
    parser.add_argument("--dir", help="parent of the scratch directory (default <repo>/.bench-tmp)")
    parser.add_argument("--profile", action="store_true", help="also cProfile one 'open + describe' of each store")
    args = parser.parse_args()
    ids = ids_of(args.ids)

    with scratch_dir(args.dir, "bench-coordinator-") as workdir:
        roots = {"short": os.path.join(workdir, "short"), "long": os.path.join(workdir, "long")}
        sizes = {"short": args.short, "long": args.long}
        build_s = {
            name: write_history(root, ids, sizes[name], args.tail, args.real_history) for name, root in roots.items()
        }
        ops: dict[str, Callable[[str, list[str]], None]] = {
            "open + describe": open_describe,
            "open + list": open_list,
            "open + init": open_init,
        }
        samples: dict[tuple[str, str], list[Sample]] = {(op, name): [] for op in ops for name in roots}
        for _ in range(args.reps + 1):
            for op, fn in ops.items():
                for name, root in roots.items():
                    with timed() as sample:
                        fn(root, ids)
                    samples[op, name].append(sample[0])

        how = "all through the coordinator" if args.real_history else "bulk written directly, then the tail"
        print(
            f"{args.ids} transactional ids; histories of {args.short:,} and {args.long:,} committed transactions "
            f"+ {args.tail} through the coordinator ({how}); median of {args.reps} opens after a cold one"
        )
        for name, root in roots.items():
            tail, offset, end = replay_tail(root, ids)
            print(
                f"  {name:<5} {sizes[name]:>8,} txns: coordinator logs {coordinator_bytes(root) / 2**20:6.1f} MiB, "
                f"partition of '{ids[0]}' ends at offset {end:,}, snapshot at {offset:,}: an open replays "
                f"{tail} batches; built in {build_s[name]:.1f} s"
            )
        print(
            f"{'operation':<18}{'short ms':>10}{'long ms':>10}{'long/short':>12}{'target':>9}        "
            f"{'CPU ms short':>13}{'long':>7}{'ratio':>7}   wall spread (short | long)"
        )
        for op in ops:
            short, long_ = median_after_cold(samples[op, "short"]), median_after_cold(samples[op, "long"])
            cpu_s, cpu_l = median_after_cold(samples[op, "short"], "cpu"), median_after_cold(samples[op, "long"], "cpu")
            ratio = long_ / short
            ok = "ok" if ratio <= FLAT_TOLERANCE else "MISSED"
            s_lo, s_hi = spread(samples[op, "short"])
            l_lo, l_hi = spread(samples[op, "long"])
            print(
                f"{op:<18}{short * 1e3:>10.2f}{long_ * 1e3:>10.2f}{ratio:>12.2f}{'~1.0':>9} {ok:<7}"
                f"{cpu_s * 1e3:>13.2f}{cpu_l * 1e3:>7.2f}{cpu_l / cpu_s:>7.2f}   "
                f"{s_lo * 1e3:.1f}..{s_hi * 1e3:.1f} | {l_lo * 1e3:.1f}..{l_hi * 1e3:.1f} ms"
            )
        print(
            f"verdict: ok when long/short <= {FLAT_TOLERANCE} (open cost does not grow with the history); "
            f"CPU = this process's CPU time, which disk and scheduler waits do not inflate"
        )

        if args.profile:
            for name, root in roots.items():
                profiler = cProfile.Profile()
                profiler.runcall(open_describe, root, ids)
                print(f"\ncProfile of one 'open + describe' of the {name} history, top 15 by cumulative time:")
                pstats.Stats(profiler, stream=sys.stdout).strip_dirs().sort_stats("cumtime").print_stats(15)


if __name__ == "__main__":
    main()
