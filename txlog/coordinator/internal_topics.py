"""The two internal topics the exactly-once layer keeps its state in, and who owns which id.

`__transaction_state` holds the transaction coordinator's log and `__consumer_offsets`
the groups' committed offsets (docs/kafka-formats.md §4), both compacted as in Kafka (the
latest record per key is the state; txlog/coordinator/replayed_state.py keeps its snapshots valid
across cleaning). Both are created on first use with
a small fixed partition count: there is one machine, and each partition is one lock,
so a handful is enough to keep unrelated transactional ids and groups from queueing
behind each other. Ids map to partitions with Kafka's own rule (docs/kafka-formats.md §4.3), so a given
transactional id lands on the partition Kafka would pick for the same count.
"""

from __future__ import annotations

from storage.errors import ReadOnlyStoreError, TopicAlreadyExistsError
from storage.store import Store
from storage.topic_name import CONSUMER_OFFSETS_TOPIC, INTERNAL_TOPICS, TRANSACTION_STATE_TOPIC  # noqa: F401 (re-exported)
from storage.varint import INT32_MIN

DEFAULT_PARTITIONS = 8
# Kafka creates both topics compacted (GroupCoordinatorConfig / TransactionLogConfig: the
# latest record per group, offset or transactional id is the state; older ones are history),
# with 100 MiB segments (offsets.topic.segment.bytes, transaction.state.log.segment.bytes).
# Like any topic config these are overrides a user may alter (`txlog topics alter`, as
# kafka-configs --alter does on a broker's internal topics).
INTERNAL_CONFIG = {"cleanup.policy": "compact", "segment.bytes": 104857600, "retention.ms": -1, "retention.bytes": -1}


def java_string_hash(s: str) -> int:
    """Java's String.hashCode: 31*h + c over UTF-16 code units, wrapping to a signed 32-bit int."""
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def owner_partition(key: str, partitions: int) -> int:
    """Partition of an internal topic that owns a transactional id or group id (Kafka's Utils.abs rule)."""
    h = java_string_hash(key)
    return (0 if h == INT32_MIN else abs(h)) % partitions


def ensure_internal_topic(store: Store, name: str, partitions: int = DEFAULT_PARTITIONS) -> int:
    """The topic's partition count, creating the topic first if no process has yet."""
    if not store.has_topic(name):
        if store.read_only:
            return 0
        try:
            store.create_topic(name, partitions, INTERNAL_CONFIG, internal=True)
        except TopicAlreadyExistsError:
            pass  # another process created it between our check and our create
    elif not store.read_only:
        _adopt_compaction(store, name)
    return store.partition_count(name)


def _adopt_compaction(store: Store, name: str) -> None:
    """Give an internal topic made before txlog compacted them Kafka's `cleanup.policy=compact`.

    Only a topic with no `cleanup.policy` override is changed: that is one created by an older
    txlog (INTERNAL_CONFIG then had none), whose history grows without bound otherwise. A policy
    a user set (`txlog topics alter --config cleanup.policy=...`) is theirs and stays, as a
    broker leaves an altered `__consumer_offsets` alone. The override is written once, by the
    first writable open, so `topics describe` shows what is in force.
    """
    if "cleanup.policy" in store.topic_overrides(name):
        return
    try:
        store.alter_topic_config(name, {"cleanup.policy": INTERNAL_CONFIG["cleanup.policy"]})
    except ReadOnlyStoreError:
        pass  # a store that cannot be written keeps its history; nothing is cleaned there anyway
