"""Worker process for tests/crash/test_parallel_sync_crash.py: transactions over many partitions, for ever.

Not a test module (no `test_` prefix). Run as a script it opens a store, initialises the
transactional id `--tid` and runs transactions over every partition of `--topic` (one record
each, explicit partition) until it is killed, printing one flushed line per step so the parent
knows what was acknowledged:

    IDS <pid> <epoch>    after init_transactions
    BEGIN <i>            transaction i's records are sent; its end (EndTxn) comes next
    COMMITTED <i>        commit_transaction() returned: every record of i must stay RC-visible
    ABORTED <i>          abort_transaction() returned: no record of i may ever be RC-visible

Every fourth transaction is aborted, so both ends' marker paths (the abort's `.txnindex` entry
before its marker) run under the kill. The end of a transaction over many partitions is where
the coordinator's parallel syncs happen (the data's before PREPARE_COMMIT, the markers' after it).
"""

from __future__ import annotations

import argparse
import os
import sys

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
    producer = Producer(store, transactional_id=args.tid, linger_ms=10**9)
    producer.init_transactions()
    _say(f"IDS {producer.producer_id} {producer.producer_epoch}")
    i = args.first
    while True:
        producer.begin_transaction()
        for p in range(partitions):
            producer.send(args.topic, value_of(i, p), partition=p)
        _say(f"BEGIN {i}")
        if i % 4 == 3:
            producer.abort_transaction()
            _say(f"ABORTED {i}")
        else:
            producer.commit_transaction()
            _say(f"COMMITTED {i}")
        i += 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["run"])
    ap.add_argument("--store", required=True)
    ap.add_argument("--topic", default="wide")
    ap.add_argument("--tid", default="wide-txn")
    ap.add_argument("--first", type=int, default=0, help="number of the first transaction")
    run(ap.parse_args())


class Worker(txn_crash_worker.Worker):
    """A parallel_sync_worker subprocess."""

    SCRIPT = os.path.abspath(__file__)


if __name__ == "__main__":
    main()
