"""Open descriptors are bounded whatever the partition count (issue 23, item 6; storage/descriptor_cache.py).

Before, every partition held its `.log`, indexes, high-watermark and lock files open: about
five descriptors a partition, so a 250-partition topic could not be produced to under the
usual `ulimit -n 1024`, nor 2,000 partitions consumed or verified. The big test runs the
whole path (topics create, Producer and `txlog produce`, Consumer and `txlog consume`,
`txlog verify`) in processes limited to 1024 descriptors: 2,000 partitions by default (well
past what worked), 10,000 with `--big`.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import textwrap

import pytest

from storage import Store
from storage.descriptor_cache import CACHE, CachedFile
from storage.errors import KafkaStorageError
from storage.file_records import FileRecords
from storage.lock import FileLock
from storage.records import build_batch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOFILE = 1024


@pytest.fixture
def small_limit():
    """A tiny descriptor bound for the test, restored after it (the cache is the process's)."""
    saved = CACHE.limit
    CACHE.set_limit(4)
    yield 4
    CACHE.set_limit(saved)


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def _batch(value: bytes) -> bytes:
    return build_batch([(None, value, [], 0)])


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
def test_scenario68_a_process_holds_no_more_descriptors_than_the_bound(store_path, small_limit) -> None:
    with Store.open(store_path) as store:
        store.create_topic("t", 60)
        before = _open_descriptors()
        for p in range(60):
            store.partition("t", p).append(_batch(b"v%d" % p))
        for p in range(60):
            assert [b.base_offset for b in store.partition("t", p).read(0)] == [0]
        # 60 partitions x (log, 3 indexes, HW, lock) were 360 descriptors; now the bound, plus none pinned
        assert _open_descriptors() - before <= small_limit
        assert CACHE.open_count <= small_limit


def test_scenario68_an_evicted_file_reads_the_same_bytes_after_its_transparent_reopen(store_path, small_limit) -> None:
    with Store.open(store_path) as store:
        store.create_topic("t", 1)
        log = store.partition("t", 0)
        log.append(_batch(b"first"))
        path = log.segments[0].log_path
        cached = CachedFile(path, os.O_RDONLY)
        records = FileRecords(path, cached)
        expected = records.read(0, 1 << 20)
        CACHE.set_limit(1)
        CachedFile(os.path.join(store_path, "txlog.json"), os.O_RDONLY)  # pushes every other idle one out
        assert cached.fd is None, "the file was not evicted; the test proves nothing"
        assert records.read(0, 1 << 20) == expected
        assert [b.base_offset for b in records.batches()] == [0]
        cached.close()
        log.append(_batch(b"second"))  # the writer's evicted .log and indexes reopen for append
        assert [b.base_offset for b in log.read(0)] == [0, 1]


def _evict(cached: CachedFile, tmp_path) -> None:
    """Open other files under a cache limit of 1 until `cached`'s descriptor is closed."""
    CACHE.set_limit(1)
    for i in range(3):
        filler = tmp_path / f"filler{i}"
        filler.write_bytes(b"")
        CachedFile(str(filler), os.O_RDONLY)
    assert cached.fd is None, "the file was not evicted; the test proves nothing"


def test_scenario68_a_file_replaced_while_evicted_is_refused_not_silently_switched(tmp_path, small_limit) -> None:
    path = str(tmp_path / "file")
    with open(path, "wb") as f:
        f.write(b"original")
    cached = CachedFile(path, os.O_RDONLY)
    _evict(cached, tmp_path)
    with open(path + ".new", "wb") as f:
        f.write(b"another")
    os.replace(path + ".new", path)
    with pytest.raises(KafkaStorageError, match="replaced"), cached:
        pass
    cached.close()


def test_scenario68_a_new_file_given_the_evicted_ones_inode_number_is_refused(tmp_path, small_limit) -> None:
    """ext4 gives a freed inode number to the next file created: device and inode alone took such a
    file for the evicted one (a cleaning's segment under a reader's name: records twice, scenario 73)."""
    path = tmp_path / "file"
    path.write_bytes(b"original")
    cached = CachedFile(str(path), os.O_RDONLY)
    _evict(cached, tmp_path)
    inode = path.stat().st_ino
    path.unlink()
    for i in range(64):
        path.write_bytes(b"reborn!!")
        if path.stat().st_ino == inode:
            break
        path.rename(tmp_path / f"aside{i}")  # kept, so the next file is given another number
    else:
        pytest.skip("this file system gave the freed inode number to none of 64 new files")
    with pytest.raises(KafkaStorageError, match="replaced"), cached:
        pass
    cached.close()


def _lock_is_free(path: str) -> bool:
    """Whether another process can take the flock now (without waiting)."""
    probe = textwrap.dedent(
        f"""
        import fcntl, os, sys
        fd = os.open({path!r}, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            sys.exit(1)
        """
    )
    return subprocess.run([sys.executable, "-c", probe], check=False).returncode == 0


def test_scenario68_eviction_never_drops_a_held_lock(tmp_path, small_limit) -> None:
    """A held lock's descriptor is pinned; an idle lock file may be closed and reopened."""
    lock_path = str(tmp_path / "a.lock")
    lock = FileLock(lock_path)
    with lock:
        for i in range(small_limit * 3):  # churn the cache well past its bound, closing idle descriptors
            f = tmp_path / f"f{i}"
            f.write_bytes(b"x")
            CachedFile(str(f), os.O_RDONLY)
        # and closing another descriptor of the same file (what would drop a POSIX fcntl lock)
        other = CachedFile(lock_path, os.O_RDONLY)
        other.close()
        assert not _lock_is_free(lock_path)
    assert _lock_is_free(lock_path)
    for i in range(small_limit * 3):
        CachedFile(str(tmp_path / f"f{i}"), os.O_RDONLY)
    with lock:  # its descriptor was evicted while idle: reopened, and the lock works again
        assert not _lock_is_free(lock_path)
    lock.close()


# ---- the whole path under ulimit -n 1024 -------------------------------------------------------------


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


def _run(args: list[str], *, stdin: bytes | None = None, timeout: float = 3600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("TXLOG_MAX_OPEN_FILES", None)
    env.pop("TXLOG_DATA_DIR", None)
    return subprocess.run(
        args, input=stdin, capture_output=True, env=env, cwd=ROOT, preexec_fn=_limited, timeout=timeout, check=False
    )


def _txlog(store: str, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    result = _run([sys.executable, "-m", "cli.main", "--data-dir", store, *args], stdin=stdin)
    assert result.returncode == 0, f"txlog {' '.join(args)}: {result.stderr.decode()[-2000:]}"
    return result


_API = textwrap.dedent(
    """
    import os, resource, sys
    import txlog
    from txlog.topic_partition import TopicPartition

    store, n = sys.argv[1], int(sys.argv[2])
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == 1024
    with txlog.Producer(store) as producer:
        for p in range(n):
            producer.send("many", value=b"api-%d" % p, partition=p)
        producer.flush()
    consumer = txlog.Consumer(store, isolation_level="read_committed", enable_auto_commit=False)
    consumer.assign([TopicPartition("many", p) for p in range(n)])
    seen = set()
    while True:
        records = consumer.poll(max_records=100_000)
        if not records:
            break
        seen.update(r.partition for r in records)
    consumer.close()
    assert seen == set(range(n)), f"records came from {len(seen)} of {n} partitions"
    print(len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0)
    """
)


@pytest.fixture
def fast_dir(tmp_path):
    """A tmpfs directory when the machine has one (thousands of partitions cost thousands of fsyncs), else tmp_path."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        with tempfile.TemporaryDirectory(dir=shm, prefix="txlog-fds-") as d:
            yield d
    else:
        yield str(tmp_path)


def test_scenario68_thousands_of_partitions_work_under_ulimit_1024(fast_dir, big) -> None:
    partitions = 10_000 if big else 2_000
    store = os.path.join(fast_dir, "store")
    _txlog(store, "topics", "create", "many", "--partitions", str(partitions))

    api = _run([sys.executable, "-c", _API, store, str(partitions)])
    assert api.returncode == 0, api.stderr.decode()[-2000:]
    assert int(api.stdout.split()[-1]) < NOFILE // 2  # descriptors left open at the end: the bound, not the count

    lines = "".join(f"key-{i}\tcli-{i}\n" for i in range(partitions)).encode()
    _txlog(store, "produce", "-t", "many", "-K", "\t", stdin=lines)
    consumed = _txlog(store, "consume", "-t", "many").stdout.decode().splitlines()
    assert len(consumed) == 2 * partitions
    assert sum(1 for line in consumed if line.startswith("cli-")) == partitions
    _txlog(store, "verify")


def test_an_unusable_limit_setting_is_one_error_line(tmp_path) -> None:
    store = str(tmp_path / "store")
    env = dict(os.environ, PYTHONPATH=ROOT, TXLOG_MAX_OPEN_FILES="many")
    env.pop("TXLOG_DATA_DIR", None)
    create = [sys.executable, "-m", "cli.main", "--data-dir", store, "topics", "create", "t"]
    result = subprocess.run(create, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == ["Error: TXLOG_MAX_OPEN_FILES='many' is not a number of files"]
