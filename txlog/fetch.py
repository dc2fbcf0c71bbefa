"""The read path: one fetch of one partition under an isolation level (DESIGN.md §6).

This is Kafka's fetch split the way the broker and the consumer split it, with both
halves run in the caller's process:

* the "broker" half caps the read at the log end (read_uncommitted) or the last stable
  offset (read_committed) and, for read_committed, collects from the `.txnindex` files
  the aborted transactions overlapping the bytes read (kafka-formats.md §5.6);
* the "consumer" half walks the batches in order and drops, per producer, the data of
  those aborted transactions up to their ABORT marker, plus every control batch.

Aborted batches are recognised from their header alone, so a skipped transaction is
never decompressed or decoded, and nothing is buffered beyond the batches one read
returns: a transaction of any size costs the same memory as plain data.

It is a pure function over a `PartitionLog` so that the Consumer and the Spark source
share one definition of what each isolation level sees.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from operator import attrgetter
from typing import Iterable, Iterator

from storage.errors import InvalidRecordError, OffsetOutOfRangeError
from storage.partition_log import PartitionLog
from storage.records import Record, RecordBatch
from storage.transaction_index import AbortedTxn
from txlog.consumer_record import ConsumerRecord
from txlog.errors import IllegalArgumentError

_OFFSET = attrgetter("offset")
_new_tuple = tuple.__new__


class IsolationLevel(str, Enum):
    """Which records a reader may see (Kafka's `isolation.level`); read_committed is the default."""

    READ_UNCOMMITTED = "read_uncommitted"
    READ_COMMITTED = "read_committed"

    @classmethod
    def parse(cls, value: "IsolationLevel | str") -> "IsolationLevel":
        """Accept the enum or its config spelling; anything else is a caller error."""
        try:
            return cls(value)
        except ValueError:
            choices = ", ".join(level.value for level in cls)
            raise IllegalArgumentError(f"isolation level must be one of {choices}, not {value!r}") from None


@dataclass(frozen=True)
class FetchResult:
    """What one fetch returned and where the next one must start."""

    records: list[ConsumerRecord]
    next_offset: int  # past every returned record and every skipped aborted/control batch
    high_watermark: int  # the log end offset
    last_stable_offset: int


def fetch(log: PartitionLog, start_offset: int, isolation: IsolationLevel | str, *,
          max_records: int = 500, max_bytes: int = 1 << 20) -> FetchResult:
    """Records at offsets ≥ `start_offset` visible under `isolation`, at most `max_records`.

    read_committed stops at the LSO, so nothing of an undecided transaction (nor the
    data after it) is returned; read_uncommitted stops at the log end. At least one
    batch is read however large (`max_bytes` is a soft cap, as in Kafka). Raises
    OffsetOutOfRangeError when `start_offset` is outside [log start, log end].
    """
    isolation = IsolationLevel.parse(isolation)
    _check_limits(max_records, max_bytes)
    log_start, lso, hw = log.bounds()
    if start_offset < log_start or start_offset > hw:
        raise OffsetOutOfRangeError(
            f"offset {start_offset} is outside [{log_start}, {hw}] of {log.topic}-{log.partition}"
        )
    upper = lso if isolation is IsolationLevel.READ_COMMITTED else hw
    if start_offset >= upper:
        return FetchResult([], start_offset, hw, lso)
    walk = _Walk(log, start_offset, max_records, isolation is IsolationLevel.READ_COMMITTED)
    for read_from, batches in _reads(log, start_offset, upper, max_bytes, walk):
        walk.take(read_from, batches)
    return FetchResult(walk.records, walk.next_offset, hw, lso)


def _check_limits(max_records: int, max_bytes: int) -> None:
    if isinstance(max_records, bool) or not isinstance(max_records, int) or max_records < 1:
        raise IllegalArgumentError(f"max_records must be a positive integer, not {max_records!r}")
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise IllegalArgumentError(f"max_bytes must be a positive integer, not {max_bytes!r}")


class AbortedFilter:
    """The consumer's side of read_committed: which producers' batches are inside an aborted txn.

    Entries are taken in first-offset order as the walk reaches them; a producer stays
    "aborted" from its entry's first offset until its ABORT marker is passed. This is
    the whole state: one small set, however long the transactions are.
    """

    def __init__(self, aborted: Iterable[AbortedTxn]):
        self._pending = sorted(aborted, key=lambda txn: txn.first_offset, reverse=True)
        self._producers: set[int] = set()

    def add(self, aborted: Iterable[AbortedTxn]) -> None:
        """Entries for batches read after the first ones.

        An entry whose transaction spans two reads comes twice; by then its producer is
        already in the set (its ABORT marker lies ahead), so adding it again changes nothing.
        """
        self._pending = sorted([*self._pending, *aborted], key=lambda txn: txn.first_offset, reverse=True)

    def skip(self, batch: RecordBatch) -> bool:
        """True when the batch must not be returned; call once per batch, in log order."""
        if batch.has_producer_id:
            while self._pending and self._pending[-1].first_offset <= batch.last_offset:
                self._producers.add(self._pending.pop().producer_id)
            if batch.is_control:
                if is_abort_marker(batch):
                    self._producers.discard(batch.producer_id)
                return True
            return batch.is_transactional and batch.producer_id in self._producers
        return batch.is_control


def is_abort_marker(batch: RecordBatch) -> bool:
    """Whether a control batch ends its producer's transaction with ABORT.

    A control batch emptied by compaction has no record left; it ends nothing.
    """
    if batch.records_count == 0:
        return False
    try:
        return batch.control_marker().is_abort
    except InvalidRecordError:
        return False


#: The first read of a fetch asks for max_records x this many bytes (at least _MIN_READ_BYTES,
#: at most max_bytes): enough for records of up to ~200 bytes in one read.
_READ_BYTES_PER_RECORD = 256
_MIN_READ_BYTES = 64 * 1024


def _reads(log: PartitionLog, start_offset: int, upper: int, max_bytes: int,
           walk: "_Walk") -> Iterator[tuple[int, list[RecordBatch]]]:
    """(offset read from, batches): what one `log.read(start_offset, max_bytes)` returns, in pieces.

    A fetch returns at most max_records records but may read max_bytes: with the defaults
    (500 records, 1 MiB) and 100-byte records, one read parsed and CRC-checked about
    seventeen times the batches the fetch returned. Pieces sized to what the walk still
    needs stop the reading once it is full. They are the same batches, in the same order
    and under the same byte budget, as the single read: a later piece whose first batch
    would overflow the budget ends the fetch exactly where that read would have ended.
    """
    position, budget, first = start_offset, max_bytes, True
    want = min(max_bytes, max(_MIN_READ_BYTES, walk.room * _READ_BYTES_PER_RECORD))
    while True:
        try:
            batches = log.read(position, want, max_offset=upper)
        except OffsetOutOfRangeError:
            if first:
                raise
            return  # retention removed the rest between two reads: this fetch ends here
        if not batches or (not first and batches[0].size > budget):
            return
        yield position, batches
        first = False
        used = sum(batch.size for batch in batches)
        budget -= used
        position = batches[-1].next_offset
        if walk.room <= 0 or budget <= 0 or position >= upper:
            return
        per_record = used / max(1, sum(batch.records_count for batch in batches))
        want = min(budget, max(_MIN_READ_BYTES, int(walk.room * per_record * 1.25)))


class _Walk:
    """The consumer half of one fetch: batches in, visible records and the next offset out.

    Fed the batches of one fetch in log order, possibly over several reads.
    """

    def __init__(self, log: PartitionLog, start_offset: int, max_records: int, committed_only: bool):
        self.log = log
        self.start_offset = start_offset
        self.max_records = max_records
        self.committed_only = committed_only
        self.filter = AbortedFilter(())
        self.records: list[ConsumerRecord] = []
        self.next_offset = start_offset

    @property
    def room(self) -> int:
        return self.max_records - len(self.records)

    def take(self, read_from: int, batches: list[RecordBatch]) -> None:
        """Walk batches read from offset `read_from` on (they continue the ones taken before)."""
        if self.committed_only:
            self.filter.add(self.log.aborted_transactions(read_from, batches[-1].next_offset))
        out = self.records
        for batch in batches:
            if len(out) >= self.max_records:
                break
            skip = self.filter.skip(batch) if self.committed_only else batch.is_control
            if skip:
                self.next_offset = max(self.next_offset, batch.next_offset)
                continue
            self.next_offset = _take_records(self.log, batch, self.start_offset, self.max_records - len(out), out,
                                             self.next_offset)


def _take_records(log: PartitionLog, batch: RecordBatch, start_offset: int, room: int,
                  out: list[ConsumerRecord], next_offset: int) -> int:
    """Append up to `room` records of a data batch at offsets ≥ start_offset; returns the new next offset.

    A fetch may start inside a batch (the previous one stopped at max_records there):
    records below `start_offset` were already returned and are dropped here.
    """
    records = batch.records()
    if records and min(map(_OFFSET, records)) < start_offset:
        records = [record for record in records if record.offset >= start_offset]
    if len(records) > room:  # room ≥ 1: the batch is cut after the last record taken
        records = records[:room]
        out.extend(_consumer_records(log, batch, records))
        return records[-1].offset + 1
    if records:
        out.extend(_consumer_records(log, batch, records))
        next_offset = records[-1].offset + 1
    # Every record of the batch is consumed: compaction may have removed the last
    # offsets of a batch, so the batch's own end is where the next read starts.
    return max(next_offset, batch.next_offset)


def _consumer_records(log: PartitionLog, batch: RecordBatch, records: list[Record]) -> list[ConsumerRecord]:
    """ConsumerRecords of one batch's records, its shared fields looked up once.

    This is the per-record cost of every read: calling ConsumerRecord(...) per record
    (a Python-level __new__ of twelve arguments) and reading the batch's properties per
    record cost more than decoding the record. tuple.__new__ builds the same tuple.
    """
    topic, partition = log.topic, log.partition
    timestamp_type, is_transactional = batch.timestamp_type, batch.is_transactional
    producer_id, producer_epoch = batch.producer_id, batch.producer_epoch
    return [_new_tuple(ConsumerRecord, (topic, partition, offset, timestamp, timestamp_type, key, value, headers,
                                        producer_id, producer_epoch, sequence, is_transactional))
            for offset, timestamp, key, value, headers, sequence in records]
