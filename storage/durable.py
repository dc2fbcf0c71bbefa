"""Durable file operations: the write orderings that make a crash at any point recoverable.

Rules (docs/reliability-scenarios.md, rules 3, 4 and 9): a new file is written, fsynced,
and its directory fsynced before anything points at it; small state files go
through `name.tmp` + fsync + rename + directory fsync; a failed fsync is never
retried and reported as success. `FSYNC` and `FDATASYNC` are looked up at call
time so tests can inject EIO by monkeypatching `os.fsync` / `os.fdatasync`.
"""

from __future__ import annotations

import errno
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from typing import TypeVar

from storage.errors import KafkaStorageError
from storage.safe_open import open_no_follow

TMP_SUFFIX = ".tmp"


def fsync_fd(fd: int, *, data_only: bool = False) -> None:
    """fsync (or fdatasync) a descriptor, turning OSError into KafkaStorageError."""
    try:
        if data_only:
            os.fdatasync(fd)
        else:
            os.fsync(fd)
    except OSError as exc:
        raise KafkaStorageError(f"fsync failed: {exc.strerror or exc}") from exc


def fsync_dir(path: str) -> None:
    """Make directory entries (creates, renames, unlinks) in `path` durable."""
    with directory_fd(path) as fd:
        fsync_fd(fd)


@contextmanager
def directory_fd(path: str) -> Iterator[int]:
    """A descriptor of the directory `path` while the block runs (KafkaStorageError if it cannot be opened);
    also `sync_round`'s anchor for files that all live under it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise KafkaStorageError(f"cannot open directory {path}: {exc.strerror}") from exc
    try:
        yield fd
    finally:
        os.close(fd)


def fsync_file(path: str) -> None:
    """fsync the file at `path` (its data and inode): a call of a `sync_round` over files written unsynced."""
    try:
        fd = open_no_follow(path, os.O_RDONLY)
    except OSError as exc:
        raise KafkaStorageError(f"cannot open {path}: {exc.strerror}") from exc
    try:
        fsync_fd(fd)
    finally:
        os.close(fd)


def write_new_file(path: str, data: bytes) -> None:
    """Create `path` (it must not exist) holding `data`, with no fsync: only for a file in a directory that
    nothing names yet, made durable with the directory by the caller (fsync of the file and of the
    directory, rule 3) before anything points at it."""
    try:
        fd = open_no_follow(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except OSError as exc:
        raise KafkaStorageError(f"cannot create {path}: {exc.strerror}") from exc
    try:
        write_all(fd, data)
    finally:
        os.close(fd)


T = TypeVar("T")

#: Threads that issue fsyncs at once. A disk completes concurrent flushes in far fewer device
#: cache flushes than a serial loop does (16 threads fsync 100 files about 11x faster here).
PARALLEL_SYNCS = 16
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


#: The names of the two pools' threads (idle once a call returns, they never keep a process from exiting):
#: `in_parallel`'s and `each_in_parallel`'s.
SYNC_POOL_PREFIX = "txlog-sync"
FSYNC_POOL_PREFIX = "txlog-fsync"


def in_parallel(calls: Sequence[Callable[[], T]]) -> list[T]:
    """Run blocking calls (fsyncs, which release the GIL) at once; their results in order.

    Every call runs to its end before anything is raised, so no fsync is still in flight when
    the caller goes on; then the first call's error (in order) is raised. One call runs inline.
    Callers keep the ordering rules: only calls no rule orders against each other go together.
    """
    if len(calls) <= 1:
        return [call() for call in calls]
    futures = [_executor().submit(call) for call in calls]
    raise_first([f.exception() for f in futures])
    return [f.result() for f in futures]


def raise_first(failures: Iterable[BaseException | None]) -> None:
    """Raise the first failure (in order) of calls that have all ended, if any: what `in_parallel`,
    `each_in_parallel` and `sync_round` callers do once nothing is left in flight."""
    for failure in failures:
        if failure is not None:
            raise failure


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(PARALLEL_SYNCS, thread_name_prefix=SYNC_POOL_PREFIX)
        return _pool


# The pool of `each_in_parallel`, apart from `in_parallel`'s: its calls never wait on a lock, so a
# caller holding partition locks can wait for them, even while `in_parallel`'s threads are all
# taken by calls that wait for those very locks (another thread's acks=all round).
_leaf_pool: ThreadPoolExecutor | None = None


def each_in_parallel(calls: Sequence[Callable[[], object]]) -> list[BaseException | None]:
    """Run blocking calls that never wait on a lock (bare fdatasyncs) at once; each call's error, or None.

    For a caller that holds locks while it waits (`storage.partition_log.sync_all` holds the
    partitions' writer locks across their fdatasyncs): the calls run on a pool of their own,
    never behind `in_parallel`'s calls, which may be waiting on those locks. Each of at most
    PARALLEL_SYNCS threads runs its share of the calls in turn (the caller's thread runs the
    first share), so 100 fdatasyncs wake 15 threads, not 100 work items: per call this costs
    a loop step rather than a future and a thread hand-off, which on a busy machine was most
    of a commit's CPU. Every call has ended when this returns.
    """
    outcomes: list[BaseException | None] = [None] * len(calls)
    shares = min(PARALLEL_SYNCS, len(calls))
    if shares <= 1:
        for n, call in enumerate(calls):
            try:
                call()
            except Exception as exc:  # noqa: BLE001 - kept for the caller, as below
                outcomes[n] = exc
        return outcomes

    def run_share(first: int) -> None:
        for n in range(first, len(calls), shares):
            try:
                calls[n]()
            except Exception as exc:  # noqa: BLE001 - kept for the caller: every call runs whatever one raised
                outcomes[n] = exc

    futures = [_leaf_executor().submit(run_share, first) for first in range(1, shares)]
    run_share(0)
    for future in futures:
        future.result()  # run_share keeps every call's error: this only waits
    return outcomes


def _leaf_executor() -> ThreadPoolExecutor:
    global _leaf_pool
    with _pool_lock:
        if _leaf_pool is None:
            _leaf_pool = ThreadPoolExecutor(PARALLEL_SYNCS - 1, thread_name_prefix=FSYNC_POOL_PREFIX)
        return _leaf_pool


def _forget_pool_in_child() -> None:
    """A forked child has none of the pools' threads: it must start its own, not wait on the parent's."""
    global _pool, _leaf_pool, _pool_lock
    _pool = None
    _leaf_pool = None
    _pool_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_pool_in_child)


#: `TXLOG_SYNC_METHOD` in the environment, read at call time: how `sync_round` makes a round of files
#: durable. `auto` (the default): one syncfs(2) when little else is waiting to be written back
#: (`_little_dirty`), else one fdatasync per file; `syncfs`: one syncfs whatever is dirty;
#: `fdatasync`: always one per file.
SYNC_METHOD_ENV = "TXLOG_SYNC_METHOD"
SYNC_METHODS = ("auto", "syncfs", "fdatasync")
#: A round of at least this many files may be made durable with one syncfs(2).
SYNCFS_MIN_FILES = 4
#: syncfs(2) reports a writeback error since Linux 5.8 (errseq on the superblock); before that it
#: returned 0 whatever was lost, so it cannot stand in for fdatasync there.
SYNCFS_MIN_KERNEL = (5, 8)
#: `auto`'s bound: a syncfs waits for every dirty page of the filesystem, so it is taken only while
#: the machine's dirty and in-writeback page cache is at most this much per file of the round. One
#: file's own fdatasync (its journal commit and device cache flush) costs about 45 µs on this
#: project's VM disk, the time it writes back some 60 KiB (bench_parallel_sync.py): above this bound
#: the fdatasyncs are the cheaper way.
SYNCFS_DIRTY_PER_FILE = 64 << 10


def sync_round(
    syncs: Sequence[Callable[[], object]], anchor: AbstractContextManager[int] | None
) -> list[BaseException | None]:
    """Make the files of `syncs` durable, each call an fdatasync or fsync of one file; each call's error, or None.

    `anchor` gives a descriptor on the one filesystem all those files live on (None: they may not
    share one). With an anchor, at least SYNCFS_MIN_FILES files, a kernel whose syncfs(2) reports
    writeback errors and `TXLOG_SYNC_METHOD` allowing it, one syncfs replaces the calls: it writes
    back every dirty page of the filesystem and commits its journal once, with one device cache
    flush, where N concurrent fdatasyncs each force their own (on this project's VM disk, 100 files:
    0.4 ms against 4.5 ms, and 0.1 ms of CPU against 5.6 ms). It also waits for other programs'
    dirty data on that filesystem, hence `auto`'s bound (SYNCFS_DIRTY_PER_FILE). PostgreSQL offers
    syncfs for the same trade (its `recovery_init_sync_method`). A failed syncfs names no file, so
    the per-file calls then run and say which file's data was lost (each descriptor still reports
    its own file's error: the kernel keeps an error cursor per open file, and syncfs moves only the
    superblock's). Otherwise `each_in_parallel` runs the calls. Every file is durable, or has its
    error, when this returns.
    """
    if anchor is not None and len(syncs) >= SYNCFS_MIN_FILES and syncfs_allowed(len(syncs)):
        try:
            with anchor as fd:
                syncfs(fd)
        except (KafkaStorageError, OSError):
            pass  # the per-file calls below find out which file failed
        else:
            return [None] * len(syncs)
    return each_in_parallel(syncs)


def sync_method() -> str:
    """`TXLOG_SYNC_METHOD` (one of SYNC_METHODS, `auto` when unset); KafkaStorageError for anything else."""
    method = os.environ.get(SYNC_METHOD_ENV) or "auto"
    if method not in SYNC_METHODS:
        raise KafkaStorageError(f"{SYNC_METHOD_ENV}={method!r} is not one of {', '.join(SYNC_METHODS)}")
    return method


def syncfs_allowed(files: int) -> bool:
    """Whether a round of `files` files may be one syncfs(2): by `TXLOG_SYNC_METHOD`, the kernel, and for
    `auto` the dirty page cache."""
    method = sync_method()
    if method == "fdatasync" or not syncfs_usable():
        return False
    return method == "syncfs" or _little_dirty(files)


def syncfs_usable() -> bool:
    """Whether this system has a syncfs(2) that reports writeback errors (Linux 5.8 or later)."""
    return _libc_syncfs() is not None


def _little_dirty(files: int) -> bool:
    """Whether the dirty and in-writeback page cache (/proc/meminfo, every filesystem's: a conservative
    stand-in for the one syncfs would flush) is at most SYNCFS_DIRTY_PER_FILE per file. A read of
    about 10 µs, against the milliseconds a wide round takes."""
    pending = dirty_bytes()
    return pending is not None and pending <= files * SYNCFS_DIRTY_PER_FILE


def dirty_bytes() -> int | None:
    """Dirty plus Writeback of /proc/meminfo in bytes, or None where it cannot be read."""
    try:
        with open("/proc/meminfo", "rb") as meminfo:
            text = meminfo.read()
    except OSError:
        return None
    total = 0
    for field in (b"\nDirty:", b"\nWriteback:"):
        at = text.find(field)
        if at < 0:
            return None
        try:
            total += int(text[at + len(field) : text.index(b"kB", at)]) << 10
        except ValueError:
            return None
    return total


def syncfs(fd: int) -> None:
    """syncfs(2) on the filesystem of `fd`, the GIL released; OSError on failure (tests inject EIO here)."""
    call = _libc_syncfs()
    if call is None:
        raise OSError(errno.ENOSYS, "syncfs is not available here")
    if call(fd) != 0:
        import ctypes

        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


_syncfs_call: Callable[[int], int] | None = None
_syncfs_probed = False


def _libc_syncfs() -> Callable[[int], int] | None:
    """libc's syncfs on Linux SYNCFS_MIN_KERNEL or later, else None; looked up once per process."""
    global _syncfs_call, _syncfs_probed
    if not _syncfs_probed:
        _syncfs_call = _find_syncfs()
        _syncfs_probed = True
    return _syncfs_call


def _find_syncfs() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux") or _kernel_version() < SYNCFS_MIN_KERNEL:
        return None
    import ctypes  # only a process that makes a wide sync pays for the import

    try:
        call = ctypes.CDLL(None, use_errno=True).syncfs
    except (AttributeError, OSError):  # a libc without syncfs (before glibc 2.14)
        return None
    call.argtypes = [ctypes.c_int]
    call.restype = ctypes.c_int
    return call  # a CDLL call releases the GIL while it runs


def _kernel_version() -> tuple[int, int]:
    """(major, minor) of the running kernel, from a release such as `6.1.0-13-amd64`; (0, 0) if unreadable."""
    parts = os.uname().release.split(".")
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except (IndexError, ValueError):
        return 0, 0


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write every byte or raise; os.write may write less than asked."""
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except OSError as exc:
            raise KafkaStorageError(f"write failed: {exc.strerror or exc}") from exc
        if n == 0:
            raise KafkaStorageError("write failed: wrote 0 bytes")
        view = view[n:]


def atomic_write(path: str, data: bytes, *, tmp_suffix: str = TMP_SUFFIX) -> None:
    """Replace `path` with `data` so that a crash leaves either the old or the new file.

    The tmp file is fsynced before the rename (the ext4 zero-length-file lesson)
    and the directory after it. On failure the tmp file is removed and the old
    file is untouched. Writers that may race another process on the same file pass
    their own `tmp_suffix`, so neither truncates the other's half-written copy. The tmp
    file lies beside `path` (a suffix, never a separator) and is opened without following
    a link, so neither the write nor the rename leaves the directory; a rename over a link
    replaces the link, not what it points at.
    """
    directory = os.path.dirname(path) or "."
    tmp = path + tmp_suffix
    if os.sep in tmp_suffix:
        raise ValueError(f"a tmp suffix names a file beside {path}, not {tmp_suffix!r}")
    try:
        fd = open_no_follow(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    except OSError as exc:
        raise KafkaStorageError(f"cannot create {tmp}: {exc.strerror}") from exc
    try:
        try:
            write_all(fd, data)
            fsync_fd(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    fsync_dir(directory)


def create_durably(path: str) -> int:
    """Create a new empty file and make its directory entry durable; returns an O_RDWR|O_APPEND fd."""
    try:
        fd = open_no_follow(path, os.O_RDWR | os.O_CREAT | os.O_APPEND)
    except OSError as exc:
        raise KafkaStorageError(f"cannot create {path}: {exc.strerror}") from exc
    fsync_dir(os.path.dirname(path) or ".")
    return fd


def unlink_durably(paths: list[str], directory: str) -> None:
    """Remove files (missing ones are fine) and fsync their directory once."""
    for p in paths:
        _unlink_quietly(p)
    fsync_dir(directory)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def is_disk_full(exc: BaseException) -> bool:
    """True when an error chain bottoms out in ENOSPC or EDQUOT."""
    return _chain_errno(exc, (errno.ENOSPC, errno.EDQUOT)) is not None


# The disk (or the directory's permissions) says no to a write: full, a quota, a read-only mount,
# no permission. Unlike EIO these say nothing about the bytes already there, so a reader goes on.
WRITE_REFUSALS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)


def write_refused(exc: BaseException) -> OSError | None:
    """The OSError in `exc`'s chain saying the disk refused a write (WRITE_REFUSALS), or None."""
    return _chain_errno(exc, WRITE_REFUSALS)


def _chain_errno(exc: BaseException, codes: tuple[int, ...]) -> OSError | None:
    link: BaseException | None = exc
    while link is not None:
        if isinstance(link, OSError) and link.errno in codes:
            return link
        link = link.__cause__
    return None
