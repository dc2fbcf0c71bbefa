"""Worker process for the producer crash tests (tests/crash/test_producer_crash.py), plus the parent's helpers.

Not a test module (no `test_` prefix). Driven like the other crash workers (`crash_worker.Worker`,
through `txn_crash_worker.Worker` for its environment): one flushed stdout line per step, and
for the high-volume modes one line per record in a log file, written line-buffered so a
SIGKILL loses at most a torn last line (which the parent ignores).

    READY                 the producer / consumer is set up and about to work
    B <n> <commit|abort>  (mode txn) transaction n begins and will end so
    F <n>                 (mode txn) flush() returned inside transaction n (its records are durable)
    C <n> / A <n>         (mode txn) commit_transaction / abort_transaction of transaction n returned
    KILL <step>           (mode txn) a planned step fault is about to SIGKILL the process
    NOFIRE                (mode txn) the planned step fault never fired: the test is wrong
    FAIL <text>           (mode produce) a callback reported an error

Modes (first argument):

    produce  a Producer (`--acks`: all by default, idempotent; the default linger) sends numbered records
             round-robin over the partitions of `--topic` until killed; each acknowledged
             record's callback appends `<partition> <offset> <value hex>` to `--log`. With
             `--one-at-a-time` every send is a durable one-record `send(...).get()` instead (no
             callbacks, so the get() sends its batch on the main thread: the accumulator's
             direct path of a lone batch), and the main thread logs each record once get() returned;
             `--writer w` puts w in its values (several writers on one store), and `--quiet-log`
             records the status of every native quiet append (scenario 83); `--callback-every k`
             gives every k-th record a callback (its get() leaves the batch to the sender thread:
             the general path), and `--path-log` records the paths the get()s took: `d` for
             each direct path of a lone batch, `g` for each look of the general one (scenario 85).
             With `--wide` it sends one record to every partition, then flush(), over and over:
             each flush is one acks=all round over every partition, one sync round (scenario 86);
             `--kill-sync n` then SIGKILLs it just before the n-th fdatasync or syncfs after READY
             (`KILL <what>`). With `--many k` it calls produce_many of k records (small batches and
             requests: `--batch-size`, `--max-request-size`) to one partition at a time, a plain
             send() to the same partition every other call, and logs every record of the call once
             its get() returned; `--requests-log` records how many appends each sender round made
             to its partition with one fdatasync (`PartitionLog.append_requests`, one digit a
             round: scenario 90).
    read     a Consumer on a read-only view of the store (isolation `--isolation`) polls every
             partition of `--topic` and appends `<partition> <offset> <value hex>` per record.
    txn      a transactional Producer runs begin / k sends / commit in a loop and prints `C n`
             once commit_transaction(n) returned (a share `--abort-p` is aborted instead:
             `A n`); with `--kill-step` the transaction number `--kill-txn` meets a step fault
             (txlog.tools.fault_injection, KILL_BEFORE/KILL_AFTER) that SIGKILLs the process at that
             request, and ends as `--kill-end` says.

Record values: produce mode sends `crash_worker.expected_value(w, i, size)` (writer w, 0 unless
`--writer`, record number i,
bytes checked by `crash_worker.parse_value`); txn mode sends `b"<n>:<i>:<k>"`, record i of the
k records of transaction n.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from txlog.tools.fault_injection import StepFault

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import crash_worker  # noqa: E402  (the shared worker driver; this directory is on sys.path)
import txn_crash_worker  # noqa: E402

TOPIC = "t"
TXN_ID = "crash-tx"


# =====================================================================================================
# the worker side
# =====================================================================================================


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def txn_value(n: int, i: int, k: int) -> bytes:
    """Record i of the k records of transaction n."""
    return b"%d:%d:%d" % (n, i, k)


def parse_txn_value(value: bytes) -> tuple[int, int, int]:
    """(n, i, k) of a transaction record's value."""
    n, i, k = map(int, value.split(b":"))
    return n, i, k


def _record_line(partition: int, offset: int, value: bytes) -> str:
    return f"{partition} {offset} {value.hex()}\n"


def run_produce(args: argparse.Namespace) -> None:
    """Send numbered records until killed; every acknowledgement goes to the log file as it arrives.

    Callbacks run on the sender thread in record order, so the file lists each partition's
    acknowledgements in offset order; `buffering=1` makes every line one write(2), which a
    SIGKILL cannot undo.
    """
    from storage import Store
    from txlog.clients.producer import Producer

    if args.quiet_log:
        _log_quiet_statuses(args.quiet_log)
    if args.path_log:
        _log_get_paths(args.path_log)
    if args.requests_log:
        _log_request_rounds(args.requests_log)
    store = Store.open(args.store)
    partitions = store.partition_count(args.topic)
    for p in range(partitions if args.wide else 0):
        store.partition(args.topic, p)  # opened (its recovery synced) before READY: no such sync is counted
    # idempotent with acks=all; acks=1 cannot be (Kafka's rule). --wide sends each round by its flush()
    sizes = {"batch_size": args.batch_size, "max_request_size": args.max_request_size} if args.many else {}
    producer = Producer(store, acks=args.acks, **({"linger_ms": 10**9} if args.wide else {}), **sizes)
    rng = random.Random(args.seed)
    with open(args.log, "w", buffering=1, encoding="ascii") as out:

        def on_ack(value: bytes):
            def callback(metadata, error) -> None:
                if error is not None:
                    _say(f"FAIL {type(error).__name__}: {error}")
                    return
                out.write(_record_line(metadata.partition, metadata.offset, value))

            return callback

        if args.kill_sync:
            from parallel_sync_worker import kill_before_sync

            kill_before_sync(args.kill_sync)()
        _say("READY")
        i = 0
        while args.wide:  # every partition's next record, then one round over all of them
            for _ in range(partitions):
                value = crash_worker.expected_value(0, i, rng.randint(8, args.max_size))
                producer.send(args.topic, value, partition=i % partitions).add_callback(on_ack(value))
                i += 1
            producer.flush()
        if args.many:
            _produce_many_until_killed(producer, args, partitions, rng, out)
        while args.one_at_a_time:
            value = crash_worker.expected_value(args.writer, i, rng.randint(8, args.max_size))
            future = producer.send(args.topic, value, partition=i % partitions)
            if args.callback_every and i % args.callback_every == 0:
                future.add_callback(lambda metadata, error: None)
            metadata = future.get()
            out.write(_record_line(metadata.partition, metadata.offset, value))
            i += 1
        while True:
            for _ in range(rng.randint(1, args.burst)):
                value = crash_worker.expected_value(0, i, rng.randint(8, args.max_size))
                producer.send(args.topic, value, partition=i % partitions).add_callback(on_ack(value))
                i += 1
            if rng.random() < 0.5:
                time.sleep(rng.uniform(0, args.pause_ms / 1000))  # vary batch sizes: idle gaps, then bursts


def _produce_many_until_killed(producer, args: argparse.Namespace, partitions: int, rng: random.Random, out) -> None:
    """produce_many of `--many` records to one partition at a time (every record number n sent to
    partition n % partitions, in increasing order there), every other call after a plain send() to
    the same partition; each record is logged at its offset once the call's get() returned."""
    numbers = list(range(partitions))  # each partition's next record number
    calls = 0
    while True:
        p = rng.randrange(partitions)
        sent: list[bytes] = []
        if calls % 2:
            value = crash_worker.expected_value(0, numbers[p], rng.randint(8, args.max_size))
            numbers[p] += partitions
            single = producer.send(args.topic, value, partition=p)
            sent.append(value)
        values = []
        for _ in range(args.many):
            values.append(crash_worker.expected_value(0, numbers[p], rng.randint(8, args.max_size)))
            numbers[p] += partitions
        future = producer.produce_many(args.topic, values, partition=p)
        future.get()
        if calls % 2:
            out.write(_record_line(p, single.get().offset, sent[0]))
        at = iter(values)
        for partition, base, count, _ in future.batches():
            for k in range(count):
                out.write(_record_line(partition, base + k, next(at)))
        calls += 1


def _log_request_rounds(path: str) -> None:
    """Write how many requests each `PartitionLog.append_requests` call appended (one digit a call, 9
    for more) to `path` as it returns, so the parent knows rounds of several appends happened."""
    from storage.partition_log import PartitionLog

    out = open(path, "wb", buffering=0)  # noqa: SIM115 - open until the process dies
    real = PartitionLog.append_requests

    def logged(log, requests, **kwargs):
        answer = real(log, requests, **kwargs)
        out.write(b"%d" % min(len(answer[0]), 9))
        return answer

    PartitionLog.append_requests = logged  # type: ignore[method-assign]


def _log_quiet_statuses(path: str) -> None:
    """Write the status of every native quiet append (storage.partition_log `quiet_append`: 0 written,
    1 fell back) to `path`, one byte each as it returns, so the parent knows which path the appends took."""
    import storage.partition_log as partition_log

    out = open(path, "wb", buffering=0)  # noqa: SIM115 - open until the process dies
    real = partition_log.quiet_append

    def logged(*args):
        status, errno = real(*args)
        out.write(b"%d" % status)
        return status, errno

    partition_log.quiet_append = logged


def _log_get_paths(path: str) -> None:
    """Write the paths blocking get()s took to `path`, one byte each (`d`: a batch taken by the
    accumulator's direct path of a lone batch, `g`: a look of the general path, which a get() whose
    batch the sender must send makes more than once), so the parent knows both were exercised."""
    from txlog.clients.record_accumulator import RecordAccumulator

    out = open(path, "wb", buffering=0)  # noqa: SIM115 - open until the process dies
    take_lone, take_for_caller = RecordAccumulator._take_lone, RecordAccumulator._take_for_caller

    def logged_lone(accumulator, tp, result):
        batch = take_lone(accumulator, tp, result)
        if batch is not None:
            out.write(b"d")
        return batch

    def logged_general(accumulator, tp):
        out.write(b"g")
        return take_for_caller(accumulator, tp)

    RecordAccumulator._take_lone = logged_lone  # type: ignore[method-assign]
    RecordAccumulator._take_for_caller = logged_general  # type: ignore[method-assign]


def run_read(args: argparse.Namespace) -> None:
    """Poll every partition from the start and log each record the consumer returned."""
    from storage import Store
    from txlog.clients.consumer import Consumer
    from txlog.topic_partition import TopicPartition

    store = Store.open(args.store, read_only=True)  # a reader never repairs (or syncs for) the writer
    consumer = Consumer(
        store, group_id=None, isolation_level=args.isolation, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    consumer.assign([TopicPartition(args.topic, p) for p in range(store.partition_count(args.topic))])
    with open(args.log, "w", buffering=1, encoding="ascii") as out:
        _say("READY")
        while True:
            records = consumer.poll(timeout_ms=20, max_records=200)
            for r in records:
                out.write(_record_line(r.partition, r.offset, r.value))


def _kill_plan(args: argparse.Namespace) -> StepFault | None:
    """The step fault of `--kill-step`/`--kill-action`/`--kill-n`, or None."""
    from txlog.tools.fault_injection import Action, Step, StepFault

    if not args.kill_step:
        return None
    return StepFault(Step[args.kill_step], Action[args.kill_action], args.kill_n)


def run_txn(args: argparse.Namespace) -> None:
    """begin / k sends / commit in a loop until killed; `C n` once commit n returned.

    The transaction under a step fault sends to every partition, so that it has one
    WriteTxnMarkers call per partition and `--kill-n` up to the partition count always fires;
    armed for a commit it never flushes, so only the coordinator's own data sync makes the data
    durable before PREPARE_COMMIT.
    """
    from storage import Store
    from txlog.clients.producer import Producer
    from txlog.tools.fault_injection import FaultInjectingTransport, FaultPlan
    from txlog.transport import Transport

    store = Store.open(args.store)
    partitions = store.partition_count(args.topic)
    plan = FaultPlan()
    fault = _kill_plan(args)

    def die(step: StepFault) -> None:
        _say(f"KILL {step.step.name}-{step.action.name}-{step.occurrence}")
        os.kill(os.getpid(), signal.SIGKILL)

    transport = FaultInjectingTransport(Transport(store), plan, kill=die)
    producer = Producer(store, transactional_id=args.tid, transport=transport)
    producer.init_transactions()
    rng = random.Random(args.seed)
    _say("READY")
    n = 0
    while True:
        armed = fault is not None and n == args.kill_txn
        if armed:
            plan.arm(fault)  # counted from here: this transaction's requests only
        k = rng.randint(partitions if armed else 1, args.max_records)
        commit = args.kill_end == "commit" if armed else rng.random() >= args.abort_p
        _say(f"B {n} {'commit' if commit else 'abort'}")
        producer.begin_transaction()
        for i in range(k):
            p = i if armed and i < partitions else rng.randrange(partitions)
            producer.send(args.topic, txn_value(n, i, k), partition=p)
        # An abort drops what the sender has not taken yet (nothing registered: no EndTxn at all),
        # so the armed abort flushes first; otherwise flush (which syncs the data) half the time.
        if (armed and not commit) or (not armed and rng.random() < 0.5):
            producer.flush()
            _say(f"F {n}")
        if commit:
            producer.commit_transaction()
            _say(f"C {n}")
        else:
            producer.abort_transaction()
            _say(f"A {n}")
        if armed:
            _say("NOFIRE")
            sys.exit(5)
        n += 1


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["produce", "read", "txn"])
    ap.add_argument("--store", required=True)
    ap.add_argument("--topic", default=TOPIC)
    ap.add_argument("--log", default="", help="produce/read: the per-record log file")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--burst", type=int, default=50, help="produce: up to this many sends between pauses")
    ap.add_argument("--pause-ms", type=float, default=2.0)
    ap.add_argument("--max-size", type=int, default=64, help="produce: largest value")
    ap.add_argument("--acks", default="all", choices=["all", "1"], help="produce: the producer's acks")
    ap.add_argument("--one-at-a-time", action="store_true", help="produce: send(...).get() each record")
    ap.add_argument("--writer", type=int, default=0, help="produce (one at a time): the number in its values")
    ap.add_argument("--wide", action="store_true", help="produce: one record a partition, then flush()")
    ap.add_argument("--kill-sync", type=int, default=0, help="produce: die before this fdatasync/syncfs (1-based)")
    ap.add_argument("--quiet-log", default="", help="produce: where each native quiet append's status goes")
    ap.add_argument("--callback-every", type=int, default=0, help="produce (one at a time): a callback on every k-th")
    ap.add_argument("--path-log", default="", help="produce: which path each blocking get() took (d or g)")
    ap.add_argument("--many", type=int, default=0, help="produce: produce_many of this many records a call")
    ap.add_argument("--batch-size", type=int, default=16384, help="produce (--many): the producer's batch_size")
    ap.add_argument("--max-request-size", type=int, default=1024 * 1024, help="produce (--many): max_request_size")
    ap.add_argument("--requests-log", default="", help="produce: appends per append_requests call (digits)")
    ap.add_argument("--isolation", default="read_uncommitted", choices=["read_uncommitted", "read_committed"])
    ap.add_argument("--tid", default=TXN_ID)
    ap.add_argument("--max-records", type=int, default=8, help="txn: most records per transaction")
    ap.add_argument("--kill-step", default="", help="txn: a txlog.tools.fault_injection.Step name, e.g. END_TXN")
    ap.add_argument("--kill-action", default="KILL_BEFORE", choices=["KILL_BEFORE", "KILL_AFTER"])
    ap.add_argument("--kill-n", type=int, default=1, help="txn: the call of the step (1-based) that kills")
    ap.add_argument("--kill-txn", type=int, default=0, help="txn: the transaction number that meets the fault")
    ap.add_argument("--kill-end", default="commit", choices=["commit", "abort"], help="txn: how that one ends")
    ap.add_argument("--abort-p", type=float, default=0.0, help="txn: share of transactions aborted")
    args = ap.parse_args(argv)
    {"produce": run_produce, "read": run_read, "txn": run_txn}[args.mode](args)


# =====================================================================================================
# the parent side
# =====================================================================================================

WORKER = os.path.abspath(__file__)


class Worker(txn_crash_worker.Worker):
    """A producer_crash_worker subprocess (the shared driver, with the transaction workers' environment)."""

    SCRIPT = WORKER


def read_record_log(path: str) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every whole line of a worker's record log (a torn last line is dropped)."""
    with open(path, encoding="ascii") as f:
        text = f.read()
    out = []
    for line in text.split("\n")[:-1]:  # the text after the last newline was torn by the kill
        p, off, value = line.split(" ")
        out.append((int(p), int(off), bytes.fromhex(value)))
    return out


def count_lines(path: str) -> int:
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


if __name__ == "__main__":
    main()
