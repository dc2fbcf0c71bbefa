"""The log of one topic-partition: segments, producer state, recovery and the append path.

There is no broker. Every process that opens a partition keeps its own view (segments,
producer state) and brings it up to date from the files before acting:

* Writers take the partition's flock and, holding it, *catch up* on the tail other
  processes wrote, validate, append, fsync (one per call), then update their view.
  Under the lock every byte past the last whole batch belongs to a dead writer, so a
  torn tail may be cut there.
* Readers take no lock; they read whole, CRC-valid batches only and stop quietly at a
  partial tail, which may be a write in flight.

Recovery is the same catch-up started from the newest usable producer snapshot: a clean
close leaves a snapshot at the log end (nothing to scan on reopen); after a crash only
the tail since the last snapshot is scanned (kafka-formats.md §5.7, DESIGN.md §3).
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

from storage.checkpoint import write_leader_epoch_checkpoint
from storage.config import TopicConfig
from storage.durable import unlink_durably
from storage.errors import (
    CorruptIndexError,
    CorruptRecordError,
    CorruptSnapshotError,
    InvalidRecordError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    ReadOnlyStoreError,
    RecordTooLargeError,
)
from storage.extent import SegmentExtent
from storage.lock import FileLock
from storage.producer_snapshot import (
    delete_snapshot,
    list_snapshots,
    read_snapshot,
    write_snapshot,
)
from storage.producer_state import (
    BatchMetadata,
    CompletedTxn,
    ProducerAppend,
    ProducerStateManager,
    TxnVerifier,
)
from storage.records import ControlType, RecordBatch, build_control_batch
from storage.segment import LogSegment, segment_filename
from storage.transaction_index import AbortedTxn, collect_aborted

LOCK_FILE = "txlog.lock"
LEADER_EPOCH = 0  # a single "broker" that never changes leadership
MAX_RELATIVE_OFFSET = 2**31 - 1
EXPIRY_CHECK_INTERVAL_MS = 60_000
RELOAD_ATTEMPTS = 20
_TEMP_SUFFIXES = (".tmp", ".deleted", ".cleaned", ".swap")
_INDEX_SUFFIXES = (".index", ".timeindex", ".txnindex")


@dataclass(frozen=True, slots=True)
class BatchAppendResult:
    base_offset: int
    last_offset: int
    duplicate: bool


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Offsets of an append call; `duplicate` is True when every batch was a retry already in the log."""

    base_offset: int
    last_offset: int
    duplicate: bool
    batches: tuple[BatchAppendResult, ...] = field(default=())


def _now_ms() -> int:
    return int(time.time() * 1000)


class PartitionLog:
    """Append, read, recover and retain one partition directory."""

    def __init__(self, directory: str, topic: str, partition: int, config: TopicConfig, *,
                 read_only: bool = False, clock: Callable[[], int] = _now_ms):
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.read_only = read_only
        self._clock = clock
        self._mutex = threading.RLock()
        self._lock = None if read_only else FileLock(os.path.join(directory, LOCK_FILE))
        self._segments: list[LogSegment] = []
        self._state = ProducerStateManager(
            expiration_ms=config.producer_id_expiration_ms, max_producers=config.max_producer_ids
        )
        self._failed: str | None = None
        self._corruption: CorruptRecordError | None = None
        self._last_expiry_check = 0
        self._closed = False
        if read_only:
            with self._mutex:
                self._load(repair=False)
        else:
            os.makedirs(directory, exist_ok=True)
            with self._mutex, self._lock:
                self._load(repair=True)

    @staticmethod
    def create_empty(directory: str) -> None:
        """Lay out a new partition: an empty first segment at offset 0 and its epoch checkpoint."""
        LogSegment.create(directory, 0).close()
        # Every batch carries leader epoch 0 from offset 0: what Kafka's epoch cache would hold.
        write_leader_epoch_checkpoint(directory, [(LEADER_EPOCH, 0)])

    # ---- public properties ---------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        with self._mutex:
            self._refresh_segment_list()
            return self._segments[0].base_offset

    @property
    def log_end_offset(self) -> int:
        """Offset the next appended record gets; includes what other processes appended."""
        with self._mutex:
            self._catch_up(repair=False)
            return self._segments[-1].next_offset

    @property
    def last_stable_offset(self) -> int:
        """First offset of the earliest open transaction, else the log end (DESIGN.md §6)."""
        with self._mutex:
            self._catch_up(repair=False)
            return self._lso()

    def bounds(self) -> tuple[int, int, int]:
        """(log start, last stable offset, log end) from one look at the files.

        A reader needs all three before every fetch; asking for them one property at a
        time would catch up on other writers and list the directory once per property.
        """
        with self._mutex:
            self._refresh_segment_list()
            return self._segments[0].base_offset, self._lso(), self._segments[-1].next_offset

    def _lso(self) -> int:
        first = self._state.first_unstable_offset()
        end = self._segments[-1].next_offset
        return end if first is None else max(min(first, end), self._segments[0].base_offset)

    def open_transactions(self) -> dict[int, int]:
        """producer id -> first offset of its still-open transaction in this partition."""
        with self._mutex:
            self._catch_up(repair=False)
            return self._state.open_transactions()

    def producer_states(self) -> dict[int, dict]:
        """What the partition remembers per producer (for `describe-producers` and tests)."""
        with self._mutex:
            self._catch_up(repair=False)
            out = {}
            for pid, e in self._state.producers.items():
                last = e.batches[-1] if e.batches else None
                out[pid] = {
                    "producer_epoch": e.epoch,
                    "last_sequence": last.last_seq if last else -1,
                    "last_offset": last.last_offset if last else -1,
                    "last_timestamp": e.last_timestamp,
                    "coordinator_epoch": e.coordinator_epoch,
                    "current_txn_start_offset": e.current_txn_first_offset,
                }
            return out

    @property
    def failed(self) -> bool:
        """True once an fsync failed: the last write's durability is unknown and writes are refused."""
        return self._failed is not None

    @property
    def size_bytes(self) -> int:
        with self._mutex:
            self._refresh_segment_list()
            return sum(s.file_size() for s in self._segments)

    @property
    def segments(self) -> list[LogSegment]:
        with self._mutex:
            self._refresh_segment_list()
            return list(self._segments)

    # ---- loading and recovery --------------------------------------------------------------------

    def _load(self, *, repair: bool) -> None:
        """Build this process's view from the files, recovering them when allowed to write.

        Another process's retention may delete a segment between the listing and its
        opening; the load then starts over from a fresh listing.
        """
        vanished: FileNotFoundError | None = None
        for _ in range(RELOAD_ATTEMPTS):
            try:
                return self._load_once(repair=repair)
            except FileNotFoundError as exc:
                vanished = exc
        raise KafkaStorageError(f"segments of {self.directory} keep disappearing while loading: {vanished}")

    def _load_once(self, *, repair: bool) -> None:
        for seg in self._segments:
            seg.close()
        self._segments = []
        self._corruption = None
        if repair:
            self._remove_temp_and_orphan_files()
        bases = self._segment_bases()
        if not bases:
            if not repair:
                raise KafkaStorageError(f"{self.directory} holds no log segments")
            self.create_empty(self.directory)
            self._segments = [self._open_segment(0, writable=True)]
        else:
            opened: list[LogSegment] = []
            try:
                for base in bases:
                    opened.append(self._open_segment(base, writable=not self.read_only))
            except BaseException:
                for seg in opened:
                    seg.close()
                raise
            self._segments = opened
        for seg, following in zip(self._segments, self._segments[1:]):
            seg.size, seg.next_offset = seg.file_size(), following.base_offset
        seg_idx, position = self._restore_producer_state(repair)
        scanned = self._replay(seg_idx, position, repair=repair)
        self._check_indexes(repair)
        if repair:
            self._drop_stale_txn_entries(self._segments[-1])
            if scanned:
                self._take_snapshot()

    def _open_segment(self, base: int, *, writable: bool) -> LogSegment:
        seg = LogSegment(self.directory, base, writable=writable, index_interval_bytes=self.config.index_interval_bytes)
        seg.load_time_stats()
        return seg

    def _segment_bases(self) -> list[int]:
        bases = []
        for name in os.listdir(self.directory):
            if name.endswith(".log"):
                stem = name[:-4]
                if stem.isdigit():
                    bases.append(int(stem))
        return sorted(bases)

    def _remove_temp_and_orphan_files(self) -> None:
        names = os.listdir(self.directory)
        logs = {n[:-4] for n in names if n.endswith(".log")}
        doomed = []
        for name in names:
            if name.endswith(".snapshot.deleted"):
                doomed.append(name)
            elif name.endswith(_TEMP_SUFFIXES):
                doomed.append(name)
            elif name.endswith(_INDEX_SUFFIXES) and name.split(".", 1)[0] not in logs:
                doomed.append(name)
        if doomed:
            unlink_durably([os.path.join(self.directory, n) for n in doomed], self.directory)

    def _check_indexes(self, repair: bool) -> None:
        """Rebuild any index that is missing or fails its checks (indexes are derived data).

        The active segment gets the full check at open; sealed segments a constant-time one
        (so opening does not grow with the log), and the full one before their first lookup.
        A process that may not write (read-only) stops trusting a damaged index instead:
        its lookups scan the segment, so the damage never changes what a reader sees.
        """
        last = len(self._segments) - 1
        for i, seg in enumerate(self._segments):
            try:
                if i == last:
                    seg.full_index_check()
                    seg.indexes_verified = True
                else:
                    seg.quick_index_check()
            except CorruptIndexError:
                self._repair_indexes(i, repair)

    def _repair_indexes(self, i: int, repair: bool) -> None:
        seg = self._segments[i]
        if repair:
            self._rebuild_segment(i)
        else:
            seg.indexes_trusted = False
            seg.indexes_verified = True

    def _verified(self, seg: LogSegment) -> LogSegment:
        """Give a sealed segment its full index check before a lookup trusts its indexes."""
        if seg.indexes_verified:
            return seg
        try:
            seg.full_index_check()
            seg.indexes_verified = True
        except CorruptIndexError:
            if self.read_only:
                self._repair_indexes(self._segments.index(seg), repair=False)
            else:
                with self._lock:
                    self._repair_indexes(self._segments.index(seg), repair=True)
        return seg

    def _rebuild_segment(self, i: int) -> None:
        """Rewrite a segment's three indexes from its batches (Kafka's segment recovery)."""
        seg = self._segments[i]
        state = self._state_at_segment_start(i)
        seg.txn_index.reset()
        seg.rebuild_indexes(abort_replayer(state, seg.txn_index.append))
        seg.txn_checked, seg.abort_replay = seg.txn_index.stored_count(), None

    def _state_at_segment_start(self, i: int) -> ProducerStateManager:
        """Producer state as of segment i's base, which rebuilding its txn index starts from.

        The snapshot taken when the segment was rolled in, else a replay of the earlier segments.
        """
        seg = self._segments[i]
        state = ProducerStateManager()
        start = self._segments[0].base_offset
        for off, path in reversed(list_snapshots(self.directory)):
            if off <= seg.base_offset and off >= start:
                try:
                    state.load(read_snapshot(path), off, now_ms=0)
                except CorruptSnapshotError:
                    continue
                break
        else:
            state.reset(start)
        for earlier in self._segments[:i]:
            if earlier.next_offset <= state.end_offset:
                continue
            for _, batch in earlier.iter_batches(0):
                if batch.base_offset >= state.end_offset:
                    _replay_into(state, batch)
        return state

    def _restore_producer_state(self, repair: bool) -> tuple[int, int]:
        """Load the newest usable snapshot; returns where the replay must start (segment, position).

        A snapshot is usable only if its offset is a batch boundary inside the log: one
        from beyond a cut tail (KAFKA-5747) or a corrupt one is skipped, and deleted when
        this process may write.
        """
        start = self._segments[0].base_offset
        now = self._clock()
        for offset, path in reversed(list_snapshots(self.directory)):
            if offset < start:
                if repair:
                    delete_snapshot(path)
                continue
            location = self._locate(offset)
            try:
                entries = read_snapshot(path) if location is not None else None
            except (CorruptSnapshotError, FileNotFoundError):
                entries = None
            if entries is None:
                if repair:
                    delete_snapshot(path)
                continue
            self._state.load(entries, offset, now)
            return location
        self._state.reset(start)
        return 0, 0

    def _locate(self, offset: int) -> tuple[int, int] | None:
        """(segment index, file position) of the batch starting at `offset`, or of the end if it is the end."""
        idx = self._segment_index_for(offset)
        seg = self._segments[idx]
        if offset == seg.base_offset:
            return idx, 0
        position = seg.read_position(offset)
        end = seg.file_size()
        try:
            # CRC-checked: a snapshot written after a batch that was later torn (power loss)
            # must not be trusted, or the torn batch would survive recovery.
            for pos, batch in seg.iter_batches(position, end):
                if batch.base_offset == offset:
                    return idx, pos
                if batch.base_offset > offset or batch.last_offset >= offset:
                    return None
                if batch.last_offset + 1 == offset:
                    return idx, pos + batch.size  # whatever follows is validated by the replay
        except CorruptRecordError:
            return None
        return None

    def _segment_index_for(self, offset: int) -> int:
        lo, hi = 0, len(self._segments) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._segments[mid].base_offset <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo

    # ---- catching up with the files ----------------------------------------------------------------

    def _replay(self, seg_idx: int, position: int, *, repair: bool) -> int:
        """Apply every whole batch from (segment, position) to the end; returns bytes scanned.

        With `repair` (caller holds the lock) a torn tail of the last segment is cut and
        index gaps left by a crashed writer are filled; without it the scan just stops.
        """
        scanned = 0
        for i in range(seg_idx, len(self._segments)):
            seg = self._segments[i]
            pos = position if i == seg_idx else 0
            seg.size = pos
            seg.next_offset = self._state.end_offset if i == seg_idx else seg.base_offset
            last_segment = i == len(self._segments) - 1
            try:
                for bpos, batch in seg.iter_batches(pos):
                    self._apply_replayed(seg, batch, bpos, repair)
                    scanned += batch.size
                if seg.size < seg.file_size():
                    raise CorruptRecordError("incomplete batch", path=seg.log_path, position=seg.size)
            except CorruptRecordError as exc:
                if not repair and not last_segment:
                    # A read-only view notes the damage (reading that range raises) and goes on,
                    # so the segments after it stay readable.
                    self._corruption = exc
                    self._state.end_offset = self._segments[i + 1].base_offset
                    continue
                self._handle_bad_bytes(seg, exc, last_segment, repair)
                return scanned
            if not last_segment and seg.next_offset > self._segments[i + 1].base_offset:
                raise CorruptRecordError(
                    f"segment overlaps the next one (ends at offset {seg.next_offset})", path=seg.log_path
                )
        return scanned

    def _apply_replayed(self, seg: LogSegment, batch: RecordBatch, position: int, repair: bool) -> None:
        if batch.base_offset < self._state.end_offset:
            raise CorruptRecordError(
                f"batch offset {batch.base_offset} goes backwards (expected >= {self._state.end_offset})",
                path=seg.log_path, position=position,
            )
        lso = _abort_lso(self._state, batch)
        completed = _replay_into(self._state, batch)
        seg.note_batch(batch, position)
        if completed is not None and completed.is_aborted:
            self._index_replayed_abort(seg, AbortedTxn(completed.producer_id, completed.first_offset,
                                                       completed.last_offset, lso), repair)

    def _index_replayed_abort(self, seg: LogSegment, txn: AbortedTxn, repair: bool) -> None:
        """Recovery's side of the txn index: append an abort it lacks, rebuild it if it disagrees.

        An abort below the last entry must already be indexed, for the same producer and
        first offset; otherwise an entry was deleted or altered. This replay is the one
        place a deleted entry is noticed. The LSO is not compared: a replay that lost older
        producer state (no snapshot left after retention) may compute it differently.
        A view that may not write (read-only, or no lock held) keeps a replayed list instead.
        """
        last = seg.txn_index.last_entry()
        if repair and (last is None or last.last_offset < txn.last_offset):
            seg.txn_index.append(txn)
            return
        indexed = seg.txn_index.entry_at(txn.last_offset)
        if seg.abort_replay is None and (indexed is None or indexed[:2] != txn[:2]):
            if repair:
                self._rewrite_txn_index(seg)
            else:
                seg.abort_replay = AbortReplay(self._state_at_segment_start(self._segments.index(seg)))

    def _handle_bad_bytes(self, seg: LogSegment, exc: CorruptRecordError, last_segment: bool, repair: bool) -> None:
        """Cut a torn tail; refuse corruption of data that was followed by more data.

        Without `repair` (no lock) bad bytes at the end may be a write in flight: stop there.
        """
        if not repair:
            return
        position = seg.size
        if not last_segment:
            raise exc
        valid_after = seg.find_valid_batch_after(position)
        if valid_after is not None:
            raise CorruptRecordError(
                f"invalid batch followed by a valid one at byte {valid_after}; refusing to cut acknowledged data",
                path=seg.log_path, position=position,
            )
        seg.truncate(position, seg.next_offset)
        for offset, path in list_snapshots(self.directory):
            if offset > seg.next_offset:
                delete_snapshot(path)

    def _catch_up(self, *, repair: bool) -> None:
        """Bring the view up to what other processes appended or rolled since we last looked."""
        if self._closed:
            raise KafkaStorageError(f"partition {self.topic}-{self.partition} is closed")
        while True:
            active = self._segments[-1]
            size = active.file_size()
            if size < active.size:
                self._load(repair=repair)  # someone cut bytes we had seen: start over
                return
            if size > active.size:
                self._replay(len(self._segments) - 1, active.size, repair=repair)
            following = os.path.join(self.directory, segment_filename(active.next_offset, ".log"))
            if active.next_offset == active.base_offset or not os.path.exists(following):
                if repair:
                    self._drop_stale_txn_entries(active)
                return
            try:
                self._segments.append(self._open_segment(active.next_offset, writable=not self.read_only))
            except FileNotFoundError:
                self._load(repair=repair)  # deleted by retention since we looked: this view is far behind
                return

    def _drop_stale_txn_entries(self, active: LogSegment) -> None:
        """Remove `.txnindex` entries for markers that never reached the log.

        append_marker makes the entry durable before the marker; a writer that died in
        between leaves an entry at an offset the next append would reuse.
        """
        try:
            if os.stat(active.txn_index.path).st_size == 0:
                return
        except FileNotFoundError:
            return  # the usual case: no abort has landed in this segment
        last = active.txn_index.last_entry()
        if last is None or last.last_offset < active.next_offset:
            return
        if self._dead_writers_entry(active, last):
            active.txn_index.truncate_to(active.next_offset)
        else:
            # An entry past the log end that no dying writer leaves: damage, which truncating
            # would turn into a lost abort. Rebuild from the log instead.
            self._rewrite_txn_index(active)

    def _dead_writers_entry(self, active: LogSegment, last: AbortedTxn) -> bool:
        """Whether `last` is what append_marker leaves when it dies before the marker.

        That entry is alone past the end, names the very offset the marker would have taken,
        and its transaction is still open in the producer state replayed from the log.
        """
        entries = active.txn_index.entries()
        alone = len(entries) < 2 or entries[-2].last_offset < active.next_offset
        return (alone and last.last_offset == active.next_offset
                and self._state.open_transactions().get(last.producer_id) == last.first_offset)

    def _refresh_segment_list(self) -> None:
        """Drop segments other processes deleted (retention) and pick up ones they rolled."""
        self._catch_up(repair=False)
        bases = self._segment_bases()
        if not bases:
            return
        if self._segments[-1].base_offset < bases[0]:
            self._load(repair=False)  # retention removed every segment this view knew of
            return
        while len(self._segments) > 1 and self._segments[0].base_offset < bases[0]:
            self._segments.pop(0).close()

    # ---- appending -----------------------------------------------------------------------------------

    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyStoreError(f"{self.directory} is open read-only")
        if self._failed:
            raise KafkaStorageError(f"partition {self.topic}-{self.partition} refuses writes: {self._failed}")
        if self._corruption is not None:
            raise self._corruption

    def _parse_client_batches(self, data: bytes | bytearray | memoryview) -> list[tuple[RecordBatch, int]]:
        """Validate a Produce request's bytes before taking any lock; nothing partial gets in.

        Returns each batch with its true maxTimestamp (the leader corrects a header that
        understates it, kafka-formats.md §1.2).
        """
        data = bytes(data)
        batches = []
        pos = 0
        while pos < len(data):
            if len(data) - pos < 61:
                raise CorruptRecordError("truncated record batch", position=pos)
            length = int.from_bytes(data[pos + 8:pos + 12], "big", signed=True)
            if length < 49 or pos + 12 + length > len(data):
                raise CorruptRecordError(f"batch length {length} does not fit the request", position=pos)
            batch = RecordBatch.parse(data, pos)
            if batch.size > self.config.max_message_bytes:
                raise RecordTooLargeError(
                    f"batch of {batch.size} bytes exceeds max.message.bytes={self.config.max_message_bytes}"
                )
            if batch.is_control:
                raise InvalidRecordError("control batches can only be written by the transaction coordinator")
            batches.append((batch, batch.validate_framing()))
            pos += batch.size
        if not batches:
            raise InvalidRecordError("append of zero batches")
        return batches

    def append(self, data: bytes | bytearray | memoryview, *, verify_txn: TxnVerifier | None = None) -> AppendResult:
        """Append a client's RecordBatch v2 bytes (one or more batches) durably; one fsync per call.

        Offsets are assigned here. A retry of one of a producer's last 5 batches is
        answered with the original offsets and writes nothing.
        """
        self._check_writable()
        batches = self._parse_client_batches(data)
        with self._mutex, self._lock:
            self._catch_up(repair=True)
            self._check_writable()
            self._maybe_expire_producers()
            plan = ProducerAppend(self._state, verify_txn)
            parts: list[bytes] = []
            size = 0
            written: list[tuple[int, int, int]] = []
            results = []
            next_offset = self._segments[-1].next_offset
            for batch, max_ts in batches:
                dup = plan.check_data(batch.producer_id, batch.producer_epoch, batch.base_sequence,
                                      batch.last_sequence, batch.is_transactional)
                if dup is not None:
                    results.append(BatchAppendResult(dup.first_offset, dup.last_offset, True))
                    continue
                base, last = next_offset, next_offset + batch.last_offset_delta
                if batch.has_producer_id:
                    plan.stage_data(batch.producer_id, batch.producer_epoch,
                                    BatchMetadata(batch.base_sequence, batch.last_sequence, base, last, max_ts),
                                    batch.is_transactional)
                written.append((size, last, max_ts))
                parts.append(batch.with_offset(base, LEADER_EPOCH, max_ts))
                size += batch.size
                results.append(BatchAppendResult(base, last, False))
                next_offset = last + 1
            if written:
                self._write(parts[0] if len(parts) == 1 else b"".join(parts), written)
            plan.commit()
            self._state.end_offset = self._segments[-1].next_offset
        return AppendResult(results[0].base_offset, results[-1].last_offset,
                            all(r.duplicate for r in results), tuple(results))

    def append_marker(self, control_type: ControlType, producer_id: int, producer_epoch: int,
                      coordinator_epoch: int = 0, timestamp: int | None = None) -> AppendResult:
        """Write a COMMIT/ABORT marker as the transaction coordinator does (origin COORDINATOR).

        Re-sending the marker that ended the producer's last transaction writes nothing
        (roll-forward after a crash must be repeatable). For an abort that covered data,
        the `.txnindex` entry is made durable *before* the marker: a reader may never see
        the marker without the entry that tells it to skip the aborted data.
        """
        self._check_writable()
        with self._mutex, self._lock:
            self._catch_up(repair=True)
            self._check_writable()
            plan = ProducerAppend(self._state)
            if not plan.check_marker(producer_id, producer_epoch, coordinator_epoch):
                return AppendResult(-1, -1, True, ())
            ts = self._clock() if timestamp is None else timestamp
            offset = self._segments[-1].next_offset
            lso = self._state.last_stable_offset_for_abort(producer_id, offset)
            completed = plan.stage_marker(producer_id, producer_epoch, control_type, coordinator_epoch, offset, ts)
            marker = build_control_batch(control_type, producer_id=producer_id, producer_epoch=producer_epoch,
                                         coordinator_epoch=coordinator_epoch, timestamp=ts,
                                         base_offset=offset, partition_leader_epoch=LEADER_EPOCH)
            segment = self._segment_for_write(len(marker), ts, offset)
            if completed is not None and completed.is_aborted:
                segment.txn_index.truncate_to(offset)
                segment.txn_index.append(AbortedTxn(producer_id, completed.first_offset, offset, lso))
                segment.txn_index.flush()
            self._write(marker, [(0, offset, ts)], segment=segment)
            plan.commit()
            self._state.end_offset = offset + 1
        return AppendResult(offset, offset, False, (BatchAppendResult(offset, offset, False),))

    @contextmanager
    def exclusive(self):
        """Hold this partition's writer lock across several steps, caught up on other writers.

        The transaction coordinator keeps its state in a partition of `__transaction_state`
        and makes each state change under that partition's lock (DESIGN.md §3). Appends
        made while holding it re-enter the lock.
        """
        self._check_writable()
        with self._mutex, self._lock:
            self._catch_up(repair=True)
            yield self

    def _segment_for_write(self, incoming: int, max_timestamp: int, last_offset: int) -> LogSegment:
        """The active segment, rolled first if the append would overflow it (§3.2)."""
        active = self._segments[-1]
        if active.size == 0:
            return active
        too_big = active.size + incoming > self.config.segment_bytes
        first_ts = active.first_batch_timestamp
        too_old = first_ts >= 0 and max_timestamp - first_ts > self.config.segment_ms
        overflow = last_offset - active.base_offset > MAX_RELATIVE_OFFSET
        if too_big or too_old or overflow:
            self._roll()
        return self._segments[-1]

    def _write(self, chunk: bytes, written: list[tuple[int, int, int]], segment: LogSegment | None = None) -> None:
        """Write one chunk and fdatasync it. A failed write is cut back; a failed fsync is fatal."""
        if segment is None:
            segment = self._segment_for_write(len(chunk), max(w[2] for w in written), written[-1][1])
        before_size, before_next = segment.size, segment.next_offset
        saved = (segment.max_timestamp, segment.offset_of_max_timestamp, segment.first_batch_timestamp)
        try:
            segment.append(chunk, written)
        except KafkaStorageError:
            self._undo_partial_write(segment, before_size, before_next, saved)
            raise
        try:
            segment.sync()
        except KafkaStorageError as exc:
            self._failed = f"fsync failed ({exc}); reopen the store to recover"
            raise

    def _undo_partial_write(self, segment: LogSegment, size: int, next_offset: int, saved: tuple) -> None:
        try:
            os.ftruncate(segment.fd, size)
        except OSError:
            self._failed = "could not cut a partial write"
        segment.size, segment.next_offset = size, next_offset
        segment.max_timestamp, segment.offset_of_max_timestamp, segment.first_batch_timestamp = saved
        segment.offset_index.truncate_to(next_offset)
        segment.time_index.truncate_to(next_offset)
        segment.txn_index.truncate_to(next_offset)  # an abort's entry goes in before its marker

    def _roll(self) -> None:
        """Seal the active segment, snapshot producer state at the new base, start a new segment."""
        active = self._segments[-1]
        active.seal()
        base = active.next_offset
        self._state.end_offset = base
        self._take_snapshot()
        self._segments.append(LogSegment.create(self.directory, base, index_interval_bytes=self.config.index_interval_bytes))
        self._delete_old_snapshots(keep_latest=False)
        self._enforce_retention_locked(self._clock())

    def roll(self) -> None:
        """Force a new segment (as `segment.ms` would); a no-op on an empty active segment."""
        self._check_writable()
        with self._mutex, self._lock:
            self._catch_up(repair=True)
            if self._segments[-1].size > 0:
                self._roll()

    def _maybe_expire_producers(self) -> None:
        now = self._clock()
        if now - self._last_expiry_check >= min(EXPIRY_CHECK_INTERVAL_MS, self.config.producer_id_expiration_ms):
            self._state.expire(now)
            self._last_expiry_check = now

    # ---- snapshots ---------------------------------------------------------------------------------------

    def _take_snapshot(self) -> None:
        offset = self._state.end_offset
        snaps = list_snapshots(self.directory)
        if snaps and snaps[-1][0] == offset:
            return
        write_snapshot(self.directory, offset, self._state.snapshot_entries())

    def _delete_old_snapshots(self, *, keep_latest: bool) -> None:
        """Keep one snapshot per segment base (recovery of that segment) plus the newest."""
        bases = {s.base_offset for s in self._segments}
        snaps = list_snapshots(self.directory)
        for i, (offset, path) in enumerate(snaps):
            newest = i == len(snaps) - 1
            if offset in bases or (keep_latest and newest):
                continue
            delete_snapshot(path)

    # ---- reading --------------------------------------------------------------------------------------------

    def read(self, start_offset: int, max_bytes: int = 1 << 20, *, max_offset: int | None = None) -> list[RecordBatch]:
        """Whole, CRC-valid batches holding offsets ≥ start_offset, about max_bytes of them.

        At least one batch is returned when one is available, however large (Kafka's
        rule, so a big batch cannot stall a reader). `max_offset` (exclusive) caps the
        read, e.g. at the last stable offset; batches starting at or past it are left out.
        """
        with self._mutex:
            self._refresh_segment_list()
            start = self._segments[0].base_offset
            end = self._segments[-1].next_offset
            if start_offset < start or start_offset > end:
                raise OffsetOutOfRangeError(
                    f"offset {start_offset} is outside [{start}, {end}] of {self.topic}-{self.partition}"
                )
            limit = end if max_offset is None else min(max_offset, end)
            out: list[RecordBatch] = []
            total = 0
            idx = self._segment_index_for(start_offset)
            for seg in self._segments[idx:]:
                if seg.base_offset >= limit or (total >= max_bytes and out):
                    break
                position = self._verified(seg).read_position(start_offset) if seg.base_offset <= start_offset else 0
                for _, batch in seg.iter_batches(position, self._readable_end(seg), strict=True):
                    if batch.base_offset >= limit:
                        return out
                    if batch.last_offset < start_offset:
                        continue
                    if out and total + batch.size > max_bytes:
                        return out
                    out.append(batch)
                    total += batch.size
            return out

    def extents(self, start_offset: int, end_offset: int) -> list[SegmentExtent]:
        """Where the batches holding offsets [start_offset, end_offset) lie, one extent per segment.

        For readers in other processes (DESIGN.md §8): each extent starts at the offset
        index's position for `start_offset` (its indexes checked first, as any lookup
        here is) and ends where this view's whole batches end, so the reader needs no
        recovery or index of its own. Batches outside the offsets may lie at either end.
        """
        with self._mutex:
            self._refresh_segment_list()
            if end_offset <= start_offset:
                return []
            out: list[SegmentExtent] = []
            segments = self._segments
            for i in range(self._segment_index_for(start_offset), len(segments)):
                seg = segments[i]
                if seg.base_offset >= end_offset:
                    break
                position = self._verified(seg).read_position(start_offset) if seg.base_offset < start_offset else 0
                out.append(SegmentExtent(seg.directory, seg.base_offset, position, self._readable_end(seg)))
            return out

    def _readable_end(self, seg: LogSegment) -> int:
        """Bytes of a segment a reader may scan, all of which must be whole batches.

        A sealed segment is read to its file end (damage anywhere in it raises); the active
        one only up to what this view validated, since past that a write may be in flight.
        """
        return seg.size if seg is self._segments[-1] else seg.file_size()

    def aborted_transactions(self, start_offset: int, end_offset: int) -> list[AbortedTxn]:
        """Aborted transactions with data in [start_offset, end_offset): what a read_committed
        reader must skip there (kafka-formats.md §5.6).

        Walks the `.txnindex` of the segment holding `start_offset` and the ones after it,
        stopping at the first entry whose recorded LSO is ≥ `end_offset`: no later abort can
        cover the range. Each entry's data runs from `first_offset` to its ABORT marker at
        `last_offset`, and only batches of its `producer_id` in that span are aborted.
        """
        with self._mutex:
            self._refresh_segment_list()
            found: list[AbortedTxn] = []
            for seg in self._segments[self._segment_index_for(start_offset):]:
                entries, complete = collect_aborted(self._aborts(seg), start_offset, end_offset)
                found.extend(entries)
                if complete:
                    break
            return found

    # ---- the aborted-transaction index, checked against the log's markers ------------------------

    def _aborts(self, seg: LogSegment) -> list[AbortedTxn]:
        """The segment's aborted transactions, its `.txnindex` checked against the log first (rule 6).

        The structural checks cannot see an entry whose offsets or producer id changed to
        other plausible values, yet a read_committed reader would then skip the wrong data.
        So each entry is checked once per view, lazily (opening stays O(1) in log size), at
        a few single-batch reads per entry; a mismatch rebuilds the index from the log.
        A *deleted* entry leaves nothing to check without scanning the segment: only
        recovery's replay (an unclean open of that segment) or a rebuild restores it.
        """
        if seg.abort_replay is not None:
            if self.read_only or self._failed:
                return seg.abort_replay.advance(seg, self._readable_end(seg))
            return self._rebuild_txn_index(seg)  # found by a replay without the lock: fix the file
        self._verified(seg)
        if seg.txn_checked < seg.txn_index.stored_count() and self._txn_index_mismatch(seg) is not None:
            return self._rebuild_txn_index(seg)
        return seg.txn_index.entries()

    def _txn_index_mismatch(self, seg: LogSegment) -> str | None:
        """Why `seg`'s `.txnindex` disagrees with the log, or None; advances `seg.txn_checked`.

        Entries past the end of this view's active segment are left unchecked: a writer makes
        the entry durable before its marker, which may still be in flight.
        """
        try:
            seg.txn_index.sanity_check()
        except CorruptIndexError as exc:
            return str(exc)
        active = seg is self._segments[-1]
        previous: dict[int, int] = {}  # producer id -> marker offset of its previous entry here
        for i, txn in enumerate(seg.txn_index.entries()):
            if i >= seg.txn_checked:
                if active and txn.last_offset >= seg.next_offset:
                    return None
                problem = self._txn_entry_mismatch(seg, txn, previous.get(txn.producer_id))
                if problem is not None:
                    return f"{seg.txn_index.path}: {txn} {problem}"
                seg.txn_checked = i + 1
            previous[txn.producer_id] = txn.last_offset
        return None

    def _txn_entry_mismatch(self, seg: LogSegment, txn: AbortedTxn, previous: int | None) -> str | None:
        """What an entry claims that the batches it names deny, or None.

        The ABORT marker of its producer sits at last_offset, in this segment; a
        transactional batch of that producer starts at first_offset, after the producer's
        previous indexed abort; the LSO is marker + 1 or where another producer's
        transaction starts (§5.5). A first_offset moved onto an earlier transaction of the
        same producer that is not indexed here passes: telling that apart needs a scan.
        """
        if not seg.base_offset <= txn.last_offset < seg.next_offset:
            return "lies outside the segment"
        if not _is_abort_of(self._batch_at(txn.last_offset), txn.last_offset, txn.producer_id):
            return "does not name an ABORT marker of its producer"
        if previous is not None and txn.first_offset <= previous:
            return "overlaps the producer's previous aborted transaction"
        if not self._starts_txn(txn.first_offset, txn.producer_id, same_producer=True):
            return "does not start at a transactional batch of its producer"
        if (txn.last_stable_offset != txn.last_offset + 1
                and not self._starts_txn(txn.last_stable_offset, txn.producer_id, same_producer=False)):
            return "records an LSO that is not the start of another producer's transaction"
        return None

    def _starts_txn(self, offset: int, producer_id: int, *, same_producer: bool) -> bool:
        """Whether a transactional data batch of (or, if not same_producer, not of) the producer starts at offset.

        Below the log start the batch went with its segment and cannot be checked; a
        reader never starts there, so such an offset reads the same as any other there.
        """
        if offset < self._segments[0].base_offset:
            return True
        batch = self._batch_at(offset)
        return (batch is not None and batch.base_offset == offset and batch.is_transactional
                and not batch.is_control and (batch.producer_id == producer_id) == same_producer)

    def _batch_at(self, offset: int) -> RecordBatch | None:
        seg = self._segments[self._segment_index_for(offset)]
        return self._verified(seg).batch_at(offset, self._readable_end(seg))

    def _rebuild_txn_index(self, seg: LogSegment) -> list[AbortedTxn]:
        """Replace a `.txnindex` that disagrees with the log by recovery's replay of the segment.

        A writable view rewrites the file under the lock, caught up first so the replay also
        covers what other writers appended; a read-only view (or one whose fsync failed) may
        not write, so it keeps the replayed list for its own reads.
        """
        if self.read_only or self._failed:
            seg.abort_replay = AbortReplay(self._state_at_segment_start(self._segments.index(seg)))
            return seg.abort_replay.advance(seg, self._readable_end(seg))
        with self._lock:
            self._catch_up(repair=True)
            if seg not in self._segments:  # the view was reloaded meanwhile: check the fresh segment
                fresh = [s for s in self._segments if s.base_offset == seg.base_offset]
                return self._aborts(fresh[0]) if fresh else []
            self._rewrite_txn_index(seg)
        return seg.txn_index.entries()

    def _rewrite_txn_index(self, seg: LogSegment) -> None:
        """Rewrite a segment's `.txnindex` from its batches, durably (caller holds the lock)."""
        replay = AbortReplay(self._state_at_segment_start(self._segments.index(seg)))
        seg.txn_index.rewrite(replay.advance(seg, self._readable_end(seg)))
        seg.txn_checked, seg.abort_replay = seg.txn_index.stored_count(), None

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """First offset whose record timestamp is ≥ `timestamp` (Kafka's ListOffsets), or None."""
        with self._mutex:
            self._refresh_segment_list()
            for seg in self._segments:
                if seg.size == 0 and seg is self._segments[-1]:
                    continue
                # No segment is skipped on the time index's word alone: a time index cut short
                # would then hide records. The index only picks where in a segment to start.
                self._verified(seg)
                indexed_offset = seg.time_index.lookup(timestamp)[1] if seg.indexes_trusted else seg.base_offset
                position = seg.read_position(indexed_offset)
                for _, batch in seg.iter_batches(position, self._readable_end(seg), strict=True):
                    if batch.max_timestamp < timestamp or batch.is_control:
                        continue
                    for record in batch.records():
                        if record.timestamp >= timestamp:
                            return record.offset
            return None

    # ---- retention -------------------------------------------------------------------------------------------

    def enforce_retention(self) -> int:
        """Delete whole sealed segments past retention.ms / retention.bytes; returns how many."""
        self._check_writable()
        with self._mutex, self._lock:
            self._catch_up(repair=True)
            return self._enforce_retention_locked(self._clock())

    def _enforce_retention_locked(self, now: int) -> int:
        cfg = self.config
        total = sum(s.size for s in self._segments)
        doomed: list[LogSegment] = []
        for seg in self._segments[:-1]:
            expired = (cfg.retention_ms >= 0 and now - seg.largest_timestamp() > cfg.retention_ms
                       and now - seg.scan_max_timestamp() > cfg.retention_ms)
            oversize = cfg.retention_bytes >= 0 and total - seg.size >= cfg.retention_bytes
            if not (expired or oversize):
                break
            doomed.append(seg)
            total -= seg.size
        if not doomed:
            return 0
        new_start = self._segments[len(doomed)].base_offset
        # A snapshot at the log end first, so producer state outlives the deleted data (KIP-360).
        self._take_snapshot()
        paths = []
        for seg in doomed:
            paths.extend(seg.delete_files())
            seg.close()
        for offset, path in list_snapshots(self.directory):
            if offset < new_start:
                paths.append(path)
        unlink_durably(paths, self.directory)
        self._segments = self._segments[len(doomed):]
        return len(doomed)

    # ---- closing ---------------------------------------------------------------------------------------------

    def flush(self) -> None:
        """Appends are already durable; this makes the derived index files durable too."""
        with self._mutex:
            for seg in self._segments:
                seg.offset_index.flush()
                seg.time_index.flush()

    def close(self) -> None:
        """Clean close: a snapshot at the log end so the next open scans nothing."""
        with self._mutex:
            if self._closed:
                return
            try:
                if not self.read_only and not self._failed and self._corruption is None:
                    with self._lock:
                        self._catch_up(repair=True)
                        self._segments[-1].seal()
                        self._take_snapshot()
                        self._delete_old_snapshots(keep_latest=True)
            finally:
                for seg in self._segments:
                    seg.close()
                if self._lock is not None:
                    self._lock.close()
                self._closed = True

    def __repr__(self) -> str:
        return f"PartitionLog({self.topic}-{self.partition})"


def _replay_into(state: ProducerStateManager, batch: RecordBatch) -> CompletedTxn | None:
    """Apply a batch read from the log to producer state without any checks (origin REPLICATION)."""
    state.end_offset = batch.last_offset + 1
    if not batch.has_producer_id:
        return None
    if batch.is_control:
        if batch.records_count == 0:
            return None
        marker = batch.control_marker()
        return state.replay_marker(batch.producer_id, batch.producer_epoch, int(marker.control_type),
                                   marker.coordinator_epoch, batch.base_offset, batch.max_timestamp)
    state.replay_data(batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.last_sequence,
                      batch.base_offset, batch.last_offset, batch.max_timestamp, batch.is_transactional)
    return None


def abort_replayer(state: ProducerStateManager,
                    sink: Callable[[AbortedTxn], None]) -> Callable[[RecordBatch], None]:
    """Recovery's replay of one segment's batches from `state`, handing each abort's entry to `sink`."""

    def replay(batch: RecordBatch) -> None:
        if batch.base_offset < state.end_offset:
            return
        lso = _abort_lso(state, batch)
        completed = _replay_into(state, batch)
        if completed is not None and completed.is_aborted:
            sink(AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset, lso))

    return replay


class AbortReplay:
    """A segment's aborted transactions replayed from its batches, resumable as the segment grows.

    A read-only view keeps one in place of a `.txnindex` that failed its check against the
    markers; a writable view uses one to rewrite that file.
    """

    def __init__(self, state: ProducerStateManager):
        self.aborts: list[AbortedTxn] = []
        self.position = 0
        self._replay = abort_replayer(state, self.aborts.append)

    def advance(self, seg: LogSegment, end: int) -> list[AbortedTxn]:
        """Replay the batches between the last position and `end`; returns every abort so far."""
        for position, batch in seg.iter_batches(self.position, end, strict=True):
            self._replay(batch)
            self.position = position + batch.size
        return self.aborts


def _is_abort_of(batch: RecordBatch | None, offset: int, producer_id: int) -> bool:
    """Whether `batch` is the producer's ABORT marker at `offset`."""
    if batch is None or batch.base_offset != offset or not batch.is_control or batch.producer_id != producer_id:
        return False
    try:
        return batch.records_count > 0 and batch.control_marker().is_abort
    except InvalidRecordError:
        return False


def _abort_lso(state: ProducerStateManager, batch: RecordBatch) -> int | None:
    """The LSO an AbortedTxn entry records, computed before the marker closes its transaction."""
    if batch.is_control and batch.has_producer_id:
        return state.last_stable_offset_for_abort(batch.producer_id, batch.base_offset)
    return None
