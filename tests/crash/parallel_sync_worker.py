"""Worker process for tests/crash/test_parallel_sync_crash.py: transactions over many partitions, for ever.

Not a test module (no `test_` prefix). Run as a script it opens a store, initialises the
transactional id `--tid` and runs transactions over every partition of `--topic` (one record
each, explicit partition) until it is killed, printing one flushed line per step so the parent
knows what was acknowledged:

    IDS <pid> <epoch>    after init_transactions
    BEGIN <i>            transaction i's records are sent; its end (EndTxn) comes next
    COMMITTED <i>        commit_transaction() returned: every record of i must stay RC-visible
    ABORTED <i>          abort_transaction() returned: no record of i may ever be RC-visible
    KILL <what>          (with --kill-txn) about to SIGKILL itself: `fdatasync <n> <k> <file>`
                         just before the n-th sync of transaction --kill-txn's end, the
                         k-th of them being of a `__transaction_state` file (k = 0, 1, ...),
                         or `after-end` once that end returned (n was past its last sync); a
                         syncfs, which syncs a whole round at once, is `syncfs <n> <k> <file>`

Every fourth transaction is aborted, flushed first so that its records reach the log and the
abort runs the coordinator's marker path (the `.txnindex` entry before each marker) under the
kill; an abort with nothing sent yet drops the batches and needs no EndTxn at all. The end of a
transaction over many partitions is where the coordinator's parallel syncs happen (the data's
before PREPARE_COMMIT, the markers' after it).

`--kill-txn i --kill-sync n` makes the kill exact: the fdatasyncs of transaction i's end are
counted from its BEGIN line (both ends: the registration in `__transaction_state`, one per data
partition or one syncfs, the PREPARE_* record, one per marker or one syncfs; `phases` in the test names them) and the
process SIGKILLs itself just before the n-th, so the parent can aim at each step of the end;
its KILL line says which step that was (how many `__transaction_state` syncs came before).

Mode `create` makes topics instead, one after another (scenario 87; `create` below).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import txn_crash_worker  # noqa: E402  (this directory is on sys.path)


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def value_of(i: int, partition: int) -> bytes:
    return f"{i}:{partition}".encode()


def parse_value(value: bytes) -> tuple[int, int]:
    i, partition = value.decode().split(":")
    return int(i), int(partition)


def run(args: argparse.Namespace) -> None:
    from storage import Store
    from txlog.clients.producer import Producer

    store = Store.open(args.store)
    partitions = store.partition_count(args.topic)
    for p in range(partitions):
        # opened (and recovered: a dead writer's unsynced tail is synced at the first writable open)
        # now, so that no such fdatasync falls among those of an end that --kill-sync counts
        store.partition(args.topic, p)
    producer = Producer(store, transactional_id=args.tid, linger_ms=10**9)
    producer.init_transactions()
    _say(f"IDS {producer.producer_id} {producer.producer_epoch}")
    arm = kill_before_sync(args.kill_sync)
    i = args.first
    while True:
        producer.begin_transaction()
        for p in range(partitions):
            producer.send(args.topic, value_of(i, p), partition=p)
        _say(f"BEGIN {i}")
        if i == args.kill_txn:
            arm()
        if i % 4 == 3:
            producer.flush()
            producer.abort_transaction()
            _say(f"ABORTED {i}")
        else:
            producer.commit_transaction()
            _say(f"COMMITTED {i}")
        if i == args.kill_txn:
            txn_crash_worker._die("after-end")
        i += 1


def kill_before_sync(n: int, *, fsync: bool = False) -> Callable[[], None]:
    """Wrap os.fdatasync and storage.durable.syncfs (storage.durable looks both up per call), and os.fsync
    too with `fsync`, to SIGKILL this process just before the n-th call of any of them made once the
    returned `arm` was called; the syncs may run on several threads at once, so the count is taken
    under a lock."""
    from storage import durable

    lock = threading.Lock()
    state = {"armed": False, "count": 0, "coordinator": 0}

    def counted(name: str, real: Callable[[int], None]) -> Callable[[int], None]:
        def sync(fd: int) -> None:
            if state["armed"]:
                path = txn_crash_worker._fd_path(fd)
                with lock:
                    state["count"] += 1
                    count, before = state["count"], state["coordinator"]
                    state["coordinator"] += f"/{txn_crash_worker.TXN_TOPIC}-" in path
                if count == n:
                    txn_crash_worker._die(f"{name} {count} {before} {path}")
            real(fd)

        return sync

    def arm() -> None:
        state["armed"] = True

    os.fdatasync = counted("fdatasync", os.fdatasync)
    durable.syncfs = counted("syncfs", durable.syncfs)
    if fsync:
        os.fsync = counted("fsync", os.fsync)
    return arm


def create(args: argparse.Namespace) -> None:
    """Mode `create` (scenario 87): topics `c<i>` of `--partitions` partitions made one after another from
    `--first`, `CREATED <i>` once each create_topic returned; with `--kill-txn k --kill-sync n` the
    process dies just before the n-th fsync, fdatasync or syncfs of topic k's creation."""
    from storage import Store

    store = Store.open(args.store)
    arm = kill_before_sync(args.kill_sync, fsync=True)
    _say("IDS 0 0")  # ready, as `run` says once its producer is
    i = args.first
    while True:
        if i == args.kill_txn:
            arm()
        store.create_topic(f"c{i}", args.partitions)
        _say(f"CREATED {i}")
        if i == args.kill_txn:
            txn_crash_worker._die("after-end")
        i += 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["run", "create"])
    ap.add_argument("--store", required=True)
    ap.add_argument("--topic", default="wide")
    ap.add_argument("--tid", default="wide-txn")
    ap.add_argument("--first", type=int, default=0, help="number of the first transaction")
    ap.add_argument("--kill-txn", type=int, default=-1, help="the transaction whose end meets the kill")
    ap.add_argument("--kill-sync", type=int, default=0, help="die before this fdatasync of that end (1-based)")
    ap.add_argument("--partitions", type=int, default=20, help="create: partitions of each topic")
    args = ap.parse_args()
    (create if args.mode == "create" else run)(args)


class Worker(txn_crash_worker.Worker):
    """A parallel_sync_worker subprocess."""

    SCRIPT = os.path.abspath(__file__)


if __name__ == "__main__":
    main()
