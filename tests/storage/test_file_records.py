"""FileRecords, the one reader of `.log` bytes: walks, damage, resync and bounds, on real files.

Segment files are written byte for byte into a tmp dir and read back through the same
entry points the log, the Spark executor, the dump tool and the integrity check use.
kafka-python's record reader is the independent oracle for what the bytes hold.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

import storage.file_records as file_records
from storage.descriptor_cache import CachedFile
from storage.errors import CorruptRecordError, UnsupportedForMessageFormatError
from storage.file_records import FileRecords
from storage.legacy_records import LegacyMessage
from storage.records import (
    CONTROL_BATCH_SIZE,
    CRC_OFFSET,
    HEADER_SIZE,
    LENGTH_OFFSET,
    MAGIC_OFFSET,
    ControlType,
    build_batch,
    build_control_batch,
)

kafka_records = pytest.importorskip("kafka.record")

TS = 1_700_000_000_000


def data_batch(base_offset: int, count: int = 3, size: int = 10) -> bytes:
    return build_batch(
        [(b"k%d" % i, bytes([i % 256]) * size, [], TS + i) for i in range(count)], base_offset=base_offset
    )


def commit_marker(base_offset: int) -> bytes:
    return build_control_batch(
        ControlType.COMMIT, producer_id=7, producer_epoch=0, timestamp=TS, base_offset=base_offset
    )


def three_batches() -> list[bytes]:
    """Batches at offsets 0..2, 3..7 and a COMMIT marker at 8."""
    return [data_batch(0, 3), data_batch(3, 5, size=300), commit_marker(8)]


def write(tmp_path: Path, data: bytes, name: str = "00000000000000000000.log") -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def positions(batches: list[bytes]) -> list[int]:
    out, at = [], 0
    for b in batches:
        out.append(at)
        at += len(b)
    return out


@pytest.fixture
def segment(tmp_path: Path) -> tuple[str, list[bytes]]:
    batches = three_batches()
    return write(tmp_path, b"".join(batches)), batches


def oracle(data: bytes) -> list[tuple[int, int, int]]:
    """(base offset, last offset, CRC) of every batch as kafka-python reads the bytes."""
    records = kafka_records.MemoryRecords(data)
    out = []
    while records.has_next():
        batch = records.next_batch()
        out.append((batch.base_offset, batch.base_offset + batch.last_offset_delta, batch.crc))
    return out


# ---- whole walks -----------------------------------------------------------------------------------


def test_batches_match_kafka_python_and_name_their_file_positions(segment) -> None:
    path, batches = segment
    with FileRecords.open(path) as records:
        read = list(records.batches())
    assert [(b.base_offset, b.last_offset, b.crc) for b in read] == oracle(b"".join(batches))
    assert [b.position for b in read] == positions(batches)
    assert [b.buffer for b in read] == batches
    assert all(b.path == path for b in read)
    assert read[2].control_marker().is_commit


def test_batches_between_two_positions(segment) -> None:
    path, batches = segment
    starts = positions(batches)
    with FileRecords.open(path) as records:
        assert [b.base_offset for b in records.batches(starts[1])] == [3, 8]
        assert [b.base_offset for b in records.batches(starts[1], starts[2])] == [3]
        assert [b.base_offset for b in records.batches(0, starts[2] - 1)] == [0]  # the second is cut: partial
        assert list(records.batches(starts[1], starts[1])) == []


def test_in_memory_and_borrowed_descriptor_read_alike(segment) -> None:
    path, batches = segment
    data = b"".join(batches)
    file = CachedFile(path, os.O_RDONLY)
    try:
        borrowed = FileRecords(path, file)
        from_fd = [(b.position, b.base_offset) for b in borrowed.batches()]
        borrowed.close()
        with file as fd:
            os.fstat(fd)  # a borrowed file stays open
    finally:
        file.close()
    for buf in (data, bytearray(data), memoryview(data)):
        assert [(b.position, b.base_offset) for b in FileRecords.in_memory(buf).batches()] == from_fd
    offset_start = b"junk" + data
    assert [b.position for b in FileRecords.in_memory(offset_start).batches(4)] == [4 + p for p in positions(batches)]


@pytest.mark.parametrize("chunk", [64, 100, 200, 1000])
def test_batches_straddling_and_exceeding_the_read_chunk(segment, monkeypatch, chunk: int) -> None:
    """A batch across a chunk boundary starts the next chunk; one larger than a chunk is read alone."""
    path, batches = segment
    monkeypatch.setattr(file_records, "SCAN_CHUNK", chunk)
    with FileRecords.open(path) as records:
        assert [b.buffer for b in records.batches()] == batches
        assert [h.position for h in records.headers()] == positions(batches)


# ---- CRC on and off ----------------------------------------------------------------------------------


def test_crc_checked_by_default_and_skippable(tmp_path: Path) -> None:
    batches = three_batches()
    damaged = bytearray(b"".join(batches))
    at = len(batches[0]) + HEADER_SIZE + 5  # a byte of the second batch's records
    damaged[at] ^= 0x55
    path = write(tmp_path, bytes(damaged))
    with FileRecords.open(path) as records:
        walk = records.batches()
        assert next(walk).base_offset == 0
        with pytest.raises(CorruptRecordError, match="CRC mismatch") as info:
            next(walk)
        assert (info.value.path, info.value.position) == (path, len(batches[0]))
        unchecked = list(records.batches(verify_crc=False))
    assert [b.is_valid() for b in unchecked] == [True, False, True]


# ---- damage ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("cut", [1, 10, 16, 17, 40, 60, 61, CONTROL_BATCH_SIZE - 1])
def test_truncated_tail_is_quiet_unless_strict(tmp_path: Path, cut: int) -> None:
    batches = three_batches()
    data = b"".join(batches[:2]) + batches[2][:cut]
    path = write(tmp_path, data)
    with FileRecords.open(path) as records:
        assert [b.base_offset for b in records.batches()] == [0, 3]
        assert records.batch_at(len(data) - cut) is None
        with pytest.raises(CorruptRecordError, match="past the end") as info:
            list(records.batches(strict=True))
    assert (info.value.path, info.value.position) == (path, len(batches[0]) + len(batches[1]))


def test_every_truncation_is_a_silent_partial_tail() -> None:
    first, second = data_batch(0, 2), commit_marker(2)
    log = first + second
    for cut in range(len(log) + 1):
        records = FileRecords.in_memory(log[:cut])
        whole_batches = (cut >= len(first)) + (cut == len(log))
        assert [b.size for b in records.batches()] == [len(first), len(second)][:whole_batches]
        whole = records.batch_at(0)
        assert (whole.size if whole is not None else None) == (len(first) if cut >= len(first) else None)


@pytest.mark.parametrize("length", [-1, 0, 48])
def test_batch_length_below_the_minimum_is_corruption_at_its_byte(tmp_path: Path, length: int) -> None:
    batches = three_batches()
    damaged = bytearray(b"".join(batches))
    struct.pack_into(">i", damaged, len(batches[0]) + LENGTH_OFFSET, length)
    path = write(tmp_path, bytes(damaged))
    with FileRecords.open(path) as records:
        with pytest.raises(CorruptRecordError, match="below the minimum 49") as info:
            list(records.batches())
        assert (info.value.path, info.value.position) == (path, len(batches[0]))
        with pytest.raises(CorruptRecordError, match="below the minimum"):
            records.header_at(len(batches[0]))


def test_a_length_running_past_the_end_is_a_partial_tail(tmp_path: Path) -> None:
    batches = three_batches()
    damaged = bytearray(b"".join(batches))
    struct.pack_into(">i", damaged, len(batches[0]) + LENGTH_OFFSET, 1 << 30)
    path = write(tmp_path, bytes(damaged))
    with FileRecords.open(path) as records:
        assert [b.base_offset for b in records.batches()] == [0]
        assert records.batch_at(len(batches[0])) is None


@pytest.mark.parametrize("magic", [0, 1, 3, 0xFF])
def test_an_unknown_magic_is_corruption(tmp_path: Path, magic: int) -> None:
    batches = three_batches()
    damaged = bytearray(b"".join(batches))
    damaged[len(batches[0]) + MAGIC_OFFSET] = magic
    path = write(tmp_path, bytes(damaged))
    with FileRecords.open(path) as records, pytest.raises(CorruptRecordError, match="magic") as info:
        list(records.batches())
    assert info.value.position == len(batches[0])


def test_a_legacy_message_is_refused_or_read() -> None:
    legacy_records = pytest.importorskip("kafka.record.legacy_records")
    builder = legacy_records.LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    builder.append(0, timestamp=TS, key=b"k", value=b"v")
    old = bytes(builder.build())
    data = old + data_batch(1, 2)
    with pytest.raises(UnsupportedForMessageFormatError, match="magic 1"):
        list(FileRecords.in_memory(data, "old.log").batches())
    read = list(FileRecords.in_memory(data, "old.log").batches(legacy=True))
    assert isinstance(read[0], LegacyMessage) and (read[0].position, read[0].last_offset) == (0, 0)
    assert (read[1].position, read[1].base_offset) == (len(old), 1)


# ---- resync after damage ---------------------------------------------------------------------------


def test_next_valid_batch_skips_garbage_and_bad_crcs(tmp_path: Path) -> None:
    batches = three_batches()
    garbage = b"\x02" * 70 + b"\x00" * 30  # magic bytes everywhere, none a valid batch
    bad = bytearray(batches[1])
    bad[-1] ^= 1
    data = batches[0] + garbage + bytes(bad) + batches[2]
    path = write(tmp_path, data)
    marker_at = len(data) - len(batches[2])
    with FileRecords.open(path) as records:
        assert records.next_valid_batch(-1) == 0
        assert records.next_valid_batch(0) == marker_at
        assert records.next_valid_batch(len(batches[0])) == marker_at
        assert records.next_valid_batch(marker_at) is None
        assert records.next_valid_batch(0, end=marker_at + CONTROL_BATCH_SIZE - 1) is None


def test_next_valid_batch_across_windows(tmp_path: Path, monkeypatch) -> None:
    batches = three_batches()
    data = b"\x00" * 500 + batches[1]
    path = write(tmp_path, data)
    monkeypatch.setattr(file_records, "SCAN_CHUNK", 128)
    with FileRecords.open(path) as records:
        assert records.next_valid_batch(0) == 500


def test_torn_tail_has_no_valid_batch_after_it(tmp_path: Path) -> None:
    batches = three_batches()
    torn = bytearray(batches[2])
    torn[CRC_OFFSET] ^= 0xFF
    path = write(tmp_path, batches[0] + batches[1] + bytes(torn))
    with FileRecords.open(path) as records:
        assert records.next_valid_batch(len(batches[0]) + len(batches[1])) is None


# ---- single positions and bounds ------------------------------------------------------------------


def test_batch_and_header_at_a_position(segment) -> None:
    path, batches = segment
    starts = positions(batches)
    with FileRecords.open(path) as records:
        batch = records.batch_at(starts[1])
        header = records.header_at(starts[1])
        assert (batch.position, batch.base_offset, batch.last_offset) == (starts[1], 3, 7)
        assert (header.position, header.base_offset, header.last_offset, header.size) == (
            starts[1],
            3,
            7,
            len(batches[1]),
        )
        assert header.crc == batch.crc and header.max_timestamp == batch.max_timestamp
        assert records.batch_at(starts[1], end=starts[2] - 1) is None  # the range ends inside it
        assert [h.max_timestamp for h in records.headers()] == [TS + 2, TS + 4, TS]
        assert records.largest_timestamp_after() == TS + 4
        assert records.largest_timestamp_after(starts[2]) == TS
        assert records.largest_timestamp_after(0, starts[1] + 10) == TS + 2  # the cut batch does not count


def test_positions_past_the_end_of_the_file(segment) -> None:
    path, batches = segment
    size = sum(map(len, batches))
    with FileRecords.open(path) as records:
        assert records.size() == size
        assert list(records.batches(size)) == [] and list(records.batches(size + 100)) == []
        assert records.batch_at(size) is None and records.header_at(size + 5) is None
        assert records.next_valid_batch(size + 5) is None
        assert records.read(size, 10) == b""
        # An explicit end beyond the file: what is there is read, the missing bytes are a partial tail.
        assert [b.base_offset for b in records.batches(0, size + 100)] == [0, 3, 8]
        with pytest.raises(CorruptRecordError, match="past the end") as info:
            list(records.batches(0, size + 100, strict=True))
        assert info.value.position == size
        with pytest.raises(ValueError):
            list(records.batches(-1))
        with pytest.raises(ValueError):
            records.read(-1, 10)


def test_a_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        FileRecords.open(str(tmp_path / "00000000000000000042.log"))
