"""The one seam between clients and the log: every request a client makes, by Kafka's request name.

With no broker, a request is a function call. Kafka's clients reach a broker only through
requests (Produce, Fetch, ListOffsets, InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
TxnOffsetCommit, EndTxn, OffsetCommit, OffsetFetch, ConsumerGroupHeartbeat); here the
Producer, the Consumer, the TransformLoop and group membership reach the store only through
a `Transport`, which serves each request in the caller's process. That makes this class the
place where "the network" and "the process" can fail: `txlog.tools.fault_injection` wraps a
transport and loses, delays or crashes a named request, with no patching of the log.

The coordinator's own writes to data partitions (WriteTxnMarkers, one call per partition
marked) also go through the transport that served the EndTxn (or the sweep), so a fault plan
can stop a commit between its decision (PREPARE_COMMIT) and its markers.

Which requests write although a client may think of them as reads is in their names and
docstrings: `abort_expired_transactions` is the coordinator's sweep (markers and
`__transaction_state` records), and every transaction-coordinator request (`init_producer_id`,
`add_partitions_to_txn`, `end_txn`, `check_transaction_alive`) first rolls decided transactions
forward and aborts expired ones, as a broker's background threads would have done. The
group requests that write (commits, heartbeats) create `__consumer_offsets` on a writable store
the first time any process needs it; `offset_fetch` never creates it, and may save a replay
snapshot of it (a cache file, never log data).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

from storage.errors import KafkaError
from storage.partition_log import AppendResult, PartitionLog, append_all, as_kafka_error, sync_all, sync_each
from storage.producer_state import TxnVerifier
from storage.records import ControlType
from storage.store import Store
from storage.topic_name import CONSUMER_OFFSETS_TOPIC
from txlog.errors import InvalidGroupIdError
from txlog.fetch import BatchDecoder, FetchResult, IsolationLevel, fetch, latest_offset
from txlog.requests import (
    CLIENT_TRANSACTION_VERSION_2,
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    HeartbeatRequest,
    HeartbeatResponse,
    InitProducerIdResult,
    MemberRef,
    ProducerIdAndEpoch,
    check_id,
)
from txlog.topic_partition import OffsetAndMetadata, TopicPartition

if TYPE_CHECKING:  # the coordinators (and the schemas under them) are imported when a request first needs one
    from txlog.coordinator.group_coordinator import GroupCoordinator
    from txlog.coordinator.group_offsets import GroupOffsets
    from txlog.coordinator.transaction_coordinator import TransactionCoordinator
    from txlog.schemas.transaction_log import TxnLogValue

_Answer = TypeVar("_Answer")  # what `Transport._answer_each`'s run gives each partition


class Transport:
    """Serves clients' requests against one store, in this process.

    The transaction and group coordinators are made on first use, so a plain producer
    never touches the internal topics. `clock` (ms) is handed to both coordinators; None
    means the wall clock.
    """

    #: Requests may be served from several threads at once, and a producer's acks=all round over several
    #: partitions as one `produce_durably`; a wrapper whose behaviour depends on the order of requests
    #: (a fault plan counts each Produce) says False, and gets them one `produce` at a time.
    serves_concurrently = True

    def __init__(
        self, store: Store, *, clock: Callable[[], int] | None = None, decode_batch: BatchDecoder | None = None
    ):
        self.store = store
        self._clock = clock
        self._decode_batch = decode_batch  # what Fetch makes of a batch (None: ConsumerRecords; txlog.fetch)
        self._txn_coordinator: TransactionCoordinator | None = None
        self._group_coordinator: GroupCoordinator | None = None
        self._markers_via: Transport = self  # who carries the coordinator's WriteTxnMarkers (see send_markers_through)

    # ---- the coordinators behind the requests ---------------------------------------------------------

    @property
    def transaction_coordinator(self) -> TransactionCoordinator:
        if self._txn_coordinator is None:
            # Imported here: a plain reader (`txlog consume` without --group) never loads a coordinator.
            from txlog.coordinator.transaction_coordinator import TransactionCoordinator

            self._txn_coordinator = TransactionCoordinator(
                self.store, clock=self._clock, write_marker=self._route_marker, markers_direct=self._markers_direct
            )
        return self._txn_coordinator

    @property
    def group_coordinator(self) -> GroupCoordinator:
        if self._group_coordinator is None:
            from txlog.coordinator.group_coordinator import GroupCoordinator
            from txlog.coordinator.group_offsets import GroupOffsets

            self._group_coordinator = GroupCoordinator(
                self.store, GroupOffsets(self.store, clock=self._clock), clock=self._clock
            )
        return self._group_coordinator

    @property
    def group_offsets(self) -> GroupOffsets:
        """The replayed `__consumer_offsets` state the group coordinator serves from."""
        return self.group_coordinator.offsets

    def send_markers_through(self, outer: Transport) -> None:
        """Route the coordinator's marker writes through `outer` (a wrapper of this transport).

        A wrapper delegates EndTxn to the transport it wraps, whose coordinator writes the
        markers; without this the wrapper would never see them. One route per transport: the
        last wrapper made around it carries the markers of every request it serves.
        """
        self._markers_via = outer

    def _markers_direct(self) -> bool:
        """Whether WriteTxnMarkers is this class's own, unwrapped and not overridden: the coordinator may
        then append a window's markers straight to the partitions (what `write_txn_markers` does, one
        call per window instead of one per partition). A wrapper or a subclass sees each marker."""
        return type(self._markers_via).write_txn_markers is Transport.write_txn_markers

    def _route_marker(
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
        return self._markers_via.write_txn_markers(
            topic, partition, control, producer_id, producer_epoch, coordinator_epoch, timestamp, sync=sync
        )

    # ---- Produce ----------------------------------------------------------------------------------------

    def produce(
        self,
        topic: str,
        partition: int,
        data: bytes | bytearray,
        transactional_id: str | None = None,
        *,
        sync: bool = True,
        trusted: bool = False,
    ) -> AppendResult:
        """Produce one request's batches. A transactional batch is verified against its transaction (KIP-890 part 1).

        `sync=False` writes without fdatasync (readers see the batches once a later sync
        covers them: `sync_partitions`, or the commit's); `trusted=True` says this process's
        own encoder built the bytes, so their CRC is not recomputed (`PartitionLog.append`).
        """
        verify = None if transactional_id is None else self._verifier(transactional_id, topic, partition)
        return self.store.partition(topic, partition).append(data, verify_txn=verify, sync=sync, trusted=trusted)

    def produce_requests(
        self, topic: str, partition: int, requests: Sequence[bytes | bytearray], *, trusted: bool = False
    ) -> tuple[list[AppendResult], KafkaError | None]:
        """Several acks=all requests to one partition, outside a transaction, made durable by one
        fdatasync (`PartitionLog.append_requests`): the results of those appended, in order, and the
        error of the first one refused (the ones after it are not tried), else None. A failed sync
        raises: then none of them is acknowledged."""
        return self.store.partition(topic, partition).append_requests(requests, trusted=trusted)

    def produce_durably(
        self, requests: Sequence[tuple[str, int, bytes | bytearray]], *, trusted: bool = False
    ) -> list[AppendResult | KafkaError]:
        """Produce with acks=all to several partitions at once, outside a transaction: each request's
        result, or the error that fails its partition alone.

        What `produce(..., sync=True)` for each would do, with the fdatasyncs of all of them made one
        sync round (`storage.partition_log.append_all`: one syncfs where allowed). Every result
        is durable, its partition's HW published, when this returns; a partition this store does not
        have, an append refused or a failed sync answers its own request only.
        """
        return self._answer_each(
            [(topic, partition) for topic, partition, _ in requests],
            lambda found, logs: append_all(
                [(log, requests[n][2]) for n, log in zip(found, logs, strict=True)], trusted=trusted
            ),
        )

    def sync_partitions(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Make everything written to these partitions durable (one fdatasync each, none if already durable).

        A transactional producer's `flush()`: acknowledged means below the high watermark. The
        syncs run at once (`storage.partition_log.sync_all`, as a commit's: no rule orders them);
        the first failure is raised once every sync ended.
        """
        sync_all([self.store.partition(topic, partition) for topic, partition in partitions])

    def sync_each_partition(self, partitions: Sequence[tuple[str, int]]) -> list[KafkaError | None]:
        """`sync_partitions`, answering each partition apart: its failure (a partition this store does not
        have, a refused lock, a failed fsync), or None once it is durable to its end, its HW published.

        One sync round for all of them (`storage.partition_log.sync_each`: one syncfs where allowed),
        for `txlog serve`'s Produce, which answers each partition of a request with its own error code.
        """
        return [
            None if failure is None else as_kafka_error(failure)
            for failure in self._answer_each(partitions, lambda _, logs: sync_each(logs))
        ]

    def _answer_each(
        self,
        partitions: Sequence[tuple[str, int]],
        run: Callable[[list[int], list[PartitionLog]], Sequence[_Answer]],
    ) -> list[_Answer | KafkaError]:
        """Each partition's answer, in order: `run(found, logs)`'s, one per log, for the partitions this store
        has (`found`: their places in `partitions`), and the lookup's error for any other (an unknown topic
        or partition answers its own request only)."""
        missing: dict[int, KafkaError] = {}
        found: list[int] = []
        logs: list[PartitionLog] = []
        for n, (topic, partition) in enumerate(partitions):
            try:
                logs.append(self.store.partition(topic, partition))
            except KafkaError as exc:
                missing[n] = exc
                continue
            found.append(n)
        answered = dict(zip(found, run(found, logs), strict=True))
        return [missing[n] if n in missing else answered[n] for n in range(len(partitions))]

    def _verifier(self, transactional_id: str | None, topic: str, partition: int) -> TxnVerifier | None:
        """What the partition asks the coordinator, under its own lock, before a transactional append."""
        if transactional_id is None:
            return None
        coordinator = self.transaction_coordinator
        return lambda pid, epoch: coordinator.verify(transactional_id, pid, epoch, topic, partition)

    def deliver_delayed(self) -> None:
        """Let requests still in flight arrive; a direct call has none (a fault wrapper may)."""

    # ---- Fetch and ListOffsets --------------------------------------------------------------------------

    def fetch(
        self, tp: TopicPartition, offset: int, isolation: IsolationLevel, *, max_records: int, max_bytes: int
    ) -> FetchResult:
        """Fetch one partition from `offset` under `isolation` (raises OffsetOutOfRangeError,
        UnknownTopicOrPartitionError)."""
        return fetch(
            self.store.partition(tp.topic, tp.partition),
            offset,
            isolation,
            max_records=max_records,
            max_bytes=max_bytes,
            decode_batch=self._decode_batch,
        )

    def list_offsets(self, tp: TopicPartition, timestamp: int, isolation: IsolationLevel) -> tuple[int, int] | None:
        """ListOffsets: (offset, timestamp) for EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP or a time in ms.

        LATEST is `latest_offset`'s: min(last stable offset, high watermark) under read_committed,
        the high watermark otherwise; a time answers the first record at or after it below that
        end (None if there is none), MAX_TIMESTAMP the record with the largest timestamp if it
        lies below that end. With no tiered storage, EARLIEST_LOCAL is EARLIEST and
        LATEST_TIERED has no offset (None), as on a Kafka broker without it.
        The special timestamps answer with timestamp -1, as Kafka does.
        """
        log = self.store.partition(tp.topic, tp.partition)
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return log.log_start_offset, -1
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return None
        end = latest_offset(log, isolation)
        if timestamp == LATEST_TIMESTAMP:
            return end, -1
        if timestamp == MAX_TIMESTAMP:
            found = log.max_timestamp_offset()
            return found if found is not None and found[0] < end else None
        offset = log.offset_for_timestamp(timestamp)
        if offset is None or offset >= end:
            return None
        for batch in log.read(offset, 1):
            for record in batch.records():
                if record.offset == offset:
                    return offset, record.timestamp
        return None

    # ---- transactions: the transaction coordinator ----------------------------------------------------------

    def init_producer_id(
        self,
        transactional_id: str | None,
        timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS,
        expected: ProducerIdAndEpoch | None = None,
    ) -> ProducerIdAndEpoch:
        """InitProducerId. Without a transactional id (an idempotent producer): a fresh producer id
        at epoch 0, whatever `expected` says (Kafka's rule). With one: a new epoch fencing older
        instances; it first rolls a decided transaction of the id forward and aborts an open one
        (writes); `expected` (KIP-360) must then be the current instance."""
        if transactional_id is None:
            return ProducerIdAndEpoch(self.store.allocate_producer_id(), 0)
        return self.transaction_coordinator.init_producer_id(transactional_id, timeout_ms, expected)

    def init_producer_id_2pc(
        self,
        transactional_id: str,
        timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS,
        *,
        enable_2pc: bool,
        keep_prepared_txn: bool,
        expected: ProducerIdAndEpoch | None = None,
    ) -> InitProducerIdResult:
        """InitProducerId v6 (KIP-939): a two-phase-commit participant's instance, keeping the
        transaction a previous instance left open when `keep_prepared_txn` (its ids in `ongoing`)."""
        return self.transaction_coordinator.init_producer_id_2pc(
            transactional_id, timeout_ms, enable_2pc=enable_2pc, keep_prepared_txn=keep_prepared_txn, expected=expected
        )

    def add_partitions_to_txn(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: Iterable[tuple[str, int]]
    ) -> TxnLogValue:
        """AddPartitionsToTxn: register partitions before the first transactional write to them."""
        return self.transaction_coordinator.add_partitions(transactional_id, producer_id, epoch, partitions)

    def add_offsets_to_txn(self, transactional_id: str, producer_id: int, epoch: int, group: str) -> TxnLogValue:
        """AddOffsetsToTxn: register the group's `__consumer_offsets` partition in the transaction."""
        tp = self.offsets_partition(group)
        return self.transaction_coordinator.add_partitions(transactional_id, producer_id, epoch, [tp])

    def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        commit: bool,
        *,
        client_version: int = CLIENT_TRANSACTION_VERSION_2,
    ) -> ProducerIdAndEpoch:
        """EndTxn: decide (PREPARE_*), write the markers (WriteTxnMarkers), complete; the next ids.

        `client_version` is the transaction protocol of the caller: 2 (txlog's producer, EndTxn
        v5+) bumps the epoch, 0 (EndTxn v0-v4) keeps it."""
        return self.transaction_coordinator.end_transaction(
            transactional_id, producer_id, epoch, commit, client_version=client_version
        )

    def add_partitions_on_produce(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: Iterable[tuple[str, int]]
    ) -> None:
        """Transaction protocol v2 (KIP-890 part 2): a Produce adds its partitions to the open
        transaction itself, as a broker's partition leader asks its coordinator to.

        Partitions already registered cost a read of the coordinator log, no write; the others
        are added in one coordinator write (one fsync), before any data is appended.
        """
        coordinator = self.transaction_coordinator
        missing = [(t, p) for t, p in partitions if not coordinator.verify(transactional_id, producer_id, epoch, t, p)]
        if missing:
            coordinator.add_partitions(transactional_id, producer_id, epoch, missing)

    def check_transaction_alive(self, transactional_id: str, producer_id: int, epoch: int) -> TxnLogValue:
        """Is (pid, epoch) still current? Writes when the transaction has timed out: it is aborted
        first, and the caller then learns it is fenced."""
        return self.transaction_coordinator.check_alive(transactional_id, producer_id, epoch)

    def abort_expired_transactions(self) -> None:
        """The coordinator's sweep, a write: on every `__transaction_state` partition, roll decided
        transactions forward, abort timed-out ones (markers), tombstone expired ids."""
        self.transaction_coordinator.sweep_all()

    def write_txn_markers(
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
        """WriteTxnMarkers for one partition: the coordinator's COMMIT/ABORT marker (idempotent).

        `sync=False`: the coordinator syncs the markers of a transaction together, after writing
        them all (`PartitionLog.append_marker`)."""
        return self.store.partition(topic, partition).append_marker(
            control, producer_id, producer_epoch, coordinator_epoch, timestamp, sync=sync
        )

    # ---- offsets: the group coordinator -------------------------------------------------------------------

    def offsets_partition(self, group: str) -> TopicPartition:
        """The `__consumer_offsets` partition that holds the group (created on a writable store)."""
        return TopicPartition(CONSUMER_OFFSETS_TOPIC, self.group_offsets.partition_for(group))

    def encode_offset_commit(
        self, group: str, tp: TopicPartition, offset: OffsetAndMetadata, timestamp: int
    ) -> tuple[bytes, bytes]:
        """(key, value) of one offset-commit record, for a transactional producer's TxnOffsetCommit batch."""
        return self.group_offsets.encode_commit(group, tp, offset, timestamp)

    def txn_offset_commit(
        self, group: str, member: MemberRef | None, topic: str, partition: int, data: bytes, transactional_id: str
    ) -> AppendResult:
        """TxnOffsetCommit: the producer's batch of offset records, checked against the group's
        membership (KIP-447) and appended while the group is held. Written without fdatasync,
        as the transaction's data is: the commit syncs every partition of the transaction
        (`__consumer_offsets` among them) before its PREPARE_COMMIT."""
        with self.group_coordinator.commit_fence(group, member):
            return self.produce(topic, partition, data, transactional_id, sync=False)

    def offset_commit(
        self, group: str, offsets: Mapping[TopicPartition, OffsetAndMetadata | int], member: MemberRef | None
    ) -> None:
        """OffsetCommit outside a transaction, fenced by membership (member id and epoch).

        A store opened read-only refuses it first, saying why (ReadOnlyStoreError), whether or not
        `__consumer_offsets` exists yet; a disk that refuses the append raises KafkaStorageError."""
        self.store.check_writable()
        self.group_coordinator.commit_offsets(group, offsets, member)

    def offset_fetch(
        self, group: str, partitions: Iterable[TopicPartition] | None, *, require_stable: bool
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """OffsetFetch: the group's committed offsets; with `require_stable` a pending transactional
        commit raises UnstableOffsetCommitError (KIP-447). Writes no log data (see the module
        docstring for the snapshot it may save). With no `__consumer_offsets` yet nothing was
        ever committed: the answer is empty and the topic is not created, so a reader on a
        disk that refuses writes still starts (docs/reliability-scenarios.md scenario 70)."""
        if not self.store.has_topic(CONSUMER_OFFSETS_TOPIC):
            check_id(group, "group id", InvalidGroupIdError)  # what the lookup would have refused
            return {}
        return self.group_offsets.committed(group, partitions, require_stable=require_stable)

    def consumer_group_heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        """ConsumerGroupHeartbeat (KIP-848): join, heartbeat or leave."""
        return self.group_coordinator.heartbeat(request)
