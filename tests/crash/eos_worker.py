"""Worker processes for the end-to-end exactly-once test (docs/reliability-scenarios.md scenario 60).

Not a test module (no `test_` prefix). `tests/crash/test_exactly_once_e2e.py` starts these with
`sys.executable`, kills them with SIGKILL, stops them with SIGSTOP/SIGCONT and restarts them.
Every line a worker prints is flushed at once, so the parent (reading the worker's log
file) knows what happened before a kill.

Modes (first argument):

    copy   one exactly-once copier: a TransformLoop from `--input-topic` (only the partitions
           given with `--partition`) to `--output-topic`, identity transform, transactions of
           `--txn-size` records with the group's offsets committed in the same transaction,
           and a random abort with probability `--abort-p` decided through the loop's
           `abort_if` hook. With `--delay-ms` the hook first flushes the round's output to the
           log (the transaction is then Ongoing with data on disk, the LSO pinned at it) and
           sleeps, which models a slow processor and gives SIGKILL/SIGSTOP a wide window
           inside open transactions.

               INIT <producer id> <epoch>        after init_transactions (the instance is live)
               ROUND <first> <last> <commit|abort>  the hook decided this round's fate
               STATS <committed> <aborted> <in> <out>
               DONE                              caught up with the input; exit 0
               FENCED <message>                  ProducerFencedError; exit EXIT_FENCED
               UNKNOWN <message>                 TransactionOutcomeUnknownError; exit EXIT_UNKNOWN

    member a copier that is a member of the consumer group `--group` instead of assigning
           partitions: the group splits the input topic's partitions between the members
           (`--session-timeout-ms`, `--heartbeat-interval-ms`, `--instance-id` for static
           membership). Besides copy's lines it prints the rebalance listener's calls:

               ASSIGNED <p,p,...> / REVOKED <p,...> / LOST <p,...>

           With `--hold-file` the first round flushes its output, prints HOLD and waits until
           that file exists before it commits (the test pauses it there).

    read   the concurrent read_committed reader: a Consumer without a group, assigned every
           partition of `--topic`, polling in a loop over a read-only view of the store (it
           takes no lock). Each poll that returns records appends to `--history` (flushed):

               R <poll#> <partition> <offset> <value>   one record, in the order poll returned it
               L <poll#> <partition> <lso>              each partition's LSO read after that poll

           Once `--stop-file` exists it drains: it stops when every position has reached the
           log end (and the LSO equals it), prints DONE and exits 0; after `--drain-timeout`
           seconds it exits EXIT_DRAIN_TIMEOUT instead.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import random
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

EXIT_FENCED = 17
EXIT_UNKNOWN = 18
EXIT_DRAIN_TIMEOUT = 19


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


# ---- copy ------------------------------------------------------------------------------------------


def run_copy(args: argparse.Namespace) -> int:
    from txlog.tools.transform_loop import TransformLoop

    rng = random.Random(args.seed)
    holder: dict[str, TransformLoop] = {}

    def identity(records):
        return [(r.key, r.value) for r in records]

    def abort_if(records) -> bool:
        if args.delay_ms > 0:
            holder["loop"].producer.flush()  # the round's output goes to the log now: txn Ongoing, LSO pinned
            time.sleep(args.delay_ms / 1000)
        abort = rng.random() < args.abort_p
        _say(f"ROUND {records[0].offset} {records[-1].offset} {'abort' if abort else 'commit'}")
        return abort

    return _drive(
        lambda: TransformLoop(
            args.store,
            input_topic=args.input_topic,
            output_topic=args.output_topic,
            group_id=args.group,
            transactional_id=args.transactional_id,
            transform=identity,
            transaction_size=args.txn_size,
            partitions=args.partition,
            transaction_timeout_ms=args.txn_timeout_ms,
            abort_if=abort_if,
        ),
        holder,
        100,
    )


def _drive(make_loop, holder: dict, poll_timeout_ms: int) -> int:
    """Run a copier's loop until caught up, printing INIT / STATS / DONE, FENCED or UNKNOWN."""
    from txlog.errors import ProducerFencedError, TransactionOutcomeUnknownError

    loop = None
    try:
        loop = holder["loop"] = make_loop()
        _say(f"INIT {loop.producer.producer_id} {loop.producer.producer_epoch}")
        stats = loop.run(until_caught_up=True, poll_timeout_ms=poll_timeout_ms)
        _say(
            f"STATS {stats.transactions_committed} {stats.transactions_aborted} {stats.records_in} {stats.records_out}"
        )
        loop.close()
        _say("DONE")
        return 0
    except ProducerFencedError as exc:
        _say(f"FENCED {type(exc).__name__}: {exc}")
        _close_quietly(loop)
        return EXIT_FENCED
    except TransactionOutcomeUnknownError as exc:
        _say(f"UNKNOWN {type(exc).__name__}: {exc}")
        return EXIT_UNKNOWN


class _SayListener:
    """Prints every rebalance callback, so the test can follow the assignment."""

    @staticmethod
    def _names(partitions) -> str:
        return ",".join(str(tp.partition) for tp in sorted(partitions)) or "-"

    def on_partitions_assigned(self, partitions) -> None:
        _say(f"ASSIGNED {self._names(partitions)}")

    def on_partitions_revoked(self, partitions) -> None:
        _say(f"REVOKED {self._names(partitions)}")

    def on_partitions_lost(self, partitions) -> None:
        _say(f"LOST {self._names(partitions)}")


def run_member(args: argparse.Namespace) -> int:
    """`copy`, as a member of the group: the group decides which input partitions this reads."""
    from txlog.tools.transform_loop import TransformLoop

    rng = random.Random(args.seed)
    holder: dict[str, TransformLoop] = {}
    held = {"done": args.hold_file is None}

    def identity(records):
        return [(r.key, r.value) for r in records]

    def abort_if(records) -> bool:
        loop = holder["loop"]
        if args.delay_ms > 0 or not held["done"]:
            loop.producer.flush()  # the round's output reaches the log: the transaction is Ongoing
        if not held["done"]:
            held["done"] = True
            _say(f"HOLD {records[0].partition} {records[0].offset} {records[-1].offset}")
            while not os.path.exists(args.hold_file):
                time.sleep(0.01)
        if args.delay_ms > 0:
            time.sleep(args.delay_ms / 1000)
        abort = rng.random() < args.abort_p
        _say(f"ROUND {records[0].partition} {records[0].offset} {records[-1].offset} {'abort' if abort else 'commit'}")
        return abort

    member = {
        "session_timeout_ms": args.session_timeout_ms,
        "heartbeat_interval_ms": args.heartbeat_interval_ms,
        "group_instance_id": args.instance_id,
    }
    return _drive(
        lambda: TransformLoop(
            args.store,
            input_topic=args.input_topic,
            output_topic=args.output_topic,
            group_id=args.group,
            transactional_id=args.transactional_id,
            transform=identity,
            transaction_size=args.txn_size,
            transaction_timeout_ms=args.txn_timeout_ms,
            abort_if=abort_if,
            consumer_config=member,
            listener=_SayListener(),
        ),
        holder,
        50,
    )


def _close_quietly(loop) -> None:
    """A fenced instance releases its store; nothing of its transaction is committed by this."""
    if loop is None:
        return
    try:
        loop.close()
    except Exception as exc:  # noqa: BLE001 - the exit code already says what happened
        _say(f"CLOSE-FAILED {type(exc).__name__}: {exc}")


# ---- read ------------------------------------------------------------------------------------------


def run_read(args: argparse.Namespace) -> int:
    from storage.store import Store
    from txlog.clients.consumer import Consumer
    from txlog.topic_partition import TopicPartition

    store = Store.open(args.store, read_only=True)
    consumer = Consumer(
        store, group_id=None, isolation_level="read_committed", enable_auto_commit=False, auto_offset_reset="earliest"
    )
    tps = [TopicPartition(args.topic, p) for p in range(store.partition_count(args.topic))]
    consumer.assign(tps)
    polls = 0
    drain_deadline = None
    with open(args.history, "w", encoding="ascii") as out:
        _say("READY")
        while True:
            records = consumer.poll(timeout_ms=50, max_records=500)
            if records:
                polls += 1
                lsos = consumer.end_offsets(tps)  # read_committed: the LSO, read after the fetch
                lines = [f"R {polls} {r.partition} {r.offset} {r.value.decode('ascii')}" for r in records]
                lines += [f"L {polls} {tp.partition} {lsos[tp]}" for tp in tps]
                out.write("\n".join(lines) + "\n")
                out.flush()
                continue
            if not os.path.exists(args.stop_file):
                continue
            if drain_deadline is None:
                drain_deadline = time.monotonic() + args.drain_timeout
            logs = {tp: store.partition(*tp) for tp in tps}
            state = {
                tp.partition: (consumer.position(tp), logs[tp].last_stable_offset, logs[tp].log_end_offset)
                for tp in tps
            }
            if all(pos >= end and lso == end for pos, lso, end in state.values()):
                _say(f"DONE polls={polls} state={state}")
                return 0
            if time.monotonic() > drain_deadline:
                _say(f"DRAIN-TIMEOUT polls={polls} (partition: position, LSO, log end) {state}")
                return EXIT_DRAIN_TIMEOUT


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["copy", "member", "read"])
    ap.add_argument("--store", required=True)
    # copy
    ap.add_argument("--transactional-id")
    ap.add_argument("--input-topic", default="in")
    ap.add_argument("--output-topic", default="out")
    ap.add_argument("--partition", type=int, action="append", help="input partition (repeatable)")
    ap.add_argument("--group", default="g")
    ap.add_argument("--txn-size", type=int, default=100)
    ap.add_argument("--abort-p", type=float, default=1 / 3)
    ap.add_argument("--txn-timeout-ms", type=int, default=60_000)
    ap.add_argument("--delay-ms", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    # member
    ap.add_argument("--session-timeout-ms", type=int, default=45_000)
    ap.add_argument("--heartbeat-interval-ms", type=int, default=3_000)
    ap.add_argument("--instance-id")
    ap.add_argument("--hold-file")
    # read
    ap.add_argument("--topic", default="out")
    ap.add_argument("--history")
    ap.add_argument("--stop-file")
    ap.add_argument("--drain-timeout", type=float, default=30.0)
    args = ap.parse_args(argv)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks for stacks before killing a hung worker
    code = {"copy": run_copy, "member": run_member, "read": run_read}[args.mode](args)
    sys.stdout.flush()
    sys.exit(code)


if __name__ == "__main__":
    main()
