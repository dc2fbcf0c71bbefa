"""On-demand benchmark of the Producer: send + flush against kafka-python's batch encoder, and transactions.

Run: python tests/benchmarks/bench_producer.py [--records N] [--sizes 16384:5,1048576:100]
         [--txn-sizes 1,10,100,1000] [--txn-records N] [--max-txns N] [--reps R] [--profile]
         [--partitions P] [--partitioner murmur2|murmur3] [--distinct-keys K]

Part 1 - durable send throughput. `Producer.send` of N records (10-byte key, 100-byte
value, one partition) followed by one `flush`, timed from the first send until flush
returns. The producer is idempotent (the default) and every batch it sends is one durable
append, i.e. one fdatasync. The baseline, measured in the same run, is kafka-python's
`DefaultRecordBatchBuilder` (magic 2, the same producer id / epoch / sequence header
fields) merely *encoding* the same records into batches of the same `batch_size`: no
partitioner, no futures, no I/O, and timestamps computed before the timer starts. Each
`--sizes` entry is `batch_size:linger_ms`; 16384:5 is the producer's default, 1048576:100
is a throughput setting (a 1 MiB batch needs a linger long enough to fill it, as in
Kafka). Target: txlog >= 2x kafka-python's encode-only rate.

With `--partitions P` (P > 1) part 1 writes to a P-partition topic, so every keyed send is
hashed (a one-partition topic skips the partitioner): this is the cost of the key hash
(`--partitioner`, default Kafka's murmur2 in pure Python, cached per key; murmur3 is mmh3 in
C). Keys are all distinct by default (the cache never hits: the worst case);
`--distinct-keys K` reuses K keys (the cache's usual case). The baseline still encodes one
stream of batches, so compare the txlog columns of runs with different flags, not the ratio.

Part 2 - transactions. A transactional producer runs begin / K sends / commit for K in
`--txn-sizes` (default batch_size), against an idempotent non-transactional producer
sending the same records in the same run. Each transaction costs coordinator writes
(AddPartitionsToTxn, PrepareCommit, CompleteCommit: one fsync each) and one COMMIT
marker (one fsync) besides its data batches. Target: >= 0.95 of the idempotent rate at
1000 records per transaction.

Every repetition starts from a fresh store, variants are interleaved inside a
repetition, the first (cold) repetition is dropped and the median of the rest is shown.
Besides wall-clock rates the script prints the time spent inside fsync/fdatasync (their
latency on a shared VM disk varies run to run) and the rate with that time removed,
which is what txlog's own code costs; the verdicts use the wall-clock ratios.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchutil import (  # noqa: E402
    FsyncMeter,
    Sample,
    median_after_cold,
    scratch_dir,
    spread,
    timed,
    verdict,
)
from kafka.record.default_records import DefaultRecordBatchBuilder  # noqa: E402  (baseline only)

from storage import Store  # noqa: E402
from storage.file_records import FileRecords  # noqa: E402
from txlog.producer import Producer  # noqa: E402

TOPIC = "t"
KEY_BYTES, VALUE_BYTES = 10, 100
SEND_TARGET = 2.0
TXN_TARGET = 0.95
TXN_TARGET_AT = 1000
DEFAULT_BATCH = 16384
NO_HEADERS = ()

Records = list[tuple[bytes, bytes, int]]


def make_records(count: int, distinct_keys: int = 0) -> Records:
    """(key, value, timestamp): random bytes (sizes matter, content does not), one timestamp.

    kafka-python gets the timestamps; txlog stamps records itself, as a producer does.
    `distinct_keys` > 0 draws the keys from that many (a partitioner cache then hits).
    """
    ts = int(time.time() * 1000)
    pool = [os.urandom(KEY_BYTES) for _ in range(distinct_keys)]
    return [(pool[i % distinct_keys] if pool else os.urandom(KEY_BYTES), os.urandom(VALUE_BYTES), ts)
            for i in range(count)]


# ---- part 1: send + flush ---------------------------------------------------------------------------


def kafka_python_encode(records: Records, batch_size: int) -> tuple[Sample, int]:
    """Encode every record into idempotent batches of `batch_size` bytes; (sample, batches)."""

    def builder(sequence: int) -> DefaultRecordBatchBuilder:
        return DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=1000,
                                         producer_epoch=0, base_sequence=sequence, batch_size=batch_size)

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


def count_batches(store: Store, topic: str) -> int:
    """Data batches in every partition (control batches included), by walking the .log files."""
    total = 0
    for partition in range(store.partition_count(topic)):
        for seg in store.partition(topic, partition).segments:
            with FileRecords.open(seg.log_path) as records:
                total += sum(1 for _ in records.batches())
    return total


def txlog_send(workdir: str, records: Records, batch_size: int, linger_ms: int,
               profiler: cProfile.Profile | None = None, partitions: int = 1,
               partitioner: str = "murmur2") -> tuple[Sample, int]:
    """send() every record then flush(), on a fresh store; (sample, batches written)."""
    root = tempfile.mkdtemp(prefix="send-", dir=workdir)
    store = Store.open(root)
    try:
        store.create_topic(TOPIC, partitions)
        producer = Producer(store, batch_size=batch_size, linger_ms=linger_ms, partitioner=partitioner)
        send = producer.send
        if profiler is not None:
            profiler.enable()
        with timed() as sample:
            for key, value, _ in records:
                send(TOPIC, value, key)
            producer.flush()
        if profiler is not None:
            profiler.disable()
        producer.close()
        written = sum(store.partition(TOPIC, p).log_end_offset for p in range(partitions))
        assert written == len(records), (written, len(records))
        return sample[0], count_batches(store, TOPIC)
    finally:
        store.close()
        shutil.rmtree(root)


# ---- part 2: transactions ---------------------------------------------------------------------------


def txlog_transactions(workdir: str, records: Records, per_txn: int, batch_size: int,
                       profiler: cProfile.Profile | None = None) -> Sample:
    """begin / `per_txn` sends / commit until every record is sent, on a fresh store.

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
            chunks = [records[i:i + per_txn] for i in range(0, len(records), per_txn)]
        send = producer.send
        if profiler is not None:
            profiler.enable()
        with timed() as sample:
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
        return sample[0]
    finally:
        store.close()
        shutil.rmtree(root)


# ---- report -----------------------------------------------------------------------------------------


@dataclass
class SendRow:
    batch_size: int
    linger_ms: int
    kp: list[Sample]
    tx: list[Sample]
    kp_batches: int = 0
    tx_batches: int = 0


def parse_sizes(text: str) -> list[tuple[int, int]]:
    out = []
    for item in text.split(","):
        size, _, linger = item.partition(":")
        out.append((int(size), int(linger or 5)))
    return out


def print_send(rows: list[SendRow], count: int, reps: int) -> None:
    print(f"Part 1: send+flush of {count:,} records ({KEY_BYTES} B key, {VALUE_BYTES} B value), idempotent, "
          f"every batch fsynced; median of {reps} runs after a cold one")
    print(f"{'batch.size:linger':<19}{'rec/batch kp|tx':>16}{'kafka-python rec/s':>20}{'txlog rec/s':>13}"
          f"{'ratio':>7}{'target':>8}    {'fsync ms':>9}{'txlog w/o fsync':>17}{'ratio':>7}{'CPU us/rec':>12}")
    for row in rows:
        kp, tx = median_after_cold(row.kp), median_after_cold(row.tx)
        tx_nofsync = median_after_cold(row.tx, "without_fsync")
        fsync = median_after_cold(row.tx, "fsync")
        cpu = median_after_cold(row.tx, "cpu")
        ratio = kp / tx
        label = f"{row.batch_size}:{row.linger_ms}"
        per_batch = f"{count / row.kp_batches:.0f}|{count / row.tx_batches:.0f}"
        print(f"{label:<19}{per_batch:>16}{count / kp:>20,.0f}{count / tx:>13,.0f}{ratio:>6.2f}x"
              f"{SEND_TARGET:>6.1f}x {verdict(ratio, SEND_TARGET):<6}{fsync * 1e3:>6.0f}"
              f"{count / tx_nofsync:>17,.0f}{kp / tx_nofsync:>6.2f}x{cpu / count * 1e6:>12.2f}")
    print("ratio = kafka-python encode time / txlog send+flush time; 'w/o fsync' removes the time txlog spent "
          "inside fdatasync (fsync ms, one per batch) - the disk's share, not the code's")
    for row in rows:
        lo, hi = spread(row.tx)
        fs = median_after_cold(row.tx, "fsyncs")
        fsync = median_after_cold(row.tx, "fsync")
        floor = count / fsync if fsync else float("inf")
        print(f"  {row.batch_size}:{row.linger_ms}: txlog spread {lo:.3f}..{hi:.3f} s, {fs:.0f} fsyncs "
              f"({fsync / max(fs, 1) * 1e3:.2f} ms each): fsync alone caps txlog at {floor:,.0f} rec/s "
              f"= {floor * median_after_cold(row.kp) / count:.2f}x kafka-python")


def print_transactions(samples: dict[int, list[Sample]], counts: dict[int, int], batch_size: int, reps: int) -> None:
    base = samples[0]
    base_rate = counts[0] / median_after_cold(base)
    base_rate_nofsync = counts[0] / median_after_cold(base, "without_fsync")
    print(f"\nPart 2: transactions, batch.size {batch_size}, {KEY_BYTES} B key / {VALUE_BYTES} B value; "
          f"median of {reps} runs after a cold one")
    print(f"{'records/txn':<22}{'records':>9}{'records/s':>12}{'txn/s':>9}{'ratio':>7}{'target':>8}    "
          f"{'fsyncs/txn':>11}{'fsync share':>12}{'ratio w/o fsync':>16}")
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
        if size == TXN_TARGET_AT:
            target = f"{TXN_TARGET:>7.2f} {verdict(ratio, TXN_TARGET)}"
        label = "idempotent (baseline)" if size == 0 else str(size)
        per_txn = f"{fsyncs / txns:.1f}" if txns else "-"
        txn_rate = f"{txns / wall:,.0f}" if txns else "-"
        print(f"{label:<22}{counts[size]:>9,}{rate:>12,.0f}{txn_rate:>9}{ratio:>7.2f}{target:<12}"
              f"{per_txn:>11}{share:>11.0%}{ratio_nofsync:>16.2f}")
    print("ratio = records/s against the idempotent producer's; 'w/o fsync' compares the rates with the time "
          "inside fsync/fdatasync removed from both")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000, help="records per send+flush run (default 200000)")
    parser.add_argument("--sizes", default="16384:5,1048576:100",
                        help="batch_size:linger_ms pairs for part 1 (default 16384:5,1048576:100)")
    parser.add_argument("--txn-sizes", default="1,10,100,1000", help="records per transaction (default 1,10,100,1000)")
    parser.add_argument("--txn-records", type=int, default=30_000,
                        help="records per transactional run, at most --max-txns transactions (default 30000)")
    parser.add_argument("--max-txns", type=int, default=200, help="transactions per run at most (default 200)")
    parser.add_argument("--txn-batch-size", type=int, default=DEFAULT_BATCH, help="batch_size for part 2")
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions after the cold one (default 3)")
    parser.add_argument("--dir", help="parent of the scratch directory (default <repo>/.bench-tmp)")
    parser.add_argument("--skip-send", action="store_true", help="skip part 1")
    parser.add_argument("--skip-txn", action="store_true", help="skip part 2")
    parser.add_argument("--partitions", type=int, default=1,
                        help="partitions of part 1's topic (default 1: no key is hashed)")
    parser.add_argument("--partitioner", default="murmur2", choices=["murmur2", "murmur3"],
                        help="the producer's key partitioner in part 1 (default murmur2)")
    parser.add_argument("--distinct-keys", type=int, default=0,
                        help="draw keys from this many (default 0: every key distinct)")
    parser.add_argument("--profile", action="store_true",
                        help="also cProfile one send+flush run (first --sizes entry) and one run at 1000 records/txn")
    args = parser.parse_args()

    FsyncMeter.install()
    sizes = parse_sizes(args.sizes)
    txn_sizes = [int(s) for s in args.txn_sizes.split(",")]
    records = make_records(max(args.records, args.txn_records), args.distinct_keys)
    send_records = records[:args.records]
    counts = {0: args.txn_records, **{k: min(args.txn_records, k * args.max_txns) for k in txn_sizes}}

    with scratch_dir(args.dir, "bench-producer-") as workdir:
        if not args.skip_send:
            rows = [SendRow(size, linger, [], []) for size, linger in sizes]
            for _ in range(args.reps + 1):
                for row in rows:
                    sample, row.kp_batches = kafka_python_encode(send_records, row.batch_size)
                    row.kp.append(sample)
                    sample, row.tx_batches = txlog_send(workdir, send_records, row.batch_size, row.linger_ms,
                                                        partitions=args.partitions, partitioner=args.partitioner)
                    row.tx.append(sample)
            print_send(rows, len(send_records), args.reps)
            print(f"txlog wrote to {args.partitions} partition(s) with partitioner {args.partitioner}, keys "
                  f"{'from ' + format(args.distinct_keys, ',') if args.distinct_keys else 'all distinct'}")

        if not args.skip_txn:
            samples: dict[int, list[Sample]] = {size: [] for size in counts}
            for _ in range(args.reps + 1):
                for size, rows in samples.items():
                    rows.append(txlog_transactions(workdir, records[:counts[size]], size, args.txn_batch_size))
            print_transactions(samples, counts, args.txn_batch_size, args.reps)

        if args.profile:
            size, linger = sizes[0]
            profiler = cProfile.Profile()
            txlog_send(workdir, send_records, size, linger, profiler, args.partitions, args.partitioner)
            print(f"\ncProfile of one send+flush run (batch_size {size}, linger_ms {linger}), top 25 by own time:")
            pstats.Stats(profiler, stream=sys.stdout).strip_dirs().sort_stats("tottime").print_stats(25)
            profiler = cProfile.Profile()
            txlog_transactions(workdir, records[:counts.get(TXN_TARGET_AT, args.txn_records)], TXN_TARGET_AT,
                               args.txn_batch_size, profiler)
            print(f"cProfile of one transactional run ({TXN_TARGET_AT} records/txn), top 25 by own time:")
            pstats.Stats(profiler, stream=sys.stdout).strip_dirs().sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
