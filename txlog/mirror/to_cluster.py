"""`txlog mirror --to`: a store's committed records re-produced on a Kafka cluster, exactly once.

Each round reads every mirrored partition from the mirror's position up to what read_committed
may see, and re-produces what it read as ONE Kafka transaction through confluent-kafka, with
the new source positions committed in that same transaction (`send_offsets_to_transaction` to
the mirror's group on the target, docs/mirror.md §1). A kill -9 at any moment therefore leaves
either the whole round (records and positions) or none of it; the restarted mirror's
`init_transactions` (same transactional id) ends the killed one's open transaction, and it
resumes from the committed positions: no duplicate, no gap.

Positions are group offsets rather than a position record in a topic of our own: the broker
already stores them atomically with the transaction, `kafka-consumer-groups.sh` shows them, and
the read back (`committed`) waits for a pending transactional commit (require_stable).
Each committed group offset is the source offset the next round starts at; its metadata is the
target partition's end after the round (`target=N`), the offset mapping group cut-over uses.

Source transaction boundaries: a round never splits a source transaction. Batches are grouped
into units (a committed transaction's batches in one partition, keyed by producer id and epoch;
or one plain batch), and each partition's round ends before any unit whose transaction is not
wholly readable everywhere yet (open, past a partition's stable offset, or past the round's byte
budget in another partition) - see `_cut`. Several source transactions may share one target
transaction (a round), which keeps per-partition order when transactions interleave; one is
never split across two. This keys a transaction by (producer id, epoch), which is unique per
transaction under transaction protocol v2 (txlog's producer, Kafka 4 clients: the epoch is
bumped at every transaction end, docs/DESIGN.md §5).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from storage.partition_log import PartitionLog
from storage.records import RecordBatch
from storage.store import Store
from txlog.errors import ClusterError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from txlog.fetch import AbortedFilter, IsolationLevel, LogBounds, latest_offset, visible_records
from txlog.mirror.common import (
    MirrorSummary,
    Progress,
    check_partition_counts,
    cluster_error,
    mirror_name,
    require_client,
    target_topic_configs,
)

#: Source bytes one round reads per partition before it stops at a unit boundary (one target transaction).
ROUND_BYTES = 8 << 20
#: How long --follow waits between looks at a caught-up store.
FOLLOW_WAIT_S = 0.2
#: librdkafka calls (init, commit, admin) wait this long before the mirror gives up with an error.
CLIENT_TIMEOUT_S = 60.0
#: Reads of the source go in pieces of about this many bytes.
READ_BYTES = 1 << 20

#: Errors of a cluster's group coordinator that pass by themselves (it is moving or loading).
TRANSIENT = frozenset({"NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE"})

NO_END = 1 << 62  # the end of a unit whose commit marker was not read


@dataclass
class _Unit:
    """Batches that must reach the target together: one committed transaction's batches in one
    partition (`key` = (producer id, epoch)), or one non-transactional batch (`key` None)."""

    key: tuple[int, int] | None
    first: int
    end: int = NO_END  # past its commit marker (or the plain batch)
    batches: list[RecordBatch] = field(default_factory=list)


@dataclass
class _PartitionRead:
    """One partition's part of a round: the units read from `start`, where reading `stopped`, and
    the transaction keys seen past that (which must not be mirrored elsewhere yet)."""

    topic: str
    partition: int
    start: int
    stopped: int
    units: list[_Unit]
    later_keys: set[tuple[int, int]]
    lag_end: int  # where read_committed's view of the partition ends now (for lag)
    cut: int = 0


def mirror_to(
    store: str | os.PathLike[str] | Store,
    bootstrap: str,
    topics: list[str] | None,
    *,
    all_topics: bool = False,
    follow: bool = False,
    client_config: dict[str, str] | None = None,
    group: str | None = None,
    progress: Callable[[Progress], None] | None = None,
    stop: threading.Event | None = None,
    round_bytes: int = ROUND_BYTES,
) -> MirrorSummary:
    """Mirror `topics` (or every non-internal topic with `all_topics`) of `store` to the cluster at `bootstrap`.

    Runs until caught up with what read_committed sees (or, with `follow`, until `stop` is set).
    `group` names the mirror (its group and transactional id, `common.mirror_name`); `client_config`
    is extra librdkafka settings (`-X`). `round_bytes` is about how many source bytes of each partition
    one target transaction takes (a source transaction is never split, so one may take more).
    Raises ClusterError when the cluster refuses a request.
    """
    require_client()
    opened = store if isinstance(store, Store) else Store.open_for_reading(store)
    try:
        names = _select_topics(opened, topics, all_topics)
        mirror = _Mirror(opened, bootstrap, names, mirror_name(group, "to"), dict(client_config or {}))
        try:
            return mirror.run(follow, progress, stop or threading.Event(), round_bytes)
        finally:
            mirror.close()
    finally:
        if opened is not store:
            opened.close()


def _select_topics(store: Store, topics: list[str] | None, all_topics: bool) -> list[str]:
    from txlog.errors import IllegalArgumentError

    if all_topics:
        if topics:
            raise IllegalArgumentError("name topics or give --all, not both")
        return store.list_topics(include_internal=False)
    if not topics:
        raise IllegalArgumentError("name at least one topic to mirror (or --all)")
    names = list(dict.fromkeys(topics))
    for name in names:
        if not store.has_topic(name):
            raise UnknownTopicOrPartitionError(f"topic '{name}' does not exist in the store")
    return names


class _Mirror:
    """One run: the clients, the positions, and the rounds."""

    def __init__(self, store: Store, bootstrap: str, topics: list[str], name: str, settings: dict[str, str]):
        self.store = store
        self.topics = topics
        self.name = name
        self.summary = MirrorSummary("to", bootstrap)
        self.base: dict[str, Any] = {"bootstrap.servers": bootstrap, **settings}
        self.producer: Any = None
        self.consumer: Any = None
        self.positions: dict[tuple[str, int], int] = {}
        self.target_ends: dict[tuple[str, int], str] = {}
        self.later: dict[tuple[str, int], _LaterKeys] = {}

    def close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()

    def run(
        self, follow: bool, progress: Callable[[Progress], None] | None, stop: threading.Event, round_bytes: int
    ) -> MirrorSummary:
        self._create_topics()
        self._start_clients()
        self._read_positions()
        while not stop.is_set():
            advanced, lag = self._round(max(1, round_bytes))
            if progress is not None:
                progress(Progress(self.summary.records, self.summary.transactions, lag))
            if advanced:
                continue
            if not follow:
                break
            stop.wait(FOLLOW_WAIT_S)
        self.summary.stopped = stop.is_set()
        return self.summary

    # -- setup ---------------------------------------------------------------------------------

    def _create_topics(self) -> None:
        """Create missing topics with the source's partition count and configs; check existing ones."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient, NewTopic

        try:
            admin = AdminClient(self.base)
            metadata = admin.list_topics(timeout=CLIENT_TIMEOUT_S)
        except KafkaException as exc:
            raise cluster_error(exc, f"listing the topics of {self.summary.bootstrap}") from None
        missing = []
        for topic in self.topics:
            count = self.store.partition_count(topic)
            if topic in metadata.topics and metadata.topics[topic].error is None:
                check_partition_counts(topic, count, len(metadata.topics[topic].partitions))
            else:
                configs = target_topic_configs(self.store.topic_overrides(topic))
                missing.append(NewTopic(topic, count, replication_factor=-1, config=configs))
        if not missing:
            return
        for topic, future in admin.create_topics(missing, request_timeout=CLIENT_TIMEOUT_S).items():
            try:
                future.result()
                self.summary.topics_created.append(topic)
            except KafkaException as exc:
                if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":  # another mirror created it meanwhile
                    raise cluster_error(exc, f"creating topic '{topic}'") from None

    def _start_clients(self) -> None:
        """The transactional producer (its init ends a killed run's open transaction) and the
        consumer that only reads the group's positions and lends its group metadata."""
        from confluent_kafka import Consumer, KafkaException, Producer

        try:
            self.producer = Producer(
                {
                    "linger.ms": 5,
                    "queue.buffering.max.messages": 1_000_000,
                    **self.base,
                    "transactional.id": self.name,
                    "enable.idempotence": True,
                }
            )
            self.producer.init_transactions(CLIENT_TIMEOUT_S)
            self.consumer = Consumer(
                {**self.base, "group.id": self.name, "enable.auto.commit": False, "isolation.level": "read_committed"}
            )
        except KafkaException as exc:
            raise cluster_error(exc, f"initializing transactional id '{self.name}'") from None

    def _read_positions(self) -> None:
        """Each partition's committed position (source offset) or, the first time, the log start."""
        from confluent_kafka import KafkaException, TopicPartition

        wanted = [TopicPartition(t, p) for t in self.topics for p in self.store.partitions(t)]
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while True:
            try:
                committed = self.consumer.committed(wanted, timeout=CLIENT_TIMEOUT_S)
                break
            except KafkaException as exc:
                # a cluster whose __consumer_offsets was just created answers NOT_COORDINATOR (or
                # COORDINATOR_LOAD_IN_PROGRESS) for a moment; librdkafka marks those retriable
                err = exc.args[0]
                if not (err.retriable() or err.name() in TRANSIENT) or time.monotonic() > deadline:
                    raise cluster_error(exc, f"reading the positions of group '{self.name}'") from None
                time.sleep(0.5)
        for tp in committed:
            log = self.store.partition(tp.topic, tp.partition)
            start = log.log_start_offset
            if tp.offset < 0:
                position = start
            elif tp.offset < start:
                raise OffsetOutOfRangeError(
                    f"{tp.topic}-{tp.partition}: the mirror stopped at offset {tp.offset} but the store now "
                    f"starts at {start}; the records between were deleted before they were mirrored"
                )
            else:
                position = tp.offset
                self.target_ends[(tp.topic, tp.partition)] = tp.metadata or ""
            self.positions[(tp.topic, tp.partition)] = position
            self.later[(tp.topic, tp.partition)] = _LaterKeys()

    # -- rounds --------------------------------------------------------------------------------

    def _round(self, budget: int) -> tuple[bool, int]:
        """Read, cut and mirror one round; (whether any position moved, the lag after it)."""
        reads = [
            _read_partition(self.store.partition(t, p), self.positions[(t, p)], budget, self.later[(t, p)])
            for (t, p) in sorted(self.positions)
        ]
        _cut(reads)
        if not any(r.cut > r.start for r in reads) and any(r.units for r in reads) and budget < NO_END:
            return self._round(NO_END)  # transactions interleaved across the budget: take them whole
        moved = [r for r in reads if r.cut > r.start]
        lag = sum(max(0, r.lag_end - r.cut) for r in reads)
        if moved:
            self._mirror(moved)
        return bool(moved), lag

    def _mirror(self, reads: list[_PartitionRead]) -> None:
        """One target transaction: the kept records of every partition read, then their new positions."""
        from confluent_kafka import KafkaException, TopicPartition

        producer = self.producer
        delivered: dict[tuple[str, int], int] = {}
        failures: list[str] = []

        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                failures.append(f"{err.name()}: {err.str()}")
            else:
                tp = (msg.topic(), msg.partition())
                delivered[tp] = max(delivered.get(tp, -1), msg.offset())

        records = 0
        try:
            producer.begin_transaction()
            for read in reads:
                for key, value, headers, timestamp in _kept_records(read):
                    self._produce(read.topic, read.partition, key, value, headers, timestamp, on_delivery)
                    records += 1
            producer.flush(CLIENT_TIMEOUT_S)
            if failures:
                raise ClusterError(f"producing to {self.summary.bootstrap}: {failures[0]}")
            offsets = []
            for read in reads:
                tp = (read.topic, read.partition)
                if tp in delivered:
                    self.target_ends[tp] = f"target={delivered[tp] + 1}"
                offsets.append(TopicPartition(read.topic, read.partition, read.cut, self.target_ends.get(tp, "")))
            producer.send_offsets_to_transaction(offsets, self.consumer.consumer_group_metadata(), CLIENT_TIMEOUT_S)
            producer.commit_transaction(CLIENT_TIMEOUT_S)
        except KafkaException as exc:
            raise cluster_error(exc, f"mirroring a transaction to {self.summary.bootstrap}") from None
        for read in reads:
            self.positions[(read.topic, read.partition)] = read.cut
            self.summary.advance(read.topic, read.partition, read.start, read.cut)
        self.summary.records += records
        self.summary.transactions += 1

    def _produce(self, topic: str, partition: int, key, value, headers, timestamp: int, on_delivery) -> None:
        """One record to the same partition number, waiting for room when librdkafka's queue is full."""
        while True:
            try:
                self.producer.produce(
                    topic,
                    value=value,
                    key=key,
                    partition=partition,
                    timestamp=timestamp,
                    headers=headers or None,
                    on_delivery=on_delivery,
                )
                return
            except BufferError:
                self.producer.poll(0.1)


def _kept_records(read: _PartitionRead) -> Iterable[tuple[Any, Any, Any, int]]:
    """(key, value, headers, timestamp) of the records a round keeps from one partition, in offset order."""
    batches = sorted(
        (b for unit in read.units if unit.end <= read.cut for b in unit.batches), key=lambda b: b.base_offset
    )
    for batch in batches:
        for record in visible_records(batch, read.start, read.cut):
            _, timestamp, key, value, headers = record[:5]
            yield key, value, headers, timestamp


def _read_partition(log: PartitionLog, start: int, budget: int, later_keys: _LaterKeys) -> _PartitionRead:
    """Units from `start` up to read_committed's end (or about `budget` bytes), and the keys past them."""
    bounds = LogBounds.of(log, IsolationLevel.READ_COMMITTED)
    upper = latest_offset(bounds, IsolationLevel.READ_COMMITTED)
    units: list[_Unit] = []
    open_units: dict[int, _Unit] = {}
    aborted = AbortedFilter(())
    position, used = start, 0
    while position < upper and used < budget:
        batches = log.read(position, READ_BYTES, max_offset=upper)
        if not batches:
            break
        aborted.add(log.aborted_transactions(position, batches[-1].next_offset))
        for batch in batches:
            position = batch.next_offset
            if batch.last_offset < start:
                continue
            _walk(batch, aborted, units, open_units)
            used += batch.size
            if used >= budget:
                break  # the round ends at a batch boundary; units left open here are cut by `_cut`
    stopped = min(position, upper) if position > start else start
    later = later_keys.keys(log, stopped, bounds.log_end_offset)
    return _PartitionRead(log.topic, log.partition, start, stopped, units, later, upper)


def _walk(batch: RecordBatch, aborted: AbortedFilter, units: list[_Unit], open_units: dict[int, _Unit]) -> None:
    """Put one batch (in log order) into its unit; a COMMIT marker closes its producer's unit."""
    if batch.is_control and batch.has_producer_id and not batch.is_abort_marker():
        unit = open_units.pop(batch.producer_id, None)
        if unit is not None:
            unit.end = batch.next_offset
    if aborted.skip(batch):
        return  # a control batch, or data of an aborted transaction
    if batch.is_transactional:
        unit = open_units.get(batch.producer_id)
        if unit is None:
            unit = open_units[batch.producer_id] = _Unit((batch.producer_id, batch.producer_epoch), batch.base_offset)
            units.append(unit)
        unit.batches.append(batch)
    else:
        units.append(_Unit(None, batch.base_offset, batch.next_offset, [batch]))


class _LaterKeys:
    """(producer id, epoch) of the transactional data batches of one partition from an offset to its end.

    Kept between rounds: each round asks from where its read stopped, which only moves forward
    (or back a little, to a cut), so the log is scanned once, not once per round, and the entries
    a round has passed are dropped from the front.
    """

    def __init__(self) -> None:
        self.entries: deque[tuple[int, tuple[int, int]]] = deque()  # (base offset, key), in log order
        self.counts: Counter[tuple[int, int]] = Counter()
        self.scanned_from = self.scanned_to = 0

    def keys(self, log: PartitionLog, start: int, end: int) -> set[tuple[int, int]]:
        """The keys in [start, end): from the entries kept, plus a scan of what was appended since."""
        if start < self.scanned_from or start > self.scanned_to:
            self.entries.clear()
            self.counts.clear()
            self.scanned_from = self.scanned_to = start
        while self.entries and self.entries[0][0] < start:
            _, key = self.entries.popleft()
            self.counts[key] -= 1
            if not self.counts[key]:
                del self.counts[key]
        self.scanned_from = start
        position = self.scanned_to
        while position < end:
            try:
                batches = log.read(position, READ_BYTES, max_offset=end)
            except OffsetOutOfRangeError:
                break
            if not batches:
                break
            for b in batches:
                if b.is_transactional and not b.is_control and b.base_offset >= position:
                    key = (b.producer_id, b.producer_epoch)
                    self.entries.append((b.base_offset, key))
                    self.counts[key] += 1
            position = batches[-1].next_offset
        self.scanned_to = max(self.scanned_to, position)
        return set(self.counts)


def _cut(reads: list[_PartitionRead]) -> None:
    """Set each read's `cut`: the offset its round ends at, so that no source transaction is split.

    A partition ends before its first unit that is unfinished (no commit marker read) or whose
    transaction is excluded; a transaction is excluded when any partition has some of it past
    that partition's cut. Cuts only move down, so repeating until nothing changes ends.
    """
    excluded: set[tuple[int, int]] = set().union(*(r.later_keys for r in reads)) if reads else set()
    for read in reads:
        read.cut = read.stopped
    changed = True
    while changed:
        changed = False
        for read in reads:
            cut = read.cut
            for unit in sorted(read.units, key=lambda u: u.first):
                if unit.first >= cut:
                    break
                if unit.end > cut or (unit.key is not None and unit.key in excluded):
                    cut = unit.first
                    break
            if cut != read.cut:
                read.cut, changed = cut, True
            newly = {u.key for u in read.units if u.key is not None and u.end > read.cut and u.key not in excluded}
            if newly:
                excluded |= newly
                changed = True
