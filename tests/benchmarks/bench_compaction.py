"""Log compaction (issue 25): txlog's cleaner against a real Kafka 4.4 broker's, and what compaction
does for the coordinators.

    python tests/benchmarks/bench_compaction.py [--records N] [--keys K] [--segment-mb S]
                                                [--commits N] [--offsets-segment-kb S] [--reps R]
                                                [--big] [--dir D]
                                                [--skip-broker] [--skip-offsets]

(a) Cleaner throughput, MB/s of dirty log. The same `--records` keyed records (10-byte key over
`--keys` distinct keys, 100-byte value, batches of 512 records, no compression) are written to a
txlog topic (straight through `PartitionLog.append`, untimed) and, through confluent-kafka, to a
topic on the rig's broker (tests/kafka_rig), both with `segment.bytes` = `--segment-mb`. The
broker's topic is created with `cleanup.policy=delete` and switched to `compact` (with
`min.cleanable.dirty.ratio=0.01`) once every record is in, so its cleaner makes one pass over the
whole dirty log, as `Store.compact` does. Dirty bytes are the `.log` bytes below the active
segment before cleaning (what both cleaners may touch). Timed: txlog, the wall time of
`Store.compact` in this process; the broker, the time between its cleaner's "Beginning cleaning
of log" line and its stats line ("Log cleaner thread 0 cleaned log ..."), by the broker's own
log4j clock (ms), with the broker's self-reported MB/sec printed beside it.

(b) Opening the coordinators: `Store.open` + `GroupOffsets(store)` reading every group's
committed offsets + `TransactionCoordinator(store).list_transactions()`, on a store before and
after `--commits` offset commits (`--big`: a million). The commits are written in bulk with the
coordinator's own encoder (`GroupOffsets.encode_commit`: the records `commit` writes, one batch
per commit of 10 partitions, 20 groups), without fsync (setup only). Two stores with the same
commits: `__consumer_offsets` compacted (cleanup.policy=compact: the roll trigger cleans while the
commits go in, then one `Store.compact`) and not compacted (cleanup.policy=delete, no retention:
the log as it was before compaction existed). Both get `segment.bytes` = `--offsets-segment-kb` (256 KiB):
at the internal topics' 100 MiB (Kafka's offsets.topic.segment.bytes) a million commits (~55 MB
over 8 partitions) never leave the active segments, and neither Kafka nor txlog cleans an active
segment, so there compaction would change nothing. Each open is timed twice: "replay" with the
coordinators' state snapshots deleted first (the whole partition read), and "snapshot" (the
snapshot the previous open wrote, plus the tail).

(c) The size of `__consumer_offsets` (every file of its partition directories, and its `.log`
files) after those commits, compacted against not.

Repetitions: each timed thing is repeated `--reps` times, the first (cold) repetition dropped,
the median of the rest printed (benchutil's rule), the broker and txlog interleaved per repetition.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import sys
import time
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [ROOT, HERE]

from benchutil import FsyncMeter, MiB, Sample, fsync_skipped, median_after_cold, scratch_dir, timed, warm_median  # noqa: E402

from storage import Store  # noqa: E402
from storage.records import build_batch  # noqa: E402
from storage.topic_name import CONSUMER_OFFSETS_TOPIC  # noqa: E402

VALUE = b"v" * 100
BATCH_RECORDS = 512
GROUPS = 20
PARTITIONS_PER_COMMIT = 10
STALL_S = 300.0
LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")


def key(i: int, keys: int) -> bytes:
    return b"k%09d" % (i % keys)


def record_batches(records: int, keys: int, ts: int) -> list[bytes]:
    out = []
    for start in range(0, records, BATCH_RECORDS):
        n = min(BATCH_RECORDS, records - start)
        out.append(build_batch([(key(start + j, keys), VALUE, None, ts) for j in range(n)]))
    return out


def dirty_bytes(part_dir: str) -> int:
    """`.log` bytes below the active (last) segment: what a cleaner may clean."""
    logs = sorted(glob.glob(os.path.join(part_dir, "*.log")))
    return sum(os.path.getsize(p) for p in logs[:-1])


def dir_bytes(paths: list[str], suffix: str = "") -> int:
    total = 0
    for d in paths:
        for name in os.listdir(d):
            if name.endswith(suffix):
                total += os.path.getsize(os.path.join(d, name))
    return total


# ---- (a) txlog -------------------------------------------------------------------------------------


def make_txlog_template(root: str, batches: list[bytes], segment_bytes: int) -> None:
    with fsync_skipped(), Store.open(root) as store:
        # min.cleanable.dirty.ratio 1.0: the roll trigger (cleaning when the ratio is *above* it, as
        # Kafka's) never fires while the data goes in, so the timed compact sees the whole dirty log.
        config = {"cleanup.policy": "compact", "segment.bytes": segment_bytes, "min.cleanable.dirty.ratio": "1.0"}
        store.create_topic("t", 1, config)
        log = store.partition("t", 0)
        for i in range(0, len(batches), 64):
            log.append(b"".join(batches[i : i + 64]), sync=False)


def time_txlog(template: str, scratch: str) -> tuple[float, int, float, float, object]:
    """(seconds, dirty bytes, cpu seconds, fsync seconds, stats) of one Store.compact on a fresh copy."""
    root = os.path.join(scratch, "txlog-run")
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(template, root)
    os.sync()
    dirty = dirty_bytes(os.path.join(root, "t-0"))
    with Store.open(root) as store, timed() as out:
        stats = store.compact("t")
    sample: Sample = out[0]
    return sample.wall, dirty, sample.cpu, sample.fsync, stats[0] if stats else None


# ---- (a) the broker --------------------------------------------------------------------------------


def broker_produce(broker, topic: str, records: int, keys: int) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "linger.ms": 50, "batch.size": 1 << 20, "compression.type": "none"}
    )
    for i in range(records):
        while True:
            try:
                producer.produce(topic, key=key(i, keys), value=VALUE, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
    left = producer.flush(120)
    if left:
        raise RuntimeError(f"{left} records not delivered to the broker")


def broker_compact(broker, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    entries = [
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("min.cleanable.dirty.ratio", "0.01", incremental_operation=AlterConfigOpType.SET),
    ]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(60)


def _log_time(line: str) -> float:
    m = LOG_TIME.match(line)
    if not m:
        raise RuntimeError(f"no timestamp on the broker's log line: {line!r}")
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()


def wait_cleaned(broker, topic: str) -> tuple[float, float]:
    """(seconds the broker's cleaner took by its own log clock, its self-reported MB/sec) of `topic`'s
    first cleaning."""
    name = f"{topic}-0"
    deadline = time.monotonic() + STALL_S
    while time.monotonic() < deadline:
        with open(broker.server_log, errors="replace") as f:
            lines = f.read().splitlines()
        begin = next((i for i, ln in enumerate(lines) if f"Beginning cleaning of log {name}" in ln), None)
        if begin is not None:
            for i in range(begin, len(lines)):
                if f"cleaned log {name} " in lines[i]:
                    # The stats message spans lines; the line that opens it carries the timestamp.
                    rate = next(
                        (
                            float(m.group(1).replace(",", ""))
                            for ln in lines[i : i + 4]
                            if (m := re.search(r"\(([\d,.]+) MB/sec\)", ln))
                        ),
                        float("nan"),
                    )
                    stamped = next(ln for ln in reversed(lines[: i + 1]) if LOG_TIME.match(ln))
                    return _log_time(stamped) - _log_time(lines[begin]), rate
        time.sleep(0.2)
    raise RuntimeError(f"the broker's cleaner did not clean {name} within {STALL_S:.0f} s")


def bench_cleaner(args: argparse.Namespace, scratch: str) -> None:
    from tests.kafka_rig.broker import KafkaBroker

    segment_bytes = args.segment_mb * MiB
    batches = record_batches(args.records, args.keys, int(time.time() * 1000))
    template = os.path.join(scratch, "txlog-template")
    make_txlog_template(template, batches, segment_bytes)
    del batches
    broker = None
    if not args.skip_broker:
        broker = KafkaBroker(os.path.join(scratch, "broker"), heap="768m").start()
    txlog_rates, kafka_rates, kafka_self, txlog_cpu = [], [], [], []
    try:
        for rep in range(args.reps):
            seconds, dirty, cpu, fsync, stats = time_txlog(template, scratch)
            txlog_rates.append(dirty / MiB / seconds)
            txlog_cpu.append(dirty / MiB / cpu if cpu else float("nan"))
            line = f"rep {rep}: txlog {dirty / MiB:.1f} MiB dirty in {seconds:.2f} s ({fsync:.2f} s in fsync)"
            if stats is not None:
                line += f" ({stats.records_read:,} read, {stats.records_retained:,} kept, {stats.passes} pass(es))"
            if broker is not None:
                topic = f"bench-{rep}"
                broker.create_topic(topic, 1, {"cleanup.policy": "delete", "segment.bytes": str(segment_bytes)})
                broker_produce(broker, topic, args.records, args.keys)
                time.sleep(1)  # the broker's own writes settle before its dirty bytes are counted
                kdirty = dirty_bytes(broker.partition_dir(topic))
                broker_compact(broker, topic)
                kseconds, krate = wait_cleaned(broker, topic)
                kafka_rates.append(kdirty / MiB / kseconds if kseconds > 0 else float("inf"))
                kafka_self.append(krate)
                line += f"; kafka {kdirty / MiB:.1f} MiB dirty in {kseconds:.3f} s (it says {krate} MB/sec)"
            print(line, flush=True)
    finally:
        if broker is not None:
            broker.stop()
    print()
    print("(a) cleaner throughput, MiB/s of dirty log (median after the cold repetition)")
    tx = warm_median(txlog_rates)
    print(f"    txlog Store.compact     {tx:8.1f} MiB/s   ({warm_median(txlog_cpu):.1f} per CPU s)")
    if kafka_rates:
        ka = warm_median(kafka_rates)
        ks = warm_median(kafka_self)
        print(f"    Kafka 4.4 log cleaner   {ka:8.1f} MiB/s   (self-reported {ks:.1f} MB/sec)")
        print(f"    txlog / Kafka           {tx / ka:8.2f}x")
    print()


# ---- (b), (c) the coordinators ---------------------------------------------------------------------


def _offsets_dirs(root: str) -> list[str]:
    return sorted(glob.glob(os.path.join(root, f"{CONSUMER_OFFSETS_TOPIC}-*")))


def make_offsets_store(root: str, commits: int, policy: str, segment_bytes: int) -> None:
    """A store with `commits` offset commits of GROUPS groups, written with GroupOffsets' encoder."""
    from txlog.coordinator.group_offsets import GroupOffsets
    from txlog.coordinator.transaction_coordinator import TransactionCoordinator
    from txlog.topic_partition import TopicPartition

    with fsync_skipped(), Store.open(root) as store:
        offsets = GroupOffsets(store)
        groups = [f"group-{g}" for g in range(GROUPS)]
        for g in groups:
            offsets.commit(g, {TopicPartition("in", p): 0 for p in range(PARTITIONS_PER_COMMIT)})
        TransactionCoordinator(store).list_transactions()  # its topic exists, as in a used store
        store.alter_topic_config(CONSUMER_OFFSETS_TOPIC, {"cleanup.policy": policy, "segment.bytes": segment_bytes})
        now = int(time.time() * 1000)
        per_partition: dict[int, list[bytes]] = {}
        for c in range(commits // PARTITIONS_PER_COMMIT):
            group = groups[c % GROUPS]
            records = [
                (*offsets.encode_commit(group, TopicPartition("in", p), c + 1, now), None, now)
                for p in range(PARTITIONS_PER_COMMIT)
            ]
            per_partition.setdefault(offsets.partition_for(group), []).append(build_batch(records))
        for p, batches in per_partition.items():
            log = store.partition(CONSUMER_OFFSETS_TOPIC, p)
            for i in range(0, len(batches), 500):
                log.append(b"".join(batches[i : i + 500]), sync=False)
        if policy == "compact":
            store.compact(CONSUMER_OFFSETS_TOPIC)


def _drop_state_snapshots(root: str) -> None:
    """The coordinators' replayed-state snapshots (not the producer-state `.snapshot` files)."""
    for d in _offsets_dirs(root) + sorted(glob.glob(os.path.join(root, "__transaction_state-*"))):
        for name in os.listdir(d):
            if name.startswith("txlog-"):
                os.unlink(os.path.join(d, name))


def open_coordinators(root: str, expect: int | None) -> None:
    from txlog.coordinator.group_offsets import GroupOffsets
    from txlog.coordinator.transaction_coordinator import TransactionCoordinator
    from txlog.topic_partition import TopicPartition

    with Store.open(root) as store:
        offsets = GroupOffsets(store)
        for g in range(GROUPS):
            got = offsets.committed(f"group-{g}", [TopicPartition("in", 0)])
            if expect is not None:
                assert got[TopicPartition("in", 0)].offset >= expect, f"group-{g}: committed {got}"
        TransactionCoordinator(store).list_transactions()


def bench_offsets(args: argparse.Namespace, scratch: str) -> None:
    segment_bytes = args.offsets_segment_kb * 1024
    stores = {}
    for name, commits, policy in (
        ("before", 0, "compact"),
        ("after, compacted", args.commits, "compact"),
        ("after, not compacted", args.commits, "delete"),
    ):
        root = os.path.join(scratch, name.replace(", ", "-").replace(" ", "-"))
        began = time.perf_counter()
        make_offsets_store(root, commits, policy, segment_bytes)
        print(f"setup {name}: {commits:,} commits in {time.perf_counter() - began:.1f} s", flush=True)
        stores[name] = root
    os.sync()
    results: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.reps):
        for name, root in stores.items():
            expect = args.commits // PARTITIONS_PER_COMMIT - GROUPS if name != "before" else None
            _drop_state_snapshots(root)
            with timed() as out:
                open_coordinators(root, expect)
            results.setdefault((name, "replay"), []).append(out[0].wall)
            with timed() as out:
                open_coordinators(root, expect)
            results.setdefault((name, "snapshot"), []).append(out[0].wall)
    print()
    print(f"(b) opening the coordinators (Store.open + GroupOffsets of {GROUPS} groups + TransactionCoordinator), ms")
    print(f"    {'store':24} {'replay':>10} {'snapshot':>10}")
    for name in stores:
        cells = [
            median_after_cold([Sample(s, 0.0) for s in results[(name, how)]]) * 1000 for how in ("replay", "snapshot")
        ]
        print(f"    {name:24} {cells[0]:10.1f} {cells[1]:10.1f}")
    print()
    print(f"(c) size of {CONSUMER_OFFSETS_TOPIC} after {args.commits:,} commits")
    for name, root in stores.items():
        dirs = _offsets_dirs(root)
        total, logs = dir_bytes(dirs), dir_bytes(dirs, ".log")
        segments = len([n for d in dirs for n in os.listdir(d) if n.endswith(".log")])
        print(f"    {name:24} {total / MiB:9.2f} MiB in all, {logs / MiB:9.2f} MiB of .log, {segments} segments")


def main() -> int:
    FsyncMeter.install()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=None, help="records cleaned in (a) (default 400,000; --big 2M)")
    ap.add_argument("--keys", type=int, default=None, help="distinct keys in (a) (default records / 10)")
    ap.add_argument("--segment-mb", type=int, default=8, help="segment.bytes of every cleaned topic, MiB")
    ap.add_argument(
        "--offsets-segment-kb", type=int, default=256, help="segment.bytes of __consumer_offsets in (b)/(c), KiB"
    )
    ap.add_argument("--commits", type=int, default=None, help="offset commits in (b)/(c) (default 200,000; --big 1M)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions, the first (cold) one dropped")
    ap.add_argument("--big", action="store_true", help="2,000,000 records and a million commits")
    ap.add_argument("--skip-broker", action="store_true", help="(a) without the broker")
    ap.add_argument("--skip-offsets", action="store_true", help="only (a)")
    ap.add_argument("--dir", default=None, help="scratch parent directory (default <repo>/.bench-tmp)")
    args = ap.parse_args()
    args.records = args.records or (2_000_000 if args.big else 400_000)
    args.keys = args.keys or max(1, args.records // 10)
    args.commits = args.commits or (1_000_000 if args.big else 200_000)
    with scratch_dir(args.dir, "compaction-") as scratch:
        bench_cleaner(args, scratch)
        if not args.skip_offsets:
            bench_offsets(args, scratch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
