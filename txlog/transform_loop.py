"""Exactly-once consume-transform-produce: the loop behind `txlog process` and the demo.

Each round reads up to `transaction_size` committed input records, transforms them, and
writes the outputs *and* the group's next input offsets in one transaction. Either both
become visible or neither does, so a process killed at any moment and restarted resumes
from the committed offsets and never emits an output twice:

* `init_transactions` on restart fences the dead instance and aborts what it left open;
* the consumer starts from the group's committed offsets (stable ones: KIP-447);
* after an abort the consumer is moved back to the committed offsets, because an abort
  does not rewind a consumer by itself (KAFKA-17582, reliability scenario 21).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from storage.store import Store
from txlog.consumer import Consumer
from txlog.consumer_record import ConsumerRecord
from txlog.errors import KafkaError, ProducerFencedError, TransactionOutcomeUnknownError
from txlog.producer import Producer
from txlog.topic_partition import OffsetAndMetadata, TopicPartition

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

    def __init__(self, store: str | os.PathLike | Store, *, input_topic: str, output_topic: str, group_id: str,
                 transactional_id: str, transform: Transform, transaction_size: int = 100,
                 partitions: Iterable[int] | None = None, transaction_timeout_ms: int = 60_000,
                 abort_if: Callable[[list[ConsumerRecord]], bool] | None = None):
        if transaction_size < 1:
            raise ValueError("transaction_size must be at least 1")
        self._own_store = not isinstance(store, Store)
        self.store = Store.open(store) if self._own_store else store
        self.input_topic, self.output_topic, self.group_id = input_topic, output_topic, group_id
        self.transform, self.transaction_size, self.abort_if = transform, transaction_size, abort_if
        self.stats = LoopStats()
        count = self.store.partition_count(input_topic)
        self.partitions = [TopicPartition(input_topic, p) for p in (range(count) if partitions is None else partitions)]
        self.producer = Producer(self.store, transactional_id=transactional_id,
                                 transaction_timeout_ms=transaction_timeout_ms)
        self.consumer = Consumer(self.store, group_id=group_id, isolation_level="read_committed",
                                 enable_auto_commit=False, auto_offset_reset="earliest")
        self.producer.init_transactions()  # fences a previous instance and aborts what it left open
        self.consumer.assign(self.partitions)

    def run(self, *, until_caught_up: bool = True, poll_timeout_ms: int = 100,
            max_rounds: int | None = None, should_stop: Callable[[], bool] | None = None) -> LoopStats:
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
        """Every input partition has been read up to its last stable offset."""
        ends = self.consumer.end_offsets(self.partitions)
        return all(self.consumer.position(tp) >= ends[tp] for tp in self.partitions)

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
            self.producer.send_offsets_to_transaction(self._positions(), self.group_id)
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
        """Where the consumer stands: past the round's records and any control or aborted batches."""
        return {tp: OffsetAndMetadata(self.consumer.position(tp)) for tp in self.partitions}

    def _abort(self, cause: BaseException | None) -> None:
        """Abort the round and move the consumer back to the committed offsets."""
        if isinstance(cause, (ProducerFencedError, TransactionOutcomeUnknownError)):
            raise cause  # fenced: another instance owns the id; unknown: never abort a possible commit
        self.producer.abort_transaction()
        self.stats.transactions_aborted += 1
        committed = self.consumer.committed(self.partitions, timeout_ms=5000)
        for tp in self.partitions:
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

    def __enter__(self) -> "TransformLoop":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
