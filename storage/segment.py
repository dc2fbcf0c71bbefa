"""One log segment: a `.log` file of record batches and its `.index`, `.timeindex`, `.txnindex`.

The segment knows bytes and offsets, not producers: scanning hands back validated
batches, and the partition log decides what they mean. Index files are derived data,
written after the log bytes and never fsynced on the append path; the segment
writes Kafka's sparse entries (kafka-formats.md §3.3-3.4) and can rebuild them.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable, Iterator

from storage.durable import create_durably, fsync_fd, write_all
from storage.errors import CorruptIndexError, CorruptRecordError, KafkaStorageError
from storage.offset_index import OffsetIndex
from storage.legacy_records import is_legacy_message
from storage.legacy_records import refuse as legacy_refusal
from storage.records import MAGIC, RecordBatch
from storage.time_index import TimeIndex
from storage.transaction_index import TransactionIndex

if TYPE_CHECKING:
    from storage.partition_log import AbortReplay

SCAN_CHUNK = 1 << 20
MIN_HEADER = 17  # baseOffset, batchLength, partitionLeaderEpoch, magic: enough to size a batch
MIN_BATCH_LENGTH = 49
HEADER_SIZE = 61  # the whole batch header, up to and including recordsCount


def segment_filename(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class LogSegment:
    """A segment file plus its indexes and what this process knows of its contents.

    `size` and `next_offset` cover only batches this process has seen whole and valid;
    the file may be longer (another process appending, or a torn tail).
    """

    def __init__(self, directory: str, base_offset: int, *, writable: bool, index_interval_bytes: int = 4096):
        self.directory = directory
        self.base_offset = base_offset
        self.writable = writable
        self.index_interval_bytes = index_interval_bytes
        self.log_path = os.path.join(directory, segment_filename(base_offset, ".log"))
        flags = os.O_RDWR | os.O_APPEND if writable else os.O_RDONLY
        try:
            self.fd = os.open(self.log_path, flags)
        except FileNotFoundError:
            raise  # retention removed it after it was listed: the caller reloads its view
        except OSError as exc:
            raise KafkaStorageError(f"cannot open {self.log_path}: {exc.strerror}") from exc
        # Checked before the index objects create empty files, so recovery can tell a deleted
        # index (to be rebuilt) from an empty one.
        self.missing_indexes = not (os.path.exists(self._path(".index")) and os.path.exists(self._path(".timeindex")))
        # False when an index failed its checks and this process may not rebuild it (read-only):
        # lookups then scan the log instead of trusting it.
        self.indexes_trusted = True
        # False until the indexes had their full check; sealed segments get only a
        # constant-time check at open and the full one before their first lookup.
        self.indexes_verified = False
        self.offset_index = OffsetIndex(self._path(".index"), base_offset, writable=writable)
        self.time_index = TimeIndex(self._path(".timeindex"), base_offset, writable=writable)
        self.txn_index = TransactionIndex(self._path(".txnindex"), base_offset, writable=writable)
        # How many leading `.txnindex` entries this process checked against the log's markers:
        # the structural checks cannot see an entry moved to other plausible offsets, so the
        # partition log checks each one once, lazily, before a read_committed fetch uses it.
        self.txn_checked = 0
        # A read-only view's replacement for a `.txnindex` that failed that check (it may not
        # rewrite the file): the aborts replayed from the batches, kept up as the segment grows.
        self.abort_replay: AbortReplay | None = None
        self.size = 0
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.first_batch_timestamp = -1

    @classmethod
    def create(cls, directory: str, base_offset: int, *, index_interval_bytes: int = 4096) -> "LogSegment":
        """Create an empty segment whose directory entry is durable before anyone appends to it."""
        os.close(create_durably(os.path.join(directory, segment_filename(base_offset, ".log"))))
        return cls(directory, base_offset, writable=True, index_interval_bytes=index_interval_bytes)

    def _path(self, suffix: str) -> str:
        return os.path.join(self.directory, segment_filename(self.base_offset, suffix))

    # ---- reading --------------------------------------------------------------------------

    def file_size(self) -> int:
        return os.fstat(self.fd).st_size

    def read_bytes(self, position: int, length: int) -> bytes:
        try:
            return os.pread(self.fd, length, position)
        except OSError as exc:
            raise KafkaStorageError(f"read of {self.log_path} failed: {exc.strerror}") from exc

    def iter_batches(self, position: int = 0, end: int | None = None, *,
                     strict: bool = False) -> Iterator[tuple[int, RecordBatch]]:
        """Yield (file position, batch) for every complete, CRC-valid batch from `position`.

        Stops quietly at a partial tail (fewer than 17 bytes left, or a batch running past
        the end) unless `strict`: readers scanning a range already known to hold whole
        batches treat a partial batch there as the corruption it is. An invalid batch
        raises CorruptRecordError naming this file and the byte position; the caller
        decides whether that is a torn tail or corruption.
        """
        end = self.file_size() if end is None else end
        try:
            yield from self._iter_batches(position, end)
        except _PartialTail as tail:
            if strict:
                raise CorruptRecordError("batch runs past the end of the data", path=self.log_path,
                                         position=tail.position) from None

    def _iter_batches(self, position: int, end: int) -> Iterator[tuple[int, RecordBatch]]:
        while end - position >= MIN_HEADER:
            buf = self.read_bytes(position, min(SCAN_CHUNK, end - position))
            off = 0
            while len(buf) - off >= MIN_HEADER:
                size = self._size_at(buf, off, position + off)
                if off + size > len(buf):
                    break
                yield position + off, self._parse(buf, off, position + off)
                off += size
            if off == 0:
                size = self._size_at(buf, 0, position)
                if position + size > end:
                    raise _PartialTail(position)
                yield position, self._parse(self.read_bytes(position, size), 0, position)
                off = size
            position += off
        if position < end:
            raise _PartialTail(position)

    def _size_at(self, buf: bytes, off: int, abs_position: int) -> int:
        """Total size of the batch whose header starts at buf[off]; rejects impossible headers."""
        if buf[off + 16] != MAGIC and is_legacy_message(buf, off):
            raise legacy_refusal(buf[off + 16], self.log_path, abs_position)  # not a torn tail: refuse loudly
        length = int.from_bytes(buf[off + 8:off + 12], "big", signed=True)
        if length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"batch length {length} is below the minimum {MIN_BATCH_LENGTH}",
                                     path=self.log_path, position=abs_position)
        if buf[off + 16] != MAGIC:
            raise CorruptRecordError(f"unsupported magic {buf[off + 16]}", path=self.log_path,
                                     position=abs_position)
        return 12 + length

    def _parse(self, buf: bytes, off: int, abs_position: int) -> RecordBatch:
        try:
            return RecordBatch.parse(buf, off, path=self.log_path)
        except CorruptRecordError as exc:
            raise CorruptRecordError(_reason(exc), path=self.log_path, position=abs_position) from None

    def find_valid_batch_after(self, position: int) -> int | None:
        """Position of a CRC-valid batch starting after `position`, or None.

        Tells a torn tail (nothing valid follows) from corruption of acknowledged data
        (valid batches follow the bad bytes): only the first may be cut. The rest of the
        file is searched window by window, each candidate read whole only when its header
        is plausible.
        """
        end = self.file_size()
        start = position + 1
        while end - start >= 61:
            window = self.read_bytes(start, min(SCAN_CHUNK, end - start))
            for off in range(0, len(window) - 60):
                if window[off + 16] != MAGIC:
                    continue
                length = int.from_bytes(window[off + 8:off + 12], "big", signed=True)
                candidate = start + off
                if length < MIN_BATCH_LENGTH or candidate + 12 + length > end:
                    continue
                try:
                    RecordBatch.parse(self.read_bytes(candidate, 12 + length))
                except CorruptRecordError:
                    continue
                return candidate
            start += len(window) - 60
        return None

    def read_position(self, offset: int) -> int:
        """File position from which a forward scan finds `offset` (index lookup, no scan).

        A damaged index must not change what a reader sees (reliability rule 6): if the
        batch at the indexed position does not start at or before the indexed offset,
        scan the segment from its start instead.
        """
        if not self.indexes_trusted:
            return 0
        indexed_offset, position = self.offset_index.lookup(offset)
        if position == 0:
            return 0
        head = self.read_bytes(position, 17)
        if len(head) < 17 or head[16] != MAGIC or int.from_bytes(head[0:8], "big", signed=True) > indexed_offset:
            return 0
        return position

    def batch_at(self, offset: int, end: int) -> RecordBatch | None:
        """The CRC-checked batch holding `offset`, or None if no whole batch before byte `end` does.

        One offset-index lookup, then a hop from header to header (the index is sparse:
        at most index.interval.bytes of batches are skipped) and one read of the batch
        found: a check that must cost O(1) per offset, not a segment scan, uses this.
        Damaged bytes on the way raise CorruptRecordError, as any read of them does.
        """
        position = self.read_position(offset)
        while end - position >= HEADER_SIZE:
            head = self.read_bytes(position, HEADER_SIZE)
            if len(head) < HEADER_SIZE:
                return None
            size = self._size_at(head, 0, position)
            base = int.from_bytes(head[0:8], "big", signed=True)
            if base > offset or position + size > end:
                return None
            if base + int.from_bytes(head[23:27], "big", signed=True) >= offset:
                return self._parse(self.read_bytes(position, size), 0, position)
            position += size
        return None

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
        head = self.read_bytes(0, 61)
        if len(head) == 61 and head[16] == MAGIC:
            self.first_batch_timestamp = int.from_bytes(head[35:43], "big", signed=True)

    def scan_max_timestamp(self) -> int:
        """Largest batch maxTimestamp read from the batch headers themselves (no CRC, no records).

        Retention deletes data on this answer, so before deleting it does not trust the
        time index, which a crash or a bit flip could have cut short.
        """
        largest = -1
        position, end = 0, self.file_size()
        while end - position >= 61:
            buf = self.read_bytes(position, min(SCAN_CHUNK, end - position))
            off = 0
            while len(buf) - off >= 61:
                length = int.from_bytes(buf[off + 8:off + 12], "big", signed=True)
                if length < MIN_BATCH_LENGTH:
                    return largest
                largest = max(largest, int.from_bytes(buf[off + 35:off + 43], "big", signed=True))
                off += 12 + length
            position += off
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

        One offset-index entry at most per call (Kafka's leader rule), keyed by the chunk's
        last offset and its start position, when the bytes since the last indexed batch
        exceed index.interval.bytes. The caller fsyncs.
        """
        start = self.size
        write_all(self.fd, chunk)
        for _, last_offset, max_ts in batches:
            if self.first_batch_timestamp < 0:
                self.first_batch_timestamp = max_ts
            if max_ts > self.max_timestamp:
                self.max_timestamp = max_ts
                self.offset_of_max_timestamp = last_offset
        self.size = start + len(chunk)
        self.next_offset = batches[-1][1] + 1
        self._maybe_index(start, batches[-1][1])

    def _maybe_index(self, position: int, last_offset: int) -> None:
        last = self.offset_index.last_entry()
        since = position - (last[1] if last is not None else 0)
        if since > self.index_interval_bytes:
            try:
                self.offset_index.append(last_offset, position)
            except ValueError:
                return  # another writer indexed this range already
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)

    def truncate(self, position: int, next_offset: int) -> None:
        """Cut the log at `position` (a torn tail) and every index to the same offset."""
        try:
            os.ftruncate(self.fd, position)
        except OSError as exc:
            raise KafkaStorageError(f"cannot truncate {self.log_path}: {exc.strerror}") from exc
        fsync_fd(self.fd)
        self.offset_index.truncate_to(next_offset)
        self.time_index.truncate_to(next_offset)
        self.txn_index.truncate_to(next_offset)
        self.size = position
        self.next_offset = next_offset

    def sync(self) -> None:
        fsync_fd(self.fd, data_only=True)

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
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def delete_files(self) -> list[str]:
        """Paths of this segment's files, the `.log` first so a crash midway leaves only orphans."""
        return [self.log_path, self._path(".index"), self._path(".timeindex"), self._path(".txnindex")]



class _PartialTail(Exception):
    """The scan reached a batch that does not end inside the scanned range."""

    def __init__(self, position: int):
        super().__init__(position)
        self.position = position


def _reason(exc: CorruptRecordError) -> str:
    """The message of a codec error without its own location suffix."""
    text = str(exc)
    cut = text.find(" in ")
    return text[:cut] if cut > 0 else text
