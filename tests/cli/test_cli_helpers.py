"""The in-process runner of tests/cli/cli_helpers.py sees what a real `txlog` process sees, and a bug
that a process would show as a traceback fails the test instead of passing unseen."""

from __future__ import annotations

import threading

import pytest

from tests.cli import cli_helpers
from tests.cli.cli_helpers import (
    CommandLeftSomethingRunning,
    assert_one_error,
    make_store,
    txlog,
    txlog_process,
)


@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        ("topics", "create", "--help"),
        ("consume", "--bogus"),
        ("topics", "create", b"\xfft"),
        ("consume", "-t", "t", "-g", b"g\xff"),  # the message names the argument as typed, read from sys.argv
        ("produce", "-t", "t", "-k", b"k\xff"),
    ],
)
def test_in_process_and_process_print_the_same(tmp_path, args):
    make_store(tmp_path / "here", t=1)
    make_store(tmp_path / "there", t=1)
    here = txlog(*args, data_dir=tmp_path / "here", input=b"v\n", text=False)
    there = txlog_process(*args, data_dir=tmp_path / "there", input=b"v\n", text=False)
    assert (here.returncode, here.stdout, here.stderr) == (there.returncode, there.stdout, there.stderr)


def test_help_is_wrapped_at_columns_as_in_a_process():
    narrow = txlog("produce", "--help", env={"COLUMNS": "60"}).stdout
    assert narrow != txlog("produce", "--help", env={"COLUMNS": "200"}).stdout  # not CliRunner's fixed 80
    assert narrow == txlog_process("produce", "--help", env={"COLUMNS": "60"}).stdout


def test_stdin_is_a_pipe_that_produce_reads_to_the_end(tmp_path):
    make_store(tmp_path / "d", t=1)
    lines = b"".join(b"%d\n" % i for i in range(100_000))  # more than a pipe holds: the feeder must keep up
    assert txlog("produce", "-t", "t", "-q", data_dir=tmp_path / "d", input=lines).returncode == 0
    out = txlog("consume", "-t", "t", "-q", data_dir=tmp_path / "d", text=False).stdout
    assert out == lines


def test_an_escaped_exception_fails_the_run_with_it(tmp_path, monkeypatch):
    import cli.topics

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli.topics, "open_store", broken)
    with pytest.raises(AssertionError, match="raised RuntimeError") as caught:
        txlog("topics", "list", data_dir=tmp_path)
    assert isinstance(caught.value.__cause__, RuntimeError)


def test_an_expected_error_ends_through_system_exit(tmp_path):
    proc = txlog("topics", "list", data_dir=tmp_path / "missing")
    assert "no store at" in assert_one_error(proc)
    assert type(proc.exception) is SystemExit and proc.exception.code == 1


def test_a_thread_left_running_fails_the_run(tmp_path, monkeypatch):
    import cli.topics
    import txlog.clients.record_accumulator as accumulator
    from cli.context import CommandError

    stop = threading.Event()

    def leaves_a_thread(*args, **kwargs):
        threading.Thread(target=stop.wait, name="left-behind", daemon=True).start()
        raise CommandError("after starting a thread")

    monkeypatch.setattr(cli.topics, "open_store", leaves_a_thread)
    monkeypatch.setattr(accumulator, "SENDER_IDLE_S", 0.0)
    monkeypatch.setattr(cli_helpers, "THREAD_MARGIN_S", 0.1)
    try:
        with pytest.raises(CommandLeftSomethingRunning, match="left-behind"):
            txlog("topics", "list", data_dir=tmp_path)
    finally:
        stop.set()


def test_a_variable_read_at_start_up_is_refused():
    with pytest.raises(ValueError, match="txlog_process"):
        txlog("--version", env={"TZ": "UTC"})
