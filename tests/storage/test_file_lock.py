"""FileLock (storage/lock.py): re-entrant inside the process, one flock across processes."""

from __future__ import annotations

import threading

import pytest

from storage.errors import KafkaStorageError
from storage.lock import FileLock, writer_lock_if_free


def _free(path: str) -> bool:
    """Whether another open file description could take the lock now (what another process would find)."""
    with writer_lock_if_free(path) as free:
        return free


def test_a_file_lock_is_re_entrant_and_unlocks_the_file_at_its_last_release(tmp_path):
    path = str(tmp_path / "txlog.lock")
    lock = FileLock(path)
    with lock:
        with lock:
            assert lock.held and not _free(path)
        assert lock.held and not _free(path)  # the inner release leaves the outer hold
    assert not lock.held and _free(path)
    lock.acquire()  # the explicit calls are `with`'s own
    lock.acquire()
    lock.release()
    assert not _free(path)
    lock.release()
    assert not lock.held and _free(path)
    with lock:  # taken again after a full release: the file is flocked again
        assert not _free(path)
    lock.close()


def test_a_lock_file_that_cannot_be_opened_is_a_storage_error_and_leaves_the_lock_free(tmp_path):
    directory = tmp_path / "not-yet"
    lock = FileLock(str(directory / "txlog.lock"))
    with pytest.raises(KafkaStorageError, match="cannot lock"):
        lock.acquire()
    assert not lock.held
    directory.mkdir()
    taken: list[bool] = []
    other = threading.Thread(target=lambda: taken.append(_taken_and_released(lock)), daemon=True)
    other.start()  # another thread waits on the in-process lock if the failed acquire kept it
    other.join(10)
    assert taken == [True]


def _taken_and_released(lock: FileLock) -> bool:
    with lock:
        return lock.held
