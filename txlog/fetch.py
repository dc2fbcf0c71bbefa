"""The read path: one fetch of one partition under an isolation level (docs/DESIGN.md §6).

This is Kafka's fetch split the way the broker and the consumer split it, with both
halves run in the caller's process:

* the "broker" half caps the read at the high watermark (read_uncommitted) or below it at
  the last stable offset (read_committed) and, for read_committed, collects from the `.txnindex` files
  the aborted transactions overlapping the bytes read (docs/kafka-formats.md §5.6);
* the "consumer" half walks the batches in order and drops, per producer, the data of
  those aborted transactions up to their ABORT marker, plus every control batch.

Aborted batches are recognised from their header alone, so a skipped transaction is
never decompressed or decoded, and nothing is buffered beyond the batches one read
returns: a transaction of any size costs the same memory as plain data.

This module is the one definition of what each isolation level sees, shared by the
Consumer (its fetches and ListOffsets, through the transport), the Admin and the Spark
source (whose planner takes one look at each log, and whose executors read the segment
files without a `PartitionLog`):

* `latest_offset`: where an isolation level's view of a partition ends (Kafka's
  ListOffsets(LATEST): min(LSO, HW) under read_committed, the HW under read_uncommitted),
  the one place the high watermark caps a reader;
* `visible_batches` with `AbortedFilter`: which batches it shows, judged from headers;
* `visible_records`: which records of a shown batch fall inside the offsets asked for;
* `read_batches`: the broker half alone, whole batches and the aborted list, for `txlog serve`,
  whose clients run the consumer half themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from storage.errors import CorruptRecordError, InvalidRecordError, OffsetOutOfRangeError
from storage.partition_log import PartitionLog
from storage.records import RecordBatch
from storage.transaction_index import AbortedTxn
from txlog.consumer_record import ConsumerRecord
from txlog.errors import IllegalArgumentError

#: How many looks a fetch takes when a cleaner's swap left its cap behind the log it read (`_stale_cap`).
STALE_CAP_ATTEMPTS = 3


class IsolationLevel(str, Enum):
    """Which records a reader may see (Kafka's `isolation.level`); read_committed is the default."""

    READ_UNCOMMITTED = "read_uncommitted"
    READ_COMMITTED = "read_committed"

    @classmethod
    def parse(cls, value: IsolationLevel | str) -> IsolationLevel:
        """Accept the enum or its config spelling; anything else is a caller error."""
        try:
            return cls(value)
        except ValueError:
            choices = ", ".join(level.value for level in cls)
            raise IllegalArgumentError(f"isolation level must be one of {choices}, not {value!r}") from None


class LogBounds(NamedTuple):
    """What one `PartitionLog.visible_bounds()` look says: where the log starts, is stable to, ends, is durable to.

    A reader that needs several of them (a fetch, a query plan) takes them from one look
    so they agree with each other; a NamedTuple, so it unpacks as `visible_bounds()` does.
    """

    log_start_offset: int
    last_stable_offset: int
    log_end_offset: int
    #: Where the log is known to be fdatasync'ed (storage/high_watermark.py); ≤ log_end_offset.
    high_watermark: int

    @classmethod
    def of(cls, log: PartitionLog, isolation: IsolationLevel | None = None) -> LogBounds:
        """One look at `log`; under read_committed the look syncs nothing past the LSO for the reader."""
        return cls._make(log.visible_bounds(committed_only=isolation is IsolationLevel.READ_COMMITTED))


def latest_offset(offsets: LogBounds | PartitionLog, isolation: IsolationLevel) -> int:
    """Kafka's "latest" offset under `isolation`: the end of what that isolation level can see.

    Nobody reads past the high watermark, the offset below which the log is durable (with
    no replicas, durability is what "committed to the log" means): read_uncommitted ends
    there, read_committed at min(LSO, HW), the LSO being the first offset of the earliest
    open transaction, else the log end. A live `PartitionLog` is looked at once.
    """
    bounds = LogBounds.of(offsets, isolation) if isinstance(offsets, PartitionLog) else offsets
    if isolation is IsolationLevel.READ_COMMITTED:
        return min(bounds.last_stable_offset, bounds.high_watermark)
    return bounds.high_watermark


@dataclass(frozen=True)
class FetchResult:
    """What one fetch returned and where the next one must start."""

    records: list[ConsumerRecord]
    next_offset: int  # past every returned record and every skipped aborted/control batch
    high_watermark: int  # where the log is known durable: no fetch returns records at or past it
    last_stable_offset: int
    #: Bytes of the batches the records came from (what counts against the consumer's
    #: fetch_max_bytes, as in Kafka: whole batches, not the records' keys and values).
    fetched_bytes: int = 0


def fetch(
    log: PartitionLog,
    start_offset: int,
    isolation: IsolationLevel | str,
    *,
    max_records: int = 500,
    max_bytes: int = 1 << 20,
    decode_batch: BatchDecoder | None = None,
) -> FetchResult:
    """Records at offsets ≥ `start_offset` visible under `isolation`, at most `max_records`.

    read_committed stops at the LSO, so nothing of an undecided transaction (nor the
    data after it) is returned; neither passes the high watermark (`latest_offset`). At
    least one batch is read however large (`max_bytes` is a soft cap, as in Kafka). Raises
    OffsetOutOfRangeError when `start_offset` is outside [log start, log end] (between the
    HW and the log end a fetch returns nothing, as Kafka's does). `decode_batch` makes the records
    of a visible batch, told how many the fetch still has room for (default: ConsumerRecords;
    see `BatchDecoder`).
    """
    isolation = IsolationLevel.parse(isolation)
    _check_limits(max_records, max_bytes)
    for _ in range(STALE_CAP_ATTEMPTS):
        result, upper = _fetch_once(log, start_offset, isolation, max_records, max_bytes, decode_batch)
        if not _stale_cap(start_offset, upper, result.next_offset > start_offset or bool(result.records)):
            break
    return result


def _fetch_once(
    log: PartitionLog,
    start_offset: int,
    isolation: IsolationLevel,
    max_records: int,
    max_bytes: int,
    decode_batch: BatchDecoder | None,
) -> tuple[FetchResult, int]:
    """One look and the reads under its cap: `fetch`'s result, and the cap it read below."""
    bounds, upper = fetch_window(log, start_offset, isolation)
    hw = bounds.high_watermark
    stable = latest_offset(bounds, IsolationLevel.READ_COMMITTED)  # Kafka's LSO is never past the HW either
    if start_offset >= upper:
        return FetchResult([], start_offset, hw, stable), upper
    walk = _Walk(log, start_offset, upper, max_records, isolation is IsolationLevel.READ_COMMITTED)
    if decode_batch is not None:
        walk.decode_batch = decode_batch
    for read_from, batches in _reads(log, start_offset, upper, max_bytes, walk):
        walk.take(read_from, batches)
    return FetchResult(walk.records, walk.next_offset, hw, stable, walk.fetched_bytes), upper


def _stale_cap(start_offset: int, upper: int, advanced: bool) -> bool:
    """Whether a fetch that read nothing below its cap must take a new look (docs/reliability-scenarios.md 88).

    The cap (HW or LSO) comes from one look at the log and the reads from the next ones, and a
    reader process looks again before each read: another process's cleaner may swap segments in
    between. Cleaned up to an offset past this cap, the log below it may hold none of the records
    that were there, their keys' later records lying between this cap and the new one, so the
    read finds no batch below the cap and the fetch would answer "nothing before the HW", a
    position that does not move, and a high watermark the log has left behind. A look that agrees
    with the log it reads never finds [start, cap) empty: the cleaner keeps the last batch of what
    it cleaned (as an empty header if need be, storage/log_cleaner.py) and retention moves the log
    start, so a new look reads the swapped log under its own, later cap.
    """
    return start_offset < upper and not advanced


def fetch_window(log: PartitionLog, start_offset: int, isolation: IsolationLevel) -> tuple[LogBounds, int]:
    """One look at `log` for a fetch from `start_offset`: its bounds, and where `isolation` stops the read.

    Raises OffsetOutOfRangeError when `start_offset` is outside [log start, log end] (between
    the cap and the log end a fetch returns nothing, as Kafka's does). A read_committed fetch
    held at an LSO below the log end first checks that damage did not leave that LSO behind.
    """
    bounds = LogBounds.of(log, isolation)
    log_start, _, log_end, _ = bounds
    if start_offset < log_start or start_offset > log_end:
        raise OffsetOutOfRangeError(
            f"offset {start_offset} is outside [{log_start}, {log_end}] of {log.topic}-{log.partition}"
        )
    upper = latest_offset(bounds, isolation)
    if start_offset >= upper and isolation is IsolationLevel.READ_COMMITTED and upper < log_end:
        log.check_transactions_known()  # held at an LSO that damage may have left behind: say so
    return bounds, upper


@dataclass(frozen=True)
class BatchesRead:
    """The broker's half of one fetch: whole batches as stored, for a reader that filters them itself.

    What a Kafka broker puts in a Fetch response: the batches from the one holding the
    fetch offset, control and aborted ones included, and under read_committed the aborted
    transactions overlapping them, which the client's consumer half (`AbortedFilter`'s
    rule, in its own code) uses to drop them.
    """

    bounds: LogBounds
    batches: list[RecordBatch]
    #: (producer id, first offset) of every aborted transaction with data in the batches; None under read_uncommitted.
    aborted: list[AbortedTxn] | None

    @property
    def size(self) -> int:
        return sum(batch.size for batch in self.batches)

    def data(self) -> bytes:
        """The batches' bytes, back to back as in the segment files."""
        return b"".join(batch.buffer for batch in self.batches)


def read_batches(
    log: PartitionLog, start_offset: int, isolation: IsolationLevel, max_bytes: int, *, min_one: bool = True
) -> BatchesRead:
    """Whole batches holding offsets ≥ `start_offset` below `isolation`'s cap, about `max_bytes` of them.

    With `min_one` the first batch is returned however large (Kafka's rule for the first
    partition of a fetch with data, so a consumer always progresses); without it a first
    batch larger than `max_bytes` is left for a later fetch and nothing is returned.
    Raises as `fetch_window` does.
    """
    committed = isolation is IsolationLevel.READ_COMMITTED
    for _ in range(STALE_CAP_ATTEMPTS):
        bounds, upper = fetch_window(log, start_offset, isolation)
        wanted = start_offset < upper and (min_one or max_bytes > 0)
        batches = log.read(start_offset, max(1, max_bytes), max_offset=upper) if wanted else []
        if not (wanted and _stale_cap(start_offset, upper, bool(batches))):
            break
    if batches and not min_one and batches[0].size > max_bytes:
        batches = []
    aborted: list[AbortedTxn] | None = None
    if committed:
        aborted = log.aborted_transactions(start_offset, batches[-1].next_offset) if batches else []
    return BatchesRead(bounds, batches, aborted)


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
                if batch.is_abort_marker():
                    self._producers.discard(batch.producer_id)
                return True
            return batch.is_transactional and batch.producer_id in self._producers
        return batch.is_control


def visible_batches(
    batches: Iterable[RecordBatch], start: int, end: int, aborted: AbortedFilter | None
) -> Iterator[RecordBatch]:
    """The data batches holding offsets in [start, end) that an isolation level shows, in log order.

    `batches` run in log order and may begin before `start` (a read starts at the batch
    holding it, an index lookup a little earlier); `end` is the isolation level's cap
    (`latest_offset`, or a planned range's end). `aborted` is the read_committed state:
    batches of aborted transactions are skipped up to their ABORT marker; None is
    read_uncommitted. Control batches are never shown. Batches are judged by their
    headers alone, so a hidden batch is never decompressed or decoded, and a caller
    that stops early leaves the rest unread. The records to take from a yielded batch
    are `visible_records(batch, start, end)`.
    """
    for batch in batches:
        if batch.base_offset + batch.last_offset_delta < start:
            continue  # wholly before the start: its aborts were closed before the range began
        if batch.base_offset >= end:
            return
        if aborted.skip(batch) if aborted is not None else batch.is_control:
            continue
        yield batch


def visible_records(batch: RecordBatch, start: int, end: int) -> list[tuple]:
    """The records of a visible batch at offsets in [start, end), as tuples in `Record`'s field order.

    Only a batch straddling an edge is filtered record by record: a read may start inside
    a batch (the previous fetch stopped at its record limit there), and a planned range
    may end inside one. A batch whose header lies inside the range is taken whole.
    """
    records = batch.record_tuples()
    if batch.base_offset < start or batch.base_offset + batch.last_offset_delta >= end:
        return [record for record in records if start <= record[0] < end]
    return records


#: The first read of a fetch asks for max_records x this many bytes (at least _MIN_READ_BYTES,
#: at most max_bytes): enough for records of up to ~200 bytes in one read.
_READ_BYTES_PER_RECORD = 256
_MIN_READ_BYTES = 64 * 1024


def _reads(
    log: PartitionLog, start_offset: int, upper: int, max_bytes: int, walk: _Walk
) -> Iterator[tuple[int, list[RecordBatch]]]:
    """(offset read from, batches): what one `log.read(start_offset, max_bytes)` returns, in pieces.

    A fetch returns at most max_records records but may read max_bytes: with the defaults
    (500 records, 1 MiB) and 100-byte records, one read parsed and CRC-checked about
    seventeen times the batches the fetch returned. Pieces sized to what the walk still
    needs stop the reading once it is full. They are the same batches, in the same order
    and under the same byte budget, as the single read: a later piece whose first batch
    would overflow the budget ends the fetch exactly where that read would have ended, and a
    piece that was given the whole budget is the last (the batch after it did not fit: reading
    it again only to drop it cost a poll of txlog consume, whose record room outlasts its bytes,
    a read per fetch).
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
        except CorruptRecordError:
            if first:
                raise
            return  # the records already read are returned; the next fetch starts at the damage and raises
        if not batches or (not first and batches[0].size > budget):
            return
        yield position, batches
        first = False
        if want >= budget:
            return  # this read had the whole budget: the single read ends here too, its next batch too big
        used = sum(batch.size for batch in batches)
        budget -= used
        position = batches[-1].next_offset
        if walk.room <= 0 or walk.stopped or budget <= 0 or position >= upper:
            return
        per_record = used / max(1, sum(batch.records_count for batch in batches))
        want = min(budget, max(_MIN_READ_BYTES, int(walk.room * per_record * 1.25)))


#: Makes the records of a visible batch at offsets in [start, end), at most `room` of them, and says
#: whether records in that range were left past `room` (then the fetch ends inside the batch): a list
#: with one item per record whose last item has the last record's `offset`, all the walk and the
#: Consumer count and move by. Its items need not be distinct: txlog consume lists one item holding
#: the lines of all the records it took from a batch once per record (cli/console_lines.py).
BatchDecoder = Callable[[PartitionLog, RecordBatch, int, int, int], tuple[list, bool]]


class _Walk:
    """The consumer half of one fetch: batches in, visible records and the next offset out.

    Fed the batches of one fetch in log order, possibly over several reads.
    """

    def __init__(self, log: PartitionLog, start_offset: int, end_offset: int, max_records: int, committed_only: bool):
        self.log = log
        self.start_offset = start_offset
        self.end_offset = end_offset
        self.max_records = max_records
        self.aborted = AbortedFilter(()) if committed_only else None
        self.records: list[ConsumerRecord] = []
        self.next_offset = start_offset
        self.fetched_bytes = 0  # sizes of the batches records were taken from
        self.stopped = False  # at a batch whose records cannot be decoded: the next fetch starts there
        self.decode_batch: BatchDecoder = _consumer_records

    @property
    def room(self) -> int:
        return self.max_records - len(self.records)

    def take(self, read_from: int, batches: list[RecordBatch]) -> None:
        """Walk batches read from offset `read_from` on (they continue the ones taken before).

        The next offset passes every batch walked, shown or hidden, except when the
        record limit cuts a batch: then it is the offset after the last record taken.
        Once full, hidden batches after the last one taken are not passed: the next
        fetch walks them.
        """
        aborted = self.aborted
        if aborted is not None:
            aborted.add(self.log.aborted_transactions(read_from, batches[-1].next_offset))
        start, end, out = self.start_offset, self.end_offset, self.records
        for batch in visible_batches(batches, start, end, aborted):
            room = self.max_records - len(out)
            if room <= 0:
                return
            try:
                records, cut = self._decode(batch, room)
            except (CorruptRecordError, InvalidRecordError):
                if not out:
                    raise
                # Kafka's fetcher: the records parsed before a batch that cannot be decoded are
                # returned, and the next fetch, which starts at that batch, raises (rule 17).
                self.stopped = True
                return
            if records:
                out.extend(records)
                self.fetched_bytes += batch.size
                self.next_offset = records[-1].offset + 1
            if cut:  # the batch is cut after the last record taken
                return
            # Every record of the batch is taken: compaction may have removed the last
            # offsets of a batch, so the batch's own end is where the next read starts.
            self.next_offset = max(self.next_offset, batch.next_offset)
        if len(out) < self.max_records:  # every batch was walked: hidden ones at the end are passed too
            self.next_offset = max(self.next_offset, batches[-1].next_offset)

    def _decode(self, batch: RecordBatch, room: int) -> tuple[list, bool]:
        """The records of a visible batch in [start, end), at most `room`, and whether the room cut it."""
        return self.decode_batch(self.log, batch, self.start_offset, self.end_offset, room)


def _consumer_records(
    log: PartitionLog, batch: RecordBatch, start: int, end: int, room: int
) -> tuple[list[ConsumerRecord], bool]:
    """The ConsumerRecords of a visible batch at offsets in [start, end), at most `room` (the default
    `BatchDecoder`): `visible_records`' rule, decoded natively straight into ConsumerRecord tuples (no
    intermediate tuple per record, and the batch's shared fields looked up once: these are the
    per-record cost of every read)."""
    records = batch.consumer_records(ConsumerRecord, log.topic, log.partition, start, end)
    if len(records) > room:
        del records[room:]
        return records, True
    return records, False
