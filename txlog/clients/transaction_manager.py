"""Kafka's TransactionManager: who the producer is (ids, sequences) and where its transaction stands.

As in Kafka's Java producer (`org.apache.kafka.clients.producer.internals.TransactionManager`),
one object holds everything about the producer's identity and its transaction:

* the producer id and epoch batches are stamped with (`ProducerIdAndEpoch`), from
  InitProducerId and, with transaction protocol v2 (KIP-890), from every EndTxn;
* the next sequence of each partition, restarted at 0 whenever the epoch changes;
* the partitions registered in the open transaction (AddPartitionsToTxn, AddOffsetsToTxn),
  and the partitions written without an fdatasync (a transaction's data; acks=0/1);
* the client-side state machine (`TransactionState`) the application's calls move through,
  and the error that makes the transaction abortable or the producer unusable.

The coordinator's requests (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn) run on
the calling thread through the producer's transport: with no broker a request is a call, and
the application waits for these anyway. The sender thread (txlog/clients/sender.py) stamps
batches with `producer_id_and_epoch` and `sequence`, and reports what each request's outcome
means (`batch_failed`, `outcome_unknown`, `died`), so the application's next call sees it as
Kafka's client would:

* a fencing error (ProducerFencedError, or the log's InvalidProducerEpochError for a
  transactional producer, reported as the fencing it is) is fatal: every later call raises it;
* any other failed write of a transaction makes it abortable (TransactionAbortableError on
  send and commit) until `abort_transaction`;
* a batch whose outcome stays unknown after its retries bumps an idempotent producer's epoch
  (KIP-360) and restarts its sequences, so no later batch can be mistaken for it; a
  transactional producer's abort bumps the epoch instead;
* a BaseException on the sender (a fault plan's simulated crash, or a bug) kills the producer.

Threads: the sender thread and the application thread never use the transport, the ids or the
sequences at the same time; whoever does holds `lock` (a re-entrant lock: the application's
requests call each other). The state, the fatal error and `sendable` are read without it (each
read is one attribute); they change together under a lock of their own, so `sendable` never
disagrees with them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from enum import Enum
from typing import TypeVar

from storage.errors import KafkaError
from txlog.errors import (
    ConcurrentTransactionsError,
    IllegalStateError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    TransactionAbortableError,
    UnknownProducerIdError,
)
from txlog.requests import (
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    NO_PRODUCER_ID_AND_EPOCH,
    InitProducerIdResult,
    ProducerIdAndEpoch,
)
from txlog.topic_partition import TopicPartition
from txlog.transport import Transport

#: The errors that say a newer instance of the transactional id (or a timeout) fenced this producer.
FENCING_ERRORS = (ProducerFencedError, InvalidProducerEpochError)
#: How often a coordinator request answered ConcurrentTransactionsError is retried (with a short backoff).
CONCURRENT_RETRIES = 50
_SEQUENCE_MASK = 0x7FFFFFFF
T = TypeVar("T")


def increment_sequence(sequence: int, increment: int) -> int:
    """The sequence `increment` records after `sequence`, wrapping past 2**31 - 1 to 0 as Kafka's
    DefaultRecordBatch.incrementSequence does."""
    return (sequence + increment) & _SEQUENCE_MASK


class TransactionState(Enum):
    """Where the producer stands (Kafka's TransactionManager.State, without the transient
    INITIALIZING, COMMITTING and ABORTING states: those requests run on the caller's thread).

    A producer without a transactional id is READY from the start until it is CLOSED.
    """

    UNINITIALIZED = "uninitialized"  # transactional: init_transactions() not called yet
    READY = "ready"  # no transaction open
    IN_TRANSACTION = "in-transaction"
    ABORTABLE = "abortable"  # a write of the transaction failed: only abort_transaction() is allowed
    # KIP-939 (Kafka's PREPARED_TRANSACTION): prepare_transaction() flushed it, or init_transactions(
    # keep_prepared_txn=True) found it open; only commit, abort and complete_transaction() are allowed
    PREPARED = "prepared-transaction"
    FENCED = "fenced"  # a newer instance took over: every call raises the fencing error
    CLOSED = "closed"


class TransactionManager:
    """The producer's ids, per-partition sequences and transaction state; see the module docstring.

    `transactional_id` None makes an idempotent (or, with `idempotent=False`, a plain)
    producer's manager; a transactional one must be idempotent (the Producer checks its
    configuration). `clock` (ms) dates the transaction's deadline check.
    """

    def __init__(
        self,
        transport: Transport,
        *,
        transactional_id: str | None,
        idempotent: bool,
        transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS,
        enable_2pc: bool = False,
        clock: Callable[[], int] = lambda: int(time.time() * 1000),
    ):
        self.transactional_id = transactional_id
        self.idempotent = idempotent
        self.transaction_timeout_ms = transaction_timeout_ms
        #: KIP-939 two-phase commit (transaction.two.phase.commit.enable): the coordinator never times
        #: this id's transactions out, and prepare_transaction / keep_prepared_txn are allowed.
        self.enable_2pc = enable_2pc
        # The (producer id, epoch) of the prepared transaction (Kafka's preparedTxnState), while PREPARED.
        self._prepared = NO_PRODUCER_ID_AND_EPOCH
        # A transaction kept open at init (keep_prepared_txn): registered at the coordinator, not by us.
        self._kept_open = False
        #: Held by whoever uses the transport, the ids or the sequences: a sender round, or one of
        #: the application's requests (InitProducerId, TxnOffsetCommit, EndTxn, a flush's sync).
        self.lock = threading.RLock()
        self._transport = transport
        self._clock = clock
        self._ids = ProducerIdAndEpoch(-1, -1)
        self._sequences: dict[TopicPartition, int] = {}
        self._unsynced: set[TopicPartition] = set()  # written without fdatasync (transactions, acks=1)
        self._registered: set[TopicPartition] = set()  # in the open transaction (AddPartitionsToTxn)
        self._txn_deadline_ms = 0
        self._txn_error: BaseException | None = None  # why the open transaction is abortable
        self._fatal: BaseException | None = None  # why the producer is unusable (fenced, crashed)
        self._status = threading.Lock()  # the state, the fatal error and `sendable` change together
        # The one state `send` accepts without a closer look (check_can_send explains the others).
        self._sending_state = TransactionState.IN_TRANSACTION if self.transactional else TransactionState.READY
        self._state = TransactionState.UNINITIALIZED if self.transactional else TransactionState.READY
        #: True while a record may be sent without a closer look (`check_can_send`): read on every
        #: `send`, so it is one attribute, kept in step with the state and the fatal error.
        self.sendable = self._state is self._sending_state

    # ---- what the producer reads -------------------------------------------------------------------------

    @property
    def transactional(self) -> bool:
        return self.transactional_id is not None

    @property
    def state(self) -> TransactionState:
        return self._state

    @property
    def fatal_error(self) -> BaseException | None:
        """The error every later call raises (fenced, or the sender died), None while usable."""
        return self._fatal

    @property
    def producer_id_and_epoch(self) -> ProducerIdAndEpoch:
        """The ids batches are stamped with now; (-1, -1) before InitProducerId or without idempotence."""
        return self._ids

    @property
    def has_open_transaction(self) -> bool:
        """A transaction was begun (or kept at init) and not ended (it may be abortable or prepared)."""
        return self._state in (TransactionState.IN_TRANSACTION, TransactionState.ABORTABLE, TransactionState.PREPARED)

    @property
    def prepared_ids(self) -> ProducerIdAndEpoch:
        """The ids of the prepared transaction while PREPARED (Kafka's preparedTransactionState), else (-1, -1)."""
        return self._prepared

    # ---- the application's calls ---------------------------------------------------------------------------

    def init_producer_id(self) -> None:
        """InitProducerId for an idempotent producer without transactional id: a fresh producer id at epoch 0."""
        if self.transactional or not self.idempotent:
            raise IllegalStateError("init_producer_id() is for an idempotent producer without transactional_id")
        with self.lock:
            self._set_ids(self._transport.init_producer_id(None))

    def required_transactional_id(self) -> str:
        """The transactional id a transactional request names; IllegalStateError without one."""
        if self.transactional_id is None:
            raise IllegalStateError("transactional method called on a producer without transactional_id")
        return self.transactional_id

    def ensure_transactional(self) -> None:
        """Raise unless a transactional method may be called: the producer has a transactional id,
        is not closed and is not fenced or dead (that error is raised)."""
        self.required_transactional_id()
        if self._state is TransactionState.CLOSED:
            raise IllegalStateError("the producer is closed")
        if self._fatal is not None:
            raise self._fatal

    def init_transactions(self, keep_prepared_txn: bool = False) -> None:
        """InitProducerId for the transactional id: its producer id and a new epoch, fencing older
        instances (the coordinator ends whatever they left open). UNINITIALIZED -> READY.

        With two-phase commit, `keep_prepared_txn` keeps the transaction a previous instance left
        open (KIP-939): -> PREPARED with its ids, when there is one. Without two-phase commit it is
        refused by the coordinator (InvalidRequestError), as Kafka's is.
        """
        self.ensure_transactional()
        if self._state is not TransactionState.UNINITIALIZED:
            raise IllegalStateError(f"init_transactions() called twice (state {self._state.value})")
        tid = self.required_transactional_id()
        with self.lock:
            if self.enable_2pc or keep_prepared_txn:
                result = self._retry_concurrent(
                    lambda: self._transport.init_producer_id_2pc(
                        tid,
                        self.transaction_timeout_ms,
                        enable_2pc=self.enable_2pc,
                        keep_prepared_txn=keep_prepared_txn,
                    )
                )
            else:
                result = InitProducerIdResult(
                    self._retry_concurrent(lambda: self._transport.init_producer_id(tid, self.transaction_timeout_ms))
                )
            self._set_ids(result.ids)
            if result.ongoing.producer_id >= 0:
                self._prepared = result.ongoing
                self._kept_open = True
        self._transition(TransactionState.PREPARED if self._kept_open else TransactionState.READY)

    def begin_transaction(self) -> None:
        """READY -> IN_TRANSACTION; nothing is asked of the coordinator until the first write."""
        self.ensure_transactional()
        self.ensure_not_prepared()
        if self._state is TransactionState.UNINITIALIZED:
            raise IllegalStateError("call init_transactions() before begin_transaction()")
        if self._state is not TransactionState.READY:
            raise IllegalStateError(f"begin_transaction() while {self._state.value}")
        with self.lock:
            self._registered.clear()
            self._txn_error = None
        self._transition(TransactionState.IN_TRANSACTION)

    def check_can_send(self) -> None:
        """Raise why a record may not be sent now: closed, fenced or dead, the transaction must be
        aborted (TransactionAbortableError), is prepared, or a transactional producer outside a transaction."""
        if self._state is TransactionState.CLOSED:
            raise IllegalStateError("the producer is closed")
        if self._fatal is not None:
            raise self._fatal
        self.ensure_not_prepared()
        if self.transactional_id is not None:
            if self._state is TransactionState.ABORTABLE:
                raise TransactionAbortableError(f"the transaction must be aborted: {self._txn_error}")
            if self._state is not TransactionState.IN_TRANSACTION:
                raise IllegalStateError("send outside a transaction: call begin_transaction() first")

    def ensure_not_prepared(self) -> None:
        """Raise while a transaction is prepared: only commit, abort and complete_transaction() may
        follow (Kafka's throwIfInPreparedState)."""
        if self._state is TransactionState.PREPARED:
            raise IllegalStateError(
                "the transaction is prepared: only commit_transaction(), abort_transaction() or "
                "complete_transaction() may follow"
            )

    def ensure_can_commit(self) -> None:
        """Raise unless the open transaction may commit (checked before its records are flushed)."""
        self.ensure_transactional()
        if self._state is TransactionState.ABORTABLE:
            raise TransactionAbortableError(f"the transaction cannot commit: {self._txn_error}")
        if self._state not in (TransactionState.IN_TRANSACTION, TransactionState.PREPARED):
            raise IllegalStateError(f"commit_transaction() while {self._state.value}")

    def ensure_can_prepare(self) -> None:
        """Raise unless the open transaction may be prepared (KIP-939): two-phase commit is enabled
        and a transaction is in progress (InvalidTxnStateError otherwise, as Kafka's client raises),
        and none of its writes failed (TransactionAbortableError)."""
        self.ensure_transactional()
        if not self.enable_2pc:
            raise InvalidTxnStateError(
                "cannot prepare a transaction when two-phase commit is not enabled "
                "(transaction_two_phase_commit_enable=True)"
            )
        self.ensure_not_prepared()
        if self._state is TransactionState.ABORTABLE:
            raise TransactionAbortableError(f"the transaction cannot be prepared: {self._txn_error}")
        if self._state is not TransactionState.IN_TRANSACTION:
            raise InvalidTxnStateError(f"no transaction in progress to prepare (state {self._state.value})")

    def prepare_transaction(self) -> ProducerIdAndEpoch:
        """IN_TRANSACTION -> PREPARED, once the producer flushed (and synced) every record; returns
        the ids that wrote it. Nothing is asked of the coordinator: with two-phase commit the
        transaction is already safe from the timeout, and what it holds is durable."""
        if self._fatal is not None:
            raise self._fatal
        if self._txn_error is not None:
            raise TransactionAbortableError(f"the transaction cannot be prepared: {self._txn_error}")
        self._prepared = self._ids
        self._transition(TransactionState.PREPARED)
        return self._prepared

    def ensure_can_complete(self) -> ProducerIdAndEpoch:
        """The prepared ids, or InvalidTxnStateError when no transaction is prepared (Kafka's words)."""
        self.ensure_transactional()
        if self._state is not TransactionState.PREPARED:
            raise InvalidTxnStateError(
                "cannot complete the transaction: none is prepared (call prepare_transaction() first, "
                "or init_transactions(keep_prepared_txn=True) found no transaction left open)"
            )
        return self._prepared

    def commit_transaction(self) -> None:
        """EndTxn(commit), once the producer sent everything buffered: raises what a write of the
        transaction met meanwhile (the fatal error, or TransactionAbortableError). -> READY."""
        if self._fatal is not None:
            raise self._fatal
        if self._txn_error is not None:
            raise TransactionAbortableError(f"the transaction cannot commit: {self._txn_error}")
        self._end(commit=True)

    def ensure_can_abort(self) -> None:
        """Raise unless a transaction is open (in progress or abortable)."""
        self.ensure_transactional()
        if not self.has_open_transaction:
            raise IllegalStateError(f"abort_transaction() while {self._state.value}")

    def abort_transaction(self) -> None:
        """EndTxn(abort), once the producer dropped what was unsent and waited for what the sender
        had taken; requests still in flight arrive first, so the markers follow them. -> READY.

        A producer that died (a BaseException, not a Kafka error) raises it: nothing more happens.
        """
        if self._fatal is not None and not isinstance(self._fatal, KafkaError):
            raise self._fatal
        with self.lock:
            self._transport.deliver_delayed()
        self._end(commit=False)

    def close(self) -> None:
        """-> CLOSED: every later call raises IllegalStateError."""
        self._transition(TransactionState.CLOSED)

    # ---- what the sender (and TxnOffsetCommit) ask; the caller holds `lock` ----------------------------------

    def before_transactional_write(self, tps: list[TopicPartition], group: str | None = None) -> None:
        """Register new partitions (AddPartitionsToTxn, or AddOffsetsToTxn for `group`'s offsets
        partition), and let the coordinator fence us if our transaction timed out."""
        new = [tp for tp in tps if tp not in self._registered]
        tid, pid, epoch = self.required_transactional_id(), self._ids.producer_id, self._ids.epoch
        if new:
            if group is None:
                value = self._retry_concurrent(lambda: self._transport.add_partitions_to_txn(tid, pid, epoch, new))
            else:
                value = self._retry_concurrent(lambda: self._transport.add_offsets_to_txn(tid, pid, epoch, group))
            self._registered.update(new)
            self._txn_deadline_ms = value.start_ms + value.timeout_ms
        elif self._clock() > self._txn_deadline_ms:
            self._transport.check_transaction_alive(tid, pid, epoch)

    def sequence(self, tp: TopicPartition) -> int:
        """The base sequence of tp's next batch (0 for a partition not written at this epoch)."""
        return self._sequences.get(tp, 0)

    def advance_sequence(self, tp: TopicPartition, records: int) -> None:
        """tp's batches of `records` records were appended: its next batch starts after them."""
        self._sequences[tp] = increment_sequence(self._sequences.get(tp, 0), records)

    def send_blocker(self) -> BaseException | None:
        """Why a batch may not be sent now (the producer is dead or fenced, the transaction must abort)."""
        if self._fatal is not None:
            return self._fatal
        if self._txn_error is not None:
            return TransactionAbortableError(f"the transaction must be aborted: {self._txn_error}")
        return None

    def batch_failed(self, exc: KafkaError) -> KafkaError:
        """Note what a failed request means for the producer; returns the error its records report
        (an epoch error of a transactional producer is reported as the fencing it is)."""
        if isinstance(exc, FENCING_ERRORS):
            fatal = self._fenced(exc) if isinstance(exc, InvalidProducerEpochError) and self.transactional else exc
            self._transition(TransactionState.FENCED if self.transactional else None, fatal)
            exc = fatal
        elif isinstance(exc, (OutOfOrderSequenceError, UnknownProducerIdError)) and not self.transactional:
            self._bump_epoch()  # the log lost track of our sequences: start over at a new epoch
        if self.transactional and self._state is TransactionState.IN_TRANSACTION:
            self._txn_error = exc
            self._transition(TransactionState.ABORTABLE)
        return exc

    def outcome_unknown(self, tp: TopicPartition) -> None:
        """tp's batch may or may not be in the log: its sequence must never be reused (KIP-360).

        A transaction aborts instead (its EndTxn bumps the epoch); without idempotence there
        is no sequence to reuse.
        """
        if not self.transactional:
            self._bump_epoch()

    def died(self, exc: BaseException) -> None:
        """A simulated crash (or a bug) in the sender: the producer is dead from now on (the first one counts)."""
        with self._status:
            if self._fatal is None:
                self._fatal = exc
                self.sendable = False

    # ---- partitions written without fdatasync -------------------------------------------------------------

    def mark_unsynced(self, tp: TopicPartition) -> None:
        """tp was written without an fdatasync (caller holds `lock`): a flush or the commit syncs it."""
        self._unsynced.add(tp)

    def unsynced_partitions(self) -> list[TopicPartition]:
        return list(self._unsynced)

    def sync(self, tps: list[TopicPartition]) -> None:
        """fdatasync partitions written without one, so the high watermark covers them (caller holds `lock`)."""
        self._transport.sync_partitions([(tp.topic, tp.partition) for tp in tps])
        self._unsynced.difference_update(tps)

    def sync_unsynced(self) -> None:
        """`sync` every partition written without an fdatasync, taking `lock` (a flush)."""
        if self._unsynced:
            with self.lock:
                self.sync(list(self._unsynced))

    # ---- internals ---------------------------------------------------------------------------------------------

    def _end(self, commit: bool) -> None:
        """EndTxn and its answer: the next epoch (protocol v2), or the fencing it met."""
        with self.lock:
            if not self._registered and not self._kept_open:  # nothing reached the log: there is nothing to mark
                self._transition(TransactionState.READY)
                self._prepared = NO_PRODUCER_ID_AND_EPOCH
                return
            tid = self.required_transactional_id()
            try:
                ids = self._retry_concurrent(
                    lambda: self._transport.end_txn(tid, self._ids.producer_id, self._ids.epoch, commit)
                )
            except FENCING_ERRORS as exc:
                fatal = exc if isinstance(exc, ProducerFencedError) else self._fenced(exc)
                self._transition(TransactionState.FENCED, fatal)
                raise fatal from exc
            self._set_ids(ids)
            self._registered.clear()
            self._unsynced.clear()  # the coordinator synced the data (commit) or marked it (abort)
            self._kept_open = False
            self._prepared = NO_PRODUCER_ID_AND_EPOCH
            self._transition(TransactionState.READY)

    def _set_ids(self, ids: ProducerIdAndEpoch) -> None:
        if ids != self._ids:
            self._sequences.clear()  # a new epoch starts every partition at sequence 0
        self._ids = ids

    def _bump_epoch(self) -> None:
        """KIP-360 on the client: a new epoch (sequences from 0) so no later batch reuses an unsure sequence."""
        if self.idempotent:
            self._ids = ProducerIdAndEpoch(self._ids.producer_id, self._ids.epoch + 1)
            self._sequences.clear()

    def _fenced(self, exc: KafkaError) -> ProducerFencedError:
        """The log's epoch check in user terms: a newer instance of the transactional id took over
        (its init_transactions bumped the epoch and aborted our open transaction)."""
        return ProducerFencedError(
            f"transactional id '{self.transactional_id}' was fenced by a newer instance of it; this producer's "
            f"transaction was aborted (producer id {self._ids.producer_id} epoch {self._ids.epoch}: {exc})"
        )

    def _retry_concurrent(self, call: Callable[[], T]) -> T:
        """A coordinator request, retried while a previous transition of the id is still pending."""
        failures = 0
        while True:
            try:
                return call()
            except ConcurrentTransactionsError:
                failures += 1
                if failures == CONCURRENT_RETRIES:
                    raise
                time.sleep(min(0.005 * failures, 0.1))

    def _transition(self, state: TransactionState | None, fatal: BaseException | None = None) -> None:
        """Change the state and/or the fatal error, and `sendable` with them."""
        with self._status:
            if state is not None:
                self._state = state
            if fatal is not None:
                self._fatal = fatal
            self.sendable = self._state is self._sending_state and self._fatal is None
