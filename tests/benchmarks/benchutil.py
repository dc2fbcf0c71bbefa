"""Helpers shared by the bench_*.py scripts (producer, read_committed, coordinator, groups, spark).

Not a benchmark itself (conftest.py only keeps `bench_*.py` from pytest, and this module
has no tests to collect). It holds what every script needs in the same form, so that
their numbers mean the same thing:

* `Sample` / `measure`: wall seconds, this process's CPU seconds, and the wall seconds
  spent inside fsync/fdatasync. On a shared VM disk fsync latency varies by an order of
  magnitude from minute to minute; printing it apart from the rest shows how much of a
  ratio is the disk and how much is our own code.
* `after_cold` / `warm_median` / `median_after_cold`: the repetition rule of every script here
  (drop the first, cold repetition, take the median of the rest), over any numbers or over Samples.
* `scratch_dir`: `<repo>/.bench-tmp/<prefix>*` (or under `--dir`), removed afterwards, on SIGTERM too.
* `cli_env`: the environment of a CLI subprocess, with bytecode caches whatever the caller's says.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20
T = TypeVar("T")


class FsyncMeter:
    """Counts calls of os.fsync / os.fdatasync / storage.durable.syncfs and the wall seconds spent in them.

    storage.durable looks these functions up at call time, so replacing them on their modules
    catches every sync the store does (a syncfs, which makes a whole round durable, counts as one).
    The wrapper adds one Python call per sync, which is noise next to the syscall.
    """

    calls = 0
    seconds = 0.0
    _installed = False
    _own: dict[str, Callable[[int], None]] = {}

    @classmethod
    def install(cls) -> None:
        if cls._installed:
            return
        cls._installed = True
        for name in ("fsync", "fdatasync"):
            cls._own[name] = getattr(os, name)
            setattr(os, name, cls._wrap(getattr(os, name)))
        from storage import durable

        if hasattr(durable, "syncfs"):  # a tree from before it (a sitting's base) has none
            durable.syncfs = cls._wrap(durable.syncfs)

    @classmethod
    @contextmanager
    def suspended(cls) -> Iterator[None]:
        """The interpreter's own functions back on `os` for the block (nothing counted): a durable
        one-record append takes its native path only with them (storage/partition_log.py `_os_calls_own`)."""
        wrapped = {name: getattr(os, name) for name in cls._own}
        for name, own in cls._own.items():
            setattr(os, name, own)
        try:
            yield
        finally:
            for name, wrapper in wrapped.items():
                setattr(os, name, wrapper)

    @classmethod
    def _wrap(cls, real: Callable[[int], None]) -> Callable[[int], None]:
        clock = time.perf_counter

        def timed(fd: int) -> None:
            start = clock()
            try:
                real(fd)
            finally:
                cls.seconds += clock() - start
                cls.calls += 1

        return timed

    @classmethod
    def reading(cls) -> tuple[int, float]:
        return cls.calls, cls.seconds


@dataclass(frozen=True)
class Sample:
    """One timed repetition."""

    wall: float
    cpu: float
    fsync: float = 0.0  # wall seconds inside fsync/fdatasync
    fsyncs: int = 0

    @property
    def without_fsync(self) -> float:
        """Wall time minus the time spent waiting for the disk: what our own code cost."""
        return self.wall - self.fsync


@contextmanager
def timed() -> Iterator[list[Sample]]:
    """`with timed() as out:` times the block; `out[0]` is its Sample afterwards."""
    out: list[Sample] = []
    calls, seconds = FsyncMeter.reading()
    cpu, start = time.process_time(), time.perf_counter()
    yield out
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    calls2, seconds2 = FsyncMeter.reading()
    out.append(Sample(wall, cpu, seconds2 - seconds, calls2 - calls))


def after_cold(repetitions: Sequence[T]) -> Sequence[T]:
    """The repetitions after the first (cold) one: the ones every script here reports. All of them
    when only one ran, so a `--reps 1` run still prints a number (a cold one)."""
    return repetitions[1:] or repetitions


def warm_median(values: Sequence[float]) -> float:
    """The median of per-repetition numbers (rates, seconds, counts), the cold first one dropped."""
    return statistics.median(after_cold(values))


def median_after_cold(samples: Sequence[Sample], field: str = "wall") -> float:
    """Median of a Sample `field` over the repetitions after the first (cold) one."""
    return warm_median([getattr(s, field) for s in samples])


def spread(samples: Sequence[Sample]) -> tuple[float, float]:
    """(min, max) wall seconds of the repetitions after the cold one."""
    rest = after_cold(samples)
    return min(s.wall for s in rest), max(s.wall for s in rest)


@contextmanager
def scratch_dir(parent: str | None, prefix: str) -> Iterator[str]:
    """A fresh directory under `parent` (default <repo>/.bench-tmp), deleted with everything in it,
    also when the script is stopped with SIGTERM (`kill`, `timeout`), which would otherwise end the
    interpreter without unwinding and leave the directory behind."""
    parent = parent or str(ROOT / ".bench-tmp")
    made_parent = not os.path.exists(parent)
    os.makedirs(parent, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix=prefix, dir=parent)
    try:
        with _sigterm_unwinds():
            yield workdir
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if made_parent:
            try:
                os.rmdir(parent)
            except OSError:
                pass


@contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """SIGTERM raises SystemExit(143) in the main thread meanwhile, so `finally` blocks run; a
    handler the script set itself, or a call from another thread, is left alone."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    def unwind(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, unwind)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def cli_env(tree: str | Path = ROOT) -> dict[str, str]:
    """The environment for a subprocess running the CLI (or any interpreter) from the checkout `tree`.

    `tree` leads PYTHONPATH, so it wins over an installed copy. PYTHONDONTWRITEBYTECODE is dropped:
    a user's interpreter finds `.pyc` files (pip writes them; an editable install writes them on the
    first import), but with it set every start recompiles each module it imports (~0.15 s of a
    0.5 s `txlog consume` on this project's sandbox, which sets it), a cost no user pays. A
    script's first, dropped repetition then writes the caches the timed ones read.
    """
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = str(tree) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def verdict(ratio: float, target: float) -> str:
    return "ok" if ratio >= target else "MISSED"


@contextmanager
def fsync_skipped() -> Iterator[None]:
    """Setup only: the bulk need not be durable to be opened from the page cache, and with one
    fsync per append a shared VM disk made writing it take minutes. os.sync() afterwards."""
    saved = os.fsync, os.fdatasync
    os.fsync = os.fdatasync = lambda fd: None
    try:
        yield
    finally:
        os.fsync, os.fdatasync = saved
        os.sync()
