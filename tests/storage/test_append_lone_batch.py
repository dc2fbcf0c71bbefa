"""A Produce request of one batch is parsed without the general walk, and judged exactly as the walk judges it.

`PartitionLog.append` takes a request that is exactly one well-framed magic-2 batch straight to
`RecordBatch.parse` (`FileRecords.sole_batch`, issue 26: the one-record durable send); every
other shape goes through `FileRecords.batches`' strict walk as before. These tests fail if the
shortcut took a request it must not: bytes after the batch would be dropped silently, a second
batch lost, a legacy message or a bad frame let in. Trusted requests (this process's encoder: no
CRC check) and untrusted ones both go the same way. A second Store on the same directory stands
for another process: one-batch appends through both interleave, each catching up with the other.
"""

from __future__ import annotations

import os
import struct
import zlib

import pytest

from storage import Store
from storage.errors import CorruptRecordError, InvalidRecordError
from storage.records import ControlType, build_batch, build_control_batch


def one(value: bytes, *, seq: int = -1, pid: int = -1) -> bytes:
    return build_batch(
        [(None, value, (), 1_700_000_000_000)], producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=seq
    )


def legacy_v1(value: bytes) -> bytes:
    """A whole magic-1 message (offset, size, crc, magic, attributes, timestamp, null key, value)."""
    body = struct.pack(">bbqi", 1, 0, 1_700_000_000_000, -1) + struct.pack(">i", len(value)) + value
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(message)) + message


def with_length(data: bytes, length: int) -> bytes:
    """`data` with the batch's length field set to `length` (the frame lies about the bytes)."""
    return data[:8] + struct.pack(">i", length) + data[12:]


def values(log) -> list[tuple[int, bytes]]:
    return [(r.offset, r.value) for b in log.read(0, 1 << 20) for r in b.records()]


GOOD = one(b"good")
BAD_SHAPES = {
    "trailing bytes": GOOD + b"\0" * 5,
    "a partial second batch": GOOD + GOOD[:30],
    "one byte short": GOOD[:-1],
    "a length past the bytes": with_length(GOOD, len(GOOD) - 12 + 1) + b"\0",
    "a length short of the bytes": with_length(GOOD, len(GOOD) - 12 - 1),
    "a length below a batch header": with_length(GOOD, 20)[:32],
    "a magic-1 message": legacy_v1(b"old"),
}


@pytest.mark.parametrize("trusted", [False, True])
@pytest.mark.parametrize("shape", list(BAD_SHAPES))
def test_a_request_that_is_not_exactly_one_batch_is_refused_whole(store, store_path, shape, trusted):
    store.create_topic("t", 1)
    log = store.partition("t", 0)
    log.append(one(b"before"))
    size = os.path.getsize(os.path.join(store_path, "t-0", "00000000000000000000.log"))
    with pytest.raises(CorruptRecordError):
        log.append(BAD_SHAPES[shape], trusted=trusted)
    assert log.log_end_offset == 1 and values(log) == [(0, b"before")]
    assert os.path.getsize(os.path.join(store_path, "t-0", "00000000000000000000.log")) == size


@pytest.mark.parametrize("trusted", [False, True])
def test_every_batch_of_a_two_batch_request_is_written(store, trusted):
    store.create_topic("t", 1)
    log = store.partition("t", 0)
    result = log.append(one(b"a", pid=3, seq=0) + one(b"b", pid=3, seq=1), trusted=trusted)
    assert [(r.base_offset, r.duplicate) for r in result.batches] == [(0, False), (1, False)]
    assert values(log) == [(0, b"a"), (1, b"b")]


def test_a_lone_control_batch_is_still_refused(store):
    store.create_topic("t", 1)
    marker = build_control_batch(ControlType.COMMIT, producer_id=3, producer_epoch=0, coordinator_epoch=0, timestamp=1)
    with pytest.raises(InvalidRecordError):
        store.partition("t", 0).append(marker, trusted=True)


def test_lone_batches_from_two_stores_on_one_directory_interleave(store, store_path):
    """Two writers (Stores) on one partition, one durable one-batch append at a time each: every
    append sees the other's (offsets follow on), a retry through the other Store is answered with
    the original offset, and a fresh reader sees every record below the high watermark."""
    store.create_topic("t", 1)
    other = Store.open(store_path)
    try:
        mine, theirs = store.partition("t", 0), other.partition("t", 0)
        sent = []
        for i in range(6):
            writer, pid = (mine, 11) if i % 2 == 0 else (theirs, 12)
            data = one(b"%d" % i, pid=pid, seq=i // 2)
            result = writer.append(data, trusted=True)
            assert (result.base_offset, result.duplicate) == (i, False)
            sent.append(data)
        retry = theirs.append(sent[2], trusted=True)  # mine's third append, retried through the other Store
        assert (retry.base_offset, retry.duplicate) == (2, True)
        assert mine.log_end_offset == theirs.log_end_offset == 6
    finally:
        other.close()
    reader = Store.open(store_path, read_only=True)
    try:
        log = reader.partition("t", 0)
        assert log.high_watermark == 6
        assert values(log) == [(i, b"%d" % i) for i in range(6)]
    finally:
        reader.close()
