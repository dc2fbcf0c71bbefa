"""`txlog process`: exactly-once consume-transform-produce through a shell command.

    txlog process --input in --output out --group g --transactional-id copier -- tr a-z A-Z

Built on `txlog.TransformLoop`. Each round reads up to `--transaction-size` committed
input records and runs CMD once for them:

* CMD's stdin gets the records' values, one per line (UTF-8 bytes as stored; a null value
  is an empty line). A value that contains a newline cannot round-trip: CMD sees it as
  several lines.
* CMD's stdout lines (split on `\\n`, a final newline optional) become the output records'
  values. Keys: when CMD prints exactly as many lines as it was given, output line i keeps
  input record i's key (so a line-by-line filter such as `tr` keeps keys and partitioning);
  otherwise every output key is null. Headers are not carried over.
* CMD's stderr is passed through to txlog's stderr.

The outputs and the group's next input offsets are committed in one transaction, so a run
killed at any moment (kill -9 included) and restarted with the same --group and
--transactional-id emits every output exactly once in read_committed: the restart fences
the dead instance, aborts what it left open and resumes from the committed offsets.

A CMD that exits non-zero (or cannot be started) aborts the transaction; the verb exits 1
and the next run retries that input. SIGTERM or Ctrl-C aborts the open transaction (CMD is
terminated if it is running) and exits 130. Without --follow the verb exits once the input
is read up to its last stable offset; with --follow it keeps polling.

Scaling out: every run is a member of the consumer group --group, so starting `txlog
process` several times with the same --group (and each its own --transactional-id) splits
the input partitions between the runs, and a run that dies or stalls loses its partitions
to the others; `--workers N` starts N such runs as child processes (transactional ids
ID-0 .. ID-N-1). Without --follow, a run exits once every input partition's committed
offset has reached its last stable offset, whoever committed it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.context import (
    USAGE,
    CommandError,
    complete_group_ids,
    complete_topic_names,
    complete_transactional_ids,
    open_store,
    settings,
)
from cli.interrupts import Interrupts
from cli.output import status
from cli.progress import Progress, ProgressOption, count

if TYPE_CHECKING:  # the CLI imports txlog only when a command runs
    from types import FrameType

    from txlog.consumer_record import ConsumerRecord
    from txlog.tools.transform_loop import LoopStats


_COMMUNICATE_SLICE = 0.1  # how often a running CMD checks for SIGTERM / Ctrl-C


class _Interrupted(Exception):
    """Raised inside the transform when a stop signal arrived: the loop aborts and re-raises."""


class _StopFlag(Interrupts):
    """Asks the loop to stop; a second Ctrl-C interrupts at once."""

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # impatient second Ctrl-C: the loop still aborts on the way out
        super()._handle(signum, frame)


def _encode_input(records: list[ConsumerRecord]) -> bytes:
    return b"".join((r.value or b"") + b"\n" for r in records)


def _split_output(data: bytes) -> list[bytes]:
    if not data:
        return []
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the final newline ends the last line, it does not start an empty one
    return lines


class ShellTransform:
    """The TransformLoop transform: one CMD run per transaction."""

    def __init__(self, cmd: list[str], stop: _StopFlag):
        self.cmd, self.stop = cmd, stop

    def __call__(self, records: list[ConsumerRecord]) -> list[tuple[bytes | None, bytes]]:
        if self.stop:
            raise _Interrupted()
        try:
            # its own process group, so stopping CMD also stops what it started (`sh -c 'sleep 9; cat'`)
            proc = subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, process_group=0)
        except OSError as exc:
            raise CommandError(
                f"cannot run CMD {self.cmd[0]!r}: {exc.strerror or exc}; "
                "transaction aborted, input offsets not committed"
            ) from exc
        out = self._communicate(proc, _encode_input(records))
        if self.stop:
            raise _Interrupted()
        if proc.returncode != 0:
            if proc.returncode < 0:
                how = f"was killed by {signal.Signals(-proc.returncode).name}"
            else:
                how = f"exited {proc.returncode}"
            raise CommandError(f"CMD {how}; transaction aborted, input offsets not committed")
        lines = _split_output(out)
        if len(lines) == len(records):
            return [(r.key, line) for r, line in zip(records, lines, strict=True)]
        return [(None, line) for line in lines]

    def _communicate(self, proc: subprocess.Popen, data: bytes) -> bytes:
        first = True
        while True:
            try:
                out, _ = proc.communicate(data if first else None, timeout=_COMMUNICATE_SLICE)
            except subprocess.TimeoutExpired:
                first = False
                if self.stop:
                    _stop_group(proc)
                    raise _Interrupted() from None
                continue
            except BaseException:
                _stop_group(proc)
                raise
            return out or b""


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to CMD's process group, SIGKILL after a grace period; never waits for long."""
    for sig, grace in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.communicate(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue
        except (OSError, ValueError):
            break
    for pipe in (proc.stdin, proc.stdout):
        try:
            if pipe is not None:
                pipe.close()
        except OSError:
            pass


def process(
    ctx: typer.Context,
    cmd: Annotated[
        list[str],
        typer.Argument(
            metavar="CMD",
            show_default=False,
            help="The command run once per transaction: the input values on its stdin, one per line; "
            "its stdout lines are the output values.",
        ),
    ],
    input_topic: Annotated[
        str,
        typer.Option(
            "--input-topic",
            "-i",
            metavar="TOPIC",
            help="Topic to read (all partitions, read_committed).",
            autocompletion=complete_topic_names,
            show_default=False,
        ),
    ],
    output_topic: Annotated[
        str,
        typer.Option(
            "--output-topic",
            metavar="TOPIC",
            help="Topic to write (must exist).",
            autocompletion=complete_topic_names,
            show_default=False,
        ),
    ],
    group: Annotated[
        str,
        typer.Option(
            "--group",
            "-g",
            metavar="GROUP",
            help="Consumer group whose offsets are committed with the outputs.",
            autocompletion=complete_group_ids,
            show_default=False,
        ),
    ],
    transactional_id: Annotated[
        str,
        typer.Option(
            "--transactional-id",
            metavar="ID",
            show_default=False,
            autocompletion=complete_transactional_ids,
            help="Transactional id; a restart with the same id fences the old run and aborts what it left open.",
        ),
    ],
    transaction_size: Annotated[
        int,
        typer.Option(
            "--transaction-size",
            "-n",
            min=1,
            metavar="N",
            help="Input records per transaction (at most).",
        ),
    ] = 100,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            help="Keep polling for new input instead of exiting when caught up.",
        ),
    ] = False,
    transaction_timeout_ms: Annotated[
        int,
        typer.Option(
            "--transaction-timeout-ms",
            min=1,
            metavar="MS",
            help="The transaction timeout; a CMD run must finish well within it.",
        ),
    ] = 60_000,
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            "-w",
            min=1,
            max=64,
            metavar="N",
            help="Run N members of the group as child processes (transactional ids ID-0 .. ID-N-1).",
        ),
    ] = 1,
    session_timeout_ms: Annotated[
        int,
        typer.Option(
            "--session-timeout-ms",
            min=2,
            metavar="MS",
            help="A run that stops heartbeating (paused, hung) this long loses its partitions to the others. "
            "A run whose process dies loses them at once.",
        ),
    ] = 45_000,
    heartbeat_interval_ms: Annotated[
        int,
        typer.Option(
            "--heartbeat-interval-ms",
            min=1,
            metavar="MS",
            help="How often a run checks the group for members that came, left or died.",
        ),
    ] = 3_000,
    group_instance_id: Annotated[
        str | None,
        typer.Option(
            "--group-instance-id",
            metavar="ID",
            show_default=False,
            help="Static membership: a restart within the session timeout gets its partitions back.",
        ),
    ] = None,
    progress: ProgressOption = False,
) -> None:
    """Exactly-once consume-transform-produce through a command.

    Scaled out by a consumer group.
    Each transaction's input values go to CMD's stdin, one per line; CMD's stdout lines
    become the output records (keeping the input keys when CMD prints one line per input
    line, else with null keys). The outputs and the group's input offsets commit together,
    so a run killed at any moment and restarted emits every output exactly once. Runs with
    the same --group split the input partitions; one that dies or stalls is replaced and its
    late commits are refused. A CMD that exits non-zero aborts the transaction (exit 1);
    SIGTERM or Ctrl-C aborts it (exit 130). Put `--` before CMD.

    \b
    Examples:
      txlog process -i in --output-topic out -g upper --transactional-id up-1 -- tr a-z A-Z
      txlog process -i in --output-topic out -g upper --transactional-id up --workers 4 -- ./enrich.sh
      txlog process -i in --output-topic out -g upper --transactional-id up-2 --follow -- tr a-z A-Z
    """
    if not cmd:
        raise CommandError("missing CMD: put the command after '--'", exit_code=USAGE)
    if input_topic == output_topic:
        raise CommandError("--input-topic and --output-topic must be different topics", exit_code=USAGE)
    if os.sep not in cmd[0] and shutil.which(cmd[0]) is None:
        raise CommandError(f"CMD not found: {cmd[0]}")
    if heartbeat_interval_ms >= session_timeout_ms:
        raise CommandError("--heartbeat-interval-ms must be lower than --session-timeout-ms", exit_code=USAGE)
    if workers > 1 and group_instance_id is not None:
        raise CommandError("--group-instance-id names one member; it cannot be used with --workers", exit_code=USAGE)
    member = dict(
        session_timeout_ms=session_timeout_ms,
        heartbeat_interval_ms=heartbeat_interval_ms,
        group_instance_id=group_instance_id,
    )

    def run(tid: str, label: str) -> None:
        _run_worker(
            ctx,
            cmd,
            input_topic,
            output_topic,
            group,
            tid,
            transaction_size,
            follow,
            transaction_timeout_ms,
            member,
            label,
            progress,
        )

    if workers == 1:
        run(transactional_id, "")
    else:
        _supervise(workers, lambda i: run(f"{transactional_id}-{i}", f"[worker {i}] "))


def _supervise(workers: int, run: Callable[[int], None]) -> None:
    """Fork one child per worker, forward SIGTERM/SIGINT to them, and exit as the worst of them did.

    Each child returns through the CLI as a single run would (its own `Error:` line and
    exit code); the parent only waits. Forking happens before any store is opened.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    children: list[int] = []
    supervisor = os.getpid()
    for i in range(workers):
        pid = os.fork()
        if pid == 0:
            _die_with_parent(supervisor)
            run(i)
            return
        children.append(pid)

    def forward(signum: int, frame: FrameType | None) -> None:
        for child in children:
            try:
                os.kill(child, signal.SIGTERM)
            except ProcessLookupError:
                pass

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    codes = []
    try:
        for child in children:
            while True:
                try:
                    _, status_ = os.waitpid(child, 0)
                    break
                except InterruptedError:
                    continue
            codes.append(os.waitstatus_to_exitcode(status_))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    worst = 130 if 130 in codes else max((c if c >= 0 else 1 for c in codes), default=0)
    if worst:
        failed = sum(1 for c in codes if c)
        raise CommandError(
            f"{failed} of {workers} workers failed (exit codes {', '.join(map(str, codes))})", exit_code=worst
        )


# prctl(2) option: the signal this process gets when its parent thread dies (linux/prctl.h).
_PR_SET_PDEATHSIG = 1


def _die_with_parent(supervisor: int) -> None:
    """Have the kernel send this worker SIGTERM when its supervisor dies, even by SIGKILL.

    The supervisor forwards SIGTERM and SIGINT itself, but a supervisor killed with -9 forwards
    nothing: its workers would go on as members of the group with no one to wait for them.
    SIGTERM (not SIGKILL) lets a worker stop as on Ctrl-C: its open transaction aborted, its
    membership left. Linux only (prctl); elsewhere workers outlive a killed supervisor.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        return  # not fatal: the worker still runs, as it would without the request
    if os.getppid() != supervisor:  # the supervisor died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _run_worker(
    ctx: typer.Context,
    cmd: list[str],
    input_topic: str,
    output_topic: str,
    group: str,
    transactional_id: str,
    transaction_size: int,
    follow: bool,
    transaction_timeout_ms: int,
    member: dict[str, Any],
    label: str,
    show_progress: bool = False,
) -> None:
    """One member of the group: the TransformLoop over CMD until caught up (or stopped)."""
    from storage.errors import UnknownTopicOrPartitionError
    from txlog.tools.transform_loop import TransformLoop

    quiet = settings(ctx).quiet
    stop = _StopFlag()
    stop.install()
    try:
        with open_store(ctx) as store:
            for topic in (input_topic, output_topic):
                if not store.has_topic(topic):
                    raise UnknownTopicOrPartitionError(f"topic '{topic}' does not exist")
            with TransformLoop(
                store,
                input_topic=input_topic,
                output_topic=output_topic,
                group_id=group,
                transactional_id=transactional_id,
                transform=ShellTransform(cmd, stop),
                transaction_size=transaction_size,
                transaction_timeout_ms=transaction_timeout_ms,
                consumer_config=member,
                listener=_AssignmentNotes(ctx, label),
            ) as loop:
                status(
                    ctx,
                    f"{label}Processing {input_topic} -> {output_topic} (group {group}, "
                    f"transactional id {transactional_id}); the group assigns the partitions",
                )
                progress = _Progress(ctx, loop.stats, quiet, label, asked=show_progress)
                try:
                    loop.run(until_caught_up=not follow, should_stop=lambda: progress.tick() or bool(stop))
                except _Interrupted:
                    pass  # the loop has aborted the open transaction
                except KeyboardInterrupt:
                    stop.signum = stop.signum or signal.SIGINT
                progress.summary(interrupted=bool(stop))
    finally:
        stop.restore()
    if stop:
        raise CommandError(
            f"{label}interrupted ({stop.name()}); any open transaction was aborted, committed transactions are kept",
            exit_code=130,
        )


class _AssignmentNotes:
    """Rebalance listener: says on stderr which partitions this run reads, as they change."""

    def __init__(self, ctx: typer.Context, label: str):
        self.ctx, self.label = ctx, label

    def _say(self, what: str, partitions: set) -> None:
        if partitions:
            names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(partitions))
            status(self.ctx, f"{self.label}{what} {names}")

    def on_partitions_assigned(self, partitions: set) -> None:
        self._say("Assigned", partitions)

    def on_partitions_revoked(self, partitions: set) -> None:
        self._say("Revoked", partitions)

    def on_partitions_lost(self, partitions: set) -> None:
        self._say("Lost (the group replaced this run)", partitions)


class _Progress:
    """Counts on stderr as cli.progress shows them (a line redrawn on a terminal, plain lines with
    --progress), and a summary at the end."""

    def __init__(self, ctx: typer.Context, stats: LoopStats, quiet: bool, label: str = "", asked: bool = False):
        self.ctx, self.stats, self.quiet, self.label = ctx, stats, quiet, label
        self.started = time.monotonic()
        # workers share the terminal: each prints plain lines rather than redrawing one line
        self.line: Progress[int] = Progress(
            ctx, f"{label}process", lambda _: self._counts(), asked=asked, redraw=not label
        )  # updated with the committed transactions

    def _counts(self) -> str:
        s = self.stats
        return (
            f"{count(s.records_in, 'record')} in, {s.records_out:,} out, in "
            f"{count(s.transactions_committed, 'committed transaction')} ({s.transactions_aborted:,} aborted)"
        )

    def tick(self) -> bool:
        self.line.update(self.stats.transactions_committed)
        return False

    def summary(self, *, interrupted: bool) -> None:
        self.line.close()
        if not interrupted:
            status(
                self.ctx,
                f"{self.label}Processed {self._counts()}; caught up after {time.monotonic() - self.started:.1f}s.",
            )
        elif self.stats.transactions_committed:
            status(self.ctx, f"{self.label}Before the interruption: {self._counts()}.")
