"""The quiet durable append (PartitionLog._quiet_append) does what the Python path does, and only when it may.

A lone batch's durable append makes its looks, write, fdatasync and HW pwrite in one native call
(storage/native/src/bindings/append.rs, issue 26) when the view's last look vouched for the
directory and the append needs no roll. The Python path is its reference: the same appends made
through both (the Python path forced on the other Store) must leave the same bytes in every file,
the same HW, the same producer state and the same answers and errors. Each change another writer
can make between two appends (an append, a roll, DeleteRecords, an ABORT marker; a second Store on
the directory, or a real second process) must make the native look fall back, and the append
then sees the change. A failed write or fdatasync must leave the partition as the Python path's
failure does. Each test fails if the native path were taken where it must not be, or did less.
"""

from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import storage.partition_log as partition_log
from storage import Store
from storage.errors import KafkaError, KafkaStorageError
from storage.high_watermark import HIGH_WATERMARK_FILE, UNREADABLE, decode, encode
from storage.partition_log import PartitionLog
from storage.records import ControlType, RecordBatch, build_batch, crc32c
from storage.transaction_index import AbortedTxn
from tests.storage.second_process import in_other_process
from txlog.fetch import IsolationLevel, fetch

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "t"
CONFIG = {"segment.bytes": 2048, "index.interval.bytes": 200}  # rolls and index entries every few appends
TS = int(time.time() * 1000)  # recent: retention keeps every segment


def idempotent(value: bytes, seq: int, *, pid: int = 7, epoch: int = 0, ts: int = TS) -> bytes:
    return build_batch([(b"k", value, (), ts)], producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def plain(value: bytes, ts: int = TS) -> bytes:
    return build_batch([(None, value, (), ts)])


@pytest.fixture
def statuses(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Every status the native call answered (0 written, 1 fell back, 2/3 failed) during the test."""
    seen: list[int] = []
    real = partition_log.quiet_append

    def counting(*args):
        status, errno = real(*args)
        seen.append(status)
        return status, errno

    monkeypatch.setattr(partition_log, "quiet_append", counting)
    yield seen


def python_only(log: PartitionLog) -> PartitionLog:
    """The view with its quiet path off: every append takes the Python path (the reference)."""
    log._quiet_append = lambda *_: None  # type: ignore[method-assign]
    return log


def vouching(store: Store) -> PartitionLog:
    """Partition 0 of TOPIC, its directory's mtime long past (its key can vouch) and looked at once."""
    log = store.partition(TOPIC, 0)
    past = time.time_ns() - 10_000_000_000
    os.utime(store.partition_dir(TOPIC, 0), ns=(past, past))
    log.append(plain(b"first"))
    log.append(plain(b"second"))  # the look after the key moved: now it vouches
    return log


def files(directory: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(directory)):
        if name != partition_log.LOCK_FILE:
            with open(os.path.join(directory, name), "rb") as f:
                out[name] = f.read()
    return out


@contextmanager
def twin_logs(tmp_path: Path, config: dict | None = None) -> Iterator[list[PartitionLog]]:
    """Partition 0 of TOPIC in two stores, [quiet path on, Python path only], each vouching; closed at
    the end, after which every file of the two partitions must hold the same bytes."""
    roots = [str(tmp_path / "native"), str(tmp_path / "python")]
    stores = [Store.open(r) for r in roots]
    try:
        for s in stores:
            s.create_topic(TOPIC, 1, config)
        yield [vouching(stores[0]), python_only(vouching(stores[1]))]
        for s in stores:
            s.close()
        assert files(os.path.join(roots[0], f"{TOPIC}-0")) == files(os.path.join(roots[1], f"{TOPIC}-0"))
    finally:
        for s in stores:
            s.close()


def outcome(log: PartitionLog, data: bytes) -> object:
    try:
        return log.append(data)
    except KafkaError as exc:
        return (type(exc).__name__, str(exc))


def test_the_native_and_python_paths_leave_the_same_files_state_and_answers(tmp_path, statuses):
    with twin_logs(tmp_path, CONFIG) as (native, python):
        seq = 0
        for step in range(120):
            if step % 4 == 0:
                data = idempotent(b"v%03d" % seq + b"y" * (step % 50), seq, ts=TS + step)
                seq += 1
            elif step % 4 == 1:
                data = idempotent(b"v%03d" % (seq - 1) + b"y" * ((step - 1) % 50), seq - 1, ts=TS + step - 1)
            elif step % 4 == 2:
                data = idempotent(b"gap", seq + 5)  # out of order: refused
            else:
                data = plain(b"p%03d" % step + b"x" * (step % 40), ts=TS + 1000 - step)
            assert outcome(native, data) == outcome(python, data), f"step {step}"
            assert native.high_watermark == python.high_watermark
            assert native.producer_states() == python.producer_states()
        assert statuses.count(0) > 40, statuses  # the native path really wrote most of them
        assert len(native.segments) >= 3  # rolls, and index entries, were on the way


def test_several_producers_under_a_cap_leave_the_same_state_in_the_same_order(tmp_path, statuses):
    """Producers taking turns, with retries, under max.producer.ids: the order of the producer table
    (least recently written first: who the cap evicts, and the order of every snapshot's entries,
    compared in the files) must come out of the quiet append's bookkeeping as out of the Python path's."""
    with twin_logs(tmp_path, {**CONFIG, "max.producer.ids": 3}) as logs:
        seqs = dict.fromkeys(range(4), 0)
        for step in range(160):
            pid = (step * 7) % 4 if step % 9 else 3  # four producers, three fit: one is evicted now and then
            seq = seqs[pid] - 1 if step % 5 == 4 and seqs[pid] else seqs[pid]  # every fifth a retry
            data = idempotent(b"%d-%d" % (pid, seq) + b"z" * (step % 30), seq, pid=pid, ts=TS + step)
            answers = [outcome(log, data) for log in logs]
            assert answers[0] == answers[1], f"step {step}"
            if not isinstance(answers[0], tuple):
                seqs[pid] = seq + 1
            elif "UnknownProducerId" in answers[0][0]:  # evicted: it starts again, as a new producer would
                seqs[pid] = 0
            assert list(logs[0].producer_states().items()) == list(logs[1].producer_states().items()), step
        assert statuses.count(0) > 40, statuses
        assert len(logs[0].segments) >= 3  # rolls, so snapshots of the table, were on the way


def test_an_epoch_bump_and_a_fenced_epoch_answer_alike(tmp_path, statuses):
    with twin_logs(tmp_path) as logs:
        steps = [
            idempotent(b"a", 0),
            idempotent(b"b", 0, epoch=1),  # a bump: sequence 0 again
            idempotent(b"c", 1, epoch=0),  # the old epoch: fenced
            idempotent(b"d", 1, epoch=1),
        ]
        answers = [tuple(outcome(log, data) for log in logs) for data in steps]
        assert all(a == b for a, b in answers), answers
        assert isinstance(answers[2][0], tuple)  # the fenced one was refused
        assert statuses.count(0) >= 3
        assert logs[0].producer_states() == logs[1].producer_states()


def other_change(store: Store, how: str) -> None:
    theirs = store.partition(TOPIC, 0)
    if how == "append":
        theirs.append(plain(b"theirs"))
    elif how == "roll":
        theirs.roll()
    elif how == "delete_records":
        theirs.delete_records(theirs.log_end_offset - 1)
    elif how == "abort":
        txn = build_batch(
            [(None, b"txn", (), TS)], producer_id=99, producer_epoch=0, base_sequence=0, is_transactional=True
        )
        theirs.append(txn, sync=False)
        theirs.append_marker(ControlType.ABORT, 99, 0)


@pytest.mark.parametrize("how", ["append", "roll", "delete_records", "abort"])
def test_a_change_by_another_store_makes_the_next_append_fall_back(store_path, statuses, how):
    store = Store.open(store_path)
    other = Store.open(store_path)
    try:
        store.create_topic(TOPIC, 1)
        mine = vouching(store)
        mine.append(plain(b"quiet"))
        assert statuses[-1:] == [0]
        end = mine.log_end_offset
        other_change(other, how)  # its open of the partition alone changes the directory
        theirs_end = other.partition(TOPIC, 0).log_end_offset
        statuses.clear()
        result = mine.append(plain(b"after"))
        assert statuses in ([], [1]), statuses  # never written natively
        assert result.base_offset == theirs_end >= end
        assert mine.log_end_offset == theirs_end + 1
        if how == "delete_records":
            assert mine.log_start_offset == end - 1
        if how == "abort":
            assert [a.producer_id for a in mine.aborted_transactions(0, mine.log_end_offset)] == [99]
        past = time.time_ns() - 5_000_000_000
        os.utime(other.partition_dir(TOPIC, 0), ns=(past, past))  # a key that can vouch, once looked at
        statuses.clear()
        mine.append(plain(b"quiet again"))
        mine.append(plain(b"and again"))
        if how == "abort":
            settle_txn_index(mine)  # the abort's `.txnindex`, as the directory, no longer of this clock tick
            mine.append(plain(b"looks at the file once more"))
            statuses.clear()
            mine.append(plain(b"quiet with a .txnindex"))
        assert statuses[-1:] == [0]  # the view caught up, looked again, and vouches again
    finally:
        other.close()
        store.close()


def test_a_real_second_process_append_between_two_sends_is_seen(store_path, statuses):
    store = Store.open(store_path)
    try:
        store.create_topic(TOPIC, 1)
        mine = vouching(store)
        mine.append(plain(b"quiet"))
        assert statuses[-1:] == [0]
        program = textwrap.dedent(
            f"""
            from storage import Store
            from storage.records import build_batch
            with Store.open({store_path!r}) as s:
                s.partition({TOPIC!r}, 0).append(build_batch([(None, b"theirs", (), {TS})]))
            """
        )
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        subprocess.run([sys.executable, "-c", program], check=True, env=env)
        statuses.clear()
        assert mine.append(plain(b"mine")).base_offset == 4
        assert statuses in ([], [1])
        values = [r.value for b in mine.read(0) for r in b.records()]
        assert values == [b"first", b"second", b"quiet", b"theirs", b"mine"]
    finally:
        store.close()


def test_a_failed_write_is_cut_back_as_the_python_path_cuts_it(tmp_path):
    """RLIMIT_FSIZE makes the write fail part way (EFBIG after a short write), in a child process."""
    answers = {}
    for path in ("native", "python"):
        root = str(tmp_path / path)
        program = textwrap.dedent(
            f"""
            import os, resource, time
            import storage.partition_log as pl
            from storage import Store
            from storage.records import build_batch
            def one(v): return build_batch([(None, v, (), {TS})])
            with Store.open({root!r}) as s:
                s.create_topic("t", 1)
                log = s.partition("t", 0)
                if {path!r} == "python":
                    log._quiet_append = lambda *_: None
                past = time.time_ns() - 10_000_000_000
                os.utime(s.partition_dir("t", 0), ns=(past, past))
                log.append(one(b"a")); log.append(one(b"b"))
                size = log.segments[-1].size
                soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
                resource.setrlimit(resource.RLIMIT_FSIZE, (size + 30, hard))
                try:
                    log.append(one(b"c" * 100))
                except Exception as exc:
                    print(type(exc).__name__, exc)
                resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
                print(os.path.getsize(log.segments[-1].log_path) == size, log.log_end_offset)
                print(log.append(one(b"d")).base_offset, log.high_watermark)
            """
        )
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, check=True)
        answers[path] = done.stdout
    assert answers["native"] == answers["python"]
    assert answers["native"].splitlines() == ["KafkaStorageError write failed: File too large", "True 2", "2 3"]


def test_a_failed_fdatasync_fails_the_partition_as_the_python_path_does(tmp_path, monkeypatch):
    """The native call's fdatasync failure, stood in for (the bytes written, status SYNC_FAILED with EIO),
    against the Python path's fdatasync raising EIO: the same error, the same refusal after it, the
    same recovery at reopen."""
    import errno as errnos

    def written_then_eio(
        directory,
        mtime,
        ino,
        log_fd,
        size,
        txn_path,
        txn_size,
        txn_mtime,
        data,
        epoch,
        hw_fd,
        hw,
        batch,
        entry,
        base,
        max_ts,
    ):
        batch.stamp_offset_into(data, 0, base, epoch, max_ts)  # as the native call stamps before its write
        os.write(log_fd, data)
        return 3, errnos.EIO

    answers = {}
    for path in ("native", "python"):
        root = str(tmp_path / path)
        with Store.open(root) as s:
            s.create_topic(TOPIC, 1)
            log = vouching(s)
            with monkeypatch.context() as m:
                if path == "native":
                    m.setattr(partition_log, "quiet_append", written_then_eio)
                else:
                    python_only(log)

                    def eio(fd):
                        raise OSError(errnos.EIO, os.strerror(errnos.EIO))

                    m.setattr(os, "fdatasync", eio)
                    m.setattr(partition_log, "_os_calls_own", lambda: True)
                failed = outcome(log, plain(b"lost?"))
            refused = outcome(log, plain(b"refused"))
            answers[path] = (failed, refused, log.failed, log.high_watermark)
            try:
                s.close()
            except KafkaStorageError:
                pass
        with Store.open(root) as s:
            answers[path] += (s.partition(TOPIC, 0).log_end_offset,)
    assert answers["native"] == answers["python"]
    assert answers["native"][0] == ("KafkaStorageError", "fsync failed: Input/output error")
    assert answers["native"][2] is True


def test_a_replaced_os_function_keeps_appends_on_the_python_path(store_path, statuses, monkeypatch):
    """Fault plans and crash workers replace os functions to inject failures: they must see every call."""
    calls = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (calls.append(fd), real(fd))[1])
    store = Store.open(store_path)
    try:
        store.create_topic(TOPIC, 1)
        log = vouching(store)
        calls.clear()
        for i in range(3):
            log.append(plain(b"%d" % i))
        assert statuses == [] and len(calls) == 3
    finally:
        store.close()


def _random_step(rng: random.Random, producers: dict[int, list], sent: dict[int, list[bytes]], step: int):
    """One random append or marker: (kind, pid, data or marker args). `producers`: pid -> [epoch, next
    seq, transactional]; `sent`: pid -> the producer's last batches' bytes (retries re-send them)."""
    pid = rng.choice(sorted(producers))
    epoch, seq, txn = producers[pid]
    count = rng.choice((1, 1, 2, 3))
    ts = TS + step
    roll = rng.random()
    if roll < 0.12 and sent[pid]:
        return "retry", pid, rng.choice(sent[pid][-6:])  # one of the last 5 (or the 6th: no longer a dup)
    if roll < 0.18:
        seq = rng.choice((seq + 1 + rng.randrange(3), max(seq - 1 - rng.randrange(3), 0)))  # out of order
    elif roll < 0.23:
        epoch, seq = epoch + 1, rng.choice((0, 0, 0, 2))  # a bump (a new epoch starts at 0)
    elif roll < 0.27:
        epoch = max(epoch - 1, 0)  # an older epoch: fenced
    elif roll < 0.31:
        pid, epoch, seq = 100 + step, 0, rng.choice((0, 1 + rng.randrange(5)))  # unknown: only 0 may start
    elif roll < 0.36:
        return "plain", -1, build_batch([(b"k", b"p%d" % step, (), ts)] * count)
    elif roll < 0.45 and txn:
        control = rng.choice((ControlType.COMMIT, ControlType.ABORT))
        return "marker", pid, (control, pid, epoch, rng.choice((0, 1, 2)), ts)
    elif roll < 0.5:
        txn = not txn  # a non-transactional batch in an open transaction, or the reverse
    records = [(b"k%d" % i, b"v%d-%d" % (step, i), (), ts) for i in range(count)]
    data = build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn)
    return "data", pid, data


def _advance(producers: dict[int, list], sent: dict[int, list[bytes]], pid: int, data: bytes) -> None:
    """What the producer side knows after an accepted new batch: its epoch and next sequence."""
    batch = RecordBatch.parse(data, 0)
    state = producers.setdefault(pid, [batch.producer_epoch, 0, batch.is_transactional])
    state[0], state[1] = batch.producer_epoch, batch.last_sequence + 1
    sent.setdefault(pid, []).append(data)


@pytest.mark.parametrize("seed", range(6))
def test_random_lone_appends_and_markers_answer_alike_on_both_paths(tmp_path, statuses, seed):
    """Differential: random lone appends (new data, retries of the last 5 and older, out-of-order
    sequences, epoch bumps, fenced epochs, unknown producers starting at 0 or not, transactional
    and not, batches of several records) with markers in between, through the quiet append and
    through the Python path (the reference): every answer and error (type and message), the HW,
    `producer_states()` and, at the end, every file's bytes (segments, indexes, snapshots) agree."""
    rng = random.Random(seed)
    with twin_logs(tmp_path, CONFIG) as logs:
        producers: dict[int, list] = {7: [0, 0, False], 8: [0, 0, False], 9: [0, 0, True], 10: [3, 0, True]}
        sent: dict[int, list[bytes]] = {pid: [] for pid in producers}
        for step in range(160):
            kind, pid, what = _random_step(rng, producers, sent, step)
            if kind == "marker":
                answers = [marker_outcome(log, what) for log in logs]
            else:
                answers = [outcome(log, what) for log in logs]
            assert answers[0] == answers[1], f"step {step}: {kind} {answers}"
            if kind == "data" and not isinstance(answers[0], tuple) and not answers[0].duplicate:
                _advance(producers, sent, pid, what)
            elif kind == "marker" and not isinstance(answers[0], tuple):
                producers[pid][0] = what[2]
            assert logs[0].high_watermark == logs[1].high_watermark, step
            assert list(logs[0].producer_states().items()) == list(logs[1].producer_states().items()), step
        assert statuses.count(0) > 40, statuses  # the quiet path really wrote many of them
        assert statuses.count(1) > 10, statuses  # and judged retries and refusals to fall back
        assert len(logs[0].segments) >= 3  # rolls, so producer snapshots, were on the way


def marker_outcome(log: PartitionLog, args: tuple) -> object:
    try:
        return log.append_marker(*args)
    except KafkaError as exc:
        return (type(exc).__name__, str(exc))


def understated(seq: int) -> bytearray:
    """A producer's two-record batch whose header maxTimestamp is its first record's, not its last's
    (its CRC made to match): the leader must stamp the true one (docs/kafka-formats.md §1.2)."""
    data = bytearray(
        build_batch(
            [(b"k", b"a", (), TS), (b"k", b"b", (), TS + 500)], producer_id=7, producer_epoch=0, base_sequence=seq
        )
    )
    data[35:43] = TS.to_bytes(8, "big", signed=True)
    data[17:21] = crc32c(bytes(data[21:])).to_bytes(4, "big")
    return data


def test_the_quiet_stamp_corrects_an_understated_max_timestamp_as_the_python_path_does(tmp_path, statuses):
    """The quiet call stamps the batch itself (codec::stamp_offset, the rule stamp_offset_into calls):
    base offset, leader epoch, and a maxTimestamp the header understated, with the CRC recomputed for
    it. Both paths, given a trusted bytearray and untrusted bytes, leave the same bytes, and the
    batch read back has the true maxTimestamp and a valid CRC."""
    with twin_logs(tmp_path, CONFIG) as logs:
        statuses.clear()
        for log in logs:
            assert log.append(understated(0), trusted=True).base_offset == 2
            assert log.append(bytes(understated(2))).base_offset == 4
        assert statuses == [0, 0]  # both appends of the native side were quiet
        for log in logs:
            stamped = log.read(2)
            assert [(b.base_offset, b.max_timestamp, b.partition_leader_epoch) for b in stamped] == [
                (2, TS + 500, partition_log.LEADER_EPOCH),
                (4, TS + 500, partition_log.LEADER_EPOCH),
            ]
            assert all(b.is_valid() for b in stamped)


def test_the_quiet_pwrite_leaves_the_documented_hw_file(tmp_path, statuses):
    """The quiet call encodes the HW itself (storage/native/src/high_watermark.rs, the code
    storage.high_watermark's encode and decode call): the file holds storage/high_watermark.py's
    layout, spelled out here independently (int16 version 0, int64 HW, CRC-32C of those 10 bytes)."""
    with Store.open(str(tmp_path)) as s:
        s.create_topic(TOPIC, 1)
        log = vouching(s)
        statuses.clear()
        log.append(idempotent(b"v", 0))
        assert statuses == [0]
        with open(os.path.join(s.partition_dir(TOPIC, 0), HIGH_WATERMARK_FILE), "rb") as f:
            stored = f.read()
    body = struct.pack(">hq", 0, 3)
    assert stored == body + struct.pack(">I", crc32c(body))
    assert (decode(stored), decode(stored[:13]), decode(stored[:9] + bytes([stored[9] ^ 1]) + stored[10:])) == (
        3,
        UNREADABLE,
        UNREADABLE,
    )
    assert encode(3) == stored


# ---- an abort in the active segment: the `.txnindex` look (PartitionLog._quiet_append) -------------------

PAST = time.time_ns() - 20_000_000_000  # a directory and `.txnindex` mtime whose key can vouch


def settle_txn_index(log: PartitionLog) -> None:
    """Put the active segment's `.txnindex` mtime (and the directory's) at PAST: a key taken of them
    now is no longer of this clock tick (`racy`), as it is once a tick has passed after an abort."""
    os.utime(log.segments[-1].txn_index.path, ns=(PAST, PAST))
    os.utime(log.directory, ns=(PAST, PAST))


def transactional(value: bytes, pid: int, seq: int = 0) -> bytes:
    return build_batch(
        [(None, value, (), TS)], producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True
    )


def abort_in_active_segment(log: PartitionLog, pid: int) -> None:
    """A transaction of `pid` written and aborted in the active segment (which then has a `.txnindex`),
    then looked at by two appends on a settled directory: the next lone append may be quiet."""
    log.append(transactional(b"aborted", pid), sync=False)
    log.append_marker(ControlType.ABORT, pid, 0, timestamp=TS)  # the same marker bytes in twin logs
    settle_txn_index(log)
    log.append(plain(b"looks"))
    log.append(plain(b"vouched"))


def committed_values(log: PartitionLog) -> list[bytes | None]:
    """What a read_committed fetch of the partition gives, from its start."""
    out: list[bytes | None] = []
    offset = log.log_start_offset
    while True:
        res = fetch(log, offset, IsolationLevel.READ_COMMITTED, max_records=50)
        if res.next_offset == offset:
            return out
        out.extend(r.value for r in res.records)
        offset = res.next_offset


def test_after_an_abort_in_the_active_segment_both_paths_agree(tmp_path, statuses):
    """Differential after an abort with data in the active segment (no roll: the `.txnindex` stays the
    active one's): idempotent sends, retries, refused sequences, plain batches and another transaction
    aborted, through the quiet path and the Python path. Every answer, the HW, `producer_states()`, the
    aborted transactions and read_committed reads agree, and at the end every file's bytes; and the
    quiet path really wrote (before the `.txnindex` look it never did until the next roll)."""
    with twin_logs(tmp_path) as logs:
        for log in logs:
            abort_in_active_segment(log, 99)
        statuses.clear()
        seq = 0
        for step in range(60):
            if step == 30:
                for log in logs:
                    abort_in_active_segment(log, 98)
                continue
            if step % 3 == 0:
                data = idempotent(b"v%03d" % seq, seq, ts=TS + step)
                seq += 1
            elif step % 3 == 1:
                data = idempotent(b"v%03d" % (seq - 1), seq - 1, ts=TS + step - 1)  # a retry
            elif step % 6 == 2:
                data = idempotent(b"gap", seq + 3)  # out of order: refused
            else:
                data = plain(b"p%03d" % step)
            assert outcome(logs[0], data) == outcome(logs[1], data), f"step {step}"
            assert logs[0].high_watermark == logs[1].high_watermark
            assert list(logs[0].producer_states().items()) == list(logs[1].producer_states().items())
        assert [len(log.segments) for log in logs] == [1, 1]
        aborted = [log.aborted_transactions(0, log.log_end_offset) for log in logs]
        assert aborted[0] == aborted[1] and [a.producer_id for a in aborted[0]] == [99, 98]
        assert committed_values(logs[0]) == committed_values(logs[1])
        assert b"aborted" not in committed_values(logs[0])
        assert statuses.count(0) >= 25, statuses  # the quiet path wrote the new batches
        assert statuses.count(1) >= 10, statuses  # and sent retries and refusals to the Python path


def test_a_second_process_abort_between_two_quiet_appends_is_seen(store_path, statuses):
    """A real second process writes a transaction and aborts it (its `.txnindex` entry and marker)
    between two quiet appends of a writer whose active segment already has a `.txnindex`: the next
    append falls back, lands after the marker, and the next read_committed read drops the aborted
    records; once the view looked again the quiet path resumes, with the new abort still seen."""
    store = Store.open(store_path)
    try:
        store.create_topic(TOPIC, 1)
        mine = vouching(store)
        abort_in_active_segment(mine, 99)
        statuses.clear()
        mine.append(plain(b"quiet"))
        assert statuses == [0]
        in_other_process(
            store_path,
            TOPIC,
            f"""
            log.append({transactional(b"theirs aborted", 98)!r}, sync=False)
            log.append_marker(ControlType.ABORT, 98, 0)
            """,
        )
        statuses.clear()
        assert mine.append(plain(b"after")).base_offset == 9  # past their data (7) and their marker (8)
        assert statuses in ([], [1])  # never written natively
        assert [a.producer_id for a in mine.aborted_transactions(0, mine.log_end_offset)] == [99, 98]
        expected = [b"first", b"second", b"looks", b"vouched", b"quiet", b"after"]
        assert committed_values(mine) == expected
        settle_txn_index(mine)
        mine.append(plain(b"looks again"))
        statuses.clear()
        mine.append(plain(b"quiet again"))
        assert statuses == [0]
        assert committed_values(mine) == [*expected, b"looks again", b"quiet again"]
    finally:
        store.close()


def test_a_dead_writer_abort_entry_between_two_quiet_appends_is_dropped(store_path, statuses):
    """A second process makes an abort's `.txnindex` entry durable for a transaction whose data the
    writer has already seen, and dies before the marker (os._exit, its flock gone as with kill -9):
    the entry names the offset the writer's next append takes, and only grew a `.txnindex` already
    there (the directory and the `.log` unchanged). The next append must not be quiet: it falls back,
    its catch-up drops the entry, and the batch is no abort marker to any reader. Written natively
    (the `.txnindex` look left out, tried as a mutation), the entry would stay and hide the open
    transaction's records and name the batch its marker."""
    store = Store.open(store_path)
    try:
        store.create_topic(TOPIC, 1)
        mine = vouching(store)
        abort_in_active_segment(mine, 99)
        in_other_process(store_path, TOPIC, f"log.append({transactional(b'open txn', 98)!r})")
        open_at = mine.append(plain(b"sees their data")).base_offset - 1
        settle_txn_index(mine)
        mine.append(plain(b"looks"))
        statuses.clear()
        mine.append(plain(b"quiet"))
        assert statuses == [0]
        start = mine.log_end_offset
        in_other_process(
            store_path,
            TOPIC,
            f"""
            active = log.segments[-1]
            active.txn_index.append(AbortedTxn(98, {open_at}, log.log_end_offset, {open_at}))
            active.txn_index.flush()
            os._exit(0)
            """,
        )
        os.utime(mine.directory, ns=(PAST, PAST))  # as before: their open may have written a snapshot
        statuses.clear()
        assert mine.append(plain(b"mine")).base_offset == start
        assert statuses == [1]  # the look at the `.txnindex` fell back
        own = mine.aborted_transactions(0, mine.log_end_offset)
        assert [a.producer_id for a in own] == [99]
        fresh = PartitionLog(mine.directory, TOPIC, 0, mine.config, read_only=True)
        try:
            stored = fresh.segments[-1].txn_index.stored_entries()
            assert [AbortedTxn(*entry[1:]) for entry in stored] == own
        finally:
            fresh.close()
    finally:
        store.close()


def test_a_txnindex_changed_in_place_makes_the_next_append_fall_back(store_path, statuses):
    """The look compares the `.txnindex`'s mtime as well as its size: a file of the same size written
    again (another process's repair rewrites it in place, `LogLoader.rewrite_txn_index`) is not the
    one the view checked, and the next append takes the Python path, which looks at it again."""
    store = Store.open(store_path)
    try:
        store.create_topic(TOPIC, 1)
        mine = vouching(store)
        abort_in_active_segment(mine, 99)
        path = mine.segments[-1].txn_index.path
        with open(path, "r+b") as f:
            content = f.read()
            f.seek(0)
            f.write(content)  # the same bytes: only the mtime moves
        statuses.clear()
        mine.append(plain(b"after the rewrite"))
        assert statuses == [1]
        settle_txn_index(mine)  # a tick later, as far as the file's mtime can tell
        mine.append(plain(b"looks again"))  # the Python path's look takes the new key
        mine.append(plain(b"quiet again"))
        assert statuses[-1] == 0
    finally:
        store.close()


def test_a_txnindex_key_from_the_clock_tick_of_its_look_does_not_vouch(store_path, statuses, monkeypatch):
    """A `.txnindex` whose mtime is not older than the look that took its key (`racy`) keeps the tail
    from being quiet: another process's entry in the same tick could leave size and mtime as they
    were. The look is put in the tick of the file's mtime (the stamping clock frozen there, the
    directory's mtime well before it, so its key can vouch); no append is quiet then, and once the
    clock moves on the next look vouches. Kept without the check (tried as a mutation), it is quiet."""
    store = Store.open(store_path)
    try:
        store.create_topic(TOPIC, 1)
        mine = vouching(store)
        abort_in_active_segment(mine, 99)
        os.utime(mine.directory, ns=(PAST - 10_000_000_000, PAST - 10_000_000_000))
        statuses.clear()
        with monkeypatch.context() as m:
            m.setattr(partition_log, "stamp_clock_ns", lambda: PAST)  # every look in the file's tick
            mine.append(plain(b"looks"))  # tried on the old key: the moved directory makes it fall back
            mine.append(plain(b"not quiet"))  # that look kept no key: not even tried
        assert statuses == [1]
        mine.append(plain(b"looks a tick later"))
        mine.append(plain(b"quiet"))
        assert statuses == [1, 0]
    finally:
        store.close()
