"""FileRecords: the one reader of `.log` bytes (Kafka's FileRecords and its batch iterator).

Every walk over segment bytes goes through here: the log's reads and recovery scans
(storage.segment), the Spark executor's extents (storage.extent), the dump tool and the
integrity check (cli), and a Produce request's bytes before they are appended. So the
rules of the frame live in one place:

* a batch is yielded only when all of it lies before `end`; what follows the last whole
  batch is a *partial tail* - quiet by default (a torn write after a crash), an error
  with `strict` (a range already known to hold whole batches);
* bytes that cannot be a batch (batchLength below 49, a magic other than 2, a CRC
  mismatch when checked) raise CorruptRecordError naming the file and the byte;
* a whole pre-0.11 message (magic 0/1) is refused with UnsupportedForMessageFormatError,
  or yielded as a `LegacyMessage` when the caller reads that format (`legacy=True`);
* `next_valid_batch` finds the next CRC-valid batch after damage, and `judge_damage` is the
  one rule every view applies to bad bytes (docs/reliability-scenarios.md rule 7): a *torn
  tail* (the last segment, nothing valid after it: a write that never completed) is cut by a
  writer and simply not visible to a reader; anything else is *corruption* of acknowledged
  data, which every view reports where it lies and none may read past silently.

Reads are `os.pread` of 1 MiB chunks, parsed in place; a batch straddling a chunk
boundary starts the next chunk, one larger than a chunk is read alone. A FileRecords
may also wrap bytes already in memory (`FileRecords.in_memory`), which are walked in
place with the same rules. Every batch's `position` is its byte in the file.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Generator, Iterator
from typing import Literal, NamedTuple, overload

from storage.descriptor_cache import CachedFile
from storage.errors import CorruptRecordError, KafkaStorageError, UnsupportedForMessageFormatError
from storage.legacy_records import MIN_MESSAGE_SIZE, LegacyMessage, is_legacy_message, parse_legacy, refuse
from storage.records import (
    HEADER_SIZE,
    HEADER_SIZE_UP_TO_MAGIC,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    MIN_BATCH_LENGTH,
    BatchHeader,
    RecordBatch,
)

__all__ = ["SCAN_CHUNK", "Damage", "FileRecords"]

#: Bytes read per pread while walking: large enough that the syscall is noise, small
#: enough that a scan of a 1 GiB segment never holds more than this (plus one batch).
SCAN_CHUNK = 1 << 20

_LENGTH = struct.Struct(">i")
_BASE_OFFSET = struct.Struct(">q")
_TIMESTAMP = struct.Struct(">q")
_MAGIC_BYTE = bytes((MAGIC,))


class Damage(NamedTuple):
    """What bad bytes in a segment are: the verdict of `FileRecords.judge_damage`."""

    position: int  # where the whole batches stop: the first bad byte
    resume: int | None  # the first CRC-valid batch after it, None if none follows in the file
    last_segment: bool

    @property
    def torn_tail(self) -> bool:
        """A write that never completed: in the last segment, with nothing valid after it.

        Only this may be cut (by a writer holding the lock) or stop a reader quietly (it may
        be a write in flight). Bad bytes followed by a valid batch, or in a sealed segment,
        are corruption: no writer leaves them, and a view that stopped there would report a
        shorter log than was acknowledged.
        """
        return self.last_segment and self.resume is None

    def describe(self, what: str) -> str:
        """`what` (the reader's error, without its location), with what makes it corruption."""
        if self.resume is not None:
            return f"{what}; a valid batch follows at byte {self.resume}"
        return f"{what}, in a sealed segment"


class FileRecords:
    """Read-only access to the batches of one `.log` file (or of bytes already in memory).

    Built on a file the caller keeps (a segment's) or on one it opens itself (`open`,
    closed by `close`); either is a `CachedFile`, whose descriptor is pinned for each read
    (storage/descriptor_cache.py). It holds no cache and no position, so one instance serves
    any number of concurrent walks.
    """

    __slots__ = ("path", "_file", "_owns_file", "_data")
    path: str | None  # names the bytes in errors; None for anonymous in-memory bytes
    _file: CachedFile | None  # None over bytes in memory, or once closed
    _owns_file: bool
    _data: bytes | bytearray | memoryview | None  # the bytes in memory, or None to read from _file

    def __init__(self, path: str, file: CachedFile | None = None) -> None:
        """Wrap `file` (borrowed: `close` leaves it open) or, if None, open `path` read-only."""
        self.path = path
        self._data = None
        self._owns_file = file is None
        if file is None:
            try:
                file = CachedFile(path, os.O_RDONLY)
            except FileNotFoundError:
                raise  # retention removed it after it was listed: the caller decides what that means
            except OSError as exc:
                raise KafkaStorageError(f"cannot open {path}: {exc.strerror}") from exc
        self._file = file

    @classmethod
    def open(cls, path: str) -> FileRecords:
        """A reader owning its own read-only descriptor (close it, or use it as a context manager)."""
        return cls(path)

    @classmethod
    def in_memory(cls, data: bytes | bytearray | memoryview, path: str | None = None) -> FileRecords:
        """The same reader over bytes already in memory: a Produce request, a file read whole.

        `path` only names the bytes in errors.
        """
        records = object.__new__(cls)
        records.path = path
        records._file = None
        records._owns_file = False
        records._data = data
        return records

    def close(self) -> None:
        if self._owns_file and self._file is not None:
            self._file.close()
        self._file = None

    def __enter__(self) -> FileRecords:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @staticmethod
    def sole_batch(data: bytes | bytearray, *, verify_crc: bool = True) -> RecordBatch | None:
        """`data` parsed as the one batch it holds, when it holds exactly one well-framed magic-2 batch.

        The usual Produce request of a one-record durable send (issue 26): the same framing test and
        parse as `batches`' walk (`_walk`), without making a reader and a generator per request.
        None for any other shape (several batches, a legacy message, a bad frame, a partial batch):
        the caller then walks `in_memory(data).batches(...)`, which judges it as before.
        """
        if len(data) < HEADER_SIZE_UP_TO_MAGIC or data[MAGIC_OFFSET] != MAGIC:
            return None
        length = _LENGTH.unpack_from(data, LENGTH_OFFSET)[0]
        if length < MIN_BATCH_LENGTH or LOG_OVERHEAD + length != len(data):
            return None
        return RecordBatch.parse(data, 0, verify_crc=verify_crc)

    # ---- raw bytes -----------------------------------------------------------------------

    def size(self) -> int:
        """The file's length now (another process may be appending)."""
        if self._data is not None:
            return len(self._data)
        try:
            with self._opened as fd:
                return os.fstat(fd).st_size
        except OSError as exc:
            raise KafkaStorageError(f"cannot stat {self.path}: {exc.strerror}") from exc

    def size_and_links(self) -> tuple[int, int]:
        """The file's length now and its link count, from one fstat (in memory: linked, once).

        A writer's catch-up takes both at once: the length says whether another process appended,
        the links whether the file was deleted under the view (PartitionLog._check_not_deleted).
        """
        if self._data is not None:
            return len(self._data), 1
        try:
            with self._opened as fd:
                st = os.fstat(fd)
        except OSError as exc:
            raise KafkaStorageError(f"cannot stat {self.path}: {exc.strerror}") from exc
        return st.st_size, st.st_nlink

    def read(self, position: int, length: int) -> bytes:
        """Up to `length` bytes from `position`; fewer only where the file ends."""
        if position < 0 or length < 0:
            raise ValueError(f"read of {length} bytes at byte {position} of {self.path}")
        if self._data is not None:
            return bytes(self._data[position : position + length])
        file = self._file
        if file is None:
            raise KafkaStorageError(f"{self.path} is closed")
        try:
            with file as fd:
                return os.pread(fd, length, position)
        except OSError as exc:
            raise KafkaStorageError(f"read of {self.path} failed: {exc.strerror}") from exc

    @property
    def _opened(self) -> CachedFile:
        if self._file is None:
            raise KafkaStorageError(f"{self.path} is closed")
        return self._file

    # ---- batches -------------------------------------------------------------------------

    @overload
    def batches(
        self,
        start: int = 0,
        end: int | None = None,
        *,
        verify_crc: bool = True,
        strict: bool = False,
        legacy: Literal[False] = False,
    ) -> Iterator[RecordBatch]: ...

    @overload
    def batches(
        self, start: int = 0, end: int | None = None, *, verify_crc: bool = True, strict: bool = False, legacy: bool
    ) -> Iterator[RecordBatch | LegacyMessage]: ...

    def batches(
        self,
        start: int = 0,
        end: int | None = None,
        *,
        verify_crc: bool = True,
        strict: bool = False,
        legacy: bool = False,
    ) -> Iterator[RecordBatch | LegacyMessage]:
        """Every whole batch in [start, end) in file order; `end` defaults to the file's size now.

        `verify_crc=False` skips the CRC (the dump tool, which reports `isvalid` per batch
        with `RecordBatch.is_valid`). A partial tail ends the walk quietly unless `strict`,
        which raises CorruptRecordError at its first byte; so does a file shorter than
        an explicit `end` under `strict`. `legacy=True` yields a whole magic 0/1 message as
        a `storage.legacy_records.LegacyMessage` instead of refusing it.
        """
        end = self._end(start, end)
        path = self.path
        if self._data is not None:
            data = self._data
            position = yield from _walk(data, start, min(end, len(data)), 0, path, verify_crc, legacy)
        else:
            position = start
            while end - position >= HEADER_SIZE_UP_TO_MAGIC:
                chunk = self.read(position, min(SCAN_CHUNK, end - position))
                used = yield from _walk(chunk, 0, len(chunk), position, path, verify_crc, legacy)
                if used == 0:
                    # The first batch does not fit the chunk: read it alone, if the range holds it.
                    if len(chunk) < HEADER_SIZE_UP_TO_MAGIC:
                        break  # the file ends before `end`
                    size = LOG_OVERHEAD + _LENGTH.unpack_from(chunk, LENGTH_OFFSET)[0]
                    if position + size > end:
                        break
                    whole = self.read(position, size)
                    used = yield from _walk(whole, 0, len(whole), position, path, verify_crc, legacy)
                    if used == 0:
                        break  # the file ends inside it
                position += used
        if strict and position < end:
            raise CorruptRecordError("batch runs past the end of the data", path=path, position=position)

    def batch_at(self, position: int, end: int | None = None, *, verify_crc: bool = True) -> RecordBatch | None:
        """The batch starting at `position`, or None when it does not end before `end` (a partial tail).

        Two reads (header, then the batch); damage raises as in `batches`.
        """
        header = self.header_at(position, end)
        if header is None:
            return None
        end = self._end(position, end)
        size = header.size
        if position + size > end:
            return None
        buf = self.read(position, size)
        if len(buf) < size:
            return None
        return RecordBatch.parse(buf, 0, path=self.path, verify_crc=verify_crc, origin=position)

    def base_offset_at(self, position: int) -> int | None:
        """The base offset of a magic-2 batch starting at `position`, or None if none does.

        Reads only the 17 bytes that frame a batch: an index lookup checks its position
        with this on every open, so it must not cost a whole header.
        """
        head = self.read(position, HEADER_SIZE_UP_TO_MAGIC)
        if len(head) < HEADER_SIZE_UP_TO_MAGIC or head[MAGIC_OFFSET] != MAGIC:
            return None
        return _BASE_OFFSET.unpack_from(head, 0)[0]

    def header_at(self, position: int, end: int | None = None) -> BatchHeader | None:
        """The 61-byte header at `position` (no CRC, records unread), or None if fewer bytes remain before `end`.

        A whole legacy message there is refused (UnsupportedForMessageFormatError); other
        bytes that cannot start a batch raise CorruptRecordError.
        """
        end = self._end(position, end)
        if end - position < HEADER_SIZE:
            return None
        head = self.read(position, HEADER_SIZE)
        if len(head) < HEADER_SIZE:
            return None
        if head[MAGIC_OFFSET] != MAGIC:
            _check_frame(head, 0, len(head), position, self.path, legacy=False)
        return BatchHeader.parse(head, 0, path=self.path, origin=position)

    def headers(self, start: int = 0, end: int | None = None, *, chunk_size: int = SCAN_CHUNK) -> Iterator[BatchHeader]:
        """The header of every whole batch in [start, end), read in chunks: no CRC, no records.

        For walks that need only the frame (retention's maxTimestamp scan, a read's hop to
        the batch holding an offset); stops quietly at a partial tail, raises at bytes that
        cannot be a batch. `chunk_size` is the first read's size, doubling per read up to
        SCAN_CHUNK: a walk that expects to stop soon reads little.
        """
        end = self._end(start, end)
        position = start
        size = max(chunk_size, HEADER_SIZE)
        while end - position >= HEADER_SIZE:
            chunk = self.read(position, min(size, end - position))
            size = min(size * 2, SCAN_CHUNK)
            off = 0
            while len(chunk) - off >= HEADER_SIZE:
                if chunk[off + MAGIC_OFFSET] != MAGIC:
                    _check_frame(chunk, off, len(chunk), position, self.path, legacy=False)
                header = BatchHeader.parse(chunk, off, path=self.path, origin=position)
                if position + off + header.size > end:
                    return
                yield header
                off += header.size
            if off == 0:
                return  # fewer than 61 bytes left in the file
            position += off

    def largest_timestamp_after(self, start: int = 0, end: int | None = None) -> int:
        """Largest maxTimestamp of the whole batches in [start, end), from their headers alone; -1 if none.

        Kafka's largestTimestampAfter: retention decides on it without trusting the time
        index. Reads two fields per batch and builds nothing, so a scan of a sealed segment
        costs what the old hand-written loop did. Damage raises as in `batches`.
        """
        end = self._end(start, end)
        largest = -1
        unpack_length = _LENGTH.unpack_from
        unpack_timestamp = _TIMESTAMP.unpack_from
        position = start
        while end - position >= HEADER_SIZE:
            chunk = self.read(position, min(SCAN_CHUNK, end - position))
            off, limit = 0, len(chunk)
            while limit - off >= HEADER_SIZE:
                length = unpack_length(chunk, off + LENGTH_OFFSET)[0]
                if chunk[off + MAGIC_OFFSET] != MAGIC or length < MIN_BATCH_LENGTH:
                    _check_frame(chunk, off, limit, position, self.path, legacy=False)
                    return largest  # a legacy-looking frame that runs past the data: a partial tail
                if position + off + LOG_OVERHEAD + length > end:
                    return largest
                timestamp = unpack_timestamp(chunk, off + MAX_TIMESTAMP_OFFSET)[0]
                if timestamp > largest:
                    largest = timestamp
                off += LOG_OVERHEAD + length
            if off == 0:
                break  # fewer than 61 bytes left in the file
            position += off
        return largest

    def next_valid_batch(self, after: int, end: int | None = None) -> int | None:
        """Position of the first CRC-valid batch starting after byte `after` and ending before `end`, or None.

        The resync scan after damage: it tells a torn tail (nothing valid follows, so it
        may be cut) from corruption of acknowledged data (valid batches follow). Candidates
        are found with a C-level search for the magic byte; each is read whole and
        CRC-checked only when its frame is plausible.
        """
        end = self._end(max(after + 1, 0), end)
        start = max(after + 1, 0)
        step = HEADER_SIZE - 1  # a window's last candidate needs its whole header inside it
        while end - start >= HEADER_SIZE:
            window = self.read(start, min(SCAN_CHUNK, end - start))
            if len(window) < HEADER_SIZE:
                return None
            last = len(window) - HEADER_SIZE  # last candidate offset in this window
            i = window.find(_MAGIC_BYTE, MAGIC_OFFSET, last + MAGIC_OFFSET + 1)
            while i >= 0:
                off = i - MAGIC_OFFSET
                candidate = start + off
                length = _LENGTH.unpack_from(window, off + LENGTH_OFFSET)[0]
                if length >= MIN_BATCH_LENGTH and candidate + LOG_OVERHEAD + length <= end:
                    if off + LOG_OVERHEAD + length <= len(window):
                        buf, at = window, off
                    else:
                        buf, at = self.read(candidate, LOG_OVERHEAD + length), 0
                    try:
                        RecordBatch.parse(buf, at, path=self.path)
                        return candidate
                    except CorruptRecordError:
                        pass
                i = window.find(_MAGIC_BYTE, i + 1, last + MAGIC_OFFSET + 1)
            start += len(window) - step
        return None

    def judge_damage(self, position: int, *, last_segment: bool) -> Damage:
        """The one rule for bad bytes at `position` (docs/reliability-scenarios.md rule 7): see `Damage`.

        Recovery, the catch-up of every view (read-only or writable) and `txlog verify`
        all ask this, so they cannot disagree on where a log ends.
        """
        return Damage(position, self.next_valid_batch(position), last_segment)

    def whole_batch_at(self, position: int) -> bool:
        """Whether a whole, CRC-valid batch starts at `position` now.

        A view without the writer lock re-reads bad bytes once before calling them damage:
        a writer that cut a torn tail and appended since they were read put a batch there.
        """
        try:
            return self.batch_at(position) is not None
        except (CorruptRecordError, UnsupportedForMessageFormatError):
            return False

    # ---- internals -----------------------------------------------------------------------

    def _end(self, start: int, end: int | None) -> int:
        if start < 0:
            raise ValueError(f"negative byte position {start} in {self.path}")
        if end is None:
            return self.size()
        if end < 0:
            raise ValueError(f"negative end position {end} in {self.path}")
        return end

    def __repr__(self) -> str:
        return f"FileRecords({self.path!r})"


def _walk(
    buf, off: int, limit: int, origin: int, path: str | None, verify_crc: bool, legacy: bool
) -> Generator[RecordBatch | LegacyMessage, None, int]:
    """Yield the whole batches of buf[off:limit]; return the offset where the next one does not fit.

    The hot loop of every log read: one length unpack, one magic test and one parse per
    batch. Anything but a well-framed magic-2 batch takes the slow path (`_check_frame`).
    """
    parse = RecordBatch.parse
    unpack_length = _LENGTH.unpack_from
    while limit - off >= HEADER_SIZE_UP_TO_MAGIC:
        length = unpack_length(buf, off + LENGTH_OFFSET)[0]
        if buf[off + MAGIC_OFFSET] != MAGIC or length < MIN_BATCH_LENGTH:
            fits = _check_frame(buf, off, limit, origin, path, legacy)
            if not fits:
                return off
            # a whole legacy message the caller reads
            message = parse_legacy(buf, off, path=path, origin=origin)
            yield message
            off += message.size
            continue
        size = LOG_OVERHEAD + length
        if off + size > limit:
            return off
        yield parse(buf, off, path=path, verify_crc=verify_crc, origin=origin)
        off += size
    return off


def _check_frame(buf, off: int, limit: int, origin: int, path: str | None, legacy: bool) -> bool:
    """Judge bytes at buf[off] that are not a well-framed magic-2 batch.

    Returns False when they may be a legacy message that does not end inside `buf` (the
    caller reads further or stops at a partial tail), True for a whole legacy message
    the caller reads (`legacy`); raises otherwise - UnsupportedForMessageFormatError for a
    whole legacy message the caller does not read, CorruptRecordError for anything else.
    """
    magic = buf[off + MAGIC_OFFSET]
    length = _LENGTH.unpack_from(buf, off + LENGTH_OFFSET)[0]
    if magic in MIN_MESSAGE_SIZE and length >= MIN_MESSAGE_SIZE[magic]:
        if off + LOG_OVERHEAD + length > limit:
            return False
        if is_legacy_message(buf[:limit] if limit < len(buf) else buf, off):
            if not legacy:
                raise refuse(magic, path, origin + off)  # not a torn tail: refuse loudly
            return True
    if length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"batch length {length} is below the minimum {MIN_BATCH_LENGTH}", path=path, position=origin + off
        )
    raise CorruptRecordError(f"unsupported magic {magic}", path=path, position=origin + off)
