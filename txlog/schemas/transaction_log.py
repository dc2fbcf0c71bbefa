"""Key and value schemas of `__transaction_state` records (docs/kafka-formats.md §4.1).

The transaction coordinator's whole memory is this compacted log: on load it keeps
the last value per transactional id, so these bytes must be exactly what Kafka
writes and reads, or a real Kafka data directory would replay into the wrong state.

Both key and value are version-prefixed (an i16, then the schema at that version).
Value v0 is non-flexible; v1 is flexible, which means compact strings and arrays and
a tagged-field section after every struct. Tagged fields are how Kafka adds fields
without a version bump, so a reader must skip tags it does not know.

The primitive reader/writer below is shared with `txlog.schemas.offset_log`, which needs the
same Kafka schema types; it lives here only because that is where it was first needed.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, fields
from enum import IntEnum
from itertools import groupby
from typing import overload

from storage.errors import CorruptRecordError
from txlog.schemas.schema_types import SchemaReader, SchemaWriter

KEY_VERSION = 0
#: TransactionTimeoutMs of a KIP-939 two-phase-commit transactional id: Integer.MAX_VALUE, as
#: Kafka's coordinator resolves it for InitProducerId with enable2Pc (`TxnLogValue.is_two_phase_commit`).
TWO_PHASE_COMMIT_TIMEOUT_MS = (1 << 31) - 1
VALUE_VERSIONS = (0, 1)
_FLEXIBLE_VALUE_VERSION = 1


# --- the schemas -----------------------------------------------------------------


class TxnState(IntEnum):
    """TransactionStatus byte; DEAD and PREPARE_EPOCH_FENCE exist only in memory in Kafka."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """Kafka's name of the state (TransactionState.name), as its logs, kafka-dump-log and Spark print it.

        Derived from the member name (PREPARE_EPOCH_FENCE -> PrepareEpochFence) so that no
        second table of names can drift from this enum.
        """
        return "".join(word.capitalize() for word in self.name.split("_"))

    @property
    def admin_name(self) -> str:
        """The name Kafka's Admin client (kafka-transactions.sh) reports.

        The client's TransactionState has no Dead -- a coordinator-only, in-memory state --
        so a Dead transaction reads there as Unknown.
        """
        return "Unknown" if self is TxnState.DEAD else self.kafka_name

    @property
    def is_prepared(self) -> bool:
        """PrepareCommit/PrepareAbort: the outcome is decided and durable, its markers not all written."""
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


@dataclass(frozen=True, slots=True, eq=False)
class TxnLogValue:
    """One transactional id's coordinator state, as persisted.

    `partitions` is flat and in the order the record stores them (Kafka writes its
    HashSet's order, which `--transaction-log-decoder` must print as is). That order
    means nothing, so equality and hashing compare the partitions sorted: two states
    that differ only in it are the same state.
    """

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: tuple[tuple[str, int], ...]
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 2
    next_producer_epoch: int = -1

    def is_ongoing_in(self, topic: str, partition: int) -> bool:
        """Ongoing with this partition added: the only state in which the partition's open data has an owner.

        A partition's open transaction without such a coordinator state is "hanging": no
        coordinator will ever write its marker.
        """
        return self.state == TxnState.ONGOING and (topic, partition) in self.partitions

    @property
    def is_two_phase_commit(self) -> bool:
        """A KIP-939 two-phase-commit transactional id: its transactions are never timed out.

        Kafka persists nothing new for it: the id's TransactionTimeoutMs is Integer.MAX_VALUE
        (TransactionMetadata.isDistributedTwoPhaseCommitTxn), so the mark survives a restart in
        the bytes Kafka itself writes.
        """
        return self.timeout_ms == TWO_PHASE_COMMIT_TIMEOUT_MS

    def is_expired(self, now_ms: int) -> bool:
        """Ongoing past its timeout: the coordinator fences the producer and aborts the transaction.

        A two-phase-commit transaction never expires: its outcome belongs to an external
        transaction manager (Kafka's TransactionStateManager skips it in the same way)."""
        return (
            self.state == TxnState.ONGOING and not self.is_two_phase_commit and self.start_ms + self.timeout_ms < now_ms
        )

    def _comparable(self) -> tuple:
        """Every field (so a new one cannot be forgotten), the partitions sorted."""
        return tuple(
            tuple(sorted(self.partitions)) if f.name == "partitions" else getattr(self, f.name) for f in fields(self)
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TxnLogValue):
            return NotImplemented
        return self._comparable() == other._comparable()

    def __hash__(self) -> int:
        return hash(self._comparable())


# Tagged fields of value v1: (tag, attribute, struct format, default on the wire).
# The wire default of ClientTransactionVersion is 0 (Kafka's schema), not the
# dataclass default 2: a v1 record without tag 2 came from a TV0 client.
_TAGS: tuple[tuple[int, str, str, int], ...] = (
    (0, "previous_producer_id", ">q", -1),
    (1, "next_producer_id", ">q", -1),
    (2, "client_transaction_version", ">h", 0),
    (3, "next_producer_epoch", ">h", -1),
)
_WIRE_DEFAULTS = {attr: default for _, attr, _, default in _TAGS}


def encode_key(transactional_id: str) -> bytes:
    """Key of a transactional id's record: i16 version 0 + a non-flexible string."""
    w = SchemaWriter()
    w.i16(KEY_VERSION)
    w.string(transactional_id)
    return w.getvalue()


def decode_key(data: bytes | None) -> str:
    """The transactional id of a `__transaction_state` key."""
    if data is None:
        raise CorruptRecordError("transaction log key: null key")
    r = SchemaReader(data, "transaction log key")
    version = r.i16("key version")
    if version != KEY_VERSION:
        raise r.corrupt(f"unknown key version {version}", 0)
    transactional_id = r.string("transactional id")
    if transactional_id is None:
        raise r.corrupt("null transactional id", 2)
    r.expect_end()
    return transactional_id


def _group_by_topic(partitions: tuple[tuple[str, int], ...]) -> list[tuple[str, list[int]]]:
    """Kafka's one-element-per-topic layout, sorted so equal sets give equal bytes."""
    pairs = sorted(partitions)
    return [(topic, [p for _, p in group]) for topic, group in groupby(pairs, key=lambda tp: tp[0])]


def _check_encodable(value: TxnLogValue, version: int) -> None:
    if version not in VALUE_VERSIONS:
        raise ValueError(f"transaction log value version must be 0 or 1, not {version}")
    if value.state == TxnState.EMPTY and value.partitions:
        # Kafka's writer refuses this too: an Empty state with partitions is a coordinator bug.
        raise ValueError("an EMPTY transaction state cannot carry partitions")
    if version == 0:
        # v0 has no tagged fields; silently dropping one would change what a reader
        # rebuilds (e.g. the TV2 epoch-bump rules), so refuse as Kafka's generated code does.
        lost = [attr for attr, default in _WIRE_DEFAULTS.items() if getattr(value, attr) != default]
        if lost:
            raise ValueError(f"value version 0 cannot carry {', '.join(lost)} (tagged fields need v1)")


def _write_partitions(w: SchemaWriter, value: TxnLogValue, flexible: bool) -> None:
    topics = None if value.state == TxnState.EMPTY else _group_by_topic(value.partitions)
    count = None if topics is None else len(topics)
    if flexible:
        w.compact_array_count(count)
    else:
        w.array_count(count)
    for topic, ids in topics or ():
        if flexible:
            w.compact_string(topic)
            w.compact_array_count(len(ids))
        else:
            w.string(topic)
            w.array_count(len(ids))
        for partition in ids:
            w.i32(partition)
        if flexible:
            w.tagged_fields([])


def _tag_payloads(value: TxnLogValue) -> list[tuple[int, bytes]]:
    """Non-default tagged fields; a field equal to its default is omitted, as Kafka does."""
    out = []
    for tag, attr, fmt, default in _TAGS:
        field = getattr(value, attr)
        if field != default:
            try:
                out.append((tag, struct.pack(fmt, field)))
            except struct.error:
                raise ValueError(f"{attr} out of range: {field!r}") from None
    return out


#: The fixed fields around the partitions, each run packed at once (a coordinator writes three values per
#: transaction, issue 26): version (i16), ProducerId (i64), ProducerEpoch (i16), TransactionTimeoutMs
#: (i32), TransactionStatus (i8); after the partitions TransactionLastUpdateTimestampMs and
#: TransactionStartTimestampMs (i64 each).
_HEAD = struct.Struct(">hqhib")
_TIMES = struct.Struct(">qq")


def encode_value(value: TxnLogValue, version: int = 1) -> bytes:
    """Version-prefixed TransactionLogValue; v1 is what a transaction.version >= 1 cluster writes."""
    _check_encodable(value, version)
    flexible = version >= _FLEXIBLE_VALUE_VERSION
    state = TxnState(value.state)  # a stray int would only fail later, on read
    try:
        head = _HEAD.pack(version, value.producer_id, value.producer_epoch, value.timeout_ms, state)
        times = _TIMES.pack(value.last_update_ms, value.start_ms)
    except struct.error as exc:
        raise ValueError(f"a field of {value!r} is out of range for its type ({exc})") from None
    w = SchemaWriter()
    w.raw(head)
    _write_partitions(w, value, flexible)
    w.raw(times)
    if flexible:
        w.tagged_fields(_tag_payloads(value))
    return w.getvalue()


def _read_partitions(r: SchemaReader, flexible: bool) -> tuple[tuple[str, int], ...]:
    # Smallest element: an empty topic name plus an empty id array (+ tag section).
    if flexible:
        count = r.compact_array_count(3, "transaction partitions")
    else:
        count = r.array_count(6, "transaction partitions")
    pairs: list[tuple[str, int]] = []
    for _ in range(count or 0):
        start = r.position
        topic = r.compact_string("topic") if flexible else r.string("topic")
        if topic is None:
            raise r.corrupt("null topic in transaction partitions", start)
        start = r.position
        if flexible:
            ids = r.compact_array_count(4, "partition ids")
        else:
            ids = r.array_count(4, "partition ids")
        if ids is None:
            raise r.corrupt("null partition id array", start)
        pairs.extend((topic, r.i32("partition id")) for _ in range(ids))
        if flexible:
            r.tagged_fields()
    return tuple(pairs)  # the stored order, which the dump prints; TxnLogValue.__eq__ ignores it


def _read_state(r: SchemaReader) -> TxnState:
    start = r.position
    raw = r.i8("transaction status")
    try:
        return TxnState(raw)
    except ValueError:
        raise r.corrupt(f"unknown transaction status {raw}", start) from None


def _tag_readers(tags: dict[str, int]) -> dict[int, Callable[[SchemaReader], None]]:
    """Readers for tags 0..3; each stores its field into `tags` under the attribute name."""

    def reader(attr: str, fmt: str) -> Callable[[SchemaReader], None]:
        def read(r: SchemaReader) -> None:
            tags[attr] = r.i64(attr) if fmt == ">q" else r.i16(attr)

        return read

    return {tag: reader(attr, fmt) for tag, attr, fmt, _ in _TAGS}


@overload
def decode_value(data: bytes) -> TxnLogValue: ...
@overload
def decode_value(data: None) -> None: ...
@overload
def decode_value(data: bytes | None) -> TxnLogValue | None: ...


def decode_value(data: bytes | None) -> TxnLogValue | None:
    """A TransactionLogValue v0 or v1; None for a tombstone (the id was expired)."""
    if data is None:
        return None
    r = SchemaReader(data, "transaction log value")
    version = r.value_version(VALUE_VERSIONS)
    flexible = version >= _FLEXIBLE_VALUE_VERSION
    producer_id = r.i64("producer id")
    producer_epoch = r.i16("producer epoch")
    timeout_ms = r.i32("transaction timeout")
    state = _read_state(r)
    partitions = _read_partitions(r, flexible)
    last_update_ms = r.i64("last update timestamp")
    start_ms = r.i64("start timestamp")
    tags = dict(_WIRE_DEFAULTS)
    if flexible:
        r.tagged_fields(_tag_readers(tags))
    r.expect_end()
    return TxnLogValue(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        timeout_ms=timeout_ms,
        state=state,
        partitions=partitions,
        last_update_ms=last_update_ms,
        start_ms=start_ms,
        **tags,
    )
