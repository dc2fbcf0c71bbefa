"""On-demand benchmark of the Spark `txlog` sink: the same rows written to a txlog topic and as Parquet.

Run: python tests/benchmarks/bench_spark_write.py [--records N] [--partitions P] [--reps R]
         [--stream-records M] [--triggers T] [--dir DIR]

Why: the sink's promise is exactly-once writes into a log at the cost of a plain columnar
write. Spark's own Parquet writer, on the same cached DataFrame, is the baseline, measured in
the same run.

Batch: one DataFrame of N rows (default 2,000,000; a 10-byte key and a 100-byte value, binary),
P tasks (default 4), cached in memory before timing so both writers read the same rows, then per
repetition (txlog into one store, a fresh topic each time; variants interleaved, the first
repetition dropped, the median of the rest shown):
  txlog    df.write.format("txlog").option("topic", ...).mode("append").save(store)
           (P two-phase-commit transactions, the decision, the completions)
  parquet  df.write.mode("overwrite").parquet(fresh directory)
  py-floor a Python data source writer that only iterates the Arrow batches it is handed: the
           cost of the Spark -> Python hand-over any Python sink pays, shown for scale
Target: txlog >= 1.0x Parquet's rows/s.

Streaming: a txlog topic of M records (default 1,000,000, written once by the sink), read by a
txlog stream (Trigger.AvailableNow, maxOffsetsPerTrigger M/T: T micro-batches, default 4) and
written to a txlog topic, against the same stream written by Spark's Parquet file sink; each
with a fresh checkpoint and target. Records/s = M / wall time from start() to the query's end.

Each timed write is checked: the txlog target holds N (or M) records under read_committed, the
Parquet one N (or M) rows. Wall time on a shared machine includes waiting for a core.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchutil import Sample, median_after_cold, scratch_dir, spread, verdict
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

import txlog
import txlog.spark

TOPIC = "bench"
FLOOR_FORMAT = "bench_arrow_floor"


class ArrowFloor(DataSource):
    """A Python sink that only takes the Arrow batches Spark hands it: what any Python data
    source writer pays before it does anything (defined in this script, so Spark pickles it by value)."""

    @classmethod
    def name(cls) -> str:
        return FLOOR_FORMAT

    def writer(self, schema, overwrite):
        return _FloorWriter()


class _FloorWriter(DataSourceArrowWriter):
    def write(self, iterator):
        for _ in iterator:
            pass
        return WriterCommitMessage()


def _store(path: str, topics: dict[str, int]) -> str:
    shutil.rmtree(path, ignore_errors=True)
    with txlog.Admin(path) as admin:
        for topic, partitions in topics.items():
            admin.create_topic(topic, partitions)
    return path


def _committed_count(path: str, topic: str) -> int:
    """Records of `topic` a read_committed Consumer returns."""
    with txlog.Admin(path) as admin:
        tps = [txlog.TopicPartition(topic, p) for p in range(len(admin.describe_topic(topic).partitions))]
    store = txlog.Store.open(path, read_only=True)
    consumer = txlog.Consumer(store, isolation_level="read_committed", enable_auto_commit=False)
    consumer.assign(tps)
    for tp in tps:
        consumer.seek_to_beginning(tp)
    count = 0
    while batch := consumer.poll(max_records=100_000):
        count += len(batch)
    consumer.close(autocommit=False)
    store.close()
    return count


def _time(step) -> Sample:
    cpu, start = time.process_time(), time.perf_counter()
    step()
    return Sample(time.perf_counter() - start, time.process_time() - cpu)


def bench_batch(spark, work: str, records: int, partitions: int, reps: int) -> float:
    df = spark.range(0, records, numPartitions=partitions).selectExpr(
        "cast(lpad(cast(id as string), 10, '0') as binary) as key",
        "cast(concat(lpad(cast(id as string), 10, '0'), repeat('v', 90)) as binary) as value",
    )
    df = df.cache()
    assert df.count() == records
    # one store, a fresh topic per repetition: a write into a store in use (the store's internal
    # topics, made by its first transaction, exist already; the cold repetition made them)
    store = _store(os.path.join(work, "batch-store"), {})
    samples: dict[str, list[Sample]] = {"txlog": [], "parquet": [], "py-floor": []}
    for rep in range(reps):
        topic = f"{TOPIC}{rep}"
        with txlog.Admin(store) as admin:
            admin.create_topic(topic, partitions)
        samples["txlog"].append(
            _time(lambda topic=topic: df.write.format("txlog").option("topic", topic).mode("append").save(store))
        )
        assert _committed_count(store, topic) == records, "the txlog write lost or doubled rows"
        target = os.path.join(work, "batch-parquet")
        samples["parquet"].append(_time(lambda target=target: df.write.mode("overwrite").parquet(target)))
        assert spark.read.parquet(target).count() == records
        samples["py-floor"].append(_time(lambda: df.write.format(FLOOR_FORMAT).mode("append").save()))
        print("  rep", rep, ", ".join(f"{name} {s[-1].wall:.2f}s" for name, s in samples.items()))
    df.unpersist()
    return _report("batch write", records, samples, "parquet", target=1.0)


def bench_stream(spark, work: str, records: int, partitions: int, triggers: int, reps: int) -> float:
    source_store = _store(os.path.join(work, "stream-store"), {"in": partitions})
    spark.range(0, records, numPartitions=partitions).selectExpr(
        "cast(lpad(cast(id as string), 10, '0') as binary) as key",
        "cast(concat(lpad(cast(id as string), 10, '0'), repeat('v', 90)) as binary) as value",
    ).write.format("txlog").option("topic", "in").mode("append").save(source_store)
    per_trigger = str(max(1, records // triggers))

    def source():
        return (
            spark.readStream.format("txlog")
            .option("subscribe", "in")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", per_trigger)
            .load(source_store)
            .select("key", "value")
        )

    samples: dict[str, list[Sample]] = {"txlog": [], "parquet": []}
    for rep in range(reps):
        out = f"out{rep}"
        with txlog.Admin(source_store) as admin:
            admin.create_topic(out, partitions)
        checkpoint = os.path.join(work, f"ck-txlog-{rep}")

        def to_txlog(out: str = out, checkpoint: str = checkpoint) -> None:
            query = (
                source()
                .writeStream.format("txlog")
                .option("topic", out)
                .option("checkpointLocation", checkpoint)
                .trigger(availableNow=True)
                .start(source_store)
            )
            query.awaitTermination()
            assert query.exception() is None

        samples["txlog"].append(_time(to_txlog))
        assert _committed_count(source_store, out) == records
        target, pq_checkpoint = os.path.join(work, f"stream-parquet-{rep}"), os.path.join(work, f"ck-pq-{rep}")

        def to_parquet(target: str = target, pq_checkpoint: str = pq_checkpoint) -> None:
            query = (
                source()
                .writeStream.format("parquet")
                .option("path", target)
                .option("checkpointLocation", pq_checkpoint)
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()

        samples["parquet"].append(_time(to_parquet))
        assert spark.read.parquet(target).count() == records
        print(f"  rep {rep}: txlog {samples['txlog'][-1].wall:.2f}s, parquet {samples['parquet'][-1].wall:.2f}s")
    return _report("stream txlog ->", records, samples, "parquet", target=None)


def _report(title: str, records: int, samples: dict[str, list[Sample]], baseline: str, target: float | None) -> float:
    rates = {name: records / median_after_cold(s) for name, s in samples.items()}
    print(f"{title}: {records:,} records")
    for name, s in samples.items():
        low, high = spread(s)
        print(
            f"  {name:8} {rates[name]:>12,.0f} records/s  (median {median_after_cold(s):.2f}s, {low:.2f}..{high:.2f}s)"
        )
    ratio = rates["txlog"] / rates[baseline]
    goal = "" if target is None else f"  target >= {target:.1f}x: {verdict(ratio, target)}"
    print(f"  txlog / {baseline}: {ratio:.2f}x{goal}")
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--stream-records", type=int, default=1_000_000)
    parser.add_argument("--triggers", type=int, default=4)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    spark = txlog.spark.local_session("local[2]", app_name="bench-spark-write")
    spark.dataSource.register(ArrowFloor)
    try:
        with scratch_dir(args.dir, "bench-spark-write-") as work:
            bench_batch(spark, work, args.records, args.partitions, args.reps)
            bench_stream(spark, work, args.stream_records, args.partitions, args.triggers, args.reps)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
