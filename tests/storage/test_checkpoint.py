"""Text checkpoint files (docs/kafka-formats.md §3.7): exact text, strict parsing, atomic replacement."""

from __future__ import annotations

import errno
import os

import pytest

from storage.checkpoint import (
    LEADER_EPOCH_CHECKPOINT,
    read_checkpoint,
    read_leader_epoch_checkpoint,
    write_checkpoint,
    write_leader_epoch_checkpoint,
)
from storage.errors import CorruptIndexError, KafkaStorageError


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "recovery-point-offset-checkpoint")


def write_text(path, text):
    with open(path, "wb") as f:
        f.write(text.encode("utf-8") if isinstance(text, str) else text)


def read_text(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8")


def test_exact_text_and_round_trip(path):
    write_checkpoint(path, [("orders", 0, 42), ("__transaction_state", 17, 0)])
    assert read_text(path) == "0\n2\norders 0 42\n__transaction_state 17 0\n"
    assert read_checkpoint(path, fields=3) == [("orders", "0", "42"), ("__transaction_state", "17", "0")]
    assert read_checkpoint(path) == [("orders", "0", "42"), ("__transaction_state", "17", "0")]
    assert os.listdir(os.path.dirname(path)) == ["recovery-point-offset-checkpoint"]


def test_empty_list_writes_the_version_and_a_zero_count(path):
    write_checkpoint(path, [])
    assert read_text(path) == "0\n0\n"
    assert read_checkpoint(path) == []


def test_empty_or_missing_file_has_no_entries(path):
    assert read_checkpoint(path) == []
    write_text(path, "")
    assert read_checkpoint(path) == []


def test_fields_may_be_separated_by_any_whitespace(path):
    write_text(path, "0\n1\norders\t0   42\n")
    assert read_checkpoint(path, fields=3) == [("orders", "0", "42")]


def test_last_line_may_lack_its_newline(path):
    write_text(path, "0\n1\norders 0 42")
    assert read_checkpoint(path, fields=3) == [("orders", "0", "42")]


@pytest.mark.parametrize(
    "text",
    [
        "1\n0\n",  # unknown version
        "x\n0\n",  # version is not a number
        "0\n",  # no count line
        "0\n1\n",  # a counted entry is missing
        "0\ntwo\n",  # count is not a number
        "0\n2\norders 0 42\n",  # fewer entries than counted
        "0\n1\norders 0 42\norders 1 7\n",  # more entries than counted
        "0\n1\norders 0\n",  # wrong field count
        "0\n1\norders 0 42 9\n",  # wrong field count
        "0\n2\norders 0 42\n\n",  # a blank entry line
        b"0\n1\nord\xffers 0 42\n",  # not UTF-8
    ],
)
def test_malformed_files_are_corrupt(path, text):
    write_text(path, text)
    with pytest.raises(CorruptIndexError):
        read_checkpoint(path, fields=3)


def test_without_a_field_count_entries_must_agree(path):
    write_text(path, "0\n2\na 1\nb 2 3\n")
    with pytest.raises(CorruptIndexError):
        read_checkpoint(path)


@pytest.mark.parametrize("entry", [("my topic", 0, 1), ("", 0, 1), ()])
def test_entries_that_could_not_be_read_back_are_refused(path, entry):
    with pytest.raises(ValueError):
        write_checkpoint(path, [entry])
    assert not os.path.exists(path)


def test_failed_fsync_keeps_the_previous_file(path, monkeypatch):
    write_checkpoint(path, [("orders", 0, 42)])

    def failing_fsync(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(KafkaStorageError):
        write_checkpoint(path, [("orders", 0, 99)])
    monkeypatch.undo()
    assert read_checkpoint(path, fields=3) == [("orders", "0", "42")]
    assert os.listdir(os.path.dirname(path)) == ["recovery-point-offset-checkpoint"]


# ---- leader-epoch-checkpoint ----------------------------------------------------------------


def test_leader_epoch_checkpoint_round_trip(tmp_path):
    write_leader_epoch_checkpoint(str(tmp_path), [(0, 0), (3, 120), (5, 300)])
    assert read_text(tmp_path / LEADER_EPOCH_CHECKPOINT) == "0\n3\n0 0\n3 120\n5 300\n"
    assert read_leader_epoch_checkpoint(str(tmp_path)) == [(0, 0), (3, 120), (5, 300)]


def test_missing_leader_epoch_checkpoint_is_empty(tmp_path):
    assert read_leader_epoch_checkpoint(str(tmp_path)) == []


@pytest.mark.parametrize(
    "entries",
    [[(3, 120), (3, 300)], [(3, 120), (2, 300)], [(0, 100), (1, 100)], [(-1, 0)], [(0, -5)]],
)
def test_leader_epochs_must_increase(tmp_path, entries):
    with pytest.raises(ValueError):
        write_leader_epoch_checkpoint(str(tmp_path), entries)


@pytest.mark.parametrize("text", ["0\n1\n0 x\n", "0\n1\n0\n", "0\n1\n0 1 2\n", "0\n1\n0 1.5\n"])
def test_malformed_leader_epoch_checkpoint_is_corrupt(tmp_path, text):
    write_text(str(tmp_path / LEADER_EPOCH_CHECKPOINT), text)
    with pytest.raises(CorruptIndexError):
        read_leader_epoch_checkpoint(str(tmp_path))
