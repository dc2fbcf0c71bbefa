"""Worker process for the crash and multi-process tests, plus the helpers both sides share.

Not a test module (no `test_` prefix). Run as a script it opens a store and works in a
loop, printing one flushed line per acknowledged operation, so the parent knows exactly
what was acknowledged before it kills the process with SIGKILL:

    PID <producer_id>                                   the producer id in use
    ACK <pid> <seq> <nrec> <base> <last> <dup>          an append returned (dup = 0/1)
    MARK <pid> <epoch> <ABORT|COMMIT> <offset> <dup>    a transaction marker was written
    HANG <pid> <seq>                                    about to block forever inside an append
    READY / DONE / STATS ... / FAIL ...

Modes (first argument):

    append   idempotent appends of deterministic batches; the batch of (pid, seq) is always
             byte-identical, so restarting with `--pid P --seq S` re-sends exactly the batch
             that was in flight when the previous worker was killed (the idempotent retry).
             `--hang fsync|write` blocks forever inside the append after `--hang-after` acks,
             holding the partition flock (after the whole batch was written, or after half
             of it), for docs/reliability-scenarios.md scenario 40.
    fill     an idempotent producer interleaved with a transactional one (aborts and
             commits, markers with the bumped epoch as in KIP-890), for the torn-tail and
             index-damage scenarios; `--exit crash` leaves without a clean close.
    alloc    allocate producer ids in a loop (docs/reliability-scenarios.md scenario 37).
    read     a lock-free reader polling log_end_offset/read (docs/reliability-scenarios.md scenarios 39-style and 42);
             checks every batch it gets and exits non-zero on the first violation.

Every record value is `b"<pid>:<seq>:" + filler`, the filler derived from (pid, seq), so the
parent can tell exactly which record it is looking at and that its bytes are intact.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

TOPIC = "t"

# ---- the records: deterministic content keyed by (producer id, sequence) -------------------------


def _h(*parts: int) -> int:
    return int.from_bytes(hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest(), "big")


def expected_value(pid: int, seq: int, size: int) -> bytes:
    head = b"%d:%d:" % (pid, seq)
    if size <= len(head):
        return head
    pad = hashlib.sha256(head).digest()
    n = size - len(head)
    return head + (pad * (n // len(pad) + 1))[:n]


def parse_value(value: bytes) -> tuple[int, int]:
    """(pid, seq) of a record value; ValueError if the bytes are not exactly what was written."""
    try:
        pid_s, seq_s, _ = value.split(b":", 2)
        pid, seq = int(pid_s), int(seq_s)
    except Exception as exc:  # any malformation is "garbage"
        raise ValueError(f"not a worker record value: {value[:40]!r}") from exc
    if value != expected_value(pid, seq, len(value)):
        raise ValueError(f"record value of ({pid}, {seq}) has damaged bytes")
    return pid, seq


def batch_shape(pid: int, seq: int, min_size: int, max_size: int, max_records: int) -> list[int]:
    """Value sizes of the records of the batch starting at (pid, seq): same answer every time."""
    h = _h(pid, seq, min_size, max_size, max_records)
    count = 1 + h % max_records
    span = max_size - min_size + 1
    return [min_size + _h(pid, seq, i, h) % span for i in range(count)]


def make_batch(
    pid: int,
    seq: int,
    *,
    epoch: int = 0,
    ts_base: int,
    min_size: int = 50,
    max_size: int = 400,
    max_records: int = 3,
    transactional: bool = False,
) -> tuple[bytes, int]:
    """(batch bytes, record count) of the batch (pid, seq); record i has timestamp ts_base + seq + i."""
    from storage.records import build_batch

    sizes = batch_shape(pid, seq, min_size, max_size, max_records)
    records = [
        (b"k%d" % (seq + i), expected_value(pid, seq + i, size), None, ts_base + seq + i)
        for i, size in enumerate(sizes)
    ]
    data = build_batch(
        records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=transactional
    )
    return data, len(sizes)


def check_batch(batch) -> list[tuple[int, int, int]]:
    """Decode and check a data batch read back; returns [(offset, pid, seq)] of its records."""
    records = batch.records()
    if len(records) != batch.last_offset - batch.base_offset + 1:
        raise AssertionError(
            f"batch at {batch.base_offset} holds {len(records)} records for offsets "
            f"{batch.base_offset}..{batch.last_offset}"
        )
    out = []
    for i, rec in enumerate(records):
        if rec.offset != batch.base_offset + i:
            raise AssertionError(f"record {i} of batch {batch.base_offset} has offset {rec.offset}")
        pid, seq = parse_value(rec.value)
        if pid != batch.producer_id or seq != batch.base_sequence + i:
            raise AssertionError(
                f"record at offset {rec.offset} is ({pid}, {seq}) inside batch of producer "
                f"{batch.producer_id} base sequence {batch.base_sequence}"
            )
        out.append((rec.offset, pid, seq))
    return out


# ---- the worker side -------------------------------------------------------------------------------------


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _hang_forever(pid: int, seq: int) -> None:
    _say(f"HANG {pid} {seq}")
    while True:
        time.sleep(3600)


def _arm_hang(kind: str, state: dict) -> None:
    """Patch os.fdatasync / os.write so the append after `state['after']` acks never returns."""
    if kind == "fsync":
        real = os.fdatasync

        def fdatasync(fd):
            if state["armed"]:
                _hang_forever(state["pid"], state["seq"])
            return real(fd)

        os.fdatasync = fdatasync
    elif kind == "write":
        real_write = os.write

        def write(fd, data):
            if state["armed"]:
                try:
                    target = os.readlink(f"/proc/self/fd/{fd}")
                except OSError:
                    target = ""
                if target.endswith(".log"):
                    half = max(1, len(data) // 2)
                    real_write(fd, bytes(data[:half]))
                    _hang_forever(state["pid"], state["seq"])
            return real_write(fd, data)

        os.write = write


def _wait_go(args) -> None:
    if args.go_stdin:
        _say("READY")
        line = sys.stdin.readline()
        if line.strip() != "GO":
            sys.exit(2)


def _finish(store, how: str) -> None:
    _say("DONE")
    if how == "crash":
        os._exit(0)
    store.close()


def run_append(args) -> None:
    from storage import Store

    store = Store.open(args.store)
    log = store.partition(args.topic, args.partition)
    pid = args.pid if args.pid >= 0 else store.allocate_producer_id()
    _say(f"PID {pid}")
    state = {"armed": False, "pid": pid, "seq": args.seq}
    if args.hang != "none":
        _arm_hang(args.hang, state)
    _wait_go(args)
    seq = args.seq
    done = 0
    while args.count <= 0 or done < args.count:
        data, nrec = make_batch(
            pid,
            seq,
            epoch=args.epoch,
            ts_base=args.ts_base,
            min_size=args.min_size,
            max_size=args.max_size,
            max_records=args.max_records,
        )
        state["seq"] = seq
        if args.hang != "none" and done == args.hang_after:
            state["armed"] = True
        res = log.append(data)
        _say(f"ACK {pid} {seq} {nrec} {res.base_offset} {res.last_offset} {int(res.duplicate)}")
        if args.enforce_retention:
            log.enforce_retention()
        seq += nrec
        done += 1
    _finish(store, args.exit)


def run_fill(args) -> None:
    """Idempotent producer P interleaved with transactional producer T (aborts and commits)."""
    from storage import Store
    from storage.records import ControlType

    store = Store.open(args.store)
    log = store.partition(args.topic, args.partition)
    p = store.allocate_producer_id()
    t = store.allocate_producer_id()
    _say(f"PID {p}")
    _say(f"PID {t}")
    kw = {
        "ts_base": args.ts_base,
        "min_size": args.min_size,
        "max_size": args.max_size,
        "max_records": args.max_records,
    }
    p_seq = 0
    t_epoch = 0
    txns = 0

    bases: list[int] = []

    def data(pid, seq, epoch, transactional):
        batch, nrec = make_batch(pid, seq, epoch=epoch, transactional=transactional, **kw)
        res = log.append(batch)
        bases.append(res.base_offset)
        _say(f"ACK {pid} {seq} {nrec} {res.base_offset} {res.last_offset} {int(res.duplicate)}")
        return nrec

    def marker(kind):
        nonlocal t_epoch
        ctype = ControlType.ABORT if kind == "ABORT" else ControlType.COMMIT
        t_epoch += 1  # KIP-890 part 2: the marker carries the bumped epoch
        res = log.append_marker(ctype, t, t_epoch, timestamp=args.ts_base + 10 * txns)
        _say(f"MARK {t} {t_epoch} {kind} {res.base_offset} {int(res.duplicate)}")

    for i in range(args.count):
        p_seq += data(p, p_seq, 0, False)
        if args.txn_every and i % args.txn_every == args.txn_every - 1:
            t_seq = data(t, 0, t_epoch, True)
            data(t, t_seq, t_epoch, True)
            marker("ABORT" if txns % 2 == 0 else "COMMIT")
            txns += 1
    if args.settle:
        # Leave an active segment holding at least `settle` batches, with room for the ending.
        room = args.max_records * (args.max_size + 40) + 61 + 78 + 200
        while True:
            active = log.segments[-1]
            held = sum(1 for b in bases if b >= active.base_offset)
            if held >= args.settle and log.config.segment_bytes - active.file_size() >= room:
                break
            if log.config.segment_bytes - active.file_size() < room and held >= 1:
                log.roll()
                continue
            p_seq += data(p, p_seq, 0, False)
    if args.end == "data":
        data(p, p_seq, 0, False)
    elif args.end == "abort":
        data(t, 0, t_epoch, True)
        marker("ABORT")
    elif args.end == "open-txn":
        data(t, 0, t_epoch, True)
    _finish(store, args.exit)


def run_alloc(args) -> None:
    from storage import Store

    store = Store.open(args.store)
    _wait_go(args)
    done = 0
    while args.count <= 0 or done < args.count:
        _say(f"PID {store.allocate_producer_id()}")
        done += 1
    _finish(store, args.exit)


class ReaderFailure(Exception):
    pass


def run_read(args) -> None:
    """Poll log_end_offset and read() without any lock; every batch must be whole and in order."""
    from storage import Store
    from storage.errors import OffsetOutOfRangeError

    store = Store.open(args.store, read_only=not args.writable)
    log = store.partition(args.topic, args.partition)
    pos = log.log_start_offset if args.follow_retention else 0
    last_seq: dict[int, int] = {}
    last_epoch: dict[int, int] = {}
    may_jump: set[int] = set()
    prev_leo = -1
    batches = resets = polls = 0
    stopping = False
    sizes = [1, 300, 4096, 1 << 20]

    def fail(msg: str) -> None:
        raise ReaderFailure(f"{msg} (pos={pos} leo={prev_leo} batches={batches} resets={resets})")

    while True:
        polls += 1
        if args.pause_every and polls % args.pause_every == 0:
            time.sleep(args.pause_ms / 1000)  # fall behind the writer (and its retention) now and then
        leo = log.log_end_offset
        if leo < prev_leo:
            fail(f"log_end_offset went backwards: {prev_leo} -> {leo}")
        prev_leo = leo
        if pos > leo:
            fail(f"position {pos} is past the log end {leo}")
        try:
            got = log.read(pos, max_bytes=sizes[polls % len(sizes)])
        except OffsetOutOfRangeError as exc:
            if not args.follow_retention:
                fail(f"OffsetOutOfRangeError without retention: {exc}")
            start = log.log_start_offset
            if start <= pos:
                fail(f"OffsetOutOfRangeError at {pos} but the log starts at {start}: {exc}")
            pos = start
            resets += 1
            may_jump = set(last_seq)
            if args.lockstep:
                _say(f"AT {pos} {resets} {batches} {log.log_end_offset}")
                if sys.stdin.readline().strip() != "NEXT":
                    break
            continue
        for b in got:
            if b.base_offset != pos:
                fail(f"read({pos}) gave a batch at {b.base_offset}..{b.last_offset}: offsets not contiguous")
            if b.is_control:
                pos = b.last_offset + 1
                batches += 1
                continue
            try:
                check_batch(b)
            except (AssertionError, ValueError) as exc:
                fail(f"garbage batch at {b.base_offset}: {exc}")
            pid = b.producer_id
            if last_epoch.get(pid, b.producer_epoch) != b.producer_epoch:
                last_seq.pop(pid)  # a new epoch starts its sequences at 0
                if b.base_sequence != 0:
                    fail(f"producer {pid} epoch {b.producer_epoch} starts at sequence {b.base_sequence}")
            if pid in last_seq:
                ok = b.base_sequence > last_seq[pid] if pid in may_jump else b.base_sequence == last_seq[pid] + 1
                if not ok:
                    fail(f"producer {pid} sequence {b.base_sequence} after {last_seq[pid]} at offset {b.base_offset}")
            may_jump.discard(pid)
            last_seq[pid] = b.base_sequence + b.records_count - 1
            last_epoch[pid] = b.producer_epoch
            pos = b.last_offset + 1
            batches += 1
        if got:
            after = log.log_end_offset
            if got[-1].last_offset >= after:
                fail(f"read returned offset {got[-1].last_offset} at or past log_end_offset {after}")
        if args.lockstep:
            _say(f"AT {pos} {resets} {batches} {log.log_end_offset}")
            if sys.stdin.readline().strip() != "NEXT":
                break
            continue
        if args.expect_batches and batches >= args.expect_batches:
            break
        if not got:
            if stopping:
                break
            if args.stop_file and os.path.exists(args.stop_file):
                stopping = True  # one more full pass: read up to the final log end
                continue
            time.sleep(0.0005)
    _say(f"STATS batches={batches} resets={resets} polls={polls} pos={pos}")
    store.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["append", "fill", "alloc", "read"])
    ap.add_argument("--store", required=True)
    ap.add_argument("--topic", default=TOPIC)
    ap.add_argument("--partition", type=int, default=0)
    ap.add_argument("--pid", type=int, default=-1, help="producer id; -1 allocates one")
    ap.add_argument("--seq", type=int, default=0, help="base sequence of the first batch to send")
    ap.add_argument("--epoch", type=int, default=0)
    ap.add_argument("--count", type=int, default=0, help="batches (allocations) to do; 0 = until killed")
    ap.add_argument("--ts-base", type=int, default=0)
    ap.add_argument("--min-size", type=int, default=50)
    ap.add_argument("--max-size", type=int, default=400)
    ap.add_argument("--max-records", type=int, default=3)
    ap.add_argument("--exit", choices=["close", "crash"], default="close")
    ap.add_argument("--go-stdin", action="store_true", help="print READY, then wait for GO on stdin")
    ap.add_argument("--hang", choices=["none", "fsync", "write"], default="none")
    ap.add_argument("--hang-after", type=int, default=0)
    ap.add_argument("--enforce-retention", action="store_true")
    ap.add_argument("--txn-every", type=int, default=0)
    ap.add_argument("--settle", type=int, default=0, help="fill: batches the active segment must hold")
    ap.add_argument("--end", choices=["data", "abort", "open-txn"], default="data")
    ap.add_argument("--writable", action="store_true", help="reader opens the store writable")
    ap.add_argument("--follow-retention", action="store_true")
    ap.add_argument("--expect-batches", type=int, default=0)
    ap.add_argument("--stop-file", default="")
    ap.add_argument("--lockstep", action="store_true")
    ap.add_argument("--pause-every", type=int, default=0, help="reader: sleep every N polls")
    ap.add_argument("--pause-ms", type=float, default=0)
    args = ap.parse_args(argv)
    if args.ts_base == 0:
        args.ts_base = int(time.time() * 1000)
    try:
        {"append": run_append, "fill": run_fill, "alloc": run_alloc, "read": run_read}[args.mode](args)
    except ReaderFailure as exc:
        _say(f"FAIL {exc}")
        sys.exit(3)


# ---- the parent side: spawning workers and reading their lines -------------------------------------------

WORKER = os.path.abspath(__file__)
HANG_GUARD = 180.0  # seconds: a worker silent this long is hung; the test fails instead of hanging


class Worker:
    """A worker subprocess whose stdout lines arrive on a queue (so reads can give up instead of hanging).

    Other worker scripts reuse it by overriding SCRIPT (and `_env` for their environment).
    """

    SCRIPT = WORKER

    def __init__(self, mode: str, store: str, *args: str | int, stdin: bool = False):
        cmd = [sys.executable, self.SCRIPT, mode, "--store", store, *map(str, args)]
        self.cmd = cmd
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            text=True,
            bufsize=1,
            env=self._env(),
        )
        self.pid = self.proc.pid
        self.lines: list[str] = []
        self._q: queue.Queue = queue.Queue()
        self._stderr: list[str] = []
        self._out_thread = threading.Thread(target=self._pump, args=(self.proc.stdout, self._q), daemon=True)
        self._err_thread = threading.Thread(target=self._drain, daemon=True)
        self._out_thread.start()
        self._err_thread.start()

    def _env(self) -> dict[str, str] | None:
        return None  # inherit ours

    def _pump(self, stream, q) -> None:
        for line in stream:
            q.put(line.rstrip("\n"))
        q.put(None)

    def _drain(self) -> None:
        for line in self.proc.stderr:
            self._stderr.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)

    def next_line(self, timeout: float = HANG_GUARD) -> str | None:
        """The next stdout line; None at EOF. AssertionError if none comes within `timeout`."""
        try:
            line = self._q.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            # from None: the queue's Empty says nothing the message does not
            raise AssertionError(f"worker {self.cmd} produced nothing for {timeout} s (hung?)\n{self.stderr}") from None
        if line is not None:
            self.lines.append(line)
        else:
            self._q.put(None)  # keep reporting EOF
        return line

    def expect(self, prefix: str, timeout: float = HANG_GUARD) -> str:
        """Read lines until one starts with `prefix`; AssertionError at EOF."""
        while True:
            line = self.next_line(timeout)
            if line is None:
                self.proc.wait()
                raise AssertionError(
                    f"worker exited ({self.proc.returncode}) before printing {prefix!r}; "
                    f"stdout tail {self.lines[-5:]}\nstderr:\n{self.stderr}"
                )
            if line.startswith(prefix):
                return line

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def finish(self, timeout: float = HANG_GUARD) -> list[str]:
        """Wait for exit (killing it after `timeout`), then return every stdout line."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"worker {self.cmd} did not finish within {timeout} s\n{self.stderr}") from None
        return self.drain()

    def drain(self) -> list[str]:
        """After the process ended: every line it printed."""
        self._out_thread.join(HANG_GUARD)
        while self.next_line(HANG_GUARD) is not None:
            pass
        self._err_thread.join(HANG_GUARD)
        return self.lines

    def check_ok(self, timeout: float = HANG_GUARD) -> list[str]:
        lines = self.finish(timeout)
        assert self.proc.returncode == 0, (
            f"worker {self.cmd} exited {self.proc.returncode}\nstdout tail: {lines[-5:]}\nstderr:\n{self.stderr}"
        )
        return lines


def parse_acks(lines: list[str]) -> list[tuple[int, int, int, int, int, bool]]:
    """(pid, seq, nrec, base, last, dup) of every ACK line."""
    out = []
    for line in lines:
        if line.startswith("ACK "):
            pid, seq, nrec, base, last, dup = map(int, line.split()[1:])
            out.append((pid, seq, nrec, base, last, bool(dup)))
    return out


# ---- verification helpers used by the tests ---------------------------------------------------------------


def scan_log(log, start: int | None = None) -> list:
    """Every batch from `start` (default: log start) to the log end via read(); offsets must be dense."""
    pos = log.log_start_offset if start is None else start
    end = log.log_end_offset
    out = []
    while pos < end:
        got = log.read(pos)
        assert got, f"read({pos}) returned nothing below the log end {end}"
        for b in got:
            assert b.base_offset == pos, f"offsets not dense: expected a batch at {pos}, got {b.base_offset}"
            out.append(b)
            pos = b.last_offset + 1
    assert pos == end, f"scan ended at {pos}, log end is {end}"
    return out


def segment_file_batches(path: str) -> tuple[list[tuple[int, object]], int]:
    """(position, RecordBatch) of every whole CRC-valid batch in a .log file, and the bytes left after them."""
    from storage.records import RecordBatch

    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    out = []
    while len(data) - pos >= 61:
        length = int.from_bytes(data[pos + 8 : pos + 12], "big", signed=True)
        if length < 49 or pos + 12 + length > len(data):
            break
        try:
            b = RecordBatch.parse(data, pos)
        except Exception:  # noqa: BLE001
            break
        out.append((pos, b))
        pos += b.size
    return out, len(data) - pos


def check_segment_files(log, *, allow_torn_tail: bool = False) -> int:
    """The segment files tile the offsets: each starts at its base, ends where the next begins.

    Only the last file may have bytes after its last whole batch, and only if `allow_torn_tail`
    (a reader's view of a crashed writer's tail before anyone recovered it). Returns the batch count.
    """
    segs = log.segments
    total = 0
    for i, seg in enumerate(segs):
        batches, rest = segment_file_batches(seg.log_path)
        last_seg = i == len(segs) - 1
        assert rest == 0 or (allow_torn_tail and last_seg), f"{seg.log_path}: {rest} bytes after the last batch"
        expected = seg.base_offset
        for _, b in batches:
            assert b.base_offset == expected, f"{seg.log_path}: batch at {b.base_offset}, expected {expected}"
            expected = b.last_offset + 1
        if not last_seg:
            assert expected == segs[i + 1].base_offset, (
                f"{seg.log_path} ends at offset {expected}, the next segment starts at {segs[i + 1].base_offset}"
            )
        total += len(batches)
    return total


def check_segment_indexes(log) -> None:
    """Every offset/time/txn index entry agrees with a full scan of its segment's bytes."""
    for seg in log.segments:
        batches, rest = segment_file_batches(seg.log_path)
        assert rest == 0, f"{seg.log_path} has {rest} bytes after its last whole batch"
        by_pos = {pos: b for pos, b in batches}
        end = batches[-1][1].last_offset + 1 if batches else seg.base_offset
        for off, pos in seg.offset_index.entries():
            b = by_pos.get(pos)
            assert b is not None, f"{seg.offset_index.path}: entry ({off}, {pos}) is not a batch start"
            assert b.base_offset <= off <= b.last_offset, (
                f"{seg.offset_index.path}: entry ({off}, {pos}) points at batch {b.base_offset}..{b.last_offset}"
            )
        running = -1
        max_upto = []  # (last offset, running max timestamp) per batch
        for _, b in batches:
            running = max(running, b.max_timestamp)
            max_upto.append((b.last_offset, b.max_timestamp, running))
        for ts, off in seg.time_index.entries():
            assert seg.base_offset <= off < end, f"{seg.time_index.path}: entry ({ts}, {off}) outside the segment"
            match = [m for m in max_upto if m[0] == off]
            assert match, f"{seg.time_index.path}: entry ({ts}, {off}) is not the last offset of a batch"
            assert match[0][1] == ts == match[0][2], (
                f"{seg.time_index.path}: entry ({ts}, {off}) but the batch max is {match[0][1]} "
                f"and the running max {match[0][2]}"
            )
        for txn in seg.txn_index.entries():
            assert seg.base_offset <= txn.last_offset < end, f"{seg.txn_index.path}: {txn} outside the segment"
            marker = [b for _, b in batches if b.base_offset == txn.last_offset]
            assert marker and marker[0].is_control, f"{seg.txn_index.path}: {txn} does not end at a marker"


if __name__ == "__main__":
    main()
