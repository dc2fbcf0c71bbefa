"""`txlog mirror --from`: a Kafka cluster's topics into a store, exactly once (docs/mirror.md §2).

The cluster is read by a real Kafka client (confluent-kafka) with `isolation.level=read_committed`,
so records of aborted cluster transactions never reach the mirror at all. Each poll's records
become one store transaction, written through txlog's own transactional Producer, and the cluster
positions after those records are committed *inside the same transaction* as txlog group offsets
(`send_offsets_to_transaction` into a txlog consumer group named for the mirror). The store's
transaction coordinator commits records and positions together or neither, so a mirror killed at
any moment resumes from the last committed positions: `init_transactions` aborts whatever the dead
run left open, and the consumer seeks to the positions committed with the last copied record.
Nothing is kept on the cluster (no group, no offsets): the store alone knows how far it got.

A record keeps its partition number, key, value, headers and timestamp. Offsets are not kept:
the store assigns its own (transaction markers and the store's own history make them differ).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from storage.store import Store
from storage.topic_name import INTERNAL_PREFIX
from txlog.clients.admin import Admin
from txlog.clients.producer import Producer
from txlog.errors import IllegalArgumentError, KafkaError, TopicAlreadyExistsError, UnknownTopicOrPartitionError
from txlog.mirror.common import (
    MirrorSummary,
    Progress,
    check_partition_counts,
    cluster_error,
    mirror_name,
    require_client,
    store_topic_configs,
)
from txlog.topic_partition import OffsetAndMetadata, TopicPartition

# Records per poll, so per store transaction: large enough that the transaction's fixed cost
# (markers, the coordinator's fsyncs) is spread thin, small enough that a kill loses little work.
POLL_RECORDS = 5000
POLL_TIMEOUT_S = 0.5
# How long a metadata or config request to the cluster may take before it is an error.
ADMIN_TIMEOUT_S = 30.0


def mirror_from(
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
) -> MirrorSummary:
    """Copy the cluster's committed records of `topics` (or every non-internal topic with
    `all_topics`) into `store`.

    Without `follow` it stops once every partition has been read to its end (the last stable
    offset, as read_committed sees it); with `follow` it runs until `stop` is set. `group` names
    the mirror (`common.mirror_name`): the txlog consumer group holding its cluster positions and
    its transactional id. `client_config` is extra librdkafka settings (`-X`). Raises
    ClusterError when the cluster refuses a request.
    """
    require_client()
    import confluent_kafka as ck  # the `mirror` extra, imported only by a mirror
    import confluent_kafka.admin  # ck.admin: AdminClient, ConfigResource

    base = {"bootstrap.servers": bootstrap, **(client_config or {})}
    name = mirror_name(group, "from")
    names = _cluster_topics(ck, base, topics, all_topics)
    opened = store if isinstance(store, Store) else Store.open(store)
    try:
        summary = MirrorSummary("from", bootstrap)
        summary.topics_created = _ensure_store_topics(ck, base, opened, names)
        return _Run(ck, base, opened, names, name, summary).run(follow, progress, stop or threading.Event())
    finally:
        if opened is not store:
            opened.close()


def _cluster_topics(ck: Any, base: Mapping[str, str], topics: list[str] | None, all_topics: bool) -> dict[str, int]:
    """The topics to copy with their partition counts, from the cluster's metadata."""
    if all_topics and topics:
        raise IllegalArgumentError("name topics or give --all, not both")
    if not all_topics and not topics:
        raise IllegalArgumentError("name at least one topic to mirror (or --all)")
    admin = ck.admin.AdminClient(dict(base))
    try:
        metadata = admin.list_topics(timeout=ADMIN_TIMEOUT_S)
    except ck.KafkaException as exc:
        raise cluster_error(exc, f"reading the topics of {base['bootstrap.servers']}") from None
    found = {name: len(t.partitions) for name, t in metadata.topics.items() if t.error is None}
    if all_topics:
        # internal topics (__consumer_offsets, __transaction_state) belong to the cluster itself
        return {name: count for name, count in sorted(found.items()) if not name.startswith(INTERNAL_PREFIX)}
    assert topics is not None
    for name in topics:
        if name not in found:
            raise UnknownTopicOrPartitionError(
                f"topic '{name}' does not exist on the cluster {base['bootstrap.servers']}"
            )
    return {name: found[name] for name in dict.fromkeys(topics)}


def _cluster_configs(ck: Any, base: Mapping[str, str], names: Iterable[str]) -> dict[str, dict[str, str]]:
    """Each topic's configs that were set on the topic itself (not broker or built-in defaults)."""
    resources = [ck.admin.ConfigResource(ck.admin.ResourceType.TOPIC, name) for name in names]
    if not resources:
        return {}
    admin = ck.admin.AdminClient(dict(base))
    out: dict[str, dict[str, str]] = {}
    try:
        for resource, future in admin.describe_configs(resources, request_timeout=ADMIN_TIMEOUT_S).items():
            entries = future.result(timeout=ADMIN_TIMEOUT_S)
            out[resource.name] = {
                key: entry.value
                for key, entry in entries.items()
                if entry.source == ck.admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value and entry.value is not None
            }
    except ck.KafkaException as exc:
        raise cluster_error(exc, "reading topic configs") from None
    return out


def _ensure_store_topics(ck: Any, base: Mapping[str, str], store: Store, names: Mapping[str, int]) -> list[str]:
    """Create each missing topic in the store with the cluster's partition count and the configs
    the store knows (`common.store_topic_configs`); returns the names created. A topic already
    there (a resumed mirror) must have as many partitions: record p goes to partition p."""
    existing = set(store.list_topics())
    configs = _cluster_configs(ck, base, [n for n in names if n not in existing])
    created = []
    for name, count in names.items():
        if name not in existing:
            with contextlib.suppress(TopicAlreadyExistsError):  # meanwhile by another process: checked below
                store.create_topic(name, count, store_topic_configs(configs.get(name, {})))
                created.append(name)
                continue
        check_partition_counts(name, count, len(store.partitions(name)))
    return created


class _Run:
    """One mirroring run: the cluster consumer, the store producer and the positions between them."""

    def __init__(
        self,
        ck: Any,
        base: Mapping[str, str],
        store: Store,
        names: Mapping[str, int],
        name: str,
        summary: MirrorSummary,
    ):
        self.ck = ck
        self.base = base
        self.store = store
        self.names = names
        self.name = name
        self.summary = summary
        self.positions: dict[tuple[str, int], int] = {}  # cluster offset of the next record to copy
        self.unread: set[tuple[str, int]] = set()  # partitions not yet read to their end this run

    def run(self, follow: bool, progress: Callable[[Progress], None] | None, stop: threading.Event) -> MirrorSummary:
        # the transactional id is the mirror's name, so init_transactions fences a killed run's
        # producer and aborts what it left open: its records and the positions committed with
        # them go together, so the positions read next are exact
        producer = Producer(self.store, transactional_id=self.name)
        try:
            producer.init_transactions()
            consumer = self._consumer()
            try:
                while not stop.is_set() and (follow or self.unread):
                    self._round(consumer, producer)
                    if progress is not None:
                        progress(Progress(self.summary.records, self.summary.transactions, self._lag(consumer)))
            finally:
                consumer.close()
        except self.ck.KafkaException as exc:
            raise cluster_error(exc, f"reading from {self.base['bootstrap.servers']}") from None
        finally:
            producer.close()
        self.summary.stopped = stop.is_set()
        return self.summary

    def _consumer(self) -> Any:
        """A read_committed consumer assigned every partition at the position the store committed
        (the beginning where none was). It joins no group: nothing is committed on the cluster,
        and `group.id` only satisfies the client (librdkafka wants one for a consumer)."""
        consumer = self.ck.Consumer(
            {
                **self.base,
                "group.id": self.name,
                "isolation.level": "read_committed",
                "enable.auto.commit": "false",
                "enable.auto.offset.store": "false",
                "enable.partition.eof": "true",
                "auto.offset.reset": "earliest",
            }
        )
        with Admin(self.store) as admin:
            committed = admin.list_consumer_group_offsets(self.name)
        assignment = []
        for topic, count in self.names.items():
            for p in range(count):
                at = committed.get(TopicPartition(topic, p))
                if at is not None:
                    self.positions[(topic, p)] = at.offset
                assignment.append(
                    self.ck.TopicPartition(topic, p, self.ck.OFFSET_BEGINNING if at is None else at.offset)
                )
        consumer.assign(assignment)
        self.unread = {(t.topic, t.partition) for t in assignment}
        return consumer

    def _round(self, consumer: Any, producer: Producer) -> None:
        """One poll, written as one store transaction if it brought records."""
        records = []
        for message in consumer.consume(num_messages=POLL_RECORDS, timeout=POLL_TIMEOUT_S):
            error = message.error()
            where = (message.topic(), message.partition())
            if error is None:
                records.append(message)
            elif error.code() == self.ck.KafkaError._PARTITION_EOF:
                # read_committed's end (the last stable offset) reached: in the poll's order,
                # after every record of the partition before it
                self.unread.discard(where)
            else:
                raise cluster_error(self.ck.KafkaException(error), f"reading {where[0]}-{where[1]}")
        if records:
            self._write(producer, records)

    def _write(self, producer: Producer, records: list[Any]) -> None:
        """One store transaction: the records, each in its own partition number, and the cluster
        positions after them committed inside it to the mirror's group."""
        first: dict[tuple[str, int], int] = {}
        after: dict[tuple[str, int], int] = {}
        producer.begin_transaction()
        try:
            for m in records:
                kind, ts = m.timestamp()
                producer.send(
                    m.topic(),
                    value=m.value(),
                    key=m.key(),
                    partition=m.partition(),
                    headers=m.headers(),
                    timestamp_ms=None if kind == self.ck.TIMESTAMP_NOT_AVAILABLE else ts,
                )
                first.setdefault((m.topic(), m.partition()), m.offset())
                after[(m.topic(), m.partition())] = m.offset() + 1
            offsets = {TopicPartition(t, p): OffsetAndMetadata(o) for (t, p), o in after.items()}
            producer.send_offsets_to_transaction(offsets, self.name)
            producer.commit_transaction()
        except KafkaError:
            # the store's error is the one to report; an abort that fails too changes nothing,
            # since the next run's init_transactions aborts whatever is left open
            with contextlib.suppress(KafkaError):
                producer.abort_transaction()
            raise
        self.summary.records += len(records)
        self.summary.transactions += 1
        for (t, p), end in after.items():
            self.summary.advance(t, p, first[(t, p)], end)
            self.positions[(t, p)] = end

    def _lag(self, consumer: Any) -> int:
        """Cluster records not yet copied, by the end offsets the last fetches reported (no request)."""
        lag = 0
        for (topic, p), at in self.positions.items():
            _, high = consumer.get_watermark_offsets(self.ck.TopicPartition(topic, p), cached=True)
            if high >= 0:
                lag += max(high - at, 0)
        return lag
