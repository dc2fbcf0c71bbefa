"""`PartitionLog.append_requests`: several Produce requests of one producer appended in order and
made durable by one fdatasync (issue 26, docs/reliability-scenarios.md scenario 90); and a trusted
bytearray request, written without a copy.

The files, offsets and HW are those of `append(data)` of each request in turn (a differential
test against two logs fed the same requests the two ways); only the fdatasyncs differ: one for the
call, none before the last append. A refused request stops the call: those before it are durable
and answered, nothing of it or after it is written. Each request but the last has its writeback
started early (`start_writeback`, a hint).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import storage.partition_log as partition_log
from storage import Store
from storage.errors import OutOfOrderSequenceError
from storage.high_watermark import HighWatermarkFile
from storage.records import build_batch

PID = 7
TS = 1_700_000_000_000


def batch(first: int, count: int, seq: int) -> bytes:
    """`count` records numbered from `first`, producer PID's sequence `seq` on."""
    records = [(b"k%d" % n, b"value-%d-" % n + b"x" * (n % 50), (), TS + n) for n in range(first, first + count)]
    return build_batch(records, producer_id=PID, producer_epoch=0, base_sequence=seq)


def requests_of(sizes: list[list[int]]) -> list[bytes]:
    """One request per inner list, of a batch per size, records and sequences numbered on."""
    out, n = [], 0
    for request in sizes:
        data = b""
        for count in request:
            data += batch(n, count, n)
            n += count
        out.append(data)
    return out


def log_bytes(store: Store, topic: str) -> list[bytes]:
    directory = store.partition_dir(topic, 0)
    return [Path(directory, f).read_bytes() for f in sorted(os.listdir(directory)) if f.endswith(".log")]


def durable_hw(store: Store, topic: str) -> int | None:
    return HighWatermarkFile(store.partition_dir(topic, 0), writable=False).read()


@pytest.fixture
def syncs(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (calls.append(fd), real(fd))[1])
    return calls


@pytest.fixture
def kicks(monkeypatch) -> list[tuple[int, int]]:
    """(offset, length) of every early writeback the log asks for."""
    calls: list[tuple[int, int]] = []
    real = partition_log.start_writeback
    monkeypatch.setattr(partition_log, "start_writeback", lambda fd, at, n: (calls.append((at, n)), real(fd, at, n)))
    return calls


@pytest.mark.parametrize("segment_bytes", [None, 3000])
def test_the_same_files_offsets_and_hw_as_one_append_each_with_one_fdatasync(store, syncs, kicks, segment_bytes):
    config = {"segment.bytes": segment_bytes} if segment_bytes else None
    store.create_topic("one", 1, config)
    store.create_topic("each", 1, config)
    requests = requests_of([[3, 4], [10], [1, 1, 1], [20]])
    each = store.partition("each", 0)
    expected = [each.append(data, trusted=True) for data in requests]
    many = store.partition("one", 0)
    del syncs[:], kicks[:]
    results, refused = many.append_requests([bytearray(data) for data in requests], trusted=True)
    assert refused is None
    assert results == expected
    assert log_bytes(store, "one") == log_bytes(store, "each")
    assert durable_hw(store, "one") == durable_hw(store, "each") == expected[-1].last_offset + 1
    if segment_bytes is None:  # no roll: one fdatasync for the call; each roll syncs the segment it seals
        assert len(syncs) == 1
    assert len(syncs) < len(requests)
    assert len(kicks) == len(requests) - 1  # every request but the last, as soon as it is written
    assert sum(n for _, n in kicks) <= sum(len(d) for d in requests[:-1])


def test_a_refused_request_stops_the_call_and_those_before_it_are_durable(store, syncs):
    store.create_topic("t", 1)
    good = requests_of([[2], [3]])
    gap = batch(100, 1, 50)  # sequence 50 where 5 is due
    log = store.partition("t", 0)
    del syncs[:]
    results, refused = log.append_requests([*good, gap, batch(5, 1, 5)], trusted=True)
    assert isinstance(refused, OutOfOrderSequenceError)
    assert [(r.base_offset, r.last_offset) for r in results] == [(0, 1), (2, 4)]
    assert log.log_end_offset == 5  # nothing of the refused request or after it
    assert durable_hw(store, "t") == 5 and len(syncs) == 1


def test_a_trusted_bytearray_is_stamped_in_place_and_written_as_it_is(store):
    """No copy: the bytes written are the caller's bytearray, its base offset stamped in it; the
    file is the one a bytes request (copied, then stamped) makes."""
    store.create_topic("a", 1)
    store.create_topic("b", 1)
    for topic in ("a", "b"):
        store.partition(topic, 0).append(batch(0, 2, 0), trusted=True)
    data = batch(2, 3, 2)
    handed = bytearray(data)
    result = store.partition("a", 0).append(handed, trusted=True, sync=False)
    store.partition("b", 0).append(data, trusted=True, sync=False)
    assert result.base_offset == 2
    assert int.from_bytes(handed[:8], "big") == 2  # stamped in place
    assert bytes(data[:8]) == bytes(8)  # a bytes request is never touched
    assert log_bytes(store, "a") == log_bytes(store, "b")
    assert log_bytes(store, "a")[0].endswith(bytes(handed))


def test_an_untrusted_bytearray_is_copied(store):
    """Only this process's own encoder hands its buffer over: anyone else's is copied first."""
    store.create_topic("t", 1)
    store.partition("t", 0).append(batch(0, 2, 0))
    handed = bytearray(batch(2, 1, 2))
    store.partition("t", 0).append(handed)
    assert handed[:8] == bytes(8)
