"""The public Producer: batching, idempotence and transactions in Kafka's client vocabulary.

As in Kafka's client, `send` only adds the record to its partition's open batch in the
accumulator (txlog/clients/record_accumulator.py) and returns a future; a sender thread
(txlog/clients/sender.py) takes batches to the log: a batch goes when it is full (`batch_size`),
when it has waited `linger_ms` (without waiting for another `send`), or at once for
`flush`, a future's `get()`, `commit_transaction` and `close`. All the batches of a
partition that are due go in one append (one write, one fdatasync: group commit).

What an acknowledgement promises (`acks`):

* `all` (-1, the default and what idempotence and transactions need): the batch is in the
  log and fdatasync'ed; it survives a power loss. In a transaction the data is written at
  once but made durable by the commit (one fdatasync per partition before PREPARE_COMMIT),
  so an aborted transaction costs no data fsync; `flush()` makes it durable early.
* `1`: the batch is in the log file (it survives a crash of any process, not a power loss
  until the fdatasync the sender does right after).
* `0`: the batch was handed to the sender; the offset is -1 and write errors reach nobody.

Readers never see more than the durable watermark (the partition's high watermark), so a
record a consumer saw cannot vanish in a power loss.

Idempotence (the default) stamps every batch with the producer id, epoch and per-partition
sequence, so a retried batch whose acknowledgement was lost is recognised by the log and
answered with its original offsets. A batch whose outcome stays unknown after its retries
bumps the epoch (KIP-360) before anything else is sent, so a later batch can never be
mistaken for it.

Transactions follow Kafka's client state machine; each partition is registered with the
coordinator before the first transactional write to it, and the log checks that
registration (KIP-890 part 1).

The producer is cut as Kafka's is: this class batches and partitions, a TransactionManager
(txlog/clients/transaction_manager.py) holds the ids, sequences and transaction state, and the
Sender takes batches to the log.

Every request (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, Produce, TxnOffsetCommit,
EndTxn) goes through a `txlog.transport.Transport`: one made on the producer's store, or the
`transport=` given (a test's `txlog.tools.fault_injection.FaultInjectingTransport`, which
loses, delays or crashes requests on a plan). Only one thread talks to the transport at a
time: whoever holds the TransactionManager's `lock`.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MethodType
from typing import Any

from storage.config import TopicConfig
from storage.errors import KafkaError
from storage.records import BatchBuilder, Compression, SendFastPath, encode_batches
from storage.store import Store
from storage.topic_name import CONSUMER_OFFSETS_TOPIC
from txlog.clients.future_record_metadata import FutureProduceMany, FutureRecordMetadata, ProduceRequestResult
from txlog.clients.membership import ConsumerGroupMetadata
from txlog.clients.partitioner import DEFAULT_PARTITIONER, PARTITIONER_NAMES, named_partitioner, partition_many
from txlog.clients.prepared_txn_state import PreparedTxnState
from txlog.clients.record_accumulator import ProducerBatch, RecordAccumulator
from txlog.clients.sender import Sender, SenderConfig, retry_timeouts
from txlog.clients.transaction_manager import FENCING_ERRORS, TransactionManager, TransactionState
from txlog.errors import (
    IllegalArgumentError,
    InvalidConfigurationError,
    InvalidRequestError,
    KafkaTimeoutError,
    TransactionAbortableError,
    UnknownTopicOrPartitionError,
)
from txlog.requests import DEFAULT_TRANSACTION_TIMEOUT_MS, MemberRef
from txlog.topic_partition import OffsetAndMetadata, TopicPartition
from txlog.transport import Transport

_log = logging.getLogger(__name__)

DEFAULT_DELIVERY_TIMEOUT_MS = 120_000
BULK_CHUNK_RECORDS = 8192  # produce_many encodes this many rows per native call (~1 MiB of small records)
_CLIENT_NUMBERS = itertools.count(1)


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


def _send_headers(headers: Iterable | Mapping) -> list[tuple[str, bytes | None]] | None:
    """`_headers`, but a list of (str, bytes or None) pairs, the usual spelling, is handed to the
    builder as it is: the builder reads such pairs exactly as `_headers` would have rewritten
    them, and the check is a third of the copy's cost. Anything else is converted (an item
    that is not a pair fails the unpacking here as it would there)."""
    if type(headers) is list:
        for name, value in headers:
            if type(name) is not str or (value is not None and type(value) is not bytes):
                break
        else:
            return headers  # checked just above: (str, bytes | None) pairs
    return _headers(headers)


class Producer:
    """Sends records to a store's topics; idempotent by default, transactional with a transactional_id.

    A keyed record goes where Kafka's Java producer puts it (`partitioner="murmur2"`, the
    default); `partitioner="murmur3"` keeps txlog's earlier placement, a callable
    `(key, partition_count) -> partition` decides every record. Keyless records stick to one
    partition per batch.

    Configuration as in Kafka: `acks`, `linger_ms`, `batch_size`, `retries`,
    `max_request_size` (the bytes of one append: the sender's group commit takes every sealed
    batch of a partition up to it, and never more than the topic's `segment.bytes`),
    `delivery_timeout_ms` (a batch not acknowledged by then
    fails with KafkaTimeoutError), `buffer_memory` and `max_block_ms` (how long `send` waits
    for room before KafkaTimeoutError), `max_in_flight_requests_per_connection` (checked as
    Kafka checks it, at most 5 with idempotence; with acks=all outside a transaction, a sender
    round with one partition to send appends up to that many groups, one after the other, and
    makes them durable with one fdatasync), `client_id` (names the sender thread,
    "txlog-producer-sender | <client_id>", as Kafka names its network thread).

    ::

        p = Producer("./data", transactional_id="app-1")
        p.init_transactions(); p.begin_transaction()
        p.send("out", value=b"v", key=b"k")
        p.commit_transaction(); p.close()
    """

    def __init__(
        self,
        store: str | os.PathLike | Store,
        *,
        transactional_id: str | None = None,
        enable_idempotence: bool | None = None,
        acks: int | str = "all",
        retries: int = 10,
        batch_size: int = 16384,
        linger_ms: int = 5,
        compression_type: str | None = None,
        transaction_timeout_ms: int | None = None,
        transaction_two_phase_commit_enable: bool = False,
        partitioner: str | Callable[[bytes | None, int], int] | None = None,
        max_in_flight_requests_per_connection: int = 5,
        delivery_timeout_ms: int | None = None,
        buffer_memory: int = 32 * 1024 * 1024,
        max_block_ms: int = 60_000,
        client_id: str | None = None,
        max_request_size: int = 1024 * 1024,
        clock: Callable[[], int] | None = None,
        transport: Transport | None = None,
    ):
        self.acks = _parse_acks(acks)
        if delivery_timeout_ms is None and _non_negative(linger_ms):
            # Kafka's default, stretched (as Kafka does) to cover a long linger
            delivery_timeout_ms = max(DEFAULT_DELIVERY_TIMEOUT_MS, linger_ms + DEFAULT_DELIVERY_TIMEOUT_MS)
        self.idempotent = _idempotence(enable_idempotence, transactional_id, self.acks)
        _check_two_phase_commit(transaction_two_phase_commit_enable, transactional_id, transaction_timeout_ms)
        if transaction_timeout_ms is None:
            transaction_timeout_ms = DEFAULT_TRANSACTION_TIMEOUT_MS
        _check_config(
            self.idempotent,
            compression_type,
            retries,
            batch_size,
            linger_ms,
            partitioner,
            max_in_flight_requests_per_connection,
            delivery_timeout_ms,
            buffer_memory,
            max_block_ms,
            max_request_size,
        )
        assert delivery_timeout_ms is not None, "_check_config refuses None (it is defaulted above for a valid linger)"
        self._own_store = not isinstance(store, Store)
        self.store = store if isinstance(store, Store) else Store.open(store)
        self.transactional_id = transactional_id
        # Kafka's default client.id: producer-N, or the transactional id's (named in the sender thread's name)
        self.client_id = client_id or (
            f"producer-{transactional_id}" if transactional_id is not None else f"producer-{next(_CLIENT_NUMBERS)}"
        )
        self.retries = retries
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.compression = Compression[(compression_type or "none").upper()]
        # What `_append_new` passes a batch's builder beside max_bytes: only the options that differ
        # from BatchBuilder's defaults (no compression, CreateTime timestamps, not transactional).
        # Each keyword costs the native constructor a lookup and a conversion (the three of them were
        # 0.6 µs of 0.9), and a durable one-record send makes a builder per record (issue 26).
        self._builder_options: dict[str, Any] = {}
        if self.compression is not Compression.NONE:
            self._builder_options["compression"] = self.compression
        if transactional_id is not None:
            self._builder_options["is_transactional"] = True
        self.transaction_timeout_ms = transaction_timeout_ms
        self.transaction_two_phase_commit_enable = transaction_two_phase_commit_enable
        # partitioner: a name (Kafka's murmur2 by default, or murmur3; txlog/clients/partitioner.py) hashes
        # keyed records only; a callable is kafka-python's hook and sees every record, keyless too.
        self._partitioner = partitioner if callable(partitioner) else None
        self._partitioner_name = partitioner if isinstance(partitioner, str) else DEFAULT_PARTITIONER
        self._key_partition = named_partitioner(self._partitioner_name)
        self._clock = clock or _now_ms
        self._wall_clock = clock is None  # then the native builder reads the clock (cheaper per send)
        # Every request to the log goes through the transport (a test's may wrap it in a fault plan).
        self._transport = transport if transport is not None else Transport(self.store, clock=clock)
        # Ids, sequences and the transaction's state; the sender thread and the application thread
        # (transactions, offsets) take turns on the transport under its `lock`.
        self._txn = TransactionManager(
            self._transport,
            transactional_id=transactional_id,
            idempotent=self.idempotent,
            transaction_timeout_ms=transaction_timeout_ms,
            enable_2pc=transaction_two_phase_commit_enable,
            clock=self._clock,
        )
        self._sender_config = SenderConfig(
            client_id=self.client_id, acks=self.acks, retries=retries, delivery_timeout_ms=delivery_timeout_ms
        )
        self._max_request_size = max_request_size
        self._group_limits: dict[str, int] = {}
        # Kafka's sticky partitioner for keyless records: each topic's chosen partition, in use while
        # it is in `_sticky_live` (until the accumulator seals its batch)
        self._sticky: dict[str, TopicPartition] = {}
        self._sticky_live: set[TopicPartition] = set()
        self._accumulator = RecordAccumulator(
            linger_ms=linger_ms,
            group_limit=self._group_limit,
            buffer_memory=buffer_memory,
            max_block_ms=max_block_ms,
            # the sticky partitioner moves on once its partition's batch is sealed: a C-level call
            # per sealed batch (a durable one-record send seals one per record)
            on_seal=self._sticky_live.discard,
            batch_size=batch_size,
            # Kafka's in-flight requests: a round appends up to that many groups to its one partition
            # before one fdatasync acknowledges them all (durable ones only: the others sync no group;
            # a fault plan's transport counts Produce requests one by one, so it gets them one by one)
            requests_per_round=(
                max_in_flight_requests_per_connection
                if self.acks == -1 and transactional_id is None and self._transport.serves_concurrently
                else 1
            ),
        )
        self._sender: Sender | None = None
        self._open = self._accumulator.open  # read per send: one attribute lookup, not two
        self._lock = self._accumulator.lock
        self._single: dict[str, TopicPartition] = {}  # one-partition topics, partition 0
        self._sticky_next: dict[str, int] = {}
        self._topic_meta: dict[str, tuple[int, int]] = {}
        self._tps: dict[tuple[str, int], TopicPartition] = {}  # made once per partition, not per send
        if type(self).send is Producer.send:  # a subclass's own send is left alone
            # The usual record (bytes, no headers, a known partition) in one native call, two
            # thirds of the CPU of `send` below, into its open batch or, when none takes it, the
            # one `_append_new` opens (send's own next step: a durable one-record send opens one
            # per record); every other call goes to `send`, the reference (issue 26: the sender
            # thread shares the GIL with the send loop, so what `send` saves the sender's rounds get).
            self.__dict__["send"] = SendFastPath(
                status=self._txn,
                single=self._single,
                known=self._tps,
                open=self._open,
                future=FutureRecordMetadata,
                slow=MethodType(Producer.send, self),
                append_new=self._append_new,
                custom_partitioner=self._partitioner is not None,
                wall_clock=self._wall_clock,
            ).send
        if self.idempotent and transactional_id is None:
            self._txn.init_producer_id()

    # ---- properties ---------------------------------------------------------------------------------

    @property
    def producer_id(self) -> int:
        return self._txn.producer_id_and_epoch.producer_id

    @property
    def producer_epoch(self) -> int:
        return self._txn.producer_id_and_epoch.epoch

    # ---- sending -------------------------------------------------------------------------------------

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        headers: Iterable | Mapping | None = None,
        timestamp_ms: int | None = None,
    ) -> FutureRecordMetadata:
        """Add a record to its partition's batch; returns a future for its offset.

        This is the per-record cost of producing, so every case takes no call it can avoid:
        plain bytes (and None) skip the conversions, a list of (str, bytes) headers is passed
        as it is, a one-partition topic skips the partitioner and an explicit partition seen
        before skips its checks, the state check is one attribute, no lock is taken unless a
        batch opens or fills, and the record goes into the batch in one native call that also
        stamps its timestamp. A Producer's own `send` attribute is the native
        storage.records.SendFastPath.send, which takes the usual record without running this
        method at all and hands it every other call.
        """
        if not self._txn.sendable:
            self._txn.check_can_send()
        if key is not None and type(key) is not bytes:
            key = _as_bytes(key, "key")
        if value is not None and type(value) is not bytes:
            value = _as_bytes(value, "value")
        hdrs = _send_headers(headers) if headers else None
        if partition is None:
            tp = self._single.get(topic) if self._partitioner is None else None
        else:  # `_tps` holds only partitions that passed `_check_partition` (counts never shrink)
            tp = self._tps.get((topic, partition)) if type(partition) is int else None
        if tp is None:
            tp = self._tp(topic, self._choose_partition(topic, key, partition))
        if timestamp_ms is None:  # the builder stamps the wall clock itself, unless a clock was given
            ts = None if self._wall_clock else self._clock()
        else:
            ts = timestamp_ms if type(timestamp_ms) is int else int(timestamp_ms)
        # Lock-free when the partition's open batch takes the record: the builder's
        # try_append is one native call, atomic under the GIL, and a sealed batch's builder
        # refuses it (-1), so a record is never added to a batch the sender has taken.
        # (An open batch always has a builder: produce_many's encoded batches are queued sealed;
        # the ignore spares every send a check of it.)
        batch = self._open.get(tp)
        if batch is None or (index := batch.builder.try_append(key, value, hdrs, ts)) < 0:  # type: ignore[union-attr]
            batch, index = self._append_new(tp, key, value, hdrs, ts)
        # A full batch is sealed by the next send that does not fit (the slow path below), or
        # by linger: a check of the size here on every send cost more than it saved.
        return FutureRecordMetadata((batch, index))

    def _append_new(
        self, tp: TopicPartition, key: bytes | None, value: bytes | None, headers: list | None, ts: int | None
    ) -> tuple[ProducerBatch, int]:
        """The slow path of `send` (and of the native SendFastPath), once per batch: under the
        accumulator's lock, the open batch again (another thread may have opened it), else a new
        one (the full one sealed, buffer.memory held: `RecordAccumulator.open_batch`), which always
        takes the record; starts the sender on first use.

        A durable one-record send, whose get() took the last batch, comes here for every record
        (issue 26): the topic's batch size is read from `_topic_meta` without a call when known."""
        self._lock.acquire()  # not `with`: txlog/clients/record_accumulator.py's docstring says why
        try:
            batch = self._open.get(tp)
            if batch is not None:
                builder = batch.builder
                assert builder is not None, "an open batch has a builder (encoded batches are queued sealed)"
                index = builder.try_append(key, value, headers, ts)
                if index >= 0:
                    return batch, index
            _, max_message = self._topic_meta.get(tp.topic) or self._topic_info(tp.topic)
            builder = BatchBuilder(max_bytes=min(self.batch_size, max_message), **self._builder_options)
            accumulator = self._accumulator
            batch = accumulator.open_batch(tp, builder)
            if accumulator.sender_thread is None:  # checked here too: a running sender costs no call
                self._start_sender()
            return batch, builder.try_append(key, value, headers, ts)
        finally:
            self._lock.release()

    def _group_limit(self, tp: TopicPartition) -> int:
        """The bytes of one append to `tp`: max.request.size, and no more than the topic's segment.bytes.

        The log rolls before an append that would overflow its segment, never inside one, so a
        group larger than segment.bytes would make a segment that large. Kafka's requests carry
        one batch per partition, so its segments overshoot by a batch at most; this keeps txlog's
        group commit within the same bound.
        """
        # Set by _topic_info on the application thread, which every batch of a topic follows; the
        # sender thread only reads it (no store I/O under the accumulator's lock).
        return self._group_limits.get(tp.topic, self._max_request_size)

    def _topic_info(self, topic: str) -> tuple[int, int]:
        """(partition count, largest batch the topic accepts), checked once per topic."""
        info = self._topic_meta.get(topic)
        if info is None:
            if not isinstance(topic, str) or (topic.startswith("__") and topic != CONSUMER_OFFSETS_TOPIC):
                raise InvalidRequestError(f"cannot produce to topic {topic!r}")
            count = self.store.partition_count(topic)
            config = TopicConfig.from_overrides(self.store.topic_overrides(topic))
            info = (count, config.max_message_bytes)
            self._group_limits[topic] = min(self._max_request_size, config.segment_bytes)
            self._topic_meta[topic] = info
            if count == 1:  # every record of it goes to partition 0: `send` skips the partitioner
                self._single[topic] = self._tp(topic, 0)
        return info

    def _check_partition(self, topic: str, partition: Any) -> int:
        count, _ = self._topic_info(topic)
        if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition < count:
            raise UnknownTopicOrPartitionError(f"topic '{topic}' has no partition {partition!r}")
        return partition

    def _choose_partition(self, topic: str, key: bytes | None, partition: int | None) -> int:
        count, _ = self._topic_info(topic)
        if partition is not None:
            return self._check_partition(topic, partition)
        if self._partitioner is not None:
            return self._partitioner(key, count) % count
        if count == 1:  # nothing to hash or to stick to
            return 0
        if key is not None:
            return self._key_partition(key, count)
        return self._sticky_partition(topic, count)

    def _sticky_partition(self, topic: str, count: int) -> int:
        """Kafka's sticky partitioner for keyless records: fill one batch, then move on."""
        tp = self._sticky.get(topic)
        if tp is not None and tp in self._sticky_live:
            return tp.partition
        sticky = self._sticky_next.get(topic, 0) % count
        tp = self._tp(topic, sticky)
        self._sticky[topic] = tp
        self._sticky_live.add(tp)
        self._sticky_next[topic] = sticky + 1
        return sticky

    def _start_sender(self) -> None:
        """A sender thread for the batches just queued, if none is running (the caller holds the
        accumulator's lock: an idle sender stops under it, so this never misses one stopping)."""
        if self._accumulator.sender_thread is None:
            self._sender = Sender(self._accumulator, self._txn, self._transport, self._sender_config)

    def produce_many(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        *,
        partition: int | None = None,
        headers: Sequence[Any] | None = None,
        timestamps: Sequence[int] | None = None,
    ) -> FutureProduceMany:
        """Send many records in one call: whole batches are encoded natively, column by column.

        `values` (and `keys`, `headers`, `timestamps` when given) are columns of equal length;
        a record goes where `send` would put it (`partition`, else the partitioner by key,
        keyless records to one sticky partition). Within a partition the records keep their
        order, after whatever `send` put there before. The future's `get()` waits for every
        batch and returns the number of records sent.
        """
        self._txn.check_can_send()
        count = len(values)
        for name, column in (("keys", keys), ("headers", headers), ("timestamps", timestamps)):
            if column is not None and len(column) != count:
                raise IllegalArgumentError(f"{name} has {len(column)} entries for {count} values")
        if timestamps is None and not self._wall_clock:  # else the encoder stamps the wall clock itself
            timestamps = [self._clock()] * count
        header_column = None if headers is None else [_headers(h) for h in headers]
        parts: list[tuple[TopicPartition, int, ProduceRequestResult]] = []
        for p, rows in self._rows_by_partition(topic, keys, partition, count).items():
            parts.extend(self._enqueue_encoded(self._tp(topic, p), rows, values, keys, header_column, timestamps))
        return FutureProduceMany(self._accumulator, parts)

    def _tp(self, topic: str, p: int) -> TopicPartition:
        return self._tps.get((topic, p)) or self._tps.setdefault((topic, p), TopicPartition(topic, p))

    def _rows_by_partition(
        self, topic: str, keys: Sequence[Any] | None, partition: int | None, count: int
    ) -> Mapping[int, range | list[int]]:
        """Which rows go to which partition, each list in row order."""
        partitions, _ = self._topic_info(topic)
        if partition is not None:
            return {self._check_partition(topic, partition): range(count)}
        if partitions == 1:
            return {0: range(count)}
        if keys is None:
            return {self._sticky_partition(topic, partitions): range(count)}
        if self._partitioner is not None:
            chosen = [self._partitioner(k, partitions) % partitions for k in keys]
        else:
            chosen = partition_many(keys, partitions, self._partitioner_name)
        rows: dict[int, list[int]] = {}
        sticky = None
        for row, p in enumerate(chosen):
            if p < 0:  # a null key: the sticky partition, as send would
                sticky = self._sticky_partition(topic, partitions) if sticky is None else sticky
                p = sticky
            rows.setdefault(p, []).append(row)
        return rows

    def _enqueue_encoded(
        self,
        tp: TopicPartition,
        rows: range | list[int],
        values: Sequence[Any],
        keys: Sequence[Any] | None,
        headers: list | None,
        timestamps: Sequence[int] | None,
    ) -> list[tuple[TopicPartition, int, ProduceRequestResult]]:
        """Encode tp's rows into whole batches and queue them, sealed, behind tp's open batch.

        A chunk of rows at a time: the encoder runs without the GIL on a large chunk, so the
        sender writes one chunk's batches while the next is encoded.
        """
        _, max_message = self._topic_info(tp.topic)
        size = min(self.batch_size, max_message)
        transactional = self.transactional_id is not None
        out: list[tuple[TopicPartition, int, ProduceRequestResult]] = []
        accumulator = self._accumulator
        for start in range(0, len(rows), BULK_CHUNK_RECORDS):
            chunk = rows[start : start + BULK_CHUNK_RECORDS]
            pick = _column_picker(chunk, len(values))
            spare = accumulator.spare_buffers()  # settled batches' buffers: no fresh pages to fault in
            try:
                encoded = encode_batches(
                    pick(values),
                    None if keys is None else pick(keys),
                    None if headers is None else pick(headers),
                    None if timestamps is None else pick(timestamps),
                    max_bytes=size,
                    compression=self.compression,
                    is_transactional=transactional,
                    buffers=spare,
                )
            finally:
                accumulator.return_spare(spare)  # what the encoder did not take
            out.extend(self._queue_sealed(tp, encoded))
        return out

    def _queue_sealed(
        self, tp: TopicPartition, encoded: list
    ) -> list[tuple[TopicPartition, int, ProduceRequestResult]]:
        """Queue natively encoded batches for the sender under one hold of the lock (buffer permitting)."""
        accumulator = self._accumulator
        out = []
        with accumulator.cond:
            for piece in encoded:
                accumulator.reserve(len(piece.data))
                batch = ProducerBatch(
                    tp, len(piece.data), accumulator, encoded=piece.data, record_count=piece.record_count
                )
                accumulator.add_sealed(batch)
                out.append((tp, piece.record_count, batch.result))
                # now, not after the loop: the next reserve may wait for buffer.memory, which only
                # the sender frees (a large record behind a small one waited for a sender never started)
                self._start_sender()
        return out

    def flush(self, timeout: float | None = None) -> None:
        """Send every batch now and wait until each is acknowledged; each record's outcome is in
        its future. In a transaction, what was sent is made durable (readers see it below the
        high watermark) before this returns, as Kafka's acknowledged records are."""
        self._flush(timeout, sync=True)

    def _flush(self, timeout: float | None, *, sync: bool) -> None:
        self._accumulator.flush(timeout)
        txn = self._txn
        if txn.fatal_error is not None and not isinstance(txn.fatal_error, KafkaError):
            raise txn.fatal_error  # the process "crashed" (a fault plan): nothing more happens
        if sync and txn.fatal_error is None:
            txn.sync_unsynced()

    # ---- transactions (the TransactionManager keeps the state; this side flushes) ------------------------

    def init_transactions(self, keep_prepared_txn: bool = False) -> None:
        """Get this transactional id's producer id and a new epoch, fencing older instances.

        An older instance's open transaction is aborted, unless `keep_prepared_txn` (KIP-939, needs
        `transaction_two_phase_commit_enable=True`; InvalidRequestError otherwise): then a
        transaction it left open stays open and this producer holds it prepared, to be ended by
        `complete_transaction(state)`, `commit_transaction()` or `abort_transaction()` before
        anything else.
        """
        self._txn.init_transactions(keep_prepared_txn)

    def begin_transaction(self) -> None:
        self._txn.begin_transaction()

    def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int], group_metadata: Any
    ) -> None:
        """Commit a consumer group's offsets as part of this transaction (pending until it commits).

        `group_metadata` is the consumer's `group_metadata()` (KIP-447): the commit is
        checked under the group's lock against the member's id and epoch, and one from a
        member the group fenced or expired is refused (UnknownMemberIdError,
        StaleMemberEpochError, FencedInstanceIdError) and makes the transaction abortable.
        A group id alone is accepted while the group has no members (assign()-only use).
        """
        self._txn.ensure_transactional()
        group, member = _group_and_member(group_metadata)
        self._txn.check_can_send()
        self._flush(None, sync=False)
        with self._txn.lock:
            self._commit_offsets(offsets, group, member)

    def _commit_offsets(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int], group: str, member: MemberRef | None
    ) -> None:
        """The TxnOffsetCommit itself, on the calling thread (holder of the TransactionManager's
        `lock`; the sender is idle)."""
        transport, txn = self._transport, self._txn
        tp = transport.offsets_partition(group)
        now = self._clock()
        builder = BatchBuilder(max_bytes=1 << 30, is_transactional=True)
        for part, offset in offsets.items():
            om = offset if isinstance(offset, OffsetAndMetadata) else OffsetAndMetadata(int(offset))
            k, v = transport.encode_offset_commit(group, TopicPartition(*part), om, now)
            builder.append(k, v, None, now)
        if not builder.record_count:
            return
        ids = txn.producer_id_and_epoch
        # The producer's one stamp of a batch, as its sender's (record_accumulator.py's build).
        data = builder.stamp_build(ids.producer_id, ids.epoch, txn.sequence(tp))
        transactional_id = txn.required_transactional_id()
        try:
            # Registration takes the transaction coordinator's lock, so it happens before the
            # group's lock is taken (inside TxnOffsetCommit): the lock order stays coordinator,
            # then data partitions.
            txn.before_transactional_write([tp], group)
            retry_timeouts(
                lambda: transport.txn_offset_commit(group, member, tp.topic, tp.partition, data, transactional_id),
                self.retries,
            )
        except KafkaError as exc:
            txn.batch_failed(exc)
            raise
        txn.advance_sequence(tp, builder.record_count)

    def prepare_transaction(self) -> PreparedTxnState:
        """First phase of a two-phase commit (KIP-939): send and make durable every record of the
        open transaction, and return the state naming it (its producer id and epoch).

        The transaction stays open, and the coordinator never times it out: keep `str(state)`
        with your decision, then end it with `complete_transaction(state)` (or commit/abort), here
        or, after a crash, in a new instance opened with `init_transactions(keep_prepared_txn=True)`.
        Until then only those calls are allowed. Closing the producer leaves a prepared transaction
        open. InvalidTxnStateError without two-phase commit or without a transaction in progress.
        """
        self._txn.ensure_can_prepare()
        self._flush(None, sync=True)
        ids = self._txn.prepare_transaction()
        return PreparedTxnState(ids.producer_id, ids.epoch)

    def complete_transaction(self, state: PreparedTxnState) -> None:
        """Second phase (KIP-939): commit the prepared transaction if `state` names it, abort it
        otherwise (a state kept from another transaction, or no state: `PreparedTxnState()`).

        InvalidTxnStateError when no transaction is prepared: this instance did not prepare one,
        or `init_transactions(keep_prepared_txn=True)` found none open (it was completed already,
        aborted by an instance that did not keep it, or never wrote a record).
        """
        if not isinstance(state, PreparedTxnState):
            raise IllegalArgumentError(f"expected a PreparedTxnState, not {state!r}")
        prepared = self._txn.ensure_can_complete()
        if PreparedTxnState(prepared.producer_id, prepared.epoch) == state:
            self.commit_transaction()
        else:
            self.abort_transaction()

    def commit_transaction(self) -> None:
        """Send what is buffered, then commit: every record and offset of the transaction becomes
        visible at once. The coordinator makes the data durable before it decides."""
        self._txn.ensure_can_commit()
        self._flush(None, sync=False)
        self._txn.commit_transaction()

    def abort_transaction(self) -> None:
        """Drop unsent records and abort: nothing of the transaction is ever read_committed-visible."""
        self._txn.ensure_can_abort()
        self._accumulator.fail_unsent(
            TransactionAbortableError("the transaction was aborted before this record was sent")
        )
        self._flush(None, sync=False)  # whatever the sender had already taken
        self._txn.abort_transaction()

    # ---- closing --------------------------------------------------------------------------------------------

    def close(self, timeout: float | None = None) -> None:
        """Send what is buffered (aborting an unfinished transaction), stop the sender, release the store.

        As Kafka's `close(timeout)`: every record sent before it ends in its future, acknowledged
        or failed (a write the disk refused fails the futures of the batches it carried), and
        what goes wrong while closing is logged as a warning, not raised (docs/DESIGN.md §9,
        docs/reliability-scenarios.md scenario 70): a flush that fails or outlasts `timeout`
        (the records not yet sent then fail with KafkaTimeoutError), an abort of the open
        transaction the disk refuses (its timeout aborts it later; none of it is ever
        read_committed-visible), a final fdatasync of acks=1 data that fails, a store close that
        cannot write its snapshot. A simulated crash (a fault plan's) still propagates.
        """
        txn = self._txn
        if txn.state is TransactionState.CLOSED:
            return
        try:
            if txn.state is TransactionState.PREPARED:
                pass  # KIP-939: a prepared transaction outlives its producer; its manager completes it
            elif txn.has_open_transaction and txn.fatal_error is None:
                self._quietly("abort its open transaction (its timeout will)", self._abort_on_close)
            elif self.transactional_id is None and txn.fatal_error is None:
                self._quietly("flush", lambda: self.flush(timeout))
        finally:
            txn.close()
            self._accumulator.close()
            if self._sender is not None:
                self._sender.join(timeout)
            # Whatever the sender never took (a flush that timed out or failed) fails now, never silently.
            self._accumulator.fail_unsent(KafkaTimeoutError("the producer was closed before this record was sent"))
            if self._own_store:
                self._quietly("close its store", self.store.close)

    def _quietly(self, what: str, step: Callable[[], None]) -> None:
        """One step of `close`: an error of the log or the disk is logged (Kafka's close logs and goes on)."""
        try:
            step()
        except (KafkaError, OSError) as exc:
            _log.warning("producer %s could not %s on close: %s", self.client_id, what, exc)

    def _abort_on_close(self) -> None:
        """Abort the unfinished transaction; an instance that turns out to be fenced has nothing
        left to abort (whoever fenced it aborted it), so closing it must not raise."""
        try:
            self.abort_transaction()
        except FENCING_ERRORS:
            pass

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _column_picker(rows: range | list[int], length: int) -> Callable[[Sequence[Any]], Sequence[Any]]:
    """Take `rows` of a column: the column itself when the rows are all of it, a slice for a
    range, else a gathered list."""
    if isinstance(rows, range):
        if rows.start == 0 and rows.stop == length and rows.step == 1:
            return lambda column: column
        return lambda column: column[rows.start : rows.stop]
    return lambda column: [column[i] for i in rows]


def _parse_acks(acks: int | str) -> int:
    """Kafka's acks spellings as -1 (all), 1 or 0."""
    if acks not in ("all", -1, 0, 1, "0", "1", "-1"):
        raise InvalidConfigurationError(f"acks must be all, -1, 0 or 1, not {acks!r}")
    return -1 if acks in ("all", -1, "-1") else int(acks)


def _idempotence(enable: bool | None, transactional_id: str | None, acks: int) -> bool:
    """Kafka's rule: idempotence (the default) needs acks=all; left unset with acks 0 or 1 it is off,
    asked for explicitly (or by a transactional id) with them it is a configuration error."""
    if transactional_id is not None and enable is False:
        raise InvalidConfigurationError("a transactional producer must be idempotent")
    if acks != -1:
        if enable or transactional_id is not None:
            raise InvalidConfigurationError("idempotence and transactions need acks=all")
        return False
    return enable is not False


def _check_two_phase_commit(enable: Any, transactional_id: str | None, transaction_timeout_ms: int | None) -> None:
    """KIP-939's configuration rules: two-phase commit needs a transactional id, and a 2PC
    transaction has no timeout, so setting transaction.timeout.ms with it is a contradiction."""
    if not isinstance(enable, bool):
        raise InvalidConfigurationError(f"transaction_two_phase_commit_enable must be True or False, not {enable!r}")
    if not enable:
        return
    if transactional_id is None:
        raise InvalidConfigurationError("transaction_two_phase_commit_enable needs a transactional_id")
    if transaction_timeout_ms is not None:
        raise InvalidConfigurationError(
            "transaction_timeout_ms cannot be set with transaction_two_phase_commit_enable: "
            "a two-phase commit transaction is never timed out"
        )


def _check_config(
    idempotent: bool,
    compression_type: str | None,
    retries: Any,
    batch_size: Any,
    linger_ms: Any,
    partitioner: Any,
    max_in_flight: Any,
    delivery_timeout_ms: Any,
    buffer_memory: Any,
    max_block_ms: Any,
    max_request_size: Any,
) -> None:
    if compression_type not in (None, *Compression.kafka_names()):
        raise InvalidConfigurationError(f"compression_type must be one of {', '.join(Compression.kafka_names())}")
    if not _non_negative(retries) or not _non_negative(batch_size) or batch_size == 0:
        raise InvalidConfigurationError("retries must be ≥ 0 and batch_size > 0")
    if not callable(partitioner) and partitioner not in (None, *PARTITIONER_NAMES):
        raise InvalidConfigurationError(
            f"partitioner must be one of {', '.join(PARTITIONER_NAMES)} or a callable, not {partitioner!r}"
        )
    for name, value in (
        ("linger_ms", linger_ms),
        ("buffer_memory", buffer_memory),
        ("max_block_ms", max_block_ms),
        ("delivery_timeout_ms", delivery_timeout_ms),
        ("max_request_size", max_request_size),
    ):
        if not _non_negative(value):
            raise InvalidConfigurationError(f"{name} must be an integer ≥ 0, not {value!r}")
    if delivery_timeout_ms < linger_ms:
        raise InvalidConfigurationError(
            f"delivery_timeout_ms ({delivery_timeout_ms}) must be ≥ linger_ms ({linger_ms})"
        )
    if not _non_negative(max_in_flight) or max_in_flight < 1 or (idempotent and max_in_flight > 5):
        raise InvalidConfigurationError(
            "max_in_flight_requests_per_connection must be ≥ 1, and at most 5 with "
            f"idempotence (Kafka's window of remembered batches), not {max_in_flight!r}"
        )


def _non_negative(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _group_and_member(group_metadata: Any) -> tuple[str, MemberRef | None]:
    """The group id and the committing member of a consumer's group_metadata(), or of a bare group id."""
    if isinstance(group_metadata, str):
        return group_metadata, None
    if isinstance(group_metadata, ConsumerGroupMetadata):
        return group_metadata.group_id, group_metadata.member()
    raise IllegalArgumentError(f"expected a consumer's group_metadata() or a group id, not {group_metadata!r}")
