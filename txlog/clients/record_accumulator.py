"""Kafka's RecordAccumulator: where `send` leaves records for the sender thread.

Each partition has at most one open batch (records still being added) and a queue of sealed
batches waiting for the sender. A batch is sealed when it is full (`batch.size`: the next
record that does not fit seals it), when it has waited `linger.ms`, or when somebody wants
it now (`flush()`, a future's `get()`); the sender takes every sealed batch of a partition,
up to `max.request.size` bytes, and appends them in one call (group commit: one write, one
fdatasync). A retried group is recognised whole by the partition (its last batch is a
duplicate: storage/partition_log.py `_retried_group`), so a group may hold more batches than
the 5 a partition remembers per producer. When a round has one partition to send and the
producer allows it (`requests_per_round`: acks=all outside a transaction, Kafka's in-flight
requests), the sender takes up to that many such groups, appended one after the other and made
durable by one fdatasync (`PartitionLog.append_requests`; issue 26: produce_many's 1 MiB batches
were one fdatasync each).

`buffer.memory` bounds the bytes held here (each batch counts its `batch.size`, as the Java
producer's pool does); `send` blocks while it is full, for at most `max.block.ms`. The
bytearrays of `produce_many`'s batches are recycled through a `BufferPool` (Kafka's): a
settled batch's buffer is kept for the next one, and the free buffers count against
`buffer.memory` too (they are let go first when a batch needs the room).

All state is guarded by one lock, with two conditions on it: the sender waits on one for
work, `flush()`/`get()`/a full buffer wait on the other for results, so neither side is woken
for the other's events. The sender is woken only when it must act sooner than it planned to
(a new batch whose linger ends before the sender's planned wake-up, sealed work, a flush): a
send that opens a batch while the sender already sleeps until an earlier linger deadline
costs no wake-up.

A blocking `get()` (without a timeout, which a round could outlast) runs the round that sends
its batch on its own thread when no round is in progress and no callback waits on the batches
it would take (callbacks keep Kafka's rule: they run on the sender thread). The application
thread would otherwise hand the batch to the sender and sleep until it is back: two thread
switches for each durable one-record send. A `flush()` without a timeout (a transaction's
commit) runs its rounds by the same rule (`_take_for_caller`), every open batch at once.
Rounds never overlap (`_in_round`), whichever thread runs them, so each
partition's batches still reach the log in the order they were sealed. When the get()'s batch is the
only thing to send, it is taken directly (`_take_lone`: the durable one-record send's path, issue 26,
docs/reliability-scenarios.md scenario 85).

The locks such a send takes once per record (opening its batch, the get()'s take, settling the
result, the round's end) are taken by acquire() and released in a `finally`, not by `with`: a
lock's __enter__ and __exit__ parse their arguments as keywords, about twice the cost of acquire()
and release() (timeit: 191 against 100 ns; issue 26).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from threading import get_ident
from typing import Protocol

from storage.records import BatchBuilder, stamp_batch
from txlog.clients.future_record_metadata import ProduceRequestResult, run_settled_callbacks
from txlog.errors import IllegalStateError, KafkaTimeoutError
from txlog.topic_partition import TopicPartition

#: A sender thread with nothing to send for this long stops; the next batch starts another.
SENDER_IDLE_S = 5.0

WHOLE_OR_BUILT = "a batch without a builder holds the bytes produce_many encoded"

#: What a round is given: per partition, its batches in order (one append each, or several:
#: `split_requests` cuts them, RecordAccumulator.requests).
Work = dict[TopicPartition, list["ProducerBatch"]]


class RoundRunner(Protocol):
    """The sender's `run_round`: one round's work, and optionally its batches in order (a caller
    that has them spares the round collecting them)."""

    def __call__(self, work: Work, batches: list[ProducerBatch] | None = None, /) -> None: ...


def split_requests(batches: Iterable[ProducerBatch], limit: int, most: int) -> list[list[ProducerBatch]]:
    """The first of `batches`, in order, cut into at most `most` requests (appends) of up to `limit`
    bytes each, a request taking one batch at least: the group-commit rule, in one place."""
    requests: list[list[ProducerBatch]] = []
    size = 0
    for batch in batches:
        if requests and size + batch.size <= limit:
            requests[-1].append(batch)
            size += batch.size
            continue
        if len(requests) == most:
            break
        requests.append([batch])
        size = batch.size
    return requests


class BufferPool:
    """Kafka's BufferPool, for the bytearrays `produce_many` encodes whole batches into.

    A fresh bytearray of a batch's size is new memory whose every page faults on first touch;
    with 1 KiB values that was half the CPU of `produce_many`. Settled batches give their
    buffers back here, and the encoder takes them (storage.records.encode_batches `buffers`).
    Only buffers of about a batch's size are kept (a small tail batch's would be regrown, a
    huge one's would hold memory). The accumulator's lock guards it; the accumulator keeps
    free + used within buffer.memory.

    Nothing here decides whether a buffer is still in use: it is given back only once its batch
    is settled, and the encoder also refuses (drops) one that anything else still refers to.
    """

    __slots__ = ("_free", "free_bytes", "_smallest", "_largest")

    def __init__(self, batch_size: int):
        self._free: list[bytearray] = []
        self.free_bytes = 0  # allocated bytes of the free buffers
        self._smallest = batch_size // 2
        self._largest = batch_size + (batch_size >> 3) + 8  # CPython's over-allocation of a full batch

    def __len__(self) -> int:
        return len(self._free)

    def take_all(self) -> list[bytearray]:
        """Every free buffer, for one encoding call (what it leaves goes back with `give`)."""
        free, self._free, self.free_bytes = self._free, [], 0
        return free

    def give(self, buffer: bytearray, room: int) -> None:
        """Keep `buffer` if it is of a batch's size and the free buffers stay within `room` bytes."""
        size = buffer.__alloc__()
        if self._smallest <= size <= self._largest and self.free_bytes + size <= room:
            self._free.append(buffer)
            self.free_bytes += size

    def shrink(self, room: int) -> None:
        """Let free buffers go until they hold at most `room` bytes."""
        while self._free and self.free_bytes > room:
            self.free_bytes -= self._free.pop().__alloc__()


class ProducerBatch:
    """One batch of one partition: records in a builder (`send`), or bytes already encoded
    natively (`produce_many`) whose producer id, epoch and sequence are stamped when sent."""

    __slots__ = ("tp", "builder", "encoded", "record_count", "created", "result", "reserved", "waiter")

    def __init__(
        self,
        tp: TopicPartition,
        reserved: int,
        waiter: RecordAccumulator,
        *,
        builder: BatchBuilder | None = None,
        encoded: bytearray | None = None,
        record_count: int = 0,
    ):
        self.tp = tp
        self.waiter = waiter  # what a future's get() waits on
        self.builder = builder
        self.encoded = encoded
        self.record_count = record_count  # of an encoded batch; a builder counts its own
        self.created = time.monotonic()
        self.result = ProduceRequestResult()
        self.reserved = reserved  # bytes of buffer.memory this batch holds until it is settled

    @property
    def size(self) -> int:
        """Bytes of the batch (uncompressed, for one still in its builder)."""
        if self.builder is not None:
            return self.builder.estimated_size
        assert self.encoded is not None, WHOLE_OR_BUILT
        return len(self.encoded)

    @property
    def records(self) -> int:
        return self.builder.record_count if self.builder is not None else self.record_count

    def build(self, producer_id: int, producer_epoch: int, base_sequence: int) -> tuple[bytes | bytearray, int]:
        """The batch's bytes with the ids and sequence it is sent with (decided only now: a
        KIP-360 epoch bump between `send` and the write must not reach old batches), and its
        record count (`records`, read here: the sender needs both, and a call less per batch)."""
        builder = self.builder
        if builder is not None:
            data = builder.stamp_build(producer_id, producer_epoch, base_sequence)  # positional: no keyword dict
            return data, builder.record_count
        assert self.encoded is not None, WHOLE_OR_BUILT
        stamp_batch(self.encoded, producer_id, producer_epoch, base_sequence)
        return self.encoded, self.record_count

    def settle(self, base_offset: int | None, error: BaseException | None) -> None:
        """Resolve every future of the batch: one shared write, then the callbacks in record order."""
        if self.result.done:
            return
        callbacks = self.result.settle(base_offset, error)
        if callbacks:
            run_settled_callbacks(self, callbacks)

    def close(self) -> None:
        """No more appends (the builder refuses them atomically, so a `send` racing the seal
        either got its record in or opens a new batch)."""
        if self.builder is not None:
            self.builder.close()


class RecordAccumulator:
    """Open and sealed batches per partition, handed to the sender in order."""

    def __init__(
        self,
        *,
        linger_ms: int,
        group_limit: Callable[[TopicPartition], int],
        buffer_memory: int,
        max_block_ms: int,
        on_seal: Callable[[TopicPartition], None],
        batch_size: int = 16384,
        requests_per_round: int = 1,
    ):
        self.lock = threading.Lock()  # `send` takes it alone (cheaper than entering the condition)
        self.cond = threading.Condition(self.lock)  # results: get(), flush(), room in the buffer
        self._work = threading.Condition(self.lock)  # the sender's: something to send, or sooner
        # The sender's round, run by a blocking get() on its own thread: the running sender's own
        # `run_round` (`sender_started`: no wrapper between them; None until a sender started, when
        # no batch exists either). It ends with `completed`, as the sender's own rounds do.
        self._run_round: RoundRunner | None = None
        self._in_round = False  # a round is in progress (on the sender or on a get()'s thread)
        # get_ident() of who runs it (callbacks may run there): a C call, where current_thread() is Python
        self._round_ident: int | None = None
        # When the sleeping sender wakes on its own (monotonic seconds); -inf while it is awake
        # (it looks at everything before it sleeps again, under the lock) or waits for a get()'s
        # round to end (the end wakes it if anything is left), so a new batch need not wake it.
        self._sender_wake_at = -math.inf
        self._sender_waits_round = False  # the sender sleeps until a get()'s round ends
        self._sender_round_wake = -math.inf  # when that sleep ends on its own (see `ready`)
        self._linger = linger_ms / 1000
        self._group_limit = group_limit  # bytes of one append to a partition (the producer's rule)
        # Appends a round may make to its partition when it has only one (see the module's docstring).
        self._requests_per_round = requests_per_round
        self._buffer_memory = buffer_memory
        self._max_block = max_block_ms / 1000
        self._on_seal = on_seal  # the sticky partitioner moves on when its batch is sealed
        self.open: dict[TopicPartition, ProducerBatch] = {}
        self._sealed: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._buffered = 0
        self._pool = BufferPool(batch_size)
        self._incomplete = 0  # batches made and not yet settled: what flush() waits for
        self._flushing = 0
        # Threads waiting on `cond` (every wait on it is counted), so that `completed`, once per
        # round, notifies only when somebody waits: a durable one-record send's get() sent its batch
        # itself and waits for nothing, and Condition.notify_all is Python (issue 26).
        self._result_waiters = 0
        self._expedite: set[TopicPartition] = set()
        self.closed = False
        self.sender_thread: threading.Thread | None = None

    def sender_started(self, thread: threading.Thread, run_round: RoundRunner) -> None:
        """A Sender was made for `thread` (not started yet): it is the sender thread now, and its
        `run_round` what a blocking get() runs on its own thread (`await_result`)."""
        self.sender_thread = thread
        self._run_round = run_round

    # ---- the application side (caller holds `cond` where noted) --------------------------------------------

    def reserve(self, size: int) -> None:
        """Hold `size` bytes of buffer.memory, waiting at most max.block.ms (caller holds `cond`).

        The sender thread never waits here (a callback that sends must not wait for itself),
        and one batch always fits, so a record larger than the buffer is still tried.
        """
        if self._buffered + size + self._pool.free_bytes > self._buffer_memory:
            self._pool.shrink(max(0, self._buffer_memory - self._buffered - size))  # free buffers go first
        if self._buffered and self._buffered + size > self._buffer_memory and not self._on_io_thread():
            deadline = time.monotonic() + self._max_block
            while self._buffered and self._buffered + size > self._buffer_memory:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise KafkaTimeoutError(
                        f"the producer's buffer ({self._buffer_memory} bytes) stayed full for "
                        f"max_block_ms={int(self._max_block * 1000)}"
                    )
                self._wait_for_results(left)
        self._buffered += size

    def open_batch(self, tp: TopicPartition, builder: BatchBuilder) -> ProducerBatch:
        """A new open batch of tp around `builder` (caller holds `cond`), holding `builder.max_bytes`
        of buffer.memory (`reserve`: it may wait); a full batch still open is sealed first.

        One call for what `send` needs once per batch, which a durable one-record send needs once
        per record (issue 26)."""
        if tp in self.open:  # a full batch; none after a get() took it (the durable one-record send)
            self.seal(tp)
        size = builder.max_bytes
        self.reserve(size)
        batch = ProducerBatch(tp, size, self, builder=builder)
        self._incomplete += 1
        self.open[tp] = batch
        if batch.created + self._linger < self._sender_wake_at:
            self._work.notify()  # its linger ends before the sender would look again
        return batch

    def add_sealed(self, batch: ProducerBatch) -> None:
        """A new batch of its partition, ready to send (caller holds `cond`): behind what `send` left open."""
        tp = batch.tp
        self._incomplete += 1
        self.seal(tp)  # anything `send` left open goes first: order within a partition holds
        self._sealed.setdefault(tp, deque()).append(batch)
        self._work.notify()  # ready work

    def seal(self, tp: TopicPartition, *, notify: bool = True) -> None:
        """Close the partition's open batch to appends and queue it (caller holds `cond`); the
        sender is told unless the caller sends it itself (`notify=False`)."""
        batch = self.open.pop(tp, None)
        if batch is not None:
            batch.close()
            self._sealed.setdefault(tp, deque()).append(batch)
            self._on_seal(tp)
            if notify:
                self._work.notify()

    def await_result(self, tp: TopicPartition, result: ProduceRequestResult, timeout: float | None) -> None:
        """A future's get(): its partition goes now rather than after linger; wait for the result.

        Without a timeout, when no round is in progress, this thread sends the batch itself
        (see the module's docstring); otherwise the sender is asked to expedite the partition.
        (A round cannot be left halfway, so a get() with a timeout never runs one: it could
        not give up in time.)
        """
        if timeout is None and self._run_round is not None:
            batch = self._take_lone(tp, result)
            if batch is not None:  # the direct path: nothing else to send, this thread sends it
                group = [batch]
                self._run_round({tp: group}, group)  # ends with `completed`, which settled it or failed it
                if result.done:
                    return
        self._refuse_on_sender("a future's get()")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            while not result.done:
                work = self._take_for_caller(tp) if timeout is None else None
                if work is not None:
                    self._run_here(work)
                    continue
                if tp not in self._expedite:
                    self._expedite.add(tp)
                    self._work.notify()
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise KafkaTimeoutError(f"no acknowledgement for {tp.topic}-{tp.partition} within {timeout} s")
                self._wait_for_results(left)

    def _take_lone(self, tp: TopicPartition, result: ProduceRequestResult) -> ProducerBatch | None:
        """tp's open batch, sealed and taken as a round for the calling thread, when it is the only
        thing to send: the durable one-record send's direct path (issue 26), what `_take_for_caller`
        would hand out in this case, found without looking at every queue. None (nothing taken) unless
        no round is in progress, no batch of any partition waits sealed, `result` is the open batch's
        own, and no callback waits on it (callbacks run on the sender thread).

        No round in progress also means this is not the sender thread in a callback (callbacks run
        inside rounds): the general path refuses that case (`_refuse_on_sender`).
        """
        self.lock.acquire()  # not `with`: see the module's docstring
        try:
            if self._in_round or self._sealed:
                return None
            batch = self.open.get(tp)
            if batch is None or batch.result is not result or result.callbacks is not None:
                return None
            del self.open[tp]
            batch.close()
            self._on_seal(tp)
            self._in_round, self._round_ident = True, get_ident()
            return batch
        finally:
            self.lock.release()

    def _take_for_caller(self, tp: TopicPartition | None) -> Work | None:
        """tp's batch (every open batch for None: a flush) sealed and a round's work taken for the
        calling thread to send (caller holds `cond`); None when it must be left to the sender: a
        round is in progress (rounds never overlap), there is no round runner, or a callback waits
        on a batch (callbacks run on the sender thread). The one rule for whether a blocking get()
        or flush() may run a round itself."""
        if self._in_round or self._run_round is None or self._callbacks_waiting(tp):
            return None
        for sealed in list(self.open) if tp is None else (tp,):
            self.seal(sealed, notify=False)
        work = self._take()
        if not work:
            return None
        self._in_round, self._round_ident = True, get_ident()
        return work

    def _callbacks_waiting(self, tp: TopicPartition | None) -> bool:
        """Whether a callback was added to tp's open batch (any open batch for None) or to any
        sealed batch (caller holds `cond`)."""
        opened = self.open.values() if tp is None else [self.open[tp]] if tp in self.open else []
        if any(batch.result.callbacks for batch in opened):
            return True
        return any(b.result.callbacks for queue in self._sealed.values() for b in queue)

    def _run_here(self, work: Work) -> None:
        """Run the round on the calling thread, without the lock (the caller holds `cond`: it is
        released for the round and held again after it). The round ends with `completed`."""
        assert self._run_round is not None, "only _take_for_caller hands out work, and it needs a runner"
        self.lock.release()
        try:
            self._run_round(work)
        finally:
            self.lock.acquire()

    def _wait_for_results(self, timeout: float | None) -> None:
        """`cond.wait`, counted in `_result_waiters` (caller holds `cond`)."""
        self._result_waiters += 1
        try:
            self.cond.wait(timeout)
        finally:
            self._result_waiters -= 1

    def flush(self, timeout: float | None) -> None:
        """Send every batch now and wait until each is settled (acknowledged or failed).

        Without a timeout, this thread runs the rounds itself while `_take_for_caller` lets it
        (a get()'s rule: no round in progress, no callback waiting), so a transaction's commit
        sends its records without a hand-off to the sender thread and back (issue 26); the
        sender is woken only when this thread must leave a round to it. Rounds never overlap
        either way, so each partition's batches reach the log in the order they were sealed.
        """
        self._refuse_on_sender("flush()")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            self._flushing += 1
            asked = False  # whether the sender was told to send everything (once is enough)
            try:
                while self._incomplete:
                    work = self._take_for_caller(None) if timeout is None else None
                    if work is not None:
                        self._run_here(work)  # ends with `completed`
                        continue
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise KafkaTimeoutError(f"flush() did not finish within {timeout} s")
                    if not asked:  # the sender seals and sends everything while `_flushing`
                        self._work.notify()
                        asked = True
                    self._wait_for_results(left)
            finally:
                self._flushing -= 1

    def spare_buffers(self) -> list[bytearray]:
        """The pool's free buffers, for one `encode_batches` call; `return_spare` takes back the rest."""
        with self.lock:
            return self._pool.take_all()

    def return_spare(self, buffers: list[bytearray]) -> None:
        with self.lock:
            for buffer in buffers:
                self._pool.give(buffer, self._buffer_memory - self._buffered)

    def fail_unsent(self, error: BaseException) -> None:
        """Settle every batch the sender has not taken with `error` (abort_transaction drops them)."""
        with self.cond:
            doomed = list(self.open.values())
            for batch in doomed:
                batch.close()
            for queue in self._sealed.values():
                doomed.extend(queue)
            self.open.clear()
            self._sealed.clear()
        for batch in doomed:
            batch.settle(None, error)
        self.completed(doomed)  # not a round's end: a round in progress goes on

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
            self._work.notify()

    def _on_io_thread(self) -> bool:
        """Whether the calling thread sends batches: the sender, or a get() running a round."""
        # the sender by identity (a dead thread's ident may be reused), a round's runner by ident (alive meanwhile)
        return threading.current_thread() is self.sender_thread or (self._in_round and get_ident() == self._round_ident)

    def _refuse_on_sender(self, what: str) -> None:
        if self._on_io_thread():
            raise IllegalStateError(f"{what} cannot be called from a producer callback: it would wait for itself")

    # ---- the sender side --------------------------------------------------------------------------------------

    def ready(self) -> Work | None:
        """Block until some batches should go; per partition, in order, one request's worth.

        None is the sender's cue to stop: the accumulator is closed and empty, or nothing has
        come for SENDER_IDLE_S. Stopping when idle lets a producer nobody closed be collected
        (the thread holds it); `send` starts a new sender with the next batch
        (`sender_thread` is cleared under the lock, so exactly one of them sees it gone).
        """
        with self.cond:
            idle_since = time.monotonic()
            while True:
                now = time.monotonic()
                if not self._in_round:  # a get() may be running one: rounds never overlap
                    self._seal_due(now)
                    work = self._take()
                    if work:
                        self._in_round, self._round_ident = True, get_ident()
                        return work
                if self.open or self._incomplete:
                    idle_since = now
                elif self.closed or now - idle_since >= SENDER_IDLE_S:
                    self.sender_thread = None
                    return None
                if self._in_round:
                    # Nothing can be taken until a get()'s or flush()'s round ends, and its end
                    # wakes the sender if anything is left for it: a send meanwhile need not. A
                    # batch opened after that end need not either: this sleep lasts one linger at
                    # most (`completed` hands its end to `open_batch`), so a caller running round
                    # after round (a commit per transaction) wakes the sender once a linger, not
                    # once a round (issue 26).
                    wait = min(self._linger, SENDER_IDLE_S) or SENDER_IDLE_S
                    self._sender_waits_round, self._sender_round_wake = True, now + wait
                else:
                    wait = self._next_deadline() if self.open else SENDER_IDLE_S
                    self._sender_wake_at = now + wait
                try:
                    self._work.wait(wait)
                finally:
                    self._sender_wake_at, self._sender_waits_round = -math.inf, False

    def completed(self, batches: list[ProducerBatch], *, end_of_round: bool = False) -> None:
        """These were settled (by a round, `end_of_round`, or dropped unsent): release their
        buffer and wake whoever waits on results; after a get()'s round, the sender if it waited."""
        # `cond`'s lock (the Condition's own enter and exit are Python calls), not by `with` (module docstring)
        self.lock.acquire()
        try:
            for batch in batches:
                self._buffered -= batch.reserved
                batch.reserved = 0
            for batch in batches:  # after every release: the room is what they leave free
                if batch.encoded is not None:
                    self._pool.give(batch.encoded, self._buffer_memory - self._buffered)
                    batch.encoded = None  # settled: its bytes were written (or never will be)
            self._incomplete -= len(batches)
            if end_of_round:
                self._in_round, self._round_ident = False, None
                if self._sender_waits_round:
                    if self.open or self._sealed or self.closed:
                        self._work.notify()
                    else:  # it sleeps on as an idle sender: a batch whose linger ends sooner wakes it
                        self._sender_waits_round, self._sender_wake_at = False, self._sender_round_wake
            if self._result_waiters:
                self.cond.notify_all()
        finally:
            self.lock.release()

    def _seal_due(self, now: float) -> None:
        """Seal the open batches whose linger passed, or that a flush, get() or close wants now."""
        everything = self._flushing or self.closed
        for tp in [
            tp for tp, b in self.open.items() if everything or tp in self._expedite or now - b.created >= self._linger
        ]:
            self.seal(tp)
        self._expedite.clear()

    def _take(self) -> Work:
        """Every sealed batch of each partition, in order, up to its group limit in bytes (one at least);
        up to `requests_per_round` such groups when only one partition has any."""
        work = {}
        most = self._requests_per_round if sum(1 for queue in self._sealed.values() if queue) == 1 else 1
        for tp, queue in self._sealed.items():
            if queue:
                taken = sum(len(r) for r in split_requests(queue, self._group_limit(tp), most))
                work[tp] = [queue.popleft() for _ in range(taken)]
        for tp in [tp for tp, queue in self._sealed.items() if not queue]:
            del self._sealed[tp]
        return work

    def requests(self, tp: TopicPartition, group: list[ProducerBatch]) -> list[list[ProducerBatch]]:
        """A round's batches of `tp` (`_take`) as the appends that carry them, in order."""
        return split_requests(group, self._group_limit(tp), len(group))

    def _next_deadline(self) -> float:
        """Seconds until the oldest open batch's linger passes (the caller checked one is open)."""
        oldest = min(b.created for b in self.open.values())
        return max(0.0, oldest + self._linger - time.monotonic())
