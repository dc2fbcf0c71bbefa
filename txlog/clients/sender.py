"""Kafka's Sender: the producer's background thread that takes sealed batches to the log.

Each round takes, per partition, the batches the accumulator says are due (up to
`max.request.size` bytes) and appends them in ONE `Transport.produce` call: one write and,
for acks=all outside a transaction, one fdatasync for all of them (group commit). Such a round
with one partition may take up to max.in.flight.requests.per.connection groups: they are
appended one after the other and made durable by one fdatasync (`Transport.produce_requests`,
`storage.partition_log.PartitionLog.append_requests`; docs/reliability-scenarios.md scenario 90). Then it
settles their futures, which runs the callbacks in record order, on this thread. A round of
acks=all over several partitions makes its appends in one sync round
(`Transport.produce_durably`, `storage.partition_log.append_all`): their writer locks taken in
directory order, every partition appended without an fdatasync of its own, then all made durable
at once (one syncfs(2) where allowed, else their fdatasyncs in parallel: no rule orders one
partition's write and fdatasync against another's), each HW published after that, and only then
the locks let go, so no partition's tail is ever left unsynced with its lock free
(docs/DESIGN.md §3, docs/reliability-scenarios.md scenario 86). Once the round ended, the futures
are settled here, partition by partition in the round's order; a failure (a refused append, a
failed sync) fails that partition's futures alone. Only a transport that may serve such a round
(`Transport.serves_concurrently`) gets it; a fault plan counts Produce requests one by one. A
blocking `get()` or `flush()` (a transaction's commit) may run a round itself, by `run_round`, when
the accumulator lets it (no round in progress, no callback waiting:
RecordAccumulator._take_for_caller).

What a transaction changes: new partitions are registered first (one AddPartitionsToTxn
for the round), and the data is written without an fdatasync of its own; the coordinator
makes all of a transaction's data durable in one fdatasync per partition before it writes
PREPARE_COMMIT (docs/DESIGN.md, "Durability and the high watermark").

Errors reach the futures of the batches concerned, and the producer's state (fenced,
abortable, an epoch bump after an unknown outcome: KIP-360) through its TransactionManager
(txlog/clients/transaction_manager.py), so the next call on the producer sees them as Kafka's
client would. A `BaseException` here (a fault plan's simulated crash, raised by a wrapping
transport) kills the producer: every later batch and call fails with it.

The sender knows the producer only through what it is given: the accumulator it drains, the
TransactionManager it stamps batches from and reports outcomes to, the transport it writes
through, and a `SenderConfig`. Each round holds the TransactionManager's `lock`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import chain
from typing import TypeVar

from storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
)
from storage.partition_log import BatchAppendResult
from txlog.clients.record_accumulator import ProducerBatch, RecordAccumulator, Work
from txlog.clients.transaction_manager import TransactionManager, increment_sequence
from txlog.errors import IllegalStateError, KafkaTimeoutError, RequestTimedOutError
from txlog.topic_partition import TopicPartition
from txlog.transport import Transport

#: Errors one batch of a group can cause on its own; the append checks every batch before it
#: writes any, so after one of these nothing was written and each batch is retried alone to
#: find the culprit.
_PER_BATCH_ERRORS = (
    RecordTooLargeError,
    InvalidRecordError,
    CorruptRecordError,
    InvalidTimestampError,
    UnsupportedCompressionTypeError,
)


THREAD_PREFIX = "txlog-producer-sender | "
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SenderConfig:
    """The producer's settings the sender acts on (Kafka's names in snake case)."""

    client_id: str  # names the thread: "txlog-producer-sender | <client_id>"
    acks: int  # -1 (all), 1 or 0
    retries: int  # how often a timed-out append is retried with the same bytes
    delivery_timeout_ms: int  # a batch not acknowledged this long after its creation fails


class Sender:
    """Runs the producer's I/O on one daemon thread (daemon as Kafka's: close() or flush() to be sure).

    The thread starts at once and stops when the accumulator is closed and empty, or idle
    (`RecordAccumulator.ready`); the producer then makes a new Sender for its next batch.
    """

    def __init__(
        self,
        accumulator: RecordAccumulator,
        transaction_manager: TransactionManager,
        transport: Transport,
        config: SenderConfig,
    ):
        self._accumulator = accumulator
        self._txn = transaction_manager
        self._transport = transport
        self._config = config
        self._lone_durable = config.acks == -1 and not transaction_manager.transactional  # see run_round
        # A transport whose deliver_delayed is Transport's no-op (no fault plan) is not called for it
        self._deliver_delayed = (
            transport.deliver_delayed if type(transport).deliver_delayed is not Transport.deliver_delayed else None
        )
        self._thread = threading.Thread(target=self._run, name=f"{THREAD_PREFIX}{config.client_id}", daemon=True)
        accumulator.sender_started(self._thread, self.run_round)
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        accumulator = self._accumulator
        while True:
            work = accumulator.ready()
            if work is None:
                return
            self.run_round(work)

    def run_round(self, work: Work, batches: list[ProducerBatch] | None = None) -> None:
        """Send one round's batches and settle them; on this thread or on a blocking get()'s or
        flush()'s (RecordAccumulator.await_result, .flush: the accumulator never lets two rounds overlap).
        `batches`: every batch of `work`, in order, when the caller has them (a get()'s lone batch).

        A round of one batch, acks=all outside a transaction (a durable one-record send's, from a
        get()'s direct path: RecordAccumulator._take_lone), is the partition's append alone: no
        registration, no parallel appends, no sync after it; it goes straight there (issue 26: that
        send pays for no step it skips)."""
        if batches is None:
            batches = list(chain.from_iterable(work.values()))  # no comprehension frame (issue 26)
        lock = self._txn.lock
        try:
            lock.acquire()  # not `with`: txlog/clients/record_accumulator.py's docstring says why
            try:
                if self._lone_durable and len(batches) == 1:
                    self._produce(batches[0].tp, batches)  # all `_round` does for it
                    if self._deliver_delayed is not None:
                        self._deliver_delayed()
                else:
                    self._round(work)
            finally:
                lock.release()
        except BaseException as exc:  # noqa: BLE001 - a simulated crash (or a bug) kills the producer
            self._txn.died(exc)
            for batch in batches:
                batch.settle(None, exc)
        finally:
            self._accumulator.completed(batches, end_of_round=True)

    def _round(self, work: dict[TopicPartition, list[ProducerBatch]]) -> None:
        txn = self._txn
        if txn.transactional:
            try:
                txn.before_transactional_write(list(work))
            except KafkaError as exc:
                error = txn.batch_failed(exc)
                for group in work.values():
                    for batch in group:
                        batch.settle(None, error)
                return
        if self._in_one_round(work):
            self._produce_at_once(work)
        else:
            for tp, group in work.items():
                self._produce(tp, group)
        if self._config.acks != -1:
            # acks=0/1 acknowledged before the fdatasync; it follows at once so the high
            # watermark (what readers may see) catches up without waiting for another writer.
            txn.sync(list(work))
        if self._deliver_delayed is not None:
            self._deliver_delayed()

    def _in_one_round(self, work: dict[TopicPartition, list[ProducerBatch]]) -> bool:
        """Whether the round's appends go in one sync round: durable ones (acks=all outside a
        transaction; the others write without fdatasync and gain nothing), over several partitions,
        through a transport that serves requests as they come (`serves_concurrently`: a fault plan's
        wrapper counts each Produce, and gets them one by one)."""
        return (
            len(work) > 1
            and self._config.acks == -1
            and not self._txn.transactional
            and self._transport.serves_concurrently
        )

    def _produce_at_once(self, work: dict[TopicPartition, list[ProducerBatch]]) -> None:
        """Every partition's batches appended and made durable in one sync round
        (`Transport.produce_durably`), then each partition's futures settled on this thread, in the
        round's order: none before every partition's data is durable and its HW published.

        An epoch bump (after a timed-out request, which only a fault plan makes) never happens here,
        as such transports are not served at once.
        """
        todo = [(tp, group) for tp, group in work.items() if not self._blocked(group)]
        built = [self._build(tp, group) for tp, group in todo]
        outcomes = self._transport.produce_durably(
            [(tp.topic, tp.partition, data) for (tp, _), (data, _) in zip(todo, built, strict=True)], trusted=True
        )
        for (tp, group), (_, records), outcome in zip(todo, built, outcomes, strict=True):
            if isinstance(outcome, KafkaError):
                self._settle(tp, group, outcome)
                continue
            if self._txn.idempotent:
                self._txn.advance_sequence(tp, records)
            self._settle(tp, group, outcome.batches)

    def _produce(self, tp: TopicPartition, group: list[ProducerBatch]) -> None:
        if self._blocked(group):
            return
        requests = self._accumulator.requests(tp, group) if len(group) > 1 else [group]
        if len(requests) == 1:
            try:
                outcome: tuple[BatchAppendResult, ...] | KafkaError = self._append(tp, group)
            except KafkaError as exc:  # what the log answered: the group's outcome
                outcome = exc
            self._settle(tp, group, outcome)
        else:
            self._produce_requests(tp, requests)

    def _produce_requests(self, tp: TopicPartition, requests: list[list[ProducerBatch]]) -> None:
        """A round's several appends to one partition (acks=all outside a transaction, through a
        transport serving them at once: RecordAccumulator._take took them), made durable by one
        fdatasync (`Transport.produce_requests`), then settled in order: none before all are durable.

        As Kafka's in-flight requests: those before a refused one are acknowledged, the refused one
        is settled as a lone append's would be, and those after it are sent again (a sequence error
        then fails them, as the broker answers requests behind a failed one)."""
        txn = self._txn
        built: list[tuple[bytes | bytearray, int]] = []
        ahead = 0
        for group in requests:
            built.append(self._build(tp, group, ahead))
            ahead += built[-1][1]
        try:
            results, refused = self._transport.produce_requests(
                tp.topic, tp.partition, [data for data, _ in built], trusted=True
            )
        except KafkaError as exc:  # the fdatasync failed (or the partition refused before any write)
            error = txn.batch_failed(exc)
            for group in requests:
                for batch in group:
                    batch.settle(None, error)
            return
        for group, (_, records), result in zip(requests, built, results, strict=False):
            if txn.idempotent:
                txn.advance_sequence(tp, records)
            self._settle(tp, group, result.batches)
        if refused is None:
            return
        self._settle(tp, requests[len(results)], refused)
        rest = [batch for group in requests[len(results) + 1 :] for batch in group]
        if rest:
            self._produce(tp, rest)

    def _blocked(self, group: list[ProducerBatch]) -> bool:
        """Settle the group now if it may not be sent (True); an acks=0 group is settled at hand-off."""
        txn, config = self._txn, self._config
        blocker = txn.send_blocker()
        if blocker is None:
            blocker = _expired(group, config.delivery_timeout_ms)
        if blocker is not None:
            for batch in group:
                batch.settle(None, blocker)
            return True
        if config.acks == 0:  # fire and forget: the future completes at hand-off, offset -1
            for batch in group:
                batch.settle(None, None)
        return False

    def _settle(
        self, tp: TopicPartition, group: list[ProducerBatch], outcome: tuple[BatchAppendResult, ...] | KafkaError
    ) -> None:
        """Settle the group's futures with the append's outcome (this thread: callbacks run here)."""
        txn = self._txn
        if isinstance(outcome, KafkaError):
            if len(group) > 1 and isinstance(outcome, _PER_BATCH_ERRORS):
                for batch in group:
                    self._produce(tp, [batch])
                return
            error = txn.batch_failed(outcome)
            for batch in group:
                batch.settle(None, error)
            return
        # One result per batch, in order. Checked here, not by zip(strict=True): a keyword makes
        # zip parse a dict, a cost on every durable send (issue 26).
        if len(outcome) != len(group):
            raise IllegalStateError(f"{len(outcome)} append results for {len(group)} batches")
        for batch, result in zip(group, outcome):  # noqa: B905 - the lengths are checked just above
            # -1: a retried group's batch older than the partition's window (appended, offset unknown)
            batch.settle(result.base_offset if result.base_offset >= 0 else None, None)

    def _build(self, tp: TopicPartition, group: list[ProducerBatch], ahead: int = 0) -> tuple[bytes | bytearray, int]:
        """The group's request bytes, stamped with the producer's ids and the partition's next
        sequences (after `ahead` records of requests going before it in the same call), and how
        many records they hold (what the sequence advances by once appended)."""
        txn = self._txn
        ids, idempotent = txn.producer_id_and_epoch, txn.idempotent
        base = txn.sequence(tp) if idempotent else -1
        if ahead and idempotent:  # (0 ahead, the usual case, is the sequence itself: no call)
            base = increment_sequence(base, ahead)
        parts = []
        records = 0
        for batch in group:
            # the first batch's sequence is the base (a call saved on a durable one-record send's
            # batch), and without idempotence every batch's is -1
            sequence = increment_sequence(base, records) if records and idempotent else base
            data, count = batch.build(ids.producer_id, ids.epoch, sequence)
            parts.append(data)
            records += count
        # A bytearray either way: the log takes this process's own trusted bytearray as it is,
        # stamped in place and written without a copy (`PartitionLog.append`).
        return (parts[0] if len(parts) == 1 else bytearray().join(parts)), records

    def _append(self, tp: TopicPartition, group: list[ProducerBatch]) -> tuple[BatchAppendResult, ...]:
        """One append of the group, retrying timeouts with the same bytes (the log deduplicates
        them) within `retries` and delivery_timeout_ms; per-batch results in order."""
        txn, config = self._txn, self._config
        idempotent = txn.idempotent
        data, records = self._build(tp, group)
        transactional_id = txn.transactional_id
        sync = config.acks == -1 and transactional_id is None
        produce = self._transport.produce
        try:
            try:  # the first attempt called directly: the one a durable one-record send pays for (issue 26)
                result = produce(tp.topic, tp.partition, data, transactional_id, sync=sync, trusted=True)
            except RequestTimedOutError:
                if config.retries < 1 or _expired(group, config.delivery_timeout_ms) is not None:
                    raise
                result = retry_timeouts(
                    lambda: produce(tp.topic, tp.partition, data, transactional_id, sync=sync, trusted=True),
                    config.retries - 1,
                    lambda: _expired(group, config.delivery_timeout_ms) is not None,
                )
        except RequestTimedOutError:
            txn.outcome_unknown(tp)
            raise
        if idempotent:
            txn.advance_sequence(tp, records)
        if not sync:
            txn.mark_unsynced(tp)
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
    return KafkaTimeoutError(
        f"expiring {records} record(s) for {group[0].tp.topic}-{group[0].tp.partition}: "
        f"{age_ms:.0f} ms has passed since batch creation (delivery_timeout_ms="
        f"{delivery_timeout_ms})"
    )
