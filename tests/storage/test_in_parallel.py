"""storage.durable.in_parallel: the primitive parallel fsyncs go through (issue 26)."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from storage.durable import in_parallel


def test_results_come_back_in_call_order() -> None:
    assert in_parallel([lambda i=i: i * i for i in range(40)]) == [i * i for i in range(40)]


def test_calls_really_overlap() -> None:
    """All calls are running at once: each waits for the others at a barrier (serial calls would time out)."""
    barrier = threading.Barrier(8, timeout=30)
    assert in_parallel([barrier.wait for _ in range(8)]) is not None


def test_an_error_is_raised_only_after_every_call_ended() -> None:
    finished = threading.Event()
    started = threading.Event()

    def slow() -> None:
        started.set()
        finished.wait(0.3)
        finished.set()

    def failing() -> None:
        started.wait(30)
        raise OSError("EIO")

    with pytest.raises(OSError, match="EIO"):
        in_parallel([failing, slow])
    assert finished.is_set()


def test_a_forked_child_runs_calls_on_its_own_threads() -> None:
    in_parallel([lambda: 1, lambda: 2])  # the parent's pool exists before the fork
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit code
        signal.alarm(20)  # a child waiting on the parent's (absent) threads dies of SIGALRM
        os._exit(0 if in_parallel([lambda: 3, lambda: 4]) == [3, 4] else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
