"""Worker process for the KIP-939 two-phase commit crash tests (tests/crash/test_two_phase_commit_crash.py).

Not a test module. Run as a script it opens a store, works through the public Producer API with
`transaction_two_phase_commit_enable=True`, and prints one flushed line per step, so the parent
knows how far it got before it was killed (a real SIGKILL of the process itself, as
txn_crash_worker.py does):

    DATA <n>                 the transaction's n records were sent and flushed (durable)
    PREPARED <state>         prepare_transaction() returned; <state> is str(PreparedTxnState)
    INIT                     init_transactions(keep_prepared_txn=`--keep`) returned
    KILL <point>             about to SIGKILL itself
    RESULT <word>            complete_transaction's outcome: done / nothing (InvalidTxnStateError)
    DONE                     the script ran to its end

Modes:

    write    init, begin, `--count` records to t-0, then prepare; `--kill` data|prepared|none
             kills it after the records (before prepare) or after prepare.
    recover  a new instance: init_transactions(keep_prepared_txn=`--keep`), then
             complete_transaction(`--state`) (the text the transaction manager kept; "" for none);
             `--kill after-init` dies between the two.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import txn_crash_worker  # noqa: E402  (the shared worker driver; this directory is on sys.path)

TOPIC = "t"


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _die(point: str) -> None:
    """A real kill -9 of this very process: no finally blocks, no close, no abort on close."""
    _say(f"KILL {point}")
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # not reached


def value(tag: str, i: int) -> bytes:
    return f"{tag}:{i}".encode()


def _producer(args):
    from txlog import Producer

    return Producer(args.store, transactional_id=args.tid, transaction_two_phase_commit_enable=True)


def run_write(args) -> None:
    p = _producer(args)
    p.init_transactions()
    p.begin_transaction()
    for i in range(args.count):
        p.send(TOPIC, value=value(args.tag, i), partition=0)
    p.flush()
    _say(f"DATA {args.count}")
    if args.kill == "data":
        _die("data")
    state = p.prepare_transaction()
    _say(f"PREPARED {state}")
    if args.kill == "prepared":
        _die("prepared")
    p.close()  # leaves the prepared transaction open: its manager completes it
    _say("DONE")


def run_recover(args) -> None:
    from txlog import PreparedTxnState
    from txlog.errors import InvalidTxnStateError

    p = _producer(args)
    p.init_transactions(keep_prepared_txn=args.keep)
    _say("INIT")
    if args.kill == "after-init":
        _die("after-init")
    try:
        p.complete_transaction(PreparedTxnState.parse(args.state))
        _say("RESULT done")
    except InvalidTxnStateError:
        _say("RESULT nothing")
    p.close()
    _say("DONE")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["write", "recover"])
    ap.add_argument("--store", required=True)
    ap.add_argument("--tid", default="2pc-0")
    ap.add_argument("--tag", default="v")
    ap.add_argument("--count", type=int, default=5)
    ap.add_argument("--kill", default="none", choices=["none", "data", "prepared", "after-init"])
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--state", default="")
    args = ap.parse_args(argv)
    {"write": run_write, "recover": run_recover}[args.mode](args)


class Worker(txn_crash_worker.Worker):
    """A two_pc_worker subprocess."""

    SCRIPT = os.path.abspath(__file__)


if __name__ == "__main__":
    main()
