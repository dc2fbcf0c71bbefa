"""A bound on how many store files a process keeps open, whatever the partition count (docs/DESIGN.md §3).

Every partition holds a `.log`, three indexes, a high-watermark file and a lock file, per
segment for the first four: held open for the life of the view, 10,000 partitions would
need 60,000 descriptors, and `ulimit -n` is usually 1024 (issue 23, item 6). Kafka raises
its OS limit; txlog runs under its user's. So these files are `CachedFile`s: a descriptor
that is open while in use and that the process-wide cache (`CACHE`, an LRU approximated by
CLOCK) may close when idle, to be reopened by path on the next use. The limit defaults to a
quarter of RLIMIT_NOFILE's soft value (256 under the usual 1024), clamped to [16, 1024];
`TXLOG_MAX_OPEN_FILES` or `set_limit` set it.

Rules that keep this correct:

* A descriptor is *pinned* while a syscall uses it (`with cached as fd:`); eviction never
  closes a pinned one, so no thread ever uses a number that was closed and reused. The
  limit is soft: when more than it are pinned at once, the excess closes as they unpin.
  A pin takes no lock (it is on every read and append: the hot path must not pay for the
  cache): under the GIL a list append and an attribute load are each atomic, so a pin
  announces itself (appends to `pins`) before it loads `fd`, and an eviction hides `fd`
  (sets None) before it looks at `pins`. Either the eviction sees the pin and puts `fd`
  back, or the pin sees None and takes the slow path, which waits for the cache's mutex.
* Lock files are safe to evict while unlocked, and a held lock is pinned (storage/lock.py):
  the locks are flock(2), which belong to the open file description, so closing some other
  descriptor of the same file never drops them (POSIX fcntl locks would be dropped by any
  close in the process: txlog does not use them).
* A reopen checks that the path still names the same file (device and inode): a file that
  was removed or replaced meanwhile (a deleted topic recreated, a store deleted under a
  running process) is a KafkaStorageError, never a silent switch to another file. A
  descriptor held open across such a change used to keep reading (and writing) the old
  file; under eviction pressure the view now fails loudly instead. Device and inode are not
  enough once the descriptor is closed: the file may then be unlinked and its inode number
  given to the next file made (ext4 does so at once; a cleaner's next segment under the same
  name was taken for the evicted one). So an eviction also notes the inode's generation
  (FS_IOC_GETVERSION: ext4, XFS, btrfs number each use of an inode), and a reopen compares
  it too. Where the file system has none (tmpfs, whose inode numbers only grow), device and
  inode stay the check.
* Opens go through storage/safe_open.py (no symbolic links); an EMFILE at open closes every
  idle descriptor and tries once more.
"""

from __future__ import annotations

import errno
import fcntl
import os
import resource
import struct
import sys
import threading
from collections import OrderedDict

from storage.errors import FileReplacedError, KafkaStorageError
from storage.safe_open import open_no_follow

__all__ = [
    "CACHE",
    "LIMIT_ENV",
    "CachedFile",
    "DescriptorCache",
    "default_limit",
    "file_identity",
    "inode_generation",
    "set_limit",
]

LIMIT_ENV = "TXLOG_MAX_OPEN_FILES"
_MIN_LIMIT = 16
_MAX_DEFAULT = 1024
# Linux's _IOR('v', 1, long): the inode's generation, which the kernel writes as an int.
_FS_IOC_GETVERSION = 0x80007601 | struct.calcsize("l") << 16


def default_limit() -> int:
    """`TXLOG_MAX_OPEN_FILES` if set (at least 16), else a quarter of the soft RLIMIT_NOFILE, clamped to [16, 1024].

    An unusable value raises KafkaStorageError.
    """
    configured = os.environ.get(LIMIT_ENV)
    if configured:
        try:
            return max(_MIN_LIMIT, int(configured))
        except ValueError:
            raise KafkaStorageError(f"{LIMIT_ENV}={configured!r} is not a number of files") from None
    return _from_rlimit()


def _from_rlimit() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return _MAX_DEFAULT
    return min(_MAX_DEFAULT, max(_MIN_LIMIT, soft // 4))


class DescriptorCache:
    """Every open `CachedFile` descriptor in a CLOCK (second-chance) order; one per process (`CACHE`).

    CLOCK rather than a strict LRU keeps a use cheap: a pin appends to the file's `pins` and
    sets its `used` flag, without a lock, and only an eviction (under `mutex`) reorders.
    Eviction closes the oldest descriptor that is neither pinned nor used since the hand last
    passed it.
    """

    def __init__(self, limit: int | None = None):
        self.mutex = threading.Lock()
        self._files: OrderedDict[CachedFile, None] = OrderedDict()  # every open one, oldest first
        # Built at import: a bad TXLOG_MAX_OPEN_FILES is raised by the first open instead (an
        # import error would be a traceback, not the CLI's one Error: line).
        self.config_error: KafkaStorageError | None = None
        if limit is None:
            try:
                limit = default_limit()
            except KafkaStorageError as exc:
                self.config_error, limit = exc, _from_rlimit()
        self.limit = limit

    @property
    def open_count(self) -> int:
        """How many descriptors the cache holds open now (pinned and idle)."""
        return len(self._files)

    def set_limit(self, limit: int) -> None:
        """Change the bound; idle descriptors over it close now."""
        if limit < 1:
            raise ValueError(f"the open-file limit must be positive, got {limit}")
        with self.mutex:
            self.limit = limit
            self.evict_over_limit()

    def add(self, cached: CachedFile) -> None:
        """Count a descriptor just opened for `cached` (the mutex is held; the caller evicts)."""
        cached.used = True
        self._files[cached] = None

    def release(self, cached: CachedFile) -> None:
        """Close `cached`'s descriptor for good (its owner is done with the file)."""
        with self.mutex:
            cached.closed = True
            if cached.fd is not None:
                del self._files[cached]
                self._close(cached)

    def open_file(self, path: str, flags: int, mode: int) -> int:
        """open_no_follow, closing every idle descriptor and trying once more on EMFILE."""
        try:
            return open_no_follow(path, flags, mode)
        except OSError as exc:
            if exc.errno != errno.EMFILE:
                raise
        with self.mutex:
            self._close_idle()
        return open_no_follow(path, flags, mode)

    def reopen(self, cached: CachedFile) -> int:
        """Open an evicted file again (the mutex is held), refusing one that is no longer the same file."""
        if cached.closed:
            raise KafkaStorageError(f"{cached.path} is closed")
        try:
            fd = open_no_follow(cached.path, cached.flags & ~os.O_CREAT)
        except FileNotFoundError:
            raise FileReplacedError(f"{cached.path} was removed while this process had it open") from None
        except OSError as exc:
            if exc.errno != errno.EMFILE:
                raise KafkaStorageError(f"cannot reopen {cached.path}: {exc.strerror}") from exc
            self._close_idle()
            try:
                fd = open_no_follow(cached.path, cached.flags & ~os.O_CREAT)
            except OSError as again:
                raise KafkaStorageError(f"cannot reopen {cached.path}: {again.strerror}") from again
        if _identity(fd) != cached.identity or (
            cached.generation is not None and inode_generation(fd) != cached.generation
        ):
            os.close(fd)
            raise FileReplacedError(f"{cached.path} was replaced by another file while this process had it open")
        cached.fd = fd
        self.add(cached)
        return fd

    def evict_over_limit(self) -> None:
        """Close idle descriptors, oldest first, until the bound holds (the mutex is held).

        Two sweeps at most: the first clears every `used` flag, the second finds the victims;
        what is pinned stays, so the bound is soft while more than it are in use.
        """
        files = self._files
        budget = 2 * len(files)
        while len(files) > self.limit and budget > 0:
            budget -= 1
            cached = next(iter(files))
            if cached.pins or cached.used:
                cached.used = False
                files.move_to_end(cached)
                continue
            fd, cached.fd = cached.fd, None  # hide it first, then look for a pin announced meanwhile
            if cached.pins:
                cached.fd = fd
                files.move_to_end(cached)
                continue
            del files[cached]
            _evicted(cached, fd)

    def pin_slow(self, cached: CachedFile) -> int:
        """A pin that found no descriptor (evicted, or an eviction at work): wait for the mutex, reopen if need be."""
        with self.mutex:
            fd = cached.fd
            if fd is None:
                fd = self.reopen(cached)
                self.evict_over_limit()
            return fd

    def _close_idle(self) -> None:
        """On EMFILE: close every descriptor not pinned (the mutex is held)."""
        for cached in list(self._files):
            fd, cached.fd = cached.fd, None
            if cached.pins:
                cached.fd = fd
            else:
                del self._files[cached]
                _evicted(cached, fd)

    @staticmethod
    def _close(cached: CachedFile) -> None:
        fd, cached.fd = cached.fd, None
        _close_quietly(fd)


def _close_quietly(fd: int | None) -> None:
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass  # e.g. EIO reported at close: the data's durability is fsync's business, checked there


def _evicted(cached: CachedFile, fd: int | None) -> None:
    """Close an evicted descriptor, noting the generation of its inode first (for `reopen`'s check)."""
    if fd is not None and cached.generation is None:
        cached.generation = inode_generation(fd)
    _close_quietly(fd)


def file_identity(path: str) -> tuple[int, int, int | None]:
    """(device, inode, generation) of the file or directory `path` names: which one it is, even after
    another of its name came and went (see the module's docstring). FileNotFoundError when none does."""
    fd = open_no_follow(path, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        return st.st_dev, st.st_ino, inode_generation(fd)
    finally:
        os.close(fd)


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def inode_generation(fd: int) -> int | None:
    """The generation of the file's inode, which changes when its number is used for another file; None
    where the file system keeps none (or the platform cannot ask)."""
    if sys.platform != "linux":
        return None
    buf = bytearray(struct.calcsize("l"))
    try:
        fcntl.ioctl(fd, _FS_IOC_GETVERSION, buf, True)
    except OSError:
        return None
    return int.from_bytes(buf[:4], sys.byteorder)


class CachedFile:
    """One store file whose descriptor the cache may close while idle; `with cached as fd:` to use it.

    Opened at construction (so a missing file or a link is reported where it was before);
    `close()` ends it. The same object may be pinned by several threads at once. `fd` is
    None while evicted; read it only inside `with`.
    """

    __slots__ = ("path", "flags", "fd", "pins", "used", "identity", "generation", "closed", "_cache")

    def __init__(
        self, path: str, flags: int, *, mode: int = 0o644, fd: int | None = None, cache: DescriptorCache | None = None
    ):
        """Open `path` with `flags` (through the no-link rule), or adopt `fd`, already open on it."""
        self.path = path
        self.flags = flags
        self.pins: list[None] = []  # one item per pin in progress (a list: append and pop are atomic)
        self.used = True
        self.closed = False
        self.generation: int | None = None  # noted when the descriptor is first evicted (`_evicted`)
        cache = self._cache = CACHE if cache is None else cache
        if cache.config_error is not None:
            if fd is not None:
                os.close(fd)
            raise cache.config_error
        if fd is None:
            fd = cache.open_file(path, flags, mode)
        try:
            self.identity = _identity(fd)
        except OSError:
            os.close(fd)
            raise
        self.fd: int | None = fd
        with cache.mutex:
            cache.add(self)
            cache.evict_over_limit()

    def __enter__(self) -> int:
        """Pin: the open descriptor (reopened if it was evicted), safe from eviction until `__exit__`.

        No lock on the way when the descriptor is open (see the module's docstring for why it
        is safe): announce the pin, then load the descriptor.
        """
        self.pins.append(None)
        self.used = True
        fd = self.fd
        if fd is None:
            try:
                fd = self._cache.pin_slow(self)
            except BaseException:
                self.pins.pop()
                raise
        return fd

    def __exit__(self, *exc: object) -> None:
        self.pins.pop()
        cache = self._cache
        if not self.pins and len(cache._files) > cache.limit:
            with cache.mutex:
                cache.evict_over_limit()  # it was held over the bound by pins

    # For a pin held across calls (a lock): the same as entering and leaving `with`.
    pin = __enter__
    unpin = __exit__

    def close(self) -> None:
        self._cache.release(self)


def set_limit(limit: int) -> None:
    """Bound the store files this process keeps open (the default: `default_limit()`)."""
    CACHE.set_limit(limit)


CACHE = DescriptorCache()


def _after_fork_in_child() -> None:
    """A forked child (`txlog process --workers`) keeps the parent's descriptors, but a mutex some other
    thread of the parent held at the fork would stay held forever in the child: give it a fresh one."""
    CACHE.mutex = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
