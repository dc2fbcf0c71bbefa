"""Shared fixtures. `--big` turns soak and crash-matrix tests up to full size."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
KAFKA_REAL = os.path.join(SHARED, "fixtures", "kafka-real")

if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def _shared_bytecode_cache() -> None:
    """Where PYTHONDONTWRITEBYTECODE is set (this project's sandboxes set it), every Python process
    the tests start (`txlog` commands, crash workers, servers, samples) would compile each module it
    imports from source, about 0.15 s a `txlog` start: a fifth of a subprocess-heavy file's time
    (tests/txlog/test_multiprocess.py, 20.4 s against 15.8 s). The run then uses one bytecode cache
    outside the repository instead, which this process and every child inherit; an environment that
    writes bytecode as usual is left alone."""
    if not sys.flags.dont_write_bytecode and "PYTHONDONTWRITEBYTECODE" not in os.environ:
        return
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    cache = os.path.join(tempfile.gettempdir(), f"txlog-tests-pycache-{os.getuid()}")
    prefix = os.environ.setdefault("PYTHONPYCACHEPREFIX", cache)
    sys.pycache_prefix = prefix
    sys.dont_write_bytecode = False


_shared_bytecode_cache()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--big", action="store_true", default=False, help="run soak and crash-matrix tests at full size (slow)"
    )


# kafka-python 3 runs one I/O thread per client, named after its client id (kafka/net/selector.py)
KAFKA_PYTHON_IO_THREAD = "kafka-io-"


def _kafka_python_io_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith(KAFKA_PYTHON_IO_THREAD) and t.is_alive()}


@pytest.fixture(autouse=True)
def _kafka_python_clients_closed() -> Iterator[None]:
    """A test fails if it leaves a kafka-python client open. The client's I/O thread outlives the
    test: once the test's server is gone, it retries its metadata refresh for the rest of the run,
    logging ECONNREFUSED into later tests' output and changing the global `random` state while
    Hypothesis draws (which Hypothesis warns of). Three tests did so until 2026-11-28."""
    before = _kafka_python_io_threads()
    yield
    deadline = time.monotonic() + 5.0  # close() ends the thread at once; allow a loaded machine
    while (left := _kafka_python_io_threads() - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    if left:
        pytest.fail(
            "kafka-python client(s) left open (their I/O threads still run): "
            + ", ".join(sorted(t.name for t in left))
            + "; close each one, in a finally or with contextlib.closing"
        )


@pytest.fixture
def big(request: pytest.FixtureRequest) -> bool:
    """True when the run asked for full-size soak/crash runs."""
    return bool(request.config.getoption("--big"))


@pytest.fixture
def store_path(tmp_path) -> str:
    return str(tmp_path / "store")


@pytest.fixture
def store(store_path):
    from storage import Store

    s = Store.open(store_path)
    yield s
    s.close()


@pytest.fixture(params=["fdatasync", "syncfs"])
def sync_method(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each way a sync round over several files can make them durable (storage.durable.sync_round):
    one fdatasync per file, or one syncfs(2) (skipped where the kernel cannot report errors through it).
    Set in the environment (`TXLOG_SYNC_METHOD`), so worker processes the test starts use it too."""
    from storage.durable import SYNC_METHOD_ENV, syncfs_usable

    if request.param == "syncfs" and not syncfs_usable():
        pytest.skip("syncfs(2) reports no writeback error here (Linux before 5.8, or not Linux)")
    monkeypatch.setenv(SYNC_METHOD_ENV, str(request.param))
    return str(request.param)


@pytest.fixture
def kafka_real_copy(tmp_path) -> str:
    """A writable copy of the real Kafka segment fixture (the original is read-only)."""
    if not os.path.isdir(KAFKA_REAL):
        pytest.skip("shared/fixtures/kafka-real is not beside the repository")
    dst = tmp_path / "kafka-real"
    shutil.copytree(KAFKA_REAL, dst, ignore=shutil.ignore_patterns("README.md"))
    return str(dst)


@pytest.fixture(scope="session")
def spark():
    """The one SparkSession of the test run (local[2], UI off), with the txlog source registered."""
    from txlog.spark import local_session  # pyspark is a test dependency: a missing one must fail

    session = local_session("local[2]", app_name="txlog-tests")
    yield session
    session.stop()


class InodeReuse:
    """A file replaced until a version has the first one's inode number, mtime and size (ext4's reuse).

    Checkpoints are replaced by a tmp file renamed over them, and ext4 gives a freed inode number to
    the next file made, so a version soon takes the first one's number back. Made in one tick of the
    clock that stamps mtimes (storage/file_stamp.py), such a version has the first one's mtime too: the
    tick is stretched here by stamping the first version one minute ahead (`stamp_ahead`, before the
    look that must be fooled, which is then taken in that tick) and every later version the same.
    """

    @staticmethod
    def stamp_ahead(path: str) -> None:
        tick = os.stat(path).st_mtime_ns + 60_000_000_000
        os.utime(path, ns=(tick, tick))

    @staticmethod
    def rewrite_until_reused(path: str, rewrite) -> int:
        """Call `rewrite()` (which replaces `path`, keeping its size) until the inode number comes back;
        returns how many calls it took, or skips."""
        first = os.stat(path)
        for n in range(1, 65):
            rewrite()
            os.utime(path, ns=(first.st_mtime_ns, first.st_mtime_ns))
            st = os.stat(path)
            if st.st_ino == first.st_ino:
                assert st.st_size == first.st_size, "the rewrite changed the size: the key would differ anyway"
                return n
        pytest.skip("this file system gave the freed inode number to none of 64 new files")


@pytest.fixture
def inode_reuse() -> InodeReuse:
    return InodeReuse()
