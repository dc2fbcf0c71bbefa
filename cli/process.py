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
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from typing import Annotated, Any

import typer

from cli.context import USAGE, CommandError, complete_topic_names, open_store, settings
from cli.interrupts import Interrupts
from cli.output import status

PROGRESS_EVERY_SECONDS = 1.0
_COMMUNICATE_SLICE = 0.1  # how often a running CMD checks for SIGTERM / Ctrl-C


class _Interrupted(Exception):
    """Raised inside the transform when a stop signal arrived: the loop aborts and re-raises."""


class _StopFlag(Interrupts):
    """Asks the loop to stop; a second Ctrl-C interrupts at once."""

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # impatient second Ctrl-C: the loop still aborts on the way out
        super()._handle(signum, frame)


def _encode_input(records: list[Any]) -> bytes:
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

    def __call__(self, records: list[Any]) -> list[tuple[Any, bytes]]:
        if self.stop:
            raise _Interrupted()
        try:
            # its own process group, so stopping CMD also stops what it started (`sh -c 'sleep 9; cat'`)
            proc = subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, process_group=0)
        except OSError as exc:
            raise CommandError(f"cannot run CMD {self.cmd[0]!r}: {exc.strerror or exc}; "
                               "transaction aborted, input offsets not committed") from exc
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
            return [(r.key, line) for r, line in zip(records, lines)]
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
    cmd: Annotated[list[str], typer.Argument(
        metavar="CMD", show_default=False,
        help="The command run once per transaction: the input values on its stdin, one per line; "
        "its stdout lines are the output values.",
    )],
    input_topic: Annotated[str, typer.Option(
        "--input", "-i", metavar="TOPIC", help="Topic to read (all partitions, read_committed).",
        autocompletion=complete_topic_names, show_default=False,
    )],
    output_topic: Annotated[str, typer.Option(
        "--output", "-o", metavar="TOPIC", help="Topic to write (must exist).",
        autocompletion=complete_topic_names, show_default=False,
    )],
    group: Annotated[str, typer.Option(
        "--group", "-g", metavar="GROUP", help="Consumer group whose offsets are committed with the outputs.",
        show_default=False,
    )],
    transactional_id: Annotated[str, typer.Option(
        "--transactional-id", metavar="ID", show_default=False,
        help="Transactional id; a restart with the same id fences the old run and aborts what it left open.",
    )],
    transaction_size: Annotated[int, typer.Option(
        "--transaction-size", "-n", min=1, metavar="N", help="Input records per transaction (at most).",
    )] = 100,
    follow: Annotated[bool, typer.Option(
        "--follow", "-f", help="Keep polling for new input instead of exiting when caught up.",
    )] = False,
    transaction_timeout_ms: Annotated[int, typer.Option(
        "--transaction-timeout-ms", min=1, metavar="MS",
        help="The transaction timeout; a CMD run must finish well within it.",
    )] = 60_000,
) -> None:
    """Exactly-once consume-transform-produce through a shell command.

    Each transaction's input values go to CMD's stdin, one per line; CMD's stdout lines
    become the output records (keeping the input keys when CMD prints one line per input
    line, else with null keys). The outputs and the group's input offsets commit together,
    so a run killed at any moment and restarted emits every output exactly once. A CMD that
    exits non-zero aborts the transaction (exit 1); SIGTERM or Ctrl-C aborts it (exit 130).
    Put `--` before CMD.
    """
    if not cmd:
        raise CommandError("missing CMD: put the command after '--'", exit_code=USAGE)
    if input_topic == output_topic:
        raise CommandError("--input and --output must be different topics", exit_code=USAGE)
    if os.sep not in cmd[0] and shutil.which(cmd[0]) is None:
        raise CommandError(f"CMD not found: {cmd[0]}")

    from storage.errors import UnknownTopicOrPartitionError
    from txlog.transform_loop import TransformLoop

    quiet = settings(ctx).quiet
    stop = _StopFlag()
    stop.install()
    try:
        with open_store(ctx) as store:
            for topic in (input_topic, output_topic):
                if not store.has_topic(topic):
                    raise UnknownTopicOrPartitionError(f"topic '{topic}' does not exist")
            with TransformLoop(store, input_topic=input_topic, output_topic=output_topic, group_id=group,
                               transactional_id=transactional_id, transform=ShellTransform(cmd, stop),
                               transaction_size=transaction_size,
                               transaction_timeout_ms=transaction_timeout_ms) as loop:
                if not quiet:
                    starts = ", ".join(f"{tp.topic}-{tp.partition}@{loop.consumer.position(tp)}"
                                       for tp in loop.partitions)
                    status(ctx, f"Processing {input_topic} -> {output_topic} (group {group}, "
                                f"transactional id {transactional_id}); starting at {starts}")
                progress = _Progress(ctx, loop.stats, quiet)
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
        raise CommandError(f"interrupted ({stop.name()}); any open transaction was aborted, "
                           "committed transactions are kept", exit_code=130)


class _Progress:
    """Counts on stderr: a line at most every PROGRESS_EVERY_SECONDS, and a summary at the end."""

    def __init__(self, ctx: typer.Context, stats: Any, quiet: bool):
        self.ctx, self.stats, self.quiet = ctx, stats, quiet
        self.started = self.last = time.monotonic()
        self.shown = 0

    def _counts(self) -> str:
        s = self.stats
        return (f"{s.records_in} records in, {s.records_out} out, in {s.transactions_committed} "
                f"committed transactions ({s.transactions_aborted} aborted)")

    def tick(self) -> bool:
        now = time.monotonic()
        if not self.quiet and now - self.last >= PROGRESS_EVERY_SECONDS \
                and self.stats.transactions_committed != self.shown:
            self.last, self.shown = now, self.stats.transactions_committed
            status(self.ctx, f"... {self._counts()}")
        return False

    def summary(self, *, interrupted: bool) -> None:
        if not interrupted:
            status(self.ctx, f"Processed {self._counts()}; caught up after {time.monotonic() - self.started:.1f}s.")
        elif self.stats.transactions_committed:
            status(self.ctx, f"Before the interruption: {self._counts()}.")
