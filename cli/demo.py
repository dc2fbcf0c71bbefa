"""`txlog demo`: what the segment store guarantees, shown on the default store in a few seconds.

It recreates its own topic (`txlog-demo`, one partition) and narrates, in tables on
stdout, four things every later layer relies on:

1. an idempotent producer's retried batch is answered with the original offsets, nothing written;
2. a sequence gap and a stale epoch are refused before any byte is written;
3. a writer killed with SIGKILL, plus a torn write, loses no acknowledged batch: reopening
   cuts the torn tail, and the dead writer's retry of its last batch is a duplicate;
4. ABORT and COMMIT markers (78-byte control batches) move the last stable offset, and an
   abort leaves its entry in the segment's `.txnindex`.

Sections 5-8 (`cli/demo_exactly_once.py`) go on with the exactly-once layer: delivery
semantics under injected faults, committed and aborted transactions, a fenced zombie, and a
commit killed half-way. Every claim is also checked; a failed check is reported and the
command exits 3. The demo has no rules of its own: it drives `storage` and `txlog`.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import typer

from cli.context import DEFAULT_DATA_DIR, open_store, settings
from cli.demo_exactly_once import (
    TXN_TOPIC,
    show_client_transactions,
    show_crash_mid_commit,
    show_delivery_semantics,
)
from cli.output import error_line, render_table

if TYPE_CHECKING:  # the CLI imports storage only when a command runs
    from storage.partition_log import AppendResult, PartitionLog
    from storage.records import RecordBatch
    from storage.store import Store

DEMO_TOPIC = "txlog-demo"
PARTITION = 0
RECORDS_PER_BATCH = 3
TORN_BYTES = bytes((i * 37 + 11) % 256 for i in range(100))  # what a write cut short leaves behind
MIN_ACKS = 20  # the writer is killed once it has acknowledged at least this many batches ...
MIN_RUN_SECONDS = 0.2  # ... and has been appending for at least this long
WRITER_TIMEOUT = 20.0
PROSE_WIDTH = 100


@dataclass
class Narrator:
    """Prints the story to stdout unless -q; collects the checks behind it."""

    quiet: bool
    problems: list[str] = field(default_factory=list)
    checks: int = 0

    def heading(self, text: str) -> None:
        self.say("")
        self.say(text)

    def say(self, text: str = "") -> None:
        if not self.quiet:
            typer.echo(text)

    def para(self, text: str) -> None:
        """Prose, wrapped for an ordinary terminal."""
        self.say(textwrap.fill(text, width=PROSE_WIDTH))

    def table(self, rows: Sequence[Sequence[object]], headers: Sequence[str]) -> None:
        if not self.quiet:
            typer.echo(render_table(rows, headers))

    def expect(self, ok: bool, claim: str) -> bool:
        self.checks += 1
        if not ok:
            self.problems.append(claim)
        return ok


def span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}..{last}"


def _records(producer_id: int, first_sequence: int, count: int, tag: str) -> list[tuple]:
    return [
        (f"{tag}-{producer_id}-{s}".encode(), f"{tag} record, sequence {s}".encode(), [], None)
        for s in range(first_sequence, first_sequence + count)
    ]


def _batch(
    producer_id: int,
    epoch: int,
    sequence: int,
    *,
    count: int = RECORDS_PER_BATCH,
    transactional: bool = False,
    tag: str = "demo",
) -> bytes:
    from storage.records import build_batch

    return build_batch(
        _records(producer_id, sequence, count, tag),
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=transactional,
    )


# ---- 1. idempotence ---------------------------------------------------------------------------------


def show_idempotence(n: Narrator, store: Store, log: PartitionLog) -> int:
    pid = store.allocate_producer_id()
    n.heading("1. Idempotent producer: a retried batch is written once")
    n.para(
        f"Producer {pid} (epoch 0) sends 3 batches of {RECORDS_PER_BATCH} records, then sends batch 2 "
        "again, as a client does when the acknowledgement of a written batch is lost."
    )
    rows = []
    sent: list[tuple[bytes, AppendResult]] = []
    for i in range(3):
        seq = i * RECORDS_PER_BATCH
        data = _batch(pid, 0, seq)
        result = log.append(data)
        sent.append((data, result))
        rows.append(
            (
                f"send batch {i + 1}",
                span(seq, seq + RECORDS_PER_BATCH - 1),
                "appended",
                span(result.base_offset, result.last_offset),
                log.log_end_offset,
                log.size_bytes,
            )
        )
    end, size = log.log_end_offset, log.size_bytes
    data, original = sent[1]
    retry = log.append(data)  # the very same bytes
    same_offsets = (retry.base_offset, retry.last_offset) == (original.base_offset, original.last_offset)
    unchanged = (log.log_end_offset, log.size_bytes) == (end, size)
    rows.append(
        (
            "retry batch 2 (ack lost)",
            span(RECORDS_PER_BATCH, 2 * RECORDS_PER_BATCH - 1),
            "duplicate: nothing written" if retry.duplicate else "APPENDED AGAIN",
            span(retry.base_offset, retry.last_offset),
            log.log_end_offset,
            log.size_bytes,
        )
    )
    n.table(rows, ("attempt", "sequences", "result", "offsets", "log end offset", "bytes on disk"))
    n.expect(retry.duplicate and same_offsets, "the retried batch is answered as a duplicate with its original offsets")
    n.expect(unchanged, "the retried batch writes nothing")
    n.para(
        f"The retry got offsets {span(retry.base_offset, retry.last_offset)}, those of the first attempt; "
        "the log end offset and the file size did not move."
    )
    return pid


# ---- 2. gaps and stale epochs -------------------------------------------------------------------------


def show_rejections(n: Narrator, log: PartitionLog, pid: int) -> None:
    from storage.errors import (
        InvalidProducerEpochError,
        KafkaError,
        OutOfOrderSequenceError,
    )

    n.heading("2. Out-of-order sequences and stale epochs are refused, nothing written")
    next_seq = 3 * RECORDS_PER_BATCH
    gap_seq = next_seq + RECORDS_PER_BATCH
    attempts: list[tuple[str, int, int, type[KafkaError] | None]] = [
        (f"skip {span(next_seq, gap_seq - 1)} (a gap)", 0, gap_seq, OutOfOrderSequenceError),
        ("new instance, epoch bumped", 1, 0, None),
        ("old instance sends again", 0, next_seq, InvalidProducerEpochError),
    ]
    rows = []
    reasons = []
    for label, epoch, seq, expected in attempts:
        end, size = log.log_end_offset, log.size_bytes
        try:
            result = log.append(_batch(pid, epoch, seq))
        except KafkaError as exc:
            outcome = f"rejected: {type(exc).__name__}"
            reasons.append(f"  {type(exc).__name__}: {exc}")
            n.expect(
                expected is not None and isinstance(exc, expected),
                f"{label}: expected {expected.__name__ if expected else 'success'}, got {type(exc).__name__}",
            )
            n.expect((log.log_end_offset, log.size_bytes) == (end, size), f"{label}: a refused batch writes nothing")
        else:
            outcome = f"appended at {span(result.base_offset, result.last_offset)}"
            n.expect(
                expected is None, f"{label}: expected {expected.__name__ if expected else ''}, but it was appended"
            )
        rows.append(
            (
                label,
                f"{pid}/{epoch}",
                span(seq, seq + RECORDS_PER_BATCH - 1),
                outcome,
                log.log_end_offset,
                log.size_bytes,
            )
        )
    n.table(rows, ("attempt", "pid/epoch", "sequences", "result", "log end offset", "bytes on disk"))
    n.say("The partition's answers:")
    for reason in reasons:
        n.say(reason)


# ---- 3. kill -9 and a torn write -----------------------------------------------------------------------


@dataclass
class WriterRun:
    process_id: int
    acks: dict[int, int]  # sequence -> offset, as the writer printed them
    returncode: int | None
    stderr: str


def run_writer_until_killed(data_dir: str, producer_id: int) -> WriterRun:
    """Start cli._demo_writer, let it append for a moment, SIGKILL it, collect its acknowledgements."""
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli._demo_writer", data_dir, DEMO_TOPIC, str(PARTITION), str(producer_id)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    stdout = proc.stdout
    assert stdout is not None, "stdout=PIPE"
    lines: list[str] = []
    ready = threading.Event()
    enough = threading.Event()
    started = [0.0]

    def read_stdout() -> None:
        for line in stdout:  # ends at EOF, i.e. when the writer is dead
            line = line.strip()
            if line == "ready":
                started[0] = time.monotonic()
                ready.set()
                continue
            lines.append(line)
            if len(lines) >= MIN_ACKS and time.monotonic() - started[0] >= MIN_RUN_SECONDS:
                enough.set()
        ready.set()
        enough.set()

    reader = threading.Thread(target=read_stdout, daemon=True)
    reader.start()
    try:
        enough.wait(WRITER_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()
        reader.join(5)
    stderr = proc.stderr.read() if proc.stderr else ""
    stdout.close()
    if proc.stderr:
        proc.stderr.close()
    acks = {}
    for line in lines:
        seq, offset = line.split()
        acks[int(seq)] = int(offset)
    return WriterRun(proc.pid, acks, proc.returncode, stderr)


def show_crash(
    n: Narrator, reopen: Callable[[], Store], store: Store, log: PartitionLog
) -> tuple[Store, PartitionLog, int]:
    """Returns the reopened store and log, and how many acknowledged batches survived."""
    from cli._demo_writer import batch as writer_batch
    from storage import Store

    n.heading("3. Crash: a writer killed with SIGKILL, then a torn write")
    pid = store.allocate_producer_id()
    start = log.log_end_offset
    root = store.root
    store.close()  # this process lets go too: the reopen below is a real recovery
    run = run_writer_until_killed(root, pid)
    killed = run.returncode == -signal.SIGKILL
    n.expect(killed, f"the writer was killed by SIGKILL (exit status {run.returncode}; {run.stderr.strip()[-200:]})")
    n.expect(len(run.acks) > 0, "the writer acknowledged batches before it was killed")

    viewer = Store.open(root, read_only=True)
    try:
        segment_path = viewer.partition(DEMO_TOPIC, PARTITION).segments[-1].log_path
    finally:
        viewer.close()
    size_at_kill = os.path.getsize(segment_path)
    with open(segment_path, "ab") as f:  # what a write cut short by a power loss leaves behind
        f.write(TORN_BYTES)
        f.flush()
        os.fsync(f.fileno())
    size_torn = os.path.getsize(segment_path)

    store = reopen()
    log = store.partition(DEMO_TOPIC, PARTITION)  # opening the partition runs recovery
    size_after = os.path.getsize(segment_path)
    in_log: dict[int, int] = {}
    for b in _read_all(log, start):
        if b.producer_id == pid and not b.is_control:
            for i in range(b.last_offset - b.base_offset + 1):
                in_log[b.base_sequence + i] = b.base_offset + i
    present = sum(1 for seq, off in run.acks.items() if in_log.get(seq) == off)
    unacked = sorted(seq for seq in in_log if seq not in run.acks)
    cut = size_torn - size_after
    end = log.log_end_offset

    rows = [
        (
            "writer process",
            (
                f"pid {run.process_id}, producer {pid}, "
                f"{'killed with SIGKILL' if killed else f'exit status {run.returncode}'} "
                f"after {len(run.acks)} acknowledged batches"
            ),
        ),
        ("segment file when it died", f"{size_at_kill} bytes ({os.path.basename(segment_path)})"),
        ("torn write appended", f"{len(TORN_BYTES)} garbage bytes -> {size_torn} bytes"),
        (
            "reopen: bytes cut by recovery",
            f"{cut}"
            + (
                f" ({len(TORN_BYTES)} garbage + {cut - len(TORN_BYTES)} of a half-written batch)"
                if cut > len(TORN_BYTES)
                else ""
            ),
        ),
        ("segment file after recovery", f"{size_after} bytes"),
        ("acknowledged batches in the log", f"{present} of {len(run.acks)}, each at its acknowledged offset"),
        (
            "written, never acknowledged",
            "none"
            if not unacked
            else f"{len(unacked)} (sequence {span(unacked[0], unacked[-1])}): it died between the write and the ack",
        ),
        ("log end offset", f"{end} (was {start} before the writer started)"),
    ]
    n.expect(present == len(run.acks), f"all acknowledged batches survive ({present} of {len(run.acks)})")
    n.expect(cut >= len(TORN_BYTES) and size_after <= size_at_kill, "recovery cuts the torn tail (and only it)")
    n.expect(end == (max(in_log.values()) + 1 if in_log else start), "the log ends right after the last whole batch")
    if in_log:
        last_seq = max(in_log)
        size_before_retry = log.size_bytes
        retry = log.append(writer_batch(pid, last_seq))
        ok = retry.duplicate and retry.base_offset == in_log[last_seq] and log.size_bytes == size_before_retry
        rows.append(
            (
                f"the writer's retry of its last batch (seq {last_seq})",
                f"duplicate: offset {retry.base_offset} again, nothing written" if ok else f"NOT a duplicate: {retry}",
            )
        )
        n.expect(ok, "the dead writer's retry of its last batch is answered as a duplicate")
    n.table(rows, ("what", "observed"))
    return store, log, len(run.acks)


def _read_all(log: PartitionLog, start: int) -> list[RecordBatch]:
    out: list[RecordBatch] = []
    offset = start
    end = log.log_end_offset
    while offset < end:
        batches = log.read(offset)
        if not batches:
            break
        out.extend(batches)
        offset = batches[-1].last_offset + 1
    return out


# ---- 4. transactions ---------------------------------------------------------------------------------------


def show_transactions(n: Narrator, store: Store, log: PartitionLog) -> None:
    from storage.records import ControlType

    n.heading("4. Transactions: markers, the last stable offset and the .txnindex")
    a, b = store.allocate_producer_id(), store.allocate_producer_id()
    n.para(
        f"Producers {a} and {b} each write 2 records in a transaction; {a} aborts, then {b} commits. "
        "The last stable offset (LSO) is where read_committed readers stop."
    )
    rows = []
    first_a = log.log_end_offset

    def step(label: str, result: AppendResult) -> None:
        rows.append((label, span(result.base_offset, result.last_offset), log.log_end_offset, log.last_stable_offset))

    step(f"producer {a} begins, writes 2 records", log.append(_batch(a, 0, 0, count=2, transactional=True, tag="txn")))
    n.expect(log.last_stable_offset == first_a, "an open transaction holds the LSO at its first offset")
    first_b = log.log_end_offset
    step(f"producer {b} begins, writes 2 records", log.append(_batch(b, 0, 0, count=2, transactional=True, tag="txn")))
    abort = log.append_marker(ControlType.ABORT, a, 0)
    step(f"producer {a} aborts (ABORT marker)", abort)
    n.expect(log.last_stable_offset == first_b, "after the abort the LSO moves up to the other open transaction")
    commit = log.append_marker(ControlType.COMMIT, b, 0)
    step(f"producer {b} commits (COMMIT marker)", commit)
    n.expect(log.last_stable_offset == log.log_end_offset, "with no open transaction the LSO is the log end")
    n.table(rows, ("step", "offsets", "log end offset", "last stable offset"))

    entries = [(seg.txn_index.path, e) for seg in log.segments for e in seg.txn_index.entries() if e.producer_id == a]
    n.say("")
    if entries:
        path = entries[-1][0]
        n.say(
            f"The abort left an AbortedTxn entry in {os.path.basename(path)} "
            f"({os.path.getsize(path)} bytes, 34 per entry):"
        )
    n.table(
        [(0, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset) for _, e in entries],
        ("version", "producerId", "firstOffset", "lastOffset", "lastStableOffset"),
    )
    n.expect(
        any(e.first_offset == first_a and e.last_offset == abort.base_offset for _, e in entries),
        "the abort is recorded in the .txnindex (firstOffset .. ABORT marker offset)",
    )

    markers = []
    for result in (abort, commit):
        batch = next(x for x in log.read(result.base_offset) if x.base_offset == result.base_offset)
        marker = batch.control_marker()
        kind = ControlType(marker.control_type).name  # (an int only for KRaft's control records)
        markers.append(
            (
                batch.base_offset,
                kind,
                batch.size,
                batch.producer_id,
                str(batch.is_transactional).lower(),
                str(batch.is_control).lower(),
                marker.coordinator_epoch,
            )
        )
        n.expect(batch.size == 78, f"a {kind} control batch is 78 bytes (got {batch.size})")
    n.say("")
    n.say("The markers are control batches, 78 bytes each (61-byte header + 17-byte record):")
    n.table(
        markers, ("offset", "endTxnMarker", "size", "producerId", "isTransactional", "isControl", "coordinatorEpoch")
    )


# ---- the command ---------------------------------------------------------------------------------------------


def _command(data_dir: str, *args: str) -> str:
    words = ["txlog"]
    if os.path.normpath(data_dir) != os.path.normpath(DEFAULT_DATA_DIR):
        words += ["--data-dir", data_dir]
    return " ".join(shlex.quote(w) for w in (*words, *args))


def demo(ctx: typer.Context) -> None:
    """Show what the segment store guarantees, in a few seconds.

    Deduplication of retries, fencing of stale producers, recovery after kill -9 and a torn
    write, transaction markers and the last stable offset. Recreates the topic 'txlog-demo'
    in the store, so it is safe to run again.
    """
    began = time.monotonic()
    opts = settings(ctx)
    n = Narrator(quiet=opts.quiet)
    store = open_store(ctx, create=True)
    try:
        if store.has_topic(DEMO_TOPIC):
            store.delete_topic(DEMO_TOPIC)
        store.create_topic(DEMO_TOPIC, 1)
        log = store.partition(DEMO_TOPIC, PARTITION)
        n.say(
            f"txlog demo: what the segment store guarantees, on {store.root} "
            f"(topic {DEMO_TOPIC}, partition {PARTITION}, recreated)"
        )
        pid = show_idempotence(n, store, log)
        show_rejections(n, log, pid)
        store, log, acked = show_crash(n, lambda: open_store(ctx), store, log)
        show_transactions(n, store, log)
        show_delivery_semantics(n, store)
        show_client_transactions(n, store)
        show_crash_mid_commit(n, store, store.root)
    finally:
        store.close()

    n.heading("Look further:")
    n.say(f"  ls {shlex.quote(os.path.join(opts.data_dir, f'{DEMO_TOPIC}-{PARTITION}'))}")
    n.say(f"  {_command(opts.data_dir, 'topics', 'describe', DEMO_TOPIC)}")
    n.say(f"  {_command(opts.data_dir, 'topics', 'describe', DEMO_TOPIC, '--output', 'table')}")
    n.say(f"  {_command(opts.data_dir, 'topics', 'describe', TXN_TOPIC, '--output', 'table')}")
    n.say(f"  {_command(opts.data_dir, 'inspect', os.path.join(opts.data_dir, f'{TXN_TOPIC}-0'), '--deep-iteration')}")
    n.say(f"  {_command(opts.data_dir, 'transactions', 'list')}")
    n.say(f"  {_command(opts.data_dir, 'transactions', 'describe', '--transactional-id', 'demo-crash')}")
    n.say(f"  {_command(opts.data_dir, 'verify')}")
    elapsed = time.monotonic() - began
    if n.problems:
        for problem in n.problems:
            error_line(f"demo check failed: {problem}")
        typer.echo(f"txlog demo: {len(n.problems)} of {n.checks} checks FAILED ({elapsed:.1f}s)")
        raise typer.Exit(3)
    typer.echo(
        f"txlog demo: all {n.checks} checks passed in {elapsed:.1f}s: retry deduplicated, gap and "
        f"stale epoch refused, {acked}/{acked} acknowledged batches survived kill -9 and a torn write, "
        "LSO followed an abort and a commit, only exactly-once settings neither lost nor duplicated, "
        "a zombie was fenced, and a commit killed half-way was completed"
    )
