"""Issue 23, item 4, at the command line: a decompression bomb in a store is one clean error.

The bomb (tests/storage/bombs.py) is one valid record whose zstd region inflates to 65 MiB from a
few KiB: one MiB past its inflation limit (docs/kafka-formats.md §1.4). Before the limit,
`consume` printed its 65 MiB value and exited 0.
"""

from __future__ import annotations

import json
import os

import pytest
from cli_helpers import assert_one_error, make_store, txlog

from storage.compression import Compression
from storage.log_files import LOG_FILE_SUFFIX
from tests.storage.bombs import MIB, bomb


@pytest.fixture
def bombed(tmp_path) -> tuple[str, str]:
    """A store whose topic t holds the bomb as its first batch; (store, segment file)."""
    path = str(tmp_path / "store")
    make_store(path, t=1)
    directory = os.path.join(path, "t-0")
    (log,) = [n for n in os.listdir(directory) if n.endswith(LOG_FILE_SUFFIX)]
    with open(os.path.join(directory, log), "ab") as f:
        f.write(bomb(Compression.ZSTD, 65 * MIB))
    return path, os.path.join(directory, log)


def test_consume_of_a_bomb_is_one_error_naming_file_and_byte(bombed):
    path, log = bombed
    proc = txlog("consume", "-t", "t", data_dir=path)
    # what failed, without the 65 MiB a reader without the limit would print
    assert (proc.returncode, len(proc.stdout)) == (1, 0), (proc.returncode, proc.stdout[:100], proc.stderr[-1000:])
    message = assert_one_error(proc)
    assert "inflates past 67108864 bytes" in message and f"in {log} at byte 0" in message, message


def test_verify_reports_a_bomb_as_a_finding(bombed):
    path, log = bombed
    proc = txlog("verify", "--output", "json", data_dir=path)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 3, (proc.returncode, proc.stdout, proc.stderr)
    rows = json.loads(proc.stdout)
    assert any(r["severity"] == "error" and "inflates past" in r["finding"] for r in rows), rows
