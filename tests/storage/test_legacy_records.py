"""Pre-0.11 messages (magic 0 and 1) in a Kafka log dir: `inspect` prints them as kafka-dump-log does,
every v2-only reader refuses them loudly ("magic 1 (pre-0.11) format"), never an empty success.

The segments are built with kafka-python's `LegacyRecordBatchBuilder`, an implementation of the
documented legacy message format independent of txlog's reader.
"""

from __future__ import annotations

import os
import struct
import zlib

import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from storage.legacy_records import is_legacy_message, parse_legacy, records_of
from storage.log_files import filename_prefix
from tests.cli.cli_helpers import assert_ok, assert_one_error, txlog

SEG0 = filename_prefix(0)
GZIP = 1


def legacy_set(magic: int, values: list[bytes], *, codec: int = 0, base_ts: int = 1000) -> bytes:
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for i, v in enumerate(values):
        builder.append(i, timestamp=base_ts + i if magic else None, key=b"k%d" % i, value=v)
    return bytes(builder.build())


def as_broker_wrote(wrapper: bytes, last_offset: int, timestamp: int) -> bytes:
    """A producer's magic-1 wrapper as the broker stores it: the last inner offset, the max timestamp, a new CRC."""
    out = bytearray(wrapper)
    struct.pack_into(">q", out, 0, last_offset)
    struct.pack_into(">q", out, 18, timestamp)
    struct.pack_into(">I", out, 12, zlib.crc32(bytes(out[16:])))
    return bytes(out)


def kafka_dir(root, data: bytes) -> str:
    os.makedirs(os.path.join(root, "old-0"))
    with open(os.path.join(root, "meta.properties"), "w") as f:
        f.write("version=0\nbroker.id=0\n")
    with open(os.path.join(root, "old-0", SEG0 + ".log"), "wb") as f:
        f.write(data)
    return str(root)


def _crc(data: bytes, position: int) -> int:
    return struct.unpack_from(">I", data, position + 12)[0]


def test_inspect_prints_magic_1_messages_as_kafka_dump_log(tmp_path):
    data = legacy_set(1, [b"v0", b"v1"])
    root = kafka_dir(tmp_path / "k", data)
    path = os.path.join(root, "old-0", SEG0 + ".log")
    proc = txlog("inspect", "--print-data-log", path)
    assert_ok(proc)
    c0, c1 = _crc(data, 0), _crc(data, 38)
    assert proc.stdout.splitlines() == [
        f"Dumping {path}",
        "Log starting offset: 0",
        f"offset: 0 position: 0 CreateTime: 1000 size: 38 magic: 1 compresscodec: none crc: {c0} isvalid: true",
        f"| offset: 0 CreateTime: 1000 keySize: 2 valueSize: 2 isValid: true crc: {c0}}} key: k0 payload: v0",
        f"offset: 1 position: 38 CreateTime: 1001 size: 38 magic: 1 compresscodec: none crc: {c1} isvalid: true",
        f"| offset: 1 CreateTime: 1001 keySize: 2 valueSize: 2 isValid: true crc: {c1}}} key: k1 payload: v1",
    ]


def test_inspect_prints_a_gzip_wrapper_and_its_inner_messages(tmp_path):
    data = as_broker_wrote(legacy_set(1, [b"a", b"bb", b"ccc"], codec=GZIP), 2, 1002)
    root = kafka_dir(tmp_path / "k", data)
    proc = txlog("inspect", "--print-data-log", os.path.join(root, "old-0", SEG0 + ".log"))
    assert_ok(proc)
    lines = proc.stdout.splitlines()[2:]
    assert lines[0] == (
        f"offset: 2 position: 0 CreateTime: 1002 size: {len(data)} magic: 1 compresscodec: gzip "
        f"crc: {_crc(data, 0)} isvalid: true"
    )
    assert [line.split(" isValid")[0] for line in lines[1:]] == [
        "| offset: 0 CreateTime: 1000 keySize: 2 valueSize: 1",
        "| offset: 1 CreateTime: 1001 keySize: 2 valueSize: 2",
        "| offset: 2 CreateTime: 1002 keySize: 2 valueSize: 3",
    ]
    assert [line.split("payload: ")[1] for line in lines[1:]] == ["a", "bb", "ccc"]


def test_magic_0_has_no_timestamp(tmp_path):
    data = legacy_set(0, [b"x"])
    root = kafka_dir(tmp_path / "k", data)
    proc = txlog("inspect", "--deep-iteration", os.path.join(root, "old-0", SEG0 + ".log"))
    assert_ok(proc)
    assert proc.stdout.splitlines()[2:] == [
        f"offset: 0 position: 0 NoTimestampType: -1 size: 29 magic: 0 compresscodec: none crc: {_crc(data, 0)} "
        "isvalid: true",
        f"| offset: 0 NoTimestampType: -1 keySize: 2 valueSize: 1 isValid: true crc: {_crc(data, 0)}}}",
    ]


@pytest.mark.parametrize("codec", [0, GZIP])
def test_readers_refuse_legacy_data_loudly(tmp_path, codec):
    data = legacy_set(1, [b"v0", b"v1"], codec=codec)
    root = kafka_dir(tmp_path / "k", as_broker_wrote(data, 1, 1001) if codec else data)
    message = assert_one_error(txlog("consume", "-t", "old", data_dir=root))
    assert "magic 1 (pre-0.11) format at byte 0" in message
    proc = txlog("verify", "--output", "jsonl", data_dir=root)
    assert proc.returncode == 3
    assert "magic 1 (pre-0.11) format at byte 0" in proc.stdout and "torn tail" not in proc.stdout


def test_a_zero_filled_tail_is_not_taken_for_a_legacy_message(tmp_path):
    from storage.records import build_batch

    root = kafka_dir(tmp_path / "k", build_batch([(None, b"v", [], 5)]) + bytes(64))
    proc = txlog("consume", "-t", "old", data_dir=root)
    assert_ok(proc)
    assert proc.stdout == "v\n"


def test_parser_checks_every_length():
    data = legacy_set(1, [b"hello"])
    m = parse_legacy(data, 0)
    assert (m.offset, m.key, m.value, m.valid, m.timestamp) == (0, b"k0", b"hello", True, 1000)
    assert is_legacy_message(data, 0)
    flipped = bytearray(data)
    flipped[-1] ^= 1
    assert not is_legacy_message(bytes(flipped), 0)  # a CRC mismatch is not a recognised message
    assert parse_legacy(bytes(flipped), 0).valid is False
    long_key = bytearray(data)
    struct.pack_into(">i", long_key, 12 + 4 + 2 + 8, 1000)  # key length past the message
    from storage.errors import CorruptRecordError

    with pytest.raises(CorruptRecordError, match="key of 1000 bytes runs past the message"):
        parse_legacy(bytes(long_key), 0, path="seg.log")
    wrapper = as_broker_wrote(legacy_set(1, [b"a", b"b"], codec=GZIP), 41, 1001)
    assert [r.offset for r in records_of(parse_legacy(wrapper, 0))] == [40, 41]  # relative to the wrapper's
    assert zlib.crc32(wrapper[16:]) == _crc(wrapper, 0)
