"""Issue 25: txlog's log cleaner against the real broker's, record for record.

The same history goes to a compacted topic on the Kafka 4.4 broker of the rig and to a txlog
topic with the same configs: keyed records from an idempotent producer, committed and aborted
transactions (so COMMIT and ABORT markers), tombstones, headers. Each side is then cleaned below
a final roll (the broker by its own cleaner thread, txlog by `Store.compact`), so what survives
does not depend on where segments were cut while writing; a second round of writes, a second
roll and a second cleaning follow, the one where delete horizons (KIP-534) can have passed.
Both read_committed and read_uncommitted views must then be the same records at the same
offsets with the same keys, values and headers, and the same batches must survive. txlog's
transactional producer ends its transactions as librdkafka does (transaction protocol v1, the
marker keeping the epoch), so both logs hold the same producer state for the cleaners to keep.

`delete.retention.ms` is chosen so both sides must agree without racing a clock: a day (every
tombstone and marker survives both cleanings) or 0 (the first cleaning stamps the horizon, the
second, later, drops what it may). The broker writes nothing while a roll is pending: segment.ms
is lowered only around the one record that rolls the segment, then raised back.

Then Kafka's DumpLogSegments reads txlog's cleaned segments and their indexes (--deep-iteration,
--print-data-log, --verify-index-only, --index-sanity-check) without an error, and prints what
`txlog inspect` prints for them, line for line.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from storage import Store
from storage.checkpoint import read_offset_checkpoint
from tests.kafka_rig.broker import KafkaBroker
from tests.kafka_rig.dump_compare import kafka_dump, txlog_inspect, unexplained
from txlog.clients.consumer import Consumer as TxlogConsumer
from txlog.clients.producer import Producer as TxlogProducer
from txlog.requests import ProducerIdAndEpoch
from txlog.topic_partition import TopicPartition as TxlogTopicPartition
from txlog.transport import Transport

WAIT_S = 120.0
LONG_SEGMENT_MS = "604800000"
Record = tuple[bytes, bytes | None, list[tuple[str, bytes | None]]]
Seen = tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]
# a batch as the cleaner left it: base and last offset, producer id, control or not, record count,
# whether it carries a delete horizon
Shape = tuple[int, int, int, bool, int, bool]


@dataclass(frozen=True)
class Step:
    """One write: plain records (idempotent producer) or a transaction ending `commit` or `abort`."""

    records: tuple[Record, ...]
    end: str | None = None  # None: not transactional


def _record(key: str, value: str | None, tag: int) -> Record:
    headers = [("h", f"{tag}".encode()), ("null", None)] if tag % 3 == 0 else []
    return key.encode(), None if value is None else value.encode(), headers


def first_round() -> list[Step]:
    """Overwritten keys, tombstones inside and outside transactions, an aborted overwrite of live keys,
    a transaction whose every record is later overwritten (its COMMIT marker may go), a tombstone
    whose key is written again afterwards."""
    steps = [Step(tuple(_record(f"k{k}", f"v0-{k}", k) for k in range(8)))]
    steps.append(Step(tuple(_record(f"k{k}", f"t1-{k}", k) for k in (0, 1, 2)), "commit"))
    steps.append(Step(tuple(_record(f"k{k}", f"aborted-{k}", k) for k in (3, 4, 5)), "abort"))
    steps.append(Step((_record("k1", None, 1), _record("k6", "v1-6", 6))))
    steps.append(Step((_record("k2", None, 2), _record("k7", "t2-7", 7)), "commit"))
    steps.append(Step(tuple(_record(f"k{k}", f"v2-{k}", k + 10) for k in (0, 7))))
    steps.append(Step((_record("k3", None, 3),), "abort"))
    steps.append(Step((_record("k4", None, 4), _record("k1", "back-1", 1))))
    steps.append(Step(tuple(_record(f"s{k}", f"short-{k}", k) for k in range(3)), "commit"))
    steps.append(Step(tuple(_record(f"s{k}", f"over-{k}", k) for k in range(3))))
    return steps


def second_round() -> list[Step]:
    """New dirty data, so the broker's cleaner runs again (and overwrites for it to do)."""
    return [
        Step(tuple(_record(f"n{k}", f"n-{k}", k) for k in range(4))),
        Step((_record("k6", "t3-6", 6), _record("n0", None, 0)), "commit"),
        Step((_record("k5", "aborted-again", 5),), "abort"),
        Step((_record("n1", "n-1b", 1),)),
    ]


def offsets_taken(steps: list[Step]) -> int:
    """Records plus one marker per transaction: how far the log end moves."""
    return sum(len(s.records) + (s.end is not None) for s in steps)


# ---- the broker's side ----------------------------------------------------------------------------------


class BrokerSide:
    def __init__(self, broker: KafkaBroker, topic: str):
        self.broker, self.topic = broker, topic
        self.plain = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 0})
        self.txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"{topic}-txn", "linger.ms": 0})
        self.txn.init_transactions(60)
        self.admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        self.watcher = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{topic}-watch"})
        self.end = 0

    def write(self, steps: list[Step]) -> None:
        for step in steps:
            producer = self.plain if step.end is None else self.txn
            if step.end is not None:
                producer.begin_transaction()
            for key, value, headers in step.records:
                producer.produce(self.topic, value, key, 0, headers=headers)
                producer.flush(60)  # a batch per record on both sides: what the cleaners keep is comparable
            if step.end == "commit":
                producer.commit_transaction(60)
            elif step.end == "abort":
                producer.abort_transaction(60)
            self.end += len(step.records) + (step.end is not None)
            # markers are written after EndTxn answers: wait for them, so the next step's offsets are known
            self._wait_for_end(self.end)

    def _wait_for_end(self, end: int) -> None:
        deadline = time.monotonic() + WAIT_S
        while self.watcher.get_watermark_offsets(TopicPartition(self.topic, 0), 30, cached=False)[1] < end:
            assert time.monotonic() < deadline, f"the broker's log did not reach offset {end}"
            time.sleep(0.05)

    def _segment_ms(self, value: str) -> None:
        entry = ConfigEntry("segment.ms", value, incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource(ResourceType.TOPIC, self.topic, incremental_configs=[entry])
        for future in self.admin.incremental_alter_configs([resource]).values():
            future.result(60)

    def roll_and_clean(self, marker: str) -> None:
        """Roll the active segment with one more record, then wait until the cleaner has cleaned below it."""
        self._segment_ms("100")
        time.sleep(1.5)  # past segment.ms, and the config change has reached the log
        self.write([Step(((f"roll-{marker}".encode(), b"roll", []),))])
        self._segment_ms(LONG_SEGMENT_MS)
        rolled = self.end - 1
        assert os.path.exists(os.path.join(self.broker.partition_dir(self.topic), f"{rolled:020d}.log"))
        self._wait_for_cleaner(rolled)

    def _wait_for_cleaner(self, offset: int) -> None:
        checkpoint = os.path.join(self.broker.log_dir, "cleaner-offset-checkpoint")
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                with open(checkpoint) as f:
                    entries = [line.split(" ") for line in f.read().splitlines()[2:]]
            except FileNotFoundError:
                entries = []
            if any(t == self.topic and int(o) >= offset for t, _, o in entries):
                return
            assert time.monotonic() < deadline, f"the broker's cleaner did not clean {self.topic} below {offset}"
            time.sleep(0.25)

    def view(self, isolation: str) -> list[Seen]:
        consumer = Consumer(
            {
                "bootstrap.servers": self.broker.bootstrap,
                "group.id": f"{self.topic}-{isolation}",
                "isolation.level": isolation,
                "enable.partition.eof": True,
                "enable.auto.commit": False,
            }
        )
        consumer.assign([TopicPartition(self.topic, 0, 0)])
        seen: list[Seen] = []
        deadline = time.monotonic() + WAIT_S
        try:
            while True:
                assert time.monotonic() < deadline, "the broker's consumer did not reach the end"
                m = consumer.poll(1.0)
                if m is None:
                    continue
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        return seen
                    raise AssertionError(f"consumer: {m.error()}")
                seen.append((m.offset(), m.key(), m.value(), tuple(m.headers() or ())))
        finally:
            consumer.close()

    def close(self) -> None:
        self.watcher.close()


# ---- txlog's side ---------------------------------------------------------------------------------------


class TransactionV1Transport(Transport):
    """EndTxn as librdkafka sends it (below v5, transaction protocol v1): the marker keeps the epoch.

    The cleaners' inputs must match producer state and all. An epoch-bumping marker (protocol v2,
    txlog's own producer) clears the producer's batch metadata on both brokers (Kafka's
    ProducerStateEntry.maybeUpdateProducerEpoch), so the marker, not the last data batch, is then
    what the cleaner keeps for the producer's state (docs/kafka-formats.md §11.3)."""

    def end_txn(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool, *, client_version: int = 0
    ) -> ProducerIdAndEpoch:
        return super().end_txn(transactional_id, producer_id, epoch, commit, client_version=0)


class TxlogSide:
    def __init__(self, root: str, topic: str, configs: dict[str, str]):
        self.root, self.topic = root, topic
        self.store = Store.open(root)
        self.store.create_topic(topic, 1, configs)
        self.plain = TxlogProducer(self.store, enable_idempotence=True, acks="all")
        self.txn = TxlogProducer(
            self.store, transactional_id=f"{topic}-txn", transport=TransactionV1Transport(self.store)
        )
        self.txn.init_transactions()

    def write(self, steps: list[Step]) -> None:
        for step in steps:
            producer = self.plain if step.end is None else self.txn
            if step.end is not None:
                producer.begin_transaction()
            for key, value, headers in step.records:
                producer.send(self.topic, value=value, key=key, partition=0, headers=headers or None)
                producer.flush()
            if step.end == "commit":
                producer.commit_transaction()
            elif step.end == "abort":
                producer.abort_transaction()

    def roll_and_clean(self, marker: str) -> None:
        """The roll, then `Store.compact`; the writer may have cleaned after the roll by itself (the dirty
        ratio is low), as the broker's cleaner thread does, and then there is nothing left for `compact`.
        Either way the cleaner's checkpoint, in Kafka's file, must reach the new active segment."""
        self.store.partition(self.topic, 0).roll()
        self.write([Step(((f"roll-{marker}".encode(), b"roll", []),))])
        self.store.compact(self.topic)
        cleaned = read_offset_checkpoint(os.path.join(self.root, "cleaner-offset-checkpoint"))[(self.topic, 0)]
        assert cleaned == self.store.partition(self.topic, 0).log_end_offset - 1

    def view(self, isolation: str) -> list[Seen]:
        consumer = TxlogConsumer(self.store, isolation_level=isolation)
        tp = TxlogTopicPartition(self.topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        end = consumer.end_offsets([tp])[tp]
        seen: list[Seen] = []
        idle = 0
        while consumer.position(tp) < end:
            records = consumer.poll(max_records=500)
            seen += [(r.offset, r.key, r.value, tuple(r.headers)) for r in records]
            idle = 0 if records else idle + 1
            assert idle < 100, f"the consumer stopped at {consumer.position(tp)}, before the end {end}"
        consumer.close()
        return seen

    def files(self) -> list[str]:
        directory = self.store.partition_dir(self.topic, 0)
        wanted = (".log", ".index", ".timeindex", ".txnindex")
        return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(wanted))

    def close(self) -> None:
        self.plain.close()
        self.txn.close()
        self.store.close()


# ---- the runs -------------------------------------------------------------------------------------------


def batch_shapes(directory: str) -> list[Shape]:
    """Every batch of a partition directory's segments, in offset order (segment boundaries left out)."""
    from storage.file_records import FileRecords

    shapes: list[Shape] = []
    for name in sorted(n for n in os.listdir(directory) if n.endswith(".log")):
        with FileRecords.open(os.path.join(directory, name)) as records:
            for b in records.batches():
                shapes.append(
                    (b.base_offset, b.last_offset, b.producer_id, b.is_control, b.records_count, b.has_delete_horizon)
                )
    return shapes


@dataclass
class Cleaned:
    broker: dict[str, list[Seen]]
    txlog: dict[str, list[Seen]]
    txlog_files: list[str]
    end: int
    broker_batches: list[Shape]
    txlog_batches: list[Shape]


RETENTIONS = {"tombstones-kept": "86400000", "tombstones-dropped": "0"}
ISOLATIONS = ("read_committed", "read_uncommitted")


def _configs(delete_retention_ms: str) -> dict[str, str]:
    return {
        "cleanup.policy": "compact",
        "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0",
        "delete.retention.ms": delete_retention_ms,
        "segment.ms": LONG_SEGMENT_MS,
        "index.interval.bytes": "64",  # several index entries in each cleaned segment
    }


@pytest.fixture(scope="module", params=list(RETENTIONS))
def cleaned(
    request: pytest.FixtureRequest, kafka_broker: KafkaBroker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cleaned]:
    configs = _configs(RETENTIONS[request.param])
    topic = f"compaction-oracle-{request.param}"
    # the replaced segments go at once, not a minute later (Kafka's file.delete.delay.ms; txlog has no delay)
    kafka_broker.create_topic(topic, 1, {**configs, "file.delete.delay.ms": "0"})
    broker = BrokerSide(kafka_broker, topic)
    txlog = TxlogSide(str(tmp_path_factory.mktemp("txlog-compacted")), topic, configs)
    try:
        for number, steps in enumerate((first_round(), second_round())):
            for side in (broker, txlog):
                side.write(steps)
            if RETENTIONS[request.param] == "0":
                time.sleep(0.01)  # the horizon the first cleaning stamped (its now + 0) is past
            for side in (broker, txlog):
                side.roll_and_clean(str(number))
        yield Cleaned(
            {i: broker.view(i) for i in ISOLATIONS},
            {i: txlog.view(i) for i in ISOLATIONS},
            txlog.files(),
            broker.end,
            batch_shapes(kafka_broker.partition_dir(topic)),
            batch_shapes(txlog.store.partition_dir(topic, 0)),
        )
    finally:
        broker.close()
        txlog.close()


def test_the_history_was_cleaned_on_both_sides(cleaned: Cleaned) -> None:
    """The comparison means something: records were removed (offset gaps), and both logs end alike."""
    written = offsets_taken(first_round()) + offsets_taken(second_round()) + 2
    assert cleaned.end == written
    for side in (cleaned.broker, cleaned.txlog):
        offsets = [offset for offset, *_ in side["read_uncommitted"]]
        assert len(offsets) < written - 10, "the cleaner should have removed overwritten and aborted records"


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_both_cleaners_keep_the_same_records(cleaned: Cleaned, isolation: str) -> None:
    assert cleaned.txlog[isolation] == cleaned.broker[isolation]


def test_both_cleaners_leave_the_same_batches(cleaned: Cleaned) -> None:
    """Beyond the records: the same batches survive, emptied or not (a producer's last batch keeps its
    state), markers included, with a delete horizon on the same ones. Producer ids are numbered by
    each side's own order of first use, so they are compared as that order."""

    def renumbered(shapes: list[Shape]) -> list[Shape]:
        ids: dict[int, int] = {-1: -1}
        return [(b, last, ids.setdefault(pid, len(ids) - 1), c, n, h) for b, last, pid, c, n, h in shapes]

    assert renumbered(cleaned.txlog_batches) == renumbered(cleaned.broker_batches)


def test_tombstones_are_kept_or_dropped_as_delete_retention_says(cleaned: Cleaned, request) -> None:
    tombstones = [key for _, key, value, _ in cleaned.txlog["read_uncommitted"] if value is None]
    if "tombstones-kept" in request.node.callspec.id:
        assert tombstones, "a day's delete.retention.ms keeps every tombstone through both cleanings"
    else:
        assert b"k4" not in tombstones and b"k2" not in tombstones, "horizons passed: the tombstones go"


# ---- Kafka's DumpLogSegments on txlog's cleaned files ---------------------------------------------------

DUMP_OPTIONS: dict[str, tuple[list[str], Callable[[str], bool]]] = {
    "deep-iteration": (["--deep-iteration", "--print-data-log"], lambda f: True),
    "verify-index-only": (["--verify-index-only"], lambda f: f.endswith((".index", ".timeindex"))),
    "index-sanity-check": (["--index-sanity-check"], lambda f: f.endswith((".index", ".timeindex"))),
}


@pytest.mark.parametrize("name", list(DUMP_OPTIONS))
def test_dump_log_segments_reads_the_cleaned_segments_as_inspect_does(cleaned: Cleaned, name: str) -> None:
    options, wanted = DUMP_OPTIONS[name]
    files = [f for f in cleaned.txlog_files if wanted(f)]
    assert files
    kafka, txlog = kafka_dump(options, files), txlog_inspect(options, files)
    assert kafka.returncode == 0, kafka.stderr
    # nothing wrong: the stderr blocks allowed are the offset-gap list, which a cleaned segment
    # has (that is what compaction leaves) and every segment not starting at 0 has, and a
    # `.timeindex` entry at an empty batch (a producer's last, kept for its state): DumpLogSegments
    # takes the max timestamp of the batch's records, -1 for none, where the segment's append
    # indexed the batch's max timestamp; the broker's own cleaned segment gets the same report.
    allowed = (
        r"Non-consecutive offsets in .*\.log|  -?\d+ is followed by \d+",
        r"Found timestamp mismatch in :.*\.timeindex|  Index timestamp: \d+, log timestamp: -1",
    )
    for line in kafka.stderr.splitlines():
        assert any(re.fullmatch(pattern, line) for pattern in allowed), kafka.stderr
    assert not any("invalid bytes" in line or "Mismatches in" in line for line in kafka.stdout), kafka.stdout
    # txlog's inspect reports the empty batch's entry as Kafka's tool does, and counts it as a
    # problem (exit 3) where DumpLogSegments exits 0: a known difference, not one of the cleaners
    mismatches = [line for line in kafka.stderr.splitlines() if re.fullmatch(allowed[1], line)]
    assert [line for line in txlog.stderr.splitlines() if re.fullmatch(allowed[1], line)] == mismatches
    assert txlog.returncode == (3 if mismatches else 0), txlog.stderr
    txlog_lines = txlog.stdout
    if name == "verify-index-only" and not mismatches:  # "Verified ..." only when nothing was found
        assert txlog_lines[-1].startswith("Verified ")
        txlog_lines = txlog_lines[:-1]
    assert unexplained(kafka.stdout, txlog_lines) == []
