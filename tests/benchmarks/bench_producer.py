"""On-demand benchmark of the Producer: send + flush against kafka-python's batch encoder, and transactions.

Run: python tests/benchmarks/bench_producer.py [--records N] [--sizes 16384:5,1048576:100]
         [--txn-sizes 1,10,100,1000,10000] [--txn-records N] [--max-txns N] [--commit-ms MS]
         [--lines N] [--reps R] [--profile] [--partitions P] [--partitioner murmur2|murmur3]
         [--distinct-keys K] [--value-bytes B] [--durable-sends N] [--durable-block B] [--skip-send] [--skip-txn]
         [--skip-cli] [--skip-durable] [--cold-sleep-us US] [--cold-dir DIR]

Part 1 - durable send throughput. `Producer.send` of N records (10-byte key, 100-byte
value, one partition) followed by one `flush`, timed from the first send until flush
returns. The producer is idempotent (the default) and every batch it sends is one durable
append, i.e. one fdatasync. The baseline, measured in the same run, is kafka-python's
`DefaultRecordBatchBuilder` (magic 2, the same producer id / epoch / sequence header
fields) merely *encoding* the same records into batches of the same `batch_size`: no
partitioner, no futures, no I/O, and timestamps computed before the timer starts. Each
`--sizes` entry is `batch_size:linger_ms`; 16384:5 is the producer's default, 1048576:100
is a throughput setting (a 1 MiB batch needs a linger long enough to fill it, as in
Kafka). The sender thread appends all the batches of a partition that are due in one
call (group commit: up to 5 batches, one fdatasync). Target: txlog >= 2x kafka-python's
encode-only rate.

With `--partitions P` (P > 1) part 1 writes to a P-partition topic, so every keyed send is
hashed (a one-partition topic skips the partitioner): this is the cost of the key hash
(`--partitioner`, default Kafka's murmur2 in pure Python, cached per key; murmur3 is mmh3 in
C). Keys are all distinct by default (the cache never hits: the worst case);
`--distinct-keys K` reuses K keys (the cache's usual case). The baseline still encodes one
stream of batches, so compare the txlog columns of runs with different flags, not the ratio.

Part 2 - transactions. A transactional producer runs begin / K sends / commit for K in
`--txn-sizes`, against an idempotent non-transactional producer sending the same records in
the same run. A one-partition transaction costs 4 fsyncs whatever its size: the
registration (AddPartitionsToTxn), one fdatasync of its data at commit, PREPARE_COMMIT and
the COMMIT marker (COMPLETE_COMMIT needs none). The fsyncs per transaction are printed, and the
CPU per transaction (`process_time`: every thread, the caller's and the sender's; with `--dir` on
a tmpfs such as /dev/shm the disk is out and this is what a transaction costs).
The target is part 2b's (below).

Part 1 also times `send(..., partition=0)` (an explicit partition, which must take the same
fast path as a plain send: target >= 2x) and `Producer.produce_many` of the same records (keys
and values as two columns, one call, then flush): whole batches encoded natively. Target: >= 5x
(>= 3x with `--value-bytes 1024`, where the batch buffers' page faults used to dominate);
its "warm" row times a producer's second call, when its buffer pool holds the buffers of the
first (a long-running producer's case; the plain row's producer is new, its pool empty); its
"encode" row times the encoder alone (nothing written), the like of the encode-only baseline;
its "disk" row times the disk alone under the same bytes, no txlog code (`disk_floor`): the
ceiling the produce_many rows reach at best on the disk of the run.
`--value-bytes` (default 100) sets the value size of every part.

Part 4 - durable one-record sends. `--durable-sends` (default 300) times `send(...).get()` of
one record each with acks=all (one fdatasync per send, nothing to batch with), against a raw
loop of `os.write` + `os.fdatasync` of the same bytes to a file in the same directory, run
interleaved in the same process: the loops take turns `--durable-block` (default 25) sends at a
time, so a swing of the disk's latency falls on every row alike. Printed: commits/s, the ratio (target >= 0.9x), CPU and
context switches per commit (`getrusage`, every thread of the process: a hand-off to the
sender thread and back costs two). Informational rows between them say where txlog's
distance from the raw row goes, layer by layer: the raw loop with every system call a txlog append
makes (flock, a stat of the directory, an fstat of the log, write, fdatasync, HW pwrite, unlock)
in straight-line Python; txlog's native append itself (`storage._native.quiet_append`: the same
calls made natively, under the flock, with no other txlog code: the floor of any txlog append
under the cross-process protocol of docs/DESIGN.md §3); and `PartitionLog.append` of one-record
batches from the producer's encoder (the storage layer alone: no producer, accumulator, future
or sender), and the same on a partition whose active segment holds an aborted transaction (its
`.txnindex` is the quiet append's third look; before round ten such a partition took the Python
path until its next roll). Part 4 runs with the fsync meter's wrappers off
(`FsyncMeter.suspended`): it prints no fsync column, and a replaced `os.fdatasync` would keep
txlog's one-batch append off its native path.

Part 4c (with `--cold-sleep-us US`) - why Part 4's txlog rows cost more CPU than the same code
does back to back. Part 4's txlog layers (the native append, `PartitionLog.append`, `send(...).get()`)
run on `--cold-dir` (default /dev/shm, a tmpfs: its fdatasync returns at once), each loop once back
to back and once with US microseconds of `time.sleep` after every send, standing in for a disk's
fdatasync; the sleeps' own CPU, timed alone in the same turn, is taken out. Printed: CPU µs per send
both ways and their ratio. Informational, no target: it says how much a microsecond of Python saved
back to back is worth on a disk.

Part 2b sends for `--commit-seconds` (default 3) with a transactional producer committing
every `--commit-ms` (default 100 ms, Kafka Streams' commit interval under exactly-once)
against an idempotent producer running the same loop without commits. Target: >= 0.95
(Kafka's own figure is -3 %).

Part 3 - `txlog produce`. `--lines` (default 200,000) lines of `key:value` in a file,
written by the real CLI in a subprocess (`txlog produce -t T -K :` < file) against a plain
Python loop in a subprocess that reads the same file and splits each line at the separator
(both include interpreter start-up; the CLI's imports are the larger share of small runs).

Every repetition starts from a fresh store, variants are interleaved inside a
repetition, the first (cold) repetition is dropped and the median of the rest is shown.
Besides wall-clock rates the script prints the time spent inside fsync/fdatasync (their
latency on a shared VM disk varies run to run) and the rate with that time removed,
which is what txlog's own code costs; the verdicts use the wall-clock ratios.
"""

from __future__ import annotations

import argparse
import cProfile
import ctypes
import fcntl
import os
import pstats
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchutil import (
    FsyncMeter,
    Sample,
    cli_env,
    median_after_cold,
    scratch_dir,
    spread,
    timed,
    verdict,
    warm_median,
)
from kafka.record.default_records import DefaultRecordBatchBuilder  # baseline only

from storage import Store
from storage._native import quiet_append
from storage.file_records import FileRecords
from storage.records import (
    MAX_TIMESTAMP_OFFSET,
    BatchBuilder,
    Compression,
    ControlType,
    TimestampType,
    build_batch,
    encode_batches,
)
from txlog.clients.producer import Producer

TOPIC = "t"
KEY_BYTES, VALUE_BYTES = 10, 100
_MAX_TIMESTAMP = struct.Struct(">q")  # a batch header's maxTimestamp (NativeLoop)
SEND_TARGET = 2.0
DURABLE_TARGET = 0.9
TXN_TARGET = 0.95
TXN_TARGET_AT = 1000  # the transaction size --profile profiles
MANY_TARGET = 5.0
MANY_TARGET_LARGE = 3.0  # issue 26: produce_many with values of 1 KiB or more
DEFAULT_BATCH = 16384
NO_HEADERS = ()

Records = list[tuple[bytes, bytes, int]]


def make_records(count: int, distinct_keys: int = 0, value_bytes: int = VALUE_BYTES) -> Records:
    """(key, value, timestamp): random bytes (sizes matter, content does not), one timestamp.

    kafka-python gets the timestamps; txlog stamps records itself, as a producer does.
    `distinct_keys` > 0 draws the keys from that many (a partitioner cache then hits).
    """
    ts = int(time.time() * 1000)
    pool = [os.urandom(KEY_BYTES) for _ in range(distinct_keys)]
    return [
        (pool[i % distinct_keys] if pool else os.urandom(KEY_BYTES), os.urandom(value_bytes), ts) for i in range(count)
    ]


# ---- part 1: send + flush ---------------------------------------------------------------------------


def kafka_python_encode(records: Records, batch_size: int) -> tuple[Sample, int]:
    """Encode every record into idempotent batches of `batch_size` bytes; (sample, batches)."""

    def builder(sequence: int) -> DefaultRecordBatchBuilder:
        return DefaultRecordBatchBuilder(
            magic=2,
            compression_type=0,
            is_transactional=False,
            producer_id=1000,
            producer_epoch=0,
            base_sequence=sequence,
            batch_size=batch_size,
        )

    batches = sequence = 0
    with timed() as sample:
        current, offset = builder(0), 0
        for key, value, ts in records:
            if current.append(offset, ts, key, value, NO_HEADERS) is None:
                bytes(current.build())
                batches += 1
                sequence += offset
                current, offset = builder(sequence), 0
                current.append(offset, ts, key, value, NO_HEADERS)
            offset += 1
        bytes(current.build())
        batches += 1
    return sample[0], batches


def txlog_encode(records: Records, batch_size: int) -> Sample:
    """produce_many's encoder alone on the same records: whole idempotent-shaped batches of
    `batch_size` bytes into fresh buffers, nothing written (the like of kafka-python's baseline,
    which only encodes; produce_many's rows also write every byte durably)."""
    keys, values = [k for k, _, _ in records], [v for _, v, _ in records]
    with timed() as sample:
        encode_batches(values, keys, max_bytes=batch_size)
    return sample[0]


# The producer's defaults the disk floor copies: the bytes of one append (a sender's group commit) and the
# appends a one-partition round makes durable with one fdatasync (max.in.flight.requests.per.connection).
FLOOR_REQUEST_BYTES = 1024 * 1024
FLOOR_REQUESTS_PER_SYNC = 5


SYNC_FILE_RANGE_WRITE = 2  # linux/fs.h


def _writeback_hint() -> Callable[..., int] | None:
    """libc's sync_file_range, or None where there is none (the floor then leaves writeback to fdatasync)."""
    try:
        return ctypes.CDLL(None, use_errno=True).sync_file_range
    except (AttributeError, OSError):
        return None


def floor_requests(records: Records, batch_size: int) -> list[bytes]:
    """produce_many's bytes for the disk floor: the records encoded as produce_many encodes them, the
    batches joined into appends of at most FLOOR_REQUEST_BYTES (a batch larger than that is one alone)."""
    keys, values = [k for k, _, _ in records], [v for _, v, _ in records]
    requests: list[bytes] = []
    pending: list[bytearray] = []
    size = 0
    for batch in encode_batches(values, keys, max_bytes=batch_size):
        if pending and size + len(batch.data) > FLOOR_REQUEST_BYTES:
            requests.append(b"".join(pending))
            pending, size = [], 0
        pending.append(batch.data)
        size += len(batch.data)
    if pending:
        requests.append(b"".join(pending))
    return requests


def disk_floor(workdir: str, requests: list[bytes]) -> Sample:
    """The disk alone under produce_many's writes, no txlog code: `requests` appended to a fresh file
    on the same disk, one write each, the writeback of each started at once (sync_file_range, as the
    sender's appends hint it: storage/native/src/bindings/writeback.rs) unless an fdatasync follows,
    an fdatasync after every FLOOR_REQUESTS_PER_SYNC and after the last. It is the produce_many rows'
    ceiling on this disk at this moment, give or take the noise (issue 26's 3x at 1 KiB values needs
    about 1.3 GB/s written durably)."""
    hint = _writeback_hint()
    fd, path = tempfile.mkstemp(dir=workdir, prefix="floor-")
    try:
        with timed() as sample:
            at = 0
            for n, request in enumerate(requests, 1):
                os.write(fd, request)
                if n % FLOOR_REQUESTS_PER_SYNC == 0:
                    os.fdatasync(fd)
                elif hint is not None:
                    hint(fd, ctypes.c_int64(at), ctypes.c_int64(len(request)), SYNC_FILE_RANGE_WRITE)
                at += len(request)
            os.fdatasync(fd)
    finally:
        os.close(fd)
        os.unlink(path)
    return sample[0]


def count_batches(store: Store, topic: str) -> int:
    """Data batches in every partition (control batches included), by walking the .log files."""
    total = 0
    for partition in range(store.partition_count(topic)):
        for seg in store.partition(topic, partition).segments:
            with FileRecords.open(seg.log_path) as records:
                total += sum(1 for _ in records.batches())
    return total


def txlog_send(
    workdir: str,
    records: Records,
    batch_size: int,
    linger_ms: int,
    profiler: cProfile.Profile | None = None,
    partitions: int = 1,
    partitioner: str = "murmur2",
    bulk: bool = False,
    explicit: bool = False,
    warm: bool = False,
) -> tuple[Sample, int]:
    """send() every record then flush(), on a fresh store; (sample, batches written).

    `bulk` makes it one produce_many() call of the keys and values as two columns instead;
    `explicit` sends every record with `partition=0`; `warm` does it all once untimed first,
    with the same producer (its buffer pool then holds buffers, as in a long-running producer).
    """
    root = tempfile.mkdtemp(prefix="send-", dir=workdir)
    store = Store.open(root)
    try:
        store.create_topic(TOPIC, partitions)
        producer = Producer(store, batch_size=batch_size, linger_ms=linger_ms, partitioner=partitioner)
        keys, values = ([k for k, _, _ in records], [v for _, v, _ in records]) if bulk else ([], [])
        if warm:
            _send_all(producer, records, keys, values, bulk, explicit)
        if profiler is not None:
            profiler.enable()
        with timed() as sample:
            _send_all(producer, records, keys, values, bulk, explicit)
        if profiler is not None:
            profiler.disable()
        producer.close()
        written = sum(store.partition(TOPIC, p).log_end_offset for p in range(partitions))
        assert written == len(records) * (2 if warm else 1), (written, len(records))
        return sample[0], count_batches(store, TOPIC)
    finally:
        store.close()
        shutil.rmtree(root)


def _send_all(
    producer: Producer, records: Records, keys: list[bytes], values: list[bytes], bulk: bool, explicit: bool
) -> None:
    """Every record, by produce_many (`bulk`) or send (with partition=0 if `explicit`), then flush()."""
    send = producer.send
    if bulk:
        producer.produce_many(TOPIC, values, keys)
    elif explicit:
        for key, value, _ in records:
            send(TOPIC, value, key, 0)
    else:
        for key, value, _ in records:
            send(TOPIC, value, key)
    producer.flush()


# ---- part 2: transactions ---------------------------------------------------------------------------


def txlog_transactions(
    workdir: str, records: Records, per_txn: int, batch_size: int, profiler: cProfile.Profile | None = None
) -> DurableSample:
    """begin / `per_txn` sends / commit until every record is sent, on a fresh store; the sample
    and the context switches of every thread meanwhile (a hand-off to the sender thread costs two).

    per_txn = 0 means the idempotent, non-transactional baseline (one flush at the end).
    """
    root = tempfile.mkdtemp(prefix="txn-", dir=workdir)
    store = Store.open(root)
    try:
        store.create_topic(TOPIC, 1)
        if per_txn == 0:
            producer = Producer(store, batch_size=batch_size)
            chunks = [records]
        else:
            producer = Producer(store, transactional_id="bench-txn", batch_size=batch_size)
            producer.init_transactions()  # creates __transaction_state: not part of the rate
            chunks = [records[i : i + per_txn] for i in range(0, len(records), per_txn)]
        send = producer.send
        if profiler is not None:
            profiler.enable()
        with counted_switches() as switches, timed() as sample:
            for chunk in chunks:
                if per_txn:
                    producer.begin_transaction()
                for key, value, _ in chunk:
                    send(TOPIC, value, key)
                if per_txn:
                    producer.commit_transaction()
                else:
                    producer.flush()
        if profiler is not None:
            profiler.disable()
        producer.close()
        log = store.partition(TOPIC, 0)
        markers = len(chunks) if per_txn else 0
        assert log.log_end_offset == len(records) + markers, (log.log_end_offset, len(records), markers)
        assert log.last_stable_offset == log.log_end_offset
        return DurableSample(sample[0], switches[0])
    finally:
        store.close()
        shutil.rmtree(root)


def txlog_for_duration(
    workdir: str, records: Records, seconds: float, commit_ms: int, batch_size: int, transactional: bool
) -> tuple[int, int, Sample]:
    """Send `records` round and round for `seconds` (checked every 64 sends), committing every
    `commit_ms` when `transactional` (a stream processor's commit.interval.ms), else one flush
    at the end; (records sent, commits, sample)."""
    root = tempfile.mkdtemp(prefix="timed-", dir=workdir)
    store = Store.open(root)
    try:
        store.create_topic(TOPIC, 1)
        producer = Producer(store, batch_size=batch_size, transactional_id="bench-timed" if transactional else None)
        if transactional:
            producer.init_transactions()
        send, interval, clock = producer.send, commit_ms / 1000, time.perf_counter
        sent = commits = 0
        with timed() as sample:
            if transactional:
                producer.begin_transaction()
            started = last_commit = clock()
            while True:
                for key, value, _ in records[: 64 * (len(records) // 64)]:
                    send(TOPIC, value, key)
                    sent += 1
                    if sent & 63 == 0:
                        now = clock()
                        # The end first: a commit here would leave the final commit an empty transaction,
                        # which writes no marker (as Kafka's EndTxn of no partitions writes none).
                        if now - started >= seconds:
                            break
                        if transactional and now - last_commit >= interval:
                            producer.commit_transaction()
                            commits += 1
                            producer.begin_transaction()
                            last_commit = now
                else:
                    continue
                break
            if transactional:
                producer.commit_transaction()
                commits += 1
            else:
                producer.flush()
        producer.close()
        log = store.partition(TOPIC, 0)
        assert log.log_end_offset == sent + commits and log.last_stable_offset == log.log_end_offset
        return sent, commits, sample[0]
    finally:
        store.close()
        shutil.rmtree(root)


def print_timed(rows: dict[bool, list[tuple[int, int, Sample]]], seconds: float, commit_ms: int, reps: int) -> None:
    def rate(transactional: bool) -> float:
        return warm_median([n / sample.wall for n, _, sample in rows[transactional]])

    commits = warm_median([c for _, c, _ in rows[True]])
    fsyncs = warm_median([sample.fsyncs for _, _, sample in rows[True]])
    idem, txn = rate(False), rate(True)
    print(
        f"\nPart 2b: {seconds:g} s of sends, a commit every {commit_ms} ms against an idempotent producer "
        f"(no commits); median of {reps} runs after a cold one"
    )
    print(f"{'':<26}{'records/s':>12}{'commits':>9}{'fsyncs/commit':>15}{'ratio':>7}{'target':>8}")
    print(f"{'idempotent':<26}{idem:>12,.0f}{'-':>9}{'-':>15}{1:>7.2f}")
    print(
        f"{'transactional':<26}{txn:>12,.0f}{commits:>9.0f}{fsyncs / max(commits, 1):>15.1f}{txn / idem:>7.2f}"
        f"{TXN_TARGET:>6.2f} {verdict(txn / idem, TXN_TARGET)}"
    )


# ---- part 3: txlog produce ----------------------------------------------------------------------------


def write_lines(path: str, records: Records) -> None:
    """`key:value` lines: hex keys and values, so no separator or newline appears inside them."""
    with open(path, "wb") as f:
        for key, value, _ in records:
            f.write(key.hex().encode() + b":" + value.hex().encode() + b"\n")


PLAIN_LOOP = (
    "import sys\nn = 0\nfor line in sys.stdin.buffer:\n"
    "    key, _, value = line.rstrip(b'\\n').partition(b':')\n    n += 1\nprint(n)"
)


def run_with_input(argv: list[str], path: str, env: dict[str, str] | None = None) -> Sample:
    """Time a subprocess reading `path` on stdin (its CPU time is the child's)."""
    before = os.times()
    with open(path, "rb") as stdin, timed() as sample:
        proc = subprocess.run(argv, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    after = os.times()
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:4]} failed: {proc.stderr.decode(errors='replace')}")
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return Sample(sample[0].wall, cpu)


def cli_produce(workdir: str, path: str) -> Sample:
    root = tempfile.mkdtemp(prefix="cli-", dir=workdir)
    try:
        store = Store.open(root)
        store.create_topic(TOPIC, 1)
        store.close()
        return run_with_input(
            [sys.executable, "-m", "cli.main", "--data-dir", root, "produce", "-t", TOPIC, "-K", ":"], path, cli_env()
        )
    finally:
        shutil.rmtree(root)


def print_cli(lines: int, cli: list[Sample], plain: list[Sample], reps: int) -> None:
    tx, base = median_after_cold(cli), median_after_cold(plain)
    print(f"\nPart 3: txlog produce of {lines:,} key:value lines from a file; median of {reps} runs after a cold one")
    print(f"{'':<26}{'wall s':>9}{'lines/s':>12}{'CPU s':>8}")
    print(f"{'plain Python loop':<26}{base:>9.3f}{lines / base:>12,.0f}{median_after_cold(plain, 'cpu'):>8.2f}")
    print(f"{'txlog produce':<26}{tx:>9.3f}{lines / tx:>12,.0f}{median_after_cold(cli, 'cpu'):>8.2f}")
    print(f"txlog produce takes {tx / base:.2f}x the plain loop's time (both include interpreter start-up)")


# ---- part 4: durable one-record sends ----------------------------------------------------------------


#: Part 4's rows, each a loop of `durable_run`, by name and label: the raw floor, the informational
#: layers (txlog's system calls from Python, its native append alone, its storage layer alone), txlog.
DURABLE_ROWS = {
    "raw": "raw write+fdatasync",
    "syscalls": "raw, txlog's 7 syscalls",
    "native": "txlog's native append",
    "append": "PartitionLog.append",
    "append_abort": "  the same, after an abort",
    "txlog": "send(...).get(), acks=all",
}


@dataclass(frozen=True)
class DurableSample:
    """A timed repetition and its context switches (Part 4's, and Part 2's transactions)."""

    sample: Sample
    switches: int  # voluntary + involuntary context switches of every thread of the process


@contextmanager
def counted_switches() -> Iterator[list[int]]:
    """`with counted_switches() as out:` counts the process's context switches (all threads) in the block."""
    out: list[int] = []
    before = resource.getrusage(resource.RUSAGE_SELF)
    yield out
    after = resource.getrusage(resource.RUSAGE_SELF)
    out.append((after.ru_nvcsw - before.ru_nvcsw) + (after.ru_nivcsw - before.ru_nivcsw))


class RawLoop:
    """The floor: each record's bytes written to a file and fdatasync'ed, one at a time."""

    def __init__(self, workdir: str):
        self.fd, self.path = tempfile.mkstemp(prefix="raw-", dir=workdir)

    def send(self, records: Records) -> None:
        fd = self.fd
        for key, value, _ in records:
            os.write(fd, key + value)
            os.fdatasync(fd)

    def close(self) -> None:
        os.close(self.fd)
        os.unlink(self.path)


class SyscallLoop:
    """The raw loop with every system call of txlog's durable append (an informational floor, no verdict).

    flock, a stat of the partition directory, an fstat of the log, the write, fdatasync, the high
    watermark's pwrite, unlock: what `strace` counts per one-record durable send (docs/DESIGN.md
    §3), in straight-line Python. Its distance from the raw loop is what those calls cost; txlog's
    distance from it is what its own code costs.
    """

    def __init__(self, workdir: str):
        self.directory = tempfile.mkdtemp(prefix="syscalls-", dir=workdir)
        appended = os.O_RDWR | os.O_CREAT | os.O_APPEND
        self.log = os.open(os.path.join(self.directory, "log"), appended)
        self.hw, self.lock = (os.open(os.path.join(self.directory, n), os.O_RDWR | os.O_CREAT) for n in ("hw", "lock"))

    def send(self, records: Records) -> None:
        directory, log, hw, lock = self.directory, self.log, self.hw, self.lock
        mark = b"\0" * 14
        for key, value, _ in records:
            fcntl.flock(lock, fcntl.LOCK_EX)
            os.stat(directory)
            os.fstat(log)
            os.write(log, key + value)
            os.fdatasync(log)
            os.pwrite(hw, mark, 0)
            fcntl.flock(lock, fcntl.LOCK_UN)

    def close(self) -> None:
        for fd in (self.log, self.hw, self.lock):
            os.close(fd)
        shutil.rmtree(self.directory)


class NativeLoop(SyscallLoop):
    """txlog's own native durable append (`storage._native.quiet_append`, what PartitionLog's quiet
    append calls) under the writer's flock, with no other txlog code: the looks at the directory
    and the log, write, fdatasync, the HW's pwrite (an informational floor, no verdict). The files
    are SyscallLoop's; the calls are made natively instead of from Python.

    The directory key and the log's size a view would hold are kept here, as the view keeps them;
    what it costs is what any txlog append pays under the cross-process protocol of docs/DESIGN.md
    §3, however little of txlog's code runs in Python. The call's producer check is given a batch
    header with no producer id (nothing to check) and no entry. The bytes written are SyscallLoop's
    but for their first 16, which the call's stamp sets (base offset 0, leader epoch 0); the
    "maxTimestamp" it is given is the one the bytes already hold, so it recomputes no CRC.
    """

    def __init__(self, workdir: str):
        super().__init__(workdir)
        looked = os.stat(self.directory)  # no file is made in it from here on: the key stays
        self.key, self.size = (looked.st_mtime_ns, looked.st_ino), 0
        self.header = FileRecords.sole_batch(build_batch([(b"k", b"v", (), 0)]), verify_crc=False)

    def send(self, records: Records) -> None:
        directory, (mtime, ino), log, hw, lock = self.directory, self.key, self.log, self.hw, self.lock
        for key, value, _ in records:
            data = bytearray(key + value)  # the call stamps its buffer in place
            (max_ts,) = _MAX_TIMESTAMP.unpack_from(data, MAX_TIMESTAMP_OFFSET)
            fcntl.flock(lock, fcntl.LOCK_EX)
            status, _ = quiet_append(
                directory, mtime, ino, log, self.size, "", -1, 0, data, 0, hw, 0, self.header, None, 0, max_ts
            )  # no `.txnindex` (size -1): none looked at
            fcntl.flock(lock, fcntl.LOCK_UN)
            assert status == 0, f"the native append did not write: status {status} (append.rs WRITTEN is 0)"
            self.size += len(data)


class AppendLoop:
    """`PartitionLog.append` of one-record batches built by the producer's encoder, as its sender hands
    them over (trusted, a producer id's next sequence): the storage layer alone, none of the producer,
    its accumulator, futures or sender (an informational row, no verdict)."""

    PRODUCER_ID = 1

    def __init__(self, workdir: str):
        self.root = tempfile.mkdtemp(prefix="append-", dir=workdir)
        self.store = Store.open(self.root)
        self.store.create_topic(TOPIC, 1)
        self.log = self.store.partition(TOPIC, 0)
        self.offset = self._prepare()  # the log end offset before the loop's first batch
        self.sequence = 0
        self.send([(b"warm", b"up", None)])

    def _prepare(self) -> int:
        """What a subclass writes to the partition before the loop; the log end offset after it."""
        return 0

    def send(self, records: Records) -> None:
        append = self.log.append
        for key, value, _ in records:
            builder = BatchBuilder(
                max_bytes=16384, compression=Compression.NONE, timestamp_type=TimestampType.CREATE_TIME
            )
            builder.try_append(key, value, None, None)
            batch = builder.build(producer_id=self.PRODUCER_ID, producer_epoch=0, base_sequence=self.sequence)
            append(batch, trusted=True)
            self.sequence += 1

    def close(self) -> None:
        try:
            assert self.log.log_end_offset == self.offset + self.sequence
        finally:
            self.store.close()
            shutil.rmtree(self.root)


class AbortedAppendLoop(AppendLoop):
    """AppendLoop on a partition whose active segment holds an aborted transaction (so a `.txnindex`):
    the quiet append looks at that file too (`PartitionLog._quiet_append`), and before round ten took the
    Python path until the next roll (an informational row, no verdict)."""

    ABORTED_ID = 2

    def _prepare(self) -> int:
        builder = BatchBuilder(max_bytes=16384, compression=Compression.NONE, timestamp_type=TimestampType.CREATE_TIME)
        builder.try_append(b"k", b"aborted", None, None)
        txn = builder.build(producer_id=self.ABORTED_ID, producer_epoch=0, base_sequence=0, is_transactional=True)
        self.log.append(txn, sync=False)
        return self.log.append_marker(ControlType.ABORT, self.ABORTED_ID, 0).last_offset + 1


class TxlogLoop:
    """`send(...).get()` of one record at a time, acks=all: each one durable before the next."""

    def __init__(self, workdir: str):
        self.root = tempfile.mkdtemp(prefix="durable-", dir=workdir)
        self.store = Store.open(self.root)
        self.store.create_topic(TOPIC, 1)
        self.producer = Producer(self.store)
        self.producer.send(TOPIC, b"warm-up").get()  # the sender thread starts, the topic is looked up
        self.sent = 1

    def send(self, records: Records) -> None:
        send = self.producer.send
        for key, value, _ in records:
            send(TOPIC, value, key).get()
        self.sent += len(records)

    def close(self) -> None:
        try:
            self.producer.close()
            assert self.store.partition(TOPIC, 0).log_end_offset == self.sent
        finally:
            self.store.close()
            shutil.rmtree(self.root)


def durable_run(workdir: str, records: Records, block: int) -> dict[str, DurableSample]:
    """One run of every Part 4 loop over `records`, the loops taking turns `block` sends at a time.

    Turns of a few dozen sends, not one loop's whole run after another's: the disk's fdatasync
    latency on a shared machine swings over seconds, and a swing then falls on every row alike
    instead of on whichever loop ran through it (runs taken whole gave ratios from 0.35x to 2.2x in
    one sitting).
    """
    loops: dict[str, RawLoop | SyscallLoop | NativeLoop | AppendLoop | TxlogLoop] = {
        "raw": RawLoop(workdir),
        "syscalls": SyscallLoop(workdir),
        "native": NativeLoop(workdir),
        "append": AppendLoop(workdir),
        "append_abort": AbortedAppendLoop(workdir),
        "txlog": TxlogLoop(workdir),
    }
    totals = {name: [0.0, 0.0, 0] for name in loops}
    try:
        for start in range(0, len(records), block):
            part = records[start : start + block]
            for name, loop in loops.items():
                with counted_switches() as switches, timed() as sample:
                    loop.send(part)
                total = totals[name]
                total[0] += sample[0].wall
                total[1] += sample[0].cpu
                total[2] += switches[0]
    finally:
        for loop in loops.values():
            loop.close()
    return {name: DurableSample(Sample(wall, cpu), int(sw)) for name, (wall, cpu, sw) in totals.items()}


def print_durable(rows: dict[str, list[DurableSample]], count: int, reps: int) -> None:
    def median(name: str, field: str) -> float:
        return warm_median([getattr(s.sample, field) if field != "switches" else s.switches for s in rows[name]])

    print(f"\nPart 4: {count} one-record durable sends, one at a time; median of {reps} runs after a cold one")
    print(f"{'':<28}{'commits/s':>11}{'ratio':>7}{'target':>8}    {'CPU us/commit':>14}{'ctx sw/commit':>14}")
    raw_rate = count / median("raw", "wall")
    for name, label in DURABLE_ROWS.items():
        rate = count / median(name, "wall")
        ratio = rate / raw_rate
        target = f"{DURABLE_TARGET:>6.1f}x {verdict(ratio, DURABLE_TARGET):<6}" if name == "txlog" else f"{'':<14}"
        print(
            f"{label:<28}{rate:>11,.0f}{ratio:>6.2f}x{target}{median(name, 'cpu') / count * 1e6:>14.0f}"
            f"{median(name, 'switches') / count:>14.1f}"
        )


# ---- part 4c: txlog's layers cold, after a sleep ------------------------------------------------------


#: Part 4c's rows: Part 4's txlog layers, timed on a tmpfs (its fdatasync returns at once).
COLD_ROWS = {"native": NativeLoop, "append": AppendLoop, "txlog": TxlogLoop}


def sleep_between(loop: NativeLoop | AppendLoop | TxlogLoop | None, records: Records, pause: float) -> None:
    """Each record sent alone by `loop` (None: no send), then `pause` seconds asleep: a disk's
    fdatasync, but for its CPU."""
    for record in records:
        if loop is not None:
            loop.send([record])
        time.sleep(pause)


def cold_run(workdir: str, records: Records, pause: float, block: int) -> dict[str, tuple[float, float]]:
    """One run of Part 4c: (CPU seconds back to back, CPU seconds with `pause` asleep after each send,
    the sleeps' own CPU taken out) of each COLD_ROWS loop over `records`, taking turns `block` sends
    at a time as Part 4's loops do."""
    loops = {name: make(workdir) for name, make in COLD_ROWS.items()}
    warm, cold = dict.fromkeys(loops, 0.0), dict.fromkeys(loops, 0.0)
    try:
        for start in range(0, len(records), block):
            part = records[start : start + block]
            with timed() as asleep:
                sleep_between(None, part, pause)
            for name, loop in loops.items():
                with timed() as back_to_back:
                    loop.send(part)
                with timed() as after_sleep:
                    sleep_between(loop, part, pause)
                warm[name] += back_to_back[0].cpu
                cold[name] += after_sleep[0].cpu - asleep[0].cpu
    finally:
        for loop in loops.values():
            loop.close()
    return {name: (warm[name], cold[name]) for name in loops}


def print_cold(rows: dict[str, list[tuple[float, float]]], count: int, pause_us: float, directory: str) -> None:
    def median(name: str, which: int) -> float:
        return warm_median([s[which] for s in rows[name]]) / count * 1e6

    print(f"\nPart 4c: {count} one-record sends on {directory}, back to back and {pause_us:.0f} us asleep after each")
    print(f"{'':<28}{'CPU us/send':>12}{'after a sleep':>15}{'x':>7}")
    for name, label in DURABLE_ROWS.items():
        if name in rows:
            warm, cold = median(name, 0), median(name, 1)
            print(f"{label:<28}{warm:>12.0f}{cold:>15.0f}{cold / warm:>6.1f}x")


# ---- report -----------------------------------------------------------------------------------------


@dataclass
class SendRow:
    batch_size: int
    linger_ms: int
    kp: list[Sample]
    tx: list[Sample]
    many: list[Sample]
    explicit: list[Sample]
    many_warm: list[Sample]
    encode: list[Sample]
    floor: list[Sample] = field(default_factory=list)
    kp_batches: int = 0
    tx_batches: int = 0


def parse_sizes(text: str) -> list[tuple[int, int]]:
    out = []
    for item in text.split(","):
        size, _, linger = item.partition(":")
        out.append((int(size), int(linger or 5)))
    return out


def print_send(rows: list[SendRow], count: int, reps: int, value_bytes: int) -> None:
    print(
        f"Part 1: send+flush of {count:,} records ({KEY_BYTES} B key, {value_bytes} B value), idempotent, "
        f"acknowledged when fsynced; median of {reps} runs after a cold one"
    )
    print(
        f"{'batch.size:linger':<19}{'rec/batch kp|tx':>16}{'kafka-python rec/s':>20}{'txlog rec/s':>13}"
        f"{'ratio':>7}{'target':>8}    {'fsync ms':>9}{'txlog w/o fsync':>17}{'ratio':>7}{'CPU us/rec':>12}"
    )
    for row in rows:
        kp, tx = median_after_cold(row.kp), median_after_cold(row.tx)
        tx_nofsync = median_after_cold(row.tx, "without_fsync")
        fsync = median_after_cold(row.tx, "fsync")
        cpu = median_after_cold(row.tx, "cpu")
        ratio = kp / tx
        label = f"{row.batch_size}:{row.linger_ms}"
        per_batch = f"{count / row.kp_batches:.0f}|{count / row.tx_batches:.0f}"
        print(
            f"{label:<19}{per_batch:>16}{count / kp:>20,.0f}{count / tx:>13,.0f}{ratio:>6.2f}x"
            f"{SEND_TARGET:>6.1f}x {verdict(ratio, SEND_TARGET):<6}{fsync * 1e3:>6.0f}"
            f"{count / tx_nofsync:>17,.0f}{kp / tx_nofsync:>6.2f}x{cpu / count * 1e6:>12.2f}"
        )
    print(
        "ratio = kafka-python encode time / txlog send+flush time; 'w/o fsync' removes the time txlog spent "
        "inside fdatasync (fsync ms, one per group-commit append) - the disk's share, not the code's"
    )
    print(f"\n{'send(partition=0)':<19}{'':>16}{'kafka-python rec/s':>20}{'txlog rec/s':>13}{'ratio':>7}{'target':>8}")
    for row in rows:
        kp, explicit = median_after_cold(row.kp), median_after_cold(row.explicit)
        ratio = kp / explicit
        print(
            f"{row.batch_size}:{row.linger_ms:<13}{'':>16}{count / kp:>20,.0f}{count / explicit:>13,.0f}"
            f"{ratio:>6.2f}x{SEND_TARGET:>6.1f}x {verdict(ratio, SEND_TARGET):<6}"
        )
    target = MANY_TARGET_LARGE if value_bytes >= 1024 else MANY_TARGET
    print(
        f"\n{'produce_many':<19}{'':>16}{'kafka-python rec/s':>20}{'txlog rec/s':>13}{'ratio':>7}{'target':>8}    "
        f"{'fsync ms':>9}{'fsyncs':>8}{'CPU us/rec':>12}"
    )
    for row in rows:
        kp, many = median_after_cold(row.kp), median_after_cold(row.many)
        ratio = kp / many
        label = f"{row.batch_size}:{row.linger_ms}"
        print(
            f"{label:<19}{'':>16}{count / kp:>20,.0f}{count / many:>13,.0f}{ratio:>6.2f}x"
            f"{target:>6.1f}x {verdict(ratio, target):<6}{median_after_cold(row.many, 'fsync') * 1e3:>6.0f}"
            f"{median_after_cold(row.many, 'fsyncs'):>8.0f}{median_after_cold(row.many, 'cpu') / count * 1e6:>12.2f}"
        )
    for row in rows:
        kp, many = median_after_cold(row.kp), median_after_cold(row.many_warm)
        ratio = kp / many
        label = f"{row.batch_size}:{row.linger_ms} warm"
        print(
            f"{label:<19}{'':>16}{count / kp:>20,.0f}{count / many:>13,.0f}{ratio:>6.2f}x"
            f"{target:>6.1f}x {verdict(ratio, target):<6}"
            f"{median_after_cold(row.many_warm, 'fsync') * 1e3:>6.0f}"
            f"{median_after_cold(row.many_warm, 'fsyncs'):>8.0f}"
            f"{median_after_cold(row.many_warm, 'cpu') / count * 1e6:>12.2f}"
        )
    for row in rows:
        kp, encode = median_after_cold(row.kp), median_after_cold(row.encode)
        ratio = kp / encode
        label = f"{row.batch_size}:{row.linger_ms} encode"
        print(
            f"{label:<19}{'':>16}{count / kp:>20,.0f}{count / encode:>13,.0f}{ratio:>6.2f}x"
            f"{'':>14}{'-':>10}{'-':>8}{median_after_cold(row.encode, 'cpu') / count * 1e6:>12.2f}"
        )
    for row in rows:
        kp, floor = median_after_cold(row.kp), median_after_cold(row.floor)
        label = f"{row.batch_size}:{row.linger_ms} disk"
        print(
            f"{label:<19}{'':>16}{count / kp:>20,.0f}{count / floor:>13,.0f}{kp / floor:>6.2f}x"
            f"{'':>14}{median_after_cold(row.floor, 'fsync') * 1e3:>6.0f}{median_after_cold(row.floor, 'fsyncs'):>8.0f}"
            f"{median_after_cold(row.floor, 'cpu') / count * 1e6:>12.2f}"
        )
    print(
        "'warm': the second produce_many of a producer (its buffer pool holds the first call's buffers), "
        "as in a long-running producer; 'encode': produce_many's encoder alone (storage.records.encode_batches "
        "into fresh buffers, nothing written), the like of kafka-python's encode-only baseline; 'disk': the "
        "disk alone, no txlog code (the same bytes appended 1 MiB at a time, writeback started early, an "
        "fdatasync per 5): the ceiling of the produce_many rows on this disk now"
    )
    for row in rows:
        lo, hi = spread(row.tx)
        fs = median_after_cold(row.tx, "fsyncs")
        fsync = median_after_cold(row.tx, "fsync")
        floor = count / fsync if fsync else float("inf")
        print(
            f"  {row.batch_size}:{row.linger_ms}: txlog spread {lo:.3f}..{hi:.3f} s, {fs:.0f} fsyncs "
            f"({fsync / max(fs, 1) * 1e3:.2f} ms each): fsync alone caps txlog at {floor:,.0f} rec/s "
            f"= {floor * median_after_cold(row.kp) / count:.2f}x kafka-python"
        )


def print_transactions(
    runs: dict[int, list[DurableSample]], counts: dict[int, int], batch_size: int, reps: int, value_bytes: int
) -> None:
    samples = {size: [run.sample for run in rows] for size, rows in runs.items()}
    base = samples[0]
    base_rate = counts[0] / median_after_cold(base)
    base_rate_nofsync = counts[0] / median_after_cold(base, "without_fsync")
    print(
        f"\nPart 2: transactions, batch.size {batch_size}, {KEY_BYTES} B key / {value_bytes} B value; "
        f"median of {reps} runs after a cold one"
    )
    print(
        f"{'records/txn':<22}{'records':>9}{'records/s':>12}{'txn/s':>9}{'ratio':>7}{'target':>8}    "
        f"{'fsyncs/txn':>11}{'fsync share':>12}{'ratio w/o fsync':>16}{'CPU us/txn':>12}{'ctx sw/txn':>12}"
    )
    for size, rows in samples.items():
        wall = median_after_cold(rows)
        nofsync = median_after_cold(rows, "without_fsync")
        rate = counts[size] / wall
        txns = counts[size] / size if size else 0
        fsyncs = median_after_cold(rows, "fsyncs")
        share = median_after_cold(rows, "fsync") / wall
        ratio = rate / base_rate
        ratio_nofsync = counts[size] / nofsync / base_rate_nofsync
        target = ""
        label = "idempotent (baseline)" if size == 0 else str(size)
        per_txn = f"{fsyncs / txns:.1f}" if txns else "-"
        txn_rate = f"{txns / wall:,.1f}" if txns else "-"
        cpu = f"{median_after_cold(rows, 'cpu') / txns * 1e6:,.0f}" if txns else "-"  # every thread's
        switches = f"{warm_median([r.switches for r in runs[size]]) / txns:.1f}" if txns else "-"
        print(
            f"{label:<22}{counts[size]:>9,}{rate:>12,.0f}{txn_rate:>9}{ratio:>7.2f}{target:<12}"
            f"{per_txn:>11}{share:>11.0%}{ratio_nofsync:>16.2f}{cpu:>12}{switches:>12}"
        )
    print(
        "ratio = records/s against the idempotent producer's; 'w/o fsync' compares the rates with the time "
        "inside fsync/fdatasync removed from both"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000, help="records per send+flush run (default 200000)")
    parser.add_argument(
        "--sizes",
        default="16384:5,1048576:100",
        help="batch_size:linger_ms pairs for part 1 (default 16384:5,1048576:100)",
    )
    parser.add_argument(
        "--txn-sizes", default="1,10,100,1000,10000", help="records per transaction (default 1,10,100,1000,10000)"
    )
    parser.add_argument(
        "--txn-records",
        type=int,
        default=50_000,
        help="records per transactional run, at most --max-txns transactions (default 50000)",
    )
    parser.add_argument(
        "--commit-ms", type=int, default=100, help="part 2b commits this often (default 100; 0 skips part 2b)"
    )
    parser.add_argument("--commit-seconds", type=float, default=3.0, help="how long part 2b sends, per run (default 3)")
    parser.add_argument("--lines", type=int, default=200_000, help="lines for part 3 (default 200000)")
    parser.add_argument("--skip-cli", action="store_true", help="skip part 3")
    parser.add_argument("--max-txns", type=int, default=200, help="transactions per run at most (default 200)")
    parser.add_argument("--txn-batch-size", type=int, default=DEFAULT_BATCH, help="batch_size for part 2")
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions after the cold one (default 3)")
    parser.add_argument("--dir", help="parent of the scratch directory (default <repo>/.bench-tmp)")
    parser.add_argument("--skip-send", action="store_true", help="skip part 1")
    parser.add_argument("--skip-txn", action="store_true", help="skip part 2")
    parser.add_argument(
        "--partitions", type=int, default=1, help="partitions of part 1's topic (default 1: no key is hashed)"
    )
    parser.add_argument(
        "--partitioner",
        default="murmur2",
        choices=["murmur2", "murmur3"],
        help="the producer's key partitioner in part 1 (default murmur2)",
    )
    parser.add_argument(
        "--distinct-keys", type=int, default=0, help="draw keys from this many (default 0: every key distinct)"
    )
    parser.add_argument("--value-bytes", type=int, default=VALUE_BYTES, help="bytes per value (default 100)")
    parser.add_argument("--durable-sends", type=int, default=300, help="one-record sends per part 4 run (default 300)")
    parser.add_argument(
        "--durable-block", type=int, default=25, help="part 4's loops take turns this many sends at a time (default 25)"
    )
    parser.add_argument("--skip-durable", action="store_true", help="skip part 4")
    parser.add_argument(
        "--cold-sleep-us",
        type=float,
        default=0,
        help="part 4c: time txlog's layers on --cold-dir, this many us asleep after each send (default 0: off)",
    )
    parser.add_argument("--cold-dir", default="/dev/shm", help="part 4c's directory, a tmpfs (default /dev/shm)")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also cProfile one send+flush run (first --sizes entry) and one run at 1000 records/txn",
    )
    args = parser.parse_args()

    FsyncMeter.install()
    sizes = parse_sizes(args.sizes)
    txn_sizes = [int(s) for s in args.txn_sizes.split(",")]
    records = make_records(max(args.records, args.txn_records), args.distinct_keys, args.value_bytes)
    send_records = records[: args.records]
    counts = {0: args.txn_records, **{k: min(args.txn_records, k * args.max_txns) for k in txn_sizes}}

    with scratch_dir(args.dir, "bench-producer-") as workdir:
        if not args.skip_send:
            rows = [SendRow(size, linger, [], [], [], [], [], []) for size, linger in sizes]
            floors = {row.batch_size: floor_requests(send_records, row.batch_size) for row in rows}
            for _ in range(args.reps + 1):
                for row in rows:
                    row.floor.append(disk_floor(workdir, floors[row.batch_size]))
                    sample, row.kp_batches = kafka_python_encode(send_records, row.batch_size)
                    row.kp.append(sample)
                    sample, row.tx_batches = txlog_send(
                        workdir,
                        send_records,
                        row.batch_size,
                        row.linger_ms,
                        partitions=args.partitions,
                        partitioner=args.partitioner,
                    )
                    row.tx.append(sample)
                    row.encode.append(txlog_encode(send_records, row.batch_size))
                    variants = (
                        (row.many, {"bulk": True}),
                        (row.many_warm, {"bulk": True, "warm": True}),
                        (row.explicit, {"explicit": True}),
                    )
                    for samples_of, flags in variants:
                        samples_of.append(
                            txlog_send(
                                workdir,
                                send_records,
                                row.batch_size,
                                row.linger_ms,
                                partitions=args.partitions,
                                partitioner=args.partitioner,
                                **flags,
                            )[0]
                        )
            print_send(rows, len(send_records), args.reps, args.value_bytes)
            print(
                f"txlog wrote to {args.partitions} partition(s) with partitioner {args.partitioner}, keys "
                f"{'from ' + format(args.distinct_keys, ',') if args.distinct_keys else 'all distinct'}"
            )

        if not args.skip_txn:
            samples: dict[int, list[DurableSample]] = {size: [] for size in counts}
            for _ in range(args.reps + 1):
                for size, rows in samples.items():
                    rows.append(txlog_transactions(workdir, records[: counts[size]], size, args.txn_batch_size))
            print_transactions(samples, counts, args.txn_batch_size, args.reps, args.value_bytes)
            if args.commit_ms > 0:
                timed_rows: dict[bool, list[tuple[int, int, Sample]]] = {False: [], True: []}
                for _ in range(args.reps + 1):
                    for transactional in (False, True):
                        timed_rows[transactional].append(
                            txlog_for_duration(
                                workdir,
                                records,
                                args.commit_seconds,
                                args.commit_ms,
                                args.txn_batch_size,
                                transactional,
                            )
                        )
                print_timed(timed_rows, args.commit_seconds, args.commit_ms, args.reps)

        if not args.skip_durable:
            durable: dict[str, list[DurableSample]] = {name: [] for name in DURABLE_ROWS}
            # Part 4 prints no fsync column: every row calls the interpreter's own fdatasync, as a
            # program using txlog does (the meter's wrapper is a Python call the raw row paid too, and
            # it keeps txlog's append off its native path: storage/partition_log.py `_os_calls_own`).
            with FsyncMeter.suspended():
                for _ in range(args.reps + 1):
                    for name, result in durable_run(workdir, records[: args.durable_sends], args.durable_block).items():
                        durable[name].append(result)
            print_durable(durable, args.durable_sends, args.reps)

        if args.cold_sleep_us > 0:
            cold: dict[str, list[tuple[float, float]]] = {name: [] for name in COLD_ROWS}
            pause = args.cold_sleep_us / 1e6
            with FsyncMeter.suspended(), scratch_dir(args.cold_dir, "bench-cold-") as colddir:
                for _ in range(args.reps + 1):
                    for name, pair in cold_run(
                        colddir, records[: args.durable_sends], pause, args.durable_block
                    ).items():
                        cold[name].append(pair)
            print_cold(cold, args.durable_sends, args.cold_sleep_us, args.cold_dir)

        if not args.skip_cli:
            path = os.path.join(workdir, "lines.txt")
            write_lines(path, make_records(args.lines))
            cli, plain = [], []
            for _ in range(args.reps + 1):
                plain.append(run_with_input([sys.executable, "-c", PLAIN_LOOP], path))
                cli.append(cli_produce(workdir, path))
            print_cli(args.lines, cli, plain, args.reps)

        if args.profile:
            size, linger = sizes[0]
            profiler = cProfile.Profile()
            txlog_send(workdir, send_records, size, linger, profiler, args.partitions, args.partitioner)
            print(f"\ncProfile of one send+flush run (batch_size {size}, linger_ms {linger}), top 25 by own time:")
            pstats.Stats(profiler, stream=sys.stdout).strip_dirs().sort_stats("tottime").print_stats(25)
            profiler = cProfile.Profile()
            txlog_transactions(
                workdir,
                records[: counts.get(TXN_TARGET_AT, args.txn_records)],
                TXN_TARGET_AT,
                args.txn_batch_size,
                profiler,
            )
            print(f"cProfile of one transactional run ({TXN_TARGET_AT} records/txn), top 25 by own time:")
            pstats.Stats(profiler, stream=sys.stdout).strip_dirs().sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
