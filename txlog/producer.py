"""The public Producer: batching, idempotence and transactions in Kafka's client vocabulary.

There is no background sender thread. `send` adds the record to its partition's open
batch; a batch goes to the log when it is full (`batch_size`), when a later `send` finds
it older than `linger_ms`, or on `flush`, `commit_transaction`, `close` or a future's
`get()`. Each batch is one durable append (one fsync), so an acknowledged record is on
disk.

Idempotence (the default) stamps every batch with the producer id, epoch and per-partition
sequence, so a retried batch whose acknowledgement was lost is recognised by the log and
answered with its original offsets. A batch whose outcome stays unknown after its retries
bumps the epoch (KIP-360) before anything else is sent, so a later batch can never be
mistaken for it.

Transactions follow Kafka's client state machine; each partition is registered with the
coordinator before the first transactional write to it, and the log checks that
registration (KIP-890 part 1).

Every request (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, Produce, TxnOffsetCommit,
EndTxn) goes through a `txlog.transport.Transport`: one made on the producer's store, or the
`transport=` given; `faults=` (a `txlog.fault_injection.FaultPlan`) wraps it in a
`FaultInjectingTransport`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Iterable, Mapping

from storage.config import TopicConfig
from storage.errors import KafkaError
from storage.records import BatchBuilder, Compression, TimestampType
from storage.store import Store
from txlog.consumer_record import RecordMetadata
from txlog.coordinator import DEFAULT_TRANSACTION_TIMEOUT_MS, ProducerIdAndEpoch
from txlog.errors import (
    ConcurrentTransactionsError,
    IllegalArgumentError,
    IllegalStateError,
    InvalidConfigurationError,
    InvalidProducerEpochError,
    InvalidRequestError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    RequestTimedOutError,
    TransactionAbortableError,
    UnknownProducerIdError,
    UnknownTopicOrPartitionError,
)
from txlog.fault_injection import FaultInjectingTransport, FaultPlan
from txlog.group_coordinator import MemberRef
from txlog.internal_topics import CONSUMER_OFFSETS_TOPIC
from txlog.membership import ConsumerGroupMetadata
from txlog.partitioner import DEFAULT_PARTITIONER, PARTITIONER_NAMES, named_partitioner
from txlog.topic_partition import OffsetAndMetadata, TopicPartition
from txlog.transport import Transport

_FENCING = (ProducerFencedError, InvalidProducerEpochError)
_CONCURRENT_RETRIES = 50
_FAR_FUTURE = 1 << 62


class _State(Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in-transaction"
    ABORTABLE = "abortable"
    FENCED = "fenced"
    CLOSED = "closed"


class _Outcome:
    """How one batch ended, shared by the futures of its records.

    Acknowledging a batch sets this once instead of visiting each of its futures (which
    was a fifth of the producer's per-record cost); a future builds its RecordMetadata
    only when asked, and only futures holding callbacks are visited (`watched`).
    """

    __slots__ = ("base_offset", "error", "done", "watched")

    def __init__(self) -> None:
        self.base_offset: int | None = None
        self.error: BaseException | None = None
        self.done = False
        self.watched = False

    def settle(self, base_offset: int | None, error: BaseException | None) -> None:
        self.base_offset, self.error, self.done = base_offset, error, True


class FutureRecordMetadata:
    """What `send` returns: resolves to RecordMetadata once the record's batch was acknowledged."""

    __slots__ = ("_producer", "_tp", "_metadata", "_outcome", "_callbacks", "_index", "_timestamp", "_key_size",
                 "_value_size")

    def __init__(self, producer: "Producer", tp: TopicPartition, index: int, timestamp: int, key_size: int,
                 value_size: int, outcome: _Outcome | None = None):
        self._producer = producer
        self._tp = tp
        self._index = index
        self._timestamp = timestamp
        # Two ints, not a (key, value) size tuple: a future lives until its batch is sent,
        # and every container object alive that long is work for the cyclic GC.
        self._key_size = key_size
        self._value_size = value_size
        self._outcome = _Outcome() if outcome is None else outcome
        self._metadata: RecordMetadata | None = None  # built on first use
        self._callbacks: list[Callable[[RecordMetadata | None, BaseException | None], Any]] | None = None

    def done(self) -> bool:
        return self._outcome.done

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """The record's metadata, sending its batch first if it is still open; raises the send's error."""
        if not self._outcome.done:
            self._producer._drain(self._tp)
        if self._outcome.error is not None:
            raise self._outcome.error
        return self._record_metadata()

    def exception(self) -> BaseException | None:
        return self._outcome.error

    def add_callback(self, fn: Callable[[RecordMetadata | None, BaseException | None], Any]) -> "FutureRecordMetadata":
        """`fn(metadata, error)` once the batch is acknowledged or has failed."""
        if self._outcome.done:
            fn(self._record_metadata(), self._outcome.error)
        else:
            if self._callbacks is None:
                self._callbacks = []
            self._callbacks.append(fn)
            self._outcome.watched = True
        return self

    def _record_metadata(self) -> RecordMetadata | None:
        """The metadata of a successfully sent record (None while pending or after an error)."""
        outcome = self._outcome
        if self._metadata is None and outcome.done and outcome.error is None:
            offset = -1 if outcome.base_offset is None else outcome.base_offset + self._index
            self._metadata = RecordMetadata(self._tp.topic, self._tp.partition, offset, self._timestamp,
                                            self._key_size, self._value_size)
        return self._metadata

    def _resolve(self, base_offset: int | None, error: BaseException | None) -> None:
        self._outcome.settle(base_offset, error)
        self._fire_callbacks()

    def _fire_callbacks(self) -> None:
        if self._callbacks:
            metadata, error = self._record_metadata(), self._outcome.error
            for fn in self._callbacks:
                fn(metadata, error)
            self._callbacks.clear()


@dataclass
class _OpenBatch:
    builder: BatchBuilder
    created_ms: int
    futures: list[FutureRecordMetadata] = field(default_factory=list)
    outcome: _Outcome = field(default_factory=_Outcome)  # shared by `futures`

    def settle(self, base_offset: int | None, error: BaseException | None) -> None:
        """Resolve every future of the batch: one shared write, then the callbacks, in record order."""
        self.outcome.settle(base_offset, error)
        if self.outcome.watched:
            for f in self.futures:
                f._fire_callbacks()


def _now_ms() -> int:
    return int(time.time() * 1000)


def _as_bytes(value: Any, what: str) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(f"{what} must be bytes, str or None, not {type(value).__name__}")


def _headers(headers: Iterable | Mapping | None) -> list[tuple[str, bytes | None]] | None:
    if not headers:
        return None
    items = headers.items() if isinstance(headers, Mapping) else headers
    return [(str(k), _as_bytes(v, "header value")) for k, v in items]


class Producer:
    """Sends records to a store's topics; idempotent by default, transactional with a transactional_id.

    A keyed record goes where Kafka's Java producer puts it (`partitioner="murmur2"`, the
    default); `partitioner="murmur3"` keeps txlog's earlier placement, a callable
    `(key, partition_count) -> partition` decides every record. Keyless records stick to one
    partition per batch.

    ::

        p = Producer("./data", transactional_id="app-1")
        p.init_transactions(); p.begin_transaction()
        p.send("out", value=b"v", key=b"k")
        p.commit_transaction(); p.close()
    """

    def __init__(self, store: str | os.PathLike | Store, *, transactional_id: str | None = None,
                 enable_idempotence: bool | None = None, acks: int | str = "all", retries: int = 10,
                 batch_size: int = 16384, linger_ms: int = 5, compression_type: str | None = None,
                 transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS,
                 partitioner: str | Callable[[bytes | None, int], int] | None = None,
                 faults: FaultPlan | None = None, clock: Callable[[], int] | None = None,
                 transport: Transport | None = None):
        if transactional_id is not None and enable_idempotence is False:
            raise InvalidConfigurationError("a transactional producer must be idempotent")
        if acks not in ("all", -1, 0, 1, "0", "1", "-1"):
            raise InvalidConfigurationError(f"acks must be all, -1, 0 or 1, not {acks!r}")
        if compression_type not in (None, *Compression.kafka_names()):
            raise InvalidConfigurationError(f"compression_type must be one of {', '.join(Compression.kafka_names())}")
        if not isinstance(retries, int) or retries < 0 or not isinstance(batch_size, int) or batch_size <= 0:
            raise InvalidConfigurationError("retries must be ≥ 0 and batch_size > 0")
        if not callable(partitioner) and partitioner not in (None, *PARTITIONER_NAMES):
            raise InvalidConfigurationError(
                f"partitioner must be one of {', '.join(PARTITIONER_NAMES)} or a callable, not {partitioner!r}")
        self._own_store = not isinstance(store, Store)
        self.store = Store.open(store) if self._own_store else store
        self.transactional_id = transactional_id
        self.idempotent = enable_idempotence is not False
        self.acks = 0 if acks in (0, "0") else -1
        self.retries = retries
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.compression = Compression[(compression_type or "none").upper()]
        self.transaction_timeout_ms = transaction_timeout_ms
        # partitioner: a name (Kafka's murmur2 by default, or murmur3; txlog/partitioner.py) hashes
        # keyed records only; a callable is kafka-python's hook and sees every record, keyless too.
        self._partitioner = partitioner if callable(partitioner) else None
        self._key_partition = named_partitioner(partitioner if isinstance(partitioner, str) else DEFAULT_PARTITIONER)
        self._clock = clock or _now_ms
        # Every request to the log goes through the transport; `faults` wraps it in a fault plan.
        transport = transport if transport is not None else Transport(self.store, clock=clock)
        self._transport = FaultInjectingTransport(transport, faults) if faults is not None else transport
        self._ids = ProducerIdAndEpoch(-1, -1)
        self._sequences: dict[TopicPartition, int] = {}
        self._batches: dict[TopicPartition, _OpenBatch] = {}
        self._sticky: dict[str, int] = {}
        self._topic_meta: dict[str, tuple[int, int]] = {}
        self._tps: dict[tuple[str, int], TopicPartition] = {}  # made once per partition, not per send
        self._registered: set[TopicPartition] = set()
        self._txn_deadline_ms = 0
        self._oldest_ms = _FAR_FUTURE
        self._txn_error: BaseException | None = None
        self._fatal: BaseException | None = None
        self._state = _State.UNINITIALIZED if transactional_id is not None else _State.READY
        if self.idempotent and transactional_id is None:
            self._ids = self._transport.init_producer_id(None)

    # ---- properties ---------------------------------------------------------------------------------

    @property
    def producer_id(self) -> int:
        return self._ids.producer_id

    @property
    def producer_epoch(self) -> int:
        return self._ids.epoch

    # ---- sending -------------------------------------------------------------------------------------

    def send(self, topic: str, value: Any = None, key: Any = None, partition: int | None = None,
             headers: Iterable | Mapping | None = None, timestamp_ms: int | None = None) -> FutureRecordMetadata:
        """Add a record to its partition's batch; returns a future for its offset.

        This is the per-record cost of producing, so plain bytes (and None) skip the
        conversion calls and each partition's TopicPartition is made once, not per record.
        """
        self._check_can_send()
        key_b = key if key is None or type(key) is bytes else _as_bytes(key, "key")
        value_b = value if value is None or type(value) is bytes else _as_bytes(value, "value")
        hdrs = _headers(headers) if headers else None
        p = self._choose_partition(topic, key_b, partition)
        tp = self._tps.get((topic, p)) or self._tps.setdefault((topic, p), TopicPartition(topic, p))
        ts = self._clock() if timestamp_ms is None else int(timestamp_ms)
        batch = self._batches.get(tp)
        if batch is None or not batch.builder.append(key_b, value_b, hdrs, ts):
            if batch is not None:
                self._drain(tp)
            batch = self._new_batch(tp)
            batch.builder.append(key_b, value_b, hdrs, ts)
        future = FutureRecordMetadata(self, tp, len(batch.futures), ts, -1 if key_b is None else len(key_b),
                                      -1 if value_b is None else len(value_b), batch.outcome)
        batch.futures.append(future)
        if batch.builder.estimated_size >= batch.builder.max_bytes:
            self._drain(tp)
        elif ts - self._oldest_ms >= self.linger_ms:
            self._drain_lingering()
        return future

    def _check_can_send(self) -> None:
        if self._state is _State.CLOSED:
            raise IllegalStateError("the producer is closed")
        if self._fatal is not None:
            raise self._fatal
        if self.transactional_id is not None:
            if self._state is _State.ABORTABLE:
                raise TransactionAbortableError(f"the transaction must be aborted: {self._txn_error}")
            if self._state is not _State.IN_TRANSACTION:
                raise IllegalStateError("send outside a transaction: call begin_transaction() first")

    def _topic_info(self, topic: str) -> tuple[int, int]:
        """(partition count, largest batch the topic accepts), checked once per topic."""
        info = self._topic_meta.get(topic)
        if info is None:
            if not isinstance(topic, str) or (topic.startswith("__") and topic != CONSUMER_OFFSETS_TOPIC):
                raise InvalidRequestError(f"cannot produce to topic {topic!r}")
            count = self.store.partition_count(topic)
            config = TopicConfig.from_overrides(self.store.topic_overrides(topic))
            info = (count, config.max_message_bytes)
            self._topic_meta[topic] = info
        return info

    def _choose_partition(self, topic: str, key: bytes | None, partition: int | None) -> int:
        count, _ = self._topic_info(topic)
        if partition is not None:
            if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition < count:
                raise UnknownTopicOrPartitionError(f"topic '{topic}' has no partition {partition!r}")
            return partition
        if self._partitioner is not None:
            return self._partitioner(key, count) % count
        if count == 1:  # nothing to hash or to stick to; a hash per send was 6 % of its cost
            return 0
        if key is not None:
            return self._key_partition(key, count)
        sticky = self._sticky.get(topic)
        if sticky is None:  # sticky partitioner: fill one batch, then move on
            sticky = (self._sticky.get(f"\0{topic}", -1) + 1) % count
            self._sticky[topic] = self._sticky[f"\0{topic}"] = sticky
        return sticky

    def _new_batch(self, tp: TopicPartition) -> _OpenBatch:
        _, max_message = self._topic_info(tp.topic)
        builder = BatchBuilder(max_bytes=min(self.batch_size, max_message), compression=self.compression,
                               timestamp_type=TimestampType.CREATE_TIME,
                               is_transactional=self.transactional_id is not None)
        batch = _OpenBatch(builder, self._clock())
        self._batches[tp] = batch
        self._oldest_ms = min(self._oldest_ms, batch.created_ms)
        return batch

    def _drain_lingering(self) -> None:
        now = self._clock()
        for tp in [tp for tp, b in self._batches.items() if now - b.created_ms >= self.linger_ms]:
            self._drain(tp)
        self._oldest_ms = min((b.created_ms for b in self._batches.values()), default=_FAR_FUTURE)

    def flush(self, timeout: float | None = None) -> None:
        """Send every open batch; each record's outcome is in its future."""
        if self.transactional_id is not None and self._batches and self._fatal is None and self._txn_error is None:
            try:  # one registration for every partition about to be written
                self._before_transactional_write(list(self._batches))
            except KafkaError as exc:
                self._batch_failed(exc)
        for tp in list(self._batches):
            self._drain(tp)
        self._oldest_ms = _FAR_FUTURE
        self._transport.deliver_delayed()

    # ---- one batch to the log ----------------------------------------------------------------------------

    def _drain(self, tp: TopicPartition) -> None:
        batch = self._batches.pop(tp, None)
        if batch is None:
            return
        if self._sticky.get(tp.topic) == tp.partition:
            del self._sticky[tp.topic]
        try:
            if self._fatal is not None:
                raise self._fatal
            if self._txn_error is not None:
                raise TransactionAbortableError(f"the transaction must be aborted: {self._txn_error}")
            if self.transactional_id is not None:
                self._before_transactional_write([tp])
            base = self._append(tp, batch)
        except KafkaError as exc:
            self._batch_failed(exc)
            batch.settle(None, exc)
            return
        batch.settle(base, None)

    def _append(self, tp: TopicPartition, batch: _OpenBatch,
                offsets_of: tuple[str, MemberRef | None] | None = None) -> int | None:
        """Send the batch, retrying timeouts with the same bytes (the log deduplicates them).

        `offsets_of` (group, member) sends it as a TxnOffsetCommit, checked against the group.
        """
        seq = self._sequences.get(tp, 0) if self.idempotent else -1
        data = batch.builder.build(producer_id=self._ids.producer_id, producer_epoch=self._ids.epoch,
                                   base_sequence=seq)
        tid, transport = self.transactional_id, self._transport
        attempts = 0
        while True:
            try:
                if offsets_of is None:
                    result = transport.produce(tp.topic, tp.partition, data, tid)
                else:
                    result = transport.txn_offset_commit(*offsets_of, tp.topic, tp.partition, data, tid)
                break
            except RequestTimedOutError:
                attempts += 1
                if attempts > self.retries:
                    self._outcome_unknown(tp)
                    raise
        if self.idempotent:
            self._sequences[tp] = (seq + len(batch.futures)) & 0x7FFFFFFF
        return None if self.acks == 0 else result.base_offset

    def _outcome_unknown(self, tp: TopicPartition) -> None:
        """The batch may or may not be in the log: its sequence must never be reused (KIP-360)."""
        if self.transactional_id is not None or not self.idempotent:
            return  # a transaction aborts (and bumps the epoch); without idempotence there is nothing to reuse
        self._ids = ProducerIdAndEpoch(self._ids.producer_id, self._ids.epoch + 1)
        self._sequences.clear()

    def _batch_failed(self, exc: KafkaError) -> None:
        if isinstance(exc, _FENCING):
            self._fatal = self._fenced(exc) if isinstance(exc, InvalidProducerEpochError) and \
                self.transactional_id is not None else exc
            self._state = _State.FENCED if self.transactional_id is not None else self._state
        elif isinstance(exc, (OutOfOrderSequenceError, UnknownProducerIdError)) and self.transactional_id is None:
            self._outcome_unknown_all()
        if self.transactional_id is not None and self._state is _State.IN_TRANSACTION:
            self._txn_error = exc
            self._state = _State.ABORTABLE

    def _fenced(self, exc: KafkaError) -> ProducerFencedError:
        """The log's epoch check in user terms: a newer instance of the transactional id took over
        (its init_transactions bumped the epoch and aborted our open transaction)."""
        return ProducerFencedError(
            f"transactional id '{self.transactional_id}' was fenced by a newer instance of it; this producer's "
            f"transaction was aborted (producer id {self._ids.producer_id} epoch {self._ids.epoch}: {exc})")

    def _outcome_unknown_all(self) -> None:
        if self.idempotent:
            self._ids = ProducerIdAndEpoch(self._ids.producer_id, self._ids.epoch + 1)
            self._sequences.clear()

    # ---- transactions ---------------------------------------------------------------------------------------

    def _before_transactional_write(self, tps: list[TopicPartition], group: str | None = None) -> None:
        """Register new partitions (AddPartitionsToTxn, or AddOffsetsToTxn for `group`'s offsets
        partition), and let the coordinator fence us if our transaction timed out."""
        new = [tp for tp in tps if tp not in self._registered]
        tid, pid, epoch = self.transactional_id, self._ids.producer_id, self._ids.epoch
        if new:
            if group is None:
                value = self._retry_concurrent(lambda: self._transport.add_partitions_to_txn(tid, pid, epoch, new))
            else:
                value = self._retry_concurrent(lambda: self._transport.add_offsets_to_txn(tid, pid, epoch, group))
            self._registered.update(new)
            self._txn_deadline_ms = value.start_ms + value.timeout_ms
        elif self._clock() > self._txn_deadline_ms:
            self._transport.check_transaction_alive(tid, pid, epoch)

    def _retry_concurrent(self, call: Callable[[], Any]) -> Any:
        for attempt in range(_CONCURRENT_RETRIES):
            try:
                return call()
            except ConcurrentTransactionsError:
                if attempt == _CONCURRENT_RETRIES - 1:
                    raise
                time.sleep(min(0.005 * (attempt + 1), 0.1))

    def _require_transactional(self) -> None:
        if self.transactional_id is None:
            raise IllegalStateError("transactional method called on a producer without transactional_id")
        if self._state is _State.CLOSED:
            raise IllegalStateError("the producer is closed")
        if self._fatal is not None:
            raise self._fatal

    def init_transactions(self) -> None:
        """Get this transactional id's producer id and a new epoch, fencing older instances."""
        self._require_transactional()
        if self._state is not _State.UNINITIALIZED:
            raise IllegalStateError(f"init_transactions() called twice (state {self._state.value})")
        self._set_ids(self._retry_concurrent(lambda: self._transport.init_producer_id(
            self.transactional_id, self.transaction_timeout_ms)))
        self._state = _State.READY

    def begin_transaction(self) -> None:
        self._require_transactional()
        if self._state is _State.UNINITIALIZED:
            raise IllegalStateError("call init_transactions() before begin_transaction()")
        if self._state is not _State.READY:
            raise IllegalStateError(f"begin_transaction() while {self._state.value}")
        self._state = _State.IN_TRANSACTION
        self._registered.clear()
        self._txn_error = None

    def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
                                    group_metadata: Any) -> None:
        """Commit a consumer group's offsets as part of this transaction (pending until it commits).

        `group_metadata` is the consumer's `group_metadata()` (KIP-447): the commit is
        checked under the group's lock against the member's id and epoch, and one from a
        member the group fenced or expired is refused (UnknownMemberIdError,
        StaleMemberEpochError, FencedInstanceIdError) and makes the transaction abortable.
        A group id alone is accepted while the group has no members (assign()-only use).
        """
        self._require_transactional()
        group, member = _group_and_member(group_metadata)
        self._check_can_send()
        transport = self._transport
        tp = transport.offsets_partition(group)
        now = self._clock()
        builder = BatchBuilder(max_bytes=1 << 30, is_transactional=True)
        for part, offset in offsets.items():
            om = offset if isinstance(offset, OffsetAndMetadata) else OffsetAndMetadata(int(offset))
            k, v = transport.encode_offset_commit(group, TopicPartition(*part), om, now)
            builder.append(k, v, None, now)
        batch = _OpenBatch(builder, now)
        batch.futures = [FutureRecordMetadata(self, tp, i, now, -1, -1, batch.outcome)
                         for i in range(builder.record_count)]
        if not batch.futures:
            return
        self.flush()
        try:
            # Registration takes the transaction coordinator's lock, so it happens before the
            # group's lock is taken (inside TxnOffsetCommit): the lock order stays coordinator,
            # then data partitions.
            self._before_transactional_write([tp], group)
            base = self._append(tp, batch, (group, member))
        except KafkaError as exc:
            self._batch_failed(exc)
            batch.settle(None, exc)
            raise
        batch.settle(base, None)

    def commit_transaction(self) -> None:
        """Flush, then commit: every record and offset of the transaction becomes visible at once."""
        self._require_transactional()
        if self._state is _State.ABORTABLE:
            raise TransactionAbortableError(f"the transaction cannot commit: {self._txn_error}")
        if self._state is not _State.IN_TRANSACTION:
            raise IllegalStateError(f"commit_transaction() while {self._state.value}")
        self.flush()
        if self._fatal is not None:
            raise self._fatal
        if self._txn_error is not None:
            raise TransactionAbortableError(f"the transaction cannot commit: {self._txn_error}")
        self._end(commit=True)

    def abort_transaction(self) -> None:
        """Drop unsent records and abort: nothing of the transaction is ever read_committed-visible."""
        self._require_transactional()
        if self._state not in (_State.IN_TRANSACTION, _State.ABORTABLE):
            raise IllegalStateError(f"abort_transaction() while {self._state.value}")
        aborted = TransactionAbortableError("the transaction was aborted before this record was sent")
        for tp in list(self._batches):
            for f in self._batches.pop(tp).futures:
                f._resolve(None, aborted)
        self._transport.deliver_delayed()
        self._end(commit=False)

    def _end(self, commit: bool) -> None:
        if not self._registered:  # nothing reached the log: there is nothing to mark
            self._state = _State.READY
            return
        try:
            ids = self._retry_concurrent(lambda: self._transport.end_txn(
                self.transactional_id, self._ids.producer_id, self._ids.epoch, commit))
        except _FENCING as exc:
            self._fatal = exc if isinstance(exc, ProducerFencedError) else self._fenced(exc)
            self._state = _State.FENCED
            raise self._fatal from exc
        self._set_ids(ids)
        self._registered.clear()
        self._state = _State.READY

    def _set_ids(self, ids: ProducerIdAndEpoch) -> None:
        if ids != self._ids:
            self._sequences.clear()  # a new epoch starts every partition at sequence 0
        self._ids = ids

    # ---- closing --------------------------------------------------------------------------------------------

    def close(self, timeout: float | None = None) -> None:
        """Send what is buffered (aborting an unfinished transaction) and release the store."""
        if self._state is _State.CLOSED:
            return
        try:
            if self._state in (_State.IN_TRANSACTION, _State.ABORTABLE) and self._fatal is None:
                self._abort_on_close()
            elif self.transactional_id is None:
                self.flush()
        finally:
            self._state = _State.CLOSED
            if self._own_store:
                self.store.close()

    def _abort_on_close(self) -> None:
        """Abort the unfinished transaction; an instance that turns out to be fenced has nothing
        left to abort (whoever fenced it aborted it), so closing it must not raise."""
        try:
            self.abort_transaction()
        except _FENCING:
            pass

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _group_and_member(group_metadata: Any) -> tuple[str, MemberRef | None]:
    """The group id and the committing member of a consumer's group_metadata(), or of a bare group id."""
    if isinstance(group_metadata, str):
        return group_metadata, None
    if isinstance(group_metadata, ConsumerGroupMetadata):
        return group_metadata.group_id, group_metadata.member()
    raise IllegalArgumentError(f"expected a consumer's group_metadata() or a group id, not {group_metadata!r}")
