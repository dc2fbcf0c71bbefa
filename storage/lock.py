"""Cross-process exclusive locks on lock files (flock), plus in-process thread safety.

The kernel releases an flock when its holder dies, so a process killed with SIGKILL
never leaves a lock behind (docs/reliability-scenarios.md scenario 40): there are no PID files.
flock belongs to an open file description, so one FileLock object per lock file per
process; the threading.RLock makes it re-entrant inside the process. `writer_lock_if_free`
is the other way to take a partition's lock: without waiting and without creating the file.

A FileLock's descriptor lives in the descriptor cache (storage/descriptor_cache.py): pinned
while the lock is held, so eviction never closes it then; idle, it may be closed and reopened.
That is safe only because these are flock locks, owned by the open file description: closing
another descriptor of the same file does not release them, as it would release a POSIX
fcntl/lockf lock. Keep it flock. Lock files, like every store file, are never opened through
a symbolic link (storage/safe_open.py).
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from storage.descriptor_cache import CachedFile
from storage.errors import KafkaStorageError
from storage.safe_open import open_no_follow


class FileLock:
    """An exclusive, re-entrant lock over `path`, created on first use."""

    def __init__(self, path: str):
        self.path = path
        self._file: CachedFile | None = None
        self._fd: int | None = None  # the pinned descriptor while the lock is held
        self._thread_lock = threading.RLock()
        self._depth = 0

    def acquire(self) -> FileLock:
        """Take the lock (waiting for it); also `with lock:`, without a wrapper's frame: every write takes
        it, a durable one-record send once per commit (issue 26)."""
        self._thread_lock.acquire()
        if self._depth:
            self._depth += 1
            return self
        try:
            if self._file is None:
                self._file = CachedFile(self.path, os.O_RDWR | os.O_CREAT)
            fd = self._file.pin()  # pinned while held: eviction never closes a held lock's descriptor
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except BaseException:
                self._file.unpin()
                raise
        except OSError as exc:
            self._thread_lock.release()
            raise KafkaStorageError(f"cannot lock {self.path}: {exc.strerror}") from exc
        except BaseException:
            self._thread_lock.release()
            raise
        self._fd = fd
        self._depth = 1
        return self

    def release(self, *_exc: object) -> None:
        """Give the lock back (the last release of a re-entrant hold unlocks the file); also `with`'s exit."""
        self._depth -= 1
        if self._depth == 0 and self._fd is not None and self._file is not None:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            finally:
                self._fd = None
                self._file.unpin()
        self._thread_lock.release()

    @property
    def held(self) -> bool:
        return self._depth > 0

    def close(self) -> None:
        with self._thread_lock:
            if self._file is not None:
                self._file.close()  # closing the descriptor drops a lock still held
                self._file = None
                self._fd = None
                self._depth = 0

    __enter__ = acquire
    __exit__ = release


@contextmanager
def writer_lock_if_free(lock_path: str) -> Iterator[bool]:
    """Take the partition's writer lock without waiting, on a descriptor of our own; yields whether it was free.

    For a reader that finds the high watermark behind the log end (storage/partition_log.py):
    when no writer holds the lock, the writer that left the tail unsynced is gone (or
    between two calls) and the reader may make it durable itself. Unlike `FileLock` it never
    creates the lock file, so a read-only view may use it. Never blocks: a reader may be asked for the HW while its
    process holds other partitions' locks. A lock file that does not exist means no writer
    ever opened the partition. The caller must not take the partition's own FileLock while
    this is held (flock is per open file description: it would wait on itself).
    """
    fd = _locked_if_free(lock_path)
    try:
        yield fd is not None
    finally:
        if fd is not None and fd >= 0:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def _locked_if_free(lock_path: str) -> int | None:
    """A descriptor holding the lock (-1: there is no lock file, so nobody to wait for), or None if it is held."""
    try:
        fd = open_no_follow(lock_path, os.O_RDONLY)
    except FileNotFoundError:
        return -1
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd
