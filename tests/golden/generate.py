"""Write the golden RecordBatch v2 corpus: tests/golden/batches/*.bin and tests/golden/manifest.json.

    python3 tests/golden/generate.py

The corpus is what three readers are held to at once (the Rust core's `cargo test`, the Python
codecs' pytest, the JVM reader's Java check; tests/golden/README.md), so it is written without
txlog: data batches by kafka-python's `DefaultRecordBatchBuilder`, an independent writer of the
format; everything Kafka's clients cannot write (control batches, a LOG_APPEND_TIME stamp, a batch
emptied by compaction, every kind of damage) by hand from docs/kafka-formats.md §1 and §2 with
`struct`, and CRCs from the `crc32c` package. The expected decode in the manifest comes from the
rows given to the writer, never from reading the bytes back.

Regenerating yields the committed bytes (tests/native/test_golden_batches.py checks it), with one
adjustment: kafka-python's gzip writer puts the current time in the gzip header's MTIME field, so
the generator sets it to 0 (as `gzip -n` does) and recomputes the batch CRC. The other
compressors are deterministic for a given library version; a newer snappy, lz4 or zstd library
may compress differently, which the check reports as such (same decoded records, other bytes).
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from typing import Any

from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatchBuilder

HERE = os.path.dirname(os.path.abspath(__file__))
BATCHES_DIR = os.path.join(HERE, "batches")
MANIFEST = os.path.join(HERE, "manifest.json")

# --- the frame (docs/kafka-formats.md §1.1), restated here so the corpus does not depend on txlog

HEADER = struct.Struct(">qiibIhiqqqhii")  # the 61 header bytes
HEADER_SIZE = HEADER.size
LENGTH_AT, MAGIC_AT, CRC_AT, ATTRIBUTES_AT = 8, 16, 17, 21
MAX_TIMESTAMP_AT, RECORDS_COUNT_AT = 35, 57
CRC_COVERED_START = ATTRIBUTES_AT
LOG_OVERHEAD = 12
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
LOG_APPEND_TIME, TRANSACTIONAL, CONTROL = 0x08, 0x10, 0x20
GZIP_MTIME = slice(4, 8)  # RFC 1952: ID1 ID2 CM FLG MTIME(4) ...

T = 1_700_000_000_000  # 2023-11-14T22:13:20Z, the corpus's wall clock


@dataclass(frozen=True)
class Row:
    """One record as given to the writer (timestamp in epoch ms; header names are text)."""

    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass
class Entry:
    """One corpus file and what a reader must make of it."""

    name: str
    data: bytes
    description: str
    expected: dict[str, Any] = field(default_factory=dict)


# --- the rows ------------------------------------------------------------------------------------------

#: Every field shape a decoder takes a different path for: null key, null value (a tombstone),
#: empty key and value, a null header value, a non-ASCII header name, a 200-byte value (a
#: two-byte length varint), and timestamps out of order (a negative delta).
PLAIN_ROWS = (
    Row(b"order-1", b"created", T, (("source", b"web"), ("trace", None))),
    Row(None, b"no key", T + 5),
    Row(b"order-1", None, T + 2),
    Row(b"", b"", T - 3, (("\u00e9t\u00e9", b"\x00\xff"),)),
    Row(b"k", b"v" * 200, T + 1),
)
#: Repetitive values, so every codec shrinks them (kafka-python sends a batch uncompressed when
#: compressing does not pay, and a codec batch must really be compressed).
CODEC_ROWS = tuple(
    Row(
        f"order-{i:04d}".encode(),
        b"status=shipped;warehouse=north;" * 4,
        T + i * 10,
        (("source", b"batch"),) if i % 3 == 0 else (),
    )
    for i in range(8)
)
SMALL_ROWS = tuple(
    Row(f"k{i}".encode(), f"v{i}".encode(), T + i, (("h", f"{i}".encode()),) if i == 0 else ()) for i in range(3)
)
#: 130 records: offset deltas past 63 and timestamp deltas past 63 need two- and three-byte varints.
MANY_ROWS = tuple(Row(None, str(i).encode(), T + i * 1000) for i in range(130))


# --- writers -----------------------------------------------------------------------------------------------


def kafka_python_batch(
    rows: tuple[Row, ...],
    *,
    codec: str = "none",
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    """The batch kafka-python's producer would send for `rows`, at `base_offset` as a leader would place it.

    baseOffset is outside the CRC (docs/kafka-formats.md §1.2), so setting it leaves the
    writer's CRC as it was.
    """
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=CODECS[codec],
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=1 << 20,
    )
    for delta, row in enumerate(rows):
        if (
            builder.append(delta, timestamp=row.timestamp, key=row.key, value=row.value, headers=list(row.headers))
            is None
        ):
            raise AssertionError("a golden batch must fit kafka-python's batch_size")
    out = bytearray(builder.build())
    if (out[ATTRIBUTES_AT + 1] & 0x07) != CODECS[codec]:
        raise AssertionError(f"kafka-python sent the {codec} rows uncompressed: make them more repetitive")
    out[0:8] = struct.pack(">q", base_offset)
    if codec == "gzip":
        out[HEADER_SIZE + GZIP_MTIME.start : HEADER_SIZE + GZIP_MTIME.stop] = bytes(4)
        restamp_crc(out)
    return bytes(out)


def restamp_crc(batch: bytearray) -> None:
    """Write the CRC-32C of bytes [21, end) into the header, as a writer does last."""
    struct.pack_into(">I", batch, CRC_AT, crc32c(bytes(batch[CRC_COVERED_START:])))


def hand_batch(
    records: bytes,
    count: int,
    *,
    base_offset: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = 0,
) -> bytes:
    """A batch assembled field by field (docs/kafka-formats.md §1.1) around a records region."""
    out = bytearray(
        HEADER.pack(
            base_offset,
            HEADER_SIZE - LOG_OVERHEAD + len(records),
            partition_leader_epoch,
            2,
            0,
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
    )
    out += records
    restamp_crc(out)
    return bytes(out)


def zigzag(n: int) -> bytes:
    """A varint as the record format writes it: ZigZag, then base-128 groups (docs/kafka-formats.md)."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def record(body: bytes) -> bytes:
    """A record: its length varint, then `body` (attributes onwards)."""
    return zigzag(len(body)) + body


def control_batch(
    control_type: int,
    *,
    base_offset: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
) -> bytes:
    """An EndTransactionMarker batch (docs/kafka-formats.md §2): 78 bytes, one record, no headers."""
    key = struct.pack(">hh", 0, control_type)
    value = struct.pack(">hi", 0, coordinator_epoch)
    body = b"\x00" + zigzag(0) + zigzag(0) + zigzag(len(key)) + key + zigzag(len(value)) + value + zigzag(0)
    batch = hand_batch(
        record(body),
        1,
        base_offset=base_offset,
        attributes=TRANSACTIONAL | CONTROL,
        last_offset_delta=0,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
    )
    assert len(batch) == 78
    return batch


# --- expectations --------------------------------------------------------------------------------------------


def _hex(b: bytes | None) -> str | None:
    return None if b is None else b.hex()


def header_fields(batch: bytes) -> dict[str, int]:
    names = (
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
    return dict(zip(names, HEADER.unpack_from(batch), strict=True))


def sequence(base_sequence: int, delta: int) -> int:
    """docs/kafka-formats.md §1.1 incSeq: sequences wrap from 2147483647 to 0."""
    if base_sequence < 0:
        return -1
    return delta - (2**31 - 1 - base_sequence) - 1 if base_sequence > 2**31 - 1 - delta else base_sequence + delta


def expected_decode(batch: bytes, rows: tuple[Row, ...], *, log_append_time: int | None = None) -> dict[str, Any]:
    """The header as written and the records as given to the writer (`log_append_time`: every
    record's timestamp is the broker's, docs/kafka-formats.md §1.2)."""
    header = header_fields(batch)
    attributes = header["attributes"]
    return {
        "size": len(batch),
        "header": header,
        "compression": next(name for name, code in CODECS.items() if code == attributes & 0x07),
        "timestamp_type": "LogAppendTime" if attributes & LOG_APPEND_TIME else "CreateTime",
        "transactional": bool(attributes & TRANSACTIONAL),
        "control": bool(attributes & CONTROL),
        "records": [
            {
                "offset": header["base_offset"] + delta,
                "timestamp": row.timestamp if log_append_time is None else log_append_time,
                "key": _hex(row.key),
                "value": _hex(row.value),
                "headers": [{"key": name.encode().hex(), "value": _hex(value)} for name, value in row.headers],
                "sequence": sequence(header["base_sequence"], delta),
            }
            for delta, row in enumerate(rows)
        ],
    }


def error(kind: str, python: str = "CorruptRecordError") -> dict[str, Any]:
    """What a reader must do with a damaged file: fail at stage `kind` (README), with `python` the
    storage.errors class the Python readers raise."""
    return {"error": {"kind": kind, "python": python}}


# --- the corpus ------------------------------------------------------------------------------------------------


def valid_entries() -> list[Entry]:
    entries = []

    def add(name: str, batch: bytes, rows: tuple[Row, ...], description: str, **extra: Any) -> None:
        expected = expected_decode(batch, rows, log_append_time=extra.pop("log_append_time", None))
        entries.append(Entry(name, batch, description, {**expected, **extra}))

    add(
        "none.bin",
        kafka_python_batch(PLAIN_ROWS, base_offset=100),
        PLAIN_ROWS,
        "kafka-python, uncompressed, no producer id: null key, null value, empty key and value, "
        "headers (a null value, a non-ASCII name), a 200-byte value, timestamps out of order",
    )
    for offset, codec in enumerate(("gzip", "snappy", "lz4", "zstd")):
        add(
            f"{codec}.bin",
            kafka_python_batch(CODEC_ROWS, codec=codec, base_offset=1000 * (offset + 1)),
            CODEC_ROWS,
            f"kafka-python, {codec}-compressed records region"
            + (" (gzip header MTIME set to 0, batch CRC recomputed)" if codec == "gzip" else ""),
        )
    add(
        "idempotent.bin",
        kafka_python_batch(SMALL_ROWS, base_offset=7, producer_id=4242, producer_epoch=3, base_sequence=17),
        SMALL_ROWS,
        "kafka-python, idempotent (producer id 4242, epoch 3, base sequence 17), not transactional",
    )
    add(
        "idempotent-sequence-wrap.bin",
        kafka_python_batch(SMALL_ROWS, base_offset=10, producer_id=4242, producer_epoch=3, base_sequence=2**31 - 2),
        SMALL_ROWS,
        "kafka-python, idempotent with base sequence 2147483646: the third record's sequence wraps to 0",
    )
    add(
        "transactional.bin",
        kafka_python_batch(
            SMALL_ROWS, base_offset=3, producer_id=1000, producer_epoch=5, base_sequence=0, transactional=True
        ),
        SMALL_ROWS,
        "kafka-python, transactional (producer id 1000, epoch 5) - the batch of docs/kafka-formats.md §7 at offset 3",
    )
    add(
        "many-records.bin",
        kafka_python_batch(MANY_ROWS, base_offset=5000),
        MANY_ROWS,
        "kafka-python, 130 records with null keys: multi-byte offset and timestamp delta varints",
    )

    appended = T + 60_000
    stamped = bytearray(kafka_python_batch(SMALL_ROWS, base_offset=20))
    struct.pack_into(">h", stamped, ATTRIBUTES_AT, LOG_APPEND_TIME)
    struct.pack_into(">q", stamped, MAX_TIMESTAMP_AT, appended)
    restamp_crc(stamped)
    add(
        "log-append-time.bin",
        bytes(stamped),
        SMALL_ROWS,
        "kafka-python's batch as a LOG_APPEND_TIME leader stamps it (attribute bit 3, maxTimestamp = append time, "
        "CRC recomputed): every record's timestamp is the batch's maxTimestamp",
        log_append_time=appended,
    )

    for name, control_type, pid, epoch, coordinator_epoch, base in (
        ("control-commit.bin", 1, 1000, 5, 7, 6),
        ("control-abort.bin", 0, 2000, 0, 0, 9),
    ):
        batch = control_batch(
            control_type,
            base_offset=base,
            producer_id=pid,
            producer_epoch=epoch,
            coordinator_epoch=coordinator_epoch,
            timestamp=T + 100,
        )
        marker = "COMMIT" if control_type else "ABORT"
        key, value = struct.pack(">hh", 0, control_type), struct.pack(">hi", 0, coordinator_epoch)
        expected = expected_decode(batch, (Row(key, value, T + 100),))
        expected["marker"] = {"type": marker, "coordinator_epoch": coordinator_epoch}
        entries.append(
            Entry(
                name,
                batch,
                f"hand-assembled {marker} marker (docs/kafka-formats.md §2): producer id "
                f"{pid}, epoch {epoch}, coordinator epoch {coordinator_epoch}",
                expected,
            )
        )

    empty = hand_batch(
        b"",
        0,
        base_offset=30,
        attributes=0,
        last_offset_delta=2,
        base_timestamp=-1,
        max_timestamp=T + 2,
        producer_id=4242,
        producer_epoch=3,
        base_sequence=20,
    )
    add(
        "empty-compacted.bin",
        empty,
        (),
        "hand-assembled header of a batch emptied by compaction: records count 0, lastOffsetDelta 2 kept, no records",
    )
    return entries


def damaged_entries(valid: dict[str, bytes]) -> list[Entry]:
    """Bytes every reader must refuse, each with the stage it must fail at (README)."""
    plain = valid["none.bin"]
    entries = []

    def add(name: str, data: bytes, description: str, kind: str, python: str = "CorruptRecordError") -> None:
        entries.append(Entry(name, bytes(data), description, error(kind, python)))

    def patched(batch: bytes, at: int, fmt: str, value: int, *, fix_crc: bool) -> bytes:
        out = bytearray(batch)
        struct.pack_into(fmt, out, at, value)
        if fix_crc:
            restamp_crc(out)
        return bytes(out)

    length = HEADER.unpack_from(plain)[1]
    add("damaged-short-header.bin", plain[:40], "the first 40 bytes of none.bin: less than a header", "frame")
    add(
        "damaged-truncated.bin",
        plain[:-10],
        "none.bin without its last 10 bytes: the batch runs past the file",
        "frame",
    )
    add(
        "damaged-length-beyond-file.bin",
        patched(plain, LENGTH_AT, ">i", length + 100, fix_crc=False),
        "none.bin with batchLength 100 more than the file holds",
        "frame",
    )
    add(
        "damaged-length-below-minimum.bin",
        patched(plain, LENGTH_AT, ">i", 40, fix_crc=False),
        "none.bin with batchLength 40, below the 49 of an empty batch",
        "frame",
    )
    add(
        "damaged-length-short.bin",
        patched(plain, LENGTH_AT, ">i", length - 7, fix_crc=False),
        "none.bin with batchLength 7 short: a whole frame, but the CRC is then taken over the wrong bytes",
        "crc",
    )
    add(
        "damaged-bad-magic.bin",
        patched(plain, MAGIC_AT, ">b", 1, fix_crc=False),
        "none.bin with magic 1 (outside the CRC)",
        "frame",
    )
    flipped = bytearray(plain)
    flipped[-5] ^= 0x01
    add("damaged-crc.bin", flipped, "none.bin with one bit of the last record's value flipped; CRC as written", "crc")
    add(
        "damaged-count-too-large.bin",
        patched(plain, RECORDS_COUNT_AT, ">i", 1000, fix_crc=True),
        "none.bin saying 1000 records (it holds 5), CRC recomputed: the records end first",
        "records",
    )
    add(
        "damaged-count-too-small.bin",
        patched(plain, RECORDS_COUNT_AT, ">i", 2, fix_crc=True),
        "none.bin saying 2 records (it holds 5), CRC recomputed: bytes remain after the last",
        "records",
    )
    add(
        "damaged-count-negative.bin",
        patched(plain, RECORDS_COUNT_AT, ">i", -1, fix_crc=True),
        "none.bin saying -1 records, CRC recomputed",
        "records",
        "InvalidRecordError",
    )

    def one_record(body: bytes) -> bytes:
        return hand_batch(
            record(body), 1, base_offset=0, attributes=0, last_offset_delta=0, base_timestamp=T, max_timestamp=T
        )

    fields = b"\x00" + zigzag(0) + zigzag(0)  # attributes, timestampDelta, offsetDelta
    add(
        "damaged-varint-too-long.bin",
        one_record(fields + b"\xff\xff\xff\xff\xff\x01" + zigzag(0) + zigzag(0)),
        "hand-assembled record whose key length varint runs to 6 bytes (at most 5 are allowed)",
        "records",
    )
    add(
        "damaged-key-length-overrun.bin",
        one_record(fields + zigzag(100) + b"abc" + zigzag(0) + zigzag(0)),
        "hand-assembled record whose key length (100) runs past the records region",
        "records",
    )
    add(
        "damaged-record-length-mismatch.bin",
        one_record(fields + zigzag(1) + b"k" + zigzag(1) + b"v" + zigzag(0) + b"\x00"),
        "hand-assembled record whose length counts one byte more than its fields",
        "records",
    )
    add(
        "damaged-header-key-negative.bin",
        one_record(fields + zigzag(1) + b"k" + zigzag(1) + b"v" + zigzag(1) + zigzag(-1) + zigzag(1) + b"x"),
        "hand-assembled record with a header whose key length is -1 (a null header key is illegal)",
        "records",
    )

    for codec in ("gzip", "snappy", "lz4", "zstd"):
        batch = valid[f"{codec}.bin"]
        payload = batch[HEADER_SIZE:]
        cut = bytearray(batch[:HEADER_SIZE] + payload[: len(payload) // 2])
        struct.pack_into(">i", cut, LENGTH_AT, len(cut) - LOG_OVERHEAD)
        restamp_crc(cut)
        add(
            f"damaged-{codec}-payload.bin",
            cut,
            f"{codec}.bin with its compressed stream cut in half, batchLength and CRC recomputed",
            "decompress",
        )
    add(
        "damaged-unknown-codec.bin",
        patched(plain, ATTRIBUTES_AT, ">h", 5, fix_crc=True),
        "none.bin with compression code 5 (no codec has it), CRC recomputed",
        "decompress",
        "UnsupportedCompressionTypeError",
    )
    return entries


def corpus() -> list[Entry]:
    """Every corpus file, valid ones first, in manifest order."""
    valid = valid_entries()
    return valid + damaged_entries({e.name: e.data for e in valid})


def manifest_text(entries: list[Entry]) -> str:
    """The manifest as committed: one JSON document, each record on one line so a diff stays readable."""
    batches = []
    for e in entries:
        item = {"file": e.name, "description": e.description, **e.expected}
        records = item.get("records")
        if records:
            item["records"] = "@records@"
        text = json.dumps(item, indent=2, ensure_ascii=True)
        if records:
            lines = ",\n".join("    " + json.dumps(r, ensure_ascii=True) for r in records)
            text = text.replace('"@records@"', "[\n" + lines + "\n  ]")
        batches.append("  " + text.replace("\n", "\n  "))
    return (
        '{"format": "RecordBatch v2 (magic 2), one batch per file", "batches_dir": "batches", "batches": [\n'
        + ",\n".join(batches)
        + "\n]}\n"
    )


def main() -> None:
    entries = corpus()
    text = manifest_text(entries)
    assert [b["file"] for b in json.loads(text)["batches"]] == [e.name for e in entries]
    os.makedirs(BATCHES_DIR, exist_ok=True)
    for stale in set(os.listdir(BATCHES_DIR)) - {e.name for e in entries}:
        os.remove(os.path.join(BATCHES_DIR, stale))
    for e in entries:
        with open(os.path.join(BATCHES_DIR, e.name), "wb") as f:
            f.write(e.data)
    with open(MANIFEST, "w", encoding="ascii") as f:
        f.write(text)
    print(f"wrote {len(entries)} batches ({sum(len(e.data) for e in entries)} bytes) and {MANIFEST}")


if __name__ == "__main__":
    main()
