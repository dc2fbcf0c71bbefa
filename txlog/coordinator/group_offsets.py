"""Consumer groups' committed offsets, replayed from `__consumer_offsets` (docs/DESIGN.md §7).

A group's offsets live in the one partition of `__consumer_offsets` its id hashes to
(docs/kafka-formats.md §4.3), as offset-commit records (docs/kafka-formats.md §4.2). The state is the replay of
that partition, with Kafka's loading rules (GroupMetadataManager):

* a non-transactional record takes effect at once; a tombstone deletes the offset;
* a transactional record of producer P is *pending* under P: invisible to readers,
  but it makes the partition "unstable" for readers that require stable offsets
  (KIP-447), because its fate is not decided yet;
* P's COMMIT marker moves P's pending offsets into the committed ones, unless a
  commit written later in the log already replaced them; P's ABORT drops them;
* a group-metadata record (key type 2) replaces the group's membership record, a
  tombstone deletes it. Its content is the group coordinator's business
  (`txlog.coordinator.group_coordinator`); here it is only kept, last value wins;
* a broker's KIP-848 consumer-group records (key types 3..8,
  `txlog.schemas.consumer_group_records`) are kept the same way, last value per key
  (record type, group, member), a tombstone removing that key; the tombstone of the
  group's ConsumerGroupMetadata (type 3) removes what is left of the group, as Kafka's
  replay does. txlog never writes them: they describe a broker's consumer-protocol groups.

No broker keeps this in memory between calls, so every process replays the partition
itself, through a `ReplayedPartition` that starts from the last state snapshot and
catches up on what any process appended since. Plain commits are appended here;
transactional ones are written by the Producer inside its transaction with the
(key, value) pairs `encode_commit` returns.
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from storage.errors import UnknownTopicOrPartitionError
from storage.partition_log import PartitionLog
from storage.records import RecordBatch, build_batch
from storage.store import Store
from storage.topic_name import CONSUMER_OFFSETS_TOPIC
from storage.varint import INT32_MAX, INT64_MAX
from txlog.coordinator.internal_topics import ensure_internal_topic, owner_partition
from txlog.coordinator.replayed_state import SNAPSHOT_EVERY, ReplayedPartition
from txlog.errors import (
    GroupIdNotFoundError,
    IllegalArgumentError,
    InvalidGroupIdError,
    OffsetMetadataTooLargeError,
    UnstableOffsetCommitError,
)
from txlog.requests import MAX_STRING_BYTES, check_id
from txlog.schemas.consumer_group_records import GROUP_METADATA, ConsumerGroupRecordKey
from txlog.schemas.group_metadata import encode_group_metadata_key
from txlog.schemas.offset_log import (
    GroupMetadataKey,
    OffsetKey,
    OffsetValue,
    decode_key,
    decode_offset_value,
    encode_offset_key,
    encode_offset_value,
)
from txlog.topic_partition import OffsetAndMetadata, TopicPartition

# The file name carries the dump format's version: a process that meets a snapshot of
# another format then simply finds none and replays the log instead of misreading it.
SNAPSHOT_NAME = "txlog-group-offsets-v3"  # v2 added the groups' membership records, v3 KIP-848's records
KEY_VERSION = 1  # what current Kafka writes for offset commits
VALUE_VERSION = 3
MAX_METADATA_BYTES = 4096  # Kafka's offset.metadata.max.bytes default


@dataclass(frozen=True, slots=True)
class _Entry:
    """A committed or pending value with the log offset of the batch that wrote it.

    The batch offset decides which of two writes is newer when a transaction commits
    after a plain commit of the same key was appended (Kafka's `olderThan`).
    """

    value: OffsetValue
    batch_offset: int


@dataclass
class _PartitionState:
    """The replayed content of one `__consumer_offsets` partition."""

    committed: dict[OffsetKey, _Entry] = field(default_factory=dict)
    pending: dict[int, dict[OffsetKey, _Entry]] = field(default_factory=dict)  # producer id -> key -> entry
    metadata: dict[str, bytes] = field(default_factory=dict)  # group -> its last GroupMetadataValue bytes
    # group -> (record type, member id or "") -> the last value of a broker's KIP-848 record
    consumer_records: dict[str, dict[tuple[int, str], bytes]] = field(default_factory=dict)

    # ---- replay ---------------------------------------------------------------------------

    def apply(self, batch: RecordBatch) -> None:
        """Fold one batch of the partition into the state, as Kafka's offset loader does."""
        if batch.is_control:
            self._apply_marker(batch)
            return
        for record in batch.records():
            key = decode_key(record.key)
            if isinstance(key, GroupMetadataKey):
                self._apply_group_metadata(key.group, record.value)
                continue
            if isinstance(key, ConsumerGroupRecordKey):
                self._apply_consumer_record(key, record.value)
                continue
            if not isinstance(key, OffsetKey):
                continue  # share and streams groups, regex subscriptions: not described by txlog
            value = decode_offset_value(record.value)
            if batch.is_transactional:
                self._apply_pending(batch, key, value)
            elif value is None:
                self.committed.pop(key, None)
            else:
                self.committed[key] = _Entry(value, batch.base_offset)

    def _apply_group_metadata(self, group: str, value: bytes | None) -> None:
        if value is None:
            self.metadata.pop(group, None)
        else:
            self.metadata[group] = bytes(value)

    def _apply_consumer_record(self, key: ConsumerGroupRecordKey, value: bytes | None) -> None:
        records = self.consumer_records.setdefault(key.group, {})
        slot = (key.record_type, key.member_id or "")
        if value is not None:
            records[slot] = bytes(value)
        elif key.record_type == GROUP_METADATA:
            records.clear()  # the group is deleted (its other records were tombstoned before this one)
        else:
            records.pop(slot, None)
        if not records:
            del self.consumer_records[key.group]

    def _apply_pending(self, batch: RecordBatch, key: OffsetKey, value: OffsetValue | None) -> None:
        pending = self.pending.setdefault(batch.producer_id, {})
        if value is None:
            pending.pop(key, None)  # a tombstone inside a txn only withdraws that txn's own write
        else:
            pending[key] = _Entry(value, batch.base_offset)

    def _apply_marker(self, batch: RecordBatch) -> None:
        if batch.records_count == 0:
            return  # emptied by compaction
        offsets = self.pending.pop(batch.producer_id, {})
        if not batch.control_marker().is_commit:
            return
        for key, entry in offsets.items():
            current = self.committed.get(key)
            if current is None or current.batch_offset < entry.batch_offset:
                self.committed[key] = entry

    # ---- snapshot -------------------------------------------------------------------------

    def dump(self) -> dict[str, Any]:
        """JSON-able state: lists, so no dict key is anything but a string."""
        committed = [_entry_row(k, e) for k, e in self.committed.items()]
        pending = [[pid, *_entry_row(k, e)] for pid, entries in self.pending.items() for k, e in entries.items()]
        metadata = {g: base64.b64encode(v).decode("ascii") for g, v in self.metadata.items()}
        consumer = [
            [g, record_type, member, base64.b64encode(v).decode("ascii")]
            for g, records in self.consumer_records.items()
            for (record_type, member), v in records.items()
        ]
        return {"committed": committed, "pending": pending, "metadata": metadata, "consumer_records": consumer}

    def load(self, data: dict[str, Any] | None) -> None:
        self.committed, self.pending, self.metadata, self.consumer_records = {}, {}, {}, {}
        if data is None:
            return
        self.metadata = {g: base64.b64decode(v) for g, v in data.get("metadata", {}).items()}
        for group, record_type, member, value in data.get("consumer_records", []):
            self.consumer_records.setdefault(group, {})[(record_type, member)] = base64.b64decode(value)
        for row in data["committed"]:
            key, entry = _entry_from_row(row)
            self.committed[key] = entry
        for pid, *row in data["pending"]:
            key, entry = _entry_from_row(row)
            self.pending.setdefault(pid, {})[key] = entry

    # ---- queries --------------------------------------------------------------------------

    def pending_for(self, group: str) -> dict[OffsetKey, tuple[int, _Entry]]:
        """The newest pending write per key of the group, with the producer that wrote it."""
        found: dict[OffsetKey, tuple[int, _Entry]] = {}
        for pid, entries in self.pending.items():
            for key, entry in entries.items():
                if key.group == group and (key not in found or found[key][1].batch_offset < entry.batch_offset):
                    found[key] = (pid, entry)
        return found

    def groups(self) -> set[str]:
        """Groups with committed or pending offsets, or a membership record (classic or KIP-848)."""
        names = {key.group for key in self.committed}
        names.update(key.group for entries in self.pending.values() for key in entries)
        names.update(self.metadata)
        names.update(self.consumer_records)
        return names


def _entry_row(key: OffsetKey, entry: _Entry) -> list:
    v = entry.value
    return [
        key.group,
        key.topic,
        key.partition,
        v.offset,
        v.metadata,
        v.commit_timestamp,
        v.leader_epoch,
        v.expire_timestamp,
        entry.batch_offset,
    ]


def _entry_from_row(row: list) -> tuple[OffsetKey, _Entry]:
    group, topic, partition, offset, metadata, commit_ts, leader_epoch, expire_ts, batch_offset = row
    return OffsetKey(group, topic, partition), _Entry(
        OffsetValue(offset, metadata, commit_ts, leader_epoch, expire_ts), batch_offset
    )


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class GroupOffsets:
    """Every group's committed offsets, replayed from __consumer_offsets (docs/DESIGN.md §7).

    One object per store is enough for a process; every query first catches up on what
    any process appended, so two objects on one directory see each other's commits.
    """

    def __init__(self, store: Store, *, clock: Callable[[], int] | None = None, snapshot_every: int = SNAPSHOT_EVERY):
        self._store = store
        self._clock = clock or _now_ms
        self._snapshot_every = snapshot_every
        self._partitions = 0  # partition count of __consumer_offsets once known (it never changes)
        self._replays: dict[int, tuple[ReplayedPartition, _PartitionState]] = {}
        self._mutex = threading.RLock()

    # ---- where a group lives ----------------------------------------------------------------

    def _partition_count(self) -> int:
        """Partitions of __consumer_offsets, creating the topic on a writable store; 0 if absent."""
        if not self._partitions:
            self._partitions = ensure_internal_topic(self._store, CONSUMER_OFFSETS_TOPIC)
        return self._partitions

    def partition_for(self, group: str) -> int:
        """The __consumer_offsets partition that owns `group` (Kafka's hash rule)."""
        _check_group(group)
        count = self._partition_count()
        if count == 0:
            raise UnknownTopicOrPartitionError(f"{CONSUMER_OFFSETS_TOPIC} does not exist and the store is read-only")
        return owner_partition(group, count)

    def _state(self, partition: int) -> _PartitionState:
        """The partition's replayed state, caught up with the log right now."""
        with self._mutex:
            if partition not in self._replays:
                state = _PartitionState()
                log = self._store.partition(CONSUMER_OFFSETS_TOPIC, partition)
                replay = ReplayedPartition(
                    log,
                    SNAPSHOT_NAME,
                    apply=state.apply,
                    dump=state.dump,
                    load=state.load,
                    snapshot_every=self._snapshot_every,
                )
                self._replays[partition] = (replay, state)
            replay, state = self._replays[partition]
            replay.catch_up()
            replay.maybe_snapshot()
            return state

    def _group_state(self, group: str) -> _PartitionState | None:
        """The caught-up state of the group's partition; None if no offsets topic exists to read.

        A Kafka log directory does not record how many partitions `__consumer_offsets`
        has (50 by default) and may hold only some of them, so the hash rule cannot be
        trusted there: the group is looked for in every partition present.
        """
        _check_group(group)
        if self._partition_count() == 0:
            return None
        if self._store.kafka_layout:
            for p in self._present():
                state = self._state(p)
                if group in state.groups():
                    return state
            return None
        return self._state(owner_partition(group, self._partitions))

    def _present(self) -> list[int]:
        """The partitions of __consumer_offsets this store holds (all of them, but in a partial Kafka dir)."""
        if self._partition_count() == 0:
            return []
        return self._store.partitions(CONSUMER_OFFSETS_TOPIC)

    def log_for(self, group: str) -> PartitionLog:
        """The `__consumer_offsets` partition that holds the group (created on a writable store)."""
        return self._store.partition(CONSUMER_OFFSETS_TOPIC, self.partition_for(group))

    @contextmanager
    def locked(self, group: str):
        """Hold the group's partition lock, caught up: the group coordinator's critical section.

        Everything written to the group (membership records, plain and transactional
        offset commits) is checked and appended while this is held, so a check
        cannot be overtaken by another process's write.
        """
        log = self.log_for(group)
        with log.exclusive():
            self._state(owner_partition(group, self._partitions))
            yield log

    def group_metadata(self, group: str) -> bytes | None:
        """The group's last membership record (GroupMetadataValue bytes), caught up; None if it has none."""
        state = self._group_state(group)
        if state is None:
            return None
        with self._mutex:
            return state.metadata.get(group)

    def all_group_metadata(self) -> dict[str, bytes]:
        """Every group's membership record, caught up."""
        found: dict[str, bytes] = {}
        for p in self._present():
            state = self._state(p)
            with self._mutex:
                found.update(state.metadata)
        return dict(sorted(found.items()))

    def consumer_group_records(self, group: str) -> dict[tuple[int, str], bytes]:
        """A broker's KIP-848 records of the group, caught up: (record type, member id or "") -> value
        bytes (`txlog.schemas.consumer_group_records`); empty if the group has none."""
        state = self._group_state(group)
        if state is None:
            return {}
        with self._mutex:
            return dict(state.consumer_records.get(group, {}))

    def append_group_metadata(self, group: str, value: bytes | None) -> None:
        """Write the group's membership record (a tombstone for None); call while `locked(group)`."""
        self._append(group, [(encode_group_metadata_key(group), value, None, self._clock())])

    # ---- writing ----------------------------------------------------------------------------

    def encode_commit(
        self, group: str, tp: TopicPartition, offset: OffsetAndMetadata | int, timestamp: int
    ) -> tuple[bytes, bytes]:
        """(key, value) of one offset-commit record, in the versions current Kafka writes.

        The Producer writes these inside its transaction (sendOffsetsToTransaction),
        so the same validation and encoding apply to plain and transactional commits.
        """
        _check_group(group)
        tp, offset = _check_commit(tp, offset)
        key = encode_offset_key(OffsetKey(group, tp.topic, tp.partition), KEY_VERSION)
        value = OffsetValue(offset.offset, offset.metadata, timestamp, offset.leader_epoch)
        return key, encode_offset_value(value, VALUE_VERSION)

    def commit(self, group: str, offsets: Mapping[TopicPartition, OffsetAndMetadata | int]) -> None:
        """Commit offsets outside any transaction: one durable batch, visible at once.

        Everything is validated before anything is written, so a bad entry commits nothing.
        """
        _check_group(group)
        now = self._clock()
        records = [(*self.encode_commit(group, tp, om, now), None, now) for tp, om in offsets.items()]
        if records:
            self._append(group, records)

    def delete_offsets(self, group: str, partitions: Iterable[TopicPartition]) -> None:
        """Delete committed offsets with tombstones (kafka-consumer-groups --delete-offsets).

        Pending transactional offsets are not touched: their transaction decides them.
        """
        wanted = {_check_tp(tp) for tp in partitions}
        state = self._group_state(group)
        if state is None or group not in state.groups():
            raise GroupIdNotFoundError(f"group '{group}' has no committed offsets")
        now = self._clock()
        keys = [OffsetKey(group, tp.topic, tp.partition) for tp in sorted(wanted)]
        records = [(encode_offset_key(k, KEY_VERSION), None, None, now) for k in keys if k in state.committed]
        if records:
            self._append(group, records)

    def _append(self, group: str, records: list[tuple]) -> None:
        """One plain batch (producer id -1, CREATE_TIME, uncompressed) on the group's partition."""
        log: PartitionLog = self._store.partition(CONSUMER_OFFSETS_TOPIC, self.partition_for(group))
        log.append(build_batch(records))

    # ---- reading ----------------------------------------------------------------------------

    def committed(
        self, group: str, partitions: Iterable[TopicPartition] | None = None, *, require_stable: bool = False
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The last committed offset per partition; a partition never committed (or deleted) is absent.

        `require_stable` is what a read_committed consumer asks for: while a transaction
        holds a pending commit for a requested partition, its committed offset is about
        to change, so UnstableOffsetCommitError (retriable) is raised instead of a value
        the consumer would resume from and then re-read (KIP-447).
        """
        wanted = None if partitions is None else {_check_tp(tp) for tp in partitions}
        state = self._group_state(group)
        if state is None:
            return {}
        with self._mutex:
            committed = {
                TopicPartition(k.topic, k.partition): e.value for k, e in state.committed.items() if k.group == group
            }
            pending = {TopicPartition(k.topic, k.partition) for k in state.pending_for(group)}
        if wanted is not None:
            committed = {tp: v for tp, v in committed.items() if tp in wanted}
            pending &= wanted
        if require_stable and pending:
            listed = ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(pending))
            raise UnstableOffsetCommitError(f"group '{group}' has pending transactional offsets for {listed}")
        return {tp: _offset_and_metadata(v) for tp, v in sorted(committed.items())}

    def describe(self, group: str) -> dict[TopicPartition, OffsetValue]:
        """Committed offsets with their commit timestamps (for `describe`-style listings)."""
        state = self._group_state(group)
        if state is None:
            return {}
        with self._mutex:
            return {
                TopicPartition(k.topic, k.partition): e.value
                for k, e in sorted(state.committed.items(), key=lambda item: _sort_key(item[0]))
                if k.group == group
            }

    def pending(self, group: str) -> dict[TopicPartition, tuple[int, OffsetAndMetadata]]:
        """Producer id and offset of each pending transactional commit of the group."""
        state = self._group_state(group)
        if state is None:
            return {}
        with self._mutex:
            found = state.pending_for(group)
        return {
            TopicPartition(k.topic, k.partition): (pid, _offset_and_metadata(e.value))
            for k, (pid, e) in sorted(found.items(), key=lambda item: _sort_key(item[0]))
        }

    def list_groups(self) -> list[str]:
        """Groups with a committed or pending offset or a membership record."""
        names: set[str] = set()
        for p in self._present():
            state = self._state(p)
            with self._mutex:
                names |= state.groups()
        return sorted(names)


def _sort_key(key: OffsetKey) -> tuple[str, int]:
    return key.topic, key.partition


def _offset_and_metadata(value: OffsetValue) -> OffsetAndMetadata:
    return OffsetAndMetadata(value.offset, value.metadata, value.leader_epoch)


# ---- validation: before anything is written ------------------------------------------------


def _check_group(group: str) -> None:
    check_id(group, "group id", InvalidGroupIdError)


def _check_tp(tp: TopicPartition) -> TopicPartition:
    try:
        topic, partition = tp
    except (TypeError, ValueError):
        raise IllegalArgumentError(f"expected a TopicPartition, not {tp!r}") from None
    if not isinstance(topic, str) or not topic or len(topic.encode("utf-8")) > MAX_STRING_BYTES:
        raise IllegalArgumentError(f"invalid topic name {topic!r}")
    if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition <= INT32_MAX:
        raise IllegalArgumentError(f"invalid partition {partition!r} of topic '{topic}'")
    return TopicPartition(topic, partition)


def _check_commit(tp: TopicPartition, offset: OffsetAndMetadata | int) -> tuple[TopicPartition, OffsetAndMetadata]:
    tp = _check_tp(tp)
    if isinstance(offset, int) and not isinstance(offset, bool):
        offset = OffsetAndMetadata(offset)
    if not isinstance(offset, tuple) or len(offset) != 3:
        raise IllegalArgumentError(f"offset for {tp} must be an int or OffsetAndMetadata, not {offset!r}")
    om = OffsetAndMetadata(*offset)
    if isinstance(om.offset, bool) or not isinstance(om.offset, int) or not 0 <= om.offset <= INT64_MAX:
        raise IllegalArgumentError(f"invalid offset {om.offset!r} for {tp.topic}-{tp.partition}")
    if not isinstance(om.metadata, str):
        raise IllegalArgumentError(f"offset metadata must be a string, not {om.metadata!r}")
    if len(om.metadata.encode("utf-8")) > MAX_METADATA_BYTES:
        raise OffsetMetadataTooLargeError(f"metadata of {tp.topic}-{tp.partition} exceeds {MAX_METADATA_BYTES} bytes")
    if (
        isinstance(om.leader_epoch, bool)
        or not isinstance(om.leader_epoch, int)
        or not -1 <= om.leader_epoch <= INT32_MAX
    ):
        raise IllegalArgumentError(f"invalid leader epoch {om.leader_epoch!r}")
    return tp, om
