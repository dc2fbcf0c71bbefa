"""Producer-state snapshot files: Kafka's byte layout, HashMap entry order, corruption and durability."""

from __future__ import annotations

import errno
import os
import shutil
import struct
import subprocess

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage.errors import CorruptSnapshotError, KafkaStorageError
from storage.log_files import snapshot_filename
from storage.producer_snapshot import (
    SnapshotEntry,
    decode_snapshot,
    delete_snapshot,
    encode_snapshot,
    list_snapshots,
    read_snapshot,
    write_snapshot,
)


def entry(pid, **fields):
    values = dict(
        epoch=0,
        last_sequence=-1,
        last_offset=-1,
        offset_delta=0,
        timestamp=0,
        coordinator_epoch=-1,
        current_txn_first_offset=-1,
    )
    values.update(fields)
    return SnapshotEntry(pid, **values)


def pids_of(data):
    return [e.producer_id for e in decode_snapshot(data)]


ONE = SnapshotEntry(
    producer_id=1000,
    epoch=5,
    last_sequence=2,
    last_offset=2,
    offset_delta=2,
    timestamp=1700000000002,
    coordinator_epoch=-1,
    current_txn_first_offset=0,
)


# ---- layout ---------------------------------------------------------------------------


def test_one_entry_snapshot_byte_for_byte():
    body = bytes.fromhex(
        "00000001"  # entryCount
        "00000000000003e8"  # producerId 1000
        "0005"  # epoch
        "00000002"  # lastSequence
        "0000000000000002"  # lastOffset
        "00000002"  # offsetDelta
        "0000018bcfe56802"  # timestamp
        "ffffffff"  # coordinatorEpoch -1
        "0000000000000000"  # currentTxnFirstOffset
    )
    expected = bytes.fromhex("0001") + crc32c.crc32c(body).to_bytes(4, "big") + body
    data = encode_snapshot([ONE])
    assert len(data) == 2 + 4 + 4 + 46
    assert data == expected


def test_empty_snapshot_is_a_header_with_a_valid_crc():
    data = encode_snapshot([])
    assert data == bytes.fromhex("0001") + crc32c.crc32c(bytes(4)).to_bytes(4, "big") + bytes(4)
    assert decode_snapshot(data) == []


def test_round_trip_with_extreme_values():
    entries = [
        ONE,
        SnapshotEntry(-(2**63), -(2**15), -(2**31), -(2**63), -(2**31), -(2**63), -(2**31), -(2**63)),
        SnapshotEntry(2**63 - 1, 2**15 - 1, 2**31 - 1, 2**63 - 1, 2**31 - 1, 2**63 - 1, 2**31 - 1, 2**63 - 1),
        entry(7),
    ]
    assert sorted(decode_snapshot(encode_snapshot(entries))) == sorted(entries)


@given(
    st.lists(
        st.builds(
            SnapshotEntry,
            st.integers(-(2**63), 2**63 - 1),
            st.integers(-(2**15), 2**15 - 1),
            st.integers(-(2**31), 2**31 - 1),
            st.integers(-(2**63), 2**63 - 1),
            st.integers(-(2**31), 2**31 - 1),
            st.integers(-(2**63), 2**63 - 1),
            st.integers(-(2**31), 2**31 - 1),
            st.integers(-(2**63), 2**63 - 1),
        ),
        unique_by=lambda e: e.producer_id,
        max_size=30,
    )
)
def test_round_trip_keeps_every_entry(entries):
    data = encode_snapshot(entries)
    decoded = decode_snapshot(data)
    assert sorted(decoded) == sorted(entries)
    assert encode_snapshot(decoded) == data  # the emitted order is already HashMap order


def test_refuses_what_cannot_be_encoded():
    with pytest.raises(ValueError):
        encode_snapshot([entry(1), entry(1)])
    with pytest.raises(ValueError):
        encode_snapshot([entry(1, epoch=2**15)])


# ---- Java HashMap<Long, …> order ----------------------------------------------------------


@pytest.mark.parametrize(
    "inserted, expected",
    [
        ([2, 33, 1, 17], [33, 1, 17, 2]),  # 1, 17, 33 share bucket 1 of 16, in insertion order
        ([17, 1] + list(range(2, 12)), [17, 1] + list(range(2, 12))),  # 12 entries: still 16 buckets
        ([17, 1] + list(range(2, 13)), list(range(1, 13)) + [17]),  # 13th entry: 32 buckets split 1 and 17
        ([3, 2**32, -1], [-1, 2**32, 3]),  # Long.hashCode folds the high word in
        ([65536, 1], [65536, 1]),  # HashMap.hash spreads bit 16 into bit 0
        ([16 * i for i in range(9)], [0, 32, 64, 96, 128, 16, 48, 80, 112]),  # a 9-long chain doubles a small table
    ],
)
def test_entries_follow_java_hashmap_iteration_order(inserted, expected):
    assert pids_of(encode_snapshot([entry(p) for p in inserted])) == expected


JAVA_ORDER = """
import java.io.*;
import java.util.*;
public class Order {
    public static void main(String[] args) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        for (String line; (line = in.readLine()) != null; ) {
            Map<Long, Boolean> map = new HashMap<>();
            for (String word : line.trim().split(" ")) if (!word.isEmpty()) map.put(Long.parseLong(word), true);
            StringJoiner out = new StringJoiner(" ");
            for (Long key : map.keySet()) out.add(key.toString());
            System.out.println(out);
        }
    }
}
"""


@pytest.mark.skipif(shutil.which("java") is None, reason="no JVM to compare with")
def test_order_matches_a_real_java_hashmap(tmp_path):
    import random

    rng = random.Random(20241025)
    cases = []
    for n in (0, 1, 5, 12, 13, 24, 25, 48, 49, 97, 200):
        cases.append(rng.sample(range(0, 100_000), n))  # sparse ids, as after expiry
        cases.append([rng.randrange(-(2**63), 2**63) for _ in range(n)])
        cases.append(list(range(5000, 5000 + n))[::-1])
    source = tmp_path / "Order.java"
    source.write_text(JAVA_ORDER)
    stdin = "".join(" ".join(map(str, c)) + "\n" for c in cases)
    result = subprocess.run(["java", str(source)], input=stdin, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    for case, line in zip(cases, result.stdout.splitlines(), strict=True):
        assert pids_of(encode_snapshot([entry(p) for p in case])) == [int(w) for w in line.split()]


# ---- corruption -----------------------------------------------------------------------------


def with_crc(version, body):
    return struct.pack(">hI", version, crc32c.crc32c(body)) + body


def test_empty_data_is_corrupt():
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(b"")


@pytest.mark.parametrize("cut", [1, 5, 9, 10, 55])
def test_truncated_data_is_corrupt(cut):
    data = encode_snapshot([ONE])
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(data[:cut])


def test_every_flipped_byte_is_detected():
    data = encode_snapshot([ONE, entry(2, timestamp=99)])
    for i in range(len(data)):
        damaged = bytearray(data)
        damaged[i] ^= 0x40
        with pytest.raises(CorruptSnapshotError):
            decode_snapshot(bytes(damaged))


def test_wrong_version_is_corrupt_even_with_a_good_crc():
    body = encode_snapshot([ONE])[6:]
    for version in (0, 2, -1):
        with pytest.raises(CorruptSnapshotError, match="version"):
            decode_snapshot(with_crc(version, body))


def test_count_must_match_the_entries_even_with_a_good_crc():
    entries = encode_snapshot([ONE])[10:]
    with pytest.raises(CorruptSnapshotError, match="truncated"):
        decode_snapshot(with_crc(1, struct.pack(">i", 2) + entries))
    with pytest.raises(CorruptSnapshotError, match="trailing"):
        decode_snapshot(with_crc(1, struct.pack(">i", 1) + entries + b"\x00"))
    with pytest.raises(CorruptSnapshotError, match="negative"):
        decode_snapshot(with_crc(1, struct.pack(">i", -1)))


# ---- files -------------------------------------------------------------------------------------


def test_file_name_is_the_zero_padded_end_offset():
    assert snapshot_filename(0) == "00000000000000000000.snapshot"
    assert snapshot_filename(1234) == "00000000000000001234.snapshot"
    with pytest.raises(ValueError):
        snapshot_filename(-1)


def test_write_then_read(tmp_path):
    path = write_snapshot(str(tmp_path), 42, [ONE, entry(7)])
    assert path == str(tmp_path / "00000000000000000042.snapshot")
    assert sorted(read_snapshot(path)) == sorted([ONE, entry(7)])
    assert os.listdir(tmp_path) == ["00000000000000000042.snapshot"]


def test_reading_a_corrupt_file_names_it(tmp_path):
    path = tmp_path / "00000000000000000042.snapshot"
    path.write_bytes(b"")
    with pytest.raises(CorruptSnapshotError, match="00000000000000000042.snapshot"):
        read_snapshot(str(path))
    with pytest.raises(FileNotFoundError):
        read_snapshot(str(tmp_path / "00000000000000000043.snapshot"))


def test_list_snapshots_sorted_and_ignoring_leftovers(tmp_path):
    for name in (
        "00000000000000000010.snapshot",
        "00000000000000000005.snapshot",
        "00000000000000000007.snapshot.tmp",
        "00000000000000000008.snapshot.deleted",
        "00000000000000000009.log",
        "garbage.snapshot",
        ".snapshot",
        "12.snapshot",  # Kafka parses the digits, padded or not
    ):
        (tmp_path / name).write_bytes(b"")
    assert list_snapshots(str(tmp_path)) == [
        (5, str(tmp_path / "00000000000000000005.snapshot")),
        (10, str(tmp_path / "00000000000000000010.snapshot")),
        (12, str(tmp_path / "12.snapshot")),
    ]
    assert list_snapshots(str(tmp_path / "missing")) == []


def test_deleting_a_snapshot_twice_is_fine(tmp_path):
    path = write_snapshot(str(tmp_path), 3, [ONE])
    delete_snapshot(path)
    assert not os.path.exists(path)
    delete_snapshot(path)  # already gone is fine


def failing_fsync(fd):
    raise OSError(errno.EIO, "Input/output error")


def test_failed_fsync_keeps_the_previous_snapshot(tmp_path, monkeypatch):
    path = write_snapshot(str(tmp_path), 10, [ONE])
    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(KafkaStorageError):
        write_snapshot(str(tmp_path), 10, [entry(1), entry(2)])
    with pytest.raises(KafkaStorageError):
        write_snapshot(str(tmp_path), 20, [entry(3)])
    monkeypatch.undo()
    assert read_snapshot(path) == [ONE]
    assert os.listdir(tmp_path) == ["00000000000000000010.snapshot"]


def test_disk_full_while_writing_keeps_the_previous_snapshot(tmp_path, monkeypatch):
    path = write_snapshot(str(tmp_path), 10, [ONE])
    real_write = os.write

    def write_a_little_then_enospc(fd, data):
        if len(data) > 8:
            return real_write(fd, bytes(data)[:8])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", write_a_little_then_enospc)
    with pytest.raises(KafkaStorageError):
        write_snapshot(str(tmp_path), 10, [entry(1), entry(2)])
    monkeypatch.undo()
    assert read_snapshot(path) == [ONE]
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == []
