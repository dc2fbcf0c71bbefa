"""A store file that is a symbolic link reaches the user as one `Error:` line naming it (issue 23, item 3).

Before, `txlog produce` wrote through a linked `txlog.high-watermark` (overwriting the first
bytes of the file it pointed at) and through a linked active `.log` (truncating and appending
to its target). Now every verb that opens the partition refuses it, and the target is untouched.
"""

from __future__ import annotations

import os
import shutil

import pytest

from tests.cli.cli_helpers import txlog

LINKED = ["txlog.high-watermark", "00000000000000000000.log", "00000000000000000000.index"]


@pytest.fixture
def store(tmp_path) -> str:
    path = str(tmp_path / "store")
    assert txlog("topics", "create", "t", "--partitions", "1", data_dir=path).returncode == 0
    assert txlog("produce", "-t", "t", data_dir=path, input="a\nb\nc\n").returncode == 0
    return path


def _plant(store: str, name: str, outside_dir: str) -> tuple[str, str, bytes]:
    """Move the partition's file `name` out of the store and link to it; (link, outside path, its bytes)."""
    link = os.path.join(store, "t-0", name)
    outside = os.path.join(outside_dir, name)
    shutil.move(link, outside)
    os.symlink(outside, link)
    with open(outside, "rb") as f:
        return link, outside, f.read()


# What `produce` says it wrote before a failure, on the line before its Error line (cli/produce.py).
PRODUCE_ACCOUNTS = ("Nothing was written to ", "Written before the failure: ", "Transaction '")


def _one_error_line(stderr: str, link: str) -> None:
    lines = stderr.strip().splitlines()
    assert lines[:-1] == [] or (len(lines) == 2 and lines[0].startswith(PRODUCE_ACCOUNTS)), stderr
    error = lines[-1]
    assert error.startswith("Error: ") and "is a symbolic link" in error and link in error, stderr


@pytest.mark.parametrize("name", LINKED)
@pytest.mark.parametrize(
    "args",
    [
        ("produce", "-t", "t"),
        ("produce", "-t", "t", "--transactional-id", "tx"),
        ("consume", "-t", "t"),
        ("topics", "describe", "t"),
    ],
    ids=lambda args: " ".join(args),
)
def test_scenario67_a_linked_store_file_is_one_error_line_and_its_target_is_untouched(store, tmp_path, name, args):
    link, outside, before = _plant(store, name, str(tmp_path))
    result = txlog(*args, data_dir=store, input="x\ny\n")
    assert result.returncode != 0
    _one_error_line(result.stderr, link)
    with open(outside, "rb") as f:
        assert f.read() == before


def test_scenario67_a_linked_partition_directory_is_one_error_line(store, tmp_path) -> None:
    partition = os.path.join(store, "t-0")
    outside = str(tmp_path / "elsewhere")
    shutil.move(partition, outside)
    os.symlink(outside, partition)
    listing = sorted(os.listdir(outside))
    result = txlog("produce", "-t", "t", data_dir=store, input="x\n")
    assert result.returncode != 0
    _one_error_line(result.stderr, partition)
    assert sorted(os.listdir(outside)) == listing
