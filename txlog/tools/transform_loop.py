"""Exactly-once consume-transform-produce: the loop behind `txlog process` and the demo.

Each round reads up to `transaction_size` committed input records, transforms them, and
writes the outputs *and* the group's next input offsets in one transaction. Either both
become visible or neither does, so a process killed at any moment and restarted resumes
from the committed offsets and never emits an output twice:

* `init_transactions` on restart fences the dead instance and aborts what it left open;
* the consumer starts from the group's committed offsets (stable ones: KIP-447);
* after an abort the consumer is moved back to the committed offsets, because an abort
  does not rewind a consumer by itself (KAFKA-17582, docs/reliability-scenarios.md scenario 21).

Without `partitions`, the loop is a member of its consumer group: start it N times
(each with its own transactional id) and the group splits the input partitions between
the instances, moving them when one joins, leaves, dies or stalls. The offsets each
round commits carry the member's epoch (KIP-447), so a stalled instance that the group
replaced cannot commit its round: its transaction is refused and aborted, and its
outputs never become visible. A round never spans a rebalance: partitions are only
revoked inside `poll`, between rounds.

The producer and the consumer share one `txlog.transport.Transport` (or the `transport=`
given, e.g. a fault-injecting one), so every request of the loop crosses one seam.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from storage.store import Store
from txlog.clients.consumer import Consumer
from txlog.clients.producer import Producer
from txlog.consumer_record import ConsumerRecord
from txlog.errors import (
    KafkaError,
    ProducerFencedError,
    StaleMemberEpochError,
    TransactionOutcomeUnknownError,
    UnknownMemberIdError,
    UnstableOffsetCommitError,
)
from txlog.fetch import IsolationLevel
from txlog.topic_partition import OffsetAndMetadata, TopicPartition
from txlog.transport import Transport

Output = Any  # a value, or a (key, value) pair, or a (key, value, headers) triple
Transform = Callable[[list[ConsumerRecord]], Iterable[Output]]


class AbortRequested(Exception):
    """Raised by a transform (or an `abort_if` hook) to abort this round and process it again."""


@dataclass(slots=True)
class LoopStats:
    transactions_committed: int = 0
    transactions_aborted: int = 0
    records_in: int = 0
    records_out: int = 0


def _as_output(item: Output) -> tuple[Any, Any, Any]:
    if isinstance(item, tuple):
        key, value, *rest = item
        return key, value, rest[0] if rest else None
    return None, item, None


class TransformLoop:
    """One exactly-once copier: `input_topic` (some or all partitions) -> `transform` -> `output_topic`."""

    def __init__(
        self,
        store: str | os.PathLike | Store,
        *,
        input_topic: str,
        output_topic: str,
        group_id: str,
        transactional_id: str,
        transform: Transform,
        transaction_size: int = 100,
        partitions: Iterable[int] | None = None,
        transaction_timeout_ms: int = 60_000,
        abort_if: Callable[[list[ConsumerRecord]], bool] | None = None,
        consumer_config: dict[str, Any] | None = None,
        listener: Any = None,
        transport: Transport | None = None,
    ):
        if transaction_size < 1:
            raise ValueError("transaction_size must be at least 1")
        self._own_store = not isinstance(store, Store)
        self.store = store if isinstance(store, Store) else Store.open(store)
        self.input_topic, self.output_topic, self.group_id = input_topic, output_topic, group_id
        self.transform, self.transaction_size, self.abort_if = transform, transaction_size, abort_if
        self.stats = LoopStats()
        consumer_config = dict(consumer_config or {})
        if transport is None:
            transport = Transport(self.store, clock=consumer_config.get("clock"))
        self._transport = transport
        self.producer = Producer(
            self.store,
            transactional_id=transactional_id,
            transaction_timeout_ms=transaction_timeout_ms,
            transport=transport,
        )
        self.consumer = Consumer(
            self.store,
            group_id=group_id,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            transport=transport,
            **consumer_config,
        )
        self.producer.init_transactions()  # fences a previous instance and aborts what it left open
        self.grouped = partitions is None
        if partitions is None:
            self.consumer.subscribe([input_topic], listener=listener)
        else:
            self.consumer.assign([TopicPartition(input_topic, p) for p in partitions])

    @property
    def partitions(self) -> list[TopicPartition]:
        """The input partitions this instance reads now (for a group member: its current assignment)."""
        return sorted(self.consumer.assignment())

    def run(
        self,
        *,
        until_caught_up: bool = True,
        poll_timeout_ms: int = 100,
        max_rounds: int | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> LoopStats:
        """Process rounds until the input is consumed up to its LSO (or `should_stop()` / `max_rounds`)."""
        rounds = 0
        while max_rounds is None or rounds < max_rounds:
            if should_stop is not None and should_stop():
                break
            records = self.consumer.poll(timeout_ms=poll_timeout_ms, max_records=self.transaction_size)
            if not records:
                if until_caught_up and self.caught_up():
                    break
                continue
            rounds += 1
            self.process(records)
        return self.stats

    def caught_up(self) -> bool:
        """This instance's input is read up to its last stable offset (for a group: the whole group's).

        A group member is done only when every input partition's committed offset has
        reached its LSO: until then a partition may still come its way (its owner may die).
        """
        mine = self.partitions
        ends = self.consumer.end_offsets(mine)
        try:
            if not all(self.consumer.position(tp) >= ends[tp] for tp in mine):
                return False
        except UnstableOffsetCommitError:
            return False  # a partition waits for a pending offset commit: not read yet
        if not self.grouped:
            return True
        return self._group_caught_up()

    def _group_caught_up(self) -> bool:
        count = self.store.partition_count(self.input_topic)
        every = [TopicPartition(self.input_topic, p) for p in range(count)]
        ends = self.consumer.end_offsets(every)
        starts = self.consumer.beginning_offsets(every)
        try:
            committed = self.consumer.committed(every)
        except UnstableOffsetCommitError:
            return False
        for tp in every:
            om = committed[tp]
            if not self._nothing_left(tp, om.offset if om is not None else starts[tp], ends[tp]):
                return False
        return True

    def _nothing_left(self, tp: TopicPartition, committed: int, end: int) -> bool:
        """No committed record lies between the group's committed offset and the LSO.

        The committed offset may stop short of the LSO by control markers or aborted
        data, which a round never commits past when no record follows them.
        """
        while committed < end:
            result = self._transport.fetch(
                tp, committed, IsolationLevel.READ_COMMITTED, max_records=1, max_bytes=1 << 20
            )
            if result.records or result.next_offset <= committed:
                return False
            committed = result.next_offset
        return True

    def process(self, records: list[ConsumerRecord]) -> bool:
        """One transaction over `records`; True if it committed, False if it was aborted."""
        self.producer.begin_transaction()
        try:
            outputs = list(self.transform(records))
            for item in outputs:
                key, value, headers = _as_output(item)
                self.producer.send(self.output_topic, value=value, key=key, headers=headers)
            if self.abort_if is not None and self.abort_if(records):
                raise AbortRequested("abort requested")
            self.producer.send_offsets_to_transaction(self._positions(), self.consumer.group_metadata())
            self.producer.commit_transaction()
        except (AbortRequested, KafkaError) as exc:
            self._abort(exc)
            return False
        except BaseException:
            self._abort(None)
            raise
        self.stats.transactions_committed += 1
        self.stats.records_in += len(records)
        self.stats.records_out += len(outputs)
        return True

    def _positions(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """Where the consumer stands: past the round's records and any control or aborted batches.

        Partitions whose position is not known yet (waiting for a pending commit) are left out.
        """
        out = {}
        for tp in self.partitions:
            try:
                out[tp] = OffsetAndMetadata(self.consumer.position(tp))
            except UnstableOffsetCommitError:
                continue
        return out

    def _abort(self, cause: BaseException | None) -> None:
        """Abort the round and move the consumer back to the committed offsets."""
        if isinstance(cause, ProducerFencedError):
            # Another instance owns the transactional id now: this one can never commit again,
            # so it leaves the group at once instead of holding partitions until it is expired.
            self.consumer.unsubscribe()
            raise cause
        if isinstance(cause, TransactionOutcomeUnknownError):
            raise cause  # never abort a possible commit: the caller retries commit_transaction
        self.producer.abort_transaction()
        if isinstance(cause, (UnknownMemberIdError, StaleMemberEpochError)):
            self.consumer.enforce_rebalance()  # the group moved on: learn the new assignment before the next round
        self.stats.transactions_aborted += 1
        partitions = self.partitions
        committed = self.consumer.committed(partitions, timeout_ms=5000)
        for tp in partitions:
            om = committed.get(tp)
            if om is not None:
                self.consumer.seek(tp, om.offset)
            else:
                self.consumer.seek_to_beginning(tp)

    def close(self) -> None:
        try:
            self.consumer.close(autocommit=False)
            self.producer.close()
        finally:
            if self._own_store:
                self.store.close()

    def __enter__(self) -> TransformLoop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
