"""The golden corpus (tests/golden/) against txlog's two Python-side codecs.

Every file of tests/golden/batches/ is read by the native codec through storage.records' public
interface (RecordBatch.parse, records(), consumer_records(), and storage.arrow_records' columns:
the three native decode paths) and by the pure-Python reference (storage/records_reference.py),
and each must give the manifest's header and records, or fail at the manifest's stage with its
error class. The same files are read by the Rust core (storage/native/src/golden_tests.rs) and
the JVM reader (tests/spark/test_jvm_golden.py), so a format change fails in all three at once.

The last tests regenerate the corpus with tests/golden/generate.py and demand the committed
bytes, so the files stay what their generator says they are.
"""

from __future__ import annotations

import importlib.util
import json
import os
import struct
import sys

import pytest

from storage import compression_reference
from storage import records_reference as reference
from storage.arrow_records import RecordColumns
from storage.compression import decompress
from storage.errors import InvalidRecordError, KafkaError
from storage.records import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    HEADER_SIZE,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    ControlType,
    RecordBatch,
)
from txlog.consumer_record import ConsumerRecord

GOLDEN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "golden")
with open(os.path.join(GOLDEN, "manifest.json"), encoding="ascii") as _f:
    MANIFEST = json.load(_f)
BATCHES_DIR = os.path.join(GOLDEN, MANIFEST["batches_dir"])
VALID = [b for b in MANIFEST["batches"] if "error" not in b]
DAMAGED = [b for b in MANIFEST["batches"] if "error" in b]
STAGES = ("frame", "crc", "decompress", "records")
HEADER_FIELDS = (
    "base_offset",
    "batch_length",
    "partition_leader_epoch",
    "magic",
    "crc",
    "attributes",
    "last_offset_delta",
    "base_timestamp",
    "max_timestamp",
    "producer_id",
    "producer_epoch",
    "base_sequence",
    "records_count",
)


def read(name: str) -> bytes:
    with open(os.path.join(BATCHES_DIR, name), "rb") as f:
        return f.read()


def ids(entries: list[dict]) -> list[str]:
    return [e["file"] for e in entries]


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else bytes.fromhex(text)


def expected_records(entry: dict) -> list[tuple]:
    """The manifest's records in storage.records.Record's field order (header names as text)."""
    return [
        (
            r["offset"],
            r["timestamp"],
            _bytes(r["key"]),
            _bytes(r["value"]),
            [(bytes.fromhex(h["key"]).decode(), _bytes(h["value"])) for h in r["headers"]],
            r["sequence"],
        )
        for r in entry["records"]
    ]


def test_the_manifest_lists_every_file_once_and_every_kind_of_damage():
    names = ids(MANIFEST["batches"])
    assert len(names) == len(set(names))
    assert sorted(names) == sorted(os.listdir(BATCHES_DIR))
    assert {b["error"]["kind"] for b in DAMAGED} == set(STAGES)
    assert {b["compression"] for b in VALID} == {"none", "gzip", "snappy", "lz4", "zstd"}
    total = sum(os.path.getsize(os.path.join(BATCHES_DIR, n)) for n in names)
    assert total + os.path.getsize(os.path.join(GOLDEN, "manifest.json")) < 1 << 20, "the corpus stays small"


# ---- valid batches ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", VALID, ids=ids(VALID))
def test_native_header_and_flags(entry):
    data = read(entry["file"])
    batch = RecordBatch.parse(data, path=entry["file"])
    assert batch.size == len(data) == entry["size"], "each file is exactly one batch"
    assert {name: getattr(batch, name) for name in HEADER_FIELDS} == entry["header"]
    assert batch.compression.kafka_name == entry["compression"]
    assert batch.timestamp_type.kafka_name == entry["timestamp_type"]
    assert (batch.is_transactional, batch.is_control) == (entry["transactional"], entry["control"])
    assert batch.is_valid()


@pytest.mark.parametrize("entry", VALID, ids=ids(VALID))
def test_native_records_by_every_decode_path(entry):
    """records(), consumer_records() and the Arrow column builder: three native loops, one answer."""
    batch = RecordBatch.parse(read(entry["file"]))
    want = expected_records(entry)
    assert [tuple(r) for r in batch.records()] == want
    assert batch.record_tuples() == want

    consumer = batch.consumer_records(ConsumerRecord, "golden", 0, -(1 << 63), (1 << 63) - 1)
    assert [(c.offset, c.timestamp, c.key, c.value, c.headers, c.sequence) for c in consumer] == want
    assert all(
        (c.topic, c.partition, c.timestamp_type.kafka_name, c.producer_id, c.producer_epoch, c.is_transactional)
        == (
            "golden",
            0,
            entry["timestamp_type"],
            entry["header"]["producer_id"],
            entry["header"]["producer_epoch"],
            entry["transactional"],
        )
        for c in consumer
    )

    columns = RecordColumns()
    assert columns.add(batch) == len(want)
    rows = columns.table(("offset", "timestamp", "key", "value", "headers", "sequence")).to_pylist()
    assert [
        (
            r["offset"],
            r["timestamp"],
            r["key"],
            r["value"],
            [(h["key"], h["value"]) for h in r["headers"]],
            r["sequence"],
        )
        for r in rows
    ] == want


@pytest.mark.parametrize("entry", VALID, ids=ids(VALID))
def test_native_framing_walk_of_the_append_path(entry):
    """validate_framing: the append path's check returns the batch's true maxTimestamp."""
    batch = RecordBatch.parse(read(entry["file"]))
    if entry["header"]["records_count"] == 0:  # emptied by compaction: readable, but never appended
        with pytest.raises(InvalidRecordError):
            batch.validate_framing()
        return
    assert batch.validate_framing() == entry["header"]["max_timestamp"]


@pytest.mark.parametrize("entry", [e for e in VALID if e["control"]], ids=ids([e for e in VALID if e["control"]]))
def test_native_control_markers(entry):
    batch = RecordBatch.parse(read(entry["file"]))
    marker = batch.control_marker()
    assert (marker.control_type, marker.coordinator_epoch) == (
        ControlType[entry["marker"]["type"]],
        entry["marker"]["coordinator_epoch"],
    )
    assert batch.is_abort_marker() == (entry["marker"]["type"] == "ABORT")


@pytest.mark.parametrize("entry", VALID, ids=ids(VALID))
def test_reference_records(entry):
    data = read(entry["file"])
    assert reference.decode_batch(data) == expected_records(entry)
    if not entry["header"]["attributes"] & (COMPRESSION_MASK | CONTROL_MASK) and entry["records"]:
        records, _ = reference.walk_records(data[HEADER_SIZE:])
        assert records == entry["header"]["records_count"]


# ---- damaged batches -------------------------------------------------------------------------------------------


def native_failure(data: bytes) -> tuple[str, KafkaError]:
    """(the stage at which the native reader refuses `data`, its error), found through the public
    interface alone: the header without and with the CRC, inflating the region, decoding."""
    try:
        RecordBatch.parse(data, verify_crc=False)
    except KafkaError as exc:
        return "frame", exc
    try:
        batch = RecordBatch.parse(data)
    except KafkaError as exc:
        return "crc", exc
    try:
        decompress(batch.attributes & COMPRESSION_MASK, data[HEADER_SIZE : batch.size])
        stage = "records"
    except KafkaError:
        stage = "decompress"
    with pytest.raises(KafkaError) as info:
        batch.records()
    return stage, info.value


@pytest.mark.parametrize("entry", DAMAGED, ids=ids(DAMAGED))
def test_native_refuses_damage_at_its_stage(entry):
    data = read(entry["file"])
    stage, exc = native_failure(data)
    assert (stage, type(exc).__name__) == (entry["error"]["kind"], entry["error"]["python"]), str(exc)
    if stage in ("decompress", "records"):  # the other decode paths refuse it with the same error
        batch = RecordBatch.parse(data)
        with pytest.raises(type(exc)):
            batch.consumer_records(ConsumerRecord, "golden", 0, -(1 << 63), (1 << 63) - 1)
        columns = RecordColumns()
        with pytest.raises(type(exc)):
            columns.add(batch)
        assert columns.rows == 0, "a damaged batch adds no row"


@pytest.mark.parametrize("entry", DAMAGED, ids=ids(DAMAGED))
def test_reference_refuses_damage_at_its_stage(entry):
    """The reference has one entry point, so its stage is told apart by what still works: a
    frame, decompress or records file fails with the CRC check off too; a decompress file's
    region does not inflate, a records file's region does. (A crc file may fail further on with
    the check off - a lying length shifts the region - see the test below.)"""
    data = read(entry["file"])
    kind, error = entry["error"]["kind"], entry["error"]["python"]
    with pytest.raises(KafkaError) as info:
        reference.decode_batch(data)
    assert type(info.value).__name__ == error
    if kind == "crc":
        return
    with pytest.raises(KafkaError):
        reference.decode_batch(data, verify_crc=False)
    if kind in ("decompress", "records"):
        size = struct.unpack_from(">i", data, LENGTH_OFFSET)[0] + LOG_OVERHEAD
        codec = struct.unpack_from(">h", data, ATTRIBUTES_OFFSET)[0] & COMPRESSION_MASK
        region = data[HEADER_SIZE:size]
        if kind == "decompress":
            with pytest.raises(KafkaError):
                compression_reference.decompress(codec, region)
        else:
            compression_reference.decompress(codec, region)


def test_reference_refuses_a_flipped_value_bit_by_the_crc_alone():
    """damaged-crc.bin differs from none.bin in one bit of a value: only the CRC can tell."""
    data = read("damaged-crc.bin")
    assert len(reference.decode_batch(data, verify_crc=False)) == len(reference.decode_batch(read("none.bin")))


# ---- the generator ---------------------------------------------------------------------------------------------


def _generator():
    spec = importlib.util.spec_from_file_location("golden_generate", os.path.join(GOLDEN, "generate.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


GENERATOR = _generator()
GENERATED = GENERATOR.corpus()
#: Codecs whose compressed bytes depend on the installed library's version (gzip's do not vary:
#: the generator pins its header's MTIME, the one field that changes from run to run).
LIBRARY_CODECS = {2: "python-snappy", 3: "lz4", 4: "zstandard"}


def _codec(data: bytes) -> int:
    return data[ATTRIBUTES_OFFSET + 1] & COMPRESSION_MASK if len(data) >= HEADER_SIZE else 0


@pytest.mark.parametrize("entry", GENERATED, ids=[e.name for e in GENERATED])
def test_regenerating_yields_the_committed_bytes(entry):
    committed = read(entry.name)
    if entry.data == committed:
        return
    codec = _codec(committed)
    assert codec in LIBRARY_CODECS, f"{entry.name}: the generator no longer writes the committed bytes"
    source = {2: "snappy.bin", 3: "lz4.bin", 4: "zstd.bin"}[codec]
    fresh = next(e.data for e in GENERATED if e.name == source)
    assert reference.decode_batch(fresh) == reference.decode_batch(read(source)), (
        f"{source}: regenerated, it decodes to other records"
    )
    library = LIBRARY_CODECS[codec]
    pytest.skip(
        f"{entry.name}: the installed {library} compresses the same records differently from the one that "
        f"wrote the committed file (the decoded records are equal); run tests/golden/generate.py to refresh"
    )


def test_regenerating_yields_the_committed_manifest():
    changed = {e.name for e in GENERATED if e.data != read(e.name)}
    fresh = json.loads(GENERATOR.manifest_text(GENERATED))
    if not changed:
        with open(os.path.join(GOLDEN, "manifest.json"), encoding="ascii") as f:
            assert GENERATOR.manifest_text(GENERATED) == f.read()
        return

    def sizes_aside(manifest: dict) -> list[dict]:  # what a compressor's output changes: sizes and the CRC
        out = []
        for b in manifest["batches"]:
            b = json.loads(json.dumps(b))
            if b["file"] in changed and "header" in b:
                b.pop("size")
                for name in ("batch_length", "crc"):
                    b["header"].pop(name)
            out.append(b)
        return out

    assert sizes_aside(fresh) == sizes_aside(MANIFEST)
