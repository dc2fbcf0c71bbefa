"""`txlog mirror --to` against a plain confluent-kafka copy loop, both into the rig's real Kafka 4.4 broker.

    python tests/benchmarks/bench_mirror.py [--records N] [--txn-records N] [--partitions P]
                                            [--reps R] [--big] [--dir D]

The data: `--records` records (10-byte key, 100-byte value) in transactions of `--txn-records`
across `--partitions` partitions, written once per repetition to a store topic `bench-R` and,
with the same keys, values and transaction sizes, to a Kafka topic `source-R` on the broker
(untimed setup).

Two copies per repetition, each of the same records into a fresh topic on the same broker:

* `txlog mirror`: `txlog.mirror.to_cluster.mirror_to` (in this process, as `txlog mirror --to`
  runs it) copies the store topic, one Kafka transaction per source transaction, its own
  position committed in each;
* `copy loop`: what an exactly-once Kafka-to-Kafka copy is without MirrorMaker's Connect worker
  around it: a read_committed confluent-kafka consumer on `source-R` and a transactional
  producer, one transaction per `consume()` batch with the consumer's positions committed in it
  (`send_offsets_to_transaction`), until the positions reach the end offsets.

Why not MirrorMaker 2 itself: MM2's source would have to be `txlog serve` on the store, and a
dedicated MM2 runs a Connect worker whose start-up, group rebalance and periodic offset flushes
(exactly-once source tasks commit on `offset.flush.interval.ms`) dominate a copy of this size, so
its end-to-end time would measure Connect's timers rather than copying. The copy loop is the
floor such a pipeline cannot beat with the same client library (librdkafka), and it reads from
a broker, which is the fastest source a Kafka client has.

Records per second over the wall time of each copy (client creation included, broker start and
data setup not); the first (cold) repetition is dropped and the median of the rest printed, with
the ratio mirror / copy loop (goal >= 1.0). Each copy is checked afterwards: the target topic
holds exactly `--records` committed records.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from functools import partial

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [ROOT, HERE]

from benchutil import after_cold, fsync_skipped, scratch_dir, warm_median  # noqa: E402
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402

from tests.kafka_rig.broker import KafkaBroker  # noqa: E402

VALUE = b"v" * 100
DEFAULT_RECORDS = 100_000
BIG_RECORDS = 1_000_000
STALL_S = 60.0  # a copy that makes no progress this long has failed


def keys(records: int) -> list[bytes]:
    """10-byte keys, distinct enough to spread over the partitions."""
    return [b"k%09d" % i for i in range(records)]


def write_store(store_dir: str, topic: str, records: int, txn_records: int, partitions: int) -> None:
    """The store side of one repetition: `records` records in transactions of `txn_records`."""
    import txlog

    with fsync_skipped():
        admin = txlog.Admin(store_dir)
        admin.create_topic(topic, partitions)
        admin.close()
        all_keys = keys(records)
        with txlog.Producer(store_dir, transactional_id=f"bench-{topic}") as producer:
            producer.init_transactions()
            for start in range(0, records, txn_records):
                producer.begin_transaction()
                for key in all_keys[start : start + txn_records]:
                    producer.send(topic, value=VALUE, key=key, partition=int(key[1:]) % partitions)
                producer.commit_transaction()


def write_source_topic(broker: KafkaBroker, topic: str, records: int, txn_records: int, partitions: int) -> None:
    """The copy loop's source: the same records and transactions in a topic on the broker."""
    broker.create_topic(topic, partitions)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"setup-{topic}"})
    producer.init_transactions()
    all_keys = keys(records)
    for start in range(0, records, txn_records):
        producer.begin_transaction()
        for key in all_keys[start : start + txn_records]:
            producer.produce(topic, VALUE, key, partition=int(key[1:]) % partitions)
        producer.commit_transaction()


def copy_loop(bootstrap: str, source: str, target: str, partitions: int) -> int:
    """Copy `source` to `target` exactly once, one transaction per consume() batch; returns records copied."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"copy-{target}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"copy-{target}"})
    assigned = [TopicPartition(source, p, 0) for p in range(partitions)]
    consumer.assign(assigned)
    ends = {p: consumer.get_watermark_offsets(TopicPartition(source, p), timeout=30)[1] for p in range(partitions)}
    producer.init_transactions()
    copied, last_progress = 0, time.monotonic()
    while not _reached(consumer, source, ends):
        batch = consumer.consume(num_messages=10_000, timeout=0.5)
        messages = [m for m in batch if m.error() is None]
        if not messages:
            if time.monotonic() - last_progress > STALL_S:
                raise RuntimeError(f"copy loop stalled at {copied} records")
            continue
        producer.begin_transaction()
        for m in messages:
            producer.produce(
                target, m.value(), m.key(), partition=m.partition(), headers=m.headers(), timestamp=m.timestamp()[1]
            )
        producer.send_offsets_to_transaction(consumer.position(assigned), consumer.consumer_group_metadata())
        producer.commit_transaction()
        copied += len(messages)
        last_progress = time.monotonic()
    consumer.close()
    return copied


def _reached(consumer: Consumer, topic: str, ends: dict[int, int]) -> bool:
    positions = consumer.position([TopicPartition(topic, p) for p in ends])
    return all(tp.offset >= ends[tp.partition] for tp in positions if tp.offset >= 0) and all(
        tp.offset >= 0 or ends[tp.partition] == 0 for tp in positions
    )


def committed_count(bootstrap: str, topic: str, partitions: int) -> int:
    """Records a read_committed consumer sees in `topic` (the check that a copy is whole)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
    seen, idle_since = 0, time.monotonic()
    while not _reached(consumer, topic, ends) and time.monotonic() - idle_since < STALL_S:
        batch = [m for m in consumer.consume(num_messages=10_000, timeout=0.5) if m.error() is None]
        if batch:
            seen += len(batch)
            idle_since = time.monotonic()
    consumer.close()
    return seen


def run_mirror(store_dir: str, bootstrap: str, topic: str) -> None:
    """`txlog mirror --to BOOTSTRAP --topic TOPIC` in this process (the store opened by the call, as the CLI does)."""
    from txlog.mirror.to_cluster import mirror_to

    mirror_to(store_dir, bootstrap, [topic], all_topics=False, follow=False, client_config={})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--records", type=int, default=None, help=f"records per copy ({DEFAULT_RECORDS:,}; --big {BIG_RECORDS:,})"
    )
    ap.add_argument("--txn-records", type=int, default=1000, help="records per source transaction")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--reps", type=int, default=4, help="repetitions, the first (cold) one dropped")
    ap.add_argument("--big", action="store_true", help=f"{BIG_RECORDS:,} records per copy")
    ap.add_argument("--dir", default=None, help="scratch parent directory (default <repo>/.bench-tmp)")
    args = ap.parse_args()
    records = args.records or (BIG_RECORDS if args.big else DEFAULT_RECORDS)

    with scratch_dir(args.dir, "mirror-") as work:
        broker = KafkaBroker(os.path.join(work, "broker")).start()
        try:
            rates, cpu_rates = measure(broker, os.path.join(work, "store"), records, args)
        finally:
            broker.stop()
    report(rates, cpu_rates, records, args)
    return 0


def measure(
    broker: KafkaBroker, store_dir: str, records: int, args: argparse.Namespace
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Both copies per repetition, interleaved; records per wall second and per CPU second of each
    (this process's CPU, librdkafka's threads included: what the copy itself spent)."""
    rates: dict[str, list[float]] = {"txlog mirror": [], "copy loop": []}
    cpu_rates: dict[str, list[float]] = {name: [] for name in rates}
    warm_up_group_coordinator(broker)
    for rep in range(args.reps):
        store_topic, source, copy_target = f"bench-{rep}", f"source-{rep}", f"copy-{rep}"
        write_store(store_dir, store_topic, records, args.txn_records, args.partitions)
        write_source_topic(broker, source, records, args.txn_records, args.partitions)
        broker.create_topic(copy_target, args.partitions)
        copies = {
            "txlog mirror": partial(run_mirror, store_dir, broker.bootstrap, store_topic),
            "copy loop": partial(copy_loop, broker.bootstrap, source, copy_target, args.partitions),
        }
        for name, copy in copies.items():
            cpu, start = time.process_time(), time.perf_counter()
            copy()
            rates[name].append(records / (time.perf_counter() - start))
            cpu_rates[name].append(records / max(time.process_time() - cpu, 1e-9))
        check(broker.bootstrap, store_topic, records, args.partitions, "txlog mirror")
        check(broker.bootstrap, copy_target, records, args.partitions, "copy loop")
        print(f"rep {rep}: " + ", ".join(f"{name} {r[-1]:,.0f} rec/s" for name, r in rates.items()), flush=True)
    return rates, cpu_rates


def warm_up_group_coordinator(broker: KafkaBroker) -> None:
    """Have the fresh broker create `__consumer_offsets` before anything is timed: the first group
    request on a new cluster answers NOT_COORDINATOR until that topic has a leader."""
    broker.create_topic("warm-up", 1)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "warm-up", "enable.auto.commit": False})
    deadline = time.monotonic() + STALL_S
    while True:
        try:
            consumer.commit(offsets=[TopicPartition("warm-up", 0, 0)], asynchronous=False)
            break
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    consumer.close()


def check(bootstrap: str, topic: str, records: int, partitions: int, what: str) -> None:
    seen = committed_count(bootstrap, topic, partitions)
    if seen != records:
        raise SystemExit(f"{what}: {topic} holds {seen} committed records, expected {records}")


def report(
    rates: dict[str, list[float]], cpu_rates: dict[str, list[float]], records: int, args: argparse.Namespace
) -> None:
    """Medians after the cold repetition, the spread, and the ratios against the copy loop."""
    print(
        f"\n{records:,} records (10 B key, 100 B value), transactions of {args.txn_records}, "
        f"{args.partitions} partitions; median of {max(args.reps - 1, 1)} after the cold repetition"
    )
    wall = {name: warm_median(values) for name, values in rates.items()}
    cpu = {name: warm_median(values) for name, values in cpu_rates.items()}
    for name, values in rates.items():
        kept = after_cold(values)
        print(
            f"  {name:14} {wall[name]:>10,.0f} rec/s (min {min(kept):,.0f}, max {max(kept):,.0f})"
            f"   {cpu[name]:>10,.0f} rec per CPU-s"
        )
    ratio = wall["txlog mirror"] / wall["copy loop"]
    print(
        f"  ratio mirror / copy loop: {ratio:.2f}x wall (goal >= 1.0: {'ok' if ratio >= 1.0 else 'MISSED'}), "
        f"{cpu['txlog mirror'] / cpu['copy loop']:.2f}x per CPU second"
    )


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KafkaException as exc:
        sys.exit(f"Error: {exc}")
