"""How the CLI tests run `txlog`: in this process through typer's CliRunner, or as a real process.

`txlog(...)` runs `cli.main:app` in-process and returns what a process would have left: an exit
code, stdout and stderr. A process costs a Python start-up and the CLI's imports per call (most
of tests/cli's time); in-process, a call costs what the command does. The runner is made to see
what `python -m cli.main` sees, so that a test cannot tell the two apart:

* sys.argv, the working directory (ROOT) and the environment are a process's (no TXLOG_DATA_DIR,
  NO_COLOR=1, COLUMNS as a process without a terminal reads it), and help is wrapped at COLUMNS as
  click does in a process (CliRunner would force 80);
* stdin is a real file descriptor (`produce` reads it with os.read): /dev/null by default, as under
  pytest's capture, or a pipe fed by a thread with `input=`; the standard streams' error handlers
  are the ones this interpreter started with;
* an exception that is not SystemExit would have printed a traceback in a process: here it fails
  the test at once, with that traceback (tests that check "no traceback" keep their power);
* a thread the command started would have died with the process: one still running a while after
  the command returned fails the test (only a producer's idle sender may take SENDER_IDLE_S to go);
  a child the command forked that comes back here exits with its code (its output is lost: tests
  of `process --workers` use a process);
* `timeout` still bounds a run (SIGALRM), and environment variables only a process can honour
  (read at start-up, like TZ) are refused: those tests use `txlog_process`.

`txlog_process(...)` is the real subprocess, for what needs one: signals, kill -9, a pty or a
terminal, start-up imports, variables read at start-up, shell completion, fork (`process
--workers`), Spark.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO, cast

# the click that typer vendors: CliRunner sets its help width
from typer._click import formatting
from typer.testing import CliRunner

from storage.durable import FSYNC_POOL_PREFIX, SYNC_POOL_PREFIX

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAIN = os.path.join(ROOT, "cli", "main.py")  # sys.argv[0] of `python -m cli.main`

Arg = str | bytes | os.PathLike

# Variables the in-process runner honours: read by the CLI while it runs, not at start-up.
IN_PROCESS_ENV = frozenset({"TXLOG_DATA_DIR", "COLUMNS", "NO_COLOR"})
# How long a thread the command started may outlive it: a producer left open on purpose (`produce
# --no-commit`) lets its sender thread go after SENDER_IDLE_S of idleness; a heartbeat never ends by itself.
THREAD_MARGIN_S = 5.0


def _env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a `txlog` subprocess: the repository importable, no TXLOG_DATA_DIR, no colour."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    env.pop("TXLOG_DATA_DIR", None)
    env["NO_COLOR"] = "1"
    if extra:
        env.update(extra)
    return env


@dataclass(frozen=True)
class CliRun:
    """What an in-process `txlog` run left, under subprocess.CompletedProcess's names."""

    args: list[str]
    returncode: int
    stdout: Any  # str, or bytes with text=False
    stderr: Any
    exception: SystemExit | None = None  # how the run ended when it did not return normally


Ran = CliRun | subprocess.CompletedProcess


# ---- in-process ------------------------------------------------------------------------------------


class CommandLeftSomethingRunning(AssertionError):
    """A thread the command started still ran after it returned, or it did not finish in time."""


class _TimedOut(BaseException):
    """Raised by SIGALRM inside the command; a BaseException, so the CLI's `except Exception` lets it through."""


def txlog(
    *args: Arg,
    data_dir: Arg | None = None,
    env: Mapping[str, str | None] | None = None,
    timeout: float = 60,
    input: str | bytes | None = None,
    text: bool = True,
) -> CliRun:
    """`txlog [--data-dir DIR] ARGS` in this process; stdout/stderr as text (bytes with text=False)."""
    argv = _argv(args, data_dir)
    overrides = _in_process_env(env)
    stdin_data = input.encode() if isinstance(input, str) else input
    with _stdin(stdin_data) as stdin, _as_a_process(argv):
        before = set(threading.enumerate())
        pid = os.getpid()
        try:
            with _deadline(timeout):
                result = _Runner(stdin).invoke(_app(), argv, env=overrides, prog_name="txlog")
        except _TimedOut:
            raise CommandLeftSomethingRunning(f"txlog {argv} did not finish within {timeout} s") from None
        if os.getpid() != pid:  # a child the command forked came back here: it exits, as its process would
            os._exit(result.exit_code)
        _fail_on_a_bug(argv, result)
        _fail_on_threads_left(argv, before)
    out, err = result.stdout_bytes, result.stderr_bytes
    return CliRun(
        argv,
        result.exit_code,
        _text(out) if text else out,
        _text(err) if text else err,
        result.exception if isinstance(result.exception, SystemExit) else None,
    )


def _app() -> Any:
    from cli.main import app

    return app


def _argv(args: tuple[Arg, ...], data_dir: Arg | None) -> list[str]:
    """The arguments as Python hands them to a process: bytes decoded as os.fsdecode does (PEP 383)."""
    argv = ([] if data_dir is None else ["--data-dir", data_dir]) + list(args)
    return [os.fsdecode(a) for a in argv]


def _in_process_env(extra: Mapping[str, str | None] | None) -> dict[str, str | None]:
    """The variables to set (None: unset) so that the command sees a subprocess's environment."""
    unknown = sorted(set(extra or {}) - IN_PROCESS_ENV)
    if unknown:
        raise ValueError(f"{unknown} cannot be set in-process (a process reads them at start-up); use txlog_process")
    env: dict[str, str | None] = {
        "TXLOG_DATA_DIR": None,
        "NO_COLOR": "1",
        # without a terminal a process wraps help at COLUMNS, else at 80
        "COLUMNS": os.environ.get("COLUMNS") or "80",
    }
    env.update(extra or {})
    return env


def _text(data: bytes) -> str:
    """Bytes as subprocess.run(text=True) decodes them: strict UTF-8, universal newlines."""
    return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")


def _errors_of(stream: Any) -> str:
    """The error handler this interpreter gave a standard stream at start-up (a process gets the same)."""
    return getattr(stream, "errors", None) or "strict"


class _Runner(CliRunner):
    """typer's CliRunner over a real stdin, with the standard streams and help width of a process."""

    def __init__(self, stdin: BinaryIO):
        super().__init__()
        self.stdin = stdin

    @contextlib.contextmanager
    def isolation(self, input: Any = None, env: Any = None, color: bool = False) -> Iterator[Any]:
        with super().isolation(input=None, env=env, color=color) as streams:
            formatting.FORCED_WIDTH = None  # click reads COLUMNS, as in a process; super() restores it
            sys.stdin = io.TextIOWrapper(self.stdin, encoding="utf-8", errors=_errors_of(sys.__stdin__))
            cast(io.TextIOWrapper, sys.stdout).reconfigure(errors=_errors_of(sys.__stdout__))
            yield streams


@contextlib.contextmanager
def _stdin(data: bytes | None) -> Iterator[BinaryIO]:
    """A real descriptor for stdin: /dev/null (pytest's capture gives a subprocess that), or a pipe fed with `data`."""
    if data is None:
        with open(os.devnull, "rb") as devnull:
            yield devnull
        return
    read_fd, write_fd = os.pipe()
    writer = threading.Thread(target=_feed, args=(write_fd, data), name="txlog-test-stdin", daemon=True)
    writer.start()
    try:
        with open(read_fd, "rb") as pipe:
            yield pipe
    finally:  # the read end is closed: a writer blocked on input the command never read gets EPIPE and ends
        writer.join()


def _feed(fd: int, data: bytes) -> None:
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except BrokenPipeError:
        pass  # the command stopped reading, as a process may
    finally:
        os.close(fd)


@contextlib.contextmanager
def _as_a_process(argv: list[str]) -> Iterator[None]:
    """sys.argv and the working directory of `python -m cli.main ARGS` run from ROOT."""
    saved_argv, saved_cwd = sys.argv, os.getcwd()
    sys.argv = [MAIN, *argv]
    os.chdir(ROOT)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        sys.argv = saved_argv


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Raise _TimedOut in the command after `seconds` (signals reach only the main thread; elsewhere: no bound)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise _TimedOut()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _fail_on_a_bug(argv: list[str], result: Any) -> None:
    """In a process an exception other than SystemExit prints a traceback: here it fails the test, with it."""
    exc = result.exception
    if exc is None or isinstance(exc, SystemExit):
        if exc is not None and not isinstance(exc.code, (int, type(None))):
            raise AssertionError(f"txlog {argv} exited with {exc.code!r}, not an exit code")
        return
    raise AssertionError(
        f"txlog {argv} raised {type(exc).__name__} (a process would print a traceback); "
        f"stderr so far: {result.stderr_bytes.decode('utf-8', 'replace')!r}"
    ) from exc


#: The thread name prefixes of storage/durable.py's process-wide fsync pools.
SYNC_POOL_THREADS = (SYNC_POOL_PREFIX, FSYNC_POOL_PREFIX)


def _fail_on_threads_left(argv: list[str], before: set[threading.Thread]) -> None:
    """A thread the command started must end soon after it: in a process it would have died at exit (or kept
    the process from exiting), so one still running -- a member's heartbeat keeping it in its group -- would
    make the next in-process command see what no user sees. Only an idle sender may linger, for a while, and
    the process-wide fsync pools' workers (storage/durable.py `in_parallel`, `each_in_parallel`: idle once a
    call returns, they never keep a process from exiting)."""
    from txlog.clients.record_accumulator import SENDER_IDLE_S

    for thread in set(threading.enumerate()) - before:
        if thread.name.startswith(SYNC_POOL_THREADS):
            continue
        thread.join(SENDER_IDLE_S + THREAD_MARGIN_S)
        if thread.is_alive():
            raise CommandLeftSomethingRunning(f"txlog {argv} left thread {thread.name!r} running")


# ---- a real process ---------------------------------------------------------------------------------


def txlog_process(
    *args: Arg,
    data_dir: Arg | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
    input: str | bytes | None = None,
    text: bool = True,
) -> subprocess.CompletedProcess:
    """`python -m cli.main [--data-dir DIR] ARGS` as a subprocess; stdin inherited unless `input` is given."""
    cmd: list[Arg] = [sys.executable, "-m", "cli.main"]
    if data_dir is not None:
        cmd += ["--data-dir", os.fspath(data_dir)]
    cmd += list(args)
    if isinstance(input, str) and not text:
        input = input.encode()
    return subprocess.run(
        cmd, check=False, cwd=ROOT, env=_env(env), capture_output=True, text=text, timeout=timeout, input=input
    )


def python(code: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python -c CODE` with the repository importable (for what only a fresh interpreter shows)."""
    return subprocess.run(
        [sys.executable, "-c", code], check=False, cwd=ROOT, env=_env(env), capture_output=True, text=True, timeout=60
    )


def _complete(words: str, cword: int, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """typer's bash completion protocol, as the shell drives it: a process reading COMP_WORDS/COMP_CWORD."""
    extra = {"_TXLOG_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
    extra.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "cli.main"],
        check=False,
        cwd=ROOT,
        env=_env(extra),
        capture_output=True,
        text=True,
        timeout=60,
    )


# ---- what the tests assert ----------------------------------------------------------------------------


def assert_ok(proc: Ran) -> None:
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr


def assert_one_error(proc: Ran, code: int = 1) -> str:
    """Exit `code`, nothing on stdout, exactly one line on stderr: `Error: ...`; returns the message."""
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), proc.stderr
    return lines[0][len("Error: ") :]


def assert_usage_error(proc: Ran) -> None:
    """Exit 2 with click's usage text, whose last line is `Error: ...`."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.splitlines()[-1].startswith("Error: "), proc.stderr


def topic_names(proc: Ran) -> list[str]:
    """The names `topics list` printed: the first column of its text layout, below the header."""
    assert_ok(proc)
    return [line.split()[0] for line in proc.stdout.splitlines()[1:]]


def tree(path: str | os.PathLike) -> dict[str, tuple]:
    """Every file and directory under `path`, with file sizes and content hashes."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(os.fspath(path)):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), path)] = ("dir",)
        for f in filenames:
            full = os.path.join(dirpath, f)
            with open(full, "rb") as fh:
                out[os.path.relpath(full, path)] = ("file", hashlib.sha256(fh.read()).hexdigest())
    return out


def log_bytes(store: str | os.PathLike, topic: str) -> int:
    """The size of every segment of `topic`, as the files on disk say (no store opened): how a test
    sees that a process it runs has written, without opening the store under it."""
    total = 0
    for name in os.listdir(store):
        if name.rsplit("-", 1)[0] == topic:
            directory = os.path.join(store, name)
            total += sum(
                os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory) if f.endswith(".log")
            )
    return total


def make_store(path: str | os.PathLike, **topics: int) -> None:
    """Set-up without the CLI: a store holding `topics` (name=partition count)."""
    from storage import Store

    with Store.open(path) as store:
        for name, partitions in topics.items():
            store.create_topic(name, partitions)
