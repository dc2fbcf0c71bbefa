"""Issue 23, item 4: a decompression bomb costs bounded memory (docs/kafka-formats.md §1.4).

A batch of a few KiB whose records region inflates to 512 MiB is refused by every reader once
it passes the batch's inflation limit (64 times the region, at least 64 MiB), and by `append`
before it reaches the log. Memory is measured where it cannot lie: a child process reads the
bomb and reports its peak resident set (VmHWM) before and after, and the test bounds the
difference. Before the limit, each of these readers held over 1 GB.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from storage import Store
from storage.compression import Compression, decompress, inflation_limit
from storage.errors import RecordTooLargeError
from storage.log_files import LOG_FILE_SUFFIX
from storage.records import HEADER_SIZE, build_batch
from tests.storage.bombs import MIB, bomb, legit_batch, record_around, snappy_claims

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BOMB_SIZE = 512 * MIB
MARGIN = 100 * MIB  # what decoding adds beyond the inflated bytes, allocator slack included
BOMB_CODECS = [Compression.GZIP, Compression.LZ4, Compression.ZSTD]

# Runs in a child: opens the store, notes the peak RSS so far (interpreter, imports, the open
# store), then reads or appends the bomb and reports the new peak and what was raised.
_CHILD = r"""
import json, sys

def peak_rss():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024

from storage import Store
from storage.errors import KafkaError

path, mode = sys.argv[1], sys.argv[2]
store = Store.open(path, read_only=mode == "read")
log = store.partition("t", 0)
bomb = open(sys.argv[3], "rb").read() if mode == "append" else b""
end = log.log_end_offset
baseline = peak_rss()
outcome = {}
try:
    if mode == "read":
        outcome["records"] = sum(len(batch.records()) for batch in log.read(0))
    else:
        log.append(bomb)
        outcome["appended"] = True
except KafkaError as exc:
    outcome.update(error=type(exc).__name__, message=str(exc),
                   path=getattr(exc, "path", None), position=getattr(exc, "position", None))
outcome.update(baseline=baseline, peak=peak_rss(), end_before=end, end_after=log.log_end_offset)
print(json.dumps(outcome))
"""


def _store(tmp_path, max_message_bytes: int = 1048588) -> str:
    path = str(tmp_path / "store")
    store = Store.open(path)
    store.create_topic("t", 1, config={"max.message.bytes": max_message_bytes})
    store.close()
    return path


def _plant(path: str, batch: bytes) -> str:
    """Write `batch` into the topic's first segment as if a writer had put it there."""
    directory = os.path.join(path, "t-0")
    (log,) = [name for name in os.listdir(directory) if name.endswith(LOG_FILE_SUFFIX)]
    with open(os.path.join(directory, log), "ab") as f:
        f.write(batch)
    return os.path.join(directory, log)


def _child(path: str, mode: str, bomb_file: str = "") -> dict:
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = subprocess.run(
        [sys.executable, "-c", _CHILD, path, mode, bomb_file], capture_output=True, text=True, env=env, check=False
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def _region(batch: bytes) -> int:
    return len(batch) - HEADER_SIZE


@pytest.mark.parametrize("codec", BOMB_CODECS, ids=lambda c: c.name)
def test_a_reader_refuses_a_bomb_holding_no_more_than_its_limit(tmp_path, codec) -> None:
    path = _store(tmp_path)
    batch = bomb(codec, BOMB_SIZE)
    assert len(batch) < 3 * MIB  # 512 MiB from a few KiB (zstd) to 2 MiB (lz4's ~255x)
    log_file = _plant(path, batch)
    out = _child(path, "read")
    assert out.get("error") == "CorruptRecordError", out
    assert "inflates past" in out["message"]
    assert (out["path"], out["position"]) == (log_file, 0)
    limit = inflation_limit(_region(batch))
    assert limit < BOMB_SIZE / 3
    grown = out["peak"] - out["baseline"]
    assert grown < limit + MARGIN, f"{codec.name} bomb cost {grown / MIB:.0f} MiB (limit {limit / MIB:.0f} MiB)"


@pytest.mark.parametrize("xerial", [True, False], ids=["xerial", "raw"])
def test_a_snappy_block_claiming_512_mib_is_refused_before_allocating_it(tmp_path, xerial) -> None:
    # snappy expands at most ~21x, so a snappy bomb can only lie in a block's length prefix
    path = _store(tmp_path)
    batch = snappy_claims(BOMB_SIZE, xerial=xerial)
    _plant(path, batch)
    out = _child(path, "read")
    assert out.get("error") == "CorruptRecordError", out
    assert "claims 536870912" in out["message"]
    assert out["peak"] - out["baseline"] < MARGIN


@pytest.mark.parametrize("codec", BOMB_CODECS, ids=lambda c: c.name)
def test_append_refuses_a_bomb_as_record_too_large_in_bounded_memory(tmp_path, codec) -> None:
    # max.message.bytes 4 MiB lets even lz4's 2 MiB bomb past the batch-size rule: the inflation
    # limit is what refuses it, before a byte reaches the log
    path = _store(tmp_path, max_message_bytes=4 * MIB)
    batch = bomb(codec, BOMB_SIZE)
    bomb_file = str(tmp_path / "bomb")
    with open(bomb_file, "wb") as f:
        f.write(batch)
    out = _child(path, "append", bomb_file)
    assert out.get("error") == "RecordTooLargeError", out
    assert "inflates past" in out["message"]
    assert out["end_after"] == out["end_before"] == 0
    assert out["peak"] - out["baseline"] < MARGIN  # counted, never held


def test_append_refuses_a_bomb_in_process_and_writes_nothing(tmp_path) -> None:
    store = Store.open(_store(tmp_path))
    log = store.partition("t", 0)
    with pytest.raises(RecordTooLargeError, match="inflates past 67108864 bytes"):
        log.append(bomb(Compression.ZSTD, 65 * MIB))
    assert log.log_end_offset == 0
    assert log.read(0) == []
    store.close()


def _value_size_filling(limit: int) -> int:
    """The value size whose one-record region is exactly `limit` bytes."""
    size = limit
    while True:
        head, tail = record_around(size)
        total = len(head) + size + len(tail)
        if total == limit:
            return size
        size -= total - limit


@pytest.mark.parametrize("codec", BOMB_CODECS, ids=lambda c: c.name)
def test_the_largest_legitimate_region_appends_and_reads_back(tmp_path, codec) -> None:
    # a region that inflates to exactly its limit (64 MiB from a few KiB) is a batch a producer
    # may write: append takes it and every reader decodes it
    store = Store.open(_store(tmp_path))
    log = store.partition("t", 0)
    value_size = _value_size_filling(64 * MIB)
    batch = legit_batch(codec, value_size)
    assert _region(batch) < MIB and inflation_limit(_region(batch)) == 64 * MIB
    log.append(batch)
    (stored,) = log.read(0)
    (record,) = stored.records()
    assert len(record.value) == value_size and not any(record.value[:: 1 << 16])
    store.close()


def _round_trip(tmp_path, batch: bytes, count: int) -> list:
    store = Store.open(_store(tmp_path))
    log = store.partition("t", 0)
    log.append(batch)
    (stored,) = log.read(0)
    records = stored.records()
    assert len(records) == count and records[-1].offset == count - 1
    store.close()
    return records


def test_a_million_tiny_records_in_zstd_round_trip(tmp_path) -> None:
    # 1M records of "x": a 10 MB region in under 1 MiB of zstd (about 13x), far past what the
    # batch would be uncompressed under max.message.bytes, well within its inflation limit
    count = 1_000_000
    batch = build_batch([(None, b"x", None, 1_700_000_000_000)] * count, compression=Compression.ZSTD)
    assert _region(batch) < MIB < 8 * MIB < len(decompress(Compression.ZSTD, batch[HEADER_SIZE:]))
    records = _round_trip(tmp_path, batch, count)
    assert records[-1].value == b"x"


@pytest.mark.parametrize("codec", BOMB_CODECS, ids=lambda c: c.name)
def test_batches_compressing_far_past_64x_round_trip_under_the_floor(tmp_path, codec) -> None:
    # 20,000 records of 2 KB of zeros: a 40 MB region, compressed hundreds of times over; the
    # 64 MiB floor is what lets such a batch through, whatever its ratio
    count = 20_000
    batch = build_batch([(None, bytes(2000), None, 1_700_000_000_000)] * count, compression=codec)
    inflated = len(decompress(codec, batch[HEADER_SIZE:]))
    assert _region(batch) * 64 < inflated < 64 * MIB, "not compressible enough to need the floor"
    records = _round_trip(tmp_path, batch, count)
    assert records[-1].value == bytes(2000)
