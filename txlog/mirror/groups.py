"""Carry a store's consumer-group positions to the cluster a mirror copied it to (docs/mirror.md §3).

Offsets differ between the store and the cluster: aborted records are not copied, each copied
transaction gets a commit marker of its own, and non-transactional data gets none. What stays
the same is the *order* of the committed records of each partition: the mirror writes every
committed source record exactly once, in order, to the same partition number, and commits its
position (the next source offset) in the same transaction as the records. So a group's source
position X translates exactly by counting:

* S, the mirror's committed position for the partition, and T, where the committed records it
  wrote end on the cluster (`MirrorPoint`): every committed record on the cluster before T is a
  copy of one committed source record before S, and the other way round;
* k = the committed source records in [X, S), the ones the group has not read yet (read from the
  store's files, the same visibility check every consumer uses: txlog.fetch);
* the cluster position is the offset of the k-th committed record counted back from T (T itself
  when k = 0): a read_committed consumer starting there sees exactly those k records next, then
  whatever the mirror copies after S.

The mirror commits S and T in one transaction (T is its `target=N` commit metadata), so the pair
is consistent even while a mirror runs. The group's consumers must be stopped: a position that
moves while it is carried has no single translation. MirrorMaker 2 translates through sparse
offset syncs and may hand a consumer some records twice; this translation is exact.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from storage.store import Store
from txlog.clients.admin import Admin
from txlog.errors import ClusterError, GroupIdNotFoundError, GroupNotEmptyError, OffsetOutOfRangeError
from txlog.fetch import IsolationLevel, fetch
from txlog.mirror.common import cluster_error

#: librdkafka's timeout for one admin request or watermark query, in seconds.
REQUEST_TIMEOUT_S = 30.0
#: How long the window read may go without a message or an end-of-partition before it gives up.
WINDOW_STALL_S = 60.0


@dataclass(frozen=True)
class MirrorPoint:
    """Where a mirror stands on one partition: source offset S and the cluster offset T it maps to."""

    source: int
    target: int


@dataclass
class CarriedGroup:
    """One group's carried positions: (topic, partition) -> (store offset, cluster offset)."""

    group: str
    offsets: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    #: partitions the group has a position on whose topic this mirror does not copy (left alone)
    skipped: list[tuple[str, int]] = field(default_factory=list)

    def line(self) -> str:
        """`Carried group G: orders [0: 120 -> 118, 1: 7 -> 7]` plus what was skipped."""
        topics = sorted({t for t, _ in self.offsets})
        parts = []
        for topic in topics:
            rows = sorted((p, span) for (t, p), span in self.offsets.items() if t == topic)
            parts.append(f"{topic} [{', '.join(f'{p}: {a} -> {b}' for p, (a, b) in rows)}]")
        text = f"Carried group {self.group}: " + ("; ".join(parts) if parts else "no positions")
        if self.skipped:
            text += " (not mirrored, left out: " + ", ".join(f"{t}-{p}" for t, p in sorted(self.skipped)) + ")"
        return text


def carry_groups(
    store: Store,
    bootstrap: str,
    groups: Iterable[str],
    *,
    client_config: Mapping[str, str],
    mirror_group: str,
) -> list[CarriedGroup]:
    """Give each of `groups` on the cluster the positions its store group has, translated exactly.

    `mirror_group` is the group in which the mirror (`txlog mirror --to`) commits its positions on
    the cluster. Raises GroupNotEmptyError while a store group has live members, GroupIdNotFoundError
    for one without committed positions, ClusterError when a position cannot be translated exactly
    (the group read past the mirror, the cluster no longer holds the records, the cluster group
    already stands elsewhere) or the cluster refuses a request; nothing is written for a group
    until all its positions translate.
    """
    from confluent_kafka.admin import AdminClient

    settings: dict[str, Any] = {**client_config, "bootstrap.servers": bootstrap}
    client = AdminClient(settings)
    points = mirror_points(client, mirror_group)
    admin = Admin(store)
    carried = []
    for group in groups:
        source = _stopped_group_offsets(admin, group)
        result = CarriedGroup(group)
        metadata: dict[tuple[str, int], str] = {}
        for tp, committed in sorted(source.items(), key=lambda item: (item[0].topic, item[0].partition)):
            key = (tp.topic, tp.partition)
            if key not in points:
                result.skipped.append(key)
                continue
            target = translate(store, key, committed.offset, points[key], settings)
            result.offsets[key] = (committed.offset, target)
            metadata[key] = committed.metadata or ""
        if result.offsets:
            _write_positions(client, group, result, metadata)
        carried.append(result)
    return carried


def mirror_points(client: Any, mirror_group: str) -> dict[tuple[str, int], MirrorPoint]:
    """The mirror's committed source position per partition, each with the cluster offset it maps to.

    The mirror commits both in one transaction (txlog/mirror/to_cluster.py): the group offset is
    the source position S and its metadata `target=N` is where the records it wrote to that
    partition end. So the pair is consistent even while a mirror keeps running. A partition
    without `target=` has had no record copied yet; its cluster side is then its last stable
    offset (nothing the mirror wrote is before it, and everything it will write comes after).
    """
    positions = _committed(client, mirror_group)
    if not positions:
        raise ClusterError(f"the mirror group '{mirror_group}' has no positions on the cluster: run the mirror first")
    targets = {key: _target_of(metadata) for key, (_, metadata) in positions.items()}
    unmapped = [key for key, target in targets.items() if target is None]
    targets.update(_stable_offsets(client, unmapped) if unmapped else {})
    return {key: MirrorPoint(offset, targets[key] or 0) for key, (offset, _) in positions.items()}


def _target_of(metadata: str) -> int | None:
    """N of the mirror's `target=N` commit metadata, None when absent."""
    name, sep, value = metadata.partition("=")
    return int(value) if sep and name == "target" and value.isdigit() else None


def translate(
    store: Store, key: tuple[str, int], source_offset: int, point: MirrorPoint, settings: Mapping[str, str]
) -> int:
    """The cluster offset at which a consumer sees next what a store consumer at `source_offset` would."""
    topic, partition = key
    if source_offset > point.source:
        raise ClusterError(
            f"{topic}-{partition}: the group's position {source_offset} is past the mirror's ({point.source}); "
            "run the mirror until it has copied what the group read"
        )
    unread = count_committed(store, key, source_offset, point.source)
    if unread == 0:
        return point.target
    return _kth_committed_before(settings, key, unread, point.target)


def count_committed(store: Store, key: tuple[str, int], start: int, end: int) -> int:
    """Committed records (what a read_committed consumer sees) at offsets in [start, end) of a store partition."""
    log = store.partition(*key)
    count, offset = 0, start
    while offset < end:
        try:
            result = fetch(log, offset, IsolationLevel.READ_COMMITTED, max_records=10_000)
        except OffsetOutOfRangeError as exc:
            raise ClusterError(
                f"{key[0]}-{key[1]}: the group's position {start} is no longer in the store ({exc}); "
                "the records it had not read are gone, so there is no exact position to carry"
            ) from exc
        count += sum(1 for r in result.records if r.offset < end)
        if result.next_offset <= offset:
            break  # at the read_committed end: nothing further is visible
        offset = result.next_offset
    return count


def _kth_committed_before(settings: Mapping[str, str], key: tuple[str, int], k: int, end: int) -> int:
    """The offset of the k-th committed record counted back from `end` on the cluster.

    Read forward through a window below `end` that doubles until it holds k committed records
    (markers and aborted records take offsets, so their number is not known in advance).
    """
    low = _low_watermark(settings, key)
    span = max(2 * k, k + 64)
    while True:
        start = max(low, end - span)
        offsets = _committed_offsets(settings, key, start, end)
        if len(offsets) >= k:
            return offsets[-k]
        if start == low:
            raise ClusterError(
                f"{key[0]}-{key[1]}: the cluster holds {len(offsets)} committed records before offset {end}, "
                f"the group had {k} left to read (retention on the cluster deleted them?)"
            )
        span *= 4


def _committed_offsets(settings: Mapping[str, str], key: tuple[str, int], start: int, end: int) -> list[int]:
    """Offsets of the committed records in [start, end) of a cluster partition (read_committed)."""
    import time

    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    consumer = Consumer(
        {
            **settings,
            "group.id": "txlog-mirror-translate",  # assign() only: nothing is committed under it
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    offsets: list[int] = []
    try:
        consumer.assign([TopicPartition(key[0], key[1], start)])
        idle_since = time.monotonic()
        while True:
            message = consumer.poll(0.5)
            if message is None:
                if time.monotonic() - idle_since > WINDOW_STALL_S:
                    raise ClusterError(f"{key[0]}-{key[1]}: reading offsets {start}..{end} from the cluster stalled")
                continue
            idle_since = time.monotonic()
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return offsets
                raise ClusterError(f"reading {key[0]}-{key[1]} from the cluster: {error.name()}: {error.str()}")
            offset = message.offset()
            if offset is None or offset >= end:
                return offsets
            offsets.append(offset)
    except KafkaException as exc:
        raise cluster_error(exc, f"reading {key[0]}-{key[1]} from the cluster") from exc
    finally:
        consumer.close()


def _low_watermark(settings: Mapping[str, str], key: tuple[str, int]) -> int:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({**settings, "group.id": "txlog-mirror-translate", "enable.auto.commit": False})
    try:
        return consumer.get_watermark_offsets(TopicPartition(*key), timeout=REQUEST_TIMEOUT_S)[0]
    except KafkaException as exc:
        raise cluster_error(exc, f"asking the cluster for {key[0]}-{key[1]}'s offsets") from exc
    finally:
        consumer.close()


def _stopped_group_offsets(admin: Admin, group: str) -> dict:
    """The store group's committed offsets; refused while it has members (they would move on)."""
    description = admin.describe_consumer_group_members(group)
    if description is not None and description.members:
        raise GroupNotEmptyError(
            f"the store group '{group}' has live members ({description.state.kafka_name}): "
            "stop its consumers before carrying its positions"
        )
    offsets = admin.list_consumer_group_offsets(group)
    if not offsets:
        raise GroupIdNotFoundError(f"the store group '{group}' has no committed positions")
    return offsets


def _committed(client: Any, group: str) -> dict[tuple[str, int], tuple[int, str]]:
    """A cluster group's committed offsets and their metadata (a pending transactional commit is not
    returned: only what a committed transaction wrote)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException

    try:
        answer = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(
            timeout=REQUEST_TIMEOUT_S
        )
    except KafkaException as exc:
        raise cluster_error(exc, f"reading group '{group}' on the cluster") from exc
    return {
        (tp.topic, tp.partition): (tp.offset, tp.metadata or "")
        for tp in answer.topic_partitions or ()
        if tp.offset >= 0
    }


def _stable_offsets(client: Any, keys: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """Each partition's last stable offset on the cluster (ListOffsets LATEST, read_committed)."""
    from confluent_kafka import IsolationLevel as ClusterIsolation
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    request = {TopicPartition(t, p): OffsetSpec.latest() for t, p in keys}
    try:
        futures = client.list_offsets(request, isolation_level=ClusterIsolation.READ_COMMITTED)
        return {(tp.topic, tp.partition): f.result(timeout=REQUEST_TIMEOUT_S).offset for tp, f in futures.items()}
    except KafkaException as exc:
        raise cluster_error(exc, "asking the cluster for the mirrored partitions' offsets") from exc


def _write_positions(client: Any, group: str, carried: CarriedGroup, metadata: Mapping[tuple[str, int], str]) -> None:
    """Set the cluster group's offsets, unless it already stands elsewhere (its consumers have run:
    moving it back would hand them records twice). Kafka refuses it while the group has members."""
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition

    existing = _committed(client, group)
    for key, (_, target) in carried.offsets.items():
        if key in existing and existing[key][0] != target:
            raise ClusterError(
                f"group '{group}' already has position {existing[key][0]} on {key[0]}-{key[1]} on the cluster "
                f"(the carried one is {target}): its consumers have run there; delete its offsets "
                "(kafka-consumer-groups.sh --delete-offsets) to carry it again"
            )
    partitions = [
        TopicPartition(t, p, target, metadata=metadata[(t, p)]) for (t, p), (_, target) in carried.offsets.items()
    ]
    try:
        client.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, partitions)])[group].result(
            timeout=REQUEST_TIMEOUT_S
        )
    except KafkaException as exc:
        raise cluster_error(exc, f"setting group '{group}''s positions on the cluster") from exc
