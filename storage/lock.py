"""Cross-process exclusive locks on lock files (flock), plus in-process thread safety.

The kernel releases an flock when its holder dies, so a process killed with SIGKILL
never leaves a lock behind (docs/reliability-scenarios.md scenario 40): there are no PID files.
flock belongs to an open file description, so one FileLock object per lock file per
process; the threading.RLock makes it re-entrant inside the process.
"""

from __future__ import annotations

import fcntl
import os
import threading

from storage.errors import KafkaStorageError


class FileLock:
    """An exclusive, re-entrant lock over `path`, created on first use."""

    def __init__(self, path: str):
        self.path = path
        self._fd: int | None = None
        self._thread_lock = threading.RLock()
        self._depth = 0

    def acquire(self) -> None:
        self._thread_lock.acquire()
        try:
            if self._depth == 0:
                if self._fd is None:
                    self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
                fcntl.flock(self._fd, fcntl.LOCK_EX)
            self._depth += 1
        except OSError as exc:
            self._thread_lock.release()
            raise KafkaStorageError(f"cannot lock {self.path}: {exc.strerror}") from exc
        except BaseException:
            self._thread_lock.release()
            raise

    def release(self) -> None:
        self._depth -= 1
        if self._depth == 0 and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._thread_lock.release()

    @property
    def held(self) -> bool:
        return self._depth > 0

    def close(self) -> None:
        with self._thread_lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
                self._depth = 0

    def __enter__(self) -> "FileLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
