"""Kafka's Sender: the producer's background thread that takes sealed batches to the log.

Each round takes, per partition, the batches the accumulator says are due (up to
`max.request.size` bytes) and appends them in ONE `Transport.produce` call: one write and,
for acks=all outside a transaction, one fdatasync for all of them (group commit). Then it
settles their futures, which runs the callbacks in record order, on this thread.

What a transaction changes: new partitions are registered first (one AddPartitionsToTxn
for the round), and the data is written without an fdatasync of its own; the coordinator
makes all of a transaction's data durable in one fdatasync per partition before it writes
PREPARE_COMMIT (docs/DESIGN.md, "Durability and the high watermark").

Errors reach the futures of the batches concerned, and the producer's state (fenced,
abortable, an epoch bump after an unknown outcome: KIP-360) through the producer's own
handlers, so the next call on the producer sees them as Kafka's client would. A
`BaseException` here (a fault plan's simulated crash) kills the producer: every later
batch and call fails with it.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Protocol, TypeVar

from storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
)
from storage.partition_log import BatchAppendResult
from txlog.requests import ProducerIdAndEpoch
from txlog.errors import KafkaTimeoutError, RequestTimedOutError
from txlog.clients.record_accumulator import ProducerBatch, RecordAccumulator
from txlog.topic_partition import TopicPartition
from txlog.transport import Transport

#: Errors one batch of a group can cause on its own; the append checks every batch before it
#: writes any, so after one of these nothing was written and each batch is retried alone to
#: find the culprit.
_PER_BATCH_ERRORS = (RecordTooLargeError, InvalidRecordError, CorruptRecordError, InvalidTimestampError,
                     UnsupportedCompressionTypeError)


THREAD_PREFIX = "txlog-producer-sender | "
T = TypeVar("T")


class ProducerCore(Protocol):
    """What the sender uses of its producer (txlog/clients/producer.py): configuration, the ids and
    sequences it stamps batches with, and the producer's handlers for what a request's outcome
    means. The sender holds `_io` whenever it touches any of them."""

    transactional_id: str | None
    client_id: str
    idempotent: bool
    acks: int
    retries: int
    delivery_timeout_ms: int
    _io: threading.RLock
    _ids: ProducerIdAndEpoch
    _sequences: dict[TopicPartition, int]
    _unsynced: set[TopicPartition]
    _transport: Transport

    def _before_transactional_write(self, tps: list[TopicPartition], group: str | None = None) -> None: ...

    def _batch_failed(self, exc: KafkaError) -> KafkaError: ...

    def _outcome_unknown(self, tp: TopicPartition) -> None: ...

    def _send_blocker(self) -> BaseException | None: ...

    def _died(self, exc: BaseException) -> None: ...

    def _sync(self, tps: list[TopicPartition]) -> None: ...


class Sender:
    """Runs the producer's I/O on one daemon thread (daemon as Kafka's: close() or flush() to be sure)."""

    def __init__(self, producer: ProducerCore, accumulator: RecordAccumulator):
        self._producer = producer
        self._accumulator = accumulator
        self._thread = threading.Thread(target=self._run, name=f"{THREAD_PREFIX}{producer.client_id}", daemon=True)
        accumulator.sender_thread = self._thread
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        accumulator = self._accumulator
        while True:
            work = accumulator.ready()
            if work is None:
                return
            batches = [b for group in work.values() for b in group]
            try:
                with self._producer._io:
                    self._round(work)
            except BaseException as exc:  # noqa: BLE001 - a simulated crash (or a bug) kills the producer
                self._producer._died(exc)
                for batch in batches:
                    batch.settle(None, exc)
            finally:
                accumulator.completed(batches)

    def _round(self, work: dict[TopicPartition, list[ProducerBatch]]) -> None:
        producer = self._producer
        if producer.transactional_id is not None:
            try:
                producer._before_transactional_write(list(work))
            except KafkaError as exc:
                error = producer._batch_failed(exc)
                for group in work.values():
                    for batch in group:
                        batch.settle(None, error)
                return
        for tp, group in work.items():
            self._produce(tp, group)
        if producer.acks != -1:
            # acks=0/1 acknowledged before the fdatasync; it follows at once so the high
            # watermark (what readers may see) catches up without waiting for another writer.
            producer._sync(list(work))
        producer._transport.deliver_delayed()

    def _produce(self, tp: TopicPartition, group: list[ProducerBatch]) -> None:
        producer = self._producer
        blocker = producer._send_blocker()
        if blocker is None:
            blocker = _expired(group, producer.delivery_timeout_ms)
        if blocker is not None:
            for batch in group:
                batch.settle(None, blocker)
            return
        if producer.acks == 0:  # fire and forget: the future completes at hand-off, offset -1
            for batch in group:
                batch.settle(None, None)
        try:
            results = self._append(tp, group)
        except KafkaError as exc:
            if len(group) > 1 and isinstance(exc, _PER_BATCH_ERRORS):
                for batch in group:
                    self._produce(tp, [batch])
                return
            error = producer._batch_failed(exc)
            for batch in group:
                batch.settle(None, error)
            return
        for batch, result in zip(group, results):
            # -1: a retried group's batch older than the partition's window (appended, offset unknown)
            batch.settle(result.base_offset if result.base_offset >= 0 else None, None)

    def _append(self, tp: TopicPartition, group: list[ProducerBatch]) -> tuple[BatchAppendResult, ...]:
        """One append of the group, retrying timeouts with the same bytes (the log deduplicates
        them) within `retries` and delivery_timeout_ms; per-batch results in order."""
        producer = self._producer
        ids, idempotent = producer._ids, producer.idempotent
        sequence = producer._sequences.get(tp, 0) if idempotent else -1
        parts = []
        for batch in group:
            parts.append(batch.build(ids.producer_id, ids.epoch, sequence))
            if idempotent:
                sequence = (sequence + batch.records) & 0x7FFFFFFF
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        transactional = producer.transactional_id is not None
        sync = producer.acks == -1 and not transactional
        try:
            result = retry_timeouts(
                lambda: producer._transport.produce(tp.topic, tp.partition, data, producer.transactional_id,
                                                    sync=sync, trusted=True),
                producer.retries, lambda: _expired(group, producer.delivery_timeout_ms) is not None)
        except RequestTimedOutError:
            producer._outcome_unknown(tp)
            raise
        if idempotent:
            producer._sequences[tp] = sequence
        if not sync:
            producer._unsynced.add(tp)
        return result.batches


def retry_timeouts(call: Callable[[], T], retries: int, expired: Callable[[], bool] = lambda: False) -> T:
    """`call()`, retrying a timeout with the same request (the log deduplicates a retry of a
    request that did land) up to `retries` times, or until `expired()`; then the timeout is raised."""
    attempts = 0
    while True:
        try:
            return call()
        except RequestTimedOutError:
            attempts += 1
            if attempts > retries or expired():
                raise


def _expired(group: list[ProducerBatch], delivery_timeout_ms: int) -> KafkaTimeoutError | None:
    """Kafka's batch expiry: a batch not acknowledged within delivery.timeout.ms of its creation fails."""
    age_ms = (time.monotonic() - group[0].created) * 1000
    if age_ms <= delivery_timeout_ms:
        return None
    records = sum(b.records for b in group)
    return KafkaTimeoutError(f"expiring {records} record(s) for {group[0].tp.topic}-{group[0].tp.partition}: "
                             f"{age_ms:.0f} ms has passed since batch creation (delivery_timeout_ms="
                             f"{delivery_timeout_ms})")
