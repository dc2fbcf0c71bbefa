"""The high watermark (durable watermark): readers never see a record a crash or power loss can take away.

`PartitionLog.append(sync=False)` writes without fdatasync and leaves the HW behind; a sync
(`PartitionLog.sync()`, a synced append or marker, a roll, close, recovery at open) makes the
log durable and publishes HW = log end in the partition's HW file, which readers in other
processes read with one pread. Readers of records (`txlog.fetch`) stop at the HW.

The writers here are real processes (`_Writer`), killed with SIGKILL; power loss is simulated
by cutting the `.log` back to the byte position the last fdatasync covered.
"""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import sys
import textwrap

import pytest

from storage import Store
from storage.errors import InvalidRecordError, OutOfOrderSequenceError
from storage.file_records import FileRecords
from storage.high_watermark import HIGH_WATERMARK_FILE, UNREADABLE, HighWatermarkFile, encode
from storage.log_files import log_file
from storage.records import build_batch, crc32c
from txlog.fetch import IsolationLevel, LogBounds, fetch, latest_offset

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOPIC = "t"
PID = 4242  # an idempotent producer's id: recovery must leave its sequence state consistent with the log
RU, RC = IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED

# A writer process driven one command per line; it answers "ok" once the command is done.
_WRITER = textwrap.dedent("""
    import sys
    from storage import Store
    from storage.records import build_batch, crc32c

    log = Store.open(sys.argv[1]).partition(sys.argv[2], 0)
    held = []  # the lock's context, kept alive: a dropped generator would release it
    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "append":  # append <value> <seq> <sync 0|1>
            data = build_batch([(None, args[0].encode(), None, None)], producer_id=int(sys.argv[3]),
                               producer_epoch=0, base_sequence=int(args[1]))
            log.append(data, sync=args[2] == "1")
        elif cmd == "lock":  # hold the writer lock from now on, as a writer mid-append does
            held.append(log.exclusive())
            held[-1].__enter__()
        elif cmd == "sync":
            log.sync()
        print("ok", flush=True)
""")


class _Writer:
    """A writer process on partition 0 of TOPIC; `kill()` is a real SIGKILL."""

    def __init__(self, store_path: str):
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, store_path, TOPIC, str(PID)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def do(self, command: str) -> None:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        assert answer == "ok\n", f"writer answered {answer!r} to {command!r}"

    def append(self, value: str, seq: int, *, sync: bool) -> None:
        self.do(f"append {value} {seq} {int(sync)}")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc.stdin.close()
        self.proc.stdout.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()


@pytest.fixture
def writer(store_path):
    Store.open(store_path).create_topic(TOPIC)
    w = _Writer(store_path)
    yield w
    w.close()


def _values(log, isolation=RU) -> list[bytes]:
    return [r.value for r in fetch(log, log.log_start_offset, isolation, max_records=10_000).records]


def _pdir(store_path: str) -> str:
    return os.path.join(store_path, f"{TOPIC}-0")


def _stored_hw(store_path: str) -> int | None:
    hw = HighWatermarkFile(_pdir(store_path), writable=False)
    try:
        return hw.read()
    finally:
        hw.close()


def _batch(value: bytes, seq: int = -1, pid: int = -1) -> bytes:
    return build_batch(
        [(None, value, None, None)], producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=seq
    )


def _count_syncs(monkeypatch) -> list[int]:
    """Every os.fsync / os.fdatasync call from now on (storage/durable.py looks them up at call time)."""
    calls: list[int] = []
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def fsync(fd):
        calls.append(fd)
        real_fsync(fd)

    def fdatasync(fd):
        calls.append(fd)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    return calls


# ---- semantics in one process ---------------------------------------------------------------------------


def test_a_synced_append_publishes_the_log_end_and_an_unsynced_one_does_not(store, store_path, monkeypatch):
    store.create_topic(TOPIC)
    log = store.partition(TOPIC, 0)
    assert _stored_hw(store_path) == 0  # recovery at open published the (empty) log end
    calls = _count_syncs(monkeypatch)
    log.append(_batch(b"a"))
    assert (len(calls), _stored_hw(store_path)) == (1, 1)
    log.append(_batch(b"b"), sync=False)
    assert (len(calls), _stored_hw(store_path), log.log_end_offset) == (1, 1, 2)
    assert log.sync() == 2
    assert (len(calls), _stored_hw(store_path)) == (2, 2)
    assert log.sync() == 2
    assert len(calls) == 2  # nothing new: no fdatasync


def test_sync_covers_what_another_view_appended_without_sync(store_path):
    first = Store.open(store_path)
    first.create_topic(TOPIC)
    second = Store.open(store_path)
    try:
        first.partition(TOPIC, 0).append(_batch(b"a"), sync=False)
        assert second.partition(TOPIC, 0).sync() == 1  # caught up on the other view's write, then synced it
        assert _stored_hw(store_path) == 1
    finally:
        first.close()
        second.close()


def test_a_roll_and_a_close_make_unsynced_appends_durable(store, store_path):
    store.create_topic(TOPIC)
    log = store.partition(TOPIC, 0)
    log.append(_batch(b"a"), sync=False)
    log.roll()
    assert _stored_hw(store_path) == 1
    log.append(_batch(b"b"), sync=False)
    assert _stored_hw(store_path) == 1
    store.close()
    assert _stored_hw(store_path) == 2


def test_a_marker_is_synced_and_covers_the_transaction_data_before_it(store, store_path):
    from storage.records import ControlType

    store.create_topic(TOPIC)
    log = store.partition(TOPIC, 0)
    data = build_batch(
        [(None, b"x", None, None)], producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True
    )
    log.append(data, sync=False)
    assert _stored_hw(store_path) == 0
    log.append_marker(ControlType.COMMIT, 7, 0)
    assert _stored_hw(store_path) == 2


def test_latest_offset_is_capped_at_the_high_watermark():
    bounds = LogBounds(log_start_offset=3, last_stable_offset=9, log_end_offset=12, high_watermark=7)
    assert latest_offset(bounds, RU) == 7
    assert latest_offset(bounds, RC) == 7
    stable_first = bounds._replace(last_stable_offset=5)
    assert latest_offset(stable_first, RC) == 5
    assert latest_offset(stable_first, RU) == 7


def test_a_trusted_append_still_checks_framing_and_producer_state(store):
    store.create_topic(TOPIC)
    log = store.partition(TOPIC, 0)
    first = log.append(_batch(b"a", seq=0, pid=9), trusted=True)
    assert first.base_offset == 0
    with pytest.raises(OutOfOrderSequenceError):
        log.append(_batch(b"c", seq=5, pid=9), trusted=True)
    assert log.append(_batch(b"a", seq=0, pid=9), trusted=True).duplicate
    bad = bytearray(_batch(b"b", seq=1, pid=9))
    bad[57:61] = (7).to_bytes(4, "big")  # recordsCount no longer lastOffsetDelta + 1
    with pytest.raises(InvalidRecordError):
        log.append(bytes(bad), trusted=True)
    assert _values(log) == [b"a"]


# ---- readers in other processes --------------------------------------------------------------------------


def test_a_reader_in_another_process_never_sees_past_the_high_watermark(writer, store_path):
    writer.append("a", 0, sync=True)
    writer.do("lock")  # a live writer: readers must not sync for it
    writer.append("b", 1, sync=False)
    reader = Store.open(store_path, read_only=True)
    try:
        log = reader.partition(TOPIC, 0)
        assert log.log_end_offset == 2
        assert _values(log, RU) == [b"a"]
        assert _values(log, RC) == [b"a"]
        result = fetch(log, 1, RU)
        assert (result.records, result.high_watermark, result.next_offset) == ([], 1, 1)
        writer.do("sync")
        assert _values(log, RU) == [b"a", b"b"]
        assert LogBounds.of(log).high_watermark == 2
    finally:
        reader.close()


def test_a_reader_makes_a_dead_writers_tail_durable_before_showing_it(writer, store_path):
    writer.append("a", 0, sync=True)
    writer.append("b", 1, sync=False)
    writer.kill()  # between its write and any sync
    assert _stored_hw(store_path) == 1
    reader = Store.open(store_path, read_only=True)
    try:
        assert _values(reader.partition(TOPIC, 0)) == [b"a", b"b"]  # no lock held: the reader synced it
        assert _stored_hw(store_path) == 1  # a read-only view keeps the HW it derived in memory
    finally:
        reader.close()
    reopened = Store.open(store_path)
    try:
        log = reopened.partition(TOPIC, 0)
        assert _stored_hw(store_path) == 2  # recovery at open synced and published
        assert _values(log) == [b"a", b"b"]
    finally:
        reopened.close()


def test_kill_9_of_a_writer_holding_the_lock_then_reopen(writer, store_path):
    writer.append("a", 0, sync=True)
    writer.do("lock")
    writer.append("b", 1, sync=False)
    reader = Store.open(store_path, read_only=True)
    try:
        log = reader.partition(TOPIC, 0)
        assert _values(log) == [b"a"]
        writer.kill()  # the kernel drops its flock
        assert _values(log) == [b"a", b"b"]
    finally:
        reader.close()
    reopened = Store.open(store_path)
    try:
        log = reopened.partition(TOPIC, 0)
        assert (log.log_end_offset, log.high_watermark) == (2, 2)
        assert log.append(_batch(b"b", seq=1, pid=PID)).duplicate  # the producer state kept batch 1
    finally:
        reopened.close()


def test_power_loss_cut_to_the_high_watermark_leaves_a_consistent_log(writer, store_path):
    writer.append("a", 0, sync=True)
    writer.append("b", 1, sync=True)
    writer.do("lock")
    writer.append("c", 2, sync=False)
    writer.append("d", 3, sync=False)
    seen = Store.open(store_path, read_only=True)
    try:
        before = _values(seen.partition(TOPIC, 0))
    finally:
        seen.close()
    writer.kill()
    hw = _stored_hw(store_path)
    assert (before, hw) == ([b"a", b"b"], 2)
    # Power loss: what no fdatasync covered is gone (the HW file, a hint, survived here).
    path = log_file(_pdir(store_path), 0)
    with FileRecords.open(path) as records:
        cut = next(batch.position for batch in records.batches() if batch.base_offset == hw)
    os.truncate(path, cut)

    reopened = Store.open(store_path)
    try:
        log = reopened.partition(TOPIC, 0)
        assert (log.log_end_offset, log.high_watermark, _stored_hw(store_path)) == (2, 2, 2)
        after = _values(log)
        assert after[: len(before)] == before  # nothing a reader saw vanished
        assert log.append(_batch(b"b", seq=1, pid=PID)).duplicate  # producer state is the log's, not the lost tail's
        assert log.append(_batch(b"c2", seq=2, pid=PID)).base_offset == 2  # the lost batch's retry is new
        assert _values(log) == [b"a", b"b", b"c2"]
    finally:
        reopened.close()


def test_power_loss_that_also_lost_the_hw_update_is_still_consistent(writer, store_path):
    writer.append("a", 0, sync=True)
    writer.do("lock")
    writer.append("b", 1, sync=False)
    writer.kill()
    path = log_file(_pdir(store_path), 0)
    with FileRecords.open(path) as records:
        cut = next(batch.position for batch in records.batches() if batch.base_offset == 1)
    os.truncate(path, cut)
    with open(os.path.join(_pdir(store_path), HIGH_WATERMARK_FILE), "wb") as f:
        f.write(encode(0))  # an older HW: the last update never reached the disk
    reopened = Store.open(store_path)
    try:
        log = reopened.partition(TOPIC, 0)
        assert (_values(log), log.high_watermark, _stored_hw(store_path)) == ([b"a"], 1, 1)
    finally:
        reopened.close()


# ---- stores without the file, and damaged files ------------------------------------------------------------


def _closed_store_with(store_path: str, values: list[bytes]) -> None:
    s = Store.open(store_path)
    s.create_topic(TOPIC)
    for v in values:
        s.partition(TOPIC, 0).append(_batch(v))
    s.close()


@pytest.mark.parametrize("read_only", [True, False])
def test_without_a_hw_file_the_high_watermark_is_the_log_end(store_path, read_only):
    _closed_store_with(store_path, [b"a", b"b"])
    os.unlink(os.path.join(_pdir(store_path), HIGH_WATERMARK_FILE))  # a store written before the file existed
    s = Store.open(store_path, read_only=read_only)
    try:
        log = s.partition(TOPIC, 0)
        assert (log.high_watermark, _values(log)) == (2, [b"a", b"b"])
        assert _stored_hw(store_path) == (None if read_only else 2)
    finally:
        s.close()


def _with_crc(body: bytes) -> bytes:
    return body + struct.pack(">I", crc32c(body))


DAMAGED = {
    "empty": b"",
    "short": b"\x00\x00\x00",
    "garbage": bytes(range(200, 214)),
    "unknown version": _with_crc(struct.pack(">hq", 7, 1)),
    "negative": _with_crc(struct.pack(">hq", 0, -5)),
}


@pytest.mark.parametrize("content", DAMAGED.values(), ids=DAMAGED.keys())
def test_a_damaged_hw_file_is_rewritten_by_a_writer_and_never_crashes_a_reader(store_path, content):
    _closed_store_with(store_path, [b"a", b"b"])
    with open(os.path.join(_pdir(store_path), HIGH_WATERMARK_FILE), "wb") as f:
        f.write(content)
    assert _stored_hw(store_path) == UNREADABLE
    ro = Store.open(store_path, read_only=True)
    try:
        assert _values(ro.partition(TOPIC, 0)) == [b"a", b"b"]  # no writer at work: the reader synced
    finally:
        ro.close()
    rw = Store.open(store_path)
    try:
        log = rw.partition(TOPIC, 0)  # opening the partition (its recovery) rewrites the file
        assert _stored_hw(store_path) == 2
        assert _values(log) == [b"a", b"b"]
    finally:
        rw.close()


def test_a_damaged_hw_file_with_a_live_writer_shows_nothing_unproven(writer, store_path):
    writer.append("a", 0, sync=True)
    writer.do("lock")
    with open(os.path.join(_pdir(store_path), HIGH_WATERMARK_FILE), "r+b") as f:
        f.write(b"\xff" * 14)
    reader = Store.open(store_path, read_only=True)
    try:
        log = reader.partition(TOPIC, 0)
        assert _values(log) == []  # the file proves nothing and the writer is alive: show nothing yet
        writer.append("b", 1, sync=True)  # the writer's next fdatasync rewrites the file
        assert _values(log) == [b"a", b"b"]
    finally:
        reader.close()


def test_a_hw_file_saying_more_than_the_log_holds_is_capped_at_the_log_end(store_path):
    _closed_store_with(store_path, [b"a"])
    with open(os.path.join(_pdir(store_path), HIGH_WATERMARK_FILE), "wb") as f:
        f.write(encode(1000))
    ro = Store.open(store_path, read_only=True)
    try:
        log = ro.partition(TOPIC, 0)
        assert (log.high_watermark, _values(log)) == (1, [b"a"])
    finally:
        ro.close()


def test_the_hw_file_is_neither_an_orphan_nor_unknown_to_the_tools(store_path):
    _closed_store_with(store_path, [b"a"])
    Store.open(store_path).close()  # an open's cleanup of leftovers and orphans
    assert os.path.exists(os.path.join(_pdir(store_path), HIGH_WATERMARK_FILE))
    from txlog.tools.store_check import check_store

    ro = Store.open(store_path, read_only=True)
    try:
        assert list(check_store(ro).findings) == []
    finally:
        ro.close()
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    hw_path = os.path.join(_pdir(store_path), HIGH_WATERMARK_FILE)
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", "inspect", _pdir(store_path), hw_path],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "highWatermark: 1" in proc.stdout.splitlines()


KAFKA_DIRS = os.path.join(os.path.dirname(ROOT), "shared", "fixtures", "kafka-dirs")


def test_a_real_kafka_log_dir_reads_to_its_log_end_and_gets_no_hw_file(tmp_path):
    if not os.path.isdir(KAFKA_DIRS):
        pytest.skip("shared/fixtures/kafka-dirs is not beside the repository")
    root = str(tmp_path / "kafka")
    shutil.copytree(os.path.join(KAFKA_DIRS, "macsakini-gzip-mixed"), root)
    kafka = Store.open(root)
    checked = 0
    try:
        assert kafka.read_only
        for topic in kafka.list_topics(include_internal=False):
            for p in kafka.partitions(topic):
                log = kafka.partition(topic, p)
                assert log.high_watermark == log.log_end_offset > 0
                assert latest_offset(log, RU) == log.log_end_offset
                checked += 1
    finally:
        kafka.close()
    assert checked > 0
    assert not [names for _, _, names in os.walk(root) if HIGH_WATERMARK_FILE in names]
