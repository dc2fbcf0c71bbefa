"""A bound on how many store files a process keeps open, whatever the partition count (docs/DESIGN.md §3).

Every partition holds a `.log`, three indexes, a high-watermark file and a lock file, per
segment for the first four: held open for the life of the view, 10,000 partitions would
need 60,000 descriptors, and `ulimit -n` is usually 1024 (issue 23, item 6). Kafka raises
its OS limit; txlog runs under its user's. So these files are `CachedFile`s: a descriptor
that is open while in use and that the process-wide LRU (`CACHE`) may close when idle, to be
reopened by path on the next use. The limit defaults to a quarter of RLIMIT_NOFILE's soft
value (256 under the usual 1024), clamped to [16, 1024]; `TXLOG_MAX_OPEN_FILES` or
`set_limit` set it.

Rules that keep this correct:

* A descriptor is *pinned* while a syscall uses it (`with cached as fd:`); eviction never
  closes a pinned one, so no thread ever uses a number that was closed and reused. The
  limit is soft: when more than it are pinned at once, the excess closes as they unpin.
* Lock files are safe to evict while unlocked, and a held lock is pinned (storage/lock.py):
  the locks are flock(2), which belong to the open file description, so closing some other
  descriptor of the same file never drops them (POSIX fcntl locks would be dropped by any
  close in the process: txlog does not use them).
* A reopen checks that the path still names the same file (device and inode): a file that
  was removed or replaced meanwhile (a deleted topic recreated, a store deleted under a
  running process) is a KafkaStorageError, never a silent switch to another file. A
  descriptor held open across such a change used to keep reading (and writing) the old
  file; under eviction pressure the view now fails loudly instead.
* Opens go through storage/safe_open.py (no symbolic links); an EMFILE at open closes every
  idle descriptor and tries once more.
"""

from __future__ import annotations

import errno
import os
import resource
import threading
from collections import OrderedDict

from storage.errors import KafkaStorageError
from storage.safe_open import open_no_follow

__all__ = ["CACHE", "LIMIT_ENV", "CachedFile", "DescriptorCache", "default_limit", "set_limit"]

LIMIT_ENV = "TXLOG_MAX_OPEN_FILES"
_MIN_LIMIT = 16
_MAX_DEFAULT = 1024


def default_limit() -> int:
    """`TXLOG_MAX_OPEN_FILES` if set, else a quarter of the soft RLIMIT_NOFILE, clamped to [16, 1024]."""
    configured = os.environ.get(LIMIT_ENV)
    if configured:
        try:
            return max(_MIN_LIMIT, int(configured))
        except ValueError:
            raise KafkaStorageError(f"{LIMIT_ENV}={configured!r} is not an integer") from None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return _MAX_DEFAULT
    return min(_MAX_DEFAULT, max(_MIN_LIMIT, soft // 4))


class DescriptorCache:
    """The LRU of idle descriptors; one per process (`CACHE`) so the bound is the process's."""

    def __init__(self, limit: int | None = None):
        self._mutex = threading.Lock()
        self._idle: OrderedDict[CachedFile, None] = OrderedDict()  # open and unpinned, least recent first
        self._open = 0  # descriptors open in total, pinned or idle
        self.limit = default_limit() if limit is None else limit

    @property
    def open_count(self) -> int:
        """How many descriptors the cache holds open now (pinned and idle)."""
        return self._open

    def set_limit(self, limit: int) -> None:
        """Change the bound; idle descriptors over it close now."""
        if limit < 1:
            raise ValueError(f"the open-file limit must be positive, got {limit}")
        with self._mutex:
            self.limit = limit
            self._evict_over_limit()

    def pin(self, cached: CachedFile) -> int:
        """The open descriptor of `cached` (reopened if it was evicted), safe from eviction until `unpin`."""
        with self._mutex:
            if cached.fd is None:
                if cached.closed:
                    raise KafkaStorageError(f"{cached.path} is closed")
                cached.fd = self._reopen(cached)
                self._open += 1
            elif cached.pins == 0:
                del self._idle[cached]
            cached.pins += 1
            return cached.fd

    def unpin(self, cached: CachedFile) -> None:
        with self._mutex:
            cached.pins -= 1
            if cached.pins == 0 and cached.fd is not None:
                self._idle[cached] = None
                self._evict_over_limit()

    def adopt(self, cached: CachedFile) -> None:
        """Count a descriptor just opened for `cached` as idle (evicting others over the limit)."""
        with self._mutex:
            self._open += 1
            self._idle[cached] = None
            self._evict_over_limit()

    def release(self, cached: CachedFile) -> None:
        """Close `cached`'s descriptor for good (its owner is done with the file)."""
        with self._mutex:
            cached.closed = True
            if cached.fd is not None:
                self._idle.pop(cached, None)
                self._close(cached)

    def open_file(self, path: str, flags: int, mode: int) -> int:
        """open_no_follow, closing every idle descriptor and trying once more on EMFILE."""
        try:
            return open_no_follow(path, flags, mode)
        except OSError as exc:
            if exc.errno != errno.EMFILE:
                raise
        with self._mutex:
            while self._idle:
                self._close(self._idle.popitem(last=False)[0])
        return open_no_follow(path, flags, mode)

    def _reopen(self, cached: CachedFile) -> int:
        """Open an evicted file again (the mutex is held), refusing one that is no longer the same file."""
        try:
            fd = open_no_follow(cached.path, cached.flags & ~os.O_CREAT)
            if _identity(fd) == cached.identity:
                return fd
            os.close(fd)
            what = "was replaced by another file"
        except FileNotFoundError:
            what = "was removed"
        except OSError as exc:
            if exc.errno != errno.EMFILE or not self._idle:
                raise KafkaStorageError(f"cannot reopen {cached.path}: {exc.strerror}") from exc
            while self._idle:
                self._close(self._idle.popitem(last=False)[0])
            return self._reopen(cached)
        raise KafkaStorageError(f"{cached.path} {what} while this process had it open; reopen the store")

    def _evict_over_limit(self) -> None:
        while self._open > self.limit and self._idle:
            self._close(self._idle.popitem(last=False)[0])

    def _close(self, cached: CachedFile) -> None:
        fd, cached.fd = cached.fd, None
        self._open -= 1
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass  # e.g. EIO reported at close: the data's durability is fsync's business, checked there


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


class CachedFile:
    """One store file whose descriptor the cache may close while idle; `with cached as fd:` to use it.

    Opened at construction (so a missing file or a link is reported where it was before);
    `close()` ends it. The same object may be pinned by several threads at once.
    """

    __slots__ = ("path", "flags", "fd", "pins", "identity", "closed", "_cache")

    def __init__(
        self, path: str, flags: int, *, mode: int = 0o644, fd: int | None = None, cache: DescriptorCache | None = None
    ):
        """Open `path` with `flags` (through the no-link rule), or adopt `fd`, already open on it."""
        self.path = path
        self.flags = flags
        self.pins = 0
        self.closed = False
        self._cache = CACHE if cache is None else cache
        if fd is None:
            fd = self._cache.open_file(path, flags, mode)
        try:
            self.identity = _identity(fd)
        except OSError:
            os.close(fd)
            raise
        self.fd: int | None = fd
        self._cache.adopt(self)

    def __enter__(self) -> int:
        return self._cache.pin(self)

    def __exit__(self, *exc: object) -> None:
        self._cache.unpin(self)

    def pin(self) -> int:
        """The descriptor, held open until `unpin` (for a lock held across calls)."""
        return self._cache.pin(self)

    def unpin(self) -> None:
        self._cache.unpin(self)

    def close(self) -> None:
        self._cache.release(self)


def set_limit(limit: int) -> None:
    """Bound the store files this process keeps open (the default: `default_limit()`)."""
    CACHE.set_limit(limit)


CACHE = DescriptorCache()
