"""Scenarios of docs/reliability-scenarios.md for the segment store.

Covered here: 1, 2, 3, 4, 5, 6, 7, 9, 48, 50, 53, 54, 58, plus the producer-state and
marker rules of docs/kafka-formats.md §5.1/§5.5 (client control batches, non-transactional
writes inside a transaction, epoch restarts, sequence wrap-around, idempotent markers,
coordinator fencing, and the LogSegmentTest transaction-index example).

"RU" is every data record below the log end; "RC" is the committed data below the last
stable offset, computed here independently of the store (a transactional batch counts as
committed when the next marker of its producer is a COMMIT).
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import time

import pytest
from crc32c import crc32c

from storage import Store
from storage.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    KafkaStorageError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    TransactionCoordinatorFencedError,
    UnknownProducerIdError,
)
from storage.log_files import segment_filename, snapshot_filename
from storage.records import Compression, ControlType, build_batch, build_control_batch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INT32_MAX = 2**31 - 1
SNAP_HEADER = struct.Struct(">hIi")
SNAP_ENTRY = struct.Struct(">qhiqiqiq")
TXN_ENTRY = struct.Struct(">hqqqq")


# ---- helpers ------------------------------------------------------------------------------------------


def now_ms() -> int:
    return int(time.time() * 1000)


def batch(values, *, pid=-1, epoch=-1, seq=-1, txn=False, ts=None, compression=Compression.NONE) -> bytes:
    ts = now_ms() if ts is None else ts
    return build_batch(
        [(None, v, None, ts) for v in values],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
        compression=compression,
    )


def pbatch(pid, seq, n=1, *, epoch=0, txn=False, tag=None, ts=None) -> bytes:
    """An idempotent batch of n records whose values name (pid, epoch, seq)."""
    tag = tag or f"p{pid}e{epoch}"
    return batch([f"{tag}s{seq + i}".encode() for i in range(n)], pid=pid, epoch=epoch, seq=seq, txn=txn, ts=ts)


def pdir(store_path, topic="t", p=0) -> str:
    return os.path.join(store_path, f"{topic}-{p}")


def log_paths(directory) -> list[str]:
    return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".log"))


def log_bytes(directory) -> int:
    return sum(os.path.getsize(p) for p in log_paths(directory))


def snapshots(directory) -> list[tuple[int, str]]:
    out = []
    for n in os.listdir(directory):
        if n.endswith(".snapshot") and n[:-9].isdigit():
            out.append((int(n[:-9]), os.path.join(directory, n)))
    return sorted(out)


def decode_snapshot(path) -> list[tuple]:
    """docs/kafka-formats.md §3.6, decoded independently of the store; raises AssertionError if invalid."""
    with open(path, "rb") as f:
        data = f.read()
    assert len(data) >= SNAP_HEADER.size, f"{path}: truncated"
    version, crc, count = SNAP_HEADER.unpack_from(data)
    assert version == 1, f"{path}: version {version}"
    assert crc32c(data[6:]) == crc, f"{path}: CRC mismatch"
    assert len(data) == SNAP_HEADER.size + count * SNAP_ENTRY.size, f"{path}: wrong size"
    return [SNAP_ENTRY.unpack_from(data, SNAP_HEADER.size + i * SNAP_ENTRY.size) for i in range(count)]


def encode_snapshot(entries) -> bytes:
    body = struct.pack(">i", len(entries)) + b"".join(SNAP_ENTRY.pack(*e) for e in entries)
    return struct.pack(">hI", 1, crc32c(body)) + body


def txn_entries(directory) -> list[tuple]:
    out = []
    for n in sorted(os.listdir(directory)):
        if n.endswith(".txnindex"):
            with open(os.path.join(directory, n), "rb") as f:
                data = f.read()
            assert len(data) % TXN_ENTRY.size == 0, f"{n}: {len(data)} bytes"
            out.extend(TXN_ENTRY.iter_unpack(data))
    return out


def all_batches(log):
    return log.read(log.log_start_offset, max_bytes=1 << 40)


def views(log) -> tuple[list, list]:
    """(RU, RC) as lists of (offset, value)."""
    batches = all_batches(log)
    lso = log.last_stable_offset
    pending: dict[int, list[int]] = {}
    committed: set[int] = set()
    for i, b in enumerate(batches):
        if b.is_control:
            marker = b.control_marker()
            for j in pending.pop(b.producer_id, []):
                if marker.is_commit:
                    committed.add(j)
        elif b.is_transactional:
            pending.setdefault(b.producer_id, []).append(i)
    ru, rc = [], []
    for i, b in enumerate(batches):
        if b.is_control:
            continue
        recs = [(r.offset, r.value) for r in b.records()]
        ru.extend(recs)
        if b.last_offset < lso and (not b.is_transactional or i in committed):
            rc.extend(recs)
    return ru, rc


def values(view) -> list[bytes]:
    return [v for _, v in view]


def assert_once(log, expected_values: list[bytes]):
    """RU and RC (no transactions involved) both hold exactly `expected_values`, in order, once each."""
    ru, rc = views(log)
    assert values(ru) == expected_values
    assert values(rc) == expected_values
    assert [o for o, _ in ru] == sorted({o for o, _ in ru})


def fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def append_in_child(store_path, ops, topic="t", partition=0) -> list[list[int]]:
    """Run appends in a separate process that then dies without closing anything (kill -9).

    Each op is batch bytes (an append) or ("marker", control_type, pid, epoch, coordinator_epoch).
    """
    script = (
        "import json, os, sys\n"
        f"sys.path.insert(0, {ROOT!r})\n"
        "from storage import Store\n"
        "from storage.records import ControlType\n"
        "args = json.loads(sys.stdin.read())\n"
        "log = Store.open(args['path']).partition(args['topic'], args['partition'])\n"
        "out = []\n"
        "for op in args['ops']:\n"
        "    if isinstance(op, str):\n"
        "        r = log.append(bytes.fromhex(op))\n"
        "    else:\n"
        "        r = log.append_marker(ControlType(op[1]), op[2], op[3], coordinator_epoch=op[4])\n"
        "    out.append([r.base_offset, r.last_offset, int(r.duplicate)])\n"
        "sys.stdout.write(json.dumps(out)); sys.stdout.flush()\n"
        "os._exit(0)\n"
    )
    encoded = [op.hex() if isinstance(op, bytes) else [op[0], int(op[1]), *op[2:]] for op in ops]
    args = {"path": store_path, "topic": topic, "partition": partition, "ops": encoded}
    proc = subprocess.run(
        [sys.executable, "-c", script], input=json.dumps(args), capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def topic(store):
    store.create_topic("t", partitions=1)
    return store.partition("t", 0)


# ---- A. idempotent producer -----------------------------------------------------------------------------


def test_scenario1_retry_of_acknowledged_batch(store, store_path, topic):
    log = topic
    b = pbatch(7, 0, n=5)
    first = log.append(b)
    assert (first.base_offset, first.last_offset, first.duplicate) == (0, 4, False)
    size = log_bytes(pdir(store_path))
    again = log.append(b)
    assert (again.base_offset, again.last_offset, again.duplicate) == (0, 4, True)
    assert log_bytes(pdir(store_path)) == size
    assert log.log_end_offset == 5
    assert_once(log, [f"p7e0s{i}".encode() for i in range(5)])
    store.close()
    s2 = Store.open(store_path)
    log2 = s2.partition("t", 0)
    r = log2.append(b)  # the retry is still recognised after a clean restart
    assert (r.base_offset, r.last_offset, r.duplicate) == (0, 4, True)
    assert_once(log2, [f"p7e0s{i}".encode() for i in range(5)])
    s2.close()


def test_scenario2_retry_older_than_the_window_is_out_of_order(store_path, topic):
    log = topic
    sent = [pbatch(7, seq) for seq in range(6)]
    for seq, b in enumerate(sent):
        assert log.append(b).base_offset == seq
    size = log_bytes(pdir(store_path))
    with pytest.raises(OutOfOrderSequenceError):  # pinned: Kafka's answer (5-batch window)
        log.append(sent[0])
    assert log_bytes(pdir(store_path)) == size and log.log_end_offset == 6
    for seq in range(1, 6):  # the last five are still answered as duplicates
        r = log.append(sent[seq])
        assert (r.base_offset, r.duplicate) == (seq, True)
    with pytest.raises(OutOfOrderSequenceError):  # a retry that only overlaps a cached batch
        log.append(pbatch(7, 4, n=2))
    assert log_bytes(pdir(store_path)) == size
    assert_once(log, [f"p7e0s{i}".encode() for i in range(6)])


def test_scenario3_sequence_gap_and_epoch_restart(store_path, topic):
    log = topic
    log.append(pbatch(7, 0, n=5))  # seq 0-4 at 0-4
    size = log_bytes(pdir(store_path))
    with pytest.raises(OutOfOrderSequenceError):  # (a) gap
        log.append(pbatch(7, 6))
    assert log.log_end_offset == 5 and log_bytes(pdir(store_path)) == size
    assert log.append(pbatch(7, 5)).base_offset == 5  # the missing one fits
    # (b) epoch bump: the first batch of the new epoch must start at 0
    with pytest.raises(OutOfOrderSequenceError):
        log.append(pbatch(7, 5, epoch=1))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(pbatch(7, 6, epoch=1))
    assert log.log_end_offset == 6
    r = log.append(pbatch(7, 0, epoch=1))
    assert (r.base_offset, r.duplicate) == (6, False)
    assert log.append(pbatch(7, 1, epoch=1)).base_offset == 7
    # the old epoch is fenced now
    with pytest.raises(InvalidProducerEpochError):
        log.append(pbatch(7, 6, epoch=0))
    assert log.producer_states()[7]["producer_epoch"] == 1
    assert_once(log, [f"p7e0s{i}".encode() for i in range(6)] + [b"p7e1s0", b"p7e1s1"])


def test_scenario4_stale_epoch(store_path, topic):
    log = topic
    log.append(pbatch(7, 0, epoch=3))
    size = log_bytes(pdir(store_path))
    for b in (pbatch(7, 1, epoch=2), pbatch(7, 0, epoch=2), pbatch(7, 1, epoch=2, txn=True)):
        with pytest.raises(InvalidProducerEpochError):
            log.append(b)
    with pytest.raises(InvalidProducerEpochError):
        log.append_marker(ControlType.ABORT, 7, 2)
    assert log.log_end_offset == 1 and log_bytes(pdir(store_path)) == size
    assert log.append(pbatch(7, 1, epoch=3)).base_offset == 1
    assert_once(log, [b"p7e3s0", b"p7e3s1"])


def test_scenario5_producer_state_outlives_retention_then_expires(store_path):
    clock = [1_000_000_000_000]
    s = Store.open(store_path, clock=lambda: clock[0])
    s.create_topic(
        "t", partitions=1, config={"segment.bytes": 400, "retention.ms": 60_000, "producer.id.expiration.ms": 3_600_000}
    )
    log = s.partition("t", 0)
    for seq in range(0, 100, 10):
        log.append(pbatch(7, seq, n=10, ts=clock[0]))
    log.roll()
    n_segments = len(log.segments)
    assert n_segments > 2 and log.log_end_offset == 100 and log.segments[-1].size == 0
    clock[0] += 120_000  # past retention, long before producer expiry
    assert log.enforce_retention() == n_segments - 1  # every segment holding seq 0-99
    assert log.log_start_offset == 100 == log.log_end_offset
    assert log.read(100) == []
    crashed = Store.open(store_path, clock=lambda: clock[0])  # a restart right after retention
    assert crashed.partition("t", 0).producer_states()[7]["last_sequence"] == 99
    crashed.close()
    r = log.append(pbatch(7, 100, ts=clock[0]))  # KIP-360: the producer is still known
    assert (r.base_offset, r.duplicate) == (100, False)
    assert log.append(pbatch(7, 100, ts=clock[0])).duplicate
    s.close()

    s = Store.open(store_path, clock=lambda: clock[0])  # and after a restart
    log = s.partition("t", 0)
    assert log.producer_states()[7]["last_sequence"] == 100
    assert log.append(pbatch(7, 101, ts=clock[0])).base_offset == 101

    clock[0] += 3_600_001  # now the producer expires
    end = log.log_end_offset
    with pytest.raises(UnknownProducerIdError):
        log.append(pbatch(7, 102, ts=clock[0]))
    with pytest.raises(UnknownProducerIdError):  # an old retry is not taken for new data either
        log.append(pbatch(7, 101, ts=clock[0]))
    assert log.log_end_offset == end
    assert 7 not in log.producer_states()
    # the client re-initialises (new epoch) and starts over at sequence 0: accepted once
    assert log.append(pbatch(7, 0, epoch=1, ts=clock[0])).base_offset == end
    assert log.append(pbatch(7, 0, epoch=1, ts=clock[0])).duplicate
    ru, rc = views(log)
    assert values(ru) == [b"p7e0s100", b"p7e0s101", b"p7e1s0"] == values(rc)
    s.close()


def test_scenario5_expired_producers_are_dropped_when_the_snapshot_loads(store_path):
    clock = [1_000_000_000_000]
    s = Store.open(store_path, clock=lambda: clock[0])
    s.create_topic("t", partitions=1, config={"producer.id.expiration.ms": 10_000})
    s.partition("t", 0).append(pbatch(7, 0, n=3, ts=clock[0]))
    s.close()
    clock[0] += 10_000
    s = Store.open(store_path, clock=lambda: clock[0])
    log = s.partition("t", 0)
    assert log.producer_states() == {}
    with pytest.raises(UnknownProducerIdError):
        log.append(pbatch(7, 3, ts=clock[0]))
    assert log.log_end_offset == 3
    s.close()


@pytest.mark.parametrize("layout", ["no-snapshot", "snapshot-and-tail"])
def test_scenario6_crash_after_fsync_before_ack(store_path, layout):
    a = Store.open(store_path)
    cfg = {"segment.bytes": 300, "retention.ms": -1} if layout == "snapshot-and-tail" else {}
    a.create_topic("t", partitions=1, config=cfg)
    log_a = a.partition("t", 0)
    sent = [pbatch(7, 2 * i, n=2) for i in range(6)]
    results = [log_a.append(b) for b in sent]
    if layout == "snapshot-and-tail":
        assert len(log_a.segments) > 1 and snapshots(pdir(store_path))
        assert max(o for o, _ in snapshots(pdir(store_path))) < log_a.log_end_offset
    else:
        assert snapshots(pdir(store_path)) == []
    # the process dies here: never closed, the ack was never seen. The restarted one retries.
    b = Store.open(store_path)
    log_b = b.partition("t", 0)
    r = log_b.append(sent[-1])
    assert r.duplicate
    assert (r.base_offset, r.last_offset) == (results[-1].base_offset, results[-1].last_offset)
    r = log_b.append(sent[-2])  # an earlier in-flight batch too
    assert r.duplicate and r.base_offset == results[-2].base_offset
    expected = [f"p7e0s{i}".encode() for i in range(12)]
    assert_once(log_b, expected)
    assert log_b.append(pbatch(7, 12)).base_offset == 12
    b.close()
    c = Store.open(store_path)
    assert_once(c.partition("t", 0), expected + [b"p7e0s12"])
    c.close()
    a.close()


@pytest.mark.parametrize("shutdown", ["crash", "clean"])
@pytest.mark.parametrize("cut", ["boundary", "inside-last", "random-1", "random-2", "random-3"])
def test_scenario7_power_loss_cuts_tail_and_producer_state(store_path, shutdown, cut):
    s = Store.open(store_path)
    s.create_topic("t", partitions=1)
    log = s.partition("t", 0)
    sent = [pbatch(7, 2 * i, n=2) for i in range(5)]  # seq 0-9 at offsets 0-9
    if shutdown == "crash":
        s.close()
        results = append_in_child(store_path, sent)
    else:
        results = [[r.base_offset, r.last_offset, int(r.duplicate)] for r in map(log.append, sent)]
        s.close()
    assert [r[0] for r in results] == [0, 2, 4, 6, 8]
    ends = [sum(len(b) for b in sent[: i + 1]) for i in range(len(sent))]
    segment = log_paths(pdir(store_path))[0]
    assert os.path.getsize(segment) == ends[-1]
    rng = random.Random(cut)
    if cut == "boundary":
        length = ends[2]  # the last two batches were never fsynced
    elif cut == "inside-last":
        length = ends[3] + 20
    else:
        length = rng.randrange(ends[0] + 1, ends[-1])
    os.truncate(segment, length)
    survivors = sum(1 for e in ends if e <= length)

    s = Store.open(store_path)
    log = s.partition("t", 0)
    assert os.path.getsize(segment) == ends[survivors - 1]  # torn tail cut
    assert log.log_end_offset == 2 * survivors
    assert log.producer_states()[7]["last_sequence"] == 2 * survivors - 1
    for _, path in snapshots(pdir(store_path)):  # no snapshot from beyond the cut survives
        assert int(os.path.basename(path)[:20]) <= 2 * survivors
    # the last surviving batch is a duplicate; the lost one is appended, not answered "duplicate"
    r = log.append(sent[survivors - 1])
    assert r.duplicate and r.base_offset == 2 * (survivors - 1)
    r = log.append(sent[survivors])
    assert (r.base_offset, r.duplicate) == (2 * survivors, False)
    for b in sent[survivors + 1 :]:
        assert not log.append(b).duplicate
    expected = [f"p7e0s{i}".encode() for i in range(10)]
    assert_once(log, expected)
    s.close()
    s = Store.open(store_path)
    assert_once(s.partition("t", 0), expected)
    s.close()


def test_scenario9_many_producers_with_a_small_cache(store_path):
    s = Store.open(store_path)
    s.create_topic("t", partitions=1, config={"max.producer.ids": 10})
    log = s.partition("t", 0)
    pids = list(range(1000, 1050))
    acked = {}
    for pid in pids:
        for seq in (0, 1):
            r = log.append(pbatch(pid, seq))
            acked[(pid, seq)] = r.base_offset
    survivors, evicted = pids[-10:], pids[:-10]
    assert sorted(log.producer_states()) == survivors

    def check(log):
        end = log.log_end_offset
        for pid in evicted[::7]:
            for seq in (1, 2):  # a retry or the next batch: refused, never a silent duplicate
                with pytest.raises((UnknownProducerIdError, OutOfOrderSequenceError)):
                    log.append(pbatch(pid, seq))
        assert log.log_end_offset == end
        for pid in survivors[:5]:
            r = log.append(pbatch(pid, 1))
            assert r.duplicate and r.base_offset == acked[(pid, 1)]

    check(log)
    # after a crash (full replay) and after a clean restart the cap and the dedup hold the same way
    crashed = Store.open(store_path)
    assert sorted(crashed.partition("t", 0).producer_states()) == survivors
    check(crashed.partition("t", 0))
    crashed.close()
    s.close()
    s = Store.open(store_path)
    log = s.partition("t", 0)
    assert sorted(log.producer_states()) == survivors
    check(log)
    for pid in survivors:
        assert not log.append(pbatch(pid, 2)).duplicate
    ru, _ = views(log)
    expect = [f"p{pid}e0s{seq}".encode() for pid in pids for seq in (0, 1)]
    expect += [f"p{pid}e0s2".encode() for pid in survivors]
    assert values(ru) == expect
    s.close()


def test_producer_with_open_transaction_is_never_evicted(store):
    store.create_topic("t", partitions=1, config={"max.producer.ids": 3})
    log = store.partition("t", 0)
    log.append(pbatch(1, 0, txn=True))
    for pid in range(100, 120):
        log.append(pbatch(pid, 0))
    states = log.producer_states()
    assert 1 in states and states[1]["current_txn_start_offset"] == 0
    assert log.last_stable_offset == 0
    assert log.append(pbatch(1, 1, txn=True)).base_offset == 21
    log.append_marker(ControlType.ABORT, 1, 1)
    assert log.last_stable_offset == log.log_end_offset == 23


# ---- idempotence and transaction rules ---------------------------------------------------------------------


def test_control_batch_from_a_client_is_invalid(store_path, topic):
    log = topic
    log.append(pbatch(3, 0, txn=True))
    size = log_bytes(pdir(store_path))
    for ctype in (ControlType.COMMIT, ControlType.ABORT):
        forged = build_control_batch(ctype, producer_id=3, producer_epoch=0, timestamp=now_ms())
        with pytest.raises(InvalidRecordError):
            log.append(forged)
        with pytest.raises(InvalidRecordError):  # also when hidden behind a valid batch
            log.append(pbatch(3, 1, txn=True) + forged)
    assert log_bytes(pdir(store_path)) == size
    assert log.open_transactions() == {3: 0} and log.last_stable_offset == 0


def test_non_transactional_batch_inside_open_transaction(store_path, topic):
    log = topic
    log.append(pbatch(5, 0, txn=True))
    size = log_bytes(pdir(store_path))
    with pytest.raises(InvalidTxnStateError):
        log.append(pbatch(5, 1, txn=False))
    assert log_bytes(pdir(store_path)) == size and log.log_end_offset == 1
    assert log.append(pbatch(5, 1, txn=True)).base_offset == 1  # the sequence was not consumed
    log.append_marker(ControlType.COMMIT, 5, 1)
    assert log.append(pbatch(5, 0, epoch=1)).base_offset == 3  # after the txn: fine
    ru, rc = views(log)
    assert values(ru) == values(rc) == [b"p5e0s0", b"p5e0s1", b"p5e1s0"]


def test_new_epoch_must_start_at_sequence_zero(topic):
    log = topic
    log.append(pbatch(5, 0, n=3, epoch=4))
    for seq in (3, 1, 7):
        with pytest.raises(OutOfOrderSequenceError):
            log.append(pbatch(5, seq, epoch=5))
    assert log.log_end_offset == 3
    assert log.append(pbatch(5, 0, epoch=5)).base_offset == 3


def _rewrite_last_sequence(store_path, pid, last_sequence):
    """Clean-closed store: set the producer's last sequence in the snapshot at the log end."""
    offset, path = snapshots(pdir(store_path))[-1]
    entries = decode_snapshot(path)
    new = []
    for e in entries:
        if e[0] == pid:
            e = (e[0], e[1], last_sequence, e[3], 0, e[5], e[6], e[7])
        new.append(e)
    with open(path, "wb") as f:
        f.write(encode_snapshot(new))
    return offset


def test_sequence_wraps_from_int32_max_to_zero(store_path):
    s = Store.open(store_path)
    s.create_topic("t", partitions=1)
    ts = now_ms()
    s.partition("t", 0).append(pbatch(5, 0, ts=ts))
    s.close()
    # the snapshot written at close says exactly what docs/kafka-formats.md §3.6 says it should
    ((offset, path),) = snapshots(pdir(store_path))
    assert offset == 1
    assert decode_snapshot(path) == [(5, 0, 0, 0, 0, ts, -1, -1)]
    _rewrite_last_sequence(store_path, 5, INT32_MAX - 2)  # as if 2^31 - 2 records had gone before

    s = Store.open(store_path)
    log = s.partition("t", 0)
    assert log.producer_states()[5]["last_sequence"] == INT32_MAX - 2
    ending = pbatch(5, INT32_MAX - 1, n=2, tag="end")
    r = log.append(ending)  # seq 2147483646-2147483647
    assert (r.base_offset, r.last_offset, r.duplicate) == (1, 2, False)
    assert log.append(ending).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        log.append(pbatch(5, 1, tag="bad"))
    assert log.log_end_offset == 3
    r = log.append(pbatch(5, 0, n=2, tag="wrapped"))
    assert (r.base_offset, r.duplicate) == (3, False)
    seqs = [r.sequence for b in all_batches(log) for r in b.records()]
    assert seqs == [0, INT32_MAX - 1, INT32_MAX, 0, 1]
    s.close()


def test_sequence_wraps_inside_one_batch(store_path):
    s = Store.open(store_path)
    s.create_topic("t", partitions=1)
    s.partition("t", 0).append(pbatch(5, 0))
    s.close()
    _rewrite_last_sequence(store_path, 5, INT32_MAX - 2)
    s = Store.open(store_path)
    log = s.partition("t", 0)
    spanning = pbatch(5, INT32_MAX - 1, n=3, tag="span")  # INT32_MAX-1, INT32_MAX, 0
    assert log.append(spanning).base_offset == 1
    assert [r.sequence for r in log.read(1)[0].records()] == [INT32_MAX - 1, INT32_MAX, 0]
    assert log.producer_states()[5]["last_sequence"] == 0
    s.close()
    s = Store.open(store_path)  # the snapshot's (lastSeq 0, offsetDelta 2) still finds the retry
    log = s.partition("t", 0)
    r = log.append(spanning)
    assert r.duplicate and (r.base_offset, r.last_offset) == (1, 3)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(pbatch(5, 2))
    assert log.append(pbatch(5, 1)).base_offset == 4
    s.close()


# ---- markers, LSO and the transaction index ------------------------------------------------------------------


def test_abort_marker_writes_txn_index_entry_and_is_idempotent(store_path, store):
    store.create_topic("t", partitions=1)
    log = store.partition("t", 0)
    d = pdir(store_path)
    log.append(batch([b"plain"]))  # 0
    log.append(pbatch(9, 0, n=2, txn=True))  # 1-2
    assert log.last_stable_offset == 1
    assert txn_entries(d) == []
    r = log.append_marker(ControlType.ABORT, 9, 1, coordinator_epoch=2)  # 3 (epoch bumped, TV2)
    assert (r.base_offset, r.duplicate) == (3, False)
    assert os.path.getsize(os.path.join(d, segment_filename(0, ".txnindex"))) == 34
    assert txn_entries(d) == [(0, 9, 1, 3, 4)]
    assert log.last_stable_offset == 4 == log.log_end_offset
    ru, rc = views(log)
    assert values(ru) == [b"plain", b"p9e0s0", b"p9e0s1"] and values(rc) == [b"plain"]

    size = log_bytes(d)
    again = log.append_marker(ControlType.ABORT, 9, 1, coordinator_epoch=2)  # re-sent: no write
    assert again.duplicate
    assert log_bytes(d) == size and log.log_end_offset == 4 and txn_entries(d) == [(0, 9, 1, 3, 4)]
    with pytest.raises(InvalidProducerEpochError):
        log.append_marker(ControlType.ABORT, 9, 0, coordinator_epoch=2)
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append_marker(ControlType.COMMIT, 9, 2, coordinator_epoch=1)
    assert log_bytes(d) == size and log.log_end_offset == 4

    # the re-sent marker stays a no-op after a crash (roll-forward repeats it) and after a clean restart
    crashed = Store.open(store_path)
    clog = crashed.partition("t", 0)
    assert clog.append_marker(ControlType.ABORT, 9, 1, coordinator_epoch=2).duplicate
    assert clog.log_end_offset == 4 and log_bytes(d) == size
    crashed.close()
    store.close()
    s = Store.open(store_path)
    log = s.partition("t", 0)
    assert log.append_marker(ControlType.ABORT, 9, 1, coordinator_epoch=2).duplicate
    assert log_bytes(d) == size and txn_entries(d) == [(0, 9, 1, 3, 4)]
    assert log.last_stable_offset == 4
    # the next transaction of the new epoch starts at sequence 0
    assert log.append(pbatch(9, 0, epoch=1, txn=True)).base_offset == 4
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append_marker(ControlType.COMMIT, 9, 2, coordinator_epoch=1)
    log.append_marker(ControlType.COMMIT, 9, 2, coordinator_epoch=2)
    assert txn_entries(d) == [(0, 9, 1, 3, 4)]  # commits are not indexed
    s.close()


def test_log_segment_test_worked_example(store_path, store):
    """docs/kafka-formats.md §5.5: pid1 txn 100-101, pid2 txn 102-103, plain 104-105,
    ABORT(pid2) at 106, COMMIT(pid1) at 107 -> one entry (pid2, 102, 106, LSO 100)."""
    store.create_topic("t", partitions=1)
    log = store.partition("t", 0)
    d = pdir(store_path)
    log.append(batch([b"pre%d" % i for i in range(100)]))  # 0-99: the log "starts" at 100
    assert log.append(pbatch(1, 0, n=2, txn=True)).base_offset == 100
    assert log.append(pbatch(2, 0, n=2, txn=True)).base_offset == 102
    assert log.append(batch([b"x104", b"x105"])).base_offset == 104
    assert log.last_stable_offset == 100
    assert log.append_marker(ControlType.ABORT, 2, 1).base_offset == 106
    assert log.last_stable_offset == 100
    assert log.append_marker(ControlType.COMMIT, 1, 1).base_offset == 107
    assert log.last_stable_offset == 108
    assert txn_entries(d) == [(0, 2, 102, 106, 100)]
    ru, rc = views(log)
    assert [o for o, _ in rc] == list(range(102)) + [104, 105]
    assert [o for o, _ in ru] == list(range(106))
    # a crash-restart rebuilds the same state; the index is untouched
    crashed = Store.open(store_path)
    assert crashed.partition("t", 0).last_stable_offset == 108
    assert crashed.partition("t", 0).open_transactions() == {}
    crashed.close()
    assert txn_entries(d) == [(0, 2, 102, 106, 100)]


@pytest.mark.parametrize("seed", range(4))
def test_scenario7_power_loss_in_the_active_segment_after_rolls(store_path, seed):
    s = Store.open(store_path)
    s.create_topic("t", partitions=1, config={"segment.bytes": 300, "retention.ms": -1})
    s.close()
    sent = [pbatch(7, 2 * i, n=2) for i in range(10)]
    append_in_child(store_path, sent)
    d = pdir(store_path)
    active = log_paths(d)[-1]
    active_base = int(os.path.basename(active)[:20])
    assert active_base > 0 and snapshots(d)
    first_in_active = active_base // 2
    ends = [sum(len(b) for b in sent[first_in_active : i + 1]) for i in range(first_in_active, len(sent))]
    assert os.path.getsize(active) == ends[-1]
    length = random.Random(seed).randrange(0, ends[-1])
    os.truncate(active, length)
    survivors = first_in_active + sum(1 for e in ends if e <= length)

    s = Store.open(store_path)
    log = s.partition("t", 0)
    assert log.log_end_offset == 2 * survivors
    assert log.producer_states()[7]["last_sequence"] == 2 * survivors - 1
    assert log.append(sent[survivors - 1]).duplicate
    for b in sent[survivors:]:
        r = log.append(b)
        assert not r.duplicate
    assert_once(log, [f"p7e0s{i}".encode() for i in range(20)])
    s.close()


@pytest.mark.parametrize("shutdown", ["crash", "clean"])
@pytest.mark.parametrize("cut", ["boundary", "inside-marker"])
def test_scenario7_power_loss_of_an_abort_marker(store_path, shutdown, cut):
    """The ABORT marker was not fsynced: on restart the txn is open again and the txn index is
    cut to the same point (docs/reliability-scenarios.md rule 7) - no entry may point at a marker that is not in
    the log."""
    s = Store.open(store_path)
    s.create_topic("t", partitions=1)
    log = s.partition("t", 0)
    ops = [batch([b"plain"]), pbatch(5, 0, n=2, txn=True), ("marker", ControlType.ABORT, 5, 1, 0)]
    if shutdown == "crash":
        s.close()
        append_in_child(store_path, ops)
    else:
        log.append(ops[0])
        log.append(ops[1])
        log.append_marker(ControlType.ABORT, 5, 1)
        s.close()
    d = pdir(store_path)
    segment = log_paths(d)[0]
    assert txn_entries(d) == [(0, 5, 1, 3, 4)]
    full = os.path.getsize(segment)
    os.truncate(segment, full - 78 if cut == "boundary" else full - 30)

    s = Store.open(store_path)
    log = s.partition("t", 0)
    assert log.log_end_offset == 3
    assert log.open_transactions() == {5: 1}
    assert log.last_stable_offset == 1
    assert [e for e in txn_entries(d) if e[3] >= log.log_end_offset] == []  # before any new write
    r = log.append_marker(ControlType.ABORT, 5, 1)  # roll-forward re-sends it: written once
    assert (r.base_offset, r.duplicate) == (3, False)
    assert log.append_marker(ControlType.ABORT, 5, 1).duplicate
    assert txn_entries(d) == [(0, 5, 1, 3, 4)]
    assert log.last_stable_offset == 4
    ru, rc = views(log)
    assert values(ru) == [b"plain", b"p5e0s0", b"p5e0s1"] and values(rc) == [b"plain"]
    s.close()


def test_scenario48_corrupt_snapshot_with_an_open_transaction(store_path):
    s = Store.open(store_path)
    s.create_topic("t", partitions=1, config={"segment.bytes": 300, "retention.ms": -1})
    log = s.partition("t", 0)
    log.append(pbatch(1, 0, n=2))  # 0-1
    log.append(pbatch(5, 0, n=2, txn=True))  # 2-3: txn opens
    for i in range(6):
        log.append(batch([b"filler-%d" % i + b"." * 30]))  # 4-9, rolls
    log.append(pbatch(5, 2, txn=True))  # 10
    assert len(log.segments) >= 3 and log.last_stable_offset == 2
    s.close()
    d = pdir(store_path)
    snaps = snapshots(d)
    assert len(snaps) >= 3
    for _, path in snaps[1:]:  # all but the oldest: an older snapshot plus a replay must restore the txn
        with open(path, "r+b") as f:
            f.seek(12)
            byte = f.read(1)
            f.seek(12)
            f.write(bytes([byte[0] ^ 0xFF]))
    s = Store.open(store_path)
    log = s.partition("t", 0)
    assert log.open_transactions() == {5: 2}
    assert log.last_stable_offset == 2
    assert log.append(pbatch(5, 2, txn=True)).duplicate
    assert log.append(pbatch(1, 0, n=2)).duplicate
    marker = log.append_marker(ControlType.ABORT, 5, 1).base_offset
    assert marker == 11
    assert txn_entries(d) == [(0, 5, 2, 11, 12)]
    assert log.last_stable_offset == 12
    s.close()


def test_transaction_spanning_segments_and_retention(store_path, store):
    store.create_topic("t", partitions=1, config={"segment.bytes": 300, "retention.ms": -1})
    log = store.partition("t", 0)
    d = pdir(store_path)
    log.append(pbatch(4, 0, n=2, txn=True))  # 0-1 in the first segment
    for i in range(8):
        log.append(batch([b"filler-%d" % i + b"." * 30]))
    assert len(log.segments) >= 3
    assert log.last_stable_offset == 0
    # retention removes the segment where the open transaction began: the LSO cannot lag the log start
    store.alter_topic_config("t", {"retention.bytes": 1})
    assert log.enforce_retention() > 0
    start = log.log_start_offset
    assert start > 0
    assert log.last_stable_offset == start
    assert log.open_transactions() == {4: 0}
    marker = log.append_marker(ControlType.ABORT, 4, 1).base_offset
    assert log.last_stable_offset == marker + 1 == log.log_end_offset
    marker_segment = max(sg.base_offset for sg in log.segments if sg.base_offset <= marker)
    names = [n for n in os.listdir(d) if n.endswith(".txnindex")]
    assert names == [segment_filename(marker_segment, ".txnindex")]
    assert txn_entries(d) == [(0, 4, 0, marker, marker + 1)]


# ---- F. disk and file faults --------------------------------------------------------------------------------


def _setup_with_snapshots(store_path, n_batches=8):
    s = Store.open(store_path)
    s.create_topic("t", partitions=1, config={"segment.bytes": 300, "retention.ms": -1})
    log = s.partition("t", 0)
    sent = [pbatch(7, 2 * i, n=2) for i in range(n_batches)]
    acked = [log.append(b) for b in sent]
    return s, log, sent, acked


@pytest.mark.parametrize(
    "damage",
    [
        "flip-newest",
        "flip-all",
        "truncate-newest",
        "empty-newest",
        "delete-all",
        "copy-newest-higher",
        "copy-oldest-higher",
        "newer-than-cut-log",
    ],
)
def test_scenario48_damaged_producer_snapshots(store_path, damage):
    s, log, sent, acked = _setup_with_snapshots(store_path)
    s.close()
    d = pdir(store_path)
    snaps = snapshots(d)
    leo = acked[-1].last_offset + 1
    assert len(snaps) >= 3 and snaps[-1][0] == leo
    for _, path in snaps:
        decode_snapshot(path)
    newest = snaps[-1][1]
    lost = 0
    bad_name = None
    if damage == "flip-newest":
        with open(newest, "r+b") as f:
            f.seek(20)
            byte = f.read(1)
            f.seek(20)
            f.write(bytes([byte[0] ^ 0x01]))
    elif damage == "flip-all":
        for _, path in snaps:
            with open(path, "r+b") as f:
                f.seek(3)
                byte = f.read(1)
                f.seek(3)
                f.write(bytes([byte[0] ^ 0x80]))  # the stored CRC
    elif damage == "truncate-newest":
        os.truncate(newest, 30)
    elif damage == "empty-newest":
        os.truncate(newest, 0)
    elif damage == "delete-all":
        for _, path in snaps:
            os.unlink(path)
    elif damage == "copy-newest-higher":
        bad_name = os.path.join(d, snapshot_filename(leo + 5))
        shutil.copyfile(newest, bad_name)
    elif damage == "copy-oldest-higher":  # stale state under a name beyond the log end
        bad_name = os.path.join(d, snapshot_filename(leo + 5))
        shutil.copyfile(snaps[0][1], bad_name)
    elif damage == "newer-than-cut-log":  # the last batch never reached the disk, the snapshot did
        seg = log_paths(d)[-1]
        os.truncate(seg, os.path.getsize(seg) - len(sent[-1]))
        lost = 1

    s = Store.open(store_path)
    log = s.partition("t", 0)
    survivors = len(sent) - lost
    assert log.log_end_offset == 2 * survivors
    assert log.producer_states()[7]["last_sequence"] == 2 * survivors - 1
    if bad_name is not None:
        assert not os.path.exists(bad_name)
    for offset, path in snapshots(d):  # the bad one is ignored and gone; what is left is valid
        assert offset <= log.log_end_offset
        decode_snapshot(path)
    last_acked = sent[survivors - 1]
    r = log.append(last_acked)
    assert r.duplicate and r.base_offset == acked[survivors - 1].base_offset
    for b in sent[survivors:]:  # the lost batch is accepted, once
        r = log.append(b)
        assert not r.duplicate
        assert log.append(b).duplicate
    assert log.append(pbatch(7, 2 * len(sent))).base_offset == 2 * len(sent)
    expected = [f"p7e0s{i}".encode() for i in range(2 * len(sent) + 1)]
    assert_once(log, expected)
    s.close()
    s = Store.open(store_path)
    assert_once(s.partition("t", 0), expected)
    s.close()


def _enospc_on_log_write(monkeypatch, calls):
    real_write = os.write

    def fake_write(fd, data):
        if not calls and fd_path(fd).endswith(".log"):
            view = memoryview(data)
            real_write(fd, view[: len(view) // 2])  # part of the batch reaches the file
            calls.append(fd)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", fake_write)


def test_scenario50_disk_full_on_append_same_handle(store_path, store, monkeypatch):
    store.create_topic("t", partitions=1)
    log = store.partition("t", 0)
    d = pdir(store_path)
    log.append(pbatch(7, 0, n=2))
    size = log_bytes(d)
    calls = []
    _enospc_on_log_write(monkeypatch, calls)
    victim = pbatch(7, 2, n=3)
    with pytest.raises(KafkaStorageError):
        log.append(victim)
    assert calls, "the fault was never injected"
    assert log_bytes(d) == size  # the partial bytes were cut
    assert log.log_end_offset == 2
    assert log.producer_states()[7]["last_sequence"] == 1  # sequence not consumed
    assert values(views(log)[0]) == [b"p7e0s0", b"p7e0s1"]
    monkeypatch.undo()
    r = log.append(victim)  # space freed: the same batch, same sequence
    assert (r.base_offset, r.last_offset, r.duplicate) == (2, 4, False)
    assert log.append(victim).duplicate
    expected = [f"p7e0s{i}".encode() for i in range(5)]
    assert_once(log, expected)
    store.close()
    s = Store.open(store_path)
    assert_once(s.partition("t", 0), expected)
    s.close()


def test_scenario50_disk_full_then_restart(store_path, monkeypatch):
    a = Store.open(store_path)
    a.create_topic("t", partitions=1)
    log = a.partition("t", 0)
    log.append(pbatch(7, 0, n=2))
    calls = []
    _enospc_on_log_write(monkeypatch, calls)
    victim = pbatch(7, 2, n=3)
    with pytest.raises(KafkaStorageError):
        log.append(victim)
    monkeypatch.undo()
    # the process stops here (no clean close); after a restart no partial batch is visible
    b = Store.open(store_path)
    blog = b.partition("t", 0)
    assert blog.log_end_offset == 2
    assert values(views(blog)[0]) == [b"p7e0s0", b"p7e0s1"]
    r = blog.append(victim)
    assert (r.base_offset, r.duplicate) == (2, False)
    assert_once(blog, [f"p7e0s{i}".encode() for i in range(5)])
    b.close()
    a.close()


def test_scenario50_disk_full_and_cut_fails_then_restart(store_path, monkeypatch):
    """The partial bytes cannot even be cut: the handle stops writing, the next open cuts them."""
    a = Store.open(store_path)
    a.create_topic("t", partitions=1)
    log = a.partition("t", 0)
    d = pdir(store_path)
    log.append(pbatch(7, 0, n=2))
    size = log_bytes(d)
    calls = []
    _enospc_on_log_write(monkeypatch, calls)

    def no_ftruncate(fd, length):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "ftruncate", no_ftruncate)
    victim = pbatch(7, 2, n=3)
    with pytest.raises(KafkaStorageError):
        log.append(victim)
    monkeypatch.undo()
    assert log_bytes(d) > size  # the partial batch is on disk
    with pytest.raises(KafkaStorageError):
        log.append(victim)
    assert values(views(log)[0]) == [b"p7e0s0", b"p7e0s1"]  # readers never see the partial batch
    b = Store.open(store_path)
    blog = b.partition("t", 0)
    assert log_bytes(d) == size
    assert blog.append(victim).base_offset == 2
    assert_once(blog, [f"p7e0s{i}".encode() for i in range(5)])
    b.close()
    a.close()


def _fail_snapshot_io(monkeypatch, kind, calls):
    if kind == "enospc-write":
        real_write = os.write

        def fake_write(fd, data):
            if fd_path(fd).endswith(".snapshot.tmp") and not calls:
                view = memoryview(data)
                real_write(fd, view[: max(1, len(view) // 2)])
                calls.append(fd)
                raise OSError(errno.ENOSPC, "No space left on device")
            return real_write(fd, data)

        monkeypatch.setattr(os, "write", fake_write)
    else:
        real_fsync = os.fsync

        def fake_fsync(fd):
            if fd_path(fd).endswith(".snapshot.tmp") and not calls:
                calls.append(fd)
                raise OSError(errno.EIO, "Input/output error")
            return real_fsync(fd)

        monkeypatch.setattr(os, "fsync", fake_fsync)


def _file_bytes(paths):
    out = {}
    for p in paths:
        with open(p, "rb") as f:
            out[p] = f.read()
    return out


@pytest.mark.parametrize("kind", ["enospc-write", "eio-fsync"])
def test_scenario53_snapshot_write_fails_at_close(store_path, monkeypatch, caplog, kind):
    s, log, sent, acked = _setup_with_snapshots(store_path)
    d = pdir(store_path)
    previous = _file_bytes(p for _, p in snapshots(d))
    assert previous
    leo = log.log_end_offset
    assert all(o < leo for o, _ in snapshots(d))
    calls = []
    _fail_snapshot_io(monkeypatch, kind, calls)
    # The data is durable; the snapshot is a derived file the next open rebuilds: logged, not raised (scenario 70).
    s.close()
    assert "no snapshot at the log end" in caplog.text
    monkeypatch.undo()
    assert calls
    assert _file_bytes(previous) == previous  # the previous snapshots are intact
    assert not os.path.exists(os.path.join(d, snapshot_filename(leo)))  # no partial file renamed
    for _, path in snapshots(d):
        decode_snapshot(path)

    s = Store.open(store_path)
    log = s.partition("t", 0)
    assert not any(n.endswith(".tmp") for n in os.listdir(d))
    assert log.log_end_offset == leo
    r = log.append(sent[-1])
    assert r.duplicate and r.base_offset == acked[-1].base_offset
    assert log.append(pbatch(7, 2 * len(sent))).base_offset == leo
    assert_once(log, [f"p7e0s{i}".encode() for i in range(2 * len(sent) + 1)])
    s.close()


@pytest.mark.parametrize("kind", ["enospc-write", "eio-fsync"])
def test_scenario53_snapshot_write_fails_at_roll(store_path, monkeypatch, kind):
    s = Store.open(store_path)
    s.create_topic("t", partitions=1, config={"segment.bytes": 300, "retention.ms": -1})
    log = s.partition("t", 0)
    d = pdir(store_path)
    sent = [pbatch(7, 2 * i, n=2) for i in range(8)]
    i = 0
    # append until one roll has produced a snapshot and the next append would roll again
    while True:
        log.append(sent[i])
        i += 1
        active = log.segments[-1]
        if len(log.segments) >= 2 and active.size + len(sent[i]) > 300:
            break
    previous = _file_bytes(p for _, p in snapshots(d))
    assert previous
    leo = log.log_end_offset
    calls = []
    _fail_snapshot_io(monkeypatch, kind, calls)
    with pytest.raises(KafkaStorageError):
        log.append(sent[i])  # the roll needs a snapshot at `leo`
    monkeypatch.undo()
    assert calls
    assert _file_bytes(previous) == previous
    assert not os.path.exists(os.path.join(d, snapshot_filename(leo)))
    assert log.log_end_offset == leo  # nothing appended
    for _, path in snapshots(d):
        decode_snapshot(path)
    # the same batch goes in exactly once: on this handle if it still writes, else after a restart
    try:
        first = log.append(sent[i])
        assert (first.base_offset, first.duplicate) == (leo, False)
    except KafkaStorageError:
        pass
    s2 = Store.open(store_path)
    log2 = s2.partition("t", 0)
    r = log2.append(sent[i])
    assert r.base_offset == leo
    for b in sent[i + 1 :]:
        assert not log2.append(b).duplicate
    expected = [f"p7e0s{k}".encode() for k in range(2 * len(sent))]
    assert_once(log2, expected)
    s2.close()
    s.close()
    s3 = Store.open(store_path)
    assert_once(s3.partition("t", 0), expected)
    s3.close()


def test_scenario54_fsync_eio_is_fatal_for_the_handle(store_path, monkeypatch):
    a = Store.open(store_path)
    a.create_topic("t", partitions=1)
    log = a.partition("t", 0)
    log.append(pbatch(7, 0, n=2))
    calls = []

    def failing_fdatasync(fd):
        calls.append(fd)
        raise OSError(errno.EIO, "Input/output error")

    real_fdatasync = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", failing_fdatasync)
    victim = pbatch(7, 2, n=2)
    with pytest.raises(KafkaStorageError):
        log.append(victim)
    assert len(calls) == 1
    # the handle refuses every further write, and never calls fsync again to "succeed"
    with pytest.raises(KafkaStorageError):
        log.append(victim)
    with pytest.raises(KafkaStorageError):
        log.append(pbatch(7, 4))
    with pytest.raises(KafkaStorageError):
        log.append_marker(ControlType.ABORT, 7, 1)
    with pytest.raises(KafkaStorageError):
        log.roll()
    assert len(calls) == 1
    monkeypatch.setattr(os, "fdatasync", real_fdatasync)
    with pytest.raises(KafkaStorageError):  # still refused once the disk is healthy again
        log.append(victim)

    b = Store.open(store_path)  # a restart recovers from the log
    blog = b.partition("t", 0)
    present = [v for v in values(views(blog)[0]) if v in (b"p7e0s2", b"p7e0s3")]
    assert present in ([], [b"p7e0s2", b"p7e0s3"])
    r = blog.append(victim)
    assert r.base_offset == 2
    assert r.duplicate == bool(present)
    assert blog.append(victim).duplicate
    assert blog.append(pbatch(7, 4)).base_offset == 4
    expected = [f"p7e0s{i}".encode() for i in range(5)]
    assert_once(blog, expected)
    b.close()
    a.close()
    c = Store.open(store_path)
    assert_once(c.partition("t", 0), expected)
    c.close()


# ---- G. input validation --------------------------------------------------------------------------------------


def test_scenario58_oversized_record(store_path, store):
    store.create_topic("t", partitions=1, config={"max.message.bytes": 1000})
    log = store.partition("t", 0)
    d = pdir(store_path)
    big = batch([b"v" * 2000], pid=7, epoch=0, seq=0)
    with pytest.raises(RecordTooLargeError):
        log.append(big)
    with pytest.raises(RecordTooLargeError):  # one oversized batch rejects the whole request
        log.append(batch([b"ok"], pid=8, epoch=0, seq=0) + big)
    assert log.log_end_offset == 0 and log_bytes(d) == 0
    assert log.producer_states() == {}
    r = log.append(batch([b"small"], pid=7, epoch=0, seq=0))  # the sequence was not consumed
    assert (r.base_offset, r.duplicate) == (0, False)

    # exactly at the limit (the whole batch, header included) is accepted and reads back intact
    payload = bytes(range(256)) * 20
    exact = batch([payload], pid=7, epoch=0, seq=1)
    store.alter_topic_config("t", {"max.message.bytes": len(exact)})
    one_over = batch([payload + b"!"], pid=7, epoch=0, seq=1)
    assert len(one_over) == len(exact) + 1
    with pytest.raises(RecordTooLargeError):
        log.append(one_over)
    assert log.log_end_offset == 1
    r = log.append(exact)
    assert (r.base_offset, r.duplicate) == (1, False)
    got = log.read(1)[0]
    assert got.size == len(exact) and got.records()[0].value == payload
    # the limit applies to the batch as sent, i.e. after compression
    packed = batch([b"z" * 50_000], pid=7, epoch=0, seq=2, compression=Compression.GZIP)
    assert len(packed) <= len(exact)
    assert log.append(packed).base_offset == 2
    assert log.read(2)[0].records()[0].value == b"z" * 50_000
    store.close()
    s = Store.open(store_path)
    vals = values(views(s.partition("t", 0))[0])
    assert vals == [b"small", payload, b"z" * 50_000]
    s.close()


def test_newer_epoch_cannot_write_into_an_open_transaction(topic):
    """The coordinator ends epoch N's transaction (marker) before epoch N+1 writes; a batch that
    skips the marker would merge two transactions under one first offset, so it is refused."""
    log = topic
    log.append(pbatch(5, 0, txn=True, tag="n"))
    with pytest.raises(InvalidTxnStateError):
        log.append(pbatch(5, 0, epoch=1, txn=True, tag="n+1"))
    assert log.log_end_offset == 1
    log.append_marker(ControlType.ABORT, 5, 1)
    res = log.append(pbatch(5, 0, epoch=1, txn=True, tag="n+1"))
    assert res.base_offset == 2 and log.open_transactions() == {5: 2}


def test_aborted_transactions_over_a_range_follow_kafka_fetch_rules(store):
    """docs/kafka-formats.md §5.6: entries with lastOffset ≥ fetch and firstOffset < upper, across segments,
    stopping once an entry's LSO reaches the upper bound."""
    store.create_topic("r", partitions=1, config={"segment.bytes": 400, "retention.ms": -1})
    log = store.partition("r", 0)
    log.append(pbatch(1, 0, txn=True, tag="a"))  # 0: pid 1 opens a txn
    log.append(pbatch(2, 0, txn=True, tag="b"))  # 1: pid 2 opens a txn
    log.append(batch([b"plain"]))  # 2
    log.append_marker(ControlType.ABORT, 2, 1)  # 3: pid 2 aborts; LSO recorded 0 (pid 1 open)
    log.append_marker(ControlType.COMMIT, 1, 1)  # 4: pid 1 commits (not indexed)
    log.append(pbatch(3, 0, txn=True, tag="c"))  # 5: pid 3 opens a txn
    log.append_marker(ControlType.ABORT, 3, 1)  # 6: pid 3 aborts; LSO recorded 7
    assert len(log.segments) > 1  # the entries live in different segments
    everything = log.aborted_transactions(0, log.log_end_offset)
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in everything] == [(2, 1, 3), (3, 5, 6)]
    # A range that ends before pid 3's transaction starts does not include it ...
    assert [t.producer_id for t in log.aborted_transactions(0, 5)] == [2]
    # ... and one that starts after pid 2's marker does not include pid 2.
    assert [t.producer_id for t in log.aborted_transactions(4, 7)] == [3]
