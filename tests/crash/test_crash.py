"""Crash tests with real processes, real SIGKILL and really damaged files.

* SIGKILL loop: a worker appending in a loop is killed at random moments, many times; after
  every kill the acknowledged batches are all there exactly once at their acknowledged
  offsets, offsets are dense, and the retry of the batch in flight at the kill is answered
  as a duplicate if it landed and appended once if it did not (docs/DESIGN.md §3-4,
  docs/reliability-scenarios.md rules 1-2, 7).
* docs/reliability-scenarios.md scenario 40: the partition-lock holder is killed mid-append; the next process gets the
  lock, recovers the tail and proceeds.
* docs/reliability-scenarios.md scenario 43: torn / zero-filled / garbage tails are cut together with indexes, txn index
  and producer state; an invalid batch followed by valid data, or inside a sealed segment,
  is reported as corruption and never cut.
* docs/reliability-scenarios.md scenario 45: damaged `.index` / `.timeindex` files never change an offset or
  timestamp lookup.

Sizes are small by default; `--big` runs the scenarios' full sizes.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import random
import shutil
import struct
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import crash_worker as cw
from crash_worker import (
    TOPIC,
    Worker,
    check_batch,
    check_segment_files,
    check_segment_indexes,
    make_batch,
    parse_acks,
    scan_log,
)

from storage import Store
from storage.errors import CorruptIndexError, CorruptRecordError, OffsetOutOfRangeError
from storage.producer_ids import ProducerIdAllocator
from storage.records import ControlType

TS_BASE = int(time.time() * 1000) - 60_000


def _create(store_path: str, config: dict) -> None:
    s = Store.open(store_path)
    s.create_topic(TOPIC, partitions=1, config=config)
    s.close()


def _pdir(store_path: str) -> str:
    return os.path.join(store_path, f"{TOPIC}-0")


def _log_files(store_path: str) -> list[str]:
    d = _pdir(store_path)
    return [os.path.join(d, n) for n in sorted(os.listdir(d)) if n.endswith(".log")]


def _sha(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# =====================================================================================================
# (1) the SIGKILL loop
# =====================================================================================================


def _verify_after_kill(store_path: str, pid: int, acked: dict, *, writable: bool) -> dict[int, tuple[int, int]]:
    """Open the store (read-only, or writable = recovery in this process) and check the invariants.

    Returns {base sequence: (base offset, last offset)} of every batch in the log.
    """
    store = Store.open(store_path, read_only=not writable)
    try:
        log = store.partition(TOPIC, 0)
        present: dict[int, tuple[int, int]] = {}
        next_seq = 0
        for b in scan_log(log):  # dense, unique offsets across all segments
            check_batch(b)  # whole, CRC-valid, the records we wrote
            assert b.producer_id == pid, f"batch at {b.base_offset} from unknown producer {b.producer_id}"
            assert b.base_sequence not in present, f"sequence {b.base_sequence} is in the log twice"
            assert b.base_sequence == next_seq, (
                f"batch at {b.base_offset} has sequence {b.base_sequence}, expected {next_seq} (send order)"
            )
            present[b.base_sequence] = (b.base_offset, b.last_offset)
            next_seq = b.base_sequence + b.records_count
        for seq, (_, base, last) in acked.items():
            assert present.get(seq) == (base, last), (
                f"acknowledged batch seq {seq} at {base}..{last} is {present.get(seq)} in the log"
            )
        assert check_segment_files(log, allow_torn_tail=not writable) == len(present)
        if writable:
            check_segment_indexes(log)
        return present
    finally:
        store.close()


def test_sigkill_loop(store_path, big):
    kills = 200 if big else 15
    seed = int(os.environ.get("TXLOG_CRASH_SEED") or random.randrange(1 << 30))  # set it to replay a run
    rng = random.Random(seed)
    _create(store_path, {"segment.bytes": 8192, "index.interval.bytes": 512})
    sizes = ["--min-size", 20, "--max-size", 3000, "--max-records", 3, "--ts-base", TS_BASE]
    pid: int | None = None
    next_seq = 0
    acked: dict[int, tuple[int, int, int]] = {}  # seq -> (nrec, base, last)
    landed: tuple[int, int] | None = None  # the in-flight batch of the last kill, if it reached the log
    end = 0
    stats = {"retry_duplicate": 0, "first_send_appended": 0, "killed_at_startup": 0, "acks": 0}
    for rnd in range(kills):
        args = ["--seq", next_seq, *sizes] + (["--pid", pid] if pid is not None else [])
        w = Worker("append", store_path, *args)
        if pid is None:
            pid = int(w.expect("PID").split()[1])  # never lose track of the producer id
        if rng.random() < 0.15:
            time.sleep(rng.uniform(0, 0.3))  # during start-up, store open or tail recovery
            stats["killed_at_startup"] += 1
        else:
            for _ in range(rng.randint(0, 8)):
                w.expect("ACK")
            time.sleep(rng.uniform(0, 0.004))  # somewhere inside the next append (write, fsync, roll)
        w.kill()
        acks = parse_acks(w.drain())
        if w.proc.returncode != -9:
            pytest.fail(f"[seed {seed}] worker ended with {w.proc.returncode} before the kill:\n{w.stderr}")
        for i, (p, seq, nrec, base, last, dup) in enumerate(acks):
            assert p == pid and seq == next_seq, f"[seed {seed}] ack {p}/{seq}, expected {pid}/{next_seq}"
            if i == 0 and landed is not None:
                assert dup and (base, last) == landed, (
                    f"[seed {seed}] round {rnd}: the retry of seq {seq}, which had landed at {landed} before "
                    f"the kill, was answered {(base, last, dup)} instead of a duplicate with its offsets"
                )
                stats["retry_duplicate"] += 1
            else:
                assert not dup, f"[seed {seed}] round {rnd}: seq {seq} answered duplicate but it never landed"
                assert base == end, f"[seed {seed}] round {rnd}: seq {seq} appended at {base}, log end was {end}"
                if i == 0:
                    stats["first_send_appended"] += 1
            acked[seq] = (nrec, base, last)
            next_seq = seq + nrec
            end = max(end, last + 1)
            stats["acks"] += 1
        present = _verify_after_kill(store_path, pid, acked, writable=rnd % 3 == 2)
        extra = {s: v for s, v in present.items() if s not in acked}
        assert set(extra) <= {next_seq}, (
            f"[seed {seed}] round {rnd}: unacknowledged batches {sorted(extra)} in the log; only seq {next_seq} "
            "was in flight"
        )
        landed = extra.get(next_seq)
        end = landed[1] + 1 if landed else end

    # Finally: recover in this process, retry the in-flight batch by hand, append once more.
    store = Store.open(store_path)
    try:
        log = store.partition(TOPIC, 0)
        assert log.log_end_offset == end
        data, nrec = make_batch(pid, next_seq, ts_base=TS_BASE, min_size=20, max_size=3000, max_records=3)
        res = log.append(data)
        if landed:
            assert res.duplicate and (res.base_offset, res.last_offset) == landed
        else:
            assert not res.duplicate and res.base_offset == end
        acked[next_seq] = (nrec, res.base_offset, res.last_offset)
        next_seq += nrec
        prev_last = res.last_offset
        data, nrec = make_batch(pid, next_seq, ts_base=TS_BASE, min_size=20, max_size=3000, max_records=3)
        res = log.append(data)
        assert not res.duplicate and res.base_offset == prev_last + 1
        acked[next_seq] = (nrec, res.base_offset, res.last_offset)
    finally:
        store.close()
    present = _verify_after_kill(store_path, pid, acked, writable=True)
    assert set(present) == set(acked)
    assert ProducerIdAllocator(store_path).next_id() > pid
    print(f"sigkill loop seed={seed} kills={kills} {stats} log end={end}")


# =====================================================================================================
# (2) docs/reliability-scenarios.md scenario 40: the lock holder dies mid-append
# =====================================================================================================


def _lock_is_free(lock_path: str) -> bool:
    fd = os.open(lock_path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # closing the descriptor drops the lock if we got it
    return True


def _wait_until_blocked_on_flock(pid: int, rounds: int = 3000) -> None:
    """Best effort: wait until `pid` sleeps in flock() (so it really queues behind the dead holder)."""
    for _ in range(rounds):
        try:
            with open(f"/proc/{pid}/wchan") as f:
                wchan = f.read()
            with open(f"/proc/{pid}/syscall") as f:
                nr = f.read().split()[0]
        except OSError:
            return
        if "flock" in wchan or "locks" in wchan or nr == "73":  # 73 = flock on x86-64
            return
        time.sleep(0.01)


@pytest.mark.parametrize("hang", ["fsync", "write"], ids=["after-write-before-fsync", "half-written"])
def test_lock_holder_killed_mid_append(store_path, hang):
    _create(store_path, {"index.interval.bytes": 256})
    lock_path = os.path.join(_pdir(store_path), "txlog.lock")
    sizes = ["--min-size", 200, "--max-size", 3000, "--ts-base", TS_BASE]
    a = Worker("append", store_path, "--hang", hang, "--hang-after", 5, *sizes)
    pid_a = int(a.expect("PID").split()[1])
    hung_seq = int(a.expect("HANG").split()[2])
    acks_a = parse_acks(a.lines)
    assert len(acks_a) == 5
    a_end = acks_a[-1][4] + 1
    assert not _lock_is_free(lock_path), "the hung appender should hold the partition lock"

    # B queues on the lock behind A; then A dies with the lock held.
    b = Worker("append", store_path, "--count", 3, *sizes)  # prints PID only once it has opened the log
    _wait_until_blocked_on_flock(b.pid)
    a.kill()
    assert a.proc.returncode == -9
    b_lines = b.check_ok()  # a stale lock would hang here: Worker gives up (and fails) instead
    pid_b = int(b_lines[0].split()[1])
    acks_b = parse_acks(b_lines)
    assert len(acks_b) == 3 and not any(x[5] for x in acks_b)
    assert _lock_is_free(lock_path)

    in_flight_landed = hang == "fsync"  # whole batch written (not fsynced): it survives a process kill
    _, nrec_hung = make_batch(pid_a, hung_seq, ts_base=TS_BASE, min_size=200, max_size=3000)
    expected_b_base = a_end + nrec_hung if in_flight_landed else a_end
    assert acks_b[0][3] == expected_b_base, (
        f"B appended at {acks_b[0][3]}; A's acknowledged data ends at {a_end} and its in-flight batch "
        f"({'whole' if in_flight_landed else 'torn'}) should {'stay' if in_flight_landed else 'be cut'}"
    )

    # A restarts and re-sends the batch that was in flight.
    c = Worker("append", store_path, "--pid", pid_a, "--seq", hung_seq, "--count", 2, *sizes)
    acks_c = parse_acks(c.check_ok())
    retry = acks_c[0]
    assert retry[1] == hung_seq
    if in_flight_landed:
        assert retry[5] and retry[3] == a_end, f"retry of a landed batch must be a duplicate at {a_end}: {retry}"
    else:
        assert not retry[5] and retry[3] == acks_b[-1][4] + 1, f"retry of a torn batch must be appended: {retry}"

    store = Store.open(store_path)
    try:
        log = store.partition(TOPIC, 0)
        batches = scan_log(log)
        seen: dict[tuple[int, int], int] = {}
        for bt in batches:
            check_batch(bt)
            key = (bt.producer_id, bt.base_sequence)
            assert key not in seen, f"{key} is in the log twice"
            seen[key] = bt.base_offset
        for p, seq, _, base, _, _ in acks_a + acks_b + acks_c:
            assert seen[(p, seq)] == base
        assert len(seen) == 5 + 3 + 2 and {p for p, _ in seen} == {pid_a, pid_b}
        check_segment_indexes(log)
    finally:
        store.close()


# =====================================================================================================
# Templates for docs/reliability-scenarios.md scenarios 43 and 45: an idempotent producer interleaved
# with aborted and committed transactions over several segments, left by a clean close or by a
# process that just exits.
# =====================================================================================================

FILL_CONFIG = {"segment.bytes": 8192, "index.interval.bytes": 100}
FILL_SIZES = {"min_size": 60, "max_size": 500, "max_records": 3}


@pytest.fixture(scope="module")
def fill_template(tmp_path_factory):
    cache: dict[tuple[str, str], tuple[str, list[str]]] = {}

    def get(end: str, shutdown: str) -> tuple[str, list[str]]:
        key = (end, shutdown)
        if key not in cache:
            path = str(tmp_path_factory.mktemp(f"fill-{end}-{shutdown}") / "store")
            _create(path, FILL_CONFIG)
            w = Worker(
                "fill",
                path,
                "--count",
                60,
                "--txn-every",
                6,
                "--settle",
                4,
                "--end",
                end,
                "--exit",
                "crash" if shutdown == "crash" else "close",
                "--ts-base",
                TS_BASE,
                "--min-size",
                FILL_SIZES["min_size"],
                "--max-size",
                FILL_SIZES["max_size"],
                "--max-records",
                FILL_SIZES["max_records"],
            )
            cache[key] = (path, w.check_ok())
        return cache[key]

    return get


def _copy_template(template: str, dst: str) -> str:
    shutil.copytree(template, dst)
    return dst


def _file_view(store_path: str) -> list[tuple[str, list[tuple[int, object]]]]:
    out = []
    for path in _log_files(store_path):
        batches, rest = cw.segment_file_batches(path)
        assert rest == 0
        out.append((path, batches))
    return out


# =====================================================================================================
# (3) docs/reliability-scenarios.md scenario 43: torn tail, zero-filled tail, garbage tail; corruption in the middle
# =====================================================================================================


@pytest.mark.parametrize("damage", ["cut", "zeros", "random", "cut+zeros", "cut+random"])
@pytest.mark.parametrize("end", ["data", "abort"], ids=["last-is-data", "last-is-abort-marker"])
@pytest.mark.parametrize("shutdown", ["crash", "clean"])
def test_torn_tail_is_cut_everywhere(fill_template, tmp_path, damage, end, shutdown):
    template, lines = fill_template(end, shutdown)
    path = _copy_template(template, str(tmp_path / "store"))
    rng = random.Random(f"{damage}-{end}-{shutdown}")
    pids = [int(x.split()[1]) for x in lines if x.startswith("PID")]
    p, t = pids
    acks = parse_acks(lines)
    marks = [x.split() for x in lines if x.startswith("MARK")]

    view = _file_view(path)
    active_path, active_batches = view[-1]
    assert len(view) >= 3 and len(active_batches) >= 3, "template must leave sealed segments and a busy active one"
    originals = [(b.base_offset, b.last_offset, b.crc) for _, bs in view for _, b in bs]
    last_pos, last = active_batches[-1]
    with open(active_path, "rb") as f:
        active_bytes = f.read()
    sealed_digests = {pth: _sha(pth) for pth, _ in view[:-1]}

    lost = damage.startswith("cut")
    if lost:
        os.truncate(active_path, last_pos + rng.randint(1, last.size - 1))
    with open(active_path, "ab") as f:
        if "zeros" in damage:
            f.write(b"\0" * 4096)
        if "random" in damage:
            f.write(rng.randbytes(rng.randint(1, 6000)))
    expected_end = last.base_offset if lost else last.last_offset + 1
    expected_size = last_pos if lost else last_pos + last.size

    store = Store.open(path)
    try:
        log = store.partition(TOPIC, 0)
        assert log.log_end_offset == expected_end
        assert os.path.getsize(active_path) == expected_size, "the bad tail must be cut from the file"
        with open(active_path, "rb") as f:
            assert f.read() == active_bytes[:expected_size], "bytes before the cut must be untouched"
        for pth, digest in sealed_digests.items():
            assert _sha(pth) == digest, f"sealed segment {pth} changed"
        # log end, offset index, time index, txn index: all cut to the same offset
        for seg in log.segments:
            assert all(o < expected_end for o, _ in seg.offset_index.entries()), seg.offset_index.entries()
            assert all(o < expected_end for _, o in seg.time_index.entries()), seg.time_index.entries()
            assert all(x.last_offset < expected_end for x in seg.txn_index.entries()), seg.txn_index.entries()
        check_segment_indexes(log)
        # every earlier batch intact
        now = [(b.base_offset, b.last_offset, b.crc) for b in scan_log(log)]
        assert now == (originals[:-1] if lost else originals)
        # producer state cut to the same offset
        states = log.producer_states()
        p_acks = [a for a in acks if a[0] == p]
        if end == "data":
            survivors = p_acks[:-1] if lost else p_acks
            assert states[p]["last_sequence"] == survivors[-1][1] + survivors[-1][2] - 1
            assert states[p]["last_offset"] == survivors[-1][4]
            assert log.open_transactions() == {}
        else:
            last_txn_data = [a for a in acks if a[0] == t][-1]
            if lost:
                assert log.open_transactions() == {t: last_txn_data[3]}, "the aborted txn is open again"
                assert log.last_stable_offset == last_txn_data[3]
            else:
                assert log.open_transactions() == {}
                assert log.last_stable_offset == expected_end

        # the retry of the last batch: appended if it was lost, a duplicate if it survived
        if end == "data":
            pid, seq, nrec, base, lst, _ = p_acks[-1]
            data, _ = make_batch(pid, seq, ts_base=TS_BASE, **FILL_SIZES)
            res = log.append(data)
            assert res.duplicate is (not lost), f"retry of the {'lost' if lost else 'surviving'} batch: {res}"
            assert (res.base_offset, res.last_offset) == (base, lst)
            next_seq = seq + nrec
        else:
            _, _, epoch, kind, off, _ = marks[-1]
            assert kind == "ABORT" and int(off) == last.base_offset
            res = log.append_marker(ControlType.ABORT, t, int(epoch), timestamp=TS_BASE)
            assert res.duplicate is (not lost), f"retry of the {'lost' if lost else 'surviving'} marker: {res}"
            if lost:
                assert res.base_offset == last.base_offset
            aborts = [x for seg in log.segments for x in seg.txn_index.entries() if x.last_offset == last.base_offset]
            assert len(aborts) == 1, f"exactly one aborted-txn entry for the marker, got {aborts}"
            assert log.open_transactions() == {}
            next_seq = p_acks[-1][1] + p_acks[-1][2]
        # and the log goes on
        end_now = log.log_end_offset
        assert end_now == last.last_offset + 1
        data, _ = make_batch(p, next_seq, ts_base=TS_BASE, **FILL_SIZES)
        res = log.append(data)
        assert not res.duplicate and res.base_offset == end_now
    finally:
        store.close()
    store = Store.open(path, read_only=True)
    try:
        log = store.partition(TOPIC, 0)
        batches = scan_log(log)
        assert [(b.base_offset, b.last_offset) for b in batches[: len(originals)]] == [(o[0], o[1]) for o in originals]
        check_segment_indexes(log)
    finally:
        store.close()


def _flip_spot(batch_pos: int, batch, kind: str, rng: random.Random) -> int:
    if kind == "payload":
        return batch_pos + 61 + rng.randrange(batch.size - 61)
    return batch_pos + 8 + 3  # low byte of batchLength: the framing itself is wrong


@pytest.mark.parametrize("kind", ["payload", "length"])
@pytest.mark.parametrize("where", ["active-first", "active-middle", "sealed-first", "sealed-middle", "sealed-last"])
@pytest.mark.parametrize("snapshots", ["kept", "deleted"])
@pytest.mark.parametrize("shutdown", ["crash", "clean"])
def test_invalid_batch_before_valid_data_is_corruption(fill_template, tmp_path, kind, where, snapshots, shutdown):
    """Rule 7: never cut acknowledged data; report the file and byte position; change no byte."""
    template, _ = fill_template("data", shutdown)
    path = _copy_template(template, str(tmp_path / "store"))
    rng = random.Random(f"{kind}-{where}-{snapshots}-{shutdown}")
    view = _file_view(path)
    seg_i = len(view) - 1 if where.startswith("active") else 1
    seg_path, batches = view[seg_i]
    assert len(batches) >= 3
    bi = {"first": 0, "middle": len(batches) // 2, "last": len(batches) - 1}[where.split("-")[1]]
    bpos, bad = batches[bi]
    spot = _flip_spot(bpos, bad, kind, rng)
    with open(seg_path, "r+b") as f:
        f.seek(spot)
        byte = f.read(1)
        f.seek(spot)
        f.write(bytes([byte[0] ^ 0xFF]))
    if snapshots == "deleted":
        for name in os.listdir(_pdir(path)):
            if name.endswith(".snapshot"):
                os.unlink(os.path.join(_pdir(path), name))
    before = {pth: _sha(pth) for pth in _log_files(path)}
    originals = {o: b for _, bs in view for _, b in bs for o in range(b.base_offset, b.last_offset + 1)}

    # Recovery scans everything after the newest usable snapshot: corruption there must stop every
    # write. The open itself succeeds, so the batches before the damage stay readable (issue 23).
    scanned_on_open = snapshots == "deleted" or (shutdown == "crash" and where.startswith("active"))
    store = Store.open(path)
    try:
        log = store.partition(TOPIC, 0)
        if scanned_on_open:
            data, _ = make_batch(9_999, 0, ts_base=TS_BASE, **FILL_SIZES)
            with pytest.raises(CorruptRecordError) as refused:
                log.append(data)
            exc = refused.value
            assert exc.path == seg_path, f"error names {exc.path}, the bad batch is in {seg_path}"
            assert exc.position == bpos, f"error names byte {exc.position}, the bad batch starts at {bpos}"
            assert seg_path in str(exc) and str(bpos) in str(exc)
        # Reading the range must refuse, not serve garbage.
        for o in range(bad.base_offset, bad.last_offset + 1):
            with pytest.raises(CorruptRecordError) as info:
                log.read(o)
            assert info.value.path == seg_path
    finally:
        store.close()
    assert {pth: _sha(pth) for pth in _log_files(path)} == before, "corrupt data must never be cut or rewritten"

    # A lock-free reader never gets garbage: a batch it returns is the original one.
    store = Store.open(path, read_only=True)
    try:
        try:
            log = store.partition(TOPIC, 0)
        except CorruptRecordError:
            log = None
        if log is not None:
            for o, orig in originals.items():
                try:
                    got = log.read(o, max_bytes=1)
                except (CorruptRecordError, OffsetOutOfRangeError):
                    continue
                if got:
                    assert (got[0].base_offset, got[0].last_offset, got[0].crc) == (
                        orig.base_offset,
                        orig.last_offset,
                        orig.crc,
                    ), f"read({o}) served a different batch"
                    assert got[0].crc != bad.crc or orig is not bad
    finally:
        store.close()
    assert {pth: _sha(pth) for pth in _log_files(path)} == before


# =====================================================================================================
# (4) docs/reliability-scenarios.md scenario 45: damaged offset and time indexes
# =====================================================================================================


def _lookups(log) -> tuple[dict, dict]:
    start, end = log.log_start_offset, log.log_end_offset
    offsets = {}
    for o in range(start, end):
        got = log.read(o, max_bytes=1)
        assert got and got[0].base_offset <= o <= got[0].last_offset, f"read({o}) -> {got}"
        offsets[o] = (got[0].base_offset, got[0].last_offset, got[0].crc)
    stamps = set()
    for b in scan_log(log):
        if not b.is_control:
            for r in b.records():
                stamps.update((r.timestamp - 1, r.timestamp, r.timestamp + 1))
    stamps.update((min(stamps) - 1000, max(stamps) + 1000))
    times = {ts: log.offset_for_timestamp(ts) for ts in sorted(stamps)}
    return offsets, times


def _brute_force_times(log, stamps) -> dict:
    recs = [(r.offset, r.timestamp) for b in scan_log(log) if not b.is_control for r in b.records()]
    return {ts: next((o for o, t in recs if t >= ts), None) for ts in stamps}


@pytest.fixture(scope="module")
def index_answers(fill_template):
    cache = {}

    def get(shutdown: str):
        if shutdown not in cache:
            template, _ = fill_template("data", shutdown)
            store = Store.open(template, read_only=True)
            try:
                log = store.partition(TOPIC, 0)
                offsets, times = _lookups(log)
                brute = _brute_force_times(log, times)
            finally:
                store.close()
            cache[shutdown] = (offsets, times, brute)
        return cache[shutdown]

    return get


def test_timestamp_lookups_match_a_full_scan(index_answers):
    """The pre-damage answers used below are themselves right (checked against brute force)."""
    for shutdown in ("crash", "clean"):
        _, times, brute = index_answers(shutdown)
        wrong = {ts: (got, brute[ts]) for ts, got in times.items() if got != brute[ts]}
        assert not wrong, f"offset_for_timestamp disagrees with a full scan ({shutdown}): {list(wrong.items())[:5]}"


def _damage_index(path: str, damage: str, rng: random.Random, *, log_size: int, seg_base: int, seg_end: int) -> None:
    esize = 8 if path.endswith(".index") else 12
    with open(path, "rb") as f:
        data = f.read()
    n = len(data) // esize
    assert n >= 2, f"{path} needs two entries to damage, has {n}"
    if damage == "truncate-mid-entry":
        os.truncate(path, len(data) - rng.randint(1, esize - 1))
    elif damage == "truncate-entries":
        os.truncate(path, (n // 2) * esize)
    elif damage == "zero":
        with open(path, "r+b") as f:
            f.write(b"\0" * len(data))
    elif damage == "zero-tail":
        with open(path, "ab") as f:
            f.write(b"\0" * 4096)
    elif damage == "delete":
        os.unlink(path)
    elif damage == "swap":
        i, j = 0, n - 1
        ents = [data[k * esize : (k + 1) * esize] for k in range(n)]
        ents[i], ents[j] = ents[j], ents[i]
        with open(path, "r+b") as f:
            f.write(b"".join(ents))
    elif damage == "out-of-bounds":
        last = data[(n - 1) * esize : n * esize]
        if esize == 8:
            rel, _ = struct.unpack(">ii", last)
            new = struct.pack(">ii", rel + 1, log_size + 1000)
        else:
            ts, _ = struct.unpack(">qi", last)
            new = struct.pack(">qi", ts + 1000, seg_end - seg_base + 50)
        with open(path, "r+b") as f:
            f.seek((n - 1) * esize)
            f.write(new)
    else:
        raise AssertionError(damage)


DAMAGES = ["truncate-mid-entry", "truncate-entries", "zero", "zero-tail", "delete", "swap", "out-of-bounds"]


def _apply_damage(path: str, view, plan, seed: str) -> None:
    rng = random.Random(seed)
    for i, suffix, damage in plan:
        log_path, batches = view[i]
        log_path = os.path.join(path, _pdir_rel(log_path))
        _damage_index(
            log_path[:-4] + suffix,
            damage,
            rng,
            log_size=os.path.getsize(log_path),
            seg_base=batches[0][1].base_offset,
            seg_end=batches[-1][1].last_offset + 1,
        )


def _pdir_rel(log_path: str) -> str:
    return os.path.join(f"{TOPIC}-0", os.path.basename(log_path))


def _run_damage_case(fill_template, index_answers, tmp_path, shutdown: str, plan_for, seed: str) -> None:
    """Damage index files (plan_for(view) -> [(segment index, suffix, damage)]); no lookup may change."""
    template, _ = fill_template("data", shutdown)
    offsets_before, times_before, _ = index_answers(shutdown)
    view = _file_view(template)
    plan = plan_for(view)
    path = _copy_template(template, str(tmp_path / "store"))
    _apply_damage(path, view, plan, seed)
    logs_before = {os.path.basename(pth): _sha(pth) for pth in _log_files(path)}
    problems: list[str] = []

    def compare(what: str, offsets: dict, times: dict) -> None:
        if offsets != offsets_before:
            wrong = [
                (o, offsets.get(o), offsets_before[o]) for o in offsets_before if offsets.get(o) != offsets_before[o]
            ]
            problems.append(f"{what}: offset lookups changed (offset, now, before): {wrong[:4]}")
        wrong = [
            (f"TS_BASE+{ts - TS_BASE}", times.get(ts), want)
            for ts, want in times_before.items()
            if times.get(ts) != want
        ]
        if wrong:
            problems.append(f"{what}: {len(wrong)} timestamp lookups changed (ts, now, before): {wrong[:4]}")

    # A writable open rebuilds the damaged indexes, changing no log byte and no answer ...
    store = Store.open(path)
    try:
        log = store.partition(TOPIC, 0)
        compare("writable open", *_lookups(log))
        for seg in log.segments:
            size = seg.file_size()
            if size and not (os.path.exists(seg.offset_index.path) and os.path.exists(seg.time_index.path)):
                problems.append(f"{seg.log_path}: index files missing after the open")
            try:
                seg.offset_index.sanity_check(size)
                seg.time_index.sanity_check(next_offset=seg.next_offset)
                seg.txn_index.sanity_check()
            except CorruptIndexError as exc:
                problems.append(f"index sanity check fails after the writable open: {exc}")
        try:
            check_segment_indexes(log)
        except AssertionError as exc:
            problems.append(f"index entries disagree with the log after the writable open: {exc}")
    finally:
        store.close()
    if {os.path.basename(pth): _sha(pth) for pth in _log_files(path)} != logs_before:
        problems.append("index repair changed .log bytes")

    # ... and a lock-free reader never lets a damaged index change what it sees (docs/reliability-scenarios.md rule 6).
    path2 = _copy_template(template, str(tmp_path / "store-ro"))
    _apply_damage(path2, view, plan, seed)
    store = Store.open(path2, read_only=True)
    try:
        compare("read-only open", *_lookups(store.partition(TOPIC, 0)))
    finally:
        store.close()
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
@pytest.mark.parametrize("target", ["sealed", "active"])
@pytest.mark.parametrize("shutdown", ["crash", "clean"])
def test_damaged_index_changes_no_lookup(fill_template, index_answers, tmp_path, damage, suffix, target, shutdown):
    def plan(view):
        return [(1 if target == "sealed" else len(view) - 1, suffix, damage)]

    _run_damage_case(fill_template, index_answers, tmp_path, shutdown, plan, f"{damage}{suffix}{target}{shutdown}")


@pytest.mark.parametrize("shutdown", ["crash", "clean"])
def test_every_index_damaged_at_once(fill_template, index_answers, tmp_path, shutdown):
    """Both index files of every segment (sealed ones and the active one) damaged in one go."""
    rng = random.Random(f"all-{shutdown}")

    def plan(view):
        out = []
        for i, (log_path, _) in enumerate(view):
            for suffix in (".index", ".timeindex"):
                esize = 8 if suffix == ".index" else 12
                entries = os.path.getsize(log_path[:-4] + suffix) // esize
                out.append((i, suffix, rng.choice(DAMAGES) if entries >= 2 else "delete"))
        return out

    _run_damage_case(fill_template, index_answers, tmp_path, shutdown, plan, f"all-{shutdown}")
