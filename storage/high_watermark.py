"""The partition's high watermark file: where its log is known to be fdatasync'ed (docs/DESIGN.md §3).

Kafka's high watermark is the offset below which every replica has the data; readers
(read_uncommitted) may not pass it, read_committed stops at min(LSO, HW). With one copy on one
disk the same role is played by durability: the HW is the offset below which the partition's
log is known to be fdatasync'ed, so no reader ever sees a record that a power loss can take
away. Appends that skip their fdatasync (a transaction's data, acks=1) leave the HW behind
until a sync catches it up.

The value lives in a small file per partition directory, written in place with one pwrite
after each fdatasync and never fsynced itself: it is a hint. A power loss can only lose an
update (the HW it held was true when written, since the data was synced first), and
recovery at open re-derives it (sync, then HW = log end). Readers in other processes read it
with one pread. Layout, 14 bytes, big-endian: int16 version (0), int64 HW, uint32 CRC-32C of
the 10 bytes before it; a short, unknown or damaged file reads as `UNREADABLE`.

Stores written before this file existed, and real Kafka log directories, have none: their
HW is the log end (every append of the old code was fsynced; Kafka's HW is not kept here).
"""

from __future__ import annotations

import os

import storage._native as _native
from storage.descriptor_cache import CachedFile
from storage.errors import KafkaStorageError
from storage.log_files import HIGH_WATERMARK_FILE

__all__ = ["HIGH_WATERMARK_FILE", "UNREADABLE", "HighWatermarkFile", "decode", "encode"]

#: What `read()` answers for a file that exists but does not hold a valid value (never a real HW, which is ≥ 0).
UNREADABLE = -1

_SIZE = 14  # the layout above; its encoding lives once, in storage/native/src/high_watermark.rs


def encode(high_watermark: int) -> bytes:
    """The file's 14 bytes for `high_watermark` (the quiet append's pwrite encodes with the same code)."""
    return _native.encode_high_watermark(high_watermark)


def decode(data: bytes) -> int:
    """The HW the bytes hold, or UNREADABLE (short, another version, a bad CRC, a negative value)."""
    return _native.decode_high_watermark(data)


class HighWatermarkFile:
    """One partition's HW file, opened lazily (a reader may start before any writer created it)."""

    def __init__(self, directory: str, *, writable: bool):
        self.path = os.path.join(directory, HIGH_WATERMARK_FILE)
        self.writable = writable
        self._file: CachedFile | None = None

    def _open(self) -> CachedFile | None:
        """The file, opened now if need be; None when it does not exist (and may not be created).

        Never through a link (a linked HW file had its target overwritten: storage/safe_open.py),
        and through the descriptor cache, so an idle partition holds no descriptor.
        """
        if self._file is None:
            try:
                if self.writable:
                    self._file = CachedFile(self.path, os.O_RDWR | os.O_CREAT)
                else:
                    self._file = CachedFile(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise KafkaStorageError(f"cannot open {self.path}: {exc.strerror}") from exc
        return self._file

    def read(self) -> int | None:
        """The stored HW; None when there is no file (a store older than it, a Kafka dir); UNREADABLE if damaged."""
        file = self._open_existing()
        if file is None:
            return None
        try:
            with file as fd:
                data = os.pread(fd, _SIZE, 0)
        except OSError:
            return UNREADABLE  # e.g. EIO: as good as damaged, and the next sync rewrites it
        return decode(data)

    def _open_existing(self) -> CachedFile | None:
        """Like `_open`, but a writable view does not create the file merely to read it."""
        if self._file is None and self.writable and not os.path.lexists(self.path):
            return None
        return self._open()

    def publish(self, high_watermark: int) -> None:
        """Store `high_watermark` with one pwrite, no fsync (a hint: recovery re-derives it).

        Called only after the log up to it was fdatasync'ed. A failure is not the append's
        failure (its data is durable): the HW file then lags, and readers see less, never more.
        """
        file = self.opened()
        if file is None:
            return
        data = encode(high_watermark)
        try:
            with file as fd:
                os.pwrite(fd, data, 0)
        except OSError:
            pass  # e.g. ENOSPC on the first write: the readers' view lags until the next publish

    def opened(self) -> CachedFile | None:
        """The file, opened once (every durable append publishes); None when it may not be created."""
        return self._file or self._open()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
