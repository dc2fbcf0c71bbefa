"""One log segment: a `.log` file of record batches and its `.index`, `.timeindex`, `.txnindex`.

The segment knows bytes and offsets, not producers: scanning hands back validated
batches, and the partition log decides what they mean. Index files are derived data,
written after the log bytes and never fsynced on the append path; the segment
writes Kafka's sparse entries (docs/kafka-formats.md §3.3-3.4) and can rebuild them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

from storage.descriptor_cache import CachedFile
from storage.durable import create_durably, fsync_fd, write_all
from storage.errors import CorruptIndexError, CorruptRecordError, KafkaStorageError, UnsupportedForMessageFormatError
from storage.file_records import FileRecords
from storage.log_files import (
    INDEX_FILE_SUFFIX,
    SWAP_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
    log_file,
    segment_file,
)
from storage.offset_index import OffsetIndex
from storage.records import HEADER_SIZE, BatchHeader, RecordBatch
from storage.time_index import TimeIndex
from storage.transaction_index import TransactionIndex


class LogSegment:
    """A segment file plus its indexes and what this process knows of its contents.

    `size` and `next_offset` cover only batches this process has seen whole and valid;
    the file may be longer (another process appending, or a torn tail).
    """

    def __init__(
        self,
        directory: str,
        base_offset: int,
        *,
        writable: bool,
        index_interval_bytes: int = 4096,
        from_swap: bool = False,
    ):
        if from_swap and writable:
            raise ValueError("a segment read from its .swap files is never written")
        self.directory = directory
        self.base_offset = base_offset
        self.writable = writable
        self.index_interval_bytes = index_interval_bytes
        # A dead cleaner's cleaned segment, read under its `.swap` names in place of the segments it
        # replaces until a writer completes the swap (storage/log_loader.py `SegmentListing`).
        self.from_swap = from_swap
        self._name_suffix = SWAP_FILE_SUFFIX if from_swap else ""
        self.log_path = log_file(directory, base_offset) + self._name_suffix
        flags = os.O_RDWR | os.O_APPEND if writable else os.O_RDONLY
        try:
            # Through the descriptor cache: idle, it may be closed and reopened (storage/descriptor_cache.py).
            self.log = CachedFile(self.log_path, flags)
        except FileNotFoundError:
            raise  # retention removed it after it was listed: the caller reloads its view
        except OSError as exc:
            raise KafkaStorageError(f"cannot open {self.log_path}: {exc.strerror}") from exc
        # The one reader of this file's bytes; it borrows the file, which the segment closes.
        self.records = FileRecords(self.log_path, self.log)
        # Checked before the index objects create empty files, so recovery can tell a deleted
        # index (to be rebuilt) from an empty one.
        self.missing_indexes = not (
            os.path.exists(self._path(INDEX_FILE_SUFFIX)) and os.path.exists(self._path(TIME_INDEX_FILE_SUFFIX))
        )
        # False when an index failed its checks and this process may not rebuild it (read-only):
        # lookups then scan the log instead of trusting it.
        self.indexes_trusted = True
        # False until the indexes had their full check; sealed segments get only a
        # constant-time check at open and the full one before their first lookup.
        self.indexes_verified = False
        self.offset_index = OffsetIndex(self._path(INDEX_FILE_SUFFIX), base_offset, writable=writable)
        self.time_index = TimeIndex(self._path(TIME_INDEX_FILE_SUFFIX), base_offset, writable=writable)
        self.txn_index = TransactionIndex(self._path(TXN_INDEX_FILE_SUFFIX), base_offset, writable=writable)
        self.size = 0
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.first_batch_timestamp = -1
        # (log size, where the last indexed batch starts) as this segment's own append left them: the
        # next append starting at that size asks the `.index` nothing (`_indexed_position`).
        self._indexed_at: tuple[int, int] | None = None

    @classmethod
    def create(cls, directory: str, base_offset: int, *, index_interval_bytes: int = 4096) -> LogSegment:
        """Create an empty segment whose directory entry is durable before anyone appends to it."""
        os.close(create_durably(log_file(directory, base_offset)))
        seg = cls(directory, base_offset, writable=True, index_interval_bytes=index_interval_bytes)
        # Its indexes were created with it, not lost: without this, the first lookup in it once it
        # holds data took them for deleted and rebuilt them (a scan, and a listing of the snapshots).
        seg.missing_indexes = False
        # And empty, made by this writer under the lock: nothing in them needs the full check.
        seg.indexes_verified = True
        return seg

    def _path(self, suffix: str) -> str:
        return segment_file(self.directory, self.base_offset, suffix) + self._name_suffix

    # ---- reading --------------------------------------------------------------------------

    def file_size(self) -> int:
        return self.records.size()

    def iter_batches(
        self, position: int = 0, end: int | None = None, *, strict: bool = False
    ) -> Iterator[tuple[int, RecordBatch]]:
        """(file position, batch) for every complete, CRC-valid batch from `position` (FileRecords.batches).

        Stops quietly at a partial tail (fewer than 17 bytes left, or a batch running past
        the end) unless `strict`: readers scanning a range already known to hold whole
        batches treat a partial batch there as the corruption it is. An invalid batch
        raises CorruptRecordError naming this file and the byte position; the caller
        decides whether that is a torn tail or corruption.
        """
        return ((batch.position, batch) for batch in self.records.batches(position, end, strict=strict))

    def find_valid_batch_after(self, position: int) -> int | None:
        """Position of a CRC-valid batch starting after `position`, or None (FileRecords.next_valid_batch).

        Tells a torn tail (nothing valid follows) from corruption of acknowledged data
        (valid batches follow the bad bytes): only the first may be cut.
        """
        return self.records.next_valid_batch(position)

    def read_position(self, offset: int) -> int:
        """File position from which a forward scan finds `offset` (index lookup, no scan).

        A damaged index must not change what a reader sees (docs/reliability-scenarios.md rule 6): if the
        batch at the indexed position does not start at or before the indexed offset,
        scan the segment from its start instead.
        """
        if not self.indexes_trusted:
            return 0
        indexed_offset, position = self.offset_index.lookup(offset)
        if position == 0:
            return 0
        base = self.records.base_offset_at(position)
        if base is None or base > indexed_offset:
            return 0  # not a batch boundary: the scan from the start meets (and reports) what is there
        return position

    def probe_position(self, offset: int) -> int:
        """`read_position` without parsing or checking the offset index: for recovery's open (issue 26).

        The index file is bisected in place (OffsetIndex.probe), as Kafka's lazily loaded indexes
        are, so opening a big active segment does not parse its whole index. The position is used
        only if a whole, CRC-valid batch starts there at or before the indexed offset; anything
        else (a damaged index may answer any entry) falls back to `read_position`, whose parse
        trusts only the index's ordered prefix.
        """
        if not self.indexes_trusted:
            return 0
        indexed_offset, position = self.offset_index.probe(offset)
        if position == 0:
            return 0
        try:
            batch = self.records.batch_at(position)
        except (CorruptRecordError, UnsupportedForMessageFormatError):
            batch = None
        if batch is not None and batch.base_offset <= indexed_offset:
            return position
        return self.read_position(offset)

    def locate_batch(self, offset: int, end: int) -> BatchHeader | None:
        """Header of the first batch before byte `end` holding `offset` or a later one; None if none.

        Found from the offset index's position by hopping from header to header, without
        CRC checks: a read checks the batches it returns, not the ones it passes over, so a
        damaged batch before `offset` does not make it unreadable (docs/reliability-scenarios.md
        rule 17). Bytes on the way that cannot be a batch are passed by resyncing at the next
        CRC-valid batch, unless `offset` lies in the damaged range: then the CorruptRecordError
        naming the damage is raised, as for any read of it.
        """
        position = self.read_position(offset)
        while True:
            try:
                return self._hop(position, offset, end)
            except CorruptRecordError as exc:
                position = self._resync_after(exc, offset, end)

    def _hop(self, position: int, offset: int, end: int) -> BatchHeader | None:
        """The hop of `locate_batch` from `position`."""
        for header in self.headers(position, end):
            if header.last_offset >= offset:
                return header
        return None

    def headers(self, position: int, end: int) -> Iterator[BatchHeader]:
        """Headers of the batches in [position, end), a range known to hold whole batches: no CRC checks.

        Read a little at a time (a hop usually ends soon). Bytes that cannot be a batch, or a
        batch running past `end`, raise CorruptRecordError: here that is no partial write.
        """
        for header in self.records.headers(position, end, chunk_size=self.index_interval_bytes + HEADER_SIZE):
            yield header
            position = header.position + header.size
        if position < end:
            raise CorruptRecordError("batch runs past the end of the data", path=self.log_path, position=position)

    def _resync_after(self, exc: CorruptRecordError, offset: int, end: int) -> int:
        """Position of the first valid batch after the damage `exc` names, if `offset` lies past the damage;
        else raise it."""
        if exc.position is None:
            raise exc
        resync = self.records.next_valid_batch(exc.position, end)
        if resync is None:
            raise exc
        base = self.records.base_offset_at(resync)
        if base is None or base > offset:
            raise exc
        return resync

    def batch_at(self, offset: int, end: int) -> RecordBatch | None:
        """The CRC-checked batch holding `offset`, or None if no whole batch before byte `end` does.

        One offset-index lookup, then a hop from header to header (the index is sparse:
        at most index.interval.bytes of batches are skipped) and one read of the batch
        found: a check that must cost O(1) per offset, not a segment scan, uses this.
        Damaged bytes on the way raise CorruptRecordError, as any read of them does.
        """
        position = self.read_position(offset)
        records = self.records
        while True:
            header = records.header_at(position, end)
            if header is None or header.base_offset > offset or position + header.size > end:
                return None
            if header.last_offset >= offset:
                return records.batch_at(position, end)
            position += header.size

    # ---- bookkeeping ------------------------------------------------------------------------

    def note_batch(self, batch: RecordBatch, position: int) -> None:
        """Account for a batch known to lie whole and valid at `position`."""
        self.size = position + batch.size
        self.next_offset = batch.last_offset + 1
        if self.first_batch_timestamp < 0:
            self.first_batch_timestamp = batch.max_timestamp
        if batch.max_timestamp > self.max_timestamp:
            self.max_timestamp = batch.max_timestamp
            self.offset_of_max_timestamp = batch.last_offset

    def load_time_stats(self) -> None:
        """Seed max timestamp from the time index and the roll timestamp from the first batch."""
        _, last = self.time_index.peek_last()
        if last is not None:
            self.max_timestamp, self.offset_of_max_timestamp = last
        try:
            head = self.records.header_at(0)
        except (CorruptRecordError, UnsupportedForMessageFormatError):
            head = None  # the scan that reads this segment reports it
        if head is not None:
            self.first_batch_timestamp = head.max_timestamp

    def scan_max_timestamp(self) -> int:
        """Largest batch maxTimestamp read from the batch headers themselves (no CRC, no records).

        Retention deletes data on this answer, so before deleting it does not trust the
        time index, which a crash or a bit flip could have cut short.
        """
        try:
            return self.records.largest_timestamp_after(0)
        except (CorruptRecordError, UnsupportedForMessageFormatError):
            # Bytes that are no batch: what was read before them stands, as it always did.
            return self._largest_timestamp_before_damage()

    def _largest_timestamp_before_damage(self) -> int:
        largest = -1
        try:
            for header in self.records.headers():
                largest = max(largest, header.max_timestamp)
        except (CorruptRecordError, UnsupportedForMessageFormatError):
            pass
        return largest

    def quick_index_check(self) -> None:
        """Constant-time checks of both indexes: files present, whole entries, last entry in bounds.

        Catches a deleted, cut or zero-filled index at open without parsing it; damage in
        the middle is left to the full check before the first lookup.
        """
        if self.size > 0 and self.missing_indexes:
            raise CorruptIndexError("an index file is missing")
        length, last = self.offset_index.peek_last()
        if length % OffsetIndex.ENTRY_SIZE:
            raise CorruptIndexError(f"{self.offset_index.path}: length {length} is not whole entries")
        if last is not None and not (self.base_offset <= last[0] < self.next_offset and 0 < last[1] < self.size):
            raise CorruptIndexError(f"{self.offset_index.path}: last entry {last} is outside the segment")
        length, last = self.time_index.peek_last()
        if length % TimeIndex.ENTRY_SIZE:
            raise CorruptIndexError(f"{self.time_index.path}: length {length} is not whole entries")
        if last is not None and not (last[0] >= 0 and self.base_offset <= last[1] < self.next_offset):
            raise CorruptIndexError(f"{self.time_index.path}: last entry {last} is outside the segment")

    def full_index_check(self) -> None:
        """Every entry of all three indexes against the ordering rules and the segment's bounds."""
        if self.size > 0 and self.missing_indexes:
            raise CorruptIndexError("an index file is missing")
        self.offset_index.sanity_check(self.size)
        self.time_index.sanity_check(next_offset=self.next_offset)
        self.txn_index.sanity_check()
        last = self.offset_index.last_entry()
        if last is not None and last[0] >= self.next_offset:
            raise CorruptIndexError("offset index points past its segment")

    def largest_timestamp(self) -> int:
        """Largest batch timestamp: retention.ms compares it with the clock."""
        _, last = self.time_index.peek_last()
        ts = last[0] if last is not None else -1
        return max(ts, self.max_timestamp)

    # ---- writing ------------------------------------------------------------------------------

    def append(self, chunk: bytes | bytearray, batches: list[tuple[int, int, int]]) -> None:
        """Write one append call's batches; `batches` = (position in chunk, last offset, max timestamp).

        Indexed batch by batch, as Kafka 4.4's LogSegment.append does: each batch starting more
        than index.interval.bytes after the last indexed one gets an entry, its own last offset
        at its own position, so a group commit of several batches is indexed as the same batches
        appended one at a time would be (and as recovery's rebuild indexes them). The caller fsyncs.
        """
        start = self.size
        indexed = self._indexed_position(start)  # before the write: it may ask the file for its last entry
        self._indexed_at = None  # until this append's index entries are in
        with self.log as fd:
            write_all(fd, chunk)
        self.wrote(start, len(chunk), batches, indexed)

    def wrote(self, start: int, length: int, batches: list[tuple[int, int, int]], indexed: int) -> None:
        """Take up `length` bytes written at `start` (`append`'s bookkeeping, and PartitionLog's quiet
        append's, whose write was native): size, offsets, timestamps, and the index entries due,
        `indexed` being where the last indexed batch starts."""
        self.size = start + length
        self.next_offset = batches[-1][1] + 1
        offsets: list[tuple[int, int]] = []  # the entries, written at once after the loop
        times: list[tuple[int, int]] = []  # the time index's candidate beside each
        for at, last_offset, max_ts in batches:
            if self.first_batch_timestamp < 0:
                self.first_batch_timestamp = max_ts
            if max_ts > self.max_timestamp:
                self.max_timestamp = max_ts
                self.offset_of_max_timestamp = last_offset
            position = start + at
            if position - indexed > self.index_interval_bytes:
                offsets.append((last_offset, position))
                times.append((self.max_timestamp, self.offset_of_max_timestamp))
                indexed = position
        if offsets and not self._index(offsets, times):
            return
        self._indexed_at = (self.size, indexed)

    def known_indexed_position(self) -> int | None:
        """Where the last indexed batch starts, when this segment's own last append ended at its size
        (`_indexed_position`: nobody appended since); else None, and the quiet append
        (PartitionLog._quiet_append) is not taken: only the file could say."""
        known = self._indexed_at
        return known[1] if known is not None and known[0] == self.size else None

    def _indexed_position(self, start: int) -> int:
        """Where the last indexed batch starts, for an append at byte `start` (writer lock held).

        Only a writer under the lock changes a `.index`, and only with the log: when this segment's
        own last append ended at `start`, nobody appended since (a writer's catch-up would have
        grown `size`), so the position that append left holds, without an fstat of the `.index`
        per append (issue 26). Otherwise the file says. A wrong answer could only space entries
        differently (an entry is written only after `append_many` checked the file's order).
        """
        known = self._indexed_at
        if known is not None and known[0] == start:
            return known[1]
        last = self.offset_index.last_entry()
        return last[1] if last is not None else 0

    def _index(self, offsets: list[tuple[int, int]], times: list[tuple[int, int]]) -> bool:
        """The append's offset-index entries and the time-index entries beside them, one write
        per file (storage.entry_file.EntryFile.append_many says why); none if another writer
        indexed past the first (then it indexed this range already: False)."""
        try:
            self.offset_index.append_many(offsets)
        except ValueError:
            return False  # another writer indexed this range already
        self.time_index.maybe_append_many(times)
        return True

    def truncate(self, position: int, next_offset: int) -> None:
        """Cut the log at `position` (a torn tail) and every index to the same offset."""
        try:
            self.cut_log(position)
        except OSError as exc:
            raise KafkaStorageError(f"cannot truncate {self.log_path}: {exc.strerror}") from exc
        with self.log as fd:
            fsync_fd(fd)
        self._indexed_at = None
        self.offset_index.truncate_to(next_offset)
        self.time_index.truncate_to(next_offset)
        self.txn_index.truncate_to(next_offset)
        self.size = position
        self.next_offset = next_offset

    def cut_log(self, position: int) -> None:
        """ftruncate the `.log` alone (OSError passes): the caller keeps the indexes and the bookkeeping in step."""
        with self.log as fd:
            os.ftruncate(fd, position)

    def sync(self) -> None:
        with self.log as fd:
            fsync_fd(fd, data_only=True)

    def seal(self) -> None:
        """At roll and close: force the final time-index entry and make the indexes durable."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.offset_index.flush()
        self.time_index.flush()

    def rebuild_indexes(self, on_batch: Callable[[RecordBatch], None] | None = None) -> None:
        """Rewrite `.index` and `.timeindex` from the log, one entry per qualifying batch.

        `on_batch` sees every batch in order (the caller rebuilds the txn index with it);
        batches are not collected, so a large segment is never held in memory.
        """
        self._indexed_at = None
        self.offset_index.reset()
        self.time_index.reset()
        self.size, self.next_offset = 0, self.base_offset
        self.max_timestamp, self.offset_of_max_timestamp, self.first_batch_timestamp = -1, self.base_offset, -1
        last_indexed = 0
        for position, batch in self.iter_batches(0):
            self.note_batch(batch, position)
            if position - last_indexed > self.index_interval_bytes:
                self.offset_index.append(batch.last_offset, position)
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                last_indexed = position
            if on_batch is not None:
                on_batch(batch)
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.indexes_trusted = True
        self.indexes_verified = True
        self.missing_indexes = False

    def close(self) -> None:
        for idx in (self.offset_index, self.time_index, self.txn_index):
            idx.close()
        self.log.close()

    def delete_files(self) -> list[str]:
        """Paths of this segment's files, the `.log` first so a crash midway leaves only orphans."""
        return [
            self.log_path,
            self._path(INDEX_FILE_SUFFIX),
            self._path(TIME_INDEX_FILE_SUFFIX),
            self._path(TXN_INDEX_FILE_SUFFIX),
        ]
