"""What `Producer.send` and `Producer.produce_many` return: futures settled by the sender thread.

Kafka's client splits this the same way: one ProduceRequestResult per batch, shared by the
FutureRecordMetadata of every record in it. Settling a batch writes its result once instead
of visiting each record's future (a visit per record was a fifth of the producer's cost);
a future is only (batch, index) and builds its RecordMetadata when asked, and callbacks wait
on the batch's result, by record index.

Callbacks run on the sender thread, in record order, as Kafka's run on its I/O thread; a
callback must not block on the producer (flush, get, commit): that would wait for itself.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from txlog.consumer_record import RecordMetadata
from txlog.topic_partition import TopicPartition

Callback = Callable[[RecordMetadata | None, BaseException | None], Any]

_log = logging.getLogger("txlog.clients.producer")

#: ProduceRequestResult's lock, shared by every result (see the class).
_LOCK = threading.Lock()


class ProduceRequestResult:
    """How one batch ended, shared by the futures of its records, and the callbacks waiting on it.

    Callbacks are kept here, by record index, not on the futures: a future is then only
    (batch, index), made by one C-level call per `send`.

    Made once per batch (a durable one-record send makes one per record: issue 26), so it has no
    `__init__`: the class attributes are the initial state, and `ProduceRequestResult()` is one
    C-level call. Every result shares one lock (`_LOCK`) for `settle` against `add`: either holds
    it for a few attribute reads and writes and calls nothing under it, so sharing costs no wait
    worth a lock of its own, and a batch allocates none.
    """

    base_offset: int | None = None
    error: BaseException | None = None
    done = False
    callbacks: dict[int, list[Callback]] | None = None

    def settle(self, base_offset: int | None, error: BaseException | None) -> dict[int, list[Callback]]:
        """Record the outcome; returns the callbacks to run, each once, in record order."""
        _LOCK.acquire()  # not `with`: txlog/clients/record_accumulator.py's docstring says why
        try:
            self.base_offset, self.error, self.done = base_offset, error, True
            callbacks, self.callbacks = self.callbacks, None
        finally:
            _LOCK.release()
        return callbacks or {}

    def add(self, index: int, fn: Callback) -> bool:
        """Keep `fn` for record `index`; False if the batch has settled (the caller runs it now)."""
        with _LOCK:
            if self.done:
                return False
            if self.callbacks is None:
                self.callbacks = {}
            self.callbacks.setdefault(index, []).append(fn)
            return True


class ResultWaiter(Protocol):
    """The accumulator's side of a blocking get(): send the batch now and wait for its result."""

    def await_result(self, tp: TopicPartition, result: ProduceRequestResult, timeout: float | None) -> None: ...


class RecordsView(Protocol):
    """What a future reads of its batch's builder (storage.records.BatchBuilder), by record index."""

    def metadata_at(self, index: int) -> tuple[int, int, int]: ...


class BatchView(Protocol):
    """What a future holds of its batch (txlog.clients.record_accumulator.ProducerBatch).

    Read-only members: a future never assigns them, and a batch's own attributes then match
    covariantly (its waiter is the accumulator, a ResultWaiter). The builder is None for a
    batch `produce_many` encoded whole, which has no per-record futures.
    """

    @property
    def tp(self) -> TopicPartition: ...

    @property
    def result(self) -> ProduceRequestResult: ...

    @property
    def builder(self) -> RecordsView | None: ...

    @property
    def waiter(self) -> ResultWaiter: ...


def run_callback(fn: Callback, metadata: RecordMetadata | None, error: BaseException | None) -> None:
    """Run a user's callback; its exception is logged, never allowed to stop the sender (as in Kafka)."""
    try:
        fn(metadata, error)
    except Exception:  # noqa: BLE001 - user code: log and carry on with the next record
        _log.exception("error in a producer callback")


def record_metadata(batch: BatchView, index: int) -> RecordMetadata | None:
    """The metadata of record `index` of a settled, successful batch (None otherwise).

    With acks=0 nothing reports an offset, so it is -1, as in Kafka.
    """
    result = batch.result
    if not result.done or result.error is not None:
        return None
    offset = -1 if result.base_offset is None else result.base_offset + index
    tp, builder = batch.tp, batch.builder
    assert builder is not None, "only send() makes per-record futures, and its batches have builders"
    # tuple.__new__ with every field, not RecordMetadata(...): the NamedTuple's own __new__ is a
    # Python function that only binds the arguments, one more call per durable send (issue 26).
    # metadata_at: (timestamp, key size, value size) in one native call, not three.
    return tuple.__new__(RecordMetadata, (tp.topic, tp.partition, offset) + builder.metadata_at(index))


def run_settled_callbacks(batch: BatchView, callbacks: dict[int, list[Callback]]) -> None:
    """Run what `ProduceRequestResult.settle` handed back, in record order."""
    error = batch.result.error
    for index in sorted(callbacks):
        metadata = record_metadata(batch, index)
        for fn in callbacks[index]:
            run_callback(fn, metadata, error)


class FutureRecordMetadata(tuple[BatchView, int]):
    """Resolves to the record's RecordMetadata once its batch was acknowledged (per `acks`).

    A (batch, index) tuple: `send` makes one per record, and a tuple subclass without its
    own constructor is made by a C-level call. The timestamp and sizes are read from the
    batch's builder only when the metadata is asked for; callbacks live on the batch's result.
    """

    __slots__ = ()

    # Shadows tuple.index (a search by value), which has no meaning for a future: the tuple is
    # only how the future is made cheaply, and `index` is the record's position (public API).
    @property
    def index(self) -> int:  # type: ignore[override]
        """The record's position in its batch."""
        return self[1]

    def done(self) -> bool:
        return self[0].result.done

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """The record's metadata, waiting for its batch (sent at once, not after linger); raises
        the send's error, or KafkaTimeoutError once `timeout` seconds passed."""
        batch = self[0]
        result = batch.result
        if not result.done:
            batch.waiter.await_result(batch.tp, result, timeout)
        if result.error is not None:
            raise result.error
        metadata = record_metadata(batch, self[1])
        assert metadata is not None, "await_result returns only once the batch settled, and it succeeded"
        return metadata

    def exception(self) -> BaseException | None:
        return self[0].result.error

    def add_callback(self, fn: Callback) -> FutureRecordMetadata:
        """`fn(metadata, error)` once the batch is acknowledged or has failed (at once if it has)."""
        batch = self[0]
        if not batch.result.add(self[1], fn):
            run_callback(fn, record_metadata(batch, self[1]), batch.result.error)
        return self

    def __repr__(self) -> str:
        batch = self[0]
        return f"FutureRecordMetadata({batch.tp.topic}-{batch.tp.partition}, record {self[1]} of its batch)"

    # A tuple compares and hashes by value; a future is itself only.
    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__


class FutureProduceMany:
    """What `produce_many` returns: one future for every batch the call made.

    `get()` waits for all of them and returns how many records were sent, raising the first
    error; `batches()` gives each batch's partition, base offset, record count and error.
    """

    def __init__(self, waiter: ResultWaiter, parts: list[tuple[TopicPartition, int, ProduceRequestResult]]):
        self._waiter = waiter
        self._parts = parts

    @property
    def records(self) -> int:
        """How many records the call sent (or tried to)."""
        return sum(count for _, count, _ in self._parts)

    def done(self) -> bool:
        return all(result.done for _, _, result in self._parts)

    def exception(self) -> BaseException | None:
        return next((result.error for _, _, result in self._parts if result.error is not None), None)

    def get(self, timeout: float | None = None) -> int:
        """Records sent, once every batch is acknowledged; raises the first batch error."""
        for tp, _, result in self._parts:
            if not result.done:
                self._waiter.await_result(tp, result, timeout)
        error = self.exception()
        if error is not None:
            raise error
        return self.records

    def batches(self) -> list[tuple[int, int, int, BaseException | None]]:
        """(partition, base offset, records, error) of every batch in the call's order; the base
        offset is -1 while unknown (not yet sent, failed, or acks=0)."""
        return [
            (
                tp.partition,
                -1 if result.base_offset is None else result.base_offset,
                count,
                result.error if result.done else None,
            )
            for tp, count, result in self._parts
        ]

    def batches_done(self) -> list[tuple[int, int, int, BaseException | None]]:
        """`batches()` of the batches already settled."""
        return [row for row, (_, _, result) in zip(self.batches(), self._parts, strict=True) if result.done]
