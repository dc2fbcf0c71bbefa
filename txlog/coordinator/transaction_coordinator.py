"""The transaction coordinator: Kafka's state machine over `__transaction_state`, without a daemon.

The coordinator is a module, not a process (docs/DESIGN.md §5). A transactional id's state is
the last record for its key in the coordinator partition that owns it
(docs/kafka-formats.md §4.3). Every state change happens under that partition's lock, after
catching up on what other processes wrote, and starts with housekeeping nobody else would do
for us:

* a PREPARE_COMMIT / PREPARE_ABORT found in the log is rolled forward (markers to every
  partition, then COMPLETE_*): the PREPARE record is the single commit point
  (docs/reliability-scenarios.md rule 11), so completing it is always safe and never guessed;
* an Ongoing transaction older than its timeout is fenced and aborted;
* an idle transactional id older than `transactional.id.expiration.ms` is tombstoned.

Transaction protocol v2 (KIP-890): every end of a transaction bumps the epoch and the
markers carry the new epoch, so a late request of the previous epoch is refused by epoch
alone. A fence (timeout, or a new instance's init) bumps twice — once for the fence and
once for the end — so the fenced producer's epoch is never mistaken for a retry of a
completed end. Markers and COMPLETE records are written while the coordinator lock is
held, so no marker can land after the next transaction of the same id has started.

Txlog's own producer speaks v2. Kafka clients that end transactions with EndTxn before v5
(librdkafka, kafka-python, aiokafka; `txlog serve` passes `client_version=0` for them) speak
v1: their epoch stays the same across transactions, the markers carry it, and a retried
EndTxn is recognised by its completed state alone. Such an end records
`client_transaction_version` 0, as Kafka's coordinator records TV_0 for an EndTxn below v5.
A fence bumps twice whichever protocol the client speaks (Kafka with transaction.version 2
does the same).

Fsyncs, only where order needs them (docs/reliability-scenarios.md rule 19): the ONGOING
registration is durable before any data of the transaction is written (un-synced data may
reach the disk by writeback at any time, and data without a durable registration would pin
the LSO for ever); the data itself is written without fdatasync and synced, every partition
of the transaction, before PREPARE_COMMIT is written; PREPARE and each marker are fsynced
(a COMPLETE may not become durable before its marker); COMPLETE_* is not (lost, it is
re-derived from the durable PREPARE by roll-forward, and markers are idempotent). An abort
syncs no data: its markers' fdatasync covers each partition's file anyway.

No rule orders one partition's fsync against another's, so the fdatasyncs of a step are issued
at once: a disk completes concurrent flushes in far fewer device cache flushes than a loop does.
The locks, catch-ups and HW publishes stay on this thread; only the bare fdatasyncs go to other
threads (`storage.partition_log.WriterHold`, `sync_all`; a wide round may be one syncfs,
`storage.durable.sync_round`). The data syncs run together, and all of them end before
PREPARE_COMMIT is written; a commit whose partitions fit one window keeps them held from there to
its markers' syncs (`_end`). The markers are appended on this thread, without fdatasync, in
partition order, while a window of their partitions is held (locks taken and caught up once,
before the markers), then synced together (a one-partition transaction's marker is appended
with its own fdatasync instead, one lock round: `_write_markers`): one call per window (`WriterHold.mark`, the marker
encoded once) when nobody watches them one by one, else one `write_marker` call per partition
(so a fault plan or a transport's wrapper sees each as before); COMPLETE_* is written only after
every marker's sync ended. For an abort, the window's `.txnindex` entries (each durable before its
own marker) are appended under the hold first and fsynced together (`WriterHold.index_aborts`); a
partition whose entry's fsync failed gets no marker, and roll-forward writes it later.
An unsynced marker is below no high watermark, so no reader sees it before it is durable; one
lost to a crash before its sync is written again by roll-forward from the durable PREPARE.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, replace
from typing import Protocol

from storage.errors import KafkaStorageError, UnknownTopicOrPartitionError
from storage.partition_log import AppendResult, PartitionLog, WriterHold, sync_all
from storage.records import ControlType, RecordBatch, build_batch
from storage.store import Store
from storage.topic_name import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from txlog.coordinator.internal_topics import ensure_internal_topic, owner_partition
from txlog.coordinator.replayed_state import ReplayedPartition
from txlog.errors import (
    ConcurrentTransactionsError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    KafkaError,
    ProducerFencedError,
    TransactionOutcomeUnknownError,
)
from txlog.requests import (
    CLIENT_TRANSACTION_VERSION_2,
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    InitProducerIdResult,
    ProducerIdAndEpoch,
    check_id,
)
from txlog.schemas.transaction_log import (
    TWO_PHASE_COMMIT_TIMEOUT_MS,
    TxnLogValue,
    TxnState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

MAX_EPOCH = 32767  # Short.MAX_VALUE: reserved so a fence is always possible
EXHAUSTED_EPOCH = 32766  # at or above this, the next bump rotates to a new producer id (docs/kafka-formats.md §5.9)
FENCED_ROTATION_EPOCH = 1  # first epoch of a producer id rotated in by a fence, see _prepare
MAX_TRANSACTION_TIMEOUT_MS = 900_000
DEFAULT_ID_EXPIRATION_MS = 7 * 24 * 3600 * 1000
SNAPSHOT_NAME = "txlog-coordinator"
SWEEP_INTERVAL_MS = 10_000  # Kafka's transaction.abort.timed.out.transaction.cleanup.interval.ms


class MarkerWriter(Protocol):
    """WriteTxnMarkers for one partition: (topic, partition, control, producer id, producer epoch,
    coordinator epoch, timestamp) -> the append; `sync=False` leaves its fdatasync to the caller."""

    def __call__(
        self,
        topic: str,
        partition: int,
        control: ControlType,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        timestamp: int,
        *,
        sync: bool = True,
    ) -> AppendResult: ...


_PREPARE = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
_IDLE = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
_COMPLETE_OF = {TxnState.PREPARE_COMMIT: TxnState.COMPLETE_COMMIT, TxnState.PREPARE_ABORT: TxnState.COMPLETE_ABORT}


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """One transactional id as `kafka-transactions describe` shows it."""

    transactional_id: str
    coordinator_partition: int
    state: TxnLogValue


def _now_ms() -> int:
    return int(time.time() * 1000)


class _CoordinatorPartition:
    """The replayed metadata of one `__transaction_state` partition: transactional id -> last value."""

    def __init__(self, log: PartitionLog):
        self.log = log
        self.txns: dict[str, TxnLogValue] = {}
        self.replay = ReplayedPartition(log, SNAPSHOT_NAME, apply=self._apply, dump=self._dump, load=self._load)

    def _apply(self, batch: RecordBatch) -> None:
        if batch.is_control:
            return
        for record in batch.records():
            if record.key is None:
                continue
            txn_id = decode_key(record.key)
            value = decode_value(record.value)
            if value is None:
                self.txns.pop(txn_id, None)
            else:
                self.txns[txn_id] = value

    def _dump(self) -> dict[str, str]:
        return {txn_id: encode_value(v).hex() for txn_id, v in self.txns.items()}

    def _load(self, data: dict[str, str] | None) -> None:
        self.txns = {} if data is None else {k: decode_value(bytes.fromhex(v)) for k, v in data.items()}


class TransactionCoordinator:
    """InitProducerId, AddPartitionsToTxn, EndTxn and the sweeps, acting directly on the store."""

    def __init__(
        self,
        store: Store,
        *,
        clock: Callable[[], int] | None = None,
        transactional_id_expiration_ms: int = DEFAULT_ID_EXPIRATION_MS,
        max_transaction_timeout_ms: int = MAX_TRANSACTION_TIMEOUT_MS,
        write_marker: MarkerWriter | None = None,
        markers_direct: Callable[[], bool] | None = None,
    ):
        self.store = store
        self._clock = clock or _now_ms
        # WriteTxnMarkers: a transport routes it through itself (so faults can hit it); alone,
        # the coordinator appends to the partition directly.
        self._write_marker = write_marker or self._append_marker
        # Whether a window's markers may skip `write_marker` and go to the held partitions in one call
        # (`WriterHold.mark`): asked at each end, since a wrapper may start routing them at any time.
        self._markers_direct = markers_direct or (lambda: write_marker is None)
        self.id_expiration_ms = transactional_id_expiration_ms
        self.max_timeout_ms = max_transaction_timeout_ms
        self._parts: dict[int, _CoordinatorPartition] = {}
        self._count = 0
        self._last_full_sweep_ms = -SWEEP_INTERVAL_MS

    # ---- partitions of __transaction_state -------------------------------------------------------

    def _partition_count(self) -> int:
        if not self._count:
            self._count = ensure_internal_topic(self.store, TRANSACTION_STATE_TOPIC)
        return self._count

    def partition_for(self, transactional_id: str) -> int:
        self._check_id(transactional_id)  # every request maps its id here first
        count = self._partition_count()
        if not count:
            raise InvalidProducerIdMappingError(
                f"no transaction state in this store (transactional id '{transactional_id}' unknown)"
            )
        return owner_partition(transactional_id, count)

    def _part(self, index: int) -> _CoordinatorPartition:
        part = self._parts.get(index)
        if part is None:
            part = _CoordinatorPartition(self.store.partition(TRANSACTION_STATE_TOPIC, index))
            self._parts[index] = part
        return part

    @contextmanager
    def _locked(self, transactional_id: str) -> Iterator[_CoordinatorPartition]:
        """The owner partition, locked and caught up, with everyone else's housekeeping done.

        The owner partition is swept every time; the other partitions at most every
        SWEEP_INTERVAL_MS per coordinator object, and before taking the owner's lock
        (coordinator partitions are never locked two at a time, so sweeps cannot deadlock).
        """
        index = self.partition_for(transactional_id)
        self._maybe_sweep_others(index)
        part = self._part(index)
        with part.log.exclusive():
            part.replay.catch_up()
            self._sweep(part, skip=transactional_id)
            yield part
            part.replay.maybe_snapshot()

    # ---- writing coordinator records ----------------------------------------------------------------

    def _write(self, part: _CoordinatorPartition, transactional_id: str, value: TxnLogValue | None) -> None:
        """Append one record (a tombstone for None) durably, then apply it to the replayed state."""
        self._append(part, transactional_id, value, sync=True)

    def _write_unsynced(self, part: _CoordinatorPartition, transactional_id: str, value: TxnLogValue) -> None:
        """Append one record without fdatasync (COMPLETE_*: see the module docstring), then apply it."""
        self._append(part, transactional_id, value, sync=False)

    def _append(
        self, part: _CoordinatorPartition, transactional_id: str, value: TxnLogValue | None, *, sync: bool
    ) -> None:
        now = self._clock()
        data = build_batch([(encode_key(transactional_id), None if value is None else encode_value(value), None, now)])
        try:
            result = part.log.append(data, sync=sync)
        except KafkaStorageError as exc:
            if part.log.failed:  # the fsync failed: the record may or may not be on disk
                raise TransactionOutcomeUnknownError(
                    f"writing the state of transactional id '{transactional_id}' failed after the write "
                    f"reached the file ({exc}); retry the same operation to learn the outcome"
                ) from exc
            raise
        if value is None:
            part.txns.pop(transactional_id, None)
        else:
            part.txns[transactional_id] = value
        part.replay.position = result.last_offset + 1

    # ---- housekeeping -----------------------------------------------------------------------------------

    def _sweep(self, part: _CoordinatorPartition, skip: str | None = None) -> None:
        """Roll forward, time out and expire every id of the partition (except `skip`)."""
        for txn_id in list(part.txns):
            if txn_id == skip:
                continue
            try:
                self._housekeep(part, txn_id)
            except KafkaStorageError:
                pass  # a marker write failed (disk full?): the PREPARE stays and the next sweep retries

    def _housekeep(self, part: _CoordinatorPartition, txn_id: str) -> TxnLogValue | None:
        value = part.txns.get(txn_id)
        if value is None:
            return None
        now = self._clock()
        if value.state in _PREPARE:
            try:
                return self._complete(part, txn_id, value)
            except KafkaStorageError:
                return value  # still decided; the next operation retries the markers
        if value.is_expired(now):
            return self._fence_and_abort(part, txn_id, value)
        if value.state in _IDLE and value.last_update_ms <= now - self.id_expiration_ms:
            self._write(part, txn_id, None)
            return None
        return value

    def sweep_all(self) -> None:
        """Housekeeping on every coordinator partition: what a broker's background threads would do."""
        if self.store.read_only or not self.store.has_topic(TRANSACTION_STATE_TOPIC):
            return
        self._last_full_sweep_ms = self._clock()
        for index in range(self._partition_count()):
            self._sweep_partition(index)

    def _sweep_partition(self, index: int) -> None:
        part = self._part(index)
        with part.log.exclusive():
            part.replay.catch_up()
            self._sweep(part)
            part.replay.maybe_snapshot()

    def _maybe_sweep_others(self, owner: int) -> None:
        """Time out other ids' expired transactions now and then, so none pins an LSO for long.

        A transaction of another id may be open in the same data partitions as ours; with
        no daemon, somebody's work has to abort it once it expires (docs/reliability-scenarios.md rule 15).
        """
        now = self._clock()
        if now - self._last_full_sweep_ms < SWEEP_INTERVAL_MS:
            return
        self._last_full_sweep_ms = now
        for index in range(self._partition_count()):
            if index != owner:
                try:
                    self._sweep_partition(index)
                except KafkaError:
                    pass  # e.g. a damaged partition of other ids: it must not stop our own work

    # ---- the transaction end: prepare, markers, complete ----------------------------------------------

    def _bumped(self, value: TxnLogValue, bump: int) -> tuple[int, int]:
        """(marker epoch, next producer id): past the exhausted epoch the id rotates (docs/kafka-formats.md §5.9).

        A v1 end (`bump` 0) keeps the epoch and never rotates: its client keeps using them.
        """
        if bump == 0:
            return value.producer_epoch, -1
        epoch = value.producer_epoch + bump
        if epoch >= MAX_EPOCH or value.producer_epoch >= EXHAUSTED_EPOCH:
            return MAX_EPOCH, self.store.allocate_producer_id()
        return epoch, -1

    def _prepare(
        self, part: _CoordinatorPartition, txn_id: str, value: TxnLogValue, commit: bool, bump: int
    ) -> TxnLogValue:
        """Write the decision. Once this record is durable the outcome is fixed.

        A fence that rotates the producer id starts the new id at epoch 1, not 0: the fenced
        instance at epoch 32766 would otherwise look like the retry of an end that rotated to
        (new id, 0) (`_completed_retry`) and be handed the new id instead of being fenced.
        """
        value = _adopted(value)
        epoch, next_pid = self._bumped(value, bump)
        next_epoch = FENCED_ROTATION_EPOCH if next_pid >= 0 and bump > 1 else -1
        prepared = replace(
            value,
            producer_epoch=epoch,
            next_producer_id=next_pid,
            next_producer_epoch=next_epoch,
            state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
            last_update_ms=self._clock(),
        )
        self._write(part, txn_id, prepared)
        return prepared

    def _complete(
        self, part: _CoordinatorPartition, txn_id: str, prepared: TxnLogValue, held: WriterHold | None = None
    ) -> TxnLogValue:
        """Markers to every partition of the transaction (idempotent), then COMPLETE_*; `held`: the data
        partitions, still held since their syncs (`_end`)."""
        self._write_markers(prepared, held)  # every marker durable before COMPLETE_* (see the module docstring)
        pid, epoch, previous = prepared.producer_id, prepared.producer_epoch, prepared.previous_producer_id
        if prepared.next_producer_id >= 0:
            pid, epoch, previous = prepared.next_producer_id, _rotated_epoch(prepared), prepared.producer_id
        done = replace(
            prepared,
            producer_id=pid,
            producer_epoch=epoch,
            previous_producer_id=previous,
            next_producer_id=-1,
            next_producer_epoch=-1,
            state=_COMPLETE_OF[prepared.state],
            partitions=(),
            last_update_ms=self._clock(),
        )
        self._write_unsynced(part, txn_id, done)  # re-derived from the durable PREPARE if lost
        return done

    def _write_markers(self, prepared: TxnLogValue, held: WriterHold | None = None) -> None:
        """A marker to every partition of a decided transaction (idempotent), each durable on return.

        Each window of partitions is held (`WriterHold`: their writer locks taken and caught up, in
        directory order) from before its markers until their fdatasyncs ended: one lock and one
        catch-up per partition cover both its marker and its sync. The markers are written in
        partition order, as a fault plan or a transport counts them. If one cannot be written (the
        disk is full), the markers written before it are still made durable, then the error is raised.
        An abort's `.txnindex` entries are staged for the whole window and fsynced at once before its
        markers (`WriterHold.index_aborts`; every marker of the window carries one timestamp, the one
        its entry was staged for); a partition whose entry could not be made durable gets no marker,
        and its failure is raised once the others' syncs ended. A one-partition transaction takes no
        hold: its marker is appended with its fdatasync, one lock round (a hold's bookkeeping would
        cost it more than the lock round it saves); a repeat, which writes nothing, then `sync()`.
        A commit whose data partitions are still `held` since their syncs (`_end`) writes its markers
        under that hold and settles their syncs before returning. `_mark_held` says who writes a
        held window's markers.
        """
        targets = self._partition_logs(prepared.partitions)
        if len(targets) == 1:
            topic, partition, log = targets[0]
            marked = self._mark(topic, partition, prepared, sync=True)
            if marked is not None and marked.duplicate:
                log.sync()  # a repeat wrote nothing: its writer may have died before its sync (`_mark`)
            return
        if held is not None and held.covers([log for _, _, log in targets]):
            try:
                self._mark_held(held, targets, prepared)
            except (KafkaError, OSError):
                with suppress(KafkaError, OSError):  # the markers before it are synced, as a hold's exit does
                    held.settle()
                raise
            held.settle()
            return
        window = WriterHold.window()
        for start in range(0, len(targets), window):
            chunk = targets[start : start + window]
            with WriterHold([log for _, _, log in chunk]) as hold:
                for _ in hold.take():
                    pass
                self._mark_held(hold, chunk, prepared)

    def _mark_held(self, hold: WriterHold, targets: list[tuple[str, int, PartitionLog]], prepared: TxnLogValue) -> None:
        """The markers of `targets`, every one held by `hold`, in partition order, each given to the hold to sync.

        Straight to the held partitions in one call when `_markers_direct` says nobody watches them one by
        one (`WriterHold.mark`: what a loop of `append_marker` calls writes, as
        tests/coordinator/test_marker_window.py compares); otherwise through `_write_marker`, one call per
        partition (a transport's wrapper, a fault plan, a test's subclass counts or fails them there)."""
        ts = self._clock()  # the entries are staged for markers of this very timestamp
        if prepared.state != TxnState.PREPARE_COMMIT:
            hold.index_aborts(prepared.producer_id, prepared.producer_epoch, 0, ts)
        if self._markers_direct():  # nobody watches them one by one: the window's markers in one call
            logs = [log for _, _, log in targets]
            hold.mark(logs, _control_of(prepared), prepared.producer_id, prepared.producer_epoch, 0, ts)
            return
        for topic, partition, log in targets:
            refusal = hold.refusal(log)
            if refusal is not None:
                raise refusal  # the markers before it are synced, as when a marker write fails
            if hold.index_failure(log) is not None or self._mark(topic, partition, prepared, ts) is not None:
                hold.sync(log)  # no marker after a failed entry: its sync raises that failure on exit

    def _mark(
        self, topic: str, partition: int, prepared: TxnLogValue, timestamp: int | None = None, *, sync: bool = False
    ) -> AppendResult | None:
        """Write the partition's marker, without fdatasync unless `sync`; None when its topic was deleted
        (nothing to mark).

        The caller syncs the partition even when the marker was there already (a roll-forward's
        repeat writes nothing, `duplicate`, and syncs nothing even with `sync`): a writer that died
        before its sync may have left it unsynced; a durable one costs no fsync.
        """
        try:
            return self._write_marker(
                topic,
                partition,
                _control_of(prepared),
                prepared.producer_id,
                prepared.producer_epoch,
                0,
                self._clock() if timestamp is None else timestamp,
                sync=sync,
            )
        except UnknownTopicOrPartitionError:
            return None

    def _partition_logs(self, partitions: Iterable[tuple[str, int]]) -> list[tuple[str, int, PartitionLog]]:
        """(topic, partition, log) of each partition whose topic still exists (a deleted one needs nothing)."""
        found = []
        for topic, partition in partitions:
            try:
                found.append((topic, partition, self.store.partition(topic, partition)))
            except UnknownTopicOrPartitionError:
                continue
        return found

    def _end(
        self,
        part: _CoordinatorPartition,
        txn_id: str,
        value: TxnLogValue,
        commit: bool,
        client_version: int = CLIENT_TRANSACTION_VERSION_2,
    ) -> TxnLogValue:
        """Decide an EndTxn (or a forced end) and complete it; a commit first makes its data durable.

        PREPARE_COMMIT is the commit point, so everything it commits must be on disk before
        it is: one fdatasync per data partition (the producer wrote the data without one).
        A failed sync fails the end before any decision; the transaction stays open.
        """
        with ExitStack() as held_until_done:
            held = self._sync_data(value.partitions, held_until_done) if commit else None
            if client_version < CLIENT_TRANSACTION_VERSION_2:
                versioned = replace(value, client_transaction_version=client_version)
                prepared = self._prepare(part, txn_id, versioned, commit, bump=0)
            else:
                prepared = self._prepare(part, txn_id, value, commit, bump=1)
            return self._finish(part, txn_id, prepared, held)

    def _sync_data(self, partitions: Iterable[tuple[str, int]], stack: ExitStack) -> WriterHold | None:
        """Every data partition synced, at once (no rule orders them against each other).

        A failure is raised once no sync is in flight, so PREPARE_COMMIT is never written while one
        could still fail. A deleted topic has nothing left to commit. When one hold's window takes
        every partition, the hold is returned still holding them (released with `stack`): the
        markers are then written and synced under it (`_write_markers`), so one lock and one
        catch-up per partition serve both rounds (the coordinator partition's lock, taken before
        any of them, is the one lock taken in between: no new order of locks). Otherwise
        `sync_all`, which takes the partitions a window at a time and lets them go.
        """
        logs = [log for _, _, log in self._partition_logs(partitions)]
        if len(logs) <= 1 or len(logs) > WriterHold.window():
            sync_all(logs)
            return None
        hold = stack.enter_context(WriterHold(logs))
        for log in hold.take():
            hold.sync(log)
        hold.settle()
        return hold

    def _append_marker(
        self,
        topic: str,
        partition: int,
        control: ControlType,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        timestamp: int,
        *,
        sync: bool = True,
    ) -> AppendResult:
        return self.store.partition(topic, partition).append_marker(
            control, producer_id, producer_epoch, coordinator_epoch, timestamp, sync=sync
        )

    def _fence_and_abort(self, part: _CoordinatorPartition, txn_id: str, value: TxnLogValue) -> TxnLogValue:
        return self._complete(part, txn_id, self._prepare(part, txn_id, value, commit=False, bump=2))

    def _finish(
        self, part: _CoordinatorPartition, txn_id: str, prepared: TxnLogValue, held: WriterHold | None = None
    ) -> TxnLogValue:
        """Complete a decided transaction; if a marker cannot be written now, a later sweep will."""
        try:
            return self._complete(part, txn_id, prepared, held)
        except KafkaStorageError:
            return prepared

    # ---- requests -------------------------------------------------------------------------------------------

    def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS,
        expected: ProducerIdAndEpoch | None = None,
    ) -> ProducerIdAndEpoch:
        """InitProducerId: a new epoch that fences every older instance, after finishing what they left.

        `expected` is the caller's current (id, epoch) when it re-initialises to recover from an
        abortable error (KIP-360, InitProducerId v3+): only the current instance may do that;
        any other is fenced, as Kafka's coordinator answers (PRODUCER_FENCED).
        """
        self._check_id(transactional_id)
        self._check_timeout(timeout_ms)
        with self._locked(transactional_id) as part:
            value = self._housekept_for_init(part, transactional_id, expected)
            if value is not None and value.state == TxnState.ONGOING:
                value = self._fence_and_abort(part, transactional_id, value)
            return self._new_instance(part, transactional_id, value, timeout_ms)

    def init_producer_id_2pc(
        self,
        transactional_id: str,
        timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS,
        *,
        enable_2pc: bool,
        keep_prepared_txn: bool,
        expected: ProducerIdAndEpoch | None = None,
    ) -> InitProducerIdResult:
        """InitProducerId v6 (KIP-939): `enable_2pc` makes the id a two-phase-commit participant,
        whose transactions the timeout never aborts (its timeout is recorded as Integer.MAX_VALUE,
        `timeout_ms` is not used); `keep_prepared_txn` keeps the transaction a previous instance left
        open instead of aborting it.

        Kept, the open transaction stays Ongoing with its partitions and the (producer id, epoch)
        that wrote it, and the new instance is staged as Kafka stages it: NextProducerId /
        NextProducerEpoch of the Ongoing record (tagged fields 1 and 3 of TransactionLogValue) hold
        the instance that may now end it, at the next epoch, so the writer's epoch is fenced and a
        second recovery finds the same transaction under the same ids. The answer names both:
        `ids` to end it with, `ongoing` the ids that wrote it, which the prepared state the
        external transaction manager kept (`PreparedTxnState`) must equal to commit it.

        Refused as Kafka refuses them: `keep_prepared_txn` without `enable_2pc` (INVALID_REQUEST),
        and keeping an open transaction of a non-2PC instance (INVALID_TXN_STATE: its timeout may
        abort it at any moment, so nobody can have prepared it).
        """
        self._check_id(transactional_id)
        if keep_prepared_txn and not enable_2pc:
            raise InvalidRequestError(
                "keep_prepared_txn needs two-phase commit (transaction.two.phase.commit.enable=true)"
            )
        if not enable_2pc:
            return InitProducerIdResult(self.init_producer_id(transactional_id, timeout_ms, expected))
        with self._locked(transactional_id) as part:
            value = self._housekept_for_init(part, transactional_id, expected)
            if value is not None and value.state == TxnState.ONGOING:
                if keep_prepared_txn:
                    return self._keep_prepared(part, transactional_id, value)
                value = self._fence_and_abort(part, transactional_id, value)
            return InitProducerIdResult(self._new_instance(part, transactional_id, value, TWO_PHASE_COMMIT_TIMEOUT_MS))

    def _check_timeout(self, timeout_ms: object) -> None:
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or not 0 < timeout_ms <= self.max_timeout_ms:
            raise InvalidTransactionTimeoutError(
                f"transaction.timeout.ms={timeout_ms!r} must be in 1..{self.max_timeout_ms}"
            )

    def _housekept_for_init(
        self, part: _CoordinatorPartition, transactional_id: str, expected: ProducerIdAndEpoch | None
    ) -> TxnLogValue | None:
        """The id's state once a decided PREPARE is rolled forward (never aborted), checked against
        `expected` (KIP-360); a decision whose markers are still pending is ConcurrentTransactions."""
        value = self._housekeep(part, transactional_id)
        if expected is not None and value is not None and not _is_current(value, expected):
            raise ProducerFencedError(
                f"producer {expected.producer_id} epoch {expected.epoch} of '{transactional_id}' is not its "
                f"current instance (producer {value.producer_id} epoch {value.producer_epoch})"
            )
        if value is not None and value.state in _PREPARE:
            raise ConcurrentTransactionsError(f"transaction '{transactional_id}' is still completing")
        return value

    def _new_instance(
        self, part: _CoordinatorPartition, transactional_id: str, value: TxnLogValue | None, timeout_ms: int
    ) -> ProducerIdAndEpoch:
        """Write the id's next instance (Empty, the next epoch or a new producer id) and return its ids."""
        if value is None:
            pid, epoch, previous = self.store.allocate_producer_id(), 0, -1
        elif value.producer_epoch >= EXHAUSTED_EPOCH:
            pid, epoch, previous = self.store.allocate_producer_id(), 0, value.producer_id
        else:
            pid, epoch, previous = value.producer_id, value.producer_epoch + 1, value.previous_producer_id
        self._write(
            part,
            transactional_id,
            TxnLogValue(
                producer_id=pid,
                producer_epoch=epoch,
                timeout_ms=timeout_ms,
                state=TxnState.EMPTY,
                partitions=(),
                last_update_ms=self._clock(),
                start_ms=-1,
                previous_producer_id=previous,
            ),
        )
        return ProducerIdAndEpoch(pid, epoch)

    def _keep_prepared(self, part: _CoordinatorPartition, txn_id: str, value: TxnLogValue) -> InitProducerIdResult:
        """The open transaction, kept for a new instance at the next epoch (see init_producer_id_2pc)."""
        if not value.is_two_phase_commit:
            raise InvalidTxnStateError(
                f"transactional id '{txn_id}' has an open transaction that is not a two-phase commit one "
                f"(transaction.timeout.ms={value.timeout_ms}): it cannot be kept; init without keep_prepared_txn"
            )
        _, current_epoch = _current_ids(value)
        if current_epoch + 1 >= EXHAUSTED_EPOCH:
            raise InvalidTxnStateError(
                f"the open transaction of '{txn_id}' has used the epochs of producer {value.producer_id} up to "
                f"{current_epoch}: it cannot be kept again; init without keep_prepared_txn aborts it"
            )
        kept = replace(
            value,
            next_producer_id=value.producer_id,
            next_producer_epoch=current_epoch + 1,
            last_update_ms=self._clock(),
        )
        self._write(part, txn_id, kept)
        return InitProducerIdResult(
            ProducerIdAndEpoch(value.producer_id, current_epoch + 1),
            ProducerIdAndEpoch(value.producer_id, value.producer_epoch),
        )

    def add_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: Iterable[tuple[str, int]]
    ) -> TxnLogValue:
        """AddPartitionsToTxn: register partitions before the first transactional write to them.

        Returns the transaction's state, whose `start_ms + timeout_ms` is its deadline.
        """
        wanted = sorted(set((t, int(p)) for t, p in partitions))
        for topic, partition in wanted:
            self._check_partition(topic, partition)
        with self._locked(transactional_id) as part:
            value = self._check_producer(transactional_id, self._housekeep(part, transactional_id), producer_id, epoch)
            if value.state in _PREPARE:
                raise ConcurrentTransactionsError(f"transaction '{transactional_id}' is still completing")
            if value.state == TxnState.ONGOING and set(wanted) <= set(value.partitions):
                return value
            now = self._clock()
            start = value.start_ms if value.state == TxnState.ONGOING else now
            merged = tuple(sorted(set(value.partitions) | set(wanted)))
            ongoing = replace(value, state=TxnState.ONGOING, partitions=merged, last_update_ms=now, start_ms=start)
            self._write(part, transactional_id, ongoing)
            return ongoing

    def end_transaction(
        self,
        transactional_id: str,
        producer_id: int | None,
        epoch: int | None,
        commit: bool,
        *,
        client_version: int = CLIENT_TRANSACTION_VERSION_2,
    ) -> ProducerIdAndEpoch:
        """EndTxn: decide, mark every partition, complete; returns the producer's next (id, epoch).

        `producer_id=None` is an operator's forced end (`txlog commit|abort --transactional-id`):
        it acts on whatever transaction is open, and rolls forward one already decided the
        same way. An end that finds nothing to end, or the other decision, is an error.
        `client_version` below 2 is a transaction protocol v1 client (`_end_v1`).
        """
        self._check_id(transactional_id)
        with self._locked(transactional_id) as part:
            value = part.txns.get(transactional_id)
            if value is None:
                raise InvalidProducerIdMappingError(f"transactional id '{transactional_id}' is unknown")
            if value.state in _PREPARE:
                return self._end_prepared(part, transactional_id, value, producer_id, epoch, commit)
            value = self._housekeep(part, transactional_id)
            if producer_id is None:
                return self._forced_end(part, transactional_id, value, commit)
            assert epoch is not None, "a producer's EndTxn names its epoch"
            if client_version < CLIENT_TRANSACTION_VERSION_2:
                return self._end_v1(part, transactional_id, value, producer_id, epoch, commit, client_version)
            retry = self._completed_retry(value, producer_id, epoch, commit)
            if retry is not None:
                return retry
            value = self._check_producer(transactional_id, value, producer_id, epoch)
            if value.state != TxnState.ONGOING:
                if commit:
                    raise InvalidTxnStateError(f"transactional id '{transactional_id}' has no transaction to commit")
                value = replace(value, partitions=())  # TV2: abort when unsure is allowed and bumps the epoch
            done = self._end(part, transactional_id, value, commit)
            return _next_ids(done)

    def _end_v1(self, part, txn_id, value, producer_id, epoch, commit, client_version) -> ProducerIdAndEpoch:
        """EndTxn of a transaction protocol v1 client: the epoch must be the current one exactly and
        stays so; a retry finds its own outcome completed (same epoch) and succeeds again, the other
        outcome or no transaction at all is INVALID_TXN_STATE (Kafka's endTransaction for TV_0)."""
        value = self._check_producer(txn_id, value, producer_id, epoch)
        if value.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            if (value.state == TxnState.COMPLETE_COMMIT) != commit:
                raise InvalidTxnStateError(f"the transaction already ended with {value.state.kafka_name}")
            return ProducerIdAndEpoch(value.producer_id, value.producer_epoch)
        if value.state != TxnState.ONGOING:
            raise InvalidTxnStateError(
                f"transactional id '{txn_id}' has no transaction to end ({value.state.kafka_name})"
            )
        done = self._end(part, txn_id, value, commit, client_version)
        return _next_ids(done)

    def _end_prepared(self, part, txn_id, value, producer_id, epoch, commit) -> ProducerIdAndEpoch:
        decided_commit = value.state == TxnState.PREPARE_COMMIT
        if decided_commit != commit:
            raise InvalidTxnStateError(f"transaction '{txn_id}' is already decided: {value.state.kafka_name}")
        if producer_id is not None and not _may_complete(value, producer_id, epoch):
            raise ProducerFencedError(f"producer {producer_id} epoch {epoch} is not the current instance of '{txn_id}'")
        done = self._complete(part, txn_id, value)
        return _next_ids(done)

    def _forced_end(self, part, txn_id, value, commit) -> ProducerIdAndEpoch:
        value = self._open_transaction(part, txn_id, value)
        if commit and value.is_two_phase_commit:
            # KIP-939: the outcome belongs to the transaction manager; only the state it kept may commit
            raise InvalidTxnStateError(
                f"the open transaction of '{txn_id}' is a two-phase commit one: commit it with the prepared state "
                f"its transaction manager kept (producer id:epoch; it was written by "
                f"{_prepared_ids_text(value)}), or abort it"
            )
        done = self._end(part, txn_id, value, commit)
        return _next_ids(done)

    @staticmethod
    def _open_transaction(part, txn_id, value: TxnLogValue | None) -> TxnLogValue:
        """`value` if a transaction is open (Ongoing), else InvalidTxnStateError saying how the last one ended."""
        if value is None or value.state != TxnState.ONGOING:
            last = "expired" if value is None else value.state.kafka_name
            timed_out = _timed_out_transaction(part, txn_id) if last == "CompleteAbort" else None
            if timed_out is not None:
                raise InvalidTxnStateError(f"transactional id '{txn_id}' has no open transaction: {timed_out}")
            raise InvalidTxnStateError(f"transactional id '{txn_id}' has no open transaction (last state: {last})")
        return value

    def commit_prepared(self, transactional_id: str, prepared: ProducerIdAndEpoch) -> ProducerIdAndEpoch:
        """Commit an open two-phase-commit transaction from outside its producer, by the prepared state its
        transaction manager kept (`txlog commit --prepared-state`): what `complete_transaction` does in a
        new instance, except that a state that does not name the open transaction is refused
        (InvalidTxnStateError), not taken as a decision to abort. Returns the id's next (id, epoch)."""
        self._check_id(transactional_id)
        with self._locked(transactional_id) as part:
            value = self._open_transaction(part, transactional_id, self._housekeep(part, transactional_id))
            ongoing = prepared_txn_ids(value)
            if ongoing is None:
                raise InvalidTxnStateError(
                    f"the open transaction of '{transactional_id}' is not a two-phase commit one: it has no prepared "
                    "state (commit it without one)"
                )
            if ongoing != prepared:
                raise InvalidTxnStateError(
                    f"the prepared state {prepared.producer_id}:{prepared.epoch} does not name the open transaction "
                    f"of '{transactional_id}' (written by {_prepared_ids_text(value)}): nothing was committed"
                )
            done = self._end(part, transactional_id, value, True)
            return _next_ids(done)

    @staticmethod
    def _completed_retry(
        value: TxnLogValue | None, producer_id: int, epoch: int, commit: bool
    ) -> ProducerIdAndEpoch | None:
        """A retried EndTxn whose first attempt completed: epoch + 1 is what that end produced (KIP-890)."""
        if value is None or value.state not in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            return None
        if value.client_transaction_version < CLIENT_TRANSACTION_VERSION_2:
            return None  # a v1 end did not bump the epoch: epoch + 1 is nobody's retry
        same_instance = (producer_id, epoch + 1) == (value.producer_id, value.producer_epoch) or (
            producer_id == value.previous_producer_id and value.producer_epoch == 0 and epoch >= EXHAUSTED_EPOCH
        )
        if not same_instance:
            return None
        if (value.state == TxnState.COMPLETE_COMMIT) != commit:
            raise InvalidTxnStateError(f"the transaction already ended with {value.state.kafka_name}")
        return ProducerIdAndEpoch(value.producer_id, value.producer_epoch)

    def verify(self, transactional_id: str, producer_id: int, epoch: int, topic: str, partition: int) -> bool:
        """KIP-890 part 1: is this partition registered in the open transaction of (pid, epoch)?

        Called by a partition append holding that partition's lock, so it reads the coordinator
        log without taking the coordinator lock (lock order: coordinator, then data).
        A fenced (pid, epoch) raises ProducerFencedError rather than answering False, as Kafka's
        verification answers with the epoch error: a writer racing the fence of its transaction
        (PREPARE_ABORT written, markers not yet) must learn it is fenced, not merely abortable.
        """
        part = self._part(self.partition_for(transactional_id))
        part.replay.catch_up()
        value = part.txns.get(transactional_id)
        if value is not None and _is_fenced(value, producer_id, epoch):
            raise ProducerFencedError(
                f"producer {producer_id} epoch {epoch} of '{transactional_id}' is fenced "
                f"by producer {value.producer_id} epoch {value.producer_epoch}"
            )
        return (
            value is not None
            and value.state == TxnState.ONGOING
            and value.producer_id == producer_id
            and value.producer_epoch == epoch
            and (topic, partition) in value.partitions
        )

    def check_alive(self, transactional_id: str, producer_id: int, epoch: int) -> TxnLogValue:
        """Raise ProducerFencedError if (pid, epoch) is no longer current, timing the transaction out first."""
        with self._locked(transactional_id) as part:
            return self._check_producer(transactional_id, self._housekeep(part, transactional_id), producer_id, epoch)

    def expire_transactional_id(self, transactional_id: str) -> TxnLogValue | None:
        """Forget a transactional id now, as `transactional.id.expiration.ms` would once it had been idle.

        For fault rehearsal (`txlog transactions expire`): an open transaction is first fenced and
        aborted (what the transaction timeout would have done), a decided one rolled forward, then
        the id is tombstoned. Its producer's next AddPartitionsToTxn, AddOffsetsToTxn or EndTxn gets
        INVALID_PRODUCER_ID_MAPPING, as from a broker that expired it; InitProducerId starts afresh.
        Returns the state that was expired (after the abort), None if the id was unknown.
        """
        with self._locked(transactional_id) as part:
            value = self._housekeep(part, transactional_id)  # rolls a decided PREPARE forward
            if value is not None and value.state == TxnState.ONGOING:
                value = self._fence_and_abort(part, transactional_id, value)
            if value is None:
                return None
            if value.state in _PREPARE:  # its markers could not all be written: a retry completes them
                raise ConcurrentTransactionsError(f"transaction '{transactional_id}' is still completing")
            self._write(part, transactional_id, None)
            return value

    # ---- reading -----------------------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> TransactionDescription | None:
        self._check_id(transactional_id)  # an id Kafka cannot carry is refused, not reported unknown
        if not self.store.has_topic(TRANSACTION_STATE_TOPIC):
            return None
        if self.store.kafka_layout:
            # A Kafka log dir does not record the topic's partition count (the hash rule's
            # modulus), and may hold only some partitions: look in every one it has.
            return next((d for d in self.list_transactions() if d.transactional_id == transactional_id), None)
        index = self.partition_for(transactional_id)
        part = self._part(index)
        part.replay.catch_up()
        value = part.txns.get(transactional_id)
        return None if value is None else TransactionDescription(transactional_id, index, value)

    def list_transactions(self) -> list[TransactionDescription]:
        """Every live transactional id, as replayed from every coordinator partition."""
        if not self.store.has_topic(TRANSACTION_STATE_TOPIC):
            return []
        out: list[TransactionDescription] = []
        for index in self.store.partitions(TRANSACTION_STATE_TOPIC):  # a Kafka log dir may hold only some
            part = self._part(index)
            part.replay.catch_up()
            out.extend(TransactionDescription(t, index, v) for t, v in part.txns.items())
        return sorted(out, key=lambda d: d.transactional_id)

    # ---- validation --------------------------------------------------------------------------------------

    @staticmethod
    def _check_id(transactional_id: str) -> None:
        check_id(transactional_id, "transactional.id", InvalidRequestError)

    def _check_partition(self, topic: str, partition: int) -> None:
        if topic.startswith("__") and topic != CONSUMER_OFFSETS_TOPIC:
            raise InvalidRequestError(f"internal topic '{topic}' cannot be written in a transaction")
        count = self.store.partition_count(topic)
        if not 0 <= partition < count:
            raise UnknownTopicOrPartitionError(f"topic '{topic}' has no partition {partition}")

    @staticmethod
    def _check_producer(txn_id: str, value: TxnLogValue | None, producer_id: int, epoch: int) -> TxnLogValue:
        """`value` if (producer_id, epoch) is its current instance; a typed refusal otherwise."""
        if value is None:
            raise InvalidProducerIdMappingError(f"transactional id '{txn_id}' is unknown (expired?); init again")
        current_id, current_epoch = _current_ids(value)
        if producer_id != current_id:
            if producer_id == value.previous_producer_id:
                raise ProducerFencedError(f"producer {producer_id} of '{txn_id}' was replaced by {current_id}")
            raise InvalidProducerIdMappingError(
                f"producer id {producer_id} does not belong to transactional id '{txn_id}'"
            )
        if epoch != current_epoch:
            raise ProducerFencedError(
                f"producer {producer_id} epoch {epoch} of '{txn_id}' is fenced by epoch {current_epoch}"
            )
        return value


def _control_of(prepared: TxnLogValue) -> ControlType:
    """The marker a decided transaction's partitions get."""
    return ControlType.COMMIT if prepared.state == TxnState.PREPARE_COMMIT else ControlType.ABORT


def _may_complete(prepared: TxnLogValue, producer_id: int, epoch: int) -> bool:
    """Whether (pid, epoch) may complete a decided end: the instance holding the prepared epoch, or
    the retry of the end itself (epoch + 1 is what it produced). A fence is nobody's retry."""
    if (producer_id, epoch) == (prepared.producer_id, prepared.producer_epoch):
        return True
    return (producer_id, epoch + 1) == (
        prepared.producer_id,
        prepared.producer_epoch,
    ) and prepared.next_producer_epoch != FENCED_ROTATION_EPOCH


def _is_current(value: TxnLogValue, ids: ProducerIdAndEpoch) -> bool:
    """Whether `ids` are the id's current instance (KIP-360's check of an InitProducerId that names them)."""
    return (ids.producer_id, ids.epoch) == _current_ids(value)


def _is_fenced(value: TxnLogValue, producer_id: int, epoch: int) -> bool:
    """Whether (pid, epoch) belongs to an instance of the id that a newer one replaced (a 2PC
    transaction kept by a new instance fences the instance that wrote it)."""
    current_id, current_epoch = _current_ids(value)
    if producer_id == current_id:
        return epoch < current_epoch
    return producer_id == value.previous_producer_id


def prepared_txn_ids(value: TxnLogValue) -> ProducerIdAndEpoch | None:
    """The ids naming an open two-phase-commit transaction (KIP-939's PreparedTxnState: the producer id
    and epoch that wrote it), None when `value` is not one. The coordinator cannot tell a prepared
    transaction from one still being written (Kafka's cannot either: prepare asks nothing of it)."""
    if value.state != TxnState.ONGOING or not value.is_two_phase_commit:
        return None
    return ProducerIdAndEpoch(value.producer_id, value.producer_epoch)


def _prepared_ids_text(value: TxnLogValue) -> str:
    return f"{value.producer_id}:{value.producer_epoch}"


def _kept(value: TxnLogValue) -> bool:
    """An Ongoing transaction that a new instance kept (KIP-939 keepPreparedTxn): the instance that
    may end it is staged in next_producer_id/next_producer_epoch (on an Ongoing record they mean
    nothing else; a decided end's id rotation lives on PREPARE records only)."""
    return value.state == TxnState.ONGOING and value.next_producer_id >= 0


def _current_ids(value: TxnLogValue) -> tuple[int, int]:
    """The (producer id, epoch) of the id's current instance: the one requests must carry."""
    if _kept(value):
        return value.next_producer_id, value.next_producer_epoch
    return value.producer_id, value.producer_epoch


def _adopted(value: TxnLogValue) -> TxnLogValue:
    """A kept transaction as its current instance ends it: epochs are bumped from that instance's."""
    if not _kept(value):
        return value
    return replace(value, producer_epoch=value.next_producer_epoch, next_producer_id=-1, next_producer_epoch=-1)


def _next_ids(value: TxnLogValue) -> ProducerIdAndEpoch:
    if value.state in _PREPARE and value.next_producer_id >= 0:
        # decided, markers pending: the ids the completion will hand out
        return ProducerIdAndEpoch(value.next_producer_id, _rotated_epoch(value))
    return ProducerIdAndEpoch(value.producer_id, value.producer_epoch)


def _timed_out_transaction(part: _CoordinatorPartition, txn_id: str) -> str | None:
    """How the id's last transaction ended, when that was its timeout; None when it was not, or
    when the log no longer shows it (compacted away): never guessed.

    The records do not name a reason (Kafka's do not either), but a timeout leaves a trace no
    other end does: the PREPARE_ABORT after the Ongoing record bumps the epoch twice (a fence,
    `_fence_and_abort`; an EndTxn bumps once), is written after the transaction's deadline
    (start + transaction.timeout.ms), and is not followed by the new epoch of an InitProducerId
    (the other fence) -- the caller asks only while CompleteAbort is the last state.
    """
    ongoing: TxnLogValue | None = None
    found: tuple[TxnLogValue, TxnLogValue] | None = None
    position = part.log.log_start_offset
    while position < part.log.log_end_offset:
        batches = part.log.read(position)
        if not batches:
            break
        for batch in batches:
            position = batch.last_offset + 1
            if batch.is_control:
                continue
            for record in batch.records():
                if record.key is None or decode_key(record.key) != txn_id:
                    continue
                value = decode_value(record.value)
                if value is not None and value.state == TxnState.PREPARE_ABORT and ongoing is not None:
                    found = (ongoing, value)
                ongoing = value if value is not None and value.state == TxnState.ONGOING else None
    if found is None:
        return None
    began, prepared = found
    fenced = prepared.producer_id == began.producer_id and prepared.producer_epoch == began.producer_epoch + 2
    deadline = began.start_ms + began.timeout_ms
    if not fenced or prepared.last_update_ms <= deadline:
        return None
    return (
        f"its last transaction (producer id {began.producer_id}, epoch {began.producer_epoch}, "
        f"{len(began.partitions)} partition{'s' * (len(began.partitions) != 1)}) was aborted by the transaction "
        f"timeout (transaction.timeout.ms={began.timeout_ms}: open for more than {began.timeout_ms} ms)"
    )


def _rotated_epoch(prepared: TxnLogValue) -> int:
    """First epoch of the producer id a decided end rotates to (-1 on disk, from older records, means 0)."""
    return max(prepared.next_producer_epoch, 0)
